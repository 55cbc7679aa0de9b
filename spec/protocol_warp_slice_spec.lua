-- What a protocol-only run (the checker's) computes in a kernel below the tile
-- level (docs/protocol.md, "Protocol-only runs"; lua/tilua/emulate/data_slice.lua):
-- the pure ops whose results only become data (a store's value, a wgmma's
-- accumulator) are not computed; what reaches a branch, a bound, an address
-- or a synchronizing op is, and so is every store's data where a value read
-- back from memory is. The verdicts are those of computing everything.
local tl = require "tilua"
local em = require "tilua.emulate"
local P = require "tilua.emulate.protocol"
local PH = dofile "spec/protocol_helper.lua"

-- The names of the decoded kernel's records marked data_only, with their lines.
local function data_only(k)
  local dk = em.decode(k)
  local out = {}
  local function walk(blk)
    for _, rec in ipairs(blk.ops) do
      if rec.data_only then out[#out + 1] = rec.name end
      for _, region in ipairs(rec.regions or {}) do
        for _, b in ipairs(region) do walk(b) end
      end
    end
  end
  walk(dk.body)
  return out, dk
end

local function has(list, name)
  for _, n in ipairs(list) do if n == name then return true end end
  return false
end

describe("a protocol-only run of a warp-level kernel", function()
  it("computes no value that only reaches a store's data, and every value a branch sees", function()
    tl.new_module()
    local k = tl.kernel("slice_branch", { params = { { "out", tl.ptr(tl.f32) } }, block = 32, grid = 1 })
    k:define(function(_, p)
      local t = tl.thread_id()
      local x = (t * 2 + 1):cast(tl.f32) -- data only: it is stored
      local c = t * 5                   -- decides the branch
      tl.if_(c:gt(40), function() (p.out + t):store(x * x) end)
    end)
    local marked = data_only(k)
    assert.is_true(has(marked, "arith.mulf"))
    assert.is_true(has(marked, "arith.sitofp"))
    assert.is_false(has(marked, "arith.cmpi"))
  end)

  it("computes the data of every store where a value read back from memory is in the slice", function()
    local function kernel(branch_on_load)
      tl.new_module()
      local k = tl.kernel("slice_memory", { params = { { "out", tl.ptr(tl.i32) } }, block = 32, grid = 1 })
      k:define(function(k, p)
        local buf = k:shared(tl.i32, 32)
        local t = tl.thread_id()
        ;(buf + t):store(t * 3)
        tl.barrier()
        local v = (buf + (31 - t)):load()
        if branch_on_load then
          tl.if_(v:gt(5), function() (p.out + t):store(v) end)
        else
          (p.out + t):store(v + 1)
        end
      end)
      return k
    end
    assert.is_true(has(data_only(kernel(false)), "arith.muli")) -- the stored t * 3: data
    assert.is_false(has(data_only(kernel(true)), "arith.muli")) -- read back into a branch: computed
  end)

  describe("of the stdlib attention kernel", function()
    local function attention()
      tl.new_module()
      -- (persistent: the checker derives the sizes of a data-parallel kernel,
      -- causal's default, from none and cannot plan its tiles)
      return tl.attention.build { b = 1, h = 2, hkv = 1, sq = 100, skv = 100, d = 64, causal = true,
                                  schedule = "persistent" }.kernel
    end

    it("leaves its softmax and P operand out, with the verdict and states of computing them", function()
      local k = attention()
      local marked = data_only(k)
      assert.is_true(#marked > 500, #marked)
      assert.is_true(has(marked, "tile.math") and has(marked, "tile.pack"))
      local sliced = P.check(k.op, {})
      local full = P.check(k.op, { data_slice = false })
      assert(sliced.ok, sliced.report)
      assert(full.ok, full.report)
      assert.are.equal(full.states, sliced.states)
      assert.are.equal(full.runs, sliced.runs)
    end)

    -- a seeded bug: its kind, found alike with and without the slice
    for _, c in ipairs {
      { what = "the softmax reads S before its wgmma_wait", op = "tile.wgmma_wait", i = 1, kind = "wgmma" },
      { what = "a consumer never releases a stage", op = "cutlass.pipeline.consumer_release", i = 1, kind = "deadlock" },
    } do
      it("finds the bug where " .. c.what, function()
        local kinds = {}
        for _, sl in ipairs { true, false } do
          local k = attention()
          PH.ops(k, c.op)[c.i]:erase()
          local r = P.check(k.op, { data_slice = sl, shortest = false })
          assert.is_false(r.ok)
          kinds[#kinds + 1] = r.violation.kind
        end
        assert.are.same({ c.kind, c.kind }, kinds)
      end)
    end
  end)
end)
