-- tools/bench/gemm.lua: the GEMM of stdlib/gemm.lua (tl.gemm) against cuBLASLt
-- (libcublasLt opened with dlopen; without it the ratio is skipped), in one
-- process on one device: bf16 inputs, f32 accumulation, bf16 output, row-major
-- A (M x K) and B given as N x K (both K-major, cuBLAS's "TN"), plus fp8 e4m3
-- at 8192^3. Every configuration is checked against cuBLAS's result (and
-- sampled CPU dot products for bf16) before it is timed; tl.autotune picks
-- among tile configurations per shape and caches the choice.
--
-- A time is the best of 5 samples of CUDA events around 10 back-to-back
-- launches divided by 10, tilua and cuBLAS alternating. TFLOP/s = 2MNK / time.
--
--   tilua tools/bench/gemm.lua [--quick] [--shapes=8192x8192x8192,4096x4096x4096]
local tl = require "tilua"

tl.device.require()
local D = tl.device
local seed = tonumber(os.getenv "TILUA_SEED") or os.time()
local quick, only = false, nil
for _, a in ipairs(arg or {}) do
  quick = quick or a == "--quick"
  only = a:match "^%-%-shapes=(.*)$" or only
end

local shapes = {
  { 8192, 8192, 8192 }, { 4096, 4096, 4096 }, { 2048, 2048, 2048 }, { 8192, 8192, 1024 },
  { 1024, 1024, 16384 }, { 3456, 4096, 4096 }, { 4096, 4096, 512 }, { 8192, 8192, 8192, "e4m3" },
}
if only then
  shapes = {}
  for m, n, k, dt in only:gmatch "(%d+)x(%d+)x(%d+):?(%a*%d*%a*)" do
    shapes[#shapes + 1] = { tonumber(m), tonumber(n), tonumber(k), dt ~= "" and dt or nil }
  end
end

local blas, why = tl.core.blas_available()
print(("gemm bench on %s (%d SMs), seed %d; cuBLASLt: %s"):format(D.info().name, D.sm_count(), seed,
  blas and "loaded" or ("absent (" .. tostring(why) .. "): no ratios")))

local function best_of(fn, samples)
  fn()
  D.synchronize()
  local best = math.huge
  for _ = 1, samples or 5 do
    best = math.min(best, D.time(function() for _ = 1, 10 do fn() end end) / 10)
  end
  return best
end

local rows = {}
for _, s in ipairs(shapes) do
  local m, n, k, dt = s[1], s[2], s[3], s[4] or "bf16"
  local fp8 = dt == "e4m3" or dt == "e5m2"
  local ein = fp8 and tl.i8 or tl.bf16
  local a = D.random(ein, m * k, seed, fp8 and dt or nil)
  local b = D.random(ein, n * k, seed + 1, fp8 and dt or nil)
  local d, r = D.alloc(tl.bf16, m * n), D.alloc(tl.bf16, m * n)
  local function cublas() tl.core.blas_gemm { m = m, n = n, k = k, a = a.raw, b = b.raw, d = r.raw, ["in"] = dt, out = "bf16" } end
  if blas then cublas() end
  local candidates = { { bn = 256, stages = 3 }, { bn = 128, stages = 5 }, { bn = 256, stages = 3, schedule = "streamk" },
                       { bn = 128, stages = 5, schedule = "streamk" }, { bn = 128, stages = 6, schedule = "streamk" },
                       { bn = 256, stages = 3, cluster = 2 }, { bn = 256, stages = 2, consumers = "pingpong" },
                       { bn = 256, stages = 3, schedule = "splitk" }, { bn = 128, stages = 5, schedule = "splitk" } }
  if quick then candidates = { candidates[1] } end
  local g, _, times = tl.autotune {
    key = ("gemm/%s/%dx%dx%d"):format(dt, m, n, k),
    candidates = candidates,
    build = function(c)
      local o = { m = m, n = n, k = k, dtype = dt, bn = c.bn, stages = c.stages, schedule = c.schedule, cluster = c.cluster,
                  consumers = c.consumers }
      local gg = tl.gemm.build(o)
      gg.kernel:compile()
      return gg
    end,
    measure = function(gg)
      return best_of(function() gg:run { a = a, b = b, d = d } end, 3)
    end,
  }
  if not times.cached then
    local parts = {}
    for i, cc in ipairs(candidates) do
      local tm = times[i]
      parts[#parts + 1] = ("%s%s%s%s: %s"):format(cc.bn, cc.schedule and (" " .. cc.schedule) or "",
        cc.cluster and (" c" .. cc.cluster) or "", cc.consumers and (" " .. cc.consumers) or "",
        type(tm) == "number" and ("%.1f"):format(2.0 * m * n * k / tm / 1e9) or "failed")
    end
    print(("  autotune %dx%dx%d %s (TFLOP/s): %s"):format(m, n, k, dt, table.concat(parts, ", ")))
  end
  d:fill(0)
  g:run { a = a, b = b, d = d }
  D.synchronize()
  local ok, report = g:check { a = a, b = b, d = d, reference = blas and r or nil, seed = seed }
  local row = { shape = ("%dx%dx%d %s"):format(m, n, k, dt),
                cfg = ("%dx%dx%d s%d %s%s%s"):format(g.cfg.bm, g.cfg.bn, g.cfg.bk, g.cfg.stages,
                  g.cfg.consumers == "pingpong" and "pingpong " .. g.cfg.schedule or g.cfg.schedule,
                  g.cfg.cluster > 1 and " cluster 2" or "",
                  g.workspace_bytes > 0 and (" ws %.1f MB"):format(g.workspace_bytes / 2 ^ 20) or "") }
  if not ok then
    row.note = "FAILED: " .. report
  else
    local t_ours, t_blas = math.huge, math.huge
    for _ = 1, 2 do -- alternate, keep the best of each
      t_ours = math.min(t_ours, best_of(function() g:run { a = a, b = b, d = d } end))
      if blas then t_blas = math.min(t_blas, best_of(cublas)) end
    end
    row.ours = g.flops / t_ours / 1e9
    row.blas = blas and g.flops / t_blas / 1e9 or nil
    row.note = report
  end
  rows[#rows + 1] = row
  print(("%-24s %-32s tilua %7s  cuBLAS %7s  ratio %5s   %s"):format(row.shape, row.cfg,
    row.ours and ("%.1f"):format(row.ours) or "-", row.blas and ("%.1f"):format(row.blas) or "-",
    (row.ours and row.blas) and ("%.3f"):format(row.ours / row.blas) or "-", row.note))
  a:free() b:free() d:free() r:free()
  collectgarbage()
end

print "\n| shape | tile | tilua TFLOP/s | cuBLAS TFLOP/s | ratio |"
print "|---|---|---|---|---|"
local failed = false
for _, row in ipairs(rows) do
  failed = failed or row.ours == nil
  print(("| %s | %s | %s | %s | %s |"):format(row.shape, row.cfg, row.ours and ("%.1f"):format(row.ours) or "FAILED",
    row.blas and ("%.1f"):format(row.blas) or "-", (row.ours and row.blas) and ("%.3f"):format(row.ours / row.blas) or "-"))
end
if failed then os.exit(1) end
