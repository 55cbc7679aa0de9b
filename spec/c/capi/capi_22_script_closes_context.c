/* Repro 22 (a misuse the C API once let through): a script that closes the (borrowed) default
** context made the next unprotected Lua call abort the host ("PANIC: unprotected error"). */
#include "capi_check.h"

int main(void) {
  tlContext c = new_context();
  int before = errors;
  tlModule m = tlModuleCreateFromScript(c, str("require('tilua').context():close()"), str("s.lua"));
  CHECK(tlModuleIsNull(m));
  CHECK_ERROR(before, "the script closed the default context");
  /* the context is the host's and stays usable; the next script gets a fresh Lua state */
  m = tlModuleCreateFromScript(c,
                               str("local tl = require 'tilua'\n"
                                   "local k = tl.kernel('k', {block = {32, 1, 1}})\n"
                                   "function k.body() end\n"),
                               str("ok.lua"));
  CHECK(!tlModuleIsNull(m));
  CHECK(tlLogicalResultIsSuccess(tlModuleVerify(m)));
  /* a script error is a diagnostic at the script's line, not an abort */
  before = errors;
  m = tlModuleCreateFromScript(c, str("local x = 1\nerror('boom')\n"), str("err.lua"));
  CHECK(tlModuleIsNull(m));
  CHECK_ERROR(before, "boom");
  /* an error object that is not a string, and a close inside a pcall the script catches */
  before = errors;
  CHECK(tlModuleIsNull(
      tlModuleCreateFromScript(c, str("error(setmetatable({}, {}))"), str("t.lua"))));
  CHECK(errors == before + 1);
  before = errors;
  m = tlModuleCreateFromScript(c, str("pcall(function() require('tilua').context():close() end)"),
                               str("p.lua"));
  CHECK(tlModuleIsNull(m));
  CHECK_ERROR(before, "closed the default context");
  CHECK(!tlTypeIsNull(tlF32TypeGet(c)));
  tlContextDestroy(c);
  return finish("capi_22_script_closes_context");
}
