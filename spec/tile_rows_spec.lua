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
    assert.matches("tl.options.row_ring must be nil, false or {per_sm = n, in_flight = bytes, hoist = 0..2, registers = 0..4, async = 0..8, bulk = 0..8, claims = 0|1|2|4, stream = 0..2, late = 0|1, store = 0..2, whole = 0|1, refill = 0|1}", err, 1, true)
    assert.is_nil(tl.options.row_ring)
  end)

  it("the row loop's default form (s15norm, s16norm, s17): the shared ring of rows claimed, 3 stages of 8192 bf16, for a program that loads its row, reduces it and loads at most one other tile (RMSNorm, softmax) or other tiles all hoisted under a quarter of the registers (LayerNorm's W and B: then whole, 2 stages); the register loop otherwise (LayerNorm in one pass, a row copy) or where a ring of 2 stages does not fit", function()
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
    assert.equal(2, stages) -- (W and B hoisted: 64 KiB in flight an SM, s17)
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

  it("the shared ring's refill (row_ring.refill): at the first reduce's barrier by the rule where the body has two reduces and loads only its row (softmax: a barrier a row fewer), behind its own barrier with refill = 0 and elsewhere (LayerNorm, RMSNorm); forced where the body has two barriers (LayerNorm), one (RMSNorm: a barrier at the body's end) or none (a row copy: the refill behind a barrier at the end); the emulator's race check clean on each", function()
    local tl = require "tilua"
    local function barriers(k)
      k:compile()
      local _, n = k.ptx:gsub("bar%.sync", "")
      return n
    end
    -- (the shared ring's setup barrier, then the body's: the stage's and the reduces')
    assert.equal(3, barriers(tl.rows.softmax { n = 8192 }))
    assert.equal(4, barriers(tl.rows.layernorm { n = 8192 })) -- (W and B loaded: the rule keeps the stage's barrier)
    assert.equal(3, barriers(tl.rows.rmsnorm { n = 8192 })) -- (one reduce: likewise)
    for _, t in ipairs { { { refill = 0 }, { softmax = 4 } },
                         { { refill = 1 }, { rmsnorm = 3, layernorm = 3 } },
                         { { registers = 0, refill = 1 }, { row_copy = 2 } } } do
      tl.options.row_ring = t[1]
      local ok, err = pcall(function()
        local fresh = assert(loadfile "examples/tile_rows.lua")("--library") -- (kernels compiled with the option)
        for name, want in pairs(t[2]) do
          if name ~= "row_copy" then assert.equal(want, barriers(tl.rows[name] { n = 8192 }), name) end
          local good, summary = fresh.run_case(name, { seed = 11, emulate = true, size = { 9, 2000 }, ctas = 1 })
          assert(good, summary)
          good, summary = fresh.run_case(name, { seed = 12, emulate = true, size = { 5, 300 }, ctas = 1, check = true,
                                                 max_states = 2000 })
          assert(good, summary)
        end
      end)
      tl.options.row_ring = nil
      assert(ok, err)
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
    -- (the shared rings' rule: tl.options.mask_branch = false takes it off),
    -- in 2 stages since s17 (64 KiB in flight an SM);
    -- RMSNorm's and softmax's have no such mask, the option changes nothing
    local function ptx_mb(k, mb)
      tl.options.mask_branch = mb
      local ok, ptx = pcall(ptx_with, k, nil)
      tl.options.mask_branch = nil
      assert(ok, ptx)
      return ptx
    end
    local ln_default = ptx_with(ln, nil)
    assert.equal(ln_default, ptx_with(ln, { registers = 0, claims = 1, hoist = 1, whole = 1, in_flight = 65536 }))
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

  it("the protocol checker is clean on a reduction across warps and a loop carrying tiles", function()
    for _, t in ipairs { { "rmsnorm", { 2, 300 } }, { "layernorm_bwd", { 9, 100 } } } do
      local ok, report = ex.run_case(t[1], { seed = 5, emulate = true, size = t[2], check = true, max_states = 2000 })
      assert(ok, report)
    end
  end)
end)