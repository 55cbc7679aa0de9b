-- tilua.dsl.cutlass: the Lua surface of the cutlass dialect (docs/cutlass.md).
--
--   k:executor(name, {first_warp =, warps =} | {mask =})   an executor set (warps)
--   k:async_exec(name, spec, fn)       builds cutlass.async.exec running fn inside
--   k:pipeline{ stages, producers, consumers, transaction_bytes, ... }
--   k:seq_bar{ depth, arrive_count, ... }
--   tl.cutlass.for_range / tl.cutlass.switch_by_executor
--   tl.sched.data_parallel / static_persistent / streamk {...}
--   tl.mods.mainloop(sched, participants, {is_2cta_mma =}, fn), tl.mods.smid, tl.mods.throttle
--   tl.bar, tl.bar_arrive, tl.generic_barrier.*, tl.block_striped.*, tl.async.*
--   tl.cutlass.fragment(elem, shape)   a register fragment for the block_striped ops
--
-- Cursors (pipeline and seq_bar states, work tiles) are Lua objects holding
-- an SSA value: st:advance() builds the increment and the object refers to
-- the new value from then on. Across an scf loop they must be carried:
-- tl.cutlass.for_range(lb, ub, step, {st, ...}, fn) does that.
--
-- Every op is built with tl.op / tl.op1, so structural errors are raised at
-- once and verifier errors point at the script line that built the op.

local core = require "tilua.core"

local tl = require "tilua" -- the library being built (init.lua registers it before its rooms)

local M = {}

local raise, is_value = tl.raise, tl.is_value
local Kernel = tl.Kernel
local cut = {}
tl.cutlass = cut

-- {===================================================================
-- Small helpers
-- ====================================================================

local function int_arg(v, what)
  if math.type(v) ~= "integer" then raise(("%s must be an integer, got %s"):format(what, tostring(v))) end
  return v
end

-- A Lua number or IR value as an i32 (or another integer type t) value.
local function ival(v, what, t)
  t = t or tl.i32
  if is_value(v) then
    if not tl.is_int_type(v:type()) then raise(("%s must be an integer value, got %s"):format(what, tostring(v:type()))) end
    return v:type() == t and v or v:cast(t)
  end
  return tl.const(int_arg(v, what), t)
end

local function ctype(name, param) return core.type_dialect(name, { param }) end

-- Threads of the block of the kernel around the insertion point (nil when
-- its spec is malformed: the verifier reports that).
local function block_threads()
  local ip = tl.insertion_point()
  local op = ip and ip.block:parent()
  local spec = op and op:kernel_spec()
  return spec and spec.threads
end

local function mask_of(first, count) return ((1 << count) - 1) << first end

-- A class cut[name] (its own __index), inheriting base's methods when given.
local function class(name, base)
  local c = setmetatable({}, base and { __index = base })
  c.__index = c
  cut[name] = c
  return c
end

-- }===================================================================

