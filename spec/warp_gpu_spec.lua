-- Warp-level instructions on the GPU (tools/gpu test): shuffles in every mode
-- and segment width, votes, ballots and redux over lanes of random data,
-- mma.sync for bf16, f16, tf32 and fp8 against a CPU product, approximate
-- math within its documented error, packed bf16x2 / f16x2 arithmetic rounded
-- like the CPU rounds, loads with cache hints and inline PTX with results.
-- Every check is against a CPU reference on fresh random data (TILUA_SEED
-- fixes it); without a GPU every test is pending.
local H = dofile "spec/helper.lua"
local tl = require "tilua"

local seed, gpu = H.seed(), H.gpu
local D = tl.device

-- a small deterministic generator for host-side data
local rng_state = seed % 2147483647 + 1
local function rnd(n) -- 0 .. n-1
  rng_state = rng_state * 48271 % 2147483647
  return rng_state % n
end

local function kernel(name, params, block, body)
  tl.new_module()
  local k = tl.kernel(name, { params = params, block = block })
  k:define(body)
  return k
end

local function s32(x) x = x & 0xffffffff; return x >= 0x80000000 and x - 0x100000000 or x end

describe("shfl.sync", function()
  for _, width in ipairs { 32, 8, 2 } do
    it(("moves values between lanes in every mode (segments of %d)"):format(width), function()
      gpu()
      local B, warps = 128, 3
      local n = B * warps
      local modes = { "idx", "up", "down", "bfly" }
      local k = kernel("shfl_" .. width, { { "x", tl.ptr(tl.i32) }, { "fx", tl.ptr(tl.f32) }, { "l", tl.ptr(tl.i32) },
                                           { "out", tl.ptr(tl.i32) }, { "fout", tl.ptr(tl.f32) } }, B, function(k, p)
        local t = tl.block_id() * B + tl.thread_id()
        local x, fx, l = (p.x + t):load(), (p.fx + t):load(), (p.l + t):load()
        for m, mode in ipairs(modes) do
          (p.out + (t * 4 + (m - 1))):store(tl.shfl(x, l, { mode = mode, width = width }));
          (p.fout + (t * 4 + (m - 1))):store(tl.shfl(fx, l, { mode = mode, width = width }))
        end
      end)
      local lanes = {}
      for i = 1, n do lanes[i] = rnd(math.min(32, width + 2)) end -- some past the segment
      local x <close> = D.random(tl.i32, n, seed)
      local fx <close> = D.random(tl.f32, n, seed + 1)
      local l <close> = D.from(tl.i32, lanes)
      local out <close> = D.alloc(tl.i32, 4 * n)
      local fout <close> = D.alloc(tl.f32, 4 * n)
      k:launch { grid = warps, args = { x, fx, l, out, fout } }
      D.synchronize()
      local hx, hf, ho, hfo = x:to_table(), fx:to_table(), out:to_table(), fout:to_table()
      local segmask = 32 - width
      for t = 0, n - 1 do
        local lane, base, b = t % 32, t - t % 32, lanes[t + 1]
        for m, mode in ipairs(modes) do
          -- the PTX ISA's definition of shfl.sync with c = (32 - width) << 8 | clamp
          local cval = mode == "up" and 0 or 31
          local maxl = (lane & segmask) | (cval & ~segmask & 31)
          local minl = lane & segmask
          local j, ok
          if mode == "up" then j = lane - b; ok = j >= maxl
          elseif mode == "down" then j = lane + b; ok = j <= maxl
          elseif mode == "bfly" then j = lane ~ b; ok = j <= maxl
          else j = minl | (b & 31 & ~segmask); ok = j <= maxl end
          if not ok then j = lane end
          local want, got = hx[base + j + 1], ho[t * 4 + m]
          assert(want == got, ("width %d, %s: thread %d (lane operand %d) got %d, expected %d"):format(width, mode, t, b, got, want))
          assert(hf[base + j + 1] == hfo[t * 4 + m], ("width %d, %s (f32): thread %d"):format(width, mode, t))
        end
      end
    end)
  end
end)

