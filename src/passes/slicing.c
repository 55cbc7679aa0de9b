/*
** slicing.c -- the `tileas-slicing` pass: a loop with the attribute
** `sliceCount = N` runs N slices (copies of its body, for consecutive
** iterations) per iteration, then the iterations left:
**
**   scf.for %i = lb to ub step s (iter %a = init) {sliceCount = N} { body }
** becomes
**   split = lb + max(ub - lb, 0) / (s * N) * (s * N)
**   %m = scf.for %j = lb to split step s * N (iter %a = init) {
**     body(%j, %a) -> %a1; body(%j + s, %a1) -> %a2; ...; yield %aN }
**   scf.for %i = split to ub step s (iter %a = %m) { body }   the residual
**
** The residual is the original loop, restarted at split; it goes when the
** bounds are constants and N * s divides the trip count. scf.while is sliced
** when it counts: its `before` block is `cmpi slt|ult %iv, %ub` and an
** scf.condition forwarding every argument in order, its `after` block yields
** %iv + %step (ub and step from outside); the slices chain through the
** yields and the main loop's condition compares against split. Loops nested
** in a sliced body are sliced first (inner loops first), so the copies hold
** their slices. Every sliceCount is checked before anything changes:
**
**   sliceCount not an integer >= 1       The sliceCountneed to be aIntegerAttr
**   sliceCount above SLICE_MAX, a step
**   times it out of the loop's type, a
**   kernel of more than SLICE_MAX_OPS
**   ops once sliced, a loop of more than
**   SLICE_MAX_VALUES values               (each says so)
**   on another op than scf.for / while   unsupported op in Slicing pass
**   a lower bound not a constant, block
**   argument or pure arith op            unsupported op to be a lower bound in slicing pass
**   an scf.while that does not count     fail to get an initial forOperand in slicing pass
**   an agent, agent_switch, isolated or
**   symbol op in the body                is not expected inside sliced part in SlicingPass
*/
#include <string.h>

#include "../dialects/dialects.h"
#include "../ir/checked.h"
#include "../dialects/enums.h"
#include "tileas_layout.h"

typedef struct Slicing {
  Rewriter r;
} Slicing;

#define LOADS_FIRST (ir_stamp_spec(STAMP_TILEAS_SLICE_LOADS_FIRST)->name)
#define SLICE_MAX 1024          /* slices of one loop */
#define SLICE_MAX_OPS (1 << 20) /* ops of a kernel once its loops are sliced (copies multiply) */
#define SLICE_MAX_VALUES 64     /* operands, results and block arguments of a sliced loop */

/* What the slices need of a loop. */
typedef struct Loop {
  IrOp *op;
  int64_t n; /* slices */
  IrValue *lb, *ub, *step;
  uint32_t iv;    /* scf.while: the counting argument */
  bool unsigned_; /* scf.while: ult */
  IrBlock *body;  /* scf.for's body, scf.while's `after` */
  bool first;     /* scf.for with tileas.slice_loads_first */
} Loop;

static bool has_slice_count(const IrOp *op) { return ir_op_attr(op, "sliceCount") != NULL; }

static bool defined_outside(const IrValue *v, const IrOp *loop) {
  IrOp *def = v->def ? v->def : ir_block_parent_op(v->block);
  return !ir_op_is_ancestor(loop, def) || (def == loop && !v->def);
}

/* {======================================================================
** Checks
** ======================================================================= */

static bool lower_bound_ok(const Loop *l) {
  IrOp *def = l->lb->def;
  if (!def || ir_op_is_pure(def)) return true;
  IrDiag *d = ir_op_error(l->op, "unsupported op to be a lower bound in slicing pass ");
  ir_op_note(d, def, "the lower bound is made here");
  return false;
}

