-- The swapped tile GEMM on the GPU (label gpu: spec/gpu_runner.lua):
-- examples/tile_gemm.lua with swap = true (a program of bm tokens x bn
-- columns of C computes D^T = B . A^T and stores its transpose, element by
-- element: docs/tileprog.md), on fresh random ragged shapes (the seed, printed,
-- picks them: TILUA_SEED repeats a run) and decode shapes, against
-- stdlib/gemm.lua's reference kernel and sampled CPU dot products, and against
-- stdlib/gemm.lua's swap_ab kernel of the same tile and stages bit for bit: 16
-- x 128 (two consumers), 8 x 64 (one), 32 x 128 with 128-element k blocks.
-- Without a GPU the kernels are still compiled and assembled, and the launches
-- report pending.
local H = dofile "spec/helper.lua"
local tl = require "tilua"

local GPU = tl.device.available()
local seed = require("tilua.gpu.check").seed() -- ctest fixes it (spec/tests.cmake)
print(("tile_swap_gpu: seed %d"):format(seed))

local ex = assert(loadfile "examples/tile_gemm.lua")("--library")

local CASES = H.ragged_gemm_cases(seed) -- (ragged shapes from the seed)
CASES[#CASES + 1] = { m = 16, n = 4096, k = 4096 } -- a decode shape (one program along M)
CASES[#CASES + 1] = { m = 33, n = 1480, k = 520 }  -- ragged tokens and columns, 9 k blocks

local FORMS = {
  { o = { swap = true } },
  { o = { swap = true, bm = 8, bn = 64 } },
  { o = { swap = true, bm = 32, bk = 128 } },
}

describe("the swapped tile GEMM on the GPU", function()
  it("compiles to PTX that ptxas takes", function()
    for _, f in ipairs(FORMS) do H.assert_ptxas(ex.build(f.o):compile()) end
  end)

  for i, c in ipairs(CASES) do
    for j, f in ipairs(FORMS) do
      local pm, pn = ex.rows_of(f.o), ex.cols_of(f.o) -- (the program's tile of C: pm tokens x pn columns)
      local label = ("%d x %d%s, %d x %d x %d"):format(pm, pn, f.o.bk and (" bk " .. f.o.bk) or "", c.m, c.n, c.k)
      it(label .. ": the reference kernel, CPU samples, stdlib/gemm.lua's swap_ab bit for bit", function()
        if not GPU then pending("no GPU: " .. tl.device.error()) return end
        local D = tl.device
        local s = seed + 10 * i + j
        local M, N, K = c.m, c.n, c.k
        local buf <close> = H.gemm_buffers(M, N, K, s, 2)
        local a, b, d_tile, d_std = buf.a, buf.b, buf[1], buf[2]
        local k = ex.build(f.o)
        k:compile()
        -- stdlib's swapped tile: bm rows of B (D's columns) x bn tokens
        local g = tl.gemm.build { m = M, n = N, k = K, swap_ab = true, bm = pn, bn = pm, bk = f.o.bk,
                                  stages = ex.stages_of(f.o) }
        k:launch { grid = ex.grid_of(f.o, M, N), -- (C's columns along x, its tokens along y)
                   args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { d_tile, { M, N } }, K = K } }
        g:run { a = a, b = b, d = d_std }
        D.synchronize()
        local ok, report = g:check { a = a, b = b, d = d_tile, seed = s }
        print(("swap %s, seed %d on %s: %s"):format(label, s, D.info().name, report))
        assert(ok, report)
        assert(d_tile:equals(d_std), "the swapped tile GEMM differs from stdlib/gemm.lua's swap_ab of its tile")
      end)
    end
  end
end)
