-- NCCL through tl.nccl without a GPU: the stand-in driver (spec/c/fake_cuda.c,
-- TILUA_LIBCUDA) with FAKE_CUDA_DEVICES devices and the stand-in NCCL
-- (spec/c/fake_nccl.c, TILUA_NCCL), whose collectives run on the CPU over the
-- driver's host memory, one process per rank as on GPUs. The same fixture
-- runs on GPUs in spec/nccl_gpu_spec.lua.
local H = dofile "spec/helper.lua"

local FAKE_CUDA, FAKE_NCCL = os.getenv "TILUA_FAKE_CUDA", os.getenv "TILUA_FAKE_NCCL"
local OPS = "spec/fixtures/gpu/nccl_ops.lua"

local function need_fakes()
  if not FAKE_CUDA or FAKE_CUDA == "" or not FAKE_NCCL or FAKE_NCCL == "" then
    pending("TILUA_FAKE_CUDA or TILUA_FAKE_NCCL is not set (run through ctest)")
  end
end

-- tilua with the stand-ins and `devices` devices, plus env; the children inherit it.
local function run(devices, args, env)
  local e = { TILUA_LIBCUDA = FAKE_CUDA, TILUA_NCCL = FAKE_NCCL, FAKE_CUDA_DEVICES = tostring(devices),
              FAKE_NCCL_TIMEOUT = "20" }
  for k, v in pairs(env or {}) do e[k] = v end
  return H.tilua_env(e, args, 120)
end

local function script(body) return H.temp('local tl = require "tilua"\n' .. body, ".lua") end

describe("tl.nccl on the stand-ins", function()
  for _, n in ipairs { 2, 3 } do
    it(("runs every call on %d ranks, one process each, and checks every result"):format(n), function()
      need_fakes()
      local out, err, code = run(n, { OPS, tostring(n) })
      assert.equal(0, code, out .. err)
      assert.is_nil(out:find "FAIL", out)
      for r = 0, n - 1 do
        local p = r == 0 and "" or ("[rank %d] "):format(r)
        for _, name in ipairs { "all_reduce bf16 sum 40000", "all_reduce f32 avg 9", "all_reduce in place on a stream",
                                "broadcast", "all_gather", "reduce_scatter", "send/recv ring" } do
          H.has(out, ("%sok %s rank %d"):format(p, name, r))
        end
        -- tilua turned NVLink multicast off before NCCL made the communicator, in every rank
        H.has(out, ("%srank %d of %d on device %d: NCCL_NVLS_ENABLE=0"):format(p, r, n, r))
        for _, want in ipairs {
          { "all_gather size", (":98: nccl all_gather: the receive buffer holds %d elements, %d ranks x 4 sent need %d"):format(
            4 * n + 1, n, 4 * n) },
          { "types", ":99: nccl all_reduce: the buffers hold f32 and i32" },
          { "element type", ":100: nccl: the send buffer holds i16" },
          { "reduction", ":101: nccl: unknown reduction 'mean'" },
          { "peer", ":102: nccl send: invalid argument" },
        } do
          H.has(out, ("%srefused %s: %s%s"):format(p, want[1], OPS, want[2]))
        end
      end
    end)
  end

  it("refuses a sharded GEMM whose kernel takes more than the three tensor maps", function()
    need_fakes()
    local out, err, code = run(1, { script [[
local comm = tl.nccl.init_all { 0 }[1]
for _, extra in ipairs { { dynamic = true }, { schedule = "streamk", overlap = false } } do
  local o = { comm = comm, m = 256, n = 256, k = 256, chunks = 2 }
  for key, v in pairs(extra) do o[key] = v end
  print(pcall(tl.sharded_gemm.row_parallel, o))
end
]] })
    assert.equal(0, code, out .. err)
    H.seq(out, { "not supported", "not supported" })
  end)

  it("leaves NCCL_NVLS_ENABLE to a user who set it (the stand-in refuses multicast)", function()
    need_fakes()
    local out, err, code = run(2, { OPS }, { NCCL_NVLS_ENABLE = "1" })
    assert.not_equal(0, code)
    H.has(out .. err, "NCCL_NVLS_ENABLE is not 0: NVLink multicast would be on")
  end)

  it("says so when there is no second GPU", function()
    need_fakes()
    local f = script "local w = tl.nccl.ranks(2)\n"
    local _, err, code = run(1, { f })
    assert.equal(1, code)
    H.has(err, f .. ":2: nccl.ranks: 2 ranks need 2 GPUs, the driver sees 1")
  end)

  it("says so when there is no NCCL", function()
    need_fakes()
    local f = script 'print(tl.nccl.available(), tl.nccl.error())\nlocal w = tl.nccl.ranks(2)\n'
    local out, err, code = run(2, { f }, { TILUA_NCCL = "/nonexistent/libnccl.so.2" })
    assert.equal(1, code)
    H.has(out, 'false\tNCCL not found: dlopen("/nonexistent/libnccl.so.2")')
    H.has(err, f .. ':3: no NCCL: NCCL not found')
  end)

  it("reports a rank that failed, with its output", function()
    need_fakes()
    local f = script 'local w = tl.nccl.ranks(2)\nif w.rank == 1 then error("rank one gives up") end\nw:finish()\n'
    local out, err, code = run(2, { f })
    assert.equal(1, code)
    H.has(out, "[rank 1] ")
    H.has(out, ":3: rank one gives up")
    H.has(err, f .. ":4: nccl: rank 1 exited with 1")
  end)

  it("refuses a unique id that is not one", function()
    need_fakes()
    local f = script 'tl.nccl.init { id = "short", nranks = 2, rank = 0 }\n'
    local _, err, code = run(2, { f })
    assert.equal(1, code)
    H.has(err, f .. ":2: nccl: a unique id is 128 bytes")
  end)
end)

describe("streams, events and views on the stand-in driver", function()
  it("launch on a stream through both launch paths, with views for pointers", function()
    need_fakes()
    local log = os.tmpname()
    local f = script [[
local k = tl.kernel("st", { params = { { "x", tl.ptr(tl.i32) } }, block = 32 })
k:define(function(k, p) p.x:store(7) end)
local s = tl.device.stream { priority = "high" }
local x = tl.device.alloc(tl.i32, 8)
for i = 1, 3 do k:launch { grid = 1, args = { x:view(i + 1, 2) }, stream = s } end
local e = tl.device.event(true)
e:record(s); tl.device.wait(e); s:synchronize()
print("done", e:query(), tl.device.count())
print(pcall(function() k:launch { grid = 1, args = { x }, stream = 5 } end))
print(pcall(function() x:view(8, 2) end))
print(pcall(function() x:view(1, 2):fill(0) end))
]]
    local out, err, code = run(3, { f }, { FAKE_CUDA_LOG = log })
    assert.equal(0, code, out .. err)
    H.seq(out, { "done\ttrue\t3",
                 f .. ":10: expected a stream (tl.device.stream()), got number",
                 "view: elements 8..+2 outside 1..8",
                 "a view of a device buffer has no method 'fill': use the buffer it views" })
    local launches = H.slurp(log)
    os.remove(log)
    -- the first launch on the Lua path, the others through the plan: each at its view's address
    H.seq(launches, { "args=buf0+4\n", "args=buf0+8\n", "args=buf0+12\n" })
  end)
end)
