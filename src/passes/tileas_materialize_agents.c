/*
** tileas_materialize_agents.c -- the `tileas-materialize-agents` pass: our
** stand-in for the warp specialization that runs before the cluster passes.
** A kernel whose body holds a loop marked `tileas.pipeline = {stages = S}`,
** in which tiled_loads feed the operands of tileas.dot ops, becomes
** warp-specialized agents:
**
**   rings       one tileas.alloc_tensor per such load, at the top of the
**               kernel: the load's tile in shared memory, `tileas.stages = S`
**               deep (a ring of a cutlass.pipeline once lowered)
**   producer    tileas.agent {kind = producer, num_warps = 4}: the body
**               with only what the loads need; each load is copied
**               (tileas.copy) into its ring
**   consumers   tileas.agent {kind = consumer, num_warps = 4}, one per
**               64 rows of a CTA's accumulator (a wgmma warpgroup's; on a
**               cluster whose CTAs split M by tileas-plan-cta's rule, the
**               rows of a CTA's block: each consumer then has rows of every
**               block, and plan-cta splits them): the body
**               with the dots reading the rings and everything after the
**               loop on the accumulator (the epilogue). With n = 2 or 3
**               consumers each computes its share of the rows: the tiles
**               along the accumulator's M get 1/n of the rows, the A ring is
**               sliced (tileas.extract_slice) and tile coordinates along M
**               become n * m + c. The consumers are replicas: `tileas.replica =
**               [c, n]` on each, and they differ only in c (an arith.constant
**               marked `tileas.replica`) and the slice's offsets (c times its
**               `tileas.replica_offsets`), so a lowering may run one code on
**               every warpgroup
**   ping-pong   a loop marked `tileas.pipeline = {pingpong = true}` (a 64- or
**               128-row accumulator a CTA, in a persistent loop; 128 rows
**               take one warpgroup's mma layouts; on a cluster the CTA's
**               block of the program's, tileas-plan-cta's split): two consumers
**               instead, each a copy with the whole accumulator, marked
**               `tileas.pingpong = [g, 2]`: consumer g takes the programs
**               j = g mod 2 of its CTA's sequence (convert-tileas-to-cutlass
**               alternates them over the one ring, ordered by seq_bars)
**   ksplit      a loop marked `tileas.pipeline = {ksplit = true}` (a 64-row
**               accumulator a CTA, in a persistent loop, an even ring): two
**               consumers, each a copy with the whole accumulator, marked
**               `tileas.ksplit = [g, 2]`: consumer g takes the iterations whose
**               place in the ring's sequence has g's parity; consumer 1 hands
**               its sums to consumer 0, which alone runs what follows the loop
**               (convert-tileas-to-cutlass)
**
** A tile program without such a loop (an elementwise map, a reduction, a
** normalization: no dot to pipeline) becomes one agent {kind = compute,
** num_warps = the block's warps} holding the whole body: every warp of the
** block works on the program's tiles together.
**
** Each agent is a copy of the whole body (a persistent loop included: every
** agent walks the same deterministic tile sequence) from which the dead ops
** and loop-carried values are then removed. Values cross agents only through
** the rings (and what is defined above the agents). The kernel's block
** becomes the agents' warps. A kernel with agents already is left alone.
*/
#include <string.h>

#include "../dialects/kernel.h"
#include "tileas_layout.h"

#define MAX_RINGS 8
#define WG_ROWS 64 /* rows of a wgmma accumulator fragment: one warpgroup's */
/* consumers a CTA: with the producer's, their warpgroups share 64K registers
** (setmaxnreg: 32 + 3 x 160 at three) */
#define MAX_CONSUMERS 3

typedef struct Mat {
  Rewriter rw;
  IrOp *loop; /* the pipelined loop (of the original body) */
  int64_t stages;
  IrOp *loads[MAX_RINGS]; /* its tiled_loads that feed dot operands */
  bool once[MAX_RINGS];   /* a load before the loop: its ring is filled once a program */
  IrValue *rings[MAX_RINGS];
  uint32_t nloads;
  int64_t rows;     /* the accumulator's M */
  int64_t cols;     /* its N */
  int64_t cta_rows; /* the CTAs of a cluster that tileas-plan-cta will split M among */
  uint32_t nconsumers;
  PtrMap mdim; /* consumer copy: value -> 1 + the dim that runs along M */
  bool failed;
} Mat;

static IrDiag *fail_at(Mat *m, IrOp *op, const char *fmt, const char *what) {
  m->failed = true;
  return ir_op_error(op, fmt, what);
}

/* {======================================================================
** Finding the pipelined loop
** ======================================================================= */

static bool feeds_dot_operand_only(IrValue *v) {
  if (!v->uses) return false;
  for (IrUse *u = v->uses; u; u = u->next)
    if (u->owner->kind != OP_TILEAS_DOT || u->index >= 2) return false;
  return true;
}