/* The counting argument of an scf.while (the `before` block compares it, the
** `after` block steps it), else false. */
static bool while_counts(Loop *l) {
  IrOp *w = l->op;
  IrBlock *before = w->regions[0].first, *after = w->regions[1].first;
  IrOp *cmp = before ? before->first : NULL, *cond = cmp ? cmp->next : NULL;
  if (!cond || cond->kind != OP_SCF_CONDITION || cond->next || cmp->kind != OP_ARITH_CMPI)
    return false;
  int pred = ir_attrs_ARITH_CMPI(cmp).predicate;
  IrValue *iv = cmp->operands[0].value;
  if (pred != CMPI_SLT && pred != CMPI_ULT) return false;
  if (iv->def || iv->block != before || !defined_outside(cmp->operands[1].value, w)) return false;
  if (cond->operands[0].value != &cmp->results[0] || cond->noperands != before->nargs + 1)
    return false;
  for (uint32_t i = 0; i < before->nargs; i++)
    if (cond->operands[i + 1].value != before->args[i]) return false;
  IrOp *yield = after ? ir_block_terminator(after) : NULL;
  IrValue *next = yield && iv->index < yield->noperands ? yield->operands[iv->index].value : NULL;
  IrOp *add = next ? next->def : NULL;
  if (!add || add->kind != OP_ARITH_ADDI || add->parent != after) return false;
  IrValue *a = after->args[iv->index], *x = add->operands[0].value, *y = add->operands[1].value;
  IrValue *step = x == a ? y : y == a ? x : NULL;
  if (!step || !defined_outside(step, w)) return false;
  *l = (Loop){w,
              l->n,
              w->operands[iv->index].value,
              cmp->operands[1].value,
              step,
              iv->index,
              pred == CMPI_ULT,
              after,
              false};
  return true;
}

static bool body_visit(IrOp *op, void *ud) {
  IrOp **bad = ud;
  uint32_t traits = ir_op_info(op->kind)->traits;
  if (op->kind == OP_TILEAS_AGENT || op->kind == OP_TILEAS_AGENT_SWITCH ||
      (traits & (T_ISOLATED | T_SYMBOL))) {
    *bad = op;
    return false;
  }
  return true;
}

/* Read and check one loop with a sliceCount (no change yet). */
static bool check_loop(IrOp *op, Loop *l) {
  const IrAttr *a = ir_op_attr(op, "sliceCount");
  if (a->kind != IR_ATTR_INT || a->u.i < 1) {
    ir_op_error(op, "The sliceCountneed to be aIntegerAttr");
    return false;
  }
  if (a->u.i > SLICE_MAX) {
    ir_op_error(op, "sliceCount = %lld: a loop is sliced at most %d times", (long long)a->u.i,
                SLICE_MAX);
    return false;
  }
  if (op->noperands > SLICE_MAX_VALUES || op->nresults > SLICE_MAX_VALUES) {
    ir_op_error(op, "slicing takes loops of at most %d values", SLICE_MAX_VALUES);
    return false;
  }
  *l = (Loop){.op = op, .n = a->u.i};
  if (op->kind == OP_SCF_FOR) {
    *l = (Loop){op,
                a->u.i,
                op->operands[0].value,
                op->operands[1].value,
                op->operands[2].value,
                0,
                false,
                op->regions[0].first,
                false};
  } else if (op->kind == OP_SCF_WHILE) {
    if (!while_counts(l)) {
      ir_op_error(op, " fail to get an initial forOperand in slicing pass ");
      return false;
    }
  } else {
    ir_op_error(op, "unsupported op in Slicing pass");
    return false;
  }
  int64_t st, sn;
  uint32_t w = l->step->type->kind == IR_TY_INDEX ? 64 : l->step->type->width;
  if (dia_const_int(l->step, &st) && (!ck_mul(st, l->n, &sn) || sext(sn, w) != sn)) {
    ir_op_error(op, "sliceCount = %lld times the step %lld does not fit the loop's %u-bit integers",
                (long long)l->n, (long long)st, w);
    return false;
  }
  const IrAttr *lf = ir_op_attr(op, LOADS_FIRST);
  l->first = op->kind == OP_SCF_FOR && lf && lf->kind == IR_ATTR_BOOL && lf->u.b;
  IrOp *bad = NULL;
  for (IrOp *o = l->body->first; o && !bad; o = o->next)
    ir_walk_pre(o, body_visit, &bad);
  if (bad) {
    ir_op_error(bad, "is not expected inside sliced part in SlicingPass");
    return false;
  }
  return lower_bound_ok(l);
}

/* The ops under op once every loop is sliced: N slices and a residual for a
** sliced loop (saturating at INT64_MAX). */
static int64_t ops_after(const IrOp *op) {
  int64_t inner = 0, copies = 1, n;
  for (uint32_t r = 0; r < op->nregions; r++)
    for (IrBlock *b = op->regions[r].first; b; b = b->next)
      for (IrOp *o = b->first; o; o = o->next)
        if (!ck_add(inner, ops_after(o), &inner)) inner = INT64_MAX;
  const IrAttr *a = ir_op_attr(op, "sliceCount");
  if (a && a->kind == IR_ATTR_INT && a->u.i > 1) copies = a->u.i + 1;
  return ck_mul(copies, inner, &n) && ck_add(n, 1, &n) ? n : INT64_MAX;
}

