/*
** emit_arith.c -- the arith ops as PTX: integer and float arithmetic,
** comparisons, selects, conversions and constants (docs/ptx.md, "arith").
** i8 lives in a .b16 register sign-extended from bit 7 (emit.c).
*/
#include <math.h>
#include <string.h>

#include "emit_impl.h"

/* {======================================================================
** arith
** ======================================================================= */

/* Bits of a double rounded to half precision (the value is already exact). */
static uint16_t half_bits(double v) {
  float f = (float)v;
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000, exp = (x >> 23) & 0xFF, man = x & 0x7FFFFF;
  if (exp == 0xFF) return (uint16_t)(sign | 0x7C00 | (man ? 0x200 : 0));
  int e = (int)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7C00);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    man |= 0x800000;
    return (uint16_t)(sign | (man >> (14 - e)));
  }
  return (uint16_t)(sign | ((uint32_t)e << 10) | (man >> 13));
}

static void emit_constant(Emit *e, IrOp *op) {
  const IrAttr *a = ir_attrs_ARITH_CONSTANT(op).value;
  IrValue *d = &op->results[0];
  const IrType *t = d->type;
  if (!a) {
    px_fail(e, op, "no value");
    return;
  }
  if (a->kind == IR_ATTR_INT) {
    uint32_t w = px_width_of(t);
    uint64_t bits = (uint64_t)a->u.i;
    if (w == 1) {
      px_emitf(e, "mov.pred %v, %d;", d, (int)(bits & 1));
      return;
    }
    int rw = w <= 16 ? 16 : (int)w;
    if (rw < 64) bits &= (1ull << rw) - 1;
    char buf[32];
    snprintf(buf, sizeof buf, "0x%llX", (unsigned long long)bits);
    {
      px_emitf(e, "mov.b%d %v, %s;", rw, d, buf);
      return;
    }
  }
  char buf[40];
  if (isnan(a->u.f)) { /* the payload as written, not quieted by a conversion */
    uint64_t x = ir_float_nan_bits(a->u.f, t->fkind);
    if (t->fkind == IR_F64) px_emitf(e, "mov.f64 %v, 0d%016llX;", d, (unsigned long long)x);
    else if (t->fkind == IR_F32) px_emitf(e, "mov.f32 %v, 0f%08X;", d, (unsigned)x);
    else px_emitf(e, "mov.b16 %v, 0x%04X;", d, (unsigned)x);
    return;
  }
  if (t->fkind == IR_F64) {
    uint64_t x;
    memcpy(&x, &a->u.f, 8);
    snprintf(buf, sizeof buf, "0d%016llX", (unsigned long long)x);
    {
      px_emitf(e, "mov.f64 %v, %s;", d, buf);
      return;
    }
  }
  if (t->fkind == IR_F32) {
    float f = (float)a->u.f;
    uint32_t x;
    memcpy(&x, &f, 4);
    snprintf(buf, sizeof buf, "0f%08X", x);
    {
      px_emitf(e, "mov.f32 %v, %s;", d, buf);
      return;
    }
  }
  uint32_t bits;
  if (t->fkind == IR_F16) {
    bits = half_bits(a->u.f);
  } else {
    float f = (float)a->u.f;
    memcpy(&bits, &f, 4);
    bits >>= 16;
  }
  snprintf(buf, sizeof buf, "0x%04X", bits);
  px_emitf(e, "mov.b16 %v, %s;", d, buf);
}

/* i1 arithmetic as predicate logic (true is -1 when signed): add, sub and xor
** are xor; and, mul, the signed max and the unsigned min are and; or, the
** signed min and the unsigned max are or. */
static void emit_pred_binary(Emit *e, IrOp *op) {
  const char *logic;
  switch (op->kind) {
  case OP_ARITH_ADDI:
  case OP_ARITH_SUBI:
  case OP_ARITH_XORI: logic = "xor"; break;
  case OP_ARITH_ANDI:
  case OP_ARITH_MULI:
  case OP_ARITH_MAXSI:
  case OP_ARITH_MINUI: logic = "and"; break;
  case OP_ARITH_ORI:
  case OP_ARITH_MINSI:
  case OP_ARITH_MAXUI: logic = "or"; break;
  default: px_fail(e, op, "unsupported on i1"); return;
  }
  px_emitf(e, "%s.pred %v, %v, %v;", logic, &op->results[0], op->operands[0].value,
           op->operands[1].value);
}