/* A dot whose partial sums are added into a tensor: from zeros, its result
** stored by a reduce-add store only (the fused attention backward's dQ += dS K).
** Its K dim may then be split among the consumers (each adds its part): it
** runs along the accumulator's M of the loop's other dots, whose rows it need
** not share. */
static bool reduced_dot(const IrOp *dot) {
  if (dot->kind != OP_TILEAS_DOT) return false;
  const IrOp *acc = dot->operands[2].value->def;
  if (!acc || acc->kind != OP_TILEAS_SPLAT) return false;
  const IrOp *c = acc->operands[0].value->def;
  const IrAttr *v = c && c->kind == OP_ARITH_CONSTANT ? ir_op_attr(c, "value") : NULL;
  if (!v ||
      !((v->kind == IR_ATTR_FLOAT && v->u.f == 0.0) || (v->kind == IR_ATTR_INT && v->u.i == 0)))
    return false;
  const IrValue *r = &dot->results[0];
  if (!r->uses) return false;
  for (const IrUse *u = r->uses; u; u = u->next)
    if (u->owner->kind != OP_TILEAS_TILED_STORE || u->index != u->owner->noperands - 1 ||
        ir_attrs_TILEAS_TILED_LOAD(u->owner).reduce != TMA_REDUCE_ADD)
      return false;
  return true;
}

static bool visit_find(IrOp *op, void *ud) {
  Mat *m = ud;
  if (m->loop || op->kind != OP_SCF_FOR || !ir_stamp_TILEAS_PIPELINE(op).present) return !m->loop;
  IrBlock *body = op->regions[0].first;
  uint32_t n = 0;
  for (IrOp *o = body ? body->first : NULL; o; o = o->next) {
    if (o->kind == OP_TILEAS_TILED_LOAD && feeds_dot_operand_only(&o->results[0])) {
      if (n == MAX_RINGS) {
        fail_at(m, o, "tileas-materialize-agents: more than %s loads feed the dots of one loop",
                "8");
        return false;
      }
      m->loads[n++] = o;
    }
    if (o->kind == OP_TILEAS_DOT && !reduced_dot(o)) {
      int64_t rows = o->results[0].type->shape[0];
      if (m->rows && rows != m->rows) {
        fail_at(m, o, "tileas-materialize-agents: %s",
                "the dots of a pipelined loop have accumulators of different rows");
        return false;
      }
      m->rows = rows;
      m->cols = o->results[0].type->shape[1];
    }
  }
  if (!n) return true;
  m->loop = op;
  m->nloads = n;
  m->stages = ir_stamp_TILEAS_PIPELINE(op).stages;
  return false;
}

static bool is_dot(const IrOp *op) { return op->kind == OP_TILEAS_DOT; }

/* A tile program's dots are lowered only as the mainloop of a pipelined loop
** (through the agents made here; a compute agent runs no dot): a dot with no
** such loop is an error here,
** where the cause is known, rather than at the next pass, which would only
** say that the agents are missing. */
static IrResult check_no_dot(IrOp *k) {
  IrOp *dot = rw_find(k, is_dot);
  if (!dot) return IR_OK;
  ir_op_error(
      dot,
      "tileas-materialize-agents: this dot is not in a pipelined loop: a tile program's dots "
      "run in tl.for_tiles (a loop marked tileas.pipeline), whose loads become the producer's rings");
  return IR_FAIL;
}

/* Do v's uses, dot operands only, all lie in the loop? */
static bool feeds_loop_dots_only(const Mat *m, IrValue *v) {
  if (!feeds_dot_operand_only(v)) return false;
  for (IrUse *u = v->uses; u; u = u->next)
    if (!ir_op_is_ancestor(m->loop, u->owner)) return false;
  return true;
}

/* A load outside the loop whose tile only its dots read (a Q tile of
** attention, read by every k block): a ring of one stage, filled once a
** program. */
static bool visit_program_loads(IrOp *op, void *ud) {
  Mat *m = ud;
  if (op == m->loop) return false; /* (its own loads are found already) */
  if (op->kind != OP_TILEAS_TILED_LOAD || !feeds_loop_dots_only(m, &op->results[0]))
    return !m->failed;
  if (m->nloads == MAX_RINGS) {
    fail_at(m, op, "tileas-materialize-agents: more than %s loads feed the dots of one loop", "8");
    return false;
  }
  m->once[m->nloads] = true;
  m->loads[m->nloads++] = op;
  return true;
}

static bool visit_has_agent(IrOp *op, void *ud) {
  bool *found = ud;
  if (op->kind == OP_TILEAS_AGENT || op->kind == OP_TILEAS_AGENT_SWITCH) *found = true;
  return !*found;
}

/* }====================================================================== */

/* {======================================================================
** Layouts and types of the consumers' halves
** ======================================================================= */

/* A layout for a consumer of `rows` rows: mma layouts (also as a slice's
** parent) have rows / 16 warps along M. */
static const IrAttr *half_layout(IrContext *ctx, const IrAttr *l, int64_t rows) {
  if (!l || l->kind != IR_ATTR_DICT) return l;
  const IrAttr *kind = ir_attr_dict_get(l, "kind");
  bool mma = kind && kind->kind == IR_ATTR_STR && strcmp(kind->u.str.s, "mma") == 0;
  IrNamedAttr e[16];
  uint32_t n = l->u.dict.n < 16 ? l->u.dict.n : 16;
  for (uint32_t i = 0; i < n; i++) {
    e[i] = l->u.dict.entries[i];
    if (strcmp(e[i].name, "parent") == 0) e[i].attr = half_layout(ctx, e[i].attr, rows);
    if (mma && strcmp(e[i].name, "warps") == 0 && e[i].attr->kind == IR_ATTR_ARRAY &&
        e[i].attr->u.arr.n == 2) {
      int64_t w[2] = {rows / 16, 1};
      e[i].attr = ir_attr_int_array(ctx, 2, w);
    }
  }
  return ir_attr_dict(ctx, n, e);
}

