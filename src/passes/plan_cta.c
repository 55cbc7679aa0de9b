/*
** plan_cta.c -- the `tileas-plan-cta` pass: decides how the CTAs of a cluster share the tiles of a
*program, and records
** it in the CTA part (`cta`) of the tile layouts and in `multicast` on loads.
**
** With kernel_spec.num_ctas = n > 1 a program runs on a cluster of n CTAs
** (Triton's num_ctas): a tile of layout cta [c0, c1] is cut into c0 x c1
** blocks, block (i, j) held by the CTAs of cluster rank r with
** (r / s0) mod c0 = i and (r / s1) mod c1 = j, the strides s the layout's
** `cta_stride` or by default s0 = 1, s1 = c0; where c0 * c1 < n the blocks
** are replicated, each on n / (c0 * c1) CTAs. docs/passes.md says what is decided:
**
**   1. the dots: acc [M, N] split [sm, sn] (sm first: M in chunks of 128,
**      then 64; sn = n / sm, N / sn >= 64; tas_dot_split), a split [sm, 1],
**      b split [1, sn] at rank stride sm (cta_stride); M is the program's: a
**      replica consumer's rows times the replicas (tileas.replica = [c, r]);
**      markers (convert_layouts that change only the CTA part) go before its
**      operands (backward) and after its result (forward), which is fixed; a
**      cta of [2, 1] on the accumulator is two CTAs cooperating on one tile;
**   2. the seeds: those markers and every convert_layout of the input that
**      changes the CTA part (backward, then forward); with none, the anchors:
**      each tiled_load and alloc_tensor split along its first dim that the n
**      CTAs divide (forward markers);
**   3. the worklist: a backward marker makes its operand's producer produce the
**      new CTA part (through elementwise ops, loop-carried slots, splat, loads,
**      alloc_tensor, convert_layout, an extract_slice of one piece: its operand
**      split alike in every piece, `cta_repeat`; broadcast, expand_dim and a
**      reduce along an unsplit dim: their operand split as the result where
**      it is not widened or reduced); a forward marker makes its users take it
**      (elementwise ops, slots, copy, tiled_store, convert_layout, and the
**      shape ops: a reduce along a dim the CTAs do not split, expand_dim,
**      broadcast; a slice layout's CTA part is its parent's). A value is
**      retyped at most once; other users of a retyped value get a forward
**      marker; a convert_layout that becomes an identity is erased, so marker
**      pairs merge. What cannot move stays a convert_layout;
**   4. multicast: a shared tiled_load whose blocks are replicated on k > 1
**      CTAs gets multicast = k (each of the k loads 1/k and multicasts it).
**
** num_ctas = 1 leaves the IR as it is.
*/
#include "../ir/checked.h"
#include "../dialects/kernel.h"
#include "tileas_layout.h"

enum { BACKWARD = 1, FORWARD = 2 };

typedef struct Plan {
  TasPass t; /* first: the rewriter, whether values were retyped */
  int64_t nctas;
  PtrMap dir;   /* marker (a convert_layout) -> its directions */
  PtrMap fixed; /* value -> non-NULL: retyped by the pass, never again */
  IrOpVec queue;
  size_t head;
} Plan;

/* {======================================================================
** Markers
** ======================================================================= */

static void enqueue(Plan *p, IrOp *cvt, int dir) {
  ptrmap_set(&p->dir, cvt, (void *)(intptr_t)dir);
  ir_opvec_push(&p->queue, cvt);
}

static bool is_fixed(Plan *p, const IrValue *v) { return ptrmap_get(&p->fixed, v) != NULL; }

static void set_type(Plan *p, IrValue *v, const IrType *t) {
  if (v->type == t) return;
  v->type = t;
  ptrmap_set(&p->fixed, v, v);
  p->t.changed = true;
}

static IrValue *build_convert(Plan *p, IrValue *x, const IrType *t) {
  return rw_op1(&p->t.r, OP_TILEAS_CONVERT_LAYOUT, 1, &x, t);
}

/* Operand index of op must have type t: a backward marker in front of op. */
static void demand(Plan *p, IrOp *op, uint32_t index, const IrType *t) {
  IrValue *x = op->operands[index].value;
  if (x->type == t) return;
  rw_before(&p->t.r, op);
  IrValue *c = build_convert(p, x, t);
  ir_op_set_operand(op, index, c);
  enqueue(p, c->def, BACKWARD);
}

