-- pipeline_ring_copy.lua: the warp-specialized ring copy of ring_copy.lua,
-- written on cutlass.pipeline instead of plain mbarriers.
--
-- A persistent grid (one or a few CTAs per SM) walks the 16-byte-aligned part of
-- the input in chunks. In each CTA one producer warp elects a thread that, for
-- each chunk, acquires a free stage (producer_acquire), starts a bulk async copy
-- global -> shared that completes on the stage's full barrier
-- (producer_get_barrier), and commits the stage with its transaction bytes
-- (producer_commit). The consumer warps wait for the stage (consumer_wait), copy
-- it to global memory with 16-byte vector loads and stores and release it
-- (consumer_release). convert-cutlass-to-nvvm turns the pipeline into the
-- mbarrier protocol; the last n % 16 bytes are copied by CTA 0's consumers.
--
--   tilua examples/pipeline_ring_copy.lua [--emit=ir|ptx] [--stage=NAME]
--   loadfile("examples/pipeline_ring_copy.lua")("--library") -> the example (tilua.gpu.check),
--     with build and launch (for tools/bench)
--
-- Checked byte for byte on fresh random bytes (size not a multiple of the
-- chunk); without a GPU it stops after compiling and ptxas ("SKIP: no GPU").
local tl = require "tilua"
local check = require "tilua.gpu.check"

-- build{stages, chunk, consumer_warps, mode} -> kernel pipeline_ring_copy(src, dst, n)
-- with block 32 * (1 + consumer_warps). mode: "cooperative" (every consumer thread
-- releases its own reads of a stage: the empty barrier counts threads) or
-- "warp_specialized" (the consumer warps meet at a named barrier and one thread
-- releases).
local function build(o)
  local S, C, W = o.stages or 4, o.chunk or 16384, o.consumer_warps or 4
  local CT = 32 * W             -- consumer threads
  local UNROLL = C // (16 * CT) -- 16-byte units per consumer thread per chunk
  assert(UNROLL >= 1 and C % (16 * CT) == 0, "chunk must be a multiple of 16 * 32 * consumer_warps")
  tl.new_module()
  local k = tl.kernel(o.name or "pipeline_ring_copy", {
    params = { { "src", tl.ptr(tl.u8) }, { "dst", tl.ptr(tl.u8) }, { "n", tl.i64 } },
    block = 32 * (1 + W),
  })
  k:define(function(k, p)
    local ring = k:shared(tl.u8, { S, C }, { align = 128 })
    local pipe = k:pipeline { stages = S, producers = { { 0, 1 } }, consumers = { { 1, W } },
                              transaction_bytes = C, mode = o.mode or "cooperative" }

    local n16 = p.n & -16 -- bytes that go through the ring
    local nchunks = (n16 + (C - 1)) // C
    local cta, grid = tl.block_id():cast(tl.i64), tl.grid_dim():cast(tl.i64)
    local left = nchunks - cta
    local iters = tl.select(left:gt(0), (left + grid - 1) // grid, tl.const(0, tl.i64))
    -- the chunk of iteration it: byte offset and size
    local function chunk(it)
      local off = (cta + it * grid) * C
      return off, tl.min(n16 - off, tl.const(C, tl.i64)):cast(tl.i32)
    end

    k:agent("producer", { warps = 1 }, function()
      local st = pipe:producer_start()
      tl.elect_one(function()
        tl.cutlass.for_range(tl.const(0, tl.i64), iters, { st }, function(it)
          local off, bytes = chunk(it)
          pipe:producer_acquire(st)
          local full = pipe:full_barrier(st)
          tl.bulk_copy(ring:ptr(st:index()), p.src + off, bytes, full)
          tl.if_(bytes:eq(C), function()
            pipe:producer_commit(st) -- arrive.expect_tx with the pipeline's C bytes
          end, function()            -- the last, partial chunk: its own byte count
            tl.mbarrier_expect_tx(full, bytes)
            pipe:producer_commit(st, 0)
          end)
          st:advance()
        end)
        pipe:producer_tail(st)
      end)
    end)

    k:agent("consumer", { warps = W }, function(a)
      local t = a:thread_id()
      local st = pipe:consumer_start()
      tl.cutlass.for_range(tl.const(0, tl.i64), iters, { st }, function(it)
        local off, bytes = chunk(it)
        pipe:consumer_wait(st)
        local from = ring:ptr(st:index()) + t * 16
        local to = p.dst + off + (t * 16):cast(tl.i64)
        tl.if_(bytes:eq(C), function() -- a whole chunk: all loads, then all stores
          local v = {}
          for u = 0, UNROLL - 1 do v[u] = (from + u * CT * 16):load { vector = 16 } end
          for u = 0, UNROLL - 1 do (to + u * CT * 16):store(v[u]) end
        end, function()                 -- the last, partial chunk
          local units = bytes // 16
          for u = 0, UNROLL - 1 do
            tl.if_((t + u * CT):lt(units), function()
              local x = (from + u * CT * 16):load { vector = 16 }
              local y = to + u * CT * 16
              y:store(x)
            end)
          end
        end)
        pipe:consumer_release(st)
        st:advance()
      end)
      -- the last n % 16 bytes
      local tail = p.n - n16
      tl.if_(cta:eq(0) & t:cast(tl.i64):lt(tail), function()
        local at = n16 + t:cast(tl.i64)
        local d = p.dst + at
        d:store((p.src + at):load())
      end)
    end)
  end)
  return k
end

-- The launch and the check are ring_copy.lua's (beside this file).
local ring = assert(loadfile((debug.getinfo(1, "S").source:match "^@(.*/)" or "./") .. "ring_copy.lua"))("--library")

-- the example: both release modes, at 1 and 2 CTAs per SM, on fresh random bytes
local example = ring.copy_example("pipeline_ring_copy", {
  { stages = 4, chunk = 16384, consumer_warps = 4, name = "pipeline_ring_copy" },
  { stages = 3, chunk = 16384, consumer_warps = 2, mode = "warp_specialized", name = "pipeline_ring_copy_ws" },
}, build, { 1, 2 })
example.build, example.launch = build, ring.launch
if ... == "--library" then return example end
check.main(example)
