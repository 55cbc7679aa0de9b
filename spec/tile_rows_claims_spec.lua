-- The row programs of stdlib/rows.lua (tl.rows) in their ring and claims forms
-- on the CPU emulator (tl.options.row_ring: the cp.async ring, bulk stores, rows
-- claimed at run time by several CTAs lapping, claims published late), each
-- against its CPU reference on ragged and aligned rows, the claims' counter back
-- to 0 after each launch, the protocol checker exploring the claims. Apart from
-- spec/tile_rows_spec.lua (the default forms, units, hints, hoisting) so that
-- ctest runs the two at once: each is minutes on the emulator under ASan.
local RH = dofile "spec/rows_helper.lua"
local claims_kernel, claims_runs, claims_protocol = RH.claims_kernel, RH.claims_runs, RH.claims_protocol

describe("tl.rows in its ring and claims forms on the emulator", function()
  -- a ring form of S = 2 and 3 stages (opts(S): tl.options.row_ring): RMSNorm
  -- of 1024 compiled and its IR checked (check(k, ir, S)), ptxas; the cases
  -- {case, size} on the emulator, one CTA walking every row; the protocol
  -- checker on softmax 11 x 1030
  local function ring_form(opts, check, cases, seed)
    local tl = require "tilua"
    for _, S in ipairs { 2, 3 } do
      tl.options.row_ring = opts(S)
      local ok, err = pcall(function()
        local fresh = assert(loadfile "examples/tile_rows.lua")("--library") -- (kernels compiled with the option)
        local k = tl.rows.rmsnorm { n = 1024 }
        k:compile()
        check(k, k:lowered_op():print(), S)
        dofile("spec/helper.lua").assert_ptxas(k.ptx)
        for _, t in ipairs(cases) do
          local good, summary = fresh.run_case(t[1], { seed = seed + S, emulate = true, size = t[2], ctas = 1 })
          assert(good, summary)
        end
        local good, report = fresh.run_case("softmax", { seed = 5, emulate = true, size = { 11, 1030 }, ctas = 1,
                                                         check = true, max_states = 2000 })
        assert(good, report)
      end)
      tl.options.row_ring = nil
      assert(ok, err)
    end
  end

  it("the cp.async row ring (row_ring.async = S): one CTA walks every row, ragged and aligned; protocol clean", function()
    ring_form(function(S) return { async = S } end, function(k, ir, S)
      assert.truthy(ir:find("nvvm.cp.async.wait.group {pending = " .. (S - 1) .. "}", 1, true))
      assert.is_nil(ir:find("mbarrier", 1, true))
      assert.truthy(k.ptx:find("cp.async.cg.shared.global", 1, true))
    end, { { "rmsnorm", { 11, 300 } }, { "softmax", { 9, 4101 } }, { "layernorm", { 10, 2048 } }, { "rmsnorm", { 7, 1024 } } }, 7)
  end)

  it("the shared ring with bulk stores (row_ring.bulk = S): the row written back into its stage, one bulk copy a row; one CTA walks every row, ragged and aligned; protocol clean", function()
    ring_form(function(S) return { bulk = S } end, function(k, ir)
      assert.truthy(ir:find("nvvm.cp.async.bulk.global.shared.cta", 1, true))
      assert.truthy(ir:find("nvvm.cp.async.bulk.shared.cluster.global", 1, true))
      assert.truthy(ir:find("nvvm.fence.proxy.async {space = \"shared::cta\"}", 1, true))
      assert.truthy(k.ptx:find("cp.async.bulk.wait_group.read 1", 1, true))
    end, { { "rmsnorm", { 11, 1030 } }, { "softmax", { 9, 4101 } }, { "layernorm", { 10, 2048 } }, { "rmsnorm", { 7, 1024 } },
           { "layernorm", { 6, 1000 } } }, 17)
  end)

  it("the register loop with rows claimed at run time (row_ring.claims = K, a chunk of K rows a claim): several CTAs lapping, ragged and aligned; the counter back to 0; protocol clean", function()
    local tl = require "tilua"
    for _, K in ipairs { 1, 2, 4 } do
      tl.options.row_ring = { claims = K }
      local ok, err = pcall(function()
        local fresh = assert(loadfile "examples/tile_rows.lua")("--library") -- (kernels compiled with the option)
        local k = tl.rows.rmsnorm { n = 1024 }
        k:compile()
        assert.equal(4, k:lowered_op():attr_or_default("tileas.launch").workspace_bytes)
        assert.truthy(k.ptx:find("atom.gpu.global.add.u32", 1, true))
        assert.truthy(k.ptx:find("atom.gpu.global.exch", 1, true))
        dofile("spec/helper.lua").assert_ptxas(k.ptx)
        -- (fewer rows than the CTAs' static chunks, rows claimed by 2, 3 and 4
        -- CTAs, a last chunk of fewer than K rows; execute checks that the
        -- counter is 0 after the launch)
        for _, t in ipairs { { "rmsnorm", { 11, 300 }, 1 }, { "rmsnorm", { 5, 1024 }, 3 }, { "softmax", { 9, 4101 }, 2 },
                             { "layernorm", { 10, 2048 }, 3 }, { "rmsnorm", { 13, 1024 }, 4 }, { "row_copy", { 17, 1030 }, 3 } } do
          local good, summary = fresh.run_case(t[1], { seed = 11 + K, emulate = true, size = t[2], ctas = t[3] })
          assert(good, ("claims = %d, %d CTAs: %s"):format(K, t[3], summary))
        end
        -- the checker in the warps' order, and exploring which CTA claims which rows
        local good, report
        if K == 1 then
          good, report = fresh.run_case("rmsnorm", { seed = 5, emulate = true, size = { 11, 300 }, ctas = 2, check = true,
                                                     max_states = 2000 })
          assert(good, report)
        end
        good, report = fresh.run_case("row_copy", { seed = 5, emulate = true, size = { 9, 1024 }, ctas = 2, check = true,
                                                    claims = "dynamic", max_states = 4000 })
        assert(good, report)
        assert(tonumber(report:match "%((%d+) runs%)") > 1, report) -- (more than one assignment of rows explored)
      end)
      tl.options.row_ring = nil
      assert(ok, err)
    end
  end)

  it("the register loop two rows ahead with rows claimed at run time (row_ring = {registers = 2, claims = 1}): several CTAs lapping, ragged and aligned; the counter back to 0; protocol clean", function()
    local tl = require "tilua"
    tl.options.row_ring = { registers = 2, claims = 1 }
    local ok, err = pcall(function()
      local fresh = assert(loadfile "examples/tile_rows.lua")("--library")
      claims_kernel(tl.rows.rmsnorm { n = 1024 })
      -- (fewer rows than the CTAs' four static rows, rows claimed by 1 to 3 CTAs)
      claims_runs(fresh, { { "rmsnorm", { 11, 300 }, 1 }, { "rmsnorm", { 5, 1024 }, 3 }, { "softmax", { 9, 4101 }, 2 },
                           { "layernorm_1pass", { 10, 2048 }, 3 }, { "row_copy", { 17, 1030 }, 3 } }, 21, "two rows ahead")
      claims_protocol(fresh, "row_copy", { 11, 1024 })
    end)
    tl.options.row_ring = nil
    assert(ok, err)
  end)

  -- fn(the example loaded afresh) with tl.options.row_ring = o (its kernels compiled with it)
  local function with_ring(o, fn)
    local tl = require "tilua"
    tl.options.row_ring = o
    local ok, err = pcall(function() fn(assert(loadfile "examples/tile_rows.lua")("--library")) end)
    tl.options.row_ring = nil
    assert(ok, err)
  end

  it("the bulk-store ring with rows claimed at run time (row_ring = {bulk = S, claims = 1}): a claim a refill, several CTAs lapping, ragged and aligned; the counter back to 0; protocol clean", function()
    local tl = require "tilua"
    for _, S in ipairs { 2, 3 } do
      with_ring({ bulk = S, claims = 1 }, function(fresh)
        local k = tl.rows.rmsnorm { n = 1024 }
        claims_kernel(k)
        assert.truthy(k.ptx:find("cp.async.bulk.global.shared::cta", 1, true))
        -- (fewer rows than the CTAs' static stages, rows claimed by 1 to 4 CTAs)
        claims_runs(fresh, { { "rmsnorm", { 3, 520 }, 4 }, { "rmsnorm", { 13, 1024 }, 2 }, { "softmax", { 9, 4101 }, 2 },
                             { "layernorm", { 11, 515 }, 3 }, { "row_copy", { 17, 1030 }, 1 }, { "layernorm_1pass", { 10, 2048 }, 2 } },
          31 + S, ("bulk = %d, claims"):format(S))
        claims_protocol(fresh, "row_copy", { 9, 1024 })
      end)
    end
  end)

  it("the shared ring with rows claimed at run time (row_ring = {registers = 0, claims = 1}): bulk copies in, the threads' stores out, each refill a claim made an iteration before; several CTAs lapping, ragged and aligned; the counter back to 0; protocol clean", function()
    local tl = require "tilua"
    -- (in_flight: 2 and 3 stages of a row of 1024 bf16 at 2 CTAs an SM; and the rule's 8)
    for _, o in ipairs { { registers = 0, claims = 1, in_flight = 2 * 2 * 2048 }, { registers = 0, claims = 1, in_flight = 3 * 2 * 2048 },
                         { registers = 0, claims = 1 } } do
      with_ring(o, function(fresh)
        local k = tl.rows.rmsnorm { n = 1024 }
        claims_kernel(k)
        local ir = k:lowered_op():print()
        assert.truthy(ir:find("nvvm.cp.async.bulk.shared.cluster.global", 1, true))
        assert.is_nil(ir:find("nvvm.cp.async.bulk.global.shared.cta", 1, true)) -- (the threads store)
        -- (fewer rows than the CTAs' static stages, rows claimed by 1 to 4 CTAs)
        claims_runs(fresh, { { "rmsnorm", { 3, 520 }, 4 }, { "rmsnorm", { 13, 1024 }, 2 }, { "softmax", { 9, 4101 }, 2 },
                             { "layernorm", { 11, 515 }, 3 }, { "row_copy", { 17, 1030 }, 1 }, { "layernorm_1pass", { 10, 2048 }, 2 },
                             { "rmsnorm", { 7, 1000 }, 2 } },
          51, ("shared ring, claims, in_flight %s"):format(tostring(o.in_flight)))
        claims_protocol(fresh, "row_copy", { 9, 1024 })
      end)
    end
  end)

  it("the shared ring's reads of the stage in one branch a row (row_ring = {registers = 0, claims = 1, whole = 1}): full rows (every vector from the stage), ragged and unaligned ones (the tail from the tensor); several CTAs lapping", function()
    local tl = require "tilua"
    with_ring({ registers = 0, claims = 1, whole = 1, in_flight = 2 * 2 * 16384 }, function(fresh)
      local k = tl.rows.rmsnorm { n = 1024 }
      claims_kernel(k)
      assert.truthy(k:lowered_op():print():find("nvvm.cp.async.bulk.shared.cluster.global", 1, true))
      -- (the examples' tile: 8192; rows of 8192 take the one branch, shorter ones the other)
      claims_runs(fresh, { { "rmsnorm", { 7, 8192 }, 2 }, { "softmax", { 5, 8192 }, 2 }, { "layernorm", { 5, 8192 }, 2 },
                           { "softmax", { 9, 4101 }, 2 }, { "layernorm", { 11, 515 }, 3 }, { "rmsnorm", { 7, 1000 }, 2 } },
        61, "shared ring, claims, one branch a row")
    end)
  end)

  it("LayerNorm of rows far from 0 (f32, 1000 + [-1, 1)), both forms: the exact statistics on full rows and on rows shorter than the tile (masked, not (n - N) mean^2 subtracted), rows claimed by several CTAs, two rows ahead", function()
    local tl = require "tilua"
    for _, o in ipairs { false, { registers = 2, claims = 1 } } do
      tl.options.row_ring = o or nil
      local ok, err = pcall(function()
        local fresh = assert(loadfile "examples/tile_rows.lua")("--library")
        -- (E[x^2] - mean^2 unshifted: Rstd off by 0.2-0.5; (n - N) mean^2 subtracted: 0.4)
        claims_runs(fresh, { { "layernorm_offset", { 4, 2048 }, 2 }, { "layernorm_offset", { 7, 777 }, 3 },
                             { "layernorm_1pass_offset", { 4, 2048 }, 2 }, { "layernorm_1pass_offset", { 7, 777 }, 3 } },
          41, o and "two rows ahead" or "claims")
      end)
      tl.options.row_ring = nil
      assert(ok, err)
    end
  end)

  it("claims published an iteration later (row_ring.late = 1; K = 1, 2, 4 and two rows ahead): several CTAs lapping; the counter back to 0; protocol clean", function()
    for _, o in ipairs { { claims = 1, late = 1 }, { claims = 2, late = 1 }, { claims = 4, late = 1 },
                         { registers = 2, claims = 1, late = 1 } } do
      with_ring(o, function(fresh)
        claims_runs(fresh, { { "rmsnorm", { 11, 300 }, 1 }, { "rmsnorm", { 5, 1024 }, 3 }, { "softmax", { 9, 4101 }, 2 },
                             { "row_copy", { 17, 1030 }, 3 } }, 31, ("late, claims = %d, registers = %s"):format(o.claims, tostring(o.registers)))
        claims_protocol(fresh, "row_copy", { 9, 1024 })
      end)
    end
  end)
end)