enum { I_NORM = 1, I_ZEXT = 2 }; /* i8: re-normalize the result / zero-extend the operands */

/* An integer binary op "<mn>.<suffix> d, a, b". */
static void emit_int(Emit *e, IrOp *op, const char *mn, char sign, int flags) {
  IrValue *d = &op->results[0];
  if (px_is_i1(d->type)) {
    emit_pred_binary(e, op);
    return;
  }
  IrValue *a = op->operands[0].value, *b = op->operands[1].value;
  Regs *ra = (flags & I_ZEXT) ? px_zext8(e, a) : px_regs(e, a),
       *rb = (flags & I_ZEXT) ? px_zext8(e, b) : px_regs(e, b);
  px_emitf(e, "%s.%s %v, %R, %R;", mn, px_isfx(d->type, sign), d, ra, rb);
  if (flags & (I_NORM | I_ZEXT)) px_norm8(e, d);
}

/* divsi / divui / remsi / remui by a constant power of two c = 2^s (positive
** when signed): shifts and ands. ptxas does not strength-reduce a PTX div or
** rem by a constant, register or immediate (docs/PERF.md, tenth session:
** rem.s32 by 4 is its general division, 23 instructions). Signed division
** truncates toward zero: a negative dividend is biased by c - 1 first
** (t = (a >>s (w - 1)) >>u (w - s), 0 or c - 1), q = (a + t) >>s s and
** r = a - ((a + t) & -c), the sign of the dividend. i8 (sign-extended in a
** .b16 register) computes at 16 bits, its results already sign-extended; the
** unsigned ones read it zero-extended. false: not such an op (the general
** div / rem then). */
static bool emit_divrem_pow2(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0], *a = op->operands[0].value;
  uint32_t w = px_width_of(d->type);
  int64_t c;
  if (px_is_i1(d->type) || (w != 8 && w != 16 && w != 32 && w != 64) ||
      !dia_const_int(op->operands[1].value, &c))
    return false;
  bool sign = op->kind == OP_ARITH_DIVSI || op->kind == OP_ARITH_REMSI,
       rem = op->kind == OP_ARITH_REMSI || op->kind == OP_ARITH_REMUI;
  uint64_t u = w == 64 ? (uint64_t)c : (uint64_t)c & ((1ull << w) - 1);
  if (u == 0 || (u & (u - 1)) != 0 || (sign && (u >> (w - 1)) != 0)) return false;
  uint32_t s = 0, rw = w <= 16 ? 16 : w; /* c = 2^s; the registers' width */
  while ((u >> s) != 1)
    s++;
  if (s == 0) { /* by 1: a, or 0 */
    if (rem) px_emitf(e, "mov.%s %v, 0;", px_isfx(d->type, 'b'), d);
    else px_emitf(e, "mov.%s %v, %v;", px_isfx(d->type, 'b'), d, a);
    return true;
  }
  if (!sign) {
    char m[24];
    snprintf(m, sizeof m, "0x%llX", (unsigned long long)(u - 1));
    if (rem) px_emitf(e, "and.%s %v, %v, %s;", px_isfx(d->type, 'b'), d, a, m);
    else px_emitf(e, "shr.%s %v, %R, %u;", px_isfx(d->type, 'u'), d, px_zext8(e, a), s);
    return true;
  }
  Regs *t = px_new_regs(e, px_regs(e, d)->cls, 1);
  char mask[24]; /* -c at the registers' width */
  snprintf(mask, sizeof mask, "0x%llX",
           (unsigned long long)(rw == 64 ? (uint64_t)0 - u : (1ull << rw) - u));
  px_emitf(e, "shr.%s %R, %v, %u;", px_isfx(d->type, 's'), t, a, rw - 1);
  px_emitf(e, "shr.%s %R, %R, %u;", px_isfx(d->type, 'u'), t, t, rw - s);
  px_emitf(e, "add.%s %R, %v, %R;", px_isfx(d->type, 's'), t, a, t);
  if (!rem) {
    px_emitf(e, "shr.%s %v, %R, %u;", px_isfx(d->type, 's'), d, t, s);
    return true;
  }
  px_emitf(e, "and.%s %R, %R, %s;", px_isfx(d->type, 'b'), t, t, mask);
  px_emitf(e, "sub.%s %v, %v, %R;", px_isfx(d->type, 's'), d, a, t);
  return true;
}

