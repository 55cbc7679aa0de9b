-- tile_gemm_grouped.lua: a grouped GEMM (mixture of experts) as a tile program
-- (docs/tileprog.md), the groups' rows contiguous in one tensor:
--
--   C[rows of group g, N] = A[rows of group g, K] . B[g, N, K]^T   for each group g (bf16 in, f32 accumulation, bf16 out)
--
-- Each group's rows (an expert's tokens) start at a multiple of the tile's
-- 128 rows (padded); Expert[b] (i32, device memory) names the group of row
-- block b. A program reads its block's expert from memory and loads B's tile
-- of that expert: a rank-3 B whose tile leaves out the expert dim, indexed by
-- a value the producer loads (a single-element tile, tl.extract). The group
-- sizes (any skew, empty groups too) only change Expert and the number of
-- blocks; every program is one tile of work. The scheduler claims the
-- programs at run time (schedule = "dynamic": an atomic counter, docs/tileprog.md),
-- so a worker slowed down takes fewer tiles; --schedule=persistent gives the
-- static persistent scheduler (ids by stride).
--
--   tilua examples/tile_gemm_grouped.lua [--groups=G] [--n=N] [--k=K] [--schedule=dynamic|persistent] [--emit=ir|ptx] [--stage=NAME]
--
-- On a GPU it runs on fresh random data with skewed group sizes and checks
-- every element of every group against the GPU reference GEMM of
-- stdlib/gemm.lua, and sampled ones against CPU dot products (bf16's
-- rounding); without one it stops after ptxas ("SKIP: no GPU").
--   loadfile("examples/tile_gemm_grouped.lua")("--library") -> the example (tilua.gpu.check), with .build
local tl = require "tilua"
local check = require "tilua.gpu.check"

local o = { groups = 8, n = 520, k = 264, schedule = "dynamic" }
for _, a in ipairs(... ~= "--library" and arg or {}) do
  local key, v = a:match "^%-%-([%w_]+)=(%w+)$"
  if key then o[key] = tonumber(v) or v end
end

local BM = 128 -- the tile's rows: each group starts at a multiple of it

-- {=== the tile program
local function build(schedule)
  tl.new_module()
  local k = tl.tile_kernel("tile_gemm_grouped", {
    params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 3), C = tl.tensor(tl.bf16, 2), Expert = tl.tensor(tl.i32, 1),
               K = tl.i32 }, schedule = schedule or o.schedule })
  k:define(function(k, p)
    local m, n = tl.program_id("x"), tl.program_id("y")
    local g = tl.extract(tl.load(p.Expert, { m }, { 1 }), { 0 }) -- this row block's group
    local acc = tl.for_tiles(p.K, { tile = 64, stages = 3 }, tl.zeros({ BM, 256 }, tl.f32), function(kk, acc)
      return tl.dot(tl.load(p.A, { m, kk }, { BM, 64 }), tl.load(p.B, { g, n, kk }, { 256, 64 }), acc)
    end)
    tl.store(p.C, { m, n }, acc:cast(tl.bf16))
  end)
  return k
end
-- }===

-- The layout of groups of `sizes` rows: each group's first row (a multiple
-- of BM), the blocks' groups (Expert, 0-based) and the padded row count.
local function layout(sizes)
  local first, expert, rows = {}, {}, 0
  for g, s in ipairs(sizes) do
    first[g] = rows
    for _ = 1, (s + BM - 1) // BM do expert[#expert + 1] = g - 1 end
    rows = rows + (s + BM - 1) // BM * BM
  end
  return first, expert, rows
end

-- Skewed group sizes (a few groups take most rows, some none): G sizes summing
-- to about `total`, from `seed`.
local function skewed(G, total, seed)
  local s, w, sum = seed, {}, 0
  for g = 1, G do
    s = (s * 1103515245 + 12345) & 0x7fffffff
    w[g] = (g % 7 == 3) and 0 or 1.0 / (1 + (s >> 8) % G) ^ 1.2 -- Zipf-like weights, every 7th group empty
    sum = sum + w[g]
  end
  local out = {}
  for g = 1, G do out[g] = math.floor(total * w[g] / sum + 0.5) end
  return out
end

local kernel
local example = { name = "tile_gemm_grouped", build = build, layout = layout, skewed = skewed, BM = BM, schedule = o.schedule }

function example.prepare()
  kernel = build()
  check.compile(example.name, kernel)
