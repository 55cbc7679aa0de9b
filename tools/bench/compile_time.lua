-- tools/bench/compile_time.lua: how long tilua takes from a kernel script to PTX,
-- against nvcc compiling the same kernel written in CUDA C++ to PTX, both
-- measured in this run on this machine (no GPU needed).
--
--   tilua tools/bench/compile_time.lua [reps]
--
-- tilua's time covers building the IR from Lua, verifying it, running the `ptx`
-- pipeline (verifier after every pass) and emitting PTX. nvcc's covers
-- `nvcc -arch=sm_90a -ptx` of a .cu file (front end, NVVM, PTX). ptxas, which
-- both would feed, is timed separately. Prints a table; the ratio is nvcc / tilua.
-- The k:compile column is the part of tilua's time after the IR is built
-- (pipeline, verifier, emission), the compile cache off.
local tl = require "tilua"
tl.options.compile_cache = false -- every rep compiles: this measures the compiler, not the cache

local reps = math.tointeger(tonumber(arg and arg[1] or "")) or 50

local function now() return os.clock() end -- CPU seconds of this process
local function wall(cmd)                    -- wall seconds of a command
  local t0 = os.time()
  local p = io.popen("/usr/bin/time -f %e " .. cmd .. " 2>&1 >/dev/null")
  local out = p:read "a"
  local ok = p:close()
  local secs = tonumber(out:match "([%d%.]+)%s*$")
  return ok and secs or nil, out, t0
end

local function median(t)
  table.sort(t)
  return t[(#t + 1) // 2]
end

-- The kernels: built from scratch each time.
local kernels = {
  {
    name = "vector_add",
    build = function()
      tl.new_module()
      local k = tl.kernel("vector_add", {
        params = { { "a", tl.ptr(tl.f32) }, { "b", tl.ptr(tl.f32) }, { "c", tl.ptr(tl.f32) }, { "n", tl.i32 } },
        block = 256,
      })
      k:define(function(k, p)
        local i = tl.global_id "x"
        tl.if_(i:lt(p.n), function() (p.c + i):store((p.a + i):load() + (p.b + i):load()) end)
      end)
      return k
    end,
    cuda = [[
extern "C" __global__ void __launch_bounds__(256) vector_add(const float *a, const float *b, float *c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}
]],
  },
  {
    name = "ring_copy",
    build = function()
      local lib = assert(loadfile("examples/ring_copy.lua"))("--library")
      return lib.build { stages = 4, chunk = 16384, consumer_warps = 4 }
    end,
  },
  {
    name = "sgemm (16x16 tiles, shared memory)",
    build = function()
      tl.new_module()
      local T = 16
      local k = tl.kernel("sgemm", {
        params = { { "a", tl.ptr(tl.f32) }, { "b", tl.ptr(tl.f32) }, { "c", tl.ptr(tl.f32) }, { "n", tl.i32 } },
        block = { T, T, 1 },
      })
      k:define(function(k, p)
        local as, bs = k:shared(tl.f32, T * T), k:shared(tl.f32, T * T)
        local tx, ty = tl.thread_id "x", tl.thread_id "y"
        local row, col = tl.block_id "y" * T + ty, tl.block_id "x" * T + tx
        local acc = tl.for_range(tl.const(0, tl.i32), p.n // T, tl.const(1, tl.i32), { tl.const(0.0, tl.f32) },
          function(kt, acc)
            local sa, sb = as + (ty * T + tx), bs + (ty * T + tx)
            sa:store((p.a + (row * p.n + kt * T + tx)):load())
            sb:store((p.b + ((kt * T + ty) * p.n + col)):load())
            tl.barrier()
            for j = 0, T - 1 do acc = acc + (as + (ty * T + j)):load() * (bs + (j * T + tx)):load() end
            tl.barrier()
            return acc
          end)
        local dst = p.c + (row * p.n + col)
        dst:store(acc)
      end)
      return k
    end,
    cuda = [[
#define T 16
extern "C" __global__ void sgemm(const float *a, const float *b, float *c, int n) {
  __shared__ float as[T * T], bs[T * T];
  int tx = threadIdx.x, ty = threadIdx.y;
  int row = blockIdx.y * T + ty, col = blockIdx.x * T + tx;
  float acc = 0.0f;
  for (int kt = 0; kt < n / T; kt++) {
    as[ty * T + tx] = a[row * n + kt * T + tx];
    bs[ty * T + tx] = b[(kt * T + ty) * n + col];
    __syncthreads();
#pragma unroll
    for (int j = 0; j < T; j++) acc += as[ty * T + j] * bs[j * T + tx];
    __syncthreads();
  }
  c[row * n + col] = acc;
}
]],
  },
  {
    name = "gemm (stdlib/gemm.lua, 4096^3, persistent)",
    build = function() return tl.gemm.build({ m = 4096, n = 4096, k = 4096 }).kernel end,
  },
  {
    name = "gemm (StreamK)",
    build = function() return tl.gemm.build({ m = 1024, n = 1024, k = 16384, schedule = "streamk" }).kernel end,
  },
}

local nvcc = os.getenv "NVCC" or "/usr/local/cuda/bin/nvcc"
local have_nvcc = io.open(nvcc, "r")
if have_nvcc then have_nvcc:close() end
local have_time = io.open("/usr/bin/time", "r")
if have_time then have_time:close() end

print(("compile time, median of %d runs (tilua) / 5 runs (nvcc), %s"):format(reps, os.date "%Y-%m-%d"))
print(("%-12s %12s %12s %12s %12s %8s"):format("kernel", "tilua ms", "k:compile ms", "ptxas ms", "nvcc ms", "ratio"))
for _, kd in ipairs(kernels) do
  local times, ctimes, ptx = {}, {}, nil
  for _ = 1, reps do
    local t0 = now()
    local k = kd.build()
    local t1 = now()
    ptx = k:compile()
    times[#times + 1] = (now() - t0) * 1e3
    ctimes[#ctimes + 1] = (now() - t1) * 1e3
  end
  local t_tilua, t_compile = median(times), median(ctimes)
  local t_ptxas, t_nvcc = "-", "-"
  local path = os.tmpname()
  local f = io.open(path .. ".ptx", "w")
  f:write(ptx)
  f:close()
  if have_time then
    local ptxas = os.getenv "TILUA_PTXAS" or "/usr/local/cuda/bin/ptxas"
    local s = {}
    for _ = 1, 5 do
      local secs = wall(ptxas .. " -arch=sm_90a -o /dev/null " .. path .. ".ptx")
      if secs then s[#s + 1] = secs * 1e3 end
    end
    if #s > 0 then t_ptxas = ("%.1f"):format(median(s)) end
    if kd.cuda and have_nvcc then
      local cu = io.open(path .. ".cu", "w")
      cu:write(kd.cuda)
      cu:close()
      local n = {}
      for _ = 1, 5 do
        local secs = wall(nvcc .. " -arch=sm_90a -ptx -o /dev/null " .. path .. ".cu")
        if secs then n[#n + 1] = secs * 1e3 end
      end
      if #n > 0 then t_nvcc = median(n) end
      os.remove(path .. ".cu")
    end
  end
  os.remove(path .. ".ptx")
  os.remove(path)
  local ratio = type(t_nvcc) == "number" and ("%.0fx"):format(t_nvcc / t_tilua) or "-"
  print(("%-12s %12.3f %12.3f %12s %12s %8s"):format(kd.name, t_tilua, t_compile, t_ptxas,
    type(t_nvcc) == "number" and ("%.0f"):format(t_nvcc) or t_nvcc, ratio))
end
