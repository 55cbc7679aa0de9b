/*
** worker.c -- the per-worker scheduler arithmetic over staged integers
** (worker.h): one implementation for the host reference, the lowering and
** the Lua surface. docs/schedulers.md describes the schedules.
*/
#include <string.h>

#include "worker.h"

/* Shorthands: every function here has its Stage in `s`. */
#define K(v) st_k((uint32_t)(v))
#define ADD(a, b) st_add(s, a, b)
#define SUB(a, b) st_sub(s, a, b)
#define MUL(a, b) st_mul(s, a, b)
#define DIV(a, b) st_div(s, a, b)
#define REM(a, b) st_rem(s, a, b)
#define MIN(a, b) st_min(s, a, b)
#define MAX(a, b) st_max(s, a, b)
#define LT(a, b) st_lt(s, a, b)
#define GE(a, b) st_ge(s, a, b)
#define EQ(a, b) st_eq(s, a, b)
#define NE(a, b) st_ne(s, a, b)
#define SEL(c, a, b) st_select(s, c, a, b)
#define B2I(c) st_b2i(s, c)

/* {======================================================================
** Raster, data-parallel, static persistent, TileLang
** ======================================================================= */

SRaster sw_raster_shape(Stage *s, SInt tiles_m, SInt tiles_n, SInt tiles_l, SInt cluster_m,
                        SInt cluster_n, SInt swizzle, SchedOrder order) {
  SRaster r;
  bool along_m = order == SCHED_ALONG_M;
  r.order = order;
  r.grid_m = st_ceil_div(s, tiles_m, cluster_m);
  r.grid_n = st_ceil_div(s, tiles_n, cluster_n);
  r.fast = along_m ? r.grid_m : r.grid_n;
  r.slow = along_m ? r.grid_n : r.grid_m;
  /* A panel wider than the slow extent decodes valid ids exactly like one
  ** of the slow extent; clamping keeps fast * swizzle within per_l. */
  r.swizzle = MIN(swizzle, r.slow);
  r.per_l = MUL(r.grid_m, r.grid_n);
  r.total = MUL(r.per_l, tiles_l);
  return r;
}

SRaster sw_raster_known(const SchedRaster *r) {
  SRaster x = {K(r->grid_m),  K(r->grid_n), K(r->fast),  K(r->slow),
               K(r->swizzle), K(r->per_l),  K(r->total), (SchedOrder)r->order};
  return x;
}

/*
** Inside an l-slice, panel p covers slow lines [p*swizzle, p*swizzle + width)
** where width is swizzle except for a narrower last panel; inside a panel the
** slow index varies fastest. Past the last panel width is 1, so nothing
** divides by zero (TileLang's clamp). Width-generic: the host may evaluate it
** in 64 bits (TileLang's coord with a swizzle as given).
*/
static void panel_unpack(Stage *s, const SRaster *r, SInt swizzle, SInt rest, SWork *w) {
  SInt panel_size = MUL(r->fast, swizzle);
  SInt panel = DIV(rest, panel_size);
  SInt base = MUL(panel, swizzle);
  SInt one = st_k_as(base, 1);
  SInt width = SEL(LT(base, r->slow), MIN(swizzle, SUB(r->slow, base)), one);
  SInt in = SUB(rest, MUL(panel, panel_size));
  SInt f = DIV(in, width), sl = ADD(base, REM(in, width));
  bool along_m = r->order == SCHED_ALONG_M;
  w->f[SF_M] = along_m ? f : sl;
  w->f[SF_N] = along_m ? sl : f;
}

/* l is the slowest index: an id past the end decodes to a batch l >= tiles_l. */
void sw_raster_unpack(Stage *s, const SRaster *r, SInt linear, SWork *w) {
  SInt l = DIV(linear, r->per_l);
  panel_unpack(s, r, r->swizzle, SUB(linear, MUL(l, r->per_l)), w);
  w->f[SF_L] = l;
}

