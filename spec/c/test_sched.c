/*
** test_sched.c -- the tile schedulers of src/sched: hand-computed golden
** cases, then property tests over a few thousand combinations of problem
** size, tile shape, worker count, swizzle, cluster, traversal order,
** decomposition and reduction mode. Prints one summary line.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ir/ir.h"
#include "sched/sched.h"

/* {======================================================================
** Checking
** ======================================================================= */

static char ctx[256]; /* the combination under test, for messages */
static long n_checks, n_fail;

static void check_at(bool ok, int line, const char *what) {
  n_checks++;
  if (ok) return;
  if (n_fail++ < 25) fprintf(stderr, "test_sched.c:%d: %s failed [%s]\n", line, what, ctx);
}

static void check_eq_at(uint64_t a, uint64_t b, int line, const char *what) {
  n_checks++;
  if (a == b) return;
  if (n_fail++ < 25)
    fprintf(stderr, "test_sched.c:%d: %s: %llu != %llu [%s]\n", line, what, (unsigned long long)a,
            (unsigned long long)b, ctx);
}

#define CHECK(c) check_at((c), __LINE__, #c)
#define CHECK_EQ(a, b) check_eq_at((uint64_t)(a), (uint64_t)(b), __LINE__, #a " == " #b)

static void set_ctx(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ctx, sizeof ctx, fmt, ap);
  va_end(ap);
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  if (!p) abort();
  return p;
}

/* Deterministic pseudo-random numbers (xorshift64*). */
static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint32_t rnd(uint32_t n) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (uint32_t)((rng_state * 0x2545f4914f6cdd1dull) >> 33) % n;
}

#define PICK(arr) (arr[rnd(sizeof(arr) / sizeof(arr[0]))])

/* }====================================================================== */

/* {======================================================================
** References written independently of the library
** ======================================================================= */

/* TileLang's PersistentTileScheduler.coord, transcribed with signed ints. */
static SchedCoord ref_tilelang(int64_t tile_id, int64_t m_tiles, int64_t n_tiles, int64_t swizzle,
                               bool column_major, int64_t cluster) {
  int64_t m_clusters = (m_tiles + cluster - 1) / cluster;
  int64_t primary = column_major ? m_clusters : n_tiles;
  int64_t secondary = column_major ? n_tiles : m_clusters;
  int64_t group = tile_id / (primary * swizzle), base = group * swizzle;
  int64_t width = swizzle < secondary - base ? swizzle : secondary - base;
  if (width < 1) width = 1;
  int64_t in_group = tile_id - group * (primary * swizzle);
  int64_t fast = in_group / width, slow = base + in_group % width;
  SchedCoord c = {(uint32_t)(column_major ? fast : slow), (uint32_t)(column_major ? slow : fast),
                  0};
  return c;
}

/* CUTLASS's sm90 swizzle decode (valid when the slow extent is a multiple of
** the swizzle): the slow offset in the low bits, then the fast index. */
static SchedCoord ref_cutlass(uint32_t id, uint32_t fast, uint32_t swizzle, bool along_m) {
  uint32_t offset = id % swizzle, extra = id / swizzle;
  uint32_t major = extra % fast, minor = extra / fast * swizzle + offset;
  SchedCoord c = {along_m ? major : minor, along_m ? minor : major, 0};
  return c;
}

/* }====================================================================== */

/* {======================================================================
** Golden cases
** ======================================================================= */

static void golden_layout(void) {
  set_ctx("params layout");
  CHECK_EQ(sizeof(SchedParams), 48);
  CHECK_EQ(offsetof(SchedParams, workspace_ptr), 0x20);
  CHECK_EQ(offsetof(SchedParams, k_split_count), 0x28);
  CHECK_EQ(offsetof(SchedParams, reserved), 0x2C);
  CHECK_EQ(_Alignof(SchedParams), 8);
}

static void golden_raster(void) {
  SchedRaster r;
  set_ctx("raster 4x4 swizzle 2 along m");
  CHECK(sched_raster_init(&r, 4, 4, 1, 1, 1, 2, SCHED_ALONG_M, NULL));
  static const uint32_t want[16][2] = {{0, 0}, {0, 1}, {1, 0}, {1, 1}, {2, 0}, {2, 1},
                                       {3, 0}, {3, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3},
                                       {2, 2}, {2, 3}, {3, 2}, {3, 3}};
  for (uint32_t i = 0; i < 16; i++) {
    SchedCoord c = sched_raster_unpack(&r, i);
    CHECK_EQ(c.m, want[i][0]);
    CHECK_EQ(c.n, want[i][1]);
  }
  set_ctx("raster 5x3 swizzle 2 along m: narrower tail panel");
  CHECK(sched_raster_init(&r, 5, 3, 1, 1, 1, 2, SCHED_ALONG_M, NULL));
  SchedCoord c = sched_raster_unpack(&r, 9);
  CHECK(c.m == 4 && c.n == 1);
  for (uint32_t i = 10; i < 15; i++) {
    c = sched_raster_unpack(&r, i);
    CHECK(c.m == i - 10 && c.n == 2);
  }
  set_ctx("raster 3x4x2 row major, l slowest");
  CHECK(sched_raster_init(&r, 3, 4, 2, 1, 1, 1, SCHED_ALONG_N, NULL));
  c = sched_raster_unpack(&r, 13);
  CHECK(c.l == 1 && c.m == 0 && c.n == 1);
  set_ctx("raster cluster 2 along m: 5 rows -> 3 cluster rows");
  CHECK(sched_raster_init(&r, 5, 2, 1, 2, 1, 1, SCHED_ALONG_M, NULL));
  CHECK_EQ(r.total, 6);
  SchedCoord cta;
  CHECK(sched_cta_tile(&r, sched_raster_unpack(&r, 2), 0, 0, &cta) && cta.m == 4);
  CHECK(!sched_cta_tile(&r, sched_raster_unpack(&r, 2), 1, 0, &cta));
}

