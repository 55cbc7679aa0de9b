-- tilua.compile: compiling kernels to PTX (k:compile, tl.emit_ptx), assembling
-- it with ptxas (tl.ptxas, tl.check_ptx), and the options --emit / --stage /
-- --debug-hangs (tl.options.debug_hangs).
-- init.lua attaches it with one line: require("tilua.compile").attach(tl).

local core = require "tilua.core"

local M = {}

function M.attach(tl)
  local raise = tl.raise
  local Kernel = tl.Kernel

  tl.ptx_pipeline = "ptx"

  -- The effective options: tl.options (the host sets them from its own command
  -- line) over --emit=... / --stage=... among the script's arguments.
  local function options()
    local o = { emit = tl.options.emit, stage = tl.options.stage, debug_hangs = tl.options.debug_hangs }
    for _, a in ipairs(rawget(_G, "arg") or {}) do
      if type(a) == "string" then
        o.emit = o.emit or a:match "^%-%-emit=(.*)$"
        o.stage = o.stage or a:match "^%-%-stage=(.*)$"
        o.debug_hangs = o.debug_hangs or a == "--debug-hangs" or nil
      end
    end
    local dh = o.debug_hangs
    if dh ~= nil and dh ~= true and dh ~= false and (math.type(dh) ~= "integer" or dh <= 0) then
      raise("tl.options.debug_hangs: expected true or a number of milliseconds")
    end
    if o.emit and o.emit ~= "ir" and o.emit ~= "ptx" then raise(("--emit=%s: expected ir or ptx"):format(o.emit)) end
    return o
  end
  tl.effective_options = options

  -- tl.emit_ptx(module) -> PTX text (raises the emitter's diagnostics)
  function tl.emit_ptx(m)
    if getmetatable(m) == Kernel then m = m.module end
    local text, msg = core.emit_ptx(m)
    if not text then error(msg, 0) end
    return text
  end

  -- tl.ptxas(ptx [, arch]) -> true, log | false, log | nil, "ptxas not found ...":
  -- assembles the PTX with ptxas (TILUA_PTXAS, else /usr/local/cuda/bin/ptxas).
  function tl.ptxas(ptx, arch)
    local exe = os.getenv "TILUA_PTXAS"
    if not exe or exe == "" then
      local f = io.open("/usr/local/cuda/bin/ptxas", "r")
      if f then f:close() exe = "/usr/local/cuda/bin/ptxas" end
    end
    if not exe then return nil, "ptxas not found (set TILUA_PTXAS)" end
    local path = os.tmpname()
    local f = assert(io.open(path, "wb"))
    f:write(ptx)
    f:close()
    local p = io.popen(("'%s' -arch=%s -o /dev/null '%s' 2>&1"):format(exe, arch or "sm_90a", path))
    local log = p:read "a"
    local ok = p:close()
    os.remove(path)
    return ok == true, log
  end

  -- Assemble ptx and say so under `name`: "ok", "skipped" without ptxas; raises when
  -- ptxas rejects it. Returns true, false (no ptxas) or raises.
  function tl.check_ptx(name, ptx)
    local ok, log = tl.ptxas(ptx)
    if ok == nil then
      print(("%s: ptxas check skipped: %s"):format(name, log))
      return false
    end
    if not ok then error(("%s: ptxas rejected the PTX:\n%s"):format(name, log), 0) end
    print(("%s: ptxas -arch=sm_90a: ok"):format(name))
    return true
  end

  -- Print what --emit / --stage ask for and exit 0; else return.
  local function honour(stages, ptx)
    local o = options()
    if not o.emit and not o.stage then return end
    local text
    if o.stage then
      for i = #stages, 1, -1 do
        if stages[i].name == o.stage or tostring(stages[i].index) == o.stage then text = stages[i].ir break end
      end
      if not text then
        local names = {}
        for _, s in ipairs(stages) do names[#names + 1] = s.name end
        raise(("--stage=%s: no such stage (stages: %s)"):format(o.stage, table.concat(names, ", ")))
      end
    elseif o.emit == "ptx" then
      text = ptx or tl.emit_ptx(tl.module())
    else
      text = stages[#stages].ir
      for i = #stages, 1, -1 do
        if stages[i].name ~= "emit-ptx" then text = stages[i].ir break end
      end
    end
    io.stdout:write(text)
    io.stdout:flush()
    os.exit(0, true)
  end

  local compile0 = tl.compile
  -- --stage and --emit=ir need the stages' IR text: keep it for them
  local function compile(m, pipeline, opts)
    local o = options()
    if o.stage or o.emit == "ir" then
      opts = setmetatable({ keep_stages = true }, { __index = opts })
    end
    return compile0(m, pipeline, opts)
  end
  -- tl.compile keeps its behaviour; with --emit or --stage it prints and exits.
  function tl.compile(m, pipeline, opts)
    local r = compile(m, pipeline, opts)
    local o = options()
    if o.emit or o.stage then
      local ptx = o.emit == "ptx" and not o.stage and tl.emit_ptx(r) or nil
      honour(tl.last_stages, ptx)
    end
    return r
  end

  -- The pipeline of k:compile: with tl.options.debug_hangs (or --debug-hangs) the
  -- debug-hangs pass runs last (a number: the milliseconds a wait spins before it
  -- gives up).
  local function pipeline_of(pipeline)
    local p, dh = pipeline or tl.ptx_pipeline, options().debug_hangs
    if dh == true then return p .. ",debug-hangs" end
    if dh then return ("%s,debug-hangs{ms=%d}"):format(p, dh) end
    return p
  end

  -- k:compile([pipeline]) -> PTX. Compiles a copy of the kernel's module, so
  -- the authoring IR stays as built; tl.last_stages gets every stage and the PTX
  -- as the last one ("emit-ptx"). k.lowered is the compiled module.
  function Kernel:compile(pipeline)
    local m = self.module:clone()
    compile(m, pipeline_of(pipeline))
    local t0 = os.clock()
    local ok, ptx = pcall(tl.emit_ptx, m)
    if not ok then error(ptx, 0) end
    local stages = tl.last_stages
    stages[#stages + 1] = { name = "emit-ptx", index = #stages, ms = (os.clock() - t0) * 1e3, changed = true, ir = ptx }
    self.lowered, self.ptx = m, ptx
    self._fn = nil
    honour(stages, ptx)
    return ptx
  end

  -- The compiled tile.kernel op of this kernel (after k:compile).
  function Kernel:lowered_op()
    for _, op in ipairs(self.lowered:region(1):entry():ops()) do
      if op:name() == "tile.kernel" and op:attr("sym_name") == self.name then return op end
    end
  end
end

return M
