-- tools/bench/tile_grouped.lua: a grouped GEMM (mixture of experts,
-- examples/tile_gemm_grouped.lua: the experts' rows contiguous, padded to the
-- tile's 128, the expert of each row block read from device memory) against
-- peers measured in the same run on the same device: the same program on the
-- static persistent scheduler (the example's runs on the dynamic one), a loop of cuBLASLt
-- GEMMs over the groups (one call per non-empty group, the same rows), a loop
-- of the plain tile GEMM (examples/tile_gemm.lua) over the groups, and one
-- dense tile GEMM of all the rows (one B: the bound the grouped program can
-- reach), and torch's grouped GEMM in a child python3 where torch has one.
-- Default: 64 experts, 32768 rows with skewed sizes (a few experts take most;
-- every 7th none), N 2048, K 4096, bf16. The grouped program is
-- checked first (its example's check: every element against the GPU reference); each is timed: the
-- best of 5 samples of CUDA events around 10 back-to-back rounds. TFLOP/s
-- count the real rows (not the padding); ratios are the grouped program's
-- throughput over each peer's (targets: >= 1.2 over the cuBLASLt loop, >= 1.0 over torch).
--
--   tilua tools/bench/tile_grouped.lua [--groups=64] [--total=32768] [--n=2048] [--k=4096]
local tl = require "tilua"

local P = dofile "tools/bench/peers.lua"
local o = P.options { groups = 64, total = 32768, n = 2048, k = 4096 }
tl.device.require()
local D = tl.device
local seed = tonumber(os.getenv "TILUA_SEED") or os.time()
local G, N, K = o.groups, o.n, o.k
local blas, why = tl.core.blas_available()

local ex = assert(loadfile "examples/tile_gemm_grouped.lua")("--library")
local plain_ex = assert(loadfile "examples/tile_gemm.lua")("--library")
local sizes = ex.skewed(G, o.total, seed)
local _, blocks, rows = ex.layout(sizes)
local total = 0
for _, s in ipairs(sizes) do total = total + s end
print(("tile_grouped bench on %s (%d SMs), %d groups of %s rows (%d, padded %d), N %d, K %d, seed %d; cuBLASLt: %s"):format(
  D.info().name, D.sm_count(), G, table.concat(sizes, " "), total, rows, N, K, seed,
  blas and "loaded" or ("absent (" .. tostring(why) .. ")")))

ex.prepare()
local ok, summary = ex.run { seed = seed }
print(("check: %s %s"):format(ok and "OK," or "FAILED,", summary))
if not ok then error("the grouped GEMM is wrong: no timing", 0) end

local grouped = ex.build()
grouped:compile()
local static = ex.build("persistent")
static:compile()
local plain = plain_ex.build()
plain:compile()
local a, b = D.random(tl.bf16, rows * K, seed), D.random(tl.bf16, G * N * K, seed + 1)
local c = D.alloc(tl.bf16, rows * N)
local e = D.from(tl.i32, blocks)
-- the loops' groups in buffers of their own (a launch and a cuBLASLt call take whole buffers)
local per = {}
for g, s in ipairs(sizes) do
  if s > 0 then
    per[#per + 1] = { m = s, a = D.random(tl.bf16, s * K, seed + 2 * g), b = D.random(tl.bf16, N * K, seed + 2 * g + 1),
                      c = D.alloc(tl.bf16, s * N) }
  end
end
local runs = {
  { ("tile grouped (expert of a block from memory), %s schedule"):format(ex.schedule), function() ex.launch(grouped, a, b, c, e, rows, G, N, K, true) end },
  { "tile grouped, static persistent schedule (ids by stride)", function() ex.launch(static, a, b, c, e, rows, G, N, K, true) end },
  { "tile GEMM, one dense GEMM of all rows (one B)", function()
    plain:launch { grid = { (rows + 127) // 128, (N + 255) // 256 },
                   args = { A = { a, { rows, K } }, B = { b, { N, K } }, C = { c, { rows, N } }, K = K } }
  end },
  { ("tile GEMM, loop of %d launches"):format(#per), function()
    for _, x in ipairs(per) do
      plain:launch { grid = { (x.m + 127) // 128, (N + 255) // 256 },
                     args = { A = { x.a, { x.m, K } }, B = { x.b, { N, K } }, C = { x.c, { x.m, N } }, K = K } }
    end
  end },
}
if blas then
  runs[#runs + 1] = { ("cuBLASLt, loop of %d calls"):format(#per), function()
    for _, x in ipairs(per) do
      tl.core.blas_gemm { m = x.m, n = N, k = K, a = x.a.raw, b = x.b.raw, d = x.c.raw, ["in"] = "bf16", out = "bf16" }
    end
  end }
end
local best = P.time(runs) -- TFLOP/s of the real rows
local torch_ms, torch_why = P.grouped_mm(sizes, N, K)
if torch_ms then
  runs[#runs + 1] = { "torch grouped_mm (child process, unpadded groups)" }
  best[#runs] = torch_ms
else
  print("torch grouped_mm: not measured (" .. tostring(torch_why) .. ")")
end
P.table(runs, best, 2.0 * total * N * K, "grouped / it", function(i) return best[i] / best[1] end)
