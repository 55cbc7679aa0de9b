/*
** cutlass_pipeline.c -- verifiers of the pipeline family (handles, init with
** its derived arrive count, states, producer/consumer ops), the async tokens
** and futures, and seq_bar.
*/
#include <stdlib.h>
#include <string.h>

#include "cutlass.h"

/* {======================================================================
** Types
** ======================================================================= */

/* A state type must have the stage count of its pipeline. */
static bool check_state_fits(IrOp *op, const char *what, const IrType *st, const IrType *pipe) {
  int64_t stages = cut_pipe_shape(pipe).stages;
  if (cut_pipe_shape(st).stages == stages) return true;
  ir_op_error(op, "%s %s does not match the %lld stages of %s", what, ir_op_type_str(op, st),
              (long long)stages, ir_op_type_str(op, pipe));
  return false;
}

/* Does a handle have an init among its users? Then the init reports bad counts. */
static bool has_init_user(IrOp *op, IrOpKind init) {
  for (IrUse *u = op->results[0].uses; u; u = u->next)
    if (u->owner->kind == init) return true;
  return false;
}

IrResult cutlass_verify_pipeline_create(IrOp *op) {
  CutPipeShape s = cut_pipe_shape(op->results[0].type);
  if ((s.stages > 0 && s.producers > 0 && s.consumers > 0) ||
      has_init_user(op, OP_CUTLASS_PIPELINE_INIT))
    return IR_OK;
  cut_type_error(op, "result",
                 "!cutlass.pipeline<numStages, numProducers, numConsumers> of positive counts",
                 op->results[0].type);
  return IR_FAIL;
}

/* }====================================================================== */

/* {======================================================================
** pipeline.init
** ======================================================================= */

/* A list of participant warp masks: `count` entries, each a non-empty contiguous
** mask inside the kernel's warps, pairwise disjoint. */
static bool check_participants(IrOp *op, const char *name, const char *count_name, int64_t count,
                               IrAttrList masks) {
  uint32_t n = masks.n;
  if ((int64_t)n != count) {
    ir_op_error(op, "%s list has %u entr%s, expected %s = %lld", name, n, n == 1 ? "y" : "ies",
                count_name, (long long)count);
    return false;
  }
  KernelSpec ks = kernel_spec_of(op);
  uint64_t warps = kernel_warp_mask(&ks);
  for (uint32_t i = 0; i < n; i++) {
    uint64_t m = (uint64_t)ir_attr_list_int(masks, i);
    if (!kernel_mask_contiguous(m)) {
      ir_op_error(op, "%s[%u] = 0x%llx is not a non-empty contiguous warp mask", name, i,
                  (unsigned long long)m);
      return false;
    }
    if (warps && (m & ~warps)) {
      ir_op_error(op, "%s[%u] = 0x%llx names warps beyond the %d warps of the kernel", name, i,
                  (unsigned long long)m, kernel_popcount(warps));
      return false;
    }
    for (uint32_t j = 0; j < i; j++) {
      uint64_t o = (uint64_t)ir_attr_list_int(masks, j);
      if (m & o) {
        ir_op_error(op, "%s[%u] = 0x%llx overlaps %s[%u] = 0x%llx", name, i, (unsigned long long)m,
                    name, j, (unsigned long long)o);
        return false;
      }
    }
  }
  return true;
}

