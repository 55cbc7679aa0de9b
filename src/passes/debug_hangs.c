/*
** debug_hangs.c -- the `debug-hangs` pass (tl.options.debug_hangs, tilua
** --debug-hangs): a debug build in which a kernel that deadlocks says where.
** It runs on the nvvm level (after the ptx pipeline) and gives every kernel
** one more parameter, the address of the records (src/cuda/hang.h: one slot
** per warp of the grid, in mapped host memory the host reads even while the
** kernel hangs), and the list of its wait sites as `hang_sites`:
**
**   mbarrier wait loop   an scf.while around try_wait / test_wait.parity: after
**                        a failed try, once the loop has spun `ms` milliseconds
**                        (%globaltimer), the thread records the barrier's
**                        address, the parity and its lane in its warp's slot,
**                        fences at system scope and traps: the launch fails and
**                        the host prints the records
**   bar.sync / cluster   no try form exists: the warp writes its slot (named
**   barrier wait         barrier id and count, or the cluster barrier) before
**                        the wait and clears it after, so the launch deadline's
**                        report lists the warps still inside one
**
** Option: ms (default 1000), how long a wait spins before it gives up.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cuda/hang.h"
#include "../ir/checked.h"
#include "../dialects/dialects.h"
#include "../dialects/kernel.h"
#include "passes.h"

#define DEFAULT_MS 1000

typedef struct Dbg {
  IrContext *ctx;
  IrBuilder b;
  IrOp *kernel;
  const IrType *i1, *i32, *i64;
  IrValue *slot, *lane, *cta; /* at the kernel's entry */
  int64_t limit_ns;
  const IrAttr **sites; /* hang_sites, one string each */
  uint32_t nsites, cap;
} Dbg;

static IrValue *c32(Dbg *d, int64_t v) { return ir_build_const_int(&d->b, v, d->i32); }
static IrValue *c64(Dbg *d, int64_t v) { return ir_build_const_int(&d->b, v, d->i64); }

static IrValue *build1(Dbg *d, IrOpKind k, uint32_t n, IrValue *const *opds, const IrType *rt) {
  return &ir_build(&d->b, k, n, opds, 1, &rt, 0)->results[0];
}

static IrValue *bin(Dbg *d, IrOpKind k, IrValue *a, IrValue *b) { return ir_build_binary(&d->b, k, a, b); }

static IrValue *sreg(Dbg *d, IrOpKind k) { return build1(d, k, 0, NULL, d->i32); }

/* A site: "file:line: what"; returns its number (1-based, 0 is "none"). */
static int64_t site(Dbg *d, const IrOp *op, const char *what) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s:%d: %s", op->loc.file ? op->loc.file : "?", op->loc.line, what);
  if (d->nsites == d->cap) {
    d->cap = d->cap ? 2 * d->cap : 16;
    const IrAttr **n = ir_realloc(d->sites, d->cap * sizeof *n);
    d->sites = n;
  }
  d->sites[d->nsites++] = ir_attr_cstr(d->ctx, buf);
  return d->nsites;
}

/* st.volatile.global [slot + 4 * word], v */
static void put(Dbg *d, int word, IrValue *v) {
  IrValue *a = word ? bin(d, OP_ARITH_ADDI, d->slot, c64(d, 4 * word)) : d->slot;
  IrValue *opds[2] = {a, v};
  IrOp *st = ir_build(&d->b, OP_NVVM_ST_GLOBAL, 2, opds, 0, NULL, 0);
  ir_op_set_attr(st, "volatile", ir_attr_bool(d->ctx, true));
}

/* scf.if cond { ... }: the builder goes before the then-block's yield. */
static IrOp *begin_if(Dbg *d, IrValue *cond) {
  IrOp *sif = ir_build(&d->b, OP_SCF_IF, 1, &cond, 0, NULL, 2);
  ir_builder_at_end(&d->b, ir_region_ensure_block(d->ctx, &sif->regions[0]));
  IrOp *y = ir_build(&d->b, OP_SCF_YIELD, 0, NULL, 0, NULL, 0);
  ir_builder_before(&d->b, y);
  return sif;
}

