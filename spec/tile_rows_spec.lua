-- The memory-bound tile programs of stdlib/rows.lua (tl.rows) on the CPU
-- emulator: each lowered kernel (convert-tileas-to-cutlass's compute agent:
-- registers per thread, vector loads and stores, reductions over lanes and
-- warps) against its CPU reference (examples/tile_rows.lua's cases) on
-- random inputs of ragged sizes: rows shorter than the tile (loads read their
-- padding, stores are dropped), tiles larger than the block's threads hold
-- (wrapped threads masked), a row length that is no multiple of the vector
-- width (the per-element path). The protocol checker is clean on them (their
-- shared memory and barriers), and tile-to-ptx's stages of each are checked
-- after every pass (ctest sets TILUA_CHECK_PROTOCOL).
local ex = assert(loadfile "examples/tile_rows.lua")("--library")

describe("memory-bound tile programs (tl.rows) on the emulator", function()
  for _, name in ipairs(ex.order) do
    local c = ex.cases[name]
    it(("%s, %d x %d: the CPU reference"):format(name, c.small[1], c.small[2]), function()
      local ok, summary = ex.run_case(name, { seed = 1234, emulate = true, size = c.small })
      assert(ok, summary)
    end)
  end

  it("the host side at the GPU's sizes: row_copy's reference of 2300 x 2000 (no table.unpack of millions)", function()
    local M, N = ex.cases.row_copy.sizes[1][1], ex.cases.row_copy.sizes[1][2]
    local v = {}
    for i = 1, M * N do v[i] = i end
    local want = ex.cases.row_copy.reference({ X = { elem = "bf16", shape = { M, N }, v = v } }, M, N)
    assert.equal(M * N, #want.Y)
    assert.equal(M * N, want.Y[M * N])
  end)

  it("a row not a multiple of the vector width, rows of several repetitions of the threads", function()
    for _, t in ipairs { { "rmsnorm", { 2, 8190 } }, { "softmax", { 2, 4101 } }, { "row_max", { 2, 2048 } } } do
      local ok, summary = ex.run_case(t[1], { seed = 99, emulate = true, size = t[2] })
      assert(ok, summary)
    end
  end)

  it("the row loop (the next row in registers): one CTA walks every row, ragged and aligned rows", function()
    for _, t in ipairs { { "rmsnorm", { 11, 300 } }, { "softmax", { 9, 4101 } }, { "layernorm", { 10, 2048 } } } do
      local ok, summary = ex.run_case(t[1], { seed = 7, emulate = true, size = t[2], ctas = 1 })
      assert(ok, summary)
    end
  end)

  it("the row ring: for programs that load and store their row; tl.options.row_ring turns it off or tunes it", function()
    local tl = require "tilua"
    local function launch_of(k)
      k:compile()
      return k:lowered_op():attr_or_default "tileas.launch"
    end
    assert.equal(2, launch_of(tl.rows.rmsnorm { n = 1024 }).per_sm)
    assert.is_true(launch_of(tl.rows.reduce { kind = "sum", n = 2048 }).linear) -- (reduces its row only)
    assert.is_true(launch_of(tl.rows.softmax { n = 256 }).linear) -- (a row of 512 bytes)
    tl.options.row_ring = { per_sm = 3 }
    local three = launch_of(tl.rows.softmax { n = 1024 })
    tl.options.row_ring = false
    local off = launch_of(tl.rows.softmax { n = 1024 })
    tl.options.row_ring = nil
    assert.equal(3, three.per_sm)
    assert.is_true(off.linear)
    local ok, err = pcall(function() tl.options.row_ring = { stages = 3 } end)
    assert.is_false(ok)
    assert.matches("tl.options.row_ring must be nil, false or {per_sm = n, in_flight = bytes, hoist = 0|1, registers = 0..4, async = 0..8}", err, 1, true)
    assert.is_nil(tl.options.row_ring)
  end)

  it("the shared row ring (row_ring.registers = 0): one CTA walks every row, ragged and aligned; protocol clean", function()
    local tl = require "tilua"
    local k0 = tl.rows.rmsnorm { n = 1024 }
    k0:compile()
    assert.is_nil(k0:lowered_op():print():find("mbarrier", 1, true)) -- (the default: rows in registers)
    tl.options.row_ring = { registers = 0 }
    local ok, err = pcall(function()
      local fresh = assert(loadfile "examples/tile_rows.lua")("--library") -- (kernels compiled with the option)
      local k = tl.rows.rmsnorm { n = 1024 }
      k:compile()
      assert.truthy(k:lowered_op():print():find("mbarrier", 1, true))
      assert.equal(2, k:lowered_op():attr_or_default("tileas.launch").per_sm)
      for _, t in ipairs { { "rmsnorm", { 11, 300 } }, { "softmax", { 9, 4101 } }, { "layernorm", { 10, 2048 } } } do
        local good, summary = fresh.run_case(t[1], { seed = 7, emulate = true, size = t[2], ctas = 1 })
        assert(good, summary)
      end
      local good, report = fresh.run_case("rmsnorm", { seed = 5, emulate = true, size = { 11, 300 }, ctas = 1, check = true,
                                                       max_states = 2000 })
      assert(good, report)
    end)
    tl.options.row_ring = nil
    assert(ok, err)
  end)

  it("the cp.async row ring (row_ring.async = S): one CTA walks every row, ragged and aligned; protocol clean", function()
    local tl = require "tilua"
    for _, S in ipairs { 2, 3 } do
      tl.options.row_ring = { async = S }
      local ok, err = pcall(function()
        local fresh = assert(loadfile "examples/tile_rows.lua")("--library") -- (kernels compiled with the option)
        local k = tl.rows.rmsnorm { n = 1024 }
        k:compile()
        local ir = k:lowered_op():print()
        assert.truthy(ir:find("nvvm.cp.async.wait.group {pending = " .. (S - 1) .. "}", 1, true))
        assert.is_nil(ir:find("mbarrier", 1, true))
        assert.truthy(k.ptx:find("cp.async.cg.shared.global", 1, true))
        dofile("spec/helper.lua").assert_ptxas(k.ptx)
        for _, t in ipairs { { "rmsnorm", { 11, 300 } }, { "softmax", { 9, 4101 } }, { "layernorm", { 10, 2048 } },
                             { "rmsnorm", { 7, 1024 } } } do
          local good, summary = fresh.run_case(t[1], { seed = 7 + S, emulate = true, size = t[2], ctas = 1 })
          assert(good, summary)
        end
        local good, report = fresh.run_case("softmax", { seed = 5, emulate = true, size = { 11, 1030 }, ctas = 1,
                                                         check = true, max_states = 2000 })
        assert(good, report)
      end)
      tl.options.row_ring = nil
      assert(ok, err)
    end
  end)

  it("the protocol checker is clean on the row loop lapped by one CTA", function()
    local ok, report = ex.run_case("rmsnorm", { seed = 5, emulate = true, size = { 11, 300 }, ctas = 1, check = true,
                                                max_states = 2000 })
    assert(ok, report)
  end)

  it("the protocol checker is clean on a reduction across warps and a loop carrying tiles", function()
    for _, t in ipairs { { "rmsnorm", { 2, 300 } }, { "layernorm_bwd", { 9, 100 } } } do
      local ok, report = ex.run_case(t[1], { seed = 5, emulate = true, size = t[2], check = true, max_states = 2000 })
      assert(ok, report)
    end
  end)
end)
