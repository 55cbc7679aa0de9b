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
    ["arg:SKV"] = c.skv, ["arg:TM"] = programs[2] // c.b, ["arg:H"] = c.h, ["arg:group"] = c.h // c.hkv, ["arg:scale"] = c.scale,
    ["programs:x"] = programs[1], ["programs:y"] = programs[2],
    workspace = ("\0"):rep(4) }) -- (causal: the programs claimed at run time, a counter from 0)
end

-- The largest errors of the emulated O and LSE (bytes ob, lb) against the CPU
-- (doubles), and how many elements are off: O by more than 2^-7 + 2^-8 |ref|
-- (P and O are rounded to 16 bits), the LSE by more than tl.attention.lse_tolerance;
-- a NaN is off.
-- -> worst |O - ref|, worst |LSE - ref|, elements off
function M.compare(c, x, ob, lb)
  local dec = VV.float16.dec[c.dtype or "bf16"]
  local worst, worstl, bad = 0, 0, 0
  M.each_row(c, x, function(b, h, i, p, lim, lse)
    local hk = h // (c.h // c.hkv)
    local qo = ((b * c.h + h) * c.sq + i) * c.d
    local got_l = string.unpack("<f", lb, ((b * c.h + h) * c.sq + i) * 4 + 1)
    worstl = math.max(worstl, math.abs(got_l - lse))
    if math.abs(got_l - lse) > require("tilua").attention.lse_tolerance(lse) or got_l ~= got_l then bad = bad + 1 end -- (NaN: off)
    for e = 1, c.d do
      local acc = 0
      for j = 0, lim - 1 do acc = acc + p[j] * x.V[((b * c.hkv + hk) * c.skv + j) * c.d + e] end
      local got = dec(string.unpack("<I2", ob, (qo + e - 1) * 2 + 1))
      worst = math.max(worst, math.abs(got - acc))
      if math.abs(got - acc) > 2 ^ -7 + 2 ^ -8 * math.abs(acc) or got ~= got then bad = bad + 1 end
    end
  end)
  return worst, worstl, bad
end

