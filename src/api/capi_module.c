/*
** capi_module.c -- the C API's modules and building (src/tilua.h): every
** handle is checked against the contract before the core sees it, and every
** call that allocates runs protected.
*/
#include <stdlib.h>
#include <string.h>

#include "../passes/passes.h"
#include "../ptx/ptx.h"
#include "capi_impl.h"

#define OP(o) ((IrOp *)(o).ptr)
#define TYPE(t) ((const IrType *)(t).ptr)
#define ATTR(a) ((const IrAttr *)(a).ptr)

/* {======================================================================
** Handles of ops, blocks and values
** ======================================================================= */

/* The context of an op handle, refusing an erased op; NULL when refused. */
static TlCtx *enter_op(uint64_t serial, const IrOp *op, const char *fn, const char *what) {
  TlCtx *c = tl_enter(serial, op, fn);
  return c && tl_check_live_op(c, fn, what, op) ? c : NULL;
}

/* A module handle: a live builtin.module op. */
static TlCtx *enter_module(tlModule m, const char *fn) {
  TlCtx *c = enter_op(m.context, m.ptr, fn, "the module");
  if (c && OP(m)->kind != OP_MODULE) {
    tl_error(c, fn, "the module handle holds a '%s' op", ir_op_name(OP(m)));
    return NULL;
  }
  return c;
}

static TlCtx *enter_block(tlBlock b, const char *fn) {
  TlCtx *c = tl_enter(b.context, b.ptr, fn);
  return c && tl_check_live_op(c, fn, "the block", ir_block_parent_op(b.ptr)) ? c : NULL;
}

/* Types for c (all non-null, of c). */
static bool check_types(TlCtx *c, const char *fn, const char *what, intptr_t n, const tlType *ts) {
  if (!tl_check_count(c, fn, what, n, ts)) return false;
  for (intptr_t i = 0; i < n; i++) {
    char w[64];
    snprintf(w, sizeof w, "%s #%lld", what, (long long)i);
    if (!tl_check_owner(c, fn, w, ts[i].context, ts[i].ptr)) return false;
  }
  return true;
}

/* }====================================================================== */

/* {======================================================================
** Modules
** ======================================================================= */

static IrOp *empty_module(TlCtx *c) {
  IrOp *m = ir_op_create(c->ir, OP_MODULE, ir_loc_unknown(), 0, NULL, 0, NULL, 1);
  ir_region_ensure_block(c->ir, &m->regions[0]);
  return m;
}

tlModule tlModuleCreateEmpty(tlContext ctx) {
  TlCtx *c = tl_enter(ctx.context, ctx.ptr, "tlModuleCreateEmpty");
  tlModule r = {NULL, 0};
  if (c) TL_PROTECTED(c, "tlModuleCreateEmpty", r = tl_module(c, empty_module(c)));
  return r;
}

bool tlModuleIsNull(tlModule m) { return m.ptr == NULL; }

tlOperation tlModuleGetOperation(tlModule m) {
  tlOperation r = {NULL, 0};
  if (enter_module(m, "tlModuleGetOperation")) r = (tlOperation){m.ptr, m.context};
  return r;
}

tlBlock tlModuleGetBody(tlModule m) {
  tlBlock r = {NULL, 0};
  TlCtx *c = enter_module(m, "tlModuleGetBody");
  if (c) TL_PROTECTED(c, "tlModuleGetBody", r = tl_block(c, ir_region_ensure_block(c->ir, &OP(m)->regions[0])));
  return r;
}

static bool verify(TlCtx *c, IrOp *op) { return ir_verify(op) == IR_OK; }

tlLogicalResult tlModuleVerify(tlModule m) {
  TlCtx *c = enter_module(m, "tlModuleVerify");
  bool ok = false;
  if (!c) return (tlLogicalResult){0};
  TL_PROTECTED(c, "tlModuleVerify", ok = verify(c, OP(m)));
  return c->broken ? (tlLogicalResult){0} : tl_done(c, ok);
}

static bool run_pipeline(TlCtx *c, IrOp *m, tlStringRef pipeline) {
  char *spec = ir_strndup(pipeline.data ? pipeline.data : "", pipeline.length);
  IrPipeline p;
  IrResult r = ir_pipeline_parse(c->ir, spec, &p);
  ir_free(spec);
  /* the passes trust verified IR: invalid input stops here with the verifier's errors */
  if (r == IR_OK) r = ir_verify(m);
  if (r != IR_OK) return false;
  /* a pipeline that lowers to PTX is a compile: the protocol check of the input first */
  for (uint32_t i = 0; i < p.n; i++)
    if (strcmp(p.steps[i].pass->name, "convert-cutlass-to-nvvm") == 0) {
      if (!tl_lua_compile_check(c, "tlModuleRunPipeline", m)) return false;
      break;
    }
  for (uint32_t i = 0; i < p.n; i++) /* a pass written in Lua runs in the context's Lua state */
    if (p.steps[i].pass->lua_fn) return tl_lua_run_pipeline(c, "tlModuleRunPipeline", m, &p);
  return ir_pipeline_run(&p, m, NULL) == IR_OK;
}

