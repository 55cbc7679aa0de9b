/*
** common.c -- helpers shared by the dialect verifiers.
*/
#include <stdlib.h>
#include <string.h>

#include "dialects.h"

bool dia_const_int(IrValue *v, int64_t *out) {
  if (!v || !v->def || v->def->kind != OP_ARITH_CONSTANT) return false;
  const IrAttr *a = ir_op_attr(v->def, "value");
  if (!a || a->kind != IR_ATTR_INT) return false;
  *out = a->u.i;
  return true;
}

int64_t dia_type_bytes(const IrType *t) {
  switch (t->kind) {
  case IR_TY_INT: return t->width <= 8 ? 1 : t->width <= 16 ? 2 : t->width <= 32 ? 4 : 8;
  case IR_TY_FLOAT: return t->width / 8;
  case IR_TY_INDEX:
  case IR_TY_PTR: return 8;
  case IR_TY_VECTOR: {
    int64_t n = ir_type_num_elements(t), e = dia_type_bytes(t->elem), bytes;
    return n > 0 && !__builtin_mul_overflow(n, e, &bytes) ? bytes : 0;
  }
  default: return 0;
  }
}

int64_t dia_type_storage_bytes(const IrType *t) {
  if (t->kind != IR_TY_MEMREF && t->kind != IR_TY_TILE) return dia_type_bytes(t);
  int64_t n = ir_type_num_elements(t), bytes;
  return n > 0 && !__builtin_mul_overflow(n, dia_type_bytes(t->elem), &bytes) ? bytes : 0;
}

bool dia_check_mem_value(IrOp *op, const IrType *v) {
  const IrType *scalar = v->kind == IR_TY_VECTOR ? v->elem : v;
  int64_t bytes = dia_type_bytes(v), eb = dia_type_bytes(scalar);
  bool ok = bytes > 0 && bytes <= 16 && (bytes & (bytes - 1)) == 0;
  if (v->kind == IR_TY_VECTOR)
    ok = ok && v->rank == 1 && scalar->kind != IR_TY_VECTOR && scalar->width > 1 &&
         (eb >= 4 ? v->shape[0] <= 4 : bytes >= 4);
  else
    ok = ok &&
         (scalar->kind == IR_TY_INT || scalar->kind == IR_TY_FLOAT || scalar->kind == IR_TY_INDEX);
  if (ok) return true;
  ir_op_error(
      op,
      "cannot move %s in one instruction (scalars, or vectors of 4, 8 or 16 bytes of non-i1 elements)",
      ir_op_type_str(op, v));
  return false;
}

IrResult dia_type_error(IrOp *op, const char *fmt, const IrType *t) {
  ir_op_error(op, fmt, ir_op_type_str(op, t));
  return IR_FAIL;
}
