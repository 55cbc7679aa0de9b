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
  for _, tanh in ipairs { false, true } do
    it(("C = %s(A . B^T + bias), 150 x 300 x 72 on the emulator: the exact function within its error"):format(
      tanh and "gelu_tanh" or "gelu"), function()
      local k = ex.build { tanh = tanh }
      local kop = PH.lowered_tile(k)
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
        ["arg:K"] = K, ["programs:x"] = 2, ["programs:y"] = 2 })
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
