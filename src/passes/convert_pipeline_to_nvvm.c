/*
** convert_pipeline_to_nvvm.c -- the `convert-pipeline-to-nvvm` pass (seeds 000,
** 001, 002): every cutlass op but the tile scheduler's becomes tile, nvvm,
** arith and scf ops that convert-tile-to-nvvm (which runs next) and the PTX
** emitter accept. docs/lowering.md has the full table; in short:
**
**   pipeline.create/init   32 mbarrier slots (tile.alloc_shared) per CTA; thread 0
**                          inits stage s's full (base+2s) and empty (base+2s+1)
**                          barrier with the stamped arrive_count, fences, then a
**                          CTA barrier (a cluster sync when a pipeline spans it)
**   pipeline.state.*       one i64: index (bits 0-15), phase (bit 16), count (32-63)
**   producer_acquire       spin on try_wait.parity(empty[index], phase ^ 1)
**   producer_commit        the participant's leader: arrive.expect_tx(full[index],
**                          bytes) when bytes > 0, else a plain arrive
**   consumer_wait          spin on try_wait.parity(full[index], phase)
**   consumer_release       arrive on empty[index]: from every consumer thread
**                          (cooperative) or once per participant after its warps
**                          sync (the others), on every CTA of the cluster in mode
**                          "cluster"
**   try_acquire / try_wait test_wait.parity
**   producer_tail          bulk wait_group 0, or (cluster) a wait on every stage
**   switch_by_executor     scf.if on the warp index per case
**   async.exec             its body under scf.if on the warp index
**   seq_bar.*              slots of the same pool; an i32 cursor (index, phase)
**   async.*                spins, bulk / wgmma commit + wait; bridges folded away
**   the rest               convert_pipeline_to_nvvm_mem.c
**
** Everything that can be checked is checked before the IR changes (phase A);
** the rewrite (phase B) then runs op by op in pre-order, so that every operand
** is already lowered when its user is. Leaf ops build their replacement in front
** of themselves and are erased; region ops are unwrapped last, innermost first.
*/
#include <stdlib.h>
#include <string.h>

#include "convert_pipeline_to_nvvm.h"

/* {======================================================================
** Phase A: what the kernel holds, checked before anything changes
** ======================================================================= */

static const char *const mode_names[] = {"cooperative", "warp_specialized", "strided_urem",
                                         "strided_udiv", "cluster", NULL};

static bool name_has_prefix(const IrOp *op, const char *p) {
  return strncmp(ir_op_name(op), p, strlen(p)) == 0;
}

static bool is_pipeline_op(IrOpKind k) {
  return k >= OP_CUTLASS_PIPELINE_CREATE && k <= OP_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR;
}

static void int_list(const IrOp *op, const char *name, int64_t *out, uint32_t *n) {
  const IrAttr *a = ir_op_attr(op, name);
  *n = 0;
  if (!a || a->kind != IR_ATTR_ARRAY) return;
  for (uint32_t i = 0; i < a->u.arr.n && i < CPN_MAX_PART; i++)
    if (a->u.arr.elems[i]->kind == IR_ATTR_INT) out[(*n)++] = a->u.arr.elems[i]->u.i;
}

/* Inits claim barriers for the whole CTA: they must run on every warp. */
static bool check_init_scope(Cpn *c, IrOp *op) {
  const CpnExec *x = cpn_exec(c, op);
  if (x->mask == c->all_warps && !x->subwarp) return true;
  ir_op_error(op, "must run on every warp of the block (it initializes the barriers with one "
                  "thread, then synchronizes the CTA), not on warps 0x%llx%s",
              (unsigned long long)x->mask, x->subwarp ? " under an elect" : "");
  return false;
}

static bool read_pipe(Cpn *c, IrOp *init) {
  IrOp *cr = init->operands[0].value->def;
  if (!cr || cr->kind != OP_CUTLASS_PIPELINE_CREATE) {
    ir_op_error(init, "initializes a pipeline handle that does not come from cutlass.pipeline.create");
    return false;
  }
  CpnPipe *p = arena_alloc(ir_arena(c->ctx), sizeof *p);
  p->create = cr;
  p->init = init;
  p->stages = ir_op_attr_int_or(init, "numStages", 0);
  p->base = ir_op_attr_int_or(init, "barrier_id_base", 0);
  p->tx = ir_op_attr_int_or(init, "transaction_bytes", 0);
  p->count[0] = cpn_list_at(init, "arrive_count", 0);
  p->count[1] = cpn_list_at(init, "arrive_count", 1);
  const char *m = ir_op_attr_str(init, "mode");
  p->mode = -1;
  for (int i = 0; m && mode_names[i]; i++)
    if (strcmp(m, mode_names[i]) == 0) p->mode = i;
  int_list(init, "participants", p->prod, &p->np);
  int_list(init, "consumers", p->cons, &p->nc);
  if (p->mode < 0 || p->count[0] <= 0 || p->count[1] <= 0 || p->stages <= 0) {
    ir_op_error(init, "has no verified mode, numStages and arrive_count (run the verifier first)");
    return false;
  }
  if (p->mode == MODE_CLUSTER) c->cluster_pipes = true;
  ptrmap_set(&c->handles, cr, p);
  return check_init_scope(c, init);
}

static bool read_seq(Cpn *c, IrOp *init) {
  IrOp *cr = init->operands[0].value->def;
  if (!cr || cr->kind != OP_CUTLASS_SEQ_BAR_CREATE) {
    ir_op_error(init, "initializes a seq_bar handle that does not come from cutlass.seq_bar.create");
    return false;
  }
  CpnSeq *s = arena_alloc(ir_arena(c->ctx), sizeof *s);
  s->create = cr;
  s->init = init;
  s->depth = ir_type_param_int(init->operands[0].value->type, 0, 1);
  s->base = ir_op_attr_int_or(init, "barrier_id_base", 0);
  s->count = ir_op_attr_int_or(init, "arrive_count", 1);
  ptrmap_set(&c->handles, cr, s);
  return check_init_scope(c, init);
}

