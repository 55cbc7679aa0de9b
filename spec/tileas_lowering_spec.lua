-- From a tile program to a running Hopper GEMM (issue 12): tileas-assign-layouts,
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

-- tile-to-ptx's tileas part: its stages before the ptx pipeline
local TILEAS = "tileas-assign-layouts,tileas-dynamic-persistent,tileas-materialize-agents," ..
               "optimize-execution-unit-mapping,tileas-plan-cta,tileas-remove-buffer-alias," ..
               "tileas-remove-layout-conversions,tileas-slicing,tileas-prepare-for-scheduling," ..
               "tileas-resolve-agent-boundary,sink-negf-through-shapes,convert-tileas-to-cutlass"

local lowered = PH.lowered_tile -- the kernel the emulator runs

-- {=== inputs and the CPU reference (small integers: every sum exact)
local function bf16(x)
  local b = string.unpack("<I4", string.pack("<f", x))
  return ((b + 0x7fff + ((b >> 16) & 1)) >> 16) & 0xffff
end
local function from_bf16(h) return (string.unpack("<f", string.pack("<I4", h << 16))) end

local function inputs(M, N, K, with_bias)
  local A, B, ab, bb = {}, {}, {}, {}
  for i = 0, M - 1 do
    for k = 0, K - 1 do
      local v = ((i * 7 + k * 3) % 5) - 2
      A[i * K + k], ab[#ab + 1] = v, string.pack("<I2", bf16(v))
    end
  end
  for j = 0, N - 1 do
    for k = 0, K - 1 do
      local v = ((j * 5 + k * 11 + 1) % 3) - 1
      B[j * K + k], bb[#bb + 1] = v, string.pack("<I2", bf16(v))
    end
  end
  local bias, bs = {}, {}
  for j = 0, N - 1 do bias[j], bs[#bs + 1] = (j % 7) - 3, string.pack("<f", (j % 7) - 3) end
  local function want(i, j)
    local s = 0
    for k = 0, K - 1 do s = s + A[i * K + k] * B[j * K + k] end
    if with_bias then s = math.max(s + bias[j], 0) end
    return s
  end
  return { a = table.concat(ab), b = table.concat(bb), bias = table.concat(bs) }, want
end

-- The lowered kernel's arguments, by its tileas.params (as the launcher fills them).
local function emulator_args(kop, data, M, N, K)
  local args = {}
  for i, e in ipairs(kop:attr "tileas.params") do
    local kind, name, dim = e:match "^(%a+):([^:]*):?(%d*)$"
    local shape = ({ A = { M, K }, B = { N, K }, C = { M, N }, bias = { N } })[name]
    if kind == "map" then
      args[i] = name == "C" and { bytes = M * N * 2, shape = shape } or { data = data[name:lower()], shape = shape }
    elseif kind == "ptr" then args[i] = data[name]
    elseif kind == "dim" then args[i] = shape[tonumber(dim) + 1]
    elseif kind == "programs" then args[i] = name == "x" and (M + 127) // 128 or (N + 255) // 256
    elseif name == "K" then args[i] = K
    else error("unexpected parameter " .. e) end
  end
  return args
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
      local ok, log = tl.ptxas(ptx)
      if ok == nil then pending("ptxas not found: " .. log) return end
      assert(ok, log)
    end)
  end

  it("the lowered kernel's parameters: tensor maps with the boxes chosen, pointers with dims, the grid of programs", function()
    local k = fused_example.build()
    k:compile()
    local op = k:lowered_op()
    assert.same({ "map:A", "map:B", "map:C", "arg:K", "ptr:bias", "dim:bias:0", "programs:x", "programs:y" },
                op:attr "tileas.params")
    local types = {}
    for i, a in ipairs(op:region(1):entry():args()) do types[i] = tostring(a:type()) end
    assert.same({ "!tile.tensor_map<bf16, sw128, 128, 64>", "!tile.tensor_map<bf16, sw128, 256, 64>",
                  "!tile.tensor_map<bf16, sw128, 64, 64>", "i32", "ptr<f32, global>", "i32", "i32", "i32" }, types)
    assert.equal(384, op:kernel_spec().threads)
    assert.is_true(op:attr("tileas.launch").persistent)
  end)

  it("is the orchestration of stdlib/gemm.lua: the same TMA, wgmma, barrier and epilogue instructions", function()
    local function histogram(ptx)
      local h = {}
      for ins in ptx:gmatch "\n%s+([%a][%w_.:]*)" do
        if ins:match "^wgmma" or ins:match "^cp%.async" or ins:match "^mbarrier" or ins:match "^stmatrix"
           or ins:match "^setmaxnreg" or ins:match "^bar%." or ins:match "^fence" or ins:match "^elect" then
          h[ins] = (h[ins] or 0) + 1
        end
      end
      return h
    end
    local tile = histogram(gemm_example.build():compile())
    local g = tl.gemm.build { m = 4096, n = 4096, k = 4096, bn = 256, stages = 3, schedule = "persistent" }
    assert.same(histogram(g.kernel:compile()), tile)
  end)

  it("compiles from script to PTX in milliseconds", function()
    tl.options.compile_cache = false
    local best = math.huge
    for _ = 1, 5 do
      local t0 = os.clock()
      gemm_example.build():compile()
      best = math.min(best, (os.clock() - t0) * 1e3)
    end
    tl.options.compile_cache = nil
    assert.is_true(best < 50, ("%.1f ms"):format(best)) -- the target is 10 ms on a quiet machine (docs/PERF.md)
  end)
end)

describe("the lowered tile programs on the CPU emulator", function()
  local cases = {
    { ex = gemm_example, m = 128, n = 256, k = 128, ctas = 1 },                  -- one tile
    { ex = gemm_example, m = 300, n = 400, k = 72, ctas = 2 },                   -- edges, 6 tiles on 2 CTAs
    { ex = fused_example, m = 200, n = 296, k = 136, ctas = 3, bias = true },    -- bias, relu, edges
  }
  for _, c in ipairs(cases) do
    it(("%s, %d x %d x %d on %d persistent CTA(s): the CPU reference, bit for bit"):format(c.ex.name, c.m, c.n, c.k, c.ctas), function()
      local kop = lowered(c.ex.build())
      local data, want = inputs(c.m, c.n, c.k, c.bias)
      local r = tl.emulate(kop, { grid = c.ctas, args = emulator_args(kop, data, c.m, c.n, c.k), policy = "random", seed = 7 })
      assert(r.ok, r.report)
      local out, bad, first = r.read(3), 0, nil
      for i = 0, c.m - 1 do
        for j = 0, c.n - 1 do
          local got = from_bf16((string.unpack("<I2", out, 1 + 2 * (i * c.n + j))))
          if got ~= want(i, j) then
            bad = bad + 1
            first = first or ("C[%d, %d] = %g, want %g"):format(i, j, got, want(i, j))
          end
        end
      end
      assert.equal(0, bad, first)
    end)
  end
end)

describe("a tile program of one consumer warpgroup (64-row tiles) on the CPU emulator", function()
  it("Y = X . X^T, 136 x 136 x 72: the CPU reference, bit for bit", function()
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
    local kop = lowered(k)
    local R, K = 136, 72
    local data, want = inputs(R, R, K) -- X is A; B (the same values' layout) is ignored
    local args, y = {}, nil
    for i, e in ipairs(kop:attr "tileas.params") do
      if e == "map:Y" then y = i end
      args[i] = ({ ["map:X"] = { data = data.a, shape = { R, K } }, ["map:Y"] = { bytes = R * R * 2, shape = { R, R } },
                   ["arg:K"] = K, ["programs:x"] = 3, ["programs:y"] = 3 })[e]
    end
    local r = tl.emulate(kop, { grid = 2, args = args, policy = "random", seed = 3 })
    assert(r.ok, r.report)
    local A = {}
    for i = 0, R - 1 do for kk = 0, K - 1 do A[i * K + kk] = ((i * 7 + kk * 3) % 5) - 2 end end
    local out, bad = r.read(y), 0
    for i = 0, R - 1 do
      for j = 0, R - 1 do
        local s = 0
        for kk = 0, K - 1 do s = s + A[i * K + kk] * A[j * K + kk] end
        if from_bf16((string.unpack("<I2", out, 1 + 2 * (i * R + j)))) ~= s then bad = bad + 1 end
      end
    end
    assert.equal(0, bad)
  end)
end)

describe("B stored K x N (the issue's tl.load(p.B, {kk, pid_n})) on the CPU emulator", function()
  it("MN-major descriptors, a stage of B in four 64 x 64 boxes: the CPU reference, bit for bit", function()
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
    local M, N, K = 200, 296, 136
    local A, B, ab, bb = {}, {}, {}, {}
    for i = 0, M - 1 do
      for kk = 0, K - 1 do A[i * K + kk] = ((i * 7 + kk * 3) % 5) - 2; ab[#ab + 1] = string.pack("<I2", bf16(A[i * K + kk])) end
    end
    for kk = 0, K - 1 do
      for j = 0, N - 1 do B[kk * N + j] = ((j * 5 + kk * 11 + 1) % 3) - 1; bb[#bb + 1] = string.pack("<I2", bf16(B[kk * N + j])) end
    end
    local vals = { ["map:A"] = { data = table.concat(ab), shape = { M, K } }, ["map:B"] = { data = table.concat(bb), shape = { K, N } },
                   ["map:C"] = { bytes = M * N * 2, shape = { M, N } }, ["arg:K"] = K, ["programs:x"] = 2, ["programs:y"] = 2 }
    local args, c = {}, nil
    for i, e in ipairs(kop:attr "tileas.params") do
      args[i] = vals[e]
      if e == "map:C" then c = i end
    end
    assert.equal("!tile.tensor_map<bf16, sw128, 64, 64>", tostring(kop:region(1):entry():arg(2):type()))
    local r = tl.emulate(kop, { grid = 2, args = args, policy = "random", seed = 1 })
    assert(r.ok, r.report)
    local out, bad = r.read(c), 0
    for i = 0, M - 1 do
      for j = 0, N - 1 do
        local sum = 0
        for kk = 0, K - 1 do sum = sum + A[i * K + kk] * B[kk * N + j] end
        if from_bf16((string.unpack("<I2", out, 1 + 2 * (i * N + j)))) ~= sum then bad = bad + 1 end
      end
    end
    assert.equal(0, bad)
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
    ]] })
    assert.matches("false%s+.-missing tensor 'C'", out, nil, err)
  end)
end)
