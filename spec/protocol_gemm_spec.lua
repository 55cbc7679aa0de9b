-- The stdlib GEMM (stdlib/gemm.lua) on the CPU emulator: TMA tensor copies and
-- wgmma at the authoring level (lua/tilua/emulate_mma.lua). At tiny sizes the
-- emulated D matches a CPU reference bit for bit, the protocol checker finds
-- nothing wrong in its pipeline, and seeded bugs are caught with a
-- counterexample at this file's lines (docs/protocol.md, "TMA tensor copies
-- and wgmma").
local H = dofile "spec/helper.lua"
local tl = require "tilua"

-- The GEMM's kernel with its tile scheduler lowered, in a module of its own.
local PH = dofile "spec/protocol_helper.lua"
local ops = PH.ops
local BUILD_LINE = H.line_of("spec/protocol_gemm_spec.lua", "local g = " .. "tl.gemm.build") -- every op of the kernel is there
local function gemm(cfg)
  local g = tl.gemm.build(cfg) -- every op of the kernel is at this line
  return PH.lowered_gemm(g), g
end

local function f32(x) return (string.unpack("<f", string.pack("<f", x))) end
local function bf16(x) -- round to nearest even
  local b = string.unpack("<I4", string.pack("<f", x))
  return ((b + 0x7fff + ((b >> 16) & 1)) >> 16) & 0xffff
end
local function f16(x) -- the small integers of these tests only
  assert(x == math.floor(x) and math.abs(x) <= 2048)
  if x == 0 then return 0 end
  local s = x < 0 and 0x8000 or 0
  local m, e = math.frexp(math.abs(x))
  return s | ((e - 1 + 15) << 10) | math.tointeger((m * 2 - 1) * 1024)
end
local ENC = { bf16 = bf16, f16 = f16 }

