-- tools/bench/gemm_variants.lua: chosen configurations of the stdlib GEMM
-- (tl.gemm.build options) on one shape, each checked against cuBLASLt and
-- timed like tools/bench/gemm.lua (best of 5 x 10 launches), with what ptxas
-- says of it (registers, spills, shared memory). The experiments of
-- docs/PERF.md ("The orchestration's forms") are runs of it.
--
--   tilua tools/bench/gemm_variants.lua MxNxK[,MxNxK...] VARIANT ...
--     VARIANT: key=value,... of tl.gemm.build (bm, bn, wgs, stages, epi,
--     cluster=2 | 1x2 | 2x2, consumers, schedule, splits, swizzle,
--     raster=along_m|along_n, sms, dtype, dynamic=true, swap_ab=true)
--     every variant on every shape, then a table of each shape's best
--     variant and its ratio to cuBLASLt
--   tilua tools/bench/gemm_variants.lua       the default: clusters against one CTA at 8192^3
--   --rounds=N    after the first figures, N - 1 more rounds of cuBLASLt and every
--                 variant in turn, each round's figures printed and the best of
--                 all rounds kept (a drift of the clocks hits every variant alike)
--   --samples=N, --reps=N   samples a time (5) and launches a sample (10)
local tl = require "tilua"

