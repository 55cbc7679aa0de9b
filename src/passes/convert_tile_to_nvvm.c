/*
** convert_tile_to_nvvm.c -- the `convert-tile-to-nvvm` pass: lowers the tile
** authoring ops of every kernel to nvvm + arith + scf.
**
**   ids               nvvm special registers; warp ids from the linear thread id
**   pointers          integer addresses: i64 (global, generic), i32 (shared windows);
**                     offsets scaled by the pointee size; casts through cvta
**   loads/stores      nvvm.ld.* / nvvm.st.* by address space; atomics whose
**                     result is unused become nvvm.red.*
**   shared memory     offsets in one dynamic shared buffer (nvvm.shared.base);
**                     the kernel gets `shared_static` (bytes before the dynamic
**                     part) and `shared_bytes` (the total with kernel_spec.smem)
**   agents            scf.if on the warp index, warps assigned in order unless
**                     an agent carries `warp_id`
**   elect             nvvm.elect.sync (the region form runs under scf.if)
**   mbarrier_wait     an scf.while around nvvm.mbarrier.try_wait.parity
**   TMA               nvvm.cp.async.bulk.tensor.*, coordinates reversed to PTX order
**   wgmma_desc        arith on the shared address (the matrix-descriptor bits)
**   memref_ptr        row-major offsets, XOR-swizzled for a swizzled memref
**   the rest          one nvvm op each (bulk copies, fences, barriers, mapa)
**
** Values of pointer and memref type left in the kernel (scf results and block
** arguments, selects) take the integer address type; pointer parameters stay
** pointers and reach the body through builtin.unrealized_conversion_cast.
** tile.extract, tile.from_elements, tile.splat and tile.pack stay: the
** emitter handles them (vectors are registers).
*/
#include <stdlib.h>
#include <string.h>

#include "../dialects/dialects.h"
#include "passes.h"

#define MAX_SMEM (227 * 1024) /* sm_90 opt-in maximum per block */

typedef struct Conv {
  IrContext *ctx;
  IrBuilder b;
  IrOp *kernel;
  IrBlock *entry;
  const IrType *i1, *i32, *i64;
  IrValue *smem_base, *linear_tid, *warp; /* at the kernel's entry, made on demand */
  IrOp *entry_last;                       /* the last op made at the entry */
  IrMapping map;                          /* tile results and pointer params -> new values */
  int64_t block[3];
  bool failed;
} Conv;

/* {======================================================================
** Building helpers
** ======================================================================= */

static IrOp *build(Conv *c, IrOpKind k, uint32_t n, IrValue *const *opds, const IrType *rt) {
  return ir_build(&c->b, k, n, opds, rt ? 1 : 0, rt ? &rt : NULL, 0);
}

static IrValue *build1(Conv *c, IrOpKind k, uint32_t n, IrValue *const *opds, const IrType *rt) {
  return &build(c, k, n, opds, rt)->results[0];
}

static IrValue *cint(Conv *c, int64_t v, const IrType *t) {
  return ir_build_const_int(&c->b, v, t);
}

static void copy_attr(IrOp *to, IrOp *from, const char *name, const char *as) {
  const IrAttr *a = ir_op_attr(from, name);
  if (a) ir_op_set_attr(to, as ? as : name, a);
}

/* Run fn with the builder at the start of the kernel's entry block, so that the
** values it makes dominate the whole body; restores the insertion point. */
static IrValue *at_entry(Conv *c, IrValue *(*fn)(Conv *)) {
  IrBuilder saved = c->b;
  if (c->entry_last)
    ir_builder_after(&c->b, c->entry_last);
  else
    ir_builder_at_start(&c->b, c->entry);
  c->b.loc = c->kernel->loc;
  IrValue *v = fn(c);
  c->entry_last = v->def;
  c->b = saved;
  return v;
}

/* Operand i of a pattern op: what an earlier rewrite made of it, else itself. */
static IrValue *opd(Conv *c, IrOp *op, uint32_t i) {
  IrValue *v = op->operands[i].value, *m = ir_mapping_get(&c->map, v);
  return m ? m : v;
}

static IrValue *make_smem_base(Conv *c) { return build1(c, OP_NVVM_SHARED_BASE, 0, NULL, c->i32); }

/* tid.x + ntid.x * (tid.y + ntid.y * tid.z), with the block shape as constants. */
static IrValue *make_linear_tid(Conv *c) {
  IrValue *t = build1(c, OP_NVVM_SREG_TID_X, 0, NULL, c->i32);
  if (c->block[1] == 1 && c->block[2] == 1) return t;
  IrValue *y = build1(c, OP_NVVM_SREG_TID_Y, 0, NULL, c->i32);
  if (c->block[2] != 1) {
    IrValue *z = build1(c, OP_NVVM_SREG_TID_Z, 0, NULL, c->i32);
    y = ir_build_binary(&c->b, OP_ARITH_ADDI, y,
                        ir_build_binary(&c->b, OP_ARITH_MULI, z, cint(c, c->block[1], c->i32)));
  }
  return ir_build_binary(&c->b, OP_ARITH_ADDI, t,
                         ir_build_binary(&c->b, OP_ARITH_MULI, y, cint(c, c->block[0], c->i32)));
}

