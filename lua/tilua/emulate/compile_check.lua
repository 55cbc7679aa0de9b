-- tilua.emulate.compile_check: the protocol check every compile runs
-- (k:compile, `tilua script.lua`, the C API's ptx pipelines), on the kernel as
-- its author wrote it, within a time budget (docs/protocol.md, "The check every
-- compile runs"). A violation refuses the compile with its counterexample; a
-- kernel the check could not finish (its budget, an op the emulator does not
-- model, inputs it cannot choose) gets a one-line note, never silence.
--
--   local cc = require "tilua.emulate.compile_check"
--   cc.run(module, { budget = 0.5, note = function(line) ... end })

local M = {}

M.BUDGET = 0.5 -- seconds a kernel, by default (tl.options.check_protocol_budget)

local function default_note(line) io.stderr:write(line, "\n") end

-- "file:line: " of an op, or "".
local function where(op)
  if not op then return "" end
  local file, line = op:loc()
  if not file or not line then return "" end
  return ("%s:%s: "):format(file, tostring(line))
end

-- The first line of an error or a message.
local function first_line(s) return (tostring(s):match "^[^\n]*") end

-- run(module, o): checks every kernel of the module; raises on a violation
-- ("file:line: protocol violation in kernel 'k' ...: the report with its
-- counterexample"), calls o.note(line) for a kernel not proven. o.budget:
-- seconds a kernel (M.BUDGET). -> the results, one per kernel: { name, ok,
-- why (not proven), states, seconds, inputs }.
function M.run(module, o)
  o = o or {}
  local P = require "tilua.emulate.protocol"
  local budget = o.budget or M.BUDGET
  local note = o.note or default_note
  local out = {}
  for _, kop in ipairs(P.kernels(module)) do
    local name = kop:attr_or_default "sym_name"
    local t0 = os.clock()
    local ok, r = pcall(P.check, kop, { max_seconds = budget, max_states = 20000, shortest_seconds = budget })
    local secs = os.clock() - t0
    local res = { name = name, seconds = secs }
    if not ok then
      res.why = "not checked: " .. first_line(r)
    elseif r.budget_exceeded then
      res.why = ("not proven within its budget (%g s): %d states in %d runs on %s"):format(budget, r.states, r.runs,
        r.inputs or "?")
    elseif not r.ok and r.violation.kind == "model" then
      res.why = "not checked: " .. first_line(r.violation.message)
    elseif not r.ok then
      local d = P.diagnostic(r)
      error(("%s%s\n(the protocol check every compile runs; tl.options.check_protocol = false or --no-check-protocol turns it off)")
        :format(where(d.op), d.message), 0)
    else
      res.ok, res.states, res.inputs = true, r.states, r.inputs
    end
    local path = os.getenv "TILUA_CHECK_PROTOCOL_LOG" -- as the check after every pass logs (verify_protocol.lua)
    local f = path and path ~= "" and io.open(path, "a")
    if f then
      f:write(table.concat(res.why and { name, "compile", "skipped", (res.why:gsub("[\t\n]", " ")) }
        or { name, "compile", "checked", res.states, "-", (res.inputs:gsub("[\t\n]", " ")), ("%.3f s"):format(secs) }, "\t"), "\n")
      f:close()
    end
    if res.why then
      note(("tilua: note: the protocol check of kernel '%s' %s (%.2f s)"):format(name, res.why, secs))
    end
    out[#out + 1] = res
  end
  return out
end

-- The options of the check (tl.options.check_protocol and
-- check_protocol_budget), checked: -> the budget in seconds, or nil where the
-- check every compile runs is off (false) or replaced by the check after
-- every pass (true, "passes").
function M.budget()
  local tl = require "tilua"
  local mode = tl.options.check_protocol
  if mode ~= nil then
    if mode == false or mode == true or mode == "passes" then return nil end
    tl.raise("tl.options.check_protocol: expected nil (the check of every compile), false, true or \"passes\"")
  end
  local budget = tl.options.check_protocol_budget
  if budget ~= nil and (type(budget) ~= "number" or budget <= 0 or budget > 3600) then
    tl.raise("tl.options.check_protocol_budget: expected seconds, a number in (0, 3600]")
  end
  return budget or M.BUDGET
end

-- The C API's compile (tlModuleRunPipeline of a pipeline that lowers to
-- PTX): run(module) as tl.options say, the notes through note(line).
function M.compile(module, note)
  local budget = M.budget()
  if budget then M.run(module, { budget = budget, note = note }) end
end

return M
