/*
** tile.c -- verifiers of the tile dialect: kernel structure and its kernel_spec.
*/
#include <stdlib.h>
#include <string.h>

#include "../ir/checked.h"
#include "kernel.h"

IrResult tile_verify_kernel(IrOp *op) {
  IrAttrs_TILE_KERNEL a = ir_attrs_TILE_KERNEL(op);
  if (!a.sym_name[0]) {
    ir_op_error(op, "expected a non-empty string attribute 'sym_name'");
    return IR_FAIL;
  }
  const IrAttr *sn = ir_op_attr(op, "sym_name");
  if (!dia_ptx_ident(sn->u.str.s, sn->u.str.len)) {
    StrBuf shown;
    sb_init(&shown);
    ir_print_attr(&shown, sn);
    ir_op_error(
        op,
        "kernel name %s is not a PTX identifier (a letter, '_' or '$', then letters, digits, '_' or '$'; "
        "not '_' or '$' alone, not WARP_SZ)",
        shown.data ? shown.data : "");
    sb_free(&shown);
    return IR_FAIL;
  }
  IrOp *parent = ir_op_parent_op(op);
  if (!parent || parent->kind != OP_MODULE) {
    ir_op_error(op, "must be directly inside a module");
    return IR_FAIL;
  }
  if (!kernel_spec_check(op)) return IR_FAIL;
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
      ir_free(s);
      return IR_FAIL;
    }
    if (ir_type_is_dialect(t, IR_DTY_TILE_TENSOR_MAP) && !tile_check_tensor_map(op, t))
      return IR_FAIL;
    if (ir_type_is_dialect(t, IR_DTY_TILEAS_TENSOR) && !tileas_check_tensor(op, t)) return IR_FAIL;
  }
  if (ir_op_attr(op, "arg_names") && a.arg_names.n != nargs) {
    ir_op_error(op, "arg_names must list one name per parameter (%u)", nargs);
    return IR_FAIL;
  }
  /* Kernel names are unique in their module. */
  for (IrOp *o = op->parent->first; o && o != op; o = o->next)
    if (o->kind == OP_TILE_KERNEL && ir_attrs_TILE_KERNEL(o).sym_name &&
        strcmp(ir_attrs_TILE_KERNEL(o).sym_name, a.sym_name) == 0) {
      IrDiag *d = ir_op_error(op, "redefines kernel '%s'", a.sym_name);
      ir_op_note(d, o, "first defined here");
      return IR_FAIL;
    }
  /* The kernel-wide rules of every dialect (KRULE rows), once. */
  bool ok = true;
#define OP(...)
#define DTYPE(...)
#define KRULE(fn, doc) ok = fn(op) == IR_OK && ok;
#include "all.def"
#undef OP
#undef DTYPE
#undef KRULE
  return ok ? IR_OK : IR_FAIL;
}

/* The agents of a kernel fit its block and do not overlap (a kernel rule). */
IrResult tile_verify_kernel_agents(IrOp *k) {
  KernelSpec ks = kernel_spec(k);
  int64_t next = 0;
  IrBlock *body = k->regions[0].first;
  for (IrOp *o = body ? body->first : NULL; o; o = o->next) {
    if (o->kind != OP_TILE_AGENT) continue;
    IrAttrs_TILE_AGENT a = ir_attrs_TILE_AGENT(o);
    int64_t first = a.warp_id >= 0 ? a.warp_id : next;
    next = first + a.num_warps;
    if (next > ks.warps) {
      ir_op_error(o, "warps [%lld, %lld) do not fit in a block of %lld warps", (long long)first,
                  (long long)next, (long long)ks.warps);
      return IR_FAIL;
    }
    for (IrOp *p = body->first; p != o; p = p->next) {
      if (p->kind != OP_TILE_AGENT) continue;
      int64_t pf = kernel_agent_first_warp(p), pn = ir_attrs_TILE_AGENT(p).num_warps;
      if (pf + pn <= first || next <= pf) continue;
      IrDiag *d = ir_op_error(o, "warps [%lld, %lld) overlap another agent's", (long long)first,
                              (long long)next);
      ir_op_note(d, p, "the other agent");
      return IR_FAIL;
    }
  }
  return IR_OK;
}