/* The counts of the type and the mode agree with each other and the kernel. */
static bool check_counts(IrOp *op, CutPipeShape s, int mode) {
  if (s.stages <= 0) {
    ir_op_error(op, "expected numStages > 0, got %lld", (long long)s.stages);
    return false;
  }
  if (s.stages > CUT_POOL_SLOTS / 2) { /* a full and an empty barrier slot per stage */
    ir_op_error(op, "expected numStages <= %d (two of the %d barrier slots per stage), got %lld",
                CUT_POOL_SLOTS / 2, CUT_POOL_SLOTS, (long long)s.stages);
    return false;
  }
  if (s.producers <= 0 || s.consumers <= 0 || s.producers > CUT_MAX_PARTICIPANTS ||
      s.consumers > CUT_MAX_PARTICIPANTS) {
    ir_op_error(op, "expected numProducers and numConsumers in [1, %d], got %lld and %lld",
                CUT_MAX_PARTICIPANTS, (long long)s.producers, (long long)s.consumers);
    return false;
  }
  if (mode == MODE_WARP_SPECIALIZED && (s.producers != 1 || s.consumers != 1)) {
    ir_op_error(
        op, "mode \"warp_specialized\" needs numProducers = numConsumers = 1, got %lld and %lld",
        (long long)s.producers, (long long)s.consumers);
    return false;
  }
  if ((mode == MODE_CLUSTER || mode == MODE_PINGPONG_CLUSTER) && kernel_spec_of(op).ctas == 1) {
    ir_op_error(op, "mode \"%s\" needs a kernel cluster of more than one CTA",
                mode == MODE_CLUSTER ? "cluster" : "pingpong_cluster");
    return false;
  }
  if ((mode == MODE_PINGPONG || mode == MODE_PINGPONG_CLUSTER) && s.consumers < 2) {
    ir_op_error(op, "mode \"%s\" needs at least 2 consumer participants (each stage is released by one of them), got %lld",
                mode == MODE_PINGPONG ? "pingpong" : "pingpong_cluster", (long long)s.consumers);
    return false;
  }
  return true;
}

/* Ping-pong: a stage is released by one consumer participant, so all of them
** must count the same arrivals (the empty barrier counts one's threads). */
static bool check_pingpong_consumers(IrOp *op, IrAttrList masks, int mode) {
  int w0 = kernel_popcount((uint64_t)ir_attr_list_int(masks, 0));
  for (uint32_t i = 1; i < masks.n; i++) {
    int w = kernel_popcount((uint64_t)ir_attr_list_int(masks, i));
    if (w == w0) continue;
    ir_op_error(op, "mode \"%s\" needs consumer participants of equal warps: consumers[%u] = 0x%llx has %d, consumers[0] = 0x%llx has %d",
                mode == MODE_PINGPONG ? "pingpong" : "pingpong_cluster", i, (unsigned long long)ir_attr_list_int(masks, i), w, (unsigned long long)ir_attr_list_int(masks, 0), w0);
    return false;
  }
  return true;
}

/* Arrivals per phase: [full barrier, empty barrier]. Every producer participant
** arrives once (one elected thread, with expect_tx); consumers arrive once each,
** once per thread in cooperative mode (every consumer thread releases its own
** reads), once per thread of one participant in pingpong mode (the one whose
** tile the stage holds), once per warp from every CTA of the cluster in
** cluster mode, once per warp of one participant from every CTA of the
** cluster in pingpong_cluster mode. */
void cut_pipeline_arrive_counts(const IrOp *init, int64_t out[2]) {
  IrAttrs_CUTLASS_PIPELINE_INIT a = ir_attrs_CUTLASS_PIPELINE_INIT(init);
  CutPipeShape s = cut_pipe_shape(init->operands[0].value->type);
  out[0] = s.producers;
  out[1] = s.consumers;
  if (a.mode != MODE_COOPERATIVE && a.mode != MODE_CLUSTER && a.mode != MODE_PINGPONG &&
      a.mode != MODE_PINGPONG_CLUSTER)
    return;
  int64_t warps = 0;
  for (uint32_t i = 0; i < a.consumers.n; i++)
    warps += kernel_popcount((uint64_t)ir_attr_list_int(a.consumers, i));
  int64_t one = a.consumers.n ? kernel_popcount((uint64_t)ir_attr_list_int(a.consumers, 0)) : 0;
  if (a.mode == MODE_PINGPONG)
    out[1] = 32 * one;
  else if (a.mode == MODE_PINGPONG_CLUSTER)
    out[1] = one * kernel_spec_of(init).ctas;
  else
    out[1] = a.mode == MODE_COOPERATIVE ? 32 * warps : warps * kernel_spec_of(init).ctas;
}

