/*
** streamk.c -- the StreamK scheduler: decomposition choice (CUTLASS's
** heuristics), unit ranges, the per-worker piece cursor, workspace layout and
** the fixup role of each piece.
*/
#include <string.h>

#include "sched.h"

#define U32MAX 0xffffffffu
#define DEFAULT_MIN_K 8

static uint32_t min32(uint32_t a, uint32_t b) { return a < b ? a : b; }
static uint32_t max32(uint32_t a, uint32_t b) { return a > b ? a : b; }

static bool fail(const char **err, const char *msg) {
  if (err) *err = msg;
  return false;
}

/* {======================================================================
** Decomposition choice (host)
** ======================================================================= */

/*
** Tiles given to StreamK (CUTLASS get_num_sk_tiles): all but the full waves
** before the last full one, i.e. the last full wave plus the partial wave.
** The heuristic keeps everything data-parallel when there is no wave
** quantization (tiles a multiple of the workers) or too little K to split.
*/
static uint64_t sk_tile_count(uint64_t tiles, uint64_t workers, uint32_t k_tiles, SchedDecomp d,
                              uint32_t min_k) {
  uint64_t full = tiles / workers;
  uint64_t dp_waves = full > 1 ? full - 1 : 0;
  if (d == SCHED_DECOMP_HEURISTIC && (tiles % workers == 0 || k_tiles <= min_k)) return 0;
  return tiles - dp_waves * workers;
}

/* StreamK units (CUTLASS get_num_sk_units): one wave at most, and no unit
** with fewer than min_k k tiles. */
static uint64_t sk_unit_count(uint64_t sk_tiles, uint64_t workers, uint32_t k_tiles,
                              uint32_t min_k) {
  uint64_t u = sk_tiles * k_tiles / min_k;
  return u < workers ? u : workers;
}

static void set_data_parallel(SchedStreamK *p) {
  p->decomp = SCHED_DECOMP_DATA_PARALLEL;
  p->splits = 1;
  p->sk_tiles = p->sk_units = 0;
  p->k_per_small = p->big_units = 0;
}

static void set_split_k(SchedStreamK *p, uint32_t splits) {
  p->decomp = SCHED_DECOMP_SPLIT_K;
  p->splits = splits;
  p->sk_tiles = p->tiles;
  p->sk_units = p->tiles * splits;
  p->k_per_small = p->k_tiles / splits;
  p->big_units = 0;
}

static void set_streamk(SchedStreamK *p, uint32_t sk_tiles, uint32_t sk_units) {
  uint32_t total_k = sk_tiles * p->k_tiles;
  p->decomp = SCHED_DECOMP_STREAMK;
  p->splits = 1;
  p->sk_tiles = sk_tiles;
  p->sk_units = sk_units;
  p->k_per_small = total_k / sk_units;
  p->big_units = total_k % sk_units;
}

/* Largest number of pieces of any split tile: a loop, so host only; the
** device reads it from Params.k_split_count. */
static uint32_t sk_max_splits(const SchedStreamK *p) {
  if (p->decomp == SCHED_DECOMP_SPLIT_K) return p->splits;
  uint32_t most = 1;
  for (uint32_t t = 0; t < p->sk_tiles; t++) {
    uint32_t first, count;
    sched_sk_tile_units(p, t, &first, &count);
    most = max32(most, count);
  }
  return most;
}

/* Every flat k index a worker forms, and every unit id, must fit 31 bits. */
static bool sk_fits(uint64_t sk_tiles, uint64_t k_tiles, uint64_t units) {
  return sk_tiles * k_tiles <= U32MAX / 2 && units <= U32MAX / 2;
}

/* Choose the decomposition; false if the chosen one overflows 32 bits. */
static bool sk_choose(SchedStreamK *p, SchedDecomp d, uint32_t splits) {
  uint64_t T = p->tiles, W = p->workers, K = p->k_tiles;
  if (d == SCHED_DECOMP_SPLIT_K || d == SCHED_DECOMP_DATA_PARALLEL) {
    splits = min32(splits, p->k_tiles);
    if (d != SCHED_DECOMP_SPLIT_K || splits <= 1)
      set_data_parallel(p);
    else if (sk_fits(T, K, T * splits))
      set_split_k(p, splits);
    else
      return false;
    return true;
  }
  uint64_t skt = sk_tile_count(T, W, p->k_tiles, d, p->min_k);
  uint64_t sku = sk_unit_count(skt, W, p->k_tiles, p->min_k);
  if (!sk_fits(skt, K, sku)) return false;
  if (skt == 0 || sku == 0) {
    set_data_parallel(p);
  } else if (d == SCHED_DECOMP_HEURISTIC && skt < sku && sku % skt == 0) {
    /* Only when skt == T (less than one wave): plain split-K of all tiles. */
    set_split_k(p, (uint32_t)(sku / skt));
  } else {
    set_streamk(p, (uint32_t)skt, (uint32_t)sku);
  }
  return true;
}

