/*
** canonicalize.c -- the `canonicalize` pass: fold constants and identities
** through each op's fold hook, put constants on the right of commutative ops,
** and remove dead ops. Only ops that are removable (pure, or declared
** droppable) are ever erased: side effects always survive. A replica's index
** (an arith.constant marked tileas.replica) is no constant: a lowering that
** runs one code on every replica replaces it, so nothing folds through it.
*/
#include "../dialects/dialects.h"
#include "rewrite.h"

typedef struct Canon {
  IrBuilder b;
  bool changed;
} Canon;

static bool is_constant(IrValue *v) {
  return v->def && (ir_op_info(v->def->kind)->traits & T_CONSTANT);
}

static bool reads_replica_index(const IrOp *op) {
  for (uint32_t i = 0; i < op->noperands; i++) {
    const IrOp *d = op->operands[i].value->def;
    if (d && d->kind == OP_ARITH_CONSTANT && ir_stamp_TILEAS_REPLICA_INDEX(d).value) return true;
  }
  return false;
}

static void fold_block(Canon *c, IrBlock *blk);

static void fold_op(Canon *c, IrOp *op) {
  for (uint32_t r = 0; r < op->nregions; r++)
    for (IrBlock *b = op->regions[r].first; b; b = b->next) fold_block(c, b);
  const IrOpInfo *info = ir_op_info(op->kind);
  if ((info->traits & T_COMMUTATIVE) && op->noperands == 2 && is_constant(op->operands[0].value) &&
      !is_constant(op->operands[1].value)) {
    IrValue *l = op->operands[0].value, *r = op->operands[1].value;
    ir_op_set_operand(op, 0, r);
    ir_op_set_operand(op, 1, l);
    c->changed = true;
  }
  if (!info->fold || op->nresults != 1 || !ir_value_has_uses(&op->results[0])) return;
  if (reads_replica_index(op)) return;
  ir_builder_before(&c->b, op);
  c->b.loc = op->loc;
  IrValue *v = info->fold(&c->b, op);
  if (!v || v == &op->results[0]) return;
  ir_value_replace_all_uses(&op->results[0], v);
  c->changed = true;
}

static void fold_block(Canon *c, IrBlock *blk) {
  IR_FOR_EACH_OP(op, blk) fold_op(c, op);
}

IrResult pass_canonicalize(IrOp *module, IrPassCtx *pc) {
  Canon c;
  ir_builder_init(&c.b, pc->ctx);
  for (int iter = 0; iter < 16; iter++) {
    c.changed = false;
    for (uint32_t r = 0; r < module->nregions; r++)
      for (IrBlock *b = module->regions[r].first; b; b = b->next) {
        fold_block(&c, b);
        if (rw_dce_block(b)) c.changed = true;
      }
    if (!c.changed) break;
    pc->changed = true;
  }
  return IR_OK;
}