IrResult cutlass_verify_pipeline_init(IrOp *op) {
  IrAttrs_CUTLASS_PIPELINE_INIT a = ir_attrs_CUTLASS_PIPELINE_INIT(op);
  CutPipeShape s = cut_pipe_shape(op->operands[0].value->type);
  if (!check_counts(op, s, a.mode) ||
      !check_participants(op, "participants", "numProducers", s.producers, a.participants) ||
      !check_participants(op, "consumers", "numConsumers", s.consumers, a.consumers) ||
      ((a.mode == MODE_PINGPONG || a.mode == MODE_PINGPONG_CLUSTER) && !check_pingpong_consumers(op, a.consumers, a.mode)) ||
      !cut_check_claim(op, a.barrier_id_base, 2 * s.stages))
    return IR_FAIL;
  if (a.producer_group_id == a.consumer_group_id) {
    ir_op_error(op, "producer_group_id and consumer_group_id must differ, both are %lld",
                (long long)a.producer_group_id);
    return IR_FAIL;
  }
  if (!ir_op_attr(op, "arrive_count")) return IR_OK;
  int64_t want[2];
  cut_pipeline_arrive_counts(op, want);
  if (a.arrive_count.n == 2 && ir_attr_list_int(a.arrive_count, 0) == want[0] &&
      ir_attr_list_int(a.arrive_count, 1) == want[1])
    return IR_OK;
  ir_op_error(op, "arrive_count does not match the derived [%lld, %lld] (full, empty)",
              (long long)want[0], (long long)want[1]);
  return IR_FAIL;
}

/* }====================================================================== */

/* {======================================================================
** States and the producer / consumer ops
** ======================================================================= */

IrResult cutlass_verify_pipeline_state_create(IrOp *op) {
  if (!check_state_fits(op, "result type", op->results[0].type, op->operands[0].value->type))
    return IR_FAIL;
  IrAttrs_CUTLASS_PIPELINE_STATE_CREATE a = ir_attrs_CUTLASS_PIPELINE_STATE_CREATE(op);
  int64_t stages = cut_pipe_shape(op->results[0].type).stages;
  if (a.index >= stages) {
    ir_op_error(op, "expected index in [0, %lld), got %lld", (long long)stages, (long long)a.index);
    return IR_FAIL;
  }
  return IR_OK;
}

/* The result is a cursor of the operand's pipeline. */
IrResult cutlass_verify_pipeline_state_advance(IrOp *op) {
  return check_state_fits(op, "result type", op->results[0].type, op->operands[0].value->type) ? IR_OK : IR_FAIL;
}

/* The value feeding a block argument from outside its loop or switch, or NULL. */
static IrValue *block_arg_source(const IrValue *v) {
  IrOp *p = v->block ? ir_block_parent_op(v->block) : NULL;
  if (!p) return NULL;
  if (p->kind == OP_SCF_FOR && v->block == p->regions[0].first && v->index >= 1 &&
      2 + v->index < p->noperands)
    return p->operands[2 + v->index].value;
  if (p->kind == OP_SCF_WHILE && v->block == p->regions[0].first && v->index < p->noperands)
    return p->operands[v->index].value;
  if (p->kind == OP_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR) return cut_switch_case_operand(v);
  return NULL;
}

/* The cutlass.pipeline.state.create a state comes from, through increments,
** bumps, loop-carried values and switch cases; NULL where the chain is lost. */
static IrOp *state_origin(IrValue *v) {
  for (int steps = 0; v && steps < 256; steps++) {
    IrOp *d = v->def;
    if (!d) {
      v = block_arg_source(v);
      continue;
    }
    if (d->kind == OP_CUTLASS_PIPELINE_STATE_CREATE) return d;
    if (d->kind == OP_CUTLASS_PIPELINE_STATE_INCREMENT || d->kind == OP_CUTLASS_PIPELINE_STATE_BUMP ||
        d->kind == OP_CUTLASS_PIPELINE_STATE_ADVANCE)
      v = d->operands[0].value;
    else if (d->kind == OP_SCF_FOR && 3 + v->index < d->noperands)
      v = d->operands[3 + v->index].value;
    else
      return NULL;
  }
  return NULL;
}