static IrValue *make_warp(Conv *c) {
  if (!c->linear_tid) c->linear_tid = make_linear_tid(c);
  return ir_build_binary(&c->b, OP_ARITH_SHRUI, c->linear_tid, cint(c, 5, c->i32));
}

static IrValue *smem_base(Conv *c) {
  if (!c->smem_base) c->smem_base = at_entry(c, make_smem_base);
  return c->smem_base;
}

static IrValue *linear_tid(Conv *c) {
  if (!c->linear_tid) c->linear_tid = at_entry(c, make_linear_tid);
  return c->linear_tid;
}

static IrValue *warp_index(Conv *c) {
  if (!c->warp) c->warp = at_entry(c, make_warp);
  return c->warp;
}

/* The integer type that holds an address of the space. */
static const IrType *addr_type(Conv *c, IrMemSpace s) {
  return s == IR_MS_SHARED || s == IR_MS_CLUSTER ? c->i32 : c->i64;
}

/* The address type of a pointer-typed value. */
static const IrType *addr_of(Conv *c, const IrValue *v) { return addr_type(c, v->type->space); }

/* An integer or index value converted to type t (sign-extending or truncating). */
static IrValue *to_width(Conv *c, IrValue *v, const IrType *t) {
  if (v->type == t) return v;
  if (v->type->kind == IR_TY_INDEX) return ir_build_unary(&c->b, OP_ARITH_INDEX_CAST, v, t);
  if (t->kind == IR_TY_INDEX) return ir_build_unary(&c->b, OP_ARITH_INDEX_CAST, v, t);
  IrOpKind k = v->type->width < t->width ? OP_ARITH_EXTSI : OP_ARITH_TRUNCI;
  return ir_build_unary(&c->b, k, v, t);
}

/* base + off * scale in integer type at (base may still carry its pointer type:
** the final retyping gives it `at`). */
static IrValue *addr_add(Conv *c, IrValue *base, IrValue *off, int64_t scale, const IrType *at) {
  int64_t k;
  if (dia_const_int(off, &k)) {
    if (k == 0) return base;
    off = cint(c, k * scale, at);
  } else {
    off = to_width(c, off, at);
    if (scale != 1) off = ir_build_binary(&c->b, OP_ARITH_MULI, off, cint(c, scale, at));
  }
  IrValue *opds[2] = {base, off};
  return build1(c, OP_ARITH_ADDI, 2, opds, at);
}

/* }====================================================================== */

/* {======================================================================
** Shared-memory layout and warp assignment (before any rewrite)
** ======================================================================= */

static int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

static int64_t alloc_bytes(IrOp *op) {
  const IrType *t = op->results[0].type;
  if (t->kind == IR_TY_MEMREF) return ir_type_num_elements(t) * dia_type_bytes(t->elem);
  return ir_op_attr_int_or(op, "count", 1) * dia_type_bytes(t->elem);
}

/* Offsets in op->mark for every allocation (in program order), then the
** dynamic part; records the sizes on the kernel. */
static bool layout_shared(Conv *c, IrOp **ops, size_t n) {
  int64_t off = 0, align = 16, dyn_align = 1;
  for (size_t i = 0; i < n; i++) {
    int64_t a = ir_op_attr_int_or(ops[i], "align", 16);
    if (a > align) align = a;
    if (ops[i]->kind == OP_TILE_DYNAMIC_SHARED && a > dyn_align) dyn_align = a;
    if (ops[i]->kind != OP_TILE_ALLOC_SHARED) continue;
    off = align_up(off, a);
    ops[i]->mark = (uint64_t)off;
    off += alloc_bytes(ops[i]);
  }
  int64_t dyn_off = align_up(off, dyn_align);
  for (size_t i = 0; i < n; i++)
    if (ops[i]->kind == OP_TILE_DYNAMIC_SHARED) ops[i]->mark = (uint64_t)dyn_off;
  const IrAttr *smem = ir_attr_dict_get(ir_op_attr(c->kernel, "kernel_spec"), "smem");
  int64_t total = dyn_off + (smem && smem->kind == IR_ATTR_INT ? smem->u.i : 0);
  if (total > MAX_SMEM) {
    ir_op_error(c->kernel,
                "needs %lld bytes of shared memory (%lld static + kernel_spec.smem), more than %d",
                (long long)total, (long long)dyn_off, MAX_SMEM);
    return false;
  }
  ir_op_set_attr(c->kernel, "shared_static", ir_attr_i64(c->ctx, dyn_off));
  ir_op_set_attr(c->kernel, "shared_bytes", ir_attr_i64(c->ctx, total));
  ir_op_set_attr(c->kernel, "shared_align", ir_attr_i64(c->ctx, align));
  return true;
}

/* First warp of each agent in op->mark: its warp_id, else the next free warp. */
static void assign_warps(IrOp **ops, size_t n) {
  int64_t next = 0;
  for (size_t i = 0; i < n; i++) {
    if (ops[i]->kind != OP_TILE_AGENT) continue;
    int64_t w = ir_op_attr_int_or(ops[i], "warp_id", next);
    ops[i]->mark = (uint64_t)w;
    next = w + ir_op_attr_int_or(ops[i], "num_warps", 1);
  }
}

/* }====================================================================== */

/* {======================================================================
** Patterns
** ======================================================================= */

