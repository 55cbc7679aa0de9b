/*
** sink_negf.c -- the `sink-negf-through-shapes` pass (one pattern, the
** exchange of a negation with a broadcast): a negation of a widened tile moves
** before the shape op, onto the smaller tile, and then, where it feeds an operand of a dot, into the dot's negate immediate (the .neg
** operand modifier of the MMA the dot becomes).
**
**   %n = arith.negf (tileas.broadcast %x)   ->  tileas.broadcast (arith.negf %x)
**   %n = arith.negf (tileas.expand_dim %x)  ->  tileas.expand_dim (arith.negf %x)
**   tileas.dot (arith.negf %a), %b, %c      ->  tileas.dot %a, %b, %c {negate_a = !negate_a}
**   tileas.dot %a, (shape (arith.negf %x)), %c  ->  tileas.dot %a, (shape %x), %c {negate_b = !negate_b}
**
** The exchange is repeated until the negation meets something else, so it
** crosses a chain of shape ops; the fold looks through shape ops that only the
** dot reads (the negation it finds there is the one the exchange sank). The shape op is rebuilt on the negated operand (the old one
** stays while it has other users). With the option `explain`, a negf that
** stays where it is gets the pattern's match-failure note "no broadcast/expand_dim
** op" (MLIR's notifyMatchFailure: debugging output, off by default).
*/
#include "../dialects/dialects.h"
#include "rewrite.h"

typedef struct Sink {
  Rewriter r;
  bool explain;
} Sink;

static bool is_negf(const IrOp *op) { return op->kind == OP_ARITH_NEGF; }

static bool is_shape_op(const IrOp *op) {
  return op && (op->kind == OP_TILEAS_BROADCAST || op->kind == OP_TILEAS_EXPAND_DIM);
}

/* negf(shape(x)) -> shape(negf(x)); the new negf, or NULL when neg is not over a shape op. */
static IrOp *exchange(Sink *s, IrOp *neg) {
  IrOp *shape = neg->operands[0].value->def;
  if (!is_shape_op(shape)) return NULL;
  IrValue *x = shape->operands[0].value;
  rw_before(&s->r, neg);
  IrOp *inner = rw_op(&s->r, OP_ARITH_NEGF, 1, &x, x->type);
  IrMapping map;
  ir_mapping_init(&map);
  ir_mapping_set(&map, x, &inner->results[0]);
  IrOp *outer = ir_builder_insert(&s->r.b, ir_op_clone(s->r.ctx, shape, &map));
  ir_mapping_free(&map);
  rw_replace(neg, &outer->results[0]);
  if (ir_op_results_unused(shape)) ir_op_erase(shape);
  return inner;
}

/* Operand i (0: a, 1: b) of a dot, a negf seen through shape ops that only
** the dot reads (negating before or after widening is the same): the dot reads
** the operand of the negf and negates it instead (negate flipped; false is the
** default, so it goes). */
static void fold_into_dot(IrOp *dot, uint32_t i, const char *flag) {
  IrUse *use = &dot->operands[i];
  while (is_shape_op(use->value->def) && ir_value_num_uses(use->value) == 1) use = &use->value->def->operands[0];
  IrOp *neg = use->value->def;
  if (!neg || !is_negf(neg)) return;
  IrAttrs_TILEAS_DOT a = ir_attrs_TILEAS_DOT(dot);
  bool was = i == 0 ? a.negate_a : a.negate_b;
  ir_op_set_operand(use->owner, use->index, neg->operands[0].value);
  ir_op_set_attr(dot, flag, was ? NULL : ir_attr_bool(ir_op_context(dot), true));
  if (ir_op_results_unused(neg)) ir_op_erase(neg);
}

static bool is_dot(const IrOp *op) { return op->kind == OP_TILEAS_DOT; }

static IrResult sink_kernel(Rewriter *r, IrOp *k) {
  Sink *s = (Sink *)r;
  IrOpVec negs = {0}, dots = {0};
  rw_collect(k, is_negf, &negs);
  for (uint32_t i = 0; i < negs.n; i++) {
    IrOp *neg = negs.v[i], *moved;
    while ((moved = exchange(s, neg))) neg = moved;
    if (s->explain) ir_diag(r->ctx, IR_SEV_NOTE, neg->loc, "no broadcast/expand_dim op");
  }
  rw_collect(k, is_dot, &dots);
  for (uint32_t i = 0; i < dots.n; i++) {
    fold_into_dot(dots.v[i], 0, "negate_a");
    fold_into_dot(dots.v[i], 1, "negate_b");
  }
  ir_opvec_free(&negs);
  ir_opvec_free(&dots);
  return IR_OK;
}

IrResult pass_sink_negf(IrOp *module, IrPassCtx *pc) {
  Sink s = {0};
  rw_init(&s.r, pc->ctx);
  const IrAttr *e = ir_attr_dict_get(pc->options, "explain");
  s.explain = e && e->kind == IR_ATTR_BOOL && e->u.b;
  return rw_each_kernel(&s.r, module, pc, sink_kernel);
}
