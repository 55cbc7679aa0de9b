-- tilua.dsl.tileprog: tile programs, the surface of the tileas dialect
-- (docs/tileprog.md). A kernel declares tiles and the library orchestrates
-- the warps. init.lua requires it last.
-- Tiles (values of a tile type) and tensors (!tileas.tensor parameters) are
-- kinds of values registered with kinds.register: the operators,
-- tl.load / tl.store, tl.select, v:cast ... of init.lua and dsl/*.lua take
-- them to the functions of this file.
--
--   kernels     tl.tile_kernel(name, {params, num_warps, cluster, target}),
--               tl.tensor(elem, rank [, tile_shape]), tl.program_id(d), tl.num_programs(d)
--   tiles       tl.zeros(shape [, elem]), tl.full(shape, x [, elem]), tl.iota(shape, dim),
--               tl.load(tensor, coords [, shape]), tl.store(tensor, coords, tile),
--               tl.alloc_tensor(shape, elem [, layout]), tl.copy(src, dst),
--               tl.convert_layout(x, layout), tl.extract(x, {indices})
--   compute     a + b, a - b, a * b, a / b, -a on tiles (scalars and size-1 dims
--               broadcast), tl.maximum / tl.minimum, a:lt(b) ..., a & b, a | b, tl.select,
--               x:cast(elem), tl.dot(a, b [, acc] [, opts]), tl.reduce(x, dim, kind),
--               tl.exp exp2 log log2 sqrt rsqrt abs rcp tanh erf sigmoid silu gelu gelu_tanh
--   shapes      tl.broadcast(x, shape), tl.expand_dim(x, dim), tl.extract_slice(x, offsets, sizes), tl.transpose(x)
--   loops       tl.for_tiles(extent, tile | {tile, stages}, inits..., fn(kk, ...))
--   agents      tl.agent(kind, {num_warps, stride, interleaved}, fn)
--
-- Every builder names the op it builds (tl.op1("tileas.dot", ...)); misuse
-- raises at the script's line (tl.raise), and the verifier (k:define) reports
-- the rest at the line that built the op.

local core = require "tilua.core"

local tl = require "tilua" -- the library being built (init.lua registers it before its rooms)
local kinds = require "tilua.dsl.kinds"

local M = {}

-- A kernel's schedule -> the `tileas.schedule` table (nil: persistent), or
-- nil and the error message (what: how the message names it). The same
-- rules for tl.tile_kernel's option and for the attribute read from textual
-- IR by convert-tileas-to-cutlass; default_workers() when workers is absent.
-- "dynamic" ({kind = "dynamic"}) claims the program ids at run time (an
-- atomic counter: convert-tileas-to-cutlass's loops.lua); "data_parallel"
-- launches a CTA a program (the persistent loop's code, run once a CTA: the
-- hardware hands out the CTAs as SMs free up, in the order of the programs);
-- "split_tail" walks whole programs in whole rounds of the persistent workers,
-- then the programs' rest a consumer replica's rows at a time (its other
-- replicas walk the stages: convert-tileas-to-cutlass's split_tail.lua);
-- {kind = "split_tail", workers = n} on at most n CTAs (tests: fewer than the SMs).
local PLAIN = { dynamic = "its ids are claimed at run time", data_parallel = "a CTA a program",
                split_tail = "its tiles are planned on the device from the grid" }
function M.schedule(s, what, default_workers)
  if s == nil or s == "persistent" then return nil end
  if PLAIN[s] then return { kind = s } end
  if type(s) ~= "table" or (s.kind ~= "streamk" and s.kind ~= "splitk" and s.kind ~= "persistent" and not PLAIN[s.kind]) then
    return nil, what .. " must be \"persistent\", \"dynamic\", \"data_parallel\", \"split_tail\" or {kind = \"streamk\" | \"splitk\", programs = {x, y}, workers = n [, splits = s]}"
  end
  if s.kind == "persistent" then return nil end
  if s.kind == "split_tail" and s.workers ~= nil and (math.type(s.workers) ~= "integer" or s.workers < 1) then
    return nil, what .. ".workers (a split-tail schedule's CTAs at most; by default the device's SMs) must be a positive integer"
  end
  if PLAIN[s.kind] then
    for key in pairs(s) do
      if key ~= "kind" and not (key == "workers" and s.kind == "split_tail") then
        return nil, what .. (": a %s schedule takes no option '%s' (%s)"):format(
          ({ dynamic = "dynamic", data_parallel = "data-parallel", split_tail = "split-tail" })[s.kind], tostring(key), PLAIN[s.kind])
      end
    end
    return { kind = s.kind, workers = s.workers }
  end
  local p = s.programs
  if type(p) ~= "table" or #p ~= 2 or math.type(p[1]) ~= "integer" or math.type(p[2]) ~= "integer" or p[1] < 1 or p[2] < 1 then
    return nil, what .. ".programs must be the grid of programs {x, y} (positive integers): " .. s.kind .. " plans the k loop's split at compile time"
  end
  local w = s.workers
  if w == nil and default_workers then w = default_workers() end
  if math.type(w) ~= "integer" or w < 1 then return nil, what .. ".workers must be a positive integer" end
  if s.splits ~= nil and (s.kind ~= "splitk" or math.type(s.splits) ~= "integer" or s.splits < 1) then
    return nil, what .. ".splits is a positive integer, for kind = \"splitk\" only"
  end
  return { kind = s.kind, programs = { p[1], p[2] }, workers = w, splits = s.splits }
end

local raise, is_value = tl.raise, tl.is_value
-- what tiles, tensors and shapes mean to the operations of other modules (init.lua, "Kinds of values")
local tile_ops, tensor_ops, shape_ops = {}, {}, {}

-- {===================================================================
-- Tiles and their shapes
-- ====================================================================

local function is_tile(x) return is_value(x) and x:type():kind() == "tile" end
local function info(x) return x:type():info() end

local function shape_str(s) return "[" .. table.concat(s, ", ") .. "]" end

-- A list of positive integers (a tile's shape), checked.
local function shape_arg(s, what)
  if type(s) ~= "table" or #s == 0 then raise(("%s: the shape must be a list of extents, got %s"):format(what, type(s))) end
  for i, d in ipairs(s) do
    if math.type(d) ~= "integer" or d < 1 then
      raise(("%s: extent #%d of the shape must be a positive integer, got %s"):format(what, i, tostring(d)))
    end
  end
  return s
end

local function tile_arg(x, what)
  if not is_tile(x) then
    raise(("%s: expected a tile, got %s"):format(what, is_value(x) and tostring(x:type()) or type(x)))
  end
  return x
end

local function same_shape(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

-- The type of x's tile with another shape / element type (the layout and the space kept or dropped).
local function tile_type(elem, shape, space, layout) return tl.tile(elem, shape, space or "rmem", layout) end

-- }===================================================================

-- {===================================================================
-- Kernels and program ids
-- ====================================================================

local TensorParam = {}
TensorParam.__index = TensorParam
local default_tile = setmetatable({}, { __mode = "k" }) -- tensor parameter value -> its tile shape

-- tl.tensor(elem, rank [, tile_shape]): the type !tileas.tensor<elem, rank> of a
-- tile kernel's global tensor; with tile_shape, the parameter's default tile
-- (tl.load of it may then omit the shape).
function tl.tensor(elem, rank, tile)
  if getmetatable(elem) == nil or elem:kind() ~= "int" and elem:kind() ~= "float" then
    raise("tensor: the element type must be an integer or float type")
  end
  if math.type(rank) ~= "integer" or rank < 1 or rank > 5 then
    raise(("tensor: the rank must be an integer in [1, 5], got %s"):format(tostring(rank)))
  end
  local t = core.type_dialect("tileas.tensor", { elem, rank })
  if tile == nil then return t end
  shape_arg(tile, "tensor")
  if #tile ~= rank then raise(("tensor: the default tile has %d extents for rank %d"):format(#tile, rank)) end
  return setmetatable({ type = t, tile = tile }, TensorParam)
end

local tile_kernel_options = { params = true, num_warps = true, cluster = true, target = true, smem = true, schedule = true,
                             min_ctas = true }

-- The `schedule` option of tl.tile_kernel -> the kernel's `tileas.schedule`
-- attribute (nil: persistent). StreamK and split-K plan the split of the k
-- loop on the host (tl.core.sched_plan): the grid of programs and the
-- workers are compile-time constants, as the k loop's count must be.
local function schedule_attr(name, s)
  local sched, err = M.schedule(s, ("tile_kernel '%s': schedule"):format(tostring(name)),
                                function() return tl.device.available() and tl.device.sm_count() or 132 end)
  if err then raise(err) end
  return sched
end

-- tl.tile_kernel(name, {params = {name = type, ...} | {{name, type}, ...},
-- num_warps = 4, cluster = {x, y, z} (default 1, 1, 1), target = 90, smem,
-- schedule = "persistent" | "dynamic" | "data_parallel" | "split_tail" | {kind = "split_tail", workers} | {kind = "streamk" | "splitk", programs, workers, splits},
-- min_ctas = n (blocks an SM must hold: tl.kernel's)}) ->
-- a kernel whose body k:define builds; params are tl.tensor types and scalars.
function tl.tile_kernel(name, opts)
  opts = opts or {}
  if type(opts) ~= "table" then raise("tile_kernel: the options must be a table") end
  for key in pairs(opts) do
    if not tile_kernel_options[key] then
      raise(("tile_kernel '%s': unknown option '%s' (known: params, num_warps, cluster, target, smem, schedule, min_ctas)%s"):format(
        tostring(name), tostring(key), tl.did_you_mean(key, tile_kernel_options)))
    end
  end
  local nw = opts.num_warps or 4
  if math.type(nw) ~= "integer" or nw < 1 or nw > 32 then
    raise(("tile_kernel '%s': num_warps must be an integer in [1, 32]"):format(tostring(name)))
  end
  local target = opts.target or 90
  if math.type(target) ~= "integer" or target < 80 or target > 199 then
    raise(("tile_kernel '%s': target must be a compute capability such as 90 or 100"):format(tostring(name)))
  end
  -- the kernel's parameters, with the default tiles of tensors put aside
  local params, tiles = {}, {}
  local function add(pname, t)
    if getmetatable(t) == TensorParam then
      tiles[pname] = t.tile
      t = t.type
    end
    return { pname, t }
  end
  if opts.params and #opts.params > 0 then
    for i, p in ipairs(opts.params) do
      if type(p) ~= "table" or type(p[1]) ~= "string" then raise(("tile_kernel parameter #%d: expected {name, type}"):format(i)) end
      params[i] = add(p[1], p[2])
    end
  elseif opts.params then
    for pname, t in pairs(opts.params) do params[#params + 1] = add(pname, t) end
    table.sort(params, function(a, b) return a[1] < b[1] end)
  end
  for i, p in ipairs(params) do
    if getmetatable(p[2]) == nil then raise(("tile_kernel parameter '%s' (#%d): expected a type"):format(p[1], i)) end
  end
  -- always a cluster, so that kernel_spec.num_ctas is there (the passes' KERNEL_SPEC fact)
  local k = tl.kernel(name, { params = params, block = 32 * nw, cluster = opts.cluster or { 1, 1, 1 }, smem = opts.smem,
                              min_ctas = opts.min_ctas })
  k.op:set_attr("target_spec", target)
  local sched = schedule_attr(name, opts.schedule)
  if sched then k.op:set_attr("tileas.schedule", sched) end
  for pname, shape in pairs(tiles) do default_tile[k.args[pname]] = shape end
  k.tile_program = true
  return k
end

local dims = { x = "x", y = "y", z = "z", [0] = "x", [1] = "y", [2] = "z" }
local function dim_arg(d, what)
  local s = dims[d == nil and "x" or d]
  if not s then raise(("%s: the dimension is \"x\", \"y\", \"z\" or 0, 1, 2, got %s"):format(what, tostring(d))) end
  return s
end

-- tl.program_id(d): the index of this program's tile along d (a CTA's, until
-- tileas-dynamic-persistent makes programs persistent); tl.num_programs(d).
function tl.program_id(d) return tl.op1("tileas.get_program_id", {}, tl.i32, { dim = dim_arg(d, "program_id") }) end
function tl.num_programs(d) return tl.op1("tileas.num_programs", {}, tl.i32, { dim = dim_arg(d, "num_programs") }) end

-- }===================================================================

-- {===================================================================
-- Making, moving and converting tiles
-- ====================================================================

-- tl.full(shape, x [, elem]): a register tile of x (a number, or a scalar value,
-- cast to elem); elem defaults to x's type, f32 for a number.
function tl.full(shape, x, elem)
  shape_arg(shape, "full")
  elem = elem or (is_value(x) and x:type()) or (math.type(x) == "integer" and tl.i32) or tl.f32
  if is_tile(x) then raise("full: the value is already a tile (tl.broadcast widens tiles)") end
  local v = tl.cast(x, elem)
  return tl.op1("tileas.splat", { v }, tile_type(elem, shape))
end

-- tl.iota(shape, dim): a tile of i32 whose elements are their indices along
-- dim (0-based): tl.iota({128, 64}, 1) + j * 64 are the columns of a tile
-- of keys, for a mask.
function tl.iota(shape, dim)
  shape_arg(shape, "iota")
  if math.type(dim) ~= "integer" or dim < 0 or dim >= #shape then
    raise(("iota: dim must be an integer in [0, %d), got %s"):format(#shape, tostring(dim)))
  end
  return tl.op1("tileas.iota", {}, tile_type(tl.i32, shape), { dim = dim })
end

-- tl.zeros(shape [, elem]) is a tile of zeros (f32 by default); tl.zeros(elem, n)
-- stays the vector of tl.splat.
function shape_ops.zeros(a, b) return tl.full(a, 0, b or tl.f32) end

local function coords_of(coords, what)
  if type(coords) ~= "table" or is_value(coords) then raise(what .. ": the coordinates must be a list {c1, c2, ...}") end
  local out = {}
  for i, c in ipairs(coords) do
    if is_value(c) then
      local k = c:type():kind()
      if k ~= "int" and k ~= "index" then raise(("%s: coordinate #%d must be an integer, got %s"):format(what, i, tostring(c:type()))) end
      out[i] = c:type() == tl.i32 and c or c:cast(tl.i32)
    elseif math.type(c) == "integer" then
      out[i] = tl.const(c, tl.i32)
    else
      raise(("%s: coordinate #%d must be an integer or an integer value, got %s"):format(what, i, type(c)))
    end
  end
  return out
end

local function tensor_info(t)
  if not is_value(t) then return nil end
  local i = t:type():info()
  if i.kind ~= "dialect" or i.name ~= "tileas.tensor" then return nil end
  return { elem = i.params[1], rank = i.params[2] }
end

-- tl.load(tensor, coords [, shape] [, opts]): the tile at tile coordinates
-- (units of the shape, outermost first) of a tl.tensor parameter (a shape of
-- fewer dims than the tensor leaves out the leading ones: their coordinates
-- index single elements, a batch); out of bounds
-- reads opts.padding (0; -math.huge for a row's maximum). opts.space = "shared"
-- loads into a shared tile. A pointer loads as before.
function tensor_ops.load(t, coords, shape, opts)
  local ti = tensor_info(t)
  if shape ~= nil and getmetatable(shape) == nil and type(shape) == "table" and shape[1] == nil then
    shape, opts = nil, shape
  end
  shape = shape or default_tile[t]
  if not shape then raise("load: give the tile's shape (or declare the tensor with a default tile: tl.tensor(elem, rank, shape))") end
  shape_arg(shape, "load")
  local cs = coords_of(coords, "load")
  if #cs ~= ti.rank or #shape > ti.rank then
    raise(("load: a tensor of rank %d takes %d coordinates and a shape of at most %d extents (got %d and %d)"):format(
      ti.rank, ti.rank, ti.rank, #cs, #shape))
  end
  local opds = { t }
  for _, c in ipairs(cs) do opds[#opds + 1] = c end
  opts = opts or {}
  if opts.padding ~= nil and type(opts.padding) ~= "number" then
    raise(("load: padding must be a number, got %s"):format(type(opts.padding)))
  end
  local pad = opts.padding
  if pad == 0 then pad = nil end
  if pad and ti.elem:kind() == "float" then pad = pad + 0.0 end
  if pad and ti.elem:kind() == "int" and math.type(pad) ~= "integer" then
    raise("load: the padding of an integer tile must be an integer")
  end
  return tl.op1("tileas.tiled_load", opds, tile_type(ti.elem, shape, opts.space or "rmem", opts.layout), { padding = pad })
end

-- tl.store(tensor, coords, tile [, {reduce = "add"}]): writes the tile at tile
-- coordinates; out of bounds is dropped. reduce = "add" adds it into the
-- tensor instead, atomically (f32 or i32: programs may add into the same
-- elements at once). A pointer stores as before.
local store_options = { view = true, reduce = true }
function tensor_ops.store(t, coords, x, opts)
  local ti = tensor_info(t)
  tile_arg(x, "store")
  for k in pairs(opts or {}) do
    if not store_options[k] then raise(("store: unknown option '%s' (known: reduce)"):format(tostring(k))) end
  end
  if opts and opts.reduce ~= nil then
    if opts.reduce ~= "add" then raise(("store: reduce is \"add\", got %s"):format(tostring(opts.reduce))) end
    local el = tostring(info(x).elem)
    if el ~= "f32" and el ~= "i32" then raise(("store: a reduce-add store adds f32 or i32 tiles, got %s"):format(el)) end
  end
  local cs = coords_of(coords, "store")
  if #cs ~= ti.rank then raise(("store: a tensor of rank %d takes %d coordinates, got %d"):format(ti.rank, ti.rank, #cs)) end
  if #info(x).shape > ti.rank then
    raise(("store: a tile of rank %d into a tensor of rank %d"):format(#info(x).shape, ti.rank))
  end
  local opds = { t }
  for _, c in ipairs(cs) do opds[#opds + 1] = c end
  opds[#opds + 1] = x
  tl.op("tileas.tiled_store", opds, {}, opts and { view = opts.view, reduce = opts.reduce } or nil)
end

-- tl.alloc_tensor(shape, elem [, layout]): a tensor in shared memory.
function tl.alloc_tensor(shape, elem, layout)
  shape_arg(shape, "alloc_tensor")
  if getmetatable(elem) == nil then raise("alloc_tensor: expected an element type") end
  return tl.op1("tileas.alloc_tensor", {}, tile_type(elem, shape, "shared", layout))
end

-- tl.copy(src, dst): copies a tile into a shared tensor of its shape.
function tl.copy(src, dst)
  tile_arg(src, "copy")
  tile_arg(dst, "copy")
  if info(dst).space ~= "shared" then raise("copy: the destination must be a shared tensor (tl.alloc_tensor)") end
  tl.op("tileas.copy", { src, dst }, {})
end

-- tl.convert_layout(x, layout [, space]): the tile in another layout (a table,
-- or nil for none); from a shared tensor into registers it is a read.
function tl.convert_layout(x, layout, space)
  local i = info(tile_arg(x, "convert_layout"))
  return tl.op1("tileas.convert_layout", { x }, tile_type(i.elem, i.shape, space or "rmem", layout))
end

-- tl.extract(x, {indices}): an element of a register tile; tl.extract(v, i) of a vector as before.
function tile_ops.extract(x, idx)
  local opds = { x }
  for _, c in ipairs(coords_of(idx, "extract")) do opds[#opds + 1] = c end
  return tl.op1("tileas.extract", opds, info(x).elem)
end

-- }===================================================================

-- {===================================================================
-- Shapes
-- ====================================================================

function tl.broadcast(x, shape)
  local i = info(tile_arg(x, "broadcast"))
  shape_arg(shape, "broadcast")
  if same_shape(i.shape, shape) then return x end
  if #shape ~= #i.shape then
    raise(("broadcast: %s to %s changes the rank (tl.expand_dim first)"):format(shape_str(i.shape), shape_str(shape)))
  end
  for d = 1, #shape do
    if i.shape[d] ~= shape[d] and i.shape[d] ~= 1 then
      raise(("broadcast: %s to %s: only extents of 1 widen"):format(shape_str(i.shape), shape_str(shape)))
    end
  end
  return tl.op1("tileas.broadcast", { x }, tile_type(i.elem, shape))
end

-- tl.transpose(x): a rank-2 tile with its dims swapped.
function tl.transpose(x)
  local i = info(tile_arg(x, "transpose"))
  if #i.shape ~= 2 then raise(("transpose: expected a tile of rank 2, got %s"):format(shape_str(i.shape))) end
  return tl.op1("tileas.transpose", { x }, tile_type(i.elem, { i.shape[2], i.shape[1] }))
end

function tl.expand_dim(x, dim)
  local i = info(tile_arg(x, "expand_dim"))
  if math.type(dim) ~= "integer" or dim < 0 or dim > #i.shape then
    raise(("expand_dim: dim must be an integer in [0, %d], got %s"):format(#i.shape, tostring(dim)))
  end
  local s = {}
  for d = 1, #i.shape do s[#s + 1] = i.shape[d] end
  table.insert(s, dim + 1, 1)
  return tl.op1("tileas.expand_dim", { x }, tile_type(i.elem, s), { dim = dim })
end

function tl.extract_slice(x, offsets, sizes)
  local i = info(tile_arg(x, "extract_slice"))
  shape_arg(sizes, "extract_slice")
  if type(offsets) ~= "table" or #offsets ~= #i.shape or #sizes ~= #i.shape then
    raise(("extract_slice: offsets and sizes need %d entries each"):format(#i.shape))
  end
  return tl.op1("tileas.extract_slice", { x }, tile_type(i.elem, sizes), { offsets = offsets, sizes = sizes })
end

-- }===================================================================

-- {===================================================================
-- Elementwise arithmetic on tiles
-- ====================================================================

-- The common shape of two tile shapes whose extents agree or are 1, or nil.
local function broadcast_shape(a, b)
  if #a ~= #b then return nil end
  local s = {}
  for d = 1, #a do
    if a[d] == b[d] or b[d] == 1 then s[d] = a[d]
    elseif a[d] == 1 then s[d] = b[d]
    else return nil end
  end
  return s
end

-- Two operands of an elementwise op, at least one a tile, as tiles of one type:
-- numbers and scalar values become tiles of the other's shape, size-1 dims widen.
local function tile_operands(a, b, what)
  local t = is_tile(a) and a or b
  local ti = info(t)
  local function as_tile(x)
    if is_tile(x) then return x end
    if is_value(x) and x:type() ~= ti.elem then
      raise(("%s: a %s scalar with a tile of %s (convert it with :cast)"):format(what, tostring(x:type()), tostring(ti.elem)))
    end
    if not is_value(x) and type(x) ~= "number" then raise(("%s: cannot combine a tile with a %s"):format(what, type(x))) end
    return tl.full(ti.shape, x, ti.elem)
  end
  a, b = as_tile(a), as_tile(b)
  local ia, ib = info(a), info(b)
  if ia.elem ~= ib.elem then
    raise(("%s: element types differ: %s and %s (convert one with :cast)"):format(what, tostring(ia.elem), tostring(ib.elem)))
  end
  local s = broadcast_shape(ia.shape, ib.shape)
  if not s then raise(("%s: shapes %s and %s do not broadcast"):format(what, shape_str(ia.shape), shape_str(ib.shape))) end
  a, b = tl.broadcast(a, s), tl.broadcast(b, s)
  if a:type() ~= b:type() then
    raise(("%s: layouts differ: %s and %s (tl.convert_layout one)"):format(what, tostring(a:type()), tostring(b:type())))
  end
  return a, b
end

-- The elementwise op of a binary operator on tiles: iop / fop by the element type.
local tile_binary = kinds.binary(tile_operands, function(t, iop, fop)
  local e = t:info().elem
  return (e:kind() == "float" and fop) or (e:kind() == "int" and iop)
end)
tile_ops.add = tile_binary("arith.addi", "arith.addf", "+")
tile_ops.sub = tile_binary("arith.subi", "arith.subf", "-")
tile_ops.mul = tile_binary("arith.muli", "arith.mulf", "*")
tile_ops.div = tile_binary(nil, "arith.divf", "/")
-- tl.maximum / tl.minimum: elementwise on tiles, tl.max / tl.min of scalars
local tile_max, tile_min = tile_binary(nil, "arith.maximumf", "maximum"), tile_binary(nil, "arith.minimumf", "minimum")
function tl.maximum(a, b)
  if not is_tile(a) and not is_tile(b) then return tl.max(a, b) end
  return tile_max(a, b)
end
function tl.minimum(a, b)
  if not is_tile(a) and not is_tile(b) then return tl.min(a, b) end
  return tile_min(a, b)
end
function tile_ops.unm(a)
  if info(a).elem:kind() == "float" then return tl.op1("arith.negf", { a }, a:type()) end
  return tl.zeros(info(a).shape, info(a).elem) - a
end

-- Comparisons of float tiles give tiles of i1 (ordered; ne unordered, as for scalars).
-- Integer tiles (an iota's indices) compare signed, to tiles of i1 that & and |
-- combine (a mask).
for name, pred in pairs { lt = { "olt", "slt" }, le = { "ole", "sle" }, gt = { "ogt", "sgt" }, ge = { "oge", "sge" },
                          eq = { "oeq", "eq" }, ne = { "une", "ne" } } do
  tile_ops[name] = function(a, b)
    a, b = tile_operands(a, b, name)
    local k = info(a).elem:kind()
    if k ~= "float" and k ~= "int" then raise(name .. ": tiles of floats or integers compare") end
    return tl.op1(k == "float" and "arith.cmpf" or "arith.cmpi", { a, b },
                  tile_type(tl.i1, info(a).shape, "rmem", a:type():layout()), { predicate = pred[k == "float" and 1 or 2] })
  end
end
tile_ops.band = tile_binary("arith.andi", nil, "&")
tile_ops.bor = tile_binary("arith.ori", nil, "|")

-- tl.select(c, a, b) with a tile of i1 picks elementwise.
function tile_ops.select(c, a, b)
  if is_tile(c) then
    if info(c).elem ~= tl.i1 then raise("select: the condition must be a tile of i1 (from a comparison)") end
    if not is_tile(a) and not is_tile(b) then -- both scalars: tiles of the condition's shape
      a = tl.full(info(c).shape, a, is_value(a) and a:type() or is_value(b) and b:type() or nil)
    end
  end
  a, b = tile_operands(a, b, "select")
  if is_tile(c) and not same_shape(info(c).shape, info(a).shape) then
    raise(("select: a condition of shape %s for tiles of %s"):format(shape_str(info(c).shape), shape_str(info(a).shape)))
  end
  return tl.op1("arith.select", { c, a, b }, a:type())
end

-- x:cast(elem) of a float tile: extf / truncf of every element.
function tile_ops.cast(v, t)
  local i = info(v)
  if getmetatable(t) and t:kind() == "tile" then t = t:info().elem end
  if t == i.elem then return v end
  if i.elem:kind() ~= "float" or t:kind() ~= "float" then
    raise(("cast: tiles convert between float types, not %s to %s"):format(tostring(i.elem), tostring(t)))
  end
  local name = i.elem:info().width < t:info().width and "arith.extf" or "arith.truncf"
  return tl.op1(name, { v }, tile_type(t, i.shape, "rmem", v:type():layout()))
end

-- tl.exp(x) ...: the function of every element of a float tile (tileas.math);
-- a scalar takes the approximate function of that name where dsl/warp.lua has
-- one (tl.rsqrt, tl.tanh, which bring tiles here; tl.rcp_approx of a tile is tl.rcp).
for _, fn in ipairs(core.enums().tileas_math_fn) do
  tile_ops[fn] = function(x)
    if info(x).elem:kind() ~= "float" then raise(("%s: expected a float tile, got %s"):format(fn, tostring(x:type()))) end
    return tl.op1("tileas.math", { x }, x:type(), { fn = fn })
  end
  if fn == "rcp" then tile_ops.rcp_approx = tile_ops.rcp end
  if not kinds.approx_math[fn] then
    tl[fn] = function(x)
      if not is_tile(x) then raise(("%s: expected a float tile (scalars: tl.approx)"):format(fn)) end
      return tile_ops[fn](x)
    end
  end
end

-- tl.reduce(x, dim, kind): dim (0-based) reduced by "add", "max" or "min".
local reduce_kinds = {}
for _, k in ipairs(core.enums().tileas_reduce_kind) do reduce_kinds[k] = true end
function tl.reduce(x, dim, kind)
  local i = info(tile_arg(x, "reduce"))
  if math.type(dim) ~= "integer" or dim < 0 or dim >= #i.shape then
    raise(("reduce: dim must be an integer in [0, %d), got %s"):format(#i.shape, tostring(dim)))
  end
  if not reduce_kinds[kind] then raise(("reduce: kind is \"add\", \"max\" or \"min\", got %s"):format(tostring(kind))) end
  local s = {}
  for d = 1, #i.shape do if d ~= dim + 1 then s[#s + 1] = i.shape[d] end end
  local rt = #s == 0 and i.elem or tile_type(i.elem, s)
  return tl.op1("tileas.reduce", { x }, rt, { dim = dim, kind = kind })
end

-- tl.dot(a, b [, acc] [, opts]): a [M, K] times b [K, N] plus acc [M, N] (zeros of
-- f32, or i32 for integer operands, when absent). b given as [N, K] (K-major) is
-- taken transposed; opts.transpose_a / transpose_b say so explicitly (needed when
-- the shape is square), opts.negate_a / negate_b negate an operand; opts.fp8
-- ("e4m3" | "e5m2"): a and b are 8-bit integer tiles of fp8 bytes (f32 accumulation);
-- opts.fast_accum with fp8: a pipelined loop's k blocks accumulate in the tensor
-- cores' precision (cuBLASLt's fast accumulation) instead of each block's sum
-- being added to the f32 accumulator in registers (the promotion).
local dot_options = { transpose_a = true, transpose_b = true, negate_a = true, negate_b = true, fp8 = true, fast_accum = true }
function tl.dot(a, b, acc, opts)
  tile_arg(a, "dot")
  tile_arg(b, "dot")
  if acc ~= nil and not is_value(acc) then acc, opts = nil, acc end
  opts = opts or {}
  if type(opts) ~= "table" then raise(("dot: the options must be a table, got %s"):format(type(opts))) end
  for key in pairs(opts) do
    if not dot_options[key] then
      raise(("dot: unknown option '%s' (known: transpose_a, transpose_b, negate_a, negate_b, fp8, fast_accum; the operands' element types are their tiles')"):format(
        tostring(key)))
    end
  end
  -- fp8 = "e4m3" | "e5m2": a and b are tiles of 8-bit integers holding fp8 bytes
  if opts.fp8 ~= nil and opts.fp8 ~= "e4m3" and opts.fp8 ~= "e5m2" then
    raise(("dot: fp8 is \"e4m3\" or \"e5m2\", got %s"):format(tostring(opts.fp8)))
  end
  if opts.fast_accum and not opts.fp8 then raise("dot: fast_accum is an option of fp8 dots (fp8 = \"e4m3\" | \"e5m2\")") end
  local sa, sb = info(a).shape, info(b).shape
  if #sa ~= 2 or #sb ~= 2 then raise("dot: a and b must be tiles of rank 2") end
  local ta = opts.transpose_a and true or false
  local m, k = sa[ta and 2 or 1], sa[ta and 1 or 2]
  local tb = opts.transpose_b
  if tb == nil then tb = sb[1] ~= k and sb[2] == k end
  local n = sb[tb and 1 or 2]
  if sb[tb and 2 or 1] ~= k then
    raise(("dot: a %s and b %s do not multiply (K = %d)"):format(shape_str(sa), shape_str(sb), k))
  end
  if acc == nil then
    acc = tl.zeros({ m, n }, info(a).elem:kind() == "int" and not opts.fp8 and tl.i32 or tl.f32)
  end
  tile_arg(acc, "dot")
  return tl.op1("tileas.dot", { a, b, acc }, acc:type(), {
    transpose_a = ta or nil, transpose_b = tb or nil,
    negate_a = opts.negate_a or nil, negate_b = opts.negate_b or nil, fp8 = opts.fp8,
    fast_accum = opts.fast_accum and true or nil })
end

-- }===================================================================

-- {===================================================================
-- Loops and agents
-- ====================================================================

-- tl.for_tiles(extent, tile | {tile =, stages =, prefetch =, in_order =, consumers =}, inits..., function(kk, ...) return nexts end)
-- -> the final values: kk runs over the tile indices 0 .. ceil(extent / tile) - 1
-- (an i32), in an scf.for marked for pipelining (tileas.pipeline = {stages,
-- prefetch, in_order}). prefetch = d: the loads the lowering reads a k block ahead
-- (per-k-block scales) are also prefetched into L1 d k blocks ahead. in_order =
-- true: a loop of chained dots issues none of them an iteration ahead (each
-- dot in the iteration that reads it), for tiles whose registers would not
-- hold two iterations' values. consumers = "pingpong" (default "cooperative"):
-- two consumer warpgroups, each with the whole (64-row) accumulator, take the
-- persistent loop's programs in turn from one ring (tileas.pipeline's pingpong);
-- consumers = "ksplit": two consumer warpgroups on one 64-row accumulator,
-- each taking every other stage of the ring, the second's sums added into the
-- first's before the epilogue (tileas.pipeline's ksplit; stages even).
function tl.for_tiles(extent, step, ...)
  local n = select("#", ...)
  local body = select(n, ...)
  if type(body) ~= "function" then raise("for_tiles: the last argument must be the body function(kk, ...)") end
  local inits = table.pack(...)
  inits.n, inits[n] = n - 1, nil
  local opts = type(step) == "table" and step or { tile = step }
  local tile, stages = opts.tile, opts.stages or 3
  if math.type(tile) ~= "integer" or tile < 1 then raise("for_tiles: the tile extent must be a positive integer") end
  if math.type(stages) ~= "integer" or stages < 1 then raise("for_tiles: stages must be a positive integer") end
  local prefetch = opts.prefetch
  if prefetch ~= nil and (math.type(prefetch) ~= "integer" or prefetch < 0 or prefetch > 64) then
    raise("for_tiles: prefetch must be an integer from 0 to 64 (k blocks)")
  end
  if opts.in_order ~= nil and type(opts.in_order) ~= "boolean" then raise("for_tiles: in_order must be a boolean") end
  if opts.consumers ~= nil and opts.consumers ~= "cooperative" and opts.consumers ~= "pingpong" and opts.consumers ~= "ksplit" then
    raise(("for_tiles: consumers must be \"cooperative\", \"pingpong\" or \"ksplit\", got %s"):format(tostring(opts.consumers)))
  end
  local count
  if math.type(extent) == "integer" then
    count = tl.const((extent + tile - 1) // tile, tl.i32)
  elseif is_value(extent) and (extent:type():kind() == "int" or extent:type():kind() == "index") then
    count = (extent:cast(tl.i32) + (tile - 1)) // tile
  else
    raise("for_tiles: the extent must be an integer or an integer value")
  end
  local loop
  local results = table.pack(tl.for_range(tl.const(0, tl.i32), count, 1, { table.unpack(inits, 1, inits.n) },
    function(kk, ...)
      loop = kk:owner_block():parent()
      return body(kk, ...)
    end))
  loop:set_attr("tileas.pipeline", { stages = stages, prefetch = prefetch ~= 0 and prefetch or nil, in_order = opts.in_order or nil,
                                        pingpong = opts.consumers == "pingpong" or nil, ksplit = opts.consumers == "ksplit" or nil })
  return table.unpack(results, 1, results.n)
end

-- tl.agent(kind, {num_warps [, stride] [, interleaved]}, fn): a tileas.agent
-- (producer, consumer or compute) whose region fn builds.
local agent_kinds = {}
for _, k in ipairs(core.enums().agent_kind) do agent_kinds[k] = true end
function tl.agent(kind, opts, fn)
  if not agent_kinds[kind] then raise(("agent: kind is \"producer\", \"consumer\" or \"compute\", got %s"):format(tostring(kind))) end
  if type(opts) ~= "table" or type(fn) ~= "function" then raise("agent: expected (kind, {num_warps = n}, function() ... end)") end
  local op = tl.op("tileas.agent", {}, {}, { kind = kind, num_warps = opts.num_warps, stride = opts.stride,
                                             interleaved = opts.interleaved }, 1)
  tl.at(op:region(1):add_block(), nil, fn)
  return op
end

-- }===================================================================

kinds.register("tile", tile_ops)
kinds.register("tileas.tensor", tensor_ops)
kinds.register("shape", shape_ops)

return M
