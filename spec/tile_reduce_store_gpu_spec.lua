-- The reduce-add store of tile programs (examples/tile_reduce_store.lua) on
-- the GPU (label gpu: spec/gpu_runner.lua; tools/gpu test runs it): a compute
-- agent's f32 and i32 tiles of many programs added into one tile (two
-- launches into the same output), and split-K whose consumers add their
-- accumulators into C; small-integer inputs (exact sums in any order) against
-- the CPU reference on every element. Without a GPU the runs report pending.
-- TILUA_SEED fixes the seed; TILUA_SMALL=1 runs the small sizes (tools/gpu sanitize).
local tl = require "tilua"

local GPU = tl.device.available()
local seed = require("tilua.gpu.check").seed() -- ctest fixes it (spec/tests.cmake)
local small = os.getenv "TILUA_SMALL" == "1"
print(("tile_reduce_store_gpu: seed %d"):format(seed))

local ex = assert(loadfile "examples/tile_reduce_store.lua")("--library")

describe("reduce-add stores of tile programs on the GPU", function()
  it("rows_added (f32, i32) and splitk_added equal the CPU reference on every element", function()
    if not GPU then pending("no GPU: " .. tl.device.error()) return end
    ex.prepare()
    local ok, summary = ex.run { seed = seed, small = small }
    print("tile_reduce_store_gpu: " .. summary)
    assert(ok, summary)
  end)
end)
