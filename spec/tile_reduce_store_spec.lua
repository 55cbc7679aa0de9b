-- The reduce-add store of a tile program, tl.store(t, coords, tile, {reduce =
-- "add"}): programs add their tiles into the same elements of a tensor,
-- atomically. On the CPU emulator, as written and as tile-to-ptx lowers it
-- (a compute agent's blocked tile: one red.global.add an element; a
-- consumer's accumulator: staged in shared memory, then TMA's reduce-add of
-- 64 x 32 boxes), the sums equal a reference exactly (small
-- integers: every order of the additions gives the same f32); the race check
-- finds no race between reduce-adds of different programs, but a plain store
-- beside a reduce-add of the same elements is one; the lowered PTX assembles.
local H = dofile "spec/helper.lua"
local PH = dofile "spec/protocol_helper.lua"
local AH = dofile "spec/attention_helper.lua"
local tl = require "tilua"

local function emulate(...) return AH.emulate(PH, ...) end

local ex = assert(loadfile "examples/tile_reduce_store.lua")("--library")
local ints, build_rowsum, build_splitk = ex.ints, ex.build_rowsum, ex.build_splitk

describe("the reduce-add store of a tile program", function()
  for _, elem in ipairs { "f32", "i32" } do
    for _, lowered in ipairs { false, true } do
      it(("%s, %s: the row blocks' tiles added into one tile"):format(elem, lowered and "lowered" or "as written"), function()
        local R, N, BM, BN = 37, 40, 8, 32 -- ragged: a partial row block and column block
        local x = ints(R * N, 11, -50, 50)
        local fmt = elem == "f32" and "<f" or "<i4"
        local out = emulate(build_rowsum(tl[elem], BM, BN), { (R + BM - 1) // BM, (N + BN - 1) // BN },
                            { X = { data = H.pack(fmt, x), shape = { R, N } }, Out = { bytes = BM * N * 4, shape = { BM, N } } },
                            {}, lowered, 3) "Out"
        for i, want in ipairs(ex.rowsum_ref(x, R, N, BM)) do assert.equal(want, (string.unpack(fmt, out, 1 + 4 * (i - 1)))) end
      end)
    end
  end

  for _, lowered in ipairs { false, true } do
    it(("split-K: each split's accumulator added into C, %s"):format(lowered and "lowered (consumers)" or "as written"), function()
      local M, K, S = 200, 256, 2
      local a, b = ints(M * K, 5, -2, 2), ints(64 * K, 9, -2, 2)
      local enc = require("tilua.emulate.values").float16.enc.bf16
      local function bf16s(v)
        local t = {}
        for i = 1, #v do t[i] = string.pack("<I2", enc(v[i])) end
        return table.concat(t)
      end
      local c = emulate(build_splitk(), { (M + 127) // 128, S },
                        { A = { data = bf16s(a), shape = { M, K } }, B = { data = bf16s(b), shape = { 64, K } },
                          C = { bytes = M * 64 * 4, shape = { M, 64 } } }, { KS = K // S }, lowered, 2) "C"
      for i, want in ipairs(ex.splitk_ref(a, b, M, K)) do assert.equal(want, (string.unpack("<f", c, 1 + 4 * (i - 1)))) end
    end)
  end

  it("the race check: reduce-adds of programs into one tile are no race; a plain store beside them is", function()
    local args = { X = { bytes = 16 * 32 * 4, shape = { 16, 32 } }, Out = { bytes = 8 * 32 * 4, shape = { 8, 32 } } }
    local ok = tl.verify_protocol(build_rowsum(tl.f32, 8, 32), { grid = { 2, 1 }, args = args })
    assert(ok.ok, ok.report)
    tl.new_module()
    local k = tl.tile_kernel("stored_and_added", { params = { X = tl.tensor(tl.f32, 2), Out = tl.tensor(tl.f32, 2) } })
    k:define(function(_, p)
      local m = tl.program_id("x")
      local x = tl.load(p.X, { m, 0 }, { 8, 32 })
      tl.if_(m:eq(0), function() tl.store(p.Out, { 0, 0 }, x) end, function() tl.store(p.Out, { 0, 0 }, x, { reduce = "add" }) end)
    end)
    local bad = tl.verify_protocol(k, { grid = { 2, 1 }, args = args })
    assert.is_false(bad.ok)
    assert.equal("overwrite", bad.violation.kind)
  end)

  it("refuses a reduce other than add, and one of a 16-bit tile, at the script's line", function()
    tl.new_module()
    local k = tl.tile_kernel("bad_reduce", { params = { X = tl.tensor(tl.bf16, 2) } })
    local ok, err = pcall(k.define, k, function(_, p)
      tl.store(p.X, { 0, 0 }, tl.load(p.X, { 0, 0 }, { 8, 8 }), { reduce = "max" })
    end)
    assert.is_false(ok)
    assert.matches("tile_reduce_store_spec.lua:%d+: store: reduce is \"add\", got max", err)
    ok, err = pcall(k.define, k, function(_, p)
      tl.store(p.X, { 0, 0 }, tl.load(p.X, { 0, 0 }, { 8, 8 }), { reduce = "add" })
    end)
    assert.is_false(ok)
    assert.matches("store: a reduce%-add store adds f32 or i32 tiles, got bf16", err)
  end)

  it("lowers to red.global.add (a compute agent) and a TMA reduce-add (a consumer's accumulator) that ptxas takes", function()
    local ptx = build_rowsum(tl.f32, 8, 32):compile()
    H.has(ptx, "red.gpu.global.add.f32")
    H.assert_ptxas_fast(ptx)
    ptx = build_splitk():compile()
    H.has(ptx, "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group")
    assert.is_nil(ptx:find("red.gpu.global", 1, true))
    H.assert_ptxas_fast(ptx)
  end)
end)