/* TileLang's coord: one batch, the swizzle as given (not clamped). An id at
** or past the number of tiles decodes out of range (m or n past its extent),
** never to another tile. */
void sw_tl_coord(Stage *s, const SRaster *r, SInt swizzle, SInt tile_id, SWork *w) {
  panel_unpack(s, r, swizzle, tile_id, w);
  w->f[SF_L] = st_k_as(tile_id, 0);
}

void sw_work_at(Stage *s, const SRaster *r, SInt linear, SInt tile_idx, SWork *w) {
  sw_raster_unpack(s, r, linear, w);
  w->f[SF_LINEAR] = linear;
  w->f[SF_TILE_IDX] = tile_idx;
  w->f[SF_VALID] = LT(linear, r->total);
  w->f[SF_INC_PIPE] = st_bool(false);
}

void sw_persistent_advance(Stage *s, const SRaster *r, SInt grid, SInt tiles_per_round,
                           const SWork *t, const SInt *pulled, SWork *w) {
  SInt next_idx = ADD(t->f[SF_TILE_IDX], K(1));
  SInt inc = EQ(next_idx, tiles_per_round);
  SInt linear = pulled ? *pulled : ADD(t->f[SF_LINEAR], grid);
  sw_work_at(s, r, linear, SEL(inc, K(0), next_idx), w);
  w->f[SF_INC_PIPE] = inc;
}

SInt sw_persistent_grid(Stage *s, SchedKind kind, SInt workers, SInt total) {
  return kind == SCHED_DATA_PARALLEL ? total : MIN(workers, total);
}

SInt sw_block_m(Stage *s, SInt m, SInt cluster, SInt rank) { return ADD(MUL(m, cluster), rank); }

void sw_tl_next(Stage *s, SInt grid, SInt *linear, SInt *iter) {
  *iter = ADD(*iter, K(1));
  *linear = ADD(*linear, grid);
}

/* }====================================================================== */

/* {======================================================================
** StreamK: units, pieces and the cursor
** ======================================================================= */

/* Units [0, big) hold small + 1 k tiles, the rest small; a split-K unit is
** split u % splits of tile u / splits, the first k_tiles % splits splits one
** longer. */
void sw_sk_unit_range(Stage *s, const SchedStreamK *p, SInt u, SInt *lo, SInt *hi) {
  SInt small = K(p->k_per_small);
  if (p->decomp == SCHED_DECOMP_SPLIT_K) {
    SInt splits = K(p->splits), t = DIV(u, splits), sp = REM(u, splits);
    SInt r = REM(K(p->k_tiles), splits);
    *lo = ADD(ADD(MUL(t, K(p->k_tiles)), MUL(sp, small)), MIN(sp, r));
    *hi = ADD(ADD(*lo, small), B2I(LT(sp, r)));
    return;
  }
  SInt big = K(p->big_units);
  *lo = ADD(MUL(u, small), MIN(u, big));
  *hi = ADD(ADD(*lo, small), B2I(LT(u, big)));
}

/* The StreamK unit holding flat k index f: the inverse of the ranges above. */
static SInt sk_unit_of(Stage *s, const SchedStreamK *p, SInt f) {
  SInt small = K(p->k_per_small), big = K(p->big_units), small1 = ADD(small, K(1));
  SInt big_end = MUL(big, small1);
  return SEL(LT(f, big_end), DIV(f, small1), DIV(SUB(f, big), small));
}

/* A data-parallel tail tile is one unit; a split tile's units follow from its k range. */
void sw_sk_tile_units(Stage *s, const SchedStreamK *p, SInt t, SInt *first, SInt *count) {
  SInt f, n;
  if (p->decomp == SCHED_DECOMP_SPLIT_K) {
    f = MUL(t, K(p->splits));
    n = K(p->splits);
  } else {
    SInt lo = MUL(t, K(p->k_tiles));
    f = sk_unit_of(s, p, lo);
    n = ADD(SUB(sk_unit_of(s, p, ADD(lo, K(p->k_tiles - 1))), f), K(1));
  }
  SInt is_dp = GE(t, K(p->sk_tiles));
  *first = SEL(is_dp, ADD(K(p->sk_units), SUB(t, K(p->sk_tiles))), f);
  *count = SEL(is_dp, K(1), n);
}