/* The shift amount as the .u32 register PTX wants; amounts >= the width clamp. */
static Regs *shift_amount(Emit *e, IrValue *b) {
  uint32_t w = px_width_of(b->type);
  if (w == 32) return px_regs(e, b);
  Regs *t = px_tmp(e, RC_B32);
  if (w == 64) {
    Regs *c = px_tmp(e, RC_B64);
    px_emitf(e, "min.u64 %R, %v, 64;", c, b);
    px_emitf(e, "cvt.u32.u64 %R, %R;", t, c);
  } else {
    px_emitf(e, "cvt.u32.u16 %R, %R;", t, px_zext8(e, b));
  }
  return t;
}

static void emit_shift(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0], *a = op->operands[0].value, *b = op->operands[1].value;
  if (px_is_i1(d->type)) {
    px_fail(e, op, "unsupported on i1");
    return;
  }
  Regs *amt = shift_amount(e, b);
  if (op->kind == OP_ARITH_SHLI)
    px_emitf(e, "shl.%s %v, %v, %R;", px_isfx(d->type, 'b'), d, a, amt);
  else if (op->kind == OP_ARITH_SHRSI)
    px_emitf(e, "shr.%s %v, %v, %R;", px_isfx(d->type, 's'), d, a, amt);
  else px_emitf(e, "shr.%s %v, %R, %R;", px_isfx(d->type, 'u'), d, px_zext8(e, a), amt);
  px_norm8(e, d);
}

static const char *const cmpi_ptx[] = {CMPI_PRED_LIST(PX_OP_PTX)};
static const char cmpi_sign[] = {CMPI_PRED_LIST(PX_OP_SIGN)};
static const char *const cmpf_ptx[] = {CMPF_PRED_LIST(PX_OP_PTX)};

static void emit_cmpi(Emit *e, IrOp *op) {
  int i = ir_attrs_ARITH_CMPI(op).predicate;
  IrValue *d = &op->results[0], *a = op->operands[0].value, *b = op->operands[1].value;
  if (px_is_i1(a->type)) {
    if (i != CMPI_EQ && i != CMPI_NE) {
      px_fail(e, op, "ordered comparison of i1");
      return;
    }
    px_emitf(e, "xor.pred %v, %v, %v;", d, a, b);
    if (i == CMPI_EQ) px_emitf(e, "not.pred %v, %v;", d, d);
    return;
  }
  px_emitf(e, "setp.%s.%s %v, %v, %v;", cmpi_ptx[i], px_isfx(a->type, cmpi_sign[i]), d, a, b);
}

static void emit_cmpf(Emit *e, IrOp *op) {
  IrValue *a = op->operands[0].value;
  px_emitf(e, "setp.%s.%s %v, %v, %v;", cmpf_ptx[ir_attrs_ARITH_CMPF(op).predicate],
           px_fsfx(a->type), &op->results[0], a, op->operands[1].value);
}

/* Float arithmetic; round to nearest and no contraction (.rn). */
static void emit_float(Emit *e, IrOp *op, const char *mn) {
  IrValue *d = &op->results[0], *a = op->operands[0].value, *b = op->operands[1].value;
  px_emitf(e, "%s.rn.%s %v, %v, %v;", mn, px_fsfx(d->type), d, a, b);
}

/* f16 / bf16 division through f32. */
static void emit_divf(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0], *a = op->operands[0].value, *b = op->operands[1].value;
  if (d->type->width > 16) {
    emit_float(e, op, "div");
    return;
  }
  Regs *x = px_tmp(e, RC_F32), *y = px_tmp(e, RC_F32);
  px_emitf(e, "cvt.f32.%s %R, %v;", px_fsfx(a->type), x, a);
  px_emitf(e, "cvt.f32.%s %R, %v;", px_fsfx(b->type), y, b);
  px_emitf(e, "div.rn.f32 %R, %R, %R;", x, x, y);
  px_emitf(e, "cvt.rn.%s.f32 %v, %R;", px_fsfx(d->type), d, x);
}