static int get_mdim(Mat *m, IrValue *v) { return (int)(uintptr_t)ptrmap_get(&m->mdim, v) - 1; }

/* Record that dim d of v runs along M; false on a conflict. */
static bool set_mdim(Mat *m, IrValue *v, int d, bool *again) {
  if (!v || v->type->kind != IR_TY_TILE || d < 0 || (uint32_t)d >= v->type->rank) return true;
  int have = get_mdim(m, v);
  if (have == d) return true;
  if (have >= 0) return false;
  ptrmap_set(&m->mdim, v, (void *)(uintptr_t)(d + 1));
  *again = true;
  return true;
}

typedef struct Prop {
  Mat *m;
  bool again;
} Prop;

static void share(Prop *p, IrOp *at, IrValue *a, IrValue *b) {
  if (!a || !b || a->type->kind != IR_TY_TILE || b->type->kind != IR_TY_TILE) return;
  int da = get_mdim(p->m, a), db = get_mdim(p->m, b);
  if ((da >= 0 && !set_mdim(p->m, b, da, &p->again)) ||
      (db >= 0 && !set_mdim(p->m, a, db, &p->again)))
    fail_at(p->m, at, "tileas-materialize-agents: %s",
            "values meet whose dims along the accumulator's M differ");
}

/* The values of an scf op's slots share their dims. */
static void share_slots(Prop *p, IrOp *op) {
  TasSlot sl;
  for (uint32_t i = 0; tas_slot_at(op, i, &sl); i++) {
    for (uint32_t j = 1; j < sl.nvalues; j++)
      share(p, op, sl.values[0], sl.values[j]);
    for (uint32_t j = 0; j < sl.nfeeds; j++)
      if (sl.feeds[j].op)
        share(p, op, sl.values[0], sl.feeds[j].op->operands[sl.feeds[j].index].value);
  }
}

/* One step of the propagation of "this dim runs along M" through an op. */
static bool visit_mdim(IrOp *op, void *ud) {
  Prop *p = ud;
  Mat *m = p->m;
  switch (op->kind) {
  case OP_TILEAS_DOT:      /* (an A operand in registers: P of attention, computed per row) */
    if (reduced_dot(op)) { /* its K dim split among the consumers, its rows whole */
      if (op->operands[0].value->type->space == IR_MS_RMEM)
        set_mdim(m, op->operands[0].value, ir_attrs_TILEAS_DOT(op).transpose_a ? 0 : 1, &p->again);
      break;
    }
    set_mdim(m, op->operands[2].value, 0, &p->again);
    set_mdim(m, &op->results[0], 0, &p->again);
    if (op->operands[0].value->type->space == IR_MS_RMEM)
      set_mdim(m, op->operands[0].value, ir_attrs_TILEAS_DOT(op).transpose_a ? 1 : 0, &p->again);
    break;
  case OP_TILEAS_EXPAND_DIM:
  case OP_TILEAS_REDUCE: {
    bool expand = op->kind == OP_TILEAS_EXPAND_DIM;
    IrValue *x = op->operands[0].value, *y = &op->results[0];
    int e = (int)(expand ? ir_attrs_TILEAS_EXPAND_DIM(op).dim : ir_attrs_TILEAS_REDUCE(op).dim);
    int dx = get_mdim(m, x), dy = get_mdim(m, y);
    if (expand) {
      if (dx >= 0) set_mdim(m, y, dx >= e ? dx + 1 : dx, &p->again);
      if (dy >= 0 && dy != e) set_mdim(m, x, dy > e ? dy - 1 : dy, &p->again);
    } else {
      if (dx == e)
        return !fail_at(m, op, "tileas-materialize-agents: %s",
                        "a reduction along the accumulator's M spans the consumers");
      if (dx >= 0) set_mdim(m, y, dx > e ? dx - 1 : dx, &p->again);
      if (dy >= 0) set_mdim(m, x, dy >= e ? dy + 1 : dy, &p->again);
    }
    break;
  }
  case OP_TILEAS_TRANSPOSE: { /* (a swapped GEMM's D^T stored as D: M along the other dim) */
    IrValue *x = op->operands[0].value, *y = &op->results[0];
    int dx = get_mdim(m, x), dy = get_mdim(m, y);
    if (dx >= 0) set_mdim(m, y, 1 - dx, &p->again);
    if (dy >= 0) set_mdim(m, x, 1 - dy, &p->again);
    break;
  }
  case OP_SCF_FOR:
  case OP_SCF_WHILE:
  case OP_SCF_IF: share_slots(p, op); break;
  case OP_TILEAS_EXTRACT_SLICE:
  case OP_TILEAS_EXTRACT:
  case OP_TILEAS_TILED_LOAD:
  case OP_TILEAS_TILED_STORE:
  case OP_TILEAS_COPY:
  case OP_TILEAS_ALLOC_TENSOR:
  case OP_TILEAS_SPLAT:
  case OP_TILEAS_IOTA: break; /* each handled where it is split (or nothing to share) */
  default: /* elementwise (arith, math, broadcast, convert_layout): every tile shares its dims */
    for (uint32_t i = 0; i < op->nresults; i++) {
      for (uint32_t j = 0; j < op->noperands; j++)
        share(p, op, &op->results[i], op->operands[j].value);
      if (i) share(p, op, &op->results[0], &op->results[i]);
    }
    break;
  }
  return !m->failed;
}

