-- docs/ops.md is generated from the op tables by tools/gen_ops_doc.lua; this
-- spec regenerates it in memory and fails when the committed file is stale.
local H = dofile "spec/helper.lua"
local tl = require "tilua"

local REGENERATE = "regenerate it with: build/tilua tools/gen_ops_doc.lua"

describe("docs/ops.md", function()
  local gen = dofile(H.root .. "/tools/gen_ops_doc.lua")

  it("is up to date with the op tables", function()
    local have = H.slurp(H.root .. "/docs/ops.md")
    assert(have, "docs/ops.md is missing; " .. REGENERATE)
    local want = gen.generate()
    if have == want then return end
    local n, hl, wl = 0
    local hi, wi = have:gmatch "([^\n]*)\n", want:gmatch "([^\n]*)\n"
    repeat
      n = n + 1
      hl, wl = hi(), wi()
    until hl ~= wl
    error(("docs/ops.md is stale at line %d:\n  file:      %s\n  generated: %s\n%s"):format(
      n, tostring(hl), tostring(wl), REGENERATE), 0)
  end)

  it("lists every op with a one-line contract, and every dialect type", function()
    local text = gen.generate()
    for _, op in ipairs(tl.core.ops()) do
      assert.truthy(text:find("| `" .. op.name .. "` |", 1, true), op.name)
      assert.truthy(op.doc ~= "" and not op.doc:find "\n", op.name .. " needs a one-line contract")
    end
    for _, t in ipairs(tl.core.dialect_types()) do
      assert.truthy(text:find("| `!" .. t.name .. "` |", 1, true), t.name)
    end
  end)
end)
