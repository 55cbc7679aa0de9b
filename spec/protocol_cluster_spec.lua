-- The protocol checker's model of mbarrier scopes on a cluster pipeline
-- (docs/protocol.md, "Scopes"). A pipeline of mode cluster releases a stage on
-- every CTA of the cluster at the default .cta scope (convert-cutlass-to-nvvm's
-- release_cluster): that orders the consumer's completed async-proxy reads
-- (wgmma operands, TMA stores) before the peer producer's next TMA write, not
-- its generic loads. A small ring in a cluster of 2 (each CTA's producer
-- multicasts half of each stage into both CTAs) checks both sides: its
-- consumer reading the stage with TMA stores is clean, with generic loads it is
-- refused; the same generic-load consumer with .release.cluster arrives and
-- .acquire.cluster waits is clean again, and with the arrives alone at
-- .cluster it is refused (the release and the acquire are not morally strong).
local H = dofile "spec/helper.lua"
local tl = require "tilua"
local PH = dofile "spec/protocol_helper.lua"
local ops = PH.ops

local ROWS, COLS, ITERS, STAGES = 8, 16, 5, 2 -- i32 elements; the ring wraps twice
local STAGE_BYTES = ROWS * COLS * 4

-- ring{consumer = "generic" | "tma"}: kernel(A, out map or pointer) in a cluster of
-- 2 CTAs of 2 warps; iteration i moves rows [8i, 8i + 8) of A through a stage
-- of both CTAs into CTA c's part of the output.
local LOAD_LINE = H.line_of("spec/protocol_cluster_spec.lua", "local v = " .. "stage:ptr")
local TMA_LINE = H.line_of("spec/protocol_cluster_spec.lua", "tl.tma_load(" .. "stage:ptr")
local function ring(consumer)
  tl.new_module()
  local AT = tl.tensor_map_type(tl.i32, { ROWS // 2, COLS }, 0)
  local OT = consumer == "tma" and tl.tensor_map_type(tl.i32, { ROWS, COLS }, 0) or tl.ptr(tl.i32)
  local k = tl.kernel("cluster_ring_" .. consumer, { params = { { "A", AT }, { "out", OT } }, block = 64, cluster = { 2, 1, 1 } })
  k:define(function(k, p)
    local stage = k:shared(tl.i32, { STAGES, ROWS, COLS }, { align = 128 })
    local pipe = k:pipeline { stages = STAGES, producers = { { 0, 1 } }, consumers = { { 1, 1 } },
                              transaction_bytes = STAGE_BYTES, mode = "cluster" }
    local rank = tl.cluster_rank()
    local cta = tl.block_id()
    k:agent("producer", { warps = 1 }, function()
      local st = pipe:producer_start()
      tl.elect_one(function()
        tl.cutlass.for_range(tl.const(0, tl.i32), tl.const(ITERS, tl.i32), { st }, function(i)
          pipe:producer_acquire(st)
          local h = rank * (ROWS // 2) -- this CTA's half of the stage, to both CTAs
          tl.tma_load(stage:ptr(st:index(), h, 0), p.A, pipe:full_barrier(st), { i * ROWS + h, 0 }, { multicast = 3 })
          pipe:producer_commit(st)
          st:advance()
        end)
        pipe:producer_tail(st)
      end)
    end)
    k:agent("consumer", { warps = 1 }, function(a)
      local st = pipe:consumer_start()
      local t = a:thread_id()
      tl.cutlass.for_range(tl.const(0, tl.i32), tl.const(ITERS, tl.i32), { st }, function(i)
        pipe:consumer_wait(st)
        if consumer == "tma" then -- the async proxy reads the stage; the release waits until it did
          tl.elect_one(function()
            tl.tma_store(p.out, stage:ptr(st:index(), 0, 0), { (cta * ITERS + i) * ROWS, 0 })
            tl.bulk_commit()
            tl.bulk_wait(0, { read = true })
            pipe:consumer_release(st)
          end)
        else -- generic loads of the stage, then the release
          for e = 0, ROWS * COLS // 32 - 1 do
            local j = t + e * 32
            local v = stage:ptr(st:index(), j // COLS, j % COLS):load()
            tl.store(p.out + ((cta * ITERS + i) * (ROWS * COLS) + j), v)
          end
          pipe:consumer_release(st)
        end
        st:advance()
      end)
      if consumer == "tma" then tl.if_(t:eq(0), function() tl.bulk_wait(0) end) end
    end)
    tl.cluster_sync() -- no CTA leaves while its peer may still release into it
  end)
  return k
end

local A = {}
for i = 0, ITERS * ROWS * COLS - 1 do A[#A + 1] = string.pack("<i4", (i * 37 + 11) % 1000) end
A = table.concat(A)
local function args(consumer)
  local out = consumer == "tma" and { bytes = 2 * #A, shape = { 2 * ITERS * ROWS, COLS } } or { bytes = 2 * #A }
  return { { data = A, shape = { ITERS * ROWS, COLS } }, out }
end

-- The kernel after the whole ptx pipeline.
local function lowered(k)
  local m = k.module:clone()
  assert(tl.core.run_pipeline(m, "ptx"))
  return ops(m, "tile.kernel")[1]
end

-- The lowered generic-load ring with its remote arrives (tile.mapa'd) and the
-- producer's waits given a scope.
local function scoped(arrives, waits)
  local k = lowered(ring "generic")
  local n = 0
  for _, a in ipairs(ops(k, "nvvm.mbarrier.arrive.shared.cluster")) do
    a:set_attr("scope", arrives)
    n = n + 1
  end
  assert.is_true(n >= 1)
  if waits then
    for _, w in ipairs(ops(k, "nvvm.mbarrier.try_wait.parity.shared")) do w:set_attr("scope", waits) end
  end
  return k
end

describe("mbarrier scopes on a cluster pipeline", function()
  it("copies every stage to both CTAs' output (TMA stores; generic loads with .cluster scopes)", function()
    for _, c in ipairs { { ring "tma", "tma" }, { lowered(ring "tma"), "tma" }, { scoped("cluster", "cluster"), "generic" } } do
      local r = tl.emulate(c[1], { grid = 2, args = args(c[2]), policy = "random", seed = 3 })
      assert(r.ok, r.report)
      assert.is_true(r.read(2) == A .. A)
    end
  end)

  it("is clean when the async proxy reads the stages (TMA stores waited for), before and after lowering", function()
    for _, k in ipairs { ring "tma", lowered(ring "tma") } do
      local c = tl.verify_protocol(k, { grid = 2, args = args "tma", max_states = 20000 })
      assert(c.ok, c.report)
      assert.is_true(c.min_phases >= 2)
    end
  end)

  -- generic loads of a stage, released to the peer at .cta scope: the peer's
  -- multicast overwrites the stage with no order after the loads
  local REFUSED = "tma load %d+ %(from %w+ warp 0 %(CTA %d%), to CTA %d%) at [^ ]*protocol_cluster_spec%.lua:" .. TMA_LINE
                  .. " overwrites shared bytes %[%d+, %d+%) of CTA %d that %w+ warp 1 %(CTA %d%) read at [^ ]*protocol_cluster_spec%.lua:"
                  .. LOAD_LINE .. " before that read was released"
  it("refuses generic loads released at .cta scope, before and after lowering", function()
    for _, k in ipairs { ring "generic", lowered(ring "generic") } do
      local c = tl.verify_protocol(k, { grid = 2, args = args "generic", max_states = 20000 })
      assert.is_false(c.ok, "the generic consumer passed")
      assert.equal("overwrite", c.violation.kind, c.report)
      assert.matches(REFUSED, c.report)
      assert.is_true(#c.trace > 0)
    end
  end)

  it("proves generic loads released at .cluster scope to waits at .cluster scope", function()
    local c = tl.verify_protocol(scoped("cluster", "cluster"), { grid = 2, args = args "generic", max_states = 20000 })
    assert(c.ok, c.report)
    assert.is_true(c.min_phases >= 2)
  end)

  it("refuses .release.cluster arrives whose producer waits at .cta scope", function()
    local c = tl.verify_protocol(scoped("cluster", nil), { grid = 2, args = args "generic", max_states = 20000 })
    assert.is_false(c.ok, "the mixed scopes passed")
    assert.equal("overwrite", c.violation.kind, c.report)
    assert.matches(REFUSED, c.report)
  end)

  it("counts one arrival per consumer warp and CTA (the empty barrier's count is 2)", function()
    local k = lowered(ring "generic")
    local counts = {}
    for _, i in ipairs(ops(k, "nvvm.mbarrier.init.shared")) do
      counts[#counts + 1] = i:operand(2):def():attr "value"
    end
    assert.are.same({ 1, 2, 1, 2 }, counts) -- full (one producer), empty (1 warp x 2 CTAs) per stage
    assert.equal(0, #ops(k, "nvvm.barrier")) -- no warp barrier before the release
  end)
end)