/* minimumf / maximumf: NaN if either is NaN (min.NaN; f64 has no such form). */
static void emit_minmaxf(Emit *e, IrOp *op) {
  const char *mn = op->kind == OP_ARITH_MINF ? "min" : "max";
  IrValue *d = &op->results[0], *a = op->operands[0].value, *b = op->operands[1].value;
  if (d->type->fkind != IR_F64) {
    px_emitf(e, "%s.NaN.%s %v, %v, %v;", mn, px_fsfx(d->type), d, a, b);
    return;
  }
  Regs *p = px_tmp(e, RC_PRED);
  px_emitf(e, "%s.f64 %v, %v, %v;", mn, d, a, b);
  px_emitf(e, "setp.nan.f64 %R, %v, %v;", p, a, b);
  px_emitf(e, "selp.f64 %v, 0d7FF8000000000000, %v, %R;", d, d, p);
}

static void emit_select(Emit *e, IrOp *op) {
  IrValue *c = op->operands[0].value, *a = op->operands[1].value, *b = op->operands[2].value,
          *d = &op->results[0];
  Regs *rd = px_regs(e, d), *ra = px_regs(e, a), *rb = px_regs(e, b);
  if (rd->cls == RC_PRED) {
    px_emitf(e, "@%v mov.pred %v, %v;", c, d, a);
    px_emitf(e, "@!%v mov.pred %v, %v;", c, d, b);
    return;
  }
  for (uint32_t i = 0; i < rd->n; i++) {
    sb_printf(&e->body, "\tselp.%s ", px_rc_mov[rd->cls]);
    px_put_reg(e, rd, i);
    sb_puts(&e->body, ", ");
    px_put_reg(e, ra, i);
    sb_puts(&e->body, ", ");
    px_put_reg(e, rb, i);
    sb_puts(&e->body, ", ");
    px_put_reg(e, px_regs(e, c), 0);
    sb_puts(&e->body, ";\n");
  }
}

/* Integer conversions between widths 1, 8, 16, 32, 64 (index = 64). */
static void emit_int_conv(Emit *e, IrOp *op, bool sign) {
  IrValue *d = &op->results[0], *a = op->operands[0].value;
  uint32_t wd = px_width_of(d->type), ws = px_width_of(a->type);
  char sg = sign ? 's' : 'u';
  if (wd == ws) {
    px_emitf(e, "mov.%s %v, %v;", px_rc_mov[px_regs(e, d)->cls], d, a);
    return;
  }
  if (ws == 1) {
    px_emitf(e, "selp.%s %v, %d, 0, %v;", px_isfx(d->type, 'b'), d, sign ? -1 : 1, a);
    return;
  }
  if (wd == 1) {
    Regs *t = px_new_regs(e, px_regs(e, a)->cls, 1);
    px_emitf(e, "and.%s %R, %v, 1;", px_isfx(a->type, 'b'), t, a);
    {
      px_emitf(e, "setp.ne.%s %v, %R, 0;", px_isfx(a->type, 'b'), d, t);
      return;
    }
  }
  if (wd == 8) {
    px_emitf(e, "cvt.s16.s8 %v, %v;", d, a);
    return;
  }
  if (ws == 8 && wd == 16) {
    if (sign) px_emitf(e, "mov.b16 %v, %v;", d, a);
    else px_emitf(e, "and.b16 %v, %v, 255;", d, a);
    return;
  }
  if (wd > ws) {
    px_emitf(e, "cvt.%s.%s %v, %v;", px_isfx(d->type, sg), px_isfx_exact(a->type, sg), d, a);
    return;
  }
  px_emitf(e, "cvt.%s.%s %v, %v;", px_isfx(d->type, 'u'), px_isfx(a->type, 'u'), d, a);
}

