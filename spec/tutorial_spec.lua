-- docs/tutorial.md: every complete script on the page (a ```lua block that
-- starts with `local tl = require "tilua"`) runs: it compiles, ptxas accepts
-- its PTX, and where a GPU is there it checks its result ("SKIP: no GPU"
-- elsewhere); with --emulate it checks its result on the CPU emulator. Blocks
-- marked ```lua excerpt are not run.
local H = dofile "spec/helper.lua"

describe("docs/tutorial.md", function()
  local page = H.slurp "docs/tutorial.md"
  local n = 0
  for block in page:gmatch "```lua\n(.-)```" do
    if block:match "^local tl = require \"tilua\"" then
      n = n + 1
      local name = block:match 'tl%.kernel%("([%w_]+)"' or ("block " .. n)
      it("runs the script of " .. name, function()
        local f = os.tmpname() .. ".lua"
        local h = assert(io.open(f, "w"))
        h:write(block)
        h:close()
        local out, err, code = H.tilua_run { f }
        assert.equal(0, code, err)
        assert.is_nil(err:find("error", 1, true), err)
        assert.truthy(out:find(name .. ": ptxas -arch=sm_90a: ok", 1, true) or out:find("ptxas check skipped", 1, true), out)
        assert.truthy(out:find("SKIP: no GPU", 1, true) or out:find(name .. ": OK", 1, true), out)
        -- on the CPU emulator: the result computed and checked, GPU or none
        out, err, code = H.tilua_run { f, "--emulate" }
        os.remove(f)
        assert.equal(0, code, err)
        assert.truthy(out:find(name .. ": OK", 1, true), out)
      end)
    end
  end
  it("has its complete scripts", function() assert.is_true(n >= 2) end)
end)
