-- tools/bench/launch.lua: what a launch costs the host, against the driver's
-- own cost measured in the same process on the same device.
--
--   1. k:launch of an empty kernel with 1, 4 and 60 arguments (buffers and
--      integers) against a raw cuLaunchKernel of the same function with the
--      arguments packed once (l_launch.c: plan:raw_loop): microseconds of host
--      wall time per launch in pairs of blocks of 1 000 back-to-back launches,
--      ours and raw in alternating order; the median of each side's blocks and
--      the median of the pairs' differences, which the target is read on (the
--      host drifts by 0.3 us over a run; a pair's two blocks share it). The
--      GPU work is nil, so the queue never fills.
--   2. A CUDA graph of 100 launches of the 1-argument kernel (tl.graph),
--      replayed: wall time per kernel until the GPU is done, against the same
--      100 launches made one by one (k:launch) and then waited for.
--   3. The exported launch function (tl.export) of each kernel, from a C
--      timing host this bench writes and builds with the system's cc, against
--      a raw cuLaunchKernel from the same host, paired the same way (skipped without cc).
--
-- Each row says the target it is read against (k:launch and the exported
-- functions within 0.5 and 0.2 us of raw, a replayed graph at most 1.5 us a
-- kernel) and whether this run met it; nothing fails on it.
--
--   tilua tools/bench/launch.lua [launches]      (run from the repository root)
local tl = require "tilua"
local core = tl.core

tl.device.require() -- without a GPU: "SKIP: no GPU" and exit

