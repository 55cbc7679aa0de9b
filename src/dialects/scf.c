/*
** scf.c -- verifiers of structured control flow: block arguments, yielded
** values and results must agree in number and type.
*/
#include <stdlib.h>

#include "dialects.h"

/* Compare a list of values' types with a list of types; name what differs. */
static bool types_agree(IrOp *op, const char *what, uint32_t n, IrValue *const *vals, uint32_t m,
                        const IrType *const *types, const char *against) {
  if (n != m) {
    ir_op_error(op, "%s: %u value%s, but %u %s", what, n, n == 1 ? "" : "s", m, against);
    return false;
  }
  for (uint32_t i = 0; i < n; i++)
    if (vals[i]->type != types[i]) {
      ir_op_error(op, "%s: #%u has type %s, but %s #%u is %s", what, i,
                  ir_op_type_str(op, vals[i]->type), against, i, ir_op_type_str(op, types[i]));
      return false;
    }
  return true;
}

static const IrType **result_types(IrOp *op, const IrType **buf) {
  for (uint32_t i = 0; i < op->nresults; i++) buf[i] = op->results[i].type;
  return buf;
}

static IrValue **operand_values(IrOp *op, uint32_t from, IrValue **buf) {
  for (uint32_t i = from; i < op->noperands; i++) buf[i - from] = op->operands[i].value;
  return buf;
}

static const IrType **arg_types(IrBlock *b, uint32_t from, const IrType **buf) {
  for (uint32_t i = from; i < b->nargs; i++) buf[i - from] = b->args[i]->type;
  return buf;
}

/* Allocation-free small arrays for the common case. */
#define SMALL 64

/* The terminator of block b when it is an op of kind k, else NULL after
** "<where> must end with <k>" at op. */
static IrOp *terminator(IrOp *op, IrBlock *b, IrOpKind k, const char *where) {
  IrOp *t = ir_block_terminator(b);
  if (t && t->kind == k) return t;
  ir_op_error(op, "%s must end with %s", where, ir_op_info(k)->name);
  return NULL;
}

IrResult scf_verify_for(IrOp *op) {
  IrValue *lb = op->operands[0].value, *ub = op->operands[1].value, *st = op->operands[2].value;
  if (lb->type != ub->type || lb->type != st->type) {
    ir_op_error(op, "requires lower bound, upper bound and step of one type");
    return IR_FAIL;
  }
  IrBlock *body = op->regions[0].first;
  if (!body) {
    ir_op_error(op, "expects a body block");
    return IR_FAIL;
  }
  uint32_t niter = op->noperands - 3;
  if (niter > SMALL || op->nresults != niter) {
    if (op->nresults != niter) ir_op_error(op, "has %u loop-carried values but %u results", niter, op->nresults);
    else ir_op_error(op, "too many loop-carried values");
    return IR_FAIL;
  }
  if (body->nargs != niter + 1 || body->args[0]->type != lb->type) {
    ir_op_error(op, "body must take the induction variable (of the bound type) and %u loop-carried value%s",
                niter, niter == 1 ? "" : "s");
    return IR_FAIL;
  }
  IrValue *vals[SMALL];
  const IrType *types[SMALL];
  if (!types_agree(op, "initial values", niter, operand_values(op, 3, vals), niter,
                   arg_types(body, 1, types), "body argument"))
    return IR_FAIL;
  IrOp *y = terminator(op, body, OP_SCF_YIELD, "body");
  if (!y) return IR_FAIL;
  return types_agree(y, "yielded values", y->noperands, operand_values(y, 0, vals), op->nresults,
                     result_types(op, types), "result")
             ? IR_OK
             : IR_FAIL;
}

IrResult scf_verify_while(IrOp *op) {
  IrBlock *before = op->regions[0].first, *after = op->regions[1].first;
  if (!before || !after) {
    ir_op_error(op, "expects a `before` and an `after` block");
    return IR_FAIL;
  }
  if (op->noperands > SMALL || op->nresults > SMALL || after->nargs > SMALL) {
    ir_op_error(op, "too many loop-carried values");
    return IR_FAIL;
  }
  IrValue *vals[SMALL];
  const IrType *types[SMALL];
  if (!types_agree(op, "initial values", op->noperands, operand_values(op, 0, vals), before->nargs,
                   arg_types(before, 0, types), "`before` argument"))
    return IR_FAIL;
  IrOp *c = terminator(op, before, OP_SCF_CONDITION, "`before` region");
  if (!c) return IR_FAIL;
  if (!types_agree(c, "forwarded values", c->noperands - 1, operand_values(c, 1, vals), op->nresults,
                   result_types(op, types), "result"))
    return IR_FAIL;
  if (!types_agree(c, "forwarded values", c->noperands - 1, vals, after->nargs,
                   arg_types(after, 0, types), "`after` argument"))
    return IR_FAIL;
  IrOp *y = terminator(op, after, OP_SCF_YIELD, "`after` region");
  if (!y) return IR_FAIL;
  return types_agree(y, "yielded values", y->noperands, operand_values(y, 0, vals), before->nargs,
                     arg_types(before, 0, types), "`before` argument")
             ? IR_OK
             : IR_FAIL;
}

IrResult scf_verify_if(IrOp *op) {
  if (op->nresults > SMALL) {
    ir_op_error(op, "too many results");
    return IR_FAIL;
  }
  for (int r = 0; r < 2; r++) {
    IrBlock *b = op->regions[r].first;
    if (!b) {
      if (r == 0 || op->nresults) {
        ir_op_error(op, "%s region must hold a block%s", r ? "`else`" : "`then`",
                    r ? " when the op has results" : "");
        return IR_FAIL;
      }
      continue;
    }
    if (b->nargs) {
      ir_op_error(op, "regions take no arguments");
      return IR_FAIL;
    }
    IrOp *y = terminator(op, b, OP_SCF_YIELD, "regions");
    if (!y) return IR_FAIL;
    IrValue *vals[SMALL];
    const IrType *types[SMALL];
    if (y->noperands > SMALL ||
        !types_agree(y, "yielded values", y->noperands, operand_values(y, 0, vals), op->nresults,
                     result_types(op, types), "result"))
      return IR_FAIL;
  }
  return IR_OK;
}

IrResult scf_verify_yield(IrOp *op) {
  IrOp *p = ir_op_parent_op(op);
  if (!p) {
    ir_op_error(op, "must be inside a region");
    return IR_FAIL;
  }
  if (p->kind == OP_SCF_WHILE && op->parent == p->regions[0].first) {
    ir_op_error(op, "cannot terminate the `before` region of scf.while (use scf.condition)");
    return IR_FAIL;
  }
  if (p->kind == OP_MODULE || p->kind == OP_TILE_KERNEL) {
    ir_op_error(op, "cannot terminate the body of '%s'", ir_op_name(p));
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult scf_verify_condition(IrOp *op) {
  IrOp *p = ir_op_parent_op(op);
  if (!p || p->kind != OP_SCF_WHILE || op->parent != p->regions[0].first) {
    ir_op_error(op, "must terminate the `before` region of scf.while");
    return IR_FAIL;
  }
  return IR_OK;
}
