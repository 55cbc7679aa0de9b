-- tilua.emulate.models.nvvm: the emulator's model of the IR after lowering (the
-- nvvm ops of convert-cutlass-to-nvvm and convert-tile-to-nvvm, and the tile
-- ops those passes leave on the way), a model of emulate/models/init.lua
-- (docs/protocol.md, "Lowered IR and the check after every pass").
--
-- Shared memory at the nvvm level is addressed by i32 offsets in the shared
-- window, other CTAs' shared memory by shared::cluster addresses
-- (emulate/address.lua: shared and window translate).
--
-- A spin loop `scf.while { %ok = nvvm.mbarrier.try_wait.parity %bar, %p; scf.condition (not %ok) }`
-- is a blocking wait: the warp blocks until the phase of that parity completed
-- (the failed tries change nothing, so they are not steps), and a deadlock
-- still shows. Any other try_wait / test_wait is a probe that answers whether
-- the phase completed; after a failed probe on a barrier the warp's next probe
-- of it blocks until the barrier's completed phases change (a loop of probes
-- waits instead of spinning forever).

local lanes = require "tilua.emulate.lanes"
local address = require "tilua.emulate.address"
local values = require "tilua.emulate.values"
local report = require "tilua.emulate.report"
local sync = require "tilua.emulate.sync"
local tile = require "tilua.emulate.models.tile"

local eval_lanes, uniform = lanes.eval, lanes.uniform
local passes, codec_of, not_modelled = sync.passes, values.codec_of, report.not_modelled
local per_address = tile.per_address
local SHARED_BASE = address.SHARED_BASE
local sh, window = address.shared, address.window

local handlers = {}
local N = { handlers = handlers, probes = {} }

