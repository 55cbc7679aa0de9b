-- A hang becomes an error (src/cuda/cuda_rt.c, hang.c; src/passes/debug_hangs.c),
-- checked without a GPU: spec/fixtures/gpu/deadlock.lua runs against a stand-in
-- driver (spec/c/fake_cuda.c, through TILUA_LIBCUDA) whose kernels never finish,
-- or trap after writing debug-hangs records. Its calls that would wait for a
-- hung kernel block forever, as the real driver's do, so a runtime that made one
-- after the deadline would hang here (every run is under `timeout`).
-- spec/hang_gpu_spec.lua runs the same kernel on the GPU.
local H = dofile "spec/helper.lua"
local tl = require "tilua"

local FAKE = os.getenv "TILUA_FAKE_CUDA"
local SCRIPT = "spec/fixtures/gpu/deadlock.lua"

local function line_of(mark) return H.line_of(SCRIPT, mark) end

local function run(env, args) return H.tilua_env(env, args, 60) end

-- A script (a temporary file) that defines an empty kernel k (`name`, "boom" unless
-- given) of one i32 parameter in its first three lines, then runs body.
local function script(body, name)
  return H.temp('local tl = require "tilua"\n'
                .. ('local k = tl.kernel("%s", { params = { { "n", tl.i32 } }, block = 32 })\n'):format(name or "boom")
                .. 'k:define(function(k, p) end)\n' .. body, ".lua")
end

local function need_fake()
  if not FAKE or FAKE == "" then pending("TILUA_FAKE_CUDA is not set (run through ctest)") end
end