/* The nvvm special register of an id op along its dim (X, Y, Z are consecutive). */
static IrOpKind sreg_of(IrOp *op) {
  const char *d = ir_op_attr_str(op, "dim");
  int i = d && d[0] >= 'x' && d[0] <= 'z' ? d[0] - 'x' : 0;
  switch (op->kind) {
  case OP_TILE_THREAD_ID: return (IrOpKind)(OP_NVVM_SREG_TID_X + i);
  case OP_TILE_BLOCK_DIM: return (IrOpKind)(OP_NVVM_SREG_NTID_X + i);
  case OP_TILE_BLOCK_ID: return (IrOpKind)(OP_NVVM_SREG_CTAID_X + i);
  case OP_TILE_GRID_DIM: return (IrOpKind)(OP_NVVM_SREG_NCTAID_X + i);
  case OP_TILE_CLUSTER_ID: return (IrOpKind)(OP_NVVM_SREG_CLUSTERID_X + i);
  case OP_TILE_CLUSTER_GRID_DIM: return (IrOpKind)(OP_NVVM_SREG_NCLUSTERID_X + i);
  case OP_TILE_CLUSTER_BLOCK_ID: return (IrOpKind)(OP_NVVM_SREG_CLUSTER_CTAID_X + i);
  case OP_TILE_CLUSTER_DIM: return (IrOpKind)(OP_NVVM_SREG_CLUSTER_NCTAID_X + i);
  case OP_TILE_CLUSTER_RANK: return OP_NVVM_SREG_CLUSTER_CTARANK;
  case OP_TILE_CLUSTER_SIZE: return OP_NVVM_SREG_CLUSTER_NCTARANK;
  default: return OP_NVVM_SREG_LANEID;
  }
}

static IrValue *lower_id(Conv *c, IrOp *op) { return build1(c, sreg_of(op), 0, NULL, c->i32); }

/* Agent-relative ids: the agent's first warp was left in op->mark. */
static IrValue *lower_agent_id(Conv *c, IrOp *op) {
  int64_t first = (int64_t)op->mark;
  if (op->kind == OP_TILE_AGENT_WARP_ID)
    return addr_add(c, warp_index(c), cint(c, -first, c->i32), 1, c->i32);
  return addr_add(c, linear_tid(c), cint(c, -32 * first, c->i32), 1, c->i32);
}

static IrValue *lower_ptr_add(Conv *c, IrOp *op) {
  const IrType *p = op->results[0].type;
  return addr_add(c, opd(c, op, 0), opd(c, op, 1), dia_type_bytes(p->elem), addr_type(c, p->space));
}

static IrValue *lower_ptr_cast(Conv *c, IrOp *op) {
  IrMemSpace from = op->operands[0].value->type->space, to = op->results[0].type->space;
  IrValue *v = opd(c, op, 0);
  if (from == to || (from == IR_MS_SHARED && to == IR_MS_CLUSTER)) return v;
  if (from == IR_MS_GLOBAL) return build1(c, OP_NVVM_CVTA_GLOBAL, 1, &v, c->i64);
  if (to == IR_MS_GLOBAL) return build1(c, OP_NVVM_CVTA_TO_GLOBAL, 1, &v, c->i64);
  if (from == IR_MS_SHARED) {
    IrValue *w = ir_build_unary(&c->b, OP_ARITH_EXTUI, v, c->i64);
    return build1(c, OP_NVVM_CVTA_SHARED, 1, &w, c->i64);
  }
  IrValue *s = build1(c, OP_NVVM_CVTA_TO_SHARED, 1, &v, c->i64);
  return ir_build_unary(&c->b, OP_ARITH_TRUNCI, s, c->i32);
}

/* ptr_to_int and int_to_ptr: the address is already an integer; index needs a cast. */
static IrValue *lower_ptr_int(Conv *c, IrOp *op) {
  IrValue *v = opd(c, op, 0);
  bool to_int = op->kind == OP_TILE_PTR_TO_INT;
  const IrType *rt = to_int ? op->results[0].type : addr_type(c, op->results[0].type->space);
  const IrType *vt = to_int ? addr_of(c, op->operands[0].value) : v->type;
  if (vt == rt) return v;
  return ir_build_unary(&c->b, OP_ARITH_INDEX_CASTUI, v, rt);
}

/* Row-major: base + sum(idx_k * stride_k) * element size. A swizzled memref
** (swizzle S bytes, based at a multiple of 8 * S) permutes the 16-byte chunks
** of each 128-byte row like TMA and wgmma: byte offset o becomes
** o ^ (((o >> 7) & (S / 16 - 1)) << 4) (CuTe's Swizzle<log2(S/16), 4, 3>). */
static IrValue *lower_memref_ptr(Conv *c, IrOp *op) {
  const IrType *m = op->operands[0].value->type, *at = addr_type(c, m->space);
  IrValue *a = opd(c, op, 0);
  int64_t eb = dia_type_bytes(m->elem);
  IrValue *off = m->swizzle ? cint(c, 0, at) : a;
  for (uint32_t k = 1; k < op->noperands; k++) {
    int64_t stride = 1;
    for (uint32_t j = k; j < m->rank; j++)
      stride *= m->shape[j];
    off = addr_add(c, off, opd(c, op, k), stride * eb, at);
  }
  if (!m->swizzle) return off;
  IrValue *row = ir_build_binary(&c->b, OP_ARITH_SHRUI, off, cint(c, 7, at));
  row = ir_build_binary(&c->b, OP_ARITH_ANDI, row, cint(c, m->swizzle / 16 - 1, at));
  row = ir_build_binary(&c->b, OP_ARITH_SHLI, row, cint(c, 4, at));
  off = ir_build_binary(&c->b, OP_ARITH_XORI, off, row);
  IrValue *opds[2] = {a, off};
  return build1(c, OP_ARITH_ADDI, 2, opds, at);
}

