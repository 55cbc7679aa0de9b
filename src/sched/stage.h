/*
** stage.h -- staged integers: the small integer interface the scheduler
** arithmetic is written against, once (src/sched/worker.c).
**
** A staged integer is known while building (a constant of the plan, or every
** value on the host) or known only when the kernel runs (a value of a
** backend, an IR value). An operation on known integers is done at once, in
** C, with the wrap-around of its width; any other asks the backend to build
** it. The same function therefore computes a schedule on the host (no
** backend: everything is known) and builds its arithmetic into a kernel (the
** IR backend of stage_ir.c, used by lower-tile-scheduler and by the Lua
** surface tl.sched.persistent), the way the Lua DSL folds Lua integers and
** builds IR for values.
**
** Widths are 1 (a condition), 32 (counts, ids, k indices: the device does
** 32-bit arithmetic) and 64 (byte offsets). Arithmetic is unsigned. Division
** by zero gives all ones and the remainder the dividend (RISC-V's rule): only
** the side of a select that is not taken divides by zero, and it must not trap.
*/
#ifndef TILUA_STAGE_H
#define TILUA_STAGE_H

#include <stdbool.h>
#include <stdint.h>

/* bits 0: absent (a field a work tile does not carry). */
typedef struct SInt {
  void *v;    /* the backend's value, NULL when known */
  uint64_t k; /* the value when known */
  uint8_t bits;
} SInt;

/* The binary operations a backend builds, X(enumerator, shorthand): the
** arithmetic ones give their operands' width, the unsigned comparisons
** (from ST_EQ on) width 1. ST_ZEXT widens to the width asked for. */
/* clang-format off */
#define STAGE_BINARY_LIST(X)                                                                       \
  X(ST_ADD, add) X(ST_SUB, sub) X(ST_MUL, mul) X(ST_DIV, div) X(ST_REM, rem)                       \
  X(ST_MIN, min) X(ST_MAX, max) X(ST_AND, and)                                                     \
  X(ST_EQ, eq) X(ST_NE, ne) X(ST_LT, lt) X(ST_LE, le) X(ST_GE, ge)
/* clang-format on */
#define STAGE_OP_ID(id, name) id,
typedef enum StageOp { STAGE_BINARY_LIST(STAGE_OP_ID) ST_ZEXT } StageOp;
#undef STAGE_OP_ID

/* The integer interface: constant, the operations above, select. */
typedef struct Stage Stage;
struct Stage {
  void *(*constant)(Stage *s, uint64_t k, unsigned bits);
  void *(*op)(Stage *s, StageOp op, void *a, void *b, unsigned bits); /* b NULL for ST_ZEXT */
  void *(*select)(Stage *s, void *c, void *a, void *b);
};

/* Known integers. */
static inline SInt st_k(uint32_t k) { return (SInt){NULL, k, 32}; }
static inline SInt st_k64(uint64_t k) { return (SInt){NULL, k, 64}; }
static inline SInt st_bool(bool k) { return (SInt){NULL, k, 1}; }
/* k, known, of the width of x. */
static inline SInt st_k_as(SInt x, uint64_t k) { return (SInt){NULL, k, x.bits}; }
/* A backend value of the given width. */
static inline SInt st_value(void *v, unsigned bits) { return (SInt){v, 0, (uint8_t)bits}; }

static inline bool st_known(SInt x) { return x.v == NULL; }
static inline bool st_present(SInt x) { return x.bits != 0; }
/* The value of a known integer (the host's results). */
void st_not_known(void);
static inline uint64_t st_get(SInt x) {
  if (!st_known(x)) st_not_known();
  return x.k;
}
static inline uint32_t st_u32(SInt x) { return (uint32_t)st_get(x); }
/* The backend's value of x (a constant made for a known one). */
void *st_materialize(Stage *s, SInt x);

/* Built by the backend: the operations when an operand is not known. */
SInt st_build_op(Stage *s, StageOp op, SInt a, SInt b);
SInt st_build_zext(Stage *s, SInt a, unsigned bits);
SInt st_build_select(Stage *s, SInt c, SInt a, SInt b);

static inline uint64_t st_fold(StageOp op, uint64_t a, uint64_t b, unsigned bits) {
  switch (op) {
  case ST_ADD: return a + b;
  case ST_SUB: return a - b;
  case ST_MUL: return a * b;
  case ST_DIV: return !b ? UINT64_MAX : bits <= 32 ? (uint32_t)a / (uint32_t)b : a / b;
  case ST_REM: return !b ? a : bits <= 32 ? (uint32_t)a % (uint32_t)b : a % b;
  case ST_MIN: return a < b ? a : b;
  case ST_MAX: return a > b ? a : b;
  case ST_AND: return a & b;
  case ST_EQ: return a == b;
  case ST_NE: return a != b;
  case ST_LT: return a < b;
  case ST_LE: return a <= b;
  case ST_GE: return a >= b;
  default: return a; /* ST_ZEXT */
  }
}

/* Inline, so that the host's all-known arithmetic compiles to plain C. */
static inline SInt st_op(Stage *s, StageOp op, SInt a, SInt b) {
  if (!st_known(a) || !st_known(b)) return st_build_op(s, op, a, b);
  unsigned bits = op >= ST_EQ ? 1 : a.bits;
  uint64_t k = st_fold(op, a.k, b.k, a.bits);
  return (SInt){NULL, bits >= 64 ? k : k & ((UINT64_C(1) << bits) - 1), (uint8_t)bits};
}

static inline SInt st_zext(Stage *s, SInt a, unsigned bits) {
  if (!st_known(a)) return st_build_zext(s, a, bits);
  return (SInt){NULL, a.k, (uint8_t)bits};
}

/* c ? a : b; a known c picks without building. */
static inline SInt st_select(Stage *s, SInt c, SInt a, SInt b) {
  if (st_known(c)) return c.k ? a : b;
  return st_build_select(s, c, a, b);
}

/* st_add(s, a, b), st_sub, ... st_ge: one per binary operation. */
#define STAGE_SHORTHAND(id, name)                                                                  \
  static inline SInt st_##name(Stage *s, SInt a, SInt b) { return st_op(s, id, a, b); }
STAGE_BINARY_LIST(STAGE_SHORTHAND)
#undef STAGE_SHORTHAND
/* not c, as c != true. */
static inline SInt st_not(Stage *s, SInt c) { return st_ne(s, c, st_bool(true)); }
/* C's bool-to-integer promotion: 0 or 1. */
static inline SInt st_b2i(Stage *s, SInt c) { return st_zext(s, c, 32); }
/* a / b + (a % b != 0) */
static inline SInt st_ceil_div(Stage *s, SInt a, SInt b) {
  return st_add(s, st_div(s, a, b), st_b2i(s, st_ne(s, st_rem(s, a, b), st_k(0))));
}

/* {=== the IR backend (stage_ir.c): builds arith ops at b */
struct IrBuilder;
struct IrType;
struct IrValue;
typedef struct StageIr {
  Stage st; /* first: a StageIr * is a Stage * */
  struct IrBuilder *b;
  const struct IrType *i1, *i32, *i64;
} StageIr;

void stage_ir_init(StageIr *s, struct IrBuilder *b);
/* An IR value of type i1, i32 or i64 as a staged integer. */
SInt stage_ir_value(struct IrValue *v);
/* }=== */

#endif
