/*
** checked.h -- integer arithmetic that cannot overflow, for every constant
** fold and every address, size, byte and index computation of the passes,
** the lowerings, the emitter and the scheduler.
**
** Two kinds, never mixed:
**   ck_*   checked: the exact result, or false when it does not fit int64_t
**          (the caller reports an error at the op's location);
**   wrap_* two's complement: what the IR's integer ops mean (arith.addi of
**          i32 wraps at 32 bits), computed in unsigned arithmetic so that C
**          sees no overflow; sext/zext give a width-w constant's views.
** The ck_ functions leave *r unspecified when they fail.
*/
#ifndef TILUA_CHECKED_H
#define TILUA_CHECKED_H

#include <stdbool.h>
#include <stdint.h>

static inline bool ck_add(int64_t a, int64_t b, int64_t *r) {
  return !__builtin_add_overflow(a, b, r);
}
static inline bool ck_sub(int64_t a, int64_t b, int64_t *r) {
  return !__builtin_sub_overflow(a, b, r);
}
static inline bool ck_mul(int64_t a, int64_t b, int64_t *r) {
  return !__builtin_mul_overflow(a, b, r);
}
/* a << s as a multiplication by 2^s: false for a negative or too large s, or an overflow. */
static inline bool ck_shl(int64_t a, int64_t s, int64_t *r) {
  if (s < 0 || s > 62) return a == 0 && s >= 0 ? (*r = 0, true) : false;
  return ck_mul(a, (int64_t)1 << s, r);
}
/* a * b + c, the shape of most addresses (base + index * size). */
static inline bool ck_muladd(int64_t a, int64_t b, int64_t c, int64_t *r) {
  int64_t p;
  return ck_mul(a, b, &p) && ck_add(p, c, r);
}
/* v rounded up to a multiple of a > 0. */
static inline bool ck_align_up(int64_t v, int64_t a, int64_t *r) {
  int64_t s;
  if (a <= 0 || !ck_add(v, a - 1, &s)) return false;
  *r = s / a * a;
  return true;
}
/* Unsigned sizes (the scheduler's): the exact result, or UINT64_MAX when it does
** not fit, a size no plan can use, which the range checks after it refuse. */
static inline uint64_t sat_mul_u64(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? UINT64_MAX : r;
}
static inline uint64_t sat_add_u64(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r;
}
/* Is v in [lo, hi]? */
static inline bool ck_in(int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; }

/* {=== two's complement at width w (1..64): the IR's own integer semantics */
static inline uint64_t wrap_mask(uint32_t w) { return w >= 64 ? ~0ull : ((1ull << w) - 1); }
/* The zero- and sign-extended views of a width-w constant. */
static inline uint64_t zext(int64_t v, uint32_t w) { return (uint64_t)v & wrap_mask(w); }
static inline int64_t sext(int64_t v, uint32_t w) {
  if (w >= 64) return v;
  uint64_t u = zext(v, w);
  if (w && (u >> (w - 1))) u |= ~wrap_mask(w);
  return (int64_t)u;
}
static inline int64_t wrap_add(int64_t a, int64_t b) {
  return (int64_t)((uint64_t)a + (uint64_t)b);
}
static inline int64_t wrap_sub(int64_t a, int64_t b) {
  return (int64_t)((uint64_t)a - (uint64_t)b);
}
static inline int64_t wrap_mul(int64_t a, int64_t b) {
  return (int64_t)((uint64_t)a * (uint64_t)b);
}
static inline int64_t wrap_neg(int64_t a) { return (int64_t)(0 - (uint64_t)a); }
/* }=== */

#endif
