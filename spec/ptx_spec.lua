-- The road to PTX: the tile authoring ops and their verifiers, every pattern
-- of convert-tile-to-nvvm (structure of the lowered IR), the instruction
-- sequences the emitter writes for each op family, its diagnostics, and, last,
-- every PTX this spec emitted assembled by `ptxas -arch=sm_90a` (pending, never
-- passed, where ptxas is missing).
local H = dofile "spec/helper.lua"
local tl = require "tilua"
tl.options.keep_stages = true -- the checks read the stages' IR

local E = H.emitter { block = 128 } -- every PTX kept for the ptxas test at the end
local build, compile = E.build, E.compile -- compile(k): PTX, the IR after convert-tile-to-nvvm, the final IR

local has, lacks, seq, count = H.has, H.lacks, H.seq, H.count

local P = function(t, s) return tl.ptr(t, s) end

-- {===================================================================
describe("tile authoring ops", function()
  it("verify their operands and attributes with MLIR-style messages", function()
    local function fails(pattern, body, spec)
      local ok, err = pcall(build, "bad", { { "g", P(tl.f32) } }, body, spec)
      assert.is_false(ok)
      assert.matches(pattern, err)
    end
    fails("'tile.thread_id' op unknown dim 'w'", function() tl.op1("tile.thread_id", {}, tl.i32, { dim = "w" }) end)
    fails("'tile.ptr_cast' op cannot cast a pointer from the global to the shared space", function(k, p) p.g:as(nil, "shared") end)
    fails("'tile.load' op cannot move vector<3xf32> in one instruction", function(k, p) p.g:load { vector = 3 } end)
    fails("'tile.atomic' op atomic max does not take f32", function(k, p) tl.atomic_max(p.g, 1.0) end)
    fails("'tile.bulk_copy_g2s' op copies a positive multiple of 16 bytes, got 20", function(k, p)
      local s, bar = k:shared(tl.f32, 64), k:shared(tl.i64, 1)
      tl.bulk_copy(s, p.g, 20, bar)
    end)
    fails("'tile.agent' op warps %[4, 8%) do not fit in a block of 4 warps", function(k)
      k:agent("a", { warps = 4 }, function() end)
      k:agent("b", { warps = 4 }, function() end)
    end)
    fails("'tile.agent_thread_id' op must be inside a 'tile.agent'", function() tl.op1("tile.agent_thread_id", {}, tl.i32) end)
    fails("'tile.named_barrier_sync' op barrier id 16 is out of range", function() tl.named_barrier_sync(16, 64) end)
    fails("'tile.mbarrier_init' op the mbarrier must be an i64", function(k)
      tl.mbarrier_init(k:shared(tl.i32, 2), 1)
    end)
  end)

  it("fold ids that the kernel_spec fixes", function()
    local k = build("fold", { { "g", P(tl.i32) } }, function(k, p)
      p.g:store(tl.block_dim "x" + tl.thread_id "y" + tl.cluster_dim "x")
    end, { block = { 64, 1, 1 }, cluster = { 2, 1, 1 } })
    local _, _, final = compile(k)
    lacks(final, "ntid")
    lacks(final, "tid.y")
    has(final, "value = 66 : i32") -- 64 + 0 + 2
  end)
end)
-- }===================================================================

