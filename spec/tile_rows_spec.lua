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

  it("the row loop by default (RMSNorm, softmax, LayerNorm: the shared ring, rows claimed; LayerNorm's mask one branch a thread): one CTA walks every row, ragged and aligned rows", function()
    -- (LayerNorm 3 x 8000 of a tile of 8192: threads whose part of the row lies
    -- inside it and threads past it, both sides of the mask branch)
    for _, t in ipairs { { "rmsnorm", { 11, 300 } }, { "softmax", { 9, 4101 } }, { "layernorm", { 10, 2048 } }, { "layernorm", { 3, 8000 } } } do
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
    assert.matches("tl.options.row_ring must be nil, false or {per_sm = n, in_flight = bytes, hoist = 0..2, registers = 0..4, async = 0..8, bulk = 0..8, claims = 0|1|2|4, stream = 0..2, late = 0|1, store = 0..2, whole = 0|1}", err, 1, true)
    assert.is_nil(tl.options.row_ring)
  end)

  it("the row loop's default form (s15norm, s16norm): the shared ring of rows claimed, 3 stages of 8192 bf16, for a program that loads its row, reduces it and loads at most one other tile (RMSNorm, softmax) or other tiles all hoisted under a quarter of the registers (LayerNorm's W and B: then whole); the register loop otherwise (LayerNorm in one pass, a row copy) or where a ring of 2 stages does not fit", function()
    local tl = require "tilua"
    -- (the ring's stages: the kernel's shared bytes over a row's, the
    -- barriers, slots and reductions' buffers less than a row)
    local function form(k, n)
      k:compile()
      local ir = k:lowered_op():print()
      local ring = ir:find("nvvm.cp.async.bulk.shared.cluster.global", 1, true) ~= nil
      assert.equal(4, k:lowered_op():attr_or_default("tileas.launch").workspace_bytes) -- (rows claimed either way)
      return ring, k:lowered_op():attr_or_default("shared_bytes") // (2 * n)
    end
    local ring, stages = form(tl.rows.rmsnorm { n = 8192 }, 8192)
    assert.is_true(ring)
    assert.equal(3, stages)
    ring, stages = form(tl.rows.softmax { n = 8192 }, 8192)
    assert.is_true(ring)
    assert.equal(3, stages)
    assert.equal(8, select(2, form(tl.rows.softmax { n = 1024 }, 1024))) -- (8 stages at most)
    ring, stages = form(tl.rows.layernorm { n = 8192 }, 8192)
    assert.is_true(ring)
    assert.equal(3, stages)
    -- (one pass: its load of X[row, 0] depends on the program, not hoisted)
    assert.is_false((form(tl.rows.layernorm { n = 8192, one_pass = true }, 8192)))
    -- (W and B not hoisted, or an eighth in all: the register loop)
    for _, h in ipairs { 0, 2 } do
      tl.options.row_ring = { hoist = h }
      local okh, errh = pcall(function() assert.is_false((form(tl.rows.layernorm { n = 8192 }, 8192))) end)
      tl.options.row_ring = nil
      assert(okh, errh)
    end
    -- a form chosen (a key of the form in tl.options.row_ring): as chosen
    tl.options.row_ring = { registers = 1 }
    local ok1, err1 = pcall(function() assert.is_false((form(tl.rows.rmsnorm { n = 8192 }, 8192))) end)
    tl.options.row_ring = { in_flight = 4 * 2 * 16384 } -- (not a key of the form: the default form, 4 stages)
    local ok2, err2 = pcall(function() assert.equal(4, select(2, form(tl.rows.rmsnorm { n = 8192 }, 8192))) end)
    tl.options.row_ring = nil
    assert(ok1, err1)
    assert(ok2, err2)
  end)

  it("the row rule's units (tileas-assign-layouts): 8 bytes a thread's access for a row copy of >= 64 bytes a thread, 16 for rows with arithmetic; tl.options.blocked_unit forces 4, 8 or 16", function()
    local tl = require "tilua"
    local function widths(k) -- the vector widths of the kernel's global loads and stores
      local ptx, w = k:compile(), {}
      for op, v in ptx:gmatch "(%a+)%.global[%w%.:_]*%.(v%d)" do w[op .. "." .. v] = true end
      return w
    end
    local function row_copy(n) return ex.cases.row_copy.build { n = n } end -- (4 warps)
    local copy = widths(row_copy(8192)) -- 128 bytes a thread, moved unchanged
    assert.is_true(copy["ld.v2"] and copy["st.v2"])
    assert.is_nil(copy["ld.v4"] or copy["st.v4"])
    local short = widths(row_copy(2048)) -- 32 bytes a thread: 16-byte units
    assert.is_true(short["ld.v4"] and short["st.v4"])
    local norm = widths(tl.rows.rmsnorm { n = 8192 }) -- arithmetic on the row: 16-byte units
    assert.is_true(norm["ld.v4"] and norm["st.v4"])
    assert.is_nil(norm["ld.v2"] or norm["st.v2"])
    tl.options.blocked_unit = 8
    local eight = widths(tl.rows.rmsnorm { n = 8192 })
    tl.options.blocked_unit = nil
    assert.is_true(eight["ld.v2"] and eight["st.v2"])
    assert.is_nil(eight["ld.v4"] or eight["st.v4"])
    local ok, err = pcall(function() tl.options.blocked_unit = 3 end)
    assert.is_false(ok)
    assert.matches("tl.options.blocked_unit must be nil, 4, 8 or 16", err, 1, true)
    -- each unit on the emulator, one CTA walking every row (the register loop), ragged rows
    for _, t in ipairs { { "rmsnorm", { 7, 8190 }, 4 }, { "layernorm", { 6, 777 }, 8 }, { "softmax", { 5, 4101 }, 8 } } do
      tl.options.blocked_unit = t[3]
      local ran, good, summary = pcall(function()
        local fresh = assert(loadfile "examples/tile_rows.lua")("--library")
        return fresh.run_case(t[1], { seed = 5, emulate = true, size = t[2], ctas = 1 })
      end)
      tl.options.blocked_unit = nil
      assert(ran, good)
      assert(good, summary)
    end
  end)

  it("the register loop's rows in one branch a row (row_ring.whole = 1): full rows, ragged and unaligned ones", function()
    local tl = require "tilua"
    local function v4(k) return select(2, k:compile():gsub("ld%.global%.v4", "")) end
    tl.options.row_ring = { registers = 1 } -- (the register loop: RMSNorm's default is the shared ring)
    local each = v4(tl.rows.rmsnorm { n = 8192 }) -- (4 vectors of the next row before the loop and in it, W's 4)
    tl.options.row_ring = { whole = 1 }
    local ok, err = pcall(function()
      assert.equal(12, each)
      assert.equal(20, v4(tl.rows.rmsnorm { n = 8192 })) -- (and the rows' 8 again on the one branch a row)
      for _, t in ipairs { { "rmsnorm", { 3, 8192 } }, { "layernorm", { 3, 8192 } }, { "softmax", { 5, 8192 } },
                           { "rmsnorm", { 7, 8190 } }, { "layernorm", { 6, 8000 } }, { "rmsnorm", { 3, 8192 }, 8 },
                           { "layernorm", { 3, 8192 }, 8 } } do
        tl.options.blocked_unit = t[3]
        local fresh = assert(loadfile "examples/tile_rows.lua")("--library")
        local good, summary = fresh.run_case(t[1], { seed = 5, emulate = true, size = t[2], ctas = 1 })
        tl.options.blocked_unit = nil
        assert(good, summary)
      end
    end)
    tl.options.row_ring, tl.options.blocked_unit = nil, nil
    assert(ok, err)
  end)

  it("the shared row ring (row_ring.registers = 0): one CTA walks every row, ragged and aligned; protocol clean", function()
    local tl = require "tilua"
    local k0 = tl.rows.layernorm { n = 1024, one_pass = true }
    k0:compile()
    assert.is_nil(k0:lowered_op():print():find("mbarrier", 1, true)) -- (LayerNorm in one pass by default: rows in registers)
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

  -- (the claims' tests below) a kernel with claims: its counter's workspace,
  -- the atomic, ptxas; each {case, size, CTAs} on the emulator (the counter
  -- back to 0 after each launch); the protocol checker exploring the claims
  local function claims_kernel(k)
    k:compile()
    assert.equal(4, k:lowered_op():attr_or_default("tileas.launch").workspace_bytes)
    assert.truthy(k.ptx:find("atom.gpu.global.add.u32", 1, true))
    dofile("spec/helper.lua").assert_ptxas(k.ptx)
  end
  local function claims_runs(fresh, cases, seed, what)
    for _, t in ipairs(cases) do
      local good, summary = fresh.run_case(t[1], { seed = seed, emulate = true, size = t[2], ctas = t[3] })
      assert(good, ("%s, %d CTAs: %s"):format(what, t[3], summary))
    end
  end
  local function claims_protocol(fresh, name, size)
    local good, report = fresh.run_case(name, { seed = 5, emulate = true, size = size, ctas = 2, check = true,
                                                claims = "dynamic", max_states = 4000 })
    assert(good, report)
  end

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

  -- the register loop with row_ring[key] = 1, 2: each hint in its PTX, ptxas, the emulator
  local function hinted(key, hints)
    local tl = require "tilua"
    for st, hint in ipairs(hints) do
      tl.options.row_ring = { [key] = st }
      local ok, err = pcall(function()
        local fresh = assert(loadfile "examples/tile_rows.lua")("--library")
        local k = tl.rows.rmsnorm { n = 1024 }
        k:compile()
        assert.truthy(k.ptx:find(hint, 1, true))
        dofile("spec/helper.lua").assert_ptxas(k.ptx)
        local good, summary = fresh.run_case("rmsnorm", { seed = 3, emulate = true, size = { 7, 1000 }, ctas = 2 })
        assert(good, summary)
      end)
      tl.options.row_ring = nil
      assert(ok, err)
    end
  end
  it("the register loop's loads of the rows ahead with cache hints (row_ring.stream = 1: L1::no_allocate, 2: .cs)", function()
    hinted("stream", { "ld.global.L1::no_allocate.v4.b32", "ld.global.cs.v4.b32" })
  end)
  it("the register loop's stores with cache hints (row_ring.store = 1: .cs, 2: .cg)", function()
    hinted("store", { "st.global.cs.v4.b32", "st.global.cg.v4.b32" })
  end)

  it("the register loop's hoisting budget: LayerNorm's W and B both before the loop at 8192 (no load after its last barrier), B a row with hoist = 2 or two rows ahead; RMSNorm's W as before; LayerNorm's default (s16norm) the shared ring of s16norm-1's form with the mask branch", function()
    local tl = require "tilua"
    local function ptx_with(k, opts)
      tl.options.row_ring = opts
      local ok, ptx = pcall(k.compile, k)
      tl.options.row_ring = nil
      assert(ok, ptx)
      -- (without its source lines: a compile may come from the cache, of the
      -- same IR built at another line)
      return (ptx:gsub("\n%s*%.loc [^\n]*", ""):gsub("\n%.file [^\n]*", ""))
    end
    local function loads_after_last_barrier(ptx)
      local n = 0
      for line in ptx:gmatch "[^\n]+" do
        if line:find("bar.sync", 1, true) then n = 0 elseif line:find("ld.global", 1, true) then n = n + 1 end
      end
      return n
    end
    local ln = tl.rows.layernorm { n = 8192 }
    local default = ptx_with(ln, { registers = 1 }) -- (the register loop: LayerNorm's default before s16norm)
    assert.equal(0, loads_after_last_barrier(default))
    assert.equal(default, ptx_with(ln, { registers = 1, hoist = 1 }))
    assert.is_true(loads_after_last_barrier(ptx_with(ln, { registers = 1, hoist = 2 })) > 0) -- (B's loads: the budget before s11norm-2)
    assert.is_true(loads_after_last_barrier(ptx_with(ln, { registers = 2, claims = 1 })) > 0) -- (W alone two rows ahead)
    -- LayerNorm's default: the form s16norm-1 measured, with the mask branch
    -- (the shared rings' rule: tl.options.mask_branch = false takes it off);
    -- RMSNorm's and softmax's have no such mask, the option changes nothing
    local function ptx_mb(k, mb)
      tl.options.mask_branch = mb
      local ok, ptx = pcall(ptx_with, k, nil)
      tl.options.mask_branch = nil
      assert(ok, ptx)
      return ptx
    end
    local ln_default = ptx_with(ln, nil)
    assert.equal(ln_default, ptx_with(ln, { registers = 0, claims = 1, hoist = 1, whole = 1, in_flight = 98304 }))
    assert.are_not.equal(ln_default, ptx_mb(ln, false))
    local sm = tl.rows.softmax { n = 8192 }
    assert.equal(ptx_with(sm, nil), ptx_mb(sm, false))
    local rms = tl.rows.rmsnorm { n = 8192 }
    assert.equal(ptx_with(rms, nil), ptx_mb(rms, false))
    for _, o in ipairs { {}, { per_sm = 3 }, { registers = 2, claims = 1 } } do
      local with2 = {}
      for key, v in pairs(o) do with2[key] = v end
      with2.hoist = 2
      assert.equal(ptx_with(rms, next(o) and o or nil), ptx_with(rms, with2))
    end
  end)

  it("the protocol checker is clean on the row loop lapped by one CTA", function()
    local ok, report = ex.run_case("rmsnorm", { seed = 5, emulate = true, size = { 11, 300 }, ctas = 1, check = true,
                                                max_states = 2000 })
    assert(ok, report)
  end)

  it("the transpose by TMA (transpose.lua): CTAs lapping the input ring, ragged edges, its variants; protocol clean", function()
    local tl = require "tilua"
    local function form(k)
      k:compile()
      local params = table.concat(k:lowered_op():attr "tileas.params", ",")
      return params:find("map:X", 1, true) and "tma" or "registers", k:lowered_op():attr_or_default "tileas.launch"
    end
    -- (s14tr-3) the rule: 16-bit tiles of 64 and 128 in the pairs form (pointers, a CTA a tile); the TMA form by name
    for _, n in ipairs { 64, 128 } do
      local fp, lp = form(tl.rows.transpose { n = n, warps = n // 16 })
      assert.equal("registers", fp)
      assert.is_true(lp.linear)
    end
    tl.options.tile_transpose = { form = "tma" }
    local f, launch = form(tl.rows.transpose { n = 64 })
    tl.options.tile_transpose = nil
    assert.equal("tma", f)
    assert.equal(1, launch.per_sm) -- (the default of 64: 6 stages, 2 output tiles, 1 CTA an SM)
    assert.same({ "X", "Y" }, launch.transpose)
    assert.equal("registers", (form(tl.rows.transpose { n = 32 }))) -- (no multiple of the 64-element box)
    -- (s14) 32-bit elements in boxes of 32 x 32, 8-bit in boxes of 128 x 128: n a multiple of those
    assert.equal("registers", (form(tl.rows.transpose { n = 64, elem = tl.f32 }))) -- (the rule: 32-bit through the registers)
    -- (s14tr-2) but a tile the exchange cannot hold in 48 KiB of shared memory (f32 at 128: 64 KiB) by TMA;
    -- the exchange asked for by name still refuses it
    assert.equal("tma", (form(tl.rows.transpose { n = 128, elem = tl.f32, warps = 8 })))
    tl.options.tile_transpose = { form = "registers" }
    local big_ok, big_err = pcall(form, tl.rows.transpose { n = 128, elem = tl.f32, warps = 8 })
    tl.options.tile_transpose = nil
    assert.is_false(big_ok)
    assert.matches("moving a 128 x 128 tile between threads needs 65536 bytes", tostring(big_err), 1, true)
    tl.options.tile_transpose = { form = "tma" }
    assert.equal("tma", (form(tl.rows.transpose { n = 64, elem = tl.f32 })))
    assert.equal("tma", (form(tl.rows.transpose { n = 32, elem = tl.f32, warps = 2 })))
    tl.options.tile_transpose = nil
    assert.equal("tma", (form(tl.rows.transpose { n = 128, elem = tl.u8 })))
    assert.equal("registers", (form(tl.rows.transpose { n = 64, elem = tl.u8 })))
    assert.equal("registers", (form(tl.rows.transpose { n = 64, elem = tl.f64 }))) -- (8-byte elements: not lowered by TMA)
    tl.options.tile_transpose = false
    local off = form(tl.rows.transpose { n = 64 })
    tl.options.tile_transpose = { form = "tma", stages = 2, outs = 3, per_sm = 3 }
    local f3, l3 = form(tl.rows.transpose { n = 64 })
    tl.options.tile_transpose = nil
    assert.equal("registers", off)
    assert.equal("tma", f3)
    assert.equal(3, l3.per_sm)
    local ok, err = pcall(function() tl.options.tile_transpose = { ahead = 3 } end)
    assert.is_false(ok)
    assert.matches('nil, false or {stages = n, outs = n, per_sm = n (1 to 16), order = 0|1|2, group = n (1 to 65536), claims = 0|1, early = 0|1, form = "tma"|"pairs"|"registers"}', err, 1, true)
    assert.is_false((pcall(function() tl.options.tile_transpose = { form = "smem" } end)))
    assert.is_false((pcall(function() tl.options.tile_transpose = { group = 0 } end)))
    assert.is_false((pcall(function() tl.options.tile_transpose = { order = 3 } end)))
    -- one to three CTAs walking every program (the ring's stages and the output tiles wrapping), ragged edges
    tl.options.tile_transpose = { form = "tma" }
    local tma_ex = assert(loadfile "examples/tile_rows.lua")("--library") -- (ex's kernels: compiled in the default form)
    for _, t in ipairs { { { 136, 200 }, 1 }, { { 200, 72 }, 2 }, { { 72, 104 }, 3 }, { { 64, 64 }, 1 } } do
      local ran, good, summary = pcall(tma_ex.run_case, "transpose_bf16", { seed = 3, emulate = true, size = t[1], ctas = t[2] })
      assert(ran, good)
      assert(good, summary)
    end
    tl.options.tile_transpose = nil
    -- the programs in bands of tile rows (the last band ragged: 9 rows of tiles in bands of 2 and 4, 4 in
    -- bands of 3), refills before the stores, the diagonal order: every tile once, on 1 to 3 CTAs
    for _, v in ipairs { { { form = "tma", group = 2, early = 1 }, { 520, 200 }, 2 }, { { form = "tma", group = 4, stages = 2 }, { 520, 330 }, 3 },
                         { { form = "tma", group = 3 }, { 200, 330 }, 1 }, { { form = "tma", order = 2 }, { 520, 200 }, 2 },
                         { { form = "tma", order = 2, early = 1 }, { 200, 330 }, 3 } } do
      tl.options.tile_transpose = v[1]
      local ran, good, summary = pcall(function()
        local fresh = assert(loadfile "examples/tile_rows.lua")("--library")
        return fresh.run_case("transpose_bf16", { seed = 6, emulate = true, size = v[2], ctas = v[3] })
      end)
      tl.options.tile_transpose = nil
      assert(ran, good)
      assert(good, summary)
    end
    -- tiles of 128 (four boxes a tile) on 8 and 4 warps, one stage and three output
    -- tiles, the programs walked y fastest
    for _, v in ipairs { { 8, { form = "tma" } }, { 4, { form = "tma", stages = 1, outs = 3, per_sm = 1, order = 1 } } } do
      tl.options.tile_transpose = v[2]
      local ran, good, summary = pcall(function()
        local fresh = assert(loadfile "examples/tile_rows.lua")("--library")
        fresh.cases.transpose_bf16.build = function()
          return tl.rows.transpose { n = 128, warps = v[1], name = "transpose_128" }
        end
        fresh.cases.transpose_bf16.grid = function(_, M, N) return { (M + 127) // 128, (N + 127) // 128 } end
        return fresh.run_case("transpose_bf16", { seed = 4, emulate = true, size = { 264, 136 }, ctas = 2 })
      end)
      tl.options.tile_transpose = nil
      assert(ran, good)
      assert(good, summary)
    end
    tl.options.tile_transpose = { form = "tma" }
    local ran, good, report = pcall(tma_ex.run_case, "transpose_bf16", { seed = 5, emulate = true, size = { 136, 72 }, ctas = 2, check = true,
                                                                         max_states = 2000 })
    tl.options.tile_transpose = nil
    assert(ran, good)
    assert(good, report)
  end)

  -- a transpose of elem e, tiles of n on `warps` warps, with tile_transpose =
  -- opt, on the emulator at size (ctas: a persistent grid's CTAs): the kernel
  -- and run_case's verdict
  local function transposed(e, n, warps, opt, size, ctas)
    local tl = require "tilua"
    tl.options.tile_transpose = opt
    local k
    local ran, good, summary = pcall(function()
      local fresh = assert(loadfile "examples/tile_rows.lua")("--library")
      fresh.cases["transpose_" .. e].build = function()
        k = tl.rows.transpose { n = n, elem = tl[e], warps = warps, name = "transpose_" .. e }
        return k
      end
      fresh.cases["transpose_" .. e].grid = function(_, M, N) return { (M + n - 1) // n, (N + n - 1) // n } end
      return fresh.run_case("transpose_" .. e, { seed = 8, emulate = true, size = size, ctas = ctas })
    end)
    tl.options.tile_transpose = nil
    assert(ran, good)
    assert(good, summary)
    return k
  end

  it("the transpose by TMA of 32-bit elements (boxes of 32 x 32) and of bytes (128 x 128): ragged edges, 1 to 3 CTAs lapping the ring, bands and early refills; protocol clean", function()
    local tl = require "tilua"
    for _, v in ipairs { { "f32", 64, { form = "tma" }, { 200, 136 }, 2 }, { "f32", 32, { form = "tma", stages = 2, group = 3, early = 1 }, { 136, 264 }, 3 },
                         { "u8", 128, nil, { 272, 144 }, 2 }, { "u8", 128, { stages = 1, outs = 3, order = 2 }, { 400, 272 }, 3 } } do
      local k = transposed(v[1], v[2], v[2] // 16, v[3], v[4], v[5])
      assert.equal("map:X", k:lowered_op():attr("tileas.params")[1])
    end
    for _, e in ipairs { "f32", "u8" } do
      tl.options.tile_transpose = { form = "tma" }
      local ran, good, report = pcall(function()
        local ex = assert(loadfile "examples/tile_rows.lua")("--library")
        return ex.run_case("transpose_" .. e, { seed = 9, emulate = true, size = e == "u8" and { 144, 272 } or { 72, 104 }, ctas = 2,
                                                check = true, max_states = 2000 })
      end)
      tl.options.tile_transpose = nil
      assert(ran, good)
      assert(good, report)
    end
  end)

  it("the transpose of 16-bit tiles in the pairs form (tile_transpose.form = 'pairs'): a CTA a tile, ragged edges, 2 to 16 warps, bands", function()
    for _, v in ipairs { { 64, 4, nil, { 200, 136 } }, { 64, 2, 2, { 136, 272 } }, { 128, 8, nil, { 264, 136 } },
                         { 128, 16, nil, { 136, 264 } }, { 64, 8, nil, { 64, 64 } } } do
      local k = transposed("bf16", v[1], v[2], { form = "pairs", group = v[3] }, v[4])
      local l = k:lowered_op():attr_or_default "tileas.launch"
      assert.is_true(l.linear)
      assert.same({ "X", "Y" }, l.transpose)
      assert.equal("ptr:X", k:lowered_op():attr("tileas.params")[1])
    end
  end)

  it("the transpose by TMA with its programs claimed at run time (tile_transpose.claims = 1): 1 to 3 CTAs, ragged edges, fewer programs than the CTAs' stages; the counter back to 0; protocol clean", function()
    local tl = require "tilua"
    tl.options.tile_transpose = { form = "tma", claims = 1, stages = 2 }
    local ok, err = pcall(function()
      local fresh = assert(loadfile "examples/tile_rows.lua")("--library")
      claims_kernel(tl.rows.transpose { n = 64 })
      claims_runs(fresh, { { "transpose_bf16", { 136, 200 }, 1 }, { "transpose_bf16", { 200, 72 }, 2 },
                           { "transpose_bf16", { 264, 330 }, 3 }, { "transpose_bf16", { 64, 64 }, 3 } }, 9, "transpose")
      claims_protocol(fresh, "transpose_bf16", { 136, 200 })
    end)
    tl.options.tile_transpose = nil
    assert(ok, err)
  end)

  it("tl.rows.transpose launches its variant through the registers where TMA cannot take the rows; a tile program's launch says why and how to opt out", function()
    local tl = require "tilua"
    local saved = tl.options.emulate
    tl.options.emulate = true
    tl.options.tile_transpose = { form = "tma" } -- (the TMA form by name: 16-bit's default is the pairs form)
    -- X[M, N] (row stride sx), Y[N, M] (row stride sy) through k:run; -> whether Y is X^T
    local function run(k, M, N, sx, sy)
      local x = tl.device.random(tl.bf16, M * sx, M + N)
      local y = tl.device.alloc(tl.bf16, N * sy)
      y:fill(0)
      k:run { grid = { (M + 63) // 64, (N + 63) // 64 },
              args = { X = { buffer = x, shape = { M, N }, strides = { sx, 1 } }, Y = { buffer = y, shape = { N, M }, strides = { sy, 1 } } } }
      local xs, ys = x:to_string(), y:to_string()
      for i = 0, M - 1 do
        for j = 0, N - 1 do
          if xs:sub(2 * (i * sx + j) + 1, 2 * (i * sx + j) + 2) ~= ys:sub(2 * (j * sy + i) + 1, 2 * (j * sy + i) + 2) then return false end
        end
      end
      return true
    end
    local ran, err = pcall(function()
      local k = tl.rows.transpose { n = 64 }
      assert.is_true(run(k, 136, 72, 72, 136)) -- rows of 144 and 272 bytes: TMA
      assert.is_nil(k.fallback())
      assert.is_true(run(k, 100, 136, 136, 104)) -- Y's rows padded to 104 elements: TMA
      assert.is_nil(k.fallback())
      assert.is_true(run(k, 100, 136, 136, 100)) -- Y's rows of 200 bytes: through the registers
      local r = assert(k.fallback())
      assert.matches("ptr:X", table.concat(r:lowered_op():attr "tileas.params", ","), 1, true)
      assert.is_true(run(k, 75, 66, 66, 75)) -- both odd: the same fallback, compiled once
      assert.equal(r, k.fallback())
      -- the same program written by hand: its launch at rows TMA cannot take names the rule and the option
      tl.new_module()
      local h = tl.tile_kernel("hand_transpose", { params = { X = tl.tensor(tl.bf16, 2), Y = tl.tensor(tl.bf16, 2) } })
      h:define(function(_, p)
        local i, j = tl.program_id("x"), tl.program_id("y")
        tl.store(p.Y, { j, i }, tl.transpose(tl.load(p.X, { i, j }, { 64, 64 })))
      end)
      local ok, msg = pcall(run, h, 100, 136, 136, 100)
      assert.is_false(ok)
      assert.matches("launch: tile kernel 'hand_transpose' transposes in 16-byte row pieces (TMA or pairs), which need rows of a multiple of 16 bytes "
        .. "(compiled with tl.options.tile_transpose = false, it goes through the registers at any size): the row stride of Y in "
        .. "16-bit elements is 100, not a multiple of 8", msg, 1, true)
    end)
    tl.options.emulate = saved
    tl.options.tile_transpose = nil
    assert(ran, err)
  end)

  it("the protocol checker is clean on a reduction across warps and a loop carrying tiles", function()
    for _, t in ipairs { { "rmsnorm", { 2, 300 } }, { "layernorm_bwd", { 9, 100 } } } do
      local ok, report = ex.run_case(t[1], { seed = 5, emulate = true, size = t[2], check = true, max_states = 2000 })
      assert(ok, report)
    end
  end)
end)
