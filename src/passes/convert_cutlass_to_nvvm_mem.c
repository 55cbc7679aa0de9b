/*
** convert_cutlass_to_nvvm_mem.c -- the memory-side patterns of
** `convert-cutlass-to-nvvm`: block_striped moves and
** reductions over register fragments, named barriers, generic (global-memory)
** barriers and the MODS probes. Driver and shared helpers are in
** convert_cutlass_to_nvvm.c; docs/lowering.md has the table.
**
** Register fragments. A memref<..., rmem> is opaque at the authoring level:
** only block_striped ops (and the StreamK fixup, lowered into them before this
** pass) touch it, and it is made by a zero-operand
** builtin.unrealized_conversion_cast (the stand-in until the tile dialect has
** register allocation). Until then each fragment is backed by shared memory:
** one allocation of elements x block threads, unit u (V elements) of thread t
** at ((u * threads + t) * V), so that a warp's accesses are contiguous.
**
** The striped mapping. A fragment of shape [..., V] whose innermost row V
** fits one vector access (4, 8 or 16 bytes) moves in units of V elements,
** otherwise in single elements; unit u of thread t (t counted from the first
** thread of the op's executors, t < `threads`) is global unit u * threads + t.
** Rank-1 fragments thus give thread t the elements t, t + threads, ....
*/
#include <stdlib.h>
#include <string.h>

#include "../dialects/cutlass.h"
#include "convert_cutlass_to_nvvm.h"

#define THROTTLE_NS(profile) (128 << (profile)) /* profile 1: nanosleep 256 */
#define MAX_UNROLL 8                            /* units moved without a loop */
#define SPIN_BACKOFF_NS 32                      /* generic-barrier retries */

bool cpn_is_mem_op(IrOpKind k) {
  return (k >= OP_CUTLASS_BLOCK_STRIPED_LOAD && k <= OP_CUTLASS_BLOCK_STRIPED_REDUCE) ||
         k == OP_CUTLASS_BAR || k == OP_CUTLASS_NAMED_BARRIER_ARRIVE ||
         (k >= OP_CUTLASS_GENERIC_BARRIER_WAIT_EQ && k <= OP_CUTLASS_GENERIC_BARRIER_ARRIVE_INC) ||
         (k >= OP_CUTLASS_MODS_START && k <= OP_CUTLASS_MODS_THROTTLE);
}

static bool is_striped(IrOpKind k) {
  return k >= OP_CUTLASS_BLOCK_STRIPED_LOAD && k <= OP_CUTLASS_BLOCK_STRIPED_REDUCE;
}

/* {======================================================================
** Register fragments and the striped layout
** ======================================================================= */

static bool is_frag_root(const IrOp *d) {
  return d && d->kind == OP_UNREALIZED_CAST && d->noperands == 0 && d->nresults == 1 &&
         d->results[0].type->kind == IR_TY_MEMREF && d->results[0].type->space == IR_MS_RMEM;
}

/* The element type the reduce needs and whether this lowering has it. */
static bool check_reduce_type(IrOp *op, const IrType *e) {
  bool max = ir_attrs_CUTLASS_BLOCK_STRIPED_LOAD(op).kind == STRIPED_MAX;
  bool ok = e->kind == IR_TY_FLOAT ? (e->width >= 32 || !max) : (e->width == 32 || e->width == 64);
  if (ok) return true;
  char *t = ir_type_to_string(e);
  ir_op_error(op, "cannot reduce (%s) %s elements: global atomics take 32- and 64-bit integers "
                  "and floats, and f16/bf16 additions",
              max ? "max" : "add", t);
  ir_free(t);
  return false;
}

