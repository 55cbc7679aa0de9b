/*
** emit_mem.c -- the emitter's hand-written cases (the PTX_HAND rows of
** nvvm.def): loads, stores and atomics (their type suffixes follow the value
** and the operation), the shared buffer, TMA tensor copies (a
** coordinate list as long as the map's rank), wgmma and ld/stmatrix (register
** lists), and the value-level tile ops (vectors are registers).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit_impl.h"

/* {======================================================================
** Vectors (tile.extract, tile.from_elements)
** ======================================================================= */

static void emit_extract(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0], *v = op->operands[0].value;
  int64_t idx = ir_attrs_TILE_EXTRACT(op).index, eb = dia_type_bytes(v->type->elem);
  Regs *rv = px_regs(e, v), *rd = px_regs(e, d);
  if (eb >= 4) {
    px_mov_reg(e, rd, 0, rv, (uint32_t)idx);
    return;
  }
  int64_t per = 4 / eb, word = idx / per, pos = (idx % per) * eb * 8;
  Regs w = {RC_B32, 1, rv->base + (uint32_t)word, false}, *t = px_tmp(e, RC_B32);
  px_emitf(e, "bfe.s32 %R, %R, %d, %d;", t, &w, (int)pos, (int)eb * 8);
  px_emitf(e, "cvt.u16.u32 %v, %R;", d, t);
}

static void emit_from_elements(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0];
  Regs *rd = px_regs(e, d);
  int64_t eb = dia_type_bytes(d->type->elem), per = eb >= 4 ? 1 : 4 / eb;
  for (uint32_t i = 0; i < op->noperands; i++) {
    IrValue *x = op->operands[i].value;
    Regs w = {RC_B32, 1, rd->base + (uint32_t)(i / per), false};
    if (eb >= 4) {
      px_mov_reg(e, rd, i, px_regs(e, x), 0);
    } else if (i % per == 0) {
      px_emitf(e, "cvt.u32.u16 %R, %v;", &w, x);
    } else {
      Regs *t = px_tmp(e, RC_B32);
      px_emitf(e, "cvt.u32.u16 %R, %v;", t, x);
      px_emitf(e, "bfi.b32 %R, %R, %R, %d, %d;", &w, t, &w, (int)((i % per) * eb * 8), (int)eb * 8);
    }
  }
}

/* }====================================================================== */

/* {======================================================================
** Memory
** ======================================================================= */

/* The ld/st type of a value and its vector prefix (".v2", ".v4" or ""). */
static const char *mem_type(Emit *e, IrValue *v, bool load, const char **vec) {
  Regs *r = px_regs(e, v);
  *vec = r->n == 4 ? ".v4" : r->n == 2 ? ".v2" : "";
  if (v->type->kind == IR_TY_VECTOR) return px_rc_mov[r->cls];
  if (px_is_i8(v->type)) return load ? "s8" : "b8";
  return px_rc_mov[r->cls];
}

static const char *space_of(IrOpKind k) {
  switch (k) {
  case OP_NVVM_LD_GLOBAL:
  case OP_NVVM_ST_GLOBAL:
  case OP_NVVM_ATOM_GLOBAL:
  case OP_NVVM_ATOM_CAS_GLOBAL:
  case OP_NVVM_RED_GLOBAL: return ".global";
  case OP_NVVM_LD_SHARED:
  case OP_NVVM_ST_SHARED: return ".shared";
  case OP_NVVM_ATOM_SHARED:
  case OP_NVVM_ATOM_CAS_SHARED:
  case OP_NVVM_RED_SHARED: return ".shared::cta";
  case OP_NVVM_LD_SHARED_CLUSTER:
  case OP_NVVM_ST_SHARED_CLUSTER:
  case OP_NVVM_ATOM_SHARED_CLUSTER:
  case OP_NVVM_ATOM_CAS_SHARED_CLUSTER:
  case OP_NVVM_RED_SHARED_CLUSTER: return ".shared::cluster";
  default: return "";
  }
}

static const char *volatile_of(IrOp *op) {
  bool cluster = op->kind == OP_NVVM_LD_SHARED_CLUSTER || op->kind == OP_NVVM_ST_SHARED_CLUSTER;
  return ir_attrs_NVVM_LD_GLOBAL(op).volatile_ && !cluster ? ".volatile" : "";
}

