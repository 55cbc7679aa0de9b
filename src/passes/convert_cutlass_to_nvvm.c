/*
** convert_cutlass_to_nvvm.c -- the `convert-cutlass-to-nvvm` pass: every
** cutlass op but the tile scheduler's becomes tile, nvvm, arith and scf ops
** that convert-tile-to-nvvm (which runs next) and the PTX emitter accept. docs/lowering.md has the full table; in short:
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
**                          (cooperative), once per warp on every CTA of the
**                          cluster at .cta scope (cluster: lane r on CTA r), or
**                          once per participant after its warps sync (the others)
**   try_acquire / try_wait test_wait.parity
**   producer_tail          bulk wait_group 0, or (cluster) a wait on every stage
**   switch_by_executor     scf.if on the warp index per case
**   async.exec             its body under scf.if on the warp index
**   seq_bar.*              slots of the same pool; an i32 cursor (index, phase)
**   async.*                spins, bulk / wgmma commit + wait; bridges folded away
**   the rest               convert_cutlass_to_nvvm_mem.c
**
** Everything that can be checked is checked before the IR changes (phase A);
** the rewrite (phase B) then runs op by op in pre-order, so that every operand
** is already lowered when its user is. Leaf ops build their replacement in front
** of themselves and are erased; region ops are unwrapped last, innermost first.
*/
#include <stdlib.h>
#include <string.h>

#include "convert_cutlass_to_nvvm.h"

/* {======================================================================
** Phase A: what the kernel holds, checked before anything changes
** ======================================================================= */


static bool name_has_prefix(const IrOp *op, const char *p) {
  return strncmp(ir_op_name(op), p, strlen(p)) == 0;
}

static bool is_pipeline_op(IrOpKind k) {
  return k >= OP_CUTLASS_PIPELINE_CREATE && k <= OP_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR;
}

/* Inits claim barriers for the whole CTA: they must run on every warp. */
static bool check_init_scope(Cpn *c, IrOp *op) {
  const KernelExec *x = cpn_exec(c, op);
  if (x->mask == c->all_warps && !x->narrow) return true;
  ir_op_error(op, "must run on every warp of the block (it initializes the barriers with one "
                  "thread, then synchronizes the CTA), not on warps 0x%llx%s",
              (unsigned long long)x->mask, x->narrow ? " under an elect" : "");
  return false;
}

/* A zeroed record of size bytes, a CpnHandle first, for the handle init
** initializes, whose create op must be of kind k; NULL after an error. */
static void *new_handle(Cpn *c, IrOp *init, IrOpKind k, const char *what, size_t size) {
  IrOp *cr = init->operands[0].value->def;
  if (!cr || cr->kind != k) {
    ir_op_error(init, "initializes a %s handle that does not come from %s", what, ir_op_info(k)->name);
    return NULL;
  }
  CpnHandle *h = arena_alloc(ir_arena(c->rw.ctx), size);
  h->create = cr;
  h->init = init;
  return h;
}

/* A handle read whole: its users find it by its create op; then where its init runs. */
static bool keep_handle(Cpn *c, CpnHandle *h) {
  ptrmap_set(&c->handles, h->create, h);
  return check_init_scope(c, h->init);
}

static bool read_pipe(Cpn *c, IrOp *init) {
  CpnPipe *p = new_handle(c, init, OP_CUTLASS_PIPELINE_CREATE, "pipeline", sizeof *p);
  if (!p) return false;
  IrAttrs_CUTLASS_PIPELINE_INIT a = ir_attrs_CUTLASS_PIPELINE_INIT(init);
  p->stages = cut_pipe_shape(init->operands[0].value->type).stages;
  p->base = a.barrier_id_base;
  p->tx = a.transaction_bytes;
  cut_pipeline_arrive_counts(init, p->count);
  p->mode = a.mode;
  p->np = a.participants.n;
  p->nc = a.consumers.n;
  for (uint32_t i = 0; i < p->np && i < CUT_MAX_PARTICIPANTS; i++)
    p->prod[i] = ir_attr_list_int(a.participants, i);
  for (uint32_t i = 0; i < p->nc && i < CUT_MAX_PARTICIPANTS; i++)
    p->cons[i] = ir_attr_list_int(a.consumers, i);
  if (!a.ok || p->count[0] <= 0 || p->count[1] <= 0 || p->stages <= 0) {
    ir_op_error(init, "has no verified mode, numStages and arrive_count (run the verifier first)");
    return false;
  }
  if (p->mode == MODE_CLUSTER || p->mode == MODE_PINGPONG_CLUSTER) c->cluster_pipes = true;
  return keep_handle(c, &p->h);
}

