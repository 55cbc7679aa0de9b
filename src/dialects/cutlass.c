/*
** cutlass.c -- the cutlass dialect: helpers shared by its verifiers
** (attributes, warp masks, executor sets, the target, the per-CTA pool of
** barrier slots) and the verifiers of the executor and barrier families:
** cutlass.async.exec, switch_by_executor, cutlass.bar, named and generic
** barriers. The model is written down in docs/cutlass.md.
**
** The helpers are declared in cutlass.h for the other verifier files and the
** lowering passes.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cutlass.h"

#define POOL_SLOTS 32     /* barrier slots per CTA shared by pipeline.init and seq_bar.init */
#define NAMED_BARRIERS 16 /* bar.sync / bar.arrive ids */

/* {======================================================================
** Attributes: every reader checks the kind before it reads
** ======================================================================= */

/* An integer attribute: absent gives dflt unless required; a present one of
** another kind is an error. */
bool cut_attr_int(IrOp *op, const char *name, bool required, int64_t dflt, int64_t *out) {
  const IrAttr *a = ir_op_attr(op, name);
  if (a && a->kind == IR_ATTR_INT) {
    *out = a->u.i;
    return true;
  }
  if (!a && !required) {
    *out = dflt;
    return true;
  }
  ir_op_error(op, "expected integer attribute '%s'", name);
  return false;
}

/* A boolean attribute, dflt when absent. */
bool cut_attr_bool(IrOp *op, const char *name, bool dflt, bool *out) {
  const IrAttr *a = ir_op_attr(op, name);
  if (!a) {
    *out = dflt;
    return true;
  }
  if (a->kind == IR_ATTR_BOOL) {
    *out = a->u.b;
    return true;
  }
  ir_op_error(op, "expected boolean attribute '%s'", name);
  return false;
}

/* Index of a string attribute in a NULL-terminated list of names. Absent: dflt
** (an error when dflt < 0). Returns -1 after reporting an error. */
int cut_attr_enum(IrOp *op, const char *name, const char *const *names, int dflt) {
  const IrAttr *a = ir_op_attr(op, name);
  if (!a && dflt >= 0) return dflt;
  if (a && a->kind == IR_ATTR_STR)
    for (int i = 0; names[i]; i++)
      if (strcmp(names[i], a->u.str.s) == 0) return i;
  char all[160] = "";
  for (int i = 0; names[i]; i++) {
    if (strlen(all) + strlen(names[i]) + 3 >= sizeof all) break;
    strcat(all, i ? ", " : "");
    strcat(all, names[i]);
  }
  if (a && a->kind == IR_ATTR_STR)
    ir_op_error(op, "unknown %s \"%s\" (one of: %s)", name, a->u.str.s, all);
  else
    ir_op_error(op, "expected string attribute '%s' (one of: %s)", name, all);
  return -1;
}

/* An array of at most max integers. */
bool cut_attr_int_list(IrOp *op, const char *name, int64_t *out, uint32_t max, uint32_t *n) {
  const IrAttr *a = ir_op_attr(op, name);
  bool ok = a && a->kind == IR_ATTR_ARRAY && a->u.arr.n <= max;
  for (uint32_t i = 0; ok && i < a->u.arr.n; i++) {
    ok = a->u.arr.elems[i]->kind == IR_ATTR_INT;
    if (ok) out[i] = a->u.arr.elems[i]->u.i;
  }
  if (!ok) {
    ir_op_error(op, "expected '%s' to be an array of at most %u integers", name, max);
    return false;
  }
  *n = a->u.arr.n;
  return true;
}

/* The keyword parameter of a dialect type (its kind or flavor), NULL if none. */
static const char *cut_type_kind(const IrType *t) { return ir_type_param_str(t, 0); }

/* Index of a type's keyword in names, -1 when missing or unknown. */
int cut_kind_index(const IrType *t, const char *const *names) {
  const char *k = cut_type_kind(t);
  for (int i = 0; k && names[i]; i++)
    if (strcmp(names[i], k) == 0) return i;
  return -1;
}

