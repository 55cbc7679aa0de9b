/*
** sched.h -- the reference tile schedulers: which worker computes which
** output tile and which slice of K.
**
** One implementation shared by the host (launch planning, workspace
** allocation, the REPL picture), the lowering of cutlass.tile_scheduler.* and
** the Lua surface tl.sched.persistent (docs/schedulers.md; docs/provenance.md
** names the specifications followed).
**
** Two layers:
**   - planning (host only): sched_config_*, sched_plan, the *_init functions.
**     They validate, may loop, and fill flat records of uint32_t.
**   - per-worker functions: raster unpack, data-parallel tile, persistent
**     advance, the TileLang surface, StreamK unit ranges, the piece cursor,
**     fixup roles and workspace offsets. They are written once, over staged
**     integers, in worker.c (which also builds them into kernels); the
**     functions here are their host reading. Each is a small pure integer
**     computation over explicit records: no globals, no allocation, no
**     floating point, no loops.
**
** Widths: every count, id and k index a worker computes is uint32_t (the
** device does 32-bit integer arithmetic); the planner checks that every
** product the per-worker functions form (tile ids plus a grid stride, the
** StreamK flat k index) fits in 32 bits and refuses the plan otherwise.
** Byte sizes and workspace offsets are uint64_t.
**
** Coordinates (m, n, l) returned by the schedulers are in *cluster tiles*:
** the grid is first reshaped to ceil(tiles_m / cluster_m) x
** ceil(tiles_n / cluster_n); sched_cta_tile adds a CTA's rank in its cluster.
*/
#ifndef TILUA_SCHED_H
#define TILUA_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct StrBuf; /* ir/ir.h */

/* {======================================================================
** Kinds and options
** ======================================================================= */

/* X-lists X(enumerator, "spelling"): the C enums below, the names of
** sched.c, and the attribute values of the cutlass dialect (dialects/enums.h). */
#define SCHED_ENUM_ID(id, name) id,

/* The scheduler kinds: one per cutlass.tile_scheduler.* op family. */
#define SCHED_KIND_LIST(X)                                                                         \
  X(SCHED_DATA_PARALLEL, "data_parallel")         /* one output tile per CTA/cluster */            \
  X(SCHED_STATIC_PERSISTENT, "static_persistent") /* resident workers stride over the tiles */     \
  X(SCHED_STREAMK, "streamk") /* K split across workers, fixed up in a workspace */
typedef enum SchedKind { SCHED_KIND_LIST(SCHED_ENUM_ID) SCHED__NKINDS } SchedKind;

/* How the StreamK kind decomposes the work (CUTLASS's DecompositionMode).
** HEURISTIC is only an input: a plan always records the decomposition chosen. */
#define SCHED_DECOMP_LIST(X)                                                                       \
  X(SCHED_DECOMP_HEURISTIC, "heuristic")                                                           \
  X(SCHED_DECOMP_DATA_PARALLEL, "data_parallel")                                                   \
  X(SCHED_DECOMP_SPLIT_K, "split_k")                                                               \
  X(SCHED_DECOMP_STREAMK, "streamk")
typedef enum SchedDecomp { SCHED_DECOMP_LIST(SCHED_ENUM_ID) SCHED__NDECOMPS } SchedDecomp;

/* The order in which the StreamK partials of one tile are added. */
#define SCHED_REDUCTION_LIST(X)                                                                    \
  X(SCHED_REDUCE_DETERMINISTIC, "deterministic")      /* turnstile: prefix sums in K order */      \
  X(SCHED_REDUCE_NONDETERMINISTIC, "nondeterministic") /* partials published in any order */
typedef enum SchedReduction {
  SCHED_REDUCTION_LIST(SCHED_ENUM_ID) SCHED__NREDUCTIONS
} SchedReduction;

