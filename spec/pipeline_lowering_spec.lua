-- convert-cutlass-to-nvvm and dedupe-wait-groups: the structure of the lowered
-- IR for every conversion pattern (pipeline, seq_bar, async tokens, executors,
-- block_striped, named and generic barriers, MODS), the diagnostics of what the
-- pass cannot lower, the wait-group dedupe walker, a CPU model that runs the
-- lowered protocol with one coroutine per thread under random schedules (it
-- finds wrong parities as deadlocks and wrong arrive counts as corrupted data),
-- and, last, every PTX this spec emitted assembled by `ptxas -arch=sm_90a`
-- (pending, never passed, where ptxas is missing).
local H = dofile "spec/helper.lua"
local tl = require "tilua"
local interp = require "tilua.emulate.interp"

local E = H.emitter { block = 128 } -- every PTX kept for the ptxas test at the end
local emitted, build = E.emitted, E.build
local P = function(t, s) return tl.ptr(t, s) end

local UPTO = "canonicalize,cse,convert-cutlass-to-nvvm,dedupe-wait-groups"

-- The kernel's module after the pass (and a cleanup), as a module and as text.
local function lower(k, extra)
  local m = k.module:clone()
  tl.compile(m, UPTO .. (extra or ",canonicalize,cse"))
  return m, m:print()
end

local function kernel_of(m)
  for _, o in ipairs(m:region(1):entry():ops()) do
    if o:name() == "tile.kernel" then return o end
  end
end

