-- What the emulator and the checker must not get wrong (docs/protocol.md,
-- "Memory" and "The model"): accesses race only where their bytes overlap,
-- per-lane values from memory may decide branches, and the ops below are
-- modelled as the GPU runs them.
local tl = require "tilua"

-- A kernel of `warps` warps whose body is f(k, p, lane, warp).
local function kernel(name, warps, params, f)
  tl.new_module()
  local k = tl.kernel(name, { params = params, block = 32 * warps })
  k:define(function(k, p) f(k, p, tl.lane_id(), tl.warp_id()) end)
  return k
end

describe("the race check", function()
  -- warps 0 and 1 each write one element of width `t` next to each other (in
  -- one 16-byte span), then a CTA barrier, then thread 0 reads both
  local function adjacent(t, same)
    return kernel("adjacent", 2, { { "out", tl.ptr(t) } }, function(k, p, lane, warp)
      local buf = k:shared(t, 16, { align = 16 })
      tl.if_(lane:eq(0), function()
        local at = same and buf or buf + warp
        at:store(tl.cast(warp + 1, t))
      end)
      tl.barrier()
      tl.if_(tl.thread_id():eq(0), function()
        p.out:store(buf:load())
        ;(p.out + 1):store((buf + 1):load())
      end)
    end)
  end

  for _, t in ipairs { tl.i32, tl.i16, tl.u8 } do
    it(("takes two warps writing adjacent %s slots for no race, and one slot for one"):format(tostring(t)), function()
      local good = tl.verify_protocol(adjacent(t), { args = { { bytes = 16 } } })
      assert(good.ok, good.report)
      local bad = tl.verify_protocol(adjacent(t, true), { args = { { bytes = 16 } } })
      assert.is_false(bad.ok)
      assert.are.equal("overwrite", bad.violation.kind)
    end)
  end

  it("does so in global memory too", function()
    local k = kernel("gadjacent", 2, { { "out", tl.ptr(tl.u8) } }, function(_, p, lane, warp)
      tl.if_(lane:eq(0), function() (p.out + warp):store(tl.cast(warp + 1, tl.u8)) end)
    end)
    local r = tl.verify_protocol(k, { args = { { bytes = 16 } } })
    assert(r.ok, r.report)
    local e = tl.emulate(k, { args = { { bytes = 16 } } })
    assert.are.equal("\1\2", e.read(1, 2))
  end)
end)