/* Traversal order: which axis of the (cluster) tile grid varies fastest. */
#define SCHED_ORDER_LIST(X)                                                                        \
  X(SCHED_ALONG_M, "along_m") /* column major: m fastest (TileLang column_major=True) */          \
  X(SCHED_ALONG_N, "along_n") /* row major: n fastest */
typedef enum SchedOrder { SCHED_ORDER_LIST(SCHED_ENUM_ID) SCHED__NORDERS } SchedOrder;

const char *sched_kind_name(SchedKind k);
const char *sched_decomp_name(SchedDecomp d);
const char *sched_reduction_name(SchedReduction r);
/* Name -> enum; false if the name is unknown. Accepts the names above
** plus "dp", "persistent", "splitk", "det", "nondet". */
bool sched_kind_parse(const char *s, SchedKind *out);
bool sched_decomp_parse(const char *s, SchedDecomp *out);
bool sched_reduction_parse(const char *s, SchedReduction *out);

/* }====================================================================== */

/* {======================================================================
** The 48-byte Params record (CUTLASS's tile-scheduler params)
** ======================================================================= */

/* Passed to every scheduler body as a grid-constant kernel argument.
** workspace_ptr is the only 64-bit field; reserved keeps it 8-aligned and
** is always 0. k_split_count is 0 for data-parallel and static persistent;
** for StreamK it is the largest number of K pieces of any output tile (1
** when the plan fell back to data-parallel): the stride of the partial slots
** in the workspace. num_tiles_m/n count CTA tiles, num_tiles_k the k tiles of
** one output tile, total_ctas the CTAs launched. */
typedef struct SchedParams {
  uint32_t num_tiles_m;          /* +0x00 */
  uint32_t num_tiles_n;          /* +0x04 */
  uint32_t num_tiles_k;          /* +0x08 */
  uint32_t cluster_shape_x;      /* +0x0C */
  uint32_t cluster_shape_y;      /* +0x10 */
  uint32_t cluster_shape_z;      /* +0x14 */
  uint32_t num_ctas_per_cluster; /* +0x18 */
  uint32_t total_ctas;           /* +0x1C */
  uint64_t workspace_ptr;        /* +0x20, 0 if workspace-free */
  uint32_t k_split_count;        /* +0x28, StreamK only */
  uint32_t reserved;             /* +0x2C */
} SchedParams;

_Static_assert(sizeof(SchedParams) == 48, "SchedParams is 48 bytes");
_Static_assert(offsetof(SchedParams, num_tiles_m) == 0x00, "num_tiles_m at +0x00");
_Static_assert(offsetof(SchedParams, num_tiles_n) == 0x04, "num_tiles_n at +0x04");
_Static_assert(offsetof(SchedParams, num_tiles_k) == 0x08, "num_tiles_k at +0x08");
_Static_assert(offsetof(SchedParams, cluster_shape_x) == 0x0C, "cluster_shape_x at +0x0C");
_Static_assert(offsetof(SchedParams, cluster_shape_y) == 0x10, "cluster_shape_y at +0x10");
_Static_assert(offsetof(SchedParams, cluster_shape_z) == 0x14, "cluster_shape_z at +0x14");
_Static_assert(offsetof(SchedParams, num_ctas_per_cluster) == 0x18, "num_ctas_per_cluster");
_Static_assert(offsetof(SchedParams, total_ctas) == 0x1C, "total_ctas at +0x1C");
_Static_assert(offsetof(SchedParams, workspace_ptr) == 0x20, "workspace_ptr at +0x20");
_Static_assert(offsetof(SchedParams, k_split_count) == 0x28, "k_split_count at +0x28");
_Static_assert(offsetof(SchedParams, reserved) == 0x2C, "reserved at +0x2C");

/* }====================================================================== */

/* {======================================================================
** Raster: linear id -> (m, n, l) cluster-tile coordinates
** ======================================================================= */

