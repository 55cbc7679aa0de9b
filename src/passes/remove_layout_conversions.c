/*
** remove_layout_conversions.c -- the `tileas-remove-layout-conversions` pass:
** fewer tileas.convert_layout ops, by giving producers the layout their
** consumers want. Three steps per kernel, each followed by the greedy cleanup:
**
**   buffer side   convert_layout shared -> shared of an alloc_tensor or
**                 tiled_load whose other uses take any layout (copy into it,
**                 convert_layout of it): the buffer is made in the new layout
**                 and the convert goes. An alias (select, loop-carried value)
**                 is "failed to rewrite in buffer layout propagation":
**                 tileas-remove-buffer-alias runs first
**   register side convert_layout rmem -> rmem whose operand is computed by a
**                 slice of elementwise ops (each result used once) from
**                 splats, register tiled_loads, convert_layouts and values
**                 already in the target layout: the slice is computed in the
**                 target layout (leaf converts convert to it directly) and the
**                 convert goes; a slice that would need a new convert is left.
**                 The slice crosses an scf.if: a result used once is made in
**                 the layout when both values it yields are. First, an
**                 scf.if whose two yields are converts from one layout
**                 yields their operands, and one convert after it remains.
**                 A convert a tileas.pragma targets (the knob applies to the
**                 next instruction) is "failed to rewrite in reg layout
**                 propagation"
**   cleanup       identities go; convert(convert(x)) converts x once; a
**                 convert of a splat is a splat; tiled_store and copy take the
**                 convert's operand (they accept any layout); unused converts
**                 go. Sweeps until nothing changes, at most max_iterations
**                 (option, default 10): else "failed to apply patterns greedily"
*/
#include <string.h>

#include "tileas_layout.h"

typedef TasPass Rlc;

static bool pick_convert(const IrOp *op) { return op->kind == OP_TILEAS_CONVERT_LAYOUT; }

static IrValue *src_of(const IrOp *cvt) { return cvt->operands[0].value; }

static bool in_shared(const IrValue *v) { return v->type->space == IR_MS_SHARED; }

/* t in the layout of `like` (its element type kept). */
static const IrType *in_layout_of(Rlc *c, const IrType *t, const IrType *like) {
  return ir_type_tile_layout(c->r.ctx, t->elem, t->rank, t->shape, t->space, like->layout);
}

static void retype(Rlc *c, IrValue *v, const IrType *t) {
  if (v->type == t) return;
  v->type = t;
  c->changed = true;
}

static void replace(Rlc *c, IrOp *op, IrValue *v) {
  rw_replace(op, v);
  c->changed = true;
}

/* Each convert_layout of k through step, in program order. */
static bool each_convert(Rlc *c, IrOp *k, bool (*step)(Rlc *c, IrOp *cvt)) {
  IrOpVec v = {0};
  rw_collect(k, pick_convert, &v);
  bool ok = true;
  for (size_t i = 0; ok && i < v.n; i++)
    if (!v.v[i]->erased) ok = step(c, v.v[i]);
  ir_opvec_free(&v);
  return ok;
}

/* {======================================================================
** Cleanup patterns, swept to a fixed point
** ======================================================================= */

/* One pattern on a convert_layout; true when it changed the IR. */
static bool clean_convert(Rlc *c, IrOp *cvt) {
  IrValue *x = src_of(cvt), *y = &cvt->results[0];
  if (!ir_value_has_uses(y)) return replace(c, cvt, NULL), true;
  if (x->type == y->type) return replace(c, cvt, x), true;
  if (x->def && x->def->kind == OP_TILEAS_CONVERT_LAYOUT) { /* convert(convert(x)) */
    IrOp *inner = x->def;
    ir_op_set_operand(cvt, 0, src_of(inner));
    if (!ir_value_has_uses(x)) ir_op_erase(inner);
    return c->changed = true;
  }
  if (x->def && x->def->kind == OP_TILEAS_SPLAT && ir_value_num_uses(x) == 1) { /* a splat is made in any layout */
    retype(c, x, y->type);
    return replace(c, cvt, x), true;
  }
  bool moved = false;
  for (IrUse *u = y->uses, *n; u; u = n) { /* stores and copies take any layout */
    n = u->next;
    IrOp *op = u->owner;
    bool any = (op->kind == OP_TILEAS_TILED_STORE && x->type->space == IR_MS_RMEM) ||
               (op->kind == OP_TILEAS_COPY && u->index == 0);
    if (any) ir_op_set_operand(op, u->index, x), moved = true;
  }
  if (moved) c->changed = true;
  return moved;
}

