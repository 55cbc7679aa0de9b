/*
** lower_tile_scheduler_plan.c -- what lower-tile-scheduler does before the IR
** changes (phase 0): plan every params op (the reference's sched_plan for
** constant operands), record the handles, and check that every scheduler
** value is made and used where the lowering can rewrite it. On a diagnostic
** the module is left as it was.
*/
#include <stdlib.h>
#include <string.h>

#include "lower_tile_scheduler.h"

#define U32MAX 0xffffffffu

/* {======================================================================
** Planning the params ops
** ======================================================================= */

static const char *const operand_names[] = {"tiles_m", "tiles_n", "tiles_l", "tiles_k", "workers"};

static int params_kind(const IrOp *op) {
  switch (op->kind) {
  case OP_CUTLASS_SCHED_CREATE_DP_PARAMS: return K_DP;
  case OP_CUTLASS_SCHED_CREATE_SP_PARAMS: return K_SP;
  case OP_CUTLASS_SCHED_CREATE_SK_PARAMS: return K_SK;
  default: return K_SM100;
  }
}

/* The attributes of a params op (verified: in range) into a configuration. */
static void params_attrs(IrOp *op, Sched *s, SchedConfig *c) {
  IrAttrs_CUTLASS_SCHED_CREATE_DP_PARAMS a = ir_attrs_CUTLASS_SCHED_CREATE_DP_PARAMS(op);
  c->order = s->order = (SchedOrder)a.raster_order;
  c->decomp = (SchedDecomp)a.decomposition;
  c->reduction = (SchedReduction)a.reduction;
  c->swizzle = s->swizzle = (uint32_t)a.swizzle;
  c->tiles_per_round = s->tiles_per_round = (uint32_t)a.tiles_per_round;
  c->splits = (uint32_t)a.splits;
  c->min_k = (uint32_t)a.min_k;
  c->acc_tile_bytes = s->acc_bytes = (uint64_t)a.accumulator_tile_bytes;
}

/* The cluster shape: the attribute, else the kernel's; the schedulers tile M and N only. */
static bool params_cluster(IrOp *op, Sched *s, SchedConfig *c) {
  int64_t cl[3];
  memcpy(cl, kernel_spec_of(op).cluster, sizeof cl);
  IrAttrList shape = ir_attrs_CUTLASS_SCHED_CREATE_DP_PARAMS(op).cluster_shape;
  for (uint32_t i = 0; i < shape.n && i < 3; i++)
    cl[i] = ir_attr_list_int(shape, i);
  if (cl[2] != 1 || cl[0] < 1 || cl[1] < 1 || cl[0] > 64 || cl[1] > 64) {
    ir_op_error(op,
                "cluster shape [%lld, %lld, %lld]: the schedulers need [m, n, 1] with m, n in "
                "[1, 64]",
                (long long)cl[0], (long long)cl[1], (long long)cl[2]);
    return false;
  }
  c->cluster_m = s->cluster_m = (uint32_t)cl[0];
  c->cluster_n = s->cluster_n = (uint32_t)cl[1];
  return true;
}

/* Constant operands into the configuration; false (no diagnostic) when one is not constant. */
static bool params_constants(IrOp *op, SchedConfig *c, int *bad) {
  uint32_t v[5] = {1, 1, 1, 1, 1}, n = op->noperands < 5 ? op->noperands : 5;
  for (uint32_t i = 0; i < n; i++) {
    int64_t x;
    if (!dia_const_int(op->operands[i].value, &x)) {
      *bad = (int)i;
      return false;
    }
    v[i] = (uint32_t)x; /* an i32 constant: its 32 bits, read unsigned */
  }
  c->tiles_m = v[0], c->tiles_n = v[1], c->tiles_l = v[2], c->tiles_k = v[3];
  if (n > 4) c->workers = v[4];
  return true;
}

