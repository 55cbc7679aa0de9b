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

#include "kernel.h"

/* {======================================================================
** Tensor maps
** ======================================================================= */


int64_t tile_swizzle_bytes(const char *s) {
#define BYTES(id, name, bytes) bytes,
  static const int64_t bytes[] = {TMA_SWIZZLE_LIST(BYTES)};
#undef BYTES
  if (!s) return 0;
  int i = ir_enum_index(TMA_SWIZZLE_names, s);
  return i < 0 ? -1 : bytes[i];
}

/* Element types a tensor map can describe (CUtensorMapDataType). */
static bool tma_elem_ok(const IrType *t) {
  if (t->kind == IR_TY_FLOAT) return true;
  return t->kind == IR_TY_INT && (t->width == 8 || t->width == 16 || t->width == 32 || t->width == 64);
}

int tile_tensor_map_rank(const IrType *t) { return ir_type_is_dialect(t, IR_DTY_TILE_TENSOR_MAP) ? (int)t->nparams - 2 : 0; }

bool tile_check_tensor_map(IrOp *op, const IrType *t) {
  if (!ir_type_is_dialect(t, IR_DTY_TILE_TENSOR_MAP)) {
    dia_type_error(op, "expected a !tile.tensor_map, got %s", t);
    return false;
  }
  const IrType *e = t->params[0]->u.ty;
  const char *sw = t->params[1]->u.str.s;
  int rank = (int)t->nparams - 2;
  if (!tma_elem_ok(e)) return dia_type_error(op, "a tensor map cannot hold elements of type %s", e), false;
  int64_t span = tile_swizzle_bytes(sw);
  if (!ir_op_require(op, span >= 0, "tensor map swizzle '%s' is not one of linear, sw32, sw64, sw128", sw) ||
      !ir_op_require(op, rank >= 1 && rank <= 5, "a tensor map box has 1 to 5 dimensions, got %d", rank))
    return false;
  for (int i = 0; i < rank; i++) {
    int64_t b = t->params[2 + i]->u.i;
    if (!ir_op_require(op, b >= 1 && b <= 256, "tensor map box extent %lld (dimension %d) is out of range [1, 256]",
                       (long long)b, i))
      return false;
  }
  int64_t inner = t->params[1 + rank]->u.i * dia_type_bytes(e);
  return ir_op_require(op, inner % 16 == 0, "the innermost box extent is %lld bytes, not a multiple of 16",
                       (long long)inner) &&
         ir_op_require(op, !span || inner <= span,
                       "the innermost box extent is %lld bytes, more than the %lld-byte swizzle span",
                       (long long)inner, (long long)span);
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
      return dia_type_error(op, "coordinates are i32, got %s", op->operands[i].value->type);
  if (mask && !ir_type_is_int_width(op->operands[want - 1].value->type, 16))
    return dia_type_error(op, "the multicast CTA mask is an i16, got %s", op->operands[want - 1].value->type);
  return IR_OK;
}

