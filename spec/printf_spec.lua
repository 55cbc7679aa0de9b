-- tl.printf (tile.printf, nvvm.vprintf): the Lua surface, the lowering and
-- the PTX (CUDA's vprintf calling convention, assembled by ptxas), and what
-- the CPU emulator prints. The verifier's rules: spec/fixtures/invalid/tile_printf.tir;
-- the GPU's output: spec/printf_gpu_spec.lua.
local H = dofile "spec/helper.lua"
local tl = require "tilua"

-- The lines of examples/printf.lua: those it expects, and the others it printed.
local function example_lines(out)
  local expect, got = {}, {}
  for l in out:gmatch "[^\n]+" do
    local e = l:match "^expect: (.*)$"
    if e then expect[#expect + 1] = e
    elseif l:match "^block %d" then got[#got + 1] = l end
  end
  return expect, got
end

describe("tl.printf", function()
  it("builds tile.printf, lowered to nvvm.vprintf and emitted as a vprintf call that ptxas accepts", function()
    local m = assert(tl.parse(H.slurp "spec/fixtures/valid/tile_printf.tir"))
    tl.compile(m, "ptx")
    local lowered = m:print()
    assert.truthy(lowered:find("nvvm.vprintf", 1, true))
    assert.is_nil(lowered:find("tile.printf", 1, true))
    local ptx = tl.emit_ptx(m)
    -- the callee and the formats, at module scope
    assert.truthy(ptx:find(".extern .func (.param .b32 func_retval0) vprintf (.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);", 1, true))
    assert.equal(2, select(2, ptx:gsub("%.global %.align 1 %.b8 __tilua_fmt_%d+%[", "")))
    -- "100%% plain\n" as bytes, NUL-terminated
    assert.truthy(ptx:find("= {49, 48, 48, 37, 37, 32, 112, 108, 97, 105, 110, 10, 0};", 1, true))
    -- C's promotions: 32-bit slots for i32, i16, i8 and i1, 64-bit ones for
    -- i64 and the pointer, doubles for every float, each at its alignment
    local seq = { "cvt.f64.f32 %%fd%d+, %%f%d+;", "cvt.f32.bf16 %%f%d+, %%rs%d+;", "cvt.s32.s16 %%r%d+, %%rs%d+;",
                  "selp.u32 %%r%d+, 1, 0, %%p%d+;", "%.local %.align 8 %.b8 __tilua_printf_args%[64%];",
                  "st%.local%.u32 %[%%rd%d+%+0%]", "st%.local%.u64 %[%%rd%d+%+8%]", "st%.local%.f64 %[%%rd%d+%+16%]",
                  "st%.local%.f64 %[%%rd%d+%+24%]", "st%.local%.f64 %[%%rd%d+%+32%]", "st%.local%.u32 %[%%rd%d+%+40%]",
                  "st%.local%.u32 %[%%rd%d+%+44%]", "st%.local%.u64 %[%%rd%d+%+48%]", "st%.local%.u32 %[%%rd%d+%+56%]",
                  "cvta%.local%.u64", "call%.uni %(retval0%), vprintf, %(param0, param1%);",
                  "mov%.u64 %%rd%d+, 0;", "call%.uni %(retval0%), vprintf, %(param0, param1%);" }
    local at = 1
    for _, pat in ipairs(seq) do
      local s, e = ptx:find(pat, at)
      assert.truthy(s, ("not found after byte %d: %s\n%s"):format(at, pat, ptx))
      at = e + 1
    end
    local ok, log = tl.ptxas(ptx)
    if ok == nil then pending("no ptxas: " .. log) return end
    assert.is_true(ok, log)
  end)

  it("takes Lua numbers and IR values, and raises at the script's line on what it cannot print", function()
    tl.new_module()
    local k = tl.kernel("pf_args", { params = { { "n", tl.i32 } }, block = 32 })
    k:define(function(k, p) tl.printf("%d %lld %f\n", 7, 1 << 40, 0.5) end)
    local ops = {}
    for _, op in ipairs(k.body:ops()) do ops[#ops + 1] = op:name() end
    assert.equal("tile.printf", ops[#ops])
    local pf = k.body:ops()[#ops]
    assert.same({ "i32", "i64", "f64" }, { tostring(pf:operand(1):type()), tostring(pf:operand(2):type()), tostring(pf:operand(3):type()) })
    tl.new_module()
    local bad = tl.kernel("pf_bad", { params = { { "n", tl.i32 } }, block = 32 })
    local ok, err = pcall(bad.define, bad, function() tl.printf(42) end)
    assert.is_false(ok)
    assert.matches("printf: the format must be a string, got number", err)
    ok, err = pcall(bad.define, bad, function(k, p) tl.printf("%d\n", {}) end)
    assert.is_false(ok)
    assert.matches("printf: argument 1 must be an IR value or a number, got table", err)
    ok, err = pcall(bad.define, bad, function(k, p) tl.printf("%d %d\n", p.n) end)
    assert.is_false(ok)
    assert.matches("spec/printf_spec.lua:%d+: 'tile.printf' op conversion 2 '%%d' has no operand", err)
  end)

  it("prints each thread's line on the CPU emulator, as the example expects", function()
    local out, err, code = H.tilua_run { "examples/printf.lua", "--emulate" }
    assert.equal(0, code, err)
    local expect, got = example_lines(out)
    assert.equal(8, #expect)
    assert.same(expect, got) -- in thread order on the emulator
    assert.matches("printf_demo: OK, 8 threads printed on CPU emulator", out)
  end)
end)
