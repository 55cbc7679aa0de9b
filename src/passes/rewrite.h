/*
** rewrite.h -- the tools every lowering shares (MLIR's rewriter, in small):
** a builder with the integer types at hand, values made once at a kernel's
** entry, building shorthands, structured control flow, a retyping walk and
** replace-and-erase. A pass puts a Rewriter first in its own state and keeps
** only its patterns.
*/
#ifndef TILUA_REWRITE_H
#define TILUA_REWRITE_H

#include "../dialects/kernel.h"
#include "passes.h"

typedef struct Rewriter {
  IrContext *ctx;
  IrBuilder b;                             /* where ops are built, with the location they get */
  const IrType *i1, *i8, *i16, *i32, *i64; /* at hand */
  IrOp *kernel;                            /* the tile.kernel being rewritten */
  IrBlock *entry;                          /* its entry block */
  IrOp *entry_last;                        /* the last op rw_at_entry made there */
} Rewriter;

void rw_init(Rewriter *r, IrContext *ctx);
/* fn(r, k) on every tile.kernel k of module (after rw_begin_kernel) up to the
** first that fails, so that the kernels after it stay as they were (a pattern
** checks everything before it changes its kernel); pc->changed when any ran. */
IrResult rw_each_kernel(Rewriter *r, IrOp *module, IrPassCtx *pc, IrResult (*fn)(Rewriter *r, IrOp *k));
/* A whole pass: its state (size bytes, a Rewriter first) zeroed and
** initialized, then fn on every kernel by rw_each_kernel. */
IrResult rw_run(Rewriter *state, size_t size, IrOp *module, IrPassCtx *pc,
                IrResult (*fn)(Rewriter *r, IrOp *k));
/* Start on a kernel: its entry block (made if missing), nothing made there yet. */
void rw_begin_kernel(Rewriter *r, IrOp *kernel);
/* Build in front of op, with op's location. */
void rw_before(Rewriter *r, IrOp *op);
/* Build right after v is defined: after its op, or at the start of its block
** (an argument), with the location of that op (or of the block's owner). */
void rw_after_value(Rewriter *r, IrValue *v);
/* fn(r) at the start of the kernel's entry block, after what earlier calls
** made there, so that its value dominates the kernel; the builder comes back. */
IrValue *rw_at_entry(Rewriter *r, IrValue *(*fn)(Rewriter *r));

/* {=== building at r->b */
/* An op with at most one result (rt NULL: none) and no regions; its result. */
IrOp *rw_op(Rewriter *r, IrOpKind k, uint32_t n, IrValue *const *opds, const IrType *rt);
IrValue *rw_op1(Rewriter *r, IrOpKind k, uint32_t n, IrValue *const *opds, const IrType *rt);
IrValue *rw_const(Rewriter *r, int64_t v, const IrType *t);
IrValue *rw_i32(Rewriter *r, int64_t v);
IrValue *rw_bin(Rewriter *r, IrOpKind k, IrValue *a, IrValue *b); /* typed like a */
IrValue *rw_cmp(Rewriter *r, const char *pred, IrValue *a, IrValue *b);
IrValue *rw_select(Rewriter *r, IrValue *c, IrValue *a, IrValue *b);
IrValue *rw_cast(Rewriter *r, IrOpKind k, IrValue *x, const IrType *t); /* extui, trunci, ... */
/* The linear thread index x + bx * (y + by * z) of a block of extents block,
** from id(r, d), the thread index along d (built only where an extent is not 1). */
IrValue *rw_linear_tid(Rewriter *r, const int64_t block[3], IrValue *(*id)(Rewriter *r, int d));
/* Attributes of a new op; rw_copy_attr copies `name` of from (as `as`, or the same name) when present. */
void rw_set_int(Rewriter *r, IrOp *op, const char *name, int64_t v);
void rw_set_str(Rewriter *r, IrOp *op, const char *name, const char *s);
void rw_set_bool(Rewriter *r, IrOp *op, const char *name, bool v);
void rw_copy_attr(IrOp *to, const IrOp *from, const char *name, const char *as);
/* }=== */

/* {=== structured control flow */
/* scf.if cond { ... } [else { ... }]: the builder goes into the then-block,
** before its yield; rw_begin_else into the else-block; rw_end_if after the if. */
IrOp *rw_begin_if(Rewriter *r, IrValue *cond);
void rw_begin_else(Rewriter *r, IrOp *sif);
void rw_end_if(Rewriter *r, IrOp *sif);
/* scf.while () { ...; scf.condition(again) } do { scf.yield }: a spin loop; the
** builder goes into the before-block, rw_end_spin closes it and steps after it. */
IrOp *rw_begin_spin(Rewriter *r);
void rw_end_spin(Rewriter *r, IrOp *w, IrValue *again);
/* scf.for lb to ub step 1 with no loop-carried values: the builder goes into
** the body (before its yield), *iv gets the induction variable; rw_end_for
** puts the builder after the loop. */
IrOp *rw_begin_for(Rewriter *r, IrValue *lb, IrValue *ub, IrValue **iv);
void rw_end_for(Rewriter *r, IrOp *loop);
/* Move the ops of block b to the builder's point, into an scf.if on cond
** when cond is given (b stays, empty); the builder stays where it was. */
void rw_inline_block(Rewriter *r, IrBlock *b, IrValue *cond);
/* }=== */

/* {=== walks and replacement */
/* The ops under root (root included) for which pick says yes, in pre-order. */
void rw_collect(IrOp *root, bool (*pick)(const IrOp *op), IrOpVec *out);
/* The first of them, or NULL. */
IrOp *rw_find(IrOp *root, bool (*pick)(const IrOp *op));
/* Give the values under root a new type: the results of every op, and the
** arguments of every block but root's own entry block (a kernel's parameters
** keep theirs). map returns the new type of v, or NULL to keep it. */
void rw_retype(IrOp *root, const IrType *(*map)(Rewriter *r, const IrValue *v), Rewriter *r);
/* Replace op's result 0 by v (when both are there), then erase op. */
void rw_replace(IrOp *op, IrValue *v);
/* Erase the removable ops of blk (and of the blocks nested in it) whose
** results are unused; true when one went. */
bool rw_dce_block(IrBlock *blk);
/* }=== */

#endif
