-- stdlib/gemm.lua: a Hopper GEMM generator written with the public surface only
-- (docs/gemm.md). D[M, N] = epilogue(alpha * A . B + beta * C), f32 accumulation.
--
--   local g = tl.gemm.build{ m = M, n = N, k = K, dtype = "bf16", out = "bf16",
--                            bn = 256, stages = 3, schedule = "persistent",
--                            a_major = "k", b_major = "k", alpha = 1, beta = 0,
--                            bias = false, activation = nil }
--   g.kernel                     the tilua kernel (compile with g.kernel:compile())
--   g:run{ a = bufA, b = bufB, d = bufD [, c = bufC, bias = bufBias] }
--   g.grid, g.smem, g.flops, g.workspace_bytes
--
-- The kernel (one CTA: 3 warpgroups, 384 threads):
--   producer warpgroup  setmaxnreg.dec 40; one elected thread of its first warp
--                       walks the CTA's tiles (a cutlass tile scheduler) and for
--                       each k block acquires a stage of a cutlass.pipeline and
--                       issues two TMA loads (A 128 x BK, B BN x BK, 128-byte
--                       swizzle) that complete on the stage's full barrier.
--   consumer warpgroups setmaxnreg.inc 232; each owns 64 rows of the 128 x BN
--                       tile: per k block it waits for the stage, issues BK/16
--                       wgmma m64nBNk16 from shared-memory descriptors into a
--                       register accumulator (vector<BN/2 x f32>), commits, waits
--                       for the previous group and releases the previous stage.
--                       Epilogue: alpha/beta/bias/activation in registers,
--                       bf16 pairs to a swizzled staging buffer with stmatrix,
--                       fence.proxy.async, TMA stores (asynchronous: the next
--                       tile's mainloop overlaps them).
-- Shapes that are not multiples of the tile are handled by TMA (out-of-bounds
-- loads read zeros, stores are clipped). Column-major operands (a_major = "m",
-- b_major = "n") use MN-major descriptors (16-bit types only).
local tl = require "tilua" -- the library being built (init.lua registers it before its rooms)

-- tl.gemm's module: the Gemm objects, and the GEMM's pieces by name (M.mainloop,
-- M.tile_loop ...), which live below it in tilua.kernels.gemm, shared with the
-- lowering of tile programs
local M = setmetatable({}, { __index = require "tilua.kernels.gemm" })

do -- tl.gemm: the generator and the check of a GEMM (an indented block)
  local raise = tl.raise
  tl.gemm = tl.gemm or {}
  local in_types = { bf16 = "bf16", f16 = "f16", e4m3 = "e4m3", e5m2 = "e5m2" }

  local function elem_type(name)
    if name == "bf16" then return tl.bf16 elseif name == "f16" then return tl.f16
    elseif name == "f32" then return tl.f32 elseif name == "e4m3" or name == "e5m2" then return tl.i8 end
    raise(("gemm: unknown element type %s"):format(tostring(name)))
  end

  local function cfg_of(o)
    if type(o) ~= "table" then raise("gemm.build: expected a table of options") end
    local c = {}
    for key, v in pairs(o) do c[key] = v end
    for _, key in ipairs { "m", "n", "k" } do
      if math.type(c[key]) ~= "integer" or c[key] < 1 then raise(("gemm.build: '%s' must be a positive integer"):format(key)) end
    end
    if c.sms ~= nil and (math.type(c.sms) ~= "integer" or c.sms < 1) then
      raise("gemm.build: 'sms' must be a positive integer")
    end
    c.dtype = c.dtype or "bf16"
    if not in_types[c.dtype] then raise(("gemm.build: dtype must be bf16, f16, e4m3 or e5m2, got %s"):format(tostring(c.dtype))) end
    c.out = c.out or "bf16"
    if c.out ~= "bf16" and c.out ~= "f16" then raise("gemm.build: out must be bf16 or f16") end
    c.fp8 = c.dtype == "e4m3" or c.dtype == "e5m2"
    c.ebytes = c.fp8 and 1 or 2
    c.bk = c.bk or (128 // c.ebytes) -- one 128-byte swizzle row of K
    c.kstep = c.fp8 and 32 or 16
    c.bn = c.bn or 256
    if c.bn % 64 ~= 0 or c.bn < 64 or c.bn > 256 then raise("gemm.build: bn must be 64, 128, 192 or 256") end
    c.consumers = c.consumers or "cooperative"
    c.stages = c.stages or (c.consumers == "pingpong" and 2 or c.bn == 256 and 3 or 4)
    c.a_major, c.b_major = c.a_major or "k", c.b_major or "k"
    if c.fp8 and (c.a_major ~= "k" or c.b_major ~= "k") then raise("gemm.build: fp8 operands must be K-major (wgmma cannot transpose them)") end
    c.cluster = c.cluster or 1 -- CTAs along M that share (multicast) the B tile
    if c.cluster ~= 1 and c.cluster ~= 2 then raise("gemm.build: cluster must be 1 or 2") end
    c.schedule = c.schedule or "persistent"
    if c.schedule == "splitk" then -- split-K over the StreamK scheduler: `splits` pieces of K per tile
      c.schedule, c.decomposition = "streamk", "split_k"
    end
    if c.schedule ~= "persistent" and c.schedule ~= "data_parallel" and c.schedule ~= "streamk" then
      raise(("gemm.build: schedule must be persistent, data_parallel, streamk or splitk, got %s"):format(tostring(c.schedule)))
    end
    if c.activation and c.activation ~= "relu" then raise("gemm.build: activation must be nil or \"relu\"") end
    if c.cluster > 1 and (c.schedule == "streamk" or c.b_major ~= "k") then
      raise("gemm.build: a cluster needs a K-major B and a persistent or data-parallel schedule")
    end
    -- TMA reads and writes rows whose byte strides are multiples of 16
    local function aligned(what, elems, bytes)
      if elems * bytes % 16 ~= 0 then
        raise(("gemm.build: %s rows of %d elements are %d bytes; TMA needs a multiple of 16"):format(what, elems, elems * bytes))
      end
    end
    aligned("D", c.n, 2)
    aligned("A", c.a_major == "k" and c.k or c.m, c.ebytes)
    aligned("B", c.b_major == "k" and c.k or c.n, c.ebytes)
    if c.consumers ~= "cooperative" and c.consumers ~= "pingpong" then
      raise(("gemm.build: consumers must be cooperative or pingpong, got %s"):format(tostring(c.consumers)))
    end
    if c.consumers == "pingpong" and (c.cluster > 1 or c.schedule == "streamk") then
      raise("gemm.build: ping-pong consumers need a persistent or data-parallel schedule without a cluster")
    end
    c.bm = c.consumers == "pingpong" and 64 or 128 -- rows of a tile: a warpgroup's, or both's
    c.tm, c.tn, c.kt = (c.m + c.bm - 1) // c.bm, (c.n + c.bn - 1) // c.bn, (c.k + c.bk - 1) // c.bk
    c.tiles = c.tm * c.tn
    c.ctiles = (c.tm + c.cluster - 1) // c.cluster * c.tn -- cluster tiles
    c.name = c.name or ("gemm_%s_%dx%dx%d"):format(c.dtype, c.m, c.n, c.k)
    return c
  end

  -- Tensor-map boxes (outermost first) of the operands as stored.
  local function boxes(c)
    local a = c.a_major == "k" and { c.bm, c.bk } or { c.bk, 64 } -- M-major: bm / 64 boxes per stage
    local b = c.b_major == "k" and { c.bn // c.cluster, c.bk } or { c.bk, 64 } -- N-major: bn / 64 boxes per stage
    return a, b, { 64, 64 }
  end

  -- {===================================================================
  -- The kernel
  -- ====================================================================

  local function build_kernel(c)
    local ein, eout = elem_type(c.dtype), elem_type(c.out)
    local abox, bbox, cbox = boxes(c)
    local AT, BT = tl.tensor_map_type(ein, abox, 128), tl.tensor_map_type(ein, bbox, 128)
    local CT = tl.tensor_map_type(eout, cbox, 128)
    local params = { { "A", AT }, { "B", BT }, { "D", CT } }
    if c.alpha_param then params[#params + 1] = { "alpha", tl.f32 } end
    if c.beta and c.beta ~= 0 then params[#params + 1] = { "C", tl.ptr(eout) } end
    if c.bias then params[#params + 1] = { "bias", tl.ptr(tl.f32) } end
    if c.schedule == "streamk" then params[#params + 1] = { "ws", tl.ptr(tl.i32) } end
    local CL, PP = c.cluster, c.consumers == "pingpong"
    local TM, BN, BK, S = c.bm, c.bn, c.bk, c.stages
    local k = tl.kernel(c.name, { params = params, block = 384, cluster = CL > 1 and { CL, 1, 1 } or nil })
    local A_BYTES, B_BYTES = TM * BK * c.ebytes, BN * BK * c.ebytes
    -- consumer groups: cooperative, one (both warpgroups share every tile, 64
    -- rows each); ping-pong, two (warpgroup g takes every other tile, with a
    -- pipeline of its own, their mainloops ordered by two seq_bars)
    local NG = PP and 2 or 1

    k:define(function(k, p)
      local sA, sB, pipes = {}, {}, {}
      for g = 1, NG do
        sA[g] = k:shared(ein, { S, TM, BK }, { align = 1024, swizzle = 128 })
        sB[g] = k:shared(ein, { S, BN, BK }, { align = 1024, swizzle = 128 })
      end
      local sD = k:shared(eout, { 2, BN // 64, 64, 64 }, { align = 1024, swizzle = 128 })
      for g = 1, NG do
        -- with a cluster, each CTA's producer writes both CTAs' B stages: every
        -- stage is released to the producers of the whole cluster (mode "cluster"),
        -- one participant per warpgroup, so that each warpgroup releases its reads on
        -- its own instead of both meeting at a barrier every k block
        local consumers = PP and { { 4 * g, 4 } } or CL > 1 and { { 4, 4 }, { 8, 4 } } or { { 4, 8 } }
        pipes[g] = k:pipeline { stages = S, producers = { { 0, 1 } }, consumers = consumers,
                                transaction_bytes = A_BYTES + B_BYTES, mode = CL > 1 and "cluster" or "cooperative" }
      end
      local go = PP and { k:seq_bar { depth = 1, arrive_count = 128 }, k:seq_bar { depth = 1, arrive_count = 128 } }
      local rank = CL > 1 and tl.cluster_rank() or tl.const(0, tl.i32)
      local function scheduler()
        local o = { tiles = { c.tm, c.tn, 1, c.kt }, swizzle = c.swizzle or 8, raster_order = c.raster,
                    cluster = CL > 1 and { CL, 1, 1 } or nil }
        if c.schedule == "data_parallel" then return tl.sched.data_parallel(o) end
        if c.schedule == "streamk" then return M.streamk_scheduler(tl, c, p.ws) end
        o.workers = c.grid // CL
        return tl.sched.static_persistent(o)
      end

      -- The CTA's work tiles in order (M.tile_loop); workers are clusters.
      local function tiles(cursors, bodies)
        M.tile_loop(tl, scheduler():work(CL > 1 and tl.cluster_id() or tl.block_id()), cursors, bodies)
      end

      -- {=== the producer warpgroup: TMA loads into the pipelines' stages
      k:agent("producer", { warps = 4 }, function()
        tl.setmaxnreg(40, "dec")
        k:async_exec("producer", { first_warp = 0, warps = 1 }, function()
          local sts = {}
          for g = 1, NG do sts[g] = pipes[g]:producer_start() end
          tl.elect_one(function()
            -- the first TMA of each operand need not wait for its map to be fetched
            tl.tensor_map_prefetch(p.A)
            tl.tensor_map_prefetch(p.B)
            local function load(g)
              local pipe, st = pipes[g], sts[g]
              return function(work)
                local m0, n0 = (work:m() * CL + rank) * TM, work:n() * BN
                local kb0, kbn = M.k_range(tl, c, work)
                tl.cutlass.for_range(kb0, kb0 + kbn, { st }, function(kb)
                  local k0 = kb * BK
                  pipe:producer_acquire(st)
                  local full, s = pipe:full_barrier(st), st:index()
                  if c.a_major == "k" then
                    tl.tma_load(sA[g]:ptr(s), p.A, full, { m0, k0 })
                  else
                    for h = 0, TM // 64 - 1 do tl.tma_load(sA[g]:ptr(s, h * 64), p.A, full, { k0, m0 + h * 64 }) end
                  end
                  if CL > 1 then -- this CTA's share of B, to every CTA of the cluster
                    local h = rank * (BN // CL)
                    tl.tma_load(sB[g]:ptr(s, h), p.B, full, { n0 + h, k0 }, { multicast = (1 << CL) - 1 })
                  elseif c.b_major == "k" then
                    tl.tma_load(sB[g]:ptr(s), p.B, full, { n0, k0 })
                  else
                    for h = 0, BN // 64 - 1 do tl.tma_load(sB[g]:ptr(s, h * 64), p.B, full, { k0, n0 + h * 64 }) end
                  end
                  pipe:producer_commit(st)
                  st:advance()
                end)
              end
            end
            local bodies = {}
            for g = 1, NG do bodies[g] = load(g) end
            tiles(sts, bodies)
            for g = 1, NG do pipes[g]:producer_tail(sts[g]) end
          end)
        end)
      end)
      -- }===

      -- {=== a consumer group (warps [first, first + n)): wgmma mainloop and epilogue
      local function consumer(g, first, n, a)
        local pipe = pipes[g]
        tl.setmaxnreg(232, "inc")
        k:async_exec("consumer", { first_warp = first, warps = n }, function()
          -- the warpgroup: its rows of the tile, its half of the staging buffer
          local wg = PP and tl.const(g - 1, tl.i32) or a:warp_id() // 4
          local rows = PP and tl.const(0, tl.i32) or wg * 64
          local t = a:thread_id() % 128
          local st = pipe:consumer_start()
          -- descriptors of stage s, k step kk. K-major: 128-byte rows of K, 8-row
          -- groups 1024 bytes apart (sbo); a k step moves along the row. MN-major:
          -- boxes of 64 (k) x 64 (m or n) elements; a k step is 16 rows (2048 bytes),
          -- 64-wide MN atoms are a box (8192 bytes, lbo) apart.
          local function desc_a(s, kk)
            if c.a_major == "k" then
              return tl.wgmma_desc(sA[g]:ptr(s, rows, kk * c.kstep), { swizzle = 128, sbo = 1024 })
            end
            return tl.wgmma_desc(sA[g]:ptr(s, rows + kk * 16, 0), { swizzle = 128, lbo = 8192, sbo = 1024 })
          end
          local function desc_b(s, kk)
            if c.b_major == "k" then
              return tl.wgmma_desc(sB[g]:ptr(s, 0, kk * c.kstep), { swizzle = 128, sbo = 1024 })
            end
            return tl.wgmma_desc(sB[g]:ptr(s, kk * 16, 0), { swizzle = 128, lbo = 8192, sbo = 1024 })
          end
          -- A stage is released once the wgmmas that read it completed: wgmma.wait_group
          -- is warpgroup-collective and completes their (async-proxy) reads, so one
          -- lane of each warp may release for its warp (the lowering counts it as 32
          -- arrivals), instead of every thread arriving.
          local function release(s)
            if CL > 1 then pipe:consumer_release(s) return end
            tl.elect_one(function() pipe:consumer_release(s) end)
          end
          local wopts = { type_a = c.dtype, type_b = c.dtype, trans_a = c.a_major ~= "k", trans_b = c.b_major ~= "k" }
          local function mma_stage(acc, s, first_step)
            tl.wgmma_fence()
            for kk = 0, BK // c.kstep - 1 do
              wopts.scale_d = (first_step and kk == 0) and false or nil -- D = A*B on a tile's first step
              acc = tl.wgmma(acc, desc_a(s, kk), desc_b(s, kk), wopts)
            end
            tl.wgmma_commit()
            return acc
          end
          local turn = PP and go[g]:state { phase = g == 1 and 1 or 0 } -- group 1 goes first

          local function mainloop(work)
            local m, n = work:m() * CL + rank, work:n()
            local _, kbn = M.k_range(tl, c, work)
            if PP then go[g]:wait(turn) end
            local acc = { value = M.mainloop(tl, pipe, st, 0, kbn, function() return tl.zeros(tl.f32, BN // 2) end,
                                             function(a, s, _, first) return mma_stage(a, s, first) end, release) }
            if PP then go[3 - g]:arrive(turn) end -- the other group's mainloop may start
            if c.schedule == "streamk" then
              local final
              acc.value, final = M.fixup(tl, c, p, work, acc.value, m, n, wg, t)
              tl.if_(final, function() M.epilogue(tl, c, p, sD, acc.value, m, n, wg, rows, t) end)
            else
              M.epilogue(tl, c, p, sD, acc.value, m, n, wg, rows, t)
            end
          end
          local bodies = PP and (g == 1 and { mainloop, false } or { false, mainloop }) or { mainloop }
          tiles(PP and { st, turn } or { st }, bodies)
          -- the last stores must have read the staging buffer before the CTA leaves
          -- (their writes to global memory complete with the grid)
          tl.if_(t:eq(0), function() tl.bulk_wait(0, { read = true }) end)
        end)
      end
      if PP then
        k:agent("consumer0", { warps = 4 }, function(a) consumer(1, 4, 4, a) end)
        k:agent("consumer1", { warps = 4 }, function(a) consumer(2, 8, 4, a) end)
      else
        k:agent("consumer", { warps = 8 }, function(a) consumer(1, 4, 8, a) end)
      end
      -- }===
      if CL > 1 then tl.cluster_sync() end -- no CTA leaves while another may still write to it
    end)
    return k
  end

  -- }===================================================================

  tl.gemm.config = cfg_of
  function tl.gemm.build(o)
    local c = cfg_of(o)
    -- the SMs the grid is planned for: the device's, or c.sms (a smaller
    -- persistent grid: each CTA walks several tiles)
    local sms = c.sms or (tl.device.available() and tl.device.sm_count() or 132)
    -- data-parallel: a CTA a tile; persistent: at most a CTA per SM; StreamK: a
    -- worker per SM, the scheduler spreads the k blocks of all tiles over them
    c.grid = c.schedule == "data_parallel" and c.ctiles * c.cluster or c.schedule == "streamk" and sms
             or math.max(1, math.min(sms // c.cluster, c.ctiles)) * c.cluster
    if c.schedule == "streamk" then M.plan_streamk(tl, c) end
    local g = setmetatable({ cfg = c, grid = c.grid, flops = 2.0 * c.m * c.n * c.k,
                             workspace_bytes = c.schedule == "streamk" and M.workspace_bytes(c) or 0 }, M.Gemm)
    local saved = tl.module() -- each GEMM is a module of its own
    tl.new_module()
    g.kernel = tl.at_caller(build_kernel, c) -- every op at the user's line
    tl.set_module(saved)
    return g
  end

  M.Gemm = {}
  M.Gemm.__index = M.Gemm

  -- The tensor maps of the operands as stored (row-major buffers).
  function M.Gemm:maps(a, b, d)
    local c = self.cfg
    local abox, bbox, cbox = boxes(c)
    local ashape = c.a_major == "k" and { c.m, c.k } or { c.k, c.m }
    local bshape = c.b_major == "k" and { c.n, c.k } or { c.k, c.n }
    local dt = c.dtype == "e4m3" and "e4m3" or c.dtype == "e5m2" and "e5m2" or c.dtype
    return tl.device.tensor_map { buffer = a, dtype = dt, shape = ashape, box = abox, swizzle = 128 },
           tl.device.tensor_map { buffer = b, dtype = dt, shape = bshape, box = bbox, swizzle = 128 },
           tl.device.tensor_map { buffer = d, dtype = c.out, shape = { c.m, c.n }, box = cbox, swizzle = 128 }
  end

  -- g:run{a, b, d [, c, bias, alpha]}: launches (asynchronously); returns self.
  function M.Gemm:run(o)
    local c = self.cfg
    if not self._maps or self._maps.a ~= o.a or self._maps.b ~= o.b or self._maps.d ~= o.d then
      local ma, mb, md = self:maps(o.a, o.b, o.d)
      self._maps = { a = o.a, b = o.b, d = o.d, ma, mb, md }
    end
    local args = { self._maps[1], self._maps[2], self._maps[3] }
    if c.alpha_param then args[#args + 1] = o.alpha or c.alpha or 1 end
    if c.beta and c.beta ~= 0 then args[#args + 1] = o.c or raise("gemm:run: beta ~= 0 needs c") end
    if c.bias then args[#args + 1] = o.bias or raise("gemm:run: bias = true needs a bias buffer") end
    if c.schedule == "streamk" then
      if not self.workspace then -- counters start at 0 and the final split of each tile resets its own
        self.workspace = tl.device.alloc(tl.i32, self.workspace_bytes // 4)
        self.workspace:fill(0)
      end
      args[#args + 1] = self.workspace
    end
    self.kernel:launch { grid = self.grid, args = args }
    return self
  end

  -- {===================================================================
  -- Checking: a plain tilua reference kernel and a sampled CPU check
  -- ====================================================================

  -- R[M, N] (f32) = alpha * A . B (+ beta * C) (+ bias, activation): one thread an element.
  local function reference_kernel(c)
    local ein, eout = elem_type(c.dtype), elem_type(c.out)
    if c.fp8 then raise("gemm.reference: fp8 inputs are checked against cuBLAS") end
    local name = c.name .. "_reference"
    local params = { { "A", tl.ptr(ein) }, { "B", tl.ptr(ein) }, { "R", tl.ptr(tl.f32) }, { "C", tl.ptr(eout) },
                     { "bias", tl.ptr(tl.f32) } }
    local k = tl.kernel(name, { params = params, block = { 16, 16, 1 } })
    k:define(function(k, p)
      local j, i = tl.global_id "x", tl.global_id "y"
      tl.if_(i:lt(c.m) & j:lt(c.n), function()
        local i64, j64 = i:cast(tl.i64), j:cast(tl.i64)
        local acc = tl.for_range(tl.const(0, tl.i64), tl.const(c.k, tl.i64), { tl.const(0, tl.f32) }, function(kk, s)
          local ia = c.a_major == "k" and i64 * c.k + kk or kk * c.m + i64
          local ib = c.b_major == "k" and j64 * c.k + kk or kk * c.n + j64
          return tl.fma((p.A + ia):load():cast(tl.f32), (p.B + ib):load():cast(tl.f32), s)
        end)
        local v = acc * tl.const(c.alpha or 1, tl.f32)
        if c.bias then v = v + (p.bias + j):load() end
        if c.beta and c.beta ~= 0 then v = v + (p.C + (i64 * c.n + j64)):load():cast(tl.f32) * tl.const(c.beta, tl.f32) end
        if c.activation == "relu" then v = tl.max(v, tl.const(0, tl.f32)) end
        (p.R + (i64 * c.n + j64)):store(v)
      end)
    end)
    return k
  end

  -- bad[0] += #{ i : |D[i] - R[i]| > tol }, bad[1] = max |D[i] - R[i]| (as f32 bits)
  local function compare_kernel(c, rtype)
    local eout = elem_type(c.out)
    local k = tl.kernel(c.name .. "_compare", {
      params = { { "D", tl.ptr(eout) }, { "R", tl.ptr(rtype) }, { "bad", tl.ptr(tl.i32) }, { "n", tl.i64 } },
      block = 256 })
    k:define(function(k, p)
      local i = tl.global_id("x"):cast(tl.i64)
      tl.if_(i:lt(p.n), function()
        local d, r = (p.D + i):load():cast(tl.f32), (p.R + i):load():cast(tl.f32)
        local err = tl.max(d - r, r - d)
        -- the output's rounding (2^-8 relative for bf16) and f32 summation order
        -- (fp8: the tensor cores accumulate in about 14 bits, truncating)
        local rel = c.fp8 and 2 ^ -5 or c.out == "f16" and 2 ^ -9 or 2 ^ -7
        local tol = tl.max(r, tl.const(0, tl.f32) - r) * tl.const(rel, tl.f32) +
                    tl.const((c.fp8 and 5e-2 or 1e-3) * math.sqrt(c.k), tl.f32)
        tl.if_(err:gt(tol) | err:ne(err), function() tl.atomic_add(p.bad, 1) end)
        tl.atomic_max(p.bad + 1, tl.min(err, tl.const(3.0e38, tl.f32)):bitcast(tl.i32))
      end)
    end)
    return k
  end

  -- g:check{a, b, d [, c, bias] [, reference = buffer] [, samples = 32]} -> ok, report:
  -- D against `reference` (another implementation's result, e.g. cuBLAS) or else
  -- against the plain reference kernel on the GPU, and `samples` elements against
  -- a CPU dot product.
  function M.Gemm:check(o)
    local c = self.cfg
    local D = tl.device
    local saved = tl.module()
    tl.new_module()
    local ref = not o.reference and reference_kernel(c) or nil
    local cmp = compare_kernel(c, o.reference and o.reference.type or tl.f32)
    tl.set_module(saved)
    local R <close> = not o.reference and D.alloc(tl.f32, c.m * c.n) or nil
    local bad <close> = D.alloc(tl.i32, 2)
    bad:fill(0)
    local dummy <close> = D.alloc(tl.f32, 4)
    if ref then
      ref:launch { grid = { (c.n + 15) // 16, (c.m + 15) // 16, 1 },
                   args = { o.a, o.b, R, o.c or dummy, o.bias or dummy } }
    end
    cmp:launch { grid = (c.m * c.n + 255) // 256, args = { o.d, o.reference or R, bad, c.m * c.n } }
    D.synchronize()
    local b = bad:to_table()
    local maxerr = string.unpack("<f", string.pack("<i4", b[2]))
    local report = ("%d of %d elements off the %s (max error %.3g)"):format(b[1], c.m * c.n,
      o.reference and "reference result" or "GPU reference kernel", maxerr)
    local ok = b[1] == 0
    -- CPU: sampled dot products in double (K-major operands: one row each)
    if c.a_major == "k" and c.b_major == "k" and not c.fp8 and not c.bias and not (c.beta and c.beta ~= 0) then
      local rng, worst, nbad = (o.seed or 1) * 2654435761 % 4294967296, 0, 0
      local n = o.samples or 32
      for _ = 1, n do
        rng = (rng * 1103515245 + 12345) % 2147483648
        local i = rng % c.m
        rng = (rng * 1103515245 + 12345) % 2147483648
        local j = rng % c.n
        local ra = o.a:to_table(i * c.k + 1, i * c.k + c.k)
        local rb = o.b:to_table(j * c.k + 1, j * c.k + c.k)
        local sum = 0.0
        for kk = 1, c.k do sum = sum + ra[kk] * rb[kk] end
        sum = sum * (c.alpha or 1)
        if c.activation == "relu" and sum < 0 then sum = 0 end
        local got = o.d:to_table(i * c.n + j + 1, i * c.n + j + 1)[1]
        local err = math.abs(got - sum)
        worst = math.max(worst, err)
        if err > math.abs(sum) * 2 ^ -7 + 1e-3 * math.sqrt(c.k) then nbad = nbad + 1 end
      end
      report = report .. ("; %d of %d CPU samples off (max error %.3g)"):format(nbad, n, worst)
      ok = ok and nbad == 0
    end
    return ok, report
  end
end

return M
