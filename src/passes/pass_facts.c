/*
** pass_facts.c -- the facts a pass may require (FACT and REQUIRES rows of
** passes.def): one predicate each, run by the pass manager before a pass that
** requires it. A predicate returns NULL where its fact holds on the module,
** else the op that breaks it, and appends to *why what is wrong there (the
** pass manager's error says "pass 'P' requires WHAT (WHY)").
*/
#include "../dialects/kernel.h"
#include "passes.h"

/* The tile.kernel ops of the module, in order. */
#define FOR_EACH_KERNEL(k, module)                                                                 \
  for (IrOp *k = (module)->nregions && (module)->regions[0].first ? (module)->regions[0].first->first : NULL; \
       k; k = k->next)                                                                             \
    if (k->kind == OP_TILE_KERNEL)

/* KERNEL_SPEC: every kernel's kernel_spec gives num_ctas, the CTAs of its
** cluster (the seed's nv_tileaa.kernel_spec; its verifier checks that it
** equals the cluster size). */
IrOp *fact_KERNEL_SPEC(IrOp *module, StrBuf *why) {
  FOR_EACH_KERNEL(k, module) {
    if (ir_attr_dict_get(ir_op_attr(k, "kernel_spec"), "num_ctas")) continue;
    sb_printf(why, "kernel '%s' has no kernel_spec.num_ctas", ir_attrs_TILE_KERNEL(k).sym_name);
    return k;
  }
  return NULL;
}
