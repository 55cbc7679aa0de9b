-- tools/bench/tile_pingpong.lua: the tile GEMM of examples/tile_gemm.lua with
-- ping-pong consumers (or ksplit ones: --ksplit=1, below) (tl.for_tiles {consumers = "pingpong"}: a 128 x 128 or a
-- 64 x 256 program, two consumer warpgroups each with the whole tile,
-- alternating programs over one ring, the mainloops and epilogues ordered by
-- two seq_bars) against the same tile program with cooperative consumers (128
-- x 256, two warpgroups of 64 rows on every tile), stdlib/gemm.lua's
-- consumers = "pingpong" of the same tile and cuBLASLt, in one process on one
-- device: bf16 A (M x K) and B (N x K), f32 accumulation, bf16 C. Every kernel
-- is checked first against cuBLASLt's result on every element (and each tile
-- ping-pong against stdlib's ping-pong of its tile and stages bit for bit),
-- then timed in interleaved rounds: a round takes one sample of every form
-- (CUDA events around 10 back-to-back launches), each round starting one form
-- later; each form's figure is the median of its --rounds samples (the best
-- and the spread printed beside it), every ratio one of medians; beside them
-- the host's CPU time a launch (a kernel shorter than that leaves the GPU idle).
-- Without a GPU it compiles the kernels and stops.
--
--   tilua tools/bench/tile_pingpong.lua [--sizes=8192,4096] [--rounds=9] [--stages=S]
--                                       [--coop_stages=3,4] [--study=1] [--cluster=1 [--pdl=1]] [--ksplit=1] [--swap=1]
--   --stages: the ping-pong 128 x 128's depth (default stdlib's: 6)
--   --coop_stages: the tile cooperative 128 x 256's depths, one form each (the example's default 3)
--   --study=1: the 64 x 256 ping-pong's stages besides: the tile program at 4 and 5 stages, stdlib's at
--     3, 4 and 5 and in a 2 x 1 cluster at 4 and 5, and stdlib's ping-pong 128 x 192 at 5 (the same
--     40 KiB a stage and 217 KiB in all as 64 x 256 at 5)
--   --cluster=1: ping-pong on clusters of 2 instead: the tile ping-pongs 128 x 128 a CTA with B
--     multicast (a 256 x 128 program, c2x1) and with A multicast (128 x 256, c1x2), 128 x 192 a CTA
--     with B multicast (256 x 192, c2x1), each against stdlib's ping-pong of that tile and cluster
--     bit for bit; the tile ping-pongs 128 x 128 and 128 x 192 on one CTA, the tile cooperative
--     128 x 256 (3 stages) on one CTA and on a cluster of 2 (a 256 x 256 program, B multicast:
--     stdlib's cluster = 2), and cuBLASLt
--   --ksplit=1: ksplit consumers instead (tl.for_tiles {consumers = "ksplit"}: a 64-row program whose
--     two warpgroups take every other k block): the tile ksplits 64 x 32 (k blocks of 64 and of 128
--     elements), 64 x 96 a CTA on a cluster of 2
--     (a 128 x 96 program, B multicast), 64 x 128 and 64 x 64 a CTA on a cluster of 4 (a 64 x 256 program, A
--     multicast to the 4), each against stdlib's ksplit of that tile, cluster and
--     stages bit for bit, stdlib's own choice for the shape (tl.gemm.candidates's first) and cuBLASLt; its
--     default shapes the decode rows where ksplit wins (64x4096x4096, 128x6144x4096, 64x14336x4096)
--   --swap=1: the swapped forms instead (examples/tile_gemm.lua's swap: a program of bm tokens x bn
--     columns of C computes D^T = B . A^T and stores its transpose): 16 x 128, 8 x 64 and 32 x 128 with
--     128-element k blocks, each against stdlib's swap_ab of that tile and stages bit for bit, stdlib's
--     own choice and cuBLASLt; its default shapes decode rows (16x4096x4096, 16x14336x4096, 8x28672x4096)
--   --swap=1 --knobs=0: each tile form also compiled without tileas-insert-OCG-knobs (its `.pragma "next
--     knob FenceCode"` lines, which stdlib's PTX has none of), a row "no knobs"; --swap=1 --pdl=1: each
--     tile form also with the launch its default does not take (a row "pdl" or "no pdl")
--   --shapes=MxNxK,...: those problems instead of the squares of --sizes
--   --cluster=1 --pdl=1: the launch instead (a programmatic dependent launch, stdlib's default, against
--     none): the tile ping-pongs 128 x 128 c2x1 and c1x2 without and with PDL (o.pdl = false, true;
--     elsewhere the example's default, PDL on for the c2x1 only: a row's name ends in "pdl"), each against
--     stdlib's ping-pong of that tile and cluster with (its default) and without (pdl = false), the
--     one-CTA tile and stdlib ping-pong 128 x 128 (the choice model's form), cuBLASLt; and how many
--     clusters of each cluster kernel fit at once (k:max_active_clusters: stdlib's grid, against the
--     tile kernel's 132 CTAs)
local tl = require "tilua"

local o = { sizes = "8192,4096", rounds = 9, coop_stages = "3,4" }
for _, a in ipairs(arg or {}) do
  local key, v = a:match "^%-%-([%w_]+)=(.+)$"
  if key then o[key] = math.tointeger(tonumber(v)) or v end
end
if o.cluster and tostring(o.coop_stages) == "3,4" then o.coop_stages = "3" end -- (--cluster: the example's default only)
local ex = assert(loadfile "examples/tile_gemm.lua")("--library")
local D = tl.device

-- The forms, in the table's order: kind "tile" (the tile program: bm, bn, stages, consumers),
-- "std" (tl.gemm.build's: cfg), "blas". A tile ping-pong names its stdlib pair (pair = index).
-- (on a cluster, --cluster=1: the CTA's block is bm x bn, the program's twice that along M (c2x1: B
-- multicast) or N (c1x2: A multicast), stdlib's pair the same tile in that cluster)
local function form_list()
  local L = {}
  -- (pdl: the tile program as a programmatic dependent launch or not, nil: the example's default, ex.pdl_of;
  -- std_pdl = false: stdlib's without one)
  -- (consumers: "pingpong" or "ksplit", the tile program's and its stdlib pair's; bk: their k block, 64 if nil)
  local function tile_pair(consumers, bm, bn, stages, pair, cl, pdl, std_pdl, bk)
    local pm, pn = bm * (cl and cl[1] or 1), bn * (cl and cl[2] or 1)
    local to = { consumers = consumers, bm = pm, bn = pn, cluster = cl and cl[1] * cl[2] or nil, pdl = pdl, bk = bk }
    stages = stages or ex.stages_of(to)
    to.stages = stages
    local where = (cl and (" c%dx%d"):format(cl[1], cl[2]) or "") .. (bk and (" bk%d"):format(bk) or "")
    local what = consumers == "pingpong" and "ping-pong" or consumers
    L[#L + 1] = { kind = "tile", name = ("tile %s %dx%d%s (%d st)%s"):format(what, bm, bn, where, stages,
                                                                            ex.pdl_of(to) and " pdl" or ""),
                  bm = pm, bn = pn, o = to }
    if pair then
      L[#L].pair = #L + 1
      L[#L + 1] = { kind = "std", name = ("stdlib %s %dx%d%s (%d st)%s"):format(what, bm, bn, where, stages,
                                                                             std_pdl == false and " no pdl" or ""),
                    cfg = { consumers = consumers, bm = bm, bn = bn, stages = stages, cluster = cl, pdl = std_pdl,
                            bk = bk } }
    end
  end
  local function tile_pp(...) return tile_pair("pingpong", ...) end
  if o.ksplit then -- the decode forms (stdlib/gemm_choice.lua's), each beside stdlib's of its tile and stages
    tile_pair("ksplit", 64, 32, nil, true)
    tile_pair("ksplit", 64, 32, nil, true, nil, nil, nil, 128) -- (the model's pick at 64x4096x4096)
    tile_pair("ksplit", 64, 96, nil, true, { 2, 1 })
    tile_pair("ksplit", 64, 128, nil, true)
    tile_pair("ksplit", 64, 64, nil, true, { 1, 4 }) -- (a 64 x 256 program on a cluster of 4, A multicast)
    L[#L + 1] = { kind = "std", name = "stdlib's choice", cfg = {}, choice = true } -- (the model's first candidate)
    return L
  end
  if o.swap then -- the swapped forms (stdlib/gemm.lua's swap_ab): tokens x columns of C a program, each
    -- beside stdlib's swap_ab of its tile (bm rows of B x bn tokens) and stages
    for _, t in ipairs { { 16, 128 }, { 8, 64 }, { 32, 128, 128 } } do
      local to = { swap = true, bm = t[1], bn = t[2], bk = t[3] }
      local stages = ex.stages_of(to)
      local what = ("swapped %dx%d%s (%d st)"):format(t[1], t[2], t[3] and (" bk" .. t[3]) or "", stages)
      -- the tile rows: the example's default; --knobs=0: also without the OCG knobs; --pdl=1: also with
      -- the launch that the default does not take (a programmatic dependent one or not)
      local rows = { { o = to, name = "" } }
      if o.knobs == 0 then rows[#rows + 1] = { o = to, name = " no knobs", knobs = false } end
      if o.pdl == 1 then
        local other = { swap = true, bm = t[1], bn = t[2], bk = t[3], pdl = not ex.pdl_of(to) }
        rows[#rows + 1] = { o = other, name = other.pdl and " pdl" or " no pdl" }
      end
      local pair = #L + #rows + 1
      for _, r in ipairs(rows) do
        L[#L + 1] = { kind = "tile", name = "tile " .. what .. r.name, bm = t[1], bn = t[2], o = r.o, pair = pair,
                      knobs = r.knobs }
      end
      L[#L + 1] = { kind = "std", name = "stdlib " .. what, cfg = { swap_ab = true, bm = t[2], bn = t[1], bk = t[3], stages = stages } }
    end
    L[#L + 1] = { kind = "std", name = "stdlib's choice", cfg = {}, choice = true }
    return L
  end
  if o.cluster and o.pdl then
    tile_pp(128, 128, nil, true)
    tile_pp(128, 128, nil, true, { 2, 1 }, false)
    tile_pp(128, 128, nil, true, { 2, 1 }, true, false)
    -- the same kernel again on the grid stdlib's launch takes (the clusters that fit at once, times 2):
    -- where as many fit as the 66 of its persistent grid, a repeat of the first row (the bench's noise)
    tile_pp(128, 128, nil, false, { 2, 1 }, false)
    L[#L].name, L[#L].capped = L[#L].name .. " grid cap", true
    tile_pp(128, 128, nil, true, { 1, 2 }, false)
    tile_pp(128, 128, nil, true, { 1, 2 }, true, false)
    return L
  end
  if o.cluster then
    tile_pp(128, 128, nil, false)
    tile_pp(128, 128, nil, true, { 2, 1 })
    tile_pp(128, 128, nil, true, { 1, 2 })
    tile_pp(128, 192, nil, false)
    tile_pp(128, 192, nil, true, { 2, 1 })
    for s in tostring(o.coop_stages):gmatch "%d+" do
      s = math.tointeger(tonumber(s))
      L[#L + 1] = { kind = "tile", name = ("tile cooperative 128x256 (%d st)"):format(s), bm = 128, bn = 256, o = { stages = s },
                    coop = true }
      L[#L + 1] = { kind = "tile", name = ("tile cooperative 128x256 c2x1 (%d st)"):format(s), bm = 256, bn = 256,
                    o = { stages = s, bm = 256, cluster = 2 }, coop = true }
    end
    return L
  end
  tile_pp(128, 128, o.stages, true)
  for s in tostring(o.coop_stages):gmatch "%d+" do
    s = math.tointeger(tonumber(s))
    L[#L + 1] = { kind = "tile", name = ("tile cooperative 128x256 (%d st)"):format(s), bm = 128, bn = 256, o = { stages = s },
                  coop = true }
  end
  if o.study then
    tile_pp(64, 256, 4, true)
    tile_pp(64, 256, 5, true)
    L[#L + 1] = { kind = "std", name = "stdlib ping-pong 64x256 (3 st)", cfg = { consumers = "pingpong", bm = 64, bn = 256, stages = 3 } }
    L[#L + 1] = { kind = "std", name = "stdlib ping-pong 128x192 (5 st)", cfg = { consumers = "pingpong", bm = 128, bn = 192, stages = 5 } }
    for _, st in ipairs { 4, 5 } do -- (the 2 x 1 cluster's default: the 5 that fit, s13pp-2)
      L[#L + 1] = { kind = "std", name = ("stdlib ping-pong 64x256 c2x1 (%d st)"):format(st),
                    cfg = { consumers = "pingpong", bm = 64, bn = 256, stages = st, cluster = { 2, 1 } } }
    end
  end
  return L
end

local tile_to_ptx -- (the tile programs' pipeline: a row with knobs = false leaves its OCG knobs pass out)
for _, p in ipairs(tl.core.pipelines()) do if p.name == "tile-to-ptx" then tile_to_ptx = p.passes end end
local function compile_tiles(L)
  for _, f in ipairs(L) do
    if f.kind == "tile" then
      f.k = ex.build(f.o)
      f.k:compile(f.knobs == false and tile_to_ptx:gsub(",tileas%-insert%-OCG%-knobs", "") or nil)
    end
  end
end

if not D.available() then
  local L = form_list()
  compile_tiles(L)
  for _, f in ipairs(L) do
    if f.kind == "std" then
      local cfg = { m = 512, n = 512, k = 512 }
      for k, v in pairs(f.cfg) do cfg[k] = v end
      tl.gemm.build(cfg).kernel:compile()
    end
  end
  print(("SKIP: no GPU (%s): compiled only (%d forms)"):format(D.error(), #L))
  return
end

local seed = tonumber(os.getenv "TILUA_SEED") or os.time()
local blas = tl.core.blas_available()
print(("tile_pingpong bench on %s (%d SMs), seed %d, cuBLASLt %s, %d interleaved rounds"):format(D.info().name,
  D.sm_count(), seed, blas and "available" or "not available", o.rounds))
local L = form_list()
compile_tiles(L)

local function sample(fn) return D.time(function() for _ = 1, 10 do fn() end end) / 10 end
local function median(t) -- (of an odd count the middle one, of an even the mean of the middle two)
  local s = table.move(t, 1, #t, 1, {})
  table.sort(s)
  return (s[(#s + 1) // 2] + s[#s // 2 + 1]) / 2
end

local problems = {}
for size in tostring(o.sizes):gmatch "%d+" do
  local x = math.tointeger(tonumber(size))
  problems[#problems + 1] = { x, x, x }
end
if o.ksplit and not o.shapes then o.shapes = "64x4096x4096,128x6144x4096,64x14336x4096" end
if o.swap and not o.shapes then o.shapes = "16x4096x4096,16x14336x4096,8x28672x4096" end
if o.shapes then
  problems = {}
  for m, n, k in tostring(o.shapes):gmatch "(%d+)x(%d+)x(%d+)" do
    problems[#problems + 1] = { math.tointeger(tonumber(m)), math.tointeger(tonumber(n)), math.tointeger(tonumber(k)) }
  end
end
for _, pr in ipairs(problems) do
  local M, N, K = pr[1], pr[2], pr[3]
  local label = (M == N and N == K) and ("%d^3"):format(M) or ("%dx%dx%d"):format(M, N, K)
  local a <close> = D.random(tl.bf16, M * K, seed)
  local b <close> = D.random(tl.bf16, N * K, seed + 1)
  local ref <close> = D.alloc(tl.bf16, M * N)
  local forms, std = {}, nil
  for i, f in ipairs(L) do
    local F = { name = f.name, pair = f.pair, coop = f.coop, d = D.alloc(tl.bf16, M * N) }
    if f.kind == "tile" then
      local k, bm, bn = f.k, f.bm, f.bn
      -- (one launch table for every launch: the launcher keeps the arguments it converted for
      -- the same inputs, so a short kernel's time is the GPU's, not the tensor maps' encoding)
      local launch = { grid = f.o.swap and ex.grid_of(f.o, M, N) or { (M + bm - 1) // bm, (N + bn - 1) // bn }, pdl = k.pdl,
                       args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { F.d, { M, N } }, K = K } }
      F.run = function() k:launch(launch) end
      if f.capped then -- the recipe's persistent grid from an SM count of 2 x the clusters that fit
        local run, ok, fits = F.run, pcall(k.max_active_clusters, k)
        fits = ok and fits or 0 -- (none to ask, the emulator: the recipe's grid)
        F.run = function()
          local sms = D.sm_count
          D.sm_count = function() return fits > 0 and math.min(sms(), 2 * fits) or sms() end
          run()
          D.sm_count = sms
        end
      end
    else
      local cfg = { m = M, n = N, k = K }
      for k, v in pairs(f.choice and tl.gemm.candidates { m = M, n = N, k = K, count = 1 }[1] or f.cfg) do cfg[k] = v end
      local g = tl.gemm.build(cfg)
      g.kernel:compile()
      std = std or g
      F.g = g
      F.run = function() g:run { a = a, b = b, d = F.d } end
    end
    forms[i] = F
  end
  std = std or tl.gemm.build { m = M, n = N, k = K }
  local ours = #forms
  local cublas = blas and function()
    tl.core.blas_gemm { m = M, n = N, k = K, a = a.raw, b = b.raw, d = ref.raw, ["in"] = "bf16", out = "bf16" }
  end
  if cublas then
    local ok, err = pcall(cublas)
    if not ok then -- (the library loads but does not run: the emulator, a stand-in driver)
      print("cuBLASLt does not run: " .. tostring(err) .. "; no ratios")
      cublas = nil
    end
  end
  if cublas then forms[#forms + 1] = { name = "cuBLASLt", run = cublas } end
  -- correctness first
  for _, f in ipairs(forms) do
    if f.d then f.d:fill(0) end
    f.run()
  end
  D.synchronize()
  local all_ok = true
  for i = 1, ours do
    local ok, report
    if cublas then ok, report = std:check { a = a, b = b, d = forms[i].d, reference = ref }
    else ok, report = std:check { a = a, b = b, d = forms[i].d, seed = seed } end
    print(("%s %s: %s, %s"):format(label, forms[i].name, ok and "OK" or "FAILED", report))
    all_ok = all_ok and ok
    local p = forms[i].pair and forms[forms[i].pair]
    if p then
      print(("%s %s vs %s: %s"):format(label, forms[i].name, p.name, forms[i].d:equals(p.d) and "bit for bit the same" or "DIFFERENT"))
    end
  end
  if not all_ok then error("a kernel is wrong: no timing", 0) end
  if o.pdl then -- the clusters that fit at once: stdlib's persistent grid, against the tile kernel's
    for i = 1, ours do
      if forms[i].name:match " c%dx%d" then
        local k = L[i].k or forms[i].g.kernel
        local ok, n = pcall(k.max_active_clusters, k)
        print(("%s %s: %s clusters of 2 fit at once%s"):format(label, forms[i].name, ok and tostring(n) or ("? (" .. tostring(n) .. ")"),
          L[i].k and ("; launched on %d CTAs"):format(L[i].capped and ok and math.min(D.sm_count() // 2 * 2, 2 * n)
                                                      or D.sm_count() // 2 * 2) or ("; stdlib's grid %s CTAs"):format(
            forms[i].g._clusters and tostring(math.min(D.sm_count() // 2 * 2, 2 * forms[i].g._clusters)) or "?")))
      end
    end
  end
  -- interleaved rounds: round r runs the forms from the r-th on, wrapping
  local t = {}
  for i = 1, #forms do t[i] = {} end
  for r = 1, o.rounds do
    for j = 0, #forms - 1 do
      local i = (r - 1 + j) % #forms + 1
      t[i][#t[i] + 1] = sample(forms[i].run)
    end
  end
  local med, best, spread = {}, {}, {}
  for i = 1, #forms do
    med[i], best[i] = median(t[i]), math.min(table.unpack(t[i]))
    spread[i] = (math.max(table.unpack(t[i])) - best[i]) / med[i]
  end
  -- the host's CPU time a launch (50 launches, not waited for): where it passes the kernel's
  -- time, back-to-back launches leave the GPU idle between kernels and the figure is the host's
  local host = {}
  for i = 1, #forms do
    local t0 = os.clock()
    for _ = 1, 50 do forms[i].run() end
    host[i] = (os.clock() - t0) / 50 * 1e6
    D.synchronize()
  end
  local flops = 2.0 * M * N * K
  local function tf(ms) return flops / ms / 1e9 end
  print(("%-37s %9s %9s %9s %7s %9s %8s"):format(("%s, %d rounds"):format(label, o.rounds), "median ms", "TFLOP/s",
    "best", "spread", "/ cuBLASLt", "host us"))
  for i, f in ipairs(forms) do
    local r = cublas and med[#forms] / med[i] or nil
    print(("%-37s %9.4f %9.1f %9.1f %6.1f%% %9s %8.1f"):format(f.name, med[i], tf(med[i]), tf(best[i]), 100 * spread[i],
      r and ("%.3f"):format(r) or "-", host[i]))
  end
  for i = 1, ours do
    if forms[i].pair then
      local parts = {}
      for j = 1, ours do
        if forms[j].coop then parts[#parts + 1] = ("/ %s %.3f"):format(forms[j].name, med[j] / med[i]) end
      end
      parts[#parts + 1] = ("/ %s %.3f"):format(forms[forms[i].pair].name, med[forms[i].pair] / med[i])
      print(("%s %s (speed, medians): %s"):format(label, forms[i].name, table.concat(parts, ", ")))
    end
  end
  for i = 1, ours do forms[i].d:free() end
end
