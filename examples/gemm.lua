-- gemm.lua: one configuration of the Hopper GEMM of stdlib/gemm.lua (tl.gemm),
-- D = A . B with bf16 inputs and f32 accumulation: built, verified, compiled to
-- PTX and assembled with ptxas; on a GPU run on fresh random data, checked
-- against a plain tilua reference kernel and sampled CPU dot products, and timed.
--
--   tilua examples/gemm.lua [--m=M] [--n=N] [--k=K] [--dtype=bf16|f16] [--bn=256] [--stages=S]
--                           [--a-major=k|m] [--b-major=k|n] [--consumers=cooperative|pingpong]
--                           [--schedule=persistent|data_parallel|streamk|splitk] [--cluster=1|2|4]
--                           [--bm=128|192|256|320] [--epi=32|64]
--                           [--emit=ir|ptx] [--stage=NAME]
--
-- The default shape (1000 x 1480 x 520) is not a multiple of the tile: TMA clips
-- and zero-fills the edges. Without a GPU it stops after ptxas ("SKIP: no GPU").
--   loadfile("examples/gemm.lua")("--library") -> the example (tilua.gpu.check)
local tl = require "tilua"
local check = require "tilua.gpu.check"

local o = { m = 1000, n = 1480, k = 520, dtype = "bf16" }
for _, a in ipairs(... ~= "--library" and arg or {}) do
  local key, v = a:match "^%-%-([%w_-]+)=(.*)$"
  if key and key ~= "emit" and key ~= "stage" then
    key = key:gsub("-", "_")
    o[key] = math.tointeger(tonumber(v)) or v
  end
end
-- The GEMMs of the checks, built once each (tl.gemm.build makes a module of its own).
local built = {}
local function gemm(shape)
  local key = ("%d/%d/%d"):format(shape.m, shape.n, shape.k)
  if built[key] then return built[key] end
  local cfg = {}
  for key2, v in pairs(o) do cfg[key2] = v end
  cfg.m, cfg.n, cfg.k = shape.m, shape.n, shape.k
  local g = tl.gemm.build(cfg)
  local t0 = os.clock()
  local ptx = g.kernel:compile()
  print(("gemm: %s, %d x %d x %d, tile %d x %d x %d, %d stages, %s consumers, %s schedule, grid %d; PTX %d bytes in %.1f ms")
    :format(g.cfg.dtype, g.cfg.m, g.cfg.n, g.cfg.k, g.cfg.bm, g.cfg.bn, g.cfg.bk, g.cfg.stages, g.cfg.consumers,
            g.cfg.schedule, g.grid, #ptx, (os.clock() - t0) * 1e3))
  tl.check_ptx("gemm", ptx)
  built[key] = g
  return g
end

-- The shape of a check: the command line's; small (under compute-sanitizer) 200 x
-- 296 x 128; for a grid request g, about g output tiles (none a multiple of the
-- tile), so that the persistent grid is 1 CTA, one per SM, or every SM walking
-- several tiles.
local function shape(c)
  if c.grid then
    local t = {} -- the tile of the configuration (its defaults)
    for key, v in pairs(o) do t[key] = v end
    t.m, t.n, t.k = 64, 64, 64
    local cf = tl.gemm.config(t)
    local bm, bn = cf.bm, cf.bn
    local tn = math.max(1, math.floor(math.sqrt(c.grid)))
    local tm = (c.grid + tn - 1) // tn
    return { m = tm * bm - 7, n = tn * bn - 8, k = 256 + 64 * (c.seed % 4) } -- TMA: rows of 16-byte multiples
  end
  if c.small then return { m = 200, n = 296, k = 128 } end
  return { m = o.m, n = o.n, k = o.k }
end

-- run{seed, grid, small} -> ok, summary (the check runs a reference kernel on the
-- GPU and samples CPU dot products); timed only as a script (check.main's last case).
local function run(c)
  local g = gemm(shape(c))
  local cf = g.cfg
  local ein = cf.dtype == "f16" and tl.f16 or tl.bf16
  local a <close> = tl.device.random(ein, cf.m * cf.k, c.seed)
  local b <close> = tl.device.random(ein, cf.n * cf.k, c.seed + 1)
  local d <close> = tl.device.alloc(cf.out == "f16" and tl.f16 or tl.bf16, cf.m * cf.n)
  d:fill(0)
  g:run { a = a, b = b, d = d }
  tl.device.synchronize()
  local ok, report = g:check { a = a, b = b, d = d, seed = c.seed }
  local what = ("seed %d, %d x %d x %d, grid %d on %s: %s"):format(c.seed, cf.m, cf.n, cf.k, g.grid,
    tl.device.info().name, report)
  if not ok or not c.timed then return ok, what end
  for _ = 1, 2 do g:run { a = a, b = b, d = d } end
  local best = math.huge
  for _ = 1, 5 do
    local ms = tl.device.time(function() for _ = 1, 10 do g:run { a = a, b = b, d = d } end end) / 10
    best = math.min(best, ms)
  end
  return true, ("%s; %.3f ms, %.1f TFLOP/s"):format(what, best, g.flops / best / 1e9)
end

local example = { name = "gemm", prepare = function() gemm(shape { small = check.small() }) end, run = run,
                  grids = function(sms) return check.grids(sms) end }
if ... == "--library" then return example end
check.main(example, { { timed = not check.small() } })
