/*
** emit_warp.c -- the emitter's hand-written cases of the warp-wide ops
** (shfl.sync, whose c operand packs segment width and clamp; redux.sync, whose
** type follows the operation), mma.sync (register lists; A and B in .b32
** registers), the approximate math functions and inline PTX ($N, $rN, $$ and
** immediates for 'n' constraints).
*/
#include <stdlib.h>
#include <string.h>

#include "emit_impl.h"

/* shfl.sync.mode.b32 d, a, b, c, mask: c = (32 - width) << 8 | clamp, the
** clamp lane 31 except for up (0), as CUDA's __shfl*_sync write it. */
void px_emit_shfl(Emit *e, IrOp *op) {
  IrAttrs_TILE_SHFL a = ir_attrs_TILE_SHFL(op);
  unsigned c = (unsigned)((32 - a.width) << 8) | (a.mode == SHFL_UP ? 0u : 31u);
  px_emitf(e, "shfl.sync.%s.b32 %v, %v, %v, %u, %x;", SHFL_MODE_names[a.mode], &op->results[0],
           op->operands[0].value, op->operands[1].value, c, (unsigned)a.mask);
}

void px_emit_redux(Emit *e, IrOp *op) {
  static const char *const ptx[] = {REDUX_KIND_LIST(PX_OP_PTX)};
  static const char sign[] = {REDUX_KIND_LIST(PX_OP_SIGN)};
  IrAttrs_TILE_REDUX a = ir_attrs_TILE_REDUX(op);
  px_emitf(e, "redux.sync.%s.%s %v, %v, %x;", ptx[a.kind], px_isfx(op->results[0].type, sign[a.kind]),
           &op->results[0], op->operands[0].value, (unsigned)a.mask);
}

void px_emit_math(Emit *e, IrOp *op) {
  const char *ins = tile_math_instruction(op);
  if (!ins) {
    px_fail(e, op, "no approximation of this function on this type");
    return;
  }
  px_emitf(e, "%s %v, %v;", ins, &op->results[0], op->operands[0].value);
}

/* The registers of an mma.sync operand as .b32 ones (f32 registers of a tf32
** operand are moved). */
static Regs *b32_regs(Emit *e, IrValue *v) {
  Regs *r = px_regs(e, v);
  if (r->cls == RC_B32) return r;
  Regs *t = px_new_regs(e, RC_B32, r->n);
  for (uint32_t i = 0; i < r->n; i++) {
    sb_puts(&e->body, "\tmov.b32 ");
    px_put_reg(e, t, i);
    sb_puts(&e->body, ", ");
    px_put_reg(e, r, i);
    sb_puts(&e->body, ";\n");
  }
  return t;
}

void px_emit_mma_sync(Emit *e, IrOp *op) {
#define MMA_K(id, name, k, trans, f16acc) k,
  static const int kdim[] = {WGMMA_TYPE_LIST(MMA_K)};
#undef MMA_K
  IrAttrs_TILE_MMA_SYNC a = ir_attrs_TILE_MMA_SYNC(op);
  if ((a.type_a == WGMMA_E4M3 || a.type_a == WGMMA_E5M2) && e->version < 84) e->version = 84; /* fp8 mma.sync */
  Regs *ra = b32_regs(e, op->operands[0].value), *rb = b32_regs(e, op->operands[1].value);
  Regs *rc = px_regs(e, op->operands[2].value), *rd = px_regs(e, &op->results[0]);
  sb_printf(&e->body, "\tmma.sync.aligned.m16n8k%d.row.col.f32.%s.%s.f32 ", kdim[a.type_a], WGMMA_TYPE_names[a.type_a],
            WGMMA_TYPE_names[a.type_b]);
  px_put_list(e, rd);
  sb_puts(&e->body, ", ");
  px_put_list(e, ra);
  sb_puts(&e->body, ", ");
  px_put_list(e, rb);
  sb_puts(&e->body, ", ");
  px_put_list(e, rc);
  sb_puts(&e->body, ";\n");
}

/* The constraint letter of value k (results first), 0 when none is given. */
static char constraint_at(const char *cs, uint32_t k) {
  for (const char *p = cs; p && *p; p++) {
    if (*p == ' ' || *p == ',') continue;
    if (k-- == 0) return *p;
  }
  return 0;
}

/* The text with $N / $rN replaced by the registers of operand / result N
** (braced lists for vectors), an 'n' operand by its value, $$ by $. */
void px_emit_inline_ptx(Emit *e, IrOp *op) {
  IrAttrs_NVVM_INLINE_PTX a = ir_attrs_NVVM_INLINE_PTX(op);
  const char *s = a.ptx ? a.ptx : "";
  sb_putc(&e->body, '\t');
  for (const char *p = s; *p; p++) {
    if (*p != '$') {
      sb_putc(&e->body, *p);
      continue;
    }
    if (p[1] == '$') {
      sb_putc(&e->body, '$');
      p++;
      continue;
    }
    bool res = p[1] == 'r';
    char *end;
    long i = strtol(p + 1 + res, &end, 10);
    if (end == p + 1 + res || i < 0 || i >= (long)(res ? op->nresults : op->noperands)) {
      sb_putc(&e->body, *p); /* the verifier refuses this; keep going */
      continue;
    }
    int64_t imm;
    if (res) px_put_list(e, px_regs(e, &op->results[i]));
    else if (constraint_at(a.constraints, op->nresults + (uint32_t)i) == 'n' &&
             dia_const_int(op->operands[i].value, &imm))
      sb_printf(&e->body, "%lld", (long long)imm);
    else px_put_list(e, px_regs(e, op->operands[i].value));
    p = end - 1;
  }
  sb_putc(&e->body, '\n');
}
