-- tilua.emulate.models.sched: the emulator's handlers for the tile schedulers and the
-- MODS probes at the authoring level (the cutlass.tile_scheduler.* ops before
-- lower-tile-scheduler and convert-cutlass-to-nvvm), a model of
-- emulate/models/init.lua (docs/protocol.md).
--
-- The per-worker arithmetic is the reference's own: a params op is planned
-- with tl.core.sched_plan (src/sched, the code lower-tile-scheduler runs) on
-- the operand values of the run, and a work tile is a Lua record:
--   data-parallel / static persistent: { linear, m, n, l, tile_idx, k_count,
--     valid, inc } as sw_work_at / sw_persistent_advance compute them (ids are
--     u32; an id past the end decodes as the reference decodes it);
--   StreamK: the worker's pieces in cursor order (plan:pieces(worker), each
--     with its fixup role) and the index of the current one; an exhausted
--     cursor is the invalid work tile (its other fields are 0: unspecified).
-- The fixup carries out the role with the emulator's generic-barrier and
-- block-striped handlers, in the order lower_tile_scheduler_fixup.c builds.
-- The MODS probes follow convert-cutlass-to-nvvm: start = cluster arrive then
-- the timer, end = drain the bulk groups, cluster wait, timer - start; smid
-- the CTA id; throttle 1 nothing (a nanosleep), 2 a cluster wait then arrive.
-- Timers are the steps taken so far, as nvvm's %globaltimer in models/nvvm.lua.

local lanes = require "tilua.emulate.lanes"
local report = require "tilua.emulate.report"
local tile = require "tilua.emulate.models.tile"
local cutlass = require "tilua.emulate.models.cutlass"

local eval_lanes, uniform, not_modelled = lanes.eval, lanes.uniform, report.not_modelled
local popcount = lanes.popcount

local handlers = {}

