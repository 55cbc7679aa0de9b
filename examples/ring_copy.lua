-- ring_copy.lua: a warp-specialized copy through a shared-memory ring.
--
-- A persistent grid (one or a few CTAs per SM) walks the chunks of the input.
-- In each CTA one producer warp elects a thread that, for each chunk, waits
-- until the ring slot is free (the `empty` mbarrier), announces the bytes on
-- the slot's `full` mbarrier and starts a bulk async copy global -> shared that
-- completes on it. The consumer warps wait on `full`, copy the slot to global
-- memory with 16-byte vector loads and stores, and arrive on `empty`. The
-- mbarriers are plain tile ops (tile.mbarrier_*); a CUTLASS-pipeline version of
-- the same kernel is written elsewhere on top of cutlass.pipeline.
--
-- Bytes after the last multiple of 16 are copied by CTA 0's consumers.
--
--   tilua examples/ring_copy.lua [--emit=ir|ptx] [--stage=NAME]
--   loadfile("examples/ring_copy.lua")("--library") -> the example (tilua.gpu.check), with
--     build, launch (for tools/bench) and copy_example (for pipeline_ring_copy.lua)
--
-- Checked on fresh random bytes (size not a multiple of the chunk); without a
-- GPU it stops after compiling and ptxas with "SKIP: no GPU" (exit 0, or 77 under ctest).
local tl = require "tilua"
local check = require "tilua.gpu.check"

