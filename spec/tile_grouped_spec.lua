-- A grouped GEMM (mixture of experts) as a tile program
-- (examples/tile_gemm_grouped.lua): the groups' rows contiguous in A, each
-- from a multiple of 128; Expert[b] in device memory names row block b's
-- group, which the producer loads (a single-element tile, tl.extract) to pick
-- B's rank-3 tile. tile-to-ptx gives a global load of the expert before the
-- TMA copies of three coordinates; on the emulator the lowered kernel computes
-- every group as the CPU does, bit for bit (small integers), with skewed and
-- empty groups; a tile program that extracts from a larger tile outside a
-- compute agent is refused.
local tl = require "tilua"
local PH = dofile "spec/protocol_helper.lua"

local ex = assert(loadfile "examples/tile_gemm_grouped.lua")("--library")

local function a_value(i, k) return ((i * 7 + k * 3) % 5) - 2 end
local function b_value(j, k) return ((j * 5 + k * 11 + 1) % 3) - 1 end

describe("a grouped GEMM (experts' rows contiguous, the expert of a block read from memory)", function()
  it("lowers to a global load of the block's expert and TMA copies of B at it; ptxas takes it", function()
    local k = ex.build()
    local ptx = k:compile()
    assert.same({ "map:A", "map:B", "map:C", "ptr:Expert", "dim:Expert:0", "arg:K", "programs:x", "programs:y" },
                k:lowered_op():attr "tileas.params")
    assert.matches("ld%.global%.b32", ptx)
    assert.matches("cp.async.bulk.tensor.3d.shared::cluster.global", ptx, nil, true)
    local ok, log = tl.ptxas(ptx)
    if ok == nil then pending("ptxas not found: " .. log) return end
    assert(ok, log)
  end)

  it("groups of 130, 0 and 60 rows, N 100, K 72, on 2 persistent CTAs: the CPU reference, bit for bit", function()
    local kop = PH.lowered_tile(ex.build())
    local sizes = { 130, 0, 60 }
    local first, blocks, rows = ex.layout(sizes)
    assert.same({ 0, 0, 2 }, blocks)
    local G, N, K = #sizes, 100, 72
    local A, ab = PH.matrix(rows, K, a_value)
    local B, bb = PH.matrix(G * N, K, function(j, kk) return b_value(j, kk) * (j // N + 1) end) -- each expert its own B
    local eb = {}
    for i, g in ipairs(blocks) do eb[i] = string.pack("<i4", g) end
    local args, at = PH.params_args(kop, {
      ["map:A"] = { data = ab, shape = { rows, K } }, ["map:B"] = { data = bb, shape = { G, N, K } },
      ["map:C"] = { bytes = rows * N * 2, shape = { rows, N } }, ["ptr:Expert"] = table.concat(eb), ["dim:Expert:0"] = #blocks,
      ["arg:K"] = K, ["programs:x"] = #blocks, ["programs:y"] = 1 })
    local r = tl.emulate(kop, { grid = 2, args = args, policy = "random", seed = 9 })
    assert(r.ok, r.report)
    local out = r.read(at["map:C"])
    local bad, first_bad = 0, nil
    for g = 1, G do
      for i = first[g], first[g] + sizes[g] - 1 do
        for j = 0, N - 1 do
          local s = 0
          for kk = 0, K - 1 do s = s + A[i * K + kk] * B[((g - 1) * N + j) * K + kk] end
          local got = string.unpack("<f", string.pack("<I4", (string.unpack("<I2", out, 1 + 2 * (i * N + j))) << 16))
          if got ~= s then
            bad = bad + 1
            first_bad = first_bad or ("C[%d, %d] (group %d) = %g, want %g"):format(i, j, g - 1, got, s)
          end
        end
      end
    end
    assert.equal(0, bad, first_bad)
  end)

  it("refuses an extract from a tile of more than one element in a GEMM's agents", function()
    tl.new_module()
    local k = tl.tile_kernel("t", { params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 3), C = tl.tensor(tl.bf16, 2),
                                               E = tl.tensor(tl.i32, 1), K = tl.i32 } })
    k:define(function(k, p)
      local m = tl.program_id("x")
      local g = tl.extract(tl.load(p.E, { m }, { 2 }), { 1 })
      local acc = tl.for_tiles(p.K, { tile = 64, stages = 2 }, tl.zeros({ 128, 256 }, tl.f32), function(kk, acc)
        return tl.dot(tl.load(p.A, { m, kk }, { 128, 64 }), tl.load(p.B, { g, 0, kk }, { 256, 64 }), acc)
      end)
      tl.store(p.C, { m, 0 }, acc:cast(tl.bf16))
    end)
    local ok, err = pcall(k.compile, k)
    assert.is_false(ok)
    assert.matches("the producer loads only into rings %(and single elements%)", tostring(err))
  end)
end)
