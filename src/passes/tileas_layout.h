/*
** tileas_layout.h -- what the tileas passes read and change in a tile's
** layout (docs/tileprog.md): entries of the layout dictionary, its CTA part,
** the elementwise ops (whose tiles share one layout), the target and the
** value-forwarding structure of the scf ops (loop-carried slots).
*/
#ifndef TILUA_TILEAS_LAYOUT_H
#define TILUA_TILEAS_LAYOUT_H

#include "rewrite.h"

#define TAS_MAX_RANK 16

/* Is t a tile type? */
bool tas_is_tile(const IrType *t);
/* Entry `key` of t's layout, or NULL (also for a tile without a layout). */
const IrAttr *tas_layout_get(const IrType *t, const char *key);
/* Integer entry `key` of t's layout, or dflt. */
int64_t tas_layout_int(const IrType *t, const char *key, int64_t dflt);
/* t with layout entry `key` set to v (v NULL: removed); t must have a layout. */
const IrType *tas_layout_with(IrContext *ctx, const IrType *t, const char *key, const IrAttr *v);
/* t with another element type (same shape, space and layout). */
const IrType *tas_with_elem(IrContext *ctx, const IrType *t, const IrType *elem);

/* The CTA part: t->rank extents (1 where the layout says nothing). With
** `cta_repeat` [r0, r1, ...] the tile is r0 x r1 x ... equal pieces, each
** split by `cta` (a CTA holds its block of every piece: a ring whose replica
** consumers each slice one piece). */
void tas_cta(const IrType *t, int64_t *cta);
void tas_cta_repeat(const IrType *t, int64_t *rep);
/* Which CTAs hold which block (docs/passes.md): along dim d the block index of
** cluster rank r is (r / stride[d]) mod cta[d]. `cta_stride` gives the strides
** where they are not the default, each dim's after the dims before it (1 along a
** whole dim): B's columns on a 2 x 2 split, [1, 2], where its cta is [1, 2]. */
void tas_cta_stride(const IrType *t, int64_t *stride);
int64_t tas_cta_count(const IrType *t); /* the product of the CTA part */
bool tas_same_cta(const IrType *a, const IrType *b);
/* t with the CTA part cta (dropped when every extent is 1), its default strides;
** t must have a layout. */
const IrType *tas_with_cta(IrContext *ctx, const IrType *t, const int64_t *cta);
/* The same with the rank strides `stride` (NULL: the default; said only where
** they are not). */
const IrType *tas_with_cta_stride(IrContext *ctx, const IrType *t, const int64_t *cta,
                                  const int64_t *stride);
/* Is t in a slice layout (`kind = "slice"`: its CTA part is its parent's, one dim more)? */
bool tas_is_slice(const IrType *t);
/* t with the CTA part (`cta`, `cta_repeat`) of `like`, spelled as like spells it;
** a slice layout's CTA part is its parent's (the rank of the parent). */
const IrType *tas_with_cta_of(IrContext *ctx, const IrType *t, const IrType *like);
/* tileas-plan-cta's split [sm, sn] of a dot's accumulator [m, n_] among n
** CTAs (docs/passes.md): sm = clamp(m / chunk, 1, n), rounded down to a
** divisor of n, for chunk 128 then 64, the first with n_ / sn >= 64; else
** [1, 1]. tileas-materialize-agents counts its consumers per CTA block with it. */
void tas_dot_split(int64_t m, int64_t n_, int64_t n, int64_t *sm, int64_t *sn);

/* An elementwise op on tiles: an arith op or tileas.math with a tile result;
** its tile operands and result share shape and layout (casts change only the
** element type). */
bool tas_elementwise(const IrOp *op);
/* The compute capability the passes target: the kernel's target_spec (90 by default). */
int64_t tas_target(const IrOp *kernel);
/* Size in bytes of an element type. */
int64_t tas_elem_bytes(const IrType *elem);

/* {=== loop-carried slots
** A slot is a set of values of an scf op that must have one type: the
** values that carry it (block arguments, results) and the operands that
** feed it (initial values, yields, conditions). Slots of scf.for: one per
** loop-carried value; scf.while: the `before` slots (init, before argument,
** yield) and the `after` slots (condition operand, after argument, result);
** scf.if: one per result (the two yields). */
typedef struct TasUse {
  IrOp *op;
  uint32_t index;
} TasUse;
typedef struct TasSlot {
  IrOp *owner;       /* the scf op */
  uint32_t nvalues, nfeeds;
  IrValue *values[2]; /* carriers */
  TasUse feeds[2];    /* operands feeding it */
} TasSlot;
/* The slot that value v carries (a block argument or result of an scf op). */
bool tas_slot_of_value(const IrValue *v, TasSlot *s);
/* The slot that operand `index` of op feeds (op: an scf terminator, or an
** scf.for / scf.while taking initial values). */
bool tas_slot_of_use(IrOp *op, uint32_t index, TasSlot *s);
/* Drop slot s, whose values are unused: its feeds, its block arguments and
** its result (the owner is rebuilt without them, its regions moved). */
void tas_drop_slot(IrContext *ctx, const TasSlot *s);
/* Every slot of op (an scf op), in order: slot i of scf.for, the before then
** after slots of scf.while, the results of scf.if; false past the last. */
bool tas_slot_at(IrOp *op, uint32_t i, TasSlot *s);
/* }=== */

/* The state a tileas pass starts with: the rewriter, its option
** max_iterations (where the pass declares it; 10 by default) and whether it
** retyped values (a retype is no edit the pass manager sees). */
typedef struct TasPass {
  Rewriter r;
  int64_t max_iterations;
  bool changed;
  const IrAttr *options; /* the pass's options (pc->options), NULL: none */
} TasPass;
/* rw_run for a state of size bytes with a TasPass first: max_iterations
** read from pc, pc->changed also when the pass retyped values. */
IrResult tas_run(TasPass *state, size_t size, IrOp *module, IrPassCtx *pc,
                 IrResult (*fn)(Rewriter *r, IrOp *k));

#endif
