/*
** attrs.c -- uniqued attributes. Dictionaries keep their entries sorted by
** name, so printing them is deterministic and equal dictionaries are one object.
*/
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir_impl.h"

/* Hash-cons an attribute by its kind, type and payload bytes. */
static const IrAttr *unique_attr(IrContext *ctx, const IrAttr *proto, const void *payload,
                                 size_t plen) {
  size_t n = sizeof(uint32_t) + sizeof(void *) + plen;
  unsigned char stackbuf[256];
  unsigned char *key = n <= sizeof stackbuf ? stackbuf : ir_malloc(n);
  uint32_t kind = proto->kind;
  memcpy(key, &kind, sizeof kind);
  memcpy(key + sizeof kind, &proto->type, sizeof(void *));
  if (plen) memcpy(key + sizeof kind + sizeof(void *), payload, plen);
  uint64_t h = hash_bytes(key, n);
  const IrAttr *found = hash_find(&ctx->attrs, key, n, h);
  if (!found) {
    IrAttr *a = arena_alloc(&ctx->arena, sizeof *a);
    *a = *proto;
    void *kcopy = arena_alloc(&ctx->arena, n);
    memcpy(kcopy, key, n);
    hash_insert(&ctx->attrs, kcopy, n, h, a);
    found = a;
  }
  if (key != stackbuf) ir_free(key);
  return found;
}

static int64_t normalize_int(int64_t v, const IrType *t) {
  uint32_t w = t->kind == IR_TY_INT ? t->width : 64;
  if (w == 1) return v & 1;
  if (w >= 64) return v;
  uint64_t m = ((uint64_t)1 << w) - 1, u = (uint64_t)v & m;
  if (u >> (w - 1)) u |= ~m; /* sign-extend */
  return (int64_t)u;
}

const IrAttr *ir_attr_int(IrContext *ctx, int64_t v, const IrType *type) {
  assert(ir_type_is_intlike(type));
  IrAttr proto = {.kind = IR_ATTR_INT, .type = type};
  proto.u.i = normalize_int(v, type);
  const IrAttr *a = unique_attr(ctx, &proto, &proto.u.i, sizeof proto.u.i);
  return a;
}

const IrAttr *ir_attr_i64(IrContext *ctx, int64_t v) { return ir_attr_int(ctx, v, ir_type_int(ctx, 64)); }
const IrAttr *ir_attr_i32(IrContext *ctx, int64_t v) { return ir_attr_int(ctx, v, ir_type_int(ctx, 32)); }

/* {======================================================================
** Float rounding to f16 / bf16 / f32 (round to nearest even)
** ======================================================================= */

static float bits_to_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint32_t float_to_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static double round_bf16(double v) {
  float f = (float)v;
  uint32_t u = float_to_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return f; /* inf, nan */
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  return bits_to_float(u);
}

/* Round to the nearest binary16 value, returned as a double. */
static double round_f16(double v) {
  if (isnan(v) || isinf(v)) return v;
  double a = fabs(v);
  if (a >= 65520.0) return v < 0 ? -INFINITY : INFINITY; /* past max + half ulp */
  int e;
  frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  int exp = e - 1; /* a = 1.x * 2^exp */
  if (exp < -14) exp = -14; /* subnormal spacing 2^-24 */
  double ulp = ldexp(1.0, exp - 10);
  double q = nearbyint(a / ulp) * ulp; /* current rounding mode is nearest-even */
  return v < 0 ? -q : q;
}

/* Mantissa bits of each float kind. */
static int mantissa_bits(IrFloatKind k) {
  return k == IR_F16 ? 10 : k == IR_BF16 ? 7 : k == IR_F32 ? 23 : 52;
}

