-- tilua.passes.convert_tileas_to_cutlass.ops: the lowering of the ops inside
-- an agent, one entry of OPS per op name (an op of another name: elementwise
-- arith on tiles, a scalar op copied, else not lowered yet). env is the
-- agent's state (producer.lua, consumer.lua): what its role does with a
-- pipelined loop, the persistent loop, a dot, a tiled load or store, a copy,
-- and the program ids, the wgmma fragment f, the replica index.
--
-- A new op of the tile level: an entry OPS["tileas.x"] = fn(L, op, env) that
-- sets L.vmap of its results (values.lua says what a lowered value is), or,
-- where its lowering depends on the agent's role, env.x(op).

local tl = require "tilua"
local R = require "tilua.passes.convert_tileas_to_cutlass.read"
local V = require "tilua.passes.convert_tileas_to_cutlass.values"
local B = require "tilua.passes.convert_tileas_to_cutlass.blocked"

local X = {}
local OPS = {}
X.OPS = OPS

-- The grid of programs along dim d (1..3): its hidden parameter.
local function programs(L, d) return L.args[L.P.lowered_programs[d]] end
X.programs = programs

-- An operand elementwise ops read per element: a register tile or a scalar.
local function per_element(x) return V.is_frag(x) or tl.is_value(x) end

-- The factors of v when v = a * b is an f32 product of register tiles (or
-- scalars) that nothing else reads: its elements need not be rounded alone.
local function product(L, v)
  local d = v:def()
  if not d or d:name() ~= "arith.mulf" or #v:users() ~= 1 then return nil end
  local a, b = L.vmap[d:operand(1):id()], L.vmap[d:operand(2):id()]
  if per_element(a) and per_element(b) then return a, b end
end
local function elem_at(x, i) if V.is_frag(x) then return x:at(i) end return x end

-- a * b + c, a * b - c, c + a * b, c - a * b of f32 tiles, the product read
-- only here: one fma per element (the contraction nvcc and Triton make; the
-- product is not rounded on its own). -> the frag, or nil.
local function contracted(L, op, n, opds)
  local sub = op:name() == "arith.subf"
  for k = 1, 2 do
    local a, b = product(L, op:operand(k))
    local other = opds[3 - k]
    if a and per_element(other) then
      local negs = {} -- (a broadcast row value: negated once)
      local function neg(x)
        negs[x] = negs[x] or -x
        return negs[x]
      end
      return V.frag(tl.f32, n, function(i)
        local x, y, c = elem_at(a, i), elem_at(b, i), elem_at(other, i)
        if sub and k == 1 then c = neg(c) elseif sub then x = neg(x) end
        return tl.fma(x, y, c)
      end)
    end
  end
end

