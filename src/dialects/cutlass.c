/*
** cutlass.c -- the cutlass dialect: helpers shared by its verifiers (types,
** the target), the kernel rule of the per-CTA pool of barrier slots, and the
** verifiers of the executor and barrier families: cutlass.async.exec,
** switch_by_executor, cutlass.bar, named and generic barriers. The model is
** written down in docs/cutlass.md.
**
** The helpers are declared in cutlass.h for the other verifier files and the
** lowering passes.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/checked.h"
#include "cutlass.h"

/* {======================================================================
** Types and the target
** ======================================================================= */

/* Index of a type's keyword (its kind or flavor) in names, -1 when missing or unknown. */
int cut_kind_index(const IrType *t, const char *const *names) {
  return ir_enum_index(names, ir_type_param_str(t, 0));
}

/* Report a type that should have been another: "<what> must be <want>, got <t>". */
void cut_type_error(IrOp *op, const char *what, const char *want, const IrType *t) {
  ir_op_error(op, "%s must be %s, got %s", what, want, ir_op_type_str(op, t));
}

CutPipeShape cut_pipe_shape(const IrType *t) {
  CutPipeShape s = {ir_type_param_int(t, 0, 0), ir_type_param_int(t, 1, 0), ir_type_param_int(t, 2, 0)};
  return s;
}

int64_t cut_seq_depth(const IrType *t) { return ir_type_param_int(t, 0, 0); }

/* Elements per unit of a block-striped move of fragment type frag: the
** innermost row when one ld/st moves it (4, 8 or 16 bytes), else 1. */
int64_t cut_striped_unit(const IrType *frag) {
  int64_t v = frag->rank >= 2 ? frag->shape[frag->rank - 1] : 1, eb = dia_type_bytes(frag->elem);
  int64_t bytes;
  if (v < 2 || !ck_mul(v, eb, &bytes) || (bytes != 4 && bytes != 8 && bytes != 16) || (eb >= 4 && v > 4)) return 1;
  return v;
}

/* The SM number of the target: the module attribute `target` ("sm_90a", "sm_100a"
** or an integer) when present, else the context's. */
int cut_target_sm(const IrOp *op) {
  const IrOp *m = op->kind == OP_MODULE ? op : ir_op_ancestor(op, OP_MODULE);
  const IrAttr *a = m ? ir_attrs_MODULE(m).target : NULL;
  if (a && a->kind == IR_ATTR_INT && a->u.i > 0 && a->u.i < 10000) return (int)a->u.i;
  if (a && a->kind == IR_ATTR_STR && strncmp(a->u.str.s, "sm_", 3) == 0) {
    int sm = atoi(a->u.str.s + 3);
    if (sm > 0) return sm;
  }
  return ir_context_target_sm(ir_op_context(op));
}

/* }====================================================================== */

/* {======================================================================
** The per-CTA pool of barrier slots (pipeline.init and seq_bar.init), a
** kernel rule: each handle is initialized once, claims do not overlap
** ======================================================================= */

/* The slots [*base, *base + *n) an init op claims (its per-op verifier
** checked that they lie in the pool). */
static int64_t clamp_slots(int64_t v) { return v < 0 ? 0 : v > CUT_POOL_SLOTS ? CUT_POOL_SLOTS : v; }

/* The slots an init claims, clamped to the pool: the init's own verifier rejects
** a claim outside it, and the clamp keeps the sums of the overlap test in range. */
static void slot_range(const IrOp *op, int64_t *base, int64_t *n) {
  int64_t b, m;
  if (op->kind == OP_CUTLASS_PIPELINE_INIT) {
    b = ir_attrs_CUTLASS_PIPELINE_INIT(op).barrier_id_base;
    m = cut_pipe_shape(op->operands[0].value->type).stages;
    m = clamp_slots(m) * 2; /* a full and an empty barrier per stage */
  } else {
    b = ir_attrs_CUTLASS_SEQ_BAR_INIT(op).barrier_id_base;
    m = cut_seq_depth(op->operands[0].value->type);
  }
  *base = clamp_slots(b);
  *n = clamp_slots(m);
}

typedef struct PoolScan {
  IrOp *claims[CUT_POOL_SLOTS];
  int nclaims;
  PtrMap inits; /* handle value -> its first init */
  bool ok;
} PoolScan;

/* A second init of a handle names the first. */
static bool check_single_init(PoolScan *s, IrOp *op) {
  IrValue *h = op->operands[0].value;
  IrOp *first = ptrmap_get(&s->inits, h);
  if (!first) {
    ptrmap_set(&s->inits, h, op);
    return true;
  }
  ir_op_note(ir_op_error(op, "initializes a handle that is already initialized"), first,
             "first initialized here");
  return false;
}