/* Report a type that should have been another: "<what> must be <want>, got <t>". */
void cut_type_error(IrOp *op, const char *what, const char *want, const IrType *t) {
  char *s = ir_type_to_string(t);
  ir_op_error(op, "%s must be %s, got %s", what, want, s);
  free(s);
}

/* }====================================================================== */

/* {======================================================================
** Warp masks, the kernel, executor sets, the target
** ======================================================================= */

int cut_popcount(uint64_t m) {
  int n = 0;
  for (; m; m &= m - 1)
    n++;
  return n;
}

/* A non-empty run of consecutive set bits. */
bool cut_mask_contiguous(uint64_t m) {
  if (!m) return false;
  while (!(m & 1))
    m >>= 1;
  return (m & (m + 1)) == 0;
}

/* Threads of the enclosing kernel's block, 0 outside a kernel. */
int64_t cut_kernel_threads(const IrOp *op) {
  if (op->kind != OP_TILE_KERNEL && !ir_op_ancestor(op, OP_TILE_KERNEL)) return 0;
  int64_t b[3];
  dia_kernel_dims((IrOp *)op, "block", b, 1);
  if (b[0] <= 0 || b[1] <= 0 || b[2] <= 0 || b[0] > 1024 || b[1] > 1024 || b[2] > 1024) return 0;
  return b[0] * b[1] * b[2];
}

/* All warps of the enclosing kernel as a mask, 0 outside a kernel. */
uint64_t cut_kernel_warp_mask(const IrOp *op) {
  int64_t t = cut_kernel_threads(op), w = (t + 31) / 32;
  if (w <= 0) return 0;
  return w >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << w) - 1;
}

/* CTAs of the enclosing kernel's cluster (each extent >= 1). */
void cut_kernel_cluster(const IrOp *op, int64_t out[3]) {
  dia_kernel_dims((IrOp *)op, "cluster", out, 1);
  for (int i = 0; i < 3; i++)
    if (out[i] < 1 || out[i] > 1024) out[i] = 1; /* malformed: tile.kernel reports it */
}

/* Elements per unit of a block-striped move of fragment type frag: the
** innermost row when one ld/st moves it (4, 8 or 16 bytes), else 1. */
int64_t cut_striped_unit(const IrType *frag) {
  int64_t v = frag->rank >= 2 ? frag->shape[frag->rank - 1] : 1, eb = dia_type_bytes(frag->elem);
  int64_t bytes = v * eb;
  if (v < 2 || (bytes != 4 && bytes != 8 && bytes != 16) || (eb >= 4 && v > 4)) return 1;
  return v;
}

/* Index of block b among the blocks of its region. */
static uint32_t block_index(const IrBlock *b) {
  uint32_t i = 0;
  for (const IrBlock *p = b->parent ? b->parent->first : NULL; p && p != b; p = p->next)
    i++;
  return i;
}

/* Entry i of an integer-array attribute, false when it is not there. */
static bool list_at(const IrOp *op, const char *name, uint32_t i, int64_t *out) {
  const IrAttr *a = ir_op_attr(op, name);
  if (!a || a->kind != IR_ATTR_ARRAY || i >= a->u.arr.n || a->u.arr.elems[i]->kind != IR_ATTR_INT)
    return false;
  *out = a->u.arr.elems[i]->u.i;
  return true;
}

/* The warps of a tile.agent (issue 4's warp-specialized role, looked up by name):
** `num_warps` from `warp_id`, else from the sum of the agents before it. 0 if malformed. */
static uint64_t agent_mask(const IrOp *agent) {
  int64_t n = ir_op_attr_int_or(agent, "num_warps", 0),
          first = ir_op_attr_int_or(agent, "warp_id", -1);
  if (first < 0) {
    first = 0;
    for (const IrOp *o = agent->parent ? agent->parent->first : NULL; o && o != agent; o = o->next)
      if (o->kind == agent->kind) first += ir_op_attr_int_or(o, "num_warps", 0);
  }
  if (n < 1 || first < 0 || first + n > 64) return 0;
  return (n == 64 ? ~(uint64_t)0 : ((uint64_t)1 << n) - 1) << first;
}