/* The handle operand #0 of a pipeline or seq_bar op, from its create and init. */
static void *handle_of(Cpn *c, IrOp *op) {
  IrOp *cr = cpn_source(op->operands[0].value)->def;
  void *h = cr ? ptrmap_get(&c->handles, cr) : NULL;
  if (h) return h;
  const char *what = name_has_prefix(op, "cutlass.seq_bar") ? "seq_bar" : "pipeline";
  if (cr && (cr->kind == OP_CUTLASS_PIPELINE_CREATE || cr->kind == OP_CUTLASS_SEQ_BAR_CREATE))
    ir_op_error(op, "uses a %s that no cutlass.%s.init initializes", what, what);
  else
    ir_op_error(op, "needs its %s handle straight from cutlass.%s.create (handles cannot be "
                    "carried through loops or branches)", what, what);
  return NULL;
}

/* An op of another family or unknown to this pass: a diagnostic naming it. */
static bool check_unknown(Cpn *c, IrOp *op) {
  if (name_has_prefix(op, "cutlass.tile_scheduler.") && !cpn_is_mem_op(op->kind)) {
    IrDiag *d = ir_op_error(op, "is not lowered by convert-pipeline-to-nvvm: tile scheduler ops "
                                "are lowered by lower-tile-scheduler, which must run first");
    if (strstr(ir_op_name(op), "sm100") && ir_context_target_sm(c->ctx) < 100)
      ir_note(d, op->loc, "the SM100 StreamK scheduler does not exist on sm_%d",
              ir_context_target_sm(c->ctx));
    return false;
  }
  ir_op_error(op, "is not lowered by convert-pipeline-to-nvvm");
  return false;
}

/* Consumer releases under an elect cannot make a multi-warp participant's
** reads precede a single arrival. */
static bool check_release_scope(Cpn *c, IrOp *op, const CpnPipe *p) {
  const CpnExec *x = cpn_exec(c, op);
  if (!x->subwarp || p->mode == MODE_COOPERATIVE) return true;
  for (uint32_t i = 0; i < p->nc; i++)
    if (cpn_popcount(x->mask & (uint64_t)p->cons[i]) > 1) {
      ir_op_error(op, "runs under an elect, but its participant's warps 0x%llx must all finish "
                      "with the stage before its one arrival: release from every thread",
                  (unsigned long long)(x->mask & (uint64_t)p->cons[i]));
      return false;
    }
  return true;
}

static bool check_op(Cpn *c, IrOp *op) {
  switch (op->kind) {
  case OP_CUTLASS_PIPELINE_INIT: return read_pipe(c, op);
  case OP_CUTLASS_SEQ_BAR_INIT: return read_seq(c, op);
  case OP_CUTLASS_PIPELINE_CREATE:
  case OP_CUTLASS_SEQ_BAR_CREATE:
  case OP_CUTLASS_PIPELINE_STATE_INCREMENT:
  case OP_CUTLASS_PIPELINE_STATE_BUMP:
  case OP_CUTLASS_PIPELINE_STATE_INDEX:
  case OP_CUTLASS_PIPELINE_STATE_PHASE:
  case OP_CUTLASS_PIPELINE_STATE_COUNT:
  case OP_CUTLASS_SEQ_BAR_STATE_CREATE:
  case OP_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR:
  case OP_CUTLASS_ASYNC_EXEC:
  case OP_CUTLASS_ASYNC_CREATE_NONE:
  case OP_CUTLASS_ASYNC_WAIT:
  case OP_CUTLASS_ASYNC_FUTURE_WAIT:
  case OP_CUTLASS_ASYNC_TOKEN_TO_ASYNC:
  case OP_CUTLASS_ASYNC_TO_ASYNC: return true;
  case OP_CUTLASS_SEQ_BAR_ARRIVE:
  case OP_CUTLASS_SEQ_BAR_WAIT: return handle_of(c, op) != NULL;
  default: break;
  }
  if (is_pipeline_op(op->kind)) {
    CpnPipe *p = handle_of(c, op);
    if (!p) return false;
    return op->kind != OP_CUTLASS_PIPELINE_CONSUMER_RELEASE || check_release_scope(c, op, p);
  }
  if (cpn_is_mem_op(op->kind)) return cpn_check_mem_op(c, op);
  return check_unknown(c, op);
}

/* }====================================================================== */

/* {======================================================================
** Pipeline states: one i64 = index | phase << 16 | count << 32
** ======================================================================= */

static IrValue *trunc32(Cpn *c, IrValue *v) { return ir_build_unary(&c->b, OP_ARITH_TRUNCI, v, c->i32); }
static IrValue *zext64(Cpn *c, IrValue *v) { return ir_build_unary(&c->b, OP_ARITH_EXTUI, v, c->i64); }
static IrValue *c32(Cpn *c, int64_t v) { return cpn_const(c, v, c->i32); }

static IrValue *st_index(Cpn *c, IrValue *s) {
  return cpn_bin(c, OP_ARITH_ANDI, trunc32(c, s), c32(c, 0xffff));
}

static IrValue *st_phase(Cpn *c, IrValue *s) {
  IrValue *hi = cpn_bin(c, OP_ARITH_SHRUI, trunc32(c, s), c32(c, 16));
  return cpn_bin(c, OP_ARITH_ANDI, hi, c32(c, 1));
}

