-- tile_gemm_bias_gelu.lua: a GEMM with a bias and GELU in its epilogue, as a
-- tile program (docs/tileprog.md):
--
--   C[M, N] = gelu(A[M, K] . B[N, K]^T + bias[N])   (bf16 in, f32 bias and accumulation, bf16 out)
--
-- tl.gelu is the exact (erf) GELU, x (1 + erf(x / sqrt 2)) / 2, which
-- `tile-to-ptx` computes per element of the accumulator fragment as
-- max(x, 0) - |x| 2^G(|x|), G a degree-5 polynomial, over the approximate ex2
-- (docs/tileprog.md, "Tile maths": within 4.5e-7 |x|); --tanh takes
-- tl.gelu_tanh (its tanh form, as x sigmoid(2u)) instead.
--
-- The program runs on ping-pong consumers by default (tl.for_tiles's consumers
-- = "pingpong": 128 x 128 programs, 6 stages), not the plain tile GEMM's
-- cooperative 128 x 256 in 3: the GELU is 7-10 ops an element after the dot,
-- and on cooperative consumers the mainloop stops for it (both warpgroups run
-- the epilogue), while in ping-pong one warpgroup's epilogue runs under the
-- other's mainloop (as CUTLASS's ping-pong kernels do for heavy epilogues).
-- The rule this example follows: a tile GEMM whose epilogue does
-- transcendental work per element takes ping-pong 128 x 128 consumers with the
-- deeper ring (docs/PERF.md, s16gelu; tools/bench/tile_epilogue.lua measures
-- both forms). build{consumers = "cooperative"} (--cooperative) is the 128 x
-- 256 form in 3 stages; bm, bn, stages override either.
--
--   tilua examples/tile_gemm_bias_gelu.lua [--m=M] [--n=N] [--k=K] [--tanh] [--cooperative] [--bm=BM] [--bn=BN] [--stages=S]
--        [--emit=ir|ptx] [--stage=NAME]
--
-- On a GPU it runs on fresh random data and checks sampled elements of C
-- against CPU dot products with the bias and GELU (bf16's rounding); without
-- one it stops after ptxas ("SKIP: no GPU").
--   loadfile("examples/tile_gemm_bias_gelu.lua")("--library") -> the example (tilua.gpu.check), with .build
--   and .tiling(opts) (the tile and consumers build takes)
local tl = require "tilua"
local check = require "tilua.gpu.check"
local ref = require("tilua.emulate.mathref").fn

local o = { m = 1000, n = 1480, k = 520 }
for _, a in ipairs(... ~= "--library" and arg or {}) do
  local key, v = a:match "^%-%-([%w_]+)=(%d+)$"
  if key then o[key] = tonumber(v) end
  if a == "--tanh" then o.tanh = true end
  if a == "--cooperative" then o.consumers = "cooperative" end
end

-- tiling(opts) -> {consumers, bm, bn, stages}: opts' choices over the default
-- (ping-pong 128 x 128 in 6 stages; cooperative: 128 x 256 in 3)
local function tiling(opts)
  local pp = (opts.consumers or "pingpong") == "pingpong"
  return { consumers = pp and "pingpong" or "cooperative", bm = opts.bm or 128, bn = opts.bn or (pp and 128 or 256),
           stages = opts.stages or (pp and 6 or 3) }
end

-- {=== the tile program
local function build(opts)
  opts = opts or o
  local act = opts.tanh and tl.gelu_tanh or tl.gelu
  local t = tiling(opts)
  local bm, bn = t.bm, t.bn
  tl.new_module()
  local k = tl.tile_kernel("tile_gemm_bias_gelu", {
    params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2), C = tl.tensor(tl.bf16, 2),
               bias = tl.tensor(tl.f32, 1), K = tl.i32 } })
  k:define(function(k, p)
    local pid_m, pid_n = tl.program_id("x"), tl.program_id("y")
    local acc = tl.for_tiles(p.K, { tile = 64, stages = t.stages, consumers = t.consumers },
                             tl.zeros({ bm, bn }, tl.f32), function(kk, acc)
      return tl.dot(tl.load(p.A, { pid_m, kk }, { bm, 64 }), tl.load(p.B, { pid_n, kk }, { bn, 64 }), acc)
    end)
    local bias = tl.expand_dim(tl.load(p.bias, { pid_n }, { bn }), 0) -- [1, bn]: a row over the tile
    tl.store(p.C, { pid_m, pid_n }, act(acc + bias):cast(tl.bf16))
  end)
  return k
end
-- }===

local kernel, kopts
local example = { name = "tile_gemm_bias_gelu", build = build, tiling = tiling }

-- prepare(opts): the kernel run checks, built with opts (build's; the command line's without)
function example.prepare(opts)
  kopts = opts or o
  kernel = build(kopts)
  check.compile(example.name, kernel)
end

-- run{seed, small}: fresh data, 2000 sampled elements against CPU dot products
function example.run(c)
  local M, N, K = o.m, o.n, o.k
  if c.small then M, N, K = 200, 296, 128 end
  local D = tl.device
  local a <close> = D.random(tl.bf16, M * K, c.seed)
  local b <close> = D.random(tl.bf16, N * K, c.seed + 1)
  local bias <close> = D.random(tl.f32, N, c.seed + 2)
  local d <close> = D.alloc(tl.bf16, M * N)
  d:fill(0)
  local t = tiling(kopts)
  local bm, bn = t.bm, t.bn
  kernel:run { grid = { (M + bm - 1) // bm, (N + bn - 1) // bn },
               args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { d, { M, N } }, bias = { bias, { N } }, K = K } }
  local av, bv, bs, got = a:to_table(), b:to_table(), bias:to_table(), d:to_table()
  local act = kopts.tanh and ref.gelu_tanh or ref.gelu
  math.randomseed(c.seed)
  local fail, count = check.mismatches(example.name)
  local worst = 0
  for _ = 1, 2000 do
    local i, j = math.random(0, M - 1), math.random(0, N - 1)
    local s = bs[j + 1]
    for kk = 0, K - 1 do s = s + av[i * K + kk + 1] * bv[j * K + kk + 1] end
    local want, g = act(s), got[i * N + j + 1]
    local err = math.abs(g - want)
    -- bf16's rounding (2^-9) and the sum's order (the GELUs' own errors are near 1e-6)
    local lim = 2 ^ -8 * math.abs(want) + 1e-3
    worst = math.max(worst, err / (math.abs(want) + 1e-3))
    if err > lim or err ~= err then fail("C[%d, %d] = %.6g, want %.6g", i, j, g, want) end
  end
  return count() == 0, ("seed %d, %d x %d x %d on %s: 2000 sampled elements, %d mismatches, worst relative error %.2g"):format(
    c.seed, M, N, K, D.info().name, count(), worst)
end
example.grids = function() return { 1 } end

if ... == "--library" then return example end
check.main(example)
