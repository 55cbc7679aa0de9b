-- The user's access to the protocol checker (docs/protocol.md, "Running the
-- checker: tilua opt and the REPL"): the verify-protocol pass (a pass
-- implemented in Lua, run by the C pass manager), its options, statistics and
-- diagnostics, and the REPL's :check and :replay, on stdin and in a
-- pseudo-terminal.
local H = dofile "spec/helper.lua"
local core = require "tilua.core"

local GOOD = "spec/fixtures/passes/verify_protocol.tir"
local BAD = "spec/fixtures/passes/verify_protocol_invalid.tir"

-- The first case of the invalid fixture (the empty barriers counting 33) as a file of its own.
local function bad_file()
  local text = H.slurp(BAD)
  local first = text:match "^(.-)\n// %-%-%-%-%-\n"
  local f = os.tmpname()
  os.remove(f)
  f = f .. ".tir"
  local h = assert(io.open(f, "w"))
  h:write(first)
  h:close()
  return f
end

describe("the verify-protocol pass", function()
  it("is registered as a pass implemented in Lua, with its options", function()
    local found
    for _, p in ipairs(core.passes()) do
      if p.name == "verify-protocol" then found = p end
    end
    assert.truthy(found)
    assert.is_true(found.lua)
    assert.equal("grid max_states n bytes trace max_ops", found.options)
    assert.is_false(core.passes()[1].lua)
  end)

  it("finds nothing in ring_copy, leaves the IR as it was and prints the state and run counts (--stats)", function()
    local out, err, code = H.tilua_run { "opt", GOOD, "--pass", "verify-protocol", "--stats" }
    assert.equal(0, code, err)
    local plain = H.tilua_run { "opt", GOOD }
    assert.equal(plain, out)
    assert.matches("// verify%-protocol statistics\n", err)
    assert.matches("//   ring_copy: states +%d+\n", err)
    assert.matches("//   ring_copy: runs +%d+\n", err)
    assert.matches("//   ring_copy: inputs +n = 4096: %(4096 zero bytes, 4096 zero bytes, 4096%)", err)
    assert.matches("//   ring_copy: fewest phases of a barrier +[2-9]", err) -- every ring wrapped twice
  end)

  it("runs in a pipeline string, before the ptx pipeline, with options", function()
    local out, err, code = H.tilua_run { "opt", GOOD, "-p", "verify-protocol{max_states=5000,n=1024},ptx", "--stats" }
    assert.equal(0, code, err)
    assert.matches("ring_copy: inputs +n = 1024", err)
    assert.matches("nvvm%.", out) -- lowered after the check
    _, err, code = H.tilua_run { "opt", GOOD, "-p", "verify-protocol{grd=2}" }
    assert.equal(1, code)
    assert.matches("pass 'verify%-protocol' has no option 'grd' %(it reads: grid max_states n bytes trace max_ops%)", err)
  end)

  it("reports an exceeded state budget as an error at the kernel", function()
    local _, err, code = H.tilua_run { "opt", GOOD, "-p", "verify-protocol{max_states=5,grid=2}" }
    assert.equal(1, code)
    assert.matches("verify_protocol.tir:%d+:3: error: the check of kernel 'ring_copy' %(inputs n = 4096: .-, grid 2%) is incomplete: state budget exceeded: 6 states explored %(max_states = 5%)", err)
  end)

  it("reports a violation as an error at the op, with the checker's counterexample (the invalid fixture)", function()
    local _, err, code = H.tilua_run { "opt", "--check", BAD }
    assert.equal(0, code, err)
    local f = bad_file()
    local out
    out, err, code = H.tilua_run { "opt", f, "-p", "verify-protocol" }
    assert.equal(1, code)
    assert.equal("", out)
    local line = H.line_of(f, "tile.mbarrier_arrive %113")
    assert.matches(":" .. line .. ":9: error: protocol violation in kernel 'ring_copy' %(inputs n = 64: .-%): arrive_count\n", err)
    assert.matches("arrive%-count mismatch: mbarrier .-:%d+%[0%] ends with phase 0 half arrived: 1 of 33 arrivals pending", err)
    assert.matches("counterexample %(9 steps%):\n  1%. kernel warp 0: tile.barrier at ", err)
    assert.matches("  9%. consumer warp 1: tile.mbarrier_arrive at .-:" .. line .. "\n", err)
    -- n chosen by hand: the ring wraps and the same error shows after more steps
    _, err, code = H.tilua_run { "opt", f, "-p", "verify-protocol{n=4096}" }
    assert.equal(1, code)
    assert.matches("inputs n = 4096", err)
    os.remove(f)
  end)

  it("runs through the Lua library's core.run_pipeline too", function()
    -- (the C API, which has no runner, refuses it: src/passes/pass_manager.c)
    local m = assert(require("tilua").parse_file(GOOD))
    assert.is_true(core.run_pipeline(m, "verify-protocol"))
  end)
end)

