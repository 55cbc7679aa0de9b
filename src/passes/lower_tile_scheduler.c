/*
** lower_tile_scheduler.c -- the `lower-tile-scheduler` pass: every
** cutlass.tile_scheduler.* op but the MODS probes becomes arith + scf (plus a
** tile.load for the pull model and, for the StreamK fixup, tile pointer ops,
** cutlass.generic_barrier and cutlass.block_striped ops that
** convert-cutlass-to-nvvm lowers next). The arithmetic mirrors the reference
** in src/sched operation for operation, in 32-bit unsigned integers
** (docs/schedulers.md, "The lowering"):
**
**   create_*_params          nothing left: the plan. Constant operands are
**                            planned here with sched_plan and the plan's scalars
**                            become constants; data-parallel and static
**                            persistent params with runtime operands compute the
**                            raster record (sched_raster_init) in the kernel;
**                            StreamK needs constants (host planning)
**   create                   nothing left (pull model: its response pointer)
**   create_*_work_tile_info  sched_dp_tile, sched_persistent_first, or
**                            sched_cursor_begin + sched_cursor_next
**   advance_to_next_work     sched_persistent_advance (data-parallel: the grid
**                            is every tile; pull model: the next id is loaded
**                            from the response buffer), or sched_cursor_next
**   work_tile_info.*         one field of the work tile
**   get_workspace_sizes      the plan's sizes (sched_workspace_sizes) as i64
**   fixup                    sched_fixup_role at run time: wait (acquire) on the
**                            tile's counter, block-striped adds of the partial
**                            slots, store and arrive (release), or as final
**                            split reset the counter and return true
**
** A work tile becomes its fields (i32 and i1 values). Loops and branches that
** carry one carry the fields instead: a 1:N conversion bridged by
** builtin.unrealized_conversion_cast pairs (pack: fields -> work tile, unpack:
** work tile -> fields) that are folded away at the end.
**
** Everything is checked before the IR changes: on a diagnostic the module is
** left as it was.
*/
#include <stdlib.h>
#include <string.h>

#include "../dialects/cutlass.h"
#include "../sched/sched.h"
#include "rewrite.h"

#define U32MAX 0xffffffffu

/* {======================================================================
** Kinds, work-tile fields and the pass state
** ======================================================================= */

enum { K_DP = SCHED_DATA_PARALLEL, K_SP = SCHED_STATIC_PERSISTENT, K_SK = SCHED_STREAMK, K_SM100 = CUT_SCHED_SM100_STREAMK };

/* The fields of a work tile. A kind carries some of them (tile_fields,
** piece_fields); the accessors derive the others (a whole tile starts at k 0
** and is its only split). */
/* clang-format off */
typedef enum Field {
  F_LINEAR,   /* linear tile id (data-parallel, persistent) or StreamK unit */
  F_M, F_N, F_L,
  F_TILE_IDX, /* position in the pipeline round, or StreamK output tile */
  F_K_START, F_K_COUNT, F_SPLIT, F_EXPECTED,
  F_VALID, F_SEPARATE, F_FINAL, F_INC_PIPE, /* the i1 fields */
  F_CUR_UNIT, F_CUR_LO, F_CUR_HI,           /* the StreamK cursor after this piece */
  NFIELDS
} Field;

static const uint8_t tile_fields[] = {F_LINEAR, F_M, F_N, F_L, F_TILE_IDX, F_K_COUNT, F_VALID,
                                      F_INC_PIPE};
static const uint8_t piece_fields[] = {F_LINEAR, F_TILE_IDX, F_M, F_N, F_L,
                                       F_K_START, F_K_COUNT, F_SPLIT, F_EXPECTED,
                                       F_VALID, F_SEPARATE, F_FINAL,
                                       F_CUR_UNIT, F_CUR_LO, F_CUR_HI};
/* clang-format on */

typedef struct Work {
  IrValue *f[NFIELDS];
} Work;

/* One params op: its plan (or its runtime raster) and what the fixup needs. */
typedef struct Sched {
  IrOp *op;
  int kind;     /* K_DP, K_SP or K_SK (SM100 StreamK lowers like StreamK) */
  bool planned; /* constant operands: plan is the reference's plan */
  SchedPlan plan;
  SchedOrder order;
  uint32_t cluster_m, cluster_n, swizzle, tiles_per_round;
  uint64_t acc_bytes;
  /* runtime raster (not planned), built at the params op in phase 2 */
  IrValue *per_l, *fast, *slow, *swz, *total, *grid;
} Sched;

typedef struct Handle {
  Sched *s;
  bool pull;
  IrValue *response;
} Handle;

typedef struct Low {
  Rewriter rw;
  PtrMap scheds;             /* params value -> Sched */
  PtrMap handles;            /* handle value -> Handle */
  PtrMap packs;              /* pack casts (op -> op) */
  IrOpVec packlist, unpacks; /* the casts of the kernel being lowered */
} Low;

/* A zeroed record that lives as long as the IR (the context's arena). */
static void *owned_alloc(Low *L, size_t n) { return arena_alloc(ir_arena(L->rw.ctx), n); }

static bool is_sched_type(const IrType *t, int dty) { return ir_type_is_dialect(t, dty); }
static bool is_wti(const IrType *t) { return is_sched_type(t, IR_DTY_CUTLASS_WORK_TILE_INFO); }

/* The kind of a scheduler-family type (K_SM100 lowers as K_SK), -1 if unknown. */
static int type_kind(const IrType *t) {
  int k = cut_kind_index(t, CUT_SCHED_KIND_names);
  return k == K_SM100 ? K_SK : k;
}

/* The fields a work tile of type t carries. */
static const uint8_t *carried(const IrType *t, uint32_t *n) {
  bool sk = type_kind(t) == K_SK;
  *n = sk ? sizeof piece_fields : sizeof tile_fields;
  return sk ? piece_fields : tile_fields;
}

static const IrType *field_type(Low *L, int f) {
  return f >= F_VALID && f <= F_INC_PIPE ? L->rw.i1 : L->rw.i32;
}

/* Is op one of the cutlass.tile_scheduler family (MODS probes included)? */
static bool is_sched_op(const IrOp *op) {
  return op->kind >= OP_CUTLASS_SCHED_CREATE_DP_PARAMS && op->kind <= OP_CUTLASS_MODS_THROTTLE;
}
static bool is_mods_op(const IrOp *op) {
  return op->kind >= OP_CUTLASS_MODS_START && op->kind <= OP_CUTLASS_MODS_THROTTLE;
}
static bool is_params_op(const IrOp *op) {
  return op->kind >= OP_CUTLASS_SCHED_CREATE_DP_PARAMS &&
         op->kind <= OP_CUTLASS_SCHED_CREATE_SM100_SK_PARAMS;
}
static bool is_work_create_op(const IrOp *op) {
  return op->kind >= OP_CUTLASS_SCHED_CREATE_DP_WORK &&
         op->kind <= OP_CUTLASS_SCHED_CREATE_SM100_SK_WORK;
}
static bool is_accessor(const IrOp *op) {
  return op->kind >= OP_CUTLASS_WTI_M && op->kind <= OP_CUTLASS_WTI_INCREMENT_PIPE;
}

/* }====================================================================== */

/* {======================================================================
** Building arithmetic (32-bit unsigned, as the reference)
** ======================================================================= */

