/* Repro 23 (a misuse the C API once let through): tlModuleCreateFromScript returned whatever
** tl.module() was, also a module of a context the Lua state owned and later collected. */
#include "capi_check.h"

int main(void) {
  tlContext c = new_context();
  int before = errors;
  tlModule m = tlModuleCreateFromScript(
      c, str("local tl = require 'tilua'; tl.set_module(tl.core.context():module())"),
      str("s.lua"));
  CHECK(tlModuleIsNull(m));
  CHECK_ERROR(before, "belongs to a context the script made");
  /* not a module at all */
  before = errors;
  m = tlModuleCreateFromScript(c, str("require('tilua').set_module(42)"), str("n.lua"));
  CHECK(tlModuleIsNull(m));
  CHECK_ERROR(before, "is not a module");
  /* a module of ours survives a collection in a later script */
  m = tlModuleCreateFromScript(c,
                               str("local tl = require 'tilua'\n"
                                   "local k = tl.kernel('k', {block = {32, 1, 1}})\n"
                                   "function k.body() end\n"),
                               str("ok.lua"));
  CHECK(!tlModuleIsNull(m));
  tlModuleCreateFromScript(c, str("collectgarbage(); collectgarbage()"), str("gc.lua"));
  tlModulePrint(m, sink, NULL);
  CHECK(tlLogicalResultIsSuccess(tlModuleVerify(m)));
  tlContextDestroy(c);
  return finish("capi_23_script_foreign_module");
}
