/*
** prepare_for_scheduling.c -- the `tileas-prepare-for-scheduling` pass: the
** six steps that leave each tiled load and store ready for the scheduler and
** the lowering, in order:
**
**   1 decomposeTiledLoadStoreView  a tiled access of a shared tile (a TMA
**       copy) gets its view: `order` (the tensor's dims, fastest first;
**       row-major unless given) and `box` (the per-copy box, outermost first:
**       each extent the largest divisor of the CTA's part of the tile that a
**       TMA box takes: <= 256, and along the fastest dim within the
**       swizzle's span; on a cluster the CTA's block, of one `cta_repeat`
**       piece, 1/k of it for a load multicast to k CTAs), so a tile larger
**       than a box is several copies; a given box a copy takes is kept. The
**       lowering (convert-tileas-to-cutlass) takes its TMA boxes from here
**   2 refineVecSizeOfAtoms  a tiled access of a register tile (vector loads
**       and stores) gets `vec`, the elements per access: the widest access
**       of the target (16 bytes below sm_100, 32 from sm_100: the kernel's
**       target_spec) within what one thread holds contiguously (layout
**       `mma`: 2; `blocked`: its `size` along the fastest dim, or without
**       one its elements per thread, within a row); the lowering of a
**       blocked tile accesses memory `vec` elements at a time
**   3 sliceAndFuse  the scalar ops that compute a tiled access's coordinates
**       and serve nothing else move right before it (its slice, fused with
**       it), so the scheduler moves an access with its address
**   4 runCanonicalizer  the canonicalize pass
**   5 compactMemLayout  a shared tile (alloc_tensor, tiled_load) whose swizzle
**       spans more than its rows (swizzle 128 on 64-byte rows) gets the
**       widest swizzle its rows fill
**   6 refreshBoxDim  every access whose view step 1 set or changed, or whose
**       shared layout step 5 changed, gets the widest box again (step 5's
**       narrower swizzle narrows it)
*/
#include <string.h>

#include "../ir/checked.h"
#include "tileas_layout.h"

typedef struct Prep {
  Rewriter r;
  PtrMap stale; /* tiled access -> non-NULL: its box is recomputed by step 6 */
  bool changed;
} Prep;

static bool pick_access(const IrOp *op) {
  return op->kind == OP_TILEAS_TILED_LOAD || op->kind == OP_TILEAS_TILED_STORE;
}

/* The tile a tiled access reads or writes. */
static const IrType *tile_of(const IrOp *op) {
  return op->kind == OP_TILEAS_TILED_LOAD ? op->results[0].type
                                          : op->operands[op->noperands - 1].value->type;
}

static bool shared(const IrType *t) { return t->space == IR_MS_SHARED; }

/* The largest divisor of n that is at most cap. */
static int64_t divisor_upto(int64_t n, int64_t cap) {
  for (int64_t d = cap < n ? cap : n; d > 1; d--)
    if (n % d == 0) return d;
  return 1;
}

static void ints_of(const IrAttr *a, int64_t *out, uint32_t n, bool *ok) {
  *ok = a && a->kind == IR_ATTR_ARRAY && a->u.arr.n == n;
  for (uint32_t i = 0; *ok && i < n; i++) {
    *ok = a->u.arr.elems[i]->kind == IR_ATTR_INT;
    out[i] = *ok ? a->u.arr.elems[i]->u.i : 0;
  }
}

/* Set op's view to {box, order}; a change makes its box stale. */
static void set_view(Prep *p, IrOp *op, const int64_t *box, const int64_t *order, uint32_t rank) {
  IrNamedAttr e[2] = {
      {ir_intern_cstr(p->r.ctx, "box"), ir_attr_int_array(p->r.ctx, rank, box)},
      {ir_intern_cstr(p->r.ctx, "order"), ir_attr_int_array(p->r.ctx, rank, order)}};
  const IrAttr *view = ir_attr_dict(p->r.ctx, 2, e);
  if (ir_op_attr(op, "view") == view) return;
  ir_op_set_attr(op, "view", view);
  ptrmap_set(&p->stale, op, op);
  p->changed = true;
}

/* {======================================================================
** Steps 1 and 6: views and boxes
** ======================================================================= */

static void read_view(const IrOp *op, int64_t *box, int64_t *order, bool *has_box,
                      bool *has_order) {
  const IrType *t = tile_of(op);
  const IrAttr *view = ir_op_attr(op, "view");
  ints_of(view ? ir_attr_dict_get(view, "box") : NULL, box, t->rank, has_box);
  ints_of(view ? ir_attr_dict_get(view, "order") : NULL, order, t->rank, has_order);
  if (!*has_order)
    for (uint32_t i = 0; i < t->rank; i++)
      order[i] = t->rank - 1 - i;
}