/* The scheduler's arithmetic in the reference's words, over rewrite.h. */
static IrValue *c32(Low *L, uint32_t v) { return rw_const(&L->rw, (int64_t)v, L->rw.i32); }
static IrValue *c64(Low *L, uint64_t v) { return rw_const(&L->rw, (int64_t)v, L->rw.i64); }
static IrValue *c1(Low *L, bool v) { return rw_const(&L->rw, v, L->rw.i1); }
static IrValue *add(Low *L, IrValue *a, IrValue *b) { return rw_bin(&L->rw, OP_ARITH_ADDI, a, b); }
static IrValue *sub(Low *L, IrValue *a, IrValue *b) { return rw_bin(&L->rw, OP_ARITH_SUBI, a, b); }
static IrValue *mul(Low *L, IrValue *a, IrValue *b) { return rw_bin(&L->rw, OP_ARITH_MULI, a, b); }
static IrValue *divu(Low *L, IrValue *a, IrValue *b) { return rw_bin(&L->rw, OP_ARITH_DIVUI, a, b); }
static IrValue *remu(Low *L, IrValue *a, IrValue *b) { return rw_bin(&L->rw, OP_ARITH_REMUI, a, b); }
static IrValue *minu(Low *L, IrValue *a, IrValue *b) { return rw_bin(&L->rw, OP_ARITH_MINUI, a, b); }
static IrValue *maxu(Low *L, IrValue *a, IrValue *b) { return rw_bin(&L->rw, OP_ARITH_MAXUI, a, b); }
static IrValue *and1(Low *L, IrValue *a, IrValue *b) { return rw_bin(&L->rw, OP_ARITH_ANDI, a, b); }
static IrValue *cmp(Low *L, const char *p, IrValue *a, IrValue *b) { return rw_cmp(&L->rw, p, a, b); }
static IrValue *sel(Low *L, IrValue *c, IrValue *a, IrValue *b) { return rw_select(&L->rw, c, a, b); }
/* C's bool-to-integer promotion: 0 or 1. */
static IrValue *b2i(Low *L, IrValue *c) { return rw_cast(&L->rw, OP_ARITH_EXTUI, c, L->rw.i32); }
static IrValue *zext64(Low *L, IrValue *v) { return rw_cast(&L->rw, OP_ARITH_EXTUI, v, L->rw.i64); }

/* a / b + (a % b != 0): ceil_div32 of sched.c. */
static IrValue *ceil_div(Low *L, IrValue *a, IrValue *b) {
  return add(L, divu(L, a, b), b2i(L, cmp(L, "ne", remu(L, a, b), c32(L, 0))));
}

/* }====================================================================== */

/* {======================================================================
** Raster, data-parallel and static persistent (sched.c)
** ======================================================================= */

typedef struct Raster {
  IrValue *per_l, *fast, *swizzle, *slow, *total;
  SchedOrder order;
} Raster;

/* The raster record as values: constants of the plan, or the runtime record. */
static Raster raster_of(Low *L, const Sched *s) {
  Raster r = {s->per_l, s->fast, s->swz, s->slow, s->total, s->order};
  if (!s->planned) return r;
  const SchedRaster *p = &s->plan.persist.raster;
  r.per_l = c32(L, p->per_l), r.fast = c32(L, p->fast), r.swizzle = c32(L, p->swizzle);
  r.slow = c32(L, p->slow), r.total = c32(L, p->total);
  return r;
}

static IrValue *grid_of(Low *L, const Sched *s) {
  return s->planned ? c32(L, s->plan.grid) : s->grid;
}

/* sched_raster_unpack: linear -> (m, n, l) in cluster tiles. */
static void raster_unpack(Low *L, const Raster *r, IrValue *linear, Work *w) {
  IrValue *l = divu(L, linear, r->per_l);
  IrValue *rest = sub(L, linear, mul(L, l, r->per_l));
  IrValue *panel_size = mul(L, r->fast, r->swizzle);
  IrValue *panel = divu(L, rest, panel_size);
  IrValue *base = mul(L, panel, r->swizzle);
  IrValue *width =
      sel(L, cmp(L, "ult", base, r->slow), minu(L, r->swizzle, sub(L, r->slow, base)), c32(L, 1));
  IrValue *in = sub(L, rest, mul(L, panel, panel_size));
  IrValue *f = divu(L, in, width), *sl = add(L, base, remu(L, in, width));
  bool along_m = r->order == SCHED_ALONG_M;
  w->f[F_M] = along_m ? f : sl;
  w->f[F_N] = along_m ? sl : f;
  w->f[F_L] = l;
}

/* work_at of sched.c: the tile at `linear`, valid while linear < total. */
static void work_at(Low *L, const Raster *r, IrValue *linear, IrValue *tile_idx, Work *w) {
  raster_unpack(L, r, linear, w);
  w->f[F_LINEAR] = linear;
  w->f[F_TILE_IDX] = tile_idx;
  w->f[F_VALID] = cmp(L, "ult", linear, r->total);
  w->f[F_INC_PIPE] = c1(L, false);
}

/* sched_dp_tile and sched_persistent_first: work_at(linear, 0). */
static void tile_first(Low *L, const Sched *s, IrValue *linear, Work *w) {
  Raster r = raster_of(L, s);
  work_at(L, &r, linear, c32(L, 0), w);
  w->f[F_K_COUNT] = s->planned ? c32(L, s->plan.cfg.tiles_k) : s->op->operands[3].value;
}

/* sched_persistent_advance: the next tile is linear + grid (or, in the pull
** model, the id read from the response buffer); the tile just finished closes
** a pipeline round when tile_idx + 1 == tiles_per_round. */
static void tile_advance(Low *L, const Handle *h, const Work *t, Work *w) {
  const Sched *s = h->s;
  Raster r = raster_of(L, s);
  IrValue *next_idx = add(L, t->f[F_TILE_IDX], c32(L, 1));
  IrValue *inc = cmp(L, "eq", next_idx, c32(L, s->tiles_per_round));
  IrValue *linear;
  if (h->pull) {
    IrOp *ld = ir_build(&L->rw.b, OP_TILE_LOAD, 1, &h->response, 1, &L->rw.i32, 0);
    rw_set_bool(&L->rw, ld, "volatile", true);
    linear = &ld->results[0];
  } else {
    linear = add(L, t->f[F_LINEAR], grid_of(L, s));
  }
  work_at(L, &r, linear, sel(L, inc, c32(L, 0), next_idx), w);
  w->f[F_K_COUNT] = t->f[F_K_COUNT];
  w->f[F_INC_PIPE] = inc;
}

/* }====================================================================== */

/* {======================================================================
** StreamK: units, pieces and the cursor (streamk.c), over plan constants
** ======================================================================= */

/* sched_sk_unit_range: the flat k range [lo, hi) of StreamK unit u. */
static void sk_unit_range(Low *L, const SchedStreamK *p, IrValue *u, IrValue **lo, IrValue **hi) {
  if (p->decomp == SCHED_DECOMP_SPLIT_K) {
    IrValue *t = divu(L, u, c32(L, p->splits)), *s = remu(L, u, c32(L, p->splits));
    IrValue *r = c32(L, p->k_tiles % p->splits);
    *lo = add(L, add(L, mul(L, t, c32(L, p->k_tiles)), mul(L, s, c32(L, p->k_per_small))),
              minu(L, s, r));
    *hi = add(L, add(L, *lo, c32(L, p->k_per_small)), b2i(L, cmp(L, "ult", s, r)));
    return;
  }
  IrValue *small = c32(L, p->k_per_small), *big = c32(L, p->big_units);
  *lo = add(L, mul(L, u, small), minu(L, u, big));
  *hi = add(L, add(L, *lo, small), b2i(L, cmp(L, "ult", u, big)));
}

/* sk_unit_of: the StreamK unit holding flat k index f (StreamK decomposition). */
static IrValue *sk_unit_of(Low *L, const SchedStreamK *p, IrValue *f) {
  uint32_t small = p->k_per_small, big = p->big_units, big_end = big * (small + 1);
  IrValue *in_big = cmp(L, "ult", f, c32(L, big_end));
  return sel(L, in_big, divu(L, f, c32(L, small + 1)),
             divu(L, sub(L, f, c32(L, big)), c32(L, small)));
}

