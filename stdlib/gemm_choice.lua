-- stdlib/gemm_choice.lua: tl.gemm.candidates, the configurations of
-- tl.gemm.build worth measuring for a problem shape, best first by a model of
-- their time (docs/gemm.md, "Choosing a configuration").
--
--   local list, est = tl.gemm.candidates { m = 256, n = 10240, k = 8192 [, dtype = "bf16", count = 3, sms = 132] }
--   list[i]   options for tl.gemm.build (besides m, n, k, dtype): bm, bn, cluster, consumers, schedule, splits ...
--   est[i]    the model's time of list[i] in microseconds (decode-sized M: the decode model's)
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

-- The tiles (cooperative unless said): the share of an SM's tensor peak each
-- reaches when nothing else limits it (eff), its fixed cost a round (us: the
-- epilogue's part that the next tile's loads do not hide; the first loads'
-- latency is FILL_US, once) and, where measured lower, the share of its
-- operands' bytes the L2 serves (l2). Fitted to the gemm_variants runs of
-- docs/PERF.md (seventh session; the fixed costs split by the pairs of
-- s10pp-2, 8192^3 against 8192 x 8192 x 1024 on the same rounds: the
-- cooperative 128 x 256 1.6 us a round and 0.635 us a k block alone, 0.625 in
-- a 2 x 1 cluster; 192 x 192 1.5 and 0.696); those of 96, 160 and 224 columns are
-- interpolated (the sweep measured them only as its picks), and so are those
-- of 48, 80, 112, 144, 176 and 208 (16-column epilogue sub-tiles: cuBLAS's
-- 80- and 168-wide tiles fill the SMs where steps of 32 leave some idle):
-- from 144 to 224 columns eff is under 128 x 256's 0.92: in 2 x 1 clusters on
-- the projections of 512 to 4096 tokens (request s11gemm-1, docs/PERF.md,
-- eleventh session: 29 shapes, each tile's measured time over the model's
-- with 0.92, geometric means) 128 x 256 1.020, 128 x 224 1.026, 128 x 192
-- 1.037, 128 x 176 1.040, 128 x 160 1.055, 128 x 208 1.073 (those of 16-column
-- epilogue sub-tiles, 144, 176 and 208, store twice the sub-tiles).
-- eff of 128 x 256 and 256 x 128: the share at which the cooperative 128 x
-- 256 issues its m64n256k16 (0.92, s10pp-1); in a cluster sharing B (the
-- sweep's projections) it measured 0.63-0.66 us a k block (seventh session's
-- sweep), where 1.0 made the model's time 8-24 % short.
M.TILES = {
  { bm = 128, bn = 256, eff = 0.92, fixed = 1.6 },
  { bm = 256, bn = 128, eff = 0.92, fixed = 1.8 },
  -- 256-row tiles of 160 and 176 columns (two 64-row slices a warpgroup): cuBLAS's
  -- 320 x 128 class (its coopB kernel at 512 and 1024 x 10240 x 8192 and 1024 x
  -- 57344 x 8192) with fewer L2 reads a flop than 128 x 256. Fitted to request
  -- s14sweep-1 (docs/PERF.md, fourteenth session): 256 x 160 in a 2 x 1 cluster
  -- 107.4 us at 512 x 10240 x 8192 (one round of 128 tiles), 206.8 at 1024 x
  -- 10240 x 8192; 256 x 176 in a 2 x 1 cluster 1142.4 at 1024 x 57344 x 8192
  -- (9.9 rounds), where 128 x 256's 2 x 1 cluster took 1186.8 (the model: 1129.8).
  -- Offered up to 1024 rows, where measured (above, they took the places of
  -- the forms measured fastest on the squares and the long rows)
  { bm = 256, bn = 176, eff = 0.90, fixed = 1.8, max_m = 1024 },
  { bm = 256, bn = 160, eff = 0.90, fixed = 1.8, max_m = 1024 },
  { bm = 128, bn = 224, eff = 0.915, fixed = 1.6 },
  { bm = 128, bn = 208, eff = 0.89, fixed = 1.7 },
  { bm = 128, bn = 192, eff = 0.905, fixed = 1.4 },
  { bm = 128, bn = 176, eff = 0.90, fixed = 1.5 },
  { bm = 128, bn = 160, eff = 0.89, fixed = 1.3 },
  { bm = 128, bn = 144, eff = 0.90, fixed = 1.4 },
  { bm = 128, bn = 128, eff = 0.96, fixed = 1.1 },
  { bm = 128, bn = 128, consumers = "pingpong", eff = 0.97, fixed = 0.5, tail = 1.5 },
  -- ping-pong 128 x 192 a warpgroup (two m64n192k16 a k step, 5 stages): one
  -- warpgroup's epilogue runs under the other's mainloop, so a round costs
  -- little besides its k blocks, but the last tile's epilogue runs under
  -- nothing (tail, once: a shape of one tile a CTA, whose B streams from HBM,
  -- gains nothing from ping-pong). Fitted to 8192^3 and 8192 x 8192 x 1024
  -- (requests s10pp-1 and s10pp-2, docs/PERF.md, tenth session: 21 rounds
  -- each, 1288.3-1301.1 us and 171.5 us: 0.475-0.480 us a k block, 0.4-0.5
  -- us a round). eff: that k block's tensor time (0.475 us). l2: the largest share for
  -- which the L2 term stays under the measured time (0.525 us a k block at
  -- full share on 132 SMs): the fit's bound, not a measured hit rate.
  -- clusters: offered in clusters (its 2 x 1 cluster measured 0.996 of its
  -- time at 8192^3, 0.963 at 8192 x 8192 x 28672).
  { bm = 128, bn = 192, consumers = "pingpong", eff = 0.895, fixed = 0.4, tail = 1.5, l2 = 0.88, clusters = true },
  { bm = 192, bn = 192, eff = 0.92, fixed = 1.5, min_m = 1024 },
  { bm = 128, bn = 112, eff = 0.94, fixed = 1.2, l2 = 0.95 },
  { bm = 128, bn = 96, eff = 0.92, fixed = 1.0, l2 = 0.9 },
  { bm = 128, bn = 80, eff = 0.89, fixed = 1.0, l2 = 0.85 },
  { bm = 128, bn = 64, eff = 0.85, fixed = 0.8, l2 = 0.8 },
  { bm = 128, bn = 48, eff = 0.78, fixed = 0.9, l2 = 0.75 },
  -- 64 x 128 on one warpgroup: in a 2 x 1 cluster (B multicast) cuBLAS's form at 256
  -- x 4096 x 4096 (its 128x64_64x8_1x2), 17.4 us there against 22.0 alone (s14sweep-1;
  -- l2_cluster: the share of the L2 reads in that cluster, fitted to it, 19.2 us
  -- without); its cluster offered where measured, above 128 rows (cluster_m: the
  -- least M for a cluster along M)
  { bm = 64, bn = 128, wgs = 1, eff = 0.75, fixed = 0.6, l2_cluster = 0.85, max_m = 256, cluster_m = 129 },
  { bm = 64, bn = 256, wgs = 1, eff = 0.85, fixed = 0.8, max_m = 128 },
}
-- A k block takes the longer of its tensor time (PEAK_TFLOPS an SM, bf16; fp8
-- twice) and its operands' L2 reads, the L2's bandwidth (L2_TBS) shared by the
-- SMs at work: a wave of 128 x 128 tiles on every SM waits for the L2, the same
-- tiles on half the SMs do not (H200: 0.40 against 0.30 us a k block). A
-- cluster of 2 multicasts one operand's tile (each CTA loads half of it and
-- its L2 reads fall by less: MULTICAST_READ of the other half still counts);
-- it pays where that operand is the larger one (B along M when N >= M: the
-- weights of a projection), else it costs CLUSTER_LOSS (measured: 256 x 8192 x
-- 8192 on 128 x 128 tiles 48.3 us with B multicast, 56.6 with A's, 55.7
-- without: 0.34 us a k block with B multicast, 0.40 without, where halved
-- reads would give 0.30, so a third of the other half still counts;
-- 1024 x 1024 x 16384, split-K 2 in a 2 x 1 cluster, 49.8 us: the same 0.34).
M.PEAK_TFLOPS = 7.4
M.L2_TBS = 10.3
M.CLUSTER_LOSS = 1.06
M.MULTICAST_READ = 1 / 3
-- Both operands of a size and beyond the L2 (8192^3): a cluster sharing the
-- larger tile gains a little, not the halved reads of a projection's weights
-- (which the model gave as 10 % at 8192^3). Measured (cluster 2 x 1 against
-- none, the same tile): 128 x 256 0.988 (s10pp-1), 0.982 (2026-11-28), 0.995
-- (seventh session); ping-pong 128 x 192 0.996 (s10pp-1). A factor on the time.
M.EVEN_MULTICAST = 0.99
-- Both of a size and each beyond 128 MiB (12288^3, 8192 x 8192 x 28672; 8192^3's
-- are 128 MiB): every form takes 5 % longer but a cooperative cluster sharing
-- the larger tile (which keeps EVEN_MULTICAST). Fitted to request s10pp-2
-- (docs/PERF.md, tenth session): measured against the model without it,
-- 1.045 / 1.046 the cooperative 128 x 256, 1.055 / 1.096 ping-pong 128 x 192,
-- 1.069 / 1.066 its 2 x 1 cluster, and 1.015 / 1.020 the cooperative 2 x 1
-- cluster, the fastest at both (4 % and 0.6 % ahead of ping-pong's cluster).
-- Which misses cost what is not measured.
M.EVEN_BIG = 1.05
-- ping-pong within this factor of the model's first is measured (candidates)
M.PINGPONG_TIE = 1.03
-- up to this many rows a split-K with and without a cluster of the same
-- modelled time is one candidate, the cluster (candidates; s14sweep-1)
M.TIE_M = 1024
-- Split-K: each piece but the last of a tile writes an f32 partial tile and the
-- last reads them all back (us a partial of 128 x 128); StreamK likewise, a
-- tile split over about SMs / tiles units, which walk scattered k ranges
-- (STREAMK_SLOWDOWN on the main loop).
M.PARTIAL_US = 2.0
M.STREAMK_SLOWDOWN = 1.2
-- the launch; the first loads of a CTA (once: the rounds after it overlap
-- their loads with the previous tile's epilogue)
M.LAUNCH_US = 2.0
M.FILL_US = 1.4
-- HBM: what a wave streams at most (TB/s), all SMs or SM_HBM_TBS each. Fitted
-- to the 128-token rows (docs/PERF.md, eighth session): 128 x 6144 x 4096 on
-- 128 x 48 tiles (128 CTAs) 18.4 us, on 128 x 64 (96 CTAs) 19.7 us; 128 x
-- 10240 x 8192 on 128 x 80 (128 CTAs) 48.0 us, 3.5 TB/s of B.
M.HBM_TBS = 3.7
M.SM_HBM_TBS = 0.033

-- The decode forms (at most 64 rows of A, bf16 or f16): A and B swapped, B's
-- rows on wgmma's 64-row side (whole tiles of 64 or 128 rows, StreamK over
-- every SM's share of B's k blocks, split-K), and from 33 rows the tokens on
-- wgmma's M side (64 x bn; at 16 tokens the sweep measured these 1.1 to 2.4
-- times slower than the swapped forms: 64 x 48 26.2 us against 15.9 at 16 x
-- 6144 x 4096, where at 64 tokens it was the fastest form, request
-- s12decode-1, docs/PERF.md). All stream B's bytes; the decode model below
-- ranks them.
local DECODE = {
  { swap_ab = true, bm = 128, schedule = "streamk" },
  { swap_ab = true, schedule = "streamk", bk = 128 }, -- (256 bytes of each row of B a stage)
  { swap_ab = true },
  { swap_ab = true, bm = 128 },
  { swap_ab = true, bm = 128, schedule = "splitk" },
}
local DECODE_64 = { { bm = 64, bn = 128, wgs = 1 }, { bm = 64, bn = 64, wgs = 1 } }

