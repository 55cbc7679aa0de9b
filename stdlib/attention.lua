-- stdlib/attention.lua: a Hopper attention forward written with the public
-- surface only, the FlashAttention-3 design (docs/attention.md):
--
--   O[b, h] = softmax(Q[b, h] . K[b, h / g]^T * scale (+ causal mask)) . V[b, h / g]
--   LSE[b, h, i] = log(sum_j exp(s_ij))       (natural log, the scaled scores)
--
--   local a = tl.attention.build{ b = 2, h = 16, hkv = 4, sq = 4096, skv = 4096, d = 128,
--                                 causal = false, dtype = "bf16", scale = 1 / sqrt(d),
--                                 bn = 128, consumers = 2, stages = 2, pingpong = true,
--                                 schedule = "persistent" | "data_parallel", o_in_q = auto }
--   a.kernel                    the tilua kernel
--   a:run{ q = bufQ, k = bufK, v = bufV, o = bufO, lse = bufLSE }   (B, H, S, D row-major)
--   a:check{ q, k, v, o, lse } -> ok, report   (a plain reference kernel, every element)
--   a.flops, a.grid, a.smem
--
-- The kernel (one CTA a SM, persistent; 128 (1 + consumers) threads):
--   producer warpgroup   setmaxnreg.dec; one elected thread walks the CTA's work
--                        tiles (m block, head, batch) and streams, per tile, Q
--                        (a one-stage pipeline) and the K and V blocks of the
--                        tile's keys, last block first, each through a TMA ring
--                        of its own (K_j before V_{j+1}, the order the consumers
--                        read them).
--   consumer warpgroups  setmaxnreg.inc; each owns 64 rows of the m block. Per k
--                        block j: S_j = Q K_j^T (wgmma from descriptors), issued
--                        *before* the softmax of S_{j-1} is done with (the
--                        previous iteration's P_{j-1} V_{j-1} is issued right
--                        after it, from registers: P is the wgmma's A operand,
--                        packed bf16 pairs of the S accumulator's registers,
--                        never in shared memory); a seq_bar ring orders the
--                        warpgroups' GEMM issues so that one's softmax overlaps
--                        the other's GEMMs. The softmax is online, in the log2
--                        domain: exp2(s * scale log2(e) - m), the running max
--                        and sum per row in registers (a row is a quad of
--                        lanes: two shuffles for the max; the sum reduced once,
--                        at the end). The blocks that cross the causal diagonal
--                        or the end of the keys are masked, the others not.
--                        Epilogue: O / l to bf16, stmatrix into a swizzled
--                        staging buffer (Q's own rows when the stages leave no
--                        room), TMA store; the log-sum-exp per row.
-- Sequence lengths need not be multiples of the tile: TMA zero-fills the rows
-- past the end and clips the stores; the keys past the end are masked.
local tl = require "tilua" -- the library being built (init.lua registers it before its rooms)
local G = require "tilua.stdlib.gemm"

local M = {}

local LOG2E, LN2 = 1.4426950408889634, 0.6931471805599453
local SMEM_LIMIT = 227 * 1024 -- a block's shared memory on sm_90a

