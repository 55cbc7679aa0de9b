-- k:launch's fast path (src/lua/l_launch.c) on the stand-in driver, with Lua
-- 5.4's structures read (src/lua/l_peek.h) and through the API only
-- (TILUA_LUA_PEEK=0): the fields of cfg and the arguments it reads, and the
-- script line of a launch (src/lua/l_ir.c, lb_launch_site), looked up once
-- per call site and remembered by the caller's pc while its function lives, so
-- that a launch does not walk the function's line table. Checked on the stand-in
-- driver (spec/c/fake_cuda.c): the last launch of the script fails, and the
-- report at the synchronize lists every launch since the runtime last checked,
-- each at its line. A memo that outlived its function, or told two call sites of
-- one function apart wrongly, would name a wrong line here.
local H = dofile "spec/helper.lua"

local FAKE = os.getenv "TILUA_FAKE_CUDA"

local function need_fake()
  if not FAKE or FAKE == "" then pending("TILUA_FAKE_CUDA is not set (run through ctest)") end
end

-- Runs the script (its text) with launch number `after` on failing; returns stderr.
local PEEK
local function failing(text, after, env)
  local f = H.temp(text, ".lua")
  env = env or {}
  env.TILUA_LUA_PEEK = PEEK
  env.TILUA_LIBCUDA, env.FAKE_CUDA_KERNELS, env.FAKE_CUDA_AFTER = FAKE, "trap", tostring(after)
  local _, err, code = H.tilua_env(env, { f })
  os.remove(f)
  assert.equal(1, code, err)
  return err, f
end

