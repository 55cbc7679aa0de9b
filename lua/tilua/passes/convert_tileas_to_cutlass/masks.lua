-- tilua.passes.convert_tileas_to_cutlass.masks: where the index masks of a
-- loop of chained dots keep every element (attention's causal and ragged
-- masks), so that the loop can be split in two (as kernels/attention.lua's
-- mainloop is): the first iterations with no mask at all, the others with the
-- per-element select and no branch -- instead of one loop that branches, in
-- every iteration, on "every element kept" (ops.lua's masked select). A branch
-- between the wgmma issue and its wait costs the body more than the compare:
-- ptxas copies the accumulator at the join and retires the wgmmas earlier.
--
-- An index tile of the body (iota, splats, additions and subtractions) has
-- bounds that are affine in the loop's index k, c0 + c1 k (c0 a value computed
-- before the loop, c1 a constant), when the scalars it splats are built from
-- k, constants and values from before the loop by additions, subtractions and
-- products by constants. A comparison of two such tiles (lt, le: the larger
-- bound of one against the smaller of the other) holds for every element on
-- a prefix of the iterations when its margin falls as k grows; the prefix
-- where every mask of the body holds is the first loop. Each partial sum must
-- fit an i32 (what the i32 ops compute equals the i64 bounds): checked at the
-- first loop's two ends (affine: in between too), else the first loop is empty.

local tl = require "tilua"
local R = require "tilua.passes.convert_tileas_to_cutlass.read"
local V = require "tilua.passes.convert_tileas_to_cutlass.values"

local Masks = {}

local I32_MIN, I32_MAX = -2147483648, 2147483647

