-- Warp-level instructions (lua/tilua/dsl/warp.lua, src/dialects/tile_warp.c,
-- src/ptx/emit_warp.c): shuffles, votes, redux, mma.sync, approximate math,
-- packed bf16x2 / f16x2 arithmetic, load cache hints and inline PTX with
-- results: the Lua surface and its errors, what convert-tile-to-nvvm makes of
-- each op, the PTX the emitter writes, and every PTX this spec emitted
-- through ptxas. The verifier's rules have their invalid fixtures in
-- spec/fixtures/invalid/tile_warp.tir; the GPU checks are warp_gpu_spec.lua.
local H = dofile "spec/helper.lua"
local tl = require "tilua"
tl.options.keep_stages = true -- the checks read the stages' IR

local lacks = H.lacks
-- has(text, template): a plain substring in which # stands for a register number
local function has(text, t)
  local pat = t:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0"):gsub("#", "%%d+")
  assert(text:find(pat), ("expected %q in:\n%s"):format(t, text))
end
local E = H.emitter { block = 64 }
local build, compile = E.build, E.compile

local I, F = { "o", tl.ptr(tl.i32) }, { "f", tl.ptr(tl.f32) }

describe("shuffles, votes and reductions", function()
  it("lower one to one and pack shfl's segment width and clamp into its c operand", function()
    local k = build("xchg", { I, F, { "x", tl.f32 } }, function(k, p)
      local t = tl.thread_id()
      local a = tl.shfl_xor(t, 1) + tl.shfl_idx(t, 3, { width = 8 }) + tl.shfl_down(t, 2, { width = 16 })
      local f = tl.shfl_up(p.x, 1, { width = 4 })
      local b = tl.ballot(t:lt(5)) + tl.redux("add", t) + tl.redux("umin", t, { mask = 0xffff })
      local v = tl.select(tl.vote_all(t:lt(40)), tl.const(1), tl.const(2)) +
                tl.select(tl.vote_uni(t:lt(40)), tl.const(4), tl.const(8))
      tl.store(p.o + t, a + b + v)
      tl.store(p.f + t, f)
    end)
    local ptx, lowered = compile(k)
    has(lowered, "nvvm.shfl.sync")
    has(lowered, "nvvm.vote.ballot.sync")
    has(lowered, "nvvm.redux.sync")
    lacks(lowered, "tile.shfl")
    has(ptx, "shfl.sync.bfly.b32 %r#, %r#, %r#, 31, 0xffffffff;")
    has(ptx, "shfl.sync.idx.b32 %r#, %r#, %r#, 6175, 0xffffffff;") -- (32-8)<<8 | 31
    has(ptx, "shfl.sync.down.b32 %r#, %r#, %r#, 4127, 0xffffffff;")
    has(ptx, "shfl.sync.up.b32 %f#, %f#, %r#, 7168, 0xffffffff;") -- up: clamp 0
    has(ptx, "vote.sync.ballot.b32 %r#, %p#, 0xffffffff;")
    has(ptx, "vote.sync.all.pred %p#, %p#, 0xffffffff;")
    has(ptx, "vote.sync.uni.pred")
    has(ptx, "redux.sync.add.s32 %r#, %r#, 0xffffffff;")
    has(ptx, "redux.sync.min.u32 %r#, %r#, 0xffff;")
  end)

  it("refuse what the instructions cannot do, at the script's line", function()
    local function fails(pattern, body)
      local ok, err = pcall(build, "bad", { I }, body)
      assert.is_false(ok)
      assert.matches(pattern, err)
      assert.matches("warp_spec.lua:%d+:", err)
    end
    fails("shfl: moves i32 or f32 values, got i64", function() tl.shfl(tl.cast(tl.thread_id(), tl.i64), 0) end)
    fails("'tile.shfl' op width 3 is not a power of two", function() tl.shfl_xor(tl.thread_id(), 1, { width = 3 }) end)
    fails("ballot: the predicate must be an i1 value", function() tl.ballot(tl.thread_id()) end)
    fails("'tile.redux' op unknown kind 'mul'", function() tl.redux("mul", tl.thread_id()) end)
    fails("'tile.shfl' op is executed by whole warps and cannot be inside 'tile.elect_one'", function()
      tl.elect_one(function() tl.shfl_xor(tl.thread_id(), 1) end)
    end)
  end)
end)

