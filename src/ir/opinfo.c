/*
** opinfo.c -- the op registry expanded from the dialect tables, and the
** signature language that the structural verifier checks:
**
**   "opd opd ... -> res ..."    one constraint per operand / result
**   T...   zero or more of T (last only)      T?   optional (at the end)
**   A|B    either constraint
**
** Constraints: any int i1 i8 i16 i32 i64 index intlike float f16 bf16 f32 f64
** num (intlike or float) ptr ptr.<space> memref memref.<space> tile tile.<space>
** vector shaped (memref, tile or vector) !dialect.type (any parameters).
*/
#include <stdatomic.h>
#include <string.h>

#include "../dialects/dialects.h"
#include "ir_impl.h"

static const IrOpInfo op_table[] = {
#define OP(id, name, sig, nreg, traits, effects, verify, fold, doc)                                \
  {name, sig, nreg, traits, effects, verify, fold, doc},
#define DTYPE(...)
#include "../dialects/all.def"
#undef OP
#undef DTYPE
};

IrResult noverify(IrOp *op) {
  (void)op;
  return IR_OK;
}

IrValue *nofold(IrBuilder *b, IrOp *op) {
  (void)b;
  (void)op;
  return NULL;
}

const IrOpInfo *ir_op_info(IrOpKind k) { return &op_table[k]; }

/* LOWER rows: 1 + the nvvm op, 0 for none. */
static const int lowers_to[OP__COUNT] = {
#define OP(...)
#define DTYPE(...)
#define LOWER(op, to) [OP_##op] = OP_##to + 1,
#include "../dialects/all.def"
#undef OP
#undef DTYPE
#undef LOWER
};

int ir_op_lowers_to(IrOpKind k) { return lowers_to[k] - 1; }

/* PTX and PTX_HAND rows. */
static const struct {
  const char *text;
  bool by_hand;
} ptx_rows[OP__COUNT] = {
#define OP(...)
#define DTYPE(...)
#define PTX(op, text) [OP_##op] = {text, false},
#define PTX_HAND(op, fn, text) [OP_##op] = {text, true},
#include "../dialects/all.def"
#undef OP
#undef DTYPE
#undef PTX
#undef PTX_HAND
};

const char *ir_op_ptx(IrOpKind k, bool *by_hand) {
  if (by_hand) *by_hand = ptx_rows[k].by_hand;
  return ptx_rows[k].text;
}

int ir_op_lookup(const char *name, size_t len) {
  for (int i = 0; i < OP__COUNT; i++) {
    const char *n = op_table[i].name;
    if (n[0] == name[0] && strlen(n) == len && memcmp(n, name, len) == 0) return i;
  }
  return -1;
}

/* The op name nearest an unknown one (ir_closest_name over every op), or
** NULL: the "did you mean" of "unknown operation". */
const char *ir_op_closest(const char *name, size_t len) {
  const char *names[OP__COUNT];
  for (int i = 0; i < OP__COUNT; i++) names[i] = op_table[i].name;
  return ir_closest_name(name, len, names, OP__COUNT);
}

size_t ir_op_dialect_len(IrOpKind k) {
  const char *n = op_table[k].name, *dot = strchr(n, '.');
  return dot ? (size_t)(dot - n) : 0;
}

bool ir_op_in_dialect(IrOpKind k, const char *dialect) {
  size_t n = ir_op_dialect_len(k);
  return n == strlen(dialect) && strncmp(op_table[k].name, dialect, n) == 0;
}

/* {======================================================================
** Signatures
** ======================================================================= */

typedef struct SigTok {
  const char *s;
  size_t n;
  bool many, opt;
} SigTok;

/* Next token of a signature list; returns false at the end or at "->". */
static bool sig_next(const char **p, SigTok *t) {
  const char *s = *p;
  while (*s == ' ') s++;
  if (!*s || (s[0] == '-' && s[1] == '>')) {
    *p = s;
    return false;
  }
  t->s = s;
  while (*s && *s != ' ') s++;
  t->n = (size_t)(s - t->s);
  t->many = t->n > 3 && memcmp(s - 3, "...", 3) == 0;
  t->opt = !t->many && t->n > 1 && s[-1] == '?';
  if (t->many) t->n -= 3;
  else if (t->opt) t->n -= 1;
  *p = s;
  return true;
}

static const char *sig_results(const char *sig) {
  const char *arrow = strstr(sig, "->");
  return arrow ? arrow + 2 : sig + strlen(sig);
}

static void count(const char *p, int *min, int *max) {
  SigTok t;
  *min = *max = 0;
  while (sig_next(&p, &t)) {
    if (t.many) *max = -1;
    else {
      if (!t.opt) (*min)++;
      if (*max >= 0) (*max)++;
    }
  }
}

IrArity ir_op_arity(IrOpKind k) {
  IrArity a;
  const char *sig = op_table[k].sig;
  count(sig, &a.min_operands, &a.max_operands);
  count(sig_results(sig), &a.min_results, &a.max_results);
  return a;
}

