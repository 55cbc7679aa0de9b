-- tools/bench/launch.lua: the host cost of a launch. 20 000 back-to-back
-- launches of an empty kernel (one argument, and four: two buffers, an i32 and
-- an f32) through k:launch, against a raw cuLaunchKernel of the same function
-- with the arguments packed once, in the same process on the same device
-- (l_launch.c: plan:raw_loop). Microseconds of host wall time per launch, the
-- median of 5 rounds; the GPU work is nil, so the queue never fills.
--
--   tilua tools/bench/launch.lua [launches]      (run from the repository root)
local tl = require "tilua"
local core = tl.core

tl.device.require() -- without a GPU: "SKIP: no GPU" and exit

local N = math.tointeger(tonumber(arg and arg[1] or "") or 20000)
local function median(t)
  table.sort(t)
  return t[(#t + 1) // 2]
end

local info = tl.device.info()
print(("launch bench: %s, %d launches per round"):format(info.name, N))

local function kernel(name, params)
  tl.new_module()
  local k = tl.kernel(name, { params = params, block = 32 })
  k:define(function() end)
  return k
end

local a <close> = tl.device.alloc(tl.f32, 32)
local b <close> = tl.device.alloc(tl.f32, 32)
local cases = {
  { "1 argument", kernel("empty1", { { "a", tl.ptr(tl.f32) } }), { a } },
  { "4 arguments", kernel("empty4", { { "a", tl.ptr(tl.f32) }, { "b", tl.ptr(tl.f32) }, { "n", tl.i32 }, { "x", tl.f32 } }),
    { a, b, 7, 0.5 } },
}

local rows = {}
for _, c in ipairs(cases) do
  local name, k, args = c[1], c[2], c[3]
  local cfg = { grid = 1, args = args }
  k:launch(cfg) -- compile and load (the Lua path)
  k:launch(cfg) -- the plan
  tl.device.synchronize()
  local plan = assert(k._plan, "no launch plan")
  local ours, raw = {}, {}
  for r = 1, 5 do
    local t0 = core.now()
    for _ = 1, N do k:launch(cfg) end
    ours[r] = (core.now() - t0) / N * 1e6
    tl.device.synchronize()
    raw[r] = plan:raw_loop(N, 1, args) / N * 1e6
  end
  local o, w = median(ours), median(raw)
  rows[#rows + 1] = { name, o, w, o / w }
  print(("%-12s k:launch %.2f us   raw cuLaunchKernel %.2f us   ratio %.2f"):format(name, o, w, o / w))
end

print("\n| kernel | k:launch (us) | raw cuLaunchKernel (us) | ratio |")
print("|---|---|---|---|")
for _, r in ipairs(rows) do print(("| %s | %.2f | %.2f | %.2f |"):format(r[1], r[2], r[3], r[4])) end
