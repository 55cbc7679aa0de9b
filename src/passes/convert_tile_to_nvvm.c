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

#include "../ir/checked.h"
#include "rewrite.h"

typedef struct Conv {
  Rewriter rw;                            /* first: the entry makers get a Rewriter * */
  IrValue *smem_base, *linear_tid, *warp; /* at the kernel's entry, made on demand */
  IrMapping map;                          /* tile results and pointer params -> new values */
  int64_t block[3];
} Conv;

/* {======================================================================
** Building helpers
** ======================================================================= */

/* Operand i of a pattern op: what an earlier rewrite made of it, else itself. */
static IrValue *opd(Conv *c, IrOp *op, uint32_t i) {
  IrValue *v = op->operands[i].value, *m = ir_mapping_get(&c->map, v);
  return m ? m : v;
}

static IrValue *make_smem_base(Rewriter *r) {
  return rw_op1(r, OP_NVVM_SHARED_BASE, 0, NULL, r->i32);
}

static IrValue *sreg_tid(Rewriter *r, int d) {
  return rw_op1(r, (IrOpKind)(OP_NVVM_SREG_TID_X + d), 0, NULL, r->i32);
}

/* The linear thread index from the special registers. */
static IrValue *make_linear_tid(Rewriter *r) {
  return rw_linear_tid(r, ((Conv *)r)->block, sreg_tid);
}

static IrValue *make_warp(Rewriter *r) {
  Conv *c = (Conv *)r;
  if (!c->linear_tid) c->linear_tid = make_linear_tid(r);
  return rw_bin(r, OP_ARITH_SHRUI, c->linear_tid, rw_i32(r, 5));
}

static IrValue *smem_base(Conv *c) {
  if (!c->smem_base) c->smem_base = rw_at_entry(&c->rw, make_smem_base);
  return c->smem_base;
}

static IrValue *linear_tid(Conv *c) {
  if (!c->linear_tid) c->linear_tid = rw_at_entry(&c->rw, make_linear_tid);
  return c->linear_tid;
}

static IrValue *warp_index(Conv *c) {
  if (!c->warp) c->warp = rw_at_entry(&c->rw, make_warp);
  return c->warp;
}

/* The integer type that holds an address of the space. */
static const IrType *addr_type(Conv *c, IrMemSpace s) {
  return s == IR_MS_SHARED || s == IR_MS_CLUSTER ? c->rw.i32 : c->rw.i64;
}

/* The address type of a pointer-typed value. */
static const IrType *addr_of(Conv *c, const IrValue *v) { return addr_type(c, v->type->space); }

/* An integer or index value converted to type t (sign-extending or truncating). */
static IrValue *to_width(Conv *c, IrValue *v, const IrType *t) {
  if (v->type == t) return v;
  if (v->type->kind == IR_TY_INDEX) return rw_cast(&c->rw, OP_ARITH_INDEX_CAST, v, t);
  if (t->kind == IR_TY_INDEX) return rw_cast(&c->rw, OP_ARITH_INDEX_CAST, v, t);
  IrOpKind k = v->type->width < t->width ? OP_ARITH_EXTSI : OP_ARITH_TRUNCI;
  return rw_cast(&c->rw, k, v, t);
}

/* base + off * scale in integer type at (base may still carry its pointer type:
** the final retyping gives it `at`). A constant offset is scaled here (the
** verifier refused one whose bytes do not fit 64 bits); the address arithmetic
** itself wraps at the address width, as the integer ops it becomes. */
static IrValue *addr_add(Conv *c, IrValue *base, IrValue *off, int64_t scale, const IrType *at) {
  int64_t k, bytes;
  if (dia_const_int(off, &k) && ck_mul(k, scale, &bytes)) {
    if (k == 0) return base;
    off = rw_const(&c->rw, bytes, at);
  } else {
    off = to_width(c, off, at);
    if (scale != 1) off = rw_bin(&c->rw, OP_ARITH_MULI, off, rw_const(&c->rw, scale, at));
  }
  IrValue *opds[2] = {base, off};
  return rw_op1(&c->rw, OP_ARITH_ADDI, 2, opds, at);
}

