-- tilua.passes: the passes implemented in Lua. Each LUA_PASS row of
-- src/passes/passes.def names a function here; the pass manager calls it, in
-- the Lua state that runs the pipeline (src/lua/l_pass.c), as
--   fn(module_op, options, after, run) -> nil | { errors = { {message =, op =, notes = {...}} },
--                                                 stats = { {name =, value =}, ... }, changed = bool }
-- where options is the table of `name{key=value,...}` (only the keys that
-- passes.def declares reach it). An error fails the pass at its op's location.
-- `after` and `run` are set when the pass manager runs the pass as the check
-- after every pass (tl.options.check_protocol, --check-protocol,
-- tl.check_lowering): the name of the pass it follows ("input" first) and the
-- pipeline run's run object (the check's state across the stages).

return {
  -- verify-protocol{grid, max_states, max_work, max_seconds, n, bytes, trace, max_ops, mode}
  verify_protocol = require("tilua.passes.verify_protocol").verify_protocol,
  -- convert-tileas-to-cutlass: a tile program's agents to the tile / cutlass
  -- level (docs/tileprog.md)
  convert_tileas_to_cutlass = function(module, options)
    return require("tilua.passes.convert_tileas_to_cutlass").convert(module, options)
  end,
}
