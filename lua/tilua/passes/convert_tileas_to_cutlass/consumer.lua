-- tilua.passes.convert_tileas_to_cutlass.consumer: the consumer agents, a
-- warpgroup each (64 rows of the accumulator). Each takes registers
-- (setmaxnreg.inc), runs kernels/gemm.lua's mainloop over the pipelined loop
-- (consumer_wait, wgmma from descriptors of the stage into a vector<N/2 x f32>
-- accumulator, commit, wait for one group, release the stage before; the
-- first k block peeled; a dot whose k blocks are each summed from zero, fp8's
-- promotion, runs its own loop that promotes a block late: lagged_loop), then
-- the epilogue per thread on its wgmma fragment:
-- elementwise ops (ops.lua), tiles loaded per element, 16-bit tiles stored by
-- stmatrix + TMA store, others by plain stores. Replicas of one consumer
-- (tileas.replica) are one agent of their warpgroups running one code.

local tl = require "tilua"
local R = require "tilua.passes.convert_tileas_to_cutlass.read"
local V = require "tilua.passes.convert_tileas_to_cutlass.values"
local X = require "tilua.passes.convert_tileas_to_cutlass.ops"
local Loops = require "tilua.passes.convert_tileas_to_cutlass.loops"
local Chain = require "tilua.passes.convert_tileas_to_cutlass.chain"
local A = require "tilua.kernels.attention"
local Staged = require "tilua.passes.convert_tileas_to_cutlass.staged"
local Sums = require "tilua.passes.convert_tileas_to_cutlass.sums"
local Epilogue = require "tilua.passes.convert_tileas_to_cutlass.epilogue"

local Consumer = {}

