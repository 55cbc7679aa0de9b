-- tools/bench/tile_epilogue.lua: what the tile maths cost in a GEMM's
-- epilogue: examples/tile_gemm_bias_gelu.lua (C = gelu(A . B^T + bias), the
-- erf GELU; --tanh: gelu_tanh) against the plain tile GEMM of
-- examples/tile_gemm.lua (same tile 128 x 256 x 64, 3 stages, persistent),
-- at 8192^3 by default, measured in one run on one device. Every fused kernel
-- is checked first (its example's sampled CPU references), then all are timed
-- in pairs against the plain GEMM, so that the power cap's drift of the SM
-- clock (1.3-1.5 GHz at 8192^3, changing within a second) falls on both
-- sides alike: a sample is CUDA events around --launches (10) back-to-back
-- launches; a pair is the samples plain, fused, fused, plain (A B B A: a
-- linear drift cancels), its ratio (plain + plain) / (fused + fused); a round
-- takes one pair of every variant, each round starting one variant later.
-- Printed: the median and best sample of each kernel, the median of its pair
-- ratios (plain / fused, time: the target is >= 0.95), their quartiles and
-- range and how many pairs reach 0.95, each pair's ratio, and with --clocks=1
-- nvidia-smi's SM clock, power and throttle reasons after every round.
--
--   tilua tools/bench/tile_epilogue.lua [--m=8192] [--n=8192] [--k=8192] [--tanh] [--rounds=15]
--        [--launches=10] [--clocks=1] [--variants=NAME,NAME...] [--against=plain_pp]
--
-- Variants (default: the one fused kernel of --tanh or not, as the example builds it by default):
--   gelu, gelu_tanh          the fused kernel, erf / tanh GELU, the example's default (ping-pong
--                            consumers, 128 x 128 programs in 6 stages), the default formulas
--   gelu_pp, gelu_tanh_pp    ping-pong 128 x 128 in 6 stages, named (the same kernels today)
--   gelu_coop, gelu_tanh_coop  cooperative consumers, 128 x 256 programs in 3 stages (the plain GEMM's tile)
--   gelu_as7126, gelu_tanh_as7126  the older formulas (tl.options.tile_math = "as7126")
--   plain                    the plain tile GEMM again (an A / A pair: the method's own spread)
--   plain_pp                 the plain tile GEMM on ping-pong consumers, 128 x 128 in 6 stages
--   gelu_st4, gelu_tanh_st4, plain_st4  cooperative 128 x 256 programs in 4 stages instead of 3
--   NAME_lb                  a fused one with the bias read from one address a thread
--                            (tl.options.line_loads = "based"), e.g. gelu_lb, gelu_tanh_lb
-- Ratios are against the plain GEMM (examples/tile_gemm.lua's default: cooperative 128 x 256 in 3
-- stages). --against=plain_pp: every other variant is also paired (same round, its own A B B A)
-- against the plain GEMM on ping-pong consumers, a second table.
local tl = require "tilua"

local P = dofile "tools/bench/peers.lua"
local o = P.options { m = 8192, n = 8192, k = 8192, rounds = 15, launches = 10, clocks = 0 }
for _, a in ipairs(arg or {}) do
  if a == "--tanh" then o.tanh = true end
  local vs = a:match "^%-%-variants=(.*)$"
  o.against = a:match "^%-%-against=(.*)$" or o.against
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
print(("tile_epilogue bench on %s (%d SMs), %d x %d x %d, seed %d, %d rounds of pairs (A B B A), %d launches a sample")
  :format(D.info().name, D.sm_count(), M, N, K, seed, o.rounds, o.launches))

local PP = { consumers = "pingpong", bm = 128, bn = 128, stages = 6 }
local function variant_opts(name)
  local lines = name:match "_lb$" and "based" or nil
  local rest = name:gsub("_lb$", "")
  local base = rest:gsub("_as7126$", ""):gsub("_pp$", ""):gsub("_st4$", ""):gsub("_coop$", "")
  if base ~= "gelu" and base ~= "gelu_tanh" and base ~= "plain" then error("unknown variant " .. name, 0) end
  local v = { name = name, form = rest:match "_as7126$" and "as7126" or nil, lines = lines, tanh = base == "gelu_tanh" }
  if rest:match "_pp$" then for key, x in pairs(PP) do v[key] = x end end
  if rest:match "_coop$" or rest:match "_st4$" then v.consumers = "cooperative" end
  if rest:match "_st4$" then v.stages = 4 end
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
  tl.options.tile_math, tl.options.line_loads = v.form, v.lines
  if name:match "^plain" then
    local k = plain_ex.build { m = M, n = N, k = K, consumers = v.consumers, bm = v.bm, bn = v.bn, stages = v.stages }
    k:compile()
    local bm, bn = v.bm or 128, v.bn or 256
    kernels[#kernels + 1] = { name = ("tile GEMM (%s)"):format(name), variant = name, run = function()
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
    local t = fused_ex.tiling(v)
    local bm, bn = t.bm, t.bn
    kernels[#kernels + 1] = { name = ("+ bias + %s (%s %d x %d, %d stages)"):format(name, t.consumers, bm, bn, t.stages), run = function()
      k:launch { grid = { (M + bm - 1) // bm, (N + bn - 1) // bn },
                 args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { c, { M, N } }, bias = { bias, { N } }, K = K } }
    end }
  end
end
tl.options.tile_math, tl.options.line_loads = nil, nil

local function sample(fn) return D.time(function() for _ = 1, o.launches do fn() end end) / o.launches end
for _, kr in ipairs(kernels) do kr.run() end
D.synchronize()
local n = #kernels
-- the bases: the plain GEMM (kernels[1]) and --against's variant (one of --variants)
local bases = { kernels[1] }
if o.against then
  for i = 2, n do if kernels[i].variant == o.against then bases[2] = kernels[i] end end
  if not bases[2] then error("--against=" .. o.against .. ": not among --variants", 0) end
end
for _, kr in ipairs(kernels) do kr.t, kr.ratio = {}, { {}, {} } end
-- a round: one pair (base, it, it, base) of every variant against each base, starting one later each round
for r = 1, o.rounds do
  for j = 0, n - 2 do
    local kr = kernels[(r - 1 + j) % (n - 1) + 2]
    for bi, base in ipairs(bases) do
      if kr ~= base then
        local p1, f1, f2, p2 = sample(base.run), sample(kr.run), sample(kr.run), sample(base.run)
        if bi == 1 then kr.t[#kr.t + 1], kr.t[#kr.t + 2] = f1, f2 end
        base.t[#base.t + 1], base.t[#base.t + 2] = p1, p2
        kr.ratio[bi][r] = (p1 + p2) / (f1 + f2)
      end
    end
  end
  if o.clocks == 1 then print(("clocks after round %d: %s"):format(r, P.clocks())) end
end
local function sorted(t)
  local s = {}
  for i, x in ipairs(t) do s[i] = x end
  table.sort(s)
  return s
end
-- the q-quantile of t (linear between the order statistics)
local function quantile(t, q)
  local s = sorted(t)
  local h = (#s - 1) * q + 1
  local lo = math.floor(h)
  return s[lo] + (h - lo) * ((s[lo + 1] or s[lo]) - s[lo])
end
local flops = 2.0 * M * N * K
for bi, base in ipairs(bases) do
  local bname = bi == 1 and "plain" or o.against
  if bi > 1 then print(("against %s (each pair %s, it, it, %s):"):format(base.name, bname, bname)) end
  print(("| kernel | median ms | TFLOP/s | best ms | %s / it (median of pairs) | quartiles | range | pairs >= 0.95 |"):format(bname))
  print("|---|---|---|---|---|---|---|---|")
  for i, kr in ipairs(kernels) do
    local med, best = quantile(kr.t, 0.5), math.huge
    for _, x in ipairs(kr.t) do best = math.min(best, x) end
    if kr == base then
      print(("| %s | %.4f | %.1f | %.4f | 1 | - | - | - |"):format(kr.name, med, flops / med / 1e9, best))
    elseif bi == 1 or i > 1 then
      local s, good = sorted(kr.ratio[bi]), 0
      for _, x in ipairs(s) do if x >= 0.95 then good = good + 1 end end
      print(("| %s | %.4f | %.1f | %.4f | %.3f | %.3f-%.3f | %.3f-%.3f | %d of %d |"):format(kr.name, med, flops / med / 1e9,
        best, quantile(s, 0.5), quantile(s, 0.25), quantile(s, 0.75), s[1], s[#s], good, #s))
    end
  end
end
for bi, base in ipairs(bases) do
  local bname = bi == 1 and "plain" or o.against
  for i = 2, n do
    if kernels[i] ~= base then
      local per = {}
      for r, x in ipairs(kernels[i].ratio[bi]) do per[r] = ("%.3f"):format(x) end
      print(("pairs, %s / %s: %s"):format(bname, kernels[i].name, table.concat(per, " ")))
    end
  end
end
