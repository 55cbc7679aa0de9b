-- tools/bench/ring_copy.lua: the warp-specialized ring copy of
-- examples/ring_copy.lua (plain tile mbarrier ops) and of
-- examples/pipeline_ring_copy.lua (the same kernel on cutlass.pipeline, lowered by
-- convert-cutlass-to-nvvm) at 1 GiB, as ratios to cuMemcpyDtoD measured in the
-- same run on the same device (goal: >= 0.9). Each configuration is checked
-- for an exact copy before it is timed. A time is the median over 5 samples of
-- CUDA events around REPS back-to-back copies, divided by REPS, so that the
-- host's launch overhead overlaps the GPU work for the ring copy and the memcpy
-- alike. Prints a short table last.
--
--   tilua tools/bench/ring_copy.lua [bytes]      (run from the repository root)
local tl = require "tilua"

local lib = assert(loadfile("examples/ring_copy.lua"))("--library")
local plib = assert(loadfile("examples/pipeline_ring_copy.lua"))("--library")
local n = math.tointeger(tonumber(arg and arg[1] or "") or (1 << 30))
local REPS = 20
local seed = tonumber(os.getenv "TILUA_SEED") or os.time()

tl.device.require() -- without a GPU: "SKIP: no GPU" and exit

local function median(t)
  table.sort(t)
  return t[(#t + 1) // 2]
end

-- milliseconds per call of fn: the median of 5 samples of REPS calls, after a warm-up
local function time(fn)
  fn()
  tl.device.synchronize()
  local ms = {}
  for r = 1, 5 do
    ms[r] = tl.device.time(function() for _ = 1, REPS do fn() end end) / REPS
  end
  return median(ms)
end

local info = tl.device.info()
print(("ring_copy bench: %s, %d SMs, %d bytes, seed %d"):format(info.name, info.sm_count, n, seed))
local src = tl.device.random(tl.u8, n, seed)
local dst = tl.device.alloc(tl.u8, n)

local rows = {}
local memcpy_ms = time(function() dst:copy_from(src) end)
rows[#rows + 1] = { "cuMemcpyDtoD", memcpy_ms, 1.0 }

local configs = {
  { stages = 4, chunk = 16384, consumer_warps = 4, ctas = 1 },
  { stages = 8, chunk = 16384, consumer_warps = 4, ctas = 1 },
  { stages = 6, chunk = 16384, consumer_warps = 4, ctas = 2 },
  { stages = 4, chunk = 16384, consumer_warps = 1, store = "bulk", inflight = 2, ctas = 1 },
  { stages = 8, chunk = 16384, consumer_warps = 1, store = "bulk", inflight = 4, ctas = 1 },
  { stages = 6, chunk = 16384, consumer_warps = 1, store = "bulk", inflight = 3, ctas = 2 },
  { stages = 4, chunk = 16384, consumer_warps = 1, store = "bulk", inflight = 2, ctas = 3 },
  { stages = 4, chunk = 32768, consumer_warps = 1, store = "bulk", inflight = 2, ctas = 1 },
  { pipeline = true, stages = 4, chunk = 16384, consumer_warps = 4, ctas = 1 },
  { pipeline = true, stages = 8, chunk = 16384, consumer_warps = 4, ctas = 1 },
  { pipeline = true, stages = 6, chunk = 16384, consumer_warps = 4, ctas = 2 },
  { pipeline = true, stages = 4, chunk = 16384, consumer_warps = 4, ctas = 2, mode = "warp_specialized" },
}
local best, pbest = 0, 0
for i, c in ipairs(configs) do
  c.name = "ring_copy_" .. i
  local L = c.pipeline and plib or lib
  local k = L.build(c)
  k:compile()
  dst:fill(0)
  L.launch(k, src, dst, n, c.ctas, c.chunk)
  tl.device.synchronize()
  local label = c.pipeline and ("pipeline %s S=%d C=%dK W=%d x%d/SM"):format(c.mode == "warp_specialized" and "ws" or "coop",
      c.stages, c.chunk // 1024, c.consumer_warps, c.ctas)
    or c.store == "bulk" and ("ring bulk S=%d C=%dK K=%d x%d/SM"):format(c.stages, c.chunk // 1024, c.inflight, c.ctas)
    or ("ring threads S=%d C=%dK W=%d x%d/SM"):format(c.stages, c.chunk // 1024, c.consumer_warps, c.ctas)
  local same, at = dst:equals(src)
  if not same then
    print(("%s: WRONG copy, first difference at byte %d"):format(label, at - 1))
    os.exit(1)
  end
  local ms = time(function() L.launch(k, src, dst, n, c.ctas, c.chunk) end)
  rows[#rows + 1] = { label, ms, memcpy_ms / ms }
  if c.pipeline then pbest = math.max(pbest, memcpy_ms / ms) else best = math.max(best, memcpy_ms / ms) end
end

print(("\n%-40s %10s %12s %8s"):format("copy of " .. n .. " bytes", "ms", "GB/s (r+w)", "ratio"))
for _, r in ipairs(rows) do
  print(("%-40s %10.4f %12.1f %8.3f"):format(r[1], r[2], 2 * n / (r[2] * 1e6), r[3]))
end
print(("best ring_copy / cuMemcpyDtoD = %.3f (goal >= 0.9)"):format(best))
print(("best pipeline_ring_copy / cuMemcpyDtoD = %.3f (goal >= 0.9)"):format(pbest))