/* The cache hints of a global load: {.cop}{.nc}{.L1::evict}{.L2::NB} (verified
** to combine; a global store's: {.cop}{.L1::evict}), in a buffer of the
** emitter's arena. */
static const char *load_hints(Emit *e, IrOp *op) {
  if (op->kind != OP_NVVM_LD_GLOBAL && op->kind != OP_NVVM_ST_GLOBAL) return "";
  IrAttrs_NVVM_LD_GLOBAL a = ir_attrs_NVVM_LD_GLOBAL(op);
  if (a.cache < 0 && a.evict < 0 && !a.nc && !a.prefetch) return "";
  char *buf = arena_alloc(ir_arena(e->ctx), 64);
  snprintf(buf, 64, "%s%s%s%s%s%s", a.cache >= 0 ? "." : "",
           a.cache >= 0 ? LOAD_CACHE_names[a.cache] : "", a.nc ? ".nc" : "",
           a.evict >= 0 ? ".L1::" : "", a.evict >= 0 ? L1_EVICT_names[a.evict] : "",
           a.prefetch == 64    ? ".L2::64B"
           : a.prefetch == 128 ? ".L2::128B"
           : a.prefetch == 256 ? ".L2::256B"
                               : "");
  return buf;
}

void px_emit_load(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0], *a = op->operands[0].value;
  const char *vec, *ty;
  if (px_is_i1(d->type)) {
    Regs *t = px_tmp(e, RC_B16);
    px_emitf(e, "ld%s%s.u8 %R, [%v];", volatile_of(op), space_of(op->kind), t, a);
    {
      px_emitf(e, "setp.ne.b16 %v, %R, 0;", d, t);
      return;
    }
  }
  ty = mem_type(e, d, true, &vec);
  px_emitf(e, "ld%s%s%s%s.%s %L, [%v];", volatile_of(op), space_of(op->kind), load_hints(e, op),
           vec, ty, d, a);
}

void px_emit_store(Emit *e, IrOp *op) {
  IrValue *a = op->operands[0].value, *v = op->operands[1].value;
  const char *vec, *ty;
  if (px_is_i1(v->type)) {
    Regs *t = px_tmp(e, RC_B16);
    px_emitf(e, "selp.u16 %R, 1, 0, %v;", t, v);
    {
      px_emitf(e, "st%s%s.u8 [%v], %R;", volatile_of(op), space_of(op->kind), a, t);
      return;
    }
  }
  ty = mem_type(e, v, false, &vec);
  px_emitf(e, "st%s%s%s%s.%s [%v], %L;", volatile_of(op), space_of(op->kind), load_hints(e, op),
           vec, ty, a, v);
}

static const char *const atomic_ptx[] = {ATOMIC_KIND_LIST(PX_OP_PTX)};
static const char atomic_sign[] = {ATOMIC_KIND_LIST(PX_OP_SIGN)};

/* atom / red: atom.scope.space.op.type, the integer type signed or unsigned by
** the operation (umax / umin are max / min on .u types), floats as they are. */
void px_emit_atom(Emit *e, IrOp *op) {
  IrValue *a = op->operands[0].value, *v = op->operands[1].value;
  bool cas = ir_op_attr_set(op->kind) == OP_NVVM_ATOM_CAS_GLOBAL, red = op->nresults == 0;
  const IrType *t = v->type;
  if (cas) {
    px_emitf(e, "atom.%s%s.cas.%s %v, [%v], %v, %v;",
             SCOPE_names[ir_attrs_NVVM_ATOM_CAS_GLOBAL(op).scope], space_of(op->kind),
             px_isfx(t, 'b'), &op->results[0], a, v, op->operands[2].value);
    return;
  }
  IrAttrs_NVVM_ATOM_GLOBAL at = ir_attrs_NVVM_ATOM_GLOBAL(op);
  char sign = atomic_sign[at.op];
  const char *scope = SCOPE_names[at.scope], *mn = atomic_ptx[at.op];
  const char *ty = sign != 'b' && t->kind == IR_TY_FLOAT ? px_fsfx(t) : px_isfx(t, sign);
  if (red) {
    px_emitf(e, "red.%s%s.%s.%s [%v], %v;", scope, space_of(op->kind), mn, ty, a, v);
    return;
  }
  px_emitf(e, "atom.%s%s.%s.%s %v, [%v], %v;", scope, space_of(op->kind), mn, ty, &op->results[0],
           a, v);
}

