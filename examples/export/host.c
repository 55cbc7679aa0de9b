/*
** examples/export/host.c: a C host of an exported kernel (docs/embedding.md).
** It needs the export of examples/export/saxpy.lua and the CUDA driver, nothing
** of tilua or Lua:
**
**   tilua export -o out examples/export/saxpy.lua
**   cc -std=c11 -Iout examples/export/host.c out/tilua_export.c out/saxpy.c -ldl -o saxpy
**
** y = a * x + y on a million floats, launched once, then ten times as a CUDA
** graph replayed twice with its arguments changed in between; checked on the
** CPU (`--no-check`: only the calls, for the stand-in driver of the tests).
** Exits 77 without a GPU.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "saxpy.h"

#define N 1000000
#define CHECK(call)                                                                                \
  do {                                                                                             \
    CUresult r_ = (call);                                                                          \
    if (r_ != CUDA_SUCCESS) {                                                                      \
      fprintf(stderr, "%s: CUDA error %d: %s\n", #call, (int)r_, tilua_last_error());              \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

int main(int argc, char **argv) {
  int check = !(argc > 1 && strcmp(argv[1], "--no-check") == 0);
  if (tilua_use_device(0) !=
      CUDA_SUCCESS) { /* loads the driver, makes device 0's context current */
    printf("SKIP: no GPU (%s)\n", tilua_last_error());
    return 77;
  }
  const tilua_driver *cu = tilua_driver_get(); /* the driver's entry points, for memory */
  float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), *got = malloc(N * sizeof *got);
  if (!x || !y || !got) return 1;
  for (int i = 0; i < N; i++)
    x[i] = (float)(i % 1000) / 1000.0f, y[i] = (float)(i % 7);
  CUdeviceptr dx, dy;
  CHECK(cu->cuMemAlloc(&dx, N * sizeof *x));
  CHECK(cu->cuMemAlloc(&dy, N * sizeof *y));
  CHECK(cu->cuMemcpyHtoD(dx, x, N * sizeof *x));
  CHECK(cu->cuMemcpyHtoD(dy, y, N * sizeof *y));

  /* one launch: the grid in blocks of saxpy's 256 threads */
  tilua_dim3 grid = {(N + 255) / 256, 1, 1};
  CHECK(saxpy_launch(0, grid, dx, dy, 2.0f, N));

  /* a graph of ten launches on a stream of ours, replayed; then every node's
  ** `a` set to 0.5 (node i: launch i of the capture) and replayed again */
  CUstream s;
  CHECK(cu->cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK(cu->cuCtxSynchronize());
  tilua_graph *g;
  CHECK(tilua_graph_begin(&g, s));
  for (int i = 0; i < 10; i++)
    CHECK(saxpy_launch(s, grid, dx, dy, 1.0f, N));
  CHECK(tilua_graph_end(g));
  CHECK(tilua_graph_launch(g, s));
  for (int i = 0; i < tilua_graph_nodes(g); i++)
    CHECK(saxpy_graph_set(g, i, grid, dx, dy, 0.5f, N));
  CHECK(tilua_graph_launch(g, s));
  CHECK(cu->cuStreamSynchronize(s));
  tilua_graph_destroy(g);
  CHECK(cu->cuStreamDestroy(s));

  CHECK(cu->cuMemcpyDtoH(got, dy, N * sizeof *got));
  int bad = 0;
  for (int i = 0; check && i < N; i++) { /* y + 2x, then ten times + x, then ten times + x/2 */
    float want = y[i];
    want = 2.0f * x[i] + want;
    for (int k = 0; k < 10; k++)
      want = 1.0f * x[i] + want;
    for (int k = 0; k < 10; k++)
      want = 0.5f * x[i] + want;
    float err = got[i] > want ? got[i] - want : want - got[i]; /* the GPU may fuse a * x + y */
    if (!(err <= 1e-5f * want + 1e-6f) && bad++ < 5)
      fprintf(stderr, "y[%d] = %g, want %g\n", i, got[i], want);
  }
  printf("saxpy: %s\n", !check ? "launched (not checked)"
                        : bad  ? "FAILED"
                               : "ok, 21 launches of a million elements");
  CHECK(cu->cuMemFree(dx));
  CHECK(cu->cuMemFree(dy));
  free(x), free(y), free(got);
  return bad ? 1 : 0;
}
