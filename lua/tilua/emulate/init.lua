-- tilua.emulate: a CPU emulator of a kernel's IR, at every level from a tile
-- program down to the nvvm ops of the `ptx` pipeline, and the protocol checker
-- built on it (docs/protocol.md).
--
--   local em = require "tilua.emulate"
--   local r = em.run(kernel_or_op, { grid = 1, args = { "src bytes", 4096, 1000 }, policy = "random", seed = 7 })
--   r.ok, r.error (a report), r.read(i [, n]) (the bytes of buffer argument i), r.steps, r.trace
--   local c = em.check(kernel_or_op, { grid = 1, args = {...}, max_states = 20000 })
--   c.ok, c.report, c.states, c.runs, c.violation.kind
--
-- The rooms:
--   decode.lua    the IR once into Lua records (what the ops are)
--   machine.lua   one emulation: warps as coroutines, their requests, the steps;
--                 with memory.lua (global buffers, loads, stores, the race check
--                 on vector clocks: clock.lua) and sync.lua (mbarriers, CTA and
--                 named barriers, global words, bulk copies)
--   lanes.lua, address.lua, values.lua   a warp's 32 lanes, the memory map,
--                 values as bytes
--   models/       what the ops do, one file per family, registered in
--                 models/init.lua (the one extension point)
--   search.lua    the policies of one run, and the checker's search
--   report.lua    violations, deadlock reports, traces
--   interp.lua    the reference interpreter of arith and scf
--   protocol.lua  the checker's front end: inputs, diagnostics, replay

local decode = require "tilua.emulate.decode"
local machine = require "tilua.emulate.machine"
local search = require "tilua.emulate.search"
local report = require "tilua.emulate.report"
local address = require "tilua.emulate.address"
local models = require "tilua.emulate.models"

local M = {}

M.format_trace = report.format_trace
M.SHARED_BASE, M.GLOBAL_BASE = address.SHARED_BASE, address.GLOBAL_BASE

-- decode(kernel) -> the kernel decoded (emulate/decode.lua), which run and
-- check take in its place: the runs of one check decode it once.
function M.decode(k) return decode.kernel(decode.kernel_op(k), models) end
local function prepare(k)
  if type(k) == "table" and k.body and k.models then return k end -- decoded already
  return M.decode(k)
end

-- run(kernel, opts) -> result: ok, error (kind, message), report (text with the
-- interleaving), steps, trace, element_ops (tile elements computed, loaded or
-- stored), read(i [, n]) / read_global(addr, n) -> string.
-- opts.policy may be a function (run, ready actors) -> index, and
-- opts.on_step(run, actor) is called before every step (tilua.emulate.protocol's replay).
function M.run(k, o)
  o = o or {}
  local dk = prepare(k)
  local R = machine.new(dk, o, search.policy(o.policy, o.seed))
  R.on_step = o.on_step
  local fail = R:go()
  local res = { ok = fail == nil, steps = R.steps, trace = R.trace, min_phases = R:min_phases(), run = R,
                element_ops = R.element_ops }
  if fail then
    res.error = fail
    res.report = ("emulate: %s\n%s\ninterleaving (%d steps):\n%s"):format(fail.kind, fail.message, #R.trace,
      report.format_trace(R.trace, o.trace_limit or 60))
  end
  function res.read_global(addr, n)
    local out = {}
    for i = 0, n - 1 do out[i + 1] = string.char(R.global[addr + i] or 0) end
    return table.concat(out)
  end
  function res.read(i, n)
    local b = R.buffers[i]
    if not b then error("emulate: argument " .. i .. " is not a buffer", 2) end
    return res.read_global(b.base, n or b.n)
  end
  return res
end

-- check(kernel, opts) -> the checker's result (search.lua: ok, states, runs,
-- violation, report, trace, budget_exceeded, min_phases, element_ops: of
-- every run).
function M.check(k, o)
  return search.check(prepare(k), o or {})
end

-- check_lowering(kernel, opts): the checker on the input and after every pass
-- of a pipeline (emulate/check_lowering.lua).
function M.check_lowering(k, o)
  return require("tilua.emulate.check_lowering")(M, k, o)
end

return M