-- build{stages, chunk, consumer_warps, store = "threads" | "bulk", inflight} -> kernel
-- ring_copy(src, dst, n) with block 32 * (1 + consumer_warps).
--   store = "threads": the consumer threads move each slot with 16-byte loads and
--     stores (chunk a multiple of 16 * 32 * consumer_warps) and all arrive on `empty`;
--   store = "bulk": one elected consumer thread issues a bulk async copy shared ->
--     global per slot and releases a slot once its copy has read it, keeping
--     `inflight` (< stages) copies reading.
local function build(o)
  local S, C, W = o.stages or 4, o.chunk or 16384, o.consumer_warps or 4
  local bulk, K = o.store == "bulk", o.inflight or 1
  local CT = 32 * W           -- consumer threads
  local UNROLL = C // (16 * CT) -- 16-byte units per consumer thread per chunk
  assert(C % 16 == 0 and (bulk or (UNROLL >= 1 and C % (16 * CT) == 0)), "chunk must be a multiple of 16 * 32 * consumer_warps")
  assert(not bulk or K < S, "a bulk consumer needs inflight < stages")
  tl.new_module()
  local k = tl.kernel(o.name or "ring_copy", {
    params = { { "src", tl.ptr(tl.u8) }, { "dst", tl.ptr(tl.u8) }, { "n", tl.i64 } },
    block = 32 * (1 + W),
  })
  k:define(function(k, p)
    local ring = k:shared(tl.u8, { S, C }, { align = 128 })
    local full = k:shared(tl.i64, S, { align = 8 })
    local empty = k:shared(tl.i64, S, { align = 8 })
    tl.if_(tl.thread_id():eq(0), function()
      for s = 0, S - 1 do
        tl.mbarrier_init(full + s, 1)
        tl.mbarrier_init(empty + s, bulk and 1 or CT)
      end
      tl.fence_mbarrier_init()
    end)
    tl.barrier()

    local n16 = p.n & -16                          -- bytes moved by bulk copies
    local nchunks = (n16 + (C - 1)) // C
    local cta, grid = tl.block_id():cast(tl.i64), tl.grid_dim():cast(tl.i64)
    local left = nchunks - cta
    local iters = tl.select(left:gt(0), (left + grid - 1) // grid, tl.const(0, tl.i64))

    -- the ring slot of iteration it and the phase of its round
    local function stage(it)
      local s, round
      if S & (S - 1) == 0 then                     -- a power of two: masks and shifts
        local log2 = math.floor(math.log(S, 2) + 0.5)
        s, round = it & (S - 1), it >> log2
      else
        s, round = it % S, it // S
      end
      return s:cast(tl.i32), (round & 1):cast(tl.i32)
    end
    -- the chunk of iteration it: byte offset and size
    local function chunk(it)
      local off = (cta + it * grid) * C
      return off, tl.min(n16 - off, tl.const(C, tl.i64)):cast(tl.i32)
    end

    k:agent("producer", { warps = 1 }, function()
      tl.elect_one(function()
        tl.for_range(tl.const(0, tl.i64), iters, function(it)
          local s, phase = stage(it)
          local off, bytes = chunk(it)
          tl.mbarrier_wait(empty + s, phase ~ 1)     -- the producer starts on the opposite phase
          tl.mbarrier_arrive_expect_tx(full + s, bytes)
          tl.bulk_copy(ring:ptr(s), p.src + off, bytes, full + s)
        end)
      end)
    end)

    k:agent("consumer", { warps = W }, function(a)
      local t = a:thread_id()
      if bulk then
        tl.if_(t:eq(0), function()
          tl.for_range(tl.const(0, tl.i64), iters, function(it)
            local s, phase = stage(it)
            local off, bytes = chunk(it)
            tl.mbarrier_wait(full + s, phase)
            tl.bulk_copy(p.dst + off, ring:ptr(s), bytes)
            tl.bulk_commit()
            tl.bulk_wait(K, { read = true })          -- copy it - K has read its slot
            tl.if_(it:ge(K), function()
              local done = stage(it - K)
              tl.mbarrier_arrive(empty + done)
            end)
          end)
          tl.bulk_wait(0)                             -- every copy complete before the block exits
        end)
      else
        tl.for_range(tl.const(0, tl.i64), iters, function(it)
          local s, phase = stage(it)
          local off, bytes = chunk(it)
          tl.mbarrier_wait(full + s, phase)
          local from = ring:ptr(s) + t * 16
          local to = p.dst + off + (t * 16):cast(tl.i64)
          tl.if_(bytes:eq(C), function()              -- a whole chunk: all loads, then all stores
            local v = {}
            for u = 0, UNROLL - 1 do v[u] = (from + u * CT * 16):load { vector = 16 } end
            for u = 0, UNROLL - 1 do (to + u * CT * 16):store(v[u]) end
          end, function()                              -- the last, partial chunk
            local units = bytes // 16
            for u = 0, UNROLL - 1 do
              tl.if_((t + u * CT):lt(units), function()
                local x = (from + u * CT * 16):load { vector = 16 }
                local y = to + u * CT * 16
                y:store(x)
              end)
            end
          end)
          tl.mbarrier_arrive(empty + s)
        end)
      end
      -- the last n % 16 bytes
      local tail = p.n - n16
      tl.if_(cta:eq(0) & t:cast(tl.i64):lt(tail), function()
        local at = n16 + t:cast(tl.i64)
        local b = (p.src + at):load()
        local d = p.dst + at
        d:store(b)
      end)
    end)
  end)
  return k
end

-- launch(k, src, dst, n, ctas_per_sm, chunk [, grid]): launch over a persistent grid
-- (per_sm CTAs on every SM, at most one per chunk), or over `grid` CTAs; returns it.
local function launch(k, src, dst, n, ctas_per_sm, chunk, grid)
  grid = grid or tl.device.persistent_grid((n // 16 * 16 + chunk - 1) // chunk, ctas_per_sm)
  k:launch { grid = grid, args = { src, dst, n } }
  return grid
end

-- copy_example(name, variants, build, per_sm_list) -> the example (tilua.gpu.check) of
-- ring copies: prepare() compiles each variant (PTX through ptxas); run{seed,
-- grid, small} copies fresh random bytes with each variant (at each number of
-- CTAs per SM of per_sm_list, or over `grid` CTAs) and compares them exactly.
-- The size is never a multiple of the chunk nor of 16: 64 MiB + 12345 by
-- default, 1 MiB + 12345 when small, 4 to 16 MiB with a varying tail for a grid.
-- Shared with pipeline_ring_copy.lua.
local function copy_example(name, variants, build_fn, per_sm_list)
  local kernels = {}
  local ex = { name = name, grids = function(sms) return check.grids(sms) end }
  function ex.prepare()
    for i, v in ipairs(variants) do
      local k = build_fn(v)
      check.compile(v.name, k)
      kernels[i] = k
    end
  end
  function ex.run(o)
    local n = o.small and (1 << 20) + 12345 or o.grid and (4 + o.seed % 13) * (1 << 20) + 1 + o.seed % 4093
              or 64 * 1024 * 1024 + 12345
    local src <close> = tl.device.random(tl.u8, n, o.seed)
    local dst <close> = tl.device.alloc(tl.u8, n)
    local distinct, nd = {}, 0 -- the check is not fooled by constant data
    for _, b in ipairs(src:to_table(1, 4096)) do
      if not distinct[b] then distinct[b], nd = true, nd + 1 end
    end
    if nd <= 64 then return false, "the random input is not random" end
    local done = {}
    for i, k in ipairs(kernels) do
      local v = variants[i]
      for _, per_sm in ipairs(o.grid and { 0 } or per_sm_list) do
        dst:fill(0)
        local grid = launch(k, src, dst, n, per_sm, v.chunk, o.grid)
        tl.device.synchronize()
        local same, at = dst:equals(src)
        local what = ("%s: seed %d, %d bytes in %d chunks of %d, grid %d"):format(v.name, o.seed, n,
          (n + v.chunk - 1) // v.chunk, v.chunk, grid)
        if not same then return false, ("%s: first difference at byte %d"):format(what, at - 1) end
        done[#done + 1] = what
      end
    end
    return true, table.concat(done, "; ") .. ": every byte copied exactly"
  end
  return ex
end

local example = copy_example("ring_copy", {
  { stages = 4, chunk = 16384, consumer_warps = 4, name = "ring_copy" },
  { stages = 4, chunk = 16384, consumer_warps = 1, store = "bulk", inflight = 2, name = "ring_copy_bulk" },
}, build, { 1 })
example.build, example.launch, example.copy_example = build, launch, copy_example
if ... == "--library" then return example end
check.main(example)
