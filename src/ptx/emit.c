/*
** emit.c -- the PTX emitter: tile.kernel ops holding nvvm + arith + scf (and the
** value-level tile.extract / tile.from_elements) to PTX text for sm_90a.
**
** Registers are typed virtual registers, one class per width: %p (.pred, i1),
** %rs (.b16: i8 i16 f16 bf16), %r (.b32: i32), %rd (.b64: i64 index), %f (.f32),
** %fd (.f64). An i8 lives in a .b16 register sign-extended from bit 7; ops
** that see the upper bits zero-extend it first, ops that can spill into them
** sign-extend the result again. A vector value holds several registers: one
** per element for elements of 32 bits or more, else packed .b32 words.
**
** scf ops become branches to labels $L_<kernel>_<n>; a region's terminator is
** handled by its parent op (copies into the registers of the loop-carried
** values or results, as a parallel copy). The emitter is a switch of one-line
** cases calling emit_<op> helpers with one state struct (Emit). Anything it
** cannot emit is a diagnostic on the op, never a crash.
*/
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../dialects/dialects.h"
#include "ptx.h"

typedef enum { RC_PRED, RC_B16, RC_B32, RC_B64, RC_F32, RC_F64, RC__COUNT } RegClass;

static const char *const rc_decl[RC__COUNT] = {".pred", ".b16", ".b32", ".b64", ".f32", ".f64"};
static const char *const rc_prefix[RC__COUNT] = {"%p", "%rs", "%r", "%rd", "%f", "%fd"};
static const char *const rc_mov[RC__COUNT] = {"pred", "b16", "b32", "b64", "f32", "f64"};

/* The registers of one value: n consecutive registers of a class. */
typedef struct Regs {
  RegClass cls;
  uint32_t n, base;
  bool aliased; /* another value holds these registers too (a cast): never updated in place */
} Regs;

#define MAX_VECTOR_REGS 256 /* registers of one vector value (wgmma accumulators: up to 128) */

typedef struct Emit {
  IrContext *ctx;
  StrBuf body; /* the current kernel's instructions */
  PtrMap regs; /* IrValue * -> Regs * */
  uint32_t next[RC__COUNT];
  uint32_t label, kernel;
  bool failed, smem; /* smem: some kernel uses the dynamic shared buffer */
  int64_t smem_align;
} Emit;

/* {======================================================================
** Registers and formatting
** ======================================================================= */

static bool fail(Emit *e, IrOp *op, const char *why) {
  if (op) ir_op_error(op, "cannot be emitted as PTX: %s", why);
  e->failed = true;
  return false;
}

/* The register class of a scalar type, or -1. */
static int scalar_class(const IrType *t) {
  switch (t->kind) {
  case IR_TY_INDEX:
  case IR_TY_PTR: return RC_B64;
  case IR_TY_INT:
    return t->width == 1                     ? RC_PRED
           : t->width == 8 || t->width == 16 ? RC_B16
           : t->width == 32                  ? RC_B32
           : t->width == 64                  ? RC_B64
                                             : -1;
  case IR_TY_FLOAT: return t->fkind == IR_F32 ? RC_F32 : t->fkind == IR_F64 ? RC_F64 : RC_B16;
  case IR_TY_DIALECT: return t->dialect_type == IR_DTY_TILE_TENSOR_MAP ? RC_B64 : -1; /* its generic address */
  default: return -1;
  }
}

/* Registers of a type: a scalar, or a vector (per element, or packed words). */
static bool type_regs(const IrType *t, RegClass *cls, uint32_t *n) {
  int c = scalar_class(t);
  *n = 1;
  if (c >= 0) return *cls = (RegClass)c, true;
  if (t->kind != IR_TY_VECTOR || t->rank != 1 || t->shape[0] < 1) return false;
  int64_t eb = dia_type_bytes(t->elem), bytes = dia_type_bytes(t);
  int ec = scalar_class(t->elem);
  if (ec < 0 || ec == RC_PRED || bytes > 4 * MAX_VECTOR_REGS) return false;
  if (eb >= 4) return *cls = (RegClass)ec, *n = (uint32_t)t->shape[0], true;
  if (bytes % 4) return false;
  return *cls = RC_B32, *n = (uint32_t)(bytes / 4), true;
}

static Regs *new_regs(Emit *e, RegClass cls, uint32_t n) {
  Regs *r = arena_alloc(ir_arena(e->ctx), sizeof *r);
  r->cls = cls;
  r->n = n;
  r->base = e->next[cls] + 1;
  e->next[cls] += n;
  return r;
}

static Regs *tmp(Emit *e, RegClass cls) { return new_regs(e, cls, 1); }

/* The registers of a value, allocated on first sight; NULL (diagnosed) for a
** type no register holds. */
static Regs *regs(Emit *e, IrValue *v) {
  Regs *r = ptrmap_get(&e->regs, v);
  if (r) return r;
  RegClass cls;
  uint32_t n;
  if (!type_regs(v->type, &cls, &n)) {
    char *s = ir_type_to_string(v->type);
    IrOp *at = v->def ? v->def : ir_block_parent_op(v->block);
    if (at) ir_op_error(at, "cannot be emitted as PTX: no register holds a value of type %s", s);
    free(s);
    e->failed = true;
    r = new_regs(e, RC_B32, 1); /* keep going to report more */
  } else {
    r = new_regs(e, cls, n);
  }
  ptrmap_set(&e->regs, v, r);
  return r;
}

static void put_reg(Emit *e, const Regs *r, uint32_t i) {
  sb_printf(&e->body, "%s%u", rc_prefix[r->cls], r->base + i);
}

static void put_list(Emit *e, const Regs *r) {
  if (r->n == 1) {
    put_reg(e, r, 0);
    return;
  }
  sb_putc(&e->body, '{');
  for (uint32_t i = 0; i < r->n; i++) {
    if (i) sb_puts(&e->body, ", ");
    put_reg(e, r, i);
  }
  sb_putc(&e->body, '}');
}

/* One instruction line. Directives: %v value (first register), %L value (all
** registers, braced when several), %R Regs *, %s string, %d int, %l long long,
** %u unsigned, %% a percent sign. */
static void emitf(Emit *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sb_putc(&e->body, '\t');
  for (const char *p = fmt; *p; p++) {
    if (*p != '%') {
      sb_putc(&e->body, *p);
      continue;
    }
    switch (*++p) {
    case 'v': put_reg(e, regs(e, va_arg(ap, IrValue *)), 0); break;
    case 'L': put_list(e, regs(e, va_arg(ap, IrValue *))); break;
    case 'R': put_reg(e, va_arg(ap, Regs *), 0); break;
    case 's': sb_puts(&e->body, va_arg(ap, const char *)); break;
    case 'd': sb_printf(&e->body, "%d", va_arg(ap, int)); break;
    case 'l': sb_printf(&e->body, "%lld", va_arg(ap, long long)); break;
    case 'u': sb_printf(&e->body, "%u", va_arg(ap, unsigned)); break;
    case '%': sb_putc(&e->body, '%'); break;
    default: break;
    }
  }
  sb_putc(&e->body, '\n');
  va_end(ap);
}

static void label(Emit *e, uint32_t l) { sb_printf(&e->body, "$L_%u_%u:\n", e->kernel, l); }

static void put_label(Emit *e, char *buf, size_t n, uint32_t l) {
  snprintf(buf, n, "$L_%u_%u", e->kernel, l);
}

/* mov of register i of one set into register j of another. */
static void mov_reg(Emit *e, const Regs *d, uint32_t i, const Regs *s, uint32_t j) {
  sb_printf(&e->body, "\tmov.%s ", rc_mov[d->cls]);
  put_reg(e, d, i);
  sb_puts(&e->body, ", ");
  put_reg(e, s, j);
  sb_puts(&e->body, ";\n");
}

static void mov_all(Emit *e, const Regs *d, const Regs *s) {
  for (uint32_t i = 0; i < d->n && i < s->n; i++)
    mov_reg(e, d, i, s, i);
}

/* d[i] <- s[i] for all i at once: through temporaries when a source is also a
** destination of another copy. */
static void parallel_copy(Emit *e, uint32_t n, Regs *const *d, Regs *const *s) {
  bool clash = false;
  for (uint32_t i = 0; i < n && !clash; i++)
    for (uint32_t j = 0; j < n; j++)
      clash |= i != j && s[i] == d[j];
  if (!clash) {
    for (uint32_t i = 0; i < n; i++)
      if (d[i] != s[i]) mov_all(e, d[i], s[i]);
    return;
  }
  Regs **t = malloc((n ? n : 1) * sizeof *t);
  if (!t) abort();
  for (uint32_t i = 0; i < n; i++) {
    t[i] = new_regs(e, s[i]->cls, s[i]->n);
    mov_all(e, t[i], s[i]);
  }
  for (uint32_t i = 0; i < n; i++)
    mov_all(e, d[i], t[i]);
  free(t);
}

/* }====================================================================== */

/* {======================================================================
** Type suffixes
** ======================================================================= */

static uint32_t width_of(const IrType *t) { return t->kind == IR_TY_INDEX ? 64 : t->width; }

/* Integer suffix with a sign letter ('s', 'u' or 'b') at the register width. */
static const char *isfx(const IrType *t, char sign) {
  static const char *const s[] = {"s16", "s32", "s64"}, *const u[] = {"u16", "u32", "u64"},
                           *const b[] = {"b16", "b32", "b64"};
  uint32_t w = width_of(t);
  int i = w <= 16 ? 0 : w == 32 ? 1 : 2;
  return sign == 's' ? s[i] : sign == 'u' ? u[i] : b[i];
}

