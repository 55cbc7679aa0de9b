-- The memory-bound tile programs of stdlib/rows.lua (tl.rows) on the GPU
-- (label gpu: spec/gpu_runner.lua; tools/gpu test runs it): every case of
-- examples/tile_rows.lua -- the tile maths, maps, row and column reductions,
-- softmax, RMSNorm and LayerNorm forward and backward -- on fresh random
-- inputs of ragged sizes (rows shorter than the tile and of odd lengths: the
-- per-element path; row counts that are no multiple of anything) against its
-- CPU reference within the case's tolerance (the precision docs/tileprog.md
-- gives each tile function). Each prints its worst error. Without a GPU the
-- runs report pending.
-- TILUA_SEED fixes the seed; TILUA_SMALL=1 runs the small sizes (tools/gpu sanitize).
local tl = require "tilua"

local GPU = tl.device.available()
local seed = require("tilua.gpu.check").seed() -- ctest fixes it (spec/tests.cmake)
local small = os.getenv "TILUA_SMALL" == "1"
print(("tile_rows_gpu: seed %d"):format(seed))

local ex = assert(loadfile "examples/tile_rows.lua")("--library")

describe("memory-bound tile programs (tl.rows) on the GPU", function()
  -- (every kernel's PTX through ptxas: example.tile_rows, which compiles them all)

  -- the row loop (convert-tileas-to-cutlass: a persistent grid of 2 CTAs an
  -- SM; by default RMSNorm, softmax and (s16norm) LayerNorm on the shared ring
  -- with their rows claimed, 3 stages of the tile's row of 8192 (LayerNorm 2): 792 rows
  -- static on an H200, the rest claimed; LayerNorm's W and B hoisted, its mask
  -- one branch a thread): far more rows than CTAs, so that each CTA walks
  -- several programs; odd lengths and aligned ones; LayerNorm's rows of 8000
  -- of 8192 and of 2000 of 2048 (f32, far from 0) on both sides of the mask
  -- branch (threads whose part of the row lies inside it, threads past it)
  for j, t in ipairs { { "rmsnorm", { 2300, 520 } }, { "softmax", { 2300, 512 } }, { "layernorm", { 2200, 515 } },
                       { "rmsnorm", { 800, 8192 } }, { "layernorm", { 300, 8000 } }, { "layernorm_offset", { 700, 2000 } } } do
    if ex.cases[t[1]] and not small then
      it(("%s, %d x %d (the row loop, CTAs lapping): the CPU reference"):format(t[1], t[2][1], t[2][2]), function()
        if not GPU then pending("no GPU: " .. tl.device.error()) return end
        local ok, summary = ex.run_case(t[1], { seed = seed + 7 * j, size = t[2] })
        print("tile_rows_gpu: " .. summary)
        assert(ok, summary)
      end)
    end
  end

  -- the same with the shared ring (tl.options.row_ring.registers = 0: thread 0
  -- copies the rows stages ahead by cp.async.bulk) and with the cp.async ring
  -- (row_ring.async = S: each thread copies its own chunks of the rows S - 1
  -- programs ahead): {case, size, tl.options.row_ring, what}. Each CTA laps
  -- its ring (more programs than stages: 264 CTAs on an H200's 132 SMs at 2
  -- an SM, 132 at per_sm = 1), at sizes whose host side (the random inputs,
  -- the CPU reference: under a microsecond an element) stays a few seconds a
  -- case: the full rows (8190 and 4101 of a tile of 8192) on one CTA an SM,
  -- 300 and 600 rows (2.3 and 4.5 programs a CTA), not thousands.
  -- And the register loop with the rows claimed at run time (row_ring.claims
  -- = K: an atomic counter in the kernel's workspace, K rows a claim): more
  -- rows than the CTAs' static chunks (3 x grid rows for K = 1, 4 x grid for
  -- 2 and 4 chunks of 2 or 4), so that rows are claimed; ragged rows, a last
  -- chunk of fewer than K rows; each kernel launched twice on fresh inputs
  -- (5th entry: the second launch's rows are right only if the first put the
  -- counter back to 0; examples/tile_rows.lua keeps the kernel and its workspace)
  local shared, async = "the shared row ring", "the cp.async row ring of %d"
  local claimed = "the register loop, rows claimed %d at a time"
  local bulk = "the shared ring of %d with bulk stores"
  local rings = {
    { "rmsnorm", { 2300, 520 }, { registers = 0 }, shared }, { "softmax", { 2300, 512 }, { registers = 0 }, shared },
    { "layernorm", { 2200, 515 }, { registers = 0 }, shared },
    { "rmsnorm", { 2300, 520 }, { async = 3 }, async }, { "softmax", { 2300, 512 }, { async = 3 }, async },
    { "layernorm", { 2200, 515 }, { async = 3 }, async }, { "rmsnorm", { 300, 8190 }, { async = 2, per_sm = 1 }, async },
    { "row_copy", { 900, 2000 }, { async = 3 }, async }, { "softmax", { 600, 4101 }, { async = 4, per_sm = 1 }, async },
    { "rmsnorm", { 850, 520 }, { claims = 1 }, claimed, 2 }, { "softmax", { 700, 512 }, { claims = 2, per_sm = 1 }, claimed, 2 },
    { "layernorm", { 701, 515 }, { claims = 4, per_sm = 1 }, claimed, 2 },
    -- two rows ahead (registers = 2, claims of one row: 4 static rows a CTA),
    -- LayerNorm in one pass, the loads with cache hints (stream)
    { "rmsnorm", { 1130, 520 }, { registers = 2, claims = 1 }, claimed .. ", two rows ahead", 2 },
    { "softmax", { 600, 4101 }, { registers = 2, claims = 1, per_sm = 1 }, claimed .. ", two rows ahead", 2 },
    { "layernorm_1pass", { 1101, 515 }, { registers = 2, claims = 1 }, claimed .. ", two rows ahead", 2 },
    { "layernorm_1pass", { 850, 515 }, { claims = 1 }, claimed, 2 },
    { "rmsnorm", { 850, 520 }, { claims = 1, stream = 1 }, claimed .. ", loads L1::no_allocate", 1 },
    { "softmax", { 850, 512 }, { claims = 1, stream = 2 }, claimed .. ", loads .cs", 1 },
    { "rmsnorm", { 850, 520 }, { claims = 1, late = 1 }, claimed .. ", published late", 2 },
    { "layernorm_1pass", { 1101, 515 }, { registers = 2, claims = 1, late = 1 }, claimed .. ", two rows ahead, published late", 2 },
    { "softmax", { 701, 512 }, { claims = 4, late = 1, per_sm = 1 }, claimed .. ", published late", 2 },
    -- the stores with cache hints (row_ring.store)
    { "rmsnorm", { 850, 520 }, { claims = 1, store = 1 }, claimed .. ", stores .cs", 1 },
    { "layernorm", { 850, 515 }, { claims = 1, store = 2 }, claimed .. ", stores .cg", 1 },
    -- (s11) the shared ring with bulk stores (row_ring.bulk = S: each row
    -- written back into its stage, one bulk copy a row to Y)
    { "rmsnorm", { 2300, 520 }, { bulk = 3 }, bulk }, { "softmax", { 2300, 512 }, { bulk = 3 }, bulk },
    { "layernorm", { 2200, 515 }, { bulk = 3 }, bulk }, { "layernorm_1pass", { 1101, 515 }, { bulk = 2 }, bulk },
    { "row_copy", { 900, 2000 }, { bulk = 4 }, bulk }, { "rmsnorm", { 300, 8190 }, { bulk = 4, per_sm = 1 }, bulk },
    { "softmax", { 600, 4101 }, { bulk = 3, per_sm = 1 }, bulk, 2 },
    { "rmsnorm", { 1300, 520 }, { bulk = 3, claims = 1 }, bulk .. ", rows claimed", 2 },
    { "layernorm", { 1201, 515 }, { bulk = 4, claims = 1, hoist = 1 }, bulk .. ", rows claimed, W and B hoisted", 2 },
    { "row_copy", { 900, 2000 }, { bulk = 3, claims = 1 }, bulk .. ", rows claimed", 2 },
    { "layernorm", { 850, 515 }, { claims = 1, hoist = 1 }, claimed .. ", W and B hoisted", 1 },
    -- (s11norm-2: W and B hoisted is the register loop's default at a tile of
    -- 8192 on 8 warps; hoist = 2, the budget before, loads B a row)
    { "layernorm", { 850, 515 }, { claims = 1, hoist = 2 }, claimed .. ", B a row (hoist 2)", 1 },
    -- (s14) one branch a row for the register loop's loads and stores
    -- (row_ring.whole = 1): full rows (every vector at once) and ragged ones
    { "rmsnorm", { 300, 8192 }, { claims = 1, whole = 1 }, claimed .. ", one branch a row", 1 },
    { "layernorm", { 290, 8192 }, { claims = 1, whole = 1 }, claimed .. ", one branch a row", 1 },
    { "softmax", { 300, 8192 }, { claims = 1, whole = 1 }, claimed .. ", one branch a row", 1 },
    { "softmax", { 600, 4101 }, { claims = 1, whole = 1 }, claimed .. ", one branch a row", 1 },
    -- (s15) the shared ring with its rows claimed at run time (row_ring =
    -- {registers = 0, claims = 1}: bulk copies in, the threads' stores out; a
    -- refill a claim): more rows than the CTAs' static stages (4 x grid at a
    -- tile of 8192, 2 x grid at in_flight = 64 KiB, 3 x grid at 96 KiB; the
    -- row copy's tile of 2048 at 16 KiB: 2), ragged rows, launched twice
    { "rmsnorm", { 2300, 520 }, { registers = 0, claims = 1 }, shared .. ", rows claimed", 2 },
    { "softmax", { 1300, 512 }, { registers = 0, claims = 1, in_flight = 65536 }, shared .. " of 2, rows claimed", 2 },
    { "layernorm", { 1201, 515 }, { registers = 0, claims = 1, hoist = 1 }, shared .. ", rows claimed, W and B hoisted", 2 },
    { "layernorm_1pass", { 1101, 515 }, { registers = 0, claims = 1, in_flight = 98304 }, shared .. " of 3, rows claimed", 1 },
    { "rmsnorm", { 600, 8190 }, { registers = 0, claims = 1, in_flight = 65536 }, shared .. " of 2, rows claimed", 1 },
    { "row_copy", { 900, 2000 }, { registers = 0, claims = 1, in_flight = 16384 }, shared .. " of 2, rows claimed", 2 },
    -- (s15) the stage's reads in one branch a row (whole = 1): full rows
    -- (every vector from the stage at once), ragged ones (the tail from the
    -- tensor), a tile of 515 (the ragged branch alone)
    { "softmax", { 800, 8192 }, { registers = 0, claims = 1, whole = 1, in_flight = 98304 }, shared .. " of 3, rows claimed, one branch a row", 1 },
    { "rmsnorm", { 600, 8190 }, { registers = 0, claims = 1, whole = 1, in_flight = 98304 }, shared .. " of 3, rows claimed, one branch a row", 1 },
    { "layernorm", { 1201, 515 }, { registers = 0, claims = 1, hoist = 1, whole = 1 }, shared .. ", rows claimed, W and B hoisted, one branch a row", 1 },
  }
  for j, t in ipairs(rings) do
    if ex.cases[t[1]] and not small then
      local what = t[4]:format(t[3].async or t[3].bulk or t[3].claims) .. (t[3].per_sm and (", %d CTA an SM"):format(t[3].per_sm) or "")
        .. (t[5] and (", launched %d times"):format(t[5]) or "")
      it(("%s, %d x %d (%s, CTAs lapping it): the CPU reference"):format(t[1], t[2][1], t[2][2], what), function()
        if not GPU then pending("no GPU: " .. tl.device.error()) return end
        tl.options.row_ring = t[3]
        local fresh = assert(loadfile "examples/tile_rows.lua")("--library")
        local t0 = os.clock()
        local ran, ok, summary = pcall(function()
          local good, s
          for r = 1, t[5] or 1 do
            good, s = fresh.run_case(t[1], { seed = seed + 11 * j + 1000 * (r - 1), size = t[2] })
            if not good then return false, ("launch %d: %s"):format(r, s) end
          end
          return true, s
        end)
        tl.options.row_ring = nil
        assert(ran, ok)
        print(("tile_rows_gpu: %s: %s (%.1f s of CPU)"):format(what, summary, os.clock() - t0))
        assert(ok, summary)
      end)
    end
  end

  -- (s14) units of 8 and 4 bytes forced on the rows with arithmetic (the
  -- row rule gives 8 to row copies only: tl.options.blocked_unit), CTAs
  -- lapping the register loop
  local units = { { "rmsnorm", { 2300, 520 }, 8 }, { "layernorm", { 2200, 515 }, 4 }, { "softmax", { 600, 4101 }, 8 },
                  { "layernorm_1pass", { 300, 8000 }, 8 }, { "rmsnorm_bwd", { 50, 4000 }, 8 } }
  for j, t in ipairs(units) do
    if ex.cases[t[1]] and not small then
      it(("%s, %d x %d (units of %d bytes): the CPU reference"):format(t[1], t[2][1], t[2][2], t[3]), function()
        if not GPU then pending("no GPU: " .. tl.device.error()) return end
        tl.options.blocked_unit = t[3]
        local ran, ok, summary = pcall(function()
          local fresh = assert(loadfile "examples/tile_rows.lua")("--library")
          return fresh.run_case(t[1], { seed = seed + 23 * j, size = t[2] })
        end)
        tl.options.blocked_unit = nil
        assert(ran, ok)
        print(("tile_rows_gpu: units of %d bytes: %s"):format(t[3], summary))
        assert(ok, summary)
      end)
    end
  end

  -- the transpose by TMA (transpose.lua; by name: 16-bit's default is the pairs
  -- form, its cases below): far more programs than CTAs (the
  -- input ring and the output tiles wrapping), ragged edges; tiles of 128;
  -- other stages and CTAs an SM; and bf16 through the registers
  -- (tl.options.tile_transpose = false) at rows TMA cannot take. At 1500 x
  -- 1000 Y's rows (3000 bytes) are no multiple of 16: tl.rows.transpose
  -- launches its variant through the registers instead
  local tr = {
    { "tiles of 64", { 2000, 1032 }, 64, 4, { form = "tma" } },
    { "tiles of 128", { 2056, 1544 }, 128, 8, { form = "tma" } },
    { "tiles of 64, 8 stages, 1 CTA an SM, y fastest", { 1496, 1000 }, 64, 4, { form = "tma", stages = 8, outs = 2, per_sm = 1, order = 1 } },
    { "tiles of 64, 8 stages, 1 CTA an SM, y fastest, rows of 3000 bytes (the fallback)", { 1500, 1000 }, 64, 4,
      { form = "tma", stages = 8, outs = 2, per_sm = 1, order = 1 } },
    { "tiles of 128, 1 stage, 3 outputs, 4 warps, 1 CTA an SM", { 1544, 2056 }, 128, 4, { form = "tma", stages = 1, outs = 3, per_sm = 1 } },
    { "through the registers, odd rows", { 1001, 1500 }, 64, 4, false },
    -- (programs claimed: more tiles than the CTAs' static stages, 132 x 2 and 132 x 1 on an H200)
    { "tiles of 64, programs claimed, 2 stages", { 2000, 1032 }, 64, 4, { form = "tma", claims = 1, stages = 2 } },
    { "tiles of 128, programs claimed, 1 stage", { 2056, 1544 }, 128, 8, { form = "tma", claims = 1, stages = 1 } },
    -- (s14: the programs in bands of tile rows, the last band ragged (32 rows of tiles in bands of 3;
    -- 17 in bands of 4), refills before the stores; the diagonal order)
    { "tiles of 64, bands of 3 tile rows, refills first", { 2000, 1032 }, 64, 4, { form = "tma", group = 3, early = 1 } },
    { "tiles of 128, bands of 4 tile rows, programs claimed", { 2056, 1544 }, 128, 8, { form = "tma", group = 4, claims = 1, stages = 2 } },
    { "tiles of 128, diagonal order", { 2056, 1544 }, 128, 8, { form = "tma", order = 2 } },
    -- (s14: 32-bit elements in boxes of 32 x 32, bytes in boxes of 128 x 128; f32 at odd rows through the registers)
    { "f32, tiles of 64 by TMA", { 2000, 1036 }, 64, 4, { form = "tma" }, "f32" },
    { "f32, tiles of 32 by TMA, bands of 5", { 1036, 2000 }, 32, 2, { form = "tma", group = 5 }, "f32" },
    -- (the TMA form named: since s14 the rule takes f32 tiles through the registers, no fallback there)
    { "f32, tiles of 64 by TMA, odd rows (the fallback)", { 1001, 1500 }, 64, 4, { form = "tma" }, "f32" },
    { "u8, tiles of 128", { 2064, 1552 }, 128, 8, nil, "u8" },
    { "u8, tiles of 256, 1 stage", { 1552, 2064 }, 256, 16, nil, "u8" },
    -- (s14: 16-bit in the pairs form, a CTA a tile: ragged edges on both sides, rows of 16-byte multiples)
    { "tiles of 64, pairs", { 2000, 1032 }, 64, 4, { form = "pairs" } },
    { "tiles of 128, the default (pairs)", { 2056, 1544 }, 128, 8, nil },
    { "tiles of 128, pairs, 4 warps", { 2056, 1544 }, 128, 4, { form = "pairs" } },
    { "tiles of 64, pairs, bands of 3, 2 warps", { 1496, 1000 }, 64, 2, { form = "pairs", group = 3 } },
    { "tiles of 64, pairs, rows of 3000 bytes (the fallback)", { 1500, 1000 }, 64, 4, { form = "pairs" } },
  }
  for j, t in ipairs(tr) do
    if not small then
      local e = t[6] or "bf16"
      it(("transpose %s %s, %d x %d: the CPU reference"):format(e, t[1], t[2][1], t[2][2]), function()
        if not GPU then pending("no GPU: " .. tl.device.error()) return end
        tl.options.tile_transpose = t[5]
        local k
        local ran, ok, summary = pcall(function()
          local fresh = assert(loadfile "examples/tile_rows.lua")("--library")
          local c = fresh.cases["transpose_" .. e]
          c.build = function()
            k = tl.rows.transpose { n = t[3], warps = t[4], elem = tl[e], name = "transpose_" .. e }
            return k
          end
          c.grid = function(_, M, N) return { (M + t[3] - 1) // t[3], (N + t[3] - 1) // t[3] } end
          -- (claims: launched twice, the second right only if the first put the counter back to 0)
          for r = 1, type(t[5]) == "table" and t[5].claims and 1 or 0 do
            local good, s = fresh.run_case("transpose_" .. e, { seed = seed + 13 * j + 1000 * r, size = t[2] })
            if not good then return false, "launch 1: " .. s end
          end
          return fresh.run_case("transpose_" .. e, { seed = seed + 13 * j, size = t[2] })
        end)
        tl.options.tile_transpose = nil
        assert(ran, ok)
        print("tile_rows_gpu: " .. t[1] .. ": " .. summary)
        assert(ok, summary)
        -- the variant through the registers ran where TMA could not take the rows, and only there
        local a = 16 // tl[e]:info().bytes -- (elements of 16 bytes)
        local odd = t[5] ~= false and (t[2][1] % a ~= 0 or t[2][2] % a ~= 0)
        assert.equal(odd, k.fallback() ~= nil)
      end)
    end
  end

  -- (s12) tileas-decide-slicing (docs/passes.md): the column sum's row-block
  -- loop sliced by the rule (2 slices at a tile of 32 x 256 f32, their loads
  -- first), by force (4: a main loop of 4 slices and a residual), and not at
  -- all (tl.options.slicing = false); the loops the rule slices in program
  -- order (their bodies store once: the backward's and softmax's 3-row
  -- program's, also checked with the rule by the cases below; RMSNorm's and
  -- LayerNorm's 3-row programs store more and are left) off and forced to 3. Row counts
  -- whose row blocks are no multiple of the slices (the residual runs).
  local sliced = {
    { "col_sum", { 1000, 700 }, nil, "the rule's 2 slices" }, { "col_sum", { 4100, 300 }, 4, "4 slices by force" },
    { "col_sum", { 1000, 700 }, false, "slicing off" }, { "rmsnorm_bwd", { 50, 4000 }, false, "slicing off" },
    { "layernorm_bwd", { 53, 4000 }, 3, "3 slices by force" }, { "softmax_rows3", { 58, 8000 }, 3, "3 slices by force" },
  }
  for j, t in ipairs(sliced) do
    it(("%s, %d x %d (%s): the CPU reference"):format(t[1], t[2][1], t[2][2], t[4]), function()
      if not GPU then pending("no GPU: " .. tl.device.error()) return end
      tl.options.slicing = t[3]
      local ran, ok, summary = pcall(function()
        local fresh = assert(loadfile "examples/tile_rows.lua")("--library")
        return fresh.run_case(t[1], { seed = seed + 17 * j, size = small and { math.min(t[2][1], 300), t[2][2] } or t[2] })
      end)
      tl.options.slicing = nil
      assert(ran, ok)
      print(("tile_rows_gpu: %s: %s"):format(t[4], summary))
      assert(ok, summary)
    end)
  end

  for i, name in ipairs(ex.order) do
    local c = ex.cases[name]
    for j, size in ipairs(small and { c.small } or c.sizes) do
      it(("%s, %d x %d: the CPU reference on fresh random inputs"):format(name, size[1], size[2]), function()
        if not GPU then pending("no GPU: " .. tl.device.error()) return end
        local ok, summary = ex.run_case(name, { seed = seed + 100 * i + j, size = size })
        print("tile_rows_gpu: " .. summary)
        assert(ok, summary)
      end)
    end
  end
end)
