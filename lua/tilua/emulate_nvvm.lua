-- tilua.emulate_nvvm: the emulator's handlers for the IR after lowering (the
-- nvvm ops of convert-cutlass-to-nvvm and convert-tile-to-nvvm, and the tile
-- ops those passes leave on the way), registered into emulate.lua's handler
-- table through emulate.extend; and check_lowering, the protocol checker run
-- on the input and after every pass of a pipeline (docs/protocol.md, "Lowered
-- IR and the check after every pass").
--
-- Shared memory at the nvvm level is addressed by i32 offsets in the shared
-- window: nvvm.shared.base is WINDOW, and an address a of the window is the
-- emulator's shared address SHARED_BASE + a - WINDOW (a tile-level shared
-- pointer turned into an i32 by tile.ptr_to_int becomes a window address, so
-- the two levels mix in the stages between the conversions). A shared::cluster
-- address naming another CTA's shared memory (what nvvm.mapa returns) is the
-- i32 CLUSTER + (CTA << 18) + offset, the emulator's DSMEM_BASE + (CTA << 32)
-- + offset (the offset of a CTA's shared window is below 2^18).
--
-- A spin loop `scf.while { %ok = nvvm.mbarrier.try_wait.parity %bar, %p; scf.condition (not %ok) }`
-- is a blocking wait: the warp blocks until the phase of that parity completed
-- (the failed tries change nothing, so they are not steps), and a deadlock
-- still shows. Any other try_wait / test_wait is a probe that answers whether
-- the phase completed; after a failed probe on a barrier the warp's next probe
-- of it blocks until the barrier's completed phases change (a loop of probes
-- waits instead of spinning forever).

local WINDOW = 0x400000 -- nvvm.shared.base
local CLUSTER = 0x40000000 -- the shared::cluster addresses of other CTAs (mapa)

