-- Bad input never crashes: every reproducer of the bad-input audit
-- (spec/fixtures/bad-input, from ../shared/repro/bad-input) answers with a
-- located error and a non-zero exit, or with the right result. The sanitizer
-- build runs this too, so a use-after-free or an overflow fails here.
local H = dofile "spec/helper.lua"
local tl = require "tilua"
local parser = require "tilua.parser"

local DIR = "spec/fixtures/bad-input/"

-- A run ended by a signal or a sanitizer report is a crash, whatever it printed.
local function no_crash(out, err, code)
  assert.is_true(code < 128, ("crashed (exit %d): %s"):format(code, err))
  assert.lacks(err, "AddressSanitizer")
  assert.lacks(err, "runtime error:")
  assert.lacks(err, "PANIC")
  return out, err, code
end

-- A script (its text) run on the stand-in driver (spec/c/fake_cuda.c), env
-- added: out, err, code (no crash); nil and pending where it is not built.
local function on_fake_driver(text, env)
  local fake = os.getenv "TILUA_FAKE_CUDA"
  if not fake or fake == "" then pending "TILUA_FAKE_CUDA is not set (run through ctest)" return nil end
  local script = H.temp(text, ".lua")
  local e = { TILUA_LIBCUDA = fake }
  for k, v in pairs(env or {}) do e[k] = v end
  local out, err, code = no_crash(H.tilua_env(e, { script }))
  os.remove(script)
  return out, err, code
end

assert:register("assertion", "lacks", function(_, args) return not tostring(args[1]):find(args[2], 1, true) end,
  "assertion.lacks.positive", "assertion.lacks.negative")