local argv, rounds, samples, reps = {}, 1, 5, 10
for _, a in ipairs(arg or {}) do
  local key, v = a:match "^%-%-(%a+)=(%d+)$"
  if key == "rounds" then rounds = tonumber(v)
  elseif key == "samples" then samples = tonumber(v)
  elseif key == "reps" then reps = tonumber(v)
  elseif a:sub(1, 2) == "--" then error("gemm_variants: unknown option " .. a, 0)
  else argv[#argv + 1] = a end
end
if #argv == 0 then
  argv = { "8192x8192x8192", "bn=256", "bn=256,cluster=2x1", "bn=256,cluster=1x2", "bm=256,bn=128",
           "bm=256,bn=128,cluster=1x2", "consumers=pingpong" }
end
local SHAPES = {}
for m, n, k in argv[1]:gmatch "(%d+)x(%d+)x(%d+)" do SHAPES[#SHAPES + 1] = { tonumber(m), tonumber(n), tonumber(k) } end
if #SHAPES == 0 then
  io.stderr:write("usage: tilua tools/bench/gemm_variants.lua MxNxK[,MxNxK...] key=value,... ...\n")
  os.exit(2)
end

local function parse(spec)
  local o = {}
  for kv in spec:gmatch "[^,]+" do
    local key, v = kv:match "^([%w_]+)=(.+)$"
    if not key then error("bad variant " .. spec, 0) end
    local a, b = v:match "^(%d+)x(%d+)$"
    if a then o[key] = { tonumber(a), tonumber(b) }
    elseif v == "true" or v == "false" then o[key] = v == "true"
    else o[key] = math.tointeger(tonumber(v)) or tonumber(v) or v end
  end
  return o
end
local function count(s, pat)
  local n = 0
  for _ in s:gmatch(pat) do n = n + 1 end
  return n
end

-- The variants built for one shape (ptxas's registers, spills and shared memory printed).
local function build_all(M, N, K)
  local variants = {}
  for i = 2, #argv do
    local o = parse(argv[i])
    o.m, o.n, o.k, o.dtype = M, N, K, o.dtype or "bf16"
    local ok, g = pcall(tl.gemm.build, o)
    if not ok then
      print(("%-40s not built: %s"):format(argv[i], g))
    else
      local ptx = g.kernel:compile()
      local tmp = os.tmpname()
      local f = assert(io.open(tmp, "w"))
      f:write(ptx)
      f:close()
      local p = io.popen((os.getenv "TILUA_PTXAS" or "ptxas") .. " -arch=sm_90a -v -o /dev/null " .. tmp .. " 2>&1")
      local log = p:read "a"
      p:close()
      os.remove(tmp)
      local op = g.kernel:lowered_op()
      local c = g.cfg
      print(("%-40s tile %dx%d over %d wg, %d stages, cluster %dx%d, %s%s; regs %s spill %s smem %d grid %d; release.cluster %d acquire.cluster %d bar.sync %d")
        :format(argv[i], c.bm, c.bn, c.wgs, c.stages, c.cm, c.cn, c.consumers, c.swap_ab and ", swap_ab" or "",
                log:match "Used (%d+) registers" or "?", log:match "(%d+) bytes spill stores" or "?",
                (op:attr "shared_static" or 0) + (op:kernel_spec().smem or 0),
                g.grid, count(ptx, "release%.cluster"), count(ptx, "acquire%.cluster"), count(ptx, "bar%.sync")))
      variants[#variants + 1] = { name = argv[i], g = g }
    end
  end
  return variants
end

local D = tl.device
local function best_of(fn)
  fn()
  D.synchronize()
  local best = math.huge
  for _ = 1, samples do best = math.min(best, D.time(function() for _ = 1, reps do fn() end end) / reps) end
  return best
end

-- One shape: cuBLASLt, then every variant checked against it and timed -> summary row.
local function measure(M, N, K)
  local variants = build_all(M, N, K)
  if not D.available() then return nil end
  local dt = variants[1] and variants[1].g.cfg.dtype or "bf16"
  local fp8 = dt == "e4m3" or dt == "e5m2"
  local ein = fp8 and tl.i8 or tl.bf16
  local a <close> = D.random(ein, M * K, 1, fp8 and dt or nil)
  local b <close> = D.random(ein, N * K, 2, fp8 and dt or nil)
  local d <close> = D.alloc(tl.bf16, M * N)
  local r <close> = D.alloc(tl.bf16, M * N)
  local blas = tl.core.blas_available()
  local function cublas() tl.core.blas_gemm { m = M, n = N, k = K, a = a.raw, b = b.raw, d = r.raw, ["in"] = dt, out = "bf16" } end
  if blas then blas = pcall(cublas) end
  local flops = 2.0 * M * N * K
  local row = { shape = ("%dx%dx%d"):format(M, N, K) }
  print(("%s, %s %s"):format(D.info().name, row.shape, dt))
  if blas then
    row.blas = best_of(cublas)
    print(("%-40s %8.1f TFLOP/s %9.2f us"):format("cuBLASLt", flops / row.blas / 1e9, row.blas * 1e3))
  end
  for _, v in ipairs(variants) do
    -- a variant that fails to launch or run is reported, and the next one runs
    local done, err = pcall(function()
      d:fill(0)
      v.g:run { a = a, b = b, d = d }
      D.synchronize()
      local ok, rep = v.g:check { a = a, b = b, d = d, reference = blas and r or nil, seed = 1 }
      local t = best_of(function() v.g:run { a = a, b = b, d = d } end)
      print(("%-40s %8.1f TFLOP/s %9.2f us  %s  %s"):format(v.name, flops / t / 1e9, t * 1e3,
        row.blas and ("ratio %.3f"):format(row.blas / t) or "", ok and "ok" or ("WRONG: " .. rep)))
      if ok and (not row.t or t < row.t) then row.t, row.best = t, v.name end
      v.t, v.right = t, ok
    end)
    if not done then print(("%-40s FAILED: %s"):format(v.name, tostring(err))) end
    v.ok = done
  end
  -- the other rounds: cuBLASLt, then every variant that ran, in turn
  for round = 2, rounds do
    local parts = {}
    if blas then
      local t = best_of(cublas)
      row.blas = math.min(row.blas, t)
      parts[1] = ("cuBLASLt %.1f"):format(flops / t / 1e9)
    end
    for _, v in ipairs(variants) do
      if v.ok then
        local t = best_of(function() v.g:run { a = a, b = b, d = d } end)
        parts[#parts + 1] = ("%s %.1f"):format(v.name, flops / t / 1e9)
        if v.t == nil or t < v.t then v.t = t end
      end
    end
    print(("round %d (TFLOP/s): %s"):format(round, table.concat(parts, ", ")))
  end
  if rounds > 1 then
    for _, v in ipairs(variants) do
      if v.t then
        print(("%-40s best of %d rounds %8.1f TFLOP/s %9.2f us  %s"):format(v.name, rounds, flops / v.t / 1e9, v.t * 1e3,
          row.blas and ("ratio %.3f"):format(row.blas / v.t) or ""))
        if v.right and v.t < row.t then row.t, row.best = v.t, v.name end
      end
    end
  end
  for _, v in ipairs(variants) do
    if v.g._workspace then v.g._workspace:free() v.g._workspace = nil end
  end
  return row
end

-- the clocks up before the first figure (about 0.3 s of a bandwidth-bound kernel)
if D.available() then
  local w <close> = D.alloc(tl.bf16, 64 * 1024 * 1024)
  local w2 <close> = D.alloc(tl.bf16, 64 * 1024 * 1024)
  local t = 0
  while t < 300 do t = t + D.time(function() w:fill(0) w2:fill(0) end) end
end

local rows = {}
for _, s in ipairs(SHAPES) do
  rows[#rows + 1] = measure(s[1], s[2], s[3])
  collectgarbage()
end
if not D.available() then
  print("no GPU: " .. tostring(D.error()))
  return
end
print("\n| shape | best variant | us | cuBLASLt us | ratio |\n|---|---|---|---|---|")
local logsum, n = 0, 0
for _, row in ipairs(rows) do
  local ratio = row.t and row.blas and row.blas / row.t
  if ratio then logsum, n = logsum + math.log(ratio), n + 1 end
  print(("| %s | %s | %s | %s | %s |"):format(row.shape, row.best or "none correct", row.t and ("%.2f"):format(row.t * 1e3) or "-",
    row.blas and ("%.2f"):format(row.blas * 1e3) or "-", ratio and ("%.3f"):format(ratio) or "-"))
end
if n > 0 then print(("\n%d shapes: geometric mean of the ratios %.3f"):format(n, math.exp(logsum / n))) end
