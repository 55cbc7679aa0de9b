-- The harness of the GPU examples (lua/tilua/gpu/check.lua) and tools/stress.lua,
-- without a GPU: the stress driver runs against the stand-in driver
-- (spec/c/fake_cuda.c), whose kernels do nothing, so every check must fail and
-- be counted; on the GPU machine `tools/gpu stress` runs it for real.
local H = dofile "spec/helper.lua"
local check = require "tilua.gpu.check"

describe("tilua.gpu.check", function()
  it("covers one CTA, one per SM, three per SM and no multiple of the SM count, in whole clusters", function()
    assert.same({ 1, 132, 396, 199 }, check.grids(132))
    assert.same({ 2, 132, 396, 200 }, check.grids(132, 2))
    assert.same({ 1, 4, 12, 7 }, check.grids(4))
    for _, g in ipairs(check.grids(132, 2)) do assert.equal(0, g % 2) end
  end)
end)

describe("tools/stress.lua", function()
  it("runs every example's check in one process, counts the failures and prints the table", function()
    local fake = os.getenv "TILUA_FAKE_CUDA"
    if not fake or fake == "" then pending("TILUA_FAKE_CUDA is not set (run through ctest)") end
    local out, err, code = H.run { "env", "TILUA_LIBCUDA=" .. fake, "timeout", "120", H.tilua, "tools/stress.lua",
                                   "--iterations", "2", "--seed", "7", "--examples", "vector_add,splitk_block_striped" }
    assert.equal(1, code, err)
    assert.truthy(out:find("| example | runs | failures | grids (CTAs) | seconds |", 1, true), out)
    assert.truthy(out:find("| vector_add | 2 | 2 | 1, 4, 12, 7 |", 1, true), out)
    assert.truthy(out:find("| splitk_block_striped | 2 | 2 | 1, 4, 12, 7 |", 1, true), out)
    assert.truthy(out:find("vector_add: run 1 (seed 8, grid 1) FAILED", 1, true), out)
    assert.truthy(out:find("stress: 4 failures", 1, true), out)
    -- an example without grids of its own choosing launches its own
    out, err, code = H.run { "env", "TILUA_LIBCUDA=" .. fake, "timeout", "120", H.tilua, "tools/stress.lua",
                             "--iterations", "1", "--seed", "7", "--examples", "tile_reduce_store" }
    assert.equal(1, code, err)
    assert.truthy(out:find("| tile_reduce_store | 1 | 1 | its own |", 1, true), out)
    assert.truthy(out:find("tile_reduce_store: run 1 (seed 8, grid its own) FAILED", 1, true), out)
    local _, err2, code2 = H.tilua_run { "tools/stress.lua", "--iterations", "0" }
    assert.equal(2, code2)
    assert.matches("take positive integers", err2)
  end)
end)
