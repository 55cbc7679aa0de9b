-- Several devices in one process, without a GPU: the stand-in driver
-- (spec/c/fake_cuda.c, TILUA_LIBCUDA) with FAKE_CUDA_DEVICES devices, a primary
-- context each, whose call log (FAKE_CUDA_LOG) names the device of the context
-- current at every launch: each launch must run on the device it was meant for
-- (tl.device.use, k:launch{device}), through both launch paths.
local H = dofile "spec/helper.lua"

local FAKE = os.getenv "TILUA_FAKE_CUDA"

local function run(body, devices)
  local f = H.temp('local tl = require "tilua"\n' .. body, ".lua")
  local log = os.tmpname()
  local out, err, code = H.tilua_env({ TILUA_LIBCUDA = FAKE, FAKE_CUDA_DEVICES = tostring(devices or 3),
                                       FAKE_CUDA_LOG = log, TILUA_NCCL = os.getenv "TILUA_FAKE_NCCL" or "" }, { f })
  local launches = H.slurp(log)
  os.remove(log)
  return out, err, code, launches, f
end

describe("several devices in one process (stand-in driver)", function()
  before_each(function()
    if not FAKE or FAKE == "" then pending("TILUA_FAKE_CUDA is not set (run through ctest)") end
  end)

  it("launches on the current device, on cfg.device, and back, through both launch paths", function()
    local out, err, code, launches = run [[
local k = tl.kernel("st", { params = { { "x", tl.ptr(tl.i32) }, { "v", tl.i32 } }, block = 32 })
k:define(function(k, p) p.x:store(p.v) end)
local names = {}
for _, d in ipairs(tl.devices()) do names[#names + 1] = d.ordinal .. ":" .. d.name end
print(table.concat(names, ","))
local a = tl.device.alloc(tl.i32, 4)
print("use", tl.device.use(2), tl.device.current())
local b = tl.device.alloc(tl.i32, 4)
local s = tl.device.stream()
k:launch { grid = 1, args = { b, 1 }, stream = s }
k:launch { grid = 1, args = { b, 2 }, stream = s }
k:launch { grid = 1, args = { a, 3 }, device = 0 }
k:launch { grid = 1, args = { b, 4 } }
tl.device.use(1)
k:launch { grid = 1, args = { tl.device.alloc(tl.i32, 1), 5 } }
print("on", a.device, b.device, b:view(2, 1).device)
print("peer", tl.device.peer(0, 2))
a:copy_from(b)
local e = tl.device.event(); e:record()
tl.device.use(0)
local s0 = tl.device.stream(); s0:wait(e)
tl.device.synchronize()
print(pcall(tl.device.use, 7))
print(pcall(function() k:launch { grid = 1, args = { a, 1 }, device = 9 } end))
print(pcall(function() e:record(s0) end))
]]
    assert.equal(0, code, out .. err)
    H.seq(out, { "0:Fake GPU,1:Fake GPU,2:Fake GPU", "use\t0\t2", "on\t0\t2\t2", "peer\ttrue",
                 "device 7 does not exist (the driver sees 3: 0..2)", "device 9 does not exist" })
    H.seq(launches, { "device=2 args=buf1+0 0x1", "device=2 args=buf1+0 0x2", "device=0 args=buf0+0 0x3",
                      "device=2 args=buf1+0 0x4", "device=1 args=buf2+0 0x5" })
  end)

  it("keeps the launch's checks and options on every device: pdl, element types of buffers and views, graphs", function()
    local out, err, code, launches = run([[
local k = tl.kernel("st", { params = { { "x", tl.ptr(tl.i32) }, { "v", tl.i32 } }, block = 32 })
k:define(function(k, p) p.x:store(p.v) end)
tl.device.use(1)
local b = tl.device.alloc(tl.i32, 4)
k:launch { grid = 1, args = { b, 1 }, pdl = true }
k:launch { grid = 1, args = { b, 2 } }
local f = tl.device.alloc(tl.f32, 4)
print(pcall(function() k:launch { grid = 1, args = { f:view(2, 2), 3 } } end))
print(pcall(function() k:launch { grid = 1, args = { f:view(2, 2), 3 }, device = 0 } end))
print(pcall(function() k:launch { grid = 1, args = { b, 1 << 40 } } end))
k:launch { grid = 1, args = { b:view(3, 1), 4 } }
local g = tl.graph(function() k:launch { grid = 1, args = { b, 5 } } end)
tl.device.use(0)
g:launch()
tl.device.synchronize()
print("done", g.nodes)
]], 2)
    assert.equal(0, code, out .. err)
    H.seq(out, { "argument 'x' is a buffer of f32, but the parameter points to i32",
                 "argument 'x' is a buffer of f32, but the parameter points to i32",
                 "argument 'v' = 1099511627776 does not fit its type i32", "done\t1" })
    H.seq(launches, { "pdl=1 device=1 args=buf0+0 0x1", "smem=0 device=1 args=buf0+0 0x2", "device=1 args=buf0+8 0x4",
                      "launch (graph) st", "device=1 args=buf0+0 0x5" })
  end)

  it("makes a communicator per device (ncclCommInitAll) whose calls in a group reduce across devices", function()
    local out, err, code = run([[
local comms = tl.nccl.init_all { 0, 1, 2 }
local bufs = {}
for i, c in ipairs(comms) do
  tl.device.use(c.device)
  bufs[i] = tl.device.from(tl.f32, { i, 10 * i, 100 * i })
end
tl.nccl.group(function() for i, c in ipairs(comms) do c:all_reduce(bufs[i]) end end)
tl.device.synchronize()
for i, b in ipairs(bufs) do print(comms[i].rank, comms[i].device, b.device, table.concat(b:to_table(), ",")) end
]], 3)
    assert.equal(0, code, out .. err)
    H.seq(out, { "0\t0\t0\t6.0,60.0,600.0", "1\t1\t1\t6.0,60.0,600.0", "2\t2\t2\t6.0,60.0,600.0" })
  end)

  it("keeps one device's buffers, modules and launches apart from another's at exit", function()
    local out, err, code = run([[
local k = tl.kernel("z", { params = { { "x", tl.ptr(tl.f32) } }, block = 32 })
k:define(function(k, p) p.x:store(1.0) end)
for d = 0, 1 do
  tl.device.use(d)
  local x = tl.device.alloc(tl.f32, 8)
  k:launch { grid = 1, args = { x } }
end
tl.device.use(0)
print("done", tl.device.current())
]], 2)
    assert.equal(0, code, out .. err)
    H.has(out, "done\t0")
  end)
end)
