-- The lowered tile schedulers on the GPU (label gpu: spec/gpu_runner.lua;
-- tools/gpu test runs it). One kernel per kind (data-parallel, static
-- persistent, StreamK in its StreamK, split-K and data-parallel
-- decompositions) writes a record per work tile -- worker, tile, k begin,
-- k count and the coordinates -- that the host compares with the reference
-- (tl.core.sched_plan). Then a StreamK reduction of integer partial tiles
-- through the workspace fixup (block-striped partials, generic-barrier
-- counters) must give exactly the data-parallel result, in both reduction
-- modes. Fresh random configurations and data; the seed is printed.
-- Without a GPU the kernels are still built, compiled and assembled, and
-- the launches report pending (never passed).
local tl = require "tilua"
local core = tl.core

local GPU = tl.device.available()
local seed = require("tilua.gpu.check").seed() -- ctest fixes it (spec/tests.cmake)
print(("sched_gpu: seed %d"):format(seed))
math.randomseed(seed)
local rnd = math.random

local function gpu()
  if not GPU then pending("no GPU: " .. tl.device.error()) end
end

local function check_ptx(name, ptx)
  local ok, log = tl.ptxas(ptx)
  if ok == false then error(("%s: ptxas rejected the PTX:\n%s"):format(name, log), 0) end
end

-- {=====================================================================
-- Configurations (one table for the Lua surface and for core.sched_plan)
-- ======================================================================

local PLAN_KIND = { dp = "data_parallel", sp = "static_persistent", sk = "streamk" }

local function plan_of(c)
  return core.sched_plan {
    kind = PLAN_KIND[c.kind], tiles_m = c.m, tiles_n = c.n, tiles_l = c.l, tiles_k = c.k,
    workers = c.workers, cluster_m = c.cm, cluster_n = 1, swizzle = c.swizzle,
    column_major = c.order == "along_m", tiles_per_round = c.tpr or 0, decomp = c.decomp,
    splits = c.splits, reduction = c.reduction, min_k = c.min_k, acc_tile_bytes = c.acc or 0,
  }
end

local function scheduler(c, ws)
  local o = { tiles = { c.m, c.n, c.l, c.k }, workers = c.workers, swizzle = c.swizzle, raster_order = c.order,
              workspace = ws }
  if c.cm > 1 then o.cluster = { c.cm, 1, 1 } end
  if c.kind == "sp" then o.tiles_per_round = c.tpr end
  if c.kind == "sk" then
    o.decomposition, o.reduction, o.splits, o.min_k = c.decomp, c.reduction, c.splits, c.min_k
    o.accumulator_tile_bytes = c.acc
  end
  local fn = ({ dp = "data_parallel", sp = "static_persistent", sk = "streamk" })[c.kind]
  return tl.sched[fn](o)
end

local function name_of(c)
  return ("%s %dx%dx%d k%d workers %s cluster %d swizzle %d %s %s %s"):format(c.kind, c.m, c.n, c.l, c.k,
    tostring(c.workers), c.cm, c.swizzle, c.order, c.decomp or "", c.reduction or "")
end

local function kernel(name, c, params, body)
  tl.new_module()
  local spec = { params = params, block = 128 }
  if c.cm > 1 then spec.cluster = { c.cm, 1, 1 } end
  local k = tl.kernel(name, spec)
  k:define(body)
  return k
end

-- The worker (cluster) id and this CTA's rank in it.
local function worker_and_rank(c)
  if c.cm > 1 then return tl.cluster_id "x", tl.cluster_rank() end
  return tl.block_id "x", tl.const(0)
end

local function i32(v)
  v = v & 0xFFFFFFFF
  return v >= 0x80000000 and v - 0x100000000 or v
end

-- }=====================================================================

