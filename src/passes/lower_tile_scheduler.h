/*
** lower_tile_scheduler.h -- the state shared by the four files of the
** `lower-tile-scheduler` pass: lower_tile_scheduler.c (the driver and the
** scheduler ops), _plan.c (planning the params ops and every check before the
** IR changes), _convert.c (work tiles through control flow as their fields)
** and _fixup.c (the StreamK fixup). The arithmetic is src/sched/worker.c's,
** built through the IR backend of staged integers.
*/
#ifndef TILUA_LOWER_TILE_SCHEDULER_H
#define TILUA_LOWER_TILE_SCHEDULER_H

#include "../dialects/cutlass.h"
#include "../sched/worker.h"
#include "rewrite.h"

/* K_SM100 (the SM100 StreamK variant) lowers as K_SK. */
enum {
  K_DP = SCHED_DATA_PARALLEL,
  K_SP = SCHED_STATIC_PERSISTENT,
  K_SK = SCHED_STREAMK,
  K_SM100 = CUT_SCHED_SM100_STREAMK
};

/* One params op: its plan (or its runtime raster) and what the fixup needs. */
typedef struct Sched {
  IrOp *op;
  int kind;     /* K_DP, K_SP or K_SK */
  bool planned; /* constant operands: plan is the reference's plan */
  SchedPlan plan;
  SchedOrder order;
  uint32_t cluster_m, cluster_n, swizzle, tiles_per_round;
  uint64_t acc_bytes;
  SRaster raster; /* not planned: the raster built at the params op */
  SInt grid;
} Sched;

typedef struct Handle {
  Sched *s;
  bool pull;
  IrValue *response;
} Handle;

typedef struct Low {
  Rewriter rw;               /* first: rw_each_kernel hands out a Rewriter * */
  StageIr st;                /* the staged arithmetic, built at rw.b */
  PtrMap scheds;             /* params value -> Sched */
  PtrMap handles;            /* handle value -> Handle */
  PtrMap packs;              /* pack casts (op -> op) */
  IrOpVec packlist, unpacks; /* the casts of the kernel being lowered */
} Low;

#define LTS_STAGE(L) (&(L)->st.st)

static inline Sched *lts_sched_of(Low *L, IrValue *v) { return ptrmap_get(&L->scheds, v); }
static inline Handle *lts_handle_of(Low *L, IrValue *v) { return ptrmap_get(&L->handles, v); }
static inline bool lts_is_wti(const IrType *t) {
  return ir_type_is_dialect(t, IR_DTY_CUTLASS_WORK_TILE_INFO);
}

/* {=== op groups (lower_tile_scheduler.c) */
bool lts_is_sched_op(const IrOp *op); /* the cutlass.tile_scheduler family, MODS probes included */
bool lts_is_mods_op(const IrOp *op);
bool lts_is_params_op(const IrOp *op);
bool lts_is_work_create_op(const IrOp *op);
/* }=== */

/* {=== planning and checks before any change (lower_tile_scheduler_plan.c) */
bool lts_check_op(IrOp *op, void *L); /* walk callback: plans params, records handles */
/* Threads that run a fixup: its executor set (whole warps), else the block. */
int64_t lts_fixup_threads(const IrOp *op);
/* The raster and grid of an unplanned params op, built in front of it. */
void lts_build_runtime_raster(Low *L, Sched *s);
/* }=== */

/* {=== work tiles through control flow (lower_tile_scheduler_convert.c) */
/* The fields a work tile of type t carries, and their count. */
const uint8_t *lts_carried(const IrType *t, uint32_t *n);
/* fields -> work tile, where the builder is. */
IrValue *lts_pack(Low *L, const SWork *w, const IrType *t);
/* The fields of a work tile operand of user: the operands of its pack. */
bool lts_fields_of(Low *L, IrOp *user, IrValue *v, SWork *w);
/* Collect the ops to rewrite and expand the region ops and terminators that
** carry work tiles; after the scheduler ops are lowered, fold the casts away. */
typedef struct LtsCollect {
  IrOpVec regions, terms, sched;
} LtsCollect;
bool lts_collect_op(IrOp *op, void *c);
void lts_expand(Low *L, LtsCollect *c);
void lts_fold_casts(Low *L);
/* }=== */

/* {=== the StreamK fixup (lower_tile_scheduler_fixup.c) */
bool lts_check_fixup(IrOp *op, const Sched *s);
bool lts_lower_fixup(Low *L, IrOp *op);
/* }=== */

#endif
