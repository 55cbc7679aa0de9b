-- tools/bench/attention_bwd.lua: the attention backward as tile programs
-- (examples/attention_bwd.lua: Delta, dQ, dK/dV) against torch SDPA's cuDNN
-- backward (and flash's, FlashAttention-2), measured in one run on one device.
--
-- Every problem (bf16, batch x heads 32 by default, sequence 4096; head dims
-- 64 and 128, causal and not) is first checked: the forward of
-- stdlib/attention.lua (tl.attention) gives O and the log-sum-exp on fresh
-- random inputs, the backward's dQ rows and dK, dV rows of the first and the
-- last head are compared with the CPU (doubles, from the GPU's Q, K, V, dO, O
-- and LSE; within 2^-7 of the sum of the terms' magnitudes plus 2^-8 |ref|);
-- then the three launches are timed together: the best of 5 samples of CUDA
-- events around 10 back-to-back backwards. torch runs in a child python3
-- process on the same shapes (fresh random tensors; tools/bench/peers.lua's
-- P.sdpa) with the same timing of torch.autograd.grad. FLOPs are 2.5 times
-- the forward's 4 B H S^2 D (halved when causal), the usual count. The table shows TFLOP/s and the
-- ratios ours / cuDNN and ours / flash. At head dim 64 the fused backward
-- (examples/attention_bwd.lua's fused: 5 dots, dQ reduce-added into f32) runs
-- beside the three programs, each form's best in its column; the default
-- (examples/attention_bwd.lua's defaults: the three programs overlapping) in
-- the last two.
--
--   tilua tools/bench/attention_bwd.lua [--s=4096] [--bh=32] [--only=d128,d64 causal] [--no-torch]
--                                       [--sweep]   (several tiles a problem; the best goes to the table)
--                                       [--out-of-order] (also the dK/dV loop out of order, S^T and dP^T
--                                                         issued an iteration ahead, with its narrower
--                                                         tiles; the default: in order, tileas.pipeline's
--                                                         in_order, FlashAttention-3's wider dK/dV tiles)
--                                       [--overlap] (the default overlaps dQ and dK/dV: dK/dV launched
--                                                    last as a programmatic dependent launch, and dQ
--                                                    after Delta ("+pdl"): examples/attention_bwd.lua's
--                                                    o.overlap, o.delta_pdl; --overlap also times the
--                                                    three programs in plain order and the other order,
--                                                    dQ last; --overlap=plain or =dq: that one alone;
--                                                    then the default again, for the run's noise)
--                                       [--no-fused] (not the fused form at head dim 64)
--                                       [--delta_rows=16,32,...] (the Delta program alone at these rows a
--                                                    program, checked on 3 rows, timed by graphs)
--
-- Each program is also timed alone: CUDA events around 10 launches (as the
-- whole), and a CUDA graph of 10 launches replayed (the device's time, without
-- the host's: a short program whose launch costs the host more than it runs
-- reads as its launch in the events' figure), and the host's time a launch
-- (microseconds, launches enqueued and not waited for).
local tl = require "tilua"

local o = { s = 4096, bh = 32 }
for _, a in ipairs(arg or {}) do
  local key, v = a:match "^%-%-([%w_]+)=(.+)$"
  if key then o[key] = math.tointeger(tonumber(v)) or v end
  if a == "--no-torch" then o.no_torch = true end
  if a == "--sweep" then o.sweep = true end
  if a == "--out-of-order" then o.out_of_order = true end
  if a == "--overlap" then o.overlap = true end
  if a == "--no-fused" then o.no_fused = true end
end

local ex = assert(loadfile "examples/attention_bwd.lua")("--library")
-- the programs compile without a GPU
do
  local t0 = os.clock()
  ex.kernels { d = 128 }
  print(("attention_bwd (d 128): the three programs, script to PTX %.1f ms"):format((os.clock() - t0) * 1e3))
end
if not tl.device.available() then
  print("SKIP: no GPU (" .. tl.device.error() .. "): the speed ratios need one")
  return
end

local D = tl.device
local seed = tonumber(os.getenv "TILUA_SEED") or os.time()
local S, BH = o.s, o.bh
local problems = {
  { name = "d128", d = 128, sweep = { {}, { dq_bm = 64 }, { stages = 2 }, { kv_bm = 32 } },
    out_of_order = { { in_order = false } } },
  { name = "d128 causal", d = 128, causal = true, sweep = { {}, { stages = 2 } }, out_of_order = { { in_order = false } } },
  { name = "d64", d = 64, sweep = { {}, { dq_bn = 64 }, { kv_bm = 64 } }, fused = { { fused = true }, { fused = true, stages = 2 }, { fused = true, stages = 4 } },
    out_of_order = { { in_order = false }, { fused = true, in_order = false } } },
  { name = "d64 causal", d = 64, causal = true, sweep = { {}, { kv_bm = 64 } }, fused = { { fused = true }, { fused = true, stages = 4 } },
    out_of_order = { { in_order = false }, { fused = true, in_order = false } } },
}
local list = {}
for _, p in ipairs(problems) do
  p.b, p.h, p.hkv, p.s = 2, BH // 2, BH // 2, S
  local want = not o.only
  for name in tostring(o.only or ""):gmatch "[^,]+" do want = want or p.name == name end
  if want then list[#list + 1] = p end
end

-- {=== torch's SDPA (forward and backward) in a child process (tools/bench/peers.lua)
local P = dofile "tools/bench/peers.lua"
local function run_torch(probs)
  if o.no_torch then return nil, "not run (--no-torch)" end
  return P.sdpa(probs)
end
-- }===

-- {=== the check: rows of dQ, dK and dV of one head against the CPU
-- Head (b, h) of problem p, buffers x (the inputs read once into cache).
-- -> elements off, worst error / tolerance
local function check_head(p, x, got, b, h, cache)
  local S_, d, scale = p.s, p.d, 1 / math.sqrt(p.d)
  local base = (b * p.h + h) * S_ * d
  local function head(buf) return buf:to_table(base + 1, base + S_ * d) end
  local function dot(A, i, B, j)
    local s = 0
    for e = 1, d do s = s + A[i * d + e] * B[j * d + e] end
    return s
  end
  local key = b .. "/" .. h
  if not cache[key] then
    local c = { Q = head(x.q), K = head(x.k), V = head(x.v), dO = head(x.dout), O = head(x.o), delta = {},
                LSE = x.lse:to_table((b * p.h + h) * S_ + 1, (b * p.h + h + 1) * S_) }
    for i = 0, S_ - 1 do c.delta[i] = dot(c.dO, i, c.O, i) end
    cache[key] = c
  end
  local c = cache[key]
  local Q, K, V, dO, LSE, delta = c.Q, c.K, c.V, c.dO, c.LSE, c.delta
  local function pd(i, j) -- P_ij, dS_ij (scaled), |dS| bound
    if p.causal and j > i then return 0, 0, 0 end
    local pij = math.exp(dot(Q, i, K, j) * scale - LSE[i + 1])
    local dp = dot(dO, i, V, j)
    return pij, pij * (dp - delta[i]) * scale, pij * (math.abs(dp) + math.abs(delta[i])) * scale
  end
  local bad, ratio = 0, 0
  local function cmp(gbuf, row, ref, mag)
    local vals = gbuf:to_table(base + row * d + 1, base + row * d + d)
    for e = 1, d do
      local err, tol = math.abs(vals[e] - ref[e]), 2 ^ -7 * mag[e] + 2 ^ -8 * math.abs(ref[e]) + 1e-30
      ratio = math.max(ratio, err / tol)
      if err > tol or err ~= err then bad = bad + 1 end
    end
  end
  for _, r in ipairs { 0, S_ // 2 + 3, S_ - 1 } do
    local dq, mq, dk, mk, dv, mv = {}, {}, {}, {}, {}, {}
    for e = 1, d do dq[e], mq[e], dk[e], mk[e], dv[e], mv[e] = 0, 0, 0, 0, 0, 0 end
    for j = 0, S_ - 1 do -- dQ of query row r
      local _, ds, m = pd(r, j)
      if m > 0 then
        for e = 1, d do dq[e], mq[e] = dq[e] + ds * K[j * d + e], mq[e] + m * math.abs(K[j * d + e]) end
      end
    end
    for i = 0, S_ - 1 do -- dK, dV of key row r
      local pij, ds, m = pd(i, r)
      if pij > 0 then
        for e = 1, d do
          dk[e], mk[e] = dk[e] + ds * Q[i * d + e], mk[e] + m * math.abs(Q[i * d + e])
          dv[e], mv[e] = dv[e] + pij * dO[i * d + e], mv[e] + pij * math.abs(dO[i * d + e])
        end
      end
    end
    cmp(got.dq, r, dq, mq)
    cmp(got.dk, r, dk, mk)
    cmp(got.dv, r, dv, mv)
  end
  return bad, ratio
end
-- }===

print(("attention backward bench on %s (%d SMs), bf16, seed %d"):format(D.info().name, D.sm_count(), seed))
local peers, why = run_torch(list)
if not peers then print("torch SDPA: " .. tostring(why)) end
for pi, p in ipairs(peers and list or {}) do -- (printed now too: a run cut short keeps them)
  local t = peers[pi]
  local flops = 2.5 * 4.0 * p.b * p.h * p.s * p.s * p.d * (p.causal and 0.5 or 1)
  if t then
    print(("%-12s torch: cuDNN bwd %s ms (%s TFLOP/s), flash bwd %s ms"):format(p.name, tostring(t.cudnn_bwd),
      t.cudnn_bwd and ("%.1f"):format(flops / t.cudnn_bwd / 1e9) or "-", tostring(t.flash_bwd)))
  end
end

local function best_of(fn) return P.time { { "", fn } }[1] end

-- The device's ms a call of fn (its launches): the best of 5 replays of a CUDA
-- graph of 10 calls (nil and why when the launches cannot be captured).
local function graph_time(fn)
  local ok, g = pcall(tl.graph, function() for _ = 1, 10 do fn() end end)
  if not ok then return nil, g end
  g:launch()
  D.synchronize()
  local best = math.huge
  for _ = 1, 5 do best = math.min(best, D.time(function() g:launch() end) / 10) end
  g:free()
  return best
end

-- The host's microseconds a call of fn (launches enqueued, not waited for).
local function host_us(fn)
  D.synchronize()
  local t0 = tl.core.now()
  for _ = 1, 20 do fn() end
  local t = (tl.core.now() - t0) / 20 * 1e6
  D.synchronize()
  return t
end

local ours = {}
for pi, p in ipairs(list) do
  local n = p.b * p.h * p.s * p.d
  local x = { q = D.random(tl.bf16, n, seed + 10 * pi), k = D.random(tl.bf16, n, seed + 10 * pi + 1),
              v = D.random(tl.bf16, n, seed + 10 * pi + 2), dout = D.random(tl.bf16, n, seed + 10 * pi + 3),
              o = D.alloc(tl.bf16, n), lse = D.alloc(tl.f32, p.b * p.h * p.s),
              delta = D.alloc(tl.f32, ex.row_floats { b = p.b, h = p.h, sq = p.s }),
              lse2 = D.alloc(tl.f32, ex.row_floats { b = p.b, h = p.h, sq = p.s }),
              dq = D.alloc(tl.bf16, n), dk = D.alloc(tl.bf16, n), dv = D.alloc(tl.bf16, n),
              dqacc = p.fused and D.alloc(tl.f32, n) or nil }
  local fwd = tl.attention.build { b = p.b, h = p.h, sq = p.s, skv = p.s, d = p.d, causal = p.causal }
  fwd:run { q = x.q, k = x.k, v = x.v, o = x.o, lse = x.lse }
  local flops = 2.5 * 4.0 * p.b * p.h * p.s * p.s * p.d * (p.causal and 0.5 or 1)
  local cache = {}
  -- --delta_rows=R1,R2,...: the Delta program alone at R rows a program (non-causal problems; its rows
  -- 0, S/2 + 3 and S - 1 of the first head checked against the CPU first), the device's time (graphs)
  if o.delta_rows and not p.causal then
    local O, dO = x.o:to_table(1, p.s * p.d), x.dout:to_table(1, p.s * p.d)
    for r in tostring(o.delta_rows):gmatch "%d+" do
      local prob = { b = p.b, h = p.h, hkv = p.hkv, sq = p.s, skv = p.s, d = p.d, rows_bm = tonumber(r) }
      x.delta:fill(0)
      ex.launch(prob, x, 1)
      D.synchronize()
      local got, bad = x.delta:to_table(1, p.s), 0
      for _, i in ipairs { 0, p.s // 2 + 3, p.s - 1 } do
        local ref, mag = 0, 0
        for e = 1, p.d do
          local t = O[i * p.d + e] * dO[i * p.d + e]
          ref, mag = ref + t, mag + math.abs(t)
        end
        if math.abs(got[i + 1] - ref) > 1e-5 * mag + 1e-6 then bad = bad + 1 end
      end
      local ms = graph_time(function() ex.launch(prob, x, 1) end)
      local bytes = 2 * p.b * p.h * p.s * p.d * 2
      print(("%-12s Delta alone, %3d rows a program: %s ms (graphs), %.0f GB/s of O and dO%s"):format(p.name, tonumber(r),
        ms and ("%.4f"):format(ms) or "-", ms and bytes / ms / 1e6 or 0, bad > 0 and ("; WRONG: " .. bad .. " rows off") or ""))
    end
  end
  local variants = {}
  for _, v in ipairs(o.sweep and p.sweep or { {} }) do variants[#variants + 1] = v end
  for i, v in ipairs(p.fused or {}) do -- (the fused form beside the three programs; its first without --sweep)
    if (i == 1 and not o.no_fused) or o.sweep then variants[#variants + 1] = v end
  end
  for _, v in ipairs(o.out_of_order and p.out_of_order or {}) do variants[#variants + 1] = v end
  if o.overlap then
    for _, v in ipairs { { overlap = false, delta_pdl = false, name = "plain" }, { overlap = "dq", name = "dq" } } do
      if o.overlap == true or o.overlap == v.name then variants[#variants + 1] = v end
    end
    variants[#variants + 1] = { again = true } -- (the default once more: the run's noise)
  end
  for _, extra in ipairs(variants) do
    local prob = { b = p.b, h = p.h, hkv = p.hkv, sq = p.s, skv = p.s, d = p.d, causal = p.causal, fused = extra.fused,
                   dq_bm = extra.dq_bm, dq_bn = extra.dq_bn, kv_bm = extra.kv_bm, kv_bn = extra.kv_bn, stages = extra.stages,
                   in_order = extra.in_order, overlap = extra.overlap, delta_pdl = extra.delta_pdl }
    local ov, dpdl = ex.overlap_of(prob), ex.delta_pdl_of(prob)
    local label = extra.fused and ("fused, dkdv+dQ %dx%d%s"):format(ex.tiles(prob, "dkdv"), select(2, ex.tiles(prob, "dkdv")),
                                                                extra.stages and (", " .. extra.stages .. " stages") or "")
      or ("dq %dx%d, dkdv %dx%d%s"):format(ex.tiles(prob, "dq"), select(2, ex.tiles(prob, "dq")),
      ex.tiles(prob, "dkdv"), select(2, ex.tiles(prob, "dkdv")), extra.stages and (", " .. extra.stages .. " stages") or "")
    label = label .. (extra.in_order == false and ", out of order" or ", in order")
      .. (ov and (", overlap " .. ov) or (extra.fused and "" or ", plain")) .. (dpdl and "+pdl" or "")
      .. (extra.again and ", again" or "")
    local ok, err = pcall(function()
      for _, b in ipairs { x.dq, x.dk, x.dv } do b:fill(0) end
      ex.launch(prob, x)
      D.synchronize()
    end)
    local bad, ratio = 0, 0
    if ok then
      for _, bh in ipairs { { 0, 0 }, { p.b - 1, p.h - 1 } } do
        local b1, r1 = check_head(p, x, x, bh[1], bh[2], cache)
        bad, ratio = bad + b1, math.max(ratio, r1)
      end
    end
    if not ok then
      print(("%-12s %-32s not built or launched: %s"):format(p.name, label, tostring(err)))
    elseif bad > 0 then
      print(("%-12s %-32s WRONG: %d elements off"):format(p.name, label, bad))
    else
      local before = { x.dq:to_string(), x.dk:to_string(), x.dv:to_string() }
      local ms = best_of(function() ex.launch(prob, x) end)
      local parts, gparts, hparts = {}, {}, {} -- each program alone: Delta, dQ, dK/dV (fused: Delta and the zeroing, dQ's conversion, dK/dV/dQ)
      for i = 1, 3 do
        local function one() ex.launch(prob, x, i) end
        parts[i], gparts[i], hparts[i] = best_of(one), graph_time(one) or 0 / 0, host_us(one)
      end
      local gwhole, gwhy -- (not the programmatic dependent launches: captured into graphs, untried)
      if ov or dpdl then gwhy = "PDL"
      else gwhole, gwhy = graph_time(function() ex.launch(prob, x) end) end
      D.synchronize()
      -- (the timed launches, back to back, wrote the checked bytes again: the fused dQ's atomic additions aside)
      local same = (extra.fused or x.dq:to_string() == before[1]) and x.dk:to_string() == before[2]
                   and x.dv:to_string() == before[3]
      if not same then print(("%-12s %-32s WRONG: the timed launches wrote other bytes"):format(p.name, label)) end
      local tf = flops / ms / 1e9
      print(("%-12s %-32s %8.3f ms %7.1f TFLOP/s  (Delta %.3f, dQ %.3f, dK/dV%s %.3f ms; checked: rows of 2 heads, worst %.2f of the tolerance)")
        :format(p.name, label, ms, tf, parts[1], parts[2], extra.fused and "/dQ" or "", parts[3], ratio))
      print(("%-12s %-32s   graphs: whole %s ms, Delta %.4f, dQ %.4f, dK/dV %.4f ms; host a launch: %.1f, %.1f, %.1f us")
        :format("", "", gwhole and ("%.3f"):format(gwhole) or ("- (" .. tostring(gwhy):sub(1, 60) .. ")"),
                gparts[1], gparts[2], gparts[3], hparts[1], hparts[2], hparts[3]))
      local r = ours[pi] or {}
      ours[pi] = r
      if same and (not r.tflops or tf > r.tflops) then r.tflops, r.ms, r.label = tf, ms, label end
      if same and (next(extra) == nil or extra.again) then -- (the default: the lower of its figures)
        r.default = math.min(r.default or tf, tf)
      end
      local form = extra.fused and "fused" or "three"
      if same and (not r[form] or tf > r[form]) then r[form] = tf end
    end
  end
  for _, b in pairs(x) do b:free() end
end

print()
print("| backward (B x H x S x D) | ours TFLOP/s | cuDNN bwd | flash bwd | ours / cuDNN | ours / flash | tiles | three programs | fused | default | default / cuDNN |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for pi, p in ipairs(list) do
  local r, t = ours[pi], peers and peers[pi]
  local flops = 2.5 * 4.0 * p.b * p.h * p.s * p.s * p.d * (p.causal and 0.5 or 1)
  local function tf(ms) return ms and flops / ms / 1e9 or nil end
  local function fmt(v) return v and ("%.1f"):format(v) or "-" end
  local function ratio(a, b) return a and b and ("%.3f"):format(a / b) or "-" end
  local cu, fl = t and tf(t.cudnn_bwd), t and tf(t.flash_bwd)
  print(("| %s (%d x %d x %d x %d) | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |"):format(p.name, p.b, p.h, p.s, p.d,
    fmt(r and r.tflops), fmt(cu), fmt(fl), ratio(r and r.tflops, cu), ratio(r and r.tflops, fl), r and r.label or "wrong or not built",
    fmt(r and r.three), fmt(r and r.fused), fmt(r and r.default), ratio(r and r.default, cu)))
end
print("(FLOPs: 2.5 times the forward's 4 B H S^2 D, halved when causal; ours: the Delta, dQ and dK/dV programs together,")
print(" or fused: Delta, the dK/dV program adding dQ into f32, dQ's conversion; three programs, fused: the best TFLOP/s of each form;")
print(" default: examples/attention_bwd.lua's defaults, the lower of their two figures with --overlap)")
