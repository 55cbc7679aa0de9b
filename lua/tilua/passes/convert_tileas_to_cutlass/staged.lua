-- tilua.passes.convert_tileas_to_cutlass.staged: small loads of a consumer's
-- pipelined loop brought into the ring's stages by the producer's TMA, beside
-- the operand tiles (block-scaled fp8's scales, as DeepGEMM's A scales).
--
-- A consumer's pipelined loop that promotes each k block a block late
-- (consumer.lua's lag_plan) and whose ahead loads (loads by the k block of
-- values that do not change in the loop) are all of these two forms:
--   a line of rows   tile<S x f32> sliced from the mma layout (one value a row
--                    of the accumulator), from a rank-2 tensor at {k block,
--                    row block}: the stage holds the S floats (a TMA box
--                    {1, S}, S * 4 a multiple of 16);
--   one element      tile<1 x f32> from a rank-2 tensor at {any, k block}: a
--                    box {1, 4} of 16 bytes (TMA's least) at the k block
--                    rounded down to a multiple of 4 (a box's first element
--                    must lie 16-byte aligned in its row: at an unaligned
--                    column the H200 traps, CUDA_ERROR_ILLEGAL_INSTRUCTION),
--                    its float k block % 4
-- has them staged: each stage of the pipeline gets a slot a consumer
-- warpgroup per load (128-byte aligned; a load that several consumers make
-- at coordinates computed alike, as block-scaled fp8's B scale, or the line
-- of A's scales of ping-pong consumers, each of which computes its program's
-- rows from the same work id, is brought once, into the first one's slot,
-- which they all read), the producer issues their TMA loads
-- into the stage after the operand tiles', completing on the stage's full
-- barrier (the stage's transaction bytes count them), and the consumers read
-- the block's values from the stage once its full barrier has passed, before
-- they release it: no global load in the mainloop. A TMA row stride is a
-- multiple of 16 bytes, so such a tensor's rows must be (for f32: a multiple
-- of 4 columns, padded by its owner). One CTA a program only (no cluster),
-- no StreamK or split-K, no loop prefetch; otherwise the loads stay global
-- loads a k block ahead (consumer.lua).
--
-- A consumer's loop of chained dots in order (tileas.pipeline's in_order:
-- chain.lua's iteration_in_order, the attention backward's dK/dV loop) has
-- its loads of a line staged the same way: a tile<S x f32> sliced from the
-- mma layout (a row's value down the columns or a column's along the rows:
-- the log-sum-exp and Delta of the loop's query tile), from a tensor of f32 of
-- any rank, its tile coordinate the last (a box {1, ..., 1, S}), no padding,
-- S * 4 a multiple of 16, S <= 256. They go into the stages of the group of
-- rings of the loop's first dot that reads a ring filled every iteration
-- (a slot a consumer warpgroup a stage), issued by the producer after that
-- group's tiles, before it commits the stage, and read by the consumers
-- between their wait for that stage and its release (the body's register
-- work comes before both releases of a loop in order). The tensor's row
-- strides must be multiples of 16 bytes (the launch's tensor map says so
-- otherwise): its owner pads the rows (examples/attention_bwd.lua pads LSE
-- and Delta to a multiple of 4 queries).
--
-- The producer computes each load's coordinates from the consumer's own ops
-- (lowered in the producer, with the consumer's loop index bound to the
-- producer's k block and its persistent loop's work id to the producer's,
-- which is the same tile): arith ops, constants, program counts and ids.

local tl = require "tilua"
local R = require "tilua.passes.convert_tileas_to_cutlass.read"
local V = require "tilua.passes.convert_tileas_to_cutlass.values"
local X = require "tilua.passes.convert_tileas_to_cutlass.ops"

local Staged = {}

local SINGLE_BOX = 4 -- a box of 16 bytes: TMA's least
local SLOT_ALIGN = 128 -- bytes: a TMA destination's alignment

-- The one loop of agent ag marked tileas.pipeline, or nil.
local function pipelined_loop(ag)
  local loops = {}
  R.each_op(ag.op, function(op) if op:name() == "scf.for" and op:attr "tileas.pipeline" then loops[#loops + 1] = op end end)
  return #loops == 1 and loops[1] or nil
end

-- The work id of agent ag's persistent loop (its body's argument), or nil.
local function work_arg(ag)
  local w = R.ops_named(ag.op, "scf.while")
  return #w == 1 and w[1]:region(2):entry():arg(1) or nil
end

local COORD_OPS = { ["tileas.get_program_id"] = true, ["tileas.num_programs"] = true }

-- The ops that value v needs, in order (deps), where each is one the producer
-- can compute: arith, constants, program ids and counts; block arguments only
-- the loop index (kk), the work id and the kernel's scalar parameters (args:
-- their ids). -> true, or false
local function closure(v, kk, work, deps, seen, args)
  if v:id() == kk:id() or v:id() == work:id() or (args and args[v:id()]) then return true end
  local d = v:def()
  if not d then return false end
  local rid = d:nresults() == 1 and d:result(1):id()
  if rid and seen[rid] then return true end
  local n = d:name()
  if d:nregions() > 0 or d:nresults() ~= 1 or not (n:match "^arith%." or COORD_OPS[n]) or R.tile_of(d:result(1)) then return false end
  for i = 1, d:noperands() do
    if not closure(d:operand(i), kk, work, deps, seen, args) then return false end
  end
  seen[rid] = true
  deps[#deps + 1] = d
  return true
end

-- A key of value v's computation from the loop index kk and the work id:
-- equal keys, equal values (each op's name, attributes and result type,
-- its operands' keys); the consumers' copies of one load of the program
-- give equal keys where they read the same element.
local function key_of(v, kk, work)
  if v:id() == kk:id() then return "kk" end
  if v:id() == work:id() then return "work" end
  local d = v:def()
  if not d then return "arg" .. v:id() end
  local at, names = d:attrs(), {}
  for name in pairs(at) do names[#names + 1] = name end
  table.sort(names)
  local parts = { d:name(), tostring(v:type()) }
  for _, name in ipairs(names) do parts[#parts + 1] = name .. "=" .. tostring(at[name]) end
  for i = 1, d:noperands() do parts[#parts + 1] = "(" .. key_of(d:operand(i), kk, work) .. ")" end
  return table.concat(parts, " ")
end

-- The staged form of load o of loop body b (k block kk), or nil.
local function form_of(o, kk)
  local t = o:operand(1):type()
  if not R.is_tensor_type(t) then return nil end
  local prm = t:info().params
  if prm[1] ~= tl.f32 or prm[2] ~= 2 then return nil end
  local ri = R.tile_of(o:result(1))
  if not ri or #ri.shape ~= 1 or ri.elem ~= tl.f32 or o:attr "padding" then return nil end
  local lead = R.leading(o)
  if X.is_single(o) then
    if lead ~= 1 or o:operand(3):id() ~= kk:id() then return nil end
    return { single = true, box = { 1, SINGLE_BOX }, width = SINGLE_BOX }
  end
  local s = ri.shape[1]
  local p = ri.layout and ri.layout.parent
  if R.layout_kind(o:result(1)) ~= "slice" or ri.layout.dim ~= 1 or not p or p.kind ~= "mma" then return nil end
  if lead ~= 1 or o:operand(2):id() ~= kk:id() or (s * 4) % 16 ~= 0 or s > 256 then return nil end
  return { box = { 1, s }, width = s }
end

-- The key of x in x + j (an arith.addi of x and the constant j marked
-- tileas.replica: consumer j's copy of a coordinate that
-- tileas-materialize-agents split by warpgroup), and x; or nil.
local function replica_base(v, j, kk, work)
  local d = v:def()
  if not d or d:name() ~= "arith.addi" then return nil end
  for i = 1, 2 do
    local c = d:operand(i):def()
    if c and c:name() == "arith.constant" and c:attr "tileas.replica" and c:attr "value" == j then
      return key_of(d:operand(3 - i), kk, work), d:operand(3 - i)
    end
  end
  return nil
end

-- Lines of one tensor that the n consumers read at consecutive row blocks
-- (consumer j's at x + j, j its replica, x computed alike: the agents'
-- copies of one load of the program's rows) come in one box {1, n S}, at
-- x's rows, into consumer 0's slot and those after it: slots of S floats that
-- are whole multiples of 128 bytes lie back to back, so each consumer reads
-- its own slot as before (block-scaled fp8's A scales: one box of 128 rows a
-- stage instead of one of 64 a warpgroup). Staged.merge_lines = false (the
-- pass option merge_lines=0) keeps a box a consumer.
local function merge_lines(list, n)
  local by_tensor, order = {}, {}
  for _, f in ipairs(list) do
    local t = f.tensor:id()
    if not f.single and not f.chain and not f.from then
      if not by_tensor[t] then by_tensor[t], order[#order + 1] = {}, t end
      table.insert(by_tensor[t], f)
    end
  end
  for _, t in ipairs(order) do
    local g = by_tensor[t]
    local w = g[1].width
    local ok = n > 1 and #g == n and (w * 4) % SLOT_ALIGN == 0 and n * w <= 256
    local base
    for j, f in ipairs(ok and g or {}) do
      local key, x = replica_base(f.op:operand(3), j - 1, f.kk, f.work)
      if f.agent ~= j - 1 or f.width ~= w or not key or (base and key ~= base) then ok = false break end
      base, f.row_base = key, x
    end
    if ok then
      local lead = g[1]
      lead.lines, lead.box, lead.map = n, { 1, n * w }, tl.tensor_map_type(tl.f32, { 1, n * w }, 0)
      for j = 2, n do g[j].from, g[j].map = lead, lead.map end
    end
  end
end

-- The staged form of load o of the body of a loop of chained dots in order,
-- or nil (a line of the mma layout from an f32 tensor, its tile coordinate last).
local function chain_form_of(o)
  if o:name() ~= "tileas.tiled_load" or o:attr "padding" then return nil end
  local t = o:operand(1):type()
  if not R.is_tensor_type(t) then return nil end
  local prm = t:info().params
  local ri = R.tile_of(o:result(1))
  if prm[1] ~= tl.f32 or not ri or #ri.shape ~= 1 or ri.elem ~= tl.f32 or ri.space ~= "rmem" then return nil end
  local p = ri.layout and ri.layout.parent
  if R.layout_kind(o:result(1)) ~= "slice" or not p or p.kind ~= "mma" then return nil end
  local s = ri.shape[1]
  if (s * 4) % 16 ~= 0 or s > 256 or o:noperands() ~= 1 + prm[2] then return nil end
  local box = {}
  for d = 1, prm[2] - 1 do box[d] = 1 end
  box[prm[2]] = s
  return { box = box, width = s, chain = true, along = ri.layout.dim == 0 and 2 or 1 }
end

-- The chain forms of the loads of consumer ag's loop of chained dots in
-- order (its index i among the consumers), or nil; args: the kernel's
-- scalar parameters' ids.
local function chain_loads(ag, i, loop, work, args)
  local b = loop:region(1):entry()
  local kk, mine = b:arg(1), {}
  for _, o in ipairs(b:ops()) do
    local f = o:nresults() == 1 and chain_form_of(o)
    if f then
      local deps, seen, ok = {}, {}, true
      for j = 2, o:noperands() do ok = ok and closure(o:operand(j), kk, work, deps, seen, args) end
      if ok then
        f.op, f.tensor, f.agent, f.deps, f.kk, f.work, f.loop = o, o:operand(1), i - 1, deps, kk, work, loop
        f.map = tl.tensor_map_type(tl.f32, f.box, 0)
        mine[#mine + 1] = f
      end
    end
  end
  return #mine > 0 and mine or nil
end

-- The plan (L.staged, before plan.lua's parameters): which loads of the
-- consumers' loops are staged. an: consumer.lua's analyses (ahead_loads,
-- lag_plan). Sets L.staged = { by_op = {[result id] = load}, list = loads,
-- producer_work = the producer's work id } where a load is { op, tensor (its
-- kernel argument), agent (the consumer's index in order), deps, kk, work,
-- box, width, single, map (its tensor map type) }; nil when none.
function Staged.plan(L, an)
  if L.nctas ~= 1 then return end
  local s = require("tilua.dsl.tileprog").schedule(L.kop:attr "tileas.schedule", "tileas.schedule")
  if s and s.kind ~= "dynamic" and s.kind ~= "data_parallel" then return end -- (StreamK, split-K: not staged)
  local producer, consumers = nil, {}
  for _, ag in ipairs(L.agents) do
    if ag.kind == "producer" then producer = ag elseif ag.kind == "consumer" then consumers[#consumers + 1] = ag end
  end
  if not producer or #consumers == 0 then return end
  local pwork = work_arg(producer)
  if not pwork then return end
  local list, by_op, maps = {}, {}, {}
  local args = {}
  for _, a in ipairs(L.body:args()) do
    if not R.is_tensor_type(a:type()) then args[a:id()] = true end
  end
  for i, ag in ipairs(consumers) do
    local loop, work = pipelined_loop(ag), work_arg(ag)
    local pipe = loop and loop:attr "tileas.pipeline"
    local pf = type(pipe) == "table" and pipe.prefetch or 0
    local chain = loop and work and type(pipe) == "table" and pipe.in_order == true and pf == 0
                  and chain_loads(ag, i, loop, work, args)
    if chain then
      for _, f in ipairs(chain) do
        local prev = maps[f.tensor:id()]
        if not prev or tostring(prev) == tostring(f.map) then
          maps[f.tensor:id()] = f.map
          list[#list + 1] = f
          by_op[f.op:result(1):id()] = f
        end
      end
    elseif loop and work and loop:nresults() == 1 and pf == 0 then
      local b = loop:region(1):entry()
      local kk = b:arg(1)
      local ahead = an.ahead_loads(b)
      local shape = R.tile_of(loop:result(1)).shape
      local mine = {}
      local ok = #ahead > 0 and shape[1] == 64 and an.lag_plan(b, ahead, shape[2] // 2) ~= nil
      for _, o in ipairs(ok and ahead or {}) do
        local f = form_of(o, kk)
        local deps, seen = {}, {}
        if not f then ok = false break end
        for j = 2, o:noperands() do
          if not closure(o:operand(j), kk, work, deps, seen) then ok = false end
        end
        f.op, f.tensor, f.agent, f.deps, f.kk, f.work = o, o:operand(1), i - 1, deps, kk, work
        -- (its coordinates' key: a load that an earlier consumer makes alike
        -- reads the same values, B's scale element of block-scaled fp8, or
        -- a ping-pong consumer's line of A's scales, whose rows each
        -- consumer computes from the same work id)
        f.key = tostring(o:operand(1):id()) .. ":" .. key_of(o:operand(2), kk, work) .. ":" .. key_of(o:operand(3), kk, work)
        f.map = tl.tensor_map_type(tl.f32, f.box, 0)
        local prev = maps[o:operand(1):id()]
        if prev and tostring(prev) ~= tostring(f.map) then ok = false end
        maps[o:operand(1):id()] = f.map
        mine[#mine + 1] = f
      end
      if ok then
        for _, f in ipairs(mine) do
          list[#list + 1] = f
          by_op[f.op:result(1):id()] = f
          -- (values an earlier consumer's load brings: read from its slot, no TMA of its own)
          for _, g in ipairs(list) do
            if g ~= f and g.key and g.key == f.key and not g.from then f.from, f.reads_from = g, g.agent break end
          end
        end
      end
    end
  end
  if #list == 0 then return end
  if Staged.merge_lines ~= false then merge_lines(list, #consumers) end
  L.staged = { list = list, by_op = by_op, producer_work = pwork }
end

-- The map type a staged load gives tensor op:operand(1) (plan.lua's
-- parameters), or nil: op not staged.
function Staged.map_of(L, op)
  local f = L.staged and op:nresults() == 1 and L.staged.by_op[op:result(1):id()]
  return f and f.map or nil
end

-- The stages' slots (shared memory beside the rings'): a buffer a staged
-- tensor, {stages, consumers, slot}; their bytes added to the pipeline's
-- transaction bytes (one group: a GEMM's).
-- (a chain form's group: that of the first dot of its loop that reads a ring
-- filled every iteration)
local function chain_group(L, loop)
  local g
  R.each_op(loop, function(op)
    if g or op:name() ~= "tileas.dot" then return end
    for i = 1, 2 do
      local r = L.ring_of[R.ring_source(op:operand(i)):id()]
      if r and not r.per_program and not g then g = r.group end
    end
  end)
  if not g then R.fail(loop, "staged loads in a loop whose dots read no ring filled every iteration") end
  return g
end
function Staged.shared(L)
  if not L.staged then return end
  local bufs = {}
  for _, f in ipairs(L.staged.list) do
    local g = f.chain and chain_group(L, f.loop) or L.groups[1]
    f.group = g
    local key = f.tensor:id()
    local slot = (f.width * 4 + SLOT_ALIGN - 1) // SLOT_ALIGN * SLOT_ALIGN // 4
    bufs[key] = bufs[key] or L.k:shared(tl.f32, { g.stages, #L.consumers, slot }, { align = SLOT_ALIGN })
    f.buf, f.stage_elems = bufs[key], #L.consumers * slot
    if not f.from then -- (a merged box: all its lines)
      local bytes = 4
      for _, x in ipairs(f.box) do bytes = bytes * x end
      g.bytes = g.bytes + bytes
    end
  end
end

-- (load f's TMA, its coordinates computed with the loop index kk and the work id q)
local function produce_one(L, env, kk, f, stage, full, q)
  local saved = {}
  local function bind(id, v)
    if saved[id] == nil then saved[id] = L.vmap[id] or false end
    L.vmap[id] = v
  end
  bind(f.kk:id(), kk)
  bind(f.work:id(), q)
  for _, d in ipairs(f.deps) do
    saved[d:result(1):id()] = saved[d:result(1):id()] or L.vmap[d:result(1):id()] or false
    V.at_loc(d, X.lower_op, L, d, env)
  end
  local o = f.op
  local e = L.P.by_arg[o:operand(1):id()]
  local coords
  if f.single then -- (the box at the 16-byte aligned column below the k block)
    -- (k blocks count from 0: an and, where ptxas makes rem.s32 by 4 a division of ~23 instructions)
    coords = V.leading(L, o, { V.get(L, o:operand(3), o) & -SINGLE_BOX })
  elseif f.chain then coords = V.leading(L, o, { V.get(L, o:operand(o:noperands()), o) * f.width })
  elseif f.lines then -- (the lines of the consumers after it too: from consumer 0's row block)
    coords = V.leading(L, o, { V.get(L, f.row_base, o) * f.width })
  else coords = V.leading(L, o, { V.get(L, o:operand(3), o) * f.width }) end
  tl.tma_load(f.buf:ptr(stage, f.agent), L.args[e.lowered_map], full, coords)
  for id, v in pairs(saved) do L.vmap[id] = v or nil end
end

-- The producer's TMA loads of the staged values of k block kk into the stage
-- (env.stage, completing on env.full), after the iteration's tiles; group g:
-- only the loads staged in its stages (stage, full: its stage and barrier).
function Staged.produce(L, env, kk, g, stage, full)
  if not L.staged then return end
  local q = L.vmap[L.staged.producer_work:id()]
  for _, f in ipairs(L.staged.list) do
    if not f.from and (not g or f.group == g) then produce_one(L, env, kk, f, stage or env.stage, full or env.full, q) end
  end
end

-- The consumer's read of staged load op (its values of k block at stage
-- env.stage, warpgroup env.wg): a line of its rows, or one element; nil when
-- op is not staged.
function Staged.read(L, env, op)
  local f = L.staged and L.staged.by_op[op:result(1):id()]
  if not f then return nil end
  local stage, wg = env.stage, env.wg
  if f.chain then -- (the stage of its group's cursor: chain.lua's env.group_stage)
    local base = f.buf:ptr(env.group_stage(f.group), wg, 0) + (f.along == 2 and env.f.col or env.f.row)
    return V.line(tl.f32, f.along, function(off) return (base + off):load() end)
  end
  -- (values a load alike of an earlier consumer brought: from its slot;
  -- a merged box's lines lie in each consumer's own slot)
  local slot = f.reads_from or wg
  if f.single then
    return { single = f.buf:ptr(stage, slot, V.get(L, op:operand(3), op) & (SINGLE_BOX - 1)):load() }
  end
  local row = env.f.row
  -- Staged.stage_last (the pass option staged_base=1): the thread's address
  -- at stage 0 (its slot and row: the same every k block) plus the stage's
  -- floats, instead of the stage's slot plus the row, so that the part that
  -- does not change in the loop is one sum ptxas can keep (one uniform
  -- offset and an LDS [R + UR] a k block; the default's address is a ULEA,
  -- a ULEA and a LEA a k block, s16fp8-1's SASS)
  if Staged.stage_last then
    return V.line(tl.f32, 1, function(off)
      return ((f.buf:ptr(0, slot, 0) + (row + off)) + stage * f.stage_elems):load()
    end)
  end
  -- (lazy: a line carried a k block is made again without being read)
  return V.line(tl.f32, 1, function(off) return (f.buf:ptr(stage, slot, 0) + (row + off)):load() end)
end

-- Is the loop of body b's values staged (its ahead loads read from the stage)?
function Staged.loop(L, b)
  if not L.staged then return false end
  for _, u in ipairs(b:ops()) do
    if u:nresults() == 1 and L.staged.by_op[u:result(1):id()] then return true end
  end
  return false
end

return Staged
