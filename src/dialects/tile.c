/*
** tile.c -- verifiers of the tile dialect: kernel structure and its kernel_spec.
*/
#include <stdlib.h>
#include <string.h>

#include "dialects.h"

#define MAX_SMEM (227 * 1024) /* sm_90 opt-in maximum per block */

/* Read an entry of kernel_spec as 1..3 positive integers. */
static bool spec_dims(IrOp *op, const IrAttr *spec, const char *name, int64_t out[3], int64_t *prod) {
  out[0] = out[1] = out[2] = 1;
  *prod = 1;
  const IrAttr *a = ir_attr_dict_get(spec, name);
  if (!a) return true;
  uint32_t n = a->kind == IR_ATTR_ARRAY ? a->u.arr.n : 0;
  if (a->kind == IR_ATTR_INT) {
    out[0] = a->u.i;
  } else if (n >= 1 && n <= 3) {
    for (uint32_t i = 0; i < n; i++) {
      if (a->u.arr.elems[i]->kind != IR_ATTR_INT) goto bad;
      out[i] = a->u.arr.elems[i]->u.i;
    }
  } else {
    goto bad;
  }
  for (int i = 0; i < 3; i++) {
    if (out[i] <= 0) goto bad;
    *prod *= out[i];
  }
  return true;
bad:
  ir_op_error(op, "kernel_spec.%s must be 1 to 3 positive integers", name);
  return false;
}

IrResult tile_verify_kernel(IrOp *op) {
  const IrAttr *name = ir_op_attr(op, "sym_name");
  if (!name || name->kind != IR_ATTR_STR || name->u.str.len == 0) {
    ir_op_error(op, "expected a non-empty string attribute 'sym_name'");
    return IR_FAIL;
  }
  IrOp *parent = ir_op_parent_op(op);
  if (!parent || parent->kind != OP_MODULE) {
    ir_op_error(op, "must be directly inside a module");
    return IR_FAIL;
  }
  const IrAttr *spec = ir_op_attr(op, "kernel_spec");
  if (!spec || spec->kind != IR_ATTR_DICT) {
    ir_op_error(op, "expected a dictionary attribute 'kernel_spec'");
    return IR_FAIL;
  }
  int64_t block[3], cluster[3], nthreads, ncta;
  if (!spec_dims(op, spec, "block", block, &nthreads) || !spec_dims(op, spec, "cluster", cluster, &ncta))
    return IR_FAIL;
  if (!ir_attr_dict_get(spec, "block")) {
    ir_op_error(op, "kernel_spec needs 'block' (threads per block)");
    return IR_FAIL;
  }
  if (nthreads > 1024) {
    ir_op_error(op, "block of %lld threads exceeds 1024", (long long)nthreads);
    return IR_FAIL;
  }
  if (ncta > 16) {
    ir_op_error(op, "cluster of %lld CTAs exceeds 16", (long long)ncta);
    return IR_FAIL;
  }
  const IrAttr *smem = ir_attr_dict_get(spec, "smem");
  if (smem && (smem->kind != IR_ATTR_INT || smem->u.i < 0 || smem->u.i > MAX_SMEM)) {
    ir_op_error(op, "kernel_spec.smem must be an integer in [0, %d]", MAX_SMEM);
    return IR_FAIL;
  }
  const IrAttr *nc = ir_attr_dict_get(spec, "num_ctas");
  if (nc && (nc->kind != IR_ATTR_INT || nc->u.i != ncta)) {
    ir_op_error(op, "kernel_spec.num_ctas must equal the cluster size %lld", (long long)ncta);
    return IR_FAIL;
  }
  IrBlock *body = op->regions[0].first;
  uint32_t nargs = body ? body->nargs : 0;
  for (uint32_t i = 0; i < nargs; i++) {
    const IrType *t = body->args[i]->type;
    bool ok = t->kind == IR_TY_INT || t->kind == IR_TY_FLOAT || t->kind == IR_TY_INDEX ||
              (t->kind == IR_TY_PTR && (t->space == IR_MS_GLOBAL || t->space == IR_MS_GENERIC)) ||
              t->kind == IR_TY_DIALECT;
    if (!ok) {
      char *s = ir_type_to_string(t);
      ir_op_error(op, "parameter #%u has type %s; kernels take scalars and global pointers", i, s);
      free(s);
      return IR_FAIL;
    }
    if (ir_type_is_dialect(t, IR_DTY_TILE_TENSOR_MAP) && !tile_check_tensor_map(op, t)) return IR_FAIL;
  }
  const IrAttr *names = ir_op_attr(op, "arg_names");
  if (names) {
    if (names->kind != IR_ATTR_ARRAY || names->u.arr.n != nargs) {
      ir_op_error(op, "arg_names must list one name per parameter (%u)", nargs);
      return IR_FAIL;
    }
    for (uint32_t i = 0; i < nargs; i++)
      if (names->u.arr.elems[i]->kind != IR_ATTR_STR) {
        ir_op_error(op, "arg_names[%u] must be a string", i);
        return IR_FAIL;
      }
  }
  /* Kernel names are unique in their module. */
  for (IrOp *o = op->parent->first; o && o != op; o = o->next)
    if (o->kind == OP_TILE_KERNEL && ir_op_attr(o, "sym_name") == name) {
      IrDiag *d = ir_op_error(op, "redefines kernel '%s'", name->u.str.s);
      ir_op_note(d, o, "first defined here");
      return IR_FAIL;
    }
  return tile_check_sync(op) ? IR_OK : IR_FAIL;
}

