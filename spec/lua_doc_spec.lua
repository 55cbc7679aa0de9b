-- docs/lua.md cannot go stale:
--   * its Reference part has an entry (a `####` heading naming it in backquotes)
--     for every public name: every field of `tl` and of its namespace tables
--     (tl.device, tl.core, tl.cutlass, ...), every method of the objects a
--     script holds, enumerated from live objects (a kernel, a value, a type,
--     an op, a pipeline, a plan, ...), and every tl.options field the library
--     reads; a name without an entry fails, and so does an entry for a name
--     that is gone;
--   * every ```lua example of the Reference runs (each in a fresh module) and
--     must not raise. An example whose first line is `-- in a kernel body` runs
--     inside `k:define(function(k, p) ... end)` of a kernel with parameters
--     x, y (ptr<f32>) and n (i32), block 128; one whose first line is
--     `-- needs a GPU` runs where there is a GPU, else against the stand-in
--     driver (TILUA_FAKE_CUDA, set by ctest) with its own asserts off, else it
--     is only compiled (`load`).
local tl = require "tilua"
local H = dofile "spec/helper.lua"
local core = tl.core

local doc = H.slurp "docs/lua.md"

-- {=====================================================================
-- The Reference part: entries (a heading, its names, its examples)
-- ======================================================================

local ref_at = doc:find("\n## Reference\n", 1, true)
local ref = ref_at and doc:sub(ref_at + 1) or ""

-- The receivers the Reference writes methods with (`k:define`) -> the class.
-- C classes (core.metatable names) and Lua classes are both here; a class
-- the library gains without a receiver fails "every class has a receiver".
local receivers = {
  v = "Value", op = "Op", block = "Block", region = "Region", t = "Type", attr = "Attr",
  ctx = "Context", raw = "Buffer", mod = "Module", fn = "Function", lp = "LaunchPlan",
  plan = "SchedPlan", tm = "TensorMap",
  k = "Kernel", buf = "device.Buffer", ex = "cutlass.Executor", pipe = "cutlass.Pipeline",
  st = "cutlass.State", sb = "cutlass.SeqBar", ss = "cutlass.SeqState", sched = "cutlass.Scheduler",
  wt = "cutlass.WorkTile", ps = "sched.persistent", ts = "sched.tiles", g = "gemm", ag = "agent",
}
-- C classes that are no part of the surface: the textual parser's builder
-- (tl.parse uses it); the Reference says so under tl.core.parse_builder.
local internal_classes = { ParseBuilder = true }

local entries = {} -- { heading =, names = {...}, examples = { {code =, line =} } }
do
  local lineno, cur, in_code, code, code_line = 0, nil, false, nil, nil
  local base = select(2, doc:sub(1, ref_at or 0):gsub("\n", "")) + 1
  for line in (ref .. "\n"):gmatch "(.-)\n" do
    lineno = lineno + 1
    if in_code then
      if line == "```" then
        in_code = false
        if cur then cur.examples[#cur.examples + 1] = { code = table.concat(code, "\n"), line = code_line } end
      else
        code[#code + 1] = line
      end
    elseif line == "```lua" then
      in_code, code, code_line = true, {}, base + lineno - 1
    elseif line:match "^#### " then
      cur = { heading = line:sub(6), names = {}, examples = {}, prose = 0, line = base + lineno - 1 }
      entries[#entries + 1] = cur
      for span in line:gmatch "`([^`]+)`" do
        local name = span:match "^([%a_][%w_%.:]*)"
        if name then cur.names[#cur.names + 1] = name end
      end
    elseif line:match "^##" then
      cur = nil
    elseif cur and line:match "%S" then
      cur.prose = cur.prose + 1
    end
  end
end

local documented = {}
for _, e in ipairs(entries) do
  for _, n in ipairs(e.names) do documented[n] = e end
end

-- }=====================================================================

-- {=====================================================================
-- The public names, enumerated
-- ======================================================================

local function sorted_keys(t)
  local r = {}
  for k in pairs(t) do if type(k) == "string" then r[#r + 1] = k end end
  table.sort(r)
  return r
end

-- The methods of a class table: its fields and its bases' (through the
-- metatable's __index), without metamethods.
local function methods_of(cls)
  local out, seen = {}, {}
  local depth = 0
  while type(cls) == "table" and depth < 8 do
    for k, v in pairs(cls) do
      if type(k) == "string" and not k:match "^__" and type(v) == "function" and not seen[k] then
        seen[k] = true
        out[#out + 1] = k
      end
    end
    local mt = getmetatable(cls)
    cls = mt and mt.__index
    depth = depth + 1
  end
  table.sort(out)
  return out
end

local function is_class(t) return type(t) == "table" and rawget(t, "__index") == t end

-- Live objects of every class a script holds (built once, in a module of
-- their own). Each entry: class name -> the table its methods come from.
local function live_classes()
  local classes = {}
  local function add(name, obj)
    local mt = getmetatable(obj)
    assert(mt, "no metatable: " .. name)
    classes[name] = type(mt.__index) == "table" and mt.__index or mt
  end
  local saved = tl.module()
  tl.new_module()
  local k = tl.kernel("doc_live", { params = { { "x", tl.ptr(tl.f32) }, { "ws", tl.ptr(tl.i32) } }, block = 128 })
  add("Kernel", k)
  local ok, err = pcall(k.define, k, function(k, p)
    local v = tl.thread_id "x"
    add("Value", v)
    add("Op", v:def())
    add("Block", v:def():block())
    add("Region", k.op:region(1))
    add("Type", v:type())
    add("Attr", core.attr(1))
    local ex = k:executor("e", { first_warp = 0, warps = 4 })
    add("cutlass.Executor", ex)
    local pipe = k:pipeline { stages = 2, producers = 1, consumers = 1 }
    add("cutlass.Pipeline", pipe)
    add("cutlass.State", pipe:producer_start())
    local sb = k:seq_bar { depth = 2 }
    add("cutlass.SeqBar", sb)
    add("cutlass.SeqState", sb:state())
    local sched = tl.sched.data_parallel { tiles = { 2, 2, 1, 1 } }
    add("cutlass.Scheduler", sched)
    add("cutlass.WorkTile", sched:work(0))
    add("sched.tiles", tl.sched.tiles(sched))
    add("sched.persistent", tl.sched.persistent { m_tiles = 2, n_tiles = 2, workers = 2 })
    k:agent("a", { warps = 4 }, function(a) classes.agent = a end)
  end)
  assert(ok, "building the live objects: " .. tostring(err))
  add("Context", tl.context())
  add("SchedPlan", core.sched_plan { kind = "streamk", tiles_m = 2, tiles_n = 2, tiles_k = 4, workers = 3 })
  add("device.Buffer", setmetatable({}, tl.device.Buffer))
  add("gemm", tl.gemm.build { m = 256, n = 256, k = 128 })
  tl.set_module(saved)
  -- the classes of the device runtime, which need a GPU to make: their metatables
  for _, name in ipairs { "Buffer", "Module", "Function", "LaunchPlan", "TensorMap" } do
    classes[name] = core.metatable(name).__index
  end
  return classes
end

local builtin_types = { "i1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool", "f16", "bf16", "f32",
  "f64", "index", "none" }

-- tl.options fields the library reads (lua/tilua/**.lua, stdlib/*.lua).
local function option_names()
  local names, seen = {}, {}
  for _, dir in ipairs { "lua/tilua", "stdlib" } do
    for _, f in ipairs(H.files(H.root .. "/" .. dir, "%.lua$", true)) do
      for name in H.slurp(f):gmatch "tl%.options%.([%a_][%w_]*)" do
        if not seen[name] then seen[name] = true; names[#names + 1] = "tl.options." .. name end
      end
    end
  end
  table.sort(names)
  return names
end

-- Every public name: "tl.x", "tl.ns.x", "recv:method".
local function public_names(classes)
  local names = {}
  local recv_of = {}
  for r, c in pairs(receivers) do recv_of[c] = r end
  for _, key in ipairs(sorted_keys(tl)) do
    local v = tl[key]
    names[#names + 1] = "tl." .. key
    if type(v) == "table" and not is_class(v) and key ~= "last_stages" then -- a namespace
      for _, sub in ipairs(sorted_keys(v)) do names[#names + 1] = "tl." .. key .. "." .. sub end
    end
  end
  for _, ty in ipairs(builtin_types) do names[#names + 1] = "tl." .. ty end
  for _, o in ipairs(option_names()) do names[#names + 1] = o end
  for cname, cls in pairs(classes) do
    local r = recv_of[cname]
    for _, m in ipairs(methods_of(cls)) do names[#names + 1] = (r or ("?" .. cname)) .. ":" .. m end
  end
  table.sort(names)
  return names
end

-- }=====================================================================

describe("docs/lua.md", function()
  local classes = live_classes()

  it("has a Reference part with entries", function()
    assert.truthy(ref_at, "no '## Reference' heading")
    assert.is_true(#entries > 100, "entries: " .. #entries)
  end)

  it("every class has a receiver", function()
    local known = {}
    for _, c in pairs(receivers) do known[c] = true end
    local missing = {}
    for cname in pairs(classes) do
      if not known[cname] then missing[#missing + 1] = cname end
    end
    -- every C class of the bindings
    for _, f in ipairs(H.files(H.root .. "/src/lua", "%.[ch]$")) do
      for cname in H.slurp(f):gmatch '#define LB_[%u_]+ "tilua%.(%w+)"' do
        if not known[cname] and not internal_classes[cname] then missing[#missing + 1] = cname end
      end
    end
    -- every Lua class of a namespace (tl.cutlass.Pipeline, tl.device.Buffer, ...)
    for _, key in ipairs(sorted_keys(tl)) do
      local ns = tl[key]
      if type(ns) == "table" and not is_class(ns) then
        for _, sub in ipairs(sorted_keys(ns)) do
          if is_class(ns[sub]) and not known[key .. "." .. sub] then missing[#missing + 1] = key .. "." .. sub end
        end
      end
    end
    table.sort(missing)
    assert.same({}, missing)
  end)

  it("has an entry for every public name", function()
    local missing = {}
    for _, n in ipairs(public_names(classes)) do
      if not documented[n] then missing[#missing + 1] = n end
    end
    assert.same({}, missing)
  end)

  it("has no entry for a name that is gone", function()
    local public = {}
    for _, n in ipairs(public_names(classes)) do public[n] = true end
    local stale = {}
    for _, e in ipairs(entries) do
      for _, n in ipairs(e.names) do
        if not public[n] then stale[#stale + 1] = ("%s (line %d)"):format(n, e.line) end
      end
    end
    assert.same({}, stale)
  end)

  it("names nothing that is gone in its prose", function()
    local stale = {}
    for name in doc:gmatch "tl%.([%a_][%w_]*)" do
      if tl[name] == nil and not stale[name] then stale[#stale + 1] = "tl." .. name; stale[name] = true end
    end
    assert.same({}, stale)
  end)

  it("gives every entry a description and an example", function()
    local bare = {}
    for _, e in ipairs(entries) do
      if #e.names == 0 or #e.examples == 0 or e.prose == 0 then bare[#bare + 1] = ("%s (line %d)"):format(e.heading, e.line) end
    end
    assert.same({}, bare)
  end)
end)

-- {=====================================================================
-- The examples run
-- ======================================================================

local gpu = tl.device.available()
-- Without a GPU, `-- needs a GPU` examples run against the stand-in driver
-- (spec/c/fake_cuda.c: host memory for device memory, kernels that do
-- nothing), each in a tilua process of its own with the example's own asserts
-- off, since its kernels compute nothing: every call is checked, no result.
local fake = not gpu and os.getenv "TILUA_FAKE_CUDA"
if fake == "" then fake = nil end
local kernel_head = 'local k = tl.kernel("doc_example", { params = { { "x", tl.ptr(tl.f32) }, { "y", tl.ptr(tl.f32) }, '
  .. '{ "n", tl.i32 } }, block = 128 }); k:define(function(k, p) '
local quiet = setmetatable({ print = function() end }, { __index = _G })

-- Run chunk in this process, in a fresh module; put back what examples may change.
local function run_here(chunk)
  local saved_opts = {}
  for k, v in pairs(tl.options) do saved_opts[k] = v end
  local saved_module, saved_ctx, saved_pipeline = tl.module(), core.default_context(), tl.default_pipeline
  tl.new_module()
  -- tl.autotune's cache goes to a temporary file, not the user's
  local getenv, cache = os.getenv, os.tmpname()
  os.getenv = function(name) -- luacheck: ignore 122 (restored below)
    if name == "TILUA_AUTOTUNE_CACHE" then return cache end
    return getenv(name)
  end
  local print0 = print
  print = function() end -- luacheck: ignore 121 (what the library prints for an example: tl.check_ptx)
  local ok, err = pcall(chunk)
  print = print0 -- luacheck: ignore 121
  os.getenv = getenv -- luacheck: ignore 122
  os.remove(cache)
  for k in pairs(tl.options) do tl.options[k] = nil end
  for k, v in pairs(saved_opts) do tl.options[k] = v end
  core.default_context(saved_ctx)
  tl.set_module(saved_module)
  tl.default_pipeline = saved_pipeline
  assert(ok, tostring(err))
end

-- Run src in a tilua process with the stand-in driver.
local function run_fake(src)
  local f = os.tmpname() .. ".lua"
  local h = assert(io.open(f, "w"))
  h:write((src:gsub("local tl = require 'tilua'; ", "%0local assert = function(...) return ... end; ", 1)))
  h:close()
  local out, err, code = H.tilua_env({ TILUA_LIBCUDA = fake, TILUA_AUTOTUNE_CACHE = f .. ".cache" }, { f })
  os.remove(f)
  os.remove(f .. ".cache")
  err = err:gsub(f:gsub("%p", "%%%0"), "docs/lua.md")
  assert(code == 0, ("exit code %s: %s%s"):format(tostring(code), out, err))
end

describe("docs/lua.md examples", function()
  local n = 0
  for _, e in ipairs(entries) do
    for i, ex in ipairs(e.examples) do
      n = n + 1
      local first = ex.code:match "^[^\n]*"
      local in_kernel = first:match "^%-%- in a kernel body" ~= nil
      local needs_gpu = first:match "^%-%- needs a GPU" ~= nil
      -- the example's lines keep their numbers in docs/lua.md: the wrapper's
      -- head goes on the line of the ```lua fence
      local head = "local tl = require 'tilua'; " .. (in_kernel and kernel_head or "")
      local src = string.rep("\n", ex.line - 1) .. head .. "\n" .. ex.code .. (in_kernel and "\nend)" or "")
      local how = needs_gpu and (gpu and " on the GPU" or fake and " on the stand-in driver" or " (compiled only: no GPU)") or ""
      local label = ("runs the example of %s (docs/lua.md:%d)%s%s"):format(e.names[1] or e.heading, ex.line + 1,
                                                                          i > 1 and (" #" .. i) or "", how)
      it(label, function()
        local chunk = assert(load(src, "=docs/lua.md", "t", quiet))
        if not needs_gpu or gpu then return run_here(chunk) end
        -- cuBLASLt needs the real driver: with the stand-in one it is only compiled
        if fake and not ex.code:find("blas_gemm", 1, true) then return run_fake(src) end
      end)
    end
  end
  it("has its examples", function() assert.is_true(n > 100, "examples: " .. n) end)
end)