tlLogicalResult tlModuleRunPipeline(tlModule m, tlStringRef pipeline) {
  static const char fn[] = "tlModuleRunPipeline";
  TlCtx *c = enter_module(m, fn);
  bool ok = false;
  if (!c || !tl_check_string(c, fn, "the pipeline", pipeline)) return (tlLogicalResult){0};
  if (pipeline.length && memchr(pipeline.data, 0, pipeline.length)) { /* {NULL, 0}: memchr(NULL) is UB */
    tl_error(c, fn, "the pipeline text holds a NUL byte");
    return (tlLogicalResult){0};
  }
  TL_PROTECTED(c, fn, ok = run_pipeline(c, OP(m), pipeline));
  return c->broken ? (tlLogicalResult){0} : tl_done(c, ok);
}

static void print_op(IrOp *op, tlStringCallback cb, void *ud) {
  StrBuf sb;
  sb_init(&sb);
  ir_print_op(&sb, op, NULL);
  cb(tlStringRefCreate(sb.data ? sb.data : "", sb.len), ud);
  sb_free(&sb);
}

void tlModulePrint(tlModule m, tlStringCallback callback, void *userData) {
  TlCtx *c = enter_module(m, "tlModulePrint");
  if (c && callback) TL_PROTECTED(c, "tlModulePrint", print_op(OP(m), callback, userData));
}

static bool emit_ptx(IrOp *m, tlStringCallback cb, void *ud) {
  char *text = NULL;
  if (ir_verify(m) != IR_OK || ptx_emit_module(m, &text) != IR_OK) return false;
  cb(tlStringRefCreate(text, strlen(text)), ud);
  ir_free(text);
  return true;
}

tlLogicalResult tlModuleEmitPTX(tlModule m, tlStringCallback callback, void *userData) {
  static const char fn[] = "tlModuleEmitPTX";
  TlCtx *c = enter_module(m, fn);
  bool ok = false;
  if (!c) return (tlLogicalResult){0};
  if (!callback) {
    tl_error(c, fn, "the callback is NULL");
    return (tlLogicalResult){0};
  }
  TL_PROTECTED(c, fn, ok = emit_ptx(OP(m), callback, userData));
  return c->broken ? (tlLogicalResult){0} : tl_done(c, ok);
}

/* }====================================================================== */

/* {======================================================================
** Building
** ======================================================================= */

typedef struct KernelArgs {
  tlStringRef name;
  intptr_t n;
  const tlType *types;
  const tlStringRef *names;
  unsigned block[3];
} KernelArgs;

static IrOp *make_kernel(TlCtx *c, IrOp *mod, const KernelArgs *a) {
  IrContext *ctx = c->ir;
  IrOp *k = ir_op_create(ctx, OP_TILE_KERNEL, ir_loc_unknown(), 0, NULL, 0, NULL, 1);
  ir_op_set_attr(k, "sym_name", ir_attr_str(ctx, a->name.data, a->name.length));
  int64_t block[3];
  for (int i = 0; i < 3; i++) block[i] = a->block[i] ? a->block[i] : 1;
  IrNamedAttr spec[] = {{ir_intern_cstr(ctx, "block"), ir_attr_int_array(ctx, 3, block)}};
  ir_op_set_attr(k, "kernel_spec", ir_attr_dict(ctx, 1, spec));
  IrBlock *body = ir_region_ensure_block(ctx, &k->regions[0]);
  const IrAttr **names = ir_malloc((size_t)(a->n > 0 ? a->n : 1) * sizeof *names);
  for (intptr_t i = 0; i < a->n; i++) {
    ir_block_add_arg(ctx, body, TYPE(a->types[i]));
    char tmp[32];
    snprintf(tmp, sizeof tmp, "arg%lld", (long long)i);
    names[i] = a->names ? ir_attr_str(ctx, a->names[i].data ? a->names[i].data : "", a->names[i].length)
                        : ir_attr_cstr(ctx, tmp);
  }
  ir_op_set_attr(k, "arg_names", ir_attr_array(ctx, (uint32_t)a->n, names));
  ir_free(names);
  ir_block_append(ir_region_ensure_block(ctx, &mod->regions[0]), k); /* a parsed `module {}` has no block */
  return k;
}

