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
** values or results, as a parallel copy). An nvvm op is written from its PTX
** row (nvvm.def) by the generic path below; the ops a template cannot say are
** the cases of emit_arith.c and emit_mem.c, with one state struct (Emit).
** Anything it cannot emit is a diagnostic on the op, never a crash.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../dialects/kernel.h"
#include "emit_impl.h"

static const char *const rc_decl[RC__COUNT] = {".pred", ".b16", ".b32", ".b64", ".f32", ".f64"};
static const char *const rc_prefix[RC__COUNT] = {"%p", "%rs", "%r", "%rd", "%f", "%fd"};
const char *const px_rc_mov[RC__COUNT] = {"pred", "b16", "b32", "b64", "f32", "f64"};

/* {======================================================================
** Registers and formatting
** ======================================================================= */

bool px_fail(Emit *e, IrOp *op, const char *why) {
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
bool px_type_regs(const IrType *t, RegClass *cls, uint32_t *n) {
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

Regs *px_new_regs(Emit *e, RegClass cls, uint32_t n) {
  Regs *r = arena_alloc(ir_arena(e->ctx), sizeof *r);
  r->cls = cls;
  r->n = n;
  r->base = e->next[cls] + 1;
  e->next[cls] += n;
  return r;
}

Regs *px_tmp(Emit *e, RegClass cls) { return px_new_regs(e, cls, 1); }

/* The registers of a value, allocated on first sight; NULL (diagnosed) for a
** type no register holds. */
Regs *px_regs(Emit *e, IrValue *v) {
  Regs *r = ptrmap_get(&e->regs, v);
  if (r) return r;
  RegClass cls;
  uint32_t n;
  if (!px_type_regs(v->type, &cls, &n)) {
    char *s = ir_type_to_string(v->type);
    IrOp *at = v->def ? v->def : ir_block_parent_op(v->block);
    if (at) ir_op_error(at, "cannot be emitted as PTX: no register holds a value of type %s", s);
    ir_free(s);
    e->failed = true;
    r = px_new_regs(e, RC_B32, 1); /* keep going to report more */
  } else {
    r = px_new_regs(e, cls, n);
  }
  ptrmap_set(&e->regs, v, r);
  return r;
}

void px_put_reg(Emit *e, const Regs *r, uint32_t i) {
  sb_puts(&e->body, rc_prefix[r->cls]);
  sb_put_u64(&e->body, (uint32_t)(r->base + i));
}

void px_put_list(Emit *e, const Regs *r) {
  if (r->n == 1) {
    px_put_reg(e, r, 0);
    return;
  }
  sb_putc(&e->body, '{');
  for (uint32_t i = 0; i < r->n; i++) {
    if (i) sb_puts(&e->body, ", ");
    px_put_reg(e, r, i);
  }
  sb_putc(&e->body, '}');
}

/* One instruction line. Directives: %v value (first register), %L value (all
** registers, braced when several), %R Regs *, %s string, %d int, %l long long,
** %u unsigned, %x unsigned as 0x.., %% a percent sign. */
void px_emitf(Emit *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sb_putc(&e->body, '\t');
  for (const char *p = fmt; *p; p++) {
    if (*p != '%') {
      sb_putc(&e->body, *p);
      continue;
    }
    switch (*++p) {
    case 'v': px_put_reg(e, px_regs(e, va_arg(ap, IrValue *)), 0); break;
    case 'L': px_put_list(e, px_regs(e, va_arg(ap, IrValue *))); break;
    case 'R': px_put_reg(e, va_arg(ap, Regs *), 0); break;
    case 's': sb_puts(&e->body, va_arg(ap, const char *)); break;
    case 'd': sb_put_i64(&e->body, va_arg(ap, int)); break;
    case 'l': sb_put_i64(&e->body, va_arg(ap, long long)); break;
    case 'u': sb_put_u64(&e->body, va_arg(ap, unsigned)); break;
    case 'x': sb_printf(&e->body, "0x%x", va_arg(ap, unsigned)); break;
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
void px_mov_reg(Emit *e, const Regs *d, uint32_t i, const Regs *s, uint32_t j) {
  sb_puts(&e->body, "\tmov.");
  sb_puts(&e->body, px_rc_mov[d->cls]);
  sb_putc(&e->body, ' ');
  px_put_reg(e, d, i);
  sb_puts(&e->body, ", ");
  px_put_reg(e, s, j);
  sb_puts(&e->body, ";\n");
}

void px_mov_all(Emit *e, const Regs *d, const Regs *s) {
  for (uint32_t i = 0; i < d->n && i < s->n; i++)
    px_mov_reg(e, d, i, s, i);
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
      if (d[i] != s[i]) px_mov_all(e, d[i], s[i]);
    return;
  }
  Regs **t = ir_malloc((n ? n : 1) * sizeof *t);
  for (uint32_t i = 0; i < n; i++) {
    t[i] = px_new_regs(e, s[i]->cls, s[i]->n);
    px_mov_all(e, t[i], s[i]);
  }
  for (uint32_t i = 0; i < n; i++)
    px_mov_all(e, d[i], t[i]);
  ir_free(t);
}

/* }====================================================================== */

/* {======================================================================
** Type suffixes
** ======================================================================= */

uint32_t px_width_of(const IrType *t) { return t->kind == IR_TY_INDEX ? 64 : t->width; }

/* Integer suffix with a sign letter ('s', 'u' or 'b') at the register width. */
const char *px_isfx(const IrType *t, char sign) {
  static const char *const s[] = {"s16", "s32", "s64"}, *const u[] = {"u16", "u32", "u64"},
                           *const b[] = {"b16", "b32", "b64"};
  uint32_t w = px_width_of(t);
  int i = w <= 16 ? 0 : w == 32 ? 1 : 2;
  return sign == 's' ? s[i] : sign == 'u' ? u[i] : b[i];
}

/* Integer suffix at the type's own width (s8 for i8): for cvt sources. */
const char *px_isfx_exact(const IrType *t, char sign) {
  if (px_width_of(t) == 8) return sign == 's' ? "s8" : "u8";
  return px_isfx(t, sign);
}

/* Float suffix; a packed pair (vector<2 x f16|bf16>) is f16x2 / bf16x2. */
const char *px_fsfx(const IrType *t) {
  static const char *const n[] = {"f16", "bf16", "f32", "f64"}, *const x2[] = {"f16x2", "bf16x2", "", ""};
  if (t->kind == IR_TY_VECTOR) return x2[t->elem->fkind];
  return n[t->fkind];
}

bool px_is_i8(const IrType *t) { return t->kind == IR_TY_INT && t->width == 8; }
bool px_is_i1(const IrType *t) { return t->kind == IR_TY_INT && t->width == 1; }

/* Re-establish the sign-extended form of an i8 after an op that may spill. */
void px_norm8(Emit *e, IrValue *v) {
  if (px_is_i8(v->type)) px_emitf(e, "cvt.s16.s8 %v, %v;", v, v);
}

/* An i8 operand zero-extended into a temporary (other types: the value's register). */
Regs *px_zext8(Emit *e, IrValue *v) {
  if (!px_is_i8(v->type)) return px_regs(e, v);
  Regs *t = px_tmp(e, RC_B16);
  px_emitf(e, "and.b16 %R, %v, 255;", t, v);
  return t;
}

/* }====================================================================== */

/* {======================================================================
** The generic path: an nvvm op's PTX template (its PTX row in nvvm.def)
**
**   $N, $rN ($r: $r0)   operand / result N: its register, {a, b, ..} for several
**   $?N{..}             .. when operand N is there
**   ${name}             the value of attribute `name` (its row's default when
**                       absent): an enum's spelling, an integer in decimal
**   ${name:x}           an integer attribute's low 32 bits in hex
**   $?name{..}          .. when the attribute is set (a bool true, else present)
**   $$                  a dollar sign
**
** Everything else is copied. With no op (Tpl.op NULL) a template is only
** checked against its op's signature and attribute rows (ptx_check_templates).
** ======================================================================= */

typedef struct Tpl {
  Emit *e;
  IrOp *op;        /* NULL: check only */
  IrOpKind kind;
  const char *why; /* the first thing wrong with the template */
} Tpl;

static void tpl_put(Tpl *t, bool out, const char *s, size_t n) {
  if (out && t->op) sb_putn(&t->e->body, s, n);
}

static const char *tpl_bad(Tpl *t, const char *why, const char *p) {
  if (!t->why) t->why = why;
  return p + strlen(p); /* stop */
}

/* A run of digits as a number (or -1), and its end. */
static long tpl_number(const char **p) {
  if (**p < '0' || **p > '9') return -1;
  char *end;
  long n = strtol(*p, &end, 10);
  *p = end;
  return n;
}

static size_t tpl_name(const char *p) {
  size_t n = 0;
  while ((p[n] >= 'a' && p[n] <= 'z') || (p[n] >= '0' && p[n] <= '9') || p[n] == '_')
    n++;
  return n;
}

/* Operand or result i: is it there (checking: may it be)? */
static bool tpl_has(Tpl *t, bool result, long i) {
  if (t->op) return i < (long)(result ? t->op->nresults : t->op->noperands);
  IrArity a = ir_op_arity(t->kind);
  return i < (result ? (a.max_results < 0 ? 1L << 30 : a.max_results)
                     : (a.max_operands < 0 ? 1L << 30 : a.max_operands));
}

static void tpl_value(Tpl *t, bool out, bool result, long i) {
  if (!out || !t->op) return;
  px_put_list(t->e, px_regs(t->e, result ? &t->op->results[i] : t->op->operands[i].value));
}

/* An attribute by name: its row (NULL when the op declares none) and value. */
static const IrAttrSpec *tpl_attr(Tpl *t, const char *name, size_t n, IrAttrValue *v) {
  if (t->op) return ir_op_attr_value(t->op, name, n, v) ? v->spec : NULL;
  uint32_t ns;
  const IrAttrSpec *s = ir_op_attr_specs(t->kind, &ns);
  for (uint32_t i = 0; i < ns; i++) {
    const char *sn;
    if (ir_attr_spec_name(&s[i], &sn) == n && strncmp(sn, name, n) == 0) return &s[i];
  }
  return NULL;
}

static const char *tpl_expand(Tpl *t, const char *p, bool out);

/* $?N{..} or $?name{..}: p after the '?'. */
static const char *tpl_cond(Tpl *t, const char *p, bool out) {
  bool on;
  long i = tpl_number(&p);
  if (i >= 0) {
    on = tpl_has(t, false, i);
  } else {
    IrAttrValue v;
    size_t n = tpl_name(p);
    if (!n || !tpl_attr(t, p, n, &v)) return tpl_bad(t, "$?name names no attribute of the op", p);
    on = !t->op || (v.spec->kind == IR_AS_BOOL ? v.i != 0 : v.present);
    p += n;
  }
  if (*p != '{') return tpl_bad(t, "$?.. must be followed by {..}", p);
  p = tpl_expand(t, p + 1, out && on);
  if (*p != '}') return tpl_bad(t, "unclosed {", p);
  return p + 1;
}

/* ${name} or ${name:x}: p after the '{'. */
static const char *tpl_attr_value(Tpl *t, const char *p, bool out) {
  IrAttrValue v;
  size_t n = tpl_name(p);
  const IrAttrSpec *s = n ? tpl_attr(t, p, n, &v) : NULL;
  if (!s) return tpl_bad(t, "${name} names no attribute of the op", p);
  p += n;
  bool hex = p[0] == ':' && p[1] == 'x';
  if (hex) p += 2;
  if (*p != '}') return tpl_bad(t, "${name} must end with }", p);
  if (out && t->op) {
    char buf[32];
    if (v.s) tpl_put(t, out, v.s, strlen(v.s));
    else tpl_put(t, out, buf, (size_t)snprintf(buf, sizeof buf, hex ? "0x%llx" : "%lld",
                                              hex ? (unsigned long long)(uint32_t)v.i : (unsigned long long)v.i));
  }
  return p + 1;
}

/* Expand from p to the end or an unmatched '}' (returned), writing when out. */
static const char *tpl_expand(Tpl *t, const char *p, bool out) {
  while (*p && *p != '}') {
    const char *q = p;
    while (*q && *q != '$' && *q != '}')
      q++;
    tpl_put(t, out, p, (size_t)(q - p));
    p = q;
    if (*p != '$') break;
    p++;
    if (*p == '$') {
      tpl_put(t, out, "$", 1);
      p++;
    } else if (*p == '?') {
      p = tpl_cond(t, p + 1, out);
    } else if (*p == '{') {
      p = tpl_attr_value(t, p + 1, out);
    } else {
      bool result = *p == 'r';
      if (result) p++;
      long i = tpl_number(&p);
      if (i < 0 && result) i = 0;
      if (i < 0) return tpl_bad(t, "$ must be followed by a number, r, ?, { or $", p);
      if ((out || !t->op) && !tpl_has(t, result, i)) /* skipped text may name an absent one */
        return tpl_bad(t, "$N names an operand or result the op does not have", p);
      tpl_value(t, out, result, i);
    }
  }
  return p;
}

static void emit_template(Emit *e, IrOp *op, const char *tmpl) {
  Tpl t = {e, op, op->kind, NULL};
  sb_putc(&e->body, '\t');
  const char *end = tpl_expand(&t, tmpl, true);
  sb_putc(&e->body, '\n');
  if (*end || t.why) px_fail(e, op, t.why ? t.why : "its PTX template has an unmatched }");
}

bool ptx_check_template(int kind, const char **why) {
  bool hand;
  const char *tmpl = ir_op_ptx((IrOpKind)kind, &hand);
  *why = NULL;
  if (!tmpl) {
    *why = "has no PTX or PTX_HAND row";
    return false;
  }
  if (hand) return true;
  Tpl t = {NULL, NULL, (IrOpKind)kind, NULL};
  const char *end = tpl_expand(&t, tmpl, false);
  *why = t.why ? t.why : *end ? "unmatched }" : NULL;
  return *why == NULL;
}

/* }====================================================================== */

static void emit_block(Emit *e, IrBlock *b);

/* {======================================================================
** Structured control flow
** ======================================================================= */

/* A loop takes over the registers of an initial value that nothing else reads
** (its only use, not aliased): no copy on entry, so an accumulator that wgmma
** is still writing is not read. Returns the registers to use, or NULL. */
static Regs *take_over(Emit *e, IrValue *init) {
  Regs *r = px_regs(e, init);
  return ir_value_num_uses(init) == 1 && !r->aliased ? r : NULL;
}

static Regs **regs_of_values(Emit *e, uint32_t n, IrValue *const *vals) {
  Regs **r = arena_alloc(ir_arena(e->ctx), (n ? n : 1) * sizeof *r);
  for (uint32_t i = 0; i < n; i++)
    r[i] = px_regs(e, vals[i]);
  return r;
}

/* Registers for the operands of a terminator starting at `from`. */
static Regs **term_regs(Emit *e, IrOp *t, uint32_t from, uint32_t *n) {
  *n = t && t->noperands > from ? t->noperands - from : 0;
  Regs **r = arena_alloc(ir_arena(e->ctx), (*n ? *n : 1) * sizeof *r);
  for (uint32_t i = 0; i < *n; i++)
    r[i] = px_regs(e, t->operands[from + i].value);
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
    px_fail(e, op, "malformed body");
    return;
  }
  IrValue *resv[64];
  if (n > 64) {
    px_fail(e, op, "too many loop-carried values");
    return;
  }
  for (uint32_t i = 0; i < n; i++) {
    Regs *own = take_over(e, op->operands[3 + i].value);
    if (own && !ptrmap_get(&e->regs, &op->results[i])) ptrmap_set(&e->regs, &op->results[i], own);
  }
  Regs **iters = regs_of_values(e, n, op_results(op, resv));
  Regs *iv = px_new_regs(e, px_regs(e, lb)->cls, 1), *p = px_tmp(e, RC_PRED);
  bind(e, 1, &body->args[0], &iv);
  bind(e, n, body->args + 1, iters);
  px_mov_all(e, iv, px_regs(e, lb));
  for (uint32_t i = 0; i < n; i++) {
    Regs *init = px_regs(e, op->operands[3 + i].value);
    if (init != iters[i]) px_mov_all(e, iters[i], init);
  }
  char l[32];
  label(e, head);
  px_emitf(e, "setp.ge.%s %R, %R, %v;", px_isfx(lb->type, 's'), p, iv, ub);
  put_label(e, l, sizeof l, exit);
  px_emitf(e, "@%R bra %s;", p, l);
  emit_block(e, body);
  uint32_t ny;
  Regs **ys = term_regs(e, ir_block_terminator(body), 0, &ny);
  parallel_copy(e, ny < n ? ny : n, iters, ys);
  px_emitf(e, "add.%s %R, %R, %v;", px_isfx(lb->type, 's'), iv, iv, step);
  if (px_is_i8(lb->type)) px_emitf(e, "cvt.s16.s8 %R, %R;", iv, iv);
  put_label(e, l, sizeof l, head);
  px_emitf(e, "bra.uni %s;", l);
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
    px_fail(e, op, "too many results");
    return;
  }
  Regs **res = regs_of_values(e, op->nresults, op_results(op, resv));
  uint32_t lelse = ++e->label, lend = ++e->label;
  bool has_else = els && (els->first || op->nresults);
  char l[32];
  put_label(e, l, sizeof l, has_else ? lelse : lend);
  px_emitf(e, "@!%v bra %s;", op->operands[0].value, l);
  if (then) emit_block(e, then);
  emit_yield_into(e, then, res, op->nresults);
  if (has_else) {
    put_label(e, l, sizeof l, lend);
    px_emitf(e, "bra.uni %s;", l);
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
    px_fail(e, op, "malformed regions");
    return;
  }
  IrValue *resv[64];
  if (op->nresults > 64) {
    px_fail(e, op, "too many results");
    return;
  }
  Regs **res = regs_of_values(e, op->nresults, op_results(op, resv));
  Regs **args = arena_alloc(ir_arena(e->ctx), (before->nargs + 1) * sizeof *args);
  for (uint32_t i = 0; i < before->nargs; i++) {
    Regs *s = px_regs(e, op->operands[i].value);
    args[i] = take_over(e, op->operands[i].value);
    if (!args[i]) {
      args[i] = px_new_regs(e, s->cls, s->n);
      px_mov_all(e, args[i], s);
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
    px_fail(e, op, "`before` must end with scf.condition");
    return;
  }
  uint32_t nf;
  Regs **fw = term_regs(e, cond, 1, &nf);
  parallel_copy(e, nf < op->nresults ? nf : op->nresults, res, fw);
  put_label(e, l, sizeof l, exit);
  px_emitf(e, "@!%v bra %s;", cond->operands[0].value, l);
  emit_block(e, after);
  emit_yield_into(e, after, args, before->nargs);
  put_label(e, l, sizeof l, head);
  px_emitf(e, "bra.uni %s;", l);
  label(e, exit);
}

/* }====================================================================== */

/* {======================================================================
** The op switch
** ======================================================================= */

static void emit_unsupported(Emit *e, IrOp *op) {
  if (ir_op_in_dialect(op->kind, "tile"))
    px_fail(e, op, "lower the tile ops first (convert-tile-to-nvvm, the `ptx` pipeline)");
  else if (ir_op_in_dialect(op->kind, "cutlass"))
    px_fail(e, op, "lower the cutlass ops first (convert-cutlass-to-nvvm)");
  else
    px_fail(e, op, "the emitter has no rule for this op");
}

/* .loc of the op's source line (the .lua line of the script that built it),
** when it differs from the last one written; the file gets its .file number. */
static void put_loc(Emit *e, const IrOp *op) {
  const char *f = op->loc.file;
  if (!f || op->loc.line <= 0 || (f == e->loc_file && op->loc.line == e->loc_line)) return;
  uintptr_t n = (uintptr_t)ptrmap_get(&e->files, f);
  if (!n) {
    n = ++e->nfiles;
    ptrmap_set(&e->files, f, (void *)n);
    sb_printf(&e->file_decls, ".file %u \"", (unsigned)n);
    for (const char *p = f; *p; p++) {
      if (*p == '"' || *p == '\\') sb_putc(&e->file_decls, '\\');
      if ((unsigned char)*p >= 0x20) sb_putc(&e->file_decls, *p);
    }
    sb_puts(&e->file_decls, "\"\n");
  }
  if (e->loc_end && e->body.len == e->loc_end) { /* the last one covered nothing */
    e->body.len = e->loc_start;
    e->body.data[e->body.len] = '\0';
  }
  e->loc_start = e->body.len;
  sb_printf(&e->body, "\t.loc %u %d %d\n", (unsigned)n, op->loc.line, op->loc.col > 0 ? op->loc.col : 0);
  e->loc_end = e->body.len;
  e->loc_file = f;
  e->loc_line = op->loc.line;
}

/* The writer of each op with a PTX_HAND row. */
static void (*const hand_writers[OP__COUNT])(Emit *, IrOp *) = {
#define OP(...)
#define DTYPE(...)
#define PTX_HAND(id, fn, text) [OP_##id] = fn,
#include "../dialects/all.def"
#undef OP
#undef DTYPE
#undef PTX_HAND
};

/* Control flow here, the hand-written cases, else the op's PTX template. */
static void emit_op(Emit *e, IrOp *op) {
  put_loc(e, op);
  switch (op->kind) {
  case OP_SCF_FOR: emit_for(e, op); return;
  case OP_SCF_IF: emit_if(e, op); return;
  case OP_SCF_WHILE: emit_while(e, op); return;
  default: break;
  }
  if (px_emit_arith(e, op) || px_emit_values(e, op)) return;
  if (hand_writers[op->kind]) {
    hand_writers[op->kind](e, op);
    return;
  }
  bool hand;
  const char *tmpl = ir_op_ptx(op->kind, &hand);
  if (tmpl && !hand) emit_template(e, op, tmpl);
  else emit_unsupported(e, op);
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

/* Load the parameters at the entry: a global pointer also goes through cvta.to.global. */
static void emit_params(Emit *e, IrOp *k, const char *name, IrBlock *body, StrBuf *head) {
  for (uint32_t i = 0; i < body->nargs; i++) {
    IrValue *arg = body->args[i];
    const char *decl, *ld;
    if (!param_types(arg->type, &decl, &ld)) {
      char *s = ir_type_to_string(arg->type);
      ir_op_error(k, "cannot be emitted as PTX: parameter #%u has type %s", i, s);
      ir_free(s);
      e->failed = true;
      continue;
    }
    if (ir_type_is_dialect(arg->type, IR_DTY_TILE_TENSOR_MAP)) { /* by value: its generic address */
      sb_printf(head, "%s\t.param .align 64 .b8 %s_param_%u[128]", i ? ",\n" : "", name, i);
      px_emitf(e, "mov.b64 %v, %s_param_%u;", arg, name, i);
      px_emitf(e, "cvta.param.u64 %v, %v;", arg, arg);
      continue;
    }
    sb_printf(head, "%s\t.param .%s %s_param_%u", i ? ",\n" : "", decl, name, i);
    if (px_is_i1(arg->type)) {
      Regs *t = px_tmp(e, RC_B16);
      px_emitf(e, "ld.param.u8 %R, [%s_param_%u];", t, name, i);
      px_emitf(e, "setp.ne.b16 %v, %R, 0;", arg, t);
    } else if (arg->type->kind == IR_TY_PTR && arg->type->space == IR_MS_GLOBAL) {
      Regs *t = px_tmp(e, RC_B64);
      px_emitf(e, "ld.param.u64 %R, [%s_param_%u];", t, name, i);
      px_emitf(e, "cvta.to.global.u64 %v, %R;", arg, t);
    } else {
      px_emitf(e, "ld.param.%s %v, [%s_param_%u];", ld, arg, name, i);
    }
  }
}

static bool visit_setmaxnreg(IrOp *op, void *ud) {
  if (op->kind == OP_NVVM_SETMAXREGISTER) *(bool *)ud = true;
  return !*(bool *)ud;
}

/* A kernel whose warpgroups move registers with setmaxnreg gets `.maxnreg`:
** its entry count (kernel_entry_regs: what ptxas must know to honour
** setmaxnreg; without it, it may pick fewer and ignore the moves). */
static int64_t entry_maxnreg(IrOp *k, const KernelSpec *ks) {
  bool found = false;
  ir_walk_pre(k, visit_setmaxnreg, &found);
  return found ? kernel_entry_regs(ks) : 0;
}

static void emit_kernel(Emit *e, IrOp *k, StrBuf *out) {
  IrAttrs_TILE_KERNEL ka = ir_attrs_TILE_KERNEL(k);
  const char *name = ka.sym_name;
  if (!dia_ptx_ident(name, name ? strlen(name) : 0)) {
    px_fail(e, k, "the kernel name is not a PTX identifier");
    return;
  }
  IrBlock *body = ir_region_ensure_block(e->ctx, &k->regions[0]);
  StrBuf head;
  sb_init(&head);
  sb_init(&e->body);
  memset(e->next, 0, sizeof e->next);
  ptrmap_free(&e->regs);
  memset(&e->regs, 0, sizeof e->regs);
  e->loc_file = NULL;
  e->loc_line = 0;
  e->loc_start = e->loc_end = 0;
  emit_params(e, k, name, body, &head);
  emit_block(e, body);
  KernelSpec ks = kernel_spec(k);
  const int64_t *block = ks.block, *cluster = ks.cluster;
  int64_t al = ka.shared_align;
  if (al > e->smem_align) e->smem_align = al;
  sb_printf(out, "\n// %s\n.visible .entry %s(\n%s%s)\n", name, name, head.data ? head.data : "",
            head.len ? "\n" : "");
  sb_printf(out, ".reqntid %lld, %lld, %lld\n", (long long)block[0], (long long)block[1],
            (long long)block[2]);
  int64_t maxnreg = entry_maxnreg(k, &ks);
  if (maxnreg) sb_printf(out, ".maxnreg %lld\n", (long long)maxnreg);
  /* min_ctas: ptxas bounds the registers so that many blocks fit an SM (the
  ** block's count is final only here: lowerings add warps) */
  if (ks.min_ctas && ks.min_ctas * ks.threads > SM90_SM_THREADS) {
    char why[128];
    snprintf(why, sizeof why,
             "kernel_spec.min_ctas = %lld blocks of %lld threads do not fit the %d threads of an SM",
             (long long)ks.min_ctas, (long long)ks.threads, SM90_SM_THREADS);
    px_fail(e, k, why);
    sb_free(&head);
    sb_free(&e->body);
    return;
  }
  if (ks.min_ctas) sb_printf(out, ".minnctapersm %lld\n", (long long)ks.min_ctas);
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
  e.version = PTX_VERSION_MIN;
  e.ctx = ir_op_context(module);
  e.smem_align = 16;
  *out = NULL;
  StrBuf kernels;
  sb_init(&kernels);
  sb_init(&e.file_decls);
  sb_init(&e.globals);
  IrBlock *mb = module->nregions ? module->regions[0].first : NULL;
  if (module->kind != OP_MODULE) {
    ir_op_error(module, "cannot be emitted as PTX: expected a module");
    return IR_FAIL;
  }
  if (ir_verify(module) != IR_OK) return IR_FAIL; /* the readers below trust verified IR */
  for (IrOp *op = mb ? mb->first : NULL; op; op = op->next) {
    if (op->kind == OP_TILE_KERNEL)
      emit_kernel(&e, op, &kernels);
    else
      emit_unsupported(&e, op);
  }
  for (IrOp *op = mb ? mb->first : NULL; op && e.smem; op = op->next) {
    const char *n = op->kind == OP_TILE_KERNEL ? ir_attrs_TILE_KERNEL(op).sym_name : NULL;
    if (n && strcmp(n, "smem") == 0) px_fail(&e, op, "the name 'smem' is the kernels' shared buffer");
  }
  ptrmap_free(&e.regs);
  ptrmap_free(&e.files);
  if (e.failed) {
    sb_free(&kernels);
    sb_free(&e.file_decls);
    sb_free(&e.globals);
    return IR_FAIL;
  }
  StrBuf text;
  sb_init(&text);
  sb_printf(&text, "//\n// Generated by tilua\n//\n\n.version %u.%u\n.target %s\n.address_size 64\n",
            e.version / 10, e.version % 10, PTX_TARGET);
  if (e.file_decls.data) { /* the sources of the .loc lines */
    sb_putc(&text, '\n');
    sb_puts(&text, e.file_decls.data);
  }
  sb_free(&e.file_decls);
  if (e.smem)
    sb_printf(&text, "\n.extern .shared .align %lld .b8 smem[];\n", (long long)e.smem_align);
  if (e.vprintf) /* CUDA's device printf (tile.printf) */
    sb_puts(&text, "\n.extern .func (.param .b32 func_retval0) vprintf (.param .b64 vprintf_param_0, "
                   ".param .b64 vprintf_param_1);\n");
  if (e.globals.data) {
    sb_putc(&text, '\n');
    sb_puts(&text, e.globals.data);
  }
  sb_free(&e.globals);
  if (kernels.data) sb_puts(&text, kernels.data);
  sb_free(&kernels);
  *out = sb_take(&text);
  return IR_OK;
}

/* }====================================================================== */
