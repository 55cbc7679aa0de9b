/*
** convert_cutlass_to_nvvm_util.c -- helpers of `convert-cutlass-to-nvvm`:
** addresses, the values made once at the kernel's entry (thread and warp
** index, the mbarrier pool), executor sets (which warps run an op, from
** kernel.h) and the named barriers the pass takes for groups of warps.
*/
#include <stdlib.h>
#include <string.h>

#include "convert_cutlass_to_nvvm.h"

/* {======================================================================
** Addresses and the values made once at the kernel's entry
** ======================================================================= */

/* p + off elements (p itself when off is the constant 0). */
IrValue *cpn_ptr_add(Cpn *c, IrValue *p, IrValue *off) {
  int64_t k;
  if (dia_const_int(off, &k) && k == 0) return p;
  IrValue *opds[2] = {p, off};
  return rw_op1(&c->rw, OP_TILE_PTR_ADD, 2, opds, p->type);
}

/* The address of p as an integer: i32 in the shared windows, i64 elsewhere. */
IrValue *cpn_ptr_to_int(Cpn *c, IrValue *p) {
  IrMemSpace s = p->type->space;
  return rw_op1(&c->rw, OP_TILE_PTR_TO_INT, 1, &p,
                    s == IR_MS_SHARED || s == IR_MS_CLUSTER ? c->rw.i32 : c->rw.i64);
}

static IrValue *thread_id(Rewriter *r, int d) {
  IrValue *t = rw_op1(r, OP_TILE_THREAD_ID, 0, NULL, r->i32);
  rw_set_str(r, t->def, "dim", DIM_names[d]);
  return t;
}

static IrValue *make_tid(Rewriter *r) { return rw_linear_tid(r, ((Cpn *)r)->block, thread_id); }

static IrValue *make_warp(Rewriter *r) { return rw_op1(r, OP_TILE_WARP_ID, 0, NULL, r->i32); }

static IrValue *make_pool(Rewriter *r) {
  IrValue *v = rw_op1(r, OP_TILE_ALLOC_SHARED, 0, NULL, ir_type_ptr(r->ctx, r->i64, IR_MS_SHARED));
  rw_set_int(r, v->def, "count", CUT_POOL_SLOTS);
  rw_set_int(r, v->def, "align", 8);
  return v;
}

/* The linear thread index in the block. */
IrValue *cpn_tid(Cpn *c) {
  if (!c->tid) c->tid = rw_at_entry(&c->rw, make_tid);
  return c->tid;
}

/* The warp index in the block (tile.warp_id: linear thread index / 32). */
IrValue *cpn_warp(Cpn *c) {
  if (!c->warp) c->warp = rw_at_entry(&c->rw, make_warp);
  return c->warp;
}

/* The 32 mbarrier slots of the CTA: one ptr<i64, shared>, slot k at offset 8k. */
IrValue *cpn_pool(Cpn *c) {
  if (!c->pool) c->pool = rw_at_entry(&c->rw, make_pool);
  return c->pool;
}

/* Slot k of the pool (an i32 index). */
IrValue *cpn_slot(Cpn *c, IrValue *k) { return cpn_ptr_add(c, cpn_pool(c), k); }

/* Is the warp of this thread in mask? A range test when the mask is contiguous. */
IrValue *cpn_in_mask(Cpn *c, uint64_t mask) {
  IrValue *w = cpn_warp(c);
  if (kernel_mask_contiguous(mask)) {
    int lo = kernel_ctz(mask);
    IrValue *rel = lo ? rw_bin(&c->rw, OP_ARITH_SUBI, w, rw_const(&c->rw, lo, c->rw.i32)) : w;
    return rw_cmp(&c->rw, "ult", rel, rw_const(&c->rw, kernel_popcount(mask), c->rw.i32));
  }
  IrValue *bits = rw_bin(&c->rw, OP_ARITH_SHRUI, rw_const(&c->rw, (int64_t)(uint32_t)mask, c->rw.i32), w);
  bits = rw_bin(&c->rw, OP_ARITH_ANDI, bits, rw_const(&c->rw, 1, c->rw.i32));
  return rw_cmp(&c->rw, "ne", bits, rw_const(&c->rw, 0, c->rw.i32));
}

/* }====================================================================== */

/* {======================================================================
** Executors: which warps run an op, and named barriers for groups of them
** ======================================================================= */

/* What a switch_by_executor case argument stands for: its operand (phase B
** forwards them; phase A looks through them). Any other value is itself. */
IrValue *cpn_source(IrValue *v) {
  for (int steps = 0; v && !v->def && steps < 64; steps++) {
    IrValue *o = cut_switch_case_operand(v);
    if (!o) break;
    v = o;
  }
  return v;
}

const KernelExec *cpn_exec(Cpn *c, IrOp *op) {
  size_t i = (size_t)op->mark;
  if (i >= 1 && i <= c->ops.n && c->ops.v[i - 1] == op) return &c->execs[i - 1];
  c->exec_other = kernel_exec_of(op);
  return &c->exec_other;
}

/* Named barrier ids the kernel uses itself (constant ids), so that ours differ. */
bool cpn_reserve_visit(IrOp *op, void *ud) {
  Cpn *c = ud;
  int64_t id = -1;
  if (op->kind == OP_CUTLASS_BAR || op->kind == OP_CUTLASS_NAMED_BARRIER_ARRIVE)
    id = ir_attrs_CUTLASS_BAR(op).id;
  else if ((op->kind == OP_TILE_NAMED_BARRIER_SYNC || op->kind == OP_TILE_NAMED_BARRIER_ARRIVE ||
            op->kind == OP_NVVM_BARRIER || op->kind == OP_NVVM_BARRIER_ARRIVE) &&
           op->noperands > 0 && !dia_const_int(op->operands[0].value, &id))
    id = -1;
  if (id >= 0 && id < SM90_NAMED_BARRIERS) c->nb_used |= 1u << id;
  return true;
}

/* A named barrier id for the threads of warp mask m: one per distinct mask,
** from 15 downwards, skipping the kernel's own. */
static int named_barrier_for(Cpn *c, IrOp *op, uint64_t m) {
  for (int i = 0; i < c->nnb; i++)
    if (c->nb_mask[i] == m) return c->nb_id[i];
  for (int id = SM90_NAMED_BARRIERS - 1; id >= 1; id--) {
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
    rw_op(&c->rw, OP_TILE_BARRIER, 0, NULL, NULL);
    return true;
  }
  int id = named_barrier_for(c, op, m);
  if (id < 0) return false;
  IrValue *opds[2] = {rw_const(&c->rw, id, c->rw.i32), rw_const(&c->rw, 32 * kernel_popcount(m), c->rw.i32)};
  rw_op(&c->rw, OP_TILE_NAMED_BARRIER_SYNC, 2, opds, NULL);
  return true;
}

/* }====================================================================== */