/* The grid is reshaped to clusters, then split per batch l (slowest), then
** each l-slice is cut along its slow axis into panels of `swizzle` lines
** (the last panel narrower when the slow extent is not a multiple); a panel is
** walked fast-axis-major with the slow index varying fastest inside it. With
** swizzle 1 this is plain column-major (ALONG_M) or row-major (ALONG_N). */
typedef struct SchedRaster {
  uint32_t tiles_m, tiles_n, tiles_l; /* CTA tiles of the problem, batches */
  uint32_t cluster_m, cluster_n;      /* cluster extent in tiles along M, N */
  uint32_t swizzle;                   /* panel width, clamped to [1, slow] */
  uint32_t order;                     /* SchedOrder */
  uint32_t grid_m, grid_n;            /* ceil(tiles / cluster) */
  uint32_t fast, slow;                /* extents of the fast and panelled axes */
  uint32_t per_l;                     /* grid_m * grid_n */
  uint32_t total;                     /* per_l * tiles_l: cluster tiles */
} SchedRaster;

typedef struct SchedCoord {
  uint32_t m, n, l;
} SchedCoord;

/* Fill r; false (with *err) if a count is 0 or the grid has 2^32 tiles. */
bool sched_raster_init(SchedRaster *r, uint32_t tiles_m, uint32_t tiles_n, uint32_t tiles_l,
                       uint32_t cluster_m, uint32_t cluster_n, uint32_t swizzle, SchedOrder order,
                       const char **err);
/* The scheduler specification's raster_unpack, batches included. Defined for every id without
** dividing by zero: an id >= total decodes to a batch l >= tiles_l. */
SchedCoord sched_raster_unpack(const SchedRaster *r, uint32_t linear);
/* The CTA tile of rank (rank_m, rank_n) in cluster tile c; false when the
** cluster overhangs the grid there (that CTA skips the tile). */
bool sched_cta_tile(const SchedRaster *r, SchedCoord c, uint32_t rank_m, uint32_t rank_n,
                    SchedCoord *out);

/* }====================================================================== */

/* {======================================================================
** Data-parallel and static persistent
** ======================================================================= */

/* One scheduled output tile of the data-parallel and persistent kinds. */
typedef struct SchedWork {
  uint32_t linear;   /* linearized cluster-tile id */
  uint32_t m, n, l;  /* its cluster-tile coordinates */
  uint32_t tile_idx; /* position in the pipeline round (persistent) */
  bool valid;        /* linear < total */
} SchedWork;

/* A resident-worker iterator: worker w visits w, w + grid, w + 2 grid, ... */
typedef struct SchedPersistent {
  SchedRaster raster;
  uint32_t grid;            /* workers (clusters) striding over the tiles */
  uint32_t tiles_per_round; /* tiles_per_pipeline_round; 0 never clocks */
  uint32_t tl_swizzle;      /* swizzle_size as given: TileLang's coord does not clamp it */
} SchedPersistent;

/* Data-parallel: cluster `linear` computes tile `linear` (0 <= linear < total). */
SchedWork sched_dp_tile(const SchedRaster *r, uint32_t linear);
/* Static persistent: a worker's first tile, and the advance by the grid width.
** *increment_pipe is set when the tile just finished closes a pipeline round. */
SchedWork sched_persistent_first(const SchedPersistent *p, uint32_t worker);
SchedWork sched_persistent_advance(const SchedPersistent *p, SchedWork t, bool *increment_pipe);

/* TileLang's PersistentTileScheduler. The stateful form keeps its
** four scalars here (m_idx is the cluster row); the stateless form is
** sched_tl_coord alone. Build p with sched_tl_make.
**
** sched_tl_coord is TileLang's coord: one batch, no wrap. An id at or past
** the number of tiles decodes to an out-of-range coordinate (m_idx >= the
** cluster rows or n_idx >= n_tiles), never to another tile, so that
** TileLang's stateless loop `for w < waves: (m, n) = coord(workers * w + worker);
** if in bounds: compute` computes every tile exactly once, as the stateful
** loop does. sched_tl_make refuses a fast extent * swizzle over 2^31 - 1
** (TileLang does this arithmetic in int32). */
typedef struct SchedTlState {
  uint32_t m_idx, n_idx, linear_idx, current_iter;
} SchedTlState;