/* 3x3 tiles, 10 k tiles, 4 workers: sk 5 tiles over 4 units of 13,13,12,12. */
static void golden_streamk(void) {
  SchedConfig c;
  SchedPlan p;
  const char *err = NULL;
  set_ctx("streamk 3x3 k10 w4");
  sched_config_init(&c, SCHED_STREAMK);
  c.tiles_m = c.tiles_n = 3, c.tiles_k = 10, c.workers = 4;
  c.acc_tile_bytes = 128 * 128 * 4;
  CHECK(sched_plan(&p, &c, &err));
  const SchedStreamK *s = &p.sk;
  CHECK_EQ(s->decomp, SCHED_DECOMP_STREAMK);
  CHECK_EQ(s->sk_tiles, 5);
  CHECK_EQ(s->sk_units, 4);
  CHECK_EQ(s->dp_tiles, 4);
  CHECK_EQ(s->units, 8);
  CHECK_EQ(s->k_per_small, 12);
  CHECK_EQ(s->big_units, 2);
  CHECK_EQ(s->max_splits, 2);
  CHECK_EQ(p.grid, 4);
  uint32_t lo, hi;
  sched_sk_unit_range(s, 1, &lo, &hi);
  CHECK(lo == 13 && hi == 26);
  sched_sk_unit_range(s, 3, &lo, &hi);
  CHECK(lo == 38 && hi == 50);
  /* Worker 1: unit 1 = tile 2 k[0,6) then tile 1 k[3,10) (final), then tile 6. */
  SchedCursor cur;
  SchedSkWork w;
  sched_cursor_begin(s, &cur, 1);
  CHECK(sched_cursor_next(s, &cur, &w));
  CHECK(w.tile_idx == 2 && w.k_tile_start == 0 && w.k_tile_count == 6 && w.split_idx == 0);
  CHECK(w.expected_splits == 2 && w.is_separate_reduction && !w.is_final_split);
  CHECK(sched_cursor_next(s, &cur, &w));
  CHECK(w.tile_idx == 1 && w.k_tile_start == 3 && w.k_tile_count == 7 && w.split_idx == 1);
  CHECK(w.is_final_split && w.is_separate_reduction);
  CHECK(sched_cursor_next(s, &cur, &w));
  CHECK(w.tile_idx == 6 && w.k_tile_start == 0 && w.k_tile_count == 10 && !w.is_separate_reduction);
  CHECK(w.m == 0 && w.n == 2);
  CHECK(!sched_cursor_next(s, &cur, &w));
  w = sched_streamk_tile(s, 3);
  CHECK(w.tile_idx == 4 && w.k_tile_count == 10 && w.expected_splits == 1);
  /* Exact workspace: 5 tiles x 1 slot; the contract's ceil(10/12)-1 = 0 slots
  ** would miss the split tiles 1..3. */
  CHECK_EQ(p.ws.slots_per_tile, 1);
  CHECK_EQ(p.ws.reduction, 5 * 65536);
  CHECK_EQ(p.ws.barriers, 20);
  CHECK_EQ(p.ws.barrier_offset, 327680);
  CHECK_EQ(p.ws.total, 327808);
  CHECK_EQ(sched_barrier_offset(s, c.acc_tile_bytes, 3, 0), 327680 + 12);
  CHECK_EQ(sched_slot_offset(s, c.acc_tile_bytes, 3, 0, 0), 3 * 65536);
  SchedParams prm = sched_params_make(&p, 0x10000);
  CHECK(prm.num_tiles_m == 3 && prm.num_tiles_k == 10 && prm.total_ctas == 4);
  CHECK(prm.k_split_count == 2 && prm.workspace_ptr == 0x10000 && prm.reserved == 0);
}

