-- The ping-pong tile GEMM on the GPU (label gpu: spec/gpu_runner.lua):
-- examples/tile_gemm.lua with consumers = "pingpong" (a 64 x 256 program, or
-- 128 x 128: two consumer warpgroups each with the whole tile, alternating the programs of
-- the persistent schedule over one ring, tileas-materialize-agents and
-- convert-tileas-to-cutlass), on fresh random ragged shapes (the seed, printed,
-- picks them: TILUA_SEED repeats a run) against stdlib/gemm.lua's reference
-- kernel and sampled CPU dot products, and against stdlib/gemm.lua's
-- consumers = "pingpong" kernel of the same tile and stages bit for bit. The
-- shapes give the CTAs odd and even counts of programs (a consumer's last
-- program with no partner, and the skipped programs' k blocks). On clusters of
-- 2 (tileas-plan-cta's split, each warpgroup the CTA's block): 128 x 128 a CTA
-- with B multicast (a 256 x 128 program) and with A multicast (128 x 256),
-- 128 x 192 a CTA with B multicast (256 x 192); on clusters of 4 128 x 128 a
-- CTA of a 256 x 256 program split 2 x 2; each against stdlib/gemm.lua's
-- ping-pong of that tile and cluster bit for bit; the first a programmatic
-- dependent launch (the example's default there, ex.pdl_of), twice right after
-- stdlib's kernel, and also as a plain launch (o.pdl = false). Without a GPU
-- the kernel is still compiled and assembled, and the launches report pending.
local H = dofile "spec/helper.lua"
local tl = require "tilua"

local GPU = tl.device.available()
local seed = require("tilua.gpu.check").seed() -- ctest fixes it (spec/tests.cmake)
print(("tile_pingpong_gpu: seed %d"):format(seed))

local ex = assert(loadfile "examples/tile_gemm.lua")("--library")

local CASES = H.ragged_gemm_cases(seed) -- (ragged shapes from the seed)
CASES[#CASES + 1] = { m = 8191, n = 8184, k = 264 } -- programs past two a CTA, odd and even

-- ping-pong on clusters of 2 and 4: the program (o), the CTA's block and stdlib's cluster
local CLUSTER_FORMS = {
  { o = { consumers = "pingpong", cluster = 2, bm = 256, bn = 128 }, bm = 128, bn = 128, cluster = { 2, 1 } },
  { o = { consumers = "pingpong", cluster = 2, bm = 128, bn = 256 }, bm = 128, bn = 128, cluster = { 1, 2 } },
  { o = { consumers = "pingpong", cluster = 2, bm = 256, bn = 192 }, bm = 128, bn = 192, cluster = { 2, 1 } },
  -- (the first without its default programmatic dependent launch: o.pdl = false)
  { o = { consumers = "pingpong", cluster = 2, bm = 256, bn = 128, pdl = false }, bm = 128, bn = 128, cluster = { 2, 1 } },
  -- on a cluster of 4: a 256 x 256 program split 2 x 2, A and B each multicast to 2
  { o = { consumers = "pingpong", cluster = 4, bm = 256, bn = 256 }, bm = 128, bn = 128, cluster = { 2, 2 } },
}

describe("the ping-pong tile GEMM on the GPU", function()
  it("compiles to PTX that ptxas takes", function()
    H.assert_ptxas(ex.build({ consumers = "pingpong" }):compile())
    H.assert_ptxas(ex.build({ consumers = "pingpong", bn = 128 }):compile())
    for _, f in ipairs(CLUSTER_FORMS) do H.assert_ptxas(ex.build(f.o):compile()) end
  end)

  -- the tile program of form f (its options f.o; on one CTA f.cluster is nil) on case c against
  -- stdlib's ping-pong of the CTA's tile (f.bm x f.bn), stages and cluster
  local function check_form(i, c, f, label)
    it(label .. ": the reference kernel, CPU samples, stdlib/gemm.lua's ping-pong" .. (f.cluster and " in that cluster" or "")
       .. " bit for bit", function()
      if not GPU then pending("no GPU: " .. tl.device.error()) return end
      local D = tl.device
      local s = seed + 10 * i + (f.cluster and 1 or 0)
      local M, N, K = c.m, c.n, c.k
      local pm, pn = ex.rows_of(f.o), ex.cols_of(f.o) -- (the program's tile)
      local buf <close> = H.gemm_buffers(M, N, K, s, 2)
      local a, b, d_tile, d_std = buf.a, buf.b, buf[1], buf[2]
      local k = ex.build(f.o)
      k:compile()
      local g = tl.gemm.build { m = M, n = N, k = K, bm = f.bm, bn = f.bn, stages = ex.stages_of(f.o), consumers = "pingpong",
                                cluster = f.cluster }
      local function tile() k:launch { grid = { (M + pm - 1) // pm, (N + pn - 1) // pn }, pdl = k.pdl,
                                       args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { d_tile, { M, N } }, K = K } } end
      if k.pdl then g:run { a = a, b = b, d = d_std } tile() tile()
      else tile() g:run { a = a, b = b, d = d_std } end
      D.synchronize()
      local ok, report = g:check { a = a, b = b, d = d_tile, seed = s }
      print(("ping-pong %s, seed %d on %s: %s"):format(label, s, D.info().name, report))
      assert(ok, report)
      assert(d_tile:equals(d_std), "the ping-pong tile GEMM differs from stdlib/gemm.lua's ping-pong of its tile")
    end)
  end

  for i, c in ipairs(CASES) do
    for _, bn in ipairs { 256, 128 } do
      local f = { o = { consumers = "pingpong", bn = bn }, bn = bn, bm = ex.rows_of { consumers = "pingpong", bn = bn } }
      check_form(i, c, f, ("%d x %d programs, %d x %d x %d"):format(f.bm, f.bn, c.m, c.n, c.k))
    end
    for _, f in ipairs(CLUSTER_FORMS) do
      check_form(i, c, f, ("cluster %dx%d, %d x %d a CTA (%d x %d programs%s), %d x %d x %d"):format(f.cluster[1], f.cluster[2],
        f.bm, f.bn, f.o.bm, f.o.bn, ex.pdl_of(f.o) and ", PDL" or "", c.m, c.n, c.k))
    end
  end
end)
