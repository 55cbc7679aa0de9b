-- tile_gemm.lua: a GEMM as a tile program (docs/tileprog.md).
-- The kernel declares tiles -- a 128 x 256 f32 accumulator, 128 x 64 and
-- 256 x 64 bf16 tiles of A and B per k step, the bf16 result -- and
-- `tile-to-ptx` (k:compile) orchestrates the warps: the warp-specialized,
-- persistent Hopper GEMM of stdlib/gemm.lua (a TMA producer warpgroup, two
-- wgmma consumer warpgroups, a 3-stage pipeline, stmatrix + TMA stores).
--
--   C[M, N] = A[M, K] . B[N, K]^T   (bf16 in, f32 accumulation, bf16 out)
--
--   tilua examples/tile_gemm.lua [--m=M] [--n=N] [--k=K] [--cluster=1|2|4] [--bm=128|256] [--bk=64|128] [--stages=S]
--                                [--schedule=streamk|splitk [--workers=W] [--splits=S]] [--consumers=pingpong|ksplit [--bn=N]]
--                                [--swap=1 [--bm=8..64] [--bn=64|128]] [--pdl=0|1] [--emit=ir|ptx] [--stage=NAME]
--
-- On a GPU it runs on fresh random data and checks C against the plain
-- reference kernel of stdlib/gemm.lua and sampled CPU dot products; without
-- one it stops after ptxas ("SKIP: no GPU").
--   loadfile("examples/tile_gemm.lua")("--library") -> the example (tilua.gpu.check), with .build
--   (and .harness, .options: the check of a tile GEMM, which tile_gemm_bias_relu.lua shares)
local tl = require "tilua"
local check = require "tilua.gpu.check"