/* The warp's slot, the lane and the linear block index, at the entry. */
static void entry_values(Dbg *d, IrValue *records) {
  IrBlock *entry = d->kernel->regions[0].first;
  ir_builder_at_start(&d->b, entry);
  d->b.loc = d->kernel->loc;
  KernelSpec ks = kernel_spec(d->kernel);
  const int64_t *bd = ks.block;
  IrValue *tid = sreg(d, OP_NVVM_SREG_TID_X);
  if (bd[1] > 1 || bd[2] > 1) {
    IrValue *yz = bin(d, OP_ARITH_ADDI, sreg(d, OP_NVVM_SREG_TID_Y),
                      bin(d, OP_ARITH_MULI, sreg(d, OP_NVVM_SREG_TID_Z), c32(d, bd[1])));
    tid = bin(d, OP_ARITH_ADDI, tid, bin(d, OP_ARITH_MULI, yz, c32(d, bd[0])));
  }
  IrValue *yz = bin(d, OP_ARITH_ADDI, sreg(d, OP_NVVM_SREG_CTAID_Y),
                    bin(d, OP_ARITH_MULI, sreg(d, OP_NVVM_SREG_CTAID_Z), sreg(d, OP_NVVM_SREG_NCTAID_Y)));
  d->cta = bin(d, OP_ARITH_ADDI, sreg(d, OP_NVVM_SREG_CTAID_X),
               bin(d, OP_ARITH_MULI, yz, sreg(d, OP_NVVM_SREG_NCTAID_X)));
  d->lane = bin(d, OP_ARITH_ANDI, tid, c32(d, 31));
  int64_t warps = (bd[0] * bd[1] * bd[2] + 31) / 32;
  IrValue *w = bin(d, OP_ARITH_ADDI, bin(d, OP_ARITH_MULI, d->cta, c32(d, warps)),
                   bin(d, OP_ARITH_SHRUI, tid, c32(d, 5)));
  IrValue *off = bin(d, OP_ARITH_MULI, ir_build_unary(&d->b, OP_ARITH_EXTUI, w, d->i64),
                     c64(d, 4 * TLHANG_SLOT_WORDS));
  d->slot = bin(d, OP_ARITH_ADDI, records, off);
}

/* After a failed try of wait op t (in a spin loop that started at t0): give
** up past the limit: record, fence at system scope, trap. */
static void instrument_mbarrier(Dbg *d, IrOp *loop, IrOp *t) {
  d->b.loc = t->loc;
  ir_builder_before(&d->b, loop);
  IrValue *t0 = build1(d, OP_NVVM_SREG_GLOBALTIMER, 0, NULL, d->i64);
  int64_t s = site(d, t, "mbarrier wait");
  ir_builder_after(&d->b, t);
  begin_if(d, bin(d, OP_ARITH_XORI, &t->results[0], ir_build_const_int(&d->b, 1, d->i1))); /* failed */
  IrValue *waited = bin(d, OP_ARITH_SUBI, build1(d, OP_NVVM_SREG_GLOBALTIMER, 0, NULL, d->i64), t0);
  begin_if(d, ir_build_cmpi(&d->b, "ugt", waited, c64(d, d->limit_ns))); /* past the limit */
  put(d, TLHANG_SITE, c32(d, s));
  put(d, TLHANG_BARRIER, t->operands[0].value);
  put(d, TLHANG_PHASE, t->operands[1].value);
  put(d, TLHANG_LANE, d->lane);
  put(d, TLHANG_BLOCK, d->cta);
  put(d, TLHANG_WAITED, ir_build_unary(&d->b, OP_ARITH_TRUNCI, bin(d, OP_ARITH_DIVUI, waited, c64(d, 1000)), d->i32));
  put(d, TLHANG_STATE, c32(d, TLHANG_MBARRIER)); /* last: the slot is whole when it says so */
  IrOp *f = ir_build(&d->b, OP_NVVM_FENCE, 0, NULL, 0, NULL, 0);
  ir_op_set_attr(f, "sem", ir_attr_cstr(d->ctx, "sc"));
  ir_op_set_attr(f, "scope", ir_attr_cstr(d->ctx, "sys"));
  IrOp *trap = ir_build(&d->b, OP_NVVM_INLINE_PTX, 0, NULL, 0, NULL, 0);
  ir_op_set_attr(trap, "ptx", ir_attr_cstr(d->ctx, "trap;"));
}