static bool read_seq(Cpn *c, IrOp *init) {
  CpnSeq *s = new_handle(c, init, OP_CUTLASS_SEQ_BAR_CREATE, "seq_bar", sizeof *s);
  if (!s) return false;
  IrAttrs_CUTLASS_SEQ_BAR_INIT a = ir_attrs_CUTLASS_SEQ_BAR_INIT(init);
  s->depth = cut_seq_depth(init->operands[0].value->type);
  s->base = a.barrier_id_base;
  s->count = a.arrive_count;
  return keep_handle(c, &s->h);
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
    IrDiag *d = ir_op_error(op, "is not lowered by convert-cutlass-to-nvvm: tile scheduler ops "
                                "are lowered by lower-tile-scheduler, which must run first");
    if (strstr(ir_op_name(op), "sm100") && ir_context_target_sm(c->rw.ctx) < 100)
      ir_note(d, op->loc, "the SM100 StreamK scheduler does not exist on sm_%d",
              ir_context_target_sm(c->rw.ctx));
    return false;
  }
  ir_op_error(op, "is not lowered by convert-cutlass-to-nvvm");
  return false;
}

/* Consumer releases under an elect cannot make a multi-warp participant's
** reads precede a single arrival. */
static bool check_release_scope(Cpn *c, IrOp *op, const CpnPipe *p) {
  const KernelExec *x = cpn_exec(c, op);
  if (!x->narrow || p->mode == MODE_COOPERATIVE || p->mode == MODE_CLUSTER || p->mode == MODE_PINGPONG ||
      p->mode == MODE_PINGPONG_CLUSTER)
    return true;
  for (uint32_t i = 0; i < p->nc; i++)
    if (kernel_popcount(x->mask & (uint64_t)p->cons[i]) > 1) {
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
  case OP_CUTLASS_PIPELINE_STATE_ADVANCE:
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

static IrValue *trunc32(Cpn *c, IrValue *v) { return rw_cast(&c->rw, OP_ARITH_TRUNCI, v, c->rw.i32); }
static IrValue *zext64(Cpn *c, IrValue *v) { return rw_cast(&c->rw, OP_ARITH_EXTUI, v, c->rw.i64); }
static IrValue *st_index(Cpn *c, IrValue *s) {
  return rw_bin(&c->rw, OP_ARITH_ANDI, trunc32(c, s), rw_i32(&c->rw, 0xffff));
}

static IrValue *st_phase(Cpn *c, IrValue *s) {
  IrValue *hi = rw_bin(&c->rw, OP_ARITH_SHRUI, trunc32(c, s), rw_i32(&c->rw, 16));
  return rw_bin(&c->rw, OP_ARITH_ANDI, hi, rw_i32(&c->rw, 1));
}

static IrValue *st_count(Cpn *c, IrValue *s) {
  return trunc32(c, rw_bin(&c->rw, OP_ARITH_SHRUI, s, rw_const(&c->rw, 32, c->rw.i64)));
}

static IrValue *st_pack(Cpn *c, IrValue *index, IrValue *phase, IrValue *count) {
  IrValue *lo = rw_bin(&c->rw, OP_ARITH_ORI, index, rw_bin(&c->rw, OP_ARITH_SHLI, phase, rw_i32(&c->rw, 16)));
  IrValue *hi = rw_bin(&c->rw, OP_ARITH_SHLI, zext64(c, count), rw_const(&c->rw, 32, c->rw.i64));
  return rw_bin(&c->rw, OP_ARITH_ORI, hi, zext64(c, lo));
}

/* index + 1, wrapping to 0 at `stages` and then flipping the phase; count + 1. */
static IrValue *st_increment(Cpn *c, IrValue *s, int64_t stages) {
  IrValue *next = rw_bin(&c->rw, OP_ARITH_ADDI, st_index(c, s), rw_i32(&c->rw, 1));
  IrValue *wrap = rw_cmp(&c->rw, "eq", next, rw_i32(&c->rw, stages));
  IrValue *index = rw_select(&c->rw, wrap, rw_i32(&c->rw, 0), next);
  IrValue *flip = rw_cast(&c->rw, OP_ARITH_EXTUI, wrap, c->rw.i32);
  IrValue *phase = rw_bin(&c->rw, OP_ARITH_XORI, st_phase(c, s), flip);
  IrValue *count = rw_bin(&c->rw, OP_ARITH_ADDI, st_count(c, s), rw_i32(&c->rw, 1));
  return st_pack(c, index, phase, count);
}


/* index + n modulo `stages`, the phase flipped once per wrap; count + n (n unsigned). */
static IrValue *st_advance(Cpn *c, IrValue *s, IrValue *n, int64_t stages) {
  IrValue *at = rw_bin(&c->rw, OP_ARITH_ADDI, st_index(c, s), n);
  IrValue *S = rw_i32(&c->rw, stages);
  IrValue *index = rw_bin(&c->rw, OP_ARITH_REMUI, at, S);
  IrValue *wraps = rw_bin(&c->rw, OP_ARITH_DIVUI, at, S);
  IrValue *phase = rw_bin(&c->rw, OP_ARITH_XORI, st_phase(c, s), rw_bin(&c->rw, OP_ARITH_ANDI, wraps, rw_i32(&c->rw, 1)));
  IrValue *count = rw_bin(&c->rw, OP_ARITH_ADDI, st_count(c, s), n);
  return st_pack(c, index, phase, count);
}

static IrValue *lower_state_op(Cpn *c, IrOp *op) {
  if (op->kind == OP_CUTLASS_PIPELINE_STATE_ADVANCE)
    return st_advance(c, op->operands[0].value, op->operands[1].value, cut_pipe_shape(op->results[0].type).stages);
  IrValue *s = op->noperands ? op->operands[op->noperands - 1].value : NULL;
  switch (op->kind) {
  case OP_CUTLASS_PIPELINE_STATE_CREATE: {
    IrAttrs_CUTLASS_PIPELINE_STATE_CREATE a = ir_attrs_CUTLASS_PIPELINE_STATE_CREATE(op);
    int64_t i = a.index, ph = a.phase, n = a.count;
    return rw_const(&c->rw, (int64_t)(((uint64_t)n << 32) | (uint64_t)(i | ph << 16)), c->rw.i64);
  }
  case OP_CUTLASS_PIPELINE_STATE_INCREMENT: return st_increment(c, s, cut_pipe_shape(op->results[0].type).stages);
  case OP_CUTLASS_PIPELINE_STATE_BUMP:
    return rw_bin(&c->rw, OP_ARITH_ADDI, s, rw_const(&c->rw, (int64_t)1 << 32, c->rw.i64));
  case OP_CUTLASS_PIPELINE_STATE_INDEX: return st_index(c, s);
  case OP_CUTLASS_PIPELINE_STATE_PHASE: return st_phase(c, s);
  default: return st_count(c, s);
  }
}

/* }====================================================================== */

/* {======================================================================
** mbarrier waits and arrivals
** ======================================================================= */

/* while (!try_wait.parity(bar, parity, hint)) {} at the default .acquire.cta
** scope (every wait of the pass: see release_cluster for the cluster's). */
static void spin_wait(Cpn *c, IrValue *bar, IrValue *parity, int64_t hint) {
  IrValue *a = cpn_ptr_to_int(c, bar);
  IrOp *w = rw_begin_spin(&c->rw);
  IrValue *opds[3] = {a, parity, rw_const(&c->rw, hint, c->rw.i32)};
  IrOp *tw = rw_op(&c->rw, OP_NVVM_MBARRIER_TRY_WAIT_PARITY_SHARED, 3, opds, c->rw.i1);
  IrValue *again = rw_bin(&c->rw, OP_ARITH_XORI, &tw->results[0], rw_const(&c->rw, 1, c->rw.i1));
  rw_end_spin(&c->rw, w, again);
}

/* Only when tok (an i1 from a try op) is false. */
static void spin_wait_unless(Cpn *c, IrValue *tok, IrValue *bar, IrValue *parity) {
  IrOp *sif = NULL;
  if (tok) sif = rw_begin_if(&c->rw, rw_bin(&c->rw, OP_ARITH_XORI, tok, rw_const(&c->rw, 1, c->rw.i1)));
  spin_wait(c, bar, parity, CPN_WAIT_HINT);
  if (sif) rw_end_if(&c->rw, sif);
}

/* mbarrier.arrive on bar, for `count` arrivals when count > 1. */
static void arrive_n(Cpn *c, IrValue *bar, const char *scope, int64_t count) {
  IrValue *opds[2] = {bar, count > 1 ? rw_i32(&c->rw, count) : NULL};
  IrOp *a = rw_op(&c->rw, OP_TILE_MBARRIER_ARRIVE, count > 1 ? 2 : 1, opds, NULL);
  if (scope) rw_set_str(&c->rw, a, "scope", scope);
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
static bool arrive_per_thread(Cpn *c, IrOp *op, const KernelExec *x, uint64_t parts, ArriveFn fn,
                              void *ud, int64_t *count) {
  uint64_t allowed = x->mask & parts;
  if (!allowed) {
    ir_op_error(op, "runs on warps 0x%llx, none of which is a participant (0x%llx)",
                (unsigned long long)x->mask, (unsigned long long)parts);
    return false;
  }
  IrOp *guard = allowed != x->mask ? rw_begin_if(&c->rw, cpn_in_mask(c, allowed)) : NULL;
  *count = x->narrow ? 32 : 1;
  fn(c, ud);
  if (guard) rw_end_if(&c->rw, guard);
  return true;
}

/* One arrival per participant: the warps of participant i that run op sync
** (sync mode), then one lane of its lowest such warp arrives. */
static bool arrive_per_group(Cpn *c, IrOp *op, const KernelExec *x, const int64_t *parts, uint32_t n,
                             int sync, ArriveFn fn, const void *ud) {
  bool any = false;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t g = x->mask & (uint64_t)parts[i];
    if (!g) continue;
    any = true;
    IrOp *guard = g != x->mask ? rw_begin_if(&c->rw, cpn_in_mask(c, g)) : NULL;
    if (sync != SYNC_NONE && !x->narrow && !cpn_sync_warps(c, op, g)) return false;
    IrValue *lead = NULL;
    if (kernel_popcount(g) > 1) lead = rw_cmp(&c->rw, "eq", cpn_warp(c), rw_i32(&c->rw, kernel_ctz(g)));
    if (!x->narrow) {
      IrValue *e = rw_op1(&c->rw, OP_TILE_ELECT, 0, NULL, c->rw.i1);
      lead = lead ? rw_bin(&c->rw, OP_ARITH_ANDI, lead, e) : e;
    }
    IrOp *one = lead ? rw_begin_if(&c->rw, lead) : NULL;
    fn(c, ud);
    if (one) rw_end_if(&c->rw, one);
    if (guard) rw_end_if(&c->rw, guard);
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
  IrValue *k = rw_bin(&c->rw, OP_ARITH_MULI, index, rw_i32(&c->rw, 2));
  return cpn_slot(c, rw_bin(&c->rw, OP_ARITH_ADDI, k, rw_i32(&c->rw, p->base + empty)));
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
** then the CTA (or the cluster) synchronizes. The cluster's is the DSMEM
** handshake of a cluster of several CTAs: the release fence is already
** there (fence.mbarrier_init.release.cluster, the only writes the peers need
** are the inits), so the arrive is relaxed, then the wait; the peers' barrier
** addresses are mapped (mapa) where they arrive on them. One CTA takes the
** bypass: no cluster barrier, a CTA barrier (the other warps must see
** the inits). */
static void init_slots(Cpn *c, IrOp *op, int64_t first, int64_t n, const int64_t *count, int ncount) {
  IrOp *sif = rw_begin_if(&c->rw, rw_cmp(&c->rw, "eq", cpn_tid(c), rw_i32(&c->rw, 0)));
  for (int64_t k = 0; k < n; k++) {
    IrValue *opds[2] = {cpn_slot(c, rw_i32(&c->rw, first + k)), rw_i32(&c->rw, count[ncount > 1 ? k % 2 : 0])};
    rw_op(&c->rw, OP_TILE_MBARRIER_INIT, 2, opds, NULL);
  }
  rw_op(&c->rw, OP_TILE_FENCE_MBARRIER_INIT, 0, NULL, NULL);
  rw_end_if(&c->rw, sif);
  if (init_follows(op)) return;
  if (c->cluster_pipes && c->ctas > 1) {
    IrOp *a = rw_op(&c->rw, OP_TILE_CLUSTER_ARRIVE, 0, NULL, NULL);
    ir_op_set_attr(a, "relaxed", ir_attr_bool(c->rw.ctx, true));
    rw_op(&c->rw, OP_TILE_CLUSTER_WAIT, 0, NULL, NULL);
  } else {
    rw_op(&c->rw, OP_TILE_BARRIER, 0, NULL, NULL);
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
    arrive_n(c, stage_bar(c, a->p, a->index, 1), NULL, a->count);
    return;
  }
  IrValue *opds[2] = {stage_bar(c, a->p, a->index, 0), rw_i32(&c->rw, a->bytes)};
  if (a->kind == 1)
    rw_op(&c->rw, OP_TILE_MBARRIER_EXPECT_TX, 2, opds, NULL);
  else if (a->bytes > 0)
    rw_op(&c->rw, OP_TILE_MBARRIER_ARRIVE_EXPECT_TX, 2, opds, NULL);
  else
    arrive(c, opds[0], NULL);
}

/* The consumer warps of a pipeline (every participant's). */
static uint64_t consumer_warps(const CpnPipe *p) {
  uint64_t all = 0;
  for (uint32_t i = 0; i < p->nc; i++)
    all |= (uint64_t)p->cons[i];
  return all;
}

/* One arrival on rank's copy of the barrier bar (mapa, then
** mbarrier.arrive.shared::cluster at the default .release.cta scope). */
static void arrive_on_rank(Cpn *c, IrValue *bar, IrValue *rank) {
  IrValue *opds[2] = {bar, rank};
  arrive(c, rw_op1(&c->rw, OP_TILE_MAPA, 2, opds, ir_type_ptr(c->rw.ctx, c->rw.i64, IR_MS_CLUSTER)), NULL);
}

/* Cluster release: every CTA's producer multicasts into this CTA's stages, so
** each consumer warp releases the stage on every CTA of the cluster (the empty
** barrier counts consumer warps x CTAs). The arrivals are spread over the
** lanes of the warp, lane r on CTA r (CUTLASS's spread_arrivals, DeepGEMM), or
** under an elect made by the elected lane in turn; no barrier between the
** warps. They are at the default .release.cta scope and the producer's wait at
** .acquire.cta: a .cluster scope costs ptxas a MEMBAR.GPU per arrive and an L1
** invalidate per wait. What the release must order is the warp's reads of the
** stage, which the mode requires to be the async proxy's (wgmma operands)
** completed by wgmma.wait_group before it, and the peer producer's next write
** is a TMA (async proxy) after its wait: a completed read cannot see a later
** write, whatever the scope. Generic loads of the stage would need
** .release.cluster; the protocol checker reports them (docs/protocol.md).
** pingpong_cluster: the same, run by the warps of the one participant whose
** tile the stage holds (the empty barrier counts its warps x CTAs). */
static bool release_cluster(Cpn *c, IrOp *op, const KernelExec *x, const CpnPipe *p, IrValue *index) {
  uint64_t allowed = x->mask & consumer_warps(p);
  if (!allowed) {
    ir_op_error(op, "runs on warps 0x%llx, none of which is a consumer participant (0x%llx)",
                (unsigned long long)x->mask, (unsigned long long)consumer_warps(p));
    return false;
  }
  IrOp *guard = allowed != x->mask ? rw_begin_if(&c->rw, cpn_in_mask(c, allowed)) : NULL;
  IrValue *bar = stage_bar(c, p, index, 1);
  if (x->narrow) {
    for (int64_t r = 0; r < c->ctas; r++)
      arrive_on_rank(c, bar, rw_i32(&c->rw, r));
  } else {
    IrValue *lane = rw_op1(&c->rw, OP_TILE_LANE_ID, 0, NULL, c->rw.i32);
    IrOp *one = rw_begin_if(&c->rw, rw_cmp(&c->rw, "ult", lane, rw_i32(&c->rw, c->ctas)));
    arrive_on_rank(c, bar, lane);
    rw_end_if(&c->rw, one);
  }
  if (guard) rw_end_if(&c->rw, guard);
  return true;
}

/* producer_tail: a bulk wait_group 0 is enough when no other CTA arrives on
** this CTA's barriers (every mode but the cluster ones): the consumers are in the CTA,
** which outlives them, so the producer only has to drain its own bulk groups.
** In cluster and pingpong_cluster mode the producer also waits until every stage was released
** (CUTLASS's producer_tail), so that no remote arrival reaches a CTA that left. */
static void lower_tail(Cpn *c, const CpnPipe *p, IrValue *s) {
  if (p->mode == MODE_CLUSTER || p->mode == MODE_PINGPONG_CLUSTER) {
    IrValue *b[4] = {rw_i32(&c->rw, 0), rw_i32(&c->rw, p->stages), rw_i32(&c->rw, 1), s};
    IrOp *loop = ir_build(&c->rw.b, OP_SCF_FOR, 4, b, 1, &c->rw.i64, 1);
    IrBlock *body = ir_region_ensure_block(c->rw.ctx, &loop->regions[0]);
    ir_block_add_arg(c->rw.ctx, body, c->rw.i32);
    IrValue *st = ir_block_add_arg(c->rw.ctx, body, c->rw.i64);
    ir_builder_at_end(&c->rw.b, body);
    IrValue *parity = rw_bin(&c->rw, OP_ARITH_XORI, st_phase(c, st), rw_i32(&c->rw, 1));
    spin_wait(c, stage_bar(c, p, st_index(c, st), 1), parity, CPN_WAIT_HINT);
    IrValue *next = st_increment(c, st, p->stages);
    rw_op(&c->rw, OP_SCF_YIELD, 1, &next, NULL);
    ir_builder_after(&c->rw.b, loop);
  }
  IrOp *w = rw_op(&c->rw, OP_TILE_BULK_WAIT, 0, NULL, NULL);
  rw_set_int(&c->rw, w, "pending", 0);
}

/* A producer or consumer op; returns its result (or NULL). */
static bool lower_role_op(Cpn *c, IrOp *op, IrValue **res) {
  const CpnPipe *p = handle_of(c, op);
  if (!p) return false;
  const KernelExec *x = cpn_exec(c, op);
  IrValue *s = op->operands[1].value, *tok = op->noperands > 2 ? op->operands[2].value : NULL;
  IrValue *index = st_index(c, s);
  int64_t tx = op->kind == OP_CUTLASS_PIPELINE_PRODUCER_COMMIT
                   ? ir_attrs_CUTLASS_PIPELINE_PRODUCER_COMMIT(op).transaction_bytes
               : op->kind == OP_CUTLASS_PIPELINE_PRODUCER_EXPECT_TX
                   ? ir_attrs_CUTLASS_PIPELINE_PRODUCER_EXPECT_TX(op).transaction_bytes
                   : -1;
  Arrival a = {p, index, tx >= 0 ? tx : p->tx, 0, 1};
  IrValue *parity;
  switch (op->kind) {
  case OP_CUTLASS_PIPELINE_PRODUCER_ACQUIRE:
    parity = rw_bin(&c->rw, OP_ARITH_XORI, st_phase(c, s), rw_i32(&c->rw, 1));
    spin_wait_unless(c, tok, stage_bar(c, p, index, 1), parity);
    return true;
  case OP_CUTLASS_PIPELINE_CONSUMER_WAIT:
    spin_wait_unless(c, tok, stage_bar(c, p, index, 0), st_phase(c, s));
    return true;
  case OP_CUTLASS_PIPELINE_PRODUCER_TRY_ACQUIRE:
  case OP_CUTLASS_PIPELINE_CONSUMER_TRY_WAIT: {
    bool prod = op->kind == OP_CUTLASS_PIPELINE_PRODUCER_TRY_ACQUIRE;
    parity = st_phase(c, s);
    if (prod) parity = rw_bin(&c->rw, OP_ARITH_XORI, parity, rw_i32(&c->rw, 1));
    IrValue *opds[2] = {stage_bar(c, p, index, prod), parity};
    IrOp *t = rw_op(&c->rw, OP_TILE_MBARRIER_TEST_WAIT, 2, opds, c->rw.i1);
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
    if (p->mode == MODE_COOPERATIVE || p->mode == MODE_PINGPONG) /* pingpong: the one participant's threads */
      return arrive_per_thread(c, op, x, consumer_warps(p), do_arrival, &a, &a.count);
    if (p->mode == MODE_CLUSTER || p->mode == MODE_PINGPONG_CLUSTER) /* pingpong_cluster: one participant's warps */
      return release_cluster(c, op, x, p, index);
    return arrive_per_group(c, op, x, p->cons, p->nc, SYNC_ALWAYS, do_arrival, &a);
  }
}

/* }====================================================================== */

/* {======================================================================
** seq_bar: slots [base, base + depth) of the pool; a cursor is an i32
** index | phase << 16 with index already reduced modulo the depth
** ======================================================================= */

static IrValue *seq_slot(Cpn *c, const CpnSeq *q, IrValue *s) {
  IrValue *index = rw_bin(&c->rw, OP_ARITH_ANDI, s, rw_i32(&c->rw, 0xffff));
  return cpn_slot(c, rw_bin(&c->rw, OP_ARITH_ADDI, index, rw_i32(&c->rw, q->base)));
}

static IrValue *seq_phase(Cpn *c, IrValue *s) {
  return rw_bin(&c->rw, OP_ARITH_ANDI, rw_bin(&c->rw, OP_ARITH_SHRUI, s, rw_i32(&c->rw, 16)), rw_i32(&c->rw, 1));
}

/* index + 1; when it wraps to 0 (index % depth == 0) the phase flips. */
static IrValue *seq_advance(Cpn *c, const CpnSeq *q, IrValue *s) {
  IrValue *next = rw_bin(&c->rw, OP_ARITH_ADDI, rw_bin(&c->rw, OP_ARITH_ANDI, s, rw_i32(&c->rw, 0xffff)), rw_i32(&c->rw, 1));
  IrValue *wrap = rw_cmp(&c->rw, "eq", next, rw_i32(&c->rw, q->depth));
  IrValue *index = rw_select(&c->rw, wrap, rw_i32(&c->rw, 0), next);
  IrValue *phase = rw_bin(&c->rw, OP_ARITH_XORI, seq_phase(c, s), rw_cast(&c->rw, OP_ARITH_EXTUI, wrap, c->rw.i32));
  return rw_bin(&c->rw, OP_ARITH_ORI, index, rw_bin(&c->rw, OP_ARITH_SHLI, phase, rw_i32(&c->rw, 16)));
}

static bool lower_seq_op(Cpn *c, IrOp *op, IrValue **res) {
  if (op->kind == OP_CUTLASS_SEQ_BAR_STATE_CREATE) {
    IrAttrs_CUTLASS_SEQ_BAR_STATE_CREATE a = ir_attrs_CUTLASS_SEQ_BAR_STATE_CREATE(op);
    *res = rw_i32(&c->rw, a.index | a.phase << 16); /* the verifier keeps index < depth */
    return true;
  }
  const CpnSeq *q = handle_of(c, op);
  if (!q) return false;
  IrValue *s = op->operands[1].value;
  if (op->kind == OP_CUTLASS_SEQ_BAR_WAIT) {
    spin_wait(c, seq_slot(c, q, s), seq_phase(c, s), CPN_WAIT_HINT);
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
    rw_op(&c->rw, OP_NVVM_WGMMA_COMMIT_GROUP_SYNC_ALIGNED, 0, NULL, NULL);
    IrOp *w = rw_op(&c->rw, OP_NVVM_WGMMA_WAIT_GROUP_SYNC_ALIGNED, 0, NULL, NULL);
    rw_set_int(&c->rw, w, "group", pending);
    return;
  }
  if (commit) rw_op(&c->rw, OP_TILE_BULK_COMMIT, 0, NULL, NULL);
  IrOp *w = rw_op(&c->rw, OP_TILE_BULK_WAIT, 0, NULL, NULL);
  rw_set_int(&c->rw, w, "pending", pending);
}

static bool lower_async_wait(Cpn *c, IrOp *op) {
  IrValue *tok = op->operands[0].value;
  const char *fl = flavor_of(tok);
  if (is_none(tok) || !fl) return true; /* nothing outstanding */
  if (strcmp(fl, "mbarrier") == 0) {
    spin_wait(c, op->operands[1].value, op->operands[2].value, CPN_WAIT_HINT);
    return true;
  }
  group_wait(c, strcmp(fl, "gmma") == 0, true, ir_attrs_CUTLASS_ASYNC_WAIT(op).pending);
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
    spin_wait(c, src->operands[1].value, src->operands[2].value, CPN_FUTURE_HINT);
  else
    group_wait(c, false, false, 0);
  return true;
}

/* }====================================================================== */

/* {======================================================================
** Executor regions: switch_by_executor cases and async.exec bodies
** ======================================================================= */

/* The case blocks' arguments are their operand groups: use those directly. */
static void forward_case_args(IrOp *sw) {
  for (IrBlock *b = sw->regions[0].first; b; b = b->next)
    for (uint32_t k = 0; k < b->nargs; k++) {
      IrValue *o = cut_switch_case_operand(b->args[k]);
      if (o) ir_value_replace_all_uses(b->args[k], o);
    }
}

/* The body of an async.exec (under an scf.if on the warp index unless it runs
** where its parent does), or each case of a switch under an scf.if. */
static void lower_region_op(Cpn *c, IrOp *op) {
  rw_before(&c->rw, op);
  if (op->kind == OP_CUTLASS_ASYNC_EXEC) {
    uint64_t m = (uint64_t)ir_attrs_CUTLASS_ASYNC_EXEC(op).executors;
    const KernelExec *outer = cpn_exec(c, op);
    rw_inline_block(&c->rw, op->regions[0].first, m == outer->mask ? NULL : cpn_in_mask(c, m));
  } else {
    IrAttrList masks = ir_attrs_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR(op).masks;
    uint32_t i = 0;
    for (IrBlock *b = op->regions[0].first; b; b = b->next, i++)
      rw_inline_block(&c->rw, b, cpn_in_mask(c, (uint64_t)ir_attr_list_int(masks, i)));
  }
  ir_op_erase(op);
}

/* }====================================================================== */

/* {======================================================================
** Driver
** ======================================================================= */

static bool is_cutlass(const IrOp *op) { return name_has_prefix(op, "cutlass."); }

static bool is_region_op(IrOpKind k) {
  return k == OP_CUTLASS_ASYNC_EXEC || k == OP_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR;
}

/* Ops that other lowerings read (tracing) and that go at the end. */
static bool is_kept(IrOpKind k) {
  return k == OP_CUTLASS_PIPELINE_CREATE || k == OP_CUTLASS_SEQ_BAR_CREATE ||
         k == OP_CUTLASS_ASYNC_CREATE_NONE || k == OP_CUTLASS_ASYNC_TOKEN_TO_ASYNC ||
         k == OP_CUTLASS_ASYNC_TO_ASYNC;
}

/* Cursor values (block arguments, scf results) take their lowered types; the
** results of cutlass ops keep theirs until the ops are lowered. */
static const IrType *cursor_type(Rewriter *r, const IrValue *v) {
  if (v->def && is_cutlass(v->def)) return NULL;
  if (ir_type_is_dialect(v->type, IR_DTY_CUTLASS_PIPELINE_STATE)) return r->i64;
  if (ir_type_is_dialect(v->type, IR_DTY_CUTLASS_SEQ_BAR_STATE)) return r->i32;
  return NULL;
}

/* Lower one leaf op in front of itself; its result takes the new value. */
static bool lower_leaf(Cpn *c, IrOp *op) {
  rw_before(&c->rw, op);
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
  case OP_CUTLASS_PIPELINE_STATE_ADVANCE:
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
  rw_replace(op, NULL);
  return true;
}

/* Handles, none-tokens and bridges go once unused; a still-used bridge or none
** becomes builtin.unrealized_conversion_cast (the pipeline specification's
** cast bridge). */
static bool finish_kept(Cpn *c, IrOp *op) {
  if (!ir_op_results_unused(op)) {
    if (op->kind == OP_CUTLASS_PIPELINE_CREATE || op->kind == OP_CUTLASS_SEQ_BAR_CREATE) {
      IrUse *u = op->results[0].uses;
      ir_op_error(u->owner, "uses a handle that convert-cutlass-to-nvvm cannot follow");
      return false;
    }
    rw_before(&c->rw, op);
    uint32_t n = op->kind == OP_CUTLASS_ASYNC_CREATE_NONE ? 0 : 1;
    IrValue *src = n ? op->operands[0].value : NULL;
    rw_replace(op, rw_op1(&c->rw, OP_UNREALIZED_CAST, n, &src, op->results[0].type));
    return true;
  }
  ir_op_erase(op);
  return true;
}

static void kernel_setup(Cpn *c, IrOp *k) {
  c->pool = c->tid = c->warp = NULL;
  KernelSpec ks = kernel_spec(k);
  memcpy(c->block, ks.block, sizeof c->block);
  c->threads = ks.threads;
  c->all_warps = kernel_warp_mask(&ks);
  c->ctas = ks.ctas;
  c->nb_used = 1; /* id 0 is the CTA barrier */
  c->nnb = 0;
  c->cluster_pipes = false;
  c->failed = false;
  memset(&c->handles, 0, sizeof c->handles);
  memset(&c->frags, 0, sizeof c->frags);
}

/* Phase A over the collected ops: contexts, handles, checks. */
static bool analyze(Cpn *c) {
  ir_walk_pre(c->rw.kernel, cpn_reserve_visit, c);
  for (size_t i = 0; i < c->ops.n; i++) {
    c->ops.v[i]->mark = i + 1;
    c->execs[i] = kernel_exec_of(c->ops.v[i]);
  }
  bool ok = true;
  for (size_t i = 0; i < c->ops.n; i++) /* inits first: handles are looked up by their users */
    if (c->ops.v[i]->kind == OP_CUTLASS_PIPELINE_INIT || c->ops.v[i]->kind == OP_CUTLASS_SEQ_BAR_INIT)
      ok &= check_op(c, c->ops.v[i]);
  for (size_t i = 0; i < c->ops.n; i++)
    if (c->ops.v[i]->kind != OP_CUTLASS_PIPELINE_INIT && c->ops.v[i]->kind != OP_CUTLASS_SEQ_BAR_INIT)
      ok &= check_op(c, c->ops.v[i]);
  return ok;
}

/* Phase B: leaves in pre-order, then regions innermost first, then the rest. */
static bool rewrite(Cpn *c) {
  for (size_t i = 0; i < c->ops.n; i++)
    if (c->ops.v[i]->kind == OP_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR) forward_case_args(c->ops.v[i]);
  rw_retype(c->rw.kernel, cursor_type, &c->rw);
  for (size_t i = 0; i < c->ops.n; i++) {
    IrOp *op = c->ops.v[i];
    if (is_region_op(op->kind) || is_kept(op->kind)) continue;
    if (!lower_leaf(c, op)) return false;
  }
  for (size_t i = c->ops.n; i-- > 0;)
    if (is_region_op(c->ops.v[i]->kind)) lower_region_op(c, c->ops.v[i]);
  for (size_t i = c->ops.n; i-- > 0;)
    if (is_kept(c->ops.v[i]->kind) && !finish_kept(c, c->ops.v[i])) return false;
  cpn_erase_fragments(c);
  return true;
}

static IrResult convert_kernel(Rewriter *r, IrOp *k) {
  Cpn *c = (Cpn *)r;
  kernel_setup(c, k);
  memset(&c->ops, 0, sizeof c->ops);
  rw_collect(k, is_cutlass, &c->ops);
  if (c->ops.n == 0) return IR_OK;
  c->execs = ir_calloc(c->ops.n, sizeof *c->execs);
  bool ok = analyze(c) && rewrite(c);
  ir_free(c->execs);
  ir_opvec_free(&c->ops);
  ptrmap_free(&c->handles);
  ptrmap_free(&c->frags);
  return ok ? IR_OK : IR_FAIL;
}

IrResult pass_convert_cutlass_to_nvvm(IrOp *module, IrPassCtx *pc) {
  Cpn c;
  return rw_run(&c.rw, sizeof c, module, pc, convert_kernel);
}

/* }====================================================================== */
