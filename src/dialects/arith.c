/*
** arith.c -- verifiers and the constant folder of the arith dialect.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/checked.h"
#include "dialects.h"

IrResult arith_verify_constant(IrOp *op) {
  const IrAttr *a = ir_attrs_ARITH_CONSTANT(op).value;
  const IrType *t = op->results[0].type;
  if (a->kind != IR_ATTR_INT && a->kind != IR_ATTR_FLOAT) {
    ir_op_error(op, "expected a numeric 'value' attribute");
    return IR_FAIL;
  }
  if (a->type != t) {
    ir_op_error(op, "value of type %s does not match result type %s", ir_op_type_str(op, a->type),
                ir_op_type_str(op, t));
    return IR_FAIL;
  }
  return IR_OK;
}

/* {======================================================================
** Tiles, elementwise
** ======================================================================= */

/* The element type of a tile, else t itself. */
static const IrType *scalar_of(const IrType *t) { return t->kind == IR_TY_TILE ? t->elem : t; }

/* Are the tiles among op's operands and results (from operand `first` on)
** register tiles of one shape, and is a tile there only with tiles (a scalar
** never mixes with tiles)? Else the error. */
static bool elementwise_tiles(IrOp *op, uint32_t first) {
  const IrType *shape = NULL;
  bool scalar = false;
  for (uint32_t i = first; i < op->noperands + op->nresults; i++) {
    const IrType *t =
        i < op->noperands ? op->operands[i].value->type : op->results[i - op->noperands].type;
    if (t->kind != IR_TY_TILE) {
      scalar = true;
      continue;
    }
    if (t->space != IR_MS_RMEM) {
      ir_op_error(op, "elementwise ops take register tiles, got %s", ir_op_type_str(op, t));
      return false;
    }
    if (shape && (shape->rank != t->rank ||
                  memcmp(shape->shape, t->shape, t->rank * sizeof(int64_t)) != 0)) {
      ir_op_error(op, "elementwise tiles of different shapes: %s and %s", ir_op_type_str(op, shape),
                  ir_op_type_str(op, t));
      return false;
    }
    shape = t;
  }
  if (shape && scalar) {
    ir_op_error(op, "tiles and scalars do not mix: every operand and result is a tile, or none");
    return false;
  }
  return true;
}

IrResult arith_verify_elementwise(IrOp *op) {
  const IrType *t = op->operands[0].value->type;
  if (t->kind != IR_TY_TILE && op->results[0].type->kind != IR_TY_TILE) return IR_OK;
  if (!elementwise_tiles(op, 0)) return IR_FAIL;
  bool is_int = op->kind == OP_ARITH_ADDI || op->kind == OP_ARITH_SUBI ||
                op->kind == OP_ARITH_MULI || op->kind == OP_ARITH_CMPI ||
                op->kind == OP_ARITH_ANDI || op->kind == OP_ARITH_ORI;
  if (is_int ? !ir_type_is_intlike(t->elem) : !ir_type_is_float(t->elem))
    return dia_type_error(op, is_int ? "needs integer tiles, got %s" : "needs float tiles, got %s",
                          t);
  if ((op->kind == OP_ARITH_CMPF || op->kind == OP_ARITH_CMPI) &&
      !ir_type_is_int_width(op->results[0].type->elem, 1))
    return dia_type_error(op, "the result must be a tile of i1, got %s", op->results[0].type);
  return IR_OK;
}

IrResult arith_verify_select(IrOp *op) {
  const IrType *t = op->operands[1].value->type;
  if (op->operands[2].value->type != t || op->results[0].type != t) {
    ir_op_error(op, "requires both choices and the result to have one type");
    return IR_FAIL;
  }
  const IrType *c = op->operands[0].value->type;
  if (c->kind == IR_TY_TILE && !ir_type_is_int_width(c->elem, 1))
    return dia_type_error(op, "the condition must be i1 or a tile of i1, got %s", c);
  /* a scalar condition picks a whole tile: registers, or a shared tensor (an
  ** alias of two buffers, which tileas-remove-buffer-alias collapses); a tile
  ** of them picks elementwise */
  if (c->kind != IR_TY_TILE) return IR_OK;
  return elementwise_tiles(op, 0) ? IR_OK : IR_FAIL;
}