/* Give v the type t; its users (but `keep`) see the old type through a
** forward marker. */
static void retype(Plan *p, IrValue *v, const IrType *t, IrOp *keep) {
  const IrType *old = v->type;
  if (old == t) return;
  set_type(p, v, t);
  IrUse *u = v->uses;
  while (u && u->owner == keep)
    u = u->next;
  if (!u) return;
  rw_after_value(&p->t.r, v);
  IrValue *c = build_convert(p, v, old);
  for (IrUse *n; u; u = n) {
    n = u->next;
    if (u->owner != keep && u->owner != c->def) ir_op_set_operand(u->owner, u->index, c);
  }
  enqueue(p, c->def, FORWARD);
}

/* An identity convert_layout goes away. */
static bool drop_identity(Plan *p, IrOp *cvt) {
  if (cvt->erased || cvt->operands[0].value->type != cvt->results[0].type) return false;
  rw_replace(cvt, cvt->operands[0].value);
  p->t.changed = true;
  return true;
}

/* A convert_layout of a convert_layout used only there converts from the
** first's operand: a pair merges into one, or into none. */
static bool fold_chain(Plan *p, IrOp *cvt) {
  IrValue *x = cvt->operands[0].value;
  while (x->def && x->def->kind == OP_TILEAS_CONVERT_LAYOUT && ir_value_num_uses(x) == 1) {
    IrOp *inner = x->def;
    ir_op_set_operand(cvt, 0, inner->operands[0].value);
    ir_op_erase(inner);
    p->t.changed = true;
    x = cvt->operands[0].value;
  }
  return drop_identity(p, cvt);
}

/* }====================================================================== */

/* {======================================================================
** Slots and elementwise ops: what one CTA part ties together
** ======================================================================= */

static bool slot_free(Plan *p, const TasSlot *s) {
  for (uint32_t i = 0; i < s->nvalues; i++)
    if (is_fixed(p, s->values[i]) || !s->values[i]->type->layout) return false;
  return true;
}

/* Every value of slot s gets the CTA part of t; `from` (a value of the slot
** reached by a backward marker, or NULL) keeps its users; the feed `use`
** (reached by a forward marker, or NULL) takes x directly. */
static void retype_slot(Plan *p, const TasSlot *s, const IrType *like, IrValue *from,
                        const TasUse *use, IrValue *x) {
  for (uint32_t i = 0; i < s->nvalues; i++) {
    IrValue *v = s->values[i];
    const IrType *t = tas_with_cta_of(p->t.r.ctx, v->type, like);
    if (v == from) set_type(p, v, t);
    else retype(p, v, t, NULL);
  }
  for (uint32_t i = 0; i < s->nfeeds; i++) {
    TasUse f = s->feeds[i];
    if (use && f.op == use->op && f.index == use->index) ir_op_set_operand(f.op, f.index, x);
    else demand(p, f.op, f.index, s->values[0]->type);
  }
}

/* The tile operands of an elementwise op (but `skip`) take the CTA part of like. */
static void demand_operands(Plan *p, IrOp *op, const IrType *like, uint32_t skip) {
  for (uint32_t i = 0; i < op->noperands; i++) {
    const IrType *t = op->operands[i].value->type;
    if (i != skip && tas_is_tile(t) && t->layout)
      demand(p, op, i, tas_with_cta_of(p->t.r.ctx, t, like));
  }
}

/* }====================================================================== */

/* {======================================================================
** Propagation
** ======================================================================= */

/* The dim along which extract_slice op takes one of equal pieces of its
** operand (sizes dividing it, at a multiple of them; whole along the other
** dims), or -1. */
static int piece_dim(IrOp *op) {
  const IrType *x = op->operands[0].value->type, *y = op->results[0].type;
  IrAttrs_TILEAS_EXTRACT_SLICE at = ir_attrs_TILEAS_EXTRACT_SLICE(op);
  if (!x->layout || x->rank != y->rank || at.offsets.n != x->rank) return -1;
  int d = -1;
  for (uint32_t i = 0; i < x->rank; i++) {
    int64_t off = ir_attr_list_int(at.offsets, i);
    if (y->shape[i] == x->shape[i] && off == 0) continue;
    if (d >= 0 || x->shape[i] % y->shape[i] || off % y->shape[i]) return -1;
    d = (int)i;
  }
  return d;
}

