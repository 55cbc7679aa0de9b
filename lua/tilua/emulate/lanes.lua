-- tilua.emulate.lanes: the values of a warp's 32 lanes (SIMT). A value is one
-- Lua value when it is the same in every active lane, else a lane-varying
-- table (metatable LV) indexed by lane 0 .. 31. The op models compute on them
-- through these helpers; ctx.mask lists the active lanes.

local L = {}

local LV = { __name = "lanes" } -- metatable of a lane-varying value
L.LV = LV

function L.varying(x) return getmetatable(x) == LV end

-- The value of an op a protocol-only run does not compute (emulate/data_slice.lua):
-- only data takes it, which a store writes as zeros; its elements read as 0.
L.DATA = setmetatable({}, { __name = "data", __index = function(_, i) if math.type(i) then return 0 end end })
local varying = L.varying

-- x in lane l.
function L.at(x, l)
  if getmetatable(x) == LV then return x[l] end
  return x
end
local at = L.at

-- Every lane, in order.
function L.all()
  local m = {}
  for l = 0, 31 do m[#m + 1] = l end
  return m
end

-- A pure or per-lane op over the active lanes: f(operand values, lane) ->
-- results, once when every operand is uniform and the op is not per lane
-- (rec.per_lane: its value differs per lane, as a thread id), else per lane.
function L.eval(R, W, rec, ins, ctx, f)
  local uniform = true
  for i = 1, #ins do
    if varying(ins[i]) then
      uniform = false
      break
    end
  end
  if uniform and not rec.per_lane then return f(ins, ctx.mask[1]) end
  local outs = {}
  local nres = #rec.outs
  for r = 1, nres do outs[r] = setmetatable({}, LV) end
  local li = {}
  for _, l in ipairs(ctx.mask) do
    for i = 1, #ins do li[i] = at(ins[i], l) end
    local o = f(li, l)
    for r = 1, nres do outs[r][l] = o[r] end
  end
  return outs
end

-- The value of x where the op needs one value (a lane-varying x whose lanes
-- agree, like a warpgroup index from the lowered thread id, is that value), or
-- an error naming the op and what (the operand).
function L.uniform(rec, x, what)
  if varying(x) then
    local v
    for _, y in pairs(x) do
      if v == nil then v = y elseif y ~= v then
        error(("emulate: %s at %s has a lane-varying %s, which is not modelled"):format(rec.name, rec.loc, what), 0)
      end
    end
    return v
  end
  return x
end

-- The value of x over the active lanes only: a lane-varying value whose
-- active lanes agree (a loop run by one lane under an scf.if, its condition
-- per lane) is that value; else the error of uniform.
function L.uniform_over(rec, x, ctx, what)
  if varying(x) then
    local v = x[ctx.mask[1]]
    for _, l in ipairs(ctx.mask) do
      if x[l] ~= v then return L.uniform(rec, x, what) end
    end
    return v
  end
  return x
end

-- f applied to every lane of a (or to a uniform a).
function L.lanewise(f)
  return function(a)
    if not varying(a) then return f(a) end
    local o = setmetatable({}, LV)
    for l, v in pairs(a) do o[l] = f(v) end
    return o
  end
end

-- Warp masks: the number of warps in mask m, the lowest one.
function L.popcount(x)
  local n = 0
  while x ~= 0 do
    n, x = n + (x & 1), x >> 1
  end
  return n
end
function L.lowest_bit(x)
  local i = 0
  while x ~= 0 and x & 1 == 0 do
    i, x = i + 1, x >> 1
  end
  return i
end

return L
