-- ksplit consumers of a tile program (tl.for_tiles {consumers = "ksplit"},
-- docs/tileprog.md): tileas-materialize-agents makes two consumer agents,
-- each with the whole 64-row accumulator, marked tileas.ksplit = [g, 2], and
-- convert-tileas-to-cutlass lowers them with kernels/gemm.lua's ksplit pieces,
-- as stdlib/gemm.lua's consumers = "ksplit": one ring of a pipeline of mode
-- pingpong, consumer g taking the stages whose place in the ring's sequence
-- has g's parity (across programs), consumer 1's sums handed to consumer 0
-- through shared memory, consumer 0 alone storing. On the CPU emulator, with
-- small integers (every sum exact): every tileas stage and the lowered kernel
-- give the plain reference's bytes with the CTAs running odd and even counts of
-- programs and an odd count of k blocks a program (so the parity changes from
-- program to program); on a cluster of 2 (a 128-row program split along M, B
-- multicast, mode pingpong_cluster) the lowered kernel on 1 and 2 clusters; with
-- 128-element k blocks (stdlib's decode tile, 64 x 32 with bk = 128); the
-- protocol checker explores the materialized agents and the lowered kernel,
-- and finds the overwrite when consumer 1 no longer waits for consumer 0 to
-- have read its previous sums; what is refused.
local H = dofile "spec/helper.lua"
local tl = require "tilua"
local PH = dofile "spec/protocol_helper.lua"

local ex = assert(loadfile "examples/tile_gemm.lua")("--library")

local stage_kernel = PH.stage_kernel

local problem_of = PH.int_gemm

local function pipeline_mode(kop)
  local mode
  kop:walk(function(op) if op:name() == "cutlass.pipeline.init" then mode = op:attr "mode" end end)
  return mode
end

describe("ksplit consumers of a tile GEMM", function()
  it("materializes two consumers of the whole accumulator, marked tileas.ksplit", function()
    local kop = stage_kernel(ex.build { consumers = "ksplit", stages = 4 }, "tileas-materialize-agents")
    local marks = {}
    kop:walk(function(op)
      if op:name() == "tileas.agent" and op:attr "kind" == "consumer" then
        marks[#marks + 1] = op:attr "tileas.ksplit"
        assert.is_nil(op:attr "tileas.replica")
        assert.is_nil(op:attr "tileas.pingpong")
      end
      if op:name() == "tileas.dot" then assert.matches("tile<64x128xf32", tostring(op:result(1):type())) end
    end)
    assert.same({ { 0, 2 }, { 1, 2 } }, marks)
    assert.same({ 384, 1, 1 }, kop:kernel_spec().block)
  end)

  -- 3 x 2 programs of 64 x 128 (edges along M and N), 7 k blocks a program (the
  -- last ragged): consumer 0 takes 4 of the first program, 3 of the second, ...
  local P = problem_of(150, 200, 7 * 64 - 8)
  it("every tileas stage and the lowered kernel compute the reference, programs odd and even a CTA, odd k blocks", function()
    local k = ex.build { consumers = "ksplit", stages = 4 }
    local kop = PH.lowered_tile(k)
    assert.equal("pingpong", pipeline_mode(kop))
    -- 2 CTAs walk 3 programs each, then 1 CTA all 6, then 4 CTAs (2, 2, 1, 1)
    for _, grid in ipairs { 2, 1, 4 } do
      local args, at = PH.params_args(kop, P.values(3, 2))
      local r = tl.emulate(kop, { grid = grid, args = args, policy = "random", seed = 5 + grid })
      assert(r.ok, r.report)
      P.check(r.read(at["map:C"] or at["ptr:C"]), ("the lowered kernel on %d CTAs"):format(grid))
    end
    local problem = { A = P.A, B = P.B, C = P.C, K = P.K }
    for _, stage in ipairs { "input", "tileas-materialize-agents", "sink-negf-through-shapes" } do
      for _, workers in ipairs { 2, 4 } do
        local r = tl.emulate(stage_kernel(k, stage), { grid = { 3, 2 }, workers = workers, args = problem, policy = "random", seed = 3 })
        assert(r.ok, r.report)
        P.check(r.read(3), ("%s on %d workers"):format(stage, workers))
      end
    end
  end)

  -- The lowered kernel of program o on the emulator, on 1 and 2 clusters (grids), against P (programs px x py)
  local function on_clusters(o, P, px, py, grids, seed)
    local kop = PH.lowered_tile(ex.build(o))
    assert.equal("pingpong_cluster", pipeline_mode(kop))
    for _, grid in ipairs(grids) do
      local args, at = PH.params_args(kop, P.values(px, py))
      local r = tl.emulate(kop, { grid = grid, args = args, policy = "random", seed = seed + grid })
      assert(r.ok, r.report)
      P.check(r.read(at["map:C"] or at["ptr:C"]), ("%d CTAs"):format(grid))
    end
  end

  it("on a cluster of 2 (a 128 x 96 program split along M, B multicast) the lowered kernel computes the reference on 1 and 2 clusters", function()
    -- (3 x 3 programs: 9 on one cluster, 5 and 4 on two)
    on_clusters({ consumers = "ksplit", cluster = 2, bm = 128, bn = 96, stages = 4 }, problem_of(330, 200, 5 * 64 - 24),
                3, 3, { 2, 4 }, 11)
  end)

  -- a 64 x 256 program on a cluster of 4 split along N (64 x 64 a CTA, A multicast to the 4, 16 rows a CTA's
  -- load): its default ring (12 stages of 32 KiB a program, 16 KiB a CTA) fits a CTA's shared memory only as split
  it("on a cluster of 4 (a 64 x 256 program split along N, A multicast to 4) the lowered kernel computes the reference on 1 and 2 clusters", function()
    assert.equal(12, ex.stages_of { consumers = "ksplit", cluster = 4, bn = 256 })
    H.assert_ptxas(ex.build({ consumers = "ksplit", cluster = 4, bn = 256 }):compile())
    -- (3 x 2 programs: 6 on one cluster, 3 and 3 on two)
    on_clusters({ consumers = "ksplit", cluster = 4, bn = 256, stages = 4 }, problem_of(150, 300, 3 * 64 - 8), 3, 2, { 4, 8 }, 23)
  end)

  -- stdlib's decode tile (64 x 32, bk = 128: two 128-byte swizzle rows of each
  -- row of A and B a stage, 8 stages): 3 x 4 programs, 5 k blocks a program (the
  -- last ragged), so the parity changes from program to program
  it("with 128-element k blocks (64 x 32, two TMA boxes an operand a stage) the lowered kernel computes the reference", function()
    local P3 = problem_of(150, 120, 5 * 128 - 40)
    local k = ex.build { consumers = "ksplit", bn = 32, bk = 128 }
    assert.equal(8, ex.stages_of { consumers = "ksplit", bn = 32, bk = 128 })
    local kop = PH.lowered_tile(k)
    local loads = #PH.ops(kop, "tile.tma_load")
    assert.equal(4, loads, "a stage's loads: two boxes of A, two of B")
    for _, grid in ipairs { 5, 2 } do
      local args, at = PH.params_args(kop, P3.values(3, 4))
      local r = tl.emulate(kop, { grid = grid, args = args, policy = "random", seed = 17 + grid })
      assert(r.ok, r.report)
      P3.check(r.read(at["map:C"] or at["ptr:C"]), ("bk 128 on %d CTAs"):format(grid))
    end
  end)

  it("the protocol checker explores the materialized agents and the lowered kernel, and finds the hand-over's overwrite", function()
    local k = ex.build { consumers = "ksplit", stages = 2, bn = 64 }
    local K2 = 192 -- 3 k blocks through 2 stages: the ring wraps within a program, the parity changes between programs
    local args = { A = { bytes = 2 * 192 * K2, shape = { 192, K2 } }, B = { bytes = 2 * 64 * K2, shape = { 64, K2 } },
                   C = { bytes = 2 * 192 * 64, shape = { 192, 64 } }, K = K2 }
    local agents = tl.verify_protocol(stage_kernel(k, "tileas-materialize-agents"), { grid = { 3, 1 }, workers = 1, args = args })
    assert(agents.ok, agents.report)
    local kop = PH.lowered_tile(k)
    local values = { ["map:A"] = args.A, ["map:B"] = args.B, ["map:C"] = args.C, ["arg:K"] = K2, ["programs:x"] = 3, ["programs:y"] = 1 }
    local lowered = tl.verify_protocol(kop, { grid = 1, args = PH.params_args(kop, values) })
    assert(lowered.ok, lowered.report)
    -- consumer 1 stores its next program's sums without waiting for consumer 0 to have read the last
    local waits = PH.ops(kop, "cutlass.seq_bar.wait")
    local erased = false
    for _, w in ipairs(waits) do
      local agent = w:parent()
      while agent and agent:name() ~= "tile.agent" do agent = agent:parent() end
      if not erased and agent and agent:attr "name" == "consumer1" then
        w:erase()
        erased = true
      end
    end
    assert.is_true(erased)
    local bad = tl.verify_protocol(kop, { grid = 1, args = PH.params_args(kop, values) })
    assert.is_false(bad.ok, "the mutant passed")
    -- (consumer 1's store of its sums over the ones consumer 0 read and has not yet released)
    assert.equal("overwrite", bad.violation.kind, bad.report)
  end)

  it("refuses what ksplit consumers cannot split", function()
    local function refused(o, pattern)
      local ok, err = pcall(function() ex.build(o):compile() end)
      assert.is_false(ok)
      assert.matches(pattern, tostring(err))
    end
    refused({ consumers = "ksplit", bm = 128 }, "ksplit consumers each hold the whole accumulator %(one warpgroup's: 64 rows a CTA, got 128%)")
    refused({ consumers = "ksplit", stages = 5 }, "ksplit consumers take every other stage of the ring: its stages must be even, got 5")
    refused({ consumers = "ksplit", m = 256, n = 256, k = 512, schedule = "streamk", workers = 3 },
            "ksplit consumers split the k blocks of the programs of the static persistent schedule")
    -- a loop that does more than add dot products to its accumulator
    tl.new_module()
    local k = tl.tile_kernel("twice", { params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2), C = tl.tensor(tl.f32, 2), K = tl.i32 } })
    k:define(function(_, p)
      local acc = tl.for_tiles(p.K, { tile = 64, stages = 2, consumers = "ksplit" }, tl.zeros({ 64, 64 }, tl.f32), function(kk, acc)
        local a = tl.load(p.A, { tl.program_id("x"), kk }, { 64, 64 })
        local b = tl.load(p.B, { tl.program_id("y"), kk }, { 64, 64 })
        return tl.dot(a, b, acc) * 0.5
      end)
      tl.store(p.C, { tl.program_id("x"), tl.program_id("y") }, acc)
    end)
    local ok, err = pcall(function() k:compile() end)
    assert.is_false(ok)
    assert.matches("ksplit consumers add their sums of a program's k blocks: the k loop may only add dot products to its accumulator", tostring(err))
  end)

  it("compiles through ptxas (64 x 32, 64 x 128; 128 x 96 on a cluster of 2; 64 x 32 with bk = 128)", function()
    H.assert_ptxas(ex.build({ consumers = "ksplit", bn = 32 }):compile())
    H.assert_ptxas(ex.build({ consumers = "ksplit" }):compile())
    H.assert_ptxas(ex.build({ consumers = "ksplit", cluster = 2, bm = 128, bn = 96 }):compile())
    H.assert_ptxas(ex.build({ consumers = "ksplit", bn = 32, bk = 128 }):compile())
  end)
end)
