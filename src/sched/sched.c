/*
** sched.c -- names, raster unpack, data-parallel and static persistent
** schedulers, the TileLang surface, and the planner that ties the kinds
** together (config -> raster, StreamK record, workspace, 48-byte Params).
*/
#include <string.h>

#include "sched.h"

#define U32MAX 0xffffffffu

/* {======================================================================
** Names
** ======================================================================= */

#define NAME(id, name) name,
static const char *const kind_names[] = {SCHED_KIND_LIST(NAME)};
static const char *const decomp_names[] = {SCHED_DECOMP_LIST(NAME)};
static const char *const reduction_names[] = {SCHED_REDUCTION_LIST(NAME)};
#undef NAME

const char *sched_kind_name(SchedKind k) { return (unsigned)k < SCHED__NKINDS ? kind_names[k] : "?"; }

const char *sched_decomp_name(SchedDecomp d) {
  return (unsigned)d < SCHED__NDECOMPS ? decomp_names[d] : "?";
}

const char *sched_reduction_name(SchedReduction r) {
  return (unsigned)r < SCHED__NREDUCTIONS ? reduction_names[r] : "?";
}

/* Index of s in names[0..n), or of an alias; -1 if neither. */
static int sched_lookup(const char *s, const char *const *names, int n, const char *alias[][2]) {
  for (int i = 0; i < n; i++)
    if (strcmp(s, names[i]) == 0) return i;
  for (int i = 0; alias[i][0]; i++)
    if (strcmp(s, alias[i][0]) == 0) return sched_lookup(alias[i][1], names, n, alias + i + 1);
  return -1;
}

bool sched_kind_parse(const char *s, SchedKind *out) {
  static const char *alias[][2] = {{"dp", "data_parallel"},
                                   {"persistent", "static_persistent"},
                                   {"stream_k", "streamk"},
                                   {NULL, NULL}};
  int i = sched_lookup(s, kind_names, SCHED__NKINDS, alias);
  if (i >= 0) *out = (SchedKind)i;
  return i >= 0;
}

bool sched_decomp_parse(const char *s, SchedDecomp *out) {
  static const char *alias[][2] = {
      {"dp", "data_parallel"}, {"splitk", "split_k"}, {"stream_k", "streamk"}, {NULL, NULL}};
  int i = sched_lookup(s, decomp_names, SCHED__NDECOMPS, alias);
  if (i >= 0) *out = (SchedDecomp)i;
  return i >= 0;
}

bool sched_reduction_parse(const char *s, SchedReduction *out) {
  static const char *alias[][2] = {
      {"det", "deterministic"}, {"nondet", "nondeterministic"}, {NULL, NULL}};
  int i = sched_lookup(s, reduction_names, SCHED__NREDUCTIONS, alias);
  if (i >= 0) *out = (SchedReduction)i;
  return i >= 0;
}

/* }====================================================================== */

/* {======================================================================
** Raster unpack
** ======================================================================= */

static uint32_t ceil_div32(uint32_t a, uint32_t b) { return a / b + (a % b != 0); }
static uint32_t min32(uint32_t a, uint32_t b) { return a < b ? a : b; }

static bool fail(const char **err, const char *msg) {
  if (err) *err = msg;
  return false;
}

