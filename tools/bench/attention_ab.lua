-- tools/bench/attention_ab.lua: the tile program (examples/attention.lua)
-- against stdlib/attention.lua's default kernel, in interleaved rounds, on the
-- same inputs (B x H = 2 x 16 or --bh=BxH, S = 4096, bf16): tools/bench/attention.lua
-- times each kernel once (the best of 5 samples of 10 launches); a gap of 2-4 %
-- between two kernels needs them timed in turns, several times, to tell from
-- the device's drift. Each round times every kernel of the problem (the best of
-- 3 samples of 10 launches); the table gives each kernel's median and best
-- round and the median of the rounds' ratios over stdlib's.
--
--   tilua tools/bench/attention_ab.lua [--only=d64,d128 causal] [--rounds=7] [--schedules] [--bh=1x32]
--   tilua tools/bench/attention_ab.lua --launch=NAME,KIND   (for ncu: 3 launches of one kernel)
--
-- --schedules adds the other schedules of both: the tile program data-parallel
-- (a CTA a program) and, causal, static persistent (its default there: dynamic
-- claims); stdlib's kernel causal persistent (its default there: data-parallel)
-- and non-causal data-parallel (its default there: persistent). Kernels are
-- not checked here (tools/bench/attention.lua checks them); KIND: std, tile,
-- tile_dp, tile_persistent, std_persistent, std_dp.
local tl = require "tilua"
local D = tl.device

local o = { rounds = 7 }
for _, a in ipairs(arg) do
  local key, v = a:match "^%-%-([%w_]+)=(.*)$"
  if key then o[key] = math.tointeger(tonumber(v)) or v end
  if a == "--schedules" then o.schedules = true end
end

local B, H = tostring(o.bh or "2x16"):match "^(%d+)x(%d+)$"
B, H = assert(math.tointeger(tonumber(B)), "attention_ab: --bh=BxH"), math.tointeger(tonumber(H))
local ex = assert(loadfile "examples/attention.lua")("--library")
local PROBLEMS = {
  { name = "d128", d = 128 }, { name = "d128 causal", d = 128, causal = true },
  { name = "d64", d = 64 }, { name = "d64 causal", d = 64, causal = true },
}

-- The kernels of problem p: {label, kind, run(x)}.
local function kernels(p, kinds)
  local prob = { b = B, h = H, hkv = H, sq = 4096, skv = 4096, d = p.d, causal = p.causal }
  local list = {}
  for _, kind in ipairs(kinds) do
    local sched = ({ std_persistent = "persistent", std_dp = "data_parallel", tile_persistent = "persistent",
                     tile_dp = "data_parallel" })[kind]
    if kind:match "^std" then
      local a = tl.attention.build { b = B, h = H, sq = 4096, skv = 4096, d = p.d, causal = p.causal, schedule = sched }
      a.kernel:compile()
      list[#list + 1] = { label = "stdlib" .. (sched and ", " .. sched or ""), kind = kind, flops = a.flops,
                          run = function(x) a:run(x) end }
    else
      local k = ex.build { d = p.d, causal = p.causal, schedule = sched }
      k:compile()
      list[#list + 1] = { label = "tile program" .. (sched and ", " .. sched or ""), kind = kind,
                          run = function(x) ex.launch(k, prob, x) end }
    end
  end
  return list
end

local function inputs(p)
  local n = B * H * 4096 * p.d
  return { q = D.random(tl.bf16, n, 1), k = D.random(tl.bf16, n, 2), v = D.random(tl.bf16, n, 3),
           o = D.alloc(tl.bf16, n), lse = D.alloc(tl.f32, B * H * 4096) }
end

if o.launch then -- one kernel, 3 launches (ncu --launch-skip 1 --launch-count 1)
  local name, kind = o.launch:match "^(.-),(.*)$"
  for _, p in ipairs(PROBLEMS) do
    if p.name == name then
      local x, kn = inputs(p), kernels(p, { kind })[1]
      for _ = 1, 3 do kn.run(x) end
      D.synchronize()
      print(("attention_ab: %s %s launched 3 times"):format(name, kind))
      return
    end
  end
  error("attention_ab: no problem " .. tostring(name))
end

local function sample(fn) return D.time(function() for _ = 1, 10 do fn() end end) / 10 end
local function median(t)
  local s = {}
  for i, v in ipairs(t) do s[i] = v end
  table.sort(s)
  local n = #s
  return n % 2 == 1 and s[(n + 1) // 2] or (s[n // 2] + s[n // 2 + 1]) / 2
end

print(("attention_ab on %s (%d SMs): B x H = %d x %d, S = 4096, bf16; %d rounds, each kernel the best of 3 samples of 10 launches a round")
  :format(D.info().name, D.sm_count(), B, H, o.rounds))
print("| problem | kernel | median ms | best ms | median TFLOP/s | median ratio to stdlib | ratios, min-max |")
print("|---|---|---|---|---|---|---|")
for _, p in ipairs(PROBLEMS) do
  local want = not o.only
  for nm in tostring(o.only or ""):gmatch "[^,]+" do want = want or nm == p.name end
  if want then
    local kinds = { "std", "tile" }
    if o.schedules then
      kinds = p.causal and { "std", "tile", "tile_dp", "tile_persistent", "std_persistent" } or { "std", "tile", "tile_dp", "std_dp" }
    end
    local x, ks = inputs(p), kernels(p, kinds)
    for _, kn in ipairs(ks) do kn.run(x); kn.ms = {} end -- (first launches: modules loaded)
    D.synchronize()
    for _ = 1, o.rounds do
      for _, kn in ipairs(ks) do
        local best = math.huge
        for _ = 1, 3 do best = math.min(best, sample(function() kn.run(x) end)) end
        kn.ms[#kn.ms + 1] = best
      end
    end
    local flops = ks[1].flops
    for _, kn in ipairs(ks) do
      local ratios, lo, hi = {}, math.huge, 0
      for r, ms in ipairs(kn.ms) do
        ratios[r] = ks[1].ms[r] / ms
        lo, hi = math.min(lo, ratios[r]), math.max(hi, ratios[r])
      end
      local med = median(kn.ms)
      print(("| %s | %s | %.4f | %.4f | %.1f | %.3f | %.3f-%.3f |"):format(p.name, kn.label, med,
        math.min(table.unpack(kn.ms)), flops / med / 1e9, median(ratios), lo, hi))
    end
    for _, b in pairs(x) do b:free() end
  end
end