/* }====================================================================== */

/* {======================================================================
** The shared buffer, inline PTX, casts
** ======================================================================= */

void px_emit_shared_base(Emit *e, IrOp *op) {
  e->smem = true;
  px_emitf(e, "mov.u32 %v, smem;", &op->results[0]);
}

/* builtin.unrealized_conversion_cast between values of one register class:
** the result shares the operand's registers (no instruction). */
static void emit_cast(Emit *e, IrOp *op) {
  if (op->noperands != 1 || op->nresults != 1) {
    px_fail(e, op, "only 1-to-1 casts are emitted");
    return;
  }
  Regs *s = px_regs(e, op->operands[0].value);
  RegClass cls;
  uint32_t n;
  if (!px_type_regs(op->results[0].type, &cls, &n) || cls != s->cls || n != s->n) {
    px_fail(e, op, "the two types differ in their registers");
    return;
  }
  s->aliased = true;
  ptrmap_set(&e->regs, &op->results[0], s);
}

/* }====================================================================== */

/* {======================================================================
** Tensor cores and TMA
** ======================================================================= */

/* Put registers [0, n) of r (or the first register of each of the n values)
** as a braced list. */
static void put_braced(Emit *e, const Regs *r) {
  sb_putc(&e->body, '{');
  for (uint32_t i = 0; i < r->n; i++) {
    if (i) sb_puts(&e->body, ", ");
    px_put_reg(e, r, i);
  }
  sb_putc(&e->body, '}');
}

static void put_values(Emit *e, IrOp *op, uint32_t from, uint32_t to) {
  for (uint32_t i = from; i < to; i++) {
    if (i > from) sb_puts(&e->body, ", ");
    px_put_reg(e, px_regs(e, op->operands[i].value), 0);
  }
}

static void emit_splat(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0], *x = op->operands[0].value;
  Regs *rd = px_regs(e, d), *rx = px_regs(e, x);
  int64_t eb = dia_type_bytes(x->type);
  if (eb >= 4) {
    for (uint32_t i = 0; i < rd->n; i++)
      px_mov_reg(e, rd, i, rx, 0);
    return;
  }
  Regs *w = px_tmp(e, RC_B32), *t = px_tmp(e, RC_B32);
  px_emitf(e, "cvt.u32.u16 %R, %v;", w, x); /* one packed word, then copies of it */
  for (int64_t k = 1; k < 4 / eb; k++) {
    px_emitf(e, "shl.b32 %R, %R, %d;", t, w, (int)(8 * eb));
    px_emitf(e, "or.b32 %R, %R, %R;", w, w, t);
    if (eb == 2) break;
  }
  if (eb == 1) px_emitf(e, "prmt.b32 %R, %R, 0, 0x0000;", w, w);
  for (uint32_t i = 0; i < rd->n; i++)
    px_mov_reg(e, rd, i, w, 0);
}

/* cvt.rn.{bf16x2,f16x2}.f32 d, hi, lo: the first source lands in the upper half. */
static void emit_pack(Emit *e, IrOp *op) {
  IrValue *d = &op->results[0];
  int fp8 = ir_attrs_TILE_PACK(op).fp8;
  if (fp8 >= 0)
    px_emitf(e, "cvt.rn.satfinite.%sx2.f32 %v, %v, %v;", FP8_TYPE_names[fp8], d,
             op->operands[1].value, op->operands[0].value);
  else
    px_emitf(e, "cvt.rn.%sx2.f32 %v, %v, %v;", px_fsfx(d->type->elem), d, op->operands[1].value,
             op->operands[0].value);
}