/* {======================================================================
** Authoring ops: ids, pointers, memory, shared memory, agents, barriers
** ======================================================================= */

static bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

/* Folds ids and dimensions that the kernel_spec fixes: block and cluster sizes,
** and indices along a dimension of extent 1. */
IrValue *tile_fold_dim(IrBuilder *b, IrOp *op) {
  int d = ir_attrs_TILE_THREAD_ID(op).dim;
  KernelSpec ks = kernel_spec_of(op);
  if (d < 0 || !ks.ok) return NULL;
  const IrType *i32 = op->results[0].type;
  switch (op->kind) {
  case OP_TILE_THREAD_ID: return ks.block[d] == 1 ? ir_build_const_int(b, 0, i32) : NULL;
  case OP_TILE_BLOCK_DIM: return ir_build_const_int(b, ks.block[d], i32);
  case OP_TILE_CLUSTER_BLOCK_ID:
    return ks.has_cluster && ks.cluster[d] == 1 ? ir_build_const_int(b, 0, i32) : NULL;
  case OP_TILE_CLUSTER_DIM:
    return ks.has_cluster ? ir_build_const_int(b, ks.cluster[d], i32) : NULL;
  default: return NULL;
  }
}

IrResult tile_verify_in_agent(IrOp *op) {
  if (ir_op_ancestor(op, OP_TILE_AGENT)) return IR_OK;
  ir_op_error(op, "must be inside a 'tile.agent'");
  return IR_FAIL;
}

/* Address width of a space: 32 bits for shared windows, 64 for the rest. */
static uint32_t space_bits(IrMemSpace s) {
  return s == IR_MS_SHARED || s == IR_MS_CLUSTER ? 32 : 64;
}

IrResult tile_verify_ptr_add(IrOp *op) {
  if (op->results[0].type != op->operands[0].value->type)
    return dia_type_error(op, "result type must equal the pointer type %s",
                          op->operands[0].value->type);
  int64_t eb = dia_type_bytes(op->operands[0].value->type->elem), k, bytes;
  if (eb == 0)
    return dia_type_error(op, "cannot offset a pointer to %s (no size)",
                          op->operands[0].value->type->elem);
  if (dia_const_int(op->operands[1].value, &k) && !ck_mul(k, eb, &bytes)) {
    ir_op_error(op, "offset of %lld elements of %lld bytes is out of the range of a 64-bit address",
                (long long)k, (long long)eb);
    return IR_FAIL;
  }
  return IR_OK;
}

IrValue *tile_fold_ptr_add(IrBuilder *b, IrOp *op) {
  (void)b;
  int64_t v;
  return dia_const_int(op->operands[1].value, &v) && v == 0 ? op->operands[0].value : NULL;
}

IrResult tile_verify_ptr_cast(IrOp *op) {
  IrMemSpace from = op->operands[0].value->type->space, to = op->results[0].type->space;
  bool gs = from == IR_MS_GLOBAL || from == IR_MS_SHARED,
       tgs = to == IR_MS_GLOBAL || to == IR_MS_SHARED;
  bool ok = from == to || (from == IR_MS_GENERIC && tgs) || (to == IR_MS_GENERIC && gs) ||
            (from == IR_MS_SHARED && to == IR_MS_CLUSTER);
  if (ok) return IR_OK;
  ir_op_error(op, "cannot cast a pointer from the %s to the %s space", ir_memspace_name(from),
              ir_memspace_name(to));
  return IR_FAIL;
}

