/*
** tile_warp.c -- verifiers of the warp-wide ops of the tile dialect and their
** nvvm forms (shfl.sync, mma.sync, approximate math) and of the load hints.
** The rules are the sm_90a ones of the PTX ISA: operand sizes of
** mma.sync.m16n8kK, the types each MUFU function takes, which cache operators
** and eviction priorities combine. Warp-wide ops need every lane of the warp,
** so they cannot sit under tile.elect_one.
*/
#include <stdlib.h>

#include "dialects.h"

static IrResult whole_warp(IrOp *op) {
  if (!ir_op_ancestor(op, OP_TILE_ELECT_ONE)) return IR_OK;
  ir_op_error(op, "is executed by whole warps and cannot be inside 'tile.elect_one'");
  return IR_FAIL;
}

IrResult tile_verify_shfl(IrOp *op) {
  IrAttrs_TILE_SHFL a = ir_attrs_TILE_SHFL(op);
  if (op->results[0].type != op->operands[0].value->type)
    return dia_type_error(op, "result must have the type of the value operand, %s",
                          op->operands[0].value->type);
  if (a.width & (a.width - 1)) {
    ir_op_error(op, "width %lld is not a power of two (1 .. 32)", (long long)a.width);
    return IR_FAIL;
  }
  return whole_warp(op);
}

/* One operand of mma.sync: a rank-1 vector of `bytes` bytes in 8- to 32-bit elements. */
static IrResult mma_operand(IrOp *op, uint32_t i, const char *name, int64_t bytes) {
  const IrType *t = op->operands[i].value->type;
  int64_t eb = t->rank == 1 ? dia_type_bytes(t->elem) : 0;
  if (t->rank != 1 || dia_type_bytes(t) != bytes || eb < 1 || eb > 4 ||
      (t->elem->kind != IR_TY_INT && t->elem->kind != IR_TY_FLOAT)) {
    char *s = ir_type_to_string(t);
    ir_op_error(op, "%s must be %lld bytes of registers per lane (e.g. vector<%lldxi32>), got %s",
                name, (long long)bytes, (long long)bytes / 4, s);
    ir_free(s);
    return IR_FAIL;
  }
  return IR_OK;
}

IrResult tile_verify_mma_sync(IrOp *op) {
  IrAttrs_TILE_MMA_SYNC a = ir_attrs_TILE_MMA_SYNC(op);
  bool fp8a = a.type_a == WGMMA_E4M3 || a.type_a == WGMMA_E5M2;
  bool fp8b = a.type_b == WGMMA_E4M3 || a.type_b == WGMMA_E5M2;
  if (a.type_a != a.type_b && !(fp8a && fp8b)) {
    ir_op_error(op, "A and B must have one type (or both be fp8), got %s and %s",
                WGMMA_TYPE_names[a.type_a], WGMMA_TYPE_names[a.type_b]);
    return IR_FAIL;
  }
  if (mma_operand(op, 0, "A", 16) != IR_OK || mma_operand(op, 1, "B", 8) != IR_OK) return IR_FAIL;
  const IrType *c = op->operands[2].value->type;
  if (c->rank != 1 || c->shape[0] != 4 || c->elem->kind != IR_TY_FLOAT || c->elem->fkind != IR_F32)
    return dia_type_error(op, "the accumulator C must be vector<4xf32>, got %s", c);
  if (op->results[0].type != c)
    return dia_type_error(op, "the result must have the accumulator's type %s", c);
  return whole_warp(op);
}

IrResult tile_verify_math(IrOp *op) {
#define MATH_F32(id, name, f32, f16, bf16) f32,
#define MATH_F16(id, name, f32, f16, bf16) f16,
#define MATH_BF16(id, name, f32, f16, bf16) bf16,
  static const char *const f32[] = {MATH_FN_LIST(MATH_F32)},
                           *const f16[] = {MATH_FN_LIST(MATH_F16)},
                           *const bf16[] = {MATH_FN_LIST(MATH_BF16)};
#undef MATH_F32
#undef MATH_F16
#undef MATH_BF16
  int fn = ir_attrs_TILE_MATH(op).fn;
  const IrType *t = op->results[0].type;
  const char *ins = fn < 0                ? NULL
                    : t->fkind == IR_F32  ? f32[fn]
                    : t->fkind == IR_F16  ? f16[fn]
                    : t->fkind == IR_BF16 ? bf16[fn]
                                          : NULL;
  if (fn >= 0 && !ins) {
    char *s = ir_type_to_string(t);
    ir_op_error(op, "%s has no approximation on %s (f32 only; ex2 and tanh also f16 and bf16)",
                MATH_FN_names[fn], s);
    ir_free(s);
    return IR_FAIL;
  }
  return IR_OK;
}

/* The PTX instruction of a verified tile.math / nvvm.math.approx. */
const char *tile_math_instruction(IrOp *op) {
#define MATH_PTX(id, name, f32, f16, bf16) {f32, f16, bf16},
  static const char *const ins[][3] = {MATH_FN_LIST(MATH_PTX)};
#undef MATH_PTX
  int fn = ir_attrs_TILE_MATH(op).fn;
  IrFloatKind k = op->results[0].type->fkind;
  if (fn < 0 || (k != IR_F32 && k != IR_F16 && k != IR_BF16)) return NULL;
  return ins[fn][k == IR_F32 ? 0 : k == IR_F16 ? 1 : 2];
}

/* Store hints: global memory only, not volatile; a cache operator of st's
** (cg: L2 only, cs: evict first) or an eviction priority, not both. */
bool tile_check_store_hints(IrOp *op, bool global, bool vol, int cache, int evict) {
  if (cache < 0 && evict < 0) return true;
  if (!global) {
    ir_op_error(op, "cache hints (cache, evict) apply to global stores only");
    return false;
  }
  if (vol) {
    ir_op_error(op, "a volatile store takes no cache hints");
    return false;
  }
  if (cache >= 0 && evict >= 0) {
    ir_op_error(op, "a store takes a cache operator or an eviction priority, not both");
    return false;
  }
  if (cache >= 0 && cache != CACHE_CG && cache != CACHE_CS) {
    ir_op_error(op, "a store's cache operator is cg or cs, got %s", LOAD_CACHE_names[cache]);
    return false;
  }
  return true;
}

/* Load hints: global memory only, not volatile; a cache operator or an
** eviction priority, not both; an L2 prefetch of 64, 128 or 256 bytes. */
bool tile_check_load_hints(IrOp *op, bool global, bool vol, int cache, int evict, bool nc,
                           int64_t prefetch) {
  bool any = cache >= 0 || evict >= 0 || nc || prefetch;
  if (!any) return true;
  if (!global) {
    ir_op_error(op, "cache hints (cache, evict, nc, prefetch) apply to global loads only");
    return false;
  }
  if (vol) {
    ir_op_error(op, "a volatile load takes no cache hints");
    return false;
  }
  if (cache >= 0 && evict >= 0) {
    ir_op_error(op, "a load takes a cache operator or an eviction priority, not both");
    return false;
  }
  if (prefetch && prefetch != 64 && prefetch != 128 && prefetch != 256) {
    ir_op_error(op, "prefetch must be 64, 128 or 256 bytes, got %lld", (long long)prefetch);
    return false;
  }
  if (nc && (cache == CACHE_CV || cache == CACHE_LU)) {
    ir_op_error(op, "the non-coherent path (nc) takes cache operators ca, cg and cs only");
    return false;
  }
  return true;
}