/* {======================================================================
** Authoring ops: ids, pointers, memory, shared memory, agents, barriers
** ======================================================================= */

/* Type text for a message; the caller frees. */
static char *tstr(const IrType *t) { return ir_type_to_string(t); }

/* An error naming one type: fmt holds a single %s for it. */
static IrResult type_error(IrOp *op, const char *fmt, const IrType *t) {
  char *s = tstr(t);
  ir_op_error(op, fmt, s);
  free(s);
  return IR_FAIL;
}

static const char *const dims_xyz[] = {"x", "y", "z", NULL};
static const char *const scopes[] = {"cta", "cluster", "gpu", "sys", NULL};
static const char *const bar_scopes[] = {"cta", "cluster", NULL};

static bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }


IrResult tile_verify_dim(IrOp *op) { return dia_attr_one_of(op, "dim", dims_xyz, false) ? IR_OK : IR_FAIL; }

static int dim_index(IrOp *op) {
  const char *d = ir_op_attr_str(op, "dim");
  return d && d[0] >= 'x' && d[0] <= 'z' && !d[1] ? d[0] - 'x' : -1;
}

/* Folds ids and dimensions that the kernel_spec fixes: block and cluster sizes,
** and indices along a dimension of extent 1. */
IrValue *tile_fold_dim(IrBuilder *b, IrOp *op) {
  int d = dim_index(op);
  IrOp *k = ir_op_ancestor(op, OP_TILE_KERNEL);
  if (d < 0 || !k) return NULL;
  const IrAttr *spec = ir_op_attr(k, "kernel_spec");
  bool has_cluster = ir_attr_dict_get(spec, "cluster") != NULL;
  int64_t block[3], cluster[3];
  dia_kernel_dims(op, "block", block, 1);
  dia_kernel_dims(op, "cluster", cluster, 1);
  const IrType *i32 = op->results[0].type;
  switch (op->kind) {
  case OP_TILE_THREAD_ID: return block[d] == 1 ? ir_build_const_int(b, 0, i32) : NULL;
  case OP_TILE_BLOCK_DIM: return ir_build_const_int(b, block[d], i32);
  case OP_TILE_CLUSTER_BLOCK_ID: return has_cluster && cluster[d] == 1 ? ir_build_const_int(b, 0, i32) : NULL;
  case OP_TILE_CLUSTER_DIM: return has_cluster ? ir_build_const_int(b, cluster[d], i32) : NULL;
  default: return NULL;
  }
}

