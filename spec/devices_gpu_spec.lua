-- Several GPUs in one process: a kernel on each device, k:launch{device},
-- copies between devices, peer access (a kernel on one device reading the
-- other's memory over NVLink) ordered by an event recorded on the other
-- device's stream. Pending, and the spec skipped, with fewer than two GPUs
-- (spec/devices_spec.lua runs the same calls on the stand-in driver).
local H = dofile "spec/helper.lua"
local tl = require "tilua"

local N = 1 << 20

local function kernels()
  local saved = tl.module()
  tl.new_module()
  -- y[i] = 2 x[i] + c
  local axpc = tl.kernel("axpc", { params = { { "x", tl.ptr(tl.f32) }, { "y", tl.ptr(tl.f32) }, { "c", tl.f32 },
                                              { "n", tl.i32 } }, block = 256 })
  axpc:define(function(_, p)
    local i = tl.global_id "x"
    tl.if_(i:lt(p.n), function()
      local v = (p.x + i):load() * tl.const(2.0, tl.f32) + p.c
      local at = p.y + i
      at:store(v)
    end)
  end)
  tl.set_module(saved)
  return axpc
end

describe("several GPUs in one process", function()
  it("runs a kernel on each, copies between them, reads a peer's memory after its event", function()
    H.gpus(2, true)
    local k = kernels()
    local grid = (N + 255) // 256
    local x, y = {}, {}
    for d = 0, 1 do
      tl.device.use(d)
      x[d] = tl.device.random(tl.f32, N, 100 + d)
      y[d] = tl.device.alloc(tl.f32, N)
      k:launch { grid = grid, args = { x[d], y[d], d + 0.5, N } }
    end
    tl.device.use(0)
    tl.device.synchronize()
    for d = 0, 1 do
      assert.equal(d, y[d].device)
      local xs, ys = x[d]:to_table(1, 1000), y[d]:to_table(1, 1000)
      for i = 1, 1000 do assert.equal(xs[i] * 2 + d + 0.5, ys[i]) end
    end
    -- device 1's result copied to device 0, bit for bit
    local z = tl.device.alloc(tl.f32, N)
    z:copy_from(y[1])
    assert.is_true((z:equals(y[1])))
    -- device 0 reads device 1's memory directly, after an event of device 1's stream
    assert.is_true((tl.device.peer(0, 1)))
    tl.device.use(1)
    local s1, e1 = tl.device.stream(), tl.device.event()
    k:launch { grid = grid, args = { x[1], y[1], 7.0, N }, stream = s1 }
    e1:record(s1)
    tl.device.use(0)
    local s0, out = tl.device.stream(), tl.device.alloc(tl.f32, N)
    s0:wait(e1)
    k:launch { grid = grid, args = { y[1], out, 0.0, N }, stream = s0 } -- y[1] is device 1's
    s0:synchronize()
    local xs, os_ = x[1]:to_table(1, 1000), out:to_table(1, 1000)
    for i = 1, 1000 do assert.equal((xs[i] * 2 + 7.0) * 2, os_[i]) end
    -- k:launch{device = 1} leaves the current device as it was
    k:launch { grid = grid, args = { x[1], y[1], 1.0, N }, device = 1 }
    tl.device.synchronize()
    assert.equal(0, tl.device.current())
    assert.equal(x[1]:to_table(5, 5)[1] * 2 + 1.0, y[1]:to_table(5, 5)[1])
  end)

  it("all-reduces buffers of both devices with a communicator per device (ncclCommInitAll)", function()
    H.gpus(2)
    local comms = tl.nccl.init_all { 0, 1 }
    local bufs, want = {}, {}
    for i, c in ipairs(comms) do
      tl.device.use(c.device)
      bufs[i] = tl.device.random(tl.f32, N, 200 + i)
    end
    tl.device.use(0)
    local a, b = bufs[1]:to_table(1, 1000), bufs[2]:to_table(1, 1000)
    for i = 1, 1000 do want[i] = string.unpack("<f", string.pack("<f", a[i] + b[i])) end
    tl.nccl.group(function() for i, c in ipairs(comms) do c:all_reduce(bufs[i]) end end)
    tl.device.synchronize()
    for d = 1, 2 do
      local got = bufs[d]:to_table(1, 1000)
      for i = 1, 1000 do assert.equal(want[i], got[i]) end
    end
    for _, c in ipairs(comms) do c:destroy() end
  end)
end)