/* sched_sk_tile_units: the first unit covering tile t and their count. */
static void sk_tile_units(Low *L, const SchedStreamK *p, IrValue *t, IrValue **first,
                          IrValue **count) {
  IrValue *dp_first = add(L, c32(L, p->sk_units), sub(L, t, c32(L, p->sk_tiles)));
  IrValue *f, *n;
  if (p->decomp == SCHED_DECOMP_SPLIT_K) {
    f = mul(L, t, c32(L, p->splits));
    n = c32(L, p->splits);
  } else {
    IrValue *lo = mul(L, t, c32(L, p->k_tiles));
    f = sk_unit_of(L, p, lo);
    n = add(L, sub(L, sk_unit_of(L, p, add(L, lo, c32(L, p->k_tiles - 1))), f), c32(L, 1));
  }
  IrValue *is_dp = cmp(L, "uge", t, c32(L, p->sk_tiles));
  *first = sel(L, is_dp, dp_first, f);
  *count = sel(L, is_dp, c32(L, 1), n);
}

/* sk_finish: coordinates and the two flags of a piece. */
static void sk_finish(Low *L, const Sched *s, Work *w) {
  Raster r = raster_of(L, s);
  raster_unpack(L, &r, w->f[F_TILE_IDX], w);
  IrValue *k = c32(L, s->plan.sk.k_tiles);
  w->f[F_SEPARATE] = cmp(L, "ne", w->f[F_K_COUNT], k);
  w->f[F_FINAL] = cmp(L, "eq", add(L, w->f[F_K_START], w->f[F_K_COUNT]), k);
}

/* sk_piece: the part of unit u's range [lo, hi) in the tile of hi - 1
** (sk_finish is applied by the caller, once, to the piece chosen). */
static void sk_piece(Low *L, const Sched *s, IrValue *u, IrValue *lo, IrValue *hi, Work *w) {
  const SchedStreamK *p = &s->plan.sk;
  IrValue *k = c32(L, p->k_tiles);
  IrValue *t = divu(L, sub(L, hi, c32(L, 1)), k), *tile_lo = mul(L, t, k);
  IrValue *start = maxu(L, lo, tile_lo), *first;
  w->f[F_LINEAR] = u;
  w->f[F_TILE_IDX] = t;
  w->f[F_K_START] = sub(L, start, tile_lo);
  w->f[F_K_COUNT] = sub(L, hi, start);
  sk_tile_units(L, p, t, &first, &w->f[F_EXPECTED]);
  w->f[F_SPLIT] = sub(L, u, first);
}

/* sk_dp_piece: data-parallel tail unit u computes its whole tile. */
static void sk_dp_piece(Low *L, const Sched *s, IrValue *u, Work *w) {
  const SchedStreamK *p = &s->plan.sk;
  w->f[F_LINEAR] = u;
  w->f[F_TILE_IDX] = add(L, c32(L, p->sk_tiles), sub(L, u, c32(L, p->sk_units)));
  w->f[F_K_START] = c32(L, 0);
  w->f[F_K_COUNT] = c32(L, p->k_tiles);
  w->f[F_SPLIT] = c32(L, 0);
  w->f[F_EXPECTED] = c32(L, 1);
}

/* cursor_load: the range of unit u if it is a StreamK unit, else [0, 0). */
static void cursor_load(Low *L, const SchedStreamK *p, IrValue *u, IrValue **lo, IrValue **hi) {
  if (p->sk_units == 0) {
    *lo = *hi = c32(L, 0);
    return;
  }
  IrValue *rlo, *rhi, *is_sk = cmp(L, "ult", u, c32(L, p->sk_units));
  sk_unit_range(L, p, u, &rlo, &rhi);
  *lo = sel(L, is_sk, rlo, c32(L, 0));
  *hi = sel(L, is_sk, rhi, c32(L, 0));
}

/*
** sched_cursor_next from the cursor (u, lo, hi). The reference loops; its loop
** runs at most twice (a unit just entered is never empty: every unit holds at
** least one k tile, which planning checks), so it unrolls into: first move
** past an exhausted StreamK unit, then hand out the piece of the unit reached
** (its top piece, or the data-parallel tile, which also moves on).
*/
static void cursor_next(Low *L, const Sched *s, IrValue *u, IrValue *lo, IrValue *hi, Work *w) {
  const SchedStreamK *p = &s->plan.sk;
  IrValue *grid = c32(L, p->grid), *lo_n, *hi_n;
  IrValue *exhausted = and1(L, cmp(L, "ult", u, c32(L, p->sk_units)), cmp(L, "ule", hi, lo));
  IrValue *u1 = sel(L, exhausted, add(L, u, grid), u);
  cursor_load(L, p, u1, &lo_n, &hi_n);
  IrValue *lo1 = sel(L, exhausted, lo_n, lo), *hi1 = sel(L, exhausted, hi_n, hi);
  IrValue *valid = cmp(L, "ult", u1, c32(L, p->units));
  IrValue *is_dp = cmp(L, "uge", u1, c32(L, p->sk_units));
  sk_dp_piece(L, s, u1, w);
  if (p->sk_units > 0) {
    Work sk;
    memset(&sk, 0, sizeof sk);
    sk_piece(L, s, u1, lo1, hi1, &sk);
    for (int f = 0; f < NFIELDS; f++)
      if (w->f[f] && sk.f[f]) w->f[f] = sel(L, is_dp, w->f[f], sk.f[f]);
  }
  sk_finish(L, s, w);
  w->f[F_VALID] = valid;
  w->f[F_INC_PIPE] = c1(L, false);
  IrValue *moves = and1(L, is_dp, valid), *un = add(L, u1, grid);
  cursor_load(L, p, un, &lo_n, &hi_n);
  w->f[F_CUR_UNIT] = sel(L, moves, un, u1);
  w->f[F_CUR_LO] = sel(L, moves, lo_n, lo1);
  w->f[F_CUR_HI] = sel(L, moves, hi_n, sub(L, hi1, w->f[F_K_COUNT]));
}

/* sched_cursor_begin, then the first sched_cursor_next. */
static void cursor_first(Low *L, const Sched *s, IrValue *worker, Work *w) {
  const SchedStreamK *p = &s->plan.sk;
  IrValue *u = sel(L, cmp(L, "ult", worker, c32(L, p->grid)), worker, c32(L, p->units)), *lo, *hi;
  cursor_load(L, p, u, &lo, &hi);
  cursor_next(L, s, u, lo, hi, w);
}

/* }====================================================================== */

/* {======================================================================
** Planning the params ops (phase 0: no IR changes)
** ======================================================================= */

static const char *const operand_names[] = {"tiles_m", "tiles_n", "tiles_l", "tiles_k", "workers"};

static int params_kind(const IrOp *op) {
  switch (op->kind) {
  case OP_CUTLASS_SCHED_CREATE_DP_PARAMS: return K_DP;
  case OP_CUTLASS_SCHED_CREATE_SP_PARAMS: return K_SP;
  case OP_CUTLASS_SCHED_CREATE_SK_PARAMS: return K_SK;
  default: return K_SM100;
  }
}

/* The attributes of a params op (verified: in range) into a configuration. */
static void params_attrs(IrOp *op, Sched *s, SchedConfig *c) {
  IrAttrs_CUTLASS_SCHED_CREATE_DP_PARAMS a = ir_attrs_CUTLASS_SCHED_CREATE_DP_PARAMS(op);
  c->order = s->order = (SchedOrder)a.raster_order;
  c->decomp = (SchedDecomp)a.decomposition;
  c->reduction = (SchedReduction)a.reduction;
  c->swizzle = s->swizzle = (uint32_t)a.swizzle;
  c->tiles_per_round = s->tiles_per_round = (uint32_t)a.tiles_per_round;
  c->splits = (uint32_t)a.splits;
  c->min_k = (uint32_t)a.min_k;
  c->acc_tile_bytes = s->acc_bytes = (uint64_t)a.accumulator_tile_bytes;
}

