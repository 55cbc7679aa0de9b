/* The C API's CUDA graphs (tlDeviceBeginGraph ... tlGraphDestroy), through the
** stand-in driver (TILUA_FAKE_CUDA, spec/c/fake_cuda.c) and its call log:
** launches captured, not run; a replay runs them; an update sets the nodes'
** arguments; a copy during a capture, an update of another length or another
** kernel, a destroyed graph and a closed device are refused. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "capi_check.h"

static const char *const KERNELS =
    "module {\n"
    "  tile.kernel {arg_names = [\"n\"], kernel_spec = {block = [32, 1, 1]}, sym_name = \"first\"} {\n"
    "  ^bb0(%0: i32):\n"
    "  }\n"
    "  tile.kernel {arg_names = [\"n\"], kernel_spec = {block = [64, 1, 1]}, sym_name = \"second\"} {\n"
    "  ^bb0(%0: i32):\n"
    "  }\n"
    "}\n";

static tlLogicalResult launch(tlDevice d, tlModule m, const char *k, unsigned gx, int n) {
  unsigned grid[3] = {gx, 1, 1};
  tlKernelArg a = {TL_ARG_I32, {0}};
  a.value.i32 = n;
  return tlDeviceLaunch(d, m, str(k), grid, 1, &a);
}

int main(void) {
  const char *fake = getenv("TILUA_FAKE_CUDA");
  if (!fake || !*fake) {
    printf("capi_graph: the stand-in driver is not built (TILUA_FAKE_CUDA): skipped\n");
    return 0;
  }
  char log[64];
  snprintf(log, sizeof log, "/tmp/capi_graph.%d.log", (int)getpid());
  setenv("TILUA_LIBCUDA", fake, 1);
  setenv("FAKE_CUDA_LOG", log, 1);
  tlContext c = new_context();
  tlModule m = tlModuleCreateParse(c, str(KERNELS), str("k.tir"));
  CHECK(!tlModuleIsNull(m) && tlLogicalResultIsSuccess(tlModuleRunPipeline(m, str("ptx"))));
  tlDevice d = tlDeviceOpen(c, 0);
  CHECK(!tlDeviceIsNull(d));
  uint64_t buf = 0;
  CHECK(tlLogicalResultIsSuccess(tlDeviceAlloc(d, 64, &buf)));

  /* captured, not run; a copy is refused meanwhile */
  CHECK(tlLogicalResultIsSuccess(tlDeviceBeginGraph(d)));
  CHECK(tlLogicalResultIsSuccess(launch(d, m, "first", 2, 7)));
  CHECK(tlLogicalResultIsSuccess(launch(d, m, "second", 3, 8)));
  int before = errors;
  float host[4] = {0};
  CHECK(tlLogicalResultIsFailure(tlDeviceCopyToDevice(d, buf, host, sizeof host)));
  CHECK_ERROR(before, "cannot happen while a graph captures launches");
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlDeviceBeginGraph(d)));
  CHECK_ERROR(before, "being captured or updated already");
  tlGraph g = tlDeviceEndGraph(d);
  CHECK(!tlGraphIsNull(g) && tlGraphGetNumNodes(g) == 2);
  CHECK(!strstr(read_log(log), "launch first"));

  /* replayed: both run */
  CHECK(tlLogicalResultIsSuccess(tlGraphLaunch(g)));
  CHECK(strstr(read_log(log),
               "launch (graph) first grid=2,1,1 block=32,1,1 cluster=1,1,1 smem=0 args=0x7\n"
               "launch (graph) second grid=3,1,1 block=64,1,1 cluster=1,1,1 smem=0 args=0x8\n") !=
        NULL);

  /* updated: new grids and arguments, then replayed */
  CHECK(tlLogicalResultIsSuccess(tlGraphBeginUpdate(g)));
  CHECK(tlLogicalResultIsSuccess(launch(d, m, "first", 4, 70)));
  CHECK(tlLogicalResultIsSuccess(launch(d, m, "second", 1, 80)));
  CHECK(tlLogicalResultIsSuccess(tlGraphEndUpdate(g)));
  CHECK(tlLogicalResultIsSuccess(tlGraphLaunch(g)));
  CHECK(strstr(read_log(log),
               "launch (graph) first grid=4,1,1 block=32,1,1 cluster=1,1,1 smem=0 args=0x46\n"
               "launch (graph) second grid=1,1,1 block=64,1,1 cluster=1,1,1 smem=0 args=0x50\n") !=
        NULL);

  /* an update that launches another kernel, or too few */
  CHECK(tlLogicalResultIsSuccess(tlGraphBeginUpdate(g)));
  before = errors;
  CHECK(tlLogicalResultIsFailure(launch(d, m, "second", 1, 1)));
  CHECK_ERROR(before,
              "launch #1 of the update is kernel 'second', node 0 of the graph kernel 'first'");
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlGraphEndUpdate(g)));
  CHECK_ERROR(before, "the update launched 0 kernels; the graph has 2");
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlGraphEndUpdate(g)));
  CHECK_ERROR(before, "the graph is not being updated");

  /* destroyed, or its device closed: refused */
  tlGraph g2 = g;
  tlGraphDestroy(g);
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlGraphLaunch(g2)));
  CHECK_ERROR(before, "the graph was destroyed, or its device closed");
  CHECK(tlGraphGetNumNodes(g2) == -1);
  CHECK(tlLogicalResultIsSuccess(tlDeviceBeginGraph(d)));
  CHECK(tlLogicalResultIsSuccess(launch(d, m, "first", 1, 1)));
  g = tlDeviceEndGraph(d);
  CHECK(!tlGraphIsNull(g));
  tlDeviceClose(d);
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlGraphLaunch(g)));
  CHECK_ERROR(before, "the graph was destroyed, or its device closed");
  tlContextDestroy(c);
  remove(log);
  return failures ? 1 : 0;
}
