/*
** tile.c -- verifiers of the tile dialect: kernel structure and its kernel_spec.
*/
#include <stdlib.h>
#include <string.h>

#include "dialects.h"

#define MAX_SMEM (227 * 1024) /* sm_90 opt-in maximum per block */

/* Read an entry of kernel_spec as 1..3 positive integers. */
static bool spec_dims(IrOp *op, const IrAttr *spec, const char *name, int64_t out[3], int64_t *prod) {
  out[0] = out[1] = out[2] = 1;
  *prod = 1;
  const IrAttr *a = ir_attr_dict_get(spec, name);
  if (!a) return true;
  uint32_t n = a->kind == IR_ATTR_ARRAY ? a->u.arr.n : 0;
  if (a->kind == IR_ATTR_INT) {
    out[0] = a->u.i;
  } else if (n >= 1 && n <= 3) {
    for (uint32_t i = 0; i < n; i++) {
      if (a->u.arr.elems[i]->kind != IR_ATTR_INT) goto bad;
      out[i] = a->u.arr.elems[i]->u.i;
    }
  } else {
    goto bad;
  }
  for (int i = 0; i < 3; i++) {
    if (out[i] <= 0) goto bad;
    *prod *= out[i];
  }
  return true;
bad:
  ir_op_error(op, "kernel_spec.%s must be 1 to 3 positive integers", name);
  return false;
}

IrResult tile_verify_kernel(IrOp *op) {
  const IrAttr *name = ir_op_attr(op, "sym_name");
  if (!name || name->kind != IR_ATTR_STR || name->u.str.len == 0) {
    ir_op_error(op, "expected a non-empty string attribute 'sym_name'");
    return IR_FAIL;
  }
  IrOp *parent = ir_op_parent_op(op);
  if (!parent || parent->kind != OP_MODULE) {
    ir_op_error(op, "must be directly inside a module");
    return IR_FAIL;
  }
  const IrAttr *spec = ir_op_attr(op, "kernel_spec");
  if (!spec || spec->kind != IR_ATTR_DICT) {
    ir_op_error(op, "expected a dictionary attribute 'kernel_spec'");
    return IR_FAIL;
  }
  int64_t block[3], cluster[3], nthreads, ncta;
  if (!spec_dims(op, spec, "block", block, &nthreads) || !spec_dims(op, spec, "cluster", cluster, &ncta))
    return IR_FAIL;
  if (!ir_attr_dict_get(spec, "block")) {
    ir_op_error(op, "kernel_spec needs 'block' (threads per block)");
    return IR_FAIL;
  }
  if (nthreads > 1024) {
    ir_op_error(op, "block of %lld threads exceeds 1024", (long long)nthreads);
    return IR_FAIL;
  }
  if (ncta > 16) {
    ir_op_error(op, "cluster of %lld CTAs exceeds 16", (long long)ncta);
    return IR_FAIL;
  }
  const IrAttr *smem = ir_attr_dict_get(spec, "smem");
  if (smem && (smem->kind != IR_ATTR_INT || smem->u.i < 0 || smem->u.i > MAX_SMEM)) {
    ir_op_error(op, "kernel_spec.smem must be an integer in [0, %d]", MAX_SMEM);
    return IR_FAIL;
  }
  const IrAttr *nc = ir_attr_dict_get(spec, "num_ctas");
  if (nc && (nc->kind != IR_ATTR_INT || nc->u.i != ncta)) {
    ir_op_error(op, "kernel_spec.num_ctas must equal the cluster size %lld", (long long)ncta);
    return IR_FAIL;
  }
  IrBlock *body = op->regions[0].first;
  uint32_t nargs = body ? body->nargs : 0;
  for (uint32_t i = 0; i < nargs; i++) {
    const IrType *t = body->args[i]->type;
    bool ok = t->kind == IR_TY_INT || t->kind == IR_TY_FLOAT || t->kind == IR_TY_INDEX ||
              (t->kind == IR_TY_PTR && (t->space == IR_MS_GLOBAL || t->space == IR_MS_GENERIC)) ||
              t->kind == IR_TY_DIALECT;
    if (!ok) {
      char *s = ir_type_to_string(t);
      ir_op_error(op, "parameter #%u has type %s; kernels take scalars and global pointers", i, s);
      free(s);
      return IR_FAIL;
    }
  }
  const IrAttr *names = ir_op_attr(op, "arg_names");
  if (names) {
    if (names->kind != IR_ATTR_ARRAY || names->u.arr.n != nargs) {
      ir_op_error(op, "arg_names must list one name per parameter (%u)", nargs);
      return IR_FAIL;
    }
    for (uint32_t i = 0; i < nargs; i++)
      if (names->u.arr.elems[i]->kind != IR_ATTR_STR) {
        ir_op_error(op, "arg_names[%u] must be a string", i);
        return IR_FAIL;
      }
  }
  /* Kernel names are unique in their module. */
  for (IrOp *o = op->parent->first; o && o != op; o = o->next)
    if (o->kind == OP_TILE_KERNEL && ir_op_attr(o, "sym_name") == name) {
      IrDiag *d = ir_op_error(op, "redefines kernel '%s'", name->u.str.s);
      ir_op_note(d, o, "first defined here");
      return IR_FAIL;
    }
  return IR_OK;
}
