-- tilua.passes.convert_tileas_to_cutlass.compute: the compute agent, a tile
-- program without a dot to pipeline (tileas-materialize-agents put its whole
-- body in one agent of the block's warps): elementwise maps, reductions,
-- normalizations. Every thread of the block runs it on its registers of the
-- program's tiles (blocked.lua: the distribution, vector loads and stores,
-- reductions over lanes and warps). The launch runs one CTA per program,
-- along x (memory-bound programs want many CTAs an SM to keep enough bytes
-- in flight), so the persistent loop of tileas-dynamic-persistent runs its
-- body once, for the CTA's program -- unless the program loads and stores
-- its row: then the loop is persistent, the row ring of rowring.lua.

local tl = require "tilua"
local R = require "tilua.passes.convert_tileas_to_cutlass.read"
local V = require "tilua.passes.convert_tileas_to_cutlass.values"
local X = require "tilua.passes.convert_tileas_to_cutlass.ops"
local B = require "tilua.passes.convert_tileas_to_cutlass.blocked"
local Ring = require "tilua.passes.convert_tileas_to_cutlass.rowring"
local Tr = require "tilua.passes.convert_tileas_to_cutlass.transpose"
local plan = require "tilua.passes.convert_tileas_to_cutlass.plan"

local Compute = {}

-- The CTA's program: the launch runs x * y * z CTAs along x (tileas.launch's
-- `linear`), the CTA's index the linear program id as tileas-dynamic-persistent's
-- loop counts them (x fastest); outside that loop its ids decomposed.
local function linear_program_id() return tl.block_id("x") end
local function program_id(L)
  local ids = {}
  return function(dim)
    if not ids[dim] then
      local q = linear_program_id()
      local nx = L.P.lowered_programs[1] and X.programs(L, 1)
      if dim == "x" then ids.x = nx and q % nx or q
      elseif dim == "y" then ids.y = q // nx % X.programs(L, 2)
      else ids.z = q // nx // X.programs(L, 2) end
    end
    return ids[dim]
  end
end

-- env.persistent: the persistent loop's body once, for this CTA's program.
local function one_program(L, env)
  return function(op)
    local cond = op:region(1):entry():ops()
    local valid = cond[#cond - 1]
    if #op:operands() ~= 1 or not valid or valid:name() ~= "tileas.is_valid_program_id" then
      R.fail(op, "an scf.while that is not a persistent loop over is_valid_program_id is not lowered yet")
    end
    if #op:results() > 0 and op:result(1):nuses() > 0 then R.fail(op, "the persistent loop's result is used after it") end
    if L.transpose then return Tr.build(L, env, op, L.transpose) end
    if L.ring then return Ring.build(L, env, op, L.ring) end
    L.program_loop = op
    local after = op:region(2):entry()
    L.vmap[after:arg(1):id()] = linear_program_id()
    for _, o in ipairs(after:ops()) do
      if o:name() == "tileas.cancel_next_program_id" then L.vmap[o:result(1):id()] = tl.const(0)
      else V.at_loc(o, X.lower_op, L, o, env) end
    end
  end
end

-- A loop of the program (not pipelined): an scf.for carrying scalars and
-- tiles, the tiles as their registers.
local function loop(L, env)
  return function(op)
    local body = op:region(1):entry()
    local inits, shapes = {}, {}
    for i = 4, op:noperands() do
      local x = V.get(L, op:operand(i), op)
      if B.is_dist(x) then
        shapes[#shapes + 1] = { dist = x, first = #inits + 1 }
        for _, r in ipairs(x.r) do inits[#inits + 1] = r end
      elseif tl.is_value(x) then
        shapes[#shapes + 1] = { first = #inits + 1 }
        inits[#inits + 1] = x
      else
        R.fail(op, "a loop-carried value of this kind is not lowered in a compute agent")
      end
    end
    -- the carried values from a flat list of registers
    local function unflatten(flat)
      local out = {}
      for j, s in ipairs(shapes) do
        if s.dist then
          local regs = {}
          for i = 1, s.dist.D.n do regs[i] = flat[s.first + i - 1] end
          out[j] = B.value(s.dist.elem, s.dist.D, regs)
        else
          out[j] = flat[s.first]
        end
      end
      return out
    end
    local lb, ub, step = V.get(L, op:operand(1), op), V.get(L, op:operand(2), op), V.get(L, op:operand(3), op)
    local results = table.pack(tl.for_range(lb, ub, step, inits, function(i, ...)
      L.vmap[body:arg(1):id()] = i
      for j, v in ipairs(unflatten({ ... })) do L.vmap[body:arg(j + 1):id()] = v end
      X.lower_block(L, body, env)
      local y = body:terminator()
      local flat = {}
      for j = 1, y:noperands() do
        local v = V.get(L, y:operand(j), y)
        if B.is_dist(v) then for _, r in ipairs(v.r) do flat[#flat + 1] = r end
        else flat[#flat + 1] = v end
      end
      return table.unpack(flat)
    end))
    for j, v in ipairs(unflatten(results)) do L.vmap[op:result(j):id()] = v end
  end
end

-- Before the kernel is made: the row ring's plan (rowring.lua) where the
-- agent's persistent loop has one, and the CTAs an SM it asks ptxas for;
-- rows claimed at run time (row_ring.claims): the workspace of their counter.
function Compute.plan(L)
  local body = L.compute.op:region(1):entry()
  for _, op in ipairs(body and body:ops() or {}) do
    if op:name() == "scf.while" then
      L.transpose = Tr.plan_loop(op) -- (a transpose by TMA: transpose.lua)
      L.ring = not L.transpose and Ring.plan(L, op) or nil
      if L.transpose then L.min_ctas = math.max(L.kop:kernel_spec().min_ctas or 1, L.transpose.per_sm) end
      if L.ring then L.min_ctas = math.max(L.kop:kernel_spec().min_ctas or 1, L.ring.per_sm) end
      if (L.ring and L.ring.claims) or (L.transpose and L.transpose.claims) then
        plan.add_workspace_param(tl, L.P)
        L.row_claims = { workspace_bytes = 4 }
      end
    end
  end
end

-- The compute agent of the plan in the lowered kernel: its code runs on
-- every thread of the block (no agent dispatch: it is the only one).
function Compute.build(L)
  local ag = L.compute
  local env = { agent = ag }
  L.agent_op = ag.op
  local tid = tl.thread_id("x")
  L.tid, L.lane, L.warp = tid, tid % 32, tid // 32
  L.anchor = tl.const(0, tl.i32) -- the top of the agent's code (blocked.lua builds its per-thread values before it)
  env.program_id = program_id(L)
  L.linear = true
  env.persistent = one_program(L, env)
  env.loop = loop(L, env)
  env.tiled_load = function(op)
    if not B.is_blocked(R.tile_of(op:result(1))) then R.fail(op, "tiled_load of a shared tile in a compute agent is not lowered yet") end
    L.vmap[op:result(1):id()] = B.tiled_load(L, op)
  end
  env.tiled_store = function(op) B.tiled_store(L, op, V.get(L, op:operand(op:noperands()), op)) end
  local function refuse(what) return function(op) R.fail(op, "%s in a compute agent is not lowered yet", what) end end
  env.dot, env.copy = refuse "a dot", refuse "a copy into shared memory"
  env.pipelined_for = env.loop -- (no dot's loads to pipeline: a loop as any other)
  local body = ag.op:region(1):entry()
  if body then X.lower_block(L, body, env) end
end

return Compute
