-- tile_reduce_store.lua: the reduce-add store of tile programs,
-- tl.store(t, coords, tile, {reduce = "add"}) (docs/tileprog.md): programs
-- add their tiles into the same elements of a tensor, atomically.
--
--   "rows_added":   Out[r, c] += X[m * BM + r, c] for every row block m (a
--                   program each): a compute agent's blocked tile (f32 or i32)
--   "splitk_added": C += A_s B_s^T for each K slice s (a program each along
--                   y): split-K whose partial sums a consumer's accumulator
--                   adds into C (f32)
--
-- On the GPU (or `tilua --emulate`) each runs on small-integer inputs, whose
-- sums are exact in any order, and equals its CPU reference on every element.
--
--   tilua examples/tile_reduce_store.lua [--emit=ptx|ir] [--stage=NAME]
--   loadfile("examples/tile_reduce_store.lua")("--library") -> {build_rowsum, build_splitk, run_rowsum, run_splitk, ...}
local tl = require "tilua"
local check = require "tilua.gpu.check"

-- {=== the tile programs
local function build_rowsum(elem, BM, BN)
  tl.new_module()
  local k = tl.tile_kernel("rows_added", { params = { X = tl.tensor(elem, 2), Out = tl.tensor(elem, 2) } })
  k:define(function(_, p)
    local m, n = tl.program_id("x"), tl.program_id("y")
    tl.store(p.Out, { 0, n }, tl.load(p.X, { m, n }, { BM, BN }), { reduce = "add" })
  end)
  return k
end

local function build_splitk()
  tl.new_module()
  local k = tl.tile_kernel("splitk_added", { params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2),
    C = tl.tensor(tl.f32, 2), KS = tl.i32 } })
  k:define(function(_, p)
    local m, s = tl.program_id("x"), tl.program_id("y")
    local acc = tl.for_tiles(p.KS, { tile = 64, stages = 2 }, tl.zeros({ 128, 64 }, tl.f32), function(kk, acc)
      local kt = kk + s * (p.KS // 64)
      return tl.dot(tl.load(p.A, { m, kt }, { 128, 64 }), tl.load(p.B, { 0, kt }, { 64, 64 }), acc, { transpose_b = true })
    end)
    tl.store(p.C, { m, 0 }, acc, { reduce = "add" })
  end)
  return k
end
-- }===

-- n small integers in [lo, hi], seeded
local function ints(n, seed, lo, hi)
  local t, s = {}, seed
  for i = 1, n do
    s = (s * 1103515245 + 12345) & 0x7fffffff
    t[i] = lo + (s >> 16) % (hi - lo + 1)
  end
  return t
end

-- The reference sums.
local function rowsum_ref(x, R, N, BM)
  local out = {}
  for r = 0, BM - 1 do
    for c = 0, N - 1 do
      local v = 0
      for m = r, R - 1, BM do v = v + x[m * N + c + 1] end
      out[r * N + c + 1] = v
    end
  end
  return out
end
local function splitk_ref(a, b, M, K)
  local c = {}
  for i = 0, M - 1 do
    for j = 0, 63 do
      local v = 0
      for kk = 0, K - 1 do v = v + a[i * K + kk + 1] * b[j * K + kk + 1] end
      c[i * 64 + j + 1] = v
    end
  end
  return c
end

-- got (a table) equal to want on every element -> ok, summary
local function compare(name, got, want)
  local fail, count = check.mismatches(name)
  for i = 1, #want do
    if got[i] ~= want[i] then fail("element %d: got %s, want %s", i - 1, tostring(got[i]), tostring(want[i])) end
  end
  return count() == 0, ("%d elements, %d off"):format(#want, count())
end

-- On the device: rows_added of elem with R x N inputs (o.elem, o.r, o.n, o.seed) twice
-- into the same output (the second launch adds to the first's sums).
local function run_rowsum(o)
  local elem, R, N, BM, BN = tl[o.elem or "f32"], o.r or 1000, o.n or 300, 8, 32
  local k = build_rowsum(elem, BM, BN)
  local x = ints(R * N, o.seed or 1, -50, 50)
  local X <close> = tl.device.from(elem, x)
  local out <close> = tl.device.alloc(elem, BM * N)
  out:fill(0)
  for _ = 1, 2 do k:launch { grid = { (R + BM - 1) // BM, (N + BN - 1) // BN }, args = { X = { X, { R, N } }, Out = { out, { BM, N } } } } end
  tl.device.synchronize()
  local want = rowsum_ref(x, R, N, BM)
  for i = 1, #want do want[i] = 2 * want[i] end
  return compare("rows_added", out:to_table(), want)
end

local function run_splitk(o)
  local M, K, S = o.m or 1000, o.k or 1024, o.splits or 4
  local k = build_splitk()
  local a, b = ints(M * K, o.seed or 1, -2, 2), ints(64 * K, (o.seed or 1) + 7, -2, 2)
  local A <close> = tl.device.from(tl.bf16, a)
  local B <close> = tl.device.from(tl.bf16, b)
  local C <close> = tl.device.alloc(tl.f32, M * 64)
  C:fill(0)
  k:launch { grid = { (M + 127) // 128, S }, args = { A = { A, { M, K } }, B = { B, { 64, K } }, C = { C, { M, 64 } }, KS = K // S } }
  tl.device.synchronize()
  return compare("splitk_added", C:to_table(), splitk_ref(a, b, M, K))
end

local example = { name = "tile_reduce_store", build_rowsum = build_rowsum, build_splitk = build_splitk,
                  run_rowsum = run_rowsum, run_splitk = run_splitk, ints = ints, rowsum_ref = rowsum_ref,
                  splitk_ref = splitk_ref }
function example.prepare()
  check.compile("rows_added", build_rowsum(tl.f32, 8, 32))
  check.compile("splitk_added", build_splitk())
end
function example.run(o)
  local ok1, s1 = run_rowsum { elem = "f32", seed = o.seed, r = o.small and 100 or 1000 }
  local ok2, s2 = run_rowsum { elem = "i32", seed = o.seed, r = o.small and 100 or 1000 }
  local ok3, s3 = run_splitk { seed = o.seed, m = o.small and 200 or 1000, k = o.small and 256 or 1024, splits = o.small and 2 or 4 }
  return ok1 and ok2 and ok3, ("rows_added f32: %s; i32: %s; splitk_added: %s"):format(s1, s2, s3)
end
if ... == "--library" then return example end

check.main(example)