/* Integer suffix at the type's own width (s8 for i8): for cvt sources. */
static const char *isfx_exact(const IrType *t, char sign) {
  if (width_of(t) == 8) return sign == 's' ? "s8" : "u8";
  return isfx(t, sign);
}

static const char *fsfx(const IrType *t) {
  static const char *const n[] = {"f16", "bf16", "f32", "f64"};
  return n[t->fkind];
}

static bool is_i8(const IrType *t) { return t->kind == IR_TY_INT && t->width == 8; }
static bool is_i1(const IrType *t) { return t->kind == IR_TY_INT && t->width == 1; }

/* Re-establish the sign-extended form of an i8 after an op that may spill. */
static void norm8(Emit *e, IrValue *v) {
  if (is_i8(v->type)) emitf(e, "cvt.s16.s8 %v, %v;", v, v);
}

/* An i8 operand zero-extended into a temporary (other types: the value's register). */
static Regs *zext8(Emit *e, IrValue *v) {
  if (!is_i8(v->type)) return regs(e, v);
  Regs *t = tmp(e, RC_B16);
  emitf(e, "and.b16 %R, %v, 255;", t, v);
  return t;
}

/* }====================================================================== */

/* {======================================================================
** arith
** ======================================================================= */

static void emit_block(Emit *e, IrBlock *b);

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
  const IrAttr *a = ir_op_attr(op, "value");
  IrValue *d = &op->results[0];
  const IrType *t = d->type;
  if (!a) {
    fail(e, op, "no value");
    return;
  }
  if (a->kind == IR_ATTR_INT) {
    uint32_t w = width_of(t);
    uint64_t bits = (uint64_t)a->u.i;
    if (w == 1) {
      emitf(e, "mov.pred %v, %d;", d, (int)(bits & 1));
      return;
    }
    int rw = w <= 16 ? 16 : (int)w;
    if (rw < 64) bits &= (1ull << rw) - 1;
    char buf[32];
    snprintf(buf, sizeof buf, "0x%llX", (unsigned long long)bits);
    {
      emitf(e, "mov.b%d %v, %s;", rw, d, buf);
      return;
    }
  }
  char buf[40];
  if (t->fkind == IR_F64) {
    uint64_t x;
    memcpy(&x, &a->u.f, 8);
    snprintf(buf, sizeof buf, "0d%016llX", (unsigned long long)x);
    {
      emitf(e, "mov.f64 %v, %s;", d, buf);
      return;
    }
  }
  if (t->fkind == IR_F32) {
    float f = (float)a->u.f;
    uint32_t x;
    memcpy(&x, &f, 4);
    snprintf(buf, sizeof buf, "0f%08X", x);
    {
      emitf(e, "mov.f32 %v, %s;", d, buf);
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
  emitf(e, "mov.b16 %v, %s;", d, buf);
}

/* i1 arithmetic as predicate logic (true is -1 when signed). */
static void emit_pred_binary(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0], *a = op->operands[0].value, *b = op->operands[1].value;
  switch (op->kind) {
  case OP_ARITH_ADDI:
  case OP_ARITH_SUBI:
  case OP_ARITH_XORI: {
    emitf(e, "xor.pred %v, %v, %v;", d, a, b);
    return;
  }
  case OP_ARITH_ANDI:
  case OP_ARITH_MULI:
  case OP_ARITH_MAXSI:
  case OP_ARITH_MINUI: {
    emitf(e, "and.pred %v, %v, %v;", d, a, b);
    return;
  }
  case OP_ARITH_ORI:
  case OP_ARITH_MINSI:
  case OP_ARITH_MAXUI: {
    emitf(e, "or.pred %v, %v, %v;", d, a, b);
    return;
  }
  default: fail(e, op, "unsupported on i1");
  }
}

enum { I_NORM = 1, I_ZEXT = 2 }; /* i8: re-normalize the result / zero-extend the operands */

/* An integer binary op "<mn>.<suffix> d, a, b". */
static void emit_int(Emit *e, IrOp *op, const char *mn, char sign, int flags) {
  IrValue *d = &op->results[0];
  if (is_i1(d->type)) {
    emit_pred_binary(e, op);
    return;
  }
  IrValue *a = op->operands[0].value, *b = op->operands[1].value;
  Regs *ra = (flags & I_ZEXT) ? zext8(e, a) : regs(e, a),
       *rb = (flags & I_ZEXT) ? zext8(e, b) : regs(e, b);
  emitf(e, "%s.%s %v, %R, %R;", mn, isfx(d->type, sign), d, ra, rb);
  if (flags & (I_NORM | I_ZEXT)) norm8(e, d);
}

/* The shift amount as the .u32 register PTX wants; amounts >= the width clamp. */
static Regs *shift_amount(Emit *e, IrValue *b) {
  uint32_t w = width_of(b->type);
  if (w == 32) return regs(e, b);
  Regs *t = tmp(e, RC_B32);
  if (w == 64) {
    Regs *c = tmp(e, RC_B64);
    emitf(e, "min.u64 %R, %v, 64;", c, b);
    emitf(e, "cvt.u32.u64 %R, %R;", t, c);
  } else {
    emitf(e, "cvt.u32.u16 %R, %R;", t, zext8(e, b));
  }
  return t;
}

static void emit_shift(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0], *a = op->operands[0].value, *b = op->operands[1].value;
  if (is_i1(d->type)) {
    fail(e, op, "unsupported on i1");
    return;
  }
  Regs *amt = shift_amount(e, b);
  if (op->kind == OP_ARITH_SHLI)
    emitf(e, "shl.%s %v, %v, %R;", isfx(d->type, 'b'), d, a, amt);
  else if (op->kind == OP_ARITH_SHRSI)
    emitf(e, "shr.%s %v, %v, %R;", isfx(d->type, 's'), d, a, amt);
  else
    emitf(e, "shr.%s %v, %R, %R;", isfx(d->type, 'u'), d, zext8(e, a), amt);
  norm8(e, d);
}

static void emit_cmpi(Emit *e, IrOp *op) {
  static const char *const preds[] = {"eq",  "ne",  "slt", "sle", "sgt", "sge",
                                      "ult", "ule", "ugt", "uge", NULL};
  static const char *const ptx[] = {"eq", "ne", "lt", "le", "gt", "ge", "lt", "le", "gt", "ge"};
  const char *p = ir_op_attr_str(op, "predicate");
  int i = 0;
  while (preds[i] && (!p || strcmp(preds[i], p) != 0))
    i++;
  if (!preds[i]) {
    fail(e, op, "unknown predicate");
    return;
  }
  IrValue *d = &op->results[0], *a = op->operands[0].value, *b = op->operands[1].value;
  if (is_i1(a->type)) {
    if (i > 1) {
      fail(e, op, "ordered comparison of i1");
      return;
    }
    emitf(e, "xor.pred %v, %v, %v;", d, a, b);
    if (i == 0) emitf(e, "not.pred %v, %v;", d, d);
    return;
  }
  emitf(e, "setp.%s.%s %v, %v, %v;", ptx[i], isfx(a->type, i >= 6 ? 'u' : 's'), d, a, b);
}

static void emit_cmpf(Emit *e, IrOp *op) {
  static const char *const preds[] = {"oeq", "one", "olt", "ole", "ogt", "oge", "ord", "ueq",
                                      "une", "ult", "ule", "ugt", "uge", "uno", NULL};
  static const char *const ptx[] = {"eq",  "ne",  "lt",  "le",  "gt",  "ge",  "num",
                                    "equ", "neu", "ltu", "leu", "gtu", "geu", "nan"};
  const char *p = ir_op_attr_str(op, "predicate");
  int i = 0;
  while (preds[i] && (!p || strcmp(preds[i], p) != 0))
    i++;
  if (!preds[i]) {
    fail(e, op, "unknown predicate");
    return;
  }
  IrValue *a = op->operands[0].value;
  emitf(e, "setp.%s.%s %v, %v, %v;", ptx[i], fsfx(a->type), &op->results[0], a,
        op->operands[1].value);
}

/* Float arithmetic; round to nearest and no contraction (.rn). */
static void emit_float(Emit *e, IrOp *op, const char *mn) {
  IrValue *d = &op->results[0], *a = op->operands[0].value, *b = op->operands[1].value;
  emitf(e, "%s.rn.%s %v, %v, %v;", mn, fsfx(d->type), d, a, b);
}

/* f16 / bf16 division through f32. */
static void emit_divf(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0], *a = op->operands[0].value, *b = op->operands[1].value;
  if (d->type->width > 16) {
    emit_float(e, op, "div");
    return;
  }
  Regs *x = tmp(e, RC_F32), *y = tmp(e, RC_F32);
  emitf(e, "cvt.f32.%s %R, %v;", fsfx(a->type), x, a);
  emitf(e, "cvt.f32.%s %R, %v;", fsfx(b->type), y, b);
  emitf(e, "div.rn.f32 %R, %R, %R;", x, x, y);
  emitf(e, "cvt.rn.%s.f32 %v, %R;", fsfx(d->type), d, x);
}

