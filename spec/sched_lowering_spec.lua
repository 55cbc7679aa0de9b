-- lower-tile-scheduler (src/passes/lower_tile_scheduler.c) against the
-- reference schedulers (src/sched): kernels built with the Lua surface expose
-- every field of every work tile a worker takes; the pipeline runs up to the
-- pass; lua/tilua/emulate/interp.lua interprets the lowered arithmetic for sampled
-- workers and the values are compared with tl.core.sched_plan. The StreamK
-- fixup is interpreted with one coroutine per CTA over a model of the
-- workspace (generic barriers block by yielding), its protocol compared with
-- the reference's fixup roles and its sums with the whole-K sums. Then: the
-- lowered module verifies, PTX from it passes ptxas, and the unsupported
-- cases are diagnosed.
local H = dofile "spec/helper.lua"
local tl = require "tilua"
tl.options.keep_stages = true -- the checks read the stages' IR
local interp = require "tilua.emulate.interp"
local core = tl.core

local UPTO = "canonicalize,cse,lower-tile-scheduler"
local PTX_WITHOUT_PIPELINE = "canonicalize,cse,lower-tile-scheduler,convert-tile-to-nvvm,canonicalize,cse,canonicalize"
local OUT, WS, MARK = 1 << 20, 1 << 32, 1 << 24 -- model addresses of the kernels' buffers

local FIELDS = { "m", "n", "l", "linear_id", "tile_idx", "k_tile_start", "k_tile_count", "split_idx",
                 "expected_splits", "is_valid", "is_separate_reduction", "is_final_split", "increment_pipe" }
local FLAG = { is_valid = true, is_separate_reduction = true, is_final_split = true, increment_pipe = true }
local NF = #FIELDS

-- {=====================================================================
-- Configurations: one table both for the Lua surface and for core.sched_plan
-- ======================================================================

local KIND_FN = { dp = "data_parallel", sp = "static_persistent", sk = "streamk" }
local PLAN_KIND = { dp = "data_parallel", sp = "static_persistent", sk = "streamk" }

local function plan_of(c)
  return core.sched_plan {
    kind = PLAN_KIND[c.kind], tiles_m = c.m, tiles_n = c.n, tiles_l = c.l, tiles_k = c.k,
    workers = c.workers, cluster_m = c.cm, cluster_n = c.cn, swizzle = c.swizzle,
    column_major = c.order == "along_m", tiles_per_round = c.tpr, decomp = c.decomp,
    splits = c.splits, reduction = c.reduction, min_k = c.min_k, acc_tile_bytes = c.acc or 0,
  }
end

local function describe_cfg(c)
  return ("%s %dx%dx%d k%d workers %s cluster %dx%d swizzle %d %s tpr %d %s/%s splits %d min_k %d"):format(
    c.kind, c.m, c.n, c.l, c.k, tostring(c.workers), c.cm, c.cn, c.swizzle, c.order, c.tpr or 0,
    c.decomp or "-", c.reduction or "-", c.splits or 1, c.min_k or 0)
end

-- The scheduler of configuration c, with operands from `ops` (constants by default).
local function scheduler(c, ops, ws)
  ops = ops or {}
  local o = {
    tiles = { ops.m or c.m, ops.n or c.n, ops.l or c.l, ops.k or c.k }, workers = ops.workers or c.workers,
    swizzle = c.swizzle, raster_order = c.order, workspace = ws,
  }
  if c.cm > 1 or c.cn > 1 then o.cluster = { c.cm, c.cn, 1 } end
  if c.kind == "sp" then o.tiles_per_round = c.tpr end
  if c.kind == "sk" then
    o.decomposition, o.reduction, o.splits, o.min_k = c.decomp, c.reduction, c.splits, c.min_k
    o.accumulator_tile_bytes = c.acc
  end
  return tl.sched[KIND_FN[c.kind]](o)
end

local function kernel_of(c, params, fn, block)
  tl.new_module()
  local spec = { params = params, block = block or 32 }
  if c.cm > 1 or c.cn > 1 then spec.cluster = { c.cm, c.cn, 1 } end
  local k = tl.kernel("probe", spec)
  k:define(fn)
  return k
end

local function b2i(v) return tl.select(v, tl.const(1), tl.const(0)) end

local function count(s, pat)
  local n = 0
  for _ in s:gmatch(pat) do n = n + 1 end
  return n
end

-- }=====================================================================

