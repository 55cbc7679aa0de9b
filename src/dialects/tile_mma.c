/*
** tile_mma.c -- verifiers of the tensor-core and TMA ops of the tile dialect
** (wgmma, its descriptors and groups, tensor maps and TMA copies, ldmatrix /
** stmatrix, setmaxnreg, splat and pack) and of their nvvm forms. The rules
** are the sm_90a ones of the PTX ISA and cuTensorMapEncodeTiled (see
** docs/tensor.md): shapes, types and immediates wgmma allows, box limits of a
** tensor map, warpgroup-wide execution.
*/
#include <stdlib.h>
#include <string.h>

#include "dialects.h"

static IrResult type_error(IrOp *op, const char *fmt, const IrType *t) {
  char *s = ir_type_to_string(t);
  ir_op_error(op, fmt, s);
  free(s);
  return IR_FAIL;
}

/* {======================================================================
** Tensor maps
** ======================================================================= */


int64_t tile_swizzle_bytes(const char *s) {
  if (!s || !strcmp(s, "linear")) return 0;
  return !strcmp(s, "sw32") ? 32 : !strcmp(s, "sw64") ? 64 : !strcmp(s, "sw128") ? 128 : -1;
}

/* Element types a tensor map can describe (CUtensorMapDataType). */
static bool tma_elem_ok(const IrType *t) {
  if (t->kind == IR_TY_FLOAT) return true;
  return t->kind == IR_TY_INT && (t->width == 8 || t->width == 16 || t->width == 32 || t->width == 64);
}

int tile_tensor_map_rank(const IrType *t) { return ir_type_is_dialect(t, IR_DTY_TILE_TENSOR_MAP) ? (int)t->nparams - 2 : 0; }

bool tile_check_tensor_map(IrOp *op, const IrType *t) {
  if (!ir_type_is_dialect(t, IR_DTY_TILE_TENSOR_MAP)) {
    type_error(op, "expected a !tile.tensor_map, got %s", t);
    return false;
  }
  const IrType *e = t->params[0]->u.ty;
  const char *sw = t->params[1]->u.str.s;
  int rank = (int)t->nparams - 2;
  if (!tma_elem_ok(e)) return type_error(op, "a tensor map cannot hold elements of type %s", e), false;
  int64_t span = tile_swizzle_bytes(sw);
  if (span < 0) {
    ir_op_error(op, "tensor map swizzle '%s' is not one of linear, sw32, sw64, sw128", sw);
    return false;
  }
  if (rank < 1 || rank > 5) {
    ir_op_error(op, "a tensor map box has 1 to 5 dimensions, got %d", rank);
    return false;
  }
  for (int i = 0; i < rank; i++) {
    int64_t b = t->params[2 + i]->u.i;
    if (b < 1 || b > 256) {
      ir_op_error(op, "tensor map box extent %lld (dimension %d) is out of range [1, 256]", (long long)b, i);
      return false;
    }
  }
  int64_t inner = t->params[1 + rank]->u.i * dia_type_bytes(e);
  if (inner % 16) {
    ir_op_error(op, "the innermost box extent is %lld bytes, not a multiple of 16", (long long)inner);
    return false;
  }
  if (span && inner > span) {
    ir_op_error(op, "the innermost box extent is %lld bytes, more than the %lld-byte swizzle span", (long long)inner,
                (long long)span);
    return false;
  }
  return true;
}

int64_t tile_tensor_map_box_bytes(const IrType *t) {
  int64_t n = dia_type_bytes(t->params[0]->u.ty);
  for (uint32_t i = 2; i < t->nparams; i++)
    n *= t->params[i]->u.i;
  return n;
}

/* Coordinates start at operand `first`: `rank` i32 values, then (load with
** multicast) one i16 mask. */
static IrResult check_coords(IrOp *op, uint32_t first, int rank, bool mask) {
  uint32_t want = first + (uint32_t)rank + (mask ? 1 : 0);
  if (op->noperands != want) {
    ir_op_error(op, "expected %d coordinates%s for a rank-%d tensor map, got %d", rank, mask ? " and a CTA mask" : "",
                rank, (int)op->noperands - (int)first - (mask ? 1 : 0));
    return IR_FAIL;
  }
  for (uint32_t i = first; i < first + (uint32_t)rank; i++)
    if (!ir_type_is_int_width(op->operands[i].value->type, 32))
      return type_error(op, "coordinates are i32, got %s", op->operands[i].value->type);
  if (mask && !ir_type_is_int_width(op->operands[want - 1].value->type, 16))
    return type_error(op, "the multicast CTA mask is an i16, got %s", op->operands[want - 1].value->type);
  return IR_OK;
}

