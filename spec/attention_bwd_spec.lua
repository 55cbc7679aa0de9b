-- The attention backward as tile programs (examples/attention_bwd.lua) without
-- a GPU: on the CPU emulator its dQ, dK and dV equal a CPU reference computed
-- from the forward's definition on every element (head dims 64 and 128,
-- causal and not, ragged lengths that are no multiple of the tiles,
-- grouped-query heads summed into their key head), both as written (the tile
-- programs) and as tile-to-ptx lowers them (a producer warpgroup streaming
-- Q, dO or K, V through rings; the dQ program's consumers issuing the two
-- first-stage dots an iteration ahead and dQ += dS K late, the dK/dV
-- program's in order by default, dK += dS^T Q and dV += P^T dO issued in the
-- iteration of S^T and dP^T, or out of order as the dQ program's); the
-- lowered kernels assemble with ptxas unserialized
-- and without spills, and the protocol checker finds nothing wrong in their
-- pipelines.
local H = dofile "spec/helper.lua"
local PH = dofile "spec/protocol_helper.lua"
local AH = dofile "spec/attention_helper.lua"
local tl = require "tilua"

local example = assert(loadfile "examples/attention_bwd.lua")("--library")

local function emulate(...) return AH.emulate(PH, ...) end

-- The inputs of problem c: Q, K, V, dO and the forward's O and LSE (the CPU's).
local function inputs(c)
  local x, bytes = AH.inputs(c, 5 + c.d + c.sq)
  AH.backward_inputs(c, x, bytes, 17 + c.skv)
  return x, bytes
end

-- LSE2's or Delta's tensor of problem c (rows padded: examples/attention_bwd.lua),
-- its bytes data (nil: zeros)
local function padded_rows(c, data)
  local sqp = example.padded(c.sq)
  return { data = data, bytes = not data and c.b * c.h * sqp * 4 or nil, shape = { c.b, c.h, c.sq },
           strides = { c.h * sqp, sqp, 1 } }
end

-- dQ, dK and dV of problem c by the three programs on the emulator (lowered:
-- the lowered kernels on c.ctas CTAs). -> the reference, {dQ, dK, dV bytes}
-- (c.fused: the fused backward, Delta zeroing dQacc, dK/dV adding dS K into
-- it, the conversion to dQ)
local function backward(c, lowered)
  local x, bytes = inputs(c)
  local o, G = { d = c.d, causal = c.causal, bm = c.bm, bn = c.bn, fused = c.fused, kv_bm = c.kv_bm, in_order = c.in_order },
               example.programs(c)
  local q4, kv4, rows = { c.b, c.h, c.sq, c.d }, { c.b, c.hkv, c.skv, c.d }, { c.b, c.h, c.sq }
  local acc = { bytes = c.b * c.h * c.sq * c.d * 4, shape = q4 }
  local read_delta = emulate(example.build_delta(o), G[1], { O = { data = bytes.o, shape = q4 },
    dO = { data = bytes.dout, shape = q4 }, LSE = { data = bytes.lse, shape = rows }, Delta = padded_rows(c),
    LSE2 = padded_rows(c), dQacc = c.fused and acc or nil }, { H = c.h }, lowered)
  local delta, lse2 = read_delta "Delta", read_delta "LSE2"
  if c.fused then acc = { data = read_delta "dQacc", shape = q4 } end
  local function tensors(more)
    local a = { Q = { data = bytes.q, shape = q4 }, K = { data = bytes.k, shape = kv4 }, V = { data = bytes.v, shape = kv4 },
                dO = { data = bytes.dout, shape = q4 }, LSE2 = padded_rows(c, lse2), Delta = padded_rows(c, delta) }
    for k, v in pairs(more) do a[k] = v end
    return a
  end
  local kvbytes, group = c.b * c.hkv * c.skv * c.d * 2, c.h // c.hkv
  local dq
  if not c.fused then
    dq = emulate(example.build_dq(o), G[2], tensors { dQ = { bytes = c.b * c.h * c.sq * c.d * 2, shape = q4 } },
                 { SKV = c.skv, H = c.h, group = group, scale = c.scale }, lowered, c.ctas) "dQ"
  end
  local read = emulate(example.build_dkdv(o), G[3], tensors { dK = { bytes = kvbytes, shape = kv4 },
    dV = { bytes = kvbytes, shape = kv4 }, dQacc = c.fused and acc or nil },
    { SQ = c.sq, HKV = c.hkv, group = group, scale = c.scale }, lowered, c.ctas)
  if c.fused then
    dq = emulate(example.build_dq_convert(o), G[1], { dQacc = { data = read "dQacc", shape = q4 },
      dQ = { bytes = c.b * c.h * c.sq * c.d * 2, shape = q4 } }, { H = c.h, scale = c.scale }, lowered) "dQ"
  end
  return AH.backward_reference(c, x), { dQ = dq, dK = read "dK", dV = read "dV" }