/* }====================================================================== */

/* {======================================================================
** Shared-memory layout and warp assignment (before any rewrite)
** ======================================================================= */

/* Each allocation's offset goes to op->mark for lower_shared. */
static void mark_offset(IrOp *op, int64_t offset, int64_t bytes, void *ud) {
  (void)bytes, (void)ud;
  op->mark = (uint64_t)offset;
}

/* The kernel's shared memory (kernel_shared_layout), its sizes recorded on the kernel. */
static bool layout_shared(Conv *c) {
  KernelSharedLayout s = kernel_shared_layout(c->rw.kernel, mark_offset, NULL);
  if (s.overflow) {
    ir_op_error(c->rw.kernel, "needs more bytes of shared memory than 64 bits count");
    return false;
  }
  if (s.bytes > SM90_MAX_SMEM) {
    ir_op_error(c->rw.kernel,
                "needs %lld bytes of shared memory (%lld static + kernel_spec.smem), more than %d",
                (long long)s.bytes, (long long)s.static_bytes, SM90_MAX_SMEM);
    return false;
  }
  rw_set_int(&c->rw, c->rw.kernel, "shared_static", s.static_bytes);
  rw_set_int(&c->rw, c->rw.kernel, "shared_bytes", s.bytes);
  rw_set_int(&c->rw, c->rw.kernel, "shared_align", s.align);
  return true;
}

/* }====================================================================== */

/* {======================================================================
** Patterns
** ======================================================================= */

/* The nvvm special register of an id op along its dim (X, Y, Z are consecutive). */
static IrOpKind sreg_of(IrOp *op) {
  int i = ir_attrs_TILE_THREAD_ID(op).dim;
  switch (op->kind) {
  case OP_TILE_THREAD_ID: return (IrOpKind)(OP_NVVM_SREG_TID_X + i);
  case OP_TILE_BLOCK_DIM: return (IrOpKind)(OP_NVVM_SREG_NTID_X + i);
  case OP_TILE_BLOCK_ID: return (IrOpKind)(OP_NVVM_SREG_CTAID_X + i);
  case OP_TILE_GRID_DIM: return (IrOpKind)(OP_NVVM_SREG_NCTAID_X + i);
  case OP_TILE_CLUSTER_ID: return (IrOpKind)(OP_NVVM_SREG_CLUSTERID_X + i);
  case OP_TILE_CLUSTER_GRID_DIM: return (IrOpKind)(OP_NVVM_SREG_NCLUSTERID_X + i);
  case OP_TILE_CLUSTER_BLOCK_ID: return (IrOpKind)(OP_NVVM_SREG_CLUSTER_CTAID_X + i);
  default: return (IrOpKind)(OP_NVVM_SREG_CLUSTER_NCTAID_X + i); /* cluster_dim */
  }
}

static IrValue *lower_id(Conv *c, IrOp *op) {
  return rw_op1(&c->rw, sreg_of(op), 0, NULL, c->rw.i32);
}

/* Agent-relative ids: the agent's first warp was left in op->mark. */
static IrValue *lower_agent_id(Conv *c, IrOp *op) {
  int64_t first = (int64_t)op->mark;
  if (op->kind == OP_TILE_AGENT_WARP_ID)
    return addr_add(c, warp_index(c), rw_const(&c->rw, -first, c->rw.i32), 1, c->rw.i32);
  return addr_add(c, linear_tid(c), rw_const(&c->rw, -32 * first, c->rw.i32), 1, c->rw.i32);
}

static IrValue *lower_ptr_add(Conv *c, IrOp *op) {
  const IrType *p = op->results[0].type;
  return addr_add(c, opd(c, op, 0), opd(c, op, 1), dia_type_bytes(p->elem), addr_type(c, p->space));
}

