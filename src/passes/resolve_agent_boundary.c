/*
** resolve_agent_boundary.c -- the `tileas-resolve-agent-boundary` pass: a
** value defined outside a tileas.agent (by every warp of the CTA) and used
** inside it (by the agent's warps only) either stays a direct SSA value or is
** delivered through shared memory:
**
**   scalars (constants, program ids, kernel    direct: every warp computed the
**   parameters, what arith makes of them),      same value
**   tensors and other non-tile values,
**   shared tiles (shared memory), register
**   tiles of layout `replicated`
**   tileas.splat of a scalar                    rematerialized: the splat is
**                                               made again at the agent's start
**   other register tiles (fragments spread      handed off: right after the
**   over all the CTA's warps; the agent's       value, alloc_tensor (with the
**   warps hold only part)                       value's CTA part) + copy
**                                               (every warp writes its part);
**                                               at the agent's start a
**                                               convert_layout reads it in the
**                                               layout the agent's uses have
**
** One handoff per value, one convert (or splat) per agent. The barrier that
** orders the copy before the agents' reads is left to the lowering (named
** barriers are another pass's).
*/
#include <string.h>

#include "tileas_layout.h"

typedef struct Boundary {
  Rewriter r;
  PtrMap buffers; /* handed-off value -> its shared buffer */
} Boundary;

/* Is v defined outside `agent` (so the agent's warps did not all compute it)? */
static bool outside(const IrValue *v, const IrOp *agent) {
  const IrOp *def = v->def ? v->def : ir_block_parent_op(v->block);
  return !ir_op_is_ancestor(agent, def);
}

typedef enum { DIRECT, REMAT, HANDOFF } Delivery;

static Delivery delivery(const IrValue *v) {
  const IrType *t = v->type;
  if (!tas_is_tile(t) || t->space != IR_MS_RMEM) return DIRECT;
  const IrAttr *kind = tas_layout_get(t, "kind");
  if (kind && kind->kind == IR_ATTR_STR && !strcmp(kind->u.str.s, "replicated")) return DIRECT;
  return v->def && v->def->kind == OP_TILEAS_SPLAT ? REMAT : HANDOFF;
}

/* The shared buffer holding v (made after v on first use). */
static IrValue *buffer_of(Boundary *b, IrValue *v) {
  IrValue *buf = ptrmap_get(&b->buffers, v);
  if (buf) return buf;
  rw_after_value(&b->r, v);
  IrNamedAttr kind = {ir_intern_cstr(b->r.ctx, "kind"), ir_attr_cstr(b->r.ctx, "shared")};
  const IrType *t = ir_type_tile_layout(b->r.ctx, v->type->elem, v->type->rank, v->type->shape,
                                        IR_MS_SHARED, ir_attr_dict(b->r.ctx, 1, &kind));
  t = tas_with_cta_of(b->r.ctx, t, v->type); /* each CTA of a cluster keeps its part */
  buf = rw_op1(&b->r, OP_TILEAS_ALLOC_TENSOR, 0, NULL, t);
  IrValue *opds[2] = {v, buf};
  rw_op(&b->r, OP_TILEAS_COPY, 2, opds, NULL);
  ptrmap_set(&b->buffers, v, buf);
  return buf;
}

typedef struct Crossing {
  IrOp *agent;
  PtrMap done; /* value -> what the agent reads instead */
  IrOp *last;  /* the last delivery made at the agent's start */
  Boundary *b;
} Crossing;

/* What the agent reads instead of v, made at its start (after the deliveries
** before it). */
static IrValue *delivered(Crossing *c, IrValue *v) {
  Boundary *b = c->b;
  IrValue *src = delivery(v) == REMAT ? v->def->operands[0].value : buffer_of(b, v);
  if (c->last) ir_builder_after(&b->r.b, c->last);
  else ir_builder_at_start(&b->r.b, ir_region_ensure_block(b->r.ctx, &c->agent->regions[0]));
  b->r.b.loc = c->agent->loc;
  IrValue *r = rw_op1(&b->r, delivery(v) == REMAT ? OP_TILEAS_SPLAT : OP_TILEAS_CONVERT_LAYOUT, 1,
                      &src, v->type);
  c->last = r->def;
  return r;
}

static bool resolve_visit(IrOp *op, void *ud) {
  Crossing *c = ud;
  if (op == c->agent) return true;
  for (uint32_t i = 0; i < op->noperands; i++) {
    IrValue *v = op->operands[i].value;
    if (!outside(v, c->agent) || delivery(v) == DIRECT) continue;
    IrValue *r = ptrmap_get(&c->done, v);
    if (!r) {
      r = delivered(c, v);
      ptrmap_set(&c->done, v, r);
    }
    ir_op_set_operand(op, i, r);
  }
  return true;
}

static bool pick_agent(const IrOp *op) { return op->kind == OP_TILEAS_AGENT; }

static IrResult resolve_kernel(Rewriter *r, IrOp *k) {
  Boundary *b = (Boundary *)r;
  IrOpVec agents = {0};
  rw_collect(k, pick_agent, &agents);
  for (size_t i = 0; i < agents.n; i++) {
    Crossing c = {agents.v[i], {0}, NULL, b};
    ir_walk_pre(agents.v[i], resolve_visit, &c);
    ptrmap_free(&c.done);
  }
  ir_opvec_free(&agents);
  ptrmap_free(&b->buffers); /* the kernel's hand-offs */
  return IR_OK;
}

IrResult pass_resolve_agent_boundary(IrOp *module, IrPassCtx *pc) {
  Boundary b;
  return rw_run(&b.r, sizeof b, module, pc, resolve_kernel);
}