static IrValue *st_count(Cpn *c, IrValue *s) {
  return trunc32(c, cpn_bin(c, OP_ARITH_SHRUI, s, cpn_const(c, 32, c->i64)));
}

static IrValue *st_pack(Cpn *c, IrValue *index, IrValue *phase, IrValue *count) {
  IrValue *lo = cpn_bin(c, OP_ARITH_ORI, index, cpn_bin(c, OP_ARITH_SHLI, phase, c32(c, 16)));
  IrValue *hi = cpn_bin(c, OP_ARITH_SHLI, zext64(c, count), cpn_const(c, 32, c->i64));
  return cpn_bin(c, OP_ARITH_ORI, hi, zext64(c, lo));
}

/* index + 1, wrapping to 0 at `stages` and then flipping the phase; count + 1. */
static IrValue *st_increment(Cpn *c, IrValue *s, int64_t stages) {
  IrValue *next = cpn_bin(c, OP_ARITH_ADDI, st_index(c, s), c32(c, 1));
  IrValue *wrap = cpn_cmp(c, "eq", next, c32(c, stages));
  IrValue *index = ir_build_select(&c->b, wrap, c32(c, 0), next);
  IrValue *flip = ir_build_unary(&c->b, OP_ARITH_EXTUI, wrap, c->i32);
  IrValue *phase = cpn_bin(c, OP_ARITH_XORI, st_phase(c, s), flip);
  IrValue *count = cpn_bin(c, OP_ARITH_ADDI, st_count(c, s), c32(c, 1));
  return st_pack(c, index, phase, count);
}

static int64_t stages_of(const IrType *t) { return ir_type_param_int(t, 0, 1); }

static IrValue *lower_state_op(Cpn *c, IrOp *op) {
  IrValue *s = op->noperands ? op->operands[op->noperands - 1].value : NULL;
  switch (op->kind) {
  case OP_CUTLASS_PIPELINE_STATE_CREATE: {
    int64_t i = ir_op_attr_int_or(op, "index", 0), ph = ir_op_attr_int_or(op, "phase", 0),
            n = ir_op_attr_int_or(op, "count", 0);
    return cpn_const(c, (int64_t)(((uint64_t)n << 32) | (uint64_t)(i | ph << 16)), c->i64);
  }
  case OP_CUTLASS_PIPELINE_STATE_INCREMENT: return st_increment(c, s, stages_of(op->results[0].type));
  case OP_CUTLASS_PIPELINE_STATE_BUMP:
    return cpn_bin(c, OP_ARITH_ADDI, s, cpn_const(c, (int64_t)1 << 32, c->i64));
  case OP_CUTLASS_PIPELINE_STATE_INDEX: return st_index(c, s);
  case OP_CUTLASS_PIPELINE_STATE_PHASE: return st_phase(c, s);
  default: return st_count(c, s);
  }
}

/* }====================================================================== */

/* {======================================================================
** mbarrier waits and arrivals
** ======================================================================= */

/* while (!try_wait.parity(bar, parity, hint)) {} -- `scope` cluster makes it .acquire.cluster. */
static void spin_wait(Cpn *c, IrValue *bar, IrValue *parity, bool cluster, int64_t hint) {
  IrValue *a = cpn_ptr_to_int(c, bar);
  IrOp *w = cpn_begin_spin(c);
  IrValue *opds[3] = {a, parity, cpn_const(c, hint, c->i32)};
  IrOp *tw = cpn_build(c, OP_NVVM_MBARRIER_TRY_WAIT_PARITY_SHARED, 3, opds, c->i1);
  if (cluster) ir_op_set_attr(tw, "scope", ir_attr_cstr(c->ctx, "cluster"));
  IrValue *again = cpn_bin(c, OP_ARITH_XORI, &tw->results[0], cpn_const(c, 1, c->i1));
  cpn_end_spin(c, w, again);
}

/* Only when tok (an i1 from a try op) is false. */
static void spin_wait_unless(Cpn *c, IrValue *tok, IrValue *bar, IrValue *parity, bool cluster) {
  IrOp *sif = NULL;
  if (tok) sif = cpn_begin_if(c, cpn_bin(c, OP_ARITH_XORI, tok, cpn_const(c, 1, c->i1)));
  spin_wait(c, bar, parity, cluster, CPN_WAIT_HINT);
  if (sif) cpn_end_if(c, sif);
}

/* mbarrier.arrive on bar, for `count` arrivals when count > 1. */
static void arrive_n(Cpn *c, IrValue *bar, const char *scope, int64_t count) {
  IrValue *opds[2] = {bar, count > 1 ? c32(c, count) : NULL};
  IrOp *a = cpn_build(c, OP_TILE_MBARRIER_ARRIVE, count > 1 ? 2 : 1, opds, NULL);
  if (scope) ir_op_set_attr(a, "scope", ir_attr_cstr(c->ctx, scope));
}

static void arrive(Cpn *c, IrValue *bar, const char *scope) { arrive_n(c, bar, scope, 1); }

typedef void (*ArriveFn)(Cpn *c, const void *ud);

enum { SYNC_NONE, SYNC_IF_WARP, SYNC_ALWAYS };

