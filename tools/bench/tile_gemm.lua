-- tools/bench/tile_gemm.lua: the tile GEMM of examples/tile_gemm.lua (a tile
-- program compiled by tile-to-ptx) against the hand-orchestrated GEMM of
-- stdlib/gemm.lua with the same tile (128 x 256 x 64), stages (3), cluster (1)
-- and schedule (persistent), at 4096^3 by default, measured in one run on one
-- device: bf16 A (M x K) and B (N x K), f32 accumulation, bf16 C. Both are
-- checked first (stdlib/gemm.lua's reference kernel and sampled CPU dot
-- products, and each against the other bit for bit) and then timed: the best of
-- 5 samples of CUDA events around 10 back-to-back launches, the two
-- alternating. The ratio is tile / stdlib (time); the target is within
-- 5%. Also the compile time from script to PTX (the median of 20; the target is
-- under 10 ms), which needs no GPU: without one the bench prints it and stops.
--
--   tilua tools/bench/tile_gemm.lua [--m=4096] [--n=4096] [--k=4096] [--fused] [--cluster=2 [--bm=256]]
--                                   [--cluster=4 --bm=256 [--bn=512|256]] [--streamk] [--stages=S]
--   (--fused: examples/tile_gemm_bias_relu.lua against stdlib/gemm.lua with bias and relu;
--   --cluster=2: the tile program on clusters of 2 CTAs -- tileas-plan-cta splits
--   its 128 x 256 tile along N, 128 x 128 a CTA, A multicast -- against
--   stdlib/gemm.lua's cluster = 2, 128 x 256 a CTA, B multicast: not the same
--   configuration, so the ratio is only indicative; --cluster=2 --bm=256: a
--   256 x 256 program, which tileas-plan-cta splits along M, 128 x 256 a CTA,
--   B multicast: stdlib/gemm.lua's cluster = 2 configuration, the same per-CTA
--   tile, compared bit for bit; --stages=S: the tile program's pipeline S deep
--   instead of 3, stdlib/gemm.lua's too where its per-CTA tile is the same;
--   --streamk: the tile program with schedule = "streamk" -- its k loop split
--   over one worker per SM, planned for this problem -- against stdlib/gemm.lua's
--   schedule = "streamk" with the same tile and workers: the same plan;
--   --cluster=4 --bm=256: a 256 x 512 program (--bn=256: 256 x 256) that
--   tileas-plan-cta splits along both dims, 128 x 256 (128 x 128) a CTA, A
--   multicast along the rows, B along the columns: stdlib/gemm.lua's cluster =
--   {2, 2} of the same per-CTA tile, compared bit for bit. On a cluster the
--   tile program on one CTA, 128 x 256, 3 stages, is timed in the same rounds:
--   the ratio cluster / one CTA)
local tl = require "tilua"

local o = { m = 4096, n = 4096, k = 4096 }
for _, a in ipairs(arg or {}) do
  local key, v = a:match "^%-%-([%w_]+)=(%d+)$"
  if key then o[key] = tonumber(v) end
  if a == "--fused" then o.fused = true end
  if a == "--streamk" then o.schedule = "streamk" end
end
if o.fused and (o.cluster and o.cluster ~= 1 or o.stages) then error("--cluster and --stages need the plain tile GEMM (not --fused)", 0) end
if o.bm and o.bm ~= 128 and not (o.bm == 256 and (o.cluster == 2 or o.cluster == 4)) then
  error("--bm=256 needs --cluster=2 or 4 (128 rows a CTA)", 0)
end
if (o.cluster or 1) == 4 and o.bm ~= 256 then error("--cluster=4 needs --bm=256 (2 x 2: 128 rows a CTA)", 0) end
if o.bn and not ((o.cluster or 1) == 4 and (o.bn == 256 or o.bn == 512)) then error("--bn needs --cluster=4 (256 or 512)", 0) end
local bm = o.bm or 128
local bn = o.bn or ((o.cluster or 1) == 4 and 512 or 256)
-- stdlib/gemm.lua's cluster and tile: the per-CTA tile of the tile program's
local std_cluster = (o.cluster or 1) == 4 and { 2, 2 } or o.cluster or 1
local std_bn = (o.cluster or 1) == 4 and bn // 2 or 256
-- stdlib/gemm.lua at the tile program's depth where its per-CTA tile is the same
-- (not the N split, whose stages are half the bytes: stdlib keeps 3)
local std_stages = ((o.cluster or 1) == 1 or bm == 256) and o.stages or nil
if o.schedule and (o.fused or (o.cluster or 1) ~= 1) then error("--streamk needs the plain tile GEMM on one CTA", 0) end
-- the tile program's build options (StreamK: planned for this problem, one worker per SM)
local function build_opts()
  if not o.schedule then return { cluster = o.cluster, bm = o.bm, bn = bn, stages = o.stages } end
  return { m = o.m, n = o.n, k = o.k, schedule = o.schedule, stages = o.stages,
           workers = tl.device.available() and tl.device.sm_count() or 132 }
