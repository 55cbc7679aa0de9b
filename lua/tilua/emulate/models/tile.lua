-- tilua.emulate.models.tile: the emulator's models of the tile dialect's
-- authoring-level ops (ids, arithmetic on lanes, memory, mbarriers, bulk
-- copies, CTA, named and cluster barriers), and the casts the lowerings leave
-- (register fragments among them; the cutlass ops: models/cutlass.lua). A model of the
-- registry of emulate/models/init.lua: handlers fn(R, W, rec, ins, ctx) ->
-- results (emulate/machine.lua says what they reach), decoders, probes.

local core = require "tilua.core"
local interp = require "tilua.emulate.interp"
local lanes = require "tilua.emulate.lanes"
local address = require "tilua.emulate.address"
local values = require "tilua.emulate.values"
local clock = require "tilua.emulate.clock"
local report = require "tilua.emulate.report"
local sync = require "tilua.emulate.sync"

local eval_lanes, uniform, at, LV = lanes.eval, lanes.uniform, lanes.at, lanes.LV
local violation, not_modelled = report.violation, report.not_modelled
local passes, completes_on = sync.passes, sync.completes_on
local codec_of, bytes_of = values.codec_of, values.bytes_of
local vc_join = clock.join
local SHARED_BASE, DSMEM_BASE = address.SHARED_BASE, address.DSMEM_BASE
local wrap = interp.wrap

local handlers, decoders = {}, {}
local T = { handlers = handlers, decoders = decoders, probes = {} }

