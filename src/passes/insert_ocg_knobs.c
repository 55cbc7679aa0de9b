/*
** insert_ocg_knobs.c -- the `tileas-insert-OCG-knobs` pass: scheduling
** hints ("knobs") for OCG, the optimizing PTX-to-SASS code generator inside
** ptxas, as tileas.pragma ops that the emitter writes as `.pragma "text";` in
** place. A knob applies to the next PTX instruction, so
** the pass runs on the final form (MMA_FINAL: after the lowerings, on nvvm
** ops) and puts each knob right before its op:
**
**   .pragma "next knob FenceCode";            before every fence, arrive,
**       mbarrier and cluster-barrier op (nvvm.fence, fence.proxy.async,
**       fence.mbarrier_init; mbarrier init / arrive / arrive.expect_tx /
**       expect_tx / try_wait / test_wait / inval; bar.arrive; cluster arrive,
**       arrive.relaxed and wait), so that OCG does not move memory ops
**       across the lowered fence or barrier;
**   .pragma "global knob SchedResBusyXU64=1"; at the kernel's entry when its
**       target_spec is 100..103 or 110 (`target - 100 <= 3u || target ==
**       110`) and it holds an MMA (wgmma.mma_async, mma.sync).
**
** A knob already in place is not repeated: a second run changes nothing.
** The pragma has side effects, so no later pass removes it.
*/
#include <string.h>

#include "../dialects/dialects.h"
#include "rewrite.h"

#define FENCE_KNOB "next knob FenceCode"
#define BUSY_KNOB "global knob SchedResBusyXU64=1"

/* The fence/arrive and mbarrier/cluster-barrier ops a FenceCode knob precedes. */
static bool is_anchor(const IrOp *op) {
  switch (op->kind) {
  case OP_NVVM_FENCE:
  case OP_NVVM_FENCE_PROXY_ASYNC:
  case OP_NVVM_FENCE_MBARRIER_INIT:
  case OP_NVVM_MBARRIER_INIT_SHARED:
  case OP_NVVM_MBARRIER_ARRIVE_SHARED:
  case OP_NVVM_MBARRIER_ARRIVE_SHARED_CLUSTER:
  case OP_NVVM_MBARRIER_ARRIVE_EXPECT_TX_SHARED:
  case OP_NVVM_MBARRIER_ARRIVE_EXPECT_TX_SHARED_CLUSTER:
  case OP_NVVM_MBARRIER_EXPECT_TX_SHARED:
  case OP_NVVM_MBARRIER_TRY_WAIT_PARITY_SHARED:
  case OP_NVVM_MBARRIER_TEST_WAIT_PARITY_SHARED:
  case OP_NVVM_MBARRIER_INVAL_SHARED:
  case OP_NVVM_BARRIER_ARRIVE:
  case OP_NVVM_CLUSTER_ARRIVE:
  case OP_NVVM_CLUSTER_ARRIVE_RELAXED:
  case OP_NVVM_CLUSTER_WAIT: return true;
  default: return false;
  }
}

static bool is_mma(const IrOp *op) { return op->kind == OP_NVVM_WGMMA_MMA_ASYNC || op->kind == OP_NVVM_MMA_SYNC; }

static bool is_knob(const IrOp *op, const char *text) {
  return op && op->kind == OP_TILEAS_PRAGMA && strcmp(ir_attrs_TILEAS_PRAGMA(op).text, text) == 0;
}

/* A knob at the builder. */
static void knob(Rewriter *r, const char *text) {
  IrOp *p = rw_op(r, OP_TILEAS_PRAGMA, 0, NULL, NULL);
  rw_set_str(r, p, "text", text);
}

static IrResult knobs_kernel(Rewriter *r, IrOp *k) {
  uint32_t target = (uint32_t)ir_attrs_TILE_KERNEL(k).target_spec;
  IrOpVec ops = {0};
  rw_collect(k, is_mma, &ops);
  bool busy = (target - 100u <= 3u || target == 110u) && ops.n > 0;
  if (busy && !is_knob(r->entry->first, BUSY_KNOB)) {
    ir_builder_at_start(&r->b, r->entry);
    r->b.loc = k->loc;
    knob(r, BUSY_KNOB);
  }
  ops.n = 0;
  rw_collect(k, is_anchor, &ops);
  for (size_t i = 0; i < ops.n; i++) {
    if (is_knob(ops.v[i]->prev, FENCE_KNOB)) continue;
    rw_before(r, ops.v[i]);
    knob(r, FENCE_KNOB);
  }
  ir_opvec_free(&ops);
  return IR_OK;
}

IrResult pass_insert_ocg_knobs(IrOp *module, IrPassCtx *pc) {
  Rewriter r;
  return rw_run(&r, sizeof r, module, pc, knobs_kernel);
}
