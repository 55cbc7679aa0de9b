-- tilua.emulate.report: what the emulator says. A protocol violation is raised
-- as a Violation (kind, message) that ends the run (Run:go returns it); a run
-- that ends with warps left, or with a barrier left half-arrived, is described
-- here; a trace is the numbered list of the steps taken.
--
-- kinds: deadlock, unfilled, overwrite, phase, arrive_count, tx_bytes,
-- uninitialized, dsmem, bar_count, wgmma, model (an op used outside what its
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
