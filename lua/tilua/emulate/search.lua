-- tilua.emulate.search: which actor moves next. A single emulation follows a
-- policy (round_robin, random with a seed, adversarial); the checker
-- (search.check) explores the schedules depth-first over the choice of the
-- actor that moves at each step where more than one can, pruning states
-- already seen, with sleep sets (a partial-order reduction) and a
-- cluster-at-a-time reduction; search.shortest then looks for a shortest
-- schedule to the violation it found (docs/protocol.md).

local machine = require "tilua.emulate.machine"
local report = require "tilua.emulate.report"

local S = {}

-- rng(seed) -> r(n): xorshift32, an integer in [1, n] each call (the random
-- policy's; the reduction spec's random kernels)
local function rng(seed)
  local s = (seed or 1) & 0xffffffff
  if s == 0 then s = 0x9e3779b9 end
  return function(n)
    s = s ~ ((s << 13) & 0xffffffff)
    s = s ~ (s >> 17)
    s = s ~ ((s << 5) & 0xffffffff)
    return s % n + 1
  end
end
S.rng = rng

-- The chooser of a policy (a name, or a function (run, ready actors) -> index).
function S.policy(policy, seed)
  if type(policy) == "function" then return policy end
  policy = policy or "round_robin"
  if policy == "round_robin" then
    local last = 0
    return function(_, rs)
      for i, a in ipairs(rs) do
        if a.id > last then
          last = a.id
          return i
        end
      end
      last = rs[1].id
      return 1
    end
  elseif policy == "random" then
    local r = rng(seed)
    return function(_, rs) return r(#rs) end
  elseif policy == "adversarial" then
    -- the same warp runs ahead as long as it can; copies complete as late as possible
    local last
    return function(_, rs)
      for i, a in ipairs(rs) do
        if a == last then return i end
      end
      for i, a in ipairs(rs) do
        if a.kind == "warp" then
          last = a
          return i
        end
      end
      return 1
    end
  end
  error("emulate: unknown policy '" .. tostring(policy) .. "' (round_robin, random, adversarial)", 0)
end

-- check(kernel, opts) -> result: ok, states, runs, violation (kind, message),
-- report, budget_exceeded. Depth-first over the choice of the actor that moves
-- at each step where more than one can, pruning states already seen, with
-- sleep sets (a partial-order reduction): after the schedules that start with
-- actor a are explored, a sleeps in its siblings' subtrees until a step
-- dependent with a's next one runs (steps of different actors on different
-- synchronization objects, two arrivals or two waits on one object, commute).
-- A state is explored again only with the actors asleep both times.
-- opts.max_states (default 20000), opts.max_work (emulator work: machine.lua's
-- Run:clock; or opts.work, a counter shared with other checks) and
-- opts.max_seconds (none unless given) bound it: budget_exceeded, and the
-- report says which.

