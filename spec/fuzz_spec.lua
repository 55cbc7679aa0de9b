-- Bad input never crashes: the parser and the builder get random and
-- truncated input for a bounded time and must answer with a located error
-- (or a valid module). The sanitizer build runs this too.
local H = dofile "spec/helper.lua"
local tl = require "tilua"
local parser = require "tilua.parser"
local core = tl.core

local SECONDS, seed = H.fuzz_budget()

local corpus = {}
for _, f in ipairs(H.valid_fixtures()) do corpus[#corpus + 1] = f.text end
for _, f in ipairs(H.files("spec/fixtures/invalid", "%.tir$")) do corpus[#corpus + 1] = H.slurp(f) end

local tokens = { "{", "}", "(", ")", "[", "]", "<", ">", ",", ":", "=", "%0", "%x", "^bb0", "^bb1:",
  "module", "arith.addi", "scf.for", "scf.yield", "tile.kernel", "i32", "f16", "index", "!cutlass.seq_bar<2>",
  "ptr<f32, global>", "memref<4x?xi8, shared, swizzle128>", "\"", "\\", "0x7F", "-", "1.5e", "loc(", "//", "\n",
  "@", "true", "99999999999999999999999", "\0", "\255" }

local function mutate(rng, text)
  local kind = rng(4)
  local n = #text
  if kind == 1 then return text:sub(1, rng(n + 1) - 1) end -- truncate
  local pos = rng(n + 1)
  if kind == 2 then return text:sub(1, pos - 1) .. tokens[rng(#tokens)] .. text:sub(pos) end
  if kind == 3 then return text:sub(1, pos - 1) .. text:sub(pos + rng(20)) end
  local b = {}
  for i = 1, rng(40) do b[i] = string.char(rng(256) - 1) end
  return text:sub(1, pos - 1) .. table.concat(b) .. text:sub(pos)
end

describe("fuzzing", function()
  it(("the parser answers every mutated input with a module or a located error (seed %d)"):format(seed), function()
    math.randomseed(seed)
    local rng = math.random
    local deadline = os.clock() + SECONDS
    local runs, errors = 0, 0
    while os.clock() < deadline do
      local text = corpus[rng(#corpus)]
      for _ = 1, rng(3) do text = mutate(rng, text) end
      local ctx = core.context()
      local ok, m, msg = pcall(parser.parse, text, { file = "fuzz.tir", ctx = ctx })
      if not ok then error(("parser raised on input (seed %d):\n%s\n---\n%s"):format(seed, m, text)) end
      if m then
        local vok, vmsg = m:verify()
        if vok then
          -- a valid module must round-trip
          local once = m:print()
          local m2, perr = parser.parse(once, { ctx = ctx })
          if not m2 then
            error(("printed text does not parse (seed %d): %s\n--- input\n%s\n--- printed\n%s"):format(seed, perr, text, once))
          end
          assert.equal(once, m2:print())
          -- lowering and emission answer with PTX or diagnostics, never a crash
          local lok, lmsg = core.run_pipeline(m2, "ptx")
          if lok then
            local ptx, emsg = core.emit_ptx(m2)
            assert.is_true(ptx ~= nil or type(emsg) == "string")
          else
            assert.is_string(lmsg)
          end
          core.run_pipeline(m, "cleanup")
        else
          assert.is_string(vmsg)
        end
      else
        errors = errors + 1
        assert.matches("^fuzz%.tir:%d+:%d+: error: ", msg)
      end
      ctx:close()
      runs = runs + 1
    end
    assert.is_true(runs > 10)
    print(("\nparser fuzz: %d inputs, %d rejected with a location, seed %d"):format(runs, errors, seed))
  end)

  it(("the builder answers random calls with located errors (seed %d)"):format(seed), function()
    math.randomseed(seed + 1)
    local rng = math.random
    local ops = core.ops()
    local types = { tl.i1, tl.i32, tl.i64, tl.f16, tl.f32, tl.index, tl.ptr(tl.f32), tl.none }
    local deadline = os.clock() + SECONDS
    local runs, rejected = 0, 0
    while os.clock() < deadline do
      tl.new_module()
      local ok, err = pcall(function()
        local k = tl.kernel("fuzz", { params = { { "a", tl.i32 }, { "x", tl.f32 }, { "n", tl.index } }, block = rng(64) })
        k:define(function(k, p)
          local vals = { p.a, p.x, p.n }
          for _ = 1, rng(12) do
            local info = ops[rng(#ops)]
            local operands, results, attrs = {}, {}, {}
            for i = 1, rng(4) - 1 do operands[i] = vals[rng(#vals)] end
            for i = 1, rng(3) - 1 do results[i] = types[rng(#types)] end
            if rng(2) == 1 then attrs.value = rng(2) == 1 and rng(100) or 1.5 end
            if rng(3) == 1 then attrs.predicate = ({ "eq", "slt", "oge", "nope" })[rng(4)] end
            local op = tl.op(info.name, operands, results, attrs, rng(3) - 1)
            for _, r in ipairs(op:results()) do vals[#vals + 1] = r end
          end
        end)
        tl.compile(k, "cleanup")
      end)
      if not ok then
        rejected = rejected + 1
        assert.is_string(err)
        assert.matches("^[^\n]-:%d+: ", err) -- file:line: first
      end
      runs = runs + 1
    end
    assert.is_true(runs > 10)
    print(("builder fuzz: %d kernels, %d rejected, seed %d"):format(runs, rejected, seed + 1))
  end)
end)
