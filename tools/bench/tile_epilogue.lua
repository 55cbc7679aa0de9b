-- tools/bench/tile_epilogue.lua: what the tile maths cost in a GEMM's
-- epilogue: examples/tile_gemm_bias_gelu.lua (C = gelu(A . B^T + bias), the
-- erf GELU; --tanh: gelu_tanh) against the plain tile GEMM of
-- examples/tile_gemm.lua (same tile 128 x 256 x 64, 3 stages, persistent),
-- at 8192^3 by default, measured in one run on one device. The fused kernel is
-- checked first (its example's sampled CPU references), then both are timed:
-- the best of 5 samples of CUDA events around 10 back-to-back launches, the two
-- alternating. The ratio is plain / fused (time); the target is >= 0.95.
--
--   tilua tools/bench/tile_epilogue.lua [--m=8192] [--n=8192] [--k=8192] [--tanh]
local tl = require "tilua"

local o = { m = 8192, n = 8192, k = 8192 }
for _, a in ipairs(arg or {}) do
  local key, v = a:match "^%-%-([%w_]+)=(%d+)$"
  if key then o[key] = tonumber(v) end
  if a == "--tanh" then o.tanh = true end
end
tl.device.require()
local D = tl.device
local seed = tonumber(os.getenv "TILUA_SEED") or os.time()
local M, N, K = o.m, o.n, o.k

local fused_ex = assert(loadfile "examples/tile_gemm_bias_gelu.lua")("--library")
local plain_ex = assert(loadfile "examples/tile_gemm.lua")("--library")
print(("tile_epilogue bench on %s (%d SMs), %d x %d x %d, %s, seed %d"):format(D.info().name, D.sm_count(), M, N, K,
  o.tanh and "gelu_tanh" or "gelu (erf)", seed))

-- the check: the example's run at a ragged size
fused_ex.prepare()
local ok, summary = fused_ex.run { seed = seed }
print(("check: %s %s"):format(ok and "OK," or "FAILED,", summary))
if not ok then error("the fused GEMM is wrong: no timing", 0) end

local fused = fused_ex.build { tanh = o.tanh }
fused:compile()
local plain = plain_ex.build { m = M, n = N, k = K }
plain:compile()
local a, b = D.random(tl.bf16, M * K, seed), D.random(tl.bf16, N * K, seed + 1)
local bias = D.random(tl.f32, N, seed + 2)
local c1, c2 = D.alloc(tl.bf16, M * N), D.alloc(tl.bf16, M * N)
local grid = { (M + 127) // 128, (N + 255) // 256 }
local function run_fused()
  fused:launch { grid = grid, args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { c1, { M, N } }, bias = { bias, { N } }, K = K } }
end
local function run_plain() plain:launch { grid = grid, args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { c2, { M, N } }, K = K } } end

local function sample(fn) return D.time(function() for _ = 1, 10 do fn() end end) / 10 end
run_fused(); run_plain()
D.synchronize()
local bf, bp = math.huge, math.huge
for _ = 1, 5 do
  bf = math.min(bf, sample(run_fused))
  bp = math.min(bp, sample(run_plain))
end
local flops = 2.0 * M * N * K
print("| kernel | ms | TFLOP/s |")
print("|---|---|---|")
print(("| tile GEMM | %.4f | %.1f |"):format(bp, flops / bp / 1e9))
print(("| tile GEMM + bias + %s | %.4f | %.1f |"):format(o.tanh and "gelu_tanh" or "gelu", bf, flops / bf / 1e9))
print(("ratio plain / fused (time): %.3f (target >= 0.95)"):format(bp / bf))
