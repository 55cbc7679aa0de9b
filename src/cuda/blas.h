/*
** blas.h -- cuBLASLt as a peer for benchmarks and GPU references: libcublasLt
** opened with dlopen at first use (TILUA_CUBLASLT, else libcublasLt.so.13 or
** .so.12 on the loader path, else the CUDA toolkit's lib64), no header or
** link-time dependency. One GEMM entry point in tilua's own terms.
**
** Calls need the CUDA runtime of cuda_rt.h initialized (its primary context
** current): cuBLASLt runs on that context and the default stream.
*/
#ifndef TILUA_BLAS_H
#define TILUA_BLAS_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_rt.h"

/* D[M, N] (row-major, ldd = N) = alpha * A . B + beta * C (C like D, may be 0).
** A is M x K: a_kmajor = stored row-major M x K, else K x M. B is K x N:
** b_kmajor = stored as N x K row-major (B transposed), else K x N row-major.
** in: "bf16", "f16", "e4m3" (A and B); out: "bf16", "f16" or "f32" (C and D);
** f32 accumulation. The call is asynchronous on the default stream. */
typedef struct TlBlasGemm {
  int64_t m, n, k;
  CUdeviceptr a, b, c, d;
  int a_kmajor, b_kmajor;
  const char *in, *out;
  float alpha, beta;
  int split_accum; /* fp8: cuBLASLt's own promotion (fast accumulation off) */
} TlBlasGemm;

/* 0 on success; else a message in err (at most n bytes). */
int tlblas_gemm(TlcuRuntime *rt, const TlBlasGemm *g, char *err, size_t n);
/* Is cuBLASLt there? 1, else 0 with the reason in err. */
int tlblas_available(char *err, size_t n);

#endif
