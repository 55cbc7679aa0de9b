-- The checker's reductions never hide a violation (docs/protocol.md, "Which
-- reduction holds for which object"): many small random kernels over named
-- barriers (bar.sync and bar.arrive), mbarriers with transaction bytes and
-- bulk copies, the cluster barrier and generic barriers in global memory, with
-- shared-memory reads and writes between them, are checked without any
-- reduction and with each; wherever the check without reductions finds a
-- violation, every reduction must find one too. Fixed seeds: the same kernels
-- on every run.
local H = dofile "spec/helper.lua"
local tl = require "tilua"

-- xorshift32 (the emulator's random policy's): the same kernels on every run
local rng = require("tilua.emulate.search").rng

-- A random kernel: a plan (per warp, a list of steps; every CTA runs the
-- same) made from a correct protocol of one family, then, mostly, one mutation.
local function step(op, t) t = t or {}; t.op = op; return t end

local TEMPLATES = {}
-- a fixed writer warp fills a slot, the others read it: named barrier 1 says
-- "filled" (the writer arrives or syncs), barrier 2 "read" (the readers arrive)
function TEMPLATES.named(r, p)
  local wr = r(p.warps)
  for round = 0, r(3) - 1 do
    local s = round & 1
    for w = 1, p.warps do
      local prog = p.progs[w]
      if w == wr then
        prog[#prog + 1] = step("write", { slot = s })
        prog[#prog + 1] = step(r(2) == 1 and "narrive" or "nsync", { id = 1 })
        prog[#prog + 1] = step("nsync", { id = 2 })
      else
        prog[#prog + 1] = step("nsync", { id = 1 })
        prog[#prog + 1] = step("read", { slot = s })
        prog[#prog + 1] = step("narrive", { id = 2 })
      end
    end
  end
end
-- the same with one barrier that every warp syncs on twice a round (one slot or two)
function TEMPLATES.named1(r, p)
  local wr, slots = r(p.warps), r(2)
  for round = 0, r(4) - 1 do
    local s = round % slots
    for w = 1, p.warps do
      local prog = p.progs[w]
      if w == wr then prog[#prog + 1] = step("write", { slot = s }) end
      prog[#prog + 1] = step("nsync", { id = 1 })
      if w ~= wr then prog[#prog + 1] = step("read", { slot = s }) end
      prog[#prog + 1] = step("nsync", { id = 1 })
    end
  end
end
-- one stage: full (1 arrival, or the bytes of a bulk copy), empty (one per reader warp)
function TEMPLATES.mbar(r, p)
  local wr, tx = r(p.warps), r(2) == 1
  p.counts = { 1, p.warps - 1 }
  for round = 0, r(3) - 1 do
    for w = 1, p.warps do
      local prog = p.progs[w]
      if w == wr then
        if round > 0 then prog[#prog + 1] = step("mwait", { bar = 2, parity = (round - 1) & 1 }) end
        if tx then
          prog[#prog + 1] = step("mtx", { bar = 1, slot = 0, bytes = 64 })
        else
          prog[#prog + 1] = step("write", { slot = 0 })
          prog[#prog + 1] = step("marrive", { bar = 1 })
        end
      else
        prog[#prog + 1] = step("mwait", { bar = 1, parity = round & 1 })
        prog[#prog + 1] = step(tx and "readland" or "read", { slot = 0 })
        prog[#prog + 1] = step("marrive", { bar = 2 })
      end
    end
  end
end
-- every warp writes its slot, the cluster syncs, each reads its neighbour's
function TEMPLATES.cluster(r, p)
  p.grid, p.cluster = 2, 2
  for w = 1, p.warps do
    local prog = p.progs[w]
    prog[#prog + 1] = step("write", { slot = w - 1 })
    if r(2) == 1 then
      prog[#prog + 1] = step("csync")
    else
      prog[#prog + 1] = step("carrive")
      prog[#prog + 1] = step("cwait")
    end
    prog[#prog + 1] = step("read", { slot = w % p.warps })
    prog[#prog + 1] = step("csync")
  end
end
-- a turnstile over the CTAs in global memory: CTA c waits for the counter to
-- reach c, reads and writes a global word, and increments the counter
function TEMPLATES.generic(r, p)
  p.grid = 1 + r(2)
  local prog = p.progs[r(p.warps)]
  prog[#prog + 1] = step("gwait", { delta = 0 })
  prog[#prog + 1] = step("gread")
  prog[#prog + 1] = step("gwrite")
  prog[#prog + 1] = step("garrive")
end
local FAMILY_NAMES = { "named", "named1", "mbar", "cluster", "generic" }

-- One random change that may break the protocol (-> what it did).
local function mutate(r, p)
  local w = r(p.warps)
  local prog = p.progs[w]
  local i = r(#prog)
  local st = prog[i]
  local what = r(p.counts[1] and 4 or 3)
  if p.family:match "^named" and r(2) == 1 then -- mostly bugs in a loop's body (below)
    local ids = {}
    for j, x in ipairs(prog) do if x.id then ids[#ids + 1] = j end end
    if #ids > 0 then i, what = ids[r(#ids)], 3 end
    st = prog[i]
  end
  if what == 1 or #prog == 1 then
    table.remove(prog, i)
    return ("warp %d: step %d (%s) deleted"):format(w - 1, i, st.op)
  elseif what == 2 then
    local j = i < #prog and i + 1 or i - 1
    prog[i], prog[j] = prog[j], prog[i]
    return ("warp %d: steps %d and %d swapped"):format(w - 1, i, j)
  elseif what == 3 and st.id and r(3) > 1 then
    -- a bug in a loop's body: every round's step in this place (every other
    -- use of this barrier by this warp)
    local from, to = st.op, st.op == "nsync" and "narrive" or "nsync"
    local n, mine = 0, 0
    for _, x in ipairs(prog) do
      if x.op == from and x.id == st.id then
        n = n + 1
        if x == st then mine = n end
      end
    end
    n = 0
    for _, x in ipairs(prog) do
      if x.op == from and x.id == st.id then
        n = n + 1
        if n % 2 == mine % 2 then x.op = to end
      end
    end
    return ("warp %d: every other %s of barrier %d from step %d changed to %s"):format(w - 1, from, st.id, i, to)
  elseif what == 3 then
    if st.op == "nsync" then st.op = "narrive" elseif st.op == "narrive" then st.op = "nsync"
    elseif st.parity then st.parity = 1 - st.parity
    elseif st.bytes then st.bytes = 32
    elseif st.delta then st.delta = 1
    elseif st.op == "csync" then st.op = "carrive"
    elseif st.slot then st.slot = 2
    else
      table.remove(prog, i)
      return ("warp %d: step %d (%s) deleted"):format(w - 1, i, st.op)
    end
    return ("warp %d: step %d changed to %s"):format(w - 1, i, st.op)
  end
  local b = r(#p.counts)
  p.counts[b] = math.max(1, p.counts[b] + (r(2) == 1 and 1 or -1))
  return ("mbarrier %d counts %d"):format(b, p.counts[b])
end

local function plan(r)
  local fam = FAMILY_NAMES[r(#FAMILY_NAMES)]
  local p = { family = fam, warps = 1 + r(2), grid = 1, cluster = nil, progs = {}, counts = {} }
  -- kernels of several CTAs: fewer warps (the search without reductions multiplies them)
  if fam == "cluster" then p.warps = r(3) == 1 and 2 or 1 elseif fam == "generic" then p.warps = 1 end
  for w = 1, p.warps do p.progs[w] = {} end
  TEMPLATES[fam](r, p)
  p.mutation = r(4) == 1 and "none" or mutate(r, p)
  return p
end

local function describe_plan(p)
  local out = { ("%s, %d warps, grid %d, mbarrier counts {%s}, mutation: %s"):format(p.family, p.warps, p.grid,
    table.concat(p.counts, ", "), p.mutation) }
  for w, prog in ipairs(p.progs) do
    local s = {}
    for _, st in ipairs(prog) do
      local args = {}
      for _, f in ipairs { "id", "bar", "slot", "parity", "bytes", "delta" } do
        if st[f] then args[#args + 1] = f .. "=" .. st[f] end
      end
      s[#s + 1] = st.op .. (#args > 0 and ("(" .. table.concat(args, ",") .. ")") or "")
    end
    out[#out + 1] = ("  warp %d: %s"):format(w - 1, table.concat(s, " "))
  end
  return table.concat(out, "\n")
end

local function build(p)
  tl.new_module()
  local nt = 32 * p.warps
  local k = tl.kernel("random", { params = { { "out", tl.ptr(tl.i32) }, { "src", tl.ptr(tl.u8) },
                                             { "lock", tl.ptr(tl.i32) } },
                                  block = nt, cluster = p.cluster })
  k:define(function(k, a)
    local buf = k:shared(tl.i32, 3 * 32, { align = 16 })
    local land = k:shared(tl.i32, 2 * 16, { align = 128 })
    local bars = k:shared(tl.i64, 2, { align = 8 })
    if p.cluster or p.counts[1] then -- the inits, ordered before every use
      tl.if_(tl.thread_id():eq(0), function()
        for b, n in ipairs(p.counts) do tl.mbarrier_init(bars + (b - 1), n) end
        tl.fence_mbarrier_init()
      end)
      if p.cluster then tl.cluster_sync() else tl.barrier() end
    end
    local lane = tl.lane_id()
    local cta = tl.block_id()
    for w, prog in ipairs(p.progs) do
      local mine = a.out + (cta * p.warps + (w - 1)) * 16 * 32 + lane
      tl.if_(tl.warp_id():eq(w - 1), function()
        for i, st in ipairs(prog) do
          local op, bar = st.op, bars + ((st.bar or 1) - 1)
          if op == "nsync" then tl.named_barrier_sync(st.id, nt)
          elseif op == "narrive" then tl.named_barrier_arrive(st.id, nt)
          elseif op == "write" then (buf + st.slot * 32 + lane):store((lane + i) * 3 + 1) -- (data only: the slice's)
          elseif op == "read" then (mine + i * 32):store((buf + st.slot * 32 + lane):load() * 5 + 2)
          elseif op == "readland" then
            tl.if_(lane:lt(16), function() (mine + i * 32):store((land + st.slot * 16 + lane):load()) end)
          elseif op == "marrive" then tl.elect_one(function() tl.mbarrier_arrive(bar) end)
          elseif op == "mwait" then tl.mbarrier_wait(bar, st.parity)
          elseif op == "mtx" then
            tl.elect_one(function()
              tl.mbarrier_arrive_expect_tx(bar, 64)
              tl.bulk_copy(land + st.slot * 16, a.src, st.bytes, bar)
            end)
          elseif op == "carrive" then tl.cluster_arrive()
          elseif op == "cwait" then tl.cluster_wait()
          elseif op == "csync" then tl.cluster_sync()
          elseif op == "garrive" then tl.elect_one(function() tl.generic_barrier.arrive_inc(a.lock, 0) end)
          elseif op == "gwait" then tl.elect_one(function() tl.generic_barrier.wait_eq(a.lock, 0, cta + st.delta) end)
          elseif op == "gread" then (mine + i * 32):store((a.out + 8192 + lane):load())
          elseif op == "gwrite" then (a.out + 8192 + lane):store(cta)
          end
        end
      end)
    end
    if p.cluster then tl.cluster_sync() end
  end)
  return k
end

-- What each reduction is checked against: the search with none (por = false
-- turns off sleep sets, eager steps and one cluster at a time; data_slice =
-- false computes every op a protocol-only run would leave out).
local NONE = { por = false, symmetry = false, data_slice = false }
local REDUCTIONS = {
  { name = "the data slice", o = { por = false, symmetry = false } },
  { name = "sleep sets", o = { eager = false, symmetry = false, clusters = false } },
  { name = "sleep sets and eager steps", o = { symmetry = false, clusters = false } },
  { name = "sleep sets and one cluster at a time", o = { eager = false, symmetry = false } },
  { name = "symmetry", o = { por = false } },
  { name = "all", o = {} },
}

local function check(k, p, o)
  local opts = { grid = p.grid, args = { { bytes = 4 * 8192 + 128 }, ("\7"):rep(64), { bytes = 16 } },
                 max_states = 3000, max_work = 6000000, max_steps = 5000, shortest = false }
  for key, v in pairs(o) do opts[key] = v end
  local ok, r = pcall(tl.verify_protocol, k, opts)
  if not ok then return { error = r } end
  return r
end

describe("the checker's reductions", function()
  it("never hide a violation that the search without them finds (random kernels, fixed seeds)", function()
    local r = rng(20261128)
    local kernels, violating, skipped, hidden = 0, 0, 0, {}
    local kinds = {}
    local t0 = os.clock()
    local only = tonumber(os.getenv "REDUCTION_ONLY" or "") -- one kernel, by its number
    for i = 1, 300 do
      local p = plan(r)
      if only and i ~= only then goto next end
      local k = build(p)
      local tk = os.clock()
      local base = check(k, p, NONE)
      if os.getenv "REDUCTION_TRACE" then -- each kernel, its time and verdict
        io.stderr:write(("%.2f s %s %s\n%s\n"):format(os.clock() - tk, base.ok, base.violation and base.violation.kind
          or base.error or "", describe_plan(p)))
      end
      kernels = kernels + 1
      if base.error or base.budget_exceeded then
        skipped = skipped + 1
      elseif not base.ok then
        violating = violating + 1
        kinds[base.violation.kind] = (kinds[base.violation.kind] or 0) + 1
        for _, red in ipairs(REDUCTIONS) do
          local got = check(k, p, red.o)
          if got.ok then
            hidden[#hidden + 1] = ("%s hides the %s found without reductions in\n%s\n%s"):format(red.name,
              base.violation.kind, describe_plan(p), base.report)
          end
        end
      end
      ::next::
    end
    local ks = {}
    for kind, n in pairs(kinds) do ks[#ks + 1] = kind .. " " .. n end
    table.sort(ks)
    print(("%d kernels, %d with a violation (%s), %d skipped, %.1f s"):format(kernels, violating,
      table.concat(ks, ", "), skipped, os.clock() - t0))
    assert(#hidden == 0, table.concat(hidden, "\n\n"))
    assert.is_true(violating >= 30, "too few violating kernels to mean anything")
    assert.is_true(kernels - violating - skipped >= 20, "too few clean kernels to mean anything")
  end)

  -- One warp's bar.arrive where bar.sync was needed: in some schedules it
  -- arrives twice on one generation, completing it without the other warp, and
  -- the other warp then waits forever (a named-barrier hang of CUTLASS-based
  -- attention kernels). Taking two arrivals on one named barrier as commuting
  -- hid it.
  local function arrive_for_sync(buggy)
    tl.new_module()
    local k = tl.kernel("nb", { params = { { "out", tl.ptr(tl.i32) } }, block = 64 })
    k:define(function(k, p)
      local buf = k:shared(tl.i32, 32)
      local l = tl.lane_id()
      tl.if_(tl.warp_id():eq(0), function()
        tl.for_range(0, 4, function(i)
          (buf + l):store(tl.cast(i, tl.i32))
          tl.named_barrier_sync(1, 64)
          tl.named_barrier_sync(1, 64)
        end)
      end, function()
        tl.for_range(0, 4, function()
          tl.named_barrier_sync(1, 64)
          ;(p.out + l):store((buf + l):load())
          if buggy then tl.named_barrier_arrive(1, 64) else tl.named_barrier_sync(1, 64) end
        end)
      end)
    end)
    return k
  end
  it("report a named barrier's arrive where arrive_and_wait was needed, with every reduction on", function()
    local good = tl.verify_protocol(arrive_for_sync(false), { args = { { bytes = 128 } } })
    assert(good.ok, good.report)
    local arrive_line = H.line_of("spec/protocol_reduction_spec.lua", "if buggy then tl.named_barrier_arrive")
    for _, red in ipairs(REDUCTIONS) do
      local r = tl.verify_protocol(arrive_for_sync(true), setmetatable({ args = { { bytes = 128 } } }, { __index = red.o }))
      assert.is_false(r.ok, red.name)
      assert.are.equal("deadlock", r.violation.kind)
      -- the report names the culprit: the warp that arrived twice, at the bar.arrive's line
      assert.matches("kernel warp 1 arrived twice %(at [^)]*protocol_reduction_spec.lua:" .. arrive_line, r.report)
      assert.matches("a bar.arrive where bar.sync was needed", r.report, 1, true)
    end
  end)
end)
