-- From a tile program to a running Hopper GEMM (the tile GEMM): tileas-assign-layouts,
-- tileas-materialize-agents and convert-tileas-to-cutlass in the tile-to-ptx
-- pipeline. The tile GEMM and the fused GEMM + bias + relu of examples/ compile
-- to PTX that ptxas takes; on the CPU emulator (the lowered kernel, its tile
-- scheduler lowered) they compute what a CPU reference does, bit for bit, with
-- edges, persistent CTAs walking several tiles and both consumer warpgroups;
-- the kernel is the orchestration of stdlib/gemm.lua; the launcher builds the
-- tensor maps from buffers and shapes (the stand-in driver, without a GPU).
local H = dofile "spec/helper.lua"
local tl = require "tilua"
local PH = dofile "spec/protocol_helper.lua"

local gemm_example = assert(loadfile "examples/tile_gemm.lua")("--library")
local fused_example = assert(loadfile "examples/tile_gemm_bias_relu.lua")("--library")
local softmax_example = assert(loadfile "examples/tile_gemm_softmax.lua")("--library")

-- tile-to-ptx's tileas part: its stages before the ptx pipeline
local TILEAS = "tileas-assign-layouts,tileas-dynamic-persistent,tileas-materialize-agents," ..
               "optimize-execution-unit-mapping,tileas-plan-cta,tileas-remove-buffer-alias," ..
               "tileas-remove-layout-conversions,tileas-decide-slicing,tileas-slicing,tileas-prepare-for-scheduling," ..
               "tileas-resolve-agent-boundary,sink-negf-through-shapes,convert-tileas-to-cutlass"

local lowered = PH.lowered_tile -- the kernel the emulator runs

-- {=== inputs, the emulator's run and the CPU reference (small integers: every sum exact)
local bf16, matrix = PH.bf16, PH.matrix
local function from_bf16(h) return (string.unpack("<f", string.pack("<I4", h << 16))) end

local function a_value(i, k) return ((i * 7 + k * 3) % 5) - 2 end
local function b_value(j, k) return ((j * 5 + k * 11 + 1) % 3) - 1 end

-- The lowered kernel kop on the emulator (`grid` CTAs, a random schedule),
-- each parameter filled as its tileas.params entry says from `values`
-- (entry -> argument, as the launcher would); -> the bytes of parameter `out`.
local function emulate(kop, grid, values, out)
  local args, at = PH.params_args(kop, values)
  local r = tl.emulate(kop, { grid = grid, args = args, policy = "random", seed = 7 })
  assert(r.ok, r.report)
  return r.read(assert(at[out]))
end

-- Assert that the M x N matrix of bytes `out` (bf16, or f32) is want(i, j) everywhere.
local function assert_result(out, M, N, want, f32)
  local bad, first = 0, nil
  for i = 0, M - 1 do
    for j = 0, N - 1 do
      local got = f32 and string.unpack("<f", out, 1 + 4 * (i * N + j))
                  or from_bf16((string.unpack("<I2", out, 1 + 2 * (i * N + j))))
      local w = want(i, j)
      if got ~= w then
        bad = bad + 1
        first = first or ("[%d, %d] = %g, want %g"):format(i, j, got, w)
      end
    end
  end
  assert.equal(0, bad, first)
end

-- The CPU reference of A . B^T (A: M x K, B: N x K, 0-based, row-major): element (i, j).
local function dot_nt(A, B, K)
  return function(i, j)
    local s = 0
    for kk = 0, K - 1 do s = s + A[i * K + kk] * B[j * K + kk] end
    return s
  end
end

-- The printed types of the kernel op's parameters.
local function param_types(op)
  local types = {}
  for i, a in ipairs(op:region(1):entry():args()) do types[i] = tostring(a:type()) end
  return types
end

-- The instructions of interest in ptx (the pattern list: more of them), counted.
local function histogram(ptx, more)
  local h = {}
  for ins in ptx:gmatch "\n%s+([%a][%w_.:]*)" do
    local hit = ins:match "^wgmma" or ins:match "^cp%.async" or ins:match "^mbarrier" or ins:match "^stmatrix"
                or ins:match "^setmaxnreg" or ins:match "^bar%." or ins:match "^fence" or ins:match "^elect"
    for _, m in ipairs(more or {}) do hit = hit or ins:match(m) end
    if hit then h[ins] = (h[ins] or 0) + 1 end
  end
  return h
end

-- The protocol checker on the lowered kernel kop (`grid` CTAs, its
-- parameters from values) is clean and explores more than 100 states. -> args
local function assert_clean(kop, grid, values)
  local args = PH.params_args(kop, values)
  local c = tl.verify_protocol(kop, { grid = grid, args = args, max_states = 2000 })
  assert(c.ok, c.report)
  assert.is_true(c.states > 100)
  return args
end

-- The inputs of a tile GEMM's one M x N program, K deep (A, B of the test
-- pattern), for assert_clean.
local function gemm_values(M, N, K)
  local _, ab = matrix(M, K, a_value)
  local _, bb = matrix(N, K, b_value)
  return { ["map:A"] = { data = ab, shape = { M, K } }, ["map:B"] = { data = bb, shape = { N, K } },
           ["map:C"] = { bytes = M * N * 2, shape = { M, N } }, ["arg:K"] = K, ["programs:x"] = 1, ["programs:y"] = 1 }
end
-- }===

