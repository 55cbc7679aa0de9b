-- multi_gpu_gemm.lua: GEMMs sharded over 1, 2 or 4 GPUs (tl.sharded_gemm), one
-- process per GPU joined by NCCL (tl.nccl.ranks), each checked against one GPU
-- computing the whole GEMM on the same fresh random inputs:
--
--   row-parallel     D = sum over ranks r of A_r . B_r^T (A_r, B_r: rank r's K
--                    slice), the all-reduce of each chunk of output rows
--                    overlapping the GEMM of the next
--   column-parallel  D_r = A . B_r^T, A's rows all-gathered chunk by chunk while
--                    the rows this rank holds are multiplied
--
--   tilua examples/multi_gpu_gemm.lua [--gpus=N] [--m=M] [--n=N] [--k=K] [--chunks=C]
--                                     [--mode=row|column|both] [--time] [tl.gemm options: --bn= --schedule= ...]
--                                     [--overlap-schedule=data_parallel|persistent]
--
-- --gpus defaults to every GPU, at most 4 (1 where there is one). Without a GPU
-- it compiles and assembles the GEMM, then stops ("SKIP: no GPU"); with fewer
-- GPUs than --gpus it says so. --time also times each (rank 0 prints a table).
--   loadfile("examples/multi_gpu_gemm.lua")("--library") -> { options, run } for tools/bench/multi_gpu.lua
local tl = require "tilua"
local check = require "tilua.gpu.check"

local lib = {}

-- The command line's options (numbers as integers).
function lib.options(args)
  local o = { m = 1024, n = 1024, k = 1024, chunks = 4, mode = "both" }
  for _, a in ipairs(args or {}) do
    local key, v = a:match "^%-%-([%w_-]+)=(.*)$"
    if a == "--time" then o.time = true
    elseif key and key ~= "emit" and key ~= "stage" then o[key:gsub("-", "_")] = math.tointeger(tonumber(v)) or v end
  end
  if check.small() then o.m, o.n, o.k = 512, 512, 512 end
  return o
end

-- tl.gemm's options among o
local GEMM_KEYS = { "bn", "stages", "schedule", "cluster", "consumers", "sms", "swizzle", "overlap_schedule" }
local function gemm_options(o, extra)
  local g = {}
  for _, key in ipairs(GEMM_KEYS) do g[key] = o[key] end
  if not extra.comm then g.overlap_schedule = nil end
  for key, v in pairs(extra) do g[key] = v end
  return g
end

-- dst[i, col0 + j] = src[i, j]: a rank's slice placed into the whole matrix
local place
local function place_kernel()
  if place then return place end
  local saved = tl.module()
  tl.new_module()
  place = tl.kernel("place_columns", { params = { { "src", tl.ptr(tl.bf16) }, { "dst", tl.ptr(tl.bf16) },
    { "rows", tl.i32 }, { "cols", tl.i32 }, { "ldd", tl.i64 }, { "col0", tl.i64 } }, block = { 64, 4, 1 } })
  place:define(function(_, p)
    local j, i = tl.global_id "x", tl.global_id "y"
    tl.if_(i:lt(p.rows) & j:lt(p.cols), function()
      local i64, j64 = i:cast(tl.i64), j:cast(tl.i64)
      local v = (p.src + (i64 * p.cols:cast(tl.i64) + j64)):load()
      local at = p.dst + (i64 * p.ldd + p.col0 + j64)
      at:store(v)
    end)
  end)
  check.compile("place_columns", place)
  tl.set_module(saved)
  return place
end

-- Milliseconds of fn() (best of `reps`, each `iters` runs), rank 0's view: the collectives keep the ranks in step.
local function time(fn, reps, iters)
  fn()
  tl.device.synchronize()
  local best = math.huge
  for _ = 1, reps or 5 do
    best = math.min(best, tl.device.time(function() for _ = 1, iters or 3 do fn() end end) / (iters or 3))
  end
  return best
end

