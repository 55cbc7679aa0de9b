/*
** nvvm.c -- verifiers of the nvvm dialect: what the PTX instruction behind an
** op accepts (value widths, atomic operations, scopes, immediates).
*/
#include <stdlib.h>
#include <string.h>

#include "dialects.h"

static const char *const scopes[] = {"cta", "cluster", "gpu", "sys", NULL};

/* ld/st: the value must fit one instruction. */
IrResult nvvm_verify_access(IrOp *op) {
  const IrType *v = op->nresults ? op->results[0].type : op->operands[1].value->type;
  if (!dia_check_mem_value(op, v) || !dia_attr_bool(op, "volatile", false, NULL)) return IR_FAIL;
  return IR_OK;
}

/* atom/red/cas: the operation fits the value type; the result has it too. */
IrResult nvvm_verify_atom(IrOp *op) {
  static const char *const ops[] = {"add",  "max", "min", "umax", "umin",
                                    "exch", "and", "or",  "xor",  NULL};
  const IrType *t = op->operands[1].value->type;
  bool cas = op->kind == OP_NVVM_ATOM_CAS_GLOBAL || op->kind == OP_NVVM_ATOM_CAS_SHARED ||
             op->kind == OP_NVVM_ATOM_CAS_SHARED_CLUSTER;
  for (uint32_t i = 2; i < op->noperands; i++)
    if (op->operands[i].value->type != t) {
      ir_op_error(op, "operands must have one type");
      return IR_FAIL;
    }
  if (op->nresults && op->results[0].type != t) {
    ir_op_error(op, "result must have the type of the value operand");
    return IR_FAIL;
  }
  if (!dia_attr_one_of(op, "scope", scopes, true)) return IR_FAIL;
  bool w3264 = t->width == 32 || t->width == 64;
  bool isint = t->kind == IR_TY_INT;
  if (cas) {
    if (isint && w3264) return IR_OK;
  } else {
    if (!dia_attr_one_of(op, "op", ops, false)) return IR_FAIL;
    const char *o = ir_op_attr_str(op, "op");
    bool fl = strcmp(o, "add") == 0 || strcmp(o, "exch") == 0;
    if (op->nresults == 0 && strcmp(o, "exch") == 0) {
      ir_op_error(op, "red has no exch form (use atom)");
      return IR_FAIL;
    }
    if (w3264 && (isint || (fl && t->kind == IR_TY_FLOAT))) return IR_OK;
  }
  char *s = ir_type_to_string(t);
  ir_op_error(op, "does not take %s", s);
  free(s);
  return IR_FAIL;
}

IrResult nvvm_verify_scope(IrOp *op) {
  static const char *const bar_scopes[] = {"cta", "cluster", NULL};
  return dia_attr_one_of(op, "scope", bar_scopes, true) ? IR_OK : IR_FAIL;
}

IrResult nvvm_verify_fence(IrOp *op) {
  static const char *const spaces[] = {"shared::cta", "shared::cluster", "global", NULL};
  static const char *const sems[] = {"acq_rel", "sc", NULL};
  if (op->kind == OP_NVVM_FENCE_PROXY_ASYNC)
    return dia_attr_one_of(op, "space", spaces, true) ? IR_OK : IR_FAIL;
  return dia_attr_one_of(op, "sem", sems, true) && dia_attr_one_of(op, "scope", scopes, false) ? IR_OK : IR_FAIL;
}

/* wait_group immediates: 0..63 for bulk groups, 0..7 for wgmma. */
IrResult nvvm_verify_group(IrOp *op) {
  int64_t n, hi = op->kind == OP_NVVM_WGMMA_WAIT_GROUP_SYNC_ALIGNED ? 7 : 63;
  if (!dia_need_int(op, "group", &n)) return IR_FAIL;
  if (n < 0 || n > hi) {
    ir_op_error(op, "group %lld is out of range [0, %lld]", (long long)n, (long long)hi);
    return IR_FAIL;
  }
  return dia_attr_bool(op, "read", false, NULL) ? IR_OK : IR_FAIL;
}

IrResult nvvm_verify_aligned(IrOp *op) { return dia_attr_bool(op, "aligned", false, NULL) ? IR_OK : IR_FAIL; }

IrResult nvvm_verify_elect(IrOp *op) {
  const IrAttr *m = ir_op_attr(op, "mask");
  if (m && m->kind != IR_ATTR_INT) {
    ir_op_error(op, "attribute 'mask' must be an integer");
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult nvvm_verify_setmaxreg(IrOp *op) {
  static const char *const actions[] = {"inc", "dec", NULL};
  int64_t n;
  if (!dia_attr_one_of(op, "action", actions, false) || !dia_need_int(op, "count", &n)) return IR_FAIL;
  if (n < 24 || n > 256 || n % 8) {
    ir_op_error(op, "register count %lld must be a multiple of 8 in [24, 256]", (long long)n);
    return IR_FAIL;
  }
  return IR_OK;
}

/* The text must exist; $N must name an operand. */
IrResult nvvm_verify_inline_ptx(IrOp *op) {
  const char *s = ir_op_attr_str(op, "ptx");
  if (!s) {
    ir_op_error(op, "expected string attribute 'ptx'");
    return IR_FAIL;
  }
  for (const char *p = strchr(s, '$'); p; p = strchr(p + 1, '$')) {
    char *end;
    long i = strtol(p + 1, &end, 10);
    if (end == p + 1 || i < 0 || i >= (long)op->noperands) {
      ir_op_error(op, "'$%.*s' names no operand (%u operands)",
                  (int)(end - p - 1 > 0 ? end - p - 1 : 0), p + 1, op->noperands);
      return IR_FAIL;
    }
  }
  return IR_OK;
}