-- {=== the backward (examples/attention_bwd.lua)

-- dO of problem c (multiples of 1/8 in [-1, 1], exact) into x.dO and
-- bytes.dout, then the forward's outputs (M.forward_outputs).
function M.backward_inputs(c, x, bytes, seed)
  local enc = VV.float16.enc[c.dtype or "bf16"]
  local dO, db = {}, {}
  for i = 1, c.b * c.h * c.sq * c.d do
    seed = (seed * 1103515245 + 12345) % 2147483648
    dO[i] = ((seed >> 8) % 17 - 8) / 8
    db[i] = string.pack("<I2", enc(dO[i]))
  end
  x.dO, bytes.dout = dO, table.concat(db)
  M.forward_outputs(c, x, bytes)
end

-- The forward of problem c in doubles for the values x (Q, K, V): x.O (O
-- rounded to 16 bits, what the backward is given) and x.LSE (the
-- log-sum-exp rounded to f32), their bytes bytes.o and bytes.lse.
function M.forward_outputs(c, x, bytes)
  local enc, dec = VV.float16.enc[c.dtype or "bf16"], VV.float16.dec[c.dtype or "bf16"]
  local O, ob, LSE, lb = {}, {}, {}, {}
  local V, d = x.V, c.d
  M.each_row(c, x, function(b, h, i, p, lim, lse)
    local vo = (b * c.hkv + h // (c.h // c.hkv)) * c.skv * d
    local qo = ((b * c.h + h) * c.sq + i) * d
    for e = 1, d do
      local acc = 0
      for j = 0, lim - 1 do acc = acc + p[j] * V[vo + j * d + e] end
      local bits = enc(acc)
      O[qo + e], ob[qo + e] = dec(bits), string.pack("<I2", bits)
    end
    local r = (b * c.h + h) * c.sq + i
    lb[r + 1] = string.pack("<f", lse)
    LSE[r + 1] = string.unpack("<f", lb[r + 1])
  end)
  x.O, x.LSE = O, LSE
  bytes.o, bytes.lse = table.concat(ob), table.concat(lb)
end

-- fn(b, h, i, p, lim, lse) for every query row: p[j] = softmax of its scores
-- (j < lim, the keys it sees), lse its log-sum-exp (doubles).
function M.each_row(c, x, fn)
  local Q, K, d = x.Q, x.K, c.d -- (locals: the loops below are the references' time)
  for b = 0, c.b - 1 do
    for h = 0, c.h - 1 do
      local hk = h // (c.h // c.hkv)
      for i = 0, c.sq - 1 do
        local qo = ((b * c.h + h) * c.sq + i) * d
        local s, mx = {}, -math.huge
        local lim = c.causal and math.min(c.skv, i + 1) or c.skv
        for j = 0, lim - 1 do
          local ko = ((b * c.hkv + hk) * c.skv + j) * d
          local acc = 0
          for e = 1, d do acc = acc + Q[qo + e] * K[ko + e] end
          s[j] = acc * c.scale
          mx = math.max(mx, s[j])
        end
        local sum = 0
        for j = 0, lim - 1 do
          s[j] = math.exp(s[j] - mx)
          sum = sum + s[j]
        end
        for j = 0, lim - 1 do s[j] = s[j] / sum end
        fn(b, h, i, s, lim, mx + math.log(sum))
      end
    end
  end
end

-- The backward of problem c in doubles from its definition (P from the
-- exact scores, Delta from the 16-bit O): {dQ, dK, dV} and, for each element,
-- a bound of the sum of its terms' magnitudes ({mq, mk, mv}: the scale of the
-- rounding of P and dS to 16 bits).
function M.backward_reference(c, x)
  local g, d, scale = c.h // c.hkv, c.d, c.scale
  local Q, K, V, O, dO = x.Q, x.K, x.V, x.O, x.dO
  local dQ, dK, dV, mq, mk, mv = {}, {}, {}, {}, {}, {}
  for i = 1, c.b * c.h * c.sq * d do dQ[i], mq[i] = 0, 0 end
  for i = 1, c.b * c.hkv * c.skv * d do dK[i], dV[i], mk[i], mv[i] = 0, 0, 0, 0 end
  local function abs(t) -- (|t| once, not in the innermost loop)
    local a = {}
    for i = 1, #t do a[i] = math.abs(t[i]) end
    return a
  end
  local aQ, aK, adO = abs(Q), abs(K), abs(dO)
  M.each_row(c, x, function(b, h, i, p, lim)
    local qo, kb = ((b * c.h + h) * c.sq + i) * d, (b * c.hkv + h // g) * c.skv
    local delta = 0
    for e = 1, d do delta = delta + dO[qo + e] * O[qo + e] end
    for j = 0, lim - 1 do
      local ko, pj = (kb + j) * d, p[j]
      local dp = 0
      for e = 1, d do dp = dp + dO[qo + e] * V[ko + e] end
      local ds, mds = pj * (dp - delta) * scale, pj * (math.abs(dp) + math.abs(delta)) * scale
      for e = 1, d do
        local q, k = qo + e, ko + e
        dQ[q], mq[q] = dQ[q] + ds * K[k], mq[q] + mds * aK[k]
        dK[k], mk[k] = dK[k] + ds * Q[q], mk[k] + mds * aQ[q]
        dV[k], mv[k] = dV[k] + pj * dO[q], mv[k] + pj * adO[q]
      end
    end
  end)
  return { dQ = dQ, dK = dK, dV = dV, mq = mq, mk = mk, mv = mv }
end

-- How many elements of the 16-bit gradient bytes got differ from ref (one of
-- dQ, dK, dV with its magnitudes mag) by more than 2^-7 mag + 2^-8 |ref| (P
-- and dS are rounded to 16 bits, the gradient too). -> elements off, worst
-- |got - ref|, worst (|got - ref| / tolerance)
function M.backward_compare(c, got, ref, mag)
  local dec = VV.float16.dec[c.dtype or "bf16"]
  local bad, worst, ratio = 0, 0, 0
  for i = 1, #ref do
    local v = dec(string.unpack("<I2", got, (i - 1) * 2 + 1))
    local err, tol = math.abs(v - ref[i]), 2 ^ -7 * mag[i] + 2 ^ -8 * math.abs(ref[i]) + 1e-30
    worst, ratio = math.max(worst, err), math.max(ratio, err / tol)
    if err > tol or err ~= err then bad = bad + 1 end -- (NaN is off)
  end
  return bad, worst, ratio
end
-- Tile program k run on the emulator on its grid of programs (args by name:
-- tensors {data | bytes, shape}, scalars), or (lowered) the kernel tile-to-ptx
-- makes of it on `ctas` CTAs (a compute kernel: one a program; PH:
-- spec/protocol_helper.lua). -> read(name) of a tensor's bytes
function M.emulate(PH, k, grid, tensors, scalars, lowered, ctas)
  local tl = require "tilua"
  if lowered then
    local kop = PH.lowered_tile(k)
    local args, at = M.lowered_args(PH, kop, tensors, scalars, grid)
    local launch = kop:attr_or_default "tileas.launch"
    local r = tl.emulate(kop, { grid = (launch and launch.linear) and grid[1] * grid[2] or ctas, args = args,
                                max_steps = 1e9, policy = "random", seed = 3 })
    assert(r.ok, r.report)
    return function(n) return r.read(at["map:" .. n] or at["ptr:" .. n]) end
  end
  local args, names = {}, {}
  for n, v in pairs(tensors) do args[n] = v end
  for n, v in pairs(scalars) do args[n] = v end
  for n in pairs(args) do names[#names + 1] = n end
  table.sort(names) -- (a tile kernel's parameters are in name order)
  local at = {}
  for i, n in ipairs(names) do at[n] = i end
  local r = tl.emulate(k, { grid = grid, args = args, max_steps = 1e9 })
  assert(r.ok, r.report)
  return function(n) return r.read(at[n]) end
end

-- The emulator's arguments of a lowered tile program kop (PH:
-- spec/protocol_helper.lua) from its tensors by name ({data = bytes | bytes =
-- n, shape [, strides]}, row-major unless strides, in elements, say), scalars
-- by name and its grid of programs. -> args, where (parameter entry -> index)
function M.lowered_args(PH, kop, tensors, scalars, grid)
  local vals = { ["programs:x"] = grid[1], ["programs:y"] = grid[2] }
  for n, t in pairs(tensors) do
    vals["map:" .. n], vals["ptr:" .. n] = t, t.data or ("\0"):rep(t.bytes)
    local stride = 1
    for d = #t.shape, 1, -1 do
      vals["dim:" .. n .. ":" .. (d - 1)] = t.shape[d]
      if d < #t.shape then vals["stride:" .. n .. ":" .. (d - 1)] = t.strides and t.strides[d] or stride end
      stride = stride * t.shape[d]
    end
  end
  for n, v in pairs(scalars) do vals["arg:" .. n] = v end
  return PH.params_args(kop, vals)
end
-- }===

return M