/* The StreamK heuristic's worked example and its branches. */
static void golden_heuristic(void) {
  SchedConfig c;
  SchedPlan p;
  set_ctx("4096x4096x8192, 128x256x64, 132 workers");
  sched_config_init(&c, SCHED_STREAMK);
  CHECK(sched_config_gemm(&c, 4096, 4096, 8192, 1, 128, 256, 64));
  c.workers = 132;
  CHECK(sched_plan(&p, &c, NULL));
  CHECK_EQ(p.sk.tiles, 512);
  CHECK_EQ(p.sk.k_tiles, 128);
  CHECK_EQ(p.sk.decomp, SCHED_DECOMP_STREAMK);
  CHECK_EQ(p.sk.sk_tiles, 248);
  CHECK_EQ(p.sk.dp_tiles, 264);
  CHECK_EQ(p.sk.sk_units, 132);
  CHECK_EQ(p.sk.k_per_small, 240);
  CHECK_EQ(p.sk.big_units, 64);
  CHECK_EQ(p.sk.max_splits, 2);
  CHECK_EQ(p.ws.reduction, 248ull * 128 * 256 * 4);

  set_ctx("heuristic: no wave quantization -> data-parallel");
  c.tiles_m = 8, c.tiles_n = 33, c.workers = 132, c.tiles_k = 100;
  CHECK(sched_plan(&p, &c, NULL) && p.sk.decomp == SCHED_DECOMP_DATA_PARALLEL);
  CHECK(p.ws.total == 0 && p.params.k_split_count == 1);
  set_ctx("heuristic: few k tiles -> data-parallel");
  c.tiles_m = 7, c.tiles_k = 8;
  CHECK(sched_plan(&p, &c, NULL) && p.sk.decomp == SCHED_DECOMP_DATA_PARALLEL);
  set_ctx("heuristic: 4 tiles, 132 workers, k 64 -> split-K by 8");
  c.tiles_m = 2, c.tiles_n = 2, c.tiles_k = 64;
  CHECK(sched_plan(&p, &c, NULL) && p.sk.decomp == SCHED_DECOMP_SPLIT_K && p.sk.splits == 8);
  CHECK(p.sk.sk_units == 32 && p.grid == 32);
  set_ctx("forced split-K 3 of k 10: 4+3+3");
  c.decomp = SCHED_DECOMP_SPLIT_K, c.splits = 3, c.tiles_k = 10;
  CHECK(sched_plan(&p, &c, NULL) && p.sk.splits == 3 && p.sk.units == 12);
  uint32_t lo, hi;
  sched_sk_unit_range(&p.sk, 5, &lo, &hi); /* tile 1, split 2 */
  CHECK(lo == 17 && hi == 20);
  CHECK_EQ(p.ws.reduction, 4 * 2 * c.acc_tile_bytes); /* the contract's formula, uniform splits */
  set_ctx("forced data-parallel");
  c.decomp = SCHED_DECOMP_DATA_PARALLEL;
  CHECK(sched_plan(&p, &c, NULL) && p.sk.units == 4 && p.ws.total == 0);
}

static void golden_fixup_roles(void) {
  SchedStreamK s;
  memset(&s, 0, sizeof s);
  SchedSkWork w;
  memset(&w, 0, sizeof w);
  w.expected_splits = 3, w.is_separate_reduction = true;
  set_ctx("fixup roles, 3 splits, deterministic");
  s.reduction = SCHED_REDUCE_DETERMINISTIC;
  w.split_idx = 0;
  SchedFixup f = sched_fixup_role(&s, &w);
  CHECK(!f.wait && f.read_count == 0 && f.write && f.write_slot == 0 && !f.epilogue);
  w.split_idx = 1;
  f = sched_fixup_role(&s, &w);
  CHECK(f.wait && f.wait_value == 1 && f.read_first == 0 && f.read_count == 1);
  CHECK(f.write && f.write_slot == 1);
  w.split_idx = 2;
  f = sched_fixup_role(&s, &w);
  CHECK(f.wait && f.wait_value == 2 && f.read_first == 1 && f.read_count == 1);
  CHECK(!f.write && f.epilogue);
  set_ctx("fixup roles, 3 splits, nondeterministic");
  s.reduction = SCHED_REDUCE_NONDETERMINISTIC;
  w.split_idx = 1;
  f = sched_fixup_role(&s, &w);
  CHECK(!f.wait && f.read_count == 0 && f.write && f.write_slot == 1);
  w.split_idx = 2;
  f = sched_fixup_role(&s, &w);
  CHECK(f.wait && f.wait_value == 2 && f.read_first == 0 && f.read_count == 2 && f.epilogue);
}

static void golden_persistent(void) {
  set_ctx("static persistent 3x3, grid 4, round 2");
  SchedConfig c;
  SchedPlan p;
  sched_config_init(&c, SCHED_STATIC_PERSISTENT);
  c.tiles_m = c.tiles_n = 3, c.workers = 4, c.tiles_per_round = 2;
  CHECK(sched_plan(&p, &c, NULL));
  SchedWork w = sched_persistent_first(&p.persist, 1);
  bool inc;
  CHECK(w.valid && w.linear == 1 && w.m == 1 && w.n == 0);
  w = sched_persistent_advance(&p.persist, w, &inc);
  CHECK(w.valid && w.linear == 5 && !inc && w.tile_idx == 1 && w.m == 2 && w.n == 1);
  w = sched_persistent_advance(&p.persist, w, &inc);
  CHECK(!w.valid && inc && w.tile_idx == 0);
  CHECK(p.ws.total == 0 && p.params.workspace_ptr == 0 && p.params.k_split_count == 0);
}

/* TileLang's example shape: 4 x 3 tiles, 5 workers. Id 13 is past the end;
** TileLang decodes it to (1, 3), out of range, not to another worker's tile. */
static void golden_tl_past_end(void) {
  set_ctx("TileLang 4x3, 5 workers");
  SchedPersistent p;
  CHECK(sched_tl_make(&p, 4, 3, 5, 1, true, 1, NULL));
  SchedCoord c = sched_tl_coord(&p, 13);
  CHECK(c.m == 1 && c.n == 3);
  c = sched_tl_coord(&p, 12);
  CHECK(c.m == 0 && c.n == 3);
  CHECK(sched_tl_make(&p, 4, 3, 5, 8, true, 1, NULL)); /* swizzle wider than n: not clamped */
  c = sched_tl_coord(&p, 13);
  CHECK(c.m == 4 && c.n == 1);
  const char *err = NULL;
  CHECK(!sched_tl_make(&p, 1u << 20, 3, 5, 1u << 12, true, 1, &err) && err);
}

