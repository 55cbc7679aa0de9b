/*
** cutlass.h -- helpers shared by the verifiers of the cutlass dialect and by
** the passes that lower it. Kernel facts (spec, agents, executor sets) are
** in kernel.h; the model (executors as warp masks, the barrier-slot pool, the
** target) is written down in docs/cutlass.md.
*/
#ifndef TILUA_CUTLASS_H
#define TILUA_CUTLASS_H

#include "kernel.h"

/* Types: the index of a dialect type's kind parameter in names; "what must be want, got t". */
int cut_kind_index(const IrType *t, const char *const *names);
void cut_type_error(IrOp *op, const char *what, const char *want, const IrType *t);

/* The counts of a !cutlass.pipeline<stages, producers, consumers> (a
** !cutlass.pipeline_state<stages> has stages only); 0 where a type lacks one. */
typedef struct CutPipeShape {
  int64_t stages, producers, consumers;
} CutPipeShape;
CutPipeShape cut_pipe_shape(const IrType *t);
/* The depth of a !cutlass.seq_bar or !cutlass.seq_bar_state. */
int64_t cut_seq_depth(const IrType *t);
/* Arrivals per phase of a pipeline's [full, empty] barriers, derived from its
** cutlass.pipeline.init (docs/cutlass.md); an explicit arrive_count must equal them. */
void cut_pipeline_arrive_counts(const IrOp *init, int64_t out[2]);

/* The operand of a cutlass.pipeline.switch_by_executor that its case block
** argument arg stands for (operand group i feeds case block i), or NULL. */
IrValue *cut_switch_case_operand(const IrValue *arg);

/* An init's claim of slots [base, base + n) lies in the CTA pool (the kernel
** rule cutlass_verify_kernel_barriers checks that claims do not overlap). */
bool cut_check_claim(IrOp *op, int64_t base, int64_t n);

/* Elements per unit of a block-striped move of a fragment of type frag. */
int64_t cut_striped_unit(const IrType *frag);

/* The target SM: the module's `target` attribute, else the context's. */
int cut_target_sm(const IrOp *op);

#endif
