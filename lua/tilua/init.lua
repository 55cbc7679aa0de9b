-- tilua: the Lua surface of the kernel compiler.
--
-- The C core (tilua.core) owns the IR; this file builds it the way kernel
-- scripts read: SSA values with arithmetic operators, tl.for_range / tl.if_ /
-- tl.while_ for structured control flow, tl.kernel for kernels, and
-- tl.compile to run a pipeline while keeping the IR of every stage.
--
-- Errors point at the script line that caused them: the C core skips the
-- frames of this library when it records locations.

local core = require "tilua.core"

local tl = { core = core, version = core.version } -- tilua.h's TILUA_VERSION
-- The rooms of the library (dsl/, gpu/, stdlib/, below) add their functions
-- to tl as they load: each takes it with require "tilua", which finds it here
-- while this file is still running.
package.loaded["tilua"] = tl
local kinds = require "tilua.dsl.kinds"
local kind_op = kinds.op

local Value = core.metatable("Value")
local V = Value.__index -- methods of values

-- {=====================================================================
-- Errors at the user's line
-- ======================================================================

-- Raise msg prefixed with the user's file:line (the innermost frame outside tilua).
function tl.raise(msg)
  local file, line = core.user_location()
  if file then msg = ("%s:%d: %s"):format(file, line, msg) end
  error(msg, 0)
end
local raise = tl.raise

-- tl.stop(code [, message]): end the script with an exit code. The library
-- never exits the process itself: this raises a stop that the host handles
-- (`tilua` prints the message and exits with the code; an embedding host gets
-- an error whose `exit_code` and `message` say what was asked).
local Stop = { __tostring = function(s) return s.message or ("stop " .. s.exit_code) end }
function tl.stop(code, message)
  if math.type(code) ~= "integer" or code < 0 or code > 255 then
    raise(("stop: the exit code must be an integer in [0, 255], got %s"):format(tostring(code)))
  end
  if message ~= nil and type(message) ~= "string" then
    raise(("stop: the message must be a string, got %s"):format(type(message)))
  end
  error(setmetatable({ exit_code = code, message = message }, Stop), 0)
end

local function is_value(x) return getmetatable(x) == Value end
tl.is_value = is_value

local function typename(x)
  if is_value(x) then return tostring(x:type()) end
  return type(x)
end

-- }=====================================================================