/* A claim overlapping an earlier one: the later claimant reports, naming both. */
static bool check_claim(PoolScan *s, IrOp *op) {
  int64_t base, n, b, m;
  slot_range(op, &base, &n);
  for (int i = 0; i < s->nclaims; i++) {
    slot_range(s->claims[i], &b, &m);
    if (b >= base + n || base >= b + m) continue;
    IrDiag *d = ir_op_error(op, "claims barrier slots [%lld, %lld), overlapping slots [%lld, %lld) of '%s'",
                            (long long)base, (long long)(base + n), (long long)b, (long long)(b + m),
                            ir_op_name(s->claims[i]));
    ir_op_note(d, s->claims[i], "slots [%lld, %lld) claimed here", (long long)b, (long long)(b + m));
    return false;
  }
  if (s->nclaims < CUT_POOL_SLOTS) s->claims[s->nclaims++] = op; /* disjoint: at most one per slot */
  return true;
}

static bool pool_visit(IrOp *o, void *ud) {
  PoolScan *s = ud;
  if (o->kind == OP_CUTLASS_PIPELINE_INIT || o->kind == OP_CUTLASS_SEQ_BAR_INIT)
    s->ok = check_single_init(s, o) && check_claim(s, o) && s->ok;
  return true;
}

IrResult cutlass_verify_kernel_barriers(IrOp *k) {
  PoolScan s;
  memset(&s, 0, sizeof s);
  s.ok = true;
  ir_walk_pre(k, pool_visit, &s);
  ptrmap_free(&s.inits);
  return s.ok ? IR_OK : IR_FAIL;
}

/* An init's claim [base, base + n) lies in the pool (the kernel rule checks overlaps). */
bool cut_check_claim(IrOp *op, int64_t base, int64_t n) {
  if (base >= 0 && n >= 0 && base <= CUT_POOL_SLOTS && n <= CUT_POOL_SLOTS - base) return true;
  ir_op_error(op, "claims barrier slots [%lld, %lld), past the %d slots of the CTA pool",
              (long long)base, (long long)(base + n), CUT_POOL_SLOTS);
  return false;
}

/* }====================================================================== */

/* {======================================================================
** cutlass.async.exec and switch_by_executor
** ======================================================================= */

/* A mask nested in the executor set around op (from kernel_exec_of). */
static bool check_within(IrOp *op, const char *what, uint64_t m, uint64_t outer, IrOp *scope) {
  if (!scope || !outer || !(m & ~outer)) return true;
  if (scope->kind == OP_TILE_KERNEL) {
    ir_op_error(op, "%s 0x%llx name warps beyond the %d warps of the kernel", what,
                (unsigned long long)m, kernel_popcount(outer));
  } else {
    IrDiag *d = ir_op_error(op, "%s 0x%llx are not within the enclosing executors 0x%llx", what,
                            (unsigned long long)m, (unsigned long long)outer);
    ir_op_note(d, scope, "enclosing executors set here");
  }
  return false;
}

IrResult cutlass_verify_async_exec(IrOp *op) {
  uint64_t m = (uint64_t)ir_attrs_CUTLASS_ASYNC_EXEC(op).executors;
  if (!kernel_mask_contiguous(m)) {
    ir_op_error(op, "executors 0x%llx must be a non-empty contiguous set of warps",
                (unsigned long long)m);
    return IR_FAIL;
  }
  KernelExec x = kernel_exec_of(op);
  if (!x.scope) {
    ir_op_error(op, "must be nested in a tile.kernel");
    return IR_FAIL;
  }
  return check_within(op, "executors", m, x.mask, x.scope) ? IR_OK : IR_FAIL;
}

IrValue *cut_switch_case_operand(const IrValue *arg) {
  IrOp *sw = arg->block ? ir_block_parent_op(arg->block) : NULL;
  if (!sw || sw->kind != OP_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR) return NULL;
  IrAttrList segs = ir_attrs_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR(sw).operand_segments;
  int64_t first = arg->index;
  uint32_t i = 0;
  for (IrBlock *b = sw->regions[0].first; b && b != arg->block; b = b->next, i++) {
    if (i >= segs.n) return NULL;
    first += ir_attr_list_int(segs, i);
  }
  return first >= 0 && first < (int64_t)sw->noperands ? sw->operands[first].value : NULL;
}

/* Case block i's arguments must match operand group i (count and types). */
static bool check_case_args(IrOp *op, uint32_t i, IrBlock *b, uint32_t first, int64_t count) {
  if ((int64_t)b->nargs != count) {
    ir_op_error(op, "case #%u takes %u argument%s, but its operand group has %lld value%s", i,
                b->nargs, b->nargs == 1 ? "" : "s", (long long)count, count == 1 ? "" : "s");
    return false;
  }
  for (uint32_t j = 0; j < b->nargs; j++) {
    const IrType *want = op->operands[first + j].value->type;
    if (b->args[j]->type == want) continue;
    ir_op_error(op, "case #%u argument #%u has type %s, but operand #%u is %s", i, j,
                ir_op_type_str(op, b->args[j]->type), first + j, ir_op_type_str(op, want));
    return false;
  }
  return true;
}

