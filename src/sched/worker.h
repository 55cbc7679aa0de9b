/*
** worker.h -- the per-worker scheduler arithmetic, written once over staged
** integers (stage.h): raster unpack, data-parallel and persistent tiles, the
** TileLang surface, StreamK unit ranges, pieces and the cursor, fixup roles
** and workspace offsets.
**
** Three callers instantiate it: the host reference (sched.c, streamk.c: no
** backend, every integer known), lower-tile-scheduler (the IR backend, with
** the plan's numbers known and the worker's values not) and the Lua surface
** tl.sched.persistent (l_sched.c: Lua integers known, IR values not).
**
** The code is branch-free where a value may be unknown: both sides of a
** choice are computed and a select picks one (a known condition picks without
** building). Branches on the plan (the decomposition, the reduction) are C.
*/
#ifndef TILUA_SCHED_WORKER_H
#define TILUA_SCHED_WORKER_H

#include "sched.h"
#include "stage.h"

/* The fields of a work tile. A kind computes some of them; the others are
** absent (bits 0). */
typedef enum SchedField {
  SF_LINEAR, /* linear tile id (data-parallel, persistent) or StreamK unit */
  SF_M,
  SF_N,
  SF_L,
  SF_TILE_IDX, /* position in the pipeline round, or StreamK output tile */
  SF_K_START,
  SF_K_COUNT,
  SF_SPLIT,
  SF_EXPECTED,
  SF_VALID, /* width 1: SF_VALID .. SF_INC_PIPE */
  SF_SEPARATE,
  SF_FINAL,
  SF_INC_PIPE,
  SF_CUR_UNIT, /* the StreamK cursor after this piece */
  SF_CUR_LO,
  SF_CUR_HI,
  SF__COUNT
} SchedField;

typedef struct SWork {
  SInt f[SF__COUNT];
} SWork;

/* A raster record (SchedRaster) of staged integers. */
typedef struct SRaster {
  SInt grid_m, grid_n, fast, slow, swizzle, per_l, total;
  SchedOrder order;
} SRaster;

/* {=== raster, data-parallel, static persistent, TileLang */
/* sched_raster_init's arithmetic; the host checks the counts first. */
SRaster sw_raster_shape(Stage *s, SInt tiles_m, SInt tiles_n, SInt tiles_l, SInt cluster_m,
                        SInt cluster_n, SInt swizzle, SchedOrder order);
SRaster sw_raster_known(const SchedRaster *r);
/* linear -> SF_M, SF_N, SF_L in cluster tiles. */
void sw_raster_unpack(Stage *s, const SRaster *r, SInt linear, SWork *w);
/* TileLang's coord: tile_id -> SF_M, SF_N (SF_L 0) of one batch, the swizzle
** as given; out of range past the end. */
void sw_tl_coord(Stage *s, const SRaster *r, SInt swizzle, SInt tile_id, SWork *w);
/* The tile at linear: its coordinates, SF_LINEAR, SF_TILE_IDX, SF_VALID
** (linear < total) and SF_INC_PIPE (false). */
void sw_work_at(Stage *s, const SRaster *r, SInt linear, SInt tile_idx, SWork *w);
/* The next tile after t: linear + grid, or *pulled (the pull model's id); the
** tile just finished closes a pipeline round when tile_idx + 1 == tiles_per_round. */
void sw_persistent_advance(Stage *s, const SRaster *r, SInt grid, SInt tiles_per_round,
                           const SWork *t, const SInt *pulled, SWork *w);
/* Workers launched: every tile (data-parallel), else min(workers, total). */
SInt sw_persistent_grid(Stage *s, SchedKind kind, SInt workers, SInt total);
/* m * cluster + rank: a CTA's tile row from its cluster row (sched_cta_tile, TileLang's bx). */
SInt sw_block_m(Stage *s, SInt m, SInt cluster, SInt rank);
/* TileLang's next_tile: linear += grid, iter += 1. */
void sw_tl_next(Stage *s, SInt grid, SInt *linear, SInt *iter);
/* }=== */

/* {=== StreamK, over a host plan (its numbers known) */
void sw_sk_unit_range(Stage *s, const SchedStreamK *p, SInt u, SInt *lo, SInt *hi);
void sw_sk_tile_units(Stage *s, const SchedStreamK *p, SInt t, SInt *first, SInt *count);
/* The first piece of unit u (< units): every field but the cursor's. */
void sw_streamk_tile(Stage *s, const SchedStreamK *p, SInt u, SWork *w);
/* The cursor of a worker before its first piece. */
void sw_cursor_begin(Stage *s, const SchedStreamK *p, SInt worker, SInt *u, SInt *lo, SInt *hi);
/* The next piece from cursor (u, lo, hi): every field, SF_VALID false when
** the worker is done, SF_CUR_* the cursor after it. */
void sw_cursor_next(Stage *s, const SchedStreamK *p, SInt u, SInt lo, SInt hi, SWork *w);

/* sched_fixup_role's values (SchedFixup) of piece w. */
typedef struct SFixup {
  SInt participates, wait, reset, wait_value, read_first, read_count, write, write_slot, epilogue;
} SFixup;
SFixup sw_fixup_role(Stage *s, const SchedStreamK *p, const SWork *w);
/* Does a role read at most one slot (deterministic: the running sum)? Else
** the final split reads up to max_splits - 1. */
bool sw_fixup_reads_one(const SchedStreamK *p);
/* The counter index of CTA rank of split tile `tile`: tile * ctas + rank (32 bits). */
SInt sw_cta_tile(Stage *s, const SchedStreamK *p, SInt tile, SInt rank);
/* sched_slot_offset: ((tile * ctas + rank) * (max_splits - 1) + slot) * acc_tile_bytes (64 bits).
 */
SInt sw_slot_offset(Stage *s, const SchedStreamK *p, uint64_t acc_tile_bytes, SInt tile, SInt rank,
                    SInt slot);
/* }=== */

#endif