-- The whole ptx pipeline; the PTX is kept for ptxas.
local function ptx_of(k)
  local ptx = k:compile()
  emitted[#emitted + 1] = { k.name, ptx }
  return ptx
end

local has, lacks, seq, count = H.has, H.lacks, H.seq, H.count

-- A kernel with one pipeline; producer agent (1 warp) and consumer agent (W warps).
local function pipe_kernel(name, o, producer, consumer)
  local W = o.consumer_warps or 4
  return build(name, { { "g", P(tl.i32) } }, function(k, p)
    local pipe = k:pipeline { stages = o.stages or 2, producers = { { 0, 1 } }, consumers = { { 1, W } },
                              transaction_bytes = o.tx, mode = o.mode or "cooperative" }
    k:agent("producer", { warps = 1 }, function() producer(pipe, p) end)
    k:agent("consumer", { warps = W }, function(a) consumer(pipe, p, a) end)
  end, { block = 32 * (1 + W), cluster = o.cluster })
end

-- {===================================================================
describe("convert-cutlass-to-nvvm: pipelines", function()
  it("initializes every stage's full and empty barrier once, with the stamped counts, then syncs the CTA", function()
    local k = pipe_kernel("init", { stages = 2, tx = 4096 }, function() end, function() end)
    local _, ir = lower(k)
    seq(ir, { "tile.alloc_shared {align = 8, count = 32} : ptr<i64, shared>", "arith.cmpi", "scf.if", "tile.mbarrier_init", "tile.mbarrier_init", "tile.mbarrier_init",
              "tile.mbarrier_init", "tile.fence_mbarrier_init", "tile.barrier" })
    assert.equal(4, count(ir, "tile.mbarrier_init"))
    has(ir, "value = 128 : i32") -- the empty barrier counts the 128 consumer threads (cooperative)
    lacks(ir, "cutlass.")
  end)

  it("shares one CTA barrier among consecutive inits", function()
    local k = build("two_inits", {}, function(k)
      k:pipeline { stages = 2, producers = { { 0, 1 } }, consumers = { { 1, 1 } } }
      k:seq_bar { depth = 2, arrive_count = 64 }
    end, { block = 64 })
    local _, ir = lower(k)
    assert.equal(6, count(ir, "tile.mbarrier_init"))
    assert.equal(2, count(ir, "tile.fence_mbarrier_init"))
    assert.equal(1, count(ir, "tile.barrier"))
  end)

  it("computes states as index | phase << 16 | count << 32 exactly like CUTLASS's PipelineState", function()
    local S, N = 3, 11
    local k = build("states", { { "out", P(tl.i32) } }, function(k, p)
      local pipe = k:pipeline { stages = S, producers = { { 0, 1 } }, consumers = { { 1, 1 } } }
      k:async_exec("p", { first_warp = 0, warps = 1 }, function()
        local st = pipe:producer_start { index = 1, phase = 1, count = 5 }
        tl.cutlass.for_range(0, N, { st }, function(i)
          local at = p.out + (i * 4):cast(tl.i32)
          tl.store(at, st:index())
          tl.store(at + 1, st:phase())
          tl.store(at + 2, st:count())
          st:advance()
          tl.if_((i % 4):eq(3), function() end)
        end)
        st:bump()
        tl.store(p.out + 4 * N, st:count())
        tl.store(p.out + 4 * N + 1, st:index())
      end)
    end, { block = 64 })
    local m, ir = lower(k)
    has(ir, "arith.select")
    has(ir, "arith.xori")
    has(ir, "4294967296") -- bump: count + 1 only
    local eval, mem = interp.memory()
    interp.run(kernel_of(m), { 0 }, { eval = function(op, ins, env)
      local n = op:name()
      if n == "tile.thread_id" or n == "tile.warp_id" then return { 0 } end
      if n == "tile.alloc_shared" then return { 1 << 32 } end
      if n:match "^tile%.mbarrier" or n:match "^tile%.fence" or n == "tile.barrier" then return {} end
      return eval(op, ins, env)
    end })
    local index, phase, cnt = 1, 1, 5 -- the reference: increment flips the phase on wrap
    for i = 0, N - 1 do
      assert.same({ index, phase, cnt }, { mem[16 * i], mem[16 * i + 4], mem[16 * i + 8] })
      index, cnt = index + 1, cnt + 1
      if index == S then index, phase = 0, phase ~ 1 end
    end
    assert.same({ cnt + 1, index }, { mem[16 * N], mem[16 * N + 4] })
  end)

  it("waits with parity phase ^ 1 on the empty barrier (producer) and phase on the full one (consumer)", function()
    local k = pipe_kernel("waits", {}, function(pipe)
      local st = pipe:producer_start()
      pipe:producer_acquire(st)
    end, function(pipe)
      pipe:consumer_wait(pipe:consumer_start())
    end)
    local _, ir = lower(k, "")
    -- producer: slot 2 * index + base + 1 (empty), parity xor 1, spin with the 10 ms hint
    seq(ir, { "arith.xori", "arith.muli", "arith.addi", "tile.ptr_add", "tile.ptr_to_int", "scf.while",
              "value = 10000000 : i32", "nvvm.mbarrier.try_wait.parity.shared", "scf.condition" })
    assert.equal(2, count(ir, "nvvm.mbarrier.try_wait.parity.shared"))
    assert.equal(2, count(ir, "scf.while"))
    lacks(ir, "scope")
  end)

  it("commits with arrive.expect_tx when bytes > 0, else a plain arrive; expect_tx alone adds bytes", function()
    local k = pipe_kernel("commits", { tx = 8192 }, function(pipe)
      local st = pipe:producer_start()
      tl.elect_one(function()
        pipe:producer_commit(st)       -- the init's 8192
        pipe:producer_commit(st, 512)  -- its own
        pipe:producer_commit(st, 0)    -- a plain arrive
        pipe:producer_expect_tx(st, 64)
      end)
    end, function() end)
    local _, ir = lower(k)
    seq(ir, { "tile.mbarrier_arrive_expect_tx", "tile.mbarrier_arrive_expect_tx", "tile.mbarrier_arrive ",
              "tile.mbarrier_expect_tx" })
    has(ir, "value = 8192 : i32")
    has(ir, "value = 512 : i32")
    lacks(ir, "tile.elect ") -- under tile.elect_one the executing thread arrives itself
  end)

  it("makes a warp-cooperative producer arrive once: the participant syncs, one elected lane arrives", function()
    local k = build("coop_producer", {}, function(k)
      local load = k:executor("load", { first_warp = 0, warps = 4 })
      local pipe = k:pipeline { stages = 2, producers = { load }, consumers = { { 4, 4 } }, transaction_bytes = 1024 }
      load:exec(function()
        local st = pipe:producer_start()
        pipe:producer_acquire(st)
        pipe:producer_commit(st)
      end)
    end, { block = 256 })
    local _, ir = lower(k)
    seq(ir, { "tile.named_barrier_sync", "arith.cmpi", "tile.elect", "arith.andi", "scf.if",
              "tile.mbarrier_arrive_expect_tx" })
    has(ir, "value = 15 : i32")  -- the pass's named barrier id (from 15 down)
    has(ir, "value = 128 : i32") -- the 4 warps of the participant
  end)

  -- Every consumer thread releases its own reads (cooperative); a participant's warps meet at a
  -- named barrier before its one arrival (warp_specialized), also when it is one warp: bar.sync
  -- orders the lanes' reads before the leader's release, bar.warp.sync does not (docs/testing.md).
  it("releases from every consumer thread (cooperative) or once per participant after a named barrier", function()
    local function rel(mode, warps, elect)
      local k = pipe_kernel("release_" .. mode, { mode = mode, consumer_warps = warps }, function() end, function(pipe)
        local st = pipe:consumer_start()
        if elect then tl.elect_one(function() pipe:consumer_release(st) end) else pipe:consumer_release(st) end
      end)
      local _, ir = lower(k)
      return ir
    end
    local coop, ws, ws1 = rel("cooperative"), rel("warp_specialized"), rel("warp_specialized", 1)
    has(coop, "value = 128 : i32") -- 4 warps of arrivals from every thread
    lacks(coop, "tile.elect")
    lacks(coop, "tile.named_barrier_sync")
    seq(ws, { "tile.named_barrier_sync", "arith.cmpi", "tile.elect", "arith.andi", "scf.if", "tile.mbarrier_arrive" })
    seq(ws1, { "value = 32 : i32", "tile.named_barrier_sync", "tile.elect", "scf.if", "tile.mbarrier_arrive" })
    for _, ir in ipairs { coop, ws, ws1 } do lacks(ir, "bar.warp.sync") end
    -- under an elect the one thread arrives for its warp: count 32
    local e = rel("cooperative", 4, true)
    seq(e, { "tile.elect", "value = 32 : i32", "tile.mbarrier_arrive %" })
    assert.truthy(e:find("tile%.mbarrier_arrive %%%d+, %%%d+"), "an arrive with a count")
  end)

  it("probes with test_wait, skips a wait when the try token is true, and gives the full barrier's address", function()
    local k = pipe_kernel("probes", {}, function(pipe, p)
      local st = pipe:producer_start()
      tl.elect_one(function()
        local ok = pipe:producer_try_acquire(st)
        pipe:producer_acquire(st, ok)
        tl.store(p.g, tl.ptr_to_int(pipe:full_barrier(st)))
      end)
    end, function(pipe)
      local st = pipe:consumer_start()
      local ok = pipe:consumer_try_wait(st)
      pipe:consumer_wait(st, ok)
    end)
    local _, ir = lower(k)
    assert.equal(2, count(ir, "tile.mbarrier_test_wait"))
    seq(ir, { "tile.mbarrier_test_wait", "arith.xori", "scf.if", "scf.while" })
    has(ir, "tile.ptr_to_int")
  end)

  it("drains with bulk wait_group 0 at the tail, or waits on every stage in cluster mode", function()
    local k = pipe_kernel("tail", {}, function(pipe)
      local st = pipe:producer_start()
      tl.elect_one(function() pipe:producer_tail(st) end)
    end, function() end)
    local _, ir = lower(k)
    has(ir, "tile.bulk_wait {pending = 0}")
    lacks(ir, "scf.for")
    local kc = build("tail_cluster", {}, function(k)
      local pipe = k:pipeline { stages = 3, producers = { { 0, 1 } }, consumers = { { 1, 1 } }, mode = "cluster" }
      k:async_exec("p", { first_warp = 0, warps = 1 }, function()
        local st = pipe:producer_start()
        pipe:producer_acquire(st)
        pipe:producer_tail(st)
      end)
      k:async_exec("c", { first_warp = 1, warps = 1 }, function() pipe:consumer_release(pipe:consumer_start()) end)
    end, { block = 64, cluster = { 2, 1, 1 } })
    local _, cir = lower(kc)
    -- the init syncs the cluster with the DSMEM handshake: the release fence,
    -- then a relaxed arrive, then the wait; one CTA (above) takes the bypass
    seq(cir, { "tile.fence_mbarrier_init", "tile.cluster_arrive {relaxed = true}", "tile.cluster_wait" })
    lacks(ir, "tile.cluster_arrive")
    seq(cir, { "scf.for", "nvvm.mbarrier.try_wait.parity.shared", "scf.yield", "tile.bulk_wait {pending = 0}" })
    -- the consumer warp arrives on the empty barrier of both CTAs of the
    -- cluster, lane r on CTA r, at the default .cta scope, and the producer
    -- waits at .cta scope: no .cluster anywhere (ptxas's MEMBAR.GPU per arrive)
    seq(cir, { "tile.lane_id", "predicate = \"ult\"", "scf.if", "tile.mapa", "tile.mbarrier_arrive" })
    assert.equal(1, count(cir, "tile.mapa"))
    assert.equal(1, count(cir, 'tile.mbarrier_arrive %'))
    lacks(cir, 'scope = "cluster"')
    lacks(cir, "tile.named_barrier_sync")
    ptx_of(kc)
    -- under an elect the elected lane arrives on each CTA in turn
    local ke = build("tail_cluster_elect", {}, function(k)
      local pipe = k:pipeline { stages = 3, producers = { { 0, 1 } }, consumers = { { 1, 2 } }, mode = "cluster" }
      k:async_exec("p", { first_warp = 0, warps = 1 }, function()
        local st = pipe:producer_start()
        pipe:producer_acquire(st)
        pipe:producer_tail(st)
      end)
      k:async_exec("c", { first_warp = 1, warps = 2 }, function()
        tl.elect_one(function() pipe:consumer_release(pipe:consumer_start()) end)
      end)
    end, { block = 96, cluster = { 2, 1, 1 } })
    local _, eir = lower(ke)
    assert.equal(2, count(eir, "tile.mapa"))
    assert.equal(2, count(eir, 'tile.mbarrier_arrive %'))
    lacks(eir, "tile.lane_id")
    lacks(eir, 'scope = "cluster"')
    has(eir, "value = 4 : i32") -- the empty barrier counts 2 consumer warps x 2 CTAs
    ptx_of(ke)
  end)

  it("turns switch_by_executor cases and async.exec bodies into scf.if on the warp index", function()
    local k = build("executors", { { "g", P(tl.i32) } }, function(k, p)
      local m0 = k:executor("m0", { first_warp = 1, warps = 2 })
      local m1 = k:executor("m1", { first_warp = 3, warps = 1 })
      k:async_exec("all", { first_warp = 0, warps = 4 }, function()
        k:async_exec("math", { first_warp = 1, warps = 3 }, function()
          tl.cutlass.switch_by_executor {
            { m0, { tl.const(5) }, function(v) tl.store(p.g, v) end },
            { m1, { tl.const(7) }, function(v) tl.store(p.g + 1, v) end },
          }
        end)
      end)
    end, { block = 128 })
    local _, ir = lower(k)
    lacks(ir, "cutlass.")
    seq(ir, { "tile.warp_id", "arith.subi", "arith.cmpi", "scf.if", -- math: warps [1, 4)
              "arith.cmpi", "scf.if", "tile.store", "arith.cmpi", "scf.if", "tile.store" })
    assert.equal(3, count(ir, "scf.if")) -- the exec over every warp needs none
    has(ir, "value = 5 : i32")
  end)
end)
-- }===================================================================

-- {===================================================================
describe("convert-cutlass-to-nvvm: seq_bar and async tokens", function()
  it("waits on slot index % depth with the cursor's phase, arrives and advances (phase flips on wrap)", function()
    local k = build("seq", {}, function(k)
      local bar = k:seq_bar { depth = 3, arrive_count = 64, barrier_id_base = 4 }
      k:async_exec("g", { first_warp = 0, warps = 2 }, function()
        local st = bar:state { index = 2, phase = 1 }
        bar:wait(st)
        bar:arrive(st)
        bar:wait(st)
      end)
    end, { block = 64 })
    local _, ir = lower(k, "")
    assert.equal(3, count(ir, "tile.mbarrier_init"))
    has(ir, "value = 64 : i32")
    seq(ir, { "nvvm.mbarrier.try_wait.parity.shared", "tile.mbarrier_arrive", "arith.select", "arith.xori",
              "nvvm.mbarrier.try_wait.parity.shared" })
    has(ir, "value = 65538 : i32") -- the start cursor: index 2 | phase 1 << 16
  end)

  -- The seq_bar contract "sequence-barrier arrive advances index and flips phase on wraparound" holds by
  -- construction of the lowering (seq_advance); this runs the lowered cursor arithmetic and
  -- fails if it ever stops flipping the phase on wrap.
  it("flips the cursor's phase exactly when an arrive wraps the index (run on the lowered IR)", function()
    local D, BASE, N = 3, 4, 10
    local k = build("seq_run", {}, function(k)
      local bar = k:seq_bar { depth = D, arrive_count = 64, barrier_id_base = BASE }
      k:async_exec("g", { first_warp = 0, warps = 2 }, function()
        local st = bar:state { index = 2, phase = 1 }
        tl.cutlass.for_range(0, N, { st }, function()
          bar:wait(st)
          bar:arrive(st)
        end)
      end)
    end, { block = 64 })
    local m = lower(k, "")
    local POOL, waits = 1 << 32, {}
    local eval = interp.memory()
    interp.run(kernel_of(m), {}, { eval = function(op, ins, env)
      local n = op:name()
      if n == "tile.thread_id" or n == "tile.warp_id" then return { 0 } end
      if n == "tile.alloc_shared" then return { POOL } end
      if n == "nvvm.mbarrier.try_wait.parity.shared" then
        waits[#waits + 1] = { (ins[1] - POOL) // 8 - BASE, ins[2] }
        return { 1 }
      end
      if n:match "^tile%.mbarrier" or n:match "^tile%.fence" or n == "tile.barrier" then return {} end
      return eval(op, ins, env)
    end })
    local want, index, phase = {}, 2, 1 -- the reference: advance the index, flip the phase on wrap
    for i = 1, N do
      want[i] = { index, phase }
      index = index + 1
      if index == D then index, phase = 0, phase ~ 1 end
    end
    assert.same(want, waits)
  end)

  it("lowers the async family: spins, bulk and wgmma commit + wait, nothing for none; bridges go", function()
    local m = assert(tl.parse(assert(H.slurp "spec/fixtures/valid/cutlass_async.tir")))
    tl.compile(m, "convert-cutlass-to-nvvm,dedupe-wait-groups")
    local ir = m:print()
    lacks(ir, "= cutlass.")
    lacks(ir, "cutlass.async.wait")
    seq(ir, { "tile.bulk_commit", "tile.bulk_wait {pending = 1}", "tile.bulk_wait {pending = 0}" }) -- wait, then the bulk future
    assert.equal(0, count(ir, "nvvm.wgmma")) -- gmma tokens from create_none wait on nothing
  end)

  it("waits on real tokens by flavour and keeps still-used bridges as unrealized casts", function()
    local m = assert(tl.parse [[
module {
  tile.kernel {arg_names = ["g", "m", "b"], kernel_spec = {block = [128, 1, 1]}, sym_name = "tok"} {
  ^bb0(%0: !cutlass.async_token<gmma>, %1: !cutlass.async_token<mbarrier>, %2: !cutlass.async_token<bulk>):
    %3 = tile.alloc_shared {count = 1} : ptr<i64, shared>
    %4 = arith.constant {value = 1 : i32} : i32
    cutlass.async.exec {agent = "a", executors = 15} {
      cutlass.async.wait %0 {pending = 2}
      cutlass.async.wait %1, %3, %4
      %5 = cutlass.async.token_to_async %1, %3, %4 : !cutlass.future<mbarrier>
      %6 = cutlass.async.to_async %5 : !cutlass.future<mbarrier>
      cutlass.async.future_wait %6
      %7 = cutlass.async.token_to_async %2 : !cutlass.future<bulk>
      cutlass.async.future_wait %7
    }
  }
}]])
    tl.compile(m, "convert-cutlass-to-nvvm")
    local ir = m:print()
    seq(ir, { "nvvm.wgmma.commit.group.sync.aligned", "nvvm.wgmma.wait.group.sync.aligned {group = 2}",
              "nvvm.mbarrier.try_wait.parity.shared", "nvvm.mbarrier.try_wait.parity.shared",
              "tile.bulk_wait {pending = 0}" })
    has(ir, "value = 10000000 : i32")
    has(ir, "value = 1048576 : i32") -- the future flavour's hint
    lacks(ir, "= cutlass.")
    lacks(ir, "  cutlass.")
  end)
end)
-- }===================================================================

-- {===================================================================
describe("convert-cutlass-to-nvvm: block_striped", function()
  local function striped(name, elem, shape, body, spec)
    return build(name, { { "g", P(elem) } }, function(k, p)
      body(p.g, tl.cutlass.fragment(elem, shape))
    end, spec)
  end

  it("moves 16-byte vector units in the striped mapping, backed by shared memory per thread", function()
    local k = striped("striped_vec", tl.i32, { 2, 4 }, function(g, f)
      tl.block_striped.load(g, f)
      tl.block_striped.load_add(g, f)
      tl.block_striped.store(g, f)
    end)
    local _, ir = lower(k)
    lacks(ir, "cutlass.")
    lacks(ir, "builtin.unrealized_conversion_cast")
    has(ir, "tile.alloc_shared {align = 16, count = 1024} : ptr<i32, shared>") -- 8 x 128 threads
    -- per unit: load 1 (global), load_add 2 loads + from_elements, store 1 (fragment)
    assert.equal(2 * (1 + 3 + 1), count(ir, ": vector<4xi32>"))
    seq(ir, { "tile.load", "tile.store", "tile.load", "tile.load", "tile.extract", "arith.addi",
              "tile.from_elements", "tile.store" })
    has(ir, "value = 128 : i32") -- unit u of thread t is global unit u * 128 + t
  end)

  it("uses single elements for rank-1 fragments and guards threads beyond `threads`", function()
    local k = striped("striped_scalar", tl.f32, { 3 }, function(g, f)
      tl.block_striped.store(g, f, { threads = 96 })
    end)
    local _, ir = lower(k)
    lacks(ir, "vector")
    seq(ir, { "value = 96 : i32", "arith.cmpi", "scf.if", "tile.load", "tile.store" })
    assert.equal(3, count(ir, "tile.store"))
  end)

  it("loops over the units when there are many", function()
    local k = striped("striped_loop", tl.i32, { 64 }, function(g, f) tl.block_striped.load(g, f) end)
    local _, ir = lower(k)
    seq(ir, { "scf.for", "tile.load", "tile.store", "scf.yield" })
  end)

  it("reduces with global atomics: integer add and max, f32 add, f32 max by CAS, f16/bf16 packed", function()
    local ki = striped("red_i32", tl.i32, { 4 }, function(g, f)
      tl.block_striped.reduce(g, f, { kind = "add" })
      tl.block_striped.reduce(g, f, { kind = "max" })
    end)
    local _, ir = lower(ki)
    has(ir, 'tile.atomic %')
    has(ir, '{kind = "add", scope = "gpu"}')
    has(ir, '{kind = "max", scope = "gpu"}')
    local kf = striped("red_f32", tl.f32, { 2 }, function(g, f)
      tl.block_striped.reduce(g, f, { kind = "add" })
      tl.block_striped.reduce(g, f, { kind = "max" })
    end)
    local _, fir = lower(kf)
    has(fir, '{kind = "add", scope = "gpu"}')
    seq(fir, { "scf.while", "arith.bitcast", "arith.maximumf", "arith.bitcast", "scf.if", "tile.atomic_cas" })
    local kh = striped("red_bf16", tl.bf16, { 2, 4 }, function(g, f) tl.block_striped.reduce(g, f) end)
    local _, hir = lower(kh)
    assert.equal(2 * 2, count(hir, "red.global.add.noftz.bf16x2 [$0], $1;")) -- 2 units x 2 pairs
    has(hir, "arith.shli")
    local ks = striped("red_f16", tl.f16, { 3 }, function(g, f) tl.block_striped.reduce(g, f) end)
    local _, sir = lower(ks)
    assert.equal(3, count(sir, "red.global.add.noftz.f16 [$0], $1;"))
  end)

  it("counts the stripe from the first thread of the op's executors", function()
    local k = build("striped_exec", { { "g", P(tl.i32) } }, function(k, p)
      k:async_exec("w", { first_warp = 2, warps = 2 }, function()
        tl.block_striped.load(p.g, tl.cutlass.fragment(tl.i32, { 2 }), { threads = 64 })
      end)
    end, { block = 128 })
    local _, ir = lower(k)
    has(ir, "value = 64 : i32") -- t = tid - 64
    seq(ir, { "arith.subi", "tile.ptr_add", "tile.load" })
  end)
end)
-- }===================================================================

-- {===================================================================
describe("convert-cutlass-to-nvvm: named and generic barriers, MODS", function()
  it("lowers cutlass.bar and named_barrier.arrive to bar.sync / bar.arrive with id and count", function()
    local k = build("named", {}, function(k)
      k:async_exec("a", { first_warp = 0, warps = 4 }, function()
        tl.bar(3, 128)
        tl.bar_arrive(4, 256)
      end)
    end, { block = 256 })
    local _, ir = lower(k)
    seq(ir, { "tile.named_barrier_sync", "tile.named_barrier_arrive" })
    has(ir, "value = 3 : i32")
    has(ir, "value = 256 : i32")
  end)

  it("spins (acquire) and increments (release) on global counters like CUTLASS's GenericBarrier", function()
    local k = build("generic", { { "lock", P(tl.i32) } }, function(k, p)
      tl.generic_barrier.wait_eq(p.lock, 1, 3)
      tl.generic_barrier.wait_eq_reset(p.lock, 2, 4)
      tl.generic_barrier.arrive_inc(p.lock, 1)
    end, { block = 128 })
    local _, ir = lower(k)
    -- wait: thread 0 spins on a volatile load, fences (acquire pattern), then the CTA syncs
    seq(ir, { "scf.if", "scf.while", "tile.load", "{volatile = true}", "scf.condition", "nvvm.nanosleep",
              'tile.fence {scope = "gpu"}', "tile.barrier" })
    -- reset: a CAS from the value to 0
    seq(ir, { "scf.while", "tile.atomic_cas", "tile.fence", "tile.barrier" })
    -- arrive: the CTA syncs, then thread 0 fences and adds (release pattern)
    seq(ir, { "tile.barrier", "scf.if", 'tile.fence {scope = "gpu"}', 'tile.atomic', '{kind = "add", scope = "gpu"}' })
    local ke = build("generic_exec", { { "lock", P(tl.i32) } }, function(k, p)
      k:async_exec("e", { first_warp = 2, warps = 2 }, function() tl.generic_barrier.arrive_inc(p.lock, 0) end)
    end, { block = 128 })
    local _, eir = lower(ke)
    seq(eir, { "value = 64 : i32", "tile.named_barrier_sync", "arith.cmpi", "scf.if", "tile.atomic" })
  end)

  it("opens and closes the MODS window on the cluster barrier, reads smid and throttles by profile", function()
    local k = build("mods", { { "o", P(tl.i64) } }, function(k, p)
      local sched = tl.op1("builtin.unrealized_conversion_cast", {}, tl.type("cutlass.tile_scheduler", { "data_parallel" }))
      k:async_exec("w", { first_warp = 0, warps = 4 }, function()
        local sm = tl.mods.smid()
        local d = tl.mods.mainloop(sched, 0x3, { timestamp = true, duration = true }, function()
          tl.mods.throttle(0)
          tl.mods.throttle(1)
          tl.mods.throttle(2)
        end)
        tl.store(p.o, d + sm:cast(tl.i64))
      end)
    end, { block = 128, cluster = { 2, 1, 1 } })
    local _, ir = lower(k)
    lacks(ir, "cutlass.")
    seq(ir, { "nvvm.read.ptx.sreg.smid", "tile.cluster_arrive", "nvvm.read.ptx.sreg.globaltimer",
              "nvvm.nanosleep", "tile.cluster_wait", "tile.cluster_arrive", -- profile 2: the cooperative rendezvous
              "tile.bulk_wait {pending = 0}", "tile.cluster_wait", "nvvm.read.ptx.sreg.globaltimer", "arith.subi" })
    has(ir, "value = 256 : i32") -- profile 1's nanosleep
    assert.equal(1, count(ir, "nvvm.nanosleep"))
  end)
end)
-- }===================================================================

-- {===================================================================
describe("convert-cutlass-to-nvvm: diagnostics", function()
  local function fails(pattern, k, pipeline)
    local m = k.module:clone()
    local ok, err = pcall(tl.compile, m, pipeline or "convert-cutlass-to-nvvm")
    assert.is_false(ok)
    assert.matches(pattern, err)
  end

  it("names tile scheduler ops (and where they are) and leaves them to lower-tile-scheduler", function()
    local k = build("sched", {}, function(k)
      tl.sched.data_parallel { tiles = { 4, 4, 1, 1 } }
    end)
    fails("pipeline_lowering_spec.lua:%d+: 'cutlass.tile_scheduler.create_dp_params' op is not lowered by convert%-cutlass%-to%-nvvm: "
            .. "tile scheduler ops are lowered by lower%-tile%-scheduler, which must run first", k)
  end)

  it("refuses inits that do not run on every warp", function()
    local k = build("init_exec", {}, function(k)
      k:async_exec("a", { first_warp = 0, warps = 1 }, function() k:seq_bar { depth = 1, arrive_count = 32 } end)
    end, { block = 64 })
    fails("'cutlass.seq_bar.init' op must run on every warp of the block", k)
  end)

  it("refuses a release under an elect for a participant of several warps (warp_specialized)", function()
    local k = pipe_kernel("release_elect", { mode = "warp_specialized", consumer_warps = 2 }, function() end, function(pipe)
      local st = pipe:consumer_start()
      tl.elect_one(function() pipe:consumer_release(st) end)
    end)
    fails("'cutlass.pipeline.consumer_release' op runs under an elect, but its participant's warps 0x6", k)
  end)

  it("refuses releases from warps that are not consumers", function()
    local k = pipe_kernel("release_stranger", {}, function(pipe)
      pipe:consumer_release(pipe:consumer_start())
    end, function() end)
    fails("'cutlass.pipeline.consumer_release' op runs on warps 0x1, none of which is a participant", k)
  end)

  it("refuses fragments it cannot back, stripes wider than the executors and reductions without an atomic", function()
    local k1 = build("frag_cast", { { "g", P(tl.i32) } }, function(k, p)
      local f = tl.op1("builtin.unrealized_conversion_cast", { p.g }, tl.memref(tl.i32, { 4 }, "rmem"))
      tl.block_striped.load(p.g, f)
    end)
    fails("needs its register fragment %(operand #1%) straight from a zero%-operand builtin.unrealized_conversion_cast", k1)
    local k2 = build("frag_wide", { { "g", P(tl.i32) } }, function(k, p)
      k:async_exec("a", { first_warp = 0, warps = 2 }, function()
        tl.block_striped.load(p.g, tl.cutlass.fragment(tl.i32, { 2 }), { threads = 128 })
      end)
    end)
    fails("stripes over 128 threads, but its executors 0x3 have 64", k2)
    local k3 = build("frag_max", { { "g", P(tl.bf16) } }, function(k, p)
      tl.block_striped.reduce(p.g, tl.cutlass.fragment(tl.bf16, { 2 }), { kind = "max" })
    end)
    fails("cannot reduce %(max%) bf16 elements", k3)
  end)

  it("refuses a MODS duration without the start's timestamp", function()
    local k = build("mods_dur", {}, function(k)
      local sched = tl.op1("builtin.unrealized_conversion_cast", {}, tl.type("cutlass.tile_scheduler", { "data_parallel" }))
      k:async_exec("w", { first_warp = 0, warps = 4 }, function()
        local m = tl.const(1, tl.i64)
        tl.op("cutlass.tile_scheduler.mods_report_mainloop_start", { sched, m }, {}, { is_2cta_mma = false })
        tl.op("cutlass.tile_scheduler.mods_report_mainloop_end", { sched, m }, { tl.i64 }, { is_2cta_mma = false })
      end)
    end)
    fails("returns the window's duration, which needs the start's timestamp", k)
  end)
end)
-- }===================================================================

-- {===================================================================
describe("dedupe-wait-groups", function()
  it("keeps one wait per flavour where an earlier one covers the later ones", function()
    local k = build("dedupe", {}, function()
      tl.bulk_wait(1)
      tl.bulk_wait(1)
      tl.bulk_wait(2)  -- covered by wait 1
      tl.bulk_wait(0)  -- stronger: stays
      tl.bulk_commit() -- a new group: the next wait is needed
      tl.bulk_wait(0)
      tl.bulk_wait(0, { read = true }) -- covered by the full wait
      tl.if_(tl.thread_id():eq(0), function()
        tl.bulk_wait(0) -- another block starts afresh
        tl.bulk_wait(0)
      end)
    end)
    local m = k.module:clone()
    tl.compile(m, "dedupe-wait-groups")
    local ir = m:print()
    assert.equal(4, count(ir, "tile.bulk_wait"))
    seq(ir, { "tile.bulk_wait {pending = 1}", "tile.bulk_wait {pending = 0}", "tile.bulk_commit",
              "tile.bulk_wait {pending = 0}", "scf.if", "tile.bulk_wait {pending = 0}", "scf.yield" })
    lacks(ir, "pending = 2")
    lacks(ir, "read = true")
  end)

  it("does not let a wait for reads cover a full wait, and treats wgmma waits apart", function()
    local k = build("dedupe2", {}, function()
      tl.bulk_wait(0, { read = true })
      tl.bulk_wait(0)
      tl.op("nvvm.wgmma.wait.group.sync.aligned", {}, {}, { group = 1 })
      tl.op("nvvm.wgmma.wait.group.sync.aligned", {}, {}, { group = 1 })
      tl.bulk_wait(0)
    end)
    local m = k.module:clone()
    tl.compile(m, "dedupe-wait-groups")
    local ir = m:print()
    assert.equal(2, count(ir, "tile.bulk_wait"))
    assert.equal(1, count(ir, "nvvm.wgmma.wait.group.sync.aligned"))
  end)

  it("runs right after convert-cutlass-to-nvvm in the ptx pipeline", function()
    local found
    for _, p in ipairs(tl.core.pipelines and tl.core.pipelines() or {}) do
      if p.name == "ptx" then found = p.passes end
    end
    if not found then
      local out = H.tilua_run { "opt", "--list-passes" }
      found = out
    end
    has(found, "convert-cutlass-to-nvvm,dedupe-wait-groups,convert-tile-to-nvvm")
  end)
end)
-- }===================================================================

-- {===================================================================
-- A CPU model of the lowered protocol. Every thread of every CTA runs the
-- kernel (as convert-cutlass-to-nvvm left it: tile + nvvm + arith + scf) in a
-- coroutine through tilua.emulate.interp; a random scheduler switches threads at every
-- memory and barrier op. mbarriers follow the PTX semantics (pending arrivals
-- and a transaction count; a phase completes when both reach 0; try_wait with
-- parity p succeeds once the current phase's parity differs from p); bulk
-- copies complete at random later times. A wrong parity shows as a deadlock,
-- a wrong arrive count as an over-arrival or as data read before it was
-- written or after it was overwritten.
local function simulate(kop, o)
  local rng_state = o.seed or 1
  local function rnd(n) -- xorshift; n: 1..n, or [0, 1)
    rng_state = rng_state ~ (rng_state << 13) & 0xFFFFFFFF
    rng_state = rng_state ~ (rng_state >> 17)
    rng_state = rng_state ~ (rng_state << 5) & 0xFFFFFFFF
    if n then return rng_state % n + 1 end
    return (rng_state % 1000) / 1000
  end
  local block = kop:attr("kernel_spec").block[1]
  local mem_eval, mem = interp.memory(o.mem)
  local starts, nextw = {}, 0
  local function walk(b)
    for _, op in ipairs(b:ops()) do
      if op:name() == "tile.agent" then
        local w = op:attr("warp_id") or nextw
        starts[op:id()] = w
        nextw = w + op:attr("num_warps")
      end
      for r = 1, op:nregions() do
        for _, bb in ipairs(op:region(r):blocks()) do walk(bb) end
      end
    end
  end
  walk(kop:region(1):entry())
  local ctas, asyncs, cur, idle = {}, {}, nil, 0

  local function bar(a)
    local b = ctas[cur.cta].bars[a]
    if not b then error(("mbarrier at %d used before its init"):format(a)) end
    return b
  end
  local function complete(b)
    if b.pending == 0 and b.tx == 0 then b.phase, b.pending = b.phase ~ 1, b.count end
  end
  local function arrive(b, n)
    b.pending = b.pending - (n or 1)
    if b.pending < 0 then error("over-arrival on an mbarrier") end
    complete(b)
  end
  local function maybe_yield() if rnd() < 0.3 then coroutine.yield() end end
  local function sync(key, n)
    local c = ctas[cur.cta]
    local s = c.syncs[key] or { n = 0, gen = 0 }
    c.syncs[key] = s
    local gen = s.gen
    s.n = s.n + 1
    if s.n == n then
      s.n, s.gen = 0, gen + 1
      return
    end
    while s.gen == gen do
      idle = idle + 1
      coroutine.yield()
    end
  end
  local function esize(t) return math.max(1, (t:info().width or 64) // 8) end
  local E = {
    ["tile.thread_id"] = function() return { cur.tid } end,
    ["tile.block_id"] = function() return { cur.cta } end,
    ["tile.grid_dim"] = function() return { o.ctas } end,
    ["tile.warp_id"] = function() return { cur.tid // 32 } end,
    ["tile.lane_id"] = function() return { cur.tid % 32 } end,
    ["tile.elect"] = function() return { cur.tid % 32 == 0 and 1 or 0 } end,
    ["tile.elect_one"] = function(op, _, env)
      if cur.tid % 32 == 0 then env:block(op:region(1):entry()) end
      return {}
    end,
    ["tile.agent"] = function(op, _, env)
      local w, f = cur.tid // 32, starts[op:id()]
      if w >= f and w < f + op:attr("num_warps") then
        local outer = cur.agent
        cur.agent = f
        env:block(op:region(1):entry())
        cur.agent = outer
      end
      return {}
    end,
    ["tile.agent_thread_id"] = function() return { cur.tid - 32 * cur.agent } end,
    ["tile.agent_warp_id"] = function() return { cur.tid // 32 - cur.agent } end,
    ["tile.alloc_shared"] = function(op)
      local t = op:result(1):type():info()
      local n = t.kind == "ptr" and op:attr("count") or 1
      if t.kind == "memref" then for _, d in ipairs(t.shape) do n = n * d end end
      local al = op:attr("align") or 16
      local at = (cur.alloc + al - 1) // al * al
      cur.alloc = at + n * esize(t.elem)
      return { cur.smem + at }
    end,
    ["tile.memref_ptr"] = function(op, ins)
      local t = op:operand(1):type():info()
      local idx, stride = 0, 1
      for i = #t.shape, 1, -1 do
        idx = idx + (ins[i + 1] or 0) * stride
        stride = stride * t.shape[i]
      end
      return { ins[1] + idx * esize(t.elem) }
    end,
    ["tile.mbarrier_init"] = function(_, ins)
      ctas[cur.cta].bars[ins[1]] = { phase = 0, pending = ins[2], count = ins[2], tx = 0 }
      return {}
    end,
    ["tile.mbarrier_arrive"] = function(_, ins) maybe_yield() arrive(bar(ins[1]), ins[2]) return {} end,
    ["tile.mbarrier_arrive_expect_tx"] = function(_, ins)
      maybe_yield()
      local b = bar(ins[1])
      b.tx = b.tx + ins[2]
      arrive(b)
      return {}
    end,
    ["tile.mbarrier_expect_tx"] = function(_, ins)
      local b = bar(ins[1])
      b.tx = b.tx + ins[2]
      return {}
    end,
    ["nvvm.mbarrier.try_wait.parity.shared"] = function(_, ins)
      if bar(ins[1]).phase ~= ins[2] then return { 1 } end
      idle = idle + 1
      coroutine.yield()
      return { 0 }
    end,
    ["tile.mbarrier_test_wait"] = function(_, ins) return { bar(ins[1]).phase ~= ins[2] and 1 or 0 } end,
    ["tile.bulk_copy_g2s"] = function(_, ins)
      asyncs[#asyncs + 1] = { cta = cur.cta, dst = ins[1], src = ins[2], bytes = ins[3], bar = ins[4] }
      return {}
    end,
    ["tile.barrier"] = function() sync("cta", block) return {} end,
    ["tile.named_barrier_sync"] = function(_, ins) sync("named" .. ins[1], ins[2]) return {} end,
    ["tile.mapa"] = function(_, ins) return { ins[1] } end,
  }
  for _, n in ipairs { "tile.fence_mbarrier_init", "tile.fence", "tile.fence_proxy_async", "tile.bulk_commit", "tile.bulk_wait", "nvvm.nanosleep" } do
    E[n] = function() maybe_yield() return {} end
  end
  local function eval(op, ins, env)
    local f = E[op:name()]
    if f then
      local r = f(op, ins, env)
      if op:name() ~= "nvvm.mbarrier.try_wait.parity.shared" or r[1] == 1 then idle = 0 end
      return r
    end
    local r = mem_eval(op, ins)
    if r then
      idle = 0
      maybe_yield()
    end
    return r
  end
  local threads = {}
  for c = 0, o.ctas - 1 do
    ctas[c] = { bars = {}, syncs = {} }
    for t = 0, block - 1 do
      local th = { cta = c, tid = t, alloc = 0, smem = (c + 1) << 32 }
      th.co = coroutine.create(function() interp.run(kop, o.args, { eval = eval, max_steps = 1e5 }) end)
      threads[#threads + 1] = th
    end
  end
  while #threads > 0 do
    if #asyncs > 0 and rnd() < 0.2 then -- a bulk copy lands: data, then complete_tx
      local a = table.remove(asyncs, rnd(#asyncs))
      for i = 0, a.bytes // 4 - 1 do mem[a.dst + 4 * i] = mem[a.src + 4 * i] end
      local b = ctas[a.cta].bars[a.bar]
      b.tx = b.tx - a.bytes
      complete(b)
      idle = 0
    end
    local i = rnd(#threads)
    local th = threads[i]
    cur = th
    local ok, err = coroutine.resume(th.co)
    if not ok then error(("CTA %d thread %d: %s"):format(th.cta, th.tid, tostring(err)), 0) end
    if coroutine.status(th.co) == "dead" then table.remove(threads, i) end
    if idle > 400 * #threads + 1000 and #asyncs == 0 then
      local who = {}
      for _, t in ipairs(threads) do who[#who + 1] = ("%d.%d"):format(t.cta, t.tid) end
      error(("deadlock: %d threads wait forever (%s)"):format(#threads, table.concat(who, " ", 1, math.min(#who, 8))), 0)
    end
  end
  return mem
end

-- The ring of a pipeline: a producer thread fills S stages of 32 * W i32 (with
-- stores, or with a bulk copy completing on the full barrier), W consumer warps
-- drain them.
local function ring_kernel(mode, tma, W, S, N)
  return build("ring_" .. mode .. (tma and "_tma" or ""), { { "src", P(tl.i32) }, { "dst", P(tl.i32) } }, function(k, p)
    local E = 32 * W
    local ring = k:shared(tl.i32, { S, E })
    local pipe = k:pipeline { stages = S, producers = { { 0, 1 } }, consumers = { { 1, W } },
                              transaction_bytes = tma and 4 * E or nil, mode = mode }
    k:agent("producer", { warps = 1 }, function()
      local st = pipe:producer_start()
      tl.elect_one(function()
        tl.cutlass.for_range(tl.const(0, tl.i32), N, { st }, function(c)
          pipe:producer_acquire(st)
          if tma then
            tl.bulk_copy(ring:ptr(st:index()), p.src + c * E, 4 * E, pipe:full_barrier(st))
            pipe:producer_commit(st)
          else
            tl.for_range(tl.const(0, tl.i32), E, function(j) tl.store(ring:ptr(st:index(), j), (p.src + (c * E + j)):load()) end)
            pipe:producer_commit(st, 0)
          end
          st:advance()
        end)
        pipe:producer_tail(st)
      end)
    end)
    k:agent("consumer", { warps = W }, function(a)
      local t = a:thread_id()
      local st = pipe:consumer_start()
      tl.cutlass.for_range(tl.const(0, tl.i32), N, { st }, function(c)
        pipe:consumer_wait(st)
        tl.store(p.dst + (c * E + t), ring:ptr(st:index(), t):load())
        pipe:consumer_release(st)
        st:advance()
      end)
    end)
  end, { block = 32 * (1 + W) })
end

describe("the lowered protocol on a CPU model (random schedules)", function()
  for _, case in ipairs {
    { "cooperative", false, 2, 2, 5 }, { "warp_specialized", false, 2, 3, 7 },
    { "cooperative", true, 1, 2, 6 }, { "strided_urem", true, 2, 2, 5 },
  } do
    local mode, tma, W, S, N = table.unpack(case)
    it(("moves every element through a %d-stage ring exactly once (%s, %s producer, %d consumer warps)"):format(
      S, mode, tma and "bulk-copy" or "store", W), function()
      local k = ring_kernel(mode, tma, W, S, N)
      local m = lower(k, "")
      local E = 32 * W
      for seed = 1, 3 do
        local mem = {}
        for i = 0, N * E - 1 do mem[0x10000 + 4 * i] = i * 7 + seed end
        simulate(kernel_of(m), { ctas = 1, args = { 0x10000, 0x80000 }, mem = mem, seed = seed * 7919 })
        for i = 0, N * E - 1 do
          assert.equal(i * 7 + seed, mem[0x80000 + 4 * i], ("element %d (seed %d)"):format(i, seed))
        end
      end
      ptx_of(k)
    end)
  end

  it("deadlocks when a wait uses the wrong parity (the model can tell)", function()
    local k = ring_kernel("cooperative", false, 1, 2, 3)
    local m = lower(k, "")
    -- flip the consumer's parity: replace the first xori-free wait's parity by phase ^ 1
    local kop = kernel_of(m)
    local flipped = false
    kop:walk(function(op)
      if not flipped and op:name() == "nvvm.mbarrier.try_wait.parity.shared" then
        local d = op:operand(2):def()
        if d and d:name() == "arith.xori" then -- the producer's phase ^ 1: use the phase itself
          op:set_operand(2, d:operand(1))
          flipped = true
        end
      end
    end)
    assert.is_true(flipped)
    local mem = {}
    for i = 0, 3 * 32 - 1 do mem[0x10000 + 4 * i] = i end
    local ok, err = pcall(simulate, kop, { ctas = 1, args = { 0x10000, 0x80000 }, mem = mem, seed = 5 })
    assert.is_false(ok)
    assert.matches("deadlock", err)
  end)

  it("alternates two warpgroups strictly through two depth-1 seq_bars", function()
    local R = 6
    local k = build("pingpong_sim", { { "log", P(tl.i32) }, { "n", P(tl.i32) } }, function(k, p)
      local goA = k:seq_bar { depth = 1, arrive_count = 32 }
      local goB = k:seq_bar { depth = 1, arrive_count = 32 }
      for g = 0, 1 do
        local mine, other = g == 0 and goA or goB, g == 0 and goB or goA
        k:async_exec(g == 0 and "A" or "B", { first_warp = g, warps = 1 }, function()
          local st = mine:state { phase = 1 - g }
          tl.cutlass.for_range(0, R, { st }, function(i)
            mine:wait(st)
            tl.if_(tl.lane_id():eq(0), function()
              local pos = tl.atomic_add(p.n, 1)
              tl.store(p.log + pos, tl.const(g * 100, tl.i32) + i:cast(tl.i32))
            end)
            other:arrive(st)
          end)
        end)
      end
    end, { block = 64 })
    local m = lower(k, "")
    for seed = 1, 3 do
      local mem = { [0x100] = 0 }
      simulate(kernel_of(m), { ctas = 1, args = { 0x1000, 0x100 }, mem = mem, seed = seed * 31 })
      assert.equal(2 * R, mem[0x100])
      for j = 0, 2 * R - 1 do assert.equal((j % 2) * 100 + j // 2, mem[0x1000 + 4 * j]) end
    end
    ptx_of(k)
  end)

  it("chains split partials through generic barriers and reduces them with block_striped atomics", function()
    local SPLITS, T, U = 3, 64, 2
    local k = build("chain_sim", { { "src", P(tl.i32) }, { "sum", P(tl.i32) }, { "mx", P(tl.i32) },
                                  { "chain", P(tl.i32) }, { "flags", P(tl.i32) } }, function(k, p)
      local split = tl.block_id()
      local frag = tl.cutlass.fragment(tl.i32, { U })
      tl.block_striped.load(p.src + split * (T * U), frag)
      tl.block_striped.reduce(p.sum, frag, { kind = "add" })
      tl.block_striped.reduce(p.mx, frag, { kind = "max" })
      tl.if_(split:gt(0), function()
        tl.if_(split:eq(SPLITS - 1), function() tl.generic_barrier.wait_eq_reset(p.flags, 0, split) end,
                                     function() tl.generic_barrier.wait_eq(p.flags, 0, split) end)
        tl.block_striped.load_add(p.chain, frag)
      end)
      tl.block_striped.store(p.chain, frag)
      tl.if_(split:lt(SPLITS - 1), function() tl.generic_barrier.arrive_inc(p.flags, 0) end)
    end, { block = T })
    local m = lower(k, "")
    for seed = 1, 2 do
      local mem, S, MX, C, F = {}, 0x100000, 0x200000, 0x300000, 0x400000
      mem[F] = 0
      for i = 0, T * U - 1 do
        mem[S + 4 * i], mem[MX + 4 * i], mem[C + 4 * i] = 0, -1000000, -1
        for s = 0, SPLITS - 1 do mem[0x10000 + 4 * (s * T * U + i)] = (i * 13 + s * 101 + seed) % 97 - 40 end
      end
      simulate(kernel_of(m), { ctas = SPLITS, args = { 0x10000, S, MX, C, F }, mem = mem, seed = seed * 13 })
      for i = 0, T * U - 1 do
        local total, best = 0, -1000000
        for s = 0, SPLITS - 1 do
          local v = mem[0x10000 + 4 * (s * T * U + i)]
          total, best = total + v, math.max(best, v)
        end
        assert.equal(total, mem[S + 4 * i])
        assert.equal(best, mem[MX + 4 * i])
        assert.equal(total, mem[C + 4 * i])
      end
      assert.equal(0, mem[F]) -- the last split reset the counter
    end
    ptx_of(k)
  end)
end)
-- }===================================================================

-- {===================================================================
describe("the whole ptx pipeline", function()
  it("compiles the lowered fixtures' kernels and the examples' patterns to PTX", function()
    for _, mode in ipairs { "cooperative", "warp_specialized", "strided_udiv" } do
      ptx_of(pipe_kernel("ptx_" .. mode, { mode = mode, tx = 4096, stages = 3 }, function(pipe, p)
        local st = pipe:producer_start()
        tl.elect_one(function()
          tl.cutlass.for_range(0, 8, { st }, function()
            pipe:producer_acquire(st)
            local _ = pipe:full_barrier(st)
            pipe:producer_commit(st)
            st:advance()
          end)
          pipe:producer_tail(st)
        end)
      end, function(pipe)
        local st = pipe:consumer_start()
        tl.cutlass.for_range(0, 8, { st }, function()
          pipe:consumer_wait(st)
          pipe:consumer_release(st)
          st:advance()
        end)
      end))
    end
    for _, f in ipairs { "cutlass_seq_bar", "cutlass_block_striped", "cutlass_barrier", "cutlass_pipeline" } do
      local m = assert(tl.parse(assert(H.slurp("spec/fixtures/valid/" .. f .. ".tir"))))
      tl.compile(m, "ptx")
      emitted[#emitted + 1] = { f, tl.emit_ptx(m) }
    end
  end)

  -- Every valid fixture lowers through the `ptx` pipeline and emits PTX (kept
  -- for ptxas below), or is listed as authoring-only with the reason the
  -- lowering gives.
  local authoring_only = {
    ["cutlass_sched.tir"] = "needs compile%-time constant tiles_m",       -- runtime StreamK operands
    ["cutlass_sched_sm100.tir"] = "needs compile%-time constant tiles_m", -- the same, sm100 form
  }
  -- lowers, but has no PTX form: its kernel takes async tokens as parameters
  local not_emittable = { ["cutlass_async.tir"] = "parameter #0 has type !cutlass.async_token<bulk>",
    -- a tile program: tile-to-ptx lowers it; -p ptx leaves its ops, which the emitter refuses
    ["tileas.tir"] = "parameter #0 has type !tileas.tensor<bf16, 2>",
    ["tileas_fp8_batched.tir"] = "parameter #0 has type !tileas.tensor<i8, 3>" }
  for _, f in ipairs(H.files("spec/fixtures/valid", "%.tir$")) do
    local base = f:match "[^/]+$"
    it("lowers the valid fixture " .. base .. " through -p ptx", function()
      local out, err, code = H.tilua_run { "opt", f, "-p", "ptx" }
      if authoring_only[base] then
        assert.equal(1, code)
        assert.matches(authoring_only[base], err)
      else
        assert.equal(0, code, err)
        local m = assert(tl.parse(out))
        local ok, ptx = pcall(tl.emit_ptx, m)
        if not_emittable[base] then
          assert.is_false(ok)
          assert.truthy(tostring(ptx):find(not_emittable[base], 1, true), ptx)
        else
          assert(ok, ptx)
          emitted[#emitted + 1] = { base, ptx }
        end
      end
    end)
  end

  it("assembles every PTX of this spec with ptxas -arch=sm_90a", function()
    local any
    for _, e in ipairs(emitted) do
      local ok, log = tl.ptxas(e[2])
      if ok == nil then pending("ptxas not found: " .. log) return end
      assert(ok, e[1] .. ":\n" .. log)
      any = true
    end
    assert.is_true(any)
  end)
end)
-- }===================================================================

