-- gemm_forms.lua: every kernel form of the Hopper GEMM of stdlib/gemm.lua
-- (tl.gemm) on one problem each: clusters along M and N (B and A multicast,
-- the cluster pipeline's .cta-scope releases), a 2 x 2 cluster, ping-pong
-- warpgroups over one shared ring (128 x 128, 64 x 256 or 128 x 192 a
-- warpgroup, in a cluster of 2 along M or N), tiles of 256 rows (two 64-row slices a
-- warpgroup), 192 rows (three warpgroups) and 320 rows (warpgroups of two and
-- three slices), 64-wide epilogue sub-tiles, split-K and StreamK on those
-- tiles, tiles of 128 x 192 and 128 x 64 (a cluster of 2, split-K), and the swapped form for a few rows of A (swap_ab: 33 rows), 256-row tiles of 64, 160 and 176 columns
-- and 64 x 128 on one warpgroup in a cluster of 2 along M, and two warpgroups splitting a 64-row tile's k blocks (ksplit, alone and in a cluster of 2 along M). Each is built, compiled and assembled with ptxas; on a GPU it runs on
-- fresh random data of a ragged shape (no dimension a multiple of its tile)
-- and is checked against a plain tilua reference kernel and sampled CPU dot
-- products.
--
--   tilua examples/gemm_forms.lua [--forms=name,name]
--   loadfile("examples/gemm_forms.lua")("--library") -> the example (tilua.gpu.check);
--     tools/gpu stress runs it over grids of about 1, 132, 396 and 199 tiles,
--     tools/gpu sanitize at its small size (TILUA_SMALL=1)
--
-- Without a GPU it stops after ptxas ("SKIP: no GPU").
local tl = require "tilua"
local check = require "tilua.gpu.check"

local FORMS = {
  { name = "cluster_2x1", bn = 128, cluster = { 2, 1 } },
  { name = "cluster_1x2", bn = 128, cluster = { 1, 2 } },
  { name = "cluster_2x2", bn = 128, cluster = { 2, 2 } },
  { name = "pingpong", consumers = "pingpong" }, -- 128 x 128 a warpgroup
  { name = "pingpong_64x256", consumers = "pingpong", bm = 64, bn = 256 }, -- m64n256 a warpgroup
  -- ping-pong in a cluster (one ring, a stage released on every CTA by its warpgroup)
  { name = "pingpong_cluster_2x1", consumers = "pingpong", bn = 128, cluster = { 2, 1 } },
  { name = "pingpong_cluster_1x2", consumers = "pingpong", bn = 128, cluster = { 1, 2 } },
  { name = "pingpong_64x256_cluster_2x1", consumers = "pingpong", bm = 64, bn = 256, cluster = { 2, 1 } },
  -- two m64n192k16 a warpgroup: the ping-pong tile tl.gemm.candidates offers for large shapes
  { name = "pingpong_128x192", consumers = "pingpong", bm = 128, bn = 192 },
  { name = "pingpong_128x192_cluster_2x1", consumers = "pingpong", bm = 128, bn = 192, cluster = { 2, 1 } },
  { name = "tile_256x128", bm = 256, bn = 128 },
  { name = "tile_192x192", bm = 192, bn = 192 },
  { name = "tile_320x128", bm = 320, bn = 128 },
  { name = "epi_64", bm = 256, bn = 128, epi = 64, cluster = { 1, 2 } },
  { name = "splitk_256x128", bm = 256, bn = 128, schedule = "splitk", splits = 3 },
  { name = "streamk_320x128", bm = 320, bn = 128, schedule = "streamk" },
  -- the narrower tiles tl.gemm.candidates picks where few tiles would leave SMs idle
  { name = "tile_128x192", bn = 192 },
  { name = "cluster_128x64", bn = 64, cluster = { 2, 1 } },
  { name = "splitk_128x192", bn = 192, schedule = "splitk", splits = 2 },
  -- tiles in steps of 16 columns (16-column epilogue sub-tiles), split-K in a cluster
  { name = "tile_128x80", bn = 80 },
  { name = "splitk_cluster_2x1", bn = 128, cluster = { 2, 1 }, schedule = "splitk", splits = 2 },
  { name = "splitk_cluster_1x2", bn = 80, cluster = { 1, 2 }, schedule = "splitk", splits = 3 },
  -- decode-sized M: A and B swapped (B's rows on wgmma's 64-row side), tiles stored transposed
  { name = "swap_ab", swap_ab = true, bm = 128 },
  { name = "swap_ab_streamk", swap_ab = true, schedule = "streamk" },
  -- the decode forms that fill the SMs: split-K in a cluster sharing A's rows (33 in 48, 24 a CTA); the
  -- tokens on wgmma's M side, 80 rows of B a tile, A multicast along N
  { name = "swap_ab_splitk_cluster", swap_ab = true, bn = 48, cluster = { 2, 1 }, schedule = "splitk", splits = 2 },
  { name = "decode_64x80_cluster_1x2", bm = 64, bn = 80, wgs = 1, cluster = { 1, 2 } },
  -- the decode model's picks at 64 tokens (docs/PERF.md, s12decode): 64 x 224 alone, 64 x 64 split over K in a 1 x 2 cluster
  { name = "decode_64x224", bm = 64, bn = 224, wgs = 1 },
  { name = "decode_64x64_splitk_cluster_1x2", bm = 64, bn = 64, wgs = 1, cluster = { 1, 2 }, schedule = "splitk", splits = 2 },
  -- the projections of 256 to 1024 tokens (docs/PERF.md, s14sweep): 256-row tiles of 64 to 192 columns that
  -- fill the SMs in whole waves (two 64-row slices a warpgroup; 160 columns: 32-column sub-tiles, B's share
  -- of 80 rows; 176: 16-column sub-tiles), and cuBLAS's 64 x 128 in a cluster of 2 along M (one consumer
  -- warpgroup, B multicast)
  { name = "tile_256x160_cluster_2x1", bm = 256, bn = 160, cluster = { 2, 1 } },
  { name = "tile_256x176", bm = 256, bn = 176 },
  { name = "tile_256x64_cluster_2x1", bm = 256, bn = 64, cluster = { 2, 1 } },
  { name = "tile_64x128_cluster_2x1", bm = 64, bn = 128, wgs = 1, cluster = { 2, 1 } },
  -- two warpgroups on a 64-row tile, every other k block each, the sums added in shared memory
  -- (ksplit; tl.gemm.candidates' pick at 64 x 4096 x 4096 and 64 x 6144 x 4096, docs/PERF.md s18)
  { name = "ksplit_64x32", consumers = "ksplit", bm = 64, bn = 32 },
  { name = "ksplit_64x48", consumers = "ksplit", bm = 64, bn = 48 },
  -- (in a cluster of 2 along M sharing B's stages: cuBLASLt's form at 128 tokens, 96 x 64 1 x 2)
  { name = "ksplit_64x96_c2x1", consumers = "ksplit", bm = 64, bn = 96, cluster = { 2, 1 } },
}
local only
for _, a in ipairs(... ~= "--library" and arg or {}) do
  local list = a:match "^%-%-forms=(.*)$"
  if list then
    only = {}
    for n in list:gmatch "[^,]+" do only[n] = true end
  end
end
local forms = {}
for _, f in ipairs(FORMS) do
  if not only or only[f.name] then forms[#forms + 1] = f end
end

-- The shape of form f for a check: small (under compute-sanitizer) about 2 x 3
-- tiles; for a grid request g about g tiles; else about 4 waves of 2 x 3. None
-- a multiple of the tile (rows of D and the K-major operands: 16-byte multiples).
local function shape(f, c)
  local bm, bn = f.bm or (f.swap_ab and 64) or 128, f.bn or 256
  local tiles = c.grid or (c.small and 6 or 24)
  local tn = math.max(1, math.floor(math.sqrt(tiles)))
  local tm = (tiles + tn - 1) // tn
  local k = c.small and 136 or (f.schedule and 2056 or 520)
  if f.swap_ab then return { m = 33, n = tiles * bm - 24, k = k } end -- tiles of bm rows of B
  return { m = tm * bm - 13, n = tn * bn - 24, k = k }
end

local built = {}
local function gemm(f, s)
  local key = ("%s/%d/%d/%d"):format(f.name, s.m, s.n, s.k)
  if built[key] then return built[key] end
  local cfg = { m = s.m, n = s.n, k = s.k }
  for k2, v in pairs(f) do if k2 ~= "name" then cfg[k2] = v end end
  local g = tl.gemm.build(cfg)
  local ptx = g.kernel:compile()
  tl.check_ptx("gemm_forms " .. f.name, ptx)
  built[key] = g
  return g
end

-- run{seed, grid, small} -> ok, summary: every form once on fresh data.
local function run(c)
  local bad, lines = 0, {}
  for i, f in ipairs(forms) do
    local g = gemm(f, shape(f, c))
    local cf = g.cfg
    local a <close> = tl.device.random(tl.bf16, cf.m * cf.k, c.seed + 2 * i)
    local b <close> = tl.device.random(tl.bf16, cf.n * cf.k, c.seed + 2 * i + 1)
    local d <close> = tl.device.alloc(tl.bf16, cf.m * cf.n)
    d:fill(0)
    g:run { a = a, b = b, d = d }
    tl.device.synchronize()
    local ok, report = g:check { a = a, b = b, d = d, seed = c.seed + i }
    if not ok then bad = bad + 1 end
    lines[#lines + 1] = ("%s %s (%d x %d x %d, tile %dx%d, %d stages, grid %d): %s"):format(ok and "ok" or "FAILED", f.name,
      cf.m, cf.n, cf.k, cf.bm, cf.bn, cf.stages, g.grid, report)
    if g.workspace then g.workspace:free() g.workspace = nil end
  end
  return bad == 0, ("seed %d on %s, %d forms:\n  %s"):format(c.seed, tl.device.info().name, #forms, table.concat(lines, "\n  "))
end

local example = {
  name = "gemm_forms",
  prepare = function()
    for _, f in ipairs(forms) do
      local g = gemm(f, shape(f, { small = check.small() }))
      print(("gemm_forms: %s: tile %dx%d over %d consumer warpgroups, %d stages, cluster %dx%d, %s, %s"):format(f.name,
        g.cfg.bm, g.cfg.bn, g.cfg.wgs, g.cfg.stages, g.cfg.cm, g.cfg.cn, g.cfg.consumers, g.cfg.schedule))
    end
  end,
  run = run,
  grids = function(sms) return check.grids(sms) end,
}
if ... == "--library" then return example end
check.main(example)
