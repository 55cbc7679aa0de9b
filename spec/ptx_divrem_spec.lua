-- Division and remainder by a constant power of two in PTX (src/ptx/emit_arith.c):
-- shifts and ands where ptxas would expand div / rem into its general division
-- (docs/PERF.md: rem.s32 by 4, 23 instructions). The kernels of
-- spec/fixtures/gpu/divrem_pow2.lua (i8, i16, i32, i64; divsi, remsi, divui,
-- remui by 1, 2, 8 and the largest power; 6 and -4 as the general case): the
-- PTX has no div / rem for a power of two; the emitted instructions,
-- interpreted here, give arith's semantics (the fixture's, written apart) on
-- inputs of either sign and at the extremes; so does the emulator. On the GPU:
-- spec/ptx_divrem_gpu_spec.lua.
local H = dofile "spec/helper.lua"
local tl = require "tilua"
local F = dofile "spec/fixtures/gpu/divrem_pow2.lua"

-- {=== a small PTX interpreter: straight-line integer code, ld.param, st.global
local function imm_or_reg(regs, s)
  if s:match "^%%" then return assert(regs[s], "read before written: " .. s) end
  return assert(math.tointeger(tonumber(s)), "not an integer: " .. s)
end

local function bits_of(ty) return tonumber(ty:match "%d+$") end

-- run(ptx, params) -> stores { [address] = value (the stored bits, unsigned) }:
-- params: the kernel's parameters by index (0-based), integers
local function run(ptx, params)
  local regs, stores = {}, {}
  local body = assert(ptx:match "\n{\n(.-)\n}", "no kernel body")
  for line in body:gmatch "[^\n]+" do
    if line:match "^\t%.reg " or line:match "^\t%.loc " or line == "\tret;" then goto next end
    local ins, ops = line:match "^\t([%w%.]+) (.-);$"
    assert(ins, "cannot read: " .. line)
    do
      local a = {}
      for o in ops:gmatch "[^,]+" do a[#a + 1] = o:match "^%s*(.-)%s*$" end
      local op, ty = ins:match "^(.-)%.([%w]+)$"
      local w = bits_of(ty)
      local mask = w == 64 and -1 or (1 << w) - 1
      local function sx(x) return F.sext(w, x) end
      local function get(i) return imm_or_reg(regs, a[i]) & mask end
      if op == "ld.param" then
        local x = assert(params[tonumber(a[2]:match "_param_(%d+)%]$")])
        regs[a[1]] = ty == "s8" and F.sext(8, x) & 0xffff or x & mask -- (s8: sign-extended into its .b16)
      elseif op == "cvta.to.global" or op == "mov" then
        regs[a[1]] = get(2)
      elseif op == "add" then
        regs[a[1]] = (get(2) + get(3)) & mask
      elseif op == "sub" then
        regs[a[1]] = (get(2) - get(3)) & mask
      elseif op == "and" then
        regs[a[1]] = get(2) & get(3)
      elseif op == "shr" then
        local s = get(3)
        if ty:sub(1, 1) == "s" then regs[a[1]] = sx(get(2)) >> s | (sx(get(2)) < 0 and ~(mask >> s) or 0)
        else regs[a[1]] = get(2) >> s end
        regs[a[1]] = regs[a[1]] & mask
      elseif op == "cvt.s16" and ty == "s8" then -- (i8 re-extended in its .b16 register)
        regs[a[1]] = F.sext(8, get(2)) & 0xffff
      elseif op == "st.global" then
        stores[imm_or_reg(regs, a[1]:match "^%[(.-)%]$")] = get(2)
      else
        error("not interpreted: " .. line)
      end
    end
    ::next::
  end
  return stores
end
-- }===

describe("division and remainder by a power of two", function()
  for _, w in ipairs(F.widths) do
    it(("lower to shifts and ands, with arith's semantics on either sign (i%d)"):format(w), function()
      local ptx = F.build(w):compile()
      local ok, log = tl.ptxas(ptx)
      assert(ok ~= false, log)
      -- the general cases: div and rem, one each
      for _, op in ipairs { "div.s", "rem.s", "div.u", "rem.u" } do
        assert.equal(2, H.count(ptx, op), op)
      end
      -- the powers of two alone (the interpreter does not divide), interpreted
      local k2, only = F.build(w, true)
      local ptx2 = k2:compile()
      ok, log = tl.ptxas(ptx2)
      assert(ok ~= false, log)
      assert.is_nil(ptx2:find "div%.", "a div is left")
      assert.is_nil(ptx2:find "rem%.", "a rem is left")
      local bytes, base, wrong = math.max(w // 8, 1), 4096, {}
      for _, x in ipairs(F.inputs(w)) do
        local st = run(ptx2, { [0] = base, [1] = x })
        F.wrong(w, only, x, function(j) return F.sext(w, assert(st[base + (j - 1) * bytes], "no store")) end, "PTX", wrong)
      end
      assert.same({}, wrong)
    end)

    it(("on the emulator give the same (i%d)"):format(w), function()
      local k, cases = F.build(w)
      local wrong, xs = {}, F.inputs(w)
      for i = 1, #xs, 3 do -- (a third of the inputs: the emulator is slower)
        local r = tl.emulate(k, { grid = 1, args = { ("\0"):rep(#cases * math.max(w // 8, 1)), xs[i] } })
        assert(r.ok, r.report)
        local out = r.read(1)
        F.wrong(w, cases, xs[i], function(j) return F.unpack(w, out, j) end, "emulator", wrong)
      end
      assert.same({}, wrong)
    end)
  end
end)