static IrOpKind by_space(IrMemSpace s, IrOpKind global, IrOpKind shared, IrOpKind cluster,
                         IrOpKind generic) {
  return s == IR_MS_GLOBAL    ? global
         : s == IR_MS_SHARED  ? shared
         : s == IR_MS_CLUSTER ? cluster
                              : generic;
}

static IrValue *lower_load(Conv *c, IrOp *op) {
  IrOpKind k = by_space(op->operands[0].value->type->space, OP_NVVM_LD_GLOBAL, OP_NVVM_LD_SHARED,
                        OP_NVVM_LD_SHARED_CLUSTER, OP_NVVM_LD_GENERIC);
  IrValue *a = opd(c, op, 0);
  IrOp *ld = build(c, k, 1, &a, op->results[0].type);
  copy_attr(ld, op, "volatile", NULL);
  return &ld->results[0];
}

static IrValue *lower_store(Conv *c, IrOp *op) {
  IrOpKind k = by_space(op->operands[1].value->type->space, OP_NVVM_ST_GLOBAL, OP_NVVM_ST_SHARED,
                        OP_NVVM_ST_SHARED_CLUSTER, OP_NVVM_ST_GENERIC);
  IrValue *opds[2] = {opd(c, op, 1), opd(c, op, 0)};
  copy_attr(build(c, k, 2, opds, NULL), op, "volatile", NULL);
  return NULL;
}

static bool is_exch(IrOp *op) {
  const char *k = ir_op_attr_str(op, "kind");
  return k && strcmp(k, "exch") == 0;
}

/* atom, or red when nobody reads the old value (exch has no red form). */
static IrValue *lower_atomic(Conv *c, IrOp *op) {
  IrMemSpace s = op->operands[0].value->type->space;
  IrValue *opds[3] = {opd(c, op, 0), opd(c, op, 1), op->noperands > 2 ? opd(c, op, 2) : NULL};
  IrOp *a;
  if (op->kind == OP_TILE_ATOMIC_CAS) {
    IrOpKind k = by_space(s, OP_NVVM_ATOM_CAS_GLOBAL, OP_NVVM_ATOM_CAS_SHARED,
                          OP_NVVM_ATOM_CAS_SHARED_CLUSTER, OP_NVVM_ATOM_CAS_GLOBAL);
    a = build(c, k, 3, opds, op->results[0].type);
  } else if (!ir_value_has_uses(&op->results[0]) && !is_exch(op)) {
    IrOpKind k = by_space(s, OP_NVVM_RED_GLOBAL, OP_NVVM_RED_SHARED, OP_NVVM_RED_SHARED_CLUSTER,
                          OP_NVVM_RED_GLOBAL);
    a = build(c, k, 2, opds, NULL);
  } else {
    IrOpKind k = by_space(s, OP_NVVM_ATOM_GLOBAL, OP_NVVM_ATOM_SHARED, OP_NVVM_ATOM_SHARED_CLUSTER,
                          OP_NVVM_ATOM_GLOBAL);
    a = build(c, k, 2, opds, op->results[0].type);
  }
  copy_attr(a, op, "kind", "op");
  copy_attr(a, op, "scope", NULL);
  return a->nresults ? &a->results[0] : NULL;
}

static IrValue *lower_shared(Conv *c, IrOp *op) {
  IrValue *base = smem_base(c);
  return op->mark ? addr_add(c, base, cint(c, (int64_t)op->mark, c->i32), 1, c->i32) : base;
}

/* Move the ops of region r's block into the then-region of a new scf.if on cond. */
static void region_under_if(Conv *c, IrOp *op, IrValue *cond) {
  IrOp *sif = ir_build(&c->b, OP_SCF_IF, 1, &cond, 0, NULL, 2);
  IrBlock *then = ir_region_ensure_block(c->ctx, &sif->regions[0]);
  IrBlock *body = op->regions[0].first;
  while (body && body->first) {
    IrOp *o = body->first;
    ir_op_unlink(o);
    ir_block_append(then, o);
  }
  IrBuilder saved = c->b;
  ir_builder_at_end(&c->b, then);
  build(c, OP_SCF_YIELD, 0, NULL, NULL);
  c->b = saved;
}

/* Agent ids inside the agent remember its first warp before the body moves. */
static bool mark_agent_ids(IrOp *o, void *ud) {
  if (o->kind == OP_TILE_AGENT_THREAD_ID || o->kind == OP_TILE_AGENT_WARP_ID)
    o->mark = *(uint64_t *)ud;
  return true;
}

static IrValue *lower_agent(Conv *c, IrOp *op) {
  uint64_t first = op->mark;
  ir_walk_pre(op, mark_agent_ids, &first);
  int64_t nw = ir_op_attr_int_or(op, "num_warps", 1);
  IrValue *rel = addr_add(c, warp_index(c), cint(c, -(int64_t)first, c->i32), 1, c->i32);
  region_under_if(c, op, ir_build_cmpi(&c->b, "ult", rel, cint(c, nw, c->i32)));
  return NULL;
}