/* Does v get split: its dim along M is the accumulator's full M? */
static bool is_split(Mat *m, const IrValue *v) {
  int d = get_mdim(m, (IrValue *)v);
  return d >= 0 && v->type->shape[d] == m->rows;
}

static const IrType *half_type_of(Rewriter *r, const IrValue *v) {
  Mat *m = (Mat *)r;
  const IrType *t = v->type;
  if (t->kind != IR_TY_TILE) return NULL;
  int64_t shape[16];
  memcpy(shape, t->shape, t->rank * sizeof *shape);
  if (is_split(m, v)) shape[get_mdim(m, (IrValue *)v)] = m->rows / m->nconsumers;
  /* a warpgroup's rows: the consumer's part of its CTA's block */
  return ir_type_tile_layout(r->ctx, t->elem, t->rank, shape, t->space,
                             half_layout(r->ctx, t->layout, m->rows / m->nconsumers / m->cta_rows));
}

/* One consumer on a cluster that splits M: the tiles keep their shapes, the
** mma layouts take the warps of the CTA's block (one warpgroup's rows). */
static const IrType *block_type_of(Rewriter *r, const IrValue *v) {
  Mat *m = (Mat *)r;
  const IrType *t = v->type;
  if (t->kind != IR_TY_TILE) return NULL;
  return ir_type_tile_layout(r->ctx, t->elem, t->rank, t->shape, t->space,
                             half_layout(r->ctx, t->layout, m->rows / m->cta_rows));
}

/* A ping-pong consumer of 128 rows (a CTA's block): the tiles keep their
** shapes, the mma layouts take one warpgroup's warps (two 64-row slices of
** wgmma). */
static const IrType *warpgroup_type_of(Rewriter *r, const IrValue *v) {
  const IrType *t = v->type;
  if (t->kind != IR_TY_TILE) return NULL;
  return ir_type_tile_layout(r->ctx, t->elem, t->rank, t->shape, t->space,
                             half_layout(r->ctx, t->layout, WG_ROWS));
}

/* c * n + i before op (tile coordinates of half tiles along M); i is the
** consumer's replica index, a constant marked `tileas.replica`. */
static IrValue *half_coord(Mat *m, IrOp *op, IrValue *c, int64_t idx) {
  Rewriter *r = &m->rw;
  rw_before(r, op);
  IrValue *v = rw_bin(r, OP_ARITH_MULI, c, rw_i32(r, m->nconsumers));
  IrValue *i = rw_i32(r, idx);
  rw_set_bool(r, i->def, ir_stamp_spec(STAMP_TILEAS_REPLICA_INDEX)->name, true);
  return rw_bin(r, OP_ARITH_ADDI, v, i);
}

typedef struct Split {
  Mat *m;
  int64_t idx; /* this consumer's half */
} Split;

/* An iota along M counts the consumer's rows: c * rows is added to its
** half (c the replica constant), every other use reads the sum. */
static void offset_iota(Mat *m, IrOp *iota, int64_t idx) {
  Rewriter *r = &m->rw;
  IrValue *v = &iota->results[0];
  rw_after_value(r, v);
  IrValue *c = rw_i32(r, idx);
  rw_set_bool(r, c->def, ir_stamp_spec(STAMP_TILEAS_REPLICA_INDEX)->name, true);
  IrValue *off = rw_bin(r, OP_ARITH_MULI, c, rw_i32(r, m->rows / m->nconsumers));
  IrValue *splat = rw_op1(r, OP_TILEAS_SPLAT, 1, &off, v->type);
  IrValue *opds[2] = {v, splat};
  IrValue *sum = rw_op1(r, OP_ARITH_ADDI, 2, opds, v->type);
  for (IrUse *u = v->uses, *next; u; u = next) {
    next = u->next;
    if (u->owner != sum->def) ir_op_set_operand(u->owner, u->index, sum);
  }
  bool again = false;
  int d = get_mdim(m, v);
  set_mdim(m, splat, d, &again);
  set_mdim(m, sum, d, &again);
}