/* The operand of a piece slice that makes the slice's CTA part `want`: the
** same split of every piece (cta_repeat: the pieces along the sliced dim). */
static const IrType *pieces_type(Plan *p, IrOp *slice, const IrType *want) {
  const IrType *x = slice->operands[0].value->type;
  int d = piece_dim(slice);
  int64_t cta[TAS_MAX_RANK], rep[TAS_MAX_RANK], stride[TAS_MAX_RANK];
  tas_cta(want, cta);
  tas_cta_stride(want, stride);
  for (uint32_t i = 0; i < x->rank; i++)
    rep[i] = 1;
  rep[d] = x->shape[d] / slice->results[0].type->shape[d];
  const IrType *t = tas_with_cta_stride(p->t.r.ctx, x, cta, stride);
  return rep[d] > 1 && tas_cta_count(t) > 1
             ? tas_layout_with(p->t.r.ctx, t, "cta_repeat",
                               ir_attr_int_array(p->t.r.ctx, x->rank, rep))
             : t;
}

/* The operand type with which shape op (broadcast, expand_dim, reduce) makes
** its result in the CTA part of t, or NULL (docs/passes.md, step 3):
**   broadcast   the operand is split as the result where it is not widened,
**               at the same rank strides; a split of a widened dim is
**               dropped (each CTA widens its block: the CTAs of a split
**               [i, j] widened along i hold the j blocks, each on i CTAs);
**   expand_dim  the operand is split as the result (the new dim never is);
**   reduce      the operand is split as the result, not along the reduced dim
**               (each CTA reduces whole rows of its block). */
static const IrType *shape_operand(Plan *p, IrOp *op, const IrType *t) {
  IrContext *ctx = p->t.r.ctx;
  if (op->kind != OP_TILEAS_BROADCAST && op->kind != OP_TILEAS_EXPAND_DIM &&
      op->kind != OP_TILEAS_REDUCE)
    return NULL;
  const IrType *x = op->operands[0].value->type;
  if (!tas_is_tile(x) || !x->layout || !tas_is_tile(t) || x->rank > TAS_MAX_RANK - 1) return NULL;
  int64_t c[TAS_MAX_RANK], rep[TAS_MAX_RANK], v[TAS_MAX_RANK], s[TAS_MAX_RANK], vs[TAS_MAX_RANK];
  tas_cta_repeat(t, rep);
  for (uint32_t i = 0; i < t->rank; i++)
    if (rep[i] != 1) return NULL; /* pieces: the extract_slice's */
  tas_cta(t, c);
  tas_cta_stride(t, s);
  switch (op->kind) {
  case OP_TILEAS_BROADCAST: {
    if (tas_is_slice(x) || tas_is_slice(t) || x->rank != t->rank) return NULL;
    for (uint32_t i = 0; i < t->rank; i++)
      if (x->shape[i] != t->shape[i]) c[i] = 1;
    return tas_with_cta_stride(ctx, x, c, s);
  }
  case OP_TILEAS_EXPAND_DIM: {
    int64_t d = ir_attrs_TILEAS_EXPAND_DIM(op).dim;
    if (tas_is_slice(t) || d < 0 || (uint32_t)d >= t->rank) return NULL;
    if (tas_is_slice(x))
      return tas_layout_int(x, "dim", -1) == d ? tas_with_cta_of(ctx, x, t) : NULL;
    for (uint32_t i = 0, j = 0; i < t->rank; i++)
      if (i != (uint32_t)d) vs[j] = s[i], v[j++] = c[i];
    return c[d] == 1 ? tas_with_cta_stride(ctx, x, v, vs) : NULL;
  }
  case OP_TILEAS_REDUCE: {
    int64_t d = ir_attrs_TILEAS_REDUCE(op).dim;
    if (tas_is_slice(x) || d < 0 || (uint32_t)d >= x->rank) return NULL;
    if (tas_is_slice(t)) {
      const IrAttr *parent = tas_layout_get(t, "parent");
      const IrType *pt =
          parent && parent->kind == IR_ATTR_DICT
              ? ir_type_tile_layout(ctx, x->elem, x->rank, x->shape, x->space, parent)
              : NULL;
      if (!pt) return NULL;
      tas_cta(pt, c);
      tas_cta_repeat(pt, rep);
      for (uint32_t i = 0; i < pt->rank; i++)
        if (rep[i] != 1) return NULL;
      return c[d] == 1 ? tas_with_cta_of(ctx, x, t) : NULL;
    }
    for (uint32_t i = 0, j = 0; i < x->rank; i++) {
      bool reduced = i == (uint32_t)d;
      v[i] = reduced ? 1 : c[j];
      vs[i] = reduced ? 1 : s[j];
      j += !reduced;
    }
    return tas_with_cta_stride(ctx, x, v, vs);
  }
  default: return NULL;
  }
}