/* The cluster shape: the attribute, else the kernel's; the schedulers tile M and N only. */
static bool params_cluster(IrOp *op, Sched *s, SchedConfig *c) {
  int64_t cl[3];
  memcpy(cl, kernel_spec_of(op).cluster, sizeof cl);
  IrAttrList shape = ir_attrs_CUTLASS_SCHED_CREATE_DP_PARAMS(op).cluster_shape;
  for (uint32_t i = 0; i < shape.n && i < 3; i++)
    cl[i] = ir_attr_list_int(shape, i);
  if (cl[2] != 1 || cl[0] < 1 || cl[1] < 1 || cl[0] > 64 || cl[1] > 64) {
    ir_op_error(op,
                "cluster shape [%lld, %lld, %lld]: the schedulers need [m, n, 1] with m, n in "
                "[1, 64]",
                (long long)cl[0], (long long)cl[1], (long long)cl[2]);
    return false;
  }
  c->cluster_m = s->cluster_m = (uint32_t)cl[0];
  c->cluster_n = s->cluster_n = (uint32_t)cl[1];
  return true;
}

/* Constant operands into the configuration; false (no diagnostic) when one is not constant. */
static bool params_constants(IrOp *op, SchedConfig *c, int *bad) {
  uint32_t v[5] = {1, 1, 1, 1, 1}, n = op->noperands < 5 ? op->noperands : 5;
  for (uint32_t i = 0; i < n; i++) {
    int64_t x;
    if (!dia_const_int(op->operands[i].value, &x)) {
      *bad = (int)i;
      return false;
    }
    v[i] = (uint32_t)x; /* an i32 constant: its 32 bits, read unsigned */
  }
  c->tiles_m = v[0], c->tiles_n = v[1], c->tiles_l = v[2], c->tiles_k = v[3];
  if (n > 4) c->workers = v[4];
  return true;
}

/* Plan one params op: the reference's plan for constants, else (data-parallel
** and static persistent only) a raster computed at run time. */
static Sched *plan_params(Low *L, IrOp *op) {
  Sched *s = owned_alloc(L, sizeof *s);
  s->op = op;
  int k = params_kind(op);
  if (k == K_SM100 && cut_target_sm(op) < 100) {
    ir_op_error(op, "the SM100 StreamK scheduler needs an sm_100 or later target, got sm_%d",
                cut_target_sm(op));
    return NULL;
  }
  s->kind = k == K_SM100 ? K_SK : k;
  SchedConfig c;
  sched_config_init(&c, s->kind == K_DP   ? SCHED_DATA_PARALLEL
                        : s->kind == K_SP ? SCHED_STATIC_PERSISTENT
                                          : SCHED_STREAMK);
  params_attrs(op, s, &c);
  if (!params_cluster(op, s, &c)) return NULL;
  int bad = -1;
  s->planned = params_constants(op, &c, &bad);
  if (!s->planned) {
    if (s->kind != K_SK) return s;
    ir_op_error(op,
                "needs compile-time constant tiles_m, tiles_n, tiles_l, tiles_k and workers: a "
                "StreamK plan (decomposition, units, workspace layout) is made on the host; "
                "operand #%d (%s) is not a constant",
                bad, operand_names[bad]);
    return NULL;
  }
  const char *err = NULL;
  if (!sched_plan(&s->plan, &c, &err)) {
    ir_op_error(op, "cannot be planned: %s", err ? err : "bad configuration");
    return NULL;
  }
  const SchedStreamK *p = &s->plan.sk;
  if (s->kind == K_SK && p->sk_units > 0 && p->k_per_small == 0) {
    ir_op_error(op, "internal: a StreamK unit without k tiles");
    return NULL;
  }
  if (s->kind == K_SK && (uint64_t)p->sk_tiles * c.cluster_m * c.cluster_n > U32MAX / 2) {
    ir_op_error(op, "cannot be planned: too many StreamK barrier counters for 32-bit indices");
    return NULL;
  }
  return s;
}

/* The runtime raster of an unplanned params op (sched_raster_init and the
** persistent grid), built in front of it. */
static void build_runtime_raster(Low *L, Sched *s) {
  IrOp *op = s->op;
  ir_builder_before(&L->rw.b, op);
  L->rw.b.loc = op->loc;
  IrValue *gm = ceil_div(L, op->operands[0].value, c32(L, s->cluster_m));
  IrValue *gn = ceil_div(L, op->operands[1].value, c32(L, s->cluster_n));
  bool along_m = s->order == SCHED_ALONG_M;
  s->fast = along_m ? gm : gn;
  s->slow = along_m ? gn : gm;
  s->swz = minu(L, c32(L, s->swizzle), s->slow);
  s->per_l = mul(L, gm, gn);
  s->total = mul(L, s->per_l, op->operands[2].value);
  s->grid = s->kind == K_DP ? s->total : minu(L, op->operands[4].value, s->total);
}

/* }====================================================================== */

/* {======================================================================
** Checks before any change (phase 0)
** ======================================================================= */

/* May `user` use a value of scheduler type dty? */
static bool allowed_user(const IrOp *user, int dty) {
  if (dty != IR_DTY_CUTLASS_WORK_TILE_INFO) return is_sched_op(user);
  if (is_sched_op(user)) return true;
  switch (user->kind) {
  case OP_SCF_FOR:
  case OP_SCF_WHILE:
  case OP_SCF_YIELD:
  case OP_SCF_CONDITION:
  case OP_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR: return true;
  default: return false;
  }
}

static int sched_dty(const IrType *t) {
  if (is_sched_type(t, IR_DTY_CUTLASS_SCHED_PARAMS)) return IR_DTY_CUTLASS_SCHED_PARAMS;
  if (is_sched_type(t, IR_DTY_CUTLASS_TILE_SCHEDULER)) return IR_DTY_CUTLASS_TILE_SCHEDULER;
  if (is_wti(t)) return IR_DTY_CUTLASS_WORK_TILE_INFO;
  return -1;
}

/* Every user of a scheduler value is one the lowering can rewrite. */
static bool check_users(IrValue *v, IrOp *where) {
  int dty = sched_dty(v->type);
  if (dty < 0) return true;
  for (IrUse *u = v->uses; u; u = u->next) {
    if (allowed_user(u->owner, dty)) continue;
    IrDiag *d = ir_op_error(u->owner,
                            "uses a %s value, which lower-tile-scheduler cannot rewrite "
                            "here (%s)",
                            ir_dialect_type_name(dty),
                            dty == IR_DTY_CUTLASS_WORK_TILE_INFO
                                ? "work tiles flow only through scf loops, branches and "
                                  "scheduler ops"
                                : "scheduler params and handles are used directly by scheduler "
                                  "ops");
    if (where) ir_op_note(d, where, "defined here");
    return false;
  }
  return true;
}

/* Block arguments of scheduler type: work tiles in scf and switch regions only. */
static bool check_block_args(IrOp *op) {
  for (uint32_t r = 0; r < op->nregions; r++)
    for (IrBlock *b = op->regions[r].first; b; b = b->next)
      for (uint32_t i = 0; i < b->nargs; i++) {
        int dty = sched_dty(b->args[i]->type);
        if (dty < 0) continue;
        bool ok = dty == IR_DTY_CUTLASS_WORK_TILE_INFO &&
                  (op->kind == OP_SCF_FOR || op->kind == OP_SCF_WHILE ||
                   op->kind == OP_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR);
        if (!ok) {
          ir_op_error(op,
                      "has a block argument of type !%s that lower-tile-scheduler cannot "
                      "rewrite",
                      ir_dialect_type_name(dty));
          return false;
        }
        if (!check_users(b->args[i], op)) return false;
      }
  return true;
}

/* Threads that run a fixup: its executor set (whole warps), else the block. */
static int64_t fixup_threads(const IrOp *op) {
  KernelExec x = kernel_exec_of(op);
  if (x.scope && x.scope->kind != OP_TILE_KERNEL) return SM90_WARP_SIZE * (int64_t)kernel_popcount(x.mask);
  KernelSpec ks = kernel_spec_of(op);
  return ks.ok ? ks.threads : 0;
}