-- {=== the tile program
-- o.cluster = 2: the program runs on a cluster of 2 CTAs (tileas-plan-cta
-- splits the tile along N, each CTA 128 x 128, and multicasts A to both);
-- with o.bm = 256 (a 256 x 256 tile) it splits M instead: each CTA 128 x 256,
-- B multicast, as stdlib/gemm.lua's cluster = 2. o.cluster = 4 with o.bm =
-- 256 splits both (2 x 2): --bn=512 is 128 x 256 a CTA, A multicast to the 2
-- CTAs of its rows and B to the 2 of its columns (stdlib's cluster = {2, 2});
-- --bn=256 128 x 128 a CTA. o.stages: the pipeline's depth (3).
-- o.schedule = "streamk" (or "splitk"): the k loop of every program split over
-- o.workers CTAs (default: one per SM) by the StreamK scheduler, for the
-- problem o.m x o.n x o.k only (the split is planned at compile time: the grid
-- of programs and K are constants; the parameter K is then unused).
-- o.consumers = "pingpong": a 64 x 256 program (o.bm = 64), or with o.bn = 128
-- a 128 x 128 one, whose two consumer warpgroups each take the whole tile and
-- alternate programs over one ring (tl.for_tiles's consumers; stdlib/gemm.lua's
-- consumers = "pingpong", the same tiles and stages: 4 at 64 x 256, 6 at 128 x 128).
-- On a cluster of 2 each warpgroup takes its CTA's block: --cluster=2 --bm=256
-- --bn=128 is 128 x 128 a CTA with B multicast (stdlib's cluster = {2, 1}),
-- --cluster=2 --bm=128 --bn=256 the same blocks with A multicast ({1, 2}).
-- o.consumers = "ksplit": a 64 x 128 program (o.bn: its columns), whose two
-- consumer warpgroups take every other k block of it from one ring and add
-- their sums before the epilogue (stdlib/gemm.lua's consumers = "ksplit", the
-- decode shapes' form: 64 x 32 at 64 x 4096 x 4096), an even count of stages;
-- on a cluster each CTA takes a block of at least 64 columns (--cluster=2
-- --bm=128 --bn=96: 64 x 96 a CTA, B multicast; --cluster=4 --bn=256: 64 x 64
-- a CTA, A multicast to the 4, stdlib's {1, 4}).
-- o.bk: the k block (tl.for_tiles's tile), 64 or 128 elements: a stage of
-- 128 holds two 128-byte swizzle rows of each row of A and B (two TMA boxes an
-- operand); stdlib's decode model picks ksplit 64 x 32 with bk = 128 at 64 x 4096
-- x 4096 (docs/PERF.md, s19-13).
-- o.swap: the swapped form for decode-sized M (stdlib/gemm.lua's swap_ab):
-- the program computes its tile of C transposed, D^T = B . A^T (an o.bn x o.bm
-- accumulator: bn rows of B, 64 a consumer warpgroup, by bm tokens, 8 to 64 in
-- steps of 8), and stores tl.transpose of it (from registers, element by
-- element); default 16 x 128 a program, 12 stages at most. Its programs along x
-- are C's blocks of columns, along y its blocks of tokens (grid_of): the
-- scheduler walks x fastest, so the programs that read the same rows of B run
-- on neighbouring CTAs, as stdlib's swap_ab's tiles do (docs/PERF.md, s23-8:
-- 0.83-0.89 of stdlib's time with the tokens along x where a column has 2-4
-- blocks of tokens, 0.97-0.99 so).
-- o.pdl: launched as a programmatic dependent launch (k.pdl; stdlib/gemm.lua's
-- default): every CTA waits for the previous grid before its first read, then
-- lets the next grid launch (its CTAs' prologues overlap this grid's tail).
-- Default (pdl_of): on for the ping-pong 256 x 128 program on a cluster of 2
-- (2 x 1, B multicast), off otherwise; o.pdl = false (--pdl=0) or true (--pdl=1)
-- decides instead. Measured on an H200 (docs/PERF.md, s15pp-2): PDL made that
-- form 1.09 / 1.10 / 1.01 times as fast at 4096^3 / 3456x4096x4096 /
-- 4096x14336x4096, and the 128 x 256 program (1 x 2) 0.97 / 0.94 / 0.99.
local function cols_of(o) return o.bn or (o.swap and 128 or o.consumers == "ksplit" and 128 or 256) end
local function rows_of(o)
  if o.swap then return o.bm or 16 end
  return o.bm or ((o.consumers == "pingpong" and cols_of(o) > 128 or o.consumers == "ksplit") and 64 or 128)
end
local function pdl_of(o)
  if o.pdl ~= nil then return o.pdl ~= false and o.pdl ~= 0 end
  return o.consumers == "pingpong" and o.cluster == 2 and rows_of(o) == 256 and cols_of(o) == 128
end
-- A CTA's block of the program on a cluster (tileas-plan-cta's split of the
-- accumulator) -> rows, cols
local function block_of(o)
  local bm, bn = rows_of(o), cols_of(o)
  local sm, sn = tl.core.dot_split(bm, bn, o.cluster or 1)
  return bm // sm, bn // sn
end
local SMEM = 227 * 1024 - 2048 -- (a block's shared memory, less the barriers' and the kernel's other words)
local function bk_of(o) return o.bk or 64 end
local function stages_of(o)
  if o.stages then return o.stages end
  local bk = bk_of(o)
  local rows, cols = block_of(o) -- (a CTA's ring holds its block's rows of A and columns of B)
  if o.consumers == "ksplit" then
    -- stdlib/gemm.lua's: an even count beside 16 KiB of staging and the second warpgroup's
    -- f32 sums, at most 14 (what the 32 barrier slots hold beside the hand-over's)
    local fit = (SMEM - 16384 - rows * cols * 4) // ((rows + cols) * bk * 2)
    return math.min(14, fit // 2 * 2)
  end
  if o.swap then -- stdlib/gemm.lua's swap_ab: stored from registers, no staging, at most 12
    return math.min(12, SMEM // ((rows + cols) * bk * 2))
  end
  if o.consumers ~= "pingpong" then -- 3, or what fits beside the 64 KiB of epilogue staging
    return math.max(1, math.min(3, (SMEM - 65536) // ((rows + cols) * bk * 2)))
  end
  -- stdlib/gemm.lua's: what fits beside 16 KiB of epilogue staging, at most 8 (4 at 64 x 256 on
  -- one CTA)
  local most = (rows == 64 and cols == 256 and (o.cluster or 1) == 1) and 4 or 8
  return math.min(most, (SMEM - 16384) // ((rows + cols) * bk * 2))
end

-- The grid of programs of an M x N problem: {along x, along y} (the swapped
-- form's: columns, then tokens).
local function grid_of(o, M, N)
  local gm, gn = (M + rows_of(o) - 1) // rows_of(o), (N + cols_of(o) - 1) // cols_of(o)
  if o.swap then return { gn, gm } end
  return { gm, gn }
end

local function build(o)
  o = o or {}
  local bm, bn, bk = rows_of(o), cols_of(o), bk_of(o)
  local streamk = o.schedule == "streamk" or o.schedule == "splitk"
  tl.new_module()
  local k = tl.tile_kernel("tile_gemm", {
    params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2), C = tl.tensor(tl.bf16, 2), K = tl.i32 },
    cluster = { o.cluster or 1, 1, 1 },
    schedule = streamk and { kind = o.schedule, programs = grid_of(o, o.m, o.n),
                             workers = o.workers, splits = o.splits } or nil })
  local pdl = pdl_of(o)
  k.pdl = pdl or nil
  k:define(function(k, p)
    if pdl then
      tl.griddepcontrol_wait()
      tl.griddepcontrol_launch_dependents()
    end
    local pid_m, pid_n = tl.program_id("x"), tl.program_id("y")
    if o.swap then -- D^T = B . A^T: B's rows on wgmma's 64-row side, the bm tokens its N
      pid_m, pid_n = pid_n, pid_m -- (C's columns along x: grid_of)
      local acc = tl.for_tiles(streamk and o.k or p.K, { tile = bk, stages = stages_of(o) }, tl.zeros({ bn, bm }, tl.f32),
        function(kk, acc)
          local b = tl.load(p.B, { pid_n, kk }, { bn, bk })
          local a = tl.load(p.A, { pid_m, kk }, { bm, bk })
          return tl.dot(b, a, acc)
        end)
      tl.store(p.C, { pid_m, pid_n }, tl.transpose(acc:cast(tl.bf16)))
      return
    end
    local acc = tl.zeros({ bm, bn }, tl.f32)
    acc = tl.for_tiles(streamk and o.k or p.K, { tile = bk, stages = stages_of(o), consumers = o.consumers }, acc, function(kk, acc)
      local a = tl.load(p.A, { pid_m, kk }, { bm, bk })
      local b = tl.load(p.B, { pid_n, kk }, { bn, bk }) -- B stored [N, K]: dot takes it transposed
      return tl.dot(a, b, acc)
    end)
    tl.store(p.C, { pid_m, pid_n }, acc:cast(tl.bf16))
  end)
  return k
end
-- }===

-- The command line's problem (not multiples of the tile: TMA clips and zero-fills).
local function options(...)
  local o = { m = 1000, n = 1480, k = 520 }
  for _, a in ipairs(... ~= "--library" and arg or {}) do
    local key, v = a:match "^%-%-([%w_-]+)=(.*)$"
    if key and key ~= "emit" and key ~= "stage" then o[key] = math.tointeger(tonumber(v)) or v end
  end
  return o
end

-- The example (tilua.gpu.check) of a tile GEMM program `build`: this one, or with
-- fused = true one whose epilogue adds a bias[N] and clamps at 0 (relu).
-- prepare compiles it; run checks it on fresh random data against the plain
-- reference kernel of stdlib/gemm.lua (with the same epilogue) and, without
-- one, sampled CPU dot products.
local function harness(name, build, fused, o)
  local kernel
  local function prepare()
    local t0 = os.clock()
    kernel = build()
    kernel:compile()
    print(("%s: script to PTX in %.1f ms (tile-to-ptx: %d stages)"):format(name, (os.clock() - t0) * 1e3,
      #tl.last_stages))
    check.compile(name, kernel)
  end

  -- run{seed, small} -> ok, summary
  local function run(c)
    local M, N, K = o.m, o.n, o.k
    if c.small and not o.schedule then M, N, K = 200, 296, 128 end -- (StreamK: compiled for o's problem)
    local a <close> = tl.device.random(tl.bf16, M * K, c.seed)
    local b <close> = tl.device.random(tl.bf16, N * K, c.seed + 1)
    local bias <close> = fused and tl.device.random(tl.f32, N, c.seed + 2) or nil
    local d <close> = tl.device.alloc(tl.bf16, M * N)
    d:fill(0)
    kernel:run { grid = grid_of(o, M, N), pdl = kernel.pdl,
                 args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { d, { M, N } }, K = K,
                          bias = fused and { bias, { N } } or nil } }
    local ref = tl.gemm.build { m = M, n = N, k = K, bias = fused or nil, activation = fused and "relu" or nil }
    local ok, report = ref:check { a = a, b = b, d = d, bias = bias, seed = c.seed }
    return ok, ("seed %d, %d x %d x %d on %s: %s"):format(c.seed, M, N, K, tl.device.info().name, report)
  end

  return { name = name, prepare = prepare, run = run, build = build, grids = function() return { 1 } end }
end

local opts = options(...)
local example = harness("tile_gemm", function(o) return build(o or opts) end, false, opts)
example.harness, example.options, example.rows_of, example.cols_of = harness, options, rows_of, cols_of
example.stages_of, example.pdl_of, example.grid_of = stages_of, pdl_of, grid_of
if ... == "--library" then return example end
check.main(example)