IrResult tile_verify_tma(IrOp *op) {
  uint32_t mi = op->kind == OP_TILE_TMA_LOAD ? 1 : 0;
  const IrType *m = op->operands[mi].value->type;
  if (!tile_check_tensor_map(op, m)) return IR_FAIL;
  int rank = tile_tensor_map_rank(m);
  if (op->kind == OP_TILE_TMA_PREFETCH) return check_coords(op, 1, rank, false);
  if (op->kind == OP_TILE_TMA_STORE) return check_coords(op, 2, rank, false);
  bool mc = ir_attrs_TILE_TMA_LOAD(op).multicast;
  if (!ir_type_is_int_width(op->operands[2].value->type->elem, 64))
    return dia_type_error(op, "the mbarrier must be an i64 in shared memory, got %s", op->operands[2].value->type);
  if (mc) {
    if (kernel_spec_of(op).ctas < 2) {
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
  int64_t nw = a ? ir_attrs_TILE_AGENT(a).num_warps : 0;
  if (a && nw % 4) {
    IrDiag *d = ir_op_error(op, "is executed by whole warpgroups, but its agent has %lld warps (not a multiple of 4)",
                            (long long)nw);
    ir_op_note(d, a, "the agent");
    return IR_FAIL;
  }
  int64_t threads = kernel_spec_of(op).threads;
  if (threads % 128) {
    ir_op_error(op, "is executed by whole warpgroups, but the block has %lld threads (not a multiple of 128)",
                (long long)threads);
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult tile_verify_warpgroup(IrOp *op) {
  if (op->kind == OP_TILE_SETMAXNREG && ir_attrs_TILE_SETMAXNREG(op).count % 8) {
    ir_op_error(op, "register count %lld must be a multiple of 8 in [%d, %d]",
                (long long)ir_attrs_TILE_SETMAXNREG(op).count, SM90_MAXNREG_MIN, SM90_MAXNREG_MAX);
    return IR_FAIL;
  }
  return check_warpgroup(op);
}

typedef struct MmaKind {
  const char *name;
  int k;          /* K of the instruction */
  bool trans;     /* transposes allowed (16-bit types only) */
  bool f16_accum; /* an f16 accumulator allowed */
} MmaKind;

#define MMA_KIND(id, name, k, trans, f16_accum) {name, k, trans, f16_accum},
static const MmaKind mma_kinds[] = {WGMMA_TYPE_LIST(MMA_KIND)};
#undef MMA_KIND

static bool is_fp8(const MmaKind *m) { return m->k == 32; }

/* The attributes and operand types of a wgmma (tile or nvvm form). */
static IrResult check_wgmma(IrOp *op) {
  IrAttrs_TILE_WGMMA at = ir_attrs_TILE_WGMMA(op);
  const MmaKind *ka = &mma_kinds[at.type_a], *kb = &mma_kinds[at.type_b];
  if (ka != kb && !(is_fp8(ka) && is_fp8(kb))) {
    ir_op_error(op, "type_a %s and type_b %s cannot be mixed", ka->name, kb->name);
    return IR_FAIL;
  }
  if (at.shape.n != 3) {
    ir_op_error(op, "expected 'shape' = [64, N, K]");
    return IR_FAIL;
  }
  int64_t m = ir_attr_list_int(at.shape, 0), n = ir_attr_list_int(at.shape, 1), k = ir_attr_list_int(at.shape, 2);
  if (m != 64 || n < 8 || n > 256 || n % 8 || k != ka->k) {
    ir_op_error(op, "shape [%lld, %lld, %lld] is not a wgmma shape for %s: m64nNk%d with N a multiple of 8 in [8, 256]",
                (long long)m, (long long)n, (long long)k, ka->name, ka->k);
    return IR_FAIL;
  }
  bool ta = at.trans_a, tb = at.trans_b;
  if (at.scale_a == 0 || at.scale_b == 0) {
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
    ir_free(s);
    return IR_FAIL;
  }
  if (op->results[0].type != acc) return dia_type_error(op, "the result must have the accumulator's type %s", acc);
  if (a->kind == IR_TY_VECTOR) {
    if (dia_type_bytes(a) != 16) return dia_type_error(op, "A in registers is 16 bytes (4 x 32 bits) per thread, got %s", a);
    if (ta) {
      ir_op_error(op, "A in registers cannot be transposed (trans_a)");
      return IR_FAIL;
    }
  }
  if (op->noperands > 3 && !ir_type_is_int_width(op->operands[3].value->type, 1))
    return dia_type_error(op, "scale-d is an i1, got %s", op->operands[3].value->type);
  return IR_OK;
}

IrResult tile_verify_wgmma(IrOp *op) {
  if (check_wgmma(op) != IR_OK) return IR_FAIL;
  return check_warpgroup(op);
}

IrResult nvvm_verify_wgmma(IrOp *op) { return check_wgmma(op); }

IrResult tile_verify_wgmma_desc(IrOp *op) {
  static const int64_t ok[] = {0, 32, 64, 128};
  IrAttrs_TILE_WGMMA_DESC a = ir_attrs_TILE_WGMMA_DESC(op);
  int64_t sw = a.swizzle, lbo = a.lbo, sbo = a.sbo;
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
  bool st = op->kind == OP_TILE_STMATRIX || op->kind == OP_NVVM_STMATRIX;
  int64_t n = 0;
  if (st) {
    n = op->noperands - 1;
    for (uint32_t i = 1; i < op->noperands; i++)
      if (!is_b32_pair(op->operands[i].value->type))
        return dia_type_error(op, "each matrix is one 32-bit register: an i32 or a vector<2 x 16-bit>, got %s",
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
    return dia_type_error(op, "result must be a vector of the operand's type, got %s", v);
  return IR_OK;
}

/* tile.pack: into a half pair, or with fp8 into an i16; tile.unpack_fp8: an
** i16 into a vector<2xf16>. */
IrResult tile_verify_pack(IrOp *op) {
  const IrType *v = op->results[0].type;
  if (op->kind == OP_TILE_UNPACK_FP8) {
    if (v->kind != IR_TY_VECTOR || v->rank != 1 || v->shape[0] != 2 || v->elem->kind != IR_TY_FLOAT ||
        v->elem->fkind != IR_F16)
      return dia_type_error(op, "unpacks into a vector<2xf16>, got %s", v);
    return IR_OK;
  }
  if (ir_attrs_TILE_PACK(op).fp8 >= 0) {
    if (!ir_type_is_int_width(v, 16)) return dia_type_error(op, "packs two fp8 values into an i16, got %s", v);
    return IR_OK;
  }
  if (v->kind != IR_TY_VECTOR || v->rank != 1 || v->shape[0] != 2 || !is_half(v->elem))
    return dia_type_error(op, "packs into a vector<2xbf16> or vector<2xf16>, got %s", v);
  return IR_OK;
}

/* }====================================================================== */

/* {======================================================================
** nvvm TMA
** ======================================================================= */

IrResult nvvm_verify_tma(IrOp *op) {
  IrAttrs_NVVM_CP_ASYNC_BULK_TENSOR_SHARED_CLUSTER_GLOBAL a = ir_attrs_NVVM_CP_ASYNC_BULK_TENSOR_SHARED_CLUSTER_GLOBAL(op);
  int64_t dim = a.dim;
  bool mc = a.multicast;
  uint32_t first = op->kind == OP_NVVM_CP_ASYNC_BULK_TENSOR_SHARED_CLUSTER_GLOBAL ? 3
                   : op->kind == OP_NVVM_CP_ASYNC_BULK_TENSOR_GLOBAL_SHARED_CTA ? 2
                                                                                 : 1;
  return check_coords(op, first, (int)dim, mc);
}

/* }====================================================================== */
