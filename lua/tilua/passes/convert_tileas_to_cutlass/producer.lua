-- tilua.passes.convert_tileas_to_cutlass.producer: the producer agent. Its
-- warpgroup gives up registers (setmaxnreg.dec, plan.REGS); one elected thread of its
-- first warp walks the tiles and, per k block of the pipelined loop, acquires
-- a stage, issues a TMA load per ring (boxes of the ring's geometry, the
-- CTA's block, a multicast piece) completing on the stage's full barrier, and
-- commits it.

local tl = require "tilua"
local R = require "tilua.passes.convert_tileas_to_cutlass.read"
local V = require "tilua.passes.convert_tileas_to_cutlass.values"
local X = require "tilua.passes.convert_tileas_to_cutlass.ops"
local Loops = require "tilua.passes.convert_tileas_to_cutlass.loops"
local Staged = require "tilua.passes.convert_tileas_to_cutlass.staged"

local Producer = {}

-- The stage of ring r a copy fills: with one pipeline (a GEMM), the
-- iteration's (pipelined_for acquired it); with one per group of rings, the
-- group's stage, acquired at its first copy of the round (a k block, or a
-- program for a ring filled once a program) and committed after its last.
local function stage_of(L, env, r)
  if env.stage then return env.stage, env.full, nil end
  local g = r.group
  env.acq = env.acq or {}
  local a = env.acq[g]
  if not a then
    g.pipe:producer_acquire(g.st)
    a = { full = g.pipe:full_barrier(g.st), stage = g.st:index(), n = 0 }
    env.acq[g] = a
  end
  a.n = a.n + 1
  return a.stage, a.full, a.n == #g.rings and function()
    Staged.produce(L, env, env.kk, g, a.stage, a.full) -- (the loads staged in the group's stages: staged.lua)
    g.pipe:producer_commit(g.st)
    g.st:advance()
    env.acq[g] = nil
  end
end

-- env.copy: the load of a ring's stage (the pending tiled_load that feeds it)
-- as TMA loads. The CTA's block of the program's tile; multicast: this CTA's
-- 1/k piece of it (rows rank * box), to every CTA of the cluster; a
-- cta_repeat: the CTA's block of every piece, a load each. A tile of fewer
-- dims than its tensor: the leading coordinates first, as they are.
local function ring_copy(L, env)
  return function(op)
    local ld = V.get(L, op:operand(1), op).pending_load
    local r = L.ring_of[op:operand(2):id()]
    if not ld or not r or (not env.stage and not r.group.st) then
      R.fail(op, "a copy in the producer that is not a load into a ring")
    end
    local stage, full, commit = stage_of(L, env, r)
    local e = L.P.by_arg[ld:operand(1):id()]
    local _, offs = V.block_offsets(L, r.tile)
    local coords, piece, mc = {}, nil, nil
    local lead = R.leading(ld) -- (coordinates of the dims the tile leaves out come first)
    for d = 1, 2 do coords[d] = V.plus(V.get(L, ld:operand(1 + lead + d), ld) * r.tile.shape[d], offs[d]) end
    if r.multicast > 1 then -- (this CTA's 1/k of its block, of each piece; to the k that hold the block)
      local t
      t, mc = V.replica(L, r.tile, r.multicast, op)
      piece = t * r.box[1]
      coords[1] = coords[1] + piece
    end
    for pc = 0, r.pieces.n - 1 do
      local c1 = pc == 0 and coords[1] or coords[1] + pc * r.pieces.rows
      for h = 0, r.nbox - 1 do
        local c2 = h == 0 and coords[2] or coords[2] + h * r.box[2]
        local at = h * r.shape[1] + pc * r.pieces.block_rows
        local row = at > 0 and V.plus(tl.const(at, tl.i32), piece) or piece
        local dst = row and r.smem:ptr(stage, row) or r.smem:ptr(stage)
        tl.tma_load(dst, L.args[e.lowered_map], full, V.leading(L, ld, { c1, c2 }), mc and { multicast = mc } or nil)
      end
    end
    if commit then commit() end
  end
end

-- The producer's state: what its ops become.
local function producer_env(L, ag)
  local env = { agent = ag }
  env.program_id = Loops.program_id(L)
  env.dot = function(op) R.fail(op, "a dot in the producer agent") end
  env.tiled_store = function(op) R.fail(op, "a tiled_store in the producer agent") end
  env.tiled_load = function(op)
    if not R.is_ring_load(op) then
      if X.single_load(L, op) then return end
      R.fail(op, "the producer loads only into rings (and single elements)")
    end
    L.vmap[op:result(1):id()] = { pending_load = op }
  end
  env.copy = ring_copy(L, env)
  return env
end

-- env.pipelined_for: a k block a stage, cursor st (one pipeline: the stage
-- acquired for the iteration's copies); with a pipeline per group of rings,
-- each copy acquires its group's (stage_of), the cursors `cursors`.
local function pipelined_for(L, env, st, cursors)
  local pipe = L.pipe
  return function(op)
    local b = op:region(1):entry()
    if op:nresults() > 0 then R.fail(op, "the producer's pipelined loop carries values") end
    if not pipe and Loops.skewed_for(L, env, op, cursors) then return end -- (the forward attention's K ahead of V)
    local lb, ub = Loops.k_blocks(L, op, env)
    tl.cutlass.for_range(lb, ub, pipe and { st } or cursors, function(kk)
      L.vmap[b:arg(1):id()] = kk
      if not pipe then
        env.kk = kk
        X.lower_block(L, b, env)
        env.kk = nil
        return
      end
      pipe:producer_acquire(st)
      env.full, env.stage = pipe:full_barrier(st), st:index()
      X.lower_block(L, b, env)
      Staged.produce(L, env, kk) -- (the consumers' staged loads: staged.lua)
      env.full, env.stage = nil, nil
      pipe:producer_commit(st)
      st:advance()
    end)
  end
end

-- The producer agent ag in the lowered kernel.
function Producer.build(L, ag)
  local env = producer_env(L, ag)
  local k = L.k
  k:agent("producer", { warps = ag.warps, warp_id = Loops.warp_id(L, ag) }, function()
    tl.setmaxnreg(L.regs.producer, "dec")
    k:async_exec("producer", { first_warp = ag.first, warps = 1 }, function()
      local cursors = {}
      for i, g in ipairs(L.groups) do
        g.st = g.pipe:producer_start()
        cursors[i] = g.st
      end
      env.pipelined_for = pipelined_for(L, env, L.pipe and cursors[1], cursors)
      env.persistent = Loops.persistent(L, env, cursors, "producer")
      tl.elect_one(function()
        -- the first TMA of each operand need not wait for its map to be fetched
        for _, e in ipairs(L.P.list) do
          if e.lowered_map and e.ring_loaded then tl.tensor_map_prefetch(L.args[e.lowered_map]) end
        end
        X.lower_block(L, ag.op:region(1):entry(), env)
        for _, g in ipairs(L.groups) do g.pipe:producer_tail(g.st) end
      end)
    end)
  end)
end

return Producer
