-- tilua.gpu.recipe: the launch recipe of a compiled kernel -- what a host does to
-- launch it, written as data: the inputs it takes, how each kernel parameter
-- is filled from them, the grid and the workspace. tilua's launchers run it
-- (k:launch of a tile program, the stdlib GEMM's g:run) and `tilua export`
-- writes the same recipe as C (lua/tilua/gpu/export.lua), so the exported host
-- code and the Lua launcher cannot disagree. A kernel whose sizes are runtime
-- values has expressions where a compile-time kernel has constants, and its
-- export serves every size.
--
--   recipe = {
--     inputs = { input, ... },   what the launcher takes, by name:
--        { name, kind = "tensor", rank = r }   a buffer with its shape (and strides)
--        { name, kind = "buffer" }             a device buffer (its address)
--        { name, kind = "scalar", default = v } a number passed to a parameter
--        { name = "programs", kind = "programs" } the grid of tile programs
--        { name = "workspace", kind = "workspace" } zeroed device memory, kept across launches
--     args = { fill, ... },      one per kernel parameter, in order:
--        { "map", input [, shape = {E...}] }  a tensor map of the parameter's type over the
--                                             input (a tensor: its shape and strides; a
--                                             buffer: the shape given, row-major)
--        { "ptr", input }                     the input's device address
--        { "int", E }                         an integer
--        { "scalar", input }                  the scalar input
--        { "workspace" }                      the workspace's address
--     grid = { E, E, E },        in CTAs
--     workspace = E,             bytes (nil: no workspace)
--     checks = { check, ... },   what a launch must be, in order (the first that fails is the error):
--        { "programs", {x, y, z}, what }   the grid of programs it was planned for
--        { "flat_z", what }                z = 1 (a kernel that does not read program_id("z"))
--        { "at_least", E, n, what }        E >= n ("launch: <what> is 0, less than 1")
--        { "equal", E, E2, what }          E = E2 (a tensor's dim the kernel was compiled for, or
--                                          two tensors that must agree: "launch: <what> is 64, not 128")
--        { "multiple", E, E2, what }       E a multiple of E2 ("launch: <what> is 3, not a multiple of 2")
--     pdl = true,                a programmatic dependent launch (the stdlib GEMM's default)
--   }
--   E = an integer | { "dim", tensor, d } | { "stride", tensor, d }  (d 0-based; elements)
--     | { "programs", axis }  (1..3) | { "sms" } (the device's SMs)
--     | { "clusters" }  (how many clusters of the kernel can be resident at once:
--                        cuOccupancyMaxActiveClusters; a GPC holds a whole number of them)
--     | { "add" | "sub" | "mul" | "div" | "min" | "max", E, E }      (div: floor)
--
-- A fill these expressions cannot say (a scheduler's Params planned at launch
-- for a kernel of runtime sizes, say) is a new kind here: evaluated in Lua by
-- calling the C that computes it (src/sched), and written by export.lua as a
-- call of the same C, which the export copies as it copies tensor_map.h
-- (export.lua's RUNTIME list), so that it still has one home.
--
-- R.values(recipe, params, state, inputs) -> grid, values: the grid and one
-- Lua value per kernel parameter (tensor maps, addresses, numbers) for
-- k:launch; state (the kernel or the GEMM object) keeps the tensor maps made
-- (state._maps) and the workspace (state._workspace) across launches.

-- R = require "tilua.gpu.recipe": R.values, R.value, R.tile_program (tl.recipe).
local core = require "tilua.core"
local tl = require "tilua" -- the library being built (init.lua registers it before its rooms)

local raise = tl.raise
local R = {}

-- {=== inputs

-- A tensor input: {buffer, {dims}} or {buffer = buf, shape = {dims} [, strides = {elements}]}.
local function tensor_arg(name, v)
  if type(v) ~= "table" then raise(("launch: tensor '%s' must be {buffer, {dims}} or {buffer =, shape =}, got %s"):format(name, type(v))) end
  local buf, shape = v.buffer or v[1], v.shape or v[2]
  if type(buf) ~= "table" or not buf.raw then raise(("launch: tensor '%s' needs a device buffer"):format(name)) end
  if type(shape) ~= "table" or #shape < 1 then raise(("launch: tensor '%s' needs its shape {dims}"):format(name)) end
  local strides = v.strides
  if not strides then -- row-major
    strides = { [#shape] = 1 }
    for d = #shape - 1, 1, -1 do strides[d] = strides[d + 1] * shape[d + 1] end
  end
  return { buffer = buf, shape = shape, strides = strides }
end

R.tensor_arg = tensor_arg -- (name, v) -> {buffer, shape, strides}: a launch's tensor read as the recipes read it

-- The current device (nil: none to name).
local function device_now()
  if tl.options.emulate or not core.device_available() then return nil end
  return core.device_current()
end

-- The environment of one launch: inputs read (and checked) once, on demand.
local function env_of(recipe, inputs, programs, state)
  local env, kinds = { programs = programs }, {}
  for _, i in ipairs(recipe.inputs) do kinds[i.name] = i end
  local tensors = {}
  function env.tensor(name)
    if not tensors[name] then
      local v = inputs[name]
      if v == nil then raise(("launch: missing tensor '%s'"):format(name)) end
      tensors[name] = tensor_arg(name, v)
    end
    return tensors[name]
  end
  function env.input(name)
    local i = kinds[name]
    if i.kind == "tensor" then return env.tensor(name) end
    local v = inputs[name]
    if v == nil then v = i.default end
    if v == nil then raise(("launch: missing %s '%s'"):format(i.kind == "buffer" and "buffer" or "argument", name)) end
    return v
  end
  function env.sms()
    env.sm_count = env.sm_count or tl.device.sm_count()
    return env.sm_count
  end
  -- (the kernel's, kept per device: a launch that reads it reads the device's SM
  -- count too, so that the next launch on another device evaluates both again)
  function env.clusters()
    if tl.options.emulate then return env.sms() end -- (the emulator's CTAs are all resident)
    env.sms()
    if not env.cluster_count then
      local dev = device_now() or -1
      if type(state.max_active_clusters) ~= "function" then
        raise("launch: a grid of the clusters resident at once needs its kernel (the recipe's state has no max_active_clusters)")
      end
      state._max_clusters = state._max_clusters or {}
      state._max_clusters[dev] = state._max_clusters[dev] or state:max_active_clusters()
      env.cluster_count = state._max_clusters[dev]
    end
    return env.cluster_count
  end
  return env
end

local function eval(e, env)
  if math.type(e) == "integer" then return e end
  local op = e[1]
  if op == "dim" then return env.tensor(e[2]).shape[e[3] + 1] end
  if op == "stride" then return env.tensor(e[2]).strides[e[3] + 1] end
  if op == "programs" then return env.programs[e[2]] end
  if op == "sms" then return env.sms() end
  if op == "clusters" then return env.clusters() end
  local a, b = eval(e[2], env), eval(e[3], env)
  if op == "add" then return a + b elseif op == "sub" then return a - b elseif op == "mul" then return a * b
  elseif op == "div" then return a // b elseif op == "min" then return math.min(a, b) end
  assert(op == "max", "a recipe expression of an unknown kind")
  return math.max(a, b)
end

-- }===

-- {=== the values of a launch

local function copy(list) return type(list) == "table" and table.move(list, 1, #list, 1, {}) or list end

-- The tensor map of parameter p over an input: made once per buffer, shape
-- and strides (state._maps[i]), through tl.device.tensor_map (tensor_map.h's rules).
local function map_value(state, i, p, fill, env)
  local v = env.input(fill[2])
  local buffer, shape, strides
  if fill.shape then
    buffer, shape = v, {}
    for d, e in ipairs(fill.shape) do shape[d] = eval(e, env) end
  else
    buffer, shape, strides = v.buffer, v.shape, v.strides
  end
  state._maps = state._maps or {}
  local c = state._maps[i]
  local same = c and c.buffer == buffer and #c.shape == #shape
  for d = 1, same and #shape or 0 do
    same = same and c.shape[d] == shape[d] and (not strides or c.strides[d] == strides[d])
  end
  if same then return c.map end
  local m = tl.device.tensor_map { buffer = buffer, type = p.type, shape = shape, strides = strides }
  -- (copies: the shape and strides are the caller's tables, which it may change in place)
  state._maps[i] = { buffer = buffer, shape = copy(shape), strides = copy(strides), map = m }
  return m
end

-- The workspace: allocated and zeroed at the first launch, then kept (a
-- StreamK fixup leaves its counters at zero for the next launch).
local function workspace(recipe, state, env)
  local bytes = math.max(4, eval(recipe.workspace, env))
  local w = state._workspace
  if not w or w.bytes < bytes then
    if w then w:free() end
    w = tl.device.alloc(tl.i32, (bytes + 3) // 4)
    w:fill(0)
    state._workspace = w
  end
  return w
end

-- R.CHECKS: a check on values: when it fails (as C, which export.lua writes)
-- and what its message says after "launch: <what> is <E>".
R.CHECKS = { at_least = { fails = "%s < %s", says = ", less than " }, equal = { fails = "%s != %s", says = ", not " },
             multiple = { fails = "%s %% %s != 0", says = ", not a multiple of " } }

local function check(c, programs, env)
  local kind = c[1]
  if R.CHECKS[kind] then
    local a, b = eval(c[2], env), eval(c[3], env)
    local bad = (kind == "at_least" and a < b) or (kind == "equal" and a ~= b) or (kind == "multiple" and a % b ~= 0)
    if bad then raise(("launch: %s is %d%s%d"):format(c[4], a, R.CHECKS[kind].says, b)) end
    return
  end
  if kind == "flat_z" then
    if programs[3] > 1 then
      raise(("launch: %s does not read program_id(\"z\"): a grid of programs with z = %d would run each of its programs %d times"):format(
        c[2], programs[3], programs[3]))
    end
    return
  end
  local want = c[2]
  if programs[1] ~= want[1] or programs[2] ~= want[2] or programs[3] ~= (want[3] or 1) then
    raise(("launch: %s was planned for a grid of programs {%d, %d}, got {%d, %d, %d}"):format(
      c[3], want[1], want[2], programs[1], programs[2], programs[3]))
  end
end

-- The value of parameter i.
local function value(recipe, params, state, env, i)
  local fill = recipe.args[i]
  local kind = fill[1]
  if kind == "map" then return map_value(state, i, params[i], fill, env) end
  if kind == "ptr" then
    local v = env.input(fill[2])
    return v.buffer or v
  end
  if kind == "int" then return eval(fill[2], env) end
  if kind == "scalar" then return env.input(fill[2]) end
  return workspace(recipe, state, env)
end

-- R.value(recipe, params, state, inputs, i [, programs]) -> the value of parameter i alone
function R.value(recipe, params, state, inputs, i, programs)
  return value(recipe, params, state, env_of(recipe, inputs or {}, programs or { 1, 1, 1 }), i)
end

-- A tensor input as the last launch read it: its buffer, and copies of its
-- shape and strides (the table is its owner's, who may change it in place).
local function snapshot(v)
  if type(v) ~= "table" then return v end
  return { buffer = v.buffer or v[1], shape = copy(v.shape or v[2]), strides = copy(v.strides) }
end

-- Whether grid (n or {x [, y [, z]]}: a launch's, as tl.dims3 reads it) is the grid of programs
-- lp (the last launch's, positive integers): no table made.
local mtype = math.type
local function same_grid(lp, grid)
  if type(grid) ~= "table" then return grid == lp[1] and lp[2] == 1 and lp[3] == 1 and mtype(grid) == "integer" end
  local x, y, z = grid[1] or grid.x or 1, grid[2] or grid.y or 1, grid[3] or grid.z or 1
  return x == lp[1] and y == lp[2] and z == lp[3] and mtype(x) == "integer" and mtype(y) == "integer"
         and mtype(z) == "integer"
end
-- (the inputs compared in C, core.same_inputs: a recipe's names and which are tensors listed once)
local input_lists = setmetatable({}, { __mode = "k" })

-- Whether a launch of recipe with inputs and programs gives what the last one
-- (state._last) gave: the same recipe, grid of programs and inputs (the same
-- buffers and numbers; a tensor input the same buffer with the same shape and
-- strides, compared with the copies the last launch kept), and, when it read
-- the device's SM count (a persistent grid), the same current device. (A tile
-- program's launches on the same tensors, each with new tables of the same
-- shapes, convert nothing: 12-14 us a launch of the attention backward's
-- programs on the dev machine before, docs/PERF.md s13bwd-3; the comparison in
-- C and no table made for the grid: docs/PERF.md, the twenty-fifth session.)
local function same_as_last(last, recipe, inputs, programs)
  if not last or last.recipe ~= recipe then return false end
  if last.sms and (last.device == nil or last.device ~= device_now()) then return false end
  if not same_grid(last.programs, programs) then return false end
  local l = input_lists[recipe]
  if not l then
    l = { names = {}, tensors = {} }
    for n, i in ipairs(recipe.inputs) do l.names[n], l.tensors[n] = i.name, i.kind == "tensor" end
    input_lists[recipe] = l
  end
  return core.same_inputs(l.names, l.tensors, last.inputs, inputs)
end

-- R.again(recipe, state, inputs, grid) -> the last launch's grid of CTAs and values
-- when a launch of recipe with inputs on grid (n or {x, y, z}, tl.dims3's forms)
-- is like it, else nil (k:launch's first try: no table made)
function R.again(recipe, state, inputs, grid)
  local last = state._last
  if same_as_last(last, recipe, inputs, grid) then return last.grid, last.values end
end

-- R.values(recipe, params, state, inputs [, programs]) -> grid {x, y, z}, values
-- (the caller's to read, not to change: a launch like the last gets the same
-- tables back, which is what makes a loop of g:run on the same operands cheap)
function R.values(recipe, params, state, inputs, programs)
  programs = programs or { 1, 1, 1 }
  inputs = inputs or {}
  local last = state._last
  if same_as_last(last, recipe, inputs, programs) then return last.grid, last.values end
  local env = env_of(recipe, inputs, programs, state)
  for _, c in ipairs(recipe.checks or {}) do check(c, programs, env) end
  local values = {}
  for i = 1, #recipe.args do values[i] = value(recipe, params, state, env, i) end
  local grid = {}
  for d = 1, 3 do grid[d] = eval(recipe.grid[d] or 1, env) end
  local seen = {}
  for _, i in ipairs(recipe.inputs) do
    seen[i.name] = i.kind == "tensor" and snapshot(inputs[i.name]) or inputs[i.name]
  end
  state._last = { recipe = recipe, programs = { programs[1], programs[2], programs[3] }, inputs = seen,
                  sms = env.sm_count ~= nil, device = env.sm_count ~= nil and device_now() or nil, grid = grid,
                  values = values }
  return grid, values
end

-- }===

-- {=== the recipe of a tile program: its lowered kernel's tileas.params
-- (how each parameter is filled) and tileas.launch (persistent, cluster,
-- StreamK workers and workspace)

-- R.tile_program(name, params, entries, L) -> recipe (L.transpose = {X, Y}: a
-- transpose by TMA or in pairs, whose launch checks the two tensors' row strides and says
-- how to opt out)
function R.tile_program(name, params, entries, L)
  L = L or {}
  local r, seen = { inputs = {}, args = {} }, {}
  local function input(i)
    if not seen[i.name] then
      seen[i.name] = i
      r.inputs[#r.inputs + 1] = i
    end
  end
  local ranks, eb = {}, {}
  for _, entry in ipairs(entries) do -- a tensor's rank: its highest dim or stride entry, or its map's
    local kind, t, d = entry:match "^(%a+):([^:]*):?(%d*)$"
    if kind == "dim" or kind == "stride" then ranks[t] = math.max(ranks[t] or 0, tonumber(d) + 1) end
  end
  for i, entry in ipairs(entries) do
    local kind, t, d = entry:match "^(%a+):([^:]*):?(%d*)$"
    local p = params[i]
    if entry == "workspace" then
      r.args[i] = { "workspace" }
    elseif kind == "map" then
      local mi = tl.tensor_map_info(p.type)
      ranks[t], eb[t] = math.max(ranks[t] or 0, mi.rank), mi.elem:info().bytes
      input { name = t, kind = "tensor" }
      r.args[i] = { "map", t }
    elseif kind == "ptr" then
      input { name = t, kind = "tensor" }
      r.args[i] = { "ptr", t }
    elseif kind == "dim" or kind == "stride" then
      input { name = t, kind = "tensor" }
      r.args[i] = { "int", { kind, t, tonumber(d) } }
    elseif kind == "programs" then
      r.args[i] = { "int", { "programs", ({ x = 1, y = 2, z = 3 })[t] } }
    else -- arg:name, a scalar
      input { name = t, kind = "scalar" }
      r.args[i] = { "scalar", t }
    end
  end
  for _, i in ipairs(r.inputs) do i.rank = i.kind == "tensor" and ranks[i.name] or nil end
  table.insert(r.inputs, 1, { name = "programs", kind = "programs" })
  if L.workspace_bytes then r.inputs[#r.inputs + 1] = { name = "workspace", kind = "workspace" } end
  r.workspace = L.workspace_bytes
  local px, py, pz = { "programs", 1 }, { "programs", 2 }, { "programs", 3 }
  r.checks = {}
  if not L.programs_z then r.checks[1] = { "flat_z", ("tile kernel '%s'"):format(name) } end
  for _, t in ipairs(L.transpose or {}) do -- a transpose by TMA or in pairs (transpose.lua): 16-byte rows
    local align = 16 // (eb[t] or 2) -- (elements of 16 bytes: 8 of 16 bits, 4 of 32)
    r.checks[#r.checks + 1] = { "multiple", { "stride", t, 0 }, align, ("tile kernel '%s' transposes in 16-byte row pieces (TMA or pairs), which need"
      .. " rows of a multiple of 16 bytes (compiled with tl.options.tile_transpose = false, it goes through the registers"
      .. " at any size): the row stride of %s in %d-bit elements"):format(name, t, 128 // align) }
  end
  if L.workers then -- StreamK: the grid of programs it was planned for, on its workers
    r.grid = { L.workers, 1, 1 }
    r.checks[#r.checks + 1] = { "programs", { L.programs[1], L.programs[2], 1 }, ("%s kernel '%s'"):format(L.schedule, name) }
    return r
  end
  if L.linear then -- a CTA a program, along x
    r.grid = { { "mul", { "mul", px, py }, pz }, 1, 1 }
    return r
  end
  -- a program of a cluster of n CTAs (along x) runs on all n; a persistent
  -- kernel on at most one CTA per SM, whole clusters, at least one, and no more
  -- clusters than are resident at once (a GPC holds a whole number of them: 30
  -- of 4 on an H200's 132 SMs; a 33rd would wait for a whole cluster's share of
  -- the persistent loop, docs/PERF.md)
  local n = L.cluster or 1
  if L.persistent and L.per_sm then -- per_sm CTAs an SM, a program a CTA at most (a program without a dot)
    r.grid = { { "max", 1, { "min", { "mul", { "sms" }, L.per_sm }, { "mul", { "mul", px, py }, pz } } }, 1, 1 }
  elseif L.persistent and L.schedule == "data_parallel" then -- a CTA a program (whole clusters), each its loop once
    r.grid = { { "mul", { "mul", { "mul", px, py }, pz }, n }, 1, 1 }
  elseif L.persistent then -- (max_ctas: so many CTAs at most, the split tail's workers; else the SMs)
    local units = { "mul", { "mul", { "mul", px, py }, pz }, n }
    local cap = L.max_ctas or { "sms" }
    if n > 1 then cap = { "min", cap, { "mul", { "clusters" }, n } } end
    r.grid = { { "max", n, { "mul", { "div", { "min", cap, units }, n }, n } }, 1, 1 }
  else
    r.grid = { { "mul", px, n }, py, pz }
  end
  return r
end

-- }===

return R