/* Can the producer of x make the CTA part of want itself? */
static bool producer_takes(Plan *p, IrValue *x, const IrType *want) {
  if (!x->type->layout || is_fixed(p, x)) return false;
  TasSlot s;
  if (tas_slot_of_value(x, &s)) return slot_free(p, &s);
  if (!x->def) return false;
  switch (x->def->kind) {
  case OP_TILEAS_CONVERT_LAYOUT:
  case OP_TILEAS_SPLAT:
  case OP_TILEAS_TILED_LOAD:
  case OP_TILEAS_ALLOC_TENSOR: return true;
  case OP_TILEAS_EXTRACT_SLICE: return piece_dim(x->def) >= 0; /* its operand then gets a marker */
  case OP_TILEAS_BROADCAST:
  case OP_TILEAS_EXPAND_DIM: /* the operand then gets a marker */
    return shape_operand(p, x->def, tas_with_cta_of(p->t.r.ctx, x->type, want)) != NULL;
  case OP_TILEAS_REDUCE: { /* a marker stuck in front of it would move more: only when it goes on */
    const IrType *t = shape_operand(p, x->def, tas_with_cta_of(p->t.r.ctx, x->type, want));
    IrValue *opd = x->def->operands[0].value;
    return t && (opd->type == t || producer_takes(p, opd, t));
  }
  default: return tas_elementwise(x->def);
  }
}

/* Backward: the producer of the marker's operand makes the marker's CTA part. */
static bool push_backward(Plan *p, IrOp *cvt) {
  IrValue *x = cvt->operands[0].value;
  const IrType *want = cvt->results[0].type;
  if (!producer_takes(p, x, want)) return false;
  const IrType *t = tas_with_cta_of(p->t.r.ctx, x->type, want);
  TasSlot s;
  bool slot = tas_slot_of_value(x, &s);
  IrOp *def = x->def;
  const IrType *shape = !slot && def ? shape_operand(p, def, t) : NULL; /* before x changes */
  retype(p, x, t, cvt);
  drop_identity(p, cvt);
  if (slot) retype_slot(p, &s, t, x, NULL, NULL);
  else if (def->kind == OP_TILEAS_CONVERT_LAYOUT) drop_identity(p, def); /* a pair merges */
  else if (def->kind == OP_TILEAS_EXTRACT_SLICE) demand(p, def, 0, pieces_type(p, def, t));
  else if (shape) demand(p, def, 0, shape);
  else if (tas_elementwise(def)) demand_operands(p, def, t, UINT32_MAX);
  return true;
}

/* Do the shape ops (reduce, expand_dim, broadcast) carry x's CTA part to
** their result (a slice's in its parent)? A reduce only along a dim the CTAs
** do not split: each CTA reduces whole rows of its block. */
static bool shape_op_takes(const IrOp *op, const IrValue *x) {
  switch (op->kind) {
  case OP_TILEAS_REDUCE: {
    if (!tas_is_tile(op->results[0].type) || !tas_is_tile(x->type)) return false;
    int64_t cta[TAS_MAX_RANK], rep[TAS_MAX_RANK], d = ir_attrs_TILEAS_REDUCE(op).dim;
    tas_cta(x->type, cta);
    tas_cta_repeat(x->type, rep);
    return d >= 0 && (uint32_t)d < x->type->rank && cta[d] == 1 && rep[d] == 1;
  }
  case OP_TILEAS_EXPAND_DIM:
  case OP_TILEAS_BROADCAST: return true;
  default: return false;
  }
}

