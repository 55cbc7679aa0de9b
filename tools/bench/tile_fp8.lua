-- tools/bench/tile_fp8.lua: the fp8 GEMM tile program (examples/tile_gemm_fp8.lua,
-- e4m3 in, f32 accumulation, bf16 out) against cuBLASLt's fp8 GEMM (the same
-- layouts: A [M, K] and B [N, K] K-major, alpha = the product of the
-- per-tensor scales), measured in one run on one device, at 8192^3 by
-- default: the per-tensor tile program, the one with row / column scales, the
-- block-scaled one (DeepSeek-V3's: 1 x 128 of A, 128 x 128 of B), the
-- per-tensor and block-scaled ones on clusters of 2 (256-row programs, B
-- multicast), and cuBLASLt. Both tile programs are checked first (the example's sampled CPU
-- references at a ragged size); then each is timed: the best of 5 samples of
-- CUDA events around 10 back-to-back launches. Ratios are over cuBLASLt
-- (throughput); the targets: the per-tensor program >= 1.0, the block-scaled
-- one >= 0.9 of the per-tensor one.
--
--   tilua tools/bench/tile_fp8.lua [--m=8192] [--n=8192] [--k=8192]
local tl = require "tilua"

local P = dofile "tools/bench/peers.lua"
local o = P.options { m = 8192, n = 8192, k = 8192 }
tl.device.require()
local D = tl.device
local seed = tonumber(os.getenv "TILUA_SEED") or os.time()
local M, N, K = o.m, o.n, o.k
local blas, why = tl.core.blas_available()
print(("tile_fp8 bench on %s (%d SMs), %d x %d x %d e4m3, seed %d; cuBLASLt: %s"):format(D.info().name, D.sm_count(), M, N, K,
  seed, blas and "loaded" or ("absent (" .. tostring(why) .. "): no ratios")))

local ex = assert(loadfile "examples/tile_gemm_fp8.lua")("--library")
local kernels = { tensor = ex.build { scales = "tensor" }, rowcol = ex.build { scales = "rowcol" }, blocks = ex.build { scales = "blocks" },
                  tensor_c2 = ex.build { scales = "tensor", cluster = 2 }, blocks_c2 = ex.build { scales = "blocks", cluster = 2 } }
for _, name in ipairs { "tensor", "rowcol", "blocks", "tensor_c2", "blocks_c2" } do
  local k = kernels[name]
  k:compile()
  local ok, summary = ex.check(k, { seed = seed, scales = name:match "^%a+" })
  print(("check %s: %s %s"):format(name, ok and "OK," or "FAILED,", summary))
  if not ok then error("the fp8 tile GEMM is wrong: no timing", 0) end
end

local a, b = D.random(tl.i8, M * K, seed, "e4m3"), D.random(tl.i8, N * K, seed + 1, "e4m3")
local sa, sb = D.random(tl.f32, M, seed + 2), D.random(tl.f32, N, seed + 3)
local ssa, ssb = ex.block_scale_shapes(M, N, K)
local bsa, bsb = D.random(tl.f32, ssa[1] * ssa[2], seed + 4), D.random(tl.f32, ssb[1] * ssb[2], seed + 5)
local c1, c2, c3 = D.alloc(tl.bf16, M * N), D.alloc(tl.bf16, M * N), D.alloc(tl.bf16, M * N)
local runs = {
  { "tile fp8, per-tensor scales", function() ex.launch(kernels.tensor, a, b, c1, 0.5, 0.25, M, N, K, true) end },
  { "tile fp8, row / column scales", function() ex.launch(kernels.rowcol, a, b, c2, sa, sb, M, N, K, true) end },
  { "tile fp8, block scales (1 x 128, 128 x 128)", function() ex.launch(kernels.blocks, a, b, c2, bsa, bsb, M, N, K, true) end },
  { "tile fp8, per-tensor, cluster of 2 (B multicast)", function() ex.launch(kernels.tensor_c2, a, b, c1, 0.5, 0.25, M, N, K, true) end },
  { "tile fp8, block scales, cluster of 2", function() ex.launch(kernels.blocks_c2, a, b, c2, bsa, bsb, M, N, K, true) end },
}
if blas then
  runs[#runs + 1] = { "cuBLASLt fp8 (alpha)", function()
    tl.core.blas_gemm { m = M, n = N, k = K, a = a.raw, b = b.raw, d = c3.raw, ["in"] = "e4m3", out = "bf16", alpha = 0.125 }
  end }
end
local best = P.time(runs)
local peer = blas and best[#runs]
P.table(runs, best, 2.0 * M * N * K, "/ cuBLASLt fp8", function(i) return peer and peer / best[i] end)
