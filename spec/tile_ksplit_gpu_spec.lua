-- The ksplit tile GEMM on the GPU (label gpu: spec/gpu_runner.lua):
-- examples/tile_gemm.lua with consumers = "ksplit" (a 64-row program whose two
-- consumer warpgroups take every other k block of it from one ring and add
-- their sums before the epilogue: tileas-materialize-agents and
-- convert-tileas-to-cutlass with kernels/gemm.lua's ksplit pieces), on fresh
-- random ragged shapes (the seed, printed, picks them: TILUA_SEED repeats a
-- run) against stdlib/gemm.lua's reference kernel and sampled CPU dot
-- products, and against stdlib/gemm.lua's consumers = "ksplit" kernel of the
-- same tile and stages bit for bit: 64 x 32 (14 stages, the decode form), 64 x
-- 128, a 128 x 96 program on a cluster of 2 (64 x 96 a CTA, B multicast:
-- stdlib's ksplit in a 2 x 1 cluster), 64 x 32 with 128-element k blocks
-- (8 stages: the decode model's pick at 64 x 4096 x 4096), and a 64 x 256
-- program on a cluster of 4 (64 x 64 a CTA, A multicast: stdlib's 1 x 4). The shapes give odd and even counts of k
-- blocks a program and of programs a CTA (the parity of a program's first k
-- block changes along a CTA's programs). Without a GPU the kernels are still
-- compiled and assembled, and the launches report pending.
local H = dofile "spec/helper.lua"
local tl = require "tilua"

local GPU = tl.device.available()
local seed = require("tilua.gpu.check").seed() -- ctest fixes it (spec/tests.cmake)
print(("tile_ksplit_gpu: seed %d"):format(seed))

local ex = assert(loadfile "examples/tile_gemm.lua")("--library")

local CASES = H.ragged_gemm_cases(seed) -- (ragged shapes from the seed)
CASES[#CASES + 1] = { m = 64, n = 4096, k = 4096 } -- the decode shape (64 k blocks, 128 programs of 64 x 32)
CASES[#CASES + 1] = { m = 1000, n = 1480, k = 520 } -- the example's problem (9 k blocks: odd)

-- the program (o), the CTA's block and stdlib's cluster
local FORMS = {
  { o = { consumers = "ksplit", bn = 32 }, bm = 64, bn = 32 },
  { o = { consumers = "ksplit" }, bm = 64, bn = 128 },
  { o = { consumers = "ksplit", cluster = 2, bm = 128, bn = 96 }, bm = 64, bn = 96, cluster = { 2, 1 } },
  { o = { consumers = "ksplit", bn = 32, bk = 128 }, bm = 64, bn = 32, bk = 128 },
  { o = { consumers = "ksplit", cluster = 4, bn = 256 }, bm = 64, bn = 64, cluster = { 1, 4 } },
}

describe("the ksplit tile GEMM on the GPU", function()
  it("compiles to PTX that ptxas takes", function()
    for _, f in ipairs(FORMS) do H.assert_ptxas(ex.build(f.o):compile()) end
  end)

  for i, c in ipairs(CASES) do
    for j, f in ipairs(FORMS) do
      local label = ("%d x %d a CTA%s%s, %d x %d x %d"):format(f.bm, f.bn, f.cluster and (" (cluster %dx%d)"):format(f.cluster[1], f.cluster[2]) or "",
                                                            f.bk and (" bk " .. f.bk) or "", c.m, c.n, c.k)
      it(label .. ": the reference kernel, CPU samples, stdlib/gemm.lua's ksplit bit for bit", function()
        if not GPU then pending("no GPU: " .. tl.device.error()) return end
        local D = tl.device
        local s = seed + 10 * i + j
        local M, N, K = c.m, c.n, c.k
        local pm, pn = ex.rows_of(f.o), ex.cols_of(f.o) -- (the program's tile)
        local buf <close> = H.gemm_buffers(M, N, K, s, 2)
        local a, b, d_tile, d_std = buf.a, buf.b, buf[1], buf[2]
        local k = ex.build(f.o)
        k:compile()
        local g = tl.gemm.build { m = M, n = N, k = K, bm = f.bm, bn = f.bn, stages = ex.stages_of(f.o), consumers = "ksplit",
                                  cluster = f.cluster, bk = f.bk }
        k:launch { grid = { (M + pm - 1) // pm, (N + pn - 1) // pn },
                   args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { d_tile, { M, N } }, K = K } }
        g:run { a = a, b = b, d = d_std }
        D.synchronize()
        local ok, report = g:check { a = a, b = b, d = d_tile, seed = s }
        print(("ksplit %s, seed %d on %s: %s"):format(label, s, D.info().name, report))
        assert(ok, report)
        assert(d_tile:equals(d_std), "the ksplit tile GEMM differs from stdlib/gemm.lua's ksplit of its tile")
      end)
    end
  end
end)
