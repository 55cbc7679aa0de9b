-- tilua.dsl.kinds: kinds of values that modules give a meaning to.
--
-- The operators and a few functions (tl.load, tl.store, tl.extract, tl.zeros,
-- tl.select, v:cast, the comparisons, the approximate math of dsl/warp.lua)
-- also work on kinds of values that other modules define: the tiles and
-- tensors of tile programs (dsl/tileprog.lua). Such a module registers its
-- implementations once, by kind (kinds.register), and each of those
-- operations first looks its operands' kinds up (kinds.op), in the order of
-- its operands; the meaning written where the operation is defined is the one
-- of every other value. No module replaces another module's functions.

local core = require "tilua.core"

local Value = core.metatable("Value")

local K = {}

local registered = {} -- kind -> { operation name -> fn }

-- The kind registrations are keyed by: a value's type kind ("tile"), a dialect
-- type's name ("tileas.tensor"), "shape" for a plain Lua table (an extent list).
local key_of = setmetatable({}, { __mode = "k" }) -- a type's key, memoized (one userdata a type)
-- -> the key, and an IR value's type.
local function value_kind(x)
  local mt = getmetatable(x)
  if mt == Value then
    local t = x:type()
    local k = key_of[t]
    if not k then
      k = t:kind()
      if k == "dialect" then k = t:info().name end
      key_of[t] = k
    end
    return k, t
  end
  if mt == nil and type(x) == "table" then return "shape" end
  return nil
end

-- The implementation of operation `name` registered for the kind of the
-- first of a, b, c that has one; else nil and the types of a and b where they
-- are IR values (nil where not): the operation's own meaning asks for them
-- next, and each is a binding call.
function K.op(name, a, b, c)
  local ka, ta = value_kind(a)
  local ops = registered[ka]
  if ops and ops[name] then return ops[name] end
  local tb
  if b ~= nil then
    local kb
    kb, tb = value_kind(b)
    ops = registered[kb]
    if ops and ops[name] then return ops[name] end
  end
  if c ~= nil then
    ops = registered[value_kind(c)]
    if ops and ops[name] then return ops[name] end
  end
  return nil, ta, tb
end

-- The operations of kind `kind` (once per kind).
function K.register(kind, ops)
  if registered[kind] then error(("kinds.register: the kind '%s' is registered already"):format(kind), 2) end
  registered[kind] = ops
end

-- K.binary(operands, pick) -> builder(iop, fop, symbol) -> fn(a, b [, ta, tb]):
-- the arithmetic operators of a kind of value. operands(a, b, what, ta, tb)
-- brings the two to one type t (or raises, naming the operator by `what`) and
-- may return t too (ta, tb: the operands' types where the caller knows them,
-- K.op's); pick(t, iop, fop) names the op for t (nil: the operator is not
-- defined on t); the op yields a t.
local tl -- (tilua, once loaded: it loads this module first)
function K.binary(operands, pick)
  return function(iop, fop, sym)
    local what = "'" .. sym .. "'"
    return function(a, b, ta, tb)
      tl = tl or require "tilua"
      local t
      a, b, t = operands(a, b, what, ta, tb)
      t = t or a:type()
      local name = pick(t, iop, fop)
      if not name then tl.raise(("'%s' is not defined on %s"):format(sym, tostring(t))) end
      return tl.op1(name, { a, b }, t)
    end
  end
end

-- dsl/warp.lua's approximate functions (name -> its tile.math fn): tl.rsqrt of a
-- tile is the kind's rsqrt (dsl/tileprog.lua defines the others for tiles only).
K.approx_math = { ex2 = "ex2", lg2 = "lg2", rsqrt = "rsqrt", rcp_approx = "rcp", sqrt_approx = "sqrt",
                  sin = "sin", cos = "cos", tanh = "tanh" }

return K
