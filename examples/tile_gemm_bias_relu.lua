-- tile_gemm_bias_relu.lua: a fused kernel as a tile program (docs/tileprog.md):
-- the GEMM of examples/tile_gemm.lua with its epilogue in the same kernel,
--
--   C[M, N] = relu(A[M, K] . B[N, K]^T + bias[N])   (bf16 in, f32 bias and accumulation, bf16 out)
--
-- The bias is a 256-wide tile of a vector, expanded to a row and broadcast
-- over the accumulator's rows; `tile-to-ptx` loads, for each thread, the
-- columns of the accumulator fragment it holds, adds and clamps in registers
-- before the stmatrix + TMA store of stdlib/gemm.lua's epilogue.
--
--   tilua examples/tile_gemm_bias_relu.lua [--m=M] [--n=N] [--k=K] [--cluster=1|2|4] [--bm=128|256]
--                                          [--emit=ir|ptx] [--stage=NAME]
--
-- With --cluster=C the program runs on a cluster of C CTAs (tileas-plan-cta
-- splits the tile among them as examples/tile_gemm.lua's; the bias row is
-- split as the accumulator's columns: on 4 CTAs each loads its 64 of the 256;
-- --cluster=4 --bm=256 splits both dims, 2 x 2, and the 2 CTAs that hold a
-- block's columns each load its 128 of the row).
--
-- On a GPU it runs on fresh random data and checks C against the plain
-- reference kernel of stdlib/gemm.lua with the same bias and relu (the check of
-- examples/tile_gemm.lua); without one it stops after ptxas ("SKIP: no GPU").
--   loadfile("examples/tile_gemm_bias_relu.lua")("--library") -> the example (tilua.gpu.check), with .build
local tl = require "tilua"
local check = require "tilua.gpu.check"
local base = assert(loadfile "examples/tile_gemm.lua")("--library") -- the check of a tile GEMM

-- {=== the tile program
-- o.cluster: the CTAs of a cluster (1); o.bm: the program's rows (128).
local function build(o)
  o = o or {}
  local bm = o.bm or 128
  tl.new_module()
  local k = tl.tile_kernel("tile_gemm_bias_relu", {
    params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2), C = tl.tensor(tl.bf16, 2),
               bias = tl.tensor(tl.f32, 1), K = tl.i32 },
    cluster = { o.cluster or 1, 1, 1 } })
  k:define(function(k, p)
    local pid_m, pid_n = tl.program_id("x"), tl.program_id("y")
    local acc = tl.zeros({ bm, 256 }, tl.f32)
    acc = tl.for_tiles(p.K, { tile = 64, stages = 3 }, acc, function(kk, acc)
      local a = tl.load(p.A, { pid_m, kk }, { bm, 64 })
      local b = tl.load(p.B, { pid_n, kk }, { 256, 64 }) -- B stored [N, K]: dot takes it transposed
      return tl.dot(a, b, acc)
    end)
    local bias = tl.expand_dim(tl.load(p.bias, { pid_n }, { 256 }), 0) -- [1, 256]: a row over the tile
    acc = tl.maximum(acc + bias, 0.0)
    tl.store(p.C, { pid_m, pid_n }, acc:cast(tl.bf16))
  end)
  return k
end
-- }===

local opts = base.options(...)
local example = base.harness("tile_gemm_bias_relu", function(o) return build(o or opts) end, true, opts)
if ... == "--library" then return example end
check.main(example)
