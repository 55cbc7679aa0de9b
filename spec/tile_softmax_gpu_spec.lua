-- The fused softmax tile program on the GPU (label gpu: spec/gpu_runner.lua;
-- tools/gpu test runs it): examples/tile_gemm_softmax.lua, softmax(A . B^T *
-- scale) over 256 keys with the row reductions of the accumulator in the
-- epilogue (quad shuffles), compiled by tile-to-ptx, against a CPU reference
-- on fresh random inputs at ragged M and K: every element of the checked rows
-- within bf16's rounding, |C - ref| <= (2^-8 + 2^-14) |ref| + 2^-24 (the
-- example's `close`), every row summing to 1; on one CTA and with 256-row
-- programs on clusters of 2 (tileas-plan-cta's M split). A second launch gives the same
-- bytes. Without a GPU the kernel is still compiled and assembled, and the
-- launches report pending. TILUA_SEED fixes the seed; TILUA_SMALL=1 keeps the
-- two small cases.
local H = dofile "spec/helper.lua"
local tl = require "tilua"

local GPU = tl.device.available()
local seed = require("tilua.gpu.check").seed() -- ctest fixes it (spec/tests.cmake)
print(("tile_softmax_gpu: seed %d"):format(seed))

local ex = assert(loadfile "examples/tile_gemm_softmax.lua")("--library")
local N = ex.N

-- M ragged (a last program of a few rows), K not a multiple of 64; the large
-- case has more programs than SMs (persistent CTAs walk several) and is
-- checked on every 13th row and its last 130
local CASES = {
  { m = 1, k = 64 },
  { m = 200, k = 72 },
  { m = 1000, k = 200 },
  { m = 4099, k = 136, every = 13 },
  { m = 1000, k = 200, cluster = 2, bm = 256 }, -- 256-row programs on clusters of 2 (M split)
  { m = 300, k = 72, cluster = 2, bm = 256 },
}
if os.getenv "TILUA_SMALL" then CASES = { CASES[1], CASES[2], CASES[6] } end -- (tools/gpu sanitize runs small problems)

describe("the softmax tile program on the GPU", function()
  local kernels = {} -- by cluster
  local function kernel(c)
    local key = c.cluster or 1
    if not kernels[key] then
      kernels[key] = ex.build { cluster = c.cluster, bm = c.bm }
      kernels[key]:compile()
    end
    return kernels[key]
  end
  it("compiles to PTX that ptxas takes (one CTA, clusters of 2)", function()
    for _, c in ipairs { {}, { cluster = 2, bm = 256 } } do
      H.assert_ptxas(kernel(c):compile())
    end
  end)

  for i, c in ipairs(CASES) do
    it(("%d x %d x %d%s: the CPU reference within bf16's rounding, rows summing to 1, the same bytes twice"):format(c.m, N, c.k,
       c.cluster and (" (%d-row programs on clusters of %d)"):format(c.bm, c.cluster) or ""), function()
      if not GPU then pending("no GPU: " .. tl.device.error()) return end
      local D = tl.device
      local s = seed + 10 * i
      local M, K = c.m, c.k
      local scale = 1 / math.sqrt(K)
      local buf <close> = H.gemm_buffers(M, N, K, s, 2)
      local a, b, d, d2 = buf.a, buf.b, buf[1], buf[2]
      local k = kernel(c)
      local bm = c.bm or 128
      local function run(out)
        k:run { grid = { (M + bm - 1) // bm, 1 },
                args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { out, { M, N } }, K = K, scale = scale } }
      end
      run(d)
      run(d2)
      assert.is_true(d:equals(d2), "a second launch gave other bytes")
      local av, bv, got = a:to_table(), b:to_table(), d:to_table()
      local bad, first, rows, worst_sum = 0, nil, 0, nil
      for r = 0, M - 1 do
        if not c.every or r % c.every == 0 or r >= M - 130 then
          rows = rows + 1
          local want = ex.reference(av, bv, K, scale, r)
          local sum = 0
          for j = 0, N - 1 do
            local g = got[r * N + j + 1]
            sum = sum + g
            if not ex.close(g, want[j]) then
              bad = bad + 1
              first = first or ("C[%d, %d] = %.6g, want %.6g"):format(r, j, g, want[j])
            end
          end
          if not worst_sum or math.abs(sum - 1) > math.abs(worst_sum[2] - 1) then worst_sum = { r, sum } end
        end
      end
      print(("tile_softmax_gpu: %d x %d x %d%s on %s: %d rows checked, %d mismatches"):format(M, N, K,
        c.cluster and (", clusters of %d"):format(c.cluster) or "", D.info().name, rows, bad))
      assert.equal(0, bad, first)
      assert.near(1, worst_sum[2], 0.02, ("row %d sums to %g"):format(worst_sum[1], worst_sum[2]))
    end)
  end
end)
