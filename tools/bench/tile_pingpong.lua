-- tools/bench/tile_pingpong.lua: the tile GEMM of examples/tile_gemm.lua with
-- ping-pong consumers (tl.for_tiles {consumers = "pingpong"}: a 64 x 256 or a
-- 128 x 128 program, two consumer warpgroups each with the whole tile,
-- alternating programs over one ring, the mainloops and epilogues ordered by
-- two seq_bars) against the same tile program with cooperative consumers (128
-- x 256, two warpgroups of 64 rows on every tile), stdlib/gemm.lua's
-- consumers = "pingpong" of the same tiles and cuBLASLt, in one run on one device:
-- bf16 A (M x K) and B (N x K), f32 accumulation, bf16 C. Every kernel is
-- checked first against cuBLASLt's result on every element (and each tile
-- ping-pong against stdlib's ping-pong of its tile bit for bit), then timed: the best of
-- --samples samples of CUDA events around 10 back-to-back launches, the
-- kernels alternating. Without a GPU it compiles the kernels and stops.
--
--   tilua tools/bench/tile_pingpong.lua [--sizes=8192,4096] [--stages=S] [--coop_stages=S] [--samples=5]
--   (--stages: both ping-pong tiles' depth, default stdlib's: 5 at 64 x 256, 6 at 128 x 128)
local tl = require "tilua"

local o = { sizes = "8192,4096", samples = 5 }
for _, a in ipairs(arg or {}) do
  local key, v = a:match "^%-%-([%w_]+)=(.+)$"
  if key then o[key] = math.tointeger(tonumber(v)) or v end
end
local ex = assert(loadfile "examples/tile_gemm.lua")("--library")
local D = tl.device

local PP = { { bm = 64, bn = 256 }, { bm = 128, bn = 128 } } -- the ping-pong tiles
local function build_all()
  for _, t in ipairs(PP) do
    t.stages = o.stages or ex.stages_of { consumers = "pingpong", bn = t.bn }
    t.k = ex.build { consumers = "pingpong", bn = t.bn, stages = t.stages }
    t.k:compile()
  end
  local coop = ex.build { stages = o.coop_stages }
  coop:compile()
  return coop
end

if not D.available() then
  build_all()
  print("SKIP: no GPU (" .. D.error() .. "): compiled only")
  return
end

local seed = tonumber(os.getenv "TILUA_SEED") or os.time()
local blas = tl.core.blas_available()
print(("tile_pingpong bench on %s (%d SMs), seed %d, cuBLASLt %s"):format(D.info().name, D.sm_count(), seed,
  blas and "available" or "not available"))
local coop = build_all()

local function sample(fn) return D.time(function() for _ = 1, 10 do fn() end end) / 10 end

for size in tostring(o.sizes):gmatch "%d+" do
  local M = math.tointeger(tonumber(size))
  local N, K = M, M
  local a <close> = D.random(tl.bf16, M * K, seed)
  local b <close> = D.random(tl.bf16, N * K, seed + 1)
  local ref <close> = D.alloc(tl.bf16, M * N)
  local function tile_run(k, bm, bn, d)
    return function()
      k:launch { grid = { (M + bm - 1) // bm, (N + bn - 1) // bn },
                 args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { d, { M, N } }, K = K } }
    end
  end
  -- forms: tile ping-pong and stdlib ping-pong of each tile (pairs), then the tile cooperative
  local forms, std = {}, nil
  for _, t in ipairs(PP) do
    local tile = { name = ("tile ping-pong %dx%d (%d st)"):format(t.bm, t.bn, t.stages), d = D.alloc(tl.bf16, M * N) }
    tile.run = tile_run(t.k, t.bm, t.bn, tile.d)
    local g = tl.gemm.build { m = M, n = N, k = K, consumers = "pingpong", bn = t.bn, bm = t.bm, stages = t.stages }
    g.kernel:compile()
    std = std or g
    local s = { name = ("stdlib ping-pong %dx%d (%d st)"):format(t.bm, t.bn, g.cfg.stages), d = D.alloc(tl.bf16, M * N) }
    s.run = function() g:run { a = a, b = b, d = s.d } end
    tile.pair = s
    forms[#forms + 1], forms[#forms + 2] = tile, s
  end
  local cf = { name = "tile cooperative 128x256", d = D.alloc(tl.bf16, M * N) }
  cf.run = tile_run(coop, 128, 256, cf.d)
  forms[#forms + 1] = cf
  local ours = #forms -- (the last of ours: the cooperative tile)
  local cublas = blas and function()
    tl.core.blas_gemm { m = M, n = N, k = K, a = a.raw, b = b.raw, d = ref.raw, ["in"] = "bf16", out = "bf16" }
  end
  if cublas then
    local ok, err = pcall(cublas)
    if not ok then -- (the library loads but does not run: the emulator, a stand-in driver)
      print("cuBLASLt does not run: " .. tostring(err) .. "; no ratios")
      cublas = nil
    end
  end
  if cublas then forms[#forms + 1] = { name = "cuBLASLt", run = cublas } end
  -- correctness first
  for _, f in ipairs(forms) do
    if f.d then f.d:fill(0) end
    f.run()
  end
  D.synchronize()
  local all_ok = true
  for i = 1, ours do
    local ok, report
    if cublas then ok, report = std:check { a = a, b = b, d = forms[i].d, reference = ref }
    else ok, report = std:check { a = a, b = b, d = forms[i].d, seed = seed } end
    print(("%d^3 %s: %s, %s"):format(M, forms[i].name, ok and "OK" or "FAILED", report))
    all_ok = all_ok and ok
    if forms[i].pair then
      print(("%d^3 %s vs %s: %s"):format(M, forms[i].name, forms[i].pair.name,
        forms[i].d:equals(forms[i].pair.d) and "bit for bit the same" or "DIFFERENT"))
    end
  end
  if not all_ok then error("a kernel is wrong: no timing", 0) end
  local best = {}
  for i = 1, #forms do best[i] = math.huge end
  for _ = 1, o.samples do
    for i, f in ipairs(forms) do best[i] = math.min(best[i], sample(f.run)) end
  end
  local flops = 2.0 * M * N * K
  print(("%-34s %9s %10s %8s"):format(("%d^3"):format(M), "ms", "TFLOP/s", "/ cuBLASLt"))
  for i, f in ipairs(forms) do
    local r = cublas and best[#forms] / best[i] or nil
    print(("%-34s %9.4f %10.1f %8s"):format(f.name, best[i], flops / best[i] / 1e9, r and ("%.3f"):format(r) or "-"))
  end
  for i = 1, ours do
    if forms[i].pair then
      print(("%d^3 %s: / tile cooperative (speed) %.3f, / %s %.3f"):format(M, forms[i].name, best[ours] / best[i],
        forms[i].pair.name, best[i + 1] / best[i]))
    end
  end
  for i = 1, ours do forms[i].d:free() end
end