bool sched_raster_init(SchedRaster *r, uint32_t tiles_m, uint32_t tiles_n, uint32_t tiles_l,
                       uint32_t cluster_m, uint32_t cluster_n, uint32_t swizzle, SchedOrder order,
                       const char **err) {
  memset(r, 0, sizeof *r);
  if (!tiles_m || !tiles_n || !tiles_l) return fail(err, "tile counts must be positive");
  if (!cluster_m || !cluster_n) return fail(err, "cluster shape must be positive");
  if (!swizzle) return fail(err, "swizzle must be positive");
  if (order != SCHED_ALONG_M && order != SCHED_ALONG_N) return fail(err, "bad raster order");
  r->tiles_m = tiles_m, r->tiles_n = tiles_n, r->tiles_l = tiles_l;
  r->cluster_m = cluster_m, r->cluster_n = cluster_n;
  r->order = (uint32_t)order;
  r->grid_m = ceil_div32(tiles_m, cluster_m);
  r->grid_n = ceil_div32(tiles_n, cluster_n);
  r->fast = order == SCHED_ALONG_M ? r->grid_m : r->grid_n;
  r->slow = order == SCHED_ALONG_M ? r->grid_n : r->grid_m;
  /* A panel wider than the slow extent decodes valid ids exactly like one
  ** of the slow extent; clamping keeps fast * swizzle within per_l. */
  r->swizzle = min32(swizzle, r->slow);
  uint64_t per_l = (uint64_t)r->grid_m * r->grid_n;
  uint64_t total = per_l * tiles_l;
  if (total > U32MAX / 2) return fail(err, "too many tiles for 32-bit tile ids");
  r->per_l = (uint32_t)per_l;
  r->total = (uint32_t)total;
  return true;
}

/*
** l is the slowest index; inside an l-slice, panel p covers slow lines
** [p*swizzle, p*swizzle + width) where width is swizzle except for a narrower
** last panel. Inside a panel the slow index varies fastest. For ids past the
** end, width is clamped to 1 so nothing divides by zero.
*/
SchedCoord sched_raster_unpack(const SchedRaster *r, uint32_t linear) {
  uint32_t l = linear / r->per_l;
  uint32_t rest = linear - l * r->per_l;
  uint32_t panel_size = r->fast * r->swizzle;
  uint32_t panel = rest / panel_size;
  uint32_t base = panel * r->swizzle;
  uint32_t width = base < r->slow ? min32(r->swizzle, r->slow - base) : 1;
  uint32_t in = rest - panel * panel_size;
  uint32_t f = in / width, s = base + in % width;
  SchedCoord c = {f, s, l};
  if (r->order == SCHED_ALONG_N) c.m = s, c.n = f;
  return c;
}

bool sched_cta_tile(const SchedRaster *r, SchedCoord c, uint32_t rank_m, uint32_t rank_n,
                    SchedCoord *out) {
  out->m = c.m * r->cluster_m + rank_m;
  out->n = c.n * r->cluster_n + rank_n;
  out->l = c.l;
  return out->m < r->tiles_m && out->n < r->tiles_n;
}

/* }====================================================================== */

/* {======================================================================
** Data-parallel, static persistent, TileLang
** ======================================================================= */

static SchedWork work_at(const SchedRaster *r, uint32_t linear, uint32_t tile_idx) {
  SchedCoord c = sched_raster_unpack(r, linear);
  SchedWork w = {linear, c.m, c.n, c.l, tile_idx, linear < r->total};
  return w;
}

SchedWork sched_dp_tile(const SchedRaster *r, uint32_t linear) { return work_at(r, linear, 0); }

SchedWork sched_persistent_first(const SchedPersistent *p, uint32_t worker) {
  return work_at(&p->raster, worker, 0);
}

/* Seed 000's persistent_advance: stride by the grid; the tile just finished
** clocks the pipeline when it is the last of a round. */
SchedWork sched_persistent_advance(const SchedPersistent *p, SchedWork t, bool *increment_pipe) {
  bool inc = t.tile_idx + 1 == p->tiles_per_round;
  if (increment_pipe) *increment_pipe = inc;
  return work_at(&p->raster, t.linear + p->grid, inc ? 0 : t.tile_idx + 1);
}