/* Cooperative release: every thread of the participants' warps that runs op
** arrives (the empty barrier counts their threads). Each thread's own arrive
** has release semantics for its own reads of the stage, so every read is
** ordered before the producer's acquire and its next (async-proxy) write
** into the stage; one lane arriving for its warp after bar.warp.sync would
** rely on an ordering the PTX memory model does not state (docs/testing.md).
** Under an elect the executing thread arrives for its warp (count 32). */
static bool arrive_per_thread(Cpn *c, IrOp *op, const CpnExec *x, uint64_t parts, ArriveFn fn,
                              void *ud, int64_t *count) {
  uint64_t allowed = x->mask & parts;
  if (!allowed) {
    ir_op_error(op, "runs on warps 0x%llx, none of which is a participant (0x%llx)",
                (unsigned long long)x->mask, (unsigned long long)parts);
    return false;
  }
  IrOp *guard = allowed != x->mask ? cpn_begin_if(c, cpn_in_mask(c, allowed)) : NULL;
  *count = x->subwarp ? 32 : 1;
  fn(c, ud);
  if (guard) cpn_end_if(c, guard);
  return true;
}

/* One arrival per participant: the warps of participant i that run op sync
** (sync mode), then one lane of its lowest such warp arrives. */
static bool arrive_per_group(Cpn *c, IrOp *op, const CpnExec *x, const int64_t *parts, uint32_t n,
                             int sync, ArriveFn fn, const void *ud) {
  bool any = false;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t g = x->mask & (uint64_t)parts[i];
    if (!g) continue;
    any = true;
    IrOp *guard = g != x->mask ? cpn_begin_if(c, cpn_in_mask(c, g)) : NULL;
    if (sync != SYNC_NONE && !x->subwarp && !cpn_sync_warps(c, op, g)) return false;
    IrValue *lead = NULL;
    if (cpn_popcount(g) > 1) lead = cpn_cmp(c, "eq", cpn_warp(c), c32(c, cpn_ctz(g)));
    if (!x->subwarp) {
      IrValue *e = cpn_build1(c, OP_TILE_ELECT, 0, NULL, c->i1);
      lead = lead ? cpn_bin(c, OP_ARITH_ANDI, lead, e) : e;
    }
    IrOp *one = lead ? cpn_begin_if(c, lead) : NULL;
    fn(c, ud);
    if (one) cpn_end_if(c, one);
    if (guard) cpn_end_if(c, guard);
  }
  if (!any)
    ir_op_error(op, "runs on warps 0x%llx, none of which is a participant of its side",
                (unsigned long long)x->mask);
  return any;
}

/* }====================================================================== */

/* {======================================================================
** Pipelines
** ======================================================================= */

static IrValue *stage_bar(Cpn *c, const CpnPipe *p, IrValue *index, int empty) {
  IrValue *k = cpn_bin(c, OP_ARITH_MULI, index, c32(c, 2));
  return cpn_slot(c, cpn_bin(c, OP_ARITH_ADDI, k, c32(c, p->base + empty)));
}

/* Do ops after op (creates and constants only) lead to another init? Then the
** CTA synchronizes once, after the last of the run. */
static bool init_follows(IrOp *op) {
  for (IrOp *o = op->next; o; o = o->next) {
    if (o->kind == OP_CUTLASS_PIPELINE_INIT || o->kind == OP_CUTLASS_SEQ_BAR_INIT) return true;
    if (o->kind != OP_CUTLASS_PIPELINE_CREATE && o->kind != OP_CUTLASS_SEQ_BAR_CREATE &&
        o->kind != OP_ARITH_CONSTANT)
      return false;
  }
  return false;
}

/* Thread 0 inits n slots from first with count[k % 2] (or count[0]), fences;
** then the CTA (or the cluster) synchronizes. */
static void init_slots(Cpn *c, IrOp *op, int64_t first, int64_t n, const int64_t *count, int ncount) {
  IrOp *sif = cpn_begin_if(c, cpn_cmp(c, "eq", cpn_tid(c), c32(c, 0)));
  for (int64_t k = 0; k < n; k++) {
    IrValue *opds[2] = {cpn_slot(c, c32(c, first + k)), c32(c, count[ncount > 1 ? k % 2 : 0])};
    cpn_build(c, OP_TILE_MBARRIER_INIT, 2, opds, NULL);
  }
  cpn_build(c, OP_TILE_FENCE_MBARRIER_INIT, 0, NULL, NULL);
  cpn_end_if(c, sif);
  if (init_follows(op)) return;
  if (c->cluster_pipes && c->ctas > 1) {
    cpn_build(c, OP_TILE_CLUSTER_ARRIVE, 0, NULL, NULL);
    cpn_build(c, OP_TILE_CLUSTER_WAIT, 0, NULL, NULL);
  } else {
    cpn_build(c, OP_TILE_BARRIER, 0, NULL, NULL);
  }
}

typedef struct Arrival {
  const CpnPipe *p;
  IrValue *index;
  int64_t bytes;
  int kind;      /* 0 commit, 1 expect_tx, 2 release */
  int64_t count; /* arrivals one release makes (a cooperative one under an elect: 32) */
} Arrival;

/* The arrival itself, made by the thread arrive_per_* picked. */
static void do_arrival(Cpn *c, const void *ud) {
  const Arrival *a = ud;
  if (a->kind == 2) {
    IrValue *bar = stage_bar(c, a->p, a->index, 1);
    if (a->p->mode != MODE_CLUSTER) {
      arrive_n(c, bar, NULL, a->count);
      return;
    }
    for (int64_t r = 0; r < c->ctas; r++) { /* every CTA's empty barrier (multicast producers) */
      IrValue *opds[2] = {bar, c32(c, r)};
      IrValue *remote = cpn_build1(c, OP_TILE_MAPA, 2, opds, ir_type_ptr(c->ctx, c->i64, IR_MS_CLUSTER));
      arrive(c, remote, "cluster");
    }
    return;
  }
  IrValue *opds[2] = {stage_bar(c, a->p, a->index, 0), c32(c, a->bytes)};
  if (a->kind == 1)
    cpn_build(c, OP_TILE_MBARRIER_EXPECT_TX, 2, opds, NULL);
  else if (a->bytes > 0)
    cpn_build(c, OP_TILE_MBARRIER_ARRIVE_EXPECT_TX, 2, opds, NULL);
  else
    arrive(c, opds[0], NULL);
}

