-- tilua.passes.convert_tileas_to_cutlass.plan: the first phase of the lowering
-- of one kernel: reading the tile program into the plan record L (what the
-- later phases build from):
--
--   L.kop, L.body, L.name        the tile program's kernel
--   L.agents                     its agents in order ({op, kind, warps, first}),
--   L.producer, L.consumers      by role (ROLES), L.warps the block's warps;
--   L.compute                    or the compute agent of a program without a dot
--   L.cluster, L.nctas           the cluster (along x)
--   L.P                          the parameters (plan_params)
--   L.S                          the StreamK / split-K plan, or nil (plan_schedule)
--   L.dynamic                    or the dynamic scheduler's ({workspace_bytes}: loops.lua's claims)
--   L.data_parallel              or true: a CTA a program (schedule = "data_parallel")
--   L.split                      or true: the split tail (schedule = "split_tail", split_tail.lua)
--   L.rings, L.ring_of, L.stages the rings (alloc_tensor with tileas.stages) and
--   L.pre                        the other ops before the agents

local R = require "tilua.passes.convert_tileas_to_cutlass.read"
local Tr = require "tilua.passes.convert_tileas_to_cutlass.transpose"
local Staged = require "tilua.passes.convert_tileas_to_cutlass.staged"
local Consumer = require "tilua.passes.convert_tileas_to_cutlass.consumer"

local plan = {}

