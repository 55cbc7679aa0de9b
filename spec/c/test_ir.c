/*
** test_ir.c -- C tests of the IR core: uniquing, attributes, ops and use
** lists, cloning, walks, erasure, the verifier's messages, the printer and
** the two passes. Each check prints its name on failure; exit 1 if any fails.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dialects/kernel.h"
#include "ir/ir.h"
#include "passes/passes.h"
#include "ptx/ptx.h"

static int failures, checks;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    checks++;                                                                                      \
    if (!(cond)) {                                                                                 \
      failures++;                                                                                  \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                     \
    }                                                                                              \
  } while (0)

/* Does some pending diagnostic contain text? Clears them. */
static bool diag_has(IrContext *ctx, const char *text) {
  bool found = false;
  for (IrDiag *d = ir_diag_pending(ctx); d; d = d->next)
    if (strstr(d->message, text)) found = true;
  if (!found)
    for (IrDiag *d = ir_diag_pending(ctx); d; d = d->next)
      fprintf(stderr, "  (diagnostic: %s)\n", d->message);
  ir_diag_clear(ctx);
  return found;
}

static void test_uniquing(void) {
  IrContext *ctx = ir_context_create();
  CHECK(ir_type_int(ctx, 32) == ir_type_int(ctx, 32));
  CHECK(ir_type_int(ctx, 32) != ir_type_int(ctx, 16));
  const IrType *f32 = ir_type_float(ctx, IR_F32);
  CHECK(ir_type_ptr(ctx, f32, IR_MS_GLOBAL) == ir_type_ptr(ctx, f32, IR_MS_GLOBAL));
  CHECK(ir_type_ptr(ctx, f32, IR_MS_GLOBAL) != ir_type_ptr(ctx, f32, IR_MS_SHARED));
  int64_t s1[] = {4, 128}, s2[] = {4, 128}, s3[] = {4, IR_DYNAMIC};
  CHECK(ir_type_memref(ctx, f32, 2, s1, IR_MS_SHARED, 128) ==
        ir_type_memref(ctx, f32, 2, s2, IR_MS_SHARED, 128));
  CHECK(ir_type_memref(ctx, f32, 2, s1, IR_MS_SHARED, 0) !=
        ir_type_memref(ctx, f32, 2, s1, IR_MS_SHARED, 128));
  CHECK(!ir_type_has_static_shape(ir_type_memref(ctx, f32, 2, s3, IR_MS_SHARED, 0)));
  CHECK(ir_type_num_elements(ir_type_memref(ctx, f32, 2, s1, IR_MS_SHARED, 0)) == 512);
  CHECK(ir_attr_i32(ctx, 7) == ir_attr_int(ctx, 7, ir_type_int(ctx, 32)));
  CHECK(ir_attr_int(ctx, 255, ir_type_int(ctx, 8))->u.i == -1); /* truncated, sign-extended */
  CHECK(ir_attr_int(ctx, 3, ir_type_int(ctx, 1))->u.i == 1);
  CHECK(ir_attr_cstr(ctx, "x") == ir_attr_cstr(ctx, "x"));
  CHECK(ir_attr_cstr(ctx, "x") != ir_attr_sym(ctx, "x", 1));
  CHECK(ir_attr_float(ctx, 0.1, f32)->u.f == (double)0.1f);
  CHECK(ir_attr_float(ctx, -0.0, f32) != ir_attr_float(ctx, 0.0, f32));
  CHECK(ir_float_round(65519.0, IR_F16) == 65504.0);
  CHECK(isinf(ir_float_round(65520.0, IR_F16)));
  CHECK(ir_float_round(1.0 + 1.0 / 512, IR_BF16) == 1.0);
  CHECK(ir_float_from_bits(0x3C00, IR_F16) == 1.0);
  CHECK(ir_float_from_bits(0x3F80, IR_BF16) == 1.0);
  IrNamedAttr e1[] = {{"b", ir_attr_i64(ctx, 2)}, {"a", ir_attr_i64(ctx, 1)}};
  IrNamedAttr e2[] = {{"a", ir_attr_i64(ctx, 1)}, {"b", ir_attr_i64(ctx, 2)}};
  const IrAttr *d1 = ir_attr_dict(ctx, 2, e1), *d2 = ir_attr_dict(ctx, 2, e2);
  CHECK(d1 == d2);
  CHECK(strcmp(d1->u.dict.entries[0].name, "a") == 0);
  CHECK(ir_attr_dict_get(d1, "b") == ir_attr_i64(ctx, 2));
  char *s = ir_type_to_string(ir_type_memref(ctx, f32, 2, s3, IR_MS_SHARED, 64));
  CHECK(strcmp(s, "memref<4x?xf32, shared, swizzle64>") == 0);
  ir_free(s);
  ir_context_destroy(ctx);
}

