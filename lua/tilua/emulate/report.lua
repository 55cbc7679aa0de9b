-- tilua.emulate.report: what the emulator says. A protocol violation is raised
-- as a Violation (kind, message) that ends the run (Run:go returns it); a run
-- that ends with warps left, or with a barrier left half-arrived, is described
-- here; a trace is the numbered list of the steps taken.
--
-- kinds: deadlock, unfilled, overwrite, phase, arrive_count, tx_bytes,
-- uninitialized, dsmem, exit, bar_count, wgmma, tma (a TMA copy the hardware
-- refuses: models/mma.lua), model (an op used outside what its
-- model covers); a Lua error "emulate: ..." is an op not modelled at all.

local R = {}

local Violation = {}
Violation.__index = Violation
R.Violation = Violation

function R.is_violation(x) return type(x) == "table" and getmetatable(x) == Violation end

-- Raise a violation of `kind` (extra: more fields for the report's reader).
function R.violation(kind, msg, extra)
  local v = setmetatable({ kind = kind, message = msg }, Violation)
  if extra then for k, x in pairs(extra) do v[k] = x end end
  error(v, 0)
end

-- x, when it is an argument of `kind` (what Run.setup_args made of a kernel
-- argument: x.kind "tensor", "tmap" ...); else a model violation at op rec
-- that says `what` ("the tensor operand is not a !tileas.tensor argument").
function R.argument(rec, x, kind, what)
  if type(x) ~= "table" or x.kind ~= kind then
    R.violation("model", ("%s at %s: %s"):format(rec.name, rec.loc, what))
  end
  return x
end

function R.not_modelled(rec)
  error(("emulate: op %s is not modelled (at %s)"):format(rec.name, rec.loc), 0)
end

-- The steps of a trace, numbered (the last `limit` of them).
function R.format_trace(trace, limit)
  local lines = {}
  local from = 1
  if limit and #trace > limit then
    from = #trace - limit + 1
    lines[1] = ("  ... %d earlier steps"):format(from - 1)
  end
  for i = from, #trace do lines[#lines + 1] = ("  %d. %s"):format(i, trace[i]) end
  return table.concat(lines, "\n")
end

-- The state of every barrier of run `run`, one line each.
function R.barriers(run)
  local lines = {}
  for _, cta in ipairs(run.ctas) do
    for _, b in ipairs(cta.bar_list) do
      lines[#lines + 1] = ("  %s%s: %d phase(s) completed (current parity %d), %d of %d arrivals pending, tx-count %d")
        :format(b.name, run.grid > 1 and (" (CTA %d)"):format(cta.id) or "", b.completed, b.completed & 1,
                b.pending, b.count, b.tx)
    end
  end
  return table.concat(lines, "\n")
end

-- The arrivals of a phase (or generation) as "who at loc", each place once.
local function arrivals(list)
  local seen, out = {}, {}
  for _, e in ipairs(list or {}) do
    local k = e.who .. " at " .. e.loc .. (e.what and (" (" .. e.what .. ")") or "")
    if not seen[k] then seen[k], out[#out + 1] = true, k end
  end
  return out
end

-- Who arrived on `before` but not (as often) on `now`: the arrivals the
-- current phase is missing, each with the place of its last arrival.
local function missing(before, now)
  local here = {}
  for _, e in ipairs(now or {}) do here[e.who] = (here[e.who] or 0) + 1 end
  local out, last, order = {}, {}, {}
  for _, e in ipairs(before or {}) do
    if (here[e.who] or 0) > 0 then here[e.who] = here[e.who] - 1
    else
      if not last[e.who] then order[#order + 1] = e.who end
      last[e.who] = e.loc
    end
  end
  for _, who in ipairs(order) do out[#out + 1] = ("%s (at %s)"):format(who, last[who]) end
  return out
end

-- Who arrived twice on one generation of a rendezvous (a bar.arrive where
-- bar.sync was needed lets a warp come back before the others).
local function twice(list)
  local n, out = {}, {}
  for _, e in ipairs(list or {}) do
    n[e.who] = n[e.who] or {}
    table.insert(n[e.who], e.loc)
    if #n[e.who] == 2 then out[#out + 1] = ("%s arrived twice (at %s, then at %s)"):format(e.who, n[e.who][1], n[e.who][2]) end
  end
  return out
end

-- What the blocked waits are missing: per barrier a warp waits on, the
-- arrivals of the phase (generation) it waits for, those of the one before
-- that have not come again (the missing arrive: its role and .lua line), and
-- a warp that arrived twice on one generation (the extra arrive). -> lines
function R.culprits(run)
  local lines, done = {}, {}
  for _, W in ipairs(run.warps) do
    if not W.done then
      local b, what, phase
      if W.wait_sync then
        b, phase = W.wait_sync, W.wait_gen
        what = W.wait_sync.what
      elseif W.waiting_at and W.cta.bars[W.waiting_at] then
        b = W.cta.bars[W.waiting_at]
        phase, what = b.completed, b.name
      end
      if b and not done[b] then
        done[b] = true
        local log = b.log or {}
        local now, before = log[phase], log[phase - 1]
        local unit = W.wait_sync and "generation" or "phase"
        lines[#lines + 1] = ("  %s waits at %s for %s %d of %s"):format(W.label, W.req.rec.loc, unit, phase, what)
        local got = arrivals(now)
        lines[#lines + 1] = ("    arrived on it: %s"):format(#got > 0 and table.concat(got, "; ") or "nothing")
        local miss = missing(before, now)
        if #miss > 0 then
          lines[#lines + 1] = ("    missing: the arrival of %s: it arrived on %s %d, not on %d"):format(
            table.concat(miss, "; "), unit, phase - 1, phase)
        elseif not before and #got == 0 then
          local who = what:match "^empty%[" and "; a pipeline's empty barrier: consumer_release arrives on it"
            or what:match "^full%[" and "; a pipeline's full barrier: producer_commit and its copies arrive on it" or ""
          lines[#lines + 1] = ("    missing: every arrival: nothing ever arrived on %s (an arrive on it is missing, or the wait at %s waits on the wrong barrier or phase%s)")
            :format(what, W.req.rec.loc, who)
        end
        for g = phase - 3, phase do
          for _, t in ipairs(twice(log[g])) do
            lines[#lines + 1] = ("    extra: on %s %d %s: %s"):format(unit, g, t, W.wait_sync
              and "a bar.arrive where bar.sync was needed, or an arrive too many" or "an arrive too many")
          end
        end
      end
    end
  end
  if #lines == 0 then return lines end
  table.insert(lines, 1, "what the waits are missing:")
  return lines
end

-- No warp can move and some have not finished: {kind, message}, the kind the
-- most specific one (a wait on a barrier nobody initialized, a phase whose
-- arrivals all came but not its bytes).
function R.deadlock(run)
  local lines = { "deadlock: no warp can move and some have not finished" }
  local txbad
  for _, W in ipairs(run.warps) do
    if not W.done then
      lines[#lines + 1] = ("  %s %s at %s (%s)"):format(W.label, W.req.describe(), W.req.rec.loc, W.req.rec.name)
    end
  end
  for _, cta in ipairs(run.ctas) do
    for _, b in ipairs(cta.bar_list) do
      if b.pending == 0 and b.tx ~= 0 then txbad = b end
    end
  end
  local kind = "deadlock"
  for _, W in ipairs(run.warps) do
    if not W.done and W.req.rec.name:find "wait" and W.wait_addr and not W.cta.bars[W.wait_addr] then
      kind = "uninitialized"
      table.insert(lines, 2, ("%s waits at %s on %s, which no one initialized"):format(W.label, W.req.rec.loc,
        run:barrier_name(W.cta, W.wait_addr)))
      break
    end
  end
  for _, l in ipairs(R.culprits(run)) do lines[#lines + 1] = l end
  lines[#lines + 1] = "barriers:"
  lines[#lines + 1] = R.barriers(run)
  for _, cta in ipairs(run.ctas) do
    for _, b in ipairs(cta.bar_list) do
      if b.pending > 0 and b.pending < b.count then
        lines[#lines + 1] = ("note: %s: %d of %d arrivals came for phase %d: an arrive count larger than the arrivals, or a missing arrive")
          :format(b.name, b.count - b.pending, b.count, b.completed)
      end
    end
  end
  if txbad then
    kind = "tx_bytes"
    table.insert(lines, 2, ("transaction-byte mismatch: %s has all its arrivals but a tx-count of %d bytes"):format(txbad.name, txbad.tx))
  end
  return { kind = kind, message = table.concat(lines, "\n") }
end

-- At the end of a run: no phase left half-arrived, no transaction bytes
-- outstanding; nil, or the failure {kind, message}.
function R.final(run)
  for _, cta in ipairs(run.ctas) do
    for _, b in ipairs(cta.bar_list) do
      if b.tx ~= 0 then
        return { kind = "tx_bytes", message = ("transaction-byte mismatch: %s ends with a tx-count of %d bytes (phase %d, %d of %d arrivals pending)")
          :format(b.name, b.tx, b.completed, b.pending, b.count) }
      end
      if b.pending ~= b.count then
        return { kind = "arrive_count", message = ("arrive-count mismatch: %s ends with phase %d half arrived: %d of %d arrivals pending")
          :format(b.name, b.completed, b.pending, b.count) }
      end
    end
  end
end

return R
