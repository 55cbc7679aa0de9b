-- tools/bench/attention.lua: the attention forward of stdlib/attention.lua
-- (tl.attention, the FlashAttention-3 design) against torch's SDPA backends,
-- cuDNN and flash (FlashAttention-2), measured in one run on one device.
--
-- Every problem (bf16, batch x heads 32 by default; head dims 64, 128, 256;
-- causal and not; grouped-query heads; a sequence length that is no multiple of
-- the tile) is first checked: each configuration's O and log-sum-exp against
-- stdlib/attention.lua's reference kernel on every element (and CPU rows),
-- then timed: the best of 5 samples of CUDA events around 10 back-to-back
-- launches. torch runs in a child python3 process on the same problems
-- (fresh random tensors of the same shapes; grouped-query heads through
-- SDPA's enable_gqa) with the same timing; its forward and backward are both
-- timed (the backward's for the ratio of a backward kernel). FLOPs are
-- 4 B H SQ SKV D, halved when causal. The table shows TFLOP/s and the
-- ratios ours / cuDNN and ours / flash, and the tile program's
-- (examples/attention.lua, head dims 64 and 128) on the same inputs, checked
-- the same way; --sweep times several tiles a problem
-- and reports each (the best goes to the table; the tile program's ratio is
-- to the first, the default configuration). Without python3 and torch the
-- peers' columns say so. Also the compile time of the tile program
-- examples/attention.lua from script to PTX (the median of 20), which needs
-- no GPU.
--
--   tilua tools/bench/attention.lua [--sweep] [--only=d128,d128 causal] [--s=4096] [--bh=32] [--no-torch] [--no-tile]
--
-- --only names the problems to run (comma-separated, e.g. "d64,d64 causal");
-- --no-tile leaves the tile program out.
local tl = require "tilua"

local o = { s = 4096, bh = 32 }
for _, a in ipairs(arg or {}) do
  local key, v = a:match "^%-%-([%w_]+)=(.+)$"
  if key then o[key] = math.tointeger(tonumber(v)) or v end
  if a == "--sweep" then o.sweep = true end
  if a == "--no-torch" then o.no_torch = true end
  if a == "--no-tile" then o.no_tile = true end
end

-- {=== compile time, script to PTX (the build of the IR included), no cache
do
  local ok, ex = pcall(function() return assert(loadfile "examples/attention.lua")("--library") end)
  if ok and ex.build then
    tl.options.compile_cache = false
    local function median_of_20(check) -- (check: tl.options.check_protocol)
      local saved, times = tl.options.check_protocol, {}
      tl.options.check_protocol = check
      for i = 1, 20 do
        local t0 = os.clock()
        ex.build({ d = 128 }):compile()
        times[i] = (os.clock() - t0) * 1e3
      end
      tl.options.check_protocol = saved
      table.sort(times)
      return times
    end
    local times, off = median_of_20(nil), median_of_20(false)
    tl.options.compile_cache = nil
    print(("attention (tile program, d 128): script to PTX %.2f ms (median of 20; min %.2f, max %.2f; target 50 ms)")
      :format(times[10], times[1], times[20]))
    print(("  without the protocol check every compile runs: %.2f ms (the check: %.2f ms, x%.2f)")
      :format(off[10], times[10] - off[10], times[10] / off[10]))
  end
  local times = {}
  for i = 1, 5 do
    local t0 = os.clock()
    tl.attention.build({ b = 1, h = 1, sq = 4096, d = 128 }).kernel:compile()
    times[i] = (os.clock() - t0) * 1e3
  end
  table.sort(times)
  print(("stdlib/attention.lua (d 128): script to PTX %.2f ms (median of 5)"):format(times[3]))
end
-- }===

if not tl.device.available() then
  print("SKIP: no GPU (" .. tl.device.error() .. "): the speed ratios need one")
  return
end

local D = tl.device
local seed = tonumber(os.getenv "TILUA_SEED") or os.time()
local S, BH = o.s, o.bh

-- {=== the problems and the configurations tried on each
local R24 = { 24, 240 } -- FlashAttention-3's register split of two consumers
local problems = {
  { name = "d128", b = 2, h = BH // 2, d = 128,
    sweep = { { bn = 128 }, { bn = 128, kv_order = "paired" }, { bn = 144 }, { bn = 160 }, { bn = 112 }, { bn = 176 },
              { bn = 128, regs = R24 }, { bn = 144, regs = R24 }, { bn = 128, schedule = "data_parallel" },
              { bn = 128, pingpong = false }, { bn = 128, exp2_poly = 1 }, { bn = 128, exp2_poly = 2 } } },
  { name = "d128 causal", b = 2, h = BH // 2, d = 128, causal = true,
    sweep = { { bn = 128 }, { bn = 128, kv_order = "paired" }, { bn = 144 }, { bn = 128, regs = R24 },
              { bn = 128, schedule = "persistent" }, { bn = 128, exp2_poly = 2 } } },
  { name = "d64", b = 2, h = BH // 2, d = 64,
    sweep = { { consumers = 3, bn = 128 }, { consumers = 3, bn = 128, kv_order = "paired" }, { consumers = 3, bn = 112 },
              { consumers = 3, bn = 96 }, { consumers = 3, bn = 128, stages = 3 }, { consumers = 3, bn = 128, stages = 4 },
              { consumers = 2, bn = 192, regs = R24 }, { consumers = 2, bn = 208, regs = R24 },
              { consumers = 2, bn = 224, regs = R24 }, { consumers = 3, bn = 128, pingpong = false },
              { consumers = 3, bn = 128, exp2_poly = 1 }, { consumers = 3, bn = 128, exp2_poly = 2 },
              { consumers = 3, bn = 128, exp2_poly = 3 }, { consumers = 3, bn = 128, exp2_poly = 4 },
              { consumers = 2, bn = 192, regs = R24, exp2_poly = 2 }, { consumers = 2, bn = 192, regs = R24, exp2_poly = 3 },
              { consumers = 2, bn = 128, exp2_poly = 2 }, { consumers = 2, bn = 128 } } },
  { name = "d64 causal", b = 2, h = BH // 2, d = 64, causal = true,
    sweep = { { consumers = 3, bn = 128 }, { consumers = 3, bn = 128, kv_order = "paired" }, { consumers = 3, bn = 112 },
              { consumers = 3, bn = 128, stages = 3 }, { consumers = 2, bn = 192, regs = R24 },
              { consumers = 3, bn = 128, exp2_poly = 2 }, { consumers = 3, bn = 128, exp2_poly = 3 } } },
  { name = "d256", b = 2, h = BH // 2, d = 256,
    sweep = { { bn = 64 }, { bn = 64, regs = R24 }, { bn = 80 }, { bn = 80, regs = R24 }, { bn = 64, pingpong = false } } },
  { name = "d256 causal", b = 2, h = BH // 2, d = 256, causal = true,
    sweep = { { bn = 64 }, { bn = 64, regs = R24 }, { bn = 80, regs = R24 }, { bn = 64, schedule = "data_parallel" } } },
  { name = "d128 gqa 4:1", b = 2, h = BH // 2, hkv = BH // 8, d = 128, sweep = { { bn = 128 } } },
  { name = "d128 ragged", b = 2, h = BH // 2, d = 128, s = S - 96 - 7, sweep = { { bn = 128 } } },
}
local list = {}
for _, p in ipairs(problems) do
  p.hkv, p.s = p.hkv or p.h, p.s or S
  local want = not o.only
  for name in tostring(o.only or ""):gmatch "[^,]+" do want = want or p.name == name end
  if want then list[#list + 1] = p end
end
-- }===

-- {=== torch's SDPA in a child process (tools/bench/peers.lua)
local P = dofile "tools/bench/peers.lua"
local function run_torch(probs)
  if o.no_torch then return nil, "not run (--no-torch)" end
  return P.sdpa(probs)
end
-- }===

print(("attention bench on %s (%d SMs), bf16, seed %d"):format(D.info().name, D.sm_count(), seed))

-- the peers first (a bench stopped by a time limit still has them)
local peers, why = run_torch(list)
if not peers then print("torch SDPA: " .. tostring(why)) end
for pi, p in ipairs(list) do
  local t = peers and peers[pi]
  if t then
    local function ms(x) return x and ("%8.3f ms"):format(x) or "       -   " end
    print(("torch %-14s cuDNN %s (bwd %s), flash %s (bwd %s)"):format(p.name, ms(t.cudnn), ms(t.cudnn_bwd),
      ms(t.flash), ms(t.flash_bwd)))
  end
end

-- {=== ours: check each configuration, then time it
local function sample(fn) return D.time(function() for _ = 1, 10 do fn() end end) / 10 end
local function best_of(fn)
  fn()
  D.synchronize()
  local best = math.huge
  for _ = 1, 5 do best = math.min(best, sample(fn)) end
  return best
end

local ours, tile, tile_k, first = {}, {}, {}, {} -- (first: the problem's first configuration, the default)
local tile_ex = not o.no_tile and (function()
  local ok, ex = pcall(function() return assert(loadfile "examples/attention.lua")("--library") end)
  return ok and ex.launch and ex or nil
end)()
for pi, p in ipairs(list) do
  local n, nkv = p.b * p.h * p.s * p.d, p.b * p.hkv * p.s * p.d
  local q <close> = D.random(tl.bf16, n, seed + 10 * pi)
  local k <close> = D.random(tl.bf16, nkv, seed + 10 * pi + 1)
  local v <close> = D.random(tl.bf16, nkv, seed + 10 * pi + 2)
  local out <close> = D.alloc(tl.bf16, n)
  local lse <close> = D.alloc(tl.f32, p.b * p.h * p.s)
  local args = { q = q, k = k, v = v, o = out, lse = lse }
  local cfgs = o.sweep and p.sweep or { {} }
  local R, RL
  for _, extra in ipairs(cfgs) do
    local cfg = { b = p.b, h = p.h, hkv = p.hkv, sq = p.s, skv = p.s, d = p.d, causal = p.causal }
    for key, x in pairs(extra) do cfg[key] = x end
    local built, a = pcall(tl.attention.build, cfg)
    local label = ("bn %d, %d consumers, %d stages%s%s%s%s%s%s"):format(built and a.cfg.bn or cfg.bn or 0, built and a.cfg.consumers or 0,
      built and a.cfg.stages or 0, built and a.cfg.o_in_q and ", O in Q" or "",
      built and a.cfg.kv_order == "paired" and ", K V paired" or "",
      built and a.cfg.exp2_poly > 0 and (", exp2 %d/8 on FMA"):format(a.cfg.exp2_poly) or "",
      built and a.cfg.schedule ~= "persistent" and ", " .. a.cfg.schedule or "", built and not a.cfg.pingpong and ", no turns" or "",
      built and a.cfg.consumers > 1 and (", regs %d/%d"):format(a.cfg.regs[1], a.cfg.regs[2]) or "")
    if not built then
      print(("%-14s %-44s not built: %s"):format(p.name, label, tostring(a)))
    else
      a.kernel:compile()
      out:fill(0)
      a:run(args)
      D.synchronize()
      if not R then R, RL = a:reference(args) end
      local ok, report = a:check { q = q, k = k, v = v, o = out, lse = lse, reference = { R, RL }, seed = seed, samples = 1, vmax = 1.0 }
      if not ok then
        print(("%-14s %-44s WRONG: %s"):format(p.name, label, report))
      else
        local ms = best_of(function() a:run(args) end)
        local tf = a.flops / ms / 1e9
        print(("%-14s %-44s %8.3f ms %7.1f TFLOP/s  (%s)"):format(p.name, label, ms, tf, report))
        if extra == cfgs[1] then first[pi] = tf end
        if not ours[pi] or tf > ours[pi].tflops then ours[pi] = { tflops = tf, ms = ms, label = label, flops = a.flops } end
      end
    end
  end
  -- the tile program (examples/attention.lua: its own tiles and lowering)
  -- on the same inputs, checked against the same reference
  if tile_ex and R then
    local key = p.d .. tostring(p.causal)
    tile_k[key] = tile_k[key] or tile_ex.build { d = p.d, causal = p.causal }
    local tk = tile_k[key]
    local prob = { b = p.b, h = p.h, hkv = p.hkv, sq = p.s, skv = p.s, d = p.d, causal = p.causal }
    local ref = tl.attention.build { b = p.b, h = p.h, hkv = p.hkv, sq = p.s, skv = p.s, d = p.d, causal = p.causal }
    local ok_run, err = pcall(function()
      out:fill(0)
      tile_ex.launch(tk, prob, args)
      D.synchronize()
    end)
    local ok, report = false, err
    if ok_run then
      ok, report = ref:check { q = q, k = k, v = v, o = out, lse = lse, reference = { R, RL }, seed = seed, samples = 1, vmax = 1.0 }
    end
    if not ok then
      print(("%-14s %-44s WRONG: %s"):format(p.name, "tile program", report))
    else
      local ms = best_of(function() tile_ex.launch(tk, prob, args) end)
      local tf = ref.flops / ms / 1e9
      print(("%-14s %-44s %8.3f ms %7.1f TFLOP/s  (%s)"):format(p.name, "tile program", ms, tf, report))
      tile[pi] = { tflops = tf, ms = ms }
    end
  end
  if R then R:free() RL:free() end
end
-- }===

print()
print(("| problem (B x H x S x D) | ours TFLOP/s | cuDNN | flash | ours / cuDNN | ours / flash | tile program | tile / cuDNN | tile / ours' first | cuDNN bwd TFLOP/s | config |"))
print("|---|---|---|---|---|---|---|---|---|---|---|")
for pi, p in ipairs(list) do
  local r, t = ours[pi], peers and peers[pi]
  local flops = 4.0 * p.b * p.h * p.s * p.s * p.d * (p.causal and 0.5 or 1)
  local function tf(ms) return ms and flops / ms / 1e9 or nil end
  local function fmt(x) return x and ("%.1f"):format(x) or "-" end
  local function ratio(a, b) return a and b and ("%.3f"):format(a / b) or "-" end
  local cu, fl = t and tf(t.cudnn), t and tf(t.flash)
  local tp = tile[pi] and tile[pi].tflops
  print(("| %s (%d x %d%s x %d x %d) | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |"):format(p.name, p.b, p.h,
    p.hkv ~= p.h and ("/" .. p.hkv) or "", p.s, p.d, fmt(r and r.tflops), fmt(cu), fmt(fl),
    ratio(r and r.tflops, cu), ratio(r and r.tflops, fl), fmt(tp), ratio(tp, cu), ratio(tp, first[pi]),
    fmt(t and t.cudnn_bwd and tf(t.cudnn_bwd / 2.5)),
    r and r.label or "wrong or not built"))
end
print("(cuDNN bwd TFLOP/s: 2.5 times the forward's FLOPs over the backward's time, the usual count)")