/* A fixup's accumulator fits one partial slot of its params, in elements the
** block-striped ops move. */
static bool check_fixup(IrOp *op, const Sched *s) {
  const IrType *acc = op->operands[2].value->type, *e = acc->elem;
  if (!e || (e->kind != IR_TY_INT && e->kind != IR_TY_FLOAT) || e->width < 16) {
    char *ts = ir_type_to_string(acc);
    ir_op_error(op,
                "the accumulator %s must hold integers or floats of at least 16 bits (its "
                "partial tiles move with block-striped ops)",
                ts);
    ir_free(ts);
    return false;
  }
  int64_t threads = fixup_threads(op);
  uint64_t need = (uint64_t)ir_type_num_elements(acc) * (uint64_t)dia_type_bytes(e) *
                  (uint64_t)(threads > 0 ? threads : 1);
  const SchedStreamK *p = &s->plan.sk;
  bool partials = p->sk_tiles > 0 && p->max_splits > 1;
  if (partials && s->acc_bytes < need) {
    IrDiag *d = ir_op_error(op,
                            "needs accumulator_tile_bytes >= %llu on its params (%lld elements of "
                            "%lld bytes per thread, striped over %lld threads), got %llu",
                            (unsigned long long)need, (long long)ir_type_num_elements(acc),
                            (long long)dia_type_bytes(e), (long long)threads,
                            (unsigned long long)s->acc_bytes);
    ir_op_note(d, s->op, "params defined here");
    return false;
  }
  return true;
}

/* get_workspace_sizes: attributes, when given (not all 0), agree with the plan. */
static bool check_workspace(IrOp *op, const Sched *s) {
  IrAttrs_CUTLASS_SCHED_WORKSPACE_SIZES a = ir_attrs_CUTLASS_SCHED_WORKSPACE_SIZES(op);
  int64_t want[3] = {0, 0, 0}, got[3] = {a.total_bytes, a.reduction_bytes, a.barrier_bytes};
  static const char *const names[] = {"total_bytes", "reduction_bytes", "barrier_bytes"};
  if (s->planned) {
    want[0] = (int64_t)s->plan.ws.total;
    want[1] = (int64_t)s->plan.ws.reduction;
    want[2] = (int64_t)s->plan.ws.barriers;
  }
  bool given = false;
  for (int i = 0; i < 3; i++)
    given = given || got[i] != 0;
  for (int i = 0; given && i < 3; i++)
    if (got[i] != want[i]) {
      IrDiag *d = ir_op_error(op, "%s = %lld differs from the plan's %lld", names[i],
                              (long long)got[i], (long long)want[i]);
      ir_op_note(d, s->op, "params defined here");
      return false;
    }
  return true;
}

typedef struct Phase0 {
  Low *L;
  bool ok;
} Phase0;

static Sched *sched_of(Low *L, IrValue *v) { return ptrmap_get(&L->scheds, v); }
static Handle *handle_of(Low *L, IrValue *v) { return ptrmap_get(&L->handles, v); }

/* The params behind operand 0 of op (a params value or a handle). */
static Sched *sched_behind(Low *L, IrOp *op) {
  IrValue *v = op->operands[0].value;
  Handle *h = handle_of(L, v);
  Sched *s = h ? h->s : sched_of(L, v);
  if (!s)
    ir_op_error(op, "operand #0 does not come from a scheduler %s op",
                is_sched_type(v->type, IR_DTY_CUTLASS_SCHED_PARAMS) ? "create_*_params" : "create");
  return s;
}

/* Scheduler values come from their own ops (work tiles also from scf results). */
static bool check_producer(IrOp *op) {
  for (uint32_t i = 0; i < op->nresults; i++) {
    int dty = sched_dty(op->results[i].type);
    if (dty < 0) continue;
    bool ok = dty == IR_DTY_CUTLASS_SCHED_PARAMS ? is_params_op(op)
              : dty == IR_DTY_CUTLASS_TILE_SCHEDULER
                  ? op->kind == OP_CUTLASS_SCHED_CREATE ||
                        (op->kind == OP_UNREALIZED_CAST && op->noperands == 0) /* detached */
                  : is_sched_op(op) || op->kind == OP_SCF_FOR || op->kind == OP_SCF_WHILE ||
                        op->kind == OP_SCF_IF;
    if (!ok) {
      ir_op_error(op,
                  "makes a !%s value, which only the scheduler's own ops make for "
                  "lower-tile-scheduler",
                  ir_dialect_type_name(dty));
      return false;
    }
  }
  return true;
}

/* Plan params, record handles, check users and the ops that read a plan. */
static bool check_op(IrOp *op, void *ud) {
  Phase0 *p0 = ud;
  Low *L = p0->L;
  bool ok = check_block_args(op) && check_producer(op);
  for (uint32_t i = 0; ok && i < op->nresults; i++)
    ok = check_users(&op->results[i], op);
  if (ok && is_params_op(op)) {
    Sched *s = plan_params(L, op);
    ok = s != NULL;
    if (ok) ptrmap_set(&L->scheds, &op->results[0], s);
  } else if (ok && op->kind == OP_CUTLASS_SCHED_CREATE) {
    Handle *h = owned_alloc(L, sizeof *h);
    h->s = sched_behind(L, op);
    h->pull = ir_attrs_CUTLASS_SCHED_CREATE(op).model == SCHED_MODEL_PULL;
    h->response = op->noperands > 1 ? op->operands[1].value : NULL;
    ok = h->s != NULL;
    if (ok && h->pull && (!h->response || !ir_type_is_int_width(h->response->type->elem, 32))) {
      ir_op_error(op, "the pull model reads 32-bit WorkIDs: its response buffer must be "
                      "ptr<i32, shared>");
      ok = false;
    }
    if (ok) ptrmap_set(&L->handles, &op->results[0], h);
  } else if (ok && (is_work_create_op(op) || op->kind == OP_CUTLASS_SCHED_ADVANCE)) {
    ok = sched_behind(L, op) != NULL;
  } else if (ok && op->kind == OP_CUTLASS_SCHED_WORKSPACE_SIZES) {
    Sched *s = sched_behind(L, op);
    ok = s && check_workspace(op, s);
  } else if (ok && op->kind == OP_CUTLASS_SCHED_FIXUP) {
    Sched *s = sched_behind(L, op);
    if (s && s->kind != K_SK) ir_op_error(op, "fixup is only for StreamK schedulers");
    ok = s && s->kind == K_SK && check_fixup(op, s);
  }
  if (!ok) p0->ok = false;
  return ok;
}

/* }====================================================================== */

/* {======================================================================
** The 1:N conversion of work tiles through control flow (phase 1)
** ======================================================================= */

/* fields -> work tile, where the builder is. */
static IrValue *pack(Low *L, IrValue *const *fields, uint32_t n, const IrType *t) {
  IrOp *c = ir_build(&L->rw.b, OP_UNREALIZED_CAST, n, fields, 1, &t, 0);
  ptrmap_set(&L->packs, c, c);
  ir_opvec_push(&L->packlist, c);
  return &c->results[0];
}

/* work tile -> its carried fields, where the builder is. */
static IrOp *unpack(Low *L, IrValue *v) {
  uint32_t n;
  const uint8_t *fs = carried(v->type, &n);
  const IrType *types[NFIELDS];
  for (uint32_t i = 0; i < n; i++)
    types[i] = field_type(L, fs[i]);
  IrOp *c = ir_build(&L->rw.b, OP_UNREALIZED_CAST, 1, &v, n, types, 0);
  ir_opvec_push(&L->unpacks, c);
  return c;
}

typedef struct Vals {
  IrValue **v;
  const IrType **t;
  uint32_t n, cap;
} Vals;

static void vals_push(Vals *a, IrValue *v, const IrType *t) {
  if (a->n == a->cap) {
    a->cap = a->cap ? 2 * a->cap : 16;
    a->v = ir_realloc(a->v, a->cap * sizeof *a->v);
    a->t = ir_realloc(a->t, a->cap * sizeof *a->t);
  }
  a->v[a->n] = v;
  a->t[a->n++] = t;
}

