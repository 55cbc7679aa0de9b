-- tools/bench/tile_batched.lua: a batch of GEMMs as one tile program
-- (examples/tile_gemm_batched.lua: rank-3 tensors, the batch program_id("z"))
-- against two peers in the same run on the same device, all with the tile
-- 128 x 256 x 64, 3 stages, persistent (examples/tile_gemm.lua's program):
--   stacked: one GEMM of (Z*M) x N x K (the same FLOPs; one B for every batch,
--            so it is the bound a batch of independent B can reach);
--   loop:    Z launches of the plain GEMM, one per batch (what a batch costs
--            without a batch dim).
-- The batched kernel is checked first (its example's sampled CPU references at
-- a ragged size), then the three are timed: the best of 5 samples of CUDA
-- events around 10 back-to-back launches (the loop: 10 rounds of Z launches).
--
--   tilua tools/bench/tile_batched.lua [--z=16] [--m=1024] [--n=1024] [--k=1024]
local tl = require "tilua"

local P = dofile "tools/bench/peers.lua"
local o = P.options { z = 16, m = 1024, n = 1024, k = 1024 }
tl.device.require()
local D = tl.device
local seed = tonumber(os.getenv "TILUA_SEED") or os.time()
local Z, M, N, K = o.z, o.m, o.n, o.k

local batched_ex = assert(loadfile "examples/tile_gemm_batched.lua")("--library")
local plain_ex = assert(loadfile "examples/tile_gemm.lua")("--library")
print(("tile_batched bench on %s (%d SMs), %d x %d x %d x %d, seed %d"):format(D.info().name, D.sm_count(), Z, M, N, K, seed))

batched_ex.prepare()
local ok, summary = batched_ex.run { seed = seed }
print(("check: %s %s"):format(ok and "OK," or "FAILED,", summary))
if not ok then error("the batched GEMM is wrong: no timing", 0) end

local batched = batched_ex.build()
batched:compile()
local plain = plain_ex.build()
plain:compile()
local a, b = D.random(tl.bf16, Z * M * K, seed), D.random(tl.bf16, Z * N * K, seed + 1)
local c = D.alloc(tl.bf16, Z * M * N)
local function run_batched() batched_ex.launch(batched, a, b, c, Z, M, N, K, true) end
local function run_stacked()
  plain:launch { grid = { (Z * M + 127) // 128, (N + 255) // 256 },
                 args = { A = { a, { Z * M, K } }, B = { b, { N, K } }, C = { c, { Z * M, N } }, K = K } }
end
-- the loop's batches in buffers of their own (a launch takes a whole buffer)
local per = {}
for z = 1, Z do
  per[z] = { a = D.random(tl.bf16, M * K, seed + 2 * z), b = D.random(tl.bf16, N * K, seed + 2 * z + 1), c = D.alloc(tl.bf16, M * N) }
end
local function run_loop()
  for _, x in ipairs(per) do
    plain:launch { grid = { (M + 127) // 128, (N + 255) // 256 },
                   args = { A = { x.a, { M, K } }, B = { x.b, { N, K } }, C = { x.c, { M, N } }, K = K } }
  end
end

local runs = { { "tile batched (rank 3, z)", run_batched }, { "tile GEMM stacked (one B)", run_stacked },
               { ("tile GEMM, loop of %d launches"):format(Z), run_loop } }
local best = P.time(runs)
P.table(runs, best, 2.0 * Z * M * N * K, "/ batched (time)", function(i) return best[1] / best[i] end)
