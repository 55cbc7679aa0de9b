-- The CPU emulator (tl.emulate) and the protocol checker (tl.verify_protocol)
-- at the authoring level: the ring-copy examples copy bytes exactly under every
-- policy, the checker finds nothing wrong in them, and it catches seeded
-- protocol bugs (made by editing their IR through the op API) with a
-- counterexample whose steps name the examples' lines (docs/protocol.md).
local H = dofile "spec/helper.lua"
local tl = require "tilua"

local PH = dofile "spec/protocol_helper.lua"
local prc, bytes, ops, cases = PH.prc, PH.bytes, PH.ops, PH.cases

local function args(n, seed) return { bytes(n, seed), { bytes = n }, n } end

-- A kernel of 64 threads: thread t stores t * mult into shared word t, then
-- sync(), then reads word read(t) and stores it to out[t].
local function exchange(name, mult, sync, read)
  tl.new_module()
  local k = tl.kernel(name, { params = { { "out", tl.ptr(tl.i32) } }, block = 64 })
  k:define(function(k, p)
    local buf = k:shared(tl.i32, 64)
    local t = tl.thread_id()
    ;(buf + t):store(t * mult)
    sync()
    local v = (buf + read(t)):load()
    ;(p.out + t):store(v)
  end)
  return k
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

  it("runs each case of cutlass.pipeline.switch_by_executor on its warps, with its operands", function()
    tl.new_module()
    local k = tl.kernel("cases", { params = { { "out", tl.ptr(tl.i32) } }, block = 96 })
    k:define(function(k, p)
      local a = k:executor("a", { first_warp = 0, warps = 1 })
      local b = k:executor("b", { first_warp = 1, warps = 2 })
      k:async_exec("both", { first_warp = 0, warps = 3 }, function()
        tl.cutlass.switch_by_executor {
          { a, { tl.const(7, tl.i32) }, function(x) tl.if_(tl.lane_id():eq(0), function() (p.out + 0):store(x) end) end },
          { b, { tl.const(9, tl.i32), tl.const(2, tl.i32) }, function(y, z)
              local w = tl.warp_id()
              tl.if_(tl.lane_id():eq(0), function() (p.out + w):store(y * z + w) end)
            end },
        }
      end)
    end)
    local r = tl.emulate(k, { args = { { bytes = 12 } } })
    assert(r.ok, r.report)
    local x, y, z = string.unpack("<i4<i4<i4", r.read(1))
    assert.are.same({ 7, 19, 20 }, { x, y, z })
  end)

  it("models tile.shfl lane by lane (every mode, segments of 32 and 8 lanes) and tile.math (ex2, f32)", function()
    tl.new_module()
    local modes = { "idx", "up", "down", "bfly" }
    local k = tl.kernel("shfl", { params = { { "out", tl.ptr(tl.i32) }, { "e", tl.ptr(tl.f32) } }, block = 32 })
    k:define(function(k, p)
      local l = tl.lane_id()
      local v = l * 10 + 1
      for m, mode in ipairs(modes) do
        for w, width in ipairs { 32, 8 } do
          local b = mode == "idx" and 13 or mode == "bfly" and 5 or 3
          (p.out + (((m - 1) * 2 + w - 1) * 32 + l)):store(tl.shfl(v, b, { mode = mode, width = width }))
        end
      end
      (p.e + l):store(tl.ex2(l:cast(tl.f32) * 0.5 - 4.0))
    end)
    local r = tl.emulate(k, { args = { { bytes = 4 * 8 * 32 }, { bytes = 4 * 32 } } })
    assert(r.ok, r.report)
    local out, e = r.read(1), r.read(2)
    for m, mode in ipairs(modes) do
      for w, width in ipairs { 32, 8 } do
        local b = mode == "idx" and 13 or mode == "bfly" and 5 or 3
        for l = 0, 31 do
          local seg, src = l // width * width
          if mode == "idx" then src = seg + b % width
          elseif mode == "up" then src = l - b >= seg and l - b or l
          elseif mode == "down" then src = l + b < seg + width and l + b or l
          else src = (l ~ b) < seg + width and (l ~ b) or l end
          assert.equal(src * 10 + 1, (string.unpack("<i4", out, 1 + 4 * (((m - 1) * 2 + w - 1) * 32 + l))), mode .. " " .. width .. " lane " .. l)
        end
      end
    end
    for l = 0, 31 do assert.near(2.0 ^ (l * 0.5 - 4), (string.unpack("<f", e, 1 + 4 * l)), 2.0 ^ (l * 0.5 - 4) * 2.0 ^ -23) end
  end)

  it("refuses a tile.shfl that lanes of its mask do not execute, at its line", function()
    tl.new_module()
    local k = tl.kernel("shfl_half", { params = { { "out", tl.ptr(tl.i32) } }, block = 32 })
    k:define(function(k, p)
      local l = tl.lane_id()
      tl.if_(l:lt(16), function() (p.out + l):store(tl.shfl_xor(l, 1)) end)
    end)
    local ok, err = pcall(tl.emulate, k, { args = { { bytes = 4 * 32 } } })
    assert.is_false(ok)
    assert.matches("emulate: tile.shfl at [^ ]*protocol_spec.lua:%d+: lane 16 of its mask does not execute it", err)
  end)

  it("says which op it does not model", function()
    tl.new_module()
    local k = tl.kernel("nm", { params = {}, block = 32 })
    k:define(function(k) k:async_exec("x", { first_warp = 0, warps = 1 }, function() tl.op1("tile.cluster_grid_dim", {}, tl.i32, { dim = "x" }) end) end)
    local ok, err = pcall(tl.emulate, k, { args = {} })
    assert.is_false(ok)
    assert.matches("emulate: op tile.cluster_grid_dim is not modelled %(at [^ ]*protocol_spec.lua:%d+%)", err)
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
      local o = type(n) == "table" and n or { args = args(n) }
      local r = tl.verify_protocol(k, { args = o.args, grid = o.grid })
      PH.assert_caught(r, what, kinds, lines, {
        "^[%w_]+ warp %d+: [%w_.]+ at examples/[%w_]+%.lua:%d+$",
        "^[%w_]+ warp %d+ %(CTA %d+%): [%w_.]+ at examples/[%w_]+%.lua:%d+$",
        "^bulk copy %d+ %(from [%w_]+ warp %d+%): tile.bulk_copy_g2s at examples/[%w_]+%.lua:%d+ completes" })
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

  -- The shortest counterexample, proved by brute force: every schedule of at
  -- most `limit` steps, named by its choices where more than one actor could
  -- move -> the fewest steps of a run ending in a `kind` violation, or nil.
  local function fewest_steps(k, a, kind, limit)
    local best
    local function explore(prefix)
      local n, seen = 0, {}
      local ok, r = pcall(tl.emulate, k, { args = a, max_steps = limit, policy = function(_, rs)
        n = n + 1
        seen[n] = #rs
        return prefix[n] or 1
      end })
      if ok and not r.ok and r.error.kind == kind and (not best or #r.trace < best) then best = #r.trace end
      for j = #prefix + 1, n do -- the other choices after the prefix (the run took the first)
        for c = 2, seen[j] do
          local p = { table.unpack(prefix) }
          for i = #prefix + 1, j - 1 do p[i] = 1 end
          p[j] = c
          explore(p)
        end
      end
    end
    explore({})
    return best
  end

  it("reports a shortest counterexample, shorter than the first one found depth-first", function()
    local function mutant()
      local k = P.build()
      for _, o in ipairs(ops(k, "cutlass.pipeline.state.create")) do
        if o:attr "role" == "consumer" then o:set_attr("phase", 1) end
      end
      return k
    end
    local a = args(P.n)
    local first = tl.verify_protocol(mutant(), { args = a, shortest = false })
    local r = tl.verify_protocol(mutant(), { args = a })
    assert.are.equal("phase", first.violation.kind)
    assert.are.equal("phase", r.violation.kind)
    assert.is_true(r.shortest)
    assert.is_true(#r.trace < #first.trace, ("%d steps, the first found %d"):format(#r.trace, #first.trace))
    assert.are.equal(#first.trace, r.first_steps)
    assert.matches(("counterexample %%(%d steps%%):"):format(#r.trace), r.report)
    -- no schedule reaches a phase violation in fewer steps; one does in as many
    assert.is_nil(fewest_steps(mutant(), a, "phase", #r.trace - 1))
    assert.are.equal(#r.trace, fewest_steps(mutant(), a, "phase", #r.trace))
    -- and the emulator, scheduled as the trace says, ends in the same violation
    local replay = require("tilua.emulate.protocol").replay(mutant(), { args = a, grid = 1, trace = r.trace })
    assert.are.equal(#r.trace, replay.n)
    assert.matches("^phase: ", replay.outcome)
  end)

  it("catches: a missing tile.barrier before a read of what another warp wrote", function()
    -- (the kernel verifier refuses the kernel without the barrier: it is built
    -- with one, which the mutant then loses)
    local function build(with_barrier)
      local k = exchange("striped", 3, tl.barrier, function(t) return 63 - t end)
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

  -- {=== seq_bar, clusters and DSMEM, block_striped and generic barriers

  local function i32s(t) return H.pack("<i4", t) end
  local function i32(x) return ((x + 0x80000000) & 0xffffffff) - 0x80000000 end
  local ints = H.i32s
  local function lib(f)
    tl.new_module() -- the examples build their kernels into the current module
    return assert(loadfile("examples/" .. f .. ".lua"))("--library")
  end

  -- seq_bar_pingpong: `rounds` rounds on `grid` CTAs, the example's own host check
  local function seq_args(grid, rounds)
    local a, b = {}, {}
    for i = 1, grid * rounds do a[i], b[i] = i32(i * 7919 * 7919 - 30000), i32(i * 104729 + 5) end
    return { i32s(a), i32s(b), { bytes = 8 * grid * rounds }, { bytes = 4 * grid }, { bytes = 4 * grid }, rounds }, a, b
  end
  local SEQ = { grid = 1, args = (seq_args(1, 3)) }
  local function seq_build() return lib("seq_bar_pingpong").kernel end

  it("emulates seq_bar_pingpong as its CPU reference computes it (every policy, 2 CTAs)", function()
    local k = seq_build()
    for _, policy in ipairs { "round_robin", "random", "adversarial" } do
      local grid, rounds = 2, 5
      local ar, a, b = seq_args(grid, rounds)
      ar[3] = string.rep("\255", 8 * grid * rounds) -- the log starts at -1
      local r = tl.emulate(k, { grid = grid, args = ar, policy = policy, seed = 5 })
      assert(r.ok, r.report)
      local L, N, O = ints(r.read(3)), ints(r.read(4)), ints(r.read(5))
      for c = 0, grid - 1 do
        local v = c
        for i = 0, rounds - 1 do
          v = i32(v * 31 + a[c * rounds + i + 1])
          v = i32((v ~ b[c * rounds + i + 1]) * 7 + 1)
        end
        assert.are.equal(2 * rounds, N[c + 1])
        for j = 0, 2 * rounds - 1 do assert.are.equal((j % 2) * 65536 + j // 2, L[c * 2 * rounds + j + 1]) end
        assert.are.equal(v, O[c + 1])
      end
    end
  end)

  -- cluster_dsmem: CTAs in clusters of 2 exchange slices through DSMEM
  local T = 256
  local function cl_args(ctas)
    local inp = {}
    for i = 1, T * ctas do inp[i] = i32(i * 2654435761) end
    return { i32s(inp), { bytes = 8 * T * ctas }, T * ctas }, inp
  end
  local CL = { grid = 2, args = (cl_args(2)) }
  local function cl_build() return lib("cluster_dsmem").kernel end

  it("emulates cluster_dsmem on 2 clusters as its CPU reference computes it", function()
    local ctas = 4
    local ar, inp = cl_args(ctas)
    for _, policy in ipairs { "round_robin", "random", "adversarial" } do
      local r = tl.emulate(cl_build(), { grid = ctas, args = ar, policy = policy, seed = 3 })
      assert(r.ok, r.report)
      local out = ints(r.read(2))
      for cta = 0, ctas - 1 do
        local rank, peer = cta % 2, cta ~ 1
        for t = 0, T - 1 do
          local g, pg = cta * T + t, peer * T + t
          assert.are.equal(inp[pg + 1], out[g + 1])
          assert.are.equal(i32(inp[pg + 1] * 2 + rank), out[T * ctas + g + 1])
        end
      end
    end
  end)

  -- splitk_block_striped: RB row blocks, P splits of KS
  local function sk_args(RB, P, KS)
    local M, K = RB * 2048, P * KS
    local A, X, mx = {}, {}, {}
    for i = 1, K * M do A[i] = (i * 7919) % 2001 - 1000 end
    for i = 1, K do X[i] = i * 13 - 20 end
    for i = 1, M do mx[i] = -2147483648 end
    return { i32s(A), i32s(X), { bytes = 4 * P * M }, { bytes = 4 * M }, i32s(mx), { bytes = 4 * M }, { bytes = 4 * RB } },
      A, X
  end
  local SK = { grid = 2, args = (sk_args(1, 2, 1)) }
  local function sk_build() return lib("splitk_block_striped").build(1, 2, 1) end

  it("emulates splitk_block_striped (1 x 3 splits of 2) as its CPU reference computes it", function()
    local RB, P, KS = 1, 3, 2
    local M = RB * 2048
    local ar, A, X = sk_args(RB, P, KS)
    local r = tl.emulate(lib("splitk_block_striped").build(RB, P, KS), { grid = P * RB, args = ar, policy = "random", seed = 9 })
    assert(r.ok, r.report)
    local S, MX, C, F = ints(r.read(4)), ints(r.read(5)), ints(r.read(6)), ints(r.read(7))
    for row = 0, M - 1 do
      local total, best = 0, nil
      for sp = 0, P - 1 do
        local part = 0
        for kk = sp * KS, (sp + 1) * KS - 1 do part = part + A[kk * M + row + 1] * X[kk + 1] end
        part = i32(part)
        total = i32(total + part)
        best = (best == nil or part > best) and part or best
      end
      assert.are.equal(total, S[row + 1])
      assert.are.equal(best, MX[row + 1])
      assert.are.equal(total, C[row + 1])
    end
    assert.are.equal(0, F[1]) -- the last split reset its counter
  end)

  for _, c in ipairs {
    { "seq_bar_pingpong", seq_build, SEQ }, { "cluster_dsmem", cl_build, CL }, { "splitk_block_striped", sk_build, SK },
  } do
    it("finds no violation in " .. c[1], function()
      local t0 = os.clock()
      local r = tl.verify_protocol(c[2](), { grid = c[3].grid, args = c[3].args })
      assert(r.ok, r.report)
      assert.is_true(r.min_phases == nil or r.min_phases >= 1)
      print(("\n  %s: %d states, %d runs, %.2f s"):format(c[1], r.states, r.runs, os.clock() - t0))
    end)
  end

  local function state_creates(k, pick)
    local l = ops(k, "cutlass.seq_bar.state.create")
    return l[pick]
  end

  catches("seq_bar: group B starting on the wrong phase (both groups go at once)", { "unfilled", "overwrite", "deadlock", "phase" },
    seq_build, function(k)
      state_creates(k, 2):set_attr("phase", 1)
    end, SEQ)

  catches("seq_bar: group A starting on the wrong phase", { "deadlock" }, seq_build, function(k)
    state_creates(k, 1):set_attr("phase", 0)
    return { "waits on slot 0 of the seq_bar at examples/seq_bar_pingpong.lua:34" }
  end, SEQ)

  catches("seq_bar: an arrive count one too many", { "deadlock" }, seq_build, function(k)
    ops(k, "cutlass.seq_bar.init")[2]:set_attr("arrive_count", 129)
    return { "128 of 129 arrivals came" }
  end, SEQ)

  catches("seq_bar: an arrive count one too few", { "arrive_count" }, seq_build, function(k)
    ops(k, "cutlass.seq_bar.init")[2]:set_attr("arrive_count", 127)
  end, SEQ)

  catches("seq_bar: group B skipping its wait (a consumer skipping acquire)", { "unfilled", "overwrite", "arrive_count" },
    seq_build, function(k)
      ops(k, "cutlass.seq_bar.wait")[2]:erase()
    end, SEQ)

  catches("seq_bar: B's ring initialized after group A started (no CTA barrier orders its init first)", { "uninitialized" },
    seq_build, function(k)
      local init = ops(k, "cutlass.seq_bar.init")[2]
      init:move_before(ops(k, "cutlass.async.exec")[2]) -- ...it runs after A's loop: A arrives on B's ring first
    end, SEQ)

  local function erase_cluster_sync(k, i)
    ops(k, "tile.cluster_wait")[i]:erase()
    ops(k, "tile.cluster_arrive")[i]:erase()
  end

  catches("cluster_dsmem: the cluster sync before the DSMEM stores deleted", { "dsmem" }, cl_build, function(k)
    erase_cluster_sync(k, 1)
    return { "before the cluster is known to have started" }
  end, CL)

  catches("cluster_dsmem: the cluster sync between the DSMEM stores and the reads deleted", { "unfilled", "overwrite" },
    cl_build, function(k)
      erase_cluster_sync(k, 2)
    end, CL)

  catches("cluster_dsmem: the last cluster sync deleted (a CTA exits while its peer reads it)", { "dsmem" },
    cl_build, function(k)
      erase_cluster_sync(k, 3)
      return { "a missing cluster barrier before the exit" }
    end, CL)

  catches("splitk: the barrier before the block-striped read deleted", { "unfilled", "overwrite" }, sk_build, function(k)
    ops(k, "tile.barrier")[1]:erase()
    return { "splitk_block_striped.lua:69" } -- the flat block_striped.load
  end, SK)

  catches("splitk: the fixup reads before the finisher's barrier (its wait deleted)", { "unfilled", "overwrite" },
    sk_build, function(k)
      for _, o in ipairs(ops(k, "cutlass.generic_barrier.wait_eq_reset")) do o:erase() end
      for _, o in ipairs(ops(k, "cutlass.generic_barrier.wait_eq")) do o:erase() end
    end, SK)

  catches("splitk: the finisher's arrive deleted", { "deadlock" }, sk_build, function(k)
    ops(k, "cutlass.generic_barrier.arrive_inc")[1]:erase()
    return { "waits until the counter" }
  end, SK)

  it("catches: a wait the next phase can overtake (a producer that skips its acquire)", function()
    -- warp 0 signals 4 times on full, warp 1 waits for each signal and
    -- acknowledges it on empty. Without the producer's wait on empty it can
    -- complete full's next phase before the consumer's wait passes: that wait
    -- could then miss the phase it waits for (no data: only the phases speak)
    local function build(acquire)
      tl.new_module()
      local k = tl.kernel("signals", { params = { { "out", tl.ptr(tl.i32) } }, block = 64 })
      k:define(function(k, p)
        local full = k:shared(tl.i64, 1, { align = 8 })
        local empty = k:shared(tl.i64, 1, { align = 8 })
        tl.if_(tl.thread_id():eq(0), function()
          tl.mbarrier_init(full, 1)
          tl.mbarrier_init(empty, 1)
        end)
        tl.barrier()
        k:agent("producer", { warps = 1 }, function()
          tl.elect_one(function()
            tl.for_range(tl.const(0, tl.i32), 4, function(i)
              if acquire then tl.mbarrier_wait(empty, (i & 1) ~ 1) end
              tl.mbarrier_arrive(full)
            end)
          end)
        end)
        k:agent("consumer", { warps = 1 }, function()
          tl.elect_one(function()
            tl.for_range(tl.const(0, tl.i32), 4, function(i)
              tl.mbarrier_wait(full, i & 1)
              ;(p.out + i):store(i)
              tl.mbarrier_arrive(empty)
            end)
          end)
        end)
      end)
      return k
    end
    local good = tl.verify_protocol(build(true), { args = { { bytes = 16 } } })
    assert(good.ok, good.report)
    local bad = tl.verify_protocol(build(false), { args = { { bytes = 16 } } })
    assert.is_false(bad.ok)
    assert.are.equal("phase", bad.violation.kind, bad.report)
    assert.matches("consumer warp 1 [^\n]*protocol_spec.lua:%d+ [^\n]*mbarrier [^\n]*phase aliasing", bad.report)
  end)

  -- cutlass_pipeline: the warp-specialized StreamK skeleton (a 4-warp producer,
  -- two math warpgroups in a switch_by_executor taking turns through seq_bars)
  -- on one cluster: one tile of 8 k steps, every ring twice around
  local CP = { grid = 2 }
  local function cp_build()
    local ex = lib("cutlass_pipeline")
    CP.args = ex.args(8)
    return ex.kernel
  end

  it("emulates cutlass_pipeline's skeleton (switch_by_executor) with every ring twice around, every policy", function()
    local k = cp_build()
    for _, policy in ipairs { "round_robin", "random", "adversarial" } do
      local r = tl.emulate(k, { grid = CP.grid, args = CP.args, policy = policy, seed = 9 })
      assert(r.ok, r.report)
      assert.is_true(r.min_phases >= 2)
      local turns = {} -- the two math warpgroups ran their own case
      for _, step in ipairs(r.trace) do
        local w = step:match "^math warp (%d+) %(CTA 0%): cutlass.seq_bar.wait"
        if w then turns[tonumber(w) < 8 and "math0" or "math1"] = true end
      end
      assert.is_true(turns.math0 and turns.math1)
    end
  end)

  it("finds no violation in cutlass_pipeline", function()
    local t0 = os.clock()
    local r = tl.verify_protocol(cp_build(), { grid = CP.grid, args = CP.args })
    assert(r.ok, r.report)
    assert.is_true(r.min_phases >= 2)
    print(("\n  cutlass_pipeline: %d states, %d runs, %.2f s"):format(r.states, r.runs, os.clock() - t0))
  end)

  local cp_steps = { "^[%w_]+ warp %d+ %(CTA %d+%): [%w_.]+ at examples/[%w_]+%.lua:%d+$",
                     "^bulk copy %d+ %(from [%w_]+ warp %d+ %(CTA %d+%)%): tile.bulk_copy_g2s at examples/[%w_]+%.lua:%d+ completes" }
  local function cp_catches(what, kinds, mutate)
    it("catches: cutlass_pipeline: " .. what, function()
      local k = cp_build()
      local lines = mutate(k)
      PH.assert_caught(tl.verify_protocol(k, { grid = CP.grid, args = CP.args }), what, kinds, lines, cp_steps)
    end)
  end

  cp_catches("math0's consumer_release deleted", { "deadlock" }, function(k)
    ops(k, "cutlass.pipeline.consumer_release")[1]:erase()
    return { "load warp 0 %(CTA 0%) waits on empty%[0%]" }
  end)

  cp_catches("the producer's bulk copy deleted (committed bytes nothing delivers)", { "tx_bytes" }, function(k)
    ops(k, "tile.bulk_copy_g2s")[1]:erase()
    return { "has all its arrivals but a tx%-count of 32768 bytes" }
  end)

  cp_catches("transaction_bytes of the commit 16 short", { "tx_bytes" }, function(k)
    ops(k, "cutlass.pipeline.producer_commit")[1]:set_attr("transaction_bytes", 32768 - 16)
    return { "tx%-count of %-16 bytes" }
  end)

  cp_catches("math1 starting on the wrong phase (both warpgroups go at once)", { "phase", "deadlock" }, function(k)
    ops(k, "cutlass.seq_bar.state.create")[2]:set_attr("phase", 1)
  end)

  cp_catches("math1 handing the turn to itself (its arrive on its own seq_bar)", { "deadlock" }, function(k)
    local a = ops(k, "cutlass.seq_bar.arrive")
    a[2]:set_operand(1, a[1]:operand(1))
  end)

  it("catches: a named barrier used by more threads than it counts", function()
    local function build(count)
      return exchange("nb", 5, function() tl.named_barrier_sync(1, count) end, function(t) return t end)
    end
    local good = tl.verify_protocol(build(64), { args = { { bytes = 256 } } })
    assert(good.ok, good.report)
    local e = tl.emulate(build(64), { args = { { bytes = 256 } } })
    assert(e.ok, e.report)
    for t = 0, 63 do assert.are.equal(t * 5, string.unpack("<i4", e.read(1), 4 * t + 1)) end
    local bad = tl.verify_protocol(build(32), { args = { { bytes = 256 } } })
    assert.is_false(bad.ok)
    assert.are.equal("bar_count", bad.violation.kind)
    assert.matches("a barrier used by more threads than it counts", bad.report)
  end)

  -- }===
end)

-- A loop without a synchronizing op takes no steps: the ops are bounded too.
describe("tl.emulate's bounds", function()
  it("stops a loop that does not end at max_ops, at its line", function()
    tl.new_module()
    local k = tl.kernel("spin", { params = { { "x", tl.ptr(tl.i32) }, { "n", tl.i32 } }, block = 32 })
    k:define(function(k, p)
      local r = tl.while_({ p.n }, function(v) return v:ge(0), v end, function(v) return v + 0 end)
      p.x:store(r)
    end)
    local ok, err = pcall(tl.emulate, k, { args = { { bytes = 4 }, 1 }, max_ops = 10000 })
    assert.is_false(ok)
    assert.matches("emulate: more than 10000 ops run %(max_ops%) at [^ ]*protocol_spec.lua:%d+: a loop that does not end", err)
  end)

  it("counts the elements a block-striped move loops over (a fragment of 2^31 elements)", function()
    local m = assert(tl.parse([[
module {
  tile.kernel {arg_names = ["partials"], kernel_spec = {block = [128, 1, 1]}, sym_name = "striped"} {
  ^bb0(%0: ptr<f32, global>):
    %1 = builtin.unrealized_conversion_cast : memref<2147483648xf32, rmem>
    cutlass.block_striped.load_add %0, %1 {element_type = f32, threads = 128}
  }
}
]], { file = "huge.tir" }))
    local ok, err = pcall(tl.emulate, m, { args = { { bytes = 16 } }, max_ops = 100000 })
    assert.is_false(ok)
    assert.matches("emulate: more than 100000 ops run %(max_ops%) at huge.tir:5", err)
  end)
end)