static void vals_free(Vals *a) {
  ir_free(a->v);
  ir_free(a->t);
}

/* The types of t expanded: a work tile type becomes its fields'. */
static void expand_type(Low *L, Vals *out, const IrType *t) {
  if (!is_wti(t)) {
    vals_push(out, NULL, t);
    return;
  }
  uint32_t n;
  const uint8_t *fs = carried(t, &n);
  for (uint32_t i = 0; i < n; i++)
    vals_push(out, NULL, field_type(L, fs[i]));
}

/* Operands of op expanded, unpacking work tiles just before op. */
static void expand_operands(Low *L, IrOp *op, Vals *out) {
  ir_builder_before(&L->rw.b, op);
  L->rw.b.loc = op->loc;
  for (uint32_t i = 0; i < op->noperands; i++) {
    IrValue *v = op->operands[i].value;
    if (!is_wti(v->type)) {
      vals_push(out, v, v->type);
      continue;
    }
    IrOp *u = unpack(L, v);
    for (uint32_t j = 0; j < u->nresults; j++)
      vals_push(out, &u->results[j], u->results[j].type);
  }
}

/* Values old[0..n) are replaced by new ones (a work tile by a pack of its
** fields, built where the builder is); returns how many new values were used. */
static uint32_t rebind(Low *L, IrValue *old, IrValue **nv) {
  if (!is_wti(old->type)) {
    ir_value_replace_all_uses(old, nv[0]);
    return 1;
  }
  uint32_t n;
  carried(old->type, &n);
  ir_value_replace_all_uses(old, pack(L, nv, n, old->type));
  return n;
}

/* switch_by_executor's operand_segments after expansion. */
static void fix_segments(Low *L, IrOp *old, IrOp *op) {
  IrAttrList segs = ir_attrs_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR(old).operand_segments;
  int64_t seg[CUT_MAX_CASES];
  uint32_t at = 0, n = segs.n < CUT_MAX_CASES ? segs.n : CUT_MAX_CASES;
  for (uint32_t i = 0; i < n; i++) {
    int64_t len = ir_attr_list_int(segs, i), w = 0;
    for (int64_t j = 0; j < len && at < old->noperands; j++, at++) {
      uint32_t k = 1;
      if (is_wti(old->operands[at].value->type)) carried(old->operands[at].value->type, &k);
      w += k;
    }
    seg[i] = w;
  }
  ir_op_set_attr(op, "operand_segments", ir_attr_int_array(L->rw.ctx, n, seg));
}

/* Rebuild a region op whose operands, results or block arguments include work
** tiles: same kind and attributes, fields instead of work tiles, its blocks
** moved into the new op. */
static void expand_region_op(Low *L, IrOp *op) {
  Vals opds = {0}, res = {0};
  expand_operands(L, op, &opds);
  for (uint32_t i = 0; i < op->nresults; i++)
    expand_type(L, &res, op->results[i].type);
  IrOp *n = ir_op_create(L->rw.ctx, op->kind, op->loc, opds.n, opds.v, res.n, res.t, op->nregions);
  for (uint32_t i = 0; i < op->nattrs; i++)
    ir_op_set_attr(n, op->attrs[i].name, op->attrs[i].attr);
  if (op->kind == OP_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR) fix_segments(L, op, n);
  ir_op_insert_before(op, n);
  for (uint32_t r = 0; r < op->nregions; r++)
    for (IrBlock *b = op->regions[r].first; b; b = b->next) {
      Vals at = {0};
      IrBlock *nb = ir_block_create(L->rw.ctx);
      ir_region_append_block(&n->regions[r], nb);
      for (uint32_t i = 0; i < b->nargs; i++)
        expand_type(L, &at, b->args[i]->type);
      IrValue **args = ir_calloc(at.n + 1, sizeof *args);
      for (uint32_t i = 0; i < at.n; i++)
        args[i] = ir_block_add_arg(L->rw.ctx, nb, at.t[i]);
      ir_builder_at_end(&L->rw.b, nb);
      for (uint32_t i = 0, k = 0; i < b->nargs; i++)
        k += rebind(L, b->args[i], args + k);
      while (b->first) {
        IrOp *o = b->first;
        ir_op_unlink(o);
        ir_block_append(nb, o);
      }
      ir_free(args);
      vals_free(&at);
    }
  ir_builder_after(&L->rw.b, n);
  for (uint32_t i = 0, k = 0; i < op->nresults; i++) {
    IrValue *nv[NFIELDS];
    uint32_t want = 1;
    if (is_wti(op->results[i].type)) carried(op->results[i].type, &want);
    for (uint32_t j = 0; j < want; j++)
      nv[j] = &n->results[k + j];
    k += rebind(L, &op->results[i], nv);
  }
  ir_op_erase(op);
  vals_free(&opds);
  vals_free(&res);
}

/* A terminator yielding work tiles yields their fields. */
static void expand_terminator(Low *L, IrOp *op) {
  Vals opds = {0};
  expand_operands(L, op, &opds);
  ir_op_set_operands(op, opds.n, opds.v);
  vals_free(&opds);
}

static bool has_wti(const IrOp *op) {
  for (uint32_t i = 0; i < op->noperands; i++)
    if (is_wti(op->operands[i].value->type)) return true;
  for (uint32_t i = 0; i < op->nresults; i++)
    if (is_wti(op->results[i].type)) return true;
  for (uint32_t r = 0; r < op->nregions; r++)
    for (IrBlock *b = op->regions[r].first; b; b = b->next)
      for (uint32_t i = 0; i < b->nargs; i++)
        if (is_wti(b->args[i]->type)) return true;
  return false;
}

typedef struct Collect {
  IrOpVec regions, terms, sched;
} Collect;

static bool collect_op(IrOp *op, void *ud) {
  Collect *c = ud;
  if (is_sched_op(op) && !is_mods_op(op)) {
    ir_opvec_push(&c->sched, op);
  } else if (has_wti(op)) {
    if (ir_op_info(op->kind)->traits & T_TERMINATOR)
      ir_opvec_push(&c->terms, op);
    else if (op->nregions)
      ir_opvec_push(&c->regions, op);
  }
  return true;
}

/* }====================================================================== */

/* {======================================================================
** Lowering the scheduler ops (phase 2)
** ======================================================================= */

/* The fields of a work tile operand: the operands of the pack that stands for it. */
static bool fields_of(Low *L, IrOp *user, IrValue *v, Work *w) {
  memset(w, 0, sizeof *w);
  IrOp *p = v->def;
  if (!p || !ptrmap_get(&L->packs, p)) {
    ir_op_error(user, "its work tile does not come from a scheduler op");
    return false;
  }
  uint32_t n;
  const uint8_t *fs = carried(v->type, &n);
  for (uint32_t i = 0; i < n && i < p->noperands; i++)
    w->f[fs[i]] = p->operands[i].value;
  return true;
}

/* Replace the work tile result of op by a pack of w's carried fields. */
static void bind_work(Low *L, IrOp *op, Work *w) {
  IrValue *r = &op->results[0], *nv[NFIELDS];
  uint32_t n;
  const uint8_t *fs = carried(r->type, &n);
  for (uint32_t i = 0; i < n; i++)
    nv[i] = w->f[fs[i]];
  ir_value_replace_all_uses(r, pack(L, nv, n, r->type));
}

static void lower_work_create(Low *L, IrOp *op) {
  Sched *s = sched_of(L, op->operands[0].value);
  Work w;
  memset(&w, 0, sizeof w);
  if (s->kind == K_SK)
    cursor_first(L, s, op->operands[1].value, &w);
  else
    tile_first(L, s, op->operands[1].value, &w);
  bind_work(L, op, &w);
}