describe("the emulator's arithmetic", function()
  it("models bf16 loads and stores, uitofp, fptosi / fptoui, extf, truncf, fma and bitcast", function()
    local k = kernel("conv", 1, { { "x", tl.ptr(tl.bf16) }, { "u", tl.ptr(tl.i32) }, { "out", tl.ptr(tl.f32) },
                                  { "h", tl.ptr(tl.bf16) }, { "i", tl.ptr(tl.i32) } }, function(_, p, lane)
      local xf = (p.x + lane):load():cast(tl.f32)               -- extf
      local uf = (p.u + lane):load():cast(tl.f32, true)          -- uitofp
      local r = tl.fma(xf, uf, xf)
      ;(p.out + lane * 4):store(r)
      ;(p.out + lane * 4 + 1):store(uf)
      ;(p.h + lane):store(r:cast(tl.bf16))                      -- truncf
      ;(p.i + lane * 3):store(r:cast(tl.i32))                   -- fptosi
      ;(p.i + lane * 3 + 1):store((-r):cast(tl.i32, true))      -- fptoui: saturates at 0
      ;(p.i + lane * 3 + 2):store(tl.op1("arith.bitcast", { r }, tl.i32))
    end)
    local x, u = {}, {}
    for l = 0, 31 do
      x[l + 1] = string.pack("<I2", (string.unpack("<I4", string.pack("<f", l * 0.5 - 3))) >> 16) -- exact in bf16
      u[l + 1] = string.pack("<I4", l == 0 and 0xffffffff or l * 1000)
    end
    local e = tl.emulate(k, { args = { table.concat(x), table.concat(u), { bytes = 4 * 4 * 32 }, { bytes = 2 * 32 },
                                       { bytes = 4 * 3 * 32 } } })
    assert(e.ok, e.report)
    local out, h, ints = e.read(3), e.read(4), e.read(5)
    local function f32(v) return (string.unpack("<f", string.pack("<f", v))) end
    for l = 0, 31 do
      local xv, uv = l * 0.5 - 3, l == 0 and 4294967295.0 or l * 1000.0
      local want = f32(xv * f32(uv) + xv)
      assert.are.equal(f32(uv), (string.unpack("<f", out, 16 * l + 5)))
      assert.are.equal(want, (string.unpack("<f", out, 16 * l + 1)), "lane " .. l)
      local bits = string.unpack("<I4", string.pack("<f", want))
      local rne = ((bits + 0x7fff + ((bits >> 16) & 1)) >> 16) & 0xffff -- round to nearest even
      assert.are.equal(rne, (string.unpack("<I2", h, 2 * l + 1)), "bf16 of lane " .. l)
      local trunc = want >= 0 and math.floor(want) or math.ceil(want)
      trunc = math.max(-2147483648, math.min(2147483647, trunc))
      assert.are.equal(math.tointeger(trunc), (string.unpack("<i4", ints, 12 * l + 1)))
      assert.are.equal(want > 0 and 0 or math.tointeger(math.min(-want // 1, 4294967295.0)) & 0xffffffff,
        (string.unpack("<I4", ints, 12 * l + 5)))
      assert.are.equal(bits, (string.unpack("<I4", ints, 12 * l + 9)))
    end
  end)
end)

describe("the emulator's float comparisons", function()
  it("models the unordered predicates (true where an operand is NaN)", function()
    local preds = { "une", "ueq", "ult", "uge", "one", "olt" }
    local k = kernel("cmp", 1, { { "x", tl.ptr(tl.f32) }, { "out", tl.ptr(tl.i32) } }, function(_, p, lane)
      local a, b = (p.x + lane * 2):load(), (p.x + lane * 2 + 1):load()
      for i, pr in ipairs(preds) do
        (p.out + lane * #preds + (i - 1)):store(tl.op1("arith.cmpf", { a, b }, tl.i1, { predicate = pr }):cast(tl.i32))
      end
    end)
    local pairs_ = { { 1, 2 }, { 2, 2 }, { 0 / 0, 1 }, { 3, 1 } }
    local x = {}
    for l = 0, 31 do
      local pr = pairs_[l % 4 + 1]
      x[#x + 1] = string.pack("<f<f", pr[1], pr[2])
    end
    local e = tl.emulate(k, { args = { table.concat(x), { bytes = 4 * #preds * 32 } } })
    assert(e.ok, e.report)
    local out = e.read(2)
    local want = { { 1, 0, 1, 0, 1, 1 }, { 0, 1, 0, 1, 0, 0 }, { 1, 1, 1, 1, 0, 0 }, { 1, 0, 0, 1, 1, 0 } }
    for l = 0, 31 do
      for i = 1, #preds do
        local v = string.unpack("<i4", out, 4 * (l * #preds + i - 1) + 1)
        assert.are.equal(want[l % 4 + 1][i], v ~= 0 and 1 or 0, ("lane %d, %s"):format(l, preds[i]))
      end
    end
  end)
end)

describe("a branch on a value loaded per lane", function()
  local function build(differ)
    return kernel("div", 2, { { "flags", tl.ptr(tl.i32) }, { "out", tl.ptr(tl.i32) } }, function(k, p, lane)
      local goB = k:seq_bar { depth = 1, arrive_count = 32 }
      k:async_exec("A", { first_warp = 0, warps = 1 }, function()
        local st = goB:state { phase = 0 }
        local other = differ and goB:state { phase = 1 } or st
        local v = (p.flags + lane):load()
        st.value = tl.if_(v:gt(0), function() return st.value end, function() return other.value end)
        goB:arrive(st)
      end)
      k:async_exec("B", { first_warp = 1, warps = 1 }, function()
        local st = goB:state { phase = 0 }
        goB:wait(st)
        ;(p.out + lane):store(lane)
      end)
    end)
  end
  local flags = {}
  for l = 1, 32 do flags[l] = string.pack("<i4", l % 2) end
  local args = { table.concat(flags), { bytes = 128 } }

  it("runs when what the branch yields is the same on every lane (one pipeline state)", function()
    local e = tl.emulate(build(false), { args = args })
    assert(e.ok, e.report)
    local r = tl.verify_protocol(build(false), { args = args })
    assert(r.ok, r.report)
  end)

  it("is a clear error where a state would differ between the lanes", function()
    local ok, err = pcall(tl.emulate, build(true), { args = args })
    assert.is_false(ok)
    assert.matches("differs between the lanes of a warp", err, 1, true)
    assert.matches("protocol_exact_spec.lua:%d+", err)
  end)
end)

describe("a CTA's exit", function()
  -- one elected thread starts a bulk copy into shared memory on an mbarrier;
  -- with `wait` every warp waits for it before the CTA exits
  local function build(wait)
    return kernel("early_exit", 2, { { "src", tl.ptr(tl.u8) } }, function(k, p)
      local land = k:shared(tl.u8, 256, { align = 128 })
      local bar = k:shared(tl.i64, 1, { align = 8 })
      tl.if_(tl.thread_id():eq(0), function()
        tl.mbarrier_init(bar, 1)
        tl.fence_mbarrier_init()
      end)
      tl.barrier()
      tl.if_(tl.warp_id():eq(0), function()
        tl.elect_one(function()
          tl.mbarrier_arrive_expect_tx(bar, 256)
          tl.bulk_copy(land, p.src, 256, bar)
        end)
      end)
      if wait then tl.mbarrier_wait(bar, 0) end
    end)
  end

  it("is reported while a bulk copy into its shared memory is in flight", function()
    local good = tl.verify_protocol(build(true), { args = { ("\1"):rep(256) } })
    assert(good.ok, good.report)
    local bad = tl.verify_protocol(build(false), { args = { ("\1"):rep(256) } })
    assert.is_false(bad.ok)
    assert.are.equal("exit", bad.violation.kind)
    assert.matches("CTA 0 exits %(its last warp, [^)]*%) while bulk copy 1 %(from kernel warp 0%) at [^ ]*protocol_exact_spec.lua:%d+ into its shared memory is",
      bad.violation.message)
  end)
end)

describe("wgmma with A in registers", function()
  -- a 64 x 64 bf16 tile in swizzled shared memory; D = A * B for one k16 slice
  -- with A from the descriptor or from each lane's registers (the same elements)
  local function mma(registers)
    tl.new_module()
    local k = tl.kernel("mma_reg", { params = { { "src", tl.ptr(tl.bf16) }, { "out", tl.ptr(tl.f32) } }, block = 128 })
    k:define(function(k, p)
      local s = k:shared(tl.bf16, { 64, 64 }, { align = 1024, swizzle = 128 })
      local t = tl.thread_id()
      for i = 0, 31 do
        local e = t * 32 + i
        s:ptr(e // 64, e % 64):store((p.src + e):load())
      end
      tl.barrier()
      local d = tl.wgmma_desc(s:ptr(0, 0), { swizzle = 128, sbo = 1024 })
      local a = d
      if registers then
        local w, l = t // 32, t % 32
        local row, col = w * 16 + l // 4, (l % 4) * 2
        local els = {}
        for e = 0, 7 do
          local j = e // 2
          els[e + 1] = s:ptr(row + 8 * (j % 2), col + 8 * (j // 2) + e % 2):load()
        end
        a = tl.vector_of(tl.bf16, els)
      end
      tl.wgmma_fence()
      local acc = tl.wgmma(tl.zeros(tl.f32, 32), a, d, { type_a = "bf16" })
      tl.wgmma_commit()
      tl.wgmma_wait(0)
      for i = 0, 31 do (p.out + t * 32 + i):store(tl.extract(acc, i)) end
    end)
    return k
  end

  it("computes what the descriptor form computes", function()
    local src = {}
    for e = 0, 64 * 64 - 1 do src[e + 1] = string.pack("<I2", (string.unpack("<I4", string.pack("<f", (e * 7 % 9) - 4))) >> 16) end
    local args = { table.concat(src), { bytes = 4 * 128 * 32 } }
    local a = tl.emulate(mma(false), { args = args })
    assert(a.ok, a.report)
    local b = tl.emulate(mma(true), { args = args })
    assert(b.ok, b.report)
    assert.are.equal(a.read(2), b.read(2))
    assert.are_not.equal(("\0"):rep(4 * 128 * 32), a.read(2))
    local r = tl.verify_protocol(mma(true), { args = args })
    assert(r.ok, r.report)
  end)
end)