-- The whole check on this rank of world: -> ok, lines of the report, timings
function lib.run(world, o)
  local comm, n, r = world.comm, world.nranks, world.rank
  local M, N, K, chunks = o.m, o.n, o.k, o.chunks
  if K % n ~= 0 or N % n ~= 0 or M % (n * chunks) ~= 0 then
    error(("multi_gpu_gemm: k and n must be multiples of %d GPUs, m of %d GPUs x %d chunks"):format(n, n, chunks), 0)
  end
  -- one seed for every rank: rank 0's
  local sb <close> = tl.device.from(tl.i64, { check.seed() })
  comm:broadcast(sb, sb, 0)
  local seed = sb:to_table()[1]
  local kl = K // n
  -- A (M x K) and B (N x K) made of the ranks' K slices, the same on every rank
  local A, B = tl.device.alloc(tl.bf16, M * K), tl.device.alloc(tl.bf16, N * K)
  local As, Bs = {}, {}
  local pk = place_kernel()
  for q = 0, n - 1 do
    As[q] = tl.device.random(tl.bf16, M * kl, seed + 2 * q)
    Bs[q] = tl.device.random(tl.bf16, N * kl, seed + 2 * q + 1)
    pk:launch { grid = { (kl + 63) // 64, (M + 3) // 4, 1 }, args = { As[q], A, M, kl, K, q * kl } }
    pk:launch { grid = { (kl + 63) // 64, (N + 3) // 4, 1 }, args = { Bs[q], B, N, kl, K, q * kl } }
  end
  -- one GPU: the whole GEMM
  local one = tl.gemm.build(gemm_options(o, { m = M, n = N, k = K, name = "one_gpu" }))
  one.kernel:compile()
  local R = tl.device.alloc(tl.bf16, M * N)
  one:run { a = A, b = B, d = R }
  tl.device.synchronize()
  local lines, times, ok = {}, { one = nil }, true
  local function report(what, bad, maxerr)
    lines[#lines + 1] = ("%s: rank %d of %d, seed %d, %d x %d x %d: %s, max error %.4g"):format(what, r, n, seed, M, N,
      K, bad == 0 and "matches one GPU" or ("%d elements differ"):format(bad), maxerr)
    ok = ok and bad == 0
  end
  if o.time then times.one = time(function() one:run { a = A, b = B, d = R } end) end
  local rel, abs = 2 ^ -6, 0.02 * math.sqrt(K) -- bf16 partial sums, rounded once more by the all-reduce
  if o.mode ~= "column" then
    local D = tl.device.alloc(tl.bf16, M * N)
    for _, overlap in ipairs { true, false } do
      local rp = tl.sharded_gemm.row_parallel(gemm_options(o, { comm = comm, m = M, n = N, k = K,
        chunks = overlap and chunks or 1, overlap = overlap }))
      D:fill(0)
      rp:run { a = As[r], b = Bs[r], d = D }
      tl.device.synchronize()
      local bad, maxerr = tl.sharded_gemm.compare(D, M, N, R, N, 0, rel, abs)
      report(("row-parallel, %s"):format(overlap and ("all-reduce of %d chunks overlapped"):format(chunks)
        or "GEMM then all-reduce"), bad, maxerr)
      if o.time then times["row_" .. tostring(overlap)] = time(function() rp:run { a = As[r], b = Bs[r], d = D } end) end
    end
    D:free()
  end
  if o.mode ~= "row" then
    local nl = N // n
    local Dr = tl.device.alloc(tl.bf16, M * nl)
    for _, overlap in ipairs { true, false } do
      local cp = tl.sharded_gemm.column_parallel(gemm_options(o, { comm = comm, m = M, n = N, k = K, chunks = chunks,
        overlap = overlap }))
      local a, b = A:view(r * (M // n) * K + 1, M // n * K), B:view(r * nl * K + 1, nl * K)
      Dr:fill(0)
      cp:run { a = a, b = b, d = Dr }
      tl.device.synchronize()
      -- the same k order per element as the one-GPU GEMM: equal up to the output's rounding
      local bad, maxerr = tl.sharded_gemm.compare(Dr, M, nl, R, N, r * nl, 2 ^ -6, 1e-3 * math.sqrt(K))
      report(("column-parallel, %s"):format(overlap and ("all-gather of %d chunks overlapped"):format(chunks)
        or "all-gather then GEMM"), bad, maxerr)
      if o.time then times["column_" .. tostring(overlap)] = time(function() cp:run { a = a, b = b, d = Dr } end) end
      if cp.gathered then cp.gathered:free() end
    end
    Dr:free()
  end
  if o.time then -- the all-reduce alone, 1 GiB of bf16 (less when small), in place
    local bytes = check.small() and (1 << 20) or (1 << 30)
    local buf <close> = tl.device.alloc(tl.bf16, bytes // 2)
    buf:fill(0)
    times.all_reduce = time(function() comm:all_reduce(buf) end, 3, 3)
    times.all_reduce_bytes = bytes
  end
  for q = 0, n - 1 do As[q]:free() Bs[q]:free() end
  A:free() B:free() R:free()
  return ok, lines, times
end

-- rank 0's table of timings
function lib.table(o, n, times)
  local flops = 2.0 * o.m * o.n * o.k
  local rows = { ("%-52s %10s %9s %8s"):format("", "ms", "TFLOP/s", "x 1 GPU") }
  local function row(name, ms)
    if ms then rows[#rows + 1] = ("%-52s %10.3f %9.1f %8.2f"):format(name, ms, flops / ms / 1e9, times.one / ms) end
  end
  row("one GPU, whole GEMM", times.one)
  row(("row-parallel on %d GPUs, all-reduce overlapped (%d chunks)"):format(n, o.chunks), times.row_true)
  row(("row-parallel on %d GPUs, GEMM then all-reduce"):format(n), times.row_false)
  row(("column-parallel on %d GPUs, all-gather overlapped"):format(n), times.column_true)
  row(("column-parallel on %d GPUs, all-gather then GEMM"):format(n), times.column_false)
  if times.all_reduce and n > 1 then
    rows[#rows + 1] = ("all-reduce of %d MiB bf16 on %d GPUs: %.3f ms, bus bandwidth %.1f GB/s"):format(
      times.all_reduce_bytes >> 20, n, times.all_reduce, 2 * (n - 1) / n * times.all_reduce_bytes / times.all_reduce / 1e6)
  end
  return rows
end

if ... == "--library" then return lib end

local o = lib.options(arg)
-- without a GPU: the GEMM of a rank compiles and assembles, then SKIP
local probe = tl.gemm.build(gemm_options(o, { m = o.m // o.chunks, n = o.n, k = o.k, name = "row_parallel_probe" }))
check.compile("row_parallel_gemm", probe.kernel)
tl.device.require()
if not tl.nccl.available() then -- a GPU without NCCL: nothing to run, as without a GPU
  tl.stop(tonumber(os.getenv "TILUA_NO_GPU_EXIT") or 0, "SKIP: no NCCL (" .. tl.nccl.error() .. ")")
end
local gpus = o.gpus or math.min(4, tl.device.count())
local world = tl.nccl.ranks(gpus)
local ok, lines, times = lib.run(world, o)
for _, l in ipairs(lines) do print(l) end
if world.rank == 0 and o.time then for _, l in ipairs(lib.table(o, gpus, times)) do print(l) end end
world.comm:destroy()
world:finish()
if not ok then error("multi_gpu_gemm: a sharded GEMM differs from one GPU's", 0) end
