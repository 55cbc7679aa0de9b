-- tl.device and launching (src/lua/l_device.c, lua/tilua/gpu/device.lua, k:launch).
-- Without a GPU: clear "no GPU" errors at the caller's line while compiling
-- still works; every GPU test reports pending("no GPU"), never passed. With a
-- GPU (tools/gpu test): buffers, events, launches and the semantics of the
-- emitted arithmetic against a CPU reference on fresh random data.
local H = dofile "spec/helper.lua"
local tl = require "tilua"

local GPU = tl.device.available()
local seed, gpu = H.seed(), H.gpu

local function here() return debug.getinfo(2, "l").currentline end

local function vadd()
  tl.new_module()
  local k = tl.kernel("vadd_i32", { params = { { "a", tl.ptr(tl.i32) }, { "b", tl.ptr(tl.i32) }, { "c", tl.ptr(tl.i32) }, { "n", tl.i32 } }, block = 128 })
  k:define(function(k, p)
    local i = tl.global_id "x"
    tl.if_(i:lt(p.n), function() (p.c + i):store((p.a + i):load() + (p.b + i):load()) end)
  end)
  return k
end

describe("without a GPU", function()
  it("says so clearly, at the caller's line, and compiling still works", function()
    if GPU then pending("a GPU is present") end
    assert.is_false(tl.device.available())
    assert.truthy(#tl.device.error() > 0)
    local line = here() + 1
    local ok, err = pcall(tl.device.alloc, tl.f32, 16)
    assert.is_false(ok)
    assert.matches("device_gpu_spec.lua:" .. line .. ": no GPU: ", err)
    for _, f in ipairs { function() return tl.device.info() end, function() return tl.device.sm_count() end,
                         function() tl.device.synchronize() end, function() return tl.device.time(function() end) end,
                         function() return tl.device.random(tl.i32, 4) end, function() return tl.device.from(tl.i32, { 1 }) end } do
      ok, err = pcall(f)
      assert.is_false(ok)
      assert.matches("no GPU: ", err)
    end
    local k = vadd()
    assert.truthy(k:compile():find(".entry vadd_i32", 1, true))
    ok, err = pcall(k.launch, k, { grid = 1, args = { 0, 0, 0, 0 } })
    assert.is_false(ok)
    assert.matches("no GPU: ", err)
  end)
end)

describe("device buffers", function()
  it("round-trip every element type through tables and strings", function()
    gpu()
    local cases = {
      { tl.i8, { -128, -1, 0, 1, 127 } }, { tl.i16, { -32768, -2, 0, 3, 32767 } },
      { tl.i32, { -2147483648, -7, 0, 9, 2147483647 } }, { tl.i64, { math.mininteger, -1, 0, 5, math.maxinteger } },
      { tl.f16, { -2.5, -0.0, 0.0, 1.0, 65504.0 } }, { tl.bf16, { -3.0, 0.5, 1.0, 256.0, -0.0078125 } },
      { tl.f32, { -1.5, 0.0, 3.25, 1e30, -1e-30 } }, { tl.f64, { -1.5e300, 0.0, math.pi, 2.0 ^ -1000, 7.0 } },
    }
    for _, c in ipairs(cases) do
      local b = tl.device.from(c[1], c[2])
      assert.equal(#c[2], #b)
      local back = b:to_table()
      for i, v in ipairs(c[2]) do
        if c[1] == tl.f32 then v = string.unpack("<f", string.pack("<f", v)) end
        assert.equal(v, back[i], tostring(c[1]) .. " #" .. i)
      end
      assert.equal(b.bytes, #b:to_string())
      b:free()
    end
  end)

  it("fill, copy, compare, make fresh random data and free themselves", function()
    gpu()
    local a = tl.device.random(tl.i32, 4096, seed)
    local t = a:to_table()
    local zeros = 0
    for _, v in ipairs(t) do
      if v == 0 then zeros = zeros + 1 end
    end
    assert.is_true(zeros < 8)
    local b = tl.device.alloc(tl.i32, 4096)
    b:copy_from(a)
    assert.is_true(b:equals(a))
    b:copy_from { 1, 2, 3 }
    local same, at = b:equals(a)
    assert.is_false(same)
    assert.equal(1, at)
    b:fill(7)
    assert.same({ 7, 7, 7 }, b:to_table(1, 3))
    b:fill(0x01020304)
    assert.equal(0x01020304, b:to_table(4096, 4096)[1])
    local f = tl.device.random(tl.f32, 1000, seed)
    for _, v in ipairs(f:to_table()) do assert.is_true(v >= -1 and v < 1) end
    do
      local c <close> = tl.device.alloc(tl.f64, 8)
      c:fill(1.5)
      assert.equal(1.5, c:to_table()[8])
    end
    b:free()
    local ok, err = pcall(b.to_table, b)
    assert.is_false(ok)
    assert.matches("freed device buffer", err)
    assert.is_true(tl.device.time(function() tl.device.random(tl.i8, 1 << 20, seed) end) >= 0)
  end)
end)

describe("launching", function()
  it("runs a kernel with defaults from its kernel_spec and checks its arguments", function()
    gpu()
    local k = vadd()
    local n = 100003
    local a, b = tl.device.random(tl.i32, n, seed), tl.device.random(tl.i32, n, seed + 1)
    local c = tl.device.alloc(tl.i32, n)
    k:launch { grid = (n + 127) // 128, args = { a = a, b = b, c = c, n = n } }
    tl.device.synchronize()
    local ha, hb, hc = a:to_table(), b:to_table(), c:to_table()
    for i = 1, n do
      local want = ((ha[i] + hb[i] + 0x80000000) & 0xFFFFFFFF) - 0x80000000
      if hc[i] ~= want then error(("c[%d] = %d, expected %d"):format(i - 1, hc[i], want)) end
    end
    local ok, err = pcall(k.launch, k, { grid = 1, block = 64, args = { a, b, c, n } })
    assert.is_false(ok)
    assert.matches("block {64,1,1} differs from the kernel's {128,1,1}", err)
    ok, err = pcall(k.launch, k, { grid = 1, args = { a, b, c } })
    assert.is_false(ok)
    assert.matches("missing argument 'n'", err)
    ok, err = pcall(k.launch, k, { grid = 1, args = { a, "b", c, n } })
    assert.is_false(ok)
    assert.matches("argument 'b' must be a device buffer", err)
  end)

  it("counts agents, elected lanes and atomics exactly", function()
    gpu()
    tl.new_module()
    local k = tl.kernel("roles", { params = { { "cnt", tl.ptr(tl.i32) } }, block = 256 })
    k:define(function(k, p)
      k:agent("one", { warps = 1 }, function(a) tl.atomic_add(p.cnt, 1) end)
      k:agent("three", { warps = 3 }, function(a)
        tl.atomic_add(p.cnt + 1, 1)
        tl.atomic_max(p.cnt + 2, a:thread_id())
        tl.elect_one(function() tl.atomic_add(p.cnt + 3, 1) end)
      end)
      k:agent("last", { warps = 2, warp_id = 6 }, function(a) tl.atomic_add(p.cnt + 4, a:warp_id() + 1) end)
    end)
    local cnt = tl.device.from(tl.i32, { 0, 0, 0, 0, 0 })
    k:launch { grid = 10, args = { cnt } }
    tl.device.synchronize()
    -- 10 blocks: 32 + 96 threads, max thread 95, 3 elected lanes, warps 1 and 2 of 32 lanes each
    assert.same({ 320, 960, 95, 30, 10 * 32 * (1 + 2) }, cnt:to_table())
  end)

  it("computes integer arithmetic exactly as arith specifies it", function()
    gpu()
    -- i32 and i8 division, remainder, shifts (amounts >= the width), min/max
    local ops = {
      { "divsi", function(a, b) return a // b end }, { "divui", tl.divu }, { "remsi", function(a, b) return a % b end },
      { "remui", tl.remu }, { "shli", function(a, b) return a << b end }, { "shrsi", tl.shrs },
      { "shrui", function(a, b) return a >> b end }, { "minsi", tl.min }, { "maxui", tl.maxu }, { "minui", tl.minu },
    }
    local N = 4096
    tl.new_module()
    local k = tl.kernel("arith", { params = { { "a", tl.ptr(tl.i32) }, { "b", tl.ptr(tl.i32) }, { "s", tl.ptr(tl.i32) }, { "o", tl.ptr(tl.i32) } }, block = 128 })
    k:define(function(k, p)
      local i = tl.global_id "x"
      local a, b, s = (p.a + i):load(), (p.b + i):load(), (p.s + i):load()
      local a8, b8 = a:cast(tl.i8), b:cast(tl.i8)
      local s8 = s:cast(tl.i8)
      for j, op in ipairs(ops) do
        local shift = op[1]:match "^sh"
        local r32 = op[2](a, shift and s or b)
        local r8 = op[2](a8, shift and s8 or b8):cast(tl.i32)
        local o1, o2 = p.o + ((2 * j - 2) * N + i), p.o + ((2 * j - 1) * N + i)
        o1:store(r32)
        o2:store(r8)
      end
    end)
    -- inputs: random, never a zero divisor, never INT_MIN / -1; shift amounts 0..40 and negative
    local rs = seed
    local function rnd()
      rs = (rs * 6364136223846793005 + 1442695040888963407)
      local x = (rs >> 32) & 0xFFFFFFFF
      return x >= 0x80000000 and x - 0x100000000 or x
    end
    local A, B, S = {}, {}, {}
    for i = 1, N do
      A[i], B[i], S[i] = rnd(), rnd(), (rnd() % 41) - (i % 7 == 0 and 50 or 0)
      if B[i] == 0 or B[i] & 0xFF == 0 then B[i] = 3 end
      if (B[i] == -1 and A[i] == -2147483648) or (B[i] & 0xFF == 0xFF and A[i] & 0xFF == 0x80) then A[i] = 5 end
    end
    local out = tl.device.alloc(tl.i32, 2 * #ops * N)
    k:launch { grid = N // 128, args = { tl.device.from(tl.i32, A), tl.device.from(tl.i32, B), tl.device.from(tl.i32, S), out } }
    tl.device.synchronize()
    local got = out:to_table()
    local function sx(x, w) x = x & ((1 << w) - 1); return x >= 1 << (w - 1) and x - (1 << w) or x end
    local function zx(x, w) return x & ((1 << w) - 1) end
    local function tdiv(a, b) local q = a // b; if a % b ~= 0 and (a < 0) ~= (b < 0) then q = q + 1 end; return q end
    local ref = {
      divsi = function(a, b, w) return sx(tdiv(sx(a, w), sx(b, w)), w) end,
      divui = function(a, b, w) return sx(zx(a, w) // zx(b, w), w) end,
      remsi = function(a, b, w) local x, y = sx(a, w), sx(b, w); return sx(x - tdiv(x, y) * y, w) end,
      remui = function(a, b, w) return sx(zx(a, w) % zx(b, w), w) end,
      shli = function(a, b, w) b = zx(b, w); return b >= w and 0 or sx(a << b, w) end,
      shrsi = function(a, b, w) b = zx(b, w); local x = sx(a, w); if b >= w then return x < 0 and -1 or 0 end; return x >> b | (x < 0 and ~(-1 >> b) or 0) end,
      shrui = function(a, b, w) b = zx(b, w); return b >= w and 0 or sx(zx(a, w) >> b, w) end,
      minsi = function(a, b, w) return math.min(sx(a, w), sx(b, w)) end,
      maxui = function(a, b, w) return sx(math.max(zx(a, w), zx(b, w)), w) end,
      minui = function(a, b, w) return sx(math.min(zx(a, w), zx(b, w)), w) end,
    }
    local bad = {}
    for j, op in ipairs(ops) do
      local f = ref[op[1]]
      for i = 1, N do
        local b = op[1]:match "^sh" and S[i] or B[i]
        local w32, w8 = f(A[i], b, 32), f(A[i], b, 8)
        local g32, g8 = got[(2 * j - 2) * N + i], got[(2 * j - 1) * N + i]
        if g32 ~= w32 and #bad < 10 then bad[#bad + 1] = ("%s i32 (%d, %d) = %d, expected %d"):format(op[1], A[i], b, g32, w32) end
        if g8 ~= w8 and #bad < 10 then bad[#bad + 1] = ("%s i8 (%d, %d) = %d, expected %d"):format(op[1], sx(A[i], 8), sx(b, 8), g8, w8) end
      end
    end
    assert(#bad == 0, "seed " .. seed .. ":\n" .. table.concat(bad, "\n"))
  end)

  it("computes minimumf / maximumf with NaNs and float casts as arith does", function()
    gpu()
    tl.new_module()
    local k = tl.kernel("fl", { params = { { "x", tl.ptr(tl.f32) }, { "y", tl.ptr(tl.f32) }, { "o", tl.ptr(tl.f32) }, { "d", tl.ptr(tl.f64) } }, block = 32 })
    k:define(function(k, p)
      local i = tl.thread_id "x"
      local x, y = (p.x + i):load(), (p.y + i):load()
      local o = p.o + i * 3
      o:store(tl.min(x, y))
      local o1 = o + 1
      o1:store(tl.max(x, y))
      local o2 = o + 2
      o2:store(x:cast(tl.bf16):cast(tl.f32))
      local dx, dy = x:cast(tl.f64), y:cast(tl.f64)
      local d = p.d + i
      d:store(tl.min(dx, dy))
    end)
    local nan = 0 / 0
    local X = { 1, nan, -0.0, 2, nan, 1.5, -3, 1e30 }
    local Y = { nan, 1, 0.0, -2, nan, 1.5, 7, -1e30 }
    for i = #X + 1, 32 do X[i], Y[i] = i, -i end
    local o, d = tl.device.alloc(tl.f32, 96), tl.device.alloc(tl.f64, 32)
    k:launch { args = { tl.device.from(tl.f32, X), tl.device.from(tl.f32, Y), o, d } }
    tl.device.synchronize()
    local g, gd = o:to_table(), d:to_table()
    local function isnan(v) return v ~= v end
    assert.is_true(isnan(g[1]) and isnan(g[2]) and isnan(g[4]) and isnan(g[5]) and isnan(g[13]) and isnan(g[14]))
    assert.is_true(isnan(gd[1]) and isnan(gd[2]) and isnan(gd[5]))
    assert.equal(-2, g[10]); assert.equal(2, g[11])
    assert.equal(-3, gd[7])
    assert.equal(1.5, g[18]) -- bf16(1.5) is exact
    assert.equal(1 / g[7], -math.huge) -- minimum(-0, +0) = -0
  end)
end)