-- {=== affine forms {c0 (an i64 value), c1 (an integer)} of the loop index

local function i64(x) return tl.const(x, tl.i64) end
local function add(a, b) return { a[1] + b[1], a[2] + b[2] } end
local function sub(a, b) return { a[1] - b[1], a[2] - b[2] } end

-- The affine form of i32 scalar v (A: the loop's block, the values its ops
-- define, the forms to check), or nil.
local function scalar(A, v)
  local d = v:def()
  if v == A.index then return { i64(0), 1 } end
  if not A.inside[v:id()] then -- (from before the loop: lowered already)
    if v:type() ~= tl.i32 then return nil end
    return { tl.cast(V.get(A.L, v, A.op), tl.i64), 0 }
  end
  if not d or v:type() ~= tl.i32 then return nil end
  local n, f = d:name(), nil
  if n == "arith.constant" then return { i64(d:attr "value"), 0 } end
  if n == "arith.addi" or n == "arith.subi" then
    local a, b = scalar(A, d:operand(1)), scalar(A, d:operand(2))
    if a and b then f = n == "arith.addi" and add(a, b) or sub(a, b) end
  elseif n == "arith.muli" then
    for k = 1, 2 do
      local c, x = R.const_int(d:operand(k)), d:operand(3 - k)
      local a = c and scalar(A, x)
      if a and not f then f = { a[1] * i64(c), a[2] * c } end
    end
  end
  if f then A.fits[#A.fits + 1] = f end -- (what the i32 op computes)
  return f
end

-- The bounds {lo, hi} (affine forms) of i32 index tile v, or nil.
local function bounds(A, v)
  local d, ti = v:def(), R.tile_of(v)
  if not d or not ti or ti.elem ~= tl.i32 then return nil end
  local n = d:name()
  if n == "tileas.iota" then return { i64(0), 0 }, { i64(ti.shape[d:attr "dim" + 1] - 1), 0 } end
  if n == "tileas.splat" then
    local s = scalar(A, d:operand(1))
    if s then return s, s end
  elseif n == "arith.addi" or n == "arith.subi" then
    local alo, ahi = bounds(A, d:operand(1))
    local blo, bhi = bounds(A, d:operand(2))
    if not (alo and blo) then return nil end
    local lo, hi
    if n == "arith.addi" then lo, hi = add(alo, blo), add(ahi, bhi) else lo, hi = sub(alo, bhi), sub(ahi, blo) end
    A.fits[#A.fits + 1], A.fits[#A.fits + 2] = lo, hi
    return lo, hi
  end
end

-- The margins {g0, g1} of i1 tile v: every element is true where g0 + g1 k
-- > 0 for each of them (a conjunction of comparisons), or nil.
local function margins(A, v, out)
  local d = v:def()
  if not d then return nil end
  local n = d:name()
  if n == "arith.andi" then
    return margins(A, d:operand(1), out) and margins(A, d:operand(2), out)
  elseif n == "arith.cmpi" then
    local p = d:attr "predicate"
    local alo, ahi = bounds(A, d:operand(1))
    local blo, bhi = bounds(A, d:operand(2))
    if not (alo and blo) then return nil end
    local g
    if p == "slt" then g = sub(blo, ahi) -- a < b everywhere: max a < min b
    elseif p == "sle" then g = add(sub(blo, ahi), { i64(1), 0 })
    elseif p == "sgt" then g = sub(alo, bhi)
    elseif p == "sge" then g = add(sub(alo, bhi), { i64(1), 0 })
    else return nil end
    out[#out + 1] = g
    return out
  end
end

-- }===

-- The split of loop op (a scf.for of step 1 over the block index, its block
-- b) between the iterations lo and ub (i32 values, lo <= ub): -> at (an i32
-- value in [lo, ub]: every index mask of the body keeps every element in the
-- iterations lo .. at - 1), the masks ({select result id -> true}); or nil
-- when the body has no select on an index mask whose form the split reads.
function Masks.split(L, op, lo, ub)
  if R.const_int(op:operand(3)) ~= 1 then return nil end
  local b = op:region(1):entry()
  local A = { L = L, op = op, index = b:arg(1), inside = {}, fits = {} }
  R.each_op(op, function(o) for i = 1, o:nresults() do A.inside[o:result(i):id()] = true end end)
  for i, a in ipairs(b:args()) do if i > 1 then A.inside[a:id()] = true end end
  local gs, masks = {}, {}
  local ok = true
  R.each_op(op, function(o)
    if ok and o:name() == "arith.select" and R.tile_of(o:operand(1)) then
      local c = o:operand(1):def()
      if c and (c:name() == "arith.cmpi" or c:name() == "arith.andi" or c:name() == "arith.ori") then
        if margins(A, o:operand(1), gs) then masks[o:result(1):id()] = true else ok = false end
      end
    end
  end)
  if not ok or not next(masks) then return nil end
  -- the first k where a margin g0 + g1 k is no longer positive: none while
  -- g1 = 0 and g0 > 0; a margin that grows with k is no prefix: not split
  local first, last = tl.cast(lo, tl.i64), tl.cast(ub, tl.i64)
  local at = last
  for _, g in ipairs(gs) do
    if g[2] > 0 then return nil end
    local stop
    if g[2] == 0 then
      stop = tl.select(g[1]:gt(i64(0)), last, first)
    else -- g0 + g1 k > 0 for k < (g0 - 1) / -g1 + 1 (g0 > 0; else for no k >= 0)
      stop = tl.select(g[1]:gt(i64(0)), (g[1] - i64(1)) // i64(-g[2]) + i64(1), i64(0))
    end
    at = tl.min(at, stop)
  end
  at = tl.max(at, first)
  -- every partial sum an i32 at both ends of the first loop (k = lo and at - 1)
  local fits = tl.const(1, tl.i1)
  for _, f in ipairs(A.fits) do
    for _, k in ipairs { first, tl.max(at - i64(1), first) } do
      local x = f[1] + k * i64(f[2])
      fits = fits & x:ge(i64(I32_MIN)) & x:le(i64(I32_MAX))
    end
  end
  return tl.cast(tl.select(fits, at, first), tl.i32), masks
end

return Masks
