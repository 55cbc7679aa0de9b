-- The attention forward of stdlib/attention.lua (tl.attention) without a GPU:
-- its options are checked with messages at the caller's line; its kernels
-- compile to PTX that ptxas takes with no register moves ignored, no wgmma
-- fence injected and no spills; on the CPU emulator its O and log-sum-exp equal
-- a CPU reference at small sizes (ragged lengths, causal, grouped-query heads,
-- head dims 64, 128 and 256, f16, O staged in Q's rows, one to three consumer
-- warpgroups), and the protocol checker finds nothing wrong in its pipelines.
local H = dofile "spec/helper.lua"
local PH = dofile "spec/protocol_helper.lua"
local tl = require "tilua"
local VV = require "tilua.emulate.values"

-- Inputs: multiples of 1/8 in [-1, 1] (exact in bf16 and f16) from a fixed LCG.
local function inputs(c, seed)
  local enc = VV.float16.enc[c.dtype]
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
  local args = { { data = qb, shape = { c.b, c.h, c.sq, c.d } }, { data = kb, shape = { c.b, c.hkv, c.skv, c.d } },
                 { data = vb, shape = { c.b, c.hkv, c.skv, c.d } },
                 { bytes = c.b * c.h * c.sq * c.d * 2, shape = { c.b, c.h, c.sq, c.d } },
                 { bytes = c.b * c.h * c.sq * 4 }, c.b, c.h, c.hkv, c.sq, c.skv, c.scale }
  return Q, K, V, args
end

-- The largest errors of the emulated O and LSE against the CPU (doubles), and
-- how many elements are off: O by more than 2^-7 + 2^-8 |ref| (P and O are
-- rounded to 16 bits), the LSE by more than 1e-3 (1 + |ref|).
local function compare(c, Q, K, V, ob, lb)
  local dec = VV.float16.dec[c.dtype]
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
          local x = 0
          for e = 1, c.d do x = x + Q[qo + e] * K[ko + e] end
          s[j] = x * c.scale
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
          local x = 0
          for j = 0, lim - 1 do x = x + s[j] * V[((b * c.hkv + hk) * c.skv + j) * c.d + e] end
          x = x / sum
          local got = dec(string.unpack("<I2", ob, (qo + e - 1) * 2 + 1))
          worst = math.max(worst, math.abs(got - x))
          if math.abs(got - x) > 2 ^ -7 + 2 ^ -8 * math.abs(x) then bad = bad + 1 end
        end
      end
    end
  end
  return worst, worstl, bad
end

