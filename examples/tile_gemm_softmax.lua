-- tile_gemm_softmax.lua: a fused kernel as a tile program (docs/tileprog.md):
-- a GEMM whose epilogue is a row softmax, softmax(Q K^T * scale) of one head
-- with 256 keys,
--
--   C[M, 256] = softmax_rows(A[M, K] . B[256, K]^T * scale)   (bf16 in, f32 accumulation, bf16 out)
--
-- The program's 128 x 256 tile holds whole rows (its columns are all the
-- keys: B is loaded at column tile 0), so the softmax is the tile's: the row
-- maximum and the row sum are tl.reduce along dim 1, expanded and broadcast
-- back over the row. `tile-to-ptx` keeps it in registers: each thread
-- reduces the values of its two rows it holds in the wgmma fragment, then
-- shfl.xor 1 and 2 combine the 4 lanes of a quad that hold a row; exp is
-- ex2.approx, the result stored with stdlib/gemm.lua's stmatrix + TMA store.
--
--   tilua examples/tile_gemm_softmax.lua [--m=M] [--k=K] [--cluster=2 --bm=256] [--emit=ir|ptx] [--stage=NAME]   (N is 256)
--
-- On a GPU it runs on fresh random data (a ragged M) and checks C against a
-- CPU reference: |C - ref| <= (2^-8 + 2^-14) |ref| + 2^-24 (bf16's rounding,
-- half an ulp, and the f32 work's error: ex2.approx, the order of the sums);
-- without a GPU it stops after ptxas ("SKIP: no GPU").
--   loadfile("examples/tile_gemm_softmax.lua")("--library") -> the example (tilua.gpu.check), with .build
local tl = require "tilua"
local check = require "tilua.gpu.check"

local N = 256 -- the row: the program tile's columns

-- {=== the tile program
-- o.cluster = 2, o.bm = 256: a 256-row program on a cluster of 2 CTAs
-- (tileas-plan-cta splits M: each CTA reduces whole rows of its 128 x 256
-- block). o.row_tiles = true: B's column tile is the program's y instead of
-- 0, so that a row spans several program tiles along N (not lowered: the
-- error at the tl.reduce line).
local function build(o)
  o = o or {}
  local bm = o.bm or 128
  tl.new_module()
  local k = tl.tile_kernel("tile_gemm_softmax", {
    params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2), C = tl.tensor(tl.bf16, 2), K = tl.i32, scale = tl.f32 },
    cluster = { o.cluster or 1, 1, 1 } })
  k:define(function(k, p)
    local pid_m = tl.program_id("x")
    local col = o.row_tiles and tl.program_id("y") or 0 -- the whole row: one tile of columns
    local acc = tl.zeros({ bm, N }, tl.f32)
    acc = tl.for_tiles(p.K, { tile = 64, stages = 3 }, acc, function(kk, acc)
      local a = tl.load(p.A, { pid_m, kk }, { bm, 64 })
      local b = tl.load(p.B, { col, kk }, { N, 64 }) -- B stored [N, K]: dot takes it transposed
      return tl.dot(a, b, acc)
    end)
    local s = acc * p.scale
    local e = tl.exp(s - tl.expand_dim(tl.reduce(s, 1, "max"), 1))          -- exp(s - the row's max)
    local r = 1.0 / tl.reduce(e, 1, "add")                                   -- a reciprocal per row
    tl.store(p.C, { pid_m, col }, (e * tl.expand_dim(r, 1)):cast(tl.bf16))
  end)
  return k
end
-- }===

local function options(...)
  local o = { m = 1000, k = 200 } -- M not a multiple of 128, K not of 64: TMA clips and zero-fills
  for _, a in ipairs(... ~= "--library" and arg or {}) do
    local key, v = a:match "^%-%-([%w_-]+)=(.*)$"
    if key and key ~= "emit" and key ~= "stage" then o[key] = math.tointeger(tonumber(v)) or v end
  end
  -- the row is the tile's N columns: fewer keys would read TMA's zeros as scores
  if o.n and o.n ~= N then error(("tile_gemm_softmax: the rows have the tile's %d keys (--n=%d), got --n=%s"):format(N, N, tostring(o.n)), 0) end
  return o
end

-- The CPU reference of row i: softmax(a_i . b_j * scale) over j (doubles).
local function reference(a, b, K, scale, i)
  local s, mx = {}, -math.huge
  for j = 0, N - 1 do
    local x = 0
    for kk = 1, K do x = x + a[i * K + kk] * b[j * K + kk] end
    s[j] = x * scale
    mx = math.max(mx, s[j])
  end
  local sum = 0
  for j = 0, N - 1 do
    s[j] = math.exp(s[j] - mx)
    sum = sum + s[j]
  end
  for j = 0, N - 1 do s[j] = s[j] / sum end
  return s
end

-- Within bf16's rounding of want (plus the f32 work's error)?
local function close(got, want) return math.abs(got - want) <= (2 ^ -8 + 2 ^ -14) * math.abs(want) + 2 ^ -24 end

local o = options(...)
local kernel
local example = { name = "tile_gemm_softmax", build = build, reference = reference, close = close, N = N }
function example.prepare()
  local t0 = os.clock()
  kernel = build(o)
  kernel:compile()
  print(("tile_gemm_softmax: script to PTX in %.1f ms (tile-to-ptx: %d stages)"):format((os.clock() - t0) * 1e3, #tl.last_stages))
  check.compile("tile_gemm_softmax", kernel)
end
-- run{seed, small} -> ok, summary: fresh random A and B, every element of C against the CPU reference
function example.run(c)
  local M, K = o.m, o.k
  if c.small then M, K = 200, 72 end
  local scale = 1 / math.sqrt(K)
  local a <close> = tl.device.random(tl.bf16, M * K, c.seed)
  local b <close> = tl.device.random(tl.bf16, N * K, c.seed + 1)
  local d <close> = tl.device.alloc(tl.bf16, M * N)
  d:fill(0)
  local bm = o.bm or 128
  kernel:run { grid = { (M + bm - 1) // bm, 1 },
               args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { d, { M, N } }, K = K, scale = scale } }
  local av, bv, got = a:to_table(), b:to_table(), d:to_table()
  local fail, count = check.mismatches("tile_gemm_softmax")
  local worst = 0
  for i = 0, M - 1 do
    local want = reference(av, bv, K, scale, i)
    for j = 0, N - 1 do
      local g = got[i * N + j + 1]
      worst = math.max(worst, math.abs(g - want[j]) / math.max(math.abs(want[j]), 2 ^ -24))
      if not close(g, want[j]) then fail("C[%d, %d] = %.6g, want %.6g", i, j, g, want[j]) end
    end
  end
  return count() == 0, ("seed %d, %d x %d x %d%s on %s: %d mismatches, worst relative error %.2g"):format(
    c.seed, M, N, K, o.cluster and (", clusters of %d"):format(o.cluster) or "", tl.device.info().name, count(), worst)
end
function example.grids() return { 1 } end

if ... == "--library" then return example end
check.main(example)