static IrValue *lower_elect(Conv *c, IrOp *op) {
  IrValue *p = build1(c, OP_NVVM_ELECT_SYNC, 0, NULL, c->i1);
  if (op->kind == OP_TILE_ELECT) return p;
  region_under_if(c, op, p);
  return NULL;
}

/* An nvvm op taking the same operands (as addresses), with the same result
** (an address for a pointer result). */
static IrValue *lower_same(Conv *c, IrOp *op, IrOpKind k) {
  IrValue *opds[4];
  for (uint32_t i = 0; i < op->noperands && i < 4; i++)
    opds[i] = opd(c, op, i);
  const IrType *rt = op->nresults ? op->results[0].type : NULL;
  if (rt && rt->kind == IR_TY_PTR) rt = addr_type(c, rt->space);
  IrOp *n = build(c, k, op->noperands, opds, rt);
  copy_attr(n, op, "scope", NULL);
  return n->nresults ? &n->results[0] : NULL;
}

static IrValue *lower_arrive(Conv *c, IrOp *op) {
  bool remote = op->operands[0].value->type->space == IR_MS_CLUSTER;
  if (op->kind == OP_TILE_MBARRIER_ARRIVE)
    return lower_same(
        c, op, remote ? OP_NVVM_MBARRIER_ARRIVE_SHARED_CLUSTER : OP_NVVM_MBARRIER_ARRIVE_SHARED);
  return lower_same(c, op,
                    remote ? OP_NVVM_MBARRIER_ARRIVE_EXPECT_TX_SHARED_CLUSTER
                           : OP_NVVM_MBARRIER_ARRIVE_EXPECT_TX_SHARED);
}

/* while (!try_wait(bar, parity)) {} */
static IrValue *lower_mbarrier_wait(Conv *c, IrOp *op) {
  IrOp *w = ir_build(&c->b, OP_SCF_WHILE, 0, NULL, 0, NULL, 2);
  IrBlock *before = ir_region_ensure_block(c->ctx, &w->regions[0]);
  IrBlock *after = ir_region_ensure_block(c->ctx, &w->regions[1]);
  IrBuilder saved = c->b;
  ir_builder_at_end(&c->b, before);
  IrValue *opds[2] = {opd(c, op, 0), opd(c, op, 1)};
  IrOp *try_wait = build(c, OP_NVVM_MBARRIER_TRY_WAIT_PARITY_SHARED, 2, opds, c->i1);
  copy_attr(try_wait, op, "scope", NULL);
  IrValue *done = &try_wait->results[0];
  IrValue *more = ir_build_binary(&c->b, OP_ARITH_XORI, done, cint(c, 1, c->i1));
  build(c, OP_SCF_CONDITION, 1, &more, NULL);
  ir_builder_at_end(&c->b, after);
  build(c, OP_SCF_YIELD, 0, NULL, NULL);
  c->b = saved;
  return NULL;
}

static IrValue *lower_fence(Conv *c, IrOp *op) {
  if (op->kind == OP_TILE_FENCE_MBARRIER_INIT)
    return build(c, OP_NVVM_FENCE_MBARRIER_INIT, 0, NULL, NULL), NULL;
  if (op->kind == OP_TILE_FENCE)
    return copy_attr(build(c, OP_NVVM_FENCE, 0, NULL, NULL), op, "scope", NULL), NULL;
  IrOp *f = build(c, OP_NVVM_FENCE_PROXY_ASYNC, 0, NULL, NULL);
  const char *sp = ir_op_attr_str(op, "space");
  if (sp)
    ir_op_set_attr(f, "space",
                   ir_attr_cstr(c->ctx, strcmp(sp, "shared") == 0 ? "shared::cta" : "global"));
  return NULL;
}

static IrValue *lower_bulk_wait(Conv *c, IrOp *op) {
  IrOp *w = build(c, OP_NVVM_CP_ASYNC_BULK_WAIT_GROUP, 0, NULL, NULL);
  ir_op_set_attr(w, "group", ir_attr_i64(c->ctx, ir_op_attr_int_or(op, "pending", 0)));
  copy_attr(w, op, "read", NULL);
  return NULL;
}

static IrValue *lower_cluster_arrive(Conv *c, IrOp *op) {
  const IrAttr *r = ir_op_attr(op, "relaxed");
  bool relaxed = r && r->kind == IR_ATTR_BOOL && r->u.b;
  build(c, relaxed ? OP_NVVM_CLUSTER_ARRIVE_RELAXED : OP_NVVM_CLUSTER_ARRIVE, 0, NULL, NULL);
  return NULL;
}

/* {======================================================================
** Tensor cores and TMA
** ======================================================================= */

/* An nvvm op over operands [0, nfixed) as they are, then the coordinates of a
** tile TMA op (outermost first) reversed into PTX order (innermost first),
** then the rest; `dim` is the tensor map's rank. */
static IrOp *build_tma(Conv *c, IrOp *op, IrOpKind k, uint32_t nfixed, IrValue *const *fixed, uint32_t first,
                       int rank) {
  IrValue *opds[16];
  uint32_t n = 0;
  for (uint32_t i = 0; i < nfixed; i++)
    opds[n++] = fixed[i];
  for (int i = rank - 1; i >= 0; i--)
    opds[n++] = opd(c, op, first + (uint32_t)i);
  for (uint32_t i = first + (uint32_t)rank; i < op->noperands && n < 16; i++)
    opds[n++] = opd(c, op, i);
  IrOp *t = build(c, k, n, opds, NULL);
  ir_op_set_attr(t, "dim", ir_attr_i64(c->ctx, rank));
  return t;
}

