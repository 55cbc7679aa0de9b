-- The user's access to the protocol checker (docs/protocol.md, "Running the
-- checker: tilua opt and the REPL"): the verify-protocol pass (a pass
-- implemented in Lua, run by the C pass manager), its options, statistics and
-- diagnostics, and the REPL's :check and :replay, on stdin and in a
-- pseudo-terminal.
local H = dofile "spec/helper.lua"
local core = require "tilua.core"
local tl = require "tilua"

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
    assert.equal("grid:1..1048576 max_states:1..100000000 max_work:1..1000000000000 max_seconds:0.001..86400.0 "
      .. "n:1..2147483647 "
      .. "bytes:1..2147483647 trace:0..1000000 max_ops:1..1000000000000 mode", found.options)
    assert.is_false(core.passes()[1].lua)
  end)

  it("takes the check's mode as a declared option, through the same option check as a pipeline step", function()
    local k = tl.kernel("modes", { block = 32 })
    k:define(function() tl.barrier() end)
    tl.compile(k, "cleanup", { check_protocol = "passes" }) -- verify-protocol{mode=passes} after every pass
    assert.equal("input", tl.last_check.log[1].after)
    local ok, err = pcall(tl.compile, k, "cleanup", { check_protocol = "strict" })
    assert.is_false(ok)
    assert.matches("verify%-protocol: mode must be \"passes\" %(or absent%), got 'strict'", err)
    ok, err = pcall(tl.compile, k, "cleanup", { check_protocol = "passes,x=1" })
    assert.is_false(ok)
    assert.matches("check_protocol: 'passes,x=1' is not a mode of verify%-protocol", err)
    tl.compile(k, "cleanup", { check_protocol = false }) -- (ctest's TILUA_CHECK_PROTOCOL turned off)
    assert.is_false(tl.last_check)
  end)

  it("finds nothing in ring_copy, leaves the IR as it was and prints the state and run counts (--stats)", function()
    local out, err, code = H.tilua_run { "opt", GOOD, "--pass", "verify-protocol", "--stats" }
    assert.equal(0, code, err)
    local plain = H.tilua_run { "opt", GOOD }
    assert.equal(plain, out)
    assert.matches("// verify%-protocol statistics\n", err)
    assert.matches("//   ring_copy: states +%d+\n", err)
    assert.matches("//   ring_copy: runs +%d+\n", err)
    -- the size derived from the kernel: its ring of 2 stages of 512 bytes, twice around
    assert.matches("//   ring_copy: inputs +n = 2048: %(2048 zero bytes, 2048 zero bytes, 2048%)", err)
    assert.matches("//   ring_copy: fewest phases of a barrier +[2-9]", err) -- every ring wrapped twice
  end)

  it("runs in a pipeline string, before the ptx pipeline, with options", function()
    local out, err, code = H.tilua_run { "opt", GOOD, "-p", "verify-protocol{max_states=5000,n=1024},ptx", "--stats" }
    assert.equal(0, code, err)
    assert.matches("ring_copy: inputs +n = 1024", err)
    assert.matches("nvvm%.", out) -- lowered after the check
    local _
    _, err, code = H.tilua_run { "opt", GOOD, "-p", "verify-protocol{grd=2}" }
    assert.equal(1, code)
    assert.matches("pass 'verify%-protocol' has no option 'grd' %(it reads: grid:1%.%.1048576 max_states:", err)
  end)

  it("reports an exceeded state budget as an error at the kernel", function()
    local _, err, code = H.tilua_run { "opt", GOOD, "-p", "verify-protocol{max_states=5,grid=2}" }
    assert.equal(1, code)
    -- (on 2 CTAs the ring goes twice around in each: 4096 bytes)
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

  -- A module's text in a .tir file of its own.
  local function tir_of(m)
    local f = os.tmpname()
    os.remove(f)
    f = f .. ".tir"
    local h = assert(io.open(f, "w"))
    h:write(m:print())
    h:close()
    return f
  end

  it("runs a cluster's CTAs together, at a size at which a plain run reports nothing (cluster_dsmem)", function()
    local tl = require "tilua"
    tl.new_module()
    assert(loadfile "examples/cluster_dsmem.lua")("--library")
    local f = tir_of(tl.module())
    local _, err, code = H.tilua_run { "opt", f, "--pass", "verify-protocol", "--stats" }
    assert.equal(0, code, err) -- grid 1 would not be whole clusters of 2
    -- one element per thread of the 2 CTAs, as the kernel declares (kernel_spec.sizes: a
    -- smaller total would overlap their output slices)
    assert.matches("cluster_exchange: inputs +n = 512: %(2048 zero bytes, 2048 zero bytes, 512 %(the grid's threads: kernel_spec.sizes%)%)", err)
    os.remove(f)
  end)

  it("guesses a tensor map as one zeroed box: the stdlib GEMM checks from its IR alone", function()
    local tl = require "tilua"
    tl.new_module()
    local g = tl.gemm.build { m = 128, n = 64, k = 256, bn = 64, stages = 2, schedule = "data_parallel" }
    local m = g.kernel.op:parent()
    while m:name() ~= "module" do m = m:parent() end
    local f = tir_of(m)
    local _, err, code = H.tilua_run { "opt", f, "--pass", "verify-protocol", "--stats" }
    assert.equal(0, code, err)
    -- (n sizes pointer buffers only, of which the GEMM has none: its smallest derived size)
    assert.matches(": inputs +n = %d+: %(a tensor map of 128 x 64 zeros, a tensor map of 64 x 64 zeros, a tensor map of 64 x 32 zeros%)", err)
    assert.matches(": fewest phases of a barrier +[2-9]", err)
    os.remove(f)
  end)

  it("runs through the Lua library's core.run_pipeline too", function()
    -- (the C API, which has no runner, refuses it: src/passes/pass_manager.c)
    local m = assert(require("tilua").parse_file(GOOD))
    assert.is_true(core.run_pipeline(m, "verify-protocol"))
  end)
end)

-- Lua patterns that must match in this order (each from the last character
-- of the one before: a pattern may begin with the newline another ended with).
local function in_order(text, patterns)
  local pos = 1
  for _, p in ipairs(patterns) do
    local a, b = text:find(p, pos)
    assert(a, ("expected %q after position %d in:\n%s"):format(p, pos, text))
    pos = b
  end
end

-- The session for the invalid fixture f: the REPL's commands, then the
-- interactive replay's. `copy`: the counterexample's step at which the bulk copy
-- completes (which step is which depends on the checker's reductions: the
-- spec asks the checker, with the inputs :check chooses, instead of fixing it).
local function session(f)
  local tl = require "tilua"
  local P = require "tilua.emulate.protocol"
  local r = P.check(assert(tl.parse_file(f)), { fill = "pattern" })
  local copy
  for i, l in ipairs(r.trace) do
    if l:match "^bulk copy 1 .* completes" then copy = i end
  end
  assert(copy and copy > 2 and #r.trace == 9, r.report)
  local lines = {
    ":replay",
    ":check",
    ":load " .. f,
    ":check",
    ":replay 9",
    ":replay 99",
    ":replay all",
    ":replay",   -- the interactive replay: the start
    "",          -- enter: step 1
    "n 4",       -- step 5
    "b",         -- step 4
    "p",         -- what p can print
    "g " .. (copy - 1), -- the copy in flight
    "p m1",
    "n",         -- the copy completes
    "p s1",
    "p nosuch",
    "n x",
    "zz",
    "h",
    "c",         -- to the end
    "n",         -- past it
    "r",         -- the start again
    "q",
    ":replay",
    ":check nosuch", -- leaves the replay and runs
    ":check ring_copy n=4096 grid=1",
    ":help",
    ":quit",
  }
  return lines, copy
end

local function check_session(out, f, copy)
  local line = H.line_of(f, "tile.mbarrier_arrive %113")
  assert.matches("no counterexample to replay: :check a kernel whose protocol has a violation first", out)
  assert.matches("no kernel in the current module", out)
  assert.matches("kernel 'ring_copy', grid 1, inputs n = 64: %(64 bytes 01 02 03 %.%.%., 64 bytes 01 02 03 %.%.%., 64%)", out)
  assert.matches("verify%-protocol: arrive_count\narrive%-count mismatch", out)
  assert.matches("%(%d+ states, %d+ runs, [%d.]+ s%): :replay steps through the counterexample", out)
  -- :replay 9: the state after the last step, what it changed marked *
  assert.matches("step 9: consumer warp 1: tile.mbarrier_arrive at [^\n]*:" .. line .. "\n  roles:\n    producer warp 0: finished\n  %* consumer warp 1: finished\n  barriers:\n", out)
  assert.matches("  %* %[m%d%] mbarrier [^\n]*:%d+%[0%]: phase 0 %(parity 0%), 1 of 33 arrivals pending, tx 0", out)
  assert.matches("    %[m1%] mbarrier [^\n]*:%d+%[0%]: phase 1 %(parity 1%), 1 of 1 arrivals pending, tx 0", out)
  assert.matches("stage buffers:\n    %[s1%] [^\n]*:%d+%[0%]: 64 of 512 bytes written, 01 02 03 04 05 06 07 08 %.%.%.\n    %[s2%] [^\n]*:%d+%[1%]: 0 of 512 bytes written", out)
  assert.matches("end: arrive_count: arrive%-count mismatch", out)
  assert.matches("the counterexample has 9 steps", out)
  -- :replay all: every step from the start, each role at its op and line
  assert.matches("\nstart\n  roles:\n    kernel warp 0: at [^\n]*:%d+ %(tile.barrier%)", out)
  assert.matches("step %d+: producer warp 0: tile.mbarrier_wait at [^\n]*\n  roles:\n  %* producer warp 0: at [^\n]*:%d+ %(tile.mbarrier_arrive_expect_tx%)", out)
  assert.matches("step %d+: bulk copy 1 %(from producer warp 0%): tile.bulk_copy_g2s at [^\n]* completes %(64 bytes%)", out)
  assert.matches("bulk copy 1 %(from producer warp 0%): 64 bytes in flight", out)
  -- the interactive replay, in the order typed
  local at = out:find("the counterexample has 9 steps", 1, true)
  at = out:find("\nend: ", at, true) -- after :replay all
  in_order(out:sub(at + 1), {
    "\nstart\n  roles:\n",
    "\nstep 1: kernel warp 0: tile%.barrier at [^\n]*\n  roles:\n",            -- enter
    "\nstep 5: [^\n]*\n  roles:\n",                                              -- n 4
    "\nstep 4: [^\n]*\n  roles:\n",                                              -- b
    "\nm1  mbarrier [^\n]*\nm2  mbarrier [^\n]*\nm3  [^\n]*\nm4  [^\n]*\ns1  [^\n]*\ns2  [^\n]*\n", -- p
    "\nstep " .. (copy - 1) .. ": ",                                             -- g
    "\n%[m1%] mbarrier [^\n]*: phase 0 %(parity 0%), 0 of 1 arrivals pending, tx 64\n"
      .. "  waiting: consumer warp 1: at [^\n]*%(tile%.mbarrier_wait%) waits on mbarrier [^\n]* for parity 0\n"
      .. "  completing on it: bulk copy 1 %(from producer warp 0%): 64 bytes %(tile%.bulk_copy_g2s at [^\n]*%)\n", -- p m1
    "\nstep " .. copy .. ": bulk copy 1 [^\n]* completes %(64 bytes%)\n",      -- n
    "\n%[s1%] [^\n]*%[0%]: 64 of 512 bytes written\n  0000: 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f 10\n"
      .. "  0010: 11 [^\n]*\n  0020: [^\n]*\n  0030: [^\n]* 3f 40\n  0040: %.%. %.%. [^\n]*\n      %.%.%. 27 more line%(s%) the same\n", -- p s1
    "\nnothing named 'nosuch': one of\n  m1  mbarrier",                        -- p nosuch
    "\n'n' needs a step count, got 'x'\n",
    "\nunknown replay command 'zz' %(h lists them%)\n",
    "\nAt the replay> prompt",                                                   -- h
    "\nstep 8: consumer warp 1: [^\n]*\nstep 9: [^\n]*\n  roles:\n",            -- c: a line a step, then the end
    "\nend: arrive_count: ",
    "\nat the end %(step 9 of 9%): arrive_count: ",                              -- n
    "\nstart\n  roles:\n",                                                       -- r
    "\nstart\n  roles:\n",                                                       -- :replay again
    "\nno kernel 'nosuch' in the current module",                              -- :check typed at the prompt
  })
  -- the options given are used: a deadlock at n = 4096
  assert.matches("kernel 'ring_copy', grid 1, inputs n = 4096: [^\n]*\nverify%-protocol: deadlock\n", out)
  assert.matches(":check %[KERNEL%] %[key=value %.%.%.%]", out)
  assert.matches(":replay all +print every step", out)
  assert.matches(":replay +step through the last :check's counterexample", out)
end

describe("the REPL's :check and :replay", function()
  it("check the current kernel and step through the counterexample (stdin)", function()
    local f = bad_file()
    local lines, copy = session(f)
    local out, err, code = H.tilua_run({ "-i" }, table.concat(lines, "\n") .. "\n")
    assert.equal(0, code, err)
    check_session(out, f, copy)
    os.remove(f)
  end)

  it("do the same in a pseudo-terminal (the replay> prompt)", function()
    local ok = os.execute "command -v script >/dev/null 2>&1"
    if not ok then pending("no `script` (util-linux) to make a pseudo-terminal") return end
    local f = bad_file()
    local lines, copy = session(f)
    local steps = {}
    for _, l in ipairs(lines) do
      steps[#steps + 1] = ("printf '%%s\\n' %s"):format(H.quote(l))
      steps[#steps + 1] = "sleep 0.3"
    end
    local cmd = ("(%s) | timeout 60 script -qfec %s /dev/null"):format(table.concat(steps, "; "),
      H.quote("TILUA_HISTORY= " .. H.tilua .. " -i"))
    local p = io.popen(cmd .. " 2>&1")
    local out = p:read("a"):gsub("\r", ""):gsub("\27%[%?2004[hl]", "")
    p:close()
    check_session(out, f, copy)
    -- the prompt says where the replay is
    assert.matches("replay 0/9> ", out)
    assert.matches("replay " .. copy .. "/9> ", out)
    assert.matches("replay 9/9> ", out)
    os.remove(f)
  end)
end)