end
local ex = assert(loadfile(o.fused and "examples/tile_gemm_bias_relu.lua" or "examples/tile_gemm.lua"))("--library")

-- {=== compile time, script to PTX (the build of the IR included), no cache
tl.options.compile_cache = false
local times = {}
for i = 1, 20 do
  local t0 = os.clock()
  ex.build(build_opts()):compile()
  times[i] = (os.clock() - t0) * 1e3
end
table.sort(times)
tl.options.compile_cache = nil
print(("%s: script to PTX %.2f ms (median of 20; min %.2f, max %.2f; CPU time, no compile cache)")
  :format(ex.name, times[10], times[1], times[20]))
-- }===

if not tl.device.available() then
  print("SKIP: no GPU (" .. tl.device.error() .. "): the speed ratio needs one")
  return
end

local D = tl.device
local seed = tonumber(os.getenv "TILUA_SEED") or os.time()
local M, N, K = o.m, o.n, o.k
print(("tile_gemm bench on %s (%d SMs), %d x %d x %d, cluster %d, %d x %d programs, schedule %s, stages %s (stdlib %s), seed %d")
  :format(D.info().name, D.sm_count(), M, N, K, o.cluster or 1, bm, bn, o.schedule or "persistent", o.stages or "default",
          std_stages or 3, seed))

local a = D.random(tl.bf16, M * K, seed)
local b = D.random(tl.bf16, N * K, seed + 1)
local bias = D.random(tl.f32, N, seed + 2)
local c_tile, c_std = D.alloc(tl.bf16, M * N), D.alloc(tl.bf16, M * N)

local k = ex.build(build_opts())
k:compile()
local args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { c_tile, { M, N } }, K = K }
if o.fused then args.bias = { bias, { N } } end
local grid = { (M + bm - 1) // bm, (N + bn - 1) // bn }
local function tile() k:launch { grid = grid, args = args } end

local g = tl.gemm.build { m = M, n = N, k = K, bn = std_bn, stages = std_stages or 3, schedule = o.schedule or "persistent", cluster = std_cluster,
                          bias = o.fused or nil, activation = o.fused and "relu" or nil }
g.kernel:compile()
local std_args = { a = a, b = b, d = c_std, bias = o.fused and bias or nil }
local function std() g:run(std_args) end

-- correctness first
tile()
std()
D.synchronize()
local ok1, r1 = g:check { a = a, b = b, d = c_tile, bias = o.fused and bias or nil, seed = seed }
print(("tile GEMM check: %s, %s"):format(ok1 and "OK" or "FAILED", r1))
local same = c_tile:equals(c_std)
print(("tile GEMM vs stdlib GEMM: %s"):format(same and "bit for bit the same" or "DIFFERENT"))
if not ok1 then error("the tile GEMM is wrong: no timing", 0) end

-- on a cluster, the tile program on one CTA (128 x 256, 3 stages) beside it
local one, c_one
if (o.cluster or 1) > 1 then
  local k1 = ex.build {}
  k1:compile()
  c_one = D.alloc(tl.bf16, M * N)
  local args1 = { A = { a, { M, K } }, B = { b, { N, K } }, C = { c_one, { M, N } }, K = K }
  local grid1 = { (M + 127) // 128, (N + 255) // 256 }
  one = function() k1:launch { grid = grid1, args = args1 } end
end

local function sample(fn) return D.time(function() for _ = 1, 10 do fn() end end) / 10 end
tile(); std()
if one then one() end
D.synchronize()
local bt, bs, b1 = math.huge, math.huge, math.huge
for _ = 1, 5 do
  bt = math.min(bt, sample(tile))
  bs = math.min(bs, sample(std))
  if one then b1 = math.min(b1, sample(one)) end
end
local flops = 2.0 * M * N * K
print(("%-30s %9s %10s"):format("", "ms", "TFLOP/s"))
print(("%-30s %9.4f %10.1f"):format(ex.name .. " (tile)", bt, flops / bt / 1e9))
print(("%-30s %9.4f %10.1f"):format("stdlib/gemm.lua", bs, flops / bs / 1e9))
if one then print(("%-30s %9.4f %10.1f"):format(ex.name .. " (tile, one CTA 128 x 256)", b1, flops / b1 / 1e9)) end
print(("ratio tile / stdlib (time): %.3f  (speed %.3f; target: within 5%%)"):format(bt / bs, bs / bt))
if one then print(("ratio tile on the cluster / tile on one CTA (speed): %.3f"):format(b1 / bt)) end