static IrValue *lower_ptr_cast(Conv *c, IrOp *op) {
  IrMemSpace from = op->operands[0].value->type->space, to = op->results[0].type->space;
  IrValue *v = opd(c, op, 0);
  if (from == to || (from == IR_MS_SHARED && to == IR_MS_CLUSTER)) return v;
  if (from == IR_MS_GLOBAL) return rw_op1(&c->rw, OP_NVVM_CVTA_GLOBAL, 1, &v, c->rw.i64);
  if (to == IR_MS_GLOBAL) return rw_op1(&c->rw, OP_NVVM_CVTA_TO_GLOBAL, 1, &v, c->rw.i64);
  if (from == IR_MS_SHARED) {
    IrValue *w = rw_cast(&c->rw, OP_ARITH_EXTUI, v, c->rw.i64);
    return rw_op1(&c->rw, OP_NVVM_CVTA_SHARED, 1, &w, c->rw.i64);
  }
  IrValue *s = rw_op1(&c->rw, OP_NVVM_CVTA_TO_SHARED, 1, &v, c->rw.i64);
  return rw_cast(&c->rw, OP_ARITH_TRUNCI, s, c->rw.i32);
}

/* ptr_to_int and int_to_ptr: the address is already an integer; index needs a cast. */
static IrValue *lower_ptr_int(Conv *c, IrOp *op) {
  IrValue *v = opd(c, op, 0);
  bool to_int = op->kind == OP_TILE_PTR_TO_INT;
  const IrType *rt = to_int ? op->results[0].type : addr_type(c, op->results[0].type->space);
  const IrType *vt = to_int ? addr_of(c, op->operands[0].value) : v->type;
  if (vt == rt) return v;
  return rw_cast(&c->rw, OP_ARITH_INDEX_CASTUI, v, rt);
}

/* Row-major: base + sum(idx_k * stride_k) * element size. A swizzled memref
** (swizzle S bytes, based at a multiple of 8 * S) permutes the 16-byte chunks
** of each 128-byte row like TMA and wgmma: byte offset o becomes
** o ^ (((o >> 7) & (S / 16 - 1)) << 4) (CuTe's Swizzle<log2(S/16), 4, 3>). */
static IrValue *lower_memref_ptr(Conv *c, IrOp *op) {
  const IrType *m = op->operands[0].value->type, *at = addr_type(c, m->space);
  IrValue *a = opd(c, op, 0);
  int64_t eb = dia_type_bytes(m->elem);
  IrValue *off = m->swizzle ? rw_const(&c->rw, 0, at) : a;
  for (uint32_t k = 1; k < op->noperands; k++) {
    int64_t stride = eb; /* fits: the verifier counted the memref's bytes */
    for (uint32_t j = k; j < m->rank; j++)
      stride = wrap_mul(stride, m->shape[j]);
    off = addr_add(c, off, opd(c, op, k), stride, at);
  }
  if (!m->swizzle) return off;
  IrValue *row = rw_bin(&c->rw, OP_ARITH_SHRUI, off, rw_const(&c->rw, 7, at));
  row = rw_bin(&c->rw, OP_ARITH_ANDI, row, rw_const(&c->rw, m->swizzle / 16 - 1, at));
  row = rw_bin(&c->rw, OP_ARITH_SHLI, row, rw_const(&c->rw, 4, at));
  off = rw_bin(&c->rw, OP_ARITH_XORI, off, row);
  IrValue *opds[2] = {a, off};
  return rw_op1(&c->rw, OP_ARITH_ADDI, 2, opds, at);
}

static IrOpKind by_space(IrMemSpace s, IrOpKind global, IrOpKind shared, IrOpKind cluster,
                         IrOpKind generic) {
  return s == IR_MS_GLOBAL    ? global
         : s == IR_MS_SHARED  ? shared
         : s == IR_MS_CLUSTER ? cluster
                              : generic;
}

