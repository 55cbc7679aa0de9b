/*
** cutlass_pipeline.c -- verifiers of the pipeline family (handles, init with
** its derived arrive count, states, producer/consumer ops), the async tokens
** and futures, and seq_bar.
*/
#include <stdlib.h>
#include <string.h>

#include "cutlass.h"

#define MAX_PARTICIPANTS 16          /* rows of the lowering's mask matrix */
#define MAX_TX_BYTES ((1 << 20) - 1) /* mbarrier transaction count limit */

/* Pipeline modes (seed 000, Phase B of the producer-acquire lowering). */
enum {
  MODE_COOPERATIVE,
  MODE_WARP_SPECIALIZED,
  MODE_STRIDED_UREM,
  MODE_STRIDED_UDIV,
  MODE_CLUSTER
};
static const char *const modes[] = {"cooperative",  "warp_specialized", "strided_urem",
                                    "strided_udiv", "cluster",          NULL};
static const char *const roles[] = {"producer", "consumer", NULL};

/* {======================================================================
** Types
** ======================================================================= */

typedef struct PipeShape {
  int64_t stages, producers, consumers;
} PipeShape;

static PipeShape pipe_shape(const IrType *t) {
  PipeShape s = {ir_type_param_int(t, 0, 0), ir_type_param_int(t, 1, 0),
                 ir_type_param_int(t, 2, 0)};
  return s;
}

/* Stages of a pipeline state type. */
static int64_t state_stages(const IrType *t) { return ir_type_param_int(t, 0, 0); }

/* A state type must have the stage count of its pipeline. */
static bool check_state_fits(IrOp *op, const char *what, const IrType *st, const IrType *pipe) {
  if (state_stages(st) == pipe_shape(pipe).stages) return true;
  char *s = ir_type_to_string(st), *p = ir_type_to_string(pipe);
  ir_op_error(op, "%s %s does not match the %lld stages of %s", what, s,
              (long long)pipe_shape(pipe).stages, p);
  free(s);
  free(p);
  return false;
}

/* Does a handle have an init among its users? Then the init reports bad counts. */
static bool has_init_user(IrOp *op, IrOpKind init) {
  for (IrUse *u = op->results[0].uses; u; u = u->next)
    if (u->owner->kind == init) return true;
  return false;
}

IrResult cutlass_verify_pipeline_create(IrOp *op) {
  PipeShape s = pipe_shape(op->results[0].type);
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
                               int64_t *masks, uint32_t *n) {
  if (!cut_attr_int_list(op, name, masks, MAX_PARTICIPANTS, n)) return false;
  if ((int64_t)*n != count) {
    ir_op_error(op, "%s list has %u entr%s, expected %s = %lld", name, *n, *n == 1 ? "y" : "ies",
                count_name, (long long)count);
    return false;
  }
  uint64_t warps = cut_kernel_warp_mask(op);
  for (uint32_t i = 0; i < *n; i++) {
    uint64_t m = (uint64_t)masks[i];
    if (!cut_mask_contiguous(m)) {
      ir_op_error(op, "%s[%u] = 0x%llx is not a non-empty contiguous warp mask", name, i,
                  (unsigned long long)m);
      return false;
    }
    if (warps && (m & ~warps)) {
      ir_op_error(op, "%s[%u] = 0x%llx names warps beyond the %d warps of the kernel", name, i,
                  (unsigned long long)m, cut_popcount(warps));
      return false;
    }
    for (uint32_t j = 0; j < i; j++)
      if (m & (uint64_t)masks[j]) {
        ir_op_error(op, "%s[%u] = 0x%llx overlaps %s[%u] = 0x%llx", name, i, (unsigned long long)m,
                    name, j, (unsigned long long)masks[j]);
        return false;
      }
  }
  return true;
}

