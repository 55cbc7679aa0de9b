-- attention.lua: attention forward as a tile program (docs/tileprog.md),
--
--   O[b, h] = softmax(Q[b, h] K[b, h / group]^T * scale (+ a causal mask)) V[b, h / group]
--   LSE[b, h, i] = log sum_j exp(s_ij)
--
-- with Q, K, V, O [B, H, S, D] bf16 and LSE [B, H, SQ] f32: a program is 128
-- query rows of one head (192 at head dim 64; programs x: the row blocks, y:
-- batch x heads; causal: x the heads, y batch x row blocks (TM of them), the
-- longest first, claimed at run time: programs of differing lengths); it loads its Q tile once, then walks the keys in tiles of 128 (64
-- at head dim 256; an online softmax: the running row maximum and sum are
-- carried by the loop with the output accumulator, above head dim 64 in stdlib's
-- arithmetic: the factor exp2(m_old c - m_new c), a row all -inf so far guarded
-- to 0, not NaN; at 64 exp2((m_old - m_new) c), faster there (o.fold: s16tattn-3);
-- docs/tileprog.md, "Chained dots"), masks the keys past the
-- end (and, causal, right of the diagonal) with an index tile, and stores O
-- and the log-sum-exp. tile-to-ptx lowers it to stdlib/attention.lua's design
-- (the FlashAttention-3 design: docs/attention.md).
--
--   tilua examples/attention.lua [--b=B] [--h=H] [--hkv=HKV] [--sq=SQ] [--skv=SKV] [--d=64|128|256] [--causal]
--                                [--schedule=persistent|dynamic] (causal: dynamic by default)
--                                [--split=0|1 [--workers=N]] (non-causal: the split-tail schedule, on N CTAs at most;
--                                 by default on at d64, off at d128 and 256: docs/PERF.md, s17split)
--                                [--emit=ir|ptx] [--stage=NAME]
--
-- On a GPU it runs on fresh random data (ragged lengths, grouped-query heads)
-- and checks O and the log-sum-exp against stdlib/attention.lua's reference
-- kernel on every element; without a GPU it stops after ptxas.
--   loadfile("examples/attention.lua")("--library") -> the example (tilua.gpu.check), with .build
local tl = require "tilua"
local check = require "tilua.gpu.check"

local LOG2E, LN2 = 1.4426950408889634, 0.6931471805599453

-- The query rows of a program: 192 (three consumer warpgroups) at head dim
-- 64, 128 (two) above, where registers hold no more.
local function block_rows(o) return o.bm or ((o.d or 128) <= 64 and 192 or 128) end

-- {=== the tile program
local function build(o)
  o = o or {}
  local D, BM, BN = o.d or 128, block_rows(o), o.bn or (o.d == 256 and 64 or 128) -- (d 256: K, V tiles of 64 keys fit)
  tl.new_module()
  -- (the split tail: whole programs in whole rounds of the SMs, then the rest a consumer's 64 rows a tile;
  -- o.workers: on so many CTAs at most). By default where it measured faster: d64 non-causal with
  -- programs of 192 rows (s17split-1, H200, 2 x 16 heads, S 4096: the speed of stdlib's kernel times
  -- 1.013 with it, 0.946 without, medians of 21 interleaved rounds; s17b-5, its one body: 1.000 against
  -- 0.946 in 15); not at d128 (0.941 with it, 0.978
  -- without: slower) nor causal (dynamic claims). o.split = 0 or false (--split=0) turns it off, 1 or true on.
  local split
  if o.split == nil then split = D == 64 and BM == 192 and not o.causal
  else split = o.split ~= 0 and o.split ~= false end
  local sched = split and { kind = "split_tail", workers = o.workers } or nil
  local k = tl.tile_kernel("attention", { schedule = o.schedule or (o.causal and "dynamic" or sched),
    params = { Q = tl.tensor(tl.bf16, 4), K = tl.tensor(tl.bf16, 4),
    V = tl.tensor(tl.bf16, 4), O = tl.tensor(tl.bf16, 4), LSE = tl.tensor(tl.f32, 3), SKV = tl.i32, TM = tl.i32, H = tl.i32, group = tl.i32,
    scale = tl.f32 } })
  k:define(function(k, p)
    local m, b, h -- BM rows of head h of batch b
    if o.causal then -- heads fastest, then the row blocks, the longest first (the CTAs' work evens
      -- out), then the batch: the CTAs at work at once read the K and V of H heads, as in
      -- stdlib's order (with the batch before the row blocks, B x H heads': more than L2 holds)
      local y = tl.program_id("y")
      h, b, m = tl.program_id("x"), y // p.TM, p.TM - 1 - y % p.TM
    else
      local bh = tl.program_id("y")
      m, b, h = tl.program_id("x"), bh // p.H, bh % p.H
    end
    local hk, c = h // p.group, p.scale * LOG2E -- the key head; exp(x * scale) is exp2(x * c)
    local fold = o.fold == nil and D > 64 or o.fold -- (d64: the difference's form measured faster)
    local q = tl.load(p.Q, { b, h, m, 0 }, { BM, D }) -- loaded once, read by every key tile
    local rows = tl.iota({ BM, BN }, 0) + m * BM
    local keys = o.causal and tl.min(p.SKV, (m + 1) * BM) or p.SKV -- (causal: none right of the last row)
    local mi, li, acc = tl.for_tiles(keys, { tile = BN, stages = 2 }, tl.full({ BM }, -math.huge), tl.zeros({ BM }),
                                     tl.zeros({ BM, D }), function(j, mi, li, acc)
      local s = tl.dot(q, tl.load(p.K, { b, hk, j, 0 }, { BN, D }), { transpose_b = true })
      local cols = tl.iota({ BM, BN }, 1) + j * BN
      local keep = cols:lt(p.SKV)
      if o.causal then keep = keep & cols:le(rows) end
      s = tl.select(keep, s, -math.huge)
      local mn = tl.maximum(mi, tl.reduce(s, 1, "max")) -- the running maximum
      local ms = mn * c -- (stdlib's arithmetic; without fold: exp2((m_old - m_new) c), s16tattn-2's)
      if fold and o.guard ~= false then ms = tl.select(mn:eq(-math.huge), 0, ms) end -- (a row all -inf so far: P, factor 0)
      local pr = tl.exp2(s * c - tl.expand_dim(ms, 1))
      local alpha = tl.exp2(fold and mi * c - ms or (mi - mn) * c) -- rescales what was summed before
      local v = tl.load(p.V, { b, hk, j, 0 }, { BN, D })
      return mn, li * alpha + tl.reduce(pr, 1, "add"), tl.dot(pr:cast(tl.bf16), v, acc * tl.expand_dim(alpha, 1))
    end)
    tl.store(p.O, { b, h, m, 0 }, (acc * tl.expand_dim(1 / li, 1)):cast(tl.bf16)) -- (a divide a row, not an element)
    tl.store(p.LSE, { b, h, m }, (mi * c + tl.log2(li)) * LN2)
  end)
  return k
end
-- }===

