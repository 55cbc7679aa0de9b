-- cutlass_pipeline.lua: the orchestration skeleton of a warp-specialized,
-- StreamK-scheduled GEMM mainloop, built with the cutlass dialect.
--
--   warps 0-3   "load":  the producer; fills a 4-stage pipeline (TMA bytes
--                         complete on each stage's full barrier)
--   warps 4-7   "math0": consumer warpgroup 0   } take turns through an
--   warps 8-11  "math1": consumer warpgroup 1   } ordered seq_bar (ping-pong)
--
-- A StreamK tile scheduler hands out the work, the mainloop runs inside a MODS
-- window, partial tiles go through the StreamK fixup and are stored with
-- block-striped stores. The script verifies the kernel and prints its IR.
-- Run: tilua examples/cutlass_pipeline.lua

local tl = require "tilua"

local STAGES = 4
local TILE_BYTES = 32768 -- A and B tiles of one k step, loaded by TMA
local ACC = 64           -- accumulator fragment per thread (f32)

local gemm = tl.kernel("ws_streamk_mainloop", {
  params = {
    { "out", tl.ptr(tl.f32) }, { "workspace", tl.ptr(tl.i8) },
    { "tiles_m", tl.i32 }, { "tiles_n", tl.i32 }, { "k_tiles", tl.i32 }, { "workers", tl.i32 },
  },
  block = 384,
  cluster = { 2, 1, 1 },
})

-- The CTA's worker id: the block index once the tile dialect has it.
local function worker_id()
  if tl.core.op_info("tile.block_id") then return tl.op1("tile.block_id", {}, tl.i32, { dim = "x" }) end
  return tl.const(0)
end

-- A register fragment (memref in rmem): a stand-in until the tile dialect
-- allocates register memory.
local function fragment(elem, n)
  return tl.op1("builtin.unrealized_conversion_cast", {}, tl.memref(elem, { n }, "rmem"))
end

gemm:define(function(k, p)
  local load = k:executor("load", { first_warp = 0, warps = 4 })
  local math0 = k:executor("math0", { first_warp = 4, warps = 4 })
  local math1 = k:executor("math1", { first_warp = 8, warps = 4 })

  local pipe = k:pipeline { stages = STAGES, producers = { load }, consumers = { math0, math1 },
                            transaction_bytes = TILE_BYTES }
  local order = k:seq_bar { depth = 2, arrive_count = 128 }
  local sched = tl.sched.streamk {
    tiles = { p.tiles_m, p.tiles_n, 1, p.k_tiles }, workers = p.workers, workspace = p.workspace,
    cluster = { 2, 1, 1 }, accumulator_tile_bytes = 128 * ACC * 4,
  }
  sched:workspace_sizes { total_bytes = 131200, reduction_bytes = 131072, barrier_bytes = 64 }
  local worker = worker_id()

  -- The producer: acquire an empty stage, let TMA fill it, commit the bytes.
  load:exec(function()
    local st = pipe:producer_start()
    local work = sched:work(worker)
    tl.mods.mainloop(sched, 0x3, { timestamp = true }, function()
      tl.cutlass.for_range(0, p.k_tiles, 1, { st }, function()
        pipe:producer_acquire(st)
        local _ = pipe:full_barrier(st) -- the TMA copies of this stage complete here
        pipe:producer_commit(st, TILE_BYTES)
        st:advance()
      end)
      pipe:producer_tail(st)
    end)
    work:advance()
  end)

  -- One math warpgroup: wait for its turn and a full stage, compute, release.
  local function mainloop(st, turn)
    tl.cutlass.for_range(0, p.k_tiles, 1, { st, turn }, function()
      order:wait(turn)
      pipe:consumer_wait(st)
      tl.mods.throttle(1)
      pipe:consumer_release(st)
      st:advance()
      order:arrive(turn)
    end)
  end

  k:async_exec("math", { first_warp = 4, warps = 8 }, function()
    local st = pipe:consumer_start()
    local work = sched:work(worker)
    local smid = tl.mods.smid()
    tl.mods.mainloop(sched, 0x3, {}, function()
      tl.cutlass.switch_by_executor {
        { math0, { st }, function(s) mainloop(s, order:state { index = 0, phase = 0 }) end },
        { math1, { st }, function(s) mainloop(s, order:state { index = 1, phase = 0 }) end },
      }
    end)
    tl.bar(1, 256) -- both math warpgroups finished the mainloop
    local acc = fragment(tl.f32, ACC)
    local _ = sched:fixup(work, acc) -- true: this CTA owns the finished tile
    tl.block_striped.store(p.out, acc, { threads = 256 })
    local _ = smid
  end)
end)

print(gemm.module:print())