describe("tl.attention", function()
  it("refuses bad options with a message at the caller's line", function()
    local line = H.line_of("spec/attention_spec.lua", "local function bad(o) return " .. "pcall(tl.attention.build")
    local function bad(o) return pcall(tl.attention.build, o) end
    local cases = {
      { { h = 6, hkv = 4, sq = 64, d = 64 }, "hkv (4) must divide h (6)" },
      { { h = 1, sq = 64, d = 96 }, "head dim d must be 64, 128 or 256, got 96" },
      { { h = 1, sq = 64, d = 128, bn = 72 }, "bn must be a multiple of 16" },
      { { h = 1, sq = 64, d = 256, bn = 128, stages = 3 }, "do not fit" },
      { { h = 1, sq = 0, d = 64 }, "'sq' must be a positive integer" },
      { { h = 1, sq = 64, d = 64, dtype = "e4m3" }, "dtype must be bf16 or f16" },
      { { h = 1, sq = 64, d = 64, consumers = 4 }, "consumers must be 1, 2 or 3" },
      { { h = 1, sq = 64, d = 64, schedule = "streamk" }, "schedule must be persistent or data_parallel" },
    }
    for _, case in ipairs(cases) do
      local ok, err = bad(case[1])
      assert.is_false(ok)
      H.has(err, case[2])
      H.has(err, "attention_spec.lua:" .. line)
    end
  end)

  it("picks FlashAttention-3's tiles and stages O in Q's rows where the rings leave no room", function()
    local function cfg(o) return tl.attention.config(o) end
    local c = cfg { h = 1, sq = 4096, d = 128 }
    assert.same({ 128, 128, 2, false }, { c.bm, c.bn, c.consumers, c.o_in_q })
    c = cfg { h = 1, sq = 4096, d = 64 }
    assert.same({ 192, 128, 3 }, { c.bm, c.bn, c.consumers })
    assert.is_true(cfg({ h = 1, sq = 4096, d = 256 }).o_in_q)
    assert.is_true(cfg({ h = 1, sq = 4096, d = 128, bn = 176 }).o_in_q)
    assert.equal(4, tl.attention.build { b = 1, h = 2, sq = 300, d = 128, sms = 4 }.grid) -- 6 tiles, 4 CTAs
    assert.equal(6, tl.attention.build { b = 1, h = 2, sq = 300, d = 128, sms = 4, schedule = "data_parallel" }.grid)
  end)

  it("compiles to PTX where ptxas moves registers, injects no fence and spills nothing", function()
    local exe = H.ptxas()
    for _, o in ipairs { { d = 128 }, { d = 64 }, { d = 256 }, { d = 128, bn = 176 } } do
      local a = tl.attention.build { b = 1, h = 1, sq = 4096, d = o.d, bn = o.bn, causal = o.causal }
      local ptx = a.kernel:compile()
      H.has(ptx, "setmaxnreg.inc")
      H.has(ptx, ".maxnreg ")
      H.has(ptx, "wgmma.mma_async.sync.aligned.m64n" .. o.d .. "k16.f32.bf16.bf16") -- P V, A from registers
      if exe then
        local path = os.tmpname()
        local f = assert(io.open(path, "w"))
        f:write(ptx)
        f:close()
        local log = io.popen(("%s -arch=sm_90a -v -o /dev/null %s 2>&1"):format(H.quote(exe), H.quote(path))):read "a"
        os.remove(path)
        H.lacks(log, "C7508") -- setmaxnreg ignored
        H.lacks(log, "C7519") -- a warpgroup.arrive injected
        H.lacks(log, "C7510")
        H.has(log, "0 bytes spill stores")
      end
    end
    if not exe then pending "ptxas not found" end
  end)

  local CASES = {
    { b = 1, h = 2, hkv = 1, sq = 100, skv = 150, d = 64, bn = 64, consumers = 2, sms = 2 },
    { b = 1, h = 1, sq = 150, skv = 150, d = 64, bn = 64, consumers = 2, causal = true, sms = 1 },
    { b = 1, h = 1, sq = 130, skv = 70, d = 128, bn = 64, consumers = 1, dtype = "f16", sms = 2 },
    { b = 1, h = 1, sq = 70, skv = 130, d = 256, bn = 64, consumers = 2, sms = 1 },                   -- O in Q's rows
    { b = 2, h = 1, sq = 100, skv = 200, d = 64, bn = 128, consumers = 3, causal = true, sms = 1 },
  }
  for _, o in ipairs(CASES) do
    local a = tl.attention.build(o)
    local c = a.cfg
    it(("on the CPU emulator equals a CPU reference: %d x %d heads (%d), %d x %d, d %d, bn %d, %d consumers%s%s%s"):format(
         c.b, c.h, c.hkv, c.sq, c.skv, c.d, c.bn, c.consumers, c.causal and ", causal" or "", c.dtype == "f16" and ", f16" or "",
         c.o_in_q and ", O in Q" or ""), function()
      local Q, K, V, args = inputs(c, 7 + c.d + c.sq)
      local r = tl.emulate(PH.lowered_gemm(a), { grid = a.grid, args = args, max_steps = 1e9 })
      assert(r.ok, r.report)
      local worst, worstl, bad = compare(c, Q, K, V, r.read(4), r.read(5))
      assert.equal(0, bad, ("max |O - ref| %.3g, max |LSE - ref| %.3g"):format(worst, worstl))
    end)
  end

  it("passes the protocol check: no deadlock, stage or phase error in its four pipelines", function()
    local a = tl.attention.build { b = 1, h = 1, sq = 64, skv = 192, d = 64, bn = 64, consumers = 2, sms = 1 }
    local c = a.cfg
    local _, _, _, args = inputs(c, 3)
    local r = tl.verify_protocol(PH.lowered_gemm(a), { grid = 1, args = args, max_states = 2000, max_seconds = 60 })
    assert(r.ok, r.report)
  end)
end)