/* Coordinates and the two flags of a piece. */
static void sk_finish(Stage *s, const SchedStreamK *p, SWork *w) {
  SRaster r = sw_raster_known(&p->raster);
  SInt k = K(p->k_tiles);
  sw_raster_unpack(s, &r, w->f[SF_TILE_IDX], w);
  w->f[SF_SEPARATE] = NE(w->f[SF_K_COUNT], k);
  w->f[SF_FINAL] = EQ(ADD(w->f[SF_K_START], w->f[SF_K_COUNT]), k);
}

/* The piece of unit u made of the part of [lo, hi) in the tile of hi - 1
** (without sk_finish). */
static void sk_piece(Stage *s, const SchedStreamK *p, SInt u, SInt lo, SInt hi, SWork *w) {
  SInt k = K(p->k_tiles);
  SInt t = DIV(SUB(hi, K(1)), k), tile_lo = MUL(t, k);
  SInt start = MAX(lo, tile_lo), first;
  w->f[SF_LINEAR] = u;
  w->f[SF_TILE_IDX] = t;
  w->f[SF_K_START] = SUB(start, tile_lo);
  w->f[SF_K_COUNT] = SUB(hi, start);
  sw_sk_tile_units(s, p, t, &first, &w->f[SF_EXPECTED]);
  w->f[SF_SPLIT] = SUB(u, first);
}

/* A data-parallel tail unit: its whole tile (without sk_finish). */
static void sk_dp_piece(Stage *s, const SchedStreamK *p, SInt u, SWork *w) {
  w->f[SF_LINEAR] = u;
  w->f[SF_TILE_IDX] = ADD(K(p->sk_tiles), SUB(u, K(p->sk_units)));
  w->f[SF_K_START] = K(0);
  w->f[SF_K_COUNT] = K(p->k_tiles);
  w->f[SF_SPLIT] = K(0);
  w->f[SF_EXPECTED] = K(1);
}

/* w = is_dp ? w : sk, field by field. */
static void merge_pieces(Stage *s, SInt is_dp, SWork *w, const SWork *sk) {
  for (int f = 0; f < SF__COUNT; f++)
    if (st_present(w->f[f]) && st_present(sk->f[f])) w->f[f] = SEL(is_dp, w->f[f], sk->f[f]);
}

/* The piece of unit u: the data-parallel tile, or (when the plan has StreamK
** units) the top piece of range [lo, hi), chosen by u >= sk_units. */
static void sk_piece_of(Stage *s, const SchedStreamK *p, SInt u, SInt lo, SInt hi, SWork *w) {
  sk_dp_piece(s, p, u, w);
  if (p->sk_units > 0) {
    SWork sk;
    memset(&sk, 0, sizeof sk);
    sk_piece(s, p, u, lo, hi, &sk);
    merge_pieces(s, GE(u, K(p->sk_units)), w, &sk);
  }
  sk_finish(s, p, w);
}

void sw_streamk_tile(Stage *s, const SchedStreamK *p, SInt u, SWork *w) {
  SInt lo = K(0), hi = K(0);
  if (p->sk_units > 0) sw_sk_unit_range(s, p, u, &lo, &hi);
  sk_piece_of(s, p, u, lo, hi, w);
}

/* The range of unit u if it is a StreamK unit, else [0, 0). */
static void cursor_load(Stage *s, const SchedStreamK *p, SInt u, SInt *lo, SInt *hi) {
  if (p->sk_units == 0) {
    *lo = *hi = K(0);
    return;
  }
  SInt rlo, rhi, is_sk = LT(u, K(p->sk_units));
  sw_sk_unit_range(s, p, u, &rlo, &rhi);
  *lo = SEL(is_sk, rlo, K(0));
  *hi = SEL(is_sk, rhi, K(0));
}

void sw_cursor_begin(Stage *s, const SchedStreamK *p, SInt worker, SInt *u, SInt *lo, SInt *hi) {
  *u = SEL(LT(worker, K(p->grid)), worker, K(p->units));
  cursor_load(s, p, *u, lo, hi);
}

