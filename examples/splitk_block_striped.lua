-- splitk_block_striped.lua: a split-K matrix-vector product y = A x in 32-bit
-- integers, reduced with block-striped movement (cutlass.block_striped) and
-- generic barriers (cutlass.generic_barrier) -- the pieces of a StreamK fixup.
--
-- CTA (p, rb) computes the partial sums over the K range of split p for the
-- 2048 rows of row block rb (CTAs of lower splits come first in the grid; the
-- number of row blocks RB, of splits P and their K range KS are build options). Each
-- thread owns 16 rows in the block-striped layout of a 4x4 register fragment
-- (16-byte vector units: thread t, unit u holds rows (u * 128 + t) * 4 + 0..3),
-- writes them to a workspace and loads them back into the fragment
-- (block_striped.load). Then three reductions of the P partials:
--
--   sum     block_striped.reduce kind add: global atomic adds
--   max     block_striped.reduce kind max on a 1-D fragment (thread t: rows t,
--           t + 128, ...), atomic max
--   chain   a turnstile: split p waits (generic_barrier.wait_eq, the last split
--           wait_eq_reset) until the p splits before it have published, adds the
--           running sum into its fragment (block_striped.load_add), stores it
--           (block_striped.store) and arrives (generic_barrier.arrive_inc)
--
-- The host checks all three exactly against the CPU on fresh random data.
--
--   tilua examples/splitk_block_striped.lua [--emit=ir|ptx] [--stage=NAME]
--   loadfile("examples/splitk_block_striped.lua")("--library") -> the example (tilua.gpu.check)
local tl = require "tilua"
local check = require "tilua.gpu.check"

local T = 128       -- threads per CTA
local ROWS = T * 16 -- rows per row block (16 per thread)

-- build(RB, P, KS) -> the kernel for RB row blocks, P splits of KS k each (grid P * RB).
local kernels = {}
local function build(RB, P, KS)
  local key = ("%d/%d/%d"):format(RB, P, KS)
  if kernels[key] then return kernels[key] end
  local M = RB * ROWS
  tl.new_module()
  local k = tl.kernel("splitk_block_striped", {
    params = { { "a", tl.ptr(tl.i32) }, { "x", tl.ptr(tl.i32) }, { "ws", tl.ptr(tl.i32) },
               { "sum", tl.ptr(tl.i32) }, { "max", tl.ptr(tl.i32) }, { "chain", tl.ptr(tl.i32) },
               { "flags", tl.ptr(tl.i32) } },
    block = T,
    grid = P * RB, -- its generic barriers count the splits of each row block: this grid only
  })

  k:define(function(k, p)
    local cta, t = tl.block_id(), tl.thread_id()
    local rb, split = cta % RB, cta // RB
    local base = rb * ROWS
    local ws = p.ws + split * M
    -- this thread's partial sums over split's K range: row (u * T + t) * 4 + v of the row block
    for u = 0, 3 do
      for v = 0, 3 do
        local row = base + (t + u * T) * 4 + v
        local k0 = split * KS
        local acc = tl.for_range(k0, k0 + KS, { tl.const(0, tl.i32) }, function(kk, s)
          return s + (p.a + (kk * M + row)):load() * (p.x + kk):load()
        end)
        tl.store(ws + row, acc)
      end
    end
    -- The flat load below reads rows other threads stored: the CTA barrier orders
    -- their stores before it (the verifier refuses the kernel without it).
    tl.barrier()
    local frag = tl.cutlass.fragment(tl.i32, { 4, 4 })
    tl.block_striped.load(ws + base, frag)
    tl.block_striped.reduce(p.sum + base, frag, { kind = "add" })

    local flat = tl.cutlass.fragment(tl.i32, { 16 })
    tl.block_striped.load(ws + base, flat)
    tl.block_striped.reduce(p.max + base, flat, { kind = "max" })

    tl.if_(split:gt(0), function()
      tl.if_(split:eq(P - 1), function() tl.generic_barrier.wait_eq_reset(p.flags, rb, split) end,
                              function() tl.generic_barrier.wait_eq(p.flags, rb, split) end)
      tl.block_striped.load_add(p.chain + base, frag)
    end)
    tl.block_striped.store(p.chain + base, frag)
    tl.if_(split:lt(P - 1), function() tl.generic_barrier.arrive_inc(p.flags, rb) end)
  end)
  check.compile(("splitk_block_striped (%d row blocks, %d splits of %d)"):format(RB, P, KS), k)
  kernels[key] = k
  return k
