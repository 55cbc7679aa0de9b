-- mods_probes.lua: the MODS probes (cutlass.tile_scheduler.mods_*) in a persistent kernel of
-- 2-CTA clusters.
--
-- Every CTA reads its SM id (mods_report_smid), opens the MODS window
-- (mods_report_mainloop_start: a cluster-barrier arrive and a globaltimer
-- timestamp), walks its share of the work items -- each item is the sum of 128
-- random integers, accumulated with atomics -- with a nanosleep throttle per
-- item (profile 1) and one cooperative cluster throttle (profile 2), and closes
-- the window (mods_report_mainloop_end: bulk-group drain, cluster-barrier wait,
-- the window's duration). Its first thread records SM id, start time and
-- duration. The host checks that every CTA reported, SM ids are in
-- [0, SM count), the windows opened and closed (duration >= 0) within a
-- plausible time, the two CTAs of each cluster overlapped (the cluster barrier
-- holds a window open until both arrived), and the sums match the CPU.
--
-- The scheduler operand of the probes is a stand-in handle (the work loop here
-- is written by hand): builtin.unrealized_conversion_cast, which disappears once
-- the probes are lowered.
--
--   tilua examples/mods_probes.lua [--emit=ir|ptx] [--stage=NAME]
--   loadfile("examples/mods_probes.lua")("--library") -> the example (tilua.gpu.check)
local tl = require "tilua"
local check = require "tilua.gpu.check"

local ITEM = 128 -- integers per work item (one per thread)

local k = tl.kernel("mods_probes", {
  params = { { "x", tl.ptr(tl.i32) }, { "sums", tl.ptr(tl.i32) }, { "smid", tl.ptr(tl.i32) },
             { "start", tl.ptr(tl.i64) }, { "duration", tl.ptr(tl.i64) }, { "items", tl.i32 } },
  block = ITEM,
  cluster = { 2, 1, 1 },
})

k:define(function(k, p)
  local sched = tl.op1("builtin.unrealized_conversion_cast", {},
                       tl.type("cutlass.tile_scheduler", { "static_persistent" }))
  local cta, grid, t = tl.block_id(), tl.grid_dim(), tl.thread_id()
  k:async_exec("mainloop", { first_warp = 0, warps = ITEM // 32 }, function()
    local sm = tl.mods.smid()
    local d, t0 = tl.mods.mainloop(sched, 0x3, { timestamp = true, duration = true }, function(t0)
      tl.for_range(cta, p.items, grid, {}, function(item) -- {}: no carried values
        local v = (p.x + (item * ITEM + t)):load()
        tl.atomic_add(p.sums + item, v)
        tl.mods.throttle(1)
      end)
      tl.mods.throttle(2) -- every thread of the cluster passes here once
      return t0
    end)
    tl.if_(t:eq(0), function()
      tl.store(p.smid + cta, sm)
      tl.store(p.start + cta, t0)
      tl.store(p.duration + cta, d)
    end)
  end)
end)

local function prepare() check.compile("mods_probes", k) end

local i32 = check.i32

local verify

-- run{seed, grid, small} -> ok, summary: grid CTAs (whole clusters; default one
-- per SM, 2 when small) walk 7 * grid + 5 items.
local function run(o)
  local sms = tl.device.sm_count()
  local grid = o.grid or (o.small and 2 or sms // 2 * 2)
  local items = 7 * grid + 5 -- uneven shares: some CTAs walk one more item
  local x <close> = tl.device.random(tl.i32, items * ITEM, o.seed)
  local sums <close> = tl.device.alloc(tl.i32, items)
  local smid <close> = tl.device.alloc(tl.i32, grid)
  local start <close> = tl.device.alloc(tl.i64, grid)
  local duration <close> = tl.device.alloc(tl.i64, grid)
  sums:fill(0)
  smid:fill(-1)
  start:fill(-1)
  duration:fill(-1)
  k:launch { grid = grid, args = { x, sums, smid, start, duration, items } }
  tl.device.synchronize()
  return verify(o.seed, grid, items, sms, x:to_table(), sums:to_table(), smid:to_table(), start:to_table(),
                duration:to_table())
end

-- verify(seed, grid, items, sms, X, S, SM, T0, D) -> ok, summary: the host's check of
-- the results (1-based tables of the inputs and of the four outputs) against the CPU
-- reference; also used by the emulator's tests (spec/protocol_sched_spec.lua).
function verify(seed, grid, items, sms, X, S, SM, T0, D)
  local fail, failures = check.mismatches("mods_probes", 8)
  for it = 0, items - 1 do
    local s = 0
    for j = 0, ITEM - 1 do s = s + X[it * ITEM + j + 1] end
    if S[it + 1] ~= i32(s) then fail("item %d sums to %d, the CPU says %d", it, S[it + 1], i32(s)) end
  end
  local lo, hi, dmax, used = math.maxinteger, math.mininteger, 0, {}
  for c = 1, grid do
    if SM[c] < 0 or SM[c] >= sms then fail("CTA %d reported SM id %d, not in [0, %d)", c - 1, SM[c], sms) end
    if T0[c] <= 0 then fail("CTA %d never opened its window (start %d)", c - 1, T0[c]) end
    if D[c] < 0 or D[c] > 10 * 1000000000 then fail("CTA %d: window of %d ns", c - 1, D[c]) end
    lo, hi = math.min(lo, T0[c]), math.max(hi, T0[c])
    dmax = math.max(dmax, D[c])
    used[SM[c]] = true
  end
  if hi - lo > 10 * 1000000000 then fail("window starts spread over %d ns", hi - lo) end
  for c = 1, grid, 2 do -- the cluster barrier: neither CTA's window closes before the other's opened
    local e1, e2 = T0[c] + D[c], T0[c + 1] + D[c + 1]
    if e1 < T0[c + 1] or e2 < T0[c] then
      fail("cluster %d: windows [%d, %d] and [%d, %d] do not overlap", (c - 1) // 2, T0[c], e1, T0[c + 1], e2)
    end
  end
  local nsm = 0
  for _ in pairs(used) do nsm = nsm + 1 end
  local what = ("seed %d, %d CTAs in clusters of 2 on %d SMs, %d items"):format(seed, grid, sms, items)
  if failures() > 0 then return false, ("%s: %d problems"):format(what, failures()) end
  return true, ("%s: %d distinct SMs reported; windows opened within %d ns of each other, the longest lasted %d ns; "
    .. "the sums match the CPU"):format(what, nsm, hi - lo, dmax)
end

local example = { name = "mods_probes", prepare = prepare, run = run,
                  grids = function(sms) return check.grids(sms, 2) end }
example.kernel = k -- the kernel (for the emulator's tests)
example.verify = verify -- the host check and CPU reference (for the emulator's tests)
if ... == "--library" then return example end
check.main(example)
