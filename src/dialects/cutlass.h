/*
** cutlass.h -- helpers shared by the verifiers of the cutlass dialect
** (defined in cutlass.c) and by the passes that lower it. The model they
** implement (executors as warp masks, the barrier-slot pool, the target) is
** written down in docs/cutlass.md.
*/
#ifndef TILUA_CUTLASS_H
#define TILUA_CUTLASS_H

#include "dialects.h"

/* Attributes: every reader checks the kind before it reads. */
bool cut_attr_int(IrOp *op, const char *name, bool required, int64_t dflt, int64_t *out);
bool cut_attr_bool(IrOp *op, const char *name, bool dflt, bool *out);
/* The index of a string attribute in names (NULL-terminated); dflt when absent, -1 (with an error) when unknown. */
int cut_attr_enum(IrOp *op, const char *name, const char *const *names, int dflt);
bool cut_attr_int_list(IrOp *op, const char *name, int64_t *out, uint32_t max, uint32_t *n);

/* Types: the index of a dialect type's kind parameter in names; "what must be want, got t". */
int cut_kind_index(const IrType *t, const char *const *names);
void cut_type_error(IrOp *op, const char *what, const char *want, const IrType *t);

/* Warp masks and the enclosing kernel. */
int cut_popcount(uint64_t m);
bool cut_mask_contiguous(uint64_t m);
int64_t cut_kernel_threads(const IrOp *op);
uint64_t cut_kernel_warp_mask(const IrOp *op);
void cut_kernel_cluster(const IrOp *op, int64_t out[3]);
/* The executor set (warp mask) that runs op: the innermost switch_by_executor
** case, cutlass.async.exec or tile.agent around it, else every warp of the
** kernel; *scope gets the op that sets it (NULL outside a kernel). 0 = unknown. */
uint64_t cut_executors(const IrOp *op, IrOp **scope);
/* Elements per unit of a block-striped move of a fragment of type frag. */
int64_t cut_striped_unit(const IrType *frag);
/* The target SM: the module's `target` attribute, else the context's. */
int cut_target_sm(const IrOp *op);

/* Claim barrier slots [base, base + n) of the per-CTA pool; errors name both claimants. */
bool cut_claim_slots(IrOp *op, int64_t base, int64_t n);

#endif