/* The counts and the mode agree with each other, the type and the kernel. */
static bool check_counts(IrOp *op, int64_t stages, int64_t np, int64_t nc, int mode) {
  if (stages <= 0) {
    ir_op_error(op, "expected numStages > 0, got %lld", (long long)stages);
    return false;
  }
  if (np <= 0 || nc <= 0 || np > MAX_PARTICIPANTS || nc > MAX_PARTICIPANTS) {
    ir_op_error(op, "expected numProducers and numConsumers in [1, %d], got %lld and %lld",
                MAX_PARTICIPANTS, (long long)np, (long long)nc);
    return false;
  }
  PipeShape s = pipe_shape(op->operands[0].value->type);
  if (s.stages != stages || s.producers != np || s.consumers != nc) {
    char *t = ir_type_to_string(op->operands[0].value->type);
    ir_op_error(op,
                "pipeline type %s does not match numStages = %lld, numProducers = %lld, "
                "numConsumers = %lld",
                t, (long long)stages, (long long)np, (long long)nc);
    free(t);
    return false;
  }
  if (mode == MODE_WARP_SPECIALIZED && (np != 1 || nc != 1)) {
    ir_op_error(
        op, "mode \"warp_specialized\" needs numProducers = numConsumers = 1, got %lld and %lld",
        (long long)np, (long long)nc);
    return false;
  }
  int64_t cl[3];
  cut_kernel_cluster(op, cl);
  if (mode == MODE_CLUSTER && cl[0] * cl[1] * cl[2] == 1) {
    ir_op_error(op, "mode \"cluster\" needs a kernel cluster of more than one CTA");
    return false;
  }
  return true;
}

/* Arrivals per phase: [full barrier, empty barrier]. Every producer participant
** arrives once (one elected thread, with expect_tx); consumers arrive once each,
** once per thread in cooperative mode (every consumer thread releases its own
** reads), once per CTA of the cluster in cluster mode. */
static void derive_arrive_count(IrOp *op, int mode, int64_t np, int64_t nc, const int64_t *cons,
                                int64_t out[2]) {
  out[0] = np;
  out[1] = nc;
  if (mode == MODE_COOPERATIVE) {
    out[1] = 0;
    for (int64_t i = 0; i < nc; i++)
      out[1] += 32 * (int64_t)cut_popcount((uint64_t)cons[i]);
  } else if (mode == MODE_CLUSTER) {
    int64_t cl[3];
    cut_kernel_cluster(op, cl);
    out[1] = nc * cl[0] * cl[1] * cl[2];
  }
}

/* The post-verify step: stamp `arrive_count` when absent; a present one must agree. */
static bool stamp_arrive_count(IrOp *op, const int64_t want[2]) {
  const IrAttr *a = ir_op_attr(op, "arrive_count");
  if (!a) {
    ir_op_set_attr(op, "arrive_count", ir_attr_int_array(ir_op_context(op), 2, want));
    return true;
  }
  bool ok = a->kind == IR_ATTR_ARRAY && a->u.arr.n == 2;
  for (uint32_t i = 0; ok && i < 2; i++)
    ok = a->u.arr.elems[i]->kind == IR_ATTR_INT && a->u.arr.elems[i]->u.i == want[i];
  if (!ok)
    ir_op_error(op, "arrive_count does not match the derived [%lld, %lld] (full, empty)",
                (long long)want[0], (long long)want[1]);
  return ok;
}

typedef struct InitScan {
  IrOp *self, *first;
} InitScan;

/* Pre-order visitor: the first init of the same handle before the op itself. */
static bool init_visit(IrOp *o, void *ud) {
  InitScan *s = ud;
  if (o == s->self) return false;
  if (o->kind == s->self->kind && o->noperands == 1 &&
      o->operands[0].value == s->self->operands[0].value) {
    s->first = o;
    return false;
  }
  return true;
}

/* A handle is initialized once: a second init names the first. */
static bool cut_check_single_init(IrOp *op) {
  IrOp *root = ir_op_ancestor(op, OP_TILE_KERNEL);
  if (!root) root = ir_op_ancestor(op, OP_MODULE);
  InitScan s = {op, NULL};
  if (root) ir_walk_pre(root, init_visit, &s);
  if (!s.first) return true;
  ir_op_note(ir_op_error(op, "initializes a handle that is already initialized"), s.first,
             "first initialized here");
  return false;
}