/* minimumf / maximumf: NaN if either is NaN (min.NaN; f64 has no such form). */
static void emit_minmaxf(Emit *e, IrOp *op) {
  const char *mn = op->kind == OP_ARITH_MINF ? "min" : "max";
  IrValue *d = &op->results[0], *a = op->operands[0].value, *b = op->operands[1].value;
  if (d->type->fkind != IR_F64) {
    emitf(e, "%s.NaN.%s %v, %v, %v;", mn, fsfx(d->type), d, a, b);
    return;
  }
  Regs *p = tmp(e, RC_PRED);
  emitf(e, "%s.f64 %v, %v, %v;", mn, d, a, b);
  emitf(e, "setp.nan.f64 %R, %v, %v;", p, a, b);
  emitf(e, "selp.f64 %v, 0d7FF8000000000000, %v, %R;", d, d, p);
}

static void emit_select(Emit *e, IrOp *op) {
  IrValue *c = op->operands[0].value, *a = op->operands[1].value, *b = op->operands[2].value,
          *d = &op->results[0];
  Regs *rd = regs(e, d), *ra = regs(e, a), *rb = regs(e, b);
  if (rd->cls == RC_PRED) {
    emitf(e, "@%v mov.pred %v, %v;", c, d, a);
    emitf(e, "@!%v mov.pred %v, %v;", c, d, b);
    return;
  }
  for (uint32_t i = 0; i < rd->n; i++) {
    sb_printf(&e->body, "\tselp.%s ", rc_mov[rd->cls]);
    put_reg(e, rd, i);
    sb_puts(&e->body, ", ");
    put_reg(e, ra, i);
    sb_puts(&e->body, ", ");
    put_reg(e, rb, i);
    sb_puts(&e->body, ", ");
    put_reg(e, regs(e, c), 0);
    sb_puts(&e->body, ";\n");
  }
}

/* Integer conversions between widths 1, 8, 16, 32, 64 (index = 64). */
static void emit_int_conv(Emit *e, IrOp *op, bool sign) {
  IrValue *d = &op->results[0], *a = op->operands[0].value;
  uint32_t wd = width_of(d->type), ws = width_of(a->type);
  char sg = sign ? 's' : 'u';
  if (wd == ws) {
    emitf(e, "mov.%s %v, %v;", rc_mov[regs(e, d)->cls], d, a);
    return;
  }
  if (ws == 1) {
    emitf(e, "selp.%s %v, %d, 0, %v;", isfx(d->type, 'b'), d, sign ? -1 : 1, a);
    return;
  }
  if (wd == 1) {
    Regs *t = new_regs(e, regs(e, a)->cls, 1);
    emitf(e, "and.%s %R, %v, 1;", isfx(a->type, 'b'), t, a);
    {
      emitf(e, "setp.ne.%s %v, %R, 0;", isfx(a->type, 'b'), d, t);
      return;
    }
  }
  if (wd == 8) {
    emitf(e, "cvt.s16.s8 %v, %v;", d, a);
    return;
  }
  if (ws == 8 && wd == 16) {
    if (sign)
      emitf(e, "mov.b16 %v, %v;", d, a);
    else
      emitf(e, "and.b16 %v, %v, 255;", d, a);
    return;
  }
  if (wd > ws) {
    emitf(e, "cvt.%s.%s %v, %v;", isfx(d->type, sg), isfx_exact(a->type, sg), d, a);
    return;
  }
  emitf(e, "cvt.%s.%s %v, %v;", isfx(d->type, 'u'), isfx(a->type, 'u'), d, a);
}

/* sitofp / uitofp. */
static void emit_itof(Emit *e, IrOp *op, bool sign) {
  IrValue *d = &op->results[0], *a = op->operands[0].value;
  const IrType *ft = d->type;
  if (is_i1(a->type)) {
    const char *one = ft->fkind == IR_F32   ? (sign ? "0fBF800000" : "0f3F800000")
                      : ft->fkind == IR_F64 ? (sign ? "0dBFF0000000000000" : "0d3FF0000000000000")
                      : ft->fkind == IR_F16 ? (sign ? "0xBC00" : "0x3C00")
                                            : (sign ? "0xBF80" : "0x3F80");
    const char *zero = ft->fkind == IR_F32   ? "0f00000000"
                       : ft->fkind == IR_F64 ? "0d0000000000000000"
                                             : "0x0000";
    const char *ty = ft->width == 16 ? "b16" : fsfx(ft);
    {
      emitf(e, "selp.%s %v, %s, %s, %v;", ty, d, one, zero, a);
      return;
    }
  }
  const char *src = is_i8(a->type) ? (sign ? "s16" : "u8") : isfx(a->type, sign ? 's' : 'u');
  emitf(e, "cvt.rn.%s.%s %v, %v;", fsfx(ft), src, d, a);
}

/* fptosi / fptoui, rounding toward zero. */
static void emit_ftoi(Emit *e, IrOp *op, bool sign) {
  IrValue *d = &op->results[0], *a = op->operands[0].value;
  uint32_t w = width_of(d->type);
  if (w == 1) {
    Regs *t = tmp(e, RC_B32);
    emitf(e, "cvt.rzi.s32.%s %R, %v;", fsfx(a->type), t, a);
    {
      emitf(e, "setp.ne.b32 %v, %R, 0;", d, t);
      return;
    }
  }
  emitf(e, "cvt.rzi.%s.%s %v, %v;", isfx_exact(d->type, sign ? 's' : 'u'), fsfx(a->type), d, a);
  if (!sign) norm8(e, d);
}

static void emit_fconv(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0], *a = op->operands[0].value;
  if (d->type->width > a->type->width) {
    emitf(e, "cvt.%s.%s %v, %v;", fsfx(d->type), fsfx(a->type), d, a);
    return;
  }
  if (d->type->width < a->type->width) {
    emitf(e, "cvt.rn.%s.%s %v, %v;", fsfx(d->type), fsfx(a->type), d, a);
    return;
  }
  Regs *t = tmp(e, RC_F32); /* f16 <-> bf16 */
  emitf(e, "cvt.f32.%s %R, %v;", fsfx(a->type), t, a);
  emitf(e, "cvt.rn.%s.f32 %v, %R;", fsfx(d->type), d, t);
}

static void emit_bitcast(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0], *a = op->operands[0].value;
  Regs *rd = regs(e, d);
  if (rd->cls == RC_PRED) {
    emitf(e, "mov.pred %v, %v;", d, a);
    return;
  }
  emitf(e, "mov.b%u %v, %v;",
        rd->cls == RC_B16                        ? 16u
        : rd->cls == RC_B32 || rd->cls == RC_F32 ? 32u
                                                 : 64u,
        d, a);
}

static void emit_unary_float(Emit *e, IrOp *op, const char *mn) {
  emitf(e, "%s.%s %v, %v;", mn, fsfx(op->results[0].type), &op->results[0], op->operands[0].value);
}

static void emit_fma(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0];
  emitf(e, "fma.rn.%s %v, %v, %v, %v;", fsfx(d->type), d, op->operands[0].value,
        op->operands[1].value, op->operands[2].value);
}

/* }====================================================================== */

/* {======================================================================
** Vectors (tile.extract, tile.from_elements)
** ======================================================================= */

static void emit_extract(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0], *v = op->operands[0].value;
  int64_t idx = ir_op_attr_int_or(op, "index", 0), eb = dia_type_bytes(v->type->elem);
  Regs *rv = regs(e, v), *rd = regs(e, d);
  if (eb >= 4) {
    mov_reg(e, rd, 0, rv, (uint32_t)idx);
    return;
  }
  int64_t per = 4 / eb, word = idx / per, pos = (idx % per) * eb * 8;
  Regs w = {RC_B32, 1, rv->base + (uint32_t)word, false}, *t = tmp(e, RC_B32);
  emitf(e, "bfe.s32 %R, %R, %d, %d;", t, &w, (int)pos, (int)eb * 8);
  emitf(e, "cvt.u16.u32 %v, %R;", d, t);
}

static void emit_from_elements(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0];
  Regs *rd = regs(e, d);
  int64_t eb = dia_type_bytes(d->type->elem), per = eb >= 4 ? 1 : 4 / eb;
  for (uint32_t i = 0; i < op->noperands; i++) {
    IrValue *x = op->operands[i].value;
    Regs w = {RC_B32, 1, rd->base + (uint32_t)(i / per), false};
    if (eb >= 4) {
      mov_reg(e, rd, i, regs(e, x), 0);
    } else if (i % per == 0) {
      emitf(e, "cvt.u32.u16 %R, %v;", &w, x);
    } else {
      Regs *t = tmp(e, RC_B32);
      emitf(e, "cvt.u32.u16 %R, %v;", t, x);
      emitf(e, "bfi.b32 %R, %R, %R, %d, %d;", &w, t, &w, (int)((i % per) * eb * 8), (int)eb * 8);
    }
  }
}

/* }====================================================================== */

/* {======================================================================
** Memory
** ======================================================================= */

/* The ld/st type of a value and its vector prefix (".v2", ".v4" or ""). */
static const char *mem_type(Emit *e, IrValue *v, bool load, const char **vec) {
  Regs *r = regs(e, v);
  *vec = r->n == 4 ? ".v4" : r->n == 2 ? ".v2" : "";
  if (v->type->kind == IR_TY_VECTOR) return rc_mov[r->cls];
  if (is_i8(v->type)) return load ? "s8" : "b8";
  return rc_mov[r->cls];
}