/* What one CTA's TMA copies of op's tile cover along each dim (tileas-plan-cta's
** plan): its block of the tile (the `cta` split), of one piece of a
** `cta_repeat` along the outermost dim, and of that a 1/k part when the load
** multicasts to k CTAs (each loads its part, TMA writes it to all k). */
static void cta_extents(const IrOp *op, const IrType *t, int64_t *ext) {
  int64_t cta[TAS_MAX_RANK], rep[TAS_MAX_RANK];
  tas_cta(t, cta);
  tas_cta_repeat(t, rep);
  for (uint32_t d = 0; d < t->rank; d++)
    ext[d] = t->shape[d] / (cta[d] > 0 ? cta[d] : 1);
  if (t->rank > 0 && rep[0] > 1) ext[0] /= rep[0];
  const IrAttr *mc = op->kind == OP_TILEAS_TILED_LOAD ? ir_op_attr(op, "multicast") : NULL;
  if (t->rank > 0 && mc && mc->kind == IR_ATTR_INT && mc->u.i > 1 && ext[0] % mc->u.i == 0)
    ext[0] /= mc->u.i;
}

/* The widest box a TMA copy of tile t takes along dim d of extent `ext` (a
** CTA's: cta_extents; fastest dim `inner`): a divisor of the extent, at most
** 256; along the fastest dim at most the swizzle's span (TMA refuses a wider
** box with swizzling) and a multiple of 16 bytes where one divides the extent. */
static int64_t box_limit(const IrType *t, uint32_t d, int64_t inner, int64_t ext) {
  int64_t span = tas_layout_int(t, "swizzle", 0), eb = tas_elem_bytes(t->elem), cap = 256;
  if ((int64_t)d != inner) return divisor_upto(ext, cap);
  if (span > 0 && span / eb < cap) cap = span / eb;
  for (int64_t b = divisor_upto(ext, cap); b > 1; b = divisor_upto(ext, b - 1))
    if (b * eb % 16 == 0) return b;
  return divisor_upto(ext, cap);
}

/* The view of a TMA access: its box made anew (step 6, `fresh`), or only
** where it is missing or a copy cannot take it (step 1). */
static void make_view(Prep *p, IrOp *op, bool fresh) {
  const IrType *t = tile_of(op);
  int64_t box[TAS_MAX_RANK], order[TAS_MAX_RANK], ext[TAS_MAX_RANK];
  bool has_box, has_order;
  read_view(op, box, order, &has_box, &has_order);
  cta_extents(op, t, ext);
  for (uint32_t d = 0; d < t->rank; d++) {
    int64_t widest = box_limit(t, d, order[0], ext[d]);
    if (fresh || !has_box || box[d] < 1 || box[d] > widest || ext[d] % box[d]) box[d] = widest;
  }
  set_view(p, op, box, order, t->rank);
}

/* }====================================================================== */

/* {======================================================================
** Step 2: vector width
** ======================================================================= */

/* The `size` a blocked layout (a distributed one: tileas-assign-layouts)
** gives dim d, or 0. */
static int64_t blocked_size(const IrAttr *l, int64_t d) {
  const IrAttr *size = l ? ir_attr_dict_get(l, "size") : NULL;
  return size && size->kind == IR_ATTR_ARRAY && d >= 0 && (uint32_t)d < size->u.arr.n
             ? size->u.arr.elems[d]->u.i
             : 0;
}

/* Elements one thread holds contiguously along the fastest dim: a
** distributed blocked layout's `size` (a slice's: its parent's along the
** slice's fastest dim), else an even share of the tile's rows. */
static int64_t contiguous(const IrType *t, int64_t threads) {
  int64_t row = t->shape[t->rank - 1];
  const IrAttr *kind = tas_layout_get(t, "kind");
  const char *k = kind && kind->kind == IR_ATTR_STR ? kind->u.str.s : "blocked";
  if (!strcmp(k, "mma") || !strcmp(k, "mma_operand"))
    return 2; /* wgmma fragments: pairs of columns */
  if (!strcmp(k, "replicated")) return row;
  int64_t own = blocked_size(t->layout, (int64_t)t->rank - 1);
  if (!strcmp(k, "slice")) {
    int64_t dim = tas_layout_int(t, "dim", -1),
            pd = (int64_t)t->rank; /* the parent's fastest dim */
    if (dim == pd) pd--;
    own = blocked_size(tas_layout_get(t, "parent"), pd);
  }
  if (own > 0) return own < row ? own : row;
  int64_t per_thread = ir_type_num_elements(t) / threads;
  return per_thread < 1 ? 1 : per_thread < row ? per_thread : row;
}

static void refine_vec(Prep *p, IrOp *op, int64_t target, int64_t threads) {
  const IrType *t = tile_of(op);
  int64_t bytes = target >= 100 ? 32 : 16, cap = bytes / tas_elem_bytes(t->elem);
  int64_t run = contiguous(t, threads), vec = 1;
  while (vec * 2 <= cap && run % (vec * 2) == 0)
    vec *= 2;
  if (ir_attrs_TILEAS_TILED_LOAD(op).vec == vec) return;
  rw_set_int(&p->r, op, "vec", vec);
  p->changed = true;
}

/* }====================================================================== */

/* {======================================================================
** Step 3: coordinate slices
** ======================================================================= */

