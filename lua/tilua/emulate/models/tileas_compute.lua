-- tilua.emulate.models.tileas_compute: the compute ops of the tile programs'
-- model (emulate/models/tileas.lua, which gives it its handler table and the
-- helpers both halves use): splat, iota, dot, math, reductions, shape ops,
-- elementwise. Each makes a tile of the result type whose elements the run
-- computes where it computes elements (R.values, or the op in the slice:
-- tileas_slice.lua), else its shape only.
local lanes = require "tilua.emulate.lanes"
local report = require "tilua.emulate.report"
local values = require "tilua.emulate.values"

local uniform = lanes.uniform
local violation = report.violation

local handlers = {}
-- tileas.lua's helpers, given by the installer below
local codec, count, rows_of, new_tile, is_tile, read_tile

-- a tile of the result type, element i = f(i), where the run computes
-- elements (R.values, or rec in the slice: tileas_slice.lua) and every tile
-- operand given has them; else its shape only
-- The tile of rec's result type without elements (protocol-only runs make
-- one at every op they run): one a decoded op, never changed, as the result
-- list that holds it (empty).
local function elementless(rec)
  local t = rec.elementless
  if not t then
    t = new_tile(rec.tt.shape, rec.tt.elem, nil)
    rec.elementless = t
  end
  return t
end
local function result(R, rec, f, x, y, z)
  local tt = rec.tt
  local n = tt.n
  if not (R.values or rec.exact) or (is_tile(x) and not x.v) or (is_tile(y) and not y.v) or (is_tile(z) and not z.v) then
    return elementless(rec)
  end
  R:tick(rec, rows_of(tt.shape))
  R.element_ops = R.element_ops + n
  local v = {}
  for i = 1, n do v[i] = f(i) end
  return new_tile(tt.shape, tt.elem, v)
end
local function keep(x) return x end
local function round_of(rec)
  local c = codec(rec.tt.elem)
  if c then return c.round end
  return keep
end
-- result's first case, for a handler to take before it makes result's closure:
-- a protocol-only run computes no elements of an op outside the slice
local function no_values(R, rec) return not (R.values or rec.exact) end
local function empty(rec)
  local outs = rec.empty_outs
  if not outs then
    outs = { elementless(rec) }
    rec.empty_outs = outs
  end
  return outs
end

handlers["tileas.splat"] = function(R, _, rec, ins)
  local x = uniform(rec, ins[1], "value")
  local r = round_of(rec)(x)
  if no_values(R, rec) then return empty(rec) end
  return { result(R, rec, function() return r end) }
end

-- strides of a row-major shape (elements)
local function strides_of(shape)
  local s, out = 1, {}
  for d = #shape, 1, -1 do
    out[d] = s
    s = s * shape[d]
  end
  return out
end