tlOperation tlKernelCreate(tlModule m, tlStringRef name, intptr_t nParams, const tlType *paramTypes,
                           const tlStringRef *paramNames, unsigned blockX, unsigned blockY,
                           unsigned blockZ) {
  static const char fn[] = "tlKernelCreate";
  TlCtx *c = enter_module(m, fn);
  tlOperation r = {NULL, 0};
  if (!c || !tl_check_string(c, fn, "the name", name) ||
      !check_types(c, fn, "parameter type", nParams, paramTypes))
    return r;
  if (!name.length) {
    tl_error(c, fn, "the kernel name is empty");
    return r;
  }
  for (intptr_t i = 0; paramNames && i < nParams; i++) {
    char w[48];
    snprintf(w, sizeof w, "parameter name #%lld", (long long)i);
    if (!tl_check_string(c, fn, w, paramNames[i])) return r;
  }
  KernelArgs a = {name, nParams, paramTypes, paramNames, {blockX, blockY, blockZ}};
  TL_PROTECTED(c, fn, r = tl_op(c, make_kernel(c, OP(m), &a)));
  return r;
}

static IrBlock *region_block(TlCtx *c, IrRegion *reg, intptr_t n, const tlType *types) {
  if (!reg->first) {
    IrBlock *b = ir_block_create(c->ir);
    for (intptr_t i = 0; i < n; i++) ir_block_add_arg(c->ir, b, TYPE(types[i]));
    ir_region_append_block(reg, b);
  }
  return reg->first;
}

/* Index i of op's n regions or results (`what`); reported when out of range. */
static bool check_op_index(TlCtx *c, const char *fn, const char *what, intptr_t i, uint32_t n, IrOp *op) {
  return tl_require(c, fn, i >= 0 && i < (intptr_t)n, "%s %lld is out of range ('%s' has %u)", what, (long long)i,
                    ir_op_name(op), n);
}

tlBlock tlOperationGetRegionBlock(tlOperation op, intptr_t region, intptr_t nArgs, const tlType *argTypes) {
  static const char fn[] = "tlOperationGetRegionBlock";
  TlCtx *c = enter_op(op.context, op.ptr, fn, "the op");
  tlBlock r = {NULL, 0};
  IrOp *o = OP(op);
  if (!c || !check_op_index(c, fn, "region", region, o->nregions, o)) return r;
  IrRegion *reg = &o->regions[region];
  if (!reg->first && !check_types(c, fn, "argument type", nArgs, argTypes)) return r;
  TL_PROTECTED(c, fn, r = tl_block(c, region_block(c, reg, nArgs, argTypes)));
  return r;
}

intptr_t tlBlockGetNumArguments(tlBlock b) {
  return enter_block(b, "tlBlockGetNumArguments") ? (intptr_t)((IrBlock *)b.ptr)->nargs : -1;
}

tlValue tlBlockGetArgument(tlBlock b, intptr_t pos) {
  static const char fn[] = "tlBlockGetArgument";
  TlCtx *c = enter_block(b, fn);
  tlValue r = {NULL, 0};
  IrBlock *blk = b.ptr;
  if (!c || !tl_require(c, fn, pos >= 0 && pos < (intptr_t)blk->nargs,
                        "argument %lld is out of range (the block has %u)", (long long)pos, blk->nargs))
    return r;
  return tl_value(c, blk->args[pos]);
}

typedef struct OpArgs {
  int kind;
  intptr_t nopd, nres, nattr, nreg;
  const tlValue *opds;
  const tlType *res;
  const tlNamedAttribute *attrs;
} OpArgs;

static IrOp *make_op(TlCtx *c, IrBlock *b, const OpArgs *a) {
  IrValue **opds = ir_malloc((size_t)(a->nopd > 0 ? a->nopd : 1) * sizeof *opds);
  const IrType **tys = ir_malloc((size_t)(a->nres > 0 ? a->nres : 1) * sizeof *tys);
  for (intptr_t i = 0; i < a->nopd; i++) opds[i] = a->opds[i].ptr;
  for (intptr_t i = 0; i < a->nres; i++) tys[i] = TYPE(a->res[i]);
  IrOp *op = ir_op_create(c->ir, (IrOpKind)a->kind, ir_loc_unknown(), (uint32_t)a->nopd, opds,
                          (uint32_t)a->nres, tys, (uint32_t)a->nreg);
  ir_free(opds);
  ir_free(tys);
  for (intptr_t i = 0; i < a->nattr; i++) {
    const char *n = ir_intern(c->ir, a->attrs[i].name.data, a->attrs[i].name.length);
    ir_op_set_attr(op, n, ATTR(a->attrs[i].attribute));
  }
  if (ir_verify_signature(op) != IR_OK) {
    /* a detached op: its uses of the operands must go, or the values would list them */
    ir_op_erase(op);
    return NULL;
  }
  ir_block_append(b, op);
  return op;
}

