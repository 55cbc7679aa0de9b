/*
** lower_tile_scheduler_fixup.c -- the StreamK fixup in lower-tile-scheduler:
** the role of worker.c (sw_fixup_role) computed at run time and carried out
** with cutlass.generic_barrier ops on the tile's counter and
** cutlass.block_striped ops between the accumulator and the workspace slots,
** in the order of the reference's fixup model:
**
**   if participates {
**     if wait { wait_eq_reset (the final split's) or wait_eq on wait_value }
**     add slots [read_first, read_first + read_count)  (an scf.if when a role
**                                                       reads at most one)
**     if write { store to write_slot; arrive_inc }
**   }
**   result: !participates || epilogue
*/
#include <stdlib.h>
#include <string.h>

#include "../ir/checked.h"
#include "lower_tile_scheduler.h"

/* What the fixup of one piece builds on: the accumulator and the workspace. */
typedef struct Fix {
  const SchedStreamK *p;
  IrValue *acc, *ws8, *counters;
  SInt tile, rank, cta_tile; /* cta_tile = tile * ctas + rank */
  const IrType *elem, *elem_ptr;
  int64_t threads;
  uint64_t acc_bytes;
} Fix;

static IrValue *value(Low *L, SInt x) { return st_materialize(LTS_STAGE(L), x); }

static IrValue *ptr_cast(Low *L, IrValue *p, const IrType *t) {
  if (p->type == t) return p;
  return rw_op1(&L->rw, OP_TILE_PTR_CAST, 1, &p, t);
}

static IrValue *ptr_add(Low *L, IrValue *p, IrValue *off) {
  IrValue *opds[2] = {p, off};
  return rw_op1(&L->rw, OP_TILE_PTR_ADD, 2, opds, p->type);
}

/* cutlass.block_striped.<k> of the accumulator to or from a slot. */
static void striped(Low *L, const Fix *x, IrOpKind k, SInt slot) {
  SInt off = sw_slot_offset(LTS_STAGE(L), x->p, x->acc_bytes, x->tile, x->rank, slot);
  IrValue *opds[2] = {ptr_cast(L, ptr_add(L, x->ws8, value(L, off)), x->elem_ptr), x->acc};
  IrOp *op = rw_op(&L->rw, k, 2, opds, NULL);
  rw_set_int(&L->rw, op, "threads", x->threads);
  ir_op_set_attr(op, "element_type", ir_attr_type(L->rw.ctx, x->elem));
}

/* cutlass.generic_barrier.<k> on the counter of this CTA tile. */
static void barrier(Low *L, const Fix *x, IrOpKind k, const SInt *v) {
  IrValue *opds[3] = {x->counters, value(L, x->cta_tile), v ? value(L, *v) : NULL};
  rw_op(&L->rw, k, v ? 3 : 2, opds, NULL);
}

/* The wait, which also resets the counter when the role says so. */
static void wait(Low *L, const Fix *x, const SFixup *f) {
  if (st_known(f->reset)) {
    barrier(L, x,
            f->reset.k ? OP_CUTLASS_GENERIC_BARRIER_WAIT_EQ_RESET
                       : OP_CUTLASS_GENERIC_BARRIER_WAIT_EQ,
            &f->wait_value);
    return;
  }
  IrOp *r = rw_begin_if(&L->rw, value(L, f->reset));
  barrier(L, x, OP_CUTLASS_GENERIC_BARRIER_WAIT_EQ_RESET, &f->wait_value);
  rw_begin_else(&L->rw, r);
  barrier(L, x, OP_CUTLASS_GENERIC_BARRIER_WAIT_EQ, &f->wait_value);
  rw_end_if(&L->rw, r);
}

/* Add the slots the role reads to the accumulator. */
static void reads(Low *L, const Fix *x, const SFixup *f) {
  Stage *s = LTS_STAGE(L);
  if (sw_fixup_reads_one(x->p)) {
    IrOp *sif = rw_begin_if(&L->rw, value(L, st_ne(s, f->read_count, st_k(0))));
    striped(L, x, OP_CUTLASS_BLOCK_STRIPED_LOAD_ADD, f->read_first);
    rw_end_if(&L->rw, sif);
    return;
  }
  IrValue *j;
  SInt end = st_add(s, f->read_first, f->read_count);
  IrOp *loop = rw_begin_for(&L->rw, value(L, f->read_first), value(L, end), &j);
  striped(L, x, OP_CUTLASS_BLOCK_STRIPED_LOAD_ADD, stage_ir_value(j));
  rw_end_for(&L->rw, loop);
}