local N = math.tointeger(tonumber(arg and arg[1] or "") or 20000)
local ROUNDS = 5
local BLOCK = math.min(1000, N)            -- launches a block (a pair is a block of each)
local PAIRS = math.max(5, ROUNDS * N // BLOCK) -- as many launches in all as ROUNDS rounds of N
local function median(t)
  table.sort(t)
  return t[(#t + 1) // 2]
end

local info = tl.device.info()
print(("launch bench: %s; k:launch and the exported functions: %d pairs of blocks of %d launches; the graph: %d rounds")
  :format(info.name, PAIRS, BLOCK, ROUNDS))

-- An empty kernel with n parameters: buffers at odd positions, i32 at even ones
-- (the 4-argument one: two buffers, an i32 and an f32).
local bufs = {}
for i = 1, 2 do bufs[i] = tl.device.alloc(tl.f32, 32) end
local function kernel(n)
  tl.new_module()
  local params, args = {}, {}
  for i = 1, n do
    if i % 2 == 1 then params[i], args[i] = { "p" .. i, tl.ptr(tl.f32) }, bufs[1]
    else params[i], args[i] = { "n" .. i, tl.i32 }, i end
  end
  if n == 4 then
    params = { { "a", tl.ptr(tl.f32) }, { "b", tl.ptr(tl.f32) }, { "n", tl.i32 }, { "x", tl.f32 } }
    args = { bufs[1], bufs[2], 7, 0.5 }
  end
  local k = tl.kernel("empty" .. n, { params = params, block = 32 })
  k:define(function() end)
  return k, args
end

-- Each row against its peer, and the target the row is read against (the
-- launch-cost issue's, on an H200): target(ours, peer) -> met, what it says.
local rows = {}
-- difference: the pairs' median difference where the row has pairs (else ours - peer).
local function row(what, ours, peer, peer_name, target, difference)
  difference = difference or ours - peer
  local met, says = target(difference, ours)
  rows[#rows + 1] = { what, ours, peer, peer_name, difference, says, met and "met" or "NOT met" }
  print(("%-40s %8.3f us   %-26s %8.3f us   %+.3f us   ratio %.2f   %s: %s"):format(what, ours, peer_name, peer,
    difference, ours / peer, says, met and "met" or "NOT met"))
end
local function within(us) return function(difference) return difference <= us, ("<= peer + %.1f us"):format(us) end end
local function at_most(us) return function(_, ours) return ours <= us, ("<= %.1f us"):format(us) end end

-- {=== 1. k:launch against raw cuLaunchKernel
local cases = {}
for _, n in ipairs { 1, 4, 60 } do
  local k, args = kernel(n)
  local cfg = { grid = 1, args = args }
  k:launch(cfg) -- compile and load (the Lua path)
  k:launch(cfg) -- the plan (the fast path from now on)
  tl.device.synchronize()
  local plan = assert(k._plan, "no launch plan")
  -- pairs of blocks, ours and raw back to back (in alternating order), so
  -- that the host's drift over the run (the raw peer moves by 0.3 us within
  -- a run) falls on both sides of each difference; the row reads the median
  -- of the blocks of each and the median of the pairs' differences
  local ours, raw, diff = {}, {}, {}
  local function ours_block()
    local t0 = core.now()
    for _ = 1, BLOCK do k:launch(cfg) end
    local t = (core.now() - t0) / BLOCK * 1e6
    tl.device.synchronize()
    return t
  end
  local function raw_block() return plan:raw_loop(BLOCK, 1, args) / BLOCK * 1e6 end
  for r = 1, PAIRS do
    if r % 2 == 1 then ours[r] = ours_block(); raw[r] = raw_block()
    else raw[r] = raw_block(); ours[r] = ours_block() end
    diff[r] = ours[r] - raw[r]
  end
  row(("k:launch, %d argument%s"):format(n, n > 1 and "s" or ""), median(ours), median(raw), "raw cuLaunchKernel",
    within(0.5), median(diff))
  cases[#cases + 1] = { n = n, k = k, args = args }
end
-- }===

-- {=== 2. a graph of 100 small kernels against 100 launches
do
  local k, args = cases[1].k, cases[1].args
  local cfg = { grid = 1, args = args }
  local g <close> = tl.graph(function() for _ = 1, 100 do k:launch(cfg) end end)
  g:launch()
  tl.device.synchronize()
  local R = math.max(10, N // 100)
  local replay, single = {}, {}
  for r = 1, ROUNDS do
    local t0 = core.now()
    for _ = 1, R do g:launch() end
    tl.device.synchronize()
    replay[r] = (core.now() - t0) / (R * 100) * 1e6
    t0 = core.now()
    for _ = 1, R * 100 do k:launch(cfg) end
    tl.device.synchronize()
    single[r] = (core.now() - t0) / (R * 100) * 1e6
  end
  row("graph of 100 kernels, replayed, per kernel", median(replay), median(single), "100 k:launch, per kernel",
    at_most(1.5))
end
-- }===

-- {=== 3. the exported launch functions, from a C host
local function c_host_source(list)
  local h = { "/* written by tools/bench/launch.lua: exported launches against raw cuLaunchKernel */",
              "#define _POSIX_C_SOURCE 200809L", "#include <stdio.h>", "#include <time.h>" }
  for _, c in ipairs(list) do h[#h + 1] = ('#include "empty%d.h"'):format(c.n) end
  h[#h + 1] = [[
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
#include <stdlib.h>
#define CHECK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { fprintf(stderr, "%s: %d %s\n", #x, (int)r_, tilua_last_error()); return 1; } } while (0)
int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 20000;
  CHECK(tilua_use_device(0));
  const tilua_driver *d = tilua_driver_get();
  CUdeviceptr b[2];
  CHECK(d->cuMemAlloc(&b[0], 128));
  CHECK(d->cuMemAlloc(&b[1], 128));
  tilua_dim3 one = {1, 1, 1};
  (void)one;]]
  for _, c in ipairs(list) do
    local decl, call, ptrs = {}, {}, {}
    for i, v in ipairs(c.args) do
      if type(v) == "table" then
        decl[#decl + 1] = ("  CUdeviceptr a%d_%d = b[%d];"):format(c.n, i, v == bufs[2] and 1 or 0)
      elseif math.type(v) == "integer" then
        decl[#decl + 1] = ("  int32_t a%d_%d = %d;"):format(c.n, i, v)
      else
        decl[#decl + 1] = ("  float a%d_%d = %.1ff;"):format(c.n, i, v)
      end
      call[#call + 1] = ("a%d_%d"):format(c.n, i)
      ptrs[#ptrs + 1] = ("&a%d_%d"):format(c.n, i)
    end
    h[#h + 1] = ("  {\n%s\n  void *p[] = {%s};\n  CUfunction f;\n  CHECK(tilua_kernel_load(&empty%d_kernel, &f));"):format(
      table.concat(decl, "\n"), table.concat(ptrs, ", "), c.n)
    h[#h + 1] = ("  CHECK(empty%d_launch(0, one, %s));\n  CHECK(d->cuCtxSynchronize());"):format(c.n, table.concat(call, ", "))
    h[#h + 1] = ("  double ex[%d], raw[%d], diff[%d];\n  for (int r = 0; r < %d; r++) {"):format(PAIRS, PAIRS, PAIRS, PAIRS)
    h[#h + 1] = "   for (int side = 0; side < 2; side++) {\n    double t0 = now();\n    if ((side == 0) == (r % 2 == 0)) {"
    h[#h + 1] = ("    for (long i = 0; i < n; i++) CHECK(empty%d_launch(0, one, %s));"):format(c.n, table.concat(call, ", "))
    h[#h + 1] = "    ex[r] = (now() - t0) / (double)n * 1e6;\n    } else {"
    h[#h + 1] = "    for (long i = 0; i < n; i++) CHECK(d->cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, 0, p, NULL));"
    h[#h + 1] = "    raw[r] = (now() - t0) / (double)n * 1e6;\n    }\n    CHECK(d->cuCtxSynchronize());\n   }"
    h[#h + 1] = "    diff[r] = ex[r] - raw[r];\n  }"
    h[#h + 1] = ("  qsort(ex, %d, sizeof ex[0], cmp);\n  qsort(raw, %d, sizeof raw[0], cmp);\n  qsort(diff, %d, sizeof diff[0], cmp);")
      :format(PAIRS, PAIRS, PAIRS)
    h[#h + 1] = ('  printf("exported %d %%.4f %%.4f %%.4f\\n", ex[%d], raw[%d], diff[%d]);\n  }'):format(c.n, PAIRS // 2,
      PAIRS // 2, PAIRS // 2)
  end
  h[#h + 1] = "  return 0;\n}"
  return table.concat(h, "\n") .. "\n"
end

do
  local dir = os.tmpname()
  os.remove(dir)
  local list = {}
  for _, c in ipairs(cases) do list[#list + 1] = c end
  local kernels = {}
  for _, c in ipairs(list) do kernels[#kernels + 1] = c.k end
  tl.export(dir, kernels, { cubin = false })
  local f = assert(io.open(dir .. "/bench_host.c", "w"))
  f:write(c_host_source(list))
  f:close()
  local exe = dir .. "/bench_host"
  local cc = os.getenv "CC" or "cc"
  local ok = os.execute(("%s -std=c11 -O2 -I'%s' '%s'/*.c -ldl -o '%s' 2>'%s/cc.log'"):format(cc, dir, dir, exe, dir))
  if not ok then
    print(("exported launches: not measured (%s could not build the timing host: %s/cc.log)"):format(cc, dir))
  else
    local p = assert(io.popen(("'%s' %d"):format(exe, BLOCK)))
    for line in p:lines() do
      local n, ex, raw, diff = line:match "^exported (%d+) ([%d.]+) ([%d.]+) ([%d.e+-]+)$"
      if n then
        row(("exported empty%d_launch, %d argument%s"):format(n, n, n ~= "1" and "s" or ""), tonumber(ex), tonumber(raw),
          "raw cuLaunchKernel (C)", within(0.2), tonumber(diff))
      else
        print(line)
      end
    end
    p:close()
  end
end
-- }===

print("\n| launch | us | peer | us | difference (us) | ratio | target | |")
print("|---|---|---|---|---|---|---|---|")
for _, r in ipairs(rows) do
  print(("| %s | %.3f | %s | %.3f | %+.3f | %.2f | %s | %s |"):format(r[1], r[2], r[4], r[3], r[5], r[2] / r[3],
    r[6], r[7]))
end
