-- printf.lua: printing from a kernel with tl.printf (CUDA's device printf).
-- Two blocks of 64 threads; every thread whose index is a multiple of 16
-- prints its block, its thread, the element of x it loaded and a 64-bit
-- product, and stores what it printed so that the host can check the values
-- too. On a GPU the lines come out when the host synchronizes, in an order
-- the GPU picks; on the CPU emulator (--emulate) in thread order.
--
--   tilua examples/printf.lua [--emulate]
--
-- The script prints the lines it expects first ("expect: ..."), so the output
-- checks itself by eye; spec/printf_spec.lua (the emulator) and
-- spec/printf_gpu_spec.lua (the GPU) compare them line by line.
local tl = require "tilua"

local BLOCK, GRID = 64, 2

local k = tl.kernel("printf_demo", {
  params = { { "x", tl.ptr(tl.f32) }, { "seen", tl.ptr(tl.i64) } },
  block = BLOCK,
})
k:define(function(k, p)
  local t, b = tl.thread_id "x", tl.block_id "x"
  local i = tl.global_id "x"
  tl.if_((t % 16):eq(0), function()
    local v = (p.x + i):load()
    local big = i:cast(tl.i64) * (1 << 40) + 7
    tl.printf("block %d thread %2d: x[%3d] = %6.2f, i * 2^40 + 7 = %lld\n", b, t, i, v, big)
    local dst = p.seen + i
    dst:store(big)
  end)
end)

local ptx = k:compile()
tl.check_ptx("printf_demo", ptx)

-- what every printing thread prints: x[i] = i / 4
local expect = {}
for b = 0, GRID - 1 do
  for t = 0, BLOCK - 1, 16 do
    local i = b * BLOCK + t
    expect[#expect + 1] = ("block %d thread %2d: x[%3d] = %6.2f, i * 2^40 + 7 = %d"):format(b, t, i, i / 4, i * (1 << 40) + 7)
  end
end
for _, l in ipairs(expect) do print("expect: " .. l) end
io.stdout:flush()

tl.device.require() -- without a GPU: "SKIP: no GPU" (or run it with --emulate)
local n = GRID * BLOCK
local xs = {}
for i = 1, n do xs[i] = (i - 1) / 4 end
local x <close> = tl.device.from(tl.f32, xs)
local seen <close> = tl.device.alloc(tl.i64, n)
seen:fill(0)
k:launch { grid = GRID, args = { x, seen } }
tl.device.synchronize() -- the device's lines are printed here
io.stdout:flush()
local s, bad = seen:to_table(), 0
for i = 0, n - 1 do
  local want = i % 16 == 0 and i * (1 << 40) + 7 or 0
  if s[i + 1] ~= want then bad = bad + 1 end
end
if bad > 0 then error(("printf_demo: %d stored values differ from what the threads printed"):format(bad), 0) end
print(("printf_demo: OK, %d threads printed on %s (compare their lines with the expected ones above)"):format(#expect,
  tl.device.info().name))
