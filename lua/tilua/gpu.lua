-- tilua.gpu: the authoring ops of real kernels, compiling kernels to PTX and
-- launching them. init.lua attaches it with one line: require("tilua.gpu").attach(tl).
--
--   ids          tl.thread_id("x"), tl.block_id, tl.block_dim, tl.grid_dim,
--                tl.cluster_id, tl.cluster_dim, tl.cluster_block_id, tl.cluster_grid_dim,
--                tl.cluster_rank(), tl.cluster_size(), tl.warp_id(), tl.lane_id(), tl.global_id("x")
--   pointers     p + i, p - i (elements), p:at(i), p:as(elem [, space]), tl.ptr_to_int, tl.int_to_ptr
--   memory       tl.load(p [, {vector = n, volatile = true}]) / p:load, tl.store(p, v) / p:store,
--                tl.atomic(kind, p, v [, {scope}]), tl.atomic_add/max/min/exch..., tl.atomic_cas
--   shared       k:shared(elem, {shape} | count [, {align}]) -> memref | ptr, m:ptr(i, j, ...),
--                k:dynamic_shared(elem [, {align}])
--   vectors      tl.extract(v, i), tl.vector_of(elem_type, {values})
--   warps        tl.elect_one(fn), tl.elect(), k:agent(name, {warps = n [, warp_id]}, fn(a))
--   sync         tl.barrier(), tl.named_barrier_sync/arrive(id, count), tl.cluster_arrive,
--                tl.cluster_wait, tl.cluster_sync, tl.mapa(p, rank), tl.fence(scope),
--                tl.fence_proxy_async([space]), tl.fence_mbarrier_init()
--   mbarriers    tl.mbarrier_init(bar, count), tl.mbarrier_arrive(bar [, count] [, {scope}]),
--                tl.mbarrier_arrive_expect_tx(bar, bytes), tl.mbarrier_expect_tx,
--                tl.mbarrier_try_wait(bar, parity) / test_wait / wait, tl.mbarrier_inval
--   bulk copies  tl.bulk_copy(dst, src, bytes [, bar]), tl.bulk_commit(), tl.bulk_wait(n [, {read}])
--   compiling    k:compile([pipeline]) -> PTX, tl.emit_ptx(module), tl.options (--emit, --stage,
--                --debug-hangs / tl.options.debug_hangs)
--   launching    k:launch{grid, block, cluster, smem, args}; tl.device (tilua.device)

local core = require "tilua.core"

local M = {}

