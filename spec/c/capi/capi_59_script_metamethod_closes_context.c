/* A script whose metamethod, attribute hook or finalizer closes the
** (borrowed) default context in the middle of a binding call took the host
** down. The close is refused with an error at the script's line; the host's
** context stays usable. */
#include "capi_check.h"

static const char *const scripts[][2] = {
    /* the operand list's __len closes the context core.op_create holds */
    {"oplist_len.lua",
     "local tl = require 'tilua'\n"
     "local ops = setmetatable({}, { __len = function() tl.context():close(); return 0 end })\n"
     "tl.core.op_create(tl.context(), 'arith.constant', ops, {}, nil, 0)\n"},
    /* a table attribute's __len */
    {"attr_len.lua",
     "local tl = require 'tilua'\n"
     "local t = setmetatable({ 1 }, { __len = function() tl.context():close(); return 1 end })\n"
     "tl.core.op_create(tl.context(), 'arith.constant', {}, {}, { x = t }, 0)\n"},
    /* the DSL's own extension point, an __attr hook, inside tl.op */
    {"attr_hook.lua",
     "local tl = require 'tilua'\n"
     "local k = tl.kernel('k', { params = { { 'n', tl.i32 } } })\n"
     "k:define(function(k, p)\n"
     "  tl.op('arith.constant', {}, { tl.i32 }, { value = 1, extra = setmetatable({},\n"
     "    { __attr = function() tl.context():close(); return 7 end }) })\n"
     "end)\n"},
};

int main(void) {
  tlContext c = new_context();
  for (size_t i = 0; i < sizeof scripts / sizeof scripts[0]; i++) {
    int before = errors;
    tlModule m = tlModuleCreateFromScript(c, str(scripts[i][1]), str(scripts[i][0]));
    CHECK(tlModuleIsNull(m));
    CHECK_ERROR(before, "cannot close a tilua context while a tilua call is using it");
    CHECK(strcmp(last_file, scripts[i][0]) == 0 && last_line >= 2);
    /* the host's context works */
    tlModule e = tlModuleCreateEmpty(c);
    CHECK(!tlModuleIsNull(e));
    CHECK(tlLogicalResultIsSuccess(tlModuleVerify(e)));
  }
  /* finalizers that close the default context while the script builds kernels: closes
  ** inside a binding call are refused, one between calls is the documented failure
  ** (tl.options.compile_gc = false: the collector runs through k:compile too, as the
  ** script asks, so that finalizers also run between the calls of the lowering) */
  int before_gc = errors;
  CHECK(tlModuleIsNull(tlModuleCreateFromScript(
      c,
      str("local tl = require 'tilua'\n"
          "local n = 0\n"
          "local function arm() setmetatable({}, { __gc = function() n = n + 1\n"
          "  if n % 7 == 0 then pcall(function() tl.context():close() end) end\n"
          "  if n < 500 then arm() end end }) end\n"
          "tl.options.compile_gc = false\n"
          "collectgarbage('incremental', 1, 1000, 1)\n"
          "arm()\n"
          "for i = 1, 40 do pcall(function()\n"
          "  tl.new_module()\n"
          "  local k = tl.kernel('k' .. i, { params = { { 'a', tl.ptr(tl.f32) } }, block = 32 })\n"
          "  k:define(function(_, p) (p.a + tl.thread_id()):store(1.0) end)\n"
          "  k:compile()\n"
          "end) end\n"),
      str("finalizers.lua"))));
  CHECK(errors > before_gc && strstr(last, "the script closed the default context") != NULL);
  CHECK(!tlModuleIsNull(tlModuleCreateEmpty(c)));
  /* a close outside any binding call is the documented failure, and the next script runs */
  int before = errors;
  CHECK(tlModuleIsNull(
      tlModuleCreateFromScript(c, str("require('tilua').context():close()"), str("s.lua"))));
  CHECK_ERROR(before, "the script closed the default context");
  tlModule m = tlModuleCreateFromScript(c,
                                        str("local tl = require 'tilua'\n"
                                            "local k = tl.kernel('k', {block = {32, 1, 1}})\n"
                                            "k:define(function() end)\n"),
                                        str("ok.lua"));
  CHECK(!tlModuleIsNull(m));
  tlContextDestroy(c);
  return finish("capi_59_script_metamethod_closes_context");
}
