-- tilua.lua_passes: the passes implemented in Lua. Each LUA_PASS row of
-- src/passes/passes.def names a function here; the pass manager calls it, in
-- the Lua state that runs the pipeline (src/lua/l_pass.c), as
--   fn(module_op, options, after) -> nil | { errors = { {message =, op =, notes = {...}} },
--                                            stats = { {name =, value =}, ... }, changed = bool }
-- where options is the table of `name{key=value,...}` (only the keys that
-- passes.def declares reach it). An error fails the pass at its op's location.
-- `after` is set when the pass manager runs the pass as the check after every
-- pass (tl.options.check_protocol, --check-protocol): the name of the pass it
-- follows, or "input".

local M = {}

-- verify-protocol{grid=G, max_states=S, n=N, bytes=B, trace=T}: the checker on
-- every tile.kernel of the module, with the inputs of tilua.protocol.inputs
-- (docs/protocol.md, "Running the checker"). As the check after every pass a
-- kernel the emulator cannot run (an op it does not model) or cannot finish
-- exploring (the state budget, 2000 states unless given) is skipped, not an error:
-- the check speaks only where it can prove. Within one pipeline run a kernel is
-- checked again only when its text changed, and never again once skipped.
local seen = {} -- kernel name -> { text =, skipped = } of this pipeline run's checks
-- after every pass, sizes from small up: a kernel without mbarriers (whose
-- loops may run n times) is checked at the smallest, and cheaply
local AFTER_SIZES = { 8, 64, 256, 1024, 4096, 16384, 65536, 262144 }
function M.verify_protocol(module, o, after)
  local P = require "tilua.protocol"
  local errors, stats = {}, {}
  local states, runs, seconds = 0, 0, 0
  if after == "input" then seen = {} end
  for _, kop in ipairs(P.kernels(module)) do
    local name, text = kop:attr "sym_name" or "?", after and kop:print()
    local last = after and seen[name]
    local ok, r
    if not (last and (last.skipped or last.text == text)) then
      ok, r = pcall(P.check, kop, { grid = o.grid, max_states = o.max_states or (after and 2000), n = o.n,
                                     bytes = o.bytes, trace = o.trace, max_ops = o.max_ops,
                                     sizes = after and AFTER_SIZES })
      if after then seen[name] = { text = text, skipped = not ok or r.budget_exceeded } end
    end
    if after and (ok == nil or not ok or r.budget_exceeded) then
      stats[#stats + 1] = { name = ("%s: not checked"):format(name),
                            value = ok == nil and "unchanged, or skipped before" or ok and "the state budget" or tostring(r) }
    elseif not ok then
      errors[#errors + 1] = { op = kop, message = ("verify-protocol: kernel '%s': %s"):format(kop:attr "sym_name" or "?", tostring(r)) }
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

-- convert-tileas-to-cutlass: a tile program's agents to the tile / cutlass
-- level (lua/tilua/tileas_lower.lua, docs/tileprog.md).
function M.convert_tileas_to_cutlass(module)
  return require("tilua.tileas_lower").convert(module)
end

return M