static bool check_striped(Cpn *c, IrOp *op) {
  IrOp *root = cpn_source(op->operands[1].value)->def;
  if (!is_frag_root(root)) {
    ir_op_error(op, "needs its register fragment (operand #1) straight from a zero-operand "
                    "builtin.unrealized_conversion_cast (the register-fragment stand-in)");
    return false;
  }
  const KernelExec *x = cpn_exec(c, op);
  int64_t threads = ir_attrs_CUTLASS_BLOCK_STRIPED_LOAD(op).threads, have = 32 * (int64_t)kernel_popcount(x->mask);
  if (x->narrow) {
    ir_op_error(op, "must run on every thread of its executors, not under an elect");
    return false;
  }
  if (threads > have) {
    ir_op_error(op, "stripes over %lld threads, but its executors 0x%llx have %lld",
                (long long)threads, (unsigned long long)x->mask, (long long)have);
    return false;
  }
  const IrType *g = op->operands[0].value->type, *f = root->results[0].type;
  int64_t need = threads * ir_type_num_elements(f);
  if (g->kind == IR_TY_MEMREF && ir_type_num_elements(g) < need) {
    ir_op_error(op, "stripes %lld elements over a global memref of %lld", (long long)need,
                (long long)ir_type_num_elements(g));
    return false;
  }
  if (op->kind == OP_CUTLASS_BLOCK_STRIPED_REDUCE && !check_reduce_type(op, f->elem)) return false;
  if (!ptrmap_get(&c->frags, root)) {
    CpnFrag *fr = arena_alloc(ir_arena(c->rw.ctx), sizeof *fr);
    fr->root = root;
    fr->elements = ir_type_num_elements(f);
    ptrmap_set(&c->frags, root, fr);
  }
  return true;
}

/* The fragment's shared backing, allocated at the kernel's entry on first use. */
static IrValue *frag_base(Cpn *c, CpnFrag *f) {
  if (f->base) return f->base;
  IrBuilder saved = c->rw.b;
  ir_builder_at_start(&c->rw.b, c->rw.entry);
  c->rw.b.loc = f->root->loc;
  const IrType *t = ir_type_ptr(c->rw.ctx, f->root->results[0].type->elem, IR_MS_SHARED);
  f->base = rw_op1(&c->rw, OP_TILE_ALLOC_SHARED, 0, NULL, t);
  rw_set_int(&c->rw, f->base->def, "count", f->elements * c->threads);
  rw_set_int(&c->rw, f->base->def, "align", 16);
  c->rw.b = saved;
  return f->base;
}

/* Every fragment root is dead once its block_striped ops are lowered. */
static bool erase_root(const void *key, void *value, void *ud) {
  (void)key;
  (void)ud;
  CpnFrag *f = value;
  if (ir_op_results_unused(f->root)) ir_op_erase(f->root);
  return true;
}

void cpn_erase_fragments(Cpn *c) {
  for (size_t i = 0; i < c->frags.cap; i++)
    if (c->frags.slots && c->frags.slots[i].key)
      erase_root(c->frags.slots[i].key, c->frags.slots[i].value, NULL);
}

/* What one striped op moves per unit. */
typedef struct Stripe {
  IrOp *op;
  const IrType *elem, *unit; /* the element and the unit (elem or vector<V x elem>) */
  int64_t v, units, threads;
  IrValue *gbase, *fbase, *t, *tid; /* global base, fragment base, thread in stripe, in block */
} Stripe;

/* Global and fragment pointers of unit u (an i32). */
static IrValue *gptr(Cpn *c, const Stripe *s, IrValue *u) {
  IrValue *k = rw_bin(&c->rw, OP_ARITH_ADDI, rw_bin(&c->rw, OP_ARITH_MULI, u, rw_i32(&c->rw, s->threads)), s->t);
  if (s->v > 1) k = rw_bin(&c->rw, OP_ARITH_MULI, k, rw_i32(&c->rw, s->v));
  return cpn_ptr_add(c, s->gbase, k);
}

static IrValue *fptr(Cpn *c, const Stripe *s, IrValue *u) {
  IrValue *k = rw_bin(&c->rw, OP_ARITH_ADDI, rw_bin(&c->rw, OP_ARITH_MULI, u, rw_i32(&c->rw, c->threads)), s->tid);
  if (s->v > 1) k = rw_bin(&c->rw, OP_ARITH_MULI, k, rw_i32(&c->rw, s->v));
  return cpn_ptr_add(c, s->fbase, k);
}

static IrValue *load(Cpn *c, IrValue *p, const IrType *t) { return rw_op1(&c->rw, OP_TILE_LOAD, 1, &p, t); }

static void store(Cpn *c, IrValue *v, IrValue *p) {
  IrValue *opds[2] = {v, p};
  rw_op(&c->rw, OP_TILE_STORE, 2, opds, NULL);
}

static IrValue *extract(Cpn *c, IrValue *vec, int64_t i, const IrType *e) {
  IrValue *x = rw_op1(&c->rw, OP_TILE_EXTRACT, 1, &vec, e);
  rw_set_int(&c->rw, x->def, "index", i);
  return x;
}