-- {===================================================================
describe("convert-tile-to-nvvm", function()
  it("reads ids from special registers, warp ids from the linear thread id", function()
    local k = build("ids", { { "g", P(tl.i32) } }, function(k, p)
      local v = tl.thread_id "x" + tl.block_id "y" + tl.grid_dim "z" + tl.cluster_id "x" + tl.cluster_grid_dim "y"
        + tl.cluster_block_id "z" + tl.cluster_rank() + tl.cluster_size() + tl.lane_id() + tl.warp_id()
      p.g:store(v)
    end, { block = { 32, 4, 2 } })
    local _, low = compile(k)
    for _, r in ipairs { "tid.x", "ctaid.y", "nctaid.z", "clusterid.x", "nclusterid.y", "cluster.ctaid.z",
                         "cluster.ctarank", "cluster.nctarank", "laneid", "tid.y", "tid.z" } do
      has(low, "nvvm.read.ptx.sreg." .. r .. " : i32")
    end
    has(low, "arith.shrui") -- (tid.x + 32 * (tid.y + 4 * tid.z)) >> 5
  end)

  it("turns pointers into integer addresses scaled by the pointee size", function()
    local k = build("ptrs", { { "g", P(tl.f64) }, { "i", tl.i32 } }, function(k, p)
      local s = k:shared(tl.f32, 16)
      local q = p.g + p.i
      q:store((s + p.i):load():cast(tl.f64))
    end)
    local _, low = compile(k)
    has(low, "builtin.unrealized_conversion_cast %0 : i64")
    seq(low, { "arith.extsi", "arith.constant {value = 8} : i64", "arith.muli", "arith.addi" })
    seq(low, { "arith.constant {value = 4 : i32} : i32", "arith.muli", "nvvm.ld.shared" })
    lacks(low, "= tile.")
    lacks(low, "tile.store")
  end)

  it("casts address spaces through cvta and keeps shared -> cluster as is", function()
    local k = build("casts", { { "g", P(tl.i32) } }, function(k, p)
      local s = k:shared(tl.i32, 4)
      local gen = p.g:as(nil, "generic")
      local back = gen:as(nil, "global")
      local sgen = s:as(nil, "generic")
      local s2 = sgen:as(nil, "shared")
      local c = s2:as(nil, "cluster")
      back:store(c:load() + tl.ptr_to_int(s):cast(tl.i32, true))
      local addr = tl.ptr_to_int(p.g)
      tl.int_to_ptr(addr, P(tl.i32)):store(1)
    end)
    local _, low = compile(k)
    seq(low, { "nvvm.cvta.global", "nvvm.cvta.to.global" })
    seq(low, { "arith.extui", "nvvm.cvta.shared", "nvvm.cvta.to.shared", "arith.trunci" })
    has(low, "nvvm.ld.shared.cluster")
  end)

  it("indexes memrefs row-major", function()
    local k = build("memref", { { "g", P(tl.f32) }, { "i", tl.i32 } }, function(k, p)
      local m = k:shared(tl.f32, { 4, 32 })
      p.g:store(m:ptr(p.i, 3):load())
    end)
    local _, low = compile(k)
    seq(low, { "arith.constant {value = 128 : i32}", "arith.muli", "arith.addi", "arith.constant {value = 12 : i32}", "arith.addi" })
  end)

  it("lowers loads and stores by address space, keeping vectors and volatile", function()
    local k = build("ldst", { { "g", P(tl.f32) } }, function(k, p)
      local s = k:shared(tl.f32, 64)
      local v = p.g:load { vector = 4 }
      s:store(v)
      local gen = p.g:as(nil, "generic")
      gen:store(gen:load { volatile = true })
      tl.mapa(s, 1):store(1.0)
    end)
    local _, low = compile(k)
    has(low, "nvvm.ld.global %")
    has(low, ": vector<4xf32>")
    has(low, "nvvm.st.shared %")
    has(low, "nvvm.ld %")
    has(low, "{volatile = true}")
    has(low, "nvvm.st %")
    has(low, "nvvm.mapa.shared.cluster")
    has(low, "nvvm.st.shared.cluster")
  end)

  it("lowers atomics to atom, or red when the old value is unused, and cas", function()
    local k = build("atomics", { { "g", P(tl.i32) } }, function(k, p)
      local s = k:shared(tl.i32, 4)
      local old = tl.atomic_add(p.g, 1, { scope = "cta" })
      tl.atomic_max(s, old)
      p.g:store(tl.atomic_cas(s, 0, 1))
    end)
    local _, low = compile(k)
    has(low, 'nvvm.atom.global %1, %3 {op = "add", scope = "cta"}')
    has(low, 'nvvm.red.shared')
    has(low, 'nvvm.atom.cas.shared')
  end)

  it("places shared allocations in one buffer, aligned, and records the sizes", function()
    local k = build("smem_layout", { { "g", P(tl.i64) } }, function(k, p)
      local a = k:shared(tl.i8, 3)
      local b = k:shared(tl.i64, { 2, 2 }, { align = 64 })
      local d = k:dynamic_shared(tl.i64, { align = 128 })
      p.g:store(b:ptr(1, 1):load() + d:load() + a:load():cast(tl.i64))
    end, { smem = 1000 })
    local _, low = compile(k)
    has(low, "nvvm.shared.base : i32")
    has(low, "arith.constant {value = 64 : i32}")  -- b after a, aligned to 64
    has(low, "arith.constant {value = 128 : i32}") -- the dynamic part after 64 + 32, aligned to 128
    has(low, "shared_bytes = 1128")
    has(low, "shared_static = 128")
    has(low, "shared_align = 128")
  end)

  it("refuses more shared memory than a block can have", function()
    local k = build("toomuch", {}, function(k) k:shared(tl.i8, { 200000 }):ptr(0):store(1) end, { smem = 100000 })
    local ok, err = pcall(compile, k)
    assert.is_false(ok)
    assert.matches("'tile.kernel' op needs 300000 bytes of shared memory", err)
  end)

  it("dispatches agents on the warp index, in order or at their warp_id", function()
    local k = build("agents", { { "g", P(tl.i32) } }, function(k, p)
      k:agent("producer", { warps = 1 }, function(a) (p.g + a:thread_id()):store(1) end)
      k:agent("consumer", { warps = 2 }, function(a) (p.g + a:warp_id()):store(2) end)
      k:agent("late", { warps = 1, warp_id = 3 }, function(a) p.g:store(3) end)
    end)
    local _, low = compile(k)
    assert.equal(3, count(low, 'arith.cmpi'))
    assert.equal(3, count(low, '{predicate = "ult"}'))
    has(low, "arith.constant {value = -1 : i32}")  -- consumer: warp - 1
    has(low, "arith.constant {value = -3 : i32}")  -- late: warp - 3
    has(low, "arith.constant {value = 2 : i32}")   -- consumer: < 2 warps
    assert.equal(3, count(low, "scf.if"))
    lacks(low, "tile.agent")
  end)

  it("runs elect_one regions under elect.sync", function()
    local k = build("elect", { { "g", P(tl.i32) } }, function(k, p)
      tl.elect_one(function() p.g:store(1) end)
      p.g:store(tl.select(tl.elect(), tl.const(2), tl.const(3)))
    end)
    local _, low = compile(k)
    seq(low, { "nvvm.elect.sync : i1", "scf.if", "nvvm.st.global", "nvvm.elect.sync : i1", "arith.select" })
  end)

  it("lowers mbarriers, with a try_wait loop for the blocking wait", function()
    local k = build("mbar", { { "g", P(tl.i32) } }, function(k, p)
      local bar = k:shared(tl.i64, 2, { align = 8 })
      tl.mbarrier_init(bar, 1)
      tl.fence_mbarrier_init()
      tl.mbarrier_arrive(bar)
      tl.mbarrier_arrive(bar + 1, 2, { scope = "cluster" })
      tl.mbarrier_arrive_expect_tx(bar, 64)
      tl.mbarrier_expect_tx(bar, 32)
      tl.mbarrier_arrive(tl.mapa(bar, 1))
      tl.mbarrier_arrive_expect_tx(tl.mapa(bar, 1), 16)
      local t = tl.mbarrier_try_wait(bar, 0)
      local u = tl.mbarrier_test_wait(bar, 1)
      tl.mbarrier_wait(bar, 0, { scope = "cluster" })
      tl.mbarrier_inval(bar)
      p.g:store(tl.select(t & u, tl.const(1), tl.const(0)))
    end)
    local _, low = compile(k)
    seq(low, { "nvvm.mbarrier.init.shared", "nvvm.fence.mbarrier_init", "nvvm.mbarrier.arrive.shared %",
               'nvvm.mbarrier.arrive.shared %', '{scope = "cluster"}', "nvvm.mbarrier.arrive.expect_tx.shared %",
               "nvvm.mbarrier.expect_tx.shared", "nvvm.mapa.shared.cluster", "nvvm.mbarrier.arrive.shared.cluster",
               "nvvm.mbarrier.arrive.expect_tx.shared.cluster", "nvvm.mbarrier.try_wait.parity.shared",
               "nvvm.mbarrier.test_wait.parity.shared", "scf.while", "nvvm.mbarrier.try_wait.parity.shared",
               "scf.condition", "nvvm.mbarrier.inval.shared" })
  end)

  it("lowers bulk copies, groups, fences and barriers one to one", function()
    local k = build("bulk", { { "g", P(tl.i8) } }, function(k, p)
      local s, bar = k:shared(tl.i8, 256), k:shared(tl.i64, 1, { align = 8 })
      tl.bulk_copy(s, p.g, 256, bar)
      tl.fence_proxy_async "shared"
      tl.bulk_copy(p.g, s, 128)
      tl.bulk_commit()
      tl.bulk_wait(1, { read = true })
      tl.fence "cluster"
      tl.fence_proxy_async()
      tl.barrier()
      tl.named_barrier_sync(1, 64)
      tl.named_barrier_arrive(2, 64)
      tl.cluster_arrive { relaxed = true }
      tl.cluster_arrive()
      tl.cluster_wait()
    end)
    local _, low = compile(k)
    seq(low, { "nvvm.cp.async.bulk.shared.cluster.global", 'nvvm.fence.proxy.async {space = "shared::cta"}',
               "nvvm.cp.async.bulk.global.shared.cta", "nvvm.cp.async.bulk.commit.group",
               "nvvm.cp.async.bulk.wait_group {group = 1, read = true}", 'nvvm.fence {scope = "cluster"}',
               "nvvm.fence.proxy.async\n", "nvvm.barrier0", "nvvm.barrier %", "nvvm.barrier.arrive",
               "nvvm.cluster.arrive.relaxed", "nvvm.cluster.arrive\n", "nvvm.cluster.wait" })
  end)

  it("gives loop-carried pointers the address type", function()
    local k = build("carried", { { "g", P(tl.f32) }, { "n", tl.i32 } }, function(k, p)
      local last = tl.for_range(0, p.n, { p.g }, function(i, q) return q + 1 end)
      last:store(0.0)
    end)
    local _, low = compile(k)
    has(low, "^bb0(%")
    lacks(low, ": ptr<f32, global>)") -- no block argument keeps the pointer type
    has(low, "scf.for")
  end)
end)
-- }===================================================================

