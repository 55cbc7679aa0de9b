/*
** decide_slicing.c -- the `tileas-decide-slicing` pass: the rule that gives
** loops their `sliceCount` (and `tileas.slice_loads_first`) for
** `tileas-slicing`, which runs next in tile-to-ptx. A loop is *eligible*
** when it is an scf.for without a sliceCount (a given one stays) and without
** `tileas.pipeline` (a pipelined loop is the producer / consumer protocol:
** its rings count one stage an iteration), in a `compute` agent (a program
** without a dot: producers and consumers keep their loops), its body one
** block of ops without regions (innermost, no scf.if). The rule slices an
** eligible loop that holds tiled_loads none of which (nor the ops its
** operands come from) reads a value the loop carries: 2 slices when twice its
** loads' 32-bit words a thread stay within SLICE_WORDS, else none (4 slices
** measured no faster than 2 where they fit, and spill where 2 just fit:
** docs/PERF.md). Where the body also writes no memory, the iterations are
** independent and the slices' loads can all be in flight before the first
** slice's reduction and its barrier (`tileas.slice_loads_first`:
** tileas-slicing puts them first); where it writes, the slices stay in
** program order (a later slice's load may read what an earlier one stores).
** A body with more than MAX_WRITES ops writing memory is left: in
** s12slice-2 (docs/PERF.md) the loops storing two or three tiles an
** iteration (RMSNorm's and LayerNorm's 3-row programs: Y and the row's
** statistics) ran 3 to 4 % slower sliced, those storing one or none faster
** or the same.
**
** The option `count` (0..16) overrides the rule: 0 marks nothing (the rule
** off), N gives every eligible loop N slices whatever its words (their
** loads first where the rule would put them first) (tl.options.slicing: false or N;
** lua/tilua/gpu/compile.lua), so a bench compares the same kernel both ways.
*/
#include "../dialects/dialects.h"
#include "../dialects/enums.h"
#include "rewrite.h"
#include "tileas_layout.h"

typedef struct Decide {
  Rewriter r;
  int64_t count; /* -1: the rule's; 0: off; N: forced */
} Decide;

#define LOADS_FIRST (ir_stamp_spec(STAMP_TILEAS_SLICE_LOADS_FIRST)->name)
#define SLICE_WORDS 128 /* the loads' 32-bit words a thread, over all slices */
#define MAX_WRITES 1    /* the body's ops writing memory the rule slices at most */

static bool is_for(const IrOp *op) { return op->kind == OP_SCF_FOR; }

/* The agent around op, or NULL. */
static IrOp *agent_of(IrOp *op) {
  for (IrOp *p = ir_op_parent_op(op); p; p = ir_op_parent_op(p))
    if (p->kind == OP_TILEAS_AGENT) return p;
  return NULL;
}

/* v depends on a value the loop carries (a block argument of body but the
** induction variable), through the ops of body. */
static bool carried(const IrValue *v, const IrBlock *body) {
  if (!v->def) return v->block == body && v->index > 0;
  if (v->def->parent != body) return false;
  for (uint32_t i = 0; i < v->def->noperands; i++)
    if (carried(v->def->operands[i].value, body)) return true;
  return false;
}

/* A loop the rule looks at: an scf.for without a sliceCount or
** tileas.pipeline in a compute agent, its body one block of ops without
** regions; -> the agent's threads, else 0. */
static int64_t eligible(IrOp *op) {
  IrOp *agent = agent_of(op);
  IrBlock *body = op->regions[0].first;
  if (ir_op_attr(op, "sliceCount") || ir_op_attr(op, ir_stamp_spec(STAMP_TILEAS_PIPELINE)->name) ||
      !agent || !body || body->next)
    return 0;
  IrAttrs_TILEAS_AGENT a = ir_attrs_TILEAS_AGENT(agent);
  if (a.kind != AGENT_COMPUTE) return 0;
  for (IrOp *o = body->first; o; o = o->next)
    if (o->nregions > 0) return 0;
  return 32 * a.num_warps;
}

/* The loads' 32-bit words a thread of an eligible loop the rule slices (at
** least one tiled_load, none reading what the loop carries), else -1; *writes:
** how many ops of the body write memory. */
static int64_t load_words(IrOp *loop, int64_t threads, int *writes) {
  IrBlock *body = loop->regions[0].first;
  int64_t words = 0;
  bool load = false;
  *writes = 0;
  for (IrOp *o = body->first; o; o = o->next) {
    if (ir_op_effects(o) & IR_EFF_WRITE_MASK) (*writes)++;
    if (o->kind != OP_TILEAS_TILED_LOAD) continue;
    for (uint32_t i = 0; i < o->noperands; i++)
      if (carried(o->operands[i].value, body)) return -1;
    const IrType *t = o->results[0].type;
    int64_t n = ir_type_num_elements(t);
    if (n < 0) return -1;
    words += (n * tas_elem_bytes(t->elem) + 4 * threads - 1) / (4 * threads);
    load = true;
  }
  return load ? words : -1;
}

static IrResult decide_kernel(Rewriter *r, IrOp *k) {
  Decide *d = (Decide *)r;
  if (d->count == 0) return IR_OK;
  IrOpVec v = {0};
  rw_collect(k, is_for, &v);
  for (size_t i = 0; i < v.n; i++) {
    IrOp *op = v.v[i];
    int64_t threads = eligible(op);
    if (threads == 0) continue;
    int writes;
    int64_t words = load_words(op, threads, &writes), n = d->count;
    if (n < 0) n = words >= 0 && 2 * words <= SLICE_WORDS && writes <= MAX_WRITES ? 2 : 1;
    if (n < 2) continue;
    rw_set_int(r, op, "sliceCount", n);
    if (words >= 0 && !writes) rw_set_bool(r, op, LOADS_FIRST, true);
  }
  ir_opvec_free(&v);
  return IR_OK;
}

IrResult pass_decide_slicing(IrOp *module, IrPassCtx *pc) {
  Decide d = {0};
  rw_init(&d.r, pc->ctx);
  const IrAttr *c = ir_attr_dict_get(pc->options, "count");
  d.count = c && c->kind == IR_ATTR_INT ? c->u.i : -1;
  return rw_each_kernel(&d.r, module, pc, decide_kernel);
}
