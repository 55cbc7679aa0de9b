-- The emulator and the protocol checker on kernels that use the tile
-- schedulers and the MODS probes (lua/tilua/emulate/models/sched.lua,
-- docs/protocol.md): examples/mods_probes.lua against its own host check and
-- CPU sums, record kernels over the data-parallel, static persistent and
-- StreamK schedulers against the host reference (tl.core.sched_plan), no
-- false alarm, and seeded bugs caught with counterexamples at .lua lines.
dofile "spec/helper.lua"
local tl = require "tilua"

local PH = dofile "spec/protocol_helper.lua"
local ops = PH.ops
local function pack(fmt, t)
  local o = {}
  for i, v in ipairs(t) do o[i] = string.pack(fmt, v) end
  return table.concat(o)
end
local function rep(fmt, v, n)
  local t = {}
  for i = 1, n do t[i] = v end
  return pack(fmt, t)
end
local function unpack_all(fmt, size, s)
  local t = {}
  for i = 1, #s // size do t[i] = string.unpack(fmt, s, size * i - size + 1) end
  return t
end
local function i32(x) return ((x + 0x80000000) & 0xffffffff) - 0x80000000 end

-- A mutant: expect one of `kinds` with a counterexample whose every step names
-- its role, warp, CTA, op and .lua line.
local function catches(what, kinds, build, mutate, o)
  it("catches: " .. what, function()
    local k = build()
    local lines = mutate(k)
    local r = tl.verify_protocol(k, { grid = o.grid, args = o.args() })
    PH.assert_caught(r, what, kinds, lines, { "^[%w_]+ warp %d+ %(CTA %d+%): [%w_.]+ at [%w_/.%-]+%.lua:%d+$" })
  end)
end

-- {=== examples/mods_probes.lua

local function mods()
  tl.new_module()
  return assert(loadfile "examples/mods_probes.lua")("--library")
end
local function mods_inputs(grid, seed)
  local items = 7 * grid + 5
  local X, s = {}, seed
  for i = 1, items * 128 do
    s = (s * 1103515245 + 12345) & 0x7fffffff
    X[i] = (s >> 4) - (1 << 26)
  end
  return X, items, { pack("<i4", X), rep("<i4", 0, items), rep("<i4", -1, grid), rep("<i8", -1, grid),
                     rep("<i8", -1, grid), items }
end

describe("mods_probes on the emulator", function()
  for _, c in ipairs { { grid = 2, policy = "round_robin" }, { grid = 4, policy = "random" },
                       { grid = 6, policy = "adversarial" } } do
    it(("matches its host check and CPU sums on %d CTAs (%s)"):format(c.grid, c.policy), function()
      local ex = mods()
      local X, items, args = mods_inputs(c.grid, c.grid * 13 + 1)
      local t0 = os.clock()
      local r = tl.emulate(ex.kernel, { grid = c.grid, args = args, policy = c.policy, seed = 5 })
      assert(r.ok, r.report)
      -- the sums, byte for byte as the CPU computes them
      local want = {}
      for it_ = 0, items - 1 do
        local sum = 0
        for j = 1, 128 do sum = sum + X[it_ * 128 + j] end
        want[it_ + 1] = i32(sum)
      end
      assert(r.read(2) == pack("<i4", want), "the sums differ from the CPU's")
      -- the example's own host check (SM ids: the CTA ids, so the SM count is the grid)
      local ok, msg = ex.verify(c.grid * 13 + 1, c.grid, items, c.grid, X, unpack_all("<i4", 4, r.read(2)),
        unpack_all("<i4", 4, r.read(3)), unpack_all("<i8", 8, r.read(4)), unpack_all("<i8", 8, r.read(5)))
      assert(ok, msg)
      print(("\n  mods_probes, %d CTAs: %d steps, %.2f s; %s"):format(c.grid, r.steps, os.clock() - t0, msg))
    end)
  end

  for _, grid in ipairs { 2, 4 } do
    it(("finds no violation in mods_probes on %d CTAs"):format(grid), function()
      local _, _, args = mods_inputs(grid, 3)
      local r = tl.verify_protocol(mods().kernel, { grid = grid, args = args })
      assert(r.ok, r.report)
      print(("\n  mods_probes, %d CTAs: %d states, %d runs, %.2f s"):format(grid, r.states, r.runs, r.seconds))
    end)
  end

  catches("mods: the cluster throttle moved into the item loop (CTAs of a cluster throttle unequally)", { "deadlock" },
    function() return mods().kernel end, function(k)
      local t = ops(k, "cutlass.tile_scheduler.mods_throttle")
      local one, two = t[1], t[2]
      if one:attr "profile" ~= 1 then one, two = two, one end
      two:move_before(one)
      return { "mods_throttle at examples/mods_probes.lua:%d+" }
    end, { grid = 2, args = function() return select(3, mods_inputs(2, 3)) end })
end)

-- }===