/* }====================================================================== */

IrResult arith_verify_ext(IrOp *op) {
  if (!elementwise_tiles(op, 0)) return IR_FAIL;
  uint32_t from = ir_type_bitwidth(scalar_of(op->operands[0].value->type)),
           to = ir_type_bitwidth(scalar_of(op->results[0].type));
  if (to <= from) {
    ir_op_error(op, "result must be wider than the operand (%u -> %u bits)", from, to);
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult arith_verify_trunc(IrOp *op) {
  if (!elementwise_tiles(op, 0)) return IR_FAIL;
  const IrType *a = scalar_of(op->operands[0].value->type), *r = scalar_of(op->results[0].type);
  uint32_t from = ir_type_bitwidth(a), to = ir_type_bitwidth(r);
  bool bf = r->kind == IR_TY_FLOAT && a->kind == IR_TY_FLOAT && from == to && a != r;
  if (to >= from && !bf) {
    ir_op_error(op, "result must be narrower than the operand (%u -> %u bits)", from, to);
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult arith_verify_index_cast(IrOp *op) {
  bool a = op->operands[0].value->type->kind == IR_TY_INDEX,
       b = op->results[0].type->kind == IR_TY_INDEX;
  if (a == b) {
    ir_op_error(op, "casts between index and an integer type");
    return IR_FAIL;
  }
  return IR_OK;
}

/* The bits of a bitcast's operand or result: a scalar's width, or a vector's
** elements' (0: a vector that no registers hold as whole 32-bit words, or of i1). */
static uint32_t bitcast_width(const IrType *t) {
  if (t->kind != IR_TY_VECTOR) return ir_type_bitwidth(t);
  uint32_t ew = ir_type_bitwidth(t->elem);
  if (t->rank != 1 || t->shape[0] < 1 || ew < 8 || (ew < 32 && t->shape[0] * ew % 32 != 0))
    return 0;
  return (uint32_t)t->shape[0] * ew;
}

IrResult arith_verify_bitcast(IrOp *op) {
  const IrType *ft = op->operands[0].value->type, *tt = op->results[0].type;
  uint32_t from = bitcast_width(ft), to = bitcast_width(tt);
  for (int i = 0; i < 2; i++) {
    const IrType *t = i ? tt : ft;
    if (t->kind == IR_TY_VECTOR && !bitcast_width(t)) {
      ir_op_error(
          op,
          "a vector bitcast needs a rank-1 vector of integers or floats filling whole 32-bit registers, got %s",
          ir_op_type_str(op, t));
      return IR_FAIL;
    }
  }
  if (from != to) {
    ir_op_error(op, "requires types of equal width (%u vs %u bits)", from, to);
    return IR_FAIL;
  }
  return IR_OK;
}

/* {======================================================================
** Folding
** ======================================================================= */

static bool const_float(IrValue *v, double *out) {
  if (!v || !v->def || v->def->kind != OP_ARITH_CONSTANT) return false;
  const IrAttr *a = ir_op_attr(v->def, "value");
  if (!a || a->kind != IR_ATTR_FLOAT) return false;
  *out = a->u.f;
  return true;
}

static uint32_t width_of(const IrType *t) { return t->kind == IR_TY_INDEX ? 64 : t->width; }

static bool fold_int_binary(IrOpKind k, int64_t a, int64_t b, uint32_t w, int64_t *r) {
  uint64_t ua = zext(a, w), ub = zext(b, w);
  int64_t sa = sext(a, w), sb = sext(b, w);
  switch (k) {
  /* the IR's integers wrap (two's complement at width w): so does the fold */
  case OP_ARITH_ADDI: *r = wrap_add(a, b); return true;
  case OP_ARITH_SUBI: *r = wrap_sub(a, b); return true;
  case OP_ARITH_MULI: *r = wrap_mul(a, b); return true;
  case OP_ARITH_DIVSI:
    if (sb == 0 || (sb == -1 && sa == sext((int64_t)(1ull << (w - 1)), w))) return false;
    *r = sa / sb;
    return true;
  case OP_ARITH_DIVUI:
    if (!ub) return false;
    *r = (int64_t)(ua / ub);
    return true;
  case OP_ARITH_REMSI:
    if (sb == 0 || sb == -1) return false;
    *r = sa % sb;
    return true;
  case OP_ARITH_REMUI:
    if (!ub) return false;
    *r = (int64_t)(ua % ub);
    return true;
  case OP_ARITH_ANDI: *r = (int64_t)(ua & ub); return true;
  case OP_ARITH_ORI: *r = (int64_t)(ua | ub); return true;
  case OP_ARITH_XORI: *r = (int64_t)(ua ^ ub); return true;
  case OP_ARITH_SHLI: *r = ub >= w ? 0 : (int64_t)(ua << ub); return true;
  case OP_ARITH_SHRUI: *r = ub >= w ? 0 : (int64_t)(ua >> ub); return true;
  case OP_ARITH_SHRSI:
    if (ub >= w) *r = sa < 0 ? -1 : 0;
    else *r = sa < 0 ? ~(~sa >> ub) : sa >> ub;
    return true;
  case OP_ARITH_MINSI: *r = sa < sb ? sa : sb; return true;
  case OP_ARITH_MAXSI: *r = sa > sb ? sa : sb; return true;
  case OP_ARITH_MINUI: *r = (int64_t)(ua < ub ? ua : ub); return true;
  case OP_ARITH_MAXUI: *r = (int64_t)(ua > ub ? ua : ub); return true;
  default: return false;
  }
}

static bool fold_cmpi(int p, int64_t a, int64_t b, uint32_t w) {
  uint64_t ua = zext(a, w), ub = zext(b, w);
  int64_t sa = sext(a, w), sb = sext(b, w);
  switch (p) {
  case CMPI_EQ: return ua == ub;
  case CMPI_NE: return ua != ub;
  case CMPI_SLT: return sa < sb;
  case CMPI_SLE: return sa <= sb;
  case CMPI_SGT: return sa > sb;
  case CMPI_SGE: return sa >= sb;
  case CMPI_ULT: return ua < ub;
  case CMPI_ULE: return ua <= ub;
  case CMPI_UGT: return ua > ub;
  default: return ua >= ub;
  }
}

static bool fold_cmpf(int p, double a, double b) {
  bool uno = isnan(a) || isnan(b);
  switch (p) {
  case CMPF_OEQ: return !uno && a == b;
  case CMPF_ONE: return !uno && a != b;
  case CMPF_OLT: return !uno && a < b;
  case CMPF_OLE: return !uno && a <= b;
  case CMPF_OGT: return !uno && a > b;
  case CMPF_OGE: return !uno && a >= b;
  case CMPF_ORD: return !uno;
  case CMPF_UEQ: return uno || a == b;
  case CMPF_UNE: return uno || a != b;
  case CMPF_ULT: return uno || a < b;
  case CMPF_ULE: return uno || a <= b;
  case CMPF_UGT: return uno || a > b;
  case CMPF_UGE: return uno || a >= b;
  default: return uno;
  }
}

/* x op c identities that need only one constant. */
static IrValue *fold_identity(IrBuilder *b, IrOp *op, IrValue *x, int64_t c) {
  const IrType *t = op->results[0].type;
  switch (op->kind) {
  case OP_ARITH_ADDI:
  case OP_ARITH_SUBI:
  case OP_ARITH_ORI:
  case OP_ARITH_XORI:
  case OP_ARITH_SHLI:
  case OP_ARITH_SHRSI:
  case OP_ARITH_SHRUI: return c == 0 ? x : NULL;
  case OP_ARITH_MULI: return c == 1 ? x : c == 0 ? ir_build_const_int(b, 0, t) : NULL;
  case OP_ARITH_DIVSI:
  case OP_ARITH_DIVUI: return c == 1 ? x : NULL;
  case OP_ARITH_ANDI:
    if (c == 0) return ir_build_const_int(b, 0, t);
    return zext(c, width_of(t)) == wrap_mask(width_of(t)) ? x : NULL;
  default: return NULL;
  }
}

static IrValue *fold_cast(IrBuilder *b, IrOp *op) {
  IrValue *x = op->operands[0].value;
  const IrType *from = x->type, *to = op->results[0].type;
  int64_t c;
  double f;
  if (dia_const_int(x, &c)) {
    uint32_t w = width_of(from);
    switch (op->kind) {
    case OP_ARITH_EXTSI:
    case OP_ARITH_INDEX_CAST:
    case OP_ARITH_TRUNCI: return ir_build_const_int(b, sext(c, w), to);
    case OP_ARITH_EXTUI:
    case OP_ARITH_INDEX_CASTUI: return ir_build_const_int(b, (int64_t)zext(c, w), to);
    case OP_ARITH_SITOFP: return ir_build_const_float(b, (double)sext(c, w), to);
    case OP_ARITH_UITOFP: return ir_build_const_float(b, (double)zext(c, w), to);
    default: return NULL;
    }
  }
  if (const_float(x, &f) && (op->kind == OP_ARITH_EXTF || op->kind == OP_ARITH_TRUNCF))
    return ir_build_const_float(b, f, to);
  return NULL;
}

IrValue *arith_fold(IrBuilder *b, IrOp *op) {
  if (op->nresults != 1) return NULL;
  const IrType *t = op->results[0].type;
  if (t->kind == IR_TY_TILE && op->kind != OP_ARITH_SELECT) return NULL; /* no tile constants */
  if (op->noperands == 1) {
    double f;
    if (op->kind == OP_ARITH_NEGF)
      return const_float(op->operands[0].value, &f) ? ir_build_const_float(b, -f, t) : NULL;
    return fold_cast(b, op);
  }
  if (op->kind == OP_ARITH_SELECT) {
    int64_t c;
    if (op->operands[1].value == op->operands[2].value) return op->operands[1].value;
    if (dia_const_int(op->operands[0].value, &c)) return op->operands[c ? 1 : 2].value;
    return NULL;
  }
  IrValue *x = op->operands[0].value, *y = op->operands[1].value;
  int64_t a, c;
  double fa, fb;
  if (op->kind == OP_ARITH_CMPI) {
    const IrType *ot = x->type;
    int p = ir_attrs_ARITH_CMPI(op).predicate;
    if (dia_const_int(x, &a) && dia_const_int(y, &c))
      return ir_build_const_int(b, fold_cmpi(p, a, c, width_of(ot)), t);
    if (x == y) /* reflexive predicates hold */
      return ir_build_const_int(b, fold_cmpi(p, 0, 0, width_of(ot)), t);
    return NULL;
  }
  if (op->kind == OP_ARITH_CMPF) {
    if (const_float(x, &fa) && const_float(y, &fb))
      return ir_build_const_int(b, fold_cmpf(ir_attrs_ARITH_CMPF(op).predicate, fa, fb), t);
    return NULL;
  }
  if (ir_type_is_float(t)) {
    if (!const_float(x, &fa) || !const_float(y, &fb)) return NULL;
    double r;
    switch (op->kind) {
    case OP_ARITH_ADDF: r = fa + fb; break;
    case OP_ARITH_SUBF: r = fa - fb; break;
    case OP_ARITH_MULF: r = fa * fb; break;
    case OP_ARITH_DIVF: r = fa / fb; break;
    case OP_ARITH_MINF: r = isnan(fa) || isnan(fb) ? NAN : fmin(fa, fb); break;
    case OP_ARITH_MAXF: r = isnan(fa) || isnan(fb) ? NAN : fmax(fa, fb); break;
    default: return NULL;
    }
    return ir_build_const_float(b, r, t);
  }
  bool ca = dia_const_int(x, &a), cc = dia_const_int(y, &c);
  if (ca && cc) {
    int64_t r;
    return fold_int_binary(op->kind, a, c, width_of(t), &r) ? ir_build_const_int(b, r, t) : NULL;
  }
  if (cc) return fold_identity(b, op, x, c);
  if (ca && (ir_op_info(op->kind)->traits & T_COMMUTATIVE)) return fold_identity(b, op, y, a);
  if (x == y) {
    if (op->kind == OP_ARITH_SUBI || op->kind == OP_ARITH_XORI) return ir_build_const_int(b, 0, t);
    if (op->kind == OP_ARITH_ANDI || op->kind == OP_ARITH_ORI || op->kind == OP_ARITH_MINSI ||
        op->kind == OP_ARITH_MAXSI || op->kind == OP_ARITH_MINUI || op->kind == OP_ARITH_MAXUI)
      return x;
  }
  return NULL;
}

/* }====================================================================== */