/* a + b, element-wise on units: integer or float addition by the element type. */
static IrValue *add_units(Cpn *c, const Stripe *s, IrValue *a, IrValue *b) {
  IrOpKind k = s->elem->kind == IR_TY_FLOAT ? OP_ARITH_ADDF : OP_ARITH_ADDI;
  if (s->v == 1) return rw_bin(&c->rw, k, a, b);
  IrValue *e[16];
  for (int64_t i = 0; i < s->v; i++)
    e[i] = rw_bin(&c->rw, k, extract(c, a, i, s->elem), extract(c, b, i, s->elem));
  return rw_op1(&c->rw, OP_TILE_FROM_ELEMENTS, (uint32_t)s->v, e, s->unit);
}

/* }====================================================================== */

/* {======================================================================
** Reductions: global atomics per element (f16x2 / bf16x2 packed in pairs)
** ======================================================================= */

/* red.global.add.noftz.{f16,bf16}[x2] through inline PTX (the atom ops of the
** nvvm dialect take 32 and 64 bits). */
static void red_half(Cpn *c, IrValue *p, IrValue *val, const IrType *e, bool pair) {
  IrValue *opds[2] = {cpn_ptr_to_int(c, p), val};
  IrOp *r = rw_op(&c->rw, OP_NVVM_INLINE_PTX, 2, opds, NULL);
  const char *ty = e->fkind == IR_BF16 ? "bf16" : "f16";
  char buf[64];
  snprintf(buf, sizeof buf, "red.global.add.noftz.%s%s [$0], $1;", ty, pair ? "x2" : "");
  rw_set_str(&c->rw, r, "ptx", buf);
}

/* Two 16-bit floats as one b32 (element 0 in the low half, as in memory). */
static IrValue *pack_pair(Cpn *c, IrValue *lo, IrValue *hi) {
  IrValue *a = rw_cast(&c->rw, OP_ARITH_EXTUI, rw_cast(&c->rw, OP_ARITH_BITCAST, lo, c->rw.i16), c->rw.i32);
  IrValue *b = rw_cast(&c->rw, OP_ARITH_EXTUI, rw_cast(&c->rw, OP_ARITH_BITCAST, hi, c->rw.i16), c->rw.i32);
  return rw_bin(&c->rw, OP_ARITH_ORI, a, rw_bin(&c->rw, OP_ARITH_SHLI, b, rw_i32(&c->rw, 16)));
}

/* Float max through compare-and-swap on the bits (no red.max.f32 in PTX):
** old = *p; while ((bits(max(old, v)) != old) && (prev = cas(p, old, new)) != old) old = prev. */
static void max_float(Cpn *c, IrValue *p, IrValue *val) {
  const IrType *it = ir_type_int(c->rw.ctx, val->type->width);
  IrValue *pi = rw_op1(&c->rw, OP_TILE_PTR_CAST, 1, &p, ir_type_ptr(c->rw.ctx, it, IR_MS_GLOBAL));
  IrValue *old0 = load(c, pi, it);
  IrOp *w = ir_build(&c->rw.b, OP_SCF_WHILE, 1, &old0, 1, &it, 2);
  IrBlock *before = ir_region_ensure_block(c->rw.ctx, &w->regions[0]);
  IrBlock *after = ir_region_ensure_block(c->rw.ctx, &w->regions[1]);
  IrValue *old = ir_block_add_arg(c->rw.ctx, before, it), *prev_in = ir_block_add_arg(c->rw.ctx, after, it);
  ir_builder_at_end(&c->rw.b, after);
  rw_op(&c->rw, OP_SCF_YIELD, 1, &prev_in, NULL);
  ir_builder_at_end(&c->rw.b, before);
  IrValue *m = rw_bin(&c->rw, OP_ARITH_MAXF, rw_cast(&c->rw, OP_ARITH_BITCAST, old, val->type), val);
  IrValue *nb = rw_cast(&c->rw, OP_ARITH_BITCAST, m, it);
  IrValue *same = rw_cmp(&c->rw, "eq", nb, old);
  IrOp *sif = ir_build(&c->rw.b, OP_SCF_IF, 1, &same, 1, &it, 2);
  IrBlock *t = ir_region_ensure_block(c->rw.ctx, &sif->regions[0]);
  IrBlock *e = ir_region_ensure_block(c->rw.ctx, &sif->regions[1]);
  ir_builder_at_end(&c->rw.b, t);
  rw_op(&c->rw, OP_SCF_YIELD, 1, &old, NULL);
  ir_builder_at_end(&c->rw.b, e);
  IrValue *cas_opds[3] = {pi, old, nb};
  IrValue *prev = rw_op1(&c->rw, OP_TILE_ATOMIC_CAS, 3, cas_opds, it);
  rw_op(&c->rw, OP_SCF_YIELD, 1, &prev, NULL);
  ir_builder_after(&c->rw.b, sif);
  IrValue *got = &sif->results[0];
  IrValue *cond_opds[2] = {rw_cmp(&c->rw, "ne", got, old), got};
  rw_op(&c->rw, OP_SCF_CONDITION, 2, cond_opds, NULL);
  ir_builder_after(&c->rw.b, w);
}

