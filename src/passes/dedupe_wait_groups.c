/*
** dedupe_wait_groups.c -- the `dedupe-wait-groups` pass: the wait-group
** dedupe walker, run right after convert-cutlass-to-nvvm. The async patterns
** of that pass emit commit + wait pairs eagerly (async.wait, future_wait,
** producer_tail, the MODS end probe); this walker then removes every group
** wait that an earlier wait of the same flavour in the same block already
** covers, so each run of waits collapses to one per flavour (a region's tail
** keeps one wait per flavour).
**
** Flavours: bulk (tile.bulk_wait, nvvm.cp.async.bulk.wait_group) and wgmma
** (nvvm.wgmma.wait.group.sync.aligned). A wait W2 of `pending` n2 is covered by
** an earlier W1 of the same flavour with n1 <= n2 when nothing between them can
** open a group of that flavour: no commit of it, no op with regions that holds
** one, no inline PTX; a W1 that waits only for reads (`read`) does not cover a
** full wait. mbarrier waits never take part: each waits for its own slot.
*/
#include <string.h>

#include "../dialects/dialects.h"
#include "passes.h"

enum { FL_BULK, FL_WGMMA, FL_COUNT };

typedef struct Last {
  bool valid;
  int64_t pending;
  bool read;
} Last;

/* The flavour of a group wait, or -1. */
static int wait_flavor(const IrOp *op) {
  switch (op->kind) {
  case OP_TILE_BULK_WAIT:
  case OP_NVVM_CP_ASYNC_BULK_WAIT_GROUP: return FL_BULK;
  case OP_NVVM_WGMMA_WAIT_GROUP_SYNC_ALIGNED: return FL_WGMMA;
  default: return -1;
  }
}

static int64_t pending_of(const IrOp *op) {
  switch (op->kind) {
  case OP_TILE_BULK_WAIT: return ir_attrs_TILE_BULK_WAIT(op).pending;
  case OP_NVVM_CP_ASYNC_BULK_WAIT_GROUP: return ir_attrs_NVVM_CP_ASYNC_BULK_WAIT_GROUP(op).group;
  default: return ir_attrs_NVVM_WGMMA_WAIT_GROUP_SYNC_ALIGNED(op).group;
  }
}

static bool read_only(const IrOp *op) {
  if (op->kind == OP_TILE_BULK_WAIT) return ir_attrs_TILE_BULK_WAIT(op).read;
  return op->kind == OP_NVVM_CP_ASYNC_BULK_WAIT_GROUP && ir_attrs_NVVM_CP_ASYNC_BULK_WAIT_GROUP(op).read;
}

typedef struct Opens {
  bool fl[FL_COUNT];
} Opens;

/* Which flavours an op (with what its regions hold) may open a group of. */
static bool opens_visit(IrOp *op, void *ud) {
  Opens *o = ud;
  switch (op->kind) {
  case OP_TILE_BULK_COMMIT:
  case OP_NVVM_CP_ASYNC_BULK_COMMIT_GROUP: o->fl[FL_BULK] = true; break;
  case OP_NVVM_WGMMA_COMMIT_GROUP_SYNC_ALIGNED: o->fl[FL_WGMMA] = true; break;
  case OP_NVVM_INLINE_PTX: o->fl[FL_BULK] = o->fl[FL_WGMMA] = true; break;
  default: break;
  }
  return true;
}

/* One block: drop covered waits; nested blocks start afresh (a loop body runs
** again after its own tail). */
static void dedupe_block(IrBlock *b, bool *changed);

static void dedupe_op_regions(IrOp *op, bool *changed) {
  for (uint32_t r = 0; r < op->nregions; r++)
    for (IrBlock *b = op->regions[r].first; b; b = b->next)
      dedupe_block(b, changed);
}

static void dedupe_block(IrBlock *b, bool *changed) {
  Last last[FL_COUNT] = {{false, 0, false}, {false, 0, false}};
  IR_FOR_EACH_OP(op, b) {
    dedupe_op_regions(op, changed);
    int f = wait_flavor(op);
    if (f >= 0) {
      int64_t n = pending_of(op);
      bool rd = read_only(op);
      if (last[f].valid && last[f].pending <= n && (rd || !last[f].read)) {
        ir_op_erase(op);
        *changed = true;
        continue;
      }
      last[f] = (Last){true, n, rd};
      continue;
    }
    Opens o = {{false, false}};
    ir_walk_pre(op, opens_visit, &o);
    for (int i = 0; i < FL_COUNT; i++)
      if (o.fl[i]) last[i].valid = false;
  }
}

IrResult pass_dedupe_wait_groups(IrOp *module, IrPassCtx *pc) {
  bool changed = false;
  dedupe_op_regions(module, &changed);
  if (changed) pc->changed = true;
  return IR_OK;
}
