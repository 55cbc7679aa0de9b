-- The attention forward of stdlib/attention.lua (tl.attention) without a GPU:
-- its options are checked with messages at the caller's line; its kernels
-- compile to PTX that ptxas takes with no register moves ignored, no wgmma
-- fence injected and no spills; on the CPU emulator its O and log-sum-exp equal
-- a CPU reference at small sizes (ragged lengths, causal, grouped-query heads,
-- head dims 64, 128 and 256, f16, O staged in Q's rows, one to three consumer
-- warpgroups), and the protocol checker finds nothing wrong in its pipelines;
-- its register moves fit the CTA's registers (a CTA whose warpgroups take
-- more than it holds deadlocks on the emulator and the checker).
local H = dofile "spec/helper.lua"
local PH = dofile "spec/protocol_helper.lua"
local tl = require "tilua"

local AH = dofile "spec/attention_helper.lua"

-- The inputs of problem c (spec/attention_helper.lua's) and tl.attention's
-- kernel arguments for them. -> values, args
local function inputs(c, seed)
  local x, bytes = AH.inputs(c, seed)
  return x, AH.stdlib_args(c, bytes)
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
      { { h = 1, sq = 64, d = 128, regs = { 32, 240 } }, "producer + 2 x consumer <= 504" },
      { { h = 1, sq = 64, d = 64, regs = { 24, 164 } }, "regs must be { producer, consumer }, multiples of 8" },
      { { h = 1, sq = 64, d = 64, kv_order = "k_first" }, "kv_order must be skewed or paired" },
      { { h = 1, sq = 64, d = 64, exp2_poly = 9 }, "exp2_poly must be an integer in [0, 8]" },
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
    c = cfg { h = 1, sq = 4096, d = 256 }
    assert.same({ 128, 80, true, "persistent", 240 }, { c.bm, c.bn, c.o_in_q, c.schedule, c.regs[2] })
    assert.equal("data_parallel", cfg({ h = 1, sq = 4096, d = 128, causal = true }).schedule) -- (tiles of differing lengths)
    assert.is_true(cfg({ h = 1, sq = 4096, d = 128, bn = 176 }).o_in_q)
    -- head dim 64, non-causal, persistent, bn 128, 3 consumers: the rows' sums by the PV GEMM and the tail in
    -- unit tiles (measured faster there: docs/PERF.md, s13attn-1); head dim 128, non-causal, persistent, bn 128,
    -- 2 consumers: the sums alone (s13attn-2); elsewhere, or asked off, neither
    local function forms(o)
      local f = cfg(o)
      return { f.sum_mma, f.split_tail }
    end
    assert.same({ true, true }, forms { h = 1, sq = 4096, d = 64 })
    assert.same({ true, true }, forms { h = 1, sq = 4096, d = 64, dtype = "f16", bn = 128, consumers = 3 })
    assert.same({ false, false }, forms { h = 1, sq = 4096, d = 64, causal = true })
    assert.same({ false, false }, forms { h = 1, sq = 4096, d = 64, schedule = "data_parallel" })
    assert.same({ false, false }, forms { h = 1, sq = 4096, d = 64, bn = 64 })
    assert.same({ false, false }, forms { h = 1, sq = 4096, d = 64, consumers = 2 })
    assert.same({ true, false }, forms { h = 1, sq = 4096, d = 128 })
    assert.same({ true, false }, forms { h = 1, sq = 4096, d = 128, dtype = "f16", bn = 128, consumers = 2 })
    assert.same({ false, false }, forms { h = 1, sq = 4096, d = 128, causal = true })
    assert.same({ false, false }, forms { h = 1, sq = 4096, d = 128, schedule = "data_parallel" })
    assert.same({ false, false }, forms { h = 1, sq = 4096, d = 128, bn = 176 })
    assert.same({ false, false }, forms { h = 1, sq = 4096, d = 128, bn = 64, consumers = 3 })
    assert.same({ false, false }, forms { h = 1, sq = 4096, d = 128, sum_mma = false })
    assert.same({ true, true }, forms { h = 1, sq = 4096, d = 128, split_tail = true })
    assert.same({ false, false }, forms { h = 1, sq = 4096, d = 256 })
    assert.same({ false, true }, forms { h = 1, sq = 4096, d = 64, sum_mma = false })
    assert.same({ true, false }, forms { h = 1, sq = 4096, d = 64, split_tail = false })
    local s5, s4 = cfg { h = 1, sq = 4096, d = 64, stages = 5 }, cfg { h = 1, sq = 4096, d = 64, stages = 4 }
    assert.same({ false, true, false }, { s5.sum_mma, s5.split_tail, s5.o_in_q }) -- (5 stages leave no room for the ones)
    assert.same({ true, true }, { s4.sum_mma, s4.o_in_q })
    local t3, t2 = cfg { h = 1, sq = 4096, d = 128, stages = 3 }, cfg { h = 1, sq = 4096, d = 128 }
    assert.same({ false, true }, { t3.sum_mma, t3.o_in_q }) -- (3 stages at d 128 leave no room for the ones)
    assert.same({ true, false }, { t2.sum_mma, t2.o_in_q })
    assert.equal(4, tl.attention.build { b = 1, h = 2, sq = 300, d = 128, sms = 4 }.grid) -- 6 tiles, 4 CTAs
    assert.equal(6, tl.attention.build { b = 1, h = 2, sq = 300, d = 128, sms = 4, schedule = "data_parallel" }.grid)
  end)

  it("compiles to PTX where ptxas moves registers, injects no fence and spills nothing", function()
    local exe = H.ptxas()
    -- (head dim 256: the consumers take 240 registers, the producer's loads
    -- 24, where ptxas spills a few bytes of its own -- 12, 4 since divisions by
    -- powers of two are shifts -- as it does at head dim 128 with the same
    -- split, whose consumers have room: no more than 12 is allowed)
    for _, o in ipairs { { d = 128 }, { d = 64 }, { d = 256, spill = 12 }, { d = 128, bn = 176 } } do
      local a = tl.attention.build { b = 1, h = 1, sq = 4096, d = o.d, bn = o.bn, causal = o.causal }
      local ptx = a.kernel:compile()
      H.has(ptx, "setmaxnreg.inc")
      H.has(ptx, ".maxnreg ")
      -- P V, A from registers (head dims 64 and 128 at their default tiles: 8 columns more, the rows' sums:
      -- sum_mma, their default)
      H.has(ptx, "wgmma.mma_async.sync.aligned.m64n" .. (a.cfg.sum_mma and o.d + 8 or o.d) .. "k16.f32.bf16.bf16")
      assert.equal(o.d <= 128 and not o.bn, a.cfg.sum_mma)
      if exe then
        local path = os.tmpname()
        local f = assert(io.open(path, "w"))
        f:write(ptx)
        f:close()
        local log = io.popen(("%s -arch=sm_90a -v -o /dev/null %s 2>&1"):format(H.quote(exe), H.quote(path))):read "a"
        os.remove(path)
        for _, code in ipairs(H.WGMMA_SLOW) do H.lacks(log, code) end
        local spilled = tonumber(log:match "(%d+) bytes spill stores")
        assert(spilled and spilled <= (o.spill or 0), ("at most %d bytes spill stores, got:\n%s"):format(o.spill or 0, log))
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
    -- head dim 128's own tiles: 128 x 128, 2 consumers, the sums by the PV GEMM (its default, non-causal), and without
    { b = 1, h = 1, sq = 130, skv = 200, d = 128, sms = 1 },
    { b = 1, h = 1, sq = 130, skv = 200, d = 128, sms = 1, sum_mma = false },
    { b = 1, h = 1, sq = 150, skv = 150, d = 64, bn = 64, consumers = 2, causal = true, sms = 1, exp2_poly = 8 }, -- (every exp2 emulated)
    -- the softmax's forms: the lazy rescale (peaked rows: scale 1, the max grows past the threshold and not),
    -- a max by pairs, fresh S registers, P carried as f32
    { b = 1, h = 2, sq = 100, skv = 300, d = 64, bn = 64, consumers = 2, sms = 2, scale = 1.0, rescale = 8, max_tree = true,
      fresh_s = true, pack_late = true },
    { b = 1, h = 1, sq = 130, skv = 200, d = 128, bn = 64, consumers = 2, causal = true, sms = 1, rescale = 0 },
    -- the rows' sums by the PV GEMM (V with a box of ones), O rescaled before the PV issue
    { b = 1, h = 2, hkv = 1, sq = 100, skv = 150, d = 64, bn = 64, consumers = 3, sms = 2, sum_mma = true, early_rescale = true },
    { b = 1, h = 1, sq = 130, skv = 200, d = 128, bn = 64, consumers = 2, causal = true, sms = 1, sum_mma = true, rescale = 8,
      scale = 1.0 },
    -- the tail split into tiles of one warpgroup's rows: 33 units of 64 rows on 4 CTAs, 8 whole tiles (heads 0 and 1
    -- three, head 2 two), 9 unit tiles; grouped-query heads over two batches, 4 unit tiles
    { b = 1, h = 3, sq = 700, skv = 300, d = 64, bn = 64, consumers = 3, sms = 4, split_tail = true },
    { b = 2, h = 2, hkv = 1, sq = 300, skv = 200, d = 128, bn = 64, consumers = 2, sms = 3, split_tail = true, sum_mma = true },
    -- head dim 64's default (non-causal: bn 128, 3 consumers, the sums by the PV GEMM, the tail in unit tiles):
    -- 22 units of 64 rows on 3 CTAs (6 whole tiles, 4 unit tiles), ragged keys
    { b = 1, h = 2, sq = 700, skv = 300, d = 64, sms = 3 },
  }
  for _, o in ipairs(CASES) do
    local a = tl.attention.build(o)
    local c = a.cfg
    it(("on the CPU emulator equals a CPU reference: %d x %d heads (%d), %d x %d, d %d, bn %d, %d consumers%s%s%s%s"):format(
         c.b, c.h, c.hkv, c.sq, c.skv, c.d, c.bn, c.consumers, c.causal and ", causal" or "", c.dtype == "f16" and ", f16" or "",
         c.o_in_q and ", O in Q" or "", c.exp2_poly > 0 and (", %d of 8 exp2 on the FMA pipe"):format(c.exp2_poly) or "") .. (c.rescale and (", rescale > %g"):format(c.rescale) or "")
         .. (c.max_tree and ", max by pairs" or "") .. (c.fresh_s and ", fresh S" or "") .. (c.pack_late and ", P packed late" or "")
         .. (c.sum_mma and ", sums by the PV GEMM" or "") .. (c.early_rescale and ", O rescaled before the PV issue" or "")
         .. (c.split_tail and ", the tail in unit tiles" or ""), function()
      local x, args = inputs(c, 7 + c.d + c.sq)
      local r = tl.emulate(PH.lowered_gemm(a), { grid = a.grid, args = args, max_steps = 1e9 })
      assert(r.ok, r.report)
      local worst, worstl, bad = AH.compare(c, x, r.read(4), r.read(5))
      assert.equal(0, bad, ("max |O - ref| %.3g, max |LSE - ref| %.3g"):format(worst, worstl))
    end)
  end

  -- The registers a CTA holds are its .maxnreg times its threads; setmaxnreg.dec
  -- gives a warp's share to the CTA's pool and setmaxnreg.inc waits until the
  -- pool holds what it takes. Head dim 128 once asked for 32 + 2 x 240 of
  -- 168 x 384 (65536 > 64512): the consumers waited forever on the GPU.
  local function regs_kernel(dec, inc)
    tl.new_module()
    local k = tl.kernel("regs", { block = 384 })
    k:define(function(k)
      k:agent("producer", { warps = 4 }, function() tl.setmaxnreg(dec, "dec") end)
      k:agent("consumer", { warps = 8 }, function() tl.setmaxnreg(inc, "inc") end)
    end)
    return k
  end

  it("a CTA whose warpgroups take more registers than it holds deadlocks on the emulator and the checker", function()
    local k = regs_kernel(32, 240)
    H.has(k:compile(), ".maxnreg 168")
    local r = tl.emulate(k, { grid = 1 })
    assert.is_false(r.ok)
    H.has(r.report, "deadlock")
    H.has(r.report, "takes 240 registers a thread")
    for _, por in ipairs { true, false } do
      local c = tl.verify_protocol(k, { grid = 1, max_states = 2000, por = por })
      assert.is_false(c.ok)
      H.has(c.report, "takes 240 registers a thread")
    end
    for _, m in ipairs { { 40, 232 }, { 24, 240 } } do -- the GEMM's and FlashAttention-3's: they fit
      local ok = regs_kernel(m[1], m[2])
      local e = tl.emulate(ok, { grid = 1 })
      assert(e.ok, e.report)
      local c = tl.verify_protocol(ok, { grid = 1, max_states = 2000, por = false })
      assert(c.ok, c.report)
    end
  end)

  it("moves registers within its CTA's: producer + consumers <= .maxnreg x threads, at every head dim and consumer count", function()
    for _, o in ipairs { { d = 64 }, { d = 128 }, { d = 256 }, { d = 64, consumers = 2 }, { d = 128, consumers = 3, bn = 64 },
                         { d = 128, consumers = 1 }, { d = 128, regs = { 24, 240 } }, { d = 256, bn = 80, regs = { 24, 240 } } } do
      local a = tl.attention.build { b = 1, h = 1, sq = 4096, d = o.d, consumers = o.consumers, bn = o.bn, regs = o.regs }
      local ptx = a.kernel:compile()
      local threads = tonumber(ptx:match "%.reqntid (%d+)")
      local entry = tonumber(ptx:match "%.maxnreg (%d+)")
      local dec = tonumber(ptx:match "setmaxnreg%.dec%.sync%.aligned%.u32 (%d+)")
      local inc = tonumber(ptx:match "setmaxnreg%.inc%.sync%.aligned%.u32 (%d+)")
      if a.cfg.consumers > 1 then
        assert(entry and dec and inc, "no register moves at d " .. o.d)
        assert(128 * dec + (threads - 128) * inc <= entry * threads,
               ("d %d, %d consumers: %d x 128 + %d x %d > %d x %d"):format(o.d, a.cfg.consumers, dec, inc, threads - 128, entry, threads))
      end
    end
  end)

  it("passes the protocol check: no deadlock, stage or phase error in its four pipelines", function()
    local a = tl.attention.build { b = 1, h = 1, sq = 64, skv = 192, d = 64, bn = 64, consumers = 2, sms = 1 }
    local c = a.cfg
    local _, args = inputs(c, 3)
    local r = tl.verify_protocol(PH.lowered_gemm(a), { grid = 1, args = args, max_states = 2000, max_seconds = 60 })
    assert(r.ok, r.report)
  end)
end)
