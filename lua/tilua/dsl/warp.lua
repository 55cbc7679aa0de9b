-- tilua.dsl.warp: warp-wide exchange, mma.sync, approximate math and inline PTX
-- (docs/tensor.md, "Warp-level instructions"), added to tl when init.lua
-- requires it (after tilua.dsl.tensor).
--
--   shuffles   tl.shfl(v, lane [, {mode = "idx"|"up"|"down"|"bfly", width = 32, mask}]),
--              tl.shfl_idx / shfl_up / shfl_down / shfl_xor(v, lane_or_delta [, opts])
--   votes      tl.vote_all / vote_any / vote_uni(pred [, {mask}]) -> i1, tl.ballot(pred) -> i32
--   reduce     tl.redux(kind, v [, {mask}]): add min max umin umax and or xor over the warp
--   mma.sync   tl.mma_sync(a, b, c [, {type_a = "bf16", type_b}]) -> d (vector<4xf32>),
--              tl.mma_fragment(lane, type) (register element -> row, column)
--   math       tl.ex2, tl.lg2, tl.rsqrt, tl.rcp_approx, tl.sqrt_approx, tl.sin, tl.cos,
--              tl.tanh (approximate: MUFU), or tl.approx(fn, x)
--   inline PTX tl.inline_ptx(text, {operands}, {result types} [, {constraints = "r,r"}])
--              -> results ($0.. operands, $r0.. results, $$ a dollar sign)
--
-- Every lane of `mask` (default: the whole warp) must execute a warp-wide op
-- together; the verifier refuses them under tl.elect_one.

local tl = require "tilua" -- the library being built (init.lua registers it before its rooms)
local kinds = require "tilua.dsl.kinds"

local M = {}

local raise, is_value = tl.raise, tl.is_value

local function value(v, t, what)
  if is_value(v) then return v end
  if type(v) ~= "number" then raise(("%s: expected an IR value or a number, got %s"):format(what, type(v))) end
  return tl.const(v, t)
end
local function opts_of(o, what)
  if o ~= nil and type(o) ~= "table" then raise(("%s: options must be a table, got %s"):format(what, type(o))) end
  return o or {}
end
local function i32(v, what)
  v = value(v, tl.i32, what)
  if v:type() ~= tl.i32 then v = v:cast(tl.i32) end
  return v
end
local function pred(p, what)
  if not is_value(p) or p:type() ~= tl.i1 then raise(what .. ": the predicate must be an i1 value (a comparison)") end
  return p
end

-- {===================================================================
-- Shuffles, votes, reductions
-- ====================================================================

function tl.shfl(v, lane, opts)
  opts = opts_of(opts, "shfl")
  v = value(v, tl.i32, "shfl")
  if v:type() ~= tl.i32 and v:type() ~= tl.f32 then raise(("shfl: moves i32 or f32 values, got %s"):format(tostring(v:type()))) end
  return tl.op1("tile.shfl", { v, i32(lane, "shfl lane") }, v:type(),
    { mode = opts.mode or "idx", width = opts.width, mask = opts.mask })
end
for name, mode in pairs { shfl_idx = "idx", shfl_up = "up", shfl_down = "down", shfl_xor = "bfly" } do
  tl[name] = function(v, lane, opts)
    local o = {}
    for k, x in pairs(opts_of(opts, name)) do o[k] = x end
    o.mode = mode
    return tl.shfl(v, lane, o)
  end
end

for _, mode in ipairs { "all", "any", "uni" } do
  tl["vote_" .. mode] = function(p, opts)
    return tl.op1("tile.vote", { pred(p, "vote_" .. mode) }, tl.i1, { mode = mode, mask = opts_of(opts, "vote").mask })
  end
end
function tl.ballot(p, opts)
  return tl.op1("tile.ballot", { pred(p, "ballot") }, tl.i32, { mask = opts_of(opts, "ballot").mask })
end

function tl.redux(kind, v, opts)
  return tl.op1("tile.redux", { i32(v, "redux") }, tl.i32, { kind = kind, mask = opts_of(opts, "redux").mask })
end

-- }===================================================================

