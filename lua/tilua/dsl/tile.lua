-- tilua.dsl.tile: the authoring ops of real kernels (the tile dialect's surface).
-- Added to tl when init.lua requires it.
--
--   ids          tl.thread_id("x"), tl.block_id, tl.block_dim, tl.grid_dim,
--                tl.cluster_id, tl.cluster_dim, tl.cluster_block_id, tl.cluster_grid_dim,
--                tl.cluster_rank(), tl.cluster_size(), tl.warp_id(), tl.lane_id(), tl.global_id("x")
--   pointers     p + i, p - i (elements), p:at(i), p:as(elem [, space]), tl.ptr_to_int, tl.int_to_ptr
--   memory       tl.load(p [, {vector = n, volatile = true}]) / p:load, tl.store(p, v) / p:store, tl.prefetch(p [, {level}]),
--                tl.atomic(kind, p, v [, {scope}]), tl.atomic_add/max/min/exch..., tl.atomic_cas
--   shared       k:shared(elem, {shape} | count [, {align}]) -> memref | ptr, m:ptr(i, j, ...),
--                k:dynamic_shared(elem [, {align}])
--   vectors      tl.extract(v, i), tl.vector_of(elem_type, {values})
--   warps        tl.elect_one(fn), tl.elect(), k:agent(name, {warps = n [, warp_id]}, fn(a))
--   sync         tl.barrier(), tl.named_barrier_sync/arrive(id, count), tl.cluster_arrive,
--                tl.cluster_wait, tl.cluster_sync, tl.mapa(p, rank), tl.fence(scope),
--                tl.fence_proxy_async([space]), tl.fence_mbarrier_init(),
--                tl.griddepcontrol_wait(), tl.griddepcontrol_launch_dependents()
--   mbarriers    tl.mbarrier_init(bar, count), tl.mbarrier_arrive(bar [, count] [, {scope}]),
--                tl.mbarrier_arrive_expect_tx(bar, bytes), tl.mbarrier_expect_tx,
--                tl.mbarrier_try_wait(bar, parity) / test_wait / wait, tl.mbarrier_inval
--   bulk copies  tl.bulk_copy(dst, src, bytes [, bar]), tl.bulk_commit(), tl.bulk_wait(n [, {read}])
--   cp.async     tl.cp_async(dst, src [, {size, cache, src_bytes}]), tl.cp_async_commit(), tl.cp_async_wait(n)
--
-- Compiling is tilua.gpu.compile, launching tilua.gpu.launch.

local core = require "tilua.core"

local tl = require "tilua" -- the library being built (init.lua registers it before its rooms)
local kinds = require "tilua.dsl.kinds"

local M = {}

local raise, is_value = tl.raise, tl.is_value
local kind_op = kinds.op
local Value = core.metatable("Value")
local V = Value.__index
local Kernel = tl.Kernel

local type_kind = tl.type_kind
local function kind(v) return is_value(v) and type_kind(v:type()) end
local check_ptr -- below, with the loads
local function info(v) return v:type():info() end
-- A type's element type, memoized by its userdata (one a type and context:
-- l_ir.c's push_type): tl.extract asks it of its vector at every element.
local elem_of = setmetatable({}, { __mode = "k" })
local function elem_type(t)
  local e = elem_of[t]
  if e == nil then
    e = t:info().elem or false
    elem_of[t] = e
  end
  return e or nil
end
local function int(v, what)
  if is_value(v) then return v end
  if math.type(v) ~= "integer" then raise(("%s must be an integer or an IR value, got %s"):format(what, type(v))) end
  return tl.const(v, tl.i32)
end
local function i32(v, what)
  v = int(v, what)
  if v:type() ~= tl.i32 then v = v:cast(tl.i32) end
  return v
end

-- {===================================================================
-- Ids and dimensions
-- ====================================================================

local dims = {}
for _, d in ipairs(core.enums().dim) do dims[d] = true end
local function dim_op(fname, opname)
  return function(d)
    d = d or "x"
    if not dims[d] then raise(("%s: dimension must be \"x\", \"y\" or \"z\""):format(fname)) end
    return tl.op1(opname, {}, tl.i32, { dim = d })
  end
end
for fname, opname in pairs { thread_id = "tile.thread_id", block_id = "tile.block_id", block_dim = "tile.block_dim",
                             grid_dim = "tile.grid_dim", cluster_id = "tile.cluster_id",
                             cluster_dim = "tile.cluster_dim", cluster_block_id = "tile.cluster_block_id",
                             cluster_grid_dim = "tile.cluster_grid_dim" } do
  tl[fname] = dim_op(fname, opname)
end
for fname, opname in pairs { cluster_rank = "tile.cluster_rank", cluster_size = "tile.cluster_size",
                             warp_id = "tile.warp_id", lane_id = "tile.lane_id" } do
  tl[fname] = function() return tl.op1(opname, {}, tl.i32) end
end
-- block_id * block_dim + thread_id along d
function tl.global_id(d) return tl.block_id(d) * tl.block_dim(d) + tl.thread_id(d) end

-- }===================================================================

-- {===================================================================
-- Pointers
-- ====================================================================

local function ptr_add(p, off)
  if not is_value(off) and math.type(off) ~= "integer" then raise("pointer offsets are integers") end
  if not is_value(off) then off = tl.const(off, tl.i64) end
  if not tl.is_int_type(off:type()) then raise(("pointer offset of type %s"):format(tostring(off:type()))) end
  return tl.op1("tile.ptr_add", { p, off }, p:type())
end
V.at = ptr_add

local add, sub = Value.__add, Value.__sub
Value.__add = function(a, b)
  if kind(a) == "ptr" then return ptr_add(a, b) end
  if kind(b) == "ptr" then return ptr_add(b, a) end
  return add(a, b)
end
Value.__sub = function(a, b)
  if kind(a) == "ptr" then return ptr_add(a, is_value(b) and tl.const(0, b:type()) - b or -b) end
  return sub(a, b)
end

-- p:as(elem [, space]): another pointee type and/or address space.
function V.as(p, elem, space)
  local i = info(p)
  if i.kind ~= "ptr" then raise(("as: expected a pointer, got %s"):format(tostring(p:type()))) end
  local t = tl.ptr(elem or i.elem, space or i.space)
  if t == p:type() then return p end
  return tl.op1("tile.ptr_cast", { p }, t)
end
-- the address as an integer: i32 in the shared windows, i64 elsewhere (or type t)
function tl.ptr_to_int(p, t)
  local sp = check_ptr(p, "ptr_to_int").space
  return tl.op1("tile.ptr_to_int", { p }, t or ((sp == "shared" or sp == "cluster") and tl.i32 or tl.i64))
end
function tl.int_to_ptr(v, ptr_type) return tl.op1("tile.int_to_ptr", { v }, ptr_type) end

-- m:ptr(i, j, ...): pointer to an element of a memref.
function V.ptr(m, ...)
  local i = info(m)
  if i.kind ~= "memref" then raise(("ptr: expected a memref, got %s"):format(tostring(m:type()))) end
  local idx = {}
  for k, x in ipairs { ... } do idx[k] = int(x, "index") end
  return tl.op1("tile.memref_ptr", { m, table.unpack(idx) }, tl.ptr(i.elem, i.space))
end

-- }===================================================================

-- {===================================================================
-- Loads, stores, atomics, vectors
-- ====================================================================

function check_ptr(p, what)
  if kind(p) ~= "ptr" then raise(("%s: expected a pointer, got %s"):format(what, is_value(p) and tostring(p:type()) or type(p))) end
  return info(p)
end

-- tl.load(p [, {vector = n, volatile = bool, cache = "cg", evict = "evict_last",
-- nc = bool, prefetch = 64|128|256}]): the last four are hints of global loads
function V.load(p, opts)
  local i = check_ptr(p, "load")
  opts = opts or {}
  local rt = opts.vector and tl.vector(i.elem, opts.vector) or i.elem
  return tl.op1("tile.load", { p }, rt, { volatile = opts.volatile, cache = opts.cache, evict = opts.evict,
                                          nc = opts.nc, prefetch = opts.prefetch })
end

-- tl.prefetch(p [, {level = 2}]): the line of global address p into L1 (level 1,
-- the default) or L2; no register is written, so nothing waits for it
function V.prefetch(p, opts)
  local i = check_ptr(p, "prefetch")
  if i.space ~= "global" then raise(("prefetch: expected a global pointer, got one to %s memory"):format(tostring(i.space))) end
  local level = (opts or {}).level or 1
  if level ~= 1 and level ~= 2 then raise("prefetch: level must be 1 (L1) or 2 (L2)") end
  tl.op("tile.prefetch", { p }, {}, { level = level })
end
tl.prefetch = V.prefetch

-- p:store(v [, {volatile = bool, cache = "cs" | "cg", evict = "evict_first"}]):
-- the last two are hints of global stores
function V.store(p, v, opts)
  local i = check_ptr(p, "store")
  if not is_value(v) then v = tl.const(v, i.elem) end
  opts = opts or {}
  tl.op("tile.store", { v, p }, {}, { volatile = opts.volatile, cache = opts.cache, evict = opts.evict })
end

-- tl.load / tl.store of a kind registered elsewhere (a tile program's tensor: dsl/tileprog.lua)
function tl.load(p, ...)
  local f = kind_op("load", p)
  if f then return f(p, ...) end
  return V.load(p, ...)
end
function tl.store(p, ...)
  local f = kind_op("store", p)
  if f then return f(p, ...) end
  return V.store(p, ...)
end

-- tl.atomic(kind, p, v [, {scope = "gpu"}]) -> old value
function tl.atomic(k, p, v, opts)
  local i = check_ptr(p, "atomic")
  if not is_value(v) then v = tl.const(v, i.elem) end
  return tl.op1("tile.atomic", { p, v }, i.elem, { kind = k, scope = (opts or {}).scope })
end
for _, k in ipairs { "add", "max", "min", "umax", "umin", "exch", "and", "or", "xor" } do
  tl["atomic_" .. k] = function(p, v, opts) return tl.atomic(k, p, v, opts) end
end
function tl.atomic_cas(p, cmp, new, opts)
  local i = check_ptr(p, "atomic_cas")
  if not is_value(cmp) then cmp = tl.const(cmp, i.elem) end
  if not is_value(new) then new = tl.const(new, i.elem) end
  return tl.op1("tile.atomic_cas", { p, cmp, new }, i.elem, { scope = (opts or {}).scope })
end

function tl.extract(v, idx)
  local f = kind_op("extract", v)
  if f then return f(v, idx) end
  return tl.op1("tile.extract", { v }, elem_type(v:type()), { index = idx })
end
-- tl.vector_of(elem_type, {values}) -> vector<#values x elem_type>
function tl.vector_of(t, vals)
  local opds = {}
  for k, x in ipairs(vals) do opds[k] = tl.cast(x, t) end
  return tl.op1("tile.from_elements", opds, tl.vector(t, #opds))
end

-- }===================================================================

-- {===================================================================
-- Shared memory and agents (kernel methods)
-- ====================================================================

-- Build an op directly in the kernel body, after the previous allocations, so
-- that it dominates the whole kernel wherever the call is made.
local function in_body(k, fn)
  local before
  if k._alloc_after then before = k._alloc_after:next() else before = k.body:first() end
  local v = tl.at(k.body, before, fn)
  k._alloc_after = v:def()
  return v
end

-- k:shared(elem, {d0, d1, ...} | count [, {align = bytes, swizzle = 0|32|64|128}]) -> memref | ptr
-- in shared memory (a swizzled memref's addresses follow TMA's and wgmma's swizzle)
function Kernel:shared(elem, shape, opts)
  opts = opts or {}
  return in_body(self, function()
    if type(shape) == "table" then
      return tl.op1("tile.alloc_shared", {}, tl.memref(elem, shape, "shared", opts.swizzle), { align = opts.align })
    end
    if math.type(shape) ~= "integer" then raise("shared: expected a shape table or an element count") end
    return tl.op1("tile.alloc_shared", {}, tl.ptr(elem, "shared"), { count = shape, align = opts.align })
  end)
end

-- k:dynamic_shared(elem [, {align}]): the shared memory after the static allocations.
function Kernel:dynamic_shared(elem, opts)
  return in_body(self, function()
    return tl.op1("tile.dynamic_shared", {}, tl.ptr(elem, "shared"), { align = (opts or {}).align })
  end)
end

local function region_op(name, attrs, fn, ...)
  local op = tl.op(name, {}, {}, attrs, 1)
  local blk = op:region(1):add_block()
  tl.at(blk, nil, fn, ...)
  return op
end

-- k:agent(name, {warps = n [, warp_id = w]}, function(a) ... end): a warp-specialized role.
-- a:thread_id() and a:warp_id() count from the agent's first thread and warp.
function Kernel:agent(name, opts, fn)
  if type(opts) ~= "table" or math.type(opts.warps) ~= "integer" then raise("agent: expected {warps = n}") end
  local a = {
    name = name, num_warps = opts.warps, num_threads = 32 * opts.warps,
    thread_id = function() return tl.op1("tile.agent_thread_id", {}, tl.i32) end,
    warp_id = function() return tl.op1("tile.agent_warp_id", {}, tl.i32) end,
  }
  return region_op("tile.agent", { name = name, num_warps = opts.warps, warp_id = opts.warp_id }, fn, a)
end

function tl.elect_one(fn) region_op("tile.elect_one", nil, fn) end
function tl.elect() return tl.op1("tile.elect", {}, tl.i1) end

-- }===================================================================

-- {===================================================================
-- Synchronization, mbarriers, bulk copies
-- ====================================================================

local function op0(name, opds, attrs) tl.op(name, opds or {}, {}, attrs) end

function tl.barrier() op0("tile.barrier") end
function tl.named_barrier_sync(id, count) op0("tile.named_barrier_sync", { i32(id, "barrier id"), i32(count, "thread count") }) end
function tl.named_barrier_arrive(id, count) op0("tile.named_barrier_arrive", { i32(id, "barrier id"), i32(count, "thread count") }) end
function tl.cluster_arrive(opts) op0("tile.cluster_arrive", nil, { relaxed = (opts or {}).relaxed }) end
function tl.cluster_wait() op0("tile.cluster_wait") end
function tl.cluster_sync()
  tl.cluster_arrive()
  tl.cluster_wait()
end
function tl.mapa(p, rank)
  local i = check_ptr(p, "mapa")
  return tl.op1("tile.mapa", { p, i32(rank, "rank") }, tl.ptr(i.elem, "cluster"))
end
function tl.fence(scope) op0("tile.fence", nil, { scope = scope or "gpu" }) end
function tl.fence_proxy_async(space) op0("tile.fence_proxy_async", nil, { space = space }) end
-- programmatic dependent launch (k:launch{pdl = true}): wait for the grids
-- this one depends on; let the grids that depend on this one launch
function tl.griddepcontrol_wait() op0("tile.griddepcontrol_wait") end
function tl.griddepcontrol_launch_dependents() op0("tile.griddepcontrol_launch_dependents") end
function tl.fence_mbarrier_init() op0("tile.fence_mbarrier_init") end

function tl.mbarrier_init(bar, count) op0("tile.mbarrier_init", { bar, i32(count, "count") }) end
-- tl.mbarrier_arrive(bar [, count] [, {scope = "cta" | "cluster"}])
function tl.mbarrier_arrive(bar, count, opts)
  if type(count) == "table" and not is_value(count) then count, opts = nil, count end
  op0("tile.mbarrier_arrive", { bar, count and i32(count, "count") or nil }, { scope = (opts or {}).scope })
end
function tl.mbarrier_arrive_expect_tx(bar, bytes, opts)
  op0("tile.mbarrier_arrive_expect_tx", { bar, i32(bytes, "bytes") }, { scope = (opts or {}).scope })
end
function tl.mbarrier_expect_tx(bar, bytes) op0("tile.mbarrier_expect_tx", { bar, i32(bytes, "bytes") }) end
function tl.mbarrier_try_wait(bar, parity, opts)
  return tl.op1("tile.mbarrier_try_wait", { bar, i32(parity, "parity") }, tl.i1, { scope = (opts or {}).scope })
end
function tl.mbarrier_test_wait(bar, parity, opts)
  return tl.op1("tile.mbarrier_test_wait", { bar, i32(parity, "parity") }, tl.i1, { scope = (opts or {}).scope })
end
function tl.mbarrier_wait(bar, parity, opts)
  op0("tile.mbarrier_wait", { bar, i32(parity, "parity") }, { scope = (opts or {}).scope })
end
function tl.mbarrier_inval(bar) op0("tile.mbarrier_inval", { bar }) end

-- tl.bulk_copy(dst, src, bytes [, bar]): global -> shared completes on bar; shared -> global
-- joins the current bulk group (tl.bulk_commit, tl.bulk_wait).
function tl.bulk_copy(dst, src, bytes, bar)
  local di, si = check_ptr(dst, "bulk_copy"), check_ptr(src, "bulk_copy")
  bytes = i32(bytes, "bytes")
  if si.space == "global" then
    if not bar then raise("bulk_copy: a copy into shared memory completes on an mbarrier (4th argument)") end
    op0("tile.bulk_copy_g2s", { dst, src, bytes, bar })
  elseif di.space == "global" then
    op0("tile.bulk_copy_s2g", { dst, src, bytes })
  else
    raise(("bulk_copy: copies global -> shared or shared -> global, not %s -> %s"):format(si.space, di.space))
  end
end
function tl.bulk_commit() op0("tile.bulk_commit") end
function tl.bulk_wait(n, opts) op0("tile.bulk_wait", nil, { pending = n or 0, read = (opts or {}).read }) end

-- tl.cp_async(dst, src [, {size = 16, cache = "cg" | "ca", src_bytes = n}]): this
-- thread's asynchronous copy of size bytes (4, 8, 16) global -> shared in its
-- current group (src_bytes: only those read, the rest zero-filled);
-- tl.cp_async_commit() closes the group, tl.cp_async_wait(n) waits until at
-- most n of the thread's groups are in flight (the others' bytes are in shared
-- memory, for this thread; for others, after a barrier behind the wait).
function tl.cp_async(dst, src, opts)
  local di, si = check_ptr(dst, "cp_async"), check_ptr(src, "cp_async")
  if di.space ~= "shared" or si.space ~= "global" then
    raise(("cp_async: copies global -> shared, not %s -> %s"):format(si.space, di.space))
  end
  opts = opts or {}
  op0("tile.cp_async", { dst, src, opts.src_bytes and i32(opts.src_bytes, "src_bytes") or nil },
    { size = opts.size, cache = opts.cache })
end
function tl.cp_async_commit() op0("tile.cp_async_commit") end
function tl.cp_async_wait(n) op0("tile.cp_async_wait", nil, { pending = n or 0 }) end

-- }===================================================================

-- tl.printf(format, ...): CUDA's device printf from every thread that runs
-- it (tile.printf; vprintf once lowered): C's format, the values in order;
-- a Lua integer is an i32 (an i64 beyond its range), a Lua float an f64.
-- The verifier checks the format against them ("%d" takes 32 bits, "%lld"
-- 64, "%f" a float, "%p" a pointer). On the CPU emulator (--emulate) each
-- thread's line is printed in lane order.
function tl.printf(fmt, ...)
  if type(fmt) ~= "string" then raise(("printf: the format must be a string, got %s"):format(type(fmt))) end
  local opds = {}
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    if math.type(v) == "integer" then
      v = tl.const(v, (v >= -0x80000000 and v <= 0x7fffffff) and tl.i32 or tl.i64)
    elseif type(v) == "number" then
      v = tl.const(v, tl.f64)
    elseif not is_value(v) then
      raise(("printf: argument %d must be an IR value or a number, got %s"):format(i, type(v)))
    end
    opds[i] = v
  end
  op0("tile.printf", opds, { format = fmt })
end

return M