local function options(...)
  local o = { b = 2, h = 4, hkv = 2, sq = 1000, skv = 777, d = 128 } -- ragged lengths, grouped-query heads
  for _, a in ipairs(... ~= "--library" and arg or {}) do
    local key, v = a:match "^%-%-([%w_-]+)=(.*)$"
    if key and key ~= "emit" and key ~= "stage" then o[key] = math.tointeger(tonumber(v)) or v end
    if a == "--causal" then o.causal = true end
  end
  return o
end

local O = options(...)
local kernels = {}
local function kernel(o)
  local key = ("%d/%s"):format(o.d, tostring(o.causal))
  if not kernels[key] then
    kernels[key] = build(o)
    check.compile("attention", kernels[key])
  end
  return kernels[key]
end

-- The programs of a problem o: x the row blocks, y batch x heads (causal: x
-- the heads, y the batch x row blocks, as the program reads them).
local function programs(o)
  local blocks = (o.sq + block_rows(o) - 1) // block_rows(o)
  if o.causal then return { o.h, o.b * blocks } end
  return { blocks, o.b * o.h }
end

-- The launch of the program on a problem o (sizes b, h, hkv, sq, skv, d) with
-- buffers x (q, k, v, o, lse).
local function launch(k, o, x)
  local D = o.d
  k:launch { grid = programs(o),
             args = { Q = { x.q, { o.b, o.h, o.sq, D } }, K = { x.k, { o.b, o.hkv, o.skv, D } },
                      V = { x.v, { o.b, o.hkv, o.skv, D } }, O = { x.o, { o.b, o.h, o.sq, D } },
                      LSE = { x.lse, { o.b, o.h, o.sq } }, SKV = o.skv, TM = programs(o)[2] // o.b, H = o.h, group = o.h // o.hkv,
                      scale = o.scale or 1 / math.sqrt(D) } }
end

-- run{seed, grid, small} -> ok, summary: the problem (small: 1 x 2 heads, 200 x
-- 300, d 64), checked against stdlib/attention.lua's reference kernel.
local function run(cs)
  local o = {}
  for key, v in pairs(O) do o[key] = v end
  if cs.small then o.b, o.h, o.hkv, o.sq, o.skv, o.d = 1, 2, 1, 200, 300, 64 end
  if cs.grid then o.b, o.h, o.hkv, o.sq = 1, 2, 1, 64 * cs.grid - 5 end
  local k = kernel(o)
  local D = tl.device
  local n, nkv = o.b * o.h * o.sq * o.d, o.b * o.hkv * o.skv * o.d
  local x = { q = D.random(tl.bf16, n, cs.seed), k = D.random(tl.bf16, nkv, cs.seed + 1),
              v = D.random(tl.bf16, nkv, cs.seed + 2), o = D.alloc(tl.bf16, n), lse = D.alloc(tl.f32, o.b * o.h * o.sq) }
  x.o:fill(0)
  launch(k, o, x)
  D.synchronize()
  local ref = tl.attention.build { b = o.b, h = o.h, hkv = o.hkv, sq = o.sq, skv = o.skv, d = o.d, causal = o.causal }
  local ok, report = ref:check { q = x.q, k = x.k, v = x.v, o = x.o, lse = x.lse, seed = cs.seed, vmax = 1.0 }
  for _, buf in pairs(x) do buf:free() end
  return ok, ("seed %d, %d x %d heads (%d key heads), %d x %d, d %d%s: %s"):format(cs.seed, o.b, o.h, o.hkv, o.sq,
    o.skv, o.d, o.causal and ", causal" or "", report)
end

local example = { name = "attention", build = build, launch = launch, programs = programs, LOG2E = LOG2E, LN2 = LN2,
                  prepare = function() kernel(O) end, run = run, grids = function(sms) return check.grids(sms) end }
if ... == "--library" then return example end
check.main(example)
