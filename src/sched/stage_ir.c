/*
** stage_ir.c -- the IR backend of staged integers (stage.h): arith ops at a
** builder, on i1, i32 and i64.
*/
#include "../ir/ir.h"
#include "stage.h"

static const IrType *type_of(StageIr *s, unsigned bits) {
  return bits == 1 ? s->i1 : bits == 64 ? s->i64 : s->i32;
}

static void *ir_constant(Stage *st, uint64_t k, unsigned bits) {
  StageIr *s = (StageIr *)st;
  return ir_build_const_int(s->b, (int64_t)k, type_of(s, bits));
}

static void *ir_op(Stage *st, StageOp op, void *a, void *b, unsigned bits) {
  static const IrOpKind arith[] = {
      [ST_ADD] = OP_ARITH_ADDI,  [ST_SUB] = OP_ARITH_SUBI,  [ST_MUL] = OP_ARITH_MULI,
      [ST_DIV] = OP_ARITH_DIVUI, [ST_REM] = OP_ARITH_REMUI, [ST_MIN] = OP_ARITH_MINUI,
      [ST_MAX] = OP_ARITH_MAXUI, [ST_AND] = OP_ARITH_ANDI};
  static const char *const pred[] = {
      [ST_EQ] = "eq", [ST_NE] = "ne", [ST_LT] = "ult", [ST_LE] = "ule", [ST_GE] = "uge"};
  StageIr *s = (StageIr *)st;
  if (op == ST_ZEXT) return ir_build_unary(s->b, OP_ARITH_EXTUI, a, type_of(s, bits));
  if (op >= ST_EQ) return ir_build_cmpi(s->b, pred[op], a, b);
  return ir_build_binary(s->b, arith[op], a, b);
}

static void *ir_select(Stage *st, void *c, void *a, void *b) {
  return ir_build_select(((StageIr *)st)->b, c, a, b);
}

void stage_ir_init(StageIr *s, IrBuilder *b) {
  s->st.constant = ir_constant;
  s->st.op = ir_op;
  s->st.select = ir_select;
  s->b = b;
  s->i1 = ir_type_int(b->ctx, 1);
  s->i32 = ir_type_int(b->ctx, 32);
  s->i64 = ir_type_int(b->ctx, 64);
}

SInt stage_ir_value(IrValue *v) {
  const IrType *t = v->type;
  return st_value(v, t->kind == IR_TY_INT ? t->width : 32);
}