end

local ptxas_log = H.ptxas_log -- (ptxas -v's report on ptx: its spills)

-- The PTX of kernel k, compiled with the compiler's default check (the kernel as
-- written) instead of ctest's check after every pass: the tests of the PTX's
-- shape below compile over 30 full-size kernels, and that check took about 10 s a
-- nvvm stage on each (900 states), 870 of this spec's 1200 s on the dev
-- machine. The default forms' dQ and dK/dV programs at d 64 are still checked
-- after every pass (the first test), and every form's lowered pipelines by
-- "passes the protocol check".
local function ptx_of(k)
  local saved = tl.options.check_protocol
  tl.options.check_protocol = nil
  local ok, ptx = pcall(k.compile, k)
  tl.options.check_protocol = saved
  if not ok then error(ptx, 0) end
  return ptx
end

local function describe_case(c)
  return ("%d x %d heads (%d), %d x %d, d %d%s%s%s"):format(c.b, c.h, c.hkv, c.sq, c.skv, c.d, c.causal and ", causal" or "",
    c.ctas and (", " .. c.ctas .. " CTAs") or "", c.fused and ", fused (dQ added by the dK/dV program)" or "")
    .. (", dK/dV %d x 128 %s"):format(example.tiles(c, "dkdv"), c.in_order == false and "out of order" or "in order")
end

local function check(c, ref, got)
  for _, g in ipairs { { "dQ", "mq" }, { "dK", "mk" }, { "dV", "mv" } } do
    local bad, worst, ratio = AH.backward_compare(c, got[g[1]], ref[g[1]], ref[g[2]])
    assert.equal(0, bad, ("%s: %d elements off, max |got - ref| %.3g (%.2f of the tolerance)"):format(g[1], bad, worst, ratio))
  end
end