static const char *space_of(IrOpKind k) {
  switch (k) {
  case OP_NVVM_LD_GLOBAL:
  case OP_NVVM_ST_GLOBAL:
  case OP_NVVM_ATOM_GLOBAL:
  case OP_NVVM_ATOM_CAS_GLOBAL:
  case OP_NVVM_RED_GLOBAL: return ".global";
  case OP_NVVM_LD_SHARED:
  case OP_NVVM_ST_SHARED: return ".shared";
  case OP_NVVM_ATOM_SHARED:
  case OP_NVVM_ATOM_CAS_SHARED:
  case OP_NVVM_RED_SHARED: return ".shared::cta";
  case OP_NVVM_LD_SHARED_CLUSTER:
  case OP_NVVM_ST_SHARED_CLUSTER:
  case OP_NVVM_ATOM_SHARED_CLUSTER:
  case OP_NVVM_ATOM_CAS_SHARED_CLUSTER:
  case OP_NVVM_RED_SHARED_CLUSTER: return ".shared::cluster";
  default: return "";
  }
}

static const char *volatile_of(IrOp *op) {
  const IrAttr *a = ir_op_attr(op, "volatile");
  bool cluster = op->kind == OP_NVVM_LD_SHARED_CLUSTER || op->kind == OP_NVVM_ST_SHARED_CLUSTER;
  return a && a->kind == IR_ATTR_BOOL && a->u.b && !cluster ? ".volatile" : "";
}

static void emit_load(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0], *a = op->operands[0].value;
  const char *vec, *ty;
  if (is_i1(d->type)) {
    Regs *t = tmp(e, RC_B16);
    emitf(e, "ld%s%s.u8 %R, [%v];", volatile_of(op), space_of(op->kind), t, a);
    {
      emitf(e, "setp.ne.b16 %v, %R, 0;", d, t);
      return;
    }
  }
  ty = mem_type(e, d, true, &vec);
  emitf(e, "ld%s%s%s.%s %L, [%v];", volatile_of(op), space_of(op->kind), vec, ty, d, a);
}

static void emit_store(Emit *e, IrOp *op) {
  IrValue *a = op->operands[0].value, *v = op->operands[1].value;
  const char *vec, *ty;
  if (is_i1(v->type)) {
    Regs *t = tmp(e, RC_B16);
    emitf(e, "selp.u16 %R, 1, 0, %v;", t, v);
    {
      emitf(e, "st%s%s.u8 [%v], %R;", volatile_of(op), space_of(op->kind), a, t);
      return;
    }
  }
  ty = mem_type(e, v, false, &vec);
  emitf(e, "st%s%s%s.%s [%v], %L;", volatile_of(op), space_of(op->kind), vec, ty, a, v);
}

/* atom / red: atom.scope.space.op.type; umax / umin are max / min on .u types. */
static void emit_atom(Emit *e, IrOp *op) {
  IrValue *a = op->operands[0].value, *v = op->operands[1].value;
  const char *o = ir_op_attr_str(op, "op"), *scope = ir_op_attr_str(op, "scope");
  bool cas = !o, red = op->nresults == 0;
  const IrType *t = v->type;
  const char *mn = cas ? "cas" : o[0] == 'u' ? o + 1 : o, *ty;
  if (cas || !strcmp(o, "exch") || !strcmp(o, "and") || !strcmp(o, "or") || !strcmp(o, "xor"))
    ty = isfx(t, 'b');
  else if (t->kind == IR_TY_FLOAT)
    ty = fsfx(t);
  else
    ty = isfx(t, !strcmp(o, "add") || o[0] == 'u' ? 'u' : 's');
  if (red) {
    emitf(e, "red.%s%s.%s.%s [%v], %v;", scope ? scope : "gpu", space_of(op->kind), mn, ty, a, v);
    return;
  }
  if (cas) {
    emitf(e, "atom.%s%s.cas.%s %v, [%v], %v, %v;", scope ? scope : "gpu", space_of(op->kind), ty,
          &op->results[0], a, v, op->operands[2].value);
    return;
  }
  emitf(e, "atom.%s%s.%s.%s %v, [%v], %v;", scope ? scope : "gpu", space_of(op->kind), mn, ty,
        &op->results[0], a, v);
}

/* }====================================================================== */

/* {======================================================================
** nvvm: special registers, barriers, async copies
** ======================================================================= */

/* "nvvm.read.ptx.sreg.cluster.ctaid.x" -> "%cluster_ctaid.x". */
static void emit_sreg(Emit *e, IrOp *op) {
  const char *n = ir_op_name(op) + strlen("nvvm.read.ptx.sreg.");
  char buf[48];
  if (strncmp(n, "cluster.", 8) == 0)
    snprintf(buf, sizeof buf, "%%cluster_%s", n + 8);
  else
    snprintf(buf, sizeof buf, "%%%s", n);
  IrValue *d = &op->results[0];
  emitf(e, "mov.%s %v, %s;", width_of(d->type) == 64 ? "u64" : "u32", d, buf);
}

/* ".release.cta" / ".acquire.cluster" from an optional `scope`. */
static const char *sem_scope(IrOp *op, bool acquire, char *buf, size_t n) {
  const char *s = ir_op_attr_str(op, "scope");
  if (!s) return "";
  snprintf(buf, n, ".%s.%s", acquire ? "acquire" : "release", s);
  return buf;
}

static void emit_mbarrier(Emit *e, IrOp *op) {
  char sc[32];
  IrValue *a = op->operands[0].value, *b = op->noperands > 1 ? op->operands[1].value : NULL;
  switch (op->kind) {
  case OP_NVVM_MBARRIER_INIT_SHARED: {
    emitf(e, "mbarrier.init.shared::cta.b64 [%v], %v;", a, b);
    return;
  }
  case OP_NVVM_MBARRIER_ARRIVE_SHARED:
  case OP_NVVM_MBARRIER_ARRIVE_SHARED_CLUSTER: {
    const char *sp = op->kind == OP_NVVM_MBARRIER_ARRIVE_SHARED ? "cta" : "cluster";
    if (b) {
      emitf(e, "mbarrier.arrive%s.shared::%s.b64 _, [%v], %v;", sem_scope(op, false, sc, sizeof sc),
            sp, a, b);
      return;
    }
    {
      emitf(e, "mbarrier.arrive%s.shared::%s.b64 _, [%v];", sem_scope(op, false, sc, sizeof sc), sp,
            a);
      return;
    }
  }
  case OP_NVVM_MBARRIER_ARRIVE_EXPECT_TX_SHARED: {
    emitf(e, "mbarrier.arrive.expect_tx%s.shared::cta.b64 _, [%v], %v;",
          sem_scope(op, false, sc, sizeof sc), a, b);
    return;
  }
  case OP_NVVM_MBARRIER_ARRIVE_EXPECT_TX_SHARED_CLUSTER: {
    emitf(e, "mbarrier.arrive.expect_tx%s.shared::cluster.b64 _, [%v], %v;",
          sem_scope(op, false, sc, sizeof sc), a, b);
    return;
  }
  case OP_NVVM_MBARRIER_EXPECT_TX_SHARED: {
    emitf(e, "mbarrier.expect_tx.shared::cta.b64 [%v], %v;", a, b);
    return;
  }
  case OP_NVVM_MBARRIER_TRY_WAIT_PARITY_SHARED:
    if (op->noperands > 2) {
      emitf(e, "mbarrier.try_wait.parity%s.shared::cta.b64 %v, [%v], %v, %v;",
            sem_scope(op, true, sc, sizeof sc), &op->results[0], a, b, op->operands[2].value);
      return;
    }
    {
      emitf(e, "mbarrier.try_wait.parity%s.shared::cta.b64 %v, [%v], %v;",
            sem_scope(op, true, sc, sizeof sc), &op->results[0], a, b);
      return;
    }
  case OP_NVVM_MBARRIER_TEST_WAIT_PARITY_SHARED: {
    emitf(e, "mbarrier.test_wait.parity%s.shared::cta.b64 %v, [%v], %v;",
          sem_scope(op, true, sc, sizeof sc), &op->results[0], a, b);
    return;
  }
  default: {
    emitf(e, "mbarrier.inval.shared::cta.b64 [%v];", a);
    return;
  }
  }
}

static void emit_fence(Emit *e, IrOp *op) {
  const char *sp = ir_op_attr_str(op, "space"), *sem = ir_op_attr_str(op, "sem"),
             *scope = ir_op_attr_str(op, "scope");
  if (op->kind == OP_NVVM_FENCE_MBARRIER_INIT) {
    emitf(e, "fence.mbarrier_init.release.cluster;");
    return;
  }
  if (op->kind == OP_NVVM_FENCE_PROXY_ASYNC) {
    emitf(e, "fence.proxy.async%s%s;", sp ? "." : "", sp ? sp : "");
    return;
  }
  emitf(e, "fence.%s.%s;", sem ? sem : "acq_rel", scope ? scope : "gpu");
}

static bool flag(IrOp *op, const char *name) {
  const IrAttr *a = ir_op_attr(op, name);
  return a && a->kind == IR_ATTR_BOOL && a->u.b;
}