static bool eq(const char *s, size_t n, const char *lit) {
  return strlen(lit) == n && memcmp(s, lit, n) == 0;
}

/* One alternative: no '|' inside. */
static bool matches_one(const IrType *t, const char *c, size_t n) {
  if (eq(c, n, "any")) return true;
  if (c[0] == '!') return t->kind == IR_TY_DIALECT && eq(c + 1, n - 1, ir_dialect_type_name(t->dialect_type));
  if (eq(c, n, "int")) return t->kind == IR_TY_INT;
  if (eq(c, n, "index")) return t->kind == IR_TY_INDEX;
  if (eq(c, n, "intlike")) return ir_type_is_intlike(t);
  if (eq(c, n, "float")) return t->kind == IR_TY_FLOAT;
  if (eq(c, n, "floatx2")) /* a packed pair: f16x2, bf16x2 */
    return t->kind == IR_TY_VECTOR && t->rank == 1 && t->shape[0] == 2 && t->elem->kind == IR_TY_FLOAT &&
           (t->elem->fkind == IR_F16 || t->elem->fkind == IR_BF16);
  if (eq(c, n, "num")) return ir_type_is_intlike(t) || t->kind == IR_TY_FLOAT;
  if (eq(c, n, "vector")) return t->kind == IR_TY_VECTOR;
  if (eq(c, n, "shaped"))
    return t->kind == IR_TY_VECTOR || t->kind == IR_TY_MEMREF || t->kind == IR_TY_TILE;
  if (eq(c, n, "none")) return t->kind == IR_TY_NONE;
  if (c[0] == 'i' && n >= 2 && n <= 3) {
    uint32_t w = 0;
    for (size_t i = 1; i < n; i++) {
      if (c[i] < '0' || c[i] > '9') return false;
      w = w * 10 + (uint32_t)(c[i] - '0');
    }
    return ir_type_is_int_width(t, w);
  }
  if (eq(c, n, "f16")) return t->kind == IR_TY_FLOAT && t->fkind == IR_F16;
  if (eq(c, n, "bf16")) return t->kind == IR_TY_FLOAT && t->fkind == IR_BF16;
  if (eq(c, n, "f32")) return t->kind == IR_TY_FLOAT && t->fkind == IR_F32;
  if (eq(c, n, "f64")) return t->kind == IR_TY_FLOAT && t->fkind == IR_F64;
  /* ptr, memref, tile with an optional .space */
  static const struct { const char *name; IrTypeKind kind; } spaced[] = {
      {"ptr", IR_TY_PTR}, {"memref", IR_TY_MEMREF}, {"tile", IR_TY_TILE}};
  for (size_t i = 0; i < sizeof spaced / sizeof spaced[0]; i++) {
    size_t ln = strlen(spaced[i].name);
    if (n < ln || memcmp(c, spaced[i].name, ln) != 0) continue;
    if (n == ln) return t->kind == spaced[i].kind;
    if (c[ln] != '.') continue;
    int sp = ir_memspace_lookup(c + ln + 1, n - ln - 1);
    return t->kind == spaced[i].kind && sp >= 0 && t->space == (IrMemSpace)sp;
  }
  return false;
}

bool ir_type_matches(const IrType *t, const char *c, size_t n) {
  if (!t) return false;
  const char *end = c + n;
  while (c < end) {
    const char *bar = memchr(c, '|', (size_t)(end - c));
    size_t len = bar ? (size_t)(bar - c) : (size_t)(end - c);
    if (matches_one(t, c, len)) return true;
    if (!bar) break;
    c = bar + 1;
  }
  return false;
}

/* Check a list of types against a signature list; reports the first mismatch. */
bool ir_sig_check(const char *p, uint32_t n, const IrType *const *types, SigMismatch *mm) {
  SigTok t;
  uint32_t i = 0;
  while (sig_next(&p, &t)) {
    if (t.many) {
      for (; i < n; i++)
        if (!ir_type_matches(types[i], t.s, t.n)) goto bad;
      return true;
    }
    if (i >= n) {
      if (t.opt) continue;
      mm->count_error = 1;
      return false;
    }
    if (!ir_type_matches(types[i], t.s, t.n)) goto bad;
    i++;
  }
  if (i < n) {
    mm->count_error = 2;
    return false;
  }
  return true;
bad:
  mm->index = i;
  mm->want = t.s;
  mm->wantn = t.n;
  mm->count_error = 0;
  return false;
}

/* The result part of op kind k's signature, found once per kind (the verifier
** asks for it at every op it checks). */
const char *ir_op_sig_results(IrOpKind k) {
  static _Atomic(const char *) found[sizeof op_table / sizeof op_table[0]];
  const char *r = atomic_load_explicit(&found[k], memory_order_relaxed);
  if (!r) {
    r = sig_results(op_table[k].sig);
    atomic_store_explicit(&found[k], r, memory_order_relaxed);
  }
  return r;
}

/* }====================================================================== */
