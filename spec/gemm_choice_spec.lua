-- tl.gemm.candidates (stdlib/gemm_choice.lua): the configurations of
-- tl.gemm.build worth measuring for a shape, ranked by the model of their time.
-- No GPU: the model takes the SM count (132, an H200's, where none is given).
local H = dofile "spec/helper.lua"
local tl = require "tilua"

local function tile_fill(o, m, n, sms)
  local full = { m = m, n = n, k = 4096 }
  for key, v in pairs(o) do full[key] = v end
  local c = tl.gemm.config(full)
  local units = c.tiles * (o.schedule == "splitk" and o.splits or 1)
  if o.schedule == "streamk" then return 1 end
  return units / (((units + sms - 1) // sms) * sms)
end

describe("tl.gemm.candidates", function()
  local shapes = {
    { 8192, 8192, 8192 }, { 4096, 4096, 4096 }, { 2048, 2048, 2048 }, { 1024, 1024, 16384 }, { 3072, 768, 3072 },
    { 128, 4096, 4096 }, { 256, 4096, 4096 }, { 256, 10240, 8192 }, { 512, 6144, 4096 }, { 768, 3072, 768 },
    { 16384, 57344, 8192 }, { 100, 1000, 520 }, { 8192, 8192, 8192, "e4m3" },
  }
  it("returns forms tl.gemm.build accepts, best first, as many as asked", function()
    for _, s in ipairs(shapes) do
      local m, n, k, dt = s[1], s[2], s[3], s[4]
      local list, est = tl.gemm.candidates { m = m, n = n, k = k, dtype = dt, count = 4, sms = 132 }
      assert.equal(4, #list)
      for i, o in ipairs(list) do
        local full = { m = m, n = n, k = k, dtype = dt }
        for key, v in pairs(o) do full[key] = v end
        assert.is_table(tl.gemm.config(full))
        assert.is_true(est[i] > 0)
        if i > 1 then assert.is_true(est[i] >= est[i - 1]) end
      end
    end
  end)

  it("fills the SMs where the default 128 x 256 tile leaves most idle", function()
    -- 256 x 4096 x 4096: 32 tiles of 128 x 256 on 132 SMs (a quarter of them busy)
    for _, s in ipairs { { 256, 4096, 4096 }, { 128, 4096, 4096 }, { 1024, 1024, 16384 }, { 256, 10240, 8192 } } do
      local list = tl.gemm.candidates { m = s[1], n = s[2], k = s[3], sms = 132 }
      local default = tile_fill({ bn = 256 }, s[1], s[2], 132)
      assert.is_true(tile_fill(list[1], s[1], s[2], 132) > default + 0.2,
        ("%dx%dx%d"):format(s[1], s[2], s[3]))
    end
  end)

  it("keeps the large tiles for the large shapes", function()
    local list = tl.gemm.candidates { m = 8192, n = 8192, k = 8192, sms = 132, count = 1 }
    -- (ping-pong: two tiles in flight a CTA, one a warpgroup)
    local in_flight = list[1].consumers == "pingpong" and 2 or 1
    assert.is_true(in_flight * list[1].bn * (list[1].bm or 128) >= 128 * 256)
    assert.is_nil(list[1].schedule)
  end)

  -- s10pp-1 (docs/PERF.md, tenth session), 8192^3 bf16 on an H200: ping-pong
  -- 128 x 192 a warpgroup in a 2 x 1 cluster 1282.6 us, alone 1288.3, the
  -- cooperative 128 x 256 in a 2 x 1 cluster 1292.6, alone 1307.7
  it("offers ping-pong 128 x 192 (and its 2 x 1 cluster) first at 8192^3, in the measured order", function()
    local list = tl.gemm.candidates { m = 8192, n = 8192, k = 8192, sms = 132, count = 3 }
    assert.same({ bm = 128, bn = 192, consumers = "pingpong", cluster = { 2, 1 } }, list[1])
    assert.same({ bm = 128, bn = 192, consumers = "pingpong" }, list[2])
    assert.same({ bn = 256, cluster = { 2, 1 } }, list[3])
    -- the model's times of the measured forms, in the measured order
    local MC = require "tilua.stdlib.gemm_choice"
    local t = {}
    for i, o in ipairs { list[1], list[2], list[3], { bn = 256 } } do t[i] = MC.estimate(o, 8192, 8192, 8192, "bf16", 132) end
    assert.is_true(t[1] < t[2] and t[2] < t[3] and t[3] < t[4])
  end)

  -- s10pp-2 (docs/PERF.md, tenth session): the cooperative 128 x 256 in a 2 x 1
  -- cluster measured fastest at 12288^3 (4360.3 us, ping-pong 128 x 192 4502.0,
  -- its cluster 4513.9) and 8192 x 8192 x 28672 (4609.1; 4812.2, 4636.2);
  -- ping-pong 128 x 192 at 8192 x 8192 x 1024 (171.5 us, the cooperative 2 x 1 188.3)
  it("puts the cooperative cluster first where both operands are beyond 128 MiB (EVEN_BIG)", function()
    for _, s in ipairs { { 12288, 12288, 12288 }, { 8192, 8192, 28672 } } do
      local list = tl.gemm.candidates { m = s[1], n = s[2], k = s[3], sms = 132, count = 3 }
      assert.same({ bn = 256, cluster = { 2, 1 } }, list[1], ("%dx%dx%d"):format(s[1], s[2], s[3]))
      local pp = false
      for _, o in ipairs(list) do pp = pp or o.consumers == "pingpong" end
      assert.is_true(pp) -- (ping-pong's cluster 0.6 % behind at 8192 x 8192 x 28672: still measured)
    end
    local list = tl.gemm.candidates { m = 8192, n = 8192, k = 1024, sms = 132, count = 1 }
    assert.same({ bm = 128, bn = 192, consumers = "pingpong" }, list[1])
  end)

  it("keeps the cooperative tiles first where ping-pong's tiles quantize worse or are too few", function()
    -- 4096^3: 704 tiles of 128 x 192 are 5.3 waves (6 rounds), 512 of 128 x 256 3.9 (4):
    -- measured 184.2 against 165.8 us (s10pp-1)
    local list = tl.gemm.candidates { m = 4096, n = 4096, k = 4096, sms = 132, count = 3 }
    assert.is_nil(list[1].consumers)
    -- 2048^3: 176 tiles of 128 x 192 are two rounds (1.3 a CTA) where 128
    -- tiles of 128 x 256 are one: not among the three best, modelled at least
    -- 20 % slower than the cooperative 128 x 256
    for _, o in ipairs(tl.gemm.candidates { m = 2048, n = 2048, k = 2048, sms = 132, count = 3 }) do
      assert.is_false(o.consumers == "pingpong" and o.bn == 192)
    end
    local MC = require "tilua.stdlib.gemm_choice"
    local pp = MC.estimate({ bm = 128, bn = 192, consumers = "pingpong" }, 2048, 2048, 2048, "bf16", 132)
    assert.is_true(pp > 1.2 * MC.estimate({ bn = 256 }, 2048, 2048, 2048, "bf16", 132))
  end)

  -- The model's constants against single runs on an H200 (docs/PERF.md): the
  -- fixed costs a round and a k block's time split by pairs of shapes on the
  -- same rounds (s10pp-2: 8192^3 and 8192 x 8192 x 1024), the multicast's
  -- relief of the L2 (seventh session: 256 x 8192 x 8192 on 128 x 128, B
  -- multicast or not; eighth: 1024 x 1024 x 16384 split-K 2 in a 2 x 1 cluster)
  it("models the measured times of the forms it was fitted to within 5 %", function()
    local MC = require "tilua.stdlib.gemm_choice"
    local PP, C21 = { bm = 128, bn = 192, consumers = "pingpong" }, { 2, 1 }
    for _, r in ipairs {
      { PP, 8192, 8192, 1024, 171.5 }, { PP, 8192, 8192, 8192, 1301.1 },
      { { bn = 256 }, 8192, 8192, 1024, 190.1 }, { { bn = 256 }, 8192, 8192, 8192, 1327.6 },
      { { bn = 256, cluster = C21 }, 8192, 8192, 1024, 188.3 }, { { bn = 256, cluster = C21 }, 8192, 8192, 8192, 1309.1 },
      { { bm = 192, bn = 192 }, 8192, 8192, 1024, 191.5 }, { { bm = 192, bn = 192 }, 8192, 8192, 8192, 1360.7 },
      { { bn = 128 }, 256, 8192, 8192, 55.7 }, { { bn = 128, cluster = C21 }, 256, 8192, 8192, 48.3 },
      { { bn = 128, cluster = C21, schedule = "splitk", splits = 2 }, 1024, 1024, 16384, 49.8 },
    } do
      local est = MC.estimate(r[1], r[2], r[3], r[4], "bf16", 132)
      assert.is_true(math.abs(est / r[5] - 1) < 0.05, ("%dx%dx%d: model %.1f us, measured %.1f"):format(r[2], r[3], r[4], est, r[5]))
    end
  end)

  -- the seventh session's sweep: the cooperative 128 x 256 in a 2 x 1 cluster
  -- on the projections took 0.63-0.66 us a k block (halved reads of B made it
  -- 0.567 in the model, 8-24 % short); ping-pong 128 x 192, within 1 % of it a
  -- flop, was then never measured there
  it("measures ping-pong 128 x 192 where it ties the cooperative cluster", function()
    for _, s in ipairs { { 2048, 6144, 4096 }, { 4096, 6144, 4096 }, { 8192, 6144, 4096 }, { 4096, 28672, 4096 } } do
      local pp = false
      for _, o in ipairs(tl.gemm.candidates { m = s[1], n = s[2], k = s[3], sms = 132, count = 3 }) do
        pp = pp or (o.consumers == "pingpong" and o.bn == 192)
      end
      assert.is_true(pp, ("%dx%dx%d"):format(s[1], s[2], s[3]))
    end
    local MC = require "tilua.stdlib.gemm_choice"
    local coop = MC.estimate({ bn = 256, cluster = { 2, 1 } }, 2048, 8192, 28672, "bf16", 132)
    assert.is_true(coop > 1100 and coop < 1150) -- (measured 1148.6 us in that sweep)
  end)

  -- s11gemm-2: where M > N the cooperative 128 x 256 in a 1 x 2 cluster ran
  -- 0.4-1.6 % under 128 x 256 alone (16384 x 4096 x 4096 and 14336, 8192 x
  -- 4096 x 4096 and 14336); the seventh session's picks there were 256 x 128
  -- in a 1 x 2 cluster, the mirror of the projections' 128 x 256 in a 2 x 1 one
  it("offers 256 x 128 in a 1 x 2 cluster where M > N", function()
    for _, s in ipairs { { 8192, 4096, 4096 }, { 8192, 4096, 14336 }, { 16384, 4096, 4096 } } do
      local found = false
      for _, o in ipairs(tl.gemm.candidates { m = s[1], n = s[2], k = s[3], sms = 132, count = 3 }) do
        found = found or (o.bm == 256 and o.bn == 128 and o.cluster and o.cluster[2] == 2)
      end
      assert.is_true(found, ("%dx%dx%d"):format(s[1], s[2], s[3]))
    end
  end)

  -- s11gemm-2: ping-pong 128 x 192 the fastest form at 16384 x 8192 x 28672
  -- (+3.2 %) and 8192 x 6144 x 4096 (+2.7 %), within 1 % of the model's first
  it("measures the best ping-pong form where it is within PINGPONG_TIE of the first", function()
    local MC = require "tilua.stdlib.gemm_choice"
    for _, s in ipairs { { 16384, 8192, 28672 }, { 8192, 6144, 4096 }, { 8192, 10240, 8192 } } do
      local list, est = tl.gemm.candidates { m = s[1], n = s[2], k = s[3], sms = 132, count = 2 }
      assert.equal("pingpong", list[2].consumers, ("%dx%dx%d"):format(s[1], s[2], s[3]))
      assert.is_true(est[2] <= est[1] * MC.PINGPONG_TIE)
    end
    -- not where it is further: 4096^3 (6 rounds of its tiles against 4)
    for _, o in ipairs(tl.gemm.candidates { m = 4096, n = 4096, k = 4096, sms = 132, count = 2 }) do
      assert.is_nil(o.consumers)
    end
  end)

  it("offers one of a tile and its transpose (128 x 256, 256 x 128) where M = N: mirror images", function()
    for _, s in ipairs { { 12288, 12288, 12288 }, { 4096, 4096, 4096 }, { 8192, 8192, 1024 }, { 2048, 2048, 2048 } } do
      local seen = {}
      for _, o in ipairs(tl.gemm.candidates { m = s[1], n = s[2], k = s[3], sms = 132, count = 4 }) do
        if (o.bm or 128) * o.bn == 128 * 256 and not o.consumers then
          -- (the same cluster size and schedule: 2 x 1 and 1 x 2 are one already)
          local key = ("%s/%s"):format(o.cluster and o.cluster[1] * o.cluster[2] or 1, o.schedule)
          assert.is_nil(seen[key], ("%dx%dx%d"):format(s[1], s[2], s[3]))
          seen[key] = true
        end
      end
    end
  end)

  it("plans for the SMs it is given", function()
    -- 64 tiles of 128 x 128: a wave on 64 SMs, half of one on 132
    local a = tl.gemm.candidates { m = 1024, n = 1024, k = 16384, sms = 64, count = 1 }
    local b = tl.gemm.candidates { m = 1024, n = 1024, k = 16384, sms = 132, count = 1 }
    assert.is_true(tile_fill(a[1], 1024, 1024, 64) >= 0.9 and tile_fill(b[1], 1024, 1024, 132) >= 0.9)
    assert.are_not.same(a[1], b[1])
  end)

  it("gives decode-sized M the swapped forms and the forms that fill the SMs, ranked by the decode model", function()
    local list, est = tl.gemm.candidates { m = 16, n = 6144, k = 4096 }
    assert.equal(3, #list)
    for i, o in ipairs(list) do
      assert.is_true(o.swap_ab) -- (the tokens on wgmma's M side from 33 rows only)
      assert.is_true(est[i] > 0 and (i == 1 or est[i] >= est[i - 1]))
    end
    local one = tl.gemm.candidates { m = 1, n = 6144, k = 4096, count = 8 }
    for _, o in ipairs(one) do assert.is_true(o.swap_ab) end
    -- every fill form runs at most a piece an SM, whole clusters of 2 sharing A
    -- (swapped: A's rows in halves of whole 8-row groups)
    for _, s in ipairs { { 64, 4096, 4096 }, { 40, 10240, 8192 }, { 16, 4096, 14336 }, { 64, 28672, 4096 }, { 64, 4104, 4104 } } do
      local fill = require("tilua.stdlib.gemm_choice").decode_fill(s[1], s[2], s[3], 132)
      assert.is_true(#fill >= 1)
      for _, o in ipairs(fill) do
        local full = { m = s[1], n = s[2], k = s[3], sms = 132 }
        for key, v in pairs(o) do full[key] = v end
        local g = tl.gemm.build(full)
        assert.is_true(g.grid <= 132, ("%dx%dx%d: grid %d"):format(s[1], s[2], s[3], g.grid))
        if o.cluster then assert.equal(2, g.cfg.cluster) assert.equal("splitk", o.schedule) end
        if o.cluster and o.swap_ab then assert.is_true(o.cluster[1] == 2 and o.bn % 16 == 0) end
        if o.cluster and not o.swap_ab then assert.same({ 1, 2 }, o.cluster) end
        if o.consumers == "ksplit" then assert.equal(128, o.bk) end -- (256 bytes of each row a stage: s19-13)
      end
    end
  end)

  -- The sweep's fastest form of each decode shape (requests main-final, 1 token,
  -- and s12decode-1 and -2, 16 and 64 tokens, the same fastest form in both;
  -- docs/PERF.md, twelfth session) is among the three the model offers
  it("offers the measured fastest decode form among its first three", function()
    local fastest = {
      { 1, 6144, 4096, { swap_ab = true } },
      { 1, 4096, 4096, { swap_ab = true, bm = 128, schedule = "splitk" } },
      { 1, 57344, 8192, { swap_ab = true, bm = 128, schedule = "streamk" } },
      { 16, 6144, 4096, { swap_ab = true, bm = 128 } },
      { 16, 4096, 4096, { swap_ab = true, bm = 128, schedule = "splitk" } },
      { 16, 28672, 4096, { swap_ab = true, schedule = "streamk", bk = 128 } },
      { 16, 4096, 14336, { swap_ab = true, bm = 64, bn = 16, cluster = { 2, 1 }, schedule = "splitk", splits = 2 } },
      { 16, 8192, 8192, { swap_ab = true } },
      { 16, 10240, 8192, { swap_ab = true, bm = 128, schedule = "streamk" } },
      { 16, 57344, 8192, { swap_ab = true, bm = 128, schedule = "streamk" } },
      { 16, 8192, 28672, { swap_ab = true } }, -- (s12decode-1 only)
      { 64, 6144, 4096, { bm = 64, bn = 48, wgs = 1 } },
      { 64, 4096, 4096, { bm = 64, bn = 64, wgs = 1, cluster = { 1, 2 }, schedule = "splitk", splits = 2 } },
      { 64, 28672, 4096, { bm = 64, bn = 224, wgs = 1 } },
      { 64, 10240, 8192, { bm = 64, bn = 80, wgs = 1 } },
      { 64, 8192, 8192, { bm = 64, bn = 64, wgs = 1 } },
      { 64, 57344, 8192, { swap_ab = true, bm = 128, schedule = "streamk" } },
      { 64, 4096, 14336, { bm = 64, bn = 64, wgs = 1, cluster = { 1, 2 }, schedule = "splitk", splits = 2 } },
      { 64, 8192, 28672, { bm = 64, bn = 64, wgs = 1 } },
      -- 128 tokens (the projection model; s12decode-2, and the eighth session
      -- for 128x8192x8192, 128x57344x8192 and 128x8192x28672)
      { 128, 6144, 4096, { bn = 48 } },
      { 128, 4096, 4096, { bn = 64, schedule = "splitk", splits = 2 } },
      { 128, 28672, 4096, { bn = 224 } },
      { 128, 4096, 14336, { bn = 64, schedule = "splitk", splits = 2 } },
      { 128, 10240, 8192, { bn = 80 } },
      { 128, 8192, 8192, { bn = 64 } },
      { 128, 8192, 28672, { bn = 128, schedule = "splitk", splits = 2 } },
    }
    for _, f in ipairs(fastest) do
      local list = tl.gemm.candidates { m = f[1], n = f[2], k = f[3], sms = 132 }
      local found = false
      for _, o in ipairs(list) do found = found or require("luassert.util").deepcompare(o, f[4], true) end
      assert.is_true(found, ("%dx%dx%d"):format(f[1], f[2], f[3]))
    end
  end)

  it("is what the sweep of tools/bench/gemm.lua measures (--choice: no GPU)", function()
    local out, err = H.tilua_run { "tools/bench/gemm.lua", "--sweep", "--choice", "--only=rows256,issue", "--count=2" }
    local lines = {}
    for l in out:gmatch "[^\n]+" do lines[#lines + 1] = l end
    assert.equal(16, #lines, err)
    assert.truthy(lines[1]:find("^256x6144x4096 bf16%s+rows256"))      -- the classes in the order named
    assert.truthy(lines[9]:find("^1024x1024x16384 bf16%s+issue"))
    local list = tl.gemm.candidates { m = 256, n = 6144, k = 4096, count = 2 }
    assert.equal(2, select(2, lines[1]:gsub(" us %(", "")))          -- two candidates, each with its time
    assert.truthy(lines[1]:find(("%dx%d"):format(list[1].bm or 128, list[1].bn), 1, true))
  end)

  -- s14sweep-1 (docs/PERF.md, fourteenth session), H200: cuBLAS's forms on the
  -- projections of 256 to 1024 tokens (320x128 coopB at 512 and 1024 x 10240 x
  -- 8192 and 1024 x 57344 x 8192, 128x64 1x2 at 256 x 4096 x 4096) and ours
  it("offers the forms that won on the 256-1024-token projections, fitted within 3 %", function()
    local MC = require "tilua.stdlib.gemm_choice"
    local C21 = { 2, 1 }
    for _, r in ipairs {
      { { bm = 256, bn = 160, cluster = C21 }, 512, 10240, 8192, 107.4 },
      { { bm = 256, bn = 160, cluster = C21 }, 1024, 10240, 8192, 206.8 },
      { { bm = 256, bn = 176, cluster = C21 }, 1024, 57344, 8192, 1142.4 },
      { { bm = 64, bn = 128, wgs = 1, cluster = C21 }, 256, 4096, 4096, 17.4 },
    } do
      local est = MC.estimate(r[1], r[2], r[3], r[4], "bf16", 132)
      assert.is_true(math.abs(est / r[5] - 1) < 0.03, ("%dx%dx%d: model %.1f us, measured %.1f"):format(r[2], r[3], r[4], est, r[5]))
    end
    -- (want's false: absent; a table: a cluster's extents)
    local function eq(a, b)
      if b == false then return a == nil end
      if type(b) == "table" then return type(a) == "table" and a[1] == b[1] and a[2] == b[2] end
      return a == b
    end
    local function has(list, want)
      for _, o in ipairs(list) do
        local same = true
        for key, v in pairs(want) do same = same and eq(o[key], v) end
        if same then return true end
      end
      return false
    end
    local function top(m, n, k) return tl.gemm.candidates { m = m, n = n, k = k, sms = 132, count = 3 } end
    assert.is_true(has(top(512, 10240, 8192), { bm = 256, bn = 160 }))
    assert.is_true(has(top(1024, 10240, 8192), { bm = 256, bn = 160 }))
    assert.is_true(has(top(1024, 57344, 8192), { bm = 256, bn = 176, cluster = C21 }))
    assert.is_true(has(top(256, 4096, 4096), { bm = 64, bn = 128, wgs = 1, cluster = C21 }))
    -- 512 x 4096 x 14336: a split-K pair no longer fills two places, the whole 128 x 128 c2x1 is measured
    assert.is_true(has(top(512, 4096, 14336), { bn = 128, cluster = C21, schedule = false }))
    -- not offered beyond where measured: 256 x 160 / 176 above 1024 rows, 64 x 128's cluster at 128
    for _, o in ipairs(tl.gemm.candidates { m = 4096, n = 57344, k = 8192, sms = 132, count = 8 }) do
      assert.is_false(o.bm == 256 and (o.bn == 160 or o.bn == 176))
    end
    assert.is_false(has(tl.gemm.candidates { m = 128, n = 8192, k = 8192, sms = 132, count = 8 },
                        { bm = 64, bn = 128, cluster = C21 }))
  end)

  it("measures the sweep's treatment of the shapes --shapes names, in that order (--sweep --shapes)", function()
    local out, err = H.tilua_run { "tools/bench/gemm.lua", "--sweep", "--choice", "--shapes=512x4096x14336,256x4096x4096,100x200x300" }
    local lines = {}
    for l in out:gmatch "[^\n]+" do lines[#lines + 1] = l end
    assert.equal(3, #lines, err)
    assert.truthy(lines[1]:find("^512x4096x14336 bf16%s+rows512"))    -- a sweep shape keeps its class
    assert.truthy(lines[2]:find("^256x4096x4096 bf16%s+rows256"))
    assert.truthy(lines[3]:find("^100x200x300 bf16 "))                 -- one the sweep lacks is measured too
  end)

  it("refuses bad input with a clear error", function()
    assert.error_matches(function() tl.gemm.candidates { m = 0, n = 1, k = 1 } end, "gemm.candidates: 'm' must be a positive integer")
    assert.error_matches(function() tl.gemm.candidates { m = 1, n = 1, k = 1, count = 0 } end, "count must be a positive integer")
    assert.error_matches(function() tl.gemm.candidates(5) end, "expected a table")
  end)
end)
