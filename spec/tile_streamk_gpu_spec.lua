-- The StreamK tile GEMM on the GPU (label gpu: spec/gpu_runner.lua; tools/gpu
-- test runs it): examples/tile_gemm.lua with schedule = "streamk" (and
-- "splitk"), compiled by tile-to-ptx, against stdlib/gemm.lua's kernel of the
-- same schedule, tile and workers (the same plan and the same fixup: the same
-- bytes), its reference kernel and sampled CPU dot products, on fresh random
-- inputs at several shapes (ragged too) and worker counts. A second launch
-- reuses the workspace (each tile's final split reset its counter) and must
-- give the same bytes. Without a GPU the kernels are still compiled and
-- assembled, and the launches report pending. TILUA_SEED fixes the seed.
local H = dofile "spec/helper.lua"
local tl = require "tilua"

local GPU = tl.device.available()
local seed = require("tilua.gpu.check").seed() -- ctest fixes it (spec/tests.cmake)
print(("tile_streamk_gpu: seed %d"):format(seed))

local ex = assert(loadfile "examples/tile_gemm.lua")("--library")

-- shapes and worker counts (0: the device's SMs); few tiles on many workers
-- split K, tiles that are not a multiple of the workers give StreamK units
local CASES = {
  { m = 256, n = 256, k = 4096, workers = 0 },                  -- 2 tiles on every SM: deep splits
  { m = 1000, n = 1480, k = 520, workers = 0 },                 -- ragged, 48 tiles of 9 k blocks
  { m = 300, n = 712, k = 2000, workers = 7 },                  -- ragged (K too), 9 tiles on 7 workers
  { m = 4096, n = 4096, k = 1024, workers = 0 },                -- 512 tiles: data-parallel waves + a StreamK tail
  { m = 520, n = 264, k = 3000, workers = 5, schedule = "splitk", splits = 3 },
}

local function build(c, W)
  return ex.build { m = c.m, n = c.n, k = c.k, schedule = c.schedule or "streamk", workers = W, splits = c.splits }
end

describe("the StreamK tile GEMM on the GPU", function()
  it("compiles to PTX that ptxas takes (every case)", function()
    for _, c in ipairs(CASES) do
      H.assert_ptxas(build(c, c.workers > 0 and c.workers or 132):compile())
    end
  end)

  for i, c in ipairs(CASES) do
    local label = ("%s %d x %d x %d on %s workers"):format(c.schedule or "streamk", c.m, c.n, c.k,
                                                        c.workers > 0 and tostring(c.workers) or "all SMs'")
    it(label .. ": stdlib/gemm.lua's kernel bit for bit, its reference kernel, CPU samples", function()
      if not GPU then pending("no GPU: " .. tl.device.error()) return end
      local D = tl.device
      local W = c.workers > 0 and c.workers or D.sm_count()
      local s = seed + 10 * i
      local M, N, K = c.m, c.n, c.k
      local buf <close> = H.gemm_buffers(M, N, K, s, 2)
      local a, b, d_tile, d_std = buf.a, buf.b, buf[1], buf[2]
      local k = build(c, W)
      k:compile()
      local grid = { (M + 127) // 128, (N + 255) // 256 }
      local args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { d_tile, { M, N } }, K = K }
      k:run { grid = grid, args = args }
      local g = tl.gemm.build { m = M, n = N, k = K, bn = 256, stages = 3, schedule = c.schedule or "streamk",
                                splits = c.splits, sms = W }
      assert.equal(g.workspace_bytes, k:lowered_op():attr("tileas.launch").workspace_bytes) -- the same plan
      g:run { a = a, b = b, d = d_std }
      D.synchronize()
      local ok, report = g:check { a = a, b = b, d = d_tile, seed = s }
      print(("%s, seed %d on %s: %s"):format(label, s, D.info().name, report))
      assert(ok, report)
      assert(d_tile:equals(d_std), "the tile GEMM differs from stdlib/gemm.lua's")
      -- again on the same workspace: the counters were reset by each tile's final split
      local first = d_tile:to_string()
      d_tile:fill(0)
      k:run { grid = grid, args = args }
      D.synchronize()
      assert(d_tile:to_string() == first, "a second launch on the same workspace differs")
      if g.workspace then g.workspace:free() end
    end)
  end
end)
