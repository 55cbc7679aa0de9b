-- tilua.emulate.models.global: global memory as a synchronization medium between
-- CTAs, as the lowered generic barrier of the StreamK fixup uses it
-- (convert-cutlass-to-nvvm's lower_generic: arrive = fence.acq_rel.gpu then a
-- relaxed red.add on the counter; wait = a spin on a volatile load, or on a
-- CAS from v to 0, until the counter equals v, then fence.acq_rel.gpu).
-- A model of emulate/models/init.lua that layers the strong accesses over the
-- plain loads, stores and atomics of the tile and nvvm models (its `around`:
-- each a function of the plain handler; the registry applies them after those
-- models), and models the fences (docs/protocol.md, "The lowered generic
-- barrier").
--
-- The PTX memory model's release and acquire patterns, on vector clocks:
--   * a fence (tile.fence, nvvm.fence; acq_rel or sc) at scope s remembers the
--     warp's clock (its release) and acquires what the strong reads before it
--     read (below);
--   * a strong write to a global word (an atomic, a volatile store) releases
--     the warp's last fence's clock into the word, at the narrower of the two
--     scopes; the releases of a word accumulate (RMWs continue a release
--     sequence);
--   * a strong read of a global word (an atomic, a volatile load) takes the
--     word's releases whose scope holds both CTAs; the warp's next fence
--     acquires them (a relaxed read followed by a fence is an acquire).
-- Without the fence on either side nothing is ordered, so a fixup that reads a
-- peer's partials is then a race (`unfilled` / `overwrite`), as it is on the GPU.
-- Strong accesses are not race-checked (races between atomics are no races).
--
-- A spin loop on a global word,
--   scf.while { %v = <volatile load | CAS> %p ...; pure arith; scf.condition %c(%v) } do { [nanosleep;] scf.yield }
-- is a blocking wait: the warp does not move until the word's value ends the
-- loop, and the successful try is one step on the word (its failed tries
-- change nothing, so they are no steps). A wait never satisfied is then a
-- deadlock that names the spinning warp and the word, not a livelock. The
-- first strong write after a fence (the arrive's red.add) is a step of its
-- own on the word too, so the checker orders arrivals against waits; the
-- words take part in the state hash.

local lanes = require "tilua.emulate.lanes"
local address = require "tilua.emulate.address"
local values = require "tilua.emulate.values"
local clock = require "tilua.emulate.clock"
local interp = require "tilua.emulate.interp"

local at, LV, codec_of = lanes.at, lanes.LV, values.codec_of
local vc_join, vc_copy, compile_arith = clock.join, clock.copy, interp.compile
local SHARED_BASE = address.SHARED_BASE

local handlers, around = {}, {}
local G = { handlers = handlers, around = around, cross_cta = {} }

do

  -- {=== scopes and the release / acquire patterns

  local RANK = { cta = 1, cluster = 2, gpu = 3, sys = 4 }
  local function narrower(a, b) return (RANK[a] or 3) <= (RANK[b] or 3) and a or b end
  -- Do CTAs a and b lie in one instance of scope s?
  local function covers(R, s, a, b)
    if s == "cta" then return a == b end
    if s == "cluster" then
      local n = R.k.cluster or 1
      return a.id // n == b.id // n
    end
    return true
  end

  local function fence(R, W, scope)
    local p = W.acquiring
    if p then
      for _, e in ipairs(p) do
        if covers(R, scope, e.cta, W.cta) then vc_join(W.vc, e.vc) end
      end
      W.acquiring = nil
    end
    W.release = { vc = vc_copy(W.vc), scope = scope }
    W.vc[W.actor] = W.vc[W.actor] + 1 -- what follows the fence is not released by it
  end

  -- a strong write of the word at addr (scope s): what the warp's last fence ordered is released into it
  local function release_into(R, W, addr, s)
    local f = W.release
    if not f then return end
    R.releases = R.releases or {}
    local l = R.releases[addr]
    if not l then
      l = {}
      R.releases[addr] = l
    end
    l[#l + 1] = { vc = f.vc, cta = W.cta, scope = narrower(f.scope, s) }
  end

  -- a strong read of the word at addr (scope s): its releases, for the warp's next fence to acquire
  local function read_from(R, W, addr, s)
    local l = R.releases and R.releases[addr]
    if not l then return end
    local p = W.acquiring or {}
    W.acquiring = p
    for _, e in ipairs(l) do
      if covers(R, narrower(e.scope, s), e.cta, W.cta) then p[#p + 1] = e end
    end
  end

  local function scope_of(rec)
    if rec.scope == nil then rec.scope = rec.op:attr_or_default "scope" end
    return rec.scope
  end

  -- }===

  -- {=== spin loops on a global word

  local TESTS = { ["nvvm.ld.global"] = "load", ["nvvm.ld"] = "load", ["tile.load"] = "load",
                  ["nvvm.atom.cas.global"] = "cas", ["tile.atomic_cas"] = "cas" }

  -- The spin loop w (an scf.while) as { read = its test op, steps = the pure
  -- ops after it, cond = the condition's value id, out = the test's result id },
  -- or nil: no operands or results, the before region a volatile load or a
  -- CAS, pure arith and a condition that depends on the test's result, the
  -- after region only a nanosleep (backoff), pure arith and the yield.
  local function spin_info(w)
    if w:name() ~= "scf.while" or w:nregions() ~= 2 or w:noperands() ~= 0 or w:nresults() ~= 0 then return nil end
    local before, after = w:region(1):blocks(), w:region(2):blocks()
    if #before ~= 1 or #after ~= 1 or #before[1]:args() ~= 0 then return nil end
    for _, o in ipairs(after[1]:ops()) do
      local n = o:name()
      if n ~= "scf.yield" and n ~= "nvvm.nanosleep" and not n:match "^arith%." then return nil end
    end
    local read, cond, steps = nil, nil, {}
    for _, o in ipairs(before[1]:ops()) do
      local n = o:name()
      local t = TESTS[n]
      if t and not read and (t == "cas" or o:attr "volatile") then
        read = o
      elseif n == "scf.condition" then
        if o:noperands() ~= 1 then return nil end
        cond = o:operand(1):id()
      elseif n:match "^arith%." then
        if read then steps[#steps + 1] = o end
      else
        return nil
      end
    end
    if not read or not cond then return nil end
    local out = read:result(1):id()
    local from_read = { [out] = true } -- the values the test's result flows into
    local compiled = {}
    for i, o in ipairs(steps) do
      local ins = {}
      for j, v in ipairs(o:operands()) do
        ins[j] = v:id()
        if from_read[ins[j]] then from_read[o:result(1):id()] = true end
      end
      compiled[i] = { f = compile_arith(o), ins = ins, out = o:result(1):id() }
    end
    if not from_read[cond] then return nil end
    return { read = read, steps = compiled, cond = cond, out = out, kind = TESTS[read:name()] }
  end
  G.cross_cta["scf.while"] = function(op) return spin_info(op) ~= nil end
  -- With claims = "dynamic", an atomic whose old value is read (a claim:
  -- claim_step below) orders the CTAs too: they no longer run one cluster at
  -- a time (as models/tileas.lua's dynamic claims).
  local CLAIMS = { ["tile.atomic"] = true, ["nvvm.atom.global"] = true }
  G.kernel_decoders = { function(dk, kop)
    local claims = false
    kop:walk(function(op)
      claims = claims or (CLAIMS[op:name()] and op:nresults() > 0 and op:result(1):nuses() > 0)
    end)
    if not claims then return end
    local before = dk.on_start
    dk.on_start = function(R)
      if before then before(R) end
      if R.o.claims == "dynamic" then R.k.cluster_local = false end
    end
  end }

  -- rec's loop, when rec is the test of a spin loop on a global word
  local function spin_of(rec)
    if rec.gspin == nil then
      local w = rec.op:parent()
      local s = w and spin_info(w)
      rec.gspin = (s and s.read == rec.op) and s or false
    end
    return rec.gspin
  end

  -- Does the loop's next try end it (in every active lane), or change memory
  -- (a CAS that swaps), with the words now in memory? A try that does neither
  -- changes nothing: no step.
  local function moves(R, W, s, codec, addrs, ctx, expected)
    local peek, all_end = { codec = codec }, true
    for _, l in ipairs(ctx.mask) do
      local word = R:load(W, peek, addrs[l], true)
      if expected and word == at(expected, l) then return true end
      local env = { [s.out] = word } -- a CAS's old value is the word too
      for _, st in ipairs(s.steps) do
        local a, b, c = st.ins[1], st.ins[2], st.ins[3]
        local function v(id)
          if id == nil then return nil end
          local e = env[id]
          if e == nil then e = at(W.vals[id], l) end
          return e
        end
        env[st.out] = st.f(v(a), v(b), v(c))
      end
      local c = env[s.cond]
      if c == nil then c = at(W.vals[s.cond], l) end
      if c ~= 0 then all_end = false end
    end
    return all_end
  end

  -- The test of a spin loop on global words: wait until its try would end the
  -- loop or swap (a step on the word); the caller then runs the try.
  -- expected: a CAS's compare operand.
  local function spin_wait(R, W, rec, ctx, addrs, codec, expected)
    local s = spin_of(rec)
    if not s then return end
    local one = addrs[ctx.mask[1]]
    for _, l in ipairs(ctx.mask) do
      if addrs[l] ~= one then one = nil end
    end
    for _, l in ipairs(ctx.mask) do R:gbar_at(addrs[l]) end -- the words join the state hash
    R:request(W, rec, function() return moves(R, W, s, codec, addrs, ctx, expected) end, function() end, function()
      local peek = { codec = codec }
      return ("spins until the global word at 0x%x (now %d) ends the loop"):format(addrs[ctx.mask[1]],
        R:load(W, peek, addrs[ctx.mask[1]], true))
    end, one and ("g" .. one), one and (s.kind == "cas" and "wg" or "rg") or (s.kind == "cas" and "w" or "r"))
  end

  -- A step of warp W on the global words of addrs (one object where every
  -- lane's is the same word; acc when it is one, any_acc when not): the words
  -- join the state hash; what(addr) describes it.
  local function word_step(R, W, rec, ctx, addrs, what, acc, any_acc)
    local one = addrs[ctx.mask[1]]
    for _, l in ipairs(ctx.mask) do
      if addrs[l] ~= one then one = nil end
      R:gbar_at(addrs[l])
    end
    R:request(W, rec, function() return true end, function() end, function() return what(addrs[ctx.mask[1]]) end,
      one and ("g" .. one), one and acc or any_acc)
  end

  -- The first strong write after a fence (a release) is a step on its word.
  local function release_step(R, W, rec, ctx, addrs)
    local f = W.release
    if not f or f.stepped then return end
    f.stepped = true
    word_step(R, W, rec, ctx, addrs, function(a) return ("releases into the global word at 0x%x"):format(a) end, "ag", "a")
  end

  -- With claims = "dynamic" (tl.emulate, tl.verify_protocol: as for a tile
  -- program's claims, models/tileas.lua) an atomic whose old value the
  -- program reads (a claim of the next work tile: the dynamic scheduler's
  -- counter) is a step on its word of its own: which warp's comes first
  -- changes what each one reads, so the checker explores their orders (one
  -- whose value is dropped commutes with the others). Not eager (a generic
  -- barrier's "wg"): every order is explored. Without it (the check after
  -- every pass) the atomics run in the order the warps do: one assignment.
  local function claim_step(R, W, rec, ctx, addrs)
    if R.o.claims ~= "dynamic" then return end
    if rec.claims == nil then rec.claims = rec.op:nresults() > 0 and rec.op:result(1):nuses() > 0 end
    if not rec.claims then return end
    word_step(R, W, rec, ctx, addrs, function(a) return ("reads and writes the global word at 0x%x (an atomic)"):format(a) end,
      "w", "w")
  end

  -- }===

  -- {=== the strong accesses: every active lane's address, or nil where one is not global

  local function global_addrs(ins, ctx)
    local addrs = {}
    for _, l in ipairs(ctx.mask) do
      local a = at(ins[1], l)
      if type(a) ~= "number" or a >= SHARED_BASE then return nil end
      addrs[l] = a
    end
    return addrs
  end
  local function is_volatile(rec)
    if rec.volatile == nil then rec.volatile = rec.op:attr "volatile" == true end
    return rec.volatile
  end

  -- volatile loads: strong reads (relaxed at system scope); the test of a spin loop waits first
  local function load(base)
    return function(R, W, rec, ins, ctx)
      local addrs = is_volatile(rec) and global_addrs(ins, ctx)
      if not addrs then return base(R, W, rec, ins, ctx) end
      rec.per_lane = true
      rec.codec = rec.codec or codec_of(rec.op:result(1):type())
      spin_wait(R, W, rec, ctx, addrs, rec.codec)
      local out = setmetatable({}, LV)
      for _, l in ipairs(ctx.mask) do
        out[l] = R:load(W, rec, addrs[l], true)
        read_from(R, W, addrs[l], "sys")
      end
      return { out }
    end
  end
  -- volatile stores: strong writes; value, address = ins[vi], ins[ai]
  local function store(base, vi, ai)
    return function(R, W, rec, ins, ctx)
      local addrs = is_volatile(rec) and global_addrs({ ins[ai] }, ctx)
      if not addrs then return base(R, W, rec, ins, ctx) end
      rec.codec = rec.codec or codec_of(rec.op:operand(vi):type())
      release_step(R, W, rec, ctx, addrs)
      for _, l in ipairs(ctx.mask) do
        R:store(W, rec, addrs[l], at(ins[vi], l), true)
        release_into(R, W, addrs[l], "sys")
      end
      return {}
    end
  end
  -- atomics: strong reads and writes at their scope; a CAS writes only where it succeeded
  local function rmw(base, cas)
    return function(R, W, rec, ins, ctx)
      local addrs = global_addrs(ins, ctx)
      if not addrs then return base(R, W, rec, ins, ctx) end
      local scope = scope_of(rec)
      if cas then
        rec.codec = rec.codec or codec_of(rec.op:result(1):type())
        spin_wait(R, W, rec, ctx, addrs, rec.codec, ins[2])
      else
        claim_step(R, W, rec, ctx, addrs)
      end
      release_step(R, W, rec, ctx, addrs)
      for _, l in ipairs(ctx.mask) do read_from(R, W, addrs[l], scope) end
      local outs = base(R, W, rec, ins, ctx)
      for _, l in ipairs(ctx.mask) do
        if not cas or at(outs[1], l) == at(ins[2], l) then release_into(R, W, addrs[l], scope) end
      end
      return outs
    end
  end
  local function fence_handler(R, W, rec)
    fence(R, W, scope_of(rec))
    return {}
  end

  around["tile.load"], around["nvvm.ld.global"], around["nvvm.ld"] = load, load, load
  around["tile.store"] = function(base) return store(base, 1, 2) end
  around["nvvm.st.global"] = function(base) return store(base, 2, 1) end
  around["nvvm.st"] = around["nvvm.st.global"]
  around["tile.atomic"] = function(base) return rmw(base, false) end
  around["tile.atomic_cas"] = function(base) return rmw(base, true) end
  around["nvvm.atom.global"], around["nvvm.red.global"] = around["tile.atomic"], around["tile.atomic"]
  around["nvvm.atom.cas.global"] = around["tile.atomic_cas"]
  handlers["tile.fence"], handlers["nvvm.fence"] = fence_handler, fence_handler

  -- }===
end

return G
