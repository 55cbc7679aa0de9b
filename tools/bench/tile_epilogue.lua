-- tools/bench/tile_epilogue.lua: what the tile maths cost in a GEMM's
-- epilogue: examples/tile_gemm_bias_gelu.lua (C = gelu(A . B^T + bias), the
-- erf GELU; --tanh: gelu_tanh) against the plain tile GEMM of
-- examples/tile_gemm.lua (same tile 128 x 256 x 64, 3 stages, persistent),
-- at 8192^3 by default, measured in one run on one device. Every fused kernel
-- is checked first (its example's sampled CPU references), then all are timed
-- in rounds: each round one sample (CUDA events around 10 back-to-back
-- launches) of every kernel, each round starting one kernel later. Printed: the
-- median and best of each, and plain / fused (time) a round, its median and
-- range; the target is >= 0.95.
--
--   tilua tools/bench/tile_epilogue.lua [--m=8192] [--n=8192] [--k=8192] [--tanh] [--rounds=5]
--        [--variants=NAME,NAME...]
--
-- Variants (default: the one fused kernel of --tanh or not, as lowered by default):
--   gelu, gelu_tanh          the fused kernel, erf / tanh GELU, the default forms
--   gelu_as7126, gelu_tanh_as7126  the same with the older formulas (tl.options.tile_math = "as7126")
--   gelu_pp, gelu_tanh_pp    ping-pong consumers, 128 x 128 programs in 6 stages (default forms)
--   plain_pp                 the plain tile GEMM on ping-pong consumers, 128 x 128 in 6 stages
--   gelu_st4, gelu_tanh_st4, plain_st4  the 128 x 256 programs in 4 stages instead of 3
-- Ratios are against the plain 128 x 256 GEMM; plain_pp is printed beside it.
local tl = require "tilua"

local o = { m = 8192, n = 8192, k = 8192, rounds = 5 }
for _, a in ipairs(arg or {}) do
  local key, v = a:match "^%-%-([%w_]+)=(%d+)$"
  if key then o[key] = tonumber(v) end
  if a == "--tanh" then o.tanh = true end
  local vs = a:match "^%-%-variants=(.*)$"
  if vs then
    o.variants = {}
    for w in vs:gmatch "[^,]+" do o.variants[#o.variants + 1] = w end
  end
end
o.variants = o.variants or { o.tanh and "gelu_tanh" or "gelu" }
tl.device.require()
local D = tl.device
local seed = tonumber(os.getenv "TILUA_SEED") or os.time()
local M, N, K = o.m, o.n, o.k

local fused_ex = assert(loadfile "examples/tile_gemm_bias_gelu.lua")("--library")
local plain_ex = assert(loadfile "examples/tile_gemm.lua")("--library")
print(("tile_epilogue bench on %s (%d SMs), %d x %d x %d, seed %d, %d rounds"):format(D.info().name, D.sm_count(),
  M, N, K, seed, o.rounds))

local PP = { consumers = "pingpong", bm = 128, bn = 128, stages = 6 }
local function variant_opts(name)
  local base = name:gsub("_as7126$", ""):gsub("_pp$", ""):gsub("_st4$", "")
  if base ~= "gelu" and base ~= "gelu_tanh" and base ~= "plain" then error("unknown variant " .. name, 0) end
  local v = { name = name, form = name:match "_as7126$" and "as7126" or nil, tanh = base == "gelu_tanh" }
  if name:match "_pp$" then for key, x in pairs(PP) do v[key] = x end end
  if name:match "_st4$" then v.stages = 4 end
  return v
end

local a, b = D.random(tl.bf16, M * K, seed), D.random(tl.bf16, N * K, seed + 1)
local bias = D.random(tl.f32, N, seed + 2)
local c = D.alloc(tl.bf16, M * N)
local kernels = {}

local plain = plain_ex.build { m = M, n = N, k = K }
plain:compile()
kernels[1] = { name = "tile GEMM", run = function()
  plain:launch { grid = { (M + 127) // 128, (N + 255) // 256 }, args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { c, { M, N } }, K = K } }
end }
for _, name in ipairs(o.variants) do
  local v = variant_opts(name)
  tl.options.tile_math = v.form
  if name:match "^plain_" then
    local k = plain_ex.build { m = M, n = N, k = K, consumers = v.consumers, bm = v.bm, bn = v.bn, stages = v.stages }
    k:compile()
    local bm, bn = v.bm or 128, v.bn or 256
    kernels[#kernels + 1] = { name = ("tile GEMM (%s)"):format(name), run = function()
      k:launch { grid = { (M + bm - 1) // bm, (N + bn - 1) // bn }, args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { c, { M, N } }, K = K } }
    end }
  else
    -- the check: the example's run at a ragged size, this variant's kernel
    fused_ex.prepare(v)
    local ok, summary = fused_ex.run { seed = seed }
    print(("check %s: %s %s"):format(name, ok and "OK," or "FAILED,", summary))
    if not ok then error("the fused GEMM " .. name .. " is wrong: no timing", 0) end
    local k = fused_ex.build(v)
    k:compile()
    local bm, bn = v.bm or 128, v.bn or 256
    kernels[#kernels + 1] = { name = "+ bias + " .. name, run = function()
      k:launch { grid = { (M + bm - 1) // bm, (N + bn - 1) // bn },
                 args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { c, { M, N } }, bias = { bias, { N } }, K = K } }
    end }
  end
end
tl.options.tile_math = nil

local function sample(fn) return D.time(function() for _ = 1, 10 do fn() end end) / 10 end
for _, kr in ipairs(kernels) do kr.run() end
D.synchronize()
local n = #kernels
for _, kr in ipairs(kernels) do kr.t = {} end
for r = 1, o.rounds do
  for j = 0, n - 1 do
    local kr = kernels[(r - 1 + j) % n + 1]
    kr.t[r] = sample(kr.run)
  end
end
local function median(t)
  local s = {}
  for i, x in ipairs(t) do s[i] = x end
  table.sort(s)
  return #s % 2 == 1 and s[(#s + 1) // 2] or (s[#s // 2] + s[#s // 2 + 1]) / 2
end
local flops = 2.0 * M * N * K
print("| kernel | median ms | TFLOP/s | best ms | plain / it (median of rounds) | range over rounds | rounds >= 0.95 |")
print("|---|---|---|---|---|---|---|")
for _, kr in ipairs(kernels) do
  local med, best = median(kr.t), math.huge
  for _, x in ipairs(kr.t) do best = math.min(best, x) end
  local ratios, lo, hi, good = {}, math.huge, 0, 0
  for r = 1, o.rounds do
    ratios[r] = kernels[1].t[r] / kr.t[r]
    lo, hi = math.min(lo, ratios[r]), math.max(hi, ratios[r])
    if ratios[r] >= 0.95 then good = good + 1 end
  end
  print(("| %s | %.4f | %.1f | %.4f | %.3f | %.3f-%.3f | %d of %d |"):format(kr.name, med, flops / med / 1e9, best,
    median(ratios), lo, hi, good, o.rounds))
end
for i = 2, n do
  local per = {}
  for r = 1, o.rounds do per[r] = ("%.3f"):format(kernels[1].t[r] / kernels[i].t[r]) end
  print(("rounds, plain / %s: %s"):format(kernels[i].name, table.concat(per, " ")))
end