/* producer_tail: a bulk wait_group 0 is enough when no other CTA arrives on
** this CTA's barriers (every mode but cluster): the consumers are in the CTA,
** which outlives them, so the producer only has to drain its own bulk groups.
** In cluster mode the producer also waits until every stage was released
** (CUTLASS's producer_tail), so that no remote arrival reaches a CTA that left. */
static void lower_tail(Cpn *c, const CpnPipe *p, IrValue *s) {
  if (p->mode == MODE_CLUSTER) {
    IrValue *b[4] = {c32(c, 0), c32(c, p->stages), c32(c, 1), s};
    IrOp *loop = ir_build(&c->b, OP_SCF_FOR, 4, b, 1, &c->i64, 1);
    IrBlock *body = ir_region_ensure_block(c->ctx, &loop->regions[0]);
    ir_block_add_arg(c->ctx, body, c->i32);
    IrValue *st = ir_block_add_arg(c->ctx, body, c->i64);
    ir_builder_at_end(&c->b, body);
    IrValue *parity = cpn_bin(c, OP_ARITH_XORI, st_phase(c, st), c32(c, 1));
    spin_wait(c, stage_bar(c, p, st_index(c, st), 1), parity, true, CPN_WAIT_HINT);
    IrValue *next = st_increment(c, st, p->stages);
    cpn_build(c, OP_SCF_YIELD, 1, &next, NULL);
    ir_builder_after(&c->b, loop);
  }
  IrOp *w = cpn_build(c, OP_TILE_BULK_WAIT, 0, NULL, NULL);
  ir_op_set_attr(w, "pending", ir_attr_i64(c->ctx, 0));
}

/* A producer or consumer op; returns its result (or NULL). */
static bool lower_role_op(Cpn *c, IrOp *op, IrValue **res) {
  const CpnPipe *p = handle_of(c, op);
  if (!p) return false;
  const CpnExec *x = cpn_exec(c, op);
  IrValue *s = op->operands[1].value, *tok = op->noperands > 2 ? op->operands[2].value : NULL;
  IrValue *index = st_index(c, s);
  bool cl = p->mode == MODE_CLUSTER;
  Arrival a = {p, index, ir_op_attr_int_or(op, "transaction_bytes", p->tx), 0, 1};
  IrValue *parity;
  switch (op->kind) {
  case OP_CUTLASS_PIPELINE_PRODUCER_ACQUIRE:
    parity = cpn_bin(c, OP_ARITH_XORI, st_phase(c, s), c32(c, 1));
    spin_wait_unless(c, tok, stage_bar(c, p, index, 1), parity, cl);
    return true;
  case OP_CUTLASS_PIPELINE_CONSUMER_WAIT:
    spin_wait_unless(c, tok, stage_bar(c, p, index, 0), st_phase(c, s), false);
    return true;
  case OP_CUTLASS_PIPELINE_PRODUCER_TRY_ACQUIRE:
  case OP_CUTLASS_PIPELINE_CONSUMER_TRY_WAIT: {
    bool prod = op->kind == OP_CUTLASS_PIPELINE_PRODUCER_TRY_ACQUIRE;
    parity = st_phase(c, s);
    if (prod) parity = cpn_bin(c, OP_ARITH_XORI, parity, c32(c, 1));
    IrValue *opds[2] = {stage_bar(c, p, index, prod), parity};
    IrOp *t = cpn_build(c, OP_TILE_MBARRIER_TEST_WAIT, 2, opds, c->i1);
    if (prod && cl) ir_op_set_attr(t, "scope", ir_attr_cstr(c->ctx, "cluster"));
    *res = &t->results[0];
    return true;
  }
  case OP_CUTLASS_PIPELINE_PRODUCER_GET_BARRIER: *res = stage_bar(c, p, index, 0); return true;
  case OP_CUTLASS_PIPELINE_PRODUCER_TAIL: lower_tail(c, p, s); return true;
  case OP_CUTLASS_PIPELINE_PRODUCER_EXPECT_TX:
    a.kind = 1;
    return arrive_per_group(c, op, x, p->prod, p->np, SYNC_NONE, do_arrival, &a);
  case OP_CUTLASS_PIPELINE_PRODUCER_COMMIT:
    return arrive_per_group(c, op, x, p->prod, p->np, SYNC_IF_WARP, do_arrival, &a);
  default: /* consumer_release */
    a.kind = 2;
    if (p->mode == MODE_COOPERATIVE) {
      uint64_t all = 0;
      for (uint32_t i = 0; i < p->nc; i++)
        all |= (uint64_t)p->cons[i];
      return arrive_per_thread(c, op, x, all, do_arrival, &a, &a.count);
    }
    return arrive_per_group(c, op, x, p->cons, p->nc, SYNC_ALWAYS, do_arrival, &a);
  }
}

/* }====================================================================== */

/* {======================================================================
** seq_bar: slots [base, base + depth) of the pool; a cursor is an i32
** index | phase << 16 with index already reduced modulo the depth
** ======================================================================= */

static IrValue *seq_slot(Cpn *c, const CpnSeq *q, IrValue *s) {
  IrValue *index = cpn_bin(c, OP_ARITH_ANDI, s, c32(c, 0xffff));
  return cpn_slot(c, cpn_bin(c, OP_ARITH_ADDI, index, c32(c, q->base)));
}

