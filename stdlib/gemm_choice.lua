-- stdlib/gemm_choice.lua: tl.gemm.candidates, the configurations of
-- tl.gemm.build worth measuring for a problem shape, best first by a model of
-- their time (docs/gemm.md, "Choosing a configuration").
--
--   local list, est = tl.gemm.candidates { m = 256, n = 10240, k = 8192 [, dtype = "bf16", count = 3, sms = 132] }
--   list[i]   options for tl.gemm.build (besides m, n, k, dtype): bm, bn, cluster, consumers, schedule, splits ...
--   est[i]    the model's time of list[i] in microseconds (nil for the decode forms, which are not modelled)
--
-- The model. A form is a tile (bm x bn), a cluster, and a schedule. Its time is
-- rounds x (k blocks of a round x the tile's time a k block + the tile's fixed
-- cost), where a round is one tile (or split-K piece) on every CTA of the grid:
-- a shape of few tiles leaves SMs idle (wave quantization), which smaller or
-- narrower tiles, clusters (which fill whole pairs of SMs) and split-K trade
-- against their lower throughput a k block (more L2 traffic a FLOP) and the
-- partial sums split-K writes. The tile's throughput and fixed cost come from
-- the H200 runs recorded in docs/PERF.md; the model ranks forms, and the few
-- best are measured (tl.autotune), so an error of a few per cent in it costs
-- nothing as long as the fastest form is among those measured.
local tl = require "tilua" -- the library being built (init.lua registers it before its rooms)
local G = require "tilua.kernels.gemm"

local M = {}

-- The tiles (cooperative unless said), their per-SM throughput in the main
-- loop (TFLOP/s of bf16 on one SM of an H200; fp8 twice) and their fixed cost
-- a tile (us: the first loads' latency, the epilogue's stores), each with a
-- cluster of 2 along M (B multicast) and along N (A multicast) where it pays.
M.TILES = {
  { bm = 128, bn = 256, rate = 6.30, fixed = 3.0 },
  { bm = 256, bn = 128, rate = 6.30, fixed = 3.2 },
  { bm = 128, bn = 192, rate = 6.00, fixed = 2.8 },
  { bm = 128, bn = 128, rate = 5.75, fixed = 2.5 },
  { bm = 128, bn = 128, consumers = "pingpong", rate = 6.05, fixed = 1.5 },
  { bm = 192, bn = 192, rate = 6.05, fixed = 3.2, min_m = 1024 },
  { bm = 128, bn = 64, rate = 4.60, fixed = 2.2 },
  { bm = 64, bn = 128, wgs = 1, rate = 3.60, fixed = 2.0, max_m = 128 },
  { bm = 64, bn = 256, wgs = 1, rate = 4.20, fixed = 2.2, max_m = 128 },
}
-- A cluster of 2 halves one operand's L2 reads: the throughput a k block of a
-- tile limited by them rises (the narrow tiles most), and the grid fills in
-- pairs of SMs.
M.CLUSTER_GAIN = { [64] = 1.12, [128] = 1.07, [192] = 1.03, [256] = 1.02 }
-- Split-K: each piece but the last of a tile writes an f32 partial tile and the
-- last reads them back (us a partial of bm x bn = 128 x 128); StreamK pays the
-- same at the tiles its units share, and its units walk scattered k ranges.
M.PARTIAL_US = 1.5
M.STREAMK_SLOWDOWN = 1.08
M.LAUNCH_US = 2.0

-- The decode forms (at most 64 rows of A): A and B swapped, B's rows on
-- wgmma's 64-row side; StreamK over every SM's share of B's k blocks, or whole
-- tiles; from 33 rows the 64-row tiles too. Measured, not modelled: they
-- stream B's bytes (docs/PERF.md, "Decode-sized M").
local DECODE = {
  { swap_ab = true, schedule = "streamk" },
  { swap_ab = true, schedule = "streamk", bk = 128 },
  { swap_ab = true, bm = 128, schedule = "streamk" },
  { swap_ab = true },
  { swap_ab = true, bm = 128 },
  { swap_ab = true, bm = 128, schedule = "splitk" },
}
local DECODE_64 = { { bm = 64, bn = 128, wgs = 1 }, { bm = 64, bn = 64, wgs = 1 } }

local function copy(t)
  local r = {}
  for key, v in pairs(t) do r[key] = v end
  return r
end

-- The geometry of options o on the problem (tl.gemm.config's: tiles, k blocks,
-- cluster tiles) and its grid on `sms` SMs; nil when the form is refused.
local function geometry(o, m, n, k, dtype, sms)
  local full = copy(o)
  full.m, full.n, full.k, full.dtype = m, n, k, dtype
  local ok, c = pcall(tl.gemm.config, full)
  if not ok then return nil end
  c.sms_planned = sms
  c.grid = G.grid_of(c, c.ctiles)
  return c
end