static bool lower_advance(Low *L, IrOp *op) {
  Handle *h = handle_of(L, op->operands[0].value);
  Work t, w;
  if (!fields_of(L, op, op->operands[1].value, &t)) return false;
  memset(&w, 0, sizeof w);
  if (h->s->kind == K_SK)
    cursor_next(L, h->s, t.f[F_CUR_UNIT], t.f[F_CUR_LO], t.f[F_CUR_HI], &w);
  else
    tile_advance(L, h, &t, &w);
  bind_work(L, op, &w);
  return true;
}

/* A field a work tile does not carry: whole tiles start at k 0 as the only
** split, and only persistent tiles clock the pipeline. */
static IrValue *derived_field(Low *L, int f) {
  switch (f) {
  case F_EXPECTED: return c32(L, 1);
  case F_SEPARATE:
  case F_INC_PIPE: return c1(L, false);
  case F_FINAL: return c1(L, true);
  default: return c32(L, 0);
  }
}

static bool lower_accessor(Low *L, IrOp *op) {
  static const int8_t field_of[] = {F_M,        F_N,       F_L,       F_LINEAR,   F_TILE_IDX,
                                    F_K_START,  F_K_COUNT, F_SPLIT,   F_EXPECTED, F_VALID,
                                    F_SEPARATE, F_FINAL,   F_INC_PIPE};
  Work w;
  if (!fields_of(L, op, op->operands[0].value, &w)) return false;
  int f = field_of[op->kind - OP_CUTLASS_WTI_M];
  ir_value_replace_all_uses(&op->results[0], w.f[f] ? w.f[f] : derived_field(L, f));
  return true;
}

/* get_workspace_sizes: the plan's sizes (0 for data-parallel and persistent). */
static void lower_workspace(Low *L, IrOp *op) {
  Sched *s = sched_of(L, op->operands[0].value);
  const SchedWorkspace *ws = &s->plan.ws;
  bool p = s->planned;
  ir_value_replace_all_uses(&op->results[0], c64(L, p ? ws->total : 0));
  ir_value_replace_all_uses(&op->results[1], c64(L, p ? ws->reduction : 0));
  ir_value_replace_all_uses(&op->results[2], c64(L, p ? ws->barriers : 0));
}

/* }====================================================================== */
/* {======================================================================
** The StreamK fixup (sched_fixup_role, at run time)
** ======================================================================= */

/* What the fixup of one piece builds on: the accumulator and the workspace. */
typedef struct Fix {
  const SchedStreamK *p;
  IrValue *acc, *ws8, *counters, *cta_tile; /* cta_tile = tile * ctas + rank */
  const IrType *elem, *elem_ptr;
  int64_t threads;
  uint64_t acc_bytes;
} Fix;

/* An scf.if on cond (one i1 result when rt is set); its blocks in *t and *e. */
static IrOp *build_if(Low *L, IrValue *cond, const IrType *rt, IrBlock **t, IrBlock **e) {
  IrOp *op = ir_build(&L->rw.b, OP_SCF_IF, 1, &cond, rt ? 1 : 0, rt ? &rt : NULL, 2);
  *t = ir_region_ensure_block(L->rw.ctx, &op->regions[0]);
  *e = ir_region_ensure_block(L->rw.ctx, &op->regions[1]);
  return op;
}

/* Close block b with scf.yield of v (or nothing); the builder moves to b's end. */
static void yield_in(Low *L, IrBlock *b, IrValue *v) {
  ir_builder_at_end(&L->rw.b, b);
  ir_build(&L->rw.b, OP_SCF_YIELD, v ? 1 : 0, v ? &v : NULL, 0, NULL, 0);
}

static IrValue *ptr_cast(Low *L, IrValue *p, const IrType *t) {
  if (p->type == t) return p;
  return &ir_build(&L->rw.b, OP_TILE_PTR_CAST, 1, &p, 1, &t, 0)->results[0];
}

static IrValue *ptr_add(Low *L, IrValue *p, IrValue *off) {
  IrValue *opds[2] = {p, off};
  return &ir_build(&L->rw.b, OP_TILE_PTR_ADD, 2, opds, 1, &p->type, 0)->results[0];
}

/* sched_slot_offset: ((tile * ctas + rank) * (max_splits - 1) + slot) * acc_tile_bytes. */
static IrValue *slot_ptr(Low *L, const Fix *x, IrValue *slot) {
  IrValue *cta = zext64(L, x->cta_tile), *s = zext64(L, slot);
  IrValue *off = mul(L, add(L, mul(L, cta, c64(L, x->p->max_splits - 1)), s), c64(L, x->acc_bytes));
  return ptr_cast(L, ptr_add(L, x->ws8, off), x->elem_ptr);
}

/* cutlass.block_striped.<k> of the accumulator to or from a slot. */
static void striped(Low *L, const Fix *x, IrOpKind k, IrValue *slot) {
  IrValue *opds[2] = {slot_ptr(L, x, slot), x->acc};
  IrOp *op = ir_build(&L->rw.b, k, 2, opds, 0, NULL, 0);
  rw_set_int(&L->rw, op, "threads", x->threads);
  ir_op_set_attr(op, "element_type", ir_attr_type(L->rw.ctx, x->elem));
}

/* cutlass.generic_barrier.<k> on the counter of this CTA tile. */
static void barrier(Low *L, const Fix *x, IrOpKind k, IrValue *value) {
  IrValue *opds[3] = {x->counters, x->cta_tile, value};
  ir_build(&L->rw.b, k, value ? 3 : 2, opds, 0, NULL, 0);
}

/* Publish: store the accumulator to slot s, then add 1 to the counter (release). */
static void publish(Low *L, const Fix *x, IrValue *s) {
  striped(L, x, OP_CUTLASS_BLOCK_STRIPED_STORE, s);
  barrier(L, x, OP_CUTLASS_GENERIC_BARRIER_ARRIVE_INC, NULL);
}

/*
** Deterministic (turnstile): split s > 0 waits for counter == s (the final
** split resets it in the same op: every other piece has arrived and none
** touches it again in this launch) and adds slot s - 1, the sum of splits
** 0 .. s-1; a non-final split publishes the sum through s in slot s.
*/
static void fixup_deterministic(Low *L, const Fix *x, IrValue *s, IrValue *epi) {
  IrBlock *t, *e, *t2, *e2;
  IrOp *waits = build_if(L, cmp(L, "ne", s, c32(L, 0)), NULL, &t, &e);
  yield_in(L, e, NULL);
  yield_in(L, t, NULL);
  ir_builder_before(&L->rw.b, t->last);
  build_if(L, epi, NULL, &t2, &e2);
  yield_in(L, t2, NULL);
  ir_builder_before(&L->rw.b, t2->last);
  barrier(L, x, OP_CUTLASS_GENERIC_BARRIER_WAIT_EQ_RESET, s);
  yield_in(L, e2, NULL);
  ir_builder_before(&L->rw.b, e2->last);
  barrier(L, x, OP_CUTLASS_GENERIC_BARRIER_WAIT_EQ, s);
  ir_builder_before(&L->rw.b, t->last);
  striped(L, x, OP_CUTLASS_BLOCK_STRIPED_LOAD_ADD, sub(L, s, c32(L, 1)));
  ir_builder_after(&L->rw.b, waits);
  build_if(L, cmp(L, "ne", epi, c1(L, true)), NULL, &t, &e);
  yield_in(L, e, NULL);
  yield_in(L, t, NULL);
  ir_builder_before(&L->rw.b, t->last);
  publish(L, x, s);
}