-- The forms that fill the SMs with whole pieces of equal work (cuBLAS's forms
-- at 128 tokens, docs/PERF.md, seventh session: `64x64_64x13_2x1` at 128 x 4096
-- x 4096 and `80x128_64x8_2x1` at 128 x 10240 x 8192, B's rows by the tokens):
--   swapped, 64 rows of B a tile, split-K in a 2 x 1 cluster (A multicast)
--     with as many splits as fill the SMs (tiles x splits <= SMs);
--   from 33 tokens, the tokens on wgmma's M side and the narrowest tile of B's
--     rows (48 to 256 in steps of 16) that gives at most a tile an SM, and 64 x
--     64 tiles split over K in a 1 x 2 cluster.
-- s12decode-1 measured these with the 128-row swapped split-K in a 2 x 1
-- cluster and the whole tiles in clusters (swapped 2 x 1, 64 x bn 1 x 2): those
-- led no shape (the clusters of whole tiles 0-3 % behind the same tile alone,
-- B's bytes, not A's, being what the SMs wait for) and are no longer offered.
local function decode_fill(m, n, k, sms)
  local out = {}
  local kt = (k + 63) // 64
  -- (the CTAs of whole clusters of 2 over `tiles` tiles, and the splits of K
  -- that keep them within the SMs: at least 8 k blocks a split, at most 4)
  local function ctas(tiles) return (tiles + 1) // 2 * 2 end
  local function splits_for(tiles) return math.min(sms // ctas(tiles), kt // 8, 4) end
  local cols = math.max(16, (m + 15) // 16 * 16) -- (swapped in a cluster: A's rows in 8-row halves)
  local tiles = (n + 63) // 64
  local s = splits_for(tiles)
  if tiles >= 2 and s >= 2 then
    out[#out + 1] = { swap_ab = true, bm = 64, bn = cols, cluster = { 2, 1 }, schedule = "splitk", splits = s }
  end
  if m > 32 then
    local per_sm = ((n + sms - 1) // sms + 15) // 16 * 16 -- (B's rows a tile an SM, in steps of 16)
    local bn = math.max(48, per_sm)
    if bn <= 256 and bn ~= 64 and bn ~= 128 then out[#out + 1] = { bm = 64, bn = bn, wgs = 1 } end
    -- two warpgroups on each 64-row tile, every other k block each (ksplit), the
    -- narrowest tile (from 32 columns) that gives at most a tile an SM: cuBLASLt's
    -- 64 x 32 at 64 x 4096 x 4096 (s18-5: 0.87 -> 0.98 of it there); 256 bytes of each
    -- row a stage (bk 128: 64 x 32 198 -> 219 TFLOP/s there, level or better elsewhere, s19-13)
    local kbn = math.max(32, per_sm)
    if kbn <= 128 then out[#out + 1] = { bm = 64, bn = kbn, consumers = "ksplit", bk = 128 } end
    if tiles >= 2 and s >= 2 then
      out[#out + 1] = { bm = 64, bn = 64, wgs = 1, cluster = { 1, 2 }, schedule = "splitk", splits = s }
    end
  end
  return out
end
M.decode_fill = decode_fill

-- The decode model: a form streams B's bytes (A and D are small) through HBM,
-- at most DECODE_HBM_TBS over all SMs (DECODE_HOT_TBS where B's bytes fit in
-- DECODE_HOT_MB: the sweep's back-to-back launches find part of B in the L2,
-- 33.5 MB at 4096 x 4096 measured at 5.5 TB/s), and each CTA at most the bytes
-- it keeps in flight over a latency (Little's law: stages x a stage of B's
-- rows, over DECODE_LATENCY_US plus those bytes at DECODE_CTA_GBS), the two
-- limits joined softly (DECODE_SOFT: a p-norm, so a CTA near its own limit
-- loses a little before it binds). Whole tiles in rounds leave the last round
-- part-empty: DECODE_WAVE_LOSS of that idle share counts (224 tiles on 132 SMs
-- measured 10 % slower than the bytes, not the 70 % of a second full round:
-- the busy CTAs' share of HBM grows). Fixed: the launch and the first loads
-- (DECODE_FIXED_US, DECODE_FIXED_64_US more at 64 tokens), the swapped tile's
-- transposed store of its last round (DECODE_SWAP_STORE_US for 64 rows of B by
-- 64 tokens a warpgroup), each split-K piece's f32 partial (DECODE_PARTIAL_US
-- a 64 x 64 partial) and StreamK's fixup (DECODE_STREAMK_US). Fitted to the 24
-- decode shapes of the sweep (1 token: request main-final; 16 and 64 tokens:
-- s12decode-1; 1 to 13 forms each, docs/PERF.md): each shape's fastest form
-- is among the model's first three of distinct families (decode_family), its
-- times within 6 % (rms) of the measured ones.
M.DECODE_HBM_TBS = 4.1
M.DECODE_HOT_TBS = 6.4
M.DECODE_HOT_MB = 40
M.DECODE_LATENCY_US = 0.85
M.DECODE_CTA_GBS = 250
M.DECODE_SOFT = 4
M.DECODE_WAVE_LOSS = 0.27
M.DECODE_FIXED_US = 3.6
M.DECODE_FIXED_64_US = 1.25
M.DECODE_SWAP_STORE_US = 2.1
M.DECODE_PARTIAL_US = 0.18
M.DECODE_STREAMK_US = 1.0

-- The model's time (us) of decode form o with geometry c.
local function decode_estimate(o, c, sms)
  local rows_b = c.swap_ab and c.bm or c.bn
  local kbytes = rows_b * c.bk * c.ebytes -- B's bytes a k block of a piece
  local inflight = c.stages * kbytes
  local cta = inflight / (M.DECODE_LATENCY_US + inflight / (M.DECODE_CTA_GBS * 1e3)) -- bytes / us
  local bytes = (c.m + c.n) * c.k * c.ebytes + c.m * c.n * 2
  local hbm = (c.n * c.k * c.ebytes <= M.DECODE_HOT_MB * 1e6 and M.DECODE_HOT_TBS or M.DECODE_HBM_TBS) * 1e6
  local p = M.DECODE_SOFT
  local function join(a, b) return (a ^ p + b ^ p) ^ (1 / p) end
  local wg_rows = c.bm // c.wgs -- (a warpgroup's rows: its transposed store, its partials)
  local partial = M.DECODE_PARTIAL_US * wg_rows * c.bn / 4096
  -- units of work (tiles or split-K pieces) of kper k blocks on `ctas` CTAs, in rounds
  local function rounds(units, ctas, kper)
    local r = (units + ctas - 1) // ctas
    return join(bytes / hbm * (1 + M.DECODE_WAVE_LOSS * (r * ctas / units - 1)), r * kper * kbytes / cta)
  end
  local stream, extra
  if o.schedule == "streamk" then
    local per_sm = (c.tiles * c.kt + sms - 1) // sms
    local pieces = math.max(2, math.min(8, (sms + c.tiles - 1) // c.tiles)) -- (a tile's pieces: the last adds the others)
    stream, extra = join(bytes / hbm, per_sm * kbytes / cta), M.DECODE_STREAMK_US + partial * (pieces - 1)
  elseif o.schedule == "splitk" and not c.ksplits then -- (split-K over the StreamK scheduler: the plan's splits)
    local s = o.splits or math.max(2, math.min(c.kt, sms // c.tiles))
    local units = c.tiles * s
    stream, extra = rounds(units, math.min(units, sms), (c.kt + s - 1) // s), partial * (s - 1)
  else -- whole tiles, or a cluster's split-K (its splits are the persistent scheduler's batches)
    local s = c.ksplits or 1
    stream, extra = rounds(c.ctiles * c.cluster, c.grid, (c.kt + s - 1) // s), partial * (s - 1)
  end
  local store = c.swap_ab and M.DECODE_SWAP_STORE_US * c.m * wg_rows / 4096 or 0
  return M.DECODE_FIXED_US + M.DECODE_FIXED_64_US * c.m / 64 + stream + extra + store
end

-- A decode form's family: swapped or not, whole tiles / split-K / StreamK,
-- the swapped tile's rows and bk (the first `count` of distinct families are
-- measured: forms of one family differ by less than the model can tell).
local function decode_family(o, c)
  local sched = o.schedule == "streamk" and "streamk" or (o.schedule == "splitk" or c.ksplits) and "splitk" or "whole"
  return ("%s/%s/%s/%s/%s"):format(c.swap_ab and "swap" or "tile", sched, c.swap_ab and c.bm or "", c.bk, c.consumers)
end

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

-- Whether c's cluster multicasts the larger operand (1: its reads halved),
-- the smaller (-1), or one of two of a size (0: neither gain nor loss
-- measured; 1024 x 1024 x 16384 on 128 x 64 tiles 69.2 us with a cluster,
-- 68.8 without; EVEN: both beyond the L2, the cluster sharing the larger
-- tile, EVEN_MULTICAST on the time). A split-K of square tiles in a cluster
-- is counted as paying: its pieces keep every SM reading from the L2
-- (cuBLAS's 128 x 128 form at 1024 x 1024 x 16384).
local EVEN = 0.5
local function multicast_pays(c)
  local rows_b, rows_a = c.swap_ab and c.m or c.n, c.swap_ab and c.n or c.m
  if rows_a == rows_b then
    if c.ksplits and c.bm == c.bn then return 1 end
    local big = rows_a * c.k * c.ebytes > 64 * 2 ^ 20
    return (big and ((c.cm > 1 and c.bn > c.bm) or (c.cn > 1 and c.bm > c.bn))) and EVEN or 0
  end
  return ((c.cm > 1 and rows_b > rows_a) or (c.cn > 1 and rows_a > rows_b)) and 1 or -1
end

-- Whether A and B are of a size and each beyond 128 MiB (EVEN_BIG).
local function even_big(c)
  return c.m == c.n and c.m * c.k * c.ebytes > 128 * 2 ^ 20
end

-- The time (us) of a k block of the tile of c with `active` SMs at work.
local function kblock_us(t, c, active, fp8)
  local flops = 2.0 * c.bm * c.bn * c.bk
  local pays = c.cluster > 1 and multicast_pays(c) == 1
  -- the rows of A and B each CTA reads from L2: of a multicast operand's
  -- tile, its share and MULTICAST_READ of the rest
  local share = function(rows, ways) return rows / ways + M.MULTICAST_READ * (rows - rows / ways) end
  local rows = pays and (share(c.bm, c.cn) + share(c.bn, c.cm)) or (c.bm + c.bn)
  local bytes = rows * c.bk * c.ebytes * (c.cluster > 1 and t.l2_cluster or t.l2 or 1)
  return math.max(flops / (M.PEAK_TFLOPS * (fp8 and 2 or 1) * t.eff * 1e6), bytes * active / (M.L2_TBS * 1e6))
end

-- The HBM floor (us): every byte of A, B and D crosses HBM once, at most
-- HBM_TBS, and at most SM_HBM_TBS a CTA streaming them (few rows of A: B's
-- bytes are read once each, and the SMs at work bound the rate).
local function hbm_us(c, active)
  local bytes = (c.m + c.n) * c.k * c.ebytes + c.m * c.n * 2
  return bytes / (math.min(M.HBM_TBS, active * M.SM_HBM_TBS) * 1e6)
end

-- The model's time (us) of the form `o` of tile t on the problem: its k blocks
-- at the tile's rate, or the HBM floor, whichever is longer, plus the fixed
-- costs of its rounds (and split-K's partials).
local function estimate(t, o, c, sms, fp8)
  local partial = M.PARTIAL_US * c.bm * c.bn / (128 * 128)
  -- a cluster that multicasts the smaller operand buys nothing (see above);
  -- one of operands of a size, EVEN_MULTICAST
  local pays = c.cluster > 1 and multicast_pays(c) or 0
  local loss = pays < 0 and M.CLUSTER_LOSS or pays == EVEN and M.EVEN_MULTICAST or 1
  if not (pays == EVEN and c.consumers ~= "pingpong") and even_big(c) then loss = loss * M.EVEN_BIG end
  local rounds, active, kb, over -- over: the fixed costs of a round
  if o.schedule == "splitk" then -- (the plan's default splits: a wave of pieces; in a cluster, its multicast)
    local splits = o.splits or math.max(2, math.min(c.kt, sms // c.tiles))
    local units = c.tiles * splits
    rounds, active = (units + sms - 1) // sms, math.min(units, sms)
    kb, over = ((c.kt + splits - 1) // splits) * kblock_us(t, c, active, fp8), t.fixed + partial * (splits - 1)
  elseif o.schedule == "streamk" then
    local per_sm = (c.tiles * c.kt + sms - 1) // sms
    rounds, active = 1, sms
    kb, over = M.STREAMK_SLOWDOWN * per_sm * kblock_us(t, c, sms, fp8), t.fixed + partial * math.max(1, sms / c.tiles)
  else
    rounds, active = (c.ctiles + c.grid // c.cluster - 1) // (c.grid // c.cluster), math.min(c.tiles, c.grid)
    kb, over = c.kt * kblock_us(t, c, active, fp8), t.fixed
  end
  return M.LAUNCH_US + loss * (M.FILL_US + (t.tail or 0) + math.max(rounds * (kb + over), hbm_us(c, active) + rounds * over))
end

-- The model's time (us) of tl.gemm.build options o on the problem; nil for a
-- tile the model does not know or a form tl.gemm.build refuses (to set the
-- constants above against measured times of any form).
function M.estimate(o, m, n, k, dtype, sms)
  dtype = dtype or "bf16"
  local c = geometry(o, m, n, k, dtype, sms) -- (its tile: the defaults' where o names none)
  if not c then return nil end
  if m <= 64 and (dtype == "bf16" or dtype == "f16") then return decode_estimate(o, c, sms) end
  local consumers = c.consumers == "pingpong" and "pingpong" or nil
  for _, t in ipairs(M.TILES) do
    if c.bm == t.bm and c.bn == t.bn and consumers == t.consumers and (o.wgs == nil or o.wgs == t.wgs) then
      return estimate(t, o, c, sms, dtype == "e4m3" or dtype == "e5m2")
    end
  end
end

-- Every modelled form for the problem: {options, us}.
local function forms(m, n, k, dtype, sms)
  local fp8 = dtype == "e4m3" or dtype == "e5m2"
  local out = {}
  local function add(t, o) -- (not a cluster the model gives neither gain nor loss: a tie with its tile)
    local c = geometry(o, m, n, k, dtype, sms)
    if c and not (c.cluster > 1 and multicast_pays(c) == 0) then
      out[#out + 1] = { o = o, us = estimate(t, o, c, sms, fp8), c = c, i = #out + 1 }
    end
  end
  for _, t in ipairs(M.TILES) do
    if m >= (t.min_m or 0) and m <= (t.max_m or math.huge) and not (fp8 and t.consumers) then
      -- (ping-pong's bm is 64 by default above 128 columns: named)
      local named = t.bm ~= 128 or (t.consumers and t.bn > 128)
      local base = { bm = named and t.bm or nil, bn = t.bn, wgs = t.wgs, consumers = t.consumers }
      add(t, base)
      local tm, tn = (m + t.bm - 1) // t.bm, (n + t.bn - 1) // t.bn
      -- clusters: the cooperative tiles', and ping-pong's where measured
      -- (`clusters`; 128 x 128 a warpgroup lost 1-7 % in every cluster, s10pp-1)
      if (not t.consumers or t.clusters) and t.bm >= 128 then
        if tm >= 2 then local o = copy(base) o.cluster = { 2, 1 } add(t, o) end
        if tn >= 2 then local o = copy(base) o.cluster = { 1, 2 } add(t, o) end
      elseif t.cluster_m and m >= t.cluster_m and tm >= 2 then
        local o = copy(base) o.cluster = { 2, 1 } add(t, o)
      end
      if not t.consumers and t.bm >= 128 then
        -- split-K: fewer tiles than SMs and K long enough to split (at
        -- least 8 k blocks a piece)
        local kt = (k + (fp8 and 128 or 64) - 1) // (fp8 and 128 or 64)
        if tm * tn < sms then
          for s = 2, 4 do
            if kt // s >= 8 and tm * tn * s <= 2 * sms then
              local o = copy(base) o.schedule, o.splits = "splitk", s add(t, o)
              -- in a cluster of 2 sharing the larger operand (cuBLAS's form at 1024 x 1024 x 16384)
              for _, cl in ipairs { { 2, 1 }, { 1, 2 } } do
                if (cl[1] == 2 and tm >= 2) or (cl[2] == 2 and tn >= 2) then
                  local oc = copy(o) oc.cluster = cl add(t, oc)
                end
              end
            end
          end
          if kt >= 16 then local o = copy(base) o.schedule = "streamk" add(t, o) end
        end
      end
    end
  end
  -- (ties: up to TIE_M rows a split-K in a cluster that multicasts the larger operand first, then in the order above)
  local function mc(f)
    return m <= M.TIE_M and f.o.schedule == "splitk" and f.c.cluster > 1 and multicast_pays(f.c) == 1 and 0 or 1
  end
  table.sort(out, function(a, b)
    if a.us ~= b.us then return a.us < b.us end
    if mc(a) ~= mc(b) then return mc(a) < mc(b) end
    return a.i < b.i
  end)
  return out
end

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
    -- the decode forms by the decode model, the first of each family
    local all = {}
    local function add(d)
      local c = geometry(d, o.m, o.n, o.k, dtype, sms)
      if c then all[#all + 1] = { o = d, c = c, us = decode_estimate(d, c, sms), i = #all + 1 } end
    end
    for _, d in ipairs(DECODE) do add(copy(d)) end
    if o.m > 32 then for _, d in ipairs(DECODE_64) do add(copy(d)) end end
    for _, d in ipairs(decode_fill(o.m, o.n, o.k, sms)) do add(d) end
    table.sort(all, function(a, b) return a.us < b.us or (a.us == b.us and a.i < b.i) end)
    local seen = {}
    for _, f in ipairs(all) do
      local family = decode_family(f.o, f.c)
      if #list < count and not seen[family] then
        seen[family] = true
        local i = #list + 1
        list[i], est[i] = f.o, f.us
      end
    end
    return list, est
  end
  -- one cluster orientation of a tile and schedule (the model cannot tell
  -- 2 x 1 from 1 x 2 apart: both halve one operand's reads), and where M = N
  -- one of a tile and its transpose over as many warpgroups (128 x 256 and 256
  -- x 128 there are mirror images: the model puts them within 0.5 %), then the
  -- next form. (Where M > N the transpose is not a twin: 256 x 128 in a 1 x 2
  -- cluster is what 128 x 256 in a 2 x 1 cluster is where N > M, the seventh
  -- session's pick at 8192 x 4096 x 4096 and 8192 x 4096 x 14336.)
  -- Up to TIE_M rows, a split-K of one tile with and without a cluster at the
  -- same time (the tensor cores bound both, the multicast's relief of the L2
  -- gains nothing in the model) is one candidate, the cluster sharing the
  -- larger operand (sorted first; the sweep's pick where it won, s12 main-sweep):
  -- two such pairs filled the three places at 512 x 4096 x 14336, leaving out
  -- the fastest form (128 x 128 c2x1, s14sweep-1). (Whole tiles keep both: the
  -- tile alone measured up to 1.7 % faster than its cluster, s11gemm-1 and -2.)
  local seen, tied, all = {}, {}, forms(o.m, o.n, o.k, dtype, sms)
  for _, f in ipairs(all) do
    if #list >= count then break end
    local lo, hi = f.c.bm, f.c.bn
    if o.m == o.n then lo, hi = math.min(lo, hi), math.max(lo, hi) end
    local family = ("%s/%s/%s/%s/%s/%s"):format(lo, hi, f.c.wgs, f.c.consumers, f.o.schedule, f.c.cluster)
    local tile = ("%s/%s/%s/%s/%s/%s"):format(lo, hi, f.c.wgs, f.c.consumers, f.o.schedule, f.o.splits)
    local tie = o.m <= M.TIE_M and f.o.schedule == "splitk" and tied[tile] and math.abs(f.us / tied[tile] - 1) < 1e-3
    tied[tile] = tied[tile] or f.us
    if not seen[family] and not tie then
      seen[family] = true
      local i = #list + 1
      list[i], est[i] = f.o, f.us
    end
  end
  -- ping-pong and the cooperative tiles within PINGPONG_TIE of each other: the
  -- model does not rank them (s11gemm-1 and -2: ping-pong was the fastest
  -- form on 13 of 64 shapes, 5 of them where the model put it second, 0.2-2.2 %
  -- behind its first), so the best ping-pong form takes the last place
  if count >= 2 and #list == count then
    local has = false
    for _, c in ipairs(list) do has = has or c.consumers == "pingpong" end
    for _, f in ipairs(all) do
      if has or f.us > est[1] * M.PINGPONG_TIE then break end
      if f.c.consumers == "pingpong" then list[count], est[count], has = f.o, f.us, true end
    end
  end
  return list, est
end

return M