static const char *const reduce_ops[] = {"add", "min", "max", "inc", "dec", "and", "or", "xor", NULL};

IrResult tile_verify_tma(IrOp *op) {
  uint32_t mi = op->kind == OP_TILE_TMA_LOAD ? 1 : 0;
  const IrType *m = op->operands[mi].value->type;
  if (!tile_check_tensor_map(op, m)) return IR_FAIL;
  int rank = tile_tensor_map_rank(m);
  if (op->kind == OP_TILE_TMA_PREFETCH) return check_coords(op, 1, rank, false);
  if (op->kind == OP_TILE_TMA_STORE) {
    if (!dia_attr_one_of(op, "reduce", reduce_ops, true)) return IR_FAIL;
    return check_coords(op, 2, rank, false);
  }
  bool mc;
  if (!dia_attr_bool(op, "multicast", false, &mc)) return IR_FAIL;
  if (!ir_type_is_int_width(op->operands[2].value->type->elem, 64))
    return type_error(op, "the mbarrier must be an i64 in shared memory, got %s", op->operands[2].value->type);
  if (mc) {
    int64_t cl[3];
    dia_kernel_dims(op, "cluster", cl, 1);
    if (cl[0] * cl[1] * cl[2] < 2) {
      ir_op_error(op, "multicast needs a kernel with a cluster of 2 or more CTAs");
      return IR_FAIL;
    }
  }
  return check_coords(op, 3, rank, mc);
}

/* }====================================================================== */

/* {======================================================================
** wgmma
** ======================================================================= */