static void copy_declared_attrs(IrOp *n, const IrOp *op);

static IrValue *lower_load(Conv *c, IrOp *op) {
  IrOpKind k = by_space(op->operands[0].value->type->space, OP_NVVM_LD_GLOBAL, OP_NVVM_LD_SHARED,
                        OP_NVVM_LD_SHARED_CLUSTER, OP_NVVM_LD_GENERIC);
  IrValue *a = opd(c, op, 0);
  IrOp *ld = rw_op(&c->rw, k, 1, &a, op->results[0].type);
  copy_declared_attrs(ld, op); /* volatile, and the hints of a global load */
  return &ld->results[0];
}

static IrValue *lower_store(Conv *c, IrOp *op) {
  IrOpKind k = by_space(op->operands[1].value->type->space, OP_NVVM_ST_GLOBAL, OP_NVVM_ST_SHARED,
                        OP_NVVM_ST_SHARED_CLUSTER, OP_NVVM_ST_GENERIC);
  IrValue *opds[2] = {opd(c, op, 1), opd(c, op, 0)};
  copy_declared_attrs(rw_op(&c->rw, k, 2, opds, NULL),
                      op); /* volatile, and the hints of a global store */
  return NULL;
}

/* atom, or red when nobody reads the old value (exch has no red form). */
static IrValue *lower_atomic(Conv *c, IrOp *op) {
  IrMemSpace s = op->operands[0].value->type->space;
  IrValue *opds[3] = {opd(c, op, 0), opd(c, op, 1), op->noperands > 2 ? opd(c, op, 2) : NULL};
  IrOp *a;
  if (op->kind == OP_TILE_ATOMIC_CAS) {
    IrOpKind k = by_space(s, OP_NVVM_ATOM_CAS_GLOBAL, OP_NVVM_ATOM_CAS_SHARED,
                          OP_NVVM_ATOM_CAS_SHARED_CLUSTER, OP_NVVM_ATOM_CAS_GLOBAL);
    a = rw_op(&c->rw, k, 3, opds, op->results[0].type);
  } else if (!ir_value_has_uses(&op->results[0]) && ir_attrs_TILE_ATOMIC(op).kind != ATOMIC_EXCH) {
    IrOpKind k = by_space(s, OP_NVVM_RED_GLOBAL, OP_NVVM_RED_SHARED, OP_NVVM_RED_SHARED_CLUSTER,
                          OP_NVVM_RED_GLOBAL);
    a = rw_op(&c->rw, k, 2, opds, NULL);
  } else {
    IrOpKind k = by_space(s, OP_NVVM_ATOM_GLOBAL, OP_NVVM_ATOM_SHARED, OP_NVVM_ATOM_SHARED_CLUSTER,
                          OP_NVVM_ATOM_GLOBAL);
    a = rw_op(&c->rw, k, 2, opds, op->results[0].type);
  }
  rw_copy_attr(a, op, "kind", "op");
  rw_copy_attr(a, op, "scope", NULL);
  return a->nresults ? &a->results[0] : NULL;
}

static IrValue *lower_shared(Conv *c, IrOp *op) {
  IrValue *base = smem_base(c);
  return op->mark ? addr_add(c, base, rw_const(&c->rw, (int64_t)op->mark, c->rw.i32), 1, c->rw.i32)
                  : base;
}

/* Agent ids inside the agent remember its first warp before the body moves. */
static bool mark_agent_ids(IrOp *o, void *ud) {
  if (o->kind == OP_TILE_AGENT_THREAD_ID || o->kind == OP_TILE_AGENT_WARP_ID)
    o->mark = *(uint64_t *)ud;
  return true;
}