/* Forward, one use: can (op, index) take x, of the new CTA part, directly?
** With dry, only say; else make it so. */
static bool user_takes(Plan *p, IrOp *op, uint32_t index, IrValue *x, bool dry) {
  TasSlot s;
  if (tas_slot_of_use(op, index, &s)) {
    if (!slot_free(p, &s)) return false;
    if (!dry) retype_slot(p, &s, x->type, NULL, &(TasUse){op, index}, x);
    return true;
  }
  if (shape_op_takes(op, x)) {
    IrValue *r = &op->results[0];
    if (is_fixed(p, r) || !r->type->layout) return false;
    if (dry) return true;
    ir_op_set_operand(op, index, x);
    retype(p, r, tas_with_cta_of(p->t.r.ctx, r->type, x->type), NULL);
    return true;
  }
  bool eltwise = tas_elementwise(op);
  if (eltwise && (is_fixed(p, &op->results[0]) || !op->results[0].type->layout)) return false;
  if (!eltwise && op->kind != OP_TILEAS_CONVERT_LAYOUT && op->kind != OP_TILEAS_TILED_STORE &&
      op->kind != OP_TILEAS_COPY)
    return false;
  if (dry) return true;
  ir_op_set_operand(op, index, x);
  if (op->kind == OP_TILEAS_CONVERT_LAYOUT) drop_identity(p, op);
  else if (op->kind == OP_TILEAS_COPY) demand_operands(p, op, x->type, index); /* one CTA part */
  if (!eltwise) return true;
  demand_operands(p, op, x->type, index);
  retype(p, &op->results[0], tas_with_cta_of(p->t.r.ctx, op->results[0].type, x->type), NULL);
  return true;
}

/* Does any use of v take the CTA part of `like` directly? */
static bool some_user_takes(Plan *p, IrValue *v, IrValue *like) {
  for (IrUse *u = v->uses; u; u = u->next)
    if (user_takes(p, u->owner, u->index, like, true)) return true;
  return false;
}

/* Forward: the users of the marker's result take its operand instead. A
** convert_layout that changes more than the CTA part is split first: it keeps
** the rest, and a marker after it carries the CTA part on. */
static void push_forward(Plan *p, IrOp *cvt) {
  IrValue *x = cvt->operands[0].value, *y = &cvt->results[0];
  if (tas_with_cta_of(p->t.r.ctx, y->type, x->type) != x->type) {
    if (!is_fixed(p, y) && y->type->layout && some_user_takes(p, y, x))
      retype(p, y, tas_with_cta_of(p->t.r.ctx, y->type, x->type), NULL);
    return;
  }
  IrOpVec users = {0};
  for (IrUse *u = y->uses; u; u = u->next)
    ir_opvec_push(&users, u->owner);
  for (size_t i = 0; i < users.n; i++) {
    IrOp *op = users.v[i];
    if (op->erased) continue;
    for (uint32_t k = 0; k < op->noperands; k++)
      if (op->operands[k].value == y && !user_takes(p, op, k, x, false)) break;
  }
  ir_opvec_free(&users);
  if (!cvt->erased && !ir_value_has_uses(y)) {
    ir_op_erase(cvt);
    p->t.changed = true;
  }
}

static void propagate(Plan *p) {
  while (p->head < p->queue.n) {
    IrOp *cvt = p->queue.v[p->head++];
    if (cvt->erased || fold_chain(p, cvt)) continue;
    int dir = (int)(intptr_t)ptrmap_get(&p->dir, cvt);
    if ((dir & BACKWARD) && push_backward(p, cvt)) continue;
    if (dir & FORWARD) push_forward(p, cvt);
  }
}

/* }====================================================================== */

/* {======================================================================
** Decisions: dots, seeds, anchors, multicast
** ======================================================================= */

/* The replica consumers (tileas.replica = [c, n] on the agent) that split
** the rows of the program's accumulator: its M is n times a replica's. */
static int64_t replicas(IrOp *op) {
  for (IrOp *a = ir_op_parent_op(op); a; a = ir_op_parent_op(a)) {
    IrAttrList rep =
        a->kind == OP_TILEAS_AGENT ? ir_stamp_TILEAS_REPLICA(a).value : (IrAttrList){0, NULL};
    if (rep.n == 2) return ir_attr_list_int(rep, 1);
  }
  return 1;
}