-- {=====================================================================
-- The probe: each worker stores every field of `steps` work tiles
-- ======================================================================

local RUNTIME_OPS = { "m", "n", "l", "k", "workers" }

local function probe_kernel(c, steps, runtime)
  local params = { { "w", tl.i32 }, { "out", tl.ptr(tl.i32) }, { "ws", tl.ptr(tl.i8) } }
  if runtime then
    for _, n in ipairs(RUNTIME_OPS) do params[#params + 1] = { "op_" .. n, tl.i32 } end
  end
  local k = kernel_of(c, params, function(k, p)
    local ops = {}
    if runtime then for _, n in ipairs(RUNTIME_OPS) do ops[n] = p["op_" .. n] end end
    local s = scheduler(c, ops, p.ws)
    local wt = s:work(p.w)
    k:async_exec("sched", { warps = 1 }, function()
      tl.cutlass.for_range(0, steps, { wt }, function(i)
        local base = p.out + i * NF
        for j, f in ipairs(FIELDS) do
          local v = wt[f](wt)
          if FLAG[f] then v = b2i(v) end
          tl.store(base + (j - 1), v)
        end
        wt:advance()
      end)
    end)
  end)
  tl.compile(k, UPTO)
  return k
end

-- An eval hook: the tile memory ops over mem, async.exec runs its body.
local function model(extra)
  local mem_eval, mem = interp.memory()
  return function(op, ins, env)
    local name = op:name()
    if name == "cutlass.async.exec" then
      env:block(op:region(1):entry())
      return {}
    end
    if name == "tile.alloc_shared" then return { MARK } end -- one shared buffer, at MARK
    if name == "builtin.unrealized_conversion_cast" and op:noperands() == 0 then return { 0 } end
    if extra then
      local r = extra(op, ins, env, mem)
      if r then return r end
    end
    return mem_eval(op, ins)
  end, mem
end

-- Interpret the probe for worker w; returns the records, one table of fields per step.
local function run_probe(k, w, steps, extra_args)
  local eval, mem = model()
  local args = { w, OUT, WS }
  for _, a in ipairs(extra_args or {}) do args[#args + 1] = a end
  interp.run(k.op, args, { eval = eval })
  local recs = {}
  for i = 0, steps - 1 do
    local r = {}
    for j, f in ipairs(FIELDS) do r[f] = mem[OUT + (i * NF + j - 1) * 4] end
    recs[i + 1] = r
  end
  return recs
end

-- The expected fields of step i (1-based) of worker w, from the reference. Fields
-- a step does not define (those of a finished StreamK worker) are absent.
local function expected_tiles(c, plan, w, steps)
  local info, tiles, want = plan:info(), plan:persistent(w), {}
  local prev
  for i = 1, steps do
    local t = tiles[i]
    local e = { is_valid = t and 1 or 0 }
    if t or i == #tiles + 1 then
      local linear = t and t.linear or (prev and prev.linear + info.grid or w)
      local u = plan:unpack(linear)
      e.linear_id, e.m, e.n, e.l = linear, u.m, u.n, u.l
      e.increment_pipe = prev and prev.increment_pipe and 1 or 0
      if t then
        e.tile_idx = t.tile_idx
        assert(t.m == u.m and t.n == u.n and t.l == u.l)
      end
      e.k_tile_start, e.k_tile_count, e.split_idx, e.expected_splits = 0, c.k, 0, 1
      e.is_separate_reduction, e.is_final_split = 0, 1
    end
    if i == 1 and c.kind == "dp" then
      local d = plan:dp_tile(w)
      assert(d.linear == e.linear_id and d.m == e.m and d.valid == (e.is_valid == 1))
    end
    want[i] = e
    prev = t
  end
  return want
end

local function expected_pieces(plan, w, steps)
  local pieces, want = plan:pieces(w), {}
  for i = 1, steps do
    local p = pieces[i]
    if p then
      want[i] = {
        m = p.m, n = p.n, l = p.l, linear_id = p.unit, tile_idx = p.tile_idx, k_tile_start = p.k_tile_start,
        k_tile_count = p.k_tile_count, split_idx = p.split_idx, expected_splits = p.expected_splits, is_valid = 1,
        is_separate_reduction = p.is_separate_reduction and 1 or 0, is_final_split = p.is_final_split and 1 or 0,
        increment_pipe = 0,
      }
    else
      want[i] = { is_valid = 0 }
    end
  end
  return want
end

local compared = 0 -- values compared, to show that the checks ran

local function compare(c, w, want, got)
  for i, e in ipairs(want) do
    for f, v in pairs(e) do
      local g = got[i][f]
      compared = compared + 1
      if g ~= v then
        error(("%s: worker %d step %d: %s = %s, the reference says %s"):format(describe_cfg(c), w, i, f,
          tostring(g), tostring(v)), 0)
      end
    end
  end
end

-- Workers to interpret: the first and last of the grid, one between, and one idle.
local function sample_workers(grid, rnd)
  local ws, seen = {}, {}
  for _, w in ipairs { 0, grid - 1, rnd(0, math.max(grid - 1, 0)), grid } do
    if w >= 0 and not seen[w] then seen[w], ws[#ws + 1] = true, w end
  end
  return ws
end

-- Steps enough for the busiest sampled worker, and one more.
local function steps_for(c, plan, workers)
  local most = 1
  for _, w in ipairs(workers) do
    local n = c.kind == "sk" and #plan:pieces(w) or #plan:persistent(w)
    most = math.max(most, n)
  end
  return most + 1
end

local function check_config(c, rnd, runtime)
  local plan = plan_of(c)
  local workers = sample_workers(plan:info().grid, rnd)
  local steps = steps_for(c, plan, workers)
  local k = probe_kernel(c, steps, runtime)
  for _, w in ipairs(workers) do
    local extra = runtime and { c.m, c.n, c.l, c.k, c.workers or 1 } or nil
    local got = run_probe(k, w, steps, extra)
    local want = c.kind == "sk" and expected_pieces(plan, w, steps) or expected_tiles(c, plan, w, steps)
    compare(c, w, want, got)
  end
end

-- }=====================================================================

-- {=====================================================================
-- Generated configurations
-- ======================================================================

local function configs(kind, count, rnd)
  local list = {}
  local function add(c)
    c.kind, c.l, c.cm, c.cn = kind, c.l or 1, c.cm or 1, c.cn or 1
    c.swizzle, c.order, c.tpr = c.swizzle or 1, c.order or "along_m", c.tpr or 0
    if kind == "sk" then
      c.decomp, c.reduction = c.decomp or "heuristic", c.reduction or "deterministic"
      c.splits, c.min_k, c.acc = c.splits or 1, c.min_k or 0, c.acc or 4096
    end
    if kind == "dp" then c.workers, c.tpr = nil, 0 end
    list[#list + 1] = c
  end
  -- edge cases first: one tile, fewer tiles than workers, wide swizzle, overhanging clusters
  add { m = 1, n = 1, k = 1, workers = 1 }
  add { m = 1, n = 1, k = 17, workers = 5, min_k = 1 }
  add { m = 3, n = 3, k = 10, workers = 4 } -- docs/schedulers.md, worked example
  add { m = 5, n = 3, k = 9, workers = 7, swizzle = 8, order = "along_n" }
  add { m = 7, n = 5, k = 12, workers = 4, cm = 2, swizzle = 2, l = 2, min_k = 2 }
  add { m = 4, n = 7, k = 6, workers = 3, cn = 2, swizzle = 3, min_k = 1, tpr = 3 }
  add { m = 2, n = 2, k = 40, workers = 9, min_k = 3 }
  local decomps = { "heuristic", "heuristic", "streamk", "split_k", "data_parallel" }
  while #list < count do
    local cm, cn = 1, 1
    local r = rnd(1, 10)
    if r == 1 then cm = 2 elseif r == 2 then cn = 2 elseif r == 3 then cm = 4 end
    add {
      m = rnd(1, 9), n = rnd(1, 9), l = rnd(1, 4) == 1 and rnd(2, 3) or 1, k = rnd(1, 40),
      workers = rnd(1, 24), cm = cm, cn = cn, swizzle = ({ 1, 1, 2, 3, 4, 8 })[rnd(1, 6)],
      order = rnd(1, 2) == 1 and "along_m" or "along_n", tpr = rnd(0, 4),
      decomp = decomps[rnd(1, #decomps)], reduction = rnd(1, 2) == 1 and "deterministic" or "nondeterministic",
      splits = rnd(1, 5), min_k = rnd(0, 4),
    }
  end
  return list
end

local function rng(seed)
  local s = seed
  return function(lo, hi)
    s = (s * 6364136223846793005 + 1442695040888963407) & 0x7fffffffffffffff
    return lo + (s >> 33) % (hi - lo + 1)
  end
end

-- }=====================================================================

describe("lower-tile-scheduler agrees with the reference", function()
  for _, case in ipairs { { "dp", 60, 11 }, { "sp", 90, 12 }, { "sk", 260, 13 } } do
    local kind, count, seed = case[1], case[2], case[3]
    it(("%s: every field of every work tile, %d configurations"):format(KIND_FN[kind], count), function()
      local rnd, before = rng(seed), compared
      for _, c in ipairs(configs(kind, count, rnd)) do check_config(c, rnd) end
      assert.is_true(compared - before > count * 20, "too few values compared")
      print(("  %s: %d configurations, %d values compared"):format(KIND_FN[kind], count, compared - before))
    end)
  end

  it("data-parallel and static persistent with runtime tile counts and workers", function()
    local rnd = rng(14)
    for _, kind in ipairs { "dp", "sp" } do
      for _, c in ipairs(configs(kind, 30, rnd)) do check_config(c, rnd, true) end
    end
  end)
end)

-- {=====================================================================
-- The StreamK fixup, interpreted: one coroutine per CTA over a model workspace
-- ======================================================================

local E = 2       -- accumulator elements per thread
local THREADS = 32 -- the fixup runs on one warp (its async.exec)

-- The partial of k tile kk of tile t at element e of the CTA tile.
local function f(t, kk, e) return (t * 7919 + kk * 104729 + e * 31 + 1) % 1009 end

-- A kernel in which worker p.w runs every piece it gets: "mainloop" (stores the
-- piece to p.mark, where the model fills the accumulator), the fixup, and the
-- "epilogue" (a store of the tile to p.mark + 3) when the fixup says so.
local function fixup_kernel(c, steps)
  local k = kernel_of(c, { { "w", tl.i32 }, { "ws", tl.ptr(tl.i8) }, { "mark", tl.ptr(tl.i32) } }, function(k, p)
    local s = scheduler(c, {}, p.ws)
    local acc = tl.op1("builtin.unrealized_conversion_cast", {}, tl.memref(tl.i32, { E }, "rmem"))
    local wt = s:work(p.w)
    k:async_exec("math", { warps = 1 }, function()
      tl.cutlass.for_range(0, steps, { wt }, function()
        tl.if_(wt:is_valid(), function()
          tl.store(p.mark, wt:tile_idx())
          tl.store(p.mark + 1, wt:k_tile_start())
          tl.store(p.mark + 2, wt:k_tile_count())
          local epilogue = s:fixup(wt, acc)
          tl.if_(epilogue, function() tl.store(p.mark + 3, wt:tile_idx()) end)
        end)
        wt:advance()
      end)
    end)
  end)
  tl.compile(k, UPTO)
  return k
end

-- Run the fixup kernel on every CTA of the grid, interleaved by seed; returns
-- what the model saw (per CTA: the fixup events of each piece; per tile: the
-- epilogues) and the workspace.
local fixup_stats = { pieces = 0, partial = 0, waits = 0, reads = 0, tiles = 0, blocked = 0 }

local function run_fixup(c, plan, k, seed)
  local info = plan:info()
  local ctas, acc_bytes = c.cm * c.cn, c.acc
  local ws_info = info.workspace
  local mem, rnd = {}, rng(seed)
  local tiles_done, ctx_of = {}, {}
  local function cur() return ctx_of[coroutine.running()] end
  local function counter(ins) return ins[1] + ins[2] * 4 end
  local function slot_of(x, addr)
    local off = addr - WS
    assert(off >= 0 and off < ws_info.reduction and off % acc_bytes == 0, "a slot outside the reduction region")
    local q = off // acc_bytes
    local per = info.max_splits - 1
    assert(q // per == x.piece.tile * ctas + x.rank, "a slot of another CTA tile")
    return q % per
  end
  local function event(x) return x.piece.events end
  local function striped(op, ins, x, how)
    assert(op:attr "threads" == THREADS, "threads attribute")
    local base = ins[1]
    for t = 0, THREADS - 1 do
      for j = 0, E - 1 do
        local addr, e = base + (j * THREADS + t) * 4, j * THREADS + t
        if how == "store" then
          mem[addr] = x.acc[e]
        else
          local v = mem[addr]
          if v == nil then error("block_striped." .. how .. " reads a slot never written", 0) end
          x.acc[e] = how == "load" and v or x.acc[e] + v
        end
      end
    end
  end
  local extra = function(op, ins)
    local name, x = op:name(), cur()
    if name == "tile.cluster_rank" then return { x.rank } end
    if name == "builtin.unrealized_conversion_cast" then return { 0 } end
    if name == "tile.store" and ins[2] >= MARK and ins[2] < MARK + 16 then
      local field = (ins[2] - MARK) // 4
      if field == 0 then
        x.piece = { tile = ins[1], events = { reads = {} } }
        x.pieces[#x.pieces + 1] = x.piece
        coroutine.yield "step"
      elseif field == 1 then x.piece.k0 = ins[1]
      elseif field == 2 then
        x.acc = {}
        for e = 0, E * THREADS - 1 do
          local sum = 0
          for kk = x.piece.k0, x.piece.k0 + ins[1] - 1 do sum = sum + f(x.piece.tile * ctas + x.rank, kk, e) end
          x.acc[e] = sum
        end
      else
        local key = ins[1] * ctas + x.rank
        tiles_done[key] = (tiles_done[key] or 0) + 1
        for e = 0, E * THREADS - 1 do
          local sum = 0
          for kk = 0, c.k - 1 do sum = sum + f(key, kk, e) end
          if x.acc[e] ~= sum then
            error(("tile %d rank %d element %d: epilogue sum %d, the whole K gives %d"):format(ins[1], x.rank, e,
              x.acc[e], sum), 0)
          end
        end
        x.piece.events.epilogue = true
      end
      return {}
    end
    if name == "cutlass.block_striped.store" then
      assert(not event(x).write, "two stores")
      event(x).write = slot_of(x, ins[1])
      striped(op, ins, x, "store")
      return {}
    end
    if name == "cutlass.block_striped.load_add" then
      local r = event(x).reads
      r[#r + 1] = slot_of(x, ins[1])
      striped(op, ins, x, "load_add")
      return {}
    end
    if name:match "^cutlass%.generic_barrier%." then
      local a = counter(ins)
      assert(a >= WS + ws_info.barrier_offset and a < WS + ws_info.barrier_offset + ws_info.barriers,
        "a counter outside the barrier region")
      assert((a - WS - ws_info.barrier_offset) // 4 == x.piece.tile * ctas + x.rank, "another tile's counter")
      if name == "cutlass.generic_barrier.arrive_inc" then
        assert(event(x).write and not event(x).arrive, "arrive without a store before it")
        mem[a] = (mem[a] or 0) + 1
        event(x).arrive = true
      else
        while (mem[a] or 0) ~= ins[3] do coroutine.yield "blocked" end
        event(x).wait = ins[3]
        if name == "cutlass.generic_barrier.wait_eq_reset" then
          mem[a] = 0
          event(x).reset = true
        end
      end
      return {}
    end
  end
  local eval = model(extra)
  local ctxs = {}
  for w = 0, info.grid - 1 do
    for rank = 0, ctas - 1 do
      local x = { w = w, rank = rank, pieces = {} }
      x.co = coroutine.create(function()
        interp.run(k.op, { w, WS, MARK }, { eval = function(op, ins, env)
          local r = eval(op, ins, env)
          if r then return r end
          -- interp.memory models the rest; stores to the marks are handled above
        end })
      end)
      ctx_of[x.co] = x
      ctxs[#ctxs + 1] = x
    end
  end
  -- interleave: resume a random live CTA; a full round of blocked ones is a deadlock
  local live, blocked = #ctxs, 0
  while live > 0 do
    local x = ctxs[rnd(1, #ctxs)]
    if coroutine.status(x.co) ~= "dead" then
      local ok, why = coroutine.resume(x.co)
      if not ok then error(("%s: CTA %d.%d: %s"):format(describe_cfg(c), x.w, x.rank, tostring(why)), 0) end
      if coroutine.status(x.co) == "dead" then live, blocked = live - 1, 0
      elseif why == "blocked" then blocked, fixup_stats.blocked = blocked + 1, fixup_stats.blocked + 1
      else blocked = 0 end
      if blocked > 200 * #ctxs then error(describe_cfg(c) .. ": deadlock", 0) end
    end
  end
  return ctxs, tiles_done, mem
end

local function check_fixup(c, seed)
  local plan = plan_of(c)
  local info = plan:info()
  local most = 1
  for w = 0, info.grid - 1 do most = math.max(most, #plan:pieces(w)) end
  local k = fixup_kernel(c, most + 1)
  local ctxs, done, mem = run_fixup(c, plan, k, seed)
  local ctas = c.cm * c.cn
  local where = describe_cfg(c)
  for _, x in ipairs(ctxs) do
    local pieces = plan:pieces(x.w)
    assert.equal(#pieces, #x.pieces, where)
    for i, p in ipairs(pieces) do
      local ev, role = x.pieces[i].events, p.fixup
      local at = ("%s: worker %d rank %d piece %d (tile %d)"):format(where, x.w, x.rank, i, p.tile_idx)
      assert.equal(p.tile_idx, x.pieces[i].tile, at)
      assert.equal(role.wait and role.wait_value or nil, ev.wait, at .. ": wait")
      local reads = {}
      for s = role.read_first, role.read_first + role.read_count - 1 do reads[#reads + 1] = s end
      assert.same(reads, ev.reads, at .. ": slots read")
      assert.equal(role.write and role.write_slot or nil, ev.write, at .. ": slot written")
      assert.equal(role.write, ev.arrive == true, at .. ": arrive")
      assert.equal(role.epilogue, ev.reset == true, at .. ": counter reset")
      assert.equal(role.epilogue or not role.participates, ev.epilogue == true, at .. ": epilogue")
      fixup_stats.pieces = fixup_stats.pieces + 1
      if role.participates then fixup_stats.partial = fixup_stats.partial + 1 end
      if ev.wait then fixup_stats.waits = fixup_stats.waits + 1 end
      fixup_stats.reads = fixup_stats.reads + #ev.reads
    end
  end
  for t = 0, info.tiles - 1 do
    for r = 0, ctas - 1 do assert.equal(1, done[t * ctas + r], ("%s: epilogues of tile %d rank %d"):format(where, t, r)) end
    fixup_stats.tiles = fixup_stats.tiles + ctas
  end
  local ws = info.workspace
  for a = WS + ws.barrier_offset, WS + ws.barrier_offset + ws.barriers - 4, 4 do
    assert.equal(0, mem[a] or 0, where .. ": a counter left non-zero")
  end
end

describe("work tiles carried through scf.while and scf.if", function()
  -- while (work.is_valid) { record it; work = n < 1000 ? advance(work) : work }
  local function while_kernel(c)
    return kernel_of(c, { { "w", tl.i32 }, { "out", tl.ptr(tl.i32) }, { "ws", tl.ptr(tl.i8) } }, function(k, p)
      local s = scheduler(c, {}, p.ws)
      local function wt(v) return setmetatable({ value = v, sched = s }, tl.cutlass.WorkTile) end
      k:async_exec("sched", { warps = 1 }, function()
        tl.while_({ s:work(p.w).value, tl.const(0) }, function(v, n) return wt(v):is_valid(), v, n end,
          function(v, n)
            local w = wt(v)
            for j, f in ipairs(FIELDS) do
              local x = w[f](w)
              tl.store(p.out + (n * NF + (j - 1)), FLAG[f] and b2i(x) or x)
            end
            local nv = tl.if_(n:lt(1000), function() return wt(v):advance().value end, function() return v end)
            return nv, n + 1
          end)
      end)
    end)
  end

  it("agree with the reference", function()
    local rnd = rng(41)
    for _, kind in ipairs { "sp", "sk" } do
      for _, c in ipairs(configs(kind, 25, rnd)) do
        local plan = plan_of(c)
        local k = while_kernel(c)
        tl.compile(k, UPTO)
        assert.equal(0, count(k.module:print(), "cutlass%.tile_scheduler"))
        for _, w in ipairs(sample_workers(plan:info().grid, rnd)) do
          local n = c.kind == "sk" and #plan:pieces(w) or #plan:persistent(w)
          local got = run_probe(k, w, n + 1)
          local want = c.kind == "sk" and expected_pieces(plan, w, n) or expected_tiles(c, plan, w, n)
          compare(c, w, want, got)
          assert.is_nil(got[n + 1].m, "a record past the last valid work tile")
        end
      end
    end
  end)
end)

describe("the lowered StreamK fixup", function()
  it("follows the reference's fixup roles and sums every tile exactly, in both reduction modes", function()
    local rnd, n = rng(21), 0
    local list = {
      { m = 3, n = 3, k = 10, workers = 4 },
      { m = 1, n = 1, k = 17, workers = 5, min_k = 1 },
      { m = 2, n = 3, k = 10, workers = 4, min_k = 4, cm = 2 },
      { m = 4, n = 4, k = 7, workers = 9, decomp = "split_k", splits = 3 },
      { m = 2, n = 2, k = 13, workers = 3, decomp = "streamk", min_k = 1, cn = 2 },
    }
    while #list < 40 do
      list[#list + 1] = {
        m = rnd(1, 5), n = rnd(1, 5), l = rnd(1, 3) == 1 and 2 or 1, k = rnd(1, 24), workers = rnd(1, 16),
        cm = rnd(1, 6) == 1 and 2 or 1, swizzle = rnd(1, 3), order = rnd(1, 2) == 1 and "along_m" or "along_n",
        decomp = ({ "heuristic", "streamk", "split_k" })[rnd(1, 3)], splits = rnd(1, 4), min_k = rnd(1, 4),
      }
    end
    for _, base in ipairs(list) do
      for _, red in ipairs { "deterministic", "nondeterministic" } do
        local c = {}
        for key, v in pairs(base) do c[key] = v end
        c.kind, c.l, c.cm, c.cn = "sk", c.l or 1, c.cm or 1, c.cn or 1
        c.swizzle, c.order, c.tpr = c.swizzle or 1, c.order or "along_m", 0
        c.decomp, c.reduction, c.splits, c.min_k = c.decomp or "heuristic", red, c.splits or 1, c.min_k or 0
        c.acc = E * THREADS * 4
        check_fixup(c, 100 + n)
        n = n + 1
      end
    end
    local st = fixup_stats
    print(("  %d plans: %d pieces (%d partial: %d waits, %d slot reads), %d CTA tiles reduced, %d blocked waits"):format(
      n, st.pieces, st.partial, st.waits, st.reads, st.tiles, st.blocked))
    assert.is_true(st.partial > 100 and st.reads > 100)
  end)
end)

-- }=====================================================================

-- {=====================================================================
-- What the lowered module holds, PTX, the SM100 variant, diagnostics
-- ======================================================================

local function has_pass(name)
  for _, p in ipairs(core.passes()) do if p.name == name then return true end end
  return false
end

-- Every kind and op in one kernel; MODS probes hold the StreamK handle.
local function all_ops_kernel(reduction, with_exec)
  tl.new_module()
  local k = tl.kernel("all", { params = { { "w", tl.i32 }, { "out", tl.ptr(tl.i32) }, { "ws", tl.ptr(tl.i8) } },
                                block = 128 })
  k:define(function(k, p)
    local resp = k:shared(tl.i32, 1)
    local dp = tl.sched.data_parallel { tiles = { 5, 3, 1, 4 }, swizzle = 2, model = "pull", response = resp }
    local sp = tl.sched.static_persistent { tiles = { 7, 2, 2, 6 }, workers = 5, tiles_per_round = 2 }
    local sk = tl.sched.streamk { tiles = { 3, 3, 1, 10 }, workers = 4, workspace = p.ws, reduction = reduction,
                                  accumulator_tile_bytes = 128 * 4 * 4 }
    local acc = tl.op1("builtin.unrealized_conversion_cast", {}, tl.memref(tl.i32, { 4 }, "rmem"))
    local total, red, bar = sk:workspace_sizes()
    tl.store(p.out, (total + red + bar):cast(tl.i32))
    local body = function()
      for i, s in ipairs { dp, sp, sk } do
        local wt = s:work(p.w)
        if with_exec then wt:advance() end
        tl.store(p.out + i, wt:m() + wt:n() + wt:k_tile_count())
        if s == sk and with_exec then
          local epi = sk:fixup(wt, acc)
          tl.store(p.out + 7, b2i(epi))
        end
      end
    end
    if with_exec then
      k:async_exec("all", { warps = 4 }, function() tl.mods.mainloop(sk, 1, body) end)
    else
      body()
    end
  end)
  return k
end

describe("the lowered module", function()
  it("verifies and keeps no scheduler op but the MODS probes (their handle becomes a bare cast)", function()
    for _, red in ipairs { "deterministic", "nondeterministic" } do
      local k = all_ops_kernel(red, true)
      tl.compile(k, UPTO)
      local ir = k.module:print()
      assert.equal(2, count(ir, "cutlass%.tile_scheduler%.mods_report_mainloop_"))
      assert.equal(0, count(ir, "cutlass%.tile_scheduler%.work_tile_info"))
      assert.equal(0, count(ir, "cutlass%.tile_scheduler%.advance"))
      assert.equal(0, count(ir, "cutlass%.tile_scheduler%.fixup"))
      assert.equal(0, count(ir, "cutlass%.tile_scheduler%.create_dp"))
      assert.equal(0, count(ir, "cutlass%.tile_scheduler%.create"))
      assert.equal(0, count(ir, "unrealized_conversion_cast %%"), "no bridge cast left")
      assert.equal(1, count(ir, "unrealized_conversion_cast : !cutlass%.tile_scheduler<streamk>"))
      assert.equal(1, count(ir, "tile%.load .*volatile"), "the pull model loads the next WorkID")
      assert.equal(1, count(ir, "cutlass%.generic_barrier%.wait_eq_reset"))
      assert.equal(1, count(ir, "cutlass%.generic_barrier%.arrive_inc"))
      assert.equal(red == "deterministic" and 1 or 0, count(ir, "cutlass%.generic_barrier%.wait_eq "))
      assert.equal(1, count(ir, "cutlass%.block_striped%.store"))
      assert.equal(1, count(ir, "cutlass%.block_striped%.load_add"))
      assert.equal(red == "deterministic" and 0 or 1, count(ir, "scf%.for"), "the final split's loop over slots")
      assert.truthy(ir:find("threads = 128", 1, true))
    end
  end)

  -- The scheduler contract "StreamK fixup uses release/acquire-style ordering around partials". It holds by
  -- construction (publish = store, then arrive; wait, then add); this fails if either lowering
  -- ever reorders it.
  it("publishes a partial before it releases, and acquires before it reads it (the fixup order of the contract)", function()
    for _, red in ipairs { "deterministic", "nondeterministic" } do
      local k = all_ops_kernel(red, true)
      tl.compile(k, UPTO)
      local ir = k.module:print()
      assert.truthy(ir:find("cutlass%.block_striped%.store[^\n]*\n%s*cutlass%.generic_barrier%.arrive_inc"),
        red .. ": the partial's store right before the release")
      H.seq(ir, { "cutlass.generic_barrier.wait_eq_reset", "cutlass.block_striped.load_add" })
      if red == "deterministic" then H.seq(ir, { "cutlass.generic_barrier.wait_eq ", "cutlass.block_striped.load_add" }) end
      tl.compile(k, "convert-cutlass-to-nvvm")
      ir = k.module:print()
      -- release: every thread's stores, the executors' barrier, then one thread's fence and add
      H.seq(ir, { "tile.store", "tile.barrier", 'tile.fence {scope = "gpu"}', '{kind = "add", scope = "gpu"}' })
      -- acquire: the spin, its fence, the executors' barrier, then the loads of the slot
      H.seq(ir, { "tile.atomic_cas", 'tile.fence {scope = "gpu"}', "tile.barrier", "tile.load" })
    end
  end)

  it("passes work tiles into switch_by_executor cases as their fields", function()
    local c = { kind = "sp", m = 5, n = 4, l = 1, k = 3, cm = 1, cn = 1, swizzle = 2, order = "along_m", tpr = 2,
                workers = 3 }
    local k = kernel_of(c, { { "w", tl.i32 }, { "out", tl.ptr(tl.i32) } }, function(k, p)
      local s = scheduler(c, {}, nil)
      local wt = s:work(p.w)
      local a, b = k:executor("a", { first_warp = 0, warps = 1 }), k:executor("b", { first_warp = 1, warps = 1 })
      k:async_exec("all", { warps = 2 }, function()
        tl.cutlass.switch_by_executor {
          { a, { wt }, function(w) tl.store(p.out, w:m()) end },
          { b, { tl.const(7), wt }, function(x, w) tl.store(p.out + 1, w:n() + x) end },
        }
      end)
    end, 64)
    tl.compile(k, UPTO)
    local ir = k.module:print()
    assert.equal(0, count(ir, "cutlass%.tile_scheduler"))
    assert.truthy(ir:find("operand_segments = [8, 9]", 1, true), ir)
    local ok, log = tl.ptxas(k:compile())
    assert(ok ~= false, log)
  end)

  it("gives the plan's workspace sizes, and a constant true fixup when no tile is split", function()
    tl.new_module()
    local k = tl.kernel("ws", { params = { { "out", tl.ptr(tl.i64) }, { "ok", tl.ptr(tl.i32) }, { "ws", tl.ptr(tl.i8) } },
                                block = 128 })
    k:define(function(k, p)
      local sk = tl.sched.streamk { tiles = { 3, 3, 1, 10 }, workers = 4, workspace = p.ws, accumulator_tile_bytes = 65536 }
      local a, b, c = sk:workspace_sizes { total_bytes = 327808, reduction_bytes = 327680, barrier_bytes = 20 }
      tl.store(p.out, a) tl.store(p.out + 1, b) tl.store(p.out + 2, c)
      local dp = tl.sched.streamk { tiles = { 4, 4, 1, 10 }, workers = 4, workspace = p.ws } -- no wave quantization
      local acc = tl.op1("builtin.unrealized_conversion_cast", {}, tl.memref(tl.f32, { 4 }, "rmem"))
      tl.store(p.ok, b2i(dp:fixup(dp:work(0), acc)))
    end)
    tl.compile(k, UPTO)
    local eval, mem = model()
    interp.run(k.op, { OUT, OUT + 64, WS }, { eval = eval })
    local ws = plan_of { kind = "sk", m = 3, n = 3, l = 1, k = 10, workers = 4, cm = 1, cn = 1, swizzle = 1,
                         order = "along_m", decomp = "heuristic", reduction = "deterministic", splits = 1, acc = 65536 }
               :info().workspace
    assert.same({ ws.total, ws.reduction, ws.barriers }, { mem[OUT], mem[OUT + 8], mem[OUT + 16] })
    assert.same({ 327808, 327680, 20 }, { ws.total, ws.reduction, ws.barriers })
    assert.equal(1, mem[OUT + 64])
    assert.equal(0, count(k.module:print(), "generic_barrier"))
  end)

  it("reads the pull model's next WorkID from the response buffer", function()
    local c = { kind = "dp", m = 5, n = 3, l = 1, k = 4, cm = 1, cn = 1, swizzle = 2, order = "along_n", tpr = 0 }
    local k = kernel_of(c, { { "w", tl.i32 }, { "out", tl.ptr(tl.i32) } },
      function(k, p)
        local s = tl.sched.data_parallel { tiles = { 5, 3, 1, 4 }, swizzle = 2, raster_order = "along_n", model = "pull",
                                           response = k:shared(tl.i32, 1) }
        local wt = s:work(p.w)
        k:async_exec("sched", { warps = 1 }, function()
          wt:advance()
          for j, f in ipairs { "linear_id", "m", "n", "is_valid" } do
            local v = wt[f](wt)
            tl.store(p.out + (j - 1), f == "is_valid" and b2i(v) or v)
          end
        end)
      end)
    tl.compile(k, UPTO)
    local plan = plan_of(c)
    for _, id in ipairs { 0, 7, 14, 15, 40 } do
      local eval, mem = model()
      mem[MARK] = id
      interp.run(k.op, { 2, OUT }, { eval = eval })
      local t = plan:dp_tile(id)
      assert.same({ id, t.m, t.n, t.valid and 1 or 0 }, { mem[OUT], mem[OUT + 4], mem[OUT + 8], mem[OUT + 12] })
    end
  end)

  it("lowers the SM100 StreamK variant like the generic one on an sm_100 target", function()
    local ctx = tl.context()
    local saved = ctx:target_sm()
    ctx:target_sm(100)
    local ok, err = pcall(function()
      local rnd = rng(31)
      for _, c in ipairs(configs("sk", 12, rnd)) do
        check_config(c, rnd)
        assert.matches("create_sm100_streamk_params", tl.last_stages[1].ir)
      end
    end)
    ctx:target_sm(saved)
    assert(ok, err)
  end)
end)

describe("PTX from the lowered schedulers", function()
  -- Work tiles, accessors and workspace sizes of every kind need nothing but
  -- the tile lowering; advance and fixup (in cutlass.async.exec, with barriers
  -- and block-striped ops) need convert-cutlass-to-nvvm in the ptx pipeline.
  it("passes ptxas without advance and fixup", function()
    local k = all_ops_kernel("deterministic", false)
    local ptx = k:compile(PTX_WITHOUT_PIPELINE)
    assert.matches("%.target sm_90a", ptx)
    H.assert_ptxas(ptx)
  end)

  it("passes ptxas through the whole ptx pipeline, advance and fixup included", function()
    if not has_pass "convert-cutlass-to-nvvm" then pending("convert-cutlass-to-nvvm is not there yet") end
    for _, red in ipairs { "deterministic", "nondeterministic" } do
      local k = all_ops_kernel(red, true)
      local ptx = k:compile()
      H.assert_ptxas(ptx)
    end
  end)
end)

describe("diagnostics", function()
  it("refuse what the lowering cannot do, at the op (fixtures/passes/lower_tile_scheduler_invalid.tir)", function()
    local out, err, code = H.tilua_run { "opt", "-p", "lower-tile-scheduler", "--split-input-file", "--verify-diagnostics",
                                         "spec/fixtures/passes/lower_tile_scheduler_invalid.tir" }
    assert.equal(0, code, (out or "") .. (err or ""))
  end)

  it("point at the script line of a StreamK scheduler with runtime tile counts", function()
    tl.new_module()
    local line
    local k = tl.kernel("bad", { params = { { "m", tl.i32 }, { "ws", tl.ptr(tl.i8) }, { "out", tl.ptr(tl.i32) } },
                                 block = 128 })
    k:define(function(k, p)
      line = debug.getinfo(1, "l").currentline + 1
      local s = tl.sched.streamk { tiles = { p.m, 4, 1, 8 }, workers = 4, workspace = p.ws }
      tl.store(p.out, s:work(0):m())
    end)
    local ok, err = pcall(tl.compile, k, UPTO)
    assert.is_false(ok)
    assert.truthy(err:find("sched_lowering_spec.lua:" .. line .. ":", 1, true), err)
    assert.truthy(err:find("operand #0 (tiles_m) is not a constant", 1, true), err)
  end)

  it("leave the module unchanged when they refuse", function()
    local m = tl.parse_file "spec/fixtures/valid/cutlass_sched.tir"
    local before = m:print()
    local ok = pcall(tl.compile, m, "lower-tile-scheduler")
    assert.is_false(ok) -- its StreamK params have runtime operands
    assert.equal(before, m:print())
  end)
end)

-- }=====================================================================