static bool cleanup(Rlc *c, IrOp *k) {
  for (int64_t it = 0; it < c->max_iterations; it++) {
    IrOpVec v = {0};
    rw_collect(k, pick_convert, &v);
    bool changed = false;
    for (size_t i = 0; i < v.n; i++)
      if (!v.v[i]->erased) changed = clean_convert(c, v.v[i]) || changed;
    ir_opvec_free(&v);
    if (!changed) return true;
  }
  ir_op_error(k, "failed to apply patterns greedily");
  return false;
}

/* }====================================================================== */

/* {======================================================================
** Buffer side
** ======================================================================= */

/* May every use of buffer x but `cvt` see it in another layout? */
static bool uses_take_any(const IrValue *x, const IrOp *cvt) {
  for (IrUse *u = x->uses; u; u = u->next) {
    const IrOp *op = u->owner;
    if (op == cvt || op->kind == OP_TILEAS_CONVERT_LAYOUT) continue;
    if (op->kind == OP_TILEAS_COPY && u->index == 1) continue;
    return false;
  }
  return true;
}

static bool buffer_convert(Rlc *c, IrOp *cvt) {
  IrValue *x = src_of(cvt);
  if (!in_shared(x) || !in_shared(&cvt->results[0])) return true;
  IrOpKind k = x->def ? x->def->kind : OP__COUNT;
  if (k == OP_TILEAS_CONVERT_LAYOUT) return true; /* a chain: the cleanup's */
  if (k != OP_TILEAS_ALLOC_TENSOR && k != OP_TILEAS_TILED_LOAD) {
    IrDiag *d = ir_op_error(cvt, "failed to rewrite in buffer layout propagation");
    ir_note(d, x->def ? x->def->loc : ir_block_parent_op(x->block)->loc,
            "its operand is an alias of shared tensors, not an allocation: tileas-remove-buffer-alias runs first");
    return false;
  }
  if (!uses_take_any(x, cvt)) return true;
  retype(c, x, cvt->results[0].type);
  replace(c, cvt, x);
  return true;
}

/* }====================================================================== */

/* {======================================================================
** Register side
** ======================================================================= */

typedef struct Slice {
  IrOpVec ops;     /* to compute in the target layout */
  IrOpVec leaves;  /* convert_layouts to convert to it directly */
  IrValue **ifs;   /* scf.if results to carry it (their yields are in the slice) */
  size_t nifs, cap;
  bool blocked;    /* a value that would need a new convert */
} Slice;

static void push_if_result(Slice *s, IrValue *v) {
  if (s->nifs == s->cap) {
    s->cap = s->cap ? 2 * s->cap : 8;
    s->ifs = ir_realloc(s->ifs, s->cap * sizeof *s->ifs);
  }
  s->ifs[s->nifs++] = v;
}

static void slice_free(Slice *s) {
  ir_opvec_free(&s->ops);
  ir_opvec_free(&s->leaves);
  ir_free(s->ifs);
}

/* Can v be made in layout `like`, and what changes? An scf.if result is
** made in it when both values it yields are (each used only there). */
static void slice_of(Slice *s, IrValue *v, const IrType *like) {
  if (s->blocked || v->type->layout == like->layout) return;
  IrOp *def = v->def;
  if (!def || ir_value_num_uses(v) != 1) {
    s->blocked = true;
    return;
  }
  TasSlot slot;
  if (def->kind == OP_TILEAS_CONVERT_LAYOUT) {
    ir_opvec_push(&s->leaves, def);
  } else if (def->kind == OP_TILEAS_SPLAT || (def->kind == OP_TILEAS_TILED_LOAD && !in_shared(v))) {
    ir_opvec_push(&s->ops, def);
  } else if (tas_elementwise(def)) {
    ir_opvec_push(&s->ops, def);
    for (uint32_t i = 0; i < def->noperands; i++)
      if (tas_is_tile(def->operands[i].value->type)) slice_of(s, def->operands[i].value, like);
  } else if (def->kind == OP_SCF_IF && !in_shared(v) && tas_slot_of_value(v, &slot)) {
    push_if_result(s, v);
    for (uint32_t i = 0; i < slot.nfeeds; i++)
      slice_of(s, slot.feeds[i].op->operands[slot.feeds[i].index].value, like);
  } else {
    s->blocked = true;
  }
}

/* The tileas.pragma right before op, whose knob applies to it, or NULL. */
static IrOp *pragma_on(IrOp *op) { return op->prev && op->prev->kind == OP_TILEAS_PRAGMA ? op->prev : NULL; }