-- {===================================================================
describe("the PTX emitter", function()
  it("writes the module header, parameters and the kernel directives", function()
    local k = build("entry", { { "g", P(tl.f32) }, { "n", tl.i32 }, { "x", tl.f64 }, { "h", tl.f16 }, { "b", tl.i8 }, { "flag", tl.i1 }, { "gen", P(tl.f32, "generic") } },
      function(k, p)
        tl.if_(p.flag, function() p.g:store(p.x:cast(tl.f32) + p.h:cast(tl.f32) + p.b:cast(tl.f32)) end)
        p.gen:store(p.n:cast(tl.f32))
      end, { block = { 64, 2, 1 }, cluster = { 2, 1, 1 } })
    local ptx = compile(k)
    seq(ptx, { ".version 8.0", ".target sm_90a", ".address_size 64", ".visible .entry entry(",
               ".param .u64 entry_param_0", ".param .u32 entry_param_1", ".param .f64 entry_param_2",
               ".param .b16 entry_param_3", ".param .u8 entry_param_4", ".param .u8 entry_param_5",
               ".param .u64 entry_param_6", ")", ".reqntid 64, 2, 1", ".explicitcluster",
               ".reqnctapercluster 2, 1, 1", "{", ".reg .pred %p<", "ld.param.u64 %rd1, [entry_param_0];",
               "cvta.to.global.u64 %rd2, %rd1;", "ld.param.u32", "ld.param.f64", "ld.param.b16", "ld.param.s8",
               "ld.param.u8", "setp.ne.b16", "ld.param.u64" })
    assert.equal(1, count(ptx, "cvta.to.global.u64")) -- not for the generic pointer
    lacks(ptx, ".extern .shared")
  end)

  it("writes .minnctapersm for kernel_spec.min_ctas, and refuses more blocks than an SM's threads hold", function()
    local function body(k, p) p.g:store(p.g:load() + 1.0) end
    local ptx = compile(build("three", { { "g", P(tl.f32) } }, body, { block = 256, min_ctas = 3 }))
    seq(ptx, { ".reqntid 256, 1, 1", ".minnctapersm 3", "{" })
    lacks(compile(build("none", { { "g", P(tl.f32) } }, body, { block = 256 })), ".minnctapersm")
    local ok, err = pcall(compile, build("nine", { { "g", P(tl.f32) } }, body, { block = 256, min_ctas = 9 }))
    assert.is_false(ok)
    assert.matches("kernel_spec.min_ctas = 9 blocks of 256 threads do not fit the 2048 threads of an SM", err, 1, true)
    ok, err = pcall(build, "zero", { { "g", P(tl.f32) } }, body, { min_ctas = 0 })
    assert.is_false(ok)
    assert.matches("min_ctas must be an integer in [1, 32]", err, 1, true)
  end)

  it("is deterministic", function()
    local function make()
      return build("det", { { "g", P(tl.f32) } }, function(k, p)
        local s = k:shared(tl.f32, 32)
        tl.for_range(0, 4, function(i) (s + i):store(p.g:load()) end)
        tl.barrier() -- every thread stored s[0]: the barrier orders those stores before the loads
        p.g:store(s:load())
      end)
    end
    local a, b = make():compile(), make():compile()
    assert.equal(a, b)
    has(a, ".extern .shared .align 16 .b8 smem[];")
    has(a, "mov.u32 %r1, smem;")
  end)

  it("emits integer arithmetic with arith's semantics", function()
    local k = build("ints", { { "g", P(tl.i32) }, { "h", P(tl.i64) }, { "c", P(tl.i8) }, { "a", tl.i32 }, { "b", tl.i32 }, { "x", tl.i64 }, { "y", tl.i64 }, { "s", tl.i8 }, { "t", tl.i8 } },
      function(k, p)
        p.g:store(p.a + p.b * p.a - p.a // p.b + tl.divu(p.a, p.b) + p.a % p.b + tl.remu(p.a, p.b)
          + (p.a & p.b | p.a ~ p.b) + (p.a << p.b) + tl.shrs(p.a, p.b) + (p.a >> p.b)
          + tl.min(p.a, p.b) + tl.max(p.a, p.b) + tl.minu(p.a, p.b) + tl.maxu(p.a, p.b))
        p.h:store((p.x << p.y) + tl.shrs(p.x, p.y) + (p.x >> p.y) + p.x * p.y)
        p.c:store(p.s + p.t + tl.divu(p.s, p.t) + (p.s >> p.t) + tl.maxu(p.s, p.t))
      end)
    local ptx = compile(k)
    for _, i in ipairs { "add.s32", "mul.lo.s32", "sub.s32", "div.s32", "div.u32", "rem.s32", "rem.u32", "and.b32",
                         "or.b32", "xor.b32", "shl.b32", "shr.s32", "shr.u32", "min.s32", "max.s32", "min.u32", "max.u32",
                         "shl.b64", "shr.s64", "shr.u64", "mul.lo.s64" } do
      has(ptx, i .. " ")
    end
    -- 64-bit shift amounts clamp at 64 before they become the .u32 PTX wants
    seq(ptx, { "min.u64 %rd", ", 64;", "cvt.u32.u64", "shl.b64" })
    -- i8 lives sign-extended in .b16: re-extend after add, zero-extend for unsigned ops
    seq(ptx, { "add.s16", "cvt.s16.s8", "and.b16", ", 255;", "div.u16" })
    has(ptx, "shr.u16")
    has(ptx, "max.u16")
    has(ptx, "st.global.b8")
  end)

  it("emits float arithmetic rounded to nearest, NaN-propagating min and max", function()
    local k = build("floats", { { "f", P(tl.f32) }, { "d", P(tl.f64) }, { "h", P(tl.f16) }, { "b", P(tl.bf16) } },
      function(k, p)
        local x, y = p.f:load(), (p.f + 1):load()
        p.f:store(tl.fma(x + y - x * y / y, y, x) + tl.min(x, y) + tl.max(x, y) - x)
        local dx = p.d:load()
        p.d:store(tl.min(dx, dx) + tl.max(dx, dx) / dx)
        local hx = p.h:load()
        p.h:store(hx * hx + hx / hx + tl.min(hx, hx))
        local bx = p.b:load()
        p.b:store(-bx + bx * bx - bx + tl.max(bx, bx))
      end)
    local ptx = compile(k)
    for _, i in ipairs { "add.rn.f32", "sub.rn.f32", "mul.rn.f32", "div.rn.f32", "fma.rn.f32", "min.NaN.f32",
                         "max.NaN.f32", "min.f64", "setp.nan.f64", "selp.f64", "div.rn.f64", "mul.rn.f16",
                         "min.NaN.f16", "neg.bf16", "mul.rn.bf16", "sub.rn.bf16", "max.NaN.bf16", "ld.global.b16" } do
      has(ptx, i .. " ")
    end
    seq(ptx, { "cvt.f32.f16", "cvt.f32.f16", "div.rn.f32", "cvt.rn.f16.f32" }) -- f16 division through f32
  end)

  it("emits comparisons, selects and every cast", function()
    local k = build("casts", { { "o", P(tl.f64) }, { "a", tl.i32 }, { "x", tl.f32 }, { "h", tl.f16 }, { "s", tl.i8 } },
      function(k, p)
        local c = p.a:lt(3) & p.x:ge(p.x) & p.a:uge(7) & p.x:ne(p.x)
        local v = tl.select(c, p.x, p.x * 2)
        local i64 = p.a:cast(tl.i64) + p.a:cast(tl.i64, true) + p.a:cast(tl.index):cast(tl.i64)
          + p.s:cast(tl.i64) + p.s:cast(tl.i64, true) + c:cast(tl.i64) + c:cast(tl.i64, true)
        local i16 = p.a:cast(tl.i16) + p.s:cast(tl.i16) + p.s:cast(tl.i16, true)
        local i8 = p.a:cast(tl.i8) + i64:cast(tl.i8) + v:cast(tl.i8) + v:cast(tl.i8, true)
        local b = i64:cast(tl.i1)
        local f = v:cast(tl.f64) + p.h:cast(tl.f64) + p.a:cast(tl.f64) + p.a:cast(tl.f64, true) + i8:cast(tl.f64)
          + i8:cast(tl.f64, true) + b:cast(tl.f64) + i16:cast(tl.f64)
        local h2 = f:cast(tl.f16) + f:cast(tl.f32):cast(tl.bf16):cast(tl.f16) + p.a:cast(tl.f16)
        local bits = p.x:bitcast(tl.i32):cast(tl.f64) + v:cast(tl.i32):cast(tl.f64) + v:cast(tl.i64, true):cast(tl.f64)
        p.o:store(f + h2:cast(tl.f64) + bits + tl.select(b, tl.const(1.5, tl.f64), 2.5))
      end)
    local ptx = compile(k)
    for _, i in ipairs { "setp.lt.s32", "setp.ge.f32", "setp.ge.u32", "setp.neu.f32", "and.pred", "selp.f32",
                         "cvt.s64.s32", "cvt.u64.u32", "cvt.s64.s8", "cvt.u64.u8", "selp.b64", "cvt.u16.u32",
                         "cvt.s16.s8", "cvt.rzi.s8.f32", "cvt.rzi.u8.f32", "setp.ne.b64", "cvt.f64.f32",
                         "cvt.f64.f16", "cvt.rn.f64.s32", "cvt.rn.f64.u32", "cvt.rn.f64.s16", "cvt.rn.f64.u8",
                         "selp.f64", "cvt.rn.f16.f64", "cvt.rn.bf16.f32", "cvt.f32.bf16", "cvt.rn.f16.s32",
                         "mov.b32", "cvt.rzi.s32.f32", "cvt.rzi.u64.f32", "selp.f64" } do
      has(ptx, i .. " ")
    end
  end)

  it("encodes constants bit-exactly", function()
    local k = build("consts", { { "f", P(tl.f32) }, { "d", P(tl.f64) }, { "h", P(tl.f16) }, { "b", P(tl.bf16) }, { "g", P(tl.i64) }, { "c", P(tl.i8) } },
      function(k, p)
        p.f:store(tl.const(1.0, tl.f32) + p.f:load())
        p.d:store(tl.const(-2.5, tl.f64) + p.d:load())
        p.h:store(tl.const(1.0, tl.f16) + p.h:load())
        p.b:store(tl.const(-1.0, tl.bf16) + p.b:load())
        p.g:store(tl.const(-5, tl.i64) + p.g:load())
        p.c:store(tl.const(-1, tl.i8) + p.c:load())
      end)
    local ptx = compile(k)
    has(ptx, "0f3F800000")
    has(ptx, "0dC004000000000000")
    has(ptx, "mov.b16 %rs")
    has(ptx, "0x3C00")
    has(ptx, "0xBF80")
    has(ptx, "0xFFFFFFFFFFFFFFFB")
    has(ptx, "0xFFFF;")
  end)

  it("turns scf.for, scf.if and scf.while into branches with unique labels", function()
    local k = build("flow", { { "g", P(tl.i32) }, { "n", tl.i32 } }, function(k, p)
      -- a swap of loop-carried values needs a parallel copy
      local a, b = tl.for_range(0, p.n, { tl.const(1), tl.const(2) }, function(i, x, y) return y, x end)
      local r = tl.if_(a:lt(b), function() return a end, function() return b end)
      local w = tl.while_({ r }, function(v) return v:lt(100), v end, function(v) return v * 2 end)
      tl.if_(w:gt(0), function() p.g:store(w) end)
      p.g:store(a + b)
    end)
    local ptx = compile(k)
    seq(ptx, { "$L_0_1:", "setp.ge.s32", "@%p", "bra $L_0_2;", "bra.uni $L_0_1;", "$L_0_2:",
               "@!%p", "bra $L_0_3;", "bra.uni $L_0_4;", "$L_0_3:", "$L_0_4:",
               "$L_0_5:", "@!%p", "bra $L_0_6;", "bra.uni $L_0_5;", "$L_0_6:" })
    local labels = {}
    for l in ptx:gmatch "\n(%$L_[%d_]+):" do
      assert.is_nil(labels[l], "label " .. l .. " defined twice")
      labels[l] = true
    end
    -- the swap goes through temporaries: four movs for two values
    local body = ptx:match "%$L_0_1:(.-)%$L_0_2:"
    assert.is_true(count(body, "mov.b32") >= 4)
  end)

  it("keeps vectors in registers: v4 loads and stores, packed sub-word elements", function()
    local k = build("vectors", { { "f", P(tl.f32) }, { "h", P(tl.f16) }, { "c", P(tl.i8) }, { "d", P(tl.f64) } },
      function(k, p)
        local v = p.f:load { vector = 4 }
        p.f:store(tl.vector_of(tl.f32, { tl.extract(v, 3), tl.extract(v, 2), tl.extract(v, 1), tl.extract(v, 0) }))
        local hv = p.h:load { vector = 8 }
        p.h:store(tl.vector_of(tl.f16, { tl.extract(hv, 7), tl.extract(hv, 0) }))
        local cv = p.c:load { vector = 16 }
        p.c:store(tl.vector_of(tl.i8, { tl.extract(cv, 5), tl.extract(cv, 0), tl.extract(cv, 1), tl.extract(cv, 2) }))
        p.d:store(p.d:load { vector = 2 })
      end)
    local ptx = compile(k)
    has(ptx, "ld.global.v4.f32 {%f")
    has(ptx, "st.global.v4.f32 [%rd")
    has(ptx, "ld.global.v4.b32 {%r")
    seq(ptx, { "bfe.s32", ", 16, 16;", "cvt.u16.u32" })
    seq(ptx, { "cvt.u32.u16", "bfi.b32" })
    has(ptx, "st.global.b32 [")
    has(ptx, "ld.global.v2.f64")
  end)

  it("bitcasts packed vectors to and from integers by moving registers", function()
    local k = build("vector_bitcasts", { { "w", P(tl.i32) }, { "q", P(tl.i64) }, { "o", P(tl.i64) } }, function(k, p)
      local pair = tl.vector_of(tl.bf16, { 1.0, -2.0 })
      p.w:store(pair:bitcast(tl.i32)) -- one 32-bit register
      local four = (p.w + 1):load { vector = 2 }:bitcast(tl.vector(tl.bf16, 4))
      p.q:store(four:bitcast(tl.i64)) -- two 32-bit registers into one 64-bit one
      local h = p.o:load():bitcast(tl.vector(tl.f16, 4)) -- and back out
      tl.store(p.o + 1, h:bitcast(tl.vector(tl.i32, 2)):bitcast(tl.i64))
    end, { block = 32 })
    local ptx = compile(k)
    seq(ptx, { "bfi.b32", "st.global.b32" })
    has(ptx, "mov.b64 %rd")
    assert.is_truthy(ptx:find("mov%.b64 %%rd%d+, {%%r%d+, %%r%d+};"))
    assert.is_truthy(ptx:find("mov%.b64 {%%r%d+, %%r%d+}, %%rd%d+;"))
    -- bits as the emulator reads them: the bytes go through unchanged
    local src = {}
    for i = 1, 12 do src[i] = 16 * i + 1 end
    local r = tl.emulate(k, { grid = 1, args = { src, { bytes = 8 }, { 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 0 } } })
    assert(r.ok, r.report)
    assert.equal(string.char(table.unpack(src, 5, 12)), r.read(2))
    assert.equal("\1\2\3\4\5\6\7\8\1\2\3\4\5\6\7\8", r.read(3))
    assert.equal(string.char(0x80, 0x3f, 0x00, 0xc0), r.read(1):sub(1, 4)) -- bf16 1.0, -2.0
  end)

  it("emits the nvvm families: special registers, atomics, mbarriers, bulk copies, barriers", function()
    local k = build("families", { { "g", P(tl.i32) }, { "f", P(tl.f32) }, { "l", P(tl.i64) } }, function(k, p)
      local s, bar = k:shared(tl.i32, 64), k:shared(tl.i64, 1, { align = 8 })
      tl.mbarrier_init(bar, 1)
      tl.fence_mbarrier_init()
      tl.barrier()
      tl.elect_one(function()
        tl.mbarrier_arrive_expect_tx(bar, 256)
        tl.bulk_copy(s, p.g, 256, bar)
      end)
      tl.mbarrier_wait(bar, 0)
      tl.fence_proxy_async "shared"
      tl.elect_one(function()
        tl.bulk_copy(p.g + 64, s, 256)
        tl.bulk_commit()
        tl.bulk_wait(0, { read = true })
        tl.bulk_wait(0)
      end)
      p.g:store(tl.atomic_add(p.g, 1) + tl.atomic_umax(s, 7) + tl.atomic_cas(p.g, 1, 2, { scope = "sys" }))
      tl.atomic_add(p.f, 1.5)
      tl.atomic_exch(p.l, 3)
      p.f:store(tl.atomic_exch(p.f, 2.5))
      tl.named_barrier_sync(1, 64)
      tl.cluster_arrive { relaxed = true }
      tl.cluster_wait()
      tl.mbarrier_inval(bar)
    end)
    local ptx = compile(k)
    seq(ptx, { "mbarrier.init.shared::cta.b64 [%r", "fence.mbarrier_init.release.cluster;", "bar.sync 0;",
               "elect.sync _|%p", ", 0xffffffff;", "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%r",
               "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r", "], [%rd", "], %r",
               "mbarrier.try_wait.parity.shared::cta.b64 %p", "fence.proxy.async.shared::cta;",
               "cp.async.bulk.global.shared::cta.bulk_group [%rd", "cp.async.bulk.commit_group;",
               "cp.async.bulk.wait_group.read 0;", "cp.async.bulk.wait_group 0;",
               "atom.gpu.global.add.u32 %r", "atom.gpu.shared::cta.max.u32 %r", "atom.sys.global.cas.b32 %r",
               "red.gpu.global.add.f32 [%rd", "atom.gpu.global.exch.b64", "atom.gpu.global.exch.b32 %f", "bar.sync %r",
               "barrier.cluster.arrive.relaxed;", "barrier.cluster.wait;", "mbarrier.inval.shared::cta.b64" })
  end)

  it("emits every special register and the raw nvvm ops", function()
    tl.new_module()
    local k = tl.kernel("sregs", { params = { { "g", P(tl.i64) } }, block = 32 })
    k:define(function(k, p)
      local acc = tl.const(0, tl.i64)
      for _, op in ipairs(tl.core.ops()) do
        if op.name:match "^nvvm%.read%.ptx%.sreg%." then
          local t = (op.name:match "globaltimer" or op.name:match "clock64") and tl.i64 or tl.i32
          local v = tl.op1(op.name, {}, t)
          acc = acc + (t == tl.i64 and v or v:cast(tl.i64))
        end
      end
      local sm = tl.op1("nvvm.shared.base", {}, tl.i32)
      tl.op("nvvm.nanosleep", { tl.const(100) }, {})
      tl.op("nvvm.inline_ptx", { sm }, {}, { ptx = ".pragma \"nounroll\"; // base $0" })
      tl.op("nvvm.setmaxregister", {}, {}, { action = "dec", count = 40 })
      tl.op("nvvm.wgmma.fence.aligned", {}, {})
      tl.op("nvvm.wgmma.commit.group.sync.aligned", {}, {})
      tl.op("nvvm.wgmma.wait.group.sync.aligned", {}, {}, { group = 1 })
      tl.op1("nvvm.getctarank.shared.cluster", { sm }, tl.i32)
      p.g:store(acc)
    end)
    local ptx = compile(k)
    for _, r in ipairs { "%tid.x", "%ntid.z", "%ctaid.y", "%nctaid.x", "%clusterid.z", "%nclusterid.x",
                         "%cluster_ctaid.x", "%cluster_nctaid.y", "%cluster_ctarank", "%cluster_nctarank",
                         "%laneid", "%warpid", "%smid", "%clock" } do
      has(ptx, ", " .. r)
    end
    has(ptx, "mov.u64 %rd")
    has(ptx, ", %globaltimer;")
    has(ptx, ", %clock64;")
    has(ptx, "nanosleep.u32 %r")
    seq(ptx, { "mov.u32 %r", "smem;" })
    has(ptx, '.pragma "nounroll"; // base %r')
    has(ptx, "setmaxnreg.dec.sync.aligned.u32 40;")
    seq(ptx, { "wgmma.fence.sync.aligned;", "wgmma.commit_group.sync.aligned;", "wgmma.wait_group.sync.aligned 1;" })
  end)

  it("diagnoses what it cannot emit, naming the op and its line", function()
    tl.new_module()
    local k = tl.kernel("left", { params = { { "g", P(tl.f32) } }, block = 32 })
    local line = debug.getinfo(1, "l").currentline + 1
    k:define(function(k, p) p.g:store(1.0) end)
    local ok, err = pcall(tl.emit_ptx, k.module)
    assert.is_false(ok)
    assert.matches("ptx_spec.lua:" .. line .. ": 'tile.store' op cannot be emitted as PTX: lower the tile ops first", err)
    tl.new_module()
    k = tl.kernel("odd", { params = { { "g", P(tl.i32) } }, block = 32 })
    k:define(function(k, p) p.g:store(p.g:load():cast(tl.core.type_int(3)):cast(tl.i32)) end)
    ok, err = pcall(function() k:compile() end)
    assert.is_false(ok)
    assert.matches("cannot be emitted as PTX: no register holds a value of type i3", err)
  end)
end)
-- }===================================================================