/* The executor set that runs op: the mask of the innermost switch_by_executor
** case, cutlass.async.exec or tile.agent around op, else all warps of the
** kernel. *scope gets the op that sets it (NULL outside a kernel). 0 = unknown. */
uint64_t cut_executors(const IrOp *op, IrOp **scope) {
  *scope = NULL;
  for (const IrBlock *b = op->parent; b;
       b = ir_block_parent_op(b) ? ir_block_parent_op(b)->parent : NULL) {
    IrOp *p = ir_block_parent_op(b);
    if (!p) break;
    int64_t m;
    if (strcmp(ir_op_name(p), "tile.agent") == 0) {
      *scope = p;
      return agent_mask(p);
    }
    if (p->kind == OP_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR) {
      *scope = p;
      return list_at(p, "masks", block_index(b), &m) ? (uint64_t)m : 0;
    }
    if (p->kind == OP_CUTLASS_ASYNC_EXEC) {
      const IrAttr *a = ir_op_attr(p, "executors");
      *scope = p;
      return a && a->kind == IR_ATTR_INT ? (uint64_t)a->u.i : 0;
    }
    if (p->kind == OP_TILE_KERNEL) {
      *scope = p;
      return cut_kernel_warp_mask(p);
    }
  }
  return 0;
}

/* The SM number of the target: the module attribute `target` ("sm_90a", "sm_100a"
** or an integer) when present, else the context's. */
int cut_target_sm(const IrOp *op) {
  const IrOp *m = op->kind == OP_MODULE ? op : ir_op_ancestor(op, OP_MODULE);
  const IrAttr *a = m ? ir_op_attr(m, "target") : NULL;
  if (a && a->kind == IR_ATTR_INT && a->u.i > 0 && a->u.i < 10000) return (int)a->u.i;
  if (a && a->kind == IR_ATTR_STR && strncmp(a->u.str.s, "sm_", 3) == 0) {
    int sm = atoi(a->u.str.s + 3);
    if (sm > 0) return sm;
  }
  return ir_context_target_sm(ir_op_context(op));
}

/* }====================================================================== */

/* {======================================================================
** The per-CTA pool of barrier slots (pipeline.init and seq_bar.init)
** ======================================================================= */

/* The slots [*base, *base + *n) an init op claims; false when its attributes
** or types are malformed (its own verifier reports that). */
static bool slot_range(const IrOp *op, int64_t *base, int64_t *n) {
  const IrAttr *b = ir_op_attr(op, "barrier_id_base");
  if (!b || b->kind != IR_ATTR_INT) return false;
  *base = b->u.i;
  if (op->kind == OP_CUTLASS_PIPELINE_INIT) {
    const IrAttr *s = ir_op_attr(op, "numStages");
    if (!s || s->kind != IR_ATTR_INT || s->u.i <= 0 || s->u.i > POOL_SLOTS) return false;
    *n = 2 * s->u.i; /* a full and an empty barrier per stage */
    return true;
  }
  if (op->kind == OP_CUTLASS_SEQ_BAR_INIT && op->noperands == 1 && op->operands[0].value) {
    *n = ir_type_param_int(op->operands[0].value->type, 0, 0);
    return *n > 0 && *n <= POOL_SLOTS;
  }
  return false;
}

typedef struct PoolScan {
  IrOp *self;
  int64_t base, n;
  IrOp *clash;
  int64_t cbase, cn;
} PoolScan;

/* Pre-order visitor: stop at the op itself, remember the first earlier claimant it overlaps. */
static bool pool_visit(IrOp *o, void *ud) {
  PoolScan *s = ud;
  if (o == s->self) return false;
  int64_t b, n;
  if ((o->kind == OP_CUTLASS_PIPELINE_INIT || o->kind == OP_CUTLASS_SEQ_BAR_INIT) &&
      slot_range(o, &b, &n) && b >= 0 && b + n <= POOL_SLOTS && b < s->base + s->n &&
      s->base < b + n) {
    s->clash = o;
    s->cbase = b;
    s->cn = n;
    return false;
  }
  return true;
}