-- The wait sites the debug-hangs pass gave the kernel (its final IR).
local function sites()
  local out, err, code = H.tilua_run { "--debug-hangs", "--emit=ir", SCRIPT }
  assert.equal(0, code, err)
  local list = {}
  for s in out:match("hang_sites = (%b[])"):gmatch '"(.-)"' do list[#list + 1] = s end
  return list
end

describe("the stand-in driver", function()
  it("answers every entry point the runtime asks for (spec/c/fake_cuda.c follows src/cuda/cuda_syms.def)", function()
    need_fake()
    local out, err = run({ TILUA_LIBCUDA = FAKE }, { "-e", 'local tl = require "tilua" print(tl.device.available(), tl.device.error())' })
    assert.equal("true\t", out:gsub("\n$", ""), err)
  end)
end)

describe("launch plans", function()
  it("take every launch after the first, with the Lua path's checks and messages", function()
    need_fake()
    local f = "spec/fixtures/gpu/launch_plan.lua"
    local out, err, code = run({ TILUA_LIBCUDA = FAKE }, { f })
    assert.equal(0, code, err)
    for _, want in ipairs {
      "plan:\ttrue",
      f .. ":21: launch: argument 'n' must be an integer, got many",
      f .. ":21: launch: missing argument 'x' (#3)",
      f .. ":21: launch: 4 arguments for 3 parameters",
      f .. ":21: launch: argument 'out' must be a device buffer, got number",
      f .. ":21: launch: grid 0 is out of range",
    } do
      assert.truthy(out:find(want, 1, true), ("%q not in:\n%s"):format(want, out))
    end
  end)

  it("name the launch that failed, not the later one the sticky error refuses", function()
    need_fake()
    local f = script [[
k:launch { grid = 1, args = { 1 } }
k:launch { grid = 1, args = { 2 } }
k:launch { grid = 1, args = { 3 } }
tl.device.synchronize()
]]
    local _, err, code = run({ TILUA_LIBCUDA = FAKE, FAKE_CUDA_KERNELS = "trap", FAKE_CUDA_AFTER = "2" }, { f })
    os.remove(f)
    assert.equal(1, code, err)
    assert.truthy(err:find(":5: kernel 'boom' failed: CUDA_ERROR_ILLEGAL_INSTRUCTION", 1, true), err)
  end)

  it("report a hung kernel at the line of its (fast-path) launch", function()
    need_fake()
    local f = script([[
k:launch { grid = 1, args = { 1 } }
tl.device.synchronize()
k:launch { grid = 1, args = { 2 } }
tl.device.synchronize()
]], "spin")
    local _, err, code = run({ TILUA_LIBCUDA = FAKE, FAKE_CUDA_KERNELS = "hang", FAKE_CUDA_AFTER = "2",
                               TILUA_LAUNCH_TIMEOUT = "0.5" }, { f })
    os.remove(f)
    assert.equal(1, code, err)
    assert.truthy(err:find(":6: kernel 'spin' did not finish within 0.5 s", 1, true), err)
  end)
  -- launches of one kernel from one line share an event (TLCU_GROUP_MAX of them),
  -- so a failure among them is named at that line with the group's size
  it("name a failure among consecutive launches from one line, with their count", function()
    need_fake()
    local f = script "for i = 1, 5 do k:launch { grid = 1, args = { i } } end\ntl.device.synchronize()\n"
    local _, err, code = run({ TILUA_LIBCUDA = FAKE, FAKE_CUDA_KERNELS = "trap", FAKE_CUDA_AFTER = "3" }, { f })
    os.remove(f)
    assert.equal(1, code, err)
    -- the failure sticks, so the fourth launch is refused and the first three are the group
    assert.truthy(err:find(":4: kernel 'boom' (one of 3 consecutive launches) failed: CUDA_ERROR_ILLEGAL_INSTRUCTION",
      1, true), err)
  end)

  it("give a group of hung launches one timeout per launch", function()
    need_fake()
    local f = script "for i = 1, 3 do k:launch { grid = 1, args = { i } } end\ntl.device.synchronize()\n"
    local _, err, code = run({ TILUA_LIBCUDA = FAKE, FAKE_CUDA_KERNELS = "hang", TILUA_LAUNCH_TIMEOUT = "0.2" }, { f })
    os.remove(f)
    assert.equal(1, code, err)
    assert.truthy(err:find(":4: kernel 'boom' (one of 3 consecutive launches) did not finish within 0.6 s", 1, true), err)
  end)

  it("follow thousands of launches from two lines, and name the first failing one's line", function()
    need_fake()
    local f = script [[
for i = 1, 1500 do
  k:launch { grid = 1, args = { i } }
  if i % 3 == 0 then k:launch { grid = 2, args = { i } } end
end
tl.device.synchronize()
print("ok")
]]
    local out, err, code = run({ TILUA_LIBCUDA = FAKE }, { f })
    assert.equal(0, code, err)
    assert.equal("ok\n", out)
    -- launch 1001 is the 751st at line 5 (every third i adds one at line 6)
    local _
    _, err, code = run({ TILUA_LIBCUDA = FAKE, FAKE_CUDA_KERNELS = "trap", FAKE_CUDA_AFTER = "1001" }, { f })
    os.remove(f)
    assert.equal(1, code, err)
    assert.truthy(err:find(":5: kernel 'boom'", 1, true), err)
  end)
end)

describe("the launch deadline", function()
  it("reports a kernel past TILUA_LAUNCH_TIMEOUT at its launch and exits 1 without waiting for it", function()
    need_fake()
    local out, err, code, secs = run({ TILUA_LIBCUDA = FAKE, FAKE_CUDA_KERNELS = "hang", TILUA_LAUNCH_TIMEOUT = "1" },
                                     { SCRIPT })
    assert.equal(1, code, err)
    assert.truthy(err:find(("%s:%d: kernel 'deadlock' did not finish within 1 s"):format(SCRIPT, line_of "-- LAUNCH"),
      1, true), err)
    assert.falsy(out:find("finished", 1, true))
    assert.is_true(secs < 20, ("took %d s"):format(secs))
  end)

  it("takes fractions of a second", function()
    need_fake()
    local _, err, code = run({ TILUA_LIBCUDA = FAKE, FAKE_CUDA_KERNELS = "hang", TILUA_LAUNCH_TIMEOUT = "0.5" }, { SCRIPT })
    assert.equal(1, code, err)
    assert.truthy(err:find("kernel 'deadlock' did not finish within 0.5 s", 1, true), err)
  end)

  it("reports a kernel that fails at its launch, with its debug-hangs records and their sites", function()
    need_fake()
    local s = sites()
    local _, err, code = run({ TILUA_LIBCUDA = FAKE, FAKE_CUDA_KERNELS = "trap", FAKE_CUDA_RECORDS = "1" },
                             { "--debug-hangs", SCRIPT })
    assert.equal(1, code, err)
    assert.truthy(err:find(("%s:%d: kernel 'deadlock' failed: CUDA_ERROR_ILLEGAL_INSTRUCTION"):format(SCRIPT,
      line_of "-- LAUNCH"), 1, true), err)
    assert.truthy(err:find("block 0 warp 0 lane 0 gave up after 1000123 us waiting on the mbarrier at shared 0x40 " ..
      "for phase parity 1: " .. s[1], 1, true), err)
    assert.truthy(err:find("block 0 warp 1 waits at named barrier 1 (64 threads): " .. s[2], 1, true), err)
  end)
end)

describe("the debug-hangs pass", function()
  it("instruments every mbarrier wait loop and barrier wait, with its script line", function()
    local s = sites()
    local function has_site(mark, what)
      local want = ("%s:%d: %s"):format(SCRIPT, line_of(mark), what)
      for _, x in ipairs(s) do if x == want then return true end end
      error(("no site %q in %s"):format(want, table.concat(s, "; ")))
    end
    has_site("HANG: the producer waits", "mbarrier wait")
    has_site("HANG: the consumer waits", "mbarrier wait")
    local out, err, code = H.tilua_run { "--debug-hangs", "--emit=ptx", SCRIPT }
    assert.equal(0, code, err)
    assert.truthy(out:find(".param .u64 deadlock_param_1", 1, true), "the records' address: one more parameter")
    assert.truthy(out:find("%globaltimer", 1, true))
    assert.truthy(out:find("fence.sc.sys;", 1, true))
    assert.truthy(out:find("trap;", 1, true))
    local ok, log = tl.ptxas(out)
    assert(ok ~= false, log)
  end)

  it("is off by default, and refuses a bad option", function()
    local out = H.tilua_run { "--emit=ptx", SCRIPT }
    assert.falsy(out:find("trap;", 1, true))
    assert.falsy(out:find("deadlock_param_1", 1, true))
    local _, err, code = H.tilua_run { "opt", "-p", "debug-hangs{ms=0}", "spec/fixtures/valid/scf.tir" }
    assert.equal(1, code)
    assert.matches("option ms must be a positive integer", err)
  end)
end)