/* May op move next to `access`: a pure scalar op of its block whose every
** use is the access or an op already in its slice (marked)? */
static bool in_slice(IrOp *op, IrOp *access) {
  if (!op || op->parent != access->parent || op->nregions || !ir_op_is_pure(op) ||
      op->nresults != 1 || tas_is_tile(op->results[0].type))
    return false;
  for (IrUse *u = op->results[0].uses; u; u = u->next)
    if (u->owner != access && u->owner->mark != (uint64_t)(uintptr_t)access) return false;
  return true;
}

/* Mark the slice behind user's operands (users before their producers). */
static void mark_slice(IrOp *user, IrOp *access) {
  for (uint32_t i = 0; i < user->noperands; i++) {
    IrOp *def = user->operands[i].value->def;
    if (def && def->mark != (uint64_t)(uintptr_t)access && in_slice(def, access)) {
      def->mark = (uint64_t)(uintptr_t)access;
      mark_slice(def, access);
    }
  }
}

static void slice_and_fuse(Prep *p, IrOp *access) {
  uint64_t tag = (uint64_t)(uintptr_t)access;
  size_t marked = 0, in_place = 0;
  for (IrOp *o = access->parent->first; o; o = o->next)
    o->mark = 0;
  mark_slice(access, access);
  for (IrOp *o = access->parent->first; o != access; o = o->next)
    marked += o->mark == tag;
  for (IrOp *o = access->prev; o && o->mark == tag; o = o->prev)
    in_place++;
  if (in_place == marked) return; /* already right before it */
  IrOpVec slice = {0};
  for (IrOp *o = access->parent->first; o != access; o = o->next)
    if (o->mark == tag) ir_opvec_push(&slice, o);
  for (size_t i = 0; i < slice.n; i++) /* in order: the slice keeps its own */
    ir_op_move_before(slice.v[i], access);
  ir_opvec_free(&slice);
  p->changed = true;
}

/* }====================================================================== */

/* {======================================================================
** Step 5: compact shared layouts
** ======================================================================= */

static bool pick_shared_maker(const IrOp *op) {
  return (op->kind == OP_TILEAS_TILED_LOAD || op->kind == OP_TILEAS_ALLOC_TENSOR) &&
         shared(op->results[0].type) && op->results[0].type->layout;
}

static void compact(Prep *p, IrOp *op) {
  IrValue *v = &op->results[0];
  int64_t sw = tas_layout_int(v->type, "swizzle", 0);
  int64_t row, fit = 128;
  if (!ck_mul(v->type->shape[v->type->rank - 1], tas_elem_bytes(v->type->elem), &row))
    row = INT64_MAX;
  while (fit > row && fit > 0)
    fit = fit == 32 ? 0 : fit / 2;
  if (sw <= fit) return;
  v->type = tas_layout_with(p->r.ctx, v->type, "swizzle", ir_attr_i64(p->r.ctx, fit));
  p->changed = true;
  if (op->kind == OP_TILEAS_TILED_LOAD) ptrmap_set(&p->stale, op, op);
  for (IrUse *u = v->uses; u; u = u->next) /* a TMA store of this buffer */
    if (u->owner->kind == OP_TILEAS_TILED_STORE) ptrmap_set(&p->stale, u->owner, u->owner);
}

/* }====================================================================== */

static IrResult steps_1_to_3(Rewriter *r, IrOp *k) {
  Prep *p = (Prep *)r;
  int64_t target = tas_target(k), threads = kernel_spec(k).threads;
  IrOpVec v = {0};
  rw_collect(k, pick_access, &v);
  for (size_t i = 0; i < v.n; i++)
    if (shared(tile_of(v.v[i]))) make_view(p, v.v[i], false);
  for (size_t i = 0; i < v.n; i++)
    if (!shared(tile_of(v.v[i])) && tile_of(v.v[i])->rank) refine_vec(p, v.v[i], target, threads);
  for (size_t i = 0; i < v.n; i++)
    slice_and_fuse(p, v.v[i]);
  ir_opvec_free(&v);
  return IR_OK;
}

static IrResult steps_5_and_6(Rewriter *r, IrOp *k) {
  Prep *p = (Prep *)r;
  IrOpVec v = {0};
  rw_collect(k, pick_shared_maker, &v);
  for (size_t i = 0; i < v.n; i++)
    compact(p, v.v[i]);
  ir_opvec_free(&v);
  rw_collect(k, pick_access, &v);
  for (size_t i = 0; i < v.n; i++)
    if (ptrmap_get(&p->stale, v.v[i]) && shared(tile_of(v.v[i]))) make_view(p, v.v[i], true);
  ir_opvec_free(&v);
  return IR_OK;
}

IrResult pass_prepare_for_scheduling(IrOp *module, IrPassCtx *pc) {
  Prep p;
  memset(&p, 0, sizeof p);
  rw_init(&p.r, pc->ctx);
  IrResult res = rw_each_kernel(&p.r, module, pc, steps_1_to_3);
  if (res == IR_OK) res = pass_canonicalize(module, pc);
  if (res == IR_OK) res = rw_each_kernel(&p.r, module, pc, steps_5_and_6);
  if (p.changed) pc->changed = true;
  ptrmap_free(&p.stale);
  return res;
}
