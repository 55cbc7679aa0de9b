-- tilua.passes.convert_tileas_to_cutlass.chain: a consumer's pipelined loop of
-- chained dots, as tileas-materialize-agents scheduled it: the dots marked
-- tileas.ahead (of rings, from a fresh accumulator: attention's S = Q K^T) are
-- issued one iteration early, the others (whose A operand the registers of
-- the iteration computed: P, and whose results the loop only carries: O) one
-- iteration late, so that the tensor cores run both while the warpgroup works
-- on its registers -- the FlashAttention-3 design of kernels/attention.lua:
--
--   prologue     wait the ahead dots' stages, issue them, wait, release; the
--                body's register ops of the first iteration
--   iteration j  wait the ahead dots' stages (j) and the late dots' (j - 1);
--                [take the turn] issue the ahead dots of j, then the late
--                dots of j - 1, each group committed; [pass the turn];
--                wait for the ahead group, release its stages; the body's
--                register ops of j (the late dots' A operands and the values
--                the loop carries computed); wait for the late group, release
--                its stages (with Chain.wait_fence a CTA fence first); the late
--                dots' accumulators of j computed from their results (the
--                rescaled O), then their A registers
--   after        wait the late dots' last stages, issue them, wait, release
--
-- A dot whose result only a reduce-add store reads (from zeros, its A operand
-- the registers of the iteration taken transposed: the fused attention
-- backward's dQ part dS K; tileas-materialize-agents split its K among the
-- consumers) is issued in the body, right after its operand is computed: the
-- operand written (stmatrix, bf16) into one of the warpgroup's two staging
-- tiles of shared memory (alternate iterations), whose 128-byte swizzle is a
-- TMA box's, then read by wgmma from there; its stores wait for the
-- iteration's last wait (the late group's). A late dot of the same A operand
-- (dK += dS^T Q) reads the staged tile too, instead of registers packed after
-- the wait: the f32 values die at the staging, not an iteration later.
--
-- A loop marked in order (tileas.pipeline's in_order; no dot marked ahead)
-- issues its first dots (those whose results the body reads, from zeros) in
-- their own iteration, then the late dots from the registers just computed,
-- waited for before the iteration ends (iteration_in_order): no f32 value
-- crosses an iteration, which the attention backward's wider dK/dV tiles
-- need. The first dots are one wgmma group, waited for at the first read of a
-- result, when their results and the late dots' accumulators take
-- ONE_GROUP_REGS registers a thread or more; otherwise a group each, each
-- waited for at its first read (the register work of the earlier results,
-- P^T's exp2, overlapping the later dots; in_order.lua).
--
-- The turns (tileas.turns: a seq_bar a consumer warpgroup, kernels/attention.lua's
-- turn_wait / turn_pass) order the consumers' issues so that one's register
-- work overlaps the others' dots. Rings filled once a program (tileas.per_program)
-- are waited for before the prologue and released after the loop.

local tl = require "tilua"
local R = require "tilua.passes.convert_tileas_to_cutlass.read"
local V = require "tilua.passes.convert_tileas_to_cutlass.values"
local X = require "tilua.passes.convert_tileas_to_cutlass.ops"
local A = require "tilua.kernels.attention"
local Loops = require "tilua.passes.convert_tileas_to_cutlass.loops"
local Masks = require "tilua.passes.convert_tileas_to_cutlass.masks"
local InOrder = require "tilua.passes.convert_tileas_to_cutlass.in_order"
local CV = require "tilua.passes.convert_tileas_to_cutlass.chain_values"
local kind_of, pack, unpack, register_a, staging_ring, stage_operand, issue =
  CV.kind_of, CV.pack, CV.unpack, CV.register_a, CV.staging_ring, CV.stage_operand, CV.issue
local frag_size = R.frag_size

local Chain = {}
Chain.wait_fence = false -- (init.lua sets it a run: tl.options.wait_fence, the pass option wait_fence)
Chain.softmax_rows = nil -- (init.lua: tl.options.softmax_rows, the pass option softmax_rows; nil: off)

-- {=== reading the loop

-- The ring a dot operand reads (through slices and conversions), or nil.
local function ring_of(L, v) return L.ring_of[R.ring_source(v):id()] end

-- Is the result of dot o read by the yield only?
local function only_carried(o, yield)
  local users = o:result(1):users()
  return #users == 1 and users[1] == yield
end

-- Is the pipelined loop op marked in order (tileas.pipeline's in_order)?
function Chain.in_order(op)
  local p = op:attr "tileas.pipeline"
  return p and p.in_order == true
end

-- The loop's dots: ahead (marked; in a loop in order, the dots whose results
-- the iteration reads: issued first, in it), late (the others: each one's result read
-- by the yield only, as slot `slot`), and the groups of rings each kind
-- waits for and releases.
local function read_loop(L, op)
  local b = op:region(1):entry()
  local yield = b:terminator()
  local an = { ahead = {}, late = {}, late_of_slot = {}, ahead_groups = {}, late_groups = {}, once = {} }
  local function add_groups(dot, into)
    for i = 1, 2 do
      local r = ring_of(L, dot:operand(i))
      if r and r.per_program then an.once[r.group] = true
      elseif r then into[r.group] = true end
    end
  end
  an.reduced, an.staged = {}, {}
  for _, o in ipairs(b:ops()) do
    if o:name() == "tileas.dot" then
      if Chain.reduced(o) then
        an.reduced[o:result(1):id()] = o
        local r = ring_of(L, o:operand(2))
        if not r or not r.per_program then
          R.fail(o, "a dot reduce-added into a tensor in a loop of chained dots must read its B operand from a tile loaded once a program")
        end
        an.once[r.group] = true
      elseif o:attr_or_default "tileas.ahead" or (Chain.in_order(op) and not only_carried(o, yield)) then
        an.ahead[#an.ahead + 1] = o
        add_groups(o, an.ahead_groups)
      else
        local users = o:result(1):users()
        local slot
        for i, y in ipairs(yield:operands()) do if y == o:result(1) and not slot then slot = i end end
        if #users ~= 1 or users[1] ~= yield or not slot then
          R.fail(o, "a dot of a loop whose dots are issued ahead must have its result only carried by the loop (read in the next iteration)")
        end
        an.late[#an.late + 1] = { op = o, slot = slot }
        an.late_of_slot[slot] = an.late[#an.late]
        add_groups(o, an.late_groups)
      end
    end
  end
  for _, d in ipairs(an.late) do -- (a late dot whose A a reduced dot stages)
    for _, r in pairs(an.reduced) do
      if r:operand(1) == d.op:operand(1) then an.staged[d] = true end
    end
  end
  -- a ring both kinds read (the backward's K: S = Q K^T ahead, dQ += dS K
  -- late) holds iteration j's stage for the ahead dots while the late dots
  -- of j - 1 still read the stage before: waited for ahead, released late
  an.shared = {}
  for g in pairs(an.ahead_groups) do
    if an.late_groups[g] then an.shared[g] = true end
  end
  if #an.ahead == 0 then R.fail(op, "a loop of chained dots with no dot issued ahead is not lowered yet") end
  for _, d in ipairs(an.ahead) do -- (issued from zeros: a ring dot's accumulator)
    local z = d:operand(3):def()
    if not z or z:name() ~= "tileas.splat" or R.const_int(z:operand(1)) ~= 0 then
      R.fail(d, "a dot issued first in a loop in order must start from zeros (S = Q K^T of attention)")
    end
  end
  return an
end

-- The row sums the loop carries as each lane's part, the quad's lanes summed
-- once after the loop: a rows slot from zeros whose next value is
-- `slot * x + reduce(t, add)` (either order), the slot, the product and the
-- reduce read nowhere else, x a value of the iteration (no block argument:
-- the same in the quad's lanes). Summing the parts of slot * x is summing
-- slot * x (x a row's). -> {slot index -> the reduce op's result id}
local function deferred_sums(op, kinds)
  local b, out = op:region(1):entry(), {}
  local yield = b:terminator()
  local function single(v, user) local u = v:users() return #u == 1 and u[1] == user end
  local function is_zero(v)
    local d = v:def()
    return d and d:name() == "tileas.splat" and R.const_int(d:operand(1)) == 0
  end
  for i = 1, op:nresults() do
    local y, arg = yield:operand(i), b:arg(1 + i)
    local d = y:def()
    if kinds[i] == "rows" and is_zero(op:operand(3 + i)) and d and d:name() == "arith.addf" and single(y, yield) then
      for k = 1, 2 do
        local m, r = d:operand(k):def(), d:operand(3 - k):def()
        if m and r and m:name() == "arith.mulf" and r:name() == "tileas.reduce" and r:attr "kind" == "add"
           and single(m:result(1), d) and single(r:result(1), d) and single(arg, m) then
          local x = m:operand(1) == arg and m:operand(2) or m:operand(1) -- (arg is one of m's: its only user)
          if x:def() then out[i] = r:result(1):id() end
        end
      end
    end
  end
  return out
end

-- The row sums of a rows Line of lanes' parts: the quad's lanes combined.
local function quad_sum(line)
  local rows = {}
  for _, dr in ipairs { 0, 8 } do
    local v = line:at(dr)
    v = v + tl.shfl_xor(v, 1)
    rows[dr] = v + tl.shfl_xor(v, 2)
  end
  return V.line(tl.f32, 1, function(dr) return rows[dr] end)
end

-- The groups of a set in plan order.
local function ordered(L, set)
  local out = {}
  for _, g in ipairs(L.groups) do if set[g] then out[#out + 1] = g end end
  return out
end

-- }===

-- The groups of rings of the loop of chained dots op: .ahead, .late, .once
-- (in plan order), .all (every one of them), .reducing (a reduced dot),
-- .shared (a group both kinds read); split_tail.lua's walk of its stages.
function Chain.groups(L, op)
  local an = read_loop(L, op)
  local all = {}
  for _, g in ipairs(L.groups) do
    if an.ahead_groups[g] or an.late_groups[g] or an.once[g] then all[#all + 1] = g end
  end
  return { ahead = ordered(L, an.ahead_groups), late = ordered(L, an.late_groups), once = ordered(L, an.once), all = all,
           reducing = next(an.reduced) ~= nil, shared = next(an.shared) ~= nil }
end

-- Is dot op a reduced dot (tileas.reduced: from zeros, read only by
-- reduce-add stores, its K split among the consumers by tileas-materialize-agents)?
function Chain.reduced(op) return op:attr_or_default "tileas.reduced" end

-- {=== the rotated loop

local function release(group, cur)
  tl.elect_one(function() group.pipe:consumer_release(cur) end)
  cur:advance()
end

-- The stage of every ring of the groups (their cursors' index now).
local function stages_of(groups, cur, into)
  into = into or {}
  for _, g in ipairs(groups) do
    local s = cur[g]:index()
    for _, r in ipairs(g.rings) do into[r] = s end
  end
  return into
end

-- The waits and releases of the groups: the ahead dots' at the ahead cursors
-- (S.acur: a copy for a group the late dots read too, which the late
-- release advances instead), the late dots' at the cursors.
local function wait_ahead(S)
  for _, g in ipairs(S.ahead_groups) do g.pipe:consumer_wait(S.acur[g]) end
end
local function wait_late(S)
  for _, g in ipairs(S.late_groups) do
    if not S.an.shared[g] then g.pipe:consumer_wait(S.cur[g]) end -- (a shared one's stage: waited ahead)
  end
end
local function release_ahead(S)
  for _, g in ipairs(S.ahead_groups) do
    if S.an.shared[g] then S.acur[g]:advance() else release(g, S.cur[g]) end
  end
end
local function release_late(S)
  for _, g in ipairs(S.late_groups) do release(g, S.cur[g]) end
end

-- Is the pipelined loop op scheduled (a dot of it marked tileas.ahead; in
-- order: a dot of it with an operand in registers)?
function Chain.scheduled(op)
  local in_order = Chain.in_order(op)
  for _, o in ipairs(op:region(1):entry():ops()) do
    if o:name() == "tileas.dot" and o:attr_or_default "tileas.ahead" then return true end
    if in_order and o:name() == "tileas.dot" and (R.tile_of(o:operand(1)).space == "rmem" or R.tile_of(o:operand(2)).space == "rmem") then
      return true
    end
  end
  return false
end

-- The state of one lowering of a scheduled loop (Chain.lower's record S): L,
-- env, the loop op, its block b and yield, the analysis an, the groups of
-- rings (ahead, late, once), cur (group -> cursor), ctx (the turns), turns,
-- nslots and slot_kind, late_result (the late dots' results of the iteration).

-- Bind the block's arguments for iteration kk: the carried slots, the late
-- dots' accumulators (late_inits: the loop's inits, before any late dot ran).
local function bind_slots(S, kk, carried, late_inits)
  local L, b, an = S.L, S.b, S.an
  L.vmap[b:arg(1):id()] = kk
  for i = 1, S.nslots do
    local arg = b:arg(1 + i)
    local d = an.late_of_slot[i]
    if i == S.sum_slot then -- (summed by the late dot: nothing may read it in the loop, sums.lua)
      L.vmap[arg:id()] = V.line(tl.f32, 1, function()
        R.fail(S.op, "a row sum computed by the dot is read in the loop")
      end)
    elseif d and late_inits then
      L.vmap[arg:id()] = late_inits[i]
    elseif d then
      L.vmap[arg:id()] = V.frag(tl.f32, frag_size(arg:type()), function(e)
        if not S.late_result[d] then
          R.fail(d.op, "the result of a dot issued late is read before it completed (only its next accumulator may read it)")
        end
        return tl.extract(S.late_result[d], e)
      end)
    else
      L.vmap[arg:id()] = unpack(carried[i], S.slot_kind[i], arg:type())
    end
  end
end

-- A reduced dot of the body: its operand staged, the dot issued (one group
-- committed) and its result bound; its stores wait (S.pending, flushed by
-- reduced_stores after the next wgmma wait for every group).
local function issue_reduced(S, d)
  local L = S.L
  local a_ring, ring = stage_operand(L, S.env, d, S.staged)
  local st = stages_of(S.once, S.cur)
  st[ring] = S.staged
  tl.wgmma_fence()
  local vec = issue(L, d, tl.zeros(tl.f32, frag_size(d:result(1):type())), st, nil, true, a_ring)
  tl.wgmma_commit()
  if S.groups then S.groups.n = S.groups.n + 1 end
  L.vmap[d:result(1):id()] = V.vec_frag(vec, frag_size(d:result(1):type()))
end
local function reduced_stores(S)
  for _, st in ipairs(S.pending) do S.saved_store(st) end
  S.pending = {}
end

-- The body's register ops of an iteration, the ahead dots' results given.
local function lower_body(S, ahead_vecs)
  local L, env = S.L, S.env
  local saved, saved_store, by_result = env.dot, env.tiled_store, {}
  for d, vec in pairs(ahead_vecs) do by_result[d:result(1):id()] = vec end
  env.dot = function(d)
    if S.an.reduced[d:result(1):id()] then return issue_reduced(S, d) end
    local vec = by_result[d:result(1):id()]
    if V.is_frag(vec) then -- (an ahead dot of a loop in order: its group waited for at its first element)
      L.vmap[d:result(1):id()] = vec
    elseif vec then -- (a late dot: issued in the next iteration, from its operands)
      L.vmap[d:result(1):id()] = V.vec_frag(vec, frag_size(d:result(1):type()))
    end
  end
  S.saved_store = saved_store
  env.tiled_store = function(op)
    if S.an.reduced[op:operand(op:noperands()):id()] then S.pending[#S.pending + 1] = op else saved_store(op) end
  end
  L.rows_lazy = S.rows or nil -- (ops.lua's reduces: a row when first read)
  L.rows_chain = S.chain_rule or nil -- (ops.lua's max: a chain where X.max_chain is nil, by the rule)
  X.lower_block(L, S.b, env)
  L.rows_lazy, L.rows_chain = nil, nil
  env.dot, env.tiled_store = saved, saved_store
end

-- What an iteration hands to the next: the carried slots; then, after the
-- late group completed, the late dots' A registers (register_operands) and
-- their accumulators. The A registers are built only after the wait: built
-- while the previous late group is in flight, they would share registers
-- with that group's operands, and ptxas would serialize every wgmma (C7513).
local function register_operands(S, out)
  for _, d in ipairs(S.an.late) do
    if R.tile_of(d.op:operand(1)).space == "rmem" and not S.an.staged[d] then out.areg[d] = register_a(S.L, d.op) end
  end
end
-- The accumulator of the late dot that sums rows (sums.lua): its operand's
-- elements, then the 4 of the columns of ones (N .. N + 7: a row's sum each):
-- the last result's rescaled by the factor x, zeros before the first.
local function summed_accumulator(S, d)
  local x = V.get(S.L, d.op:operand(3), d.op)
  local n = frag_size(d.op:result(1):type())
  local vals = {}
  for i = 0, n - 1 do vals[i + 1] = x:at(i) end
  local last, f = S.late_result[d], S.env.f
  local factor = last and V.get(S.L, S.sum.x, d.op)
  for j = 0, 3 do
    local dr = f.offset(n + j)
    vals[n + j + 1] = last and tl.extract(last, n + j) * factor:at(dr) or tl.const(0.0, tl.f32)
  end
  return tl.vector_of(tl.f32, vals)
end
-- With S.rows (Chain.softmax_rows, off by default) the body's row values a row at a time, before the
-- wait: for row 0, then row 8, the carried rows (the running max: the row's
-- reduction), the summed dot's factor, then the late dots' register A values
-- of the row (P's exp2), stdlib/attention.lua's softmax order.
local function rows_in_order(S)
  local L, yield, f = S.L, S.yield, S.env.f
  for _, dr in ipairs { 0, 8 } do
    for i = 1, S.nslots do
      if not S.an.late_of_slot[i] and i ~= S.sum_slot and S.slot_kind[i] == "rows" then
        V.get(L, yield:operand(i), yield):at(dr)
      end
    end
    if S.sum then V.get(L, S.sum.x, S.sum.dot):at(dr) end
    for _, d in ipairs(S.an.late) do
      local ti = R.tile_of(d.op:operand(1))
      if ti.space == "rmem" and not S.an.staged[d] then
        local x = V.get(L, d.op:operand(1), d.op)
        local wide = V.is_frag(x) and x.trunc_of
        if wide then
          for i = 0, ti.shape[1] * ti.shape[2] // 128 - 1 do
            if f.offset(i) == dr then wide:at(i) end
          end
        end
      end
    end
  end
end
local function outputs_before_wait(S)
  local L, op, yield = S.L, S.op, S.yield
  local out = { areg = {}, slots = {}, staged = S.staged }
  if S.rows then rows_in_order(S) end
  for i = 1, S.nslots do
    if not S.an.late_of_slot[i] and i ~= S.sum_slot then
      out.slots[i] = pack(V.get(L, yield:operand(i), yield), S.slot_kind[i], op:result(i):type())
    end
  end
  if S.sum then -- (the rows' factor now, with the softmax, as the sum slot computed it: left to its
    -- first use, the rescale after the wait, its exp2 would wait for the late group)
    local x = V.get(L, S.sum.x, S.sum.dot)
    x:at(0)
    x:at(8)
  end
  return out
end
local function accumulators(S, out)
  out.acc = {}
  for _, d in ipairs(S.an.late) do
    if d == S.sum_d then out.acc[d] = summed_accumulator(S, d) -- (d: never nil here)
    else out.acc[d] = pack(V.get(S.L, d.op:operand(3), d.op), "frag", d.op:result(1):type())[1] end
  end
end

-- Issue the ahead dots (their accumulators svecs, or fresh), one group committed.
local function issue_ahead(S, svecs)
  local L, env = S.L, S.env
  local st = stages_of(S.ahead_groups, S.acur, stages_of(S.once, S.cur))
  local vecs = {}
  for _, d in ipairs(S.an.ahead) do
    for i = 1, 2 do -- (a slice of a ring, in the body: lowered again there)
      local v = d:operand(i)
      if not L.vmap[v:id()] and v:def() and v:def():name() == "tileas.extract_slice" then X.lower_op(L, v:def(), env) end
    end
    vecs[d] = issue(L, d, svecs and svecs[d] or tl.zeros(tl.f32, frag_size(d:result(1):type())), st, nil, true, nil, not S.reducing)
  end
  tl.wgmma_commit()
  return vecs
end

-- The late dots' register operands a k step (built before the fence).
local function operand_regs(S, out)
  local pa = {}
  for _, d in ipairs(S.an.late) do
    if out.areg[d] then pa[d] = A.p_operands(tl, { bn = R.tile_of(d.op:operand(1)).shape[2] }, out.areg[d]) end
  end
  return pa
end

-- Issue the late dots from the hand-over out, one group committed (a staged
-- A operand: the staging tile out.staged, the one the last body wrote).
local function issue_late(S, out, pa)
  local st = stages_of(S.late_groups, S.cur)
  local res = {}
  for _, d in ipairs(S.an.late) do
    local a_ring
    if S.an.staged[d] then
      local ring
      a_ring, ring = staging_ring(S.L, R.tile_of(d.op:operand(1)).elem)
      st[ring] = out.staged
    end
    res[d] = issue(S.L, d.op, out.acc[d], st, pa[d], false, a_ring, not S.reducing)
  end
  tl.wgmma_commit()
  return res
end

local function take_turn(S) if S.turns then A.turn_wait(tl, S.ctx.go, S.ctx) end end
local function pass_turn(S) if S.turns then A.turn_pass(tl, S.ctx.go, S.ctx) end end

-- The prologue, iteration lb: the ahead dots, then the body's register ops.
-- -> the ahead dots' results, the hand-over to the next iteration
local function prologue(S, lb)
  local L, op = S.L, S.op
  local inits = {}
  for i = 1, S.nslots do inits[i] = V.get(L, op:operand(3 + i), op) end
  wait_ahead(S)
  take_turn(S)
  tl.wgmma_fence()
  local svecs = issue_ahead(S, nil)
  pass_turn(S)
  tl.wgmma_wait(0)
  release_ahead(S)
  local carried = {}
  for i = 1, S.nslots do
    if not S.an.late_of_slot[i] and i ~= S.sum_slot then carried[i] = pack(inits[i], S.slot_kind[i], op:result(i):type()) end
  end
  bind_slots(S, lb, carried, inits)
  if S.reducing then S.staged = 2 * tl.cast(S.env.wg, tl.i32) end -- (the warpgroup's first staging tile)
  lower_body(S, svecs)
  local out = outputs_before_wait(S)
  if #S.pending > 0 then
    tl.wgmma_wait(0)
    reduced_stores(S)
  end
  register_operands(S, out)
  accumulators(S, out)
  return svecs, out
end

-- The loop's carried cells (the late dots' accumulators and A registers, the
-- ahead dots' results, the slots), after the cursors (and the turn).
local function loop_cells(S, svecs, out)
  local an = S.an
  local C = { list = {}, late = {}, ahead = {}, slots = {} }
  local function cell(v)
    local c = { value = v }
    C.list[#C.list + 1] = c
    return c
  end
  for _, g in ipairs(S.L.groups) do C.list[#C.list + 1] = S.cur[g] end
  for _, g in ipairs(S.ahead_groups) do
    if an.shared[g] then C.list[#C.list + 1] = S.acur[g] end
  end
  if S.turns then C.list[#C.list + 1] = S.ctx.turn end
  if S.reducing then C.staged = cell(out.staged) end
  for _, d in ipairs(an.late) do C.late[d] = { acc = cell(out.acc[d]), areg = out.areg[d] and cell(out.areg[d]) } end
  if svecs then
    for _, d in ipairs(an.ahead) do C.ahead[d] = cell(svecs[d]) end
  end
  for i = 1, S.nslots do
    if not an.late_of_slot[i] and i ~= S.sum_slot then
      C.slots[i] = {}
      for j, v in ipairs(out.slots[i]) do C.slots[i][j] = cell(v) end
    end
  end
  return C
end
-- The hand-over the cells hold now.
local function current(S, C)
  local o = { acc = {}, areg = {}, slots = {}, staged = C.staged and C.staged.value }
  for _, d in ipairs(S.an.late) do
    o.acc[d] = C.late[d].acc.value
    o.areg[d] = C.late[d].areg and C.late[d].areg.value
  end
  for i, cs in pairs(C.slots) do
    o.slots[i] = {}
    for j, c in ipairs(cs) do o.slots[i][j] = c.value end
  end
  return o
end

-- The cells after an iteration: the late dots' accumulators accs (and A
-- registers), the ahead dots' results nv, the staging tile and the slots of
-- the hand-over n.
local function update_cells(S, C, n, accs, nv)
  for _, d in ipairs(S.an.late) do
    C.late[d].acc.value = accs[d]
    if C.late[d].areg then C.late[d].areg.value = n.areg[d] end
  end
  for d, c in pairs(C.ahead) do c.value = nv[d] end
  if C.staged then C.staged.value = n.staged end
  for i, cs in pairs(C.slots) do
    for j, c in ipairs(cs) do c.value = n.slots[i][j] end
  end
end

-- Iteration kk of the loop (lb < kk < ub) on the cells C.
local function iteration(S, C, kk)
  local an = S.an
  local o = current(S, C)
  wait_ahead(S)
  wait_late(S)
  take_turn(S)
  local pa = operand_regs(S, o)
  tl.wgmma_fence() -- (no branch between it and the wgmmas: ptxas would fence again)
  local sv = {}
  for _, d in ipairs(an.ahead) do sv[d] = C.ahead[d].value end
  local nv = issue_ahead(S, sv)
  local results = issue_late(S, o, pa)
  pass_turn(S)
  tl.wgmma_wait(1)
  release_ahead(S)
  bind_slots(S, kk, o.slots, nil)
  for k2 in pairs(S.late_result) do S.late_result[k2] = nil end
  if S.reducing then S.staged = o.staged ~ 1 end -- (the other tile: the late dots just issued read this one)
  lower_body(S, nv)
  local n = outputs_before_wait(S)
  -- with Chain.wait_fence (tl.options.wait_fence = true; off by default): a CTA fence right
  -- before the late group's wait. ptxas takes that wait no earlier than the fence, so every
  -- exp2 of the body comes before it (attention d128: G16 W1 E66 W0, where ptxas otherwise
  -- takes it after 6 of the 66 to pack P early, its registers those of the P the group in
  -- flight reads, and the warps stall there: s15tattn-1, 1624 of the loop's 32647 stall
  -- samples). Measured slower (s15tattn-2: d128 0.913 of stdlib against 0.949 without, d64
  -- 0.885 against 0.944; the rescale and the packs after the wait then wait on the exp2)
  if Chain.wait_fence then tl.fence("cta") end
  tl.wgmma_wait(0)
  reduced_stores(S)
  release_late(S)
  for _, d in ipairs(an.late) do S.late_result[d] = results[d] end
  -- the late dots' accumulators first (the rescaled O), then their A registers (P packed):
  -- stdlib/attention.lua's order (s15tattn-2: level with the packs first at d128 and causal,
  -- +1 % at d64). ptxas takes the wait where it first packs P either way (attention d128:
  -- after 5 of the 66 exp2 in this order, 6 in the other; stdlib's kernel after 18)
  accumulators(S, n)
  register_operands(S, n)
  update_cells(S, C, n, n.acc, nv)
end

-- Issue the late dots from the hand-over out and wait for them; then the
-- reduced dots' stores and the late rings' release. -> their results
local function late_and_wait(S, out)
  local pa = operand_regs(S, out)
  tl.wgmma_fence()
  local results = issue_late(S, out, pa)
  tl.wgmma_wait(0)
  reduced_stores(S)
  release_late(S)
  return results
end

-- The first dots of an iteration in order, their results as fragments that
-- wait for their group at their first element read: one group (S.one_group)
-- or a group each (the register work of the earlier dots' results overlaps
-- the later dots).
-- -> {dot -> fragment}, the groups' record {n = committed, done = complete}
local function issue_first(S)
  local L, env = S.L, S.env
  local st = stages_of(S.ahead_groups, S.acur, stages_of(S.once, S.cur))
  local groups, frags = { n = 0, done = 0 }, {}
  S.groups = groups
  local one = S.one_group
  for k, d in ipairs(S.an.ahead) do
    for i = 1, 2 do -- (a slice of a ring, in the body: lowered again there)
      local v = d:operand(i)
      if not L.vmap[v:id()] and v:def() and v:def():name() == "tileas.extract_slice" then X.lower_op(L, v:def(), env) end
    end
    local size = frag_size(d:result(1):type())
    local vec = issue(L, d, tl.zeros(tl.f32, size), st, nil, true, nil, not S.reducing)
    if not one or k == #S.an.ahead then
      tl.wgmma_commit()
      groups.n = groups.n + 1
    end
    local g = one and 1 or groups.n
    frags[d] = V.frag(tl.f32, size, function(e)
      if groups.done < g then -- (wait_group in commit order: the groups after g may stay in flight)
        tl.wgmma_wait(groups.n - g)
        groups.done = g
      end
      return tl.extract(vec, e)
    end)
  end
  return frags, groups
end

-- Iteration kk in order (tileas.pipeline's in_order: no dot issued ahead):
-- the first dots (those marked ahead otherwise) issued and waited for, the
-- body's register ops, then the late dots issued from the registers just
-- computed and waited for; the f32 values the body computes die in the
-- iteration (a wider tile's registers), the tensor cores overlap only the
-- other consumers' register work (the turns).
local function iteration_in_order(S, C, kk)
  local an = S.an
  local o = current(S, C)
  o.acc_frags = {}
  for i = 1, S.nslots do
    local d = an.late_of_slot[i]
    if d then o.acc_frags[i] = V.vec_frag(o.acc[d], frag_size(S.b:arg(1 + i):type())) end
  end
  wait_ahead(S)
  wait_late(S)
  take_turn(S)
  tl.wgmma_fence()
  local nv, groups = issue_first(S)
  pass_turn(S)
  bind_slots(S, kk, o.slots, o.acc_frags)
  if S.reducing then S.staged = o.staged ~ 1 end
  lower_body(S, nv)
  local n = outputs_before_wait(S)
  if not S.one_group then InOrder.force_early(S) end -- (one group: they wait together, nothing to gain)
  register_operands(S, n)
  accumulators(S, n)
  if groups.done < groups.n then tl.wgmma_wait(0) end -- (a first dot whose result nothing read)
  S.groups = nil
  release_ahead(S)
  update_cells(S, C, n, late_and_wait(S, n), {})
end

-- The hand-over before the first iteration of a loop in order: the inits.
local function in_order_start(S)
  local L, op = S.L, S.op
  local out = { areg = {}, slots = {}, acc = {} }
  for i = 1, S.nslots do
    local x, d = V.get(L, op:operand(3 + i), op), S.an.late_of_slot[i]
    if d then out.acc[d] = pack(x, "frag", op:result(i):type())[1]
    else out.slots[i] = pack(x, S.slot_kind[i], op:result(i):type()) end
  end
  if S.reducing then out.staged = 2 * tl.cast(S.env.wg, tl.i32) + 1 end -- (its first iteration takes the other: 2 wg)
  return out
end
local function in_order_finish(S, C)
  local L, op = S.L, S.op
  local last = current(S, C)
  for _, g in ipairs(S.once) do release(g, S.cur[g]) end
  for i = 1, S.nslots do
    local d = S.an.late_of_slot[i]
    if d then
      L.vmap[op:result(i):id()] = V.vec_frag(last.acc[d], frag_size(op:result(i):type()))
    else
      L.vmap[op:result(i):id()] = unpack(last.slots[i], S.slot_kind[i], op:result(i):type())
      if S.deferred[i] then L.vmap[op:result(i):id()] = quad_sum(L.vmap[op:result(i):id()]) end
    end
  end
end

-- After the loop: the late dots of the last iteration; the loop's results.
local function finish(S, C)
  local L, op, cur = S.L, S.op, S.cur
  local last = current(S, C)
  wait_late(S)
  local results = late_and_wait(S, last)
  for _, g in ipairs(S.once) do release(g, cur[g]) end
  for i = 1, S.nslots do
    local d = S.an.late_of_slot[i]
    if d and d == S.sum_d then -- (its vector is 4 elements longer: the rows' sums, read by the sum slot)
      local vec = results[d]
      L.vmap[op:result(i):id()] = V.frag(tl.f32, frag_size(op:result(i):type()), function(e) return tl.extract(vec, e) end)
    elseif d then
      L.vmap[op:result(i):id()] = V.vec_frag(results[d], frag_size(op:result(i):type()))
    elseif i == S.sum_slot then -- (a row's sum in each of the columns of ones: elements n and n + 2)
      local vec, n = results[S.sum_d], frag_size(S.sum.dot:result(1):type())
      L.vmap[op:result(i):id()] = V.line(tl.f32, 1, function(dr) return tl.extract(vec, dr == 0 and n or n + 2) end)
    else
      L.vmap[op:result(i):id()] = unpack(last.slots[i], S.slot_kind[i], op:result(i):type())
      if S.deferred[i] then L.vmap[op:result(i):id()] = quad_sum(L.vmap[op:result(i):id()]) end
    end
  end
end

-- The loop split where the masks keep every element (masks.lua): the loop of
-- iterations from .. at - 1 with no select, then at .. ub - 1 with the
-- per-element selects. The body is lowered once, for the second loop; the
-- first is its copy (cloned in the IR: a tenth of the time lowering it again
-- took) less the selects (each replaced by the value it keeps) and the mask ops only
-- they used -- the ops the lowering would have built for it, in its order.
local function split_loops(S, C, masks, from, at, ub)
  local L = S.L
  local selects = {}
  local saved_masks = L.masks
  L.masks = {}
  for id in pairs(masks) do L.masks[id] = selects end
  -- what the body binds (L.vmap) and computes of the values from before the
  -- loop (their lazy elements) is not seen after it
  local restore = V.snapshot(L)
  local step = tl.const(1, tl.i32) -- (the first loop's step, where lowering that loop built it)
  tl.cutlass.for_range(at, ub, C.list, function(kk) S.iteration(S, C, kk) end)
  L.masks = saved_masks
  restore()
  local second = C.list[1].value:def()
  local first = second:clone()
  first:move_before(second:operand(3):def()) -- (before the second loop's step)
  first:set_operand(1, from)
  first:set_operand(2, at)
  first:set_operand(3, step)
  for i = 1, first:nresults() do second:set_operand(3 + i, first:result(i)) end
  local copies = second:walk_counterparts(first, selects) -- (the selects' copies)
  for i = 1, #selects do
    local c = copies[i]
    c:result(1):replace_all_uses(c:operand(2))
    c:erase_with_operands(first) -- (and the ops of the first loop that only its mask used)
  end
end

-- A row's max as a chain (stdlib/attention.lua's row_max) by default, where
-- tl.options.max_chain is nil: in a loop issued ahead (not in order, no reduced
-- dot) whose body takes a row's max (an online softmax) and whose late dots are
-- all 128 columns wide: the d128 attention forward. The softmax a row at a time
-- (tl.options.softmax_rows) only where asked for: with the program's arithmetic
-- as stdlib's (examples/attention.lua's fold and -inf guard) it is slower
-- (s16tattn-1: 0.942 of stdlib's kernel against 0.974 with the chain alone;
-- s16tattn-2: the chain alone 0.983, rows + chain with the old arithmetic 0.969).
-- At d64, 64 wide, the chain was slower causal (0.97 x): left out; d256 and the
-- backward's dQ loop, no max, not measured.
function Chain.chain_rule(S)
  if S.in_order or S.reducing or #S.an.late == 0 then return false end
  for _, d in ipairs(S.an.late) do
    if R.tile_of(d.op:result(1)).shape[2] ~= 128 then return false end
  end
  for _, o in ipairs(S.b:ops()) do
    if o:name() == "tileas.reduce" and o:attr_or_default "kind" == "max" then return true end
  end
  return false
end

-- env.pipelined_for of a consumer whose loop op is scheduled (tileas.ahead):
-- cur maps each group of rings to the consumer's cursor; ctx.turn: the
-- seq_bar state (nil: no turns).
function Chain.lower(L, env, op, cur, ctx)
  local an = read_loop(L, op)
  local b = op:region(1):entry()
  local S = { L = L, env = env, op = op, b = b, yield = b:terminator(), an = an, cur = cur, ctx = ctx,
              nslots = op:nresults(), slot_kind = {}, late_result = {}, pending = {},
              ahead_groups = ordered(L, an.ahead_groups), late_groups = ordered(L, an.late_groups), once = ordered(L, an.once),
              turns = ctx.turn and op:attr_or_default "tileas.turns" }
  S.reducing = next(an.reduced) ~= nil
  S.in_order = Chain.in_order(op)
  S.chain_rule = Chain.chain_rule(S)
  S.rows = Chain.softmax_rows or false -- (nil: off; s16tattn-3)
  if S.in_order then S.early, S.one_group = InOrder.early_operands(S), InOrder.one_group(S) end
  for i = 1, S.nslots do
    if not an.late_of_slot[i] then
      S.slot_kind[i] = kind_of(op:result(i):type())
      if not S.slot_kind[i] then
        R.fail(op, "a loop of chained dots carrying %s is not lowered yet (rows of the accumulator's layout, f32 accumulator tiles, scalars)",
               tostring(op:result(i):type()))
      end
    end
  end
  -- a shared group's ahead cursor starts where the late one is (both
  -- advance once an iteration: they meet again after the loop)
  S.acur = {}
  for _, g in ipairs(S.ahead_groups) do
    S.acur[g] = an.shared[g] and cur[g]:rebound(cur[g].value) or cur[g] -- (a second cursor at the same value)
  end
  S.deferred = deferred_sums(op, S.slot_kind)
  S.sum = not S.in_order and L.sums and L.sums[op:id()] -- (a rows slot summed by a late dot: sums.lua)
  if S.sum then
    S.sum_slot, S.sum_d = S.sum.slot, an.late_of_slot[S.sum.late_slot]
    S.deferred[S.sum_slot] = nil
  end
  -- (a load staged in a group's stages, staged.lua: read at the stage of the
  -- iteration's cursor, the ahead one where the loop has one)
  local saved_stage = env.group_stage
  env.group_stage = function(g) return (S.acur[g] or cur[g]):index() end
  local saved = env.lane_sums
  env.lane_sums = {}
  for _, id in pairs(S.deferred) do env.lane_sums[id] = true end
  for _, g in ipairs(S.once) do g.pipe:consumer_wait(cur[g]) end
  local lb, ub = Loops.k_blocks(L, op, env)
  local C, first
  if S.in_order then
    S.iteration, first = iteration_in_order, lb
    C = loop_cells(S, nil, in_order_start(S))
  else
    local svecs, out = prologue(S, lb)
    S.iteration, first = iteration, lb + 1
    C = loop_cells(S, svecs, out)
  end
  local at, masks = Masks.split(L, op, first, ub)
  if at then -- the iterations whose masks keep every element, then the others (masks.lua)
    split_loops(S, C, masks, first, at, ub)
  else
    tl.cutlass.for_range(first, ub, C.list, function(kk) S.iteration(S, C, kk) end)
  end
  env.lane_sums, env.group_stage = saved, saved_stage
  if S.in_order then in_order_finish(S, C) else finish(S, C) end
end

-- }===

return Chain
