-- tilua.passes.convert_tileas_to_cutlass.values: the values of the lowering.
--
-- A tile program value maps (L.vmap, by value id) to: an IR value (scalars),
-- a Frag (a register tile in the mma layout: the thread's elements of a
-- consumer's 64 x N tile, element i at row f.row + dr, column f.col + dc, (dr,
-- dc) = f.offset(i)), a Line (a slice of the mma layout: the values at the
-- columns (along = 2) or rows (along = 1) the thread holds), or a Ring (a
-- shared ring, possibly sliced to a consumer's rows). Frags and Lines compute
-- an element when it is first asked for (at(i)), so that what the epilogue
-- never reads is never built.

local core = require "tilua.core"
local R = require "tilua.passes.convert_tileas_to_cutlass.read"

local V = {}

local Lazy = {}
Lazy.__index = Lazy
function V.lazy(kind, elem, at) return setmetatable({ kind = kind, elem = elem, fn = at, cache = {} }, Lazy) end
function Lazy:at(i)
  local v = self.cache[i]
  if v == nil then
    v = self.fn(i)
    self.cache[i] = v
  end
  return v
end
function V.frag(elem, _, at) return V.lazy("frag", elem, at) end
function V.line(elem, along, at)
  local l = V.lazy("line", elem, at)
  l.along = along
  return l
end
-- A frag of the f32 accumulator vector vec (n elements), keeping vec itself
-- (f.vec) for whatever takes the whole vector (wgmma, the loop's carry).
function V.vec_frag(vec, n)
  local tl = require "tilua"
  local f = V.frag(tl.f32, n, function(i) return tl.extract(vec, i) end)
  f.vec = vec
  return f
end
-- A ping-pong consumer's 128-row accumulator: the vectors of its 64-row
-- slices (n elements each), element i of slice i // n; .vecs keeps them.
function V.slices_frag(vecs, n)
  local tl = require "tilua"
  local f = V.frag(tl.f32, n * #vecs, function(i) return tl.extract(vecs[i // n + 1], i % n) end)
  f.vecs = vecs
  return f
end
-- The slices' vectors of frag x (nil: zeros).
function V.slice_vecs(x, slices, n)
  local tl = require "tilua"
  if x and x.vecs then return x.vecs end
  local out = {}
  for sl = 1, slices do
    if not x then out[sl] = tl.zeros(tl.f32, n)
    else
      local vals = {}
      for i = 0, n - 1 do vals[i + 1] = x:at((sl - 1) * n + i) end
      out[sl] = tl.vector_of(tl.f32, vals)
    end
  end
  return out
end

-- The keys of the elements of lazy x that the thread of fragment geometry f
-- holds: a frag's 0 .. n - 1, a line's distinct offsets along its dim.
function V.keys(x, f, n)
  local keys, seen = {}, {}
  for i = 0, n - 1 do
    local key = x.kind == "frag" and i or select(x.along, f.offset(i))
    if not seen[key] then
      seen[key] = true
      keys[#keys + 1] = key
    end
  end
  return keys
end

-- Build now every element of lazy x that the thread holds (V.keys): to place
-- its ops (loads) here.
function V.force(x, f, n)
  for _, key in ipairs(V.keys(x, f, n)) do x:at(key) end
end
function V.is_lazy(x) return getmetatable(x) == Lazy end
function V.is_frag(x) return getmetatable(x) == Lazy and x.kind == "frag" end
function V.is_line(x) return getmetatable(x) == Lazy and x.kind == "line" end

-- What the lowering has bound (L.vmap) and computed of its lazy values'
-- elements so far -> restore(): both as they were then (again at each call),
-- so that code lowered after it (a loop's body, an if's branch) is not seen
-- by what is lowered after the restore.
function V.snapshot(L)
  local function copy(t)
    local o = {}
    for k, v in pairs(t) do o[k] = v end
    return o
  end
  local vmap, caches = copy(L.vmap), {}
  for _, x in pairs(vmap) do
    if V.is_lazy(x) and not caches[x] then caches[x] = copy(x.cache) end
  end
  return function()
    for id in pairs(L.vmap) do L.vmap[id] = vmap[id] end
    for x, cache in pairs(caches) do x.cache = copy(cache) end
  end
end

local Ring = {}
Ring.__index = Ring
V.Ring = Ring
function V.is_ring(x) return getmetatable(x) == Ring end

-- The lowered value of program value v (op: where it is used, for the error).
function V.get(L, v, op)
  local x = L.vmap[v:id()]
  if x == nil then R.fail(op or L.kop, "a value this lowering does not know (%s)", tostring(v:type())) end
  return x
end

-- fn(...) with the ops it builds located at op's line.
function V.at_loc(op, fn, ...)
  local file, line_no = op:loc()
  local prev = core.pin_location(file or nil, file and line_no or nil)
  local r = table.pack(pcall(fn, ...))
  core.pin_location(prev)
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

-- A scalar op: a copy with its operands lowered.
function V.clone_scalar(L, op)
  local opds = {}
  for i, v in ipairs(op:operands()) do opds[i] = V.get(L, v, op) end
  local types = {}
  for i, r in ipairs(op:results()) do types[i] = r:type() end
  local c = L.tl.op(op:name(), opds, types, op:attrs(true), op:nregions())
  for i, r in ipairs(op:results()) do L.vmap[r:id()] = c:result(i) end
  return c
end

-- {=== global tensors read and written per element (their pointer parameters)

-- Tensor element idx (row, col) of a plain tensor parameter e: the address,
-- and whether it is in bounds.
local function element(L, e, op, idx)
  local tl, args = L.tl, L.args
  if not e.lowered_ptr then R.fail(op, "tensor '%s' has no pointer parameter", e.name) end
  local inb, off
  for d = 1, e.rank do
    local x = idx[d]
    local ok = x:lt(args[e.lowered_dims[d]])
    inb = inb and (inb & ok) or ok
    local term = x:cast(tl.i64)
    if d < e.rank then term = term * args[e.lowered_strides[d]] end
    off = off and off + term or term
  end
  return args[e.lowered_ptr], off, inb
end

-- The element (0 out of bounds).
function V.load_at(L, e, op, idx)
  local tl = L.tl
  local base, off, inb = element(L, e, op, idx)
  local zero = tl.is_float_type(e.elem) and tl.const(0.0, e.elem) or tl.const(0, e.elem)
  -- (L.prefetching: the line is prefetched into L1 instead, out of bounds the
  -- tensor's first; the value is a placeholder no one reads)
  if L.prefetching then
    tl.prefetch(base + tl.select(inb, off, tl.const(0, tl.i64)))
    return zero
  end
  return tl.select(inb, (base + tl.select(inb, off, tl.const(0, tl.i64))):load(), zero)
end

-- tl.options.line_loads = "based": a loader of the elements base + off (off a
-- Lua integer, the fragment's constant offset) of a rank-1 tensor e: the
-- thread's address of element base and the count left, N - base, computed
-- once; an element then costs a compare with a constant, a select of the
-- offset (off in bounds, else -base: the tensor's first element, as
-- V.load_at reads) and the load (0 out of bounds, as V.load_at). -> fn(off)
function V.based_loader(L, e, op, base)
  local tl, args = L.tl, L.args
  if not e.lowered_ptr then R.fail(op, "tensor '%s' has no pointer parameter", e.name) end
  local left = args[e.lowered_dims[1]] - base
  local back = tl.const(0, tl.i32) - base
  local at = args[e.lowered_ptr] + base:cast(tl.i64)
  local zero = tl.is_float_type(e.elem) and tl.const(0.0, e.elem) or tl.const(0, e.elem)
  return function(off)
    if L.prefetching then return V.load_at(L, e, op, { base + off }) end
    local c = tl.const(off, tl.i32)
    local inb = c:lt(left)
    return tl.select(inb, (at + tl.select(inb, c, back):cast(tl.i64)):load(), zero)
  end
end

-- Store v at the element (dropped out of bounds); a reduce-add store of op
-- adds it atomically (a red.global.add). With convert (a truncf frag's
-- .convert), v is the wide value and is converted inside the bounds check:
-- converted before it, an accumulator's element makes ptxas serialize every
-- wgmma of the kernel (C7514: "non wgmma instructions reading accumulator
-- registers ... between start and end of the pipeline stage"), as it did the
-- swapped form's 4 wgmma m64n8k16 a k block. (Only the conversion moves: a
-- value built inside the branch may not be used after it.)
function V.store_at(L, e, op, idx, v, convert)
  local base, off, inb = element(L, e, op, idx)
  local reduce = op:attr "reduce"
  L.tl.if_(inb, function()
    if convert then v = convert(v) end
    if reduce then L.tl.atomic(reduce, base + off, v) else (base + off):store(v) end
  end)
end

-- }===

-- The wgmma descriptor of ring r (or its slice) at stage s, k step kk (kstep
-- elements a step). K-major: rows of K, a k step moves along the row and, past
-- a box of the swizzle's span, into the next box (boxes are a stage's rows,
-- one after the other); MN-major, boxes of {k rows, 64}: 16 k rows a step,
-- 64-wide atoms a box apart.
local function address(r, kk, kstep, kmajor)
  local ring = r.ring or r
  local off = r.offsets or { 0, 0 }
  if kmajor then
    local col = off[2] + kk * kstep
    local bx = col // ring.box[2]
    return bx * ring.shape[1] + off[1], col - bx * ring.box[2], { swizzle = ring.swizzle, sbo = 1024 }
  end
  local row = off[2] // ring.box[2] * ring.shape[1] + off[1] + kk * 16
  return row, 0, { swizzle = ring.swizzle, lbo = ring.shape[1] * ring.box[2] * R.elem_bytes(ring.elem), sbo = 1024 }
end

-- A descriptor's address as the ring's base plus 16-byte units, where the
-- swizzle leaves every part of it in place (the parts that move by whole
-- periods of the swizzle, 8 rows of its span: the stage s, a replica's rows
-- (r.replica = {index value, rows a replica}), the static rows; the columns
-- of a row that starts a period) -> the moving units (an i32 value or a
-- number), the static units (a number), or nil where the swizzle moves them.
local function linear_units(r, s, row, col)
  local ring = r.ring or r
  local eb = R.elem_bytes(ring.elem)
  local period, row_bytes = 8 * ring.swizzle, ring.box[2] * eb
  local stage_bytes = ((ring.nbox or 1) + (ring.ones and 1 or 0)) * ring.shape[1] * row_bytes -- (sums.lua's box of ones)
  if ring.swizzle < 32 or row_bytes ~= ring.swizzle or stage_bytes % period ~= 0 or row * row_bytes % period ~= 0 then return nil end
  local moving = (s or 0) * (stage_bytes // 16)
  local off = r.offsets or { 0, 0 }
  if math.type(off[1]) ~= "integer" then
    local rep = r.replica
    if not rep or rep[2] * row_bytes % period ~= 0 then return nil end
    moving = rep[1] * (rep[2] * row_bytes // 16) + moving
  end
  return moving, (row * row_bytes + col * eb) // 16
end

-- The descriptor (an i64 value). linear: where the swizzle leaves the address's
-- parts in place (linear_units), the ring's base descriptor plus the moving
-- units plus the static ones -- one add a wgmma in a loop, where the address
-- of each would be swizzled at run time (its stage moves) -- else the
-- descriptor of the element's address.
function V.desc(r, s, kk, kstep, kmajor, linear)
  local tl = require "tilua"
  local ring = r.ring or r
  local off = r.offsets or { 0, 0 }
  if linear and math.type(off[2]) == "integer" then
    local static = setmetatable({ ring = ring, offsets = { math.type(off[1]) == "integer" and off[1] or 0, off[2] } }, V.Ring)
    local row, col, opts = address(static, kk, kstep, kmajor)
    local moving, units = linear_units(r, s, row, col)
    if moving then
      local d = tl.wgmma_desc(ring.smem:ptr(0, 0, 0), opts)
      if tl.is_value(moving) then d = d + tl.cast(moving, tl.i64) else units = units + moving end
      return units == 0 and d or d + tl.const(units, tl.i64)
    end
  end
  local row, col, opts = address(r, kk, kstep, kmajor)
  return tl.wgmma_desc(ring.smem:ptr(s, row, col), opts)
end

-- The lowered coordinates of the dims a tiled access's tile leaves out (its
-- leading operands after the tensor), first in a list of element indices.
function V.leading(L, op, idx)
  local n = R.leading(op)
  if n == 0 then return idx end
  local out = {}
  for d = 1, n do out[d] = V.get(L, op:operand(1 + d), op) end
  for _, x in ipairs(idx) do out[#out + 1] = x end
  return out
end

-- Element offsets of this CTA's block of a tile (cta_part; of each piece of a
-- cta_repeat): nil along a dim the cluster does not split. -> shape, offsets
function V.block_offsets(L, ti)
  local shape, c = R.cta_part(ti, L.nctas)
  local offs, strides = {}, R.cta_strides(ti.layout, #shape)
  for d = 1, #shape do
    local cd = c and c[d] or 1
    if cd > 1 then offs[d] = L.rank // strides[d] % cd * (d == 1 and R.cta_pieces(ti, shape).block_rows or shape[d]) end
  end
  return shape, offs
end

-- A load of tile ti multicast to the k CTAs that hold this CTA's block of it
-- (R.cta_strides): which of them this CTA is (t, its 1/k part) and the
-- cluster ranks of all k (the multicast mask; a number where it is the same
-- on every CTA). The k must be the ranks r0 + m j (j < k) for some step m
-- (the blocks of a tile split as tileas-plan-cta splits its dots' operands):
-- then t = r // m % k and the mask is the pattern of j shifted by r - m t.
function V.replica(L, ti, k, op)
  local _, c = R.cta_part(ti, L.nctas)
  local s, n = R.cta_strides(ti.layout, #ti.shape), L.nctas
  local function fits(m) -- (are r's replicas r - m t + m j, j < k?)
    for r = 0, n - 1 do
      local t, key = r // m % k, R.cta_block_key(c, s, r)
      for j = 0, k - 1 do
        local q = r - m * t + m * j
        if q >= n or R.cta_block_key(c, s, q) ~= key then return false end
      end
    end
    return true
  end
  local m = 1
  while m * k <= n and not fits(m) do m = m + 1 end
  if m * k > n then R.fail(op, "a multicast to CTAs of a cluster that are not evenly spaced in rank is not lowered") end
  local pattern = 0 -- (the ranks 0, m, ..., m (k - 1))
  for j = 0, k - 1 do pattern = pattern | 1 << (j * m) end
  if m * k == n then -- (one replica set a stride: t = r // m, the base r % m)
    if m == 1 then return L.rank, pattern end
    return L.rank // m, L.tl.const(pattern, L.tl.i32) << L.rank % m
  end
  local t = m == 1 and L.rank % k or L.rank // m % k
  return t, L.tl.const(pattern, L.tl.i32) << (L.rank - (m == 1 and t or t * m))
end

-- The offset of this CTA's block of ri, a slice of the mma layout along dim
-- `along` of its parent, whose CTA part (tileas-plan-cta) splits it as it
-- splits the accumulator; nil where the CTAs do not split it.
function V.slice_block_offset(L, ri, along, op)
  local p = ri.layout.parent
  local c = L.nctas > 1 and p.cta
  if not c then return nil end
  if p.cta_repeat then R.fail(op, "a slice split by cta_repeat is not lowered yet") end
  local cd = c[along] or 1
  return cd > 1 and L.rank // R.cta_strides(p, #ri.shape + 1)[along] % cd * (ri.shape[1] // cd) or nil
end

-- x, or x + off where there is an offset.
function V.plus(x, off) return off and x + off or x end

return V
