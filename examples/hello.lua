-- hello.lua: build a kernel, verify it, run a pipeline and print every stage.
--
--   tilua examples/hello.lua
--
-- The kernel computes a polynomial with a loop and a branch and stores it;
-- canonicalize folds the constant arithmetic and cse merges the repeated
-- expressions (the store keeps the kernel alive through both). Thread 0
-- stores: 128 threads storing to one address would race (verify-protocol,
-- which the tests run after every pass, says so).
local tl = require "tilua"

local k = tl.kernel("poly", {
  params = { { "x", tl.f32 }, { "n", tl.i32 }, { "out", tl.ptr(tl.f32) } },
  block = 128,
})

k:define(function(k, p)
  local two = tl.const(1, tl.i32) + 1 -- folds to 2
  local acc = tl.for_range(0, p.n, 1, { tl.const(0.0, tl.f32) }, function(i, acc)
    local term = p.x * p.x + p.x * p.x -- the same product twice: cse keeps one
    return acc + term
  end)
  local r = tl.if_(p.n:gt(two), function() return acc * 0.5 end, function() return acc end)
  tl.if_(tl.thread_id():eq(0), function() p.out:store(r) end)
end)

tl.compile(k, "canonicalize,cse", { keep_stages = true })
for _, stage in ipairs(tl.last_stages) do
  print(("// ===== stage %d: %s%s"):format(stage.index, stage.name,
    stage.index > 0 and (" (%.3f ms)"):format(stage.ms) or ""))
  io.write(stage.ir)
end
