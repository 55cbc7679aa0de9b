-- tilua.passes.convert_tileas_to_cutlass: the `convert-tileas-to-cutlass` pass (a LUA_PASS of
-- src/passes/passes.def, run by tilua.passes): a warp-specialized tile
-- program (docs/tileprog.md; after tileas-materialize-agents and the passes of
-- seed 004) becomes a kernel of the orchestration level, the tile and cutlass
-- dialects, built with the same pieces as the hand-written GEMM of
-- stdlib/gemm.lua (docs/gemm.md), so that the tile GEMM is that GEMM:
--
--   rings (alloc_tensor with tileas.stages)  k:shared {stages, rows, cols}, 1024-aligned,
--                                            swizzled as their layout says
--   the rings' cutlass.pipeline             one producer participant (an elected thread
--                                            of the producer's first warp), the consumers'
--                                            warps; transaction bytes: a stage of every ring
--   producer agent                          setmaxnreg.dec 40; one elected thread walks
--                                            the tiles: per k block producer_acquire, a TMA
--                                            load per ring (into the stage, completing on
--                                            its full barrier), producer_commit
--   consumer agents (a warpgroup each)       setmaxnreg.inc; per k block consumer_wait,
--                                            wgmma from descriptors of the stage into a
--                                            vector<N/2 x f32> accumulator, commit, wait
--                                            for one group, release the previous stage;
--                                            the first k block peeled (scale-d false when
--                                            the accumulator starts at zero)
--   the epilogue                            per thread: its elements of the accumulator
--                                            (the wgmma fragment), elementwise ops on them,
--                                            slices (a bias row) loaded per column it holds;
--                                            16-bit tiles stored with stmatrix + TMA store,
--                                            others with plain stores
--   scf.while over is_valid_program_id       the static persistent tile scheduler's loop
--     (tileas-dynamic-persistent)            (stdlib/gemm.lua's M.tile_loop): program ids
--                                            are the work tile's m and n; with the
--                                            StreamK schedule (plan_schedule) the
--                                            StreamK scheduler's, the k loop split
--   a cluster of n CTAs (along x)            tileas-plan-cta's plan: rings hold the CTA's
--                                            block (of every piece, with cta_repeat: a
--                                            TMA load each), a ring replicated on all n
--                                            is loaded 1/n per CTA and TMA-multicast; a pipeline of
--                                            mode cluster (seed 004's DSMEM handshake at
--                                            its init); the clusters are the workers
--   !tileas.tensor parameters               a tensor map (TMA; the box the lowering
--                                            chose) and/or a pointer with its dims and
--                                            row strides; hidden parameters give the
--                                            grid of programs (num_programs)
--
-- The lowered kernel records how to launch it in its attribute `tileas.params`
-- (one entry per parameter, see launch_entry) and `tileas.launch`.
local core = require "tilua.core"

local M = {}

local Failure = {}
Failure.__index = Failure
local function fail(op, fmt, ...)
  error(setmetatable({ op = op, message = "convert-tileas-to-cutlass: " .. fmt:format(...) }, Failure), 0)
end

-- {=====================================================================
-- Reading the tile program
-- ======================================================================

local function tile_of(v)
  local t = v:type()
  local i = t:info()
  if i.kind ~= "tile" then return nil end
  i.layout = t:layout()
  return i
end

local function layout_kind(v)
  local i = tile_of(v)
  return i and i.layout and i.layout.kind
end

local function elem_bytes(t) return t:info().width // 8 end

local function is_tensor_type(t)
  local i = t:info()
  return i.kind == "dialect" and i.name == "tileas.tensor"
end

-- A tiled_load whose tile is copied into a ring (what the producer's TMA does).
function M.is_ring_load(op)
  for _, u in ipairs(op:result(1):users()) do
    local d = u:name() == "tileas.copy" and u:operand(2):def()
    if d and d:attr "tileas.stages" then return true end
  end
  return false
end

local function each_op(root, fn) root:walk(function(op) if op ~= root then fn(op) end end) end

-- The agents of the kernel body in order, with their warps: from an
-- agent_switch (its entries, holes skipped) or, bare, one after another.
local function agents_of(body)
  local out, next_warp = {}, 0
  for _, op in ipairs(body:ops()) do
    if op:name() == "tileas.agent_switch" then
      local a = op:attrs()
      local holes = {}
      for _, h in ipairs(a.holes or {}) do holes[h] = true end
      local e = 0
      for _, ag in ipairs(op:region(1):entry():ops()) do
        while holes[e] do e = e + 1 end
        out[#out + 1] = { op = ag, kind = ag:attr "kind", warps = ag:attr "num_warps", first = a.warp_id[e + 1] }
        e = e + 1
      end
    elseif op:name() == "tileas.agent" then
      out[#out + 1] = { op = op, kind = op:attr "kind", warps = op:attr "num_warps", first = next_warp }
      next_warp = next_warp + op:attr "num_warps"
    end
  end
  return out
end

-- }=====================================================================

-- {=====================================================================
-- Parameters: what each tensor becomes
-- ======================================================================

-- The TMA box of a ring of tile shape {r, c} (outermost first) with a swizzle
-- of sw bytes: rows of at most one swizzle span, c / cols boxes per stage.
local function ring_box(shape, eb, sw)
  local cols = shape[2]
  if sw > 0 and cols * eb > sw then cols = sw // eb end
  return { shape[1], cols }, shape[2] // cols
end

-- A CTA's block of a tile on a cluster of n CTAs (tileas-plan-cta's `cta`
-- part, docs/passes.md): its shape, and the `cta` split (nil: the whole tile).
local function cta_part(ti, n)
  local c = ti.layout and ti.layout.cta
  if n == 1 or not c then return ti.shape, nil end
  local shape = {}
  for d, x in ipairs(ti.shape) do shape[d] = x // (c[d] or 1) end
  return shape, c
end

-- The pieces of a tile split with a `cta_repeat` (tileas-plan-cta: a ring
-- whose replica consumers each slice one piece): along dim 1 (rows), how many
-- and the rows of one in the program's tile and in the CTA's block (1 piece of
-- the whole tile without one). A CTA holds its block of every piece.
local function cta_pieces(ti, shape)
  local rep = ti.layout and ti.layout.cta_repeat
  if rep and (rep[2] or 1) ~= 1 then fail(nil, "a cta_repeat along columns is not lowered yet") end
  local n = rep and rep[1] or 1
  return { n = n, rows = ti.shape[1] // n, block_rows = shape[1] // n }
end

-- Offsets {row, col} of a slice of a ring in the program's tile, in the
-- CTA's block (the smem): a slice of one piece of a cta_repeat is the CTA's
-- block of that piece.
local function piece_rows(ring, offs, op)
  local pc = ring.pieces
  if not pc or pc.n == 1 then return offs end
  if offs[1] % pc.rows ~= 0 then fail(op, "a slice of a ring split by cta_repeat that is not one of its pieces") end
  return { offs[1] // pc.rows * pc.block_rows, offs[2] }
end

-- Does convert_layout op change the CTA part (tileas-plan-cta's marker that
-- stayed: data moving between the cluster's CTAs)?
local function moves_between_ctas(op)
  local x, y = tile_of(op:operand(1)), tile_of(op:result(1))
  local function same(a, b)
    a, b = a or {}, b or {}
    for d = 1, math.max(#a, #b) do if (a[d] or 1) ~= (b[d] or 1) then return false end end
    return true
  end
  local lx, ly = x.layout or {}, y.layout or {}
  return not same(lx.cta, ly.cta) or not same(lx.cta_repeat, ly.cta_repeat)
end

-- The multicast of the loads into a ring: k > 1 where tileas-plan-cta
-- replicated the ring's blocks on k CTAs (each loads 1/k of its block along
-- the first dim and multicasts it).
local function ring_multicast(ring)
  for _, u in ipairs(ring:users()) do
    local d = u:name() == "tileas.copy" and u:operand(2) == ring and u:operand(1):def()
    if d and d:name() == "tileas.tiled_load" and d:attr "multicast" then return d:attr "multicast" end
  end
  return 1
end

-- A ring's geometry on a CTA of n: the tile info, the CTA's block shape, its
-- `cta` split, the multicast k, the TMA box (a 1/k piece) and boxes per stage.
local function ring_geometry(ring, n)
  local ti = tile_of(ring)
  local shape, c = cta_part(ti, n)
  local k = n > 1 and ring_multicast(ring) or 1
  local sw = ti.layout and ti.layout.swizzle or 0
  local box, nbox = ring_box(shape, elem_bytes(ti.elem), sw)
  if k > 1 then box = { box[1] // k, box[2] } end
  local pieces = cta_pieces(ti, shape)
  if pieces.n > 1 then box = { pieces.block_rows, box[2] } end -- a TMA load per piece
  return { ti = ti, shape = shape, cta = c, multicast = k, swizzle = sw, box = box, nbox = nbox, pieces = pieces }
end

-- The plan of the kernel's parameters: for each tensor parameter, whether TMA
-- loads it (its map type), TMA stores it, or plain loads and stores read it.
local function plan_params(tl, kop, agents, nctas)
  local body = kop:region(1):entry()
  local names = kop:attr "arg_names" or {}
  local P = { list = {}, by_arg = {} }
  for i, a in ipairs(body:args()) do
    local e = { arg = a, index = i, name = names[i] or ("arg" .. i), type = a:type() }
    if is_tensor_type(e.type) then
      local prm = e.type:info().params
      e.tensor, e.elem, e.rank = true, prm[1], prm[2]
    end
    P.list[i], P.by_arg[a:id()] = e, e
  end
  local function tensor(op)
    local e = P.by_arg[op:operand(1):id()]
    if not e or not e.tensor then fail(op, "a tiled load or store of a tensor that is not a kernel parameter") end
    return e
  end
  local function want_map(e, op, ty)
    if e.map and e.map ~= ty then fail(op, "tensor '%s' is read by TMA with two different boxes (%s, %s)", e.name, tostring(e.map), tostring(ty)) end
    e.map = ty
  end
  for _, ag in ipairs(agents) do
    each_op(ag.op, function(op)
      local n = op:name()
      if n == "tileas.copy" then
        local src, ring = op:operand(1), op:operand(2)
        local ld = src:def()
        if ld and ld:name() == "tileas.tiled_load" and ring:def() and ring:def():attr "tileas.stages" then
          local e = tensor(ld)
          e.ring_loaded = true
          local g = ring_geometry(ring, nctas)
          want_map(e, op, tl.tensor_map_type(g.ti.elem, g.box, g.swizzle))
        end
      elseif n == "tileas.tiled_load" or n == "tileas.tiled_store" then
        local e = tensor(op)
        local tile = n == "tileas.tiled_store" and op:operand(op:noperands()) or op:result(1)
        local ti = tile_of(tile)
        if n == "tileas.tiled_store" and ag.kind == "consumer" and ti.layout and ti.layout.kind == "mma"
           and elem_bytes(ti.elem) == 2 and cta_part(ti, nctas)[2] % 64 == 0 then
          want_map(e, op, tl.tensor_map_type(ti.elem, { 64, 64 }, 128))
          P.tma_stores = true
        elseif n == "tileas.tiled_store" or not M.is_ring_load(op) then
          e.ptr = true
        end
      elseif n == "tileas.num_programs" then
        P.programs = P.programs or {}
        P.programs[op:attr "dim"] = true
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

-- }=====================================================================

-- {=====================================================================
-- The schedule: the tile scheduler that hands out the work
-- ======================================================================
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

local function const_int(v)
  local d = v:def()
  if d and d:name() == "arith.constant" then return d:attr "value" end
end

local function ops_named(root, name)
  local out = {}
  each_op(root, function(op) if op:name() == name then out[#out + 1] = op end end)
  return out
end

-- The StreamK plan of kernel kop (nil: the static persistent scheduler): the
-- configuration c of stdlib/gemm.lua's StreamK pieces (M.plan_streamk) and
-- the workspace's bytes. Checks that the program can be split so.
local function plan_schedule(tl, G, kop, agents, nconsumers, nctas)
  local s, err = require("tilua.dsl.tileprog").schedule(kop:attr "tileas.schedule", "tileas.schedule")
  if err then fail(kop, "%s", err) end
  if not s then return nil end
  local what = s.kind == "splitk" and "split-K" or "StreamK"
  if nctas > 1 then fail(kop, "%s on a cluster is not lowered (nor is it in stdlib/gemm.lua)", what) end
  local kt, bn
  for _, ag in ipairs(agents) do
    local whiles = ops_named(ag.op, "scf.while")
    if #whiles ~= 1 then
      fail(ag.op, "%s splits the work of the persistent loop (tileas-dynamic-persistent): the %s agent has %d scf.while loops", what, ag.kind, #whiles)
    end
    local loops = {}
    each_op(ag.op, function(op) if op:name() == "scf.for" and op:attr "tileas.pipeline" then loops[#loops + 1] = op end end)
    local loop = loops[1]
    if #loops ~= 1 or loop:parent() ~= whiles[1] then
      fail(loop or ag.op, "%s splits one k loop (marked tileas.pipeline) of the persistent loop's body; the %s agent has %d", what, ag.kind, #loops)
    end
    local lb, ub = const_int(loop:operand(1)), const_int(loop:operand(2))
    if lb ~= 0 or not ub then
      fail(loop, "%s plans the split of the k loop at compile time: its count of k blocks must be a constant (tl.for_tiles of an integer extent, the problem's K), not a value known at run time", what)
    end
    kt = ub
    if ag.kind == "consumer" then
      -- sum: one accumulator from zero, to which the body only adds dot products
      local init = loop:noperands() == 4 and loop:operand(4):def()
      if loop:nresults() ~= 1 or not init or init:name() ~= "tileas.splat" or const_int(init:operand(1)) ~= 0 then
        fail(loop, "%s adds the partial sums of a tile's splits: the k loop must carry one accumulator that starts at zero (tl.zeros)", what)
      end
      local body = loop:region(1):entry()
      local sums = { [body:arg(2):id()] = true } -- the accumulator plus dot products
      for _, op in ipairs(body:ops()) do
        local n = op:name()
        if n == "tileas.dot" and sums[op:operand(3):id()] then sums[op:result(1):id()] = true
        elseif n == "scf.yield" and not sums[op:operand(1):id()] or
               not (n == "scf.yield" or n == "tileas.extract_slice" or n == "tileas.splat" or n:match "^arith%." and not tile_of(op:result(1))) then
          fail(op, "%s adds the partial sums of a tile's splits: the k loop may only add dot products to its accumulator (then the epilogue after the loop), found '%s'", what, n)
        end
      end
      -- what precedes the loop runs on every split of the tile
      for _, op in ipairs(whiles[1]:region(2):entry():ops()) do
        if op == loop then break end
        if op:name() == "tileas.tiled_store" or op:name() == "tileas.copy" then
          fail(op, "%s runs what precedes the k loop on every split of a tile: a store there would be repeated (store after the loop)", what)
        end
      end
      bn = tile_of(loop:result(1)).shape[2]
    end
  end
  -- the planner refuses what does not fit its 32-bit tile ids: the program's error, not an internal one
  local ok, c = pcall(G.plan_streamk, tl, { schedule = "streamk", decomposition = s.kind == "splitk" and "split_k" or nil,
                                 splits = s.splits, tm = s.programs[1], tn = s.programs[2], kt = kt,
                                 tiles = s.programs[1] * s.programs[2], grid = s.workers, bm = 64 * nconsumers, bn = bn })
  if not ok then fail(kop, "%s of %d x %d programs on %d workers cannot be planned: %s", what, s.programs[1], s.programs[2],
                      s.workers, tostring(c):gsub("^.-sched: ", "")) end
  return { kind = s.kind, c = c, programs = s.programs, workspace_bytes = G.workspace_bytes(c) }
end

-- The workspace parameter of a StreamK kernel (the launch allocates it zeroed).
local function add_workspace_param(tl, P)
  P.params[#P.params + 1] = { "workspace", tl.ptr(tl.i32) }
  P.launch[#P.launch + 1] = "workspace"
  P.lowered_workspace = #P.params
end

-- }=====================================================================

-- {=====================================================================
-- Values of the lowering
-- ======================================================================
--
-- A tile program value maps to: an IR value (scalars), a Frag (a register
-- tile in the mma layout: the thread's elements of a consumer's 64 x N tile,
-- element i at row f.row + dr, column f.col + dc, (dr, dc) = f.offset(i)), a
-- Line (a slice of the mma layout: the values at the columns (along = 2) or
-- rows (along = 1) the thread holds), or a Ring (a shared ring, possibly
-- sliced to a consumer's rows).

-- Frags and Lines compute an element when it is first asked for (at(i)),
-- so that what the epilogue never reads is never built.
local Lazy = {}
Lazy.__index = Lazy
local function lazy(kind, elem, at) return setmetatable({ kind = kind, elem = elem, fn = at, cache = {} }, Lazy) end
function Lazy:at(i)
  local v = self.cache[i]
  if v == nil then
    v = self.fn(i)
    self.cache[i] = v
  end
  return v
end
local function frag(elem, _, at) return lazy("frag", elem, at) end
local function line(elem, along, at)
  local l = lazy("line", elem, at)
  l.along = along
  return l
end
local function is_frag(x) return getmetatable(x) == Lazy and x.kind == "frag" end
local function is_line(x) return getmetatable(x) == Lazy and x.kind == "line" end

local Ring = {}
Ring.__index = Ring

-- }=====================================================================

-- {=====================================================================
-- Lowering one kernel
-- ======================================================================

local function lower_kernel(tl, G, kop)
  local body = kop:region(1):entry()
  local agents = agents_of(body)
  if #agents == 0 then
    fail(kop, "kernel '%s' has no agents: run tileas-materialize-agents first (a tile program needs a loop marked tileas.pipeline whose tiled_loads feed tileas.dot ops)", kop:attr "sym_name")
  end
  local spec = kop:kernel_spec()
  local cluster = spec.cluster or { 1, 1, 1 }
  local nctas = cluster[1] * cluster[2] * cluster[3]
  if nctas > 1 and (cluster[2] ~= 1 or cluster[3] ~= 1) then fail(kop, "clusters along y or z are not lowered yet") end
  local P = plan_params(tl, kop, agents, nctas)
  local persistent = false -- a persistent tile loop was lowered
  local warps = 0
  local producer, consumers = nil, {}
  for _, ag in ipairs(agents) do
    warps = math.max(warps, ag.first + ag.warps)
    if ag.kind == "producer" then
      if producer then fail(ag.op, "more than one producer agent") end
      producer = ag
    elseif ag.kind == "consumer" then
      consumers[#consumers + 1] = ag
      ag.index = #consumers - 1
      if ag.warps ~= 4 then fail(ag.op, "a consumer agent is one warpgroup (num_warps = 4), got %d", ag.warps) end
    else
      fail(ag.op, "agents of kind '%s' are not lowered yet", ag.kind)
    end
  end
  if not producer or #consumers == 0 then fail(kop, "a producer and at least one consumer agent are needed") end
  local S = plan_schedule(tl, G, kop, agents, #consumers, nctas)
  if S then add_workspace_param(tl, P) end
  warps = (warps + 3) // 4 * 4

  -- rings: the pre-agent allocations marked with their stages
  local rings, pre, stages = {}, {}, nil
  for _, op in ipairs(body:ops()) do
    local n = op:name()
    if n == "tileas.alloc_tensor" and op:attr "tileas.stages" then
      local s = op:attr "tileas.stages"
      if stages and s ~= stages then fail(op, "rings of %d and %d stages", stages, s) end
      stages = s
      -- on a cluster a ring holds the CTA's block of the program's tile
      local g = ring_geometry(op:result(1), nctas)
      if g.multicast > 1 and g.cta then fail(op, "multicast of a ring split among the CTAs is not lowered yet") end
      rings[#rings + 1] = setmetatable({ value = op:result(1), op = op, elem = g.ti.elem, shape = g.shape, tile = g.ti,
                                         swizzle = g.swizzle, box = g.box, nbox = g.nbox, multicast = g.multicast, pieces = g.pieces,
                                         bytes = g.shape[1] * g.shape[2] * elem_bytes(g.ti.elem) },
                                       Ring)
    elseif n ~= "tileas.agent" and n ~= "tileas.agent_switch" then
      pre[#pre + 1] = op
    end
  end
  if #rings == 0 then fail(kop, "no rings (alloc_tensor with tileas.stages) feed the agents") end
  local ring_of = {}
  for _, r in ipairs(rings) do ring_of[r.value:id()] = r end

  local name = kop:attr "sym_name"
  local saved = tl.module()
  tl.set_module(kop:parent())
  local ok, k = pcall(tl.kernel, name .. "__tileas_lowering", { params = P.params, block = 32 * warps,
                                                                  cluster = nctas > 1 and cluster or nil })
  tl.set_module(saved)
  if not ok then error(k, 0) end
  k.op:move_before(kop)

  k:define(function(k, p)
    local args = k.body:args()
    -- {=== shared memory and the pipeline
    local tx = 0
    for _, r in ipairs(rings) do
      r.smem = k:shared(r.elem, { stages, r.nbox * r.shape[1], r.box[2] }, { align = 1024, swizzle = r.swizzle > 0 and r.swizzle or nil })
      tx = tx + r.bytes
    end
    local staging -- the epilogue's stmatrix buffer: a 64 x N half per consumer
    local first_consumer = consumers[1].first
    for i, c in ipairs(consumers) do
      if c.first ~= first_consumer + 4 * (i - 1) then fail(c.op, "the consumer agents must take consecutive warpgroups") end
    end
    -- a cluster's pipeline (mode cluster, as stdlib/gemm.lua's cluster = 2): a
    -- multicast producer writes the stages of every CTA, so each stage is
    -- released to the whole cluster, one participant per consumer warpgroup;
    -- its init ends with seed 004's DSMEM handshake (convert-cutlass-to-nvvm)
    local parts = { { first_consumer, 4 * #consumers } }
    if nctas > 1 then
      parts = {}
      for i = 1, #consumers do parts[i] = { first_consumer + 4 * (i - 1), 4 } end
    end
    local pipe = k:pipeline { stages = stages, producers = { { producer.first, 1 } }, consumers = parts,
                              transaction_bytes = tx, mode = nctas > 1 and "cluster" or "cooperative" }
    local rank = nctas > 1 and tl.cluster_rank() or nil
    -- element offsets of this CTA's block of a tile (cta_part; of each piece
    -- of a cta_repeat): nil along a dim the cluster does not split
    local function block_offsets(ti)
      local shape, c = cta_part(ti, nctas)
      local offs, stride = {}, 1
      for d = 1, #shape do
        local cd = c and c[d] or 1
        if cd > 1 then offs[d] = rank // stride % cd * (d == 1 and cta_pieces(ti, shape).block_rows or shape[d]) end
        stride = stride * cd
      end
      return shape, offs
    end
    local function plus(x, off) return off and x + off or x end
    -- }===

    local vmap = {} -- program value -> lowered
    for i, e in ipairs(P.list) do
      if not e.tensor then vmap[e.arg:id()] = args[e.lowered] end
    end
    local function programs(d) return args[P.lowered_programs[d]] end

    -- {=== the generic lowering of one op of an agent (env: the agent's state)
    local lower_block

    local function get(v, op)
      local x = vmap[v:id()]
      if x == nil then fail(op or kop, "a value this lowering does not know (%s)", tostring(v:type())) end
      return x
    end

    local function at_loc(op, fn, ...)
      local file, line_no = op:loc()
      local prev = core.pin_location(file or nil, file and line_no or nil)
      local r = table.pack(pcall(fn, ...))
      core.pin_location(prev)
      if not r[1] then error(r[2], 0) end
      return table.unpack(r, 2, r.n)
    end

    -- A scalar op: a copy with its operands lowered.
    local function clone_scalar(op)
      local opds = {}
      for i, v in ipairs(op:operands()) do opds[i] = get(v, op) end
      local types = {}
      for i, r in ipairs(op:results()) do types[i] = r:type() end
      local c = tl.op(op:name(), opds, types, op:attrs(true), op:nregions())
      for i, r in ipairs(op:results()) do vmap[r:id()] = c:result(i) end
      return c
    end

    -- Tensor element (row, col) of a plain (pointer) tensor parameter: the
    -- address, and whether it is in bounds.
    local function element(e, op, idx)
      if not e.lowered_ptr then fail(op, "tensor '%s' has no pointer parameter", e.name) end
      local inb, off
      for d = 1, e.rank do
        local x = idx[d]
        local ok = x:lt(args[e.lowered_dims[d]])
        inb = inb and (inb & ok) or ok
        local term = x:cast(tl.i64)
        if d < e.rank then term = term * args[e.lowered_strides[d]] end
        off = off and off + term or term
      end
      return args[e.lowered_ptr], off, inb
    end
    local function load_at(e, op, idx)
      local base, off, inb = element(e, op, idx)
      local zero = tl.is_float_type(e.elem) and tl.const(0.0, e.elem) or tl.const(0, e.elem)
      return tl.select(inb, (base + tl.select(inb, off, tl.const(0, tl.i64))):load(), zero)
    end
    local function store_at(e, op, idx, v)
      local base, off, inb = element(e, op, idx)
      tl.if_(inb, function() (base + off):store(v) end)
    end

    -- the elementwise arith ops of tiles, per element
    local function elementwise(op, env)
      local res = op:result(1)
      local ri = tile_of(res)
      local opds = {}
      for i, v in ipairs(op:operands()) do opds[i] = get(v, op) end
      local kind = layout_kind(res)
      local along -- slices of the mma layout (a row's reduction): per value the thread holds
      for _, o in ipairs(opds) do if is_line(o) then along = along or o.along end end
      if kind == "slice" and along then
        local attrs, nm = op:attrs(true), op:name()
        return line(ri.elem, along, function(off)
          local xs = {}
          for j, o in ipairs(opds) do
            if is_line(o) and o.along == along then xs[j] = o:at(off) elseif tl.is_value(o) then xs[j] = o
            else fail(op, "an operand of an elementwise op of slices that is not a slice of the accumulator's layout") end
          end
          return tl.op1(nm, xs, ri.elem, attrs)
        end)
      end
      if kind ~= "mma" then fail(op, "elementwise ops on tiles of layout '%s' are not lowered yet (only the accumulator's mma layout)", tostring(kind)) end
      local attrs = op:attrs(true)
      local n = ri.shape[1] * ri.shape[2] // 128
      local nm = op:name()
      local src = opds[1]
      if nm == "arith.truncf" and is_frag(src) then
        local f = frag(ri.elem, n, function(i) return tl.op1(nm, { src:at(i) }, ri.elem, attrs) end)
        f.trunc_of = src -- the store packs the wide values
        return f
      end
      return frag(ri.elem, n, function(i)
        local xs = {}
        for j, o in ipairs(opds) do
          if is_frag(o) then xs[j] = o:at(i) elseif tl.is_value(o) then xs[j] = o
          else fail(op, "an operand of an elementwise op that is not a tile of the accumulator's layout") end
        end
        return tl.op1(nm, xs, ri.elem, attrs)
      end)
    end

    local math_fns = {
      exp = function(x) return tl.ex2(x * tl.const(1.4426950408889634, tl.f32)) end,
      exp2 = function(x) return tl.ex2(x) end,
      log = function(x) return tl.lg2(x) * tl.const(0.6931471805599453, tl.f32) end,
      log2 = function(x) return tl.lg2(x) end,
      sqrt = function(x) return tl.sqrt_approx(x) end,
      rsqrt = function(x) return tl.rsqrt(x) end,
      abs = function(x) return tl.max(x, -x) end,
    }

    -- A reduce along dim 1 (N) of a consumer's accumulator tile: a Line of the
    -- rows the thread holds. In the wgmma fragment a row's values are in the 4
    -- lanes of a quad (2 of every 8 columns each): each lane combines its own
    -- (a tree), then shfl.xor 1 and 2 within the quad give every lane of it the
    -- row's value. Computed here (not lazily): the shuffles need the whole warp.
    local reduce_fns = {
      add = function(a, b) return a + b end,
      max = function(a, b) return tl.max(a, b) end,
      min = function(a, b) return tl.min(a, b) end,
    }
    local row_varies -- (below: does a reduced row span several program tiles?)
    local function lower_reduce(op, env)
      local x = get(op:operand(1), op)
      local xi, ri = tile_of(op:operand(1)), tile_of(op:result(1))
      local dim, kind = op:attr "dim", op:attr "kind"
      if not env.f or not is_frag(x) or #xi.shape ~= 2 then
        fail(op, "tileas.reduce of a tile not in the accumulator's mma layout (in a consumer) is not lowered yet")
      end
      if dim ~= 1 then
        fail(op, "a reduce along dim %d of the accumulator (its rows are spread over warps and warpgroups) is not lowered yet: only along dim 1, the row of a quad of lanes", dim)
      end
      if xi.elem ~= tl.f32 then fail(op, "reduce of %s tiles is not lowered yet (f32 accumulators)", tostring(xi.elem)) end
      local shape, c = cta_part(xi, nctas)
      if c and (c[2] or 1) > 1 then
        fail(op, "a reduce along dim 1 of a tile the cluster's CTAs split along it (cta = [%d, %d]): the row spans several CTAs, which is not lowered", c[1], c[2])
      end
      local src = row_varies(op:operand(1))
      if src then
        fail(op, "a reduce along dim 1 of a tile whose columns are one of several program tiles of the row (the tiled_load of '%s' that gives them has a coordinate along them that depends on the program id): a row spanning several program tiles along N is not lowered; reduce a tile that holds the whole row (a constant coordinate)", src)
      end
      local comb = reduce_fns[kind]
      local n = shape[1] * shape[2] // 128
      local rows = {}
      for _, dr in ipairs { 0, 8 } do
        local vals = {}
        for i = 0, n - 1 do
          local r = env.f.offset(i)
          if r == dr then vals[#vals + 1] = x:at(i) end
        end
        while #vals > 1 do
          local nx = {}
          for j = 1, #vals, 2 do nx[#nx + 1] = vals[j + 1] and comb(vals[j], vals[j + 1]) or vals[j] end
          vals = nx
        end
        local v = vals[1]
        v = comb(v, tl.shfl_xor(v, 1))
        rows[dr] = comb(v, tl.shfl_xor(v, 2))
      end
      vmap[op:result(1):id()] = line(ri.elem, 1, function(dr) return rows[dr] end)
    end

    -- Where a reduced row's columns come from: tiled_loads (the dot's B ring's,
    -- in the producer) whose coordinate along them depends on the program id
    -- (get_program_id, the persistent loop's id) make the tile one of several
    -- program tiles of the row. -> the tensor's name, or nil.
    function row_varies(v)
      local dep = {}
      local function depends(x)
        local id = x:id()
        if dep[id] == nil then
          dep[id] = false
          local d, r = x:def(), false
          if not d then
            local b = x:owner_block()
            r = b ~= nil and b:parent():name() == "scf.while"
          elseif d:name() == "tileas.get_program_id" then
            r = true
          else
            for _, o in ipairs(d:operands()) do r = r or depends(o) end
          end
          dep[id] = r
        end
        return dep[id]
      end
      local function load_varies(ld, d)
        if depends(ld:operand(2 + d)) then return P.by_arg[ld:operand(1):id()].name end
      end
      local seen = {}
      local function trace(t)
        if not tile_of(t) or seen[t:id()] then return nil end
        seen[t:id()] = true
        local d = t:def()
        if not d then -- a value a loop carries: its init and what the body yields
          local b = t:owner_block()
          local o = b:parent()
          if o:name() ~= "scf.for" then return nil end
          return trace(o:operand(3 + t:index() - 1)) or trace(b:terminator():operand(t:index() - 1))
        end
        local n = d:name()
        if n == "scf.for" then
          return trace(d:operand(3 + t:index())) or trace(d:region(1):entry():terminator():operand(t:index()))
        elseif n == "tileas.tiled_load" then
          return load_varies(d, 1)
        elseif n == "tileas.dot" then -- its columns are B's rows ([N, K]) or columns ([K, N])
          local b = d:operand(2)
          while b:def() and b:def():name() == "tileas.extract_slice" do b = b:def():operand(1) end
          for _, u in ipairs(b:users()) do
            local ld = u:name() == "tileas.copy" and u:operand(2) == b and u:operand(1):def()
            if ld and ld:name() == "tileas.tiled_load" then
              local r = load_varies(ld, d:attr "transpose_b" and 0 or 1)
              if r then return r end
            end
          end
          return trace(d:operand(3))
        elseif n == "tileas.math" or n == "tileas.convert_layout" or n:match "^arith%." then
          for _, o in ipairs(d:operands()) do
            local r = trace(o)
            if r then return r end
          end
        end
        return nil
      end
      return trace(v)
    end

    -- lower one op (not a loop of the pipeline: those are lower_for / lower_while)
    local function lower_op(op, env)
      local n = op:name()
      if n == "scf.yield" or n == "scf.condition" then return end
      if n == "scf.for" and op:attr "tileas.pipeline" then return env.pipelined_for(op) end
      if n == "scf.while" then return env.persistent(op) end
      if n == "tileas.get_program_id" then
        vmap[op:result(1):id()] = env.program_id(op:attr "dim")
      elseif n == "tileas.num_programs" then
        vmap[op:result(1):id()] = programs(({ x = 1, y = 2, z = 3 })[op:attr "dim"])
      elseif n == "tileas.splat" then
        local ri = tile_of(op:result(1))
        local s = get(op:operand(1), op)
        local l = ri.layout
        if l and l.kind == "slice" and #ri.shape == 1 and l.parent and l.parent.kind == "mma" then
          vmap[op:result(1):id()] = line(ri.elem, l.dim == 0 and 2 or 1, function() return s end)
          return
        end
        if layout_kind(op:result(1)) ~= "mma" then fail(op, "splats of layout '%s' are not lowered yet", tostring(layout_kind(op:result(1)))) end
        local f = frag(ri.elem, ri.shape[1] * ri.shape[2] // 128, function() return s end)
        f.splat = op:operand(1)
        vmap[op:result(1):id()] = f
      elseif n == "tileas.extract_slice" then
        local r = get(op:operand(1), op)
        if getmetatable(r) ~= Ring then fail(op, "extract_slice of register tiles is not lowered yet") end
        local offs, per = op:attr "offsets", op:attr "tileas.replica_offsets"
        local ring = r.ring or r
        offs, per = piece_rows(ring, offs, op), per and piece_rows(ring, per, op)
        if per and env.replica then -- one code for every replica: the offsets of this one
          offs = { env.replica * per[1], env.replica * per[2] }
          if per[1] == 0 then offs[1] = 0 end
          if per[2] == 0 then offs[2] = 0 end
        end
        vmap[op:result(1):id()] = setmetatable({ ring = r.ring or r, offsets = { offs[1], offs[2] }, shape = tile_of(op:result(1)).shape }, Ring)
      elseif n == "tileas.dot" then
        return env.dot(op)
      elseif n == "tileas.tiled_load" then
        return env.tiled_load(op)
      elseif n == "tileas.tiled_store" then
        return env.tiled_store(op)
      elseif n == "tileas.copy" then
        return env.copy(op)
      elseif n == "tileas.expand_dim" or n == "tileas.broadcast" or n == "tileas.convert_layout" then
        local x = get(op:operand(1), op)
        local ri = tile_of(op:result(1))
        if n == "tileas.convert_layout" and layout_kind(op:result(1)) ~= layout_kind(op:operand(1)) then
          fail(op, "convert_layout from %s to %s is not lowered yet", tostring(layout_kind(op:operand(1))), tostring(layout_kind(op:result(1))))
        end
        if n == "tileas.convert_layout" and nctas > 1 and moves_between_ctas(op) then
          for _, u in ipairs(op:result(1):users()) do -- tileas-plan-cta's gather of what a reduce reads
            if u:name() == "tileas.reduce" then
              fail(u, "a reduce of a tile the cluster's CTAs split (tileas-plan-cta gathers it between the CTAs) is not lowered yet")
            end
          end
          fail(op, "a convert_layout between the cluster's CTAs (its CTA part changes) is not lowered yet")
        end
        if is_line(x) and #ri.shape == 2 then -- a row (along 2) or column (along 1) over the fragment
          vmap[op:result(1):id()] = frag(ri.elem, 0, function(i)
            local dr, dc = env.f.offset(i)
            return x:at(x.along == 2 and dc or dr)
          end)
        else
          vmap[op:result(1):id()] = x
        end
      elseif n == "tileas.reduce" then
        lower_reduce(op, env)
      elseif n == "tileas.math" then
        local x = get(op:operand(1), op)
        local fn = math_fns[op:attr "fn"]
        if not (is_frag(x) or is_line(x)) or tile_of(op:result(1)).elem ~= tl.f32 then
          fail(op, "tileas.math of f32 accumulator tiles (or of their slices) only")
        end
        local y = lazy(x.kind, x.elem, function(i) return fn(x:at(i)) end)
        y.along = x.along
        vmap[op:result(1):id()] = y
      elseif n:match "^arith%." and op:nresults() == 1 and tile_of(op:result(1)) then
        vmap[op:result(1):id()] = elementwise(op, env)
      elseif n == "arith.constant" and op:attr "tileas.replica" and env.replica then
        vmap[op:result(1):id()] = env.replica
      elseif n:match "^tileas%." then
        fail(op, "'%s' is not lowered yet", n)
      elseif op:nregions() > 0 then
        fail(op, "'%s' with regions inside an agent is not lowered yet", n)
      else
        clone_scalar(op)
      end
    end

    function lower_block(block, env)
      for _, op in ipairs(block:ops()) do at_loc(op, lower_op, op, env) end
    end
    -- }===

    -- {=== the tile loop: scf.while over is_valid_program_id
    -- the workers are the clusters, whose CTAs run the same programs: the
    -- scheduler of a cluster of n (stdlib/gemm.lua's) walks n tiles of M at
    -- once, so it is given n times the programs along M and its work tile's m
    -- (the cluster's) is the program's
    local function scheduler()
      if S then return G.streamk_scheduler(tl, S.c, args[P.lowered_workspace]) end
      local many = nctas > 1
      return tl.sched.static_persistent { tiles = { many and programs(1) * nctas or programs(1), programs(2), 1, 1 }, swizzle = 8,
                                          workers = many and tl.grid_dim("x") // nctas or tl.grid_dim("x"),
                                          cluster = nctas > 1 and cluster or nil }
    end
    local function program_id(dim)
      if nctas > 1 and dim == "x" then return tl.cluster_id(dim) end
      return tl.block_id(dim)
    end
    -- StreamK: the unit of work `work` of an agent's persistent loop; its k
    -- loop runs the unit's k blocks (stdlib/gemm.lua's M.k_range)
    local function streamk_unit(env, work)
      env.work = work
      env.k_range = function()
        local kb0, kbn = G.k_range(tl, S.c, work)
        return kb0, kb0 + kbn
      end
    end
    -- env.persistent for an agent whose cursors are `cursors`
    local function persistent_loop(env, cursors)
      return function(op)
        local cond = op:region(1):entry():ops()
        local valid = cond[#cond - 1]
        if #op:operands() ~= 1 or not valid or valid:name() ~= "tileas.is_valid_program_id" then
          fail(op, "an scf.while that is not a persistent loop over is_valid_program_id is not lowered yet")
        end
        if #op:results() > 0 and op:result(1):nuses() > 0 then fail(op, "the persistent loop's result is used after it") end
        local after = op:region(2):entry()
        persistent = true
        G.tile_loop(tl, scheduler():work(program_id("x")), cursors, { function(work)
          local saved = env.program_id
          local ids = {}
          env.program_id = function(dim)
            ids[dim] = ids[dim] or (dim == "x" and work:m() or dim == "y" and work:n() or tl.const(0))
            return ids[dim]
          end
          -- the linear program id whose x = q mod nx and y = q / nx are the work tile's m and n
          vmap[after:arg(1):id()] = work:m() + work:n() * programs(1)
          if S then streamk_unit(env, work) end
          local ops = after:ops()
          local function lower_from(i)
            for j = i, #ops do
              local o = ops[j]
              if o:name() == "tileas.cancel_next_program_id" then vmap[o:result(1):id()] = tl.const(0)
              else at_loc(o, lower_op, o, env) end
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
        end })
      end
    end
    -- }===

    -- The bounds of a pipelined loop, which runs at least once: the consumer's
    -- first k block is peeled (with nothing in flight yet), and a loop with no k
    -- block left would wait for a stage no producer fills. Once more is harmless
    -- where the extent is 0: TMA reads zeros past the tensor's edge.
    local function k_blocks(op, env)
      if env.k_range then return env.k_range() end
      local lb, ub = get(op:operand(1), op), get(op:operand(2), op)
      local lbc, ubc = const_int(op:operand(1)), const_int(op:operand(2))
      if lbc and ubc and ubc > lbc then return lb, ub end
      return lb, tl.max(ub, lb + 1)
    end

    -- an agent's first warp, given only where it is not where the agents before it end
    local next_warp = 0
    local function warp_id(ag, warps)
      local w = ag.first ~= next_warp and ag.first or nil
      next_warp = ag.first + (warps or ag.warps)
      return w
    end

    -- {=== the producer
    local function producer_agent(ag)
      local env = { agent = ag }
      local a = ag.op
      env.program_id = program_id
      env.dot = function(op) fail(op, "a dot in the producer agent") end
      env.tiled_store = function(op) fail(op, "a tiled_store in the producer agent") end
      env.tiled_load = function(op)
        if not M.is_ring_load(op) then fail(op, "the producer loads only into rings") end
        vmap[op:result(1):id()] = { pending_load = op }
      end
      env.copy = function(op)
        local ld = get(op:operand(1), op).pending_load
        local r = ring_of[op:operand(2):id()]
        if not ld or not r or not env.stage then fail(op, "a copy in the producer that is not a load into a ring inside the pipelined loop") end
        local e = P.by_arg[ld:operand(1):id()]
        -- the CTA's block of the program's tile; multicast: this CTA's 1/k
        -- piece of it (rows rank * box), to every CTA of the cluster
        local _, offs = block_offsets(r.tile)
        local coords, piece, mc = {}, nil, nil
        for d = 1, 2 do coords[d] = plus(get(ld:operand(1 + d), ld) * r.tile.shape[d], offs[d]) end
        if r.multicast > 1 then
          if r.multicast ~= nctas then fail(op, "a multicast to %d of %d CTAs is not lowered yet", r.multicast, nctas) end
          piece, mc = rank * r.box[1], (1 << nctas) - 1
          coords[1] = coords[1] + piece
        end
        -- (a cta_repeat: the CTA's block of every piece, a load each)
        for pc = 0, r.pieces.n - 1 do
          local c1 = pc == 0 and coords[1] or coords[1] + pc * r.pieces.rows
          for h = 0, r.nbox - 1 do
            local c2 = h == 0 and coords[2] or coords[2] + h * r.box[2]
            local at = h * r.shape[1] + pc * r.pieces.block_rows
            local row = at > 0 and plus(tl.const(at, tl.i32), piece) or piece
            local dst = row and r.smem:ptr(env.stage, row) or r.smem:ptr(env.stage)
            tl.tma_load(dst, args[e.lowered_map], env.full, { c1, c2 }, mc and { multicast = mc } or nil)
          end
        end
      end
      k:agent("producer", { warps = ag.warps, warp_id = warp_id(ag) }, function()
        tl.setmaxnreg(40, "dec")
        k:async_exec("producer", { first_warp = ag.first, warps = 1 }, function()
          local st = pipe:producer_start()
          env.pipelined_for = function(op)
            local b = op:region(1):entry()
            if op:nresults() > 0 then fail(op, "the producer's pipelined loop carries values") end
            local lb, ub = k_blocks(op, env)
            tl.cutlass.for_range(lb, ub, { st }, function(kk)
              vmap[b:arg(1):id()] = kk
              pipe:producer_acquire(st)
              env.full, env.stage = pipe:full_barrier(st), st:index()
              lower_block(b, env)
              env.full, env.stage = nil, nil
              pipe:producer_commit(st)
              st:advance()
            end)
          end
          env.persistent = persistent_loop(env, { st })
          tl.elect_one(function()
            -- the first TMA of each operand need not wait for its map to be fetched
            for _, e in ipairs(P.list) do
              if e.lowered_map and e.ring_loaded then tl.tensor_map_prefetch(args[e.lowered_map]) end
            end
            lower_block(a:region(1):entry(), env)
            pipe:producer_tail(st)
          end)
        end)
      end)
    end
    -- }===

    -- {=== a consumer (one warpgroup: 64 rows of the accumulator)
    local regs = #consumers == 1 and 240 or 232
    -- replicas (tileas.replica, tileas-materialize-agents): one code on all their
    -- warpgroups (stdlib/gemm.lua's cooperative consumers), the replica index
    -- the warpgroup's. The code is the last replica's: the passes may fold the
    -- others' (an index of 0 added goes), not its marked index. Replicas were
    -- copies that differed in their index only, and every pass since kept what
    -- each computes, so the last one's code with another index is that replica.
    local function replicas_of(list)
      local n = #list
      if n < 2 then return nil end
      for i, ag in ipairs(list) do
        local rep = ag.op:attr "tileas.replica"
        if not rep or rep[1] ~= i - 1 or rep[2] ~= n or ag.first ~= list[1].first + 4 * (i - 1) then return nil end
      end
      return list[n]
    end
    -- consumer agent ag (or `count` replicas from warp `first`, ag's code)
    local function consumer_agent(ag, count, first)
      local env = { agent = ag }
      local a = ag.op
      local name = (#consumers == 1 or count > 1) and "consumer" or ("consumer" .. ag.index)
      local place = { first = first or ag.first, warps = 4 * count }
      k:agent(name, { warps = 4 * count, warp_id = warp_id(place, 4 * count) }, function(ta)
        tl.setmaxnreg(regs, "inc")
        k:async_exec("consumer", { first_warp = place.first, warps = 4 * count }, function()
          if count > 1 then env.replica = ta.warp_id() // 4 end -- this warpgroup's replica
          local wg = env.replica or ag.index
          local t = ta.thread_id() % 128
          local f = tl.wgmma_fragment(t)
          env.f = f
          local st = pipe:consumer_start()
          env.program_id = program_id
          env.persistent = persistent_loop(env, { st })
          env.copy = function(op) fail(op, "a copy in a consumer agent is not lowered yet") end

          -- descriptors of ring r (or its slice) at stage s, k step kk
          local function desc(r, s, kk, kstep, kmajor)
            local ring = r.ring or r
            local off = r.offsets or { 0, 0 }
            if kmajor then -- rows of K: a k step moves along the row
              return tl.wgmma_desc(ring.smem:ptr(s, off[1], off[2] + kk * kstep), { swizzle = ring.swizzle, sbo = 1024 })
            end
            -- MN-major, boxes of {k rows, 64}: 16 k rows a step, 64-wide atoms a box apart
            local row = off[2] // ring.box[2] * ring.shape[1] + off[1] + kk * 16
            return tl.wgmma_desc(ring.smem:ptr(s, row, 0),
                                 { swizzle = ring.swizzle, lbo = ring.shape[1] * ring.box[2] * elem_bytes(ring.elem), sbo = 1024 })
          end
          local wtype = { [tl.bf16:id()] = "bf16", [tl.f16:id()] = "f16" }

          -- the dot of one k block: wgmma_fence, K / 16 wgmmas, commit
          env.dot = function(op)
            local ra, rb = get(op:operand(1), op), get(op:operand(2), op)
            if getmetatable(ra) ~= Ring or getmetatable(rb) ~= Ring then fail(op, "dot operands must be rings (shared tiles the producer fills)") end
            local at = op:attrs()
            local ai = tile_of(op:operand(1))
            local ta_ = wtype[ai.elem:id()]
            if not ta_ then fail(op, "dots of %s are not lowered yet (bf16 and f16)", tostring(ai.elem)) end
            local K = ai.shape[at.transpose_a and 1 or 2]
            local acc = env.acc_in
            local opts = { type_a = ta_, type_b = ta_, trans_a = at.transpose_a or nil, trans_b = not at.transpose_b or nil,
                           scale_a = at.negate_a and -1 or nil, scale_b = at.negate_b and -1 or nil }
            tl.wgmma_fence()
            for kk = 0, K // 16 - 1 do
              acc = tl.wgmma(acc, desc(ra, env.stage, kk, 16, not at.transpose_a),
                             desc(rb, env.stage, kk, 16, at.transpose_b), opts)
            end
            tl.wgmma_commit()
            vmap[op:result(1):id()] = { vec = acc }
          end

          -- (a cluster's pipeline counts every thread's release, as stdlib/gemm.lua's)
          local function release(s)
            if nctas > 1 then pipe:consumer_release(s) return end
            tl.elect_one(function() pipe:consumer_release(s) end)
          end

          -- the pipelined loop: the accumulator carried as vector<N/2 x f32>
          env.pipelined_for = function(op)
            local b = op:region(1):entry()
            if op:nresults() ~= 1 then fail(op, "a consumer's pipelined loop carries one accumulator, got %d values", op:nresults()) end
            local shape = cta_part(tile_of(op:result(1)), nctas) -- the CTA's block (wgmma's N)
            if layout_kind(op:result(1)) ~= "mma" or shape[1] ~= 64 then fail(op, "the carried value must be a 64-row mma accumulator") end
            local n = shape[2] // 2
            local init = get(op:operand(4), op)
            -- a zero accumulator starts from zeros, as stdlib/gemm.lua's does
            local zero = init.splat and const_int(init.splat) == 0
            local function vec_of(x)
              if x.vec then return x.vec end
              local vals = {}
              for i = 0, n - 1 do vals[i + 1] = x:at(i) end
              return tl.vector_of(tl.f32, vals)
            end
            local yield = b:terminator()
            local function step(kk, acc, s)
              vmap[b:arg(1):id()], vmap[b:arg(2):id()] = kk, { vec = acc }
              env.acc_in, env.stage = acc, s
              lower_block(b, env)
              local out = get(yield:operand(1), yield)
              if not out.vec then fail(yield, "the pipelined loop must yield the dot's result") end
              return out.vec
            end
            local lb, ub = k_blocks(op, env)
            local function mainloop()
              return G.mainloop(tl, pipe, st, lb, ub, function() return zero and tl.zeros(tl.f32, n) or vec_of(init) end,
                                function(acc, s, kk) return step(kk, acc, s) end, release)
            end
            local acc = mainloop()
            if env.work and S then -- StreamK: the sum of the tile's splits, on its final split (env.final)
              acc, env.final = G.fixup(tl, S.c, { ws = args[P.lowered_workspace] }, env.work, acc,
                                       env.work:m(), env.work:n(), wg, t)
            end
            vmap[op:result(1):id()] = frag(tl.f32, n, function(i) return tl.extract(acc, i) end)
          end

          -- values in the mma layout: rows and columns of this thread's elements
          -- (on a cluster, of this CTA's block of the tile)
          local function tile_rows_cols(tile_coord_m, tile_coord_n, ri)
            local _, offs = block_offsets(ri)
            return plus(tile_coord_m * ri.shape[1] + f.row, offs[1]), plus(tile_coord_n * ri.shape[2] + f.col, offs[2])
          end

          env.tiled_load = function(op)
            local e = P.by_arg[op:operand(1):id()]
            local ri = tile_of(op:result(1))
            local kind = layout_kind(op:result(1))
            if kind == "slice" and nctas > 1 then
              fail(op, "tiled_load of a slice on a cluster is not lowered yet")
            elseif kind == "slice" and #ri.shape == 1 and ri.layout.parent and ri.layout.parent.kind == "mma" then
              local along = ri.layout.dim == 0 and 2 or 1 -- slice dim 0 removed: a row over N
              local base = get(op:operand(2), op) * ri.shape[1] + (along == 2 and f.col or f.row)
              vmap[op:result(1):id()] = line(ri.elem, along, function(off) return load_at(e, op, { base + off }) end)
            elseif kind == "mma" and #ri.shape == 2 then
              local r0, c0 = tile_rows_cols(get(op:operand(2), op), get(op:operand(3), op), ri)
              vmap[op:result(1):id()] = frag(ri.elem, ri.shape[1] * ri.shape[2] // 128, function(i)
                local dr, dc = f.offset(i)
                return load_at(e, op, { r0 + dr, c0 + dc })
              end)
            else
              fail(op, "tiled_load of a tile of layout '%s' in a consumer is not lowered yet", tostring(kind))
            end
          end

          env.tiled_store = function(op)
            local e = P.by_arg[op:operand(1):id()]
            local tile = op:operand(op:noperands())
            local ri = tile_of(tile)
            local shape, offs = block_offsets(ri) -- this CTA's block of the tile
            local x = get(tile, op)
            if not is_frag(x) and not x.vec then fail(op, "tiled_store of a tile not in the mma layout is not lowered yet") end
            if x.vec then
              local vec = x.vec
              x = frag(tl.f32, shape[2] // 2, function(i) return tl.extract(vec, i) end)
            end
            local tm, tn = get(op:operand(2), op), get(op:operand(3), op)
            if e.lowered_map and elem_bytes(ri.elem) == 2 then
              staging = staging or k:shared(ri.elem, { #consumers, shape[2] // 64, 64, 64 }, { align = 1024, swizzle = 128 })
              local wide = x.trunc_of or x
              local vals = {}
              for i = 0, shape[2] // 2 - 1 do vals[i] = wide:at(i) end
              G.store_fragment(tl, { bn = shape[2], out = ri.elem, staging = staging, map = args[e.lowered_map],
                                     warpgroup = wg, barrier = 1 + wg, thread = t,
                                     coords = function(ch)
                                       return { plus(tm * ri.shape[1], offs[1]), plus(tn * ri.shape[2] + ch * 64, offs[2]) }
                                     end },
                                 vals)
              env.tma_stored = true
            else
              local r0, c0 = tile_rows_cols(tm, tn, ri)
              for i = 0, shape[2] // 2 - 1 do
                local dr, dc = f.offset(i)
                store_at(e, op, { r0 + dr, c0 + dc }, x:at(i))
              end
            end
          end

          lower_block(a:region(1):entry(), env)
          -- the last stores must have read the staging buffer before the CTA leaves
          if env.tma_stored then tl.if_(t:eq(0), function() tl.bulk_wait(0, { read = true }) end) end
        end)
      end)
    end
    -- }===

    for _, op in ipairs(pre) do
      if op:name() ~= "tileas.alloc_tensor" then at_loc(op, lower_op, op, { program_id = program_id }) end
    end
    for _, r in ipairs(rings) do vmap[r.value:id()] = r end
    producer_agent(producer)
    local template = replicas_of(consumers)
    if template then consumer_agent(template, #consumers, consumers[1].first)
    else for _, c in ipairs(consumers) do consumer_agent(c, 1) end end
    if nctas > 1 then tl.cluster_sync() end -- no CTA leaves while a peer may still write to it
  end)

  -- the lowered kernel replaces the program
  kop:erase()
  k.op:set_attr("sym_name", name)
  k.op:set_attr("tileas.params", P.launch)
  k.op:set_attr("tileas.launch", { persistent = persistent, cluster = nctas > 1 and nctas or nil,
                                   schedule = S and S.kind or nil, programs = S and S.programs or nil,
                                   workers = S and S.c.grid or nil, workspace_bytes = S and S.workspace_bytes or nil })
end

-- }=====================================================================

-- convert-tileas-to-cutlass over every kernel of the module that is a tile
-- program (has agents or tensor parameters).
function M.convert(module)
  local tl = require "tilua"
  local G = require "tilua.stdlib.gemm"
  local errors, changed = {}, false
  for _, kop in ipairs(module:region(1):entry():ops()) do
    if kop:name() == "tile.kernel" then
      local tile_program = false
      for _, a in ipairs(kop:region(1):entry():args()) do tile_program = tile_program or is_tensor_type(a:type()) end
      kop:walk(function(op) if op:name():match "^tileas%." then tile_program = true return false end end)
      if tile_program then
        -- the builders make IR in the default context: the module's, while lowering
        local saved = core.default_context()
        core.default_context(kop:context())
        local ok, err = xpcall(lower_kernel, function(e)
          return getmetatable(e) == Failure and e or debug.traceback(tostring(e), 2)
        end, tl, G, kop)
        core.default_context(saved)
        if not ok then
          if getmetatable(err) == Failure then errors[#errors + 1] = { op = err.op, message = err.message }
          else errors[#errors + 1] = { op = kop, message = "convert-tileas-to-cutlass: " .. tostring(err) } end
          break
        end
        changed = true
      end
    end
  end
  return { errors = errors, changed = changed }
end

return M
