-- tile_gemm_fp8.lua: an fp8 GEMM with scales as a tile program (docs/tileprog.md):
--
--   C[M, N] = (A[M, K] . B[N, K]^T) * sa * sb        (e4m3 or e5m2 in, f32 accumulation, bf16 out)
--
-- A and B are tensors of 8-bit integers holding fp8 bytes; tl.dot's
-- fp8 = "e4m3" multiplies them as those floats (wgmma's kind e4m3, k 32 a
-- step; products exact, f32 accumulation). The scales are applied to the f32
-- accumulator in the epilogue, as fp8 training kernels do:
--   scales = "tensor": sa, sb scalars (one per tensor);
--   scales = "rowcol": sa[M] per row of A, sb[N] per column of B (per token /
--                      per channel), broadcast over the tile.
--   scales = "blocks": block scaling as DeepSeek-V3 trains: sa[K/128, M] per
--                      row of A and block of 128 of K (stored K-block-major,
--                      so that a program's 128 rows are one coalesced read),
--                      sb[N/128, K/128] per block of 128 x 128 of B (sizes
--                      rounded up). Each k block's product is scaled as it is
--                      added to the accumulator: acc + (a . b^T) * sa * sb.
--                      The lowering stages them (docs/tileprog.md,
--                      "Staged loads"): the producer's TMA brings each k
--                      block's scales into the ring's stage beside its
--                      tiles, the consumers read them from shared memory
--                      (sa's and sb's rows padded to 4 floats: TMA's
--                      row strides). On a cluster, or with --prefetch=D
--                      (for_tiles' prefetch: their lines into L1 D k blocks
--                      ahead), they stay global loads a block ahead (the
--                      next iteration's two blocks loaded together).
--                      Measured on an H200 (docs/PERF.md), the prefetch
--                      slows the global loads (D = 2, 4, 8: 0.68, 0.69,
--                      0.55 of the per-tensor form's throughput, none: 0.81).
-- The accumulation is promoted: the tensor cores keep about 14 bits of an
-- fp8 sum, so each K block of 128 is summed by wgmma from zero and added to
-- the f32 accumulator in registers (tileas.dot {fp8}'s lowering, as
-- DeepSeek-V3's fp8 GEMMs do; the lowering promotes a block once the next
-- one is issued). The tile is 128 x 128 x 128 (128 fp8 bytes of K: one
-- 128-byte swizzled row; N 128 so that two blocks' sums and the accumulator
-- fit a warpgroup's registers), 5 stages; 4 with block scales (on an H200,
-- s11fp8-2 in docs/PERF.md: 4 stages beat 5 in 4 of 6 interleaved rounds, by
-- 1.2 % on the mean of the ratios to per-tensor, 0.896 against 0.885; 6 was
-- slower in the one round it ran; s15fp8-2: 4 beat 5 in 7 of 8 rounds, 5 at
-- 0.966 of 4 on the mean; --stages=N sets it). --fast (per-tensor or
-- row / column scales): no promotion, the k blocks accumulate in the tensor cores
-- (tl.dot's fast_accum, cuBLASLt's fast accumulation), which frees the
-- registers for larger tiles. K is a multiple of 16 (TMA's
-- row strides are multiples of 16 bytes), not of the tile. --fast runs
-- ping-pong consumers by default: 128 x 192 programs, 5 stages, the two
-- consumer warpgroups each taking a whole program in turn over one ring
-- (tl.for_tiles's consumers = "pingpong"; stdlib's fp8 ping-pong of that
-- tile), so that one's epilogue overlaps the other's mainloop (on an H200,
-- s14fp8-1 and -2 in docs/PERF.md: 1.002-1.125 of the cooperative 128 x 256
-- in 14 of 14 interleaved rounds, 1.065-1.154 of cuBLASLt's fp8; 1.03 at
-- ncu's locked clocks); --fast --cooperative (and --fast --cluster) the
-- cooperative 128 x 256 in 4 stages. --bn=N: the promoted per-tensor and
-- row / column forms' tile columns (128; 144 fits, cuBLASLt's promoted tile,
-- but measured 0.79-0.88 of 128 in s14fp8-2). --pingpong --bm=64 (the
-- promoted forms, block scales too): ping-pong consumers of 64 x 128
-- programs, each consumer warpgroup a whole program in turn (its accumulator
-- and the lagged promotion's two sums, 3 x 64 registers, fit a warpgroup; a
-- 128-row program's would not), so that one's epilogue runs under the
-- other's mainloop; a stage holds half a cooperative stage's work (--stages=8
-- as deep in time as the cooperative form's 4). Measured slower on an H200
-- (s15fp8-1 in docs/PERF.md: block scales 0.70-0.75 of the cooperative 128 x
-- 128, per-tensor 0.69-0.71): not the default.
--
-- --pdl: a programmatic dependent launch (each program waits for the previous
-- grid before its first read, then lets the next grid launch; once per CTA:
-- the lowering keeps them before the loop of programs).
--
-- --lag=0 (the promoted forms): each k block waited for whole, then promoted,
-- as DeepGEMM's kernels do (tl.options.promote_lag = false), instead of a
-- block late with the next block's wgmmas in flight.
--
--   tilua examples/tile_gemm_fp8.lua [--m=M] [--n=N] [--k=K] [--rowcol|--blocks [--prefetch=D]] [--fast [--cooperative]] [--bn=N] [--pingpong --bm=64] [--pdl] [--e5m2] [--stages=N] [--cluster] [--lag=0] [--emit=ir|ptx] [--stage=NAME]
--
-- On a GPU it runs on fresh random fp8 data (values of magnitude in [0.25, 4))
-- and random scales, and checks sampled elements of C against CPU dot products
-- of the decoded bytes (bf16's rounding); without one it stops after ptxas
-- ("SKIP: no GPU").
--   loadfile("examples/tile_gemm_fp8.lua")("--library") -> the example (tilua.gpu.check), with .build
local tl = require "tilua"
local check = require "tilua.gpu.check"
local fp8_dec = require("tilua.emulate.values").fp8_dec

local o = { m = 1000, n = 1480, k = 528, scales = "tensor", fp8 = "e4m3" }
for _, a in ipairs(... ~= "--library" and arg or {}) do
  local key, v = a:match "^%-%-([%w_]+)=(%d+)$"
  if key then o[key] = tonumber(v) end
  if a == "--rowcol" then o.scales = "rowcol" end
  if a == "--blocks" then o.scales = "blocks" end
  if a == "--cluster" then o.cluster = 2 end
  if a == "--e5m2" then o.fp8 = "e5m2" end
  if a == "--fast" then o.fast = true end
  if a == "--pdl" then o.pdl = true end
  if a == "--cooperative" then o.consumers = "cooperative" end
  if a == "--pingpong" then o.consumers = "pingpong" end
end

-- {=== the tile program
local function build(opts)
  opts = opts or o
  local fp8, scales = opts.fp8 or "e4m3", opts.scales or "tensor"
  local rowcol, blocks = scales == "rowcol", scales == "blocks"
  local fast = opts.fast and not blocks -- (block scales sum each k block apart)
  -- opts.promote = "fma" (per-tensor scales, promoted; a diagnostic): each k
  -- block's sum is scaled by sa * sb as it is promoted (one FFMA an element,
  -- as the block-scaled form's) instead of the accumulator once at the end:
  -- the block-scaled form's promotion without its scales' loads (s15fp8-2,
  -- docs/PERF.md: 8.1 % more cycles than the FADD form at ncu's locked
  -- clocks with as many instructions; slower than block scales under the
  -- H200's power cap)
  local fma = opts.promote == "fma" and scales == "tensor" and not fast
  -- fast: ping-pong consumers by default (128 x 192 programs, each consumer
  -- warpgroup a whole one, the two alternating over one ring); with
  -- opts.consumers = "cooperative" or on a cluster (which ping-pong does not
  -- take) cooperative ones on 128 x 256
  local pingpong = (fast and opts.consumers ~= "cooperative" or opts.consumers == "pingpong") and (opts.cluster or 1) == 1 or nil
  -- opts.bn: the tile's columns (promoted per-tensor or row / column scales:
  -- 144 fits a warpgroup's registers with the two sums in flight; block
  -- scales take 128, one block of B's scales a program)
  local BN = opts.bn or pingpong and fast and 192 or fast and 256 or 128
  if blocks and BN ~= 128 then error("tile_gemm_fp8: block scales take 128 columns a program, got " .. BN, 2) end
  tl.new_module()
  local params = { A = tl.tensor(tl.i8, 2), B = tl.tensor(tl.i8, 2), C = tl.tensor(tl.bf16, 2), K = tl.i32 }
  if rowcol then params.sa, params.sb = tl.tensor(tl.f32, 1), tl.tensor(tl.f32, 1)
  elseif blocks then params.sa, params.sb = tl.tensor(tl.f32, 2), tl.tensor(tl.f32, 2)
  else params.sa, params.sb = tl.f32, tl.f32 end
  -- opts.cluster = 2: a program of 256 rows on a cluster of 2 CTAs (128 rows
  -- each, B multicast to both: 3/4 of the bytes from L2 a CTA reads alone);
  -- opts.bm = 64 with opts.consumers = "pingpong": 64-row programs, a
  -- consumer warpgroup each in turn
  local bm = opts.bm or opts.cluster == 2 and 256 or 128
  local name = (scales == "tensor" and "tile_gemm_fp8" or "tile_gemm_fp8_" .. scales) .. (pingpong and "_pp" or "") .. (fast and "_fast" or "")
    .. (fma and "_fma" or "")
  local k = tl.tile_kernel(name, { params = params, cluster = { opts.cluster or 1, 1, 1 } })
  k.program_rows, k.program_cols, k.pdl = bm, BN, opts.pdl or nil
  k:define(function(k, p)
    -- opts.pdl: launched as a programmatic dependent launch (k.pdl): A, B and
    -- the scales may be the previous kernel's outputs, so the CTA waits for
    -- that grid before its first read, then lets the next grid launch (its
    -- CTAs' prologues overlap this grid's tail)
    if opts.pdl then
      tl.griddepcontrol_wait()
      tl.griddepcontrol_launch_dependents()
    end
    local m, n = tl.program_id("x"), tl.program_id("y")
    local prefetch = blocks and opts.prefetch or nil
    local stages = opts.stages or (pingpong and 5 or (fast or blocks) and 4 or 5)
    local acc = tl.for_tiles(p.K, { tile = 128, stages = stages, prefetch = prefetch, consumers = pingpong and "pingpong" },
                             tl.zeros({ bm, BN }, tl.f32), function(kk, acc)
      -- (square tiles: say that B is given as [N, K])
      local a, b = tl.load(p.A, { m, kk }, { bm, 128 }), tl.load(p.B, { n, kk }, { BN, 128 })
      if fma then return acc + tl.dot(a, b, tl.zeros({ bm, BN }, tl.f32), { fp8 = fp8, transpose_b = true }) * (p.sa * p.sb) end
      if not blocks then return tl.dot(a, b, acc, { fp8 = fp8, transpose_b = true, fast_accum = fast or nil }) end
      -- this k block's scales, read before its product is waited for
      local s = tl.expand_dim(tl.load(p.sa, { kk, m }, { bm }), 1) * tl.extract(tl.load(p.sb, { n, kk }, { 1 }), { 0 })
      return acc + tl.dot(a, b, tl.zeros({ bm, BN }, tl.f32), { fp8 = fp8, transpose_b = true }) * s
    end)
    if rowcol then
      local sa = tl.expand_dim(tl.load(p.sa, { m }, { bm }), 1) -- [bm, 1]: a column over the tile
      local sb = tl.expand_dim(tl.load(p.sb, { n }, { BN }), 0) -- [1, BN]: a row
      acc = acc * sa * sb
    elseif not blocks and not fma then
      acc = acc * (p.sa * p.sb)
    end
    tl.store(p.C, { m, n }, acc:cast(tl.bf16))
  end)
  return k
end
-- }===

local kernel
local example = { name = "tile_gemm_fp8", build = build }

function example.prepare()
  -- --lag=0: each k block's promotion once it is waited for whole
  -- (DeepGEMM's order: tl.options.promote_lag = false), not a block late
  if o.lag == 0 then tl.options.promote_lag = false end
  kernel = build()
  check.compile(example.name, kernel)
end

-- The shapes of the block scales: sa [K/128, M], sb [N/128, K/128] (rounded
-- up), their rows padded to a multiple of 4 floats: the lowering brings them
-- into the ring's stages by TMA (staged.lua), whose row strides are
-- multiples of 16 bytes (the pad is never read for a row or block in range).
local function block_scale_shapes(M, N, K)
  local kb = (K + 127) // 128
  local function pad(x) return (x + 3) // 4 * 4 end
  return { kb, pad(M) }, { (N + 127) // 128, pad(kb) }
end
example.block_scale_shapes = block_scale_shapes

-- launch(k, a, b, c, sa, sb, M, N, K [, async]): sa, sb numbers (tensor) or
-- device buffers of f32: M and N (rowcol), or block_scale_shapes (blocks, the
-- kernel's name says which); k:run (async: k:launch, no wait)
local function launch(k, a, b, c, sa, sb, M, N, K, async)
  local args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { c, { M, N } }, K = K }
  if type(sa) == "number" then args.sa, args.sb = sa, sb
  elseif k.name:match "_blocks" then
    local ssa, ssb = block_scale_shapes(M, N, K)
    args.sa, args.sb = { sa, ssa }, { sb, ssb }
  else args.sa, args.sb = { sa, { M } }, { sb, { N } } end
  local bm, bn = k.program_rows, k.program_cols -- (a grid of programs)
  k[async and "launch" or "run"](k, { grid = { (M + bm - 1) // bm, (N + bn - 1) // bn }, args = args, pdl = k.pdl })
end
example.launch = launch

-- check(k, {seed, small, size = {M, N, K}, scales, fp8}): kernel k (built with
-- those scales and fp8, default the command line's) on fresh data, 2000
-- sampled elements against CPU dot products of the decoded bytes
local function check_kernel(kernel, c)
  local M, N, K = o.m, o.n, o.k
  if c.small then M, N, K = 200, 296, 256 end
  if c.size then M, N, K = table.unpack(c.size) end
  local fp8, scales = c.fp8 or o.fp8, c.scales or o.scales
  local D = tl.device
  local a <close> = D.random(tl.i8, M * K, c.seed, fp8)
  local b <close> = D.random(tl.i8, N * K, c.seed + 1, fp8)
  local d <close> = D.alloc(tl.bf16, M * N)
  d:fill(0)
  local rowcol, blocks = scales == "rowcol", scales == "blocks"
  local fast = kernel.name:match "_fast$"
  local sa, sb, sav, sbv
  local ssa, ssb = block_scale_shapes(M, N, K)
  if rowcol then
    sa, sb = D.random(tl.f32, M, c.seed + 2), D.random(tl.f32, N, c.seed + 3)
    sav, sbv = sa:to_table(), sb:to_table()
  elseif blocks then
    sa, sb = D.random(tl.f32, ssa[1] * ssa[2], c.seed + 2), D.random(tl.f32, ssb[1] * ssb[2], c.seed + 3)
    sav, sbv = sa:to_table(), sb:to_table()
  else
    sa, sb = 0.75, -0.125
  end
  launch(kernel, a, b, d, sa, sb, M, N, K)
  local dec = fp8_dec[fp8]
  local function decoded(buf)
    local out = {}
    for i, v in ipairs(buf:to_table()) do out[i] = dec(v & 0xff) end
    return out
  end
  local av, bv, got = decoded(a), decoded(b), d:to_table()
  if rowcol or blocks then sa:free() sb:free() end
  -- the scale of C[i, j]'s products in k block kb
  local function scale_of(i, j, kb)
    if blocks then return sav[kb * ssa[2] + i + 1] * sbv[j // 128 * ssb[2] + kb + 1] end
    return rowcol and sav[i + 1] * sbv[j + 1] or sa * sb
  end
  math.randomseed(c.seed)
  local fail, count = check.mismatches(example.name)
  local worst = 0
  for _ = 1, 2000 do
    local i, j = math.random(0, M - 1), math.random(0, N - 1)
    local want, bound = 0, 0 -- the scaled sum, and the scaled products' magnitude
    for kb = 0, (K - 1) // 128 do
      local s, mag = 0, 0
      for kk = kb * 128, math.min(K, kb * 128 + 128) - 1 do
        local p = av[i * K + kk + 1] * bv[j * K + kk + 1]
        s, mag = s + p, mag + math.abs(p)
      end
      local sc = scale_of(i, j, kb)
      want, bound = want + s * sc, bound + mag * math.abs(sc)
    end
    local g = got[i * N + j + 1]
    local err = math.abs(g - want)
    -- bf16's rounding (2^-9), and the tensor cores' fp8 sum of a K block (about
    -- 14 bits kept: 2^-13 of the products' magnitude; the blocks' sum is f32);
    -- without the promotion (fast) that much at each wgmma step of 32 of K
    local lim = 2 ^ -8 * math.abs(want) + 2 ^ -13 * bound * (fast and (K + 31) // 32 or 1)
    worst = math.max(worst, err / (math.abs(want) + 2 ^ -13 * bound))
    if err > lim or err ~= err then fail("C[%d, %d] = %.6g, want %.6g", i, j, g, want) end
  end
  return count() == 0, ("seed %d, %s %s scales%s, %d x %d x %d on %s: 2000 sampled elements, %d mismatches, worst relative error %.2g")
    :format(c.seed, fp8, scales, fast and " (fast accumulation)" or "", M, N, K, D.info().name, count(), worst)
end
example.check = check_kernel
function example.run(c) return check_kernel(kernel, c) end
example.grids = function() return { 1 } end

if ... == "--library" then return example end
check.main(example)
