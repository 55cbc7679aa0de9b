/*
** nvvm.c -- verifiers of the nvvm dialect: what the PTX instruction behind an
** op accepts beyond its attribute rows (value widths, atomic operations per
** type, immediates).
*/
#include <stdlib.h>
#include <string.h>

#include "dialects.h"

/* ld/st: the value must fit one instruction. */
IrResult nvvm_verify_access(IrOp *op) {
  const IrType *v = op->nresults ? op->results[0].type : op->operands[1].value->type;
  return dia_check_mem_value(op, v) ? IR_OK : IR_FAIL;
}

/* atom/red/cas: the operation fits the value type; the result has it too. */
IrResult nvvm_verify_atom(IrOp *op) {
  const IrType *t = op->operands[1].value->type;
  bool cas = ir_op_attr_set(op->kind) == OP_NVVM_ATOM_CAS_GLOBAL;
  for (uint32_t i = 2; i < op->noperands; i++)
    if (op->operands[i].value->type != t) {
      ir_op_error(op, "operands must have one type");
      return IR_FAIL;
    }
  if (op->nresults && op->results[0].type != t) {
    ir_op_error(op, "result must have the type of the value operand");
    return IR_FAIL;
  }
  bool w3264 = t->width == 32 || t->width == 64;
  bool isint = t->kind == IR_TY_INT;
  if (cas) {
    if (isint && w3264) return IR_OK;
  } else {
    int o = ir_attrs_NVVM_ATOM_GLOBAL(op).op;
    bool fl = o == ATOMIC_ADD || o == ATOMIC_EXCH;
    if (op->nresults == 0 && o == ATOMIC_EXCH) {
      ir_op_error(op, "red has no exch form (use atom)");
      return IR_FAIL;
    }
    if (w3264 && (isint || (fl && t->kind == IR_TY_FLOAT))) return IR_OK;
  }
  char *s = ir_type_to_string(t);
  ir_op_error(op, "does not take %s", s);
  ir_free(s);
  return IR_FAIL;
}

IrResult nvvm_verify_setmaxreg(IrOp *op) {
  int64_t n = ir_attrs_NVVM_SETMAXREGISTER(op).count;
  if (n % 8) {
    ir_op_error(op, "register count %lld must be a multiple of 8 in [%d, %d]", (long long)n,
                SM90_MAXNREG_MIN, SM90_MAXNREG_MAX);
    return IR_FAIL;
  }
  return IR_OK;
}

/* $N must name an operand. */
IrResult nvvm_verify_inline_ptx(IrOp *op) {
  const char *s = ir_attrs_NVVM_INLINE_PTX(op).ptx;
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