static void golden_errors(void) {
  SchedConfig c;
  SchedPlan p;
  const char *err = NULL;
  set_ctx("errors");
  sched_config_init(&c, SCHED_STREAMK);
  c.tiles_m = 0;
  CHECK(!sched_plan(&p, &c, &err) && err != NULL);
  sched_config_init(&c, SCHED_STREAMK);
  c.workers = 0, c.tiles_k = 4;
  err = NULL;
  CHECK(!sched_plan(&p, &c, &err) && err != NULL);
  sched_config_init(&c, SCHED_STREAMK);
  c.tiles_m = 1u << 16, c.tiles_n = 1u << 14, c.tiles_k = 1u << 12, c.workers = 132;
  CHECK(sched_plan(&p, &c, NULL)); /* 2^30 tiles: only the StreamK waves need 32-bit flat k */
  CHECK_EQ(p.sk.sk_tiles, 132 + (1u << 30) % 132);
  c.decomp = SCHED_DECOMP_SPLIT_K, c.splits = 2;
  err = NULL;
  CHECK(!sched_plan(&p, &c, &err) && err != NULL); /* split-K: flat k space 2^42 */
  sched_config_init(&c, SCHED_DATA_PARALLEL);
  c.tiles_m = c.tiles_n = 1u << 16;
  CHECK(!sched_plan(&p, &c, NULL)); /* 2^32 tile ids */
  CHECK(!sched_config_gemm(&c, 0, 1, 1, 1, 1, 1, 1));
  SchedKind k;
  SchedDecomp d;
  SchedReduction r;
  CHECK(sched_kind_parse("streamk", &k) && k == SCHED_STREAMK);
  CHECK(sched_kind_parse("persistent", &k) && k == SCHED_STATIC_PERSISTENT);
  CHECK(sched_decomp_parse("splitk", &d) && d == SCHED_DECOMP_SPLIT_K);
  CHECK(sched_reduction_parse("nondet", &r) && r == SCHED_REDUCE_NONDETERMINISTIC);
  CHECK(!sched_kind_parse("bogus", &k));
}

static size_t count_of(const char *s, const char *sub) {
  size_t n = 0;
  for (const char *q = strstr(s, sub); q; q = strstr(q + 1, sub))
    n++;
  return n;
}

static void golden_render(void) {
  SchedConfig c;
  SchedPlan p;
  set_ctx("render streamk 3x3 k10 w4");
  sched_config_init(&c, SCHED_STREAMK);
  c.tiles_m = c.tiles_n = 3, c.tiles_k = 10, c.workers = 4;
  CHECK(sched_plan(&p, &c, NULL));
  StrBuf sb;
  sb_init(&sb);
  sched_render_text(&sb, &p, 0);
  CHECK(strstr(sb.data, "sk_tiles 5, sk_units 4, dp_tiles 4") != NULL);
  CHECK(strstr(sb.data, "tile 1 (m 1, n 0, l 0): w0 k[0,3) w1 k[3,10) -> w1 reduces") != NULL);
  CHECK(strstr(sb.data, "\x1b[") == NULL);
  CHECK_EQ(count_of(sb.data, "*"), 3 + 1); /* 3 split tiles + the legend's '*' */
  sb_free(&sb);
  sched_render_text(&sb, &p, SCHED_RENDER_COLOR | SCHED_RENDER_NO_SPLITS);
  CHECK(strstr(sb.data, "\x1b[48;5;") != NULL && strstr(sb.data, "k splits") == NULL);
  sb_free(&sb);
  sched_render_svg(&sb, &p);
  CHECK(strncmp(sb.data, "<svg", 4) == 0 && strstr(sb.data, "</svg>\n") != NULL);
  CHECK_EQ(count_of(sb.data, "<rect"), 1 + 9 + 4); /* background, tiles, legend */
  sb_free(&sb);
}

/* }====================================================================== */

/* {======================================================================
** Properties
** ======================================================================= */

static long n_combos, n_tl_cases;
static long n_decomp[4], n_pieces_total, n_models;