static void emit_bulk(Emit *e, IrOp *op) {
  IrValue *o[4];
  for (uint32_t i = 0; i < op->noperands && i < 4; i++)
    o[i] = op->operands[i].value;
  switch (op->kind) {
  case OP_NVVM_CP_ASYNC_BULK_SHARED_CLUSTER_GLOBAL: {
    emitf(e,
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%v], [%v], %v, [%v];",
          o[0], o[1], o[2], o[3]);
    return;
  }
  case OP_NVVM_CP_ASYNC_BULK_GLOBAL_SHARED_CTA: {
    emitf(e, "cp.async.bulk.global.shared::cta.bulk_group [%v], [%v], %v;", o[0], o[1], o[2]);
    return;
  }
  case OP_NVVM_CP_ASYNC_BULK_COMMIT_GROUP: {
    emitf(e, "cp.async.bulk.commit_group;");
    return;
  }
  default: {
    emitf(e, "cp.async.bulk.wait_group%s %d;", flag(op, "read") ? ".read" : "",
          (int)ir_op_attr_int_or(op, "group", 0));
    return;
  }
  }
}

static void emit_barrier(Emit *e, IrOp *op) {
  const char *al = flag(op, "aligned") ? ".aligned" : "";
  switch (op->kind) {
  case OP_NVVM_BARRIER0: {
    emitf(e, "bar.sync 0;");
    return;
  }
  case OP_NVVM_BARRIER:
    if (op->noperands > 1) {
      emitf(e, "bar.sync %v, %v;", op->operands[0].value, op->operands[1].value);
      return;
    }
    {
      emitf(e, "bar.sync %v;", op->operands[0].value);
      return;
    }
  case OP_NVVM_BARRIER_ARRIVE: {
    emitf(e, "bar.arrive %v, %v;", op->operands[0].value, op->operands[1].value);
    return;
  }
  case OP_NVVM_CLUSTER_ARRIVE: {
    emitf(e, "barrier.cluster.arrive%s;", al);
    return;
  }
  case OP_NVVM_CLUSTER_ARRIVE_RELAXED: {
    emitf(e, "barrier.cluster.arrive.relaxed%s;", al);
    return;
  }
  default: {
    emitf(e, "barrier.cluster.wait%s;", al);
    return;
  }
  }
}

static void emit_elect(Emit *e, IrOp *op) {
  Regs *t = tmp(e, RC_B32);
  char m[16];
  snprintf(m, sizeof m, "0x%llx", (unsigned long long)(uint32_t)ir_op_attr_int_or(op, "mask", -1));
  sb_puts(&e->body, "\telect.sync ");
  put_reg(e, t, 0);
  sb_putc(&e->body, '|');
  put_reg(e, regs(e, &op->results[0]), 0);
  sb_printf(&e->body, ", %s;\n", m);
}

static void emit_wgmma(Emit *e, IrOp *op) {
  if (op->kind == OP_NVVM_WGMMA_FENCE_ALIGNED) {
    emitf(e, "wgmma.fence.sync.aligned;");
    return;
  }
  if (op->kind == OP_NVVM_WGMMA_COMMIT_GROUP_SYNC_ALIGNED) {
    emitf(e, "wgmma.commit_group.sync.aligned;");
    return;
  }
  emitf(e, "wgmma.wait_group.sync.aligned %d;", (int)ir_op_attr_int_or(op, "group", 0));
}

static void emit_setmaxreg(Emit *e, IrOp *op) {
  const char *act = ir_op_attr_str(op, "action");
  emitf(e, "setmaxnreg.%s.sync.aligned.u32 %d;", act ? act : "inc",
        (int)ir_op_attr_int_or(op, "count", 0));
}

static void emit_cvta(Emit *e, IrOp *op) {
  static const struct {
    IrOpKind k;
    const char *s;
  } m[] = {{OP_NVVM_CVTA_SHARED, "cvta.shared"},
           {OP_NVVM_CVTA_TO_SHARED, "cvta.to.shared"},
           {OP_NVVM_CVTA_GLOBAL, "cvta.global"},
           {OP_NVVM_CVTA_TO_GLOBAL, "cvta.to.global"}};
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
    if (m[i].k == op->kind) {
      emitf(e, "%s.u64 %v, %v;", m[i].s, &op->results[0], op->operands[0].value);
      return;
    }
}

static void emit_shared_base(Emit *e, IrOp *op) {
  e->smem = true;
  emitf(e, "mov.u32 %v, smem;", &op->results[0]);
}

/* The text with $N replaced by operand N's register. */
static void emit_inline_ptx(Emit *e, IrOp *op) {
  const char *s = ir_op_attr_str(op, "ptx");
  sb_putc(&e->body, '\t');
  for (const char *p = s ? s : ""; *p; p++) {
    char *end;
    long i = *p == '$' ? strtol(p + 1, &end, 10) : -1;
    if (i < 0 || i >= (long)op->noperands || end == p + 1) {
      sb_putc(&e->body, *p);
      continue;
    }
    put_reg(e, regs(e, op->operands[i].value), 0);
    p = end - 1;
  }
  sb_putc(&e->body, '\n');
}

/* builtin.unrealized_conversion_cast between values of one register class:
** the result shares the operand's registers (no instruction). */
static void emit_cast(Emit *e, IrOp *op) {
  if (op->noperands != 1 || op->nresults != 1) {
    fail(e, op, "only 1-to-1 casts are emitted");
    return;
  }
  Regs *s = regs(e, op->operands[0].value);
  RegClass cls;
  uint32_t n;
  if (!type_regs(op->results[0].type, &cls, &n) || cls != s->cls || n != s->n) {
    fail(e, op, "the two types differ in their registers");
    return;
  }
  s->aliased = true;
  ptrmap_set(&e->regs, &op->results[0], s);
}

/* }====================================================================== */

/* {======================================================================
** Structured control flow
** ======================================================================= */

/* A loop takes over the registers of an initial value that nothing else reads
** (its only use, not aliased): no copy on entry, so an accumulator that wgmma
** is still writing is not read. Returns the registers to use, or NULL. */
static Regs *take_over(Emit *e, IrValue *init) {
  Regs *r = regs(e, init);
  return ir_value_num_uses(init) == 1 && !r->aliased ? r : NULL;
}

static Regs **regs_of_values(Emit *e, uint32_t n, IrValue *const *vals) {
  Regs **r = arena_alloc(ir_arena(e->ctx), (n ? n : 1) * sizeof *r);
  for (uint32_t i = 0; i < n; i++)
    r[i] = regs(e, vals[i]);
  return r;
}

/* Registers for the operands of a terminator starting at `from`. */
static Regs **term_regs(Emit *e, IrOp *t, uint32_t from, uint32_t *n) {
  *n = t && t->noperands > from ? t->noperands - from : 0;
  Regs **r = arena_alloc(ir_arena(e->ctx), (*n ? *n : 1) * sizeof *r);
  for (uint32_t i = 0; i < *n; i++)
    r[i] = regs(e, t->operands[from + i].value);
  return r;
}

/* Bind a list of values (block arguments, results) to given registers. */
static void bind(Emit *e, uint32_t n, IrValue *const *vals, Regs *const *r) {
  for (uint32_t i = 0; i < n; i++)
    ptrmap_set(&e->regs, vals[i], r[i]);
}

static IrValue **op_results(IrOp *op, IrValue **buf) {
  for (uint32_t i = 0; i < op->nresults; i++)
    buf[i] = &op->results[i];
  return buf;
}

/* scf.for: the induction variable and the iter values live in the results'
** registers; the bound is compared signed before each iteration. */
static void emit_for(Emit *e, IrOp *op) {
  IrBlock *body = op->regions[0].first;
  IrValue *lb = op->operands[0].value, *ub = op->operands[1].value, *step = op->operands[2].value;
  uint32_t n = op->nresults, head = ++e->label, exit = ++e->label;
  if (!body || body->nargs != n + 1) {
    fail(e, op, "malformed body");
    return;
  }
  IrValue *resv[64];
  if (n > 64) {
    fail(e, op, "too many loop-carried values");
    return;
  }
  for (uint32_t i = 0; i < n; i++) {
    Regs *own = take_over(e, op->operands[3 + i].value);
    if (own && !ptrmap_get(&e->regs, &op->results[i])) ptrmap_set(&e->regs, &op->results[i], own);
  }
  Regs **iters = regs_of_values(e, n, op_results(op, resv));
  Regs *iv = new_regs(e, regs(e, lb)->cls, 1), *p = tmp(e, RC_PRED);
  bind(e, 1, &body->args[0], &iv);
  bind(e, n, body->args + 1, iters);
  mov_all(e, iv, regs(e, lb));
  for (uint32_t i = 0; i < n; i++) {
    Regs *init = regs(e, op->operands[3 + i].value);
    if (init != iters[i]) mov_all(e, iters[i], init);
  }
  char l[32];
  label(e, head);
  emitf(e, "setp.ge.%s %R, %R, %v;", isfx(lb->type, 's'), p, iv, ub);
  put_label(e, l, sizeof l, exit);
  emitf(e, "@%R bra %s;", p, l);
  emit_block(e, body);
  uint32_t ny;
  Regs **ys = term_regs(e, ir_block_terminator(body), 0, &ny);
  parallel_copy(e, ny < n ? ny : n, iters, ys);
  emitf(e, "add.%s %R, %R, %v;", isfx(lb->type, 's'), iv, iv, step);
  if (is_i8(lb->type)) emitf(e, "cvt.s16.s8 %R, %R;", iv, iv);
  put_label(e, l, sizeof l, head);
  emitf(e, "bra.uni %s;", l);
  label(e, exit);
}

static void emit_yield_into(Emit *e, IrBlock *b, Regs *const *dst, uint32_t n) {
  uint32_t ny;
  Regs **ys = term_regs(e, b ? ir_block_terminator(b) : NULL, 0, &ny);
  parallel_copy(e, ny < n ? ny : n, dst, ys);
}