/* A module with one kernel taking (i32, i32); returns the kernel body, b set
 * to build at its end. */
static IrBlock *kernel_body(IrContext *ctx, IrOp **module, IrBuilder *bp) {
  IrBuilder b;
  ir_builder_init(&b, ctx);
  *module = ir_build_module(&b);
  ir_builder_at_end(&b, (*module)->regions[0].first);
  IrOp *k = ir_build(&b, OP_TILE_KERNEL, 0, NULL, 0, NULL, 1);
  ir_op_set_attr(k, "sym_name", ir_attr_cstr(ctx, "k"));
  int64_t blk[] = {128, 1, 1};
  IrNamedAttr spec[] = {{"block", ir_attr_int_array(ctx, 3, blk)}};
  ir_op_set_attr(k, "kernel_spec", ir_attr_dict(ctx, 1, spec));
  IrBlock *body = ir_region_ensure_block(ctx, &k->regions[0]);
  ir_block_add_arg(ctx, body, ir_type_int(ctx, 32));
  ir_block_add_arg(ctx, body, ir_type_int(ctx, 32));
  ir_builder_init(bp, ctx);
  ir_builder_at_end(bp, body);
  return body;
}

static void test_ops_and_uses(void) {
  IrContext *ctx = ir_context_create();
  IrOp *m;
  IrBuilder b;
  IrBlock *body = kernel_body(ctx, &m, &b);
  IrValue *x = body->args[0], *y = body->args[1];
  IrValue *s = ir_build_binary(&b, OP_ARITH_ADDI, x, y);
  IrValue *t = ir_build_binary(&b, OP_ARITH_MULI, s, s);
  CHECK(ir_value_num_uses(s) == 2);
  CHECK(ir_value_num_uses(x) == 1);
  ir_value_replace_all_uses(s, y);
  CHECK(ir_value_num_uses(s) == 0 && ir_value_num_uses(y) == 3);
  ir_op_set_operand(t->def, 0, x);
  CHECK(ir_value_num_uses(y) == 2 && ir_value_num_uses(x) == 2);
  ir_op_append_operand(t->def, x); /* now 3 operands: the verifier must object */
  CHECK(ir_verify(m) == IR_FAIL);
  CHECK(diag_has(ctx, "expected 2 operands, got 3"));
  ir_op_erase_operand(t->def, 2);
  CHECK(ir_verify(m) == IR_OK);
  ir_op_erase(s->def);
  CHECK(ir_value_num_uses(x) == 1 && ir_value_num_uses(y) == 1);
  /* attributes stay sorted; removal works */
  ir_op_set_attr(t->def, "zeta", ir_attr_i64(ctx, 1));
  ir_op_set_attr(t->def, "alpha", ir_attr_i64(ctx, 2));
  CHECK(t->def->nattrs == 2 && strcmp(t->def->attrs[0].name, "alpha") == 0);
  ir_op_set_attr(t->def, "alpha", NULL);
  CHECK(t->def->nattrs == 1 && ir_op_attr(t->def, "zeta")->u.i == 1);
  /* clone keeps structure and remaps nested values */
  IrMapping map;
  ir_mapping_init(&map);
  IrOp *k = ir_op_parent_op(t->def);
  IrOp *k2 = ir_op_clone(ctx, k, &map);
  ir_op_set_attr(k2, "sym_name", ir_attr_cstr(ctx, "k2"));
  ir_block_append(m->regions[0].first, k2);
  IrBlock *body2 = k2->regions[0].first;
  CHECK(body2 != body && body2->nargs == 2);
  CHECK(body2->first->operands[0].value == body2->args[0]);
  CHECK(ir_mapping_get(&map, x) == body2->args[0]);
  ir_mapping_free(&map);
  CHECK(ir_verify(m) == IR_OK);
  char *a = ir_op_to_string(k, NULL), *c = ir_op_to_string(k2, NULL);
  CHECK(strstr(c, "arith.muli") != NULL);
  ir_free(a);
  ir_free(c);
  ir_context_destroy(ctx);
}