/* }====================================================================== */

/* {======================================================================
** Slicing
** ======================================================================= */

static IrValue *k_of(Slicing *s, int64_t v, const IrType *t) { return rw_const(&s->r, v, t); }

/* split = lb + max(ub - lb, 0) / (s * N) * (s * N), folded when it can be;
** *whole says the residual is empty for sure. */
static IrValue *split_point(Slicing *s, const Loop *l, IrValue *sn, bool *whole) {
  int64_t lb, ub, st;
  const IrType *t = l->lb->type;
  *whole = false;
  int64_t diff = 0, span, split;
  /* folded when nothing overflows (check_loop made sure the span fits); else built */
  if (dia_const_int(l->lb, &lb) && dia_const_int(l->ub, &ub) && dia_const_int(l->step, &st) &&
      st > 0 && (ub <= lb || ck_sub(ub, lb, &diff)) && ck_mul(st, l->n, &span) &&
      ck_add(lb, diff / span * span, &split)) {
    *whole = diff % span == 0;
    return k_of(s, split, t);
  }
  IrValue *d = rw_bin(&s->r, OP_ARITH_SUBI, l->ub, l->lb);
  IrValue *zero = k_of(s, 0, t);
  IrValue *pos = l->unsigned_ ? rw_select(&s->r, rw_cmp(&s->r, "ult", l->lb, l->ub), d, zero)
                              : rw_bin(&s->r, OP_ARITH_MAXSI, d, zero);
  IrValue *q = rw_bin(&s->r, l->unsigned_ ? OP_ARITH_DIVUI : OP_ARITH_DIVSI, pos, sn);
  return rw_bin(&s->r, OP_ARITH_ADDI, l->lb, rw_bin(&s->r, OP_ARITH_MULI, q, sn));
}

/* The ops of an scf.for body that go first with `tileas.slice_loads_first`:
** its tiled_loads and the ops their operands come from, when none of them
** reads a value the loop carries and no op of the body writes memory (else
** none: *n = 0). early[i] marks the body's i-th op. */
static bool early_of(const IrOp *o, const IrBlock *body, bool *mark, IrOp **ops, uint32_t nops);

static uint32_t op_index(const IrOp *o, IrOp **ops, uint32_t nops) {
  for (uint32_t i = 0; i < nops; i++)
    if (ops[i] == o) return i;
  return nops;
}

/* Mark o and what its operands come from in body; false when one is carried. */
static bool early_of(const IrOp *o, const IrBlock *body, bool *mark, IrOp **ops, uint32_t nops) {
  uint32_t i = op_index(o, ops, nops);
  if (mark[i]) return true;
  mark[i] = true;
  for (uint32_t j = 0; j < o->noperands; j++) {
    const IrValue *v = o->operands[j].value;
    if (!v->def && v->block == body && v->index > 0) return false;
    if (v->def && v->def->parent == body && !early_of(v->def, body, mark, ops, nops)) return false;
  }
  return true;
}

static bool writes(IrOp *op, void *ud) {
  bool *w = ud;
  if (ir_op_effects(op) & IR_EFF_WRITE_MASK) *w = true;
  return !*w;
}

/* The body's ops but its terminator (*n of them) and which go first; false:
** none goes first. */
static bool loads_first(const Loop *l, IrOp ***ops, bool **mark, uint32_t *n) {
  IrBlock *body = l->body;
  IrOp *term = ir_block_terminator(body);
  *n = 0;
  for (IrOp *o = body->first; o != term; o = o->next)
    (*n)++;
  *ops = ir_malloc((*n + 1) * sizeof **ops);
  *mark = ir_malloc((*n + 1) * sizeof **mark);
  uint32_t i = 0;
  bool w = false, ok = true;
  for (IrOp *o = body->first; o != term; o = o->next, i++) {
    (*ops)[i] = o, (*mark)[i] = false;
    ir_walk_pre(o, writes, &w);
  }
  for (i = 0; i < *n && ok && !w; i++)
    if ((*ops)[i]->kind == OP_TILEAS_TILED_LOAD) ok = early_of((*ops)[i], body, *mark, *ops, *n);
  if (ok && !w) return true;
  ir_free(*ops), ir_free(*mark);
  return false;
}

