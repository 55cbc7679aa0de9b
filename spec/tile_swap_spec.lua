-- The swapped form of a tile GEMM (examples/tile_gemm.lua --swap=1,
-- docs/tileprog.md): for a few rows of A (decode-sized M) the program computes
-- its tile of C transposed, D^T = B . A^T (B's rows on wgmma's 64-row side, the
-- tokens its N), and stores tl.transpose of the accumulator.
-- tileas-materialize-agents splits the accumulator's M among the consumers
-- through the transpose (its M is then the stored tile's columns), and
-- convert-tileas-to-cutlass stores a transposed fragment element by element
-- (kernels/gemm.lua's epilogue_transposed, as stdlib/gemm.lua's swap_ab). On
-- the CPU emulator, with small integers (every sum exact): every tileas stage
-- and the lowered kernel give the plain reference's bytes for 8, 16 and 40
-- tokens a program, one and two consumers, k blocks of 64 and 128, ragged
-- edges along every dim and odd and even counts of programs a CTA; the
-- protocol checker explores the lowered kernel; a transposed accumulator used
-- by anything but a store is refused.
local H = dofile "spec/helper.lua"
local tl = require "tilua"
local PH = dofile "spec/protocol_helper.lua"

local ex = assert(loadfile "examples/tile_gemm.lua")("--library")

describe("the swapped tile GEMM (a transposed accumulator stored)", function()
  -- {program options, M x N x K}: programs of bm tokens x bn columns of C
  local CASES = {
    { o = { swap = true, stages = 4 }, m = 40, n = 300, k = 3 * 64 - 8 },                -- 16 x 128: two consumers
    { o = { swap = true, bm = 8, bn = 64, stages = 3 }, m = 21, n = 150, k = 5 * 64 - 40 }, -- one consumer, 8 tokens
    { o = { swap = true, bm = 40, bk = 128, stages = 2 }, m = 50, n = 200, k = 3 * 128 - 24 }, -- 128-element k blocks
  }
  for _, c in ipairs(CASES) do
    local bm, bn = ex.rows_of(c.o), ex.cols_of(c.o)
    local label = ("%d x %d programs%s, %d x %d x %d"):format(bm, bn, c.o.bk and (", bk " .. c.o.bk) or "", c.m, c.n, c.k)
    it(label .. ": every tileas stage and the lowered kernel compute the reference", function()
      local P = PH.int_gemm(c.m, c.n, c.k)
      local px, py = table.unpack(ex.grid_of(c.o, c.m, c.n)) -- (columns along x, tokens along y)
      local k = ex.build(c.o)
      local kop = PH.lowered_tile(k)
      for _, grid in ipairs { 1, 2, 3 } do
        local args, at = PH.params_args(kop, P.values(px, py))
        assert.is_nil(at["map:C"], "a transposed store is a plain one: C a pointer")
        local r = tl.emulate(kop, { grid = grid, args = args, policy = "random", seed = 7 + grid })
        assert(r.ok, r.report)
        P.check(r.read(at["ptr:C"]), ("the lowered kernel on %d CTAs"):format(grid))
      end
      local problem = { A = P.A, B = P.B, C = P.C, K = P.K }
      for _, stage in ipairs { "input", "tileas-materialize-agents", "sink-negf-through-shapes" } do
        local r = tl.emulate(PH.stage_kernel(k, stage), { grid = { px, py }, workers = 2, args = problem, policy = "random", seed = 3 })
        assert(r.ok, r.report)
        P.check(r.read(3), stage)
      end
    end)
  end

  it("the protocol checker explores the lowered kernel", function()
    local k = ex.build { swap = true, stages = 2 }
    local K2 = 192 -- 3 k blocks through 2 stages: the ring wraps
    local args = { A = { bytes = 2 * 16 * K2, shape = { 16, K2 } }, B = { bytes = 2 * 384 * K2, shape = { 384, K2 } },
                   C = { bytes = 2 * 16 * 384, shape = { 16, 384 } }, K = K2 }
    local kop = PH.lowered_tile(k)
    local values = { ["map:A"] = args.A, ["map:B"] = args.B, ["ptr:C"] = ("\0"):rep(args.C.bytes), ["dim:C:0"] = 16,
                     ["dim:C:1"] = 384, ["stride:C:0"] = 384, ["arg:K"] = K2, ["programs:x"] = 3, ["programs:y"] = 1 }
    local r = tl.verify_protocol(kop, { grid = 1, args = PH.params_args(kop, values) })
    assert(r.ok, r.report)
  end)

  it("refuses a transposed accumulator used by anything but a store", function()
    local function program(after)
      tl.new_module()
      local k = tl.tile_kernel("swapped", { params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2), C = tl.tensor(tl.bf16, 2), K = tl.i32 } })
      k:define(function(_, p)
        local acc = tl.for_tiles(p.K, { tile = 64, stages = 2 }, tl.zeros({ 64, 16 }, tl.f32), function(kk, acc)
          local b = tl.load(p.B, { tl.program_id("y"), kk }, { 64, 64 })
          local a = tl.load(p.A, { tl.program_id("x"), kk }, { 16, 64 })
          return tl.dot(b, a, acc)
        end)
        tl.store(p.C, { tl.program_id("x"), tl.program_id("y") }, after(acc))
      end)
      local ok, err = pcall(function() k:compile() end)
      assert.is_false(ok)
      return tostring(err)
    end
    assert.matches("a transposed accumulator may only be stored %(tiled_store%), not used by 'arith.truncf' %(apply elementwise ops and the cast before the transpose%)",
                   program(function(acc) return tl.transpose(acc):cast(tl.bf16) end))
  end)

  it("compiles through ptxas unserialized (16 x 128, 8 x 64, 40 x 128 with bk = 128)", function()
    -- (the conversions before the bounds checks serialized every wgmma, C7514: 8 x 64 at 0.7 of stdlib's)
    for _, c in ipairs(CASES) do H.assert_ptxas_fast(ex.build(c.o):compile()) end
  end)

  it("an epilogue before the transpose (s * acc - 1, one fma an element) compiles unserialized", function()
    tl.new_module()
    local k = tl.tile_kernel("swapped_scaled", { params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2),
                                                           C = tl.tensor(tl.bf16, 2), K = tl.i32, s = tl.f32 } })
    k:define(function(_, p)
      local n, m = tl.program_id("x"), tl.program_id("y")
      local acc = tl.for_tiles(p.K, { tile = 64, stages = 4 }, tl.zeros({ 64, 8 }, tl.f32), function(kk, acc)
        return tl.dot(tl.load(p.B, { n, kk }, { 64, 64 }), tl.load(p.A, { m, kk }, { 8, 64 }), acc)
      end)
      tl.store(p.C, { m, n }, tl.transpose((acc * p.s - 1.0):cast(tl.bf16)))
    end)
    local ptx = k:compile()
    assert.truthy(ptx:find("fma.rn.f32", 1, true))
    H.assert_ptxas_fast(ptx)
  end)
end)
