-- The attention backward as tile programs (examples/attention_bwd.lua) on the
-- GPU (label gpu: spec/gpu_runner.lua; tools/gpu test runs it): random Q, K,
-- V and dO (one draw a problem, its cases share it), the forward's O and
-- log-sum-exp computed on the CPU, then
-- the three lowered programs; dQ, dK and dV against the CPU reference of
-- spec/attention_helper.lua on every element (within the rounding of P, dS
-- and the result to bf16: 2^-7 of the sum of the terms' magnitudes plus 2^-8
-- |ref|) at ragged lengths, causal and not, head dims 64 and 128,
-- grouped-query heads; the fused form (dQ reduce-added into f32 by the dK/dV
-- program, head dim 64) too; a second launch gives the same bytes (but the
-- fused dQ, whose atomic f32 additions come in any order). Without a GPU
-- every case reports pending at once (spec/attention_bwd_spec.lua compiles and
-- assembles the programs on the CPU: here ctest checks the protocol after every
-- pass, minutes of a CI run for no launch). TILUA_SEED fixes the seed;
-- TILUA_SMALL=1 keeps five cases.
local tl = require "tilua"
local AH = dofile "spec/attention_helper.lua"

local example = assert(loadfile "examples/attention_bwd.lua")("--library")
local GPU = tl.device.available()
local seed = require("tilua.gpu.check").seed() -- ctest fixes it (spec/tests.cmake)
print(("attention_bwd_gpu: seed %d"):format(seed))

