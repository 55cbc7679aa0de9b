-- stdlib/attention.lua: a Hopper attention forward written with the public
-- surface only, the FlashAttention-3 design (docs/attention.md):
--
--   O[b, h] = softmax(Q[b, h] . K[b, h / g]^T * scale (+ causal mask)) . V[b, h / g]
--   LSE[b, h, i] = log(sum_j exp(s_ij))       (natural log, the scaled scores)
--
--   local a = tl.attention.build{ b = 2, h = 16, hkv = 4, sq = 4096, skv = 4096, d = 128,
--                                 causal = false, dtype = "bf16", scale = 1 / sqrt(d),
--                                 bn = 128, consumers = 2, stages = 2, pingpong = true,
--                                 schedule = "persistent" (causal: "data_parallel"), o_in_q = auto,
--                                 regs = { producer, consumer } (setmaxnreg; by consumers),
--                                 kv_order = "skewed" (K_{j+1} loaded before V_j; "paired": K_j, V_j),
--                                 exp2_poly = 0 (of every 8 exp2 of a row, how many on the FMA pipe),
--                                 fresh_s = false (each block's S in registers of its own, not the last S's),
--                                 pack_late = false (P carried as f32, packed before the next block's issue),
--                                 sum_mma = auto (the rows' sums by the PV GEMM: V with 8 columns of ones, d <= 128;
--                                   on by default non-causal, persistent, at d 64 with bn 128, 3 consumers
--                                   and at d 128 with bn 128, 2 consumers),
--                                 early_rescale = false (O rescaled between the issues of S_j and of P_{j-1} V_{j-1}),
--                                 split_tail = auto (persistent, non-causal: whole rounds of whole tiles,
--                                   the rest as tiles of one warpgroup's 64 rows: kernels/attention.lua;
--                                   on by default at d 64 where sum_mma is),
--                                 max_tree = false (a row's max as pairs of pairs, not a chain),
--                                 rescale = nil (a threshold t, log2 domain: the running max raised, and O
--                                   rescaled, only where a row of the warp grew by more than t) }
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

-- tl.attention's module: the Attention objects, and the kernel's pieces by
-- name (M.consumer_tile, M.softmax ...), which live below it in
-- tilua.kernels.attention, shared with the lowering of tile programs
local M = setmetatable({}, { __index = require "tilua.kernels.attention" })
local G = require "tilua.kernels.gemm"

local LOG2E, LN2 = 1.4426950408889634, 0.6931471805599453
local SMEM_LIMIT = 227 * 1024 -- a block's shared memory on sm_90a

do -- tl.attention: the generator and the check
  local raise = tl.raise
  tl.attention = rawget(tl, "attention") or {}

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
    if c.sum_mma then kv = kv + c.stages * c.bn * 64 * 2 end -- (a box of ones after each stage of V)
    return q + kv + (c.o_in_q and 0 or q) + 1024 + 256
  end

  -- Default tiles per head dim (FlashAttention-3's, within our shared memory:
  -- key tiles of 80 at head dim 256, O staged in Q's rows, the consumers'
  -- registers 240 (O alone takes 128); measured on the H200 in docs/PERF.md).
  local DEFAULT = { [64] = { bn = 128, consumers = 3 }, [128] = { bn = 128, consumers = 2 },
                    [256] = { bn = 80, consumers = 2, regs = { 24, 240 } } }

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
    -- setmaxnreg of the producer and of each consumer: the CTA's registers
    -- (65536 over 128 (1 + consumers) threads, .maxnreg rounded down to 8) moved
    -- to the consumers; the producer's loads fit 24 (FlashAttention-3's split)
    c.regs = c.regs or (c.consumers == dflt.consumers and dflt.regs) or (c.consumers == 3 and { 32, 160 } or { 40, 232 })
    local pool = (65536 // (128 * (c.consumers + 1))) // 8 * 8 * (c.consumers + 1)
    if type(c.regs) ~= "table" or math.type(c.regs[1]) ~= "integer" or math.type(c.regs[2]) ~= "integer"
       or c.regs[1] % 8 ~= 0 or c.regs[2] % 8 ~= 0 or c.regs[1] < 24 or c.regs[2] > 256
       or c.regs[1] + c.consumers * c.regs[2] > pool then
      raise(("attention.build: regs must be { producer, consumer }, multiples of 8 in [24, 256] with producer + %d x consumer <= %d")
        :format(c.consumers, pool))
    end
    -- causal: a CTA a tile, the hardware handing them out as SMs free up (the
    -- tiles' lengths differ; a static walk leaves some SMs the longer rounds)
    c.schedule = c.schedule or (c.causal and "data_parallel" or "persistent")
    if c.schedule ~= "persistent" and c.schedule ~= "data_parallel" then
      raise(("attention.build: schedule must be persistent or data_parallel, got %s"):format(tostring(c.schedule)))
    end
    c.kv_order = c.kv_order or "skewed"
    if c.kv_order ~= "skewed" and c.kv_order ~= "paired" then
      raise(("attention.build: kv_order must be skewed or paired, got %s"):format(tostring(c.kv_order)))
    end
    c.exp2_poly = c.exp2_poly or 0
    if math.type(c.exp2_poly) ~= "integer" or c.exp2_poly < 0 or c.exp2_poly > 8 then
      raise("attention.build: exp2_poly must be an integer in [0, 8] (of every 8 exp2, how many emulated)")
    end
    c.fresh_s = c.fresh_s and true or false
    c.max_tree = c.max_tree and true or false
    c.pack_late = c.pack_late and true or false
    -- head dim 64, non-causal, persistent, its default tiles (bn 128, 3
    -- consumers): the rows' sums by the PV GEMM and the tail in unit tiles
    -- (the H200, B x H = 2 x 16, S = 4096: 1.107 x the form without them,
    -- 1.066 x cuDNN, s13attn-1; 1.104 and 1.113, s13attn-2); head dim 128,
    -- non-causal, persistent, its default tiles (bn 128, 2 consumers): the
    -- sums alone (1.084 x the form without, rounds 1.062-1.099; the tail
    -- split 0.975, both 1.012: s13attn-2); docs/PERF.md; elsewhere not
    -- measured (causal d 64 with the sums: 1.004, within the rounds): off
    local fast64 = c.d == 64 and not c.causal and c.schedule == "persistent" and c.bn == 128 and c.consumers == 3
    local fast128 = c.d == 128 and not c.causal and c.schedule == "persistent" and c.bn == 128 and c.consumers == 2
    local auto_sum = c.sum_mma == nil
    if auto_sum then c.sum_mma = fast64 or fast128 end
    if c.split_tail == nil then c.split_tail = fast64 end
    c.sum_mma = c.sum_mma and true or false
    c.early_rescale = c.early_rescale and true or false
    c.split_tail = c.split_tail and true or false
    if c.sum_mma and c.d > 128 then raise("attention.build: sum_mma needs d <= 128 (the PV GEMM's N is d + 8 <= 256)") end
    if c.rescale ~= nil and (type(c.rescale) ~= "number" or c.rescale < 0 or c.rescale > 16) then
      raise("attention.build: rescale must be a number in [0, 16] (the log2 of the largest factor a probability may carry) or nil")
    end
    if c.split_tail and (c.causal or c.schedule ~= "persistent") then
      raise("attention.build: split_tail needs the persistent schedule, non-causal")
    end
    c.bm = 64 * c.consumers
    c.tm = (c.sq + c.bm - 1) // c.bm
    c.nkv = (c.skv + c.bn - 1) // c.bn
    c.tiles = c.tm * c.h * c.b
    -- (the default's box of ones left out where the stages asked for leave no room for it)
    if auto_sum and c.sum_mma and M.smem_bytes { bm = c.bm, d = c.d, stages = c.stages, bn = c.bn, sum_mma = true,
                                                 o_in_q = c.o_in_q ~= false } > SMEM_LIMIT then
      c.sum_mma = false
    end
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
      -- (c.sum_mma: each stage of V a box more, of ones, which the PV GEMM
      -- reads as 8 columns more: O's columns d .. d + 7 are the rows' sums)
      local sV = k:shared(ein, { S, D // 64 + (c.sum_mma and 1 or 0), BN, 64 }, { align = 1024, swizzle = 128 })
      local sO = c.o_in_q and sQ or k:shared(ein, { NC, D // 64, 64, 64 }, { align = 1024, swizzle = 128 })
      local consumers = { { 4, 4 * NC } }
      local pq = k:pipeline { stages = 1, producers = { { 0, 1 } }, consumers = consumers, transaction_bytes = BM * D * 2, mode = "cooperative" }
      local pk = k:pipeline { stages = S, producers = { { 0, 1 } }, consumers = consumers, transaction_bytes = KV_BYTES, mode = "cooperative" }
      local pv = k:pipeline { stages = S, producers = { { 0, 1 } }, consumers = consumers, transaction_bytes = KV_BYTES, mode = "cooperative" }
      local go = {}
      for w = 1, (NC > 1 and c.pingpong) and NC or 0 do go[w] = k:seq_bar { depth = 1, arrive_count = 128 } end
      local sm = M.problem(tl, c, { b = p.B, h = p.H, hkv = p.HKV, sq = p.SQ, skv = p.SKV, scale = p.scale })
      if c.split_tail then M.split_tail(tl, c, sm, tl.grid_dim("x")) end
      sm.q, sm.k, sm.v, sm.o, sm.pq, sm.pk, sm.pv, sm.go = sQ, sK, sV, sO, pq, pk, pv, go

      -- the work tiles (m block, head, batch), m fastest: the CTAs at work at
      -- once share their heads' K and V in L2. Causal: (head, m block, batch),
      -- heads fastest, the longest m blocks first (M.tile_of), so that every
      -- CTA's round has tiles of about one length (with m fastest and a grid
      -- that is a multiple of the m blocks, as 132 of 22, a CTA would get the
      -- same m block, long or short, in every round). Persistent: a CTA a SM
      -- walks them; data-parallel: a CTA a tile (the hardware hands out the CTAs)
      local function scheduler()
        local o = { tiles = c.causal and { sm.h, sm.tm, sm.b, 1 } or { sm.tm, sm.h, sm.b, 1 }, swizzle = 1 }
        if c.split_tail then o.tiles = { sm.tiles, 1, 1, 1 } end
        if c.schedule == "data_parallel" then return tl.sched.data_parallel(o) end
        o.workers = tl.grid_dim("x")
        return tl.sched.static_persistent(o)
      end
      local function tiles(cursors, body) G.tile_loop(tl, scheduler():work(tl.block_id()), cursors, { body }) end

      -- {=== the producer warpgroup
      k:agent("producer", { warps = 4 }, function()
        -- the registers move within the CTA's (its .maxnreg times its threads:
        -- 168 x 384 >= 40 x 128 + 232 x 256, 128 x 512 = 32 x 128 + 160 x 384: c.regs);
        -- one consumer warpgroup has its 248 from the start
        if NC > 1 then tl.setmaxnreg(c.regs[1], "dec") end
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
        if NC > 1 then tl.setmaxnreg(c.regs[2], "inc") end
        k:async_exec("consumer", { first_warp = 4, warps = 4 * NC }, function()
          local wg = a:warp_id() // 4
          local t = a:thread_id() % 128
          local stq, stk, stv = pq:consumer_start(), pk:consumer_start(), pv:consumer_start()
          local turn = #go > 1 and M.turn_state(tl, go, wg) or nil
          local cur = { stq, stk, stv }
          if turn then cur[4] = turn end
          local ctx = { wg = wg, t = t, f = tl.wgmma_fragment(t), stq = stq, stk = stk, stv = stv, turn = turn }
          if c.sum_mma then M.fill_ones(tl, c, sm, a:thread_id()) end
          local function whole(cx, tile)
            local res = M.consumer_tile(tl, c, sm, cx, tile)
            M.epilogue(tl, c, sm, cx, tile, res, p.O, p.LSE)
          end
          tiles(cur, function(work)
            local tile = M.tile_of(tl, c, sm, work)
            if not c.split_tail then return whole(ctx, tile) end
            -- a unit tile: warpgroup 0's rows, no turns (the others walk the stages)
            local solo = setmetatable({ turn = false }, { __index = ctx })
            M.branch(tl, tile.single, cur, function()
              M.branch(tl, wg:eq(0), cur, function() whole(solo, tile) end, function() M.idle_tile(tl, c, sm, ctx) end)
            end, function() whole(ctx, tile) end)
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

  -- The launch recipe of c (tilua.gpu.recipe): what a:run does, as data that
  -- `tilua export` writes as C too. Q, K, V and O are tensors [B, H, S, D]
  -- (D the built head dim), whose dims are the problem's sizes (the kernel
  -- takes them at run time: one export serves every size); the grid is M.grid's,
  -- on the device's SMs unless the build named its own (c.sms_fixed).
  local function recipe(c)
    local r = { inputs = { { name = "q", kind = "tensor", rank = 4 }, { name = "k", kind = "tensor", rank = 4 },
                           { name = "v", kind = "tensor", rank = 4 }, { name = "o", kind = "tensor", rank = 4 },
                           { name = "lse", kind = "buffer" }, { name = "scale", kind = "scalar", default = c.scale } },
                args = { { "map", "q" }, { "map", "k" }, { "map", "v" }, { "map", "o" }, { "ptr", "lse" },
                         { "int", { "dim", "q", 0 } }, { "int", { "dim", "q", 1 } }, { "int", { "dim", "k", 1 } },
                         { "int", { "dim", "q", 2 } }, { "int", { "dim", "k", 2 } }, { "scalar", "scale" } } }
    local b, h, sq = { "dim", "q", 0 }, { "dim", "q", 1 }, { "dim", "q", 2 }
    -- what a launch's tensors must be: sizes of at least 1, heads a multiple of
    -- the key heads, O shaped as Q, V as K, the build's head dim
    local who = ("attention '%s': "):format(c.name)
    local function dim(t, d) return { "dim", t, d }, ("%s%s's dim %d"):format(who, t, d) end
    r.checks = {}
    local function add(kind, t, d, want, what)
      local e, say = dim(t, d)
      r.checks[#r.checks + 1] = { kind, e, want, what and (say .. " (" .. what .. ")") or say }
    end
    for _, t in ipairs { "q", "k" } do
      for d = 0, 2 do add("at_least", t, d, 1) end
    end
    add("equal", "k", 0, b, "the batch, q's dim 0")
    add("multiple", "q", 1, { "dim", "k", 1 }, "the heads, a multiple of k's dim 1")
    for d = 0, 2 do
      add("equal", "o", d, { "dim", "q", d }, "as q's")
      add("equal", "v", d, { "dim", "k", d }, "as k's")
    end
    for _, t in ipairs { "q", "k", "v", "o" } do add("equal", t, 3, c.d, "the head dim it was built for") end
    local tiles = { "mul", { "mul", { "div", { "add", sq, c.bm - 1 }, c.bm }, h }, b }
    if c.schedule == "data_parallel" then
      r.grid = { tiles, 1, 1 }
    else
      r.grid = { { "max", 1, { "min", c.sms_fixed and c.sms or { "sms" }, tiles } }, 1, 1 }
    end
    return r
  end

  tl.attention.config = cfg_of
  function tl.attention.build(o)
    local c = cfg_of(o)
    c.sms_fixed = c.sms ~= nil
    local sms = c.sms or (tl.device.available() and tl.device.sm_count() or 132)
    c.sms = sms
    c.grid = M.grid(c, c)
    local per_head = 4.0 * c.sq * c.skv * c.d
    if c.causal then per_head = per_head / 2 end
    local a = setmetatable({ cfg = c, grid = c.grid, smem = M.smem_bytes(c), flops = per_head * c.b * c.h }, M.Attention)
    local saved = tl.module() -- each kernel is a module of its own
    tl.new_module()
    a.kernel = tl.at_caller(build_kernel, c)
    a.kernel.recipe = recipe(c)
    tl.set_module(saved)
    return a
  end

  M.Attention = {}
  M.Attention.__index = M.Attention

  -- The problem of a launch: o's sizes (b, h, hkv, sq, skv), the build's
  -- where o has none. -> the recipe's inputs for o's buffers (B, H, S, D row-major)
  -- (the recipe's checks say what is wrong with them)
  local function inputs_of(c, o)
    local p = {}
    for _, key in ipairs { "b", "h", "hkv", "sq", "skv" } do
      p[key] = o[key] or c[key]
      if math.type(p[key]) ~= "integer" then raise(("attention:run: '%s' must be an integer"):format(key)) end
    end
    return { q = { o.q, { p.b, p.h, p.sq, c.d } }, k = { o.k, { p.b, p.hkv, p.skv, c.d } },
             v = { o.v, { p.b, p.hkv, p.skv, c.d } }, o = { o.o, { p.b, p.h, p.sq, c.d } }, lse = o.lse,
             scale = o.scale or c.scale }
  end

  -- The tensor maps of Q, K, V and O (B, H, S, D row-major buffers) of the
  -- build's problem, as a:run makes them.
  function M.Attention:maps(q, kk, v, o)
    local r, k, inputs = self.kernel.recipe, self.kernel, inputs_of(self.cfg, { q = q, k = kk, v = v, o = o })
    local V = tl.recipe.value
    return V(r, k.params, {}, inputs, 1), V(r, k.params, {}, inputs, 2), V(r, k.params, {}, inputs, 3),
           V(r, k.params, {}, inputs, 4)
  end

  -- a:run{q, k, v, o, lse [, scale] [, b, h, hkv, sq, skv]}: launches
  -- (asynchronously) through the kernel's launch recipe, on the build's
  -- problem or the sizes given (the kernel takes them at run time; the head
  -- dim is the build's); returns self. The tensor maps are kept (self._maps).
  function M.Attention:run(o)
    local grid, args = tl.recipe.values(self.kernel.recipe, self.kernel.params, self, inputs_of(self.cfg, o))
    self.kernel:launch { grid = grid, args = args }
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

  -- The log-sum-exp's tolerance at the exact value r: 1e-3 (1 + |r|), plus
  -- 2^-9 for a kernel whose row sums add the probabilities rounded to 16 bits
  -- (the sums by the PV GEMM: each term within 2^-9 of its value, so the
  -- sum's logarithm too; a row of a few keys near 1 each comes close: 1.7e-3
  -- at 513 causal rows, where 1e-3 alone refused it). One rule for every
  -- kernel, so that a:check holds a tile program to the same.
  local function lse_tolerance(r) return 1e-3 * (1 + math.abs(r)) + 2 ^ -9 end
  tl.attention.lse_tolerance = lse_tolerance

  -- bad[0] += #{ i : |X[i] - R[i]| > tol(i) }, bad[1] = max |X - R| (f32 bits):
  -- O within its rounding (the P operand rounded to 16 bits, then O): a
  -- relative 2^-7 of the largest |v| of the head (the bound of a convex
  -- combination of V) plus 2^-8 |R|; the log-sum-exp within lse_tolerance.
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
                    or (ar + tl.const(1, tl.f32)) * tl.const(1e-3, tl.f32) + tl.const(2 ^ -9, tl.f32) -- (lse_tolerance)
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
      if math.abs(gl - lse) > lse_tolerance(lse) then nbad = nbad + 1 end
    end
    report = report .. ("; %d CPU rows: %d values off (max error %.3g)"):format(math.min(o.samples or 3, #rows), nbad, worst)
    return ok and nbad == 0, report
  end

  -- }===================================================================
end

return M