static IrValue *seq_phase(Cpn *c, IrValue *s) {
  return cpn_bin(c, OP_ARITH_ANDI, cpn_bin(c, OP_ARITH_SHRUI, s, c32(c, 16)), c32(c, 1));
}

/* index + 1; when it wraps to 0 (index % depth == 0) the phase flips. */
static IrValue *seq_advance(Cpn *c, const CpnSeq *q, IrValue *s) {
  IrValue *next = cpn_bin(c, OP_ARITH_ADDI, cpn_bin(c, OP_ARITH_ANDI, s, c32(c, 0xffff)), c32(c, 1));
  IrValue *wrap = cpn_cmp(c, "eq", next, c32(c, q->depth));
  IrValue *index = ir_build_select(&c->b, wrap, c32(c, 0), next);
  IrValue *phase = cpn_bin(c, OP_ARITH_XORI, seq_phase(c, s), ir_build_unary(&c->b, OP_ARITH_EXTUI, wrap, c->i32));
  return cpn_bin(c, OP_ARITH_ORI, index, cpn_bin(c, OP_ARITH_SHLI, phase, c32(c, 16)));
}

static bool lower_seq_op(Cpn *c, IrOp *op, IrValue **res) {
  if (op->kind == OP_CUTLASS_SEQ_BAR_STATE_CREATE) {
    int64_t d = ir_type_param_int(op->results[0].type, 0, 1);
    int64_t i = ir_op_attr_int_or(op, "index", 0) % (d > 0 ? d : 1);
    *res = c32(c, i | ir_op_attr_int_or(op, "phase", 0) << 16);
    return true;
  }
  const CpnSeq *q = handle_of(c, op);
  if (!q) return false;
  IrValue *s = op->operands[1].value;
  if (op->kind == OP_CUTLASS_SEQ_BAR_WAIT) {
    spin_wait(c, seq_slot(c, q, s), seq_phase(c, s), false, CPN_WAIT_HINT);
    return true;
  }
  arrive(c, seq_slot(c, q, s), NULL); /* every thread that runs it arrives (arrive_count of them) */
  *res = seq_advance(c, q, s);
  return true;
}

/* }====================================================================== */

/* {======================================================================
** Async tokens and futures
** ======================================================================= */

static const char *flavor_of(const IrValue *v) { return ir_type_param_str(v->type, 0); }

static bool is_none(const IrValue *tok) {
  return tok->def && tok->def->kind == OP_CUTLASS_ASYNC_CREATE_NONE;
}

/* Drain the groups of a flavour down to `pending`: bulk or wgmma commit + wait. */
static void group_wait(Cpn *c, bool gmma, bool commit, int64_t pending) {
  if (gmma) {
    cpn_build(c, OP_NVVM_WGMMA_COMMIT_GROUP_SYNC_ALIGNED, 0, NULL, NULL);
    IrOp *w = cpn_build(c, OP_NVVM_WGMMA_WAIT_GROUP_SYNC_ALIGNED, 0, NULL, NULL);
    ir_op_set_attr(w, "group", ir_attr_i64(c->ctx, pending));
    return;
  }
  if (commit) cpn_build(c, OP_TILE_BULK_COMMIT, 0, NULL, NULL);
  IrOp *w = cpn_build(c, OP_TILE_BULK_WAIT, 0, NULL, NULL);
  ir_op_set_attr(w, "pending", ir_attr_i64(c->ctx, pending));
}

static bool lower_async_wait(Cpn *c, IrOp *op) {
  IrValue *tok = op->operands[0].value;
  const char *fl = flavor_of(tok);
  if (is_none(tok) || !fl) return true; /* nothing outstanding */
  if (strcmp(fl, "mbarrier") == 0) {
    spin_wait(c, op->operands[1].value, op->operands[2].value, false, CPN_WAIT_HINT);
    return true;
  }
  group_wait(c, strcmp(fl, "gmma") == 0, true, ir_op_attr_int_or(op, "pending", 0));
  return true;
}

/* future_wait: the future back to its token_to_async through to_async bridges. */
static bool lower_future_wait(Cpn *c, IrOp *op) {
  IrValue *f = cpn_source(op->operands[0].value);
  while (f->def && f->def->kind == OP_CUTLASS_ASYNC_TO_ASYNC)
    f = f->def->operands[0].value;
  IrOp *src = f->def;
  if (!src || src->kind != OP_CUTLASS_ASYNC_TOKEN_TO_ASYNC) {
    ir_op_error(op, "cannot trace its future to a cutlass.async.token_to_async (futures cannot be "
                    "carried through loops or branches)");
    return false;
  }
  if (is_none(src->operands[0].value)) return true;
  const char *fl = flavor_of(&src->results[0]);
  if (fl && strcmp(fl, "mbarrier") == 0)
    spin_wait(c, src->operands[1].value, src->operands[2].value, false, CPN_FUTURE_HINT);
  else
    group_wait(c, false, false, 0);
  return true;
}

/* }====================================================================== */

/* {======================================================================
** Executor regions: switch_by_executor cases and async.exec bodies
** ======================================================================= */

/* Move the ops of block b in front of pos, or into an scf.if on cond there. */
static void unwrap_block(Cpn *c, IrOp *pos, IrBlock *b, IrValue *cond) {
  IrOp *at = pos;
  IrOp *sif = NULL;
  if (cond) {
    sif = cpn_begin_if(c, cond);
    at = sif->regions[0].first->last; /* its yield */
  }
  while (b->first) {
    IrOp *o = b->first;
    ir_op_unlink(o);
    ir_op_insert_before(at, o);
  }
}