bool sched_tl_make(SchedPersistent *p, uint32_t m_tiles, uint32_t n_tiles, uint32_t workers,
                   uint32_t swizzle, bool column_major, uint32_t cluster, const char **err) {
  memset(p, 0, sizeof *p);
  SchedOrder order = column_major ? SCHED_ALONG_M : SCHED_ALONG_N;
  if (!sched_raster_init(&p->raster, m_tiles, n_tiles, 1, cluster, 1, swizzle, order, err))
    return false;
  if (!workers) return fail(err, "workers must be positive");
  if (workers > U32MAX / 2) return fail(err, "too many workers for 32-bit tile ids");
  if ((uint64_t)p->raster.fast * swizzle > 0x7fffffffu)
    return fail(err, "swizzle too large: the fast extent times the swizzle overflows int32");
  p->grid = workers;
  p->tiles_per_round = 1;
  p->tl_swizzle = swizzle;
  return true;
}

static void tl_update(const SchedPersistent *p, SchedTlState *s) {
  SchedCoord c = sched_tl_coord(p, s->linear_idx);
  s->m_idx = c.m;
  s->n_idx = c.n;
}

void sched_tl_init(const SchedPersistent *p, SchedTlState *s, uint32_t worker) {
  s->current_iter = 0;
  s->linear_idx = worker;
  tl_update(p, s);
}

bool sched_tl_valid(const SchedPersistent *p, const SchedTlState *s) {
  return s->linear_idx < p->raster.total;
}

void sched_tl_next_tile(const SchedPersistent *p, SchedTlState *s) {
  s->current_iter += 1;
  s->linear_idx += p->grid;
  tl_update(p, s);
}

/* TileLang's coord: sched_raster_unpack over one batch, with the swizzle as
** given. Past the end the panel is 1 wide (base >= slow) or the fast index
** reaches the fast extent: the coordinate is out of range, never a wrap. */
SchedCoord sched_tl_coord(const SchedPersistent *p, uint32_t tile_id) {
  const SchedRaster *r = &p->raster;
  uint64_t w = p->tl_swizzle ? p->tl_swizzle : r->swizzle, panel_size = r->fast * w;
  uint64_t group = tile_id / panel_size, base = group * w;
  uint64_t width = base < r->slow ? (w < r->slow - base ? w : r->slow - base) : 1;
  uint64_t in = tile_id - group * panel_size;
  uint32_t f = (uint32_t)(in / width), s = (uint32_t)(base + in % width);
  SchedCoord c = {f, s, 0};
  if (r->order == SCHED_ALONG_N) c.m = s, c.n = f;
  return c;
}

uint32_t sched_tl_block_m(const SchedPersistent *p, uint32_t m_idx, uint32_t rank) {
  return m_idx * p->raster.cluster_m + rank;
}

/* }====================================================================== */

/* {======================================================================
** Planning
** ======================================================================= */

void sched_config_init(SchedConfig *c, SchedKind kind) {
  memset(c, 0, sizeof *c);
  c->kind = kind;
  c->tiles_m = c->tiles_n = c->tiles_l = c->tiles_k = 1;
  c->cluster_m = c->cluster_n = 1;
  c->swizzle = 1;
  c->order = SCHED_ALONG_M;
  c->workers = 1;
  c->tiles_per_round = 1;
  c->decomp = SCHED_DECOMP_HEURISTIC;
  c->splits = 1;
  c->reduction = SCHED_REDUCE_DETERMINISTIC;
  c->min_k = 0;
}

bool sched_config_gemm(SchedConfig *c, uint64_t m, uint64_t n, uint64_t k, uint64_t l,
                       uint32_t tile_m, uint32_t tile_n, uint32_t tile_k) {
  if (!m || !n || !k || !l || !tile_m || !tile_n || !tile_k) return false;
  uint64_t tm = (m + tile_m - 1) / tile_m, tn = (n + tile_n - 1) / tile_n;
  uint64_t tk = (k + tile_k - 1) / tile_k;
  if (tm > U32MAX || tn > U32MAX || tk > U32MAX || l > U32MAX) return false;
  c->tiles_m = (uint32_t)tm, c->tiles_n = (uint32_t)tn, c->tiles_k = (uint32_t)tk;
  c->tiles_l = (uint32_t)l;
  c->acc_tile_bytes = (uint64_t)tile_m * tile_n * 4;
  return true;
}