static void plan_dot(Plan *p, IrOp *dot) {
  IrAttrs_TILEAS_DOT at = ir_attrs_TILEAS_DOT(dot);
  IrValue *acc = dot->operands[2].value;
  for (uint32_t i = 0; i < 3; i++)
    if (!dot->operands[i].value->type->layout) return;
  int64_t sm, sn, rows;
  if (!ck_mul(acc->type->shape[0], replicas(dot), &rows))
    rows = INT64_MAX; /* an absurd replica count */
  tas_dot_split(rows, acc->type->shape[1], p->nctas, &sm, &sn);
  /* the accumulator's block (i, j) on rank i + sm j (the default strides), a's
  ** rows at rank stride 1 (the default too), b's columns at sm (said) */
  int64_t c_acc[2] = {sm, sn}, c_a[2] = {sm, 1}, c_b[2] = {1, sn}, s_b[2] = {1, sm};
  if (at.transpose_a) c_a[0] = 1, c_a[1] = sm;
  if (at.transpose_b) c_b[0] = sn, c_b[1] = 1, s_b[0] = sm;
  const int64_t *want[3] = {c_a, c_b, c_acc}, *stride[3] = {NULL, s_b, NULL};
  for (uint32_t i = 0; i < 3; i++)
    demand(p, dot, i,
           tas_with_cta_stride(p->t.r.ctx, dot->operands[i].value->type, want[i], stride[i]));
  retype(p, &dot->results[0], dot->operands[2].value->type, NULL);
}

static bool pick_dot(const IrOp *op) { return op->kind == OP_TILEAS_DOT; }
static bool pick_convert(const IrOp *op) { return op->kind == OP_TILEAS_CONVERT_LAYOUT; }
static bool pick_anchor(const IrOp *op) {
  return op->kind == OP_TILEAS_TILED_LOAD || op->kind == OP_TILEAS_ALLOC_TENSOR;
}

/* Split an anchor's tile along its first dim that the CTAs divide. */
static void seed_anchor(Plan *p, IrOp *op) {
  IrValue *v = &op->results[0];
  if (!v->type->layout || tas_cta_count(v->type) != 1) return;
  for (uint32_t d = 0; d < v->type->rank; d++) {
    if (v->type->shape[d] % p->nctas) continue;
    int64_t cta[TAS_MAX_RANK];
    tas_cta(v->type, cta);
    cta[d] = p->nctas;
    retype(p, v, tas_with_cta(p->t.r.ctx, v->type, cta), NULL);
    return;
  }
}

static void seed(Plan *p, IrOp *k) {
  size_t planned = p->queue.n;
  IrOpVec v = {0};
  rw_collect(k, pick_convert, &v);
  for (size_t i = v.n; i-- > 0;) /* outermost first: each folds the chain below it */
    if (!v.v[i]->erased) fold_chain(p, v.v[i]);
  for (size_t i = 0; i < v.n; i++)
    if (!v.v[i]->erased && !ptrmap_get(&p->dir, v.v[i]) &&
        !tas_same_cta(v.v[i]->operands[0].value->type, v.v[i]->results[0].type))
      enqueue(p, v.v[i], BACKWARD | FORWARD);
  ir_opvec_free(&v);
  if (p->queue.n > planned || planned > 0) return;
  rw_collect(k, pick_anchor, &v);
  for (size_t i = 0; i < v.n; i++)
    seed_anchor(p, v.v[i]);
  ir_opvec_free(&v);
}

static void decide_multicast(Plan *p, IrOp *k) {
  IrOpVec v = {0};
  rw_collect(k, pick_anchor, &v);
  for (size_t i = 0; i < v.n; i++) {
    IrOp *op = v.v[i];
    const IrType *t = op->results[0].type;
    int64_t blocks = tas_cta_count(t);
    if (op->kind != OP_TILEAS_TILED_LOAD || t->space != IR_MS_SHARED || p->nctas % blocks) continue;
    if (p->nctas / blocks > 1) rw_set_int(&p->t.r, op, "multicast", p->nctas / blocks);
  }
  ir_opvec_free(&v);
}

/* }====================================================================== */

/* The worklist's state is one kernel's. */
static void forget_kernel(Plan *p) {
  ptrmap_free(&p->dir);
  ptrmap_free(&p->fixed);
  ir_opvec_free(&p->queue);
}

static IrResult plan_kernel(Rewriter *r, IrOp *k) {
  Plan *p = (Plan *)r;
  p->nctas = kernel_spec(k).ctas;
  if (p->nctas <= 1) return IR_OK; /* one CTA: nothing to share */
  IrOpVec dots = {0};
  rw_collect(k, pick_dot, &dots);
  for (size_t i = 0; i < dots.n; i++)
    plan_dot(p, dots.v[i]);
  ir_opvec_free(&dots);
  seed(p, k);
  propagate(p);
  decide_multicast(p, k);
  forget_kernel(p);
  return IR_OK;
}

IrResult pass_plan_cta(IrOp *module, IrPassCtx *pc) {
  Plan p;
  return tas_run(&p.t, sizeof p, module, pc, plan_kernel);
}