-- {===================================================================
-- Executors: warp masks and cutlass.async.exec
-- ====================================================================

local Executor = class "Executor"

-- A warp mask from an executor, a number (the mask) or {first, count}.
local function warp_mask(x, what)
  if getmetatable(x) == Executor then return x.mask end
  if math.type(x) == "integer" then return x end
  if type(x) == "table" and math.type(x[1]) == "integer" and math.type(x[2]) == "integer" then
    return mask_of(x[1], x[2])
  end
  raise(("%s: expected an executor, a warp mask or {first_warp, warps}"):format(what))
end
cut.warp_mask = warp_mask

function Kernel:warps()
  local spec = self.op:kernel_spec()
  return spec and spec.warps or 0
end

-- k:executor(name, { first_warp = 0, warps = 4 } | { mask = 0xf })
function Kernel:executor(name, spec)
  spec = spec or {}
  local mask = spec.mask
  if not mask then
    mask = mask_of(int_arg(spec.first_warp or 0, "executor first_warp"), int_arg(spec.warps or 1, "executor warps"))
  end
  return setmetatable({ name = name, mask = int_arg(mask, "executor mask"), kernel = self }, Executor)
end

-- exec:exec(fn): a cutlass.async.exec on these warps; returns what fn returns.
function Executor:exec(fn)
  local attrs = { executors = self.mask }
  if self.name then attrs.agent = self.name end
  local op = tl.op("cutlass.async.exec", {}, {}, attrs, 1)
  return tl.at(op:region(1):add_block(), nil, fn, self)
end

function Kernel:async_exec(name, spec, fn) return self:executor(name, spec):exec(fn) end

-- tl.cutlass.switch_by_executor{ {executor, {values...}, fn}, ... }: case i runs fn
-- on the warps of its executor with its values as arguments (cursor objects are
-- passed as copies bound to the case's block arguments).
function cut.switch_by_executor(cases)
  local operands, masks, segs = {}, {}, {}
  for i, c in ipairs(cases) do
    masks[i] = warp_mask(c[1], "switch_by_executor case #" .. i)
    local vals = c[2] or {}
    segs[i] = #vals
    for _, v in ipairs(vals) do operands[#operands + 1] = is_value(v) and v or v.value end
  end
  local op = tl.op("cutlass.pipeline.switch_by_executor", operands, {},
                   { masks = masks, operand_segments = segs }, 1)
  for i, c in ipairs(cases) do
    local types = {}
    for j, v in ipairs(c[2] or {}) do types[j] = (is_value(v) and v or v.value):type() end
    local blk = op:region(1):add_block(types)
    local args = {}
    for j, v in ipairs(c[2] or {}) do
      args[j] = is_value(v) and blk:arg(j) or v:rebound(blk:arg(j))
    end
    tl.at(blk, nil, c[3], table.unpack(args))
  end
  return op
end

-- }===================================================================

-- {===================================================================
-- Cursors and loops
-- ====================================================================

local Cursor = {} -- shared methods of states and work tiles
function Cursor:rebound(v)
  local c = setmetatable({}, getmetatable(self))
  for k, x in pairs(self) do c[k] = x end
  c.value = v
  return c
end

-- tl.cutlass.for_range(lb, ub, [step,] {cursors...}, function(iv) ... end): an scf.for
-- that carries the cursors; inside and after the loop they refer to the right values.
function cut.for_range(...)
  local n = select("#", ...)
  local a = { ... }
  local fn, carried = a[n], a[n - 1]
  if type(fn) ~= "function" or type(carried) ~= "table" then
    raise("cutlass.for_range(lb, ub, [step,] {cursors}, fn)")
  end
  local step = n == 5 and a[3] or 1
  local inits = {}
  for i, c in ipairs(carried) do inits[i] = c.value end
  local res = table.pack(tl.for_range(a[1], a[2], step, inits, function(iv, ...)
    local vals = { ... }
    for i, c in ipairs(carried) do c.value = vals[i] end
    fn(iv)
    local outs = {}
    for i, c in ipairs(carried) do outs[i] = c.value end
    return table.unpack(outs)
  end))
  for i, c in ipairs(carried) do c.value = res[i] end
end

-- }===================================================================

-- {===================================================================
-- Barrier slots of the per-CTA pool (32 slots)
-- ====================================================================

-- Claim n slots: at `base` when given, else after the last claim of this kernel.
local function claim_slots(k, n, base)
  k._cutlass_next_slot = k._cutlass_next_slot or 0
  base = base or k._cutlass_next_slot
  k._cutlass_next_slot = math.max(k._cutlass_next_slot, base + n)
  return base
end

-- }===================================================================

-- {===================================================================
-- Pipelines
-- ====================================================================

local Pipeline, State = class "Pipeline", class("State", Cursor)

-- Participant masks: lists of executors / masks, or counts that split the
-- block's warps into equal contiguous groups, producers first.
local function participants(k, producers, consumers)
  if type(producers) == "table" and type(consumers) == "table" then
    local p, c = {}, {}
    for i, x in ipairs(producers) do p[i] = warp_mask(x, "pipeline producers") end
    for i, x in ipairs(consumers) do c[i] = warp_mask(x, "pipeline consumers") end
    return p, c
  end
  local np = int_arg(producers or 1, "pipeline producers")
  local nc = int_arg(consumers or 1, "pipeline consumers")
  local w, groups = k:warps(), np + nc
  if w == 0 or w % groups ~= 0 then
    raise(("pipeline: cannot split the %d warps of the block into %d equal groups; pass producers and consumers as lists of executors or warp masks"):format(w, groups))
  end
  local each, p, c = w // groups, {}, {}
  for i = 1, np do p[i] = mask_of((i - 1) * each, each) end
  for i = 1, nc do c[i] = mask_of((np + i - 1) * each, each) end
  return p, c
end

-- k:pipeline{ stages = 4, producers = 1 | {exec...}, consumers = 2 | {exec...},
--   transaction_bytes = 32768, mode =, barrier_id_base =, producer_group_id =, consumer_group_id = }
function Kernel:pipeline(o)
  local stages = int_arg(o.stages, "pipeline stages")
  local p, c = participants(self, o.producers, o.consumers)
  local ty = core.type_dialect("cutlass.pipeline", { stages, #p, #c })
  local v = tl.op1("cutlass.pipeline.create", {}, ty)
  local attrs = {
    participants = p, consumers = c,
    producer_group_id = o.producer_group_id or 0, consumer_group_id = o.consumer_group_id or 1,
    barrier_id_base = claim_slots(self, 2 * stages, o.barrier_id_base),
    mode = o.mode or ((#p == 1 and #c == 1) and "warp_specialized" or "cooperative"),
  }
  if o.transaction_bytes then attrs.transaction_bytes = int_arg(o.transaction_bytes, "pipeline transaction_bytes") end
  local init = tl.op("cutlass.pipeline.init", { v }, {}, attrs)
  return setmetatable({ value = v, init = init, stages = stages, kernel = self,
                        state_type = core.type_dialect("cutlass.pipeline_state", { stages }) }, Pipeline)
end

-- A start cursor of a role; opts: index, phase, count.
local function start(pipe, role, opts)
  local attrs = { role = role }
  for _, key in ipairs { "index", "phase", "count" } do
    if opts and opts[key] then attrs[key] = int_arg(opts[key], "state " .. key) end
  end
  local v = tl.op1("cutlass.pipeline.state.create", { pipe.value }, pipe.state_type, attrs)
  return setmetatable({ value = v, pipe = pipe, role = role }, State)
end
function Pipeline:producer_start(opts) return start(self, "producer", opts) end
function Pipeline:consumer_start(opts) return start(self, "consumer", opts) end

local function state_value(st, what)
  if getmetatable(st) ~= State then raise(what .. ": expected a pipeline state (pipe:producer_start())") end
  return st.value
end

-- A producer/consumer op on (pipe, state [, extra operands]); result: a
-- function giving its result type (in the context of the moment).
local function role_op(name, result)
  return function(self, st, token, attrs)
    local opds = { self.value, state_value(st, name:match "[%w_]+$") }
    if token then opds[3] = token end
    if result then return tl.op1(name, opds, result(), attrs) end
    tl.op(name, opds, {}, attrs)
    return st
  end
end
Pipeline.producer_acquire = role_op("cutlass.pipeline.producer_acquire")
Pipeline.consumer_wait = role_op("cutlass.pipeline.consumer_wait")
local function i1() return tl.i1 end
local try_acquire = role_op("cutlass.pipeline.producer_try_acquire", i1)
local try_wait = role_op("cutlass.pipeline.consumer_try_wait", i1)
function Pipeline:producer_try_acquire(st) return try_acquire(self, st) end
function Pipeline:consumer_try_wait(st) return try_wait(self, st) end
local release, tail = role_op("cutlass.pipeline.consumer_release"), role_op("cutlass.pipeline.producer_tail")
function Pipeline:consumer_release(st) return release(self, st) end
function Pipeline:producer_tail(st) return tail(self, st) end
local commit = role_op("cutlass.pipeline.producer_commit")
local expect = role_op("cutlass.pipeline.producer_expect_tx")
function Pipeline:producer_commit(st, bytes)
  return commit(self, st, nil, bytes and { transaction_bytes = int_arg(bytes, "producer_commit bytes") } or nil)
end
function Pipeline:producer_expect_tx(st, bytes)
  return expect(self, st, nil, { transaction_bytes = int_arg(bytes, "producer_expect_tx bytes") })
end
local get_barrier = role_op("cutlass.pipeline.producer_get_barrier", function() return tl.ptr(tl.i64, "shared") end)
-- The full barrier of the producer's stage: TMA / bulk copies complete on it.
function Pipeline:full_barrier(st) return get_barrier(self, st) end
Pipeline.producer_get_barrier = Pipeline.full_barrier

-- st:advance() one step; st:advance(n) n steps at once (n an i32 value or an integer)
function State:advance(n)
  if n == nil then
    self.value = tl.op1("cutlass.pipeline.state.increment", { self.value }, self.value:type())
  else
    if not is_value(n) then n = tl.const(int_arg(n, "state advance"), tl.i32) end
    self.value = tl.op1("cutlass.pipeline.state.advance", { self.value, n }, self.value:type())
  end
  return self
end
function State:bump()
  self.value = tl.op1("cutlass.pipeline.state.bump", { self.value }, self.value:type())
  return self
end
function State:index() return tl.op1("cutlass.pipeline.state.index", { self.value }, tl.i32) end
function State:phase() return tl.op1("cutlass.pipeline.state.phase", { self.value }, tl.i32) end
function State:count() return tl.op1("cutlass.pipeline.state.count", { self.value }, tl.i32) end

-- }===================================================================

-- {===================================================================
-- Sequence barriers
-- ====================================================================

local SeqBar, SeqState = class "SeqBar", class("SeqState", Cursor)

-- k:seq_bar{ depth = 2, arrive_count = 128, barrier_id_base = }
function Kernel:seq_bar(o)
  local depth = int_arg(o.depth, "seq_bar depth")
  local v = tl.op1("cutlass.seq_bar.create", {}, ctype("cutlass.seq_bar", depth))
  local spec = self.op:kernel_spec()
  local count = o.arrive_count or spec and spec.threads
  local init = tl.op("cutlass.seq_bar.init", { v }, {}, {
    arrive_count = int_arg(count, "seq_bar arrive_count"), barrier_id_base = claim_slots(self, depth, o.barrier_id_base) })
  return setmetatable({ value = v, init = init, depth = depth }, SeqBar)
end

-- bar:state{ index =, phase = }: a cursor into the ring.
function SeqBar:state(opts)
  local attrs = {}
  for _, key in ipairs { "index", "phase" } do
    if opts and opts[key] then attrs[key] = int_arg(opts[key], "seq_bar state " .. key) end
  end
  local t = ctype("cutlass.seq_bar_state", self.depth)
  return setmetatable({ value = tl.op1("cutlass.seq_bar.state.create", {}, t, attrs), bar = self }, SeqState)
end

local function seq_value(st)
  if getmetatable(st) ~= SeqState then raise("seq_bar: expected a seq_bar state (bar:state())") end
  return st.value
end
-- bar:wait(st): wait for the cursor's slot and phase.
function SeqBar:wait(st) tl.op("cutlass.seq_bar.wait", { self.value, seq_value(st) }, {}) return st end
-- bar:arrive(st): arrive on the cursor's slot; st then refers to the advanced cursor.
function SeqBar:arrive(st)
  st.value = tl.op1("cutlass.seq_bar.arrive", { self.value, seq_value(st) }, st.value:type())
  return st
end

-- }===================================================================

-- {===================================================================
-- Named and generic barriers
-- ====================================================================

local function named(name)
  return function(id, count)
    if type(id) == "table" then id, count = id.id, id.count end
    tl.op(name, {}, {}, { id = int_arg(id, "barrier id"), count = int_arg(count, "barrier count") })
  end
end
-- tl.bar(id, count) / tl.bar{ id =, count = }: bar.sync on named barrier id.
tl.bar = named("cutlass.bar")
tl.bar_arrive = named("cutlass.named_barrier.arrive")

tl.generic_barrier = {
  wait_eq = function(lock, idx, v) tl.op("cutlass.generic_barrier.wait_eq", { lock, ival(idx, "flag index"), ival(v, "value") }, {}) end,
  wait_eq_reset = function(lock, idx, v)
    tl.op("cutlass.generic_barrier.wait_eq_reset", { lock, ival(idx, "flag index"), ival(v, "value") }, {})
  end,
  arrive_inc = function(lock, idx) tl.op("cutlass.generic_barrier.arrive_inc", { lock, ival(idx, "flag index") }, {}) end,
}

-- }===================================================================

-- {===================================================================
-- block_striped
-- ====================================================================

-- tl.block_striped.X(gmem, rmem [, { threads =, element_type =, kind = }]).
local function striped(name, with_kind)
  return function(gmem, rmem, opts)
    opts = opts or {}
    if not is_value(rmem) then raise(name:match "block_striped%.[%w_]+$" .. ": the register memory must be an IR value") end
    local attrs = {
      threads = int_arg(opts.threads or block_threads() or 0, "block_striped threads"),
      element_type = opts.element_type or rmem:type():info().elem,
    }
    if with_kind then attrs.kind = opts.kind or "add" end
    tl.op(name, { gmem, rmem }, {}, attrs)
  end
end
-- tl.cutlass.fragment(elem, shape): a register fragment (memref<shape x elem, rmem>) for
-- the block_striped ops. A stand-in until the tile dialect allocates register memory:
-- a zero-operand builtin.unrealized_conversion_cast, which convert-cutlass-to-nvvm backs
-- with shared memory (docs/lowering.md).
function cut.fragment(elem, shape)
  if type(shape) ~= "table" then shape = { int_arg(shape, "fragment size") } end
  return tl.op1("builtin.unrealized_conversion_cast", {}, tl.memref(elem, shape, "rmem"))
end

tl.block_striped = {
  load = striped("cutlass.block_striped.load"), load_add = striped("cutlass.block_striped.load_add"),
  store = striped("cutlass.block_striped.store"), reduce = striped("cutlass.block_striped.reduce", true),
}

-- }===================================================================

-- {===================================================================
-- Async tokens and futures
-- ====================================================================

local function flavor(t) return t:info().params[1] end
tl.async = {
  -- a token of a flavor (mbarrier, bulk, gmma) with nothing outstanding
  none = function(fl) return tl.op1("cutlass.async.create_none", {}, ctype("cutlass.async_token", fl)) end,
  -- wait(tok [, {barrier =, phase =, pending =}])
  wait = function(tok, o)
    o = o or {}
    local opds = { tok }
    if o.barrier then opds[2], opds[3] = o.barrier, ival(o.phase or 0, "phase") end
    tl.op("cutlass.async.wait", opds, {}, o.pending and { pending = int_arg(o.pending, "pending") } or nil)
  end,
  future = function(tok, barrier, phase)
    local fl = flavor(tok:type())
    local opds = { tok }
    if barrier then opds[2], opds[3] = barrier, ival(phase or 0, "phase") end
    return tl.op1("cutlass.async.token_to_async", opds, ctype("cutlass.future", fl))
  end,
  future_wait = function(f) tl.op("cutlass.async.future_wait", { f }, {}) end,
  to_async = function(f) return tl.op1("cutlass.async.to_async", { f }, f:type()) end,
}

-- }===================================================================

-- {===================================================================
-- Tile schedulers
-- ====================================================================

local Scheduler, WorkTile = class "Scheduler", class("WorkTile", Cursor)

-- The ops of each scheduler kind (the kinds of core.enums().sched_kind).
local sched_ops = {
  data_parallel = { params = "cutlass.tile_scheduler.create_dp_params",
                    work = "cutlass.tile_scheduler.create_dp_work_tile_info" },
  static_persistent = { params = "cutlass.tile_scheduler.create_static_persistent_params",
                        work = "cutlass.tile_scheduler.create_static_persistent_work_tile_info" },
  streamk = { params = "cutlass.tile_scheduler.create_streamk_params",
              work = "cutlass.tile_scheduler.create_streamk_work_tile_info" },
  sm100_streamk = { params = "cutlass.tile_scheduler.create_sm100_streamk_params",
                    work = "cutlass.tile_scheduler.create_sm100_streamk_work_tile_info" },
}
for _, k in ipairs(core.enums().sched_kind) do assert(sched_ops[k], k) end

-- Problem operands: tiles = {m, n, l, k} or tiles_m / tiles_n / tiles_l / tiles_k.
local function tile_operands(o)
  local t = o.tiles or {}
  return { ival(t[1] or o.tiles_m, "tiles_m"), ival(t[2] or o.tiles_n, "tiles_n"),
           ival(t[3] or o.tiles_l or 1, "tiles_l"), ival(t[4] or o.tiles_k or 1, "tiles_k") }
end

local function params_attrs(o, kind)
  local a = {}
  for _, key in ipairs { "swizzle", "raster_order", "tiles_per_round", "decomposition", "reduction", "splits",
                         "accumulator_tile_bytes", "min_k" } do
    a[key] = o[key]
  end
  if o.cluster then a.cluster_shape = { o.cluster[1] or 1, o.cluster[2] or 1, o.cluster[3] or 1 } end
  return next(a) and a or nil
end

local function scheduler(kind, o)
  local opds = tile_operands(o)
  if kind ~= "data_parallel" then opds[5] = ival(o.workers, "workers") end
  if kind == "streamk" or kind == "sm100_streamk" then
    if not is_value(o.workspace) then raise("sched.streamk: workspace must be a global pointer value") end
    opds[6] = o.workspace
  end
  local params = tl.op1(sched_ops[kind].params, opds,
                        ctype("cutlass.tile_scheduler_params", kind), params_attrs(o, kind))
  local hopds = { params }
  if o.response then hopds[2] = o.response end
  local handle = tl.op1("cutlass.tile_scheduler.create", hopds, ctype("cutlass.tile_scheduler", kind),
                        o.model and { model = o.model } or nil)
  return setmetatable({ kind = kind, params = params, value = handle }, Scheduler)
end

tl.sched = rawget(tl, "sched") or {}
-- tl.sched.data_parallel{ tiles = {m, n, l, k}, cluster =, swizzle =, raster_order =, model =, response = }
function tl.sched.data_parallel(o) return scheduler("data_parallel", o) end
-- tl.sched.static_persistent{ ..., workers =, tiles_per_round = }
function tl.sched.static_persistent(o) return scheduler("static_persistent", o) end
-- tl.sched.streamk{ ..., workers =, workspace =, decomposition =, reduction =, splits =,
--   accumulator_tile_bytes =, min_k =, variant = "auto" | "sm90" | "sm100" }: auto picks by the target
function tl.sched.streamk(o)
  local v = o.variant or "auto"
  if v == "auto" then v = tl.context():target_sm() >= 100 and "sm100" or "sm90" end
  if v ~= "sm90" and v ~= "sm100" then raise("sched.streamk: variant must be auto, sm90 or sm100") end
  return scheduler(v == "sm100" and "sm100_streamk" or "streamk", o)
end

-- sched:work(linear_id): the first unit of work of a worker.
function Scheduler:work(id)
  local v = tl.op1(sched_ops[self.kind].work,
                   { self.params, ival(id, "worker id") }, ctype("cutlass.work_tile_info", self.kind))
  return setmetatable({ value = v, sched = self }, WorkTile)
end

-- sched:workspace_sizes{ total_bytes =, reduction_bytes =, barrier_bytes = } -> total, reduction, barriers
function Scheduler:workspace_sizes(o)
  o = o or {}
  local op = tl.op("cutlass.tile_scheduler.get_workspace_sizes", { self.params }, { tl.i64, tl.i64, tl.i64 }, {
    total_bytes = o.total_bytes or 0, reduction_bytes = o.reduction_bytes or 0, barrier_bytes = o.barrier_bytes or 0 })
  return op:result(1), op:result(2), op:result(3)
end

-- sched:fixup(work, accumulator) -> i1: true when this CTA runs the epilogue.
function Scheduler:fixup(wt, acc)
  return tl.op1("cutlass.tile_scheduler.fixup", { self.value, wt.value, acc }, tl.i1)
end

-- wt:advance(): the next unit of work (inside a cutlass.async.exec).
function WorkTile:advance()
  self.value = tl.op1("cutlass.tile_scheduler.advance_to_next_work", { self.sched.value, self.value },
                      self.value:type())
  return self
end
for field, a in pairs { m = { "cutlass.tile_scheduler.work_tile_info.m", "i32" },
                        n = { "cutlass.tile_scheduler.work_tile_info.n", "i32" },
                        l = { "cutlass.tile_scheduler.work_tile_info.l", "i32" },
                        linear_id = { "cutlass.tile_scheduler.work_tile_info.linear_id", "i32" },
                        tile_idx = { "cutlass.tile_scheduler.work_tile_info.tile_idx", "i32" },
                        k_tile_start = { "cutlass.tile_scheduler.work_tile_info.k_tile_start", "i32" },
                        k_tile_count = { "cutlass.tile_scheduler.work_tile_info.k_tile_count", "i32" },
                        split_idx = { "cutlass.tile_scheduler.work_tile_info.split_idx", "i32" },
                        expected_splits = { "cutlass.tile_scheduler.work_tile_info.expected_splits", "i32" },
                        is_valid = { "cutlass.tile_scheduler.work_tile_info.is_valid", "i1" },
                        is_separate_reduction = { "cutlass.tile_scheduler.work_tile_info.is_separate_reduction", "i1" },
                        is_final_split = { "cutlass.tile_scheduler.work_tile_info.is_final_split", "i1" },
                        increment_pipe = { "cutlass.tile_scheduler.work_tile_info.increment_pipe", "i1" } } do
  WorkTile[field] = function(self) return tl.op1(a[1], { self.value }, tl[a[2]]) end
end

-- }===================================================================

-- {===================================================================
-- MODS probes
-- ====================================================================

local function handle_of(s)
  if getmetatable(s) == Scheduler then return s.value end
  if is_value(s) then return s end
  raise("mods: expected a scheduler")
end

-- The end probe: with `duration`, its result is the window's length in ns.
local function mods_end(h, m, ts, attrs, duration)
  local opds = ts and { h, m, ts } or { h, m }
  if duration then
    if not ts then raise("mods: a duration needs the start's timestamp (timestamp = true)") end
    return tl.op1("cutlass.tile_scheduler.mods_report_mainloop_end", opds, tl.i64, attrs)
  end
  tl.op("cutlass.tile_scheduler.mods_report_mainloop_end", opds, {}, attrs)
end

tl.mods = {
  -- mainloop(sched, participants, { is_2cta_mma =, timestamp =, duration = }, fn): opens the
  -- MODS window, runs fn(start_timestamp), closes it; returns what fn returns, preceded by the
  -- window's duration (i64 ns) when duration = true (which needs timestamp = true).
  mainloop = function(sched, mask, o, fn)
    if type(o) == "function" then o, fn = {}, o end
    local h, m = handle_of(sched), ival(mask, "participant mask", tl.i64)
    local attrs = { is_2cta_mma = o.is_2cta_mma or false }
    local ts
    if o.timestamp then ts = tl.op1("cutlass.tile_scheduler.mods_report_mainloop_start", { h, m }, tl.i64, attrs)
    else tl.op("cutlass.tile_scheduler.mods_report_mainloop_start", { h, m }, {}, attrs) end
    local r = table.pack(fn(ts))
    local d = mods_end(h, m, ts, attrs, o.duration)
    if o.duration then return d, table.unpack(r, 1, r.n) end
    return table.unpack(r, 1, r.n)
  end,
  smid = function() return tl.op1("cutlass.tile_scheduler.mods_report_smid", {}, tl.i32) end,
  throttle = function(profile)
    tl.op("cutlass.tile_scheduler.mods_throttle", {}, {}, { profile = core.attr_int(int_arg(profile, "profile"), tl.i32) })
  end,
}

-- }===================================================================

return M
