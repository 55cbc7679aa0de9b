-- tilua.emulate.machine: one emulation of a decoded kernel (emulate/decode.lua).
--
-- Every warp of every CTA is a coroutine that runs its 32 lanes together
-- (SIMT, emulate/lanes.lua); scf.if on a lane-varying condition runs both
-- sides under their lane masks. A warp runs on its own until it reaches a
-- synchronizing op; it yields a request there, and the chooser picks which
-- ready actor (a warp at its request, or a bulk copy in flight) moves next. A
-- step is that request plus the warp's local code up to its next one.
--
-- The run (Run, made by machine.new) is what the op models reach; its methods
-- come from three files:
--
--   machine.lua  R:request(W, rec, ready, perform, describe, obj, acc, completes)
--                (what a warp yields), R:exec_block(W, blk, args, ctx) (run a
--                region), R:tick(rec, n) (the ops budget), R:new_actor()
--   memory.lua   R:load / R:store(W, rec, addr [, v] [, atomic]) (rec.codec),
--                R:alloc_global(bytes), R:mem_of(W, addr),
--                R:shadow_read / R:shadow_write(space, actor, vc, addr, n, loc)
--                (the race check), R:access(W, rec, addr, write),
--                R:check_access(W, rec, addr, n, write), R:who(actor)
--   sync.lua     mbarriers: R:init_barrier, R:bar, R:bar_ref, R:arrive,
--                R:complete_tx, R:wait; R:rendezvous, R:named_bar (CTA and named
--                barriers); R:gbar_at (global words); bulk copies R:issue_g2s,
--                R:issue_s2g, R:drain_s2g, R:copy_actor; sync.passes, sync.completes_on
--
-- and its fields: R.k (the decoded kernel), R.o (the options), R.grid, R.ctas
-- (id, rank, shared, bars, pipes, syncs ...), R.warps, R.copies, R.global,
-- R.gspace (global memory's race-check space), R.values (false in the
-- checker's protocol-only runs: copies and wgmma move no bytes), R.slice (such
-- a run computes no op emulate/data_slice.lua marked data_only), R.steps.
-- A handler is fn(R, W, rec, ins, ctx) -> results: W the warp (w, cta, actor,
-- vc, label, role, grp, vals), rec the op's record, ins the operands' values,
-- ctx { mask = active lanes, exec = the mask of warps running this code,
-- agent_first, narrow (under an elect) }.
--
-- The decoded kernel may carry hooks its model's kernel decoder set:
-- dk.on_start(R) (before the arguments: the launch's shape), dk.state_parts(R)
-- -> strings (more of the state hash), dk.min_phases(R, m) -> m. Arguments
-- take the kinds of emulate/models/init.lua (args).

local lanes = require "tilua.emulate.lanes"
local address = require "tilua.emulate.address"
local clock = require "tilua.emulate.clock"
local report = require "tilua.emulate.report"
local interp = require "tilua.emulate.interp"

local LV, varying, at, uniform_over = lanes.LV, lanes.varying, lanes.at, lanes.uniform_over
local vc_join = clock.join

local M = {}

-- The run's methods: this file's, memory.lua's, sync.lua's (one name, one home).
local Run = {}
Run.__index = Run
for _, part in ipairs { require "tilua.emulate.memory", (require "tilua.emulate.sync") } do
  for name, f in pairs(part) do
    assert(Run[name] == nil, name)
    Run[name] = f
  end
end
M.Run = Run

-- A new emulation of the decoded kernel k with options o and a chooser
-- choose(run, ready actors) -> the index of the actor that moves.
-- element_ops counts the tile elements the run computed, loaded or stored
-- (models/tileas.lua; a protocol-only run's: those of its slice).
function M.new(k, o, choose)
  local R = setmetatable({ k = k, o = o, choose = choose, global = {}, ctas = {}, actors = {},
                           warps = {}, copies = {}, nactors = 0, async_actors = {}, steps = 0, trace = {},
                           max_steps = o.max_steps or 200000, next_global = address.GLOBAL_BASE,
                           max_ops = o.max_ops or 4000000, ops = 0, next_clock = 4096, charged = 0, granules = 0, shadow_calls = 0,
                           handlers = k.models.handlers,
                           buffers = {}, args = {}, copy_seq = 0, granule = o.granule or address.MAX_GRANULE,
                           fixed_granule = o.granule ~= nil,
                           read_recs = {}, write_recs = {}, rnext = setmetatable({}, { __mode = "k" }),
                           element_ops = 0 }, Run)
  -- protocol-only runs (the checker's, unless o.values): bulk and TMA copies,
  -- wgmma and stmatrix move no bytes; their footprints still go through the
  -- race check (docs/protocol.md, "Protocol-only runs")
  local values = o.values
  if values == nil then values = o.mma_values end
  if values == nil then values = o._cache == nil end
  R.values = values
  -- the pure ops whose results only become data are not computed (emulate/data_slice.lua)
  R.slice = not values and o.data_slice ~= false
  return R
end

-- The budgets of a check: o.work, a counter { left = units } shared by every
-- run of one check (and by every configuration of the check every compile
-- runs), so that the same kernel gets the same verdict on every machine and
-- in every build; and o.deadline, a time of os.clock() (max_seconds, only
-- where the caller gives one). A unit is about 0.15 us of the emulator on a
-- 2024 x86 core (between 0.1 and 0.25 us on the GEMM's forms, the stdlib
-- attention and the block-striped split-K, which it was fitted on:
-- tools/bench/protocol.lua --units; small kernels' fixed costs are not in it):
-- an op is charged 2, a call of the race check 8 and each granule it covers 4
-- (memory.lua: a TMA box of 16 KB is 1024 granules, a wgmma's operand a few
-- hundred, a plain load one), a step 64 plus 12 a warp (choosing it, hashing
-- the state). A run past either budget stops at the next CTA it starts, the next
-- step or 4096th op with OUT_OF_BUDGET: a check reports its budget as
-- exceeded, a plain run fails. They bound the work of one run, however large
-- its grid.
local OUT_OF_BUDGET = setmetatable({}, {
  __tostring = function() return "emulate: the check's budget (max_work or max_seconds) ran out" end })
M.OUT_OF_BUDGET = OUT_OF_BUDGET
function Run:work_done()
  return 2 * self.ops + (64 + 12 * #self.warps) * self.steps + 8 * self.shadow_calls + 4 * self.granules + self.nactors
end
-- Charges the work done since the last charge to o.work; -> the work left.
function Run:charge()
  local w = self.o.work
  if not w then return nil end
  local used = self:work_done()
  w.left = w.left - (used - self.charged)
  self.charged = used
  return w.left
end
function Run:clock()
  local left = self:charge()
  if left and left < 0 then error(OUT_OF_BUDGET, 0) end
  local d = self.o.deadline
  if d and os.clock() > d then error(OUT_OF_BUDGET, 0) end
end
-- The most warps a run emulates (a warp is a coroutine and its state).
local MAX_WARPS = 1 << 20

function Run:new_actor()
  self.nactors = self.nactors + 1
  return self.nactors
end

-- {=== requests: what a warp yields at a synchronizing op

-- A warp's request: { rec, ready = fn() -> bool, perform = fn() -> results?, describe = fn() -> text }
-- obj names the synchronization object the op touches (steps of different
-- actors on different objects commute: the checker's sleep sets); nil: any.
-- acc: how: "r" reads it (a wait, a test), "a" arrives (arrivals commute with
-- each other), "w" (default) anything else; the checker takes some alone
-- (search.lua's step_of): "am" an mbarrier arrival, "ae" an arrival at a
-- barrier whose waits nothing can disable, "re" / "rp" a wait at such a
-- barrier / an mbarrier, "ag" / "rg" / "wg" an arrival / a wait / a write on a
-- global word. completes: for an arrival, fn() -> whether it would complete
-- the phase now. Returns what perform returned.
function Run:request(W, rec, ready, perform, describe, obj, acc, completes)
  return coroutine.yield { rec = rec, ready = ready, perform = perform, describe = describe, warp = W, obj = obj,
                           acc = acc or "w", completes = completes }
end

-- n more ops run at rec: a loop without a synchronizing op takes no steps, so
-- the ops are bounded too (a handler that loops over elements counts them).
function Run:tick(rec, n)
  self.ops = self.ops + n
  if self.ops >= self.next_clock then
    self.next_clock = self.ops + 4096
    self:clock()
  end
  if self.ops > self.max_ops then
    error(("emulate: more than %d ops run (max_ops) at %s: a loop that does not end, or raise max_ops")
      :format(self.max_ops, rec.loc), 0)
  end
end

-- }===

-- {=== the interpreter of one warp

-- scf.for, scf.if (both sides under their masks when the condition varies
-- per lane), scf.while; the models' handlers; arith by tilua.emulate.interp.

-- The results of a region run under parts of a mask, merged: parts = list of
-- { lanes, outs }. A result the same on every lane stays one value (a
-- pipeline or seq_bar state, a record, is never split per lane); one that
-- differs is per lane, which only numbers and vectors (arrays of numbers) may
-- be. what names the op for that error ("the scf.if", "the scf.for").
local function merge_lanes(rec, nres, parts, what, why)
  local outs = {}
  for r = 1, nres do
    local v, first, same = setmetatable({}, LV), nil, true
    for _, part in ipairs(parts) do
      local o = part[2][r]
      for _, l in ipairs(part[1]) do
        local x = at(o, l)
        v[l] = x
        if first == nil then first = x elseif not rawequal(x, first) then same = false end
      end
    end
    if same then
      outs[r] = first
    else
      for _, x in pairs(v) do
        if type(x) ~= "number" and not (type(x) == "table" and x[1] ~= nil) then
          error(("emulate: result %d of %s at %s differs between the lanes of a warp (%s) and is not a number: a %s per lane is not modelled")
            :format(r, what, rec.loc, why, type(x) == "table" and (x.kind or "state") or type(x)), 0)
        end
      end
      outs[r] = v
    end
  end
  return outs
end

-- An scf.for whose bounds or step differ between the active lanes (a loop
-- strided by the thread id): lane l runs its own trips; trip t runs the body
-- under the mask of the lanes that still iterate (as a branch on a per-lane
-- condition runs under its lanes), the others keep their carried values. A
-- synchronizing op in the body is the warp's op on every trip that some lane
-- runs, as in a divergent branch.
local function scf_for_lanes(R, W, rec, lb, ub, step, iters, ctx)
  local body = rec.regions[1][1]
  local iv = {}
  for _, l in ipairs(ctx.mask) do iv[l] = at(lb, l) end
  local cur = iters
  while true do
    local live = {}
    for _, l in ipairs(ctx.mask) do
      if iv[l] < at(ub, l) then live[#live + 1] = l end
    end
    if #live == 0 then return cur end
    local i, one = setmetatable({}, LV), iv[live[1]]
    for _, l in ipairs(live) do
      i[l] = iv[l]
      if iv[l] ~= one then one = nil end
    end
    local a = { one or i }
    for k2, v in ipairs(cur) do a[k2 + 1] = v end
    local o = R:exec_block(W, body, a, setmetatable({ mask = live }, { __index = ctx }))
    if #live == #ctx.mask then
      cur = o
    else
      local rest, on = {}, {}
      for _, l in ipairs(live) do on[l] = true end
      for _, l in ipairs(ctx.mask) do
        if not on[l] then rest[#rest + 1] = l end
      end
      cur = merge_lanes(rec, #rec.outs, { { live, o }, { rest, cur } }, "the scf.for",
        "its lanes run different numbers of trips")
    end
    for _, l in ipairs(live) do iv[l] = iv[l] + at(step, l) end
  end
end

local function scf_for(R, W, rec, ins, ctx)
  local iters = { table.unpack(ins, 4) }
  if varying(ins[1]) or varying(ins[2]) or varying(ins[3]) then
    local m, lb, ub, step = ctx.mask, ins[1], ins[2], ins[3]
    local function same(x)
      if not varying(x) then return true end
      for _, l in ipairs(m) do
        if x[l] ~= x[m[1]] then return false end
      end
      return true
    end
    if not (same(lb) and same(ub) and same(step)) then return scf_for_lanes(R, W, rec, lb, ub, step, iters, ctx) end
  end
  local lb, ub, step = uniform_over(rec, ins[1], ctx, "lower bound"), uniform_over(rec, ins[2], ctx, "upper bound"),
    uniform_over(rec, ins[3], ctx, "step")
  local body = rec.regions[1][1]
  local i = lb
  while i < ub do
    local a = { i }
    for k2, v in ipairs(iters) do a[k2 + 1] = v end
    iters = R:exec_block(W, body, a, ctx)
    i = i + step
  end
  return iters
end

local function scf_if(R, W, rec, ins, ctx)
  local c = ins[1]
  if not varying(c) then
    local blocks = rec.regions[c ~= 0 and 1 or 2]
    return blocks and blocks[1] and R:exec_block(W, blocks[1], {}, ctx) or {}
  end
  local tm, em = {}, {}
  for _, l in ipairs(ctx.mask) do
    if c[l] ~= 0 then tm[#tm + 1] = l else em[#em + 1] = l end
  end
  local to, eo = {}, {}
  if #tm > 0 and rec.regions[1][1] then
    to = R:exec_block(W, rec.regions[1][1], {}, setmetatable({ mask = tm }, { __index = ctx }))
  end
  if #em > 0 and rec.regions[2] and rec.regions[2][1] then
    eo = R:exec_block(W, rec.regions[2][1], {}, setmetatable({ mask = em }, { __index = ctx }))
  end
  return merge_lanes(rec, #rec.outs, { { tm, to }, { em, eo } }, "the scf.if", "its condition varies per lane")
end

local function scf_while(R, W, rec, ins, ctx)
  local cur = ins
  while true do
    local c = R:exec_block(W, rec.regions[1][1], cur, ctx)
    local fwd = { table.unpack(c, 2) }
    if uniform_over(rec, c[1], ctx, "condition") == 0 then return fwd end
    cur = R:exec_block(W, rec.regions[2][1], fwd, ctx)
  end
end

local function arith(rec, ins, ctx)
  local f = rec.arith
  if not f then -- compiled at its first run (an op never run raises nothing)
    f = interp.compile(rec.op)
    rec.arith = f
  end
  local a, b, c = ins[1], ins[2], ins[3]
  local va, vb, vc = varying(a), varying(b), varying(c)
  if not (va or vb or vc) then return { f(a, b, c) } end
  local v = setmetatable({}, LV)
  for _, l in ipairs(ctx.mask) do
    local x, y, z = a, b, c
    if va then x = a[l] end
    if vb then y = b[l] end
    if vc then z = c[l] end
    v[l] = f(x, y, z)
  end
  return { v }
end

local SCF = { ["scf.for"] = scf_for, ["scf.if"] = scf_if, ["scf.while"] = scf_while }

-- An op a protocol-only run does not compute (emulate/data_slice.lua): its
-- operands are touched (an accumulator a wgmma has not completed reports the
-- read), its results are DATA.
local DATA = lanes.DATA
local function data_only(rec, ins, ctx)
  for i = 1, #ins do
    local x = ins[i]
    if getmetatable(x) == LV then x = x[ctx.mask[1]] end
    if type(x) == "table" and rawget(x, "__info") ~= nil then local _ = x[1] end -- (a pending accumulator: reported)
  end
  local outs = rec.data_outs
  if not outs then
    outs = {}
    for r = 1, #rec.outs do outs[r] = DATA end
    rec.data_outs = outs
  end
  return outs
end

-- Runs a block of warp W over ctx.mask; returns the terminator's operand values.
-- (numeric loops, not ipairs: a step of ipairs is a call; the hot path of every run)
function Run:exec_block(W, blk, args, ctx)
  local vals = W.vals
  local handlers = self.handlers
  local bargs, ops = blk.args, blk.ops
  for i = 1, #bargs do vals[bargs[i]] = args[i] end
  for j = 1, #ops do
    local rec = ops[j]
    local name = rec.name
    local n = self.ops + 1 -- (Run:tick(rec, 1), inline: past a clock or max_ops it is called)
    if n >= self.next_clock or n > self.max_ops then
      self:tick(rec, 1)
    else
      self.ops = n
    end
    local rins = rec.ins
    local ins = {}
    for i = 1, #rins do ins[i] = vals[rins[i]] end
    if name == "scf.yield" or name == "scf.condition" then return ins end
    local outs
    local s = SCF[name]
    if rec.data_only and self.slice then
      outs = data_only(rec, ins, ctx)
    elseif s then
      outs = s(self, W, rec, ins, ctx)
    else
      local h = handlers[name]
      if h then
        outs = h(self, W, rec, ins, ctx)
      elseif rec.arith or name:match "^arith%." then
        outs = arith(rec, ins, ctx)
      else
        report.not_modelled(rec)
      end
    end
    local routs = rec.outs
    for i = 1, #routs do vals[routs[i]] = outs[i] end
  end
  return {}
end

-- }===

-- {=== setting up and stepping

-- Arguments: each parameter by its kind (emulate/models/init.lua's args: a
-- pointer takes bytes, a tensor map or a tile program's tensor a table ...),
-- the kinds in their order (the buffers' addresses follow it). The checker's
-- later runs (o._cache) take the first run's arguments and initial bytes.
function Run:setup_args()
  local k = self.k
  local cache = self.o._cache
  if cache and cache.base then
    self.global = setmetatable({}, { __index = cache.base })
    self.buffers, self.args, self.next_global = cache.buffers, cache.args, cache.next_global
    return
  end
  for _, kind in ipairs(k.models.arg_kinds) do
    for i, p in ipairs(k.params) do
      if p.arg == kind then
        local a = self.o.args and self.o.args[i]
        self.args[i] = kind.setup(self, i, p, a)
      end
    end
  end
  if cache then
    cache.base, cache.buffers, cache.args, cache.next_global = self.global, self.buffers, self.args, self.next_global
    self.global = setmetatable({}, { __index = cache.base })
  end
end

-- The coordinate d (1..3) of CTA id in the grid.
function Run:cta_coord(id, d)
  local gd = self.grid_dims
  if d == 1 then return id % gd[1] end
  if d == 2 then return id // gd[1] % gd[2] end
  return id // (gd[1] * gd[2])
end

function Run:start()
  local k = self.k
  if k.on_start then k.on_start(self) end
  self:setup_args()
  -- a grid of CTAs {x, y, z} (or x): CTA c is at x = c % gx, y = c // gx % gy,
  -- z = c // (gx gy); clusters along x
  local g = self.o.grid or 1
  self.grid_dims = type(g) == "table" and { g[1], g[2] or 1, g[3] or 1 } or { g, 1, 1 }
  self.grid = self.grid_dims[1] * self.grid_dims[2] * self.grid_dims[3]
  self.gspace = { is_global = true, shadow_w = {}, shadow_r = {}, granule = self.granule, unwritten = {} } -- (memory.lua)
  self.gbars, self.gbar_list = {}, {}
  local csize = k.cluster or 1
  if self.grid_dims[1] % csize ~= 0 then
    error(("emulate: a grid of %d CTAs along x is not a whole number of clusters of %d"):format(self.grid_dims[1], csize), 0)
  end
  if self.grid * k.warps > MAX_WARPS then
    error(("emulate: a grid of %d CTAs of %d warps each is more than the %d warps a run emulates")
      :format(self.grid, k.warps, MAX_WARPS), 0)
  end
  for c = 0, self.grid - 1 do
    if c & 63 == 0 then self:clock() end
    local cta = { id = c, shared = {}, shadow_w = {}, shadow_r = {}, bars = {}, bar_list = {}, syncs = {},
                  sync_list = {}, pipes = {}, start = self:new_actor(), remote = {}, live = k.warps,
                  rank = c % csize, remote_of = (" of CTA %d"):format(c), nbars = {} }
    self.actors[cta.start] = { label = ("the start of CTA %d"):format(c) }
    self.ctas[c + 1] = cta
    for w = 0, k.warps - 1 do
      local id = self:new_actor()
      local W = { id = id, actor = id, w = w, cta = cta, vals = {}, vc = { [id] = 1, [cta.start] = 1 }, seen = {}, bulk_open = {},
                  bulk_groups = {}, kind = "warp", done = false, nsync = 0, role = "kernel" }
      local role = self.o.roles and self.o.roles[w] -- roles the lowering erased (tile.agent), by warp
      if role then W.role = role end
      W.label = ("%s warp %d%s"):format(role or "kernel", w, self.grid > 1 and (" (CTA %d)"):format(c) or "")
      W.key = "w" .. id
      self.actors[id] = W
      self.warps[#self.warps + 1] = W
      local ctx = { mask = lanes.all(), exec = (1 << k.warps) - 1, agent_first = 0, narrow = false }
      W.co = coroutine.create(function()
        self:exec_block(W, k.body, self.args, ctx)
        -- every bulk store completes before the CTA exits
        self:drain_s2g(W, 0)
        if #W.bulk_open > 0 then
          W.bulk_groups[#W.bulk_groups + 1] = W.bulk_open
          W.bulk_open = {}
          self:drain_s2g(W, 0)
        end
      end)
    end
  end
  for _, W in ipairs(self.warps) do
    self.starting = W
    self:resume(W)
  end
  self.starting = nil
end

-- Resume warp W until its next request (or its end).
function Run:resume(W, value)
  local ok, req = coroutine.resume(W.co, value)
  if not ok then error(req, 0) end
  if coroutine.status(W.co) == "dead" then
    W.done, W.req = true, nil
    local cta = W.cta
    cta.exit_vc = cta.exit_vc or {}
    vc_join(cta.exit_vc, W.vc)
    cta.live = cta.live - 1
    if cta.live == 0 then
      -- the CTA exits: every access of another CTA to its shared memory must happen before
      cta.exited = true
      -- and so must every bulk copy into it: one still in flight, or whose
      -- completion no wait of the CTA acquired, writes shared memory the CTA
      -- no longer owns (its next occupant's)
      for _, c in ipairs(cta.incoming or {}) do
        if (cta.exit_vc[c.id] or 0) < c.vc[c.id] then
          report.violation("exit", ("CTA %d exits (its last warp, %s, finished) while %s at %s into its shared memory is %s (wait on its mbarrier before the exit)")
            :format(cta.id, W.label, c.label, c.rec.loc, c.done and "not ordered before the exit" or "still in flight"))
        end
      end
      for _, r in ipairs(cta.remote) do
        if (cta.exit_vc[r.actor] or 0) < r.clock then
          report.violation("dsmem", ("CTA %d exits (its last warp, %s, finished) while %s's access at %s to its shared memory is not ordered before the exit (a missing cluster barrier before the exit)")
            :format(cta.id, W.label, r.label, r.loc))
        end
      end
    end
  else
    W.req = req
  end
end

-- The actors that can move now, in a fixed order (warps, then copies).
function Run:runnable()
  local out = {}
  for _, W in ipairs(self.warps) do
    if not W.done and W.req.ready() then out[#out + 1] = W end
  end
  for _, c in ipairs(self.copies) do out[#out + 1] = c end
  return out
end

-- One step of actor a (R.on_step(R, a) first: tilua.emulate.protocol's replay).
function Run:step(a)
  if self.on_step then self.on_step(self, a) end
  self.steps = self.steps + 1
  self:clock()
  if self.steps > self.max_steps then
    error(("emulate: more than %d steps (max_steps): a livelock, or raise max_steps"):format(self.max_steps), 0)
  end
  if a.kind == "copy" then
    self.trace[#self.trace + 1] = ("%s: %s at %s completes (%d bytes)"):format(a.label, a.rec.name, a.rec.loc, a.bytes)
    self:complete_g2s(a)
    return
  end
  local req = a.req
  self.trace[#self.trace + 1] = ("%s: %s at %s"):format(a.label, req.rec.name, req.rec.loc)
  a.nsync = a.nsync + 1
  local r = req.perform()
  self:resume(a, r)
end

-- A live warp's position: its op and how many steps it took (kept on its
-- request: a step makes a new one)
local function position(W)
  local req = W.req
  local p = req.pos
  if not p then
    p = req.rec.id .. ":" .. W.nsync
    req.pos = p
  end
  return p
end

-- The synchronization state, as a string (the checker's state hash).
function Run:state_key()
  local parts = {}
  if self.o.symmetry == false then
    for _, W in ipairs(self.warps) do
      parts[#parts + 1] = W.done and "d" or position(W)
    end
  else
    -- symmetry: the warps of one CTA in one agent / executor group are
    -- interchangeable; their positions are kept as a sorted multiset
    local groups, order = {}, {}
    for _, W in ipairs(self.warps) do
      local g = W.gkey -- the group's key, kept while the warp's group is the same
      if not g or W.gkey_grp ~= W.grp then
        g = W.cta.id .. "/" .. tostring(W.grp)
        W.gkey, W.gkey_grp = g, W.grp
      end
      local t = groups[g]
      if not t then
        t = {}
        groups[g] = t
        order[#order + 1] = g
      end
      t[#t + 1] = W.done and "d" or position(W)
    end
    for _, g in ipairs(order) do
      local t = groups[g]
      table.sort(t)
      parts[#parts + 1] = g .. "=" .. table.concat(t, ";")
    end
  end
  for _, cta in ipairs(self.ctas) do
    for _, b in ipairs(cta.bar_list) do
      parts[#parts + 1] = b.completed .. "/" .. b.pending .. "/" .. b.tx
    end
    for _, s in ipairs(cta.sync_list) do parts[#parts + 1] = s.gen .. "/" .. s.arrived end
  end
  if self.k.bar_arrives then
    -- a warp waiting at a named barrier whose generation already completed
    -- (arrivals without waits can complete it behind its back) is ready: the
    -- state says so (the counts alone do not)
    for i, W in ipairs(self.warps) do
      if W.wait_sync and not W.done then parts[#parts + 1] = i .. ":" .. (W.wait_sync.gen - W.wait_gen) end
    end
  end
  for _, c in ipairs(self.copies) do parts[#parts + 1] = c.key end
  for _, a in ipairs(self.gbar_list) do parts[#parts + 1] = "g" .. (self.global[a] or 0) end
  if self.k.state_parts then
    for _, x in ipairs(self.k.state_parts(self)) do parts[#parts + 1] = x end
  end
  return table.concat(parts, ",")
end

-- The fewest completed phases of any mbarrier that was used (a ring wrapped
-- twice has every stage barrier at 2 or more); a cluster barrier is no ring.
function Run:min_phases()
  local m
  for _, cta in ipairs(self.ctas) do
    for _, b in ipairs(cta.bar_list) do
      if not b.cluster and (not m or b.completed < m) then m = b.completed end
    end
  end
  if self.k.min_phases then m = self.k.min_phases(self, m) end
  return m
end

-- Run to the end (or a violation); returns nil or a failure {kind, message}.
function Run:go()
  local ok, err = pcall(function()
    self:start()
    while true do
      local rs = self:runnable()
      if #rs == 0 then
        local live = false
        for _, W in ipairs(self.warps) do live = live or not W.done end
        if live then return report.deadlock(self) end
        return report.final(self)
      end
      local i = (#rs == 1 and not self.o._por) and 1 or self.choose(self, rs)
      if i == nil then return { kind = "pruned" } end
      self:step(rs[i])
    end
  end)
  self:charge() -- the run's last portion (since its last step or 4096th op) counts too
  if ok then return err end
  if report.is_violation(err) then
    if self.starting then -- in a warp's code before its first synchronizing op
      self.trace[#self.trace + 1] = ("%s: tile.kernel at %s"):format(self.starting.label, self.k.loc)
    end
    return { kind = err.kind, message = err.message }
  end
  error(err, 0)
end

-- }===

return M
