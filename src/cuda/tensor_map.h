/*
** tensor_map.h -- a tiled TMA tensor map as tilua hands it to the driver's
** cuTensorMapEncodeTiled: the element types, the rules checked before the
** driver sees a map (so that a bad one is a message, not a status), and the
** launcher's defaults (L2 promotion of 256 bytes, zero fill out of bounds,
** element strides of 1).
**
** One home for two users: tl.device.tensor_map (src/lua/l_tensor.c), which
** every launch of a kernel with tensor-map parameters goes through, and the C
** that `tilua export` writes, which copies this file as tilua_tensor_map.h.
** So it is self-contained: C11, cuda_types.h, no allocation, no tilua.
*/
#ifndef TILUA_TENSOR_MAP_H
#define TILUA_TENSOR_MAP_H

#include <stdio.h>
#include <string.h>

#include "cuda_types.h"

#define TLTM_MAX_RANK 5
#define TLTM_L2_DEFAULT 256 /* bytes of L2 promotion (CU_TENSOR_MAP_L2_PROMOTION_L2_256B) */
#define TLTM_OOB_ZERO 0     /* out-of-bounds elements read as zero (NaN: 1) */

/* The element types, by tilua's names: X(name, CUtensorMapDataType, bytes).
** fp8 travels as bytes; a tensor-map parameter type of i8 names the same code. */
/* clang-format off */
#define TLTM_DTYPES(X)                                                                             \
  X("u8", 0, 1)   X("i8", 0, 1)   X("e4m3", 0, 1) X("e5m2", 0, 1) X("u16", 1, 2)  X("i16", 1, 2)  \
  X("u32", 2, 4)  X("i32", 3, 4)  X("u64", 4, 8)  X("i64", 5, 8)  X("f16", 6, 2)  X("f32", 7, 4)  \
  X("f64", 8, 8)  X("bf16", 9, 2) X("tf32", 11, 4)
/* clang-format on */

/* What the launcher knows of a map; dimensions outermost first, strides in
** elements (all zero: contiguous, row-major), swizzle and l2 in bytes. */
typedef struct TltmSpec {
  const char *dtype; /* a name of TLTM_DTYPES */
  int rank;
  CUdeviceptr address;
  size_t buffer_bytes; /* the buffer's size when known (0: not checked) */
  int64_t shape[TLTM_MAX_RANK], strides[TLTM_MAX_RANK], box[TLTM_MAX_RANK];
  int64_t element_strides[TLTM_MAX_RANK]; /* 0 reads as 1 */
  int swizzle, l2, oob;
} TltmSpec;

/* What cuTensorMapEncodeTiled takes: dims and box innermost first, rank - 1
** byte strides of dimensions 1.., the driver's enums. */
typedef struct TltmDesc {
  int dtype;
  unsigned int rank;
  CUdeviceptr address;
  cuuint64_t dims[TLTM_MAX_RANK], strides[TLTM_MAX_RANK - 1];
  uint32_t box[TLTM_MAX_RANK], elem_strides[TLTM_MAX_RANK];
  int interleave, swizzle, l2_promotion, oob_fill;
} TltmDesc;

/* The dtype's CUtensorMapDataType and bytes per element; 0 for an unknown name. */
static inline int tltm_dtype(const char *name, int *code) {
#define TLTM_DTYPE_CASE(n, c, b)                                                                   \
  if (name && strcmp(name, n) == 0) return *code = (c), (b);
  TLTM_DTYPES(TLTM_DTYPE_CASE)
#undef TLTM_DTYPE_CASE
  return 0;
}

/* The byte count of a swizzle or L2 promotion as the driver's enumerator: -1 if none. */
static inline int tltm_code(int bytes, int b1, int b2, int b3) {
  return bytes == 0 ? 0 : bytes == b1 ? 1 : bytes == b2 ? 2 : bytes == b3 ? 3 : -1;
}