/* Plan one params op: the reference's plan for constants, else (data-parallel
** and static persistent only) a raster computed at run time. */
static Sched *plan_params(Low *L, IrOp *op) {
  Sched *s = arena_alloc(ir_arena(L->rw.ctx), sizeof *s);
  s->op = op;
  int k = params_kind(op);
  if (k == K_SM100 && cut_target_sm(op) < 100) {
    ir_op_error(op, "the SM100 StreamK scheduler needs an sm_100 or later target, got sm_%d",
                cut_target_sm(op));
    return NULL;
  }
  s->kind = k == K_SM100 ? K_SK : k;
  SchedConfig c;
  sched_config_init(&c, s->kind == K_DP   ? SCHED_DATA_PARALLEL
                        : s->kind == K_SP ? SCHED_STATIC_PERSISTENT
                                          : SCHED_STREAMK);
  params_attrs(op, s, &c);
  if (!params_cluster(op, s, &c)) return NULL;
  int bad = -1;
  s->planned = params_constants(op, &c, &bad);
  if (!s->planned) {
    if (s->kind != K_SK) return s;
    ir_op_error(op,
                "needs compile-time constant tiles_m, tiles_n, tiles_l, tiles_k and workers: a "
                "StreamK plan (decomposition, units, workspace layout) is made on the host; "
                "operand #%d (%s) is not a constant",
                bad, operand_names[bad]);
    return NULL;
  }
  const char *err = NULL;
  if (!sched_plan(&s->plan, &c, &err)) {
    ir_op_error(op, "cannot be planned: %s", err ? err : "bad configuration");
    return NULL;
  }
  const SchedStreamK *p = &s->plan.sk;
  if (s->kind == K_SK && p->sk_units > 0 && p->k_per_small == 0) {
    ir_op_error(op, "internal: a StreamK unit without k tiles");
    return NULL;
  }
  if (s->kind == K_SK && (uint64_t)p->sk_tiles * c.cluster_m * c.cluster_n > U32MAX / 2) {
    ir_op_error(op, "cannot be planned: too many StreamK barrier counters for 32-bit indices");
    return NULL;
  }
  return s;
}

/* The raster and grid of an unplanned params op (sched_raster_init's
** arithmetic and the persistent grid), built in front of it. */
void lts_build_runtime_raster(Low *L, Sched *s) {
  IrOp *op = s->op;
  Stage *st = LTS_STAGE(L);
  rw_before(&L->rw, op);
  SInt opd[5];
  for (uint32_t i = 0; i < 5; i++)
    opd[i] = i < op->noperands ? stage_ir_value(op->operands[i].value) : st_k(1);
  s->raster = sw_raster_shape(st, opd[0], opd[1], opd[2], st_k(s->cluster_m), st_k(s->cluster_n),
                              st_k(s->swizzle), s->order);
  s->grid = sw_persistent_grid(st, (SchedKind)s->kind, opd[4], s->raster.total);
}

/* }====================================================================== */

/* {======================================================================
** Checks
** ======================================================================= */

/* May `user` use a value of scheduler type dty? */
static bool allowed_user(const IrOp *user, int dty) {
  if (dty != IR_DTY_CUTLASS_WORK_TILE_INFO) return lts_is_sched_op(user);
  if (lts_is_sched_op(user)) return true;
  switch (user->kind) {
  case OP_SCF_FOR:
  case OP_SCF_WHILE:
  case OP_SCF_YIELD:
  case OP_SCF_CONDITION:
  case OP_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR: return true;
  default: return false;
  }
}

static int sched_dty(const IrType *t) {
  if (ir_type_is_dialect(t, IR_DTY_CUTLASS_SCHED_PARAMS)) return IR_DTY_CUTLASS_SCHED_PARAMS;
  if (ir_type_is_dialect(t, IR_DTY_CUTLASS_TILE_SCHEDULER)) return IR_DTY_CUTLASS_TILE_SCHEDULER;
  if (lts_is_wti(t)) return IR_DTY_CUTLASS_WORK_TILE_INFO;
  return -1;
}

/* Every user of a scheduler value is one the lowering can rewrite. */
static bool check_users(IrValue *v, IrOp *where) {
  int dty = sched_dty(v->type);
  if (dty < 0) return true;
  for (IrUse *u = v->uses; u; u = u->next) {
    if (allowed_user(u->owner, dty)) continue;
    IrDiag *d = ir_op_error(u->owner,
                            "uses a %s value, which lower-tile-scheduler cannot rewrite "
                            "here (%s)",
                            ir_dialect_type_name(dty),
                            dty == IR_DTY_CUTLASS_WORK_TILE_INFO
                                ? "work tiles flow only through scf loops, branches and "
                                  "scheduler ops"
                                : "scheduler params and handles are used directly by scheduler "
                                  "ops");
    if (where) ir_op_note(d, where, "defined here");
    return false;
  }
  return true;
}

/* Block arguments of scheduler type: work tiles in scf and switch regions only. */
static bool check_block_args(IrOp *op) {
  for (uint32_t r = 0; r < op->nregions; r++)
    for (IrBlock *b = op->regions[r].first; b; b = b->next)
      for (uint32_t i = 0; i < b->nargs; i++) {
        int dty = sched_dty(b->args[i]->type);
        if (dty < 0) continue;
        bool ok = dty == IR_DTY_CUTLASS_WORK_TILE_INFO &&
                  (op->kind == OP_SCF_FOR || op->kind == OP_SCF_WHILE ||
                   op->kind == OP_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR);
        if (!ok) {
          ir_op_error(op,
                      "has a block argument of type !%s that lower-tile-scheduler cannot "
                      "rewrite",
                      ir_dialect_type_name(dty));
          return false;
        }
        if (!check_users(b->args[i], op)) return false;
      }
  return true;
}