/* A blocking barrier: the warp's slot says so while it waits. */
static void instrument_barrier(Dbg *d, IrOp *op) {
  d->b.loc = op->loc;
  ir_builder_before(&d->b, op);
  bool cluster = op->kind == OP_NVVM_CLUSTER_WAIT;
  int64_t s = site(d, op, cluster ? "barrier.cluster.wait" : "bar.sync");
  put(d, TLHANG_SITE, c32(d, s));
  if (!cluster) {
    put(d, TLHANG_BARRIER, op->noperands > 0 ? op->operands[0].value : c32(d, 0));
    put(d, TLHANG_PHASE, op->noperands > 1 ? op->operands[1].value : c32(d, kernel_spec(d->kernel).threads));
  }
  put(d, TLHANG_BLOCK, d->cta);
  put(d, TLHANG_STATE, c32(d, cluster ? TLHANG_CLUSTER : TLHANG_NAMED));
  ir_builder_after(&d->b, op);
  put(d, TLHANG_STATE, c32(d, TLHANG_NONE));
}

typedef struct OpList {
  IrOp **v;
  size_t n, cap;
} OpList;

static bool is_try(IrOpKind k) {
  return k == OP_NVVM_MBARRIER_TRY_WAIT_PARITY_SHARED || k == OP_NVVM_MBARRIER_TEST_WAIT_PARITY_SHARED;
}

/* The waits to instrument: tries directly in a loop's regions, and barriers. */
static bool collect(IrOp *op, void *ud) {
  OpList *l = ud;
  IrOp *p = ir_op_parent_op(op);
  bool want = (is_try(op->kind) && p && p->kind == OP_SCF_WHILE) || op->kind == OP_NVVM_BARRIER0 ||
              op->kind == OP_NVVM_BARRIER || op->kind == OP_NVVM_CLUSTER_WAIT;
  if (!want) return true;
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 32;
    IrOp **n = ir_realloc(l->v, l->cap * sizeof *n);
    l->v = n;
  }
  l->v[l->n++] = op;
  return true;
}

static void instrument_kernel(Dbg *d, IrOp *k) {
  d->kernel = k;
  d->nsites = 0;
  IrBlock *entry = ir_region_ensure_block(d->ctx, &k->regions[0]);
  OpList l = {NULL, 0, 0};
  ir_walk_pre(k, collect, &l);
  IrValue *records = ir_block_add_arg(d->ctx, entry, d->i64);
  const IrAttr *names = ir_op_attr(k, "arg_names");
  uint32_t n = names && names->kind == IR_ATTR_ARRAY ? names->u.arr.n : 0;
  const IrAttr **nn = ir_calloc(n + 1, sizeof *nn);
  for (uint32_t i = 0; i < n; i++)
    nn[i] = names->u.arr.elems[i];
  nn[n] = ir_attr_cstr(d->ctx, TLHANG_PARAM);
  ir_op_set_attr(k, "arg_names", ir_attr_array(d->ctx, n + 1, nn));
  ir_free(nn);
  entry_values(d, records);
  for (size_t i = 0; i < l.n; i++) {
    IrOp *op = l.v[i];
    if (is_try(op->kind)) instrument_mbarrier(d, ir_op_parent_op(op), op);
    else instrument_barrier(d, op);
  }
  ir_op_set_attr(k, "hang_sites", ir_attr_array(d->ctx, d->nsites, d->sites));
  ir_free(l.v);
}

IrResult pass_debug_hangs(IrOp *module, IrPassCtx *pc) {
  Dbg d;
  memset(&d, 0, sizeof d);
  d.ctx = pc->ctx;
  ir_builder_init(&d.b, pc->ctx);
  d.i1 = ir_type_int(pc->ctx, 1);
  d.i32 = ir_type_int(pc->ctx, 32);
  d.i64 = ir_type_int(pc->ctx, 64);
  /* the pass manager checked ms against its row (1..86400000): the nanoseconds fit */
  const IrAttr *ms = pc->options ? ir_attr_dict_get(pc->options, "ms") : NULL;
  if (!ck_mul(ms && ms->kind == IR_ATTR_INT ? ms->u.i : DEFAULT_MS, 1000000, &d.limit_ns)) {
    ir_error(pc->ctx, module->loc, "debug-hangs: option ms is out of range");
    return IR_FAIL;
  }
  IrBlock *body = module->nregions ? module->regions[0].first : NULL;
  for (IrOp *op = body ? body->first : NULL; op; op = op->next)
    if (op->kind == OP_TILE_KERNEL) {
      if (ir_op_attr(op, "hang_sites")) continue; /* already instrumented */
      instrument_kernel(&d, op);
      pc->changed = true;
    }
  ir_free(d.sites);
  return IR_OK;
}
