-- tilua.passes.convert_tileas_to_cutlass.loops: the loops of the lowering that
-- every role shares: the persistent loop (tileas-dynamic-persistent's scf.while
-- over is_valid_program_id) becomes the tile scheduler's loop (kernels/gemm.lua's
-- M.tile_loop: the static persistent scheduler, or StreamK's), the bounds of a
-- pipelined k loop, and where an agent's warps start.

local tl = require "tilua"
local R = require "tilua.passes.convert_tileas_to_cutlass.read"
local V = require "tilua.passes.convert_tileas_to_cutlass.values"
local X = require "tilua.passes.convert_tileas_to_cutlass.ops"

local Loops = {}

-- The workers are the clusters, whose CTAs run the same programs: the
-- scheduler of a cluster of n (stdlib/gemm.lua's) walks n tiles of M at
-- once, so it is given n times the programs along M and its work tile's m
-- (the cluster's) is the program's. The tiles in panels of 8 along y (a
-- GEMM's: the programs at work at once share rows of A and columns of B);
-- the forward attention's chain (L.skew) x fastest, as stdlib/attention.lua's:
-- the programs along x that run together read the same keys and values.
local function scheduler(L)
  local G, S, nctas = L.G, L.S, L.nctas
  if S then return G.streamk_scheduler(tl, S.c, L.args[L.P.lowered_workspace]) end
  local many = nctas > 1
  local programs = function(d) return X.programs(L, d) end
  -- programs along z (a program that reads program_id("z")) are the scheduler's batches (l)
  local z = L.P.lowered_programs[3] and programs(3) or 1
  return tl.sched.static_persistent { tiles = { many and programs(1) * nctas or programs(1), programs(2), z, 1 },
                                      swizzle = L.skew and 1 or 8,
                                      workers = many and tl.grid_dim("x") // nctas or tl.grid_dim("x"),
                                      cluster = nctas > 1 and L.cluster or nil }
end

-- {=== the dynamic scheduler (schedule = "dynamic"): runtime claims
--
-- As CUTLASS's dynamic persistent kernels: the producer's elected thread
-- claims each program id with an atomic add on a global counter (the
-- workspace's first word) and hands it to the consumer warpgroups through a
-- small ring of ids in shared memory (L.claims: a slot a stage and a pipeline
-- of its own, mode and participants as the rings'), so every role of the CTA
-- walks the same sequence of ids; an id past the last program ends every
-- role's loop. Each worker (CTA) claims until it gets such an id, so a launch
-- makes programs + workers claims, and the one that returns the last of them
-- (programs + workers - 1) is the launch's last access to the counter: it puts
-- the counter back to 0 (an atomic exchange, not a host memset: the workspace
-- is kept across launches, CUDA graphs and exported launchers included).

-- The programs of the grid (all of x, y and z) as one count.
local function total_programs(L)
  local t = X.programs(L, 1) * X.programs(L, 2)
  if L.P.lowered_programs[3] then t = t * X.programs(L, 3) end
  return t
end

-- A work tile of the dynamic scheduler: .value the claimed id, the index of
-- a work tile of the static persistent scheduler (its m, n and l: the same
-- swizzled order of tiles, so the tiles that run together share what they
-- read in L2 as the static schedule's do); advance() the next claim of the
-- role (`next`).
local Claimed = {}
Claimed.__index = Claimed
function Claimed:is_valid() return self.value:lt(self.total) end
function Claimed:advance() self.value = self.next() end
function Claimed:m() return self.sched:work(self.value):m() end
function Claimed:n() return self.sched:work(self.value):n() end
function Claimed:l() return self.sched:work(self.value):l() end

-- The first work tile of a role of the dynamic scheduler; st: the role's
-- cursor of the ring of ids (carried by the loop with the others).
local function claimed_work(L, role, st)
  local C, total = L.claims, total_programs(L)
  local next
  if role == "producer" then -- the elected thread: claim, then publish
    local counter = L.args[L.P.lowered_workspace]
    local last = total + tl.grid_dim("x") - 1
    next = function()
      local id = tl.atomic_add(counter, tl.const(1, tl.i32))
      tl.if_(id:eq(last), function() tl.atomic_exch(counter, tl.const(0, tl.i32)) end)
      C.pipe:producer_acquire(st)
      local slot = C.slots + st:index()
      slot:store(id)
      C.pipe:producer_commit(st)
      st:advance()
      return id
    end
  else -- a consumer warpgroup: wait for the next published id; every thread
    -- releases (one arrival a thread: its own read of the slot comes before)
    next = function()
      C.pipe:consumer_wait(st)
      local id = (C.slots + st:index()):load()
      C.pipe:consumer_release(st)
      st:advance()
      return id
    end
  end
  return setmetatable({ value = next(), next = next, total = total, sched = scheduler(L) }, Claimed)
end

-- }===

-- A program id outside the persistent loop: the CTA's (on a cluster, along x the cluster's).
function Loops.program_id(L)
  return function(dim)
    if L.nctas > 1 and dim == "x" then return tl.cluster_id(dim) end
    return tl.block_id(dim)
  end
end

-- StreamK: the unit of work `work` of an agent's persistent loop; its k
-- loop runs the unit's k blocks (kernels/gemm.lua's M.k_range)
local function streamk_unit(L, env, work)
  env.work = work
  env.k_range = function()
    local kb0, kbn = L.G.k_range(tl, L.S.c, work)
    return kb0, kb0 + kbn
  end
end

-- The body of the persistent loop `after` for the work tile `work`: the
-- program ids are its m, n and l; with StreamK what follows the k loop runs on
-- the tile's final split only (env.final, set by the consumer's k loop).
local function tile_body(L, env, after, work, only)
  local saved = env.program_id
  local ids = {}
  env.program_id = function(dim)
    ids[dim] = ids[dim] or (dim == "x" and work:m() or dim == "y" and work:n() or work:l())
    return ids[dim]
  end
  -- the linear program id whose x = q mod nx, y = q / nx mod ny and z = q / nx / ny
  -- (tileas-dynamic-persistent's decomposition) are the work tile's m, n and l
  local q = work:m() + work:n() * X.programs(L, 1)
  if L.P.lowered_programs[3] then q = q + work:l() * (X.programs(L, 1) * X.programs(L, 2)) end
  L.vmap[after:arg(1):id()] = q
  if L.S then streamk_unit(L, env, work) end
  local ops = after:ops()
  local function lower_from(i)
    for j = i, #ops do
      local o = ops[j]
      local wanted = not only or only[o:id()] -- (a ping-pong consumer's skipped program: its k loop's bounds only)
      if wanted and o:name() == "tileas.cancel_next_program_id" then L.vmap[o:result(1):id()] = tl.const(0)
      elseif wanted then V.at_loc(o, X.lower_op, L, o, env) end
      if env.final then -- StreamK: what follows the k loop is the final split's
        local final = env.final
        env.final = nil
        tl.if_(final, function() lower_from(j + 1) end)
        return
      end
    end
  end
  lower_from(1)
  env.program_id, env.work, env.k_range = saved, nil, nil
end

-- The ops of the persistent loop's body that the bounds of its pipelined
-- loop `loop` come from (`who` names the consumer that skips the rest; whole:
-- also the loop and what its body reads) -> {[op id] = true}
local function bounds_ops(loop, who, whole)
  local only = {}
  local function need(v)
    local d = v:def()
    if not d or only[d:id()] or d:parent():id() ~= loop:parent():id() then return end
    if d:nregions() > 0 or not (d:name():match "^arith%." or d:name() == "tileas.num_programs" or d:name() == "tileas.get_program_id") then
      R.fail(d, "%s's pipelined loop %s must come from arith ops of the program ids and parameters", who,
             whole and "(its bounds and what its body reads)" or "bounds")
    end
    only[d:id()] = true
    for i = 1, d:noperands() do need(d:operand(i)) end
  end
  need(loop:operand(1))
  need(loop:operand(2))
  if whole then -- (and the loop, with what its body reads from the program's body)
    only[loop:id()] = true
    for _, o in ipairs(loop:region(1):entry():ops()) do
      for i = 1, o:noperands() do need(o:operand(i)) end
    end
  end
  return only
end

-- A ping-pong consumer's programs (env.pp, plan.lua's read_pair):
-- consumer g runs the CTA's programs j = g mod 2 and skips the others,
-- advancing its cursor of the one ring past a skipped program's k blocks (its
-- pipelined loop's bounds, computed from the program's ids: the ops of the
-- body they come from, which must be pure); after its epilogue it hands the
-- turn on to the other consumer. -> the bodies of M.tile_loop
local function pingpong_bodies(L, env, after)
  local pp = env.pp
  local loop = pp.loop
  local only = bounds_ops(loop, "a ping-pong consumer")
  local function skip(work)
    tile_body(L, env, after, work, only)
    local lb, ub = Loops.k_blocks(L, loop, env)
    pp.st:advance(ub - lb)
  end
  local function own(work)
    tile_body(L, env, after, work)
    pp.other:arrive(pp.turn) -- (the epilogue's turn: the next program's may start)
  end
  if pp.g == 0 then return { own, skip } end
  return { skip, own }
end

-- A ksplit consumer's programs (env.ks, plan.lua's read_pair): consumer 0
-- runs each program whole, consumer 1 only its pipelined loop (with the ops
-- of the program's body that its bounds and its body read, which must be
-- pure), whose sums it hands to consumer 0 (consumer.lua). -> the bodies of M.tile_loop
local function ksplit_bodies(L, env, after)
  local only = env.ks.g == 1 and bounds_ops(env.ks.loop, "a ksplit consumer", true) or nil
  return { function(w) tile_body(L, env, after, w, only) end }
end

-- env.persistent for an agent of `role` (producer / consumer) whose pipeline
-- cursors are `cursors`.
function Loops.persistent(L, env, cursors, role)
  return function(op)
    local cond = op:region(1):entry():ops()
    local valid = cond[#cond - 1]
    if #op:operands() ~= 1 or not valid or valid:name() ~= "tileas.is_valid_program_id" then
      R.fail(op, "an scf.while that is not a persistent loop over is_valid_program_id is not lowered yet")
    end
    if #op:results() > 0 and op:result(1):nuses() > 0 then R.fail(op, "the persistent loop's result is used after it") end
    local after = op:region(2):entry()
    L.persistent = true
    local work, all
    if L.claims then
      if role ~= "producer" and role ~= "consumer" then R.fail(op, "the dynamic scheduler hands ids to producer and consumer agents only") end
      local st = role == "producer" and L.claims.pipe:producer_start() or L.claims.pipe:consumer_start()
      all = { table.unpack(cursors) }
      all[#all + 1] = st
      work = claimed_work(L, role, st)
    elseif L.split then -- the split tail's tiles (split_tail.lua): whole programs, then a replica's units
      local Split = require "tilua.passes.convert_tileas_to_cutlass.split_tail"
      local c, S = Split.sizes(L)
      work, all = Split.scheduler(L, S):work(Loops.program_id(L)("x")), cursors
      local only = role == "consumer" and bounds_ops(L.split.loop, "a split-tail consumer")
      L.G.tile_loop(tl, work, all, { function(w)
        local t = Split.tile(c, S, w)
        if role ~= "consumer" then return tile_body(L, env, after, t) end
        Split.consumer_tile(L, env, t, all, function() tile_body(L, env, after, t) end,
                            function() tile_body(L, env, after, t, only) end)
      end })
      return
    else
      work, all = scheduler(L):work(Loops.program_id(L)("x")), cursors
    end
    L.G.tile_loop(tl, work, all, env.pp and pingpong_bodies(L, env, after) or env.ks and ksplit_bodies(L, env, after)
                                 or { function(w) tile_body(L, env, after, w) end })
    -- the consumers have read every id (the last, past the end, too) before the producer leaves
    if L.claims and role == "producer" then L.claims.pipe:producer_tail(all[#all]) end
  end
end

-- The bounds of a pipelined loop, which runs at least once: the consumer's
-- first k block is peeled (with nothing in flight yet), and a loop with no k
-- block left would wait for a stage no producer fills. Once more is harmless
-- where the extent is 0: TMA reads zeros past the tensor's edge.
function Loops.k_blocks(L, op, env)
  if env.k_range then return env.k_range() end
  local lb, ub = V.get(L, op:operand(1), op), V.get(L, op:operand(2), op)
  local lbc, ubc = R.const_int(op:operand(1)), R.const_int(op:operand(2))
  if lbc and ubc and ubc > lbc then return lb, ub end
  return lb, tl.max(ub, lb + 1)
end

-- The producer's pipelined loop op of the forward attention's chain
-- (L.skew: plan.lua marks the pipeline of the dot issued ahead, group.ahead),
-- skewed as kernels/attention.lua's load_kv: block lb of the ahead rings (K),
-- then per iteration kk the ahead rings' block kk before the others' (V)
-- block kk - 1, then the others' last block. The consumers read in that order
-- (iteration kk: S_kk = Q K_kk^T, then P_{kk-1} V_{kk-1}), and K_{kk+1} no
-- longer waits behind V_kk, whose stage the consumers free an iteration
-- later than K's. Each copy is lowered by env.copy (the producer's ring
-- copy); the body's other ops are lowered again for each block they serve.
-- -> true where it lowered op (L.skew), false otherwise.
function Loops.skewed_for(L, env, op, cursors)
  if not L.skew then return false end
  local b = op:region(1):entry()
  local lb, ub = Loops.k_blocks(L, op, env) -- (at least one block)
  local copy = env.copy
  local function blocks(kk, ahead) -- the copies of block kk into the ahead rings or the others
    L.vmap[b:arg(1):id()] = kk
    env.copy = function(c)
      local r = L.ring_of[c:operand(2):id()]
      if not r or (r.group.ahead or false) == ahead then copy(c) end
    end
    X.lower_block(L, b, env)
  end
  blocks(lb, true)
  tl.cutlass.for_range(lb + 1, ub, cursors, function(kk)
    blocks(kk, true)
    blocks(kk - 1, false)
  end)
  blocks(ub - 1, false)
  env.copy = copy
  return true
end

-- An agent's first warp, given only where it is not where the agents before
-- it end (L.next_warp).
function Loops.warp_id(L, ag, warps)
  local w = ag.first ~= L.next_warp and ag.first or nil
  L.next_warp = ag.first + (warps or ag.warps)
  return w
end

return Loops
