/*
** convert_pipeline_to_nvvm_util.c -- helpers of `convert-pipeline-to-nvvm`:
** building shorthands, the values made once at the kernel's entry (thread and
** warp index, the mbarrier pool), executor sets (which warps run an op) and
** the named barriers the pass takes for groups of warps.
*/
#include <stdlib.h>
#include <string.h>

#include "convert_pipeline_to_nvvm.h"

/* {======================================================================
** Building helpers
** ======================================================================= */

/* Shorthands over c->b (its insertion point and location): an op with at most
** one result, its result, an integer constant, a binary op typed like its left
** operand, an integer comparison. */
IrOp *cpn_build(Cpn *c, IrOpKind k, uint32_t n, IrValue *const *opds, const IrType *rt) {
  return ir_build(&c->b, k, n, opds, rt ? 1 : 0, rt ? &rt : NULL, 0);
}

IrValue *cpn_build1(Cpn *c, IrOpKind k, uint32_t n, IrValue *const *opds, const IrType *rt) {
  return &cpn_build(c, k, n, opds, rt)->results[0];
}

IrValue *cpn_const(Cpn *c, int64_t v, const IrType *t) { return ir_build_const_int(&c->b, v, t); }

IrValue *cpn_bin(Cpn *c, IrOpKind k, IrValue *a, IrValue *b) {
  return ir_build_binary(&c->b, k, a, b);
}

IrValue *cpn_cmp(Cpn *c, const char *pred, IrValue *a, IrValue *b) {
  return ir_build_cmpi(&c->b, pred, a, b);
}

/* p + off elements (p itself when off is the constant 0). */
IrValue *cpn_ptr_add(Cpn *c, IrValue *p, IrValue *off) {
  int64_t k;
  if (dia_const_int(off, &k) && k == 0) return p;
  IrValue *opds[2] = {p, off};
  return cpn_build1(c, OP_TILE_PTR_ADD, 2, opds, p->type);
}

/* The address of p as an integer: i32 in the shared windows, i64 elsewhere. */
IrValue *cpn_ptr_to_int(Cpn *c, IrValue *p) {
  IrMemSpace s = p->type->space;
  return cpn_build1(c, OP_TILE_PTR_TO_INT, 1, &p,
                    s == IR_MS_SHARED || s == IR_MS_CLUSTER ? c->i32 : c->i64);
}

/* Bit tricks on warp masks: lowest set bit, set bits, one run of set bits. */
int cpn_ctz(uint64_t m) {
  int i = 0;
  while (m && !(m & 1)) {
    m >>= 1;
    i++;
  }
  return i;
}

int cpn_popcount(uint64_t m) {
  int n = 0;
  for (; m; m &= m - 1)
    n++;
  return n;
}

static bool contiguous(uint64_t m) {
  if (!m) return false;
  m >>= cpn_ctz(m);
  return (m & (m + 1)) == 0;
}

/* scf.if cond { ... }: the builder goes into the then-block, before its yield. */
IrOp *cpn_begin_if(Cpn *c, IrValue *cond) {
  IrOp *sif = ir_build(&c->b, OP_SCF_IF, 1, &cond, 0, NULL, 2);
  IrBlock *then = ir_region_ensure_block(c->ctx, &sif->regions[0]);
  ir_builder_at_end(&c->b, then);
  IrOp *y = cpn_build(c, OP_SCF_YIELD, 0, NULL, NULL);
  ir_builder_before(&c->b, y);
  return sif;
}

void cpn_end_if(Cpn *c, IrOp *sif) { ir_builder_after(&c->b, sif); }

/* scf.while () { ...; scf.condition(again) } do { scf.yield }: the builder goes
** into the before-block; cpn_end_spin closes it with `again` and steps after it. */
IrOp *cpn_begin_spin(Cpn *c) {
  IrOp *w = ir_build(&c->b, OP_SCF_WHILE, 0, NULL, 0, NULL, 2);
  IrBlock *after = ir_region_ensure_block(c->ctx, &w->regions[1]);
  ir_builder_at_end(&c->b, after);
  cpn_build(c, OP_SCF_YIELD, 0, NULL, NULL);
  ir_builder_at_end(&c->b, ir_region_ensure_block(c->ctx, &w->regions[0]));
  return w;
}

void cpn_end_spin(Cpn *c, IrOp *w, IrValue *again) {
  cpn_build(c, OP_SCF_CONDITION, 1, &again, NULL);
  ir_builder_after(&c->b, w);
}

/* Run fn at the start of the kernel's entry block (after what was made there
** before), so that its value dominates the whole kernel. */
static IrValue *at_entry(Cpn *c, IrValue *(*fn)(Cpn *)) {
  IrBuilder saved = c->b;
  if (c->entry_last)
    ir_builder_after(&c->b, c->entry_last);
  else
    ir_builder_at_start(&c->b, c->entry);
  c->b.loc = c->kernel->loc;
  IrValue *v = fn(c);
  c->entry_last = v->def;
  c->b = saved;
  return v;
}