-- {===================================================================
describe("tilua script --emit / --stage", function()
  local script = os.tmpname()
  local f = assert(io.open(script, "w"))
  f:write [[
local tl = require "tilua"
local k = tl.kernel("cli", { params = { { "g", tl.ptr(tl.i32) } }, block = 32 })
k:define(function(k, p) p.g:store(tl.thread_id()) end)
k:compile()
print "not reached with --emit or --stage"
]]
  f:close()
  it("print the PTX, the IR or one stage and exit 0", function()
    local out, err0, code = H.tilua_run { script, "--emit=ptx" }
    local _, err
    assert.equal(0, code, err0)
    has(out, ".visible .entry cli(")
    lacks(out, "not reached")
    out, _, code = H.tilua_run { "--emit=ir", script }
    assert.equal(0, code)
    has(out, "nvvm.st.global")
    lacks(out, ".entry")
    out, _, code = H.tilua_run { script, "--stage=input" }
    assert.equal(0, code)
    has(out, "tile.thread_id")
    out, _, code = H.tilua_run { "--stage=convert-tile-to-nvvm", script }
    assert.equal(0, code)
    has(out, "nvvm.read.ptx.sreg.tid.x")
    _, err, code = H.tilua_run { script, "--stage=nope" }
    assert.equal(1, code)
    has(err, "--stage=nope: no such stage")
    out, _, code = H.tilua_run { script }
    assert.equal(0, code)
    has(out, "not reached")
    os.remove(script)
  end)

  it("compile what a script built when it compiled nothing, and say so when it built nothing", function()
    local script = os.tmpname() .. ".lua"
    local f = assert(io.open(script, "w"))
    f:write [[
local tl = require "tilua"
local k = tl.kernel("built_only", { params = { { "a", tl.ptr(tl.f32) } }, block = 32 })
k:define(function(k, p) p.a:store(tl.const(1.0, tl.f32)) end)
print(tl.module():print())
]]
    f:close()
    local out, err, code = H.tilua_run { script, "--emit=ptx" }
    assert.equal(0, code, err)
    has(out, ".entry built_only")
    lacks(out, "module {") -- the script's print went to stderr
    has(err, "module {")
    out, err, code = H.tilua_run { "--stage=input", script }
    assert.equal(0, code, err)
    has(out, "tile.store")
    os.remove(script)
    out, err, code = H.tilua_run({ "--emit=ptx", "-" }, "print('nothing built')\n")
    assert.equal(1, code, out)
    has(err, "--emit=ptx: the script built no kernel")
    has(err, "nothing built")
    lacks(out, "nothing built")
  end)

  it("give PTX for the examples that print their IR or run a pipeline of their own", function()
    -- hello.lua runs canonicalize,cse itself; cutlass_pipeline.lua prints its IR first
    for _, ex in ipairs { "examples/hello.lua", "examples/cutlass_pipeline.lua" } do
      local out, err, code = H.tilua_run { ex, "--emit=ptx" }
      assert.equal(0, code, err)
      assert.matches("^//\n// Generated by tilua", out)
      has(out, ".target sm_90a")
      lacks(out, "module {")
      lacks(out, "// ===== stage")
      if H.ptxas() then
        local path = os.tmpname()
        local h = assert(io.open(path, "w"))
        h:write(out)
        h:close()
        local ok = os.execute(("%s -arch=sm_90a -o /dev/null %s"):format(H.ptxas(), path))
        os.remove(path)
        assert.is_true(ok == true, ex .. ": ptxas rejected the PTX")
      end
    end
  end)

  it("print the stage asked for of a compile that failed, with its error, and exit 1", function()
    local script = os.tmpname() .. ".lua"
    local f = assert(io.open(script, "w"))
    f:write(H.unpipelined_dot_script .. 'print("before the compile")\nk:compile()\n')
    f:close()
    for _, stage in ipairs { "input", "tileas-assign-layouts", "tileas-materialize-agents" } do
      local out, err, code = H.tilua_run { script, "--stage=" .. stage }
      assert.equal(1, code, err)
      has(out, "tileas.dot")
      lacks(out, "before the compile")
      has(err, script .. ":4: 'tileas.dot' op tileas-materialize-agents: this dot is not in a pipelined loop")
    end
    local out, err, code = H.tilua_run { script, "--stage=cse" }
    assert.equal(1, code)
    assert.equal("", out)
    has(err, "--stage=cse: the compile failed before that stage (stages: input, tileas-assign-layouts")
    out, err, code = H.tilua_run { script, "--emit=ptx" }
    assert.equal(1, code)
    assert.equal("", out)
    has(err, "this dot is not in a pipelined loop")
    os.remove(script)
  end)
end)
-- }===================================================================

