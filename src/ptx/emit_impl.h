/*
** emit_impl.h -- the state and the shared helpers of the PTX emitter's three
** files: emit.c (registers, the generic path of PTX templates, control flow,
** the op switch, kernels), emit_arith.c (arith), emit_mem.c (vectors, loads,
** stores, atomics, tensor cores and TMA) and emit_warp.c (warp-wide ops,
** mma.sync, approximate math, inline PTX): the nvvm ops whose PTX_HAND rows
** say a template cannot write them.
*/
#ifndef TILUA_EMIT_IMPL_H
#define TILUA_EMIT_IMPL_H

#include "../dialects/dialects.h"
#include "ptx.h"

typedef enum { RC_PRED, RC_B16, RC_B32, RC_B64, RC_F32, RC_F64, RC__COUNT } RegClass;

extern const char *const px_rc_mov[RC__COUNT]; /* the mov / ld type of a class: b32, f32 ... */

/* The registers of one value: n consecutive registers of a class. */
typedef struct Regs {
  RegClass cls;
  uint32_t n, base;
  bool aliased; /* another value holds these registers too (a cast): never updated in place */
} Regs;

#define MAX_VECTOR_REGS 256 /* registers of one vector value (wgmma accumulators: up to 128) */

typedef struct Emit {
  IrContext *ctx;
  StrBuf body; /* the current kernel's instructions */
  PtrMap regs; /* IrValue * -> Regs * */
  uint32_t next[RC__COUNT];
  uint32_t label, kernel;
  bool failed, smem; /* smem: some kernel uses the dynamic shared buffer */
  int64_t smem_align;
  unsigned version; /* the .version the instructions emitted need, in tenths (PTX_VERSION_MIN at least) */
  /* Line info: .file N "path" for each source file seen (files: interned path ->
  ** N, 1-based), and the .loc last written, so that a line is written once. */
  PtrMap files;
  StrBuf file_decls;
  uint32_t nfiles;
  const char *loc_file;
  int loc_line;
  size_t loc_start, loc_end; /* where the last .loc sits in body (replaced when nothing follows it) */
  /* Module-level declarations: printf's format strings (__tilua_fmt_N), and
  ** whether a kernel calls vprintf (declared .extern then). */
  StrBuf globals;
  uint32_t nformats;
  bool vprintf;
} Emit;

/* {=== registers and formatting (emit.c) */
/* "cannot be emitted as PTX: why" at op; marks the module failed. */
bool px_fail(Emit *e, IrOp *op, const char *why);
/* The registers a value of type t takes: a scalar, or a vector's elements or packed words. */
bool px_type_regs(const IrType *t, RegClass *cls, uint32_t *n);
Regs *px_new_regs(Emit *e, RegClass cls, uint32_t n);
Regs *px_tmp(Emit *e, RegClass cls);
/* The registers of a value, allocated on first sight. */
Regs *px_regs(Emit *e, IrValue *v);
void px_put_reg(Emit *e, const Regs *r, uint32_t i);
void px_put_list(Emit *e, const Regs *r); /* r0, or {r0, r1, ...} */
/* One instruction line: %v a value (first register), %L a value (all, braced
** when several), %R a Regs *, %s %d %l %u as printf, %x as 0x%x, %% a percent sign. */
void px_emitf(Emit *e, const char *fmt, ...);
void px_mov_reg(Emit *e, const Regs *d, uint32_t i, const Regs *s, uint32_t j);
void px_mov_all(Emit *e, const Regs *d, const Regs *s);
/* Type suffixes: the integer one at the register width with a sign letter
** ('s', 'u', 'b'), at the exact width (s8 for cvt sources), the float one. */
uint32_t px_width_of(const IrType *t);
const char *px_isfx(const IrType *t, char sign);
const char *px_isfx_exact(const IrType *t, char sign);
const char *px_fsfx(const IrType *t);
bool px_is_i8(const IrType *t);
bool px_is_i1(const IrType *t);
/* i8 in a .b16 register: re-extend a result, or a zero-extended copy of an operand. */
void px_norm8(Emit *e, IrValue *v);
Regs *px_zext8(Emit *e, IrValue *v);
/* }=== */

/* The PTX columns of the operation lists of enums.h (ATOMIC_KIND, REDUX_KIND,
** CMPI_PRED: X(id, name, PTX operation, sign); CMPF_PRED has no sign) as array
** elements, indexed by the enumerator. */
#define PX_OP_PTX(id, name, ptx, ...) ptx,
#define PX_OP_SIGN(id, name, ptx, sign) sign,

/* The hand-written cases of the arith ops and of the value-level tile ops:
** false when op is not theirs. */
bool px_emit_arith(Emit *e, IrOp *op);  /* emit_arith.c */
bool px_emit_values(Emit *e, IrOp *op); /* emit_mem.c */
/* The writers that PTX_HAND rows name (emit_mem.c, emit_warp.c). */
#define OP(...)
#define DTYPE(...)
#define PTX_HAND(id, fn, text) void fn(Emit *e, IrOp *op);
#include "../dialects/all.def"
#undef OP
#undef DTYPE
#undef PTX_HAND

#endif