static bool reg_convert(Rlc *c, IrOp *cvt) {
  IrValue *x = src_of(cvt), *y = &cvt->results[0];
  if (in_shared(x) || !x->def || x->def->kind == OP_TILEAS_CONVERT_LAYOUT || x->def->kind == OP_TILEAS_SPLAT)
    return true; /* buffers, chains and splats: the other steps' */
  Slice s = {0};
  slice_of(&s, x, y->type);
  bool apply = !s.blocked && (s.ops.n > 0 || s.nifs > 0);
  IrOp *knob = pragma_on(cvt);
  if (apply && knob) {
    IrDiag *d = ir_op_error(cvt, "failed to rewrite in reg layout propagation");
    ir_op_note(d, knob, "this knob applies to the convert_layout, which the rewrite removes");
  } else if (apply) {
    for (size_t i = 0; i < s.ops.n; i++)
      retype(c, &s.ops.v[i]->results[0], in_layout_of(c, s.ops.v[i]->results[0].type, y->type));
    for (size_t i = 0; i < s.leaves.n; i++)
      retype(c, &s.leaves.v[i]->results[0], in_layout_of(c, s.leaves.v[i]->results[0].type, y->type));
    for (size_t i = 0; i < s.nifs; i++)
      retype(c, s.ifs[i], in_layout_of(c, s.ifs[i]->type, y->type));
    replace(c, cvt, x);
  }
  slice_free(&s);
  return !(apply && knob);
}

/* The register convert_layout (no knob on it) that makes v, v used only
** there (by an scf.yield), or NULL. */
static IrOp *yielded_convert(IrValue *v) {
  IrOp *cvt = v->def;
  if (!cvt || cvt->kind != OP_TILEAS_CONVERT_LAYOUT || ir_value_num_uses(v) != 1 || pragma_on(cvt)) return NULL;
  return in_shared(src_of(cvt)) || in_shared(v) ? NULL : cvt;
}

/* Slot s of an scf.if whose two yields are converts from one layout: the if
** yields their operands and one convert after it makes the old type (one
** convert on either path, as before; one fewer in the program). */
static void sink_slot(Rlc *c, const TasSlot *s) {
  IrOp *cvt[2];
  for (uint32_t i = 0; i < 2; i++)
    if (!(cvt[i] = yielded_convert(s->feeds[i].op->operands[s->feeds[i].index].value))) return;
  IrValue *r = s->values[0];
  const IrType *old = r->type, *t = src_of(cvt[0])->type;
  if (t != src_of(cvt[1])->type) return;
  for (uint32_t i = 0; i < 2; i++) {
    ir_op_set_operand(s->feeds[i].op, s->feeds[i].index, src_of(cvt[i]));
    ir_op_erase(cvt[i]);
  }
  retype(c, r, t);
  rw_after_value(&c->r, r);
  IrValue *y = rw_op1(&c->r, OP_TILEAS_CONVERT_LAYOUT, 1, &r, old);
  for (IrUse *u = r->uses, *n; u; u = n) {
    n = u->next;
    if (u->owner != y->def) ir_op_set_operand(u->owner, u->index, y);
  }
}

static bool pick_if(const IrOp *op) { return op->kind == OP_SCF_IF; }

/* Converts out of both branches of each scf.if, inner ifs first (so that
** the convert one leaves can leave the outer if in turn). */
static void sink_if_converts(Rlc *c, IrOp *k) {
  IrOpVec v = {0};
  rw_collect(k, pick_if, &v);
  for (size_t i = v.n; i-- > 0;) {
    TasSlot s;
    for (uint32_t j = 0; tas_slot_at(v.v[i], j, &s); j++)
      sink_slot(c, &s);
  }
  ir_opvec_free(&v);
}

static bool reg_side(Rlc *c, IrOp *k) {
  sink_if_converts(c, k);
  return each_convert(c, k, reg_convert);
}

/* }====================================================================== */

static IrResult rlc_kernel(Rewriter *r, IrOp *k) {
  Rlc *c = (Rlc *)r;
  bool ok = cleanup(c, k) && each_convert(c, k, buffer_convert) && cleanup(c, k) &&
            reg_side(c, k) && cleanup(c, k);
  return ok ? IR_OK : IR_FAIL;
}

IrResult pass_remove_layout_conversions(IrOp *module, IrPassCtx *pc) {
  Rlc c;
  return tas_run(&c, sizeof c, module, pc, rlc_kernel);
}