/* tid.x + bx * (tid.y + by * tid.z) from tile ids. */
static IrValue *make_tid(Cpn *c) {
  IrValue *t = cpn_build1(c, OP_TILE_THREAD_ID, 0, NULL, c->i32);
  ir_op_set_attr(t->def, "dim", ir_attr_cstr(c->ctx, "x"));
  if (c->block[1] == 1 && c->block[2] == 1) return t;
  IrValue *y = cpn_build1(c, OP_TILE_THREAD_ID, 0, NULL, c->i32);
  ir_op_set_attr(y->def, "dim", ir_attr_cstr(c->ctx, "y"));
  IrValue *z = cpn_build1(c, OP_TILE_THREAD_ID, 0, NULL, c->i32);
  ir_op_set_attr(z->def, "dim", ir_attr_cstr(c->ctx, "z"));
  y = cpn_bin(c, OP_ARITH_ADDI, y, cpn_bin(c, OP_ARITH_MULI, z, cpn_const(c, c->block[1], c->i32)));
  return cpn_bin(c, OP_ARITH_ADDI, t, cpn_bin(c, OP_ARITH_MULI, y, cpn_const(c, c->block[0], c->i32)));
}

static IrValue *make_warp(Cpn *c) { return cpn_build1(c, OP_TILE_WARP_ID, 0, NULL, c->i32); }

static IrValue *make_pool(Cpn *c) {
  const IrType *p = ir_type_ptr(c->ctx, c->i64, IR_MS_SHARED);
  IrValue *v = cpn_build1(c, OP_TILE_ALLOC_SHARED, 0, NULL, p);
  ir_op_set_attr(v->def, "count", ir_attr_i64(c->ctx, CPN_POOL_SLOTS));
  ir_op_set_attr(v->def, "align", ir_attr_i64(c->ctx, 8));
  return v;
}

/* The linear thread index in the block. */
IrValue *cpn_tid(Cpn *c) {
  if (!c->tid) c->tid = at_entry(c, make_tid);
  return c->tid;
}

/* The warp index in the block (tile.warp_id: linear thread index / 32). */
IrValue *cpn_warp(Cpn *c) {
  if (!c->warp) c->warp = at_entry(c, make_warp);
  return c->warp;
}

/* The 32 mbarrier slots of the CTA: one ptr<i64, shared>, slot k at offset 8k. */
IrValue *cpn_pool(Cpn *c) {
  if (!c->pool) c->pool = at_entry(c, make_pool);
  return c->pool;
}

/* Slot k of the pool (an i32 index). */
IrValue *cpn_slot(Cpn *c, IrValue *k) { return cpn_ptr_add(c, cpn_pool(c), k); }

/* Is the warp of this thread in mask? A range test when the mask is contiguous. */
IrValue *cpn_in_mask(Cpn *c, uint64_t mask) {
  IrValue *w = cpn_warp(c);
  if (contiguous(mask)) {
    int lo = cpn_ctz(mask);
    IrValue *rel = lo ? cpn_bin(c, OP_ARITH_SUBI, w, cpn_const(c, lo, c->i32)) : w;
    return cpn_cmp(c, "ult", rel, cpn_const(c, cpn_popcount(mask), c->i32));
  }
  IrValue *bits = cpn_bin(c, OP_ARITH_SHRUI, cpn_const(c, (int64_t)(uint32_t)mask, c->i32), w);
  bits = cpn_bin(c, OP_ARITH_ANDI, bits, cpn_const(c, 1, c->i32));
  return cpn_cmp(c, "ne", bits, cpn_const(c, 0, c->i32));
}

/* }====================================================================== */

/* {======================================================================
** Executors: which warps run an op, and named barriers for groups of them
** ======================================================================= */

/* Agents take their warps as convert-tile-to-nvvm gives them: `warp_id`, else
** after the agent before (pre-order). */
bool cpn_agent_visit(IrOp *op, void *ud) {
  CpnAgentScan *s = ud;
  if (op->kind != OP_TILE_AGENT) return true;
  int64_t w = ir_op_attr_int_or(op, "warp_id", s->next);
  ptrmap_set(&s->c->agents, op, (void *)(uintptr_t)(w + 1));
  s->next = w + ir_op_attr_int_or(op, "num_warps", 1);
  return true;
}

static uint64_t warps_mask(int64_t first, int64_t n) {
  if (first < 0 || n < 1 || first + n > 64) return 0;
  return (n == 64 ? ~(uint64_t)0 : (((uint64_t)1 << n) - 1)) << first;
}

static uint32_t block_index(const IrBlock *b) {
  uint32_t i = 0;
  for (const IrBlock *p = b->parent->first; p && p != b; p = p->next)
    i++;
  return i;
}

int64_t cpn_list_at(const IrOp *op, const char *name, uint32_t i) {
  const IrAttr *a = ir_op_attr(op, name);
  if (!a || a->kind != IR_ATTR_ARRAY || i >= a->u.arr.n || a->u.arr.elems[i]->kind != IR_ATTR_INT)
    return 0;
  return a->u.arr.elems[i]->u.i;
}