-- {=== decoding: what the ops of this model are, once

-- the ops whose values differ per lane even when their operands do not (lanes.eval)
for _, n in ipairs { "tile.thread_id", "tile.lane_id", "tile.agent_thread_id", "tile.elect", "tile.atomic",
                     "tile.atomic_cas", "tile.store", "tile.load" } do
  decoders[n] = function(rec) rec.per_lane = true end
end
decoders["tile.ptr_add"] = function(rec, op) rec.scale = bytes_of(op:result(1):type():info().elem) end
decoders["tile.ptr_to_int"] = function(rec, op) -- an i32 of a shared pointer is a window address
  local info = op:result(1):type():info()
  rec.i32 = info.kind == "int" and info.width == 32
end
decoders["tile.memref_ptr"] = function(rec, op)
  local info = op:operand(1):type():info()
  rec.shape, rec.scale, rec.swizzle = info.shape, bytes_of(info.elem), info.swizzle or 0
end
decoders["tile.load"] = function(rec, op) rec.codec = codec_of(op:result(1):type()) end
decoders["tile.store"] = function(rec, op) rec.codec = codec_of(op:operand(1):type()) end
decoders["tile.extract"] = function(rec, op)
  local info = op:result(1):type():info()
  rec.width = info.kind == "int" and info.width or nil
end
decoders["tile.atomic"] = function(rec, op) rec.codec = codec_of(op:result(1):type()) end
decoders["tile.atomic_cas"] = decoders["tile.atomic"]
-- shared allocations where convert-tile-to-nvvm puts them (op:shared_layout,
-- the kernel's layout once per decoding); a dynamic one takes no static bytes
local function alloc(rec, op, d)
  d.shared = d.shared or op:shared_layout()
  for _, a in ipairs(d.shared.allocs) do
    if a.op == op then rec.offset, rec.size = a.offset, a.dynamic and 0 or a.bytes end
  end
  d.smem = rec.offset + rec.size
  d.allocs[#d.allocs + 1] = rec
end
decoders["tile.alloc_shared"], decoders["tile.dynamic_shared"] = alloc, alloc
decoders["tile.agent"] = function(rec, op)
  rec.first, rec.nwarps = op:agent_warps()
  rec.role = op:attr_or_default "name" or "agent" -- (an agent without a name)
end
-- the casts: a register fragment (no operand, a memref in rmem), a MODS
-- probe's stand-in scheduler (no operand, !cutlass.tile_scheduler), or a value
-- between the levels (one operand; an i32 of a shared pointer is a window address)
decoders["builtin.unrealized_conversion_cast"] = function(rec, op)
  local info = op:result(1):type():info()
  if op:noperands() == 0 then
    if info.kind == "memref" and info.space == "rmem" then -- a register fragment
      rec.frag = { n = info.elements, v = core.striped_unit(op:result(1):type()), codec = codec_of(info.elem) }
    end
    rec.sched_handle = info.kind == "dialect" and info.name == "cutlass.tile_scheduler"
  end
  rec.i32 = info.kind == "int" and info.width == 32
end

-- }===

do

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
  local DIM = { x = 1, y = 2, z = 3 }
  handlers["tile.block_id"] = function(R, W, rec) return { R:cta_coord(W.cta.id, DIM[rec.op:attr "dim"]) } end
  handlers["tile.grid_dim"] = function(R, _, rec) return { R.grid_dims[DIM[rec.op:attr "dim"]] } end
  handlers["tile.block_dim"] = function(R, _, rec) return { rec.op:attr "dim" == "x" and R.k.threads or 1 } end
  handlers["tile.alloc_shared"] = function(_, _, rec) return { SHARED_BASE + rec.offset } end
  handlers["tile.dynamic_shared"] = function(_, _, rec) return { SHARED_BASE + rec.offset } end
  handlers["tile.ptr_add"] = function(R, W, rec, ins, ctx)
    local s = rec.scale
    return eval_lanes(R, W, rec, ins, ctx, function(v) return { v[1] + v[2] * s } end)
  end
  local function same(R, W, rec, ins, ctx) return eval_lanes(R, W, rec, ins, ctx, function(v) return { v[1] } end) end
  handlers["tile.ptr_cast"], handlers["tile.int_to_ptr"] = same, same
  -- a shared pointer taken to an i32 is a window address (the levels mix between the conversions)
  handlers["tile.ptr_to_int"] = function(R, W, rec, ins, ctx)
    local outs = same(R, W, rec, ins, ctx)
    if rec.i32 then outs[1] = address.window(outs[1]) end
    return outs
  end
  -- the row-major offset (of a swizzled memref: swizzled)
  handlers["tile.memref_ptr"] = function(R, W, rec, ins, ctx)
    local shape, scale, sw = rec.shape, rec.scale, rec.swizzle
    if sw == 0 then
      return eval_lanes(R, W, rec, ins, ctx, function(v)
        local off = 0
        for d = 1, #shape do off = off * shape[d] + (v[d + 1] or 0) end
        return { v[1] + off * scale }
      end)
    end
    return eval_lanes(R, W, rec, ins, ctx, function(v)
      local off = 0
      for d = 1, #shape do off = off * shape[d] + (v[d + 1] or 0) end
      local base = v[1] - SHARED_BASE
      return { SHARED_BASE + address.swizzle(base + off * scale, sw) }
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
  -- arith.bitcast: the bytes of the value read as the other type (vectors
  -- are tables of their elements)
  handlers["arith.bitcast"] = function(R, W, rec, ins, ctx)
    local from, to = rec.op:operand(1):type(), rec.op:result(1):type()
    return eval_lanes(R, W, rec, ins, ctx, function(v) return { values.bitcast(v[1], from, to) } end)
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
      local op = rec.op
      rec.shfl = { mode = op:attr_or_default "mode", width = op:attr_or_default "width", mask = op:attr_or_default "mask" }
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
  -- tile.vote (vote.sync all / any / uni) and tile.ballot: over the lanes of
  -- `mask`, which must all execute it (as tile.shfl); one value for the warp
  local function voters(rec, ctx, what)
    local mask = rec.op:attr_or_default "mask"
    local active = {}
    for _, l in ipairs(ctx.mask) do active[l] = true end
    local lanes = {}
    for l = 0, 31 do
      if (mask >> l) & 1 == 1 then
        if not active[l] then error(("emulate: %s at %s: lane %d of its mask does not execute it"):format(what, rec.loc, l), 0) end
        lanes[#lanes + 1] = l
      end
    end
    return lanes
  end
  handlers["tile.vote"] = function(R, W, rec, ins, ctx)
    local mode, any, all = rec.op:attr_or_default "mode", 0, 1
    for _, l in ipairs(voters(rec, ctx, "tile.vote")) do
      if at(ins[1], l) ~= 0 then any = 1 else all = 0 end
    end
    if mode == "any" then return { any } elseif mode == "all" then return { all } end
    return { (all == 1 or any == 0) and 1 or 0 } -- uni: every lane the same
  end
  handlers["tile.ballot"] = function(R, W, rec, ins, ctx)
    local bits = 0
    for _, l in ipairs(voters(rec, ctx, "tile.ballot")) do
      if at(ins[1], l) ~= 0 then bits = bits | (1 << l) end
    end
    return { bits >= 1 << 31 and bits - (1 << 32) or bits }
  end
  -- tile.math (MUFU): the exact function rounded to f32, subnormals flushed
  -- (within the hardware's approximation error of what ex2.approx.ftz gives)
  local function f32(x) return (string.unpack("<f", string.pack("<f", x))) end
  local function ftz(x) return (x ~= 0 and math.abs(x) < 2.0 ^ -126) and 0.0 * x or x end
  local math_f = require("tilua.emulate.mathref").fn
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
  -- the lowered nvvm.atom / red / atom.cas (emulate/models/nvvm.lua); returns the old value
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
  T.atomic_f, T.atomic_update, T.atomic_cas = atomic_f, atomic_update, atomic_cas
  handlers["tile.atomic"] = function(R, W, rec, ins, ctx)
    local f = atomic_f[rec.op:attr "kind"]
    return eval_lanes(R, W, rec, ins, ctx, function(v) return { atomic_update(R, W, rec, v[1], f, v[2]) } end)
  end
  handlers["tile.atomic_cas"] = function(R, W, rec, ins, ctx)
    return eval_lanes(R, W, rec, ins, ctx, function(v) return { atomic_cas(R, W, rec, v[1], v[2], v[3]) } end)
  end
  local function nop() return {} end
  handlers["tile.fence_proxy_async"], handlers["tile.fence_mbarrier_init"] = nop, nop -- (tile.fence: models/global.lua)
  -- one grid is emulated: there is no earlier grid to wait for, no later one to let in
  handlers["tile.griddepcontrol_wait"], handlers["tile.griddepcontrol_launch_dependents"] = nop, nop

  handlers["tile.elect_one"] = function(R, W, rec, _, ctx)
    local sub = setmetatable({ mask = { ctx.mask[1] }, narrow = true }, { __index = ctx })
    R:exec_block(W, rec.regions[1][1], {}, sub)
    return {}
  end
  handlers["tile.agent"] = function(R, W, rec, _, ctx)
    if W.w < rec.first or W.w >= rec.first + rec.nwarps then return {} end
    local exec = ((1 << rec.nwarps) - 1) << rec.first
    local sub = setmetatable({ exec = exec, agent_first = rec.first, role = rec.role }, { __index = ctx })
    local old, oldg = W.role, W.grp
    W.role, W.grp = rec.role, exec
    W.label = ("%s warp %d%s"):format(rec.role, W.w, R.grid > 1 and (" (CTA %d)"):format(W.cta.id) or "")
    R:exec_block(W, rec.regions[1][1], {}, sub)
    W.role, W.grp = old, oldg
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
    local _, order = per_address(rec, ins, ctx, 1)
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
      R:request(W, rec, function() return true end, function()
        for _, a in ipairs(order) do
          local b = R:bar(W, a, rec)
          local n = groups[a]
          local bytes = expect_idx and uniform(rec, ins[expect_idx], "byte count") * n or nil
          if arrive then
            local cnt = count_idx and ins[count_idx] and uniform(rec, ins[count_idx], "count") or 1
            R:arrive(b, n * cnt, W.actor, W.vc, rec, bytes, R:release_of(W, (R:bar_ref(W, a)), R.bar_scope(rec)))
          else
            b.tx = b.tx + bytes
          end
        end
        W.vc[W.actor] = W.vc[W.actor] + 1
      end, function() return "arrives" end, #order == 1 and select(3, R:bar_ref(W, order[1])) or nil, "am",
      function()
        local cta, a = R:bar_ref(W, order[1])
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
    return R:request(W, rec, function() return true end, function()
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
    R:drain_s2g(W, rec.op:attr_or_default "pending")
    return {}
  end
  -- A thread's cp.async: its global bytes read at the issue (the race check's
  -- read), written into shared memory at the wait that completes its group
  -- (the race check's write, by the thread: other threads see them after a
  -- barrier behind that wait; before it the thread itself reads the old bytes).
  -- Groups are kept a warp (its lanes commit and wait together).
  handlers["tile.cp_async"] = function(R, W, rec, ins, ctx)
    local size = rec.op:attr_or_default "size"
    W.cp_open = W.cp_open or {}
    for _, l in ipairs(ctx.mask) do
      local dst, src = at(ins[1], l), at(ins[2], l)
      local n = ins[3] and at(ins[3], l) or size
      if dst % size ~= 0 or src % size ~= 0 then
        violation("model", ("cp.async of %d bytes at %s: an address not aligned to them (shared 0x%x, global 0x%x)")
          :format(size, rec.loc, dst, src))
      end
      local bytes = {}
      if n > 0 then
        R:check_access(W, rec, src, n, false)
        local m, a = R:mem_of(W, src)
        for i = 0, n - 1 do bytes[i + 1] = m[a + i] or 0 end
      end
      for i = n + 1, size do bytes[i] = 0 end
      W.cp_open[#W.cp_open + 1] = { dst = dst, bytes = bytes, rec = rec }
    end
    return {}
  end
  handlers["tile.cp_async_commit"] = function(_, W)
    W.cp_groups = W.cp_groups or {}
    W.cp_groups[#W.cp_groups + 1] = W.cp_open or {}
    W.cp_open = {}
    return {}
  end
  handlers["tile.cp_async_wait"] = function(R, W, rec)
    local keep = rec.op:attr_or_default "pending"
    while #(W.cp_groups or {}) > keep do
      for _, c in ipairs(table.remove(W.cp_groups, 1)) do
        R:check_access(W, c.rec, c.dst, #c.bytes, true)
        local m, a = R:mem_of(W, c.dst)
        for i = 1, #c.bytes do m[a + i - 1] = c.bytes[i] end
      end
    end
    return {}
  end
  handlers["tile.barrier"] = function(R, W, rec)
    R:rendezvous(W, rec, "bar.sync 0", R.k.warps, "the CTA barrier (bar.sync 0)")
    return {}
  end

  handlers["tile.named_barrier_sync"] = function(R, W, rec, ins)
    R:named_bar(W, rec, uniform(rec, ins[1], "barrier id"), uniform(rec, ins[2], "thread count"), true)
    return {}
  end
  handlers["tile.named_barrier_arrive"] = function(R, W, rec, ins)
    R:named_bar(W, rec, uniform(rec, ins[1], "barrier id"), uniform(rec, ins[2], "thread count"), false)
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
    R:request(W, rec, function() return true end, function()
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
    R:request(W, rec, function() return W.cluster_phase == nil or b.completed > W.cluster_phase end, function()
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
  -- The other casts (decoded above): a MODS probe's stand-in scheduler handle
  -- (models/sched.lua's value, detached from any plan), or one value between
  -- the levels, a shared pointer's i32 the window's.
  handlers["builtin.unrealized_conversion_cast"] = function(_, _, rec, ins)
    if rec.sched_handle then return { { kind = "sched", detached = true } } end
    if rec.frag then
      return { { kind = "frag", n = rec.frag.n, v = rec.frag.v, codec = rec.frag.codec, lanes = {}, loc = rec.loc } }
    end
    if #rec.outs ~= 1 or #ins ~= 1 then not_modelled(rec) end
    if rec.i32 then return { address.window(ins[1]) } end
    return { ins[1] }
  end
  -- what the other models use
  T.test_phase, T.per_address = test_phase, per_address
  T.probes["tile.mbarrier_test_wait"] = true
end

return T