-- {=====================================================================
-- Types
-- ======================================================================

-- tl.i32 & co. are the default context's types, looked up when read: a script
-- that closes the default context (or sets another) gets the new one's types.
-- Integers are signless: signedness belongs to the operations (divsi / divui ...),
-- so u8..u64 are i8..i64 and bool is i1.
local builtin_types = {
  i1 = function() return core.type_int(1) end, i8 = function() return core.type_int(8) end,
  i16 = function() return core.type_int(16) end, i32 = function() return core.type_int(32) end,
  i64 = function() return core.type_int(64) end,
  f16 = function() return core.type_float "f16" end, bf16 = function() return core.type_float "bf16" end,
  f32 = function() return core.type_float "f32" end, f64 = function() return core.type_float "f64" end,
  index = function() return core.type_index() end, none = function() return core.type_none() end,
}
for u, i in pairs { u8 = "i8", u16 = "i16", u32 = "i32", u64 = "i64", bool = "i1" } do builtin_types[u] = builtin_types[i] end
local types_of_ctx = setmetatable({}, { __mode = "k" }) -- context -> { name -> type }

-- tl.did_you_mean(word, names [, prefix]) -> "; did you mean 'NAME'?" with the
-- name of names (a list, or a set: its string keys) nearest word
-- (core.closest_name), written after prefix (":" for ':stages'), or "" when
-- none is near: the tail of an error about a misspelt name.
function tl.did_you_mean(word, names, prefix)
  local list = {}
  for k, v in pairs(names) do
    local n = math.type(k) == "integer" and v or k
    if type(n) == "string" then list[#list + 1] = n end
  end
  table.sort(list)
  local near = type(word) == "string" and word ~= "" and core.closest_name(word, list)
  return near and ("; did you mean '%s%s'?"):format(prefix or "", near) or ""
end

-- A name that tl does not have is a typo (tl.f23): an error at the script's
-- line naming the nearest name tl has, before a nil reaches a builder.
-- rawget(tl, name) tests for a field without it.
local function no_such_field(key)
  local names = {}
  for k in pairs(tl) do if type(k) == "string" then names[#names + 1] = k end end
  for k in pairs(builtin_types) do names[#names + 1] = k end
  table.sort(names)
  local near = type(key) == "string" and core.closest_name(key, names)
  raise(("tl.%s does not exist%s"):format(tostring(key), near and ("; did you mean tl.%s?"):format(near) or ""))
end

setmetatable(tl, { __index = function(_, key)
  local make = builtin_types[key]
  if not make then return no_such_field(key) end
  local ctx = core.default_context()
  local cache = types_of_ctx[ctx]
  if not cache then
    cache = {}
    types_of_ctx[ctx] = cache
  end
  local t = cache[key]
  if not t then
    t = make()
    cache[key] = t
  end
  return t
end })

function tl.ptr(elem, space) return core.type_ptr(elem, space or "global") end
function tl.vector(elem, shape) return core.type_vector(elem, type(shape) == "table" and shape or { shape }) end
function tl.memref(elem, shape, space, swizzle) return core.type_memref(elem, shape, space or "global", swizzle) end
function tl.tile(elem, shape, space, layout) return core.type_tile(elem, shape, space or "rmem", layout) end
-- A dialect type: tl.type("cutlass.seq_bar", {2}).
function tl.type(name, params) return core.type_dialect(name, params) end

-- tl.by_type(fn) -> fn memoized by the type it is given, by its userdata (one
-- a type and context: l_ir.c's push_type): the builders and the lowering ask
-- the same few types again and again (a nil answer is asked again).
local function by_type(fn)
  local memo = setmetatable({}, { __mode = "k" })
  return function(t)
    local v = memo[t]
    if v == nil then
      v = fn(t)
      memo[t] = v
    end
    return v
  end
end
tl.by_type = by_type

-- A type's kind: arithmetic asks it of its operands' types at every op it builds.
local kind = by_type(function(t) return t:kind() end)
local function is_int(t) local k = kind(t) return k == "int" or k == "index" end
local function is_float(t) return kind(t) == "float" end
-- A packed pair vector<2 x f16|bf16>: add, sub, mul, fma, min, max and neg work on
-- both halves at once (add.rn.bf16x2 ...).
local function is_pair(t)
  if kind(t) ~= "vector" then return false end
  local i = t:info()
  return #i.shape == 1 and i.shape[1] == 2 and (i.elem == tl.f16 or i.elem == tl.bf16)
end
tl.is_int_type, tl.is_float_type, tl.is_packed_pair = is_int, is_float, is_pair
tl.type_kind = kind -- (t:kind(), memoized)

-- }=====================================================================

-- {=====================================================================
-- Building operations at an insertion point
-- ======================================================================

-- The insertion points, innermost last: { block =, before =, co = the coroutine
-- that set it }. Ops go to the innermost one set by the running coroutine or
-- by one that resumed it: two kernels defined in coroutines that take turns
-- each build into their own, and a coroutine started inside a define builds
-- into it. An insertion point goes when tl.at's frame ends, by a return or an
-- error (a to-be-closed variable instead of pcall: pcall is a C call, and Lua
-- allows about 200 nested ones, so nesting regions through pcall stopped at ~190).
local ip_stack = {}

local function remove_ip(e)
  for i = #ip_stack, 1, -1 do
    if ip_stack[i] == e then
      table.remove(ip_stack, i)
      return
    end
  end
end

-- The innermost insertion point of the running coroutine (or of one that
-- resumed it); those of coroutines that died in a define are dropped.
local running = coroutine.running
local function current_ip()
  local co = running()
  for i = #ip_stack, 1, -1 do
    local e = ip_stack[i]
    if e.co == co then return e end
    local st = coroutine.status(e.co)
    if st == "normal" then return e end
    if st == "dead" then table.remove(ip_stack, i) end
  end
end

local max_nesting = core.max_nesting

function tl.at(block, before, fn, ...)
  if #ip_stack >= max_nesting - 2 then -- the module and the kernel are two levels
    raise(("regions nest at most %d levels deep"):format(max_nesting))
  end
  local e = { block = block, before = before, co = coroutine.running() }
  ip_stack[#ip_stack + 1] = e
  local _ <close> = setmetatable({}, { __close = function() remove_ip(e) end })
  return fn(...)
end

function tl.insertion_point() return current_ip() end

-- Create an op at the current insertion point; its structure is checked at once.
-- tl.op(name, operands, result_types, attrs, nregions) -> op
-- (first: return the op's first result instead, as tl.op1)
local op_create = core.op_create -- (its ctx nil: the default context)
local function create(name, operands, results, attrs, nregions, first)
  local ip = current_ip()
  if not ip then raise(("'%s' built outside of a kernel or region"):format(name)) end
  return op_create(nil, name, operands, results, attrs, nregions, ip.block, ip.before, nil, true, first)
end
function tl.op(name, operands, results, attrs, nregions) return create(name, operands, results, attrs, nregions) end

-- The locations tl.at_caller pinned before, restored as its frames end (as pop_ip).
local pinned, npinned = {}, 0
local unpin = setmetatable({}, { __close = function()
  core.pin_location(pinned[npinned] or nil)
  pinned[npinned], npinned = nil, npinned - 1
end })

-- tl.at_caller(fn, ...): run fn(...) (a library routine that builds IR) with
-- every op it builds located at the user's line that called it, found once
-- (not by a walk of the stack for each op); returns fn's results.
function tl.at_caller(fn, ...)
  local file, line = core.user_location()
  if not file then return fn(...) end
  npinned = npinned + 1
  pinned[npinned] = core.pin_location(file, line) or false
  local _ <close> = unpin
  return fn(...)
end

-- The single result of an op created with tl.op.
function tl.op1(name, operands, result, attrs)
  return create(name, operands, result, attrs, nil, true) -- (one type: no list an op)
end

function tl.context() return core.default_context() end

-- }=====================================================================

-- {=====================================================================
-- Constants and arithmetic on values
-- ======================================================================

-- The attributes of integer constants by type and value, made once (a
-- lowering builds hundreds of constants, most of them the same few); read
-- only, as the empty operand list.
local int_attrs = by_type(function() return {} end)
local no_operands = {}

function tl.const(v, t)
  if is_value(v) then return v end
  t = t or (math.type(v) == "integer" and tl.i32 or tl.f32)
  if is_int(t) then
    if math.type(v) ~= "integer" then
      if type(v) == "number" and v == math.floor(v) then v = math.tointeger(v)
      else raise(("cannot use %s as a constant of type %s"):format(tostring(v), tostring(t))) end
    end
    local of_t = int_attrs(t)
    local attrs = of_t[v]
    if not attrs then
      attrs = { value = core.attr_int(v, t) }
      of_t[v] = attrs
    end
    return tl.op1("arith.constant", no_operands, t, attrs)
  elseif is_float(t) then
    if type(v) ~= "number" then raise(("cannot use a %s as a constant of type %s"):format(type(v), tostring(t))) end
    return tl.op1("arith.constant", {}, t, { value = core.attr_float(v, t) })
  end
  raise(("no constants of type %s"):format(tostring(t)))
end

-- Bring two operands to one type: Lua numbers become constants of the value's
-- type. -> a, b, their type (each value's type asked once: a binding call;
-- ta, tb: the types of those that are values, where the caller has them).
local function coerce(a, b, what, ta, tb)
  local va, vb = ta ~= nil or is_value(a), tb ~= nil or is_value(b)
  if va and vb then
    ta, tb = ta or a:type(), tb or b:type()
    if ta ~= tb then
      local hint = (ta == tl.index or tb == tl.index)
        and "; a tl.for_range whose bounds are all Lua numbers counts in index: give it an i32 bound (tl.const(0)) to count in i32"
        or ""
      raise(("%s: operand types differ: %s and %s (convert one with :cast)%s"):format(what, tostring(ta), tostring(tb), hint))
    end
    return a, b, ta
  elseif va then
    ta = ta or a:type()
    if type(b) ~= "number" then raise(("%s: cannot combine %s with a %s"):format(what, tostring(ta), typename(b))) end
    b = is_pair(ta) and tl.splat(tl.const(b, ta:info().elem), 2) or tl.const(b, ta)
    return a, b, ta
  elseif vb then
    tb = tb or b:type()
    if type(a) ~= "number" then raise(("%s: cannot combine a %s with %s"):format(what, typename(a), tostring(tb))) end
    a = is_pair(tb) and tl.splat(tl.const(a, tb:info().elem), 2) or tl.const(a, tb)
    return a, b, tb
  end
  raise(what .. ": no IR value among the operands")
end

-- binary(int_op, float_op, symbol): a metamethod building the op for the operands' type.
local binary = kinds.binary(coerce, function(t, iop, fop)
  return is_int(t) and iop or (is_float(t) or is_pair(t) and fop ~= "arith.divf") and fop
end)

-- op(a, b) for the kinds registered for `name`, else scalar(a, b, the types
-- of those that are values: kind_op asked them).
local function by_kind(name, scalar)
  return function(a, b)
    local f, ta, tb = kind_op(name, a, b)
    if f then return f(a, b) end
    return scalar(a, b, ta, tb)
  end
end

Value.__add = by_kind("add", binary("arith.addi", "arith.addf", "+"))
Value.__sub = by_kind("sub", binary("arith.subi", "arith.subf", "-"))
Value.__mul = by_kind("mul", binary("arith.muli", "arith.mulf", "*"))
Value.__div = by_kind("div", function(a, b)
  local t = is_value(a) and a:type() or b:type()
  if is_int(t) then raise("'/' on integers: use // (division truncating toward zero) or tl.divu") end
  return binary(nil, "arith.divf", "/")(a, b)
end)
Value.__idiv = binary("arith.divsi", nil, "//") -- truncates toward zero, like C
Value.__mod = binary("arith.remsi", nil, "%") -- sign of the dividend, like C
Value.__band = by_kind("band", binary("arith.andi", nil, "&"))
Value.__bor = by_kind("bor", binary("arith.ori", nil, "|"))
Value.__bxor = binary("arith.xori", nil, "~")
Value.__shl = binary("arith.shli", nil, "<<")
Value.__shr = binary("arith.shrui", nil, ">>") -- logical, as in Lua; tl.shrs is arithmetic
Value.__unm = function(a)
  local f = kind_op("unm", a)
  if f then return f(a) end
  local t = a:type()
  if is_float(t) or is_pair(t) then return tl.op1("arith.negf", { a }, t) end
  return tl.const(0, t) - a
end
Value.__bnot = function(a) return a ~ -1 end
local function no_compare()
  raise("comparison operators cannot build IR in Lua 5.4 (they must return booleans): use a:lt(b), a:le(b), a:eq(b) ... or tl.lt(a, b)")
end
Value.__lt, Value.__le = no_compare, no_compare
Value.__concat = function() raise("'..' is not defined on IR values") end
-- The trap of a line starting with '(' after a line ending in ')': Lua reads
-- `f(x)\n(p + t):store(v)` as `f(x)(p + t)`, a call of the value f returned.
Value.__call = function()
  raise("attempt to call an IR value: a line that starts with '(' continues the line before it " ..
        "(Lua reads `f(x)` newline `(p + t):store(v)` as `f(x)(p + t)`); put a ';' before the '(' " ..
        "or write tl.store(p + t, v)")
end
Value.__len = function() raise("'#' is not defined on IR values") end

tl.divu = binary("arith.divui", nil, "divu")
tl.remu = binary("arith.remui", nil, "remu")
tl.shrs = binary("arith.shrsi", nil, "shrs")
tl.min = binary("arith.minsi", "arith.minimumf", "min")
tl.max = binary("arith.maxsi", "arith.maximumf", "max")
tl.minu = binary("arith.minui", nil, "minu")
tl.maxu = binary("arith.maxui", nil, "maxu")
function tl.fma(a, b, c)
  a, b = coerce(a, b, "fma")
  a, c = coerce(a, c, "fma")
  if not is_float(a:type()) and not is_pair(a:type()) then raise("fma takes floats or packed pairs (vector<2 x f16|bf16>)") end
  return tl.op1("arith.fma", { a, b, c }, a:type())
end

-- Comparisons: signed for integers, ordered for floats; u-variants are unsigned.
local function compare(ipred, fpred)
  return function(a, b)
    a, b = coerce(a, b, "comparison")
    local t = a:type()
    if is_int(t) then
      if not ipred then raise("unsigned comparison of floats") end
      return tl.op1("arith.cmpi", { a, b }, tl.i1, { predicate = ipred })
    end
    return tl.op1("arith.cmpf", { a, b }, tl.i1, { predicate = fpred })
  end
end
local comparisons = {
  eq = compare("eq", "oeq"), ne = compare("ne", "une"),
  lt = compare("slt", "olt"), le = compare("sle", "ole"),
  gt = compare("sgt", "ogt"), ge = compare("sge", "oge"),
  ult = compare("ult"), ule = compare("ule"), ugt = compare("ugt"), uge = compare("uge"),
}
for name, f in pairs(comparisons) do
  f = by_kind(name, f)
  V[name] = f
  tl[name] = f
end

function tl.select(c, a, b)
  local f = kind_op("select", c, a, b)
  if f then return f(c, a, b) end
  if not is_value(c) or c:type() ~= tl.i1 then raise("select: the condition must be an i1 value") end
  a, b = coerce(a, b, "select")
  return tl.op1("arith.select", { c, a, b }, a:type())
end
V.select = tl.select

function tl.logical_and(a, b) return a & b end
function tl.logical_or(a, b) return a | b end
function tl.logical_not(a) return a ~ tl.const(1, tl.i1) end

-- v:cast(t): the conversion that fits the two types (sign-extending for integers).
function V.cast(v, t, unsigned)
  local f = kind_op("cast", v)
  if f then return f(v, t, unsigned) end
  local from = v:type()
  if from == t then return v end
  local fk, tk = kind(from), kind(t)
  local name
  if fk == "int" and tk == "int" then
    local fw, tw = from:info().width, t:info().width
    name = tw > fw and (unsigned and "arith.extui" or "arith.extsi") or "arith.trunci"
  elseif (fk == "index" and tk == "int") or (fk == "int" and tk == "index") then
    name = unsigned and "arith.index_castui" or "arith.index_cast"
  elseif is_int(from) and tk == "float" then
    if fk == "index" then v = v:cast(tl.i64) end
    name = unsigned and "arith.uitofp" or "arith.sitofp"
  elseif fk == "float" and is_int(t) then
    if tk == "index" then return v:cast(tl.i64, unsigned):cast(t) end
    name = unsigned and "arith.fptoui" or "arith.fptosi"
  elseif fk == "float" and tk == "float" then
    name = from:info().width < t:info().width and "arith.extf" or "arith.truncf"
  else
    raise(("cannot cast %s to %s"):format(tostring(from), tostring(t)))
  end
  return tl.op1(name, { v }, t)
end
function V.bitcast(v, t) return tl.op1("arith.bitcast", { v }, t) end

function tl.cast(v, t, unsigned)
  if not is_value(v) then return tl.const(v, t) end
  return v:cast(t, unsigned)
end

-- }=====================================================================

-- {=====================================================================
-- Structured control flow
-- ======================================================================

local function values_of(list, types, what)
  local out = {}
  for i, v in ipairs(list) do
    if types and types[i] then out[i] = tl.cast(v, types[i])
    elseif is_value(v) then out[i] = v
    else raise(("%s #%d is a %s, not an IR value"):format(what, i, type(v))) end
  end
  return out
end

local function types_of(vals)
  local ts = {}
  for i, v in ipairs(vals) do ts[i] = v:type() end
  return ts
end

-- scf.yield at the end of block; a Lua number among vals becomes a constant of
-- its type there, inside the region (a constant made outside would not dominate
-- a use in an isolated region).
local function yield(block, vals, types, what)
  tl.at(block, nil, function() tl.op("scf.yield", types and values_of(vals, types, what) or vals, {}) end)
end

-- tl.for_range(lb, ub [, step] [, {inits}], function(iv, ...) return nexts end) -> results...
function tl.for_range(...)
  local n = select("#", ...)
  local body = select(n, ...)
  if type(body) ~= "function" then raise("for_range: the last argument must be the body function") end
  local lb, ub, step, inits = ...
  if n == 3 then step, inits = nil, nil
  elseif n == 4 then -- (lb, ub, step, body) or (lb, ub, {inits}, body)
    if type(step) == "table" and not is_value(step) then step, inits = nil, step else inits = nil end
  end
  step = step or 1
  inits = inits or {}
  local bt = (is_value(lb) and lb:type()) or (is_value(ub) and ub:type()) or (is_value(step) and step:type()) or tl.index
  if not is_int(bt) then raise("for_range: bounds must be integers or index") end
  lb, ub, step = tl.cast(lb, bt), tl.cast(ub, bt), tl.cast(step, bt)
  local init_vals = values_of(inits, nil, "loop-carried value")
  local itypes = types_of(init_vals)
  local operands = { lb, ub, step }
  for _, v in ipairs(init_vals) do operands[#operands + 1] = v end
  local op = tl.op("scf.for", operands, itypes, nil, 1)
  local argt = { bt }
  for _, t in ipairs(itypes) do argt[#argt + 1] = t end
  local blk = op:region(1):add_block(argt)
  local args = blk:args()
  local nexts = table.pack(tl.at(blk, nil, body, table.unpack(args)))
  if nexts.n ~= #itypes and not (nexts.n == 0 and #itypes == 0) then
    raise(("for_range: the body returned %d value(s) for %d loop-carried value(s)"):format(nexts.n, #itypes))
  end
  yield(blk, { table.unpack(nexts, 1, nexts.n) }, itypes, "yielded value")
  return table.unpack(op:results())
end

-- Build a region-holding op whose result types come from what its regions yield:
-- a placeholder op without results holds the regions, then the real op takes them.
local function rebuild_with_results(tmp, name, operands, rtypes, attrs)
  if #rtypes == 0 then return tmp end
  local ip = { block = tmp:block(), before = tmp }
  local real = core.op_create(tl.context(), name, operands, rtypes, attrs, tmp:nregions(),
                              ip.block, ip.before, nil, true)
  real:take_regions(tmp)
  tmp:erase()
  return real
end

-- tl.if_(cond, then_fn [, else_fn]) -> the values then_fn / else_fn return.
function tl.if_(cond, then_fn, else_fn)
  if not is_value(cond) or cond:type() ~= tl.i1 then raise("if_: the condition must be an i1 value (use a:lt(b) ...)") end
  local tmp = tl.op("scf.if", { cond }, {}, nil, 2)
  local tb = tmp:region(1):add_block()
  local tv = table.pack(tl.at(tb, nil, then_fn))
  tv = values_of({ table.unpack(tv, 1, tv.n) }, nil, "value of the then-branch")
  local rtypes = types_of(tv)
  yield(tb, tv)
  if else_fn then
    local eb = tmp:region(2):add_block()
    local ev = table.pack(tl.at(eb, nil, else_fn))
    if ev.n ~= #rtypes then
      raise(("if_: the branches return %d and %d values"):format(#rtypes, ev.n))
    end
    yield(eb, { table.unpack(ev, 1, ev.n) }, rtypes, "value of the else-branch")
  elseif #rtypes > 0 then
    raise("if_: a then-branch that returns values needs an else-branch")
  end
  return table.unpack(rebuild_with_results(tmp, "scf.if", { cond }, rtypes):results())
end

-- tl.while_({inits}, function(...) return cond, forwarded... end, function(...) return nexts end)
-- -> the forwarded values when cond is false.
function tl.while_(inits, cond_fn, body_fn)
  local init_vals = values_of(inits or {}, nil, "loop-carried value")
  local itypes = types_of(init_vals)
  local tmp = tl.op("scf.while", init_vals, {}, nil, 2)
  local before = tmp:region(1):add_block(itypes)
  local cv = table.pack(tl.at(before, nil, cond_fn, table.unpack(before:args())))
  local c = cv[1]
  if not is_value(c) or c:type() ~= tl.i1 then raise("while_: the condition function must return an i1 value first") end
  local fwd = values_of({ table.unpack(cv, 2, cv.n) }, nil, "forwarded value")
  tl.at(before, nil, function()
    local opds = { c }
    for _, v in ipairs(fwd) do opds[#opds + 1] = v end
    tl.op("scf.condition", opds, {})
  end)
  local ftypes = types_of(fwd)
  local after = tmp:region(2):add_block(ftypes)
  local nv = table.pack(tl.at(after, nil, body_fn, table.unpack(after:args())))
  if nv.n ~= #itypes then raise(("while_: the body returned %d value(s) for %d loop-carried value(s)"):format(nv.n, #itypes)) end
  yield(after, { table.unpack(nv, 1, nv.n) }, itypes, "yielded value")
  return table.unpack(rebuild_with_results(tmp, "scf.while", init_vals, ftypes):results())
end

-- }=====================================================================

-- {=====================================================================
-- Modules and kernels
-- ======================================================================

local current_module

-- The module kernels are added to (created on first use); tl.new_module() starts another.
function tl.module()
  if not current_module then current_module = tl.context():module() end
  return current_module
end
function tl.new_module()
  current_module = tl.context():module()
  return current_module
end
function tl.set_module(m) current_module = m end

local Kernel = {}
Kernel.__index = Kernel
tl.Kernel = Kernel

-- Parameters: an array of {name, type} pairs (in order), or a map name -> type
-- (ordered by name).
local function param_list(params)
  local list = {}
  if params == nil then return list end
  if #params > 0 then
    for i, p in ipairs(params) do
      if type(p) ~= "table" or type(p[1]) ~= "string" or getmetatable(p[2]) == nil then
        raise(("kernel parameter #%d: expected {name, type}"):format(i))
      end
      list[#list + 1] = { name = p[1], type = p[2] }
    end
  else
    for name, t in pairs(params) do list[#list + 1] = { name = name, type = t } end
    table.sort(list, function(a, b) return a.name < b.name end)
  end
  return list
end

-- Three extents from n or {x, y, z} (or {x =, y =, z =}); missing ones are 1.
-- The one reader of extents a user gives (kernel specs, launches).
local function dims(x, what)
  if x == nil then return nil end
  if math.type(x) == "integer" then x = { x } end
  if type(x) ~= "table" then raise(("%s must be an integer or {x, y, z}"):format(what)) end
  local d = { x[1] or x.x or 1, x[2] or x.y or 1, x[3] or x.z or 1 }
  for i = 1, 3 do
    if math.type(d[i]) ~= "integer" or d[i] < 1 then raise(("%s must hold positive integers"):format(what)) end
  end
  return d
end
tl.dims3 = dims

-- tl.kernel(name, { params = ..., block = 128 | {x,y,z}, cluster = {x,y,z}, smem = bytes, grid = ..., min_ctas = n,
--                   sizes = { param = "grid_threads" | "grid_ctas" } })
local kernel_options = { params = true, block = true, cluster = true, smem = true, grid = true, min_ctas = true,
                         sizes = true }

function tl.kernel(name, spec)
  if type(name) ~= "string" or name == "" then raise("kernel: expected a name") end
  if spec ~= nil and type(spec) ~= "table" then
    raise(("kernel '%s': the options must be a table { params =, block =, cluster =, smem =, grid =, min_ctas =, sizes = }, got a %s"):format(name, type(spec)))
  end
  spec = spec or {}
  for key in pairs(spec) do
    if not kernel_options[key] then
      raise(("kernel '%s': unknown option '%s' (known: params, block, cluster, smem, grid, min_ctas, sizes)%s"):format(name, tostring(key),
        tl.did_you_mean(key, kernel_options)))
    end
  end
  if spec.smem ~= nil and (math.type(spec.smem) ~= "integer" or spec.smem < 0) then
    raise(("kernel '%s': smem must be a non-negative integer (bytes)"):format(name))
  end
  local params = param_list(spec.params)
  local seen = {}
  for i, p in ipairs(params) do
    if seen[p.name] then raise(("kernel '%s': parameter #%d repeats the name '%s'"):format(name, i, p.name)) end
    seen[p.name] = true
  end
  local ks = { block = dims(spec.block or 128, "block") }
  if spec.cluster then
    ks.cluster = dims(spec.cluster, "cluster")
    ks.num_ctas = ks.cluster[1] * ks.cluster[2] * ks.cluster[3]
  end
  if spec.smem then ks.smem = spec.smem end
  -- grid: the only grid the kernel is written for (a kernel for one CTA says
  -- grid = 1); every launch checks it, and the protocol check runs on it
  if spec.grid then ks.grid = dims(spec.grid, "grid") end
  -- min_ctas: blocks an SM must hold at once (.minnctapersm: ptxas bounds the
  -- registers a thread to fit them; for memory-bound kernels, loads in flight)
  if spec.min_ctas ~= nil then
    local limits = core.limits()
    if math.type(spec.min_ctas) ~= "integer" or spec.min_ctas < 1 or spec.min_ctas > limits.sm_blocks then
      raise(("kernel '%s': min_ctas must be an integer in [1, %d]"):format(name, limits.sm_blocks))
    end
    ks.min_ctas = spec.min_ctas
  end
  -- sizes: the sizes the kernel accepts, { param = "grid_threads" | "grid_ctas" }:
  -- an integer parameter every launch gives the grid's threads (or CTAs); every
  -- launch checks it, and the protocol check derives its inputs within it
  if spec.sizes ~= nil then
    if type(spec.sizes) ~= "table" or next(spec.sizes) == nil then
      raise(("kernel '%s': sizes must be a table { param = \"grid_threads\" | \"grid_ctas\" }"):format(name))
    end
    for key, v in pairs(spec.sizes) do
      if v ~= "grid_threads" and v ~= "grid_ctas" then
        raise(("kernel '%s': sizes.%s must be \"grid_threads\" or \"grid_ctas\""):format(name, tostring(key)))
      end
      local kind
      for _, p in ipairs(params) do if p.name == key then kind = p.type:info().kind end end
      if kind ~= "int" and kind ~= "index" then
        raise(("kernel '%s': sizes.%s names no integer parameter of the kernel"):format(name, tostring(key)))
      end
    end
    ks.sizes = spec.sizes
  end
  local names = {}
  for i, p in ipairs(params) do names[i] = p.name end
  local m = tl.module()
  local op = core.op_create(tl.context(), "tile.kernel", {}, {}, {
    sym_name = name, kernel_spec = ks, arg_names = names,
  }, 1, m:region(1):entry(), nil, nil, true)
  local ptypes = {}
  for i, p in ipairs(params) do ptypes[i] = p.type end
  local body = op:region(1):add_block(ptypes)
  -- p of k:define: a name that is no parameter is a typo, an error at its line
  -- (rawget(p, name) tests for one)
  local args = setmetatable({}, { __index = function(_, key)
    raise(("kernel '%s' has no parameter '%s'%s"):format(name, tostring(key), tl.did_you_mean(key, names)))
  end })
  for i, p in ipairs(params) do args[p.name] = body:arg(i) end
  return setmetatable({ name = name, op = op, body = body, params = params, args = args,
                        spec = spec, module = m }, Kernel)
end

-- k:define(function(k, p) ... end): build the body; p maps parameter names to values.
-- A define that fails (while building or verifying) leaves nothing behind: its
-- body is emptied and the kernel taken out of the module, so that a corrected
-- define of the same kernel, a new tl.kernel of the same name (in the REPL,
-- say) and every other kernel go on as if it had never run. opts.verify =
-- false leaves the verification to the caller: a pass of a pipeline, which
-- verifies the module after each pass (convert-tileas-to-cutlass).
function Kernel:define(fn, opts)
  if type(fn) ~= "function" then raise("define: expected a function(k, p) that builds the body") end
  if self.defined then raise(("define: kernel '%s' is already defined (build a new tl.kernel to start over)"):format(self.name)) end
  if not self.op:block() then self.op:insert(self.module:region(1):entry()) end -- after a failed define
  local ok, err = pcall(tl.at, self.body, nil, fn, self, self.args)
  if ok and not (opts and opts.verify == false) then ok, err = pcall(tl.verify, self.module) end
  if not ok then
    local ops = self.body:ops()
    for i = #ops, 1, -1 do pcall(ops[i].erase, ops[i]) end
    self.op:unlink()
    self._alloc_after, self._cutlass_next_slot = nil, nil
    if type(err) == "string" and not self.module:verify() then
      err = err .. "\n(another op of the module does not verify either; tl.new_module() starts a fresh module)"
    end
    error(err, 0)
  end
  self.defined = true
  return self
end

-- Raise the verifier's diagnostics (at the user's lines) if the op does not
-- verify; print its warnings (to stderr) when it does.
function tl.verify(op)
  local ok, msg = op:verify()
  if not ok then error(msg, 0) end
  if msg then io.stderr:write(msg, "\n") end
  return op
end

-- }=====================================================================

-- {=====================================================================
-- Pipelines and stages
-- ======================================================================

tl.default_pipeline = "cleanup"
tl.last_stages = {}
tl.last_check = false
tl.options = rawget(tl, "options") or {}

-- A stage whose IR text was not kept says how to keep it when asked for.
local Stage = { __index = function(_, key)
  if key == "ir" then
    raise("the IR of this stage was not kept: set tl.options.keep_stages = true before compiling (the REPL and --stage do)")
  end
end }

-- tl.compile(module_or_kernel [, pipeline [, opts]]) -> module. tl.last_stages
-- lists every stage (name, index, ms, changed; failed on the stage where a
-- failing pipeline stopped, the last one); its IR text (`ir`) is rendered
-- only when asked for: opts.keep_stages or tl.options.keep_stages (the REPL,
-- --stage and --emit=ir set it), or when printed. opts.print_after_all /
-- opts.print_after = {names}. opts.check_protocol, else tl.options.check_protocol
-- (tilua --check-protocol, TILUA_CHECK_PROTOCOL=1) runs verify-protocol on the
-- input and after every pass that changes the IR; "passes" (TILUA_CHECK_PROTOCOL=passes,
-- the tests' default) fails only where a pass broke what held (docs/protocol.md);
-- tl.last_check is then the check's run object (its .log: what it did at each
-- stage), else false. The passes' warnings go to stderr.
function tl.compile(m, pipeline, opts)
  if getmetatable(m) == Kernel then m = m.module end
  m = m or tl.module()
  opts = opts or {}
  local stages = {}
  local print_after = {}
  for _, n in ipairs(opts.print_after or {}) do print_after[n] = true end
  local keep = opts.keep_stages or tl.options.keep_stages
  local out = opts.out or io.stdout
  local check = opts.check_protocol
  if check == nil then check = tl.options.check_protocol end
  local run = check and {} or false
  local ok, msg = core.run_pipeline(m, pipeline or tl.default_pipeline, {
    verify = opts.verify ~= false,
    check_protocol = check,
    check_run = run,
    on_stage = function(info, op)
      local show = info.index > 0 and (opts.print_after_all or print_after[info.pass])
      local text = (keep or show) and op:print { locations = keep and tl.options.stage_locations } or nil
      stages[#stages + 1] = setmetatable({ name = info.pass, index = info.index, ms = info.ms,
                                           changed = info.changed, failed = info.failed or nil,
                                           ir = keep and text or nil }, Stage)
      if show then
        out:write(("// -----// IR Dump After %s (%.3f ms) //----- //\n"):format(info.pass, info.ms), text)
      end
    end,
  })
  tl.last_stages, tl.last_check = stages, run
  if not ok then error(msg, 0) end
  if msg then io.stderr:write(msg, "\n") end -- the passes' warnings
  return m
end

-- }=====================================================================

-- {=====================================================================
-- Textual IR
-- ======================================================================

-- tl.parse(text [, opts]) -> module | nil, message (see tilua.parser).
function tl.parse(text, opts)
  local m, msg = require("tilua.parser").parse(text, opts)
  if m then current_module = m end
  return m, msg
end

function tl.parse_file(path, opts)
  local m, msg = require("tilua.parser").parse_file(path, opts)
  if m then current_module = m end
  return m, msg
end

-- }=====================================================================

-- The rooms of the library add their functions to tl, in this order (a later
-- one may use what an earlier one added); dsl/kinds.lua is what they share
-- besides tl: the operations that other kinds of values register.
local rooms = {
  "tilua.stdlib.sched", -- tl.sched.persistent / tiles
  "tilua.dsl.cutlass", -- the cutlass dialect: executors, pipelines, sequence barriers, schedulers
  "tilua.dsl.tile", -- the authoring ops of real kernels (tile dialect)
  "tilua.gpu.compile", -- PTX, ptxas, k:compile, --emit / --stage
  "tilua.gpu.recipe", -- launch recipes: what a launcher does, as data (tl.recipe)
  "tilua.gpu.launch", -- k:launch, tl.device
  "tilua.gpu.comm", -- tl.nccl: communicators and collectives on device buffers
  "tilua.dsl.tensor", -- tensor cores and TMA
  "tilua.dsl.warp", -- warp-wide exchange, mma.sync, approximate math, inline PTX
  "tilua.stdlib.gemm", -- the Hopper GEMM generator (tl.gemm)
  "tilua.stdlib.gemm_choice", -- the configurations worth measuring for a shape (tl.gemm.candidates)
  "tilua.gpu.export", -- tl.export: kernels as C for a host without Lua
  "tilua.gpu.graph", -- tl.graph: launches captured into a CUDA graph
  "tilua.stdlib.sharded_gemm", -- GEMMs sharded over NCCL ranks, communication overlapped (tl.sharded_gemm)
  "tilua.stdlib.attention", -- the Hopper attention forward (tl.attention)
  "tilua.stdlib.autotune", -- tl.autotune
  "tilua.dsl.tileprog", -- tile programs (tileas): tiles and tensors, registered as kinds
  "tilua.stdlib.rows", -- memory-bound tile programs over rows (tl.rows)
}
-- (a room that fails to load leaves no half-built library behind for a later require)
local ok, err = pcall(function() for _, name in ipairs(rooms) do require(name) end end)
if not ok then
  package.loaded["tilua"] = nil
  for _, name in ipairs(rooms) do package.loaded[name] = nil end
  error(err, 0)
end

-- The CPU emulator of a kernel's barrier protocols and the checker over it
-- (docs/protocol.md).
function tl.emulate(k, opts) return require("tilua.emulate").run(k, opts) end
function tl.verify_protocol(k, opts) return require("tilua.emulate").check(k, opts) end
function tl.check_lowering(k, opts) return require("tilua.emulate").check_lowering(k, opts) end

return tl