describe("vote, ballot and redux", function()
  it("combine the lanes of each warp", function()
    gpu()
    local B, warps = 96, 4
    local n = B * warps
    local kinds = { "add", "min", "max", "umin", "umax", "and", "or", "xor" }
    local k = kernel("votes", { { "x", tl.ptr(tl.i32) }, { "thr", tl.i32 }, { "out", tl.ptr(tl.i32) } }, B, function(k, p)
      local t = tl.block_id() * B + tl.thread_id()
      local x = (p.x + t):load()
      local pr = (x & 7):lt(p.thr)
      local R = 4 + #kinds
      local o = p.out + t * R
      o:store(tl.ballot(pr));
      (o + 1):store(tl.select(tl.vote_all(pr), tl.const(1), tl.const(0)));
      (o + 2):store(tl.select(tl.vote_any(pr), tl.const(1), tl.const(0)));
      (o + 3):store(tl.select(tl.vote_uni(pr), tl.const(1), tl.const(0)))
      for i, kind in ipairs(kinds) do (o + 3 + i):store(tl.redux(kind, x)) end
    end)
    local R = 4 + #kinds
    for _, thr in ipairs { 0, 4, 8 } do
      local x <close> = D.random(tl.i32, n, seed + thr)
      local out <close> = D.alloc(tl.i32, R * n)
      k:launch { grid = warps, args = { x, thr, out } }
      D.synchronize()
      local hx, ho = x:to_table(), out:to_table()
      for w = 0, n // 32 - 1 do
        local bal, all, any = 0, true, false
        local acc = { add = 0, min = math.maxinteger, max = math.mininteger, umin = math.maxinteger, umax = 0,
                      ["and"] = 0xffffffff, ["or"] = 0, xor = 0 }
        for lane = 0, 31 do
          local v = hx[w * 32 + lane + 1]
          local u = v & 0xffffffff
          local pr = (v & 7) < thr
          if pr then bal = bal | (1 << lane) end
          all, any = all and pr, any or pr
          acc.add = acc.add + v
          acc.min, acc.max = math.min(acc.min, v), math.max(acc.max, v)
          acc.umin, acc.umax = math.min(acc.umin, u), math.max(acc.umax, u)
          acc["and"], acc["or"], acc.xor = acc["and"] & u, acc["or"] | u, acc.xor ~ u
        end
        for lane = 0, 31 do
          local t = w * 32 + lane
          local r = function(i) return ho[t * R + i] end
          assert(r(1) & 0xffffffff == bal, ("ballot, warp %d, thr %d: %x, expected %x"):format(w, thr, r(1) & 0xffffffff, bal))
          assert.equal(all and 1 or 0, r(2))
          assert.equal(any and 1 or 0, r(3))
          assert.equal((all or not any) and 1 or 0, r(4))
          for i, kind in ipairs(kinds) do
            assert(s32(r(4 + i)) == s32(acc[kind]), ("redux.%s, warp %d: %d, expected %d"):format(kind, w, r(4 + i), s32(acc[kind])))
          end
        end
      end
    end
  end)
end)

-- fp8 decoding: e4m3 (bias 7, no infinities) and e5m2 (bias 15)
local function fp8_value(b, e5m2)
  local sign = (b & 0x80) ~= 0 and -1 or 1
  local eb, mb = e5m2 and 5 or 4, e5m2 and 2 or 3
  local bias = e5m2 and 15 or 7
  local e, m = (b >> mb) & ((1 << eb) - 1), b & ((1 << mb) - 1)
  if e == 0 then return sign * m / (1 << mb) * 2 ^ (1 - bias) end
  return sign * (1 + m / (1 << mb)) * 2 ^ (e - bias)
end