-- {===================================================================
-- mma.sync and approximate math
-- ====================================================================

-- tl.mma_sync(a, b, c, {type_a, type_b}): one warp's m16n8kK product. a: 16 bytes
-- per lane (vector<4xi32> or vector<8xbf16> ...), b: 8 bytes, c: vector<4xf32>.
function tl.mma_sync(a, b, c, opts)
  opts = opts_of(opts, "mma_sync")
  if not (is_value(a) and is_value(b) and is_value(c)) then raise("mma_sync: a, b and c must be IR values (vectors)") end
  local ta = opts.type_a or "bf16"
  return tl.op1("tile.mma_sync", { a, b, c }, c:type(), { type_a = ta, type_b = opts.type_b or ta })
end

-- tl.mma_fragment(lane, type) -> the (row, column) of each register element of
-- an m16n8kK fragment for that lane, as build-time functions of the element index
-- (0-based, in the order of the registers' elements):
--   f.a(i) -> row, k   (i in 0 .. 7 for 16-bit types, 0 .. 3 for tf32, 0 .. 15 for fp8)
--   f.b(i) -> k, col   (i in 0 .. 3, 0 .. 1, 0 .. 7)
--   f.c(i) -> row, col (i in 0 .. 3: the accumulator)
-- lane is an integer (0 .. 31) or an i32 value; the results follow it.
function tl.mma_fragment(lane, ty)
  ty = ty or "bf16"
  local g, q = lane // 4, lane % 4
  local f = { c = function(i) return g + 8 * (i // 2), q * 2 + i % 2 end }
  if ty == "tf32" then
    f.a = function(i) return g + 8 * (i % 2), q + 4 * (i // 2) end
    f.b = function(i) return q + 4 * i, g end
  elseif ty == "e4m3" or ty == "e5m2" then
    f.a = function(i) return g + 8 * ((i // 4) % 2), q * 4 + i % 4 + 16 * (i // 8) end
    f.b = function(i) return q * 4 + i % 4 + 16 * (i // 4), g end
  elseif ty == "bf16" or ty == "f16" then
    f.a = function(i) return g + 8 * ((i // 2) % 2), q * 2 + i % 2 + 8 * (i // 4) end
    f.b = function(i) return q * 2 + i % 2 + 8 * (i // 2), g end
  else
    raise(("mma_fragment: type must be one of bf16 f16 tf32 e4m3 e5m2, got %s"):format(tostring(ty)))
  end
  return f
end

function tl.approx(fn, x)
  if not is_value(x) then x = tl.const(x, tl.f32) end
  return tl.op1("tile.math", { x }, x:type(), { fn = fn })
end
-- of a kind registered elsewhere (tl.rsqrt of a tile: dsl/tileprog.lua), that kind's
for name, fn in pairs(kinds.approx_math) do
  tl[name] = function(x)
    local f = kinds.op(name, x)
    if f then return f(x) end
    return tl.approx(fn, x)
  end
end

-- }===================================================================

-- tl.inline_ptx(text, {operands}, {result types} [, {constraints = "r,r,n"}])
-- -> the results. An escape hatch: the PTX is not checked until ptxas reads it,
-- and the op counts as touching all memory and every barrier.
function tl.inline_ptx(text, operands, results, opts)
  if type(text) ~= "string" then raise("inline_ptx: the PTX text must be a string") end
  opts = opts_of(opts, "inline_ptx")
  local opds = {}
  for i, v in ipairs(operands or {}) do
    if not is_value(v) then
      if math.type(v) ~= "integer" then raise(("inline_ptx: operand %d must be an IR value or an integer"):format(i)) end
      v = tl.const(v, tl.i32)
    end
    opds[i] = v
  end
  local op = tl.op("nvvm.inline_ptx", opds, results or {}, { ptx = text, constraints = opts.constraints })
  return table.unpack(op:results())
end

return M
