/*
** cutlass_sched.c -- verifiers of the tile scheduler family (params, work
** tiles, handles, advance, workspace sizes, fixup), the MODS probes and
** block_striped.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cutlass.h"

/* {======================================================================
** Scheduler kinds
** ======================================================================= */

enum {
  K_DP = SCHED_DATA_PARALLEL,
  K_SP = SCHED_STATIC_PERSISTENT,
  K_SK = SCHED_STREAMK,
  K_SM100 = CUT_SCHED_SM100_STREAMK
};
static const char *const *const kinds = CUT_SCHED_KIND_names;

/* The kind an op of the params / work-tile creation families builds. */
static int op_kind(IrOpKind k) {
  switch (k) {
  case OP_CUTLASS_SCHED_CREATE_DP_PARAMS:
  case OP_CUTLASS_SCHED_CREATE_DP_WORK: return K_DP;
  case OP_CUTLASS_SCHED_CREATE_SP_PARAMS:
  case OP_CUTLASS_SCHED_CREATE_SP_WORK: return K_SP;
  case OP_CUTLASS_SCHED_CREATE_SK_PARAMS:
  case OP_CUTLASS_SCHED_CREATE_SK_WORK: return K_SK;
  default: return K_SM100;
  }
}

/* t must be the dialect type dty of kind k; "<what> must be !name<kind>, got t". */
static bool want_kind(IrOp *op, const char *what, const IrType *t, int dty, int k) {
  if (ir_type_is_dialect(t, dty) && cut_kind_index(t, kinds) == k) return true;
  char want[96];
  snprintf(want, sizeof want, "!%s<%s>", ir_dialect_type_name(dty), kinds[k]);
  cut_type_error(op, what, want, t);
  return false;
}

/* The kind of a scheduler-family type, reporting an unknown one. */
static int kind_of(IrOp *op, const char *what, const IrType *t) {
  int k = cut_kind_index(t, kinds);
  if (k < 0)
    cut_type_error(op, what, "of kind data_parallel, static_persistent, streamk or sm100_streamk",
                   t);
  return k;
}

/* }====================================================================== */

/* {======================================================================
** Params and work tiles
** ======================================================================= */

/* cluster_shape (optional) arranges the kernel's cluster over the tiles: as
** many CTAs (a 1-D cluster of 4 may walk 2 x 2 tiles; each CTA finds its tile
** from its rank). */
static bool check_cluster_shape(IrOp *op, IrAttrList l) {
  if (!ir_op_attr(op, "cluster_shape")) return true;
  KernelSpec ks = kernel_spec_of(op);
  int64_t cs[3] = {1, 1, 1}, *kc = ks.cluster;
  for (uint32_t i = 0; i < l.n; i++) {
    cs[i] = ir_attr_list_int(l, i);
    /* no extent past a cluster's CTA limit is meaningful (and so the product
    ** below cannot overflow) */
    if (cs[i] < 1 || cs[i] > SM90_MAX_CLUSTER_CTAS) {
      ir_op_error(op, "cluster_shape[%u] = %lld: each extent must be in 1..%d", i, (long long)cs[i],
                  SM90_MAX_CLUSTER_CTAS);
      return false;
    }
  }
  int64_t ctas = cs[0] * cs[1] * cs[2], want = ks.ctas;
  if (l.n == 0 || ctas != want) {
    ir_op_error(
        op,
        "cluster_shape [%lld, %lld, %lld] has %lld CTAs, the kernel's cluster [%lld, %lld, %lld] %lld",
        (long long)cs[0], (long long)cs[1], (long long)cs[2], (long long)ctas, (long long)kc[0],
        (long long)kc[1], (long long)kc[2], (long long)want);
    return false;
  }
  return true;
}

