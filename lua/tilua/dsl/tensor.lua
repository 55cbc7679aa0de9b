-- tilua.dsl.tensor: Hopper tensor cores and TMA (docs/tensor.md). init.lua
-- requires it after tilua.gpu.launch.
--
--   tensor maps  tl.tensor_map_type(elem, box [, swizzle]) (a kernel parameter type),
--                tl.device.tensor_map{buffer, shape, box, ...} (the host side)
--   TMA          tl.tma_load(dst, map, bar, coords [, {multicast = mask}]),
--                tl.tma_store(map, src, coords [, {reduce = "add"}]), tl.tma_prefetch,
--                tl.tensor_map_prefetch
--   wgmma        tl.wgmma_desc(ptr, {swizzle, lbo, sbo}), tl.wgmma(acc, a, b, opts),
--                tl.wgmma_fence(), tl.wgmma_commit(), tl.wgmma_wait(n),
--                tl.wgmma_fragment(thread) (element -> row, column)
--   registers    tl.setmaxnreg(count, "inc"|"dec"), tl.stmatrix, tl.ldmatrix,
--                tl.splat(x, n), tl.zeros(elem, n), tl.pack(lo, hi, elem), tl.unpack_fp8(v, fmt)
--
-- Coordinates, shapes and boxes list dimensions outermost first, like memref
-- shapes; the lowering puts them in PTX's innermost-first order.

local core = require "tilua.core"

local tl = require "tilua" -- the library being built (init.lua registers it before its rooms)
local kinds = require "tilua.dsl.kinds"

local M = {}

local raise, is_value = tl.raise, tl.is_value

local function i32(v, what)
  if is_value(v) then
    if v:type() ~= tl.i32 then v = v:cast(tl.i32) end
    return v
  end
  if math.type(v) ~= "integer" then raise(("%s must be an integer or an IR value, got %s"):format(what, type(v))) end
  return tl.const(v, tl.i32)
end
local function op0(name, opds, attrs) tl.op(name, opds or {}, {}, attrs) end
local function opts_of(o, what)
  if o ~= nil and type(o) ~= "table" then raise(("%s: options must be a table, got %s"):format(what, type(o))) end
  return o or {}
end

