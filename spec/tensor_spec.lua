-- Tensor cores and TMA (docs/tensor.md): the Lua surface of wgmma, TMA and
-- tensor maps, what convert-tile-to-nvvm makes of them, the PTX the emitter
-- writes (register lists, in-place accumulators, .param tensor maps), the
-- host-side checks of tensor maps, the GEMM generator of stdlib/gemm.lua in
-- several configurations, and every PTX this spec emitted through ptxas.
local H = dofile "spec/helper.lua"
local tl = require "tilua"
tl.options.keep_stages = true -- the checks read the stages' IR

local has, lacks, count = H.has, H.lacks, H.count
local E = H.emitter { block = 128 }
local build, compile = E.build, E.compile

local AT = function() return tl.tensor_map_type(tl.bf16, { 64, 64 }, 128) end

describe("tensor map types", function()
  it("are built from an element type, a box (outermost first) and a swizzle", function()
    assert.equal("!tile.tensor_map<bf16, sw128, 64, 64>", tostring(AT()))
    assert.equal("!tile.tensor_map<f32, linear, 8, 16, 4>", tostring(tl.tensor_map_type(tl.f32, { 8, 16, 4 })))
    local info = tl.tensor_map_info(AT())
    assert.same({ 64, 64 }, info.box)
    assert.equal(128, info.swizzle)
    assert.has_error(function() tl.tensor_map_type(tl.bf16, { 64 }, 16) end)
  end)

  it("are kernel parameters passed as .param .align 64 .b8 [128] by generic address", function()
    local k = build("map_param", { { "A", AT() } }, function(k, p) tl.tensor_map_prefetch(p.A) end)
    local ptx = compile(k)
    has(ptx, ".param .align 64 .b8 map_param_param_0[128]")
    has(ptx, "mov.b64 %rd1, map_param_param_0;")
    has(ptx, "cvta.param.u64 %rd1, %rd1;")
    has(ptx, "prefetch.tensormap [%rd1];")
  end)
end)

describe("TMA", function()
  it("lowers to cp.async.bulk.tensor with the coordinates in PTX order (innermost first)", function()
    local k = build("tma", { { "A", AT() } }, function(k, p)
      local s = k:shared(tl.bf16, { 64, 64 }, { align = 1024, swizzle = 128 })
      local bar = k:shared(tl.i64, 1, { align = 8 })
      local t = tl.thread_id()
      tl.tma_load(s:ptr(0), p.A, bar, { t, t + 7 })
      tl.tma_store(p.A, s:ptr(0), { t + 1, t + 2 }, { reduce = "add" })
      tl.tma_prefetch(p.A, { t + 3, t + 4 })
    end, { cluster = { 2, 1, 1 } })
    local ptx, lowered = compile(k)
    has(lowered, "nvvm.cp.async.bulk.tensor.shared.cluster.global")
    has(lowered, "{dim = 2}")
    assert.matches("cp%.async%.bulk%.tensor%.2d%.shared::cluster%.global%.tile%.mbarrier::complete_tx::bytes %[%%r%d+%], %[%%rd1, {%%r(%d+), %%r(%d+)}%]", ptx)
    -- the innermost coordinate (t + 7) comes first
    local inner, outer = ptx:match "complete_tx::bytes %[%%r%d+%], %[%%rd1, {%%r(%d+), %%r(%d+)}%]"
    assert.matches("add%.s32 %%r" .. inner .. ", %%r%d+, %%r%d+", ptx)
    assert.matches("mov%.u32 %%r" .. outer .. ", %%tid%.x", ptx)
    has(ptx, "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%rd1, {")
    has(ptx, "cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%rd1, {")
  end)

  it("multicasts to a cluster mask", function()
    local k = build("tma_mc", { { "A", AT() } }, function(k, p)
      local s = k:shared(tl.bf16, { 64, 64 }, { align = 1024, swizzle = 128 })
      local bar = k:shared(tl.i64, 1, { align = 8 })
      tl.tma_load(s:ptr(0), p.A, bar, { 0, 0 }, { multicast = 3 })
    end, { cluster = { 2, 1, 1 } })
    local ptx = compile(k)
    assert.matches("complete_tx::bytes%.multicast::cluster %[%%r%d+%], %[%%rd1, {%%r%d+, %%r%d+}%], %[%%r%d+%], %%rs%d+;", ptx)
  end)
end)