/* cvt.rn.f16x2.{e4m3x2,e5m2x2} d, a: the low byte becomes the low half. */
static void emit_unpack_fp8(Emit *e, IrOp *op) {
  px_emitf(e, "cvt.rn.f16x2.%sx2 %v, %v;", FP8_TYPE_names[ir_attrs_TILE_UNPACK_FP8(op).fp8],
           &op->results[0], op->operands[0].value);
}

/* " [reg]": operand i as an address. */
static void put_address(Emit *e, IrOp *op, uint32_t i) {
  sb_puts(&e->body, " [");
  put_values(e, op, i, i + 1);
  sb_puts(&e->body, "]");
}

/* " [map, {c0, c1, ...}]": the tensor map (operand map) and n coordinates from operand first. */
static void put_tensor(Emit *e, IrOp *op, uint32_t map, uint32_t first, uint32_t n) {
  sb_puts(&e->body, " [");
  put_values(e, op, map, map + 1);
  sb_puts(&e->body, ", {");
  put_values(e, op, first, first + n);
  sb_puts(&e->body, "}]");
}

void px_emit_tma(Emit *e, IrOp *op) {
  IrAttrs_NVVM_CP_ASYNC_BULK_TENSOR_SHARED_CLUSTER_GLOBAL at =
      ir_attrs_NVVM_CP_ASYNC_BULK_TENSOR_SHARED_CLUSTER_GLOBAL(op);
  int dim = (int)at.dim;
  uint32_t nc = (uint32_t)dim;
  switch (op->kind) {
  case OP_NVVM_CP_ASYNC_BULK_TENSOR_SHARED_CLUSTER_GLOBAL:
    sb_printf(
        &e->body,
        "\tcp.async.bulk.tensor.%dd.shared::cluster.global.tile.mbarrier::complete_tx::bytes%s",
        dim, at.multicast ? ".multicast::cluster" : "");
    put_address(e, op, 0);
    sb_puts(&e->body, ",");
    put_tensor(e, op, 1, 3, nc);
    sb_puts(&e->body, ",");
    put_address(e, op, 2);
    if (at.multicast) {
      sb_puts(&e->body, ", ");
      put_values(e, op, 3 + nc, 4 + nc);
    }
    break;
  case OP_NVVM_CP_ASYNC_BULK_TENSOR_GLOBAL_SHARED_CTA:
    if (at.reduce >= 0)
      sb_printf(&e->body, "\tcp.reduce.async.bulk.tensor.%dd.global.shared::cta.%s.tile.bulk_group",
                dim, TMA_REDUCE_names[at.reduce]);
    else sb_printf(&e->body, "\tcp.async.bulk.tensor.%dd.global.shared::cta.tile.bulk_group", dim);
    put_tensor(e, op, 0, 2, nc);
    sb_puts(&e->body, ",");
    put_address(e, op, 1);
    break;
  case OP_NVVM_CP_ASYNC_BULK_PREFETCH_TENSOR:
    sb_printf(&e->body, "\tcp.async.bulk.prefetch.tensor.%dd.L2.global.tile", dim);
    put_tensor(e, op, 0, 1, nc);
    break;
  default: px_emitf(e, "prefetch.tensormap [%v];", op->operands[0].value); return;
  }
  sb_puts(&e->body, ";\n");
}

/* Whether op is the last reader of v: its only use, or v is defined in op's
** block (an argument of it or an op's result: not a value a loop around op
** reads again) and every other use of v is an op before op in that block
** (already emitted, so v's registers are free after op) other than a wgmma. */
static bool last_use(const IrValue *v, const IrOp *op) {
  if (ir_value_num_uses(v) == 1) return true;
  if (v->def ? v->def->parent != op->parent : v->block != op->parent) return false;
  for (const IrUse *u = v->uses; u; u = u->next) {
    if (u->owner == op) continue;
    /* another wgmma reading v: ptxas then guards the in-place write with an
    ** injected warpgroup.arrive (C7519), which serializes the chain */
    if (u->owner->kind == OP_NVVM_WGMMA_MMA_ASYNC) return false;
    if (u->owner->parent != op->parent) return false;
    const IrOp *o = u->owner;
    while (o && o != op)
      o = o->next;
    if (!o) return false; /* (after op) */
  }
  return true;
}