/* SM100 StreamK needs sm_100+; the generic StreamK is superseded there. */
static bool check_target(IrOp *op, int k) {
  int sm = cut_target_sm(op);
  if (k == K_SM100 && sm < 100) {
    ir_op_error(op, "the SM100 StreamK scheduler needs an sm_100 or later target, got sm_%d", sm);
    return false;
  }
  if (k == K_SK && sm >= 100) {
    ir_op_error(
        op, "the generic StreamK scheduler is illegal on sm_%d: use create_sm100_streamk_params",
        sm);
    return false;
  }
  return true;
}

IrResult cutlass_verify_sched_params(IrOp *op) {
  int k = op_kind(op->kind);
  if (!want_kind(op, "result", op->results[0].type, IR_DTY_CUTLASS_SCHED_PARAMS, k)) return IR_FAIL;
  IrAttrList cs = ir_attrs_CUTLASS_SCHED_CREATE_DP_PARAMS(op).cluster_shape;
  return check_cluster_shape(op, cs) && check_target(op, k) ? IR_OK : IR_FAIL;
}

IrResult cutlass_verify_sched_work_create(IrOp *op) {
  int k = op_kind(op->kind);
  if (!want_kind(op, "operand #0", op->operands[0].value->type, IR_DTY_CUTLASS_SCHED_PARAMS, k) ||
      !want_kind(op, "result", op->results[0].type, IR_DTY_CUTLASS_WORK_TILE_INFO, k))
    return IR_FAIL;
  return IR_OK;
}

/* }====================================================================== */

/* {======================================================================
** Handles, advance, workspace, fixup
** ======================================================================= */

