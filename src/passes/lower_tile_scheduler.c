/*
** lower_tile_scheduler.c -- the `lower-tile-scheduler` pass: every
** cutlass.tile_scheduler.* op but the MODS probes becomes arith + scf (plus a
** tile.load for the pull model and, for the StreamK fixup, tile pointer ops,
** cutlass.generic_barrier and cutlass.block_striped ops that
** convert-cutlass-to-nvvm lowers next). The arithmetic is the reference's own:
** src/sched/worker.c over staged integers, with the plan's numbers known and
** the worker's values built as 32-bit unsigned arith (docs/schedulers.md,
** "The lowering"):
**
**   create_*_params          nothing left: the plan. Constant operands are
**                            planned here with sched_plan and the plan's scalars
**                            become constants; data-parallel and static
**                            persistent params with runtime operands compute the
**                            raster record (sw_raster_shape) in the kernel;
**                            StreamK needs constants (host planning)
**   create                   nothing left (pull model: its response pointer)
**   create_*_work_tile_info  sw_work_at (data-parallel, persistent), or
**                            sw_cursor_begin + sw_cursor_next
**   advance_to_next_work     sw_persistent_advance (data-parallel: the grid
**                            is every tile; pull model: the next id is loaded
**                            from the response buffer), or sw_cursor_next
**   work_tile_info.*         one field of the work tile
**   get_workspace_sizes      the plan's sizes (sched_workspace_sizes) as i64
**   fixup                    sw_fixup_role at run time (lower_tile_scheduler_fixup.c)
**
** A work tile becomes its fields (lower_tile_scheduler_convert.c). Everything
** is checked before the IR changes (lower_tile_scheduler_plan.c): on a
** diagnostic the module is left as it was.
*/
#include <stdlib.h>
#include <string.h>

#include "lower_tile_scheduler.h"

/* {======================================================================
** Op groups
** ======================================================================= */

bool lts_is_sched_op(const IrOp *op) {
  return op->kind >= OP_CUTLASS_SCHED_CREATE_DP_PARAMS && op->kind <= OP_CUTLASS_MODS_THROTTLE;
}
bool lts_is_mods_op(const IrOp *op) {
  return op->kind >= OP_CUTLASS_MODS_START && op->kind <= OP_CUTLASS_MODS_THROTTLE;
}
bool lts_is_params_op(const IrOp *op) {
  return op->kind >= OP_CUTLASS_SCHED_CREATE_DP_PARAMS &&
         op->kind <= OP_CUTLASS_SCHED_CREATE_SM100_SK_PARAMS;
}
bool lts_is_work_create_op(const IrOp *op) {
  return op->kind >= OP_CUTLASS_SCHED_CREATE_DP_WORK &&
         op->kind <= OP_CUTLASS_SCHED_CREATE_SM100_SK_WORK;
}
static bool is_accessor(const IrOp *op) {
  return op->kind >= OP_CUTLASS_WTI_M && op->kind <= OP_CUTLASS_WTI_INCREMENT_PIPE;
}

/* }====================================================================== */

/* {======================================================================
** Lowering the scheduler ops (phase 2)
** ======================================================================= */

/* The raster of a params op: the plan's (known), or the one built at run time. */
static SRaster raster_of(const Sched *s) {
  return s->planned ? sw_raster_known(&s->plan.persist.raster) : s->raster;
}

static SInt grid_of(const Sched *s) { return s->planned ? st_k(s->plan.grid) : s->grid; }

/* A data-parallel or persistent worker's first tile: the tile at its id. */
static void tile_first(Low *L, const Sched *s, IrValue *linear, SWork *w) {
  SRaster r = raster_of(s);
  sw_work_at(LTS_STAGE(L), &r, stage_ir_value(linear), st_k(0), w);
  w->f[SF_K_COUNT] =
      s->planned ? st_k(s->plan.cfg.tiles_k) : stage_ir_value(s->op->operands[3].value);
}

/* The next tile: by the grid stride, or (pull model) the id in the response buffer. */
static void tile_advance(Low *L, const Handle *h, const SWork *t, SWork *w) {
  const Sched *s = h->s;
  SRaster r = raster_of(s);
  SInt pulled, *next = NULL;
  if (h->pull) {
    IrOp *ld = rw_op(&L->rw, OP_TILE_LOAD, 1, &h->response, L->rw.i32);
    rw_set_bool(&L->rw, ld, "volatile", true);
    pulled = stage_ir_value(&ld->results[0]);
    next = &pulled;
  }
  sw_persistent_advance(LTS_STAGE(L), &r, grid_of(s), st_k(s->tiles_per_round), t, next, w);
  w->f[SF_K_COUNT] = t->f[SF_K_COUNT];
}

/* Replace the work tile result of op by a pack of w's carried fields. */
static void bind_work(Low *L, IrOp *op, const SWork *w) {
  IrValue *r = &op->results[0];
  ir_value_replace_all_uses(r, lts_pack(L, w, r->type));
}

static void lower_work_create(Low *L, IrOp *op) {
  Sched *s = lts_sched_of(L, op->operands[0].value);
  SWork w;
  memset(&w, 0, sizeof w);
  if (s->kind == K_SK) {
    SInt u, lo, hi;
    sw_cursor_begin(LTS_STAGE(L), &s->plan.sk, stage_ir_value(op->operands[1].value), &u, &lo, &hi);
    sw_cursor_next(LTS_STAGE(L), &s->plan.sk, u, lo, hi, &w);
  } else {
    tile_first(L, s, op->operands[1].value, &w);
  }
  bind_work(L, op, &w);
}