/* The decode is a bijection onto the cluster grid; cluster ranks expand it
** onto every CTA tile once; it agrees with TileLang's and CUTLASS's decode. */
static void prop_raster(const SchedRaster *r, uint32_t swizzle) {
  uint8_t *seen = xcalloc(r->total, 1);
  uint32_t cm = r->cluster_m, cn = r->cluster_n, ctas = cm * cn;
  uint8_t *cta_seen = xcalloc((size_t)r->tiles_m * r->tiles_n * r->tiles_l, 1);
  bool along_m = r->order == SCHED_ALONG_M, in_range = true, refs = true;
  for (uint32_t id = 0; id < r->total; id++) {
    SchedCoord c = sched_raster_unpack(r, id);
    if (c.m >= r->grid_m || c.n >= r->grid_n || c.l >= r->tiles_l) {
      in_range = false;
      continue;
    }
    seen[((size_t)c.l * r->grid_m + c.m) * r->grid_n + c.n]++;
    for (uint32_t k = 0; k < ctas; k++) {
      SchedCoord t;
      if (sched_cta_tile(r, c, k % cm, k / cm, &t))
        cta_seen[((size_t)t.l * r->tiles_m + t.m) * r->tiles_n + t.n]++;
    }
    uint32_t in_l = id % r->per_l;
    if (cn == 1) {
      SchedCoord tl = ref_tilelang(in_l, r->tiles_m, r->tiles_n, swizzle, along_m, cm);
      refs &= tl.m == c.m && tl.n == c.n;
    }
    if (r->slow % r->swizzle == 0) {
      SchedCoord cu = ref_cutlass(in_l, r->fast, r->swizzle, along_m);
      refs &= cu.m == c.m && cu.n == c.n;
    }
  }
  CHECK(in_range);
  CHECK(refs);
  bool once = true;
  for (uint32_t i = 0; i < r->total; i++)
    once &= seen[i] == 1;
  CHECK(once);
  once = true;
  for (size_t i = 0; i < (size_t)r->tiles_m * r->tiles_n * r->tiles_l; i++)
    once &= cta_seen[i] == 1;
  CHECK(once);
  sched_raster_unpack(r, r->total + 7); /* past the end: defined, no trap */
  free(seen);
  free(cta_seen);
}

/* Data-parallel: one tile per cluster, no workspace. Static persistent and
** the TileLang surface: every tile once over all workers, stateful ==
** stateless, increment_pipe every tiles_per_round tiles. */
static void prop_persistent(const SchedConfig *base) {
  SchedConfig c = *base;
  SchedPlan p;
  c.kind = SCHED_DATA_PARALLEL;
  CHECK(sched_plan(&p, &c, NULL));
  CHECK(p.ws.total == 0 && p.params.k_split_count == 0 && p.grid == p.persist.raster.total);
  c.kind = SCHED_STATIC_PERSISTENT;
  c.tiles_per_round = 1 + rnd(3);
  CHECK(sched_plan(&p, &c, NULL));
  CHECK(p.ws.total == 0 && p.params.workspace_ptr == 0 && p.params.k_split_count == 0);
  const SchedPersistent *sp = &p.persist;
  uint8_t *seen = xcalloc(sp->raster.total, 1);
  bool ok = true;
  for (uint32_t w = 0; w < sp->grid; w++) {
    SchedWork t = sched_persistent_first(sp, w);
    for (uint32_t it = 0; t.valid; it++) {
      SchedWork d = sched_dp_tile(&sp->raster, t.linear);
      ok &= d.m == t.m && d.n == t.n && d.l == t.l && t.tile_idx == it % c.tiles_per_round;
      ok &= t.linear == w + it * sp->grid;
      seen[t.linear]++;
      bool inc;
      t = sched_persistent_advance(sp, t, &inc);
      ok &= inc == ((it + 1) % c.tiles_per_round == 0);
    }
  }
  for (uint32_t i = 0; i < sp->raster.total; i++)
    ok &= seen[i] == 1;
  CHECK(ok);
  free(seen);
  if (c.tiles_l != 1 || c.cluster_n != 1) return;
  SchedPersistent tl;
  uint32_t workers = c.workers;
  CHECK(sched_tl_make(&tl, c.tiles_m, c.tiles_n, workers, c.swizzle, c.order == SCHED_ALONG_M,
                      c.cluster_m, NULL));
  ok = true;
  uint32_t visited = 0;
  for (uint32_t w = 0; w < workers; w++) {
    SchedTlState s;
    for (sched_tl_init(&tl, &s, w); sched_tl_valid(&tl, &s); sched_tl_next_tile(&tl, &s)) {
      SchedCoord k = sched_tl_coord(&tl, workers * s.current_iter + w);
      ok &= k.m == s.m_idx && k.n == s.n_idx && s.linear_idx == workers * s.current_iter + w;
      ok &= sched_tl_block_m(&tl, s.m_idx, 0) == s.m_idx * c.cluster_m;
      visited++;
    }
  }
  CHECK(ok);
  CHECK_EQ(visited, tl.raster.total);
}

/* TileLang's two loops over one random configuration: for every
** worker, the stateless `for w < waves: coord(workers * w + worker), keep it
** if in bounds` yields exactly the stateful init / valid / next_tile
** sequence, every tile once over all workers, and coord agrees with
** TileLang's own formula (ref_tilelang) on every id the loops form. */
static void prop_tl_stateless(uint32_t i) {
  uint32_t m = 1 + rnd(40), n = 1 + rnd(40), workers = 1 + rnd(i % 4 == 0 ? 400 : 60);
  uint32_t swizzle = 1 + rnd(i % 3 == 0 ? 64 : 9), cluster = 1 + rnd(4);
  bool column_major = rnd(2);
  set_ctx("TileLang m=%u n=%u workers=%u swizzle=%u cluster=%u %s", m, n, workers, swizzle, cluster,
          column_major ? "column-major" : "row-major");
  SchedPersistent p;
  CHECK(sched_tl_make(&p, m, n, workers, swizzle, column_major, cluster, NULL));
  uint32_t total = p.raster.total, waves = (total + workers - 1) / workers;
  uint8_t *seen = xcalloc(total, 1);
  bool same = true, refs = true;
  for (uint32_t w = 0; w < workers; w++) {
    SchedTlState s;
    sched_tl_init(&p, &s, w);
    for (uint32_t wave = 0; wave < waves; wave++) {
      uint32_t id = workers * wave + w;
      SchedCoord c = sched_tl_coord(&p, id);
      SchedCoord r = ref_tilelang(id, m, n, swizzle, column_major, cluster);
      refs &= c.m == r.m && c.n == r.n;
      if (c.m >= p.raster.grid_m || c.n >= p.raster.grid_n) { /* out of bounds: skipped */
        same &= id >= total;
        continue;
      }
      same &= id < total && sched_tl_valid(&p, &s) && s.m_idx == c.m && s.n_idx == c.n;
      seen[(size_t)c.m * p.raster.grid_n + c.n]++;
      sched_tl_next_tile(&p, &s);
    }
    same &= !sched_tl_valid(&p, &s); /* the stateful loop has no tile left either */
  }
  for (uint32_t t = 0; t < total; t++)
    same &= seen[t] == 1;
  CHECK(same);
  CHECK(refs);
  free(seen);
  n_tl_cases++;
}

