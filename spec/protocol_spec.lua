-- The CPU emulator (tl.emulate) and the protocol checker (tl.verify_protocol)
-- at the authoring level: the ring-copy examples copy bytes exactly under every
-- policy, the checker finds nothing wrong in them, and it catches seeded
-- protocol bugs (made by editing their IR through the op API) with a
-- counterexample whose steps name the examples' lines (docs/protocol.md).
dofile "spec/helper.lua"
local tl = require "tilua"

local rc = assert(loadfile "examples/ring_copy.lua")("--library")
local prc = assert(loadfile "examples/pipeline_ring_copy.lua")("--library")

-- n pseudo-random bytes (not constant: a copy that drops or repeats a chunk shows)
local function bytes(n, seed)
  local t, s = {}, seed or 7
  for i = 1, n do
    s = (s * 1103515245 + 12345) & 0x7fffffff
    t[i] = string.char((s >> 16) & 0xff)
  end
  return table.concat(t)
end

-- The small kernels: every ring wraps at least twice on one CTA (chunks > 2 * stages),
-- the size is not a multiple of the chunk nor of 16.
local cases = {
  { name = "ring_copy", build = function() return rc.build { stages = 2, chunk = 512, consumer_warps = 1, name = "rc" } end,
    n = 5 * 512 + 13 * 16 + 5 },
  { name = "ring_copy_bulk", build = function()
      return rc.build { stages = 3, chunk = 512, consumer_warps = 1, store = "bulk", inflight = 2, name = "rcb" }
    end, n = 7 * 512 + 7 },
  { name = "pipeline_ring_copy", build = function()
      return prc.build { stages = 2, chunk = 512, consumer_warps = 1, name = "prc" }
    end, n = 5 * 512 + 37 },
  { name = "pipeline_ring_copy (2 consumer warps)", build = function()
      return prc.build { stages = 2, chunk = 1024, consumer_warps = 2, name = "prc2" }
    end, n = 5 * 1024 + 37, slow = true },
  { name = "pipeline_ring_copy_ws", build = function()
      return prc.build { stages = 2, chunk = 1024, consumer_warps = 2, mode = "warp_specialized", name = "prcws" }
    end, n = 5 * 1024 + 37, slow = true },
}

local function args(n, seed) return { bytes(n, seed), { bytes = n }, n } end