/* sitofp / uitofp. */
static void emit_itof(Emit *e, IrOp *op, bool sign) {
  IrValue *d = &op->results[0], *a = op->operands[0].value;
  const IrType *ft = d->type;
  if (px_is_i1(a->type)) {
    const char *one = ft->fkind == IR_F32   ? (sign ? "0fBF800000" : "0f3F800000")
                      : ft->fkind == IR_F64 ? (sign ? "0dBFF0000000000000" : "0d3FF0000000000000")
                      : ft->fkind == IR_F16 ? (sign ? "0xBC00" : "0x3C00")
                                            : (sign ? "0xBF80" : "0x3F80");
    const char *zero = ft->fkind == IR_F32   ? "0f00000000"
                       : ft->fkind == IR_F64 ? "0d0000000000000000"
                                             : "0x0000";
    const char *ty = ft->width == 16 ? "b16" : px_fsfx(ft);
    {
      px_emitf(e, "selp.%s %v, %s, %s, %v;", ty, d, one, zero, a);
      return;
    }
  }
  const char *src = px_is_i8(a->type) ? (sign ? "s16" : "u8") : px_isfx(a->type, sign ? 's' : 'u');
  px_emitf(e, "cvt.rn.%s.%s %v, %v;", px_fsfx(ft), src, d, a);
}

/* fptosi / fptoui, rounding toward zero. */
static void emit_ftoi(Emit *e, IrOp *op, bool sign) {
  IrValue *d = &op->results[0], *a = op->operands[0].value;
  uint32_t w = px_width_of(d->type);
  if (w == 1) {
    Regs *t = px_tmp(e, RC_B32);
    px_emitf(e, "cvt.rzi.s32.%s %R, %v;", px_fsfx(a->type), t, a);
    {
      px_emitf(e, "setp.ne.b32 %v, %R, 0;", d, t);
      return;
    }
  }
  px_emitf(e, "cvt.rzi.%s.%s %v, %v;", px_isfx_exact(d->type, sign ? 's' : 'u'), px_fsfx(a->type),
           d, a);
  if (!sign) px_norm8(e, d);
}

static void emit_fconv(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0], *a = op->operands[0].value;
  if (d->type->width > a->type->width) {
    px_emitf(e, "cvt.%s.%s %v, %v;", px_fsfx(d->type), px_fsfx(a->type), d, a);
    return;
  }
  if (d->type->width < a->type->width) {
    px_emitf(e, "cvt.rn.%s.%s %v, %v;", px_fsfx(d->type), px_fsfx(a->type), d, a);
    return;
  }
  Regs *t = px_tmp(e, RC_F32); /* f16 <-> bf16 */
  px_emitf(e, "cvt.f32.%s %R, %v;", px_fsfx(a->type), t, a);
  px_emitf(e, "cvt.rn.%s.f32 %v, %R;", px_fsfx(d->type), d, t);
}

static uint32_t reg_bits(RegClass c) {
  return c == RC_B16 ? 16u : c == RC_B32 || c == RC_F32 ? 32u : 64u;
}

/* A bitcast moves registers: one for one where both sides have registers of
** one width (a packed vector<2xbf16> is one 32-bit register, as i32 is), two
** 32-bit registers into or out of a 64-bit one (vector<4xbf16> <-> i64). */
static void emit_bitcast(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0], *a = op->operands[0].value;
  Regs *rd = px_regs(e, d), *ra = px_regs(e, a);
  if (rd->cls == RC_PRED) {
    px_emitf(e, "mov.pred %v, %v;", d, a);
    return;
  }
  uint32_t wd = reg_bits(rd->cls), wa = reg_bits(ra->cls);
  for (uint32_t i = 0; i < rd->n && wd == wa; i++) {
    Regs di = {rd->cls, 1, rd->base + i, false}, ai = {ra->cls, 1, ra->base + i, false};
    px_emitf(e, "mov.b%u %R, %R;", wd, &di, &ai);
  }
  for (uint32_t i = 0; i < rd->n && wd == 2 * wa; i++) {
    Regs di = {rd->cls, 1, rd->base + i, false}, lo = {ra->cls, 1, ra->base + 2 * i, false},
         hi = {ra->cls, 1, ra->base + 2 * i + 1, false};
    px_emitf(e, "mov.b%u %R, {%R, %R};", wd, &di, &lo, &hi);
  }
  for (uint32_t i = 0; i < ra->n && wa == 2 * wd; i++) {
    Regs ai = {ra->cls, 1, ra->base + i, false}, lo = {rd->cls, 1, rd->base + 2 * i, false},
         hi = {rd->cls, 1, rd->base + 2 * i + 1, false};
    px_emitf(e, "mov.b%u {%R, %R}, %R;", wa, &lo, &hi, &ai);
  }
}

