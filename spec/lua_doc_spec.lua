-- docs/lua.md names every public `tl` name: a name the library exports but the
-- page does not name fails, and so does a `tl.x` on the page that is gone.
local tl = require "tilua"
local H = dofile "spec/helper.lua"

describe("docs/lua.md", function()
  local doc = H.slurp "docs/lua.md"
  local builtin = { "i1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool", "f16", "bf16", "f32", "f64",
    "index", "none" }

  it("names every public tl name", function()
    local missing = {}
    local names = {}
    for k in pairs(tl) do names[#names + 1] = k end
    for _, k in ipairs(builtin) do names[#names + 1] = k end
    for _, k in ipairs(names) do
      if not doc:find("tl%." .. k .. "[^%w_]") then missing[#missing + 1] = "tl." .. k end
    end
    table.sort(missing)
    assert.same({}, missing)
  end)

  it("names nothing that is gone", function()
    local stale = {}
    for name in doc:gmatch "tl%.([%a_][%w_]*)" do
      if tl[name] == nil and not stale[name] then stale[#stale + 1] = "tl." .. name; stale[name] = true end
    end
    assert.same({}, stale)
  end)
end)