/* Check s by the driver's rules and fill d; NULL, or the message in err
** ("tensor_map: ..."). Fills in s's row-major strides when it has none. */
static inline const char *tltm_describe(TltmSpec *s, TltmDesc *d, char *err, size_t n) {
  int r = s->rank, code = 0, eb = tltm_dtype(s->dtype, &code);
  int sw = tltm_code(s->swizzle, 32, 64, 128), l2 = tltm_code(s->l2, 64, 128, 256);
#define TLTM_FAIL(...) return snprintf(err, n, "tensor_map: " __VA_ARGS__), err
  if (!eb) TLTM_FAIL("unknown dtype '%s'", s->dtype ? s->dtype : "(none)");
  if (r < 1 || r > TLTM_MAX_RANK) TLTM_FAIL("rank %d is out of range [1, %d]", r, TLTM_MAX_RANK);
  if (sw < 0) TLTM_FAIL("swizzle %d is not one of 0, 32, 64, 128 (bytes)", s->swizzle);
  if (l2 < 0) TLTM_FAIL("l2 promotion %d is not one of 0, 64, 128, 256", s->l2);
  if (!s->address) TLTM_FAIL("the address is zero");
  if (s->address % 16)
    TLTM_FAIL("the address 0x%llx is not 16-byte aligned", (unsigned long long)s->address);
  int given = 0;
  for (int o = 0; o < r; o++)
    given |= s->strides[o] != 0;
  if (!given) { /* contiguous, row-major */
    s->strides[r - 1] = 1;
    for (int o = r - 2; o >= 0; o--)
      if (s->shape[o + 1] < 1 || s->strides[o + 1] > INT64_MAX / s->shape[o + 1])
        TLTM_FAIL("the shape is too large");
      else s->strides[o] = s->strides[o + 1] * s->shape[o + 1];
  }
  memset(d, 0, sizeof *d);
  d->dtype = code, d->rank = (unsigned)r, d->address = s->address, d->swizzle = sw,
  d->l2_promotion = l2;
  d->oob_fill = s->oob;
  uint64_t extent = (uint64_t)eb;
  for (int i = 0; i < r; i++) { /* i counts from the innermost dimension */
    int o = r - 1 - i;
    int64_t dim = s->shape[o], b = s->box[o], st = s->strides[o];
    int64_t es = s->element_strides[o] ? s->element_strides[o] : 1;
    if (dim < 1 || dim > ((int64_t)1 << 32))
      TLTM_FAIL("shape[%d] = %lld is out of range [1, 2^32]", o + 1, (long long)dim);
    if (b < 1 || b > 256) TLTM_FAIL("box[%d] = %lld is out of range [1, 256]", o + 1, (long long)b);
    if (es < 1 || es > 8)
      TLTM_FAIL("element_strides[%d] = %lld is out of range [1, 8]", o + 1, (long long)es);
    if (i == 0 && st != 1)
      TLTM_FAIL("the innermost dimension must be contiguous (stride 1), got %lld", (long long)st);
    if (i > 0) {
      int64_t big = (int64_t)1 << 40,
              bytes = st > -big && st < big ? st * eb : st; /* no overflow */
      if (st < 1 || bytes % 16 || bytes >= big)
        TLTM_FAIL(
            "strides[%d] = %lld elements is %lld bytes, not a positive multiple of 16 below 2^40",
            o + 1, (long long)st, (long long)bytes);
      d->strides[i - 1] = (cuuint64_t)bytes;
    }
    d->dims[i] = (cuuint64_t)dim, d->box[i] = (uint32_t)b, d->elem_strides[i] = (uint32_t)es;
    extent += (uint64_t)(dim - 1) * (uint64_t)st * (uint64_t)eb;
  }
  int64_t inner = s->box[r - 1] * eb;
  if (inner % 16)
    TLTM_FAIL("the innermost box is %lld bytes, not a multiple of 16", (long long)inner);
  if (s->swizzle && inner > s->swizzle)
    TLTM_FAIL("the innermost box is %lld bytes, more than the %d-byte swizzle span",
              (long long)inner, s->swizzle);
  if (s->buffer_bytes && extent > s->buffer_bytes)
    TLTM_FAIL("the tensor spans %llu bytes, more than the buffer's %zu", (unsigned long long)extent,
              s->buffer_bytes);
#undef TLTM_FAIL
  return NULL;
}

#endif