describe("tile programs to PTX (tile-to-ptx)", function()
  for _, ex in ipairs { gemm_example, fused_example } do
    it(ex.name .. ": every stage of tile-to-ptx, then PTX that ptxas takes", function()
      local k = ex.build()
      local ptx = k:compile()
      local names = {}
      for _, st in ipairs(tl.last_stages) do names[#names + 1] = st.name end
      assert.equal("input," .. TILEAS .. ",canonicalize,cse,lower-tile-scheduler,convert-cutlass-to-nvvm," ..
                   "dedupe-wait-groups,convert-tile-to-nvvm,canonicalize,cse,canonicalize,tileas-insert-OCG-knobs,emit-ptx",
                   table.concat(names, ","))
      assert.matches("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", ptx, 1, true)
      assert.matches("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes", ptx, 1, true)
      assert.matches("stmatrix.sync.aligned", ptx, 1, true)
      -- one CTA: the handshake's bypass, no cluster arrive / wait (a CTA barrier after the inits)
      assert.is_nil(ptx:find("barrier.cluster", 1, true))
      H.assert_ptxas(ptx)
    end)
  end

  it("the lowered kernel's parameters: tensor maps with the boxes chosen, pointers with dims, the grid of programs", function()
    local k = fused_example.build()
    k:compile()
    local op = k:lowered_op()
    assert.same({ "map:A", "map:B", "map:C", "arg:K", "ptr:bias", "dim:bias:0", "programs:x", "programs:y" },
                op:attr "tileas.params")
    assert.same({ "!tile.tensor_map<bf16, sw128, 128, 64>", "!tile.tensor_map<bf16, sw128, 256, 64>",
                  "!tile.tensor_map<bf16, sw64, 64, 32>", "i32", "ptr<f32, global>", "i32", "i32", "i32" }, param_types(op))
    assert.equal(384, op:kernel_spec().threads)
    assert.is_true(op:attr("tileas.launch").persistent)
  end)

  it("is the orchestration of stdlib/gemm.lua: the same TMA, wgmma, barrier and epilogue instructions", function()
    local tile = histogram(gemm_example.build():compile())
    local g = tl.gemm.build { m = 4096, n = 4096, k = 4096, bn = 256, stages = 3, schedule = "persistent" }
    assert.same(histogram(g.kernel:compile()), tile)
  end)

  it("with ping-pong consumers (64 x 256, 128 x 128) is stdlib/gemm.lua's ping-pong kernel: the same instructions", function()
    for _, t in ipairs { { 64, 256, 4 }, { 128, 128, 6 } } do
      local tile = histogram(gemm_example.build({ consumers = "pingpong", bn = t[2] }):compile())
      local g = tl.gemm.build { m = 4096, n = 4096, k = 4096, bm = t[1], bn = t[2], stages = t[3], consumers = "pingpong" }
      assert.same(histogram(g.kernel:compile()), tile)
    end
  end)

  -- the time is printed, not asserted: a test's verdict must not depend on the
  -- machine's speed or load (tools/bench/compile_time.lua measures it, docs/PERF.md)
  it("compiles from script to PTX (the time printed)", function()
    tl.options.compile_cache = false
    local best = math.huge
    for _ = 1, 5 do
      local t0 = os.clock()
      gemm_example.build():compile()
      best = math.min(best, (os.clock() - t0) * 1e3)
    end
    tl.options.compile_cache = nil
    print(("\n  tile_gemm: script to PTX in %.1f ms (best of 5)"):format(best))
  end)

  it("a cluster of 2 CTAs (--cluster=2): tileas-plan-cta's split, A multicast, the DSMEM handshake; ptxas takes it", function()
    local k = gemm_example.build { cluster = 2 }
    local saved = tl.options.keep_stages
    tl.options.keep_stages = true
    local ok, ptx = pcall(k.compile, k)
    tl.options.keep_stages = saved
    assert(ok, ptx)
    -- tileas-prepare-for-scheduling's boxes are each CTA's part (A: half its 128 rows, multicast; B: its 128 of 256
    -- rows), the tensor maps' boxes below
    local prep
    for _, st in ipairs(tl.last_stages) do if st.name == "tileas-prepare-for-scheduling" then prep = st.ir end end
    assert.truthy(prep:find("{multicast = 2, view = {box = [64, 64], order = [1, 0]}} : tile<128x64xbf16", 1, true), prep)
    assert.truthy(prep:find("{view = {box = [128, 64], order = [1, 0]}} : tile<256x64xbf16", 1, true), prep)
    assert.matches(".reqnctapercluster 2, 1, 1", ptx, 1, true)
    -- each CTA computes 128 x 128 of the 128 x 256 tile; A's 128 rows, 64 from each CTA, multicast to both
    assert.matches("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", ptx, 1, true)
    assert.matches("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster", ptx, 1, true)
    H.seq(ptx, { "fence.mbarrier_init.release.cluster", "barrier.cluster.arrive.relaxed", "barrier.cluster.wait" })
    local op = k:lowered_op()
    assert.same({ persistent = true, cluster = 2 }, op:attr "tileas.launch")
    assert.same({ "!tile.tensor_map<bf16, sw128, 64, 64>", "!tile.tensor_map<bf16, sw128, 128, 64>",
                  "!tile.tensor_map<bf16, sw64, 64, 32>", "i32", "i32", "i32" }, param_types(op))
    H.assert_ptxas(ptx)
  end)
end)

describe("a dot that no split gives each CTA of its cluster", function()
  -- (tl.core.dot_split: none for 64 x 64 on 2 CTAs, 64 x 128 on 4; each CTA would compute and store the whole tile)
  for _, o in ipairs { { cluster = 2, bm = 64, bn = 64 }, { consumers = "ksplit", cluster = 2, bn = 64 },
                       { consumers = "ksplit", cluster = 4 } } do
    it(("is refused at the dot, with what to change (%s, %d CTAs)"):format(o.consumers or "cooperative", o.cluster), function()
      local ok, err = pcall(function() gemm_example.build(o):compile() end)
      assert.is_false(ok)
      assert.matches("examples/tile_gemm.lua:%d+: convert%-tileas%-to%-cutlass: a 64 x %d+ dot on a cluster of %d CTAs: "
        .. "tileas%-plan%-cta found no split of it among them .* every CTA would compute and store the whole tile: give "
        .. "the program more rows or columns, or its cluster fewer CTAs", tostring(err))
    end)
  end
end)

describe("the fused GEMM + bias + relu on clusters (tileas-plan-cta's backward propagation)", function()
  -- the program after tile-to-ptx's stages up to tileas-plan-cta, printed
  local function planned(k)
    local m = k.module:clone()
    assert(tl.core.run_pipeline(m, TILEAS:match "^(.-tileas%-plan%-cta)"))
    return m:print()
  end
  -- Does a line of ir hold every one of the texts?
  local function has_line(ir, ...)
    for line in ir:gmatch "[^\n]+" do
      local all = true
      for _, t in ipairs { ... } do all = all and line:find(t, 1, true) ~= nil end
      if all then return true end
    end
    return false
  end

  it("on 4 CTAs (--cluster=4, N split): the bias's load split as the accumulator, no convert_layout; ptxas takes it", function()
    local k = fused_example.build { cluster = 4 }
    local ir = planned(k)
    assert.is_nil(ir:find("tileas.convert_layout", 1, true))
    -- the bias row, its expansion and its broadcast split as the accumulator: 64 columns a CTA
    assert.is_true(has_line(ir, "tileas.tiled_load %4,", 'tile<256xf32, rmem, {dim = 0, kind = "slice", parent = {cta = [1, 4]'))
    assert.is_true(has_line(ir, "tileas.expand_dim", "tile<1x256xf32, rmem, {cta = [1, 4]"))
    assert.is_true(has_line(ir, "tileas.broadcast", "tile<64x256xf32, rmem, {cta = [1, 4]"))
    local ptx = k:compile()
    assert.matches(".reqnctapercluster 4, 1, 1", ptx, 1, true)
    assert.matches("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16", ptx, 1, true)
    H.assert_ptxas(ptx)
  end)

  it("on 4 CTAs: the protocol checker is clean (every interleaving it explores; the ring wraps)", function()
    local M, N, K = 128, 256, 256 -- 4 k blocks through 3 stages
    local _, ab = matrix(M, K, a_value)
    local _, bb = matrix(N, K, b_value)
    local bias = {}
    for j = 0, N - 1 do bias[j + 1] = string.pack("<f", (j % 7) - 3) end
    assert_clean(lowered(fused_example.build { cluster = 4 }), 4, {
      ["map:A"] = { data = ab, shape = { M, K } }, ["map:B"] = { data = bb, shape = { N, K } },
      ["map:C"] = { bytes = M * N * 2, shape = { M, N } }, ["ptr:bias"] = table.concat(bias), ["dim:bias:0"] = N,
      ["arg:K"] = K, ["programs:x"] = 1, ["programs:y"] = 1 })
  end)

  it("on 2 CTAs splitting M (--cluster=2 --bm=256): the bias row whole on each CTA, no convert_layout", function()
    local ir = planned(fused_example.build { cluster = 2, bm = 256 })
    assert.is_nil(ir:find("tileas.convert_layout", 1, true))
    assert.is_true(has_line(ir, "tileas.tiled_load %4,", 'tile<256xf32, rmem, {dim = 0, kind = "slice", parent = {cta = [1, 1], kind = "mma"'))
    assert.is_true(has_line(ir, "tileas.broadcast", "tile<128x256xf32, rmem, {cta = [2, 1]"))
  end)
end)

describe("a 256-row tile program on a cluster of 2 (--cluster=2 --bm=256): tileas-plan-cta's M split", function()
  it("is stdlib/gemm.lua's cluster = 2 kernel: the same instructions, A's TMA in two 64-row pieces; ptxas takes it", function()
    local k = gemm_example.build { cluster = 2, bm = 256 }
    local ptx = k:compile()
    local op = k:lowered_op()
    assert.same({ persistent = true, cluster = 2 }, op:attr "tileas.launch")
    -- A: 64-row pieces (each CTA its 64 rows of both 128-row halves); B: 128 of its 256 rows, multicast
    assert.same({ "!tile.tensor_map<bf16, sw128, 64, 64>", "!tile.tensor_map<bf16, sw128, 128, 64>",
                  "!tile.tensor_map<bf16, sw64, 64, 32>", "i32", "i32", "i32" }, param_types(op))
    local cluster_ins = { "^mapa", "^barrier" }
    local tile = histogram(ptx, cluster_ins)
    local g = tl.gemm.build { m = 4096, n = 4096, k = 4096, bn = 256, stages = 3, schedule = "persistent", cluster = 2 }
    local std = histogram(g.kernel:compile(), cluster_ins)
    local a_load = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
    assert.equal(2 * std[a_load], tile[a_load])
    tile[a_load], std[a_load] = nil, nil
    assert.same(std, tile)
    H.assert_ptxas(ptx)
  end)

  it("the protocol checker is clean on it (every interleaving it explores; the ring wraps)", function()
    assert_clean(lowered(gemm_example.build { cluster = 2, bm = 256 }), 2, gemm_values(256, 256, 256)) -- (4 k blocks, 3 stages)
  end)
end)

describe("a 256 x 512 tile program on a cluster of 4 (--cluster=4 --bm=256 --bn=512): tileas-plan-cta's 2 x 2 split", function()
  it("is stdlib/gemm.lua's cluster = {2, 2} kernel: the same instructions, A's multicast TMA in two 32-row pieces; ptxas takes it", function()
    local k = gemm_example.build { cluster = 4, bm = 256, bn = 512 }
    local ptx = k:compile()
    assert.same({ persistent = true, cluster = 4 }, k:lowered_op():attr "tileas.launch")
    -- A: 32-row pieces (each CTA half of its 64 rows of both 128-row halves, to the CTA beside it), B: 128 of
    -- its CTA's 256 rows, to the CTA beside it along the other dim
    assert.same({ "!tile.tensor_map<bf16, sw128, 32, 64>", "!tile.tensor_map<bf16, sw128, 128, 64>",
                  "!tile.tensor_map<bf16, sw64, 64, 32>", "i32", "i32", "i32" }, param_types(k:lowered_op()))
    local cluster_ins = { "^mapa", "^barrier" }
    local tile = histogram(ptx, cluster_ins)
    local g = tl.gemm.build { m = 4096, n = 4096, k = 4096, bn = 256, stages = 3, schedule = "persistent", cluster = { 2, 2 } }
    local std = histogram(g.kernel:compile(), cluster_ins)
    local mc_load = "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
    assert.equal(std[mc_load] // 2 * 3, tile[mc_load]) -- (A's and B's, and A's second piece)
    tile[mc_load], std[mc_load] = nil, nil
    assert.same(std, tile)
    assert.matches(".reqnctapercluster 4, 1, 1", ptx, 1, true)
    H.assert_ptxas(ptx)
  end)

  it("the protocol checker is clean on it (every interleaving it explores; the ring wraps)", function()
    assert_clean(lowered(gemm_example.build { cluster = 4, bm = 256, bn = 512 }), 4, gemm_values(256, 512, 256)) -- (4 k blocks, 3 stages)
  end)
end)

describe("the lowered tile programs on the CPU emulator", function()
  local cases = {
    { ex = gemm_example, m = 128, n = 256, k = 128, ctas = 1 },                  -- one tile
    { ex = gemm_example, m = 300, n = 400, k = 72, ctas = 2 },                   -- edges, 6 tiles on 2 CTAs
    { ex = fused_example, m = 200, n = 296, k = 136, ctas = 3, bias = true },    -- bias, relu, edges
    -- clusters of 2 CTAs (tileas-plan-cta: each CTA 128 x 128 of a tile, A multicast
    -- to both): edges, a CTA whose block is past N, 4 tiles on 2 clusters
    { ex = gemm_example, m = 136, n = 264, k = 72, ctas = 4, cluster = 2 },
    -- a 256-row program on clusters of 2 (tileas-plan-cta splits M: each CTA
    -- 128 x 256, its two warpgroups 64 rows each of both halves, B multicast):
    -- edges along M and N, a CTA whose rows are all past M, 4 programs on 2 clusters
    { ex = gemm_example, m = 300, n = 264, k = 72, ctas = 4, cluster = 2, bm = 256 },
    -- the bias on clusters: on 4 CTAs each loads its 64 columns of it (a
    -- cluster whose last CTAs are past N, 2 tiles on 2 clusters); on 2 CTAs
    -- splitting N each its 128; splitting M each CTA the whole row
    { ex = fused_example, m = 136, n = 296, k = 72, ctas = 8, cluster = 4, bias = true },
    { ex = fused_example, m = 136, n = 296, k = 72, ctas = 4, cluster = 2, bias = true },
    { ex = fused_example, m = 300, n = 264, k = 72, ctas = 4, cluster = 2, bm = 256, bias = true },
    -- a 256 x 256 program on clusters of 4 (tileas-plan-cta splits both dims,
    -- [2, 2]: each CTA 128 x 128, A multicast to the 2 CTAs of its rows, B to
    -- the 2 of its columns, stdlib's 2 x 2 cluster): edges, 4 programs on 2
    -- clusters; the bias's columns loaded by the 2 CTAs that hold them
    { ex = gemm_example, m = 300, n = 264, k = 72, ctas = 8, cluster = 4, bm = 256 },
    { ex = fused_example, m = 300, n = 296, k = 72, ctas = 8, cluster = 4, bm = 256, bias = true },
  }
  for _, c in ipairs(cases) do
    it(("%s, %d x %d x %d on %d persistent CTA(s)%s: the CPU reference, bit for bit"):format(c.ex.name, c.m, c.n, c.k, c.ctas,
       c.cluster and (" in clusters of %d%s"):format(c.cluster, c.bm and (", %d-row programs"):format(c.bm) or "") or ""), function()
      local M, N, K = c.m, c.n, c.k
      local A, ab = matrix(M, K, a_value)
      local B, bb = matrix(N, K, b_value)
      local bias = {}
      for j = 0, N - 1 do bias[j + 1] = string.pack("<f", (j % 7) - 3) end
      local bm = c.bm or 128
      local out = emulate(lowered(c.ex.build { cluster = c.cluster, bm = c.bm }), c.ctas, {
        ["map:A"] = { data = ab, shape = { M, K } }, ["map:B"] = { data = bb, shape = { N, K } },
        ["map:C"] = { bytes = M * N * 2, shape = { M, N } }, ["ptr:bias"] = table.concat(bias), ["dim:bias:0"] = N,
        ["arg:K"] = K, ["programs:x"] = (M + bm - 1) // bm, ["programs:y"] = (N + 255) // 256 }, "map:C")
      local dot = dot_nt(A, B, K)
      assert_result(out, M, N, function(i, j)
        local s = dot(i, j)
        return c.bias and math.max(s + (j % 7) - 3, 0) or s
      end)
    end)
  end

  it("the protocol checker is clean on a cluster of 2 (every interleaving it explores; the ring wraps)", function()
    local kop = lowered(gemm_example.build { cluster = 2 })
    local args = assert_clean(kop, 2, gemm_values(128, 256, 256)) -- (4 k blocks through 3 stages)
    -- and it catches a CTA that may exit while its peer still releases into it
    -- (producer_tail and the final cluster sync deleted)
    PH.ops(kop, "cutlass.pipeline.producer_tail")[1]:erase()
    PH.ops(kop, "tile.cluster_wait")[1]:erase()
    PH.ops(kop, "tile.cluster_arrive")[1]:erase()
    local c = tl.verify_protocol(kop, { grid = 2, args = args, max_states = 2000 })
    assert.is_false(c.ok, "the mutant passed")
    assert.equal("dsmem", c.violation.kind, c.report)
  end)

  it("an f32 result (plain stores of the fragment), a scalar parameter: C = s * A . B^T - 1, 150 x 200 x 72", function()
    tl.new_module()
    local k = tl.tile_kernel("scaled", { params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2),
                                                    C = tl.tensor(tl.f32, 2), K = tl.i32, s = tl.f32 } })
    k:define(function(k, p)
      local m, n = tl.program_id("x"), tl.program_id("y")
      local acc = tl.for_tiles(p.K, 64, tl.zeros({ 128, 128 }, tl.f32), function(kk, acc)
        return tl.dot(tl.load(p.A, { m, kk }, { 128, 64 }), tl.load(p.B, { n, kk }, { 128, 64 }), acc)
      end)
      tl.store(p.C, { m, n }, acc * p.s - 1.0)
    end)
    local M, N, K = 150, 200, 72
    local A, ab = matrix(M, K, a_value)
    local B, bb = matrix(N, K, b_value)
    local out = emulate(lowered(k), 2, { ["map:A"] = { data = ab, shape = { M, K } }, ["map:B"] = { data = bb, shape = { N, K } },
      ["ptr:C"] = ("\0"):rep(4 * M * N), ["dim:C:0"] = M, ["dim:C:1"] = N, ["stride:C:0"] = N, ["arg:K"] = K,
      ["arg:s"] = 0.5, ["programs:x"] = 2, ["programs:y"] = 2 }, "ptr:C")
    local dot = dot_nt(A, B, K)
    assert_result(out, M, N, function(i, j) return dot(i, j) * 0.5 - 1 end, true)
  end)

  it("programs along z (program_id(\"z\")): a batch of 3 GEMMs stacked along the rows, 2 x 64 x 64 x 72 each", function()
    tl.new_module()
    local k = tl.tile_kernel("batched", { params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2),
                                                     C = tl.tensor(tl.f32, 2), K = tl.i32 } })
    k:define(function(k, p)
      local m, n, z = tl.program_id("x"), tl.program_id("y"), tl.program_id("z")
      local acc = tl.for_tiles(p.K, { tile = 64, stages = 2 }, tl.zeros({ 64, 64 }, tl.f32), function(kk, acc)
        -- batch z's rows of A and B follow the batches before it (2 row tiles of A, 1 of B a batch)
        return tl.dot(tl.load(p.A, { m + z * 2, kk }, { 64, 64 }), tl.load(p.B, { n + z, kk }, { 64, 64 }), acc, { transpose_b = true })
      end)
      tl.store(p.C, { m + z * 2, n }, acc)
    end)
    local kop = lowered(k)
    assert.is_true(kop:attr("tileas.launch").programs_z)
    local Z, M, N, K = 3, 128, 64, 72
    local A, ab = matrix(Z * M, K, a_value)
    local B, bb = matrix(Z * N, K, b_value)
    local out = emulate(kop, 2, { ["map:A"] = { data = ab, shape = { Z * M, K } }, ["map:B"] = { data = bb, shape = { Z * N, K } },
      ["ptr:C"] = ("\0"):rep(4 * Z * M * N), ["dim:C:0"] = Z * M, ["dim:C:1"] = N, ["stride:C:0"] = N, ["arg:K"] = K,
      ["programs:x"] = 2, ["programs:y"] = 1, ["programs:z"] = Z }, "ptr:C")
    assert_result(out, Z * M, N, function(i, j)
      local z, s = i // M, 0
      for kk = 0, K - 1 do s = s + A[i * K + kk] * B[(z * N + j) * K + kk] end
      return s
    end, true)
  end)

  it("one consumer warpgroup (64-row tiles): Y = X . X^T, 136 x 136 x 72", function()
    tl.new_module()
    local k = tl.tile_kernel("xxt", { params = { X = tl.tensor(tl.bf16, 2), Y = tl.tensor(tl.bf16, 2), K = tl.i32 },
                                      cluster = { 1, 1, 1 } })
    k:define(function(k, p)
      local m, n = tl.program_id("x"), tl.program_id("y")
      local acc = tl.for_tiles(p.K, { tile = 64, stages = 2 }, tl.zeros({ 64, 64 }, tl.f32), function(kk, acc)
        return tl.dot(tl.load(p.X, { m, kk }, { 64, 64 }), tl.load(p.X, { n, kk }, { 64, 64 }), acc, { transpose_b = true })
      end)
      tl.store(p.Y, { m, n }, acc:cast(tl.bf16))
    end)
    local R, K = 136, 72
    local X, xb = matrix(R, K, a_value)
    local out = emulate(lowered(k), 2, { ["map:X"] = { data = xb, shape = { R, K } },
      ["map:Y"] = { bytes = R * R * 2, shape = { R, R } }, ["arg:K"] = K, ["programs:x"] = 3, ["programs:y"] = 3 }, "map:Y")
    assert_result(out, R, R, dot_nt(X, X, K))
  end)

  -- tileas-plan-cta on clusters of 2 for other tiles: 256 x 128 and 256 x 64 split
  -- M (128 rows a CTA, two consumers; B multicast), 128 x 64 M too (64 rows a
  -- CTA, one consumer), 128 x 128 N (64 columns a CTA, A multicast)
  for _, t in ipairs { { 256, 128 }, { 256, 64 }, { 128, 64 }, { 128, 128 } } do
    it(("a %d x %d program on a cluster of 2: Y = X . W^T, 300 x 200 x 72 on 2 clusters"):format(t[1], t[2]), function()
      tl.new_module()
      local k = tl.tile_kernel("xwt", { params = { X = tl.tensor(tl.bf16, 2), W = tl.tensor(tl.bf16, 2), Y = tl.tensor(tl.bf16, 2),
                                                   K = tl.i32 }, cluster = { 2, 1, 1 } })
      k:define(function(k, p)
        local m, n = tl.program_id("x"), tl.program_id("y")
        local acc = tl.for_tiles(p.K, { tile = 64, stages = 2 }, tl.zeros(t, tl.f32), function(kk, acc)
          return tl.dot(tl.load(p.X, { m, kk }, { t[1], 64 }), tl.load(p.W, { n, kk }, { t[2], 64 }), acc, { transpose_b = true })
        end)
        tl.store(p.Y, { m, n }, acc:cast(tl.bf16))
      end)
      local M, N, K = 300, 200, 72
      local X, xb = matrix(M, K, a_value)
      local W, wb = matrix(N, K, b_value)
      local out = emulate(lowered(k), 4, { ["map:X"] = { data = xb, shape = { M, K } }, ["map:W"] = { data = wb, shape = { N, K } },
        ["map:Y"] = { bytes = M * N * 2, shape = { M, N } }, ["arg:K"] = K, ["programs:x"] = (M + t[1] - 1) // t[1],
        ["programs:y"] = (N + t[2] - 1) // t[2] }, "map:Y")
      assert_result(out, M, N, dot_nt(X, W, K))
    end)
  end

  it("B stored K x N (the issue's tl.load(p.B, {kk, pid_n})): MN-major descriptors, B's stage in four 64 x 64 boxes", function()
    tl.new_module()
    local k = tl.tile_kernel("kn", { params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2), C = tl.tensor(tl.bf16, 2),
                                                K = tl.i32 }, cluster = { 1, 1, 1 } })
    k:define(function(k, p)
      local m, n = tl.program_id("x"), tl.program_id("y")
      local acc = tl.for_tiles(p.K, 64, tl.zeros({ 128, 256 }, tl.f32), function(kk, acc)
        return tl.dot(tl.load(p.A, { m, kk }, { 128, 64 }), tl.load(p.B, { kk, n }, { 64, 256 }), acc)
      end)
      tl.store(p.C, { m, n }, acc:cast(tl.bf16))
    end)
    local kop = lowered(k)
    assert.equal("!tile.tensor_map<bf16, sw128, 64, 64>", tostring(kop:region(1):entry():arg(2):type()))
    local M, N, K = 200, 296, 136
    local A, ab = matrix(M, K, a_value)
    local B, bb = matrix(K, N, function(kk, j) return b_value(j, kk) end)
    local out = emulate(kop, 2, { ["map:A"] = { data = ab, shape = { M, K } }, ["map:B"] = { data = bb, shape = { K, N } },
      ["map:C"] = { bytes = M * N * 2, shape = { M, N } }, ["arg:K"] = K, ["programs:x"] = 2, ["programs:y"] = 2 }, "map:C")
    assert_result(out, M, N, function(i, j)
      local s = 0
      for kk = 0, K - 1 do s = s + A[i * K + kk] * B[kk * N + j] end
      return s
    end)
  end)
end)

-- {=== row reductions in the epilogue: softmax(A . B^T * scale) of examples/tile_gemm_softmax.lua
-- The reference in doubles from the exact dot products (small integers); the
-- kernel's bf16 result within |got - want| <= (2^-8 + 2^-14) |want| + 2^-24:
-- bf16's rounding (half an ulp) and the f32 work's error (ex2, the order of sums).
describe("row reductions of the accumulator (softmax, examples/tile_gemm_softmax.lua)", function()
  local ex = softmax_example
  local function softmax_run(M, K, ctas, o)
    local A, ab = matrix(M, K, a_value)
    local B, bb = matrix(ex.N, K, b_value)
    local scale = 1 / 16
    local bm = o and o.bm or 128
    local out = emulate(lowered(ex.build(o)), ctas, {
      ["map:A"] = { data = ab, shape = { M, K } }, ["map:B"] = { data = bb, shape = { ex.N, K } },
      ["map:C"] = { bytes = M * ex.N * 2, shape = { M, ex.N } }, ["arg:K"] = K, ["arg:scale"] = scale,
      ["programs:x"] = (M + bm - 1) // bm, ["programs:y"] = 1 }, "map:C")
    local a, b = {}, {} -- 1-based, as the example's reference reads them
    for i = 0, M * K - 1 do a[i + 1] = A[i] end
    for i = 0, ex.N * K - 1 do b[i + 1] = B[i] end
    local bad, first, rows = 0, nil, {}
    for i = 0, M - 1 do
      local want = ex.reference(a, b, K, scale, i)
      for j = 0, ex.N - 1 do
        local got = from_bf16((string.unpack("<I2", out, 1 + 2 * (i * ex.N + j))))
        if not ex.close(got, want[j]) then
          bad = bad + 1
          first = first or ("[%d, %d] = %.8g, want %.8g"):format(i, j, got, want[j])
        end
        rows[i] = (rows[i] or 0) + got
      end
    end
    assert.equal(0, bad, first)
    for i = 0, M - 1 do assert.near(1, rows[i], 0.02) end -- every row sums to 1 (bf16 values)
  end

  for _, c in ipairs { { m = 128, k = 64, ctas = 1 }, { m = 200, k = 192, ctas = 2 }, { m = 200, k = 136, ctas = 1 } } do
    it(("%d x 256 x %d on %d persistent CTA(s): the CPU reference within bf16's rounding"):format(c.m, c.k, c.ctas), function()
      softmax_run(c.m, c.k, c.ctas)
    end)
  end

  -- tileas-plan-cta carries the CTA part through the reduce (along N, which it
  -- does not split), expand_dim and broadcast: each CTA reduces whole rows of its block
  it("a 256-row program on clusters of 2 (M split: 128 x 256 a CTA), 300 x 256 x 72 on 2 clusters", function()
    softmax_run(300, 72, 4, { cluster = 2, bm = 256 })
  end)

  it("reduces each row in registers: its quad's shuffles, ex2; PTX that ptxas takes", function()
    local k = ex.build()
    local ptx = k:compile()
    -- 2 reductions x 2 rows a thread x 2 shuffles (xor 1, 2)
    local n = 0
    for _ in ptx:gmatch "shfl%.sync%.bfly%.b32" do n = n + 1 end
    assert.equal(8, n)
    assert.matches("ex2.approx", ptx, 1, true)
    assert.matches("stmatrix.sync.aligned", ptx, 1, true)
    H.assert_ptxas(ptx)
  end)

  it("the protocol checker is clean on it (the ring wraps)", function()
    local M, K = 128, 256 -- 4 k blocks through 3 stages
    local _, ab = matrix(M, K, a_value)
    local _, bb = matrix(ex.N, K, b_value)
    assert_clean(lowered(ex.build()), 1, {
      ["map:A"] = { data = ab, shape = { M, K } }, ["map:B"] = { data = bb, shape = { ex.N, K } },
      ["map:C"] = { bytes = M * ex.N * 2, shape = { M, ex.N } }, ["arg:K"] = K, ["arg:scale"] = 0.0625,
      ["programs:x"] = 1, ["programs:y"] = 1 })
  end)

  it("is checked after every pass of tile-to-ptx, the nvvm stages too (their shfl.sync and ex2 modelled)", function()
    local saved = tl.options.check_protocol
    tl.options.check_protocol = true
    local ok, err = pcall(function() ex.build():compile() end)
    tl.options.check_protocol = saved
    assert(ok, err)
    local after = {}
    for _, e in ipairs(tl.last_check.log) do
      assert(not e.why or e.why:match "^unchanged", ("after %s: not checked: %s"):format(e.after, tostring(e.why)))
      assert(e.why or e.ok, e.after)
      if not e.why then after[e.after] = true end
    end
    assert.is_true(after["convert-tileas-to-cutlass"] and after["convert-tile-to-nvvm"] and after["tileas-materialize-agents"])
  end)

  -- what the lowering refuses, at the program's line
  local function program(fn)
    tl.new_module()
    local k = tl.tile_kernel("red", { params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2), C = tl.tensor(tl.f32, 2),
                                                 K = tl.i32 }, cluster = { 1, 1, 1 } })
    k:define(function(k, p)
      local m, _ = tl.program_id("x"), tl.program_id("y")
      local acc = tl.for_tiles(p.K, 64, tl.zeros({ 64, 256 }, tl.f32), function(kk, acc) -- one consumer
        return tl.dot(tl.load(p.A, { m, kk }, { 64, 64 }), tl.load(p.B, { 0, kk }, { 256, 64 }), acc)
      end)
      fn(p, m, acc)
    end)
    return k
  end
  local function line_of(fn) return debug.getinfo(fn, "S").linedefined end
  local bad = {
    { "a row spanning several program tiles along N (examples/tile_gemm_softmax.lua, row_tiles)", nil,
      "a reduce along dim 1 of a tile whose columns are one of several program tiles of the row %(the tiled_load of 'B' that gives them has a coordinate along them that depends on the program id%)" },
    { "a reduce along dim 0 (the rows of several warps; of two consumers tileas-materialize-agents refuses it)", function(p, m, acc)
        tl.store(p.C, { m, 0 }, acc - tl.expand_dim(tl.reduce(acc, 0, "add"), 0))
      end, "a reduce along dim 0 of the accumulator %(its rows are spread over warps and warpgroups%) is not lowered yet", 1 },
  }
  it("refuses a reduce of rows a cluster splits (N split: tileas-plan-cta gathers them), at the reduce's line", function()
    tl.new_module()
    local k = tl.tile_kernel("red2", { params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2), C = tl.tensor(tl.f32, 2),
                                                  K = tl.i32 }, cluster = { 2, 1, 1 } })
    local line
    k:define(function(k, p)
      local m = tl.program_id("x")
      local acc = tl.for_tiles(p.K, 64, tl.zeros({ 128, 256 }, tl.f32), function(kk, acc) -- split along N
        return tl.dot(tl.load(p.A, { m, kk }, { 128, 64 }), tl.load(p.B, { 0, kk }, { 256, 64 }), acc)
      end)
      line = debug.getinfo(1, "l").currentline + 1
      tl.store(p.C, { m, 0 }, acc - tl.expand_dim(tl.reduce(acc, 1, "max"), 1))
    end)
    local ok, err = pcall(k.compile, k)
    assert.is_false(ok)
    assert.matches(("tileas_lowering_spec.lua:%d: convert%%-tileas%%-to%%-cutlass: a reduce of a tile the cluster's CTAs split"):format(line), err)
  end)

  for _, b in ipairs(bad) do
    it(("refuses %s, at the program's line"):format(b[1]), function()
      local k = b[2] and program(b[2]) or ex.build { row_tiles = true }
      local ok, err = pcall(k.compile, k)
      assert.is_false(ok)
      local where = b[2] and ("tileas_lowering_spec.lua:%d"):format(line_of(b[2]) + b[4]) or "tile_gemm_softmax.lua:%d+"
      assert.matches(where .. ": convert%-tileas%-to%-cutlass: " .. b[3], err)
    end)
  end
end)
-- }===

