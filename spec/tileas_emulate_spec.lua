-- The emulator's model of tile programs (lua/tilua/emulate/models/tileas.lua,
-- docs/protocol.md "Tile programs"): tl.emulate on a tile kernel gives the
-- result bytes at every stage of tile-to-ptx's tileas part, equal to a plain
-- Lua reference and to the lowered kernel's emulation (small integers: every
-- sum exact); the ops one by one; a race between two programs storing one
-- tile; the check after every pass on the tile examples, every stage logged.
local H = dofile "spec/helper.lua"
local tl = require "tilua"
local PH = dofile "spec/protocol_helper.lua"
local P = require "tilua.emulate.protocol"

local gemm_example = assert(loadfile "examples/tile_gemm.lua")("--library")
local fused_example = assert(loadfile "examples/tile_gemm_bias_relu.lua")("--library")

local bf16, matrix = PH.bf16, PH.matrix
local function f32s(t) return H.pack("<f", t) end -- a list of numbers -> f32 bytes
local read_f32 = H.f32s

local stage_kernel = PH.stage_kernel

describe("tile programs on the emulator (tileas)", function()
  local M, N, K = 130, 260, 200 -- edges along M and N, 4 k blocks (a ring of 3 wraps)
  local A, ab = matrix(M, K, function(i, k) return ((i * 7 + k * 3) % 5) - 2 end)
  local B, bb = matrix(N, K, function(j, k) return ((j * 5 + k * 11 + 1) % 3) - 1 end)
  local bias = {}
  for j = 0, N - 1 do bias[j + 1] = (j % 7) - 3 end
  local function want(i, j, fused)
    local s = 0
    for k = 0, K - 1 do s = s + A[i * K + k] * B[j * K + k] end
    return bf16(fused and math.max(s + bias[j + 1], 0) or s)
  end
  local problem = { A = { data = ab, shape = { M, K } }, B = { data = bb, shape = { N, K } },
                    C = { bytes = M * N * 2, shape = { M, N } }, K = K, bias = { data = f32s(bias), shape = { N } } }

  for _, c in ipairs { { ex = gemm_example }, { ex = fused_example, fused = true } } do
    it(c.ex.name .. ": every tileas stage computes the plain reference, bit for bit, and the lowered kernel's bytes", function()
      local k = c.ex.build()
      local lowered
      do -- the lowered kernel on the emulator, its parameters as the launcher fills them
        local kop = PH.lowered_tile(k)
        local values = { ["map:A"] = problem.A, ["map:B"] = problem.B, ["map:C"] = problem.C, ["arg:K"] = K,
                         ["ptr:bias"] = problem.bias.data, ["dim:bias:0"] = N, ["programs:x"] = 2, ["programs:y"] = 2 }
        local args = PH.params_args(kop, values)
        local r = tl.emulate(kop, { grid = 2, args = args, policy = "random", seed = 5 })
        assert(r.ok, r.report)
        lowered = r.read(3)
      end
      for _, stage in ipairs { "input", "tileas-dynamic-persistent", "tileas-materialize-agents", "sink-negf-through-shapes" } do
        local r = tl.emulate(stage_kernel(k, stage), { grid = { 2, 2 }, workers = 2, args = problem, policy = "random", seed = 3 })
        assert(r.ok, r.report)
        local out, bad, first = r.read(3), 0, nil
        for i = 0, M - 1 do
          for j = 0, N - 1 do
            local got = string.unpack("<I2", out, 1 + 2 * (i * N + j))
            if got ~= want(i, j, c.fused) then
              bad, first = bad + 1, first or ("%s: [%d, %d] = %04x, want %04x"):format(stage, i, j, got, want(i, j, c.fused))
            end
          end
        end
        assert.equal(0, bad, first)
        assert.equal(lowered, out, stage)
      end
    end)
  end

  it("dynamic claims (claims = \"dynamic\"): any worker may get any program; the same bytes, every order checked", function()
    local kop = stage_kernel(gemm_example.build(), "tileas-materialize-agents")
    local C
    for seed = 1, 3 do
      local r = tl.emulate(kop, { grid = { 2, 2 }, workers = 2, claims = "dynamic", args = problem, policy = "random", seed = seed })
      assert(r.ok, r.report)
      C = C or r.read(3)
      assert.equal(C, r.read(3))
    end
    assert.equal(string.unpack("<I2", C, 1), want(0, 0)) -- (the static schedule's bytes: the test above)
    local args = { A = { bytes = 2 * 256 * 384, shape = { 256, 384 } }, B = { bytes = 2 * 512 * 384, shape = { 512, 384 } },
                   C = { bytes = 2 * 256 * 512, shape = { 256, 512 } }, K = 384 }
    local static = tl.verify_protocol(kop, { grid = { 2, 2 }, workers = 2, args = args })
    local dynamic = tl.verify_protocol(kop, { grid = { 2, 2 }, workers = 2, claims = "dynamic", args = args })
    assert(static.ok, static.report)
    assert(dynamic.ok, dynamic.report)
    assert.is_true(dynamic.runs > static.runs) -- the orders of the workers' claims explored
  end)

  -- one kernel per op: out = f(x) for a 4 x 8 f32 tile x of the values given
  local function run_op(body, out_shape, xs, extra)
    tl.new_module()
    local k = tl.tile_kernel("op", { params = { X = tl.tensor(tl.f32, 2), Y = tl.tensor(tl.f32, #out_shape) } })
    k:define(function(_, p)
      local x = tl.load(p.X, { 0, 0 }, { 4, 8 })
      tl.store(p.Y, #out_shape == 1 and { 0 } or { 0, 0 }, body(x, p))
    end)
    local n = 1
    for _, d in ipairs(out_shape) do n = n * d end
    local r = tl.emulate(k, { args = { X = { data = f32s(xs), shape = { 4, 8 } },
                                       Y = { bytes = 4 * n, shape = out_shape } }, grid = extra })
    assert(r.ok, r.report)
    return read_f32(r.read(2))
  end
  local xs = {}
  for i = 1, 32 do xs[i] = (i * 3) % 7 - 3 end
  local function x_at(i, j) return xs[i * 8 + j + 1] end

  it("models the compute ops: splat, math, reduce, broadcast, expand_dim, extract_slice, extract, elementwise arith", function()
    local y = run_op(function(x) return tl.abs(x) * 2.0 + tl.full({ 4, 8 }, 1.0, tl.f32) end, { 4, 8 }, xs)
    for i = 1, 32 do assert.equal(math.abs(xs[i]) * 2 + 1, y[i]) end
    y = run_op(function(x) return tl.exp2(x) end, { 4, 8 }, xs)
    for i = 1, 32 do assert.equal(2.0 ^ xs[i], y[i]) end
    y = run_op(function(x) return tl.reduce(x, 1, "add") end, { 4 }, xs)
    for i = 0, 3 do
      local s = 0
      for j = 0, 7 do s = s + x_at(i, j) end
      assert.equal(s, y[i + 1])
    end
    y = run_op(function(x) return tl.reduce(x, 0, "max") end, { 8 }, xs)
    for j = 0, 7 do assert.equal(math.max(x_at(0, j), x_at(1, j), x_at(2, j), x_at(3, j)), y[j + 1]) end
    -- a row broadcast down the rows (expand_dim, broadcast), a slice, select on a comparison
    y = run_op(function(x) return tl.broadcast(tl.expand_dim(tl.reduce(x, 0, "min"), 0), { 4, 8 }) end, { 4, 8 }, xs)
    for i = 0, 3 do for j = 0, 7 do
      assert.equal(math.min(x_at(0, j), x_at(1, j), x_at(2, j), x_at(3, j)), y[i * 8 + j + 1])
    end end
    y = run_op(function(x) return tl.extract_slice(x, { 1, 2 }, { 2, 4 }) end, { 2, 4 }, xs)
    for i = 0, 1 do for j = 0, 3 do assert.equal(x_at(i + 1, j + 2), y[i * 4 + j + 1]) end end
    y = run_op(function(x) return tl.select(x:lt(0.0), -x, tl.maximum(x, 1.0)) end, { 4, 8 }, xs)
    for i = 1, 32 do assert.equal(xs[i] < 0 and -xs[i] or math.max(xs[i], 1), y[i]) end
    y = run_op(function(x) return tl.full({ 4, 8 }, tl.extract(x, { 2, 5 }), tl.f32) end, { 4, 8 }, xs)
    for i = 1, 32 do assert.equal(x_at(2, 5), y[i]) end
  end)

  it("models dot (negate and transpose flags, f32 accumulation), shared tensors, copy and convert_layout", function()
    -- x [4, 8] . x^T [8, 4] (transpose_b), negated, plus 1
    local y = run_op(function(x)
      local s = tl.alloc_tensor({ 4, 8 }, tl.f32)
      tl.copy(x, s)
      local r = tl.convert_layout(s, { kind = "blocked", warps = { 4, 1 } }, "rmem")
      return tl.dot(r, x, tl.full({ 4, 4 }, 1.0, tl.f32), { transpose_b = true, negate_a = true })
    end, { 4, 4 }, xs)
    for i = 0, 3 do for j = 0, 3 do
      local s = 0
      for k = 0, 7 do s = s + x_at(i, k) * x_at(j, k) end
      assert.equal(1 - s, y[i * 4 + j + 1])
    end end
  end)

  it("models dot's transpose_a and negate_b, and subf, divf, minimumf, truncf, extf on tiles", function()
    -- x^T [8, 4] given as x [4, 8] (transpose_a) times -x [4, 8]: [8, 8]
    local y = run_op(function(x)
      return tl.dot(x, x, tl.zeros({ 8, 8 }, tl.f32), { transpose_a = true, negate_b = true })
    end, { 8, 8 }, xs)
    for i = 0, 7 do for j = 0, 7 do
      local s = 0
      for k = 0, 3 do s = s + x_at(k, i) * x_at(k, j) end
      assert.equal(-s, y[i * 8 + j + 1])
    end end
    y = run_op(function(x) return tl.minimum((x - 0.5) / 4.0, 0.25) end, { 4, 8 }, xs)
    for i = 1, 32 do assert.equal(math.min((xs[i] - 0.5) / 4, 0.25), y[i]) end
    -- through bf16 and back: 1/3 rounds to bf16's 8 bits of mantissa
    y = run_op(function(x) return (x / 3.0):cast(tl.bf16):cast(tl.f32) end, { 4, 8 }, xs)
    for i = 1, 32 do
      local v = string.unpack("<f", string.pack("<f", xs[i] / 3))
      local b = string.unpack("<I4", string.pack("<f", v))
      b = ((b + 0x7fff + ((b >> 16) & 1)) >> 16) << 16
      assert.equal((string.unpack("<f", string.pack("<I4", b))), y[i])
    end
  end)

  it("takes tileas.pragma for a knob, not for a tile program (a lowered kernel keeps it)", function()
    tl.new_module()
    local k = tl.kernel("inc", { params = { { "x", tl.ptr(tl.i32) } }, block = 64 })
    k:define(function(_, p)
      tl.op("tileas.pragma", {}, {}, { text = "FenceCode" })
      local i = tl.thread_id "x"
      ;(p.x + i):store((p.x + i):load() + 1)
    end)
    local r = tl.emulate(k, { args = { string.rep("\0", 256) } })
    assert(r.ok, r.report)
    assert.equal(string.rep(string.pack("<i4", 1), 64), r.read(1)) -- every thread of 2 warps ran
  end)

  it("reads zeros past a tensor's edge and drops stores past it; program ids", function()
    tl.new_module()
    local k = tl.tile_kernel("edge", { params = { X = tl.tensor(tl.f32, 2), Y = tl.tensor(tl.f32, 2) } })
    k:define(function(_, p)
      local x = tl.load(p.X, { tl.program_id("x"), tl.program_id("y") }, { 2, 4 })
      tl.store(p.Y, { tl.program_id("x"), tl.program_id("y") }, x + 1.0)
    end)
    local vals = {}
    for i = 1, 15 do vals[i] = i end -- 3 x 5
    local r = tl.emulate(k, { grid = { 2, 2 }, args = { X = { data = f32s(vals), shape = { 3, 5 } },
                                                       Y = { bytes = 60, shape = { 3, 5 } } } })
    assert(r.ok, r.report)
    local y = read_f32(r.read(2))
    for i = 1, 15 do assert.equal(vals[i] + 1, y[i]) end -- every element by one of 4 programs, none past the edge
  end)

  it("reports two programs storing one tile (a race between programs), with the inputs given and on the derived problem", function()
    tl.new_module()
    local k = tl.tile_kernel("same_tile", { params = { X = tl.tensor(tl.f32, 2), Y = tl.tensor(tl.f32, 2) } })
    k:define(function(_, p)
      tl.store(p.Y, { 0, 0 }, tl.load(p.X, { tl.program_id("x"), 0 }, { 2, 4 })) -- every program the same tile
    end)
    local c = tl.verify_protocol(k, { grid = { 2, 1 }, args = { X = { bytes = 64, shape = { 4, 4 } },
                                                                Y = { bytes = 64, shape = { 4, 4 } } } })
    assert.is_false(c.ok)
    assert.equal("overwrite", c.violation.kind)
    assert.matches("program warp 0 %(CTA %d%) at .* writes global bytes .* that program warp 0 %(CTA %d%) wrote", c.violation.message)
    -- the derived problem (2 programs) finds it too
    local r = P.check(k.op, {})
    assert.is_false(r.ok)
    assert.equal("overwrite", r.violation.kind)
    assert.equal(2, r.grid)
    -- and the REPL's :replay replays it (the grid of programs kept)
    local frames = P.replay(k.op, r)
    assert.matches("^overwrite: program warp 0 %(CTA 1%)", frames.outcome)
  end)

  it("refuses to derive a problem past its bounds (huge tiles, a StreamK plan of too many programs) instead of allocating it", function()
    tl.new_module()
    local k = tl.tile_kernel("huge", { params = { X = tl.tensor(tl.f32, 2), Y = tl.tensor(tl.f32, 2) } })
    k:define(function(_, p)
      local pm = tl.program_id("x")
      tl.store(p.Y, { pm, 0 }, tl.load(p.X, { pm, 0 }, { 4096, 4096 })) -- the most a tile holds: 2^24 elements
    end)
    local ok, err = pcall(P.check, k.op, {})
    assert.is_false(ok)
    assert.matches("tensor 'X' of the derived problem would take 268435456 bytes", err, 1, true)
    local big = gemm_example.build { m = 128 * 9, n = 256 * 8, k = 640, schedule = "streamk", workers = 4 }
    ok, err = pcall(P.check, big.op, {})
    assert.is_false(ok)
    assert.matches("planned for 9 x 8 programs: more than the 64 programs a check runs", err, 1, true)
    -- a pipelined loop's stages that are not a count (textual IR can say anything)
    local g = gemm_example.build {}
    g.op:walk(function(op) if op:attr "tileas.pipeline" then op:set_attr("tileas.pipeline", { stages = 1e308 }) end end)
    ok, err = pcall(P.check, g.op, {})
    assert.is_false(ok)
    assert.matches("tileas.pipeline's stages must be an integer from 1 to 16, got 1e+308", err, 1, true)
  end)

  it("checks the rings' implied handoff: clean, every ring twice around; a ring the producer no longer fills deadlocks", function()
    local kop = stage_kernel(gemm_example.build(), "tileas-materialize-agents")
    local c = P.check(kop, {})
    assert(c.ok, c.report)
    assert.is_true(c.min_phases >= 2) -- every ring twice around
    -- the producer's copies into the B ring dropped: the consumers wait forever
    for _, op in ipairs(PH.ops(kop, "tileas.copy")) do
      if op:operand(2):type():info().shape[1] == 256 then op:erase() end
    end
    c = P.check(kop, {})
    assert.is_false(c.ok)
    assert.equal("deadlock", c.violation.kind, c.report)
  end)

  it("reports two consumer agents storing the same rows (the replica index of the second made 0)", function()
    local kop = stage_kernel(gemm_example.build(), "tileas-materialize-agents")
    local n = 0
    for _, op in ipairs(PH.ops(kop, "arith.constant")) do
      if op:attr "tileas.replica" and op:attr "value" == 1 then
        op:set_attr("value", 0)
        n = n + 1
      end
    end
    assert.equal(1, n)
    local c = P.check(kop, {})
    assert.is_false(c.ok)
    assert.equal("overwrite", c.violation.kind, c.report)
    assert.matches("consumer agent %d .* writes global bytes .* that consumer agent %d .* wrote", c.violation.message)
  end)
end)

describe("the check after every pass on tile programs", function()
  -- the examples as ctest runs them (TILUA_CHECK_PROTOCOL=1): the tile program
  -- checked on its input and after every pass of tile-to-ptx that changed it,
  -- every ring twice around, each check under 2 s (about 0.3 s: a loaded box), none skipped
  for _, c in ipairs { { "tile_gemm" }, { "tile_gemm_bias_relu" }, { "tile_gemm", "--cluster=2" } } do
    local ex = c[1]
    it(("checks examples/%s.lua%s at every stage, every ring twice around"):format(ex, c[2] and " " .. c[2] or ""), function()
      local log = os.tmpname()
      local _, err, code = H.tilua_env({ TILUA_CHECK_PROTOCOL = "1", TILUA_CHECK_PROTOCOL_LOG = log,
                                         TILUA_NO_GPU_EXIT = "77" }, { "examples/" .. ex .. ".lua", c[2] }, 300)
      assert(code == 0 or code == 77, err)
      local checked, skipped = {}, {}
      for line in H.slurp(log):gmatch "[^\n]+" do
        local name, after, what, a, b, _, secs = line:match "^([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t?([^\t]*)\t?([^\t]*)\t?([^\t]*)"
        assert.equal(ex, name)
        if what == "checked" then
          checked[#checked + 1] = after
          assert.is_true(tonumber(b) >= 2, after)
          assert.is_true(tonumber(secs:match "[%d.]+") < 2, after .. ": " .. secs)
        elseif a ~= "unchanged, or skipped before" then
          skipped[#skipped + 1] = after
          assert(a:find("is not modelled", 1, true), ("%s skipped: %s"):format(after, a))
        end
      end
      os.remove(log)
      for _, stage in ipairs { "input", "tileas-assign-layouts", "tileas-dynamic-persistent", "tileas-materialize-agents",
                               "optimize-execution-unit-mapping", "convert-tileas-to-cutlass", "lower-tile-scheduler",
                               "convert-cutlass-to-nvvm", "convert-tile-to-nvvm", "tileas-insert-OCG-knobs" } do
        assert.is_truthy(table.concat(checked, ","):find(stage, 1, true), stage .. " not checked: " .. table.concat(checked, ","))
      end
      assert.are.same({}, skipped) -- the whole of tile-to-ptx (the nvvm stages: emulate_nvvm_mma.lua)
    end)
  end
end)
