-- The attention backward as tile programs (examples/attention_bwd.lua) without
-- a GPU: on the CPU emulator (the tile programs as written) its dQ, dK and dV
-- equal a CPU reference computed from the forward's definition on every
-- element (head dims 64 and 128, causal and not, ragged lengths that are no
-- multiple of the tiles, grouped-query heads summed into their key head).
local AH = dofile "spec/attention_helper.lua"
local tl = require "tilua"

local example = assert(loadfile "examples/attention_bwd.lua")("--library")

-- Emulates kernel k on a grid with arguments by name. -> read(name) of a tensor's bytes
local function emulate(k, grid, args)
  local names = {}
  for n in pairs(args) do names[#names + 1] = n end
  table.sort(names) -- (a tile kernel's parameters are in name order)
  local at = {}
  for i, n in ipairs(names) do at[n] = i end
  local r = tl.emulate(k, { grid = grid, args = args, max_steps = 1e9 })
  assert(r.ok, r.report)
  return function(n) return r.read(at[n]) end
end

-- dQ, dK and dV of problem c (the forward's O and LSE from the CPU reference)
-- by the three programs on the emulator. -> the reference, {dQ, dK, dV bytes}
local function backward(c)
  local x, bytes = AH.inputs(c, 5 + c.d + c.sq)
  AH.backward_inputs(c, x, bytes, 17 + c.skv)
  local o, G = { d = c.d, causal = c.causal, bm = c.bm, bn = c.bn }, example.programs(c)
  local q4, kv4, rows = { c.b, c.h, c.sq, c.d }, { c.b, c.hkv, c.skv, c.d }, { c.b, c.h, c.sq }
  local delta = emulate(example.build_delta(o), G[1], { O = { data = bytes.o, shape = q4 },
    dO = { data = bytes.dout, shape = q4 }, Delta = { bytes = c.b * c.h * c.sq * 4, shape = rows }, H = c.h }) "Delta"
  local function args(more)
    local a = { Q = { data = bytes.q, shape = q4 }, K = { data = bytes.k, shape = kv4 }, V = { data = bytes.v, shape = kv4 },
                dO = { data = bytes.dout, shape = q4 }, LSE = { data = bytes.lse, shape = rows },
                Delta = { data = delta, shape = rows }, group = c.h // c.hkv, scale = c.scale }
    for k, v in pairs(more) do a[k] = v end
    return a
  end
  local kvbytes = c.b * c.hkv * c.skv * c.d * 2
  local dq = emulate(example.build_dq(o), G[2], args { dQ = { bytes = c.b * c.h * c.sq * c.d * 2, shape = q4 },
                                                        SKV = c.skv, H = c.h }) "dQ"
  local read = emulate(example.build_dkdv(o), G[3], args { dK = { bytes = kvbytes, shape = kv4 },
    dV = { bytes = kvbytes, shape = kv4 }, SQ = c.sq, HKV = c.hkv })
  return AH.backward_reference(c, x), { dQ = dq, dK = read "dK", dV = read "dV" }
end

describe("the attention backward as tile programs (examples/attention_bwd.lua)", function()
  local CASES = {
    { b = 1, h = 2, hkv = 1, sq = 100, skv = 150, d = 64 },                -- grouped-query heads, ragged
    { b = 1, h = 1, hkv = 1, sq = 150, skv = 100, d = 64, causal = true }, -- key blocks below every query
    { b = 2, h = 1, hkv = 1, sq = 130, skv = 130, d = 128, causal = true },
    { b = 1, h = 2, hkv = 2, sq = 70, skv = 200, d = 128 },
    { b = 1, h = 2, hkv = 1, sq = 190, skv = 60, d = 64, causal = true, bm = 64, bn = 64 },
  }
  for _, c in ipairs(CASES) do
    c.scale = 1 / math.sqrt(c.d)
    it(("on the CPU emulator equals a CPU reference: %d x %d heads (%d), %d x %d, d %d%s"):format(c.b, c.h, c.hkv, c.sq,
         c.skv, c.d, c.causal and ", causal" or ""), function()
      local ref, got = backward(c)
      for _, g in ipairs { { "dQ", "mq" }, { "dK", "mk" }, { "dV", "mv" } } do
        local bad, worst, ratio = AH.backward_compare(c, got[g[1]], ref[g[1]], ref[g[2]])
        assert.equal(0, bad, ("%s: %d elements off, max |got - ref| %.3g (%.2f of the tolerance)"):format(g[1], bad, worst, ratio))
      end
    end)
  end

  it("is checked on every element: a backward without its causal mask is far off", function()
    local c = { b = 1, h = 1, hkv = 1, sq = 64, skv = 64, d = 64, causal = true, scale = 1 / 8 }
    local x, bytes = AH.inputs(c, 3)
    AH.backward_inputs(c, x, bytes, 4)
    local ref = AH.backward_reference(c, x)
    local plain = { causal = false }
    for k, v in pairs(c) do if k ~= "causal" then plain[k] = v end end
    local rp = AH.backward_reference(plain, x)
    local enc = require("tilua.emulate.values").float16.enc.bf16
    local function bytes_of(v)
      local t = {}
      for i = 1, #v do t[i] = string.pack("<I2", enc(v[i])) end
      return table.concat(t)
    end
    assert.equal(0, (AH.backward_compare(c, bytes_of(ref.dK), ref.dK, ref.mk)))
    assert.is_true(AH.backward_compare(c, bytes_of(rp.dK), ref.dK, ref.mk) > 1000)
  end)
end)