static void emit_unary_float(Emit *e, IrOp *op, const char *mn) {
  px_emitf(e, "%s.%s %v, %v;", mn, px_fsfx(op->results[0].type), &op->results[0],
           op->operands[0].value);
}

static void emit_fma(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0];
  px_emitf(e, "fma.rn.%s %v, %v, %v, %v;", px_fsfx(d->type), d, op->operands[0].value,
           op->operands[1].value, op->operands[2].value);
}

/* }====================================================================== */

/* {======================================================================
** The arith ops
** ======================================================================= */

bool px_emit_arith(Emit *e, IrOp *op) {
  switch (op->kind) {
  case OP_ARITH_CONSTANT: emit_constant(e, op); return true;
  case OP_ARITH_ADDI: emit_int(e, op, "add", 's', I_NORM); return true;
  case OP_ARITH_SUBI: emit_int(e, op, "sub", 's', I_NORM); return true;
  case OP_ARITH_MULI: emit_int(e, op, "mul.lo", 's', I_NORM); return true;
  case OP_ARITH_DIVSI:
    if (!emit_divrem_pow2(e, op)) emit_int(e, op, "div", 's', I_NORM);
    return true;
  case OP_ARITH_DIVUI:
    if (!emit_divrem_pow2(e, op)) emit_int(e, op, "div", 'u', I_ZEXT);
    return true;
  case OP_ARITH_REMSI:
    if (!emit_divrem_pow2(e, op)) emit_int(e, op, "rem", 's', 0);
    return true;
  case OP_ARITH_REMUI:
    if (!emit_divrem_pow2(e, op)) emit_int(e, op, "rem", 'u', I_ZEXT);
    return true;
  case OP_ARITH_ANDI: emit_int(e, op, "and", 'b', 0); return true;
  case OP_ARITH_ORI: emit_int(e, op, "or", 'b', 0); return true;
  case OP_ARITH_XORI: emit_int(e, op, "xor", 'b', 0); return true;
  case OP_ARITH_MINSI: emit_int(e, op, "min", 's', 0); return true;
  case OP_ARITH_MAXSI: emit_int(e, op, "max", 's', 0); return true;
  case OP_ARITH_MINUI: emit_int(e, op, "min", 'u', I_ZEXT); return true;
  case OP_ARITH_MAXUI: emit_int(e, op, "max", 'u', I_ZEXT); return true;
  case OP_ARITH_SHLI:
  case OP_ARITH_SHRSI:
  case OP_ARITH_SHRUI: emit_shift(e, op); return true;
  case OP_ARITH_ADDF: emit_float(e, op, "add"); return true;
  case OP_ARITH_SUBF: emit_float(e, op, "sub"); return true;
  case OP_ARITH_MULF: emit_float(e, op, "mul"); return true;
  case OP_ARITH_DIVF: emit_divf(e, op); return true;
  case OP_ARITH_MINF:
  case OP_ARITH_MAXF: emit_minmaxf(e, op); return true;
  case OP_ARITH_NEGF: emit_unary_float(e, op, "neg"); return true;
  case OP_ARITH_FMA: emit_fma(e, op); return true;
  case OP_ARITH_CMPI: emit_cmpi(e, op); return true;
  case OP_ARITH_CMPF: emit_cmpf(e, op); return true;
  case OP_ARITH_SELECT: emit_select(e, op); return true;
  case OP_ARITH_EXTSI:
  case OP_ARITH_TRUNCI:
  case OP_ARITH_INDEX_CAST: emit_int_conv(e, op, true); return true;
  case OP_ARITH_EXTUI:
  case OP_ARITH_INDEX_CASTUI: emit_int_conv(e, op, false); return true;
  case OP_ARITH_SITOFP: emit_itof(e, op, true); return true;
  case OP_ARITH_UITOFP: emit_itof(e, op, false); return true;
  case OP_ARITH_FPTOSI: emit_ftoi(e, op, true); return true;
  case OP_ARITH_FPTOUI: emit_ftoi(e, op, false); return true;
  case OP_ARITH_EXTF:
  case OP_ARITH_TRUNCF: emit_fconv(e, op); return true;
  case OP_ARITH_BITCAST: emit_bitcast(e, op); return true;
  default: return false;
  }
}

/* }====================================================================== */