IrResult cutlass_verify_pipeline_init(IrOp *op) {
  int64_t stages, np, nc, base, pg, cg, tx;
  if (!cut_attr_int(op, "numStages", true, 0, &stages) ||
      !cut_attr_int(op, "numProducers", true, 0, &np) ||
      !cut_attr_int(op, "numConsumers", true, 0, &nc) ||
      !cut_attr_int(op, "barrier_id_base", true, 0, &base) ||
      !cut_attr_int(op, "producer_group_id", true, 0, &pg) ||
      !cut_attr_int(op, "consumer_group_id", true, 0, &cg) ||
      !cut_attr_int(op, "transaction_bytes", false, 0, &tx))
    return IR_FAIL;
  int mode = cut_attr_enum(op, "mode", modes, -1);
  if (mode < 0 || !check_counts(op, stages, np, nc, mode)) return IR_FAIL;
  int64_t prod[MAX_PARTICIPANTS], cons[MAX_PARTICIPANTS];
  uint32_t n;
  if (!check_participants(op, "participants", "numProducers", np, prod, &n) ||
      !check_participants(op, "consumers", "numConsumers", nc, cons, &n))
    return IR_FAIL;
  if (!cut_check_single_init(op) || !cut_claim_slots(op, base, 2 * stages)) return IR_FAIL;
  if (pg == cg) {
    ir_op_error(op, "producer_group_id and consumer_group_id must differ, both are %lld",
                (long long)pg);
    return IR_FAIL;
  }
  if (tx < 0 || tx > MAX_TX_BYTES) {
    ir_op_error(op, "expected transaction_bytes in [0, %d], got %lld", MAX_TX_BYTES, (long long)tx);
    return IR_FAIL;
  }
  int64_t arrive[2];
  derive_arrive_count(op, mode, np, nc, cons, arrive);
  return stamp_arrive_count(op, arrive) ? IR_OK : IR_FAIL;
}

/* }====================================================================== */

/* {======================================================================
** States and the producer / consumer ops
** ======================================================================= */

IrResult cutlass_verify_pipeline_state_create(IrOp *op) {
  int role = cut_attr_enum(op, "role", roles, -1);
  if (role < 0) return IR_FAIL;
  if (!check_state_fits(op, "result type", op->results[0].type, op->operands[0].value->type))
    return IR_FAIL;
  int64_t stages = state_stages(op->results[0].type), index, phase, count;
  if (!cut_attr_int(op, "index", false, 0, &index) ||
      !cut_attr_int(op, "phase", false, 0, &phase) || !cut_attr_int(op, "count", false, 0, &count))
    return IR_FAIL;
  if (index < 0 || index >= stages || (phase != 0 && phase != 1) || count < 0) {
    ir_op_error(op,
                "expected index in [0, %lld), phase 0 or 1 and count >= 0, got %lld, %lld, %lld",
                (long long)stages, (long long)index, (long long)phase, (long long)count);
    return IR_FAIL;
  }
  return IR_OK;
}

/* Operand #i of the op that feeds the first block argument of a switch case. */
static IrValue *switch_case_operand(IrOp *sw, const IrValue *arg) {
  uint32_t first = 0, i = 0;
  const IrAttr *segs = ir_op_attr(sw, "operand_segments");
  if (!segs || segs->kind != IR_ATTR_ARRAY) return NULL;
  for (IrBlock *b = sw->regions[0].first; b && b != arg->block; b = b->next, i++) {
    if (i >= segs->u.arr.n || segs->u.arr.elems[i]->kind != IR_ATTR_INT) return NULL;
    first += (uint32_t)segs->u.arr.elems[i]->u.i;
  }
  first += arg->index;
  return first < sw->noperands ? sw->operands[first].value : NULL;
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
  if (p->kind == OP_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR) return switch_case_operand(p, v);
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
    if (d->kind == OP_CUTLASS_PIPELINE_STATE_INCREMENT || d->kind == OP_CUTLASS_PIPELINE_STATE_BUMP)
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
  const char *want = is_producer_op(op->kind) ? "producer" : "consumer";
  const char *got = ir_op_attr_str(src, "role");
  if (got && strcmp(got, want) != 0) {
    IrDiag *d =
        ir_op_error(op, "expects a %s state, got one created with role = \"%s\"", want, got);
    ir_op_note(d, src, "state created here");
    return false;
  }
  return true;
}

/* transaction_bytes of commit (optional) and expect_tx (required). */
static bool check_tx_bytes(IrOp *op) {
  bool needed = op->kind == OP_CUTLASS_PIPELINE_PRODUCER_EXPECT_TX;
  if (!needed && op->kind != OP_CUTLASS_PIPELINE_PRODUCER_COMMIT) return true;
  int64_t tx;
  if (!cut_attr_int(op, "transaction_bytes", needed, 0, &tx)) return false;
  if (tx < 0 || tx > MAX_TX_BYTES || (needed && tx == 0)) {
    ir_op_error(op, "expected transaction_bytes in [%d, %d], got %lld", needed ? 1 : 0,
                MAX_TX_BYTES, (long long)tx);
    return false;
  }
  return true;
}

