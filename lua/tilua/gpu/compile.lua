-- tilua.gpu.compile: compiling kernels to PTX (k:compile, tl.emit_ptx), assembling
-- it with ptxas (tl.ptxas, tl.check_ptx), and the host's say over compiles:
--
--   tl.options.stage_hook   fn(stages, module, ptx) after every tl.compile and
--                           k:compile (ptx nil for tl.compile); the host's
--                           (`tilua --emit/--stage` prints and exits there)
--   tl.options.stage_hook_ir  the hook reads the stages' IR: keep it
--   tl.options.debug_hangs  true or milliseconds: k:compile adds debug-hangs
--   tl.options.compile_cache  false: k:compile always compiles (see below)
--
-- The library never reads `arg` and never exits: the host owns both.
-- Added to tl when init.lua requires it.

local core = require "tilua.core"

local tl = require "tilua" -- the library being built (init.lua registers it before its rooms)

local M = {}

local raise = tl.raise
local Kernel = tl.Kernel

tl.ptx_pipeline = "ptx"

-- tl.options.debug_hangs, checked: nil, false, true or milliseconds.
local function debug_hangs()
  local dh = tl.options.debug_hangs
  if dh ~= nil and dh ~= true and dh ~= false and (math.type(dh) ~= "integer" or dh <= 0) then
    raise("tl.options.debug_hangs: expected true or a number of milliseconds")
  end
  return dh
end

-- Hand a compile's stages to the host's hook, if it set one.
local function stage_hook(stages, module, ptx)
  local hook = tl.options.stage_hook
  if hook == nil then return end
  if type(hook) ~= "function" then raise("tl.options.stage_hook: expected a function") end
  hook(stages, module, ptx)
end

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
  if type(ptx) ~= "string" then tl.raise(("ptxas: expected PTX text, got %s"):format(type(ptx))) end
  if arch ~= nil and (type(arch) ~= "string" or not arch:match "^sm_%d+[af]?$") then
    tl.raise(("ptxas: arch must be like 'sm_90a', got %s"):format(type(arch) == "string" and ("'" .. arch .. "'") or type(arch)))
  end
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
  return ok == true, tl.ptx_log_lines(ptx, log, path)
end

-- ptxas names lines of a temporary file: say instead which script line the
-- PTX line came from (the .loc before it), keeping the PTX line for reference.
function tl.ptx_log_lines(ptx, log, path)
  local files, locs, n = {}, {}, 0
  local cur
  for line in (ptx .. "\n"):gmatch "(.-)\n" do
    n = n + 1
    local id, name = line:match '^%.file (%d+) "(.*)"$'
    if id then files[tonumber(id)] = name:gsub("\\(.)", "%1") end
    local f, l = line:match "^%s*%.loc (%d+) (%d+)"
    if f then cur = { tonumber(f), tonumber(l) } end
    locs[n] = cur
  end
  local esc = path and path:gsub("%p", "%%%0")
  return (log:gsub("ptxas ([^,\n]+), line (%d+); ", function(file, ln)
    if esc and not file:match("^" .. esc .. "$") then return nil end
    local at = locs[tonumber(ln)]
    local src = at and files[at[1]]
    if not src then return ("ptxas (PTX line %s): "):format(ln) end
    return ("%s:%d: ptxas (PTX line %s): "):format(src, at[2], ln)
  end))
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

local compile0 = tl.compile
-- tl.compile with the stages' IR kept when the hook reads it.
local function compile(m, pipeline, opts)
  if tl.options.stage_hook and tl.options.stage_hook_ir then
    opts = setmetatable({ keep_stages = true }, { __index = opts })
  end
  return compile0(m, pipeline, opts)
end
-- tl.compile keeps its behaviour, then hands its stages to the hook.
function tl.compile(m, pipeline, opts)
  local r = compile(m, pipeline, opts)
  stage_hook(tl.last_stages, r, nil)
  return r
end

-- The pipeline of k:compile: with tl.options.debug_hangs (tilua --debug-hangs)
-- the debug-hangs pass runs last (a number: the milliseconds a wait spins
-- before it gives up).
local function pipeline_of(pipeline)
  local p, dh = pipeline or tl.ptx_pipeline, debug_hangs()
  if dh == true then return p .. ",debug-hangs" end
  if dh then return ("%s,debug-hangs{ms=%d}"):format(p, dh) end
  return p
end

-- k:compile([pipeline]) -> PTX. Compiles a copy of the kernel's module, so
-- the authoring IR stays as built; tl.last_stages gets every stage and the PTX
-- as the last one ("emit-ptx"). k.lowered is the compiled module.
--
-- The compile cache: a compile of a module whose text, pipeline, stage
-- keeping and protocol check are those of an earlier one (in the same context) gives the
-- earlier result again: its PTX, its lowered module and a copy of its stages
-- (each marked `cached`), handed to the hook as a fresh compile's are, so
-- nothing is hidden from inspection. tl.options.compile_cache = false turns
-- it off (benchmarks of the compiler itself).
local caches = setmetatable({}, { __mode = "k" }) -- context -> { key -> entry }

local function copy_stages(stages, cached)
  local out = {}
  for i, st in ipairs(stages) do
    out[i] = setmetatable({ name = st.name, index = st.index, ms = st.ms, changed = st.changed, ir = rawget(st, "ir"),
                            cached = cached }, getmetatable(st))
  end
  return out
end

function Kernel:compile(pipeline)
  -- a tile program (tl.tile_kernel) goes through tile-to-ptx
  local p = pipeline_of(pipeline or (self.tile_program and "tile-to-ptx") or nil)
  local cache, key
  if tl.options.compile_cache ~= false then
    local keep = tl.options.keep_stages or (tl.options.stage_hook and tl.options.stage_hook_ir) and true or false
    local ctx = tl.context()
    cache = caches[ctx]
    if not cache then
      cache = {}
      caches[ctx] = cache
    end
    -- a compile without the protocol check does not stand for one with it
    key = p .. "\0" .. tostring(keep) .. "\0" .. tostring(tl.options.check_protocol or false) .. "\0" .. self.module:print()
    local hit = cache[key]
    if hit then
      tl.last_stages, tl.last_check = copy_stages(hit.stages, true), hit.check
      self.lowered, self.ptx = hit.lowered, hit.ptx
      self._fn = nil
      stage_hook(tl.last_stages, hit.lowered, hit.ptx)
      return hit.ptx
    end
  end
  local m = self.module:clone()
  compile(m, p)
  local t0 = os.clock()
  local ok, ptx = pcall(tl.emit_ptx, m)
  if not ok then error(ptx, 0) end
  local stages = tl.last_stages
  stages[#stages + 1] = { name = "emit-ptx", index = #stages, ms = (os.clock() - t0) * 1e3, changed = true, ir = ptx }
  self.lowered, self.ptx = m, ptx
  self._fn = nil
  if cache then cache[key] = { ptx = ptx, lowered = m, stages = copy_stages(stages, nil), check = tl.last_check } end
  stage_hook(stages, m, ptx)
  return ptx
end

-- The compiled tile.kernel op of this kernel (after k:compile).
function Kernel:lowered_op()
  for _, op in ipairs(self.lowered:region(1):entry():ops()) do
    if op:name() == "tile.kernel" and op:attr("sym_name") == self.name then return op end
  end
end

return M