-- The step an actor would take next: { obj, acc } (see request).
-- acc "n": an arrival taken alone (it commutes with waits too, and nothing can
-- disable it): one that does not complete its phase; at a barrier whose waits
-- nothing can disable, any; at an mbarrier, any unless the kernel probes
-- mbarriers (a probe's result would depend on the order): the waits that
-- its completion would overtake are reported (Run:complete_phase, Run:wait).
local function step_of(a, probes)
  if a.kind == "copy" then -- an arrival of bytes on an mbarrier
    local b = a.cta.bars[a.bar]
    local completes = not b or (b.pending == 0 and b.tx == a.bytes)
    return { obj = a.obj, acc = (probes and completes) and "a" or "n" }
  end
  local acc = a.req.acc
  if acc == "ab" then -- an arrival that joins a generation (a named barrier with bar.arrive): see Run:rendezvous
    return { obj = a.req.obj, acc = a.req.completes() and "w" or "a" }
  elseif acc == "am" then
    acc = (probes and a.req.completes and a.req.completes()) and "a" or "n"
  elseif acc == "ae" then
    acc = "n"
  elseif acc == "a" and a.req.completes and not a.req.completes() then
    acc = "n"
  end
  if acc == "re" or acc == "rp" then acc = "e" end
  -- an arrival on a global word (a generic barrier's counter), and a wait
  -- there that passes (a spin's load, or its CAS that resets): taken alone,
  -- arrivals first (docs/protocol.md, "Steps on global words"), yet
  -- dependent with the word's other steps
  if acc == "ag" then return { obj = a.req.obj, acc = "a", eager = 1 } end
  if acc == "rg" then return { obj = a.req.obj, acc = "r", eager = 2 } end
  if acc == "wg" then return { obj = a.req.obj, acc = "w", eager = 2 } end
  return { obj = a.req.obj, acc = acc }
end
local function independent(x, y)
  if x.obj == nil or y.obj == nil then return false end
  if x.obj ~= y.obj then return true end
  local p, q = x.acc, y.acc
  if p == "e" then p = "r" end
  if q == "e" then q = "r" end
  if p == "n" or q == "n" then return p ~= "w" and q ~= "w" end
  return p == q and (p == "a" or p == "r")
end
local function actor_key(a) return a.key end
local function cluster_of(a, size) return a.cta.id // size end

-- shortest(dk, o, kind, bound) -> failure, trace, exhausted: a shortest
-- schedule (fewest steps) reaching a violation of `kind`, breadth-first over
-- the schedules with the checker's state hashing (a state first reached at
-- depth d is not expanded again deeper), shorter than `bound` steps; nil when
-- there is none (the depth-first one is a shortest), or when its budget
-- (o.shortest_work emulator work, SHORTEST_WORK; o.shortest_seconds, when
-- given) runs out (exhausted true): the same answer on every machine. Each node is its path
-- of actor keys, replayed from the start; its children are replayed one step
-- further. No reduction: a sleep set or an eager step could lengthen a path.
local SHORTEST_WORK = 4000000
local function shortest(dk, o, kind, bound)
  local deadline = o.shortest_seconds and os.clock() + o.shortest_seconds
  local work = { left = o.shortest_work or SHORTEST_WORK }
  local function spent() return work.left < 0 or (deadline and os.clock() > deadline) end
  -- the chooser sees every step; the search's own budget, not the check's
  local ro = setmetatable({ _por = true, work = work, deadline = false }, { __index = o })
  -- replay path, then take `extra` (a key) if given; -> failure, run, key and
  -- runnable keys at the next choice (nil where the run ended first)
  local function replay(path, extra)
    local depth, key, keys = 0, nil, nil
    local R = machine.new(dk, ro, function(run, rs)
      depth = depth + 1
      local want = path[depth] or (depth == #path + 1 and extra)
      if not want then
        key, keys = run:state_key(), {}
        for i, a in ipairs(rs) do keys[i] = actor_key(a) end
        return nil
      end
      for i, a in ipairs(rs) do
        if actor_key(a) == want then return i end
      end
      error("verify-protocol: a replay diverged", 0)
    end)
    local ok, fail = pcall(R.go, R) -- a model error on a path the first search did not take: no violation
    return ok and fail or { kind = "error" }, R, key, keys
  end
  local fail, _, key, keys = replay({})
  if fail.kind ~= "pruned" then return nil, nil, false end -- the run ends before its first choice
  local seen = { [key] = true }
  local level = { { path = {}, keys = keys } }
  for _ = 1, bound - 1 do
    local next_level = {}
    for _, node in ipairs(level) do
      for _, a in ipairs(node.keys) do
        if spent() then return nil, nil, true end
        local f, run, k2, ks = replay(node.path, a)
        if f and f.kind == kind then return f, run.trace, false end
        if f and f.kind == "pruned" and not seen[k2] then
          seen[k2] = true
          local p = { table.unpack(node.path) }
          p[#p + 1] = a
          next_level[#next_level + 1] = { path = p, keys = ks }
        end
      end
    end
    if #next_level == 0 then break end
    level = next_level
  end
  return nil, nil, false
end

-- {=== the checker's search: an exploration record X (dk, o, por, budget,
-- visited states with their sleep sets, counts, the frames of the current
-- path) and the chooser of each of its runs

-- The sleep set of a state reached with `sleep` asleep, or nil where the state
-- was explored before with no more actors awake (prune), or the budget ran out.
local function visit(X, run, sleep)
  local key = run:state_key()
  local old = X.visited[key]
  if old then
    if not X.por then return nil end
    local sub, inter = true, {}
    for a, st in pairs(old) do
      if sleep[a] then inter[a] = st else sub = false end
    end
    if sub then return nil end
    X.visited[key] = inter
    return inter
  end
  X.states = X.states + 1
  if X.states > X.budget then
    X.exceeded = true
    return nil
  end
  local copy = {}
  for a, st in pairs(sleep) do copy[a] = st end
  X.visited[key] = copy
  return sleep
end

-- Clusters that share no synchronization object: the enabled actors of one
-- cluster are a persistent set (the others' steps commute with theirs, and
-- cannot enable or disable them), so one cluster runs while the others wait:
-- their states add up instead of multiplying. In a kernel whose clusters
-- synchronize through global words (a StreamK fixup), the same holds for the
-- steps on objects of one cluster (every object but a global word): the
-- enabled ones of the lowest cluster that has any go first, the steps on
-- global words (the only ones that order clusters) when no cluster has
-- another. -> the cluster that moves (nil: any), and (global words) its actors
-- whose steps are not on global words.
local function one_cluster(X, run, rs)
  local dk = X.dk
  if not (X.por and X.o.clusters ~= false and #run.ctas > dk.cluster) then return nil end
  local only
  if dk.cluster_local then
    for _, a in ipairs(rs) do
      local c = cluster_of(a, dk.cluster)
      if not only or c < only then only = c end
    end
    return only
  end
  local inner = {}
  for _, a in ipairs(rs) do
    local obj = step_of(a, dk.probes).obj
    if obj == nil then return nil, inner end -- any object: no reduction
    if not obj:match "^g%d" then
      inner[a] = true
      local c = cluster_of(a, dk.cluster)
      if not only or c < only then only = c end
    end
  end
  return only, inner
end

-- An arrival that does not complete its phase is always enabled and commutes
-- with every other step: it alone is a persistent set; so is a passing wait
-- at a barrier every warp of the CTA (or cluster) must arrive at again before
-- it can complete again; so is a step on a global word (eager: arrivals
-- first, then waits; the bound of docs/protocol.md, "Steps on global words").
local function eager(cands, steps)
  local pick, rank = nil, 3
  for _, key in ipairs(cands) do
    local st = steps[key]
    local r = (st.acc == "n" or st.acc == "e") and 0 or st.eager or 3
    if r < rank then pick, rank = key, r end
    if r == 0 then break end
  end
  if pick then return { pick } end
  return cands
end

-- The frame of a choice point first reached: the actors to try (awake, of the
-- cluster that moves, or the one eager step), their steps, the sleep set; nil:
-- nothing to explore from here.
local function new_frame(X, run, rs, sleep)
  if #rs > 1 or not X.por then
    sleep = visit(X, run, sleep)
    if not sleep then return nil end
  end
  local dk = X.dk
  local only, inner = one_cluster(X, run, rs)
  local cands, steps = {}, {}
  for _, a in ipairs(rs) do
    local key = actor_key(a)
    if not sleep[key] and (not only or (cluster_of(a, dk.cluster) == only and (not inner or inner[a]))) then
      cands[#cands + 1] = key
      steps[key] = step_of(a, dk.probes)
    end
  end
  if #cands == 0 then return nil end -- every move was explored from an equivalent state
  if X.por and X.o.eager ~= false then cands = eager(cands, steps) end
  return { cands = cands, steps = steps, idx = 1, sleep = sleep }
end

-- The child's sleep set: what slept at frame f or was explored before `want`,
-- independent of want's step.
local function child_sleep(X, f, rs, want)
  local st = f.steps[want]
  local out = {}
  if not X.por then return out end
  local live = {}
  for _, a in ipairs(rs) do live[actor_key(a)] = a end
  for a, s2 in pairs(f.sleep) do
    if live[a] then s2 = step_of(live[a], X.dk.probes) end -- the sleeper's step as of now
    if independent(s2, st) then out[a] = s2 end
  end
  for i = 1, f.idx - 1 do
    local a = f.cands[i]
    if independent(f.steps[a], st) then out[a] = f.steps[a] end
  end
  return out
end

-- The chooser of one run: it replays the frames of the path so far, then
-- opens new ones; nil prunes the run.
local function chooser(X)
  local depth, next_sleep = 0, {}
  return function(run, rs)
    depth = depth + 1
    local f = X.frames[depth]
    if not f then
      f = new_frame(X, run, rs, next_sleep)
      if not f then return nil end
      X.frames[depth] = f
    end
    local want = f.cands[f.idx]
    local idx
    for i, a in ipairs(rs) do
      if actor_key(a) == want then
        idx = i
        break
      end
    end
    assert(idx, "verify-protocol: a replay diverged")
    next_sleep = child_sleep(X, f, rs, want)
    return idx
  end
end

-- The result of a run that found a violation (a shortest schedule to it when asked).
local function violation_result(X, R, fail)
  local o = X.o
  local res = { ok = false, states = X.states, runs = X.runs, violation = fail, trace = R.trace,
                first_steps = #R.trace, element_ops = X.element_ops }
  if o.shortest ~= false then
    local sfail, strace, exhausted = shortest(X.dk, o, fail.kind, #R.trace)
    res.shortest = not exhausted
    if sfail then res.violation, res.trace = sfail, strace end
  end
  res.seconds = os.clock() - X.t0
  res.report = ("verify-protocol: %s\n%s\ncounterexample (%d steps%s):\n%s"):format(res.violation.kind,
    res.violation.message, #res.trace, res.shortest == false and ", the first found: no shorter one within the budget" or "",
    report.format_trace(res.trace, o.trace_limit))
  return res
end

-- The result of an exploration that ended (or ran out of a budget).
local function final_result(X)
  local states, runs = X.states, X.runs
  local res = { ok = not X.exceeded, states = states, runs = runs, seconds = os.clock() - X.t0,
                budget_exceeded = X.exceeded and true, min_phases = X.min_phases, element_ops = X.element_ops }
  if X.exceeded == "work" then
    res.violation = { kind = "budget", message = ("work budget exceeded: %d states explored in %d runs (max_work = %d emulator ops); the schedules after them were not checked")
      :format(states, runs, X.o.work.limit) }
    res.report = "verify-protocol: " .. res.violation.message
  elseif X.exceeded == "time" then
    res.violation = { kind = "budget", message = ("time budget exceeded: %d states explored in %d runs, %.1f s (max_seconds = %g); the schedules after them were not checked")
      :format(states, runs, res.seconds, X.o.max_seconds or (X.o.deadline - X.t0)) }
    res.report = "verify-protocol: " .. res.violation.message
  elseif X.exceeded then
    res.violation = { kind = "budget", message = ("state budget exceeded: %d states explored (max_states = %d) in %d runs; the schedules after them were not checked")
      :format(states, X.budget, runs) }
    res.report = "verify-protocol: " .. res.violation.message
  else
    res.report = ("verify-protocol: no violation in %d states (%d runs)"):format(states, runs)
  end
  return res
end

-- check(dk, o): dk a decoded kernel (emulate/decode.lua); runs until every
-- schedule is explored, a violation, or a budget.
function S.check(dk, o)
  local por = o.por ~= false
  local t0 = os.clock()
  local deadline = o.max_seconds and t0 + o.max_seconds
  if o.deadline and (not deadline or o.deadline < deadline) then deadline = o.deadline end
  local work = o.work or (o.max_work and { left = o.max_work, limit = o.max_work })
  local X = { dk = dk, por = por, budget = o.max_states or 20000, visited = {}, states = 0, runs = 0, element_ops = 0,
              frames = {}, t0 = t0, exceeded = false,
              o = setmetatable({ _cache = {}, _por = por, deadline = deadline, work = work }, { __index = o }) }
  local frames = X.frames
  -- which budget ran out: "work" or "time", or nil
  local function spent()
    if work and work.left < 0 then return "work" end
    if deadline and os.clock() > deadline then return "time" end
  end
  while true do
    X.exceeded = spent() or false -- the budgets, between runs (and in them: OUT_OF_BUDGET)
    if X.exceeded then break end
    X.runs = X.runs + 1
    local R = machine.new(dk, X.o, chooser(X))
    local gone, fail = pcall(R.go, R)
    X.element_ops = X.element_ops + R.element_ops
    if not gone then
      if fail ~= machine.OUT_OF_BUDGET then error(fail, 0) end
      X.exceeded = spent() or "time"
      break
    end
    if fail and fail.kind ~= "pruned" then return violation_result(X, R, fail) end
    if not fail then
      local m = R:min_phases()
      if m and (not X.min_phases or m < X.min_phases) then X.min_phases = m end
    end
    if X.exceeded then break end
    -- backtrack: the deepest frame with an untried choice
    while #frames > 0 and frames[#frames].idx >= #frames[#frames].cands do frames[#frames] = nil end
    if #frames == 0 then break end
    frames[#frames].idx = frames[#frames].idx + 1
  end
  return final_result(X)
end

-- }===

return S
