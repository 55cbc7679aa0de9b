/* The protocol check every compile runs, through the C API: tlModuleRunPipeline
** of a pipeline that lowers to PTX checks the kernel as written first and fails
** at the line of a violation (a wait on an mbarrier that never completes);
** tl.options.check_protocol = false in the context's
** Lua state turns it off, and the kernel with the right count compiles. */
#include "capi_check.h"

/* Warp 0 arrives once on an mbarrier, then every warp waits on it: counting
** one arrival it completes, counting two it never does (a deadlock at line 7). */
static const char *script(int count) {
  static char buf[1024];
  snprintf(
      buf, sizeof buf,
      "local tl = require 'tilua'\n"
      "local k = tl.kernel('handoff', {params = {{'out', tl.ptr(tl.i32)}}, block = 64})\n"
      "k:define(function(k, p)\n"
      "  local bar = k:shared(tl.i64, 1, {align = 8})\n"
      "  tl.if_(tl.thread_id():eq(0), function() tl.mbarrier_init(bar, %d) end)\n"
      "  tl.barrier()\n"
      "  tl.if_(tl.warp_id():eq(0), function() tl.elect_one(function() tl.mbarrier_arrive(bar) end) end)\n"
      "  tl.mbarrier_wait(bar, 0)\n"
      "end)\n",
      count);
  return buf;
}

int main(void) {
  tlContext c = new_context();
  tlModule m = tlModuleCreateFromScript(c, str(script(1)), str("good.lua"));
  CHECK(!tlModuleIsNull(m));
  CHECK(tlLogicalResultIsSuccess(tlModuleRunPipeline(m, str("ptx"))));
  CHECK(tlLogicalResultIsSuccess(tlModuleEmitPTX(m, sink, NULL)));

  int before = errors;
  m = tlModuleCreateFromScript(c, str(script(2)), str("hang.lua"));
  CHECK(!tlModuleIsNull(m));
  CHECK(tlLogicalResultIsFailure(tlModuleRunPipeline(m, str("ptx"))));
  CHECK_ERROR(before, "protocol violation in kernel 'handoff'");
  CHECK(strstr(last, "counterexample") != NULL);
  CHECK(strstr(last, "deadlock") != NULL);
  CHECK(strcmp(last_file, "hang.lua") == 0 && last_line == 8);
  /* a pipeline that does not lower to PTX is no compile: not checked */
  CHECK(tlLogicalResultIsSuccess(tlModuleRunPipeline(m, str("canonicalize"))));

  /* off in the context's Lua state */
  tlModuleCreateFromScript(c, str("require('tilua').options.check_protocol = false"),
                           str("off.lua"));
  m = tlModuleCreateFromScript(c, str(script(2)), str("hang.lua"));
  CHECK(tlLogicalResultIsSuccess(tlModuleRunPipeline(m, str("ptx"))));
  tlContextDestroy(c);
  return finish("capi_27_protocol_check");
}
