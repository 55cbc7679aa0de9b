-- docs/ops.md and the generated parts of docs/ptx.md come from the op tables
-- through tools/gen_ops_doc.lua; this spec regenerates them in memory and
-- fails when a committed file is stale.
local H = dofile "spec/helper.lua"
local tl = require "tilua"

local REGENERATE = "regenerate it with: build/tilua tools/gen_ops_doc.lua"

-- Fail with the first line where have and want differ.
local function same(file, have, want)
  if have == want then return end
  local n, hl, wl = 0
  local hi, wi = have:gmatch "([^\n]*)\n", want:gmatch "([^\n]*)\n"
  repeat
    n = n + 1
    hl, wl = hi(), wi()
  until hl ~= wl
  error(("%s is stale at line %d:\n  file:      %s\n  generated: %s\n%s"):format(
    file, n, tostring(hl), tostring(wl), REGENERATE), 0)
end

describe("docs/ops.md and docs/ptx.md", function()
  local gen = dofile(H.root .. "/tools/gen_ops_doc.lua")

  it("are up to date with the op tables", function()
    local have = H.slurp(H.root .. "/docs/ops.md")
    assert(have, "docs/ops.md is missing; " .. REGENERATE)
    same("docs/ops.md", have, gen.generate())
    local ptx = assert(H.slurp(H.root .. "/docs/ptx.md"))
    same("docs/ptx.md", ptx, gen.ptx(ptx))
  end)

  it("show every nvvm op's PTX and every one-to-one tile lowering", function()
    local ptx = gen.ptx(assert(H.slurp(H.root .. "/docs/ptx.md")))
    for _, op in ipairs(tl.core.ops()) do
      if op.dialect == "nvvm" then
        assert.truthy(op.ptx, op.name .. " needs a PTX or PTX_HAND row")
        assert.truthy(ptx:find("| `" .. op.name .. "` |", 1, true), op.name)
      end
      if op.lowers_to then assert.truthy(ptx:find("| `" .. op.name .. "` | `" .. op.lowers_to .. "` |", 1, true)) end
    end
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
