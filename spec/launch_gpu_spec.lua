-- Launches on the GPU name a failure at its script line (docs/runtime.md,
-- "Launches"): the runtime checks every 32 launches and before a blocking
-- call instead of after every launch, so a kernel that fails is reported with
-- the launches since the last check, its own line among them; with
-- TILUA_LAUNCH_CHECK=each, at its line alone. spec/fixtures/gpu/launch_failure.lua
-- launches a kernel that traps between launches that do not. Without a GPU:
-- pending (ctest: skipped); spec/hang_spec.lua checks the same reports against
-- a stand-in driver.
local H = dofile "spec/helper.lua"
local tl = require "tilua"

local SCRIPT = "spec/fixtures/gpu/launch_failure.lua"

local function line_of(mark) return H.line_of(SCRIPT, mark) end

local function run(env)
  local out, err, code = H.tilua_env(env, { SCRIPT }, 60)
  print(("  %s%s: exit %d\n%s"):format(env.TILUA_LAUNCH_CHECK and "TILUA_LAUNCH_CHECK=each " or "", SCRIPT, code, err))
  assert.equal(1, code, out .. err)
  assert.falsy(out:find("not reported", 1, true), out)
  return err
end

describe("a kernel that fails on the GPU", function()
  it("is named at its line among the launches since the runtime's last check", function()
    if not tl.device.available() then pending("no GPU: " .. tl.device.error()) return end
    local err = run {}
    local trap = ("%s:%d: kernel 'trap'"):format(SCRIPT, line_of "-- TRAP")
    assert.truthy(err:find(trap, 1, true), err)
    assert.truthy(err:find("failed: CUDA_ERROR_", 1, true), err)
    -- the report's first line names where its window of launches starts: the
    -- launches before the trap's (or the trap's, had a check fallen between)
    local first = tonumber(err:match("^[^\n]*" .. SCRIPT:gsub("%p", "%%%0") .. ":(%d+): "))
    assert.truthy(first == line_of "-- FINE" or first == line_of "-- TRAP", err)
  end)

  it("is named at its line alone with TILUA_LAUNCH_CHECK=each", function()
    if not tl.device.available() then pending("no GPU: " .. tl.device.error()) return end
    local err = run { TILUA_LAUNCH_CHECK = "each" }
    local want = ("%s:%d: kernel 'trap' failed: CUDA_ERROR_"):format(SCRIPT, line_of "-- TRAP")
    assert.truthy(err:find(want, 1, true), err)
    assert.falsy(err:find(("%s:%d:"):format(SCRIPT, line_of "-- FINE"), 1, true), err)
  end)
end)