/* Persistent grids: min(workers, tiles); data-parallel: one per tile. */
static bool plan_persistent(SchedPlan *p, const SchedConfig *c, const char **err) {
  p->persist.tiles_per_round = c->tiles_per_round;
  p->persist.tl_swizzle = c->swizzle;
  if (c->kind == SCHED_DATA_PARALLEL) {
    p->persist.grid = p->persist.raster.total;
  } else {
    if (!c->workers) return fail(err, "workers must be positive");
    p->persist.grid = min32(c->workers, p->persist.raster.total);
  }
  p->grid = p->persist.grid;
  p->ws = sched_workspace_none();
  return true;
}

static bool plan_streamk(SchedPlan *p, const SchedConfig *c, const char **err) {
  if (!sched_streamk_init(&p->sk, &p->persist.raster, c->tiles_k, c->workers, c->decomp, c->splits,
                          c->reduction, c->min_k, err))
    return false;
  p->persist.grid = p->grid = p->sk.grid;
  p->persist.tiles_per_round = c->tiles_per_round;
  p->ws = sched_workspace_sizes(&p->sk, c->acc_tile_bytes);
  return true;
}

bool sched_plan(SchedPlan *p, const SchedConfig *c, const char **err) {
  memset(p, 0, sizeof *p);
  p->cfg = *c;
  if ((unsigned)c->kind > SCHED_STREAMK) return fail(err, "bad scheduler kind");
  if (!c->tiles_k) return fail(err, "k tiles must be positive");
  if (!sched_raster_init(&p->persist.raster, c->tiles_m, c->tiles_n, c->tiles_l, c->cluster_m,
                         c->cluster_n, c->swizzle, c->order, err))
    return false;
  if ((uint64_t)c->cluster_m * c->cluster_n > 64) return fail(err, "cluster of more than 64 CTAs");
  bool ok = c->kind == SCHED_STREAMK ? plan_streamk(p, c, err) : plan_persistent(p, c, err);
  if (!ok) return false;
  if ((uint64_t)p->grid * c->cluster_m * c->cluster_n > U32MAX)
    return fail(err, "too many CTAs for Params.total_ctas");
  p->params = sched_params_make(p, 0);
  return true;
}

SchedParams sched_params_make(const SchedPlan *p, uint64_t workspace_ptr) {
  const SchedRaster *r = &p->persist.raster;
  SchedParams s;
  memset(&s, 0, sizeof s);
  s.num_tiles_m = r->tiles_m;
  s.num_tiles_n = r->tiles_n;
  s.num_tiles_k = p->cfg.tiles_k;
  s.cluster_shape_x = r->cluster_m;
  s.cluster_shape_y = r->cluster_n;
  s.cluster_shape_z = 1;
  s.num_ctas_per_cluster = r->cluster_m * r->cluster_n;
  s.total_ctas = p->grid * s.num_ctas_per_cluster;
  s.workspace_ptr = p->ws.total ? workspace_ptr : 0;
  s.k_split_count = p->cfg.kind == SCHED_STREAMK ? p->sk.max_splits : 0;
  s.reserved = 0;
  return s;
}

/* The unit that finishes tile t is the last one covering it; units are dealt
** to workers round-robin. */
uint32_t sched_plan_owner(const SchedPlan *p, uint32_t t, uint32_t *contributors) {
  if (p->cfg.kind != SCHED_STREAMK) {
    if (contributors) *contributors = 1;
    return t % p->grid;
  }
  const SchedStreamK *sk = &p->sk;
  uint32_t first, count;
  sched_sk_tile_units(sk, t, &first, &count);
  if (contributors) *contributors = count < sk->grid ? count : sk->grid;
  return (first + count - 1) % sk->grid;
}

/* }====================================================================== */