do -- tl.attention: the generator and the check
  local raise = tl.raise
  tl.attention = tl.attention or {}

  local function elem_type(name)
    if name == "bf16" then return tl.bf16 elseif name == "f16" then return tl.f16 end
    raise(("attention: dtype must be bf16 or f16, got %s"):format(tostring(name)))
  end

  local function posint(c, key, what)
    if math.type(c[key]) ~= "integer" or c[key] < 1 then raise(("attention.build: '%s' must be a positive integer%s"):format(key, what or "")) end
  end

  -- The shared memory of a configuration: Q, the K and V rings, the output's
  -- staging (none where it takes Q's rows), 256 bytes of barriers.
  function M.smem_bytes(c)
    local q = c.bm * c.d * 2
    local kv = 2 * c.stages * c.bn * c.d * 2
    return q + kv + (c.o_in_q and 0 or q) + 1024 + 256
  end

  -- Default tiles per head dim (FlashAttention-3's, within our shared memory).
  local DEFAULT = { [64] = { bn = 128, consumers = 3 }, [128] = { bn = 128, consumers = 2 },
                    [256] = { bn = 64, consumers = 2 } }

  local function cfg_of(o)
    if type(o) ~= "table" then raise("attention.build: expected a table of options") end
    local c = {}
    for key, v in pairs(o) do c[key] = v end
    c.b = c.b or 1
    c.hkv = c.hkv or c.h
    c.skv = c.skv or c.sq
    for _, key in ipairs { "b", "h", "hkv", "sq", "skv", "d" } do posint(c, key) end
    if c.h % c.hkv ~= 0 then raise(("attention.build: hkv (%d) must divide h (%d)"):format(c.hkv, c.h)) end
    if not DEFAULT[c.d] then raise(("attention.build: head dim d must be 64, 128 or 256, got %d"):format(c.d)) end
    c.dtype = c.dtype or "bf16"
    elem_type(c.dtype)
    c.causal = c.causal and true or false
    c.scale = c.scale or 1 / math.sqrt(c.d)
    if type(c.scale) ~= "number" or c.scale <= 0 then raise("attention.build: scale must be a positive number") end
    local dflt = DEFAULT[c.d]
    c.bn = c.bn or dflt.bn
    c.consumers = c.consumers or dflt.consumers
    c.stages = c.stages or 2
    if c.pingpong == nil then c.pingpong = true end -- the consumers' turns at the GEMMs (seq_bars)
    if c.bn % 16 ~= 0 or c.bn < 16 or c.bn > 256 then raise("attention.build: bn must be a multiple of 16 in [16, 256]") end
    if c.consumers < 1 or c.consumers > 3 then raise("attention.build: consumers must be 1, 2 or 3 warpgroups") end
    posint(c, "stages")
    c.schedule = c.schedule or "persistent"
    if c.schedule ~= "persistent" and c.schedule ~= "data_parallel" then
      raise(("attention.build: schedule must be persistent or data_parallel, got %s"):format(tostring(c.schedule)))
    end
    c.bm = 64 * c.consumers
    c.tm = (c.sq + c.bm - 1) // c.bm
    c.nkv = (c.skv + c.bn - 1) // c.bn
    c.tiles = c.tm * c.h * c.b
    if c.o_in_q == nil then
      c.o_in_q = false
      if M.smem_bytes(c) > SMEM_LIMIT then c.o_in_q = true end
    end
    if M.smem_bytes(c) > SMEM_LIMIT then
      raise(("attention.build: %d bytes of shared memory (d %d, bn %d, %d stages) do not fit %d"):format(
        M.smem_bytes(c), c.d, c.bn, c.stages, SMEM_LIMIT))
    end
    c.name = c.name or ("attention_%s_d%d%s"):format(c.dtype, c.d, c.causal and "_causal" or "")
    return c
  end

  -- {===================================================================
  -- The kernel
  -- ====================================================================

  local function build_kernel(c)
    local ein = elem_type(c.dtype)
    local D, BN, BM, NC, S = c.d, c.bn, c.bm, c.consumers, c.stages
    local QT = tl.tensor_map_type(ein, { 1, 1, 64, 64 }, 128)
    local KT = tl.tensor_map_type(ein, { 1, 1, BN, 64 }, 128)
    local params = { { "Q", QT }, { "K", KT }, { "V", KT }, { "O", QT }, { "LSE", tl.ptr(tl.f32) },
                     { "B", tl.i32 }, { "H", tl.i32 }, { "HKV", tl.i32 }, { "SQ", tl.i32 }, { "SKV", tl.i32 },
                     { "scale", tl.f32 } }
    local k = tl.kernel(c.name, { params = params, block = 128 * (NC + 1) })
    local KV_BYTES = BN * D * 2
    k:define(function(k, p)
      local sQ = k:shared(ein, { NC, D // 64, 64, 64 }, { align = 1024, swizzle = 128 })
      local sK = k:shared(ein, { S, D // 64, BN, 64 }, { align = 1024, swizzle = 128 })
      local sV = k:shared(ein, { S, D // 64, BN, 64 }, { align = 1024, swizzle = 128 })
      local sO = c.o_in_q and sQ or k:shared(ein, { NC, D // 64, 64, 64 }, { align = 1024, swizzle = 128 })
      local consumers = { { 4, 4 * NC } }
      local pq = k:pipeline { stages = 1, producers = { { 0, 1 } }, consumers = consumers, transaction_bytes = BM * D * 2, mode = "cooperative" }
      local pk = k:pipeline { stages = S, producers = { { 0, 1 } }, consumers = consumers, transaction_bytes = KV_BYTES, mode = "cooperative" }
      local pv = k:pipeline { stages = S, producers = { { 0, 1 } }, consumers = consumers, transaction_bytes = KV_BYTES, mode = "cooperative" }
      local go = {}
      for w = 1, (NC > 1 and c.pingpong) and NC or 0 do go[w] = k:seq_bar { depth = 1, arrive_count = 128 } end
      local sm = M.problem(tl, c, { b = p.B, h = p.H, hkv = p.HKV, sq = p.SQ, skv = p.SKV, scale = p.scale })
      sm.q, sm.k, sm.v, sm.o, sm.pq, sm.pk, sm.pv, sm.go = sQ, sK, sV, sO, pq, pk, pv, go

      -- the work tiles (m block, head, batch), m fastest: the CTAs at work at
      -- once share their heads' K and V in L2. Persistent: a CTA a SM walks
      -- them; data-parallel: a CTA a tile (the hardware hands out the CTAs)
      local function scheduler()
        local o = { tiles = { sm.tm, sm.h, sm.b, 1 }, swizzle = 1 }
        if c.schedule == "data_parallel" then return tl.sched.data_parallel(o) end
        o.workers = tl.grid_dim("x")
        return tl.sched.static_persistent(o)
      end
      local function tiles(cursors, body) G.tile_loop(tl, scheduler():work(tl.block_id()), cursors, { body }) end

      -- {=== the producer warpgroup
      k:agent("producer", { warps = 4 }, function()
        -- (32 x 128 + 240 x 256 = 32 x 128 + 160 x 384 = 65536: the registers
        -- of the SM; one consumer warpgroup has its 248 from the start)
        if NC > 1 then tl.setmaxnreg(32, "dec") end
        k:async_exec("producer", { first_warp = 0, warps = 1 }, function()
          local stq, stk, stv = pq:producer_start(), pk:producer_start(), pv:producer_start()
          tl.elect_one(function()
            tl.tensor_map_prefetch(p.Q)
            tl.tensor_map_prefetch(p.K)
            tl.tensor_map_prefetch(p.V)
            tiles({ stq, stk, stv }, function(work)
              local t = M.tile_of(tl, c, sm, work)
              M.load_q(tl, c, sm, p.Q, stq, t)
              M.load_kv(tl, c, sm, p.K, p.V, stk, stv, t)
            end)
            pq:producer_tail(stq)
            pk:producer_tail(stk)
            pv:producer_tail(stv)
          end)
        end)
      end)
      -- }===

      -- {=== the consumer warpgroups
      k:agent("consumer", { warps = 4 * NC }, function(a)
        if NC > 1 then tl.setmaxnreg(NC == 2 and 240 or 160, "inc") end
        k:async_exec("consumer", { first_warp = 4, warps = 4 * NC }, function()
          local wg = a:warp_id() // 4
          local t = a:thread_id() % 128
          local stq, stk, stv = pq:consumer_start(), pk:consumer_start(), pv:consumer_start()
          local turn = #go > 1 and M.turn_state(tl, go, wg) or nil
          local cur = { stq, stk, stv }
          if turn then cur[4] = turn end
          local ctx = { wg = wg, t = t, f = tl.wgmma_fragment(t), stq = stq, stk = stk, stv = stv, turn = turn }
          tiles(cur, function(work)
            local tile = M.tile_of(tl, c, sm, work)
            local res = M.consumer_tile(tl, c, sm, ctx, tile)
            M.epilogue(tl, c, sm, ctx, tile, res, p.O, p.LSE)
          end)
          -- the last stores must have read the staging buffer before the CTA leaves
          tl.if_(t:eq(0), function() tl.bulk_wait(0, { read = true }) end)
        end)
      end)
      -- }===
    end)
    return k
  end

  -- }===================================================================

  -- The grid of problem p (b, h, sq) for configuration c: a CTA a work tile
  -- (data-parallel), or at most one a SM (c.sms) (persistent).
  function M.grid(c, p)
    local tiles = (p.sq + c.bm - 1) // c.bm * p.h * p.b
    if c.schedule == "data_parallel" then return tiles end
    return math.max(1, math.min(c.sms, tiles))
  end

  tl.attention.config = cfg_of
  function tl.attention.build(o)
    local c = cfg_of(o)
    local sms = c.sms or (tl.device.available() and tl.device.sm_count() or 132)
    c.sms = sms
    c.grid = M.grid(c, c)
    local per_head = 4.0 * c.sq * c.skv * c.d
    if c.causal then per_head = per_head / 2 end
    local a = setmetatable({ cfg = c, grid = c.grid, smem = M.smem_bytes(c), flops = per_head * c.b * c.h }, M.Attention)
    local saved = tl.module() -- each kernel is a module of its own
    tl.new_module()
    a.kernel = tl.at_caller(build_kernel, c)
    tl.set_module(saved)
    return a
  end

  M.Attention = {}
  M.Attention.__index = M.Attention

  -- The tensor maps of Q, K, V and O (B, H, S, D row-major buffers).
  function M.Attention:maps(q, kk, v, o)
    local c = self.cfg
    local function map(buf, h, s, box)
      return tl.device.tensor_map { buffer = buf, dtype = c.dtype, shape = { c.b, h, s, c.d }, box = box, swizzle = 128 }
    end
    return map(q, c.h, c.sq, { 1, 1, 64, 64 }), map(kk, c.hkv, c.skv, { 1, 1, c.bn, 64 }),
           map(v, c.hkv, c.skv, { 1, 1, c.bn, 64 }), map(o, c.h, c.sq, { 1, 1, 64, 64 })
  end

  -- a:run{q, k, v, o, lse}: launches (asynchronously) on the build's problem;
  -- returns self.
  function M.Attention:run(o)
    local c = self.cfg
    local m = self._maps
    if not m or m.q ~= o.q or m.k ~= o.k or m.v ~= o.v or m.o ~= o.o then
      local mq, mk, mv, mo = self:maps(o.q, o.k, o.v, o.o)
      m = { q = o.q, k = o.k, v = o.v, o = o.o, mq, mk, mv, mo }
      self._maps = m
    end
    self.kernel:launch { grid = self.grid, args = { m[1], m[2], m[3], m[4], o.lse, c.b, c.h, c.hkv, c.sq, c.skv, c.scale } }
    return self
  end

  -- {===================================================================
  -- Checking: a plain reference kernel on the GPU, every element
  -- ====================================================================

  -- R[b, h, i, :] (f32) and RL[b, h, i]: a block of 128 threads a row; each
  -- thread scores the keys j = t (mod 128) in f32, the block reduces the max
  -- and the sum through shared memory, then each thread sums p_j v_j for its
  -- columns. The probabilities stay in shared memory (skv floats).
  local function reference_kernel(c)
    local ein = elem_type(c.dtype)
    local T = 128
    local params = { { "Q", tl.ptr(ein) }, { "K", tl.ptr(ein) }, { "V", tl.ptr(ein) }, { "R", tl.ptr(tl.f32) },
                     { "RL", tl.ptr(tl.f32) } }
    local k = tl.kernel(c.name .. "_reference", { params = params, block = T })
    k:define(function(k, p)
      local ps = k:shared(tl.f32, c.skv) -- the row's scores, then probabilities
      local red = k:shared(tl.f32, T // 32)
      local row = tl.block_id("x") -- the query row
      local hh, bb = tl.block_id("y"), tl.block_id("z")
      local hk = hh // (c.h // c.hkv)
      local t = tl.thread_id("x")
      local q0 = ((bb * c.h + hh):cast(tl.i64) * c.sq + row:cast(tl.i64)) * c.d
      local kv0 = (bb * c.hkv + hk):cast(tl.i64) * c.skv * c.d
      local limit = c.causal and tl.min(row + 1, tl.const(c.skv, tl.i32)) or tl.const(c.skv, tl.i32)
      local ninf = tl.const(-math.huge, tl.f32)
      local zero = tl.const(0.0, tl.f32)
      -- block-wide reduce of v (max or add) through red[]
      local function block_reduce(v, comb)
        for _, s in ipairs { 16, 8, 4, 2, 1 } do v = comb(v, tl.shfl_xor(v, s)) end
        tl.barrier()
        tl.if_((t % 32):eq(0), function() tl.store(red + t // 32, v) end)
        tl.barrier()
        local r = tl.load(red)
        for w = 1, T // 32 - 1 do r = comb(r, tl.load(red + w)) end
        return r
      end
      local mx = tl.for_range(t, tl.const(c.skv, tl.i32), T, { ninf }, function(j, m)
        local s = tl.for_range(tl.const(0, tl.i64), tl.const(c.d, tl.i64), { zero }, function(e, acc)
          local qe = tl.load(p.Q + (q0 + e)):cast(tl.f32)
          local ke = tl.load(p.K + (kv0 + j:cast(tl.i64) * c.d + e)):cast(tl.f32)
          return tl.fma(qe, ke, acc)
        end)
        s = tl.select(j:lt(limit), s * tl.const(c.scale, tl.f32), ninf)
        tl.store(ps + j, s)
        return tl.max(m, s)
      end)
      mx = block_reduce(mx, tl.max)
      local sum = tl.for_range(t, tl.const(c.skv, tl.i32), T, { zero }, function(j, acc)
        local e = tl.ex2((tl.load(ps + j) - mx) * tl.const(LOG2E, tl.f32))
        tl.store(ps + j, e)
        return acc + e
      end)
      sum = block_reduce(sum, function(a, b) return a + b end)
      tl.barrier()
      local inv = tl.const(1.0, tl.f32) / sum
      tl.for_range(t, tl.const(c.d, tl.i32), T, {}, function(e)
        local acc = tl.for_range(tl.const(0, tl.i32), tl.const(c.skv, tl.i32), { zero }, function(j, a)
          local v = tl.load(p.V + (kv0 + j:cast(tl.i64) * c.d + e:cast(tl.i64))):cast(tl.f32)
          return tl.fma(tl.load(ps + j), v, a)
        end)
        tl.store(p.R + (q0 + e:cast(tl.i64)), acc * inv)
      end)
      tl.if_(t:eq(0), function()
        local at = (bb * c.h + hh):cast(tl.i64) * c.sq + row:cast(tl.i64)
        tl.store(p.RL + at, mx + tl.lg2(sum) * tl.const(LN2, tl.f32))
      end)
    end)
    return k
  end

  -- bad[0] += #{ i : |X[i] - R[i]| > tol(i) }, bad[1] = max |X - R| (f32 bits):
  -- O within its rounding (the P operand rounded to 16 bits, then O): a
  -- relative 2^-7 of the largest |v| of the head (the bound of a convex
  -- combination of V) plus 2^-8 |R|; the log-sum-exp within 1e-3 (1 + |R|).
  local function compare_kernel(c, what)
    local ein = elem_type(c.dtype)
    local k = tl.kernel(c.name .. "_compare_" .. what, {
      params = { { "X", what == "o" and tl.ptr(ein) or tl.ptr(tl.f32) }, { "R", tl.ptr(tl.f32) },
                 { "bad", tl.ptr(tl.i32) }, { "n", tl.i64 }, { "vmax", tl.f32 } },
      block = 256 })
    k:define(function(k, p)
      local i = tl.global_id("x"):cast(tl.i64)
      tl.if_(i:lt(p.n), function()
        local x, r = (p.X + i):load():cast(tl.f32), (p.R + i):load()
        local err = tl.max(x - r, r - x)
        local ar = tl.max(r, tl.const(0, tl.f32) - r)
        local tol = what == "o" and (p.vmax * tl.const(2 ^ -7, tl.f32) + ar * tl.const(2 ^ -8, tl.f32))
                    or (ar + tl.const(1, tl.f32)) * tl.const(1e-3, tl.f32)
        tl.if_(err:gt(tol) | err:ne(err), function() tl.atomic_add(p.bad, 1) end)
        tl.atomic_max(p.bad + 1, tl.min(err, tl.const(3.0e38, tl.f32)):bitcast(tl.i32))
      end)
    end)
    return k
  end

  -- The reference kernels (in a module of their own), once.
  local function checkers(self)
    if not self._ref then
      local saved = tl.module()
      tl.new_module()
      self._ref = reference_kernel(self.cfg)
      self._cmp_o = compare_kernel(self.cfg, "o")
      self._cmp_l = compare_kernel(self.cfg, "lse")
      tl.set_module(saved)
    end
  end

  -- a:reference{q, k, v} -> R (f32, B x H x SQ x D), RL (f32, B x H x SQ): the
  -- reference kernel's O and log-sum-exp (device buffers the caller closes).
  function M.Attention:reference(o)
    local c = self.cfg
    if c.skv > 12 * 1024 then raise("attention: the reference kernel holds a row's scores in shared memory: at most 12288 keys") end
    checkers(self)
    local R = tl.device.alloc(tl.f32, c.b * c.h * c.sq * c.d)
    local RL = tl.device.alloc(tl.f32, c.b * c.h * c.sq)
    self._ref:launch { grid = { c.sq, c.h, c.b }, args = { o.q, o.k, o.v, R, RL } }
    return R, RL
  end

  -- One row of O and its log-sum-exp on the CPU (doubles): b, h, i 0-based.
  local function cpu_row(c, q, kk, v, b, h, i)
    local hk = h // (c.h // c.hkv)
    local qr = q:to_table(((b * c.h + h) * c.sq + i) * c.d + 1, ((b * c.h + h) * c.sq + i + 1) * c.d)
    local k0 = (b * c.hkv + hk) * c.skv * c.d
    local lim = c.causal and math.min(c.skv, i + 1) or c.skv
    local kr, vr = kk:to_table(k0 + 1, k0 + lim * c.d), v:to_table(k0 + 1, k0 + lim * c.d)
    local s, mx = {}, -math.huge
    for j = 0, lim - 1 do
      local x = 0
      for e = 1, c.d do x = x + qr[e] * kr[j * c.d + e] end
      s[j] = x * c.scale
      mx = math.max(mx, s[j])
    end
    local sum = 0
    for j = 0, lim - 1 do
      s[j] = math.exp(s[j] - mx)
      sum = sum + s[j]
    end
    local out = {}
    for e = 1, c.d do
      local x = 0
      for j = 0, lim - 1 do x = x + s[j] * vr[j * c.d + e] end
      out[e] = x / sum
    end
    return out, mx + math.log(sum)
  end

  -- a:check{q, k, v, o, lse [, reference = {R, RL}] [, samples = 3] [, seed]}
  -- -> ok, report: O and the log-sum-exp against the reference kernel's (or
  -- the given reference's), every element, and `samples` rows against the CPU.
  function M.Attention:check(o)
    local c = self.cfg
    local Dv = tl.device
    checkers(self)
    local n, nl = c.b * c.h * c.sq * c.d, c.b * c.h * c.sq
    local R, RL
    if o.reference then R, RL = o.reference[1], o.reference[2] else R, RL = self:reference(o) end
    local bad <close> = Dv.alloc(tl.i32, 2)
    local badl <close> = Dv.alloc(tl.i32, 2)
    bad:fill(0)
    badl:fill(0)
    local vmax = o.vmax or 0
    if not o.vmax then
      for _, x in ipairs(o.v:to_table(1, math.min(1 << 16, c.b * c.hkv * c.skv * c.d))) do vmax = math.max(vmax, math.abs(x)) end
    end
    self._cmp_o:launch { grid = (n + 255) // 256, args = { o.o, R, bad, n, vmax } }
    self._cmp_l:launch { grid = (nl + 255) // 256, args = { o.lse, RL, badl, nl, vmax } }
    Dv.synchronize()
    local b = bad:to_table()
    b[3], b[4] = table.unpack(badl:to_table())
    if not o.reference then R:free() RL:free() end
    local function f(bits) return string.unpack("<f", string.pack("<i4", bits)) end
    local ok = b[1] == 0 and b[3] == 0
    local report = ("O: %d of %d elements off the reference (max error %.3g); LSE: %d of %d off (max error %.3g)")
      :format(b[1], n, f(b[2]), b[3], nl, f(b[4]))
    -- CPU rows: the first, the last, and one at random
    local rng = (o.seed or 1) * 2654435761 % 4294967296
    local rows = { { 0, 0, 0 }, { c.b - 1, c.h - 1, c.sq - 1 }, { rng % c.b, (rng // 7) % c.h, (rng // 61) % c.sq } }
    local worst, nbad = 0, 0
    for r = 1, math.min(o.samples or 3, #rows) do
      local bb, hh, i = rows[r][1], rows[r][2], rows[r][3]
      local ref, lse = cpu_row(c, o.q, o.k, o.v, bb, hh, i)
      local at = ((bb * c.h + hh) * c.sq + i) * c.d
      local got = o.o:to_table(at + 1, at + c.d)
      for e = 1, c.d do
        local err = math.abs(got[e] - ref[e])
        worst = math.max(worst, err)
        if err > vmax * 2 ^ -7 + math.abs(ref[e]) * 2 ^ -8 then nbad = nbad + 1 end
      end
      local gl = o.lse:to_table((bb * c.h + hh) * c.sq + i + 1, (bb * c.h + hh) * c.sq + i + 1)[1]
      if math.abs(gl - lse) > 1e-3 * (1 + math.abs(lse)) then nbad = nbad + 1 end
    end
    report = report .. ("; %d CPU rows: %d values off (max error %.3g)"):format(math.min(o.samples or 3, #rows), nbad, worst)
    return ok and nbad == 0, report
  end

  -- }===================================================================
end

-- {=====================================================================
-- The pieces (the tile programs' lowering builds attention with them too)
-- ======================================================================
--
-- A configuration c: d (head dim), bn (keys a block), bm (rows a tile, 64 a
-- consumer warpgroup), consumers, stages, sq / skv (numbers or i32 values),
-- h, hkv, causal, scale. sm: the shared buffers and pipelines ({q, k, v, o,
-- pq, pk, pv, go}): sQ {consumers, d / 64, 64, 64}, sK and sV {stages, d / 64,
-- bn, 64} (128-byte swizzle: boxes of 64 columns).

-- The problem's sizes as i32 values of the kernel (b, h, hkv, sq, skv: numbers
-- or values) and its scale (an f32 value or a number) -> the table of the
-- kernel's attention state, with tm (m blocks), group (query heads a key
-- head) and cl (the scale times log2(e)); the caller adds the shared
-- buffers and pipelines.
function M.problem(tl, c, x)
  local A = {}
  for _, key in ipairs { "b", "h", "hkv", "sq", "skv" } do A[key] = tl.cast(x[key], tl.i32) end
  A.tm = (A.sq + (c.bm - 1)) // c.bm
  A.group = A.h // A.hkv
  A.cl = tl.cast(x.scale, tl.f32) * tl.const(LOG2E, tl.f32)
  return A
end

-- The work tile `work` of the scheduler (tiles {m blocks, h, b}): its m block,
-- head, batch and key head (grouped-query: h / (h / hkv)); causal tiles are
-- walked from the last m block (the longest first).
function M.tile_of(tl, c, A, work)
  local m = work:m()
  if c.causal then m = A.tm - 1 - m end
  local h = work:n()
  return { m = m, h = h, b = work:l(), hk = h // A.group }
end

-- The k blocks of a tile: n (how many the tile reads: all of the keys, or
-- those left of the causal diagonal) and masked (how many of them, the last,
-- cross the diagonal or the end of the keys). -> n, masked (i32 values)
function M.kv_blocks(tl, c, A, tile)
  local BN, skv = c.bn, A.skv
  local full = skv // BN -- blocks wholly inside the keys
  local n = (skv + (BN - 1)) // BN
  local unmasked = full
  if c.causal then
    local first_row = tile.m * c.bm
    n = tl.min(n, (first_row + (c.bm + BN - 1)) // BN)
    unmasked = tl.min(full, (first_row + 1) // BN) -- whole blocks left of every row's diagonal
  end
  return n, n - unmasked
end

-- The producer's loads of Q for a tile: a box of 64 x 64 a consumer and a
-- swizzle span of the head dim.
function M.load_q(tl, c, sm, map, st, tile)
  local pipe = sm.pq
  pipe:producer_acquire(st)
  local full = pipe:full_barrier(st)
  for w = 0, c.consumers - 1 do
    for x = 0, c.d // 64 - 1 do
      tl.tma_load(sm.q:ptr(w, x), map, full, { tile.b, tile.h, tile.m * c.bm + 64 * w, tl.const(64 * x, tl.i32) })
    end
  end
  pipe:producer_commit(st)
  st:advance()
end

-- One block of keys (K or V) into a stage of its ring.
local function load_block(tl, c, pipe, ring, map, st, tile, n)
  pipe:producer_acquire(st)
  local full, s = pipe:full_barrier(st), st:index()
  for x = 0, c.d // 64 - 1 do
    tl.tma_load(ring:ptr(s, x), map, full, { tile.b, tile.hk, n * c.bn, tl.const(64 * x, tl.i32) })
  end
  pipe:producer_commit(st)
  st:advance()
end

-- The producer's loads of a tile's K and V blocks, last first, in the order
-- the consumers read them: K_0, then K_j and V_{j-1}, then V_last.
function M.load_kv(tl, c, sm, kmap, vmap, stk, stv, tile)
  local n = M.kv_blocks(tl, c, sm, tile)
  load_block(tl, c, sm.pk, sm.k, kmap, stk, tile, n - 1)
  tl.cutlass.for_range(tl.const(1, tl.i32), n, { stk, stv }, function(j)
    load_block(tl, c, sm.pk, sm.k, kmap, stk, tile, n - 1 - j)
    load_block(tl, c, sm.pv, sm.v, vmap, stv, tile, n - j)
  end)
  load_block(tl, c, sm.pv, sm.v, vmap, stv, tile, tl.const(0, tl.i32))
end

-- {=== the consumer warpgroups' turns: a ring of seq_bars

-- fn(w) for w = wg + 1 (an if-chain on the warp-uniform wg: one code for
-- every warpgroup); fn returns a seq_bar state or nothing -> the state's value
-- (nil when fn returns nothing).
local function by_warpgroup(tl, n, wg, fn)
  local function call(w)
    local st = fn(w)
    if st then return st.value end
  end
  local function from(w)
    if w == n then return call(w) end
    return tl.if_(wg:eq(w - 1), function() return call(w) end, function() return from(w + 1) end)
  end
  return from(1)
end

-- The state of warpgroup wg's turns (warpgroup 0 goes first).
function M.turn_state(tl, go, wg)
  local mt
  local v = by_warpgroup(tl, #go, wg, function(w)
    local st = go[w]:state { phase = w == 1 and 1 or 0 }
    mt = getmetatable(st)
    return st
  end)
  return setmetatable({ value = v, bar = go[1] }, mt)
end

-- Wait for this warpgroup's turn to issue its GEMMs.
local function turn_wait(tl, go, ctx)
  if not ctx.turn then return end
  local st = ctx.turn
  by_warpgroup(tl, #go, ctx.wg, function(w) go[w]:wait(st) end)
end

-- Hand the turn to the next warpgroup (arrive on its seq_bar; the state advances).
local function turn_pass(tl, go, ctx)
  if not ctx.turn then return end
  local before, mt = ctx.turn.value, getmetatable(ctx.turn)
  ctx.turn.value = by_warpgroup(tl, #go, ctx.wg, function(w)
    local st = setmetatable({ value = before, bar = go[w] }, mt)
    go[w % #go + 1]:arrive(st)
    return st
  end)
end

-- }===

-- {=== the GEMMs

-- S = Q K_s^T for this warpgroup's 64 rows (a vector<bn/2 x f32>): d/16 wgmma
-- m64n{bn}k16 from descriptors (K-major both; a k step of 16 moves along the
-- 128-byte row, into the next box every 4 steps), committed. The caller
-- fences (wgmma_fence) once the registers the GEMMs read are written. acc:
-- the registers to write (their values unread: the first step has scale-d
-- off), the last S's when a loop carries them, so that no copy is made.
function M.qk(tl, c, sm, wg, s, acc)
  acc = acc or tl.zeros(tl.f32, c.bn // 2)
  for kk = 0, c.d // 16 - 1 do
    local x, col = kk * 16 // 64, kk * 16 % 64
    local da = tl.wgmma_desc(sm.q:ptr(wg, x, 0, col), { swizzle = 128, sbo = 1024 })
    local db = tl.wgmma_desc(sm.k:ptr(s, x, 0, col), { swizzle = 128, sbo = 1024 })
    local o = { type_a = c.dtype, type_b = c.dtype }
    if kk == 0 then o.scale_d = false end -- S = Q K^T from the first step
    acc = tl.wgmma(acc, da, db, o)
  end
  tl.wgmma_commit()
  return acc
end

-- P's registers as the A operands of the PV GEMM: a vector<4 x i32> a k step
-- of 16 keys (the packed pairs of the S fragment's elements 8 kk .. 8 kk + 7,
-- which is the A fragment's layout). Built before the fence.
function M.p_operands(tl, c, pvec)
  local a = {}
  for kk = 0, c.bn // 16 - 1 do
    local r = {}
    for j = 1, 4 do r[j] = tl.extract(pvec, 4 * kk + j - 1) end
    a[kk] = tl.vector_of(tl.i32, r)
  end
  return a
end

-- O += P V_s: bn/16 wgmma m64n{d}k16, A = P from registers (M.p_operands),
-- B = V MN-major (64-column atoms a box apart). Committed.
function M.pv(tl, c, sm, o, pa, s)
  for kk = 0, c.bn // 16 - 1 do
    local db = tl.wgmma_desc(sm.v:ptr(s, 0, kk * 16, 0), { swizzle = 128, lbo = c.bn * 128, sbo = 1024 })
    o = tl.wgmma(o, pa[kk], db, { type_a = c.dtype, type_b = c.dtype, trans_b = true })
  end
  tl.wgmma_commit()
  return o
end

-- }===

-- {=== the online softmax on a fragment

-- The scores of S (vector) as f32 values vals[0 ..]; masked: -inf where the
-- key is past the end or (causal) right of the row's diagonal.
local function scores(tl, c, A, ctx, S, rows0, nblock, masked)
  local f = ctx.f
  local vals = {}
  for i = 0, c.bn // 2 - 1 do vals[i] = tl.extract(S, i) end
  if not masked then return vals end
  local ninf = tl.const(-math.huge, tl.f32)
  local col0 = nblock * c.bn + f.col
  local lim = {}
  for r = 0, 1 do -- the first column masked in each row, relative to the thread's first
    local l = A.skv
    if c.causal then l = tl.min(l, rows0 + (8 * r + 1)) end
    lim[r] = l - col0
  end
  for i = 0, c.bn // 2 - 1 do
    local dr, dc = f.offset(i)
    vals[i] = tl.select(tl.const(dc, tl.i32):lt(lim[dr // 8]), vals[i], ninf)
  end
  return vals
end

-- One step of the online softmax of rows r = 0, 1 (the thread's rows f.row,
-- f.row + 8): m[r] the running max of the raw scores, l[r] the thread's part
-- of the running sum (its quad's sum is taken at the end). first: no running
-- values yet. -> the f32 probabilities p[0 ..], the new m, l, and the factors
-- alpha[r] that rescale what was summed before.
function M.softmax(tl, c, A, vals, m, l, first)
  local cl = A.cl
  local ninf, zero = tl.const(-math.huge, tl.f32), tl.const(0.0, tl.f32)
  local p, nm, nl, alpha = {}, {}, {}, {}
  local n = c.bn // 2
  for r = 0, 1 do
    local mine = {}
    for i = 0, n - 1 do if (i % 4) // 2 == r then mine[#mine + 1] = vals[i] end end
    local mx = mine[1]
    for j = 2, #mine do mx = tl.max(mx, mine[j]) end
    mx = tl.max(mx, tl.shfl_xor(mx, 1))
    mx = tl.max(mx, tl.shfl_xor(mx, 2))
    if not first then mx = tl.max(m[r], mx) end
    nm[r] = mx
    -- a row masked so far has max -inf: subtract 0 instead (its exp2 are 0)
    local ms = tl.select(mx:eq(ninf), zero, mx * cl)
    if not first then alpha[r] = tl.ex2(m[r] * cl - ms) end
    local sum
    for i = 0, n - 1 do
      if (i % 4) // 2 == r then
        p[i] = tl.ex2(tl.fma(vals[i], cl, -ms))
        sum = sum and sum + p[i] or p[i]
      end
    end
    nl[r] = first and sum or tl.fma(l[r], alpha[r], sum)
  end
  return p, nm, nl, alpha
end

-- The probabilities packed as the PV wgmma's A operand: pairs (2i, 2i + 1)
-- rounded to the input type, each an i32.
function M.pack_p(tl, c, p)
  local regs = {}
  local et = c.dtype == "f16" and tl.f16 or tl.bf16
  for i = 0, c.bn // 2 - 1, 2 do regs[#regs + 1] = tl.pack(p[i], p[i + 1], et):bitcast(tl.i32) end
  return regs
end

-- }===

-- {=== a consumer warpgroup's tile

local function scale_rows(tl, c, ctx, o, alpha)
  local vals = {}
  for i = 0, c.d // 2 - 1 do
    local dr = ctx.f.offset(i)
    vals[i + 1] = tl.extract(o, i) * alpha[dr // 8]
  end
  return tl.vector_of(tl.f32, vals)
end

-- Release a stage: one lane of each warp for its warp (a cooperative
-- pipeline counts it as 32 arrivals; wgmma.wait_group already completed the
-- warpgroup's reads).
local function release(tl, pipe, st)
  tl.elect_one(function() pipe:consumer_release(st) end)
end

-- The mainloop of one tile for this warpgroup (ctx: wg, t, the fragment f,
-- the cursors stq, stk, stv, turn): -> { o = the accumulator (vector<d/2 x
-- f32>, unnormalized), m = {r0, r1}, l = {r0, r1} (the thread's parts) }.
function M.consumer_tile(tl, c, sm, ctx, tile)
  local go = sm.go
  local n, nmasked = M.kv_blocks(tl, c, sm, tile)
  local rows0 = tile.m * c.bm + ctx.wg * 64 + ctx.f.row -- the global row of the thread's first row
  sm.pq:consumer_wait(ctx.stq)
  -- the first (last) block, masked
  sm.pk:consumer_wait(ctx.stk)
  turn_wait(tl, go, ctx)
  tl.wgmma_fence()
  local S = M.qk(tl, c, sm, ctx.wg, ctx.stk:index())
  turn_pass(tl, go, ctx)
  tl.wgmma_wait(0)
  release(tl, sm.pk, ctx.stk)
  ctx.stk:advance()
  local p, m, l = M.softmax(tl, c, sm, scores(tl, c, sm, ctx, S, rows0, n - 1, true), nil, nil, true)
  local carry = { o = { value = tl.zeros(tl.f32, c.d // 2) }, p = { value = tl.vector_of(tl.i32, M.pack_p(tl, c, p)) },
                  s = { value = S },
                  m0 = { value = m[0] }, m1 = { value = m[1] }, l0 = { value = l[0] }, l1 = { value = l[1] } }
  local list = { ctx.stk, ctx.stv, carry.o, carry.p, carry.s, carry.m0, carry.m1, carry.l0, carry.l1 }
  if ctx.turn then list[#list + 1] = ctx.turn end
  -- block j (n - 1 - j): S_j issued, then P_{j-1} V_{j-1} (both stages
  -- waited for first); the softmax of S_j while the PV GEMM runs; O
  -- rescaled once it completed
  local function step(j, masked)
    sm.pk:consumer_wait(ctx.stk)
    sm.pv:consumer_wait(ctx.stv)
    turn_wait(tl, go, ctx)
    local pa = M.p_operands(tl, c, carry.p.value)
    tl.wgmma_fence() -- (no branch between it and the wgmmas: ptxas would fence again)
    local Sj = M.qk(tl, c, sm, ctx.wg, ctx.stk:index(), carry.s.value)
    local o = M.pv(tl, c, sm, carry.o.value, pa, ctx.stv:index())
    turn_pass(tl, go, ctx)
    tl.wgmma_wait(1)
    release(tl, sm.pk, ctx.stk)
    ctx.stk:advance()
    local pj, mj, lj, alpha = M.softmax(tl, c, sm, scores(tl, c, sm, ctx, Sj, rows0, n - 1 - j, masked),
                                        { [0] = carry.m0.value, carry.m1.value }, { [0] = carry.l0.value, carry.l1.value })
    tl.wgmma_wait(0)
    release(tl, sm.pv, ctx.stv)
    ctx.stv:advance()
    carry.o.value = scale_rows(tl, c, ctx, o, alpha)
    carry.p.value = tl.vector_of(tl.i32, M.pack_p(tl, c, pj))
    carry.s.value = Sj
    carry.m0.value, carry.m1.value, carry.l0.value, carry.l1.value = mj[0], mj[1], lj[0], lj[1]
  end
  local one = tl.const(1, tl.i32)
  tl.cutlass.for_range(one, tl.max(nmasked, one), list, function(j) step(j, true) end)
  tl.cutlass.for_range(tl.max(nmasked, one), n, list, function(j) step(j, false) end)
  -- the last block's P V
  sm.pv:consumer_wait(ctx.stv)
  local pa = M.p_operands(tl, c, carry.p.value)
  tl.wgmma_fence()
  local o = M.pv(tl, c, sm, carry.o.value, pa, ctx.stv:index())
  tl.wgmma_wait(0)
  release(tl, sm.pv, ctx.stv)
  ctx.stv:advance()
  if not c.o_in_q then -- (with the output staged in Q's rows, Q is released once the store read them)
    release(tl, sm.pq, ctx.stq)
    ctx.stq:advance()
  end
  return { o = o, m = { [0] = carry.m0.value, carry.m1.value }, l = { [0] = carry.l0.value, carry.l1.value } }
end

-- The epilogue of a warpgroup's rows: O / l (the quad's sum of l) to the
-- input type, stmatrix into the staging buffer, TMA store (G.store_fragment);
-- the log-sum-exp of each row by the quad's first lane, where the row exists.
function M.epilogue(tl, c, sm, ctx, tile, res, omap, lse)
  local f, t, wg = ctx.f, ctx.t, ctx.wg
  local cl = sm.cl
  local zero, ninf = tl.const(0.0, tl.f32), tl.const(-math.huge, tl.f32)
  local inv, lse_r = {}, {}
  for r = 0, 1 do
    local l = res.l[r]
    l = l + tl.shfl_xor(l, 1)
    l = l + tl.shfl_xor(l, 2)
    local ok = l:gt(zero)
    inv[r] = tl.select(ok, tl.rcp_approx(tl.select(ok, l, tl.const(1.0, tl.f32))), zero)
    local ms = tl.select(res.m[r]:eq(ninf), zero, res.m[r] * cl)
    lse_r[r] = tl.select(ok, (ms + tl.lg2(tl.select(ok, l, tl.const(1.0, tl.f32)))) * tl.const(LN2, tl.f32),
                         tl.const(math.huge, tl.f32))
  end
  local vals = {}
  for i = 0, c.d // 2 - 1 do
    local dr = f.offset(i)
    vals[i] = tl.extract(res.o, i) * inv[dr // 8]
  end
  local row0 = tile.m * c.bm + wg * 64
  G.store_fragment(tl, { bn = c.d, out = c.dtype == "f16" and tl.f16 or tl.bf16, staging = sm.o, map = omap,
                         warpgroup = wg, barrier = 1 + wg, thread = t,
                         coords = function(ch) return { tile.b, tile.h, row0, tl.const(ch * 64, tl.i32) } end }, vals)
  if c.o_in_q then -- Q's rows held the output: free them once the store read them
    tl.if_(t:eq(0), function() tl.bulk_wait(0, { read = true }) end)
    tl.named_barrier_sync(1 + wg, 128)
    release(tl, sm.pq, ctx.stq)
    ctx.stq:advance()
  end
  local base = (tile.b * sm.h + tile.h):cast(tl.i64) * sm.sq:cast(tl.i64)
  tl.if_((t % 4):eq(0), function()
    for r = 0, 1 do
      local row = row0 + f.row + 8 * r
      tl.if_(row:lt(sm.sq), function() tl.store(lse + (base + row:cast(tl.i64)), lse_r[r]) end)
    end
  end)
end

-- }===

-- }=====================================================================

return M