/* Before retyping: coordinates of split tiles, and the slices that an op
** cannot take across the halves. */
static bool visit_split(IrOp *op, void *ud) {
  Split *s = ud;
  Mat *m = s->m;
  if (op->kind == OP_TILEAS_IOTA && is_split(m, &op->results[0]) &&
      ir_attrs_TILEAS_IOTA(op).dim == get_mdim(m, &op->results[0])) {
    offset_iota(m, op, s->idx);
  } else if (op->kind == OP_TILEAS_TILED_LOAD || op->kind == OP_TILEAS_TILED_STORE) {
    IrValue *tile =
        op->kind == OP_TILEAS_TILED_LOAD ? &op->results[0] : op->operands[op->noperands - 1].value;
    if (is_split(m, tile)) { /* (a tile of lower rank than its tensor: its coordinates follow the
                                leading ones) */
      uint32_t lead =
          (uint32_t)ir_type_param_int(op->operands[0].value->type, 1, 0) - tile->type->rank;
      uint32_t at = 1 + lead + (uint32_t)get_mdim(m, tile);
      ir_op_set_operand(op, at, half_coord(m, op, op->operands[at].value, s->idx));
    }
  } else if ((op->kind == OP_TILEAS_EXTRACT_SLICE || op->kind == OP_TILEAS_EXTRACT) &&
             is_split(m, op->operands[0].value)) {
    fail_at(m, op, "tileas-materialize-agents: %s",
            "cannot take a slice or element across the consumers' rows");
  }
  return !m->failed;
}

/* }====================================================================== */

/* {======================================================================
** Building the agents
** ======================================================================= */

static IrOp *new_agent(Mat *m, IrOp *at, const char *kind, int64_t warps) {
  IrOp *a = ir_op_create(m->rw.ctx, OP_TILEAS_AGENT, at->loc, 0, NULL, 0, NULL, 1);
  rw_set_str(&m->rw, a, "kind", kind);
  rw_set_int(&m->rw, a, "num_warps", warps);
  ir_region_ensure_block(m->rw.ctx, &a->regions[0]);
  return a;
}

/* A copy of the body's ops from `first` on into agent a; map gets the copies. */
static void copy_body(Mat *m, IrOp *first, IrOp *a, IrMapping *map) {
  IrBlock *into = a->regions[0].first;
  for (IrOp *o = first; o; o = o->next)
    ir_block_append(into, ir_op_clone(m->rw.ctx, o, map));
}

static IrOp *copy_of(IrMapping *map, IrOp *op) {
  IrValue *v = ir_mapping_get(map, &op->results[0]);
  return v ? v->def : NULL;
}

static bool pick_dot(const IrOp *op) { return op->kind == OP_TILEAS_DOT; }
static bool pick_store(const IrOp *op) { return op->kind == OP_TILEAS_TILED_STORE; }

/* Is slot s of an scf.for dead: its result unused, its block argument read
** only by the yield that carries it on unchanged? */
/* Does v reach, through the pure ops of its block, nothing but operand
** `index` of `yield`? (seen: the ops already followed) */
static bool flows_only_to(IrValue *v, const IrOp *yield, uint32_t index, PtrMap *seen) {
  for (IrUse *u = v->uses; u; u = u->next) {
    IrOp *o = u->owner;
    if (o == yield) {
      if (u->index != index) return false;
      continue;
    }
    if (o->parent != yield->parent || o->nregions || !ir_op_is_pure(o)) return false;
    if (ptrmap_get(seen, o)) continue;
    ptrmap_set(seen, o, o);
    for (uint32_t i = 0; i < o->nresults; i++)
      if (!flows_only_to(&o->results[i], yield, index, seen)) return false;
  }
  return true;
}

/* Is slot s of an scf.for dead: its result unused, and its block argument
** read only by what computes the value the yield carries on in it (an
** online softmax's running maximum in a producer, whose dots are gone)? */
static bool dead_slot(const TasSlot *s) {
  IrValue *arg = NULL, *res = NULL;
  for (uint32_t i = 0; i < s->nvalues; i++) {
    if (s->values[i]->def) res = s->values[i];
    else arg = s->values[i];
  }
  if (!arg || !res || ir_value_has_uses(res)) return false;
  for (uint32_t j = 0; j < s->nfeeds; j++) {
    const TasUse *f = &s->feeds[j];
    if (!f->op || f->op->kind != OP_SCF_YIELD || f->op->parent != arg->block) continue;
    PtrMap seen = {0};
    bool dead = flows_only_to(arg, f->op, f->index, &seen);
    ptrmap_free(&seen);
    return dead;
  }
  return false;
}

static bool pick_for(const IrOp *op) { return op->kind == OP_SCF_FOR; }

/* Remove what an agent does not need: dead ops and dead loop-carried values, to a fixed point. */
static void prune(Mat *m, IrOp *a) {
  for (bool again = true; again;) {
    again = rw_dce_block(a->regions[0].first);
    IrOpVec loops = {0};
    rw_collect(a, pick_for, &loops);
    for (uint32_t i = 0; i < loops.n && !again; i++) {
      TasSlot sl;
      for (uint32_t j = 0; tas_slot_at(loops.v[i], j, &sl); j++)
        if (dead_slot(&sl)) {
          tas_drop_slot(m->rw.ctx, &sl);
          again = true; /* the loop was rebuilt: collect again */
          break;
        }
    }
    ir_opvec_free(&loops);
  }
}

