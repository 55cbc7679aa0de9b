-- The checker's protocol-only runs of tile programs (docs/protocol.md, "Tile
-- programs"; lua/tilua/emulate/models/tileas_slice.lua): the elements of the
-- tiles that reach a scalar (a branch, an index, a loop bound) are computed
-- exactly, so a bug that only the data's path shows is found; the rest (dots,
-- exponentials, reductions whose results are only stored) is not computed at
-- all: the runs count the tile elements they computed, loaded or stored.
local tl = require "tilua"
local P = require "tilua.emulate.protocol"
local cc = require "tilua.emulate.compile_check"

-- a tile program of two f32 tensors whose body(p, m, x) gets the program
-- index m along x and its 4 x 8 tile x of X
local function kernel(name, body)
  tl.new_module()
  local k = tl.tile_kernel(name, { params = { X = tl.tensor(tl.f32, 2), Y = tl.tensor(tl.f32, 2) } })
  k:define(function(_, p)
    local m = tl.program_id("x")
    body(p, m, tl.load(p.X, { m, 0 }, { 4, 8 }))
  end)
  return k
end
local function int_of(t) return tl.cast(tl.extract(t, { 0, 0 }), tl.i32) end

-- Each kernel decides from its tile's elements (the derived inputs are zeros:
-- x + 1 is 1) where it stores; with `bug`, two programs store one tile.
local cases = {
  { "a branch on an element", function(bug) return function(p, m, x)
    tl.if_(tl.extract(x + 1.0, { 0, 0 }):gt(0.5), function() tl.store(p.Y, { bug and 0 or m, 0 }, x) end,
           function() tl.store(p.Y, { m, 0 }, x) end)
  end end, 2 * (32 + 32 + 32) }, -- per program: the load, the splat of 1.0, the add
  { "an index made of an element", function(bug) return function(p, m, x)
    local c = int_of(x + 1.0)
    tl.store(p.Y, { m * (bug and c - 1 or c), 0 }, x)
  end end, 2 * (32 + 32 + 32) },
  { "a loop bound made of an element", function(bug) return function(p, m, x)
    tl.for_range(0, int_of(x + 2.0), function(i) tl.store(p.Y, { (bug and 1 or 2) * m + i, 0 }, x) end)
  end end, 2 * (32 + 32 + 32) },
  { "a branch on an element of a loop-carried tile", function(bug) return function(p, m, x)
    local t = tl.for_range(0, 2, { x }, function(_, t) return t + 1.0 end)
    tl.if_(tl.extract(t, { 0, 0 }):gt(1.5), function() tl.store(p.Y, { bug and 0 or m, 0 }, x) end,
           function() tl.store(p.Y, { m, 0 }, x) end)
  end end, 2 * (32 + 2 * (32 + 32)) },
  { "a branch on an element stored and loaded back", function(bug) return function(p, m, x)
    tl.store(p.X, { m, 0 }, x + 1.0) -- (program m's own tile)
    local y = tl.load(p.X, { m, 0 }, { 4, 8 })
    tl.if_(tl.extract(y, { 0, 0 }):gt(0.5), function() tl.store(p.Y, { bug and 0 or m, 0 }, y) end,
           function() tl.store(p.Y, { m, 0 }, y) end)
  end end, 2 * (32 + 32 + 32 + 32 + 32) }, -- both loads, the splat, the add, the store into X
}

describe("the checker's protocol-only runs of tile programs", function()
  for _, c in ipairs(cases) do
    it("computes the tiles that reach " .. c[1] .. ", and finds the bug on that path", function()
      local r = P.check(kernel("twin", c[2](false)).op, {})
      assert(r.ok, r.report)
      assert.equal(c[3], r.element_ops) -- that slice, nothing else (the stores into Y move no element)
      r = P.check(kernel("bug", c[2](true)).op, {})
      assert.is_false(r.ok)
      assert.equal("overwrite", r.violation.kind, r.report)
      assert.matches("program warp 0 %(CTA 1%) at .* writes global bytes .* that program warp 0 %(CTA 0%) wrote",
                     r.violation.message)
      -- so does the check every compile runs
      local ok, err = pcall(cc.run, kernel("bug", c[2](true)).module, {})
      assert.is_false(ok)
      assert.matches("protocol violation in kernel 'bug'", err, 1, true)
    end)
  end

  it("says where a tile of the slice lacks its elements (an op the slice would not follow) instead of reading 0", function()
    local k = kernel("hole", cases[1][2](false))
    local em = require "tilua.emulate"
    local dk = em.decode(k.op)
    local function unmark(blk) -- the load leaves the slice, as an op the slice did not follow would
      for _, rec in ipairs(blk.ops) do
        if rec.name == "tileas.tiled_load" then rec.exact = nil end
        for _, region in ipairs(rec.regions or {}) do for _, b in ipairs(region) do unmark(b) end end
      end
    end
    unmark(dk.body)
    local r = P.check(k.op, {}) -- (the problem it derives)
    local c = em.check(dk, { grid = r.launch.grid, args = r.args })
    assert.is_false(c.ok)
    assert.equal("model", c.violation.kind)
    assert.matches("tileas.extract at .*: the elements of its tile were not computed", c.violation.message)
  end)

  it("checks a tile's rows in one call as it checks them row by row: the same race, the same bytes, at a ragged edge", function()
    tl.new_module()
    local k = tl.tile_kernel("ragged_race", { params = { X = tl.tensor(tl.bf16, 2), Y = tl.tensor(tl.bf16, 2) } })
    k:define(function(_, p)
      local x = tl.load(p.X, { tl.program_id("x"), tl.program_id("y") }, { 2, 4 })
      tl.store(p.Y, { tl.program_id("x"), 1 }, x) -- every program along y stores column tile 1 (of 5 columns: 1 in bounds)
    end)
    local args = { X = { bytes = 2 * 3 * 5, shape = { 3, 5 } }, Y = { bytes = 2 * 3 * 5, shape = { 3, 5 } } }
    local rows = tl.verify_protocol(k, { grid = { 2, 2 }, args = args }) -- protocol-only: a run of rows a call
    local each = tl.verify_protocol(k, { grid = { 2, 2 }, args = args, values = true }) -- values: row by row
    assert.is_false(rows.ok)
    assert.equal("overwrite", rows.violation.kind)
    assert.matches("writes global bytes %[0x%x+, 0x%x+%) that program warp 0 %(CTA 0%) wrote", rows.violation.message)
    assert.equal(each.violation.message, rows.violation.message)
  end)

  it("computes no element of the tiles that only reach stores of data (dots, exp2, reductions, casts)", function()
    local function softmax_dot()
      tl.new_module()
      local k = tl.tile_kernel("softmax_dot", { params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2),
                                                        O = tl.tensor(tl.f32, 2) } })
      k:define(function(_, p)
        local m = tl.program_id("x")
        local s = tl.dot(tl.load(p.A, { m, 0 }, { 16, 16 }), tl.load(p.B, { 0, 0 }, { 16, 16 }), tl.zeros({ 16, 16 }))
        local e = tl.exp2(s - tl.expand_dim(tl.reduce(s, 1, "max"), 1))
        tl.store(p.O, { m, 0 }, e / tl.expand_dim(tl.reduce(e, 1, "add"), 1))
      end)
      return k
    end
    local k = softmax_dot()
    local r = P.check(k.op, {})
    assert(r.ok, r.report)
    assert.equal(0, r.element_ops)
    -- the same program computes them all where values are asked for (tl.emulate)
    local args = { A = { bytes = 2 * 32 * 16, shape = { 32, 16 } }, B = { bytes = 2 * 16 * 16, shape = { 16, 16 } },
                   O = { bytes = 4 * 32 * 16, shape = { 32, 16 } } }
    local e = tl.emulate(k, { grid = { 2, 1 }, args = args })
    assert(e.ok, e.report)
    assert.is_true(e.element_ops > 2 * 16 * 16 * 16) -- the dots' products alone
    -- the attention tile program: every configuration of its check, no element
    local ex = assert(loadfile "examples/attention.lua")("--library")
    r = P.check(ex.build { d = 64 }.op, {})
    assert(r.ok, r.report)
    assert.equal(0, r.element_ops)
  end)
end)
