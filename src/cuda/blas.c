/*
** blas.c -- cuBLASLt through dlopen (see blas.h). The few types are declared
** with the layout of CUDA 13.0's cublasLt.h; enum values are the header's.
**
** tilua's row-major D = A . B is cuBLAS's column-major D^T = B^T . A^T: the
** Lt "A" operand is our B and its "B" operand our A.
*/
#define _POSIX_C_SOURCE 200809L
#include "blas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *LtHandle, *LtDesc, *LtLayout, *LtPref;
typedef struct LtAlgo {
  uint64_t data[8];
} LtAlgo;
typedef struct LtHeuristic {
  LtAlgo algo;
  size_t workspace;
  int state;
  float waves;
  int reserved[4];
} LtHeuristic;

enum { OP_N = 0, OP_T = 1, COMPUTE_32F = 68, R_32F = 0, R_16F = 2, R_16BF = 14, R_8F_E4M3 = 28, R_8F_E5M2 = 29 };
enum { DESC_TRANSA = 3, DESC_TRANSB = 4, DESC_FAST_ACCUM = 25, PREF_MAX_WORKSPACE = 1 };

#define BLAS_SYMS(X)                                                                                \
  X(cublasLtCreate, int, (LtHandle *))                                                              \
  X(cublasLtDestroy, int, (LtHandle))                                                               \
  X(cublasLtMatmulDescCreate, int, (LtDesc *, int, int))                                            \
  X(cublasLtMatmulDescDestroy, int, (LtDesc))                                                       \
  X(cublasLtMatmulDescSetAttribute, int, (LtDesc, int, const void *, size_t))                       \
  X(cublasLtMatrixLayoutCreate, int, (LtLayout *, int, uint64_t, uint64_t, int64_t))                \
  X(cublasLtMatrixLayoutDestroy, int, (LtLayout))                                                   \
  X(cublasLtMatmulPreferenceCreate, int, (LtPref *))                                                \
  X(cublasLtMatmulPreferenceDestroy, int, (LtPref))                                                 \
  X(cublasLtMatmulPreferenceSetAttribute, int, (LtPref, int, const void *, size_t))                 \
  X(cublasLtMatmulAlgoGetHeuristic, int,                                                            \
    (LtHandle, LtDesc, LtLayout, LtLayout, LtLayout, LtLayout, LtPref, int, LtHeuristic *, int *))   \
  X(cublasLtMatmul, int,                                                                            \
    (LtHandle, LtDesc, const void *, const void *, LtLayout, const void *, LtLayout, const void *,  \
     const void *, LtLayout, void *, LtLayout, const LtAlgo *, void *, size_t, void *))

/* The library and its entry points: written once (pthread_once), read only after,
** so threads may use it at once. A handle and its workspace belong to each
** runtime (rt->blas_handle, rt->blas_workspace), released when it shuts down. */
static struct {
#define X(name, ret, params) ret(*name) params;
  BLAS_SYMS(X)
#undef X
  void *lib;
  char why[256];
} lt;
static pthread_once_t lt_once = PTHREAD_ONCE_INIT;

#define WORKSPACE_BYTES ((size_t)32 << 20)

static void load_once(void) {
  const char *names[] = {getenv("TILUA_CUBLASLT"), "libcublasLt.so.13", "libcublasLt.so.12",
                         "/usr/local/cuda/lib64/libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.12"};
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !lt.lib; i++)
    if (names[i] && *names[i]) lt.lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!lt.lib) {
    snprintf(lt.why, sizeof lt.why, "libcublasLt not found (set TILUA_CUBLASLT): %s", dlerror());
    return;
  }
