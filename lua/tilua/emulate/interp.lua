-- tilua.emulate.interp: a reference interpreter of arith and scf on the CPU.
--
-- It runs a region (typically a kernel body) with given argument values and
-- is how the tests check that lowered arithmetic (schedulers, index math)
-- computes exactly what the C reference computes, without a GPU. Integers
-- wrap at their width; floats are f64 or rounded to f32. A hook sees every
-- op with its operand and result values; another models the ops outside
-- arith and scf (memory, barriers), and interp.memory() is one for the tile
-- pointer ops over a Lua table.
--
--   local interp = require "tilua.emulate.interp"
--   local env = interp.run(kernel_op, { 7, 3 }, { on_op = function(op, ins, outs) end })
--   env:get(value) -> the value's last computed Lua number
--   interp.run(op, args, { eval = function(op, ins, env) return outs_or_nil end })
--   env:block(block, args) -> runs a nested block (for region ops an eval hook models)

local M = {}

local Env = {}
Env.__index = Env

function Env:get(v) return self.vals[v:id()] end
function Env:set(v, x) self.vals[v:id()] = x end

local function width_of(t)
  local info = t:info()
  if info.kind == "index" then return 64 end
  return info.width
end

-- Wrap an integer to width w, sign-extended (the IR's view of a signless integer).
local function wrap(x, w)
  if w >= 64 then return x end
  if w == 1 then return x & 1 end
  local m = (1 << w) - 1
  x = x & m
  if x >> (w - 1) ~= 0 then x = x | ~m end
  return x
end

local function zext(x, w)
  if w >= 64 then return x end
  return x & ((1 << w) - 1)
end

local function f32(x) return (string.unpack("f", string.pack("f", x))) end

local function round_float(x, t)
  local name = t:info().name
  if name == "f32" then return f32(x) end
  if name == "f64" then return x end
  if name == "bf16" or name == "f16" then -- to nearest even, as cvt.rn does
    local h = require("tilua.emulate.values").float16
    return h.dec[name](h.enc[name](x))
  end
  error("interp: " .. name .. " arithmetic is not interpreted")
end

-- A float to an integer of width w as cvt.rzi does: toward zero, saturating
-- at the type's range (unsigned: [0, 2^w - 1]), NaN to 0.
local function float_to_int(x, w, unsigned)
  if x ~= x then return 0 end
  local lo, hi
  if unsigned then lo, hi = 0.0, 2.0 ^ w - 1 else lo, hi = -(2.0 ^ (w - 1)), 2.0 ^ (w - 1) - 1 end
  if x <= lo then x = lo elseif x >= hi then x = hi end
  local t = x >= 0 and math.floor(x) or math.ceil(x)
  if unsigned and w >= 64 and t >= 2.0 ^ 63 then return math.tointeger(t - 2.0 ^ 63) | math.mininteger end
  if not unsigned and w >= 64 and t >= 2.0 ^ 63 then return math.maxinteger end
  return wrap(math.tointeger(t), w)
end

-- The bits of a value of type t as an integer, and back (arith.bitcast).
local BITS = { f32 = "<f", f64 = "<d", i32 = "<i4", i64 = "<i8" }
local function to_bits(x, t)
  local info = t:info()
  if info.kind == "float" and info.bytes == 2 then return require("tilua.emulate.values").float16.enc[info.name](x) end
  if info.kind == "float" then return (string.unpack(info.bytes == 4 and "<I4" or "<i8", string.pack(BITS[info.name], x))) end
  return x
end
local function from_bits(u, t)
  local info = t:info()
  if info.kind == "float" and info.bytes == 2 then return require("tilua.emulate.values").float16.dec[info.name](u & 0xffff) end
  if info.kind == "float" then
    return (string.unpack(BITS[info.name], string.pack(info.bytes == 4 and "<I4" or "<i8", info.bytes == 4 and u & 0xffffffff or u)))
  end
  return wrap(u, info.width)
end

local function ucmp(a, b) return math.ult(a, b) end

-- Unsigned division of two 64-bit patterns.
local function udiv(a, b)
  if b < 0 then return math.ult(a, b) and 0 or 1 end
  if a >= 0 then return a // b end
  local q = ((a >> 1) // b) << 1
  if not math.ult(a - q * b, b) then q = q + 1 end
  return q
end

local int_binary = {
  ["arith.addi"] = function(a, b) return a + b end,
  ["arith.subi"] = function(a, b) return a - b end,
  ["arith.muli"] = function(a, b) return a * b end,
  ["arith.andi"] = function(a, b) return a & b end,
  ["arith.ori"] = function(a, b) return a | b end,
  ["arith.xori"] = function(a, b) return a ~ b end,
}

-- One non-region op compiled once: compile(op) -> fn(a, b, c) -> its result.
-- Everything the op's types and attributes decide is looked up here, so that
-- running it (per lane, per iteration: tilua.emulate) makes no C calls.
local function compile(op)
  local name = op:name()
  local rt = op:nresults() > 0 and op:result(1):type() or nil
  if name == "arith.constant" then
    local v = op:attr "value"
    v = rt:kind() == "float" and round_float(v, rt) or wrap(v, width_of(rt))
    return function() return v end
  end
  local float = rt and rt:kind() == "float"
  local w = rt and not float and width_of(rt)
  local f = int_binary[name]
  if f then return function(a, b) return wrap(f(a, b), w) end end
  if name == "arith.divsi" or name == "arith.remsi" then
    local rem = name == "arith.remsi"
    return function(a, b)
      if b == 0 then error("interp: division by zero in " .. name) end
      local q = a // b
      if (a % b ~= 0) and ((a < 0) ~= (b < 0)) then q = q + 1 end -- truncate toward zero
      return wrap(rem and a - q * b or q, w)
    end
  elseif name == "arith.divui" or name == "arith.remui" then
    local rem = name == "arith.remui"
    return function(a, b)
      local ua, ub = zext(a, w), zext(b, w)
      if ub == 0 then error("interp: division by zero in " .. name) end
      local q = udiv(ua, ub)
      return wrap(rem and ua - q * ub or q, w)
    end
  elseif name == "arith.shli" then
    return function(a, b)
      local s = zext(b, w)
      return s >= w and 0 or wrap(a << s, w)
    end
  elseif name == "arith.shrui" then
    return function(a, b)
      local s = zext(b, w)
      return s >= w and 0 or wrap(zext(a, w) >> s, w)
    end
  elseif name == "arith.shrsi" then
    return function(a, b)
      local s = zext(b, w)
      if s >= w then return a < 0 and -1 or 0 end
      return wrap(a >> s | (a < 0 and ~(-1 >> s) or 0), w)
    end
  elseif name == "arith.minsi" then return function(a, b) return math.min(a, b) end
  elseif name == "arith.maxsi" then return function(a, b) return math.max(a, b) end
  elseif name == "arith.minui" then return function(a, b) return ucmp(zext(a, w), zext(b, w)) and a or b end
  elseif name == "arith.maxui" then return function(a, b) return ucmp(zext(a, w), zext(b, w)) and b or a end
  elseif name == "arith.cmpi" then
    local ow = width_of(op:operand(1):type())
    local p = op:attr "predicate"
    local cmp = ({
      eq = function(a, b) return a == b end, ne = function(a, b) return a ~= b end,
      slt = function(a, b) return a < b end, sle = function(a, b) return a <= b end,
      sgt = function(a, b) return a > b end, sge = function(a, b) return a >= b end,
      ult = function(a, b) return ucmp(zext(a, ow), zext(b, ow)) end,
      ule = function(a, b) return not ucmp(zext(b, ow), zext(a, ow)) end,
      ugt = function(a, b) return ucmp(zext(b, ow), zext(a, ow)) end,
      uge = function(a, b) return not ucmp(zext(a, ow), zext(b, ow)) end,
    })[p]
    if not cmp then error("interp: cmpi predicate " .. tostring(p) .. " not interpreted") end
    return function(a, b) return cmp(a, b) and 1 or 0 end
  elseif name == "arith.select" then
    return function(a, b, c) return a ~= 0 and b or c end
  elseif name == "arith.extsi" or name == "arith.trunci" or name == "arith.index_cast" then
    return function(a) return wrap(a, w) end
  elseif name == "arith.extui" or name == "arith.index_castui" then
    local iw = width_of(op:operand(1):type())
    return function(a) return wrap(zext(a, iw), w) end
  elseif name == "arith.negf" then return function(a) return -a end
  elseif name == "arith.maximumf" or name == "arith.minimumf" then -- NaN if either is (IEEE maximum / minimum)
    local max = name == "arith.maximumf"
    return function(a, b)
      if a ~= a or b ~= b then return 0 / 0 end
      return max == (a >= b) and a or b
    end
  elseif name == "arith.sitofp" then return function(a) return round_float(a + 0.0, rt) end
  elseif name == "arith.uitofp" then
    local iw = width_of(op:operand(1):type())
    return function(a)
      local u = zext(a, iw)
      if u < 0 then return round_float(((u >> 1) | (u & 1)) * 2.0, rt) end -- 64-bit: halve with a sticky bit
      return round_float(u + 0.0, rt)
    end
  elseif name == "arith.fptosi" or name == "arith.fptoui" then
    local unsigned = name == "arith.fptoui"
    return function(a) return float_to_int(a, w, unsigned) end
  elseif name == "arith.extf" then return function(a) return a end -- exact
  elseif name == "arith.truncf" then return function(a) return round_float(a, rt) end
  elseif name == "arith.fma" then -- a * b exact in f64 for f32 and 16-bit operands, one rounding of the sum to f64 first
    return function(a, b, c) return round_float(a * b + c, rt) end
  elseif name == "arith.bitcast" then
    local it = op:operand(1):type()
    return function(a) return from_bits(to_bits(a, it), rt) end
  elseif name == "arith.cmpf" then
    local p = op:attr "predicate"
    local unordered = type(p) == "string" and p:sub(1, 1) == "u" -- true where an operand is NaN, else as the ordered one
    local cmp = ({ oeq = function(a, b) return a == b end, one = function(a, b) return a ~= b end,
                   olt = function(a, b) return a < b end, ole = function(a, b) return a <= b end,
                   ogt = function(a, b) return a > b end, oge = function(a, b) return a >= b end })[unordered and "o" .. p:sub(2) or p]
    if not cmp then error("interp: cmpf predicate " .. tostring(p) .. " not interpreted") end
    if unordered then return function(a, b) return (a ~= a or b ~= b or cmp(a, b)) and 1 or 0 end end
    return function(a, b) return (a == a and b == b and cmp(a, b)) and 1 or 0 end
  end
  local fop = ({ ["arith.addf"] = function(a, b) return a + b end, ["arith.subf"] = function(a, b) return a - b end,
                 ["arith.mulf"] = function(a, b) return a * b end, ["arith.divf"] = function(a, b) return a / b end })[name]
  if fop then
    local rn = rt:info().name
    if rn == "f64" then return fop end
    if rn == "f32" then return function(a, b) return f32(fop(a, b)) end end
    round_float(0.0, rt) -- raises for a type not interpreted
    return function(a, b) return round_float(fop(a, b), rt) end -- bf16, f16: exact in f64, then one rounding
  end
  error("interp: cannot interpret '" .. name .. "'")
end

-- Evaluate one non-region op; returns its results as a list.
local function eval_simple(op, ins) return { compile(op)(ins[1], ins[2], ins[3]) } end

local run_block

local function operands(env, op)
  local ins = {}
  for i, v in ipairs(op:operands()) do
    local x = env:get(v)
    if x == nil then error(("interp: operand #%d of '%s' has no value"):format(i, op:name())) end
    ins[i] = x
  end
  return ins
end

local function set_results(env, op, outs)
  for i, r in ipairs(op:results()) do env:set(r, outs[i]) end
end

-- Run the ops of a block; returns the terminator's operand values (if any) and its name.
function run_block(env, block, args)
  for i, a in ipairs(block:args()) do env:set(a, args[i]) end
  for _, op in ipairs(block:ops()) do
    local name = op:name()
    local ins = operands(env, op)
    if name == "scf.yield" or name == "scf.condition" then
      return ins, name
    end
    local outs
    if name == "scf.for" then
      local lb, ub, step = ins[1], ins[2], ins[3]
      local iters = { table.unpack(ins, 4) }
      local body = op:region(1):entry()
      local w = width_of(op:operand(1):type())
      local i, n = lb, 0
      while i < ub do
        local args2 = { i }
        for k, v in ipairs(iters) do args2[k + 1] = v end
        iters = run_block(env, body, args2)
        i = wrap(i + step, w)
        n = n + 1
        if n > env.max_steps then error("interp: loop runs too long") end
      end
      outs = iters
    elseif name == "scf.if" then
      local r = op:region(ins[1] ~= 0 and 1 or 2):entry()
      outs = r and run_block(env, r, {}) or {}
    elseif name == "scf.while" then
      local cur, n = ins, 0
      while true do
        local c = run_block(env, op:region(1):entry(), cur)
        local fwd = { table.unpack(c, 2) }
        if c[1] == 0 then
          outs = fwd
          break
        end
        cur = run_block(env, op:region(2):entry(), fwd)
        n = n + 1
        if n > env.max_steps then error("interp: loop runs too long") end
      end
    else
      outs = env.eval and env.eval(op, ins, env)
      if outs == nil then outs = eval_simple(op, ins) end
    end
    set_results(env, op, outs)
    if env.on_op then env.on_op(op, ins, outs) end
  end
  return {}, nil
end

-- env:block(block, args) -> the values its terminator passes (an eval hook runs
-- the regions of the ops it models with it).
function Env:block(block, args) return run_block(self, block, args or {}) end

-- M.run(op_with_region, args [, {on_op = fn(op, ins, outs), eval = fn(op, ins, env),
-- max_steps = n}]) -> env. eval models the ops interp does not know: it returns
-- their results as a list ({} for none), or nil to leave the op to interp.
function M.run(op, args, opts)
  opts = opts or {}
  local env = setmetatable({ vals = {}, on_op = opts.on_op, eval = opts.eval,
                             max_steps = opts.max_steps or 1e6 }, Env)
  run_block(env, op:region(1):entry(), args or {})
  return env
end

local atomic_ops = {
  add = function(a, b) return a + b end, max = math.max, min = math.min, exch = function(_, b) return b end,
  ["and"] = function(a, b) return a & b end, ["or"] = function(a, b) return a | b end,
  xor = function(a, b) return a ~ b end,
}

-- M.memory([mem]) -> eval hook, mem: the tile pointer ops over a Lua table.
-- Pointers are integer byte addresses (pass pointer arguments as numbers); a
-- stored element lives at mem[address]; loading an address never stored is
-- an error. Scalar loads, stores, atomics (umax/umin as max/min) and
-- compare-and-swap; ptr_cast and int/ptr conversions keep the address.
function M.memory(mem)
  mem = mem or {}
  local function load(p, op)
    local v = mem[p]
    if v == nil then error(("interp: '%s' reads address %d, never written"):format(op:name(), p)) end
    return v
  end
  local eval = {
    ["tile.ptr_add"] = function(op, ins)
      return { ins[1] + ins[2] * op:result(1):type():info().elem:info().bytes }
    end,
    ["tile.ptr_cast"] = function(_, ins) return { ins[1] } end,
    ["tile.ptr_to_int"] = function(_, ins) return { ins[1] } end,
    ["tile.int_to_ptr"] = function(_, ins) return { ins[1] } end,
    ["tile.load"] = function(op, ins) return { load(ins[1], op) } end,
    ["tile.store"] = function(_, ins)
      mem[ins[2]] = ins[1]
      return {}
    end,
    ["tile.atomic"] = function(op, ins)
      local old, k = load(ins[1], op), op:attr "kind"
      local f = atomic_ops[k] or (k == "umax" and math.max) or (k == "umin" and math.min)
      mem[ins[1]] = wrap(f(old, ins[2]), width_of(op:result(1):type()))
      return { old }
    end,
    ["tile.atomic_cas"] = function(op, ins)
      local old = load(ins[1], op)
      if old == ins[2] then mem[ins[1]] = ins[3] end
      return { old }
    end,
  }
  return function(op, ins)
    local f = eval[op:name()]
    return f and f(op, ins)
  end, mem
end

M.wrap = wrap
M.eval = eval_simple -- one arith op over its operand values -> its results
M.compile = compile   -- one arith op -> fn(a, b, c) -> its result (tilua.emulate)
M.to_bits, M.from_bits = to_bits, from_bits -- a scalar of a type <-> its bits (arith.bitcast)
return M
