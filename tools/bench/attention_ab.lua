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
--   tilua tools/bench/attention_ab.lua --variants=sum,sum+lazy,c2+bn192+r24 [--no-tile] [--check] [--torch]
--
-- --variants adds stdlib/attention.lua configurations to each problem, named
-- by tokens joined with "+": sum (sum_mma), lazy (rescale = 8), lazyN
-- (rescale = N), tree (max_tree), early (early_rescale), fresh (fresh_s), split (split_tail),
-- nosum, nosplit (sum_mma, split_tail off: nosplit+nosum is head dim 64's default before s13attn-2,
-- nosum head dim 128's before s13attn-3),
-- late (pack_late), paired (kv_order), cN (consumers), bnN, sN (stages),
-- r24 (registers 24/240), dp (data-parallel); KIND std:VARIANT for --launch. A variant
-- PROBLEM/VARIANT is that problem's only (--variants="d64/nosplit+nosum,d64 causal/sum,d128/split").
-- --check checks every stdlib kernel first (--tile-check: the tile programs too) (O and the log-sum-exp against
-- the reference kernel on every element, one CPU row); --torch times torch's
-- cuDNN SDPA on the same problems in a child process first (tools/bench/peers.lua)
-- and adds each kernel's ratio to it.
-- --tile-nosum adds the tile program compiled with tl.options.sums_by_dot = false (its row
-- sums by FADD, as before the sums by the P V GEMM: convert-tileas-to-cutlass's sums.lua);
-- --tile-fence adds the tile program compiled with tl.options.wait_fence = true (a CTA fence
-- before its loop's P V wait, which ptxas then takes after every exp2; slower, s15tattn-2);
-- --tile-forms=F1,F2 adds the tile program in each form F: tokens joined with "+": rows / norows
-- (tl.options.softmax_rows true / false: the loop's softmax a row at a time or not; unset:
-- off), chain / nochain (tl.options.max_chain true / false: a row's max as a chain
-- or a tree; unset: the rule's, on at d128), nofold (the program's old arithmetic: the factor
-- exp2((m_old - m_new) c), no guard), noguard (the factor exp2(m_old c - m_new c) without the
-- -inf guard); fold / guard: the default (stdlib's arithmetic); examples/attention.lua's build
-- options o.fold, o.guard (s16tattn); split / nosplit (o.split: the split-tail schedule, whole
-- programs in whole rounds of the SMs, then the rest a consumer's 64 rows a tile, or not; s17split:
-- the program's default at d64 non-causal with 192-row programs, so there "tile program" is the split
-- and nosplit the form before).
-- --tile-bm=N the tile program with programs of N query rows (N / 64 consumers; its default:
-- 192 at head dim 64, 128 above).
--   tilua tools/bench/attention_ab.lua --small=VARIANT [--d=64] [--causal] [--sms=N]   (for compute-sanitizer: one
--   launch of the variant at 2 x 2 heads (1 key head), 333 x 300, checked on every element)
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
  local key, v = a:match "^%-%-([%w_-]+)=(.*)$"
  if key then o[key:gsub("-", "_")] = math.tointeger(tonumber(v)) or v end -- (--tile-bm: o.tile_bm)
  if a == "--schedules" then o.schedules = true end
  if a == "--no-tile" then o.no_tile = true end
  if a == "--check" then o.check = true end
  if a == "--torch" then o.torch = true end
  if a == "--tile-nosum" then o.tile_nosum = true end
  if a == "--tile-fence" then o.tile_fence = true end
  if a == "--tile-check" then o.tile_check = true end
  if a == "--causal" then o.causal = true end
end

-- a variant's name -> stdlib/attention.lua's options
local function variant(name)
  local x = {}
  for t in name:gmatch "[^+]+" do
    if t == "sum" then x.sum_mma = true
    elseif t == "nosum" then x.sum_mma = false
    elseif t == "nosplit" then x.split_tail = false
    elseif t == "lazy" then x.rescale = 8
    elseif t:match "^lazy[%d.]+$" then x.rescale = tonumber(t:sub(5))
    elseif t == "tree" then x.max_tree = true
    elseif t == "early" then x.early_rescale = true
    elseif t == "fresh" then x.fresh_s = true
    elseif t == "late" then x.pack_late = true
    elseif t == "split" then x.split_tail = true
    elseif t == "paired" then x.kv_order = "paired"
    elseif t == "r24" then x.regs = { 24, 240 }
    elseif t == "dp" then x.schedule = "data_parallel"
    elseif t:match "^c%d$" then x.consumers = tonumber(t:sub(2))
    elseif t:match "^bn%d+$" then x.bn = tonumber(t:sub(3))
    elseif t:match "^s%d$" then x.stages = tonumber(t:sub(2))
    else error("attention_ab: unknown variant token " .. t) end
  end
  return x
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
      local cfg = { b = B, h = H, sq = 4096, skv = 4096, d = p.d, causal = p.causal, schedule = sched }
      local vname = kind:match "^std:(.+)$"
      if vname then for key, v in pairs(variant(vname)) do cfg[key] = v end end
      local ok, a = pcall(tl.attention.build, cfg)
      if not ok then
        print(("attention_ab: %s %s not built: %s"):format(p.name, kind, tostring(a)))
      else
        a.kernel:compile()
        list[#list + 1] = { label = vname and ("stdlib " .. vname) or ("stdlib" .. (sched and ", " .. sched or "")), kind = kind,
                            flops = a.flops, a = a, run = function(x) a:run(x) end }
      end
    else
      local bm = kind == "tile_bm" and o.tile_bm or nil
      local form, bo = kind:match "^tile:(.+)$", { d = p.d, causal = p.causal, schedule = sched, bm = bm }
      for t in (form or ""):gmatch "[^+]+" do
        if t == "rows" then tl.options.softmax_rows = true
        elseif t == "norows" then tl.options.softmax_rows = false
        elseif t == "chain" then tl.options.max_chain = true
        elseif t == "nochain" then tl.options.max_chain = false
        elseif t == "fold" then bo.fold = true
        elseif t == "nofold" then bo.fold = false
        elseif t == "guard" then bo.guard = true
        elseif t == "noguard" then bo.guard = false
        elseif t == "split" then bo.split = true
        elseif t == "nosplit" then bo.split = false
        else error("attention_ab: unknown tile form token " .. t) end
      end
      local k = ex.build(bo)
      local pr = prob
      if bm then
        pr = {}
        for key, v in pairs(prob) do pr[key] = v end
        pr.bm = bm
      end
      if kind == "tile_nosum" then tl.options.sums_by_dot = false end
      if kind == "tile_fence" then tl.options.wait_fence = true end
      k:compile()
      tl.options.sums_by_dot, tl.options.wait_fence, tl.options.softmax_rows, tl.options.max_chain = nil, nil, nil, nil
      list[#list + 1] = { label = "tile program" .. (sched and ", " .. sched or "") .. (kind == "tile_nosum" and ", sums by FADD" or "")
                            .. (form and ", " .. form or "")
                            .. (kind == "tile_fence" and ", wait fence" or "")
                            .. (bm and (", bm %d"):format(bm) or ""), kind = kind,
                          run = function(x) ex.launch(k, pr, x) end }
    end
  end
  return list
end

if o.small then -- one small launch of a variant, checked (compute-sanitizer)
  local cfg = { b = 2, h = 2, hkv = 1, sq = 333, skv = 300, d = o.d or 64, causal = o.causal, sms = o.sms }
  if o.small ~= "std" then for key, v in pairs(variant(o.small)) do cfg[key] = v end end
  local a = tl.attention.build(cfg)
  local n, nkv = 2 * 2 * 333 * cfg.d, 2 * 300 * cfg.d
  local x = { q = D.random(tl.bf16, n, 1), k = D.random(tl.bf16, nkv, 2), v = D.random(tl.bf16, nkv, 3),
              o = D.alloc(tl.bf16, n), lse = D.alloc(tl.f32, 2 * 2 * 333) }
  a:run(x)
  D.synchronize()
  local ok, report = a:check { q = x.q, k = x.k, v = x.v, o = x.o, lse = x.lse, samples = 1, vmax = 1.0 }
  print(("attention_ab --small=%s d %d%s, grid %d: %s %s"):format(o.small, cfg.d, cfg.causal and " causal" or "", a.grid,
    ok and "OK" or "WRONG", report))
  for _, b in pairs(x) do b:free() end
  os.exit(ok and 0 or 1)
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

local cudnn = {}
if o.torch then -- torch's cuDNN SDPA on the same problems, a child process, first
  local probs, names = {}, {}
  for _, p in ipairs(PROBLEMS) do
    local want = not o.only
    for nm in tostring(o.only or ""):gmatch "[^,]+" do want = want or nm == p.name end
    if want then
      probs[#probs + 1] = { b = B, h = H, hkv = H, s = 4096, d = p.d, causal = p.causal }
      names[#names + 1] = p.name
    end
  end
  local res, why = dofile("tools/bench/peers.lua").sdpa(probs)
  if not res then print("torch SDPA: " .. tostring(why)) end
  for i, nm in ipairs(names) do
    cudnn[nm] = res and res[i] and res[i].cudnn
    print(("torch %s: cuDNN %s ms, flash %s ms"):format(nm, tostring(cudnn[nm]), tostring(res and res[i] and res[i].flash)))
  end
end

print(("attention_ab on %s (%d SMs): B x H = %d x %d, S = 4096, bf16; %d rounds, each kernel the best of 3 samples of 10 launches a round")
  :format(D.info().name, D.sm_count(), B, H, o.rounds))
print("| problem | kernel | median ms | best ms | median TFLOP/s | median ratio to stdlib | ratios, min-max | median / cuDNN |")
print("|---|---|---|---|---|---|---|---|")
-- the problems in --only's order (a run cut short by a time limit has the first ones)
local order = PROBLEMS
if o.only then
  order = {}
  for nm in tostring(o.only):gmatch "[^,]+" do
    for _, p in ipairs(PROBLEMS) do if p.name == nm then order[#order + 1] = p end end
  end
end
for _, p in ipairs(order) do
  do
    local kinds = { "std", "tile" }
    if o.schedules then
      kinds = p.causal and { "std", "tile", "tile_dp", "tile_persistent", "std_persistent" } or { "std", "tile", "tile_dp", "std_dp" }
    end
    if o.tile_nosum then kinds[#kinds + 1] = "tile_nosum" end
    if o.tile_fence then kinds[#kinds + 1] = "tile_fence" end
    if o.tile_bm then kinds[#kinds + 1] = "tile_bm" end
    for f in tostring(o.tile_forms or ""):gmatch "[^,]+" do kinds[#kinds + 1] = "tile:" .. f end
    if o.no_tile then
      local k2 = {}
      for _, kd in ipairs(kinds) do if not kd:match "^tile" then k2[#k2 + 1] = kd end end
      kinds = k2
    end
    for vname in tostring(o.variants or ""):gmatch "[^,]+" do
      local pname, only = vname:match "^(.-)/(.+)$" -- (PROBLEM/VARIANT: that problem's only)
      if not pname then kinds[#kinds + 1] = "std:" .. vname
      elseif pname == p.name then kinds[#kinds + 1] = "std:" .. only end
    end
    local x, ks = inputs(p), kernels(p, kinds)
    if o.check or o.tile_check then -- every stdlib kernel against the reference kernel (the default's), every element
      local R, RL = ks[1].a:reference(x)
      for _, kn in ipairs(ks) do
        if kn.a or o.tile_check then -- (--tile-check: the tile programs too, against the default's reference)
          x.o:fill(0)
          kn.run(x)
          D.synchronize()
          local ok, report = (kn.a or ks[1].a):check { q = x.q, k = x.k, v = x.v, o = x.o, lse = x.lse, reference = { R, RL }, samples = 1, vmax = 1.0 }
          print(("check %s %s: %s %s"):format(p.name, kn.label, ok and "OK" or "WRONG", report))
        end
      end
      R:free() RL:free()
    end
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
      local cu = cudnn[p.name]
      print(("| %s | %s | %.4f | %.4f | %.1f | %.3f | %.3f-%.3f | %s |"):format(p.name, kn.label, med,
        math.min(table.unpack(kn.ms)), flops / med / 1e9, median(ratios), lo, hi, cu and ("%.3f"):format(cu / med) or "-"))
    end
    for _, b in pairs(x) do b:free() end
  end
end