/* The workspace pointers and this CTA's counter index, in front of the fixup. */
static void fixup_setup(Low *L, IrOp *op, const Sched *s, const SWork *w, Fix *x) {
  uint32_t ctas = s->cluster_m * s->cluster_n;
  Rewriter *rw = &L->rw;
  x->p = &s->plan.sk;
  x->acc = op->operands[2].value;
  x->elem = x->acc->type->elem;
  x->elem_ptr = ir_type_ptr(rw->ctx, x->elem, IR_MS_GLOBAL);
  x->threads = lts_fixup_threads(op);
  x->acc_bytes = s->acc_bytes;
  x->ws8 = ptr_cast(L, s->op->operands[5].value, ir_type_ptr(rw->ctx, rw->i8, IR_MS_GLOBAL));
  x->counters =
      ptr_cast(L, ptr_add(L, x->ws8, rw_const(rw, (int64_t)s->plan.ws.barrier_offset, rw->i64)),
               ir_type_ptr(rw->ctx, rw->i32, IR_MS_GLOBAL));
  x->tile = w->f[SF_TILE_IDX];
  x->rank = ctas > 1 ? stage_ir_value(rw_op1(rw, OP_TILE_CLUSTER_RANK, 0, NULL, rw->i32)) : st_k(0);
  x->cta_tile = sw_cta_tile(LTS_STAGE(L), x->p, x->tile, x->rank);
}

/* fixup -> i1: true when this CTA runs the epilogue (a whole tile, or the
** final split after the reduction). */
bool lts_lower_fixup(Low *L, IrOp *op) {
  const Sched *s = lts_handle_of(L, op->operands[0].value)->s;
  Stage *st = LTS_STAGE(L);
  SWork w;
  if (!lts_fields_of(L, op, op->operands[1].value, &w)) return false;
  if (s->plan.sk.sk_tiles == 0 || s->plan.sk.max_splits <= 1) {
    ir_value_replace_all_uses(&op->results[0],
                              value(L, st_bool(true))); /* no piece is ever partial */
    return true;
  }
  Fix x;
  fixup_setup(L, op, s, &w, &x);
  SFixup f = sw_fixup_role(st, x.p, &w);
  IrOp *part = rw_begin_if(&L->rw, value(L, f.participates));
  IrOp *waits = rw_begin_if(&L->rw, value(L, f.wait));
  wait(L, &x, &f);
  rw_end_if(&L->rw, waits);
  reads(L, &x, &f);
  IrOp *writes = rw_begin_if(&L->rw, value(L, f.write));
  striped(L, &x, OP_CUTLASS_BLOCK_STRIPED_STORE, f.write_slot);
  barrier(L, &x, OP_CUTLASS_GENERIC_BARRIER_ARRIVE_INC, NULL);
  rw_end_if(&L->rw, writes);
  rw_end_if(&L->rw, part);
  SInt epilogue = st_select(st, f.participates, f.epilogue, st_bool(true));
  ir_value_replace_all_uses(&op->results[0], value(L, epilogue));
  return true;
}

/* A fixup's accumulator fits one partial slot of its params, in elements the
** block-striped ops move. */
bool lts_check_fixup(IrOp *op, const Sched *s) {
  const IrType *acc = op->operands[2].value->type, *e = acc->elem;
  if (!e || (e->kind != IR_TY_INT && e->kind != IR_TY_FLOAT) || e->width < 16) {
    char *ts = ir_type_to_string(acc);
    ir_op_error(op,
                "the accumulator %s must hold integers or floats of at least 16 bits (its "
                "partial tiles move with block-striped ops)",
                ts);
    ir_free(ts);
    return false;
  }
  int64_t threads = lts_fixup_threads(op);
  int64_t bytes;
  uint64_t need = ck_mul(ir_type_num_elements(acc), dia_type_bytes(e), &bytes) &&
                          ck_mul(bytes, threads > 0 ? threads : 1, &bytes) && bytes >= 0
                      ? (uint64_t)bytes
                      : UINT64_MAX; /* more than any params can say */
  const SchedStreamK *p = &s->plan.sk;
  bool partials = p->sk_tiles > 0 && p->max_splits > 1;
  if (partials && s->acc_bytes < need) {
    IrDiag *d = ir_op_error(op,
                            "needs accumulator_tile_bytes >= %llu on its params (%lld elements of "
                            "%lld bytes per thread, striped over %lld threads), got %llu",
                            (unsigned long long)need, (long long)ir_type_num_elements(acc),
                            (long long)dia_type_bytes(e), (long long)threads,
                            (unsigned long long)s->acc_bytes);
    ir_op_note(d, s->op, "params defined here");
    return false;
  }
  return true;
}

/* Threads that run a fixup: its executor set (whole warps), else the block. */
int64_t lts_fixup_threads(const IrOp *op) {
  KernelExec x = kernel_exec_of(op);
  if (x.scope && x.scope->kind != OP_TILE_KERNEL)
    return SM90_WARP_SIZE * (int64_t)kernel_popcount(x.mask);
  KernelSpec ks = kernel_spec_of(op);
  return ks.ok ? ks.threads : 0;
}
