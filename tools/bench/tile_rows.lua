-- tools/bench/tile_rows.lua: the memory-bound tile programs of stdlib/rows.lua
-- (tl.rows) at M x N bf16 (default 16384 x 8192) against cuMemcpyDtoD of the
-- same bytes, measured in the same run on the same device: RMSNorm, softmax,
-- LayerNorm forward (a row each, read once and written once: the bytes of a
-- copy of X), an elementwise map (gelu, f32: X and Y), SwiGLU (two inputs),
-- a row sum (reads X only: half a copy's traffic), transposes (tiles of 64
-- and 128 by TMA, and their variants; target >= 0.90). Each is checked against
-- its CPU reference on sampled rows first (examples/tile_rows.lua's
-- references), then timed: the median of 5 samples of CUDA events around 20
-- back-to-back launches. The ratio is the program's bandwidth (the bytes it
-- moves per second) over the copy's; the targets (issue) are >= 0.95 for the
-- normalizations and softmax. The same programs with other tiles follow
-- (more rows a program for the maps; for the normalizations the row loop of
-- convert-tileas-to-cutlass off, the shared ring instead of the rows in
-- registers, rows ahead, CTAs an SM, bytes in flight and hoisted W and B varied): what the defaults are chosen from. Prints a table last.
--
-- The cp.async ring (row_ring = {async = S}: each thread copies its own chunks
-- of the rows S - 1 programs ahead into shared stages) is measured the same
-- way against the rows in registers (the default) and one CTA a row.
-- The register loop with rows claimed at run time (row_ring = {claims = K})
-- against the default: --only="=rmsnorm;=softmax;=layernorm;=row copy (Y = X), registers;claims".
-- The tenth session's variants (LayerNorm in one pass, two rows ahead, 16
-- warps, 3 CTAs an SM, cache hints): --only="=rmsnorm;=softmax;=layernorm;=row copy (Y = X), registers;=row copy (Y = X), no ring;one pass;claims, ;16 warps, claims".
--
--   tilua tools/bench/tile_rows.lua [--m=16384] [--n=8192] [--only=TEXT[;TEXT...]] [--interleave=1]
--   (--only: the cases whose name has one; =NAME: that name; --interleave=1: each
--   program's ratio against cuMemcpyDtoD timed just before and after it)
local tl = require "tilua"

local o = { m = 16384, n = 8192 }
for _, a in ipairs(arg or {}) do
  local key, v = a:match "^%-%-([%w_]+)=(%d+)$"
  if key then o[key] = tonumber(v) end
  o.only = a:match "^%-%-only=(.+)$" or o.only
end
local M, N = o.m, o.n
local REPS = 20

tl.device.require() -- without a GPU: "SKIP: no GPU" and exit
local D = tl.device
local seed = tonumber(os.getenv "TILUA_SEED") or os.time()
local info = D.info()
print(("tile_rows bench: %s, %d SMs, %d x %d bf16, seed %d"):format(info.name, info.sm_count, M, N, seed))

local function median(t)
  table.sort(t)
  return t[(#t + 1) // 2]
end
local function time(fn)
  fn()
  D.synchronize()
  local ms = {}
  for r = 1, 5 do ms[r] = D.time(function() for _ = 1, REPS do fn() end end) / REPS end
  return median(ms)
end

local ex = assert(loadfile "examples/tile_rows.lua")("--library")

-- the copy: X's bytes into another buffer
local bytes = M * N * 2
local x = D.random(tl.bf16, M * N, seed)
local y = D.alloc(tl.bf16, M * N)
local memcpy_ms = time(function() y:copy_from(x) end)
local rows = { { "cuMemcpyDtoD", memcpy_ms, 2 * bytes / memcpy_ms / 1e6, 1.0 } }
print(("cuMemcpyDtoD: %.3f ms, %.0f GB/s"):format(memcpy_ms, rows[1][3])) -- (the reference of each line below)

local w, b = D.random(tl.bf16, N, seed + 1), D.random(tl.bf16, N, seed + 2)
local x2 = D.random(tl.bf16, M * N, seed + 3)
local xf, yf = D.random(tl.f32, M * N // 2, seed + 4), D.alloc(tl.f32, M * N // 2) -- the same bytes as X
local rstd, mean = D.alloc(tl.f32, M), D.alloc(tl.f32, M)
local eps = 1e-5

-- Y = X a row a program (no arithmetic): what the row ring (or the threads'
-- own loads) moves at best, the bound of the normalizations
local function row_copy(warps)
  tl.new_module()
  local k = tl.tile_kernel("row_copy", { params = { X = tl.tensor(tl.bf16, 2), Y = tl.tensor(tl.bf16, 2) }, num_warps = warps })
  k:define(function(_, p)
    local r = tl.program_id("x")
    tl.store(p.Y, { r, 0 }, tl.load(p.X, { r, 0 }, { 1, N }))
  end)
  return k
end

-- (s16) LayerNorm's body taken apart (diagnostics, on the ring form given to
-- each case): tl.rows.layernorm's two-pass body as written there, with each
-- of its costs changed alone: recip (the mean and variance as a product with
-- 1 / N, not a division a row), mask = false (no select of the squares past
-- N: right only where N is the tile's n, as here), wb = false (no W and B:
-- not LayerNorm, not checked), plain (one pass without a shift, E[x^2] -
-- mean^2: the two sums in one reduction, one barrier; cancels at |mean| >>
-- std, not a form the library may take). Named "ln diag": check_rows checks
-- those whose result is LayerNorm's (wb not false) as "layernorm".
local function ln_diag(f)
  tl.new_module()
  local k = tl.tile_kernel("ln_diag", { params = { X = tl.tensor(tl.bf16, 2), W = tl.tensor(tl.bf16, 1), B = tl.tensor(tl.bf16, 1),
                                                  Y = tl.tensor(tl.bf16, 2), Mean = tl.tensor(tl.f32, 1), Rstd = tl.tensor(tl.f32, 1),
                                                  N = tl.i32, eps = tl.f32 }, num_warps = 8 })
  k:define(function(_, p)
    local row = tl.program_id("x")
    local x = tl.load(p.X, { row, 0 }, { 1, N }):cast(tl.f32)
    local fn = p.N:cast(tl.f32)
    local function per_n(s) if f.recip then return s * (1.0 / fn) end return s / fn end
    local function inside(v)
      if f.mask == false then return v end
      return tl.select(tl.iota({ 1, N }, 1):lt(p.N), v, tl.zeros({ 1, N }, tl.f32))
    end
    local mean, var, xc
    if f.plain then
      local xx = x * x -- (before both reduces: lowered together, one barrier)
      local s1, s2 = tl.reduce(x, 1, "add"), tl.reduce(xx, 1, "add")
      mean = per_n(s1)
      var = tl.maximum(per_n(s2) - mean * mean, tl.zeros({ 1 }, tl.f32))
      xc = x - tl.expand_dim(mean, 1)
    else
      mean = per_n(tl.reduce(x, 1, "add"))
      xc = x - tl.expand_dim(mean, 1)
      var = per_n(tl.reduce(inside(xc * xc), 1, "add"))
    end
    local rstd = tl.rsqrt(var + p.eps)
    local y = xc * tl.expand_dim(rstd, 1)
    if f.wb ~= false then
      y = y * tl.expand_dim(tl.load(p.W, { 0 }, { N }):cast(tl.f32), 0) + tl.expand_dim(tl.load(p.B, { 0 }, { N }):cast(tl.f32), 0)
    end
    tl.store(p.Y, { row, 0 }, y:cast(tl.bf16))
    tl.store(p.Mean, { row }, mean)
    tl.store(p.Rstd, { row }, rstd)
  end)
  return k
end

-- (s13) the copy as a plain SIMT kernel (tl.kernel, no tile program): each
-- thread of 8 warps moves U units of V bytes of a chunk of 256 * U * V bytes
-- (all U loads, then all U stores), the CTAs walking the chunks by stride of
-- the grid; grid = the chunks: one CTA a chunk (a row when the chunk is 16 KB).
-- smem (dynamic shared memory, unused) caps the CTAs an SM: what separates the
-- tile programs' 2 CTAs an SM from a copy's own occupancy; cs: st.global.cs.
local function raw_copy(V, U, cs)
  tl.new_module()
  local CT, C = 256, 256 * U * V
  local k = tl.kernel("raw_copy", { params = { { "src", tl.ptr(tl.i8) }, { "dst", tl.ptr(tl.i8) }, { "n", tl.i64 } }, block = CT })
  k:define(function(_, p)
    local cta, grid = tl.block_id():cast(tl.i64), tl.grid_dim():cast(tl.i64)
    local left = p.n // C - cta
    local iters = tl.select(left:gt(0), (left + grid - 1) // grid, tl.const(0, tl.i64))
    local t = (tl.thread_id() * V):cast(tl.i64)
    tl.for_range(tl.const(0, tl.i64), iters, function(it)
      local off = (cta + it * grid) * C + t
      local v = {}
      for u = 0, U - 1 do v[u] = (p.src + off + u * CT * V):load { vector = V } end
      for u = 0, U - 1 do (p.dst + off + u * CT * V):store(v[u], cs and { cache = "cs" } or nil) end
    end)
  end)
  return k
end
local function raw_launch(V, U, grid, smem)
  local chunks = 2 * M * N // (256 * U * V)
  assert(chunks * 256 * U * V == 2 * M * N, "raw copy: the bytes are not a multiple of the chunk")
  return { grid = grid and math.min(grid, chunks) or chunks, smem = smem, args = { x, y, 2 * M * N } }
end
local SMS = D.info().sm_count
local SMEM2 = 100 * 1024 -- 2 CTAs an SM (228 KB a SM), like the tile programs' min_ctas 2

local rms_launch = { grid = { M }, args = { X = { x, { M, N } }, W = { w, { N } }, Y = { y, { M, N } }, Rstd = { rstd, { M } },
                                           N = N, eps = eps } }
local sm_launch = { grid = { M }, args = { X = { x, { M, N } }, Y = { y, { M, N } } } }
local ln_launch = { grid = { M }, args = { X = { x, { M, N } }, W = { w, { N } }, B = { b, { N } }, Y = { y, { M, N } },
                                          Mean = { mean, { M } }, Rstd = { rstd, { M } }, N = N, eps = eps } }

-- name, the kernel, its launch, bytes moved [, tl.options.row_ring]; a check of sampled rows against the reference
local cases = {
  { "rmsnorm", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes },
  { "softmax", tl.rows.softmax { n = N }, sm_launch, 2 * bytes },
  { "layernorm", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes },
  { "map gelu (f32)", tl.rows.map { fn = "gelu", n = 1024, rows = 2, elem = tl.f32 },
    { grid = { (M // 2 + 1) // 2, N // 1024 }, args = { X = { xf, { M // 2, N } }, Y = { yf, { M // 2, N } } } }, 2 * bytes },
  { "swiglu", tl.rows.map { fn = function(a, c) return tl.silu(a) * c end, inputs = 2, n = 1024 },
    { grid = { M, N // 1024 }, args = { X1 = { x, { M, N } }, X2 = { x2, { M, N } }, Y = { y, { M, N } } } }, 3 * bytes },
  -- the same programs with other tiles: more rows a program (fewer, longer
  -- programs) and more warps a row (fewer registers a thread: more programs an SM)
  { "swiglu, rows 4", tl.rows.map { fn = function(a, c) return tl.silu(a) * c end, inputs = 2, n = 1024, rows = 4 },
    { grid = { M // 4, N // 1024 }, args = { X1 = { x, { M, N } }, X2 = { x2, { M, N } }, Y = { y, { M, N } } } }, 3 * bytes },
  { "swiglu, rows 8", tl.rows.map { fn = function(a, c) return tl.silu(a) * c end, inputs = 2, n = 1024, rows = 8 },
    { grid = { M // 8, N // 1024 }, args = { X1 = { x, { M, N } }, X2 = { x2, { M, N } }, Y = { y, { M, N } } } }, 3 * bytes },
  { "map gelu (f32), rows 4", tl.rows.map { fn = "gelu", n = 1024, rows = 4, elem = tl.f32 },
    { grid = { (M // 2 + 3) // 4, N // 1024 }, args = { X = { xf, { M // 2, N } }, Y = { yf, { M // 2, N } } } }, 2 * bytes },
  -- the row loop's variants (tl.options.row_ring while the kernel compiles;
  -- the 5th entry): the shared ring (registers = 0), off (one CTA a program,
  -- the threads' own loads), CTAs an SM, bytes in flight an SM, W and B
  -- loaded once a row (hoist = 0)
  { "rmsnorm, ring", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { registers = 0 } },
  { "softmax, ring", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { registers = 0 } },
  { "layernorm, ring", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { registers = 0 } },
  { "row copy (Y = X), ring", row_copy(8), sm_launch, 2 * bytes, { registers = 0 } },
  { "row copy (Y = X), no ring", row_copy(8), sm_launch, 2 * bytes, false },
  { "row copy (Y = X), ring, 16 warps", row_copy(16), sm_launch, 2 * bytes, { registers = 0 } },
  { "rmsnorm, ring, 16 warps", tl.rows.rmsnorm { n = N, warps = 16 }, rms_launch, 2 * bytes, { registers = 0 } },
  { "rmsnorm, ring, 4 warps", tl.rows.rmsnorm { n = N, warps = 4 }, rms_launch, 2 * bytes, { registers = 0 } },
  { "softmax, ring, 16 warps", tl.rows.softmax { n = N, warps = 16 }, sm_launch, 2 * bytes, { registers = 0 } },
  { "rmsnorm, no ring", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, false },
  { "softmax, no ring", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, false },
  { "layernorm, no ring", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, false },
  { "rmsnorm, ring 1 CTA an SM", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { per_sm = 1, registers = 0 } },
  { "rmsnorm, ring 3 CTAs an SM", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { per_sm = 3, registers = 0 } },
  { "rmsnorm, ring 64 KiB in flight", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { in_flight = 65536, registers = 0 } },
  { "rmsnorm, ring 192 KiB in flight", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { in_flight = 196608, registers = 0 } },
  { "rmsnorm, ring, W a row", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { hoist = 0, registers = 0 } },
  { "softmax, ring 3 CTAs an SM", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { per_sm = 3, registers = 0 } },
  { "softmax, ring 4 CTAs an SM", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { per_sm = 4, in_flight = 196608, registers = 0 } },
  { "layernorm, ring, W B a row", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { hoist = 0, registers = 0 } },
  { "layernorm, ring, min_ctas 3 (3 CTAs an SM)", tl.rows.layernorm { n = N, min_ctas = 3 }, ln_launch, 2 * bytes, { registers = 0 } },
  { "layernorm, no ring, min_ctas 3", tl.rows.layernorm { n = N, min_ctas = 3 }, ln_launch, 2 * bytes, false },
  -- no shared ring: each thread loads its part of the row `registers`
  -- programs ahead into registers while it works on this one
  { "row copy (Y = X), registers", row_copy(8), sm_launch, 2 * bytes, { registers = 1 } },
  { "rmsnorm, registers", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { registers = 1 } },
  { "softmax, registers", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { registers = 1 } },
  { "layernorm, registers", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { registers = 1 } },
  { "rmsnorm, registers 1 CTA an SM", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { registers = 1, per_sm = 1 } },
  { "rmsnorm, registers 3 CTAs an SM", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { registers = 1, per_sm = 3 } },
  { "softmax, registers 3 CTAs an SM", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { registers = 1, per_sm = 3 } },
  { "rmsnorm, registers, 4 warps", tl.rows.rmsnorm { n = N, warps = 4 }, rms_launch, 2 * bytes, { registers = 1 } },
  { "rmsnorm, registers, 16 warps", tl.rows.rmsnorm { n = N, warps = 16 }, rms_launch, 2 * bytes, { registers = 1 } },
  { "softmax, registers, 16 warps", tl.rows.softmax { n = N, warps = 16 }, sm_launch, 2 * bytes, { registers = 1 } },
  { "layernorm, registers, W B a row", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { registers = 1, hoist = 0 } },
  { "layernorm, registers 1 CTA an SM", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { registers = 1, per_sm = 1 } },
  { "rmsnorm, registers 2 rows ahead", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { registers = 2 } },
  { "softmax, registers 2 rows ahead", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { registers = 2 } },
  { "layernorm, registers 2 rows ahead", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { registers = 2 } },
  { "rmsnorm, registers 3 CTAs an SM, W a row", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { registers = 1, per_sm = 3, hoist = 0 } },
  { "rmsnorm, registers 4 CTAs an SM, W a row", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { registers = 1, per_sm = 4, hoist = 0 } },
  { "rmsnorm, registers, W a row", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { registers = 1, hoist = 0 } },
  { "softmax, registers 4 CTAs an SM", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { registers = 1, per_sm = 4 } },
  { "rmsnorm, registers 2 ahead, 16 warps", tl.rows.rmsnorm { n = N, warps = 16 }, rms_launch, 2 * bytes, { registers = 2 } },
  { "softmax, registers 2 ahead, 16 warps", tl.rows.softmax { n = N, warps = 16 }, sm_launch, 2 * bytes, { registers = 2 } },
  -- the cp.async ring: S rows a CTA in shared memory, each thread copying its
  -- own 16-byte chunks S - 1 programs ahead (rowring.lua's loop_async)
  { "row copy (Y = X), async 2", row_copy(8), sm_launch, 2 * bytes, { async = 2 } },
  { "row copy (Y = X), async 3", row_copy(8), sm_launch, 2 * bytes, { async = 3 } },
  { "row copy (Y = X), async 4", row_copy(8), sm_launch, 2 * bytes, { async = 4 } },
  { "row copy (Y = X), async 3, 3 CTAs an SM", row_copy(8), sm_launch, 2 * bytes, { async = 3, per_sm = 3 } },
  { "row copy (Y = X), async 2, 4 CTAs an SM", row_copy(8), sm_launch, 2 * bytes, { async = 2, per_sm = 4 } },
  { "row copy (Y = X), async 3, 16 warps", row_copy(16), sm_launch, 2 * bytes, { async = 3 } },
  { "rmsnorm, async 2", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { async = 2 } },
  { "rmsnorm, async 3", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { async = 3 } },
  { "rmsnorm, async 4", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { async = 4 } },
  { "rmsnorm, async 3, 3 CTAs an SM", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { async = 3, per_sm = 3 } },
  { "rmsnorm, async 3, 4 CTAs an SM", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { async = 3, per_sm = 4 } },
  { "rmsnorm, async 2, 4 CTAs an SM, W a row", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { async = 2, per_sm = 4, hoist = 0 } },
  { "rmsnorm, async 3, 16 warps", tl.rows.rmsnorm { n = N, warps = 16 }, rms_launch, 2 * bytes, { async = 3 } },
  { "softmax, async 2", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { async = 2 } },
  { "softmax, async 3", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { async = 3 } },
  { "softmax, async 4", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { async = 4 } },
  { "softmax, async 3, 3 CTAs an SM", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { async = 3, per_sm = 3 } },
  { "softmax, async 3, 4 CTAs an SM", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { async = 3, per_sm = 4 } },
  { "softmax, async 3, 16 warps", tl.rows.softmax { n = N, warps = 16 }, sm_launch, 2 * bytes, { async = 3 } },
  { "layernorm, async 2", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { async = 2 } },
  { "layernorm, async 3", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { async = 3 } },
  { "layernorm, async 4", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { async = 4 } },
  { "layernorm, async 3, 3 CTAs an SM", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { async = 3, per_sm = 3 } },
  { "layernorm, async 3, W B a row", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { async = 3, hoist = 0 } },
  { "layernorm, async 3, 3 CTAs an SM, W B a row", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { async = 3, per_sm = 3, hoist = 0 } },
  { "layernorm, async 3, 16 warps", tl.rows.layernorm { n = N, warps = 16 }, ln_launch, 2 * bytes, { async = 3 } },
  { "rmsnorm, async 4, 16 warps", tl.rows.rmsnorm { n = N, warps = 16 }, rms_launch, 2 * bytes, { async = 4 } },
  { "softmax, async 4, 16 warps", tl.rows.softmax { n = N, warps = 16 }, sm_launch, 2 * bytes, { async = 4 } },
  -- one CTA of 32 warps an SM, 6 rows a CTA in shared memory
  { "row copy (Y = X), async 6, 1 CTA an SM, 32 warps", row_copy(32), sm_launch, 2 * bytes, { async = 6, per_sm = 1 } },
  { "rmsnorm, async 6, 1 CTA an SM, 32 warps", tl.rows.rmsnorm { n = N, warps = 32 }, rms_launch, 2 * bytes, { async = 6, per_sm = 1 } },
  { "softmax, async 6, 1 CTA an SM, 32 warps", tl.rows.softmax { n = N, warps = 32 }, sm_launch, 2 * bytes, { async = 6, per_sm = 1 } },
  { "layernorm, async 6, 1 CTA an SM, 32 warps", tl.rows.layernorm { n = N, warps = 32 }, ln_launch, 2 * bytes, { async = 6, per_sm = 1 } },
  -- the register loop with the rows claimed at run time (an atomic counter,
  -- claims = K rows a claim: rowring.lua's loop_claims) against the default's
  -- rows by stride of the grid (the rows above without "claims")
  { "row copy (Y = X), registers, claims", row_copy(8), sm_launch, 2 * bytes, { registers = 1, claims = 1 } },
  { "row copy (Y = X), registers, claims 2", row_copy(8), sm_launch, 2 * bytes, { registers = 1, claims = 2 } },
  { "row copy (Y = X), registers, claims 4", row_copy(8), sm_launch, 2 * bytes, { registers = 1, claims = 4 } },
  { "rmsnorm, registers, claims", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { registers = 1, claims = 1 } },
  { "rmsnorm, registers, claims 2", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { registers = 1, claims = 2 } },
  { "rmsnorm, registers, claims 4", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { registers = 1, claims = 4 } },
  { "softmax, registers, claims", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { registers = 1, claims = 1 } },
  { "softmax, registers, claims 4", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { registers = 1, claims = 4 } },
  { "layernorm, registers, claims", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { registers = 1, claims = 1 } },
  { "layernorm, registers, claims 4", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { registers = 1, claims = 4 } },
  -- (s10) LayerNorm in one pass (sum and sum of squares side by side, one
  -- barrier), two rows ahead with claims (registers = 2), 16 warps, 3 CTAs an
  -- SM with claims, the loads of the rows ahead with cache hints (stream)
  { "layernorm, one pass", tl.rows.layernorm { n = N, one_pass = true }, ln_launch, 2 * bytes },
  { "layernorm, one pass, W B a row", tl.rows.layernorm { n = N, one_pass = true }, ln_launch, 2 * bytes, { hoist = 0 } },
  { "row copy (Y = X), claims, 2 ahead", row_copy(8), sm_launch, 2 * bytes, { registers = 2, claims = 1 } },
  { "rmsnorm, claims, 2 ahead", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { registers = 2, claims = 1 } },
  { "softmax, claims, 2 ahead", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { registers = 2, claims = 1 } },
  { "layernorm, claims, 2 ahead", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { registers = 2, claims = 1 } },
  { "layernorm, one pass, claims, 2 ahead", tl.rows.layernorm { n = N, one_pass = true }, ln_launch, 2 * bytes, { registers = 2, claims = 1 } },
  { "row copy (Y = X), 16 warps, claims, 2 ahead", row_copy(16), sm_launch, 2 * bytes, { registers = 2, claims = 1 } },
  { "rmsnorm, 16 warps, claims, 2 ahead", tl.rows.rmsnorm { n = N, warps = 16 }, rms_launch, 2 * bytes, { registers = 2, claims = 1 } },
  { "softmax, 16 warps, claims, 2 ahead", tl.rows.softmax { n = N, warps = 16 }, sm_launch, 2 * bytes, { registers = 2, claims = 1 } },
  { "rmsnorm, 16 warps, claims", tl.rows.rmsnorm { n = N, warps = 16 }, rms_launch, 2 * bytes, { claims = 1 } },
  { "softmax, 16 warps, claims", tl.rows.softmax { n = N, warps = 16 }, sm_launch, 2 * bytes, { claims = 1 } },
  { "row copy (Y = X), claims, 3 CTAs an SM", row_copy(8), sm_launch, 2 * bytes, { claims = 1, per_sm = 3 } },
  { "softmax, claims, 3 CTAs an SM", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { claims = 1, per_sm = 3 } },
  { "row copy (Y = X), claims, stream 1", row_copy(8), sm_launch, 2 * bytes, { claims = 1, stream = 1 } },
  { "row copy (Y = X), claims, stream 2", row_copy(8), sm_launch, 2 * bytes, { claims = 1, stream = 2 } },
  { "rmsnorm, claims, stream 1", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { claims = 1, stream = 1 } },
  { "rmsnorm, claims, stream 2", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { claims = 1, stream = 2 } },
  { "softmax, claims, stream 2", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { claims = 1, stream = 2 } },
  { "row copy (Y = X), claims, 2 ahead, stream 2", row_copy(8), sm_launch, 2 * bytes, { registers = 2, claims = 1, stream = 2 } },
  { "row copy (Y = X), claims, late", row_copy(8), sm_launch, 2 * bytes, { claims = 1, late = 1 } },
  { "rmsnorm, claims, late", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { claims = 1, late = 1 } },
  { "softmax, claims, late", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { claims = 1, late = 1 } },
  { "layernorm, one pass, claims, late", tl.rows.layernorm { n = N, one_pass = true }, ln_launch, 2 * bytes, { claims = 1, late = 1 } },
  { "layernorm, claims, late", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { claims = 1, late = 1 } },
  -- (s10) the register loop's stores with st.global.cs (evict first in L2) or .cg
  { "row copy (Y = X), claims, store cs", row_copy(8), sm_launch, 2 * bytes, { claims = 1, store = 1 } },
  { "row copy (Y = X), claims, store cg", row_copy(8), sm_launch, 2 * bytes, { claims = 1, store = 2 } },
  { "rmsnorm, claims, store cs", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { claims = 1, store = 1 } },
  { "rmsnorm, claims, store cg", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { claims = 1, store = 2 } },
  { "softmax, claims, store cs", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { claims = 1, store = 1 } },
  { "layernorm, claims, store cs", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { claims = 1, store = 1 } },
  { "row copy (Y = X), claims, late, store cs", row_copy(8), sm_launch, 2 * bytes, { claims = 1, late = 1, store = 1 } },
  { "softmax, claims, late, store cs", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { claims = 1, late = 1, store = 1 } },
  { "row copy (Y = X), claims, 2 ahead, late", row_copy(8), sm_launch, 2 * bytes, { registers = 2, claims = 1, late = 1 } },
  { "rmsnorm, claims, 2 ahead, late", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { registers = 2, claims = 1, late = 1 } },
  { "softmax, claims, 2 ahead, late", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { registers = 2, claims = 1, late = 1 } },
  { "layernorm, one pass, claims, 2 ahead, late", tl.rows.layernorm { n = N, one_pass = true }, ln_launch, 2 * bytes,
    { registers = 2, claims = 1, late = 1 } },
  -- (s11) the shared ring with bulk stores (row_ring.bulk = S: thread 0 copies
  -- the rows in by cp.async.bulk S programs ahead, the threads write each row
  -- back into its stage, thread 0 copies it out by one bulk copy)
  { "row copy (Y = X), bulk 2", row_copy(8), sm_launch, 2 * bytes, { bulk = 2 } },
  { "row copy (Y = X), bulk 3", row_copy(8), sm_launch, 2 * bytes, { bulk = 3 } },
  { "row copy (Y = X), bulk 4", row_copy(8), sm_launch, 2 * bytes, { bulk = 4 } },
  { "row copy (Y = X), bulk 6", row_copy(8), sm_launch, 2 * bytes, { bulk = 6 } },
  { "row copy (Y = X), bulk 8, 1 CTA an SM", row_copy(8), sm_launch, 2 * bytes, { bulk = 8, per_sm = 1 } },
  { "row copy (Y = X), bulk 3, 3 CTAs an SM", row_copy(8), sm_launch, 2 * bytes, { bulk = 3, per_sm = 3 } },
  { "row copy (Y = X), bulk 2, 4 CTAs an SM", row_copy(8), sm_launch, 2 * bytes, { bulk = 2, per_sm = 4 } },
  { "row copy (Y = X), bulk 4, 4 warps", row_copy(4), sm_launch, 2 * bytes, { bulk = 4 } },
  { "rmsnorm, bulk 3", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { bulk = 3 } },
  { "rmsnorm, bulk 4", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { bulk = 4 } },
  { "rmsnorm, bulk 6", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { bulk = 6 } },
  { "rmsnorm, bulk 3, 3 CTAs an SM", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { bulk = 3, per_sm = 3 } },
  { "softmax, bulk 3", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { bulk = 3 } },
  { "softmax, bulk 4", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { bulk = 4 } },
  { "softmax, bulk 3, 3 CTAs an SM", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { bulk = 3, per_sm = 3 } },
  { "layernorm, bulk 3", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { bulk = 3 } },
  { "layernorm, bulk 4", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { bulk = 4 } },
  { "layernorm, one pass, bulk 3", tl.rows.layernorm { n = N, one_pass = true }, ln_launch, 2 * bytes, { bulk = 3 } },
  -- (s11) LayerNorm with W and B both hoisted (hoist 1; the register loop's
  -- default since s11norm-2) and with the budget before (hoist 2: an eighth of
  -- the registers in all keeps W only, B is loaded a row, after the reductions)
  { "layernorm, hoist 1", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { hoist = 1 } },
  { "layernorm, hoist 2", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { hoist = 2 } },
  { "layernorm, one pass, hoist 2", tl.rows.layernorm { n = N, one_pass = true }, ln_launch, 2 * bytes, { hoist = 2 } },
  { "layernorm, one pass, hoist 1", tl.rows.layernorm { n = N, one_pass = true }, ln_launch, 2 * bytes, { hoist = 1 } },
  { "layernorm, bulk 3, hoist 1", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { bulk = 3, hoist = 1 } },
  { "layernorm, bulk 4, hoist 1", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { bulk = 4, hoist = 1 } },
  { "layernorm, one pass, bulk 3, hoist 1", tl.rows.layernorm { n = N, one_pass = true }, ln_launch, 2 * bytes, { bulk = 3, hoist = 1 } },
  -- (s11) the bulk ring with its rows claimed at run time (a claim a refill)
  { "row copy (Y = X), bulk 3, claims", row_copy(8), sm_launch, 2 * bytes, { bulk = 3, claims = 1 } },
  { "row copy (Y = X), bulk 4, claims", row_copy(8), sm_launch, 2 * bytes, { bulk = 4, claims = 1 } },
  { "row copy (Y = X), bulk 6, claims", row_copy(8), sm_launch, 2 * bytes, { bulk = 6, claims = 1 } },
  { "rmsnorm, bulk 3, claims", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { bulk = 3, claims = 1 } },
  { "rmsnorm, bulk 4, claims", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { bulk = 4, claims = 1 } },
  { "softmax, bulk 3, claims", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { bulk = 3, claims = 1 } },
  { "softmax, bulk 4, claims", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { bulk = 4, claims = 1 } },
  { "layernorm, bulk 3, hoist 1, claims", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { bulk = 3, hoist = 1, claims = 1 } },
  { "layernorm, bulk 4, hoist 1, claims", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { bulk = 4, hoist = 1, claims = 1 } },
  { "row copy (Y = X), no ring, 4 warps", row_copy(4), sm_launch, 2 * bytes, false },
  { "row copy (Y = X), no ring, 16 warps", row_copy(16), sm_launch, 2 * bytes, false },
  -- (s13) the raw copies (c.raw: a tl.kernel launched as is)
  { "row copy (Y = X), raw 16 B x 4, a CTA a row", raw_copy(16, 4), raw_launch(16, 4), 2 * bytes, raw = true },
  { "row copy (Y = X), raw 16 B x 4, a CTA a row, 2 CTAs an SM", raw_copy(16, 4), raw_launch(16, 4, nil, SMEM2), 2 * bytes, raw = true },
  { "row copy (Y = X), raw 16 B x 8, a CTA 2 rows, 2 CTAs an SM", raw_copy(16, 8), raw_launch(16, 8, nil, SMEM2), 2 * bytes, raw = true },
  { "row copy (Y = X), raw 16 B x 4, a CTA a row, store cs", raw_copy(16, 4, true), raw_launch(16, 4), 2 * bytes, raw = true },
  { "row copy (Y = X), raw 8 B x 8, a CTA a row", raw_copy(8, 8), raw_launch(8, 8), 2 * bytes, raw = true },
  { "row copy (Y = X), raw 16 B x 1, a CTA 4 KB", raw_copy(16, 1), raw_launch(16, 1), 2 * bytes, raw = true },
  { "row copy (Y = X), raw 16 B x 4, 2 CTAs an SM by stride", raw_copy(16, 4), raw_launch(16, 4, 2 * SMS, SMEM2), 2 * bytes, raw = true },
  { "row copy (Y = X), raw 16 B x 4, 8 CTAs an SM by stride", raw_copy(16, 4), raw_launch(16, 4, 8 * SMS), 2 * bytes, raw = true },
  { "row sum", tl.rows.reduce { kind = "sum", n = N }, { grid = { M }, args = { X = { x, { M, N } }, Out = { rstd, { M } }, N = N } }, bytes },
  -- (s14) the row rule's units (tileas-assign-layouts: 8 bytes a thread's
  -- access for a row of >= 64 bytes a thread moved unchanged, a row copy; 16
  -- for rows with arithmetic) against the other (unit = tl.options.blocked_unit
  -- while the kernel compiles), and 4-byte units
  { "rmsnorm, unit 8", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, unit = 8 },
  { "softmax, unit 8", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, unit = 8 },
  { "layernorm, unit 8", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, unit = 8 },
  { "row copy (Y = X), registers, unit 16", row_copy(8), sm_launch, 2 * bytes, { registers = 1 }, unit = 16 },
  { "row copy (Y = X), no ring, unit 16", row_copy(8), sm_launch, 2 * bytes, false, unit = 16 },
  { "row sum, unit 8", tl.rows.reduce { kind = "sum", n = N }, { grid = { M }, args = { X = { x, { M, N } }, Out = { rstd, { M } }, N = N } },
    bytes, unit = 8 },
  { "rmsnorm, unit 4", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, unit = 4 },
  { "layernorm, unit 4", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, unit = 4 },
  { "row copy (Y = X), registers, unit 4", row_copy(8), sm_launch, 2 * bytes, { registers = 1 }, unit = 4 },
  { "rmsnorm, 16 warps, unit 8", tl.rows.rmsnorm { n = N, warps = 16 }, rms_launch, 2 * bytes, unit = 8 },
  { "layernorm, 16 warps, unit 8", tl.rows.layernorm { n = N, warps = 16 }, ln_launch, 2 * bytes, unit = 8 },
  { "layernorm, one pass, unit 8", tl.rows.layernorm { n = N, one_pass = true }, ln_launch, 2 * bytes, unit = 8 },
  -- (s14) the register loop's row loads and stores one branch a row (row_ring.whole)
  { "rmsnorm, whole", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { whole = 1 } },
  { "softmax, whole", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { whole = 1 } },
  { "layernorm, whole", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { whole = 1 } },
  { "layernorm, one pass, whole", tl.rows.layernorm { n = N, one_pass = true }, ln_launch, 2 * bytes, { whole = 1 } },
  { "row copy (Y = X), registers, whole", row_copy(8), sm_launch, 2 * bytes, { registers = 1, whole = 1 } },
  { "rmsnorm, whole, unit 8", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { whole = 1 }, unit = 8 },
  { "softmax, whole, unit 8", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { whole = 1 }, unit = 8 },
  { "layernorm, whole, unit 8", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { whole = 1 }, unit = 8 },
  { "rmsnorm, whole, 2 ahead", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { whole = 1, registers = 2, claims = 1 } },
  { "softmax, whole, 2 ahead", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { whole = 1, registers = 2, claims = 1 } },
  -- (s15) the shared ring with its rows claimed at run time (registers = 0,
  -- claims = 1: thread 0 copies the rows in by cp.async.bulk, the threads read
  -- them from the stage and store them; a refill a claim): stages from the
  -- bytes in flight (the rule's 128 KiB an SM: 4 rows of 8192 bf16 a CTA;
  -- 64 / 96 / 160 / 192 KiB: 2 / 3 / 5 / 6)
  { "rmsnorm, ring, claims", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { registers = 0, claims = 1 } },
  { "softmax, ring, claims", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { registers = 0, claims = 1 } },
  { "layernorm, ring, claims", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { registers = 0, claims = 1 } },
  { "layernorm, ring, claims, hoist 1", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { registers = 0, claims = 1, hoist = 1 } },
  { "layernorm, one pass, ring, claims, hoist 1", tl.rows.layernorm { n = N, one_pass = true }, ln_launch, 2 * bytes,
    { registers = 0, claims = 1, hoist = 1 } },
  { "row copy (Y = X), ring, claims", row_copy(8), sm_launch, 2 * bytes, { registers = 0, claims = 1 } },
  { "row copy (Y = X), ring 6, claims", row_copy(8), sm_launch, 2 * bytes, { registers = 0, claims = 1, in_flight = 196608 } },
  { "rmsnorm, ring 2, claims", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { registers = 0, claims = 1, in_flight = 65536 } },
  { "rmsnorm, ring 3, claims", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { registers = 0, claims = 1, in_flight = 98304 } },
  { "rmsnorm, ring 5, claims", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { registers = 0, claims = 1, in_flight = 163840 } },
  { "rmsnorm, ring 6, claims", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { registers = 0, claims = 1, in_flight = 196608 } },
  { "softmax, ring 3, claims", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { registers = 0, claims = 1, in_flight = 98304 } },
  { "softmax, ring 6, claims", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { registers = 0, claims = 1, in_flight = 196608 } },
  { "layernorm, ring 3, claims, hoist 1", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { registers = 0, claims = 1, hoist = 1, in_flight = 98304 } },
  { "layernorm, ring 6, claims, hoist 1", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { registers = 0, claims = 1, hoist = 1, in_flight = 196608 } },
  { "rmsnorm, ring, claims, 3 CTAs an SM", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { registers = 0, claims = 1, per_sm = 3 } },
  -- (s15norm-2) the stage's reads in one branch a row (whole = 1), the ring of
  -- 2 for softmax
  { "rmsnorm, ring 3, claims, whole", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { registers = 0, claims = 1, in_flight = 98304, whole = 1 } },
  { "softmax, ring 3, claims, whole", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { registers = 0, claims = 1, in_flight = 98304, whole = 1 } },
  { "softmax, ring 2, claims", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { registers = 0, claims = 1, in_flight = 65536 } },
  { "layernorm, ring 3, claims, hoist 1, whole", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { registers = 0, claims = 1, hoist = 1, in_flight = 98304, whole = 1 } },
  { "layernorm, ring, claims, hoist 1, whole", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { registers = 0, claims = 1, hoist = 1, whole = 1 } },
  -- (s16) LayerNorm's body taken apart (ln_diag) on the hoisted ring of 3
  -- with one branch a row (s15norm-2's best form; the mask of the squares a
  -- compare and a select a register, mb = false: as s16norm-1 measured them,
  -- before the mask branch was the shared rings' rule), and the one-pass form
  -- with its two sums reduced together (one barrier a row)
  { "ln diag, as the library", ln_diag {}, ln_launch, 2 * bytes, { registers = 0, claims = 1, hoist = 1, in_flight = 98304, whole = 1 }, mb = false },
  { "ln diag, recip", ln_diag { recip = true }, ln_launch, 2 * bytes, { registers = 0, claims = 1, hoist = 1, in_flight = 98304, whole = 1 }, mb = false },
  { "ln diag, no mask", ln_diag { mask = false }, ln_launch, 2 * bytes, { registers = 0, claims = 1, hoist = 1, in_flight = 98304, whole = 1 } },
  { "ln diag, recip, no mask", ln_diag { recip = true, mask = false }, ln_launch, 2 * bytes, { registers = 0, claims = 1, hoist = 1, in_flight = 98304, whole = 1 } },
  { "ln diag, no W B", ln_diag { wb = false }, ln_launch, 2 * bytes, { registers = 0, claims = 1, hoist = 1, in_flight = 98304, whole = 1 }, mb = false },
  { "ln diag, plain one pass", ln_diag { plain = true, recip = true }, ln_launch, 2 * bytes, { registers = 0, claims = 1, hoist = 1, in_flight = 98304, whole = 1 } },
  { "ln diag, recip, registers", ln_diag { recip = true }, ln_launch, 2 * bytes, { registers = 1 } },
  { "ln diag, recip, no mask, registers", ln_diag { recip = true, mask = false }, ln_launch, 2 * bytes, { registers = 1 } },
  { "layernorm, one pass, ring 3, claims, hoist 1, whole", tl.rows.layernorm { n = N, one_pass = true }, ln_launch, 2 * bytes, { registers = 0, claims = 1, hoist = 1, in_flight = 98304, whole = 1 } },
  -- (s16) the mask of the squares past N as one branch a thread (mb:
  -- tl.options.mask_branch while the kernel compiles; since s16norm the rule
  -- on the shared rings), the ring of 2
  { "layernorm, ring 3, claims, hoist 1, whole, mask branch", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { registers = 0, claims = 1, hoist = 1, in_flight = 98304, whole = 1 }, mb = true },
  { "layernorm, mask branch", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { registers = 1 }, mb = true },
  { "layernorm, ring 2, claims, hoist 1, whole", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes,
    { registers = 0, claims = 1, hoist = 1, in_flight = 65536, whole = 1 } },
  { "ln diag, recip, mask branch", ln_diag { recip = true }, ln_launch, 2 * bytes, { registers = 0, claims = 1, hoist = 1, in_flight = 98304, whole = 1 }, mb = true },
  -- (s16norm-2) LayerNorm's default since s16norm (the shared ring of 3, rows
  -- claimed, W and B hoisted, whole, the mask branch; 1 / N once a row, the
  -- means as products): "layernorm" above; the default before it, byte for
  -- byte (ln_diag's body is the library's before s16norm: the means as
  -- divisions; the register loop); the default without the mask branch; the
  -- old body (two divisions) on the new form
  { "ln diag, as the library, registers (the old default)", ln_diag {}, ln_launch, 2 * bytes, { registers = 1 } },
  { "layernorm, no mask branch", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, nil, mb = false },
  { "ln diag, as the library, mask branch", ln_diag {}, ln_launch, 2 * bytes, { registers = 0, claims = 1, hoist = 1, in_flight = 98304, whole = 1 } },
  { "row copy (Y = X), raw 8 B x 8, a CTA a row, 2 CTAs an SM", raw_copy(8, 8), raw_launch(8, 8, nil, SMEM2), 2 * bytes, raw = true },
  { "row copy (Y = X), raw 8 B x 16, a CTA 2 rows, 2 CTAs an SM", raw_copy(8, 16), raw_launch(8, 16, nil, SMEM2), 2 * bytes, raw = true },
  -- (s17) the shared ring's refill at the body's first reduce's barrier (the
  -- rule for two reduces: LayerNorm, softmax) against behind its own barrier
  -- (refill 0: the form before), and forced on RMSNorm's one reduce
  { "layernorm, refill 0", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { refill = 0 } },
  { "softmax, refill 0", tl.rows.softmax { n = N }, sm_launch, 2 * bytes, { refill = 0 } },
  { "rmsnorm, refill 1", tl.rows.rmsnorm { n = N }, rms_launch, 2 * bytes, { refill = 1 } },
  -- (s17) LayerNorm's default form with 4, 3 (the default before s17-2) and 2 stages (the default
  -- since; in_flight: not a key of the form)
  { "layernorm, in flight 128 KiB", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { in_flight = 131072 } },
  { "layernorm, in flight 96 KiB", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { in_flight = 98304 } },
  { "layernorm, in flight 64 KiB", tl.rows.layernorm { n = N }, ln_launch, 2 * bytes, { in_flight = 65536 } },
}
-- (s14) the backward passes (DX, and each program's part of DW / DB: X and DY
-- read, DX written, DWp of P x N f32) at 16-byte units (the rule's) and 8;
-- not checked here (examples/tile_rows.lua and the GPU spec check them)
local BWD_ROWS = 8
local P = (M + BWD_ROWS - 1) // BWD_ROWS
local dwp, dbp, dx = D.alloc(tl.f32, P * N), D.alloc(tl.f32, P * N), D.alloc(tl.bf16, M * N)
local function bwd_launch(layer)
  local a = { X = { x, { M, N } }, W = { w, { N } }, DY = { x2, { M, N } }, Rstd = { rstd, { M } }, DX = { dx, { M, N } },
              DWp = { dwp, { P, N } }, M = M, N = N }
  if layer then a.Mean, a.DBp = { mean, { M } }, { dbp, { P, N } } end
  return { grid = { P }, args = a }
end
for _, layer in ipairs { false, true } do
  local name = layer and "layernorm_bwd" or "rmsnorm_bwd"
  for _, unit in ipairs { false, 8 } do
    cases[#cases + 1] = { ("bwd %s, rows %d%s"):format(name, BWD_ROWS, unit and ", unit 8" or ""), tl.rows[name] { n = N, rows = BWD_ROWS },
                          bwd_launch(layer), 3 * bytes + P * N * 4 * (layer and 2 or 1), unit = unit or nil }
  end
end

-- the transposes: by TMA (convert-tileas-to-cutlass's transpose.lua; 16-bit
-- tiles of 64 and 128 default to the pairs form, others of a multiple of 64
-- go by TMA) and its variants
-- (tl.options.tile_transpose while the kernel compiles, the 6th entry:
-- stages = input tiles in flight a CTA, outs = output tiles, per_sm = CTAs an
-- SM, order 1: the programs y fastest; false: the exchange through the
-- threads' registers, as before)
-- (s14: elements of 32 bits (X of M x N / 2 f32) and of 8 (M x 2N bytes): the same bytes)
local xb, yb
local function transpose_case(name, n, warps, opt, e)
  local xs, ys, cols = x, y, N
  if e == "f32" then xs, ys, cols = xf, yf, N // 2 end
  if e == "u8" then
    if not xb then xb, yb = D.random(tl.u8, 2 * M * N, seed + 5), D.alloc(tl.u8, 2 * M * N) end
    xs, ys, cols = xb, yb, 2 * N
  end
  -- (16-bit's variants -- stages, bands, early refills, the diagonal, claims -- are the TMA form's: their
  -- options name it, since 16-bit's default is the pairs form)
  if type(opt) == "table" and not e and not opt.form then opt.form = "tma" end
  local launch = { grid = { M // n, cols // n }, args = { X = { xs, { M, cols } }, Y = { ys, { cols, M } } } }
  cases[#cases + 1] = { name, tl.rows.transpose { n = n, warps = warps, elem = e and tl[e] or nil }, launch, 2 * bytes, nil, opt,
                        tx = xs, ty = ys, tcols = cols }
end
transpose_case("transpose 64", 64, 4) -- (the default: the pairs form since s14tr-3; by TMA before)
transpose_case("transpose 128", 128, 8)
transpose_case("transpose 64, exchange (registers)", 64, 4, false)
transpose_case("transpose 128, exchange (registers)", 128, 8, false)
-- (the default of 64 is 6 stages, 2 outs, 1 CTA an SM: its neighbours, and 4 / 2 / 2, the first default)
for _, v in ipairs { { 2, 2, 2 }, { 4, 2, 1 }, { 5, 2, 1 }, { 7, 2, 1 }, { 8, 2, 1 }, { 6, 3, 1 }, { 4, 2, 2 }, { 3, 2, 3 },
                     { 4, 2, 3 }, { 2, 2, 4 }, { 4, 3, 2 }, { 6, 2, 2 }, { 8, 2, 2 }, { 2, 2, 6 } } do
  transpose_case(("transpose 64, stages %d outs %d, %d CTAs an SM"):format(v[1], v[2], v[3]), 64, 4,
    { stages = v[1], outs = v[2], per_sm = v[3] })
end
transpose_case("transpose 64, 2 warps", 64, 2)
transpose_case("transpose 64, 8 warps", 64, 8)
for _, v in ipairs { { 3, 2, 1 }, { 4, 2, 1 }, { 1, 2, 2 }, { 2, 3, 1 } } do
  transpose_case(("transpose 128, stages %d outs %d, %d CTAs an SM"):format(v[1], v[2], v[3]), 128, 8,
    { stages = v[1], outs = v[2], per_sm = v[3] })
end
transpose_case("transpose 128, 4 warps", 128, 4)
-- the programs walked y fastest (along X's rows) instead of x fastest
transpose_case("transpose 64, order 1", 64, 4, { order = 1 })
transpose_case("transpose 64, stages 3 outs 2, 3 CTAs an SM, order 1", 64, 4, { stages = 3, outs = 2, per_sm = 3, order = 1 })
transpose_case("transpose 128, order 1", 128, 8, { order = 1 })
-- (s10) the programs claimed at run time (an atomic counter) instead of every grid-th a CTA
transpose_case("transpose 64, claims", 64, 4, { claims = 1 })
transpose_case("transpose 128, claims", 128, 8, { claims = 1 })
transpose_case("transpose 64, claims, stages 4", 64, 4, { claims = 1, stages = 4 })
transpose_case("transpose 64, claims, stages 8", 64, 4, { claims = 1, stages = 8 })
transpose_case("transpose 128, claims, stages 3", 128, 8, { claims = 1, stages = 3 })

-- (s14) the programs' order: bands of `group` tile rows of X (x fastest in a
-- band: G x 2n bytes of each of Y's rows written together; group = all rows
-- is order 0, group 1 is order 1), and the diagonal (order 2); early: each
-- iteration's refill issued before its store
for _, v in ipairs { { 64, 4 }, { 64, 8 }, { 64, 16 }, { 64, 32 }, { 64, 64 }, { 128, 2 }, { 128, 4 }, { 128, 8 }, { 128, 16 }, { 128, 32 } } do
  transpose_case(("transpose %d, group %d"):format(v[1], v[2]), v[1], v[1] // 16, { group = v[2] })
end
for _, v in ipairs { { 64, nil }, { 64, 16 }, { 64, 32 }, { 128, nil }, { 128, 8 }, { 128, 16 } } do
  transpose_case(("transpose %d%s, early"):format(v[1], v[2] and (", group " .. v[2]) or ""), v[1], v[1] // 16, { group = v[2], early = 1 })
end
transpose_case("transpose 64, order 2", 64, 4, { order = 2 })
-- 32-bit (TMA: boxes of 32 x 32, word moves) and 8-bit elements (boxes of 128 x 128 bytes, stmatrix.trans of byte pairs)
-- (f32's default: the exchange through the registers, the rule since s14tr-1)
transpose_case("transpose f32 64", 64, 4, nil, "f32")
transpose_case("transpose f32 128", 128, 8, nil, "f32")
transpose_case("transpose f32 64, tma", 64, 4, { form = "tma" }, "f32")
transpose_case("transpose f32 32, tma", 32, 2, { form = "tma" }, "f32")
transpose_case("transpose f32 128, tma", 128, 8, { form = "tma" }, "f32")
-- (s14) 16-bit in the pairs form: a CTA a tile, rows 2i and 2i + 1 paired into words, a 32-bit exchange
-- (the TMA form by name: the 16-bit default's peers whichever form the rule gives 16-bit tiles)
transpose_case("transpose 64, tma", 64, 4, { form = "tma" })
transpose_case("transpose 128, tma", 128, 8, { form = "tma" })
transpose_case("transpose 64, pairs", 64, 4, { form = "pairs" })
transpose_case("transpose 128, pairs", 128, 8, { form = "pairs" })
transpose_case("transpose 64, pairs, 2 warps", 64, 2, { form = "pairs" })
transpose_case("transpose 64, pairs, 8 warps", 64, 8, { form = "pairs" })
transpose_case("transpose 128, pairs, 4 warps", 128, 4, { form = "pairs" })
transpose_case("transpose 128, pairs, 16 warps", 128, 16, { form = "pairs" })
transpose_case("transpose 64, pairs, group 8", 64, 4, { form = "pairs", group = 8 })
transpose_case("transpose 128, pairs, group 8", 128, 8, { form = "pairs", group = 8 })
transpose_case("transpose u8 128", 128, 8, nil, "u8")
transpose_case("transpose u8 128, 4 warps", 128, 4, nil, "u8")
transpose_case("transpose u8 256", 256, 16, nil, "u8")
transpose_case("transpose u8 128, exchange (registers)", 128, 8, false, "u8")
transpose_case("transpose 128, order 2", 128, 8, { order = 2 })
for _, v in ipairs { { 64, 16, 4 }, { 64, 16, 8 }, { 128, 8, 3 }, { 64, 32, 4 }, { 64, 32, 8 }, { 128, 16, 3 } } do
  transpose_case(("transpose %d, group %d, stages %d"):format(v[1], v[2], v[3]), v[1], v[1] // 16, { group = v[2], stages = v[3] })
end

-- The program against its CPU reference on a few rows of X (read back).
local function check_rows(name, k, launch, raw, tc)
  if raw then
    y:fill(0)
    k:launch(launch)
    D.synchronize()
  else
    k:run(launch)
  end
  if name:match "^transpose" then -- sampled elements: Y[j, i] = X[i, j]
    local function at(buf, i) return buf:to_table(i + 1, i + 1)[1] end
    local n, N, x, y = 0, tc.tcols, tc.tx, tc.ty
    for _, ij in ipairs { { 0, 0 }, { 1, N - 1 }, { 3, math.min(77, N - 1) }, { 2, N // 2 }, { M - 1, N - 1 }, { M // 2 + 5, math.min(1000, N - 1) } } do
      if at(y, ij[2] * M + ij[1]) ~= at(x, ij[1] * N + ij[2]) then error(name .. ": Y is not X transposed", 0) end
      n = n + 1
    end
    return n .. " sampled elements checked"
  end
  if name:match "^row copy" then -- sampled rows: Y = X
    for _, r in ipairs { 0, M // 2, M - 1 } do
      if y:to_table(r * N + 1, r * N + N)[N] ~= x:to_table(r * N + 1, r * N + N)[N]
         or table.concat(y:to_table(r * N + 1, r * N + 64), ",") ~= table.concat(x:to_table(r * N + 1, r * N + 64), ",") then
        error(name .. ": Y is not X", 0)
      end
    end
    return "3 rows checked"
  end
  local base = name:match "^%w+" -- (a variant's program: "layernorm, 16 warps")
  if name:match "^ln diag" and not name:match "no W B" then base = "layernorm" end
  local c = ex.cases[({ rmsnorm = "rmsnorm", softmax = "softmax", layernorm = "layernorm" })[base] or ""]
  if not c then return "run" end
  local bad = 0
  for _, r in ipairs { 0, M // 2, M - 1 } do
    local xr = x:to_table(r * N + 1, r * N + N)
    local I = { X = { elem = "bf16", shape = { 1, N }, v = xr }, N = N, eps = eps }
    if base ~= "softmax" then I.W = { elem = "bf16", shape = { N }, v = w:to_table() } end
    if base == "layernorm" then I.B = { elem = "bf16", shape = { N }, v = b:to_table() } end
    local want = c.reference(I, 1, N).Y
    local got = y:to_table(r * N + 1, r * N + N)
    local tol = c.tol.Y
    for j = 1, N do
      local err = math.abs(got[j] - want[j])
      if err > tol[1] * math.abs(want[j]) + tol[2] or err ~= err then bad = bad + 1 end -- (NaN: a mismatch)
    end
  end
  if bad > 0 then error(("%s: %d elements of 3 sampled rows differ from the reference"):format(name, bad), 0) end
  return "3 rows checked"
end

for _, c in ipairs(cases) do
  local name, k, launch, moved = c[1], c[2], c[3], c[4]
  if o.only then
    local hit = false
    for t in o.only:gmatch "[^;]+" do hit = hit or (t:sub(1, 1) == "=" and name == t:sub(2)) or name:find(t, 1, true) ~= nil end
    if not hit then goto next end
  end
  tl.options.row_ring = c[5]
  tl.options.tile_transpose = c[6]
  tl.options.blocked_unit = c.unit
  tl.options.mask_branch = c.mb
  k:compile()
  if name:match "^transpose" then
    (c.ty or y):fill(0) -- (no earlier program's Y passes the check)
    local tma = false
    for _, e in ipairs(k:lowered_op():attr "tileas.params") do tma = tma or e == "map:X" end
    name = name .. (tma and " [tma]" or " [registers]")
  end
  local checked = check_rows(name, k, launch, c.raw, c)
  -- --interleave=1 (s13): cuMemcpyDtoD timed again just before and just after
  -- the program, the ratio against their mean (the GPU's clocks and the
  -- memory's state drift within a run: the first copy is no reference then)
  local ref = rows[1][3]
  local before = o.interleave and time(function() y:copy_from(x) end)
  local ms = time(function() k:launch(launch) end)
  if o.interleave then ref = 2 * bytes / ((before + time(function() y:copy_from(x) end)) / 2) / 1e6 end
  tl.options.row_ring, tl.options.tile_transpose, tl.options.blocked_unit, tl.options.mask_branch = nil, nil, nil, nil
  local gbs = moved / ms / 1e6
  rows[#rows + 1] = { name, ms, gbs, gbs / ref }
  print(("%s: %s, %.3f ms, %.0f GB/s, %.3f of the copy%s"):format(name, checked, ms, gbs, gbs / ref,
    o.interleave and (" (the copy around it: %.0f GB/s)"):format(ref) or ""))
  ::next::
end

print("| program | ms | GB/s | / cuMemcpyDtoD |")
print("|---|---|---|---|")
for _, r in ipairs(rows) do print(("| %s | %.3f | %.0f | %.3f |"):format(r[1], r[2], r[3], r[4])) end