/* One element (or, for halves, a pair) of the reduction into global p. */
static void reduce_scalar(Cpn *c, IrValue *p, IrValue *val, bool max) {
  const IrType *e = val->type;
  if (e->kind == IR_TY_FLOAT && e->width == 16) {
    red_half(c, p, val, e, false);
    return;
  }
  if (max && e->kind == IR_TY_FLOAT) {
    max_float(c, p, val);
    return;
  }
  IrValue *opds[2] = {p, val};
  IrOp *a = rw_op(&c->rw, OP_TILE_ATOMIC, 2, opds, e);
  rw_set_str(&c->rw, a, "kind", max ? "max" : "add");
  rw_set_str(&c->rw, a, "scope", "gpu");
}

static void reduce_unit(Cpn *c, const Stripe *s, IrValue *g, IrValue *part, bool max) {
  if (s->v == 1) {
    reduce_scalar(c, g, part, max);
    return;
  }
  bool half = s->elem->kind == IR_TY_FLOAT && s->elem->width == 16;
  for (int64_t i = 0; i < s->v; i += half ? 2 : 1) {
    IrValue *gi = cpn_ptr_add(c, g, rw_i32(&c->rw, i));
    if (half) { /* a unit is 4-byte aligned when the global base is: pairs are packed */
      IrValue *pk = pack_pair(c, extract(c, part, i, s->elem), extract(c, part, i + 1, s->elem));
      red_half(c, gi, pk, s->elem, true);
    } else {
      reduce_scalar(c, gi, extract(c, part, i, s->elem), max);
    }
  }
}

/* }====================================================================== */

/* {======================================================================
** block_striped
** ======================================================================= */

/* The moves of one unit u for op's kind. */
static void striped_unit(Cpn *c, const Stripe *s, IrValue *u) {
  IrValue *g = gptr(c, s, u), *f = fptr(c, s, u);
  switch (s->op->kind) {
  case OP_CUTLASS_BLOCK_STRIPED_LOAD: store(c, load(c, g, s->unit), f); return;
  case OP_CUTLASS_BLOCK_STRIPED_STORE: store(c, load(c, f, s->unit), g); return;
  case OP_CUTLASS_BLOCK_STRIPED_LOAD_ADD: /* fused: one global load, one add, back to registers */
    store(c, add_units(c, s, load(c, g, s->unit), load(c, f, s->unit)), f);
    return;
  default: {
    reduce_unit(c, s, g, load(c, f, s->unit), ir_attrs_CUTLASS_BLOCK_STRIPED_LOAD(s->op).kind == STRIPED_MAX);
    return;
  }
  }
}

/* Units unrolled when few, else an scf.for over them. */
static void for_units(Cpn *c, const Stripe *s) {
  if (s->units <= MAX_UNROLL) {
    for (int64_t u = 0; u < s->units; u++)
      striped_unit(c, s, rw_i32(&c->rw, u));
    return;
  }
  IrValue *u;
  IrOp *loop = rw_begin_for(&c->rw, rw_i32(&c->rw, 0), rw_i32(&c->rw, s->units), &u);
  striped_unit(c, s, u);
  rw_end_for(&c->rw, loop);
}