static IrValue *lower_agent(Conv *c, IrOp *op) {
  uint64_t first = (uint64_t)kernel_agent_first_warp(op);
  ir_walk_pre(op, mark_agent_ids, &first);
  int64_t nw = ir_attrs_TILE_AGENT(op).num_warps;
  IrValue *rel =
      addr_add(c, warp_index(c), rw_const(&c->rw, -(int64_t)first, c->rw.i32), 1, c->rw.i32);
  rw_inline_block(&c->rw, op->regions[0].first,
                  rw_cmp(&c->rw, "ult", rel, rw_const(&c->rw, nw, c->rw.i32)));
  return NULL;
}

static IrValue *lower_elect_one(Conv *c, IrOp *op) {
  rw_inline_block(&c->rw, op->regions[0].first,
                  rw_op1(&c->rw, OP_NVVM_ELECT_SYNC, 0, NULL, c->rw.i1));
  return NULL;
}

/* The attributes of op that the nvvm op n declares too (ATTR rows of the
** same name), as op has them. */
static void copy_declared_attrs(IrOp *n, const IrOp *op) {
  uint32_t nn, no;
  const IrAttrSpec *ns = ir_op_attr_specs(n->kind, &nn), *os = ir_op_attr_specs(op->kind, &no);
  for (uint32_t i = 0; i < nn; i++)
    for (uint32_t j = 0; j < no; j++) {
      const char *a, *b;
      size_t la = ir_attr_spec_name(&ns[i], &a), lb = ir_attr_spec_name(&os[j], &b);
      if (la != lb || strncmp(a, b, la) != 0) continue;
      char name[64];
      snprintf(name, sizeof name, "%.*s", (int)la, a);
      rw_copy_attr(n, op, name, NULL);
    }
}

/* An nvvm op k taking the same operands (as addresses), with the same result
** (an address for a pointer result) and the attributes both declare: the
** one-to-one lowerings (LOWER rows of tile.def, and the arrives by space). */
static IrValue *lower_one_to_one(Conv *c, IrOp *op, IrOpKind k) {
  IrValue *opds[SM90_PRINTF_MAX_ARGS];
  if (op->noperands > SM90_PRINTF_MAX_ARGS)
    return NULL; /* no one-to-one op takes more (tile.printf the most) */
  for (uint32_t i = 0; i < op->noperands; i++)
    opds[i] = opd(c, op, i);
  const IrType *rt = op->nresults ? op->results[0].type : NULL;
  if (rt && rt->kind == IR_TY_PTR) rt = addr_type(c, rt->space);
  IrOp *n = rw_op(&c->rw, k, op->noperands, opds, rt);
  copy_declared_attrs(n, op);
  return n->nresults ? &n->results[0] : NULL;
}

static IrValue *lower_arrive(Conv *c, IrOp *op) {
  bool remote = op->operands[0].value->type->space == IR_MS_CLUSTER;
  if (op->kind == OP_TILE_MBARRIER_ARRIVE)
    return lower_one_to_one(
        c, op, remote ? OP_NVVM_MBARRIER_ARRIVE_SHARED_CLUSTER : OP_NVVM_MBARRIER_ARRIVE_SHARED);
  return lower_one_to_one(c, op,
                          remote ? OP_NVVM_MBARRIER_ARRIVE_EXPECT_TX_SHARED_CLUSTER
                                 : OP_NVVM_MBARRIER_ARRIVE_EXPECT_TX_SHARED);
}

/* while (!try_wait(bar, parity)) {} */
static IrValue *lower_mbarrier_wait(Conv *c, IrOp *op) {
  IrOp *w = rw_begin_spin(&c->rw);
  IrValue *opds[2] = {opd(c, op, 0), opd(c, op, 1)};
  IrOp *try_wait = rw_op(&c->rw, OP_NVVM_MBARRIER_TRY_WAIT_PARITY_SHARED, 2, opds, c->rw.i1);
  rw_copy_attr(try_wait, op, "scope", NULL);
  IrValue *more =
      rw_bin(&c->rw, OP_ARITH_XORI, &try_wait->results[0], rw_const(&c->rw, 1, c->rw.i1));
  rw_end_spin(&c->rw, w, more);
  return NULL;
}

