-- The tile maths (tileas.math: tanh, erf, sigmoid, silu, gelu, gelu_tanh,
-- rcp, rsqrt ... docs/tileprog.md, "Tile maths") in a GEMM's epilogue:
-- examples/tile_gemm_bias_gelu.lua lowered by tile-to-ptx (the formulas over
-- the MUFU approximations, per element of the wgmma fragment) on the CPU
-- emulator, against CPU dot products with the bias and the exact function.
-- (The same functions in programs without a dot: spec/tile_rows_spec.lua's maps.)
local tl = require "tilua"
local PH = dofile "spec/protocol_helper.lua"
local ref = require("tilua.emulate.mathref").fn

local ex = assert(loadfile "examples/tile_gemm_bias_gelu.lua")("--library")

local function a_value(i, k) return ((i * 7 + k * 3) % 5) - 2 end
local function b_value(j, k) return ((j * 5 + k * 11 + 1) % 3) - 1 end

describe("the tile maths in a GEMM's epilogue", function()
  -- (the example's default: ping-pong consumers, 128 x 128 programs, the third
  -- column of programs holding columns 256-299 of 384; cooperative: 128 x 256,
  -- the second column 256-299 of 512; based: the bias read from one address a
  -- thread, tl.options.line_loads = "based")
  for _, case in ipairs { { tanh = false }, { tanh = true }, { tanh = false, consumers = "cooperative" },
                          { tanh = true, consumers = "cooperative" }, { tanh = false, based = true } } do
    local tanh = case.tanh
    local t = ex.tiling(case)
    it(("C = %s(A . B^T + bias), %s %d x %d programs%s, 150 x 300 x 72 on the emulator: the exact function within its error"):format(
      tanh and "gelu_tanh" or "gelu", t.consumers, t.bm, t.bn, case.based and ", the bias by line_loads = \"based\"" or ""), function()
      local k = ex.build { tanh = tanh, consumers = case.consumers }
      tl.options.line_loads = case.based and "based" or nil
      local ok, kop = pcall(PH.lowered_tile, k)
      tl.options.line_loads = nil
      assert(ok, kop)
      local M, N, K = 150, 300, 72
      local A, ab = PH.matrix(M, K, a_value)
      local B, bb = PH.matrix(N, K, b_value)
      local bias, biasb = {}, {}
      for j = 0, N - 1 do
        bias[j] = (j % 7 - 3) / 4
        biasb[#biasb + 1] = string.pack("<f", bias[j])
      end
      local args, at = PH.params_args(kop, { ["map:A"] = { data = ab, shape = { M, K } }, ["map:B"] = { data = bb, shape = { N, K } },
        ["map:C"] = { bytes = M * N * 2, shape = { M, N } }, ["ptr:bias"] = table.concat(biasb), ["dim:bias:0"] = N,
        ["arg:K"] = K, ["programs:x"] = (M + t.bm - 1) // t.bm, ["programs:y"] = (N + t.bn - 1) // t.bn })
      local r = tl.emulate(kop, { grid = 2, args = args })
      assert(r.ok, r.report)
      local out = r.read(at["map:C"])
      local fn = tanh and ref.gelu_tanh or ref.gelu
      local bad, first = 0, nil
      for i = 0, M - 1 do
        for j = 0, N - 1 do
          local s = bias[j]
          for kk = 0, K - 1 do s = s + A[i * K + kk] * B[j * K + kk] end
          local want = fn(s)
          local got = (string.unpack("<f", string.pack("<I4", (string.unpack("<I2", out, 1 + 2 * (i * N + j))) << 16)))
          if math.abs(got - want) > 2 ^ -8 * math.abs(want) + 1e-5 then
            bad = bad + 1
            first = first or ("C[%d, %d] = %g, want %g"):format(i, j, got, want)
          end
        end
      end
      assert.equal(0, bad, first)
    end)
  end
end)

-- {=== the formulas of erf, gelu and gelu_tanh (ops.lua's default forms) in f32
-- over a dense sample: the errors docs/tileprog.md gives ("Tile maths"), and the
-- lowered code (tl.rows.map on the emulator) computes exactly those formulas.
local X = require "tilua.passes.convert_tileas_to_cutlass.ops"
local function f32(x) return (string.unpack("<f", string.pack("<f", x))) end
local function ftz(x) return (x ~= 0 and math.abs(x) < 2.0 ^ -126) and 0.0 * x or x end
-- ex2.approx.ftz as the emulator models it (the exact value rounded to f32);
-- rel: its relative error applied on top (the hardware's is within 2^-22)
local function ex2(p, rel)
  local y = 2.0 ^ ftz(p)
  if y == y and y ~= math.huge then y = f32(y * (1 + (rel or 0))) end
  return ftz(y)
end
local function fma(a, b, c) return f32(a * b + c) end
local function absf(x) return x ~= x and x or math.max(x, -x) end
local function poly(cs, a, from)
  local p = f32(cs[#cs])
  for i = #cs - 1, from, -1 do p = fma(p, a, f32(cs[i])) end
  return p
end
local F = {
  erf = function(x, rel)
    local a = absf(x)
    local y = f32(1.0 - ex2(f32(poly(X.ERFC_LOG2, a, 2) * a), rel))
    return x < 0 and -y or y
  end,
  gelu = function(x, rel)
    local a = x ~= x and x or math.min(absf(x), f32(X.GELU_CLAMP))
    return fma(-a, ex2(poly(X.GELU_LOG2, a, 1), rel), (x ~= x or x > 0) and x or 0.0)
  end,
  gelu_tanh = function(x, rel)
    local c1, c3 = f32(X.GELU_TANH_C[1]), f32(X.GELU_TANH_C[2])
    local d = f32(1.0 + ex2(f32(fma(c3, f32(x * x), c1) * x), rel))
    return f32(x * ftz(f32(1 / d)))
  end,
}
-- the sample: 2^16 + 1 points evenly over [-12, 12] (f32), then +-10^k and +-0
local function sample()
  local xs = {}
  for i = 0, 65536 do xs[#xs + 1] = f32(-12 + 24 * i / 65536) end
  for k = -30, 38 do
    xs[#xs + 1] = f32(10.0 ^ k)
    xs[#xs + 1] = -f32(10.0 ^ k)
  end
  xs[#xs + 1], xs[#xs + 2] = 0.0, -0.0
  return xs
end

describe("the tile maths' formulas in f32 over a dense sample (docs/tileprog.md's errors)", function()
  local xs = sample()
  -- each function's worst error, its measure and the bound written in docs/tileprog.md
  local bounds = {
    erf = { 1e-6, function(x, y) return math.abs(y - ref.erf(x)) end, "absolute" },
    gelu = { 1e-6, function(x, y)
      local e = math.abs(y - ref.gelu(x))
      return x == 0 and e or e / math.abs(x)
    end, "absolute, over |x|" },
    -- relative 2e-6 where |y| >= 1e-6, 4e-6 down to |y| = 1e-9 (f32's rounding of the
    -- exponent, near 30 there), absolute 4e-15 below: the error over that allowance
    gelu_tanh = { 1, function(x, y)
      local w = ref.gelu_tanh(x)
      if math.abs(x) > 1e6 then w = x > 0 and x or 0.0 end -- (x^3 overflows the double reference's sigmoid)
      local e, aw = math.abs(y - w), math.abs(w)
      return aw >= 1e-6 and e / (2e-6 * aw) or aw >= 1e-9 and e / (4e-6 * aw) or e / 4e-15
    end, "(over its allowance)" },
  }
  for _, fn in ipairs { "erf", "gelu", "gelu_tanh" } do
    it(fn .. ": within its bound with ex2.approx exact and off by 2^-22 either way", function()
      local lim, measure, what = table.unpack(bounds[fn])
      local worst, at = 0, nil
      for _, x in ipairs(xs) do
        for _, rel in ipairs { 0, 2 ^ -22, -2 ^ -22 } do
          local e = measure(x, F[fn](x, rel))
          if e ~= e or e > worst then worst, at = e, x end
        end
      end
      assert(worst <= lim, ("%s: worst %s error %.3g at x = %.9g (bound %.3g)"):format(fn, what, worst, at, lim))
      print(("  %s: worst %s error %.3g at x = %.7g"):format(fn, what, worst, at))
    end)
  end

  it("the limits: erf(0) = 0, erf(+-inf) = +-1, gelu(0) = 0, gelu(+-inf) = +inf / -0, gelu(x) -> 0 below -6, NaN in NaN out", function()
    assert.equal(0.0, F.erf(0.0))
    assert.equal(1.0, F.erf(math.huge))
    assert.equal(-1.0, F.erf(-math.huge))
    assert.equal(1.0, F.erf(4.0))
    assert.equal(0.0, F.gelu(0.0))
    assert.equal(math.huge, F.gelu(math.huge))
    assert.equal(0.0, F.gelu(-math.huge))
    assert.equal(math.huge, F.gelu_tanh(math.huge))
    assert.equal(f32(3e38), F.gelu(f32(3e38)))
    assert(math.abs(F.gelu(-7.0)) < 1e-10 and math.abs(F.gelu(-1e30)) == 0)
    for _, f in pairs(F) do
      local y = f(0 / 0)
      assert(y ~= y)
    end
  end)

  it("P and G decrease past their fits' ends up to f32's largest (no clamp needed: 2^P -> 0)", function()
    for _, c in ipairs { { X.ERFC_LOG2, 2, 4.5 }, { X.GELU_LOG2, 1, 6.0 } } do
      local cs, from, a = table.unpack(c)
      local function p(v) return from == 2 and f32(poly(cs, v, 2) * v) or poly(cs, v, 1) end
      local prev = p(f32(a))
      while a < 3e38 do
        a = a * 1.01
        local v = p(f32(a))
        assert(v <= prev, ("not decreasing at %g"):format(a))
        prev = v
      end
      assert.equal(-math.huge, prev)
    end
  end)

  it("tl.rows.map's lowered erf, gelu and gelu_tanh on the emulator: the formulas above bit for bit", function()
    local n = 512
    local M = 4
    for _, fn in ipairs { "erf", "gelu", "gelu_tanh" } do
      local k = tl.rows.map { fn = fn, n = n, rows = 2, elem = tl.f32, name = "map_" .. fn }
      k:compile()
      local kop = k:lowered_op()
      local xs, xb = {}, {}
      for i = 0, M * n - 1 do
        xs[i + 1] = f32(-10 + 20 * i / (M * n)) + (i % 3 == 0 and 2 ^ -20 or 0)
        xs[i + 1] = f32(xs[i + 1])
        xb[i + 1] = string.pack("<f", xs[i + 1])
      end
      local args, at = {}, {}
      for i, e in ipairs(kop:attr "tileas.params") do
        local kind, name, dim = e:match "^(%a+):([^:]*):?(%d*)$"
        if kind == "ptr" or kind == "map" then
          local bytes = name == "X" and table.concat(xb) or string.rep("\0", 4 * M * n)
          args[i] = kind == "map" and { bytes = bytes, shape = { M, n } } or bytes
        elseif kind == "dim" then args[i] = ({ M, n })[tonumber(dim) + 1]
        elseif kind == "stride" then args[i] = n
        elseif kind == "programs" then args[i] = name == "x" and M // 2 or 1
        elseif e == "workspace" then args[i] = string.rep("\0", 4)
        else error("a parameter this spec does not know: " .. e) end
        at[e] = i
      end
      local r = tl.emulate(kop, { grid = M // 2, args = args })
      assert(r.ok, r.report)
      local out = r.read(at["ptr:Y"] or at["map:Y"])
      local bad, first = 0, nil
      for i, x in ipairs(xs) do
        local got, want = string.unpack("<f", out, 4 * i - 3), F[fn](x)
        if string.pack("<f", got) ~= string.pack("<f", want) then
          bad = bad + 1
          first = first or ("%s(%.9g) = %.9g, the formula %.9g"):format(fn, x, got, want)
        end
      end
      assert.equal(0, bad, first)
    end
  end)
end)
-- }===