describe("the attention backward as tile programs (examples/attention_bwd.lua)", function()
  local CASES = {
    { b = 1, h = 2, hkv = 1, sq = 100, skv = 150, d = 64 },                -- grouped-query heads, ragged
    { b = 1, h = 1, hkv = 1, sq = 150, skv = 100, d = 64, causal = true }, -- key blocks below every query
    { b = 2, h = 1, hkv = 1, sq = 130, skv = 130, d = 128, causal = true },
    { b = 1, h = 2, hkv = 2, sq = 70, skv = 200, d = 128 },
    { b = 1, h = 2, hkv = 1, sq = 190, skv = 60, d = 64, causal = true, bm = 64, bn = 64 },
    { b = 1, h = 2, hkv = 1, sq = 100, skv = 150, d = 64, fused = true },
    { b = 1, h = 1, hkv = 1, sq = 150, skv = 100, d = 64, causal = true, fused = true },
    { b = 2, h = 1, hkv = 1, sq = 130, skv = 130, d = 128, causal = true, fused = true },
    { b = 1, h = 2, hkv = 2, sq = 70, skv = 200, d = 128, fused = true },
  }
  for _, c in ipairs(CASES) do
    c.scale = 1 / math.sqrt(c.d)
    it("as written, on the CPU emulator equals a CPU reference: " .. describe_case(c), function()
      check(c, backward(c, false))
    end)
  end

  -- the lowered kernels (CTAs walking several programs)
  local LOWERED = {
    -- out of order (S^T and dP^T issued an iteration ahead; the narrower dK/dV tiles)
    { b = 1, h = 2, hkv = 1, sq = 100, skv = 150, d = 64, ctas = 2, in_order = false },
    { b = 1, h = 1, hkv = 1, sq = 150, skv = 100, d = 64, causal = true, ctas = 3, in_order = false },
    { b = 1, h = 1, hkv = 1, sq = 130, skv = 200, d = 128, causal = true, ctas = 2, in_order = false },
    { b = 1, h = 2, hkv = 1, sq = 100, skv = 150, d = 64, ctas = 2, fused = true, in_order = false },
    { b = 1, h = 1, hkv = 1, sq = 150, skv = 100, d = 64, causal = true, ctas = 3, fused = true, in_order = false },
    -- the defaults: the dK/dV loop in order (no dot ahead), FlashAttention-3's
    -- wider tiles, S^T and dP^T one wgmma group (d64 128 x 128, d128 64 x 128)
    { b = 1, h = 2, hkv = 1, sq = 300, skv = 150, d = 64, ctas = 2 },
    { b = 1, h = 1, hkv = 1, sq = 150, skv = 260, d = 64, causal = true, ctas = 3 },
    { b = 1, h = 1, hkv = 1, sq = 130, skv = 200, d = 128, causal = true, ctas = 2 },
    -- in order, S^T and dP^T a group each (fewer registers: fused d64 64 x 128, d128 32 x 128)
    { b = 1, h = 2, hkv = 1, sq = 100, skv = 150, d = 64, ctas = 2, fused = true },
    { b = 1, h = 1, hkv = 1, sq = 100, skv = 150, d = 128, ctas = 2, kv_bm = 32 },
  }
  for _, c in ipairs(LOWERED) do
    c.scale = 1 / math.sqrt(c.d)
    it("lowered by tile-to-ptx, on the CPU emulator equals a CPU reference: " .. describe_case(c), function()
      check(c, backward(c, true))
    end)
  end

  -- The backward's loops lower as the forward's chain does (chain.lua, plan.lua:
  -- the loop split where masks keep every element, linear descriptors outside
  -- reducing loops, outputs stored a warpgroup's whole fragment at once in boxes
  -- of 64 x 64), verified on the H200 (spec/attention_bwd_gpu_spec.lua).
  it("stores its outputs a whole fragment at once, as the forward does", function()
    local function count(ptx, pat) return select(2, ptx:gsub(pat, "")) end
    for i, o in ipairs { { d = 64 }, { d = 64, causal = true }, { d = 128 }, { d = 128, causal = true } } do
      local compile = i == 1 and function(k) return k:compile() end or ptx_of -- (the first: ctest's check)
      assert.equal(o.d // 64, count(compile(example.build_dq(o)), "cp%.async%.bulk%.tensor%.%dd%.global%.shared"))
      assert.equal(2 * o.d // 64, count(compile(example.build_dkdv(o)), "cp%.async%.bulk%.tensor%.%dd%.global%.shared"))
    end
  end)

  it("lowers to PTX that ptxas takes unserialized and without spills: S and dP ahead, the dots of registers late", function()
    for _, o in ipairs { { d = 64, in_order = false }, { d = 64, causal = true, in_order = false }, { d = 128, in_order = false },
                         { d = 128, causal = true, in_order = false } } do
      for _, build in ipairs { example.build_dq, example.build_dkdv } do
        local ptx = ptx_of(build(o))
        H.has(ptx, "setmaxnreg.inc.sync.aligned.u32")
        -- a dot of registers: the A operand a vector of 4 registers, not a descriptor
        assert.truthy(ptx:find("k16%.f32%.bf16%.bf16 {[^}]*}, {%%r%d+, %%r%d+, %%r%d+, %%r%d+}"), "no wgmma with A from registers")
        H.assert_ptxas_fast(ptx)
        local log = ptxas_log(ptx)
        H.has(log, "0 bytes spill stores")
      end
    end
  end)

  it("the fused form (d64) lowers to PTX that ptxas takes unserialized: dS^T staged by stmatrix, dQ added by TMA reduce", function()
    for _, o in ipairs { { d = 64, fused = true, in_order = false }, { d = 64, causal = true, fused = true, in_order = false } } do
      local ptx = ptx_of(example.build_dkdv(o))
      H.has(ptx, "setmaxnreg.inc.sync.aligned.u32 240") -- (two consumers that reduce-add: 24 / 240 registers)
      H.has(ptx, "stmatrix")
      H.has(ptx, "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group")
      H.assert_ptxas_fast(ptx)
      local log = ptxas_log(ptx)
      -- (causal: its mask's two paths spill 4 bytes at 240 registers; docs/PERF.md)
      if not o.causal then H.has(log, "0 bytes spill stores") end
    end
  end)

  it("in order (the default: no dot ahead), FlashAttention-3's wider dK/dV tiles lower unserialized: S^T and dP^T one group where their results and dK, dV take 192 registers, else a group each", function()
    local function count(ptx, pat) return select(2, ptx:gsub(pat, "")) end
    for _, o in ipairs { { d = 64, one = true }, { d = 64, causal = true, one = true }, { d = 128, one = true },
                         { d = 128, causal = true, one = true }, { d = 64, kv_bm = 64 }, { d = 128, kv_bm = 32 },
                         { d = 64, fused = true }, { d = 64, causal = true, fused = true } } do
      local ptx = ptx_of(example.build_dkdv(o))
      H.has(ptx, "setmaxnreg.inc.sync.aligned.u32 240") -- (in order: 24 / 240 registers)
      local rows = example.tiles(o, "dkdv")
      H.has(ptx, "wgmma.mma_async.sync.aligned.m64n" .. rows .. "k16") -- (S^T and dP^T: n = the query rows)
      if o.one then -- (d64 128 x 128: 64 + 64 + 32 + 32; d128 64 x 128: 32 + 32 + 64 + 64)
        assert.equal(0, count(ptx, "wgmma.wait_group.sync.aligned 1;"), "S^T waited for apart from dP^T")
      else -- S^T waited for alone (1 pending: dP^T), P^T's exp2 while dP^T runs
        assert.truthy(count(ptx, "wgmma.wait_group.sync.aligned 1;") >= 1, "S^T not waited for apart from dP^T")
      end
      H.assert_ptxas_fast(ptx)
      -- (one group, the wider tiles: S^T and dP^T beside dK and dV spill at 240
      -- registers, d64 128 x 128 60 bytes, causal 68, d128 64 x 128 28, causal
      -- 16, and run 11-12% faster than a group each, which spills more; the
      -- narrower tiles, a group each: none; docs/PERF.md)
      if not o.one then H.has(ptxas_log(ptx), "0 bytes spill stores") end
    end
  end)

  -- o.overlap (and o.delta_pdl; by default dK/dV last and both on): the program
  -- launched last a programmatic dependent launch waiting for the other before
  -- its stores; the first triggers it at its top, after its own wait for Delta
  -- (which the last one reads too); each agent (producer and consumers) runs them.
  it("o.overlap: the first program triggers the last at its top, after its wait for Delta; the last waits before its stores", function()
    local function find_all(ptx, pat)
      local at, i = {}, 1
      while true do
        local s0 = ptx:find(pat, i, true)
        if not s0 then return at end
        at[#at + 1], i = s0, s0 + 1
      end
    end
    for _, o in ipairs { { d = 128 }, { d = 64, causal = true, overlap = "dq" }, { d = 64, overlap = "dkdv", delta_pdl = false } } do
      assert.equal(o.overlap or "dkdv", example.overlap_of(o))
      assert.equal(o.delta_pdl ~= false, example.delta_pdl_of(o))
      local first, last = o.overlap == "dq" and example.build_dkdv or example.build_dq,
                          o.overlap == "dq" and example.build_dq or example.build_dkdv
      local ptx = ptx_of(first(o))
      local waits, triggers = find_all(ptx, "griddepcontrol.wait;"), find_all(ptx, "griddepcontrol.launch_dependents;")
      local loads = find_all(ptx, "cp.async.bulk.tensor")
      assert.equal(2, #triggers) -- (the producer and the consumers)
      assert.equal(o.delta_pdl ~= false and 2 or 0, #waits)
      for i, w in ipairs(waits) do assert.truthy(w < triggers[i], "a trigger before the wait for Delta") end
      assert.truthy(triggers[1] < loads[1], "the producer's first TMA load before its trigger")
      ptx = ptx_of(last(o))
      waits, triggers = find_all(ptx, "griddepcontrol.wait;"), find_all(ptx, "griddepcontrol.launch_dependents;")
      local stores = find_all(ptx, "cp.async.bulk.tensor.4d.global.shared")
      assert.equal(0, #triggers)
      assert.equal(2, #waits)
      assert.truthy(waits[#waits] < stores[1], "the last program stores before its wait")
      local delta = ptx_of(example.build_delta(o))
      assert.equal(o.delta_pdl ~= false and 1 or 0, select(2, delta:gsub("griddepcontrol%.launch_dependents;", "")))
      H.assert_ptxas_fast(ptx)
    end
    -- the fused form takes none of them, nor the plain order (o.overlap = false, o.delta_pdl = false)
    local ptx = ptx_of(example.build_dkdv { d = 64, fused = true, overlap = "dkdv", delta_pdl = true })
    assert.falsy(ptx:find("griddepcontrol", 1, true))
    local plain = { d = 64, overlap = false, delta_pdl = false }
    for _, build in ipairs { example.build_delta, example.build_dq, example.build_dkdv } do
      assert.falsy(ptx_of(build(plain)):find("griddepcontrol", 1, true))
    end
  end)

  it("takes for_tiles' in_order (a boolean) onto the loop's tileas.pipeline", function()
    local k = example.build_dkdv { d = 64, kv_bm = 128, in_order = true }
    local saved = tl.options.keep_stages
    tl.options.keep_stages = true
    ptx_of(k)
    tl.options.keep_stages = saved
    assert.matches("tileas.pipeline = {in_order = true, stages = 3}", tl.last_stages[1].ir, 1, true)
    tl.new_module()
    k = tl.tile_kernel("t", { params = { C = tl.tensor(tl.f32, 2), K = tl.i32 } })
    assert.has_error(function()
      k:define(function(_, p) tl.for_tiles(p.K, { tile = 128, in_order = 1 }, function() end) end)
    end, "for_tiles: in_order must be a boolean")
  end)

  it("passes the protocol check: no deadlock, stage or phase error (a ring read ahead and late included)", function()
    local c = { b = 1, h = 1, hkv = 1, sq = 100, skv = 140, d = 64, scale = 0.125 }
    local _, bytes = inputs(c)
    local G = example.programs(c)
    local q4, kv4 = { c.b, c.h, c.sq, c.d }, { c.b, c.hkv, c.skv, c.d }
    local tensors = { Q = { data = bytes.q, shape = q4 }, K = { data = bytes.k, shape = kv4 }, V = { data = bytes.v, shape = kv4 },
                      dO = { data = bytes.dout, shape = q4 }, LSE2 = padded_rows(c), Delta = padded_rows(c),
                      dQ = { bytes = #bytes.q, shape = q4 },
                      dK = { bytes = #bytes.k, shape = kv4 }, dV = { bytes = #bytes.k, shape = kv4 },
                      dQacc = { bytes = 2 * #bytes.q, shape = q4 } }
    -- (the fused dK/dV/dQ program too: its staging tiles and the dQ stores after the waits)
    -- (the dK/dV program in order, the default, and out of order)
    for i, o in ipairs { { d = c.d, build = example.build_dq }, { d = c.d }, { d = c.d, fused = true }, { d = c.d, in_order = false } } do
      local kop = PH.lowered_tile((o.build or example.build_dkdv)(o))
      local args = AH.lowered_args(PH, kop, tensors, { SKV = c.skv, SQ = c.sq, H = c.h, HKV = c.hkv, group = 1, scale = c.scale },
                                   G[math.min(i + 1, 3)])
      local r = tl.verify_protocol(kop, { grid = 1, args = args, max_states = 3000, max_seconds = 300 })
      assert(r.ok, r.report)
    end
  end)

  it("is checked on every element: a backward without its causal mask is far off", function()
    local c = { b = 1, h = 1, hkv = 1, sq = 64, skv = 64, d = 64, causal = true, scale = 1 / 8 }
    local x, bytes = AH.inputs(c, 3)
    AH.backward_inputs(c, x, bytes, 4)
    local ref = AH.backward_reference(c, x)
    local plain = { causal = false }
    for k, v in pairs(c) do if k ~= "causal" then plain[k] = v end end
    local rp = AH.backward_reference(plain, x)
    local enc = require("tilua.emulate.values").float16.enc.bf16
    local function bytes_of(v)
      local t = {}
      for i = 1, #v do t[i] = string.pack("<I2", enc(v[i])) end
      return table.concat(t)
    end
    assert.equal(0, (AH.backward_compare(c, bytes_of(ref.dK), ref.dK, ref.mk)))
    assert.is_true(AH.backward_compare(c, bytes_of(rp.dK), ref.dK, ref.mk) > 1000)
  end)
end)