/* A NaN of kind k held in a double: the sign and the top mantissa bits carry
** the kind's payload bit for bit (signalling NaNs included), the rest is 0.
** Built from bits, since a float <-> double conversion quiets a signalling NaN. */
static double nan_of(int sign, uint64_t mant, IrFloatKind k) {
  int w = mantissa_bits(k);
  mant &= ((uint64_t)1 << w) - 1;
  if (!mant) mant = (uint64_t)1 << (w - 1); /* the quiet bit: still a NaN */
  uint64_t u = (uint64_t)(sign != 0) << 63 | (uint64_t)0x7FF << 52 | mant << (52 - w);
  double d;
  memcpy(&d, &u, 8);
  return d;
}

/* The payload of a NaN in kind k (its top mantissa bits). */
static uint64_t nan_payload(double v, IrFloatKind k) {
  uint64_t u;
  memcpy(&u, &v, 8);
  return (u & (((uint64_t)1 << 52) - 1)) >> (52 - mantissa_bits(k));
}

uint64_t ir_float_nan_bits(double v, IrFloatKind k) {
  uint64_t u;
  memcpy(&u, &v, 8);
  uint64_t sign = u >> 63, mant = nan_payload(v, k);
  switch (k) {
  case IR_F16: return sign << 15 | 0x7C00u | mant;
  case IR_BF16: return sign << 15 | 0x7F80u | mant;
  case IR_F32: return sign << 31 | 0x7F800000u | mant;
  default: return u;
  }
}

double ir_float_round(double v, IrFloatKind k) {
  if (isnan(v)) {
    uint64_t u;
    memcpy(&u, &v, 8);
    return nan_of((int)(u >> 63), nan_payload(v, k), k);
  }
  switch (k) {
  case IR_F16: return round_f16(v);
  case IR_BF16: return round_bf16(v);
  case IR_F32: return (double)(float)v;
  default: return v;
  }
}

/* }====================================================================== */

bool ir_int_fits(int64_t v, uint32_t width) {
  if (width >= 64) return true;
  if (width == 0) return v == 0;
  int64_t lo = -((int64_t)1 << (width - 1)), hi = ((int64_t)1 << width) - 1;
  return v >= lo && v <= hi;
}

const IrAttr *ir_attr_float(IrContext *ctx, double v, const IrType *type) {
  assert(ir_type_is_float(type));
  IrAttr proto = {.kind = IR_ATTR_FLOAT, .type = type};
  proto.u.f = ir_float_round(v, type->fkind);
  return unique_attr(ctx, &proto, &proto.u.f, sizeof proto.u.f);
}

const IrAttr *ir_attr_bool(IrContext *ctx, bool v) {
  IrAttr proto = {.kind = IR_ATTR_BOOL};
  proto.u.b = v;
  unsigned char b = v;
  return unique_attr(ctx, &proto, &b, 1);
}

static const IrAttr *string_like(IrContext *ctx, IrAttrKind kind, const char *s, size_t len) {
  IrAttr proto = {.kind = kind};
  proto.u.str.s = ir_intern(ctx, s, len);
  proto.u.str.len = len;
  return unique_attr(ctx, &proto, &proto.u.str.s, sizeof(void *));
}

const IrAttr *ir_attr_str(IrContext *ctx, const char *s, size_t len) {
  return string_like(ctx, IR_ATTR_STR, s, len);
}
const IrAttr *ir_attr_cstr(IrContext *ctx, const char *s) { return ir_attr_str(ctx, s, strlen(s)); }
const IrAttr *ir_attr_sym(IrContext *ctx, const char *s, size_t len) {
  return string_like(ctx, IR_ATTR_SYM, s, len);
}

const IrAttr *ir_attr_type(IrContext *ctx, const IrType *t) {
  IrAttr proto = {.kind = IR_ATTR_TYPE};
  proto.u.ty = t;
  return unique_attr(ctx, &proto, &t, sizeof t);
}

