-- tl.printf on the GPU: examples/printf.lua's threads print the lines it
-- expects (in the GPU's order: compared as sets), after the launch's
-- synchronize. Without a GPU: pending (skipped); spec/printf_spec.lua checks
-- the PTX with ptxas and the emulator's lines.
local H = dofile "spec/helper.lua"
local tl = require "tilua"

describe("tl.printf on the GPU", function()
  it("prints every expected line once, and the stored values agree", function()
    if not tl.device.available() then pending("no GPU: " .. tl.device.error()) return end
    local out, err, code = H.tilua_run { "examples/printf.lua" }
    print(out)
    assert.equal(0, code, err)
    local expect, got = {}, {}
    for l in out:gmatch "[^\n]+" do
      local e = l:match "^expect: (.*)$"
      if e then expect[#expect + 1] = e elseif l:match "^block %d" then got[#got + 1] = l end
    end
    table.sort(expect)
    table.sort(got)
    assert.equal(8, #expect)
    assert.same(expect, got)
    assert.matches("printf_demo: OK", out)
  end)
end)
