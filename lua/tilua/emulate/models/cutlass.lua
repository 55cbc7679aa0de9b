-- tilua.emulate.models.cutlass: the emulator's models of the cutlass dialect at
-- the authoring level: executors (async.exec, switch_by_executor), pipelines
-- and sequence barriers on the slots of the barrier pool, the named barriers
-- of cutlass.bar, block_striped moves of register fragments, and the generic
-- barriers of the StreamK fixup (counters in global memory). A model of
-- emulate/models/init.lua (emulate/machine.lua says what its handlers reach).

local interp = require "tilua.emulate.interp"
local lanes = require "tilua.emulate.lanes"
local address = require "tilua.emulate.address"
local clock = require "tilua.emulate.clock"
local report = require "tilua.emulate.report"
local sync = require "tilua.emulate.sync"
local tile = require "tilua.emulate.models.tile"

local uniform, at = lanes.uniform, lanes.at
local lowest_bit, popcount = lanes.lowest_bit, lanes.popcount
local violation, not_modelled = report.violation, report.not_modelled
local completes_on = sync.completes_on
local vc_join = clock.join
local SHARED_BASE, SLOT_BASE, DSMEM_BASE = address.SHARED_BASE, address.SLOT_BASE, address.DSMEM_BASE
local wrap = interp.wrap
local test_phase = tile.test_phase

local handlers, decoders = {}, {}
local C = { handlers = handlers, decoders = decoders, probes = {} }

decoders["cutlass.pipeline.create"] = function(rec, op)
  local params = op:result(1):type():info().params
  rec.stages, rec.np, rec.nc = params[1], params[2], params[3]
end
decoders["cutlass.seq_bar.create"] = function(rec, op) rec.depth = op:result(1):type():info().params[1] end