-- A TMA load of one 16-byte box {1, 4} of an f32 tensor at column c0 into a
-- shared buffer at byte offset s0, stored to out: what an H200 traps on
-- (CUDA_ERROR_ILLEGAL_INSTRUCTION) the emulator refuses as a "tma" violation.
local function tma_box_at(s0)
  tl.new_module()
  local MT = tl.tensor_map_type(tl.f32, { 1, 4 }, 0)
  local k = tl.kernel("tma_box", { params = { { "src", MT }, { "out", tl.ptr(tl.f32) }, { "c0", tl.i32 } }, block = 32 })
  k:define(function(k, p)
    local s = k:shared(tl.f32, { 8 }, { align = 128 })
    local bar = k:shared(tl.i64, 1, { align = 8 })
    local t = tl.thread_id()
    tl.if_(t:eq(0), function() -- (one thread inits, loads and expects; the others wait after the barrier)
      tl.mbarrier_init(bar, 1)
      tl.fence_mbarrier_init()
      tl.tma_load(s:ptr(s0 // 4), p.src, bar, { 1, p.c0 })
      tl.mbarrier_arrive_expect_tx(bar, 16)
    end)
    tl.barrier()
    tl.mbarrier_wait(bar, 0)
    tl.if_(t:lt(4), function() (p.out + t):store(s:ptr(s0 // 4 + t):load()) end)
  end)
  return k
end

describe("TMA in the emulator", function()
  local src = {}
  for i = 0, 2 * 8 - 1 do src[#src + 1] = string.pack("<f", i) end
  src = table.concat(src)
  local function run(c0, s0)
    return tl.emulate(tma_box_at(s0 or 0), { grid = 1, args = { { data = src, shape = { 2, 8 } }, { bytes = 16 }, c0 } })
  end
  it("copies a box whose first column is 16 bytes into its row", function()
    local r = run(4)
    assert(r.ok, r.report)
    assert.equal(string.pack("<ffff", 12, 13, 14, 15), r.read(2))
  end)
  it("refuses a box whose first column is not (the hardware traps)", function()
    local r = run(1)
    assert.is_false(r.ok)
    assert.equal("tma", r.error.kind, r.report)
    assert.matches("starts at column 1 of its rows, 4 bytes in: not a multiple of 16", r.report)
  end)
  it("refuses a shared address not 16-byte aligned", function()
    local r = run(4, 8)
    assert.is_false(r.ok)
    assert.equal("tma", r.error.kind, r.report)
    assert.matches("the shared address 8 is not 16%-byte aligned", r.report)
  end)
end)

describe("swizzled shared memory", function()
  -- the byte offset of element (r, c) of a 64 x 64 bf16 memref: constant indices fold
  local function offset_of(sw, r, c)
    local k = build("swz", { { "out", tl.ptr(tl.i32) } }, function(k, p)
      local s = k:shared(tl.bf16, { 64, 64 }, { align = 1024, swizzle = sw })
      p.out:store(tl.ptr_to_int(s:ptr(r, c)))
    end)
    local m = k.module:clone()
    tl.compile(m, "convert-tile-to-nvvm,canonicalize")
    local text = m:print()
    local v = text:match "arith%.constant {value = (%d+) : i32} : i32\n%s+%%%d+ = arith%.addi"
    return tonumber(v or 0)
  end
  it("follows TMA's and wgmma's swizzle: 16-byte chunk XOR (row mod 8)", function()
    -- 128-byte rows: row r, chunk j -> chunk j ^ (r % 8)
    assert.equal(3 * 128 + ((2 ~ 3) * 16) + 2, offset_of(128, 3, 17))
    assert.equal(9 * 128 + ((7 ~ 1) * 16), offset_of(128, 9, 56))
    -- 64-byte swizzle: XOR bits [4, 6) with [7, 9)
    local o = 5 * 128 + 40 * 2
    assert.equal(o ~ (((o >> 7) & 3) << 4), offset_of(64, 5, 40))
  end)
  it("needs an alignment of its atom", function()
    assert.has_error(function()
      build("swz_bad", {}, function(k) k:shared(tl.bf16, { 64, 64 }, { align = 128, swizzle = 128 }) end)
    end, nil)
  end)
end)

describe("wgmma", function()
  local function mma_kernel(n_mma, opts)
    return build("mma", { { "A", AT() }, { "out", tl.ptr(tl.f32) } }, function(k, p)
      local s = k:shared(tl.bf16, { 64, 64 }, { align = 1024, swizzle = 128 })
      local acc = tl.zeros(tl.f32, 32)
      tl.wgmma_fence()
      for kk = 0, n_mma - 1 do
        local d = tl.wgmma_desc(s:ptr(0, kk * 16), { swizzle = 128, sbo = 1024 })
        acc = tl.wgmma(acc, d, d, opts)
      end
      tl.wgmma_commit()
      tl.wgmma_wait(0)
      p.out:store(tl.extract(acc, 5))
    end)
  end

  it("updates the accumulator registers in place", function()
    local ptx = compile(mma_kernel(4, { type_a = "bf16" }))
    assert.equal(4, count(ptx, "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"))
    local lists = {}
    for l in ptx:gmatch "m64n64k16%.f32%.bf16%.bf16 (%b{})" do lists[#lists + 1] = l end
    for i = 2, #lists do assert.equal(lists[1], lists[i]) end
    assert.equal(32, select(2, lists[1]:gsub("%%f", "")))
  end)

  it("encodes the matrix descriptor: start >> 4, lbo, sbo, swizzle mode", function()
    local _, lowered = compile(mma_kernel(1, { type_a = "bf16", scale_a = -1, trans_b = true }))
    -- (16 >> 4) << 16 | (1024 >> 4) << 32 | 1 << 62
    has(lowered, tostring(math.tointeger((1 << 16) | (64 << 32) | (1 << 62))))
  end)

  it("writes the immediates: scale-d predicate, scale, transpose", function()
    local ptx = compile(mma_kernel(1, { type_a = "bf16", scale_d = false, scale_a = -1, trans_b = true }))
    assert.matches("wgmma%.mma_async%.sync%.aligned%.m64n64k16%.f32%.bf16%.bf16 %b{}, %%rd%d+, %%rd%d+, %%p%d+, %-1, 1, 0, 1;", ptx)
    ptx = compile(mma_kernel(1, { type_a = "e4m3", type_b = "e5m2" }))
    assert.matches("m64n64k32%.f32%.e4m3%.e5m2 %b{}, %%rd%d+, %%rd%d+, %%p%d+, 1, 1;", ptx)
  end)

  it("refuses shapes, types and places the instruction does not allow", function()
    local function fails(pattern, fn)
      local ok, err = pcall(fn)
      assert.is_false(ok)
      assert.matches(pattern, err)
    end
    fails("tensor_spec.lua:%d+: .*type_a bf16 and type_b f16 cannot be mixed", function()
      compile(mma_kernel(1, { type_a = "bf16", type_b = "f16" }))
    end)
    fails("must be K%-major", function() compile(mma_kernel(1, { type_a = "tf32", trans_a = true })) end)
    fails("whole warpgroups", function()
      build("mma_elect", {}, function(k)
        tl.elect_one(function() tl.wgmma_fence() end)
      end)
    end)
  end)
end)

describe("tensor maps on the host", function()
  it("check cuTensorMapEncodeTiled's rules at the script's line before the driver", function()
    local function fails(pattern, o)
      local ok, err = pcall(tl.device.tensor_map, o)
      assert.is_false(ok)
      assert.matches(pattern, err)
    end
    local base = { address = 0x10000, dtype = "bf16", shape = { 128, 64 }, box = { 64, 64 }, swizzle = 128 }
    local function with(t)
      local o = {}
      for k, v in pairs(base) do o[k] = v end
      for k, v in pairs(t) do o[k] = v end
      return o
    end
    fails("tensor_spec.lua:%d+: tensor_map: the address 0x10001 is not 16%-byte aligned", with { address = 0x10001 })
    fails("box%[1%] = 300 is out of range %[1, 256%]", with { box = { 300, 64 } })
    fails("strides%[1%] = 60 elements is 120 bytes, not a positive multiple of 16", with { shape = { 128, 60 }, box = { 64, 8 } })
    fails("the innermost box is 256 bytes, more than the 128%-byte swizzle span", with { box = { 64, 128 }, shape = { 128, 128 } })
    fails("unknown dtype 'q7'", with { dtype = "q7" })
    fails("box and shape have different ranks", with { box = { 64 } })
    -- well formed: only the missing GPU stops it
    local ok, err = pcall(tl.device.tensor_map, base)
    if not ok then assert.matches("no GPU", err) end
  end)
end)

describe("the GEMM generator (stdlib/gemm.lua)", function()
  local configs = {
    { m = 1000, n = 1480, k = 520 },
    { m = 512, n = 512, k = 512, a_major = "m", b_major = "n" },
    { m = 512, n = 512, k = 1024, dtype = "e4m3" },
    { m = 512, n = 512, k = 512, bias = true, beta = 0.5, activation = "relu", alpha = 2 },
    { m = 512, n = 384, k = 512, bn = 128, stages = 5, schedule = "data_parallel" },
    { m = 256, n = 256, k = 64, dtype = "f16", out = "f16" },
    { m = 512, n = 512, k = 512, consumers = "pingpong" },
    { m = 1024, n = 1024, k = 16384, schedule = "splitk", bn = 128 },
    { m = 640, n = 768, k = 512, cluster = 2 },
  }
  for _, o in ipairs(configs) do
    it(("compiles %dx%dx%d %s to PTX that keeps every accumulator in registers"):format(o.m, o.n, o.k, o.dtype or "bf16"), function()
      local g = tl.gemm.build(o)
      local ptx = compile(g.kernel)
      has(ptx, "setmaxnreg.dec.sync.aligned.u32 40;")
      has(ptx, "setmaxnreg.inc.sync.aligned.u32 232;")
      has(ptx, "stmatrix.sync.aligned.m8n8.x4.shared.b16")
      has(ptx, "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group")
      lacks(ptx, ".local")
    end)
  end

  it("refuses shapes TMA cannot address and fp8 operands that are not K-major", function()
    assert.has_error(function() tl.gemm.build { m = 128, n = 100, k = 64 } end,
      "gemm.build: D rows of 100 elements are 200 bytes; TMA needs a multiple of 16")
    assert.has_error(function() tl.gemm.build { m = 128, n = 128, k = 128, dtype = "e4m3", a_major = "m" } end,
      "gemm.build: fp8 operands must be K-major (wgmma cannot transpose them)")
    assert.has_error(function() tl.gemm.build { m = 128, n = 128, k = 128, sms = 0 } end,
      "gemm.build: 'sms' must be a positive integer")
    assert.has_error(function() tl.gemm.build { m = 128, n = 128, k = 128, bn = 72 } end,
      "gemm.build: bn must be a multiple of 16 from 32 to 256")
    assert.has_error(function() tl.gemm.build { m = 128, n = 128, k = 128, consumers = "ksplit", stages = 3 } end,
      "gemm.build: ksplit consumers need an even count of stages")
    assert.equal(6, tl.gemm.build { m = 64, n = 128, k = 128, consumers = "ksplit", bn = 128 }.cfg.stages) -- 7 fit
    assert.has_error(function() tl.gemm.build { m = 128, n = 128, k = 128, consumers = "ksplit", bm = 128 } end,
      "gemm.build: ksplit consumers take 64-row tiles on 2 warpgroups and a persistent schedule")
    assert.has_error(function() tl.gemm.build { m = 128, n = 128, k = 128, bn = 160, epi = 64 } end,
      "gemm.build: bn not a multiple of 64 needs cooperative consumers, K-major B and epi dividing bn (16 or 32)")
    assert.has_error(function() tl.gemm.build { m = 128, n = 128, k = 128, bn = 80, epi = 32 } end,
      "gemm.build: bn not a multiple of 64 needs cooperative consumers, K-major B and epi dividing bn (16 or 32)")
    assert.equal(16, tl.gemm.build { m = 128, n = 128, k = 128, bn = 80 }.cfg.epi) -- 5 sub-tiles of 16 columns
    assert.has_error(function() tl.gemm.build { m = 256, n = 256, k = 256, cluster = 2, schedule = "splitk", splits = 3, bn = 128 } end,
      "gemm.build: 3 splits of 4 k blocks leave a split empty")
    assert.has_error(function()
      tl.gemm.build { m = 256, n = 256, k = 256, cluster = 2, schedule = "splitk", bn = 128, dynamic = true }
    end, "gemm.build: split-K in a cluster needs splits >= 2 and a static problem (not dynamic)")
  end)

  it("plans the persistent and StreamK grids for `sms` SMs", function()
    assert.equal(1, tl.gemm.build { m = 256, n = 256, k = 64, bn = 128, sms = 1 }.grid) -- one CTA, 4 tiles
    assert.equal(3, tl.gemm.build { m = 256, n = 256, k = 64, bn = 128, sms = 3 }.grid)
    assert.equal(4, tl.gemm.build { m = 256, n = 256, k = 64, bn = 128, sms = 64 }.grid) -- a CTA per tile at most
    assert.equal(4, tl.gemm.build { m = 256, n = 256, k = 64, bn = 128, sms = 1, schedule = "data_parallel" }.grid)
    assert.equal(5, tl.gemm.build { m = 256, n = 256, k = 64, bn = 128, sms = 5, schedule = "streamk" }.grid)
  end)

  it("leaves ptxas no wgmma to serialize (no injected waits, no spills)", function()
    local g = tl.gemm.build { m = 4096, n = 4096, k = 4096 }
    local ptx = compile(g.kernel)
    local exe = H.ptxas()
    if not exe then pending "ptxas not found" end
    local path = os.tmpname()
    local f = assert(io.open(path, "w"))
    f:write(ptx)
    f:close()
    local log = io.popen(("%s -arch=sm_90a -v -o /dev/null %s 2>&1"):format(H.quote(exe), H.quote(path))):read "a"
    os.remove(path)
    lacks(log, "C7517")
    lacks(log, "C7519")
    lacks(log, "C7510")
    has(log, "0 bytes spill stores")
  end)

  it("assembles the tiles in steps of 16 columns (16-column epilogue sub-tiles) without a serialized wgmma", function()
    for _, o in ipairs { { m = 128, n = 6144, k = 4096, bn = 48 }, { m = 128, n = 10240, k = 8192, bn = 80, cluster = { 1, 2 } },
                         { m = 256, n = 4096, k = 14336, bn = 176, schedule = "splitk", splits = 2 },
                         { m = 1024, n = 1024, k = 1024, bn = 208, cluster = { 2, 1 }, dynamic = true },
                         { m = 128, n = 8192, k = 8192, bn = 144, schedule = "streamk" },
                         { m = 1024, n = 1024, k = 16384, bn = 128, cluster = 2, schedule = "splitk", splits = 2 } } do
      H.assert_ptxas_fast(tl.gemm.build(o).kernel:compile())
    end
  end)
end)

E.assemble_all(6)