static bool is_producer_op(IrOpKind k) {
  return k == OP_CUTLASS_PIPELINE_PRODUCER_ACQUIRE ||
         k == OP_CUTLASS_PIPELINE_PRODUCER_TRY_ACQUIRE ||
         k == OP_CUTLASS_PIPELINE_PRODUCER_EXPECT_TX || k == OP_CUTLASS_PIPELINE_PRODUCER_COMMIT ||
         k == OP_CUTLASS_PIPELINE_PRODUCER_TAIL || k == OP_CUTLASS_PIPELINE_PRODUCER_GET_BARRIER;
}

/* The state must come from this pipeline, with the op's role, when we can tell. */
static bool check_state_origin(IrOp *op) {
  IrOp *src = state_origin(op->operands[1].value);
  if (!src || src->noperands != 1 || !src->operands[0].value) return true;
  if (src->operands[0].value != op->operands[0].value) {
    IrDiag *d = ir_op_error(op, "takes a state of another pipeline");
    ir_op_note(d, src, "state created here");
    return false;
  }
  int want = is_producer_op(op->kind) ? ROLE_PRODUCER : ROLE_CONSUMER;
  int got = ir_attrs_CUTLASS_PIPELINE_STATE_CREATE(src).role;
  if (got >= 0 && got != want) {
    IrDiag *d = ir_op_error(op, "expects a %s state, got one created with role = \"%s\"",
                            PIPELINE_ROLE_names[want], PIPELINE_ROLE_names[got]);
    ir_op_note(d, src, "state created here");
    return false;
  }
  return true;
}

IrResult cutlass_verify_pipeline_role_op(IrOp *op) {
  const IrType *pipe = op->operands[0].value->type, *st = op->operands[1].value->type;
  if (!check_state_fits(op, "state of type", st, pipe) || !check_state_origin(op)) return IR_FAIL;
  if (op->kind == OP_CUTLASS_PIPELINE_PRODUCER_GET_BARRIER &&
      !ir_type_is_int_width(op->results[0].type->elem, 64)) {
    cut_type_error(op, "result", "ptr<i64, shared> (an mbarrier)", op->results[0].type);
    return IR_FAIL;
  }
  return IR_OK;
}

/* }====================================================================== */

/* {======================================================================
** Async tokens and futures
** ======================================================================= */

static const char *const *const token_flavors = TOKEN_FLAVOR_names;
static const char *const *const future_flavors = FUTURE_FLAVOR_names;

/* The flavor of a token or future type; reports unknown ones. */
static int flavor_of(IrOp *op, const char *what, const IrType *t, const char *const *names) {
  int f = cut_kind_index(t, names);
  if (f < 0)
    cut_type_error(op, what,
                   names == token_flavors ? "a token of flavor mbarrier, bulk or gmma"
                                          : "a future of flavor mbarrier or bulk",
                   t);
  return f;
}

IrResult cutlass_verify_async_token_result(IrOp *op) {
  return flavor_of(op, "result", op->results[0].type, token_flavors) >= 0 ? IR_OK : IR_FAIL;
}

IrResult cutlass_verify_future_operand(IrOp *op) {
  return flavor_of(op, "operand #0", op->operands[0].value->type, future_flavors) >= 0 ? IR_OK
                                                                                       : IR_FAIL;
}

/* mbarrier tokens need (barrier, phase) operands; group tokens take none. */
static bool check_barrier_operands(IrOp *op, int flavor) {
  if (flavor == FLAVOR_MBARRIER) {
    if (op->noperands != 3) {
      ir_op_error(op, "an mbarrier token needs a barrier and a phase operand");
      return false;
    }
    const IrType *b = op->operands[1].value->type;
    if (!ir_type_is_int_width(b->elem, 64)) {
      cut_type_error(op, "the barrier", "ptr<i64, shared>", b);
      return false;
    }
    return true;
  }
  if (op->noperands != 1) {
    ir_op_error(op, "a %s token takes no barrier or phase operand", token_flavors[flavor]);
    return false;
  }
  return true;
}