typedef struct Piece {
  SchedSkWork w;
  uint32_t worker;
} Piece;

static int piece_cmp(const void *a, const void *b) {
  const SchedSkWork *x = &((const Piece *)a)->w, *y = &((const Piece *)b)->w;
  if (x->tile_idx != y->tile_idx) return x->tile_idx < y->tile_idx ? -1 : 1;
  return x->k_tile_start < y->k_tile_start ? -1 : x->k_tile_start > y->k_tile_start;
}

static Piece *pieces;
static size_t n_pieces, cap_pieces;

static void add_piece(const SchedSkWork *w, uint32_t worker) {
  if (n_pieces == cap_pieces) {
    cap_pieces = cap_pieces ? 2 * cap_pieces : 1024;
    pieces = realloc(pieces, cap_pieces * sizeof *pieces);
    if (!pieces) abort();
  }
  pieces[n_pieces].w = *w;
  pieces[n_pieces++].worker = worker;
}

/* Every piece is well formed, and belongs to a unit of its worker. */
static void sk_collect(const SchedStreamK *s) {
  n_pieces = 0;
  bool ok = true;
  for (uint32_t wk = 0; wk < s->grid; wk++) {
    SchedCursor cur;
    SchedSkWork w;
    uint32_t last_unit = UINT32_MAX;
    sched_cursor_begin(s, &cur, wk);
    while (sched_cursor_next(s, &cur, &w)) {
      ok &= w.unit % s->grid == wk && w.tile_idx < s->tiles && w.k_tile_count >= 1;
      ok &= w.k_tile_start + w.k_tile_count <= s->k_tiles && w.split_idx < w.expected_splits;
      ok &= w.is_final_split == (w.k_tile_start + w.k_tile_count == s->k_tiles);
      ok &= w.is_separate_reduction == (w.k_tile_count != s->k_tiles);
      SchedCoord c = sched_raster_unpack(&s->raster, w.tile_idx);
      ok &= c.m == w.m && c.n == w.n && c.l == w.l;
      if (w.unit != last_unit) { /* the dispatch's piece is the unit's first */
        SchedSkWork d = sched_streamk_tile(s, w.unit);
        ok &= d.tile_idx == w.tile_idx && d.k_tile_start == w.k_tile_start;
        ok &= d.k_tile_count == w.k_tile_count && d.split_idx == w.split_idx;
        ok &= last_unit == UINT32_MAX || w.unit == last_unit + s->grid;
        last_unit = w.unit;
      }
      add_piece(&w, wk);
    }
  }
  CHECK(ok);
}

/* Every k tile of every output tile exactly once; pieces of a tile in K
** order carry split 0 .. e-1 with e their number; max_splits is the max. */
static uint32_t sk_check_coverage(const SchedStreamK *s) {
  qsort(pieces, n_pieces, sizeof *pieces, piece_cmp);
  bool ok = true;
  uint32_t most = 1;
  size_t i = 0;
  for (uint32_t t = 0; t < s->tiles && ok; t++) {
    uint32_t k = 0, e = 0, first, count;
    size_t j = i;
    for (; j < n_pieces && pieces[j].w.tile_idx == t; j++, e++) {
      ok &= pieces[j].w.k_tile_start == k && pieces[j].w.split_idx == e;
      k += pieces[j].w.k_tile_count;
    }
    ok &= k == s->k_tiles && e >= 1;
    for (size_t q = i; q < j; q++)
      ok &= pieces[q].w.expected_splits == e;
    sched_sk_tile_units(s, t, &first, &count);
    ok &= count == e && (e == 1 || t < s->sk_tiles);
    most = e > most ? e : most;
    i = j;
  }
  CHECK(ok && i == n_pieces);
  CHECK_EQ(s->max_splits, most);
  return most;
}