describe("the compile cache", function()
  local function saxpy()
    return build("saxpy_cached", { { "x", P(tl.f32) }, { "a", tl.f32 } }, function(k, p)
      p.x:store(p.x:load() * p.a)
    end)
  end

  it("gives an identical module's compile again, stages and all, and never a changed one's", function()
    local k1 = saxpy()
    local ptx1 = k1:compile()
    local n1 = #tl.last_stages
    assert.is_nil(tl.last_stages[1].cached)
    local k2 = saxpy() -- built again from scratch: the same text
    local ptx2 = k2:compile()
    assert.equal(ptx1, ptx2)
    assert.equal(n1, #tl.last_stages)
    for _, st in ipairs(tl.last_stages) do assert.is_true(st.cached) end
    assert.equal(k1.lowered:print(), k2.lowered:print())
    -- a different kernel misses
    local k3 = build("saxpy_cached", { { "x", P(tl.f32) }, { "a", tl.f32 } }, function(k, p)
      p.x:store(p.x:load() + p.a)
    end)
    local ptx3 = k3:compile()
    assert.are_not.equal(ptx1, ptx3)
    assert.is_nil(tl.last_stages[1].cached)
    -- off: every compile compiles
    tl.options.compile_cache = false
    local ptx4 = saxpy():compile()
    tl.options.compile_cache = nil
    assert.equal(ptx1, ptx4)
    assert.is_nil(tl.last_stages[1].cached)
  end)
end)

describe("the collector during k:compile (tl.options.compile_gc)", function()
  it("waits longer while a compile runs, and the script's pause comes back after, also after an error", function()
    local seen
    tl.options.stage_hook = function() seen = collectgarbage("setpause", 160) collectgarbage("setpause", seen) end
    collectgarbage("setpause", 160) -- (Lua keeps a pause in steps of 4)
    local k = build("gc_pause", { { "g", P(tl.i32) } }, function(k, p) p.g:store(tl.thread_id()) end)
    tl.options.compile_cache = false
    k:compile()
    assert.is_true(seen > 160 and seen <= 1000) -- (during the compile)
    assert.equal(160, collectgarbage("setpause", 160))
    local bad = build("gc_pause_bad", { { "g", P(tl.i32) } }, function(k, p) p.g:store(tl.thread_id()) end)
    assert.has_error(function() bad:compile("no-such-pass") end)
    assert.equal(160, collectgarbage("setpause", 160))
    -- false: the script's setting throughout
    tl.options.compile_gc = false
    k:compile()
    tl.options.compile_gc = nil
    assert.equal(160, seen)
    tl.options.stage_hook, tl.options.compile_cache = nil, nil
    collectgarbage("setpause", 200)
  end)
end)

describe("the stages of k:compile", function()
  it("say changed only for the passes that changed something", function()
    local k = build("plain", { { "g", P(tl.i32) } }, function(k, p) p.g:store(tl.thread_id()) end)
    compile(k)
    local changed = {}
    for _, s in ipairs(tl.last_stages) do changed[s.name] = changed[s.name] or s.changed end
    assert.is_false(changed["lower-tile-scheduler"])
    assert.is_false(changed["convert-cutlass-to-nvvm"])
    assert.is_true(changed["convert-tile-to-nvvm"])
  end)
end)

describe("line info", function()
  it("writes .file and a .loc of the script line before each line's instructions", function()
    local line_store
    local k = build("lines", { { "g", P(tl.i32) } }, function(k, p)
      local t = tl.thread_id()
      line_store = debug.getinfo(1, "l").currentline + 1
      p.g:store(t * 3)
    end)
    local ptx = compile(k)
    assert.matches('%.file 1 "[^"]*ptx_spec%.lua"', ptx)
    assert.matches("%.loc 1 " .. line_store .. " 0\n\tmov%.b32 %%r%d+, 0x3;\n\tmul%.lo%.s32", ptx)
    assert.is_nil(ptx:find("%.loc[^\n]*\n\t%.loc"), "a .loc that covers no instruction")
  end)

  it("maps ptxas errors back to the script line", function()
    local bad_line
    local k = build("ptxas_err", { { "g", P(tl.i32) } }, function(k, p)
      bad_line = debug.getinfo(1, "l").currentline + 1
      tl.inline_ptx("bogus.op $0;", { tl.thread_id() }, {})
    end)
    local ptx = k:compile()
    local ok, log = tl.ptxas(ptx)
    if ok == nil then pending("ptxas not found: " .. log) end
    assert.is_false(ok)
    assert.matches("ptx_spec%.lua:" .. bad_line .. ": ptxas %(PTX line %d+%): error", log)
    assert.is_nil(log:find("/tmp/lua_", 1, true), "the temporary file ptxas read is not named")
  end)
end)

E.assemble_all(11)
