-- The attention forward of stdlib/attention.lua on the GPU (label gpu:
-- spec/gpu_runner.lua; tools/gpu test runs it): fresh random inputs at ragged
-- sequence lengths, grouped-query heads, causal and not, head dims 64, 128 and
-- 256, bf16 and f16, a persistent and a data-parallel schedule, the softmax's
-- forms (head dim 64's default: the rows' sums by the PV GEMM, the tail in
-- tiles of one warpgroup's rows; head dim 128's: the sums; and without them); O and the
-- log-sum-exp against the reference kernel on every element (O within the
-- rounding of P and of O: 2^-7 of the largest |v| plus 2^-8 |ref|; the
-- log-sum-exp within 1e-3 (1 + |ref|) + 2^-9: tl.attention.lse_tolerance) and three rows against the CPU; a
-- second launch gives the same bytes. Without a GPU every kernel is still
-- compiled and assembled, and the launches report pending. TILUA_SEED fixes
-- the seed; TILUA_SMALL=1 keeps the small cases.
local tl = require "tilua"

local GPU = tl.device.available()
local seed = require("tilua.gpu.check").seed() -- ctest fixes it (spec/tests.cmake)
print(("attention_gpu: seed %d"):format(seed))

local CASES = {
  { b = 1, h = 4, hkv = 1, sq = 1000, skv = 777, d = 128, small = true },             -- grouped-query 4:1, ragged; d 128's
                                                                                       -- default: the sums by the PV GEMM
  { b = 1, h = 4, hkv = 1, sq = 1000, skv = 777, d = 128, sum_mma = false, small = true }, -- (the earlier default)
  { b = 2, h = 2, sq = 1000, skv = 1000, d = 128, causal = true },
  { b = 2, h = 3, sq = 300, skv = 500, d = 64, scale = 1.0, small = true },           -- peaked rows (scale 1); d 64's default:
                                                                                       -- the sums by the PV GEMM, the tail split
  { b = 2, h = 3, sq = 300, skv = 500, d = 64, scale = 1.0, sum_mma = false, split_tail = false, small = true }, -- (the earlier default)
  { b = 1, h = 2, sq = 513, skv = 513, d = 64, causal = true },
  { b = 1, h = 2, sq = 200, skv = 333, d = 256 },                                      -- key tiles of 80, O staged in Q's rows
  { b = 1, h = 2, hkv = 1, sq = 300, skv = 300, d = 256, causal = true, small = true },
  { b = 1, h = 2, sq = 257, skv = 257, d = 128, dtype = "f16", scale = 0.5 },
  { b = 1, h = 4, sq = 700, skv = 700, d = 128, causal = true, schedule = "persistent" },      -- (causal's default: data-parallel)
  { b = 1, h = 2, sq = 400, skv = 1100, d = 128, bn = 176 },
  { b = 2, h = 16, hkv = 2, sq = 4096, skv = 4096, d = 128, every = true },            -- more tiles than SMs
  -- the softmax's forms (docs/PERF.md): the rows' sums by the PV GEMM, the lazy rescale, a max by pairs,
  -- O rescaled before the PV issue; peaked rows (scale 1) make the lazy rescale take both ways
  { b = 1, h = 4, hkv = 1, sq = 1000, skv = 777, d = 128, sum_mma = true, rescale = 8, small = true },
  { b = 2, h = 3, sq = 300, skv = 500, d = 64, scale = 1.0, sum_mma = true, rescale = 8, small = true },
  { b = 1, h = 2, sq = 513, skv = 513, d = 64, causal = true, sum_mma = true, rescale = 8, max_tree = true, small = true },
  { b = 2, h = 2, sq = 1000, skv = 1000, d = 128, causal = true, sum_mma = true, early_rescale = true, small = true },
  { b = 1, h = 2, sq = 257, skv = 257, d = 128, dtype = "f16", scale = 0.5, sum_mma = true, rescale = 0, small = true },
  { b = 1, h = 2, sq = 400, skv = 1100, d = 64, consumers = 2, bn = 192, regs = { 24, 240 }, sum_mma = true, small = true },
  -- the tail in tiles of one warpgroup's rows (a few CTAs, so that both kinds of tile are there)
  { b = 2, h = 3, hkv = 1, sq = 700, skv = 500, d = 64, split_tail = true, sum_mma = true, sms = 5, small = true },
  { b = 1, h = 4, sq = 1000, skv = 777, d = 128, split_tail = true, sms = 6, small = true },
}
if os.getenv "TILUA_SMALL" then
  local small = {}
  for _, c in ipairs(CASES) do if c.small then small[#small + 1] = c end end
  CASES = small
end

local function describe_case(c)
  return ("%d x %d heads%s, %d x %d, d %d%s%s%s%s"):format(c.b, c.h, c.hkv and (" (" .. c.hkv .. " key heads)") or "", c.sq, c.skv,
    c.d, c.causal and ", causal" or "", c.dtype and (", " .. c.dtype) or "", c.bn and (", bn " .. c.bn) or "",
    c.schedule and (", " .. c.schedule) or "")
    .. (c.consumers and (", %d consumers"):format(c.consumers) or "") .. (c.sum_mma and ", sums by the PV GEMM" or "")
    .. (c.rescale and (", rescale > %g"):format(c.rescale) or "") .. (c.max_tree and ", max by pairs" or "")
    .. (c.early_rescale and ", O rescaled before the PV issue" or "")
    .. (c.split_tail and (", the tail in unit tiles on %d CTAs"):format(c.sms) or "")
    .. ((c.sum_mma == false and c.split_tail == false) and ", neither the sums by the PV GEMM nor the tail split" or "")
    .. ((c.sum_mma == false and c.split_tail == nil) and ", not the sums by the PV GEMM" or "")
end

describe("the attention forward on the GPU", function()
  local built = {}
  local function build(c)
    if not built[c] then
      local cfg = {}
      for k, v in pairs(c) do if k ~= "small" and k ~= "every" then cfg[k] = v end end -- (sms: a grid of so many CTAs)
      built[c] = tl.attention.build(cfg)
    end
    return built[c]
  end

  it("compiles every case to PTX that ptxas takes", function()
    for _, c in ipairs(CASES) do
      local ok, log = tl.ptxas(build(c).kernel:compile())
      if ok == nil then pending("ptxas not found: " .. log) return end
      assert(ok, describe_case(c) .. ": " .. log)
    end
  end)

  for i, c in ipairs(CASES) do
    it(describe_case(c) .. ": every element against the reference kernel, CPU rows, the same bytes twice", function()
      if not GPU then pending("no GPU: " .. tl.device.error()) return end
      local D = tl.device
      local a = build(c)
      local cf = a.cfg
      local et = cf.dtype == "f16" and tl.f16 or tl.bf16
      local s = seed + 10 * i
      local q <close> = D.random(et, cf.b * cf.h * cf.sq * cf.d, s)
      local k <close> = D.random(et, cf.b * cf.hkv * cf.skv * cf.d, s + 1)
      local v <close> = D.random(et, cf.b * cf.hkv * cf.skv * cf.d, s + 2)
      local o <close> = D.alloc(et, cf.b * cf.h * cf.sq * cf.d)
      local lse <close> = D.alloc(tl.f32, cf.b * cf.h * cf.sq)
      local o2 <close> = D.alloc(et, cf.b * cf.h * cf.sq * cf.d)
      local lse2 <close> = D.alloc(tl.f32, cf.b * cf.h * cf.sq)
      o:fill(0)
      a:run { q = q, k = k, v = v, o = o, lse = lse }
      a:run { q = q, k = k, v = v, o = o2, lse = lse2 }
      D.synchronize()
      local ok, report = a:check { q = q, k = k, v = v, o = o, lse = lse, seed = s, vmax = 1.0 }
      print(("attention_gpu: %s, grid %d: %s"):format(describe_case(c), a.grid, report))
      assert(ok, report)
      assert.is_true((o:equals(o2)), "a second launch wrote other bytes of O")
      assert.is_true((lse:equals(lse2)), "a second launch wrote another log-sum-exp")
    end)
  end
end)