IrResult tile_verify_ptr_int(IrOp *op) {
  bool to_int = op->kind == OP_TILE_PTR_TO_INT;
  const IrType *p = to_int ? op->operands[0].value->type : op->results[0].type;
  const IrType *i = to_int ? op->results[0].type : op->operands[0].value->type;
  uint32_t want = space_bits(p->space), got = ir_type_bitwidth(i);
  if (want == got) return IR_OK;
  ir_op_error(op, "addresses in the %s space are %u-bit integers, got %u bits",
              ir_memspace_name(p->space), want, got);
  return IR_FAIL;
}

IrResult tile_verify_memref_ptr(IrOp *op) {
  const IrType *m = op->operands[0].value->type, *r = op->results[0].type;
  if (!ir_type_has_static_shape(m))
    return dia_type_error(op, "needs a memref of static shape, got %s", m);
  int64_t stride = dia_type_bytes(m->elem), k, off;
  for (uint32_t i = m->rank;
       i-- > 0;) { /* row-major byte strides, and constant indices times them */
    if (i + 1 < op->noperands && dia_const_int(op->operands[i + 1].value, &k) &&
        !ck_mul(k, stride, &off)) {
      ir_op_error(
          op,
          "index #%u (%lld) times its stride of %lld bytes is out of the range of a 64-bit address",
          i + 1, (long long)k, (long long)stride);
      return IR_FAIL;
    }
    if (!ck_mul(stride, m->shape[i], &stride))
      return dia_type_error(op, "memref %s has more bytes than a 64-bit address reaches", m);
  }
  if (op->noperands - 1 > m->rank) {
    ir_op_error(op, "has %u indices for a memref of rank %u", op->noperands - 1, m->rank);
    return IR_FAIL;
  }
  if (r->elem != m->elem || r->space != m->space) {
    ir_op_error(op, "result %s must point to the element type in the space of %s",
                ir_op_type_str(op, r), ir_op_type_str(op, m));
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
    ir_op_error(op, "value type %s must be the pointee of %s or a vector of it",
                ir_op_type_str(op, v), ir_op_type_str(op, p));
    return IR_FAIL;
  }
  return dia_check_mem_value(op, v) ? IR_OK : IR_FAIL;
}

IrResult tile_verify_load(IrOp *op) {
  const IrType *p = op->operands[0].value->type;
  IrAttrs_TILE_LOAD a = ir_attrs_TILE_LOAD(op);
  if (!tile_check_load_hints(op, p->space == IR_MS_GLOBAL, a.volatile_, a.cache, a.evict, a.nc,
                             a.prefetch))
    return IR_FAIL;
  return check_access(op, p, op->results[0].type);
}
IrResult tile_verify_store(IrOp *op) {
  const IrType *p = op->operands[1].value->type;
  IrAttrs_TILE_STORE a = ir_attrs_TILE_STORE(op);
  if (!tile_check_store_hints(op, p->space == IR_MS_GLOBAL, a.volatile_, a.cache, a.evict))
    return IR_FAIL;
  return check_access(op, p, op->operands[0].value->type);
}

/* Which value types an atomic kind takes: add i32 i64 f32 f64; exch 32/64-bit
** anything; the rest i32 and i64. */
static bool atomic_type_ok(int kind, const IrType *t) {
  bool i3264 = ir_type_is_int_width(t, 32) || ir_type_is_int_width(t, 64);
  bool f3264 = t->kind == IR_TY_FLOAT && (t->width == 32 || t->width == 64);
  if (kind == ATOMIC_ADD || kind == ATOMIC_EXCH) return i3264 || f3264;
  return i3264;
}