/* What a switch_by_executor case argument stands for: its operand (phase B
** forwards them; phase A looks through them). Any other value is itself. */
IrValue *cpn_source(IrValue *v) {
  for (int steps = 0; v && !v->def && v->block && steps < 64; steps++) {
    IrOp *sw = ir_block_parent_op(v->block);
    if (!sw || sw->kind != OP_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR) break;
    uint32_t first = 0, i = 0;
    for (IrBlock *b = sw->regions[0].first; b && b != v->block; b = b->next, i++)
      first += (uint32_t)cpn_list_at(sw, "operand_segments", i);
    if (first + v->index >= sw->noperands) break;
    v = sw->operands[first + v->index].value;
  }
  return v;
}

static bool is_elect_value(const IrValue *v) {
  return v->def && (v->def->kind == OP_TILE_ELECT || v->def->kind == OP_NVVM_ELECT_SYNC);
}

/* The executors of op: the innermost switch case, async.exec or agent, else
** every warp; sub-warp when an elect region (or an scf.if on an elect) encloses it. */
CpnExec cpn_compute_exec(Cpn *c, IrOp *op) {
  CpnExec x = {c->all_warps, false};
  bool found = false;
  for (IrBlock *b = op->parent; b;) {
    IrOp *p = ir_block_parent_op(b);
    if (!p || p->kind == OP_TILE_KERNEL) break;
    if (p->kind == OP_TILE_ELECT_ONE ||
        (p->kind == OP_SCF_IF && b == p->regions[0].first && is_elect_value(p->operands[0].value)))
      x.subwarp = true;
    if (!found && p->kind == OP_TILE_AGENT) {
      uintptr_t w = (uintptr_t)ptrmap_get(&c->agents, p);
      x.mask = warps_mask((int64_t)w - 1, ir_op_attr_int_or(p, "num_warps", 1));
      found = true;
    } else if (!found && p->kind == OP_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR) {
      x.mask = (uint64_t)cpn_list_at(p, "masks", block_index(b));
      found = true;
    } else if (!found && p->kind == OP_CUTLASS_ASYNC_EXEC) {
      x.mask = (uint64_t)ir_op_attr_int_or(p, "executors", 0);
      found = true;
    }
    b = p->parent;
  }
  return x;
}

const CpnExec *cpn_exec(Cpn *c, IrOp *op) {
  size_t i = (size_t)op->mark;
  if (i >= 1 && i <= c->nops && c->ops[i - 1] == op) return &c->execs[i - 1];
  static CpnExec none;
  none = cpn_compute_exec(c, op);
  return &none;
}

/* Named barrier ids the kernel uses itself (constant ids), so that ours differ. */
bool cpn_reserve_visit(IrOp *op, void *ud) {
  Cpn *c = ud;
  int64_t id = -1;
  if (op->kind == OP_CUTLASS_BAR || op->kind == OP_CUTLASS_NAMED_BARRIER_ARRIVE)
    id = ir_op_attr_int_or(op, "id", -1);
  else if ((op->kind == OP_TILE_NAMED_BARRIER_SYNC || op->kind == OP_TILE_NAMED_BARRIER_ARRIVE ||
            op->kind == OP_NVVM_BARRIER || op->kind == OP_NVVM_BARRIER_ARRIVE) &&
           op->noperands > 0 && !dia_const_int(op->operands[0].value, &id))
    id = -1;
  if (id >= 0 && id < 16) c->nb_used |= 1u << id;
  return true;
}

/* A named barrier id for the threads of warp mask m: one per distinct mask,
** from 15 downwards, skipping the kernel's own. */
static int named_barrier_for(Cpn *c, IrOp *op, uint64_t m) {
  for (int i = 0; i < c->nnb; i++)
    if (c->nb_mask[i] == m) return c->nb_id[i];
  for (int id = 15; id >= 1; id--) {
    if (c->nb_used & (1u << id)) continue;
    c->nb_used |= 1u << id;
    c->nb_mask[c->nnb] = m;
    c->nb_id[c->nnb++] = id;
    return id;
  }
  ir_op_error(op, "needs a named barrier for warps 0x%llx, but all 16 ids are taken",
              (unsigned long long)m);
  return -1;
}

/* A named barrier even for one warp: bar.sync is a barrier the PTX memory
** model orders memory with (its threads' accesses before it happen before
** every later op of the others, e.g. one lane's release), bar.warp.sync is not
** one (docs/testing.md). */
bool cpn_sync_warps(Cpn *c, IrOp *op, uint64_t m) {
  if (m == c->all_warps) {
    cpn_build(c, OP_TILE_BARRIER, 0, NULL, NULL);
    return true;
  }
  int id = named_barrier_for(c, op, m);
  if (id < 0) return false;
  IrValue *opds[2] = {cpn_const(c, id, c->i32), cpn_const(c, 32 * cpn_popcount(m), c->i32)};
  cpn_build(c, OP_TILE_NAMED_BARRIER_SYNC, 2, opds, NULL);
  return true;
}

/* }====================================================================== */

