/*
** optimize_execution_unit_mapping.c -- the `optimize-execution-unit-mapping`
** pass: every group of agents
** becomes one tileas.agent_switch whose num_warps, warp_id and agent_strides
** arrays say where each agent runs; then propagate-execution-unit folds the
** warps upward to the kernel.
**
** A group is a run of consecutive tileas.agent ops in a block, or the agents
** of an agent_switch (whose arrays are computed afresh, so that the pass is
** idempotent). Its agents are stably partitioned: normal ones first, then the
** interleaved ones. A cursor walks the warps; each agent starts at the cursor
** rounded up to its group size g (its num_warps: 4 for a Hopper warpgroup),
** with the formula
**
**   rounded = ((cursor != 0) + (cursor - (cursor != 0)) / g) * g
**
** and where that skips warps, a hole record comes first (num_warps
** 1, warp_id the cursor, agent_strides the warps skipped; its index goes to
** `holes`): an empty slot for the lowering. The cursor moves to rounded + g. A
** last hole pads the total to a multiple of 4 warps (whole warpgroups).
** Duplicate warp ids would then be compacted; the cursor only moves forward,
** so the warp ids made here strictly increase and there is none to compact
** (an assertion checks it).
**
**   tileas.agent {kind = "producer", num_warps = 1} {...}
**   tileas.agent {kind = "consumer", num_warps = 4} {...}
** ->
**   tileas.agent_switch {num_warps = [1, 1, 4], warp_id = [0, 1, 4],
**                        agent_strides = [1, 3, 1], holes = [1]} {
**     tileas.agent {kind = "producer", num_warps = 1} {...}
**     tileas.agent {kind = "consumer", num_warps = 4} {...}
**   }
*/
#include <assert.h>
#include <string.h>

#include "../dialects/dialects.h"
#include "../dialects/sm90_limits.h"
#include "rewrite.h"

typedef struct Entries {
  uint32_t n;
  int64_t num_warps[SM90_MAX_WARPS], warp_id[SM90_MAX_WARPS], stride[SM90_MAX_WARPS];
  int64_t holes[SM90_MAX_WARPS];
  uint32_t nholes;
} Entries;

static void push(Entries *e, int64_t num_warps, int64_t warp_id, int64_t stride, bool hole) {
  if (hole) e->holes[e->nholes++] = e->n;
  e->num_warps[e->n] = num_warps;
  e->warp_id[e->n] = warp_id;
  e->stride[e->n] = stride;
  e->n++;
}

/* The warp the next agent of group size g starts at (rounded to g). */
static int64_t round_to_group(int64_t cursor, int64_t g) {
  int64_t nz = cursor != 0;
  return (nz + (cursor - nz) / g) * g;
}

/* Lay out agents[0..n) (already partitioned); false when they need more warps
** than a block has (the error is at `at`). */
static bool lay_out(IrOp *const *agents, uint32_t n, Entries *e, IrOp *at) {
  int64_t cursor = 0;
  for (uint32_t i = 0; i < n; i++) {
    IrAttrs_TILEAS_AGENT a = ir_attrs_TILEAS_AGENT(agents[i]);
    int64_t at_warp = round_to_group(cursor, a.num_warps);
    if (at_warp + a.num_warps > SM90_MAX_WARPS) {
      IrDiag *d = ir_op_error(at, "the agents need more than the %d warps of a block", SM90_MAX_WARPS);
      ir_op_note(d, agents[i], "this agent of %lld warps would start at warp %lld", (long long)a.num_warps,
                 (long long)at_warp);
      return false;
    }
    if (at_warp != cursor) push(e, 1, cursor, at_warp - cursor, true);
    push(e, a.num_warps, at_warp, a.stride, false);
    cursor = at_warp + a.num_warps;
  }
  int64_t padded = (cursor + 3) / 4 * 4;
  if (padded != cursor) push(e, 1, cursor, padded - cursor, true);
  for (uint32_t i = 1; i < e->n; i++) assert(e->warp_id[i] > e->warp_id[i - 1]); /* nothing to compact */
  return true;
}

/* Normal agents first, then the interleaved ones, each in their order. */
static void partition(IrOp **agents, uint32_t n) {
  IrOp *tmp[SM90_MAX_WARPS];
  uint32_t k = 0;
  for (int pass = 0; pass < 2; pass++)
    for (uint32_t i = 0; i < n; i++)
      if (ir_attrs_TILEAS_AGENT(agents[i]).interleaved == (pass == 1)) tmp[k++] = agents[i];
  for (uint32_t i = 0; i < n; i++) agents[i] = tmp[i];
}