static IrValue *lower_tma(Conv *c, IrOp *op) {
  IrValue *f[3];
  IrOp *t;
  switch (op->kind) {
  case OP_TILE_TMA_LOAD: {
    int rank = tile_tensor_map_rank(op->operands[1].value->type);
    f[0] = opd(c, op, 0), f[1] = opd(c, op, 1), f[2] = opd(c, op, 2);
    t = build_tma(c, op, OP_NVVM_CP_ASYNC_BULK_TENSOR_SHARED_CLUSTER_GLOBAL, 3, f, 3, rank);
    copy_attr(t, op, "multicast", NULL);
    return NULL;
  }
  case OP_TILE_TMA_STORE: {
    int rank = tile_tensor_map_rank(op->operands[0].value->type);
    f[0] = opd(c, op, 0), f[1] = opd(c, op, 1);
    copy_attr(build_tma(c, op, OP_NVVM_CP_ASYNC_BULK_TENSOR_GLOBAL_SHARED_CTA, 2, f, 2, rank), op, "reduce", NULL);
    return NULL;
  }
  default:
    f[0] = opd(c, op, 0);
    build_tma(c, op, OP_NVVM_CP_ASYNC_BULK_PREFETCH_TENSOR, 1, f, 1, tile_tensor_map_rank(op->operands[0].value->type));
    return NULL;
  }
}

