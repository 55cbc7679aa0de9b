-- A tile program's launch again on the same tensors reuses the last one's
-- values (lua/tilua/gpu/recipe.lua's same_as_last, lua/tilua/gpu/launch.lua's
-- tile_values; the C launch plan packs them): tensor inputs given each time as
-- new tables of the same buffer, shape and strides, a persistent grid (the
-- device's SM count read). Checked on the stand-in driver (spec/c/fake_cuda.c,
-- its launch log): every launch, reused or not, logs the line that the same
-- launch logs with the kernel's memos cleared first (a shape changed in place,
-- another buffer, another scalar: never the last's), and a launch like the
-- last encodes no tensor map.
local H = dofile "spec/helper.lua"

local SCRIPT = [[
local tl = require "tilua"
local T = function(e) return tl.tensor(e, 2) end
tl.new_module()
local k = tl.tile_kernel("memo_rows", { params = { X = T(tl.bf16), Y = T(tl.bf16), s = tl.f32 } })
k:define(function(_, p)
  local m = tl.program_id("x")
  local acc = tl.for_tiles(512, { tile = 64 }, tl.zeros({ 64, 64 }), function(j, acc)
    local a = tl.load(p.X, { m, j }, { 64, 64 })
    return tl.dot(a, a, acc, { transpose_b = true })
  end)
  tl.store(p.Y, { m, 0 }, (acc * p.s):cast(tl.bf16))
end)
local D = tl.device
local x1, x2, y = D.alloc(tl.bf16, 1024 * 512), D.alloc(tl.bf16, 1024 * 512), D.alloc(tl.bf16, 1024 * 64)
local shape = { 1024, 512 }
-- the launches: {X, its shape, Y's rows, s, programs}; "same" = a launch like the last
local sets = {
  { x1, { 1024, 512 }, 1024, 0.5, 16 },
  { x1, { 1024, 512 }, 1024, 0.5, 16, same = true },   -- new tables, the same tensors
  { x1, shape, 1024, 0.5, 16, same = true },           -- (a table reused below, changed in place)
  { x1, shape, 1024, 0.5, 16, same = true },
  { x1, shape, 1024, 0.5, 16, grow = true },           -- its rows changed in place: 512 x 512
  { x2, { 512, 512 }, 1024, 0.5, 8 },                  -- another buffer
  { x2, { 512, 512 }, 1024, 0.25, 8 },                 -- another scalar
  { x2, { 512, 512 }, 1024, 0.25, 8, strides = true }, -- strides given (the row-major ones)
  { x2, { 512, 512 }, 1024, 0.25, 8, strides = true, same = true },
  { x1, { 1024, 512 }, 1024, 0.5, 16 },                -- the first again, after others
  { x1, { 1024, 512 }, 1024, 0.5, 16, flat = true, same = true }, -- its grid as an integer: the same programs
  { x1, { 1024, 512 }, 1024, 0.5, 8, flat = true },    -- fewer programs
}
local function launch(s)
  if s.grow then shape[1] = 512 end -- (in place)
  local X = { buffer = s[1], shape = s[2], strides = s.strides and { s[2][2], 1 } or nil }
  k:launch { grid = s.flat and s[5] or { s[5], 1 }, args = { X = X, Y = { y, { s[3], 64 } }, s = s[4] } }
end
local log = os.getenv "MEMO_LOG"
local function lines()
  local t = {}
  for l in io.lines(log) do t[#t + 1] = l end
  return t
end
for i, s in ipairs(sets) do
  local before, last = #lines(), k._last and k._last.values
  launch(s)
  D.synchronize()
  local new = lines()
  local mine = table.concat(new, "\n", before + 1)
  local reused = last ~= nil and k._last.values == last
  -- the same launch, the kernel's memos cleared (its tensor maps made again)
  k._last, k._tile_args, k._maps = nil, nil, nil
  local n0 = #lines()
  launch(s)
  D.synchronize()
  local ref = lines()
  local theirs = {}
  for j = n0 + 1, #ref do
    if not ref[j]:find "^tensor_map" then theirs[#theirs + 1] = ref[j] end
  end
  local launched = {}
  for l in mine:gmatch "[^\n]+" do
    if not l:find "^tensor_map" then launched[#launched + 1] = l end
  end
  local maps = select(2, mine:gsub("tensor_map", ""))
  print(("%d reused=%s maps=%d same_line=%s"):format(i, tostring(reused), maps,
    tostring(#launched == 1 and launched[1] == theirs[1])))
  launch(s) -- (the memos as after a launch of this set, for the next)
  D.synchronize()
end
-- a grid of floats after a launch of those numbers: refused as on a first launch
local ok, err = pcall(function()
  k:launch { grid = { 8.0, 1 }, args = { X = { x1, { 1024, 512 } }, Y = { y, { 1024, 64 } }, s = 0.5 } }
end)
print(("float grid: %s %s"):format(tostring(ok), tostring(err)))
]]

describe("a tile program launched again on the same tensors", function()
  it("core.same_inputs: the same buffer and numbers of the same kinds, scalars rawequal", function()
    local core = require("tilua").core
    local buf = {}
    local seen = { X = { buffer = buf, shape = { 1024, 512 } }, Y = { buffer = buf, shape = { 8, 8 }, strides = { 8, 1 } },
                   s = 0.5 }
    local names, tensors = { "X", "Y", "s" }, { true, true, false }
    local function same(inputs) return core.same_inputs(names, tensors, seen, inputs) end
    local Y = { buf, { 8, 8 }, strides = { 8, 1 } }
    assert.is_true(same { X = { buf, { 1024, 512 } }, Y = Y, s = 0.5 })
    assert.is_true(same { X = { buffer = buf, shape = { 1024, 512 } }, Y = Y, s = 0.5 })
    assert.is_false(same { X = { buf, { 1024.0, 512 } }, Y = Y, s = 0.5 }) -- (4 and 4.0 differ)
    assert.is_false(same { X = { buf, { 1024, 512, 1 } }, Y = Y, s = 0.5 })
    assert.is_false(same { X = { {}, { 1024, 512 } }, Y = Y, s = 0.5 })
    assert.is_false(same { X = { buf, { 1024, 512 } }, Y = { buf, { 8, 8 } }, s = 0.5 }) -- strides not given
    assert.is_false(same { X = { buf, { 1024, 512 }, strides = { 512, 1 } }, Y = Y, s = 0.5 })
    assert.is_false(same { X = { buf, { 1024, 512 } }, Y = { buf, { 8, 8 }, strides = { 16, 1 } }, s = 0.5 })
    assert.is_false(same { X = { buf, { 1024, 512 } }, Y = Y, s = 0.25 })
    assert.is_false(same { X = buf, Y = Y, s = 0.5 })
    assert.is_false(same { Y = Y, s = 0.5 })
  end)

  it("reuses the last launch's arguments exactly when its inputs are the same (the stand-in driver's log)", function()
    local fake = os.getenv "TILUA_FAKE_CUDA"
    if not fake or fake == "" then pending("runs against the stand-in driver (ctest sets TILUA_FAKE_CUDA)") return end
    local f, log = H.temp(SCRIPT, ".lua"), os.tmpname()
    local out, err, code = H.tilua_env({ TILUA_LIBCUDA = fake, FAKE_CUDA_LOG = log, MEMO_LOG = log,
                                         TILUA_SKIP_CHECK_PROTOCOL = "1" }, { f }, 600)
    os.remove(f)
    os.remove(log)
    assert.equal(0, code, err)
    local got = {}
    for i, reused, maps, same in out:gmatch "(%d+) reused=(%a+) maps=(%d+) same_line=(%a+)" do
      got[tonumber(i)] = { reused = reused == "true", maps = tonumber(maps), same = same == "true" }
    end
    assert.equal(12, #got, out .. err)
    for i, g in ipairs(got) do
      assert.is_true(g.same, ("launch %d logged another line than with the memos cleared\n%s"):format(i, out))
    end
    -- reused exactly where the inputs were the last's; then no tensor map encoded
    local want = {}
    for i = 1, 12 do want[i] = false end
    for _, i in ipairs { 2, 3, 4, 9, 11 } do want[i] = true end
    for i, g in ipairs(got) do
      assert.equal(want[i], g.reused, ("launch %d\n%s"):format(i, out))
      if want[i] then assert.equal(0, g.maps, ("launch %d\n%s"):format(i, out)) end
    end
    assert.matches("float grid: false [^\n]*launch: grid must hold positive integers", out)
  end)
end)
