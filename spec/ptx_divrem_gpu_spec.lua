-- Division and remainder by constant powers of two (shifts and ands in the
-- PTX, src/ptx/emit_arith.c) on the GPU (label gpu: spec/gpu_runner.lua): the
-- kernels of spec/fixtures/gpu/divrem_pow2.lua (i8, i16, i32, i64; divsi,
-- remsi, divui, remui by 1, 2, 8, the largest power, and by 6 and -4 through
-- PTX's div and rem) launched on every input of the fixture (either sign, the
-- extremes, each divisor's neighbours): every result equal to arith's
-- semantics (the fixture's), and to the emulator's on the same input. The
-- CPU side (the PTX interpreted, the emulator): spec/ptx_divrem_spec.lua.
-- Without a GPU the runs report pending.
local tl = require "tilua"
local F = dofile "spec/fixtures/gpu/divrem_pow2.lua"

local GPU = tl.device.available()

describe("division and remainder by a power of two on the GPU", function()
  for _, w in ipairs(F.widths) do
    it(("i%d: equal to arith's semantics and the emulator on either sign"):format(w), function()
      if not GPU then pending("no GPU: " .. tl.device.error()) return end
      local k, cases = F.build(w)
      k:compile()
      local bytes = math.max(w // 8, 1)
      local g <close> = tl.device.alloc(tl.u8, #cases * bytes)
      local wrong, xs = {}, F.inputs(w)
      for i, x in ipairs(xs) do
        g:fill(0)
        k:launch { grid = 1, args = { g, x } }
        tl.device.synchronize()
        local out = g:to_string()
        F.wrong(w, cases, x, function(j) return F.unpack(w, out, j) end, "GPU", wrong)
        if i % 4 == 1 then -- (a quarter on the emulator too: the same bytes)
          local emu = tl.emulate(k, { grid = 1, args = { ("\0"):rep(#cases * bytes), x } })
          assert(emu.ok, emu.report)
          if emu.read(1) ~= out then wrong[#wrong + 1] = ("input %d: the GPU's results are not the emulator's"):format(x) end
        end
      end
      local n = #xs * #cases
      print(("ptx_divrem_gpu: i%d, %d results, %d wrong"):format(w, n, #wrong))
      assert.same({}, wrong)
    end)
  end
end)
