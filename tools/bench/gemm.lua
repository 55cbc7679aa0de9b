-- tools/bench/gemm.lua: the GEMM of stdlib/gemm.lua (tl.gemm) against cuBLASLt
-- (libcublasLt opened with dlopen; without it the ratio is skipped), in one
-- process on one device: bf16 inputs, f32 accumulation, bf16 output, row-major
-- A (M x K) and B given as N x K (both K-major, cuBLAS's "TN"), plus fp8 e4m3
-- at 8192^3. Every configuration is checked against cuBLAS's result before it
-- is timed; tl.autotune picks among the kernel forms per shape class and
-- caches the choice.
--
-- The forms whose schedule is data-parallel or persistent are built once as
-- dynamic kernels (the problem is a kernel argument) and serve every shape;
-- StreamK and split-K are planned per shape, so built per shape.
--
--   tilua tools/bench/gemm.lua [--quick] [--shapes=8192x8192x8192,4096x4096x4096]
--   tilua tools/bench/gemm.lua [--budget=SECONDS]    stop starting shapes after that long
--     (the table and the mean cover the shapes measured; the others are listed)
--   tilua tools/bench/gemm.lua --sweep [--limit=N]   the sweep: >= 100 shapes
--     (square, the issue's, and the projections of Llama-3 8B and 70B for
--     1 to 16384 tokens), each form's figure, the best against cuBLASLt, the
--     ratio table and its geometric mean
--   tilua tools/bench/gemm.lua --tokens=1,16,64    the sweep's Llama-3 projections at
--     those token counts only (M), its forms and table
--   tilua tools/bench/gemm.lua --sweep --only=rows256,rows512,issue,squares,decode
--     the sweep's shapes of those classes only, in that order (rowsN: the
--     projections at N tokens; decode: rows1, rows16, rows64)
--   --count=N     the sweep measures the N best forms of tl.gemm.candidates's
--                 model (default 3; decode-sized M: the first N of distinct families by the decode model)
--   --samples=N   samples a time (default 5, the sweep 3)
--   --also=NAME;NAME  the sweep measures these forms of FORMS or ALSO too (named as the
--                 bench prints them: "128x192 pingpong c2x1"), where they build
--   --choice      print each shape's candidates and the model's times, measure
--                 nothing (no GPU needed)
--   --sweep --shapes=MxNxK,...  those shapes only, in that order, treated as the
--                 sweep treats its shapes (the model's forms, --count, --also)
--   --rounds=N    the pick and cuBLASLt timed N times in turn (default 2), the best kept
--   --swizzles=S,S  the sweep measures each of the model's forms with these raster swizzles
--                 too (named "... swS"; the default is 8, docs/gemm.md)
--   --rasters=R,R   ... and in these raster orders (along_m, along_n; named "... along_n")
--
-- A time is the best of 5 samples (the sweep: 3) of CUDA events around
-- back-to-back launches (10; the sweep: as many as fill ~5 ms), tilua and
-- cuBLAS alternating. TFLOP/s = 2MNK / time.
local tl = require "tilua"

local quick, only, sweep, limit, budget, tokens = false, nil, false, nil, nil, nil
local classes, count, samples, choice, also, rounds = nil, 3, nil, false, nil, 2
local swizzles, rasters = nil, nil
for _, a in ipairs(arg or {}) do
  quick = quick or a == "--quick"
  sweep = sweep or a == "--sweep"
  choice = choice or a == "--choice"
  tokens = a:match "^%-%-tokens=(.*)$" or tokens
  only = a:match "^%-%-shapes=(.*)$" or only
  classes = a:match "^%-%-only=(.*)$" or classes
  limit = tonumber(a:match "^%-%-limit=(%d+)$" or "") or limit
  budget = tonumber(a:match "^%-%-budget=(%d+)$" or "") or budget
  count = tonumber(a:match "^%-%-count=(%d+)$" or "") or count
  samples = tonumber(a:match "^%-%-samples=(%d+)$" or "") or samples
  also = a:match "^%-%-also=(.*)$" or also
  rounds = tonumber(a:match "^%-%-rounds=(%d+)$" or "") or rounds
  swizzles = a:match "^%-%-swizzles=(.*)$" or swizzles
  rasters = a:match "^%-%-rasters=(.*)$" or rasters
end

if not choice then tl.device.require() end
local D = tl.device
local seed = tonumber(os.getenv "TILUA_SEED") or os.time()
local blas, why = tl.core.blas_available()
if not choice then
  print(("gemm bench on %s (%d SMs), seed %d; cuBLASLt: %s"):format(D.info().name, D.sm_count(), seed,
    blas and "loaded" or ("absent (" .. tostring(why) .. "): no ratios")))
end

-- {=== the kernel forms

-- The candidates (options of tl.gemm.build besides the problem and dtype).
local FORMS = {
  { bn = 256 },                                   -- 128 x 256, 4 stages
  { bm = 256, bn = 128 },                         -- two warpgroups of 128 rows
  { bn = 128 },                                   -- 128 x 128, 6 stages
  { bm = 320, bn = 128 },                         -- cuBLAS's 8192^3 tile: 2 + 3 slices, 3 stages
  { bm = 192, bn = 192 },                         -- three warpgroups
  { consumers = "pingpong" },                     -- 128 x 128 a warpgroup, one ring
  { consumers = "pingpong", bm = 128, bn = 192 }, -- 128 x 192 a warpgroup (8192^3's best, s10pp-1)
  { consumers = "pingpong", bm = 128, bn = 192, cluster = { 2, 1 } },
  { bn = 256, cluster = { 2, 1 } },               -- B multicast
  { bn = 256, cluster = { 1, 2 } },               -- A multicast
  { bm = 256, bn = 128, cluster = { 1, 2 } },
  { bm = 256, bn = 128, cluster = { 2, 1 } },
  { bm = 64, bn = 128, wgs = 1 },                 -- few rows (decode-sized M)
  { bm = 64, bn = 64, wgs = 1 },                  -- few rows, twice the CTAs
  -- A (the tokens) multicast along N: cuBLAS's forms at 128 tokens (its
  -- `64x64_64x13_2x1` at 128 x 4096 x 4096, `80x128_64x8_2x1` at 128 x 10240 x
  -- 8192: B's rows by the tokens, 2 CTAs along B's rows), for --also
  { bm = 64, bn = 64, wgs = 1, cluster = { 1, 2 } },
  { bn = 48, cluster = { 1, 2 } },
  { bn = 64, cluster = { 1, 2 } },
  { bn = 80, cluster = { 1, 2 } },
  -- decode-sized M (at most 64 rows): A and B swapped, B's rows on wgmma's
  -- 64-row side, M rounded up to 8 on its N side; StreamK spreads B's k blocks
  -- over every SM, so that all of them stream the weights. Each led some of
  -- the decode rows on an H200 (docs/PERF.md); a cluster of 2 sharing A's
  -- rows led none (0.78 against StreamK's 0.86 at 64 x 10240 x 8192)
  { swap_ab = true, schedule = "streamk" },       -- 64 rows of B a tile
  { swap_ab = true, schedule = "streamk", bk = 128 }, -- 256 bytes of each row of B a stage
  { swap_ab = true, bm = 128, schedule = "streamk" },
  { swap_ab = true },                             -- persistent, whole tiles of 64 rows
  { swap_ab = true, bm = 128 },                   -- persistent, whole tiles of 128 rows
  { swap_ab = true, bm = 128, schedule = "splitk" }, -- (K split in SMs / tiles)
  { bn = 256, schedule = "streamk" },
  { bn = 128, schedule = "streamk" },
  { bn = 128, schedule = "splitk", splits = 2 },
  { bn = 256, schedule = "splitk", splits = 4 },
  { bn = 128, schedule = "splitk", splits = 4 },
}
-- forms for --also only (not in the list every shape of the plain bench runs): the projections
-- of 256 to 1024 tokens (s14sweep), 256-row tiles that fill the SMs in whole waves, and cuBLAS's
-- 64 x 128 in a cluster of 2 along M at 256 x 4096 x 4096
local ALSO = {
  { bm = 256, bn = 160 },
  { bm = 256, bn = 160, cluster = { 2, 1 } },
  { bm = 256, bn = 176, cluster = { 2, 1 } },
  { bm = 256, bn = 192, cluster = { 2, 1 } },
  { bm = 256, bn = 112 },
  { bm = 256, bn = 64 },
  { bm = 256, bn = 64, cluster = { 2, 1 } },
  { bm = 64, bn = 128, wgs = 1, cluster = { 2, 1 } },
  { bm = 64, bn = 256, wgs = 1, cluster = { 2, 1 } },
  { bn = 128, cluster = { 1, 2 } },               -- cuBLASLt's 128x128_64x6_2x1 at 512 x 4096 x 4096 and x 14336 (s19-3)
  -- clusters of 4 at 128 and 512 tokens: B shared by the 4 tiles along M, both operands by 2, A by the 4 along N
  { bn = 128, cluster = { 4, 1 } },
  { bn = 128, cluster = { 2, 2 } },
  { bn = 64, cluster = { 1, 4 } },
  { bn = 48, cluster = { 1, 4 } },
  -- ksplit: two warpgroups on one 64-row tile, every other stage each (tl.gemm.candidates offers
  -- the narrowest that gives a tile an SM for 33 to 64 rows, with bk 128)
  { consumers = "ksplit", bn = 64 },
  { consumers = "ksplit", bn = 32 },
  { consumers = "ksplit", bn = 48 },
  { consumers = "ksplit", bn = 80 },
  { consumers = "ksplit", bn = 96 },
  { consumers = "ksplit", bn = 128 },
  { consumers = "ksplit", bn = 192 },
  -- 256 bytes of each row of B a stage (bk 128: the model's ksplit since s19-14; the 128-row tiles slower, s19-13)
  { consumers = "ksplit", bn = 32, bk = 128 },
  { consumers = "ksplit", bn = 48, bk = 128 },
  { consumers = "ksplit", bn = 64, bk = 128 },
  { consumers = "ksplit", bn = 80, bk = 128 },
  { bn = 48, bk = 128 },
  { bn = 64, bk = 128 },
  -- in a cluster of 2 along M sharing B (cuBLASLt's 96 x 64 1 x 2 and 128 x 64 1 x 2 at 128 tokens) or along N sharing A
  { consumers = "ksplit", bn = 64, cluster = { 2, 1 } },
  { consumers = "ksplit", bn = 96, cluster = { 2, 1 } },
  { consumers = "ksplit", bn = 128, cluster = { 2, 1 } },
  { consumers = "ksplit", bn = 160, cluster = { 2, 1 } },
  { consumers = "ksplit", bn = 32, cluster = { 1, 2 } },    -- cuBLASLt's 64x32_64x16_1x2 at 64 x 4096 x 4096 (s19-6)
  { consumers = "ksplit", bn = 48, cluster = { 1, 2 } },
  { consumers = "ksplit", bn = 64, cluster = { 1, 2 } },
  { consumers = "ksplit", bn = 80, cluster = { 1, 2 } },
  { swap_ab = true, consumers = "ksplit" },       -- 64 rows of B a tile, the tokens on the N side
  { swap_ab = true, consumers = "ksplit", bk = 128 },
  -- swapped, the tokens split over a 1 x 2 cluster that shares B's rows: cuBLASLt's 64x32_64x16_1x2 at 64 x 4096 x 4096
  -- (64 rows of B by 32 tokens a CTA, s19-6)
  { swap_ab = true, consumers = "ksplit", bn = 32, cluster = { 1, 2 } },
  { swap_ab = true, consumers = "ksplit", bn = 64, cluster = { 1, 2 } },
  { swap_ab = true, consumers = "ksplit", bn = 16, cluster = { 1, 2 } },
  { swap_ab = true, bn = 32, cluster = { 1, 2 } },
  -- cuBLASLt's own tile at 64 x 4096 x 4096 on one warpgroup: 64 x 32, a 1 x 2 cluster, 16 stages, no split
  -- (s18-4: 158 TFLOP/s against 64 x 32 ksplit's 210)
  { bm = 64, bn = 32, wgs = 1, cluster = { 1, 2 }, stages = 16 },
}
local function form_name(c)
  local o = { m = 1024, n = 1024, k = 1024 }
  for key, v in pairs(c) do o[key] = v end
  local cf = tl.gemm.config(o) -- the tile the defaults give
  local parts = { c.swap_ab and ("swap_ab %dx%s"):format(cf.bm, c.bn or "M") or ("%dx%d"):format(cf.bm, cf.bn) }
  if c.consumers then parts[#parts + 1] = c.consumers end
  if c.cluster then parts[#parts + 1] = ("c%dx%d"):format(c.cluster[1], c.cluster[2]) end
  if c.schedule then parts[#parts + 1] = c.schedule .. (c.splits and c.splits or "") end
  if c.bk then parts[#parts + 1] = "bk" .. c.bk end
  if c.stages then parts[#parts + 1] = "s" .. c.stages end
  if c.swizzle then parts[#parts + 1] = "sw" .. c.swizzle end
  if c.raster then parts[#parts + 1] = c.raster end
  return table.concat(parts, " ")
end
-- (swap_ab: the tile's N side is M rounded up, so built per shape too)
local function dynamic(c) return c.schedule ~= "streamk" and c.schedule ~= "splitk" and not c.swap_ab end

-- One built GEMM per dynamic form and dtype (serving every shape), one per
-- shape for the others.
local built = {}
local function gemm_for(c, m, n, k, dt)
  local key = form_name(c) .. "/" .. dt .. (dynamic(c) and "" or ("/%dx%dx%d"):format(m, n, k))
  if built[key] == nil then
    local o = { m = m, n = n, k = k, dtype = dt, dynamic = dynamic(c) or nil }
    for key2, v in pairs(c) do o[key2] = v end
    local ok, g = pcall(tl.gemm.build, o)
    if ok then ok, g = pcall(function() g.kernel:compile() return g end) end
    built[key] = ok and g or false
    if not ok then print(("  %s (%s): not built: %s"):format(form_name(c), dt, tostring(g))) end
  end
  return built[key] or nil
end

-- }===

-- {=== timing and checking

local function best_of(fn, samples, reps)
  fn()
  D.synchronize()
  if not reps then -- as many launches as fill about 5 ms (at most 10)
    local t1 = D.time(fn)
    reps = math.max(1, math.min(10, math.ceil(5 / math.max(t1, 1e-3))))
  end
  local best = math.huge
  for _ = 1, samples or 5 do
    best = math.min(best, D.time(function() for _ = 1, reps do fn() end end) / reps)
  end
  return best
end

-- D against R (cuBLAS's) with the output's rounding and a summation term: one
-- compare kernel for every shape (the count and the tolerance are arguments).
local compare
local function check(d, r, n, k, fp8)
  if not compare then
    local saved = tl.module()
    tl.new_module()
    compare = tl.kernel("gemm_bench_compare", {
      params = { { "D", tl.ptr(tl.bf16) }, { "R", tl.ptr(tl.bf16) }, { "bad", tl.ptr(tl.i32) }, { "n", tl.i64 },
                 { "rel", tl.f32 }, { "abs", tl.f32 } }, block = 256 })
    compare:define(function(_, p)
      local i = tl.global_id("x"):cast(tl.i64)
      tl.if_(i:lt(p.n), function()
        local x, y = (p.D + i):load():cast(tl.f32), (p.R + i):load():cast(tl.f32)
        local err = tl.max(x - y, y - x)
        local tol = tl.max(y, tl.const(0, tl.f32) - y) * p.rel + p.abs
        tl.if_(err:gt(tol) | err:ne(err), function() tl.atomic_add(p.bad, 1) end)
      end)
    end)
    tl.set_module(saved)
  end
  local bad <close> = D.alloc(tl.i32, 1)
  bad:fill(0)
  compare:launch { grid = (n + 255) // 256, args = { d, r, bad, n, fp8 and 2 ^ -5 or 2 ^ -7,
                                                     (fp8 and 5e-2 or 1e-3) * math.sqrt(k) } }
  D.synchronize()
  local b = bad:to_table()[1]
  return b == 0, ("%d of %d elements off cuBLAS"):format(b, n)
end

-- }===

-- One shape: cuBLAS, then every candidate (checked, then timed); -> row.
local function measure(m, n, k, dt, candidates, o)
  o = o or {}
  local fp8 = dt == "e4m3" or dt == "e5m2"
  local ein = fp8 and tl.i8 or tl.bf16
  local a <close> = D.random(ein, m * k, seed, fp8 and dt or nil)
  local b <close> = D.random(ein, n * k, seed + 1, fp8 and dt or nil)
  local d <close> = D.alloc(tl.bf16, m * n)
  local r <close> = D.alloc(tl.bf16, m * n)
  local function cublas() tl.core.blas_gemm { m = m, n = n, k = k, a = a.raw, b = b.raw, d = r.raw, ["in"] = dt, out = "bf16" } end
  local flops = 2.0 * m * n * k
  local row = { shape = ("%dx%dx%d %s"):format(m, n, k, dt), m = m, n = n, k = k, figures = {} }
  if blas then
    local ok, err = pcall(cublas)
    if not ok then -- the library loads but does not run (a stand-in driver): no ratios
      print("cuBLASLt does not run: " .. tostring(err) .. "; no ratios")
      blas = false
    end
    -- (its result is the reference the forms are checked against; its time is
    -- taken with the pick's, alternating, below)
  end
  -- the choice is cached per shape class (tl.autotune's `shape`)
  local ok_tune, g, cfg, times = pcall(tl.autotune, {
    key = "gemm/" .. dt, shape = { m, n, k },
    candidates = candidates,
    build = function(c)
      local gg = gemm_for(c, m, n, k, dt)
      if not gg then error("not built", 0) end
      d:fill(0)
      gg:run { a = a, b = b, d = d, m = m, n = n, k = k }
      if blas then
        local ok, report = check(d, r, m * n, k, fp8)
        if not ok then error(report, 0) end
      end
      return gg
    end,
    measure = function(gg)
      return best_of(function() gg:run { a = a, b = b, d = d, m = m, n = n, k = k } end, o.samples or 3, o.reps)
    end,
  })
  if not ok_tune then
    row.note = "FAILED: " .. tostring(g)
    return row
  end
  if not times.cached then
    for i, cc in ipairs(candidates) do
      local tm = times[i]
      row.figures[#row.figures + 1] = ("%s: %s"):format(form_name(cc),
        type(tm) == "number" and ("%.1f"):format(flops / tm / 1e9) or ("failed (" .. tostring(tm) .. ")"))
    end
  end
  -- the choice, checked against cuBLAS and timed against it again, alternating
  d:fill(0)
  g:run { a = a, b = b, d = d, m = m, n = n, k = k }
  local ok, report = true, "no reference"
  if blas then ok, report = check(d, r, m * n, k, fp8) end
  row.cfg = form_name(cfg)
  if not ok then
    row.note = "FAILED: " .. report
    return row
  end
  local t_ours, t_blas = math.huge, math.huge
  for _ = 1, rounds do
    t_ours = math.min(t_ours, best_of(function() g:run { a = a, b = b, d = d, m = m, n = n, k = k } end, o.samples, o.reps))
    if blas then t_blas = math.min(t_blas, best_of(cublas, o.samples, o.reps)) end
  end
  row.ours = flops / t_ours / 1e9
  row.blas = blas and flops / t_blas / 1e9 or nil
  row.note = report .. (times.cached and " (cached choice)" or "")
  return row
end

-- The candidates for a shape: every form that suits it (--quick: the first);
-- the sweep's: the `count` best of tl.gemm.candidates's model (stdlib/gemm_choice.lua).
local function candidates_for(m, n, k, dt, in_sweep)
  if quick then return { FORMS[1] } end
  if in_sweep then
    local list = tl.gemm.candidates { m = m, n = n, k = k, dtype = dt, count = count }
    local named = {}
    for _, c in ipairs(list) do named[form_name(c)] = true end
    for name in (also or ""):gmatch "[^;]+" do
      for _, forms in ipairs { FORMS, ALSO } do
        for _, c in ipairs(forms) do
          if form_name(c) == name and not named[name] then named[name] = true list[#list + 1] = c end
        end
      end
    end
    -- --swizzles, --rasters: each form so far again with each swizzle, raster order and both
    -- (false: the form's own; form_name tells the variants apart)
    local sws, rs = { false }, { false }
    for sw in (swizzles or ""):gmatch "%d+" do sws[#sws + 1] = tonumber(sw) end
    for r in (rasters or ""):gmatch "[%w_]+" do rs[#rs + 1] = r end
    for i = 1, #list do
      for _, sw in ipairs(sws) do
        for _, r in ipairs(rs) do
          local c = { swizzle = sw or nil, raster = r or nil }
          for key, x in pairs(list[i]) do c[key] = c[key] or x end
          if not named[form_name(c)] then named[form_name(c)] = true list[#list + 1] = c end
        end
      end
    end
    return list
  end
  local list = {}
  for _, c in ipairs(FORMS) do
    local use = true
    local tiles = ((m + 127) // 128) * ((n + 255) // 256)
    -- under a wave of big tiles with a long K: split K; a short K (one wave of
    -- k blocks or less): StreamK too (its 128 x 128 static plan led 4096 x 4096 x 512)
    if c.schedule then use = tiles < 132 and k >= 2048 or k <= 1024 end
    if c.bm == 64 then use = m <= 128 end                                   -- decode-sized M
    if c.swap_ab then use = m <= 64 end
    if use then list[#list + 1] = c end
  end
  return list
end

local function print_row(row)
  print(("%-28s %-24s tilua %7s  cuBLAS %7s  ratio %6s   %s"):format(row.shape, row.cfg or "-",
    row.ours and ("%.1f"):format(row.ours) or "-", row.blas and ("%.1f"):format(row.blas) or "-",
    (row.ours and row.blas) and ("%.3f"):format(row.ours / row.blas) or "-", row.note or ""))
  if #row.figures > 0 then print("    forms (TFLOP/s): " .. table.concat(row.figures, ", ")) end
end

-- {=== the shapes

local shapes = {
  { 8192, 8192, 8192 }, { 4096, 4096, 4096 }, { 2048, 2048, 2048 }, { 8192, 8192, 1024 },
  { 1024, 1024, 16384 }, { 3456, 4096, 4096 }, { 4096, 4096, 512 }, { 8192, 8192, 8192, "e4m3" },
}
-- the projections of Llama-3 (N x K of each layer's GEMMs): 8B hidden 4096,
-- ffn 14336, 8 kv heads of 128 (1024); 70B hidden 8192, ffn 28672
local layers = {
  { "8B qkv", 4096 + 2 * 1024, 4096 }, { "8B o", 4096, 4096 }, { "8B gate_up", 2 * 14336, 4096 }, { "8B down", 4096, 14336 },
  { "70B qkv", 8192 + 2 * 1024, 8192 }, { "70B o", 8192, 8192 }, { "70B gate_up", 2 * 28672, 8192 }, { "70B down", 8192, 28672 },
}
-- --only's classes: which of the sweep's shapes a class word selects (nil: all)
-- (the shapes run in the order of the classes named: the ones that matter most first under --budget)
local wanted
if classes then
  wanted = {}
  for w in classes:gmatch "[%w_]+" do
    for _, c in ipairs(w == "decode" and { "rows1", "rows16", "rows64" } or { w }) do
      if not wanted[c] then wanted[#wanted + 1], wanted[c] = c, #wanted + 1 end
    end
  end
end
local function add(class, s)
  if not wanted or wanted[class] then s.class = class shapes[#shapes + 1] = s end
end
if tokens then -- the sweep's rows of those token counts
  shapes, sweep = {}, true
  for t in tokens:gmatch "%d+" do
    for _, l in ipairs(layers) do add("rows" .. t, { tonumber(t), l[2], l[3], nil, l[1] }) end
  end
elseif sweep then
  shapes = {}
  -- the issue's shapes and squares first, then the token counts interleaved
  -- large and small, so that a run cut short by --budget still spans them
  for _, s in ipairs { { 1024, 1024, 16384 }, { 3456, 4096, 4096 }, { 4096, 4096, 512 }, { 8192, 8192, 1024 },
                       { 2048, 8192, 2048 }, { 16384, 4096, 1024 }, { 768, 3072, 768 }, { 3072, 768, 3072 } } do
    add("issue", s)
  end
  for _, s in ipairs { 512, 1024, 2048, 3072, 4096, 6144, 8192, 12288 } do add("squares", { s, s, s }) end
  for _, t in ipairs { 16384, 1, 4096, 16, 1024, 64, 8192, 128, 2048, 256, 512 } do
    for _, l in ipairs(layers) do add("rows" .. t, { t, l[2], l[3], nil, l[1] }) end
  end
  if wanted then
    for i, sh in ipairs(shapes) do sh.order = i end
    table.sort(shapes, function(a, b)
      if a.class ~= b.class then return wanted[a.class] < wanted[b.class] end
      return a.order < b.order
    end)
  end
  if only then -- --shapes: those of the sweep's shapes (a layer's name kept), in the order given
    local by = {}
    for _, sh in ipairs(shapes) do by[("%dx%dx%d"):format(sh[1], sh[2], sh[3])] = by[("%dx%dx%d"):format(sh[1], sh[2], sh[3])] or sh end
    shapes = {}
    for m, n, k in only:gmatch "(%d+)x(%d+)x(%d+)" do
      shapes[#shapes + 1] = by[m .. "x" .. n .. "x" .. k] or { tonumber(m), tonumber(n), tonumber(k) }
    end
  end
  if limit then
    while #shapes > limit do table.remove(shapes) end
  end
elseif only then
  shapes = {}
  for m, n, k, dt in only:gmatch "(%d+)x(%d+)x(%d+):?(%w*)" do
    shapes[#shapes + 1] = { tonumber(m), tonumber(n), tonumber(k), dt ~= "" and dt or nil }
  end
end

-- }===

-- --choice: each shape's candidates and the model's times, nothing measured
if choice then
  for _, s in ipairs(shapes) do
    local m, n, k, dt = s[1], s[2], s[3], s[4] or "bf16"
    local list, est = tl.gemm.candidates { m = m, n = n, k = k, dtype = dt, count = count }
    local parts = {}
    for i, c in ipairs(list) do
      local us = est[i]
      parts[i] = form_name(c) .. (us and ("  %.1f us (%.0f TFLOP/s)"):format(us, 2.0 * m * n * k / us / 1e6) or "")
    end
    print(("%-22s %-12s %s"):format(("%dx%dx%d %s"):format(m, n, k, dt), s.class or "", table.concat(parts, " | ")))
  end
  return
end

-- the clocks up before the first figure (about 0.3 s of a bandwidth-bound kernel)
do
  local w <close> = D.alloc(tl.bf16, 64 * 1024 * 1024)
  local t = 0
  while t < 300 do t = t + D.time(function() w:fill(0) end) end
end

local rows, t0, skipped = {}, os.time(), {}
for _, s in ipairs(shapes) do
  local m, n, k, dt = s[1], s[2], s[3], s[4] or "bf16"
  if budget and os.time() - t0 >= budget then
    skipped[#skipped + 1] = ("%dx%dx%d"):format(m, n, k)
    goto next
  end
  local row = measure(m, n, k, dt, candidates_for(m, n, k, dt, sweep),
                    { samples = samples or (sweep and 3 or nil) })
  row.what = s[5]
  rows[#rows + 1] = row
  print_row(row)
  collectgarbage()
  ::next::
end
if #skipped > 0 then
  print(("\nthe budget of %d s ran out: %d shapes not measured (%s)"):format(budget, #skipped, table.concat(skipped, ", ")))
end

print(("\n| shape |%s tile | tilua TFLOP/s | cuBLAS TFLOP/s | ratio |"):format(sweep and " layer |" or ""))
print(("|---|%s---|---|---|---|"):format(sweep and "---|" or ""))
local failed, logsum, nratio, wins = false, 0, 0, 0
for _, row in ipairs(rows) do
  failed = failed or row.ours == nil
  local ratio = (row.ours and row.blas) and row.ours / row.blas or nil
  if ratio then
    logsum, nratio = logsum + math.log(ratio), nratio + 1
    if ratio >= 1 then wins = wins + 1 end
  end
  print(("| %s |%s %s | %s | %s | %s |"):format(row.shape, sweep and (" " .. (row.what or "") .. " |") or "", row.cfg or "-",
    row.ours and ("%.1f"):format(row.ours) or "FAILED", row.blas and ("%.1f"):format(row.blas) or "-",
    ratio and ("%.3f"):format(ratio) or "-"))
end
if nratio > 0 then
  print(("\n%d shapes, %d with ratios: geometric mean %.3f, %d (%.0f%%) at or above cuBLASLt; %d s"):format(#rows, nratio,
    math.exp(logsum / nratio), wins, 100 * wins / nratio, os.time() - t0))
end
if failed then os.exit(1) end