/* The producer: loads copied into their rings; no dots, no stores. */
static IrOp *build_producer(Mat *m, IrOp *first, IrOp *at) {
  IrOp *a = new_agent(m, at, "producer", 4);
  IrMapping map;
  ir_mapping_init(&map);
  copy_body(m, first, a, &map);
  for (uint32_t i = 0; i < m->nloads; i++) {
    IrOp *ld = copy_of(&map, m->loads[i]);
    IrValue *opds[2] = {&ld->results[0], m->rings[i]};
    IrOp *cp = ir_op_create(m->rw.ctx, OP_TILEAS_COPY, ld->loc, 2, opds, 0, NULL, 0);
    ir_op_insert_after(ld, cp);
  }
  ir_mapping_free(&map);
  IrOpVec ops = {0};
  rw_collect(a, pick_dot, &ops);
  for (uint32_t i = 0; i < ops.n; i++)
    rw_replace(ops.v[i], ops.v[i]->operands[2].value);
  ops.n = 0;
  rw_collect(a, pick_store, &ops);
  for (uint32_t i = 0; i < ops.n; i++)
    ir_op_erase(ops.v[i]);
  ir_opvec_free(&ops);
  prune(m, a);
  return a;
}

/* {======================================================================
** The schedule of a consumer's loop of chained dots
** ======================================================================= */

static bool pick_pipelined(const IrOp *op) {
  return op->kind == OP_SCF_FOR && ir_stamp_TILEAS_PIPELINE(op).present;
}

/* A dot whose operands are rings (shared tiles the producer fills) and whose
** accumulator starts anew (a splat), so that it depends on nothing the loop
** carries: its iteration's stages are all it waits for. */
static bool ring_dot(const IrOp *dot) {
  const IrOp *acc = dot->operands[2].value->def;
  return dot->operands[0].value->type->space == IR_MS_SHARED &&
         dot->operands[1].value->type->space == IR_MS_SHARED && acc && acc->kind == OP_TILEAS_SPLAT;
}

/* Is v read by the loop's yield only (a value carried to the next iteration)? */
static bool only_yielded(IrValue *v) {
  for (IrUse *u = v->uses; u; u = u->next)
    if (u->owner->kind != OP_SCF_YIELD) return false;
  return v->uses != NULL;
}

/* A consumer's pipelined loop whose dots chain through registers (one's
** result, through elementwise ops and row reductions, an operand of another:
** attention's P) is scheduled as FlashAttention-3 is: its ring dots are issued
** one iteration ahead (tileas.ahead), so that the tensor cores compute the
** next iteration's while the registers of this one are worked on; that takes
** the other dots' results being only carried (read in the next iteration).
** With several consumers they take turns at the dots (tileas.turns on the
** loop): one's register work overlaps the others' dots. A loop marked
** in_order (tileas.pipeline) keeps every dot in its iteration: none ahead. */
static void schedule_chained_dots(Mat *m, IrOp *a) {
  IrOp *loop = rw_find(a, pick_pipelined);
  if (!loop) return;
  IrOpVec dots = {0};
  bool chained = false, rotatable = true, any_ahead = false;
  for (IrOp *o = loop->regions[0].first->first; o; o = o->next) {
    if (o->kind != OP_TILEAS_DOT) continue;
    if (reduced_dot(o)) rw_set_bool(&m->rw, o, ir_stamp_spec(STAMP_TILEAS_REDUCED)->name, true);
    ir_opvec_push(&dots, o);
    chained |= o->operands[0].value->type->space == IR_MS_RMEM ||
               o->operands[1].value->type->space == IR_MS_RMEM;
    if (ring_dot(o)) any_ahead = true;
    else if (!reduced_dot(o)) rotatable &= only_yielded(&o->results[0]);
  }
  if (chained && rotatable && any_ahead && !ir_stamp_TILEAS_PIPELINE(loop).in_order)
    for (size_t i = 0; i < dots.n; i++)
      if (ring_dot(dots.v[i]))
        rw_set_bool(&m->rw, dots.v[i], ir_stamp_spec(STAMP_TILEAS_AHEAD)->name, true);
  if (chained && m->nconsumers > 1)
    rw_set_bool(&m->rw, loop, ir_stamp_spec(STAMP_TILEAS_TURNS)->name, true);
  ir_opvec_free(&dots);
}

/* }====================================================================== */

