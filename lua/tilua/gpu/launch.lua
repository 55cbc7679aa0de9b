-- tilua.gpu.launch: launching compiled kernels (k:launch) and the device
-- (tl.device, tilua.gpu.device), added to tl when init.lua requires it.

local core = require "tilua.core"

local tl = require "tilua" -- the library being built (init.lua registers it before its rooms)

local M = {}

do -- (the module's definitions; an indented block)
  local raise = tl.raise
  local Kernel = tl.Kernel

  tl.device = require("tilua.gpu.device").attach(tl)

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

  -- What every launch needs from the compiled kernel, computed once per compile.
  -- A tile program (tile-to-ptx) launches with the lowered kernel's parameters:
  -- `tile` lists how each is filled (its `tileas.params`), `params` them.
  local function launch_info(k)
    if k._info and k._info.ptx == k.ptx then return k._info end
    local op = k:lowered_op()
    local spec = assert(op:kernel_spec()) -- verified by the compile
    local sites = op:attr("hang_sites")
    local launch = op:attr_or_default "tileas.launch" -- (its fields read by their rows)
    k._info = { ptx = k.ptx, block = spec.block, cluster = spec.cluster,
                static = op:attr_or_default "shared_static", smem = spec.smem,
                hang_sites = sites and table.concat(sites, "\n"), tile = op:attr("tileas.params"),
                persistent = launch and launch.persistent,
                tile_cluster = launch and launch.cluster,
                tile_launch = op:attr("tileas.launch") }
    if k._info.tile then
      local names, params = op:attr_or_default "arg_names", {}
      for i, a in ipairs(op:region(1):entry():args()) do params[i] = { name = names[i], type = a:type() } end
      k._info.params = params
    end
    return k._info
  end

  -- {=== tile programs: tensors given as buffers with shapes

  -- A tensor argument: {buffer, {dims}} or {buffer = buf, shape = {dims} [, strides = {elements}]}.
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

  -- A StreamK kernel's workspace (tileas.launch's workspace_bytes): allocated
  -- and zeroed at its first launch, then kept; the tiles' counters start at 0
  -- and each tile's final split resets its own (stdlib/gemm.lua's fixup).
  local function streamk_workspace(k, L)
    if not k._workspace or k._workspace_for ~= k.ptx then
      if k._workspace then k._workspace:free() end
      k._workspace = tl.device.alloc(tl.i32, math.max(1, L.workspace_bytes // 4))
      k._workspace:fill(0)
      k._workspace_for = k.ptx
    end
    return k._workspace
  end

  -- The grid and arguments of a tile program's launch: cfg.grid is the grid
  -- of programs (what num_programs reads); a persistent kernel runs on at most
  -- one CTA per SM, a StreamK one on the workers it was planned for (and only
  -- for its grid of programs). Tensor maps are made once per buffer and shape.
  local function tile_launch(k, info, cfg)
    local args = cfg.args or {}
    local programs = tl.dims3(cfg.grid or 1, "launch: grid")
    local tensors, list = {}, {}
    local function tensor(name)
      if not tensors[name] then
        local v = args[name]
        if v == nil then raise(("launch: missing tensor '%s'"):format(name)) end
        tensors[name] = tensor_arg(name, v)
      end
      return tensors[name]
    end
    k._maps = k._maps or {}
    for i, entry in ipairs(info.tile) do
      local kind, name, dim = entry:match "^(%a+):([^:]*):?(%d*)$"
      if entry == "workspace" then kind = entry end
      local p = info.params[i]
      if kind == "map" then
        local t = tensor(name)
        local key = ("%s\0%s\0%s\0%s"):format(name, tostring(t.buffer.raw), table.concat(t.shape, ","), table.concat(t.strides, ","))
        local m = k._maps[key]
        if not m then
          m = tl.device.tensor_map { buffer = t.buffer, type = p.type, shape = t.shape, strides = t.strides }
          k._maps[key] = m
        end
        list[i] = { "tmap", m }
      elseif kind == "ptr" then
        list[i] = { "ptr", tensor(name).buffer.raw }
      elseif kind == "dim" then
        list[i] = { "i32", tensor(name).shape[tonumber(dim) + 1] }
      elseif kind == "stride" then
        list[i] = { "i64", tensor(name).strides[tonumber(dim) + 1] }
      elseif kind == "programs" then
        list[i] = { "i32", programs[({ x = 1, y = 2, z = 3 })[name]] }
      elseif kind == "workspace" then
        list[i] = { "ptr", streamk_workspace(k, info.tile_launch).raw }
      else -- arg:name, a scalar
        local v = args[name]
        if v == nil then raise(("launch: missing argument '%s'"):format(name)) end
        list[i] = arg_for(p, v)
      end
    end
    local L = info.tile_launch or {}
    if programs[3] > 1 and not L.programs_z then
      raise(("launch: tile kernel '%s' does not read program_id(\"z\"): a grid of programs with z = %d would run each of its programs %d times"):format(
        k.name, programs[3], programs[3]))
    end
    if L.workers then -- StreamK: the grid of programs it was planned for, on its workers
      if programs[1] ~= L.programs[1] or programs[2] ~= L.programs[2] or programs[3] ~= 1 then
        raise(("launch: %s kernel '%s' was planned for a grid of programs {%d, %d}, got {%d, %d, %d}"):format(
          L.schedule, k.name, L.programs[1], L.programs[2], programs[1], programs[2], programs[3]))
      end
      return { L.workers, 1, 1 }, list
    end
    if L.linear then return { programs[1] * programs[2] * programs[3], 1, 1 }, list end -- a CTA a program, along x
    -- a program of a cluster of n CTAs (along x) runs on all n
    local n = info.tile_cluster or 1
    local grid = { programs[1] * n, programs[2], programs[3] }
    if info.persistent then
      grid = { tl.device.persistent_grid(programs[1] * programs[2] * programs[3] * n) // n * n, 1, 1 }
      if grid[1] == 0 then grid[1] = n end
    end
    return grid, list
  end

  -- }===

  -- "file:line" of the launch in the user's script, for the reports of a kernel
  -- that hangs or fails.
  local function launch_site()
    local file, line = core.user_location()
    return file and ("%s:%d"):format(file, line) or nil
  end

  -- k:launch{ grid = n | {x,y,z}, block = ..., cluster = ..., smem = bytes, args = {...} }
  -- block and cluster default to the kernel_spec (and must match it); smem is
  -- the dynamic part after the static allocations (default kernel_spec.smem).
  -- Asynchronous: tl.device.synchronize() waits and reports failures.
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
    if self._fn and cfg.block == nil and cfg.cluster == nil and not info.tile then -- the fast path
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
    local grid, targs
    if info.tile then grid, targs = tile_launch(self, info, cfg)
    else grid = tl.dims3(cfg.grid or 1, "launch: grid") end
    for i = 1, 3 do
      if grid[i] % cluster[i] ~= 0 then raise(("launch: grid dimension %d (%d) is not a multiple of the cluster's (%d)"):format(i, grid[i], cluster[i])) end
    end
    local static, dyn = info.static, cfg.smem or info.smem
    if not self._fn then
      self._module = core.module_load(self.ptx)
      self._fn = self._module:func(self.name)
    end
    self._fn:launch({ grid = grid, block = block, cluster = cluster, smem = static + dyn, name = self.name,
                      where = launch_site(), hang_sites = info.hang_sites }, targs or launch_args(self, cfg.args))
    return self
  end

  -- k:run(cfg): k:launch(cfg), then wait for it (failures raise here).
  function Kernel:run(cfg)
    self:launch(cfg)
    tl.device.synchronize()
    return self
  end
end

return M
