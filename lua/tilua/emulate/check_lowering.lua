-- tilua.emulate.check_lowering: tl.check_lowering, the protocol checker run
-- on the input and after every pass of a pipeline by the pass manager's check
-- after every pass (docs/protocol.md, "Lowered IR and the check after every pass").

local decode = require "tilua.emulate.decode"

-- The roles of the warps ({[warp] = agent name}) of an authoring-level kernel.
local function roles_of(kop)
  local roles = {}
  kop:walk(function(o)
    if o:name() == "tile.agent" then
      local first, n = o:agent_warps()
      for w = first, first + n - 1 do roles[w] = o:attr_or_default "name" or "agent" end
    end
  end)
  return next(roles) and roles or nil
end

-- The shared allocations of a kernel where convert-tile-to-nvvm lays them out
-- ({offset, size, loc} in program order; nil: none), to name the mbarriers of
-- the later stages after them.
local function shared_layout(kop)
  local out = {}
  for _, a in ipairs(kop:shared_layout().allocs) do
    out[#out + 1] = { offset = a.offset, size = a.dynamic and 0 or a.bytes, loc = decode.loc_of(a.op) }
  end
  return #out > 0 and out or nil
end

-- tl.check_lowering(k, o): the pass manager's check after every pass
-- (core.run_pipeline with the verify-protocol check, after every pass, its
-- run object this one) on a copy of k's module, with the caller's inputs; the
-- run's stage() is the check of each stage (emulate.check with o's args, grid,
-- budgets, the warps' roles of the input's agents and the shared allocations'
-- names of the last stage that still had them), and keeps the stages' results.
local Run = {}
Run.__index = Run

-- The check of one stage: verify-protocol's, as the check after every pass
-- (passes/verify_protocol.lua). -> nil, or the pass's result whose error stops
-- the pipeline at the first stage that fails.
function Run:stage(_, _, after)
  local index = #self.res.stages
  local o, kop = self.o, self.find()
  if o.after_pass then
    o.after_pass(after, index, kop, self.m)
    kop = self.find()
  end
  self.names = shared_layout(kop) or self.names
  self.copts.shared_names = self.names
  local text = kop:print()
  local st = { name = after, index = index }
  local r
  if text == self.last_text then
    r, st.unchanged = self.last, true
  else
    local ok, err = pcall(self.M.check, kop, self.copts)
    if not ok then
      self.error = ("check_lowering: after %s: %s"):format(after, tostring(err))
      return { errors = { { op = kop, message = self.error } } }
    end
    r = err
  end
  self.last_text, self.last = text, r
  st.ok, st.states, st.runs, st.seconds, st.report = r.ok, r.states, r.runs, r.seconds, r.report
  st.violation, st.trace, st.min_phases = r.violation, r.trace, r.min_phases
  self.res.stages[#self.res.stages + 1] = st
  if not st.ok then return { errors = { { op = kop, message = st.report } } } end
end

-- The result when stage st failed.
local function failed(res, st, t0)
  local report
  if st.index == 0 then
    report = "check_lowering: the input's protocol is already incorrect: " .. st.report
  else
    res.broken_by, res.broken_at = st.name, st.index
    if st.violation.kind == "budget" then
      report = ("check_lowering: after %s the checker ran out of states: %s"):format(st.name, st.report)
    else
      report = ("%s broke the protocol: %s"):format(st.name, st.report)
    end
  end
  res.ok, res.report, res.violation, res.trace = false, report, st.violation, st.trace
  res.budget_exceeded = st.violation and st.violation.kind == "budget" or nil
  res.seconds = os.clock() - t0
  return res
end

-- The module of kernel k, and its name.
local function module_of(k)
  if type(k) == "table" and k.module then return k.module, k.name end
  local kop = decode.kernel_op(k)
  local module = kop:parent()
  while module and module:name() ~= "module" do module = module:parent() end
  if not module then error("check_lowering: the kernel is not in a module", 3) end
  return module, kop:attr "sym_name"
end

return function(M, k, o)
  local tl = require "tilua"
  local core = tl.core
  o = o or {}
  local module, name = module_of(k)
  local m = module:clone()
  local function find()
    for _, op in ipairs(m:region(1):entry():ops()) do
      if op:name() == "tile.kernel" and op:attr "sym_name" == name then return op end
    end
    error(("check_lowering: kernel %s is gone from the module"):format(tostring(name)), 0)
  end
  local spec = o.pipeline or tl.ptx_pipeline or "ptx"
  local passes = assert(core.pipeline_parse(spec, m:context()))
  local copts = setmetatable({ roles = o.roles or roles_of(find()) }, { __index = o })
  local res = { ok = true, stages = {}, passes = passes }
  local run = setmetatable({ M = M, o = o, m = m, find = find, copts = copts, res = res }, Run)
  local t0 = os.clock()
  local ok, msg = core.run_pipeline(m, spec, { verify = o.verify ~= false, check_protocol = true, check_run = run,
                                               check_every_pass = true })
  if run.error then error(run.error, 0) end
  local last = res.stages[#res.stages]
  if last and not last.ok then return failed(res, last, t0) end
  if not ok then
    error(("check_lowering: pass %s failed: %s"):format(tostring(passes[#res.stages]), tostring(msg)), 0)
  end
  res.seconds = os.clock() - t0
  local lines = { ("check_lowering: the protocol holds on the input and after each of %d passes (%.2f s)"):format(#passes, res.seconds) }
  for _, s in ipairs(res.stages) do
    lines[#lines + 1] = ("  %d. %s: %s"):format(s.index, s.name,
      s.unchanged and "unchanged" or ("%d states, %d runs"):format(s.states, s.runs))
  end
  res.report = table.concat(lines, "\n")
  return res
end