end

-- launch(k, a, b, c, expert, rows, G, N, K [, async]): rows the padded row
-- count; k:run (async: k:launch, no wait)
local function launch(k, a, b, c, expert, rows, G, N, K, async)
  k[async and "launch" or "run"](k, { grid = { rows // BM, (N + 255) // 256 },
                                      args = { A = { a, { rows, K } }, B = { b, { G, N, K } }, C = { c, { rows, N } },
                                               Expert = { expert, { rows // BM } }, K = K } })
end
example.launch = launch

-- Every element of group g's rows of C (rows first .. first + size - 1)
-- against the GPU reference kernel of stdlib/gemm.lua on views of A, B and C
-- (a GEMM of size x N x K, its f32 result compared element by element); on
-- the CPU emulator (no views) against CPU dot products. -> mismatches, report
local function check_group(a, b, d, first, size, g, N, K, seed)
  if tl.options.emulate then
    local av, bv, got = a:to_table(), b:to_table(), d:to_table()
    local bad = 0
    for i = first, first + size - 1 do
      for j = 0, N - 1 do
        local s = 0
        for kk = 0, K - 1 do s = s + av[i * K + kk + 1] * bv[(g * N + j) * K + kk + 1] end
        local err = math.abs(got[i * N + j + 1] - s)
        if err > 2 ^ -8 * math.abs(s) + 1e-2 or err ~= err then bad = bad + 1 end
      end
    end
    return bad, ("%d of %d elements off the CPU's dot products"):format(bad, size * N)
  end
  local ref = tl.gemm.build { m = size, n = N, k = K }
  local ok, report = ref:check { a = a:view(first * K + 1, size * K), b = b:view(g * N * K + 1, N * K),
                                 d = d:view(first * N + 1, size * N), seed = seed, samples = 0 }
  return ok and 0 or 1, report
end

-- run{seed, small, groups, total, n, k}: fresh data, skewed group sizes,
-- every element of each non-empty group checked (check_group), and 100
-- sampled elements of each against CPU dot products
function example.run(c)
  local G, N, K, total = c.groups or o.groups, c.n or o.n, c.k or o.k, c.total or 3000
  if c.small then G, N, K, total = 4, 296, 136, 500 end
  local sizes = skewed(G, total, c.seed)
  local first, blocks, rows = layout(sizes)
  local D = tl.device
  local a <close> = D.random(tl.bf16, rows * K, c.seed)
  local b <close> = D.random(tl.bf16, G * N * K, c.seed + 1)
  local d <close> = D.alloc(tl.bf16, rows * N)
  local e <close> = D.from(tl.i32, #blocks > 0 and blocks or { 0 })
  d:fill(0)
  if rows > 0 then launch(kernel, a, b, d, e, rows, G, N, K) end
  local fail, count = check.mismatches(example.name)
  local elements = 0
  for g = 1, G do
    if sizes[g] > 0 then
      local bad, report = check_group(a, b, d, first[g], sizes[g], g - 1, N, K, c.seed)
      if bad > 0 then fail("group %d (%d rows): %s", g - 1, sizes[g], report) end
      elements = elements + sizes[g] * N
    end
  end
  local av, bv, got = a:to_table(), b:to_table(), d:to_table()
  math.randomseed(c.seed)
  local n = 0
  for g = 1, G do
    for _ = 1, sizes[g] > 0 and 100 or 0 do
      local i, j = first[g] + math.random(0, sizes[g] - 1), math.random(0, N - 1)
      local s = 0
      for kk = 0, K - 1 do s = s + av[i * K + kk + 1] * bv[((g - 1) * N + j) * K + kk + 1] end
      local v = got[i * N + j + 1]
      local err = math.abs(v - s)
      if err > 2 ^ -8 * math.abs(s) + 1e-2 or err ~= err then fail("C[%d, %d] (group %d) = %.6g, want %.6g", i, j, g - 1, v, s) end
      n = n + 1
    end
  end
  return count() == 0, ("seed %d, %s schedule, %d groups of %s rows (%d padded), N %d, K %d on %s: %d elements checked, %d sampled against the CPU, %d mismatches"):format(
    c.seed, o.schedule, G, table.concat(sizes, " "), rows, N, K, D.info().name, elements, n, count())
end
example.grids = function() return { 1 } end

if ... == "--library" then return example end
check.main(example)