-- {=== parameters: what each tensor becomes

-- Is op a pipelined loop in order (tileas.pipeline's in_order) of several
-- dots (chain.lua lowers it: the attention backward's dK/dV loop)?
local function in_order_chain(op)
  local p = op:name() == "scf.for" and op:attr "tileas.pipeline"
  if not (p and p.in_order == true) then return false end
  local dots = 0
  R.each_op(op, function(o) if o:name() == "tileas.dot" then dots = dots + 1 end end)
  return dots > 1
end

-- The plan of the kernel's parameters: for each tensor parameter, whether TMA
-- loads it (its map type), TMA stores it, or plain loads and stores read it
-- (L: the plan; its staged loads, staged.lua, are read by TMA).
local function plan_params(tl, kop, agents, nctas, L)
  local body = kop:region(1):entry()
  local names = kop:attr_or_default "arg_names"
  local P = { list = {}, by_arg = {} }
  for i, a in ipairs(body:args()) do
    local e = { arg = a, index = i, name = names[i] or ("arg" .. i), type = a:type() }
    if R.is_tensor_type(e.type) then
      local prm = e.type:info().params
      e.tensor, e.elem, e.rank = true, prm[1], prm[2]
    end
    P.list[i], P.by_arg[a:id()] = e, e
  end
  local function tensor(op)
    local e = P.by_arg[op:operand(1):id()]
    if not e or not e.tensor then R.fail(op, "a tiled load or store of a tensor that is not a kernel parameter") end
    return e
  end
  local function want_map(e, op, ty)
    if e.map and e.map ~= ty then R.fail(op, "tensor '%s' is read by TMA with two different boxes (%s, %s)", e.name, tostring(e.map), tostring(ty)) end
    e.map = ty
  end
  -- (first: the rings' loads below would refuse such a dot's operands less clearly)
  for _, ag in ipairs(agents) do
    R.each_op(ag.op, function(op)
      if op:name() == "tileas.dot" and nctas > 1 then
        -- a dot tileas-plan-cta could not split keeps its accumulator whole on every CTA: each would
        -- compute the tile and store it again
        local ti = R.tile_of(op:result(1))
        local _, c = R.cta_part(ti, nctas)
        if ti and (not c or c[1] * c[2] == 1) then
          R.fail(op, "a %d x %d dot on a cluster of %d CTAs: tileas-plan-cta found no split of it among them (each"
            .. " CTA's block at least 64 columns, its rows in chunks of 128 or 64: tl.core.dot_split), and every CTA"
            .. " would compute and store the whole tile: give the program more rows or columns, or its cluster fewer CTAs",
            ti.shape[1], ti.shape[2], nctas)
        end
      end
    end)
  end
  for _, ag in ipairs(agents) do
    local chained = false -- (a loop of chained dots: attention's; or in order, whose loop has no dot marked ahead)
    R.each_op(ag.op, function(op)
      chained = chained or (op:name() == "tileas.dot" and op:attr_or_default "tileas.ahead") or in_order_chain(op)
    end)
    R.each_op(ag.op, function(op)
      local n = op:name()
      if n == "tileas.copy" then
        local src, ring = op:operand(1), op:operand(2)
        local ld = src:def()
        if ld and ld:name() == "tileas.tiled_load" and ring:def() and ring:def():attr "tileas.stages" then
          local e = tensor(ld)
          e.ring_loaded = true
          if ld:attr "padding" then R.fail(ld, "a load into a ring is a TMA copy, which reads zeros out of bounds: its 'padding' is not lowered") end
          local g = R.ring_geometry(ring, nctas)
          want_map(e, op, tl.tensor_map_type(g.ti.elem, R.full_box(e.rank, g.box), g.swizzle))
        end
      elseif n == "tileas.tiled_load" or n == "tileas.tiled_store" then
        local e = tensor(op)
        local tile = n == "tileas.tiled_store" and op:operand(op:noperands()) or op:result(1)
        local ti = R.tile_of(tile)
        if n == "tileas.tiled_store" and ag.kind == "consumer" and ti.layout and ti.layout.kind == "mma"
           and op:attr "reduce" and ti.elem == tl.f32 and nctas == 1 and ti.shape[2] % 32 == 0 then
          -- a reduce-add by TMA from shared memory: boxes of 64 x 32 f32, a 128-byte swizzle
          -- (consumer.lua's tma_reduce)
          want_map(e, op, tl.tensor_map_type(ti.elem, R.full_box(e.rank, { 64, 32 }), 128))
          P.tma_stores = true
        elseif n == "tileas.tiled_store" and ag.kind == "consumer" and ti.layout and ti.layout.kind == "mma"
           and R.elem_bytes(ti.elem) == 2 and R.cta_part(ti, nctas)[2] % 16 == 0 then
          -- sub-tiles of 64 x 32, a 64-byte swizzle (consumer.lua's tiled_store; 64 x 16, a
          -- 32-byte one, where the block's columns are no multiple of 32: stdlib/gemm.lua's
          -- epi); after a loop of chained dots (whose rings are not a GEMM's deep ring) a
          -- warpgroup's whole fragment of 64 or 128 columns at once, in boxes of 64 x 64, a
          -- 128-byte swizzle
          local cols = R.cta_part(ti, nctas)[2]
          e.store_whole = chained and cols <= 128 and cols % 64 == 0
          e.store_cols = e.store_whole and 64 or cols % 32 == 0 and 32 or 16
          want_map(e, op, tl.tensor_map_type(ti.elem, R.full_box(e.rank, { 64, e.store_cols }), 2 * e.store_cols))
          P.tma_stores = true
        elseif ag.kind == "compute" and Tr.map_type(op) then -- a transpose by TMA (transpose.lua)
          want_map(e, op, Tr.map_type(op))
        elseif n == "tileas.tiled_load" and Staged.map_of(L, op) then -- into the stages (staged.lua)
          want_map(e, op, Staged.map_of(L, op))
        elseif n == "tileas.tiled_store" or not R.is_ring_load(op) then
          e.ptr = true
        end
      elseif n == "tileas.num_programs" then
        P.programs = P.programs or {}
        P.programs[op:attr "dim"] = true
        P.programs_z = P.programs_z or op:attr "dim" == "z"
      elseif n == "tileas.get_program_id" then
        P.programs_z = P.programs_z or op:attr "dim" == "z"
        if ag.kind == "compute" and op:attr "dim" ~= "x" then -- decomposed from the CTA's linear index
          P.programs = P.programs or {}
          P.programs.x, P.programs.y = true, true
        end
      elseif n == "tileas.is_valid_program_id" then -- the scheduler reads the grid of programs
        P.programs = P.programs or {}
        P.programs.x, P.programs.y = true, true
      end
    end)
  end
  -- the lowered parameters and how a launch fills each
  local params, launch = {}, {}
  local function add(name, ty, entry)
    params[#params + 1] = { name, ty }
    launch[#launch + 1] = entry
  end
  for _, e in ipairs(P.list) do
    if e.tensor then
      if e.map then
        e.lowered_map = #params + 1
        add(e.name, e.map, "map:" .. e.name)
      end
      if e.ptr then
        e.lowered_ptr = #params + 1
        add(e.name .. "_ptr", tl.ptr(e.elem), "ptr:" .. e.name)
        e.lowered_dims = {}
        for d = 1, e.rank do
          e.lowered_dims[d] = #params + 1
          add(("%s_dim%d"):format(e.name, d - 1), tl.i32, ("dim:%s:%d"):format(e.name, d - 1))
        end
        e.lowered_strides = {}
        for d = 1, e.rank - 1 do
          e.lowered_strides[d] = #params + 1
          add(("%s_stride%d"):format(e.name, d - 1), tl.i64, ("stride:%s:%d"):format(e.name, d - 1))
        end
      end
    else
      e.lowered = #params + 1
      add(e.name, e.type, "arg:" .. e.name)
    end
  end
  P.lowered_programs = {}
  for d, dim in ipairs { "x", "y", "z" } do
    if P.programs and P.programs[dim] then
      P.lowered_programs[d] = #params + 1
      add("programs_" .. dim, tl.i32, "programs:" .. dim)
    end
  end
  P.params, P.launch = params, launch
  return P
end

-- }===

-- {=== the schedule: the tile scheduler that hands out the work
--
-- tl.tile_kernel's `schedule` (the kernel's `tileas.schedule`): by default the
-- static persistent scheduler hands out whole programs. StreamK (and split-K,
-- its decomposition into equal pieces) also splits each program's k loop over
-- the workers, as stdlib/gemm.lua's schedule = "streamk" / "splitk", with its
-- pieces: a worker runs the k blocks of its unit of work (M.k_range), the
-- fixup (M.fixup) adds the partial sums of a tile's splits through the
-- workspace, and only the tile's final split runs what follows the k loop
-- (the epilogue). So the loop may only add dot products into an accumulator
-- that starts at zero, nothing before it may store, and the plan (on the host,
-- tl.core.sched_plan) needs the tile counts as constants: the grid of programs
-- and the workers from the option, the count of k blocks from the loop.

-- The StreamK plan of kernel kop (nil: the static persistent scheduler): the
-- configuration c of kernels/gemm.lua's StreamK pieces (M.plan_streamk) and
-- the workspace's bytes. Checks that the program can be split so.
local function agents_have(agents, kind)
  for _, ag in ipairs(agents) do if ag.kind == kind then return true end end
  return false
end

-- The pipelined loop `loop` (one carried accumulator) only adds dot products
-- to its accumulator, so that its k blocks may be summed in parts (StreamK's
-- splits, ksplit's consumers) and the parts added; `why` starts the error.
function plan.sum_of_dots(loop, why)
  local body = loop:region(1):entry()
  local sums = { [body:arg(2):id()] = true } -- the accumulator plus dot products
  for _, op in ipairs(body:ops()) do
    local n = op:name()
    if n == "tileas.dot" and sums[op:operand(3):id()] then sums[op:result(1):id()] = true
    elseif n == "scf.yield" and not sums[op:operand(1):id()] or
           not (n == "scf.yield" or n == "tileas.extract_slice" or n == "tileas.splat" or n:match "^arith%." and not R.tile_of(op:result(1))) then
      R.fail(op, "%s: the k loop may only add dot products to its accumulator (then the epilogue after the loop), found '%s'", why, n)
    end
  end
end

local function plan_schedule(tl, G, kop, agents, nconsumers, nctas, L_programs_z)
  local s, err = require("tilua.dsl.tileprog").schedule(kop:attr "tileas.schedule", "tileas.schedule")
  if err then R.fail(kop, "%s", err) end
  if not s then return nil end
  if s.kind == "dynamic" then -- loops.lua's runtime claims: whole programs, no plan
    if nctas > 1 then R.fail(kop, "the dynamic scheduler on a cluster is not lowered (a cluster's CTAs would share each claim)") end
    if not agents_have(agents, "producer") then R.fail(kop, "the dynamic scheduler's claims are made by the producer agent: a program without one (no TMA ring) is not lowered so") end
    return { kind = "dynamic", workspace_bytes = 4 }
  end
  if s.kind == "data_parallel" then return { kind = "data_parallel" } end -- (the launch's grid: a CTA a program)
  if s.kind == "split_tail" then -- (split_tail.lua: the static persistent walk, its tiles split on the device)
    if nctas > 1 then R.fail(kop, "the split-tail schedule on a cluster is not lowered") end
    if L_programs_z then R.fail(kop, "the split-tail schedule of a program that reads program_id(\"z\") is not lowered (its units are programs {x, y} and a consumer replica)") end
    return { kind = "split_tail", workers = s.workers }
  end
  local what = s.kind == "splitk" and "split-K" or "StreamK"
  if nctas > 1 then R.fail(kop, "%s on a cluster is not lowered (nor is it in stdlib/gemm.lua)", what) end
  if L_programs_z then R.fail(kop, "%s of a program that reads program_id(\"z\") is not lowered (its plan is a grid of programs {x, y})", what) end
  local kt, bn
  for _, ag in ipairs(agents) do
    local whiles = R.ops_named(ag.op, "scf.while")
    if #whiles ~= 1 then
      R.fail(ag.op, "%s splits the work of the persistent loop (tileas-dynamic-persistent): the %s agent has %d scf.while loops", what, ag.kind, #whiles)
    end
    local loops = {}
    R.each_op(ag.op, function(op) if op:name() == "scf.for" and op:attr "tileas.pipeline" then loops[#loops + 1] = op end end)
    local loop = loops[1]
    if #loops ~= 1 or loop:parent() ~= whiles[1] then
      R.fail(loop or ag.op, "%s splits one k loop (marked tileas.pipeline) of the persistent loop's body; the %s agent has %d", what, ag.kind, #loops)
    end
    local lb, ub = R.const_int(loop:operand(1)), R.const_int(loop:operand(2))
    if lb ~= 0 or not ub then
      R.fail(loop, "%s plans the split of the k loop at compile time: its count of k blocks must be a constant (tl.for_tiles of an integer extent, the problem's K), not a value known at run time", what)
    end
    kt = ub
    if ag.kind == "consumer" then
      -- sum: one accumulator from zero, to which the body only adds dot products
      local init = loop:noperands() == 4 and loop:operand(4):def()
      if loop:nresults() ~= 1 or not init or init:name() ~= "tileas.splat" or R.const_int(init:operand(1)) ~= 0 then
        R.fail(loop, "%s adds the partial sums of a tile's splits: the k loop must carry one accumulator that starts at zero (tl.zeros)", what)
      end
      plan.sum_of_dots(loop, what .. " adds the partial sums of a tile's splits")
      -- what precedes the loop runs on every split of the tile
      for _, op in ipairs(whiles[1]:region(2):entry():ops()) do
        if op == loop then break end
        if op:name() == "tileas.tiled_store" or op:name() == "tileas.copy" then
          R.fail(op, "%s runs what precedes the k loop on every split of a tile: a store there would be repeated (store after the loop)", what)
        end
      end
      bn = R.tile_of(loop:result(1)).shape[2]
    end
  end
  -- the planner refuses what does not fit its 32-bit tile ids: the program's error, not an internal one
  local ok, c = pcall(G.plan_streamk, tl, { schedule = "streamk", decomposition = s.kind == "splitk" and "split_k" or nil,
                                 splits = s.splits, tm = s.programs[1], tn = s.programs[2], kt = kt,
                                 tiles = s.programs[1] * s.programs[2], grid = s.workers, bm = 64 * nconsumers, bn = bn })
  if not ok then R.fail(kop, "%s of %d x %d programs on %d workers cannot be planned: %s", what, s.programs[1], s.programs[2],
                      s.workers, tostring(c):gsub("^.-sched: ", "")) end
  return { kind = s.kind, c = c, programs = s.programs, workspace_bytes = G.workspace_bytes(c) }
end

-- The workspace parameter of a StreamK kernel or of the dynamic scheduler (its
-- counter): the launch allocates it zeroed, and keeps it for the next launch.
local function add_workspace_param(tl, P)
  P.params[#P.params + 1] = { "workspace", tl.ptr(tl.i32) }
  P.launch[#P.launch + 1] = "workspace"
  P.lowered_workspace = #P.params
end
plan.add_workspace_param = add_workspace_param -- (also the row loop's claims: compute.lua)


-- }===

-- {=== the plan record

-- The roles of agents: kind -> fn(L, ag) that takes an agent of that kind into
-- the plan (checking what its lowering needs). A program shape with another
-- role adds its kind here and its builder in init.lua's BUILD.
local ROLES = {}
function ROLES.producer(L, ag)
  if L.producer then R.fail(ag.op, "more than one producer agent") end
  L.producer = ag
end
-- setmaxnreg of the producer and of each consumer, by the number of
-- consumers: the warpgroups of a CTA share 64K registers, 512 a thread of a
-- warpgroup (the producer keeps what its loads need)
plan.REGS = { { producer = 40, consumer = 240 }, { producer = 40, consumer = 232 }, { producer = 32, consumer = 160 } }
-- two consumers that reduce-add a dot's result in their loop (the fused
-- attention backward: the dQ part's accumulator beside dK, dV, S^T and dP^T)
-- or whose loop of chained dots runs in order (tileas.pipeline's in_order:
-- the backward's wider dK/dV tiles) take FlashAttention-3's split: the
-- producer's loads fit 24
plan.REGS_REDUCING = { producer = 24, consumer = 240 }

-- Does a consumer agent run a pipelined loop in order?
local function consumers_in_order(L)
  local found = false
  for _, ag in ipairs(L.consumers) do
    R.each_op(ag.op, function(op)
      local p = op:name() == "scf.for" and op:attr "tileas.pipeline"
      if p and p.in_order == true then found = true end
    end)
  end
  return found
end

-- Does a consumer agent reduce-add a tile into a tensor?
local function consumers_reduce(L)
  for _, ag in ipairs(L.consumers) do
    local found = false
    R.each_op(ag.op, function(op)
      if op:name() == "tileas.tiled_store" and op:attr "reduce" then found = true end
    end)
    if found then return true end
  end
  return false
end

function ROLES.consumer(L, ag)
  L.consumers[#L.consumers + 1] = ag
  ag.index = #L.consumers - 1
  if ag.warps ~= 4 then R.fail(ag.op, "a consumer agent is one warpgroup (num_warps = 4), got %d", ag.warps) end
end
function ROLES.compute(L, ag)
  if L.compute then R.fail(ag.op, "more than one compute agent") end
  L.compute = ag
end
plan.ROLES = ROLES

-- The agents by role, and the block's warps (whole warpgroups).
local function read_agents(L)
  local warps = 0
  L.consumers = {}
  for _, ag in ipairs(L.agents) do
    warps = math.max(warps, ag.first + ag.warps)
    local role = ROLES[ag.kind]
    if not role then R.fail(ag.op, "agents of kind '%s' are not lowered yet", ag.kind) end
    role(L, ag)
  end
  if L.compute then -- a program without a dot: the compute agent alone (compute.lua)
    if L.producer or #L.consumers > 0 then R.fail(L.compute.op, "a compute agent beside producers and consumers is not lowered yet") end
    L.warps = L.compute.warps
    return
  end
  if not L.producer or #L.consumers == 0 then R.fail(L.kop, "a producer and at least one consumer agent are needed") end
  L.warps = (warps + 3) // 4 * 4
end

-- The rings: the pre-agent allocations marked with their stages; on a
-- cluster a ring holds the CTA's block of the program's tile. The other ops
-- before the agents are L.pre.
local function read_rings(L, Ring)
  local rings, pre, stages = {}, {}, nil
  for _, op in ipairs(L.body:ops()) do
    local n = op:name()
    if n == "tileas.alloc_tensor" and op:attr "tileas.stages" then
      local s, once = op:attr "tileas.stages", op:attr_or_default "tileas.per_program"
      if stages and s ~= stages and not once then R.fail(op, "rings of %d and %d stages", stages, s) end
      if not once then stages = s end
      local g = R.ring_geometry(op:result(1), L.nctas)
      rings[#rings + 1] = setmetatable({ value = op:result(1), op = op, elem = g.ti.elem, shape = g.shape, tile = g.ti,
                                         stages = s, per_program = once or nil,
                                         swizzle = g.swizzle, box = g.box, nbox = g.nbox, multicast = g.multicast, pieces = g.pieces,
                                         bytes = g.shape[1] * g.shape[2] * R.elem_bytes(g.ti.elem) },
                                       Ring)
    elseif n ~= "tileas.agent" and n ~= "tileas.agent_switch" then
      pre[#pre + 1] = op
    end
  end
  if #rings == 0 and not L.compute then R.fail(L.kop, "no rings (alloc_tensor with tileas.stages) feed the agents") end
  L.rings, L.pre, L.stages, L.ring_of = rings, pre, stages or 1, {}
  for _, r in ipairs(rings) do L.ring_of[r.value:id()] = r end
end

-- The rings' pipelines (L.groups; r.group of each ring): the rings one dot
-- reads share one, a stage holding a tile of each (a GEMM's A and B, as
-- stdlib/gemm.lua's; without dots scheduled ahead every ring shares it); the
-- rings of different scheduled dots have pipelines of their own, each released
-- when its dot is done (attention's K and V), and so has a ring filled once a
-- program (its Q).
local function read_groups(L)
  local parent = {}
  local function find(r)
    while parent[r] and parent[r] ~= r do r = parent[r] end
    return r
  end
  L.groups = {}
  if #L.consumers == 0 then return end -- (a compute agent alone: no rings)
  for _, r in ipairs(L.rings) do parent[r] = r end
  local scheduled, first = false, nil
  R.each_op(L.consumers[1].op, function(op)
    scheduled = scheduled or (op:name() == "tileas.dot" and op:attr_or_default "tileas.ahead")
  end)
  local function join(r)
    if r and not r.per_program then
      if first then parent[find(r)] = find(first) else first = r end
    end
  end
  if not scheduled then -- (a GEMM: one pipeline, whatever its dots read through)
    for _, r in ipairs(L.rings) do join(r) end
  end
  R.each_op(L.consumers[1].op, function(op)
    if op:name() ~= "tileas.dot" then return end
    first = nil
    for i = 1, 2 do join(L.ring_of[R.ring_source(op:operand(i)):id()]) end
  end)
  local by_root = {}
  for _, r in ipairs(L.rings) do
    local root = find(r)
    local g = by_root[root]
    if not g then
      g = { rings = {}, stages = r.stages, per_program = r.per_program, bytes = 0, index = #L.groups + 1 }
      by_root[root] = g
      L.groups[#L.groups + 1] = g
    end
    g.rings[#g.rings + 1] = r
    g.bytes = g.bytes + r.bytes
    r.group = g
  end
  -- the forward attention's chain (R.forward_chain): the pipeline of the dot
  -- issued ahead (K) is filled a block ahead of the other (V), as
  -- kernels/attention.lua's load_kv (L.skew: loops.lua's Loops.skewed_for)
  if scheduled and R.forward_chain(L.consumers[1].op) then
    R.each_op(L.consumers[1].op, function(op)
      if op:name() == "tileas.dot" and op:attr_or_default "tileas.ahead" then
        for i = 1, 2 do
          local r = L.ring_of[R.ring_source(op:operand(i)):id()]
          if r and not r.per_program then
            r.group.ahead = true
            L.skew = true
          end
        end
      end
    end)
  end
end

-- A pair of consumers (tileas-materialize-agents), each the whole accumulator,
-- on one ring (a pipeline of mode pingpong: each stage released by the consumer
-- that took it), its pipelined loop directly in the persistent loop's body and
-- its ring group the kernel's one (consumer.lua, loops.lua):
--   ping-pong (tileas.pingpong = [g, 2]: ag.pingpong = g, L.pingpong): they take
--     the programs of the static persistent schedule in turn, as
--     stdlib/gemm.lua's consumers = "pingpong", their mainloops and epilogues
--     ordered by two seq_bars;
--   ksplit (tileas.ksplit = [g, 2]: ag.ksplit = g, L.ksplit): they take every
--     other k block of each program (kernels/gemm.lua's ksplit pieces, as
--     stdlib/gemm.lua's consumers = "ksplit"), so the loop may only add dot
--     products to its accumulator; consumer 1 hands its sums to consumer 0,
--     which alone runs what follows the loop.
local PAIRS = { pingpong = { what = "ping-pong", does = "take turns at the programs" },
                ksplit = { what = "ksplit", does = "split the k blocks of the programs" } }
local function read_pair(L, kind)
  local attr, what = "tileas." .. kind, PAIRS[kind].what
  local n = 0
  for _, ag in ipairs(L.consumers) do
    local pp = ag.op:attr(attr)
    if pp then
      ag[kind], n = pp[1], n + 1
      if pp[1] ~= ag.index then R.fail(ag.op, "%s consumer %d is consumer agent %d: they must come in order", what, pp[1], ag.index) end
    end
  end
  if n == 0 then return end
  if n ~= 2 or #L.consumers ~= 2 then R.fail(L.consumers[1].op, "%s takes two consumer agents, both marked %s", what, attr) end
  if L.S or L.dynamic or L.data_parallel then
    R.fail(L.consumers[1].op, "%s consumers %s of the static persistent schedule (not StreamK, split-K, dynamic or data-parallel)", what, PAIRS[kind].does)
  end
  if #L.groups ~= 1 or L.groups[1].per_program or L.skew then
    R.fail(L.consumers[1].op, "%s consumers read one ring group filled every k block (a GEMM's)", what)
  end
  for _, ag in ipairs(L.consumers) do
    local loops = 0
    R.each_op(ag.op, function(op)
      if op:name() == "scf.for" and op:attr "tileas.pipeline" then
        loops = loops + 1
        local parent = op:parent()
        if not parent or parent:name() ~= "scf.while" then
          R.fail(op, "a %s consumer's pipelined loop must be directly in the persistent loop's body (tileas-dynamic-persistent)", what)
        end
        if op:attr "tileas.turns" then R.fail(op, "a %s consumer's loop of chained dots is not lowered yet", what) end
        ag.pair_loop = op
        local block = R.cta_part(R.tile_of(op:result(1)), L.nctas) -- (on a cluster: the CTA's block)
        ag.pair_rows, ag.pair_cols = block[1], block[2]
        if kind == "ksplit" then
          if block[1] ~= 64 then R.fail(op, "ksplit consumers hold one warpgroup's 64-row accumulator a CTA, got %d rows", block[1]) end
          plan.sum_of_dots(op, "ksplit consumers add their sums of a program's k blocks")
        end
      end
    end)
    if loops ~= 1 then R.fail(ag.op, "a %s consumer runs one pipelined loop a program, got %d", what, loops) end
  end
  L[kind] = true
end

-- The plan record of kernel kop (tl the library, G the shared GEMM pieces,
-- Ring the metatable of ring values).
function plan.read(tl, G, kop, Ring)
  local L = { tl = tl, G = G, kop = kop, body = kop:region(1):entry(), name = kop:attr "sym_name" }
  L.agents = R.agents_of(L.body)
  if #L.agents == 0 then
    R.fail(kop, "kernel '%s' has no agents: run tileas-materialize-agents first (a tile program needs a loop marked tileas.pipeline whose tiled_loads feed tileas.dot ops)", kop:attr "sym_name")
  end
  local spec = kop:kernel_spec()
  local cluster = spec.cluster or { 1, 1, 1 }
  L.cluster, L.nctas = cluster, cluster[1] * cluster[2] * cluster[3]
  if L.nctas > 1 and (cluster[2] ~= 1 or cluster[3] ~= 1) then R.fail(kop, "clusters along y or z are not lowered yet") end
  Staged.plan(L, { ahead_loads = Consumer.ahead_loads, lag_plan = Consumer.lag_plan })
  L.P = plan_params(tl, kop, L.agents, L.nctas, L)
  read_agents(L)
  if L.compute and L.nctas > 1 then R.fail(kop, "a program without a dot (a compute agent) on a cluster is not lowered yet") end
  L.regs = plan.REGS[math.max(#L.consumers, 1)]
  if #L.consumers == 2 and (consumers_reduce(L) or consumers_in_order(L)) then L.regs = plan.REGS_REDUCING end
  if not L.regs then R.fail(kop, "%d consumer agents: at most %d are lowered", #L.consumers, #plan.REGS) end
  L.S = plan_schedule(tl, G, kop, L.agents, #L.consumers, L.nctas, L.P.programs_z)
  if L.S and L.S.kind == "dynamic" then L.S, L.dynamic = nil, L.S end
  if L.S and L.S.kind == "data_parallel" then L.S, L.data_parallel = nil, true end
  if L.S and L.S.kind == "split_tail" then L.S, L.split, L.split_workers = nil, true, L.S.workers end
  if L.S and L.compute then R.fail(kop, "%s splits the k loop of a dot: a program without one has none", L.S.kind) end
  if L.S or L.dynamic then add_workspace_param(tl, L.P) end
  read_rings(L, Ring)
  read_groups(L)
  read_pair(L, "pingpong")
  read_pair(L, "ksplit")
  if L.split then require("tilua.passes.convert_tileas_to_cutlass.split_tail").check(L) end
  return L
end

-- }===

return plan