-- {=== the mainloop: dots of rings

-- A wgmma descriptor (V.desc); linear (the ring's base descriptor plus the
-- stage's and the k step's 16-byte units where the swizzle allows: one
-- 64-bit add a wgmma instead of the address's arithmetic) where the pass
-- option says so (Consumer.linear_desc: linear_desc=1 true, linear_desc=0
-- false), else by the rule: the lagged loop of staged block scales
-- (lagged_loop sets linear_rule while it lowers; s16fp8-2 measured it
-- 0.998-1.087 of the address form, that loop being issue-bound), the
-- address form elsewhere (per-tensor and the fast forms: slower or not
-- measured faster, s14fp8-1 and s15's last runs).
local linear_rule = false
local function desc(r, s, kk, kstep, kmajor)
  local linear = Consumer.linear_desc
  if linear == nil then linear = linear_rule end
  return V.desc(r, s, kk, kstep, kmajor, linear)
end

-- The f32 accumulator acc plus a k block's complete sum (vectors of f32).
local function promoted(acc, sum)
  local vals = {}
  for i = 0, acc:type():info().shape[1] - 1 do vals[i + 1] = tl.extract(acc, i) + tl.extract(sum, i) end
  return tl.vector_of(tl.f32, vals)
end

-- The dot of one k block of a ping-pong consumer's 128 rows (env.acc_in: the
-- slices' vectors): per k step B's descriptor, then a wgmma per 64-row slice
-- of A (stdlib/gemm.lua's mma_stage, its mi = 2), commit.
local function sliced_dot(L, env, op, ra, rb, ai, at, ain, fresh, kstep)
  -- (fp8 with fast accumulation only: a promoted k block's sum beside the
  -- accumulator would not fit a warpgroup's registers at 128 rows)
  if fresh or (at.fp8 and not at.fast_accum) or ain.vecs ~= env.acc_in then
    R.fail(op, "a 128-row ping-pong consumer's dot accumulates 16-bit operands, or fp8 with fast_accum, into the value the loop carries")
  end
  local wtype = { [tl.bf16:id()] = "bf16", [tl.f16:id()] = "f16" }
  local ty = at.fp8 or wtype[ai.elem:id()]
  local opts = { type_a = ty, type_b = ty, trans_a = at.transpose_a or nil,
                 trans_b = not at.transpose_b or nil, scale_a = at.negate_a and -1 or nil, scale_b = at.negate_b and -1 or nil }
  local ring = ra.ring or ra
  local parts = {}
  for sl = 1, #env.acc_in do -- A's rows of slice sl (along M: dim 2 of a transposed A)
    local off = at.transpose_a and { 0, 64 * (sl - 1) } or { 64 * (sl - 1), 0 }
    parts[sl] = setmetatable({ ring = ring, offsets = off }, V.Ring)
  end
  local K, sums = ai.shape[at.transpose_a and 1 or 2], { table.unpack(env.acc_in) }
  tl.wgmma_fence()
  for kk = 0, K // kstep - 1 do
    local db = desc(rb, env.stage, kk, kstep, at.transpose_b)
    for sl = 1, #sums do sums[sl] = tl.wgmma(sums[sl], desc(parts[sl], env.stage, kk, kstep, not at.transpose_a), db, opts) end
  end
  tl.wgmma_commit()
  L.vmap[op:result(1):id()] = V.slices_frag(sums, sums[1]:type():info().shape[1])
end

-- env.dot: the dot of one k block: wgmma_fence, K / k wgmmas (k: 16 for
-- 16-bit operands, 32 for fp8 bytes), commit.
local function dot(L, env)
  local wtype = { [tl.bf16:id()] = "bf16", [tl.f16:id()] = "f16" }
  return function(op)
    local ra, rb = V.get(L, op:operand(1), op), V.get(L, op:operand(2), op)
    if not V.is_ring(ra) or not V.is_ring(rb) then R.fail(op, "dot operands must be rings (shared tiles the producer fills)") end
    local at = op:attrs()
    local ai = R.tile_of(op:operand(1))
    local ta_, kstep = wtype[ai.elem:id()], 16
    if at.fp8 then -- wgmma of fp8 reads both operands K-major only
      if at.transpose_a or not at.transpose_b then R.fail(op, "an fp8 dot takes a as [M, K] and b as [N, K] (K-major both: wgmma's fp8)") end
      ta_, kstep = at.fp8, 32
    end
    if not ta_ then R.fail(op, "dots of %s are not lowered yet (bf16, f16, and 8-bit tiles with fp8)", tostring(ai.elem)) end
    local K = ai.shape[at.transpose_a and 1 or 2]
    -- the accumulator: the loop's carried one, or zeros (a k block's own
    -- product, scaled before the loop adds it: block-scaled fp8)
    local ain = V.get(L, op:operand(3), op)
    local fresh = ain.splat and R.const_int(ain.splat) == 0
    if (env.slices or 1) > 1 then return sliced_dot(L, env, op, ra, rb, ai, at, ain, fresh, kstep) end
    if not fresh and ain.vec ~= env.acc_in then
      R.fail(op, "a pipelined loop's dot accumulates into the value the loop carries or into zeros")
    end
    local acc = env.acc_in
    -- a lagged loop (lagged_loop below): its promotion phase takes the
    -- previous k block's sum, already complete, instead of issuing
    if env.lag and not env.lag.issue then
      L.vmap[op:result(1):id()] = V.vec_frag(fresh and env.lag.prev or promoted(acc, env.lag.prev), acc:type():info().shape[1])
      return
    end
    local opts = { type_a = ta_, type_b = ta_, trans_a = at.transpose_a or nil, trans_b = not at.transpose_b or nil,
                   scale_a = at.negate_a and -1 or nil, scale_b = at.negate_b and -1 or nil }
    -- fp8: the tensor cores keep about 14 bits of an fp8 sum, so each k block
    -- is summed from zero (scale_d false) and added to the f32 accumulator in
    -- registers once complete (the promotion of DeepSeek-V3's fp8 GEMMs),
    -- unless fast_accum (the chain goes on in the accumulator, as bf16's)
    local promote = at.fp8 and not at.fast_accum
    local sum = (promote or fresh) and (env.lag and env.lag.into or tl.zeros(tl.f32, acc:type():info().shape[1])) or acc
    tl.wgmma_fence()
    for kk = 0, K // kstep - 1 do
      local o = opts
      if (promote or fresh) and kk == 0 then
        o = { scale_d = false }
        for key, v in pairs(opts) do o[key] = v end
      end
      sum = tl.wgmma(sum, desc(ra, env.stage, kk, kstep, not at.transpose_a),
                     desc(rb, env.stage, kk, kstep, at.transpose_b), o)
    end
    tl.wgmma_commit()
    for _, load in ipairs(env.after_issue or {}) do load() end
    if env.after_issue then env.after_issue = {} end
    if env.lag then -- (the issue phase: the sum is promoted a k block later)
      env.lag.sum = sum
      return
    end
    -- the tiles the iteration loaded before the dot, read while it runs
    for _, x in ipairs(env.pending_loads or {}) do V.force(x, env.f, acc:type():info().shape[1]) end
    env.pending_loads = {}
    if fresh then
      tl.wgmma_wait(0)
      acc = sum
    elseif promote then
      tl.wgmma_wait(0)
      acc = promoted(acc, sum)
    else
      acc = sum
    end
    L.vmap[op:result(1):id()] = V.vec_frag(acc, acc:type():info().shape[1])
  end
end

-- The release of stage s (a cluster's pipeline counts every thread's release,
-- as stdlib/gemm.lua's).
local function releaser(L)
  return function(s)
    if L.nctas > 1 then L.pipe:consumer_release(s) return end
    tl.elect_one(function() L.pipe:consumer_release(s) end)
  end
end

-- {=== loads read a k block ahead

-- A consumer's loads in the pipelined loop, before its dot, of a row or a
-- column of the accumulator's layout or of one element (scales), whose
-- coordinates are the loop's k block and values that do not change in the
-- loop: they are read one k block ahead. The loop carries this block's
-- values, and the iteration loads the next block's once its dot is issued,
-- so that a load's latency hides behind the rest of the iteration instead of
-- sitting on the dot's path (block-scaled fp8's scales).
local function ahead_loads(b)
  local kk = b:arg(1):id()
  local varies = { [kk] = true, [b:arg(2):id()] = true }
  local loads, invariant = {}, {} -- (invariant: the scalar ops of the body that do not vary)
  for _, o in ipairs(b:ops()) do
    if o:name() == "tileas.dot" then break end
    local by_k, fixed = false, true
    for i = 1, o:noperands() do
      local id = o:operand(i):id()
      if id == kk then by_k = true elseif varies[id] then fixed = false end
    end
    local scalar = o:nresults() == 1 and not R.tile_of(o:result(1)) and o:nregions() == 0
    if fixed and not by_k and scalar and o:name():match "^arith%." then
      invariant[#invariant + 1] = o
    else
      for _, r in ipairs(o:results()) do varies[r:id()] = true end
    end
    local rank = o:name() == "tileas.tiled_load" and #R.tile_of(o:result(1)).shape
    if rank and by_k and fixed and (X.is_single(o) or (rank == 1 and R.layout_kind(o:result(1)) == "slice")) then
      loads[#loads + 1] = o
    end
  end
  return loads, invariant
end

-- The keys of a lowered ahead load x that the thread holds (f: its
-- fragment, n elements): a line's (V.keys); nil for one element.
local function ahead_keys(x, f, n)
  if x == nil or x.single ~= nil then return nil end
  return V.keys(x, f, n)
end

-- x's values at its keys.
local function ahead_values(x, f, n)
  local keys = ahead_keys(x, f, n)
  if not keys then return { x.single } end
  local vals = {}
  for j, key in ipairs(keys) do vals[j] = x:at(key) end
  return vals
end

-- x (nil: one element) made of the values ahead_values gave: a line keeps its
-- lazy form at this k block, its elements those values.
local function ahead_value(x, vals, f, n)
  local keys = ahead_keys(x, f, n)
  if not keys then return { single = vals[1] } end
  for j, key in ipairs(keys) do x.cache[key] = vals[j] end
  return x
end

-- env.ahead for the ahead loads: each takes its values, in order, from vals
-- at index `from` on (the values the loop carried; on_use(o), when given,
-- runs first).
local function carried_ahead(env, ahead, vals, from, n, on_use)
  local at, t = from, {}
  for _, o in ipairs(ahead) do
    t[o:result(1):id()] = function(x)
      if on_use then on_use(o) end
      local count = #(ahead_keys(x, env.f, n) or { 1 })
      local mine = table.move(vals, at, at + count - 1, 1, {})
      at = at + count
      return ahead_value(x, mine, env.f, n)
    end
  end
  return t
end

-- Ahead load o (of the loop's body b) at k block k (the loop's index bound
-- to k meanwhile) -> its values the thread holds (n: the fragment's size).
local function ahead_load(L, env, b, o, k, n)
  local kid, rid = b:arg(1):id(), o:result(1):id()
  local saved, saved_x, saved_ahead = L.vmap[kid], L.vmap[rid], env.ahead
  L.vmap[kid], env.ahead = k, nil
  env.tiled_load(o)
  local vals = ahead_values(L.vmap[rid], env.f, n) -- (built while k is bound)
  L.vmap[kid], L.vmap[rid], env.ahead = saved, saved_x, saved_ahead
  return vals
end

-- The lines of ahead load o at k block k prefetched into L1 (the loop's
-- tileas.pipeline prefetch = d: the issue of block k prefetches block k + d),
-- so that its load, one block ahead, hits L1: a global load still in flight
-- at the next wgmma_fence (or at the select of its mask) stalls the
-- warpgroup for L2's latency, a prefetch writes no register.
local function ahead_prefetch(L, env, b, o, k, n)
  L.prefetching = true
  ahead_load(L, env, b, o, k, n)
  L.prefetching = nil
end

-- The loop's prefetch distance in k blocks (tileas.pipeline's prefetch; 0: none).
-- The ahead loads' values at k block k (past the last: masked, unused), in
-- the order of `ahead` (lagged_loop's and unlagged_loop's issue).
local function block_vals(L, env, b, ahead, k, n)
  local vals = {}
  for _, o in ipairs(ahead) do
    local v = ahead_load(L, env, b, o, k, n)
    table.move(v, 1, #v, #vals + 1, vals)
  end
  return vals
end

-- Lower the dot of body b with what it depends on (env.lag set: issued into
-- its sum, env.after_issue run after the issue), advance st -> the sum
local function issue_block(L, env, b, invariant, plan, st)
  for _, o in ipairs(invariant) do V.at_loc(o, X.lower_op, L, o, env) end
  for _, o in ipairs(b:ops()) do
    if plan.deps[o:nresults() > 0 and o:result(1):id() or false] then V.at_loc(o, X.lower_op, L, o, env) end
  end
  V.at_loc(plan.dot, X.lower_op, L, plan.dot, env)
  local sum = env.lag.sum
  env.lag, env.after_issue = nil, nil
  st:advance()
  return sum
end

local function prefetch_distance(op)
  local p = op:attr "tileas.pipeline"
  return type(p) == "table" and p.prefetch or 0
end

Consumer.ahead_loads = ahead_loads -- (staged.lua's plan)

-- }===

-- {=== the promotion a k block behind

-- The ops a loop body may hold, besides arith, its ahead loads and its dot,
-- for the promotion to lag: ops of no effect whose value is the same
-- whenever they are lowered.
local PURE = { ["scf.yield"] = true, ["tileas.expand_dim"] = true, ["tileas.extract"] = true, ["tileas.splat"] = true,
               ["tileas.broadcast"] = true, ["tileas.extract_slice"] = true, ["tileas.convert_layout"] = true }

-- A pipelined loop (body b, ahead loads `ahead`, an accumulator of n f32 a
-- thread) whose one dot sums each k block from zero (fp8's promotion, or a
-- dot into zeros) can promote each block's sum a block late: the loop issues
-- block k + 1's wgmmas into a second sum, waits until only those are in
-- flight (wgmma_wait 1) and only then promotes block k (the elementwise ops
-- after the dot: the add, block scales' fma), so that a warpgroup's tensor
-- cores work on its next block while it promotes (DeepGEMM's overlap, within
-- one warpgroup). It holds two sums beside the accumulator: 3n registers, so
-- n <= 72 (a 64 x 144 accumulator a warpgroup: 216 registers, which ptxas
-- fits beside the loop's without spills). Every other op of the body
-- must be pure (arith, PURE, the ahead loads: the promotion reads a block's
-- values one iteration later). -> { dot = op, deps = {[result id] = true}:
-- the ops the dot's operands need (lowered when it is issued) }, or nil
local function lag_plan(b, ahead, n)
  if n > 72 then return nil end
  local is_ahead, by_result, dot = {}, {}, nil
  for _, o in ipairs(ahead) do is_ahead[o:result(1):id()] = true end
  for _, o in ipairs(b:ops()) do
    local name, rid = o:name(), o:nresults() > 0 and o:result(1):id()
    if rid then by_result[rid] = o end
    if name == "tileas.dot" then
      if dot then return nil end
      dot = o
    elseif o:nregions() > 0 or not (name:match "^arith%." or PURE[name] or (rid and is_ahead[rid])) then
      return nil
    end
  end
  if not dot then return nil end
  local ain = dot:operand(3):def()
  local fresh = ain and ain:name() == "tileas.splat" and R.const_int(ain:operand(1)) == 0
  local at = dot:attrs()
  if not fresh and not (at.fp8 and not at.fast_accum and dot:operand(3):id() == b:arg(2):id()) then return nil end
  local deps = {}
  local function need(v)
    local o = by_result[v:id()]
    if not o or deps[v:id()] then return end
    deps[v:id()] = true
    for i = 1, o:noperands() do need(o:operand(i)) end
  end
  for i = 1, 3 do need(dot:operand(i)) end
  return { dot = dot, deps = deps }
end
Consumer.lag_plan = lag_plan -- (staged.lua's plan)

-- The pipelined loop (body b) with its promotion a k block behind
-- (lag_plan's plan). Two sums, A and B, each in fixed registers: after the
-- first block (into A), the loop takes two blocks an iteration, issuing into
-- B then promoting A, issuing into A then promoting B, so that no sum still
-- being written is ever copied (ptxas would serialize every wgmma); an
-- odd block left is issued into B after the loop. The ahead loads' values of
-- the next iteration's two blocks are loaded together once the second block
-- of the iteration is issued (the first two blocks' after the first issue),
-- one and two issues before their promotions: if a global load still in
-- flight holds the next wgmma_fence (docs/PERF.md's hypothesis, not yet seen
-- in the SASS), one load point an iteration holds one fence of two. The loop
-- carries the values of A's block and of the next. With the loop's prefetch
-- (tileas.pipeline's prefetch = d), each issue also prefetches the lines of
-- the block d ahead into L1, so that those loads hit L1. hand, when given
-- ({issued = f, state = a seq_bar cursor f advances}): f runs once every
-- wgmma is issued, before the last promotions (a ping-pong consumer's
-- hand-off of the ring to the other, as kernels/gemm.lua's mainloop does).
-- -> the accumulator (a vector of n f32)
local lagged_loop_body
local function lagged_loop(L, env, st, b, ahead, invariant, plan, n, lb, ub, acc, pf, hand)
  -- (the descriptors' rule, desc above: linear in the loop of staged block
  -- scales on one consumer's rows, the promoted block form; not ping-pong's)
  local saved = linear_rule
  linear_rule = Staged.loop(L, b) and not hand
  local ok, out = pcall(lagged_loop_body, L, env, st, b, ahead, invariant, plan, n, lb, ub, acc, pf, hand)
  linear_rule = saved
  if not ok then error(out, 0) end
  return out
end

function lagged_loop_body(L, env, st, b, ahead, invariant, plan, n, lb, ub, acc, pf, hand)
  local kid, accid = b:arg(1):id(), b:arg(2):id()
  -- staged (staged.lua): the ahead loads' values are in the stage; an issue
  -- of block k reads block k's own (its stage held until the next issue)
  local staged = Staged.loop(L, b)
  local yield, pipe = b:terminator(), L.pipe
  local release = releaser(L)
  local function load_vals(k) return block_vals(L, env, b, ahead, k, n) end
  local issued_at -- (st's value at the latest issue: its block's cursor)
  -- issue k block kk into the registers of sum `into` (waiting for its
  -- stage), then load the values of blocks ... -> its sum (in flight), them
  local function issue(kk, into, ...)
    issued_at = st.value
    pipe:consumer_wait(st)
    L.vmap[kid], L.vmap[accid] = kk, V.vec_frag(acc, n)
    env.acc_in, env.stage, env.lag = acc, st:index(), { issue = true, into = into }
    local blocks, vals = { ... }, {}
    env.after_issue = { function()
      for i, k in ipairs(blocks) do vals[i] = load_vals(k) end
      if pf > 0 then for _, o in ipairs(ahead) do ahead_prefetch(L, env, b, o, kk + pf, n) end end
    end }
    local sum = issue_block(L, env, b, invariant, plan, st)
    return sum, table.unpack(vals, 1, #blocks)
  end
  -- the body of k block kk whose dot's sum `prev` is complete (its ahead
  -- loads' values vals): acc becomes what it yields
  local function promote(kk, prev, vals)
    L.vmap[kid], L.vmap[accid] = kk, V.vec_frag(acc, n)
    env.acc_in, env.lag, env.pending_loads = acc, { prev = prev }, {}
    env.ahead = carried_ahead(env, ahead, vals, 1, n)
    X.lower_block(L, b, env)
    env.lag, env.ahead, env.pending_loads = nil, nil, nil
    local out = V.get(L, yield:operand(1), yield)
    if not V.is_frag(out) then R.fail(yield, "the pipelined loop must yield its dot's result or elementwise ops of it") end
    if out.vec then acc = out.vec return end
    local v = {}
    for i = 0, n - 1 do v[i + 1] = out:at(i) end
    acc = tl.vector_of(tl.f32, v)
  end
  local rel = setmetatable({ value = st.value, pipe = pipe, role = "consumer" }, tl.cutlass.State)
  -- the stage of the oldest block not released (rel's) released, then rel
  -- moved to the next: by its own advance (the default: a second cursor the
  -- loop carries and increments), or, Consumer.release_index (the pass option
  -- release_index=1) after an issue, to the wait's cursor that issue took
  -- (st's value then: the next block not released), so that rel carries
  -- values st computed (s16fp8-1's SASS: rel's increment and its barrier's
  -- address are 13 instructions a k block on the vector pipe)
  local function release_oldest(after_issue)
    release(rel)
    if after_issue and Consumer.release_index then rel.value = issued_at return end
    rel:advance()
  end
  -- block kk - 1 (sum, vals) complete once block kk is issued: its stage
  -- released (the promotion reads registers only), then promoted
  local function promote_after_issue(kk, sum, vals)
    tl.wgmma_wait(1)
    release_oldest(true)
    promote(kk - 1, sum, vals)
  end
  -- (prefetch: the first blocks' lines, before the first issue)
  if pf > 0 and #ahead > 0 then
    for _, o in ipairs(invariant) do V.at_loc(o, X.lower_op, L, o, env) end
    for d = 0, pf - 1 do
      for _, o in ipairs(ahead) do ahead_prefetch(L, env, b, o, lb + d, n) end
    end
  end
  -- va: the values of A's block; vn: of the block issued next (staged:
  -- none, each issue reads its own block's)
  local A, va, vn
  if staged then A, va = issue(lb, tl.zeros(tl.f32, n), lb) vn = {}
  else A, va, vn = issue(lb, tl.zeros(tl.f32, n), lb, lb + 1) end
  local nvals, nnext = #va, #vn
  local cur = { st, rel, { value = acc }, { value = A }, { value = tl.zeros(tl.f32, n) } }
  for i = 1, nvals do cur[5 + i] = { value = va[i] } end
  for i = 1, nnext do cur[5 + nvals + i] = { value = vn[i] } end
  local function carried()
    acc, A = cur[3].value, cur[4].value
    for i = 1, nvals do va[i] = cur[5 + i].value end
    for i = 1, nnext do vn[i] = cur[5 + nvals + i].value end
  end
  tl.cutlass.for_range(lb + 1, ub - 1, 2, cur, function(j)
    carried()
    local B, vb = issue(j, cur[5].value, staged and j or nil)
    promote_after_issue(j, A, va)
    local A2, v1, v2
    if staged then A2, v1 = issue(j + 1, A, j + 1)
    else A2, v1, v2 = issue(j + 1, A, j + 1, j + 2) end -- (the next pair's values at once)
    promote_after_issue(j + 1, B, staged and vb or vn)
    cur[3].value, cur[4].value, cur[5].value = acc, A2, B
    for i = 1, nvals do cur[5 + i].value = v1[i] end
    for i = 1, nnext do cur[5 + nvals + i].value = v2[i] end
  end)
  carried()
  local B0 = cur[5].value
  local st0, rel0, acc0 = st.value, rel.value, acc -- (the else-branch starts from them)
  local hand0 = hand and hand.state.value
  local function handed() -- (the hand-off, its cursor yielded by both branches)
    if not hand then return end
    hand.issued()
    return hand.state.value
  end
  -- the last block: A's, or one more issued into B; every sum complete at the end
  local out = table.pack(tl.if_(((ub - lb) % 2):eq(0), function()
    local B, vb = issue(ub - 1, B0, staged and ub - 1 or nil)
    local h = handed()
    promote_after_issue(ub - 1, A, va)
    tl.wgmma_wait(0)
    release_oldest()
    promote(ub - 1, B, staged and vb or vn)
    if h then return acc, st.value, rel.value, h end
    return acc, st.value, rel.value
  end, function()
    st.value, rel.value, acc = st0, rel0, acc0
    if hand then hand.state.value = hand0 end
    local h = handed()
    tl.wgmma_wait(0)
    release_oldest()
    promote(ub - 1, A, va)
    if h then return acc, st.value, rel.value, h end
    return acc, st.value, rel.value
  end))
  acc, st.value = out[1], out[2]
  if hand then hand.state.value = out[4] end
  return acc
end

-- The same loop (lag_plan's plan) in DeepGEMM's order, Consumer.lag == 0
-- (the pass option lag=0): a k block an iteration, issued into one sum (its
-- ahead loads' values loaded once it is issued: staged, from its own stage),
-- waited for whole (wgmma_wait 0), its stage released, then promoted; no
-- block in flight while a warpgroup promotes, so the tensor cores work on
-- the other consumer's block meanwhile (the consumers overlap each other,
-- not themselves). Two sums' registers fewer than lagged_loop's. Not for
-- ping-pong consumers (their hand-off follows the last issue). -> the
-- accumulator (a vector of n f32)
local function unlagged_loop(L, env, st, b, ahead, invariant, plan, n, lb, ub, acc, pf)
  local kid, accid = b:arg(1):id(), b:arg(2):id()
  local staged = Staged.loop(L, b)
  local yield, pipe = b:terminator(), L.pipe
  local release = releaser(L)
  local function load_vals(k) return block_vals(L, env, b, ahead, k, n) end
  local rel = setmetatable({ value = st.value, pipe = pipe, role = "consumer" }, tl.cutlass.State)
  -- (not staged: the ahead loads' values of the first block before the loop,
  -- each iteration's of the next once its block is issued)
  local vn = {}
  if not staged and #ahead > 0 then
    for _, o in ipairs(invariant) do V.at_loc(o, X.lower_op, L, o, env) end
    vn = load_vals(lb)
    for d = 1, pf - 1 do -- (prefetch: the next blocks' lines; each issue prefetches the block pf ahead)
      for _, o in ipairs(ahead) do ahead_prefetch(L, env, b, o, lb + d, n) end
    end
  end
  local cur = { st, rel, { value = acc } }
  for i = 1, #vn do cur[3 + i] = { value = vn[i] } end
  tl.cutlass.for_range(lb, ub, cur, function(j)
    acc = cur[3].value
    local mine = {}
    for i = 1, #vn do mine[i] = cur[3 + i].value end
    pipe:consumer_wait(st)
    L.vmap[kid], L.vmap[accid] = j, V.vec_frag(acc, n)
    env.acc_in, env.stage, env.lag = acc, st:index(), { issue = true, into = tl.zeros(tl.f32, n) }
    local nxt = {}
    env.after_issue = { function()
      if staged then mine = load_vals(j) else nxt = load_vals(j + 1) end
      if pf > 0 then for _, o in ipairs(ahead) do ahead_prefetch(L, env, b, o, j + pf, n) end end
    end }
    local sum = issue_block(L, env, b, invariant, plan, st)
    tl.wgmma_wait(0)
    release(rel)
    rel:advance()
    -- the block's body with its complete sum
    L.vmap[kid], L.vmap[accid] = j, V.vec_frag(acc, n)
    env.acc_in, env.lag, env.pending_loads = acc, { prev = sum }, {}
    env.ahead = carried_ahead(env, ahead, mine, 1, n)
    X.lower_block(L, b, env)
    env.lag, env.ahead, env.pending_loads = nil, nil, nil
    local out = V.get(L, yield:operand(1), yield)
    if not V.is_frag(out) then R.fail(yield, "the pipelined loop must yield its dot's result or elementwise ops of it") end
    if out.vec then acc = out.vec
    else
      local v = {}
      for i = 0, n - 1 do v[i + 1] = out:at(i) end
      acc = tl.vector_of(tl.f32, v)
    end
    cur[3].value = acc
    for i = 1, #vn do cur[3 + i].value = nxt[i] end
  end)
  return cur[3].value
end

-- }===

-- env.pipelined_for: the accumulator carried as vector<N/2 x f32> through
-- kernels/gemm.lua's mainloop (cursor st); StreamK: the sum of the tile's
-- splits, on its final split (env.final). wg, t: the warpgroup, its thread.
local function pipelined_for(L, env, st, wg, t)
  local G, S = L.G, L.S
  return function(op)
    local b = op:region(1):entry()
    if op:nresults() ~= 1 then R.fail(op, "a consumer's pipelined loop carries one accumulator, got %d values", op:nresults()) end
    local shape = R.cta_part(R.tile_of(op:result(1)), L.nctas) -- the CTA's block (wgmma's N)
    -- (a ping-pong consumer's 128 rows: two 64-row slices, env.slices, a vector each)
    local slices = env.slices or 1
    if R.layout_kind(op:result(1)) ~= "mma" or shape[1] ~= 64 * slices then
      R.fail(op, "the carried value must be a 64-row mma accumulator (128 rows: a ping-pong consumer's)")
    end
    local n = shape[2] // 2
    -- (ksplit's consumer 1 starts from zeros: loops.lua lowered only what its loop reads)
    local ks = env.ks
    local init = not (ks and ks.g == 1) and V.get(L, op:operand(4), op)
    -- a zero accumulator starts from zeros, as stdlib/gemm.lua's does
    local zero = not init or init.splat and R.const_int(init.splat) == 0
    local function vec_of(x)
      if slices > 1 then return V.slice_vecs(x, slices, n) end
      if x.vec then return x.vec end
      local vals = {}
      for i = 0, n - 1 do vals[i + 1] = x:at(i) end
      return tl.vector_of(tl.f32, vals)
    end
    local yield = b:terminator()
    local ahead, invariant = ahead_loads(b)
    local pf = prefetch_distance(op)
    local function values_at(o, k) return ahead_load(L, env, b, o, k, n) end
    -- carried: the accumulator, then the ahead loads' values of this k block
    local function step(kk, carried, s)
      local acc = #ahead > 0 and carried[1] or carried
      L.vmap[b:arg(1):id()], L.vmap[b:arg(2):id()] = kk, slices > 1 and V.slices_frag(acc, n) or V.vec_frag(acc, n)
      env.acc_in, env.stage, env.pending_loads = acc, s, {}
      local nxt = { false }
      env.after_issue = {}
      env.ahead = carried_ahead(env, ahead, carried, 2, n, function(o)
        -- the next k block's values, loaded once the dot is issued (a load
        -- before wgmma's fence would hold the fence until it lands)
        table.insert(env.after_issue, function()
          local vals = values_at(o, kk + 1)
          table.move(vals, 1, #vals, #nxt + 1, nxt)
          if pf > 0 then ahead_prefetch(L, env, b, o, kk + pf, n) end
        end)
      end)
      X.lower_block(L, b, env)
      for _, load in ipairs(env.after_issue) do load() end -- (a loop whose dot did not run them)
      env.pending_loads, env.ahead, env.after_issue = nil, nil, nil
      local out = V.get(L, yield:operand(1), yield)
      if not V.is_frag(out) then
        R.fail(yield, "the pipelined loop must yield its dot's result or elementwise ops of it")
      end
      if #ahead == 0 then return vec_of(out) end
      nxt[1] = vec_of(out)
      return nxt
    end
    if slices > 1 and #ahead > 0 then R.fail(op, "a 128-row ping-pong consumer's loop with loads read ahead is not lowered yet") end
    local lb, ub = Loops.k_blocks(L, op, env)
    local function first()
      local acc = zero and (slices > 1 and V.slice_vecs(nil, slices, n) or tl.zeros(tl.f32, n)) or vec_of(init)
      if #ahead == 0 then return acc end
      local vals = { acc }
      for _, o in ipairs(invariant) do X.lower_op(L, o, env) end -- (what the loads' coordinates need)
      for _, o in ipairs(ahead) do
        local v = values_at(o, lb)
        table.move(v, 1, #v, #vals + 1, vals)
      end
      for d = 1, pf - 1 do
        for _, o in ipairs(ahead) do ahead_prefetch(L, env, b, o, lb + d, n) end
      end
      return vals
    end
    local plan = slices == 1 and lag_plan(b, ahead, n)
    if not plan and Staged.loop(L, b) then -- (staged.lua's plan checks lag_plan too)
      R.fail(op, "staged loads in a loop whose promotion does not lag a block")
    end
    local acc
    -- ksplit (env.ks): every other k block of the program (kernels/gemm.lua's
    -- ksplit pieces), consumer 1's sums handed to consumer 0, which alone goes on
    if ks then
      if plan or #ahead > 0 then R.fail(op, "a ksplit consumer's loop with loads read ahead or a promotion is not lowered yet") end
      acc = G.ksplit_mainloop(tl, L.pipe, st, ks.g, ks.q, ub - lb, first(), function(a, s, kb) return step(lb + kb, a, s) end, releaser(L))
      acc = G.ksplit_sum(tl, L.ks, ks.g, ks.turn, acc, n, t)
      if acc then L.vmap[op:result(1):id()] = V.frag(tl.f32, n, function(i) return tl.extract(acc, i) end) end
      return
    end
    -- ping-pong (env.pp): this consumer's mainloop turn, the other's once
    -- every wgmma is issued, then the epilogue's turn (the tiles' order)
    local pp = env.pp
    if pp then pp.own:wait(pp.turn) end
    local issued = pp and function() pp.other:arrive(pp.turn) end
    if plan and Consumer.lag == 0 and not pp then
      acc = unlagged_loop(L, env, st, b, ahead, invariant, plan, n, lb, ub, zero and tl.zeros(tl.f32, n) or vec_of(init), pf)
    elseif plan then
      acc = lagged_loop(L, env, st, b, ahead, invariant, plan, n, lb, ub, zero and tl.zeros(tl.f32, n) or vec_of(init), pf,
                        pp and { issued = issued, state = pp.turn })
    else
      acc = G.mainloop(tl, L.pipe, st, lb, ub, first, function(a, s, kk) return step(kk, a, s) end, releaser(L), issued)
      if #ahead > 0 then acc = acc[1] end
    end
    if pp then pp.own:wait(pp.turn) end
    if env.work and S then
      acc, env.final = G.fixup(tl, S.c, { ws = L.args[L.P.lowered_workspace] }, env.work, acc,
                               env.work:m(), env.work:n(), wg, t)
    end
    L.vmap[op:result(1):id()] = slices > 1 and V.slices_frag(acc, n)
                                or V.frag(tl.f32, n, function(i) return tl.extract(acc, i) end)
  end
end

-- }===

-- The consumer agent ag in the lowered kernel (or `count` replicas from warp
-- `first`, ag's code).
local function build(L, ag, count, first)
  local env = { agent = ag }
  local k = L.k
  local name = (#L.consumers == 1 or count > 1) and "consumer" or ("consumer" .. ag.index)
  local place = { first = first or ag.first, warps = 4 * count }
  k:agent(name, { warps = 4 * count, warp_id = Loops.warp_id(L, place, 4 * count) }, function(ta)
    tl.setmaxnreg(L.regs.consumer, "inc")
    k:async_exec("consumer", { first_warp = place.first, warps = 4 * count }, function()
      if count > 1 then env.replica = ta.warp_id() // 4 end -- this warpgroup's replica
      local wg = env.replica or ag.index
      local t = ta.thread_id() % 128
      local f = tl.wgmma_fragment(t)
      if ag.pair_rows and ag.pair_rows > 64 then -- (a ping-pong consumer's 128 rows: element i of slice i // n)
        env.slices = ag.pair_rows // 64
        local base, n = f, ag.pair_cols // 2
        f = { row = base.row, col = base.col, offset = function(i)
          local dr, dc = base.offset(i % n)
          return dr + 64 * (i // n), dc
        end }
      end
      env.f, env.thread, env.wg = f, t, wg
      Sums.fill(L, wg, t) -- (the boxes of ones of the rings whose dots sum rows, sums.lua)
      -- a cursor a pipeline (one for a GEMM); the turns at the dots, where
      -- the loop takes them (tileas.turns: L.go, a seq_bar a warpgroup)
      local cur, cursors = {}, {}
      for i, g in ipairs(L.groups) do
        cur[g] = g.pipe:consumer_start()
        cursors[i] = cur[g]
      end
      local ctx = { go = L.go, wg = tl.cast(wg, tl.i32) }
      if ag.pingpong then -- (loops.lua's Loops.persistent passes the turns on)
        local g = ag.pingpong
        env.pp = { g = g, own = L.pp[g + 1], other = L.pp[2 - g], loop = ag.pair_loop, st = cursors[1] }
        env.pp.turn = L.pp[g + 1]:state { phase = g == 0 and 1 or 0 } -- consumer 0 goes first
        cursors[#cursors + 1] = env.pp.turn
      end
      if ag.ksplit then -- (loops.lua's Loops.persistent lowers only consumer 1's loop)
        local g = ag.ksplit
        if g == 1 then cursors[1]:advance(1) end -- (consumer g takes the ring's places of g's parity)
        env.ks = { g = g, loop = ag.pair_loop, q = { value = tl.const(0, tl.i32) }, turn = L.G.ksplit_turn(L.ks, g) }
        cursors[#cursors + 1] = env.ks.q
        cursors[#cursors + 1] = env.ks.turn
      end
      if L.go then
        ctx.turn = A.turn_state(tl, L.go, ctx.wg)
        cursors[#cursors + 1] = ctx.turn
      end
      local st = L.pipe and cursors[1]
      env.group_cursors = cur
      env.program_id = Loops.program_id(L)
      env.persistent = Loops.persistent(L, env, cursors, "consumer")
      env.copy = function(op) R.fail(op, "a copy in a consumer agent is not lowered yet") end
      env.dot = dot(L, env)
      local gemm_loop = L.pipe and pipelined_for(L, env, st, wg, t)
      env.pipelined_for = function(op)
        -- (env.turn_if: the split tail's turns only in whole programs' tiles, split_tail.lua)
        if Chain.scheduled(op) then
          return Chain.lower(L, env, op, cur, env.turn_if and { go = ctx.go, wg = ctx.wg, turn = ctx.turn, turn_if = env.turn_if } or ctx)
        end
        if not gemm_loop then R.fail(op, "a pipelined loop of several pipelines whose dots are not scheduled ahead is not lowered yet") end
        return gemm_loop(op)
      end
      env.tiled_load = Epilogue.tiled_load(L, env, f)
      env.tiled_store = Epilogue.tiled_store(L, env, f, wg, t)
      X.lower_block(L, ag.op:region(1):entry(), env)
      -- the last stores must have read the staging buffer before the CTA leaves
      if env.tma_stored then tl.if_(t:eq(0), function() tl.bulk_wait(0, { read = true }) end) end
    end)
  end)
end

-- Replicas (tileas.replica, tileas-materialize-agents): one code on all their
-- warpgroups (stdlib/gemm.lua's cooperative consumers), the replica index the
-- warpgroup's. The code is the last replica's: the passes may fold the others'
-- (an index of 0 added goes), not its marked index. Replicas were copies that
-- differed in their index only, and every pass since kept what each computes,
-- so the last one's code with another index is that replica. -> the template, or nil
local function replicas_of(list)
  local n = #list
  if n < 2 then return nil end
  for i, ag in ipairs(list) do
    local rep = ag.op:attr "tileas.replica"
    if not rep or rep[1] ~= i - 1 or rep[2] ~= n or ag.first ~= list[1].first + 4 * (i - 1) then return nil end
  end
  return list[n]
end

-- The consumer agents of the plan in the lowered kernel.
function Consumer.build(L)
  local template = replicas_of(L.consumers)
  if template then build(L, template, #L.consumers, L.consumers[1].first)
  else for _, c in ipairs(L.consumers) do build(L, c, 1) end end
end

return Consumer