-- Every op of kernel k named `name` (in program order).
local function ops(k, name)
  local out = {}
  k.op:walk(function(o) if o:name() == name then out[#out + 1] = o end end)
  return out
end

-- The line of the first op named `name` in k.
local function line_of(o)
  local _, line = o:loc()
  return line
end

describe("tl.emulate", function()
  for _, c in ipairs(cases) do
    for _, policy in ipairs { "round_robin", "random", "adversarial" } do
      it(("copies every byte: %s, %s"):format(c.name, policy), function()
        local k = c.build()
        for _, grid in ipairs { 1, 2 } do
          local a = args(c.n, grid)
          local r = tl.emulate(k, { grid = grid, args = a, policy = policy, seed = 11 })
          assert(r.ok, r.report)
          assert.are.equal(#a[1], #r.read(2))
          assert(r.read(2) == a[1], "the copy differs from its source")
          assert.is_true(r.steps > 0)
        end
      end)
    end
  end

  it("runs examples/vector_add.lua's kernel on 3 CTAs as the Lua reference computes it", function()
    tl.new_module() -- the example builds its kernel into the current module
    assert(loadfile "examples/vector_add.lua")("--library")
    local n = 3 * 256 - 37
    local a, b = {}, {}
    for i = 1, n do
      a[i], b[i] = string.pack("<f", i * 0.25 - 7), string.pack("<f", 1 / i)
    end
    local r = tl.emulate(tl.module(), { grid = 3, args = { table.concat(a), table.concat(b), { bytes = 4 * n }, n } })
    assert(r.ok, r.report)
    local c = r.read(3)
    for i = 1, n do
      local want = string.unpack("<f", string.pack("<f", string.unpack("<f", a[i]) + string.unpack("<f", b[i])))
      assert.are.equal(want, (string.unpack("<f", c, 4 * i - 3)))
    end
  end)

  it("reports a deadlock with each warp's role, op, line and every barrier's state", function()
    local k = prc.build { stages = 2, chunk = 512, consumer_warps = 1, name = "dl" }
    ops(k, "cutlass.pipeline.consumer_release")[1]:erase()
    local r = tl.emulate(k, { args = args(5 * 512), policy = "round_robin" })
    assert.is_false(r.ok)
    assert.are.equal("deadlock", r.error.kind)
    assert.matches("producer warp 0 waits on empty%[0%] of the pipeline at examples/pipeline_ring_copy.lua:40 for parity 0 at examples/pipeline_ring_copy.lua:59",
      r.report)
    assert.matches("full%[1%] of the pipeline at examples/pipeline_ring_copy.lua:40: %d phase%(s%) completed", r.report)
    assert.matches("consumer warp 1: cutlass.pipeline.consumer_wait at examples/pipeline_ring_copy.lua:79", r.report)
  end)

  it("says which op it does not model", function()
    tl.new_module()
    local k = tl.kernel("nm", { params = {}, block = 32 })
    k:define(function(k) k:async_exec("x", { first_warp = 0, warps = 1 }, function() tl.mods.throttle(1) end) end)
    local ok, err = pcall(tl.emulate, k, { args = {} })
    assert.is_false(ok)
    assert.matches("emulate: op cutlass.tile_scheduler.mods_throttle is not modelled %(at [^ ]*protocol_spec.lua:%d+%)", err)
  end)
end)

describe("tl.verify_protocol", function()
  for _, c in ipairs(cases) do
    it("finds no violation in " .. c.name, function()
      local k = c.build()
      local t0 = os.clock()
      local r = tl.verify_protocol(k, { args = args(c.n) })
      assert(r.ok, r.report)
      assert.is_true(r.states > 1)
      assert.is_true(r.min_phases >= 1)
      print(("\n  %s: %d states, %d runs, %.2f s"):format(c.name, r.states, r.runs, os.clock() - t0))
    end)
  end

  it("reports the state budget when it is exceeded", function()
    local r = tl.verify_protocol(cases[3].build(), { args = args(cases[3].n), max_states = 5 })
    assert.is_false(r.ok)
    assert.is_true(r.budget_exceeded)
    assert.matches("state budget exceeded: 6 states explored %(max_states = 5%)", r.report)
  end)

  -- A mutant: build the example, break it, and expect one of `kinds` with a
  -- counterexample whose steps are `role warp N: op at file.lua:LINE`.
  local function catches(what, kinds, build, mutate, n)
    it("catches: " .. what, function()
      local k = build()
      local lines = mutate(k)
      local r = tl.verify_protocol(k, { args = args(n) })
      assert.is_false(r.ok, "the mutant passed")
      local ok = false
      for _, kind in ipairs(kinds) do ok = ok or r.violation.kind == kind end
      assert(ok, ("expected %s, got:\n%s"):format(table.concat(kinds, " or "), r.report))
      assert.is_true(#r.trace >= 1, r.report)
      for _, step in ipairs(r.trace) do
        assert(step:match "^[%w_]+ warp %d+: [%w_.]+ at examples/[%w_]+%.lua:%d+$"
               or step:match "^bulk copy %d+ %(from [%w_]+ warp %d+%): tile.bulk_copy_g2s at examples/[%w_]+%.lua:%d+ completes",
               "a step does not name its role, op and line: " .. step)
      end
      for _, l in ipairs(lines or {}) do assert.matches(l, r.report) end
      print(("\n  %s -> %s (%d steps, %d states)\n%s"):format(what, r.violation.kind, #r.trace, r.states,
        r.violation.message))
    end)
  end

  local P = cases[3]
  local R = cases[1]

  catches("a deleted consumer_release (pipeline)", { "deadlock" }, P.build, function(k)
    ops(k, "cutlass.pipeline.consumer_release")[1]:erase()
    return { "producer warp 0 waits on empty" }
  end, P.n)

  catches("a deleted producer_acquire (pipeline)", { "overwrite", "arrive_count", "phase" }, P.build, function(k)
    ops(k, "cutlass.pipeline.producer_acquire")[1]:erase()
  end, P.n)

  catches("consumer_release swapped with consumer_wait (pipeline)", { "overwrite", "phase", "unfilled", "arrive_count" }, P.build, function(k)
    local w, rel = ops(k, "cutlass.pipeline.consumer_wait")[1], ops(k, "cutlass.pipeline.consumer_release")[1]
    rel:move_before(w)
  end, P.n)

  catches("a consumer starting on the wrong phase (pipeline)", { "phase", "unfilled" }, P.build, function(k)
    for _, o in ipairs(ops(k, "cutlass.pipeline.state.create")) do
      if o:attr "role" == "consumer" then o:set_attr("phase", 1) end
    end
    return { "the wait passed on the wrong phase" }
  end, P.n)

  catches("a producer starting on the wrong phase (pipeline)", { "deadlock" }, P.build, function(k)
    for _, o in ipairs(ops(k, "cutlass.pipeline.state.create")) do
      if o:attr "role" == "producer" then o:set_attr("phase", 1) end
    end
  end, P.n)

  catches("a deleted producer_commit (pipeline)", { "deadlock" }, P.build, function(k)
    ops(k, "cutlass.pipeline.producer_commit")[1]:erase()
  end, P.n)

  catches("wrong transaction bytes in producer_commit (pipeline)", { "tx_bytes" }, P.build, function(k)
    ops(k, "cutlass.pipeline.producer_commit")[1]:set_attr("transaction_bytes", 512 - 16)
    return { "transaction%-byte mismatch" }
  end, P.n)

  catches("wrong transaction bytes in pipeline.init", { "tx_bytes" }, P.build, function(k)
    ops(k, "cutlass.pipeline.init")[1]:set_attr("transaction_bytes", 512 + 16)
    return { "transaction%-byte mismatch" }
  end, P.n)

  -- ring_copy: plain mbarriers
  local function empty_init_count(k, delta)
    for i, o in ipairs(ops(k, "tile.mbarrier_init")) do
      if i % 2 == 0 then -- full, empty, full, empty: the empty barriers
        local c = o:operand(2):def()
        c:set_attr("value", c:attr "value" + delta)
      end
    end
  end

  catches("an empty barrier counting one arrival too many (ring_copy)", { "deadlock" }, R.build, function(k)
    empty_init_count(k, 1)
    return { "32 of 33 arrivals came" }
  end, R.n)

  catches("an empty barrier counting one arrival too few (ring_copy)", { "arrive_count" }, R.build, function(k)
    empty_init_count(k, -1)
    return { "phase 0 completed after 31 of them" }
  end, R.n)

  catches("the consumer's arrive moved before its wait (ring_copy)", { "overwrite", "phase", "unfilled", "arrive_count" }, R.build, function(k)
    local w = ops(k, "tile.mbarrier_wait")[2] -- the consumer's wait on full
    local arrive = ops(k, "tile.mbarrier_arrive")[1]
    local addr = arrive:operand(1):def()
    addr:move_before(w)
    arrive:move_before(w)
  end, R.n)

  catches("a stage index that does not wrap (ring_copy)", { "uninitialized" },
    R.build, function(k)
      -- it & (S - 1) -> it & (2S - 1) in the producer: stage 2, 3 are past the ring
      for _, a in ipairs(ops(k, "arith.andi")) do
        local c = a:operand(2):def()
        if c and c:name() == "arith.constant" and c:attr "value" == 1 and a:result(1):type():info().width == 64 then
          c:set_attr("value", 3)
          break
        end
      end
    end, R.n)

  catches("the CTA barrier after the mbarrier inits deleted (ring_copy)", { "uninitialized" }, R.build, function(k)
    ops(k, "tile.barrier")[1]:erase()
    return { "is not ordered before the use" }
  end, R.n)

  catches("a bulk store's slot released before the store read it (ring_copy bulk)", { "overwrite", "unfilled" },
    cases[2].build, function(k)
      for _, o in ipairs(ops(k, "tile.bulk_wait")) do
        if o:attr "read" then o:set_attr("pending", 3) end
      end
    end, cases[2].n)

  it("catches: a missing tile.barrier before a read of what another warp wrote", function()
    -- (the kernel verifier refuses the kernel without the barrier: it is built
    -- with one, which the mutant then loses)
    local function build(with_barrier)
      tl.new_module()
      local k = tl.kernel("striped", { params = { { "out", tl.ptr(tl.i32) } }, block = 64 })
      k:define(function(k, p)
        local buf = k:shared(tl.i32, 64)
        local t = tl.thread_id()
        ;(buf + t):store(t * 3)
        tl.barrier()
        local v = (buf + (63 - t)):load()
        ;(p.out + t):store(v)
      end)
      if not with_barrier then ops(k, "tile.barrier")[1]:erase() end
      return k
    end
    local good = tl.verify_protocol(build(true), { args = { { bytes = 256 } } })
    assert(good.ok, good.report)
    local e = tl.emulate(build(true), { args = { { bytes = 256 } } })
    local out = e.read(1)
    for t = 0, 63 do assert.are.equal((63 - t) * 3, string.unpack("<i4", out, 4 * t + 1)) end
    local bad = tl.verify_protocol(build(false), { args = { { bytes = 256 } } })
    assert.is_false(bad.ok)
    assert.are.equal("unfilled", bad.violation.kind)
    assert.matches("kernel warp %d at [^ ]*protocol_spec.lua:%d+ reads shared bytes", bad.report)
  end)
end)