IrResult tile_verify_in_agent(IrOp *op) {
  if (ir_op_ancestor(op, OP_TILE_AGENT)) return IR_OK;
  ir_op_error(op, "must be inside a 'tile.agent'");
  return IR_FAIL;
}

/* Address width of a space: 32 bits for shared windows, 64 for the rest. */
static uint32_t space_bits(IrMemSpace s) { return s == IR_MS_SHARED || s == IR_MS_CLUSTER ? 32 : 64; }

IrResult tile_verify_ptr_add(IrOp *op) {
  if (op->results[0].type != op->operands[0].value->type)
    return type_error(op, "result type must equal the pointer type %s", op->operands[0].value->type);
  if (dia_type_bytes(op->operands[0].value->type->elem) == 0)
    return type_error(op, "cannot offset a pointer to %s (no size)", op->operands[0].value->type->elem);
  return IR_OK;
}

IrValue *tile_fold_ptr_add(IrBuilder *b, IrOp *op) {
  (void)b;
  int64_t v;
  return dia_const_int(op->operands[1].value, &v) && v == 0 ? op->operands[0].value : NULL;
}

IrResult tile_verify_ptr_cast(IrOp *op) {
  IrMemSpace from = op->operands[0].value->type->space, to = op->results[0].type->space;
  bool gs = from == IR_MS_GLOBAL || from == IR_MS_SHARED, tgs = to == IR_MS_GLOBAL || to == IR_MS_SHARED;
  bool ok = from == to || (from == IR_MS_GENERIC && tgs) || (to == IR_MS_GENERIC && gs) ||
            (from == IR_MS_SHARED && to == IR_MS_CLUSTER);
  if (ok) return IR_OK;
  ir_op_error(op, "cannot cast a pointer from the %s to the %s space", ir_memspace_name(from), ir_memspace_name(to));
  return IR_FAIL;
}

IrResult tile_verify_ptr_int(IrOp *op) {
  bool to_int = op->kind == OP_TILE_PTR_TO_INT;
  const IrType *p = to_int ? op->operands[0].value->type : op->results[0].type;
  const IrType *i = to_int ? op->results[0].type : op->operands[0].value->type;
  uint32_t want = space_bits(p->space), got = ir_type_bitwidth(i);
  if (want == got) return IR_OK;
  ir_op_error(op, "addresses in the %s space are %u-bit integers, got %u bits", ir_memspace_name(p->space), want, got);
  return IR_FAIL;
}

IrResult tile_verify_memref_ptr(IrOp *op) {
  const IrType *m = op->operands[0].value->type, *r = op->results[0].type;
  if (!ir_type_has_static_shape(m)) return type_error(op, "needs a memref of static shape, got %s", m);
  if (op->noperands - 1 > m->rank) {
    ir_op_error(op, "has %u indices for a memref of rank %u", op->noperands - 1, m->rank);
    return IR_FAIL;
  }
  if (r->elem != m->elem || r->space != m->space) {
    char *a = tstr(m), *b = tstr(r);
    ir_op_error(op, "result %s must point to the element type in the space of %s", b, a);
    free(a);
    free(b);
    return IR_FAIL;
  }
  return IR_OK;
}

/* A memory access of value type v through pointer type p: the value is the
** pointee or a vector of pointees; 1..16 bytes in a form ld/st can move. */
static IrResult check_access(IrOp *op, const IrType *p, const IrType *v) {
  IrMemSpace s = p->space;
  if (s != IR_MS_GLOBAL && s != IR_MS_SHARED && s != IR_MS_CLUSTER && s != IR_MS_GENERIC) {
    ir_op_error(op, "cannot access memory in the %s space", ir_memspace_name(s));
    return IR_FAIL;
  }
  bool fits = v == p->elem || (v->kind == IR_TY_VECTOR && v->rank == 1 && v->elem == p->elem);
  if (!fits) {
    char *a = tstr(v), *b = tstr(p);
    ir_op_error(op, "value type %s must be the pointee of %s or a vector of it", a, b);
    free(a);
    free(b);
    return IR_FAIL;
  }
  if (!dia_check_mem_value(op, v) || !dia_attr_bool(op, "volatile", false, NULL)) return IR_FAIL;
  return IR_OK;
}