/* Consumer idx of m->nconsumers: the dots read the rings (the A ring sliced
** to its rows), its half of every tile along M. */
static IrOp *build_consumer(Mat *m, IrOp *first, IrOp *at, int64_t idx) {
  IrContext *ctx = m->rw.ctx;
  IrOp *a = new_agent(m, at, "consumer", 4);
  IrMapping map;
  ir_mapping_init(&map);
  copy_body(m, first, a, &map);
  int64_t rows = m->rows / m->nconsumers;
  for (uint32_t i = 0; i < m->nloads; i++) {
    IrOp *ld = copy_of(&map, m->loads[i]);
    for (IrUse *u = ld->results[0].uses, *next; u; u = next) {
      next = u->next;
      IrOp *dot = u->owner;
      IrValue *ring = m->rings[i];
      bool trans = u->index == 0 ? ir_attrs_TILEAS_DOT(dot).transpose_a : false;
      bool split_k = u->index == 1 && reduced_dot(dot); /* B of a reduced dot: its K rows */
      if (split_k) trans = ir_attrs_TILEAS_DOT(dot).transpose_b;
      if (split_k && ring->type->shape[trans] != m->rows) {
        fail_at(m, dot, "tileas-materialize-agents: %s",
                "a dot reduce-added into a tensor splits its K among the consumers: its K must be "
                "the accumulator's M of the loop's other dots");
        break;
      }
      if ((u->index == 0 || split_k) &&
          m->nconsumers > 1) { /* A: this consumer's rows of the ring */
        const IrType *t = ring->type;
        int64_t off[2] = {0, 0}, size[2] = {t->shape[0], t->shape[1]};
        off[trans] = idx * rows;
        size[trans] = rows;
        const IrType *st = ir_type_tile_layout(ctx, t->elem, 2, size, t->space, t->layout);
        IrOp *sl = ir_op_create(ctx, OP_TILEAS_EXTRACT_SLICE, dot->loc, 1, &ring, 1, &st, 0);
        ir_op_set_attr(sl, "offsets", ir_attr_int_array(ctx, 2, off));
        ir_op_set_attr(sl, "sizes", ir_attr_int_array(ctx, 2, size));
        int64_t per[2] = {0, 0}; /* the offsets are the replica index times these */
        per[trans] = rows;
        ir_op_set_attr(sl, ir_stamp_spec(STAMP_TILEAS_REPLICA_OFFSETS)->name,
                       ir_attr_int_array(ctx, 2, per));
        ir_op_insert_before(dot, sl);
        ring = &sl->results[0];
      }
      ir_op_set_operand(dot, u->index, ring);
    }
    ir_op_erase(ld);
  }
  ir_mapping_free(&map);
  prune(m, a);
  if (m->nconsumers > 1) {
    int64_t rep[2] = {idx, m->nconsumers};
    ir_op_set_attr(a, ir_stamp_spec(STAMP_TILEAS_REPLICA)->name, ir_attr_int_array(ctx, 2, rep));
    for (Prop p = {m, true}; p.again && !m->failed;) {
      p.again = false;
      ir_walk_pre(a, visit_mdim, &p);
    }
    Split s = {m, idx};
    if (!m->failed) ir_walk_pre(a, visit_split, &s);
    if (!m->failed) rw_retype(a, half_type_of, &m->rw);
    ptrmap_free(&m->mdim); /* this consumer's */
  } else if (m->cta_rows > 1) {
    rw_retype(a, block_type_of, &m->rw);
  }
  schedule_chained_dots(m, a);
  return a;
}

/* kernel_spec with block = {32 * warps, 1, 1}. */
static void set_block(Mat *m, IrOp *k, int64_t warps) {
  const IrAttr *spec = ir_op_attr(k, "kernel_spec");
  IrNamedAttr e[16];
  uint32_t n = 0;
  for (uint32_t i = 0; spec && i < spec->u.dict.n && n < 15; i++)
    if (strcmp(spec->u.dict.entries[i].name, "block") != 0) e[n++] = spec->u.dict.entries[i];
  int64_t block[3] = {32 * warps, 1, 1};
  e[n++] = (IrNamedAttr){"block", ir_attr_int_array(m->rw.ctx, 3, block)};
  ir_op_set_attr(k, "kernel_spec", ir_attr_dict(m->rw.ctx, n, e));
}

static bool is_tileas(const IrOp *op) { return ir_op_in_dialect(op->kind, "tileas"); }
static bool is_program_loop(const IrOp *op) { return op->kind == OP_TILEAS_IS_VALID_PROGRAM_ID; }

/* A tile program without a pipelined loop: its body in one compute agent of the block's warps. */
static IrResult compute_agent(Mat *m, IrOp *k) {
  IrBlock *body = m->rw.entry;
  if (!body->first || !rw_find(k, is_tileas)) return IR_OK;
  int64_t warps = kernel_spec(k).threads / 32;
  IrOp *a = new_agent(m, body->first, "compute", warps > 0 ? warps : 1);
  IrBlock *into = a->regions[0].first;
  for (IrOp *o = body->first, *next; o; o = next) {
    next = o->next;
    ir_op_unlink(o);
    ir_block_append(into, o);
  }
  ir_block_append(body, a);
  return IR_OK;
}

