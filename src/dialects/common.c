/*
** common.c -- helpers shared by the dialect verifiers.
*/
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