/* get_workspace_sizes: attributes, when given (not all 0), agree with the plan. */
static bool check_workspace(IrOp *op, const Sched *s) {
  IrAttrs_CUTLASS_SCHED_WORKSPACE_SIZES a = ir_attrs_CUTLASS_SCHED_WORKSPACE_SIZES(op);
  int64_t want[3] = {0, 0, 0}, got[3] = {a.total_bytes, a.reduction_bytes, a.barrier_bytes};
  static const char *const names[] = {"total_bytes", "reduction_bytes", "barrier_bytes"};
  if (s->planned) {
    want[0] = (int64_t)s->plan.ws.total;
    want[1] = (int64_t)s->plan.ws.reduction;
    want[2] = (int64_t)s->plan.ws.barriers;
  }
  bool given = false;
  for (int i = 0; i < 3; i++)
    given = given || got[i] != 0;
  for (int i = 0; given && i < 3; i++)
    if (got[i] != want[i]) {
      IrDiag *d = ir_op_error(op, "%s = %lld differs from the plan's %lld", names[i],
                              (long long)got[i], (long long)want[i]);
      ir_op_note(d, s->op, "params defined here");
      return false;
    }
  return true;
}

/* The params behind operand 0 of op (a params value or a handle). */
static Sched *sched_behind(Low *L, IrOp *op) {
  IrValue *v = op->operands[0].value;
  Handle *h = lts_handle_of(L, v);
  Sched *s = h ? h->s : lts_sched_of(L, v);
  if (!s)
    ir_op_error(op, "operand #0 does not come from a scheduler %s op",
                ir_type_is_dialect(v->type, IR_DTY_CUTLASS_SCHED_PARAMS) ? "create_*_params"
                                                                         : "create");
  return s;
}

/* Scheduler values come from their own ops (work tiles also from scf results). */
static bool check_producer(IrOp *op) {
  for (uint32_t i = 0; i < op->nresults; i++) {
    int dty = sched_dty(op->results[i].type);
    if (dty < 0) continue;
    bool ok = dty == IR_DTY_CUTLASS_SCHED_PARAMS ? lts_is_params_op(op)
              : dty == IR_DTY_CUTLASS_TILE_SCHEDULER
                  ? op->kind == OP_CUTLASS_SCHED_CREATE ||
                        (op->kind == OP_UNREALIZED_CAST && op->noperands == 0) /* detached */
                  : lts_is_sched_op(op) || op->kind == OP_SCF_FOR || op->kind == OP_SCF_WHILE ||
                        op->kind == OP_SCF_IF;
    if (!ok) {
      ir_op_error(op,
                  "makes a !%s value, which only the scheduler's own ops make for "
                  "lower-tile-scheduler",
                  ir_dialect_type_name(dty));
      return false;
    }
  }
  return true;
}

/* Plan params, record handles, check users and the ops that read a plan. */
bool lts_check_op(IrOp *op, void *ud) {
  Low *L = ud;
  bool ok = check_block_args(op) && check_producer(op);
  for (uint32_t i = 0; ok && i < op->nresults; i++)
    ok = check_users(&op->results[i], op);
  if (ok && lts_is_params_op(op)) {
    Sched *s = plan_params(L, op);
    ok = s != NULL;
    if (ok) ptrmap_set(&L->scheds, &op->results[0], s);
  } else if (ok && op->kind == OP_CUTLASS_SCHED_CREATE) {
    Handle *h = arena_alloc(ir_arena(L->rw.ctx), sizeof *h);
    h->s = sched_behind(L, op);
    h->pull = ir_attrs_CUTLASS_SCHED_CREATE(op).model == SCHED_MODEL_PULL;
    h->response = op->noperands > 1 ? op->operands[1].value : NULL;
    ok = h->s != NULL;
    if (ok && h->pull && (!h->response || !ir_type_is_int_width(h->response->type->elem, 32))) {
      ir_op_error(op, "the pull model reads 32-bit WorkIDs: its response buffer must be "
                      "ptr<i32, shared>");
      ok = false;
    }
    if (ok) ptrmap_set(&L->handles, &op->results[0], h);
  } else if (ok && (lts_is_work_create_op(op) || op->kind == OP_CUTLASS_SCHED_ADVANCE)) {
    ok = sched_behind(L, op) != NULL;
  } else if (ok && op->kind == OP_CUTLASS_SCHED_WORKSPACE_SIZES) {
    Sched *s = sched_behind(L, op);
    ok = s && check_workspace(op, s);
  } else if (ok && op->kind == OP_CUTLASS_SCHED_FIXUP) {
    Sched *s = sched_behind(L, op);
    if (s && s->kind != K_SK) ir_op_error(op, "fixup is only for StreamK schedulers");
    ok = s && s->kind == K_SK && lts_check_fixup(op, s);
  }
  return ok;
}

/* }====================================================================== */

/* }====================================================================== */
