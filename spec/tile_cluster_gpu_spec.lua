-- Tile programs on clusters of 2 and 4 CTAs on the GPU (tools/gpu test): the tile
-- GEMM of examples/tile_gemm.lua compiled by tile-to-ptx with cluster = {2, 1, 1},
-- as a 256-row program (tileas-plan-cta splits M: each CTA 128 x 256, B
-- multicast, as stdlib/gemm.lua's cluster = 2) and as a 128-row one (split
-- along N, A multicast), on fresh random bf16 inputs and shapes that are not
-- multiples of the tile. Each result is checked against stdlib/gemm.lua's
-- reference kernel on every element and against sampled CPU dot products;
-- the M split, which has stdlib/gemm.lua's cluster = 2 instructions and
-- accumulation order, also bit for bit against that kernel's result. Without
-- a GPU every test is pending (the runner reports the spec skipped).
-- TILUA_SMALL=1 leaves out the 4096 x 4096 case. The fused GEMM + bias + relu
-- of examples/tile_gemm_bias_relu.lua on clusters of 4 and 2 (the bias row
-- split as the accumulator's columns, or whole on each CTA where they split
-- M) against stdlib/gemm.lua's reference kernel with the same epilogue. On
-- clusters of 4 (2 x 2: a 256-row program split along both dims, A multicast
-- to the 2 CTAs of a block's rows, B to the 2 of its columns) the GEMM bit for
-- bit against stdlib/gemm.lua's cluster = {2, 2} kernel of the CTA's tile, and
-- the fused one (each bias column loaded by the 2 CTAs that hold it).
local tl = require "tilua"
local H = dofile "spec/helper.lua"

local GPU = tl.device.available()
local SEED = require("tilua.gpu.check").seed() -- ctest fixes it (spec/tests.cmake)
local function gpu()
  if not GPU then pending("no GPU: " .. tl.device.error()) end
  -- the stand-in driver (spec/c/fake_cuda.c) runs no kernel
  if tl.device.info().name == "Fake GPU" then pending("the stand-in driver runs no kernel") end
end
local D = tl.device
local example = assert(loadfile "examples/tile_gemm.lua")("--library")
local fused = assert(loadfile "examples/tile_gemm_bias_relu.lua")("--library")

local cases = {
  { bm = 256, m = 1000, n = 1480, k = 520 },  -- edges along M, N and K
  { bm = 256, m = 300, n = 264, k = 72 },     -- a CTA whose rows are all past M
  { bm = 128, m = 1000, n = 1480, k = 520 },  -- the N split
}
if not os.getenv "TILUA_SMALL" then -- (tools/gpu sanitize runs small problems)
  table.insert(cases, 3, { bm = 256, m = 4096, n = 4096, k = 1024 }) -- whole tiles, every SM's cluster walking several
end

describe("the tile GEMM on clusters of 2 CTAs", function()
  for i, c in ipairs(cases) do
    it(("%d-row programs (%s split), %d x %d x %d: stdlib/gemm.lua's reference kernel and CPU samples%s"):format(
         c.bm, c.bm == 256 and "M" or "N", c.m, c.n, c.k, c.bm == 256 and ", its cluster = 2 kernel bit for bit" or ""), function()
      gpu()
      local seed = SEED + 100 * i
      print(("case %d: TILUA_SEED=%d"):format(i, SEED))
      local M, N, K = c.m, c.n, c.k
      local k = example.build { cluster = 2, bm = c.bm }
      k:compile()
      local buf <close> = H.gemm_buffers(M, N, K, seed)
      local a, b, d = buf.a, buf.b, buf[1]
      k:run { grid = { (M + c.bm - 1) // c.bm, (N + 255) // 256 },
              args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { d, { M, N } }, K = K } }
      local g = tl.gemm.build { m = M, n = N, k = K, bn = 256, stages = 3, schedule = "persistent", cluster = 2 }
      local ok, report = g:check { a = a, b = b, d = d, seed = seed, samples = 64 }
      assert(ok, report)
      if c.bm == 256 then
        local s <close> = D.alloc(tl.bf16, M * N)
        s:fill(0)
        g:run { a = a, b = b, d = s }
        D.synchronize()
        assert(d:equals(s), "the tile GEMM's result differs from stdlib/gemm.lua's cluster = 2 kernel's")
      end
    end)
  end
end)

describe("the tile GEMM on clusters of 4 CTAs (2 x 2)", function()
  local cases4 = {
    { bn = 512, m = 1000, n = 1480, k = 520 }, -- 128 x 256 a CTA; edges along M, N and K
    { bn = 256, m = 1000, n = 1480, k = 520 }, -- 128 x 128 a CTA
    { bn = 512, m = 300, n = 712, k = 72 },    -- CTAs whose rows or columns are all past M or N
  }
  if not os.getenv "TILUA_SMALL" then table.insert(cases4, 2, { bn = 512, m = 4096, n = 4096, k = 1024 }) end
  for i, c in ipairs(cases4) do
    it(("256 x %d programs, %d x %d x %d: stdlib/gemm.lua's reference kernel and CPU samples, its cluster = {2, 2} kernel bit for bit"):format(
         c.bn, c.m, c.n, c.k), function()
      gpu()
      local seed = SEED + 500 + 100 * i
      print(("case %d: TILUA_SEED=%d"):format(i, SEED))
      local M, N, K = c.m, c.n, c.k
      local k = example.build { cluster = 4, bm = 256, bn = c.bn }
      k:compile()
      local buf <close> = H.gemm_buffers(M, N, K, seed)
      local a, b, d = buf.a, buf.b, buf[1]
      k:run { grid = { (M + 255) // 256, (N + c.bn - 1) // c.bn },
              args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { d, { M, N } }, K = K } }
      local g = tl.gemm.build { m = M, n = N, k = K, bn = c.bn // 2, stages = 3, schedule = "persistent", cluster = { 2, 2 } }
      local ok, report = g:check { a = a, b = b, d = d, seed = seed, samples = 64 }
      assert(ok, report)
      local s <close> = D.alloc(tl.bf16, M * N)
      s:fill(0)
      g:run { a = a, b = b, d = s }
      D.synchronize()
      assert(d:equals(s), "the tile GEMM's result differs from stdlib/gemm.lua's cluster = {2, 2} kernel's")
    end)
  end
end)

describe("the fused GEMM + bias + relu on clusters", function()
  local fused_cases = {
    { cluster = 4, bm = 128, m = 1000, n = 1480, k = 520 }, -- N split 4 ways: 64 bias columns a CTA
    { cluster = 2, bm = 128, m = 1000, n = 1480, k = 520 }, -- N split 2 ways
    { cluster = 2, bm = 256, m = 300, n = 264, k = 72 },    -- M split: the whole row on each CTA
    { cluster = 4, bm = 256, m = 1000, n = 1480, k = 520 }, -- 2 x 2: 128 bias columns a CTA, on 2 CTAs each
  }
  for i, c in ipairs(fused_cases) do
    it(("%d-row programs on clusters of %d, %d x %d x %d: stdlib/gemm.lua's reference kernel with bias and relu"):format(
         c.bm, c.cluster, c.m, c.n, c.k), function()
      gpu()
      local seed = SEED + 1000 + 100 * i
      print(("fused case %d: TILUA_SEED=%d"):format(i, SEED))
      local M, N, K = c.m, c.n, c.k
      local k = fused.build { cluster = c.cluster, bm = c.bm }
      k:compile()
      local buf <close> = H.gemm_buffers(M, N, K, seed)
      local a, b, d = buf.a, buf.b, buf[1]
      local bias <close> = D.random(tl.f32, N, seed + 2)
      k:run { grid = { (M + c.bm - 1) // c.bm, (N + 255) // 256 },
              args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { d, { M, N } }, K = K, bias = { bias, { N } } } }
      local ref = tl.gemm.build { m = M, n = N, k = K, bias = true, activation = "relu" }
      local ok, report = ref:check { a = a, b = b, d = d, bias = bias, seed = seed }
      assert(ok, report)
    end)
  end
end)