-- {=== a select whose condition is a mask (masked)
-- The bounds [lo, hi] (i64 values) of an i32 index tile built from iota,
-- splats and additions, and "fits": every partial sum stays an i32 (then the
-- i32 elements equal their i64 values). -> lo, hi, fits, or nil for any other tile.
local I32_MIN, I32_MAX = -2147483648, 2147483647
local function index_bounds(L, v)
  local d = v:def()
  local ri = R.tile_of(v)
  if not d or not ri or ri.elem ~= tl.i32 then return nil end
  local n = d:name()
  if n == "tileas.iota" then
    return tl.const(0, tl.i64), tl.const(ri.shape[d:attr "dim" + 1] - 1, tl.i64), tl.const(1, tl.i1)
  elseif n == "tileas.splat" then
    local x = tl.cast(V.get(L, d:operand(1), d), tl.i64)
    return x, x, tl.const(1, tl.i1)
  elseif n == "arith.addi" or n == "arith.subi" then
    local alo, ahi, aok = index_bounds(L, d:operand(1))
    local blo, bhi, bok = index_bounds(L, d:operand(2))
    if not (alo and blo) then return nil end
    local lo, hi
    if n == "arith.addi" then lo, hi = alo + blo, ahi + bhi else lo, hi = alo - bhi, ahi - blo end
    return lo, hi, aok & bok & lo:ge(tl.const(I32_MIN, tl.i64)) & hi:le(tl.const(I32_MAX, tl.i64))
  end
end

-- An i1 value, uniform over the tile, that is true only when every element
-- of the i1 tile v is true: comparisons (signed) of index tiles by their
-- bounds, and, or. -> the value, or nil where v is of another form.
local ALL = {
  slt = function(alo, ahi, blo, bhi) return ahi:lt(blo) end, sle = function(alo, ahi, blo, bhi) return ahi:le(blo) end,
  sgt = function(alo, ahi, blo, bhi) return alo:gt(bhi) end, sge = function(alo, ahi, blo, bhi) return alo:ge(bhi) end,
}
local function all_true(L, v)
  local d = v:def()
  if not d then return nil end
  local n = d:name()
  if n == "arith.andi" or n == "arith.ori" then
    local a, b = all_true(L, d:operand(1)), all_true(L, d:operand(2))
    if n == "arith.andi" then return a and b and (a & b) end
    return (a and b and (a | b)) or a or b -- (either all true suffices)
  elseif n == "arith.cmpi" and ALL[d:attr "predicate"] then
    local alo, ahi, aok = index_bounds(L, d:operand(1))
    local blo, bhi, bok = index_bounds(L, d:operand(2))
    if alo and blo then return aok & bok & ALL[d:attr "predicate"](alo, ahi, blo, bhi) end
  end
end

-- The lazy values the lowering holds for the tiles v is computed from, each
-- with a copy of what it computed so far.
local function lazies_under(L, v, out)
  out = out or {}
  local x = L.vmap[v:id()]
  if not V.is_lazy(x) or out[x] then return out end
  local cache = {}
  for i, e in pairs(x.cache) do cache[i] = e end
  out[x] = cache
  local d = v:def()
  if d then for _, o in ipairs(d:operands()) do lazies_under(L, o, out) end end
  return out
end

-- arith.select(mask, a, b) of accumulator tiles whose mask is built from
-- index tiles (a causal or a ragged mask): a branch on "every element kept",
-- uniform over the tile, skips the per-element mask where no element is
-- masked (every block of keys but the last and the diagonal). -> the frag, or nil.
-- In a loop split where the masks keep every element (masks.lua; L.masks: the
-- select's result id -> the list where its per-element selects go, no branch:
-- chain.lua drops them from the copy of the loop whose masks keep every element).
local function masked_select(L, op, n, opds)
  if L.masks and L.masks[op:result(1):id()] then return nil end
  local keep = all_true(L, op:operand(1))
  if not keep or not V.is_frag(opds[1]) or not V.is_frag(opds[2]) then return nil end
  local a, b = {}, {}
  for i = 0, n - 1 do a[i + 1], b[i + 1] = opds[2]:at(i), elem_at(opds[3], i) end
  local lazies = lazies_under(L, op:operand(1))
  local res = table.pack(tl.if_(keep, function() return table.unpack(a, 1, n) end, function()
    local r = {}
    for i = 0, n - 1 do r[i + 1] = tl.select(opds[1]:at(i), a[i + 1], b[i + 1]) end
    return table.unpack(r, 1, n)
  end))
  for x, cache in pairs(lazies) do x.cache = cache end -- (what the branch computed is not seen outside it)
  return V.frag(R.tile_of(op:result(1)).elem, n, function(i) return res[i + 1] end)
end
-- }===

-- (c < x) & (c <= y) of i32 tiles (the compares in either order; attention's
-- causal mask, keys < SKV and keys <= rows) per element as one compare,
-- c < lim, lim = y + 1 < x ? y + 1 : x, and x where y + 1 wraps (y the
-- largest i32): exact for every value; lim depends on x and y only, so the
-- elements of a row share it (one per row after CSE) where x is a splat and y
-- a row index, instead of two compares and an and an element. n: the
-- elements a thread holds. -> the frag, or nil where op is not of this form.
local function bounded_twice(L, op, n)
  if op:name() ~= "arith.andi" then return nil end
  local a, b = op:operand(1):def(), op:operand(2):def()
  if not (a and b and a:name() == "arith.cmpi" and b:name() == "arith.cmpi" and a:operand(1) == b:operand(1)) then return nil end
  local ti = R.tile_of(a:operand(1))
  if not ti or ti.elem ~= tl.i32 then return nil end
  local lt, le
  if a:attr "predicate" == "slt" and b:attr "predicate" == "sle" then lt, le = a, b
  elseif a:attr "predicate" == "sle" and b:attr "predicate" == "slt" then lt, le = b, a
  else return nil end
  local c, x, y = V.get(L, lt:operand(1), op), V.get(L, lt:operand(2), op), V.get(L, le:operand(2), op)
  if not (V.is_frag(c) and V.is_frag(x) and V.is_frag(y)) then return nil end
  return V.frag(tl.i1, n, function(i)
    local yi, xi = y:at(i), x:at(i)
    local y1 = yi + tl.const(1, tl.i32)
    return c:at(i):lt(tl.select(yi:eq(tl.const(I32_MAX, tl.i32)), xi, tl.min(xi, y1)))
  end)
end

