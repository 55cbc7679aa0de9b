/*
** rewrite.c -- the tools every lowering shares (rewrite.h).
*/
#include <stdlib.h>
#include <string.h>

#include "rewrite.h"

/* {======================================================================
** The rewriter and the kernel's entry
** ======================================================================= */

void rw_init(Rewriter *r, IrContext *ctx) {
  memset(r, 0, sizeof *r);
  r->ctx = ctx;
  ir_builder_init(&r->b, ctx);
  r->i1 = ir_type_int(ctx, 1);
  r->i8 = ir_type_int(ctx, 8);
  r->i16 = ir_type_int(ctx, 16);
  r->i32 = ir_type_int(ctx, 32);
  r->i64 = ir_type_int(ctx, 64);
}

void rw_begin_kernel(Rewriter *r, IrOp *kernel) {
  r->kernel = kernel;
  r->entry = ir_region_ensure_block(r->ctx, &kernel->regions[0]);
  r->entry_last = NULL;
}

IrResult rw_each_kernel(Rewriter *r, IrOp *module, IrPassCtx *pc, IrResult (*fn)(Rewriter *r, IrOp *k)) {
  IrBlock *body = module->nregions ? module->regions[0].first : NULL;
  for (IrOp *op = body ? body->first : NULL; op; op = op->next) {
    if (op->kind != OP_TILE_KERNEL) continue;
    uint64_t edits = ir_context_edits(r->ctx);
    rw_begin_kernel(r, op);
    if (fn(r, op) != IR_OK) return IR_FAIL;
    if (ir_context_edits(r->ctx) != edits) pc->changed = true;
  }
  return IR_OK;
}

IrResult rw_run(Rewriter *state, size_t size, IrOp *module, IrPassCtx *pc,
                IrResult (*fn)(Rewriter *r, IrOp *k)) {
  memset(state, 0, size);
  rw_init(state, pc->ctx);
  return rw_each_kernel(state, module, pc, fn);
}

void rw_before(Rewriter *r, IrOp *op) {
  ir_builder_before(&r->b, op);
  r->b.loc = op->loc;
}

void rw_after_value(Rewriter *r, IrValue *v) {
  if (v->def) {
    ir_builder_after(&r->b, v->def);
    r->b.loc = v->def->loc;
  } else {
    ir_builder_at_start(&r->b, v->block);
    r->b.loc = ir_block_parent_op(v->block)->loc;
  }
}

IrValue *rw_at_entry(Rewriter *r, IrValue *(*fn)(Rewriter *r)) {
  IrBuilder saved = r->b;
  if (r->entry_last)
    ir_builder_after(&r->b, r->entry_last);
  else
    ir_builder_at_start(&r->b, r->entry);
  r->b.loc = r->kernel->loc;
  IrValue *v = fn(r);
  r->entry_last = v->def;
  r->b = saved;
  return v;
}

/* }====================================================================== */

/* {======================================================================
** Building
** ======================================================================= */

IrOp *rw_op(Rewriter *r, IrOpKind k, uint32_t n, IrValue *const *opds, const IrType *rt) {
  return ir_build(&r->b, k, n, opds, rt ? 1 : 0, rt ? &rt : NULL, 0);
}

IrValue *rw_op1(Rewriter *r, IrOpKind k, uint32_t n, IrValue *const *opds, const IrType *rt) {
  return &rw_op(r, k, n, opds, rt)->results[0];
}

IrValue *rw_const(Rewriter *r, int64_t v, const IrType *t) { return ir_build_const_int(&r->b, v, t); }

IrValue *rw_i32(Rewriter *r, int64_t v) { return ir_build_const_int(&r->b, v, r->i32); }

IrValue *rw_bin(Rewriter *r, IrOpKind k, IrValue *a, IrValue *b) { return ir_build_binary(&r->b, k, a, b); }

IrValue *rw_cmp(Rewriter *r, const char *pred, IrValue *a, IrValue *b) {
  return ir_build_cmpi(&r->b, pred, a, b);
}

IrValue *rw_select(Rewriter *r, IrValue *c, IrValue *a, IrValue *b) {
  return ir_build_select(&r->b, c, a, b);
}

IrValue *rw_cast(Rewriter *r, IrOpKind k, IrValue *x, const IrType *t) {
  return ir_build_unary(&r->b, k, x, t);
}

IrValue *rw_linear_tid(Rewriter *r, const int64_t block[3], IrValue *(*id)(Rewriter *r, int d)) {
  IrValue *t = id(r, 0);
  if (block[1] == 1 && block[2] == 1) return t;
  IrValue *y = id(r, 1);
  if (block[2] != 1) y = rw_bin(r, OP_ARITH_ADDI, y, rw_bin(r, OP_ARITH_MULI, id(r, 2), rw_i32(r, block[1])));
  return rw_bin(r, OP_ARITH_ADDI, t, rw_bin(r, OP_ARITH_MULI, y, rw_i32(r, block[0])));
}

void rw_set_int(Rewriter *r, IrOp *op, const char *name, int64_t v) {
  ir_op_set_attr(op, name, ir_attr_i64(r->ctx, v));
}

void rw_set_str(Rewriter *r, IrOp *op, const char *name, const char *s) {
  ir_op_set_attr(op, name, ir_attr_cstr(r->ctx, s));
}

void rw_set_bool(Rewriter *r, IrOp *op, const char *name, bool v) {
  ir_op_set_attr(op, name, ir_attr_bool(r->ctx, v));
}