bool sched_tl_make(SchedPersistent *p, uint32_t m_tiles, uint32_t n_tiles, uint32_t workers,
                   uint32_t swizzle, bool column_major, uint32_t cluster, const char **err);
void sched_tl_init(const SchedPersistent *p, SchedTlState *s, uint32_t worker);
bool sched_tl_valid(const SchedPersistent *p, const SchedTlState *s);
void sched_tl_next_tile(const SchedPersistent *p, SchedTlState *s);
SchedCoord sched_tl_coord(const SchedPersistent *p, uint32_t tile_id);
/* bx = m_idx * cluster + rank (the caller's line in TileLang's scheduler). */
uint32_t sched_tl_block_m(const SchedPersistent *p, uint32_t m_idx, uint32_t rank);

/* }====================================================================== */

/* {======================================================================
** StreamK
** ======================================================================= */

/* A flat record of uint32_t, computed once on the host (sched_streamk_init)
** and read by every worker. Work units: ids [0, sk_units) are StreamK units,
** each a contiguous range of the flat k space [0, sk_tiles * k_tiles) (or,
** for SPLIT_K, split u % splits of tile u / splits); ids [sk_units, units)
** are data-parallel tail tiles sk_tiles + (u - sk_units), full K. Worker w
** of `grid` runs units w, w + grid, ...; StreamK units all fall in the first
** round (sk_units <= grid), split-K units may take several rounds. Every
** fixup wait is on a lower unit id, so co-resident workers cannot deadlock. */
typedef struct SchedStreamK {
  SchedRaster raster;
  uint32_t tiles;       /* output (cluster) tiles = raster.total */
  uint32_t k_tiles;     /* k tiles per output tile */
  uint32_t workers;     /* worker count the plan was made for (one wave) */
  uint32_t decomp;      /* chosen SchedDecomp, never HEURISTIC */
  uint32_t reduction;   /* SchedReduction */
  uint32_t min_k;       /* minimum k tiles per StreamK unit */
  uint32_t splits;      /* SPLIT_K: pieces per tile; otherwise 1 */
  uint32_t sk_tiles;    /* tiles [0, sk_tiles) are split */
  uint32_t sk_units;    /* units covering them */
  uint32_t dp_tiles;    /* data-parallel tail tiles = tiles - sk_tiles */
  uint32_t units;       /* sk_units + dp_tiles */
  uint32_t k_per_small; /* k tiles of a small StreamK unit */
  uint32_t big_units;   /* units [0, big_units) take k_per_small + 1 */
  uint32_t max_splits;  /* most pieces any tile has (1 if none split) */
  uint32_t grid;        /* workers launched: min(workers, units) */
} SchedStreamK;

/* The plan: decomposition chosen by the heuristic or forced. min_k 0 means
** 8. false (with *err) on a zero count or a flat k space over 32 bits. */
bool sched_streamk_init(SchedStreamK *p, const SchedRaster *r, uint32_t k_tiles, uint32_t workers,
                        SchedDecomp decomp, uint32_t splits, SchedReduction reduction,
                        uint32_t min_k, const char **err);

/* One piece of a unit: a k range of one output tile. */
typedef struct SchedSkWork {
  uint32_t unit;              /* the work unit it belongs to */
  uint32_t tile_idx;          /* linear output (cluster) tile */
  uint32_t m, n, l;           /* its cluster-tile coordinates */
  uint32_t k_tile_start;      /* first k tile within the tile */
  uint32_t k_tile_count;      /* k tiles in this piece, >= 1 */
  uint32_t split_idx;         /* rank of the piece among the tile's, in K order */
  uint32_t expected_splits;   /* number of pieces of this tile */
  bool is_separate_reduction; /* k_tile_count != k_tiles (partial) */
  bool is_final_split;        /* covers the last k tile: reduces, epilogue */
} SchedSkWork;