-- {=====================================================================
-- check_lowering: the checker on the input and after every pass
-- ======================================================================

-- The passes of a pipeline spec (a named pipeline expanded), each with its options.
local function pass_list(core, spec, out)
  out = out or {}
  local named = {}
  for _, p in ipairs(core.pipelines()) do named[p.name] = p.passes end
  local depth, cur = 0, {}
  local function flush()
    local p = table.concat(cur):match "^%s*(.-)%s*$"
    cur = {}
    if p == "" then return end
    if named[p] then pass_list(core, named[p], out) else out[#out + 1] = p end
  end
  for c in spec:gmatch "." do
    if c == "{" then depth = depth + 1 elseif c == "}" then depth = depth - 1 end
    if c == "," and depth == 0 then flush() else cur[#cur + 1] = c end
  end
  flush()
  return out
end

-- The ops of op's regions in program order (pre-order, as the emulator decodes them).
local function preorder(op, f)
  for r = 1, op:nregions() do
    for _, b in ipairs(op:region(r):blocks()) do
      for _, o in ipairs(b:ops()) do
        f(o)
        preorder(o, f)
      end
    end
  end
end

local function loc_of(op)
  local file, line = op:loc()
  return file and (file .. ":" .. tostring(line)) or "?"
end

-- The roles of the warps ({[warp] = agent name}) of an authoring-level kernel.
local function roles_of(kop)
  local roles, next_warp = {}, 0
  preorder(kop, function(o)
    if o:name() == "tile.agent" then
      local wid = o:attr "warp_id"
      local first = (wid and wid >= 0) and wid or next_warp
      for w = first, first + o:attr "num_warps" - 1 do roles[w] = o:attr "name" or "agent" end
      next_warp = first + o:attr "num_warps"
    end
  end)
  return next(roles) and roles or nil
end

-- The shared allocations of a kernel laid out as the emulator (and the lowering) lays them out.
local function shared_layout(kop, codec_of)
  local out, smem = {}, 0
  preorder(kop, function(o)
    local n = o:name()
    if n == "tile.alloc_shared" or n == "tile.dynamic_shared" then
      local info = o:result(1):type():info()
      local size
      if n == "tile.dynamic_shared" then
        size = 0
      elseif info.kind == "memref" then
        size = codec_of(info.elem).size
        for _, d in ipairs(info.shape) do size = size * d end
      else
        size = (o:attr "count" or 1) * codec_of(info.elem).size
      end
      local align = o:attr "align" or 16
      smem = (smem + align - 1) // align * align
      out[#out + 1] = { offset = smem, size = size, loc = loc_of(o) }
      smem = smem + size
    end
  end)
  return #out > 0 and out or nil
end

local function check_lowering(M, x, k, o)
  local codec_of = x.codec_of
  local tl = require "tilua"
  local core = tl.core
  o = o or {}
  local module, name
  if type(k) == "table" and k.module then
    module, name = k.module, k.name
  else
    local kop = x.kernel_op(k)
    name = kop:attr "sym_name"
    module = kop:parent()
    while module and module:name() ~= "module" do module = module:parent() end
    if not module then error("check_lowering: the kernel is not in a module", 2) end
  end
  local m = module:clone()
  local function find()
    for _, op in ipairs(m:region(1):entry():ops()) do
      if op:name() == "tile.kernel" and op:attr "sym_name" == name then return op end
    end
    error(("check_lowering: kernel %s is gone from the module"):format(tostring(name)), 0)
  end
  local passes = pass_list(core, o.pipeline or tl.ptx_pipeline or "ptx")
  local roles = o.roles or roles_of(find())
  local names
  local copts = setmetatable({}, { __index = o })
  copts.roles = roles
  local res = { ok = true, stages = {}, passes = passes }
  local t0 = os.clock()
  local last_text, last
  local function stage(pass, index)
    local kop = find()
    if o.after_pass then
      o.after_pass(pass, index, kop, m)
      kop = find()
    end
    names = shared_layout(kop, codec_of) or names
    copts.shared_names = names
    local text = kop:print()
    local st = { name = pass, index = index }
    local r
    if text == last_text then
      r, st.unchanged = last, true
    else
      local ok, err = pcall(M.check, kop, copts)
      if not ok then error(("check_lowering: after %s: %s"):format(pass, tostring(err)), 0) end
      r = err
    end
    last_text, last = text, r
    st.ok, st.states, st.runs, st.seconds, st.report = r.ok, r.states, r.runs, r.seconds, r.report
    st.violation, st.trace, st.min_phases = r.violation, r.trace, r.min_phases
    res.stages[#res.stages + 1] = st
    return st
  end
  local function fail(st, report)
    res.ok, res.report, res.violation, res.trace = false, report, st.violation, st.trace
    res.budget_exceeded = st.violation and st.violation.kind == "budget" or nil
    res.seconds = os.clock() - t0
    return res
  end
  local st = stage("input", 0)
  if not st.ok then
    return fail(st, "check_lowering: the input's protocol is already incorrect: " .. st.report)
  end
  for i, pass in ipairs(passes) do
    local ok, msg = core.run_pipeline(m, pass, { verify = o.verify ~= false })
    if not ok then error(("check_lowering: pass %s failed: %s"):format(pass, tostring(msg)), 0) end
    st = stage(pass, i)
    if not st.ok then
      res.broken_by, res.broken_at = pass, i
      if st.violation.kind == "budget" then
        return fail(st, ("check_lowering: after %s the checker ran out of states: %s"):format(pass, st.report))
      end
      return fail(st, ("%s broke the protocol: %s"):format(pass, st.report))
    end
  end
  res.seconds = os.clock() - t0
  local lines = { ("check_lowering: the protocol holds on the input and after each of %d passes (%.2f s)"):format(#passes, res.seconds) }
  for _, s in ipairs(res.stages) do
    lines[#lines + 1] = ("  %d. %s: %s"):format(s.index, s.name,
      s.unchanged and "unchanged" or ("%d states, %d runs"):format(s.states, s.runs))
  end
  res.report = table.concat(lines, "\n")
  return res
end

-- }=====================================================================

return function(handlers, x)
  local M, request, eval_lanes, per_address = x.M, x.request, x.eval_lanes, x.per_address
  local uniform, at, varying, LV, passes = x.uniform, x.at, x.varying, x.LV, x.passes
  local codec_of, not_modelled = x.codec_of, x.not_modelled
  local SHARED_BASE, DSMEM_BASE = x.SHARED_BASE, x.DSMEM_BASE

  -- {=== addresses

  -- f applied to every lane of a (or to a uniform a)
  local function lanewise(f)
    return function(a)
      if not varying(a) then return f(a) end
      local o = setmetatable({}, LV)
      for l, v in pairs(a) do o[l] = f(v) end
      return o
    end
  end
  -- A shared-window or cluster-window address (or a tile-level shared address) -> the emulator's.
  local sh = lanewise(function(a)
    if a >= SHARED_BASE then return a end
    if a >= CLUSTER then return DSMEM_BASE + ((a - CLUSTER) >> 18 << 32) + ((a - CLUSTER) & 0x3ffff) end
    return SHARED_BASE + a - WINDOW
  end)
  -- The emulator's shared address -> the window's i32 (a DSMEM address: the cluster window's).
  local window = lanewise(function(a)
    if type(a) ~= "number" then return a end
    if a >= DSMEM_BASE then return CLUSTER + ((a - DSMEM_BASE) >> 32 << 18) + (a & 0xffffffff) end
    if a >= SHARED_BASE then return a - SHARED_BASE + WINDOW end
    return a
  end)
  x.nvvm_shared, x.nvvm_window = sh, window -- for emulate_nvvm_mma.lua
  local function i32_result(rec)
    if rec.i32 == nil then
      local info = rec.op:result(1):type():info()
      rec.i32 = info.kind == "int" and info.width == 32
    end
    return rec.i32
  end

  handlers["nvvm.shared.base"] = function() return { WINDOW } end
  -- a shared pointer taken to an i32 is a window address (the levels mix between the conversions)
  local ptr_to_int = handlers["tile.ptr_to_int"]
  handlers["tile.ptr_to_int"] = function(R, W, rec, ins, ctx)
    local outs = ptr_to_int(R, W, rec, ins, ctx)
    if i32_result(rec) then outs[1] = window(outs[1]) end
    return outs
  end
  local fragment = handlers["builtin.unrealized_conversion_cast"] -- register fragments (no operand)
  handlers["builtin.unrealized_conversion_cast"] = function(R, W, rec, ins, ctx)
    if rec.frag then return fragment(R, W, rec, ins, ctx) end
    if #rec.outs ~= 1 or #ins ~= 1 then not_modelled(rec) end
    if i32_result(rec) then return { window(ins[1]) } end
    return { ins[1] }
  end
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
  handlers[sreg .. "ctaid.x"] = const(function(_, W) return W.cta.id end)
  handlers[sreg .. "ctaid.y"], handlers[sreg .. "ctaid.z"] = zero, zero
  handlers[sreg .. "nctaid.x"] = const(function(R) return R.grid end)
  handlers[sreg .. "nctaid.y"], handlers[sreg .. "nctaid.z"] = one, one
  handlers[sreg .. "warpid"] = const(function(_, W) return W.w end)
  handlers[sreg .. "smid"] = const(function(_, W) return W.cta.id end)
  -- clusters along x (kernel_spec.cluster; CTAs c - c % size .. of one cluster, as emulate_tile.lua has them)
  handlers[sreg .. "clusterid.x"] = const(function(R, W) return W.cta.id // (R.k.cluster or 1) end)
  handlers[sreg .. "clusterid.y"], handlers[sreg .. "clusterid.z"] = zero, zero
  handlers[sreg .. "nclusterid.x"] = const(function(R) return R.grid // (R.k.cluster or 1) end)
  handlers[sreg .. "nclusterid.y"], handlers[sreg .. "nclusterid.z"] = one, one
  handlers[sreg .. "cluster.ctaid.x"] = handlers["tile.cluster_rank"]
  handlers[sreg .. "cluster.nctaid.x"] = handlers["tile.cluster_size"]
  for _, d in ipairs { "y", "z" } do
    handlers[sreg .. "cluster.ctaid." .. d] = zero
    handlers[sreg .. "cluster.nctaid." .. d] = one
  end
  handlers[sreg .. "cluster.ctarank"] = handlers["tile.cluster_rank"]
  handlers[sreg .. "cluster.nctarank"] = handlers["tile.cluster_size"]
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
  local atomic_f, atomic_update, atomic_cas = x.atomic_f, x.atomic_update, x.atomic_cas
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
    local h = assert(handlers[name], name)
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
    local groups, order = per_address(rec, { sh(ins[1]) }, ctx, 1)
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
    return request(W, rec, function()
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
  x.PROBES["nvvm.mbarrier.test_wait.parity.shared"] = true
  x.PROBES["nvvm.mbarrier.try_wait.parity.shared"] = function(op) return not is_spin { op = op } end
  handlers["nvvm.mbarrier.test_wait.parity.shared"] = function(R, W, rec, ins)
    return { probe(R, W, rec, sh(uniform(rec, ins[1], "barrier")), uniform(rec, ins[2], "parity")) }
  end

  -- }===

  -- {=== bulk copies

  local g2s, s2g = handlers["tile.bulk_copy_g2s"], handlers["tile.bulk_copy_s2g"]
  handlers["nvvm.cp.async.bulk.shared.cluster.global"] = function(R, W, rec, ins, ctx)
    return g2s(R, W, rec, { sh(ins[1]), ins[2], ins[3], sh(ins[4]) }, ctx)
  end
  handlers["nvvm.cp.async.bulk.global.shared.cta"] = function(R, W, rec, ins, ctx)
    return s2g(R, W, rec, { ins[1], sh(ins[2]), ins[3] }, ctx)
  end
  handlers["nvvm.cp.async.bulk.commit.group"] = handlers["tile.bulk_commit"]
  handlers["nvvm.cp.async.bulk.wait_group"] = function(R, W, rec)
    R:drain_s2g(W, rec.op:attr "group" or 0)
    return {}
  end

  -- }===

  -- {=== CTA and named barriers, fences

  handlers["nvvm.barrier0"] = handlers["tile.barrier"] -- bar.sync 0, the CTA barrier
  -- bar.sync id[, count] and bar.arrive id, count: named barriers as at the tile
  -- level (Run:named_bar, with its count checks); bar.sync without a count is
  -- every thread of the block
  local named_sync = handlers["tile.named_barrier_sync"]
  handlers["nvvm.barrier"] = function(R, W, rec, ins, ctx)
    return named_sync(R, W, rec, { ins[1], ins[2] or 32 * R.k.warps }, ctx)
  end
  handlers["nvvm.barrier.arrive"] = handlers["tile.named_barrier_arrive"]
  -- warp shuffles and MUFU math: the tile level's models (the same attributes)
  handlers["nvvm.shfl.sync"] = handlers["tile.shfl"]
  handlers["nvvm.math.approx"] = handlers["tile.math"]
  local function nop() return {} end
  for _, n in ipairs { "nvvm.fence", "nvvm.fence.proxy.async", "nvvm.fence.mbarrier_init", "nvvm.nanosleep",
                       "tileas.pragma", -- a scheduler knob (tileas-insert-OCG-knobs): no effect on the program
                       "nvvm.setmaxregister", "nvvm.griddepcontrol.wait", "nvvm.griddepcontrol.launch_dependents" } do
    handlers[n] = nop
  end

  -- }===

  M.check_lowering = function(k, o) return check_lowering(M, x, k, o) end
end
