-- tilua.emulate_tile: the emulator's models of the authoring-level ops (ids,
-- arithmetic on lanes, memory, tile mbarriers, bulk copies, CTA, named and
-- cluster barriers, cutlass pipelines and seq_bars, block_striped fragments,
-- generic barriers). emulate.lua runs them: each handler is
-- fn(R, W, rec, ins, ctx) -> results, registered through emulate.extend as
-- emulate_nvvm.lua, emulate_sched.lua, emulate_mma.lua and emulate_global.lua register theirs.
local interp = require "tilua.interp"

return function(handlers, api)
  local Run, M = api.Run, api.M
  local request, eval_lanes, uniform, at, varying, LV = api.request, api.eval_lanes, api.uniform, api.at, api.varying, api.LV
  local violation, not_modelled, passes, codec_of = api.violation, api.not_modelled, api.passes, api.codec_of
  local stage_bar, pipe_of, per_group, completes_on = api.stage_bar, api.pipe_of, api.per_group, api.completes_on
  local lowest_bit, popcount, arrive_counts = api.lowest_bit, api.popcount, api.arrive_counts
  local bar_ref = api.bar_ref
  local vc_join, vc_copy, exec_block = api.vc_join, api.vc_copy, api.exec_block
  local SHARED_BASE, SLOT_BASE, DSMEM_BASE = api.SHARED_BASE, api.SLOT_BASE, api.DSMEM_BASE
  local wrap = interp.wrap

  handlers["tile.thread_id"] = function(R, W, rec, ins, ctx)
    local dim = rec.op:attr "dim"
    return eval_lanes(R, W, rec, ins, ctx, function(_, l) return { dim == "x" and 32 * W.w + l or 0 } end)
  end
  handlers["tile.lane_id"] = function(R, W, rec, ins, ctx)
    return eval_lanes(R, W, rec, ins, ctx, function(_, l) return { l } end)
  end
  handlers["tile.warp_id"] = function(_, W) return { W.w } end
  handlers["tile.agent_warp_id"] = function(_, W, _, _, ctx) return { W.w - ctx.agent_first } end
  handlers["tile.agent_thread_id"] = function(R, W, rec, ins, ctx)
    return eval_lanes(R, W, rec, ins, ctx, function(_, l) return { 32 * (W.w - ctx.agent_first) + l } end)
  end
  handlers["tile.elect"] = function(R, W, rec, ins, ctx)
    local first = ctx.mask[1]
    return eval_lanes(R, W, rec, ins, ctx, function(_, l) return { l == first and 1 or 0 } end)
  end
  handlers["tile.block_id"] = function(_, W, rec) return { rec.op:attr "dim" == "x" and W.cta.id or 0 } end
  handlers["tile.grid_dim"] = function(R, _, rec) return { rec.op:attr "dim" == "x" and R.grid or 1 } end
  handlers["tile.block_dim"] = function(R, _, rec) return { rec.op:attr "dim" == "x" and R.k.threads or 1 } end
  handlers["tile.alloc_shared"] = function(_, _, rec) return { SHARED_BASE + rec.offset } end
  handlers["tile.dynamic_shared"] = function(_, _, rec) return { SHARED_BASE + rec.offset } end
  handlers["tile.ptr_add"] = function(R, W, rec, ins, ctx)
    local s = rec.scale
    return eval_lanes(R, W, rec, ins, ctx, function(v) return { v[1] + v[2] * s } end)
  end
  local function same(R, W, rec, ins, ctx) return eval_lanes(R, W, rec, ins, ctx, function(v) return { v[1] } end) end
  handlers["tile.ptr_cast"], handlers["tile.ptr_to_int"], handlers["tile.int_to_ptr"] = same, same, same
  handlers["tile.memref_ptr"] = function(R, W, rec, ins, ctx)
    local shape, scale = rec.shape, rec.scale
    return eval_lanes(R, W, rec, ins, ctx, function(v)
      local off = 0
      for d = 1, #shape do off = off * shape[d] + (v[d + 1] or 0) end
      return { v[1] + off * scale }
    end)
  end
  -- loads and stores: every active lane (eval_lanes' per-lane path, without its tables)
  handlers["tile.load"] = function(R, W, rec, ins, ctx)
    local p, out = ins[1], setmetatable({}, LV)
    for _, l in ipairs(ctx.mask) do out[l] = R:load(W, rec, at(p, l)) end
    return { out }
  end
  handlers["tile.store"] = function(R, W, rec, ins, ctx)
    local v, p = ins[1], ins[2]
    for _, l in ipairs(ctx.mask) do R:store(W, rec, at(p, l), at(v, l)) end
    return {}
  end
  handlers["tile.extract"] = function(R, W, rec, ins, ctx)
    local i = rec.op:attr "index"
    local w = rec.width
    return eval_lanes(R, W, rec, ins, ctx, function(v) return { w and wrap(v[1][i + 1], w) or v[1][i + 1] } end)
  end
  handlers["tile.from_elements"] = function(R, W, rec, ins, ctx)
    return eval_lanes(R, W, rec, ins, ctx, function(v) return { { table.unpack(v) } } end)
  end
  -- tile.shfl (shfl.sync): lane l takes lane src's value within segments of
  -- `width` lanes (a lane with no source keeps its own); every lane of `mask`
  -- must execute it together (warp-wide: the warp's active lanes are the
  -- ones that do)
  handlers["tile.shfl"] = function(R, W, rec, ins, ctx)
    if not rec.shfl then
      local a = rec.op:attrs()
      rec.shfl = { mode = a.mode, width = a.width or 32, mask = a.mask or 0xffffffff }
    end
    local o = rec.shfl
    local active = {}
    for _, l in ipairs(ctx.mask) do active[l] = true end
    for l = 0, 31 do
      if (o.mask >> l) & 1 == 1 and not active[l] then
        error(("emulate: tile.shfl at %s: lane %d of its mask does not execute it"):format(rec.loc, l), 0)
      end
    end
    local x, b, w = ins[1], ins[2], o.width
    local out = setmetatable({}, LV)
    for _, l in ipairs(ctx.mask) do
      local d, seg = at(b, l), l & ~(w - 1)
      local src
      if o.mode == "idx" then src = seg + (d & (w - 1))
      elseif o.mode == "up" then src = l - d < seg and l or l - d
      elseif o.mode == "down" then src = l + d >= seg + w and l or l + d
      else src = (l ~ d) >= seg + w and l or (l ~ d) end
      if not active[src] then
        error(("emulate: tile.shfl at %s: lane %d reads lane %d, which does not execute it"):format(rec.loc, l, src), 0)
      end
      out[l] = at(x, src)
    end
    return { out }
  end
  -- tile.math (MUFU): the exact function rounded to f32, subnormals flushed
  -- (within the hardware's approximation error of what ex2.approx.ftz gives)
  local function f32(x) return (string.unpack("<f", string.pack("<f", x))) end
  local function ftz(x) return (x ~= 0 and math.abs(x) < 2.0 ^ -126) and 0.0 * x or x end
  local math_f = {
    ex2 = function(x) return 2.0 ^ x end, lg2 = function(x) return math.log(x, 2) end,
    rsqrt = function(x) return 1 / math.sqrt(x) end, rcp = function(x) return 1 / x end, sqrt = math.sqrt,
    sin = math.sin, cos = math.cos,
    tanh = function(x)
      if math.abs(x) > 20 then return x > 0 and 1.0 or -1.0 end
      local e = math.exp(2 * x)
      return (e - 1) / (e + 1)
    end,
  }
  handlers["tile.math"] = function(R, W, rec, ins, ctx)
    if not rec.math then
      if rec.op:result(1):type() ~= require("tilua").f32 then not_modelled(rec) end
      rec.math = math_f[rec.op:attr "fn"]
    end
    local fn = rec.math
    return eval_lanes(R, W, rec, ins, ctx, function(v)
      local y = fn(ftz(v[1]))
      return { ftz(y == y and math.abs(y) ~= math.huge and f32(y) or y) }
    end)
  end
  local atomic_f = {
    add = function(a, b) return a + b end, max = math.max, min = math.min, umax = math.max, umin = math.min,
    exch = function(_, b) return b end, ["and"] = function(a, b) return a & b end,
    ["or"] = function(a, b) return a | b end, xor = function(a, b) return a ~ b end,
  }
  -- one lane's read-modify-write (atomic: no race with other atomics), shared with
  -- the lowered nvvm.atom / red / atom.cas (emulate_nvvm.lua); returns the old value
  local function atomic_update(R, W, rec, addr, f, b)
    local old = R:load(W, rec, addr, true)
    R:store(W, rec, addr, wrap(f(old, b), rec.codec.width or 64), true)
    return old
  end
  local function atomic_cas(R, W, rec, addr, expected, new)
    local old = R:load(W, rec, addr, true)
    if old == expected then R:store(W, rec, addr, new, true) end
    return old
  end
  api.atomic_f, api.atomic_update, api.atomic_cas = atomic_f, atomic_update, atomic_cas
  handlers["tile.atomic"] = function(R, W, rec, ins, ctx)
    local f = atomic_f[rec.op:attr "kind"]
    return eval_lanes(R, W, rec, ins, ctx, function(v) return { atomic_update(R, W, rec, v[1], f, v[2]) } end)
  end
  handlers["tile.atomic_cas"] = function(R, W, rec, ins, ctx)
    return eval_lanes(R, W, rec, ins, ctx, function(v) return { atomic_cas(R, W, rec, v[1], v[2], v[3]) } end)
  end
  local function nop() return {} end
  handlers["tile.fence"], handlers["tile.fence_proxy_async"], handlers["tile.fence_mbarrier_init"] = nop, nop, nop
  -- one grid is emulated: there is no earlier grid to wait for, no later one to let in
  handlers["tile.griddepcontrol_wait"], handlers["tile.griddepcontrol_launch_dependents"] = nop, nop

  handlers["tile.elect_one"] = function(R, W, rec, _, ctx)
    local sub = setmetatable({ mask = { ctx.mask[1] }, narrow = true }, { __index = ctx })
    exec_block(R, W, rec.regions[1][1], {}, sub)
    return {}
  end
  handlers["tile.agent"] = function(R, W, rec, _, ctx)
    if W.w < rec.first or W.w >= rec.first + rec.nwarps then return {} end
    local exec = ((1 << rec.nwarps) - 1) << rec.first
    local sub = setmetatable({ exec = exec, agent_first = rec.first, role = rec.role }, { __index = ctx })
    local old, oldg = W.role, W.grp
    W.role, W.grp = rec.role, exec
    W.label = ("%s warp %d%s"):format(rec.role, W.w, R.grid > 1 and (" (CTA %d)"):format(W.cta.id) or "")
    exec_block(R, W, rec.regions[1][1], {}, sub)
    W.role, W.grp = old, oldg
    return {}
  end
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
    exec_block(R, W, rec.regions[1][1], {}, sub)
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
        exec_block(R, W, blk, { table.unpack(ins, first, first + n - 1) }, sub)
        W.grp = old
      end
      first = first + n
    end
    return {}
  end

  -- mbarriers (tile)
  local function per_address(rec, ins, ctx, i)
    -- the lanes grouped by the address operand i: { [addr] = nlanes }
    local x = ins[i]
    local groups, order = {}, {}
    for _, l in ipairs(ctx.mask) do
      local a = at(x, l)
      if not groups[a] then order[#order + 1] = a end
      groups[a] = (groups[a] or 0) + 1
    end
    return groups, order
  end

  handlers["tile.mbarrier_init"] = function(R, W, rec, ins, ctx)
    local groups, order = per_address(rec, ins, ctx, 1)
    for _, a in ipairs(order) do R:init_barrier(W, a, uniform(rec, ins[2], "count"), rec.loc) end
    return {}
  end
  handlers["tile.mbarrier_inval"] = function(_, W, rec, ins)
    W.cta.bars[uniform(rec, ins[1], "barrier")] = nil
    return {}
  end
  local function arrive_handler(expect_idx, count_idx, arrive)
    return function(R, W, rec, ins, ctx)
      local groups, order = per_address(rec, ins, ctx, 1)
      request(W, rec, function() return true end, function()
        for _, a in ipairs(order) do
          local b = R:bar(W, a, rec)
          local n = groups[a]
          local bytes = expect_idx and uniform(rec, ins[expect_idx], "byte count") * n or nil
          if arrive then
            local cnt = count_idx and ins[count_idx] and uniform(rec, ins[count_idx], "count") or 1
            if rec.bar_scope == nil then rec.bar_scope = rec.op:attr "scope" or false end
            R:arrive(b, n * cnt, W.actor, W.vc, rec, bytes, R:release_of(W, (bar_ref(R, W, a)), rec.bar_scope or nil))
          else
            b.tx = b.tx + bytes
          end
        end
        W.vc[W.actor] = W.vc[W.actor] + 1
      end, function() return "arrives" end, #order == 1 and select(3, bar_ref(R, W, order[1])) or nil, "am",
      function()
        local cta, a = bar_ref(R, W, order[1])
        return arrive and completes_on(cta.bars[a], groups[order[1]])
      end)
      return {}
    end
  end
  handlers["tile.mbarrier_arrive"] = arrive_handler(nil, 2, true)
  handlers["tile.mbarrier_arrive_expect_tx"] = arrive_handler(2, nil, true)
  handlers["tile.mbarrier_expect_tx"] = arrive_handler(2, nil, false)
  handlers["tile.mbarrier_wait"] = function(R, W, rec, ins)
    R:wait(W, rec, uniform(rec, ins[1], "barrier"), uniform(rec, ins[2], "parity"))
    return {}
  end
  -- try_wait "waits a while": modelled as a wait that succeeds (the false path is not explored)
  handlers["tile.mbarrier_try_wait"] = function(R, W, rec, ins)
    R:wait(W, rec, uniform(rec, ins[1], "barrier"), uniform(rec, ins[2], "parity"))
    return { 1 }
  end
  -- A non-blocking test of a barrier's phase: 1 (and what the phase publishes
  -- becomes visible) when `parity` has completed, else 0.
  local function test_phase(R, W, rec, addr, parity)
    return request(W, rec, function() return true end, function()
      local b = R:bar(W, addr, rec)
      if passes(b, parity) then
        vc_join(W.vc, R:acquired(b, rec))
        return 1
      end
      return 0
    end, function() return "tests" end, W.cta.id .. ":" .. addr, "r")
  end
  handlers["tile.mbarrier_test_wait"] = function(R, W, rec, ins)
    return { test_phase(R, W, rec, uniform(rec, ins[1], "barrier"), uniform(rec, ins[2], "parity")) }
  end
  handlers["tile.bulk_copy_g2s"] = function(R, W, rec, ins, ctx)
    for _, l in ipairs(ctx.mask) do
      R:issue_g2s(W, rec, at(ins[1], l), at(ins[2], l), at(ins[3], l), at(ins[4], l))
    end
    return {}
  end
  -- A copy shared -> global joins warp W's open bulk group (performed at its wait).
  function Run:issue_s2g(W, rec, dst, src, bytes, what)
    local id = self:new_actor()
    self:mark_async(id)
    local vc = vc_copy(W.vc)
    vc[id] = 1
    local c = { id = id, vc = vc, dst = dst, src = src, bytes = bytes, rec = rec,
                label = ("%s (from %s)"):format(what, W.label) }
    self.actors[id] = c
    W.bulk_open[#W.bulk_open + 1] = c
    W.vc[W.actor] = W.vc[W.actor] + 1
    return c
  end
  handlers["tile.bulk_copy_s2g"] = function(R, W, rec, ins, ctx)
    for _, l in ipairs(ctx.mask) do R:issue_s2g(W, rec, at(ins[1], l), at(ins[2], l), at(ins[3], l), "bulk store") end
    return {}
  end
  handlers["tile.bulk_commit"] = function(_, W)
    W.bulk_groups[#W.bulk_groups + 1] = W.bulk_open
    W.bulk_open = {}
    return {}
  end
  handlers["tile.bulk_wait"] = function(R, W, rec)
    R:drain_s2g(W, rec.op:attr "pending" or 0)
    return {}
  end
  handlers["tile.barrier"] = function(R, W, rec)
    R:rendezvous(W, rec, "bar.sync 0", R.k.warps, "the CTA barrier (bar.sync 0)")
    return {}
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
      handlers["tile.cluster_arrive"](R, W, rec, ins, ctx)
      handlers["tile.cluster_wait"](R, W, rec, ins, ctx)
    else
      R:rendezvous(W, rec, "bar.sync 0", R.k.warps, what)
    end
  end
  handlers["cutlass.pipeline.init"] = function(R, W, rec, ins, ctx)
    local p = pipe_of(R, W, ins[1], rec)
    local op = rec.op
    local full, empty, mode = arrive_counts(op, p.np, p.nc, R.k.cluster or 1)
    local given = op:attr "arrive_count"
    if given and #given == 2 then full, empty = given[1], given[2] end
    p.mode, p.base = mode, op:attr "barrier_id_base" or 0
    p.prod, p.cons = op:attr "participants", op:attr "consumers"
    p.tx = op:attr "transaction_bytes" or 0
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
    local i, ph, n = op:attr "index" or 0, op:attr "phase" or 0, op:attr "count" or 0
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
      request(W, rec, function() return true end, function()
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
      request(W, rec, function() return true end, function()
        arrival(R, W, rec, addr, n, nil, true)
        W.vc[W.actor] = W.vc[W.actor] + 1
      end, function() return "releases" end, W.cta.id .. ":" .. addr, "am",
      function() return completes_on(W.cta.bars[addr], n) end)
      return {}
    end
    if p.mode == "cluster" then
      -- every consumer warp releases the stage on every CTA of the cluster (their
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
        local cta, local_addr, key = bar_ref(R, W, a)
        request(W, rec, function() return true end, function()
          R:arrive(R:bar(W, a, rec), 1, W.actor, W.vc, rec, nil, R:release_of(W, cta, nil))
          W.vc[W.actor] = W.vc[W.actor] + 1
        end, function() return ("releases on CTA %d"):format(cta.id) end, key, "am",
        function() return completes_on(cta.bars[local_addr], 1) end)
      end
      return {}
    end
    per_group(R, W, rec, ctx, p.cons, true, function(n)
      local cta, local_addr, key = bar_ref(R, W, addr)
      request(W, rec, function() return true end, function()
        arrival(R, W, rec, addr, n, nil, true)
        W.vc[W.actor] = W.vc[W.actor] + 1
      end, function() return "releases" end, key, "am",
      function() return completes_on(cta.bars[local_addr], n) end)
    end)
    return {}
  end
  -- producer_tail: drain the bulk groups; in cluster mode first wait until
  -- every stage was released (acquire each in turn), so that no remote release
  -- reaches a CTA that left
  handlers["cutlass.pipeline.producer_tail"] = function(R, W, rec, ins, ctx)
    local p = pipe_of(R, W, ins[1], rec)
    if p.mode == "cluster" then
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
    q.base, q.count = rec.op:attr "barrier_id_base" or 0, rec.op:attr "arrive_count"
    if W.w == 0 and ctx.mask[1] == 0 then
      for i = 0, q.depth - 1 do
        R:init_barrier(W, seq_slot(q, i, W, rec), q.count, rec.loc, ("slot %d of the seq_bar at %s"):format(i, q.loc))
      end
    end
    init_sync(R, W, rec, ins, ctx, "the CTA barrier after the barrier inits")
    return {}
  end
  handlers["cutlass.seq_bar.state.create"] = function(_, _, rec, ins)
    return { { index = rec.op:attr "index" or 0, phase = rec.op:attr "phase" or 0, depth = ins[1] and ins[1].depth } }
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
    request(W, rec, function() return true end, function()
      R:arrive(R:bar(W, addr, rec), n, W.actor, W.vc, rec)
      W.vc[W.actor] = W.vc[W.actor] + 1
    end, function() return "arrives" end, W.cta.id .. ":" .. addr, "am",
    function() return completes_on(W.cta.bars[addr], n) end)
    local i, ph = st.index + 1, st.phase
    if i == q.depth then i, ph = 0, ph ~ 1 end
    return { { index = i, phase = ph, depth = q.depth } }
  end

  -- Named barriers (bar.sync / bar.arrive id, count): count threads, a warp
  -- counts as 32; a barrier that more warps use than its count holds is a report.
  function Run:named_bar(W, rec, id, count, wait)
    local cta = W.cta
    if count % 32 ~= 0 then
      violation("bar_count", ("%s at %s uses named barrier %d with a count of %d threads, not a multiple of the warp size")
        :format(W.label, rec.loc, id, count))
    end
    local users = cta.nbars[id]
    if not users then
      users = { n = 0 }
      cta.nbars[id] = users
    end
    if not users[W.w] then
      users[W.w], users.n = true, users.n + 1
      if 32 * users.n > count then
        violation("bar_count", ("%s at %s is the %d-th warp to use named barrier %d, which counts %d threads (%d warps): a barrier used by more threads than it counts")
          :format(W.label, rec.loc, users.n, id, count, count // 32))
      end
    end
    local key = "bar " .. id
    local s = cta.syncs[key]
    if s and s.n ~= count // 32 then
      violation("bar_count", ("%s at %s uses named barrier %d with a count of %d threads, another warp with %d")
        :format(W.label, rec.loc, id, count, 32 * s.n))
    end
    if wait then
      self:rendezvous(W, rec, key, count // 32, ("named barrier %d (%d threads)"):format(id, count))
    else
      self:rendezvous(W, rec, key, count // 32, ("named barrier %d (%d threads)"):format(id, count), true)
    end
  end
  handlers["tile.named_barrier_sync"] = function(R, W, rec, ins)
    R:named_bar(W, rec, uniform(rec, ins[1], "barrier id"), uniform(rec, ins[2], "thread count"), true)
    return {}
  end
  handlers["tile.named_barrier_arrive"] = function(R, W, rec, ins)
    R:named_bar(W, rec, uniform(rec, ins[1], "barrier id"), uniform(rec, ins[2], "thread count"), false)
    return {}
  end
  handlers["cutlass.bar"] = function(R, W, rec)
    R:named_bar(W, rec, rec.op:attr "id", rec.op:attr "count", true)
    return {}
  end
  handlers["cutlass.named_barrier.arrive"] = function(R, W, rec)
    R:named_bar(W, rec, rec.op:attr "id", rec.op:attr "count", false)
    return {}
  end

  -- Clusters: CTAs c - c % size .. of one cluster; the cluster barrier
  -- (barrier.cluster.arrive / wait, every thread of the cluster) is a phase
  -- barrier of its own; mapa names a shared address of another CTA.
  handlers["tile.cluster_rank"] = function(_, W) return { W.cta.rank } end
  handlers["tile.cluster_id"] = function(R, W, rec)
    return { rec.op:attr "dim" == "x" and W.cta.id // (R.k.cluster or 1) or 0 }
  end
  handlers["tile.cluster_size"] = function(R) return { R.k.cluster or 1 } end
  handlers["tile.mapa"] = function(R, W, rec, ins, ctx)
    return eval_lanes(R, W, rec, ins, ctx, function(v)
      local addr, rank = v[1], v[2]
      local size = R.k.cluster or 1
      if rank < 0 or rank >= size then
        violation("dsmem", ("%s at %s maps a shared address to rank %d of a cluster of %d"):format(W.label, rec.loc, rank, size))
      end
      if addr >= DSMEM_BASE then addr = SHARED_BASE + (addr & 0xffffffff) end
      local target = W.cta.id - W.cta.rank + rank
      return { DSMEM_BASE + (target << 32) + (addr - SHARED_BASE) }
    end)
  end
  -- The cluster barrier of W's cluster (made at its first use, kept by the
  -- cluster's first CTA): every thread of the cluster's CTAs arrives.
  local function cluster_bar(R, W)
    local lead = R.ctas[W.cta.id - W.cta.rank + 1]
    local b = lead.cluster_bar
    if not b then
      local n = (R.k.cluster or 1) * R.k.threads
      b = { count = n, pending = n, tx = 0, completed = 0, vc = {}, last_vc = {}, mvc = {}, cvc = {}, cluster = true,
            name = ("the cluster barrier of cluster %d"):format(lead.id // (R.k.cluster or 1)) }
      lead.cluster_bar = b
      lead.bar_list[#lead.bar_list + 1] = b
    end
    return b
  end
  handlers["tile.cluster_arrive"] = function(R, W, rec, _, ctx)
    local b = cluster_bar(R, W)
    local n = #ctx.mask
    request(W, rec, function() return true end, function()
      if W.cluster_phase then
        violation("arrive_count", ("%s at %s arrives on %s again before waiting for the phase it arrived on")
          :format(W.label, rec.loc, b.name))
      end
      W.cluster_phase = b.completed
      R:arrive(b, n, W.actor, W.vc, rec)
      W.vc[W.actor] = W.vc[W.actor] + 1
    end, function() return "arrives" end, "cluster " .. b.name, "ae", function() return completes_on(b, n) end)
    return {}
  end
  handlers["tile.cluster_wait"] = function(R, W, rec)
    local b = cluster_bar(R, W)
    request(W, rec, function() return W.cluster_phase == nil or b.completed > W.cluster_phase end, function()
      if W.cluster_phase == nil then
        violation("arrive_count", ("%s at %s waits on %s without having arrived"):format(W.label, rec.loc, b.name))
      end
      W.cluster_phase = nil
      vc_join(W.vc, b.last_vc)
    end, function()
      return ("waits on %s (%d phase(s) completed, %d of %d threads to arrive)"):format(b.name, b.completed, b.pending, b.count)
    end, "cluster " .. b.name, "re")
    return {}
  end
  handlers["tile.cluster_sync"] = function(R, W, rec, ins, ctx)
    handlers["tile.cluster_arrive"](R, W, rec, ins, ctx)
    return handlers["tile.cluster_wait"](R, W, rec, ins, ctx)
  end

  -- Register fragments (a zero-operand unrealized_conversion_cast to a
  -- memref<..., rmem>): per lane, private; block_striped moves them in units
  -- (cut_striped_unit): unit u of thread t (counted from the executors' first
  -- thread, t < threads) is global unit u * threads + t. Reading an element
  -- nothing wrote is an `unfilled` report, as convert-cutlass-to-nvvm's shared
  -- backing of the fragment makes it at the nvvm level.
  handlers["builtin.unrealized_conversion_cast"] = function(_, _, rec)
    if not rec.frag then not_modelled(rec) end
    return { { kind = "frag", n = rec.frag.n, v = rec.frag.v, codec = rec.frag.codec, lanes = {}, loc = rec.loc } }
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
  function Run:gbar_at(addr)
    local g = self.gbars[addr]
    if not g then
      g = { vc = {} }
      self.gbars[addr] = g
      self.gbar_list[#self.gbar_list + 1] = addr
    end
    return g
  end
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
          request(W, rec, function() return true end, function()
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
          request(W, rec, function() return i32_at(R, addr) == want end, function()
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

  -- what the other models use
  api.test_phase, api.per_address = test_phase, per_address
  for _, n in ipairs { "tile.mbarrier_test_wait", "cutlass.pipeline.producer_try_acquire", "cutlass.pipeline.consumer_try_wait" } do
    api.PROBES[n] = true
  end
end