static IrValue *lower_fence_proxy_async(Conv *c, IrOp *op) {
  IrOp *f = rw_op(&c->rw, OP_NVVM_FENCE_PROXY_ASYNC, 0, NULL, NULL);
  int sp = ir_attrs_TILE_FENCE_PROXY_ASYNC(op).space;
  if (sp >= 0)
    rw_set_str(&c->rw, f, "space",
               PROXY_SPACE_names[sp == FENCE_SPACE_SHARED ? PROXY_SHARED_CTA : PROXY_GLOBAL]);
  return NULL;
}

static IrValue *lower_bulk_wait(Conv *c, IrOp *op) {
  IrOp *w = rw_op(&c->rw, OP_NVVM_CP_ASYNC_BULK_WAIT_GROUP, 0, NULL, NULL);
  rw_set_int(&c->rw, w, "group", ir_attrs_TILE_BULK_WAIT(op).pending);
  rw_copy_attr(w, op, "read", NULL);
  return NULL;
}

static IrValue *lower_cluster_arrive(Conv *c, IrOp *op) {
  bool relaxed = ir_attrs_TILE_CLUSTER_ARRIVE(op).relaxed;
  rw_op(&c->rw, relaxed ? OP_NVVM_CLUSTER_ARRIVE_RELAXED : OP_NVVM_CLUSTER_ARRIVE, 0, NULL, NULL);
  return NULL;
}

/* {======================================================================
** Tensor cores and TMA
** ======================================================================= */

/* An nvvm op over operands [0, nfixed) as they are, then the coordinates of a
** tile TMA op (outermost first) reversed into PTX order (innermost first),
** then the rest; `dim` is the tensor map's rank. */
static IrOp *build_tma(Conv *c, IrOp *op, IrOpKind k, uint32_t nfixed, IrValue *const *fixed,
                       uint32_t first, int rank) {
  IrValue *opds[16];
  uint32_t n = 0;
  for (uint32_t i = 0; i < nfixed; i++)
    opds[n++] = fixed[i];
  for (int i = rank - 1; i >= 0; i--)
    opds[n++] = opd(c, op, first + (uint32_t)i);
  for (uint32_t i = first + (uint32_t)rank; i < op->noperands && n < 16; i++)
    opds[n++] = opd(c, op, i);
  IrOp *t = rw_op(&c->rw, k, n, opds, NULL);
  rw_set_int(&c->rw, t, "dim", rank);
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
    rw_copy_attr(t, op, "multicast", NULL);
    return NULL;
  }
  case OP_TILE_TMA_STORE: {
    int rank = tile_tensor_map_rank(op->operands[0].value->type);
    f[0] = opd(c, op, 0), f[1] = opd(c, op, 1);
    rw_copy_attr(build_tma(c, op, OP_NVVM_CP_ASYNC_BULK_TENSOR_GLOBAL_SHARED_CTA, 2, f, 2, rank),
                 op, "reduce", NULL);
    return NULL;
  }
  default:
    f[0] = opd(c, op, 0);
    build_tma(c, op, OP_NVVM_CP_ASYNC_BULK_PREFETCH_TENSOR, 1, f, 1,
              tile_tensor_map_rank(op->operands[0].value->type));
    return NULL;
  }
}

