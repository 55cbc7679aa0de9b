-- The check's budget (docs/protocol.md, "The check every compile runs"): every
-- op, step and granule of every run is charged to it, the run's last portion
-- (after its last step, fewer than 4096 ops) too, so that a kernel's work is
-- the same whether its runs end just before or just after a charge.
local tl = require "tilua"
local em = require "tilua.emulate"

-- One warp: `before` trips of arithmetic, a CTA barrier (a step), `after` trips.
local function spin(before, after)
  tl.new_module()
  local k = tl.kernel("spin", { params = { { "out", tl.ptr(tl.i32) } }, block = 32, grid = 1 })
  k:define(function(_, p)
    local function loop(n, x)
      return tl.for_range(tl.const(0, tl.i32), tl.const(n, tl.i32), 1, { x }, function(_, a) return a * 3 + 1 end)
    end
    local x = loop(before, tl.const(1, tl.i32))
    tl.barrier()
    x = loop(after, x)
    tl.if_(tl.lane_id():eq(0), function() p.out:store(x) end)
  end)
  return k
end

describe("the check's budget", function()
  it("is charged a run's last portion (the ops after its last step)", function()
    local k = spin(10, 1000)
    local w = { left = 1e9, limit = 1e9 }
    local r = em.run(k, { grid = 1, args = { { bytes = 4 } }, work = w })
    assert(r.ok, r.report)
    assert.is_true(r.run.ops > 3000) -- the loop after the barrier: under 4096 ops, no step after it
    assert.are.equal(r.run:work_done(), w.limit - w.left)
    -- the check's runs too: one schedule (one warp), the same work
    local w2 = { left = 1e9, limit = 1e9 }
    local c = em.check(k, { grid = 1, args = { { bytes = 4 } }, work = w2 })
    assert(c.ok, c.report)
    assert.are.equal(r.run:work_done(), w2.limit - w2.left)
  end)

  it("is exceeded by a kernel whose last portion runs past it, wherever its steps fall", function()
    local k = spin(10, 1000)
    local r = em.run(k, { grid = 1, args = { { bytes = 4 } } })
    local need = r.run:work_done()
    -- a check given less than that finds its budget spent for what comes next
    -- (the compile check's next configuration)
    local w = { left = need - 1, limit = need - 1 }
    em.check(k, { grid = 1, args = { { bytes = 4 } }, work = w })
    assert.is_true(w.left < 0)
    local w2 = { left = need, limit = need }
    em.check(k, { grid = 1, args = { { bytes = 4 } }, work = w2 })
    assert.are.equal(0, w2.left)
  end)
end)
