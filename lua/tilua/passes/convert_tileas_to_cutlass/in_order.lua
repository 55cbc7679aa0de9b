-- tilua.passes.convert_tileas_to_cutlass.in_order: how chain.lua schedules
-- the register work of a loop in order (tileas.pipeline's in_order: no dot
-- issued an iteration ahead; chain.lua's iteration_in_order) -- the first
-- dots as one wgmma group or a group each (one_group), and the late dots'
-- operands computed before the later groups' wait (early_operands). S: the
-- loop's lowering state (chain.lua: S.an the loop's dots, S.b its block,
-- S.nslots its carried values, S.L, S.env).

local R = require "tilua.passes.convert_tileas_to_cutlass.read"
local V = require "tilua.passes.convert_tileas_to_cutlass.values"

local InOrder = {}
local frag_size = R.frag_size

-- The first dots of a loop in order as one wgmma group (true) or a group
-- each: one group when the first dots' f32 results and the late dots'
-- accumulators take ONE_GROUP_REGS registers a thread or more. Measured on
-- the H200 (docs/PERF.md, s10bwd-1; the attention backward's dK/dV loop, 240
-- registers): at 192 (d128 64 x 128: 128 + 64; d64 128 x 128: 64 + 128) one
-- group is 12% and 11% faster (the separate groups' P^T computed while dP^T
-- runs keeps more values live: spills); at 160 and less (d128 32 x 128,
-- d64 64 x 128, fused d64 64 x 128) separate groups are 3%, 14% and 2%
-- faster (the exp2 overlaps dP^T). Since LSE and Delta are staged (s11bwd-2,
-- ptxas spills nothing either way) one group and two are equal at 192
-- (d128 498.7 TFLOP/s both, d64 398.4 / 398.3): the rule stands.
local ONE_GROUP_REGS = 192
-- (the registers a thread of the first dots' results and the late accumulators)
local function first_and_late_regs(S)
  local regs = 0
  for _, d in ipairs(S.an.ahead) do regs = regs + frag_size(d:result(1):type()) end
  for i = 1, S.nslots do
    if S.an.late_of_slot[i] then regs = regs + frag_size(S.b:arg(1 + i):type()) end
  end
  return regs
end
function InOrder.one_group(S) return first_and_late_regs(S) >= ONE_GROUP_REGS end

-- The late dots of a loop in order whose register A operands read fewer of
-- the first dots' groups than the last (dV's P^T, of S^T alone, where dK's
-- dS^T reads S^T and dP^T): their f32 values are computed first, before the
-- operands are packed, so that the wait for the later groups comes as late
-- as it can (packing them first would keep both P^T's f32 and bf16 values).
function InOrder.early_operands(S)
  local index, memo = {}, {}
  for i, d in ipairs(S.an.ahead) do index[d:result(1):id()] = i end
  local function last(v) -- the last first dot value v depends on (0: none)
    local id = v:id()
    if memo[id] then return memo[id] end
    memo[id] = 0
    local m, def = index[id] or 0, v:def()
    if def and def:parent() and def:parent():id() == S.op:id() then
      for _, x in ipairs(def:operands()) do m = math.max(m, last(x)) end
    end
    memo[id] = m
    return m
  end
  local early, most = {}, 0
  for _, d in ipairs(S.an.late) do most = math.max(most, last(d.op:operand(1))) end
  for _, d in ipairs(S.an.late) do
    if last(d.op:operand(1)) < most and R.tile_of(d.op:operand(1)).space == "rmem" then early[#early + 1] = d end
  end
  return early
end
-- (their values computed now: S.early)
function InOrder.force_early(S)
  for _, d in ipairs(S.early) do
    local x = V.get(S.L, d.op:operand(1), d.op)
    local wide = V.is_frag(x) and x.trunc_of
    if wide then
      for i = 0, frag_size(d.op:operand(1):type()) - 1 do wide:at(i) end
    end
  end
end


return InOrder