/* The decomposition obeys the heuristic's rules. */
static void sk_check_decomp(const SchedStreamK *s, SchedDecomp asked, uint32_t splits) {
  uint32_t T = s->tiles, W = s->workers, K = s->k_tiles, full = T / W;
  uint32_t sk_expect = T - (full > 1 ? full - 1 : 0) * W;
  CHECK(s->decomp != SCHED_DECOMP_HEURISTIC);
  CHECK_EQ(s->units, s->sk_units + s->dp_tiles);
  CHECK_EQ(s->grid, s->units < W ? s->units : W);
  CHECK(s->decomp == SCHED_DECOMP_SPLIT_K || s->sk_units <= s->grid); /* one round */
  if (asked == SCHED_DECOMP_HEURISTIC && (T % W == 0 || K <= s->min_k))
    CHECK_EQ(s->decomp, SCHED_DECOMP_DATA_PARALLEL);
  if (asked == SCHED_DECOMP_DATA_PARALLEL) CHECK_EQ(s->decomp, SCHED_DECOMP_DATA_PARALLEL);
  if (asked == SCHED_DECOMP_SPLIT_K) {
    uint32_t want = splits < K ? splits : K;
    CHECK_EQ(s->decomp, want > 1 ? SCHED_DECOMP_SPLIT_K : SCHED_DECOMP_DATA_PARALLEL);
  }
  if (s->decomp == SCHED_DECOMP_STREAMK) {
    CHECK_EQ(s->sk_tiles, sk_expect);
    CHECK(s->k_per_small >= s->min_k && s->sk_units <= W && s->big_units < s->sk_units);
    CHECK_EQ((uint64_t)s->k_per_small * s->sk_units + s->big_units, (uint64_t)s->sk_tiles * K);
  }
  if (s->decomp == SCHED_DECOMP_SPLIT_K) CHECK(s->sk_tiles == T && s->sk_units == T * s->splits);
  if (s->decomp == SCHED_DECOMP_DATA_PARALLEL) CHECK(s->sk_tiles == 0 && s->units == T);
}

static void sk_check_workspace(const SchedPlan *p, uint32_t most) {
  const SchedStreamK *s = &p->sk;
  const SchedWorkspace *ws = &p->ws;
  uint64_t ctas = (uint64_t)p->cfg.cluster_m * p->cfg.cluster_n, acc = p->cfg.acc_tile_bytes;
  uint64_t split_tiles = most > 1 ? (uint64_t)s->sk_tiles * ctas : 0;
  CHECK_EQ(ws->reduction, split_tiles * (most - 1) * acc);
  CHECK_EQ(ws->barriers, split_tiles * 4);
  CHECK(ws->total % 128 == 0 && ws->barrier_offset % 128 == 0);
  CHECK(ws->barrier_offset >= ws->reduction && ws->total >= ws->barrier_offset + ws->barriers);
  CHECK(ws->total < ws->barrier_offset + ws->barriers + 128);
  if (s->decomp == SCHED_DECOMP_SPLIT_K) /* the contract's formula, exact for uniform splits */
    CHECK_EQ(ws->reduction, (uint64_t)s->sk_tiles * ctas * (s->splits - 1) * acc);
  if (most > 1) { /* the last slot and barrier of the last CTA tile end the regions */
    uint32_t t = s->sk_tiles - 1, r = (uint32_t)ctas - 1;
    CHECK_EQ(sched_slot_offset(s, acc, t, r, most - 2) + acc, ws->reduction);
    CHECK_EQ(sched_barrier_offset(s, acc, t, r) + 4, ws->barrier_offset + ws->barriers);
  }
  SchedParams prm = sched_params_make(p, 0x7f0000000000ull);
  CHECK_EQ(prm.k_split_count, most);
  CHECK_EQ(prm.total_ctas, p->grid * ctas);
  CHECK_EQ(prm.workspace_ptr, ws->total ? 0x7f0000000000ull : 0);
}

/* The fixup model in both reduction modes: no deadlock, one epilogue per
** tile by the unit that covers its last k tile, slot s written by split s. */
static void sk_check_fixup(const SchedPlan *p) {
  for (int mode = 0; mode < 2; mode++) {
    SchedStreamK s = p->sk;
    s.reduction = (uint32_t)mode;
    SchedFixupModel m;
    bool ok = sched_fixup_model_run(&s, (uint64_t)n_combos * 2 + (uint64_t)mode, &m);
    if (!ok) fprintf(stderr, "fixup model (%s): %s\n", sched_reduction_name(mode), m.error);
    CHECK(ok);
    bool owners = true;
    for (uint32_t t = 0; t < s.tiles && ok; t++) {
      uint32_t first, count;
      sched_sk_tile_units(&s, t, &first, &count);
      owners &= m.reducer[t] == sched_plan_owner(p, t, NULL);
      for (uint32_t q = 0; t < s.sk_tiles && q + 1 < count; q++)
        owners &= m.slot_writer[(size_t)t * m.slots_per_tile + q] == (first + q) % s.grid;
    }
    CHECK(owners);
    n_models++;
    sched_fixup_model_free(&m);
  }
}

static void prop_streamk(const SchedConfig *base, SchedDecomp d, SchedReduction red) {
  SchedConfig c = *base;
  SchedPlan p;
  const char *err = NULL;
  c.kind = SCHED_STREAMK;
  c.decomp = d;
  c.reduction = red;
  c.splits = 1 + rnd(6);
  c.min_k = PICK(((uint32_t[]){0, 1, 2, 4}));
  bool ok = sched_plan(&p, &c, &err);
  CHECK(ok);
  if (!ok) {
    fprintf(stderr, "plan: %s\n", err);
    return;
  }
  sk_check_decomp(&p.sk, d, c.splits);
  n_decomp[p.sk.decomp]++;
  sk_collect(&p.sk);
  n_pieces_total += (long)n_pieces;
  uint32_t most = sk_check_coverage(&p.sk);
  sk_check_workspace(&p, most);
  sk_check_fixup(&p);
}