-- An index tile whose every element is the thread's base plus a constant
-- (x.affine = {base, off(i)}: an iota's) plus a splat s (or minus it) as
-- (base + s) + off(i): one add for the base, then the constant added an
-- element, instead of two adds an element (i32 adds wrap: the same values in
-- any order); the result is again of that form (attention's key index, iota
-- + j * BN, in every masked block). -> the frag, or nil.
local function offset_added(op, n, opds)
  local nm = op:name()
  if nm ~= "arith.addi" and nm ~= "arith.subi" then return nil end
  local a, s = opds[1], opds[2]
  if nm == "arith.addi" and not (V.is_frag(a) and a.affine) then a, s = s, a end
  if not (V.is_frag(a) and a.affine and V.is_frag(s) and s.splat) then return nil end
  local base = nm == "arith.addi" and a.affine.base + s:at(0) or a.affine.base - s:at(0)
  local off = a.affine.off
  local x = V.frag(tl.i32, n, function(i) return base + off(i) end)
  x.affine = { base = base, off = off }
  return x
end

-- the elementwise arith ops of tiles, per element
local function elementwise(L, op)
  local res = op:result(1)
  local ri = R.tile_of(res)
  local opds = {}
  for i, v in ipairs(op:operands()) do opds[i] = V.get(L, v, op) end
  if B.is_blocked(ri) then return B.elementwise(L, op, opds) end -- a compute agent's tiles
  local kind = R.layout_kind(res)
  local along -- slices of the mma layout (a row's reduction): per value the thread holds
  for _, o in ipairs(opds) do if V.is_line(o) then along = along or o.along end end
  if kind == "slice" and along then
    local attrs, nm = op:attrs(true), op:name()
    return V.line(ri.elem, along, function(off)
      local xs = {}
      for j, o in ipairs(opds) do
        if V.is_line(o) and o.along == along then xs[j] = o:at(off) elseif tl.is_value(o) then xs[j] = o
        else R.fail(op, "an operand of an elementwise op of slices that is not a slice of the accumulator's layout") end
      end
      return tl.op1(nm, xs, ri.elem, attrs)
    end)
  end
  if kind ~= "mma" and kind ~= "mma_operand" then R.fail(op, "elementwise ops on tiles of layout '%s' are not lowered yet (only the accumulator's mma layout)", tostring(kind)) end
  local attrs = op:attrs(true)
  local n = ri.shape[1] * ri.shape[2] // 128
  local nm = op:name()
  local src = opds[1]
  if nm == "arith.truncf" and V.is_frag(src) then
    local function convert(w) return tl.op1(nm, { w }, ri.elem, attrs) end
    local f = V.frag(ri.elem, n, function(i) return convert(src:at(i)) end)
    f.trunc_of, f.convert = src, convert -- the store packs the wide values, or converts each where it stores it
    return f
  end
  local masked = nm == "arith.select" and masked_select(L, op, n, opds)
  if masked then return masked end
  local bounded = bounded_twice(L, op, n) or offset_added(op, n, opds)
  if bounded then return bounded end
  local fused = (nm == "arith.addf" or nm == "arith.subf") and ri.elem == tl.f32 and contracted(L, op, n, opds)
  if fused then return fused end
  local selects = nm == "arith.select" and L.masks and L.masks[res:id()]
  return V.frag(ri.elem, n, function(i)
    local xs = {}
    for j, o in ipairs(opds) do
      if V.is_frag(o) then xs[j] = o:at(i) elseif tl.is_value(o) then xs[j] = o
      else R.fail(op, "an operand of an elementwise op that is not a tile of the accumulator's layout") end
    end
    local r = tl.op1(nm, xs, ri.elem, attrs)
    if selects then selects[#selects + 1] = r:def() end
    return r
  end)
end


-- tileas.math of one f32 element: the MUFU approximations (tile.math) and
-- formulas over them; docs/tileprog.md ("Tile maths") gives each one's error.
local function f32(x) return tl.const(x, tl.f32) end
local LOG2E = 1.4426950408889634
local function exp(x) return tl.ex2(x * f32(LOG2E)) end
local function sigmoid(x) return tl.rcp_approx(f32(1.0) + exp(-x)) end -- 1 / (1 + inf) = 0 far below 0
-- erf and gelu, two forms (tl.options.tile_math picks one at lowering time: a
-- lowering option of gpu/compile.lua; docs/tileprog.md, "Tile maths", gives each
-- one's error):
-- "log2poly" (the default): erfc(|x|) = 2^P(|x|), P a degree-5 polynomial fitted
-- to log2 erfc (weighted minimax on [0, 4.5], P(0) = 0, decreasing beyond: one ex2,
-- no reciprocal); gelu(x) = max(x, 0) - a Q(a), a = min(|x|, 10^4), Q(a) = 2^G(a) = erfc(a / sqrt 2) / 2,
-- G fitted on [0, 6] (G(0) = -1, decreasing beyond), the same function as
-- x (1 + erf(x / sqrt 2)) / 2 without its cancellation below 0.
-- "as7126": Abramowitz and Stegun 7.1.26, 1 - t (a1 + t (a2 + ... + t a5)) e^{-x^2} with
-- t = 1 / (1 + p |x|) (absolute error 1.5e-7 in exact arithmetic), odd; gelu from it.
local function older() return tl.options.tile_math == "as7126" end
local ERF_P, ERF_A = 0.3275911, { 0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429 }
local function erf_as7126(x)
  local a = tl.max(x, -x)
  local t = tl.rcp_approx(f32(1.0) + a * f32(ERF_P))
  local poly = f32(ERF_A[5])
  for i = 4, 1, -1 do poly = tl.fma(poly, t, f32(ERF_A[i])) end
  local y = f32(1.0) - poly * t * exp(-(a * a))
  return tl.select(x:lt(f32(0.0)), -y, y)
end
-- the coefficients of P and G from degree 0 up (f32 values; fitted by a
-- Lawson-weighted least squares, then checked in f32 by spec/tile_math_spec.lua)
X.ERFC_LOG2 = { 0.0, -1.62788904, -0.918509424, -0.148665503, 0.029589925, -0.00294412021 }
X.GELU_LOG2 = { -1.0, -1.15109134, -0.459254712, -0.0525611937, 0.00739748077, -0.000520451751 }
local function horner(c, a, from)
  local p = f32(c[#c])
  for i = #c - 1, from, -1 do p = tl.fma(p, a, f32(c[i])) end
  return p
end
local function erf_log2poly(x)
  local a = tl.max(x, -x)
  local y = f32(1.0) - tl.ex2(horner(X.ERFC_LOG2, a, 2) * a) -- (P(0) = 0: the last step a product)
  return tl.select(x:lt(f32(0.0)), -y, y)
end
-- (|x| held to 10^4 below: 2^G is 0 there, and gelu(+inf) = inf - inf 0 would be NaN)
X.GELU_CLAMP = 1e4
local function gelu_log2poly(x)
  local a = tl.min(tl.max(x, -x), f32(X.GELU_CLAMP))
  return tl.fma(-a, tl.ex2(horner(X.GELU_LOG2, a, 1)), tl.max(x, f32(0.0)))
end
local function erf(x) return older() and erf_as7126(x) or erf_log2poly(x) end
-- gelu_tanh: x sigmoid(2u), u = sqrt(2 / pi) (x + 0.044715 x^3), as
-- x / (1 + 2^(x (c1 + c3 x^2))) with c1 = -2 sqrt(2 / pi) log2 e, c3 = 0.044715 c1
-- (tl.options.tile_math = "as7126": the older sequence of the same function, 3 more multiplies)
local GT_C1, GT_C3 = -2.30220819, -0.102943242
X.GELU_TANH_C = { GT_C1, GT_C3 }
local function gelu_tanh(x)
  if older() then
    return x * sigmoid(f32(1.5957691216057308) * tl.fma(f32(0.044715) * x, x * x, x))
  end
  return x * tl.rcp_approx(f32(1.0) + tl.ex2(tl.fma(f32(GT_C3), x * x, f32(GT_C1)) * x))
end
local math_fns = {
  exp = exp,
  exp2 = function(x) return tl.ex2(x) end,
  log = function(x) return tl.lg2(x) * f32(0.6931471805599453) end,
  log2 = function(x) return tl.lg2(x) end,
  sqrt = function(x) return tl.sqrt_approx(x) end,
  rsqrt = function(x) return tl.rsqrt(x) end,
  abs = function(x) return tl.max(x, -x) end,
  rcp = function(x) return tl.rcp_approx(x) end,
  tanh = function(x) return tl.tanh(x) end,
  erf = erf,
  sigmoid = sigmoid,
  silu = function(x) return x * sigmoid(x) end,
  gelu = function(x)
    if older() then return f32(0.5) * x * (f32(1.0) + erf_as7126(x * f32(0.7071067811865476))) end
    return gelu_log2poly(x)
  end,
  -- x (1 + tanh u) / 2 computed as x sigmoid(2u): 1 + tanh.approx(u) cancels
  -- far below 0 (tanh.approx's 2^-11 relative error near -1 left 0.25% in y)
  gelu_tanh = gelu_tanh,
}
X.math_fns = math_fns
X.max_chain = nil -- (init.lua sets it a run: tl.options.max_chain, the pass option max_chain; nil: chain.lua's rule)


-- Where a reduced row's columns come from: tiled_loads (the dot's B ring's,
-- in the producer) whose coordinate along them depends on the program id
-- (get_program_id, the persistent loop's id) make the tile one of several
-- program tiles of the row. -> the tensor's name, or nil.
local function row_varies(L, v)
  local dep = {}
  local function depends(x)
    local id = x:id()
    if dep[id] == nil then
      dep[id] = false
      local d, r = x:def(), false
      if not d then
        local b = x:owner_block()
        r = b ~= nil and b:parent():name() == "scf.while"
      elseif d:name() == "tileas.get_program_id" then
        r = true
      else
        for _, o in ipairs(d:operands()) do r = r or depends(o) end
      end
      dep[id] = r
    end
    return dep[id]
  end
  local function load_varies(ld, d)
    if depends(ld:operand(2 + R.leading(ld) + d)) then return L.P.by_arg[ld:operand(1):id()].name end
  end
  local seen = {}
  local function trace(t)
    if not R.tile_of(t) or seen[t:id()] then return nil end
    seen[t:id()] = true
    local d = t:def()
    if not d then -- a value a loop carries: its init and what the body yields
      local b = t:owner_block()
      local o = b:parent()
      if o:name() ~= "scf.for" then return nil end
      return trace(o:operand(3 + t:index() - 1)) or trace(b:terminator():operand(t:index() - 1))
    end
    local n = d:name()
    if n == "scf.for" then
      return trace(d:operand(3 + t:index())) or trace(d:region(1):entry():terminator():operand(t:index()))
    elseif n == "tileas.tiled_load" then
      return load_varies(d, 1)
    elseif n == "tileas.dot" then -- its columns are B's rows ([N, K]) or columns ([K, N])
      local b = d:operand(2)
      while b:def() and b:def():name() == "tileas.extract_slice" do b = b:def():operand(1) end
      for _, u in ipairs(b:users()) do
        local ld = u:name() == "tileas.copy" and u:operand(2) == b and u:operand(1):def()
        if ld and ld:name() == "tileas.tiled_load" then
          local r = load_varies(ld, d:attr "transpose_b" and 0 or 1)
          if r then return r end
        end
      end
      return trace(d:operand(3))
    elseif n == "tileas.math" or n == "tileas.convert_layout" or n:match "^arith%." then
      for _, o in ipairs(d:operands()) do
        local r = trace(o)
        if r then return r end
      end
    end
    return nil
  end
  return trace(v)
end


-- A reduce along dim 1 (N) of a consumer's accumulator tile: a Line of the
-- rows the thread holds. In the wgmma fragment a row's values are in the 4
-- lanes of a quad (2 of every 8 columns each): each lane combines its own
-- (a tree; a max or min as a chain in element order with X.max_chain, or where
-- it is nil in a chained loop's body by chain.lua's rule, L.rows_chain), then
-- shfl.xor 1 and 2 within the quad give every lane of it the row's value.
-- Computed here (not lazily): the shuffles need the whole warp; but in the
-- body of a chained loop with the softmax a row at a time (L.rows_lazy, straight-line
-- code) a row is computed when first read, so that the softmax goes a row at
-- a time (chain.lua).
local reduce_fns = {
  add = function(a, b) return a + b end,
  max = function(a, b) return tl.max(a, b) end,
  min = function(a, b) return tl.min(a, b) end,
}
-- The reduces right after op (its next ops, while they are reduces) that
-- blocked.lua can lower with it at once: the same dim and operand type (one
-- distribution), none reading op's or another's result.
local function reduce_group(L, op)
  local ops, ids = { op }, { [op:result(1):id()] = true }
  local ty, dim = tostring(op:operand(1):type()), op:attr "dim"
  local nxt = op:next()
  while nxt and nxt:name() == "tileas.reduce" and nxt:attr "dim" == dim and tostring(nxt:operand(1):type()) == ty
    and not ids[nxt:operand(1):id()] do
    ops[#ops + 1], ids[nxt:result(1):id()] = nxt, true
    nxt = nxt:next()
  end
  return ops
end

local function lower_reduce(L, op, env)
  if L.reduced and L.reduced[op:result(1):id()] then return end -- (lowered with the reduce before it)
  local x = V.get(L, op:operand(1), op)
  if B.is_dist(x) then -- a compute agent's tile
    local ops, xs = reduce_group(L, op), {}
    for i, o in ipairs(ops) do
      local xi = i == 1 and x or V.get(L, o:operand(1), o)
      if not B.is_dist(xi) or xi.elem ~= x.elem then
        for j = #ops, i, -1 do ops[j] = nil end
        break
      end
      xs[i] = xi
    end
    local rs = B.reduce_many(L, ops, xs)
    L.reduced = L.reduced or {}
    for i, o in ipairs(ops) do
      L.vmap[o:result(1):id()] = rs[i]
      if i > 1 then L.reduced[o:result(1):id()] = true end
    end
    return
  end
  local xi, ri = R.tile_of(op:operand(1)), R.tile_of(op:result(1))
  local dim, kind = op:attr "dim", op:attr "kind"
  if not env.f or not V.is_frag(x) or #xi.shape ~= 2 then
    R.fail(op, "tileas.reduce of a tile not in the accumulator's mma layout (in a consumer) is not lowered yet")
  end
  if dim ~= 1 then
    R.fail(op, "a reduce along dim %d of the accumulator (its rows are spread over warps and warpgroups) is not lowered yet: only along dim 1, the row of a quad of lanes", dim)
  end
  if xi.elem ~= tl.f32 then R.fail(op, "reduce of %s tiles is not lowered yet (f32 accumulators)", tostring(xi.elem)) end
  local shape, c = R.cta_part(xi, L.nctas)
  if c and (c[2] or 1) > 1 then
    R.fail(op, "a reduce along dim 1 of a tile the cluster's CTAs split along it (cta = [%d, %d]): the row spans several CTAs, which is not lowered", c[1], c[2])
  end
  local src = row_varies(L, op:operand(1))
  if src then
    R.fail(op, "a reduce along dim 1 of a tile whose columns are one of several program tiles of the row (the tiled_load of '%s' that gives them has a coordinate along them that depends on the program id): a row spanning several program tiles along N is not lowered; reduce a tile that holds the whole row (a constant coordinate)", src)
  end
  local comb = reduce_fns[kind]
  if shape[1] ~= 64 then R.fail(op, "a reduce along dim 1 of a tile of %d rows a warpgroup (a ping-pong consumer's) is not lowered yet", shape[1]) end
  local n = shape[1] * shape[2] // 128
  local chain = kind ~= "add" and (X.max_chain or X.max_chain == nil and L.rows_chain)
  local lane_sum = env.lane_sums and env.lane_sums[op:result(1):id()]
  local function row(dr)
    local vals = {}
    for i = 0, n - 1 do
      local r = env.f.offset(i)
      if r == dr then vals[#vals + 1] = x:at(i) end
    end
    local v
    if chain then -- (X.max_chain: in element order, stdlib/attention.lua's row_max)
      v = vals[1]
      for j = 2, #vals do v = comb(v, vals[j]) end
    else
      while #vals > 1 do
        local nx = {}
        for j = 1, #vals, 2 do nx[#nx + 1] = vals[j + 1] and comb(vals[j], vals[j + 1]) or vals[j] end
        vals = nx
      end
      v = vals[1]
    end
    if lane_sum then return v end -- (a loop's carried row sum: the quad's lanes summed after it)
    v = comb(v, tl.shfl_xor(v, 1))
    return comb(v, tl.shfl_xor(v, 2))
  end
  if L.rows_lazy then -- (a chained loop's body with the softmax a row at a time: a row when first read, in
    -- the body's straight-line code, where the whole warp runs)
    L.vmap[op:result(1):id()] = V.line(ri.elem, 1, row)
    return
  end
  local rows = {}
  rows[0] = row(0)
  rows[8] = row(8)
  L.vmap[op:result(1):id()] = V.line(ri.elem, 1, function(dr) return rows[dr] end)
end


-- {=== the ops

local DIM = { x = 1, y = 2, z = 3 }

local function nop() end
OPS["scf.yield"], OPS["scf.condition"] = nop, nop
OPS["scf.while"] = function(_, op, env) return env.persistent(op) end
OPS["tileas.dot"] = function(_, op, env) return env.dot(op) end
OPS["tileas.tiled_load"] = function(_, op, env) return env.tiled_load(op) end
OPS["tileas.tiled_store"] = function(_, op, env) return env.tiled_store(op) end
OPS["tileas.copy"] = function(_, op, env) return env.copy(op) end
OPS["tileas.reduce"] = lower_reduce
OPS["tileas.get_program_id"] = function(L, op, env) L.vmap[op:result(1):id()] = env.program_id(op:attr "dim") end
OPS["tileas.num_programs"] = function(L, op) L.vmap[op:result(1):id()] = programs(L, DIM[op:attr "dim"]) end

OPS["tileas.splat"] = function(L, op)
  local ri = R.tile_of(op:result(1))
  local s = V.get(L, op:operand(1), op)
  local l = ri.layout
  if B.is_blocked(ri) then -- a compute agent's tile
    L.vmap[op:result(1):id()] = B.splat(L, op, s)
    return
  end
  if l and l.kind == "slice" and #ri.shape == 1 and l.parent and l.parent.kind == "mma" then
    L.vmap[op:result(1):id()] = V.line(ri.elem, l.dim == 0 and 2 or 1, function() return s end)
    return
  end
  if R.layout_kind(op:result(1)) ~= "mma" then R.fail(op, "splats of layout '%s' are not lowered yet", tostring(R.layout_kind(op:result(1)))) end
  local f = V.frag(ri.elem, ri.shape[1] * ri.shape[2] // 128, function() return s end)
  f.splat = op:operand(1)
  L.vmap[op:result(1):id()] = f
end

-- an index tile in the mma layout: the row (dim 0) or column (dim 1) of each
-- element the thread holds (a compute agent's blocked tile: blocked.lua's)
OPS["tileas.iota"] = function(L, op, env)
  local ri = R.tile_of(op:result(1))
  if B.is_blocked(ri) then
    L.vmap[op:result(1):id()] = B.iota(L, op)
    return
  end
  if R.layout_kind(op:result(1)) ~= "mma" or #ri.shape ~= 2 or not env.f or L.nctas > 1 then
    R.fail(op, "tileas.iota of a tile in a blocked layout or in the accumulator's mma layout (in a consumer, on one CTA) only")
  end
  local f, dim = env.f, op:attr "dim"
  local x = V.frag(tl.i32, ri.shape[1] * ri.shape[2] // 128, function(i)
    local dr, dc = f.offset(i)
    return dim == 0 and f.row + dr or f.col + dc
  end)
  -- each element the thread's base plus a constant (offset_added's)
  x.affine = { base = dim == 0 and f.row or f.col, off = function(i) return select(dim + 1, f.offset(i)) end }
  L.vmap[op:result(1):id()] = x
end

-- A register tile of one element (every extent 1) loaded from a global tensor
-- by a producer or a consumer: the element, loaded by every thread that needs
-- it (an index a program reads from memory: a grouped GEMM's expert), or
-- nil for another tile. tileas.extract of it is the element.
-- Whether tiled_load op loads a tile of one element.
function X.is_single_tile(v)
  for _, x in ipairs(R.tile_of(v).shape) do if x ~= 1 then return false end end
  return true
end
function X.is_single(op) return X.is_single_tile(op:result(1)) end
function X.single_load(L, op)
  if not X.is_single(op) then return nil end
  local ri = R.tile_of(op:result(1))
  local e = L.P.by_arg[op:operand(1):id()]
  local idx = {}
  for d = 1, #ri.shape do idx[d] = V.get(L, op:operand(1 + R.leading(op) + d), op) end
  local v = V.load_at(L, e, op, V.leading(L, op, idx))
  L.vmap[op:result(1):id()] = { single = v }
  return true
end
OPS["tileas.extract"] = function(L, op)
  local x = V.get(L, op:operand(1), op)
  if B.is_dist(x) and X.is_single_tile(op:operand(1)) and x.r and x.D.n == 1 then
    L.vmap[op:result(1):id()] = x.r[1] -- (a compute agent's tile of one element: every thread holds it)
    return
  end
  if type(x) ~= "table" or x.single == nil then R.fail(op, "extract of a tile of more than one element outside a compute agent is not lowered yet") end
  L.vmap[op:result(1):id()] = x.single
end

OPS["tileas.extract_slice"] = function(L, op, env)
  local r = V.get(L, op:operand(1), op)
  if not V.is_ring(r) then R.fail(op, "extract_slice of register tiles is not lowered yet") end
  local offs, per = op:attr "offsets", op:attr "tileas.replica_offsets"
  local ring = r.ring or r
  offs, per = R.piece_rows(ring, offs, op), per and R.piece_rows(ring, per, op)
  if per and env.replica then -- one code for every replica: the offsets of this one
    offs = { env.replica * per[1], env.replica * per[2] }
    if per[1] == 0 then offs[1] = 0 end
    if per[2] == 0 then offs[2] = 0 end
  end
  L.vmap[op:result(1):id()] = setmetatable({ ring = r.ring or r, offsets = { offs[1], offs[2] }, shape = R.tile_of(op:result(1)).shape,
                                             replica = per and env.replica and { env.replica, per[1] } or nil }, V.Ring)
end

-- expand_dim, broadcast and convert_layout keep the value: a row (along 2) or
-- column (along 1) over the fragment reads the Line per element
local function shape_op(L, op, env)
  local n = op:name()
  local x = V.get(L, op:operand(1), op)
  local ri = R.tile_of(op:result(1))
  if B.is_dist(x) then -- a compute agent's tile
    if n == "tileas.convert_layout" and op:operand(1):type() ~= op:result(1):type() then
      L.vmap[op:result(1):id()] = B.exchange(L, op, x, false)
    else
      L.vmap[op:result(1):id()] = n == "tileas.convert_layout" and x or B.shape(L, op, x)
    end
    return
  end
  local from, to = R.layout_kind(op:operand(1)), R.layout_kind(op:result(1))
  -- a 64-row register operand of wgmma sits where the accumulator's element does
  local same = (from == "mma" or from == "mma_operand") and (to == "mma" or to == "mma_operand") and ri.shape[1] == 64
  if n == "tileas.convert_layout" and from ~= to and not same then
    R.fail(op, "convert_layout from %s to %s is not lowered yet", tostring(R.layout_kind(op:operand(1))), tostring(R.layout_kind(op:result(1))))
  end
  if n == "tileas.convert_layout" and L.nctas > 1 and R.moves_between_ctas(op) then
    for _, u in ipairs(op:result(1):users()) do -- tileas-plan-cta's gather of what a reduce reads
      if u:name() == "tileas.reduce" then
        R.fail(u, "a reduce of a tile the cluster's CTAs split (tileas-plan-cta gathers it between the CTAs) is not lowered yet")
      end
    end
    R.fail(op, "a convert_layout between the cluster's CTAs (its CTA part changes) is not lowered yet")
  end
  if V.is_line(x) and #ri.shape == 2 then
    L.vmap[op:result(1):id()] = V.frag(ri.elem, 0, function(i)
      local dr, dc = env.f.offset(i)
      return x:at(x.along == 2 and dc or dr)
    end)
  else
    L.vmap[op:result(1):id()] = x
  end
end
OPS["tileas.expand_dim"], OPS["tileas.broadcast"], OPS["tileas.convert_layout"] = shape_op, shape_op, shape_op
OPS["tileas.transpose"] = function(L, op)
  local x = V.get(L, op:operand(1), op)
  if V.is_frag(x) then -- a consumer's accumulator D^T (a swapped GEMM's): stored as D (epilogue.lua)
    for _, u in ipairs(op:result(1):users()) do
      if u:name() ~= "tileas.tiled_store" then
        R.fail(u, "a transposed accumulator may only be stored (tiled_store), not used by '%s' (apply elementwise ops and the cast before the transpose)", u:name())
      end
    end
    local y = V.frag(x.elem, 0, function(i) return x:at(i) end)
    y.transposed, y.of = true, x
    L.vmap[op:result(1):id()] = y
    return
  end
  if not B.is_dist(x) then R.fail(op, "a transpose of a tile not of a blocked layout (in a compute agent) or of an accumulator is not lowered yet") end
  L.vmap[op:result(1):id()] = B.exchange(L, op, x, true)
end

OPS["tileas.math"] = function(L, op)
  local x = V.get(L, op:operand(1), op)
  local fn = math_fns[op:attr "fn"]
  if B.is_dist(x) then -- a compute agent's tile
    if x.elem ~= tl.f32 then R.fail(op, "tileas.math of %s tiles is not lowered yet (f32: cast first)", tostring(x.elem)) end
    L.vmap[op:result(1):id()] = B.elementwise(L, op, { x }, fn)
    return
  end
  if not (V.is_frag(x) or V.is_line(x)) or R.tile_of(op:result(1)).elem ~= tl.f32 then
    R.fail(op, "tileas.math of f32 accumulator tiles (or of their slices) only")
  end
  local y = V.lazy(x.kind, x.elem, function(i) return fn(x:at(i)) end)
  y.along = x.along
  L.vmap[op:result(1):id()] = y
end

-- an op with no entry of its own
local function other(L, op, env)
  local n = op:name()
  if n:match "^arith%." and op:nresults() == 1 and R.tile_of(op:result(1)) then
    L.vmap[op:result(1):id()] = elementwise(L, op)
  elseif n == "arith.constant" and op:attr "tileas.replica" and env.replica then
    L.vmap[op:result(1):id()] = env.replica
  elseif n:match "^tileas%." then
    R.fail(op, "'%s' is not lowered yet", n)
  elseif op:nregions() > 0 then
    R.fail(op, "'%s' with regions inside an agent is not lowered yet", n)
  else
    V.clone_scalar(L, op)
  end
end

-- a loop marked for pipelining: the role's; another scf.for: not lowered
OPS["scf.for"] = function(L, op, env)
  if op:attr "tileas.pipeline" then return env.pipelined_for(op) end
  if env.loop then return env.loop(op) end -- a role that lowers loops of its own (compute.lua)
  return other(L, op, env)
end

-- }===

-- Lower one op of an agent (at its line).
function X.lower_op(L, op, env)
  local f = OPS[op:name()] or other
  return f(L, op, env)
end

-- Lower the ops of a block, each at its line.
function X.lower_block(L, block, env)
  for _, op in ipairs(block:ops()) do V.at_loc(op, X.lower_op, L, op, env) end
end

return X