IrResult cutlass_verify_pipeline_role_op(IrOp *op) {
  const IrType *pipe = op->operands[0].value->type, *st = op->operands[1].value->type;
  if (!check_state_fits(op, "state of type", st, pipe) || !check_state_origin(op) ||
      !check_tx_bytes(op))
    return IR_FAIL;
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

enum { FL_MBARRIER, FL_BULK, FL_GMMA };
static const char *const token_flavors[] = {"mbarrier", "bulk", "gmma", NULL};
static const char *const future_flavors[] = {"mbarrier", "bulk", NULL};

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
  if (flavor == FL_MBARRIER) {
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
  int64_t pending;
  if (!cut_attr_int(op, "pending", false, 0, &pending)) return IR_FAIL;
  if (f == FL_MBARRIER && ir_op_attr(op, "pending")) {
    ir_op_error(op, "'pending' applies to bulk and gmma tokens only");
    return IR_FAIL;
  }
  if (pending < 0) {
    ir_op_error(op, "expected pending >= 0, got %lld", (long long)pending);
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult cutlass_verify_token_to_async(IrOp *op) {
  int f = flavor_of(op, "operand #0", op->operands[0].value->type, token_flavors);
  if (f < 0) return IR_FAIL;
  if (f == FL_GMMA) {
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

static int64_t depth_of(const IrType *t) { return ir_type_param_int(t, 0, 0); }

/* A ring type of depth in [1, 32] (the pool holds 32 slots). */
static bool check_depth(IrOp *op, const char *what, const IrType *t) {
  int64_t d = depth_of(t);
  if (d > 0 && d <= 32) return true;
  char *s = ir_type_to_string(t);
  ir_op_error(op, "%s %s needs a depth in [1, 32], got %lld", what, s, (long long)d);
  free(s);
  return false;
}

IrResult cutlass_verify_seq_bar_create(IrOp *op) {
  if (has_init_user(op, OP_CUTLASS_SEQ_BAR_INIT)) return IR_OK;
  return check_depth(op, "result type", op->results[0].type) ? IR_OK : IR_FAIL;
}

IrResult cutlass_verify_seq_bar_init(IrOp *op) {
  const IrType *t = op->operands[0].value->type;
  int64_t base, count;
  if (!check_depth(op, "operand type", t) || !cut_attr_int(op, "barrier_id_base", true, 0, &base) ||
      !cut_attr_int(op, "arrive_count", true, 0, &count))
    return IR_FAIL;
  if (count <= 0) {
    ir_op_error(op, "expected arrive_count > 0, got %lld", (long long)count);
    return IR_FAIL;
  }
  return cut_check_single_init(op) && cut_claim_slots(op, base, depth_of(t)) ? IR_OK : IR_FAIL;
}

IrResult cutlass_verify_seq_bar_state_create(IrOp *op) {
  const IrType *t = op->results[0].type;
  int64_t index, phase;
  if (!check_depth(op, "result type", t) || !cut_attr_int(op, "index", false, 0, &index) ||
      !cut_attr_int(op, "phase", false, 0, &phase))
    return IR_FAIL;
  if (index < 0 || index >= depth_of(t) || (phase != 0 && phase != 1)) {
    ir_op_error(op, "expected index in [0, %lld) and phase 0 or 1, got %lld and %lld",
                (long long)depth_of(t), (long long)index, (long long)phase);
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult cutlass_verify_seq_bar_use(IrOp *op) {
  const IrType *bar = op->operands[0].value->type, *st = op->operands[1].value->type;
  if (depth_of(st) != depth_of(bar)) {
    char *s = ir_type_to_string(st), *b = ir_type_to_string(bar);
    ir_op_error(op, "state of type %s does not match the depth %lld of %s", s,
                (long long)depth_of(bar), b);
    free(s);
    free(b);
    return IR_FAIL;
  }
  if (op->nresults == 1 && op->results[0].type != st) {
    cut_type_error(op, "result", "the state type", op->results[0].type);
    return IR_FAIL;
  }
  return IR_OK;
}

/* }====================================================================== */
