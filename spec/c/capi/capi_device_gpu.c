/* tlDeviceLaunch on the GPU gives a kernel all of its shared memory: its
** static allocations are dynamic shared memory in the PTX, so the launch must
** ask for them (64 KiB here, past the 48 KiB a launch gets without raising the
** function's limit). Each thread writes its element to shared memory, and
** after a barrier reads the one of the thread at the mirror position. Exits 77
** without a GPU (ctest: skipped). */
#include <stdlib.h>

#include "capi_check.h"

/* one CTA reverses the whole array, and says so (kernel_spec.grid): the protocol
** check every compile runs checks it on that grid, and a launch on another is refused */
static const char *const REVERSE =
    "module {\n"
    "  tile.kernel {arg_names = [\"x\", \"y\"], kernel_spec = {block = [256, 1, 1], grid = [1, 1, 1]}, sym_name = "
    "\"reverse\"} {\n"
    "  ^bb0(%0: ptr<f32, global>, %1: ptr<f32, global>):\n"
    "    %2 = tile.alloc_shared {count = 16384} : ptr<f32, shared>\n"
    "    %3 = tile.thread_id {dim = \"x\"} : i32\n"
    "    %4 = tile.ptr_add %0, %3 : ptr<f32, global>\n"
    "    %5 = tile.load %4 : f32\n"
    "    %6 = arith.constant {value = 64 : i32} : i32\n"
    "    %7 = arith.muli %3, %6 : i32\n"
    "    %8 = tile.ptr_add %2, %7 : ptr<f32, shared>\n"
    "    tile.store %5, %8\n"
    "    tile.barrier\n"
    "    %9 = arith.constant {value = 255 : i32} : i32\n"
    "    %10 = arith.subi %9, %3 : i32\n"
    "    %11 = arith.muli %10, %6 : i32\n"
    "    %12 = tile.ptr_add %2, %11 : ptr<f32, shared>\n"
    "    %13 = tile.load %12 : f32\n"
    "    %14 = tile.ptr_add %1, %3 : ptr<f32, global>\n"
    "    tile.store %13, %14\n"
    "  }\n"
    "}\n";

int main(void) {
  unsetenv("TILUA_LIBCUDA"); /* the real driver, not the stand-in */
  tlContext c = new_context();
  tlModule m = tlModuleCreateParse(c, str(REVERSE), str("reverse.tir"));
  CHECK(!tlModuleIsNull(m) && tlLogicalResultIsSuccess(tlModuleRunPipeline(m, str("ptx"))));
  int before = errors;
  tlDevice d = tlDeviceOpen(c, 0);
  if (tlDeviceIsNull(d)) {
    printf("SKIP: no GPU (%s)\n", last);
    tlContextDestroy(c);
    return errors == before + 1 && !failures ? 77 : 1;
  }
  enum { N = 256 };
  float x[N], y[N];
  for (int i = 0; i < N; i++)
    x[i] = (float)i + 0.5f, y[i] = -1.0f;
  uint64_t dx = 0, dy = 0;
  CHECK(tlLogicalResultIsSuccess(tlDeviceAlloc(d, sizeof x, &dx)));
  CHECK(tlLogicalResultIsSuccess(tlDeviceAlloc(d, sizeof y, &dy)));
  CHECK(tlLogicalResultIsSuccess(tlDeviceCopyToDevice(d, dx, x, sizeof x)));
  tlKernelArg args[2] = {{TL_ARG_POINTER, {0}}, {TL_ARG_POINTER, {0}}};
  args[0].value.pointer = dx, args[1].value.pointer = dy;
  unsigned grid[3] = {1, 1, 1};
  CHECK(tlLogicalResultIsSuccess(tlDeviceLaunch(d, m, str("reverse"), grid, 2, args)));
  CHECK(tlLogicalResultIsSuccess(tlDeviceCopyToHost(d, y, dy, sizeof y)));
  int bad = 0;
  for (int i = 0; i < N; i++)
    if (y[i] != x[N - 1 - i] && bad++ < 5)
      fprintf(stderr, "y[%d] = %g, want %g\n", i, (double)y[i], (double)x[N - 1 - i]);
  CHECK(bad == 0);
  printf("capi_device_gpu: a kernel with 64 KiB of shared memory through tlDeviceLaunch: %s\n",
         bad || failures ? "FAILED" : "OK");
  tlContextDestroy(c);
  return failures ? 1 : 0;
}