static void emit_if(Emit *e, IrOp *op) {
  IrBlock *then = op->regions[0].first, *els = op->regions[1].first;
  IrValue *resv[64];
  if (op->nresults > 64) {
    fail(e, op, "too many results");
    return;
  }
  Regs **res = regs_of_values(e, op->nresults, op_results(op, resv));
  uint32_t lelse = ++e->label, lend = ++e->label;
  bool has_else = els && (els->first || op->nresults);
  char l[32];
  put_label(e, l, sizeof l, has_else ? lelse : lend);
  emitf(e, "@!%v bra %s;", op->operands[0].value, l);
  if (then) emit_block(e, then);
  emit_yield_into(e, then, res, op->nresults);
  if (has_else) {
    put_label(e, l, sizeof l, lend);
    emitf(e, "bra.uni %s;", l);
    label(e, lelse);
    emit_block(e, els);
    emit_yield_into(e, els, res, op->nresults);
  }
  label(e, lend);
}

/* scf.while: `before` runs, scf.condition copies the forwarded values into the
** registers of the results (also the `after` arguments) and leaves when false;
** `after` yields back into the `before` arguments. */
static void emit_while(Emit *e, IrOp *op) {
  IrBlock *before = op->regions[0].first, *after = op->regions[1].first;
  if (!before || !after || before->nargs != op->noperands || after->nargs != op->nresults) {
    fail(e, op, "malformed regions");
    return;
  }
  IrValue *resv[64];
  if (op->nresults > 64) {
    fail(e, op, "too many results");
    return;
  }
  Regs **res = regs_of_values(e, op->nresults, op_results(op, resv));
  Regs **args = arena_alloc(ir_arena(e->ctx), (before->nargs + 1) * sizeof *args);
  for (uint32_t i = 0; i < before->nargs; i++) {
    Regs *s = regs(e, op->operands[i].value);
    args[i] = take_over(e, op->operands[i].value);
    if (!args[i]) {
      args[i] = new_regs(e, s->cls, s->n);
      mov_all(e, args[i], s);
    }
  }
  bind(e, before->nargs, before->args, args);
  bind(e, after->nargs, after->args, res);
  uint32_t head = ++e->label, exit = ++e->label;
  char l[32];
  label(e, head);
  emit_block(e, before);
  IrOp *cond = ir_block_terminator(before);
  if (!cond || cond->kind != OP_SCF_CONDITION) {
    fail(e, op, "`before` must end with scf.condition");
    return;
  }
  uint32_t nf;
  Regs **fw = term_regs(e, cond, 1, &nf);
  parallel_copy(e, nf < op->nresults ? nf : op->nresults, res, fw);
  put_label(e, l, sizeof l, exit);
  emitf(e, "@!%v bra %s;", cond->operands[0].value, l);
  emit_block(e, after);
  emit_yield_into(e, after, args, before->nargs);
  put_label(e, l, sizeof l, head);
  emitf(e, "bra.uni %s;", l);
  label(e, exit);
}

/* }====================================================================== */

/* {======================================================================
** Tensor cores and TMA
** ======================================================================= */

/* Put registers [0, n) of r (or the first register of each of the n values)
** as a braced list. */
static void put_braced(Emit *e, const Regs *r) {
  sb_putc(&e->body, '{');
  for (uint32_t i = 0; i < r->n; i++) {
    if (i) sb_puts(&e->body, ", ");
    put_reg(e, r, i);
  }
  sb_putc(&e->body, '}');
}

static void put_values(Emit *e, IrOp *op, uint32_t from, uint32_t to) {
  for (uint32_t i = from; i < to; i++) {
    if (i > from) sb_puts(&e->body, ", ");
    put_reg(e, regs(e, op->operands[i].value), 0);
  }
}

static void emit_splat(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0], *x = op->operands[0].value;
  Regs *rd = regs(e, d), *rx = regs(e, x);
  int64_t eb = dia_type_bytes(x->type);
  if (eb >= 4) {
    for (uint32_t i = 0; i < rd->n; i++)
      mov_reg(e, rd, i, rx, 0);
    return;
  }
  Regs *w = tmp(e, RC_B32), *t = tmp(e, RC_B32);
  emitf(e, "cvt.u32.u16 %R, %v;", w, x); /* one packed word, then copies of it */
  for (int64_t k = 1; k < 4 / eb; k++) {
    emitf(e, "shl.b32 %R, %R, %d;", t, w, (int)(8 * eb));
    emitf(e, "or.b32 %R, %R, %R;", w, w, t);
    if (eb == 2) break;
  }
  if (eb == 1) emitf(e, "prmt.b32 %R, %R, 0, 0x0000;", w, w);
  for (uint32_t i = 0; i < rd->n; i++)
    mov_reg(e, rd, i, w, 0);
}

/* cvt.rn.{bf16x2,f16x2}.f32 d, hi, lo: the first source lands in the upper half. */
static void emit_pack(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0];
  emitf(e, "cvt.rn.%sx2.f32 %v, %v, %v;", fsfx(d->type->elem), d, op->operands[1].value, op->operands[0].value);
}

static void emit_tma(Emit *e, IrOp *op) {
  int dim = (int)ir_op_attr_int_or(op, "dim", 1);
  uint32_t nc = (uint32_t)dim;
  switch (op->kind) {
  case OP_NVVM_CP_ASYNC_BULK_TENSOR_SHARED_CLUSTER_GLOBAL: {
    bool mc = flag(op, "multicast");
    sb_printf(&e->body, "\tcp.async.bulk.tensor.%dd.shared::cluster.global.tile.mbarrier::complete_tx::bytes%s [", dim,
              mc ? ".multicast::cluster" : "");
    put_reg(e, regs(e, op->operands[0].value), 0);
    sb_puts(&e->body, "], [");
    put_reg(e, regs(e, op->operands[1].value), 0);
    sb_puts(&e->body, ", {");
    put_values(e, op, 3, 3 + nc);
    sb_puts(&e->body, "}], [");
    put_reg(e, regs(e, op->operands[2].value), 0);
    sb_puts(&e->body, "]");
    if (mc) {
      sb_puts(&e->body, ", ");
      put_reg(e, regs(e, op->operands[3 + nc].value), 0);
    }
    sb_puts(&e->body, ";\n");
    return;
  }
  case OP_NVVM_CP_ASYNC_BULK_TENSOR_GLOBAL_SHARED_CTA: {
    const char *red = ir_op_attr_str(op, "reduce");
    if (red)
      sb_printf(&e->body, "\tcp.reduce.async.bulk.tensor.%dd.global.shared::cta.%s.tile.bulk_group [", dim, red);
    else
      sb_printf(&e->body, "\tcp.async.bulk.tensor.%dd.global.shared::cta.tile.bulk_group [", dim);
    put_reg(e, regs(e, op->operands[0].value), 0);
    sb_puts(&e->body, ", {");
    put_values(e, op, 2, 2 + nc);
    sb_puts(&e->body, "}], [");
    put_reg(e, regs(e, op->operands[1].value), 0);
    sb_puts(&e->body, "];\n");
    return;
  }
  case OP_NVVM_CP_ASYNC_BULK_PREFETCH_TENSOR:
    sb_printf(&e->body, "\tcp.async.bulk.prefetch.tensor.%dd.L2.global.tile [", dim);
    put_reg(e, regs(e, op->operands[0].value), 0);
    sb_puts(&e->body, ", {");
    put_values(e, op, 1, 1 + nc);
    sb_puts(&e->body, "}];\n");
    return;
  default: emitf(e, "prefetch.tensormap [%v];", op->operands[0].value); return;
  }
}

/* The accumulator is updated in place: the result takes the accumulator's
** registers when nothing else reads them afterwards (its only use, not
** aliased), so a loop-carried accumulator needs no copies while the wgmma runs
** asynchronously; otherwise it is copied first. */
static void emit_wgmma_mma(Emit *e, IrOp *op) {
  IrValue *acc = op->operands[0].value, *a = op->operands[1].value, *d = &op->results[0];
  Regs *racc = regs(e, acc), *rd = ptrmap_get(&e->regs, d);
  if (!rd && ir_value_num_uses(acc) == 1 && !racc->aliased) {
    rd = racc;
    ptrmap_set(&e->regs, d, rd);
  } else {
    rd = regs(e, d);
    if (rd != racc) mov_all(e, rd, racc);
  }
  const IrAttr *sh = ir_op_attr(op, "shape");
  const char *ta = ir_op_attr_str(op, "type_a"), *tb = ir_op_attr_str(op, "type_b");
  bool trans_ok = !strcmp(ta, "f16") || !strcmp(ta, "bf16"), regs_a = a->type->kind == IR_TY_VECTOR;
  sb_printf(&e->body, "\twgmma.mma_async.sync.aligned.m64n%lldk%lld.%s.%s.%s ", (long long)sh->u.arr.elems[1]->u.i,
            (long long)sh->u.arr.elems[2]->u.i, fsfx(acc->type->elem), ta, tb);
  put_braced(e, rd);
  sb_puts(&e->body, ", ");
  if (regs_a)
    put_braced(e, regs(e, a));
  else
    put_reg(e, regs(e, a), 0);
  sb_puts(&e->body, ", ");
  put_reg(e, regs(e, op->operands[2].value), 0);
  sb_puts(&e->body, ", ");
  put_reg(e, regs(e, op->operands[3].value), 0);
  sb_printf(&e->body, ", %d, %d", (int)ir_op_attr_int_or(op, "scale_a", 1), (int)ir_op_attr_int_or(op, "scale_b", 1));
  if (trans_ok && !regs_a) sb_printf(&e->body, ", %d", flag(op, "trans_a") ? 1 : 0);
  if (trans_ok) sb_printf(&e->body, ", %d", flag(op, "trans_b") ? 1 : 0);
  sb_puts(&e->body, ";\n");
}