static bool count_op(IrOp *op, void *ud) {
  (void)op;
  (*(int *)ud)++;
  return true;
}

static void test_verifier_and_passes(void) {
  IrContext *ctx = ir_context_create();
  IrOp *m;
  IrBuilder b;
  IrBlock *body = kernel_body(ctx, &m, &b);
  const IrType *i32 = ir_type_int(ctx, 32);
  IrValue *c2 = ir_build_const_int(&b, 2, i32), *c3 = ir_build_const_int(&b, 3, i32);
  IrValue *sum = ir_build_binary(&b, OP_ARITH_ADDI, c2, c3); /* folds to 5 */
  IrValue *keep = ir_build_binary(&b, OP_ARITH_MULI, body->args[0], sum);
  ir_build_binary(&b, OP_ARITH_MULI, body->args[0], sum); /* duplicate of keep */
  IrValue *zero = ir_build_const_int(&b, 0, i32);
  ir_build_binary(&b, OP_ARITH_ADDI, keep, zero); /* dead: x + 0 */
  int n = 0;
  ir_walk_pre(m, count_op, &n);
  CHECK(n == 9);
  /* a use before its definition */
  IrValue *late = ir_build_const_int(&b, 9, i32);
  ir_op_set_operand(keep->def, 0, late);
  CHECK(ir_verify(m) == IR_FAIL);
  CHECK(diag_has(ctx, "does not dominate"));
  ir_op_set_operand(keep->def, 0, body->args[0]);
  CHECK(ir_verify(m) == IR_OK);
  IrPipeline p;
  CHECK(ir_pipeline_parse(ctx, "canonicalize,cse", &p) == IR_OK && p.n == 2);
  CHECK(ir_pipeline_parse(ctx, "canonicalize,nope", &p) == IR_FAIL);
  CHECK(diag_has(ctx, "unknown pass or pipeline 'nope'"));
  CHECK(ir_pipeline_parse(ctx, "cleanup", &p) == IR_OK && p.n == 3);
  CHECK(ir_pipeline_parse(ctx, "debug-hangs{ms=3}", &p) == IR_OK && p.n == 1 &&
        ir_attr_dict_get(p.steps[0].options, "ms")->u.i == 3);
  /* options a pass does not read, empty names and options on a pipeline are errors */
  CHECK(ir_pipeline_parse(ctx, "cse{max=3}", &p) == IR_FAIL);
  CHECK(diag_has(ctx, "pass 'cse' takes no options (got 'max')"));
  CHECK(ir_pipeline_parse(ctx, "debug-hangs{ms=3, name=x}", &p) == IR_FAIL);
  CHECK(diag_has(ctx, "pass 'debug-hangs' has no option 'name' (it reads: ms)"));
  CHECK(ir_pipeline_parse(ctx, ",,,", &p) == IR_FAIL);
  CHECK(diag_has(ctx, "empty pass name in pipeline \",,,\""));
  CHECK(ir_pipeline_parse(ctx, "cleanup{x=1}", &p) == IR_FAIL);
  CHECK(diag_has(ctx, "pipeline 'cleanup' takes no options"));
  CHECK(ir_pipeline_parse(ctx, "cleanup", &p) == IR_OK);
  CHECK(ir_pipeline_run(&p, m, NULL) == IR_OK);
  n = 0;
  ir_walk_pre(m, count_op, &n);
  /* module and kernel: everything was folded, merged, and then dead (no effects) */
  CHECK(n == 2);
  char *text = ir_op_to_string(m, NULL);
  CHECK(strstr(text, "arith.addi") == NULL);
  ir_free(text);
  ir_context_destroy(ctx);
}