-- Small integer inputs (every sum exact): A (M x K) and B (N x K) as values,
-- and the tensor-map arguments holding them K-major (or A K x M with am, B K x
-- N with bn: MN-major) and D.
local function inputs(M, N, K, dt, am, bm)
  local A, B, ab, bb = {}, {}, {}, {}
  local enc = ENC[dt]
  for i = 0, M - 1 do
    for k = 0, K - 1 do
      local v = ((i * 7 + k * 3) % 5) - 2
      A[i * K + k], ab[#ab + 1] = v, string.pack("<I2", enc(v))
    end
  end
  for j = 0, N - 1 do
    for k = 0, K - 1 do
      local v = ((j * 5 + k * 11 + 1) % 3) - 1
      B[j * K + k], bb[#bb + 1] = v, string.pack("<I2", enc(v))
    end
  end
  local function transpose(t, rows, cols) -- t: rows x cols of 2-byte strings -> cols x rows
    local o = {}
    for c = 0, cols - 1 do
      for r = 0, rows - 1 do o[#o + 1] = t[r * cols + c + 1] end
    end
    return o
  end
  if am then ab = transpose(ab, M, K) end
  if bm then bb = transpose(bb, N, K) end
  local args = { { data = table.concat(ab), shape = am and { K, M } or { M, K } },
                 { data = table.concat(bb), shape = bm and { K, N } or { N, K } },
                 { bytes = M * N * 2, shape = { M, N } } }
  return A, B, args
end

-- The reference with the emulator's f32 path: per k16 slice the exact dot
-- product added to the accumulator and rounded to f32, then D rounded to out.
local function reference(A, B, M, N, K, out)
  local t = {}
  for i = 0, M - 1 do
    for j = 0, N - 1 do
      local acc = 0.0
      for k0 = 0, K - 1, 16 do
        local dot = 0.0
        for k = k0, math.min(k0 + 15, K - 1) do dot = dot + A[i * K + k] * B[j * K + k] end
        acc = f32(acc + dot)
      end
      t[#t + 1] = string.pack("<I2", ENC[out](acc))
    end
  end
  return table.concat(t)
end

describe("the stdlib GEMM on the emulator", function()
  local shapes = {
    { m = 128, n = 128, k = 128, bn = 64, grid = 2 },                      -- two tiles along N
    { m = 128, n = 128, k = 128, bn = 128, grid = 1 },                     -- one tile, m64n128
    { m = 100, n = 72, k = 136, bn = 64, grid = 2 },                       -- edges: zero fill, clipped stores
    { m = 128, n = 64, k = 256, bn = 64, grid = 1, dtype = "f16", out = "f16" },
  }
  for _, s in ipairs(shapes) do
    local dt = s.dtype or "bf16"
    it(("matches the CPU reference bit for bit: %d x %d x %d, bn %d, %s, grid %d"):format(s.m, s.n, s.k, s.bn, dt, s.grid),
      function()
        local k, g = gemm { m = s.m, n = s.n, k = s.k, bn = s.bn, stages = 2, schedule = "data_parallel",
                            dtype = dt, out = s.out }
        assert.equal(s.grid, g.grid)
        local A, B, args = inputs(s.m, s.n, s.k, dt)
        local want = reference(A, B, s.m, s.n, s.k, s.out or "bf16")
        local nonzero = 0
        for i = 1, #want, 2 do if want:sub(i, i + 1) ~= "\0\0" then nonzero = nonzero + 1 end end
        assert.is_true(nonzero > #want // 4) -- the test sees data
        for _, p in ipairs { "round_robin", "random", "adversarial" } do
          local r = tl.emulate(k, { grid = g.grid, args = args, policy = p, seed = 5 })
          assert(r.ok, r.report)
          assert.is_true(r.read(3) == want, p .. ": D differs from the reference")
        end
      end)
  end

  -- the other shapes of the kernel: MN-major operands (transposed descriptors,
  -- 64 x 64 boxes), ping-pong consumers (two pipelines, seq_bar turns),
  -- persistent and split-K schedules (a workspace, generic barriers), a
  -- cluster of 2 (B multicast to both CTAs, stages released on both)
  local variants = {
    { a_major = "m", b_major = "n" },
    { consumers = "pingpong" },
    { schedule = "persistent" },
    { schedule = "persistent", sms = 1 },                         -- one CTA walks both tiles
    { schedule = "persistent", sms = 1, consumers = "pingpong" }, -- each warpgroup two of the four
    { schedule = "splitk", splits = 2 },
    { cluster = 2 },
  }
  for _, v in ipairs(variants) do
    local name = {}
    for key, x in pairs(v) do name[#name + 1] = key .. " = " .. tostring(x) end
    table.sort(name)
    it("matches the reference with " .. table.concat(name, ", "), function()
      local cfg = { m = 128, n = 128, k = 128, bn = 64, stages = 2, schedule = "data_parallel" }
      for key, x in pairs(v) do cfg[key] = x end
      local k, g = gemm(cfg)
      if v.sms then assert.equal(1, g.grid) end
      local A, B, args = inputs(128, 128, 128, "bf16", v.a_major == "m", v.b_major == "n")
      if #k:region(1):entry():args() == 4 then args[4] = { bytes = math.max(16, g.workspace_bytes) } end
      local r = tl.emulate(k, { grid = g.grid, args = args, policy = "random", seed = 11 })
      assert(r.ok, r.report)
      assert.is_true(r.read(3) == reference(A, B, 128, 128, 128, "bf16"))
    end)
  end

  it("needs the swizzle; an accumulator read before its wgmma_wait is an error", function()
    local k, g = gemm { m = 128, n = 64, k = 64, bn = 64, stages = 2, schedule = "data_parallel" }
    local A, B, args = inputs(128, 64, 64, "bf16")
    local want = reference(A, B, 128, 64, 64, "bf16")
    local r = tl.emulate(k, { grid = g.grid, args = args })
    assert(r.ok, r.report)
    assert.is_true(r.read(3) == want)
    -- descriptors without the swizzle read the TMA's swizzled stages wrongly
    local k2 = gemm { m = 128, n = 64, k = 64, bn = 64, stages = 2, schedule = "data_parallel" }
    for _, d in ipairs(ops(k2, "tile.wgmma_desc")) do d:set_attr("swizzle", 0) end
    r = tl.emulate(k2, { grid = g.grid, args = args })
    assert(r.ok, r.report)
    assert.is_false(r.read(3) == want)
    -- the accumulator read before its wgmma_wait is an error of its own
    ops(k, "tile.wgmma_wait")[2]:erase()
    r = tl.emulate(k, { grid = g.grid, args = args })
    assert.is_false(r.ok)
    assert.equal("wgmma", r.error.kind)
    assert.matches("reads the accumulator of the wgmma at [^ ]*spec/protocol_gemm_spec%.lua:" .. BUILD_LINE .. " before a wgmma_wait", r.report)
  end)
end)

describe("verify_protocol on the GEMM", function()
  local M, N, K = 128, 64, 256 -- 4 k blocks through 2 stages: the ring wraps twice
  local cfg = { m = M, n = N, k = K, bn = 64, stages = 2, schedule = "data_parallel" }
  local _, _, args = inputs(M, N, K, "bf16")

  it("reports nothing (every interleaving, one CTA)", function()
    local k = gemm(cfg)
    local c = tl.verify_protocol(k, { grid = 1, args = args, max_states = 20000 })
    assert(c.ok, c.report)
    assert.is_true(c.min_phases >= 2)
    assert.is_true(c.states > 100)
  end)

  -- two CTAs: two tiles along N (independent CTAs, checked one after the
  -- other), and a cluster of 2 along M (B multicast, stages released on both)
  local two = {
    { name = "grid 2", cfg = { m = 128, n = 128, k = 256, bn = 64, stages = 2, schedule = "data_parallel" } },
    { name = "a cluster of 2", cfg = { m = 256, n = 64, k = 256, bn = 64, stages = 2, schedule = "data_parallel", cluster = 2 } },
  }
  for _, t in ipairs(two) do
    it("reports nothing on two CTAs: " .. t.name, function()
      local k, g = gemm(t.cfg)
      assert.equal(2, g.grid)
      local _, _, a = inputs(t.cfg.m, t.cfg.n, t.cfg.k, "bf16")
      local c = tl.verify_protocol(k, { grid = g.grid, args = a, max_states = 20000 })
      assert(c.ok, c.report)
      assert.is_true(c.min_phases >= 2)
    end)
  end

  it("catches a cluster CTA that may exit while its peer still releases into it", function()
    -- producer_tail (which waits for every remote release) and the final cluster sync deleted
    local t = two[2]
    local k, g = gemm(t.cfg)
    ops(k, "cutlass.pipeline.producer_tail")[1]:erase()
    local a, w = ops(k, "tile.cluster_arrive"), ops(k, "tile.cluster_wait")
    a[#a]:erase()
    w[#w]:erase()
    local _, _, args2 = inputs(t.cfg.m, t.cfg.n, t.cfg.k, "bf16")
    local c = tl.verify_protocol(k, { grid = g.grid, args = args2 })
    assert.is_false(c.ok, "the mutant passed")
    assert.equal("dsmem", c.violation.kind, c.report)
    assert.matches("which has exited (a missing cluster barrier before the exit)", c.report, 1, true)
  end)

  it("catches two CTAs storing one tile (the TMA store's column made CTA 0's)", function()
    local t = two[1] -- two tiles along N, one per CTA
    local k, g = gemm(t.cfg)
    for _, st in ipairs(ops(k, "tile.tma_store")) do
      local n = st:noperands() -- the innermost coordinate, D's column: 0 in both CTAs
      local v = st:operand(n)
      local zero = tl.core.op_create(tl.context(), "arith.constant", {}, { v:type() },
                                     { value = tl.core.attr_int(0, v:type()) }, 0, nil, st, nil)
      st:set_operand(n, zero:result(1))
    end
    local _, _, a = inputs(t.cfg.m, t.cfg.n, t.cfg.k, "bf16")
    local c = tl.verify_protocol(k, { grid = g.grid, args = a })
    assert.is_false(c.ok, "the mutant passed")
    assert.equal("overwrite", c.violation.kind, c.report)
    assert.matches("tma store %(from [%w_]+ warp %d+ %(CTA 1%)%) at [^ ]+ writes global bytes %[0x%x+, 0x%x+%) that tma store %(from [%w_]+ warp %d+ %(CTA 0%)%)", c.report)
  end)

  local mutants = {
    { name = "the consumer's wait for a full stage deleted", kind = "unfilled",
      seed = function(k) ops(k, "cutlass.pipeline.consumer_wait")[2]:erase() end,
      msg = "reads shared bytes" },
    { name = "expect_tx 16 bytes short", kind = "tx_bytes",
      seed = function(k)
        local p = ops(k, "cutlass.pipeline.init")[1]
        p:set_attr("transaction_bytes", p:attr "transaction_bytes" - 16)
      end, msg = "tx-count of -16 bytes" },
    { name = "the stage released while its wgmma is in flight (wgmma_wait 1 made 2)", kind = "unfilled",
      seed = function(k) ops(k, "tile.wgmma_wait")[1]:set_attr("pending", 2) end,
      msg = "that tma load" },
    { name = "the mainloop's wgmma_wait deleted", kind = "unfilled",
      seed = function(k) ops(k, "tile.wgmma_wait")[1]:erase() end, msg = "that tma load" },
  }
  for _, mu in ipairs(mutants) do
    it("catches " .. mu.name, function()
      local k = gemm(cfg)
      mu.seed(k)
      local c = tl.verify_protocol(k, { grid = 1, args = args, max_states = 20000 })
      assert.is_false(c.ok, "the mutant passed")
      assert.equal(mu.kind, c.violation.kind, c.report)
      assert.matches(mu.msg, c.report, 1, true)
      assert.matches("spec/protocol_gemm_spec.lua:" .. BUILD_LINE, c.report, 1, true)
      assert.is_true(#c.trace > 0)
    end)
  end
end)
