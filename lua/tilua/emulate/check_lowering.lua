-- tilua.emulate.check_lowering: tl.check_lowering, the protocol checker run
-- on the input and after every pass of a pipeline (docs/protocol.md, "Lowered
-- IR and the check after every pass").

local decode = require "tilua.emulate.decode"
local values = require "tilua.emulate.values"
local codec_of = values.codec_of

-- The passes of a pipeline spec (a named pipeline expanded), each with its options.
local function pass_list(core, spec, out)
  out = out or {}
  local named = {}
  for _, p in ipairs(core.pipelines()) do named[p.name] = p.passes end
  local depth, cur = 0, {}
  local function flush()
    local p = table.concat(cur):match "^%s*(.-)%s*$"
    cur = {}
    if p == "" then return end
    if named[p] then pass_list(core, named[p], out) else out[#out + 1] = p end
  end
  for c in spec:gmatch "." do
    if c == "{" then depth = depth + 1 elseif c == "}" then depth = depth - 1 end
    if c == "," and depth == 0 then flush() else cur[#cur + 1] = c end
  end
  flush()
  return out
end

-- The ops of op's regions in program order (pre-order, as the emulator decodes them).
local function preorder(op, f)
  for r = 1, op:nregions() do
    for _, b in ipairs(op:region(r):blocks()) do
      for _, o in ipairs(b:ops()) do
        f(o)
        preorder(o, f)
      end
    end
  end
end

local function loc_of(op)
  local file, line = op:loc()
  return file and (file .. ":" .. tostring(line)) or "?"
end

-- The roles of the warps ({[warp] = agent name}) of an authoring-level kernel.
local function roles_of(kop)
  local roles, next_warp = {}, 0
  preorder(kop, function(o)
    if o:name() == "tile.agent" then
      local wid = o:attr "warp_id"
      local first = (wid and wid >= 0) and wid or next_warp
      for w = first, first + o:attr "num_warps" - 1 do roles[w] = o:attr "name" or "agent" end
      next_warp = first + o:attr "num_warps"
    end
  end)
  return next(roles) and roles or nil
end

-- The shared allocations of a kernel laid out as the emulator (and the lowering) lays them out.
local function shared_layout(kop, codec_of)
  local out, smem = {}, 0
  preorder(kop, function(o)
    local n = o:name()
    if n == "tile.alloc_shared" or n == "tile.dynamic_shared" then
      local info = o:result(1):type():info()
      local size
      if n == "tile.dynamic_shared" then
        size = 0
      elseif info.kind == "memref" then
        size = codec_of(info.elem).size
        for _, d in ipairs(info.shape) do size = size * d end
      else
        size = (o:attr "count" or 1) * codec_of(info.elem).size
      end
      local align = o:attr "align" or 16
      smem = (smem + align - 1) // align * align
      out[#out + 1] = { offset = smem, size = size, loc = loc_of(o) }
      smem = smem + size
    end
  end)
  return #out > 0 and out or nil
end

return function(M, k, o)
  local tl = require "tilua"
  local core = tl.core
  o = o or {}
  local module, name
  if type(k) == "table" and k.module then
    module, name = k.module, k.name
  else
    local kop = decode.kernel_op(k)
    name = kop:attr "sym_name"
    module = kop:parent()
    while module and module:name() ~= "module" do module = module:parent() end
    if not module then error("check_lowering: the kernel is not in a module", 2) end
  end
  local m = module:clone()
  local function find()
    for _, op in ipairs(m:region(1):entry():ops()) do
      if op:name() == "tile.kernel" and op:attr "sym_name" == name then return op end
    end
    error(("check_lowering: kernel %s is gone from the module"):format(tostring(name)), 0)
  end
  local passes = pass_list(core, o.pipeline or tl.ptx_pipeline or "ptx")
  local roles = o.roles or roles_of(find())
  local names
  local copts = setmetatable({}, { __index = o })
  copts.roles = roles
  local res = { ok = true, stages = {}, passes = passes }
  local t0 = os.clock()
  local last_text, last
  local function stage(pass, index)
    local kop = find()
    if o.after_pass then
      o.after_pass(pass, index, kop, m)
      kop = find()
    end
    names = shared_layout(kop, codec_of) or names
    copts.shared_names = names
    local text = kop:print()
    local st = { name = pass, index = index }
    local r
    if text == last_text then
      r, st.unchanged = last, true
    else
      local ok, err = pcall(M.check, kop, copts)
      if not ok then error(("check_lowering: after %s: %s"):format(pass, tostring(err)), 0) end
      r = err
    end
    last_text, last = text, r
    st.ok, st.states, st.runs, st.seconds, st.report = r.ok, r.states, r.runs, r.seconds, r.report
    st.violation, st.trace, st.min_phases = r.violation, r.trace, r.min_phases
    res.stages[#res.stages + 1] = st
    return st
  end
  local function fail(st, report)
    res.ok, res.report, res.violation, res.trace = false, report, st.violation, st.trace
    res.budget_exceeded = st.violation and st.violation.kind == "budget" or nil
    res.seconds = os.clock() - t0
    return res
  end
  local st = stage("input", 0)
  if not st.ok then
    return fail(st, "check_lowering: the input's protocol is already incorrect: " .. st.report)
  end
  for i, pass in ipairs(passes) do
    local ok, msg = core.run_pipeline(m, pass, { verify = o.verify ~= false })
    if not ok then error(("check_lowering: pass %s failed: %s"):format(pass, tostring(msg)), 0) end
    st = stage(pass, i)
    if not st.ok then
      res.broken_by, res.broken_at = pass, i
      if st.violation.kind == "budget" then
        return fail(st, ("check_lowering: after %s the checker ran out of states: %s"):format(pass, st.report))
      end
      return fail(st, ("%s broke the protocol: %s"):format(pass, st.report))
    end
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

