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
    local ks = op:attr "tileas.ksplit"
    if ks then rec.ksplit, t.ksplit = ks[1], true end
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

  local end_program, program_period, ksplit_body -- (below, with the rings; ksplit's)
  handlers["tileas.agent"] = function(R, W, rec, _, ctx)
    if W.w ~= rec.first then return {} end
    local old, oldg = W.role, W.grp
    W.role, W.grp = rec.kind, rec.first
    W.pingpong, W.ksplit = rec.pingpong, rec.ksplit
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
  -- ksplit consumers (tileas.ksplit = [g, 2]): each runs the iterations of the
  -- pipelined loop whose place in the ring's sequence has g's parity
  -- (tileas.pipelined_for), consumer 1 from zeros; then consumer 1 hands its
  -- sums to consumer 0, which adds them and alone runs the rest of the program:
  -- consumer 1's program is its ops up to the pipelined loop, then the next
  -- program's id (tileas.cancel_next_program_id) and the yield.
  function ksplit_body(rec)
    if rec.ksplit_body then return rec.ksplit_body end
    local blk, ops, loop = rec.regions[2][1], {}, nil
    for _, o in ipairs(blk.ops) do
      if not loop or o.name == "tileas.cancel_next_program_id" or o.name == "scf.yield" then ops[#ops + 1] = o end
      if o.name == "tileas.pipelined_for" then loop = o end
    end
    if not loop or #ops < 2 or ops[#ops].name ~= "scf.yield" or ops[#ops - 1].name ~= "tileas.cancel_next_program_id" then
      violation("model", ("ksplit consumer 1 at %s: its program is not a pipelined loop followed by the next program's id"):format(rec.loc))
    end
    rec.ksplit_body = { args = blk.args, ops = ops }
    return rec.ksplit_body
  end
  local function ksplit_hand_over(R, W, rec, iters)
    local cta, n = W.cta, W.pp_n
    if W.ksplit == 1 then
      R:request(W, rec, function() return true end, function()
        cta.ks_sums = cta.ks_sums or {}
        cta.ks_sums[n] = iters[1]
      end, function() return ("hands its sums of program %d to ksplit consumer 0"):format(n) end, "k" .. cta.id, "w")
      return
    end
    local other
    R:request(W, rec, function() return cta.ks_sums and cta.ks_sums[n] ~= nil end, function() other = cta.ks_sums[n] end,
      function() return ("waits for ksplit consumer 1's sums of program %d"):format(n) end, "k" .. cta.id, "re")
    local mine = iters[1]
    local v
    if mine.v and other.v then
      local round = values.elem_codec(mine.elem).round
      v = {}
      for i = 1, #mine.v do v[i] = round(mine.v[i] + other.v[i]) end
    end
    iters[1] = new_tile(mine.shape, mine.elem, v)
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
        cur = R:exec_block(W, W.ksplit == 1 and ksplit_body(rec) or rec.regions[2][1], fwd, ctx)
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
          init(base + 8, (R.k.tileas.pingpong or R.k.tileas.ksplit) and 1 or math.max(1, R.k.tileas.consumers), rg.loc,
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
    local ks = consumer and W.ksplit
    if ks == 1 then -- (consumer 1 sums from zeros: the lowering's)
      local a = iters[1]
      local z
      if a.v then
        z = {}
        for i = 1, #a.v do z[i] = 0.0 end
      end
      iters[1] = new_tile(a.shape, a.elem, z)
    end
    for i = lb, ub - 1, step do
      W.pipe_j = (W.pipe_j or -1) + 1
      if ks and W.pipe_j % 2 ~= ks then goto next_iteration end -- (the other ksplit consumer's)
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
      ::next_iteration::
    end
    W.pipe = outer
    W.laps = ((W.pipe_j or -1) + 1) // rec.stages -- across the run (a persistent loop runs it again)
    if ks then ksplit_hand_over(R, W, rec, iters) end
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

  -- the compute ops (splat, iota, dot, math, reductions, shape ops, elementwise)
  require "tilua.emulate.models.tileas_compute"(handlers, {
    codec = codec, count = count, rows_of = rows_of, new_tile = new_tile, is_tile = is_tile, read_tile = read_tile,
  })
end

return TA
