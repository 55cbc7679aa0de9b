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

/* vprintf(format, args), as nvcc calls it: the format a NUL-terminated
** .global string of the module; the operands promoted as C promotes variadic
** arguments (an integer of 32 bits or less to a 32-bit int, a float to a
** double; 64-bit integers and addresses as they are), each stored at its
** size's alignment into a .local buffer of this block; the generic address
** of the buffer (0 without operands) the second argument. */
void px_emit_vprintf(Emit *e, IrOp *op) {
  const char *f = ir_attrs_TILE_PRINTF(op).format;
  if (!f) f = "";
  uint32_t id = e->nformats++;
  size_t len = strlen(f) + 1;
  sb_printf(&e->globals, ".global .align 1 .b8 __tilua_fmt_%u[%zu] = {", (unsigned)id, len);
  for (size_t i = 0; i < len; i++) sb_printf(&e->globals, "%s%u", i ? ", " : "", (unsigned)(unsigned char)f[i]);
  sb_puts(&e->globals, "};\n");
  e->vprintf = true;
  /* each operand's promoted register and its place in the buffer */
  Regs *val[SM90_PRINTF_MAX_ARGS];
  uint32_t at[SM90_PRINTF_MAX_ARGS], size = 0;
  for (uint32_t i = 0; i < op->noperands && i < SM90_PRINTF_MAX_ARGS; i++) {
    IrValue *v = op->operands[i].value;
    const IrType *t = v->type;
    Regs *r = px_regs(e, v);
    if (t->kind == IR_TY_FLOAT && t->fkind != IR_F64) {
      Regs *d = px_tmp(e, RC_F64);
      if (t->fkind == IR_F32) {
        px_emitf(e, "cvt.f64.f32 %R, %R;", d, r);
      } else { /* f16 / bf16 through f32 */
        Regs *s = px_tmp(e, RC_F32);
        px_emitf(e, "cvt.f32.%s %R, %R;", t->fkind == IR_BF16 ? "bf16" : "f16", s, r);
        px_emitf(e, "cvt.f64.f32 %R, %R;", d, s);
      }
      r = d;
    } else if (r->cls == RC_PRED) {
      Regs *d = px_tmp(e, RC_B32);
      px_emitf(e, "selp.u32 %R, 1, 0, %R;", d, r);
      r = d;
    } else if (r->cls == RC_B16) { /* i8 (kept sign-extended) and i16 */
      Regs *d = px_tmp(e, RC_B32);
      px_emitf(e, "cvt.s32.s16 %R, %R;", d, r);
      r = d;
    }
    uint32_t bytes = r->cls == RC_B64 || r->cls == RC_F64 ? 8 : 4;
    size = (size + bytes - 1) / bytes * bytes;
    at[i] = size;
    size += bytes;
    val[i] = r;
  }
  Regs *buf = px_tmp(e, RC_B64), *args = px_tmp(e, RC_B64), *fmt = px_tmp(e, RC_B64);
  sb_puts(&e->body, "\t{\n");
  if (op->noperands) {
    px_emitf(e, ".local .align 8 .b8 __tilua_printf_args[%u];", (size + 7) / 8 * 8);
    px_emitf(e, "mov.u64 %R, __tilua_printf_args;", buf);
    for (uint32_t i = 0; i < op->noperands && i < SM90_PRINTF_MAX_ARGS; i++) {
      static const char *const st[RC__COUNT] = {"u32", "u32", "u32", "u64", "f32", "f64"};
      px_emitf(e, "st.local.%s [%R+%u], %R;", st[val[i]->cls], buf, at[i], val[i]);
    }
    px_emitf(e, "cvta.local.u64 %R, %R;", args, buf);
  } else {
    px_emitf(e, "mov.u64 %R, 0;", args);
  }
  px_emitf(e, "mov.u64 %R, __tilua_fmt_%u;", fmt, (unsigned)id);
  px_emitf(e, "cvta.global.u64 %R, %R;", fmt, fmt);
  px_emitf(e, ".param .b64 param0;");
  px_emitf(e, "st.param.b64 [param0], %R;", fmt);
  px_emitf(e, ".param .b64 param1;");
  px_emitf(e, "st.param.b64 [param1], %R;", args);
  px_emitf(e, ".param .b32 retval0;");
  px_emitf(e, "call.uni (retval0), vprintf, (param0, param1);");
  sb_puts(&e->body, "\t}\n");
}