/* One combination: a GEMM shape, tile, workers, swizzle, cluster, order. */
static void prop_combo(uint32_t i) {
  static const uint64_t sizes[] = {1,   64,  100,  128,  129,  200,  255, 384,
                                   512, 640, 1000, 1024, 2048, 4096, 8192};
  static const uint64_t ks[] = {1, 32, 64, 100, 256, 500, 1000, 2048, 4096};
  static const uint32_t tiles[][3] = {{64, 64, 32}, {128, 128, 64},  {128, 256, 64},
                                      {96, 80, 48}, {256, 128, 128}, {32, 32, 16}};
  static const uint32_t workers[] = {1, 2, 3, 4, 5, 7, 8, 16, 33, 66, 132};
  static const uint32_t swizzles[] = {1, 2, 3, 4, 8};
  static const uint32_t clusters[] = {1, 2, 4};
  SchedConfig c;
  sched_config_init(&c, SCHED_STREAMK);
  uint64_t m = PICK(sizes), n = PICK(sizes), k = PICK(ks), l = 1 + (rnd(6) == 0);
  const uint32_t *t = tiles[rnd(sizeof tiles / sizeof tiles[0])];
  CHECK(sched_config_gemm(&c, m, n, k, l, t[0], t[1], t[2]));
  c.workers = PICK(workers);
  c.swizzle = PICK(swizzles);
  c.cluster_m = PICK(clusters);
  c.cluster_n = rnd(5) == 0 ? 2 : 1;
  c.order = rnd(2) ? SCHED_ALONG_M : SCHED_ALONG_N;
  SchedDecomp d = (SchedDecomp)(i % 4);
  SchedReduction red = (SchedReduction)(i / 4 % 2);
  set_ctx("combo %u: %llux%llux%llu l%llu tile %ux%ux%u workers %u swizzle %u cluster %ux%u "
          "%s %s %s",
          i, (unsigned long long)m, (unsigned long long)n, (unsigned long long)k,
          (unsigned long long)l, t[0], t[1], t[2], c.workers, c.swizzle, c.cluster_m, c.cluster_n,
          c.order == SCHED_ALONG_M ? "along-m" : "along-n", sched_decomp_name(d),
          sched_reduction_name(red));
  SchedRaster r;
  CHECK(sched_raster_init(&r, c.tiles_m, c.tiles_n, c.tiles_l, c.cluster_m, c.cluster_n, c.swizzle,
                          c.order, NULL));
  prop_raster(&r, c.swizzle);
  prop_persistent(&c);
  prop_streamk(&c, d, red);
  n_combos++;
}

/* Small grids exhaustively: every shape up to 9x9, every swizzle and cluster. */
static void prop_raster_small(void) {
  static const uint32_t swz[] = {1, 2, 3, 4, 8};
  for (uint32_t tm = 1; tm <= 9; tm++)
    for (uint32_t tn = 1; tn <= 9; tn++)
      for (uint32_t si = 0; si < 5; si++)
        for (uint32_t cl = 1; cl <= 4; cl *= 2)
          for (int o = 0; o < 2; o++) {
            SchedRaster r;
            set_ctx("raster %ux%u swizzle %u cluster %u order %d", tm, tn, swz[si], cl, o);
            CHECK(sched_raster_init(&r, tm, tn, 1 + (tm + tn) % 2, cl, 1 + (tm == tn), swz[si],
                                    (SchedOrder)o, NULL));
            prop_raster(&r, swz[si]);
          }
}

/* StreamK on tiny problems with min_k 1, where tiles straddle many units. */
static void prop_streamk_small(void) {
  for (uint32_t T = 1; T <= 12; T++)
    for (uint32_t K = 1; K <= 13; K += 3)
      for (uint32_t W = 1; W <= 14; W += 3)
        for (int d = 0; d < 4; d++) {
          SchedConfig c;
          sched_config_init(&c, SCHED_STREAMK);
          c.tiles_m = T, c.tiles_k = K, c.workers = W, c.acc_tile_bytes = 4096;
          set_ctx("small streamk T %u K %u W %u %s", T, K, W, sched_decomp_name(d));
          prop_streamk(&c, (SchedDecomp)d, (SchedReduction)(T % 2));
          n_combos++;
        }
}

/* }====================================================================== */

int main(void) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  golden_layout();
  golden_raster();
  golden_streamk();
  golden_heuristic();
  golden_fixup_roles();
  golden_persistent();
  golden_errors();
  golden_tl_past_end();
  golden_render();
  prop_raster_small();
  prop_streamk_small();
  for (uint32_t i = 0; i < 3000; i++)
    prop_combo(i);
  for (uint32_t i = 0; i < 4000; i++)
    prop_tl_stateless(i);
  free(pieces);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  printf("test_sched: %ld combinations (plans: %ld data-parallel, %ld split-k, %ld streamk; "
         "%ld pieces, %ld fixup models), %ld TileLang stateless-vs-stateful cases, %ld checks, "
         "%ld failures (%.2f s)\n",
         n_combos, n_decomp[SCHED_DECOMP_DATA_PARALLEL], n_decomp[SCHED_DECOMP_SPLIT_K],
         n_decomp[SCHED_DECOMP_STREAMK], n_pieces_total, n_models, n_tl_cases, n_checks, n_fail,
         secs);
  return n_fail ? 1 : 0;
}