describe("StreamK: the k loop split over workers (tl.tile_kernel's schedule)", function()
  -- A tile program of 64 x 64 tiles (one consumer warpgroup: the StreamK
  -- pieces then have one warpgroup a tile) with the schedule s (nil:
  -- persistent): Y = X . X^T + 1 in f32 (plain stores of the fragment).
  local function xxt(tile, K, s)
    tl.new_module()
    local k = tl.tile_kernel("xxt_sk", { params = { X = tl.tensor(tl.bf16, 2), Y = tl.tensor(tl.f32, 2) }, schedule = s })
    k:define(function(k, p)
      local m, n = tl.program_id("x"), tl.program_id("y")
      local acc = tl.for_tiles(K, { tile = 64, stages = 2 }, tl.zeros({ tile, tile }, tl.f32), function(kk, acc)
        return tl.dot(tl.load(p.X, { m, kk }, { tile, 64 }), tl.load(p.X, { n, kk }, { tile, 64 }), acc, { transpose_b = true })
      end)
      tl.store(p.Y, { m, n }, acc + 1.0)
    end)
    return k
  end

  -- the GEMM of examples/tile_gemm.lua (--schedule=...) and the X . X^T of 64 x 64 tiles,
  -- ragged, on several worker counts; each against the CPU and its persistent version
  local cases = {
    { m = 120, n = 500, k = 760, workers = 3, schedule = "streamk", splits = 2 },  -- 2 tiles of 12 k blocks: StreamK units
    { m = 200, n = 296, k = 256, workers = 8, schedule = "splitk", splits = 2 },   -- 4 tiles, 2 splits each
    { r = 136, k = 1000, workers = 2, splits = 2 },                               -- 9 tiles of 16 k blocks
    { r = 136, k = 1000, workers = 4, splits = 2 },
    { r = 136, k = 1000, workers = 7, splits = 2 },
  }
  local persistent = {} -- the persistent kernel's result, by problem
  for _, c in ipairs(cases) do
    local label = c.r and ("X . X^T (64 x 64 tiles, one consumer), %d x %d x %d"):format(c.r, c.r, c.k)
                  or ("tile_gemm --schedule=%s, %d x %d x %d"):format(c.schedule, c.m, c.n, c.k)
    it(("%s on %d workers: the CPU reference and the persistent kernel, bit for bit"):format(label, c.workers), function()
      local kop, ref, values, out, problem, build_persistent
      if c.r then
        local R, K = c.r, c.k
        local X, xb = matrix(R, K, a_value)
        local t = (R + 63) // 64
        kop = lowered(xxt(64, K, { kind = "streamk", programs = { t, t }, workers = c.workers }))
        values = { ["map:X"] = { data = xb, shape = { R, K } }, ["ptr:Y"] = ("\0"):rep(4 * R * R), ["dim:Y:0"] = R,
                   ["dim:Y:1"] = R, ["stride:Y:0"] = R, ["programs:x"] = t, ["programs:y"] = t }
        local dot = dot_nt(X, X, K)
        ref = { M = R, N = R, f32 = true, f = function(i, j) return dot(i, j) + 1 end }
        out, problem = "ptr:Y", ("xxt %d %d"):format(R, K)
        build_persistent = function() return xxt(64, K) end
      else
        local M, N, K = c.m, c.n, c.k
        local A, ab = matrix(M, K, a_value)
        local B, bb = matrix(N, K, b_value)
        kop = lowered(gemm_example.build { m = M, n = N, k = K, schedule = c.schedule, workers = c.workers })
        values = { ["map:A"] = { data = ab, shape = { M, K } }, ["map:B"] = { data = bb, shape = { N, K } },
                   ["map:C"] = { bytes = M * N * 2, shape = { M, N } }, ["arg:K"] = K,
                   ["programs:x"] = (M + 127) // 128, ["programs:y"] = (N + 255) // 256 }
        local dot = dot_nt(A, B, K) -- (the f32 sum is exact; C is it rounded to bf16)
        ref = { M = M, N = N, f = function(i, j) return from_bf16(bf16(dot(i, j))) end }
        out, problem = "map:C", ("gemm %d %d %d"):format(M, N, K)
        build_persistent = function() return gemm_example.build { m = M, n = N, k = K } end
      end
      local L = kop:attr "tileas.launch"
      assert.equal(c.workers, L.workers)
      assert.equal(c.schedule or "streamk", L.schedule)
      -- the plan splits some tile (the workspace holds its partial sums)
      local plan_splits = (L.workspace_bytes - 256) // ((c.r and 64 * 64 or 128 * 256) * 4 * values["programs:x"] * values["programs:y"]) + 1
      assert.equal(c.splits, plan_splits)
      values.workspace = { bytes = L.workspace_bytes }
      local got = emulate(kop, c.workers, values, out)
      assert_result(got, ref.M, ref.N, ref.f, ref.f32)
      persistent[problem] = persistent[problem] or emulate(lowered(build_persistent()), 2, values, out)
      assert.equal(persistent[problem], got)
    end)
  end

  it("the protocol checker is clean: a tile split over 2 workers (the fixup's counter), the ring wrapping", function()
    local M, N, K = 128, 256, 1024 -- 16 k blocks through 3 stages, 2 splits
    local kop = lowered(gemm_example.build { m = M, n = N, k = K, schedule = "streamk", workers = 2 })
    local L = kop:attr "tileas.launch"
    assert.is_true(L.workspace_bytes > 256)
    assert_clean(kop, 2, {
      ["map:A"] = { bytes = M * K * 2, shape = { M, K } }, ["map:B"] = { bytes = N * K * 2, shape = { N, K } },
      ["map:C"] = { bytes = M * N * 2, shape = { M, N } }, ["arg:K"] = K, ["programs:x"] = 1, ["programs:y"] = 1,
      workspace = { bytes = L.workspace_bytes } })
  end)

  it("compiles to PTX that ptxas takes: the fixup's generic barriers as stdlib/gemm.lua's StreamK GEMM has them", function()
    local k = gemm_example.build { m = 1000, n = 1480, k = 520, schedule = "streamk", workers = 132 }
    local ptx = k:compile()
    assert.matches("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", ptx, 1, true)
    local std = tl.gemm.build { m = 1000, n = 1480, k = 520, bn = 256, schedule = "streamk", sms = 132 }.kernel:compile()
    -- the final split waits for the others' partial sums (and resets the counter); the others arrive
    for _, ins in ipairs { "atom.gpu.global.cas.b32", "red.gpu.global.add.u32", "ld.global.v4.f32", "st.global.v4.f32" } do
      local n = select(2, ptx:gsub(ins:gsub("%.", "%%."), ""))
      assert.is_true(n > 0, ins)
      assert.equal(select(2, std:gsub(ins:gsub("%.", "%%."), "")), n, ins)
    end
    local kop = k:lowered_op()
    assert.same({ "map:A", "map:B", "map:C", "arg:K", "programs:x", "programs:y", "workspace" }, kop:attr "tileas.params")
    H.assert_ptxas(ptx)
  end)

  -- a kernel StreamK cannot split: the error at the line of the program that prevents it
  local function sk_program(body, s)
    tl.new_module()
    local k = tl.tile_kernel("sk", { params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2), C = tl.tensor(tl.bf16, 2), K = tl.i32 },
                                     schedule = s or { kind = "streamk", programs = { 2, 2 }, workers = 3 }, cluster = s and s.cluster })
    k:define(function(k, p)
      local m, n = tl.program_id("x"), tl.program_id("y")
      body(p, m, n)
    end)
    return k
  end
  local function dot(p, m, n, kk, acc)
    return tl.dot(tl.load(p.A, { m, kk }, { 128, 64 }), tl.load(p.B, { n, kk }, { 256, 64 }), acc)
  end
  local function line_of(fn) return debug.getinfo(fn, "S").linedefined end
  local bad = {
    { "a count of k blocks known at run time", function(p, m, n)
        local acc = tl.for_tiles(p.K, 64, tl.zeros({ 128, 256 }, tl.f32), function(kk, acc) return dot(p, m, n, kk, acc) end)
        tl.store(p.C, { m, n }, acc:cast(tl.bf16))
      end, "StreamK plans the split of the k loop at compile time: its count of k blocks must be a constant", 1 },
    { "an accumulator that does not start at zero", function(p, m, n)
        local acc = tl.for_tiles(640, 64, tl.full({ 128, 256 }, 1.0, tl.f32), function(kk, acc) return dot(p, m, n, kk, acc) end)
        tl.store(p.C, { m, n }, acc:cast(tl.bf16))
      end, "the k loop must carry one accumulator that starts at zero", 1 },
    { "a loop that scales its accumulator (not a sum)", function(p, m, n)
        local acc = tl.for_tiles(640, 64, tl.zeros({ 128, 256 }, tl.f32), function(kk, acc)
          return dot(p, m, n, kk, acc) * 0.5
        end)
        tl.store(p.C, { m, n }, acc:cast(tl.bf16))
      end, "the k loop may only add dot products to its accumulator %(then the epilogue after the loop%), found 'arith.mulf'", 2 },
  }
  for _, b in ipairs(bad) do
    it(("refuses %s, at the program's line"):format(b[1]), function()
      local k = sk_program(b[2])
      local ok, err = pcall(k.compile, k)
      assert.is_false(ok)
      assert.matches(("tileas_lowering_spec.lua:%d: convert%%-tileas%%-to%%-cutlass: .*"):format(line_of(b[2]) + b[4]) .. b[3], err)
    end)
  end
  it("refuses a cluster, and a schedule without its grid of programs", function()
    local k = gemm_example.build { m = 300, n = 400, k = 640, schedule = "streamk", cluster = 2 }
    local ok, err = pcall(k.compile, k)
    assert.is_false(ok)
    assert.matches("tile_gemm.lua:%d+: convert%-tileas%-to%-cutlass: StreamK on a cluster is not lowered", err)
    ok, err = pcall(sk_program, function() end, { kind = "streamk", workers = 4 })
    assert.is_false(ok)
    assert.matches("schedule.programs must be the grid of programs {x, y}", err, 1, true)
  end)
  it("refuses a plan the scheduler cannot make (tile ids past 32 bits) as the program's error", function()
    local k = gemm_example.build { m = 128 * 100000, n = 256 * 100000, k = 640, schedule = "streamk", workers = 132 }
    local ok, err = pcall(k.compile, k)
    assert.is_false(ok)
    assert.matches("tile_gemm.lua:%d+: convert%-tileas%-to%-cutlass: StreamK of 100000 x 100000 programs on 132 workers cannot be planned: too many tiles", err)
    assert.is_nil(err:find("stack traceback", 1, true))
  end)