static void emit_matrix(Emit *e, IrOp *op) {
  const char *tr = flag(op, "trans") ? ".trans" : "";
  if (op->kind == OP_NVVM_STMATRIX) {
    sb_printf(&e->body, "\tstmatrix.sync.aligned.m8n8.x%u%s.shared.b16 [", op->noperands - 1, tr);
    put_reg(e, regs(e, op->operands[0].value), 0);
    sb_puts(&e->body, "], {");
    put_values(e, op, 1, op->noperands);
    sb_puts(&e->body, "};\n");
    return;
  }
  Regs *rd = regs(e, &op->results[0]);
  sb_printf(&e->body, "\tldmatrix.sync.aligned.m8n8.x%u%s.shared.b16 ", rd->n, tr);
  put_braced(e, rd);
  sb_puts(&e->body, ", [");
  put_reg(e, regs(e, op->operands[0].value), 0);
  sb_puts(&e->body, "];\n");
}

/* }====================================================================== */

/* {======================================================================
** The op switch
** ======================================================================= */

static void emit_unsupported(Emit *e, IrOp *op) {
  size_t dl = ir_op_dialect_len(op->kind);
  const char *n = ir_op_name(op);
  if (dl && strncmp(n, "tile", dl) == 0)
    fail(e, op, "lower the tile ops first (convert-tile-to-nvvm, the `ptx` pipeline)");
  else if (dl && strncmp(n, "cutlass", dl) == 0)
    fail(e, op, "lower the cutlass ops first (convert-pipeline-to-nvvm)");
  else
    fail(e, op, "the emitter has no rule for this op");
}

static void emit_op(Emit *e, IrOp *op) {
  if (op->kind >= OP_NVVM_SREG_TID_X && op->kind <= OP_NVVM_SREG_CLOCK64) { /* one table block */
    emit_sreg(e, op);
    return;
  }
  switch (op->kind) {
  case OP_ARITH_CONSTANT: emit_constant(e, op); break;
  case OP_ARITH_ADDI: emit_int(e, op, "add", 's', I_NORM); break;
  case OP_ARITH_SUBI: emit_int(e, op, "sub", 's', I_NORM); break;
  case OP_ARITH_MULI: emit_int(e, op, "mul.lo", 's', I_NORM); break;
  case OP_ARITH_DIVSI: emit_int(e, op, "div", 's', I_NORM); break;
  case OP_ARITH_DIVUI: emit_int(e, op, "div", 'u', I_ZEXT); break;
  case OP_ARITH_REMSI: emit_int(e, op, "rem", 's', 0); break;
  case OP_ARITH_REMUI: emit_int(e, op, "rem", 'u', I_ZEXT); break;
  case OP_ARITH_ANDI: emit_int(e, op, "and", 'b', 0); break;
  case OP_ARITH_ORI: emit_int(e, op, "or", 'b', 0); break;
  case OP_ARITH_XORI: emit_int(e, op, "xor", 'b', 0); break;
  case OP_ARITH_MINSI: emit_int(e, op, "min", 's', 0); break;
  case OP_ARITH_MAXSI: emit_int(e, op, "max", 's', 0); break;
  case OP_ARITH_MINUI: emit_int(e, op, "min", 'u', I_ZEXT); break;
  case OP_ARITH_MAXUI: emit_int(e, op, "max", 'u', I_ZEXT); break;
  case OP_ARITH_SHLI:
  case OP_ARITH_SHRSI:
  case OP_ARITH_SHRUI: emit_shift(e, op); break;
  case OP_ARITH_ADDF: emit_float(e, op, "add"); break;
  case OP_ARITH_SUBF: emit_float(e, op, "sub"); break;
  case OP_ARITH_MULF: emit_float(e, op, "mul"); break;
  case OP_ARITH_DIVF: emit_divf(e, op); break;
  case OP_ARITH_MINF:
  case OP_ARITH_MAXF: emit_minmaxf(e, op); break;
  case OP_ARITH_NEGF: emit_unary_float(e, op, "neg"); break;
  case OP_ARITH_FMA: emit_fma(e, op); break;
  case OP_ARITH_CMPI: emit_cmpi(e, op); break;
  case OP_ARITH_CMPF: emit_cmpf(e, op); break;
  case OP_ARITH_SELECT: emit_select(e, op); break;
  case OP_ARITH_EXTSI:
  case OP_ARITH_TRUNCI:
  case OP_ARITH_INDEX_CAST: emit_int_conv(e, op, true); break;
  case OP_ARITH_EXTUI:
  case OP_ARITH_INDEX_CASTUI: emit_int_conv(e, op, false); break;
  case OP_ARITH_SITOFP: emit_itof(e, op, true); break;
  case OP_ARITH_UITOFP: emit_itof(e, op, false); break;
  case OP_ARITH_FPTOSI: emit_ftoi(e, op, true); break;
  case OP_ARITH_FPTOUI: emit_ftoi(e, op, false); break;
  case OP_ARITH_EXTF:
  case OP_ARITH_TRUNCF: emit_fconv(e, op); break;
  case OP_ARITH_BITCAST: emit_bitcast(e, op); break;
  case OP_SCF_FOR: emit_for(e, op); break;
  case OP_SCF_IF: emit_if(e, op); break;
  case OP_SCF_WHILE: emit_while(e, op); break;
  case OP_UNREALIZED_CAST: emit_cast(e, op); break;
  case OP_TILE_EXTRACT: emit_extract(e, op); break;
  case OP_TILE_FROM_ELEMENTS: emit_from_elements(e, op); break;
  case OP_NVVM_LD_GLOBAL:
  case OP_NVVM_LD_SHARED:
  case OP_NVVM_LD_SHARED_CLUSTER:
  case OP_NVVM_LD_GENERIC: emit_load(e, op); break;
  case OP_NVVM_ST_GLOBAL:
  case OP_NVVM_ST_SHARED:
  case OP_NVVM_ST_SHARED_CLUSTER:
  case OP_NVVM_ST_GENERIC: emit_store(e, op); break;
  case OP_NVVM_ATOM_GLOBAL:
  case OP_NVVM_ATOM_SHARED:
  case OP_NVVM_ATOM_SHARED_CLUSTER:
  case OP_NVVM_ATOM_CAS_GLOBAL:
  case OP_NVVM_ATOM_CAS_SHARED:
  case OP_NVVM_ATOM_CAS_SHARED_CLUSTER:
  case OP_NVVM_RED_GLOBAL:
  case OP_NVVM_RED_SHARED:
  case OP_NVVM_RED_SHARED_CLUSTER: emit_atom(e, op); break;
  case OP_NVVM_MBARRIER_INIT_SHARED:
  case OP_NVVM_MBARRIER_ARRIVE_SHARED:
  case OP_NVVM_MBARRIER_ARRIVE_SHARED_CLUSTER:
  case OP_NVVM_MBARRIER_ARRIVE_EXPECT_TX_SHARED:
  case OP_NVVM_MBARRIER_ARRIVE_EXPECT_TX_SHARED_CLUSTER:
  case OP_NVVM_MBARRIER_EXPECT_TX_SHARED:
  case OP_NVVM_MBARRIER_TRY_WAIT_PARITY_SHARED:
  case OP_NVVM_MBARRIER_TEST_WAIT_PARITY_SHARED:
  case OP_NVVM_MBARRIER_INVAL_SHARED: emit_mbarrier(e, op); break;
  case OP_NVVM_FENCE_MBARRIER_INIT:
  case OP_NVVM_FENCE_PROXY_ASYNC:
  case OP_NVVM_FENCE: emit_fence(e, op); break;
  case OP_NVVM_CP_ASYNC_BULK_SHARED_CLUSTER_GLOBAL:
  case OP_NVVM_CP_ASYNC_BULK_GLOBAL_SHARED_CTA:
  case OP_NVVM_CP_ASYNC_BULK_COMMIT_GROUP:
  case OP_NVVM_CP_ASYNC_BULK_WAIT_GROUP: emit_bulk(e, op); break;
  case OP_NVVM_BARRIER0:
  case OP_NVVM_BARRIER:
  case OP_NVVM_BARRIER_ARRIVE:
  case OP_NVVM_CLUSTER_ARRIVE:
  case OP_NVVM_CLUSTER_ARRIVE_RELAXED:
  case OP_NVVM_CLUSTER_WAIT: emit_barrier(e, op); break;
  case OP_NVVM_ELECT_SYNC: emit_elect(e, op); break;
  case OP_NVVM_MAPA_SHARED_CLUSTER:
    emitf(e, "mapa.shared::cluster.u32 %v, %v, %v;", &op->results[0], op->operands[0].value,
          op->operands[1].value);
    break;
  case OP_NVVM_GETCTARANK_SHARED_CLUSTER:
    emitf(e, "getctarank.shared::cluster.u32 %v, %v;", &op->results[0], op->operands[0].value);
    break;
  case OP_NVVM_NANOSLEEP: emitf(e, "nanosleep.u32 %v;", op->operands[0].value); break;
  case OP_NVVM_SETMAXREGISTER: emit_setmaxreg(e, op); break;
  case OP_NVVM_WGMMA_FENCE_ALIGNED:
  case OP_NVVM_WGMMA_COMMIT_GROUP_SYNC_ALIGNED:
  case OP_NVVM_WGMMA_WAIT_GROUP_SYNC_ALIGNED: emit_wgmma(e, op); break;
  case OP_NVVM_SHARED_BASE: emit_shared_base(e, op); break;
  case OP_NVVM_CVTA_SHARED:
  case OP_NVVM_CVTA_TO_SHARED:
  case OP_NVVM_CVTA_GLOBAL:
  case OP_NVVM_CVTA_TO_GLOBAL: emit_cvta(e, op); break;
  case OP_NVVM_INLINE_PTX: emit_inline_ptx(e, op); break;
  case OP_TILE_SPLAT: emit_splat(e, op); break;
  case OP_TILE_PACK: emit_pack(e, op); break;
  case OP_NVVM_CP_ASYNC_BULK_TENSOR_SHARED_CLUSTER_GLOBAL:
  case OP_NVVM_CP_ASYNC_BULK_TENSOR_GLOBAL_SHARED_CTA:
  case OP_NVVM_CP_ASYNC_BULK_PREFETCH_TENSOR:
  case OP_NVVM_PREFETCH_TENSORMAP: emit_tma(e, op); break;
  case OP_NVVM_WGMMA_MMA_ASYNC: emit_wgmma_mma(e, op); break;
  case OP_NVVM_STMATRIX:
  case OP_NVVM_LDMATRIX: emit_matrix(e, op); break;
  default: emit_unsupported(e, op); break;
  }
}

