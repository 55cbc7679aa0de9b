-- A batch of GEMMs as one tile program (examples/tile_gemm_batched.lua:
-- rank-3 tensors, the batch by program_id("z")) on the GPU (label gpu:
-- spec/gpu_runner.lua; tools/gpu test runs it): fresh random inputs of ragged
-- sizes (M, N and K no multiples of the tile, N and K multiples of 8 as TMA needs; one batch; a tile of rows
-- shorter than M's tile) against CPU dot products on sampled elements of every
-- batch, within bf16's rounding. Without a GPU the runs report pending.
-- TILUA_SEED fixes the seed; TILUA_SMALL=1 runs the smallest size (tools/gpu sanitize).
local tl = require "tilua"

local GPU = tl.device.available()
local seed = require("tilua.gpu.check").seed() -- ctest fixes it (spec/tests.cmake)
local small = os.getenv "TILUA_SMALL" == "1"
print(("tile_batched_gpu: seed %d"):format(seed))

local ex = assert(loadfile "examples/tile_gemm_batched.lua")("--library")
local sizes = small and { { 2, 77, 296, 72 } }
  or { { 1, 1000, 1480, 520 }, { 5, 77, 296, 72 }, { 16, 256, 512, 1024 }, { 7, 333, 520, 1000 } }

describe("a batched tile GEMM on the GPU", function()
  for i, size in ipairs(sizes) do
    it(("%d x %d x %d x %d: CPU dot products on fresh random inputs"):format(table.unpack(size)), function()
      if not GPU then pending("no GPU: " .. tl.device.error()) return end
      if i == 1 then ex.prepare() end
      local ok, summary = ex.run { seed = seed + i, size = size }
      print("tile_batched_gpu: " .. summary)
      assert(ok, summary)
    end)
  end
end)