/* Check op's claim [base, base + n) on the pool: in range, and not overlapping a
** claim made earlier in the kernel (the later claimant reports, naming both). */
bool cut_claim_slots(IrOp *op, int64_t base, int64_t n) {
  if (base < 0 || base >= POOL_SLOTS) {
    ir_op_error(op, "expected barrier_id_base in [0, %d), got %lld", POOL_SLOTS, (long long)base);
    return false;
  }
  if (base + n > POOL_SLOTS) {
    ir_op_error(op, "claims barrier slots [%lld, %lld), past the %d slots of the CTA pool",
                (long long)base, (long long)(base + n), POOL_SLOTS);
    return false;
  }
  IrOp *root = ir_op_ancestor(op, OP_TILE_KERNEL);
  if (!root) root = ir_op_ancestor(op, OP_MODULE);
  if (!root) return true;
  PoolScan s = {op, base, n, NULL, 0, 0};
  ir_walk_pre(root, pool_visit, &s);
  if (!s.clash) return true;
  IrDiag *d =
      ir_op_error(op, "claims barrier slots [%lld, %lld), overlapping slots [%lld, %lld) of '%s'",
                  (long long)base, (long long)(base + n), (long long)s.cbase,
                  (long long)(s.cbase + s.cn), ir_op_name(s.clash));
  ir_op_note(d, s.clash, "slots [%lld, %lld) claimed here", (long long)s.cbase,
             (long long)(s.cbase + s.cn));
  return false;
}

/* }====================================================================== */

/* {======================================================================
** cutlass.async.exec and switch_by_executor
** ======================================================================= */

/* A mask nested in the executor set around op (scope from cut_executors). */
static bool check_within(IrOp *op, const char *what, uint64_t m, uint64_t outer, IrOp *scope) {
  if (!scope || !outer || !(m & ~outer)) return true;
  if (scope->kind == OP_TILE_KERNEL) {
    ir_op_error(op, "%s 0x%llx name warps beyond the %d warps of the kernel", what,
                (unsigned long long)m, cut_popcount(outer));
  } else {
    IrDiag *d = ir_op_error(op, "%s 0x%llx are not within the enclosing executors 0x%llx", what,
                            (unsigned long long)m, (unsigned long long)outer);
    ir_op_note(d, scope, "enclosing executors set here");
  }
  return false;
}

IrResult cutlass_verify_async_exec(IrOp *op) {
  int64_t m;
  if (!cut_attr_int(op, "executors", true, 0, &m)) return IR_FAIL;
  const IrAttr *agent = ir_op_attr(op, "agent");
  if (agent && agent->kind != IR_ATTR_STR) {
    ir_op_error(op, "expected string attribute 'agent'");
    return IR_FAIL;
  }
  if (!cut_mask_contiguous((uint64_t)m)) {
    ir_op_error(op, "executors 0x%llx must be a non-empty contiguous set of warps",
                (unsigned long long)m);
    return IR_FAIL;
  }
  IrOp *scope;
  uint64_t outer = cut_executors(op, &scope);
  if (!scope) {
    ir_op_error(op, "must be nested in a tile.kernel");
    return IR_FAIL;
  }
  return check_within(op, "executors", (uint64_t)m, outer, scope) ? IR_OK : IR_FAIL;
}

#define MAX_CASES 32

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
    char *a = ir_type_to_string(b->args[j]->type), *w = ir_type_to_string(want);
    ir_op_error(op, "case #%u argument #%u has type %s, but operand #%u is %s", i, j, a, first + j,
                w);
    free(a);
    free(w);
    return false;
  }
  return true;
}

/* Masks: one per case, contiguous, pairwise disjoint, together exactly the enclosing set. */
static bool check_case_masks(IrOp *op, const int64_t *masks, uint32_t n) {
  uint64_t all = 0;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t m = (uint64_t)masks[i];
    if (!cut_mask_contiguous(m)) {
      ir_op_error(op, "case #%u mask 0x%llx is not a non-empty contiguous set of warps", i,
                  (unsigned long long)m);
      return false;
    }
    for (uint32_t j = 0; j < i; j++)
      if (m & (uint64_t)masks[j]) {
        ir_op_error(op, "case #%u mask 0x%llx overlaps case #%u mask 0x%llx", i,
                    (unsigned long long)m, j, (unsigned long long)masks[j]);
        return false;
      }
    all |= m;
  }
  IrOp *scope;
  uint64_t outer = cut_executors(op, &scope);
  if (!check_within(op, "case masks", all, outer, scope)) return false;
  if (scope && outer && all != outer) {
    IrDiag *d = ir_op_error(op, "case masks cover 0x%llx, not the enclosing executors 0x%llx",
                            (unsigned long long)all, (unsigned long long)outer);
    if (scope->kind != OP_TILE_KERNEL) ir_op_note(d, scope, "enclosing executors set here");
    return false;
  }
  return true;
}