IrResult tile_verify_load(IrOp *op) { return check_access(op, op->operands[0].value->type, op->results[0].type); }
IrResult tile_verify_store(IrOp *op) { return check_access(op, op->operands[1].value->type, op->operands[0].value->type); }

static const char *const atomic_kinds[] = {"add", "max", "min", "umax", "umin", "exch", "and", "or", "xor", NULL};

/* Which value types an atomic kind takes: add i32 i64 f32 f64; exch 32/64-bit
** anything; the rest i32 and i64. */
static bool atomic_type_ok(const char *kind, const IrType *t) {
  bool i3264 = ir_type_is_int_width(t, 32) || ir_type_is_int_width(t, 64);
  bool f3264 = t->kind == IR_TY_FLOAT && (t->width == 32 || t->width == 64);
  if (strcmp(kind, "add") == 0 || strcmp(kind, "exch") == 0) return i3264 || f3264;
  return i3264;
}

IrResult tile_verify_atomic(IrOp *op) {
  const IrType *p = op->operands[0].value->type;
  if (p->space != IR_MS_GLOBAL && p->space != IR_MS_SHARED && p->space != IR_MS_CLUSTER) {
    ir_op_error(op, "atomics work on global, shared or cluster pointers, not %s", ir_memspace_name(p->space));
    return IR_FAIL;
  }
  for (uint32_t i = 1; i < op->noperands; i++)
    if (op->operands[i].value->type != p->elem)
      return type_error(op, "operands must have the pointee type %s", p->elem);
  if (op->results[0].type != p->elem) return type_error(op, "result must have the pointee type %s", p->elem);
  if (!dia_attr_one_of(op, "scope", scopes, true)) return IR_FAIL;
  if (op->kind == OP_TILE_ATOMIC_CAS) {
    if (!ir_type_is_int_width(p->elem, 32) && !ir_type_is_int_width(p->elem, 64))
      return type_error(op, "compare-and-swap takes i32 or i64, got %s", p->elem);
    return IR_OK;
  }
  if (!dia_attr_one_of(op, "kind", atomic_kinds, false)) return IR_FAIL;
  const char *kind = ir_op_attr_str(op, "kind");
  if (!atomic_type_ok(kind, p->elem)) {
    char *s = tstr(p->elem);
    ir_op_error(op, "atomic %s does not take %s", kind, s);
    free(s);
    return IR_FAIL;
  }
  return IR_OK;
}

/* Directly in a kernel's body: shared allocations are made once per kernel. */
static bool in_kernel_body(IrOp *op) {
  IrOp *parent = ir_op_parent_op(op);
  if (parent && parent->kind == OP_TILE_KERNEL) return true;
  ir_op_error(op, "must be directly in the body of a 'tile.kernel'");
  return false;
}

IrResult tile_verify_alloc_shared(IrOp *op) {
  const IrType *t = op->results[0].type;
  int64_t align, count;
  if (!dia_attr_int_in(op, "align", 1, 1024, 16, &align)) return IR_FAIL;
  if (!is_pow2(align)) {
    ir_op_error(op, "alignment %lld is not a power of two", (long long)align);
    return IR_FAIL;
  }
  if (t->kind == IR_TY_MEMREF) {
    if (!ir_type_has_static_shape(t) || dia_type_bytes(t->elem) == 0)
      return type_error(op, "needs a static shape of sized elements, got %s", t);
    int64_t n = ir_type_num_elements(t);
    if (n < 0 || n > 232448 / dia_type_bytes(t->elem))
      return type_error(op, "%s is larger than the 232448 bytes of shared memory", t);
    if (t->swizzle && align < 8 * (int64_t)t->swizzle) {
      ir_op_error(op, "a memref swizzled by %u bytes repeats every %u bytes and needs align >= %u, got %lld",
                  t->swizzle, 8 * t->swizzle, 8 * t->swizzle, (long long)align);
      return IR_FAIL;
    }
  } else {
    if (!ir_op_attr(op, "count")) {
      ir_op_error(op, "a pointer allocation needs an integer attribute 'count' (elements)");
      return IR_FAIL;
    }
    if (!dia_attr_int_in(op, "count", 1, 232448, 1, &count)) return IR_FAIL;
    if (dia_type_bytes(t->elem) == 0) return type_error(op, "cannot allocate %s (no size)", t->elem);
  }
  return in_kernel_body(op) ? IR_OK : IR_FAIL;
}