/*
** One step: move past an exhausted StreamK unit, then hand out the piece of
** the unit reached: its top piece (the unit keeps the rest), or its
** data-parallel tile (the cursor moves on). Written as a loop this runs at
** most twice: a unit just entered is never empty (every unit holds a k tile),
** so the step is straight-line code.
*/
void sw_cursor_next(Stage *s, const SchedStreamK *p, SInt u, SInt lo, SInt hi, SWork *w) {
  SInt grid = K(p->grid), lo_n, hi_n;
  SInt exhausted = st_and(s, LT(u, K(p->sk_units)), st_le(s, hi, lo));
  SInt u1 = SEL(exhausted, ADD(u, grid), u);
  cursor_load(s, p, u1, &lo_n, &hi_n);
  SInt lo1 = SEL(exhausted, lo_n, lo), hi1 = SEL(exhausted, hi_n, hi);
  SInt valid = LT(u1, K(p->units));
  SInt is_dp = GE(u1, K(p->sk_units));
  sk_piece_of(s, p, u1, lo1, hi1, w);
  w->f[SF_VALID] = valid;
  w->f[SF_INC_PIPE] = st_bool(false);
  SInt moves = st_and(s, is_dp, valid), un = ADD(u1, grid);
  cursor_load(s, p, un, &lo_n, &hi_n);
  w->f[SF_CUR_UNIT] = SEL(moves, un, u1);
  w->f[SF_CUR_LO] = SEL(moves, lo_n, lo1);
  w->f[SF_CUR_HI] = SEL(moves, hi_n, SUB(hi1, w->f[SF_K_COUNT]));
}

/* }====================================================================== */

/* {======================================================================
** Fixup roles and workspace offsets
** ======================================================================= */

/*
** Deterministic (turnstile): split s waits until s splits have published,
** adds slot s-1 (the sum of splits 0..s-1, in K order) and publishes the sum
** through split s in slot s; the final split adds slot e-2 and finishes.
** Nondeterministic: every non-final split publishes its own partial in slot s
** without waiting; the final split waits for all e-1 of them and adds them.
** Either way the final split waits last, when every other piece has arrived,
** so its wait also resets the counter for the next launch.
*/
SFixup sw_fixup_role(Stage *s, const SchedStreamK *p, const SWork *w) {
  SInt sp = w->f[SF_SPLIT], last = SUB(w->f[SF_EXPECTED], K(1));
  SFixup f;
  f.participates = w->f[SF_SEPARATE];
  f.epilogue = EQ(sp, last);
  f.write = st_not(s, f.epilogue);
  f.write_slot = SEL(f.write, sp, K(0));
  if (p->reduction == SCHED_REDUCE_DETERMINISTIC) {
    SInt after_first = NE(sp, K(0));
    f.wait = after_first;
    f.reset = f.epilogue;
    f.wait_value = sp;
    f.read_first = SEL(after_first, SUB(sp, K(1)), K(0));
    f.read_count = B2I(after_first);
  } else {
    f.wait = f.epilogue;
    f.reset = st_bool(true); /* only the final split waits */
    f.wait_value = SEL(f.epilogue, last, K(0));
    f.read_first = K(0);
    f.read_count = SEL(f.epilogue, last, K(0));
  }
  return f;
}

bool sw_fixup_reads_one(const SchedStreamK *p) {
  return p->reduction == SCHED_REDUCE_DETERMINISTIC;
}

SInt sw_cta_tile(Stage *s, const SchedStreamK *p, SInt tile, SInt rank) {
  return ADD(MUL(tile, K(p->raster.cluster_m * p->raster.cluster_n)), rank);
}

SInt sw_slot_offset(Stage *s, const SchedStreamK *p, uint64_t acc_tile_bytes, SInt tile, SInt rank,
                    SInt slot) {
  SInt ctas = st_k64((uint64_t)p->raster.cluster_m * p->raster.cluster_n);
  SInt cta = ADD(MUL(st_zext(s, tile, 64), ctas), st_zext(s, rank, 64));
  SInt in_tile = ADD(MUL(cta, st_k64(p->max_splits - 1)), st_zext(s, slot, 64));
  return MUL(in_tile, st_k64(acc_tile_bytes));
}

/* }====================================================================== */