IrResult cutlass_verify_switch_by_executor(IrOp *op) {
  int64_t masks[MAX_CASES], segs[MAX_CASES];
  uint32_t nm, ns, nb = 0;
  if (!cut_attr_int_list(op, "masks", masks, MAX_CASES, &nm) ||
      !cut_attr_int_list(op, "operand_segments", segs, MAX_CASES, &ns))
    return IR_FAIL;
  for (IrBlock *b = op->regions[0].first; b; b = b->next)
    nb++;
  if (nb == 0 || nm != nb || ns != nb) {
    ir_op_error(op, "expects one mask and one operand segment per case block (%u), got %u and %u",
                nb, nm, ns);
    return IR_FAIL;
  }
  if (!check_case_masks(op, masks, nm)) return IR_FAIL;
  int64_t sum = 0;
  for (uint32_t i = 0; i < ns; i++) {
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

/* Ops whose body runs on fewer lanes than a whole warp. They do not exist yet in
** the authoring dialects; the names are looked up so that adding one is a line here. */
static const char *const sub_warp_ops[] = {"tile.elect_one", "nvvm.elect_sync_region", NULL};

/* The nearest enclosing op that narrows execution below a warp, or NULL. */
static IrOp *sub_warp_ancestor(const IrOp *op) {
  for (IrOp *p = ir_op_parent_op(op); p; p = ir_op_parent_op(p))
    for (int i = 0; sub_warp_ops[i]; i++)
      if (strcmp(ir_op_name(p), sub_warp_ops[i]) == 0) return p;
  return NULL;
}

/* Warp-cooperative scope: inside a cutlass.async.exec, switch_by_executor case or
** tile.agent (their executors are whole warps), not under a sub-warp region. */
static bool check_warp_scope(IrOp *op, uint64_t *exec) {
  IrOp *scope;
  *exec = cut_executors(op, &scope);
  if (!scope || scope->kind == OP_TILE_KERNEL) {
    ir_op_error(op, "must be inside warp-cooperative scope (a cutlass.async.exec, "
                    "switch_by_executor case or tile.agent)");
    return false;
  }
  IrOp *narrow = sub_warp_ancestor(op);
  if (narrow) {
    IrDiag *d = ir_op_error(op, "must be inside warp-cooperative scope, not under '%s'",
                            ir_op_name(narrow));
    ir_op_note(d, narrow, "execution narrows below a warp here");
    return false;
  }
  return true;
}

IrResult cutlass_verify_named_barrier(IrOp *op) {
  int64_t id, count;
  if (!cut_attr_int(op, "id", true, 0, &id) || !cut_attr_int(op, "count", true, 0, &count))
    return IR_FAIL;
  if (id < 0 || id >= NAMED_BARRIERS) {
    ir_op_error(op, "expected barrier id in [0, %d), got %lld", NAMED_BARRIERS, (long long)id);
    return IR_FAIL;
  }
  if (count <= 0 || count % 32 != 0) {
    ir_op_error(op, "expected arrive count to be a positive multiple of 32 (whole warps), got %lld",
                (long long)count);
    return IR_FAIL;
  }
  uint64_t exec;
  if (!check_warp_scope(op, &exec)) return IR_FAIL;
  int64_t here = 32 * (int64_t)cut_popcount(exec), block = cut_kernel_threads(op);
  if (exec && count < here) {
    ir_op_error(
        op, "arrive count %lld is smaller than the %lld threads of the enclosing executors 0x%llx",
        (long long)count, (long long)here, (unsigned long long)exec);
    return IR_FAIL;
  }
  if (block && count > block) {
    ir_op_error(op, "arrive count %lld exceeds the %lld threads of the block", (long long)count,
                (long long)block);
    return IR_FAIL;
  }
  return IR_OK;
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
