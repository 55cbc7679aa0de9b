/*
** propagate_execution_unit.c -- the `propagate-execution-unit` pass (the
** helper optimize-execution-unit-mapping runs last): the warps of each agent_switch fold upward,
*through the scf ops
** around it, to the kernel.
**
** The warps of an agent_switch are the end of its last entry (an agent covers
** num_warps warps from its warp_id, a hole agent_strides warps). An op with
** regions (scf.for, scf.if, scf.while) takes the warps of what its regions
** hold and records them as `tileas.num_warps`; the kernel takes them as its
** block: kernel_spec.block = [32 * warps, 1, 1]. Two switches under one op that
** disagree are an error at that op: "inconsistent numWarps in the agent switch,
** maybe it is called in different agents with different numWarps", with a note
** at each. Ops without an agent_switch below them are left alone.
*/
#include <string.h>

#include "../dialects/dialects.h"
#include "../dialects/sm90_limits.h"
#include "rewrite.h"

/* The warps an agent_switch spans. */
static int64_t switch_warps(const IrOp *sw) {
  IrAttrs_TILEAS_AGENT_SWITCH a = ir_attrs_TILEAS_AGENT_SWITCH(sw);
  int64_t end = 0;
  for (uint32_t i = 0, h = 0; i < a.num_warps.n; i++) {
    bool hole = h < a.holes.n && ir_attr_list_int(a.holes, h) == i;
    h += hole;
    int64_t e = ir_attr_list_int(a.warp_id, i) +
                (hole ? ir_attr_list_int(a.agent_strides, i) : ir_attr_list_int(a.num_warps, i));
    if (e > end) end = e;
  }
  return end;
}

/* The warps of op (0: no agent_switch below it), or -1 after an error. *src
** gets the op that decided them (the agent_switch or the op holding it). With
** apply, the scf ops record them (run after a dry run found no error). */
static int64_t fold(Rewriter *r, IrOp *op, IrOp **src, bool apply) {
  *src = op;
  if (op->kind == OP_TILEAS_AGENT_SWITCH) return switch_warps(op);
  int64_t warps = 0;
  IrOp *from = NULL;
  for (uint32_t i = 0; i < op->nregions; i++)
    for (IrBlock *b = op->regions[i].first; b; b = b->next)
      for (IrOp *c = b->first; c; c = c->next) {
        IrOp *csrc;
        int64_t w = c->nregions ? fold(r, c, &csrc, apply) : 0;
        if (w < 0) return -1;
        if (!w || w == warps) continue;
        if (warps) {
          IrDiag *d = ir_op_error(
              op, "inconsistent numWarps in the agent switch, maybe it is called in different "
                  "agents with different numWarps");
          ir_op_note(d, from, "%lld warps here", (long long)warps);
          ir_op_note(d, csrc, "%lld warps here", (long long)w);
          return -1;
        }
        warps = w;
        from = csrc;
      }
  if (apply && warps && op->kind != OP_TILE_KERNEL)
    rw_set_int(r, op, ir_stamp_spec(STAMP_TILEAS_NUM_WARPS)->name, warps);
  return warps;
}

static IrResult propagate_kernel(Rewriter *r, IrOp *k) {
  IrOp *src;
  int64_t warps = fold(r, k, &src, false);
  if (warps < 0) return IR_FAIL;
  if (!warps) return IR_OK;
  fold(r, k, &src, true);
  const IrAttr *spec = ir_op_attr(k, "kernel_spec");
  int64_t block[3] = {warps * SM90_WARP_SIZE, 1, 1};
  IrNamedAttr entries[16];
  uint32_t n = 0;
  for (uint32_t i = 0; i < spec->u.dict.n && n < 15; i++)
    if (strcmp(spec->u.dict.entries[i].name, "block") != 0) entries[n++] = spec->u.dict.entries[i];
  entries[n++] =
      (IrNamedAttr){ir_intern_cstr(r->ctx, "block"), ir_attr_int_array(r->ctx, 3, block)};
  ir_op_set_attr(k, "kernel_spec", ir_attr_dict(r->ctx, n, entries));
  return IR_OK;
}

IrResult pass_propagate_execution_unit(IrOp *module, IrPassCtx *pc) {
  Rewriter r;
  return rw_run(&r, sizeof r, module, pc, propagate_kernel);
}
