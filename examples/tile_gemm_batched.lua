-- tile_gemm_batched.lua: a batch of GEMMs as one tile program (docs/tileprog.md):
--
--   C[z, M, N] = A[z, M, K] . B[z, N, K]^T   for z in 0 .. Z-1   (bf16 in, f32 accumulation, bf16 out)
--
-- The tensors are of rank 3 and the program's tiles of rank 2: a tile that
-- leaves out its tensor's leading dim takes that coordinate as an element
-- index, here the batch program_id("z") -- the programs along z are the
-- tile scheduler's batches, the TMA boxes {1, 128, 64} of rank-3 tensor maps.
--
--   tilua examples/tile_gemm_batched.lua [--z=Z] [--m=M] [--n=N] [--k=K] [--emit=ir|ptx] [--stage=NAME]
--
-- On a GPU it runs on fresh random data (ragged M, N, K) and checks sampled
-- elements of every batch against CPU dot products (bf16's rounding), then
-- prints its speed; without one it stops after ptxas ("SKIP: no GPU").
--   loadfile("examples/tile_gemm_batched.lua")("--library") -> the example (tilua.gpu.check), with .build
local tl = require "tilua"
local check = require "tilua.gpu.check"

local o = { z = 6, m = 700, n = 520, k = 264 }
for _, a in ipairs(... ~= "--library" and arg or {}) do
  local key, v = a:match "^%-%-([%w_]+)=(%d+)$"
  if key then o[key] = tonumber(v) end
end

-- {=== the tile program
local function build()
  tl.new_module()
  local k = tl.tile_kernel("tile_gemm_batched", {
    params = { A = tl.tensor(tl.bf16, 3), B = tl.tensor(tl.bf16, 3), C = tl.tensor(tl.bf16, 3), K = tl.i32 } })
  k:define(function(k, p)
    local m, n, z = tl.program_id("x"), tl.program_id("y"), tl.program_id("z")
    local acc = tl.for_tiles(p.K, { tile = 64, stages = 3 }, tl.zeros({ 128, 256 }, tl.f32), function(kk, acc)
      return tl.dot(tl.load(p.A, { z, m, kk }, { 128, 64 }), tl.load(p.B, { z, n, kk }, { 256, 64 }), acc)
    end)
    tl.store(p.C, { z, m, n }, acc:cast(tl.bf16))
  end)
  return k
end
-- }===

local kernel
local example = { name = "tile_gemm_batched", build = build }

function example.prepare()
  kernel = build()
  check.compile(example.name, kernel)
end

-- launch(k, a, b, c, Z, M, N, K [, async]): k:run (async: k:launch, no wait)
local function launch(k, a, b, c, Z, M, N, K, async)
  k[async and "launch" or "run"](k, { grid = { (M + 127) // 128, (N + 255) // 256, Z },
                                      args = { A = { a, { Z, M, K } }, B = { b, { Z, N, K } }, C = { c, { Z, M, N } }, K = K } })
end
example.launch = launch

-- run{seed, small, size = {Z, M, N, K}}: fresh data, 300 sampled elements of
-- each batch against CPU dot products
function example.run(c)
  local Z, M, N, K = o.z, o.m, o.n, o.k
  if c.small then Z, M, N, K = 3, 200, 296, 136 end
  if c.size then Z, M, N, K = table.unpack(c.size) end
  local D = tl.device
  local a <close> = D.random(tl.bf16, Z * M * K, c.seed)
  local b <close> = D.random(tl.bf16, Z * N * K, c.seed + 1)
  local d <close> = D.alloc(tl.bf16, Z * M * N)
  d:fill(0)
  launch(kernel, a, b, d, Z, M, N, K)
  local av, bv, got = a:to_table(), b:to_table(), d:to_table()
  math.randomseed(c.seed)
  local fail, count = check.mismatches(example.name)
  for z = 0, Z - 1 do
    for _ = 1, 300 do
      local i, j = math.random(0, M - 1), math.random(0, N - 1)
      local s = 0
      for kk = 0, K - 1 do s = s + av[(z * M + i) * K + kk + 1] * bv[(z * N + j) * K + kk + 1] end
      local g = got[(z * M + i) * N + j + 1]
      local err = math.abs(g - s)
      if err > 2 ^ -8 * math.abs(s) + 1e-2 or err ~= err then fail("C[%d, %d, %d] = %.6g, want %.6g", z, i, j, g, s) end
    end
  end
  return count() == 0, ("seed %d, %d x %d x %d x %d on %s: %d sampled elements, %d mismatches"):format(
    c.seed, Z, M, N, K, D.info().name, 300 * Z, count())
end
example.grids = function() return { 1 } end

if ... == "--library" then return example end
check.main(example)
