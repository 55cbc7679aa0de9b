-- fp8 GEMMs as tile programs (examples/tile_gemm_fp8.lua): tensors of 8-bit
-- integers holding e4m3 / e5m2 bytes, tl.dot's fp8 option (tileas.dot
-- {fp8}), the scales on the f32 accumulator (per tensor; per row of A and per
-- column of B). tile-to-ptx gives wgmma of kind e4m3 (k 32 a step) over TMA
-- boxes of 128 bytes of K, each k block summed from zero and added to the f32
-- accumulator once complete (the promotion); on the emulator the lowered kernel computes what
-- the CPU does from the decoded bytes, bit for bit (values whose products and
-- sums are exact in f32, power-of-two scales: the one rounding is bf16's), e4m3 and e5m2.
local tl = require "tilua"
local PH = dofile "spec/protocol_helper.lua"
local values = require "tilua.emulate.values"

local H = dofile "spec/helper.lua"
local ex = assert(loadfile "examples/tile_gemm_fp8.lua")("--library")

-- fp8 bytes of magnitude in [0.25, 4), either sign: e4m3 (exponent fields
-- 5 .. 8, 3 mantissa bits) or e5m2 (13 .. 16, 2 bits)
local function fp8_bytes(n, seed, fmt)
  local s, bytes, v = seed, {}, {}
  for i = 0, n - 1 do
    s = (s * 1103515245 + 12345) & 0x7fffffff
    local r = s >> 8
    local b = fmt == "e5m2" and (((r & 1) << 7) | ((13 + (r >> 1) % 4) << 2) | ((r >> 3) & 3))
      or (((r & 1) << 7) | ((5 + (r >> 1) % 4) << 3) | ((r >> 3) & 7))
    bytes[i + 1], v[i] = string.char(b), values.fp8_dec[fmt or "e4m3"](b)
  end
  return v, table.concat(bytes)
end
local function f32s(list)
  local out = {}
  for i, x in ipairs(list) do out[i] = string.pack("<f", x) end
  return table.concat(out)
end

-- C (bf16 bytes, M x N) equal on every element to want(i, j) rounded to bf16.
local function assert_bf16(out, M, N, want_of)
  local bad, first = 0, nil
  for i = 0, M - 1 do
    for j = 0, N - 1 do
      local want = values.float16.dec.bf16(values.float16.enc.bf16(want_of(i, j)))
      local got = values.float16.dec.bf16((string.unpack("<I2", out, 1 + 2 * (i * N + j))))
      if got ~= want then
        bad = bad + 1
        first = first or ("C[%d, %d] = %g, want %g"):format(i, j, got, want)
      end
    end
  end
  assert.equal(0, bad, first)
end

describe("an fp8 GEMM as a tile program", function()
  it("lowers to wgmma of kind e4m3 (e5m2) over 128-byte TMA boxes; ptxas takes every scaling", function()
    for _, o in ipairs { { scales = "tensor", fp8 = "e4m3" }, { scales = "rowcol", fp8 = "e5m2" }, { scales = "blocks", fp8 = "e4m3" },
                         { scales = "blocks", fp8 = "e4m3", cluster = 2 }, { scales = "tensor", fp8 = "e4m3", fast = true },
                         { scales = "tensor", fp8 = "e4m3", fast = true, pdl = true }, { scales = "blocks", fp8 = "e4m3", pdl = true },
                         { scales = "blocks", fp8 = "e4m3", prefetch = 4 }, { scales = "tensor", fp8 = "e4m3", fast = true, consumers = "cooperative" },
                         { scales = "rowcol", fp8 = "e5m2", fast = true }, { scales = "tensor", fp8 = "e4m3", bn = 144 },
                         { scales = "blocks", fp8 = "e4m3", consumers = "pingpong", bm = 64, stages = 8 },
                         { scales = "tensor", fp8 = "e4m3", consumers = "pingpong", bm = 64, stages = 8 },
                         { scales = "tensor", fp8 = "e4m3", promote = "fma", stages = 4 } } do
      local k = ex.build(o)
      local ptx = k:compile()
      -- a programmatic dependent launch: the producer's first TMA and the
      -- consumers' first global access come after a griddepcontrol.wait
      local wait = ptx:find("griddepcontrol.wait;", 1, true)
      assert.equal(o.pdl or false, wait ~= nil)
      if o.pdl then
        assert.truthy(wait < ptx:find("cp.async.bulk.tensor", 1, true))
        local rest = ptx:sub((ptx:find("setmaxnreg.inc", 1, true)))
        local cw = rest:find("griddepcontrol.wait;", 1, true)
        assert.truthy(cw and cw < (rest:find("[ls]t%.global") or math.huge) and cw < rest:find("cp.async.bulk.tensor", 1, true), "the consumers' wait")
        assert.matches("griddepcontrol.launch_dependents;", ptx, 1, true)
      end
      -- (fast: ping-pong 128 x 192 programs, each consumer two m64n192 wgmma a
      -- k step; cooperative or on a cluster 128 x 256)
      local pp = o.fast and o.consumers ~= "cooperative" and not o.cluster
      assert.matches(("wgmma.mma_async.sync.aligned.m64n%dk32.f32.%s.%s"):format(pp and 192 or o.fast and 256 or o.bn or 128, o.fp8, o.fp8),
                     ptx, nil, true)
      local types = {}
      for i, a in ipairs(k:lowered_op():region(1):entry():args()) do types[i] = tostring(a:type()) end
      -- (on the cluster: each CTA loads half of the multicast box)
      assert.equal(("!tile.tensor_map<i8, sw128, %d, 128>"):format(o.cluster and 64 or o.bm or 128), types[1])
      H.assert_ptxas_fast(ptx)
      -- the promotion a block late: two sums in flight by turns, neither
      -- copied while a wgmma writes it (C7514: ptxas would serialize), no spills
      local log = H.ptxas_log(ptx)
      H.lacks(log, "C7514")
      H.has(log, "0 bytes spill stores")
      -- block scales with prefetch = 4: the scales' lines prefetched into L1
      -- 4 k blocks ahead; the example's default (0, no prefetch) has none
      local _, pf = ptx:gsub("prefetch%.global%.L1", "")
      assert.equal(o.prefetch == 4 and 24 or 0, pf)
    end
  end)

  -- (K: 2 k blocks: the first and one more after the loop; 3: one pair in
  -- the loop, whose promotion lags a block; 1: the first block alone; fast:
  -- no promotion: ping-pong 128 x 192 programs, 260 rows: 3 programs, on 2
  -- CTAs and on one, so that both consumers take turns; cooperative: 128 x
  -- 256 tiles; pdl: each program waits for the previous grid; bn 144: the
  -- promoted form on 128 x 144 tiles; pingpong 64: the promoted form on
  -- ping-pong consumers of 64 x 128 programs, 3 x 1 of them, on 2 CTAs and on 1;
  -- fma: each k block's sum scaled by sa * sb as it is promoted, a power of
  -- two, so bit for bit as the scale applied once)
  for _, v in ipairs { { false, "e4m3", 160 }, { true, "e4m3", 300 }, { true, "e5m2", 96 }, { false, "e4m3", 400, true },
                       { true, "e4m3", 300, false, true }, { false, "e4m3", 400, true, false, "cooperative" },
                       { true, "e5m2", 160, true }, { false, "e4m3", 300, false, false, nil, 144 },
                       { false, "e4m3", 400, false, false, "pingpong", nil, 64 }, { false, "e4m3", 300, false, false, nil, nil, nil, "fma" },
                       { false, "e4m3", 300, false, false, nil, nil, nil, nil, "lag=0" },
                       { false, "e4m3", 400, false, false, nil, nil, nil, nil, "release_index=1" } } do
    local rowcol, fmt, K, fast, pdl, consumers, bn, bm, promote, lowering = v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10]
    local pp = fast and consumers ~= "cooperative" or bm ~= nil
    local M, N = pp and 260 or 130, bn and 200 or 100
    it(("%s, %d x %d x %d (K ragged), %s scales%s%s%s%s%s, on 2 persistent CTAs%s: the CPU reference, bit for bit"):format(
      fmt, M, N, K, rowcol and "row / column" or "per-tensor", fast and ", fast accumulation" or "", pdl and ", PDL" or "",
      bm and ", ping-pong 64 x 128" or pp and ", ping-pong 128 x 192" or fast and ", cooperative 128 x 256" or "", bn and (", 128 x %d tiles"):format(bn) or "",
      promote and ", promoted by FFMA with sa * sb" or lowering and ", lowered with " .. lowering or "", pp and " and on 1" or ""), function()
      local k = ex.build { scales = rowcol and "rowcol" or "tensor", fp8 = fmt, fast = fast, pdl = pdl, consumers = consumers, bn = bn, bm = bm,
                           promote = promote }
      local kop = PH.lowered_tile(k, lowering)
      if bm then M = 130 end
      local A, ab = fp8_bytes(M * K, 11, fmt)
      local B, bb = fp8_bytes(N * K, 12, fmt)
      local sa, sb = {}, {}
      for i = 1, M do sa[i] = 2.0 ^ (i % 3 - 1) end
      for j = 1, N do sb[j] = 2.0 ^ -(j % 4) * (j % 2 == 0 and 1 or -1) end
      local vals = { ["map:A"] = { data = ab, shape = { M, K } }, ["map:B"] = { data = bb, shape = { N, K } },
                     ["map:C"] = { bytes = M * N * 2, shape = { M, N } }, ["arg:K"] = K, ["programs:x"] = (M + k.program_rows - 1) // k.program_rows,
                     ["programs:y"] = (N + k.program_cols - 1) // k.program_cols,
                     -- (128 x 144: C stored by plain stores, not stmatrix + TMA: a pointer)
                     ["ptr:C"] = string.rep("\0", M * N * 2), ["dim:C:0"] = M, ["dim:C:1"] = N, ["stride:C:0"] = N }
      if rowcol then
        vals["ptr:sa"], vals["dim:sa:0"], vals["ptr:sb"], vals["dim:sb:0"] = f32s(sa), M, f32s(sb), N
      else
        vals["arg:sa"], vals["arg:sb"] = 0.5, -0.25
      end
      local args, at = PH.params_args(kop, vals)
      for _, grid in ipairs(pp and { 2, 1 } or { 2 }) do
        local r = tl.emulate(kop, { grid = grid, args = args, policy = "random", seed = 5 })
        assert(r.ok, r.report)
        assert_bf16(r.read(at["map:C"] or at["ptr:C"]), M, N, function(i, j)
          local s = 0
          for kk = 0, K - 1 do s = s + A[i * K + kk] * B[j * K + kk] end
          return s * (rowcol and sa[i + 1] * sb[j + 1] or -0.125)
        end)
      end
    end)
  end

  -- (prefetch: none, the example's default, whose scales the producer's TMA
  -- brings into the stages (staged.lua), and 4 k blocks ahead: global loads
  -- a block ahead around prefetches that are no-ops on the emulator; K 400:
  -- 4 k blocks, the first, a pair in the loop, one after it; K 300: 3, the
  -- first, a pair, none after; pingpong: ping-pong consumers of 64 x 128
  -- programs, 3 x 2 of them, both consumers reading the one line of A's
  -- scales a stage, on 2 CTAs and on 1)
  -- lag=0: each k block waited for whole, then promoted (DeepGEMM's order;
  -- K 400: 4 blocks, 300: 3, 112: 1), staged by TMA and with global loads;
  -- staged_base=1: A's staged line addressed as the thread's stage-0 address
  -- plus the stage's offset; release_index=1: the release cursor moved to the
  -- wait's of the block issued last (K 400 and 300: the lagged loop's two tails, 112:
  -- its first block only; ping-pong: with the hand-off); linear_desc=0: the
  -- wgmma descriptors from each element's address, the default before
  -- s16fp8-3 (the cases without options run the default: linear descriptors
  -- in the lagged loop of staged scales, asserted below)
  for _, v in ipairs { { 0, 400 }, { 4, 400 }, { 0, 300 }, { 0, 400, "pingpong" }, { 0, 400, nil, "lag=0" },
                       { 0, 300, nil, "lag=0" }, { 0, 112, nil, "lag=0" }, { 4, 300, nil, "lag=0" },
                       { 0, 400, nil, "staged_base=1" }, { 0, 400, nil, "release_index=1" }, { 0, 300, nil, "release_index=1" },
                       { 0, 112, nil, "staged_base=1,release_index=1" }, { 4, 300, nil, "release_index=1" },
                       { 0, 400, "pingpong", "staged_base=1,release_index=1" },
                       { 0, 300, nil, "staged_base=1,release_index=1,linear_desc=1" },
                       { 0, 400, nil, "linear_desc=0" }, { 0, 300, nil, "linear_desc=0" }, { 0, 112, nil, "linear_desc=0" } } do
    local pf, K, pingpong, lowering = v[1], v[2], v[3], v[4]
    it(("block scales (per row and 128 of K for A, per 128 x 128 for B), 130 x 200 x %d (every size ragged; %d k blocks), "
      .. "%s, on 2 persistent CTAs%s%s: the CPU reference, bit for bit"):format(K, (K + 127) // 128,
      pf > 0 and ("global loads, L1 prefetch %d k blocks ahead"):format(pf) or "staged by TMA",
      pingpong and " and on 1, ping-pong 64 x 128" or "", lowering and (", lowered with " .. lowering) or ""), function()
      local k = ex.build { scales = "blocks", fp8 = "e4m3", prefetch = pf, consumers = pingpong, bm = pingpong and 64 }
      local kop = PH.lowered_tile(k, lowering)
      local M, N = 130, 200
      local A, ab = fp8_bytes(M * K, 21)
      local B, bb = fp8_bytes(N * K, 22)
      local ssa, ssb = ex.block_scale_shapes(M, N, K)
      local sa, sb = {}, {}
      for i = 1, ssa[1] * ssa[2] do sa[i] = 2.0 ^ (i % 5 - 2) end
      for i = 1, ssb[1] * ssb[2] do sb[i] = 2.0 ^ -(i % 3) * (i % 2 == 0 and 1 or -1) end
      local vals = { ["map:A"] = { data = ab, shape = { M, K } }, ["map:B"] = { data = bb, shape = { N, K } },
                     ["map:C"] = { bytes = M * N * 2, shape = { M, N } }, ["arg:K"] = K, ["programs:x"] = (M + k.program_rows - 1) // k.program_rows, ["programs:y"] = 2,
                     ["ptr:sa"] = f32s(sa), ["dim:sa:0"] = ssa[1], ["dim:sa:1"] = ssa[2], ["stride:sa:0"] = ssa[2],
                     ["ptr:sb"] = f32s(sb), ["dim:sb:0"] = ssb[1], ["dim:sb:1"] = ssb[2], ["stride:sb:0"] = ssb[2],
                     -- (without prefetch the scales come into the stages by TMA: staged.lua)
                     ["map:sa"] = { data = f32s(sa), shape = ssa }, ["map:sb"] = { data = f32s(sb), shape = ssb } }
      local args, at = PH.params_args(kop, vals)
      for _, grid in ipairs(pingpong and { 2, 1 } or { 2 }) do
        local r = tl.emulate(kop, { grid = grid, args = args, policy = "random", seed = 7 })
        assert(r.ok, r.report)
        assert_bf16(r.read(at["map:C"]), M, N, function(i, j)
          local want = 0
          for kb = 0, ssa[1] - 1 do
            local s = 0
            for kk = kb * 128, math.min(K, kb * 128 + 128) - 1 do s = s + A[i * K + kk] * B[j * K + kk] end
            want = want + s * sa[kb * ssa[2] + i + 1] * sb[j // 128 * ssb[2] + kb + 1]
          end
          return want
        end)
      end
    end)
  end

  -- The descriptors' rule (consumer.lua's desc): by default the lagged loop of
  -- staged block scales lowers as with linear_desc=1 and not as with
  -- linear_desc=0; per-tensor, global-load block scales (prefetch) and ping-pong
  -- consumers keep the address form (as with linear_desc=0). So the emulator's
  -- default cases above run the linear form.
  it("the wgmma descriptors' rule: linear by default in the lagged loop of staged block scales only", function()
    local function text(k, lowering)
      local m = PH.lowered_tile(k, lowering)
      while m:parent() do m = m:parent() end
      return m:print()
    end
    for _, c in ipairs { { { scales = "blocks", fp8 = "e4m3" }, true }, { { scales = "tensor", fp8 = "e4m3" }, false },
                         { { scales = "blocks", fp8 = "e4m3", prefetch = 4 }, false },
                         { { scales = "blocks", fp8 = "e4m3", consumers = "pingpong", bm = 64 }, false } } do
      local k = ex.build(c[1])
      local default, on, off = text(k), text(k, "linear_desc=1"), text(k, "linear_desc=0")
      assert.is_true(on ~= off, "linear_desc changes nothing")
      assert.are.equal(c[2], default == on)
      assert.are.equal(not c[2], default == off)
    end
  end)

  -- (the example's block scales staged by TMA, staged.lua; its fast form on
  -- ping-pong consumers, 128 x 192; block scales on ping-pong consumers of
  -- 64 x 128 programs)
  for _, v in ipairs { { "block scales staged by TMA (staged.lua)", { "--blocks" }, "blocks scales" },
                       { "fast accumulation on ping-pong consumers (128 x 192)", { "--fast" }, "tensor scales %(fast accumulation%)" },
                       { "block scales on ping-pong consumers of 64 x 128 programs", { "--blocks", "--pingpong", "--bm=64" }, "blocks scales" },
                       { "block scales, each k block promoted once waited for (--lag=0)", { "--blocks", "--lag=0" }, "blocks scales" } } do
    it(v[1] .. ": the example on the emulator, the barrier protocol checked after every pass", function()
      local cmd = { "examples/tile_gemm_fp8.lua", table.unpack(v[2]) }
      cmd[#cmd + 1] = "--emulate"
      local out, err, code = H.tilua_env({ TILUA_SEED = "20261130", TILUA_CHECK_PROTOCOL = "1" }, cmd, 120)
      assert.equal(0, code, err)
      assert.matches("tile_gemm_fp8: OK, seed 20261130, e4m3 " .. v[3] .. ", 200 x 296 x 256 on CPU emulator[^\n]*, 0 mismatches", out)
    end)
  end

  it("block scales on a cluster of 2 (256-row programs, 128 rows a CTA, B multicast): the example on the emulator", function()
    local out, err, code = H.tilua_env({ TILUA_SEED = "20261129" }, { "examples/tile_gemm_fp8.lua", "--blocks", "--cluster", "--emulate" }, 120)
    assert.equal(0, code, err)
    assert.matches("tile_gemm_fp8: OK, seed 20261129, e4m3 blocks scales, 200 x 296 x 256 on CPU emulator[^\n]*, 0 mismatches", out)
  end)

  it("refuses an fp8 dot of a transposed operand, an unknown fp8 format, fast_accum without fp8, and a promoted one on ping-pong", function()
    tl.new_module()
    local k = tl.tile_kernel("t", { params = { A = tl.tensor(tl.i8, 2), C = tl.tensor(tl.f32, 2) } })
    assert.has_error(function()
      k:define(function(k, p)
        local a = tl.load(p.A, { 0, 0 }, { 64, 64 })
        tl.store(p.C, { 0, 0 }, tl.dot(a, a, { fp8 = "e3m4" }))
      end)
    end, 'dot: fp8 is "e4m3" or "e5m2", got e3m4')
    tl.new_module()
    k = tl.tile_kernel("t", { params = { A = tl.tensor(tl.bf16, 2), C = tl.tensor(tl.f32, 2) } })
    assert.has_error(function()
      k:define(function(k, p)
        local a = tl.load(p.A, { 0, 0 }, { 64, 64 })
        tl.store(p.C, { 0, 0 }, tl.dot(a, a, { fast_accum = true }))
      end)
    end, 'dot: fast_accum is an option of fp8 dots (fp8 = "e4m3" | "e5m2")')
    tl.new_module()
    k = tl.tile_kernel("t", { params = { A = tl.tensor(tl.i8, 2), B = tl.tensor(tl.i8, 2), C = tl.tensor(tl.bf16, 2), K = tl.i32 } })
    k:define(function(k, p)
      local acc = tl.for_tiles(p.K, { tile = 128, stages = 2 }, tl.zeros({ 128, 128 }, tl.f32), function(kk, acc)
        return tl.dot(tl.load(p.A, { 0, kk }, { 128, 128 }), tl.load(p.B, { kk, 0 }, { 128, 128 }), acc,
                      { fp8 = "e4m3", transpose_b = false })
      end)
      tl.store(p.C, { 0, 0 }, acc:cast(tl.bf16))
    end)
    -- (every program stores to one place: the protocol check would refuse it first)
    local saved = tl.options.check_protocol
    tl.options.check_protocol = false
    local ok, err = pcall(k.compile, k)
    tl.options.check_protocol = saved
    assert.is_false(ok)
    assert.matches("an fp8 dot takes a as %[M, K%] and b as %[N, K%]", tostring(err))
    -- a promoted fp8 dot on 128-row ping-pong consumers: a k block's sum
    -- beside the whole accumulator would not fit a warpgroup's registers
    tl.new_module()
    k = tl.tile_kernel("t", { params = { A = tl.tensor(tl.i8, 2), B = tl.tensor(tl.i8, 2), C = tl.tensor(tl.bf16, 2), K = tl.i32 } })
    k:define(function(k, p)
      local m, n = tl.program_id("x"), tl.program_id("y")
      local acc = tl.for_tiles(p.K, { tile = 128, stages = 2, consumers = "pingpong" }, tl.zeros({ 128, 128 }, tl.f32), function(kk, acc)
        return tl.dot(tl.load(p.A, { m, kk }, { 128, 128 }), tl.load(p.B, { n, kk }, { 128, 128 }), acc, { fp8 = "e4m3", transpose_b = true })
      end)
      tl.store(p.C, { m, n }, acc:cast(tl.bf16))
    end)
    ok, err = pcall(k.compile, k)
    assert.is_false(ok)
    assert.matches("a 128%-row ping%-pong consumer's dot accumulates 16%-bit operands, or fp8 with fast_accum", tostring(err))
  end)

  it("takes for_tiles' prefetch (k blocks, 0 to 64) onto the loop's tileas.pipeline", function()
    local k = ex.build { scales = "blocks", prefetch = 6 }
    local saved = tl.options.keep_stages
    tl.options.keep_stages = true
    k:compile()
    tl.options.keep_stages = saved
    assert.matches("tileas.pipeline = {prefetch = 6, stages = 4}", tl.last_stages[1].ir, 1, true)
    tl.new_module()
    k = tl.tile_kernel("t", { params = { C = tl.tensor(tl.f32, 2), K = tl.i32 } })
    assert.has_error(function()
      k:define(function(k, p) tl.for_tiles(p.K, { tile = 128, prefetch = 65 }, function() end) end)
    end, "for_tiles: prefetch must be an integer from 0 to 64 (k blocks)")
  end)
end)