static bool lower_advance(Low *L, IrOp *op) {
  Handle *h = lts_handle_of(L, op->operands[0].value);
  SWork t, w;
  if (!lts_fields_of(L, op, op->operands[1].value, &t)) return false;
  memset(&w, 0, sizeof w);
  if (h->s->kind == K_SK)
    sw_cursor_next(LTS_STAGE(L), &h->s->plan.sk, t.f[SF_CUR_UNIT], t.f[SF_CUR_LO], t.f[SF_CUR_HI],
                   &w);
  else tile_advance(L, h, &t, &w);
  bind_work(L, op, &w);
  return true;
}

/* A field a work tile does not carry: whole tiles start at k 0 as the only
** split, and only persistent tiles clock the pipeline. */
static SInt derived_field(int f) {
  switch (f) {
  case SF_EXPECTED: return st_k(1);
  case SF_SEPARATE:
  case SF_INC_PIPE: return st_bool(false);
  case SF_FINAL: return st_bool(true);
  default: return st_k(0);
  }
}

static bool lower_accessor(Low *L, IrOp *op) {
  static const int8_t field_of[] = {SF_M,        SF_N,       SF_L,       SF_LINEAR,   SF_TILE_IDX,
                                    SF_K_START,  SF_K_COUNT, SF_SPLIT,   SF_EXPECTED, SF_VALID,
                                    SF_SEPARATE, SF_FINAL,   SF_INC_PIPE};
  SWork w;
  if (!lts_fields_of(L, op, op->operands[0].value, &w)) return false;
  int f = field_of[op->kind - OP_CUTLASS_WTI_M];
  SInt v = st_present(w.f[f]) ? w.f[f] : derived_field(f);
  ir_value_replace_all_uses(&op->results[0], st_materialize(LTS_STAGE(L), v));
  return true;
}

/* get_workspace_sizes: the plan's sizes (0 for data-parallel and persistent). */
static void lower_workspace(Low *L, IrOp *op) {
  Sched *s = lts_sched_of(L, op->operands[0].value);
  const SchedWorkspace *ws = &s->plan.ws;
  bool p = s->planned;
  uint64_t sizes[3] = {p ? ws->total : 0, p ? ws->reduction : 0, p ? ws->barriers : 0};
  for (int i = 0; i < 3; i++)
    ir_value_replace_all_uses(&op->results[i], rw_const(&L->rw, (int64_t)sizes[i], L->rw.i64));
}

/* }====================================================================== */

/* {======================================================================
** Driver
** ======================================================================= */

/* Lower one scheduler op in front of it; MODS probes are left alone. */
static bool lower_op(Low *L, IrOp *op) {
  rw_before(&L->rw, op);
  if (lts_is_params_op(op)) {
    Sched *s = lts_sched_of(L, &op->results[0]);
    if (!s->planned) lts_build_runtime_raster(L, s);
    return true;
  }
  if (lts_is_work_create_op(op)) return lower_work_create(L, op), true;
  if (is_accessor(op)) return lower_accessor(L, op);
  switch (op->kind) {
  case OP_CUTLASS_SCHED_ADVANCE: return lower_advance(L, op);
  case OP_CUTLASS_SCHED_WORKSPACE_SIZES: return lower_workspace(L, op), true;
  case OP_CUTLASS_SCHED_FIXUP: return lts_lower_fixup(L, op);
  default: return true; /* create: its handle is read through the map */
  }
}

/* A handle still read by MODS probes (which do not need it) becomes a
** zero-operand cast of its type, so that no scheduler op but the probes is
** left; it dies with them (pure: canonicalize removes it). */
static void detach_handle(Low *L, IrOp *op) {
  if (op->kind != OP_CUTLASS_SCHED_CREATE || !ir_value_has_uses(&op->results[0])) return;
  rw_before(&L->rw, op);
  ir_value_replace_all_uses(&op->results[0],
                            rw_op1(&L->rw, OP_UNREALIZED_CAST, 0, NULL, op->results[0].type));
}

/* Erase the lowered ops, users first. */
static void erase_lowered(Low *L, IrOpVec *ops) {
  for (size_t i = ops->n; i-- > 0;) {
    IrOp *op = ops->v[i];
    detach_handle(L, op);
    if (ir_op_results_unused(op)) ir_op_erase(op);
  }
}

/* Lower the scheduler ops of kernel k, once their plans and handles are recorded. */
static IrResult lower_planned(Low *L, IrOp *k) {
  LtsCollect c;
  memset(&c, 0, sizeof c);
  ir_walk_pre(k, lts_collect_op, &c);
  IrResult r = IR_OK;
  if (c.sched.n) {
    lts_expand(L, &c);
    for (size_t i = 0; i < c.sched.n && r == IR_OK; i++)
      if (!lower_op(L, c.sched.v[i])) r = IR_FAIL;
    if (r == IR_OK) {
      erase_lowered(L, &c.sched);
      lts_fold_casts(L);
    }
  }
  ir_opvec_free(&c.regions);
  ir_opvec_free(&c.terms);
  ir_opvec_free(&c.sched);
  return r;
}

/* One kernel; what the pass records about it goes with it. */
static IrResult lower_kernel(Rewriter *rw, IrOp *k) {
  Low *L = (Low *)rw;
  stage_ir_init(&L->st, &L->rw.b);
  IrResult r = ir_walk_pre(k, lts_check_op, L) ? lower_planned(L, k) : IR_FAIL;
  ptrmap_free(&L->scheds);
  ptrmap_free(&L->handles);
  ptrmap_free(&L->packs);
  ir_opvec_free(&L->unpacks);
  ir_opvec_free(&L->packlist);
  return r;
}

IrResult pass_lower_tile_scheduler(IrOp *module, IrPassCtx *pc) {
  Low L;
  return rw_run(&L.rw, sizeof L, module, pc, lower_kernel);
}

/* }====================================================================== */
