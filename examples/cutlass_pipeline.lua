-- cutlass_pipeline.lua: the orchestration skeleton of a warp-specialized,
-- StreamK-scheduled GEMM mainloop, built with the cutlass dialect.
--
--   warps 0-3   "load":  the producer; fills a 4-stage pipeline (an elected
--                         thread's bulk copy of each k step's A and B tiles,
--                         standing in for TMA, completes on the stage's full barrier)
--   warps 4-7   "math0": consumer warpgroup 0   } take turns through two
--   warps 8-11  "math1": consumer warpgroup 1   } seq_bars (ping-pong)
--
-- A StreamK tile scheduler hands out the work, the mainloop runs inside a MODS
-- window, partial tiles go through the StreamK fixup and are stored with
-- block-striped stores. The script verifies the kernel, prints its IR and
-- compiles it to PTX (which ptxas assembles, when it is installed); its
-- barrier protocol checks clean on the CPU emulator (spec/protocol_spec.lua,
-- docs/protocol.md).
-- Run: tilua examples/cutlass_pipeline.lua [--emit=ir|ptx] [--stage=NAME]
--   loadfile("examples/cutlass_pipeline.lua")("--library") -> { kernel = the kernel,
--     args(k_tiles) = arguments for tl.emulate / tl.verify_protocol on one cluster }

local tl = require "tilua"

local STAGES = 4
local TILE_BYTES = 32768 -- A and B tiles of one k step, loaded by TMA
local ACC = 64           -- accumulator fragment per thread (f32)

-- The worker id: workers are clusters (the StreamK plan counts them; both
-- CTAs of a cluster share a work unit, each computes half of its tile).
local function worker_id() return tl.block_id() // 2 end

-- A register fragment (memref in rmem): a stand-in until the tile dialect
-- allocates register memory.
local function fragment(elem, n)
  return tl.op1("builtin.unrealized_conversion_cast", {}, tl.memref(elem, { n }, "rmem"))
end

