/* The C API's GPU (tlDevice*): without a driver, a null device and a
** diagnostic; with the stand-in driver (TILUA_FAKE_CUDA, spec/c/fake_cuda.c,
** whose kernels do nothing), every misuse of tlDeviceLaunch is refused before
** anything is launched, and a good launch goes through. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capi_check.h"

/* A kernel with 1024 bytes of static shared memory (all dynamic in the PTX). */
static const char *const SHARED_KERNEL =
    "module {\n"
    "  tile.kernel {arg_names = [\"p\"], kernel_spec = {block = [32, 1, 1]}, sym_name = \"ks\"} {\n"
    "  ^bb0(%0: ptr<f32, global>):\n"
    "    %1 = tile.alloc_shared {count = 256} : ptr<f32, shared>\n"
    "    %2 = arith.constant {value = 1.0 : f32} : f32\n"
    "    tile.store %2, %1\n"
    "    tile.barrier\n"
    "    %3 = tile.load %1 : f32\n"
    "    tile.store %3, %0\n"
    "  }\n"
    "}\n";

/* the kernel for one CTA, saying so (kernel_spec.grid): launched on that grid only */
static const char *const ONE_CTA_KERNEL =
    "module {\n"
    "  tile.kernel {arg_names = [\"p\", \"n\"], kernel_spec = {block = [32, 1, 1], grid = [1, 1, 1]}, "
    "sym_name = \"one\"} {\n"
    "  ^bb0(%0: ptr<f32, global>, %1: i32):\n"
    "    %2 = arith.constant {value = 1.0 : f32} : f32\n"
    "    tile.store %2, %0\n"
    "  }\n"
    "}\n";

/* a kernel whose n must be the grid's threads (kernel_spec.sizes): launched within that only */
static const char *const PER_THREAD_KERNEL =
    "module {\n"
    "  tile.kernel {arg_names = [\"p\", \"n\"], kernel_spec = {block = [32, 1, 1], sizes = {n = "
    "\"grid_threads\"}}, sym_name = \"pt\"} {\n"
    "  ^bb0(%0: ptr<f32, global>, %1: i32):\n"
    "    %2 = arith.constant {value = 1.0 : f32} : f32\n"
    "    tile.store %2, %0\n"
    "  }\n"
    "}\n";

static const char *const KERNEL =
    "module {\n"
    "  tile.kernel {arg_names = [\"p\", \"n\"], kernel_spec = {block = [32, 1, 1]}, sym_name = \"k\"} {\n"
    "  ^bb0(%0: ptr<f32, global>, %1: i32):\n"
    "    %2 = arith.constant {value = 1.0 : f32} : f32\n"
    "    tile.store %2, %0\n"
    "  }\n"
    "}\n";

