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
