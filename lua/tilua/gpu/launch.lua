-- tilua.gpu.launch: launching compiled kernels (k:launch) and the device
-- (tl.device, tilua.gpu.device), added to tl when init.lua requires it.

local core = require "tilua.core"

local tl = require "tilua" -- the library being built (init.lua registers it before its rooms)

local M = {}

do -- (the module's definitions; an indented block)
  local raise = tl.raise
  local Kernel = tl.Kernel

  tl.device = require("tilua.gpu.device").attach(tl)
  tl.recipe = require "tilua.gpu.recipe"

  -- The element type a buffer passed for pointer parameter p must hold: its
  -- pointee, or nil for a byte pointer (ptr<i8> takes any buffer, as char *
  -- does). A buffer of bytes (i8: tl.device.from(tl.u8, string)) is raw
  -- memory and fits any pointer.
  local function pointee(p)
    local elem = p.type:info().elem
    if elem and elem ~= tl.i8 then return elem end
  end

  local function check_buffer(p, v)
    local want = pointee(p)
    if want and v.type and v.size ~= 1 and v.type ~= want then
      raise(("launch: argument '%s' is a buffer of %s, but the parameter points to %s (a buffer of %s or of bytes, or any buffer for ptr<i8>)")
        :format(p.name, tostring(v.type), tostring(want), tostring(want)))
    end
  end

  -- One launch argument {type, value} for parameter p.
  local function arg_for(p, v)
    local t = p.type
    local i = t:info()
    if i.kind == "ptr" then
      if type(v) == "table" and v.raw then
        check_buffer(p, v)
        return { "ptr", v.raw }
      end
      if math.type(v) == "integer" then return { "ptr", v } end
      raise(("launch: argument '%s' must be a device buffer, got %s"):format(p.name, type(v)))
    end
    if i.kind == "float" then
      if type(v) ~= "number" then raise(("launch: argument '%s' must be a number"):format(p.name)) end
      if i.width == 16 then return { "b16", tl.device.float_bits(v, i.name), p.name } end
      return { i.width == 32 and "f32" or "f64", v }
    end
    if i.kind == "int" or i.kind == "index" then
      if type(v) == "boolean" then v = v and 1 or 0 end
      if math.type(v) ~= "integer" then
        if type(v) == "number" and v == math.floor(v) then v = math.tointeger(v)
        else raise(("launch: argument '%s' must be an integer, got %s"):format(p.name, tostring(v))) end
      end
      return { "i" .. (i.width or 64), v, p.name }
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
    k._info = { ptx = k.ptx, block = spec.block, cluster = spec.cluster, grid = spec.grid, sizes = spec.sizes,
                static = op:attr_or_default "shared_static", smem = spec.smem,
                hang_sites = sites and table.concat(sites, "\n"), tile = op:attr("tileas.params"),
                persistent = launch and launch.persistent,
                tile_cluster = launch and launch.cluster,
                tile_launch = op:attr("tileas.launch") }
    if k._info.tile then
      local names, params = op:attr_or_default "arg_names", {}
      for i, a in ipairs(op:region(1):entry():args()) do params[i] = { name = names[i], type = a:type() } end
      k._info.params = params
      k._info.recipe = tl.recipe.tile_program(k.name, params, k._info.tile, k._info.tile_launch)
    end
    return k._info
  end
  tl.launch_info = launch_info -- the facts `tilua export` writes into C too

  -- {=== tile programs: tensors given as buffers with shapes, the kernel's
  -- parameters filled by its launch recipe (tilua.gpu.recipe, from the lowered
  -- kernel's tileas.params and tileas.launch); k._maps and k._workspace keep
  -- the tensor maps and the StreamK workspace across launches.
  -- tile_values: the recipe's grid of CTAs and values of the lowered kernel's
  -- parameters (the last launch's values table again when it saw the same
  -- inputs). tile_args: those values converted (arg_for), for the Lua path only
  -- (the C launch plan packs the values itself); the last launch's list again
  -- for the same values table (arg_for is a function of the parameter and the
  -- value, and the C launch reads a buffer's address and liveness when it
  -- packs it): 25-31 us a launch of the attention backward's programs on the
  -- dev machine before, its tensor maps' checks (docs/PERF.md s13bwd-3).
  local function tile_values(k, info, cfg)
    local grid, args = cfg.grid or 1, cfg.args or {}
    local ctas, values = tl.recipe.again(info.recipe, k, args, grid)
    if ctas then return ctas, values end
    return tl.recipe.values(info.recipe, info.params, k, args, tl.dims3(grid, "launch: grid"))
  end
  local function tile_args(k, info, values)
    local last = k._tile_args
    if last and last.info == info and last.values == values then return last.list end
    local list = {}
    for i, v in ipairs(values) do list[i] = arg_for(info.params[i], v) end
    k._tile_args = { info = info, values = values, list = list }
    return list
  end
  -- }===

  -- k:launch{ grid = n | {x,y,z}, block = ..., cluster = ..., smem = bytes, args = {...}, pdl = bool,
  --            stream = s, device = ordinal }
  -- block and cluster default to the kernel_spec (and must match it); smem is
  -- the dynamic part after the static allocations (default kernel_spec.smem);
  -- pdl: a programmatic dependent launch (it may start while the stream's
  -- previous kernel finishes; tl.griddepcontrol_wait in the kernel waits for it).
  -- Asynchronous: tl.device.synchronize() waits and reports failures.
  -- The launch plan of the compiled kernel (l_launch.c): argument kinds, dims
  -- and names decoded once, with the check of each tensor map parameter; nil
  -- when a parameter needs the Lua path (16-bit floats) or the launch carries
  -- debug-hangs records.
  -- A tile program's plan is of its lowered kernel's parameters (info.params),
  -- kept apart (k._tile_plan): the C fast path takes k._plan with the
  -- arguments as given, which a tile program's recipe converts first.
  local function launch_plan(k, info)
    local key, key_for, params = "_plan", "_plan_for", k.params -- (no string made a launch)
    if info.tile then key, key_for, params = "_tile_plan", "_tile_plan_for", info.params end
    if k[key_for] == k._fn then return k[key] end
    k[key_for], k[key] = k._fn, nil
    if info.hang_sites then return nil end
    local kinds, names, elems, maps = {}, {}, {}, {}
    for n, p in ipairs(params) do
      local i = p.type:info()
      local kind = i.kind == "ptr" and "ptr" or i.kind == "index" and "i64"
                   or i.kind == "int" and i.width > 1 and ("i" .. i.width)
                   or i.kind == "float" and (i.width == 32 or i.width == 64) and ("f" .. i.width)
                   or i.kind == "dialect" and i.name == "tile.tensor_map" and "tmap"
      if not kind then return nil end
      kinds[n], names[n] = kind, p.name
      if kind == "ptr" then elems[n] = pointee(p) or false end
      if kind == "tmap" then maps[n] = function(v) tl.tensor_map_arg(p, v) end end -- the one check of a map
    end
    local sizes = {} -- kernel_spec.sizes by position
    for n, p in ipairs(params) do sizes[n] = info.sizes and info.sizes[p.name] or false end
    k[key] = core.launch_plan(k._fn, { kinds = kinds, names = names, elems = elems, maps = maps, sizes = sizes,
                                       block = info.block,
                                       cluster = info.cluster, grid = info.grid, static = info.static, smem = info.smem,
                                       name = k.name })
    return k[key]
  end

  -- The sizes the kernel accepts (kernel_spec.sizes: an integer argument that
  -- must be the grid's threads or CTAs), checked as the plan checks them
  -- (l_launch.c); an argument that is no integer is launch_args' to refuse.
  local function check_sizes(k, info, grid, args)
    local ctas = grid[1] * grid[2] * grid[3]
    local threads = ctas * info.block[1] * info.block[2] * info.block[3]
    for i, p in ipairs(k.params) do
      local rel = info.sizes[p.name]
      local a = args[i]
      if a == nil then a = args[p.name] end
      local v = rel and type(a) == "number" and math.tointeger(a)
      local want = rel == "grid_threads" and threads or ctas
      if v and v ~= want then
        raise(("launch: kernel '%s' takes %s = the grid's %s (%d: its kernel_spec.sizes), got %d"):format(k.name,
          p.name, rel == "grid_threads" and "threads" or "CTAs", want, v))
      end
    end
  end

  -- The kernel's module and function on device `dev`: loaded there once per
  -- compile; k._fn (and the launch plan made from it) follow the launch's device.
  local function on_device(k, dev)
    if k._fn and k._dev == dev then return end
    local per = k._per_device or {}
    k._per_device = per
    if k._fn and k._dev then
      per[k._dev] = { ptx = k.ptx, module = k._module, fn = k._fn, plan = k._plan, plan_for = k._plan_for }
    end
    local e = per[dev]
    if e and e.ptx == k.ptx then
      k._module, k._fn, k._plan, k._plan_for = e.module, e.fn, e.plan, e.plan_for
    else
      k._module = core.module_load(k.ptx, dev)
      k._fn, k._plan, k._plan_for = k._module:func(k.name), nil, nil
    end
    k._dev = dev
  end

  -- The slow path of k:launch (compiling, loading, tile programs, the checks
  -- of block and cluster, the plan's making); the fast one is C (l_launch.c:
  -- core.launch_fast), which takes k._plan when it is current.
  local function launch(self, cfg)
    cfg = cfg or {}
    if not self.ptx then self:compile() end
    local info = launch_info(self)
    -- on cfg.device, else the current device (tl.device.use); the emulator is one device
    if not tl.options.emulate and core.device_available() then on_device(self, cfg.device or core.device_current()) end
    if self._fn and cfg.block == nil and cfg.cluster == nil and not (info.tile and tl.options.emulate) then -- the fast path
      local plan = launch_plan(self, info)
      if plan and info.tile then -- (the recipe's values: tensor maps, buffers, dims; its grid of CTAs)
        local grid, values = tile_values(self, info, cfg)
        plan:launch(grid, values, cfg.smem, cfg.stream, cfg.pdl)
        return self
      elseif plan then
        plan:launch(cfg.grid or 1, cfg.args or {}, cfg.smem, cfg.stream, cfg.pdl)
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
    if info.tile then
      local values
      grid, values = tile_values(self, info, cfg)
      targs = tile_args(self, info, values)
    else grid = tl.dims3(cfg.grid or 1, "launch: grid") end
    for i = 1, 3 do
      if grid[i] % cluster[i] ~= 0 then raise(("launch: grid dimension %d (%d) is not a multiple of the cluster's (%d)"):format(i, grid[i], cluster[i])) end
    end
    local fixed = info.grid
    if fixed and (grid[1] ~= fixed[1] or grid[2] ~= fixed[2] or grid[3] ~= fixed[3]) then
      raise(("launch: kernel '%s' runs on the grid {%d, %d, %d} only (its kernel_spec.grid), got {%d, %d, %d}"):format(
        self.name, fixed[1], fixed[2], fixed[3], grid[1], grid[2], grid[3]))
    end
    if info.sizes and not info.tile then check_sizes(self, info, grid, cfg.args or {}) end
    local static, dyn = info.static, cfg.smem or info.smem
    if tl.options.emulate then -- on the CPU emulator (tilua.gpu.emulated), with the same arguments
      require("tilua.gpu.emulated").launch(tl, self, grid, targs or launch_args(self, cfg.args))
      return self
    end
    self._fn:launch({ grid = grid, block = block, cluster = cluster, static = static, smem = dyn, name = self.name,
                      hang_sites = info.hang_sites, pdl = cfg.pdl, stream = cfg.stream },
                    targs or launch_args(self, cfg.args))
    return self
  end
  Kernel.launch = core.launch_fast(launch)

  -- k:max_active_clusters([smem]) -> how many clusters of the kernel (its
  -- block, cluster and shared memory) can be resident at once on the device
  -- (cuOccupancyMaxActiveClusters): the size of a persistent grid of clusters.
  function Kernel:max_active_clusters(smem)
    if not self.ptx then self:compile() end
    if not tl.device.available() then raise("no GPU: " .. core.device_error()) end
    local info = launch_info(self)
    on_device(self, core.device_current())
    return self._fn:max_active_clusters { block = info.block, cluster = info.cluster,
                                          smem = info.static + (smem or info.smem) }
  end

  -- k:run(cfg): k:launch(cfg), then wait for it (failures raise here).
  function Kernel:run(cfg)
    self:launch(cfg)
    tl.device.synchronize()
    return self
  end
end

return M