/* A group: the agent_switch sw with its agents, or (sw NULL) a run of loose agents. */
typedef struct Group {
  IrOp *sw;
  IrOp *agents[SM90_MAX_WARPS];
  uint32_t n;
  Entries e;
} Group;

/* Read the group that starts at s, partition and lay it out; false (with an
** error) when it does not fit a block. Nothing changes yet. */
static bool plan_group(IrOp *s, Group *g) {
  memset(g, 0, sizeof *g);
  g->sw = s->kind == OP_TILEAS_AGENT_SWITCH ? s : NULL;
  IrBlock *b = g->sw ? g->sw->regions[0].first : NULL;
  for (IrOp *a = g->sw ? (b ? b->first : NULL) : s; a && a->kind == OP_TILEAS_AGENT; a = a->next) {
    if (g->n == SM90_MAX_WARPS) { /* each agent has a warp at least */
      ir_op_error(a, "the agents need more than the %d warps of a block", SM90_MAX_WARPS);
      return false;
    }
    g->agents[g->n++] = a;
  }
  partition(g->agents, g->n);
  return lay_out(g->agents, g->n, &g->e, g->sw ? g->sw : s);
}

static void set_ints(Rewriter *r, IrOp *sw, const char *name, uint32_t n, const int64_t *v) {
  ir_op_set_attr(sw, name, ir_attr_int_array(r->ctx, n, v));
}

/* The group's agent_switch (made in front of the first loose agent) with its
** cases in entry order and its arrays. */
static void apply_group(Rewriter *r, Group *g) {
  IrOp *sw = g->sw;
  if (!sw) {
    rw_before(r, g->agents[0]);
    sw = ir_build(&r->b, OP_TILEAS_AGENT_SWITCH, 0, NULL, 0, NULL, 1);
  }
  IrBlock *body = ir_region_ensure_block(r->ctx, &sw->regions[0]);
  IrOp *at = body->first; /* agents already in place stay (a second run changes nothing) */
  for (uint32_t i = 0; i < g->n; i++) {
    if (g->agents[i] == at) {
      at = at->next;
      continue;
    }
    ir_op_unlink(g->agents[i]);
    if (at) ir_op_insert_before(at, g->agents[i]);
    else ir_block_append(body, g->agents[i]);
  }
  set_ints(r, sw, "num_warps", g->e.n, g->e.num_warps);
  set_ints(r, sw, "warp_id", g->e.n, g->e.warp_id);
  set_ints(r, sw, "agent_strides", g->e.n, g->e.stride);
  ir_op_set_attr(sw, "holes", g->e.nholes ? ir_attr_int_array(r->ctx, g->e.nholes, g->e.holes) : NULL);
}

/* A group starts at an agent_switch or at a loose agent that no agent precedes. */
static bool starts_group(const IrOp *op) {
  if (op->kind == OP_TILEAS_AGENT_SWITCH) return true;
  return op->kind == OP_TILEAS_AGENT && ir_op_parent_op(op)->kind != OP_TILEAS_AGENT_SWITCH &&
         !(op->prev && op->prev->kind == OP_TILEAS_AGENT);
}

/* Every group planned first, so that a kernel that fails stays as it was. */
static IrResult map_kernel(Rewriter *r, IrOp *k) {
  IrOpVec starts = {0};
  rw_collect(k, starts_group, &starts);
  Group *g = ir_malloc(sizeof *g);
  bool ok = true;
  for (uint32_t i = 0; i < starts.n && ok; i++) ok = plan_group(starts.v[i], g);
  for (uint32_t i = 0; i < starts.n && ok; i++) {
    plan_group(starts.v[i], g);
    apply_group(r, g);
  }
  ir_free(g);
  ir_opvec_free(&starts);
  return ok ? IR_OK : IR_FAIL;
}

IrResult pass_optimize_execution_unit_mapping(IrOp *module, IrPassCtx *pc) {
  Rewriter r;
  if (rw_run(&r, sizeof r, module, pc, map_kernel) != IR_OK) return IR_FAIL;
  return pass_propagate_execution_unit(module, pc);
}