#define X(name, ret, params)                                                                       \
  *(void **)&lt.name = dlsym(lt.lib, #name);                                                       \
  if (!lt.name) {                                                                                  \
    snprintf(lt.why, sizeof lt.why, "libcublasLt has no %s", #name);                               \
    lt.lib = NULL;                                                                                 \
    return;                                                                                        \
  }
  BLAS_SYMS(X)
#undef X
}

static int load(void) {
  pthread_once(&lt_once, load_once);
  return lt.lib != NULL;
}

static void release_handle(void *h) { lt.cublasLtDestroy(h); }

int tlblas_available(char *err, size_t n) {
  if (load()) return 1;
  snprintf(err, n, "%s", lt.why);
  return 0;
}

static int dtype(const char *s) {
  if (!s) return -1;
  return !strcmp(s, "bf16")   ? R_16BF
         : !strcmp(s, "f16")  ? R_16F
         : !strcmp(s, "f32")  ? R_32F
         : !strcmp(s, "e4m3") ? R_8F_E4M3
         : !strcmp(s, "e5m2") ? R_8F_E5M2
                              : -1;
}

#define LT(call)                                                                                   \
  do {                                                                                             \
    int st_ = lt.call;                                                                             \
    if (st_) {                                                                                     \
      snprintf(err, n, "%.*s: cuBLAS status %d", (int)strcspn(#call, "("), #call, st_);            \
      goto done;                                                                                   \
    }                                                                                              \
  } while (0)

int tlblas_gemm(TlcuRuntime *rt, const TlBlasGemm *g, char *err, size_t n) {
  if (!load()) return snprintf(err, n, "%s", lt.why), 1;
  int tin = dtype(g->in), tout = dtype(g->out);
  if (tin < 0 || tout < 0 || tout == R_8F_E4M3 || tout == R_8F_E5M2)
    return snprintf(err, n, "unsupported types in %s, out %s", g->in ? g->in : "?", g->out ? g->out : "?"), 1;
  if (!rt->blas_workspace && tlcu_mem_alloc(rt, WORKSPACE_BYTES, &rt->blas_workspace) != TLCU_OK)
    return snprintf(err, n, "cuBLAS workspace: %s", tlcu_error(rt)), 1;
  if (!rt->blas_handle) {
    if (lt.cublasLtCreate(&rt->blas_handle)) return snprintf(err, n, "cublasLtCreate failed"), 1;
    rt->blas_release = release_handle;
  }
  LtDesc desc = NULL;
  LtLayout la = NULL, lb = NULL, lc = NULL;
  LtPref pref = NULL;
  int rc = 1, ta = g->b_kmajor ? OP_T : OP_N, tb = g->a_kmajor ? OP_N : OP_T, found = 0;
  size_t ws = WORKSPACE_BYTES;
  LtHeuristic h;
  LT(cublasLtMatmulDescCreate(&desc, COMPUTE_32F, R_32F));
  LT(cublasLtMatmulDescSetAttribute(desc, DESC_TRANSA, &ta, sizeof ta));
  LT(cublasLtMatmulDescSetAttribute(desc, DESC_TRANSB, &tb, sizeof tb));
  /* fp8: accumulate in the tensor cores' own precision, as a kernel that keeps its
  ** accumulator in wgmma registers does (no promotion to f32 every few k steps),
  ** unless split_accum (cuBLASLt's default: its own promotion) */
  int8_t fast = (tin == R_8F_E4M3 || tin == R_8F_E5M2) && !g->split_accum;
  if (fast) LT(cublasLtMatmulDescSetAttribute(desc, DESC_FAST_ACCUM, &fast, sizeof fast));
  /* Lt A = our B (N x K logical), Lt B = our A (K x M logical), D = N x M, all column-major */
  LT(cublasLtMatrixLayoutCreate(&la, tin, ta == OP_T ? (uint64_t)g->k : (uint64_t)g->n,
                                ta == OP_T ? (uint64_t)g->n : (uint64_t)g->k, ta == OP_T ? g->k : g->n));
  LT(cublasLtMatrixLayoutCreate(&lb, tin, tb == OP_N ? (uint64_t)g->k : (uint64_t)g->m,
                                tb == OP_N ? (uint64_t)g->m : (uint64_t)g->k, tb == OP_N ? g->k : g->m));
  LT(cublasLtMatrixLayoutCreate(&lc, tout, (uint64_t)g->n, (uint64_t)g->m, g->n));
  LT(cublasLtMatmulPreferenceCreate(&pref));
  LT(cublasLtMatmulPreferenceSetAttribute(pref, PREF_MAX_WORKSPACE, &ws, sizeof ws));
  LT(cublasLtMatmulAlgoGetHeuristic(rt->blas_handle, desc, la, lb, lc, lc, pref, 1, &h, &found));
  if (!found) {
    snprintf(err, n, "cuBLASLt has no algorithm for this GEMM");
    goto done;
  }
  CUdeviceptr c = g->c ? g->c : g->d;
  LT(cublasLtMatmul(rt->blas_handle, desc, &g->alpha, (void *)(uintptr_t)g->b, la, (void *)(uintptr_t)g->a, lb, &g->beta,
                    (void *)(uintptr_t)c, lc, (void *)(uintptr_t)g->d, lc, &h.algo, (void *)(uintptr_t)rt->blas_workspace,
                    WORKSPACE_BYTES, NULL));
  rc = 0;
done:
  if (pref) lt.cublasLtMatmulPreferenceDestroy(pref);
  if (lc) lt.cublasLtMatrixLayoutDestroy(lc);
  if (lb) lt.cublasLtMatrixLayoutDestroy(lb);
  if (la) lt.cublasLtMatrixLayoutDestroy(la);
  if (desc) lt.cublasLtMatmulDescDestroy(desc);
  return rc;
}