bool sched_streamk_init(SchedStreamK *p, const SchedRaster *r, uint32_t k_tiles, uint32_t workers,
                        SchedDecomp decomp, uint32_t splits, SchedReduction reduction,
                        uint32_t min_k, const char **err) {
  memset(p, 0, sizeof *p);
  if (!k_tiles) return fail(err, "k tiles must be positive");
  if (!workers) return fail(err, "workers must be positive");
  if ((unsigned)decomp > SCHED_DECOMP_STREAMK) return fail(err, "bad decomposition");
  if ((unsigned)reduction > SCHED_REDUCE_NONDETERMINISTIC) return fail(err, "bad reduction mode");
  p->raster = *r;
  p->tiles = r->total;
  p->k_tiles = k_tiles;
  p->workers = workers;
  p->reduction = (uint32_t)reduction;
  p->min_k = min_k ? min_k : DEFAULT_MIN_K;
  if (!sk_choose(p, decomp, splits ? splits : 1)) return fail(err, "flat k space over 32 bits");
  p->dp_tiles = p->tiles - p->sk_tiles;
  if ((uint64_t)p->sk_units + p->dp_tiles > U32MAX / 2) return fail(err, "too many work units");
  p->units = p->sk_units + p->dp_tiles;
  p->grid = min32(p->workers, p->units);
  p->max_splits = sk_max_splits(p);
  return true;
}

/* }====================================================================== */

/* {======================================================================
** Units, pieces and the cursor (mirrored on the device)
** ======================================================================= */

/* Units [0, big) hold small + 1 k tiles, the rest small. */
void sched_sk_unit_range(const SchedStreamK *p, uint32_t u, uint32_t *lo, uint32_t *hi) {
  if (p->decomp == SCHED_DECOMP_SPLIT_K) {
    uint32_t t = u / p->splits, s = u % p->splits, r = p->k_tiles % p->splits;
    *lo = t * p->k_tiles + s * p->k_per_small + min32(s, r);
    *hi = *lo + p->k_per_small + (s < r);
    return;
  }
  uint32_t small = p->k_per_small, big = p->big_units;
  *lo = u * small + min32(u, big);
  *hi = *lo + small + (u < big);
}

/* The StreamK unit holding flat k index f: inverse of the ranges above. */
static uint32_t sk_unit_of(const SchedStreamK *p, uint32_t f) {
  uint32_t small = p->k_per_small, big = p->big_units;
  uint32_t big_end = big * (small + 1);
  return f < big_end ? f / (small + 1) : (f - big) / small;
}

void sched_sk_tile_units(const SchedStreamK *p, uint32_t t, uint32_t *first, uint32_t *count) {
  if (t >= p->sk_tiles) { /* data-parallel tail tile: one unit */
    *first = p->sk_units + (t - p->sk_tiles);
    *count = 1;
  } else if (p->decomp == SCHED_DECOMP_SPLIT_K) {
    *first = t * p->splits;
    *count = p->splits;
  } else {
    uint32_t lo = t * p->k_tiles;
    *first = sk_unit_of(p, lo);
    *count = sk_unit_of(p, lo + p->k_tiles - 1) - *first + 1;
  }
}

static void sk_finish(const SchedStreamK *p, SchedSkWork *w) {
  SchedCoord c = sched_raster_unpack(&p->raster, w->tile_idx);
  w->m = c.m, w->n = c.n, w->l = c.l;
  w->is_separate_reduction = w->k_tile_count != p->k_tiles;
  w->is_final_split = w->k_tile_start + w->k_tile_count == p->k_tiles;
}

/* The piece of unit u made of the part of [lo, hi) in the tile of hi - 1. */
static SchedSkWork sk_piece(const SchedStreamK *p, uint32_t u, uint32_t lo, uint32_t hi) {
  SchedSkWork w;
  uint32_t t = (hi - 1) / p->k_tiles, tile_lo = t * p->k_tiles;
  uint32_t start = max32(lo, tile_lo), first;
  w.unit = u;
  w.tile_idx = t;
  w.k_tile_start = start - tile_lo;
  w.k_tile_count = hi - start;
  sched_sk_tile_units(p, t, &first, &w.expected_splits);
  w.split_idx = u - first;
  sk_finish(p, &w);
  return w;
}

/* A data-parallel tail unit: its whole tile. */
static SchedSkWork sk_dp_piece(const SchedStreamK *p, uint32_t u) {
  SchedSkWork w;
  w.unit = u;
  w.tile_idx = p->sk_tiles + (u - p->sk_units);
  w.k_tile_start = 0;
  w.k_tile_count = p->k_tiles;
  w.split_idx = 0;
  w.expected_splits = 1;
  sk_finish(p, &w);
  return w;
}