IrResult cutlass_verify_async_wait(IrOp *op) {
  int f = flavor_of(op, "operand #0", op->operands[0].value->type, token_flavors);
  if (f < 0 || !check_barrier_operands(op, f)) return IR_FAIL;
  int64_t pending = ir_attrs_CUTLASS_ASYNC_WAIT(op).pending;
  if (f == FLAVOR_MBARRIER && ir_op_attr(op, "pending")) {
    ir_op_error(op, "'pending' applies to bulk and gmma tokens only");
    return IR_FAIL;
  }
  if (f == FLAVOR_GMMA && pending > SM90_WGMMA_WAIT_MAX) {
    ir_op_error(op, "expected pending in [0, %d] for a gmma token, got %lld", SM90_WGMMA_WAIT_MAX,
                (long long)pending);
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult cutlass_verify_token_to_async(IrOp *op) {
  int f = flavor_of(op, "operand #0", op->operands[0].value->type, token_flavors);
  if (f < 0) return IR_FAIL;
  if (f == FLAVOR_GMMA) {
    ir_op_error(op, "gmma tokens have no future form; wait on them with cutlass.async.wait");
    return IR_FAIL;
  }
  if (!check_barrier_operands(op, f)) return IR_FAIL;
  int r = flavor_of(op, "result", op->results[0].type, future_flavors);
  if (r < 0) return IR_FAIL;
  if (r != f) {
    ir_op_error(op, "a %s token becomes a !cutlass.future<%s>, not <%s>", token_flavors[f],
                token_flavors[f], future_flavors[r]);
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult cutlass_verify_to_async(IrOp *op) {
  int f = flavor_of(op, "operand #0", op->operands[0].value->type, future_flavors);
  int r = f < 0 ? -1 : flavor_of(op, "result", op->results[0].type, future_flavors);
  if (r < 0) return IR_FAIL;
  if (r != f) {
    ir_op_error(op, "cannot change the flavor of a future (%s to %s)", future_flavors[f],
                future_flavors[r]);
    return IR_FAIL;
  }
  return IR_OK;
}

/* }====================================================================== */

/* {======================================================================
** seq_bar
** ======================================================================= */

static int64_t depth_of(const IrType *t) { return cut_seq_depth(t); }

/* A ring type of depth in [1, 32] (the pool holds 32 slots). */
static bool check_depth(IrOp *op, const char *what, const IrType *t) {
  int64_t d = depth_of(t);
  if (d > 0 && d <= CUT_POOL_SLOTS) return true;
  ir_op_error(op, "%s %s needs a depth in [1, %d], got %lld", what, ir_op_type_str(op, t),
              CUT_POOL_SLOTS, (long long)d);
  return false;
}

IrResult cutlass_verify_seq_bar_create(IrOp *op) {
  if (has_init_user(op, OP_CUTLASS_SEQ_BAR_INIT)) return IR_OK;
  return check_depth(op, "result type", op->results[0].type) ? IR_OK : IR_FAIL;
}

IrResult cutlass_verify_seq_bar_init(IrOp *op) {
  const IrType *t = op->operands[0].value->type;
  if (!check_depth(op, "operand type", t)) return IR_FAIL;
  return cut_check_claim(op, ir_attrs_CUTLASS_SEQ_BAR_INIT(op).barrier_id_base, depth_of(t)) ? IR_OK
                                                                                               : IR_FAIL;
}

IrResult cutlass_verify_seq_bar_state_create(IrOp *op) {
  const IrType *t = op->results[0].type;
  int64_t index = ir_attrs_CUTLASS_SEQ_BAR_STATE_CREATE(op).index;
  if (!check_depth(op, "result type", t)) return IR_FAIL;
  if (index >= depth_of(t)) {
    ir_op_error(op, "expected index in [0, %lld), got %lld", (long long)depth_of(t), (long long)index);
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult cutlass_verify_seq_bar_use(IrOp *op) {
  const IrType *bar = op->operands[0].value->type, *st = op->operands[1].value->type;
  if (depth_of(st) != depth_of(bar)) {
    ir_op_error(op, "state of type %s does not match the depth %lld of %s", ir_op_type_str(op, st),
                (long long)depth_of(bar), ir_op_type_str(op, bar));
    return IR_FAIL;
  }
  if (op->nresults == 1 && op->results[0].type != st) {
    cut_type_error(op, "result", "the state type", op->results[0].type);
    return IR_FAIL;
  }
  return IR_OK;
}

/* }====================================================================== */