/* The accumulator is updated in place: the result takes the accumulator's
** registers when nothing reads them afterwards (op is its last use, not
** aliased), so a loop-carried accumulator needs no copies while the wgmma runs
** asynchronously (a copy of registers it is writing would make ptxas
** serialize every wgmma); otherwise it is copied first. */
void px_emit_wgmma_mma(Emit *e, IrOp *op) {
  IrValue *acc = op->operands[0].value, *a = op->operands[1].value, *d = &op->results[0];
  Regs *racc = px_regs(e, acc), *rd = ptrmap_get(&e->regs, d);
  if (!rd && last_use(acc, op) && !racc->aliased) {
    rd = racc;
    ptrmap_set(&e->regs, d, rd);
  } else {
    rd = px_regs(e, d);
    if (rd != racc) px_mov_all(e, rd, racc);
  }
  IrAttrs_TILE_WGMMA at = ir_attrs_TILE_WGMMA(op);
  const char *ta = WGMMA_TYPE_names[at.type_a], *tb = WGMMA_TYPE_names[at.type_b];
#define WG_TRANS(id, name, k, trans, f16_accum) trans,
  static const bool transposes[] = {WGMMA_TYPE_LIST(WG_TRANS)};
#undef WG_TRANS
  bool trans_ok = transposes[at.type_a], regs_a = a->type->kind == IR_TY_VECTOR;
  sb_printf(&e->body, "\twgmma.mma_async.sync.aligned.m64n%lldk%lld.%s.%s.%s ",
            (long long)ir_attr_list_int(at.shape, 1), (long long)ir_attr_list_int(at.shape, 2),
            px_fsfx(acc->type->elem), ta, tb);
  put_braced(e, rd);
  sb_puts(&e->body, ", ");
  if (regs_a) put_braced(e, px_regs(e, a));
  else px_put_reg(e, px_regs(e, a), 0);
  sb_puts(&e->body, ", ");
  px_put_reg(e, px_regs(e, op->operands[2].value), 0);
  sb_puts(&e->body, ", ");
  px_put_reg(e, px_regs(e, op->operands[3].value), 0);
  sb_printf(&e->body, ", %d, %d", (int)at.scale_a, (int)at.scale_b);
  if (trans_ok && !regs_a) sb_printf(&e->body, ", %d", at.trans_a ? 1 : 0);
  if (trans_ok) sb_printf(&e->body, ", %d", at.trans_b ? 1 : 0);
  sb_puts(&e->body, ";\n");
}

void px_emit_matrix(Emit *e, IrOp *op) {
  const char *tr = ir_attrs_TILE_STMATRIX(op).trans ? ".trans" : "";
  if (op->kind == OP_NVVM_STMATRIX) {
    sb_printf(&e->body, "\tstmatrix.sync.aligned.m8n8.x%u%s.shared.b16 [", op->noperands - 1, tr);
    px_put_reg(e, px_regs(e, op->operands[0].value), 0);
    sb_puts(&e->body, "], {");
    put_values(e, op, 1, op->noperands);
    sb_puts(&e->body, "};\n");
    return;
  }
  Regs *rd = px_regs(e, &op->results[0]);
  sb_printf(&e->body, "\tldmatrix.sync.aligned.m8n8.x%u%s.shared.b16 ", rd->n, tr);
  put_braced(e, rd);
  sb_puts(&e->body, ", [");
  px_put_reg(e, px_regs(e, op->operands[0].value), 0);
  sb_puts(&e->body, "];\n");
}

/* }====================================================================== */

/* {======================================================================
** The value-level tile ops (the nvvm ops above are their PTX_HAND rows')
** ======================================================================= */

bool px_emit_values(Emit *e, IrOp *op) {
  switch (op->kind) {
  case OP_UNREALIZED_CAST: emit_cast(e, op); return true;
  case OP_TILE_EXTRACT: emit_extract(e, op); return true;
  case OP_TILE_FROM_ELEMENTS: emit_from_elements(e, op); return true;
  case OP_TILE_SPLAT: emit_splat(e, op); return true;
  case OP_TILE_PACK: emit_pack(e, op); return true;
  case OP_TILE_UNPACK_FP8: emit_unpack_fp8(e, op); return true;
  default: return false;
  }
}

/* }====================================================================== */