/* Every op but the block's terminator (its parent emits that). */
static void emit_block(Emit *e, IrBlock *b) {
  for (IrOp *op = b->first; op; op = op->next)
    if (!(ir_op_info(op->kind)->traits & T_TERMINATOR)) emit_op(e, op);
}

/* }====================================================================== */

/* {======================================================================
** Kernels and the module
** ======================================================================= */

/* The .param type and ld.param type of a parameter. */
static bool param_types(const IrType *t, const char **decl, const char **ld) {
  *decl = *ld = NULL;
  if (ir_type_is_dialect(t, IR_DTY_TILE_TENSOR_MAP)) return *decl = *ld = "b8", true;
  if (t->kind == IR_TY_PTR || t->kind == IR_TY_INDEX || ir_type_is_int_width(t, 64))
    *decl = "u64", *ld = "u64";
  else if (ir_type_is_int_width(t, 32))
    *decl = "u32", *ld = "u32";
  else if (ir_type_is_int_width(t, 16) || (t->kind == IR_TY_FLOAT && t->width == 16))
    *decl = "b16", *ld = "b16";
  else if (ir_type_is_int_width(t, 8))
    *decl = "u8", *ld = "s8";
  else if (ir_type_is_int_width(t, 1))
    *decl = "u8", *ld = "u8";
  else if (t->kind == IR_TY_FLOAT)
    *decl = *ld = t->fkind == IR_F32 ? "f32" : "f64";
  return *decl != NULL;
}

static bool valid_ident(const char *s) {
  if (!s || !*s ||
      !((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || *s == '_' || *s == '$'))
    return false;
  for (s++; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '_' || *s == '$'))
      return false;
  return true;
}

/* Load the parameters at the entry: a global pointer also goes through cvta.to.global. */
static void emit_params(Emit *e, IrOp *k, const char *name, IrBlock *body, StrBuf *head) {
  for (uint32_t i = 0; i < body->nargs; i++) {
    IrValue *arg = body->args[i];
    const char *decl, *ld;
    if (!param_types(arg->type, &decl, &ld)) {
      char *s = ir_type_to_string(arg->type);
      ir_op_error(k, "cannot be emitted as PTX: parameter #%u has type %s", i, s);
      free(s);
      e->failed = true;
      continue;
    }
    char pname[300];
    snprintf(pname, sizeof pname, "[%s_param_%u]", name, i);
    if (ir_type_is_dialect(arg->type, IR_DTY_TILE_TENSOR_MAP)) { /* by value: its generic address */
      sb_printf(head, "%s\t.param .align 64 .b8 %s_param_%u[128]", i ? ",\n" : "", name, i);
      emitf(e, "mov.b64 %v, %s_param_%u;", arg, name, i);
      emitf(e, "cvta.param.u64 %v, %v;", arg, arg);
      continue;
    }
    sb_printf(head, "%s\t.param .%s %s_param_%u", i ? ",\n" : "", decl, name, i);
    if (is_i1(arg->type)) {
      Regs *t = tmp(e, RC_B16);
      emitf(e, "ld.param.u8 %R, %s;", t, pname);
      emitf(e, "setp.ne.b16 %v, %R, 0;", arg, t);
    } else if (arg->type->kind == IR_TY_PTR && arg->type->space == IR_MS_GLOBAL) {
      Regs *t = tmp(e, RC_B64);
      emitf(e, "ld.param.u64 %R, %s;", t, pname);
      emitf(e, "cvta.to.global.u64 %v, %R;", arg, t);
    } else {
      emitf(e, "ld.param.%s %v, %s;", ld, arg, pname);
    }
  }
}

static void spec_dims(IrOp *k, const char *entry, int64_t d[3]) {
  const IrAttr *a = ir_attr_dict_get(ir_op_attr(k, "kernel_spec"), entry);
  d[0] = d[1] = d[2] = 1;
  if (a && a->kind == IR_ATTR_INT) d[0] = a->u.i;
  for (uint32_t i = 0; a && a->kind == IR_ATTR_ARRAY && i < a->u.arr.n && i < 3; i++)
    if (a->u.arr.elems[i]->kind == IR_ATTR_INT) d[i] = a->u.arr.elems[i]->u.i;
}

static void emit_kernel(Emit *e, IrOp *k, StrBuf *out) {
  const char *name = ir_op_attr_str(k, "sym_name");
  if (!valid_ident(name)) {
    fail(e, k, "the kernel name is not a PTX identifier");
    return;
  }
  IrBlock *body = ir_region_ensure_block(e->ctx, &k->regions[0]);
  StrBuf head;
  sb_init(&head);
  sb_init(&e->body);
  memset(e->next, 0, sizeof e->next);
  ptrmap_free(&e->regs);
  memset(&e->regs, 0, sizeof e->regs);
  emit_params(e, k, name, body, &head);
  emit_block(e, body);
  int64_t block[3], cluster[3];
  spec_dims(k, "block", block);
  spec_dims(k, "cluster", cluster);
  int64_t al = ir_op_attr_int_or(k, "shared_align", 16);
  if (al > e->smem_align) e->smem_align = al;
  sb_printf(out, "\n// %s\n.visible .entry %s(\n%s%s)\n", name, name, head.data ? head.data : "",
            head.len ? "\n" : "");
  sb_printf(out, ".reqntid %lld, %lld, %lld\n", (long long)block[0], (long long)block[1],
            (long long)block[2]);
  if (cluster[0] * cluster[1] * cluster[2] > 1)
    sb_printf(out, ".explicitcluster\n.reqnctapercluster %lld, %lld, %lld\n", (long long)cluster[0],
              (long long)cluster[1], (long long)cluster[2]);
  sb_puts(out, "{\n");
  for (int c = 0; c < RC__COUNT; c++)
    if (e->next[c]) sb_printf(out, "\t.reg %s %s<%u>;\n", rc_decl[c], rc_prefix[c], e->next[c] + 1);
  if (e->body.data) sb_puts(out, e->body.data);
  sb_puts(out, "\tret;\n}\n");
  sb_free(&head);
  sb_free(&e->body);
  e->kernel++;
}

IrResult ptx_emit_module(IrOp *module, char **out) {
  Emit e;
  memset(&e, 0, sizeof e);
  e.ctx = ir_op_context(module);
  e.smem_align = 16;
  *out = NULL;
  StrBuf kernels;
  sb_init(&kernels);
  IrBlock *mb = module->nregions ? module->regions[0].first : NULL;
  if (module->kind != OP_MODULE) {
    ir_op_error(module, "cannot be emitted as PTX: expected a module");
    return IR_FAIL;
  }
  for (IrOp *op = mb ? mb->first : NULL; op; op = op->next) {
    if (op->kind == OP_TILE_KERNEL)
      emit_kernel(&e, op, &kernels);
    else
      emit_unsupported(&e, op);
  }
  for (IrOp *op = mb ? mb->first : NULL; op && e.smem; op = op->next) {
    const char *n = op->kind == OP_TILE_KERNEL ? ir_op_attr_str(op, "sym_name") : NULL;
    if (n && strcmp(n, "smem") == 0) fail(&e, op, "the name 'smem' is the kernels' shared buffer");
  }
  ptrmap_free(&e.regs);
  if (e.failed) {
    sb_free(&kernels);
    return IR_FAIL;
  }
  StrBuf text;
  sb_init(&text);
  sb_printf(&text, "//\n// Generated by tilua\n//\n\n.version %s\n.target %s\n.address_size 64\n",
            PTX_VERSION, PTX_TARGET);
  if (e.smem)
    sb_printf(&text, "\n.extern .shared .align %lld .b8 smem[];\n", (long long)e.smem_align);
  if (kernels.data) sb_puts(&text, kernels.data);
  sb_free(&kernels);
  *out = sb_take(&text);
  return IR_OK;
}

/* }====================================================================== */
