-- tilua.passes.convert_tileas_to_cutlass.sums: row sums computed by a dot
-- (kernels/attention.lua's sum_mma, the rows' sums by the PV GEMM).
--
-- The rule. In a consumer's pipelined loop of chained dots (not in order), a
-- carried rows slot l (a slice of the mma layout along dim 1) is summed by the
-- late dot D of slot a when
--
--   l starts at zeros, its next value is `l * x + reduce(p, add)` (either
--     order), l, the product and the reduce read by nothing else;
--   D's A operand is p truncated to bf16 or f16 (through layout conversions):
--     the registers the dot multiplies are the rounded values of what l sums;
--   D's accumulator operand is `a * broadcast(expand_dim(x, 1))`, the same x:
--     D's rows are rescaled as l is;
--   D reads B from a ring of 16-bit elements, MN-major (not transpose_b), in
--     64-column boxes of a 128-byte swizzle, N = D's columns, N + 8 <= 256;
--   the rings, a box of ones a stage more, and the epilogue's staging
--     (16 KB a consumer) fit the shared memory (SM90_MAX_SMEM);
--   one CTA, no ping-pong consumers (not lowered there yet).
--
-- Then each stage of D's ring gets one box more, of ones (written once by
-- the consumers, fenced to the async proxy), D is issued with N + 8 columns
-- (its accumulator 4 registers more a thread: columns N .. N + 7, each a
-- row's sum of the rounded p, rescaled with a by x), and l is not computed:
-- after the loop it is those columns (no FADD a probability, no quad
-- shuffles). What changes: l sums p rounded to 16 bits, as D multiplies it
-- (attention's O / l then divides by the sum of what was multiplied); the
-- log-sum-exp moves by at most the rounding (2^-9 relative an element).
-- The factor x is computed with the loop's register work, before the late
-- group's wait (chain.lua), as the slot's update computed it.
-- Off with tl.options.sums_by_dot = false or the pass option sums_by_dot=0.

local R = require "tilua.passes.convert_tileas_to_cutlass.read"

local Sums = { enabled = true }

local SMEM = 227 * 1024 -- (SM90_MAX_SMEM)
local STAGING = 16 * 1024 -- the epilogue's staging a consumer (consumer.lua: 2 x 64 x 64 of 16 bits)
local SLACK = 2048 -- barriers, claims, staged slots

local function def_named(v, name)
  local d = v and v:def()
  return d and d:name() == name and d or nil
end
local function single(v, user)
  local u = v:users()
  return #u == 1 and u[1] == user
end
local function through_conversions(v)
  while def_named(v, "tileas.convert_layout") do v = v:def():operand(1) end
  return v
end
local function is_zero(v)
  local d = def_named(v, "tileas.splat")
  return d and R.const_int(d:operand(1)) == 0
end
local function is_rows(t)
  local i = t:info()
  local l = i.kind == "tile" and t:layout()
  return l and l.kind == "slice" and l.dim == 1 and l.parent and l.parent.kind == "mma" and #i.shape == 1
end

-- The factor x of `a * broadcast(expand_dim(x, 1))` (either order), given a.
local function rescale_factor(v, a)
  local m = def_named(v, "arith.mulf")
  if not m then return nil end
  for k = 1, 2 do
    if m:operand(k) == a then
      local b = def_named(m:operand(3 - k), "tileas.broadcast")
      local e = b and def_named(b:operand(1), "tileas.expand_dim")
      if e and e:attr "dim" == 1 then return e:operand(1) end
    end
  end
end

-- The loop op's sums by a dot, by the rule: {slot = l's, dot = D, late_slot
-- = a's, x = the factor, ring = D's B ring, n = D's columns} or nil. L.ring_of
-- maps rings (by value id); bytes: the rings' shared memory now.
function Sums.rule(L, op)
  if not Sums.enabled or L.nctas > 1 or L.pingpong or L.ksplit then return nil end
  local b = op:region(1):entry()
  local yield = b:terminator()
  local dots = {}
  for _, o in ipairs(b:ops()) do if o:name() == "tileas.dot" then dots[#dots + 1] = o end end
  for i = 1, op:nresults() do
    local y, arg = yield:operand(i), b:arg(1 + i)
    local add = def_named(y, "arith.addf")
    if is_rows(arg:type()) and is_zero(op:operand(3 + i)) and add and single(y, yield) then
      for k = 1, 2 do
        local m, r = def_named(add:operand(k), "arith.mulf"), def_named(add:operand(3 - k), "tileas.reduce")
        if m and r and r:attr "kind" == "add" and r:attr "dim" == 1 and single(m:result(1), add)
           and single(r:result(1), add) and single(arg, m) then
          local x = m:operand(1) == arg and m:operand(2) or m:operand(1)
          local p = r:operand(1)
          for _, d in ipairs(dots) do
            local s = Sums.dot_form(L, op, d, p, x)
            if s then s.slot = i return s end
          end
        end
      end
    end
  end
  return nil
end

-- Dot d of loop op as the rule's D for the sums of p rescaled by x, or nil.
function Sums.dot_form(L, op, d, p, x)
  local b = op:region(1):entry()
  local yield = b:terminator()
  if d:attr_or_default "tileas.ahead" or d:attr_or_default "tileas.reduced" then return nil end
  local at = d:attrs()
  if at.transpose_a or at.transpose_b or at.negate_a or at.negate_b then return nil end
  local t = def_named(d:operand(1), "arith.truncf")
  if not t or through_conversions(t:operand(1)) ~= p then return nil end
  local late
  for i, yv in ipairs(yield:operands()) do if yv == d:result(1) and not late then late = i end end
  if not late or not single(d:result(1), yield) then return nil end
  if rescale_factor(d:operand(3), b:arg(1 + late)) ~= x then return nil end
  local ring = L.ring_of[R.ring_source(d:operand(2)):id()]
  local ti = R.tile_of(d:operand(2))
  if not ring or ring.per_program or ring.swizzle ~= 128 or ring.box[2] ~= 64 or R.elem_bytes(ring.elem) ~= 2 then return nil end
  if R.ring_source(d:operand(2)) ~= d:operand(2) then return nil end -- (the whole ring's tile, no slice)
  local n = ti.shape[2]
  if n % 64 ~= 0 or n + 8 > 256 or R.tile_of(d:result(1)).shape[2] ~= n then return nil end
  return { dot = d, late_slot = late, x = x, ring = ring, n = n }
end

-- The rings' shared memory with a box of ones a stage more on each ring of
-- `ones`, and the epilogue's staging: does it fit?
local function fits(L, ones)
  local bytes = SLACK + STAGING * #L.consumers
  for _, r in ipairs(L.rings) do
    local boxes = r.nbox + (ones[r] and 1 or 0)
    bytes = bytes + r.stages * boxes * r.shape[1] * r.box[2] * R.elem_bytes(r.elem)
  end
  return bytes <= SMEM
end

-- The plan: every consumer loop the rule takes (L.sums: loop op id -> the
-- rule's record), their rings marked (r.ones = true: a box more a stage).
-- Run before the rings' shared memory is allocated.
function Sums.plan(L)
  L.sums = {}
  local Chain = require "tilua.passes.convert_tileas_to_cutlass.chain"
  local found, ones = {}, {}
  for _, c in ipairs(L.consumers) do
    R.each_op(c.op, function(op)
      if op:name() == "scf.for" and op:attr "tileas.pipeline" and Chain.scheduled(op) and not Chain.in_order(op) then
        local s = Sums.rule(L, op)
        if s then
          found[#found + 1] = { op = op, s = s }
          ones[s.ring] = true
        end
      end
    end)
  end
  if #found == 0 or not fits(L, ones) then return end
  for _, f in ipairs(found) do L.sums[f.op:id()] = f.s end
  for r in pairs(ones) do r.ones = true end
end

-- The consumers' fill of the ones boxes (threads t of warpgroup wg; every
-- element one, so the swizzle moves nothing), fenced to the async proxy and
-- waited for by all consumers (named barrier #consumers + 1: the epilogue's
-- are 1 .. #consumers), once, before their loops.
function Sums.fill(L, wg, t)
  local tl = require "tilua"
  local threads = 128 * #L.consumers
  local ctid = tl.cast(wg, tl.i32) * 128 + t
  local any = false
  for _, r in ipairs(L.rings) do
    if r.ones then
      any = true
      local per = r.shape[1] * r.box[2] // 8 -- 16-byte units (8 elements) of a stage's box (contiguous)
      local pair = tl.const(tostring(r.elem) == "f16" and 0x3C003C00 or 0x3F803F80, tl.i32)
      local one = tl.vector_of(tl.i32, { pair, pair, pair, pair })
      for s = 0, r.stages - 1 do
        local base = r.smem:ptr(s, r.nbox * r.shape[1], 0):as(tl.vector(tl.i32, 4)) + ctid
        for i = 0, (per + threads - 1) // threads - 1 do
          local function put() tl.store(i == 0 and base or base + i * threads, one) end
          if (i + 1) * threads <= per then put() else tl.if_((ctid + i * threads):lt(per), put) end
        end
      end
    end
  end
  if not any then return end
  tl.fence_proxy_async("shared")
  tl.named_barrier_sync(#L.consumers + 1, threads)
end

return Sums