/* The case blocks' arguments are their operand groups: use those directly. */
static void forward_case_args(IrOp *sw) {
  uint32_t first = 0, i = 0;
  for (IrBlock *b = sw->regions[0].first; b; b = b->next, i++) {
    for (uint32_t k = 0; k < b->nargs && first + k < sw->noperands; k++)
      ir_value_replace_all_uses(b->args[k], sw->operands[first + k].value);
    first += (uint32_t)cpn_list_at(sw, "operand_segments", i);
  }
}

static void lower_region_op(Cpn *c, IrOp *op) {
  ir_builder_before(&c->b, op);
  c->b.loc = op->loc;
  if (op->kind == OP_CUTLASS_ASYNC_EXEC) {
    uint64_t m = (uint64_t)ir_op_attr_int_or(op, "executors", 0);
    const CpnExec *outer = cpn_exec(c, op);
    IrBlock *body = op->regions[0].first;
    if (body) unwrap_block(c, op, body, m == outer->mask ? NULL : cpn_in_mask(c, m));
  } else {
    uint32_t i = 0;
    for (IrBlock *b = op->regions[0].first; b; b = b->next, i++) {
      ir_builder_before(&c->b, op);
      unwrap_block(c, op, b, cpn_in_mask(c, (uint64_t)cpn_list_at(op, "masks", i)));
    }
  }
  ir_op_erase(op);
}

/* }====================================================================== */

/* {======================================================================
** Driver
** ======================================================================= */

typedef struct OpList {
  IrOp **ops;
  size_t n, cap;
} OpList;

static bool collect(IrOp *op, void *ud) {
  OpList *l = ud;
  if (!name_has_prefix(op, "cutlass.")) return true;
  if (l->n == l->cap) {
    l->cap = l->cap ? l->cap * 2 : 64;
    IrOp **nl = realloc(l->ops, l->cap * sizeof *nl);
    if (!nl) abort();
    l->ops = nl;
  }
  l->ops[l->n++] = op;
  return true;
}

static bool is_region_op(IrOpKind k) {
  return k == OP_CUTLASS_ASYNC_EXEC || k == OP_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR;
}

/* Ops that other lowerings read (tracing) and that go at the end. */
static bool is_kept(IrOpKind k) {
  return k == OP_CUTLASS_PIPELINE_CREATE || k == OP_CUTLASS_SEQ_BAR_CREATE ||
         k == OP_CUTLASS_ASYNC_CREATE_NONE || k == OP_CUTLASS_ASYNC_TOKEN_TO_ASYNC ||
         k == OP_CUTLASS_ASYNC_TO_ASYNC;
}

/* Cursor values (block arguments, scf results) take their lowered types. */
static void retype_value(Cpn *c, IrValue *v) {
  if (ir_type_is_dialect(v->type, IR_DTY_CUTLASS_PIPELINE_STATE)) v->type = c->i64;
  else if (ir_type_is_dialect(v->type, IR_DTY_CUTLASS_SEQ_BAR_STATE)) v->type = c->i32;
}

static bool retype_op(IrOp *op, void *ud) {
  Cpn *c = ud;
  if (!name_has_prefix(op, "cutlass."))
    for (uint32_t i = 0; i < op->nresults; i++)
      retype_value(c, &op->results[i]);
  for (uint32_t r = 0; r < op->nregions; r++)
    for (IrBlock *b = op->regions[r].first; b; b = b->next)
      for (uint32_t i = 0; i < b->nargs; i++)
        retype_value(c, b->args[i]);
  return true;
}

/* Lower one leaf op in front of itself; its result takes the new value. */
static bool lower_leaf(Cpn *c, IrOp *op) {
  ir_builder_before(&c->b, op);
  c->b.loc = op->loc;
  IrValue *res = NULL;
  bool ok = true;
  switch (op->kind) {
  case OP_CUTLASS_PIPELINE_INIT: {
    const CpnPipe *p = handle_of(c, op);
    init_slots(c, op, p->base, 2 * p->stages, p->count, 2);
    break;
  }
  case OP_CUTLASS_SEQ_BAR_INIT: {
    const CpnSeq *q = handle_of(c, op);
    init_slots(c, op, q->base, q->depth, &q->count, 1);
    break;
  }
  case OP_CUTLASS_PIPELINE_STATE_CREATE:
  case OP_CUTLASS_PIPELINE_STATE_INCREMENT:
  case OP_CUTLASS_PIPELINE_STATE_BUMP:
  case OP_CUTLASS_PIPELINE_STATE_INDEX:
  case OP_CUTLASS_PIPELINE_STATE_PHASE:
  case OP_CUTLASS_PIPELINE_STATE_COUNT: res = lower_state_op(c, op); break;
  case OP_CUTLASS_SEQ_BAR_STATE_CREATE:
  case OP_CUTLASS_SEQ_BAR_ARRIVE:
  case OP_CUTLASS_SEQ_BAR_WAIT: ok = lower_seq_op(c, op, &res); break;
  case OP_CUTLASS_ASYNC_WAIT: ok = lower_async_wait(c, op); break;
  case OP_CUTLASS_ASYNC_FUTURE_WAIT: ok = lower_future_wait(c, op); break;
  default:
    if (is_pipeline_op(op->kind)) ok = lower_role_op(c, op, &res);
    else ok = cpn_lower_mem_op(c, op);
    if (cpn_is_mem_op(op->kind)) return ok; /* it erased (or replaced) the op itself */
  }
  if (!ok) return false;
  if (op->nresults && res) ir_value_replace_all_uses(&op->results[0], res);
  if (op->nresults && ir_value_has_uses(&op->results[0])) {
    ir_op_error(op, "has a result that was not lowered");
    return false;
  }
  ir_op_erase(op);
  return true;
}