-- The kernel. sizes nil: the tile counts, the k steps and the workers are its
-- parameters (the kernel the emulator and the protocol checker run, for any
-- problem); else {tiles_m =, tiles_n =, k_tiles =, workers =}, constants: a
-- StreamK plan is made on the host, so only such a kernel compiles to PTX.
local function build(sizes)
  local gemm = tl.kernel("ws_streamk_mainloop", {
    params = {
      { "out", tl.ptr(tl.f32) }, { "c", tl.ptr(tl.f32) }, { "workspace", tl.ptr(tl.i8) }, { "tiles", tl.ptr(tl.u8) },
      { "tiles_m", tl.i32 }, { "tiles_n", tl.i32 }, { "k_tiles", tl.i32 }, { "workers", tl.i32 },
    },
    block = 384,
    cluster = { 2, 1, 1 },
  })

  gemm:define(function(k, p)
    local n = sizes or { tiles_m = p.tiles_m, tiles_n = p.tiles_n, k_tiles = p.k_tiles, workers = p.workers }
    local load = k:executor("load", { first_warp = 0, warps = 4 })
    local math0 = k:executor("math0", { first_warp = 4, warps = 4 })
    local math1 = k:executor("math1", { first_warp = 8, warps = 4 })

    local ring = k:shared(tl.u8, { STAGES, TILE_BYTES }, { align = 128 })
    local pipe = k:pipeline { stages = STAGES, producers = { load }, consumers = { math0, math1 },
                              transaction_bytes = TILE_BYTES }
    -- the ping-pong: math0 may go on go0, math1 on go1; each hands over to the other
    local go0 = k:seq_bar { depth = 1, arrive_count = 128 }
    local go1 = k:seq_bar { depth = 1, arrive_count = 128 }
    local sched = tl.sched.streamk {
      tiles = { n.tiles_m, n.tiles_n, 1, n.k_tiles }, workers = n.workers, workspace = p.workspace,
      cluster = { 2, 1, 1 }, accumulator_tile_bytes = 128 * ACC * 4,
    }
    sched:workspace_sizes { total_bytes = 131200, reduction_bytes = 131072, barrier_bytes = 64 }
    local worker = worker_id()

    -- The producer: acquire an empty stage, let TMA fill it, commit the bytes.
    load:exec(function()
      local st = pipe:producer_start()
      local work = sched:work(worker)
      tl.mods.mainloop(sched, 0x3, { timestamp = true }, function()
        tl.if_(work:is_valid(), function() -- a worker past the last unit has none
          tl.cutlass.for_range(0, n.k_tiles, 1, { st }, function(kk)
            pipe:producer_acquire(st)
            local full = pipe:full_barrier(st) -- the copy of this stage completes here
            tl.if_(tl.warp_id():eq(0), function()
              tl.elect_one(function()
                tl.bulk_copy(ring:ptr(st:index()), p.tiles + kk:cast(tl.i64) * TILE_BYTES, TILE_BYTES, full)
              end)
            end)
            pipe:producer_commit(st, TILE_BYTES)
            st:advance()
          end)
          pipe:producer_tail(st)
        end)
      end)
      work:advance()
    end)

    -- One math warpgroup: wait for its turn (on `mine`) and a full stage,
    -- compute, release, hand the turn over (on `other`, with the same cursor).
    local function mainloop(st, mine, other, turn)
      tl.cutlass.for_range(0, n.k_tiles, 1, { st, turn }, function()
        mine:wait(turn)
        pipe:consumer_wait(st)
        tl.mods.throttle(1)
        pipe:consumer_release(st)
        st:advance()
        other:arrive(turn)
      end)
    end

    k:async_exec("math", { first_warp = 4, warps = 8 }, function()
      local st = pipe:consumer_start()
      local work = sched:work(worker)
      local smid = tl.mods.smid()
      local valid = work:is_valid()
      tl.mods.mainloop(sched, 0x3, {}, function()
        tl.if_(valid, function()
          tl.cutlass.switch_by_executor {
            -- math0 goes first: its cursor starts with the phase flipped
            { math0, { st }, function(s) mainloop(s, go0, go1, go0:state { phase = 1 }) end },
            { math1, { st }, function(s) mainloop(s, go1, go0, go1:state { phase = 0 }) end },
          }
        end)
      end)
      tl.bar(1, 256) -- both math warpgroups finished the mainloop
      tl.if_(valid, function()
        -- this CTA's half of the cluster's tile: 256 threads' fragments of ACC
        local part = (work:tile_idx() * 2 + tl.cluster_rank()) * (256 * ACC)
        local acc = fragment(tl.f32, ACC)
        -- the accumulators start from C's tile (a stand-in for the wgmma that a
        -- real mainloop runs into them; an unwritten fragment is garbage)
        tl.block_striped.load(p.c + part, acc, { threads = 256 })
        local owner = sched:fixup(work, acc) -- true: this CTA owns the finished tile
        tl.if_(owner, function() tl.block_striped.store(p.out + part, acc, { threads = 256 }) end)
      end)
      local _ = smid
    end)
  end)
  return gemm
end

-- The arguments for `workers` clusters (grid 2 * workers) over one 1 x 1
-- tile of k_tiles k steps.
local example = { build = build }
function example.args(k_tiles, workers)
  local part = 2 * 256 * ACC * 4
  return { { bytes = part }, { bytes = part }, { bytes = 131200 }, { bytes = k_tiles * TILE_BYTES }, 1, 1, k_tiles, workers or 1 }
end
if ... == "--library" then
  example.kernel = build()
  return example
end
-- 4 x 4 tiles of 16 k steps on 8 clusters
local gemm = build { tiles_m = 4, tiles_n = 4, k_tiles = 16, workers = 8 }
print(gemm.module:print())
require("tilua.gpu.check").compile("cutlass_pipeline", gemm)