describe("bad input", function()
  describe("through tilua opt", function()
    it("01: a block of 2^64 threads is refused, naming its extents", function()
      local _, err, code = no_crash(H.tilua_run { "opt", DIR .. "01_opt_block_overflow.tir" })
      assert.equal(1, code)
      assert.matches("01_opt_block_overflow%.tir:2:3: error: 'tile.kernel' op block", err)
    end)

    it("02: a barrier id base of 2^63-1 is refused without overflow", function()
      local _, err, code = no_crash(H.tilua_run { "opt", DIR .. "02_opt_barrier_pool_overflow.tir" })
      assert.equal(1, code)
      assert.matches("02_opt_barrier_pool_overflow%.tir:%d+:%d+: error: .*barrier_id_base", err)
    end)

    for _, f in ipairs { "03_opt_deep_regions_30_ok.tir", "03_opt_deep_regions_35.tir", "04_opt_deep_brackets_100.tir" } do
      it(f .. ": deep nesting parses and prints back unchanged", function()
        local out, err, code = no_crash(H.tilua_run { "opt", DIR .. f })
        assert.equal(0, code, err)
        assert.equal(H.slurp(DIR .. f), out)
      end)
    end

    it("05: an expected-error offset past any line is a problem with its line, not a crash", function()
      local _, err, code = no_crash(H.tilua_run { "opt", "--verify-diagnostics", DIR .. "05_opt_vdiag_huge_offset.tir" })
      assert.equal(1, code)
      assert.matches("05_opt_vdiag_huge_offset%.tir:2: the line offset of expected%-error@%+9+ is out of range", err)
    end)

    it("06: literals out of the range of their type are errors at the literal", function()
      local text = H.slurp(DIR .. "06_opt_int_literal_wraps.tir")
      local cases = {
        { "300 : i8", "integer literal 300 out of the range of i8" },
        { "9223372036854775807 : i32", "out of the range of i32" },
        { "0x7FC00001 : f16", "hexadecimal float bits 0x7FC00001 do not fit f16" },
        { "99999999999999999999 : i64", "integer literal out of range" },
        { "0x1FFFFFFFFFFFFFFFF : i64", "integer literal out of range" },
      }
      for _, c in ipairs(cases) do
        local m, err = parser.parse(("module {\n  %%0 = arith.constant {value = %s} : i8\n}"):format(c[1]), { file = "w.tir" })
        assert.is_nil(m)
        assert.matches("^w%.tir:2:%d+: error: ", err)
        assert.truthy(err:find(c[2], 1, true), err)
      end
      -- the first wrong literal of the reproducer is the one reported
      local _, err, code = no_crash(H.tilua_run({ "opt", "-" }, text))
      assert.equal(1, code)
      assert.matches("<stdin>:3:34: error: integer literal 300 out of the range of i8", err)
      -- a NaN payload and a 64-bit pattern are kept bit for bit
      local m = assert(parser.parse("module {a = 0x7FF8000000000001 : f64, b = 0xFFF8000000000000 : f64, c = 0x7E01 : f16} {\n}"))
      local again = assert(parser.parse(m:print()))
      assert.equal(m:print(), again:print())
      assert.truthy(m:print():find("0x7FF8000000000001", 1, true), m:print())
    end)
  end)

  describe("lowering arithmetic that cannot overflow", function()
    it("07: a ptr_add offset of INT64_MIN elements is refused at the op, not lowered with an overflow", function()
      local _, err, code = no_crash(H.tilua_run { "opt", "-p", "ptx", DIR .. "07_opt_ptr_add_int64_min.tir" })
      assert.equal(1, code)
      assert.matches("07_opt_ptr_add_int64_min%.tir:%d+:%d+: error: 'tile%.ptr_add' op offset of "
        .. "%-9223372036854775808 elements of 8 bytes is out of the range of a 64%-bit address", err)
    end)

    it("the IR's integers wrap when they fold (two's complement at their width), on purpose", function()
      local m = assert(parser.parse([[
module {
  tile.kernel {arg_names = ["p"], kernel_spec = {block = [32, 1, 1]}, sym_name = "k"} {
  ^bb0(%0: ptr<i64, global>):
    %1 = arith.constant {value = 2147483647 : i32} : i32
    %2 = arith.constant {value = 1 : i32} : i32
    %3 = arith.addi %1, %2 : i32
    %4 = arith.extsi %3 : i64
    tile.store %4, %0
    %5 = arith.constant {value = -9223372036854775808} : i64
    %6 = arith.constant {value = -1} : i64
    %7 = arith.muli %5, %6 : i64
    tile.store %7, %0
  }
}]], { file = "w.tir" }))
      assert.is_true((tl.core.run_pipeline(m, "canonicalize")))
      local text = m:print()
      assert.truthy(text:find("value = -2147483648} : i64", 1, true), text)
      assert.truthy(text:find("value = -9223372036854775808} : i64", 1, true), text)
      assert.falsy(text:find("arith.muli", 1, true), text)
    end)

    it("50: debug-hangs{ms=INT64_MAX} and tl.options.debug_hangs = 2^62 are range errors", function()
      local _, err, code = no_crash(H.tilua_run { "opt", "spec/fixtures/valid/arith.tir", "--pass",
                                                 "debug-hangs{ms=9223372036854775807}" })
      assert.equal(1, code)
      assert.truthy(err:find("pass 'debug-hangs': option ms must be an integer in [1, 86400000], got 9223372036854775807", 1, true), err)
      _, err, code = no_crash(H.tilua_run { "opt", "spec/fixtures/valid/arith.tir", "--pass",
                                           "debug-hangs{ms=99999999999999999999}" })
      assert.equal(1, code)
      assert.truthy(err:find('option ms must be an integer in [1, 86400000], got "99999999999999999999"', 1, true), err)
      local line = debug.getinfo(1, "l").currentline
      local ok, msg = pcall(function() tl.options.debug_hangs = 1 << 62 end)
      assert.is_false(ok)
      assert.matches(":" .. (line + 1) .. ": tl.options.debug_hangs must be nil, true, false or an integer in %[1, 86400000%], got 4611686018427387904", msg)
      assert.is_nil(tl.options.debug_hangs)
    end)

    it("every pass option is checked against its kind and range before the pass runs", function()
      local cases = {
        { "verify-protocol{grid=0}", "option grid must be an integer in [1, 1048576], got 0" },
        { "verify-protocol{grid=2147483648}", "option grid must be an integer in [1, 1048576], got 2147483648" },
        { "verify-protocol{max_seconds=forever}", 'option max_seconds must be a number in [0.001, 86400.0], got "forever"' },
        { "sink-negf-through-shapes{explain=2}", "option explain must be true or false, got 2" },
        { "tileas-remove-buffer-alias{max_iterations=-1}", "option max_iterations must be an integer in [1, 100000], got -1" },
      }
      for _, c in ipairs(cases) do
        local _, err, code = no_crash(H.tilua_run { "opt", "spec/fixtures/valid/arith.tir", "--pass", c[1] })
        assert.equal(1, code)
        assert.truthy(err:find(c[2], 1, true), c[1] .. ": " .. err)
      end
    end)

    it("51: verify-protocol{grid=100000, max_seconds=1} stops at its budget", function()
      local _, err, code = no_crash(H.tilua_env({}, { "opt", "spec/fixtures/passes/verify_protocol.tir", "--pass",
                                                     "verify-protocol{grid=100000,max_seconds=1}" }, 60))
      assert.equal(1, code) -- 124 would be the kill after 60 s
      assert.matches("kernel 'ring_copy' %(inputs [^)]*%), grid 100000%) is incomplete: time budget exceeded", err)
    end)
  end)

  describe("no context vanishes under a binding", function()
    local expected = {
      ["52_attr_len_closes_context_uaf.lua"] = ":4: cannot close a tilua context while a tilua call is using it",
      ["53_oplist_len_closes_context_nullderef.lua"] = ":4: cannot close a tilua context while a tilua call is using it",
      ["54_attr_hook_closes_context_uaf.lua"] = ":6: cannot close a tilua context while a tilua call is using it",
      -- the finalizers' closes are refused inside binding calls (caught by their pcall); the
      -- script ends with its own report
      ["55_finalizer_closes_context_uaf.lua"] = ":19: OK finalizers ",
    }
    for f, msg in pairs(expected) do
      it(f .. " fails at its line, the context intact", function()
        local _, err, code = no_crash(H.tilua_run { DIR .. f })
        assert.equal(1, code)
        assert.truthy(err:find(f .. msg, 1, true), err)
      end)
    end

    it("a close from a coroutine that a metamethod resumes is refused too; other contexts close", function()
      local other = tl.core.context()
      local line = debug.getinfo(1, "l").currentline
      local t = setmetatable({}, { __len = function()
        other:close() -- not used by the call: closes
        return coroutine.wrap(function() tl.context():close() return 0 end)()
      end })
      local ok, err = pcall(tl.core.op_create, tl.context(), "arith.constant", t, {}, nil, 0)
      assert.is_false(ok)
      assert.matches(":" .. (line + 3) .. ": cannot close a tilua context while a tilua call is using it", err)
      assert.matches("closed", tostring(other))
      assert.not_matches("closed", tostring(tl.context()))
      -- outside any call the close works
      local c = tl.core.context()
      c:close()
      assert.matches("closed", tostring(c))
    end)

    it("58: two kernels defined in coroutines that take turns each get their own ops", function()
      local out, err, code = no_crash(H.tilua_run { DIR .. "58_coroutines_build_into_the_wrong_kernel.lua" })
      assert.equal(0, code, err)
      assert.matches("^true\ntrue\nmodule {", out)
      local k = out:match('sym_name = "k"}(.-)\n  }')
      local kb = out:match('sym_name = "kb"}(.-)\n  }')
      assert.truthy(k and k:find("tile.ptr_add %0, %2 : ptr<f32, global>", 1, true), out)
      assert.truthy(kb and kb:find("tile.store %6, %8", 1, true), out)
      local m = assert(parser.parse(out:match "(module {.*)$"))
      assert.is_true((m:verify()))
    end)
  end)

  describe("through the Lua bindings", function()
    local expected = {
      ["01b_lua_block_overflow.lua"] = ":3: 'tile.kernel' op block",
      ["10_lua_cross_context_uaf.lua"] = ":6: 'arith.constant': the block belongs to another context",
      ["11_lua_insert_other_context_uaf.lua"] = ":6: insert: the objects belong to different contexts",
      ["12_lua_clone_close_default_uaf.lua"] = ":8: insert: the objects belong to different contexts",
      -- smem is checked before it becomes an attribute now; the conversion itself below
      ["13_lua_cyclic_attr_stack_overflow.lua"] = ":5: kernel 'k': smem must be a non-negative integer",
      ["14_lua_deep_attr_stack_overflow.lua"] = ":6: kernel 'k': smem must be a non-negative integer",
      ["15_lua_erased_op_reinsert_null_deref.lua"] = ":14: attempt to use an erased op ('arith.addi')",
    }
    for f, msg in pairs(expected) do
      it(f .. " fails at its line", function()
        local _, err, code = no_crash(H.tilua_run { DIR .. f })
        assert.equal(1, code)
        assert.truthy(err:find(f .. msg, 1, true), err)
      end)
    end

    it("13, 14: a cyclic or too deep table as an attribute value is an error at the line", function()
      local cyc = {}
      cyc.self = cyc
      local deep = {}
      local c = deep
      for _ = 1, 100000 do c[1] = {} c = c[1] end
      tl.new_module()
      local k = tl.kernel("attrs", { block = 32 })
      local line = debug.getinfo(1, "l").currentline
      local ok, err = pcall(k.define, k, function()
        tl.op("arith.constant", {}, { tl.i64 }, { value = 1, x = cyc })
      end)
      assert.is_false(ok)
      assert.matches(":" .. (line + 2) .. ": attribute value: a table that contains itself", err)
      ok, err = pcall(k.define, k, function()
        tl.op("arith.constant", {}, { tl.i64 }, { value = 1, x = deep })
      end)
      assert.is_false(ok)
      assert.matches(":" .. (line + 7) .. ": attribute value: tables nested deeper than 4096 levels", err)
    end)

    -- the default context was pushed where the optional type is read
    it("typed attributes take their type as optional, and refuse a wrong one", function()
      assert.equal("5", tostring(tl.core.attr_int(5)))
      assert.equal("0.5", tostring(tl.core.attr_float(0.5)))
      assert.equal("3 : i32", tostring(tl.core.attr_int(3, tl.i32)))
      assert.has_error(function() tl.core.attr_int(3, tl.f32) end, "expected an integer or index type for the attribute")
      assert.has_error(function() tl.core.attr_int(3, tl.context()) end)
    end)

    it("16: what the DSL nests, the parser reads back (1000 nested scf.if, 1000 nested arrays)", function()
      local _, err, code = no_crash(H.tilua_run { DIR .. "16_lua_dsl_deep_if_not_reparsable.lua" })
      assert.equal(0, code, err)
      tl.new_module()
      local k = tl.kernel("deep", { params = { { "n", tl.i32 } }, block = 128 })
      k:define(function(_, p)
        local function rec(d) if d > 0 then tl.if_(p.n:lt(d), function() rec(d - 1) end) end end
        rec(1000)
        local nested = {}
        for _ = 1, 999 do nested = { nested } end
        tl.op("arith.constant", {}, { tl.i64 }, { value = 1, nested = nested })
      end)
      local text = tl.module():print()
      local m = assert(parser.parse(text))
      assert.equal(text, m:print())
    end)
  end)

  describe("the parser's depth", function()
    it("reads 1000 nested regions and 1000 nested arrays, and prints them back", function()
      -- scf.if %0 { <deeper> scf.yield } { } at each level, as the printer writes it
      local open, close = {}, {}
      for d = 1, 1000 do
        local ind = ("  "):rep(d + 1)
        open[d] = ind .. "scf.if %0 {\n"
        close[1001 - d] = ind .. "  scf.yield\n" .. ind .. "} {\n" .. ind .. "}\n"
      end
      local text = "module {\n  tile.kernel {arg_names = [\"c\"], kernel_spec = {block = [128, 1, 1]}, sym_name = \"k\"} {\n"
        .. "  ^bb0(%0: i1):\n" .. table.concat(open) .. table.concat(close) .. "  }\n}\n"
      local m = assert(parser.parse(text))
      assert.is_true((m:verify()))
      assert.equal(text, m:print())
      local arrays = "module {\n  %0 = arith.constant {value = 1 : i32, x = " .. ("["):rep(1000) .. ("]"):rep(1000) .. "} : i32\n}\n"
      local m2 = assert(parser.parse(arrays))
      assert.equal(arrays, m2:print())
    end)

    it("refuses regions nested past 2048 levels in the text, the DSL and the verifier, without recursing", function()
      local n = 100000
      local text = "module {\n  tile.kernel {arg_names = [\"c\"], kernel_spec = {block = [128, 1, 1]}, sym_name = \"k\"} {\n"
        .. "  ^bb0(%0: i1):\n" .. ("scf.if %0 {\n"):rep(n) .. ("scf.yield\n} {\n}\n"):rep(n) .. "  }\n}\n"
      local m, err = parser.parse(text, { file = "deep.tir" })
      assert.is_nil(m)
      assert.matches("^deep%.tir:2050:1: error: regions nest at most 2048 levels deep", err)
      -- the DSL
      tl.new_module()
      local k = tl.kernel("deep_dsl", { params = { { "n", tl.i32 } }, block = 128 })
      local line = debug.getinfo(1, "l").currentline
      local ok, derr = pcall(k.define, k, function(_, p)
        local function rec(d) if d > 0 then tl.if_(p.n:lt(d), function() rec(d - 1) end) end end
        rec(5000)
      end)
      assert.is_false(ok)
      assert.matches(":" .. (line + 2) .. ": regions nest at most 2048 levels deep", derr)
      -- raw ops of the core API, nested past the limit: the verifier says so
      local ctx = tl.core.context()
      local mod = ctx:module()
      local blk = mod:region(1):entry()
      local i1 = tl.core.type_int(1, ctx)
      local c = tl.core.op_create(ctx, "arith.constant", {}, { i1 }, { value = tl.core.attr_int(1, i1) }, 0, blk)
      for _ = 1, 2100 do
        local op = tl.core.op_create(ctx, "scf.if", { c:result(1) }, {}, nil, 2, blk)
        blk = op:region(1):add_block()
        op:region(2):add_block()
      end
      local vok, vmsg = mod:verify()
      assert.is_false(vok)
      assert.matches("regions nest more than 2048 levels deep", vmsg)
      assert.matches("not printed", mod:print())
      ctx:close()
    end)

    it("answers an unclosed deep nesting with a located error", function()
      local m, err = parser.parse("module {\n  %0 = arith.constant {x = " .. ("["):rep(5000) .. "} : i32\n}", { file = "d.tir" })
      assert.is_nil(m)
      assert.matches("^d%.tir:%d+:%d+: error: ", err)
      m, err = parser.parse("module {\n  %0 = arith.constant {x = " .. ("{a = "):rep(5000) .. "1" .. ("}"):rep(5000) .. "} : i32\n}", { file = "d.tir" })
      assert.is_nil(m)
      assert.matches("^d%.tir:2:%d+: error: attribute values nest at most 4096 deep\n", err)
      assert.is_true(#err < 400, "the caret line is cut to a window")
    end)
  end)

  describe("in the REPL", function()
    for _, f in ipairs { "30_repl_tostring_error.txt", "31_repl_error_object_tostring.txt", "32_repl_closed_context.txt" } do
      it(f .. ": the session goes on", function()
        local session = H.slurp(DIR .. f) .. '="still here"\n'
        local out, err, code = no_crash(H.tilua_run({ "-i" }, session))
        assert.equal(0, code, err)
        assert.truthy(out:find("still here", 1, true), out .. err)
      end)
    end

    it("shows a table by its contents", function()
      local out = H.tilua_run({ "-i" }, "x = {1, 2, a = {b = 3}}\nx.self = x\n=x\n")
      assert.truthy(out:find("{ 1, 2, a = { b = 3 }, self = <cycle> }", 1, true), out)
    end)
  end)

  describe("bounded everywhere", function()
    it("56: the REPL is linear in its input: 100k piped lines, numbered through the session", function()
      local lines = {}
      for i = 1, 100000 do lines[i] = "=1" end
      lines[#lines + 1] = "error('last')"
      local f = os.tmpname()
      local h = assert(io.open(f, "wb"))
      h:write(table.concat(lines, "\n"), "\n")
      h:close()
      local out, err, code = no_crash(H.run { "sh", "-c", "timeout -k 5 120 " .. H.quote(H.tilua) .. " -i < " .. H.quote(f) })
      os.remove(f)
      assert.equal(0, code, err)
      local _, ones = out:gsub("\n1", "")
      assert.equal(100000, ones)
      assert.truthy(out:find("stdin:100001: last", 1, true), out:sub(-300))
    end)

    it("56: a statement that never completes is cut at 1000 lines; the session goes on", function()
      local out, err, code = no_crash(H.tilua_run({ "-i" }, "x = [[\n" .. ("text\n"):rep(1500) .. "]]\n=\"after\"\n"))
      assert.equal(0, code, err)
      assert.truthy(out:find("stdin:1: a statement of more than 1000 lines or 1048576 bytes", 1, true), out:sub(1, 500))
      assert.truthy(out:find("after", 1, true), out:sub(-300))
    end)

    it("57: endless input is an error after a bounded amount, not a process that grows", function()
      local out, err, code = no_crash(H.run { "sh", "-c", "timeout -k 5 60 " .. H.quote(H.tilua) .. " -i < /dev/zero" })
      assert.equal(1, code, err)
      assert.truthy(out:find("stdin: a line longer than 1048576 bytes (the REPL reads at most that much)", 1, true), out)
      local _
      _, err, code = no_crash(H.run { "sh", "-c", "timeout -k 5 60 " .. H.quote(H.tilua) .. " opt /dev/zero" })
      assert.equal(1, code)
      assert.truthy(err:find("tilua opt: /dev/zero: more than 134217728 bytes of input (the limit of textual IR)", 1, true), err)
      _, err, code = no_crash(H.run { "sh", "-c", "yes 'module {}' | timeout -k 5 60 " .. H.quote(H.tilua) .. " opt -" })
      assert.equal(1, code)
      assert.truthy(err:find("tilua opt: <stdin>: more than 134217728 bytes", 1, true), err)
      -- a script from stdin that never ends (a long comment: the lexer keeps nothing of it)
      _, err, code = no_crash(H.run { "sh", "-c", "{ printf -- '--[['; cat /dev/zero; } | timeout -k 5 120 "
                                      .. H.quote(H.tilua) .. " -" })
      assert.equal(1, code)
      assert.truthy(err:find("stdin: more than 268435456 bytes of script (the most tilua reads)", 1, true), err)
    end)

    it("57: a REPL line longer than 1 MiB is an error that ends the session", function()
      local out, _, code = no_crash(H.tilua_run({ "-i" }, "=1\n" .. ("x"):rep((1 << 20) + 10) .. "\n=2\n"))
      assert.equal(1, code)
      assert.truthy(out:find("stdin: a line longer than 1048576 bytes", 1, true), out:sub(1, 300))
    end)

    it("61: looking up a name in one block of 200k ops stays O(1) (the name table grows)", function()
      local t = { "module {\n  tile.kernel {arg_names = [\"n\"], kernel_spec = {block = [128, 1, 1]}, sym_name = \"k\"} {\n"
        .. "  ^bb0(%0: i32):\n    %1 = arith.constant {value = 3 : i32} : i32\n" }
      local ops = { "xori", "addi", "muli" }
      for i = 2, 200000 do t[#t + 1] = ("    %%%d = arith.%s %%%d, %%0 : i32\n"):format(i, ops[i % 3 + 1], i - 1) end
      t[#t + 1] = "  }\n}\n"
      local stats = {}
      local m = assert(parser.parse(table.concat(t), { stats = stats }))
      assert.is_true(stats.lookups >= 400000)
      -- a fixed table of 1024 buckets compared ~100 names per lookup here
      assert.is_true(stats.probes / stats.lookups < 2, ("%d probes for %d lookups"):format(stats.probes, stats.lookups))
      assert.equal(200000, #m:region(1):entry():ops()[1]:region(1):entry():ops())
    end)

    it("the compile cache keeps the most recently used compiles only", function()
      tl.new_module()
      tl.options.compile_cache = 3
      local ks = {}
      for i = 1, 5 do
        ks[i] = tl.kernel("cache" .. i, { params = { { "a", tl.ptr(tl.f32) } }, block = 32 })
        ks[i]:define(function(_, p) (p.a + tl.thread_id()):store(1.0 * i) end)
        ks[i].module = ks[i].module:clone() -- each its own module text
      end
      for i = 1, 5 do ks[i]:compile() end
      ks[5]:compile()
      assert.is_true(tl.last_stages[1].cached)
      ks[1]:compile() -- out: the least recently used
      assert.is_nil(tl.last_stages[1].cached)
      tl.options.compile_cache = nil
      assert.has_error(function() tl.options.compile_cache = 0 end)
    end)

    it("60: the first launch and the later ones check alike; integer arguments fit their type", function()
      local fake = os.getenv "TILUA_FAKE_CUDA"
      if not fake or fake == "" then pending "TILUA_FAKE_CUDA is not set (run through ctest)" return end
      local out, err, code = no_crash(H.tilua_env({ TILUA_LIBCUDA = fake }, { DIR .. "60_launch_checks_differ_first_vs_later.lua" }))
      assert.equal(0, code, err)
      local smem = "launch: smem %-1 is out of range: the dynamic shared memory is 0 to 232448 bytes"
      assert.matches("first\tfalse\t[^\n]*60_launch_checks_differ_first_vs_later%.lua:8: " .. smem, out)
      assert.matches("second\tfalse\t[^\n]*:9: " .. smem, out)
      assert.matches("third\tfalse\t[^\n]*:10: launch: grid%.y = 65536 is more than the 65535 blocks it may be", out)
      assert.matches("i32 2%^53\tfalse\t[^\n]*:11: launch: argument 'n' = 9007199254740992 does not fit its type i32 %(%-2147483648 to 4294967295%)", out)
      -- the same checks on a first launch (the path without a launch plan), and on the plan's path by name
      local script = H.temp([[
local tl = require "tilua"
local a = tl.device.alloc(tl.f32, 256)
local function kernel()
  local k = tl.kernel("k", { params = { { "a", tl.ptr(tl.f32) }, { "n", tl.i16 } }, block = 128 })
  k:define(function(_, p) tl.if_(tl.thread_id():lt(p.n:cast(tl.i32)), function() (p.a + tl.thread_id()):store(1.0) end) end)
  return k
end
local k = kernel()
print("first i16", pcall(k.launch, k, { grid = 1, args = { a, 65536 } }))
tl.new_module()
k = kernel()
k:launch { grid = 1, args = { a, 16 } }
print("plan i16", pcall(k.launch, k, { grid = 1, args = { a = a, n = -32769 } }))
print("plan smem", pcall(k.launch, k, { grid = 1, smem = 232449, args = { a, 1 } }))
]], ".lua")
      out, err, code = no_crash(H.tilua_env({ TILUA_LIBCUDA = fake }, { script }))
      os.remove(script)
      assert.equal(0, code, err)
      assert.matches("first i16\tfalse\t[^\n]*: launch: argument 'n' = 65536 does not fit its type i16 %(%-32768 to 65535%)", out)
      assert.matches("plan i16\tfalse\t[^\n]*: launch: argument 'n' = %-32769 does not fit its type i16", out)
      assert.matches("plan smem\tfalse\t[^\n]*: launch: smem 232449 is out of range", out)
    end)

    it("a kernel that fixes its grid (grid = 1) is launched on that grid only, on every path", function()
      local out, err, code = on_fake_driver([[
local tl = require "tilua"
local a = tl.device.alloc(tl.i32, 64)
local k = tl.kernel("one", { params = { { "out", tl.ptr(tl.i32) } }, block = 64, grid = 1 })
k:define(function(_, p) (p.out + tl.thread_id()):store(tl.thread_id()) end)
print("first", pcall(k.launch, k, { grid = 2, args = { a } }))
print("good", pcall(k.launch, k, { grid = 1, args = { a } }))
print("plan", pcall(k.launch, k, { grid = { 1, 2 }, args = { a } }))
print("spec", k.op:kernel_spec().grid[1])
tl.device.synchronize()
]])
      if not out then return end
      assert.equal(0, code, err)
      local msg = "launch: kernel 'one' runs on the grid {1, 1, 1} only %(its kernel_spec.grid%), got "
      assert.matches("first\tfalse\t[^\n]*:5: " .. msg .. "{2, 1, 1}", out)
      assert.matches("good\ttrue", out)
      assert.matches("plan\tfalse\t[^\n]*:7: " .. msg .. "{1, 2, 1}", out)
      assert.matches("spec\t1", out)
    end)

    it("a kernel that declares its sizes (sizes = {n = \"grid_threads\"}) is launched within them, on every path", function()
      local out, err, code = on_fake_driver([[
local tl = require "tilua"
local a = tl.device.alloc(tl.i32, 256)
local k = tl.kernel("per_thread", { params = { { "out", tl.ptr(tl.i32) }, { "n", tl.i32 }, { "c", tl.i32 } },
                                    block = 64, sizes = { n = "grid_threads", c = "grid_ctas" } })
k:define(function(_, p) (p.out + (tl.block_id() * 64 + tl.thread_id())):store(p.n + p.c) end)
print("first", pcall(k.launch, k, { grid = 2, args = { a, 100, 2 } }))
print("good", pcall(k.launch, k, { grid = 2, args = { a, 128, 2 } }))
print("plan", pcall(k.launch, k, { grid = 4, args = { a, 256, 2 } }))
print("named", pcall(k.launch, k, { grid = 4, args = { out = a, n = 256, c = 4 } }))
print("spec", k.op:kernel_spec().sizes.n, k.op:kernel_spec().sizes.c)
tl.device.synchronize()
]])
      if not out then return end
      assert.equal(0, code, err)
      assert.matches("first\tfalse\t[^\n]*:6: launch: kernel 'per_thread' takes n = the grid's threads %(128: its kernel_spec.sizes%), got 100", out)
      assert.matches("good\ttrue", out)
      assert.matches("plan\tfalse\t[^\n]*:8: launch: kernel 'per_thread' takes c = the grid's CTAs %(4: its kernel_spec.sizes%), got 2", out)
      assert.matches("named\ttrue", out)
      assert.matches("spec\tgrid_threads\tgrid_ctas", out)
    end)

    it("a declaration of sizes names an integer parameter and what it must be, at the script's line", function()
      local function declare(sizes)
        return pcall(tl.kernel, "k", { params = { { "n", tl.i32 }, { "x", tl.f32 } }, sizes = sizes })
      end
      local ok, e = declare { x = "grid_threads" }
      assert.is_false(ok)
      assert.matches("kernel 'k': sizes.x names no integer parameter of the kernel", e, 1, true)
      ok, e = declare { n = "grid_bytes" }
      assert.is_false(ok)
      assert.matches("kernel 'k': sizes.n must be \"grid_threads\" or \"grid_ctas\"", e, 1, true)
      ok, e = declare "grid_threads"
      assert.is_false(ok)
      assert.matches("kernel 'k': sizes must be a table", e, 1, true)
    end)

    it("a tensor map argument is checked alike on the first launch and on the plan's (PDL included)", function()
      local log = os.tmpname()
      local out, err, code = on_fake_driver([[
local tl = require "tilua"
local a = tl.device.alloc(tl.bf16, 128 * 128)
local MT = tl.tensor_map_type(tl.bf16, { 64, 64 }, 128)
local k = tl.kernel("k", { params = { { "m", MT }, { "n", tl.i32 } }, block = 128 })
k:define(function() end)
local good = tl.device.tensor_map { buffer = a, type = MT, shape = { 128, 128 } }
local other = tl.device.tensor_map { buffer = a, type = tl.tensor_map_type(tl.bf16, { 32, 64 }, 128), shape = { 128, 128 } }
print("first box", pcall(k.launch, k, { grid = 1, args = { other, 1 } }))
print("first kind", pcall(k.launch, k, { grid = 1, args = { a, 1 } }))
k:launch { grid = 1, args = { good, 1 }, pdl = true }
print("plan", k._plan ~= nil)
print("plan box", pcall(k.launch, k, { grid = 1, args = { other, 1 } }))
print("plan kind", pcall(k.launch, k, { grid = 1, args = { m = a, n = 1 } }))
print("plan again", pcall(k.launch, k, { grid = 1, args = { good, 2 }, pdl = true }))
tl.device.synchronize()
]], { FAKE_CUDA_LOG = log })
      if not out then return os.remove(log) end
      local f = assert(io.open(log))
      local launches = f:read "a"
      f:close()
      os.remove(log)
      assert.equal(0, code, err)
      local box = "launch: argument 'm' is a tensor map of bf16 with box {32, 64} and swizzle 128; the parameter is !tile.tensor_map<bf16, sw128, 64, 64>"
      local kind = "launch: argument 'm' must be a tensor map %(tl.device.tensor_map%), got table"
      assert.matches("first box\tfalse\t[^\n]*:8: " .. box:gsub("[%(%)%.%[%]%-%+%*%?%^%$]", "%%%0"), out)
      assert.matches("first kind\tfalse\t[^\n]*:9: " .. kind, out)
      assert.matches("plan\ttrue", out) -- the later launches take the plan (l_launch.c)
      assert.matches("plan box\tfalse\t[^\n]*:12: " .. box:gsub("[%(%)%.%[%]%-%+%*%?%^%$]", "%%%0"), out)
      assert.matches("plan kind\tfalse\t[^\n]*:13: " .. kind, out)
      assert.matches("plan again\ttrue", out)
      -- both PDL launches reached the driver with the map's 128 bytes and the flag
      local _, n = launches:gsub("launch k [^\n]*pdl=1 args=map{[^\n]*box=64,64[^\n]*} 0x[12]\n", "")
      assert.equal(2, n, launches)
    end)

    it("a kernel named \"k\\0evil\" is refused, not emitted as .entry k", function()
      tl.new_module()
      local line = debug.getinfo(1, "l").currentline
      local k = tl.kernel("k\0evil", { block = 32 })
      local ok, err = pcall(k.define, k, function() end) -- the kernel op is verified at its line
      assert.is_false(ok)
      assert.matches(":" .. (line + 1) .. ": 'tile.kernel' op kernel name \"k\\00evil\" is not a PTX identifier", err)
    end)

    it("a loaded module's kernel is looked up by its whole name: \"k\\0evil\" is not k", function()
      local fake = os.getenv "TILUA_FAKE_CUDA"
      if not fake or fake == "" then pending "TILUA_FAKE_CUDA is not set (run through ctest)" return end
      local script = H.temp([[
local tl = require "tilua"
local k = tl.kernel("k", { params = { { "a", tl.ptr(tl.f32) } }, block = 32 })
k:define(function(_, p) (p.a + tl.thread_id()):store(1.0) end)
local m = tl.core.module_load(k:compile())
print("nul", pcall(m.func, m, "k\0evil"))
print("whole", pcall(m.func, m, "k"))
]], ".lua")
      local out, err, code = no_crash(H.tilua_env({ TILUA_LIBCUDA = fake }, { script }))
      os.remove(script)
      assert.equal(0, code, err)
      assert.matches("nul\tfalse\t[^\n]*:5: kernel lookup: the name has a NUL byte at 2", out)
      assert.matches("whole\ttrue\ttilua%.Function", out)
    end)

    it("a kernel name of 400 characters is emitted whole (its parameters' names too)", function()
      tl.new_module()
      local name = "k" .. ("x"):rep(399)
      local k = tl.kernel(name, { params = { { "a", tl.ptr(tl.f32) }, { "n", tl.i32 } }, block = 32 })
      k:define(function(_, p) (p.a + tl.thread_id()):store(1.0) end)
      local ptx = k:compile()
      assert.truthy(ptx:find("[" .. name .. "_param_1]", 1, true), ptx)
      H.assert_ptxas(ptx)
    end)
  end)

  describe("tilua sched", function()
    it("40: refuses a picture of half a billion tiles at once", function()
      local _, err, code = no_crash(H.tilua_env({}, { "sched", "--kind", "data_parallel", "--m", "2147483647", "--n", "4096", "--k", "4096" }, 20))
      assert.equal(1, code)
      assert.matches("the plan has 536870912 output tiles; a picture shows at most 65536", err)
    end)

    it("41: too-large values say so", function()
      local cases = {
        { { "--workers", "4294967296" }, "'workers' = 4294967296 is out of range [0, 4294967295]" },
        { { "--m", "9223372036854775807", "--n", "1", "--k", "1" }, "fewer than 2^32 tiles" },
        { { "--m", "9223372036854775808", "--n", "1", "--k", "1" }, "--m 9223372036854775808 is out of range" },
        { { "--tile", "1xx1" }, "--tile: expected positive integers" },
        { { "--m", "abc", "--n", "1", "--k", "1" }, "--m needs a non-negative integer, got 'abc'" },
      }
      for _, c in ipairs(cases) do
        local args = { "sched" }
        for _, a in ipairs(c[1]) do args[#args + 1] = a end
        local _, err, code = no_crash(H.tilua_run(args))
        assert.equal(1, code)
        assert.truthy(err:find(c[2], 1, true), table.concat(args, " ") .. ": " .. err)
      end
    end)
  end)
end)
