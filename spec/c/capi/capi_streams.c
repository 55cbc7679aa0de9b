/* The C API's streams and several devices (tlDeviceCreateStream ...
** tlDeviceSynchronize, a device per context), through the stand-in driver with
** two devices (FAKE_CUDA_DEVICES) and its call log, which names the device
** whose context was current at each launch: a launch on a stream does not
** wait, each context's launches run on its own device even when the calls
** alternate, and a stream of another device, a destroyed one, a null one and
** a null handle pointer are refused. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capi_check.h"

static const char *const KERNELS =
    "module {\n"
    "  tile.kernel {arg_names = [\"n\"], kernel_spec = {block = [32, 1, 1]}, "
    "sym_name = \"k\"} {\n"
    "  ^bb0(%0: i32):\n"
    "  }\n"
    "}\n";

static tlLogicalResult run(tlDevice d, tlModule m, int n, uint64_t stream) {
  unsigned grid[3] = {1, 1, 1};
  tlKernelArg a = {TL_ARG_I32, {0}};
  a.value.i32 = n;
  return stream ? tlDeviceLaunchOnStream(d, m, str("k"), grid, 1, &a, stream)
                : tlDeviceLaunch(d, m, str("k"), grid, 1, &a);
}

int main(void) {
  const char *fake = getenv("TILUA_FAKE_CUDA");
  if (!fake || !*fake) {
    printf("capi_streams: the stand-in driver is not built (TILUA_FAKE_CUDA): skipped\n");
    return 0;
  }
  char log[64];
  snprintf(log, sizeof log, "/tmp/capi_streams.%d.log", (int)getpid());
  setenv("TILUA_LIBCUDA", fake, 1);
  setenv("FAKE_CUDA_LOG", log, 1);
  setenv("FAKE_CUDA_DEVICES", "2", 1);
  tlContext c0 = new_context(), c1 = new_context();
  tlModule m0 = tlModuleCreateParse(c0, str(KERNELS), str("k.tir"));
  tlModule m1 = tlModuleCreateParse(c1, str(KERNELS), str("k.tir"));
  CHECK(tlLogicalResultIsSuccess(tlModuleRunPipeline(m0, str("ptx"))));
  CHECK(tlLogicalResultIsSuccess(tlModuleRunPipeline(m1, str("ptx"))));
  tlDevice d0 = tlDeviceOpen(c0, 0), d1 = tlDeviceOpen(c1, 1);
  CHECK(!tlDeviceIsNull(d0) && !tlDeviceIsNull(d1));
  uint64_t s0 = 0, s1 = 0;
  CHECK(tlLogicalResultIsSuccess(tlDeviceCreateStream(d0, &s0)) && s0);
  CHECK(tlLogicalResultIsSuccess(tlDeviceCreateStream(d1, &s1)) && s1);
  /* alternating calls: each launch on its own device */
  CHECK(tlLogicalResultIsSuccess(run(d0, m0, 10, s0)));
  CHECK(tlLogicalResultIsSuccess(run(d1, m1, 11, s1)));
  CHECK(tlLogicalResultIsSuccess(run(d0, m0, 12, 0)));
  CHECK(tlLogicalResultIsSuccess(run(d1, m1, 13, 0)));
  CHECK(tlLogicalResultIsSuccess(tlDeviceSynchronize(d0, s0)));
  CHECK(tlLogicalResultIsSuccess(tlDeviceSynchronize(d1, 0)));
  const char *text = read_log(log);
  const char *a = strstr(text, "device=0 args=0xa"), *b = strstr(text, "device=1 args=0xb"),
             *e = strstr(text, "device=0 args=0xc"), *f = strstr(text, "device=1 args=0xd");
  CHECK(a && b && e && f && a < b && b < e && e < f);
  if (!(a && b && e && f)) fprintf(stderr, "log:\n%s", text);
  /* refusals */
  int before = errors;
  CHECK(!tlLogicalResultIsSuccess(run(d0, m0, 1, s1)) && errors == before + 1 &&
        strstr(last, "the stream was not made by this device"));
  CHECK(!tlLogicalResultIsSuccess(tlDeviceSynchronize(d1, s0)) &&
        strstr(last, "not made by this device"));
  CHECK(!tlLogicalResultIsSuccess(tlDeviceCreateStream(d0, NULL)) &&
        strstr(last, "the stream pointer is NULL"));
  unsigned grid[3] = {1, 1, 1};
  tlKernelArg arg = {TL_ARG_I32, {0}};
  CHECK(!tlLogicalResultIsSuccess(tlDeviceLaunchOnStream(d0, m0, str("k"), grid, 1, &arg, 0)) &&
        strstr(last, "the stream is 0"));
  CHECK(tlLogicalResultIsSuccess(tlDeviceDestroyStream(d0, s0)));
  CHECK(!tlLogicalResultIsSuccess(run(d0, m0, 1, s0)) && strstr(last, "or was destroyed"));
  CHECK(!tlLogicalResultIsSuccess(tlDeviceDestroyStream(d0, s0)));
  tlContextDestroy(c0); /* closes device 0 and what it held; device 1 goes on */
  CHECK(tlLogicalResultIsSuccess(run(d1, m1, 14, s1)));
  CHECK(tlLogicalResultIsSuccess(tlDeviceSynchronize(d1, s1)));
  CHECK(strstr(read_log(log), "device=1 args=0xe") != NULL);
  tlContextDestroy(c1);
  unlink(log);
  return finish("capi_streams");
}