local session = {
  ":replay",
  ":check",
  ":load %s",
  ":check",
  ":replay 9",
  ":replay 99",
  ":replay",
  ":check nosuch",
  ":check ring_copy n=4096 grid=1",
  ":help",
  ":quit",
}

local function check_session(out, f)
  local line = H.line_of(f, "tile.mbarrier_arrive %113")
  assert.matches("no counterexample to replay: :check a kernel whose protocol has a violation first", out)
  assert.matches("no kernel in the current module", out)
  assert.matches("kernel 'ring_copy', grid 1, inputs n = 64: %(64 bytes 01 02 03 %.%.%., 64 bytes 01 02 03 %.%.%., 64%)", out)
  assert.matches("verify%-protocol: arrive_count\narrive%-count mismatch", out)
  assert.matches("%(%d+ states, %d+ runs, [%d.]+ s%): :replay steps through the counterexample", out)
  -- :replay 9: the state after the last step
  assert.matches("step 9: consumer warp 1: tile.mbarrier_arrive at [^\n]*:" .. line .. "\n  roles:\n    producer warp 0: finished\n    consumer warp 1: finished\n  barriers:\n", out)
  assert.matches("mbarrier [^\n]*:%d+%[0%]: phase 0 %(parity 0%), 1 of 33 arrivals pending, tx 0", out)
  assert.matches("mbarrier [^\n]*:%d+%[0%]: phase 1 %(parity 1%), 1 of 1 arrivals pending, tx 0", out)
  assert.matches("stage buffers:\n    [^\n]*:%d+%[0%]: 64 of 512 bytes written, 01 02 03 04 05 06 07 08 %.%.%.\n    [^\n]*:%d+%[1%]: 0 of 512 bytes written", out)
  assert.matches("end: arrive_count: arrive%-count mismatch", out)
  assert.matches("the counterexample has 9 steps", out)
  -- :replay: every step from the start, each role at its op and line
  assert.matches("\nstart\n  roles:\n    kernel warp 0: at [^\n]*:%d+ %(tile.barrier%)", out)
  -- (which step is which depends on the checker's reductions: not the numbers)
  assert.matches("step %d+: producer warp 0: tile.mbarrier_wait at [^\n]*\n  roles:\n    producer warp 0: at [^\n]*:%d+ %(tile.mbarrier_arrive_expect_tx%)", out)
  assert.matches("step %d+: bulk copy 1 %(from producer warp 0%): tile.bulk_copy_g2s at [^\n]* completes %(64 bytes%)", out)
  assert.matches("bulk copy 1 %(from producer warp 0%): 64 bytes in flight", out)
  assert.matches("no kernel 'nosuch' in the current module", out)
  -- the options given are used: a deadlock at n = 4096
  assert.matches("kernel 'ring_copy', grid 1, inputs n = 4096: [^\n]*\nverify%-protocol: deadlock\n", out)
  assert.matches(":check %[KERNEL%] %[key=value %.%.%.%]", out)
  assert.matches(":replay %[N%]", out)
end

describe("the REPL's :check and :replay", function()
  it("check the current kernel and step through the counterexample (stdin)", function()
    local f = bad_file()
    local out, err, code = H.tilua_run({ "-i" }, table.concat(session, "\n"):format(f) .. "\n")
    assert.equal(0, code, err)
    check_session(out, f)
    os.remove(f)
  end)

  it("do the same in a pseudo-terminal", function()
    local ok = os.execute "command -v script >/dev/null 2>&1"
    if not ok then pending("no `script` (util-linux) to make a pseudo-terminal") return end
    local f = bad_file()
    local steps = {}
    for _, l in ipairs(session) do
      steps[#steps + 1] = ("printf '%%s\\n' %s"):format(H.quote(l:format(f)))
      steps[#steps + 1] = "sleep 0.3"
    end
    local cmd = ("(%s) | timeout 60 script -qfec %s /dev/null"):format(table.concat(steps, "; "),
      H.quote("TILUA_HISTORY= " .. H.tilua .. " -i"))
    local p = io.popen(cmd .. " 2>&1")
    local out = p:read("a"):gsub("\r", ""):gsub("\27%[%?2004[hl]", "")
    p:close()
    check_session(out, f)
    os.remove(f)
  end)
end)