static void test_printer(void) {
  IrContext *ctx = ir_context_create();
  IrOp *m;
  IrBuilder b;
  kernel_body(ctx, &m, &b);
  b.loc = ir_loc(ctx, "k.lua", 12, 0);
  ir_build_const_float(&b, 1.0 / 3.0, ir_type_float(ctx, IR_F32));
  ir_build_const_float(&b, INFINITY, ir_type_float(ctx, IR_F16));
  IrPrintOptions o = {true, 2};
  char *s = ir_op_to_string(m, &o);
  CHECK(strstr(s, "{value = 0.33333334 : f32} : f32 loc(\"k.lua\":12)") != NULL);
  CHECK(strstr(s, "{value = 0x7C00 : f16}") != NULL);
  ir_free(s);
  ir_context_destroy(ctx);
}

/* The op tables: attribute rows sorted by op (the readers search them),
** every nvvm op with a PTX row whose template fits the op, LOWER rows into nvvm. */
static void test_op_tables(void) {
  for (int k = 0; k < OP__COUNT; k++) {
    uint32_t n;
    const IrAttrSpec *s = ir_op_attr_specs((IrOpKind)k, &n);
    for (uint32_t i = 0; i < n; i++)
      CHECK(s[i].op == ir_op_attr_set((IrOpKind)k));
    const char *name = ir_op_info((IrOpKind)k)->name, *why;
    if (strncmp(name, "nvvm.", 5) == 0 && !ptx_check_template(k, &why)) {
      fprintf(stderr, "  %s: PTX row: %s\n", name, why);
      CHECK(!"an nvvm op's PTX row fits it");
    }
    int to = ir_op_lowers_to((IrOpKind)k);
    if (to >= 0) CHECK(strncmp(ir_op_info((IrOpKind)to)->name, "nvvm.", 5) == 0);
  }
  const char *why;
  CHECK(ptx_check_template(OP_NVVM_FENCE, &why));
}

/* The typed readers: defaults, values, enums, `ok`; the attribute check's messages. */
static void test_attr_readers(void) {
  IrContext *ctx = ir_context_create();
  IrOp *f = ir_op_create(ctx, OP_NVVM_FENCE, ir_loc_unknown(), 0, NULL, 0, NULL, 0);
  IrAttrs_NVVM_FENCE a = ir_attrs_NVVM_FENCE(f);
  CHECK(!a.ok && a.sem == FENCE_ACQ_REL && a.scope == -1); /* scope is required */
  ir_op_set_attr(f, "scope", ir_attr_cstr(ctx, "cluster"));
  a = ir_attrs_NVVM_FENCE(f);
  CHECK(a.ok && a.scope == SCOPE_CLUSTER);
  CHECK(ir_op_check_attrs(f));
  ir_op_set_attr(f, "sem", ir_attr_cstr(ctx, "seq"));
  CHECK(!ir_op_check_attrs(f) && diag_has(ctx, "unknown sem 'seq' (one of: acq_rel, sc)"));
  IrOp *w =
      ir_op_create(ctx, OP_NVVM_CP_ASYNC_BULK_WAIT_GROUP, ir_loc_unknown(), 0, NULL, 0, NULL, 0);
  ir_op_set_attr(w, "group", ir_attr_i64(ctx, 64));
  CHECK(!ir_op_check_attrs(w) && diag_has(ctx, "expected group in [0, 63], got 64"));
  CHECK(!ir_attrs_NVVM_CP_ASYNC_BULK_WAIT_GROUP(w).ok);
  IrAttrValue v;
  ir_op_set_attr(w, "group", ir_attr_i64(ctx, 3));
  CHECK(ir_op_attr_value(w, "read", 4, &v) && !v.present && v.i == 0);
  CHECK(ir_op_attr_value(w, "group", 5, &v) && v.present && v.i == 3);
  CHECK(!ir_op_attr_value(w, "pending", 7, &v));
  ir_context_destroy(ctx);
}

int main(void) {
  test_op_tables();
  test_attr_readers();
  test_uniquing();
  test_ops_and_uses();
  test_verifier_and_passes();
  test_printer();
  printf("test_ir: %d checks, %d failed\n", checks, failures);
  return failures ? 1 : 0;
}
