-- tile_gemm_bias_relu.lua: a fused kernel as a tile program (docs/tileprog.md):
-- the GEMM of examples/tile_gemm.lua with its epilogue in the same kernel,
--
--   C[M, N] = relu(A[M, K] . B[N, K]^T + bias[N])   (bf16 in, f32 bias and accumulation, bf16 out)
--
-- The bias is a 256-wide tile of a vector, expanded to a row and broadcast
-- over the accumulator's rows; `tile-to-ptx` loads, for each thread, the
-- columns of the accumulator fragment it holds, adds and clamps in registers
-- before the stmatrix + TMA store of stdlib/gemm.lua's epilogue.
--
--   tilua examples/tile_gemm_bias_relu.lua [--m=M] [--n=N] [--k=K] [--emit=ir|ptx] [--stage=NAME]
--
-- On a GPU it runs on fresh random data and checks C against the plain
-- reference kernel of stdlib/gemm.lua and sampled CPU dot products; without
-- one it stops after ptxas ("SKIP: no GPU").
--   loadfile("examples/tile_gemm_bias_relu.lua")("--library") -> the example (tilua.check), with .build
local tl = require "tilua"
local check = require "tilua.check"

-- {=== the tile program
local function build()
  tl.new_module()
  local k = tl.tile_kernel("tile_gemm_bias_relu", {
    params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2), C = tl.tensor(tl.bf16, 2),
               bias = tl.tensor(tl.f32, 1), K = tl.i32 },
    cluster = { 1, 1, 1 } })
  k:define(function(k, p)
    local pid_m, pid_n = tl.program_id("x"), tl.program_id("y")
    local acc = tl.zeros({ 128, 256 }, tl.f32)
    acc = tl.for_tiles(p.K, { tile = 64, stages = 3 }, acc, function(kk, acc)
      local a = tl.load(p.A, { pid_m, kk }, { 128, 64 })
      local b = tl.load(p.B, { pid_n, kk }, { 256, 64 }) -- B stored [N, K]: dot takes it transposed
      return tl.dot(a, b, acc)
    end)
    local bias = tl.expand_dim(tl.load(p.bias, { pid_n }, { 256 }), 0) -- [1, 256]: a row over the tile
    acc = tl.maximum(acc + bias, 0.0)
    tl.store(p.C, { pid_m, pid_n }, acc:cast(tl.bf16))
  end)
  return k
end
-- }===

local o = { m = 1000, n = 1480, k = 520 } -- not multiples of the tile: TMA clips and zero-fills
for _, a in ipairs(... ~= "--library" and arg or {}) do
  local key, v = a:match "^%-%-([%w_-]+)=(.*)$"
  if key and key ~= "emit" and key ~= "stage" then o[key] = math.tointeger(tonumber(v)) or v end
end

local kernel
local function prepare()
  local t0 = os.clock()
  kernel = build()
  kernel:compile()
  print(("tile_gemm_bias_relu: script to PTX in %.1f ms (tile-to-ptx: %d stages)"):format((os.clock() - t0) * 1e3,
    #tl.last_stages))
  check.compile("tile_gemm_bias_relu", kernel)
end

-- run{seed, small} -> ok, summary
local function run(c)
  local M, N, K = o.m, o.n, o.k
  if c.small then M, N, K = 200, 296, 128 end
  local a <close> = tl.device.random(tl.bf16, M * K, c.seed)
  local b <close> = tl.device.random(tl.bf16, N * K, c.seed + 1)
  local bias <close> = tl.device.random(tl.f32, N, c.seed + 2)
  local d <close> = tl.device.alloc(tl.bf16, M * N)
  d:fill(0)
  kernel:run { grid = { (M + 127) // 128, (N + 255) // 256 },
               args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { d, { M, N } }, bias = { bias, { N } }, K = K } }
  -- the reference: stdlib/gemm.lua's plain kernel with its bias and relu epilogue
  local ref = tl.gemm.build { m = M, n = N, k = K, bias = true, activation = "relu" }
  local ok, report = ref:check { a = a, b = b, d = d, bias = bias, seed = c.seed }
  return ok, ("seed %d, %d x %d x %d on %s: %s"):format(c.seed, M, N, K, tl.device.info().name, report)
end

local example = { name = "tile_gemm_bias_relu", prepare = prepare, run = run, build = build,
                  grids = function() return { 1 } end }
if ... == "--library" then return example end
check.main(example)