-- The model's time (us) of the form `o` of tile t on the problem.
local function estimate(t, o, c, sms, fp8)
  local rate = t.rate * (fp8 and 2 or 1) * (c.cluster > 1 and (M.CLUSTER_GAIN[math.min(c.bm, c.bn)] or 1) or 1)
  local kb_us = 2.0 * c.bm * c.bn * c.bk / (rate * 1e6)
  local partial = M.PARTIAL_US * c.bm * c.bn / (128 * 128)
  if o.schedule == "splitk" then -- (the plan's default splits: a wave of pieces)
    local splits = o.splits or math.max(2, math.min(c.kt, sms // c.tiles))
    local rounds = (c.tiles * splits + sms - 1) // sms
    return M.LAUNCH_US + rounds * (((c.kt + splits - 1) // splits) * kb_us + t.fixed + partial)
  elseif o.schedule == "streamk" then
    local per_sm = (c.tiles * c.kt + sms - 1) // sms
    return M.LAUNCH_US + M.STREAMK_SLOWDOWN * per_sm * kb_us + t.fixed + partial
  end
  local rounds = (c.ctiles + c.grid // c.cluster - 1) // (c.grid // c.cluster)
  return M.LAUNCH_US + rounds * (c.kt * kb_us + t.fixed)
end

-- The model's time (us) of tl.gemm.build options o on the problem; nil for a
-- tile the model does not know or a form tl.gemm.build refuses.
function M.estimate(o, m, n, k, dtype, sms)
  dtype = dtype or "bf16"
  for _, t in ipairs(M.TILES) do
    local bn = o.bn or (o.consumers == "pingpong" and 128 or 256)
    if (o.bm or 128) == t.bm and bn == t.bn and o.consumers == t.consumers and (o.wgs == nil or o.wgs == t.wgs) then
      local c = geometry(o, m, n, k, dtype, sms)
      return c and estimate(t, o, c, sms, dtype == "e4m3" or dtype == "e5m2") or nil
    end
  end
end

-- Every modelled form for the problem: {options, us}.
local function forms(m, n, k, dtype, sms)
  local fp8 = dtype == "e4m3" or dtype == "e5m2"
  local out = {}
  local function add(t, o)
    local c = geometry(o, m, n, k, dtype, sms)
    if c then out[#out + 1] = { o = o, us = estimate(t, o, c, sms, fp8), c = c } end
  end
  for _, t in ipairs(M.TILES) do
    if m >= (t.min_m or 0) and m <= (t.max_m or math.huge) and not (fp8 and t.consumers) then
      local base = { bm = t.bm ~= 128 and t.bm or nil, bn = t.bn, wgs = t.wgs, consumers = t.consumers }
      add(t, base)
      if not t.consumers and t.bm >= 128 then
        local tm, tn = (m + t.bm - 1) // t.bm, (n + t.bn - 1) // t.bn
        if tm >= 2 then local o = copy(base) o.cluster = { 2, 1 } add(t, o) end
        if tn >= 2 then local o = copy(base) o.cluster = { 1, 2 } add(t, o) end
        -- split-K: fewer tiles than SMs and K long enough to split (at
        -- least 8 k blocks a piece)
        local kt = (k + (fp8 and 128 or 64) - 1) // (fp8 and 128 or 64)
        if tm * tn < sms then
          for s = 2, 4 do
            if kt // s >= 8 and tm * tn * s <= 2 * sms then
              local o = copy(base) o.schedule, o.splits = "splitk", s add(t, o)
            end
          end
          if kt >= 16 then local o = copy(base) o.schedule = "streamk" add(t, o) end
        end
      end
    end
  end
  table.sort(out, function(a, b) return a.us < b.us end)
  return out
end
M.forms = forms

function tl.gemm.candidates(o)
  if type(o) ~= "table" then tl.raise("gemm.candidates: expected a table {m, n, k [, dtype, count, sms]}") end
  for _, key in ipairs { "m", "n", "k" } do
    if math.type(o[key]) ~= "integer" or o[key] < 1 then tl.raise(("gemm.candidates: '%s' must be a positive integer"):format(key)) end
  end
  local dtype, count = o.dtype or "bf16", o.count or 3
  if math.type(count) ~= "integer" or count < 1 then tl.raise("gemm.candidates: count must be a positive integer") end
  local sms = o.sms or (tl.device.available() and tl.device.sm_count() or 132)
  local list, est = {}, {}
  if o.m <= 64 and (dtype == "bf16" or dtype == "f16") then
    for _, d in ipairs(DECODE) do list[#list + 1] = copy(d) end
    if o.m > 32 then for _, d in ipairs(DECODE_64) do list[#list + 1] = copy(d) end end
    return list, est
  end
  -- one cluster orientation of a tile and schedule (the model cannot tell
  -- 2 x 1 from 1 x 2 apart: both halve one operand's reads), then the next form
  local seen = {}
  for _, f in ipairs(forms(o.m, o.n, o.k, dtype, sms)) do
    if #list >= count then break end
    local family = ("%s/%s/%s/%s/%s"):format(f.c.bm, f.c.bn, f.c.consumers, f.o.schedule, f.c.cluster)
    if not seen[family] then
      seen[family] = true
      local i = #list + 1
      list[i], est[i] = f.o, f.us
    end
  end
  return list, est
end

return M
