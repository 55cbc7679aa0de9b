-- attention_bwd.lua: the attention backward as tile programs (docs/tileprog.md).
-- Given the forward of examples/attention.lua (O = softmax(Q K^T * scale (+ a
-- causal mask)) V, its log-sum-exp LSE) and dO, with P = exp(S * scale - LSE):
--
--   Delta[i] = sum_e dO[i, e] O[i, e]        dV = P^T dO          dP = dO V^T
--   dS = P * (dP - Delta[row])                dQ = scale dS K      dK = scale dS^T Q
--
-- three programs (FlashAttention-2's backward, P recomputed from the LSE):
--   "attention_bwd_delta": BM rows of a head, Delta = rowsum(dO * O) (f32),
--                          and LSE2 = LSE * log2(e) (the exp2's, FA3's LSE_log2);
--   "attention_bwd_dq":    BM query rows of a head walk the key tiles (a
--                          forward-shaped loop with two first-stage dots, S and
--                          dP, and dQ += dS K); dQ stored once, no atomics;
--   "attention_bwd_dkdv":  BN key rows of a key head (K, V loaded once) walk the
--                          query tiles of the heads that share it (grouped-query
--                          heads summed in the loop): S^T = K Q^T, P^T with the
--                          query's LSE broadcast down the columns, dV += P^T dO,
--                          dP^T = V dO^T, dS^T, dK += dS^T Q (two accumulators).
-- or, fused (--fused; FlashAttention-3's five dots instead of seven):
--   "attention_bwd_delta":  as above, and the rows' tile of dQacc zeroed;
--   "attention_bwd_fused":  the dK/dV program, adding dQ's part of its keys,
--                           dS K, into the f32 dQacc [B, H, SQ, D] with a
--                           reduce-add store (atomic: the key tiles' programs
--                           add into the same rows; head dim 64 only, as its
--                           lowering stages dS^T through 64 x 64 of shared memory);
--   "attention_bwd_dq_convert": dQ = scale dQacc in bf16.
-- Q, K, V, O, dO, dQ, dK, dV [B, H, S, D] bf16 (K, V, dK, dV: HKV heads), LSE
-- [B, H, SQ] f32; LSE2 and Delta [B, H, SQ] f32 with rows of padded(SQ)
-- floats (a multiple of 4: the dK/dV loop's lowering stages them by TMA
-- beside Q, whose tensor maps take row strides of 16 bytes). Causal: a query i sees keys j <= i (the forward's);
-- blocks wholly above the diagonal are skipped (the dQ loop stops at the
-- diagonal, the dK/dV loop starts there).
--
-- The dK/dV loop runs in order (tl.for_tiles's in_order: no dot issued an
-- iteration ahead, so that FlashAttention-3's wider dK/dV tiles fit the
-- registers: 128 query rows at head dim 64, 64 at 128; docs/tileprog.md);
-- o.in_order = false issues S^T and dP^T an iteration ahead, with the tiles
-- that fit then (64 and 32 query rows).
--
-- The three programs overlap by default (o.overlap = "dkdv", o.delta_pdl):
-- dK/dV launched last, a programmatic dependent launch filling the SMs that
-- dQ's last wave leaves, and dQ one after Delta; o.overlap = "dq" the other
-- order, o.overlap = false and o.delta_pdl = false three plain launches; see
-- overlap_top below.
--
--   tilua examples/attention_bwd.lua [--d=64|128] [--causal] [--fused] [--in_order=false] [--kv_bm=N] [--overlap=dkdv|dq|false] [--delta_pdl=false] [--emit=ir|ptx] [--stage=NAME]
--
--   loadfile("examples/attention_bwd.lua")("--library") -> {build_delta, build_dq, build_dkdv, build_dq_convert, padded, row_floats, tiles, programs, kernels, launch, overlap_of, delta_pdl_of}
local tl = require "tilua"

local LOG2E = 1.4426950408889634

-- The rows a program of Delta (and of the fused backward's dQ conversion)
-- takes: at 32 its threads hold 32 elements of each tile a thread (72
-- registers at head dim 128), so that an SM runs enough of them to stream O
-- and dO at the memory's rate; 128 rows took 253 registers, 2 programs of
-- 128 threads an SM (H200, docs/PERF.md s11bwd-1: Delta 0.115 ms at d128,
-- 8% of the backward). Measured at 32 (s11bwd-2): 0.077-0.132 ms at d128
-- across three runs of one process: the host's launch, not the device's time;
-- by CUDA graphs (s13bwd-1) 0.023, 0.024, 0.024 ms at 32, 64, 128 rows
-- (d128), 0.011 and 0.009 ms at 32 and 128 (d64): under 2% of the backward;
-- kept for its registers.
local ROWS_BM = 32

-- The tiles of program `which` ("dq", "dkdv" or "rows") at o's head dim: BM query
-- rows, BN key rows (o.bm, o.bn choose them for both; o.dq_bm, o.dq_bn,
-- o.kv_bm, o.kv_bn for one). A consumer warpgroup holds 64 rows of its
-- accumulators: the dQ program's (two consumers: 128 query rows), the next
-- iteration's S and dP issued ahead and the bf16 operands of its late dots
-- in at most 232 registers a thread: at head dim 128 it takes keys 64 at a
-- time. The dK/dV program's loop in order (the default) holds no f32 value
-- across iterations: 128 query rows at a time at head dim 64 (fused: 64, its
-- dS^T staged in 64 x 64), 64 at 128; out of order (o.in_order = false) its
-- next S^T and dP^T beside dK and dV (128 registers at head dim 128): 64 and
-- 32. (H200, docs/PERF.md s10bwd-1: in order 1.30x and 1.23x as fast at
-- d64 and d128, not causal.)
local function tiles(o, which)
  local wide = (o.d or 128) > 64
  if which == "rows" then return o.rows_bm or ROWS_BM end
  if which == "dkdv" then
    local bm
    if o.in_order == false then bm = wide and 32 or 64 else bm = (wide or o.fused) and 64 or 128 end
    return o.kv_bm or o.bm or bm, o.kv_bn or o.bn or 128
  end
  return o.dq_bm or o.bm or 128, o.dq_bn or o.bn or (wide and 64 or 128)
end

local T4, T3 = function(e) return tl.tensor(e, 4) end, function(e) return tl.tensor(e, 3) end

-- The row length of LSE2 and Delta for SQ queries: SQ rounded up to 4 floats.
local function padded(sq) return (sq + 3) // 4 * 4 end

-- {=== the tile programs

-- Overlapping the programs (the three-program form; o.fused ignores these):
-- o.overlap = "dkdv" (the default) or "dq" launches that program last, as a
-- programmatic dependent launch: the other calls griddepcontrol.launch_dependents
-- at its top, so that the last one's programs take the SMs its last wave
-- leaves idle (neither reads what the other writes), and the last one waits
-- for it (griddepcontrol.wait) before its stores only, so that it completes
-- after it and the stream's next launch finds both done (the PTX ISA's
-- griddepcontrol.wait waits until the prerequisite grids have completed and
-- their memory operations are visible; no documented rule orders the two
-- grids' completions without it). o.delta_pdl (the default; false: not):
-- the program after Delta is a programmatic dependent launch too: Delta
-- triggers at its top, the program waits for it at its own top (before it
-- triggers the last one, which reads Delta and LSE2 by TMA before its own
-- wait: docs/tileprog.md says why that is sound). H200
-- (docs/PERF.md s13bwd-1): d128 522.0 TFLOP/s against 509.2 and 510.3 in
-- plain order, d64 420.3 against 416.1 and 416.3.
local function overlap_of(o)
  if o.fused then return nil end
  if o.overlap == nil then return "dkdv" end
  return o.overlap or nil
end
local function delta_pdl_of(o) return not o.fused and o.delta_pdl ~= false end
local function first_of(o) return overlap_of(o) == "dq" and "dkdv" or "dq" end
local function overlap_top(o, which)
  if o.fused or first_of(o) ~= which then return end
  if delta_pdl_of(o) then tl.griddepcontrol_wait() end
  if overlap_of(o) then tl.griddepcontrol_launch_dependents() end
end
local function overlap_end(o, which)
  if overlap_of(o) == which then tl.griddepcontrol_wait() end
end
-- (LSE2 = LSE * log2(e) too; o.fused: it also zeroes the rows' tile of the
-- f32 dQ accumulator that the fused program adds into)
local function build_delta(o)
  local D, BM = o.d or 128, tiles(o, "rows")
  tl.new_module()
  local params = { O = T4(tl.bf16), dO = T4(tl.bf16), LSE = T3(tl.f32), Delta = T3(tl.f32), LSE2 = T3(tl.f32), H = tl.i32 }
  if o.fused then params.dQacc = T4(tl.f32) end
  local k = tl.tile_kernel("attention_bwd_delta", { params = params })
  k:define(function(_, p)
    local m, bh = tl.program_id("x"), tl.program_id("y")
    if delta_pdl_of(o) then tl.griddepcontrol_launch_dependents() end
    local b, h = bh // p.H, bh % p.H
    local prod = tl.load(p.O, { b, h, m, 0 }, { BM, D }):cast(tl.f32) * tl.load(p.dO, { b, h, m, 0 }, { BM, D }):cast(tl.f32)
    tl.store(p.Delta, { b, h, m }, tl.reduce(prod, 1, "add"))
    tl.store(p.LSE2, { b, h, m }, tl.load(p.LSE, { b, h, m }, { BM }) * LOG2E)
    if o.fused then tl.store(p.dQacc, { b, h, m, 0 }, tl.zeros({ BM, D }, tl.f32)) end
  end)
  return k
end

-- dQ = scale * dQacc in bf16, BM rows of a head a program (the fused backward's last)
local function build_dq_convert(o)
  local D, BM = o.d or 128, tiles(o, "rows")
  tl.new_module()
  local k = tl.tile_kernel("attention_bwd_dq_convert", { params = { dQacc = T4(tl.f32), dQ = T4(tl.bf16), H = tl.i32,
    scale = tl.f32 } })
  k:define(function(_, p)
    local m, bh = tl.program_id("x"), tl.program_id("y")
    local b, h = bh // p.H, bh % p.H
    tl.store(p.dQ, { b, h, m, 0 }, (tl.load(p.dQacc, { b, h, m, 0 }, { BM, D }) * p.scale):cast(tl.bf16))
  end)
  return k
end

local function build_dq(o)
  local D, BM, BN = o.d or 128, tiles(o, "dq")
  tl.new_module()
  local k = tl.tile_kernel("attention_bwd_dq", { params = { Q = T4(tl.bf16), K = T4(tl.bf16), V = T4(tl.bf16),
    dO = T4(tl.bf16), LSE2 = T3(tl.f32), Delta = T3(tl.f32), dQ = T4(tl.bf16), SKV = tl.i32, H = tl.i32, group = tl.i32,
    scale = tl.f32 } })
  k:define(function(_, p)
    local m, bh = tl.program_id("x"), tl.program_id("y")
    if o.causal then -- heads fastest, the longest row blocks first (the forward's order)
      m, bh = tl.num_programs("y") - 1 - tl.program_id("y"), tl.program_id("x")
    end
    overlap_top(o, "dq")
    local b, h = bh // p.H, bh % p.H
    local hk, c = h // p.group, p.scale * LOG2E -- exp(x * scale) is exp2(x * c)
    local q, dout = tl.load(p.Q, { b, h, m, 0 }, { BM, D }), tl.load(p.dO, { b, h, m, 0 }, { BM, D })
    local lse = tl.expand_dim(tl.load(p.LSE2, { b, h, m }, { BM }), 1)
    local delta = tl.expand_dim(tl.load(p.Delta, { b, h, m }, { BM }), 1)
    local rows = tl.iota({ BM, BN }, 0) + m * BM
    local keys = o.causal and tl.min(p.SKV, (m + 1) * BM) or p.SKV
    -- (three stages: K's ring holds two, S's stage and the stage dQ += dS K reads an iteration later)
    local dq = tl.for_tiles(keys, { tile = BN, stages = o.stages or 3 }, tl.zeros({ BM, D }), function(j, dq)
      local kt = tl.load(p.K, { b, hk, j, 0 }, { BN, D })
      local s = tl.dot(q, kt, { transpose_b = true })
      local cols = tl.iota({ BM, BN }, 1) + j * BN
      local keep = cols:lt(p.SKV)
      if o.causal then keep = keep & cols:le(rows) end
      local pr = tl.exp2(tl.select(keep, s, -math.huge) * c - lse)
      local dp = tl.dot(dout, tl.load(p.V, { b, hk, j, 0 }, { BN, D }), { transpose_b = true })
      return tl.dot((pr * (dp - delta)):cast(tl.bf16), kt, dq)
    end)
    overlap_end(o, "dq")
    tl.store(p.dQ, { b, h, m, 0 }, (dq * p.scale):cast(tl.bf16))
  end)
  return k
end

-- (o.fused: the program also adds dS K, the dQ of its keys, into the f32
-- dQacc with a reduce-add store: the backward's five dots)
local function build_dkdv(o)
  local D, BM, BN = o.d or 128, tiles(o, "dkdv")
  tl.new_module()
  local params = { Q = T4(tl.bf16), K = T4(tl.bf16), V = T4(tl.bf16), dO = T4(tl.bf16), LSE2 = T3(tl.f32),
    Delta = T3(tl.f32), dK = T4(tl.bf16), dV = T4(tl.bf16), SQ = tl.i32, HKV = tl.i32, group = tl.i32, scale = tl.f32 }
  if o.fused then params.dQacc = T4(tl.f32) end
  local k = tl.tile_kernel(o.fused and "attention_bwd_fused" or "attention_bwd_dkdv", { params = params })
  k:define(function(_, p)
    local n, bh = tl.program_id("x"), tl.program_id("y") -- BN keys of key head hk of batch b
    if o.causal then n, bh = tl.program_id("y"), tl.program_id("x") end -- (heads fastest, the first keys see most queries)
    overlap_top(o, "dkdv")
    local b, hk = bh // p.HKV, bh % p.HKV
    local c = p.scale * LOG2E
    local kt, vt = tl.load(p.K, { b, hk, n, 0 }, { BN, D }), tl.load(p.V, { b, hk, n, 0 }, { BN, D })
    local keys = tl.iota({ BN, BM }, 0) + n * BN
    local first = o.causal and n * BN // BM or tl.const(0, tl.i32) -- (causal: no query above the first key)
    local blocks = tl.max((p.SQ + (BM - 1)) // BM - first, 0)      -- query tiles of a head
    local per = tl.max(blocks, 1)
    -- the loop walks the query tiles of the group's heads, head by head
    -- (three stages: Q's and dO's rings are read ahead and late, as K's in dQ)
    local dk, dv = tl.for_tiles(p.group * blocks * BM, { tile = BM, stages = o.stages or 3, in_order = o.in_order ~= false }, tl.zeros({ BN, D }), tl.zeros({ BN, D }),
                                function(j, dk, dv)
      local h, m = hk * p.group + j // per, first + j % per
      local q, dout = tl.load(p.Q, { b, h, m, 0 }, { BM, D }), tl.load(p.dO, { b, h, m, 0 }, { BM, D })
      local st = tl.dot(kt, q, { transpose_b = true }) -- S^T [BN, BM]
      local qrows = tl.iota({ BN, BM }, 1) + m * BM
      local keep = qrows:lt(p.SQ)
      if o.causal then keep = keep & keys:le(qrows) end
      local lse = tl.expand_dim(tl.load(p.LSE2, { b, h, m }, { BM }), 0) -- a query's, down the columns
      local pt = tl.exp2(tl.select(keep, st, -math.huge) * c - lse)
      local dpt = tl.dot(vt, dout, { transpose_b = true })
      local dst = (pt * (dpt - tl.expand_dim(tl.load(p.Delta, { b, h, m }, { BM }), 0))):cast(tl.bf16)
      if o.fused then -- dQ's part of these keys: dS K = (dS^T)^T K
        tl.store(p.dQacc, { b, h, m, 0 }, tl.dot(dst, kt, { transpose_a = true }), { reduce = "add" })
      end
      return tl.dot(dst, q, dk), tl.dot(pt:cast(tl.bf16), dout, dv)
    end)
    overlap_end(o, "dkdv")
    tl.store(p.dK, { b, hk, n, 0 }, (dk * p.scale):cast(tl.bf16))
    tl.store(p.dV, { b, hk, n, 0 }, dv:cast(tl.bf16))
  end)
  return k
end
-- }===

-- The grids of programs of problem o (b, h, hkv, sq, skv, d): {delta, dq, dkdv}
-- (causal: the dQ and dK/dV programs' heads along x, as they read them).
local function programs(o)
  local BM, RM = tiles(o, "dq"), tiles(o, "rows")
  local _, BN = tiles(o, "dkdv")
  local qb, kb, rb = (o.sq + BM - 1) // BM, (o.skv + BN - 1) // BN, (o.sq + RM - 1) // RM
  if o.causal then return { { rb, o.b * o.h }, { o.b * o.h, qb }, { o.b * o.hkv, kb } } end
  return { { rb, o.b * o.h }, { qb, o.b * o.h }, { kb, o.b * o.hkv } }
end

-- The compiled programs of o's head dim and mask: {delta, dq, dkdv} (o.fused:
-- {delta, dq_convert, fused dK/dV/dQ}).
local compiled = {}
local function kernels(o)
  local bm, bn = tiles(o, "dq")
  local kbm, kbn = tiles(o, "dkdv")
  local key = ("%d/%s/%d/%d/%d/%d/%d/%s/%s/%d/%s/%s"):format(o.d, tostring(o.causal), bm, bn, kbm, kbn, o.stages or 3, tostring(o.fused),
                                                   tostring(o.in_order ~= false), tiles(o, "rows"), tostring(overlap_of(o)),
                                                   tostring(delta_pdl_of(o)))
  if not compiled[key] then
    local ks = o.fused and { build_delta(o), build_dq_convert(o), build_dkdv(o) } or { build_delta(o), build_dq(o), build_dkdv(o) }
    for _, k in ipairs(ks) do k:compile() end
    compiled[key] = ks
  end
  return compiled[key]
end

-- The backward of problem o (b, h, hkv, sq, skv, d, causal, scale) on device
-- buffers x: q, k, v, o, dout, lse (the forward's) -> lse2, delta (each
-- row_floats(o) floats), dq, dk, dv
-- (three launches on the stream, not waited for; only: 1, 2 or 3 launches
-- that program alone, never a programmatic dependent launch; by default the
-- second and third are programmatic dependent launches; o.overlap = "dq":
-- Delta, dK/dV, dQ). o.fused: Delta (zeroing x.dqacc, f32 [B, H, SQ, D]),
-- the fused dK/dV/dQ program, then dQ from x.dqacc (only: 1, 3, 2 in that order).
local function launch(o, x, only)
  local ks, G = kernels(o), programs(o)
  local q4, kv4, rows = { o.b, o.h, o.sq, o.d }, { o.b, o.hkv, o.skv, o.d }, { o.b, o.h, o.sq }
  local sqp = padded(o.sq)
  local function prows(buf) return { buffer = buf, shape = rows, strides = { o.h * sqp, sqp, 1 } } end
  local scale, group = o.scale or 1 / math.sqrt(o.d), o.h // o.hkv
  if not only or only == 1 then
    ks[1]:launch { grid = G[1], args = { O = { x.o, q4 }, dO = { x.dout, q4 }, LSE = { x.lse, rows }, Delta = prows(x.delta),
                                        LSE2 = prows(x.lse2), H = o.h, dQacc = o.fused and { x.dqacc, q4 } or nil } }
  end
  local common = { Q = { x.q, q4 }, K = { x.k, kv4 }, V = { x.v, kv4 }, dO = { x.dout, q4 }, LSE2 = prows(x.lse2),
                   Delta = prows(x.delta), group = group, scale = scale }
  local function with(more)
    local a = {}
    for key, v in pairs(common) do a[key] = v end
    for key, v in pairs(more) do a[key] = v end
    return a
  end
  if o.fused then
    if not only or only == 3 then
      ks[3]:launch { grid = G[3], args = with { dK = { x.dk, kv4 }, dV = { x.dv, kv4 }, dQacc = { x.dqacc, q4 }, SQ = o.sq,
                                               HKV = o.hkv } }
    end
    if not only or only == 2 then
      ks[2]:launch { grid = G[1], args = { dQacc = { x.dqacc, q4 }, dQ = { x.dq, q4 }, H = o.h, scale = scale } }
    end
    return
  end
  local function pdl(which) -- (a program launched alone: no predecessor to overlap)
    return not only and (overlap_of(o) == which or (first_of(o) == which and delta_pdl_of(o))) or nil
  end
  local function dq() ks[2]:launch { grid = G[2], args = with { dQ = { x.dq, q4 }, SKV = o.skv, H = o.h }, pdl = pdl "dq" } end
  local function dkdv()
    ks[3]:launch { grid = G[3], args = with { dK = { x.dk, kv4 }, dV = { x.dv, kv4 }, SQ = o.sq, HKV = o.hkv }, pdl = pdl "dkdv" }
  end
  if overlap_of(o) == "dq" then -- dK/dV, then dQ (filling the SMs that dK/dV's last programs leave)
    if not only or only == 3 then dkdv() end
    if not only or only == 2 then dq() end
    return
  end
  if not only or only == 2 then dq() end
  if not only or only == 3 then dkdv() end
end

-- The floats of LSE2's and of Delta's buffer for problem o (rows padded).
local function row_floats(o) return o.b * o.h * padded(o.sq) end

local example = { name = "attention_bwd", build_delta = build_delta, build_dq = build_dq, build_dkdv = build_dkdv,
                  build_dq_convert = build_dq_convert, padded = padded, row_floats = row_floats,
                  tiles = tiles, programs = programs, kernels = kernels, launch = launch, LOG2E = LOG2E,
                  overlap_of = overlap_of, delta_pdl_of = delta_pdl_of }
if ... == "--library" then return example end

-- As a script: the three programs of a head dim through tile-to-ptx and ptxas
-- (spec/attention_bwd_gpu_spec.lua runs them on the GPU against a reference).
local o = { d = 128 }
for _, a in ipairs(arg or {}) do
  local key, v = a:match "^%-%-([%w_-]+)=(.*)$"
  if key and key ~= "emit" and key ~= "stage" then o[key] = math.tointeger(tonumber(v)) or v end
  if a == "--causal" then o.causal = true end
  if a == "--fused" then o.fused = true end
  for _, f in ipairs { "in_order", "overlap", "delta_pdl" } do
    if o[f] == "false" then o[f] = false end
  end
end
local check = require "tilua.gpu.check"
for _, b in ipairs(o.fused and { build_delta, build_dq_convert, build_dkdv } or { build_delta, build_dq, build_dkdv }) do
  local k = b(o)
  check.compile(k.op:attr "sym_name", k)
end
