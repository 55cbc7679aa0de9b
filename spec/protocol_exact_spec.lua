-- What the emulator and the checker must not get wrong (docs/protocol.md,
-- "Memory" and "The model"): accesses race only where their bytes overlap,
-- per-lane values from memory may decide branches, and the ops below are
-- modelled as the GPU runs them.
local tl = require "tilua"

-- A kernel of `warps` warps whose body is f(k, p, lane, warp).
local function kernel(name, warps, params, f)
  tl.new_module()
  local k = tl.kernel(name, { params = params, block = 32 * warps })
  k:define(function(k, p) f(k, p, tl.lane_id(), tl.warp_id()) end)
  return k
end

describe("the race check", function()
  -- warps 0 and 1 each write one element of width `t` next to each other (in
  -- one 16-byte span), then a CTA barrier, then thread 0 reads both
  local function adjacent(t, same)
    return kernel("adjacent", 2, { { "out", tl.ptr(t) } }, function(k, p, lane, warp)
      local buf = k:shared(t, 16, { align = 16 })
      tl.if_(lane:eq(0), function()
        local at = same and buf or buf + warp
        at:store(tl.cast(warp + 1, t))
      end)
      tl.barrier()
      tl.if_(tl.thread_id():eq(0), function()
        p.out:store(buf:load())
        ;(p.out + 1):store((buf + 1):load())
      end)
    end)
  end

  for _, t in ipairs { tl.i32, tl.i16, tl.u8 } do
    it(("takes two warps writing adjacent %s slots for no race, and one slot for one"):format(tostring(t)), function()
      local good = tl.verify_protocol(adjacent(t), { args = { { bytes = 16 } } })
      assert(good.ok, good.report)
      local bad = tl.verify_protocol(adjacent(t, true), { args = { { bytes = 16 } } })
      assert.is_false(bad.ok)
      assert.are.equal("overwrite", bad.violation.kind)
    end)
  end

  it("does so in global memory too", function()
    local k = kernel("gadjacent", 2, { { "out", tl.ptr(tl.u8) } }, function(_, p, lane, warp)
      tl.if_(lane:eq(0), function() (p.out + warp):store(tl.cast(warp + 1, tl.u8)) end)
    end)
    local r = tl.verify_protocol(k, { args = { { bytes = 16 } } })
    assert(r.ok, r.report)
    local e = tl.emulate(k, { args = { { bytes = 16 } } })
    assert.are.equal("\1\2", e.read(1, 2))
  end)
end)