tlOperation tlOperationCreate(tlBlock block, tlStringRef name, intptr_t nOperands,
                              const tlValue *operands, intptr_t nResults, const tlType *resultTypes,
                              intptr_t nAttributes, const tlNamedAttribute *attributes, intptr_t nRegions) {
  static const char fn[] = "tlOperationCreate";
  TlCtx *c = enter_block(block, fn);
  tlOperation r = {NULL, 0};
  if (!c || !tl_check_string(c, fn, "the op name", name)) return r;
  int kind = ir_op_lookup(name.data ? name.data : "", name.length);
  const char *near = kind < 0 ? ir_op_closest(name.data ? name.data : "", (size_t)name.length) : NULL;
  if (!tl_require(c, fn, kind >= 0, "unknown operation '%.*s'%s%s%s", (int)(name.length > 64 ? 64 : name.length),
                  name.data, near ? "; did you mean '" : "", near ? near : "", near ? "'?" : "") ||
      !tl_check_count(c, fn, "operand", nOperands, operands) ||
      !check_types(c, fn, "result type", nResults, resultTypes) ||
      !tl_check_count(c, fn, "attribute", nAttributes, attributes) ||
      !tl_check_named(c, fn, nAttributes, attributes) ||
      !tl_require(c, fn, nRegions >= 0 && nRegions <= 16, "region count %lld is out of range [0, 16]",
                  (long long)nRegions))
    return r;
  /* the verifier, printer and passes recurse once per level */
  IrOp *holder = nRegions > 0 ? ir_block_parent_op((IrBlock *)block.ptr) : NULL;
  if (!tl_require(c, fn, !holder || ir_op_depth(holder) + 1 < IR_MAX_NESTING, "regions nest at most %d levels deep",
                  IR_MAX_NESTING))
    return r;
  for (intptr_t i = 0; i < nOperands; i++) {
    char w[48];
    snprintf(w, sizeof w, "operand #%lld", (long long)i);
    if (!tl_check_owner(c, fn, w, operands[i].context, operands[i].ptr) ||
        !tl_check_live_op(c, fn, w, tl_value_host(operands[i].ptr)))
      return r;
  }
  OpArgs a = {kind, nOperands, nResults, nAttributes, nRegions, operands, resultTypes, attributes};
  TL_PROTECTED(c, fn, r = tl_op(c, make_op(c, block.ptr, &a)));
  if (!c->broken) ir_diag_flush(c->ir);
  return r;
}

bool tlOperationIsNull(tlOperation op) { return op.ptr == NULL; }

tlValue tlOperationGetResult(tlOperation op, intptr_t pos) {
  static const char fn[] = "tlOperationGetResult";
  TlCtx *c = enter_op(op.context, op.ptr, fn, "the op");
  tlValue r = {NULL, 0};
  IrOp *o = OP(op);
  if (!c || !check_op_index(c, fn, "result", pos, o->nresults, o)) return r;
  return tl_value(c, &o->results[pos]);
}

tlLogicalResult tlOperationVerify(tlOperation op) {
  TlCtx *c = enter_op(op.context, op.ptr, "tlOperationVerify", "the op");
  bool ok = false;
  if (!c) return (tlLogicalResult){0};
  TL_PROTECTED(c, "tlOperationVerify", ok = verify(c, OP(op)));
  return c->broken ? (tlLogicalResult){0} : tl_done(c, ok);
}

void tlOperationPrint(tlOperation op, tlStringCallback callback, void *userData) {
  TlCtx *c = enter_op(op.context, op.ptr, "tlOperationPrint", "the op");
  if (c && callback) TL_PROTECTED(c, "tlOperationPrint", print_op(OP(op), callback, userData));
}

tlType tlValueGetType(tlValue v) {
  static const char fn[] = "tlValueGetType";
  TlCtx *c = tl_enter(v.context, v.ptr, fn);
  tlType r = {NULL, 0};
  if (c && tl_check_live_op(c, fn, "the value", tl_value_host(v.ptr)))
    r = tl_type(c, ((IrValue *)v.ptr)->type);
  return r;
}

/* }====================================================================== */
