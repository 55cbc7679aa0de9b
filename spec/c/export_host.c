/*
** export_host.c -- a host built from an export alone (`tilua export`): no Lua,
** no tilua library, only the generated files, tilua_export.c and the CUDA
** driver (opened with dlopen, or linked with -DTILUA_EXPORT_LINK_CUDA).
**
**   export_host IN OUT
**
** runs the kernels spec/export_spec.lua and spec/export_gpu_spec.lua export,
** in the order the Lua side runs them (so that device allocations line up in
** the stand-in driver's log), on the inputs IN/<name>.bin, and writes each
** result to OUT/<name>.bin:
**
**   gemm       export_gemm_run: D = A . B^T (stdlib GEMM, sizes compiled in)
**   splitk     export_splitk_run: the same by split-K, with its workspace
**   softmax1/2 tile_gemm_softmax_run at two sizes M1 and M2 (one export, any M)
**   graph_*    a graph of softmax (size 1) then gemm, replayed; then its
**              nodes set (the softmax to size 2's tensors, the GEMM as it
**              was) and replayed again, as tl.graph's update does
**   attention_o1/2, attention_lse1/2
**              export_attention_run (the stdlib attention: tensors [B, H, S, D],
**              the LSE buffer, the scale; a persistent grid from the device's
**              SMs) at two problem sizes (one export, any size)
**
** The sizes come as -D definitions (GEMM_M ..., SOFTMAX_K, SOFTMAX_M1 ...,
** ATT_D, ATT_B1 ... ATT_SKV2, ATT_SCALE).
** First, what the runtime refuses before the driver sees it: a launch with no
** context current, a capture of the default stream, a tensor map against the
** rules (tensor_map.h's messages).
** Exits 0 when every call succeeded; prints the failing call otherwise.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export_attention.h"
#include "export_gemm.h"
#include "export_splitk.h"
#include "tile_gemm_softmax.h"

static const tilua_driver *drv;
static const char *in_dir, *out_dir;

static void check(CUresult r, const char *what) {
  if (r == CUDA_SUCCESS) return;
  const char *name = "?";
  if (drv) drv->cuGetErrorName(r, &name);
  fprintf(stderr, "export_host: %s: %s (%d): %s\n", what, name, (int)r, tilua_last_error());
  exit(1);
}

/* Device memory of n bytes holding IN/<name>.bin (zeros when name is NULL). */
static CUdeviceptr input(const char *name, size_t n) {
  CUdeviceptr p;
  check(drv->cuMemAlloc(&p, n), "cuMemAlloc");
  unsigned char *h = calloc(1, n);
  if (!h) exit(2);
  if (name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.bin", in_dir, name);
    FILE *f = fopen(path, "rb");
    if (!f || fread(h, 1, n, f) != n) {
      fprintf(stderr, "export_host: cannot read %zu bytes of %s\n", n, path);
      exit(2);
    }
    fclose(f);
  }
  check(drv->cuMemcpyHtoD(p, h, n), "cuMemcpyHtoD");
  free(h);
  return p;
}

/* OUT/<name>.bin: n bytes of device memory at p. */
static void output(const char *name, CUdeviceptr p, size_t n) {
  unsigned char *h = malloc(n);
  char path[1024];
  if (!h) exit(2);
  check(drv->cuMemcpyDtoH(h, p, n), "cuMemcpyDtoH");
  snprintf(path, sizeof path, "%s/%s.bin", out_dir, name);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(h, 1, n, f) != n) {
    fprintf(stderr, "export_host: cannot write %s\n", path);
    exit(2);
  }
  fclose(f);
  free(h);
}

/* A call that must fail with r and a message holding `says`. */
static void refused(CUresult got, CUresult want, const char *says, const char *what) {
  if (got == want && strstr(tilua_last_error(), says)) return;
  fprintf(stderr, "export_host: %s: got %d (%s), want %d and '%s'\n", what, (int)got,
          tilua_last_error(), (int)want, says);
  exit(1);
}

static tilua_tensor tensor(CUdeviceptr base, int64_t rows, int64_t cols) {
  tilua_tensor t;
  memset(&t, 0, sizeof t);
  t.base = base, t.shape[0] = rows, t.shape[1] = cols; /* strides 0: row-major */
  return t;
}

/* A row-major [b, h, s, d] tensor at base. */
static tilua_tensor tensor4(CUdeviceptr base, int64_t b, int64_t h, int64_t s, int64_t d) {
  tilua_tensor t;
  memset(&t, 0, sizeof t);
  t.base = base, t.shape[0] = b, t.shape[1] = h, t.shape[2] = s, t.shape[3] = d;
  return t;
}