describe("mma.sync", function()
  -- one warp per 16 x 8 tile: D = A (16 x K, row-major) * B (K x 8, stored K-major
  -- as 8 x K) + C, with the fragment layouts of the PTX ISA.
  local cases = {
    { type = "bf16", elem = tl.bf16, K = 16 },
    { type = "f16", elem = tl.f16, K = 16 },
    { type = "tf32", elem = tl.f32, K = 8 },
    { type = "e4m3", elem = tl.i8, K = 32 },
    { type = "e4m3", type_b = "e5m2", elem = tl.i8, K = 32 },
  }
  for _, c in ipairs(cases) do
    local tb = c.type_b or c.type
    it(("computes m16n8k%d for %s x %s"):format(c.K, c.type, tb), function()
      gpu()
      local K, warps = c.K, 5
      local k = kernel("mma_" .. c.type .. "_" .. tb, { { "a", tl.ptr(c.elem) }, { "b", tl.ptr(c.elem) }, { "c", tl.ptr(tl.f32) },
                                                   { "d", tl.ptr(tl.f32) } }, 32 * warps, function(k, p)
        local t = tl.thread_id()
        local w, lane = t // 32, t % 32
        local g, q = lane // 4, lane % 4
        local A, Bm = p.a + w * (16 * K), p.b + w * (8 * K)
        local function a(r, col) return (A + (r * K + col)):load() end
        local function b(kk, n) return (Bm + (n * K + kk)):load() end
        -- the fragments through tl.mma_fragment (its layouts are checked against
        -- the PTX ISA's in warp_spec.lua; here the GPU agrees with them)
        local fr = tl.mma_fragment(lane, c.type)
        local av, bv = {}, {}
        for i = 0, (c.type == "tf32" and 3 or K == 16 and 7 or 15) do av[#av + 1] = a(fr.a(i)) end
        for i = 0, (c.type == "tf32" and 1 or K == 16 and 3 or 7) do bv[#bv + 1] = b(fr.b(i)) end
        local C = p.c + w * 128
        local cv = tl.vector_of(tl.f32, { (C + (g * 8 + q * 2)):load(), (C + (g * 8 + q * 2 + 1)):load(),
                                          (C + ((g + 8) * 8 + q * 2)):load(), (C + ((g + 8) * 8 + q * 2 + 1)):load() })
        local d = tl.mma_sync(tl.vector_of(c.elem, av), tl.vector_of(c.elem, bv), cv, { type_a = c.type, type_b = tb })
        local Dp = p.d + w * 128
        for i, off in ipairs { g * 8 + q * 2, g * 8 + q * 2 + 1, (g + 8) * 8 + q * 2, (g + 8) * 8 + q * 2 + 1 } do
          (Dp + off):store(tl.extract(d, i - 1))
        end
      end)
      local na, nb = warps * 16 * K, warps * 8 * K
      local A, Bb, hA, hB
      if c.elem == tl.i8 then
        A, Bb = D.random(tl.i8, na, seed, c.type), D.random(tl.i8, nb, seed + 1, tb)
      elseif c.type == "tf32" then -- values with few mantissa bits: exact in tf32
        hA, hB = {}, {}
        for i = 1, na do hA[i] = (rnd(129) - 64) / 32 end
        for i = 1, nb do hB[i] = (rnd(129) - 64) / 32 end
        A, Bb = D.from(tl.f32, hA), D.from(tl.f32, hB)
      else
        A, Bb = D.random(c.elem, na, seed), D.random(c.elem, nb, seed + 1)
      end
      local C <close> = D.random(tl.f32, warps * 128, seed + 2)
      local Dd <close> = D.alloc(tl.f32, warps * 128)
      k:launch { grid = 1, args = { A, Bb, C, Dd } }
      D.synchronize()
      hA, hB = A:to_table(), Bb:to_table()
      if c.elem == tl.i8 then
        for i = 1, na do hA[i] = fp8_value(hA[i] & 0xff, c.type == "e5m2") end
        for i = 1, nb do hB[i] = fp8_value(hB[i] & 0xff, tb == "e5m2") end
      end
      local hC, hD = C:to_table(), Dd:to_table()
      A:free(); Bb:free()
      for w = 0, warps - 1 do
        for r = 0, 15 do
          for col = 0, 7 do
            local s = hC[w * 128 + r * 8 + col + 1]
            local mag = math.abs(s)
            for kk = 0, K - 1 do
              local x = hA[w * 16 * K + r * K + kk + 1] * hB[w * 8 * K + col * K + kk + 1]
              s, mag = s + x, mag + math.abs(x)
            end
            local got = hD[w * 128 + r * 8 + col + 1]
            local tol = c.elem == tl.i8 and 1e-3 or 1e-5 -- fp8 products accumulate with fewer bits
            assert(math.abs(got - s) <= tol * mag + 1e-6,
                   ("%s: warp %d, D[%d][%d] = %.7g, expected %.7g"):format(c.type, w, r, col, got, s))
          end
        end
      end
    end)
  end
end)

describe("approximate math", function()
  -- { function, type, input range, relative tolerance, absolute tolerance, reference }
  local cases = {
    { "ex2", tl.f32, -20, 20, 2e-6, 0, function(x) return 2 ^ x end },
    { "lg2", tl.f32, 0.001, 1000, 1e-6, 2e-6, function(x) return math.log(x, 2) end },
    { "rsqrt", tl.f32, 0.001, 1000, 2e-6, 0, function(x) return 1 / math.sqrt(x) end },
    { "rcp_approx", tl.f32, 0.001, 1000, 2e-6, 0, function(x) return 1 / x end },
    { "sqrt_approx", tl.f32, 0.001, 1000, 2e-6, 0, function(x) return math.sqrt(x) end },
    { "sin", tl.f32, -math.pi, math.pi, 0, 2e-6, math.sin },
    { "cos", tl.f32, -math.pi, math.pi, 0, 2e-6, math.cos },
    { "tanh", tl.f32, -4, 4, 0, 1e-3, function(x) return (math.exp(2 * x) - 1) / (math.exp(2 * x) + 1) end },
    { "ex2", tl.f16, -8, 8, 2e-3, 0, function(x) return 2 ^ x end },
    { "tanh", tl.f16, -4, 4, 0, 3e-3, function(x) return (math.exp(2 * x) - 1) / (math.exp(2 * x) + 1) end },
    { "ex2", tl.bf16, -8, 8, 1.6e-2, 0, function(x) return 2 ^ x end },
    { "tanh", tl.bf16, -4, 4, 0, 1.6e-2, function(x) return (math.exp(2 * x) - 1) / (math.exp(2 * x) + 1) end },
  }
  for _, c in ipairs(cases) do
    local fn, T, lo, hi, rel, abs, ref = table.unpack(c)
    it(("%s on %s is within its error bound"):format(fn, tostring(T)), function()
      gpu()
      local n = 1024
      local k = kernel("m_" .. fn .. tostring(T), { { "x", tl.ptr(T) }, { "y", tl.ptr(tl.f32) } }, 128, function(k, p)
        local t = tl.block_id() * 128 + tl.thread_id()
        local y = tl.cast(tl[fn]((p.x + t):load()), tl.f32)
        tl.store(p.y + t, y)
      end)
      local xs = {}
      for i = 1, n do xs[i] = lo + (hi - lo) * rnd(1000001) / 1000000 end
      local x <close> = D.from(T, xs)
      local y <close> = D.alloc(tl.f32, n)
      k:launch { grid = n // 128, args = { x, y } }
      D.synchronize()
      local hx, hy = x:to_table(), y:to_table()
      for i = 1, n do
        local want = ref(hx[i])
        local bound = rel * math.abs(want) + abs + (T == tl.f32 and 0 or math.abs(want) * 2 ^ -8) -- + output rounding
        assert(math.abs(hy[i] - want) <= bound, ("%s(%.7g) on %s = %.7g, expected %.7g"):format(fn, hx[i], tostring(T), hy[i], want))
      end
    end)
  end
end)

-- Round to the nearest bf16 / f16 (ties to even), from a double, once.
local function round_to(v, mant, emin)
  if v == 0 or v ~= v or math.abs(v) == math.huge then return v end
  local _, e = math.frexp(math.abs(v))
  e = math.max(e - 1, emin)
  local ulp = 2 ^ (e - mant)
  local q = v / ulp
  local r = math.floor(q + 0.5)
  if q + 0.5 == r and r % 2 ~= 0 then r = r - 1 end
  return r * ulp
end

describe("packed pair arithmetic", function()
  for _, T in ipairs { tl.bf16, tl.f16 } do
    it(("rounds like the CPU on both halves (%s)"):format(tostring(T)), function()
      gpu()
      local mant, emin = T == tl.bf16 and 7 or 10, T == tl.bf16 and -126 or -14
      local ops = { "fma", "add", "sub", "mul", "min", "max", "neg" }
      local n = 2048
      local k = kernel("pairs_" .. tostring(T), { { "a", tl.ptr(T) }, { "b", tl.ptr(T) }, { "c", tl.ptr(T) }, { "o", tl.ptr(T) } }, 128, function(k, p)
        local t = tl.block_id() * 128 + tl.thread_id()
        local a, b, c = (p.a + 2 * t):load { vector = 2 }, (p.b + 2 * t):load { vector = 2 }, (p.c + 2 * t):load { vector = 2 }
        local r = { tl.fma(a, b, c), a + b, a - b, a * b, tl.min(a, b), tl.max(a, b), -a }
        for i, v in ipairs(r) do (p.o + (t * #ops + (i - 1)) * 2):store(v) end
      end)
      local A <close> = D.random(T, 2 * n, seed)
      local B <close> = D.random(T, 2 * n, seed + 1)
      local C <close> = D.random(T, 2 * n, seed + 2)
      local O <close> = D.alloc(T, 2 * n * #ops)
      k:launch { grid = n // 128, args = { A, B, C, O } }
      D.synchronize()
      local ha, hb, hc, ho = A:to_table(), B:to_table(), C:to_table(), O:to_table()
      local ulp = function(v) local _, e = math.frexp(math.abs(v)); return 2 ^ (math.max(e - 1, emin) - mant) end
      for i = 1, 2 * n do
        local a, b, c = ha[i], hb[i], hc[i]
        local want = { a * b + c, a + b, a - b, a * b, math.min(a, b), math.max(a, b), -a }
        local t, h = (i - 1) // 2, (i - 1) % 2
        for j, w in ipairs(want) do
          w = round_to(w, mant, emin)
          local got = ho[(t * #ops + (j - 1)) * 2 + h + 1]
          local tol = ops[j] == "fma" and ulp(w) or 0 -- fma: the double a*b+c may round once before ours
          assert(math.abs(got - w) <= tol, ("%s %s (%g, %g, %g): %.9g, expected %.9g"):format(tostring(T), ops[j], a, b, c, got, w))
        end
      end
    end)
  end
end)

describe("fp8 conversions", function()
  it("round f32 pairs to e4m3 / e5m2 (saturating) and widen them back exactly", function()
    gpu()
    local n = 4096
    local fmts = { { "e4m3", 3, -6, 448 }, { "e5m2", 2, -14, 57344 } }
    local k = kernel("fp8cvt", { { "x", tl.ptr(tl.f32) }, { "q", tl.ptr(tl.i16) }, { "h", tl.ptr(tl.f16) } }, 128, function(k, p)
      local t = tl.block_id() * 128 + tl.thread_id()
      local lo, hi = (p.x + 2 * t):load(), (p.x + 2 * t + 1):load()
      for i, f in ipairs(fmts) do
        local b = tl.pack(lo, hi, f[1])
        tl.store(p.q + (2 * t + (i - 1)), b)
        tl.store(p.h + (4 * t + 2 * (i - 1)), tl.unpack_fp8(b, f[1]))
      end
    end)
    local xs = {}
    for i = 1, 2 * n do -- magnitudes from subnormal to past the largest finite value
      xs[i] = (rnd(2) == 0 and -1 or 1) * 2 ^ (rnd(3600) / 100 - 20) * (1 + rnd(1000) / 1000)
    end
    local x <close> = D.from(tl.f32, xs)
    local q <close> = D.alloc(tl.i16, 2 * n)
    local h <close> = D.alloc(tl.f16, 4 * n)
    k:launch { grid = n // 128, args = { x, q, h } }
    D.synchronize()
    local hx, hq, hh = x:to_table(), q:to_table(), h:to_table()
    for t = 0, n - 1 do
      for i, f in ipairs(fmts) do
        local bits = hq[2 * t + i] & 0xffff
        for half = 0, 1 do
          local v = hx[2 * t + half + 1]
          local want = round_to(v, f[2], f[3])
          if math.abs(want) > f[4] then want = want < 0 and -f[4] or f[4] end
          local got = fp8_value((bits >> (8 * half)) & 0xff, f[1] == "e5m2")
          assert(got == want, ("%s: %.9g -> %.9g, expected %.9g"):format(f[1], v, got, want))
          assert(hh[4 * t + 2 * (i - 1) + half + 1] == got, ("%s widened: %.9g"):format(f[1], got))
        end
      end
    end
  end)
end)

describe("loads with cache hints and inline PTX", function()
  it("read the same data and compute what the text says", function()
    gpu()
    local hints = { { nc = true }, { cache = "cg" }, { cache = "cs", nc = true }, { evict = "evict_last", prefetch = 256 },
                    { evict = "no_allocate" }, { cache = "lu" }, { cache = "cv" }, { evict = "evict_first", nc = true, prefetch = 64 } }
    local H = #hints + 3
    local k = kernel("hints", { { "x", tl.ptr(tl.i32) }, { "o", tl.ptr(tl.i32) } }, 128, function(k, p)
      local t = tl.block_id() * 128 + tl.thread_id()
      local o = p.o + t * H
      for i, h in ipairs(hints) do (o + (i - 1)):store(tl.load(p.x + t, h)) end
      local v4 = tl.load(p.x + (t // 4) * 4, { vector = 4, nc = true, cache = "ca" })
      local x = tl.extract(v4, 0)
      local mad = tl.inline_ptx("mad.lo.s32 $r0, $0, $1, $2;", { x, t, 7 }, { tl.i32 }, { constraints = "r,r,r,n" })
      local lo, hi = tl.inline_ptx("mov.b64 {$r0, $r1}, $0;", { tl.cast(x, tl.i64) * 3 }, { tl.i32, tl.i32 })
      tl.store(o + #hints, mad)
      tl.store(o + #hints + 1, lo)
      tl.store(o + #hints + 2, hi)
    end)
    local n = 1024
    local x <close> = D.random(tl.i32, n, seed)
    local o <close> = D.alloc(tl.i32, n * H)
    k:launch { grid = n // 128, args = { x, o } }
    D.synchronize()
    local hx, ho = x:to_table(), o:to_table()
    for t = 0, n - 1 do
      for i = 1, #hints do assert.equal(hx[t + 1], ho[t * H + i]) end
      local x0 = hx[(t // 4) * 4 + 1]
      assert.equal(s32(x0 * t + 7), ho[t * H + #hints + 1])
      local w = x0 * 3
      assert.equal(s32(w), ho[t * H + #hints + 2])
      assert.equal(s32(w >> 32), ho[t * H + #hints + 3])
    end
  end)
end)