/* Clone the body's ops (but its terminator) that `first` selects (all when
** NULL; ops[i] and first[i] of each, `want` the side) at the builder with m. */
static void clone_ops(Slicing *s, IrBlock *body, IrMapping *m, IrOp **ops, const bool *first,
                      uint32_t n, bool want) {
  if (!first) {
    IrOp *term = ir_block_terminator(body);
    for (IrOp *o = body->first; o != term; o = o->next)
      ir_builder_insert(&s->r.b, ir_op_clone(s->r.ctx, o, m));
    return;
  }
  for (uint32_t i = 0; i < n; i++)
    if (first[i] == want) ir_builder_insert(&s->r.b, ir_op_clone(s->r.ctx, ops[i], m));
}

/* The induction variable of copy k: %j + k * s. */
static IrValue *slice_iv(Slicing *s, const Loop *l, IrBlock *nb, int64_t k) {
  if (k == 0) return nb->args[0];
  int64_t st;
  IrValue *off = dia_const_int(l->step, &st)
                     ? k_of(s, wrap_mul(k, st), l->step->type) /* < st * n: fits */
                     : rw_bin(&s->r, OP_ARITH_MULI, l->step, k_of(s, k, l->step->type));
  return rw_bin(&s->r, OP_ARITH_ADDI, nb->args[0], off);
}

/* The main loop's slices: N copies of the body chained through their yields
** (scf.for: the induction variable of copy k is %j + k * s). With
** `tileas.slice_loads_first` on an scf.for (and loads_first), the loads of
** every copy (and their coordinates) come first, in order, then the rest of
** each copy. */
static void fill_slices(Slicing *s, const Loop *l, IrBlock *nb, IrValue **vals) {
  IrBlock *body = l->body;
  bool is_for = l->op->kind == OP_SCF_FOR;
  uint32_t nargs = body->nargs, nops = 0;
  IrOp **ops = NULL;
  bool *first = NULL;
  if (!(l->first && loads_first(l, &ops, &first, &nops))) first = NULL;
  IrMapping *maps = ir_malloc(l->n * sizeof *maps);
  for (int64_t k = 0; k < l->n; k++) {
    ir_mapping_init(&maps[k]);
    if (first) {
      ir_mapping_set(&maps[k], body->args[0], slice_iv(s, l, nb, k));
      clone_ops(s, body, &maps[k], ops, first, nops, true);
    }
  }
  for (uint32_t i = 0; i < nargs; i++)
    vals[i] = nb->args[i];
  IrOp *term = ir_block_terminator(body);
  for (int64_t k = 0; k < l->n; k++) {
    if (is_for && !first) ir_mapping_set(&maps[k], body->args[0], slice_iv(s, l, nb, k));
    for (uint32_t i = is_for; i < nargs; i++)
      ir_mapping_set(&maps[k], body->args[i], vals[i]);
    clone_ops(s, body, &maps[k], ops, first, nops, false);
    for (uint32_t i = 0; i < term->noperands; i++) {
      IrValue *v = term->operands[i].value, *mv = ir_mapping_get(&maps[k], v);
      vals[i + is_for] = mv ? mv : v;
    }
    ir_mapping_free(&maps[k]);
  }
  ir_free(maps);
  if (first) ir_free(ops), ir_free(first);
}

static void copy_attrs(IrOp *to, const IrOp *from) {
  for (uint32_t i = 0; i < from->nattrs; i++)
    if (strcmp(from->attrs[i].name, "sliceCount") != 0 &&
        strcmp(from->attrs[i].name, LOADS_FIRST) != 0)
      ir_op_set_attr(to, from->attrs[i].name, from->attrs[i].attr);
}