-- {=====================================================================
-- Records: (worker, tile, k begin, k count, m, n, l, split) per work tile
-- ======================================================================

local REC = 8

local function record_kernel(c, steps)
  return kernel("sched_records", c, { { "out", tl.ptr(tl.i32) }, { "ws", tl.ptr(tl.i8) } }, function(k, p)
    local worker, rank = worker_and_rank(c)
    local s = scheduler(c, p.ws)
    local wt = s:work(worker)
    k:async_exec("all", { warps = 4 }, function()
      tl.cutlass.for_range(tl.const(0), steps, { wt }, function(i)
        tl.if_(tl.logical_and(wt:is_valid(), tl.thread_id():eq(0)), function()
          local base = p.out + (tl.block_id "x" * steps + i) * REC
          local tile = c.kind == "sk" and wt:tile_idx() or wt:linear_id()
          local vals = { worker, tile, wt:k_tile_start(), wt:k_tile_count(), wt:m() * c.cm + rank, wt:n(), wt:l(),
                         c.kind == "sk" and wt:split_idx() or wt:tile_idx() }
          for j, v in ipairs(vals) do tl.store(base + (j - 1), v) end
        end)
        wt:advance()
      end)
    end)
  end)
end

-- What worker w's records must be: the reference's tiles or pieces, in order.
local function expected_records(c, plan, w, rank)
  local list = {}
  if c.kind == "sk" then
    for _, p in ipairs(plan:pieces(w)) do
      list[#list + 1] = { w, p.tile_idx, p.k_tile_start, p.k_tile_count, p.m * c.cm + rank, p.n, p.l, p.split_idx }
    end
  else
    for _, t in ipairs(plan:persistent(w)) do
      list[#list + 1] = { w, t.linear, 0, c.k, t.m * c.cm + rank, t.n, t.l, t.tile_idx }
    end
  end
  return list
end

local function record_configs()
  local function pick(t) return t[rnd(#t)] end
  local orders = { "along_m", "along_n" }
  local list = {
    { kind = "dp", m = rnd(3, 12), n = rnd(3, 12), l = rnd(1, 2), k = rnd(1, 9), cm = 1, swizzle = pick { 1, 2, 3, 8 },
      order = pick(orders) },
    { kind = "dp", m = rnd(3, 9), n = rnd(2, 7), l = 1, k = 4, cm = 2, swizzle = pick { 1, 2, 4 }, order = pick(orders) },
    { kind = "sp", m = rnd(4, 16), n = rnd(4, 16), l = rnd(1, 2), k = rnd(1, 9), cm = 1, workers = rnd(5, 40),
      swizzle = pick { 1, 2, 3, 8 }, order = pick(orders), tpr = rnd(0, 3) },
    { kind = "sk", m = 3, n = 3, l = 1, k = 10, cm = 1, workers = 4, swizzle = 1, order = "along_m",
      decomp = "heuristic", reduction = "deterministic", splits = 1, min_k = 0, want = "streamk" },
    { kind = "sk", m = rnd(3, 8), n = rnd(3, 8), l = 1, k = rnd(16, 48), cm = 1, workers = rnd(5, 24),
      swizzle = pick { 1, 2, 4 }, order = pick(orders), decomp = "streamk", reduction = "nondeterministic",
      splits = 1, min_k = rnd(2, 8), want = "streamk" },
    { kind = "sk", m = rnd(2, 6), n = rnd(2, 6), l = 1, k = rnd(8, 32), cm = 1, workers = rnd(8, 32),
      swizzle = 1, order = pick(orders), decomp = "split_k", reduction = "deterministic", splits = rnd(2, 4),
      min_k = 0, want = "split_k" },
    { kind = "sk", m = 4, n = 4, l = 1, k = 12, cm = 1, workers = 8, swizzle = 2, order = pick(orders),
      decomp = "heuristic", reduction = "deterministic", splits = 1, min_k = 0, want = "data_parallel" },
  }
  for _, c in ipairs(list) do c.acc = c.acc or 2048 end
  return list
end

-- }=====================================================================

-- {=====================================================================
-- The fixup: sum over k of a[cta tile][k][e], partial tiles through the workspace
-- ======================================================================

local T, E = 128, 4 -- threads, accumulator elements per thread
local TILE = T * E  -- elements of one CTA tile

local function fixup_kernel(c, steps)
  local params = { { "a", tl.ptr(tl.i32) }, { "c", tl.ptr(tl.i32) }, { "scratch", tl.ptr(tl.i32) },
                   { "ws", tl.ptr(tl.i8) } }
  return kernel("sched_fixup", c, params, function(k, p)
    local worker, rank = worker_and_rank(c)
    local cta, t = tl.block_id "x", tl.thread_id "x"
    local s = scheduler(c, p.ws)
    local acc = tl.cutlass.fragment(tl.i32, { E })
    local wt = s:work(worker)
    k:async_exec("all", { warps = T // 32 }, function()
      tl.cutlass.for_range(tl.const(0), steps, { wt }, function()
        tl.if_(wt:is_valid(), function()
          local ct = wt:tile_idx() * c.cm + rank
          local k0 = wt:k_tile_start()
          -- the "mainloop": this thread's elements t + j T of the piece's partial
          for j = 0, E - 1 do
            local e = t + j * T
            local sum = tl.for_range(k0, k0 + wt:k_tile_count(), { tl.const(0) }, function(kk, acc_v)
              return acc_v + tl.load(p.a + ((ct * c.k + kk) * TILE + e))
            end)
            tl.store(p.scratch + (cta * TILE + e), sum)
          end
          tl.block_striped.load(p.scratch + cta * TILE, acc)
          local epilogue = s:fixup(wt, acc)
          tl.if_(epilogue, function() tl.block_striped.store(p.c + ct * TILE, acc) end)
        end)
        wt:advance()
      end)
    end)
  end)
end

local function fixup_configs()
  local gens = {
    function() return { m = 3, n = 3, k = 10, workers = 4, decomp = "heuristic", min_k = 0, want = "streamk" } end,
    function()
      return { m = rnd(4, 7), n = rnd(3, 6), k = rnd(17, 40), workers = rnd(5, 13), decomp = "streamk",
               min_k = rnd(2, 6), want = "streamk" }
    end,
    function()
      return { m = rnd(2, 4), n = rnd(2, 4), k = rnd(12, 30), workers = rnd(20, 40), decomp = "split_k",
               splits = rnd(2, 5), min_k = 0, want = "split_k" }
    end,
    function() return { m = 3, n = 3, k = 21, workers = 4, decomp = "streamk", min_k = 3, cm = 2, want = "streamk" } end,
    function()
      return { m = rnd(6, 12), n = rnd(6, 12), k = rnd(24, 64), workers = rnd(40, 66), decomp = "heuristic",
               min_k = 4, want = "streamk" }
    end,
  }
  local list = {}
  for _, gen in ipairs(gens) do
    local c, info
    repeat -- a problem whose plan splits some tile across workers
      c = gen()
      c.kind, c.l, c.cm = "sk", 1, c.cm or 1
      c.swizzle, c.order, c.splits, c.acc = 1, rnd(2) == 1 and "along_m" or "along_n", c.splits or 1, TILE * 4
      c.reduction = "deterministic"
      info = plan_of(c):info()
    until info.decomp == c.want and info.max_splits > 1
    list[#list + 1] = c
  end
  return list
end

-- }=====================================================================

describe("the lowered schedulers on the GPU", function()
  it("write the (worker, tile, k begin, k count) records the reference gives, for every kind", function()
    local built = {}
    for _, c in ipairs(record_configs()) do
      local plan = plan_of(c)
      local info = plan:info()
      if c.want then assert.equal(c.want, info.decomp, name_of(c)) end
      local steps = 1
      for w = 0, info.grid - 1 do
        steps = math.max(steps, c.kind == "sk" and #plan:pieces(w) or #plan:persistent(w))
      end
      steps = steps + 1
      local k = record_kernel(c, steps)
      check_ptx("sched_records " .. name_of(c), k:compile())
      built[#built + 1] = { c = c, plan = plan, info = info, steps = steps, k = k }
    end
    gpu()
    for _, b in ipairs(built) do
      local c, info, steps = b.c, b.info, b.steps
      local ctas = info.grid * c.cm
      local out <close> = tl.device.alloc(tl.i32, ctas * steps * REC)
      out:fill(-1)
      local ws <close> = tl.device.alloc(tl.i8, math.max(info.workspace.total, 128))
      ws:fill(0)
      b.k:launch { grid = ctas, args = { out, ws } }
      tl.device.synchronize()
      local got, n = out:to_table(), 0
      for cta = 0, ctas - 1 do
        local w, rank = cta // c.cm, cta % c.cm
        local want = expected_records(c, b.plan, w, rank)
        for i = 0, steps - 1 do
          local base = (cta * steps + i) * REC
          local e = want[i + 1]
          for j = 1, REC do
            local g = got[base + j]
            local x = e and e[j] or -1
            if g ~= x then
              error(("%s: CTA %d record %d field %d = %d, the reference says %d"):format(name_of(c), cta, i, j, g, x), 0)
            end
          end
          if e then n = n + 1 end
        end
      end
      print(("sched_gpu: %s: grid %d (%s), %d records match"):format(name_of(c), ctas, info.decomp or info.kind, n))
    end
  end)

  it("reduce integer partial tiles through the StreamK fixup to exactly the data-parallel result", function()
    local problems = {}
    for _, c in ipairs(fixup_configs()) do
      local runs = {}
      for _, red in ipairs { "deterministic", "nondeterministic", "data_parallel" } do
        local cc = {}
        for key, v in pairs(c) do cc[key] = v end
        if red == "data_parallel" then
          cc.decomp, cc.reduction, cc.want = "data_parallel", "deterministic", "data_parallel"
        else
          cc.reduction = red
        end
        local plan = plan_of(cc)
        local info = plan:info()
        assert.equal(cc.want, info.decomp, name_of(cc))
        if red ~= "data_parallel" then assert.is_true(info.max_splits > 1, name_of(cc) .. ": no tile is split") end
        local steps = 1
        for w = 0, info.grid - 1 do steps = math.max(steps, #plan:pieces(w)) end
        local k = fixup_kernel(cc, steps + 1)
        check_ptx("sched_fixup " .. name_of(cc), k:compile())
        runs[#runs + 1] = { c = cc, info = info, k = k }
      end
      problems[#problems + 1] = runs
    end
    gpu()
    for pi, runs in ipairs(problems) do
      local c0 = runs[1].c
      local tiles = runs[1].info.tiles * c0.cm -- CTA tiles
      local a <close> = tl.device.random(tl.i32, tiles * c0.k * TILE, seed + pi)
      local A = a:to_table()
      local want = {}
      for ct = 0, tiles - 1 do
        for e = 0, TILE - 1 do
          local sum = 0
          for kk = 0, c0.k - 1 do sum = sum + A[(ct * c0.k + kk) * TILE + e + 1] end
          want[ct * TILE + e + 1] = i32(sum)
        end
      end
      local dp_result
      for _, r in ipairs(runs) do
        local c, info = r.c, r.info
        local ctas = info.grid * c.cm
        local out <close> = tl.device.alloc(tl.i32, tiles * TILE)
        out:fill(0)
        local scratch <close> = tl.device.alloc(tl.i32, ctas * TILE)
        local ws <close> = tl.device.alloc(tl.i8, math.max(info.workspace.total, 128))
        ws:fill(0)
        r.k:launch { grid = ctas, args = { a, out, scratch, ws } }
        tl.device.synchronize()
        local C, W, bad = out:to_table(), ws:to_table(), 0
        for i = 1, tiles * TILE do
          if C[i] ~= want[i] then
            bad = bad + 1
            if bad <= 5 then
              print(("sched_gpu: %s: CTA tile %d element %d = %d, the CPU says %d"):format(name_of(c), (i - 1) // TILE,
                (i - 1) % TILE, C[i], want[i]))
            end
          end
        end
        assert.equal(0, bad, name_of(c) .. ": sums differ from the CPU's")
        local ws_info = info.workspace
        for off = ws_info.barrier_offset, ws_info.barrier_offset + ws_info.barriers - 1 do
          assert.equal(0, W[off + 1], name_of(c) .. ": a barrier counter was not reset")
        end
        if info.decomp == "data_parallel" then dp_result = C end
        print(("sched_gpu: %s: grid %d (%s, %d StreamK tiles, up to %d pieces, workspace %d bytes): %d CTA tiles exact"):format(
          name_of(c), ctas, info.decomp, info.sk_tiles or 0, info.max_splits or 1, ws_info.total, tiles))
      end
      assert.same(want, dp_result) -- the StreamK runs above equal it element for element
    end
  end)
end)