IrResult cutlass_verify_sched_create(IrOp *op) {
  int k = kind_of(op, "operand #0", op->operands[0].value->type);
  if (k < 0 || !want_kind(op, "result", op->results[0].type, IR_DTY_CUTLASS_TILE_SCHEDULER, k))
    return IR_FAIL;
  int model = ir_attrs_CUTLASS_SCHED_CREATE(op).model;
  bool response = op->noperands == 2;
  if (k != K_DP && (response || model == SCHED_MODEL_PULL)) {
    ir_op_error(op, "a %s scheduler must not use the data-parallel WorkID response path (%s)",
                kinds[k], response ? "a WorkID response operand" : "model = \"pull\"");
    return IR_FAIL;
  }
  if (model == SCHED_MODEL_PULL && !response) {
    ir_op_error(op, "a data_parallel scheduler in the pull model needs a WorkID response source (a "
                    "ptr<..., shared> operand)");
    return IR_FAIL;
  }
  if (model == SCHED_MODEL_STATIC && response) {
    ir_op_error(op, "a WorkID response operand needs model = \"pull\"");
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult cutlass_verify_sched_advance(IrOp *op) {
  if (!ir_op_ancestor(op, OP_CUTLASS_ASYNC_EXEC)) {
    ir_op_error(op, "must be inside a cutlass.async.exec region (it advances the scheduler and may "
                    "clock the pipeline)");
    return IR_FAIL;
  }
  int k = kind_of(op, "operand #0", op->operands[0].value->type);
  if (k < 0 ||
      !want_kind(op, "operand #1", op->operands[1].value->type, IR_DTY_CUTLASS_WORK_TILE_INFO, k) ||
      !want_kind(op, "result", op->results[0].type, IR_DTY_CUTLASS_WORK_TILE_INFO, k))
    return IR_FAIL;
  return IR_OK;
}

static int64_t align128(int64_t x) { return (x + 127) / 128 * 128; }

/* Sizes agree with the kind: zero unless StreamK; StreamK follows the layout
** [partials][pad to 128][32-bit counters][pad to 128]. */
IrResult cutlass_verify_sched_workspace(IrOp *op) {
  int k = kind_of(op, "operand #0", op->operands[0].value->type);
  IrAttrs_CUTLASS_SCHED_WORKSPACE_SIZES a = ir_attrs_CUTLASS_SCHED_WORKSPACE_SIZES(op);
  int64_t total = a.total_bytes, red = a.reduction_bytes, bar = a.barrier_bytes;
  if (k < 0) return IR_FAIL;
  if (k < K_SK && (total || red || bar)) {
    ir_op_error(op,
                "a %s scheduler needs no workspace, got total_bytes = %lld, reduction_bytes = "
                "%lld, barrier_bytes = %lld",
                kinds[k], (long long)total, (long long)red, (long long)bar);
    return IR_FAIL;
  }
  if (k >= K_SK && bar % 4 != 0) {
    ir_op_error(op, "barrier_bytes = %lld is not a whole number of 32-bit counters",
                (long long)bar);
    return IR_FAIL;
  }
  if (k >= K_SK && total != align128(align128(red) + bar)) {
    ir_op_error(op,
                "total_bytes = %lld does not match the StreamK layout of reduction_bytes = %lld "
                "and barrier_bytes = %lld (%lld)",
                (long long)total, (long long)red, (long long)bar,
                (long long)align128(align128(red) + bar));
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult cutlass_verify_sched_fixup(IrOp *op) {
  int k = kind_of(op, "operand #0", op->operands[0].value->type);
  if (k < 0) return IR_FAIL;
  if (k < K_SK) {
    ir_op_error(op, "fixup is only for StreamK schedulers, got %s", kinds[k]);
    return IR_FAIL;
  }
  if (!want_kind(op, "operand #1", op->operands[1].value->type, IR_DTY_CUTLASS_WORK_TILE_INFO, k))
    return IR_FAIL;
  const IrType *acc = op->operands[2].value->type;
  if (acc->space != IR_MS_RMEM || !ir_type_has_static_shape(acc)) {
    cut_type_error(op, "the accumulator", "a register memref (memref<..., rmem>) of static shape",
                   acc);
    return IR_FAIL;
  }
  return IR_OK;
}

/* }====================================================================== */

/* {======================================================================
** MODS probes: windows, pairing, cluster shape
** ======================================================================= */

static bool is_window_probe(const IrOp *op) {
  return op->kind == OP_CUTLASS_MODS_START || op->kind == OP_CUTLASS_MODS_END;
}

/* The probes and throttles of an async.exec region in program order; nested
** async.exec regions have windows of their own and are skipped. */
static void collect_probes(IrRegion *r, IrOpVec *p) {
  for (IrBlock *b = r->first; b; b = b->next)
    for (IrOp *o = b->first; o; o = o->next) {
      if (is_window_probe(o) || o->kind == OP_CUTLASS_MODS_THROTTLE) ir_opvec_push(p, o);
      if (o->kind == OP_CUTLASS_ASYNC_EXEC) continue;
      for (uint32_t i = 0; i < o->nregions; i++)
        collect_probes(&o->regions[i], p);
    }
}

/* MODS ops live only inside cutlass.async.exec regions; returns that region's op. */
static IrOp *mods_exec(IrOp *op) {
  IrOp *e = ir_op_ancestor(op, OP_CUTLASS_ASYNC_EXEC);
  if (!e) ir_op_error(op, "must be inside a cutlass.async.exec region");
  return e;
}

/* The participant mask fits the kernel's cluster: one bit per CTA, or per
** cluster half with is_2cta_mma. */
static bool check_cluster_participants(IrOp *op, bool two_cta) {
  int64_t mask, cl[3];
  if (!dia_const_int(op->operands[1].value, &mask)) return true;
  KernelSpec ks = kernel_spec_of(op);
  memcpy(cl, ks.cluster, sizeof cl);
  int64_t ctas = ks.ctas, n = two_cta ? ctas / 2 : ctas;
  if (two_cta && ctas % 2) {
    ir_op_error(op, "is_2cta_mma needs an even number of CTAs in the cluster, got %lld",
                (long long)ctas);
    return false;
  }
  if (mask == 0) {
    ir_op_error(op, "participant mask is empty");
    return false;
  }
  int need = 0;
  for (uint64_t m = (uint64_t)mask; m; m >>= 1)
    need++;
  if (need > n) {
    ir_op_error(op,
                "participant mask 0x%llx needs %d participants, but the %lldx%lldx%lld cluster "
                "with is_2cta_mma = %s has %lld",
                (unsigned long long)mask, need, (long long)cl[0], (long long)cl[1],
                (long long)cl[2], two_cta ? "true" : "false", (long long)n);
    return false;
  }
  return true;
}

/* Same participant mask: one value, or equal constants. */
static bool same_mask(IrValue *a, IrValue *b) {
  int64_t x, y;
  return a == b || (dia_const_int(a, &x) && dia_const_int(b, &y) && x == y);
}

/* An end agrees with the start that opened its window. */
static bool check_pair(IrOp *end, IrOp *start, bool two_cta) {
  IrAttrs_CUTLASS_MODS_START a = ir_attrs_CUTLASS_MODS_START(start);
  if (!a.ok) return true; /* the start reports it */
  /* malformed operands are reported by the structural check */
  if (start->noperands < 2 || end->noperands < 2) return true;
  bool s2 = a.is_2cta_mma;
  const char *msg = NULL;
  if (s2 != two_cta)
    msg = two_cta ? "is_2cta_mma = true does not match is_2cta_mma = false of its "
                    "mods_report_mainloop_start"
                  : "is_2cta_mma = false does not match is_2cta_mma = true of its "
                    "mods_report_mainloop_start";
  else if (!same_mask(end->operands[1].value, start->operands[1].value))
    msg = "participant mask differs from the one of its mods_report_mainloop_start";
  else if (end->noperands == 3 &&
           (start->nresults != 1 || end->operands[2].value != &start->results[0]))
    msg = "timestamp operand is not the result of its mods_report_mainloop_start";
  if (!msg) return true;
  ir_op_note(ir_op_error(end, "%s", msg), start, "window opened here");
  return false;
}

/* A probe's place among the window probes of its region: the one just before
** it and the one just after it. */
static bool check_window(IrOp *op, IrOp *prev, IrOp *next) {
  if (op->kind == OP_CUTLASS_MODS_THROTTLE) {
    if (ir_attrs_CUTLASS_MODS_THROTTLE(op).profile < 2 ||
        (prev && prev->kind == OP_CUTLASS_MODS_START && next && next->kind == OP_CUTLASS_MODS_END))
      return true;
    ir_op_error(op, "profile 2 (cluster-aware) must lie between a matched "
                    "mods_report_mainloop_start and mods_report_mainloop_end");
    return false;
  }
  bool start = op->kind == OP_CUTLASS_MODS_START;
  if (start && (!next || next->kind != OP_CUTLASS_MODS_END)) {
    IrDiag *d = ir_op_error(
        op, "has no matching mods_report_mainloop_end in its cutlass.async.exec region");
    if (next) ir_op_note(d, next, "another window opens here before this one is closed");
    return false;
  }
  if (!start && (!prev || prev->kind != OP_CUTLASS_MODS_START)) {
    IrDiag *d = ir_op_error(
        op, "has no matching mods_report_mainloop_start in its cutlass.async.exec region");
    if (prev) ir_op_note(d, prev, "the previous window was closed here");
    return false;
  }
  return start || check_pair(op, prev, ir_attrs_CUTLASS_MODS_START(op).is_2cta_mma);
}

/* The windows of one async.exec region, in one pass over its probes. */
static bool check_windows(IrOp *exec) {
  IrOpVec p = {0};
  collect_probes(&exec->regions[0], &p);
  IrOp **next = ir_calloc(p.n + 1, sizeof *next), *prev = NULL;
  for (size_t i = p.n; i-- > 0;) /* next[i]: the first window probe after i */
    next[i] = i + 1 < p.n && is_window_probe(p.v[i + 1]) ? p.v[i + 1] : next[i + 1];
  bool ok = true;
  for (size_t i = 0; i < p.n; i++) {
    ok = check_window(p.v[i], prev, next[i]) && ok;
    if (is_window_probe(p.v[i])) prev = p.v[i];
  }
  ir_free(next);
  ir_opvec_free(&p);
  return ok;
}

static bool windows_visit(IrOp *op, void *ud) {
  if (op->kind == OP_CUTLASS_ASYNC_EXEC && !check_windows(op)) *(bool *)ud = false;
  return true;
}

/* MODS windows open and close in order in every async.exec region (a kernel rule). */
IrResult cutlass_verify_kernel_mods(IrOp *k) {
  bool ok = true;
  ir_walk_pre(k, windows_visit, &ok);
  return ok ? IR_OK : IR_FAIL;
}

/* The local rules of a probe; its window is the kernel rule's. */
IrResult cutlass_verify_mods_probe(IrOp *op) {
  if (!mods_exec(op)) return IR_FAIL;
  bool two_cta = ir_attrs_CUTLASS_MODS_START(op).is_2cta_mma;
  return op->kind != OP_CUTLASS_MODS_START || check_cluster_participants(op, two_cta) ? IR_OK
                                                                                      : IR_FAIL;
}

IrResult cutlass_verify_mods_smid(IrOp *op) { return mods_exec(op) ? IR_OK : IR_FAIL; }

IrResult cutlass_verify_mods_throttle(IrOp *op) { return mods_exec(op) ? IR_OK : IR_FAIL; }

/* }====================================================================== */

/* {======================================================================
** block_striped
** ======================================================================= */

/* Element type: a scalar int or float of 16 bits or more, equal to both operands'. */
static bool check_element_type(IrOp *op, const IrType *e, const IrType *gmem, const IrType *rmem) {
  if ((e->kind != IR_TY_INT && e->kind != IR_TY_FLOAT) || e->width < 16) {
    cut_type_error(op, "element_type", "an integer or float of at least 16 bits", e);
    return false;
  }
  if (rmem->elem != e || gmem->elem != e) {
    const IrType *bad = rmem->elem != e ? rmem : gmem;
    ir_op_error(op, "element_type %s does not match the elements of %s", ir_op_type_str(op, e),
                ir_op_type_str(op, bad));
    return false;
  }
  return true;
}

IrResult cutlass_verify_block_striped(IrOp *op) {
  const IrType *g = op->operands[0].value->type, *r = op->operands[1].value->type;
  if (g->space != IR_MS_GLOBAL) {
    cut_type_error(op, "the global-memory operand #0", "a ptr or memref in global memory", g);
    return IR_FAIL;
  }
  if (r->space != IR_MS_RMEM) {
    cut_type_error(op, "the register-memory operand #1", "a memref in rmem", r);
    return IR_FAIL;
  }
  IrAttrs_CUTLASS_BLOCK_STRIPED_LOAD a = ir_attrs_CUTLASS_BLOCK_STRIPED_LOAD(op);
  if (!check_element_type(op, a.element_type, g, r)) return IR_FAIL;
  if (!ir_type_has_static_shape(r) || (g->kind == IR_TY_MEMREF && !ir_type_has_static_shape(g))) {
    cut_type_error(op, "the stripe shape", "static", ir_type_has_static_shape(r) ? g : r);
    return IR_FAIL;
  }
  KernelSpec ks = kernel_spec_of(op);
  if (ks.ok && a.threads > ks.threads) {
    ir_op_error(op, "expected threads in [1, %lld] (the block), got %lld", (long long)ks.threads,
                (long long)a.threads);
    return IR_FAIL;
  }
  if (op->kind == OP_CUTLASS_BLOCK_STRIPED_REDUCE && a.kind < 0) {
    ir_op_error(op, "expected string attribute 'kind' (one of: add, max)");
    return IR_FAIL;
  }
  return IR_OK;
}

/* }====================================================================== */