/* The flat k range [*lo, *hi) of StreamK unit u < sk_units. */
void sched_sk_unit_range(const SchedStreamK *p, uint32_t u, uint32_t *lo, uint32_t *hi);
/* The first unit and the number of units (pieces) covering tile t. */
void sched_sk_tile_units(const SchedStreamK *p, uint32_t t, uint32_t *first, uint32_t *count);
/* The scheduler specification's streamk_tile: the first piece unit u (< units) processes. */
SchedSkWork sched_streamk_tile(const SchedStreamK *p, uint32_t u);

/* Iterates every piece one worker processes, without allocation: its units
** in increasing id, and inside a unit the pieces from the highest k down, so
** that a unit writes the partial heading its last tile before it waits, as
** final split, on the tile it started in the middle of. */
typedef struct SchedCursor {
  uint32_t unit;   /* current unit; >= units when done */
  uint32_t lo, hi; /* flat k range of the current unit still to hand out */
} SchedCursor;

void sched_cursor_begin(const SchedStreamK *p, SchedCursor *c, uint32_t worker);
bool sched_cursor_next(const SchedStreamK *p, SchedCursor *c, SchedSkWork *out);

/* }====================================================================== */

/* {======================================================================
** Workspace and fixup
** ======================================================================= */

#define SCHED_WORKSPACE_ALIGN 128

/* Layout: [reduction: partial slots][pad to 128][barriers: uint32 each].
** Every CTA of a split tile owns (max_splits - 1) accumulator slots and one
** barrier counter; split tiles are 0 .. sk_tiles - 1. The host zeroes the
** barriers before the first launch; each final split resets its counter. */
typedef struct SchedWorkspace {
  uint64_t reduction;      /* bytes of partial slots */
  uint64_t barriers;       /* bytes of barrier counters */
  uint64_t barrier_offset; /* reduction rounded up to 128 */
  uint64_t total;          /* (barrier_offset + barriers) rounded up to 128 */
  uint32_t slots_per_tile; /* max_splits - 1 per CTA tile */
  uint32_t barrier_count;  /* sk_tiles * CTAs per cluster */
} SchedWorkspace;

/* Data-parallel and static persistent: all zero. */
SchedWorkspace sched_workspace_none(void);
SchedWorkspace sched_workspace_sizes(const SchedStreamK *p, uint64_t acc_tile_bytes);
/* Byte offsets into the workspace of a slot and of a barrier counter of
** CTA `rank` (0 .. ctas per cluster - 1) of split tile `tile`. */
uint64_t sched_slot_offset(const SchedStreamK *p, uint64_t acc_tile_bytes, uint32_t tile,
                           uint32_t rank, uint32_t slot);
uint64_t sched_barrier_offset(const SchedStreamK *p, uint64_t acc_tile_bytes, uint32_t tile,
                              uint32_t rank);

/* What one piece does at fixup, in this order: wait until the tile's barrier
** equals wait_value (acquire); add slots [read_first, read_first + read_count)
** to its accumulator; store it to write_slot and add 1 to the barrier
** (release); or, as final split, run the epilogue and reset the barrier. */
typedef struct SchedFixup {
  bool participates; /* false: a whole tile, no fixup */
  bool wait;         /* wait for barrier == wait_value */
  bool reset;        /* the wait also resets the barrier (the final split's) */
  uint32_t wait_value;
  uint32_t read_first, read_count;
  bool write; /* store to write_slot and arrive */
  uint32_t write_slot;
  bool epilogue; /* final split: epilogue, then barrier = 0 */
} SchedFixup;

SchedFixup sched_fixup_role(const SchedStreamK *p, const SchedSkWork *w);

