-- Tensor cores and TMA on the GPU (tools/gpu test): TMA boxes land where the
-- swizzled memref addressing says they do, TMA stores write them back, a
-- wgmma from descriptors computes a 64 x N product, ldmatrix / stmatrix move
-- 8x8 matrices, and a launch with a tensor map of the wrong shape is refused.
-- Every check is against a CPU reference on fresh random data. Without a GPU
-- every test is pending (the runner reports the spec skipped).
local H = dofile "spec/helper.lua"
local tl = require "tilua"

local seed, gpu = H.seed(), H.gpu
local D = tl.device

-- one kernel: TMA-load a 64 x 64 box of a rows x 64 bf16 tensor at row r0 into a
-- swizzled buffer, copy it element by element through the swizzled addressing
-- into `out` (row-major), and TMA-store the buffer to `back` at the same place.
local function tma_roundtrip(sw)
  tl.new_module()
  local MT = tl.tensor_map_type(tl.bf16, { 64, sw == 0 and 64 or sw // 2 }, sw)
  local W = sw == 0 and 64 or sw // 2 -- box columns
  local k = tl.kernel("tma_rt_" .. sw, {
    params = { { "src", MT }, { "back", MT }, { "out", tl.ptr(tl.bf16) }, { "r0", tl.i32 }, { "c0", tl.i32 } },
    block = 128 })
  k:define(function(k, p)
    local s = k:shared(tl.bf16, { 64, W }, { align = 1024, swizzle = sw })
    local bar = k:shared(tl.i64, 1, { align = 8 })
    local t = tl.thread_id()
    tl.if_(t:eq(0), function()
      tl.mbarrier_init(bar, 1)
      tl.fence_mbarrier_init()
    end)
    tl.barrier()
    tl.if_(t:eq(0), function()
      tl.tma_load(s:ptr(0), p.src, bar, { p.r0, p.c0 })
      tl.mbarrier_arrive_expect_tx(bar, 64 * W * 2)
    end)
    tl.mbarrier_wait(bar, 0)
    tl.for_range(t, tl.const(64 * W, tl.i32), tl.const(128, tl.i32), function(i)
      local r, c = i // W, i % W;
      (p.out + i):store(s:ptr(r, c):load())
    end)
    tl.fence_proxy_async("shared")
    tl.barrier()
    tl.if_(t:eq(0), function()
      tl.tma_store(p.back, s:ptr(0), { p.r0, p.c0 })
      tl.bulk_commit()
      tl.bulk_wait(0)
    end)
  end)
  return k, W
end

describe("TMA and swizzled shared memory", function()
  for _, sw in ipairs { 0, 32, 64, 128 } do
    it(("agree on where each element of a box lands (swizzle %d)"):format(sw), function()
      gpu()
      local k, W = tma_roundtrip(sw)
      local rows, cols = 200, 3 * W
      local src = D.random(tl.bf16, rows * cols, seed)
      local back <close> = D.alloc(tl.bf16, rows * cols)
      back:fill(0)
      local out <close> = D.alloc(tl.bf16, 64 * W)
      local map = function(buf) return D.tensor_map { buffer = buf, dtype = "bf16", shape = { rows, cols }, box = { 64, W }, swizzle = sw } end
      local r0, c0 = 100, W
      k:launch { grid = 1, args = { map(src), map(back), out, r0, c0 } }
      D.synchronize()
      local hs, ho, hb = src:to_table(), out:to_table(), back:to_table()
      for r = 0, 63 do
        for c = 0, W - 1 do
          local want = hs[(r0 + r) * cols + c0 + c + 1]
          assert(ho[r * W + c + 1] == want, ("swizzle %d: element (%d, %d) read %s, expected %s"):format(sw, r, c, ho[r * W + c + 1], want))
          assert(hb[(r0 + r) * cols + c0 + c + 1] == want, ("swizzle %d: TMA store of (%d, %d) wrote %s"):format(sw, r, c, hb[(r0 + r) * cols + c0 + c + 1]))
        end
      end
      -- the store touched nothing outside its box
      assert.equal(0, hb[1])
      assert.equal(0, hb[rows * cols])
    end)
  end
end)

describe("tensor maps at launch", function()
  it("must match the parameter's type", function()
    gpu()
    local k = tma_roundtrip(128)
    local buf <close> = D.alloc(tl.bf16, 256 * 256)
    local wrong = D.tensor_map { buffer = buf, dtype = "bf16", shape = { 256, 256 }, box = { 32, 64 }, swizzle = 128 }
    local out <close> = D.alloc(tl.bf16, 64 * 64)
    local ok, err = pcall(function() k:launch { grid = 1, args = { wrong, wrong, out, 0, 0 } } end)
    assert.is_false(ok)
    assert.matches("tensor_gpu_spec.lua:%d+: launch: argument 'src' is a tensor map of bf16 with box {32, 64}", err)
  end)
end)

describe("the GEMM of stdlib/gemm.lua", function()
  local cases = {
    { m = 320, n = 272, k = 200 },                                    -- edges in every dimension
    { m = 256, n = 512, k = 320, a_major = "m", b_major = "n" },      -- MN-major descriptors
    { m = 384, n = 256, k = 256, bn = 128, schedule = "data_parallel" },
    { m = 512, n = 512, k = 4096, schedule = "streamk" },             -- split tiles and the fixup
    { m = 256, n = 256, k = 256, alpha = 0.5, beta = 2, bias = true, activation = "relu" },
    { m = 640, n = 768, k = 512, cluster = 2 },                        -- B multicast to a cluster of 2
    { m = 576, n = 512, k = 384, consumers = "pingpong" },            -- alternating warpgroups, odd tile count
    { m = 512, n = 384, k = 320, consumers = "pingpong", bn = 128, stages = 4, a_major = "m", b_major = "n" },
    { m = 1024, n = 256, k = 2048, bn = 128, schedule = "streamk" },
    { m = 512, n = 512, k = 8192, schedule = "splitk" },
    { m = 256, n = 384, k = 512, dtype = "f16", out = "f16", bn = 128 },
    -- the orchestration's forms: clusters along either dimension, tiles of
    -- 256, 192 and 320 rows, ping-pong's shared ring, 64-wide epilogue sub-tiles
    { m = 1000, n = 1032, k = 520, cluster = { 1, 2 } },                -- A multicast along N
    { m = 1000, n = 1032, k = 520, cluster = { 2, 2 }, bn = 128 },      -- A and B multicast
    { m = 1000, n = 1000, k = 296, cluster = 4, bn = 128 },             -- B multicast to 4 CTAs (rows of 592 bytes: TMA's 16)
    { m = 1000, n = 1032, k = 520, bm = 256, bn = 128 },                -- two slices a warpgroup
    { m = 777, n = 776, k = 448, bm = 192, bn = 192 },                  -- three warpgroups
    { m = 1240, n = 512, k = 384, bm = 320, bn = 128 },                 -- warpgroups of 2 and 3 slices
    { m = 1240, n = 512, k = 2048, bm = 320, bn = 128, schedule = "streamk" },
    { m = 1000, n = 1000, k = 1000, consumers = "pingpong" },           -- 128x128 a warpgroup, one ring
    { m = 1000, n = 1032, k = 520, bm = 256, bn = 128, cluster = { 1, 2 }, epi = 64 },
    -- decode-sized M, A and B swapped (swap_ab): B's rows on wgmma's 64-row side,
    -- M rounded up to 8 on its N side, the tile stored transposed
    { m = 1, n = 4104, k = 4096, swap_ab = true, schedule = "streamk" },
    { m = 7, n = 1000, k = 520, swap_ab = true },
    { m = 16, n = 6144, k = 4096, swap_ab = true, bm = 128, schedule = "splitk" },
    { m = 33, n = 1032, k = 2056, swap_ab = true, bm = 128, wgs = 1, schedule = "streamk" },
    { m = 64, n = 776, k = 296, swap_ab = true, bm = 256, alpha = 0.5, beta = 2, bias = true, activation = "relu" },
    { m = 40, n = 1000, k = 1000, swap_ab = true, bn = 16, schedule = "data_parallel" }, -- three tiles along M
    { m = 64, n = 4104, k = 1032, swap_ab = true, bm = 128, cluster = 2 },  -- A's rows multicast to a cluster of 2
    { m = 16, n = 1000, k = 520, swap_ab = true, cluster = 2, schedule = "data_parallel" },
    { m = 16, n = 4104, k = 4104, swap_ab = true, bk = 128, schedule = "streamk" }, -- k blocks of two 128-byte rows
    -- the decode forms that fill the SMs (tl.gemm.candidates' decode_fill): split-K in
    -- a cluster of 2 sharing A's rows (an odd count of tiles: the last cluster's second
    -- CTA past B's rows), and the tokens on wgmma's M side, 80 or 224 rows of B a tile,
    -- alone, in a 1 x 2 cluster, and split over K in one (the 128-row swapped split-K
    -- and 64 x 80 in clusters are no longer offered, s12decode-1; tl.gemm.build keeps them)
    { m = 40, n = 4104, k = 4104, swap_ab = true, bn = 48, cluster = 2, schedule = "splitk", splits = 2 },
    { m = 64, n = 1032, k = 2056, swap_ab = true, bm = 128, cluster = 2, schedule = "splitk", splits = 3 },
    { m = 33, n = 1000, k = 1032, bm = 64, bn = 80, wgs = 1, cluster = { 1, 2 } },
    { m = 17, n = 1000, k = 520, bm = 64, bn = 224, wgs = 1 },
    { m = 57, n = 1032, k = 4104, bm = 64, bn = 64, wgs = 1, cluster = { 1, 2 }, schedule = "splitk", splits = 2 },
    { m = 1000, n = 1032, k = 520, bn = 128, bk = 128 },
    -- the forms tl.gemm.candidates picks for shapes of few tiles: 128 x 192 and
    -- 128 x 64 tiles, clusters of 2 on them, split-K on 128 x 192, 256 x 128, 128 x 64
    { m = 1000, n = 1032, k = 520, bn = 192 },
    { m = 1000, n = 1032, k = 520, bn = 192, cluster = 2 },
    { m = 1000, n = 1032, k = 520, bn = 128, cluster = 2 },
    { m = 1000, n = 1032, k = 520, bn = 64, cluster = { 1, 2 } },
    { m = 264, n = 4104, k = 4104, bn = 192, schedule = "splitk", splits = 3 },
    { m = 264, n = 1032, k = 4104, bn = 64, schedule = "splitk", splits = 2 },
    { m = 264, n = 2056, k = 4104, bm = 256, bn = 128, schedule = "splitk", splits = 4 },
    -- bn in steps of 32: 3, 5 and 7 epilogue sub-tiles (a persistent CTA's next tile waits for every store)
    { m = 1000, n = 1032, k = 520, bn = 96, sms = 7 },
    { m = 1000, n = 1032, k = 520, bn = 160, cluster = 2 },
    { m = 1000, n = 1032, k = 520, bn = 224, sms = 5 },
    { m = 264, n = 4104, k = 4104, bn = 96, schedule = "splitk", splits = 2 },
    { m = 264, n = 4104, k = 4104, bn = 160, schedule = "streamk" },
    -- bn in steps of 16: 16-column epilogue sub-tiles (3, 5, 7 and 11 of them)
    { m = 1000, n = 1032, k = 520, bn = 80, sms = 7 },
    { m = 1000, n = 1032, k = 520, bn = 112, cluster = 2 },
    { m = 264, n = 1032, k = 4104, bn = 48, schedule = "splitk", splits = 3 },
    { m = 136, n = 4104, k = 4104, bn = 80, cluster = { 1, 2 } },
    { m = 264, n = 4104, k = 4104, bn = 176, schedule = "splitk", splits = 2 },
    { m = 264, n = 4104, k = 2056, bn = 144, schedule = "streamk" },
    -- split-K in a cluster (the splits are the persistent scheduler's batches)
    { m = 1000, n = 1032, k = 4104, bn = 128, cluster = 2, schedule = "splitk", splits = 2 },
    { m = 136, n = 4104, k = 8200, bn = 128, cluster = { 1, 2 }, schedule = "splitk", splits = 3 },
    { m = 264, n = 1032, k = 4104, bn = 80, cluster = 2, schedule = "splitk", splits = 4, sms = 8 },
    -- ping-pong in a cluster (pipeline mode pingpong_cluster: a stage released on
    -- every CTA by the warpgroup whose tile it holds), and 64 x 256 a warpgroup
    { m = 1000, n = 1032, k = 520, consumers = "pingpong", cluster = 2 },            -- B multicast
    { m = 1000, n = 1032, k = 520, consumers = "pingpong", cluster = { 1, 2 }, sms = 4 }, -- A multicast, 2 clusters walk 64 tiles
    { m = 1000, n = 1032, k = 1000, consumers = "pingpong", cluster = { 2, 2 } },   -- A and B multicast
    { m = 1000, n = 1032, k = 1000, consumers = "pingpong", bm = 64, bn = 256 },     -- m64n256 a warpgroup
    { m = 1000, n = 1032, k = 1000, consumers = "pingpong", bm = 64, bn = 256, cluster = 2, sms = 6 },
    { m = 1000, n = 1032, k = 1000, consumers = "pingpong", bm = 128, bn = 192, cluster = 2 },  -- two m64n192 a warpgroup
    -- ksplit: two warpgroups take every other stage of a 64-row tile (odd k block counts: the
    -- parity of a tile's first stage alternates), the second's sums added in shared memory
    { m = 57, n = 1032, k = 4104, consumers = "ksplit", bn = 64 },
    { m = 200, n = 1000, k = 1032, consumers = "ksplit", bn = 48, sms = 7 },
    { m = 64, n = 4104, k = 520, consumers = "ksplit", bn = 32, alpha = 0.5, beta = 2, bias = true, activation = "relu" },
    { m = 16, n = 4104, k = 1032, swap_ab = true, consumers = "ksplit", sms = 9 },       -- swapped: tokens on wgmma's N side
    -- ksplit in a cluster: B shared along M (5 row tiles: the last cluster's second CTA past M), A shared along N
    { m = 300, n = 1000, k = 1032, consumers = "ksplit", bn = 96, cluster = { 2, 1 }, sms = 6 },
    { m = 57, n = 1032, k = 520, consumers = "ksplit", bn = 64, cluster = { 1, 2 }, sms = 4, bias = true },
    { m = 64, n = 1000, k = 4104, consumers = "ksplit", bn = 32, bk = 128, sms = 9 },                 -- the model's ksplit: bk 128, 33 k blocks
  }
  for _, o in ipairs(cases) do
    local extra = {}
    for _, key in ipairs { "bm", "bn", "schedule", "consumers", "cluster", "a_major", "dtype", "epi", "alpha", "swap_ab", "bk" } do
      local v = o[key]
      if v then extra[#extra + 1] = key .. "=" .. (type(v) == "table" and table.concat(v, "x") or tostring(v)) end
    end
    it(("matches the reference kernel and the CPU: %dx%dx%d %s"):format(o.m, o.n, o.k, table.concat(extra, " ")), function()
      gpu()
      local g = tl.gemm.build(o)
      local c = g.cfg
      local ein, eout = c.dtype == "f16" and tl.f16 or tl.bf16, c.out == "f16" and tl.f16 or tl.bf16
      local a = D.random(ein, c.m * c.k, seed)
      local b = D.random(ein, c.n * c.k, seed + 1)
      local d <close> = D.alloc(eout, c.m * c.n)
      local cc = (c.beta and c.beta ~= 0) and D.random(eout, c.m * c.n, seed + 2) or nil
      local bias = c.bias and D.random(tl.f32, c.n, seed + 3) or nil
      for _ = 1, 3 do -- repeated launches: StreamK counters must be back at zero
        d:fill(0)
        g:run { a = a, b = b, d = d, c = cc, bias = bias }
        D.synchronize()
        local ok, report = g:check { a = a, b = b, d = d, c = cc, bias = bias, seed = seed }
        assert(ok, report)
      end
    end)
  end

  -- one dynamic kernel per form, every shape an argument (fresh random inputs each)
  local dynamic_forms = {
    { bn = 256 }, { bm = 256, bn = 128 }, { consumers = "pingpong" }, { bm = 320, bn = 128 },
    { bn = 256, cluster = { 1, 2 } }, { bm = 256, bn = 128, cluster = { 2, 1 }, schedule = "data_parallel" },
    { bm = 64, bn = 128, wgs = 1 }, { swap_ab = true, bm = 128 },
    { bn = 192 }, { bn = 128, cluster = { 2, 1 } }, { bn = 64, cluster = { 2, 1 } }, { bn = 192, cluster = { 1, 2 } },
    { bn = 96 }, { bn = 160, cluster = { 2, 1 } },
    { bn = 80 }, { bn = 208, cluster = { 2, 1 } }, { bn = 48, cluster = { 1, 2 } },
    { consumers = "pingpong", cluster = { 2, 1 } }, { consumers = "ksplit", bn = 64 },
    { consumers = "ksplit", bn = 96, cluster = { 2, 1 } },
  }
  local dynamic_shapes = { { 1, 4096, 4096 }, { 77, 1032, 520 }, { 1000, 1000, 1000 }, { 2056, 3000, 1536 }, { 4096, 136, 8200 } }
  for _, f in ipairs(dynamic_forms) do
    local name = {}
    for key, v in pairs(f) do name[#name + 1] = key .. "=" .. (type(v) == "table" and table.concat(v, "x") or tostring(v)) end
    table.sort(name)
    it("serves every shape from one dynamic kernel: " .. table.concat(name, " "), function()
      gpu()
      local o = { m = 1024, n = 1024, k = 1024, dynamic = true }
      for key, v in pairs(f) do o[key] = v end
      local g = tl.gemm.build(o)
      for i, s in ipairs(dynamic_shapes) do
        local m, n, k = s[1], s[2], s[3]
        local a <close> = D.random(tl.bf16, m * k, seed + 2 * i)
        local b <close> = D.random(tl.bf16, n * k, seed + 2 * i + 1)
        local d <close> = D.alloc(tl.bf16, m * n)
        d:fill(0)
        g:run { a = a, b = b, d = d, m = m, n = n, k = k }
        D.synchronize()
        local ok, report = g:check { a = a, b = b, d = d, m = m, n = n, k = k, seed = seed }
        assert(ok, ("%dx%dx%d: %s"):format(m, n, k, report))
      end
    end)
  end
end)