static IrResult materialize_kernel(Rewriter *r, IrOp *k) {
  Mat *m = (Mat *)r;
  bool has_agents = false;
  ir_walk_pre(k, visit_has_agent, &has_agents);
  if (has_agents) return IR_OK;
  m->loop = NULL;
  m->nloads = 0;
  m->rows = 0;
  memset(m->once, 0, sizeof m->once);
  ir_walk_pre(k, visit_find, m);
  if (m->failed) return IR_FAIL;
  if (!m->loop) return check_no_dot(k) == IR_OK ? compute_agent(m, k) : IR_FAIL;
  ir_walk_pre(k, visit_program_loads, m);
  if (m->failed) return IR_FAIL;
  /* on a cluster, tileas-plan-cta's rule splits M among cta_rows CTAs: the
  ** consumers are a CTA block's warpgroups (each then holds its rows of
  ** every block: consumer c the program's rows c * rows / n, split by CTA) */
  int64_t sn;
  m->cta_rows = 1;
  KernelSpec ks = kernel_spec(k);
  if (ks.ctas > 1) tas_dot_split(m->rows, m->cols, ks.ctas, &m->cta_rows, &sn);
  int64_t block = m->rows / m->cta_rows;
  if (m->rows % m->cta_rows || block % WG_ROWS != 0 || block / WG_ROWS > MAX_CONSUMERS) {
    ir_op_error(
        m->loop,
        "tileas-materialize-agents: the accumulator has %lld rows, %lld a CTA; consumers (wgmma "
        "warpgroups) take 64 rows each, one to three of them per CTA (64, 128 or 192 rows)",
        (long long)m->rows, (long long)block);
    return IR_FAIL;
  }
  m->nconsumers = (uint32_t)(block / WG_ROWS);
  /* ping-pong: two consumers, each the whole accumulator (on a cluster, its
  ** CTA's block), taking programs in turn */
  bool pingpong = ir_stamp_TILEAS_PIPELINE(m->loop).pingpong;
  /* ksplit: two consumers, each the whole 64-row accumulator, taking every
  ** other stage of the ring (an even ring: with an odd one a consumer would
  ** wait on a stage whose previous phase the other one took) */
  bool ksplit = ir_stamp_TILEAS_PIPELINE(m->loop).ksplit;
  if (ksplit && pingpong) {
    ir_op_error(m->loop,
                "tileas-materialize-agents: a loop's consumers are ping-pong or ksplit, not both");
    return IR_FAIL;
  }
  if (pingpong && ((block != WG_ROWS && block != 2 * WG_ROWS) || !rw_find(k, is_program_loop))) {
    ir_op_error(m->loop,
                "tileas-materialize-agents: ping-pong consumers each hold the whole accumulator "
                "(one warpgroup's: 64 or 128 rows a CTA, got %lld) and take turns at the programs "
                "of a persistent loop (tileas-dynamic-persistent)",
                (long long)block);
    return IR_FAIL;
  }
  if (ksplit && (block != WG_ROWS || !rw_find(k, is_program_loop))) {
    ir_op_error(m->loop,
                "tileas-materialize-agents: ksplit consumers each hold the whole accumulator (one "
                "warpgroup's: 64 rows a CTA, got %lld) and carry the ring's parity through the "
                "programs of a persistent loop (tileas-dynamic-persistent)",
                (long long)block);
    return IR_FAIL;
  }
  if (ksplit && m->stages % 2) {
    ir_op_error(
        m->loop,
        "tileas-materialize-agents: ksplit consumers take every other stage of the ring: its "
        "stages must be even, got %lld",
        (long long)m->stages);
    return IR_FAIL;
  }
  if (pingpong || ksplit) m->nconsumers = 1; /* (each the whole accumulator: nothing split) */
  IrBlock *body = r->entry;
  IrOp *first = body->first;
  /* the rings, at the top */
  for (uint32_t i = 0; i < m->nloads; i++) {
    const IrType *t = m->loads[i]->results[0].type;
    IrOp *ring = ir_op_create(r->ctx, OP_TILEAS_ALLOC_TENSOR, m->loads[i]->loc, 0, NULL, 1, &t, 0);
    rw_set_int(r, ring, ir_stamp_spec(STAMP_TILEAS_STAGES)->name, m->once[i] ? 1 : m->stages);
    if (m->once[i]) rw_set_bool(r, ring, ir_stamp_spec(STAMP_TILEAS_PER_PROGRAM)->name, true);
    ir_op_insert_before(first, ring);
    m->rings[i] = &ring->results[0];
  }
  IrOp *agents[1 + MAX_CONSUMERS];
  uint32_t na = 0;
  agents[na++] = build_producer(m, first, k);
  for (uint32_t c = 0; c < (pingpong || ksplit ? 2 : m->nconsumers) && !m->failed; c++) {
    agents[na++] = build_consumer(m, first, k, pingpong || ksplit ? 0 : c);
    if (pingpong ||
        ksplit) { /* (a warpgroup's mma layouts: 128 rows are 2 x 64, a warp 16 of each) */
      if (block > WG_ROWS) rw_retype(agents[na - 1], warpgroup_type_of, &m->rw);
      int64_t g[2] = {c, 2};
      ir_op_set_attr(agents[na - 1],
                     ir_stamp_spec(pingpong ? STAMP_TILEAS_PINGPONG : STAMP_TILEAS_KSPLIT)->name,
                     ir_attr_int_array(r->ctx, 2, g));
    }
  }
  if (m->failed) {
    for (uint32_t i = 0; i < na; i++)
      ir_op_erase(agents[i]);
    return IR_FAIL;
  }
  /* the body's own ops go, last first (every use before its value) */
  IrOp *last_ring = m->rings[m->nloads - 1]->def;
  while (body->last != last_ring)
    ir_op_erase(body->last);
  for (uint32_t i = 0; i < na; i++)
    ir_block_append(body, agents[i]);
  set_block(m, k, 4 * (int64_t)na);
  return IR_OK;
}

IrResult pass_tileas_materialize_agents(IrOp *module, IrPassCtx *pc) {
  Mat m;
  return rw_run(&m.rw, sizeof m, module, pc, materialize_kernel);
}
