-- tilua.passes.convert_tileas_to_cutlass.split_tail: the split-tail schedule
-- (tl.tile_kernel's schedule = "split_tail"), stdlib/attention.lua's
-- split_tail (kernels/attention.lua's M.split_tail / M.split_tile) for a tile
-- program whose consumers are NC replicas (tileas-materialize-agents: each
-- replica a warpgroup's rows of the program, computed on its own):
--
--   units        a program along x is NC units, (program x, y, replica c);
--                U = NC x (programs along x) a row of programs y
--   tiles        the static persistent walk over G workers (the grid) of
--                F = min((U / NC) Y, (U Y) / (NC G) G) whole programs (whole
--                rounds: each worker the same count; at most each y's whole
--                programs), then the other units (fewer than NC G), a tile
--                each: a worker's last round takes one replica's rows, not a
--                whole program's (d64 attention: 704 programs of 192 rows on
--                132 workers made 6 rounds for 5.33 of work); ids as M.split_tile's
--   a unit tile  the producer loads the program's tiles as for a whole one
--                (its whole Q box, its K and V); the consumer replica of the
--                unit runs the program's body without the turns (tileas.turns:
--                none waits for it; the body is one in the code, its turns
--                under `not single`), the others walk the stages: each wait and
--                release of the loop's rings in the loop's own order (chain.lua's),
--                so the rings' release counts and phases stay those of a whole program
--
-- The program's ids stay whole programs' (x, y) and its replica's rows
-- stay `(NC x + c)` replicas' rows: the program's loads, masks and stores are
-- unchanged. The units are counted from the grid of programs (the launch knows
-- no rows): those past the last row of a partial last program are computed
-- as the others, on rows the loads read as zeros and the stores clip.

local tl = require "tilua"
local R = require "tilua.passes.convert_tileas_to_cutlass.read"
local V = require "tilua.passes.convert_tileas_to_cutlass.values"
local X = require "tilua.passes.convert_tileas_to_cutlass.ops"
local A = require "tilua.kernels.attention"

local Split = {}

-- The consumer's pipelined loop (the only one, directly in the persistent loop).
local function consumer_loop(L)
  local loops = {}
  R.each_op(L.consumers[#L.consumers].op, function(op)
    if op:name() == "scf.for" and op:attr "tileas.pipeline" then loops[#loops + 1] = op end
  end)
  return loops
end

-- What the split tail needs of the plan L: consumer replicas (2 or more) whose
-- one pipelined loop is a loop of chained dots issued ahead (chain.lua; not in
-- order, no reduced dot, no ring both kinds of dot read), directly in the
-- persistent loop's body.
function Split.check(L)
  local Chain = require "tilua.passes.convert_tileas_to_cutlass.chain"
  local n = #L.consumers
  local what = "the split-tail schedule"
  if L.pingpong or L.ksplit or L.compute then R.fail(L.kop, "%s splits the programs of consumer replicas (not ping-pong or ksplit consumers, nor a program without a dot)", what) end
  for i, ag in ipairs(L.consumers) do
    local rep = ag.op:attr "tileas.replica"
    if n < 2 or not rep or rep[1] ~= i - 1 or rep[2] ~= n or ag.first ~= L.consumers[1].first + 4 * (i - 1) then
      R.fail(ag.op, "%s splits a program's rows among its consumer replicas (tileas.replica): %d consumer agents, not replicas of one", what, n)
    end
  end
  local loops = consumer_loop(L)
  local loop = loops[1]
  if #loops ~= 1 or not loop:parent() or loop:parent():name() ~= "scf.while" then
    R.fail(loop or L.consumers[1].op, "%s: a consumer's one pipelined loop, directly in the persistent loop's body (got %d)", what, #loops)
  end
  local g = Chain.scheduled(loop) and not Chain.in_order(loop) and Chain.groups(L, loop)
  if not g or g.reducing or g.shared then
    R.fail(loop, "%s lowers a loop of chained dots issued ahead (attention's forward: S = Q K^T ahead, P V late) only", what)
  end
  L.split = { loop = loop }
end

-- The split's sizes (kernels/attention.lua's M.split_tail on units of the
-- programs: its `h` the programs along y, its rows NC units a program along x).
function Split.sizes(L)
  local NC = #L.consumers
  local c = { consumers = NC, bm = 64 * NC }
  local S = { h = X.programs(L, 2), b = tl.const(1, tl.i32), group = tl.const(1, tl.i32) }
  S.sq = X.programs(L, 1) * tl.const(64 * NC, tl.i32) -- (U = NC x the programs along x)
  A.split_tail(tl, c, S, tl.grid_dim("x"))
  return c, S
end

-- The static persistent scheduler over the split's tiles (S.tiles, in id order).
function Split.scheduler(L, S)
  return tl.sched.static_persistent { tiles = { S.tiles, 1, 1, 1 }, swizzle = 1, workers = tl.grid_dim("x") }
end

-- The program of tile `work` (the scheduler's; its m the tile id): .x, .y,
-- .single (i1: a unit tile) and .replica (a unit tile's consumer replica),
-- and m(), n(), l() as a work tile's (the program ids loops.lua reads).
local Tile = {}
Tile.__index = Tile
function Tile:m() return self.x end
function Tile:n() return self.y end
function Tile:l() return tl.const(0, tl.i32) end
function Split.tile(c, S, work)
  local t = A.split_tile(tl, c, S, work:m())
  local unit = t.row0 // tl.const(64, tl.i32)
  local NC = tl.const(c.consumers, tl.i32)
  return setmetatable({ x = unit // NC, y = t.h, single = t.single, replica = unit % NC }, Tile)
end

-- {=== the consumers' tiles

-- fn() in each branch of `cond` with the plan's values (L.vmap, the lazy
-- values' elements) as they were before the if: neither branch sees what the
-- other lowered, nor the code after the if what either did.
local function branch(L, cond, cursors, fn_a, fn_b)
  local restore = V.snapshot(L)
  local function run(fn) return function() restore() fn() end end
  A.branch(tl, cond, cursors, run(fn_a), run(fn_b))
  restore()
end

-- A consumer replica with no rows in a unit tile: the loop's waits and
-- releases (chain.lua's order: its once rings, the ahead rings' first block,
-- then a block's ahead rings before the block before's late rings, the late
-- rings' last block, the once rings' release), nothing computed. The loop's
-- bounds are the program's: the ops they come from lowered alone (`bounds`).
local function idle(L, env, cur, g, bounds)
  local Loops = require "tilua.passes.convert_tileas_to_cutlass.loops"
  bounds()
  local lb, ub = Loops.k_blocks(L, L.split.loop, env)
  local function walk(groups)
    for _, grp in ipairs(groups) do grp.pipe:consumer_wait(cur[grp]) end
    for _, grp in ipairs(groups) do
      tl.elect_one(function() grp.pipe:consumer_release(cur[grp]) end)
      cur[grp]:advance()
    end
  end
  local list = {}
  for _, grp in ipairs(g.all) do list[#list + 1] = cur[grp] end
  for _, grp in ipairs(g.once) do grp.pipe:consumer_wait(cur[grp]) end
  walk(g.ahead)
  tl.cutlass.for_range(lb + tl.const(1, tl.i32), ub, list, function()
    walk(g.ahead)
    walk(g.late)
  end)
  walk(g.late)
  for _, grp in ipairs(g.once) do
    tl.elect_one(function() grp.pipe:consumer_release(cur[grp]) end)
    cur[grp]:advance()
  end
end

-- The body of a consumer's tile `t` (Split.tile): the program's body
-- (`whole`) on a whole program's tile and on its replica's unit tile, the
-- turns taken in the former only (env.turn_if: consumer.lua's ctx, the turns'
-- waits and hand-overs under it: one body in the code, not two); the other
-- replicas' idle walk on a unit tile. cursors: the persistent loop's (the
-- rings', the turns'); env.group_cursors: the rings' by group; bounds(): the
-- loop bounds' ops of the tile lowered.
function Split.consumer_tile(L, env, t, cursors, whole, bounds)
  local Chain = require "tilua.passes.convert_tileas_to_cutlass.chain"
  local g = Chain.groups(L, L.split.loop)
  local me = tl.cast(env.replica, tl.i32)
  branch(L, t.single & t.replica:ne(me), cursors, function() idle(L, env, env.group_cursors, g, bounds) end, function()
    env.turn_if = ~t.single
    whole()
    env.turn_if = nil
  end)
end

-- }===

return Split