/* desc = (addr & 0x3FFFF) >> 4 | lbo >> 4 << 16 | sbo >> 4 << 32 | layout << 62,
** layout 1 = 128B, 2 = 64B, 3 = 32B swizzle, 0 = none (PTX ISA, matrix descriptor). */
static IrValue *lower_wgmma_desc(Conv *c, IrOp *op) {
  IrAttrs_TILE_WGMMA_DESC d = ir_attrs_TILE_WGMMA_DESC(op);
  int64_t sw = d.swizzle, lbo = d.lbo, sbo = d.sbo;
  int64_t layout = sw == 128 ? 1 : sw == 64 ? 2 : sw == 32 ? 3 : 0;
  uint64_t hi = (uint64_t)(lbo >> 4) << 16 | (uint64_t)(sbo >> 4) << 32 | (uint64_t)layout << 62;
  IrValue *a = rw_bin(&c->rw, OP_ARITH_ANDI, opd(c, op, 0), rw_const(&c->rw, 0x3FFFF, c->rw.i32));
  a = rw_bin(&c->rw, OP_ARITH_SHRUI, a, rw_const(&c->rw, 4, c->rw.i32));
  a = rw_cast(&c->rw, OP_ARITH_EXTUI, a, c->rw.i64);
  return rw_bin(&c->rw, OP_ARITH_ORI, a, rw_const(&c->rw, (int64_t)hi, c->rw.i64));
}

static IrValue *lower_wgmma(Conv *c, IrOp *op) {
  IrValue *opds[4] = {opd(c, op, 0), opd(c, op, 1), opd(c, op, 2),
                      op->noperands > 3 ? opd(c, op, 3) : rw_const(&c->rw, 1, c->rw.i1)};
  IrOp *w = rw_op(&c->rw, OP_NVVM_WGMMA_MMA_ASYNC, 4, opds, op->results[0].type);
  copy_declared_attrs(w, op);
  return &w->results[0];
}

static IrValue *lower_wgmma_wait(Conv *c, IrOp *op) {
  IrOp *w = rw_op(&c->rw, OP_NVVM_WGMMA_WAIT_GROUP_SYNC_ALIGNED, 0, NULL, NULL);
  rw_set_int(&c->rw, w, "group", ir_attrs_TILE_WGMMA_WAIT(op).pending);
  return NULL;
}

/* }====================================================================== */

/* One tile op to its replacement (NULL when it has no result). */
static IrValue *lower_op(Conv *c, IrOp *op) {
  int to = ir_op_lowers_to(op->kind);
  if (to >= 0) return lower_one_to_one(c, op, (IrOpKind)to);
  switch (op->kind) {
  case OP_TILE_THREAD_ID:
  case OP_TILE_BLOCK_DIM:
  case OP_TILE_BLOCK_ID:
  case OP_TILE_GRID_DIM:
  case OP_TILE_CLUSTER_ID:
  case OP_TILE_CLUSTER_GRID_DIM:
  case OP_TILE_CLUSTER_BLOCK_ID:
  case OP_TILE_CLUSTER_DIM: return lower_id(c, op);
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
  case OP_TILE_ELECT_ONE: return lower_elect_one(c, op);
  case OP_TILE_AGENT: return lower_agent(c, op);
  case OP_TILE_FENCE_PROXY_ASYNC: return lower_fence_proxy_async(c, op);
  case OP_TILE_MBARRIER_ARRIVE:
  case OP_TILE_MBARRIER_ARRIVE_EXPECT_TX: return lower_arrive(c, op);
  case OP_TILE_MBARRIER_WAIT: return lower_mbarrier_wait(c, op);
  case OP_TILE_BULK_WAIT: return lower_bulk_wait(c, op);
  case OP_TILE_CLUSTER_ARRIVE: return lower_cluster_arrive(c, op);
  case OP_TILE_TMA_LOAD:
  case OP_TILE_TMA_STORE:
  case OP_TILE_TMA_PREFETCH: return lower_tma(c, op);
  case OP_TILE_WGMMA_DESC: return lower_wgmma_desc(c, op);
  case OP_TILE_WGMMA: return lower_wgmma(c, op);
  case OP_TILE_WGMMA_WAIT: return lower_wgmma_wait(c, op);
  default: return NULL;
  }
}

/* }====================================================================== */

/* {======================================================================
** Driver
** ======================================================================= */