/* A main loop like l's (kind, attributes but sliceCount, result types) on
** operands opds; its `after` / body block holds the slices and their yield. */
static IrOp *main_loop(Slicing *s, const Loop *l, uint32_t n, IrValue **opds) {
  IrOp *op = l->op;
  bool is_for = op->kind == OP_SCF_FOR;
  const IrType *types[64];
  for (uint32_t i = 0; i < op->nresults; i++)
    types[i] = op->results[i].type;
  IrOp *m = ir_build(&s->r.b, op->kind, n, opds, op->nresults, types, op->nregions);
  copy_attrs(m, op);
  IrBlock *nb = ir_region_ensure_block(s->r.ctx, &m->regions[is_for ? 0 : 1]);
  for (uint32_t i = 0; i < l->body->nargs; i++)
    ir_block_add_arg(s->r.ctx, nb, l->body->args[i]->type);
  IrBuilder saved = s->r.b;
  ir_builder_at_end(&s->r.b, nb);
  IrValue *vals[64];
  fill_slices(s, l, nb, vals);
  ir_build(&s->r.b, OP_SCF_YIELD, l->body->nargs - is_for, vals + is_for, 0, NULL, 0);
  s->r.b = saved;
  return m;
}

/* scf.for: from lb to split by s * N. */
static IrOp *main_for(Slicing *s, const Loop *l, IrValue *split, IrValue *sn) {
  IrValue *opds[64];
  opds[0] = l->lb, opds[1] = split, opds[2] = sn;
  for (uint32_t i = 3; i < l->op->noperands; i++)
    opds[i] = l->op->operands[i].value;
  return main_loop(s, l, l->op->noperands, opds);
}

/* scf.while: its `before` block compares against split. */
static IrOp *main_while(Slicing *s, const Loop *l, IrValue *split) {
  IrValue *opds[64];
  for (uint32_t i = 0; i < l->op->noperands; i++)
    opds[i] = l->op->operands[i].value;
  IrOp *m = main_loop(s, l, l->op->noperands, opds);
  IrMapping map;
  ir_mapping_init(&map);
  ir_mapping_set(&map, l->ub, split);
  ir_region_clone_into(s->r.ctx, &l->op->regions[0], &m->regions[0], &map);
  ir_mapping_free(&map);
  return m;
}

static void slice_loop(Slicing *s, const Loop *l) {
  IrOp *op = l->op;
  ir_op_set_attr(op, "sliceCount", NULL);
  ir_op_set_attr(op, LOADS_FIRST, NULL);
  if (l->n == 1) return;
  rw_before(&s->r, op);
  int64_t st;
  IrValue *sn = dia_const_int(l->step, &st)
                    ? k_of(s, wrap_mul(st, l->n), l->step->type) /* fits: check_loop */
                    : rw_bin(&s->r, OP_ARITH_MULI, l->step, k_of(s, l->n, l->step->type));
  bool whole;
  IrValue *split = split_point(s, l, sn, &whole);
  bool is_for = op->kind == OP_SCF_FOR;
  IrOp *m = is_for ? main_for(s, l, split, sn) : main_while(s, l, split);
  if (whole) { /* no iteration left for the original loop */
    for (uint32_t i = 0; i < op->nresults; i++)
      ir_value_replace_all_uses(&op->results[i], &m->results[i]);
    ir_op_erase(op);
    return;
  }
  /* the residual: the original loop, from where the main loop stopped */
  uint32_t first = is_for ? 3 : 0;
  for (uint32_t i = 0; i < m->nresults; i++)
    ir_op_set_operand(op, first + i, &m->results[i]);
  if (is_for) ir_op_set_operand(op, 0, split);
}

/* }====================================================================== */

static IrResult slicing_kernel(Rewriter *r, IrOp *k) {
  Slicing *s = (Slicing *)r;
  IrOpVec v = {0};
  rw_collect(k, has_slice_count, &v);
  bool ok = true;
  Loop *loops = ir_malloc((v.n + 1) * sizeof *loops);
  for (size_t i = 0; i < v.n; i++)
    ok = check_loop(v.v[i], &loops[i]) && ok;
  int64_t total = ok ? ops_after(k) : 0;
  if (total > SLICE_MAX_OPS) {
    ir_op_error(k, "slicing its loops would make %s%lld ops, more than the %d a kernel may have",
                total == INT64_MAX ? "more than " : "", (long long)total, SLICE_MAX_OPS);
    ok = false;
  }
  /* pre-order reversed: inner loops before the loops around them */
  for (size_t i = v.n; ok && i-- > 0;)
    slice_loop(s, &loops[i]);
  ir_free(loops);
  ir_opvec_free(&v);
  return ok ? IR_OK : IR_FAIL;
}

IrResult pass_slicing(IrOp *module, IrPassCtx *pc) {
  Slicing s;
  return rw_run(&s.r, sizeof s, module, pc, slicing_kernel);
}
