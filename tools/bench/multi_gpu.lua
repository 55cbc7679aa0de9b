-- tools/bench/multi_gpu.lua: GEMMs sharded over the GPUs of this host
-- (tl.sharded_gemm through examples/multi_gpu_gemm.lua, one process per GPU,
-- NCCL): the speedup over one GPU doing the whole GEMM, and the ratio to torch
-- + NCCL doing the same sharded GEMMs without overlap in a child process
-- (tools/bench/multi_gpu_torch.py under torchrun, or python3 -m
-- torch.distributed.run) in the same run, after tilua's processes are done.
-- Every tilua configuration is checked against the one-GPU GEMM first.
--
-- A time is the best of 5 samples of CUDA events around 3 runs, rank 0's (the
-- collectives keep the ranks in step); TFLOP/s = 2MNK / time. Ratio to torch =
-- torch's time / tilua's (above 1: tilua is faster). The all-reduce's bus
-- bandwidth is 2 (n - 1) / n x bytes / time, of 1 GiB of bf16.
--
--   tilua tools/bench/multi_gpu.lua [--gpus=N] [--shapes=8192x8192x8192,16384x16384x16384]
--                                   [--chunks=4] [--no-torch] [tl.gemm options: --schedule= --sms= ...]
-- With one GPU it says so and stops.
local tl = require "tilua"

local lib = assert(loadfile("examples/multi_gpu_gemm.lua"))("--library")

tl.device.require()
local o = lib.options(arg)
local shapes_arg, torch = "8192x8192x8192,16384x16384x16384", true
for _, a in ipairs(arg) do
  shapes_arg = a:match "^%-%-shapes=(.*)$" or shapes_arg
  if a == "--no-torch" then torch = false end
end
local gpus = o.gpus or math.min(4, tl.device.count())
if not tl.nccl.available() then
  print("multi_gpu bench: no NCCL (" .. tl.nccl.error() .. "), nothing measured")
  return
end
if gpus < 2 then
  print(("multi_gpu bench: %d GPU here (%s); it needs two or more, nothing measured"):format(tl.device.count(),
    tl.device.info().name))
  return
end
local shapes = {}
for m, n, k in shapes_arg:gmatch "(%d+)x(%d+)x(%d+)" do shapes[#shapes + 1] = { tonumber(m), tonumber(n), tonumber(k) } end

local world = tl.nccl.ranks(gpus)
local results, failed = {}, false
for _, s in ipairs(shapes) do
  local so = {}
  for key, v in pairs(o) do so[key] = v end
  so.m, so.n, so.k, so.time, so.mode = s[1], s[2], s[3], true, "both"
  local ok, lines, times = lib.run(world, so)
  if not ok then
    failed = true
    for _, l in ipairs(lines) do print(l) end
  end
  results[#results + 1] = { o = so, times = times, ok = ok }
  if world.rank == 0 then -- tilua's figures at once (the torch peer comes after)
    print(("%dx%dx%d on %d GPUs:"):format(so.m, so.n, so.k, gpus))
    for _, l in ipairs(lib.table(so, gpus, times)) do print(l) end
  end
end
world.comm:destroy()
if world.rank ~= 0 then return end
world:finish()

-- torch + NCCL in child processes, now that tilua's are done
local peer = {}
if torch then
  local launcher = os.execute "command -v torchrun >/dev/null 2>&1" and "torchrun"
                   or "python3 -m torch.distributed.run"
  local cmd = ("NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 timeout 300 %s "
               .. "--standalone --nproc_per_node=%d tools/bench/multi_gpu_torch.py %s 2>&1"):format(launcher, gpus,
               shapes_arg)
  local h = io.popen(cmd, "r")
  local out = h:read "a"
  h:close()
  for tag, name, ms in out:gmatch "torch (%S+) (%S+) ([%d.]+)" do peer[tag .. " " .. name] = tonumber(ms) end
  if not next(peer) then print("torch peer: no figures; its output:\n" .. out) end
end

print(("\nmulti_gpu bench: %d x %s, NCCL %s, %d chunks"):format(gpus, tl.device.info().name, tl.nccl.version(), o.chunks))
print(("%-16s %-40s %9s %8s %8s %9s %9s"):format("shape", "what", "ms", "TFLOP/s", "x 1 GPU", "torch ms", "torch/us"))
for _, r in ipairs(results) do
  local t, tag = r.times, ("%dx%dx%d"):format(r.o.m, r.o.n, r.o.k)
  local flops = 2.0 * r.o.m * r.o.n * r.o.k
  local function row(what, ms, peer_ms)
    if not ms then return end
    print(("%-16s %-40s %9.3f %8.1f %8.2f %9s %9s"):format(tag, what, ms, flops / ms / 1e9, t.one / ms,
      peer_ms and ("%.3f"):format(peer_ms) or "-", peer_ms and ("%.2f"):format(peer_ms / ms) or "-"))
  end
  row("one GPU", t.one, peer[tag .. " one"])
  row("row-parallel, all-reduce overlapped", t.row_true, peer[tag .. " row"])
  row("row-parallel, GEMM then all-reduce", t.row_false, peer[tag .. " row"])
  row("column-parallel, all-gather overlapped", t.column_true, peer[tag .. " column"])
  row("column-parallel, all-gather then GEMM", t.column_false, peer[tag .. " column"])
  if not r.ok then print(tag .. ": CHECK FAILED (see above)") end
end
local ar = results[#results] and results[#results].times
if ar and ar.all_reduce then
  local bus = 2 * (gpus - 1) / gpus * ar.all_reduce_bytes / ar.all_reduce / 1e6
  local pms = peer[("all_reduce %d"):format(ar.all_reduce_bytes)]
  local pbus = pms and 2 * (gpus - 1) / gpus * ar.all_reduce_bytes / pms / 1e6
  print(("all-reduce, %d MiB bf16: tilua %.3f ms, %.1f GB/s bus; torch %s; ratio tilua/torch bus bandwidth %s"):format(
    ar.all_reduce_bytes >> 20, ar.all_reduce, bus, pms and ("%.3f ms, %.1f GB/s"):format(pms, pbus) or "-", pbus and ("%.3f"):format(bus / pbus) or "-"))
end
if failed then error("multi_gpu bench: a sharded GEMM differs from one GPU's", 0) end
