-- tilua.passes.convert_tileas_to_cutlass.read: reading a tile program for its
-- lowering: the tiles' layouts, the agents and their warps, the rings'
-- geometry on a cluster (tileas-plan-cta's plan), and the failure that ends
-- the pass with an error at an op.

local R = {}

local Failure = {}
Failure.__index = Failure
R.Failure = Failure

-- Fail the pass at op (nil: the kernel) with a message.
function R.fail(op, fmt, ...)
  error(setmetatable({ op = op, message = "convert-tileas-to-cutlass: " .. fmt:format(...) }, Failure), 0)
end

-- t:info(), memoized by type (tl.by_type): a tile's converts its layout to a
-- table, and the lowering asks the same few types hundreds of times a kernel.
-- Shared: read, not changed (but for layout_str, which blocked.lua derives
-- from the type alone).
local info = require("tilua").by_type(function(t) return t:info() end)

-- The tile info of a value (its layout too: t:info()'s, as t:layout() gives
-- it), nil for another type.
function R.tile_of(v)
  local i = info(v:type())
  if i.kind ~= "tile" then return nil end
  return i
end

function R.layout_kind(v)
  local i = R.tile_of(v)
  return i and i.layout and i.layout.kind
end

function R.elem_bytes(t) return info(t).bytes end

function R.is_tensor_type(t)
  local i = info(t)
  return i.kind == "dialect" and i.name == "tileas.tensor"
end

-- The dims a tiled access's tile leaves out (a tile of lower rank than its
-- tensor: the leading dims, whose coordinates index single elements, a
-- batch): how many, the first of its tile's coordinates being operand 2 + that.
function R.leading(op)
  local rank = op:operand(1):type():info().params[2]
  local tile = op:name() == "tileas.tiled_store" and op:operand(op:noperands()) or op:result(1)
  return rank - #tile:type():info().shape
end