/* The ops this pass rewrites: every tile op but the kernel and the vector ops. */
static bool is_pattern(const IrOp *op) {
  return ir_op_in_dialect(op->kind, "tile") && op->kind != OP_TILE_KERNEL &&
         op->kind != OP_TILE_EXTRACT && op->kind != OP_TILE_FROM_ELEMENTS &&
         op->kind != OP_TILE_SPLAT && op->kind != OP_TILE_PACK && op->kind != OP_TILE_UNPACK_FP8;
}

/* Pointer parameters reach the body as integers through one cast each; the
** patterns read the cast from the map, other users switch to it at the end. */
static void cast_params(Conv *c) {
  IrBlock *entry = c->rw.entry;
  IrOp *last = NULL;
  for (uint32_t i = 0; i < entry->nargs; i++) {
    IrValue *arg = entry->args[i];
    if (arg->type->kind != IR_TY_PTR || !ir_value_has_uses(arg)) continue;
    if (last) ir_builder_after(&c->rw.b, last);
    else ir_builder_at_start(&c->rw.b, entry);
    c->rw.b.loc = c->rw.kernel->loc;
    last = rw_op(&c->rw, OP_UNREALIZED_CAST, 1, &arg, addr_of(c, arg));
    ir_mapping_set(&c->map, arg, &last->results[0]);
  }
  c->rw.entry_last = last;
}

static void uncast_params(Conv *c) {
  IrBlock *entry = c->rw.entry;
  for (uint32_t i = 0; i < entry->nargs; i++) {
    IrValue *arg = entry->args[i], *cast = ir_mapping_get(&c->map, arg);
    if (!cast) continue;
    ir_value_replace_all_uses(arg, cast);
    ir_op_set_operand(cast->def, 0, arg);
  }
}

/* Pointer and memref values left (scf results and arguments, selects) become addresses. */
static const IrType *address_of(Rewriter *r, const IrValue *v) {
  if (v->type->kind != IR_TY_PTR && v->type->kind != IR_TY_MEMREF) return NULL;
  return addr_type((Conv *)r, v->type->space);
}

/* Build the replacement of op in front of it; its result maps to the new value. */
static void rewrite(Conv *c, IrOp *op) {
  rw_before(&c->rw, op);
  IrValue *v = lower_op(c, op);
  if (op->nresults && v) ir_mapping_set(&c->map, &op->results[0], v);
}

/* Every pattern op built its replacement: switch the uses over, then erase them. */
static void replace_all(Conv *c, IrOpVec *l) {
  for (size_t i = 0; i < l->n; i++) {
    IrOp *op = l->v[i];
    IrValue *v = op->nresults ? ir_mapping_get(&c->map, &op->results[0]) : NULL;
    if (v) ir_value_replace_all_uses(&op->results[0], v);
  }
  for (size_t i = l->n; i-- > 0;)
    ir_op_erase(l->v[i]);
}

static IrResult convert_kernel(Rewriter *r, IrOp *k) {
  Conv *c = (Conv *)r;
  c->smem_base = c->linear_tid = c->warp = NULL;
  memcpy(c->block, kernel_spec(k).block, sizeof c->block);
  IrOpVec l = {0};
  rw_collect(k, is_pattern, &l);
  bool ok = layout_shared(c);
  if (ok) {
    ir_mapping_init(&c->map);
    cast_params(c);
    for (size_t i = 0; i < l.n; i++)
      rewrite(c, l.v[i]);
    replace_all(c, &l);
    uncast_params(c);
    rw_retype(k, address_of, &c->rw);
    ir_mapping_free(&c->map);
  }
  ir_opvec_free(&l);
  return ok ? IR_OK : IR_FAIL;
}

IrResult pass_convert_tile_to_nvvm(IrOp *module, IrPassCtx *pc) {
  Conv c;
  return rw_run(&c.rw, sizeof c, module, pc, convert_kernel);
}

/* }====================================================================== */
