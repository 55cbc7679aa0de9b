-- Loops whose bounds differ between the lanes of a warp (docs/protocol.md,
-- "The model"): a loop strided by the thread id runs each lane's own trips,
-- the body under the mask of the lanes that still iterate, so the check sees
-- what such a loop does (a race, a barrier some warps pass more often than
-- others) instead of refusing it as not modelled.
local tl = require "tilua"
local em = require "tilua.emulate"

local N, T = 200, 128 -- 200 elements over 128 threads: threads 0 .. 71 take two, the others one

-- Every thread writes buf[j] for j = t, t + 128, ... < N (a lane-varying lower
-- bound), then out[j] = buf[N - 1 - j] for the same j: an element another
-- thread wrote. bug: "no_barrier" (no barrier between the two loops: a race),
-- "barrier_inside" (a CTA barrier inside the strided loop: warps 0 .. 2 reach
-- it twice, warp 3 once), nil (the barrier between the loops: correct).
local function strided(name, bug)
  tl.new_module()
  local k = tl.kernel(name, { params = { { "out", tl.ptr(tl.i32) } }, block = T, grid = 1 })
  k:define(function(k, p)
    local buf = k:shared(tl.i32, N)
    local t = tl.thread_id()
    tl.for_range(t, tl.const(N, tl.i32), T, {}, function(j)
      (buf + j):store(j * 3)
      if bug == "barrier_inside" then tl.barrier() end
    end)
    if bug ~= "no_barrier" then tl.barrier() end
    tl.for_range(t, tl.const(N, tl.i32), T, {}, function(j)
      (p.out + j):store((buf + (tl.const(N - 1, tl.i32) - j)):load())
    end)
  end)
  return k
end

local ARGS = { args = { { bytes = 4 * N } } }

describe("a loop with lane-varying bounds", function()
  it("is checked: its correct form is accepted", function()
    local r = tl.verify_protocol(strided("strided_ok"), ARGS)
    assert(r.ok, r.report)
  end)

  it("is checked: a missing barrier after it is a race", function()
    local r = tl.verify_protocol(strided("strided_race", "no_barrier"), ARGS)
    assert.is_false(r.ok)
    assert.are.equal("unfilled", r.violation.kind) -- a read of another thread's write, unordered
    assert.matches("reads shared bytes", r.violation.message, 1, true)
  end)

  it("is checked: a CTA barrier inside it, which some warps reach more often than others, deadlocks", function()
    local r = tl.verify_protocol(strided("strided_bar", "barrier_inside"), ARGS)
    assert.is_false(r.ok)
    assert.are.equal("deadlock", r.violation.kind)
    assert.matches("bar.sync 0", r.report, 1, true)
  end)

  it("computes each lane's trips and carried values (a lane-varying lower and upper bound)", function()
    -- out[t] = sum of j for j = t, t + 32, ... < 32 + t % 5 * 40 (each lane its own bounds)
    tl.new_module()
    local k = tl.kernel("strided_sum", { params = { { "out", tl.ptr(tl.i32) } }, block = 64, grid = 1 })
    k:define(function(_, p)
      local t = tl.thread_id()
      local ub = tl.const(32, tl.i32) + t % 5 * 40
      local s = tl.for_range(t, ub, 32, { tl.const(0, tl.i32) }, function(j, acc) return acc + j end)
      ;(p.out + t):store(s)
    end)
    local r = em.run(k, { grid = 1, args = { { bytes = 4 * 64 } } })
    assert(r.ok, r.report)
    local got = r.read(1)
    for t = 0, 63 do
      local want = 0
      for j = t, 32 + t % 5 * 40 - 1, 32 do want = want + j end
      assert.are.equal(want, (string.unpack("<i4", got, 4 * t + 1)), "thread " .. t)
    end
  end)

  it("lets the check every compile runs check the stdlib attention's reference kernel", function()
    local cc = require "tilua.emulate.compile_check"
    for _, causal in ipairs { false, true } do
      local a = tl.attention.build { b = 1, h = 2, hkv = 1, sq = 100, skv = 200, d = 64, causal = causal }
      pcall(a.reference, a, {}) -- builds the reference kernel (the launch needs a GPU)
      local notes = {}
      local res = cc.run(a._ref.module, { note = function(l) notes[#notes + 1] = l end })
      for _, r in ipairs(res) do
        if r.name:find "_reference$" then
          assert(#r.checked > 0, notes[1])
          assert.matches("the derived inputs on one cluster", r.checked[1], 1, true)
        end
      end
      for _, l in ipairs(notes) do assert.is_nil(l:find("checked: nothing", 1, true), l) end
    end
  end)
end)