IrResult tile_verify_dynamic_shared(IrOp *op) {
  int64_t align;
  if (!dia_attr_int_in(op, "align", 1, 1024, 16, &align)) return IR_FAIL;
  if (!is_pow2(align)) {
    ir_op_error(op, "alignment %lld is not a power of two", (long long)align);
    return IR_FAIL;
  }
  if (!ir_op_ancestor(op, OP_TILE_KERNEL)) {
    ir_op_error(op, "must be inside a 'tile.kernel'");
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult tile_verify_extract(IrOp *op) {
  const IrType *v = op->operands[0].value->type;
  int64_t idx;
  if (v->rank != 1) return type_error(op, "takes a vector of rank 1, got %s", v);
  if (!dia_need_int(op, "index", &idx)) return IR_FAIL;
  if (idx < 0 || idx >= v->shape[0]) {
    ir_op_error(op, "index %lld is out of range for %lld elements", (long long)idx, (long long)v->shape[0]);
    return IR_FAIL;
  }
  if (op->results[0].type != v->elem) return type_error(op, "result must be the element type %s", v->elem);
  return IR_OK;
}

IrResult tile_verify_from_elements(IrOp *op) {
  const IrType *v = op->results[0].type;
  if (v->rank != 1 || v->shape[0] != (int64_t)op->noperands) {
    char *s = tstr(v);
    ir_op_error(op, "%u elements do not make a %s", op->noperands, s);
    free(s);
    return IR_FAIL;
  }
  for (uint32_t i = 0; i < op->noperands; i++)
    if (op->operands[i].value->type != v->elem) return type_error(op, "every element must have type %s", v->elem);
  return IR_OK;
}

/* Agents: in a kernel, at least one warp, inside the block, no overlaps. */
IrResult tile_verify_agent(IrOp *op) {
  IrOp *k = ir_op_parent_op(op);
  if (!k || k->kind != OP_TILE_KERNEL) {
    ir_op_error(op, "must be directly in the body of a 'tile.kernel'");
    return IR_FAIL;
  }
  int64_t nw, wid;
  if (!dia_need_int(op, "num_warps", &nw)) return IR_FAIL;
  if (nw < 1 || nw > 32) {
    ir_op_error(op, "num_warps must be in [1, 32], got %lld", (long long)nw);
    return IR_FAIL;
  }
  if (!dia_attr_int_in(op, "warp_id", 0, 31, -1, &wid)) return IR_FAIL;
  const IrAttr *name = ir_op_attr(op, "name");
  if (name && name->kind != IR_ATTR_STR) {
    ir_op_error(op, "attribute 'name' must be a string");
    return IR_FAIL;
  }
  IrBlock *body = op->regions[0].first;
  if (body && body->nargs) {
    ir_op_error(op, "region takes no arguments");
    return IR_FAIL;
  }
  int64_t block[3];
  dia_kernel_dims(op, "block", block, 1);
  int64_t warps = (block[0] * block[1] * block[2] + 31) / 32, first = 0;
  for (IrOp *o = op->parent->first; o != op; o = o->next) /* as convert-tile-to-nvvm assigns them */
    if (o->kind == OP_TILE_AGENT) first = ir_op_attr_int_or(o, "warp_id", first) + ir_op_attr_int_or(o, "num_warps", 0);
  if (wid >= 0) first = wid;
  if (first + nw > warps) {
    ir_op_error(op, "warps [%lld, %lld) do not fit in a block of %lld warps", (long long)first,
                (long long)(first + nw), (long long)warps);
    return IR_FAIL;
  }
  for (IrOp *o = op->parent->first; o != op; o = o->next) {
    int64_t ow = ir_op_attr_int_or(o, "warp_id", -1), on = ir_op_attr_int_or(o, "num_warps", 0);
    if (o->kind != OP_TILE_AGENT || wid < 0 || ow < 0 || ow + on <= wid || wid + nw <= ow) continue;
    IrDiag *d = ir_op_error(op, "warps [%lld, %lld) overlap another agent's", (long long)wid, (long long)(wid + nw));
    ir_op_note(d, o, "the other agent");
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult tile_verify_fence(IrOp *op) {
  static const char *const spaces[] = {"shared", "global", NULL};
  if (op->kind == OP_TILE_FENCE) return dia_attr_one_of(op, "scope", scopes, false) ? IR_OK : IR_FAIL;
  return dia_attr_one_of(op, "space", spaces, true) ? IR_OK : IR_FAIL;
}

/* mbarriers are i64 words; counts and byte counts must be positive. */
IrResult tile_verify_mbarrier(IrOp *op) {
  const IrType *p = op->operands[0].value->type;
  if (!ir_type_is_int_width(p->elem, 64)) return type_error(op, "the mbarrier must be an i64 in shared memory, got %s", p);
  int64_t v;
  if (op->noperands > 1 && op->kind != OP_TILE_MBARRIER_TRY_WAIT && op->kind != OP_TILE_MBARRIER_TEST_WAIT &&
      op->kind != OP_TILE_MBARRIER_WAIT && dia_const_int(op->operands[1].value, &v) && (v < 1 || v >= (1 << 20))) {
    ir_op_error(op, "count %lld is out of range [1, 2^20)", (long long)v);
    return IR_FAIL;
  }
  return dia_attr_one_of(op, "scope", bar_scopes, true) ? IR_OK : IR_FAIL;
}

IrResult tile_verify_bulk_copy(IrOp *op) {
  int64_t bytes;
  if (dia_const_int(op->operands[2].value, &bytes) && (bytes <= 0 || bytes % 16 != 0)) {
    ir_op_error(op, "copies a positive multiple of 16 bytes, got %lld", (long long)bytes);
    return IR_FAIL;
  }
  if (op->kind == OP_TILE_BULK_COPY_G2S && !ir_type_is_int_width(op->operands[3].value->type->elem, 64))
    return type_error(op, "the mbarrier must be an i64 in shared memory, got %s", op->operands[3].value->type);
  return IR_OK;
}

IrResult tile_verify_bulk_wait(IrOp *op) {
  int64_t n;
  if (!dia_attr_int_in(op, "pending", 0, 63, 0, &n)) return IR_FAIL;
  return dia_attr_bool(op, "read", false, NULL) ? IR_OK : IR_FAIL;
}

IrResult tile_verify_named_barrier(IrOp *op) {
  int64_t id, count;
  if (dia_const_int(op->operands[0].value, &id) && (id < 0 || id > 15)) {
    ir_op_error(op, "barrier id %lld is out of range [0, 15]", (long long)id);
    return IR_FAIL;
  }
  if (dia_const_int(op->operands[1].value, &count) && (count <= 0 || count % 32 != 0 || count > 1024)) {
    ir_op_error(op, "thread count %lld must be a positive multiple of 32 up to 1024", (long long)count);
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult tile_verify_mapa(IrOp *op) {
  if (op->results[0].type->elem == op->operands[0].value->type->elem) return IR_OK;
  return type_error(op, "result must point to the same type as the operand %s", op->operands[0].value->type);
}

/* }====================================================================== */
