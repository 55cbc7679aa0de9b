-- tilua.emulate.sync: the run's synchronization objects (methods of the
-- machine's Run, emulate/machine.lua): mbarriers and their phases, the
-- rendezvous of CTA and named barriers, counters in global memory (generic
-- barriers), and bulk copies (an actor of their own).
--
-- Every arrive releases (the barrier's clock joins the arriver's), every wait
-- that passes acquires the phase it saw, a CTA barrier joins the warps, a bulk
-- copy starts with its issuer's clock and releases on the barrier it completes
-- on. A wait that passes on the wrong phase of a pipeline stage, an arrive
-- past the end of a phase, a use of an mbarrier not initialized (or whose
-- initialization is not ordered before the use) are violations (report.lua).

local address = require "tilua.emulate.address"
local core = require "tilua.core"
local clock = require "tilua.emulate.clock"
local report = require "tilua.emulate.report"

local SHARED_BASE, SLOT_BASE, DSMEM_BASE = address.SHARED_BASE, address.SLOT_BASE, address.DSMEM_BASE
local vc_copy, vc_join, vc_leq = clock.copy, clock.join, clock.leq
local violation = report.violation

local Sync = {}

-- {=== mbarriers

function Sync:barrier_name(cta, addr)
  local b = cta.bars[addr]
  if b and b.name then return b.name end
  if addr >= SLOT_BASE then return ("barrier slot %d"):format((addr - SLOT_BASE) // 8) end
  for _, a in ipairs(self.k.allocs) do
    local base = SHARED_BASE + a.offset
    if addr >= base and addr < base + math.max(a.size, 1) then
      return ("mbarrier %s[%d]"):format(a.loc, (addr - base) // 8)
    end
  end
  return ("mbarrier at shared offset %d"):format(addr - SHARED_BASE)
end

function Sync:init_barrier(W, addr, count, loc, name)
  local cta = W.cta
  local b = { addr = addr, count = count, pending = count, tx = 0, completed = 0, vc = {}, last_vc = {},
              mvc = {}, last_mvc = {}, cvc = {}, last_cvc = {}, init_actor = W.actor, init_clock = W.vc[W.actor], init_loc = loc }
  b.name = name or self:barrier_name(cta, addr)
  cta.bars[addr] = b
  cta.bar_list[#cta.bar_list + 1] = b
  W.vc[W.actor] = W.vc[W.actor] + 1
  return b
end

-- The CTA whose mbarrier a shared address names (a cluster address: the CTA
-- it maps to), the address in that CTA, and the synchronization object's key.
function Sync:bar_ref(W, addr)
  if addr >= DSMEM_BASE then
    local cta = self.ctas[((addr - DSMEM_BASE) >> 32) + 1]
    local a = SHARED_BASE + (addr & 0xffffffff)
    return cta, a, cta.id .. ":" .. a
  end
  return W.cta, addr, W.cta.id .. ":" .. addr
end

-- The mbarrier at addr, checked to be initialized before the user (actor a,
-- clock vc; W's by default). cta: the barrier's CTA when not W's (a multicast
-- copy's); a cluster address (a remote arrival) is checked as a DSMEM access
-- (Run:access).
function Sync:bar(W, addr, rec, a, vc, cta)
  if addr >= DSMEM_BASE then cta, addr = self:access(W, rec, addr, true) end
  cta = cta or W.cta
  local b = cta.bars[addr]
  if not b then
    violation("uninitialized", ("%s at %s uses %s, which is not initialized")
      :format(self:who(a or W.actor), rec.loc, self:barrier_name(cta, addr)))
  end
  a, vc = a or W.actor, vc or W.vc
  if b.init_actor ~= a and (vc[b.init_actor] or 0) < b.init_clock + 1 then
    violation("uninitialized", ("%s at %s uses %s, whose initialization by %s at %s is not ordered before the use (a missing barrier after the init)")
      :format(self:who(a), rec.loc, b.name, self:who(b.init_actor), b.init_loc))
  end
  return b
end

-- Does a wait for parity p pass? (the phase of that parity completed: the
-- current phase's parity differs)
function Sync.passes(b, p) return (b.completed & 1) ~= (p & 1) end
local passes = Sync.passes

-- Would an arrival of n on barrier-like b (pending, tx) complete its phase?
function Sync.completes_on(b, n) return b == nil or (b.pending <= n) end

function Sync:complete_phase(b)
  -- every wait that passed on the phase before must be ordered before this
  -- completion: else it could have come after it, seen the other parity and
  -- missed its phase (what lets the checker take passing waits eagerly)
  local obs = b.observers
  if obs then
    for _, e in ipairs(obs) do
      if (b.vc[e.actor] or 0) < e.clock then
        violation("phase", ("%s at %s passed its wait on %s at %d completed phase(s), and phase %d then completed with no arrival ordered after that wait: the wait could have come after the completion and missed the phase it waited for (phase aliasing)")
          :format(self:who(e.actor), e.loc, b.name, b.completed, b.completed + 1))
      end
    end
    b.obs_hist = b.obs_hist or {}
    b.obs_hist[b.completed] = obs -- for a warp that skips this phase (Sync:observe)
    b.observers = nil
  end
  -- so must every wait that could pass now and has not yet: this completion
  -- would make it miss its phase
  for _, X in ipairs(self.warps) do
    if X.waiting_at and X.cta.bars[X.waiting_at] == b and passes(b, X.wait_parity) then
      violation("phase", ("%s waits at %s on %s for parity %d, which passes at %d completed phase(s), and phase %d completes before that wait passed and with no arrival ordered after it: the wait misses the phase it waited for (phase aliasing)")
        :format(X.label, X.req.rec.loc, b.name, X.wait_parity, b.completed, b.completed + 1))
    end
  end
  b.completed = b.completed + 1
  b.pending, b.tx = b.count, 0
  b.last_vc, b.vc = b.vc, {}
  b.last_mvc, b.mvc, b.last_cvc, b.cvc = b.mvc, {}, b.cvc, {}
end

-- Scopes. What an arrival releases to the waiters of an mbarrier, on vector
-- clocks (the PTX memory model): a release and an acquire synchronize only
-- when they are morally strong, each one's scope holding the other's thread.
-- A waiter is in the barrier's CTA (try_wait reads shared::cta), so an arrival
-- from that CTA releases the arriving warp's clock (b.mvc, what a wait at
-- .cta scope acquires); one from another CTA (through mapa) does only at
-- .cluster scope and only to a wait at .cluster scope (b.cvc). Otherwise it
-- orders nothing the warp did through the generic proxy, only what is done by
-- then: the async-proxy operations it knows completed (rel_async: wgmma
-- operand reads that wgmma.wait_group completed, copies whose barrier it
-- waited on, bulk stores it waited for). A completed read cannot see a later
-- write, so that is what a producer's TMA write after its wait needs (the
-- cluster pipeline's .cta-scope releases, docs/protocol.md).
function Sync:mark_async(id) self.async_actors[id] = true end
-- The actor of warp W's wgmma operand reads (the async proxy's), made at its first wgmma.
function Sync:async_actor(W)
  if not W.async then
    W.async = self:new_actor()
    self.actors[W.async] = { label = "the wgmma of " .. W.label }
    self:mark_async(W.async)
  end
  return W.async
end
local function rel_async(R, vc)
  local r = {}
  for id, x in pairs(vc) do
    if R.async_actors[id] then r[id] = x end
  end
  return r
end
-- What W's arrival at `scope` (nil: .cta) on a barrier of CTA bcta releases:
-- nil, its clock to every waiter; else { cta = ..., cluster = ... }.
function Sync:release_of(W, bcta, scope)
  if bcta == W.cta then return nil end
  local async = rel_async(self, W.vc)
  if scope == "cluster" or scope == "gpu" or scope == "sys" then return { cta = async, cluster = W.vc } end
  return { cta = async, cluster = async }
end
-- Whether ops named `name` have a `scope` row (the mbarrier ops do; the
-- pipeline ops that wait and arrive through here too do not).
local has_scope_row = setmetatable({}, { __index = function(t, name)
  local info, found = core.op_info(name), false
  for _, row in ipairs(info and info.attributes or {}) do found = found or row.name == "scope" end
  t[name] = found
  return found
end })
-- The scope rec's arrive releases or its wait acquires at: its op's `scope`
-- row (nil, .cta, by default); .cta for an op without that row.
function Sync.bar_scope(rec)
  if rec.bar_scope == nil then
    rec.bar_scope = rec.op and has_scope_row[rec.name] and rec.op:attr_or_default "scope" or false
  end
  return rec.bar_scope or nil
end
-- What a wait (rec) acquires of b's last completed phase.
function Sync:acquired(b, rec)
  local s = Sync.bar_scope(rec)
  return (s == "cluster" or s == "gpu" or s == "sys") and b.last_cvc or b.last_mvc
end

-- Who arrived on which phase of b (the last four phases kept): what a deadlock
-- report names as the missing or extra arrival (report.lua, R.culprits).
local function log_arrival(b, phase, who, loc, what)
  local log = b.log
  if not log then
    log = {}
    b.log = log
  end
  log[phase - 4] = nil
  local l = log[phase]
  if not l then
    l = {}
    log[phase] = l
  end
  if #l < 64 then l[#l + 1] = { who = who, loc = loc, what = what } end
end

-- n arrivals on b by actor a (clock vc) at rec; expect: tx bytes first; rel:
-- what it releases to the waiters when not vc (Sync:release_of).
function Sync:arrive(b, n, a, vc, rec, expect, rel)
  log_arrival(b, b.completed, self:who(a), rec.loc, n > 1 and ("%d arrivals"):format(n) or nil)
  if expect then b.tx = b.tx + expect end
  vc_join(b.vc, vc)
  vc_join(b.mvc, rel and rel.cta or vc)
  vc_join(b.cvc, rel and rel.cluster or vc)
  for i = 1, n do
    if b.pending <= 0 then
      violation("arrive_count", ("%s at %s arrives on %s, whose phase %d has no arrival left (count %d)")
        :format(self:who(a), rec.loc, b.name, b.completed, b.count))
    end
    b.pending = b.pending - 1
    if b.pending == 0 and b.tx == 0 then
      self:complete_phase(b)
      if i < n then
        violation("arrive_count", ("%s at %s makes %d arrivals on %s at once, but phase %d completed after %d of them (count %d): the rest arrive on the next phase")
          :format(self:who(a), rec.loc, n, b.name, b.completed - 1, i, b.count))
      end
      vc_join(b.vc, vc)
      vc_join(b.mvc, rel and rel.cta or vc)
      vc_join(b.cvc, rel and rel.cluster or vc)
    end
  end
end

function Sync:complete_tx(b, bytes, a, vc)
  b.tx = b.tx - bytes
  vc_join(b.vc, vc)
  vc_join(b.mvc, vc)
  vc_join(b.cvc, vc)
  if b.pending == 0 and b.tx == 0 then self:complete_phase(b) end
end

-- Did warps whose waits are ordered before W's wait observe every phase of b
-- that completed since W's last (seen)? Then W may skip them: they completed
-- before W began to wait, so its parity cannot alias onto them.
local function skipped_known(W, b, seen)
  for j = seen + 1, b.completed - 1 do
    local ok = false
    for _, e in ipairs(b.obs_hist and b.obs_hist[j] or {}) do
      if e.actor ~= W.actor and (W.vc[e.actor] or 0) >= e.clock then ok = true break end
    end
    if not ok then return false end
  end
  return true
end

-- The per-(warp, barrier) phase check of a passing wait: successive waits of
-- one warp on one barrier see consecutive phases, or the phases in between
-- were observed by waits ordered before this one (skipped_known).
function Sync:observe(W, b, rec, expected, role_what)
  if expected and b.completed ~= expected then
    violation("phase", ("%s at %s passes its wait on %s having seen %d completed phase(s), but its %s needs exactly %d: the wait passed on the wrong phase")
      :format(W.label, rec.loc, b.name, b.completed, role_what, expected))
  end
  local seen = W.seen[b]
  if seen and not expected and b.completed > seen + 1 and skipped_known(W, b, seen) then
    seen = b.completed - 1 -- others consumed the phases in between (a ping-pong ring's other warpgroup)
  end
  if seen and not expected and b.completed ~= seen + 1 then
    violation("phase", ("%s at %s passes its wait on %s at %d completed phase(s), after it passed one at %d: %s")
      :format(W.label, rec.loc, b.name, b.completed, seen,
              b.completed == seen and "the same phase twice (the wait passed on the wrong phase)" or "a phase went by unobserved"))
  end
  W.seen[b] = b.completed
  vc_join(W.vc, self:acquired(b, rec))
  -- the wait is an event of its own, which the next completion must follow (complete_phase)
  W.vc[W.actor] = W.vc[W.actor] + 1
  b.observers = b.observers or {}
  b.observers[#b.observers + 1] = { actor = W.actor, clock = W.vc[W.actor], loc = rec.loc }
end

-- A blocking parity wait of warp W on the mbarrier at addr: a request ready
-- when it passes. expected: the completed phases its role needs (role_what
-- says which), checked by observe.
function Sync:wait(W, rec, addr, parity, expected, role_what)
  W.wait_addr = addr
  local b = W.cta.bars[addr]
  if b and not passes(b, parity) and W.seen[b] ~= b.completed and not vc_leq(b.last_vc, W.vc) then
    -- the barrier's last completion is not ordered before the warp got here:
    -- the wait could have come first, passed on the phase before, and been
    -- overtaken (what complete_phase reports in that order)
    violation("phase", ("%s reaches its wait at %s on %s for parity %d with %d phase(s) completed, but the last completion is not ordered before it: the wait could have come first, passed on phase %d and missed phase %d (phase aliasing)")
      :format(W.label, rec.loc, b.name, parity, b.completed, b.completed - 1, b.completed))
  end
  W.waiting_at, W.wait_parity = addr, parity
  self:request(W, rec, function()
    local b2 = W.cta.bars[addr]
    return b2 ~= nil and passes(b2, parity)
  end, function()
    local b2 = self:bar(W, addr, rec)
    self:observe(W, b2, rec, expected, role_what)
  end, function()
    local b2 = W.cta.bars[addr]
    if not b2 then return ("waits on %s (not initialized)"):format(self:barrier_name(W.cta, addr)) end
    return ("waits on %s for parity %d"):format(b2.name, parity)
  end, W.cta.id .. ":" .. addr, "rp")
  W.waiting_at = nil
end

-- }===

-- {=== rendezvous: CTA and named barriers

-- A rendezvous of `n` warps of a CTA on key (bar.sync, a group sync): arrive, then wait.
-- The wait, once it passes, stays passable and its generation cannot complete
-- again without this warp, unless a warp may arrive without waiting (bar.arrive
-- on a named barrier: the kernel has one). Then one warp's two arrivals can
-- complete a generation without another warp, and the generation an arrival
-- joins depends on the order: such an arrival ("ab") commutes with another
-- only while neither completes the generation, and neither it nor the wait is
-- taken eagerly (docs/protocol.md, "Which reduction holds for which object").
function Sync:rendezvous(W, rec, key, n, what, nowait)
  local cta = W.cta
  local s = cta.syncs[key]
  if not s then
    s = { gen = 0, arrived = 0, vc = {}, last_vc = {}, n = n, what = what }
    cta.syncs[key] = s
    cta.sync_list[#cta.sync_list + 1] = s
  end
  local gen
  local eager = not (self.k.bar_arrives and key:match "^bar ")
  self:request(W, rec, function() return true end, function()
    gen = s.gen
    log_arrival(s, gen, W.label, rec.loc, nowait and "arrive" or nil)
    s.arrived = s.arrived + 1
    vc_join(s.vc, W.vc)
    W.vc[W.actor] = W.vc[W.actor] + 1
    if s.arrived == s.n then
      s.gen, s.arrived, s.last_vc, s.vc = s.gen + 1, 0, s.vc, {}
    end
  end, function() return ("arrives at %s"):format(what) end, "s" .. cta.id .. key, eager and "ae" or "ab",
  function() return s.arrived + 1 >= s.n end)
  if nowait then return end
  W.wait_sync, W.wait_gen = s, gen
  self:request(W, rec, function() return s.gen > gen end, function()
    vc_join(W.vc, s.last_vc)
    W.wait_sync = nil
  end, function()
    return ("waits at %s: %d of %d warps arrived"):format(what, s.arrived, s.n)
  end, "s" .. cta.id .. key, eager and "re" or "r")
end

-- Named barriers (bar.sync / bar.arrive id, count): count threads, a warp
-- counts as 32; a barrier that more warps use than its count holds is a report.
function Sync:named_bar(W, rec, id, count, wait)
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

-- A word of global memory that synchronizes (a generic barrier's counter, a
-- spin loop's word): made at its first use, it carries the clock of its
-- releases and takes part in the state hash.
function Sync:gbar_at(addr)
  local g = self.gbars[addr]
  if not g then
    g = { vc = {} }
    self.gbars[addr] = g
    self.gbar_list[#self.gbar_list + 1] = addr
  end
  return g
end

-- }===

-- {=== bulk copies
--
-- A copy's bytes move as `c.write(R, W, c)` does (a TMA copy's box: its model
-- sets it), else plainly; a store's global footprint is `c.footprint(R, W, c,
-- f)` (f(addr, n) per range), else [dst, dst + bytes).

-- Copy c issued by warp W becomes an actor of its own: its clock is W's
-- (what W did before the issue is ordered before the copy) and its own first
-- step; W steps past the issue. -> c
function Sync:copy_actor(W, c)
  local id = self:new_actor()
  self:mark_async(id) -- an async-proxy operation (Sync:release_of)
  c.id, c.vc = id, vc_copy(W.vc)
  c.vc[id] = 1
  self.actors[id] = c
  W.vc[W.actor] = W.vc[W.actor] + 1
  return c
end

-- A bulk copy global -> shared in flight: an actor of its own; cta: the CTA it
-- writes and completes on, when not the issuer's (a TMA multicast). -> the copy
function Sync:issue_g2s(W, rec, dst, src, bytes, bar, cta)
  self.copy_seq = self.copy_seq + 1
  cta = cta or W.cta
  local c = { kind = "copy", dst = dst, src = src, bytes = bytes, bar = bar, rec = rec,
              W = W, cta = cta, seq = self.copy_seq, key = "c" .. self.copy_seq }
  c.label = ("bulk copy %d (from %s)"):format(self.copy_seq, W.label)
  c.obj = cta.id .. ":" .. bar
  self:copy_actor(W, c)
  self.copies[#self.copies + 1] = c
  cta.incoming = cta.incoming or {} -- checked at the CTA's exit (Run:resume)
  cta.incoming[#cta.incoming + 1] = c
  return c
end

local function write_g2s(R, _, c)
  local g, s = R.global, c.cta.shared
  for i = 0, c.bytes - 1 do s[c.dst + i] = g[c.src + i] or 0 end
end

function Sync:complete_g2s(c)
  local W = c.W
  c.done = true
  for i = #self.copies, 1, -1 do
    if self.copies[i] == c then table.remove(self.copies, i) end
  end
  local b = self:bar(W, c.bar, c.rec, c.id, c.vc, c.cta)
  log_arrival(b, b.completed, c.label, c.rec.loc, ("%d bytes"):format(c.bytes))
  if c.dst < SHARED_BASE then violation("model", c.rec.name .. " into global memory at " .. c.rec.loc) end
  if c.cta ~= W.cta then -- a multicast into another CTA: a DSMEM access of it (Run:access)
    if c.cta.exited then
      violation("dsmem", ("%s at %s writes the shared memory of CTA %d, which has exited (a missing cluster barrier before the exit)")
        :format(c.label, c.rec.loc, c.cta.id))
    end
    c.cta.remote[#c.cta.remote + 1] = { actor = c.id, clock = c.vc[c.id], loc = c.rec.loc, label = c.label }
  end
  self:shadow_write(c.cta, c.id, c.vc, c.dst, c.bytes, c.rec.loc)
  if self.values then (c.write or write_g2s)(self, W, c) end
  self:complete_tx(b, c.bytes, c.id, c.vc)
end

-- A copy shared -> global joins warp W's open bulk group (performed at its
-- wait); what: its name in reports. -> the copy
function Sync:issue_s2g(W, rec, dst, src, bytes, what)
  local c = self:copy_actor(W, { dst = dst, src = src, bytes = bytes, rec = rec,
                                 label = ("%s (from %s)"):format(what, W.label) })
  W.bulk_open[#W.bulk_open + 1] = c
  return c
end

local function write_s2g(R, W, c)
  local s, g = W.cta.shared, R.global
  for i = 0, c.bytes - 1 do g[c.dst + i] = s[c.src + i] or 0 end
end
local function footprint_s2g(_, _, c, f) f(c.dst, c.bytes) end

-- Performs the bulk shared -> global copies of groups (reads at wait time);
-- their global writes go through the race check as the copy's (two CTAs
-- storing one tile with no order between them is an `overwrite`).
function Sync:drain_s2g(W, keep)
  while #W.bulk_groups > keep do
    local grp = table.remove(W.bulk_groups, 1)
    for _, c in ipairs(grp) do
      self:shadow_read(W.cta, c.id, c.vc, c.src, c.bytes, c.rec.loc)
      ;(c.footprint or footprint_s2g)(self, W, c, function(a, n) self:shadow_write(self.gspace, c.id, c.vc, a, n, c.rec.loc, nil, nil, c.reduce) end)
      if self.values then (c.write or write_s2g)(self, W, c) end
      vc_join(W.vc, c.vc)
    end
  end
end

-- }===

return Sync