-- {===================================================================
-- Tensor maps
-- ====================================================================

local swizzle_names = { [0] = "linear", [32] = "sw32", [64] = "sw64", [128] = "sw128" }

-- tl.tensor_map_type(elem, {box outermost first} [, swizzle bytes]) -> !tile.tensor_map<...>
function tl.tensor_map_type(elem, box, swizzle)
  local sw = swizzle_names[swizzle or 0]
  if not sw then raise(("tensor_map_type: swizzle must be 0, 32, 64 or 128 (bytes), got %s"):format(tostring(swizzle))) end
  if type(box) ~= "table" or #box < 1 or #box > 5 then raise("tensor_map_type: box must list 1 to 5 extents") end
  local params = { elem, sw }
  for i, b in ipairs(box) do
    if math.type(b) ~= "integer" then raise("tensor_map_type: box extents are integers") end
    params[i + 2] = b
  end
  return tl.type("tile.tensor_map", params)
end

local function map_info(t)
  local i = t:info()
  if i.kind ~= "dialect" or i.name ~= "tile.tensor_map" then return nil end
  local p = i.params
  local box = {}
  for k = 3, #p do box[#box + 1] = p[k] end
  local sw = ({ linear = 0, sw32 = 32, sw64 = 64, sw128 = 128 })[p[2]]
  return { elem = p[1], swizzle = sw, box = box, rank = #box }
end
tl.tensor_map_info = map_info

-- the bytes of a scalar type, and its tensor-map dtype name
local function elem_bytes(t) return t:info().bytes end
local function dtype_of(t)
  local i = t:info()
  return i.name or (i.kind == "int" and "i" .. i.width) or tostring(t)
end

-- tl.device.tensor_map{buffer = buf, dtype = "bf16" | type = <param type>, shape = {..},
--   strides = {..} (elements, default contiguous), box = {..}, swizzle = 0|32|64|128,
--   l2 = 256, oob = "zero"|"nan"} -> TensorMap. With `type` (a tensor map
-- parameter type), dtype, box and swizzle come from it.
tl.device.tensor_map = function(o)
  if type(o) ~= "table" then raise("tensor_map: expected a table of fields") end
  local d = { address = o.buffer and (o.buffer.raw or o.buffer) or o.address, shape = o.shape, strides = o.strides,
              box = o.box, swizzle = o.swizzle, l2 = o.l2, oob = o.oob, element_strides = o.element_strides,
              dtype = o.dtype }
  if o.type then
    local mi = map_info(o.type)
    if not mi then raise("tensor_map: 'type' must be a tensor map type (tl.tensor_map_type)") end
    d.box, d.swizzle = d.box or mi.box, d.swizzle or mi.swizzle
    d.dtype = d.dtype or dtype_of(mi.elem)
  end
  if d.dtype and type(d.dtype) ~= "string" then d.dtype = dtype_of(d.dtype) end
  return core.tensor_map(d)
end

-- The launch argument for a tensor map parameter of type t (gpu/launch.lua calls it).
function tl.tensor_map_arg(p, v)
  local want = map_info(p.type)
  local ok, got = pcall(function() return v:info() end)
  if not ok or type(got) ~= "table" or not got.box then
    raise(("launch: argument '%s' must be a tensor map (tl.device.tensor_map), got %s"):format(p.name, type(v)))
  end
  local same = got.rank == want.rank and got.swizzle == want.swizzle and elem_bytes(want.elem) == got.elem_bytes
  for i = 1, want.rank do same = same and got.box[i] == want.box[i] end
  if not same then
    raise(("launch: argument '%s' is a tensor map of %s with box {%s} and swizzle %d; the parameter is %s")
      :format(p.name, got.dtype, table.concat(got.box, ", "), got.swizzle, tostring(p.type)))
  end
  return { "tmap", v }
end

-- }===================================================================

-- {===================================================================
-- TMA
-- ====================================================================

local function map_of(m, what)
  local mi = is_value(m) and map_info(m:type())
  if not mi then raise(("%s: expected a tensor map parameter, got %s"):format(what, is_value(m) and tostring(m:type()) or type(m))) end
  return mi
end
local function coords_of(c, mi, what)
  if type(c) ~= "table" or #c ~= mi.rank then raise(("%s: expected %d coordinates (outermost first)"):format(what, mi.rank)) end
  local r = {}
  for i, x in ipairs(c) do r[i] = i32(x, "coordinate") end
  return r
end

-- tl.tma_load(dst, map, bar, {coords} [, {multicast = mask}]): one box global -> shared,
-- completing on the mbarrier bar (expect its bytes there).
function tl.tma_load(dst, map, bar, coords, opts)
  opts = opts_of(opts, "tma_load")
  local mi = map_of(map, "tma_load")
  local opds = { dst, map, bar, table.unpack(coords_of(coords, mi, "tma_load")) }
  if opts.multicast ~= nil then
    local m = opts.multicast
    if not is_value(m) then m = tl.const(m, tl.i16) elseif m:type() ~= tl.i16 then m = m:cast(tl.i16) end
    opds[#opds + 1] = m
  end
  op0("tile.tma_load", opds, { multicast = opts.multicast ~= nil or nil })
end

-- tl.tma_store(map, src, {coords} [, {reduce = "add"}]): one box shared -> global in the
-- current bulk group (tl.bulk_commit, tl.bulk_wait).
function tl.tma_store(map, src, coords, opts)
  opts = opts_of(opts, "tma_store")
  local mi = map_of(map, "tma_store")
  op0("tile.tma_store", { map, src, table.unpack(coords_of(coords, mi, "tma_store")) }, { reduce = opts.reduce })
end

function tl.tma_prefetch(map, coords)
  local mi = map_of(map, "tma_prefetch")
  op0("tile.tma_prefetch", { map, table.unpack(coords_of(coords, mi, "tma_prefetch")) })
end
function tl.tensor_map_prefetch(map)
  map_of(map, "tensor_map_prefetch")
  op0("tile.tensor_map_prefetch", { map })
end
-- bytes of one box of a tensor map (value or type)
function tl.tensor_map_box_bytes(m)
  local mi = map_info(is_value(m) and m:type() or m)
  local n = elem_bytes(mi.elem)
  for _, b in ipairs(mi.box) do n = n * b end
  return n
end

-- }===================================================================

-- {===================================================================
-- wgmma
-- ====================================================================

-- tl.wgmma_desc(ptr, {swizzle = 128, lbo = 16, sbo = 1024}) -> i64 matrix descriptor
function tl.wgmma_desc(p, opts)
  opts = opts_of(opts, "wgmma_desc")
  return tl.op1("tile.wgmma_desc", { p }, tl.i64, { swizzle = opts.swizzle, lbo = opts.lbo, sbo = opts.sbo })
end

local kdim = { f16 = 16, bf16 = 16, tf32 = 8, e4m3 = 32, e5m2 = 32 }

-- tl.wgmma(acc, a, b, {type_a, type_b, scale_d, scale_a, scale_b, trans_a, trans_b}) -> acc'
-- acc: vector<N/2 x f32|f16>; a: i64 descriptor or 16 bytes of registers; b: i64
-- descriptor; scale_d: an i1 value or a boolean (false: D = A*B). The result is
-- valid after tl.wgmma_wait.
function tl.wgmma(acc, a, b, opts)
  opts = opts_of(opts, "wgmma")
  if not is_value(acc) or acc:type():info().kind ~= "vector" then raise("wgmma: the accumulator must be a vector value") end
  local n = 2 * acc:type():info().shape[1]
  local ta, tb = opts.type_a or "bf16", opts.type_b or opts.type_a or "bf16"
  local k = kdim[ta]
  if not k then raise(("wgmma: type_a must be one of f16 bf16 tf32 e4m3 e5m2, got %s"):format(tostring(ta))) end
  local opds = { acc, a, b }
  local sd = opts.scale_d
  if sd ~= nil and sd ~= true then opds[4] = is_value(sd) and sd or tl.const(sd and 1 or 0, tl.i1) end
  local bool = function(x) return x and true or nil end
  return tl.op1("tile.wgmma", opds, acc:type(), {
    shape = { 64, n, k }, type_a = ta, type_b = tb, scale_a = opts.scale_a, scale_b = opts.scale_b,
    trans_a = bool(opts.trans_a), trans_b = bool(opts.trans_b) })
end

function tl.wgmma_fence() op0("tile.wgmma_fence") end
function tl.wgmma_commit() op0("tile.wgmma_commit") end
function tl.wgmma_wait(n) op0("tile.wgmma_wait", nil, { pending = n or 0 }) end
function tl.setmaxnreg(count, action) op0("tile.setmaxnreg", nil, { count = count, action = action or "inc" }) end

-- tl.wgmma_fragment(t): where the accumulator elements of warpgroup thread t
-- (0..127) sit in the 64 x N tile: element i is at row f.row + dr, column
-- f.col + dc with dr, dc = f.offset(i) (build-time integers).
function tl.wgmma_fragment(t)
  t = i32(t, "thread")
  local w, l = t // 32, t % 32
  return {
    row = w * 16 + l // 4,
    col = (l % 4) * 2,
    offset = function(i) return 8 * ((i % 4) // 2), 8 * (i // 4) + i % 2 end,
  }
end

-- }===================================================================

-- {===================================================================
-- Registers: ldmatrix / stmatrix, splat, pack
-- ====================================================================

-- tl.stmatrix(ptr, {r1 [, r2, r3, r4]} [, {trans = true}]): each r a 32-bit value
-- (an i32 or a vector<2 x 16-bit>); the warp stores 1, 2 or 4 8x8 matrices.
function tl.stmatrix(p, regs, opts)
  opts = opts_of(opts, "stmatrix")
  op0("tile.stmatrix", { p, table.unpack(regs) }, { trans = opts.trans and true or nil })
end
-- tl.ldmatrix(ptr, result_type [, {trans = true}]) -> i32 or vector (1, 2 or 4 registers)
function tl.ldmatrix(p, t, opts)
  opts = opts_of(opts, "ldmatrix")
  return tl.op1("tile.ldmatrix", { p }, t, { trans = opts.trans and true or nil })
end

function tl.splat(x, n)
  if not is_value(x) then raise("splat: expected an IR value (use tl.zeros or tl.const first)") end
  return tl.op1("tile.splat", { x }, tl.vector(x:type(), n))
end
-- tl.zeros(elem, n): a vector of n zeros (of a shape: dsl/tileprog.lua's tile)
function tl.zeros(elem, n)
  local f = kinds.op("zeros", elem)
  if f then return f(elem, n) end
  return tl.splat(tl.const(0, elem), n)
end
-- tl.pack(lo, hi [, elem = tl.bf16]) -> vector<2 x elem> from two f32 (rounded to
-- nearest); elem "e4m3" or "e5m2": an i16 holding two fp8 bytes (lo in the low byte)
function tl.pack(lo, hi, elem)
  local opds = { tl.cast(lo, tl.f32), tl.cast(hi, tl.f32) }
  if elem == "e4m3" or elem == "e5m2" then return tl.op1("tile.pack", opds, tl.i16, { fp8 = elem }) end
  return tl.op1("tile.pack", opds, tl.vector(elem or tl.bf16, 2))
end
-- tl.unpack_fp8(v, "e4m3" | "e5m2") -> vector<2xf16>: the two fp8 bytes of an i16, exactly
function tl.unpack_fp8(v, fmt)
  if not is_value(v) or v:type() ~= tl.i16 then raise("unpack_fp8: expected an i16 value holding two fp8 bytes") end
  return tl.op1("tile.unpack_fp8", { v }, tl.vector(tl.f16, 2), { fp8 = fmt })
end

-- }===================================================================

return M
