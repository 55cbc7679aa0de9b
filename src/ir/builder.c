/*
** builder.c -- an insertion point plus a location, and shorthands for building
** the common arith ops.
*/
#include <assert.h>

#include "ir_impl.h"

void ir_builder_init(IrBuilder *b, IrContext *ctx) {
  b->ctx = ctx;
  b->block = NULL;
  b->before = NULL;
  b->loc = ir_loc_unknown();
}

void ir_builder_at_end(IrBuilder *b, IrBlock *block) {
  b->block = block;
  b->before = NULL;
}

void ir_builder_at_start(IrBuilder *b, IrBlock *block) {
  b->block = block;
  b->before = block->first;
}

void ir_builder_before(IrBuilder *b, IrOp *op) {
  b->block = op->parent;
  b->before = op;
}

void ir_builder_after(IrBuilder *b, IrOp *op) {
  b->block = op->parent;
  b->before = op->next;
}

IrOp *ir_builder_insert(IrBuilder *b, IrOp *op) {
  if (!b->block) return op; /* detached builder: the caller links the op */
  if (b->before) ir_op_insert_before(b->before, op);
  else ir_block_append(b->block, op);
  return op;
}

IrOp *ir_build(IrBuilder *b, IrOpKind kind, uint32_t noperands, IrValue *const *operands,
               uint32_t nresults, const IrType *const *result_types, uint32_t nregions) {
  IrOp *op = ir_op_create(b->ctx, kind, b->loc, noperands, operands, nresults, result_types,
                          nregions);
  return ir_builder_insert(b, op);
}

IrValue *ir_build_const_int(IrBuilder *b, int64_t v, const IrType *t) {
  IrOp *op = ir_build(b, OP_ARITH_CONSTANT, 0, NULL, 1, &t, 0);
  ir_op_set_attr(op, "value", ir_attr_int(b->ctx, v, t));
  return &op->results[0];
}

IrValue *ir_build_const_float(IrBuilder *b, double v, const IrType *t) {
  IrOp *op = ir_build(b, OP_ARITH_CONSTANT, 0, NULL, 1, &t, 0);
  ir_op_set_attr(op, "value", ir_attr_float(b->ctx, v, t));
  return &op->results[0];
}

IrValue *ir_build_binary(IrBuilder *b, IrOpKind kind, IrValue *lhs, IrValue *rhs) {
  IrValue *opds[2] = {lhs, rhs};
  return &ir_build(b, kind, 2, opds, 1, &lhs->type, 0)->results[0];
}

IrValue *ir_build_unary(IrBuilder *b, IrOpKind kind, IrValue *x, const IrType *result) {
  return &ir_build(b, kind, 1, &x, 1, &result, 0)->results[0];
}

IrValue *ir_build_cmpi(IrBuilder *b, const char *pred, IrValue *lhs, IrValue *rhs) {
  IrValue *opds[2] = {lhs, rhs};
  const IrType *i1 = ir_type_int(b->ctx, 1);
  IrOp *op = ir_build(b, OP_ARITH_CMPI, 2, opds, 1, &i1, 0);
  ir_op_set_attr(op, "predicate", ir_attr_cstr(b->ctx, pred));
  return &op->results[0];
}

IrValue *ir_build_select(IrBuilder *b, IrValue *c, IrValue *t, IrValue *f) {
  IrValue *opds[3] = {c, t, f};
  return &ir_build(b, OP_ARITH_SELECT, 3, opds, 1, &t->type, 0)->results[0];
}

IrOp *ir_build_module(IrBuilder *b) {
  IrOp *m = ir_build(b, OP_MODULE, 0, NULL, 0, NULL, 1);
  ir_region_ensure_block(b->ctx, &m->regions[0]);
  return m;
}