do
  -- {=== addresses

  handlers["nvvm.shared.base"] = function() return { address.WINDOW } end
  -- (tile.ptr_to_int and builtin.unrealized_conversion_cast, which give window
  -- addresses to the nvvm level: models/tile.lua)
  handlers["nvvm.cvta.shared"] = function(_, _, _, ins) return { sh(ins[1]) } end
  handlers["nvvm.cvta.to.shared"] = function(_, _, _, ins) return { window(ins[1]) } end
  local function same(_, _, _, ins) return { ins[1] } end
  handlers["nvvm.cvta.global"], handlers["nvvm.cvta.to.global"] = same, same

  -- }===

  -- {=== special registers

  local function per_lane(f)
    return function(R, W, rec, ins, ctx)
      rec.per_lane = true
      return eval_lanes(R, W, rec, ins, ctx, function(_, l) return { f(R, W, l) } end)
    end
  end
  local function const(f) return function(R, W) return { f(R, W) } end end
  local zero, one = const(function() return 0 end), const(function() return 1 end)
  local sreg = "nvvm.read.ptx.sreg."
  handlers[sreg .. "tid.x"] = per_lane(function(_, W, l) return 32 * W.w + l end)
  handlers[sreg .. "laneid"] = per_lane(function(_, _, l) return l end)
  handlers[sreg .. "tid.y"], handlers[sreg .. "tid.z"] = zero, zero
  handlers[sreg .. "ntid.x"] = const(function(R) return R.k.threads end)
  handlers[sreg .. "ntid.y"], handlers[sreg .. "ntid.z"] = one, one
  for d, x in ipairs { "x", "y", "z" } do
    handlers[sreg .. "ctaid." .. x] = const(function(R, W) return R:cta_coord(W.cta.id, d) end)
    handlers[sreg .. "nctaid." .. x] = const(function(R) return R.grid_dims[d] end)
  end
  handlers[sreg .. "warpid"] = const(function(_, W) return W.w end)
  handlers[sreg .. "smid"] = const(function(_, W) return W.cta.id end)
  -- clusters along x (kernel_spec.cluster; CTAs c - c % size .. of one cluster, as emulate/models/tile.lua has them)
  for d, x in ipairs { "x", "y", "z" } do
    local n = d == 1 and function(R) return R.k.cluster or 1 end or function() return 1 end
    handlers[sreg .. "clusterid." .. x] = const(function(R, W) return R:cta_coord(W.cta.id, d) // n(R) end)
    handlers[sreg .. "nclusterid." .. x] = const(function(R) return R.grid_dims[d] // n(R) end)
  end
  handlers[sreg .. "cluster.ctaid.x"] = tile.handlers["tile.cluster_rank"]
  handlers[sreg .. "cluster.nctaid.x"] = tile.handlers["tile.cluster_size"]
  for _, d in ipairs { "y", "z" } do
    handlers[sreg .. "cluster.ctaid." .. d] = zero
    handlers[sreg .. "cluster.nctaid." .. d] = one
  end
  handlers[sreg .. "cluster.ctarank"] = tile.handlers["tile.cluster_rank"]
  handlers[sreg .. "cluster.nctarank"] = tile.handlers["tile.cluster_size"]
  -- timers: the steps taken so far (monotonic)
  local clock = const(function(R) return R.steps end)
  handlers[sreg .. "clock"], handlers[sreg .. "clock64"], handlers[sreg .. "globaltimer"] = clock, clock, clock
  handlers["nvvm.elect.sync"] = function(R, W, rec, ins, ctx)
    rec.per_lane = true
    local first = ctx.mask[1]
    return eval_lanes(R, W, rec, ins, ctx, function(_, l) return { l == first and 1 or 0 } end)
  end

  -- }===

  -- {=== loads, stores, atomics

  -- a load or store in `space`, lane by lane; the codec comes from the value's type
  local function access(space, is_store)
    return function(R, W, rec, ins, ctx)
      rec.per_lane = true
      rec.codec = rec.codec or codec_of(is_store and rec.op:operand(2):type() or rec.op:result(1):type())
      local a = space == "shared" and sh(ins[1]) or ins[1]
      if not is_store then return eval_lanes(R, W, rec, { a }, ctx, function(v) return { R:load(W, rec, v[1]) } end) end
      eval_lanes(R, W, rec, { a, ins[2] }, ctx, function(v) R:store(W, rec, v[1], v[2]) return {} end)
      return {}
    end
  end
  local function load(space) return access(space, false) end
  local function store(space) return access(space, true) end
  handlers["nvvm.ld.global"], handlers["nvvm.ld.shared"], handlers["nvvm.ld"] = load "global", load "shared", load "generic"
  handlers["nvvm.st.global"], handlers["nvvm.st.shared"], handlers["nvvm.st"] = store "global", store "shared", store "generic"
  local atomic_f, atomic_update, atomic_cas = tile.atomic_f, tile.atomic_update, tile.atomic_cas
  local function atom(space, result)
    return function(R, W, rec, ins, ctx)
      local f = atomic_f[rec.op:attr "op"]
      if not f then not_modelled(rec) end
      rec.per_lane = true
      rec.codec = rec.codec or codec_of(rec.op:operand(2):type())
      local a = space == "shared" and sh(ins[1]) or ins[1]
      local outs = eval_lanes(R, W, rec, { a, ins[2] }, ctx, function(v) return { atomic_update(R, W, rec, v[1], f, v[2]) } end)
      return result and outs or {}
    end
  end
  local function cas(space)
    return function(R, W, rec, ins, ctx)
      rec.per_lane = true
      rec.codec = rec.codec or codec_of(rec.op:operand(2):type())
      local a = space == "shared" and sh(ins[1]) or ins[1]
      return eval_lanes(R, W, rec, { a, ins[2], ins[3] }, ctx, function(v) return { atomic_cas(R, W, rec, v[1], v[2], v[3]) } end)
    end
  end
  handlers["nvvm.atom.global"], handlers["nvvm.atom.shared"] = atom("global", true), atom("shared", true)
  handlers["nvvm.red.global"], handlers["nvvm.red.shared"] = atom("global", false), atom("shared", false)
  handlers["nvvm.atom.cas.global"], handlers["nvvm.atom.cas.shared"] = cas "global", cas "shared"

  -- }===

  -- {=== mbarriers

  -- the nvvm op as the tile op of the same operands, its barrier address translated
  local function as_tile(name)
    local h = assert(tile.handlers[name], name)
    return function(R, W, rec, ins, ctx)
      local t = { sh(ins[1]) }
      for i = 2, #rec.ins do t[i] = ins[i] end
      return h(R, W, rec, t, ctx)
    end
  end
  -- an mbarrier's name: the shared allocation of the stage that still had them (opts.shared_names)
  handlers["nvvm.mbarrier.init.shared"] = function(R, W, rec, ins, ctx)
    local names = R.o.shared_names
    if not names then return as_tile("tile.mbarrier_init")(R, W, rec, ins, ctx) end
    local _, order = per_address(rec, { sh(ins[1]) }, ctx, 1)
    for _, a in ipairs(order) do
      local name
      for _, s in ipairs(names) do
        local base = SHARED_BASE + s.offset
        if a >= base and a < base + math.max(s.size, 1) then
          name = ("mbarrier %s[%d]"):format(s.loc, (a - base) // 8)
        end
      end
      R:init_barrier(W, a, uniform(rec, ins[2], "count"), rec.loc, name)
    end
    return {}
  end
  handlers["nvvm.mbarrier.arrive.shared"] = as_tile "tile.mbarrier_arrive"
  handlers["nvvm.mbarrier.arrive.expect_tx.shared"] = as_tile "tile.mbarrier_arrive_expect_tx"
  handlers["nvvm.mbarrier.expect_tx.shared"] = as_tile "tile.mbarrier_expect_tx"
  handlers["nvvm.mbarrier.inval.shared"] = as_tile "tile.mbarrier_inval"

  -- Is the try_wait rec the test of a spin loop: scf.while whose before region
  -- is the try_wait, pure arith (and tileas.pragma knobs) and scf.condition(not
  -- result), whose after region only yields?
  local function is_spin(rec)
    if rec.spin ~= nil then return rec.spin end
    local op = rec.op
    local w = op:parent()
    local spin = false
    if w and w:name() == "scf.while" and w:nregions() == 2 then
      local before, after = w:region(1):blocks(), w:region(2):blocks()
      if #before == 1 and #after == 1 and #after[1]:ops() == 1 and before[1] == op:block() then
        local pure, cond = true, nil
        for _, o in ipairs(before[1]:ops()) do
          local n = o:name()
          if n == "scf.condition" then
            cond = o:operand(1)
          elseif o ~= op and not n:match "^arith%." and n ~= "tileas.pragma" then -- (a scheduler knob: no effect)
            pure = false
          end
        end
        local d = cond and cond:def()
        local r = op:result(1)
        if pure and d then
          local dn = d:name()
          if dn == "arith.xori" then
            local a, b = d:operand(1), d:operand(2)
            local other = (a == r and b) or (b == r and a) or nil
            local c = other and other:def()
            spin = c ~= nil and c:name() == "arith.constant" and (c:attr "value" == 1 or c:attr "value" == -1 or c:attr "value" == true)
          elseif dn == "arith.cmpi" and d:attr "predicate" == "eq" then
            local a, b = d:operand(1), d:operand(2)
            local other = (a == r and b) or (b == r and a) or nil
            local c = other and other:def()
            spin = c ~= nil and c:name() == "arith.constant" and (c:attr "value" == 0 or c:attr "value" == false)
          end
        end
      end
    end
    rec.spin = spin
    return spin
  end

  -- A probe (try_wait not in a spin loop, test_wait): 1 if the phase of
  -- `parity` completed, else 0; after a failure on a barrier, the warp's next
  -- probe of it blocks until the barrier's completed phases change.
  local function probe(R, W, rec, addr, parity)
    W.probe_failed = W.probe_failed or {}
    return R:request(W, rec, function()
      local b = W.cta.bars[addr]
      return b == nil or W.probe_failed[addr] ~= b.completed
    end, function()
      local b = R:bar(W, addr, rec)
      if passes(b, parity) then
        W.probe_failed[addr] = nil
        -- what the phase published becomes visible
        for k2, v in pairs(R:acquired(b, rec)) do
          if (W.vc[k2] or 0) < v then W.vc[k2] = v end
        end
        return 1
      end
      W.probe_failed[addr] = b.completed
      return 0
    end, function()
      local b = W.cta.bars[addr]
      return ("probes %s for parity %d again after a failed probe"):format(b and b.name or "?", parity)
    end)
  end
  handlers["nvvm.mbarrier.try_wait.parity.shared"] = function(R, W, rec, ins)
    local addr, parity = sh(uniform(rec, ins[1], "barrier")), uniform(rec, ins[2], "parity")
    if is_spin(rec) then
      R:wait(W, rec, addr, parity)
      return { 1 }
    end
    return { probe(R, W, rec, addr, parity) }
  end
  N.probes["nvvm.mbarrier.test_wait.parity.shared"] = true
  N.probes["nvvm.mbarrier.try_wait.parity.shared"] = function(op) return not is_spin { op = op } end
  handlers["nvvm.mbarrier.test_wait.parity.shared"] = function(R, W, rec, ins)
    return { probe(R, W, rec, sh(uniform(rec, ins[1], "barrier")), uniform(rec, ins[2], "parity")) }
  end

  -- }===

  -- {=== bulk copies

  local g2s, s2g = tile.handlers["tile.bulk_copy_g2s"], tile.handlers["tile.bulk_copy_s2g"]
  handlers["nvvm.cp.async.bulk.shared.cluster.global"] = function(R, W, rec, ins, ctx)
    return g2s(R, W, rec, { sh(ins[1]), ins[2], ins[3], sh(ins[4]) }, ctx)
  end
  handlers["nvvm.cp.async.bulk.global.shared.cta"] = function(R, W, rec, ins, ctx)
    return s2g(R, W, rec, { ins[1], sh(ins[2]), ins[3] }, ctx)
  end
  handlers["nvvm.cp.async.bulk.commit.group"] = tile.handlers["tile.bulk_commit"]
  handlers["nvvm.cp.async.bulk.wait_group"] = function(R, W, rec)
    R:drain_s2g(W, rec.op:attr_or_default "group")
    return {}
  end

  -- a thread's cp.async (the tile level's model)
  local cp_async = tile.handlers["tile.cp_async"]
  handlers["nvvm.cp.async.shared.global"] = function(R, W, rec, ins, ctx)
    return cp_async(R, W, rec, { sh(ins[1]), ins[2], ins[3] }, ctx)
  end
  handlers["nvvm.cp.async.commit.group"] = tile.handlers["tile.cp_async_commit"]
  handlers["nvvm.cp.async.wait.group"] = tile.handlers["tile.cp_async_wait"]

  -- }===

  -- {=== CTA and named barriers, fences

  handlers["nvvm.barrier0"] = tile.handlers["tile.barrier"] -- bar.sync 0, the CTA barrier
  -- bar.sync id[, count] and bar.arrive id, count: named barriers as at the tile
  -- level (Run:named_bar, with its count checks); bar.sync without a count is
  -- every thread of the block
  local named_sync = tile.handlers["tile.named_barrier_sync"]
  handlers["nvvm.barrier"] = function(R, W, rec, ins, ctx)
    return named_sync(R, W, rec, { ins[1], ins[2] or 32 * R.k.warps }, ctx)
  end
  handlers["nvvm.barrier.arrive"] = tile.handlers["tile.named_barrier_arrive"]
  -- warp shuffles and MUFU math: the tile level's models (the same attributes)
  handlers["nvvm.shfl.sync"] = tile.handlers["tile.shfl"]
  handlers["nvvm.vote.sync"] = tile.handlers["tile.vote"]
  handlers["nvvm.vote.ballot.sync"] = tile.handlers["tile.ballot"]
  handlers["nvvm.math.approx"] = tile.handlers["tile.math"]
  local function nop() return {} end
  -- (nvvm.fence: models/global.lua)
  for _, n in ipairs { "nvvm.fence.proxy.async", "nvvm.fence.mbarrier_init", "nvvm.nanosleep",
                       "tileas.pragma", -- a scheduler knob (tileas-insert-OCG-knobs): no effect on the program
                       "nvvm.griddepcontrol.wait", "nvvm.griddepcontrol.launch_dependents" } do
    handlers[n] = nop
  end
  handlers["nvvm.setmaxregister"] = require("tilua.emulate.models.mma").setmaxnreg -- (the register pool)

  -- }===

end

return N
