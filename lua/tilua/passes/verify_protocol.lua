-- tilua.passes.verify_protocol: the verify-protocol pass (a LUA_PASS row of
-- src/passes/passes.def, run through tilua.passes): the protocol checker on
-- every kernel of a module, as a pass of its own and as the check the pass
-- manager runs after every pass.

local M = {}

-- verify-protocol{grid=G, max_states=S, max_work=W, max_seconds=T, n=N, bytes=B, trace=T,
-- max_ops=O, mode=M}: the checker on every tile.kernel of the module, with the inputs of
-- tilua.emulate.protocol.inputs (docs/protocol.md, "Running the checker").
--
-- As the check after every pass (the pass manager's check_each: `after` names
-- the pass it follows, "input" first, and `run` is the pipeline run's run
-- object) a kernel the emulator cannot run (an op it does not model) or cannot
-- finish exploring (the budgets: 2000 states, AFTER_WORK emulator work, unless
-- given; no time budget unless max_seconds is: the same verdict on every
-- machine) is skipped,
-- not an error: the check speaks only where it can prove. Within one pipeline
-- run a kernel is checked again only when its text changed, never again once
-- skipped, and at every stage with the inputs chosen at its first check (the
-- same problem before and after each pass). With mode = "passes"
-- (check_protocol = "passes": the tests' default) an input that is already
-- wrong is noted, not an error, and not checked further: only a pass that
-- breaks what held fails. A run object with a method stage(module, options,
-- after) checks each stage its own way (tl.check_lowering).
--
-- The run object keeps, across the stages of its pipeline run:
--   run.seen  kernel name -> { text, skipped, args, inputs, grid, tile } of its last check
--   run.log   what the check did, one entry per stage and kernel: { after, kernel,
--             why (not checked) | states, runs, min_phases, inputs, ok, seconds };
--             tl.compile keeps its run as tl.last_check. TILUA_CHECK_PROTOCOL_LOG=FILE
--             appends each entry to FILE as a line of tab-separated fields (kernel,
--             after, then "checked", states, fewest phases, inputs, seconds, or
--             "skipped", why); the specs read them: that a kernel was checked at
--             every stage, every ring twice around.
local AFTER_WORK = 30000000 -- about 5 s (machine.lua's Run:clock)
local function log(run, e)
  run.log[#run.log + 1] = e
  local path = os.getenv "TILUA_CHECK_PROTOCOL_LOG"
  if not path or path == "" then return end
  local f = io.open(path, "a")
  if not f then return end
  local line = e.why and { e.kernel, e.after, "skipped", e.why }
    or { e.kernel, e.after, "checked", e.states, e.min_phases or "-", e.inputs, ("%.3f s"):format(e.seconds) }
  for i, x in ipairs(line) do line[i] = tostring(x):gsub("[\t\n]", " ") end
  f:write(table.concat(line, "\t"), "\n")
  f:close()
end
-- Results of checks that passed or were skipped, by the kernel's text and
-- inputs: a kernel compiled again, or with a pipeline that reaches the same
-- IR, is not explored again (a violation is not kept: its report names the ops
-- of its own module). A pass does not depend on locations (the lowering of a
-- tile program gives its ops the line that compiled it): kept by the text
-- alone; a skip by the text with locations (its reason names an op). At most
-- MEMO_MAX kept (the stages of a few compiles of a tile program: tile-to-ptx
-- has 20).
local memo, nmemo, MEMO_MAX = {}, 0, 128
local function memo_key(text, o, last)
  return table.concat({ text, tostring(o.grid), tostring(o.n), tostring(o.bytes),
                        tostring(o.max_states), tostring(o.max_seconds), tostring(o.max_work), tostring(last and last.inputs),
                        tostring(last and last.grid) }, "\0")
end
local function skip_reason(ok, r)
  if not ok then return tostring(r) end
  if r.budget_exceeded then return r.violation.message:match "^[^:]*" end -- "state (or time) budget exceeded"
  if not r.ok and r.violation.kind == "model" then return "not modelled: " .. r.violation.message end
end
-- The check of kernel kop of text `text` (o the pass's options, after as
-- above; last: its check at an earlier stage) -> ok, r (pcall of tilua.emulate.protocol's
-- check), or nothing where a result remembered (memo) or the input's plain
-- run (mode "passes") answers.
local function check_kernel(P, kop, text, o, after, last)
  local key = after and memo_key(text, o, last)
  local hit = key and memo[key]
  local loc_key = key and not hit and memo_key(kop:print { locations = true }, o, last)
  hit = hit or (loc_key and memo[loc_key])
  if hit then return hit.ok, hit.r end
  -- mode "passes": an input whose plain run at the chosen size already
  -- fails is wrong (that run is one of the schedules): no search
  local args, desc = last and last.args, last and last.inputs
  if after == "input" and o.mode == "passes" and not o.n and not P.is_tile_program(kop) then
    local ok2, a, d, _, failure = pcall(P.inputs, kop, { grid = o.grid, bytes = o.bytes, max_ops = o.max_ops,
                                                         max_seconds = o.max_seconds, max_work = o.max_work or AFTER_WORK })
    if ok2 and failure and failure.kind ~= "error" then return true, { ok = false, violation = failure } end
    if ok2 then args, desc = a, d end
  end
  local ok, r = pcall(P.check, kop, { grid = o.grid or (last and last.grid), max_states = o.max_states or (after and 2000),
                                      max_seconds = o.max_seconds, max_work = o.max_work or (after and AFTER_WORK),
                                      n = o.n, bytes = o.bytes, trace = o.trace, max_ops = o.max_ops,
                                      args = args, inputs = desc, tile = last and last.tile,
                                      -- an input already wrong is only noted in this mode: no shortest search
                                      shortest = not (after == "input" and o.mode == "passes") })
  if key and (not ok or r.ok or skip_reason(ok, r)) then
    if nmemo >= MEMO_MAX then memo, nmemo = {}, 0 end
    memo[(ok and r.ok) and key or loc_key], nmemo = { ok = ok, r = r }, nmemo + 1
  end
  return ok, r
end

-- What the check after a pass remembers of kernel `name`'s check (run.seen),
-- and why it is not checked again.
local function remember(run, name, text, o, after, ok, r)
  local why = skip_reason(ok, r)
  if not why and after == "input" and o.mode == "passes" and not r.ok then
    why = "the input is already wrong: " .. r.violation.kind
  end
  -- a tile program's stages: its problem (their parameters change with the lowering)
  run.seen[name] = { text = text, skipped = why, args = ok and not r.tile and r.args, inputs = ok and r.inputs,
                     grid = ok and not r.tile and r.grid, tile = ok and r.tile }
end

local MODES = { passes = true }

function M.verify_protocol(module, o, after, run)
  if after and run and run.stage then return run:stage(module, o, after) end
  if o.mode ~= nil and not MODES[o.mode] then
    return { errors = { { op = module, message = ("verify-protocol: mode must be \"passes\" (or absent), got '%s'"):format(tostring(o.mode)) } } }
  end
  local P = require "tilua.emulate.protocol"
  local errors, stats = {}, {}
  local states, runs, seconds = 0, 0, 0
  if after then
    run = run or {}
    if after == "input" or not run.seen then run.seen, run.log = {}, {} end
  end
  for _, kop in ipairs(P.kernels(module)) do
    local name, text = kop:attr_or_default "sym_name", after and kop:print()
    local last = after and run.seen[name]
    local ok, r
    local t0 = os.clock() -- the check's time, the choice of its inputs included
    if not (last and (last.skipped or last.text == text)) then
      ok, r = check_kernel(P, kop, text, o, after, last)
      if after then remember(run, name, text, o, after, ok, r) end
    end
    local why = after and (ok == nil and "unchanged, or skipped before" or run.seen[name].skipped)
    if after then
      log(run, why and { after = after, kernel = name, why = why }
          or ok and { after = after, kernel = name, states = r.states, runs = r.runs, min_phases = r.min_phases,
                      inputs = r.inputs, ok = r.ok, seconds = os.clock() - t0 }
          or { after = after, kernel = name, why = tostring(r) })
    end
    if why then
      stats[#stats + 1] = { name = ("%s: not checked"):format(name), value = why }
    elseif not ok then
      errors[#errors + 1] = { op = kop, message = ("verify-protocol: kernel '%s': %s"):format(name, tostring(r)) }
    else
      states, runs, seconds = states + r.states, runs + r.runs, seconds + r.seconds
      stats[#stats + 1] = { name = ("%s: states"):format(r.name), value = r.states }
      stats[#stats + 1] = { name = ("%s: runs"):format(r.name), value = r.runs }
      if r.min_phases then stats[#stats + 1] = { name = ("%s: fewest phases of a barrier"):format(r.name), value = r.min_phases } end
      stats[#stats + 1] = { name = ("%s: inputs"):format(r.name), value = r.inputs }
      local d = P.diagnostic(r)
      if d then errors[#errors + 1] = d end
    end
  end
  stats[#stats + 1] = { name = "states", value = states }
  stats[#stats + 1] = { name = "runs", value = runs }
  stats[#stats + 1] = { name = "seconds", value = ("%.3f"):format(seconds) }
  return { errors = errors, stats = stats }
end

return M