end)

describe("launching a tile program", function()
  local fake = os.getenv "TILUA_FAKE_CUDA"
  it("takes device buffers with shapes for its tensors and builds the tensor maps (stand-in driver)", function()
    if tl.device.available() or not fake then pending("runs against the stand-in driver (ctest sets TILUA_FAKE_CUDA)") return end
    local out, err = H.tilua_env({ TILUA_LIBCUDA = fake }, { "-e", [[
      local tl = require "tilua"
      local ex = loadfile("examples/tile_gemm_bias_relu.lua")("--library")
      local k = ex.build()
      local M, N, K = 300, 400, 72
      local a, b = tl.device.alloc(tl.bf16, M * K), tl.device.alloc(tl.bf16, N * K)
      local c, bias = tl.device.alloc(tl.bf16, M * N), tl.device.alloc(tl.f32, N)
      k:run { grid = { 3, 2 }, args = { A = { a, { M, K } }, B = { buffer = b, shape = { N, K } }, C = { c, { M, N } },
                                        bias = { bias, { N } }, K = K } }
      local ok, err = pcall(k.launch, k, { grid = { 3, 2 }, args = { A = { a, { M, K } }, B = { b, { N, K } }, K = K } })
      print(ok, err)
      print("zgrid", pcall(k.launch, k, { grid = { 3, 2, 2 }, args = { A = { a, { M, K } }, B = { b, { N, K } },
                                          C = { c, { M, N } }, bias = { bias, { N } }, K = K } }))
      -- a cluster of 2: whole clusters of CTAs (launch refuses a grid that is not)
      local k2 = loadfile("examples/tile_gemm.lua")("--library").build { cluster = 2 }
      print("cluster", pcall(k2.run, k2, { grid = { 3, 2 }, args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { c, { M, N } }, K = K } }))
      -- launches on ever new buffers: the tensor maps kept stay bounded
      for _ = 1, 70 do
        k:launch { grid = { 3, 2 }, args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { tl.device.alloc(tl.bf16, M * N), { M, N } },
                                              bias = { bias, { N } }, K = K } }
      end
      local n = 0
      for _ in pairs(k._maps) do n = n + 1 end
      print("maps", n <= 64)
    ]] }, 600) -- (two compiles checked after every pass: about 20 s of CPU, minutes on a loaded machine)
    assert.matches("false%s+.-missing tensor 'C'", out, nil, err)
    assert.matches("zgrid%s+false%s+.-launch: tile kernel 'tile_gemm_bias_relu' does not read program_id%(\"z\"%): a grid of programs with z = 2 would run each of its programs 2 times", out, nil, err)
    assert.matches("cluster%s+true", out, nil, err)
    assert.matches("maps%s+true", out, nil, err)
  end)

  it("StreamK: on the workers it was planned for, the workspace allocated and zeroed once, only its grid of programs", function()
    if tl.device.available() or not fake then pending("runs against the stand-in driver (ctest sets TILUA_FAKE_CUDA)") return end
    local out, err = H.tilua_env({ TILUA_LIBCUDA = fake }, { "-e", [[
      local tl = require "tilua"
      local ex = loadfile("examples/tile_gemm.lua")("--library")
      local M, N, K = 300, 400, 1024
      local k = ex.build { m = M, n = N, k = K, schedule = "streamk", workers = 5 }
      local a, b, c = tl.device.alloc(tl.bf16, M * K), tl.device.alloc(tl.bf16, N * K), tl.device.alloc(tl.bf16, M * N)
      local args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { c, { M, N } }, K = K }
      k:run { grid = { 3, 2 }, args = args }
      local ws = k._workspace
      print("workspace", ws.bytes == k:lowered_op():attr("tileas.launch").workspace_bytes, ws:to_string():match("^%z+$") ~= nil)
      k:run { grid = { 3, 2 }, args = args }
      print("kept", k._workspace == ws)
      print("grid", pcall(k.run, k, { grid = { 2, 2 }, args = args }))
    ]] })
    assert.matches("workspace%s+true%s+true", out, nil, err)
    assert.matches("kept%s+true", out, nil, err)
    assert.matches("grid%s+false%s+.-launch: streamk kernel 'tile_gemm' was planned for a grid of programs {3, 2}, got {2, 2, 1}", out, nil, err)
  end)
end)