int main(void) {
  const char *fake = getenv("TILUA_FAKE_CUDA");
  /* no driver: refused with a diagnostic */
  setenv("TILUA_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
  tlContext c = new_context();
  int before = errors;
  CHECK(tlDeviceIsNull(tlDeviceOpen(c, 0)));
  CHECK_ERROR(before, "tlDeviceOpen: no GPU");
  tlContextDestroy(c);
  if (!fake || !*fake) {
    printf(
        "capi_device: the stand-in driver is not built (TILUA_FAKE_CUDA): the launch checks are skipped\n");
    return failures ? 1 : 0;
  }
  setenv("TILUA_LIBCUDA", fake, 1);
  c = new_context();
  /* every CTA of the kernel stores p[0]: a race the protocol check of every compile
  ** refuses on two CTAs; this test is about launches */
  tlModuleCreateFromScript(c, str("require('tilua').options.check_protocol = false"),
                           str("off.lua"));
  tlModule m = tlModuleCreateParse(c, str(KERNEL), str("k.tir"));
  CHECK(!tlModuleIsNull(m) && tlLogicalResultIsSuccess(tlModuleRunPipeline(m, str("ptx"))));
  tlDevice d = tlDeviceOpen(c, 0);
  CHECK(!tlDeviceIsNull(d));
  before = errors;
  CHECK(tlDeviceIsNull(tlDeviceOpen(c, 0)));
  CHECK_ERROR(before, "one per context");

  uint64_t buf = 0;
  CHECK(tlLogicalResultIsSuccess(tlDeviceAlloc(d, 1024, &buf)) && buf);
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlDeviceAlloc(d, 1024, NULL)));
  CHECK_ERROR(before, "the address pointer is NULL");
  float host[4] = {1, 2, 3, 4};
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlDeviceCopyToDevice(d, buf, NULL, sizeof host)));
  CHECK_ERROR(before, "the source is NULL");
  CHECK(tlLogicalResultIsSuccess(tlDeviceCopyToDevice(d, buf, host, sizeof host)));

  unsigned grid[3] = {4, 1, 1}, zero[3] = {0, 1, 1};
  tlKernelArg args[2] = {{TL_ARG_POINTER, {0}}, {TL_ARG_I32, {0}}};
  args[0].value.pointer = buf;
  args[1].value.i32 = 4;
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlDeviceLaunch(d, m, str("nope"), grid, 2, args)));
  CHECK_ERROR(before, "the module has no kernel 'nope'");
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlDeviceLaunch(d, m, str("k"), grid, 1, args)));
  CHECK_ERROR(before, "kernel 'k' takes 2 arguments, got 1");
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlDeviceLaunch(d, m, str("k"), grid, -1, args)));
  CHECK(errors == before + 1);
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlDeviceLaunch(d, m, str("k"), grid, 2, NULL)));
  CHECK(errors == before + 1);
  args[1].kind = TL_ARG_F64;
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlDeviceLaunch(d, m, str("k"), grid, 2, args)));
  CHECK_ERROR(before, "argument #1: the kernel wants i32, got f64");
  args[1].kind = (tlKernelArgKind)99;
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlDeviceLaunch(d, m, str("k"), grid, 2, args)));
  CHECK_ERROR(before, "an unknown kind");
  args[1].kind = TL_ARG_I32;
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlDeviceLaunch(d, m, str("k"), zero, 2, args)));
  CHECK_ERROR(before, "three non-zero extents");
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlDeviceLaunch(d, m, str("k"), NULL, 2, args)));
  CHECK_ERROR(before, "three non-zero extents");
  /* a module of another context */
  tlContext other = new_context();
  tlModule om = tlModuleCreateParse(other, str(KERNEL), str("k.tir"));
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlDeviceLaunch(d, om, str("k"), grid, 2, args)));
  CHECK(errors == before + 1);
  tlContextDestroy(other);
  /* the good launch (the stand-in driver runs nothing), twice: the loaded module is reused */
  CHECK(tlLogicalResultIsSuccess(tlDeviceLaunch(d, m, str("k"), grid, 2, args)));
  CHECK(tlLogicalResultIsSuccess(tlDeviceLaunch(d, m, str("k"), grid, 2, args)));
  CHECK(tlLogicalResultIsSuccess(tlDeviceCopyToHost(d, host, buf, sizeof host)));
  /* a kernel that fixes its grid: any other is refused, its own runs */
  tlModule one = tlModuleCreateParse(c, str(ONE_CTA_KERNEL), str("one.tir"));
  CHECK(!tlModuleIsNull(one) && tlLogicalResultIsSuccess(tlModuleRunPipeline(one, str("ptx"))));
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlDeviceLaunch(d, one, str("one"), grid, 2, args)));
  CHECK_ERROR(before,
              "kernel 'one' runs on the grid {1, 1, 1} only (its kernel_spec.grid), got {4, 1, 1}");
  unsigned one_grid[3] = {1, 1, 1};
  CHECK(tlLogicalResultIsSuccess(tlDeviceLaunch(d, one, str("one"), one_grid, 2, args)));
  /* a kernel that declares its sizes: n = 4 on 4 CTAs of 32 threads is refused, 128 runs */
  tlModule pt = tlModuleCreateParse(c, str(PER_THREAD_KERNEL), str("pt.tir"));
  CHECK(!tlModuleIsNull(pt) && tlLogicalResultIsSuccess(tlModuleRunPipeline(pt, str("ptx"))));
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlDeviceLaunch(d, pt, str("pt"), grid, 2, args)));
  CHECK_ERROR(before,
              "kernel 'pt' takes n = the grid's threads (128: its kernel_spec.sizes), got 4");
  args[1].value.i32 = 128;
  CHECK(tlLogicalResultIsSuccess(tlDeviceLaunch(d, pt, str("pt"), grid, 2, args)));
  args[1].value.i32 = 4;
  /* the launch brings the kernel's static shared memory (as k:launch does) */
  char log[] = "/tmp/capi_device_XXXXXX";
  int fd = mkstemp(log);
  CHECK(fd >= 0);
  close(fd);
  setenv("FAKE_CUDA_LOG", log, 1);
  tlModule sm = tlModuleCreateParse(c, str(SHARED_KERNEL), str("ks.tir"));
  CHECK(!tlModuleIsNull(sm) && tlLogicalResultIsSuccess(tlModuleRunPipeline(sm, str("ptx"))));
  CHECK(tlLogicalResultIsSuccess(tlDeviceLaunch(d, sm, str("ks"), grid, 1, args)));
  unsetenv("FAKE_CUDA_LOG");
  char line[128] = "";
  FILE *lf = fopen(log, "r");
  CHECK(lf && fgets(line, sizeof line, lf));
  if (lf) fclose(lf);
  remove(log);
  CHECK(strncmp(line, "launch ks ", 10) == 0 && strstr(line, " smem=1024 "));
  CHECK(tlLogicalResultIsSuccess(tlDeviceFree(d, buf)));
  /* a second free, or an address never allocated: refused before the driver sees it */
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlDeviceFree(d, buf)));
  CHECK_ERROR(before, "was not allocated by this runtime, or was freed already");
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlDeviceFree(d, 12345)));
  CHECK_ERROR(before, "was not allocated by this runtime");
  /* closed: refused */
  tlDeviceClose(d);
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlDeviceAlloc(d, 16, &buf)));
  CHECK_ERROR(before, "the device was closed");
  /* a device of a destroyed context: refused without being touched */
  d = tlDeviceOpen(c, 0);
  CHECK(!tlDeviceIsNull(d));
  tlContextDestroy(c);
  CHECK(tlLogicalResultIsFailure(tlDeviceAlloc(d, 16, &buf)));
  tlDeviceClose(d);
  return failures ? 1 : 0;
}
