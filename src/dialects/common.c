/*
** common.c -- helpers shared by the dialect verifiers.
*/
#include <stdlib.h>
#include <string.h>

#include "dialects.h"

bool dia_need_int(IrOp *op, const char *name, int64_t *out) {
  const IrAttr *a = ir_op_attr(op, name);
  if (a && a->kind == IR_ATTR_INT) {
    *out = a->u.i;
    return true;
  }
  ir_op_error(op, "expected integer attribute '%s'", name);
  return false;
}

void dia_kernel_dims(IrOp *op, const char *entry, int64_t out[3], int64_t dflt) {
  out[0] = out[1] = out[2] = dflt;
  IrOp *k = op->kind == OP_TILE_KERNEL ? op : ir_op_ancestor(op, OP_TILE_KERNEL);
  if (!k) return;
  const IrAttr *a = ir_attr_dict_get(ir_op_attr(k, "kernel_spec"), entry);
  if (!a) return;
  if (a->kind == IR_ATTR_INT) {
    out[0] = a->u.i;
    out[1] = out[2] = 1;
    return;
  }
  if (a->kind != IR_ATTR_ARRAY) return;
  for (uint32_t i = 0; i < 3; i++)
    out[i] = i < a->u.arr.n && a->u.arr.elems[i]->kind == IR_ATTR_INT ? a->u.arr.elems[i]->u.i : 1;
}

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

bool dia_check_mem_value(IrOp *op, const IrType *v) {
  const IrType *scalar = v->kind == IR_TY_VECTOR ? v->elem : v;
  int64_t bytes = dia_type_bytes(v), eb = dia_type_bytes(scalar);
  bool ok = bytes > 0 && bytes <= 16 && (bytes & (bytes - 1)) == 0;
  if (v->kind == IR_TY_VECTOR)
    ok = ok && v->rank == 1 && scalar->kind != IR_TY_VECTOR && scalar->width > 1 &&
         (eb >= 4 ? v->shape[0] <= 4 : bytes >= 4);
  else
    ok = ok && (scalar->kind == IR_TY_INT || scalar->kind == IR_TY_FLOAT || scalar->kind == IR_TY_INDEX);
  if (ok) return true;
  char *s = ir_type_to_string(v);
  ir_op_error(op, "cannot move %s in one instruction (scalars, or vectors of 4, 8 or 16 bytes of non-i1 elements)", s);
  free(s);
  return false;
}

bool dia_attr_one_of(IrOp *op, const char *name, const char *const *list, bool optional) {
  const IrAttr *a = ir_op_attr(op, name);
  if (!a && optional) return true;
  const char *s = a && a->kind == IR_ATTR_STR ? a->u.str.s : NULL;
  for (int i = 0; s && list[i]; i++)
    if (strcmp(s, list[i]) == 0) return true;
  char all[256] = "";
  for (int i = 0; list[i] && strlen(all) + strlen(list[i]) + 3 < sizeof all; i++) {
    strcat(all, i ? ", " : "");
    strcat(all, list[i]);
  }
  if (s) ir_op_error(op, "unknown %s '%s' (expected one of: %s)", name, s, all);
  else ir_op_error(op, "expected string attribute '%s' (one of: %s)", name, all);
  return false;
}

bool dia_attr_int_in(IrOp *op, const char *name, int64_t lo, int64_t hi, int64_t dflt, int64_t *out) {
  const IrAttr *a = ir_op_attr(op, name);
  *out = dflt;
  if (!a) return true;
  if (a->kind != IR_ATTR_INT || a->u.i < lo || a->u.i > hi) {
    ir_op_error(op, "attribute '%s' must be an integer in [%lld, %lld]", name, (long long)lo, (long long)hi);
    return false;
  }
  *out = a->u.i;
  return true;
}

bool dia_attr_bool(IrOp *op, const char *name, bool dflt, bool *out) {
  const IrAttr *a = ir_op_attr(op, name);
  if (out) *out = dflt;
  if (!a) return true;
  if (a->kind != IR_ATTR_BOOL) {
    ir_op_error(op, "attribute '%s' must be a boolean", name);
    return false;
  }
  if (out) *out = a->u.b;
  return true;
}
