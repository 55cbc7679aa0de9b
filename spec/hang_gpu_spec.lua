-- A hang becomes an error, on the GPU (tools/gpu test): spec/fixtures/gpu/deadlock.lua
-- deadlocks on purpose. With TILUA_LAUNCH_TIMEOUT=1 the process reports the kernel
-- at its launch and exits 1 within seconds; with --debug-hangs the waits give up
-- after 1 s, the launch fails, and the records name the warps, the mbarriers,
-- the phases and the lines of the waits. Without a GPU: pending (skipped), never
-- passed; spec/hang_spec.lua checks the same paths against a stand-in driver.
-- Not run under compute-sanitizer (tools/gpu sanitize): it hangs on purpose.
local H = dofile "spec/helper.lua"
local tl = require "tilua"

local SCRIPT = "spec/fixtures/gpu/deadlock.lua"

local function line_of(mark) return H.line_of(SCRIPT, mark) end

local function run(env, args)
  local out, err, code, secs = H.tilua_env(env, args, 90)
  print(("  %s: exit %d after %d s\n%s"):format(table.concat(args, " "), code, secs, err))
  return out, err, code, secs
end

local function gpu()
  if not tl.device.available() then pending("no GPU: " .. tl.device.error()) end
end

describe("a kernel that deadlocks on the GPU", function()
  it("is reported at its launch after TILUA_LAUNCH_TIMEOUT = 1 s and the process exits 1", function()
    gpu()
    local out, err, code, secs = run({ TILUA_LAUNCH_TIMEOUT = "1" }, { SCRIPT })
    assert.equal(1, code, err)
    assert.truthy(err:find(("%s:%d: kernel 'deadlock' did not finish within 1 s"):format(SCRIPT, line_of "-- LAUNCH"),
      1, true), err)
    assert.falsy(out:find("finished", 1, true))
    assert.is_true(secs < 30, ("took %d s"):format(secs))
  end)

  it("gives up in its waits with --debug-hangs and names them", function()
    gpu()
    local _, err, code, secs = run({ TILUA_LAUNCH_TIMEOUT = "30" }, { "--debug-hangs", SCRIPT })
    assert.equal(1, code, err)
    assert.truthy(err:find(("%s:%d: kernel 'deadlock' failed: CUDA_ERROR_"):format(SCRIPT, line_of "-- LAUNCH"), 1, true),
      err)
    local lines = { [line_of "HANG: the producer waits"] = true, [line_of "HANG: the consumer waits"] = true }
    local found = 0
    for line in err:gmatch("gave up after %d+ us waiting on the mbarrier at shared 0x%x+ for phase parity [01]: " ..
                           SCRIPT:gsub("%p", "%%%0") .. ":(%d+): mbarrier wait") do
      assert.is_true(lines[tonumber(line)], "a record at line " .. line)
      found = found + 1
    end
    assert.is_true(found >= 1, err)
    assert.is_true(secs < 60, ("took %d s"):format(secs))
  end)
end)