handlers["tileas.iota"] = function(R, _, rec)
  local shape = rec.tt.shape
  local st, dim = strides_of(shape), rec.op:attr "dim" + 1
  if no_values(R, rec) then return empty(rec) end
  return { result(R, rec, function(i) return (i - 1) // st[dim] % shape[dim] end) }
end

handlers["tileas.dot"] = function(R, W, rec, ins)
  local a, b = read_tile(R, W, rec, ins[1]), read_tile(R, W, rec, ins[2])
  local acc = read_tile(R, W, rec, ins[3])
  local op = rec.op
  local ta, tb = op:attr "transpose_a", op:attr "transpose_b"
  local sa = op:attr "negate_a" and -1 or 1
  local sb = op:attr "negate_b" and -1 or 1
  local M, N = rec.tt.shape[1], rec.tt.shape[2]
  local K = ta and a.shape[1] or a.shape[2]
  if not (R.values or rec.exact) or not (a.v and b.v and acc.v) then return empty(rec) end
  R:tick(rec, M)
  R.element_ops = R.element_ops + M * N * K
  local av, bv, cv = a.v, b.v, acc.v
  local fp8 = op:attr "fp8" -- 8-bit integer tiles holding fp8 bytes: their values
  if fp8 then
    local dec = values.fp8_dec[fp8]
    local function decoded(v)
      local out = {}
      for i = 1, #v do out[i] = dec(v[i] & 0xff) end
      return out
    end
    av, bv = decoded(av), decoded(bv)
  end
  local round = round_of(rec)
  local out = {}
  -- a[i, k] at ia + k * sak, b[k, j] at jb + k * sbk: as given, or transposed
  local sak, sbk = ta and M or 1, tb and 1 or N
  -- a row of a or a column of b that is all zeros (a tile past a tensor's
  -- edge) gives the sum the loop would: 0.0
  local function zero(v, base, stride)
    for k = 0, K - 1 do if v[base + k * stride] ~= 0 then return false end end
    return true
  end
  local zcol = {}
  for j = 0, N - 1 do zcol[j] = zero(bv, tb and j * K + 1 or j + 1, sbk) end
  for i = 0, M - 1 do
    local ia = ta and i + 1 or i * K + 1
    local zrow = zero(av, ia, sak)
    for j = 0, N - 1 do
      local s = 0.0
      if not (zrow or zcol[j]) then
        local jb = tb and j * K + 1 or j + 1
        for k = 0, K - 1 do s = s + av[ia + k * sak] * bv[jb + k * sbk] end
      end
      out[i * N + j + 1] = round(cv[i * N + j + 1] + sa * sb * s)
    end
  end
  return { new_tile(rec.tt.shape, rec.tt.elem, out) }
end

local MATH = require("tilua.emulate.mathref").fn -- the exact functions, rounded to the tile's type
handlers["tileas.math"] = function(R, W, rec, ins)
  local x = read_tile(R, W, rec, ins[1])
  local f, round = MATH[rec.op:attr "fn"], round_of(rec)
  if no_values(R, rec) then return empty(rec) end
  return { result(R, rec, function(i) return round(f(x.v[i])) end, x) }
end

-- A scalar made of tile x's elements at rec (the slice's seeds): a tile of
-- the slice without them is an op whose operands the slice does not follow
-- (said, never read as 0)
local function seed_elements(rec, x)
  if rec.exact and not x.v then
    violation("model", ("%s at %s: the elements of its tile were not computed (an op the checker's slice does not follow: models/tileas_slice.lua)")
      :format(rec.name, rec.loc))
  end
end
local REDUCE = { add = function(a, b) return a + b end, max = math.max, min = math.min }
handlers["tileas.reduce"] = function(R, W, rec, ins)
  local x = read_tile(R, W, rec, ins[1])
  local dim = rec.op:attr "dim" + 1
  local f = REDUCE[rec.op:attr "kind"]
  local shape = x.shape
  local xs = strides_of(shape)
  local n = count(shape) // shape[dim]
  local round = (codec(x.elem) or { round = function(y) return y end }).round
  R:tick(rec, rows_of(shape))
  local function reduce_at(base) -- base: the element index with coordinate 0 along dim
    local s = x.v[base + 1]
    for k = 1, shape[dim] - 1 do s = round(f(s, x.v[base + k * xs[dim] + 1])) end
    return s
  end
  -- the out index o -> the element of x with dim's coordinate 0
  local function base_of(o)
    local rest, base = o, 0
    for d = #shape, 1, -1 do
      if d ~= dim then
        local c = rest % shape[d]
        rest = rest // shape[d]
        base = base + c * xs[d]
      end
    end
    return base
  end
  local exact = (R.values or rec.exact) and x.v
  if exact then R.element_ops = R.element_ops + count(shape) end
  if not rec.tt then -- a rank-1 tile: a scalar
    seed_elements(rec, x)
    return { exact and reduce_at(0) or 0 }
  end
  if not exact then return empty(rec) end
  local v = {}
  for o = 0, n - 1 do v[o + 1] = reduce_at(base_of(o)) end
  return { new_tile(rec.tt.shape, rec.tt.elem, v) }
end

-- element i of the result (row-major) -> element of x: dims of size 1 in x
-- read index 0 (broadcast), `skip` a dim of the result x does not have (expand_dim)
local function index_map(shape, xshape, off, skip)
  local rs, xs = strides_of(shape), strides_of(xshape)
  return function(i)
    local rest, e, xd = i - 1, 0, 0
    for d = 1, #shape do
      local c = rest // rs[d]
      rest = rest % rs[d]
      if d ~= skip then
        xd = xd + 1
        local xc = xshape[xd] == 1 and not off and 0 or c + (off and off[xd] or 0)
        e = e + xc * xs[xd]
      end
    end
    return e + 1
  end
end
handlers["tileas.broadcast"] = function(R, W, rec, ins)
  local x = read_tile(R, W, rec, ins[1])
  if no_values(R, rec) then return empty(rec) end
  local map = index_map(rec.tt.shape, x.shape)
  return { result(R, rec, function(i) return x.v[map(i)] end, x) }
end
handlers["tileas.expand_dim"] = function(R, W, rec, ins)
  local x = read_tile(R, W, rec, ins[1])
  local dim = rec.op:attr "dim" + 1
  if no_values(R, rec) then return empty(rec) end
  local map = index_map(rec.tt.shape, x.shape, nil, dim)
  return { result(R, rec, function(i) return x.v[map(i)] end, x) }
end
handlers["tileas.transpose"] = function(R, W, rec, ins)
  local x = read_tile(R, W, rec, ins[1])
  local rows, cols = rec.tt.shape[1], rec.tt.shape[2] -- the result's: x is cols x rows
  if no_values(R, rec) then return empty(rec) end
  return { result(R, rec, function(i)
    local r, c = (i - 1) // cols, (i - 1) % cols
    return x.v[c * rows + r + 1]
  end, x) }
end
handlers["tileas.extract_slice"] = function(R, W, rec, ins)
  local x = read_tile(R, W, rec, ins[1])
  local offsets = rec.op:attr "offsets"
  if no_values(R, rec) then return empty(rec) end
  local map = index_map(rec.tt.shape, x.shape, offsets)
  return { result(R, rec, function(i) return x.v[map(i)] end, x) }
end
handlers["tileas.extract"] = function(R, W, rec, ins)
  local x = read_tile(R, W, rec, ins[1])
  seed_elements(rec, x)
  if not x.v then return { 0 } end
  local xs, e = strides_of(x.shape), 0
  for d = 1, #x.shape do
    local c = uniform(rec, ins[d + 1], "index")
    if c < 0 or c >= x.shape[d] then
      violation("model", ("%s at %s: index %d of dim %d is outside the tile (%d)"):format(rec.name, rec.loc, c, d - 1, x.shape[d]))
    end
    e = e + c * xs[d]
  end
  return { x.v[e + 1] }
end

-- elementwise arith on tiles: f(a, b, c) per element, the result rounded to its type
local PRED = { oeq = function(a, b) return a == b end, one = function(a, b) return a ~= b end,
               olt = function(a, b) return a < b end, ole = function(a, b) return a <= b end,
               ogt = function(a, b) return a > b end, oge = function(a, b) return a >= b end }
local IPRED = { eq = function(a, b) return a == b end, ne = function(a, b) return a ~= b end,
                slt = function(a, b) return a < b end, sle = function(a, b) return a <= b end,
                sgt = function(a, b) return a > b end, sge = function(a, b) return a >= b end }
local function elementwise_fn(rec)
  local n, round = rec.fn, round_of(rec)
  if n == "addf" or n == "addi" then return function(a, b) return round(a + b) end
  elseif n == "subf" or n == "subi" then return function(a, b) return round(a - b) end
  elseif n == "mulf" or n == "muli" then return function(a, b) return round(a * b) end
  elseif n == "divf" then return function(a, b) return round(a / b) end
  elseif n == "negf" then return function(a) return -a end
  elseif n == "extf" then return function(a) return a end
  elseif n == "truncf" then return function(a) return round(a) end
  elseif n == "maximumf" or n == "minimumf" then
    local max = n == "maximumf"
    return function(a, b)
      if a ~= a or b ~= b then return 0 / 0 end
      return max == (a >= b) and a or b
    end
  elseif n == "select" then return function(c, a, b) return c ~= 0 and a or b end
  elseif n == "andi" then return function(a, b) return a & b end
  elseif n == "ori" then return function(a, b) return a | b end
  elseif n == "cmpi" then -- (tile elements hold their signed values)
    local cmp = IPRED[rec.op:attr "predicate"]
    if not cmp then violation("model", ("%s at %s: predicate %s"):format(rec.name, rec.loc, tostring(rec.op:attr "predicate"))) end
    return function(a, b) return cmp(a, b) and 1 or 0 end
  elseif n == "cmpf" then
    local cmp = PRED[rec.op:attr "predicate"]
    if not cmp then violation("model", ("%s at %s: predicate %s"):format(rec.name, rec.loc, tostring(rec.op:attr "predicate"))) end
    return function(a, b) return (a == a and b == b and cmp(a, b)) and 1 or 0 end
  end
end
handlers["tileas.elementwise"] = function(R, W, rec, ins)
  local f = rec.efn
  if not f then
    f = elementwise_fn(rec)
    rec.efn = f
  end
  if no_values(R, rec) then return empty(rec) end
  local xs = {}
  for i = 1, #ins do xs[i] = is_tile(ins[i]) and ins[i].v or false end
  local a, b, c = ins[1], ins[2], ins[3]
  local va, vb, vc = xs[1], xs[2], xs[3]
  return { result(R, rec, function(i)
    return f(va and va[i] or a, vb and vb[i] or b, vc and vc[i] or c)
  end, a, b, c) }
end

-- installs the handlers into tileas.lua's table, with the helpers they share
return function(into, H)
  codec, count, rows_of, new_tile, is_tile, read_tile = H.codec, H.count, H.rows_of, H.new_tile, H.is_tile, H.read_tile
  for name, f in pairs(handlers) do into[name] = f end
end
