-- tilua.emulate.models.tileas: the emulator's model of tile programs (the tileas
-- dialect, docs/tileprog.md), a model of emulate/models/init.lua (docs/protocol.md,
-- "Tile programs").
--
-- A program is a role: each CTA of the emulation runs one program (a
-- persistent one: the programs the scheduler hands its worker), as one actor,
-- or after tileas-materialize-agents one actor per tileas.agent (the producer,
-- the consumers). Tiles are whole values: { shape, elem, v = the elements,
-- row-major } (v is absent in protocol-only runs: the checker's, where tiles
-- keep only their shapes and footprints, as bulk copies move no bytes there; a
-- number extracted from such a tile reads 0).
--
-- Global tensors: a !tileas.tensor parameter takes { data = bytes (or bytes =
-- n), shape = {outermost .. innermost} [, strides = {elements}] }, as a tensor
-- map does (emulate/models/mma.lua). tiled_load reads its padding (0) out of bounds, tiled_store
-- drops what falls out; both go through the race check of global memory row by
-- row: two programs storing one element with no order between them is a race.
--
-- Program ids: without a persistent loop, CTA c runs program (c mod gx, c //
-- gx mod gy, ...) of the grid of programs; with one (tileas-dynamic-persistent:
-- is_valid_program_id, cancel_next_program_id), CTA c is a worker that starts
-- at the linear program id c, and its k-th claim is c + k * workers (the
-- static persistent scheduler that convert-tileas-to-cutlass lowers it to);
-- with claims = "dynamic" it claims the next id from the scheduler's counter
-- instead (a step of its own: the checker explores which worker gets which
-- program); every agent of a CTA walks the same sequence: the first agent
-- claims, the others take its claims.
--
-- Rings (tileas-materialize-agents): an alloc_tensor with `tileas.stages = S`
-- is S stages in shared memory, handed from the producer to the consumers
-- implicitly at this level: in iteration j of a loop marked tileas.pipeline
-- (counted across the agent's whole run), the producer's copy into a ring
-- waits until every consumer released stage j mod S of its previous lap,
-- writes it and marks it full; a consumer's first read of the ring in its
-- iteration j waits until stage j mod S is full; each consumer releases the
-- stage of every ring when its iteration ends. Those are the handoffs
-- convert-tileas-to-cutlass makes explicit (one cutlass.pipeline), modelled
-- with a full and an empty mbarrier per stage and ring, so the phase, race
-- and deadlock checks are the lowered level's.

local lanes = require "tilua.emulate.lanes"
local address = require "tilua.emulate.address"
local values = require "tilua.emulate.values"
local report = require "tilua.emulate.report"
local sync = require "tilua.emulate.sync"
local mma = require "tilua.emulate.models.mma"
local slice = require "tilua.emulate.models.tileas_slice"

local TILE = { __name = "tile" }
local function is_tile(x) return getmetatable(x) == TILE end

local uniform = lanes.uniform
local violation = report.violation
local SHARED_BASE = address.SHARED_BASE
local RING_BARS = SHARED_BASE + (1 << 31) -- the rings' implied full / empty barriers

local handlers, D = {}, {}
local TA = { handlers = handlers, decoders = D, kernel_decoders = {}, arg_kinds = {} }

do
  local codecs = {} -- type id -> codec (false: not held)
  local function codec(t)
    local c = codecs[t:id()]
    if c == nil then
      c = values.elem_codec(t) or false
      codecs[t:id()] = c
    end
    return c or nil
  end
  -- the shape and element type of a tile type
  local function tile_type(t)
    local info = t:info()
    if info.kind ~= "tile" then return nil end
    return { shape = info.shape, elem = info.elem, space = info.space, n = info.elements, bytes = info.bytes }
  end
  local function count(shape)
    local n = 1
    for _, d in ipairs(shape) do n = n * d end
    return n
  end
  -- the ops a tile op counts against max_ops (Run:tick): its rows (the
  -- elements of the innermost dim are one op), so a protocol-only run of a
  -- large tile program stays within the budget that bounds loops
  local function rows_of(shape) return count(shape) // shape[#shape] end
  local function new_tile(shape, elem, v) return setmetatable({ shape = shape, elem = elem, v = v }, TILE) end

  -- {=== decoding

  local function mark(d) d.tileas = d.tileas or { agents = 0, consumers = 0, rings = {} } return d.tileas end
  local function result_tile(rec, op)
    if op:nresults() > 0 then rec.tt = tile_type(op:result(1):type()) end
  end
  for _, name in ipairs { "tileas.get_program_id", "tileas.num_programs", "tileas.splat", "tileas.iota", "tileas.dot",
                          "tileas.math", "tileas.reduce", "tileas.broadcast", "tileas.expand_dim",
                          "tileas.extract_slice", "tileas.extract", "tileas.convert_layout", "tileas.copy", "tileas.transpose",
                          "tileas.tiled_load", "tileas.tiled_store", "tileas.agent_switch" } do
    D[name] = function(rec, op, d)
      mark(d)
      result_tile(rec, op)
    end
  end
  D["tileas.is_valid_program_id"] = function(_, _, d) mark(d).persistent = true end
  D["tileas.cancel_next_program_id"] = function(_, _, d) mark(d).persistent = true end
  D["tileas.alloc_tensor"] = function(rec, op, d)
    local t = mark(d)
    local tt = tile_type(op:result(1):type())
    local stages = op:attr "tileas.stages"
    rec.tt, rec.stages, rec.per_program = tt, stages, op:attr_or_default "tileas.per_program"
    rec.stage_bytes = tt.bytes
    d.smem = (d.smem + 1023) // 1024 * 1024
    rec.offset, rec.size = d.smem, rec.stage_bytes * (stages or 1)
    d.smem = d.smem + rec.size
    d.allocs[#d.allocs + 1] = rec
    if stages then
      rec.ring = #t.rings
      t.rings[#t.rings + 1] = rec
    end
  end
  D["tileas.agent"] = function(rec, op, d)
    local t = mark(d)
    rec.first, t.agents = t.agents, t.agents + 1
    rec.kind = op:attr_or_default "kind"
    if rec.kind == "consumer" then t.consumers = t.consumers + 1 end
    local pp = op:attr "tileas.pingpong"
    if pp then rec.pingpong, t.pingpong = pp[1], true end
  end
  -- the persistent loop (tileas-dynamic-persistent): a program an iteration
  D["scf.while"] = function(rec, op)
    for _, o in ipairs(op:region(1):entry():ops()) do
      if o:name() == "tileas.is_valid_program_id" then rec.name = "tileas.program_loop" end
    end
  end
  D["scf.for"] = function(rec, op)
    local p = op:attr_or_default "tileas.pipeline" -- (its stages read by its row)
    if p then rec.name, rec.stages = "tileas.pipelined_for", p.stages end
  end
  -- elementwise arith ops on tiles: their own handler
  local ELEMENTWISE = { "addi", "subi", "muli", "addf", "subf", "mulf", "divf", "maximumf", "minimumf", "negf",
                        "cmpf", "cmpi", "andi", "ori", "select", "extf", "truncf" }
  for _, n in ipairs(ELEMENTWISE) do
    D["arith." .. n] = function(rec, op)
      local tt = op:nresults() > 0 and tile_type(op:result(1):type())
      if tt then rec.name, rec.fn, rec.tt = "tileas.elementwise", n, tt end
    end
  end
  local on_start, state_parts, min_phases -- the hooks of a tile program's decoded kernel (below)
  TA.kernel_decoders[1] = function(dk, kop, d)
    local t = d.tileas
    if not t then return end
    dk.tileas = t
    -- one actor per agent (one per program before there are agents)
    dk.warps = math.max(1, t.agents)
    dk.cluster = 1 -- a program on a cluster is one program here (its CTA split is the lowering's)
    dk.cluster_local = true -- the CTAs share no synchronization object (but dynamic claims: on_start)
    dk.arg_names = kop:attr "arg_names"
    dk.on_start, dk.state_parts, dk.min_phases = on_start, state_parts, min_phases
    slice.mark(dk.body) -- the ops whose elements a protocol-only run computes (rec.exact)
  end

  -- }===

  -- {=== launch: the grid of programs, the workers, the tensors

  -- The run's shape: CTA c runs program c of the grid of programs (o.grid), or
  -- is worker c of a persistent loop (o.workers of them); arguments by name
  -- (arg_names) or position; warp 0's role the program.
  function on_start(self)
    local k = self.k
    local o = self.o
    local g = o.grid or 1
    if type(g) == "number" then g = { g } end
    local programs = { g[1] or 1, g[2] or 1, g[3] or 1 }
    local n = programs[1] * programs[2] * programs[3]
    self.programs, self.nprograms = programs, n
    local ctas = n
    if k.tileas.persistent then ctas = math.min(o.workers or n, n) end
    if o.claims == "dynamic" then -- the scheduler's counter: the next id to hand out, shared by the workers
      self.claimed, k.cluster_local = ctas, false
    end
    local args = o.args
    if args and args[1] == nil and next(args) ~= nil and k.arg_names then -- by name
      local pos = {}
      for i, nm in ipairs(k.arg_names) do pos[i] = args[nm] end
      args = pos
    end
    self.o = setmetatable({ grid = ctas, args = args, roles = { [0] = "program" } }, { __index = o })
  end

  -- a !tileas.tensor parameter takes { data | bytes, shape [, strides] } (allocated
  -- first: order 1)
  TA.arg_kinds[1] = { name = "tensor", order = 1, match = function(_, t)
    local info = t:info()
    if info.kind ~= "dialect" or info.name ~= "tileas.tensor" then return nil end
    return { elem = info.params[1], rank = info.params[2] }
  end, setup = function(R, i, p, a)
    local elem = p.info.elem
    if type(a) ~= "table" or not a.shape then
      error(("emulate: argument %d (%s) must be a tensor { data = bytes, shape = {...} }"):format(i, p.type), 0)
    end
    if #a.shape ~= p.info.rank then
      error(("emulate: argument %d: a tensor of rank %d for %s"):format(i, #a.shape, p.type), 0)
    end
    local c = codec(elem) or error(("emulate: tensors of %s are not modelled"):format(tostring(elem)), 0)
    local base, nb = R:alloc_global(a.data or a.bytes or 0)
    R.buffers[i] = { base = base, n = nb }
    local strides = {} -- elements, outermost first
    if a.strides then
      for d = 1, #a.shape do strides[d] = a.strides[d] end
    else
      local s = 1
      for d = #a.shape, 1, -1 do
        strides[d] = s
        s = s * a.shape[d]
      end
    end
    return { kind = "tensor", base = base, shape = a.shape, strides = strides, elem = elem, codec = c, arg = i }
  end }

  -- the scheduler's counter and the CTAs' claims are state (the checker's hash)
  function state_parts(self)
    if not self.claimed then return {} end
    local parts = { "p" .. self.claimed }
    for _, cta in ipairs(self.ctas) do parts[#parts + 1] = #(cta.claims or {}) end
    return parts
  end

  -- }===

  -- {=== program ids

  local DIMS = { x = 1, y = 2, z = 3 }
  local function program_of(R, q, d)
    local p = R.programs
    if d == 1 then return q % p[1] end
    if d == 2 then return q // p[1] % p[2] end
    return q // (p[1] * p[2])
  end
  handlers["tileas.get_program_id"] = function(R, W, rec)
    local d = DIMS[rec.op:attr "dim"]
    -- a persistent loop's start: the worker's linear program id (the loop
    -- divides it by num_programs)
    if R.k.tileas.persistent then return { d == 1 and W.cta.id or 0 } end
    return { program_of(R, W.cta.id, d) }
  end
  handlers["tileas.num_programs"] = function(R, _, rec) return { R.programs[DIMS[rec.op:attr "dim"]] } end
  handlers["tileas.is_valid_program_id"] = function(R, _, rec, ins)
    local q = uniform(rec, ins[1], "program id")
    return { (q >= 0 and q < R.nprograms) and 1 or 0 }
  end
  handlers["tileas.cancel_next_program_id"] = function(R, W, rec)
    local cta = W.cta
    W.nclaims = (W.nclaims or 0) + 1
    local k = W.nclaims
    if R.o.claims ~= "dynamic" then -- the lowering's static persistent schedule: worker c's k-th is c + k * workers
      return { cta.id + k * R.grid }
    end
    cta.claims = cta.claims or {}
    if W.w == 0 then -- the first agent claims (a step on the scheduler's counter: the workers' order matters)
      R:request(W, rec, function() return true end, function()
        cta.claims[k] = R.claimed
        R.claimed = R.claimed + 1
      end, function() return "claims the next program id" end, "g0", "w") -- g0: a global word of its own (it orders the CTAs)
    else -- the others take its claim (a wait nothing can undo once it passes)
      R:request(W, rec, function() return cta.claims[k] ~= nil end, function() end,
        function() return ("waits for the CTA's claim %d of a program id"):format(k) end, "c" .. cta.id, "re")
    end
    return { cta.claims[k] }
  end

  -- }===

  -- {=== agents

  local end_program, program_period -- (below, with the rings)
  handlers["tileas.agent"] = function(R, W, rec, _, ctx)
    if W.w ~= rec.first then return {} end
    local old, oldg = W.role, W.grp
    W.role, W.grp = rec.kind, rec.first
    W.pingpong = rec.pingpong
    W.label = ("%s agent %d%s"):format(rec.kind, rec.first, R.grid > 1 and (" (CTA %d)"):format(W.cta.id) or "")
    R:exec_block(W, rec.regions[1][1], {}, ctx)
    if not R.k.tileas.persistent then end_program(R, W, rec) end -- (one program: the agent's run)
    W.role, W.grp = old, oldg
    return {}
  end
  -- the persistent loop: scf.while, each program's end ends its rings' periods
  -- Ping-pong consumers (tileas.pingpong = [g, 2]): consumer g runs the CTA's programs
  -- n = g mod 2 only; a program it skips moves its pipelined iterations on by the other's
  -- in it, once the other's loop of it is done (the lowering's mainloop turn, a seq_bar,
  -- comes once it is issued: here after its releases), so it reads and releases (alone:
  -- the empty barriers count one arrival) the stages of its own programs.
  local function skip_program(R, W, rec, n)
    if R.o.claims == "dynamic" then violation("model", "ping-pong consumers with dynamic claims are not modelled") end
    local cta = W.cta
    R:request(W, rec, function() return cta.pp_iters and cta.pp_iters[n] ~= nil end, function() end,
      function() return ("waits for the other ping-pong consumer's mainloop of program %d"):format(n) end, "p" .. cta.id, "re")
    W.pipe_j = (W.pipe_j or -1) + cta.pp_iters[n]
    W.nclaims = (W.nclaims or 0) + 1
    return { cta.id + W.nclaims * R.grid } -- (cancel_next_program_id's)
  end
  handlers["tileas.program_loop"] = function(R, W, rec, ins, ctx)
    local cur, n = ins, 0
    local pp = R.k.tileas.pingpong
    while true do
      local c = R:exec_block(W, rec.regions[1][1], cur, ctx)
      local fwd = { table.unpack(c, 2) }
      if uniform(rec, c[1], "condition") == 0 then return fwd end
      if pp and W.pingpong and n % 2 ~= W.pingpong then
        cur = skip_program(R, W, rec, n)
      else
        W.pp_n = n -- (the program whose loop tileas.pipelined_for records)
        cur = R:exec_block(W, rec.regions[2][1], fwd, ctx)
        end_program(R, W, rec)
      end
      n = n + 1
    end
  end
  handlers["tileas.agent_switch"] = function(R, W, rec, _, ctx)
    R:exec_block(W, rec.regions[1][1], {}, ctx)
    return {}
  end
  -- (tileas.pragma, a scheduler knob with no effect, which lowered kernels
  -- keep: models/nvvm.lua)

  -- }===

  -- {=== shared tensors and rings

  -- the stage barriers of ring r: full (count 1: the producer's copy) and
  -- empty (count: the consumer agents), inited with the CTA (its start actor)
  local function ring_bar(R, W, ring, s, empty)
    local cta = W.cta
    local addr = RING_BARS + 8 * (2 * (ring.ring * 64 + s) + empty)
    if not cta.rings_inited then
      cta.rings_inited = true
      local starter = { cta = cta, actor = cta.start }
      local function init(addr, n, loc, name)
        starter.vc = { [cta.start] = 0 } -- at the start (every actor of the CTA is after it)
        R:init_barrier(starter, addr, n, loc, name)
      end
      for _, rg in ipairs(R.k.tileas.rings) do
        for st = 0, rg.stages - 1 do
          local base = RING_BARS + 8 * 2 * (rg.ring * 64 + st)
          init(base, 1, rg.loc, ("the full barrier of stage %d of the ring at %s"):format(st, rg.loc))
          init(base + 8, R.k.tileas.pingpong and 1 or math.max(1, R.k.tileas.consumers), rg.loc,
            ("the empty barrier of stage %d of the ring at %s"):format(st, rg.loc))
        end
      end
    end
    return addr
  end
  handlers["tileas.alloc_tensor"] = function(_, _, rec)
    return { { kind = "stensor", rec = rec, addr = SHARED_BASE + rec.offset } }
  end
  local function stensor(x) return type(x) == "table" and x.kind == "stensor" end

  -- The pipelined iteration W is in: { j = its index across the run, waited = {[ring] = true} }.
  handlers["tileas.pipelined_for"] = function(R, W, rec, ins, ctx)
    local lb, ub, step = uniform(rec, ins[1], "lower bound"), uniform(rec, ins[2], "upper bound"),
      uniform(rec, ins[3], "step")
    local iters = { table.unpack(ins, 4) }
    local body = rec.regions[1][1]
    local outer = W.pipe
    local consumer = R.k.tileas and W.role == "consumer" -- (a lowered kernel may keep the attribute)
    for i = lb, ub - 1, step do
      W.pipe_j = (W.pipe_j or -1) + 1
      local it = { j = W.pipe_j }
      W.pipe = it
      local a = { i }
      for k2, v in ipairs(iters) do a[k2 + 1] = v end
      iters = R:exec_block(W, body, a, ctx)
      if consumer then -- the consumer releases the stage of every ring
        for _, rg in ipairs(R.k.tileas.rings) do -- one arrival each: an arrival commutes with the others' steps
          if rg.per_program then goto next_ring end -- (released when the program ends)
          local addr = ring_bar(R, W, rg, it.j % rg.stages, 1)
          R:request(W, rec, function() return true end, function()
            R:arrive(R:bar(W, addr, rec), 1, W.actor, W.vc, rec)
            W.vc[W.actor] = W.vc[W.actor] + 1
          end, function() return ("releases stage %d of the ring at %s"):format(it.j % rg.stages, rg.loc) end,
          W.cta.id .. ":" .. addr, "am", function() return sync.completes_on(W.cta.bars[addr], 1) end)
          ::next_ring::
        end
      end
    end
    W.pipe = outer
    W.laps = ((W.pipe_j or -1) + 1) // rec.stages -- across the run (a persistent loop runs it again)
    if consumer and W.pingpong and W.pp_n then -- (the other ping-pong consumer skips the program by it)
      local cta, n, count = W.cta, W.pp_n, math.max(0, (ub - lb + step - 1) // step)
      R:request(W, rec, function() return true end, function()
        cta.pp_iters = cta.pp_iters or {}
        cta.pp_iters[n] = count
      end, function() return ("ends its mainloop of program %d (ping-pong)"):format(n) end, "p" .. cta.id, "w")
    end
    return iters
  end
  -- the laps of a pipelined loop's ring (iterations / stages, per agent)
  -- in the CTA that ran the most: before tileas-materialize-agents makes the
  -- rings, what their barriers' phases will count. Every CTA runs the same
  -- ring code, so a ring that wraps twice in one exercises every lap's phase;
  -- programs with fewer iterations (a causal program's first row blocks)
  -- cannot wrap it twice on any input. (The implied ring barriers' own
  -- counts, m, are those of the fewest.) The inputs are chosen so that it is 2.
  function min_phases(self, m)
    local most
    for _, W in ipairs(self.warps) do
      if W.laps and (not most or W.laps > most) then most = W.laps end
    end
    if most then return most end
    return m
  end

  -- A ring filled once a program (tileas.per_program): the producer's n-th
  -- copy into it fills stage n mod S (after every consumer released its
  -- previous lap); a consumer's reads in its n-th program wait for that stage
  -- once, and the program's end releases it (waiting for it first where the
  -- program did not read it).
  function program_period(W, ar)
    W.prog_reads, W.prog_waited = W.prog_reads or {}, W.prog_waited or {}
    return W.prog_reads[ar] or 0
  end
  function end_program(R, W, rec)
    if W.role ~= "consumer" then return end
    for _, ar in ipairs(R.k.tileas.rings) do
      if ar.per_program then
        local n = program_period(W, ar)
        local s = n % ar.stages
        if not W.prog_waited[ar] then
          R:wait(W, rec, ring_bar(R, W, ar, s, 0), (n // ar.stages) & 1, n // ar.stages + 1,
            ("wait for stage %d of the ring at %s in program %d"):format(s, ar.loc, n))
        end
        local addr = ring_bar(R, W, ar, s, 1)
        R:request(W, rec, function() return true end, function()
          R:arrive(R:bar(W, addr, rec), 1, W.actor, W.vc, rec)
          W.vc[W.actor] = W.vc[W.actor] + 1
        end, function() return ("releases stage %d of the ring at %s (the program ends)"):format(s, ar.loc) end,
        W.cta.id .. ":" .. addr, "am", function() return sync.completes_on(W.cta.bars[addr], 1) end)
        W.prog_reads[ar], W.prog_waited[ar] = n + 1, nil
      end
    end
  end

  -- the value of a tile operand: a register tile, or a shared tensor read
  -- (a ring: the stage of the reader's pipelined iteration, waited for first)
  local function read_tile(R, W, rec, x)
    if is_tile(x) then return x end
    if not stensor(x) then violation("model", ("%s at %s: an operand is not a tile"):format(rec.name, rec.loc)) end
    local ar = x.rec
    local cta = W.cta
    cta.stensors = cta.stensors or {}
    local addr, key = x.addr, ar.id
    if ar.per_program then
      local n = program_period(W, ar)
      local s = n % ar.stages
      if not W.prog_waited[ar] then
        W.prog_waited[ar] = true
        R:wait(W, rec, ring_bar(R, W, ar, s, 0), (n // ar.stages) & 1, n // ar.stages + 1,
          ("wait for stage %d of the ring at %s in program %d"):format(s, ar.loc, n))
      end
      addr, key = addr + s * ar.stage_bytes, ar.id .. ":" .. s
    elseif ar.stages then
      local it = W.pipe
      if not it then
        violation("model", ("%s at %s reads the ring at %s outside a loop marked tileas.pipeline"):format(rec.name, rec.loc, ar.loc))
      end
      local s = it.j % ar.stages
      it.waited = it.waited or {}
      if not it.waited[ar] then
        it.waited[ar] = true
        R:wait(W, rec, ring_bar(R, W, ar, s, 0), (it.j // ar.stages) & 1, it.j // ar.stages + 1,
          ("wait for stage %d of the ring at %s in round %d"):format(s, ar.loc, it.j // ar.stages))
      end
      addr, key = addr + s * ar.stage_bytes, ar.id .. ":" .. s
    end
    -- a stage (a shared tensor) is read and written whole at this level: one
    -- unit of the race check, its first byte
    R:shadow_read(cta, W.actor, W.vc, addr, 1, rec.loc)
    return cta.stensors[key] or new_tile(ar.tt.shape, ar.tt.elem, nil)
  end

  handlers["tileas.copy"] = function(R, W, rec, ins)
    local src, dst = read_tile(R, W, rec, ins[1]), ins[2]
    if not stensor(dst) then violation("model", ("%s at %s: the destination is not a shared tensor"):format(rec.name, rec.loc)) end
    local ar, cta = dst.rec, W.cta
    cta.stensors = cta.stensors or {}
    if not ar.stages then
      R:shadow_write(cta, W.actor, W.vc, dst.addr, 1, rec.loc)
      cta.stensors[ar.id] = src
      return {}
    end
    local j
    if ar.per_program then -- the producer's n-th fill of the ring
      W.fills = W.fills or {}
      j = W.fills[ar] or 0
      W.fills[ar] = j + 1
    else
      local it = W.pipe
      if not it then
        violation("model", ("%s at %s fills the ring at %s outside a loop marked tileas.pipeline"):format(rec.name, rec.loc, ar.loc))
      end
      j = it.j
    end
    local s, round = j % ar.stages, j // ar.stages
    -- acquire: every consumer released the stage's previous lap
    R:wait(W, rec, ring_bar(R, W, ar, s, 1), (round & 1) ~ 1, round,
      ("acquire of stage %d of the ring at %s in round %d"):format(s, ar.loc, round))
    local full = ring_bar(R, W, ar, s, 0)
    R:request(W, rec, function() return true end, function()
      R:shadow_write(cta, W.actor, W.vc, dst.addr + s * ar.stage_bytes, 1, rec.loc)
      cta.stensors[ar.id .. ":" .. s] = src
      R:arrive(R:bar(W, full, rec), 1, W.actor, W.vc, rec)
      W.vc[W.actor] = W.vc[W.actor] + 1
    end, function() return ("fills stage %d of the ring at %s"):format(s, ar.loc) end, cta.id .. ":" .. full, "am",
    function() return true end)
    return {}
  end
  handlers["tileas.convert_layout"] = function(R, W, rec, ins) return { read_tile(R, W, rec, ins[1]) } end

  -- }===

  -- {=== global tensors

  local function tensor_of(rec, x)
    return report.argument(rec, x, "tensor", "the tensor operand is not a !tileas.tensor argument")
  end
  -- Every row (innermost dimension) of a tile at tile coordinates of tensor t:
  -- f(index of the row's first element in the tile, global address of its
  -- first in-bounds element or nil, first and last in-bounds column); with
  -- runs, f(...) once per run of rows (mma.row_runs_of_box).
  -- A tile of fewer dims than the tensor is its last dims (one element of each
  -- leading dim, at an element coordinate).
  local function tile_rows(t, shape, coords, f, runs)
    local eb, start, strides, box = t.codec.size, {}, {}, {}
    local lead = #t.shape - #shape
    for d = 1, #t.shape do
      box[d] = d > lead and shape[d - lead] or 1
      start[d], strides[d] = coords[d] * box[d], t.strides[d] * eb
    end
    if runs then return mma.row_runs_of_box(t.base, t.shape, strides, box, start, f) end
    mma.rows_of_box(t.base, t.shape, strides, box, start, f)
  end
  local function coords_of(rec, ins, from, to)
    local c = {}
    for i = from, to do c[#c + 1] = uniform(rec, ins[i], "tile coordinate") end
    return c
  end
  local function contiguous(t) return t.strides[#t.strides] == 1 end
  -- The race check's space of tensor t in run R: one a tensor (each is a
  -- buffer of its own, its accesses clipped to its shape: none reaches
  -- another's bytes), so that one tensor's small accesses (an i32 element)
  -- do not shrink another's granules, which start at MAX_TILE_GRANULE bytes
  -- (a row of 128 bf16 is one granule)
  local function space_of(R, t)
    local sps = R.tensor_spaces
    if not sps then
      sps = {}
      R.tensor_spaces = sps
    end
    local sp = sps[t.base]
    if not sp then
      sp = { is_global = true, shadow_w = {}, shadow_r = {}, granule = not R.fixed_granule and address.MAX_TILE_GRANULE or nil,
             unwritten = {} } -- (its reads before its first write: memory.lua)
      sps[t.base] = sp
    end
    return sp
  end
  -- Every in-bounds element of the tile of `shape` at tile coordinates of
  -- tensor t, read (or written: write) by warp W at op rec: the race check
  -- sees the access (a row at once where t's rows are contiguous), then
  -- f(the element's index in the tile, 1-based; its global address), where
  -- f is given (a protocol-only run has no elements to move: nil).
  local function each_element(R, W, rec, t, shape, coords, write, f)
    if #shape < #t.shape then -- a tile that leaves out leading dims: extents of 1 there
      local full = {}
      for _ = 1, #t.shape - #shape do full[#full + 1] = 1 end
      for _, x in ipairs(shape) do full[#full + 1] = x end
      shape = full
    end
    local eb = t.codec.size
    local step = t.strides[#t.strides] * eb
    local shadow = write and R.shadow_write or R.shadow_read
    if write == "reduce" then -- an atomic add: races with what is not one (memory.lua)
      shadow = function(M, ...) return M:shadow_write_reduce(...) end
    end
    local contig, sp = contiguous(t), space_of(R, t)
    if contig and not f then -- no values to move (a protocol-only run): the rows' footprints, a run at once
      return tile_rows(t, shape, coords, function(ga, lo, hi, rows, stride)
        shadow(R, sp, W.actor, W.vc, ga, (hi - lo + 1) * eb, rec.loc, rows, stride)
      end, true)
    end
    tile_rows(t, shape, coords, function(first, ga, lo, hi)
      if not ga then return end
      if contig then shadow(R, sp, W.actor, W.vc, ga, (hi - lo + 1) * eb, rec.loc) end
      for j = lo, hi do
        local a = ga + (j - lo) * step
        if not contig then shadow(R, sp, W.actor, W.vc, a, eb, rec.loc) end
        if f then f(first + j + 1, a) end
      end
    end)
  end

  handlers["tileas.tiled_load"] = function(R, W, rec, ins)
    local t = tensor_of(rec, ins[1])
    local tt = rec.tt
    local coords = coords_of(rec, ins, 2, #ins)
    local c, g, eb = t.codec, R.global, t.codec.size
    local v = (R.values or rec.exact) and {} or nil
    local pad = rec.op:attr "padding" -- (its row has no default: absent, an element out of bounds reads 0)
    if v then for i = 1, tt.n do v[i] = pad or 0 end end
    each_element(R, W, rec, t, tt.shape, coords, false, v and function(i, a)
      local u = 0
      for b = eb - 1, 0, -1 do u = (u << 8) | (g[a + b] or 0) end
      v[i] = c.dec(u)
    end)
    R:tick(rec, rows_of(tt.shape))
    if v then R.element_ops = R.element_ops + tt.n end
    return { new_tile(tt.shape, tt.elem, v) }
  end
  handlers["tileas.tiled_store"] = function(R, W, rec, ins)
    local t = tensor_of(rec, ins[1])
    local x = read_tile(R, W, rec, ins[#ins])
    local coords = coords_of(rec, ins, 2, #ins - 1)
    local c, g, eb = t.codec, R.global, t.codec.size
    local v = (R.values or rec.exact) and x.v -- (a protocol-only run stores bytes that a load in the slice reads)
    if v then R.element_ops = R.element_ops + #v end
    local reduce = rec.op:attr "reduce" -- "add": the element plus what the tensor holds
    each_element(R, W, rec, t, x.shape, coords, reduce and "reduce" or true, v and function(i, a)
      local x_i = v[i]
      if reduce then
        local old = 0
        for b = eb - 1, 0, -1 do old = (old << 8) | (g[a + b] or 0) end
        x_i = c.dec(old) + x_i
      end
      local u = c.enc(x_i)
      for b = 0, eb - 1 do
        g[a + b] = u & 0xff
        u = u >> 8
      end
    end)
    R:tick(rec, rows_of(x.shape))
    return {}
  end

  -- }===

  -- {=== compute

  -- a tile of the result type, element i = f(i), where the run computes
  -- elements (R.values, or rec in the slice: tileas_slice.lua) and every tile
  -- operand given has them; else its shape only
  local function result(R, rec, f, x, y, z)
    local tt = rec.tt
    local n = tt.n
    if not (R.values or rec.exact) or (is_tile(x) and not x.v) or (is_tile(y) and not y.v) or (is_tile(z) and not z.v) then
      return new_tile(tt.shape, tt.elem, nil)
    end
    R:tick(rec, rows_of(tt.shape))
    R.element_ops = R.element_ops + n
    local v = {}
    for i = 1, n do v[i] = f(i) end
    return new_tile(tt.shape, tt.elem, v)
  end
  local function round_of(rec) return (codec(rec.tt.elem) or { round = function(x) return x end }).round end
  -- result's first case, for a handler to take before it makes result's closure:
  -- a protocol-only run computes no elements of an op outside the slice
  local function no_values(R, rec) return not (R.values or rec.exact) end
  local function empty(rec) return { new_tile(rec.tt.shape, rec.tt.elem, nil) } end

  handlers["tileas.splat"] = function(R, _, rec, ins)
    local x = uniform(rec, ins[1], "value")
    local r = round_of(rec)(x)
    if no_values(R, rec) then return empty(rec) end
    return { result(R, rec, function() return r end) }
  end

  -- strides of a row-major shape (elements)
  local function strides_of(shape)
    local s, out = 1, {}
    for d = #shape, 1, -1 do
      out[d] = s
      s = s * shape[d]
    end
    return out
  end

  handlers["tileas.iota"] = function(R, _, rec)
    local shape = rec.tt.shape
    local st, dim = strides_of(shape), rec.op:attr "dim" + 1
    if no_values(R, rec) then return empty(rec) end
    return { result(R, rec, function(i) return (i - 1) // st[dim] % shape[dim] end) }
  end

  handlers["tileas.dot"] = function(R, W, rec, ins)
    local a, b = read_tile(R, W, rec, ins[1]), read_tile(R, W, rec, ins[2])
    local acc = read_tile(R, W, rec, ins[3])
    local op = rec.op
    local ta, tb = op:attr "transpose_a", op:attr "transpose_b"
    local sa = op:attr "negate_a" and -1 or 1
    local sb = op:attr "negate_b" and -1 or 1
    local M, N = rec.tt.shape[1], rec.tt.shape[2]
    local K = ta and a.shape[1] or a.shape[2]
    if not (R.values or rec.exact) or not (a.v and b.v and acc.v) then return { new_tile(rec.tt.shape, rec.tt.elem, nil) } end
    R:tick(rec, M)
    R.element_ops = R.element_ops + M * N * K
    local av, bv, cv = a.v, b.v, acc.v
    local fp8 = op:attr "fp8" -- 8-bit integer tiles holding fp8 bytes: their values
    if fp8 then
      local dec = values.fp8_dec[fp8]
      local function decoded(v)
        local out = {}
        for i = 1, #v do out[i] = dec(v[i] & 0xff) end
        return out
      end
      av, bv = decoded(av), decoded(bv)
    end
    local round = round_of(rec)
    local out = {}
    -- a[i, k] at ia + k * sak, b[k, j] at jb + k * sbk: as given, or transposed
    local sak, sbk = ta and M or 1, tb and 1 or N
    -- a row of a or a column of b that is all zeros (a tile past a tensor's
    -- edge) gives the sum the loop would: 0.0
    local function zero(v, base, stride)
      for k = 0, K - 1 do if v[base + k * stride] ~= 0 then return false end end
      return true
    end
    local zcol = {}
    for j = 0, N - 1 do zcol[j] = zero(bv, tb and j * K + 1 or j + 1, sbk) end
    for i = 0, M - 1 do
      local ia = ta and i + 1 or i * K + 1
      local zrow = zero(av, ia, sak)
      for j = 0, N - 1 do
        local s = 0.0
        if not (zrow or zcol[j]) then
          local jb = tb and j * K + 1 or j + 1
          for k = 0, K - 1 do s = s + av[ia + k * sak] * bv[jb + k * sbk] end
        end
        out[i * N + j + 1] = round(cv[i * N + j + 1] + sa * sb * s)
      end
    end
    return { new_tile(rec.tt.shape, rec.tt.elem, out) }
  end

  local MATH = require("tilua.emulate.mathref").fn -- the exact functions, rounded to the tile's type
  handlers["tileas.math"] = function(R, W, rec, ins)
    local x = read_tile(R, W, rec, ins[1])
    local f, round = MATH[rec.op:attr "fn"], round_of(rec)
    if no_values(R, rec) then return empty(rec) end
    return { result(R, rec, function(i) return round(f(x.v[i])) end, x) }
  end

  -- A scalar made of tile x's elements at rec (the slice's seeds): a tile of
  -- the slice without them is an op whose operands the slice does not follow
  -- (said, never read as 0)
  local function seed_elements(rec, x)
    if rec.exact and not x.v then
      violation("model", ("%s at %s: the elements of its tile were not computed (an op the checker's slice does not follow: models/tileas_slice.lua)")
        :format(rec.name, rec.loc))
    end
  end
  local REDUCE = { add = function(a, b) return a + b end, max = math.max, min = math.min }
  handlers["tileas.reduce"] = function(R, W, rec, ins)
    local x = read_tile(R, W, rec, ins[1])
    local dim = rec.op:attr "dim" + 1
    local f = REDUCE[rec.op:attr "kind"]
    local shape = x.shape
    local xs = strides_of(shape)
    local n = count(shape) // shape[dim]
    local round = (codec(x.elem) or { round = function(y) return y end }).round
    R:tick(rec, rows_of(shape))
    local function reduce_at(base) -- base: the element index with coordinate 0 along dim
      local s = x.v[base + 1]
      for k = 1, shape[dim] - 1 do s = round(f(s, x.v[base + k * xs[dim] + 1])) end
      return s
    end
    -- the out index o -> the element of x with dim's coordinate 0
    local function base_of(o)
      local rest, base = o, 0
      for d = #shape, 1, -1 do
        if d ~= dim then
          local c = rest % shape[d]
          rest = rest // shape[d]
          base = base + c * xs[d]
        end
      end
      return base
    end
    local exact = (R.values or rec.exact) and x.v
    if exact then R.element_ops = R.element_ops + count(shape) end
    if not rec.tt then -- a rank-1 tile: a scalar
      seed_elements(rec, x)
      return { exact and reduce_at(0) or 0 }
    end
    if not exact then return { new_tile(rec.tt.shape, rec.tt.elem, nil) } end
    local v = {}
    for o = 0, n - 1 do v[o + 1] = reduce_at(base_of(o)) end
    return { new_tile(rec.tt.shape, rec.tt.elem, v) }
  end

  -- element i of the result (row-major) -> element of x: dims of size 1 in x
  -- read index 0 (broadcast), `skip` a dim of the result x does not have (expand_dim)
  local function index_map(shape, xshape, off, skip)
    local rs, xs = strides_of(shape), strides_of(xshape)
    return function(i)
      local rest, e, xd = i - 1, 0, 0
      for d = 1, #shape do
        local c = rest // rs[d]
        rest = rest % rs[d]
        if d ~= skip then
          xd = xd + 1
          local xc = xshape[xd] == 1 and not off and 0 or c + (off and off[xd] or 0)
          e = e + xc * xs[xd]
        end
      end
      return e + 1
    end
  end
  handlers["tileas.broadcast"] = function(R, W, rec, ins)
    local x = read_tile(R, W, rec, ins[1])
    if no_values(R, rec) then return empty(rec) end
    local map = index_map(rec.tt.shape, x.shape)
    return { result(R, rec, function(i) return x.v[map(i)] end, x) }
  end
  handlers["tileas.expand_dim"] = function(R, W, rec, ins)
    local x = read_tile(R, W, rec, ins[1])
    local dim = rec.op:attr "dim" + 1
    if no_values(R, rec) then return empty(rec) end
    local map = index_map(rec.tt.shape, x.shape, nil, dim)
    return { result(R, rec, function(i) return x.v[map(i)] end, x) }
  end
  handlers["tileas.transpose"] = function(R, W, rec, ins)
    local x = read_tile(R, W, rec, ins[1])
    local rows, cols = rec.tt.shape[1], rec.tt.shape[2] -- the result's: x is cols x rows
    if no_values(R, rec) then return empty(rec) end
    return { result(R, rec, function(i)
      local r, c = (i - 1) // cols, (i - 1) % cols
      return x.v[c * rows + r + 1]
    end, x) }
  end
  handlers["tileas.extract_slice"] = function(R, W, rec, ins)
    local x = read_tile(R, W, rec, ins[1])
    local offsets = rec.op:attr "offsets"
    if no_values(R, rec) then return empty(rec) end
    local map = index_map(rec.tt.shape, x.shape, offsets)
    return { result(R, rec, function(i) return x.v[map(i)] end, x) }
  end
  handlers["tileas.extract"] = function(R, W, rec, ins)
    local x = read_tile(R, W, rec, ins[1])
    seed_elements(rec, x)
    if not x.v then return { 0 } end
    local xs, e = strides_of(x.shape), 0
    for d = 1, #x.shape do
      local c = uniform(rec, ins[d + 1], "index")
      if c < 0 or c >= x.shape[d] then
        violation("model", ("%s at %s: index %d of dim %d is outside the tile (%d)"):format(rec.name, rec.loc, c, d - 1, x.shape[d]))
      end
      e = e + c * xs[d]
    end
    return { x.v[e + 1] }
  end

  -- elementwise arith on tiles: f(a, b, c) per element, the result rounded to its type
  local PRED = { oeq = function(a, b) return a == b end, one = function(a, b) return a ~= b end,
                 olt = function(a, b) return a < b end, ole = function(a, b) return a <= b end,
                 ogt = function(a, b) return a > b end, oge = function(a, b) return a >= b end }
  local IPRED = { eq = function(a, b) return a == b end, ne = function(a, b) return a ~= b end,
                  slt = function(a, b) return a < b end, sle = function(a, b) return a <= b end,
                  sgt = function(a, b) return a > b end, sge = function(a, b) return a >= b end }
  local function elementwise_fn(rec)
    local n, round = rec.fn, round_of(rec)
    if n == "addf" or n == "addi" then return function(a, b) return round(a + b) end
    elseif n == "subf" or n == "subi" then return function(a, b) return round(a - b) end
    elseif n == "mulf" or n == "muli" then return function(a, b) return round(a * b) end
    elseif n == "divf" then return function(a, b) return round(a / b) end
    elseif n == "negf" then return function(a) return -a end
    elseif n == "extf" then return function(a) return a end
    elseif n == "truncf" then return function(a) return round(a) end
    elseif n == "maximumf" or n == "minimumf" then
      local max = n == "maximumf"
      return function(a, b)
        if a ~= a or b ~= b then return 0 / 0 end
        return max == (a >= b) and a or b
      end
    elseif n == "select" then return function(c, a, b) return c ~= 0 and a or b end
    elseif n == "andi" then return function(a, b) return a & b end
    elseif n == "ori" then return function(a, b) return a | b end
    elseif n == "cmpi" then -- (tile elements hold their signed values)
      local cmp = IPRED[rec.op:attr "predicate"]
      if not cmp then violation("model", ("%s at %s: predicate %s"):format(rec.name, rec.loc, tostring(rec.op:attr "predicate"))) end
      return function(a, b) return cmp(a, b) and 1 or 0 end
    elseif n == "cmpf" then
      local cmp = PRED[rec.op:attr "predicate"]
      if not cmp then violation("model", ("%s at %s: predicate %s"):format(rec.name, rec.loc, tostring(rec.op:attr "predicate"))) end
      return function(a, b) return (a == a and b == b and cmp(a, b)) and 1 or 0 end
    end
  end
  handlers["tileas.elementwise"] = function(R, W, rec, ins)
    local f = rec.efn
    if not f then
      f = elementwise_fn(rec)
      rec.efn = f
    end
    if no_values(R, rec) then return empty(rec) end
    local xs = {}
    for i = 1, #ins do xs[i] = is_tile(ins[i]) and ins[i].v or false end
    local a, b, c = ins[1], ins[2], ins[3]
    local va, vb, vc = xs[1], xs[2], xs[3]
    return { result(R, rec, function(i)
      return f(va and va[i] or a, vb and vb[i] or b, vc and vc[i] or c)
    end, a, b, c) }
  end

  -- }===
end

return TA
