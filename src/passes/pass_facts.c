/*
** pass_facts.c -- the facts a pass may require (FACT and REQUIRES rows of
** passes.def): one predicate each, run by the pass manager before a pass that
** requires it. A predicate returns NULL where its fact holds on the module,
** else the op that breaks it, and appends to *why what is wrong there (the
** pass manager's error says "pass 'P' requires WHAT (WHY)"). Facts about tile
** programs look only at kernels that hold tileas ops.
*/
#include "../dialects/kernel.h"
#include "rewrite.h"

/* The tile.kernel ops of the module, in order. */
#define FOR_EACH_KERNEL(k, module)                                                                 \
  for (IrOp *k = (module)->nregions && (module)->regions[0].first ? (module)->regions[0].first->first : NULL; \
       k; k = k->next)                                                                             \
    if (k->kind == OP_TILE_KERNEL)

static bool is_tileas(const IrOp *op) { return ir_op_in_dialect(op->kind, "tileas"); }
static bool is_agent(const IrOp *op) { return op->kind == OP_TILEAS_AGENT; }

static const char *kernel_name(const IrOp *k) { return ir_attrs_TILE_KERNEL(k).sym_name; }

/* KERNEL_SPEC: every tile program's kernel_spec gives num_ctas, the CTAs of
** its cluster (the verifier checks that it equals the cluster size). */
IrOp *fact_KERNEL_SPEC(IrOp *module, StrBuf *why) {
  FOR_EACH_KERNEL(k, module) {
    if (!rw_find(k, is_tileas) || ir_attr_dict_get(ir_op_attr(k, "kernel_spec"), "num_ctas")) continue;
    sb_printf(why, "kernel '%s' has no kernel_spec.num_ctas", kernel_name(k));
    return k;
  }
  return NULL;
}

/* AGENTS_MATERIALIZED: every tile program has its agents (tileas.agent ops,
** loose or the cases of an agent_switch). */
IrOp *fact_AGENTS_MATERIALIZED(IrOp *module, StrBuf *why) {
  FOR_EACH_KERNEL(k, module) {
    if (!rw_find(k, is_tileas) || rw_find(k, is_agent)) continue;
    sb_printf(why, "kernel '%s' is a tile program without tileas.agent ops", kernel_name(k));
    return k;
  }
  return NULL;
}

/* An MMA, or a fence, barrier or async op, not yet in its nvvm form. */
static bool not_final(const IrOp *op) {
  const uint32_t sync = R(BARRIER) | W(BARRIER) | R(CLUSTER) | W(CLUSTER) | R(ASYNC) | W(ASYNC);
  switch (op->kind) {
  case OP_TILEAS_DOT:
  case OP_TILE_WGMMA:
  case OP_TILE_MMA_SYNC:
  case OP_TILE_FENCE:
  case OP_TILE_FENCE_PROXY_ASYNC: return true;
  case OP_TILEAS_PRAGMA: return false; /* a knob, final as it is */
  default:
    return (ir_op_in_dialect(op->kind, "tile") || ir_op_in_dialect(op->kind, "cutlass") ||
            ir_op_in_dialect(op->kind, "tileas")) &&
           (ir_op_info(op->kind)->effects & sync);
  }
}

/* MMA_FINAL: the MMA ops and the fence / barrier anchors are in their final
** (nvvm) form, as the PTX emitter takes them. */
IrOp *fact_MMA_FINAL(IrOp *module, StrBuf *why) {
  IrOp *op = rw_find(module, not_final);
  if (op) sb_printf(why, "'%s' is not lowered yet", ir_op_name(op));
  return op;
}

/* The first value of op (its results, then its blocks' arguments) of tile
** type without a layout, or NULL. */
static const IrValue *unlaid(IrOp *op) {
  for (uint32_t i = 0; i < op->nresults; i++)
    if (op->results[i].type->kind == IR_TY_TILE && !op->results[i].type->layout) return &op->results[i];
  for (uint32_t r = 0; r < op->nregions; r++)
    for (IrBlock *b = op->regions[r].first; b; b = b->next)
      for (uint32_t i = 0; i < b->nargs; i++)
        if (b->args[i]->type->kind == IR_TY_TILE && !b->args[i]->type->layout) return b->args[i];
  return NULL;
}

static bool has_unlaid(const IrOp *op) { return unlaid((IrOp *)op) != NULL; }

/* LAYOUTS_ASSIGNED: every tile value of a tile program has a layout. */
IrOp *fact_LAYOUTS_ASSIGNED(IrOp *module, StrBuf *why) {
  FOR_EACH_KERNEL(k, module) {
    if (!rw_find(k, is_tileas)) continue;
    IrOp *op = rw_find(k, has_unlaid);
    if (!op) continue;
    const IrValue *v = unlaid(op);
    if (v->def)
      sb_printf(why, "result #%u of type %s has no layout", v->index, ir_op_type_str(op, v->type));
    else
      sb_printf(why, "block argument #%u of type %s has no layout", v->index, ir_op_type_str(op, v->type));
    return op;
  }
  return NULL;
}
