-- The stdlib GEMM (stdlib/gemm.lua) on the CPU emulator: TMA tensor copies and
-- wgmma at the authoring level (emulate/models/mma.lua). At tiny sizes the
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
local function gemm(cfg, pipeline)
  local g = tl.gemm.build(cfg) -- every op of the kernel is at this line
  return PH.lowered_gemm(g, pipeline), g
end

local function f32(x) return (string.unpack("<f", string.pack("<f", x))) end
local bf16 = PH.bf16 -- round to nearest even
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

-- GEMM kernel k on the emulator (g's grid) under each of `policies` (seed):
-- D (argument 3) is want, byte for byte.
local function assert_policies(k, g, args, want, policies, seed)
  for _, p in ipairs(policies) do
    local r = tl.emulate(k, { grid = g.grid, args = args, policy = p, seed = seed })
    assert(r.ok, r.report)
    assert.is_true(r.read(3) == want, p .. ": D differs from the reference")
  end
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
        assert_policies(k, g, args, want, { "round_robin", "random", "adversarial" }, 5)
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
    { cluster = { 1, 2 } },                                       -- along N: A multicast
    { cluster = { 2, 2 } },                                       -- A and B multicast (tiles overhang along M)
    { bm = 256 },                                                 -- two warpgroups of two 64-row slices
    { bm = 256, wgs = 4 },                                        -- four warpgroups of one slice
    { bm = 192 },                                                 -- three warpgroups (rows past M zero)
    { bm = 320 },                                                 -- two warpgroups of 2 and 3 slices
    { consumers = "pingpong", bm = 64 },                          -- a 64-row tile per warpgroup
    -- ping-pong in a cluster (pipeline mode pingpong_cluster): one ring, each
    -- stage released on every CTA by the warpgroup whose tile it holds
    { consumers = "pingpong", cluster = 2 },                      -- B multicast (overhang along M)
    { consumers = "pingpong", bm = 64, cluster = 2, schedule = "persistent", sms = 2 },   -- each warpgroup one cluster tile
    { consumers = "pingpong", bm = 64, cluster = { 1, 2 }, schedule = "persistent", sms = 2 }, -- A multicast, alternating
    { epi = 64 },                                                 -- 64 x 64 epilogue sub-tiles, 128-byte swizzle
    { bk = 128, cluster = 2 },                                    -- k blocks of two boxes (two 128-byte rows of K)
    -- the tiles tl.gemm.candidates adds for shapes of few tiles
    { bn = 192 },                                                 -- m64n192 (columns past N clipped)
    { bn = 192, schedule = "splitk", splits = 2 },
    { bn = 128, cluster = 2 },                                    -- a 128 x 128 tile's B multicast (overhang along M)
    { bn = 96, schedule = "persistent", sms = 1 },                -- 3 epilogue sub-tiles: one CTA, two tiles
    { bn = 160, cluster = 2 },                                    -- m64n160, B's share of 80 rows
    { bn = 96, schedule = "splitk", splits = 2 },
    -- bn in steps of 16: 16-column epilogue sub-tiles (a 32-byte swizzle)
    { bn = 80, schedule = "persistent", sms = 1 },                -- 5 sub-tiles: one CTA, two tiles (the second clipped)
    { bn = 112, cluster = 2 },                                    -- m64n112, B's share of 56 rows
    { bn = 48, schedule = "splitk", splits = 2 },
    -- split-K in a cluster: the splits are the persistent scheduler's batches
    { cluster = { 1, 2 }, schedule = "splitk", splits = 2 },      -- A multicast, the last split adds the other's partial
    { cluster = 2, schedule = "splitk", splits = 2, sms = 2 },    -- one cluster walks both splits (overhang along M)
    { bm = 64, bn = 48, cluster = { 1, 2 }, schedule = "splitk", splits = 2 }, -- 2 x 3 tiles: a CTA past N has no counter
    { bm = 64, bn = 80, cluster = { 1, 2 } },                    -- a decode form: one warpgroup, A multicast, 16-column sub-tiles
    -- the projections of 256 to 1024 tokens (s14sweep): 256-row tiles of finer widths, one warpgroup in a cluster along M
    { bm = 256, bn = 160, cluster = 2 },                          -- two slices a warpgroup, m64n160, B's share of 80 rows
    { bm = 256, bn = 176 },                                       -- two slices a warpgroup, 16-column sub-tiles (clipped at N)
    { bm = 256, bn = 64, cluster = 2 },                           -- two slices a warpgroup, B multicast (overhang along M)
    { bm = 64, bn = 128, wgs = 1, cluster = 2 },                  -- one warpgroup, B multicast to both 64-row tiles
    -- bn from 32 (cuBLASLt's 64 x 32 tile at 64 x 4096 x 4096)
    { bn = 32 },                                                  -- m64n32, 4 tiles along N
    { bm = 64, bn = 32, wgs = 1, cluster = { 1, 2 } },            -- one warpgroup, A multicast along N
    -- ksplit: two warpgroups take every other stage of a 64-row tile, the second's sums added by the first
    { consumers = "ksplit", schedule = "persistent" },            -- 2 k blocks a tile: one each
    { consumers = "ksplit", schedule = "persistent", sms = 1, stages = 4 }, -- one CTA walks 4 tiles
    { consumers = "ksplit", schedule = "persistent", sms = 1, bn = 48 }, -- 16-column sub-tiles, the last tile clipped at N
    { consumers = "ksplit", schedule = "persistent", sms = 1, bn = 32, bk = 128 }, -- k blocks of two 128-byte rows (the model's ksplit)
    -- ksplit in a cluster (pipeline mode pingpong_cluster): each stage released on every CTA by the warpgroup that took it
    { consumers = "ksplit", schedule = "persistent", cluster = 2 },                        -- B multicast along M
    { consumers = "ksplit", schedule = "persistent", cluster = { 1, 2 }, sms = 2, stages = 4 }, -- A multicast, one cluster walks 2 tiles
  }
  for _, v in ipairs(variants) do
    local name = {}
    for key, x in pairs(v) do name[#name + 1] = key .. " = " .. (type(x) == "table" and "{" .. table.concat(x, ", ") .. "}" or tostring(x)) end
    table.sort(name)
    it("matches the reference with " .. table.concat(name, ", "), function()
      local cfg = { m = 128, n = 128, k = 128, bn = 64, stages = 2, schedule = "data_parallel" }
      for key, x in pairs(v) do cfg[key] = x end
      local k, g = gemm(cfg)
      local ctas = type(v.cluster) == "table" and v.cluster[1] * v.cluster[2] or v.cluster or 1
      if v.sms then assert.equal(ctas, g.grid) end -- one CTA (one cluster)
      local A, B, args = inputs(128, 128, 128, "bf16", v.a_major == "m", v.b_major == "n")
      if #k:region(1):entry():args() == 4 then args[4] = { bytes = math.max(16, g.workspace_bytes) } end
      local r = tl.emulate(k, { grid = g.grid, args = args, policy = "random", seed = 11 })
      assert(r.ok, r.report)
      assert.is_true(r.read(3) == reference(A, B, 128, 128, 128, "bf16"))
    end)
  end

  -- a dynamic kernel: the problem is an argument (M, N, K), the tiles and the
  -- grid follow it; one build serves every shape
  it("runs one dynamic kernel on ragged shapes of every size, at both levels", function()
    for _, v in ipairs { { schedule = "data_parallel", levels = { "lower-tile-scheduler", "ptx" } },
                         { schedule = "persistent", sms = 2, consumers = "pingpong" },
                         { schedule = "persistent", sms = 4, cluster = { 2, 2 }, bm = 256 },
                         { schedule = "persistent", sms = 3, consumers = "ksplit" },
                         { schedule = "persistent", sms = 2, consumers = "ksplit", cluster = 2, stages = 4 } } do
      local cfg = { m = 128, n = 128, k = 128, bn = 64, stages = 2, dynamic = true }
      for key, x in pairs(v) do if key ~= "levels" then cfg[key] = x end end
      local g = tl.gemm.build(cfg)
      for _, pipeline in ipairs(v.levels or { "lower-tile-scheduler" }) do
        local k = PH.lowered_gemm(g, pipeline)
        for _, s in ipairs { { 100, 72, 136 }, { 312, 200, 64 }, { 8, 136, 200 } } do
          local M, N, K = s[1], s[2], s[3]
          local c = g:shaped { m = M, n = N, k = K }
          local A, B, args = inputs(M, N, K, "bf16")
          args[4], args[5], args[6] = M, N, K
          local r = tl.emulate(k, { grid = c.grid, args = args, policy = "random", seed = 5 })
          assert(r.ok, r.report)
          assert.is_true(r.read(3) == reference(A, B, M, N, K, "bf16"), ("%s %dx%dx%d"):format(pipeline, M, N, K))
        end
      end
      assert.error_matches(function() tl.gemm.build { m = 128, n = 128, k = 128 }:shaped { m = 64 } end,
        "built for 128x128x128, not 64x128x128")
    end
  end)

  -- the swapped form (swap_ab): D^T = B . A^T, B's rows on wgmma's 64-row side,
  -- A's few rows on its N side (8 to 64 of them), each tile stored transposed
  -- through the pointer D; ragged M, N and K, the schedules a decode-sized GEMM
  -- takes (split-K and StreamK through the workspace), a dynamic kernel
  it("matches the reference with A and B swapped (swap_ab) on ragged shapes, at both levels", function()
    local cases = {
      { 1, 136, 72, { schedule = "data_parallel" } },
      { 7, 200, 136, { schedule = "persistent", sms = 2, stages = 3 } },
      { 16, 72, 256, { schedule = "splitk", splits = 3, sms = 4 } },
      { 33, 136, 200, { schedule = "streamk", sms = 3, bm = 128, wgs = 1 } },
      { 64, 128, 136, { schedule = "data_parallel", bm = 128 } },               -- two warpgroups of 64 rows
      { 16, 72, 64, { schedule = "data_parallel", bn = 8 } },                   -- two tiles along M
      { 33, 200, 136, { schedule = "persistent", sms = 2, cluster = 2, bn = 48 } }, -- A's rows multicast to 2 CTAs
      { 16, 136, 200, { schedule = "streamk", sms = 3, bk = 128 } },            -- k blocks of two 128-byte rows
      { 7, 72, 392, { schedule = "data_parallel", bk = 192 } },                -- three rows, the last block past K
      -- split-K in a cluster sharing A's rows (a decode form; 40 rows in 48, 24 a CTA): 4 tiles of B's rows, 2 splits
      { 40, 200, 256, { schedule = "splitk", splits = 2, cluster = 2, bn = 48, sms = 4, stages = 2 } },
      -- ksplit: two warpgroups on each 64-row tile of B, every other k block each (3 k blocks a tile: the parity alternates)
      { 16, 200, 136, { consumers = "ksplit", sms = 2, stages = 4 } },
      { 33, 200, 136, { consumers = "ksplit", sms = 2, stages = 4, cluster = 2, bn = 48 } }, -- and A's rows multicast to 2 CTAs
      -- B's rows multicast along the tokens (2 tiles of 24 and 16 rows of A): 4 tiles of B's rows
      { 40, 200, 136, { schedule = "persistent", sms = 2, cluster = { 1, 2 }, bn = 24, stages = 3 } },
      { 40, 200, 136, { consumers = "ksplit", sms = 2, cluster = { 1, 2 }, bn = 24, stages = 4 } },
      -- both: a 2 x 2 cluster (A's rows shared along B's rows, B's along the tokens)
      { 40, 200, 136, { sms = 4, cluster = { 2, 2 }, bn = 32, stages = 3 } },
      { 40, 200, 136, { consumers = "ksplit", sms = 4, cluster = { 2, 2 }, bn = 32, stages = 4 } },
    }
    for i, s in ipairs(cases) do
      local M, N, K = s[1], s[2], s[3]
      local cfg = { m = M, n = N, k = K, swap_ab = true }
      for key, x in pairs(s[4]) do cfg[key] = x end
      local g = tl.gemm.build(cfg)
      for _, pipeline in ipairs(i == 1 and { "lower-tile-scheduler", "ptx" } or { "lower-tile-scheduler" }) do
        local k = PH.lowered_gemm(g, pipeline)
        local A, B, args = inputs(M, N, K, "bf16")
        args[3] = { bytes = M * N * 2 }
        if g.workspace_bytes > 0 then args[4] = { bytes = g.workspace_bytes } end
        local r = tl.emulate(k, { grid = g.grid, args = args, policy = "random", seed = 7 + i })
        assert(r.ok, r.report)
        assert.is_true(r.read(3) == reference(A, B, M, N, K, "bf16"), ("%s %dx%dx%d"):format(pipeline, M, N, K))
      end
    end
    local g = tl.gemm.build { m = 16, n = 128, k = 128, swap_ab = true, dynamic = true, stages = 2 }
    local k = PH.lowered_gemm(g)
    for _, sh in ipairs { { 5, 72, 136 }, { 16, 200, 64 }, { 40, 64, 72 } } do
      local M, N, K = sh[1], sh[2], sh[3]
      local A, B, args = inputs(M, N, K, "bf16")
      args[3], args[4], args[5], args[6] = { bytes = M * N * 2 }, M, N, K
      local r = tl.emulate(k, { grid = g:shaped { m = M, n = N, k = K }.grid, args = args, policy = "random", seed = 3 })
      assert(r.ok, r.report)
      assert.is_true(r.read(3) == reference(A, B, M, N, K, "bf16"), ("dynamic %dx%dx%d"):format(M, N, K))
    end
    -- the sizes the bench runs assemble without a serialized wgmma
    for _, o in ipairs { { m = 16, n = 6144, k = 4096, schedule = "streamk" }, { m = 1, n = 28672, k = 4096, bm = 128 },
                         { m = 64, n = 8192, k = 8192, bm = 256, schedule = "splitk" },
                         { m = 16, n = 4096, k = 4096, dtype = "e4m3", bm = 128, wgs = 1, schedule = "streamk" } } do
      o.swap_ab = true
      H.assert_ptxas_fast(tl.gemm.build(o).kernel:compile())
    end
    assert.error_matches(function() tl.gemm.build { m = 16, n = 128, k = 128, swap_ab = true, bn = 12 } end,
      "with swap_ab, bn %(rows of A a tile%) must be a multiple of 8 from 8 to 256")
    assert.error_matches(function() tl.gemm.build { m = 16, n = 128, k = 128, swap_ab = true, consumers = "pingpong" } end,
      "swap_ab needs cooperative or ksplit consumers and K%-major A and B")
    assert.error_matches(function() tl.gemm.build { m = 16, n = 128, k = 128, swap_ab = true, cluster = 4, bn = 16 } end,
      "with swap_ab, the cm CTAs of a cluster column share A's rows, bn / cm a multiple of 8")
  end)

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
    local t = two[1] -- two tiles along N, one per CTA, each stored as one 64 x 64 sub-tile
    local cfg = { epi = 64 }
    for key, x in pairs(t.cfg) do cfg[key] = x end
    local k, g = gemm(cfg)
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

  -- Ping-pong: one ring, warpgroup g's tiles at stages offset by the other's
  -- k blocks, turns handed over by seq_bars. One CTA walks 4 tiles of 2 k
  -- blocks through 2 stages: every stage holds each warpgroup's data in turn.
  local pp = { m = 128, n = 256, k = 128, bn = 64, stages = 2, consumers = "pingpong", schedule = "persistent", sms = 1 }
  local _, _, pargs = inputs(pp.m, pp.n, pp.k, "bf16")
  it("reports nothing on a dynamic kernel (the problem an argument)", function()
    local dcfg = { m = 64, n = 64, k = 64, bn = 64, stages = 2, schedule = "persistent", sms = 1, dynamic = true }
    local k, g = gemm(dcfg)
    local _, _, dargs = inputs(M, N, K, "bf16")
    dargs[4], dargs[5], dargs[6] = M, N, K
    local c = tl.verify_protocol(k, { grid = g:shaped { m = M, n = N, k = K }.grid, args = dargs, max_states = 20000 })
    assert(c.ok, c.report)
    assert.is_true(c.min_phases >= 2)
  end)

  it("reports nothing on ping-pong's shared ring (each warpgroup two tiles)", function()
    local k = gemm(pp)
    local c = tl.verify_protocol(k, { grid = 1, args = pargs, max_states = 20000 })
    assert(c.ok, c.report)
    assert.is_true(c.min_phases >= 2)
  end)

  -- Ping-pong in a cluster of 2 along M (mode pingpong_cluster): B multicast,
  -- a stage released on both CTAs by the warps of the warpgroup whose tile it
  -- holds. The cluster walks 4 tiles of 2 k blocks through 2 stages.
  local ppc = { m = 128, n = 256, k = 128, bm = 64, bn = 64, stages = 2, consumers = "pingpong", cluster = 2,
                schedule = "persistent", sms = 2 }
  local _, _, cargs = inputs(ppc.m, ppc.n, ppc.k, "bf16")
  it("reports nothing on ping-pong in a cluster (each warpgroup two tiles on both CTAs)", function()
    local k, g = gemm(ppc)
    assert.equal(2, g.grid)
    local c = tl.verify_protocol(k, { grid = 2, args = cargs, max_states = 20000 })
    assert(c.ok, c.report)
    assert.is_true(c.min_phases >= 2)
  end)
  local pp_mutants = {
    -- the second warpgroup takes the first's stages: both release them, so a
    -- stage's empty barrier completes two phases and the producer misses one
    { name = "ping-pong: the second warpgroup's start k_tile_count stages ahead deleted", kind = "phase",
      msg = "(phase aliasing)", seed = function(k)
        local adv = ops(k, "cutlass.pipeline.state.advance")[2] -- consumer1's, before its tile loop
        adv:result(1):replace_all_uses(adv:operand(1))
        adv:erase()
      end },
    -- the second warpgroup's mainloop no longer waits for its turn: it waits
    -- on a stage's next round before the first warpgroup took the round before
    { name = "ping-pong: the second warpgroup's wait for its mainloop turn deleted", kind = "phase",
      msg = "passes its wait on", seed = function(k)
        ops(k, "cutlass.seq_bar.wait")[3]:erase() -- consumer1's first: its mainloop turn
      end },
    -- the empty barriers count both warpgroups, but only the one whose tile a
    -- stage holds releases it: the producer waits forever
    { name = "ping-pong: the pipeline made cooperative (its empty barriers count both warpgroups)", kind = "deadlock",
      msg = "128 of 256 arrivals came for phase 0", seed = function(k) ops(k, "cutlass.pipeline.init")[1]:set_attr("mode", "cooperative") end },
    -- in a cluster (ppc, two CTAs): the empty barriers count both warpgroups' warps on both CTAs (16), but
    -- only the warps of the stage's warpgroup release it: the producer waits forever
    { name = "ping-pong in a cluster: the pipeline made cluster (its empty barriers count both warpgroups)",
      kind = "deadlock", msg = "8 of 16 arrivals", cluster = true,
      seed = function(k) ops(k, "cutlass.pipeline.init")[1]:set_attr("mode", "cluster") end },
    -- a one-CTA mode: the inits end with a CTA barrier, not the cluster's, so the
    -- first multicast reaches a peer's barrier that may not be initialized yet
    -- (and the releases would stay on their own CTA)
    { name = "ping-pong in a cluster: the pipeline made pingpong (a one-CTA mode)", kind = "uninitialized",
      msg = "is not ordered before the use (a missing barrier after the init)", cluster = true,
      seed = function(k) ops(k, "cutlass.pipeline.init")[1]:set_attr("mode", "pingpong") end },
  }
  for _, mu in ipairs(pp_mutants) do
    it("catches " .. mu.name, function()
      local k = gemm(mu.cluster and ppc or pp)
      mu.seed(k)
      local c = tl.verify_protocol(k, { grid = mu.cluster and 2 or 1, args = mu.cluster and cargs or pargs, max_states = 20000 })
      assert.is_false(c.ok, "the mutant passed")
      local ok = false
      for _, kind in ipairs(mu.kinds or { mu.kind }) do ok = ok or c.violation.kind == kind end
      assert(ok, c.report)
      if mu.msg then assert.matches(mu.msg, c.report, 1, true) end
      assert.matches("spec/protocol_gemm_spec.lua:" .. BUILD_LINE, c.report, 1, true)
      assert.is_true(#c.trace > 0)
      print(("\n  %s -> %s\n%s"):format(mu.name, c.violation.kind, c.violation.message))
    end)
  end
end)

-- The GEMM after the whole ptx pipeline (the nvvm ops the emitter gets:
-- nvvm.cp.async.bulk.tensor, nvvm.wgmma.*, nvvm.stmatrix, the nvvm cluster
-- ops; lua/tilua/emulate/models/nvvm_mma.lua): the same bytes as the reference, the
-- checker clean at every stage of the pipeline, and bugs seeded in the
-- lowered IR caught there.
describe("the lowered GEMM (after the whole ptx pipeline)", function()
  local PASSES = { "canonicalize", "cse", "lower-tile-scheduler", "convert-cutlass-to-nvvm", "dedupe-wait-groups",
                   "convert-tile-to-nvvm", "canonicalize", "cse", "canonicalize" }
  local function nvvm_level(k)
    assert.equal(0, #ops(k, "tile.wgmma") + #ops(k, "tile.tma_load") + #ops(k, "tile.stmatrix"))
    assert.is_true(#ops(k, "nvvm.wgmma.mma_async") > 0 and #ops(k, "nvvm.cp.async.bulk.tensor.shared.cluster.global") > 0)
  end

  local configs = {
    { name = "1 CTA", cfg = { m = 128, n = 64, k = 128 } },
    { name = "grid 2", cfg = { m = 128, n = 128, k = 128 }, grid = 2 },
    { name = "a cluster of 2 (B multicast, remote releases)", cfg = { m = 256, n = 64, k = 128, cluster = 2 }, grid = 2 },
    { name = "a cluster of 1 x 2 (A multicast)", cfg = { m = 128, n = 128, k = 128, cluster = { 1, 2 } }, grid = 2 },
    { name = "a cluster of 2 x 2 (A and B multicast)", cfg = { m = 256, n = 128, k = 128, cluster = { 2, 2 } }, grid = 4 },
    { name = "persistent", cfg = { m = 128, n = 128, k = 128, schedule = "persistent" } },
    { name = "persistent, one CTA walks both tiles", cfg = { m = 128, n = 128, k = 128, schedule = "persistent", sms = 1 }, grid = 1 },
    { name = "MN-major operands", cfg = { m = 128, n = 64, k = 128, a_major = "m", b_major = "n" } },
    { name = "f16", cfg = { m = 128, n = 64, k = 256, dtype = "f16", out = "f16" } },
    { name = "ping-pong consumers", cfg = { m = 128, n = 128, k = 128, consumers = "pingpong" } },
    { name = "ping-pong, one ring, each warpgroup two tiles", cfg = { m = 128, n = 256, k = 128, consumers = "pingpong",
                                                                    schedule = "persistent", sms = 1 }, grid = 1 },
    { name = "a 256-row tile (two warpgroups of 128 rows)", cfg = { m = 256, n = 128, k = 128, bm = 256 } },
    { name = "a 192-row tile (three warpgroups)", cfg = { m = 192, n = 64, k = 128, bm = 192 } },
    { name = "a 320-row tile (warpgroups of 2 and 3 slices, code of their own)", cfg = { m = 320, n = 64, k = 128, bm = 320 } },
    { name = "StreamK on a 320-row tile (a fixup counter per warpgroup)", cfg = { m = 300, n = 64, k = 256, bm = 320,
                                                                            schedule = "streamk", sms = 3 }, grid = 3 },
    { name = "split-K on a 256-row tile (two slices a warpgroup)", cfg = { m = 256, n = 64, k = 256, bm = 256,
                                                                       schedule = "splitk", splits = 2, sms = 2 } },
    { name = "split-K (the fixup's lowered generic barrier)", cfg = { m = 128, n = 128, k = 256, schedule = "splitk", splits = 2, sms = 4 } },
  }
  for _, c in ipairs(configs) do
    it("matches the CPU reference bit for bit: " .. c.name, function()
      local cfg = { bn = 64, stages = 2, schedule = "data_parallel" }
      for key, x in pairs(c.cfg) do cfg[key] = x end
      local k, g = gemm(cfg, "ptx")
      nvvm_level(k)
      if c.grid then assert.equal(c.grid, g.grid) end
      local dt = cfg.dtype or "bf16"
      local A, B, args = inputs(cfg.m, cfg.n, cfg.k, dt, cfg.a_major == "m", cfg.b_major == "n")
      local want = reference(A, B, cfg.m, cfg.n, cfg.k, cfg.out or "bf16")
      if g.workspace_bytes > 0 then args[4] = { bytes = g.workspace_bytes } end
      assert_policies(k, g, args, want, { "round_robin", "random" }, 7)
    end)
  end

  it("takes nvvm.getctarank of a mapa'd address as its rank (the cluster's remote releases through it)", function()
    local cfg = { m = 256, n = 64, k = 256, bn = 64, stages = 2, schedule = "data_parallel", cluster = 2 } -- the ring wraps
    local k, g = gemm(cfg, "ptx")
    -- mapa(a, r) becomes mapa(a, getctarank(mapa(a, r))): the same address only if getctarank is r
    local maps = ops(k, "nvvm.mapa.shared.cluster")
    assert.is_true(#maps >= 2)
    for _, m in ipairs(maps) do
      local inner = m:clone()
      inner:insert(nil, m)
      local rank = tl.core.op_create(tl.context(), "nvvm.getctarank.shared.cluster", { inner:result(1) },
                                     { m:operand(2):type() }, {}, 0, nil, m, nil)
      m:set_operand(2, rank:result(1))
    end
    local A, B, args = inputs(cfg.m, cfg.n, cfg.k, "bf16")
    local r = tl.emulate(k, { grid = g.grid, args = args, policy = "random", seed = 3 })
    assert(r.ok, r.report)
    assert.is_true(r.read(3) == reference(A, B, cfg.m, cfg.n, cfg.k, "bf16"))
    local c = tl.verify_protocol(k, { grid = g.grid, args = args, max_states = 20000 })
    assert(c.ok, c.report)
  end)

  -- tl.check_lowering: the checker on the input and after each pass, every
  -- stage explored (none skipped: a `model` report would fail it), each within
  -- its work budget (about a second of the emulator; counted, not timed)
  local checked = {
    { name = "1 CTA", cfg = { m = 128, n = 64, k = 256 } },
    { name = "grid 2", cfg = { m = 128, n = 128, k = 256 } },
    { name = "a cluster of 2", cfg = { m = 256, n = 64, k = 256, cluster = 2 } },
    { name = "persistent", cfg = { m = 128, n = 128, k = 256, schedule = "persistent", sms = 1 } },
    { name = "a cluster of 2 x 2", cfg = { m = 256, n = 128, k = 256, cluster = { 2, 2 } } },
    { name = "ping-pong, one ring", cfg = { m = 128, n = 256, k = 128, consumers = "pingpong", schedule = "persistent", sms = 1 } },
    { name = "a 256-row tile", cfg = { m = 256, n = 64, k = 256, bm = 256 } },
    { name = "a 256 x 160 tile in a cluster of 2", cfg = { m = 512, n = 160, k = 256, bm = 256, bn = 160, cluster = 2 } },
    { name = "a 64 x 128 tile on one warpgroup in a cluster of 2", cfg = { m = 128, n = 128, k = 256, bm = 64, bn = 128,
                                                                          wgs = 1, cluster = 2 } },
  }
  local function check(c, after_pass)
    local cfg = { bn = 64, stages = 2, schedule = "data_parallel" }
    for key, x in pairs(c.cfg) do cfg[key] = x end
    local g = tl.gemm.build(cfg) -- every op of the checked kernel is at this line
    local _, _, args = inputs(cfg.m, cfg.n, cfg.k, "bf16")
    return tl.check_lowering(g.kernel, { args = args, grid = g.grid, max_states = 20000, max_work = 8000000,
                                         after_pass = after_pass })
  end
  local CHECK_LINE = H.line_of("spec/protocol_gemm_spec.lua", "-- every op of the " .. "checked kernel")
  for _, c in ipairs(checked) do
    it("checks clean at every stage of ptx, none skipped: " .. c.name, function()
      local seen = {}
      local r = check(c, function(pass, _, kop) if pass == "convert-tile-to-nvvm" then nvvm_level(kop) seen[1] = true end end)
      assert(r.ok, r.report)
      assert.is_true(seen[1])
      assert.are.same(PASSES, r.passes)
      assert.equal(#PASSES + 1, #r.stages)
      for _, st in ipairs(r.stages) do
        assert(st.ok, st.report)
        assert.is_true(st.min_phases >= 2, st.name)
      end
      print(("\n  %s\n%s"):format(c.name, r.report))
    end)
  end

  -- Lowering bugs seeded in the nvvm-level GEMM right after convert-tile-to-nvvm
  -- (pass 6): blamed on it, with the violation's kind and a counterexample at
  -- the GEMM's line here.
  local AT = 6
  local function const(before, value, type)
    return tl.core.op_create(tl.context(), "arith.constant", {}, { type }, { value = value }, 0, nil, before, nil)
  end
  local mutants = {
    { name = "the mainloop's nvvm.wgmma.wait.group deleted", kind = "unfilled", msg = "that tma load",
      seed = function(k) ops(k, "nvvm.wgmma.wait.group.sync.aligned")[1]:erase() end },
    { name = "the stage released with its wgmmas in flight (wgmma.wait.group 1 made 2)", kind = "unfilled",
      msg = "that tma load", seed = function(k) ops(k, "nvvm.wgmma.wait.group.sync.aligned")[1]:set_attr("group", 2) end },
    { name = "the epilogue's wgmma.wait.group 0 deleted", kind = "wgmma", msg = "before a wgmma_wait completed it",
      seed = function(k) ops(k, "nvvm.wgmma.wait.group.sync.aligned")[2]:erase() end },
    { name = "expect_tx 16 bytes short", kind = "tx_bytes", msg = "tx-count of -16 bytes", seed = function(k)
        local a = ops(k, "nvvm.mbarrier.arrive.expect_tx.shared")[1]
        local v = a:operand(2):def():attr "value"
        a:set_operand(2, const(a, v - 16, a:operand(2):type()):result(1))
      end },
    { name = "the B load's TMA completing on the next stage's mbarrier", kinds = { "tx_bytes", "unfilled", "phase" },
      seed = function(k)
        local t = ops(k, "nvvm.cp.async.bulk.tensor.shared.cluster.global")[2]
        local b = t:operand(3)
        local add = tl.core.op_create(tl.context(), "arith.addi", { b, const(t, 8, b:type()):result(1) }, { b:type() }, {},
                                      0, nil, t, nil)
        t:set_operand(3, add:result(1))
      end },
    { name = "the consumer's try_wait on a full stage deleted", kind = "unfilled", msg = "reads shared bytes",
      seed = function(k)
        local w = ops(k, "nvvm.mbarrier.try_wait.parity.shared")
        w[#w]:parent():erase() -- the consumer's mainloop spin loop
      end },
    { name = "a cluster of 2: the stage released on both CTAs with its wgmmas in flight (wgmma.wait.group 1 made 2)",
      cfg = checked[3], kinds = { "unfilled", "overwrite" }, msg = "tma load",
      seed = function(k) ops(k, "nvvm.wgmma.wait.group.sync.aligned")[1]:set_attr("group", 2) end },
    { name = "a cluster of 2: the cluster.wait after the barrier inits dropped", cfg = checked[3], kind = "arrive_count",
      msg = "arrives on the cluster barrier of cluster 0 again before waiting for the phase it arrived on",
      seed = function(k) ops(k, "nvvm.cluster.wait")[1]:erase() end },
    { name = "a cluster of 2: the cluster sync after the barrier inits dropped", cfg = checked[3],
      kinds = { "dsmem", "uninitialized" }, seed = function(k)
        ops(k, "nvvm.cluster.arrive.relaxed")[1]:erase()
        ops(k, "nvvm.cluster.wait")[1]:erase()
      end },
    { name = "a cluster of 2: the producer tail's waits and the final cluster sync dropped", cfg = checked[3], kind = "dsmem",
      msg = "which has exited (a missing cluster barrier before the exit)", seed = function(k)
        ops(k, "nvvm.mbarrier.try_wait.parity.shared")[2]:parent():erase() -- the tail's spin loop on the empty stages
        local a, w = ops(k, "nvvm.cluster.arrive"), ops(k, "nvvm.cluster.wait")
        a[#a]:erase()
        w[#w]:erase()
      end },
  }
  for _, mu in ipairs(mutants) do
    it("catches in the lowered IR: " .. mu.name, function()
      local done
      local r = check(mu.cfg or checked[1], function(_, i, kop)
        if i == AT then
          mu.seed(kop)
          done = true
        end
      end)
      assert.is_true(done)
      assert.is_false(r.ok, "the mutant passed")
      assert.equal(PASSES[AT], r.broken_by, r.report)
      local ok = false
      for _, kind in ipairs(mu.kinds or { mu.kind }) do ok = ok or r.violation.kind == kind end
      assert(ok, ("expected %s, got:\n%s"):format(table.concat(mu.kinds or { mu.kind }, " or "), r.report))
      if mu.msg then assert.matches(mu.msg, r.report, 1, true) end
      assert.matches("spec/protocol_gemm_spec.lua:" .. CHECK_LINE, r.report, 1, true)
      assert.is_true(#r.trace > 0)
      print(("\n  %s -> %s (%d steps, %.2f s)\n%s"):format(mu.name, r.violation.kind, #r.trace, r.seconds, r.violation.message))
    end)
  end
end)
