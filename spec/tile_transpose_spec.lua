-- The transposes of stdlib/transpose.lua (tl.rows.transpose) on the CPU
-- emulator: the TMA form (16-bit, 32-bit and byte elements), the pairs form, the
-- programs claimed at run time, ragged edges, 1 to 3 CTAs lapping the ring, each
-- against its CPU reference; protocol clean; the launch's fallback through the
-- registers. Apart from spec/tile_rows_spec.lua so that ctest runs them at once.
local RH = dofile "spec/rows_helper.lua"
local claims_kernel, claims_runs, claims_protocol = RH.claims_kernel, RH.claims_runs, RH.claims_protocol

describe("tl.rows.transpose on the emulator", function()
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
end)
