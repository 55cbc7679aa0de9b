/*
** sched.c -- names, raster unpack, data-parallel and static persistent
** schedulers, the TileLang surface, and the planner that ties the kinds
** together (config -> raster, StreamK record, workspace, 48-byte Params).
*/
#include <string.h>

#include "worker.h"

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
  SRaster x = sw_raster_shape(NULL, st_k(tiles_m), st_k(tiles_n), st_k(tiles_l), st_k(cluster_m),
                              st_k(cluster_n), st_k(swizzle), order);
  r->grid_m = st_u32(x.grid_m), r->grid_n = st_u32(x.grid_n);
  r->fast = st_u32(x.fast), r->slow = st_u32(x.slow);
  r->swizzle = st_u32(x.swizzle);
  /* the counts the workers form, checked in 64 bits before they wrap */
  uint64_t per_l = (uint64_t)r->grid_m * r->grid_n;
  uint64_t total = per_l * tiles_l;
  if (total > U32MAX / 2) return fail(err, "too many tiles for 32-bit tile ids");
  r->per_l = (uint32_t)per_l;
  r->total = (uint32_t)total;
  return true;
}

SchedCoord sched_raster_unpack(const SchedRaster *r, uint32_t linear) {
  SRaster x = sw_raster_known(r);
  SWork w;
  sw_raster_unpack(NULL, &x, st_k(linear), &w);
  SchedCoord c = {st_u32(w.f[SF_M]), st_u32(w.f[SF_N]), st_u32(w.f[SF_L])};
  return c;
}

bool sched_cta_tile(const SchedRaster *r, SchedCoord c, uint32_t rank_m, uint32_t rank_n,
                    SchedCoord *out) {
  out->m = st_u32(sw_block_m(NULL, st_k(c.m), st_k(r->cluster_m), st_k(rank_m)));
  out->n = st_u32(sw_block_m(NULL, st_k(c.n), st_k(r->cluster_n), st_k(rank_n)));
  out->l = c.l;
  return out->m < r->tiles_m && out->n < r->tiles_n;
}

/* }====================================================================== */

/* {======================================================================
** Data-parallel, static persistent, TileLang
** ======================================================================= */

static SchedWork work_of(const SWork *w) {
  SchedWork t = {st_u32(w->f[SF_LINEAR]),   st_u32(w->f[SF_M]), st_u32(w->f[SF_N]), st_u32(w->f[SF_L]),
                 st_u32(w->f[SF_TILE_IDX]), st_get(w->f[SF_VALID]) != 0};
  return t;
}

static SchedWork work_at(const SchedRaster *r, uint32_t linear, uint32_t tile_idx) {
  SRaster x = sw_raster_known(r);
  SWork w;
  sw_work_at(NULL, &x, st_k(linear), st_k(tile_idx), &w);
  return work_of(&w);
}

SchedWork sched_dp_tile(const SchedRaster *r, uint32_t linear) { return work_at(r, linear, 0); }

SchedWork sched_persistent_first(const SchedPersistent *p, uint32_t worker) {
  return work_at(&p->raster, worker, 0);
}

/* The scheduler specification's persistent_advance: stride by the grid; the tile just finished
** clocks the pipeline when it is the last of a round. */
SchedWork sched_persistent_advance(const SchedPersistent *p, SchedWork t, bool *increment_pipe) {
  SRaster x = sw_raster_known(&p->raster);
  SWork from, w;
  from.f[SF_LINEAR] = st_k(t.linear);
  from.f[SF_TILE_IDX] = st_k(t.tile_idx);
  sw_persistent_advance(NULL, &x, st_k(p->grid), st_k(p->tiles_per_round), &from, NULL, &w);
  if (increment_pipe) *increment_pipe = st_get(w.f[SF_INC_PIPE]) != 0;
  return work_of(&w);
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
  SInt linear = st_k(s->linear_idx), iter = st_k(s->current_iter);
  sw_tl_next(NULL, st_k(p->grid), &linear, &iter);
  s->linear_idx = st_u32(linear);
  s->current_iter = st_u32(iter);
  tl_update(p, s);
}

/* TileLang's coord (worker.c), evaluated in 64 bits: a plan's swizzle is
** not bounded like sched_tl_make's, and the product fast * swizzle must not wrap. */
SchedCoord sched_tl_coord(const SchedPersistent *p, uint32_t tile_id) {
  const SchedRaster *r = &p->raster;
  SRaster x = {st_k64(r->grid_m), st_k64(r->grid_n), st_k64(r->fast), st_k64(r->slow),
               st_k64(r->swizzle), st_k64(r->per_l), st_k64(r->total), (SchedOrder)r->order};
  SWork w;
  sw_tl_coord(NULL, &x, st_k64(p->tl_swizzle ? p->tl_swizzle : r->swizzle), st_k64(tile_id), &w);
  SchedCoord c = {st_u32(w.f[SF_M]), st_u32(w.f[SF_N]), 0};
  return c;
}

uint32_t sched_tl_block_m(const SchedPersistent *p, uint32_t m_idx, uint32_t rank) {
  return st_u32(sw_block_m(NULL, st_k(m_idx), st_k(p->raster.cluster_m), st_k(rank)));
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
  if (c->kind != SCHED_DATA_PARALLEL && !c->workers) return fail(err, "workers must be positive");
  p->persist.grid =
      st_u32(sw_persistent_grid(NULL, c->kind, st_k(c->workers), st_k(p->persist.raster.total)));
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