IrResult tile_verify_atomic(IrOp *op) {
  const IrType *p = op->operands[0].value->type;
  if (p->space != IR_MS_GLOBAL && p->space != IR_MS_SHARED && p->space != IR_MS_CLUSTER) {
    ir_op_error(op, "atomics work on global, shared or cluster pointers, not %s",
                ir_memspace_name(p->space));
    return IR_FAIL;
  }
  for (uint32_t i = 1; i < op->noperands; i++)
    if (op->operands[i].value->type != p->elem)
      return dia_type_error(op, "operands must have the pointee type %s", p->elem);
  if (op->results[0].type != p->elem)
    return dia_type_error(op, "result must have the pointee type %s", p->elem);
  if (op->kind == OP_TILE_ATOMIC_CAS) {
    if (!ir_type_is_int_width(p->elem, 32) && !ir_type_is_int_width(p->elem, 64))
      return dia_type_error(op, "compare-and-swap takes i32 or i64, got %s", p->elem);
    return IR_OK;
  }
  int kind = ir_attrs_TILE_ATOMIC(op).kind;
  if (!atomic_type_ok(kind, p->elem)) {
    ir_op_error(op, "atomic %s does not take %s", ATOMIC_KIND_names[kind],
                ir_op_type_str(op, p->elem));
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
  IrAttrs_TILE_ALLOC_SHARED a = ir_attrs_TILE_ALLOC_SHARED(op);
  if (!is_pow2(a.align)) {
    ir_op_error(op, "alignment %lld is not a power of two", (long long)a.align);
    return IR_FAIL;
  }
  if (t->kind == IR_TY_MEMREF) {
    if (!ir_type_has_static_shape(t) || dia_type_bytes(t->elem) == 0)
      return dia_type_error(op, "needs a static shape of sized elements, got %s", t);
    int64_t n = ir_type_num_elements(t);
    if (n < 0 || n > SM90_MAX_SMEM / dia_type_bytes(t->elem)) {
      ir_op_error(op, "%s is larger than the %d bytes of shared memory", ir_op_type_str(op, t),
                  SM90_MAX_SMEM);
      return IR_FAIL;
    }
    if (t->swizzle && a.align < 8 * (int64_t)t->swizzle) {
      ir_op_error(
          op,
          "a memref swizzled by %u bytes repeats every %u bytes and needs align >= %u, got %lld",
          t->swizzle, 8 * t->swizzle, 8 * t->swizzle, (long long)a.align);
      return IR_FAIL;
    }
  } else {
    if (a.count == 0) {
      ir_op_error(op, "a pointer allocation needs an integer attribute 'count' (elements)");
      return IR_FAIL;
    }
    if (dia_type_bytes(t->elem) == 0)
      return dia_type_error(op, "cannot allocate %s (no size)", t->elem);
  }
  return in_kernel_body(op) ? IR_OK : IR_FAIL;
}

IrResult tile_verify_dynamic_shared(IrOp *op) {
  int64_t align = ir_attrs_TILE_DYNAMIC_SHARED(op).align;
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
  int64_t idx = ir_attrs_TILE_EXTRACT(op).index;
  if (v->rank != 1) return dia_type_error(op, "takes a vector of rank 1, got %s", v);
  if (idx >= v->shape[0]) {
    ir_op_error(op, "index %lld is out of range for %lld elements", (long long)idx,
                (long long)v->shape[0]);
    return IR_FAIL;
  }
  if (op->results[0].type != v->elem)
    return dia_type_error(op, "result must be the element type %s", v->elem);
  return IR_OK;
}

IrResult tile_verify_from_elements(IrOp *op) {
  const IrType *v = op->results[0].type;
  if (v->rank != 1 || v->shape[0] != (int64_t)op->noperands) {
    ir_op_error(op, "%u elements do not make a %s", op->noperands, ir_op_type_str(op, v));
    return IR_FAIL;
  }
  for (uint32_t i = 0; i < op->noperands; i++)
    if (op->operands[i].value->type != v->elem)
      return dia_type_error(op, "every element must have type %s", v->elem);
  return IR_OK;
}

/* printf (tile.printf, nvvm.vprintf): every conversion of `format` takes one
** operand of its kind, as CUDA's vprintf reads the argument buffer: an integer
** of 32 bits (or less) for %d %i %u %x %X %o %c and of 64 bits with l, ll, j,
** z or t; a float for %f %e %g %a (all travel as doubles); a 64-bit pointer or
** integer for %p. A '*' width and %s (a string from the device) are refused. */
IrResult tile_verify_printf(IrOp *op) {
  const char *f = ir_attrs_TILE_PRINTF(op).format;
  uint32_t n = 0;
  if (op->noperands > SM90_PRINTF_MAX_ARGS) {
    ir_op_error(op, "%u operands: a printf takes at most %d", op->noperands, SM90_PRINTF_MAX_ARGS);
    return IR_FAIL;
  }
  for (const char *p = f ? f : ""; *p; p++) {
    if (*p != '%') continue;
    if (p[1] == '%') {
      p++;
      continue;
    }
    const char *start = p++;
    bool star = false;
    while (*p && strchr("-+ #0", *p))
      p++;
    for (; (*p >= '0' && *p <= '9') || *p == '*'; p++)
      star |= *p == '*';
    if (*p == '.')
      for (p++; (*p >= '0' && *p <= '9') || *p == '*'; p++)
        star |= *p == '*';
    int longs = 0;
    while (*p == 'h')
      p++;
    while (*p == 'l')
      longs++, p++;
    if (*p && strchr("jzt", *p)) longs = 2, p++;
    char c = *p;
    int len = (int)(p - start) + (c != 0);
    if (!c) {
      ir_op_error(op, "the format ends inside the conversion '%s'", start);
      return IR_FAIL;
    }
    if (star) {
      ir_op_error(
          op,
          "conversion '%.*s': a '*' width or precision is not supported: write it in the format",
          len, start);
      return IR_FAIL;
    }
    if (c == 's') {
      ir_op_error(op,
                  "conversion '%.*s': a device has no strings to print: put the text in the format",
                  len, start);
      return IR_FAIL;
    }
    bool is_int = strchr("diuxXoc", c) != NULL, is_float = strchr("fFeEgGaA", c) != NULL;
    if (!is_int && !is_float && c != 'p') {
      ir_op_error(op, "unknown conversion '%.*s' (d i u x X o c, f e g a, p, %%%%)", len, start);
      return IR_FAIL;
    }
    if (n >= op->noperands) {
      ir_op_error(op,
                  "conversion %u '%.*s' has no operand: the format takes more than the %u given",
                  n + 1, len, start, op->noperands);
      return IR_FAIL;
    }
    const IrType *t = op->operands[n].value->type;
    bool wide = t->kind == IR_TY_INDEX || t->kind == IR_TY_PTR || ir_type_is_int_width(t, 64);
    const char *want = NULL;
    if (is_float && t->kind != IR_TY_FLOAT) want = "a float";
    else if (is_int && (t->kind == IR_TY_FLOAT || t->kind == IR_TY_PTR))
      want = longs ? "a 64-bit integer" : "an integer of 32 bits or less";
    else if (is_int && wide && !longs)
      want = "an integer of 32 bits or less (a 64-bit one prints with l or ll: %lld)";
    else if (is_int && !wide && longs)
      want = "a 64-bit integer (a 32-bit one prints without l: %d)";
    else if (c == 'p' && !(t->kind == IR_TY_PTR || ir_type_is_int_width(t, 64))) want = "a pointer";
    if (want) {
      ir_op_error(op, "conversion %u '%.*s' takes %s, got %s", n + 1, len, start, want,
                  ir_op_type_str(op, t));
      return IR_FAIL;
    }
    n++;
  }
  if (n != op->noperands) {
    ir_op_error(op, "the format has %u conversion%s for %u operands", n, n == 1 ? "" : "s",
                op->noperands);
    return IR_FAIL;
  }
  return IR_OK;
}

/* Agents are directly in a kernel; tile_verify_kernel_agents places them. */
IrResult tile_verify_agent(IrOp *op) {
  IrOp *k = ir_op_parent_op(op);
  if (!k || k->kind != OP_TILE_KERNEL) {
    ir_op_error(op, "must be directly in the body of a 'tile.kernel'");
    return IR_FAIL;
  }
  IrBlock *body = op->regions[0].first;
  if (body && body->nargs) {
    ir_op_error(op, "region takes no arguments");
    return IR_FAIL;
  }
  return IR_OK;
}

/* mbarriers are i64 words; counts and byte counts must be positive. */
IrResult tile_verify_mbarrier(IrOp *op) {
  const IrType *p = op->operands[0].value->type;
  if (!ir_type_is_int_width(p->elem, 64))
    return dia_type_error(op, "the mbarrier must be an i64 in shared memory, got %s", p);
  int64_t v;
  if (op->noperands > 1 && op->kind != OP_TILE_MBARRIER_TRY_WAIT &&
      op->kind != OP_TILE_MBARRIER_TEST_WAIT && op->kind != OP_TILE_MBARRIER_WAIT &&
      dia_const_int(op->operands[1].value, &v) && (v < 1 || v > SM90_MBARRIER_MAX_COUNT)) {
    ir_op_error(op, "count %lld is out of range [1, 2^20)", (long long)v);
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult tile_verify_bulk_copy(IrOp *op) {
  int64_t bytes;
  if (dia_const_int(op->operands[2].value, &bytes) && (bytes <= 0 || bytes % 16 != 0)) {
    ir_op_error(op, "copies a positive multiple of 16 bytes, got %lld", (long long)bytes);
    return IR_FAIL;
  }
  if (op->kind == OP_TILE_BULK_COPY_G2S &&
      !ir_type_is_int_width(op->operands[3].value->type->elem, 64))
    return dia_type_error(op, "the mbarrier must be an i64 in shared memory, got %s",
                          op->operands[3].value->type);
  return IR_OK;
}

/* cp.async (tile.cp_async, nvvm.cp.async.shared.global): 4, 8 or 16 bytes,
** .cg only for 16, at most `size` bytes read from global. */
IrResult tile_verify_cp_async(IrOp *op) {
  IrAttrs_TILE_CP_ASYNC a = ir_attrs_TILE_CP_ASYNC(op);
  int64_t n;
  if (a.size != 4 && a.size != 8 && a.size != 16) {
    ir_op_error(op, "copies 4, 8 or 16 bytes, got %lld", (long long)a.size);
    return IR_FAIL;
  }
  if (a.cache != CACHE_CA && a.cache != CACHE_CG) {
    ir_op_error(op, "caches as ca or cg, got %s", LOAD_CACHE_names[a.cache]);
    return IR_FAIL;
  }
  if (a.cache == CACHE_CG && a.size != 16) {
    ir_op_error(op, "cg (L2 only) copies 16 bytes, got %lld", (long long)a.size);
    return IR_FAIL;
  }
  if (op->noperands > 2 && dia_const_int(op->operands[2].value, &n) && (n < 0 || n > a.size)) {
    ir_op_error(op, "reads %lld bytes of a %lld-byte copy", (long long)n, (long long)a.size);
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult tile_verify_named_barrier(IrOp *op) {
  int64_t id, count;
  if (dia_const_int(op->operands[0].value, &id) && (id < 0 || id >= SM90_NAMED_BARRIERS)) {
    ir_op_error(op, "barrier id %lld is out of range [0, %d]", (long long)id,
                SM90_NAMED_BARRIERS - 1);
    return IR_FAIL;
  }
  if (dia_const_int(op->operands[1].value, &count) &&
      (count <= 0 || count % SM90_WARP_SIZE != 0 || count > SM90_MAX_THREADS)) {
    ir_op_error(op, "thread count %lld must be a positive multiple of 32 up to %d",
                (long long)count, SM90_MAX_THREADS);
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult tile_verify_mapa(IrOp *op) {
  if (op->results[0].type->elem == op->operands[0].value->type->elem) return IR_OK;
  return dia_type_error(op, "result must point to the same type as the operand %s",
                        op->operands[0].value->type);
}

/* }====================================================================== */
