-- Programmatic dependent launch: tl.griddepcontrol_wait and
-- tl.griddepcontrol_launch_dependents (PTX griddepcontrol.*), and the launch
-- attribute k:launch{pdl = true} sets (cuLaunchKernelEx's programmatic stream
-- serialization), checked through the stand-in driver's launch log; the
-- stdlib GEMM launches so by default, and sizes a persistent grid of clusters
-- to the clusters that fit at once.
local H = dofile "spec/helper.lua"
local tl = require "tilua"

local FAKE = os.getenv "TILUA_FAKE_CUDA"
if FAKE == "" then FAKE = nil end

-- out[i] = i, after waiting for the grids before; then lets the next ones launch
local function kernel(cluster)
  tl.new_module()
  local k = tl.kernel("pdl_copy", { params = { { "out", tl.ptr(tl.i32) } }, block = 64, cluster = cluster })
  k:define(function(_, p)
    tl.griddepcontrol_wait()
    local i = tl.global_id "x"
    tl.store(p.out + i, i)
    tl.griddepcontrol_launch_dependents()
  end)
  return k
end

describe("programmatic dependent launch", function()
  it("emits griddepcontrol.wait and launch_dependents, which ptxas accepts", function()
    local ptx = kernel():compile()
    assert.matches("griddepcontrol.wait;", ptx, 1, true)
    assert.matches("griddepcontrol.launch_dependents;", ptx, 1, true)
    local ok, log = tl.ptxas(ptx)
    if ok == nil then pending("ptxas not found") return end
    assert(ok, log)
  end)

  it("runs on the emulator as one grid: nothing to wait for", function()
    local r = tl.emulate(kernel(), { grid = 2, args = { { bytes = 512 } } })
    assert(r.ok, r.report)
    local want = {}
    for i = 0, 127 do want[#want + 1] = string.pack("<i4", i) end
    assert.equal(table.concat(want), r.read(1))
  end)

  it("sets the launch attribute with pdl = true, next to a cluster's (the stand-in driver's log)", function()
    if not FAKE then pending "no stand-in driver (TILUA_FAKE_CUDA, set by ctest)" return end
    local log = os.tmpname()
    local out, err, code = H.tilua_env({ TILUA_LIBCUDA = FAKE, FAKE_CUDA_LOG = log, FAKE_CUDA_CLUSTERS = "5" }, { "-e", [[
      local tl = require "tilua"
      local function kernel(cluster)
        tl.new_module()
        local k = tl.kernel("pdl_copy", { params = { { "out", tl.ptr(tl.i32) } }, block = 64, cluster = cluster })
        k:define(function(_, p) tl.griddepcontrol_wait() tl.store(p.out + tl.global_id "x", 1) end)
        return k
      end
      local out = tl.device.alloc(tl.i32, 256)
      kernel():launch { grid = 2, args = { out }, pdl = true }
      kernel { 2, 1, 1 }:launch { grid = 2, args = { out }, pdl = true }
      kernel():launch { grid = 2, args = { out } } -- no attribute: the plain entry point, no line
      local g = tl.gemm.build { m = 256, n = 256, k = 128 }
      local a, b, d = tl.device.alloc(tl.bf16, 256 * 128), tl.device.alloc(tl.bf16, 256 * 128), tl.device.alloc(tl.bf16, 256 * 256)
      g:run { a = a, b = b, d = d }
      tl.gemm.build { m = 256, n = 256, k = 128, pdl = false }:run { a = a, b = b, d = d }
      -- 64 tiles of 128 x 128 in clusters of 2 x 2: 16 cluster tiles, 33 planned for, 5 fit
      local a2, b2, big = tl.device.alloc(tl.bf16, 1024 * 128), tl.device.alloc(tl.bf16, 1024 * 128), tl.device.alloc(tl.bf16, 1024 * 1024)
      tl.gemm.build { m = 1024, n = 1024, k = 128, bn = 128, cluster = { 2, 2 }, sms = 132 }:run { a = a2, b = b2, d = big }
      tl.device.synchronize()
      print "done"
    ]] })
    -- the log's launches with an attribute (a cluster or PDL), as "grid X [cluster a b c] [pdl 1]"
    local lines = ""
    for line in io.lines(log) do
      local gx, c1, c2, c3, pdl = line:match "^launch %S+ grid=(%d+),%d+,%d+ block=%S+ cluster=(%d+),(%d+),(%d+) smem=%d+( ?p?d?l?=?1?) args="
      local cluster = gx and (c1 .. c2 .. c3 ~= "111") and (" cluster %s %s %s"):format(c1, c2, c3) or ""
      if gx and (cluster ~= "" or pdl ~= "") then lines = lines .. ("launch grid %s%s%s\n"):format(gx, cluster, pdl ~= "" and " pdl 1" or "") end
    end
    os.remove(log)
    assert(code == 0 and out:find "done", out .. err)
    assert.equal("launch grid 2 pdl 1\nlaunch grid 2 cluster 2 1 1 pdl 1\nlaunch grid 2 pdl 1\n"
                 .. "launch grid 20 cluster 4 1 1 pdl 1\n", lines)
  end)
end)