end

local i32 = check.i32

-- The shape of a run: 2 row blocks x 4 splits of 64 by default (8 CTAs), 1 x 2
-- of 8 when small; for a grid g, P = 4 (or 3, or g) splits of 4 over ceil(g / P)
-- row blocks.
local function shape(o)
  if o.grid then
    local P = o.grid >= 4 and (o.grid % 4 == 0 and 4 or 3) or o.grid
    return (o.grid + P - 1) // P, P, 4
  end
  if o.small then return 1, 2, 8 end
  return 2, 4, 64
end

-- run{seed, grid, small} -> ok, summary
local function run(o)
  local RB, P, KS = shape(o)
  local k = build(RB, P, KS)
  local M, K = RB * ROWS, P * KS
  local a <close> = tl.device.random(tl.i32, K * M, o.seed)
  local x <close> = tl.device.random(tl.i32, K, o.seed + 1)
  local ws <close> = tl.device.alloc(tl.i32, P * M)
  local sum <close> = tl.device.alloc(tl.i32, M)
  local mx <close> = tl.device.alloc(tl.i32, M)
  local chain <close> = tl.device.alloc(tl.i32, M)
  local flags <close> = tl.device.alloc(tl.i32, RB)
  sum:fill(0)
  mx:fill(-2147483648)
  chain:fill(0)
  flags:fill(0)
  k:launch { grid = P * RB, args = { a, x, ws, sum, mx, chain, flags } }
  tl.device.synchronize()
  local A, X = a:to_table(), x:to_table()
  local S, MX, C, F = sum:to_table(), mx:to_table(), chain:to_table(), flags:to_table()
  local fail, failures = check.mismatches("splitk_block_striped")
  local function expect(what, r, got, want)
    if got ~= want then fail("%s[%d] = %d, the CPU says %d", what, r, got, want) end
  end
  for r = 0, M - 1 do
    local total, best = 0, nil
    for s = 0, P - 1 do
      local part = 0
      for kk = s * KS, (s + 1) * KS - 1 do part = part + A[kk * M + r + 1] * X[kk + 1] end
      part = i32(part)
      total = i32(total + part)
      best = (best == nil or part > best) and part or best
    end
    expect("sum", r, S[r + 1], total)
    expect("max", r, MX[r + 1], best)
    expect("chain", r, C[r + 1], total)
  end
  for i = 1, RB do expect("flags", i - 1, F[i], 0) end -- the last split reset its counter
  local what = ("seed %d, y = A x with M = %d, K = %d in %d splits, grid %d"):format(o.seed, M, K, P, P * RB)
  if failures() > 0 then return false, ("%s: %d mismatches"):format(what, failures()) end
  return true, what .. ": atomic sums, atomic maxima and the turnstile chain match the CPU"
end

local example = { name = "splitk_block_striped", prepare = function() build(shape {}) end, run = run,
                  grids = function(sms) return check.grids(sms) end }
example.build = build -- build(RB, P, KS) -> the kernel (for the emulator's tests)
if ... == "--library" then return example end
-- the default shape, then one CTA per SM (a missing barrier once showed only under
-- load); small (under compute-sanitizer): the small shape alone
check.main(example, function() return check.small() and { {} } or { {}, { grid = tl.device.sm_count() } } end)