/* A CPU model of the whole fixup: runs every worker's cursor against a
** model workspace, interleaving workers by a seeded generator and always
** preferring to step a worker that is not blocked. Records per split tile
** the worker that reduced it and per slot the worker that wrote it; checks
** every rule of the protocol. Host only (allocates). */
typedef struct SchedFixupModel {
  uint32_t tiles;          /* sk_tiles */
  uint32_t slots_per_tile; /* max_splits - 1 */
  uint32_t *reducer;       /* [tiles] worker that ran the epilogue */
  uint32_t *epilogues;     /* [tiles] epilogues run (must be 1) */
  uint32_t *slot_writer;   /* [tiles * slots_per_tile] worker, or UINT32_MAX */
  uint64_t steps;          /* pieces executed */
  bool ok;
  char error[160]; /* first violation when !ok */
} SchedFixupModel;

bool sched_fixup_model_run(const SchedStreamK *p, uint64_t seed, SchedFixupModel *m);
void sched_fixup_model_free(SchedFixupModel *m);

/* }====================================================================== */

/* {======================================================================
** Planning: configuration -> everything the host launches with
** ======================================================================= */

typedef struct SchedConfig {
  SchedKind kind;
  uint32_t tiles_m, tiles_n, tiles_l; /* CTA tiles; batches */
  uint32_t tiles_k;                   /* k tiles per output tile */
  uint32_t cluster_m, cluster_n;      /* cluster shape in CTAs */
  uint32_t swizzle;
  SchedOrder order;
  uint32_t workers;         /* resident clusters (SMs / cluster size) */
  uint32_t tiles_per_round; /* static persistent: tiles_per_pipeline_round */
  SchedDecomp decomp;       /* StreamK kind */
  uint32_t splits;          /* SPLIT_K */
  SchedReduction reduction;
  uint32_t min_k;          /* 0 = 8 */
  uint64_t acc_tile_bytes; /* bytes of one CTA's accumulator tile */
} SchedConfig;

/* Defaults: 1x1x1 tiles and cluster, swizzle 1, ALONG_M, 1 worker,
** heuristic decomposition, deterministic reduction, min_k 8. */
void sched_config_init(SchedConfig *c, SchedKind kind);
/* Tile counts from a GEMM of m x n x k (batch l) and a tile shape, and an
** f32 accumulator tile; false if a size is 0. */
bool sched_config_gemm(SchedConfig *c, uint64_t m, uint64_t n, uint64_t k, uint64_t l,
                       uint32_t tile_m, uint32_t tile_n, uint32_t tile_k);

typedef struct SchedPlan {
  SchedConfig cfg;
  SchedPersistent persist; /* raster and grid of every kind */
  SchedStreamK sk;         /* StreamK kind only */
  SchedWorkspace ws;
  SchedParams params; /* workspace_ptr 0 until the host sets it */
  uint32_t grid;      /* workers (clusters) launched */
} SchedPlan;

bool sched_plan(SchedPlan *p, const SchedConfig *c, const char **err);
/* The Params factory (the scheduler specification's). */
SchedParams sched_params_make(const SchedPlan *p, uint64_t workspace_ptr);
/* The worker that finishes cluster tile t (the final split's), and the
** number of workers that contribute to it. */
uint32_t sched_plan_owner(const SchedPlan *p, uint32_t t, uint32_t *contributors);

/* }====================================================================== */

/* {======================================================================
** Pictures: text grid (optionally ANSI 256-colour) and SVG
** ======================================================================= */

enum {
  SCHED_RENDER_COLOR = 1,    /* ANSI 256-colour background blocks */
  SCHED_RENDER_NO_SPLITS = 2 /* omit the list of K splits */
};

void sched_render_text(struct StrBuf *sb, const SchedPlan *p, unsigned flags);
void sched_render_svg(struct StrBuf *sb, const SchedPlan *p);

/* }====================================================================== */

#endif