SchedSkWork sched_streamk_tile(const SchedStreamK *p, uint32_t u) {
  if (u >= p->sk_units) return sk_dp_piece(p, u);
  uint32_t lo, hi;
  sched_sk_unit_range(p, u, &lo, &hi);
  return sk_piece(p, u, lo, hi);
}

static void cursor_load(const SchedStreamK *p, SchedCursor *c) {
  if (c->unit < p->sk_units)
    sched_sk_unit_range(p, c->unit, &c->lo, &c->hi);
  else
    c->lo = c->hi = 0;
}

void sched_cursor_begin(const SchedStreamK *p, SchedCursor *c, uint32_t worker) {
  c->unit = worker < p->grid ? worker : p->units;
  cursor_load(p, c);
}

/* One step: hand out the top piece of the current unit, or move to the
** worker's next unit. A data-parallel unit is one piece. */
bool sched_cursor_next(const SchedStreamK *p, SchedCursor *c, SchedSkWork *out) {
  while (c->unit < p->units) {
    if (c->unit >= p->sk_units) {
      *out = sk_dp_piece(p, c->unit);
      c->unit += p->grid;
      cursor_load(p, c);
      return true;
    }
    if (c->hi > c->lo) {
      *out = sk_piece(p, c->unit, c->lo, c->hi);
      c->hi -= out->k_tile_count;
      return true;
    }
    c->unit += p->grid;
    cursor_load(p, c);
  }
  return false;
}

/* }====================================================================== */

/* {======================================================================
** Workspace and fixup roles
** ======================================================================= */

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

SchedWorkspace sched_workspace_none(void) {
  SchedWorkspace ws;
  memset(&ws, 0, sizeof ws);
  return ws;
}

static uint32_t ctas_per_tile(const SchedStreamK *p) {
  return p->raster.cluster_m * p->raster.cluster_n;
}

/* Seed 000's streamk_workspace_sizes with the exact slot count: the seed's
** ceil(k_tiles / k_per_small) - 1 undercounts a tile whose pieces straddle
** unit boundaries unevenly (k 10, small 4: pieces 1+4+4+1). */
SchedWorkspace sched_workspace_sizes(const SchedStreamK *p, uint64_t acc_tile_bytes) {
  SchedWorkspace ws = sched_workspace_none();
  if (p->sk_tiles == 0 || p->max_splits <= 1) return ws;
  uint64_t tiles = (uint64_t)p->sk_tiles * ctas_per_tile(p);
  ws.slots_per_tile = p->max_splits - 1;
  ws.barrier_count = (uint32_t)tiles;
  ws.reduction = tiles * ws.slots_per_tile * acc_tile_bytes;
  ws.barriers = tiles * sizeof(uint32_t);
  ws.barrier_offset = align_up(ws.reduction, SCHED_WORKSPACE_ALIGN);
  ws.total = align_up(ws.barrier_offset + ws.barriers, SCHED_WORKSPACE_ALIGN);
  return ws;
}

uint64_t sched_slot_offset(const SchedStreamK *p, uint64_t acc_tile_bytes, uint32_t tile,
                           uint32_t rank, uint32_t slot) {
  uint64_t cta_tile = (uint64_t)tile * ctas_per_tile(p) + rank;
  return (cta_tile * (p->max_splits - 1) + slot) * acc_tile_bytes;
}

uint64_t sched_barrier_offset(const SchedStreamK *p, uint64_t acc_tile_bytes, uint32_t tile,
                              uint32_t rank) {
  uint64_t cta_tile = (uint64_t)tile * ctas_per_tile(p) + rank;
  uint64_t reduction = (uint64_t)p->sk_tiles * ctas_per_tile(p) * (p->max_splits - 1);
  return align_up(reduction * acc_tile_bytes, SCHED_WORKSPACE_ALIGN) + cta_tile * 4;
}

/*
** Deterministic (turnstile): split s waits until s splits have published,
** adds slot s-1 (the sum of splits 0..s-1, in K order) and publishes the sum
** through split s in slot s; the final split adds slot e-2 and finishes.
** Nondeterministic: every non-final split publishes its own partial in slot s
** without waiting; the final split waits for all e-1 of them and adds them.
*/
SchedFixup sched_fixup_role(const SchedStreamK *p, const SchedSkWork *w) {
  SchedFixup f;
  memset(&f, 0, sizeof f);
  if (!w->is_separate_reduction) return f;
  uint32_t s = w->split_idx, last = w->expected_splits - 1;
  f.participates = true;
  f.epilogue = s == last;
  f.write = !f.epilogue;
  f.write_slot = f.write ? s : 0;
  if (p->reduction == SCHED_REDUCE_DETERMINISTIC) {
    f.wait = s > 0;
    f.wait_value = s;
    f.read_first = s > 0 ? s - 1 : 0;
    f.read_count = s > 0;
  } else if (f.epilogue) {
    f.wait = true;
    f.wait_value = last;
    f.read_first = 0;
    f.read_count = last;
  }
  return f;
}

/* }====================================================================== */