do
  handlers["cutlass.async.exec"] = function(R, W, rec, _, ctx)
    local m = rec.op:attr "executors"
    if (m >> W.w) & 1 == 0 then return {} end
    local sub = setmetatable({ exec = m, agent_first = lowest_bit(m) }, { __index = ctx })
    local old, oldl, oldg = W.role, W.label, W.grp
    local role = rec.op:attr "agent"
    if role and role ~= "" then
      W.role = role
      W.label = ("%s warp %d%s"):format(role, W.w, R.grid > 1 and (" (CTA %d)"):format(W.cta.id) or "")
    end
    W.grp = m
    R:exec_block(W, rec.regions[1][1], {}, sub)
    W.role, W.label, W.grp = old, oldl, oldg
    return {}
  end

  -- switch_by_executor: case i runs on the warps of masks[i], its block's
  -- arguments the i-th group of operands (operand_segments), as the lowering's
  -- scf.if per case
  handlers["cutlass.pipeline.switch_by_executor"] = function(R, W, rec, ins, ctx)
    local op = rec.op
    local masks, segs = op:attr "masks", op:attr "operand_segments"
    local first = 1
    for i, blk in ipairs(rec.regions[1]) do
      local m, n = masks[i], segs[i] or 0
      if (m >> W.w) & 1 == 1 then
        local sub = setmetatable({ exec = m, agent_first = lowest_bit(m) }, { __index = ctx })
        local old = W.grp
        W.grp = m
        R:exec_block(W, blk, { table.unpack(ins, first, first + n - 1) }, sub)
        W.grp = old
      end
      first = first + n
    end
    return {}
  end

  -- Pipelines: per CTA, per create op.
  local function pipe_of(R, W, x, rec)
    if type(x) ~= "table" or x.kind ~= "pipe" then error("emulate: " .. rec.name .. " at " .. rec.loc .. ": no pipeline handle", 0) end
    return x
  end

  local function stage_bar(p, index, empty) return SLOT_BASE + 8 * (p.base + 2 * index + empty) end

  -- The arrival of a producer / consumer participant group (arrive_per_group):
  -- the warps of each group that runs the op sync unless under an elect, then
  -- one lane of the lowest of them arrives. fn(n) makes the arrivals.
  local function per_group(R, W, rec, ctx, groups, sync, fn)
    local any = false
    for gi, gm in ipairs(groups) do
      local g = ctx.exec & gm
      if g ~= 0 and (g >> W.w) & 1 == 1 then
        any = true
        if sync and not ctx.narrow and popcount(g) > 1 then
          R:rendezvous(W, rec, ("group %d of op %d"):format(gi, rec.id), popcount(g),
            ("the sync of participant %d before %s at %s"):format(gi - 1, rec.name, rec.loc))
        end
        if ctx.narrow then
          fn(#ctx.mask)
        elseif W.w == lowest_bit(g) then
          fn(1)
        end
      elseif g ~= 0 then
        any = true
      end
    end
    if not any then
      error(("emulate: %s at %s runs on warps none of which is a participant of its side"):format(rec.name, rec.loc), 0)
    end
  end

  -- cutlass pipelines
  handlers["cutlass.pipeline.create"] = function(R, W, rec)
    local p = W.cta.pipes[rec.id]
    if not p then
      p = { kind = "pipe", stages = rec.stages, np = rec.np, nc = rec.nc, loc = rec.loc }
      W.cta.pipes[rec.id] = p
    end
    return { p }
  end
  -- After the last init of a run of inits (init_follows) the CTA synchronizes,
  -- or the cluster when a pipeline spans it (the lowering's init_slots).
  local function init_sync(R, W, rec, ins, ctx, what)
    if rec.init_follows then return end
    if R.k.cluster_pipes and (R.k.cluster or 1) > 1 then
      tile.handlers["tile.cluster_arrive"](R, W, rec, ins, ctx)
      tile.handlers["tile.cluster_wait"](R, W, rec, ins, ctx)
    else
      R:rendezvous(W, rec, "bar.sync 0", R.k.warps, what)
    end
  end
  handlers["cutlass.pipeline.init"] = function(R, W, rec, ins, ctx)
    local p = pipe_of(R, W, ins[1], rec)
    local op = rec.op
    -- the arrivals per phase as the verifier derives them (init:arrive_counts),
    -- or the init's own arrive_count (which the verifier holds to them)
    local full, empty = op:arrive_counts()
    local mode = op:attr "mode"
    local given = op:attr "arrive_count"
    if given and #given == 2 then full, empty = given[1], given[2] end
    p.mode, p.base = mode, op:attr_or_default "barrier_id_base"
    p.prod, p.cons = op:attr "participants", op:attr "consumers"
    p.tx = op:attr_or_default "transaction_bytes"
    p.counts = { full, empty }
    -- thread 0 inits the 2S slots, then the CTA synchronizes (the lowering's init_slots)
    if W.w == 0 and ctx.mask[1] == 0 then
      for s = 0, p.stages - 1 do
        R:init_barrier(W, stage_bar(p, s, 0), full, rec.loc, ("full[%d] of the pipeline at %s"):format(s, p.loc))
        R:init_barrier(W, stage_bar(p, s, 1), empty, rec.loc, ("empty[%d] of the pipeline at %s"):format(s, p.loc))
      end
    end
    init_sync(R, W, rec, ins, ctx, "the CTA barrier after cutlass.pipeline.init")
    return {}
  end
  handlers["cutlass.pipeline.state.create"] = function(_, _, rec, ins)
    local op = rec.op
    local p = ins[1]
    local i, ph, n = op:attr_or_default "index", op:attr_or_default "phase", op:attr_or_default "count"
    return { { index = i, phase = ph, count = n, ticket = i, stages = p.stages, role = op:attr "role" } }
  end
  handlers["cutlass.pipeline.state.increment"] = function(_, _, _, ins)
    local s = ins[1]
    local i, ph = s.index + 1, s.phase
    if i == s.stages then i, ph = 0, ph ~ 1 end
    return { { index = i, phase = ph, count = s.count + 1, ticket = s.ticket + 1, stages = s.stages, role = s.role } }
  end
  handlers["cutlass.pipeline.state.bump"] = function(_, _, _, ins)
    local s = ins[1]
    return { { index = s.index, phase = s.phase, count = s.count + 1, ticket = s.ticket, stages = s.stages, role = s.role } }
  end
  handlers["cutlass.pipeline.state.advance"] = function(_, _, rec, ins)
    local s, n = ins[1], uniform(rec, ins[2], "step count") & 0xffffffff
    local at = s.index + n
    return { { index = at % s.stages, phase = s.phase ~ ((at // s.stages) & 1), count = s.count + n, ticket = s.ticket + n,
               stages = s.stages, role = s.role } }
  end
  handlers["cutlass.pipeline.state.index"] = function(_, _, _, ins) return { ins[1].index } end
  handlers["cutlass.pipeline.state.phase"] = function(_, _, _, ins) return { ins[1].phase } end
  handlers["cutlass.pipeline.state.count"] = function(_, _, _, ins) return { ins[1].count } end
  handlers["cutlass.pipeline.producer_get_barrier"] = function(R, W, rec, ins)
    return { stage_bar(pipe_of(R, W, ins[1], rec), ins[2].index, 0) }
  end
  local function skipped(rec, ins)
    return ins[3] ~= nil and uniform(rec, ins[3], "token") ~= 0
  end
  handlers["cutlass.pipeline.producer_acquire"] = function(R, W, rec, ins)
    local p, s = pipe_of(R, W, ins[1], rec), ins[2]
    if skipped(rec, ins) then return {} end
    R:wait(W, rec, stage_bar(p, s.index, 1), s.phase ~ 1, s.ticket // p.stages,
      ("acquire of stage %d in round %d"):format(s.index, s.ticket // p.stages))
    return {}
  end
  handlers["cutlass.pipeline.consumer_wait"] = function(R, W, rec, ins)
    local p, s = pipe_of(R, W, ins[1], rec), ins[2]
    if skipped(rec, ins) then return {} end
    R:wait(W, rec, stage_bar(p, s.index, 0), s.phase, s.ticket // p.stages + 1,
      ("wait for stage %d in round %d"):format(s.index, s.ticket // p.stages))
    return {}
  end
  local function probe(empty)
    return function(R, W, rec, ins)
      local p, s = pipe_of(R, W, ins[1], rec), ins[2]
      return { test_phase(R, W, rec, stage_bar(p, s.index, empty), empty == 1 and s.phase ~ 1 or s.phase) }
    end
  end
  handlers["cutlass.pipeline.producer_try_acquire"] = probe(1)
  handlers["cutlass.pipeline.consumer_try_wait"] = probe(0)
  local function arrival(R, W, rec, addr, n, bytes, arrive)
    local b = R:bar(W, addr, rec)
    if arrive then
      R:arrive(b, n, W.actor, W.vc, rec, bytes)
    else
      b.tx = b.tx + bytes
    end
  end
  -- The producers' part on stage s's full barrier, once per participant group:
  -- a commit arrives (with `bytes` each when given), an expect_tx only adds bytes.
  local function producer_arrivals(R, W, rec, ctx, p, s, bytes, commit, what)
    per_group(R, W, rec, ctx, p.prod, commit, function(n)
      R:request(W, rec, function() return true end, function()
        arrival(R, W, rec, stage_bar(p, s.index, 0), n, bytes and bytes * n, commit)
        if commit then W.vc[W.actor] = W.vc[W.actor] + 1 end
      end, function() return what end, W.cta.id .. ":" .. stage_bar(p, s.index, 0), "am",
      function() return commit and completes_on(W.cta.bars[stage_bar(p, s.index, 0)], n) end)
    end)
    return {}
  end
  handlers["cutlass.pipeline.producer_commit"] = function(R, W, rec, ins, ctx)
    local p = pipe_of(R, W, ins[1], rec)
    local tx = rec.op:attr "transaction_bytes"
    if tx == nil or tx < 0 then tx = p.tx end
    return producer_arrivals(R, W, rec, ctx, p, ins[2], tx > 0 and tx or nil, true, "commits")
  end
  handlers["cutlass.pipeline.producer_expect_tx"] = function(R, W, rec, ins, ctx)
    local p = pipe_of(R, W, ins[1], rec)
    return producer_arrivals(R, W, rec, ctx, p, ins[2], rec.op:attr "transaction_bytes", false, "expects bytes")
  end
  handlers["cutlass.pipeline.consumer_release"] = function(R, W, rec, ins, ctx)
    local p, s = pipe_of(R, W, ins[1], rec), ins[2]
    local addr = stage_bar(p, s.index, 1)
    if p.mode == "cooperative" or p.mode == "pingpong" then -- every thread (pingpong: of the stage's one participant)
      local all = 0
      for _, m in ipairs(p.cons) do all = all | m end
      if (all >> W.w) & 1 == 0 then
        error(("emulate: %s at %s runs on warp %d, which is not a consumer participant"):format(rec.name, rec.loc, W.w), 0)
      end
      local n = #ctx.mask * (ctx.narrow and 32 or 1)
      R:request(W, rec, function() return true end, function()
        arrival(R, W, rec, addr, n, nil, true)
        W.vc[W.actor] = W.vc[W.actor] + 1
      end, function() return "releases" end, W.cta.id .. ":" .. addr, "am",
      function() return completes_on(W.cta.bars[addr], n) end)
      return {}
    end
    if p.mode == "cluster" or p.mode == "pingpong_cluster" then
      -- every consumer warp (pingpong_cluster: of the stage's one participant) releases the stage on every CTA of the cluster (their
      -- producers multicast into this one): one arrival on each, at .cta scope
      -- (the lowering's release_cluster: lane r on CTA r, no barrier between the
      -- warps), which orders only the warp's completed async-proxy reads
      -- (Run:release_of) on another CTA
      local all = 0
      for _, m in ipairs(p.cons) do all = all | m end
      if (all >> W.w) & 1 == 0 then
        error(("emulate: %s at %s runs on warp %d, which is not a consumer participant"):format(rec.name, rec.loc, W.w), 0)
      end
      local first = W.cta.id - W.cta.rank
      for r = 0, (R.k.cluster or 1) - 1 do
        local a = DSMEM_BASE + ((first + r) << 32) + (addr - SHARED_BASE)
        local cta, local_addr, key = R:bar_ref(W, a)
        R:request(W, rec, function() return true end, function()
          R:arrive(R:bar(W, a, rec), 1, W.actor, W.vc, rec, nil, R:release_of(W, cta, nil))
          W.vc[W.actor] = W.vc[W.actor] + 1
        end, function() return ("releases on CTA %d"):format(cta.id) end, key, "am",
        function() return completes_on(cta.bars[local_addr], 1) end)
      end
      return {}
    end
    per_group(R, W, rec, ctx, p.cons, true, function(n)
      R:request(W, rec, function() return true end, function()
        arrival(R, W, rec, addr, n, nil, true)
        W.vc[W.actor] = W.vc[W.actor] + 1
      end, function() return "releases" end, W.cta.id .. ":" .. addr, "am",
      function() return completes_on(W.cta.bars[addr], n) end)
    end)
    return {}
  end
  -- producer_tail: drain the bulk groups; in the cluster modes first wait until
  -- every stage was released (acquire each in turn), so that no remote release
  -- reaches a CTA that left
  handlers["cutlass.pipeline.producer_tail"] = function(R, W, rec, ins, ctx)
    local p = pipe_of(R, W, ins[1], rec)
    if p.mode == "cluster" or p.mode == "pingpong_cluster" then
      local s = ins[2]
      for _ = 1, p.stages do
        handlers["cutlass.pipeline.producer_acquire"](R, W, rec, { p, s }, ctx)
        s = handlers["cutlass.pipeline.state.increment"](R, W, rec, { s }, ctx)[1]
      end
    end
    R:drain_s2g(W, 0)
    return {}
  end

  -- seq_bar (ordered sequence barriers): slots [base, base + depth) of the pool,
  -- each inited by thread 0 with arrive_count; a state is (index, phase); wait
  -- spins on the slot's parity, arrive is an arrival by every thread that runs it
  -- and advances the state (the index wraps at the depth and flips the phase).
  handlers["cutlass.seq_bar.create"] = function(_, W, rec)
    local q = W.cta.pipes[rec.id]
    if not q then
      q = { kind = "seq", depth = rec.depth, loc = rec.loc }
      W.cta.pipes[rec.id] = q
    end
    return { q }
  end
  local function seq_slot(q, index, W, rec)
    if not q.base then -- its slots are known from its init: none ran yet
      violation("uninitialized", ("%s at %s uses the seq_bar at %s, which no warp initialized yet")
        :format(W.label, rec.loc, q.loc))
    end
    return SLOT_BASE + 8 * (q.base + index)
  end
  handlers["cutlass.seq_bar.init"] = function(R, W, rec, ins, ctx)
    local q = ins[1]
    q.base, q.count = rec.op:attr_or_default "barrier_id_base", rec.op:attr "arrive_count"
    if W.w == 0 and ctx.mask[1] == 0 then
      for i = 0, q.depth - 1 do
        R:init_barrier(W, seq_slot(q, i, W, rec), q.count, rec.loc, ("slot %d of the seq_bar at %s"):format(i, q.loc))
      end
    end
    init_sync(R, W, rec, ins, ctx, "the CTA barrier after the barrier inits")
    return {}
  end
  handlers["cutlass.seq_bar.state.create"] = function(_, _, rec, ins)
    return { { index = rec.op:attr_or_default "index", phase = rec.op:attr_or_default "phase", depth = ins[1] and ins[1].depth } }
  end
  handlers["cutlass.seq_bar.wait"] = function(R, W, rec, ins)
    local q, st = ins[1], ins[2]
    R:wait(W, rec, seq_slot(q, st.index, W, rec), st.phase)
    return {}
  end
  handlers["cutlass.seq_bar.arrive"] = function(R, W, rec, ins, ctx)
    local q, st = ins[1], ins[2]
    local addr = seq_slot(q, st.index, W, rec)
    local n = #ctx.mask
    R:request(W, rec, function() return true end, function()
      R:arrive(R:bar(W, addr, rec), n, W.actor, W.vc, rec)
      W.vc[W.actor] = W.vc[W.actor] + 1
    end, function() return "arrives" end, W.cta.id .. ":" .. addr, "am",
    function() return completes_on(W.cta.bars[addr], n) end)
    local i, ph = st.index + 1, st.phase
    if i == q.depth then i, ph = 0, ph ~ 1 end
    return { { index = i, phase = ph, depth = q.depth } }
  end

  handlers["cutlass.bar"] = function(R, W, rec)
    R:named_bar(W, rec, rec.op:attr "id", rec.op:attr "count", true)
    return {}
  end
  handlers["cutlass.named_barrier.arrive"] = function(R, W, rec)
    R:named_bar(W, rec, rec.op:attr "id", rec.op:attr "count", false)
    return {}
  end

  local function frag_elem(W, rec, f, data, fi, t)
    local x = data[fi]
    if x == nil then
      violation("unfilled", ("%s at %s reads element %d of thread %d's register fragment (made at %s), which nothing wrote")
        :format(W.label, rec.loc, fi - 1, t, f.loc))
    end
    return x
  end
  local function striped(kind)
    return function(R, W, rec, ins, ctx)
      local f = ins[2]
      if type(f) ~= "table" or f.kind ~= "frag" then not_modelled(rec) end
      local threads = rec.op:attr "threads"
      local v, units, es = f.v, f.n // f.v, f.codec.size
      local erec = { codec = f.codec, loc = rec.loc }
      local max = rec.op:attr "kind" == "max"
      for _, l in ipairs(ctx.mask) do
        local t = 32 * (W.w - ctx.agent_first) + l
        local g = at(ins[1], l)
        local data = f.lanes[l]
        if not data then
          data = {}
          f.lanes[l] = data
        end
        if t < threads then
          R:tick(rec, units * v) -- its elements, one op each
          for u = 0, units - 1 do
            local base = g + (u * threads + t) * v * es
            for i = 0, v - 1 do
              local a, fi = base + i * es, u * v + i + 1
              if kind == "load" then
                data[fi] = R:load(W, erec, a)
              elseif kind == "store" then
                R:store(W, erec, a, frag_elem(W, rec, f, data, fi, t))
              elseif kind == "load_add" then
                local x, y = R:load(W, erec, a), frag_elem(W, rec, f, data, fi, t)
                data[fi] = f.codec.fmt and string.unpack("<f", string.pack("<f", x + y)) or wrap(x + y, f.codec.width)
              else -- reduce: a global atomic per element
                local old = R:load(W, erec, a, true)
                local x = frag_elem(W, rec, f, data, fi, t)
                local nv = max and math.max(old, x) or old + x
                if not f.codec.fmt then nv = wrap(nv, f.codec.width) end
                R:store(W, erec, a, nv, true)
              end
            end
          end
        end
      end
      return {}
    end
  end
  for name, kind in pairs { ["cutlass.block_striped.load"] = "load", ["cutlass.block_striped.store"] = "store",
                            ["cutlass.block_striped.load_add"] = "load_add", ["cutlass.block_striped.reduce"] = "reduce" } do
    handlers[name] = striped(kind)
  end

  -- Generic (global-memory) barriers of the StreamK fixup (CUTLASS's
  -- GenericBarrier): a counter at ptr + index; the first thread of the executors
  -- spins until it equals v (wait_eq_reset: and sets it to 0), then the
  -- executors sync; arrive_inc: the executors sync, then the first thread
  -- increments it (release). The counter carries the clock of its releases.
  local function i32_at(R, addr)
    local v = 0
    for i = 3, 0, -1 do v = (v << 8) | (R.global[addr + i] or 0) end
    return wrap(v, 32)
  end
  local function set_i32(R, addr, v)
    for i = 0, 3 do R.global[addr + i] = (v >> (8 * i)) & 0xff end
  end
  local function generic(kind)
    return function(R, W, rec, ins, ctx)
      local addr = uniform(rec, ins[1], "pointer") + 4 * uniform(rec, ins[2], "index")
      local lead = ctx.narrow or W.w == lowest_bit(ctx.exec)
      local n = popcount(ctx.exec)
      local key = ("generic barrier op %d"):format(rec.id)
      local obj = "g" .. addr
      local sync = not ctx.narrow and n > 1
      if kind == "arrive" then
        if sync then R:rendezvous(W, rec, key, n, ("the executors' sync before %s at %s"):format(rec.name, rec.loc)) end
        if lead then
          R:request(W, rec, function() return true end, function()
            local g = R:gbar_at(addr)
            vc_join(g.vc, W.vc)
            W.vc[W.actor] = W.vc[W.actor] + 1
            set_i32(R, addr, i32_at(R, addr) + 1)
          end, function() return "arrives" end, obj, "ag")
        end
      else
        if lead then
          local want = uniform(rec, ins[3], "value")
          R:gbar_at(addr)
          R:request(W, rec, function() return i32_at(R, addr) == want end, function()
            vc_join(W.vc, R:gbar_at(addr).vc)
            if kind == "reset" then set_i32(R, addr, 0) end
          end, function() return ("waits until the counter at 0x%x (now %d) equals %d"):format(addr, i32_at(R, addr), want) end,
          obj, kind == "reset" and "wg" or "rg")
        end
        if sync then R:rendezvous(W, rec, key, n, ("the executors' sync after %s at %s"):format(rec.name, rec.loc)) end
      end
      return {}
    end
  end
  for name, kind in pairs { ["cutlass.generic_barrier.arrive_inc"] = "arrive", ["cutlass.generic_barrier.wait_eq"] = "wait",
                            ["cutlass.generic_barrier.wait_eq_reset"] = "reset" } do
    handlers[name] = generic(kind)
  end

  C.probes["cutlass.pipeline.producer_try_acquire"] = true
  C.probes["cutlass.pipeline.consumer_try_wait"] = true
end

return C
