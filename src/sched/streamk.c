/*
** streamk.c -- the StreamK scheduler: decomposition choice (CUTLASS's
** heuristics), unit ranges, the per-worker piece cursor, workspace layout and
** the fixup role of each piece.
*/
#include <string.h>

#include "worker.h"

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
** Units, pieces and the cursor: the host's reading of worker.c
** ======================================================================= */

void sched_sk_unit_range(const SchedStreamK *p, uint32_t u, uint32_t *lo, uint32_t *hi) {
  SInt l, h;
  sw_sk_unit_range(NULL, p, st_k(u), &l, &h);
  *lo = st_u32(l), *hi = st_u32(h);
}

void sched_sk_tile_units(const SchedStreamK *p, uint32_t t, uint32_t *first, uint32_t *count) {
  SInt f, n;
  sw_sk_tile_units(NULL, p, st_k(t), &f, &n);
  *first = st_u32(f), *count = st_u32(n);
}

static SchedSkWork piece_of(const SWork *w) {
  SchedSkWork x;
  x.unit = st_u32(w->f[SF_LINEAR]);
  x.tile_idx = st_u32(w->f[SF_TILE_IDX]);
  x.m = st_u32(w->f[SF_M]), x.n = st_u32(w->f[SF_N]), x.l = st_u32(w->f[SF_L]);
  x.k_tile_start = st_u32(w->f[SF_K_START]);
  x.k_tile_count = st_u32(w->f[SF_K_COUNT]);
  x.split_idx = st_u32(w->f[SF_SPLIT]);
  x.expected_splits = st_u32(w->f[SF_EXPECTED]);
  x.is_separate_reduction = st_get(w->f[SF_SEPARATE]) != 0;
  x.is_final_split = st_get(w->f[SF_FINAL]) != 0;
  return x;
}

SchedSkWork sched_streamk_tile(const SchedStreamK *p, uint32_t u) {
  SWork w;
  sw_streamk_tile(NULL, p, st_k(u), &w);
  return piece_of(&w);
}

void sched_cursor_begin(const SchedStreamK *p, SchedCursor *c, uint32_t worker) {
  SInt u, lo, hi;
  sw_cursor_begin(NULL, p, st_k(worker), &u, &lo, &hi);
  c->unit = st_u32(u), c->lo = st_u32(lo), c->hi = st_u32(hi);
}

bool sched_cursor_next(const SchedStreamK *p, SchedCursor *c, SchedSkWork *out) {
  SWork w;
  sw_cursor_next(NULL, p, st_k(c->unit), st_k(c->lo), st_k(c->hi), &w);
  c->unit = st_u32(w.f[SF_CUR_UNIT]);
  c->lo = st_u32(w.f[SF_CUR_LO]);
  c->hi = st_u32(w.f[SF_CUR_HI]);
  if (!st_get(w.f[SF_VALID])) return false;
  *out = piece_of(&w);
  return true;
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

/* The scheduler specification's streamk_workspace_sizes with the exact slot
** count: its ceil(k_tiles / k_per_small) - 1 undercounts a tile whose pieces
** straddle unit boundaries unevenly (k 10, small 4: pieces 1+4+4+1). */
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
  return st_get(sw_slot_offset(NULL, p, acc_tile_bytes, st_k(tile), st_k(rank), st_k(slot)));
}

uint64_t sched_barrier_offset(const SchedStreamK *p, uint64_t acc_tile_bytes, uint32_t tile,
                              uint32_t rank) {
  uint64_t cta_tile = (uint64_t)tile * ctas_per_tile(p) + rank;
  uint64_t reduction = (uint64_t)p->sk_tiles * ctas_per_tile(p) * (p->max_splits - 1);
  return align_up(reduction * acc_tile_bytes, SCHED_WORKSPACE_ALIGN) + cta_tile * 4;
}

/* The role of worker.c; a piece that does not participate has none (the
** lowering builds the role inside `if participates`). */
SchedFixup sched_fixup_role(const SchedStreamK *p, const SchedSkWork *w) {
  SchedFixup f;
  memset(&f, 0, sizeof f);
  if (!w->is_separate_reduction) return f;
  SWork x;
  memset(&x, 0, sizeof x);
  x.f[SF_SPLIT] = st_k(w->split_idx);
  x.f[SF_EXPECTED] = st_k(w->expected_splits);
  x.f[SF_SEPARATE] = st_bool(true);
  SFixup r = sw_fixup_role(NULL, p, &x);
  f.participates = true;
  f.wait = st_get(r.wait) != 0;
  f.reset = st_get(r.reset) != 0;
  f.wait_value = st_u32(r.wait_value);
  f.read_first = st_u32(r.read_first);
  f.read_count = st_u32(r.read_count);
  f.write = st_get(r.write) != 0;
  f.write_slot = st_u32(r.write_slot);
  f.epilogue = st_get(r.epilogue) != 0;
  return f;
}

/* }====================================================================== */