-- A TMA box of a tensor of `rank` dims for a tile box: extents of 1 first for
-- the dims the tile leaves out.
function R.full_box(rank, box)
  local out = {}
  for _ = 1, rank - #box do out[#out + 1] = 1 end
  for _, b in ipairs(box) do out[#out + 1] = b end
  return out
end

-- A tiled_load whose tile is copied into a ring (what the producer's TMA does).
function R.is_ring_load(op)
  for _, u in ipairs(op:result(1):users()) do
    local d = u:name() == "tileas.copy" and u:operand(2):def()
    if d and d:attr "tileas.stages" then return true end
  end
  return false
end

-- fn(op) for each op nested in root, in pre-order (the walk's first op is root
-- itself: skipped by position, not by comparing each op with it, a call).
function R.each_op(root, fn)
  local first = true
  root:walk(function(op)
    if first then first = false else fn(op) end
  end)
end

-- The elements a thread holds of a tile of type t in a warpgroup's mma layout.
function R.frag_size(t)
  local i = t:info()
  return i.shape[1] * i.shape[2] // 128
end

-- Are the dots under op the forward attention's chain, one dot issued ahead
-- (tileas.ahead: S = Q K^T) and one other (O += P V)? Its producer fills the
-- ahead dot's ring a block before the other's and its programs run x fastest
-- (plan.lua's L.skew, loops.lua): the order kernels/attention.lua keeps. The
-- backward's loops (two dots ahead, one or two late, a ring both read) keep
-- the paired order and the GEMM's panels they were verified with.
function R.forward_chain(op)
  local ahead, dots = 0, 0
  R.each_op(op, function(o)
    if o:name() == "tileas.dot" then
      dots = dots + 1
      if o:attr_or_default "tileas.ahead" then ahead = ahead + 1 end
    end
  end)
  return ahead == 1 and dots == 2
end

-- The agents of the kernel body in order, with their warps (agent:agent_warps:
-- an agent_switch's entry, or, bare, after the agents before it).
function R.agents_of(body)
  local out = {}
  local function add(ag)
    local first, warps = ag:agent_warps()
    out[#out + 1] = { op = ag, kind = ag:attr "kind", warps = warps, first = first }
  end
  for _, op in ipairs(body:ops()) do
    if op:name() == "tileas.agent_switch" then
      for _, ag in ipairs(op:region(1):entry():ops()) do add(ag) end
    elseif op:name() == "tileas.agent" then
      add(op)
    end
  end
  return out
end

-- {=== geometry of rings and tiles on a cluster

-- The TMA box of a ring of tile shape {r, c} (outermost first) with a swizzle
-- of sw bytes: rows of at most one swizzle span, c / cols boxes per stage.
function R.ring_box(shape, eb, sw)
  local cols = shape[2]
  if sw > 0 and cols * eb > sw then cols = sw // eb end
  return { shape[1], cols }, shape[2] // cols
end

-- A CTA's block of a tile on a cluster of n CTAs (tileas-plan-cta's `cta`
-- part, docs/passes.md): its shape, and the `cta` split (nil: the whole tile).
function R.cta_part(ti, n)
  local c = ti.layout and ti.layout.cta
  if n == 1 or not c then return ti.shape, nil end
  local shape = {}
  for d, x in ipairs(ti.shape) do shape[d] = x // (c[d] or 1) end
  return shape, c
end

-- Which CTAs of a cluster hold which block of a tile whose layout's CTA part
-- is l's (tileas-plan-cta's `cta`, `cta_stride`; docs/passes.md): along dim d
-- the block index of cluster rank r is r // strides[d] % cta[d]; by default
-- each dim's after the dims before it. -> strides (1 along a whole dim)
function R.cta_strides(l, dims)
  local c, given = l and l.cta, l and l.cta_stride
  local strides, s = {}, 1
  for d = 1, dims do
    local cd = c and c[d] or 1
    strides[d] = cd == 1 and 1 or given and given[d] or s
    s = s * cd
  end
  return strides
end

-- The block index of cluster rank r (a number) along each dim of a tile split
-- c at strides s (R.cta_strides), as one key.
function R.cta_block_key(c, s, r)
  local key = {}
  for d = 1, #s do key[d] = r // s[d] % (c and c[d] or 1) end
  return table.concat(key, ",")
end

-- The pieces of a tile split with a `cta_repeat` (tileas-plan-cta: a ring
-- whose replica consumers each slice one piece): along dim 1 (rows), how many
-- and the rows of one in the program's tile and in the CTA's block (1 piece of
-- the whole tile without one). A CTA holds its block of every piece.
function R.cta_pieces(ti, shape)
  local rep = ti.layout and ti.layout.cta_repeat
  if rep and (rep[2] or 1) ~= 1 then R.fail(nil, "a cta_repeat along columns is not lowered yet") end
  local n = rep and rep[1] or 1
  return { n = n, rows = ti.shape[1] // n, block_rows = shape[1] // n }
end

-- Offsets {row, col} of a slice of a ring in the program's tile, in the
-- CTA's block (the smem): a slice of one piece of a cta_repeat is the CTA's
-- block of that piece.
function R.piece_rows(ring, offs, op)
  local pc = ring.pieces
  if not pc or pc.n == 1 then return offs end
  if offs[1] % pc.rows ~= 0 then R.fail(op, "a slice of a ring split by cta_repeat that is not one of its pieces") end
  return { offs[1] // pc.rows * pc.block_rows, offs[2] }
end

-- Does convert_layout op change the CTA part (tileas-plan-cta's marker that
-- stayed: data moving between the cluster's CTAs)?
function R.moves_between_ctas(op)
  local x, y = R.tile_of(op:operand(1)), R.tile_of(op:result(1))
  local function same(a, b)
    a, b = a or {}, b or {}
    for d = 1, math.max(#a, #b) do if (a[d] or 1) ~= (b[d] or 1) then return false end end
    return true
  end
  local lx, ly = x.layout or {}, y.layout or {}
  return not same(lx.cta, ly.cta) or not same(lx.cta_repeat, ly.cta_repeat)
end

-- The tiled_loads whose tiles are copied into a ring (its producer's TMA loads).
local function ring_loads(ring)
  local out = {}
  for _, u in ipairs(ring:users()) do
    local d = u:name() == "tileas.copy" and u:operand(2) == ring and u:operand(1):def()
    if d and d:name() == "tileas.tiled_load" then out[#out + 1] = d end
  end
  return out
end

-- The multicast of the loads into a ring: k > 1 where tileas-plan-cta
-- replicated the ring's blocks on k CTAs (each loads 1/k of its block along
-- the first dim and multicasts it).
function R.ring_multicast(ring)
  for _, d in ipairs(ring_loads(ring)) do
    if d:attr "multicast" then return d:attr "multicast" end
  end
  return 1
end

-- The TMA box of the loads into a ring: tileas-prepare-for-scheduling's (the
-- `box` of their view: the CTA's part, docs/passes.md), checked against what
-- the producer issues (`want`: a box of the CTA's rows, 1/k of them when
-- multicast or one piece's; columns of one swizzle span), or `want` where the
-- loads have no view (IR that did not go through that pass).
local function ring_view_box(ring, want)
  local box
  for _, d in ipairs(ring_loads(ring)) do
    local v = d:attr "view"
    local b = type(v) == "table" and v.box
    if b then
      if #b ~= 2 or (box and (box[1] ~= b[1] or box[2] ~= b[2])) then
        R.fail(d, "the loads into a ring have different TMA boxes (view.box): one box a ring is lowered")
      end
      box = { b[1], b[2] }
    end
  end
  if not box then return want end
  if box[1] ~= want[1] or box[2] ~= want[2] then
    local d = ring_loads(ring)[1]
    R.fail(d, "the TMA box [%d, %d] (tileas-prepare-for-scheduling's view.box) is not lowered: the producer issues boxes of [%d, %d] (the CTA's rows, columns of one swizzle span)",
      box[1], box[2], want[1], want[2])
  end
  return box
end

-- A ring's geometry on a CTA of n: the tile info, the CTA's block shape, its
-- `cta` split, the multicast k, the TMA box (a 1/k piece) and boxes per stage.
function R.ring_geometry(ring, n)
  local ti = R.tile_of(ring)
  local shape, c = R.cta_part(ti, n)
  local k = n > 1 and R.ring_multicast(ring) or 1
  local sw = ti.layout and ti.layout.swizzle or 0
  local box, nbox = R.ring_box(shape, R.elem_bytes(ti.elem), sw)
  local pieces = R.cta_pieces(ti, shape)
  if pieces.n > 1 then box = { pieces.block_rows, box[2] } end -- a TMA load per piece
  if k > 1 then box = { box[1] // k, box[2] } end -- (of each piece)
  box = ring_view_box(ring, box)
  return { ti = ti, shape = shape, cta = c, multicast = k, swizzle = sw, box = box, nbox = nbox, pieces = pieces }
end

-- The value a dot operand v reads through slices and layout conversions (a
-- ring, where it reads one).
function R.ring_source(v)
  while v:def() and (v:def():name() == "tileas.extract_slice" or v:def():name() == "tileas.convert_layout") do
    v = v:def():operand(1)
  end
  return v
end

-- The value of an arith.constant, or nil.
function R.const_int(v)
  local d = v:def()
  if d and d:name() == "arith.constant" then return d:attr "value" end
end

function R.ops_named(root, name)
  local out = {}
  R.each_op(root, function(op) if op:name() == name then out[#out + 1] = op end end)
  return out
end

-- }===

return R