/* Run by whole warpgroups: not under tile.elect_one, and an enclosing agent
** has a multiple of 4 warps; the block a multiple of 128 threads. */
static IrResult check_warpgroup(IrOp *op) {
  IrOp *k = ir_op_ancestor(op, OP_TILE_KERNEL);
  if (!k) {
    ir_op_error(op, "must be inside a 'tile.kernel'");
    return IR_FAIL;
  }
  if (ir_op_ancestor(op, OP_TILE_ELECT_ONE)) {
    ir_op_error(op, "is executed by whole warpgroups and cannot be inside 'tile.elect_one'");
    return IR_FAIL;
  }
  IrOp *a = ir_op_ancestor(op, OP_TILE_AGENT);
  int64_t nw = a ? ir_op_attr_int_or(a, "num_warps", 0) : 0;
  if (a && nw % 4) {
    IrDiag *d = ir_op_error(op, "is executed by whole warpgroups, but its agent has %lld warps (not a multiple of 4)",
                            (long long)nw);
    ir_op_note(d, a, "the agent");
    return IR_FAIL;
  }
  int64_t b[3];
  dia_kernel_dims(op, "block", b, 1);
  if ((b[0] * b[1] * b[2]) % 128) {
    ir_op_error(op, "is executed by whole warpgroups, but the block has %lld threads (not a multiple of 128)",
                (long long)(b[0] * b[1] * b[2]));
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult tile_verify_warpgroup(IrOp *op) {
  static const char *const actions[] = {"inc", "dec", NULL};
  int64_t v;
  if (op->kind == OP_TILE_WGMMA_WAIT && !dia_attr_int_in(op, "pending", 0, 7, 0, &v)) return IR_FAIL;
  if (op->kind == OP_TILE_SETMAXNREG) {
    if (!dia_attr_one_of(op, "action", actions, false)) return IR_FAIL;
    if (!dia_need_int(op, "count", &v)) return IR_FAIL;
    if (v < 24 || v > 256 || v % 8) {
      ir_op_error(op, "register count %lld must be a multiple of 8 in [24, 256]", (long long)v);
      return IR_FAIL;
    }
  }
  return check_warpgroup(op);
}

typedef struct MmaKind {
  const char *name;
  int k;           /* K of the instruction */
  bool trans;      /* transposes allowed (16-bit types only) */
  bool f16_accum;  /* an f16 accumulator allowed */
} MmaKind;

static const MmaKind mma_kinds[] = {
    {"f16", 16, true, true}, {"bf16", 16, true, false}, {"tf32", 8, false, false},
    {"e4m3", 32, false, true}, {"e5m2", 32, false, true}, {NULL, 0, false, false}};

static const MmaKind *mma_kind(const char *s) {
  for (const MmaKind *m = mma_kinds; s && m->name; m++)
    if (!strcmp(m->name, s)) return m;
  return NULL;
}

static bool is_fp8(const MmaKind *m) { return m->k == 32; }

/* The attributes and operand types of a wgmma (tile or nvvm form). */
static IrResult check_wgmma(IrOp *op) {
  static const char *const types[] = {"f16", "bf16", "tf32", "e4m3", "e5m2", NULL};
  if (!dia_attr_one_of(op, "type_a", types, false) || !dia_attr_one_of(op, "type_b", types, false)) return IR_FAIL;
  const MmaKind *ka = mma_kind(ir_op_attr_str(op, "type_a")), *kb = mma_kind(ir_op_attr_str(op, "type_b"));
  if (ka != kb && !(is_fp8(ka) && is_fp8(kb))) {
    ir_op_error(op, "type_a %s and type_b %s cannot be mixed", ka->name, kb->name);
    return IR_FAIL;
  }
  const IrAttr *sh = ir_op_attr(op, "shape");
  if (!sh || sh->kind != IR_ATTR_ARRAY || sh->u.arr.n != 3 || sh->u.arr.elems[0]->kind != IR_ATTR_INT ||
      sh->u.arr.elems[1]->kind != IR_ATTR_INT || sh->u.arr.elems[2]->kind != IR_ATTR_INT) {
    ir_op_error(op, "expected 'shape' = [64, N, K]");
    return IR_FAIL;
  }
  int64_t m = sh->u.arr.elems[0]->u.i, n = sh->u.arr.elems[1]->u.i, k = sh->u.arr.elems[2]->u.i;
  if (m != 64 || n < 8 || n > 256 || n % 8 || k != ka->k) {
    ir_op_error(op, "shape [%lld, %lld, %lld] is not a wgmma shape for %s: m64nNk%d with N a multiple of 8 in [8, 256]",
                (long long)m, (long long)n, (long long)k, ka->name, ka->k);
    return IR_FAIL;
  }
  int64_t sa, sb;
  bool ta, tb;
  if (!dia_attr_int_in(op, "scale_a", -1, 1, 1, &sa) || !dia_attr_int_in(op, "scale_b", -1, 1, 1, &sb) ||
      !dia_attr_bool(op, "trans_a", false, &ta) || !dia_attr_bool(op, "trans_b", false, &tb))
    return IR_FAIL;
  if (sa == 0 || sb == 0) {
    ir_op_error(op, "scale_a and scale_b are 1 or -1");
    return IR_FAIL;
  }
  if ((ta || tb) && !ka->trans) {
    ir_op_error(op, "%s operands must be K-major: trans_a and trans_b are only for f16 and bf16", ka->name);
    return IR_FAIL;
  }
  const IrType *acc = op->operands[0].value->type, *a = op->operands[1].value->type;
  bool f16acc = acc->elem->kind == IR_TY_FLOAT && acc->elem->fkind == IR_F16;
  bool f32acc = acc->elem->kind == IR_TY_FLOAT && acc->elem->fkind == IR_F32;
  if (acc->rank != 1 || acc->shape[0] != n / 2 || !(f32acc || (f16acc && ka->f16_accum))) {
    char *s = ir_type_to_string(acc);
    ir_op_error(op, "the accumulator of a m64n%lld %s wgmma is a vector<%lldxf32>%s, got %s", (long long)n, ka->name,
                (long long)(n / 2), ka->f16_accum ? " or f16" : "", s);
    free(s);
    return IR_FAIL;
  }
  if (op->results[0].type != acc) return type_error(op, "the result must have the accumulator's type %s", acc);
  if (a->kind == IR_TY_VECTOR) {
    if (dia_type_bytes(a) != 16) return type_error(op, "A in registers is 16 bytes (4 x 32 bits) per thread, got %s", a);
    if (ta) {
      ir_op_error(op, "A in registers cannot be transposed (trans_a)");
      return IR_FAIL;
    }
  }
  if (op->noperands > 3 && !ir_type_is_int_width(op->operands[3].value->type, 1))
    return type_error(op, "scale-d is an i1, got %s", op->operands[3].value->type);
  return IR_OK;
}

IrResult tile_verify_wgmma(IrOp *op) {
  if (check_wgmma(op) != IR_OK) return IR_FAIL;
  return check_warpgroup(op);
}

IrResult nvvm_verify_wgmma(IrOp *op) { return check_wgmma(op); }

IrResult tile_verify_wgmma_desc(IrOp *op) {
  static const int64_t ok[] = {0, 32, 64, 128};
  int64_t sw, lbo, sbo;
  if (!dia_attr_int_in(op, "swizzle", 0, 128, 0, &sw) || !dia_attr_int_in(op, "lbo", 0, (1 << 18) - 16, 16, &lbo) ||
      !dia_attr_int_in(op, "sbo", 0, (1 << 18) - 16, 0, &sbo))
    return IR_FAIL;
  bool legal = false;
  for (int i = 0; i < 4; i++)
    legal |= sw == ok[i];
  if (!legal) {
    ir_op_error(op, "swizzle %lld is not one of 0, 32, 64, 128 (bytes)", (long long)sw);
    return IR_FAIL;
  }
  if (lbo % 16 || sbo % 16) {
    ir_op_error(op, "lbo and sbo are byte offsets in units of 16, got %lld and %lld", (long long)lbo, (long long)sbo);
    return IR_FAIL;
  }
  return IR_OK;
}

/* }====================================================================== */

/* {======================================================================
** ldmatrix / stmatrix, splat, pack
** ======================================================================= */

static bool is_half(const IrType *t) {
  return t->kind == IR_TY_FLOAT && (t->fkind == IR_F16 || t->fkind == IR_BF16);
}

/* 32 bits of 16-bit data: an i32 or a vector<2 x f16|bf16|i16>. */
static bool is_b32_pair(const IrType *t) {
  if (ir_type_is_int_width(t, 32)) return true;
  return t->kind == IR_TY_VECTOR && t->rank == 1 && t->shape[0] == 2 &&
         (is_half(t->elem) || ir_type_is_int_width(t->elem, 16));
}

/* Registers (32 bits each) of an ldmatrix result: i32, or a vector of 32-bit
** words (i32) or of 16-bit elements in pairs. */
static int64_t matrix_words(const IrType *t) {
  if (ir_type_is_int_width(t, 32)) return 1;
  if (t->kind != IR_TY_VECTOR || t->rank != 1) return 0;
  if (ir_type_is_int_width(t->elem, 32)) return t->shape[0];
  if ((is_half(t->elem) || ir_type_is_int_width(t->elem, 16)) && t->shape[0] % 2 == 0) return t->shape[0] / 2;
  return 0;
}

static IrResult check_matrix(IrOp *op) {
  bool tr;
  if (!dia_attr_bool(op, "trans", false, &tr)) return IR_FAIL;
  bool st = op->kind == OP_TILE_STMATRIX || op->kind == OP_NVVM_STMATRIX;
  int64_t n = 0;
  if (st) {
    n = op->noperands - 1;
    for (uint32_t i = 1; i < op->noperands; i++)
      if (!is_b32_pair(op->operands[i].value->type))
        return type_error(op, "each matrix is one 32-bit register: an i32 or a vector<2 x 16-bit>, got %s",
                          op->operands[i].value->type);
  } else {
    n = matrix_words(op->results[0].type);
  }
  if (n != 1 && n != 2 && n != 4) {
    ir_op_error(op, "moves 1, 2 or 4 matrices (32-bit registers), got %lld", (long long)n);
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult tile_verify_matrix(IrOp *op) {
  if (check_matrix(op) != IR_OK) return IR_FAIL;
  if (ir_op_ancestor(op, OP_TILE_ELECT_ONE)) {
    ir_op_error(op, "is executed by whole warps and cannot be inside 'tile.elect_one'");
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult nvvm_verify_matrix(IrOp *op) { return check_matrix(op); }

IrResult tile_verify_splat(IrOp *op) {
  const IrType *v = op->results[0].type;
  if (v->rank != 1 || v->elem != op->operands[0].value->type)
    return type_error(op, "result must be a vector of the operand's type, got %s", v);
  return IR_OK;
}

IrResult tile_verify_pack(IrOp *op) {
  const IrType *v = op->results[0].type;
  if (v->rank != 1 || v->shape[0] != 2 || !is_half(v->elem))
    return type_error(op, "packs into a vector<2xbf16> or vector<2xf16>, got %s", v);
  return IR_OK;
}

/* }====================================================================== */

/* {======================================================================
** nvvm TMA
** ======================================================================= */

IrResult nvvm_verify_tma(IrOp *op) {
  int64_t dim;
  bool mc;
  if (!dia_need_int(op, "dim", &dim)) return IR_FAIL;
  if (dim < 1 || dim > 5) {
    ir_op_error(op, "dim %lld is out of range [1, 5]", (long long)dim);
    return IR_FAIL;
  }
  if (!dia_attr_bool(op, "multicast", false, &mc) || !dia_attr_one_of(op, "reduce", reduce_ops, true)) return IR_FAIL;
  uint32_t first = op->kind == OP_NVVM_CP_ASYNC_BULK_TENSOR_SHARED_CLUSTER_GLOBAL ? 3
                   : op->kind == OP_NVVM_CP_ASYNC_BULK_TENSOR_GLOBAL_SHARED_CTA ? 2
                                                                                 : 1;
  return check_coords(op, first, (int)dim, mc);
}

/* }====================================================================== */
