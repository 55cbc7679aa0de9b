-- The textual IR: print -> parse -> print is the identity, errors give line:col.
local H = dofile "spec/helper.lua"
local tl = require "tilua"
local parser = require "tilua.parser"

describe("the parser", function()
  for _, f in ipairs(H.files("spec/fixtures/valid", "%.tir$")) do
    it("round-trips " .. f, function()
      local text = H.slurp(f)
      local m, err = parser.parse(text, { file = f })
      assert.truthy(m, err)
      assert.is_true((m:verify()))
      local once = m:print()
      assert.equal(text, once)
      local m2 = assert(parser.parse(once, { file = f }))
      assert.equal(once, m2:print())
    end)
  end

  it("reads the same with and without the C fast path, on the fixtures and on mutations of them", function()
    local corpus = {}
    for _, d in ipairs { "spec/fixtures/valid", "spec/fixtures/invalid", "spec/fixtures/alloc" } do
      for _, f in ipairs(H.files(d, "%.tir$")) do corpus[#corpus + 1] = H.slurp(f) end
    end
    math.randomseed(20261124)
    local rng = math.random
    local function read(text, fast)
      local ctx = tl.core.context()
      local m, err = parser.parse(text, { file = "same.tir", ctx = ctx, fast = fast })
      local out = m and m:print { locations = true } or err
      ctx:close()
      return out
    end
    local inputs = {}
    for i, t in ipairs(corpus) do inputs[i] = t end
    for _ = 1, 1500 do
      local t = corpus[rng(#corpus)]
      local pos = rng(#t + 1)
      local r = rng(3)
      if r == 1 then t = t:sub(1, pos - 1) .. t:sub(pos + rng(12))
      elseif r == 2 then t = t:sub(1, pos - 1) .. ({ "%0", "%9", ",", "=", ":", "{", "}", " i32", "loc(", "\n" })[rng(10)] .. t:sub(pos)
      else t = t:sub(1, pos - 1) end
      inputs[#inputs + 1] = t
    end
    for _, t in ipairs(inputs) do
      assert.equal(read(t, false), read(t, true))
    end
  end)

  it("records line:col locations", function()
    local m = assert(parser.parse("module {\n  %0 = arith.constant {value = 1 : i32} : i32\n}", { file = "x.tir" }))
    local op = m:region(1):entry():first()
    assert.same({ "x.tir", 2, 3 }, { op:loc() })
  end)

  it("reads loc(...) annotations when asked", function()
    local m = assert(parser.parse('module {\n  %0 = arith.constant {value = 1 : i32} : i32 loc("k.lua":42)\n}', { locations = "keep" }))
    local op = m:region(1):entry():first()
    assert.same({ "k.lua", 42, 0 }, { op:loc() })
    assert.truthy(m:print { locations = true }:find('loc("k.lua":42)', 1, true))
  end)

  it("wraps bare operations in a module", function()
    local m = assert(parser.parse("%0 = arith.constant {value = 1 : i32} : i32"))
    assert.equal("module", m:name())
  end)

  -- found by the fuzzer: a dictionary whose first key is quoted was read as a
  -- region holding a generic op
  it("reads attribute dictionaries whose first key is quoted, braces in strings and all", function()
    for _, text in ipairs { 'module {"x,N" = 1 : i32} {\n}\n', 'module {"a}" = 1 : i32, b = "{"} {\n}\n',
      'module {"\\DB\\0D" = [1 : i32]} {\n}\n' } do
      local m = assert(parser.parse(text))
      assert.equal(text, m:print())
    end
    local m = assert(parser.parse "module {\n}\n")
    assert.equal("module {\n}\n", m:print())
  end)

  it("reports the farthest syntax error with a caret", function()
    local m, err, info = parser.parse("module {\n  %0 = arith.constant {value = } : i32\n}", { file = "e.tir" })
    assert.is_nil(m)
    assert.equal(2, info.line)
    assert.matches("^e%.tir:2:%d+: error: expected a type or an attribute value", err)
    assert.matches("\n  %%0 = arith.constant {value = } : i32\n +%^", err)
  end)

  it("keeps -0.0, inf and nan exact", function()
    local text = "module {a = -0.0, b = 0x7F800000 : f32, c = 0x7E00 : f16, d = 0xFFF8000000000000 : f64} {\n}\n"
    local m = assert(parser.parse(text))
    assert.equal(text, m:print())
  end)
end)