void rw_copy_attr(IrOp *to, const IrOp *from, const char *name, const char *as) {
  const IrAttr *a = ir_op_attr(from, name);
  if (a) ir_op_set_attr(to, as ? as : name, a);
}

/* }====================================================================== */

/* {======================================================================
** Structured control flow
** ======================================================================= */

/* Close block b with an scf.yield and build in front of it. */
static void into_block(Rewriter *r, IrBlock *b) {
  ir_builder_at_end(&r->b, b);
  IrOp *y = rw_op(r, OP_SCF_YIELD, 0, NULL, NULL);
  ir_builder_before(&r->b, y);
}

IrOp *rw_begin_if(Rewriter *r, IrValue *cond) {
  IrOp *sif = ir_build(&r->b, OP_SCF_IF, 1, &cond, 0, NULL, 2);
  into_block(r, ir_region_ensure_block(r->ctx, &sif->regions[0]));
  return sif;
}

void rw_begin_else(Rewriter *r, IrOp *sif) {
  into_block(r, ir_region_ensure_block(r->ctx, &sif->regions[1]));
}

void rw_end_if(Rewriter *r, IrOp *sif) { ir_builder_after(&r->b, sif); }

IrOp *rw_begin_spin(Rewriter *r) {
  IrOp *w = ir_build(&r->b, OP_SCF_WHILE, 0, NULL, 0, NULL, 2);
  into_block(r, ir_region_ensure_block(r->ctx, &w->regions[1]));
  ir_builder_at_end(&r->b, ir_region_ensure_block(r->ctx, &w->regions[0]));
  return w;
}

void rw_end_spin(Rewriter *r, IrOp *w, IrValue *again) {
  rw_op(r, OP_SCF_CONDITION, 1, &again, NULL);
  ir_builder_after(&r->b, w);
}

IrOp *rw_begin_for(Rewriter *r, IrValue *lb, IrValue *ub, IrValue **iv) {
  IrValue *bounds[3] = {lb, ub, rw_const(r, 1, lb->type)};
  IrOp *loop = ir_build(&r->b, OP_SCF_FOR, 3, bounds, 0, NULL, 1);
  IrBlock *body = ir_region_ensure_block(r->ctx, &loop->regions[0]);
  *iv = ir_block_add_arg(r->ctx, body, lb->type);
  into_block(r, body);
  return loop;
}

void rw_end_for(Rewriter *r, IrOp *loop) { ir_builder_after(&r->b, loop); }

void rw_inline_block(Rewriter *r, IrBlock *b, IrValue *cond) {
  IrBuilder saved = r->b;
  if (cond) rw_begin_if(r, cond); /* the builder now stands before the if's yield */
  while (b && b->first) {
    IrOp *o = b->first;
    ir_op_unlink(o);
    ir_builder_insert(&r->b, o);
  }
  r->b = saved;
}

/* }====================================================================== */

/* {======================================================================
** Walks and replacement
** ======================================================================= */

typedef struct Collect {
  bool (*pick)(const IrOp *op);
  IrOpVec *out;
} Collect;

static bool collect_visit(IrOp *op, void *ud) {
  Collect *c = ud;
  if (c->pick(op)) ir_opvec_push(c->out, op);
  return true;
}

void rw_collect(IrOp *root, bool (*pick)(const IrOp *op), IrOpVec *out) {
  Collect c = {pick, out};
  ir_walk_pre(root, collect_visit, &c);
}

typedef struct Find {
  bool (*pick)(const IrOp *op);
  IrOp *found;
} Find;

static bool find_visit(IrOp *op, void *ud) {
  Find *f = ud;
  if (f->pick(op)) f->found = op;
  return !f->found;
}

IrOp *rw_find(IrOp *root, bool (*pick)(const IrOp *op)) {
  Find f = {pick, NULL};
  ir_walk_pre(root, find_visit, &f);
  return f.found;
}

typedef struct Retype {
  const IrType *(*map)(Rewriter *r, const IrValue *v);
  Rewriter *r;
  IrOp *root;
} Retype;

static void retype_value(Retype *t, IrValue *v) {
  const IrType *nt = t->map(t->r, v);
  if (nt) v->type = nt;
}

static bool retype_visit(IrOp *op, void *ud) {
  Retype *t = ud;
  for (uint32_t i = 0; i < op->nresults; i++)
    retype_value(t, &op->results[i]);
  for (uint32_t r = 0; r < op->nregions; r++)
    for (IrBlock *b = op->regions[r].first; b; b = b->next)
      for (uint32_t i = 0; i < b->nargs && !(op == t->root && b == op->regions[0].first); i++)
        retype_value(t, b->args[i]);
  return true;
}

void rw_retype(IrOp *root, const IrType *(*map)(Rewriter *r, const IrValue *v), Rewriter *r) {
  Retype t = {map, r, root};
  ir_walk_pre(root, retype_visit, &t);
}

void rw_replace(IrOp *op, IrValue *v) {
  if (op->nresults && v) ir_value_replace_all_uses(&op->results[0], v);
  ir_op_erase(op);
}

/* }====================================================================== */

/* Dead-code elimination, last op first so that whole dead chains go in one sweep. */
bool rw_dce_block(IrBlock *blk) {
  bool changed = false;
  for (IrOp *op = blk->last, *prev; op; op = prev) {
    prev = op->prev;
    for (uint32_t r = 0; r < op->nregions; r++)
      for (IrBlock *b = op->regions[r].first; b; b = b->next) changed |= rw_dce_block(b);
    if (ir_op_results_unused(op) && ir_op_is_removable(op)) {
      ir_op_erase(op);
      changed = true;
    }
  }
  return changed;
}