const IrAttr *ir_attr_array(IrContext *ctx, uint32_t n, const IrAttr *const *elems) {
  IrAttr proto = {.kind = IR_ATTR_ARRAY};
  size_t plen = n * sizeof(void *);
  const IrAttr *probe = unique_attr(ctx, &proto, elems, plen);
  if (probe->u.arr.elems || n == 0) {
    if (n == 0 || probe->u.arr.n == n) return probe;
  }
  /* First creation: attach a copy of the elements. */
  IrAttr *a = (IrAttr *)probe;
  const IrAttr **copy = arena_alloc(&ctx->arena, plen ? plen : 1);
  if (plen) memcpy(copy, elems, plen);
  a->u.arr.n = n;
  a->u.arr.elems = copy;
  return a;
}

const IrAttr *ir_attr_int_array(IrContext *ctx, uint32_t n, const int64_t *v) {
  const IrAttr *stackbuf[16] = {0};
  const IrAttr **elems = n <= 16 ? stackbuf : ir_malloc(n * sizeof *elems);
  for (uint32_t i = 0; i < n; i++) elems[i] = ir_attr_i64(ctx, v[i]);
  const IrAttr *a = ir_attr_array(ctx, n, elems);
  if (elems != stackbuf) ir_free(elems);
  return a;
}

static int cmp_named(const void *a, const void *b) {
  return strcmp(((const IrNamedAttr *)a)->name, ((const IrNamedAttr *)b)->name);
}

const IrAttr *ir_attr_dict(IrContext *ctx, uint32_t n, const IrNamedAttr *entries) {
  IrNamedAttr *sorted = ir_malloc((n ? n : 1) * sizeof *sorted);
  uint32_t m = 0;
  /* Later entries win over earlier ones with the same name. */
  for (uint32_t i = 0; i < n; i++) {
    const char *name = ir_intern_cstr(ctx, entries[i].name);
    bool replaced = false;
    for (uint32_t j = 0; j < m; j++)
      if (sorted[j].name == name) {
        sorted[j].attr = entries[i].attr;
        replaced = true;
      }
    if (!replaced) sorted[m++] = (IrNamedAttr){name, entries[i].attr};
  }
  qsort(sorted, m, sizeof *sorted, cmp_named);
  IrAttr proto = {.kind = IR_ATTR_DICT};
  const IrAttr *probe = unique_attr(ctx, &proto, sorted, m * sizeof *sorted);
  IrAttr *a = (IrAttr *)probe;
  if (m && !a->u.dict.entries) {
    IrNamedAttr *copy = arena_alloc(&ctx->arena, m * sizeof *copy);
    memcpy(copy, sorted, m * sizeof *copy);
    a->u.dict.n = m;
    a->u.dict.entries = copy;
  }
  ir_free(sorted);
  return a;
}

const IrAttr *ir_attr_dict_get(const IrAttr *dict, const char *name) {
  if (!dict || dict->kind != IR_ATTR_DICT) return NULL;
  for (uint32_t i = 0; i < dict->u.dict.n; i++)
    if (strcmp(dict->u.dict.entries[i].name, name) == 0) return dict->u.dict.entries[i].attr;
  return NULL;
}

/* The value of a float given by its bits in the type's own format (f16, bf16, f32, f64). */
double ir_float_from_bits(uint64_t bits, IrFloatKind k) {
  if (k == IR_F64) {
    double d;
    memcpy(&d, &bits, 8);
    return d;
  }
  if (k == IR_F32 || k == IR_BF16) {
    uint32_t u = k == IR_F32 ? (uint32_t)bits : (uint32_t)(bits & 0xFFFF) << 16;
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x7FFFFFu))
      return nan_of((int)(u >> 31), (u & 0x7FFFFFu) >> (k == IR_BF16 ? 16 : 0), k);
    return bits_to_float(u);
  }
  uint32_t h = (uint32_t)bits & 0xFFFF, sign = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31 && m) return nan_of((int)sign, m, k);
  if (e == 31) v = INFINITY;
  else if (e == 0) v = ldexp((double)m, -24);
  else v = ldexp((double)(m | 1024), (int)e - 25);
  return sign ? -v : v;
}