/* Handles, none-tokens and bridges go once unused; a still-used bridge or none
** becomes builtin.unrealized_conversion_cast (seed 000's cast bridge). */
static bool finish_kept(Cpn *c, IrOp *op) {
  if (!ir_op_results_unused(op)) {
    if (op->kind == OP_CUTLASS_PIPELINE_CREATE || op->kind == OP_CUTLASS_SEQ_BAR_CREATE) {
      IrUse *u = op->results[0].uses;
      ir_op_error(u->owner, "uses a handle that convert-pipeline-to-nvvm cannot follow");
      return false;
    }
    ir_builder_before(&c->b, op);
    c->b.loc = op->loc;
    uint32_t n = op->kind == OP_CUTLASS_ASYNC_CREATE_NONE ? 0 : 1;
    IrValue *src = n ? op->operands[0].value : NULL;
    IrValue *v = cpn_build1(c, OP_UNREALIZED_CAST, n, &src, op->results[0].type);
    ir_value_replace_all_uses(&op->results[0], v);
  }
  ir_op_erase(op);
  return true;
}

static void kernel_setup(Cpn *c, IrOp *k) {
  c->kernel = k;
  c->entry = ir_region_ensure_block(c->ctx, &k->regions[0]);
  c->entry_last = NULL;
  c->pool = c->tid = c->warp = NULL;
  dia_kernel_dims(k, "block", c->block, 1);
  c->threads = c->block[0] * c->block[1] * c->block[2];
  int64_t w = (c->threads + 31) / 32, cl[3];
  c->all_warps = w >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << w) - 1);
  dia_kernel_dims(k, "cluster", cl, 1);
  c->ctas = cl[0] * cl[1] * cl[2];
  c->nb_used = 1; /* id 0 is the CTA barrier */
  c->nnb = 0;
  c->cluster_pipes = false;
  c->failed = false;
  memset(&c->agents, 0, sizeof c->agents);
  memset(&c->handles, 0, sizeof c->handles);
  memset(&c->frags, 0, sizeof c->frags);
}

/* Phase A over the collected ops: contexts, handles, checks. */
static bool analyze(Cpn *c) {
  CpnAgentScan as = {c, 0};
  ir_walk_pre(c->kernel, cpn_agent_visit, &as);
  ir_walk_pre(c->kernel, cpn_reserve_visit, c);
  for (size_t i = 0; i < c->nops; i++) {
    c->ops[i]->mark = i + 1;
    c->execs[i] = cpn_compute_exec(c, c->ops[i]);
  }
  bool ok = true;
  for (size_t i = 0; i < c->nops; i++) /* inits first: handles are looked up by their users */
    if (c->ops[i]->kind == OP_CUTLASS_PIPELINE_INIT || c->ops[i]->kind == OP_CUTLASS_SEQ_BAR_INIT)
      ok &= check_op(c, c->ops[i]);
  for (size_t i = 0; i < c->nops; i++)
    if (c->ops[i]->kind != OP_CUTLASS_PIPELINE_INIT && c->ops[i]->kind != OP_CUTLASS_SEQ_BAR_INIT)
      ok &= check_op(c, c->ops[i]);
  return ok;
}

/* Phase B: leaves in pre-order, then regions innermost first, then the rest. */
static bool rewrite(Cpn *c) {
  for (size_t i = 0; i < c->nops; i++)
    if (c->ops[i]->kind == OP_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR) forward_case_args(c->ops[i]);
  ir_walk_pre(c->kernel, retype_op, c);
  for (size_t i = 0; i < c->nops; i++) {
    IrOp *op = c->ops[i];
    if (is_region_op(op->kind) || is_kept(op->kind)) continue;
    if (!lower_leaf(c, op)) return false;
  }
  for (size_t i = c->nops; i-- > 0;)
    if (is_region_op(c->ops[i]->kind)) lower_region_op(c, c->ops[i]);
  for (size_t i = c->nops; i-- > 0;)
    if (is_kept(c->ops[i]->kind) && !finish_kept(c, c->ops[i])) return false;
  cpn_erase_fragments(c);
  return true;
}

static IrResult convert_kernel(Cpn *c, IrOp *k) {
  kernel_setup(c, k);
  OpList l = {NULL, 0, 0};
  ir_walk_pre(k, collect, &l);
  if (l.n == 0) return IR_OK;
  c->ops = l.ops;
  c->nops = l.n;
  c->execs = calloc(l.n, sizeof *c->execs);
  if (!c->execs) abort();
  bool ok = analyze(c) && rewrite(c);
  free(c->execs);
  free(l.ops);
  ptrmap_free(&c->agents);
  ptrmap_free(&c->handles);
  ptrmap_free(&c->frags);
  c->ops = NULL;
  c->nops = 0;
  return ok ? IR_OK : IR_FAIL;
}

IrResult pass_convert_pipeline_to_nvvm(IrOp *module, IrPassCtx *pc) {
  Cpn c;
  memset(&c, 0, sizeof c);
  c.ctx = pc->ctx;
  ir_builder_init(&c.b, pc->ctx);
  c.i1 = ir_type_int(pc->ctx, 1);
  c.i16 = ir_type_int(pc->ctx, 16);
  c.i32 = ir_type_int(pc->ctx, 32);
  c.i64 = ir_type_int(pc->ctx, 64);
  IrBlock *body = module->nregions ? module->regions[0].first : NULL;
  bool ok = true;
  for (IrOp *op = body ? body->first : NULL; op; op = op->next) {
    if (op->kind != OP_TILE_KERNEL) continue;
    if (convert_kernel(&c, op) != IR_OK) ok = false;
    else pc->changed = true;
  }
  return ok ? IR_OK : IR_FAIL;
}

/* }====================================================================== */