local CASES = {
  -- the defaults: the dK/dV loop in order (tileas.pipeline's in_order),
  -- FlashAttention-3's wider dK/dV tiles (d64 128 query rows, d128 64), dQ and
  -- dK/dV overlapping (o.overlap "dkdv": dK/dV launched last, a programmatic
  -- dependent launch waiting for dQ before its stores; dQ one after Delta)
  { b = 1, h = 2, hkv = 1, sq = 300, skv = 257, d = 64, small = true },  -- grouped-query heads, ragged
  { b = 1, h = 2, hkv = 2, sq = 260, skv = 390, d = 64, causal = true },
  { b = 1, h = 2, hkv = 2, sq = 200, skv = 333, d = 128 },
  { b = 2, h = 2, hkv = 1, sq = 333, skv = 300, d = 128, causal = true, small = true },
  { b = 2, h = 1, hkv = 1, sq = 129, skv = 400, d = 128, causal = true },  -- keys right of every query
  -- the fused backward (dQ reduce-added by the dK/dV program): d64
  { b = 1, h = 2, hkv = 1, sq = 300, skv = 257, d = 64, fused = true, small = true },
  { b = 2, h = 2, hkv = 2, sq = 260, skv = 390, d = 64, causal = true, fused = true },
  { b = 1, h = 4, hkv = 2, sq = 400, skv = 520, d = 64, fused = true }, -- (the CPU reference's size: seconds)
  -- the other order (dK/dV, then dQ waiting for it before its stores), and
  -- the three programs in plain order (no programmatic dependent launch)
  { b = 1, h = 2, hkv = 1, sq = 300, skv = 257, d = 64, overlap = "dq", small = true },
  { b = 1, h = 2, hkv = 2, sq = 200, skv = 333, d = 128, overlap = false, delta_pdl = false },
  -- the in-order loop's other schedule, S^T and dP^T a wgmma group each (narrower tiles)
  { b = 1, h = 2, hkv = 1, sq = 300, skv = 257, d = 64, kv_bm = 64 },
  -- out of order (S^T and dP^T issued an iteration ahead; their narrower tiles)
  { b = 1, h = 2, hkv = 1, sq = 300, skv = 257, d = 64, in_order = false },
  { b = 1, h = 2, hkv = 2, sq = 260, skv = 260, d = 64, causal = true, in_order = false },
  { b = 2, h = 1, hkv = 1, sq = 129, skv = 400, d = 128, causal = true, in_order = false, small = true },
  { b = 1, h = 2, hkv = 1, sq = 300, skv = 300, d = 128, causal = true, in_order = false },
  { b = 2, h = 2, hkv = 2, sq = 260, skv = 390, d = 64, causal = true, fused = true, in_order = false },
}
if os.getenv "TILUA_SMALL" then -- (tools/gpu sanitize)
  local small = {}
  for _, c in ipairs(CASES) do if c.small then small[#small + 1] = c end end
  CASES = small
end

local function describe_case(c)
  return ("%d x %d heads (%d), %d x %d, d %d%s%s%s"):format(c.b, c.h, c.hkv, c.sq, c.skv, c.d, c.causal and ", causal" or "",
    c.fused and ", fused" or "", (", dK/dV %d query rows %s"):format(example.tiles(c, "dkdv"), c.in_order == false and "out of order" or "in order"))
    .. (example.overlap_of(c) and (", overlap " .. example.overlap_of(c)) or (c.fused and "" or ", plain order"))
    .. (example.delta_pdl_of(c) and " after Delta's pdl" or "")
end

describe("the attention backward on the GPU", function()
  it("compiles every program to PTX that ptxas takes", function()
    if not GPU then pending("no GPU: " .. tl.device.error()) return end
    for _, c in ipairs(CASES) do
      for _, k in ipairs(example.kernels(c)) do -- (compiled once a head dim and mask)
        local ok, log = tl.ptxas(k:compile())
        if ok == nil then pending("ptxas not found: " .. log) return end
        assert(ok, describe_case(c) .. ": " .. log)
      end
    end
  end)

  -- cases of one problem (sizes, head dim, mask) share their random inputs
  -- and the CPU's forward and backward (seconds a problem)
  local problems = {}
  for i, c in ipairs(CASES) do
    c.scale = 1 / math.sqrt(c.d)
    local key = ("%d %d %d %d %d %d %s"):format(c.b, c.h, c.hkv, c.sq, c.skv, c.d, tostring(c.causal))
    problems[key] = problems[key] or { seed = seed + 10 * i }
    local problem = problems[key]
    it(describe_case(c) .. ": dQ, dK, dV on every element against the CPU, the same bytes twice", function()
      if not GPU then pending("no GPU: " .. tl.device.error()) return end
      local D, t0 = tl.device, os.clock()
      local s = problem.seed
      local nq, nkv = c.b * c.h * c.sq * c.d, c.b * c.hkv * c.skv * c.d
      local q <close> = D.random(tl.bf16, nq, s)
      local k <close> = D.random(tl.bf16, nkv, s + 1)
      local v <close> = D.random(tl.bf16, nkv, s + 2)
      local dout <close> = D.random(tl.bf16, nq, s + 3)
      if not problem.ref then
        local x = { Q = q:to_table(), K = k:to_table(), V = v:to_table(), dO = dout:to_table() }
        problem.bytes = {}
        AH.forward_outputs(c, x, problem.bytes)
        problem.ref = AH.backward_reference(c, x)
      end
      local o <close> = D.from(tl.bf16, problem.bytes.o)
      local lse <close> = D.from(tl.f32, problem.bytes.lse)
      local delta <close> = D.alloc(tl.f32, example.row_floats(c))
      local lse2 <close> = D.alloc(tl.f32, example.row_floats(c))
      local dqacc <close> = D.alloc(tl.f32, c.fused and nq or 1) -- (the fused backward's; Delta zeroes it)
      dqacc:fill(12345.0) -- (garbage: a backward that does not zero it is caught)
      local bufs = { q = q, k = k, v = v, dout = dout, o = o, lse = lse, lse2 = lse2, delta = delta, dqacc = dqacc }
      local outs = {}
      for run = 1, 2 do
        local dq, dk, dv = D.alloc(tl.bf16, nq), D.alloc(tl.bf16, nkv), D.alloc(tl.bf16, nkv)
        for _, b in ipairs { dq, dk, dv } do b:fill(0) end
        bufs.dq, bufs.dk, bufs.dv = dq, dk, dv
        example.launch(c, bufs)
        D.synchronize()
        outs[run] = { dQ = dq:to_string(), dK = dk:to_string(), dV = dv:to_string() }
        for _, b in ipairs { dq, dk, dv } do b:free() end
      end
      local ref = problem.ref
      local report = {}
      for _, g in ipairs { { "dQ", "mq" }, { "dK", "mk" }, { "dV", "mv" } } do
        local bad, worst, ratio = AH.backward_compare(c, outs[1][g[1]], ref[g[1]], ref[g[2]])
        report[#report + 1] = ("%s: %d off, max err %.3g (%.2f of the tolerance)"):format(g[1], bad, worst, ratio)
        assert.equal(0, bad, describe_case(c) .. ": " .. report[#report])
        if not (c.fused and g[1] == "dQ") then -- (the fused dQ: f32 atomic adds in any order, not bit-reproducible)
          assert.is_true(outs[1][g[1]] == outs[2][g[1]], "a second launch wrote other bytes of " .. g[1])
        end
      end
      print(("attention_bwd_gpu: %s: %s (%.1f s of CPU)"):format(describe_case(c), table.concat(report, "; "), os.clock() - t0))
    end)
  end
end)
