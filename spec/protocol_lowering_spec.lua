-- The emulator and the protocol checker on lowered IR (emulate/models/nvvm.lua) and
-- tl.check_lowering: the ring-copy examples copy every byte and check clean at
-- every stage of the `ptx` pipeline, and lowering bugs simulated by mutating
-- the IR right after a given pass are reported at that pass, with a
-- counterexample at the examples' lines (docs/protocol.md, "Lowered IR and the
-- check after every pass").
dofile "spec/helper.lua"
local tl = require "tilua"

local PH = dofile "spec/protocol_helper.lua"
local bytes, ops, cases = PH.bytes, PH.ops, PH.cases

local function args(src) return { src, { bytes = #src }, #src } end

local PASSES = { "canonicalize", "cse", "lower-tile-scheduler", "convert-cutlass-to-nvvm", "dedupe-wait-groups",
                 "convert-tile-to-nvvm", "canonicalize", "cse", "canonicalize" }

describe("the emulator on lowered IR", function()
  for _, key in ipairs { "rc", "rcb", "prc", "prcws" } do -- (prc2: 11 s more, nothing new at the nvvm level)
    local c = cases[key]
    it("copies every byte and checks clean at every stage of ptx: " .. c.name, function()
      local k = c.build()
      local src = bytes(c.n, 3)
      local seen = {}
      local t0 = os.clock()
      local r = tl.check_lowering(k, { args = args(src), after_pass = function(pass, i, kop)
        seen[#seen + 1] = pass
        for _, grid in ipairs(c.slow and { 2 } or { 1, 2 }) do -- (the slow ones: one emulation per stage)
          for _, policy in ipairs(c.slow and { "random" } or { "round_robin", "random", "adversarial" }) do
            local e = tl.emulate(kop, { grid = grid, args = args(src), policy = policy, seed = 5 + i })
            assert(e.ok, ("after %s (%s, grid %d): %s"):format(pass, policy, grid, tostring(e.report)))
            assert(e.read(2) == src, ("after %s (%s, grid %d): the copy differs from its source"):format(pass, policy, grid))
          end
        end
      end })
      assert(r.ok, r.report)
      assert.are.same(PASSES, r.passes)
      assert.are.equal(#PASSES + 1, #r.stages)
      assert.are.equal("input", seen[1])
      assert.are.equal(#PASSES + 1, #seen)
      for _, st in ipairs(r.stages) do
        assert(st.ok, st.report)
        assert.is_true(st.min_phases >= 1, st.name)
      end
      print(("\n  %s: %.2f s (%d emulations per stage)\n%s"):format(c.name, os.clock() - t0, c.slow and 1 or 6, r.report))
    end)
  end

  it("runs a compiled kernel's nvvm IR (k.lowered) with the warps' roles", function()
    local c = cases.prcws
    local k = c.build()
    k:compile()
    local kop = k:lowered_op()
    local names = {}
    kop:walk(function(o) names[o:name()] = true end)
    assert.is_nil(names["cutlass.pipeline.consumer_wait"])
    assert.is_true(names["nvvm.mbarrier.try_wait.parity.shared"])
    assert.is_true(names["nvvm.barrier"]) -- the consumer warps' named barrier before their release
    local src = bytes(c.n, 9)
    local e = tl.emulate(kop, { grid = 3, args = args(src), policy = "random", seed = 1,
                                roles = { [0] = "producer", "consumer", "consumer" } })
    assert(e.ok, e.report)
    assert(e.read(2) == src)
    local named = false
    for _, step in ipairs(e.trace) do
      named = named or step:match "^consumer warp 2 %(CTA %d%): nvvm.mbarrier.try_wait.parity.shared at examples/pipeline_ring_copy.lua:%d+$" ~= nil
    end
    assert.is_true(named, "no step names the consumer warp's spin loop at its line")
  end)

  it("treats a try_wait spin loop as a wait: a lost arrive is a deadlock, not a livelock", function()
    local k = cases.rc.build()
    k:compile()
    local kop = k:lowered_op()
    ops(kop, "nvvm.mbarrier.arrive.shared")[1]:erase() -- the consumer's release
    local e = tl.emulate(kop, { args = args(bytes(cases.rc.n)), max_steps = 10000 })
    assert.is_false(e.ok)
    assert.are.equal("deadlock", e.error.kind)
    assert.matches("kernel warp 0 waits on mbarrier at shared offset 1040 for parity 0 at examples/ring_copy.lua:83", e.report)
  end)
end)

describe("tl.check_lowering", function()
  -- a new constant before `before`
  local function const(before, value, type)
    return tl.core.op_create(tl.context(), "arith.constant", {}, { type }, { value = value }, 0, nil, before, nil)
  end

  -- A lowering bug: `mutate(kop)` right after the pass numbered `at` of
  -- the ptx pipeline; check_lowering must blame that pass with one of `kinds`
  -- and a counterexample whose every step names its role, op and example line.
  local function broken(what, key, at, kinds, mutate, lines)
    it(("blames %s (pass %d) for: %s"):format(PASSES[at], at, what), function()
      local c = cases[key]
      local r = PH.blamed(c.build(), { args = args(bytes(c.n)) }, at, PASSES[at], mutate)
      assert.are.equal(at, r.broken_at)
      PH.assert_kind(r, kinds)
      assert.matches("^" .. PASSES[at]:gsub("%-", "%%-") .. " broke the protocol: verify%-protocol: " .. r.violation.kind, r.report)
      for i = 1, at do assert(r.stages[i].ok, r.stages[i].name) end -- clean up to the pass before
      assert.is_true(#r.trace >= 1, r.report)
      for _, step in ipairs(r.trace) do
        assert(step:match "^[%w_]+ warp %d+: [%w_.]+ at examples/[%w_]+%.lua:%d+$"
               or step:match "^bulk copy %d+ %(from [%w_]+ warp %d+%): [%w_.]+ at examples/[%w_]+%.lua:%d+ completes",
               "a step does not name its role, op and line: " .. step)
      end
      for _, l in ipairs(lines or {}) do assert.matches(l, r.report) end
      print(("\n  %s -> %s after %s (%d steps, %.2f s)\n%s"):format(what, r.violation.kind, r.broken_by, #r.trace,
        r.seconds, r.violation.message))
    end)
  end

  broken("an nvvm mbarrier.init counting one arrival too many (ring_copy)", "rc", 6, { "deadlock" }, function(kop)
    local inits = ops(kop, "nvvm.mbarrier.init.shared")
    for i = 2, #inits, 2 do -- full, empty, full, empty: the empty barriers (32 consumer threads)
      local o = inits[i]
      o:set_operand(2, const(o, 33, o:operand(2):type()):result(1))
    end
  end, { "32 of 33 arrivals came", "producer warp 0 waits on mbarrier examples/ring_copy.lua:%d+%[%d%] for parity" })

  broken("the consumer's try_wait parity flipped (pipeline_ring_copy)", "prc", 4, { "phase", "unfilled" }, function(kop)
    local waits = ops(kop, "nvvm.mbarrier.try_wait.parity.shared")
    local w = waits[2] -- the consumer's wait on full[s]
    local p = w:operand(2)
    local one = const(w, 1, p:type())
    local flipped = tl.core.op_create(tl.context(), "arith.xori", { p, one:result(1) }, { p:type() }, {}, 0, nil, w, nil)
    w:set_operand(2, flipped:result(1))
  end, { "consumer warp 1" })

  broken("the consumer's arrive dropped (ring_copy)", "rc", 7, { "deadlock" }, function(kop)
    ops(kop, "nvvm.mbarrier.arrive.shared")[1]:erase()
  end, { "producer warp 0 waits on mbarrier examples/ring_copy.lua:%d+%[0%] for parity 0 at examples/ring_copy.lua:83" })

  broken("the bar.sync after the mbarrier inits removed (pipeline_ring_copy)", "prc", 6, { "uninitialized" }, function(kop)
    ops(kop, "nvvm.barrier0")[1]:erase()
  end, { "is not ordered before the use" })

  broken("the consumer warps' named barrier before their release removed (ws)", "prcws", 4, { "overwrite" }, function(kop)
    ops(kop, "tile.named_barrier_sync")[1]:erase()
  end, { "overwrites shared bytes .* that consumer warp 2 read at examples/pipeline_ring_copy.lua:%d+" })

  broken("16 transaction bytes too few in arrive.expect_tx (pipeline_ring_copy)", "prc", 6, { "tx_bytes" }, function(kop)
    local a = ops(kop, "nvvm.mbarrier.arrive.expect_tx.shared")[1]
    a:set_operand(2, const(a, 512 - 16, a:operand(2):type()):result(1))
  end, { "transaction%-byte mismatch" })

  broken("a bulk store's slot released before the store read it (ring_copy bulk)", "rcb", 6, { "overwrite", "unfilled" },
    function(kop)
      for _, o in ipairs(ops(kop, "nvvm.cp.async.bulk.wait_group")) do
        if o:attr "read" then o:set_attr("group", 3) end
      end
    end)

  it("says when the input is already broken, and which passes it ran", function()
    local c = cases.rc
    local r = tl.check_lowering(c.build(), { args = args(bytes(c.n)), after_pass = function(_, i, kop)
      if i == 0 then ops(kop, "tile.barrier")[1]:erase() end
    end })
    assert.is_false(r.ok)
    assert.is_nil(r.broken_by)
    assert.matches("^check_lowering: the input's protocol is already incorrect: verify%-protocol: uninitialized", r.report)
    local p = tl.check_lowering(c.build(), { args = args(bytes(c.n)), pipeline = "canonicalize,convert-tile-to-nvvm" })
    assert(p.ok, p.report)
    assert.are.same({ "canonicalize", "convert-tile-to-nvvm" }, p.passes)
  end)
end)

-- The pass manager's own check after every pass (IrPassOptions.check_each):
-- tl.compile's check_protocol, tl.options.check_protocol, tilua --check-protocol,
-- tilua opt --check-protocol. With its own inputs (tilua.emulate.protocol.inputs).
describe("the check after every pass of the pass manager", function()
  local H = dofile "spec/helper.lua"
  it("passes a correct kernel through ptx, checking the input and every pass that changed it", function()
    local k = cases.rc.build()
    local checked = 0
    tl.compile(k, "ptx", { check_protocol = true })
    for _, st in ipairs(tl.last_stages) do if st.changed then checked = checked + 1 end end
    assert.is_true(checked >= 3)
  end)

  it("takes lowered atomics as atomics (no race between the agents' nvvm.atom/red of one word)", function()
    tl.new_module()
    local k = tl.kernel("roles", { params = { { "cnt", tl.ptr(tl.i32) } }, block = 256 })
    k:define(function(k, p)
      k:agent("one", { warps = 1 }, function() tl.atomic_add(p.cnt, 1) end)
      k:agent("three", { warps = 3 }, function(a)
        tl.atomic_add(p.cnt + 1, 1)
        tl.atomic_max(p.cnt + 2, a:thread_id())
        tl.elect_one(function() tl.atomic_add(p.cnt + 3, 1) end)
      end)
    end)
    tl.compile(k, "ptx", { check_protocol = true }) -- raised "convert-tile-to-nvvm broke what held" before
  end)

  it("says the input is wrong before any pass runs", function()
    local k = cases.prc.build()
    ops(k.op, "cutlass.pipeline.consumer_release")[1]:erase()
    local ok, err = pcall(tl.compile, k, "ptx", { check_protocol = true })
    assert.is_false(ok)
    assert.matches("protocol violation in kernel 'prc'", err)
    assert.matches("verify%-protocol: the input is already wrong %(before any pass%)", err)
    assert.equal(1, #tl.last_stages) -- only the input: no pass ran
  end)

  it("in the mode \"passes\" notes an input already wrong and fails only where a pass broke what held", function()
    local LP = require "tilua.passes.verify_protocol"
    local function bad()
      local k = cases.prc.build()
      ops(k.op, "cutlass.pipeline.consumer_release")[1]:erase()
      return k
    end
    tl.compile(bad(), "ptx", { check_protocol = "passes" }) -- no error
    local log = tl.last_check.log
    assert.are.same({ after = "input", kernel = "prc", why = "the input is already wrong: deadlock" }, log[1])
    for i = 2, #log do assert.equal("unchanged, or skipped before", log[i].why) end -- not checked further
    assert.is_false((pcall(tl.compile, bad(), "ptx", { check_protocol = true }))) -- strict: the same input fails
    -- a correct input, then "a pass" that drops the release: an error at that stage
    local k = cases.prc.build()
    local run = {} -- the check's state across the stages of one pipeline run
    local r = LP.verify_protocol(k.module, { mode = "passes" }, "input", run)
    assert.are.same({}, r.errors)
    ops(k.op, "cutlass.pipeline.consumer_release")[1]:erase()
    r = LP.verify_protocol(k.module, { mode = "passes" }, "cse", run)
    assert.equal(1, #r.errors)
    assert.matches("protocol violation in kernel 'prc' %(inputs n = 2048: .-%): deadlock", r.errors[1].message)
    -- opts.check_protocol = false: no check even where tl.options asks for one
    tl.options.check_protocol = true
    local ok = pcall(tl.compile, bad(), "ptx", { check_protocol = false })
    tl.options.check_protocol = nil
    assert.is_true(ok)
  end)

  it("is on in the environment (TILUA_CHECK_PROTOCOL=1 or passes), off with TILUA_SKIP_CHECK_PROTOCOL=1", function()
    local script = { "--emit=ptx", "spec/fixtures/gpu/deadlock.lua" } -- a pipeline that deadlocks on purpose
    local _, err, code = H.tilua_env({ TILUA_CHECK_PROTOCOL = "1" }, script)
    assert.equal(1, code, err)
    assert.matches("verify%-protocol: the input is already wrong", err)
    _, err, code = H.tilua_env({ TILUA_CHECK_PROTOCOL = "passes" }, script)
    assert.equal(0, code, err)
    _, err, code = H.tilua_env({ TILUA_CHECK_PROTOCOL = "1", TILUA_SKIP_CHECK_PROTOCOL = "1" }, script)
    assert.equal(0, code, err)
  end)

  it("gives up a kernel at the time budget (max_seconds), as it does at the state budget", function()
    local r = tl.verify_protocol(cases.prc.build(), { args = args(bytes(cases.prc.n)), max_seconds = 0 })
    assert.is_true(r.budget_exceeded)
    assert.matches("^verify%-protocol: time budget exceeded: %d+ states explored in %d+ runs, [%d.]+ s %(max_seconds = 0%)", r.report)
  end)

  -- The examples as ctest runs them (TILUA_CHECK_PROTOCOL=1), with the check's
  -- log: each kernel checked on its input and after every pass that changed it
  -- (the nvvm stages of the GEMM's TMA, wgmma and cluster ops too), every ring
  -- at least twice around (the sizes derived from the kernel), none skipped.
  local rings = { ring_copy = { "ring_copy", "ring_copy_bulk" },
                  pipeline_ring_copy = { "pipeline_ring_copy", "pipeline_ring_copy_ws" },
                  seq_bar_pingpong = { "seq_bar_pingpong" }, cluster_dsmem = {}, gemm = {} }
  for _, ex in ipairs { "ring_copy", "pipeline_ring_copy", "seq_bar_pingpong", "cluster_dsmem", "gemm" } do
    it("checks every kernel of examples/" .. ex .. ".lua after every pass, every ring twice around", function()
      local log = os.tmpname()
      local _, err, code = H.tilua_env({ TILUA_CHECK_PROTOCOL = "1", TILUA_CHECK_PROTOCOL_LOG = log,
                                         TILUA_NO_GPU_EXIT = "77" }, { "examples/" .. ex .. ".lua" }, 300)
      assert(code == 0 or code == 77, err)
      local kernels = {}
      for line in H.slurp(log):gmatch "[^\n]+" do
        local name, after, what, a, b = line:match "^([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t?([^\t]*)"
        local k = kernels[name] or { checked = {}, skipped = {} }
        kernels[name] = k
        if what == "checked" then
          k.checked[#k.checked + 1] = after
          k.min = math.min(k.min or math.huge, tonumber(b) or math.huge)
        elseif a ~= "unchanged, or skipped before" then -- (a text no pass changed, or skipped at an earlier stage)
          k.skipped[#k.skipped + 1] = after
          assert(a:find("is not modelled", 1, true), ("%s after %s skipped: %s"):format(name, after, a))
        end
      end
      os.remove(log)
      for _, name in ipairs(rings[ex]) do
        local k = assert(kernels[name], "no check of " .. name)
        assert.is_true(#k.checked >= 4, name) -- input, canonicalize, the conversions, the cleanups
        assert.are.same({}, k.skipped)
        assert.is_true(k.min >= 2, name)
      end
      for name, k in pairs(kernels) do
        assert.equal("input", k.checked[1], name)
        assert.are.same({}, k.skipped, name)
        local nvvm = false
        for _, after in ipairs(k.checked) do nvvm = nvvm or after == "convert-tile-to-nvvm" end
        assert(nvvm, name .. " not checked after convert-tile-to-nvvm")
      end
      assert.is_not_nil(next(kernels))
    end)
  end

  it("is tilua opt --check-protocol and tilua --check-protocol", function()
    local _, err, code = H.tilua_run { "opt", "spec/fixtures/passes/verify_protocol.tir", "-p", "ptx", "--check-protocol" }
    assert.equal(0, code, err)
    local bad = "spec/fixtures/passes/verify_protocol_invalid.tir"
    local text = H.slurp(bad)
    local f = os.tmpname() .. ".tir"
    local h = assert(io.open(f, "w"))
    local first = (text:match("^(.-)\n// %-%-%-%-%-") or text):gsub("// expected%-[^\n]*", "")
    h:write(first)
    h:close()
    _, err, code = H.tilua_run { "opt", f, "-p", "ptx", "--check-protocol" }
    os.remove(f)
    assert.equal(1, code, err)
    assert.matches("the input is already wrong", err)
    local out = H.tilua_run { "--help" }
    assert.truthy(out:find("--check-protocol", 1, true), out)
  end)
end)