-- The report's list of launches: "file:line" of each, in order.
local function listed(err)
  local list = {}
  for where in err:gmatch "\n    ([^\n]-:%d+): kernel 'boom'" do list[#list + 1] = where end
  return list
end

-- Runs the script (its text) on the stand-in driver with its launch log;
-- returns stdout and the log's lines of kernel `name`'s launches, after the name.
local function logged(text, name)
  local f = H.temp(text, ".lua")
  local log = os.tmpname()
  local out, err, code = H.tilua_env({ TILUA_LIBCUDA = FAKE, TILUA_LUA_PEEK = PEEK, FAKE_CUDA_LOG = log }, { f })
  os.remove(f)
  assert.equal(0, code, err)
  local runs = {}
  for line in io.lines(log) do
    if line:find("^launch " .. name .. " ") then runs[#runs + 1] = line:sub(#name + 9) end
  end
  os.remove(log)
  return out, runs
end

local HEAD = 'local tl = require "tilua"\n'
  .. 'local k = tl.kernel("boom", { params = { { "n", tl.i32 } }, block = 32 })\n'
  .. "k:define(function(k, p) end)\n"
  .. "k:launch { grid = 1, args = { 0 } } -- the first launch: compile, load, the plan\n"
  .. "tl.device.synchronize()\n"

describe("the reads of Lua 5.4's structures", function()
  it("are on with Lua 5.4 (the check at the first launch passes), off with TILUA_LUA_PEEK=0", function()
    local code = 'print(require("tilua").core.lua_peek())'
    local out, err = H.tilua_env({}, { "-e", code })
    assert.equal(_VERSION == "Lua 5.4" and "true\n" or "false\n", out, err)
    out, err = H.tilua_env({ TILUA_LUA_PEEK = "0" }, { "-e", code })
    assert.equal("false\n", out, err)
  end)
end)

-- each case both ways: Lua 5.4's structures read (l_peek.h) and the API's way
for _, peek in ipairs { "1", "0" } do
  describe(("a launch's script line (TILUA_LUA_PEEK=%s)"):format(peek), function()
    before_each(function() PEEK = peek end)

    it("names each launch in flight at its line: two lines of one loop, a coroutine, a helper", function()
      need_fake()
      local err, f = failing(HEAD .. [[
  for i = 1, 2 do
    k:launch { grid = 1, args = { i } }
    k:launch { grid = 1, args = { -i } }
  end
  coroutine.wrap(function() k:launch { grid = 1, args = { 8 } } end)()
  local function helper() k:launch { grid = 1, args = { 9 } } end
  helper()
  tl.device.synchronize()
  ]], 7)
      assert.truthy(err:find(":7: kernel 'boom' or one of the 5 launches after it failed: CUDA_ERROR_ILLEGAL_INSTRUCTION",
        1, true), err)
      local name = f:match "[^/]*$"
      local want = {}
      for i, line in ipairs { 7, 8, 7, 8, 10, 11 } do want[i] = name .. ":" .. line end
      local got = listed(err)
      for i, where in ipairs(got) do got[i] = where:match "[^/]*$" end
      assert.same(want, got)
    end)

    -- the same code at another line each time, each chunk collected before the
    -- next is loaded: a new function may take a dead one's address, and its code
    -- the dead one's code's
    it("names the launch of a chunk loaded anew at its line, not at a dead chunk's", function()
      need_fake()
      local err = failing(HEAD .. [[
  local src = {}
  for i = 1, 15 do src[i] = ("\n"):rep(i) .. "local k = ...\nk:launch { grid = 1, args = { 7 } }\n" end
  collectgarbage()
  collectgarbage()
  for i = 1, 15 do
    local chunk = load(src[i], "@gen.lua")
    chunk(k)
    chunk = nil -- luacheck: ignore
    collectgarbage()
    collectgarbage()
  end
  k:launch { grid = 1, args = { 9 } }
  tl.device.synchronize()
  ]], 17)
      local want = {}
      for i = 1, 15 do want[i] = "gen.lua:" .. (i + 2) end
      local got = listed(err)
      got[16] = nil -- the failing launch, the script's
      assert.same(want, got)
    end)

    it("names the launch that failed at its line with a check after every launch, on the plan's path", function()
      need_fake()
      local err = failing(HEAD .. [[
  for i = 1, 3 do
    k:launch { grid = 1, args = { i } }
    k:launch { grid = 1, args = { -i } }
  end
  tl.device.synchronize()
  ]], 5, { TILUA_LAUNCH_CHECK = "each" })
      -- launch 5 is the second loop's second launch: line 8
      assert.truthy(err:find(":8: kernel 'boom' failed: CUDA_ERROR_ILLEGAL_INSTRUCTION", 1, true), err)
      assert.falsy(err:find(":7: kernel", 1, true), err)
    end)

    it("names an argument's error on the plan's path at the launch's line", function()
      need_fake()
      local f = H.temp(HEAD .. [[
  local ok, e = pcall(function()
    k:launch { grid = 1, args = { "many" } }
  end)
  print(e)
  ]], ".lua")
      local out, err, code = H.tilua_env({ TILUA_LIBCUDA = FAKE, TILUA_LUA_PEEK = PEEK }, { f })
      os.remove(f)
      assert.equal(0, code, err)
      assert.truthy(out:find(":7: launch: argument 'n' must be an integer, got many", 1, true), out)
    end)
  end)

  describe(("the fields of a launch (TILUA_LUA_PEEK=%s)"):format(peek), function()
    before_each(function() PEEK = peek end)
    it("are read alike: grid, args by position and by name, smem, pdl, stream; block, device and errors by the slow path", function()
      need_fake()
      local out, runs = logged([[
local tl = require "tilua"
local k = tl.kernel("cfgk", { params = { { "n", tl.i32 }, { "x", tl.f32 } }, block = 32 })
k:define(function(k, p) end)
local s = tl.device.stream()
k:launch { grid = 1, args = { 1, 1.5 } }
k:launch { grid = 2, args = { 2, 2 } }
k:launch { grid = { 1, 3 }, args = { n = 3, x = 0.25 }, smem = 64 }
k:launch { grid = 1, args = { 4, 1 }, pdl = true }
k:launch { grid = 1, args = { 5, 1 }, stream = s }
k:launch { grid = 1, args = { 6, 1 }, block = 32 }
k:launch { grid = 1, args = { 7, 1 }, device = 0 }
k:launch { args = { 8, 1 }, [1] = "ignored", other = 1 }
local cfg = { grid = 1, args = { 9, 1 }, smem = 16 }
cfg.smem = nil -- a key whose value was removed
k:launch(cfg)
print(pcall(k.launch, k, { grid = 1, args = { 9, 1 }, block = 64 }))
tl.device.synchronize()
]], "cfgk")
      assert.truthy(out:find(":16: launch: block {64,1,1} differs from the kernel's {32,1,1}", 1, true), out)
      for i, r in ipairs(runs) do runs[i] = r:gsub(" stream=%S+", " stream") end
      local plain = "block=32,1,1 cluster=1,1,1 smem=0"
      assert.same({ "grid=1,1,1 " .. plain .. " args=0x1 0x3fc00000",
                    "grid=2,1,1 " .. plain .. " args=0x2 0x40000000",
                    "grid=1,3,1 block=32,1,1 cluster=1,1,1 smem=64 args=0x3 0x3e800000",
                    "grid=1,1,1 " .. plain .. " pdl=1 args=0x4 0x3f800000",
                    "grid=1,1,1 " .. plain .. " args=0x5 0x3f800000",
                    "grid=1,1,1 " .. plain .. " args=0x6 0x3f800000",
                    "grid=1,1,1 " .. plain .. " args=0x7 0x3f800000",
                    "grid=1,1,1 " .. plain .. " args=0x8 0x3f800000",
                    "grid=1,1,1 " .. plain .. " args=0x9 0x3f800000" }, runs)
    end)
    it("are refused alike at their lines: too many arguments (in the array or after it), a grid out of range", function()
      need_fake()
      local out, runs = logged([[
local tl = require "tilua"
local k = tl.kernel("cfgk", { params = { { "n", tl.i32 }, { "x", tl.f32 } }, block = 32 })
k:define(function(k, p) end)
k:launch { grid = 1, args = { 1, 1 } }
local many = { 2, 1, 3 }
print(pcall(k.launch, k, { grid = 1, args = many }))
local after = { 3, 1, a = 1, b = 2, c = 3 } -- (room for a fourth key in the hash part)
after[3] = 4 -- there: the array is full
print(pcall(k.launch, k, { grid = 1, args = after }))
print(pcall(k.launch, k, { grid = 0, args = { 4, 1 } }))
print(pcall(k.launch, k, { grid = 1 << 31, args = { 5, 1 } }))
local holes = { 6, 1, nil, nil }
k:launch { grid = 3, args = holes }
tl.device.synchronize()
]], "cfgk")
      assert.truthy(out:find(":6: launch: 3 arguments for 2 parameters", 1, true), out)
      assert.truthy(out:find(":9: launch: 3 arguments for 2 parameters", 1, true), out)
      assert.truthy(out:find(":10: launch: grid 0 is out of range", 1, true), out)
      assert.truthy(out:find(":11: launch: grid 2147483648 is out of range", 1, true), out)
      for i, r in ipairs(runs) do runs[i] = r:match "^grid=(%S+)" .. " " .. r:match "args=(.*)$" end
      assert.same({ "1,1,1 0x1 0x3f800000", "3,1,1 0x6 0x3f800000" }, runs)
    end)
  end)

  describe(("one args table launched again (TILUA_LUA_PEEK=%s)"):format(peek), function()
    before_each(function() PEEK = peek end)
    it("passes what it holds at each launch: values changed in it, buffers swapped, freed, and given back", function()
      need_fake()
      local out, runs = logged([[
local tl = require "tilua"
local k = tl.kernel("memo", { params = { { "p", tl.ptr(tl.f32) }, { "n", tl.i32 }, { "x", tl.f32 } }, block = 32 })
k:define(function(k, p) end)
local a, b = tl.device.alloc(tl.f32, 4), tl.device.alloc(tl.f32, 4)
local args = { a, 1, 0.5 }
local cfg = { grid = 1, args = args }
k:launch(cfg)
k:launch(cfg) -- the same values: passed as they were packed
args[2] = 2
k:launch(cfg)
args[1] = b
k:launch(cfg)
args[1] = a
k:launch(cfg)
args[3] = 2
k:launch(cfg)
k:launch(cfg)
a:free()
print(pcall(k.launch, k, cfg))
local c = tl.device.alloc(tl.f32, 4)
args[1] = c
k:launch(cfg)
k:launch(cfg)
tl.device.synchronize()
]], "memo")
      local A, B, C = "buf0+0", "buf1+0", "buf2+0" -- (the stand-in driver's names of a, b and c)
      assert.truthy(out:find(":19: attempt to use a freed device buffer", 1, true), out)
      for i, r in ipairs(runs) do runs[i] = r:match "args=(.*)$" end
      local half, two = "0x3f000000", "0x40000000"
      assert.same({ A .. " 0x1 " .. half, A .. " 0x1 " .. half, A .. " 0x2 " .. half, B .. " 0x2 " .. half,
                    A .. " 0x2 " .. half, A .. " 0x2 " .. two, A .. " 0x2 " .. two, C .. " 0x2 " .. two,
                    C .. " 0x2 " .. two }, runs)
    end)
  end)

  describe(("the plan a launch takes (TILUA_LUA_PEEK=%s)"):format(peek), function()
    it("is dropped when the kernel compiles again, and made again from the new function", function()
      need_fake()
      local f = H.temp(HEAD .. [[
local first = assert(k._plan, "the first launch made a plan")
k:launch { grid = 1, args = { 1 } }
assert(k._plan == first, "the plan is kept between launches")
k:compile() -- a compile (a cache hit here) gives the kernel its function anew
assert(k._plan == nil and k._fn == nil, "a compile drops the plan with the function")
k:launch { grid = 1, args = { 2 } }
assert(k._plan and k._plan ~= first, "the next launch makes a plan of the new function")
tl.device.synchronize()
print "ok"
]], ".lua")
      local out, err, code = H.tilua_env({ TILUA_LIBCUDA = FAKE, TILUA_LUA_PEEK = peek }, { f })
      os.remove(f)
      assert.equal(0, code, err)
      assert.equal("ok\n", out)
    end)
  end)
end

describe("fn:launch (src/lua/l_device.c)", function()
  it("raises a function's shared-memory attribute once for each larger size, not at every launch", function()
    need_fake()
    local f = H.temp(HEAD .. [[
local fn = k._fn
for _, smem in ipairs { 60000, 60000, 60000, 80000, 60000, 80000, 1000 } do
  fn:launch({ grid = 1, block = 32, smem = smem }, { { "i32", 1 } })
end
tl.device.synchronize()
]], ".lua")
    local log = os.tmpname()
    local out, err, code = H.tilua_env({ TILUA_LIBCUDA = FAKE, FAKE_CUDA_LOG = log, FAKE_CUDA_LOG_ATTRS = "1" }, { f })
    os.remove(f)
    assert.equal(0, code, err .. out)
    local attrs, launches = {}, 0
    for line in io.lines(log) do
      if line:find "^attribute boom " then attrs[#attrs + 1] = line end
      if line:find "^launch boom " then launches = launches + 1 end
    end
    os.remove(log)
    assert.equal(8, launches) -- HEAD's and the seven
    assert.same({ "attribute boom 8 = 60000", "attribute boom 8 = 80000" }, attrs)
  end)
end)