/* The attention at problem i (1 or 2): q, k, v, o, lse allocated in the Lua
** path's order; O and the log-sum-exp written to OUT/attention_{o,lse}<i>.bin. */
static void attention(int i, int64_t b, int64_t h, int64_t hkv, int64_t sq, int64_t skv) {
  const int64_t d = ATT_D;
  const size_t nq = (size_t)(b * h * sq * d), nkv = (size_t)(b * hkv * skv * d),
               nl = (size_t)(b * h * sq);
  char name[32];
  CUdeviceptr p[3];
  for (int x = 0; x < 3; x++) {
    snprintf(name, sizeof name, "att_%c%d", "qkv"[x], i);
    p[x] = input(name, (x ? nkv : nq) * 2);
  }
  CUdeviceptr po = input(NULL, nq * 2), lse = input(NULL, nl * 4);
  tilua_tensor q = tensor4(p[0], b, h, sq, d), k = tensor4(p[1], b, hkv, skv, d),
               v = tensor4(p[2], b, hkv, skv, d), o = tensor4(po, b, h, sq, d);
  check(export_attention_run(0, &q, &k, &v, &o, lse, ATT_SCALE), "export_attention_run");
  snprintf(name, sizeof name, "attention_o%d", i);
  output(name, po, nq * 2);
  snprintf(name, sizeof name, "attention_lse%d", i);
  output(name, lse, nl * 4);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: export_host IN OUT\n");
    return 2;
  }
  in_dir = argv[1], out_dir = argv[2];
  check(tilua_driver_load(), "tilua_driver_load");
  drv = tilua_driver_get();
  refused(export_gemm_run(0, 256, 256, 256), CUDA_ERROR_INVALID_CONTEXT,
          "no CUDA context is current", "no context");
  check(tilua_use_device(0), "tilua_use_device");
  tilua_graph *none;
  refused(tilua_graph_begin(&none, 0), CUDA_ERROR_INVALID_VALUE,
          "the default stream cannot be captured", "default stream");
  tilua_tensor odd = tensor(256, 128, 201); /* rows of 402 bytes: TMA wants multiples of 16 */
  CUtensorMap map;
  refused(tile_gemm_softmax_map_A(&map, &odd), CUDA_ERROR_INVALID_VALUE,
          "tensor_map: strides[1] = 201 elements is 402 bytes, not a positive multiple of 16",
          "odd rows");
  /* the attention's tensors against its recipe's checks (tilua's launcher says the same) */
  tilua_tensor aq = tensor4(256, 1, 4, 300, ATT_D), ak = tensor4(256, 1, 2, 200, ATT_D);
  tilua_tensor narrow = tensor4(256, 1, 4, 300, 64), three = tensor4(256, 1, 3, 300, ATT_D),
               empty = tensor4(256, 1, 2, 0, ATT_D);
  refused(
      export_attention_run(0, &aq, &ak, &ak, &narrow, 0, 1.0f), CUDA_ERROR_INVALID_VALUE,
      "launch: attention 'export_attention': o's dim 3 (the head dim it was built for) is 64, not 128",
      "attention: head dim");
  refused(
      export_attention_run(0, &three, &ak, &ak, &three, 0, 1.0f), CUDA_ERROR_INVALID_VALUE,
      "launch: attention 'export_attention': q's dim 1 (the heads, a multiple of k's dim 1) is 3, "
      "not a multiple of 2",
      "attention: heads");
  refused(export_attention_run(0, &aq, &empty, &empty, &aq, 0, 1.0f), CUDA_ERROR_INVALID_VALUE,
          "launch: attention 'export_attention': k's dim 2 is 0, less than 1",
          "attention: no keys");

  /* the stdlib GEMM: buffers of the sizes it was compiled for */
  const size_t ga = (size_t)GEMM_M * GEMM_K * 2, gb = (size_t)GEMM_N * GEMM_K * 2,
               gd = (size_t)GEMM_M * GEMM_N * 2;
  CUdeviceptr a = input("gemm_a", ga), b = input("gemm_b", gb), d = input(NULL, gd);
  check(export_gemm_run(0, a, b, d), "export_gemm_run");
  output("gemm", d, gd);

  /* split-K: the workspace, zeroed once, kept */
  CUdeviceptr d2 = input(NULL, gd), ws = input(NULL, export_splitk_workspace_bytes());
  check(export_splitk_run(0, a, b, d2, ws), "export_splitk_run (the workspace)");
  output("splitk", d2, gd);

  /* the tile program, one export at two sizes */
  const int64_t K = SOFTMAX_K, N = 256, ms[2] = {SOFTMAX_M1, SOFTMAX_M2};
  const float scale = SOFTMAX_SCALE;
  CUdeviceptr sb = input("softmax_b", (size_t)(N * K * 2));
  CUdeviceptr sa[2], sc[2];
  tilua_tensor A[2], B = tensor(sb, N, K), C[2];
  for (int i = 0; i < 2; i++) {
    char name[32];
    snprintf(name, sizeof name, "softmax_a%d", i + 1);
    sa[i] = input(name, (size_t)(ms[i] * K * 2));
    sc[i] = input(NULL, (size_t)(ms[i] * N * 2));
    A[i] = tensor(sa[i], ms[i], K), C[i] = tensor(sc[i], ms[i], N);
    tilua_dim3 programs = {(unsigned)((ms[i] + 127) / 128), 1, 1};
    check(tile_gemm_softmax_run(0, programs, &A[i], &B, &C[i], (int32_t)K, scale),
          "tile_gemm_softmax_run");
    snprintf(name, sizeof name, "softmax%d", i + 1);
    output(name, sc[i], (size_t)(ms[i] * N * 2));
  }

  /* a graph: softmax at size 1, then the GEMM into a fresh D; replayed; then
  ** the softmax node's arguments set to size 2's (into a fresh C) and replayed */
  CUstream s;
  check(drv->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  CUdeviceptr gc1 = input(NULL, (size_t)(ms[0] * N * 2)), gd3 = input(NULL, gd),
              gc2 = input(NULL, (size_t)(ms[1] * N * 2));
  tilua_tensor C1 = tensor(gc1, ms[0], N), C2 = tensor(gc2, ms[1], N);
  tilua_graph *g;
  tilua_dim3 p1 = {(unsigned)((ms[0] + 127) / 128), 1, 1},
             p2 = {(unsigned)((ms[1] + 127) / 128), 1, 1};
  check(tilua_graph_begin(&g, s), "tilua_graph_begin");
  check(tile_gemm_softmax_run(s, p1, &A[0], &B, &C1, (int32_t)K, scale),
        "tile_gemm_softmax_run (captured)");
  check(export_gemm_run(s, a, b, gd3), "export_gemm_run (captured)");
  check(tilua_graph_end(g), "tilua_graph_end");
  if (tilua_graph_nodes(g) != 2) {
    fprintf(stderr, "export_host: the graph has %d kernel nodes, not 2\n", tilua_graph_nodes(g));
    return 1;
  }
  check(tilua_graph_launch(g, s), "tilua_graph_launch");
  check(drv->cuStreamSynchronize(s), "cuStreamSynchronize");
  output("graph_softmax1", gc1, (size_t)(ms[0] * N * 2));
  output("graph_gemm", gd3, gd);
  tile_gemm_softmax_args args;
  check(tile_gemm_softmax_prepare(&args, p2, &A[1], &B, &C2, (int32_t)K, scale),
        "tile_gemm_softmax_prepare");
  check(tile_gemm_softmax_graph_set_args(g, 0, &args), "tile_gemm_softmax_graph_set_args");
  export_gemm_args gargs;
  check(export_gemm_prepare(&gargs, a, b, gd3), "export_gemm_prepare");
  if (export_gemm_graph_set_args(g, 0, &gargs) == CUDA_SUCCESS ||
      !strstr(tilua_last_error(), "tile_gemm_softmax")) {
    fprintf(stderr, "export_host: node 0 (the softmax) took the GEMM's arguments: %s\n",
            tilua_last_error());
    return 1;
  }
  check(export_gemm_graph_set_args(g, 1, &gargs), "export_gemm_graph_set_args");
  check(tilua_graph_launch(g, s), "tilua_graph_launch (updated)");
  check(drv->cuStreamSynchronize(s), "cuStreamSynchronize");
  output("graph_softmax2", gc2, (size_t)(ms[1] * N * 2));
  tilua_graph_destroy(g);
  check(drv->cuStreamDestroy(s), "cuStreamDestroy");

  attention(1, ATT_B1, ATT_H1, ATT_HKV1, ATT_SQ1, ATT_SKV1);
  attention(2, ATT_B2, ATT_H2, ATT_HKV2, ATT_SQ2, ATT_SKV2);
  printf("export_host: ok\n");
  return 0;
}
