-- tools/bench/tile_fp8.lua: the fp8 GEMM tile program (examples/tile_gemm_fp8.lua,
-- e4m3 in, f32 accumulation, bf16 out) against cuBLASLt's fp8 GEMM (the same
-- layouts: A [M, K] and B [N, K] K-major, alpha = the product of the
-- per-tensor scales), measured in one run on one device, at 8192^3 by
-- default: the per-tensor tile program, the one with row / column scales, the
-- block-scaled one (DeepSeek-V3's: 1 x 128 of A, 128 x 128 of B), the
-- per-tensor and block-scaled ones on clusters of 2 (256-row programs, B
-- multicast), the per-tensor one with fast accumulation (no promotion, as
-- the cuBLASLt peer: ping-pong 128 x 192 in 5 stages and 4; cooperative
-- 128 x 256 alone and on a cluster of 2), the promoted per-tensor one on
-- 128 x 144 tiles, the block-scaled one with its scales prefetched into L1
-- 2, 4 and 8 k blocks ahead (for_tiles' prefetch; the default, 0, is the
-- block-scaled row), the per-tensor (promoted and fast) and block-scaled
-- ones as programmatic dependent launches, the block-scaled one with A's
-- scales in a box a warpgroup (convert-tileas-to-cutlass{merge_lines=0}) and in 4, 5 and 6
-- stages, the per-tensor one in 4 stages, the per-tensor (promoted and
-- fast) and block-scaled ones with linear wgmma descriptors
-- (convert-tileas-to-cutlass{linear_desc=1}; the block-scaled one's default)
-- and the block-scaled one without them (linear_desc=0), the per-tensor and
-- block-scaled ones on ping-pong consumers of 64 x 128 programs (8 stages;
-- block scales in 6 too), the fast cooperative 128 x 128 (the promoted
-- forms' tile without the promotion), the per-tensor one promoted by FFMA
-- with sa * sb a k block in 5 stages and 4 (block scales' promotion without
-- their loads: diagnostics), the per-tensor and block-scaled ones with each
-- k block promoted once waited for whole (DeepGEMM's order, lag=0; block
-- scales in 5 stages too), the block-scaled one with A's staged line
-- addressed from the thread's stage-0 address (staged_base=1), with the
-- release cursor moved to the wait's of the last issue (release_index=1; the
-- per-tensor one too), with both and with both and linear descriptors,
-- tl.gemm's fp8 GEMM on the
-- cooperative fast form's tile and in other forms (ping-pong
-- 128 x 192 a warpgroup, alone and on a 2 x 1 cluster; 128 x 256 on a 2 x 1
-- cluster: gemm_pp, gemm_pp_c2, gemm_c2, checked against cuBLASLt's result),
-- and cuBLASLt. Every tile program is checked first (the example's sampled
-- CPU references at a ragged size; one found wrong is not timed); then each
-- is timed: the best of 5 samples of CUDA events around 10 back-to-back
-- launches, the rows alternating; --rounds=R times them R times in the same
-- process (a table and the ratios a round). Ratios are over cuBLASLt
-- (throughput); the targets: the per-tensor program >= 1.0, the block-scaled
-- one >= 0.9 of the per-tensor one (printed after the table).
--
-- --only=NAME,NAME,...: only those forms (the table's names: tensor, blocks,
-- blocks_pf2, ...), tl.gemm's and cuBLASLt's rows always.
--
-- cuBLASLt runs twice: with fast accumulation (the reference row, as the fast
-- forms) and with its own promoted accumulation (the promoted forms' peer;
-- their ratio to it printed after the table). --clocks=1: nvidia-smi's SM
-- clock, power, temperature and throttle reasons after every round.
--
--   tilua tools/bench/tile_fp8.lua [--m=8192] [--n=8192] [--k=8192] [--rounds=1] [--clocks=1] [--only=tensor,blocks]
local tl = require "tilua"

local P = dofile "tools/bench/peers.lua"
local o = P.options { m = 8192, n = 8192, k = 8192, rounds = 1, clocks = 0 }
tl.device.require()
local D = tl.device
local seed = tonumber(os.getenv "TILUA_SEED") or os.time()
local M, N, K = o.m, o.n, o.k
local blas, why = tl.core.blas_available()
print(("tile_fp8 bench on %s (%d SMs), %d x %d x %d e4m3, seed %d; cuBLASLt: %s"):format(D.info().name, D.sm_count(), M, N, K,
  seed, blas and "loaded" or ("absent (" .. tostring(why) .. "): no ratios")))

local ex = assert(loadfile "examples/tile_gemm_fp8.lua")("--library")
-- name, build options, title (in the table's order; the scales: the name's first word)
local forms = {
  { "tensor", { scales = "tensor" }, "tile fp8, per-tensor scales" },
  { "rowcol", { scales = "rowcol" }, "tile fp8, row / column scales" },
  { "blocks", { scales = "blocks" }, "tile fp8, block scales (1 x 128, 128 x 128), staged by TMA" },
  { "blocks_pf2", { scales = "blocks", prefetch = 2 }, "tile fp8, block scales, global loads, L1 prefetch 2 k blocks ahead" },
  { "blocks_pf4", { scales = "blocks", prefetch = 4 }, "tile fp8, block scales, L1 prefetch 4 k blocks ahead" },
  { "blocks_pf8", { scales = "blocks", prefetch = 8 }, "tile fp8, block scales, L1 prefetch 8 k blocks ahead" },
  { "tensor_c2", { scales = "tensor", cluster = 2 }, "tile fp8, per-tensor, cluster of 2 (B multicast)" },
  { "blocks_c2", { scales = "blocks", cluster = 2 }, "tile fp8, block scales, cluster of 2" },
  { "tensor_fast", { scales = "tensor", fast = true }, "tile fp8, per-tensor, fast accumulation (ping-pong 128 x 192)" },
  { "tensor_fast_coop", { scales = "tensor", fast = true, consumers = "cooperative" }, "tile fp8, per-tensor, fast accumulation, cooperative 128 x 256" },
  { "tensor_fast_c2", { scales = "tensor", fast = true, cluster = 2 }, "tile fp8, per-tensor, fast accumulation, cooperative, cluster of 2" },
  { "tensor_pdl", { scales = "tensor", pdl = true }, "tile fp8, per-tensor, PDL" },
  { "blocks_pdl", { scales = "blocks", pdl = true }, "tile fp8, block scales, PDL" },
  { "tensor_fast_pdl", { scales = "tensor", fast = true, pdl = true }, "tile fp8, per-tensor, fast accumulation, PDL" },
  -- (without tileas-insert-OCG-knobs: no `.pragma "next knob FenceCode"` before
  -- the mbarrier ops and fences, which tl.gemm's PTX does not have either)
  { "tensor_fast_noknobs", { scales = "tensor", fast = true, knobs = false }, "tile fp8, per-tensor, fast accumulation, no OCG knobs" },
  { "blocks_noknobs", { scales = "blocks", knobs = false }, "tile fp8, block scales, staged by TMA, no OCG knobs" },
  { "blocks_boxes", { scales = "blocks", lowering = "merge_lines=0" }, "tile fp8, block scales, staged, A's scales a box a warpgroup" },
  { "blocks_s4", { scales = "blocks", stages = 4 }, "tile fp8, block scales, staged by TMA, 4 stages" },
  { "blocks_s5", { scales = "blocks", stages = 5 }, "tile fp8, block scales, staged by TMA, 5 stages" },
  { "blocks_s6", { scales = "blocks", stages = 6 }, "tile fp8, block scales, staged by TMA, 6 stages" },
  { "tensor_s4", { scales = "tensor", stages = 4 }, "tile fp8, per-tensor scales, 4 stages" },
  -- (the fast form's ping-pong in 4 stages; the promoted per-tensor one on
  -- 128 x 144 tiles, cuBLASLt's promoted tile, in 5 stages and 6 as cuBLASLt's)
  { "tensor_fast_s4", { scales = "tensor", fast = true, stages = 4 }, "tile fp8, per-tensor, fast, ping-pong 128 x 192, 4 stages" },
  { "tensor_bn144", { scales = "tensor", bn = 144 }, "tile fp8, per-tensor scales, 128 x 144" },
  { "tensor_bn144_s6", { scales = "tensor", bn = 144, stages = 6 }, "tile fp8, per-tensor scales, 128 x 144, 6 stages" },
  -- (the consumers' wgmma descriptors as one base plus offsets:
  -- convert-tileas-to-cutlass{linear_desc=1}, the block-scaled form's default
  -- since s16fp8-3, whose row blocks_lin is now the same kernel as blocks;
  -- blocks_addr: its descriptors from each address, linear_desc=0, the
  -- default before)
  { "tensor_lin", { scales = "tensor", lowering = "linear_desc=1" }, "tile fp8, per-tensor scales, linear descriptors" },
  { "blocks_lin", { scales = "blocks", lowering = "linear_desc=1" }, "tile fp8, block scales, staged by TMA, linear descriptors" },
  { "blocks_addr", { scales = "blocks", lowering = "linear_desc=0" }, "tile fp8, block scales, staged by TMA, descriptors from each address (linear_desc=0)" },
  { "tensor_fast_lin", { scales = "tensor", fast = true, lowering = "linear_desc=1" }, "tile fp8, per-tensor, fast, ping-pong 128 x 192, linear descriptors" },
  -- (the promoted forms on ping-pong consumers of 64-row programs, 64 x 128
  -- each: a consumer's accumulator and its two lagged sums fit a warpgroup;
  -- a stage holds half a cooperative stage's work, so 8 stages and 6; and the
  -- fast cooperative 128 x 128, the promoted forms' tile without promotion)
  { "tensor_pp64", { scales = "tensor", consumers = "pingpong", bm = 64, stages = 8 }, "tile fp8, per-tensor scales, ping-pong 64 x 128, 8 stages" },
  { "blocks_pp64", { scales = "blocks", consumers = "pingpong", bm = 64, stages = 8 }, "tile fp8, block scales, ping-pong 64 x 128, 8 stages" },
  { "blocks_pp64_s6", { scales = "blocks", consumers = "pingpong", bm = 64, stages = 6 }, "tile fp8, block scales, ping-pong 64 x 128, 6 stages" },
  { "tensor_fast128", { scales = "tensor", fast = true, consumers = "cooperative", bn = 128, stages = 5 }, "tile fp8, per-tensor, fast, cooperative 128 x 128, 5 stages" },
  -- (diagnostics of the block-scaled form's distance from the per-tensor one:
  -- per-tensor scales promoted by FFMA with sa * sb a k block, as block
  -- scales are, without their loads; in 5 stages and in block scales' 4)
  { "tensor_fma", { scales = "tensor", promote = "fma" }, "tile fp8, per-tensor, promoted by FFMA (sa * sb a k block), 5 stages" },
  { "tensor_fma_s4", { scales = "tensor", promote = "fma", stages = 4 }, "tile fp8, per-tensor, promoted by FFMA, 4 stages" },
  -- (each k block waited for whole, then promoted: DeepGEMM's order,
  -- convert-tileas-to-cutlass{lag=0}; the consumers overlap each other's
  -- promotion, not their own)
  { "blocks_nolag", { scales = "blocks", lowering = "lag=0" }, "tile fp8, block scales, each k block promoted once waited for (lag=0)" },
  { "blocks_nolag_s5", { scales = "blocks", stages = 5, lowering = "lag=0" }, "tile fp8, block scales, lag=0, 5 stages" },
  { "tensor_nolag", { scales = "tensor", lowering = "lag=0" }, "tile fp8, per-tensor scales, lag=0" },
  -- (fewer instructions a k block in the lagged loop: A's staged line
  -- addressed as the thread's stage-0 address plus the stage's offset,
  -- staged_base=1; the release cursor moved to the wait's cursor of the
  -- block issued last, not incremented, release_index=1, per-tensor too; both)
  { "blocks_sbase", { scales = "blocks", lowering = "staged_base=1" }, "tile fp8, block scales, staged line at stage 0 + the stage's offset (staged_base=1)" },
  { "blocks_rel", { scales = "blocks", lowering = "release_index=1" }, "tile fp8, block scales, released by the wait's cursor (release_index=1)" },
  { "tensor_rel", { scales = "tensor", lowering = "release_index=1" }, "tile fp8, per-tensor scales, released by the wait's cursor (release_index=1)" },
  { "blocks_both", { scales = "blocks", lowering = "staged_base=1,release_index=1" }, "tile fp8, block scales, staged_base=1 and release_index=1" },
  { "blocks_all", { scales = "blocks", lowering = "staged_base=1,release_index=1,linear_desc=1" }, "tile fp8, block scales, staged_base=1, release_index=1 and linear descriptors" },
  -- (tl.gemm's fp8 GEMM in other forms than the reference row's: what a
  -- tile shape, ping-pong or a cluster would give the per-tensor fast form;
  -- each checked against cuBLASLt's result, the report printed)
  { "gemm_pp", { gemm = { consumers = "pingpong", bm = 128, bn = 192 } }, "tl.gemm fp8 ping-pong 128 x 192 a warpgroup (stdlib)" },
  { "gemm_pp_c2", { gemm = { consumers = "pingpong", bm = 128, bn = 192, cluster = 2 } }, "tl.gemm fp8 ping-pong 128 x 192, cluster 2 x 1 (stdlib)" },
  { "gemm_c2", { gemm = { bn = 256, cluster = 2 } }, "tl.gemm fp8 128 x 256, cluster 2 x 1 (stdlib)" },
}
local only
for _, a in ipairs(arg or {}) do
  local list = a:match "^%-%-only=(.+)$"
  if list then
    only = {}
    for w in list:gmatch "[^,]+" do only[w] = true end
  end
end
if only then
  local kept = {}
  for _, f in ipairs(forms) do if only[f[1]] then kept[#kept + 1] = f end end
  forms = kept
end
local tile_to_ptx -- (the tile programs' pipeline: the no-knobs rows leave its last pass out)
for _, p in ipairs(tl.core.pipelines()) do if p.name == "tile-to-ptx" then tile_to_ptx = p.passes end end
local kernels, wrong = {}, {} -- (a kernel whose check failed is not timed)
for _, f in ipairs(forms) do
  local name = f[1]
  if f[2].gemm then goto next end
  local k = ex.build(f[2])
  kernels[name] = k
  local pipe = f[2].knobs == false and tile_to_ptx:gsub(",tileas%-insert%-OCG%-knobs", "") or nil
  if f[2].lowering then pipe = (pipe or tile_to_ptx):gsub("convert%-tileas%-to%-cutlass", "%0{" .. f[2].lowering .. "}") end
  k:compile(pipe)
  local ok, summary = ex.check(k, { seed = seed, scales = f[2].scales })
  print(("check %s: %s %s"):format(name, ok and "OK," or "FAILED (not timed),", summary))
  wrong[name] = not ok or nil
  ::next::
end

local a, b = D.random(tl.i8, M * K, seed, "e4m3"), D.random(tl.i8, N * K, seed + 1, "e4m3")
local sa, sb = D.random(tl.f32, M, seed + 2), D.random(tl.f32, N, seed + 3)
local ssa, ssb = ex.block_scale_shapes(M, N, K)
local bsa, bsb = D.random(tl.f32, ssa[1] * ssa[2], seed + 4), D.random(tl.f32, ssb[1] * ssb[2], seed + 5)
local c1, c2, c3 = D.alloc(tl.bf16, M * N), D.alloc(tl.bf16, M * N), D.alloc(tl.bf16, M * N)
local runs, row_of, gemms = {}, {}, {}
for _, f in ipairs(forms) do
  local name, scales = f[1], f[2].scales
  if f[2].gemm then
    local go = { m = M, n = N, k = K, dtype = "e4m3", out = "bf16", alpha = 0.125 }
    for key, v in pairs(f[2].gemm) do go[key] = v end
    local g = tl.gemm.build(go)
    runs[#runs + 1] = { f[3], function() g:run { a = a, b = b, d = c2 } end }
    row_of[name], gemms[name] = #runs, g
  elseif not wrong[name] then
    local sa_, sb_, c = 0.5, 0.25, c1
    if scales == "rowcol" then sa_, sb_, c = sa, sb, c2 elseif scales == "blocks" then sa_, sb_, c = bsa, bsb, c2 end
    runs[#runs + 1] = { f[3], function() ex.launch(kernels[name], a, b, c, sa_, sb_, M, N, K, true) end }
    row_of[name] = #runs
  end
end
-- (a reference row: the stdlib GEMM of the cooperative fast form's tile, 128 x 256 x 128
-- in 4 stages, alpha the scales' product; checked by spec/tensor_gpu_spec.lua)
local g = tl.gemm.build { m = M, n = N, k = K, dtype = "e4m3", out = "bf16", bn = 256, alpha = 0.125 }
runs[#runs + 1] = { "tl.gemm fp8 128 x 256 (stdlib, no promotion)", function() g:run { a = a, b = b, d = c1 } end }
-- (cuBLASLt with its promoted accumulation: the promoted tile forms' peer)
local split_row
if blas then
  runs[#runs + 1] = { "cuBLASLt fp8, promoted (fast accumulation off)", function()
    tl.core.blas_gemm { m = M, n = N, k = K, a = a.raw, b = b.raw, d = c3.raw, ["in"] = "e4m3", out = "bf16", alpha = 0.125,
                        fast_accum = false }
  end }
  split_row = #runs
  runs[#runs + 1] = { "cuBLASLt fp8 (alpha)", function()
    tl.core.blas_gemm { m = M, n = N, k = K, a = a.raw, b = b.raw, d = c3.raw, ["in"] = "e4m3", out = "bf16", alpha = 0.125 }
  end }
end
-- (tl.gemm's other forms against cuBLASLt's result, before the timing)
if blas then
  tl.core.blas_gemm { m = M, n = N, k = K, a = a.raw, b = b.raw, d = c3.raw, ["in"] = "e4m3", out = "bf16", alpha = 0.125 }
  for _, f in ipairs(forms) do
    local gf = gemms[f[1]]
    if gf then
      gf:run { a = a, b = b, d = c2 }
      D.synchronize()
      local ok, report = gf:check { a = a, b = b, d = c2, reference = c3 }
      print(("check %s: %s %s"):format(f[1], ok and "OK," or "DIFFERS from cuBLASLt,", report))
    end
  end
end
for round = 1, o.rounds do
  local best = P.time(runs)
  local peer = blas and best[#runs]
  if o.rounds > 1 then print(("round %d of %d"):format(round, o.rounds)) end
  P.table(runs, best, 2.0 * M * N * K, "/ cuBLASLt fp8", function(i) return peer and peer / best[i] end)
  -- the block-scaled forms over the per-tensor one with the same promotion (the target: >= 0.9)
  for _, f in ipairs(forms) do
    local i, t = row_of[f[1]], row_of[f[1]:match "_c2" and "tensor_c2" or f[1]:match "_pdl" and "tensor_pdl" or f[1]:match "_lin" and "tensor_lin" or "tensor"]
    if f[2].scales == "blocks" and i and t then
      print(("%s: %.3f of the per-tensor form's throughput"):format(f[3], best[t] / best[i]))
      -- (a ping-pong block-scaled form over the per-tensor one of the same form too)
      local pp = f[1]:match "_pp64" and row_of.tensor_pp64
      if pp then print(("%s: %.3f of the per-tensor ping-pong 64 x 128's"):format(f[3], best[pp] / best[i])) end
    end
  end
  -- the promoted forms over cuBLASLt's promoted accumulation
  for _, f in ipairs(forms) do
    local i = row_of[f[1]]
    if i and split_row and not f[2].fast and not f[2].gemm then
      print(("%s: %.3f of cuBLASLt's promoted accumulation"):format(f[3], best[split_row] / best[i]))
    end
  end
  -- --clocks=1: the SM clock, power and temperature after the round (nvidia-smi)
  if o.clocks == 1 then print(("clocks after round %d: %s"):format(round, P.clocks())) end
end
