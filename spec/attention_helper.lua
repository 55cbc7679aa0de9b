-- What the attention specs share (spec/attention_spec.lua, spec/tile_attention_spec.lua,
-- spec/emulate_gpu_spec.lua):
-- exact inputs from a fixed LCG and the CPU reference the emulated O and
-- log-sum-exp are compared with. A problem c: b, h, hkv, sq, skv, d, scale,
-- causal, dtype ("bf16" or "f16"); Q, K, V are [B, H, S, D], LSE [B, H, SQ] f32.
local VV = require "tilua.emulate.values"
local M = {}

-- Q, K, V of problem c: multiples of 1/8 in [-1, 1] (exact in bf16 and f16).
-- -> {Q, K, V values (1-based, row-major)}, {q, k, v bytes}
function M.inputs(c, seed)
  local enc = VV.float16.enc[c.dtype or "bf16"]
  local function tensor(h, s)
    local vals, bytes = {}, {}
    for i = 1, c.b * h * s * c.d do
      seed = (seed * 1103515245 + 12345) % 2147483648
      local x = ((seed >> 8) % 17 - 8) / 8
      vals[i], bytes[i] = x, string.pack("<I2", enc(x))
    end
    return vals, table.concat(bytes)
  end
  local Q, qb = tensor(c.h, c.sq)
  local K, kb = tensor(c.hkv, c.skv)
  local V, vb = tensor(c.hkv, c.skv)
  return { Q = Q, K = K, V = V }, { q = qb, k = kb, v = vb }
end

-- The emulator's arguments of tl.attention's kernel for problem c and input bytes.
function M.stdlib_args(c, bytes)
  return { { data = bytes.q, shape = { c.b, c.h, c.sq, c.d } }, { data = bytes.k, shape = { c.b, c.hkv, c.skv, c.d } },
           { data = bytes.v, shape = { c.b, c.hkv, c.skv, c.d } },
           { bytes = c.b * c.h * c.sq * c.d * 2, shape = { c.b, c.h, c.sq, c.d } },
           { bytes = c.b * c.h * c.sq * 4 }, c.b, c.h, c.hkv, c.sq, c.skv, c.scale }
end

-- The emulator's arguments of the lowered tile program (examples/attention.lua)
-- kop for problem c and input bytes (PH: spec/protocol_helper.lua). -> args,
-- where (parameter entry -> index)
function M.tile_args(PH, kop, c, bytes)
  local programs = assert(loadfile "examples/attention.lua")("--library").programs(c)
  return PH.params_args(kop, {
    ["map:Q"] = { data = bytes.q, shape = { c.b, c.h, c.sq, c.d } }, ["map:K"] = { data = bytes.k, shape = { c.b, c.hkv, c.skv, c.d } },
    ["map:V"] = { data = bytes.v, shape = { c.b, c.hkv, c.skv, c.d } },
    ["map:O"] = { bytes = c.b * c.h * c.sq * c.d * 2, shape = { c.b, c.h, c.sq, c.d } },
    ["ptr:LSE"] = ("\0"):rep(c.b * c.h * c.sq * 4), ["dim:LSE:0"] = c.b, ["dim:LSE:1"] = c.h, ["dim:LSE:2"] = c.sq,
    ["stride:LSE:0"] = c.h * c.sq, ["stride:LSE:1"] = c.sq,
    ["arg:SKV"] = c.skv, ["arg:H"] = c.h, ["arg:group"] = c.h // c.hkv, ["arg:scale"] = c.scale,
    ["programs:x"] = programs[1], ["programs:y"] = programs[2] })
end

-- The largest errors of the emulated O and LSE (bytes ob, lb) against the CPU
-- (doubles), and how many elements are off: O by more than 2^-7 + 2^-8 |ref|
-- (P and O are rounded to 16 bits), the LSE by more than 1e-3 (1 + |ref|).
-- -> worst |O - ref|, worst |LSE - ref|, elements off
function M.compare(c, x, ob, lb)
  local Q, K, V = x.Q, x.K, x.V
  local dec = VV.float16.dec[c.dtype or "bf16"]
  local worst, worstl, bad = 0, 0, 0
  for b = 0, c.b - 1 do
    for h = 0, c.h - 1 do
      local hk = h // (c.h // c.hkv)
      for i = 0, c.sq - 1 do
        local qo = ((b * c.h + h) * c.sq + i) * c.d
        local s, mx = {}, -math.huge
        local lim = c.causal and math.min(c.skv, i + 1) or c.skv
        for j = 0, lim - 1 do
          local ko = ((b * c.hkv + hk) * c.skv + j) * c.d
          local acc = 0
          for e = 1, c.d do acc = acc + Q[qo + e] * K[ko + e] end
          s[j] = acc * c.scale
          mx = math.max(mx, s[j])
        end
        local sum = 0
        for j = 0, lim - 1 do
          s[j] = math.exp(s[j] - mx)
          sum = sum + s[j]
        end
        local lse = mx + math.log(sum)
        local got_l = string.unpack("<f", lb, ((b * c.h + h) * c.sq + i) * 4 + 1)
        worstl = math.max(worstl, math.abs(got_l - lse))
        if math.abs(got_l - lse) > 1e-3 * (1 + math.abs(lse)) then bad = bad + 1 end
        for e = 1, c.d do
          local acc = 0
          for j = 0, lim - 1 do acc = acc + s[j] * V[((b * c.hkv + hk) * c.skv + j) * c.d + e] end
          acc = acc / sum
          local got = dec(string.unpack("<I2", ob, (qo + e - 1) * 2 + 1))
          worst = math.max(worst, math.abs(got - acc))
          if math.abs(got - acc) > 2 ^ -7 + 2 ^ -8 * math.abs(acc) then bad = bad + 1 end
        end
      end
    end
  end
  return worst, worstl, bad
end

return M
