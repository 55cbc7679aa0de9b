-- A grouped GEMM (mixture of experts) as a tile program
-- (examples/tile_gemm_grouped.lua) on the GPU (label gpu: spec/gpu_runner.lua;
-- tools/gpu test runs it): fresh random inputs, skewed group sizes (some
-- groups empty, N and K no multiples of the tile) against CPU dot products on
-- sampled elements of every group, within bf16's rounding. Without a GPU the
-- runs report pending. TILUA_SEED fixes the seed; TILUA_SMALL=1 runs the
-- smallest case (tools/gpu sanitize).
local tl = require "tilua"

local GPU = tl.device.available()
local seed = require("tilua.gpu.check").seed() -- ctest fixes it (spec/tests.cmake)
local small = os.getenv "TILUA_SMALL" == "1"
print(("tile_grouped_gpu: seed %d"):format(seed))

local ex = assert(loadfile "examples/tile_gemm_grouped.lua")("--library")
local cases = small and { { groups = 4, total = 500, n = 296, k = 136 } }
  or { { groups = 8, total = 3000, n = 520, k = 264 }, { groups = 64, total = 8000, n = 256, k = 512 },
       { groups = 3, total = 100, n = 1480, k = 72 } }

describe("a grouped tile GEMM on the GPU", function()
  for i, c in ipairs(cases) do
    it(("%d groups, about %d rows, N %d, K %d: CPU dot products on fresh random inputs"):format(c.groups, c.total, c.n, c.k), function()
      if not GPU then pending("no GPU: " .. tl.device.error()) return end
      if i == 1 then ex.prepare() end
      local ok, summary = ex.run { seed = seed + i, groups = c.groups, total = c.total, n = c.n, k = c.k }
      print("tile_grouped_gpu: " .. summary)
      assert(ok, summary)
    end)
  end
end)