/* Masks: one per case, contiguous, pairwise disjoint, together exactly the enclosing set. */
static bool check_case_masks(IrOp *op, IrAttrList masks) {
  uint64_t all = 0;
  for (uint32_t i = 0; i < masks.n; i++) {
    uint64_t m = (uint64_t)ir_attr_list_int(masks, i);
    if (!kernel_mask_contiguous(m)) {
      ir_op_error(op, "case #%u mask 0x%llx is not a non-empty contiguous set of warps", i,
                  (unsigned long long)m);
      return false;
    }
    for (uint32_t j = 0; j < i; j++) {
      uint64_t o = (uint64_t)ir_attr_list_int(masks, j);
      if (m & o) {
        ir_op_error(op, "case #%u mask 0x%llx overlaps case #%u mask 0x%llx", i,
                    (unsigned long long)m, j, (unsigned long long)o);
        return false;
      }
    }
    all |= m;
  }
  KernelExec x = kernel_exec_of(op);
  if (!check_within(op, "case masks", all, x.mask, x.scope)) return false;
  if (x.scope && x.mask && all != x.mask) {
    IrDiag *d = ir_op_error(op, "case masks cover 0x%llx, not the enclosing executors 0x%llx",
                            (unsigned long long)all, (unsigned long long)x.mask);
    if (x.scope->kind != OP_TILE_KERNEL) ir_op_note(d, x.scope, "enclosing executors set here");
    return false;
  }
  return true;
}

IrResult cutlass_verify_switch_by_executor(IrOp *op) {
  IrAttrs_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR a = ir_attrs_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR(op);
  uint32_t nb = 0;
  for (IrBlock *b = op->regions[0].first; b; b = b->next)
    nb++;
  if (nb == 0 || a.masks.n != nb || a.operand_segments.n != nb) {
    ir_op_error(op, "expects one mask and one operand segment per case block (%u), got %u and %u",
                nb, a.masks.n, a.operand_segments.n);
    return IR_FAIL;
  }
  if (!check_case_masks(op, a.masks)) return IR_FAIL;
  int64_t sum = 0, segs[CUT_MAX_CASES];
  for (uint32_t i = 0; i < nb; i++) {
    segs[i] = ir_attr_list_int(a.operand_segments, i);
    if (segs[i] < 0 || segs[i] > (int64_t)op->noperands) {
      ir_op_error(op, "operand segment #%u has a bad size %lld", i, (long long)segs[i]);
      return IR_FAIL;
    }
    sum += segs[i];
  }
  if (sum != (int64_t)op->noperands) {
    ir_op_error(op, "operand_segments sum to %lld, but there are %u operands", (long long)sum,
                op->noperands);
    return IR_FAIL;
  }
  uint32_t first = 0, i = 0;
  for (IrBlock *b = op->regions[0].first; b; b = b->next, i++) {
    if (!check_case_args(op, i, b, first, segs[i])) return IR_FAIL;
    first += (uint32_t)segs[i];
  }
  return IR_OK;
}

/* }====================================================================== */

/* {======================================================================
** Named barriers (cutlass.bar, cutlass.named_barrier.arrive), generic barriers
** ======================================================================= */

/* Warp-cooperative scope: inside a cutlass.async.exec, switch_by_executor case or
** tile.agent (their executors are whole warps), not under a sub-warp region. */
static bool check_warp_scope(IrOp *op, KernelExec *x) {
  *x = kernel_exec_of(op);
  if (!x->scope || x->scope->kind == OP_TILE_KERNEL) {
    ir_op_error(op, "must be inside warp-cooperative scope (a cutlass.async.exec, "
                    "switch_by_executor case or tile.agent)");
    return false;
  }
  if (x->narrow) {
    IrDiag *d = ir_op_error(op, "must be inside warp-cooperative scope, not under '%s'",
                            ir_op_name(x->narrow));
    ir_op_note(d, x->narrow, "execution narrows below a warp here");
    return false;
  }
  return true;
}

IrResult cutlass_verify_named_barrier(IrOp *op) {
  int64_t count = ir_attrs_CUTLASS_BAR(op).count;
  if (count % SM90_WARP_SIZE != 0) {
    ir_op_error(op, "expected arrive count to be a positive multiple of 32 (whole warps), got %lld",
                (long long)count);
    return IR_FAIL;
  }
  KernelExec x;
  if (!check_warp_scope(op, &x)) return IR_FAIL;
  KernelSpec ks = kernel_spec_of(op);
  int64_t here = SM90_WARP_SIZE * (int64_t)kernel_popcount(x.mask), block = ks.ok ? ks.threads : 0;
  bool ok = ir_op_require(op, !x.mask || count >= here,
                          "arrive count %lld is smaller than the %lld threads of the enclosing executors 0x%llx",
                          (long long)count, (long long)here, (unsigned long long)x.mask) &&
            ir_op_require(op, !block || count <= block, "arrive count %lld exceeds the %lld threads of the block",
                          (long long)count, (long long)block);
  return ok ? IR_OK : IR_FAIL;
}

IrResult cutlass_verify_generic_barrier(IrOp *op) {
  const IrType *t = op->operands[0].value->type;
  if (!ir_type_is_int_width(t->elem, 32)) {
    cut_type_error(op, "the counter array", "ptr<i32, global>", t);
    return IR_FAIL;
  }
  return IR_OK;
}

/* }====================================================================== */
