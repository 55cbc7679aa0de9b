-- gemm.lua: one configuration of the Hopper GEMM of stdlib/gemm.lua (tl.gemm),
-- D = A . B with bf16 inputs and f32 accumulation: built, verified, compiled to
-- PTX and assembled with ptxas; on a GPU run on fresh random data, checked
-- against a plain tilua reference kernel and sampled CPU dot products, and timed.
--
--   tilua examples/gemm.lua [--m=M] [--n=N] [--k=K] [--dtype=bf16|f16] [--bn=256]
--                           [--a-major=k|m] [--b-major=k|n] [--schedule=persistent|data_parallel]
--                           [--emit=ir|ptx] [--stage=NAME]
--
-- The default shape (1000 x 1480 x 520) is not a multiple of the tile: TMA clips
-- and zero-fills the edges. Without a GPU it stops after ptxas ("SKIP: no GPU").
local tl = require "tilua"

local o = { m = 1000, n = 1480, k = 520, dtype = "bf16" }
for _, a in ipairs(arg or {}) do
  local key, v = a:match "^%-%-([%w_-]+)=(.*)$"
  if key and key ~= "emit" and key ~= "stage" then
    key = key:gsub("-", "_")
    o[key] = math.tointeger(tonumber(v)) or v
  end
end
local seed = tonumber(os.getenv "TILUA_SEED") or os.time()

local g = tl.gemm.build(o)
local t0 = os.clock()
local ptx = g.kernel:compile()
print(("gemm: %s, %d x %d x %d, tile 128 x %d x %d, %d stages, grid %d; PTX %d bytes in %.1f ms")
  :format(g.cfg.dtype, g.cfg.m, g.cfg.n, g.cfg.k, g.cfg.bn, g.cfg.bk, g.cfg.stages, g.grid, #ptx, (os.clock() - t0) * 1e3))
tl.check_ptx("gemm", ptx)

tl.device.require()

local c = g.cfg
local ein = c.dtype == "f16" and tl.f16 or tl.bf16
local a = tl.device.random(ein, c.m * c.k, seed)
local b = tl.device.random(ein, c.n * c.k, seed + 1)
local d <close> = tl.device.alloc(c.out == "f16" and tl.f16 or tl.bf16, c.m * c.n)
d:fill(0)
g:run { a = a, b = b, d = d }
tl.device.synchronize()
local ok, report = g:check { a = a, b = b, d = d, seed = seed }
print(("gemm: seed %d on %s: %s"):format(seed, tl.device.info().name, report))
if not ok then
  print "gemm: FAILED"
  os.exit(1)
end
for _ = 1, 2 do g:run { a = a, b = b, d = d } end
local best = math.huge
for _ = 1, 5 do
  local ms = tl.device.time(function() for _ = 1, 10 do g:run { a = a, b = b, d = d } end end) / 10
  best = math.min(best, ms)
end
print(("gemm: OK, %.3f ms, %.1f TFLOP/s"):format(best, g.flops / best / 1e9))