function M.attach(tl)
  local raise, is_value = tl.raise, tl.is_value
  local Value = core.metatable("Value")
  local V = Value.__index
  local Kernel = tl.Kernel

  local function kind(v) return is_value(v) and v:type():kind() end
  local check_ptr -- below, with the loads
  local function info(v) return v:type():info() end
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
  function tl.load(p, opts)
    local i = check_ptr(p, "load")
    opts = opts or {}
    local rt = opts.vector and tl.vector(i.elem, opts.vector) or i.elem
    return tl.op1("tile.load", { p }, rt, { volatile = opts.volatile, cache = opts.cache, evict = opts.evict,
                                            nc = opts.nc, prefetch = opts.prefetch })
  end
  V.load = tl.load

  function tl.store(p, v, opts)
    local i = check_ptr(p, "store")
    if not is_value(v) then v = tl.const(v, i.elem) end
    tl.op("tile.store", { v, p }, {}, { volatile = (opts or {}).volatile })
  end
  V.store = tl.store

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

  function tl.extract(v, idx) return tl.op1("tile.extract", { v }, info(v).elem, { index = idx }) end
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

  -- }===================================================================

  -- {===================================================================
  -- Compiling to PTX; --emit and --stage
  -- ====================================================================

  tl.ptx_pipeline = "ptx"

  -- The effective options: tl.options (the host sets them from its own command
  -- line) over --emit=... / --stage=... among the script's arguments.
  local function options()
    local o = { emit = tl.options.emit, stage = tl.options.stage, debug_hangs = tl.options.debug_hangs }
    for _, a in ipairs(rawget(_G, "arg") or {}) do
      if type(a) == "string" then
        o.emit = o.emit or a:match "^%-%-emit=(.*)$"
        o.stage = o.stage or a:match "^%-%-stage=(.*)$"
        o.debug_hangs = o.debug_hangs or a == "--debug-hangs" or nil
      end
    end
    local dh = o.debug_hangs
    if dh ~= nil and dh ~= true and dh ~= false and (math.type(dh) ~= "integer" or dh <= 0) then
      raise("tl.options.debug_hangs: expected true or a number of milliseconds")
    end
    if o.emit and o.emit ~= "ir" and o.emit ~= "ptx" then raise(("--emit=%s: expected ir or ptx"):format(o.emit)) end
    return o
  end
  tl.effective_options = options

  -- tl.emit_ptx(module) -> PTX text (raises the emitter's diagnostics)
  function tl.emit_ptx(m)
    if getmetatable(m) == Kernel then m = m.module end
    local text, msg = core.emit_ptx(m)
    if not text then error(msg, 0) end
    return text
  end

  -- tl.ptxas(ptx [, arch]) -> true, log | false, log | nil, "ptxas not found ...":
  -- assembles the PTX with ptxas (TILUA_PTXAS, else /usr/local/cuda/bin/ptxas).
  function tl.ptxas(ptx, arch)
    local exe = os.getenv "TILUA_PTXAS"
    if not exe or exe == "" then
      local f = io.open("/usr/local/cuda/bin/ptxas", "r")
      if f then f:close() exe = "/usr/local/cuda/bin/ptxas" end
    end
    if not exe then return nil, "ptxas not found (set TILUA_PTXAS)" end
    local path = os.tmpname()
    local f = assert(io.open(path, "wb"))
    f:write(ptx)
    f:close()
    local p = io.popen(("'%s' -arch=%s -o /dev/null '%s' 2>&1"):format(exe, arch or "sm_90a", path))
    local log = p:read "a"
    local ok = p:close()
    os.remove(path)
    return ok == true, tl.ptx_log_lines(ptx, log, path)
  end

  -- ptxas names lines of a temporary file: say instead which script line the
  -- PTX line came from (the .loc before it), keeping the PTX line for reference.
  function tl.ptx_log_lines(ptx, log, path)
    local files, locs, n = {}, {}, 0
    local cur
    for line in (ptx .. "\n"):gmatch "(.-)\n" do
      n = n + 1
      local id, name = line:match '^%.file (%d+) "(.*)"$'
      if id then files[tonumber(id)] = name:gsub("\\(.)", "%1") end
      local f, l = line:match "^%s*%.loc (%d+) (%d+)"
      if f then cur = { tonumber(f), tonumber(l) } end
      locs[n] = cur
    end
    local esc = path and path:gsub("%p", "%%%0")
    return (log:gsub("ptxas ([^,\n]+), line (%d+); ", function(file, ln)
      if esc and not file:match("^" .. esc .. "$") then return nil end
      local at = locs[tonumber(ln)]
      local src = at and files[at[1]]
      if not src then return ("ptxas (PTX line %s): "):format(ln) end
      return ("%s:%d: ptxas (PTX line %s): "):format(src, at[2], ln)
    end))
  end

  -- Assemble ptx and say so under `name`: "ok", "skipped" without ptxas; raises when
  -- ptxas rejects it. Returns true, false (no ptxas) or raises.
  function tl.check_ptx(name, ptx)
    local ok, log = tl.ptxas(ptx)
    if ok == nil then
      print(("%s: ptxas check skipped: %s"):format(name, log))
      return false
    end
    if not ok then error(("%s: ptxas rejected the PTX:\n%s"):format(name, log), 0) end
    print(("%s: ptxas -arch=sm_90a: ok"):format(name))
    return true
  end

  -- Print what --emit / --stage ask for and exit 0; else return.
  local function honour(stages, ptx)
    local o = options()
    if not o.emit and not o.stage then return end
    local text
    if o.stage then
      for i = #stages, 1, -1 do
        if stages[i].name == o.stage or tostring(stages[i].index) == o.stage then text = stages[i].ir break end
      end
      if not text then
        local names = {}
        for _, s in ipairs(stages) do names[#names + 1] = s.name end
        raise(("--stage=%s: no such stage (stages: %s)"):format(o.stage, table.concat(names, ", ")))
      end
    elseif o.emit == "ptx" then
      text = ptx or tl.emit_ptx(tl.module())
    else
      text = stages[#stages].ir
      for i = #stages, 1, -1 do
        if stages[i].name ~= "emit-ptx" then text = stages[i].ir break end
      end
    end
    io.stdout:write(text)
    io.stdout:flush()
    os.exit(0, true)
  end

  local compile0 = tl.compile
  -- --stage and --emit=ir need the stages' IR text: keep it for them
  local function compile(m, pipeline, opts)
    local o = options()
    if o.stage or o.emit == "ir" then
      opts = setmetatable({ keep_stages = true }, { __index = opts })
    end
    return compile0(m, pipeline, opts)
  end
  -- tl.compile keeps its behaviour; with --emit or --stage it prints and exits.
  function tl.compile(m, pipeline, opts)
    local r = compile(m, pipeline, opts)
    local o = options()
    if o.emit or o.stage then
      local ptx = o.emit == "ptx" and not o.stage and tl.emit_ptx(r) or nil
      honour(tl.last_stages, ptx)
    end
    return r
  end

  -- The pipeline of k:compile: with tl.options.debug_hangs (or --debug-hangs) the
  -- debug-hangs pass runs last (a number: the milliseconds a wait spins before it
  -- gives up).
  local function pipeline_of(pipeline)
    local p, dh = pipeline or tl.ptx_pipeline, options().debug_hangs
    if dh == true then return p .. ",debug-hangs" end
    if dh then return ("%s,debug-hangs{ms=%d}"):format(p, dh) end
    return p
  end

  -- k:compile([pipeline]) -> PTX. Compiles a copy of the kernel's module, so
  -- the authoring IR stays as built; tl.last_stages gets every stage and the PTX
  -- as the last one ("emit-ptx"). k.lowered is the compiled module.
  function Kernel:compile(pipeline)
    local m = self.module:clone()
    compile(m, pipeline_of(pipeline))
    local t0 = os.clock()
    local ok, ptx = pcall(tl.emit_ptx, m)
    if not ok then error(ptx, 0) end
    local stages = tl.last_stages
    stages[#stages + 1] = { name = "emit-ptx", index = #stages, ms = (os.clock() - t0) * 1e3, changed = true, ir = ptx }
    self.lowered, self.ptx = m, ptx
    self._fn = nil
    honour(stages, ptx)
    return ptx
  end

  -- The compiled tile.kernel op of this kernel (after k:compile).
  function Kernel:lowered_op()
    for _, op in ipairs(self.lowered:region(1):entry():ops()) do
      if op:name() == "tile.kernel" and op:attr("sym_name") == self.name then return op end
    end
  end

  -- }===================================================================

  -- {===================================================================
  -- Launching
  -- ====================================================================

  tl.device = require("tilua.device").attach(tl)



  -- One launch argument {type, value} for parameter p.
  local function arg_for(p, v)
    local t = p.type
    local i = t:info()
    if i.kind == "ptr" then
      if type(v) == "table" and v.raw then return { "ptr", v.raw } end
      if math.type(v) == "integer" then return { "ptr", v } end
      raise(("launch: argument '%s' must be a device buffer, got %s"):format(p.name, type(v)))
    end
    if i.kind == "float" then
      if type(v) ~= "number" then raise(("launch: argument '%s' must be a number"):format(p.name)) end
      if i.width == 16 then return { "b16", tl.device.float_bits(v, i.name) } end
      return { i.width == 32 and "f32" or "f64", v }
    end
    if i.kind == "int" or i.kind == "index" then
      if type(v) == "boolean" then v = v and 1 or 0 end
      if math.type(v) ~= "integer" then
        if type(v) == "number" and v == math.floor(v) then v = math.tointeger(v)
        else raise(("launch: argument '%s' must be an integer, got %s"):format(p.name, tostring(v))) end
      end
      return { "i" .. (i.width or 64), v }
    end
    if i.kind == "dialect" and i.name == "tile.tensor_map" then return tl.tensor_map_arg(p, v) end
    raise(("launch: parameter '%s' of type %s cannot be passed"):format(p.name, tostring(t)))
  end

  local function launch_args(k, args)
    args = args or {}
    local list = {}
    for n, p in ipairs(k.params) do
      local v = args[n]
      if v == nil then v = args[p.name] end
      if v == nil then raise(("launch: missing argument '%s' (#%d)"):format(p.name, n)) end
      list[n] = arg_for(p, v)
    end
    if #args > #k.params then raise(("launch: %d arguments for %d parameters"):format(#args, #k.params)) end
    return list
  end

  -- k:launch{ grid = n | {x,y,z}, block = ..., cluster = ..., smem = bytes, args = {...} }
  -- block and cluster default to the kernel_spec (and must match it); smem is
  -- the dynamic part after the static allocations (default kernel_spec.smem).
  -- Asynchronous: tl.device.synchronize() waits and reports failures.
  -- What every launch needs from the compiled kernel, computed once per compile.
  local function launch_info(k)
    if k._info and k._info.ptx == k.ptx then return k._info end
    local op = k:lowered_op()
    local spec = assert(op:kernel_spec()) -- verified by the compile
    local sites = op:attr("hang_sites")
    k._info = { ptx = k.ptx, block = spec.block, cluster = spec.cluster,
                static = op:attr("shared_static") or 0, smem = spec.smem,
                hang_sites = sites and table.concat(sites, "\n") }
    return k._info
  end

  -- "file:line" of the launch in the user's script, for the reports of a kernel
  -- that hangs or fails.
  local function launch_site()
    local file, line = core.user_location()
    return file and ("%s:%d"):format(file, line) or nil
  end

  -- The launch plan of the compiled kernel (l_launch.c): argument kinds, dims
  -- and names decoded once; nil when a parameter needs the Lua path (tensor
  -- maps, 16-bit floats) or the launch carries debug-hangs records.
  local function launch_plan(k, info)
    if k._plan_for == k._fn then return k._plan end
    k._plan_for, k._plan = k._fn, nil
    if info.hang_sites then return nil end
    local kinds, names = {}, {}
    for n, p in ipairs(k.params) do
      local i = p.type:info()
      local kind = i.kind == "ptr" and "ptr" or i.kind == "index" and "i64"
                   or i.kind == "int" and i.width > 1 and ("i" .. i.width)
                   or i.kind == "float" and (i.width == 32 or i.width == 64) and ("f" .. i.width)
      if not kind then return nil end
      kinds[n], names[n] = kind, p.name
    end
    k._plan = core.launch_plan(k._fn, { kinds = kinds, names = names, block = info.block, cluster = info.cluster,
                                        static = info.static, smem = info.smem, name = k.name })
    return k._plan
  end

  function Kernel:launch(cfg)
    cfg = cfg or {}
    if not self.ptx then self:compile() end
    local info = launch_info(self)
    if self._fn and cfg.block == nil and cfg.cluster == nil then -- the fast path
      local plan = launch_plan(self, info)
      if plan then
        plan:launch(cfg.grid or 1, cfg.args or {}, cfg.smem)
        return self
      end
    end
    if not tl.device.available() then raise("no GPU: " .. core.device_error()) end
    local block, cluster = info.block, info.cluster
    local b, c = tl.dims3(cfg.block, "launch: block"), tl.dims3(cfg.cluster, "launch: cluster")
    for i = 1, 3 do
      if b and b[i] ~= block[i] then raise(("launch: block {%d,%d,%d} differs from the kernel's {%d,%d,%d}"):format(b[1], b[2], b[3], block[1], block[2], block[3])) end
      if c and c[i] ~= cluster[i] then raise(("launch: cluster {%d,%d,%d} differs from the kernel's {%d,%d,%d}"):format(c[1], c[2], c[3], cluster[1], cluster[2], cluster[3])) end
    end
    local grid = tl.dims3(cfg.grid or 1, "launch: grid")
    for i = 1, 3 do
      if grid[i] % cluster[i] ~= 0 then raise(("launch: grid dimension %d (%d) is not a multiple of the cluster's (%d)"):format(i, grid[i], cluster[i])) end
    end
    local static, dyn = info.static, cfg.smem or info.smem
    if not self._fn then
      self._module = core.module_load(self.ptx)
      self._fn = self._module:func(self.name)
    end
    self._fn:launch({ grid = grid, block = block, cluster = cluster, smem = static + dyn, name = self.name,
                      where = launch_site(), hang_sites = info.hang_sites }, launch_args(self, cfg.args))
    return self
  end

  -- }===================================================================
end

return M