describe("mma.sync", function()
  it("takes A in four and B in two 32-bit registers per lane for every type", function()
    local k = build("mma", { F }, function(k, p)
      local t = tl.thread_id()
      local c = tl.zeros(tl.f32, 4)
      local d = tl.mma_sync(tl.splat(t, 4), tl.splat(t, 2), c)
      d = tl.mma_sync(tl.splat(tl.cast(t, tl.f16), 8), tl.splat(tl.cast(t, tl.f16), 4), d, { type_a = "f16" })
      d = tl.mma_sync(tl.splat(tl.cast(t, tl.f32), 4), tl.splat(tl.cast(t, tl.f32), 2), d, { type_a = "tf32" })
      d = tl.mma_sync(tl.splat(t, 4), tl.splat(t, 2), d, { type_a = "e4m3", type_b = "e5m2" })
      tl.store(p.f + t, tl.extract(d, 0) + tl.extract(d, 3))
    end)
    local ptx, lowered = compile(k)
    has(lowered, "nvvm.mma.sync")
    has(ptx, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f#, %f#, %f#, %f#}, {%r#, %r#, %r#, %r#}, {%r#, %r#}, {%f#")
    has(ptx, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
    has(ptx, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32")
    has(ptx, "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32")
    has(ptx, ".version 8.4") -- fp8 mma.sync needs PTX 8.4
  end)

  it("keeps .version 8.0 when no instruction needs more", function()
    local ptx = compile(build("plain", { F }, function(k, p)
      local d = tl.mma_sync(tl.splat(tl.thread_id(), 4), tl.splat(tl.thread_id(), 2), tl.zeros(tl.f32, 4))
      tl.store(p.f, tl.extract(d, 1))
    end))
    has(ptx, ".version 8.0")
  end)
end)

describe("mma.sync fragments", function()
  it("place every element of A, B and C exactly once, as the PTX ISA lays them out", function()
    for _, c in ipairs { { "bf16", 16, 8, 4 }, { "tf32", 8, 4, 2 }, { "e4m3", 32, 16, 8 } } do
      local ty, K, na, nb = table.unpack(c)
      local seen_a, seen_b, seen_c = {}, {}, {}
      for lane = 0, 31 do
        local f = tl.mma_fragment(lane, ty)
        for i = 0, na - 1 do local r, k = f.a(i); seen_a[r * K + k] = (seen_a[r * K + k] or 0) + 1 end
        for i = 0, nb - 1 do local k, n = f.b(i); seen_b[k * 8 + n] = (seen_b[k * 8 + n] or 0) + 1 end
        for i = 0, 3 do local r, n = f.c(i); seen_c[r * 8 + n] = (seen_c[r * 8 + n] or 0) + 1 end
      end
      for x = 0, 16 * K - 1 do assert.equal(1, seen_a[x], ty .. " A") end
      for x = 0, K * 8 - 1 do assert.equal(1, seen_b[x], ty .. " B") end
      for x = 0, 16 * 8 - 1 do assert.equal(1, seen_c[x], ty .. " C") end
    end
    -- spot checks against the PTX ISA's figures (m16n8k16, lane 5: group 1, thread 1)
    local f = tl.mma_fragment(5, "bf16")
    assert.same({ 1, 2 }, { f.a(0) })
    assert.same({ 9, 11 }, { f.a(7) })
    assert.same({ 11, 1 }, { f.b(3) })
    assert.same({ 9, 3 }, { f.c(3) })
  end)
end)

describe("approximate math", function()
  it("writes the MUFU instruction of each function and type", function()
    local k = build("math", { F, { "x", tl.f32 } }, function(k, p)
      local x = p.x
      local s = tl.ex2(x) + tl.lg2(x) + tl.rsqrt(x) + tl.rcp_approx(x) + tl.sqrt_approx(x) + tl.sin(x) + tl.cos(x) + tl.tanh(x)
      local h = tl.tanh(tl.cast(x, tl.f16)) + tl.ex2(tl.cast(x, tl.f16))
      local b = tl.tanh(tl.cast(x, tl.bf16)) + tl.ex2(tl.cast(x, tl.bf16))
      tl.store(p.f, s + tl.cast(h, tl.f32) + tl.cast(b, tl.f32))
    end)
    local ptx = compile(k)
    for _, ins in ipairs { "ex2.approx.ftz.f32", "lg2.approx.ftz.f32", "rsqrt.approx.ftz.f32", "rcp.approx.ftz.f32",
                           "sqrt.approx.ftz.f32", "sin.approx.ftz.f32", "cos.approx.ftz.f32", "tanh.approx.f32",
                           "tanh.approx.f16", "ex2.approx.f16", "tanh.approx.bf16", "ex2.approx.ftz.bf16" } do
      has(ptx, ins .. " %")
    end
  end)

  it("refuses a function the type has no approximation of", function()
    local ok, err = pcall(build, "bad", { F }, function() tl.lg2(tl.const(1.0, tl.f16)) end)
    assert.is_false(ok)
    assert.matches("lg2 has no approximation on f16", err)
  end)
end)

describe("packed bf16x2 and f16x2 arithmetic", function()
  it("works on both halves of a pair at once", function()
    local k = build("pairs", { F, { "x", tl.f32 } }, function(k, p)
      local a = tl.pack(p.x, p.x * 2.0)
      local h = tl.pack(p.x, p.x, tl.f16)
      local r = tl.fma(a, a, -a) + a * 0.5 - tl.max(a, a)
      local q = tl.min(h * h, h + 1.0)
      tl.store(p.f, tl.cast(tl.extract(r, 0), tl.f32) + tl.cast(tl.extract(q, 1), tl.f32))
    end)
    local ptx = compile(k)
    has(ptx, "fma.rn.bf16x2 %r")
    has(ptx, "neg.bf16x2 %r")
    has(ptx, "mul.rn.bf16x2 %r")
    has(ptx, "add.rn.bf16x2 %r")
    has(ptx, "sub.rn.bf16x2 %r")
    has(ptx, "max.NaN.bf16x2 %r")
    has(ptx, "mul.rn.f16x2 %r")
    has(ptx, "min.NaN.f16x2 %r")
  end)

  it("has no division", function()
    local ok, err = pcall(build, "bad", { F, { "x", tl.f32 } }, function(k, p)
      local a = tl.pack(p.x, p.x)
      local _ = a / a
    end)
    assert.is_false(ok)
    assert.matches("'/' is not defined on vector<2xbf16>", err)
  end)
end)

describe("fp8 conversions", function()
  it("pack two f32 into an i16 of fp8 bytes and widen them to f16 pairs", function()
    local k = build("fp8", { { "o", tl.ptr(tl.f16) }, { "x", tl.f32 } }, function(k, p)
      local b = tl.pack(p.x, -p.x, "e4m3")
      local c = tl.pack(p.x, p.x, "e5m2")
      tl.store(p.o, tl.unpack_fp8(b, "e4m3") + tl.unpack_fp8(c, "e5m2"))
    end)
    local ptx = compile(k)
    has(ptx, "cvt.rn.satfinite.e4m3x2.f32 %rs#, %f#, %f#;")
    has(ptx, "cvt.rn.satfinite.e5m2x2.f32 %rs#")
    has(ptx, "cvt.rn.f16x2.e4m3x2 %r#, %rs#;")
    has(ptx, "cvt.rn.f16x2.e5m2x2 %r#, %rs#;")
    local ok, err = pcall(build, "bad", { { "o", tl.ptr(tl.f16) } }, function() tl.unpack_fp8(tl.const(1, tl.i32), "e4m3") end)
    assert.is_false(ok)
    assert.matches("unpack_fp8: expected an i16 value", err)
  end)
end)

describe("load cache hints", function()
  it("reach ld.global in PTX's order", function()
    local k = build("hints", { I }, function(k, p)
      local t = tl.thread_id()
      local a = tl.load(p.o + t, { nc = true, evict = "evict_last", prefetch = 128 })
      local b = tl.load(p.o + t, { cache = "cs" })
      local c = tl.load(p.o + t, { cache = "cg", nc = true, vector = 4 })
      local d = tl.load(p.o + t, { evict = "no_allocate" })
      tl.store(p.o + t, a + b + tl.extract(c, 2) + d)
    end)
    local ptx, lowered = compile(k)
    has(lowered, 'evict = "evict_last"')
    has(ptx, "ld.global.nc.L1::evict_last.L2::128B.b32")
    has(ptx, "ld.global.cs.b32")
    has(ptx, "ld.global.cg.nc.v4.b32")
    has(ptx, "ld.global.L1::no_allocate.b32")
  end)

  it("of stores reach st.global in PTX's order (cache cs or cg, or an L1 eviction priority)", function()
    local k = build("store_hints", { I }, function(k, p)
      local t = tl.thread_id()
      local a = tl.load(p.o + t)
      tl.store(p.o + t, a, { cache = "cs" })
      tl.store(p.o + t + 64, a, { cache = "cg" })
      tl.store(p.o + t + 128, a, { evict = "evict_first" })
    end)
    local ptx, lowered = compile(k)
    has(lowered, 'cache = "cs"')
    has(ptx, "st.global.cs.b32")
    has(ptx, "st.global.cg.b32")
    has(ptx, "st.global.L1::evict_first.b32")
  end)

  it("are refused where the instruction has none", function()
    local ok, err = pcall(build, "bad", { I }, function(k, p)
      local s = k:shared(tl.i32, 4)
      tl.load(s, { evict = "evict_first" })
    end)
    assert.is_false(ok)
    assert.matches("cache hints %(cache, evict, nc, prefetch%) apply to global loads only", err)
  end)
end)

describe("prefetches", function()
  it("reach prefetch.global.L1 / .L2 (tl.prefetch, p:prefetch) and write no register", function()
    local k = build("pf", { I }, function(k, p)
      local t = tl.thread_id()
      tl.prefetch(p.o + t + 4096)
      local q = p.o + t
      q:prefetch { level = 2 }
      tl.store(p.o + t, tl.load(p.o + t + 4096))
    end)
    local ptx, lowered = compile(k)
    has(lowered, "nvvm.prefetch.global")
    has(ptx, "prefetch.global.L1 [%rd#];")
    has(ptx, "prefetch.global.L2 [%rd#];")
  end)

  it("are refused on other spaces and levels", function()
    local ok, err = pcall(build, "bad", { I }, function(k, p) tl.prefetch(k:shared(tl.i32, 4)) end)
    assert.is_false(ok)
    assert.matches("prefetch: expected a global pointer, got one to shared memory", err)
    ok, err = pcall(build, "bad", { I }, function(k, p) tl.prefetch(p.o, { level = 3 }) end)
    assert.is_false(ok)
    assert.matches("prefetch: level must be 1 %(L1%) or 2 %(L2%)", err)
  end)
end)

describe("inline PTX", function()
  it("has results, constraints and immediates", function()
    local k = build("asm", { I, F }, function(k, p)
      local t = tl.thread_id()
      local r = tl.inline_ptx("mad.lo.s32 $r0, $0, $1, $2;", { t, t, 7 }, { tl.i32 }, { constraints = "r,r,r,n" })
      local lo, hi = tl.inline_ptx("mov.b64 {$r0, $r1}, $0; // $$", { tl.cast(t, tl.i64) }, { tl.i32, tl.i32 })
      local f = tl.inline_ptx("cvt.rn.f32.s32 $r0, $0;", { t }, { tl.f32 }, { constraints = "f,r" })
      tl.store(p.o + t, r + lo + hi)
      tl.store(p.f + t, f)
    end)
    local ptx = compile(k)
    has(ptx, "mad.lo.s32 %r#, %r#, %r#, 7;")
    has(ptx, "mov.b64 {%r#, %r#}, %rd#; // $")
    has(ptx, "cvt.rn.f32.s32 %f#, %r#;")
  end)

  it("names a wrong constraint at the script's line", function()
    local ok, err = pcall(build, "bad", { I }, function()
      tl.inline_ptx("mov.b32 $r0, $0;", { tl.thread_id() }, { tl.i32 }, { constraints = "f,r" })
    end)
    assert.is_false(ok)
    assert.matches("warp_spec.lua:%d+: .*constraints: result 0 is i32, whose registers take 'r', not 'f'", err)
  end)
end)

E.assemble_all(7)