static bool lower_striped(Cpn *c, IrOp *op) {
  IrOp *root = op->operands[1].value->def;
  CpnFrag *fr = ptrmap_get(&c->frags, root);
  const IrType *ft = root->results[0].type;
  const KernelExec *x = cpn_exec(c, op);
  Stripe s = {op, ft->elem, ft->elem, cut_striped_unit(ft), 0, ir_attrs_CUTLASS_BLOCK_STRIPED_LOAD(op).threads,
              NULL, frag_base(c, fr), NULL, cpn_tid(c)};
  s.units = ir_type_num_elements(ft) / s.v;
  if (s.v > 1) s.unit = ir_type_vector(c->rw.ctx, s.elem, 1, &s.v);
  IrValue *g = op->operands[0].value;
  if (g->type->kind == IR_TY_MEMREF)
    g = rw_op1(&c->rw, OP_TILE_MEMREF_PTR, 1, &g, ir_type_ptr(c->rw.ctx, s.elem, IR_MS_GLOBAL));
  s.gbase = g;
  int first = kernel_ctz(x->mask);
  s.t = first ? rw_bin(&c->rw, OP_ARITH_SUBI, s.tid, rw_i32(&c->rw, 32 * first)) : s.tid;
  IrOp *guard = NULL;
  if (s.threads < 32 * (int64_t)kernel_popcount(x->mask))
    guard = rw_begin_if(&c->rw, rw_cmp(&c->rw, "ult", s.t, rw_i32(&c->rw, s.threads)));
  for_units(c, &s);
  if (guard) rw_end_if(&c->rw, guard);
  return true;
}

/* }====================================================================== */

/* {======================================================================
** Named and generic barriers
** ======================================================================= */

static void named(Cpn *c, IrOp *op) {
  IrAttrs_CUTLASS_BAR a = ir_attrs_CUTLASS_BAR(op);
  IrValue *opds[2] = {rw_i32(&c->rw, a.id), rw_i32(&c->rw, a.count)};
  rw_op(&c->rw, op->kind == OP_CUTLASS_BAR ? OP_TILE_NAMED_BARRIER_SYNC : OP_TILE_NAMED_BARRIER_ARRIVE,
            2, opds, NULL);
}

static void fence_gpu(Cpn *c) {
  IrOp *f = rw_op(&c->rw, OP_TILE_FENCE, 0, NULL, NULL);
  rw_set_str(&c->rw, f, "scope", "gpu");
}

/* Acquire: spin on a strong load (ld.volatile, relaxed at system scope) until
** the counter equals v, or on a CAS from v to 0 (reset), then fence.acq_rel.gpu:
** a relaxed read followed by a fence is the PTX memory model's acquire pattern.
** Each retry backs off with a short nanosleep, which also keeps the loop (the
** load alone is droppable, and canonicalize would remove a loop without effects). */
static void spin_counter(Cpn *c, IrValue *p, IrValue *v, bool reset) {
  IrOp *w = rw_begin_spin(&c->rw);
  IrBuilder at = c->rw.b;
  ir_builder_before(&c->rw.b, w->regions[1].first->last);
  IrValue *ns = rw_i32(&c->rw, SPIN_BACKOFF_NS);
  rw_op(&c->rw, OP_NVVM_NANOSLEEP, 1, &ns, NULL);
  c->rw.b = at;
  IrValue *got;
  if (reset) {
    IrValue *opds[3] = {p, v, rw_i32(&c->rw, 0)};
    got = rw_op1(&c->rw, OP_TILE_ATOMIC_CAS, 3, opds, c->rw.i32);
    rw_set_str(&c->rw, got->def, "scope", "gpu");
  } else {
    got = load(c, p, c->rw.i32);
    ir_op_set_attr(got->def, "volatile", ir_attr_bool(c->rw.ctx, true));
  }
  rw_end_spin(&c->rw, w, rw_cmp(&c->rw, "ne", got, v));
  fence_gpu(c);
}

/* CUTLASS's GenericBarrier: collective over the op's executors. The first
** thread of the executors does the memory operation; the executors sync after
** a wait (everyone sees what the first thread acquired) and before an arrive
** (everyone's writes precede the release). Under an elect, the executing
** thread does it alone. */
static bool lower_generic(Cpn *c, IrOp *op) {
  const KernelExec *x = cpn_exec(c, op);
  IrValue *p = cpn_ptr_add(c, op->operands[0].value, op->operands[1].value);
  bool arrive = op->kind == OP_CUTLASS_GENERIC_BARRIER_ARRIVE_INC;
  if (arrive && !x->narrow && !cpn_sync_warps(c, op, x->mask)) return false;
  IrOp *lead = NULL;
  if (!x->narrow)
    lead = rw_begin_if(&c->rw, rw_cmp(&c->rw, "eq", cpn_tid(c), rw_i32(&c->rw, 32 * kernel_ctz(x->mask))));
  if (arrive) {
    fence_gpu(c); /* release: fence.acq_rel.gpu, then a relaxed (gpu) red.add */
    IrValue *opds[2] = {p, rw_i32(&c->rw, 1)};
    IrOp *a = rw_op(&c->rw, OP_TILE_ATOMIC, 2, opds, c->rw.i32);
    rw_set_str(&c->rw, a, "kind", "add");
    rw_set_str(&c->rw, a, "scope", "gpu");
  } else {
    spin_counter(c, p, op->operands[2].value, op->kind == OP_CUTLASS_GENERIC_BARRIER_WAIT_EQ_RESET);
  }
  if (lead) rw_end_if(&c->rw, lead);
  if (!arrive && !x->narrow && !cpn_sync_warps(c, op, x->mask)) return false;
  return true;
}