/* desc = (addr & 0x3FFFF) >> 4 | lbo >> 4 << 16 | sbo >> 4 << 32 | layout << 62,
** layout 1 = 128B, 2 = 64B, 3 = 32B swizzle, 0 = none (PTX ISA, matrix descriptor). */
static IrValue *lower_wgmma_desc(Conv *c, IrOp *op) {
  int64_t sw = ir_op_attr_int_or(op, "swizzle", 0), lbo = ir_op_attr_int_or(op, "lbo", 16),
          sbo = ir_op_attr_int_or(op, "sbo", 0);
  int64_t layout = sw == 128 ? 1 : sw == 64 ? 2 : sw == 32 ? 3 : 0;
  uint64_t hi = (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32 | (uint64_t)layout << 62;
  IrValue *a = ir_build_binary(&c->b, OP_ARITH_ANDI, opd(c, op, 0), cint(c, 0x3FFFF, c->i32));
  a = ir_build_binary(&c->b, OP_ARITH_SHRUI, a, cint(c, 4, c->i32));
  a = ir_build_unary(&c->b, OP_ARITH_EXTUI, a, c->i64);
  return ir_build_binary(&c->b, OP_ARITH_ORI, a, cint(c, (int64_t)hi, c->i64));
}

static IrValue *lower_wgmma(Conv *c, IrOp *op) {
  IrValue *opds[4] = {opd(c, op, 0), opd(c, op, 1), opd(c, op, 2),
                      op->noperands > 3 ? opd(c, op, 3) : cint(c, 1, c->i1)};
  IrOp *w = build(c, OP_NVVM_WGMMA_MMA_ASYNC, 4, opds, op->results[0].type);
  static const char *const attrs[] = {"shape", "type_a", "type_b", "scale_a", "scale_b", "trans_a", "trans_b", NULL};
  for (const char *const *a = attrs; *a; a++)
    copy_attr(w, op, *a, NULL);
  return &w->results[0];
}

static IrValue *lower_warpgroup(Conv *c, IrOp *op) {
  switch (op->kind) {
  case OP_TILE_WGMMA_FENCE: build(c, OP_NVVM_WGMMA_FENCE_ALIGNED, 0, NULL, NULL); break;
  case OP_TILE_WGMMA_COMMIT: build(c, OP_NVVM_WGMMA_COMMIT_GROUP_SYNC_ALIGNED, 0, NULL, NULL); break;
  case OP_TILE_WGMMA_WAIT: {
    IrOp *w = build(c, OP_NVVM_WGMMA_WAIT_GROUP_SYNC_ALIGNED, 0, NULL, NULL);
    ir_op_set_attr(w, "group", ir_attr_i64(c->ctx, ir_op_attr_int_or(op, "pending", 0)));
    break;
  }
  default: {
    IrOp *s = build(c, OP_NVVM_SETMAXREGISTER, 0, NULL, NULL);
    copy_attr(s, op, "action", NULL);
    copy_attr(s, op, "count", NULL);
  }
  }
  return NULL;
}

static IrValue *lower_matrix(Conv *c, IrOp *op) {
  IrValue *opds[5];
  for (uint32_t i = 0; i < op->noperands && i < 5; i++)
    opds[i] = opd(c, op, i);
  bool st = op->kind == OP_TILE_STMATRIX;
  IrOp *m = build(c, st ? OP_NVVM_STMATRIX : OP_NVVM_LDMATRIX, op->noperands, opds, st ? NULL : op->results[0].type);
  copy_attr(m, op, "trans", NULL);
  return st ? NULL : &m->results[0];
}

/* }====================================================================== */

/* One tile op to its replacement (NULL when it has no result). */
static IrValue *lower_op(Conv *c, IrOp *op) {
  switch (op->kind) {
  case OP_TILE_THREAD_ID:
  case OP_TILE_BLOCK_DIM:
  case OP_TILE_BLOCK_ID:
  case OP_TILE_GRID_DIM:
  case OP_TILE_CLUSTER_ID:
  case OP_TILE_CLUSTER_GRID_DIM:
  case OP_TILE_CLUSTER_BLOCK_ID:
  case OP_TILE_CLUSTER_DIM:
  case OP_TILE_CLUSTER_RANK:
  case OP_TILE_CLUSTER_SIZE:
  case OP_TILE_LANE_ID: return lower_id(c, op);
  case OP_TILE_WARP_ID: return warp_index(c);
  case OP_TILE_AGENT_THREAD_ID:
  case OP_TILE_AGENT_WARP_ID: return lower_agent_id(c, op);
  case OP_TILE_PTR_ADD: return lower_ptr_add(c, op);
  case OP_TILE_PTR_CAST: return lower_ptr_cast(c, op);
  case OP_TILE_PTR_TO_INT:
  case OP_TILE_INT_TO_PTR: return lower_ptr_int(c, op);
  case OP_TILE_MEMREF_PTR: return lower_memref_ptr(c, op);
  case OP_TILE_LOAD: return lower_load(c, op);
  case OP_TILE_STORE: return lower_store(c, op);
  case OP_TILE_ATOMIC:
  case OP_TILE_ATOMIC_CAS: return lower_atomic(c, op);
  case OP_TILE_ALLOC_SHARED:
  case OP_TILE_DYNAMIC_SHARED: return lower_shared(c, op);
  case OP_TILE_ELECT:
  case OP_TILE_ELECT_ONE: return lower_elect(c, op);
  case OP_TILE_AGENT: return lower_agent(c, op);
  case OP_TILE_FENCE:
  case OP_TILE_FENCE_PROXY_ASYNC:
  case OP_TILE_FENCE_MBARRIER_INIT: return lower_fence(c, op);
  case OP_TILE_MBARRIER_INIT: return lower_same(c, op, OP_NVVM_MBARRIER_INIT_SHARED);
  case OP_TILE_MBARRIER_ARRIVE:
  case OP_TILE_MBARRIER_ARRIVE_EXPECT_TX: return lower_arrive(c, op);
  case OP_TILE_MBARRIER_EXPECT_TX: return lower_same(c, op, OP_NVVM_MBARRIER_EXPECT_TX_SHARED);
  case OP_TILE_MBARRIER_TRY_WAIT: return lower_same(c, op, OP_NVVM_MBARRIER_TRY_WAIT_PARITY_SHARED);
  case OP_TILE_MBARRIER_TEST_WAIT:
    return lower_same(c, op, OP_NVVM_MBARRIER_TEST_WAIT_PARITY_SHARED);
  case OP_TILE_MBARRIER_WAIT: return lower_mbarrier_wait(c, op);
  case OP_TILE_MBARRIER_INVAL: return lower_same(c, op, OP_NVVM_MBARRIER_INVAL_SHARED);
  case OP_TILE_BULK_COPY_G2S: return lower_same(c, op, OP_NVVM_CP_ASYNC_BULK_SHARED_CLUSTER_GLOBAL);
  case OP_TILE_BULK_COPY_S2G: return lower_same(c, op, OP_NVVM_CP_ASYNC_BULK_GLOBAL_SHARED_CTA);
  case OP_TILE_BULK_COMMIT: return lower_same(c, op, OP_NVVM_CP_ASYNC_BULK_COMMIT_GROUP);
  case OP_TILE_BULK_WAIT: return lower_bulk_wait(c, op);
  case OP_TILE_BARRIER: return lower_same(c, op, OP_NVVM_BARRIER0);
  case OP_TILE_NAMED_BARRIER_SYNC: return lower_same(c, op, OP_NVVM_BARRIER);
  case OP_TILE_NAMED_BARRIER_ARRIVE: return lower_same(c, op, OP_NVVM_BARRIER_ARRIVE);
  case OP_TILE_CLUSTER_ARRIVE: return lower_cluster_arrive(c, op);
  case OP_TILE_CLUSTER_WAIT: return lower_same(c, op, OP_NVVM_CLUSTER_WAIT);
  case OP_TILE_MAPA: return lower_same(c, op, OP_NVVM_MAPA_SHARED_CLUSTER);
  case OP_TILE_TMA_LOAD:
  case OP_TILE_TMA_STORE:
  case OP_TILE_TMA_PREFETCH: return lower_tma(c, op);
  case OP_TILE_TENSOR_MAP_PREFETCH: return lower_same(c, op, OP_NVVM_PREFETCH_TENSORMAP);
  case OP_TILE_WGMMA_DESC: return lower_wgmma_desc(c, op);
  case OP_TILE_WGMMA: return lower_wgmma(c, op);
  case OP_TILE_WGMMA_FENCE:
  case OP_TILE_WGMMA_COMMIT:
  case OP_TILE_WGMMA_WAIT:
  case OP_TILE_SETMAXNREG: return lower_warpgroup(c, op);
  case OP_TILE_STMATRIX:
  case OP_TILE_LDMATRIX: return lower_matrix(c, op);
  default: return NULL;
  }
}

/* The ops this pass rewrites: every tile op but the kernel and the vector ops. */
static bool is_pattern(IrOp *op) {
  size_t dl = ir_op_dialect_len(op->kind);
  return dl == 4 && strncmp(ir_op_name(op), "tile", 4) == 0 && op->kind != OP_TILE_KERNEL &&
         op->kind != OP_TILE_EXTRACT && op->kind != OP_TILE_FROM_ELEMENTS && op->kind != OP_TILE_SPLAT &&
         op->kind != OP_TILE_PACK;
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
  if (!is_pattern(op)) return true;
  if (l->n == l->cap) {
    l->cap = l->cap ? l->cap * 2 : 64;
    IrOp **nl = realloc(l->ops, l->cap * sizeof *nl);
    if (!nl) abort();
    l->ops = nl;
  }
  l->ops[l->n++] = op;
  return true;
}

/* Pointer parameters reach the body as integers through one cast each; the
** patterns read the cast from the map, other users switch to it at the end. */
static void cast_params(Conv *c) {
  IrOp *last = NULL;
  for (uint32_t i = 0; i < c->entry->nargs; i++) {
    IrValue *arg = c->entry->args[i];
    if (arg->type->kind != IR_TY_PTR || !ir_value_has_uses(arg)) continue;
    if (last)
      ir_builder_after(&c->b, last);
    else
      ir_builder_at_start(&c->b, c->entry);
    c->b.loc = c->kernel->loc;
    last = build(c, OP_UNREALIZED_CAST, 1, &arg, addr_of(c, arg));
    ir_mapping_set(&c->map, arg, &last->results[0]);
  }
  c->entry_last = last;
}

static void uncast_params(Conv *c) {
  for (uint32_t i = 0; i < c->entry->nargs; i++) {
    IrValue *arg = c->entry->args[i], *cast = ir_mapping_get(&c->map, arg);
    if (!cast) continue;
    ir_value_replace_all_uses(arg, cast);
    ir_op_set_operand(cast->def, 0, arg);
  }
}

/* Pointer and memref values left (scf results and arguments, selects) become addresses. */
static void retype_value(Conv *c, IrValue *v) {
  if (v->type->kind == IR_TY_PTR || v->type->kind == IR_TY_MEMREF)
    v->type = addr_type(c, v->type->space);
}

static bool retype_op(IrOp *op, void *ud) {
  Conv *c = ud;
  for (uint32_t i = 0; i < op->nresults; i++)
    retype_value(c, &op->results[i]);
  if (op == c->kernel) return true;
  for (uint32_t r = 0; r < op->nregions; r++)
    for (IrBlock *b = op->regions[r].first; b; b = b->next)
      for (uint32_t i = 0; i < b->nargs; i++)
        retype_value(c, b->args[i]);
  return true;
}

/* Build the replacement of op in front of it; its result maps to the new value. */
static void rewrite(Conv *c, IrOp *op) {
  ir_builder_before(&c->b, op);
  c->b.loc = op->loc;
  IrValue *v = lower_op(c, op);
  if (op->nresults && v) ir_mapping_set(&c->map, &op->results[0], v);
}

/* Every pattern op built its replacement: switch the uses over, then erase them. */
static void replace_all(Conv *c, OpList *l) {
  for (size_t i = 0; i < l->n; i++) {
    IrOp *op = l->ops[i];
    IrValue *v = op->nresults ? ir_mapping_get(&c->map, &op->results[0]) : NULL;
    if (v) ir_value_replace_all_uses(&op->results[0], v);
  }
  for (size_t i = l->n; i-- > 0;)
    ir_op_erase(l->ops[i]);
}

static IrResult convert_kernel(Conv *c, IrOp *k) {
  c->kernel = k;
  c->entry = ir_region_ensure_block(c->ctx, &k->regions[0]);
  c->smem_base = c->linear_tid = c->warp = NULL;
  c->entry_last = NULL;
  dia_kernel_dims(k, "block", c->block, 1);
  OpList l = {NULL, 0, 0};
  ir_walk_pre(k, collect, &l);
  bool ok = layout_shared(c, l.ops, l.n);
  if (ok) {
    ir_mapping_init(&c->map);
    assign_warps(l.ops, l.n);
    cast_params(c);
    for (size_t i = 0; i < l.n; i++)
      rewrite(c, l.ops[i]);
    replace_all(c, &l);
    uncast_params(c);
    ir_walk_pre(k, retype_op, c);
    ir_mapping_free(&c->map);
  }
  free(l.ops);
  return ok ? IR_OK : IR_FAIL;
}

IrResult pass_convert_tile_to_nvvm(IrOp *module, IrPassCtx *pc) {
  Conv c = {.ctx = pc->ctx};
  ir_builder_init(&c.b, pc->ctx);
  c.i1 = ir_type_int(pc->ctx, 1);
  c.i32 = ir_type_int(pc->ctx, 32);
  c.i64 = ir_type_int(pc->ctx, 64);
  IrBlock *body = module->nregions ? module->regions[0].first : NULL;
  for (IrOp *op = body ? body->first : NULL; op; op = op->next) {
    if (op->kind != OP_TILE_KERNEL) continue;
    if (convert_kernel(&c, op) != IR_OK) return IR_FAIL;
    pc->changed = true;
  }
  return IR_OK;
}

/* }====================================================================== */
