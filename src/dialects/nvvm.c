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
  IrAttrs_NVVM_LD_GLOBAL a = ir_attrs_NVVM_LD_GLOBAL(op);
  if (op->kind == OP_NVVM_ST_GLOBAL && !a.nc && !a.prefetch) {
    if (!tile_check_store_hints(op, true, a.volatile_, a.cache, a.evict)) return IR_FAIL;
  } else if (!tile_check_load_hints(op, op->kind == OP_NVVM_LD_GLOBAL, a.volatile_, a.cache,
                                    a.evict, a.nc, a.prefetch))
    return IR_FAIL;
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

/* The constraint letter of the registers of a type: h r l f d (as CUDA asm),
** 0 for one no constraint names. Vectors: their elements' letter when 32 bits
** or wider, else r (packed words). */
char nvvm_constraint_of(const IrType *t) {
  if (t->kind == IR_TY_VECTOR) {
    if (t->rank != 1) return 0;
    if (dia_type_bytes(t->elem) >= 4) return nvvm_constraint_of(t->elem);
    bool i1 = t->elem->kind == IR_TY_INT && t->elem->width == 1;
    return !i1 && dia_type_bytes(t) % 4 == 0 ? 'r' : 0;
  }
  if (t->kind == IR_TY_INDEX || t->kind == IR_TY_PTR) return 'l';
  if (t->kind == IR_TY_INT)
    return t->width == 8 || t->width == 16 ? 'h' : t->width == 32 ? 'r' : t->width == 64 ? 'l' : 0;
  if (t->kind == IR_TY_FLOAT) return t->fkind == IR_F32 ? 'f' : t->fkind == IR_F64 ? 'd' : 'h';
  return 0;
}

/* $N names an operand, $rN a result, $$ is a dollar sign; `constraints`, when
** given, has one letter per result then per operand, each the letter of its
** type (n: an operand that is an integer constant). */
IrResult nvvm_verify_inline_ptx(IrOp *op) {
  IrAttrs_NVVM_INLINE_PTX a = ir_attrs_NVVM_INLINE_PTX(op);
  for (const char *p = strchr(a.ptx, '$'); p; p = strchr(p + 1, '$')) {
    if (p[1] == '$') {
      p++;
      continue;
    }
    bool res = p[1] == 'r';
    const char *q = p + 1 + res;
    char *end;
    long i = strtol(q, &end, 10);
    long n = res ? (long)op->nresults : (long)op->noperands;
    if (end == q || *q < '0' || *q > '9' || i >= n) {
      ir_op_error(op, "'$%.*s' names no %s (%ld %ss; $$ writes a dollar sign)",
                  (int)(end - p - 1 > 0 ? end - p - 1 : 1), p + 1, res ? "result" : "operand", n,
                  res ? "result" : "operand");
      return IR_FAIL;
    }
  }
  if (!a.constraints) return IR_OK;
  uint32_t k = 0, total = op->nresults + op->noperands;
  for (const char *p = a.constraints; *p;) {
    while (*p == ' ')
      p++;
    char c = *p ? *p++ : 0;
    while (*p == ' ')
      p++;
    if (*p && *p != ',') {
      ir_op_error(op, "constraints: one letter per value, comma-separated (\"%s\")", a.constraints);
      return IR_FAIL;
    }
    if (*p == ',') p++;
    if (k >= total) {
      k++;
      continue;
    }
    bool res = k < op->nresults;
    const IrType *t = res ? op->results[k].type : op->operands[k - op->nresults].value->type;
    uint32_t idx = res ? k : k - op->nresults;
    if (c == 'n' && !res) {
      int64_t v;
      if (!dia_const_int(op->operands[idx].value, &v)) {
        ir_op_error(op, "constraints: operand %u ('n') must be an integer constant", idx);
        return IR_FAIL;
      }
    } else if (!c || !strchr("hrlfd", c) || nvvm_constraint_of(t) != c) {
      char *s = ir_type_to_string(t);
      char want = nvvm_constraint_of(t);
      ir_op_error(op, "constraints: %s %u is %s, whose registers take '%c', not '%c'",
                  res ? "result" : "operand", idx, s, want ? want : '?', c ? c : ' ');
      ir_free(s);
      return IR_FAIL;
    }
    k++;
  }
  if (k != total) {
    ir_op_error(op, "constraints: %u letters for %u results and %u operands", k, op->nresults,
                op->noperands);
    return IR_FAIL;
  }
  return IR_OK;
}