-- {=== record kernels over the schedulers

-- Every work tile a CTA takes writes (CTA * 100 + its iteration + 1) into the
-- cells (tile, k) it covers: out[(m * TN + n) * KT + k].
local TM, TN, KT, W = 3, 5, 4, 4

local function build(kind)
  tl.new_module()
  local k = tl.kernel("sched_" .. kind, { params = { { "out", tl.ptr(tl.i32) }, { "ws", tl.ptr(tl.i8) } }, block = 32 })
  k:define(function(k, p)
    local o = { tiles = { TM, TN, 1, KT }, workers = W, swizzle = 2 }
    if kind == "streamk" then o.workspace, o.decomposition, o.min_k = p.ws, "streamk", 1 end
    local sched = tl.sched[kind](o)
    local t = tl.thread_id()
    if kind == "data_parallel" then -- one tile per CTA
      local w = sched:work(tl.block_id())
      local cell = (w:m() * TN + w:n()) * KT + t
      local v, lane_in = tl.block_id() * 100 + 1, t:lt(KT)
      tl.if_(w:is_valid(), function()
        tl.if_(lane_in, function() tl.store(p.out + cell, v) end)
      end)
      return
    end
    k:async_exec("worker", { first_warp = 0, warps = 1 }, function()
      local s = tl.sched.tiles(sched)
      s:init(tl.block_id())
      s:loop(function(s)
        tl.if_(t:lt(s.k_count or KT), function()
          local cell = (s.m_idx * TN + s.n_idx) * KT + (s.k_begin or 0) + t
          tl.store(p.out + cell, tl.block_id() * 100 + s.current_iter + 1)
        end)
      end)
    end)
  end)
  return k
end

local function grid_of(kind) return kind == "data_parallel" and TM * TN + 2 or W end
local function sched_args() return { { bytes = 4 * TM * TN * KT }, { bytes = 4096 } } end

-- The host reference's cells.
local function reference(kind)
  local plan = tl.core.sched_plan { kind = kind, tiles_m = TM, tiles_n = TN, tiles_k = KT, workers = W, swizzle = 2,
                                    decomp = kind == "streamk" and "streamk" or nil, min_k = 1 }
  local cells = {}
  for i = 1, TM * TN * KT do cells[i] = 0 end
  local function put(m, n, k0, count, v)
    for kk = k0, k0 + count - 1 do
      local i = (m * TN + n) * KT + kk + 1
      assert(cells[i] == 0, "the reference covers a cell twice")
      cells[i] = v
    end
  end
  for c = 0, grid_of(kind) - 1 do
    if kind == "data_parallel" then
      local w = plan:dp_tile(c)
      if w.valid then put(w.m, w.n, 0, KT, c * 100 + 1) end
    elseif kind == "static_persistent" then
      for i, w in ipairs(plan:persistent(c)) do put(w.m, w.n, 0, KT, c * 100 + i) end
    else
      for i, w in ipairs(plan:pieces(c)) do put(w.m, w.n, w.k_tile_start, w.k_tile_count, c * 100 + i) end
    end
  end
  return pack("<i4", cells), plan
end

describe("tile schedulers on the emulator", function()
  for _, kind in ipairs { "data_parallel", "static_persistent", "streamk" } do
    it(("computes the host reference's schedule: %s"):format(kind), function()
      local want, plan = reference(kind)
      if kind == "streamk" then assert.is_true(plan:info().max_splits >= 2) end -- some tiles are split
      for _, policy in ipairs { "round_robin", "random", "adversarial" } do
        local r = tl.emulate(build(kind), { grid = grid_of(kind), args = sched_args(), policy = policy, seed = 3 })
        assert(r.ok, r.report)
        assert(r.read(1) == want, kind .. ": the cells differ from the reference's schedule")
      end
    end)

    it(("finds no violation: %s"):format(kind), function()
      local r = tl.verify_protocol(build(kind), { grid = grid_of(kind), args = sched_args() })
      assert(r.ok, r.report)
      print(("\n  sched %s: %d states, %d runs, %.2f s"):format(kind, r.states, r.runs, r.seconds))
    end)
  end

  it("reports the plan's workspace sizes and the fields of whole tiles", function()
    tl.new_module()
    local k = tl.kernel("sched_fields", { params = { { "out", tl.ptr(tl.i64) }, { "ws", tl.ptr(tl.i8) } }, block = 32 })
    k:define(function(_, p)
      local s = tl.sched.streamk { tiles = { 3, 3, 1, 10 }, workers = 4, workspace = p.ws, accumulator_tile_bytes = 65536 }
      local total, red, bars = s:workspace_sizes()
      local d = tl.sched.static_persistent { tiles = { 3, 3, 1, 10 }, workers = 4, tiles_per_round = 2 }
      local w = d:work(tl.const(1)) -- worker 1: tiles 1, 5 (5 ends a round of 2)
      local vals = { total, red, bars, w:k_tile_count():cast(tl.i64), w:expected_splits():cast(tl.i64),
                     w:is_final_split():cast(tl.i64) }
      tl.if_(tl.thread_id():eq(0), function()
        for i, v in ipairs(vals) do tl.store(p.out + (i - 1), v) end
      end)
    end)
    local r = tl.emulate(k, { grid = 1, args = { { bytes = 48 }, { bytes = 8 } } })
    assert(r.ok, r.report)
    -- docs/schedulers.md's worked example: 327808 bytes (reduction 327680, barriers 20)
    assert.are.same({ 327808, 327680, 20, 10, 1, 1 }, unpack_all("<i8", 8, r.read(1)))
  end)

  catches("persistent: every CTA starts as the same worker (two CTAs write the same output tile)", { "overwrite" },
    function() return build "static_persistent" end, function(k)
      local create = ops(k, "cutlass.tile_scheduler.create_static_persistent_work_tile_info")[1]
      local params = ops(k, "cutlass.tile_scheduler.create_static_persistent_params")[1]
      create:set_operand(2, params:operand(1)) -- worker id: the constant tiles_m (3) in every CTA
      return { "global bytes", "protocol_sched_spec.lua:%d+" }
    end, { grid = W, args = sched_args })

  catches("data-parallel: is_valid skipped (a CTA past the last tile decodes into batch 1 and rewrites tile 0)",
    { "overwrite" }, function() return build "data_parallel" end, function(k)
      local guard, inner
      for _, o in ipairs(ops(k, "scf.if")) do
        local d = o:operand(1):def()
        if d and d:name() == "cutlass.tile_scheduler.work_tile_info.is_valid" then guard = o else inner = o end
      end
      inner:move_before(guard) -- the store runs whether the tile is valid or not
      return { "CTA 15%) at [^ ]*protocol_sched_spec.lua:%d+ writes global bytes" }
    end, { grid = TM * TN + 2, args = sched_args })

  catches("StreamK: the cursor begun at the same worker in every CTA (two CTAs cover the same k tiles)", { "overwrite" },
    function() return build "streamk" end, function(k)
      local create = ops(k, "cutlass.tile_scheduler.create_streamk_work_tile_info")[1]
      local params = ops(k, "cutlass.tile_scheduler.create_streamk_params")[1]
      create:set_operand(2, params:operand(3)) -- worker id: the constant tiles_l (1) in every CTA
      return { "global bytes" }
    end, { grid = W, args = sched_args })

  it("catches on the emulator: a work tile advanced twice (the persistent loop skips every other tile)", function()
    local k = build "static_persistent"
    local adv = ops(k, "cutlass.tile_scheduler.advance_to_next_work")[1]
    local again = adv:clone()
    again:insert(adv:block(), adv:next())
    again:set_operand(2, adv:result(1))
    for _, u in ipairs(ops(k, "scf.yield")) do
      for i = 1, u:noperands() do if u:operand(i) == adv:result(1) then u:set_operand(i, again:result(1)) end end
    end
    local r = tl.emulate(k, { grid = W, args = sched_args() })
    assert(r.ok, r.report)
    assert.is_false(r.read(1) == reference "static_persistent", "the mutant computed every tile")
    local zeros = 0
    for _, v in ipairs(unpack_all("<i4", 4, r.read(1))) do if v == 0 then zeros = zeros + 1 end end
    assert.is_true(zeros > 0) -- tiles nobody computed
  end)
  local build_fixup = PH.build_fixup -- 3 workers, two tiles in two pieces each
  local function fixup_args() return { { bytes = 1024 }, { bytes = 4096 }, { bytes = 1024 } } end

  it("runs the StreamK fixup (generic barriers, slots) with no violation; the counters end at 0", function()
    local r = tl.emulate(build_fixup(), { grid = 3, args = fixup_args(), policy = "adversarial" })
    assert(r.ok, r.report)
    local c = tl.verify_protocol(build_fixup(), { grid = 3, args = fixup_args() })
    assert(c.ok, c.report)
    local plan = tl.core.sched_plan { kind = "streamk", tiles_m = 1, tiles_n = 2, tiles_k = 4, workers = 3,
                                      decomp = "streamk", min_k = 1, acc_tile_bytes = 512 }
    local ws = plan:info().workspace
    assert.are.equal(2, plan:info().max_splits)
    assert.are.same({ 0, 0 }, unpack_all("<i4", 4, r.read(2, ws.barrier_offset + 8):sub(ws.barrier_offset + 1)))
  end)

  catches("StreamK: the fixup deleted (both pieces of a split tile store it)", { "overwrite" }, build_fixup, function(k)
    local fx = ops(k, "cutlass.tile_scheduler.fixup")[1]
    local iv = ops(k, "cutlass.tile_scheduler.work_tile_info.is_valid")
    local valid = iv[#iv]
    for _, o in ipairs(ops(k, "scf.if")) do
      if o:operand(1) == fx:result(1) then o:set_operand(1, valid:result(1)) end
    end
    fx:erase()
    return { "global bytes" }
  end, { grid = 3, args = fixup_args })
end)

-- }===