do

  local U32 = 0xffffffff
  local function u32(v) return v & U32 end

  -- {=== plans

  local KIND = {
    ["cutlass.tile_scheduler.create_dp_params"] = "data_parallel",
    ["cutlass.tile_scheduler.create_static_persistent_params"] = "static_persistent",
    ["cutlass.tile_scheduler.create_streamk_params"] = "streamk",
    ["cutlass.tile_scheduler.create_sm100_streamk_params"] = "streamk",
  }
  local plans = setmetatable({}, { __mode = "v" }) -- configuration key -> planned scheduler (pure)

  local function i32(v) return ((v + 0x80000000) & U32) - 0x80000000 end

  local function params_handler(R, W, rec, ins)
    local kind = KIND[rec.name]
    if not rec.cfg then
      local op = rec.op
      local cl = op:attr "cluster_shape"
      local cm, cn, cz
      if type(cl) == "table" then cm, cn, cz = cl[1] or 1, cl[2] or 1, cl[3] or 1 else cm, cn, cz = R.k.cluster or 1, 1, 1 end -- the kernel's (1-D in the emulator)
      if cz ~= 1 then error(("emulate: %s at %s: cluster shape [%d, %d, %d] is not [m, n, 1]"):format(rec.name, rec.loc, cm, cn, cz), 0) end
      local a = function(name) return op:attr_or_default(name) end
      rec.cfg = { kind = kind, cluster_m = cm, cluster_n = cn, swizzle = a "swizzle",
                  column_major = a "raster_order" == "along_m", tiles_per_round = a "tiles_per_round",
                  decomp = a "decomposition", reduction = a "reduction", splits = a "splits",
                  min_k = a "min_k", acc_tile_bytes = a "accumulator_tile_bytes" }
    end
    local names = { "tiles_m", "tiles_n", "tiles_l", "tiles_k", "workers" }
    local c = {}
    for k2, v in pairs(rec.cfg) do c[k2] = v end
    local key = { kind }
    for i = 1, (kind == "data_parallel" and 4 or 5) do
      c[names[i]] = u32(uniform(rec, ins[i], names[i]))
      key[#key + 1] = c[names[i]]
    end
    if kind == "data_parallel" then c.workers = 1 end
    for _, k2 in ipairs { "cluster_m", "cluster_n", "swizzle", "column_major", "tiles_per_round", "decomp",
                          "reduction", "splits", "min_k", "acc_tile_bytes" } do
      key[#key + 1] = tostring(c[k2])
    end
    key = table.concat(key, ",")
    local s = plans[key]
    if not s then
      local ok, plan = pcall(require("tilua").core.sched_plan, c)
      if not ok then
        error(("emulate: %s at %s cannot be planned: %s"):format(rec.name, rec.loc, tostring(plan)), 0)
      end
      local info = plan:info()
      s = { kind = kind, plan = plan, info = info, cfg = c, tiles_k = c.tiles_k, pieces = {},
            -- the data-parallel grid is every tile (the next tile is past the end)
            grid = kind == "data_parallel" and info.tiles or info.grid,
            ctas = c.cluster_m * c.cluster_n }
      plans[key] = s
    end
    -- the params value: the plan and, for StreamK, the workspace pointer
    return { { kind = "sched", s = s, ws = kind == "streamk" and ins[6] or nil } }
  end
  for name in pairs(KIND) do handlers[name] = params_handler end

  -- v, an emulator value of `kind`, or an error saying what it should have been
  local function value_of(rec, v, kind, what)
    if type(v) ~= "table" or v.kind ~= kind then error(("emulate: %s at %s: %s"):format(rec.name, rec.loc, what), 0) end
    return v
  end
  local function sched_of(rec, v)
    return value_of(rec, v, "sched", "operand #0 does not come from a scheduler params or create op")
  end

  handlers["cutlass.tile_scheduler.create"] = function(_, _, rec, ins)
    if rec.op:attr "model" == "pull" then
      error(("emulate: %s at %s: the pull model is not modelled"):format(rec.name, rec.loc), 0)
    end
    return { sched_of(rec, ins[1]) }
  end

  -- (MODS probes read a stand-in handle: a zero-operand cast to
  -- !cutlass.tile_scheduler, models/tile.lua's cast)

  -- }===

  -- {=== work tiles

  -- sw_work_at(linear, tile_idx): the raster decode of a u32 id, valid below the total.
  local function work_at(s, linear, tile_idx)
    local c = s.plan:unpack(linear)
    return { kind = "work", s = s, linear = linear, m = c.m, n = c.n, l = c.l, tile_idx = tile_idx,
             k_count = s.tiles_k, valid = linear < s.info.tiles, inc = false }
  end
  local function pieces(s, worker)
    local p = s.pieces[worker]
    if not p then
      p = s.plan:pieces(worker)
      s.pieces[worker] = p
    end
    return p
  end
  local function sk_at(s, worker, i)
    return { kind = "work", s = s, sk = true, worker = worker, i = i, piece = pieces(s, worker)[i] }
  end

  local function work_create(R, W, rec, ins, ctx)
    local s = sched_of(rec, ins[1]).s
    return eval_lanes(R, W, rec, { ins[2] }, ctx, function(v)
      local id = u32(v[1])
      if s.kind == "streamk" then return { sk_at(s, id, 1) } end
      return { work_at(s, id, 0) }
    end)
  end
  for _, name in ipairs { "cutlass.tile_scheduler.create_dp_work_tile_info",
                          "cutlass.tile_scheduler.create_static_persistent_work_tile_info",
                          "cutlass.tile_scheduler.create_streamk_work_tile_info",
                          "cutlass.tile_scheduler.create_sm100_streamk_work_tile_info" } do
    handlers[name] = work_create
  end

  local function work_of(rec, t) return value_of(rec, t, "work", "not a work tile") end

  handlers["cutlass.tile_scheduler.advance_to_next_work"] = function(R, W, rec, ins, ctx)
    sched_of(rec, ins[1])
    return eval_lanes(R, W, rec, { ins[2] }, ctx, function(v)
      local t = work_of(rec, v[1])
      local s = t.s
      if t.sk then return { sk_at(s, t.worker, t.i + 1) } end
      -- sw_persistent_advance: u32 arithmetic, the round clock restarts at 0
      local next_idx = u32(t.tile_idx + 1)
      local inc = next_idx == s.cfg.tiles_per_round
      local w = work_at(s, u32(t.linear + s.grid), inc and 0 or next_idx)
      w.k_count, w.inc = t.k_count, inc
      return { w }
    end)
  end

  local function bool(b) return b and 1 or 0 end
  -- the fields of a work tile; whole tiles start at k 0 as their tile's only split
  local FIELD = {
    m = function(t) return t.sk and t.piece and t.piece.m or t.m or 0 end,
    n = function(t) return t.sk and t.piece and t.piece.n or t.n or 0 end,
    l = function(t) return t.sk and t.piece and t.piece.l or t.l or 0 end,
    linear_id = function(t) if t.sk then return t.piece and t.piece.unit or 0 end return t.linear end,
    tile_idx = function(t) if t.sk then return t.piece and t.piece.tile_idx or 0 end return t.tile_idx end,
    k_tile_start = function(t) return t.sk and t.piece and t.piece.k_tile_start or 0 end,
    k_tile_count = function(t) if t.sk then return t.piece and t.piece.k_tile_count or 0 end return t.k_count end,
    split_idx = function(t) return t.sk and t.piece and t.piece.split_idx or 0 end,
    expected_splits = function(t) if t.sk then return t.piece and t.piece.expected_splits or 0 end return 1 end,
    is_valid = function(t) if t.sk then return bool(t.piece ~= nil) end return bool(t.valid) end,
    is_separate_reduction = function(t) return bool(t.sk and t.piece and t.piece.is_separate_reduction) end,
    is_final_split = function(t) if t.sk then return bool(t.piece and t.piece.is_final_split) end return 1 end,
    increment_pipe = function(t) return bool(not t.sk and t.inc) end,
  }
  for f, get in pairs(FIELD) do
    handlers["cutlass.tile_scheduler.work_tile_info." .. f] = function(R, W, rec, ins, ctx)
      return eval_lanes(R, W, rec, ins, ctx, function(v)
        local r = get(work_of(rec, v[1]))
        if f ~= "is_valid" and f ~= "is_separate_reduction" and f ~= "is_final_split" and f ~= "increment_pipe" then
          r = i32(r) -- an i32 value
        end
        return { r }
      end)
    end
  end

  handlers["cutlass.tile_scheduler.get_workspace_sizes"] = function(_, _, rec, ins)
    local s = sched_of(rec, ins[1]).s
    local ws = s.info.workspace
    if s.kind ~= "streamk" then return { 0, 0, 0 } end
    return { ws.total, ws.reduction, ws.barriers }
  end

  -- }===

  -- {=== the StreamK fixup (lower_tile_scheduler_fixup.c)

  local th = cutlass.handlers
  local wait_eq, wait_eq_reset = th["cutlass.generic_barrier.wait_eq"], th["cutlass.generic_barrier.wait_eq_reset"]
  local arrive_inc = th["cutlass.generic_barrier.arrive_inc"]
  local load_add, store = th["cutlass.block_striped.load_add"], th["cutlass.block_striped.store"]

  -- the fixup op seen as one of the ops its lowering makes (its own name and line in traces)
  local function as_op(rec, j, threads)
    rec.parts = rec.parts or {}
    local p = rec.parts[j]
    if not p then
      local op = rec.op
      p = setmetatable({ id = 10000000 + 8 * rec.id + j,
                         op = { attr = function(_, n) if n == "threads" then return threads end return op:attr(n) end } },
                       { __index = rec })
      rec.parts[j] = p
    end
    return p
  end

  handlers["cutlass.tile_scheduler.fixup"] = function(R, W, rec, ins, ctx)
    local h = sched_of(rec, ins[1])
    local s = h.s
    if s.kind ~= "streamk" then error(("emulate: %s at %s: fixup needs a StreamK scheduler"):format(rec.name, rec.loc), 0) end
    local t = work_of(rec, uniform(rec, ins[2], "work tile"))
    local sk = s.info
    if sk.sk_tiles == 0 or sk.max_splits <= 1 or not t.piece then return { 1 } end -- no piece is ever partial
    local f = t.piece.fixup
    if not f.participates then return { 1 } end
    local threads = 32 * popcount(ctx.exec)
    local acc = ins[3]
    local ws = uniform(rec, h.ws, "workspace")
    local rank = s.ctas > 1 and W.cta.rank or 0
    local cta_tile = t.piece.tile_idx * s.ctas + rank
    local counters = ws + sk.workspace.barrier_offset
    local function slot(j) return ws + (cta_tile * (sk.max_splits - 1) + j) * s.cfg.acc_tile_bytes end
    if f.wait then
      local hw = f.reset and wait_eq_reset or wait_eq
      hw(R, W, as_op(rec, 1, threads), { counters, cta_tile, f.wait_value }, ctx)
    end
    for j = f.read_first, f.read_first + f.read_count - 1 do
      load_add(R, W, as_op(rec, 2, threads), { slot(j), acc }, ctx)
    end
    if f.write then
      store(R, W, as_op(rec, 3, threads), { slot(f.write_slot), acc }, ctx)
      arrive_inc(R, W, as_op(rec, 4, threads), { counters, cta_tile }, ctx)
    end
    return { bool(f.epilogue) }
  end

  -- }===

  -- {=== MODS probes (convert-cutlass-to-nvvm's lower_mods)

  local cluster_arrive, cluster_wait = tile.handlers["tile.cluster_arrive"], tile.handlers["tile.cluster_wait"]
  handlers["cutlass.tile_scheduler.mods_report_mainloop_start"] = function(R, W, rec, ins, ctx)
    cluster_arrive(R, W, rec, ins, ctx)
    if #rec.outs > 0 then return { R.steps } end
    return {}
  end
  handlers["cutlass.tile_scheduler.mods_report_mainloop_end"] = function(R, W, rec, ins, ctx)
    R:drain_s2g(W, 0)
    cluster_wait(R, W, rec, ins, ctx)
    if #rec.outs > 0 then
      if ins[3] == nil then not_modelled(rec) end
      return eval_lanes(R, W, rec, { ins[3] }, ctx, function(v) return { R.steps - v[1] } end)
    end
    return {}
  end
  handlers["cutlass.tile_scheduler.mods_report_smid"] = function(_, W) return { W.cta.id } end
  handlers["cutlass.tile_scheduler.mods_throttle"] = function(R, W, rec, ins, ctx)
    if rec.op:attr "profile" == 2 then
      cluster_wait(R, W, rec, ins, ctx)
      cluster_arrive(R, W, rec, ins, ctx)
    end
    return {}
  end

  -- }===
end

return { handlers = handlers }