/* }====================================================================== */

/* {======================================================================
** MODS
** ======================================================================= */

static IrValue *globaltimer(Cpn *c) { return rw_op1(&c->rw, OP_NVVM_SREG_GLOBALTIMER, 0, NULL, c->rw.i64); }

/* start: arrive (release) on the cluster barrier, then the timestamp.
** end: drain the bulk groups, wait on the cluster barrier, then the second
** timestamp; the duration end - start is the optional result.
** throttle: 0 nothing, 1 nanosleep, 2 a cooperative rendezvous of the cluster
** (wait for the arrivals of the window's phase, arrive again: the end's wait
** closes the new phase). */
static bool lower_mods(Cpn *c, IrOp *op) {
  switch (op->kind) {
  case OP_CUTLASS_MODS_START:
    rw_op(&c->rw, OP_TILE_CLUSTER_ARRIVE, 0, NULL, NULL);
    if (op->nresults) ir_value_replace_all_uses(&op->results[0], globaltimer(c));
    return true;
  case OP_CUTLASS_MODS_END: {
    IrOp *w = rw_op(&c->rw, OP_TILE_BULK_WAIT, 0, NULL, NULL);
    rw_set_int(&c->rw, w, "pending", 0);
    rw_op(&c->rw, OP_TILE_CLUSTER_WAIT, 0, NULL, NULL);
    if (op->nresults)
      ir_value_replace_all_uses(&op->results[0], rw_bin(&c->rw, OP_ARITH_SUBI, globaltimer(c), op->operands[2].value));
    return true;
  }
  case OP_CUTLASS_MODS_SMID:
    ir_value_replace_all_uses(&op->results[0], rw_op1(&c->rw, OP_NVVM_SREG_SMID, 0, NULL, c->rw.i32));
    return true;
  default: {
    int64_t profile = ir_attrs_CUTLASS_MODS_THROTTLE(op).profile;
    if (profile == 1) {
      IrValue *ns = rw_i32(&c->rw, THROTTLE_NS(profile));
      rw_op(&c->rw, OP_NVVM_NANOSLEEP, 1, &ns, NULL);
    } else if (profile == 2) {
      rw_op(&c->rw, OP_TILE_CLUSTER_WAIT, 0, NULL, NULL);
      rw_op(&c->rw, OP_TILE_CLUSTER_ARRIVE, 0, NULL, NULL);
    }
    return true;
  }
  }
}

static bool check_mods(IrOp *op) {
  if (op->kind == OP_CUTLASS_MODS_END && op->nresults && op->noperands < 3) {
    ir_op_error(op, "returns the window's duration, which needs the start's timestamp (operand #2)");
    return false;
  }
  return true;
}

/* }====================================================================== */

bool cpn_check_mem_op(Cpn *c, IrOp *op) {
  if (is_striped(op->kind)) return check_striped(c, op);
  if (op->kind >= OP_CUTLASS_MODS_START && op->kind <= OP_CUTLASS_MODS_THROTTLE) return check_mods(op);
  return true;
}

bool cpn_lower_mem_op(Cpn *c, IrOp *op) {
  bool ok = true;
  if (is_striped(op->kind)) ok = lower_striped(c, op);
  else if (op->kind == OP_CUTLASS_BAR || op->kind == OP_CUTLASS_NAMED_BARRIER_ARRIVE) named(c, op);
  else if (op->kind >= OP_CUTLASS_GENERIC_BARRIER_WAIT_EQ && op->kind <= OP_CUTLASS_GENERIC_BARRIER_ARRIVE_INC)
    ok = lower_generic(c, op);
  else ok = lower_mods(c, op);
  if (ok) ir_op_erase(op);
  return ok;
}
