-- Batched GEMMs as tile programs (examples/tile_gemm_batched.lua): rank-3
-- tensors whose tiles leave out the leading (batch) dim, indexed by
-- program_id("z"). tile-to-ptx gives rank-3 tensor maps with boxes {1, rows,
-- cols}, TMA copies with three coordinates, the persistent scheduler's
-- batches and the launch's programs_z; on the emulator the lowered kernel
-- computes every batch as the CPU does, bit for bit (small integers), on one
-- CTA and on a cluster of 2 splitting M; so does a program without a dot (a compute agent) on rank-3 tensors; the stand-in
-- driver takes a grid of programs with z.
local tl = require "tilua"
local H = dofile "spec/helper.lua"
local PH = dofile "spec/protocol_helper.lua"

local ex = assert(loadfile "examples/tile_gemm_batched.lua")("--library")

local function a_value(i, k) return ((i * 7 + k * 3) % 5) - 2 end
local function b_value(j, k) return ((j * 5 + k * 11 + 1) % 3) - 1 end

describe("a batched GEMM (rank-3 tensors, the batch by program_id(\"z\"))", function()
  it("lowers to rank-3 tensor maps and TMA copies of three coordinates; ptxas takes it", function()
    local k = ex.build()
    local ptx = k:compile()
    local kop = k:lowered_op()
    assert.is_true(kop:attr("tileas.launch").programs_z)
    local params = kop:attr "tileas.params"
    assert.same({ "map:A", "map:B", "map:C", "arg:K", "programs:x", "programs:y", "programs:z" }, params)
    local types = {}
    for i, a in ipairs(kop:region(1):entry():args()) do types[i] = tostring(a:type()) end
    assert.equal("!tile.tensor_map<bf16, sw128, 1, 128, 64>", types[1])
    assert.equal("!tile.tensor_map<bf16, sw128, 1, 256, 64>", types[2])
    assert.matches("cp.async.bulk.tensor.3d.shared::cluster.global", ptx, nil, true)
    local ok, log = tl.ptxas(ptx)
    if ok == nil then pending("ptxas not found: " .. log) return end
    assert(ok, log)
  end)

  it("3 batches of 130 x 100 x 72 on 2 persistent CTAs: the CPU reference, bit for bit", function()
    local k = ex.build()
    local kop = PH.lowered_tile(k)
    local Z, M, N, K = 3, 130, 100, 72
    local A, ab = PH.matrix(Z * M, K, a_value)
    local B, bb = PH.matrix(Z * N, K, b_value)
    local args, at = PH.params_args(kop, { ["map:A"] = { data = ab, shape = { Z, M, K } }, ["map:B"] = { data = bb, shape = { Z, N, K } },
      ["map:C"] = { bytes = Z * M * N * 2, shape = { Z, M, N } }, ["arg:K"] = K, ["programs:x"] = 2, ["programs:y"] = 1,
      ["programs:z"] = Z })
    local r = tl.emulate(kop, { grid = 2, args = args, policy = "random", seed = 3 })
    assert(r.ok, r.report)
    local out = r.read(at["map:C"])
    local bad, first = 0, nil
    for z = 0, Z - 1 do
      for i = 0, M - 1 do
        for j = 0, N - 1 do
          local s = 0
          for kk = 0, K - 1 do s = s + A[(z * M + i) * K + kk] * B[(z * N + j) * K + kk] end
          local got = string.unpack("<f", string.pack("<I4", (string.unpack("<I2", out, 1 + 2 * ((z * M + i) * N + j))) << 16))
          if got ~= s then
            bad = bad + 1
            first = first or ("C[%d, %d, %d] = %g, want %g"):format(z, i, j, got, s)
          end
        end
      end
    end
    assert.equal(0, bad, first)
  end)

  it("on a cluster of 2 (a 256-row program split along M after the batch coordinate): 2 batches of 200 x 100 x 64, bit for bit", function()
    tl.new_module()
    local k = tl.tile_kernel("batched_cluster", {
      params = { A = tl.tensor(tl.bf16, 3), B = tl.tensor(tl.bf16, 3), C = tl.tensor(tl.bf16, 3), K = tl.i32 }, cluster = { 2, 1, 1 } })
    k:define(function(k, p)
      local m, n, z = tl.program_id("x"), tl.program_id("y"), tl.program_id("z")
      local acc = tl.for_tiles(p.K, { tile = 64, stages = 3 }, tl.zeros({ 256, 128 }, tl.f32), function(kk, acc)
        return tl.dot(tl.load(p.A, { z, m, kk }, { 256, 64 }), tl.load(p.B, { z, n, kk }, { 128, 64 }), acc)
      end)
      tl.store(p.C, { z, m, n }, acc:cast(tl.bf16))
    end)
    local ok, log = tl.ptxas(k:compile())
    if ok ~= nil then assert(ok, log) end
    local kop = PH.lowered_tile(k)
    local Z, M, N, K = 2, 200, 100, 64
    local A, ab = PH.matrix(Z * M, K, a_value)
    local B, bb = PH.matrix(Z * N, K, b_value)
    local args, at = PH.params_args(kop, { ["map:A"] = { data = ab, shape = { Z, M, K } }, ["map:B"] = { data = bb, shape = { Z, N, K } },
      ["map:C"] = { bytes = Z * M * N * 2, shape = { Z, M, N } }, ["arg:K"] = K, ["programs:x"] = 1, ["programs:y"] = 1,
      ["programs:z"] = Z })
    local r = tl.emulate(kop, { grid = 2, args = args, policy = "random", seed = 3 })
    assert(r.ok, r.report)
    local out = r.read(at["map:C"])
    for z = 0, Z - 1 do
      for i = 0, M - 1 do
        for j = 0, N - 1 do
          local s = 0
          for kk = 0, K - 1 do s = s + A[(z * M + i) * K + kk] * B[(z * N + j) * K + kk] end
          local got = string.unpack("<f", string.pack("<I4", (string.unpack("<I2", out, 1 + 2 * ((z * M + i) * N + j))) << 16))
          if got ~= s then error(("C[%d, %d, %d] = %g, want %g"):format(z, i, j, got, s)) end
        end
      end
    end
  end)

  it("a program without a dot on rank-3 tensors (a compute agent): Y[z] = 2 X[z], tiles of 2 x 64 rows, on the emulator", function()
    tl.new_module()
    local k = tl.tile_kernel("scale3", { params = { X = tl.tensor(tl.bf16, 3), Y = tl.tensor(tl.f32, 3) }, num_warps = 4 })
    k:define(function(k, p)
      local r, z = tl.program_id("x"), tl.program_id("z")
      tl.store(p.Y, { z, r, 0 }, tl.load(p.X, { z, r, 0 }, { 2, 64 }):cast(tl.f32) * 2.0)
    end)
    k:compile()
    local kop = k:lowered_op()
    local Z, M, N = 3, 5, 50 -- rows no multiple of the tile's 2, N shorter than its 64
    local xs, xb = PH.matrix(Z * M, N, function(i, j) return (i * 3 + j) % 17 - 8 end)
    local vals = { ["ptr:X"] = xb, ["ptr:Y"] = ("\0"):rep(4 * Z * M * N), ["programs:x"] = (M + 1) // 2, ["programs:y"] = 1,
                   ["programs:z"] = Z }
    for _, t in ipairs { "X", "Y" } do
      vals["dim:" .. t .. ":0"], vals["dim:" .. t .. ":1"], vals["dim:" .. t .. ":2"] = Z, M, N
      vals["stride:" .. t .. ":0"], vals["stride:" .. t .. ":1"] = M * N, N
    end
    local args, at = PH.params_args(kop, vals)
    local r = tl.emulate(kop, { grid = (M + 1) // 2 * Z, args = args, policy = "random", seed = 4 })
    assert(r.ok, r.report)
    local out = r.read(at["ptr:Y"])
    for i = 0, Z * M * N - 1 do
      assert.equal(2 * xs[i // N * N + i % N], (string.unpack("<f", out, 1 + 4 * i)), ("Y element %d"):format(i))
    end
  end)

  it("launches with a grid of programs along z (stand-in driver)", function()
    local fake = os.getenv "TILUA_FAKE_CUDA"
    if tl.device.available() or not fake or fake == "" then pending("runs against the stand-in driver (ctest sets TILUA_FAKE_CUDA)") return end
    local out, err = H.tilua_env({ TILUA_LIBCUDA = fake }, { "-e", [[
      local tl = require "tilua"
      local ex = loadfile("examples/tile_gemm_batched.lua")("--library")
      local k = ex.build()
      local Z, M, N, K = 4, 300, 264, 72
      local a, b, c = tl.device.alloc(tl.bf16, Z * M * K), tl.device.alloc(tl.bf16, Z * N * K), tl.device.alloc(tl.bf16, Z * M * N)
      print("batched", pcall(ex.launch, k, a, b, c, Z, M, N, K))
    ]] }, 600) -- (a compile checked after every pass: seconds of CPU, minutes on a loaded machine)
    assert.matches("batched%s+true", out, nil, err)
  end)
end)