/* Nondeterministic: a non-final split publishes its own partial in slot s;
** the final split waits for all e - 1 of them (and resets), then adds them. */
static void fixup_nondeterministic(Low *L, const Fix *x, IrValue *s, IrValue *last, IrValue *epi) {
  IrBlock *t, *e;
  build_if(L, epi, NULL, &t, &e);
  yield_in(L, e, NULL);
  yield_in(L, t, NULL);
  ir_builder_before(&L->rw.b, e->last);
  publish(L, x, s);
  ir_builder_before(&L->rw.b, t->last);
  barrier(L, x, OP_CUTLASS_GENERIC_BARRIER_WAIT_EQ_RESET, last);
  IrValue *bounds[3] = {c32(L, 0), last, c32(L, 1)};
  IrOp *loop = ir_build(&L->rw.b, OP_SCF_FOR, 3, bounds, 0, NULL, 1);
  IrBlock *body = ir_region_ensure_block(L->rw.ctx, &loop->regions[0]);
  IrValue *j = ir_block_add_arg(L->rw.ctx, body, L->rw.i32);
  yield_in(L, body, NULL);
  ir_builder_before(&L->rw.b, body->last);
  striped(L, x, OP_CUTLASS_BLOCK_STRIPED_LOAD_ADD, j);
}

/* The workspace pointers and this CTA's counter index, in front of the fixup. */
static void fixup_setup(Low *L, IrOp *op, const Sched *s, const Work *w, Fix *x) {
  const SchedStreamK *p = &s->plan.sk;
  uint32_t ctas = s->cluster_m * s->cluster_n;
  x->p = p;
  x->acc = op->operands[2].value;
  x->elem = x->acc->type->elem;
  x->elem_ptr = ir_type_ptr(L->rw.ctx, x->elem, IR_MS_GLOBAL);
  x->threads = fixup_threads(op);
  x->acc_bytes = s->acc_bytes;
  x->ws8 = ptr_cast(L, s->op->operands[5].value,
                    ir_type_ptr(L->rw.ctx, ir_type_int(L->rw.ctx, 8), IR_MS_GLOBAL));
  x->counters = ptr_cast(L, ptr_add(L, x->ws8, c64(L, s->plan.ws.barrier_offset)),
                         ir_type_ptr(L->rw.ctx, L->rw.i32, IR_MS_GLOBAL));
  IrValue *rank = ctas > 1
                      ? &ir_build(&L->rw.b, OP_TILE_CLUSTER_RANK, 0, NULL, 1, &L->rw.i32, 0)->results[0]
                      : c32(L, 0);
  x->cta_tile = add(L, mul(L, w->f[F_TILE_IDX], c32(L, ctas)), rank);
}

/* fixup -> i1: true when this CTA runs the epilogue (a whole tile, or the
** final split after the reduction). */
static bool lower_fixup(Low *L, IrOp *op) {
  Handle *h = handle_of(L, op->operands[0].value);
  const Sched *s = h->s;
  Work w;
  if (!fields_of(L, op, op->operands[1].value, &w)) return false;
  if (s->plan.sk.sk_tiles == 0 || s->plan.sk.max_splits <= 1) {
    ir_value_replace_all_uses(&op->results[0], c1(L, true)); /* no piece is ever partial */
    return true;
  }
  Fix x;
  fixup_setup(L, op, s, &w, &x);
  IrBlock *t, *e;
  IrOp *outer = build_if(L, w.f[F_SEPARATE], L->rw.i1, &t, &e);
  ir_builder_at_end(&L->rw.b, e);
  yield_in(L, e, c1(L, true));
  ir_builder_at_end(&L->rw.b, t);
  IrValue *sp = w.f[F_SPLIT], *last = sub(L, w.f[F_EXPECTED], c32(L, 1));
  IrValue *epi = cmp(L, "eq", sp, last);
  if (s->plan.sk.reduction == SCHED_REDUCE_DETERMINISTIC)
    fixup_deterministic(L, &x, sp, epi);
  else
    fixup_nondeterministic(L, &x, sp, last, epi);
  yield_in(L, t, epi);
  ir_value_replace_all_uses(&op->results[0], &outer->results[0]);
  return true;
}

/* }====================================================================== */

/* {======================================================================
** Driver
** ======================================================================= */

/* Lower one scheduler op in front of it; MODS probes are left alone. */
static bool lower_op(Low *L, IrOp *op) {
  ir_builder_before(&L->rw.b, op);
  L->rw.b.loc = op->loc;
  if (is_params_op(op)) {
    Sched *s = sched_of(L, &op->results[0]);
    if (!s->planned) build_runtime_raster(L, s);
    return true;
  }
  if (is_work_create_op(op)) return lower_work_create(L, op), true;
  if (is_accessor(op)) return lower_accessor(L, op);
  switch (op->kind) {
  case OP_CUTLASS_SCHED_ADVANCE: return lower_advance(L, op);
  case OP_CUTLASS_SCHED_WORKSPACE_SIZES: return lower_workspace(L, op), true;
  case OP_CUTLASS_SCHED_FIXUP: return lower_fixup(L, op);
  default: return true; /* create: its handle is read through the map */
  }
}

/* Unpacks of packs become the pack's operands; then dead casts go. */
static void fold_casts(Low *L) {
  for (size_t i = 0; i < L->unpacks.n; i++) {
    IrOp *u = L->unpacks.v[i], *p = u->operands[0].value->def;
    if (!p || !ptrmap_get(&L->packs, p)) continue;
    for (uint32_t j = 0; j < u->nresults && j < p->noperands; j++)
      ir_value_replace_all_uses(&u->results[j], p->operands[j].value);
    ir_op_erase(u);
  }
  for (size_t i = 0; i < L->packlist.n; i++) {
    IrOp *p = L->packlist.v[i];
    if (!ir_value_has_uses(&p->results[0])) ir_op_erase(p);
  }
}

/* A handle still read by MODS probes (which do not need it) becomes a
** zero-operand cast of its type, so that no scheduler op but the probes is
** left; it dies with them (pure: canonicalize removes it). */
static void detach_handle(Low *L, IrOp *op) {
  if (op->kind != OP_CUTLASS_SCHED_CREATE || !ir_value_has_uses(&op->results[0])) return;
  ir_builder_before(&L->rw.b, op);
  L->rw.b.loc = op->loc;
  IrOp *c = ir_build(&L->rw.b, OP_UNREALIZED_CAST, 0, NULL, 1, &op->results[0].type, 0);
  ir_value_replace_all_uses(&op->results[0], &c->results[0]);
}

/* Erase the lowered ops, users first. */
static void erase_lowered(Low *L, IrOpVec *ops) {
  for (size_t i = ops->n; i-- > 0;) {
    IrOp *op = ops->v[i];
    detach_handle(L, op);
    if (ir_op_results_unused(op)) ir_op_erase(op);
  }
}

static IrResult lower_kernel(Rewriter *rw, IrOp *k) {
  Low *L = (Low *)rw;
  Phase0 p0 = {L, true};
  ir_walk_pre(k, check_op, &p0);
  if (!p0.ok) return IR_FAIL;
  Collect c;
  memset(&c, 0, sizeof c);
  ir_walk_pre(k, collect_op, &c);
  IrResult r = IR_OK;
  if (c.sched.n) {
    for (size_t i = 0; i < c.regions.n; i++)
      expand_region_op(L, c.regions.v[i]);
    for (size_t i = 0; i < c.terms.n; i++)
      expand_terminator(L, c.terms.v[i]);
    for (size_t i = 0; i < c.sched.n && r == IR_OK; i++)
      if (!lower_op(L, c.sched.v[i])) r = IR_FAIL;
    if (r == IR_OK) {
      erase_lowered(L, &c.sched);
      fold_casts(L);
    }
  }
  ir_free(c.regions.v);
  ir_free(c.terms.v);
  ir_free(c.sched.v);
  ptrmap_free(&L->packs);
  L->packlist.n = L->unpacks.n = 0;
  return r;
}

IrResult pass_lower_tile_scheduler(IrOp *module, IrPassCtx *pc) {
  Low L;
  memset(&L, 0, sizeof L);
  rw_init(&L.rw, pc->ctx);
  IrResult r = rw_each_kernel(&L.rw, module, pc, lower_kernel);
  ir_opvec_free(&L.unpacks);
  ir_opvec_free(&L.packlist);
  ptrmap_free(&L.scheds);
  ptrmap_free(&L.handles);
  ptrmap_free(&L.packs);
  return r;
}

/* }====================================================================== */
