-- tilua.passes.convert_tileas_to_cutlass.rowring: the row ring of a program
-- without a dot (compute.lua) that loads one row of a matrix a program, at
-- the program's index, and stores a row (a normalization, a softmax). Loaded
-- by the threads, a row waits for its registers: a CTA loads, reduces, stores
-- in lockstep and holds about 0.8 of a copy's bandwidth. With the ring the
-- kernel is persistent (PER_SM CTAs an SM, each looping over the programs
-- q = block, block + grid, ...) and thread 0 copies the rows of its next
-- programs into a ring of shared stages ahead (cp.async.bulk, completing on
-- the stage's mbarrier with its bytes): while the threads reduce and store
-- one row, the next `stages` rows are in flight (about IN_FLIGHT bytes an SM).
--
--   the ring, per such load     `stages` rows in shared memory and an mbarrier a stage
--   before the loop             thread 0 inits the barriers, fills stage j with the
--                               row of program block + j * grid
--   iteration i (program q)     every thread waits for stage i mod stages (parity of the
--                               lap), reads its registers of the row from it (vector
--                               loads of shared memory), a barrier (the stage is read),
--                               thread 0 refills it with the row of program q + stages * grid
--
-- That is the shared ring (tl.options.row_ring = {registers = 0}). The
-- register loop (registers = d, 1; the default but for the rule in Ring.plan:
-- one row reduced, at most one other tile or others all hoisted -> the shared
-- ring, rows claimed)
-- has no ring: each thread loads its registers of
-- the row d programs ahead while it works on this one (loop_registers), 0.88
-- of a copy's bandwidth against the ring's 0.80-0.84 (its one issuing thread,
-- its barrier before a refill, the shared round trip).
--
-- A row's bulk copy moves its first min(N, n) elements rounded down to 16
-- bytes, where the tensor's pointer and row stride are 16-byte aligned and the
-- row exists (else none: an arrive alone); what it does not cover (a ragged
-- tail, an unaligned tensor, padding) each thread loads as blocked.lua does.
-- The barrier each iteration also orders the reductions' shared buffers from
-- one program to the next (blocked.lua adds none inside the program loop).
--
-- With claims = K (tl.options.row_ring = {claims = K}, K = 1, 2 or 4) the
-- register loop takes its rows by runtime claims on a counter, K rows a
-- claim, instead of by stride (loop_claims); with registers = 2 (K = 1) it
-- keeps two rows ahead in registers. The shared ring with claims = 1
-- ({registers = 0, claims = 1}) refills each stage it has read with a row
-- claimed an iteration before (a slot a stage holds its program; Ring.build).
--
-- The third form (async = S, tl.options.row_ring = {async = S}): a ring of S
-- rows in shared memory that each thread fills itself with cp.async (16 bytes
-- at a time, its own chunks: those it reads into registers), one cp.async group
-- a row; iteration i issues the row S - 1 programs ahead into the stage read
-- in iteration i - 1, then waits for its own chunks of row i
-- (cp.async.wait_group S - 1). No mbarrier, no issuing thread, no barrier for
-- the ring (a thread reads only what it copied), no registers carried: S - 1
-- rows in flight a CTA while it reduces and stores one (loop_async).

local tl = require "tilua"
local R = require "tilua.passes.convert_tileas_to_cutlass.read"
local V = require "tilua.passes.convert_tileas_to_cutlass.values"
local X = require "tilua.passes.convert_tileas_to_cutlass.ops"
local B = require "tilua.passes.convert_tileas_to_cutlass.blocked"

local Ring = {}

local PER_SM = 2 -- CTAs an SM (at least: the kernel's min_ctas where larger)
local IN_FLIGHT = 128 * 1024 -- bytes of rows an SM aims to have in flight
local MAX_STAGES = 8
local MAX_SM_RING_BYTES = 192 * 1024 -- the rings of an SM's per_sm CTAs at most (an SM has 227 KiB of shared memory)
local SHARED_IN_FLIGHT = 96 * 1024 -- the default shared ring's (3 rows of 8192 bf16 a CTA at 2 CTAs an SM)
-- ... where the rule takes it for hoisted other tiles (LayerNorm's W and B): 2
-- rows of 8192 bf16 a CTA (s17-2 on the H200: 0.960-0.967 of cuMemcpyDtoD
-- against 3 stages' 0.949-0.962 and 4 stages' 0.943-0.945 in 3 rounds; s16norm-1's
-- ring of 2 level with 3 or above in 2 of 2 before the mask branch)
local SHARED_IN_FLIGHT_HOISTED = 64 * 1024
-- tl.options.row_ring's keys that choose the form (the default's rule: none given)
local FORM_KEYS = { "registers", "async", "bulk", "claims", "stream", "late", "store", "whole" }
local MIN_ROW_BYTES = 1024 -- shorter rows: the threads' own loads (the copy's overhead)

-- Where the shared ring refills the stage it read (row_ring.refill): 0 = right
-- after the stage's reads, behind a barrier of its own (every thread has read
-- it); 1 = after the body's first barrier at its top level (a reduce's: every
-- thread read the stage before it), one barrier a row fewer; the end of the
-- body adds a barrier where it had fewer than two (the reduces' buffers of one
-- row are read before the next row writes them: docs/tileprog.md). The rule
-- (none given): 1 where the body has two reduces or more at its top level, no
-- op with a region (so no barrier a branch away) and loads no tile but its row:
-- softmax's (s17-1 on the H200: 0.962-0.969 of cuMemcpyDtoD against
-- 0.957-0.965 in 4 rounds), not LayerNorm's (with W and B hoisted it lost
-- 0.6-1.9 % in each of 4 rounds: 0.942-0.949 against 0.952-0.965).
-- (Ring.forced_refill: the pass's option refill while it runs.)
local function refill_rule(after, opts)
  local forced = Ring.forced_refill or opts.refill -- (the pass's option refill over tl.options')
  if forced ~= nil then return forced == 1 end
  local reduces, loads = 0, 0
  for _, o in ipairs(after:ops()) do
    if o:nregions() > 0 then return false end
    if o:name() == "tileas.reduce" then reduces = reduces + 1 end
    if o:name() == "tileas.tiled_load" then loads = loads + 1 end
  end
  return reduces >= 2 and loads == 1
end

-- The ring's plan for the persistent loop `wop` of a compute agent, or nil
-- (the program stays one CTA a program): its loads of the program's row
-- ({op, e, n, elem, eb}), stages, per_sm.
-- (Ring.forced: the pass's option row_ring while it runs, over tl.options.)
-- The pass's option row_ring 1..4 as the choices of tl.options.row_ring it
-- stands for (the options' other entries, per_sm, in_flight, hoist, still count).
local FORCED = { { registers = 0, async = 0, claims = 0 }, { registers = 1, async = 0, claims = 0 },
                 { async = 3, claims = 0 }, { registers = 1, async = 0, claims = 1 },
                 { registers = 2, async = 0, claims = 1 }, { registers = 1, async = 0, claims = 1, late = 1 },
                 { bulk = 3, registers = 0, async = 0, claims = 0 }, { bulk = 3, registers = 0, async = 0, claims = 1 },
                 { registers = 0, async = 0, claims = 1 } }

-- The hints of the register loop's loads of the rows ahead (row_ring.stream):
-- 1 = ld.global.L1::no_allocate, 2 = ld.global.cs (evict first in L1 and L2).
local HINTS = { [1] = { evict = "no_allocate" }, [2] = { cache = "cs" } }
-- The hints of its stores (row_ring.store): 1 = st.global.cs (evict first in
-- L2: the rows written are not read again), 2 = st.global.cg (L2 only).
local STORE_HINTS = { [1] = { cache = "cs" }, [2] = { cache = "cg" } }

function Ring.plan(L, wop)
  local forced = Ring.forced
  if forced == 0 or (forced == nil and tl.options.row_ring == false) then return nil end
  local opts = type(tl.options.row_ring) == "table" and tl.options.row_ring or {}
  local choices = FORCED[forced] or opts
  local function choice(key, default) -- (0: off -> nil)
    local v = choices[key] or default
    return v > 0 and v or nil
  end
  local async = choice("async", 0)
  local bulk = not async and choice("bulk", 0)
  if bulk then async = nil end
  local after = wop:region(2):entry()
  local pid = after:arg(1):id()
  local loads, bytes, other_ids = {}, 0, false
  R.each_op(wop, function(o) other_ids = other_ids or o:name() == "tileas.get_program_id" end)
  if other_ids or not L.P.lowered_programs[1] then return nil end
  for _, o in ipairs(after:ops()) do
    if o:name() == "tileas.tiled_load" and o:noperands() == 3 then
      local ti = R.tile_of(o:result(1))
      local e = L.P.by_arg[o:operand(1):id()]
      if ti and #ti.shape == 2 and ti.shape[1] == 1 and B.is_blocked(ti) and e and e.rank == 2 and e.lowered_ptr
        and o:operand(2):id() == pid and R.const_int(o:operand(3)) == 0 and (o:attr "vec" or 1) > 1 then
        local eb = R.elem_bytes(ti.elem)
        local n = ti.shape[2]
        local l = ti.layout
        local one = not async or ((l.lanes or {})[1] or 1) * ((l.warps or {})[1] or 1) == 1 -- (a thread a chunk)
        if n * eb % 16 == 0 and n * eb >= MIN_ROW_BYTES and one then
          loads[#loads + 1] = { op = o, e = e, n = n, elem = ti.elem, eb = eb }
          bytes = bytes + n * eb
        end
      end
    end
  end
  -- a program that only reduces its row (stores a value a row) reads at the
  -- copy's bandwidth one CTA a program already (0.98-1.00 of cuMemcpyDtoD's
  -- rate) and a little below on the ring (0.955-0.973): the ring is for
  -- programs that also store a row
  local stores_row = false
  for _, o in ipairs(after:ops()) do
    local ti = o:name() == "tileas.tiled_store" and R.tile_of(o:operand(o:noperands()))
    stores_row = stores_row or (ti and #ti.shape == 2 and ti.shape[1] == 1 and ti.shape[2] * R.elem_bytes(ti.elem) >= MIN_ROW_BYTES)
  end
  if #loads == 0 or not stores_row then return nil end
  -- The default form (none chosen: Ring.forced nil, tl.options.row_ring
  -- without a key of the form): the shared ring with its rows claimed, 3
  -- stages of a row of 8192 bf16 (SHARED_IN_FLIGHT), for a program that loads
  -- one row, reduces it and loads at most one other tile (RMSNorm's W; a
  -- softmax): s15norm-1 on the H200, RMSNorm 0.963-0.964 of cuMemcpyDtoD
  -- against the register loop's 0.951, softmax 0.953-0.960 against
  -- 0.948-0.955, in both rounds; or (s16norm) more than one other tile, all
  -- hoisted (below: LayerNorm's W and B; s16norm-1, that form with its mask
  -- one branch a thread, blocked.lua's select_below, 0.955-0.958 against the
  -- register loop's 0.930-0.939; since s17 in 2 stages,
  -- SHARED_IN_FLIGHT_HOISTED). Else the rows in registers (0.88 of a copy
  -- against the shared ring's 0.80-0.84 by stride; LayerNorm in one pass; a
  -- row copy, no reduction: 0.952 against 0.960), claimed at run time one a
  -- claim (the register loop of one row ahead only; 0.92-0.94 of a copy
  -- against 0.86-0.88 by stride, docs/PERF.md).
  local per_sm = opts.per_sm or math.max(PER_SM, L.kop:kernel_spec().min_ctas or 0)
  local shared_default, hoisted_others = false, false
  if not forced and not async and not bulk then
    local form = false
    for _, k in ipairs(FORM_KEYS) do form = form or opts[k] ~= nil end
    if not form and #loads == 1 then
      local reduces, others = false, {}
      for _, o in ipairs(after:ops()) do
        reduces = reduces or o:name() == "tileas.reduce"
        if o:name() == "tileas.tiled_load" and o:id() ~= loads[1].op:id() then others[#others + 1] = o end
      end
      shared_default = reduces and #others <= 1
      -- (s16norm) or more than one other tile, every one of them hoisted
      -- before the loop under a quarter of a thread's registers in all (each
      -- at most an eighth; LayerNorm's W and B at 8192 bf16 on 8 warps, 16 +
      -- 16 of 128 at 2 CTAs an SM); then read in one branch a row (whole)
      if reduces and #others > 1 and (opts.hoist == nil or opts.hoist == 1) then
        local inv = Ring.invariant(L, { per_sm = per_sm, hoist_quarter = true }, wop, after)
        hoisted_others = true
        for _, o in ipairs(others) do hoisted_others = hoisted_others and inv[o:result(1):id()] == true end
        shared_default = hoisted_others
      end
    end
  end
  local registers = not async and not bulk and (shared_default and 0 or choice("registers", 1))
  registers = registers and registers > 0 and registers or nil
  local claims = registers and choice("claims", 1) or nil
  if registers and registers > 1 and claims ~= 1 then claims = nil end -- (d rows ahead: claims of one row only)
  local by_op = {}
  for _, r in ipairs(loads) do by_op[r.op:result(1):id()] = r end
  if shared_default then
    -- (rows too long for 2 stages an SM's CTAs: the register loop)
    local in_flight = opts.in_flight or (hoisted_others and SHARED_IN_FLIGHT_HOISTED or SHARED_IN_FLIGHT)
    local stages = math.min(MAX_STAGES, MAX_SM_RING_BYTES // (per_sm * bytes), math.max(2, in_flight // (per_sm * bytes)))
    if stages >= 2 then
      return { loads = loads, by_op = by_op, stages = stages, per_sm = per_sm, hoist = opts.hoist ~= 0, hoist_all = opts.hoist == 1,
               hoist_quarter = hoisted_others or nil, whole = hoisted_others or nil, claims = 1, late_refill = refill_rule(after, opts) }
    end
    registers, claims = 1, 1
  end
  if registers then
    -- the next `registers` rows in registers: a thread's share of them at
    -- most a quarter of its registers at per_sm CTAs an SM (else it would spill)
    local threads = 32 * L.warps
    local words = (bytes // threads + 3) // 4 * registers
    if words > math.min(tl.core.limits().max_thread_regs, 65536 // (per_sm * threads)) // 4 then return nil end
    return { loads = loads, by_op = by_op, registers = registers, per_sm = per_sm, hoist = opts.hoist ~= 0,
             hoist_all = opts.hoist == 1, hoist_eighth = opts.hoist == 2, claims = claims, hints = HINTS[opts.stream or 0], late = (choices.late or 0) > 0,
             store_hints = STORE_HINTS[opts.store or 0], whole = (opts.whole or 0) > 0 }
  end
  if async then
    -- S rows a CTA in shared memory (at most MAX_SM_RING_BYTES an SM)
    local stages = math.min(async, MAX_STAGES, MAX_SM_RING_BYTES // (per_sm * bytes))
    if stages < 2 then return nil end
    return { loads = loads, by_op = by_op, async = stages, per_sm = per_sm, hoist = opts.hoist ~= 0, hoist_all = opts.hoist == 1 }
  end
  local stages = math.min(MAX_STAGES, MAX_SM_RING_BYTES // (per_sm * bytes), math.max(2, (opts.in_flight or IN_FLIGHT) // (per_sm * bytes)))
  local out
  if bulk then
    -- the row stored by a bulk copy from the stage its row came in: one load,
    -- one store of a row as long at (program, 0), not a reduce-add
    stages = math.min(bulk, MAX_STAGES, MAX_SM_RING_BYTES // (per_sm * bytes))
    for _, o in ipairs(after:ops()) do
      local ti = o:name() == "tileas.tiled_store" and o:noperands() == 4 and R.tile_of(o:operand(4))
      local e = ti and L.P.by_arg[o:operand(1):id()]
      if ti and e and e.rank == 2 and e.lowered_ptr and #ti.shape == 2 and ti.shape[1] == 1 and B.is_blocked(ti)
        and ti.shape[2] == loads[1].n and R.elem_bytes(ti.elem) == loads[1].eb and o:operand(2):id() == pid
        and R.const_int(o:operand(3)) == 0 and not o:attr "reduce" then
        if out then return nil end -- (two rows stored)
        -- (own: the stored tile is distributed as the loaded one, an element a
        -- thread: each thread writes into the stage only what it read itself)
        local l = ti.layout
        local own = tostring(o:operand(4):type()) == tostring(loads[1].op:result(1):type())
          and ((l.lanes or {})[1] or 1) * ((l.warps or {})[1] or 1) == 1
        out = { op = o, e = e, n = ti.shape[2], eb = loads[1].eb, own = own }
      end
    end
    if #loads ~= 1 or not out then return nil end
  end
  -- (the shared rings, bulk stores or not: rows claimed at run time where
  -- claims is given, one row a claim; by stride otherwise)
  local ring_claims = (choices.claims or 0) > 0 and 1 or nil
  if stages < 2 then return nil end -- (rows too long for two stages in every CTA of an SM)
  return { loads = loads, by_op = by_op, stages = stages, per_sm = per_sm, hoist = opts.hoist ~= 0, hoist_all = opts.hoist == 1,
           out = out, claims = ring_claims, whole = (opts.whole or 0) > 0, late_refill = not out and refill_rule(after, opts) }
end

-- The bytes of program q's row that ring r's copy moves (an i32; 0: none), a
-- multiple of `granule` bytes (16 by default: a power of two).
local function row_bytes(L, r, q, granule)
  local e = r.e
  granule = granule or 16
  local ok = q:lt(L.args[e.lowered_dims[1]]) & B.aligned(L, e, 16 // r.eb)
  local elems = tl.min(L.args[e.lowered_dims[2]], tl.const(r.n, tl.i32))
  return tl.select(ok, (elems * r.eb) & tl.const(-granule, tl.i32), tl.const(0, tl.i32))
end

-- Thread 0: stage s of ring r gets program q's row (where q is a program).
-- With the rows claimed (P.slots: the program each stage holds), thread 0
-- writes q into the stage's slot first and arrives where q is no program (the
-- loop reads the slot after the stage's wait: q >= programs ends it).
local function fill(L, P, r, s, q)
  local function copy()
    local bytes = row_bytes(L, r, q)
    local bar = r.bars + s
    tl.if_(bytes:gt(0), function()
      local e = r.e
      local src = L.args[e.lowered_ptr] + q:cast(tl.i64) * L.args[e.lowered_strides[1]]
      tl.mbarrier_arrive_expect_tx(bar, bytes)
      tl.bulk_copy(r.smem + s * r.n, src, bytes, bar)
    end, function() tl.mbarrier_arrive(bar) end)
  end
  if not P.slots then return tl.if_(L.tid:eq(0) & q:lt(P.total), copy) end
  tl.if_(L.tid:eq(0), function()
    (P.slots + s):store(q)
    tl.if_(q:lt(P.total), copy, function() tl.mbarrier_arrive(r.bars + s) end)
  end)
end

-- env.tiled_load of a ring's load in iteration (q, s, phase): wait for the
-- stage, the registers from it, a barrier, the stage refilled.
local function ring_load(L, P, r, it)
  -- (claims: the first load's stage waited for in the loop's condition)
  if not (P.slots and r == P.loads[1]) then tl.mbarrier_wait(r.bars + it.s, it.phase) end
  local bytes = row_bytes(L, r, it.q)
  -- (P.whole: the stage's reads in one branch, row_ring.whole; the stores as without)
  L.whole_row = P.whole
  local x = B.tiled_load(L, r.op, { base = r.smem + it.s * r.n, elems = bytes // r.eb })
  L.whole_row = nil
  if P.out then
    -- (bulk stores: the stage refilled once stored, bulk_store; a barrier
    -- before the threads write the row back into it unless each writes only
    -- what it read)
    if not P.out.own then tl.barrier() end
    return x
  end
  if P.late_refill then
    -- (refilled at the body's next barrier: Ring.barrier)
    local pending = L.ring_refills
    pending[#pending + 1] = function() fill(L, P, r, it.s, it.next) end
    return x
  end
  tl.barrier()
  fill(L, P, r, it.s, it.next)
  return x
end

-- blocked.lua's hook after a barrier it put in the shared ring's body (L.on_barrier
-- while P.late_refill): one at the body's top level (op: the op lowered there)
-- counts, and refills the stages read before it.
local function at_barrier(L, op)
  if op:id() ~= L.ring_top then return end
  L.ring_barriers = L.ring_barriers + 1
  local pending = L.ring_refills
  L.ring_refills = {}
  for _, f in ipairs(pending) do f() end
end

-- The end of a body with late refills: the stages still to refill behind a
-- barrier; a barrier where the body had one only (its buffer is written again
-- by the next row before that row's first barrier).
local function end_refills(L)
  if #L.ring_refills > 0 then
    tl.barrier()
    L.ring_barriers = L.ring_barriers + 1
    for _, f in ipairs(L.ring_refills) do f() end
  elseif L.ring_barriers < 2 then
    tl.barrier()
  end
end

-- env.tiled_store of the row stored by a bulk copy (P.out) in iteration
-- (q, s, first): every thread writes its registers of the row into the stage
-- the row came in (its reads are behind ring_load's barrier), as far as the
-- copy covers it (the rest, a ragged tail or an unaligned tensor, to the
-- tensor as blocked.lua does); a proxy fence and a barrier; thread 0 copies
-- the stage to the row of Y (one bulk group a row), waits until the previous
-- row's copy has read its stage and refills that stage with the row S
-- programs after the previous one.
local function bulk_store(L, P, op, it)
  local r, o = P.loads[1], P.out
  local x = V.get(L, op:operand(4), op)
  local granule = math.max(16, B.width(x.D, op) * o.eb) -- (a thread's vector: wholly in the copy or not at all)
  local bytes = row_bytes(L, o, it.q, granule)
  local base = r.smem + it.s * r.n
  B.tiled_store(L, op, x, { base = base, elems = bytes // o.eb })
  tl.fence_proxy_async("shared") -- (the writes seen by the bulk copy's async proxy)
  tl.barrier()
  tl.if_(L.tid:eq(0), function()
    tl.if_(bytes:gt(0), function()
      local dst = L.args[o.e.lowered_ptr] + it.q:cast(tl.i64) * L.args[o.e.lowered_strides[1]]
      tl.bulk_copy(dst, base, bytes)
    end)
    tl.bulk_commit()
    tl.bulk_wait(1, { read = true }) -- (the previous row's copy has read its stage)
  end)
  local S = P.stages
  tl.if_(it.refill, function()
    fill(L, P, r, tl.select(it.s:eq(0), tl.const(S - 1, tl.i32), it.s - 1), it.next)
  end)
end

-- The ops of the loop's body that do not depend on the program (a
-- normalization's W and B): tiled_loads at constant coordinates of a tensor
-- the program never stores, and the constants. Lowered once before the loop,
-- they are loaded once a CTA instead of once a row, kept in registers (words
-- of two 16-bit elements) for the whole loop: so only those that fit. Each
-- such tile at most an eighth of a thread's registers at per_sm CTAs an SM
-- (RMSNorm's W at 8192 bf16 on 8 warps, 16 of 128; W at 3 CTAs an SM, 16 of
-- 85, spills: 0.61 of a copy against 0.82 loaded a row), all of them together
-- at most an eighth on the shared rings, and on the register loop (P.registers
-- = d) at most half the registers less the rows it holds (this one and the d
-- ahead), an eighth at least: LayerNorm's W and B at 8192 bf16 on 8 warps,
-- 32 of 128 at 2 CTAs an SM (0.91 of a copy against 0.86-0.87 with B loaded a
-- row after the reductions, s11norm-1), W alone two rows ahead or at 3 CTAs an
-- SM (W and B hoisted at 3 CTAs an SM spilled: 0.42 of a copy). A program with
-- one such tile (RMSNorm) hoists what it did under an eighth in all, which
-- P.hoist_eighth (row_ring.hoist = 2) keeps for every program; with
-- P.hoist_quarter (the default's rule for several such tiles on the shared
-- ring, Ring.plan: LayerNorm's W and B) a quarter in all; -> a set of their
-- results' ids.
function Ring.invariant(L, P, wop, after)
  local stored, inv = {}, {}
  R.each_op(wop, function(o) if o:name() == "tileas.tiled_store" then stored[o:operand(1):id()] = true end end)
  local threads = 32 * L.warps
  local regs = math.min(tl.core.limits().max_thread_regs, 65536 // (P.per_sm * threads)) -- (registers a thread: 255 at most)
  local each = regs // 8
  local budget = P.hoist_quarter and regs // 4 or each
  if P.registers and not P.hoist_eighth then
    local row_words = 0
    for _, r in ipairs(P.loads) do row_words = row_words + ((r.n * r.eb + threads - 1) // threads + 3) // 4 * (P.registers + 1) end
    budget = math.max(each, regs // 2 - row_words)
  end
  for _, o in ipairs(after:ops()) do
    local ok = o:name() == "arith.constant"
    local ti = o:name() == "tileas.tiled_load" and R.tile_of(o:result(1))
    if ti and not stored[o:operand(1):id()] and B.is_blocked(ti) then
      ok = true
      for i = 2, o:noperands() do ok = ok and inv[o:operand(i):id()] == true end
      local elems = 1
      for _, x in ipairs(ti.shape) do elems = elems * x end
      local words = math.max(1, (elems + threads - 1) // threads * R.elem_bytes(ti.elem) // 4)
      ok = ok and (P.hoist_all or (words <= each and words <= budget))
      if ok then budget = budget - words end
    end
    if ok then inv[o:result(1):id()] = true end
  end
  return inv
end

-- The body of the loop for program q: its ops lowered but the skipped and
-- the hoisted ones, a ring's load (P.by_op) given by load(r).
local function lower_body(L, env, after, P, q, hoisted, load)
  L.vmap[after:arg(1):id()] = q
  local tiled_load = env.tiled_load
  env.tiled_load = function(op)
    local r = P.by_op[op:result(1):id()]
    if not r then return tiled_load(op) end
    L.vmap[op:result(1):id()] = load(r)
  end
  local late = P.late_refill and L.shared_ring
  if late then L.ring_refills, L.ring_barriers, L.on_barrier = {}, 0, at_barrier end
  for _, o in ipairs(after:ops()) do
    local skip = o:name() == "tileas.cancel_next_program_id" or o:name() == "scf.yield"
      or (o:nresults() == 1 and hoisted[o:result(1):id()])
    L.ring_top = o:id()
    if not skip then V.at_loc(o, X.lower_op, L, o, env) end
  end
  L.ring_top = nil
  if late then
    end_refills(L)
    L.ring_refills, L.ring_barriers, L.on_barrier = nil, nil, nil
  end
  env.tiled_load = tiled_load
end

-- The ring's loads of program q into registers (a flat list: each load's
-- registers after the previous load's), the constants of their coordinates
-- lowered first.
local function load_rows(L, env, after, P, q)
  L.vmap[after:arg(1):id()] = q
  local all = {}
  for _, r in ipairs(P.loads) do
    for i = 3, r.op:noperands() do
      local c = r.op:operand(i):def()
      if c and c:name() == "arith.constant" then V.at_loc(c, X.lower_op, L, c, env) end
    end
    L.load_hints, L.whole_row = P.hints, P.whole
    local _, raw = B.tiled_load(L, r.op)
    L.load_hints, L.whole_row = nil, nil
    r.nraw = #raw
    for _, v in ipairs(raw) do all[#all + 1] = v end
  end
  P.nraw = #all
  return all
end

-- The body for program q with the ring's loads given as registers (cur: the
-- flat list of load_rows).
local function body_given(L, env, after, P, q, hoisted, cur)
  local at = 0
  L.store_hints, L.whole_row = P.store_hints, P.whole
  lower_body(L, env, after, P, q, hoisted, function(r)
    local given = {}
    for i = 1, r.nraw do given[i] = cur[at + i] end
    at = at + r.nraw
    return (B.tiled_load(L, r.op, { given = given }))
  end)
  L.store_hints, L.whole_row = nil, nil
end

-- The loop without the shared ring (P.registers = d): each thread loads its
-- registers of the row of the CTA's program d ahead while it reduces and
-- stores this one's (the loop carries the next d rows' registers); a barrier
-- an iteration orders the reductions' shared buffers from one program to the next.
local function loop_registers(L, env, after, P, first, grid, hoisted)
  local carried = {}
  for j = 0, P.registers - 1 do table.move(load_rows(L, env, after, P, first + grid * j), 1, P.nraw, #carried + 1, carried) end
  tl.for_range(first, P.total, grid, carried, function(q, ...)
    local rows = { ... }
    local cur = { table.unpack(rows, 1, P.nraw) }
    local nxt = { table.unpack(rows, P.nraw + 1) }
    table.move(load_rows(L, env, after, P, q + grid * P.registers), 1, P.nraw, #nxt + 1, nxt)
    tl.barrier()
    body_given(L, env, after, P, q, hoisted, cur)
    return table.unpack(nxt)
  end)
end

-- The register loop with the rows claimed at run time (P.claims = K,
-- row_ring.claims = K): the same body, but a CTA's rows are not every
-- grid-th one. The rows come in chunks of K (1, 2 or 4; chunk j: rows jK ..
-- jK + K - 1) and a CTA keeps A = ceil(3 / K) chunks ahead: its first A chunks
-- are static (block, block + grid, ..., block + (A - 1) grid), each later one
-- it claims, an atomic add of 1 on a counter (the workspace's first word, c:
-- chunk A grid + c), so a CTA that runs ahead takes more rows and the kernel
-- no longer waits for the slowest CTA's fixed share. The CTA claims its chunk
-- m + A in the iteration of chunk m's first row, three rows or more ahead, so
-- that no thread waits for the atomic. Iteration i (row q in registers, the
-- next row q1 known; m0, m1 their chunks' places in the CTA's sequence):
--
--   thread 0 claims, where q starts a chunk (atomic add, its result not read yet)
--   every thread loads its registers of row q1
--   the loop's barrier
--   the row after q1: q1 + 1 inside its chunk, else the next chunk's first
--   row (a static one, or the claim of m1 + 1 - A read from its slot, written
--   at least one barrier before)
--   the body on row q's registers
--   thread 0, where it claimed: the chunk's first row into slot m0 mod 2
--   (two slots: the slot it overwrites was read before the last barrier)
--
-- With d = P.registers rows ahead (2: K = 1 only) the loop carries the rows
-- 0 .. d of the sequence, their places and the registers of rows 0 .. d - 1;
-- iteration i loads row d's registers and computes row d + 1 (A = d + 2
-- static chunks: the claim of place m, written in its iteration, is read in
-- place m + 1's at the earliest, after a barrier, and its slot rewritten in
-- place m + 2's, after every thread's read).
--
-- The loop ends at q >= programs. A CTA's chunks increase, so every claimed
-- chunk that has rows is run, and a CTA claims once in each chunk of its own
-- that has rows: a launch makes exactly ceil(programs / K) claims, and the one
-- that returns the last of them is the launch's last access to the counter:
-- its thread puts it back to 0 (an atomic exchange; as the dynamic
-- scheduler, loops.lua, no host memset).
local function loop_claims(L, env, after, P, first, grid, hoisted)
  L.tid = L.tid or tl.thread_id("x")
  local K, d = P.claims, P.registers
  -- (chunks ahead: the claim of place m is read where the row d ahead ends
  -- place m + A - 1, an iteration after the claim's at least)
  local A = d == 1 and (3 + K - 1) // K or d + 2
  local function i32(v) return tl.const(v, tl.i32) end
  local function starts(q) return (q & i32(K - 1)):eq(0) end -- (K > 1)
  local slots = L.k:shared(tl.i32, 2, { align = 8 })
  local counter = L.args[L.P.lowered_workspace]
  local last = (P.total + (K - 1)) // K - 1
  -- the first row of chunk place m + 1 (m1: q1's), after q1 (the last row of place m1)
  local function next_chunk(m1)
    local m = m1 + 1
    if A == 1 then return (slots + ((m - A) & i32(1))):load() end
    return tl.if_(m:lt(A), function() return (first + grid * m) * K end,
                  function() return (slots + ((m - A) & i32(1))):load() end)
  end
  -- the rows 0 .. d of the CTA's sequence (static chunks: d // K < A) and their places
  local qs, ms = {}, {}
  for i = 0, d do qs[#qs + 1] = i < K and first * K + i or (first + grid * (i // K)) * K + (i % K) end
  for i = 0, d do ms[#ms + 1] = i32(i // K) end
  local carried = {}
  table.move(qs, 1, d + 1, 1, carried)
  table.move(ms, 1, d + 1, d + 2, carried)
  for i = 0, d - 1 do table.move(load_rows(L, env, after, P, qs[i + 1]), 1, P.nraw, #carried + 1, carried) end
  local nq = 2 * (d + 1)
  local nrows = d * P.nraw
  -- (P.late: thread 0 writes a claim's row into its slot, and puts the counter
  -- back at the last claim, in the next iteration, before its barrier: the
  -- atomic's answer has a whole body's time; the loop carries the claim, its
  -- place and whether there was one)
  local late = P.late
  if late then table.move({ i32(0), i32(0), i32(0) }, 1, 3, nq + nrows + 1, carried) end
  local function publish(c, m)
    (slots + (m & i32(1))):store((c + grid * A) * K)
    tl.if_(c:eq(last), function() tl.atomic_exch(counter, i32(0)) end)
  end
  local final = table.pack(tl.while_(carried, function(q, ...) return q:lt(P.total), q, ... end, function(...)
    local all = { ... }
    local q, qd, m0, md = all[1], all[d + 1], all[d + 2], all[nq]
    local cur = { table.unpack(all, nq + 1, nq + P.nraw) }
    local claim = K == 1 and L.tid:eq(0) or L.tid:eq(0) & starts(q)
    local c = tl.if_(claim, function() return tl.atomic_add(counter, i32(1)) end, function() return i32(0) end)
    local nxt = load_rows(L, env, after, P, qd)
    if late then
      local pc, pm, pf = all[nq + nrows + 1], all[nq + nrows + 2], all[nq + nrows + 3]
      tl.if_(pf:ne(0), function() publish(pc, pm) end)
    end
    tl.barrier()
    local q2, m2
    if K == 1 then
      q2, m2 = next_chunk(md), md + 1
    else
      local ends = starts(qd + 1)
      q2 = tl.if_(ends, function() return next_chunk(md) end, function() return qd + 1 end)
      m2 = tl.select(ends, md + 1, md)
    end
    body_given(L, env, after, P, q, hoisted, cur)
    if not late then tl.if_(claim, function() publish(c, m0) end) end
    local out = {}
    for i = 2, d + 1 do out[#out + 1] = all[i] end
    out[#out + 1] = q2
    for i = d + 3, nq do out[#out + 1] = all[i] end
    out[#out + 1] = m2
    table.move(all, nq + P.nraw + 1, nq + nrows, #out + 1, out) -- (the rows 1 .. d - 1 ahead)
    table.move(nxt, 1, #nxt, #out + 1, out)
    if late then table.move({ c, m0, tl.select(claim, i32(1), i32(0)) }, 1, 3, #out + 1, out) end
    return table.unpack(out)
  end))
  -- (the CTA's last claim, unpublished: only the counter matters now)
  if late then
    local pc, pf = final[nq + nrows + 1], final[nq + nrows + 3]
    tl.if_(pf:ne(0) & pc:eq(last), function() tl.atomic_exch(counter, i32(0)) end)
  end
end

-- The ops of a loop body that touch no shared memory once lowered.
local REGISTERS_ONLY = { ["tileas.tiled_load"] = true, ["tileas.tiled_store"] = true, ["scf.yield"] = true,
                         ["scf.condition"] = true, ["tileas.cancel_next_program_id"] = true, ["tileas.broadcast"] = true,
                         ["tileas.expand_dim"] = true, ["tileas.is_valid_program_id"] = true }

-- The chunks of ring r's row that this thread reads into registers
-- (B.tiled_load's groups of vec registers along the row): {col (an i32),
-- limit (the tile's extent where positions past it are padding, or nil)},
-- and the bytes a group moves.
local function chunks(L, r)
  local ti = R.tile_of(r.op:result(1))
  ti.layout_str = tostring(r.op:result(1):type()):match "^tile<[^,]*, [^,]*, (.*)>$" -- (B.dist's key, as blocked.lua's info)
  local D = B.dist(L, ti, r.op)
  local vec = math.max(1, r.op:attr "vec" or 1)
  while vec > 1 and D.size[2] % vec ~= 0 do vec = vec // 2 end
  local out = {}
  for i = 1, D.n, vec do
    local o = D.off[i][2]
    local col = D.base[2] and (o == 0 and D.base[2] or D.base[2] + o) or tl.const(o, tl.i32)
    out[#out + 1] = { col = col, limit = D.limit[2] }
  end
  return out, vec
end

-- This thread's cp.async of its chunks of program q's row into stage s of
-- each ring (where the row's copy covers them: row_bytes), one group.
local function issue(L, P, q, s)
  for _, r in ipairs(P.loads) do
    local elems = tl.select(q:lt(P.total), row_bytes(L, r, q) // r.eb, tl.const(0, tl.i32)) -- (no copy in flight at the exit)
    local e = r.e
    local src = L.args[e.lowered_ptr] + q:cast(tl.i64) * L.args[e.lowered_strides[1]]
    local dst = r.smem + s * r.n
    local step = math.min(16, r.vec * r.eb) // r.eb -- (elements a copy: 16 bytes at most)
    for _, c in ipairs(r.chunks) do
      local ok = (c.col + r.vec):le(elems)
      if c.limit then ok = ok & c.col:lt(c.limit) end
      tl.if_(ok, function()
        for j = 0, r.vec - 1, step do
          local col = j == 0 and c.col or c.col + j
          tl.cp_async(dst + col, src + col, { size = step * r.eb, cache = step * r.eb == 16 and "cg" or "ca" })
        end
      end)
    end
  end
  tl.cp_async_commit()
end

-- The loop with the rows in a ring of P.async stages that each thread fills
-- with its own chunks (cp.async): S - 1 rows issued before the loop; in
-- iteration i (program q, stage s) the row S - 1 programs ahead into stage
-- s - 1 (read in iteration i - 1: its registers used), a barrier for the
-- reductions' buffers, the wait for this thread's chunks of row q, the body
-- with the ring's loads read from stage s (the rest, a ragged tail or an
-- unaligned tensor, loaded from global memory as blocked.lua does).
local function loop_async(L, env, after, P, first, grid, hoisted)
  local S = P.async
  -- (a body of loads, stores and arithmetic on registers only, a row copy or a
  -- map, shares no buffer from one program to the next: no barrier)
  local shares = false
  local function look(o)
    local n = o:name()
    shares = shares or not (n:match "^arith%." or REGISTERS_ONLY[n])
  end
  for _, o in ipairs(after:ops()) do look(o) R.each_op(o, look) end
  for _, r in ipairs(P.loads) do
    r.smem = L.k:shared(r.elem, S * r.n, { align = 128 })
    r.chunks, r.vec = chunks(L, r)
  end
  for j = 0, S - 2 do issue(L, P, first + grid * j, tl.const(j, tl.i32)) end
  tl.for_range(first, P.total, grid, { tl.const(0, tl.i32) }, function(q, s)
    issue(L, P, q + grid * (S - 1), tl.select(s:eq(0), tl.const(S - 1, tl.i32), s - 1))
    if shares then tl.barrier() end
    tl.cp_async_wait(S - 1)
    lower_body(L, env, after, P, q, hoisted, function(r)
      return (B.tiled_load(L, r.op, { base = r.smem + s * r.n, elems = row_bytes(L, r, q) // r.eb }))
    end)
    local s1 = s + 1
    return tl.select(s1:eq(S), tl.const(0, tl.i32), s1)
  end)
end

-- env.persistent with the ring: the loop over the CTA's programs.
function Ring.build(L, env, wop, P)
  L.program_loop, L.persistent, L.linear, L.per_sm = wop, true, nil, P.per_sm
  local function programs()
    local total = X.programs(L, 1)
    for d = 2, 3 do if L.P.lowered_programs[d] then total = total * X.programs(L, d) end end
    P.total = total
    return total
  end
  local after = wop:region(2):entry()
  local function hoist()
    local hoisted = P.hoist and Ring.invariant(L, P, wop, after) or {}
    for _, o in ipairs(after:ops()) do
      if o:nresults() == 1 and hoisted[o:result(1):id()] then V.at_loc(o, X.lower_op, L, o, env) end
    end
    return hoisted
  end
  if P.registers then
    programs()
    local loop = P.claims and loop_claims or loop_registers
    return loop(L, env, after, P, tl.block_id("x"), tl.grid_dim("x"), hoist())
  end
  if P.async then
    programs()
    return loop_async(L, env, after, P, tl.block_id("x"), tl.grid_dim("x"), hoist())
  end
  -- (the shared rings: a mask of the row as one branch a thread, blocked.lua's select_below)
  L.shared_ring = true
  local S = P.stages
  for _, r in ipairs(P.loads) do
    r.smem = L.k:shared(r.elem, S * r.n, { align = 128 })
    r.bars = L.k:shared(tl.i64, S, { align = 8 })
  end
  if P.claims then P.slots = L.k:shared(tl.i32, S, { align = 8 }) end
  L.tid = L.tid or tl.thread_id("x")
  tl.if_(L.tid:eq(0), function()
    for _, r in ipairs(P.loads) do
      for s = 0, S - 1 do tl.mbarrier_init(r.bars + s, 1) end
    end
    tl.fence_mbarrier_init()
  end)
  tl.barrier()
  local total = programs()
  local first, grid = tl.block_id("x"), tl.grid_dim("x")
  for j = 0, S - 1 do
    for _, r in ipairs(P.loads) do fill(L, P, r, tl.const(j, tl.i32), first + grid * j) end
  end
  local hoisted = hoist()
  local tiled_store = env.tiled_store
  local zero = tl.const(0, tl.i32)
  local function body(it)
    if P.out then
      env.tiled_store = function(op)
        if op:id() ~= P.out.op:id() then return tiled_store(op) end
        bulk_store(L, P, op, it)
      end
    end
    lower_body(L, env, after, P, it.q, hoisted, function(r) return ring_load(L, P, r, it) end)
    env.tiled_store = tiled_store
    local s1 = it.s + 1
    local wrap = s1:eq(S)
    return tl.select(wrap, zero, s1), tl.select(wrap, it.phase ~ 1, it.phase)
  end
  if P.slots and not P.out then
    -- (the shared ring, the rows claimed) every iteration refills the stage it
    -- read with a claim made one iteration before (thread 0: an atomic add on
    -- the counter, c: program S grid + c; the first before the loop), so that
    -- the atomic's answer has had a whole body's time when the refill reads it.
    -- A CTA claims once before the loop and once an iteration that runs a
    -- program: a launch makes programs + grid claims, and the thread whose
    -- claim returns the last puts the counter back to 0. The claim still
    -- unused at the exit holds no program: it was made after the claim (or
    -- the static row) of the stage that ended the loop, which held none.
    local counter = L.args[L.P.lowered_workspace]
    local one = tl.const(1, tl.i32)
    local last = total + grid - one
    local t0 = L.tid:eq(0)
    local c0 = tl.if_(t0, function() return tl.atomic_add(counter, one) end, function() return zero end)
    tl.while_({ zero, zero, c0 }, function(s, phase, pending)
      tl.mbarrier_wait(P.loads[1].bars + s, phase)
      local q = (P.slots + s):load()
      return q:lt(total), q, s, phase, pending
    end, function(q, s, phase, pending)
      local c = tl.if_(t0, function() return tl.atomic_add(counter, one) end, function() return zero end)
      local s1, phase1 = body { q = q, s = s, phase = phase, next = pending + grid * S }
      tl.if_(t0 & c:eq(last), function() tl.atomic_exch(counter, zero) end)
      return s1, phase1, c
    end)
    tl.if_(t0 & c0:eq(last), function() tl.atomic_exch(counter, zero) end)
  elseif P.slots then
    -- (bulk stores, the rows claimed) iteration n of the CTA (n >= 1) claims
    -- (thread 0: an atomic add on the counter, c: program S grid + c) and
    -- refills the previous stage with the claim once its row is stored: a
    -- claim a refill, so every claimed program is run. The loop ends at the
    -- first stage whose slot holds no program: the claims increase, so every
    -- later one would hold none either. A CTA that runs n programs makes n - 1
    -- claims: a launch makes programs - min(grid, programs) of them, and
    -- the thread whose claim returns the last puts the counter back to 0.
    local counter = L.args[L.P.lowered_workspace]
    local one = tl.const(1, tl.i32)
    local claims = total - tl.min(grid, total)
    tl.while_({ zero, zero, zero }, function(s, phase, n)
      tl.mbarrier_wait(P.loads[1].bars + s, phase)
      local q = (P.slots + s):load()
      return q:lt(total), q, s, phase, n
    end, function(q, s, phase, n)
      local refill = n:gt(0)
      local c = tl.if_(L.tid:eq(0) & refill, function() return tl.atomic_add(counter, one) end, function() return zero end)
      local s1, phase1 = body { q = q, s = s, phase = phase, refill = refill, next = c + grid * S }
      tl.if_(L.tid:eq(0) & refill & c:eq(claims - 1), function() tl.atomic_exch(counter, zero) end)
      return s1, phase1, n + one
    end)
  else
    tl.for_range(first, total, grid, { zero, zero }, function(q, s, phase)
      -- (bulk stores: the previous stage refilled, S - 1 grids ahead of q; else this one, S grids ahead)
      return body { q = q, s = s, phase = phase, refill = q:gt(first), next = q + grid * (P.out and S - 1 or S) }
    end)
  end
  if P.out then tl.if_(L.tid:eq(0), function() tl.bulk_wait(0) end) end -- (the rows' copies complete)
  L.shared_ring = nil
end

return Ring
