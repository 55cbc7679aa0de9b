-- flash_attention.lua: one configuration of the Hopper attention forward of
-- stdlib/attention.lua (tl.attention, the FlashAttention-3 design):
-- O = softmax(Q K^T * scale) V per head, bf16 in and out, f32 accumulation, the
-- log-sum-exp of every row; built, verified, compiled to PTX and assembled
-- with ptxas; on a GPU run on fresh random data, checked against a plain
-- reference kernel on every element (and CPU rows), and timed.
--
--   tilua examples/flash_attention.lua [--b=B] [--h=H] [--hkv=HKV] [--sq=SQ] [--skv=SKV] [--d=64|128|256]
--                                      [--causal] [--dtype=bf16|f16] [--bn=BN] [--consumers=2|3]
--                                      [--stages=S] [--schedule=persistent|data_parallel]
--                                      [--emit=ir|ptx] [--stage=NAME]
--
-- The default problem (2 x 8 heads, 2 key heads, 1000 queries and keys, head
-- dim 128) is not a multiple of the tile: TMA clips and zero-fills the edges,
-- the keys past the end are masked. Without a GPU it stops after ptxas.
--   loadfile("examples/flash_attention.lua")("--library") -> the example (tilua.gpu.check)
local tl = require "tilua"
local check = require "tilua.gpu.check"

local o = { b = 2, h = 8, hkv = 2, sq = 1000, skv = 1000, d = 128 }
for _, a in ipairs(... ~= "--library" and arg or {}) do
  local key, v = a:match "^%-%-([%w_-]+)=(.*)$"
  if key and key ~= "emit" and key ~= "stage" then o[key] = math.tointeger(tonumber(v)) or v end
  if a == "--causal" then o.causal = true end
end

-- The kernels of the checks, built once each (tl.attention.build makes a module of its own).
local built = {}
local function attention(shape)
  local cfg = {}
  for key, v in pairs(o) do cfg[key] = v end
  for key, v in pairs(shape) do cfg[key] = v end
  local key = ("%d/%d/%d/%d/%d/%d/%s"):format(cfg.b, cfg.h, cfg.hkv, cfg.sq, cfg.skv, cfg.sms or 0, tostring(cfg.causal))
  if built[key] then return built[key] end
  local a = tl.attention.build(cfg)
  local t0 = os.clock()
  local ptx = a.kernel:compile()
  local c = a.cfg
  print(("flash_attention: %s, %d x %d heads (%d key heads), %d x %d, d %d%s, tile %d x %d, %d consumers, %d stages, grid %d; PTX %d bytes in %.1f ms")
    :format(c.dtype, c.b, c.h, c.hkv, c.sq, c.skv, c.d, c.causal and ", causal" or "", c.bm, c.bn, c.consumers, c.stages,
            a.grid, #ptx, (os.clock() - t0) * 1e3))
  tl.check_ptx("flash_attention", ptx)
  built[key] = a
  return a
end

-- The problem of a check: the command line's; small (under compute-sanitizer)
-- 1 x 2 heads, one key head, 200 x 300, d 64; for a grid request g, about 2 g
-- tiles on g CTAs (each persistent CTA walks two), ragged.
local function shape(c)
  if c.grid then
    local h = 2
    local tm = math.max(1, (2 * c.grid + h - 1) // h)
    return { b = 1, h = h, hkv = 1, sq = tm * 128 - 5, skv = 333 + 64 * (c.seed % 3), d = 128, sms = c.grid,
             causal = c.seed % 2 == 1 }
  end
  if c.small then return { b = 1, h = 2, hkv = 1, sq = 200, skv = 300, d = 64 } end
  return {}
end

-- run{seed, grid, small} -> ok, summary; timed only as a script (check.main's last case).
local function run(cs)
  local a = attention(shape(cs))
  local c = a.cfg
  local et = c.dtype == "f16" and tl.f16 or tl.bf16
  local q <close> = tl.device.random(et, c.b * c.h * c.sq * c.d, cs.seed)
  local k <close> = tl.device.random(et, c.b * c.hkv * c.skv * c.d, cs.seed + 1)
  local v <close> = tl.device.random(et, c.b * c.hkv * c.skv * c.d, cs.seed + 2)
  local out <close> = tl.device.alloc(et, c.b * c.h * c.sq * c.d)
  local lse <close> = tl.device.alloc(tl.f32, c.b * c.h * c.sq)
  out:fill(0)
  local args = { q = q, k = k, v = v, o = out, lse = lse }
  a:run(args)
  tl.device.synchronize()
  local ok, report = a:check(args)
  local what = ("seed %d, %d x %d heads, %d x %d, d %d%s, grid %d on %s: %s"):format(cs.seed, c.b, c.h, c.sq, c.skv, c.d,
    c.causal and " causal" or "", a.grid, tl.device.info().name, report)
  if not ok or not cs.timed then return ok, what end
  for _ = 1, 2 do a:run(args) end
  local best = math.huge
  for _ = 1, 5 do
    local ms = tl.device.time(function() for _ = 1, 10 do a:run(args) end end) / 10
    best = math.min(best, ms)
  end
  return true, ("%s; %.3f ms, %.1f TFLOP/s"):format(what, best, a.flops / best / 1e9)
end

local example = { name = "flash_attention", prepare = function() attention(shape { small = check.small() }) end, run = run,
                  grids = function(sms) return check.grids(sms) end }
if ... == "--library" then return example end
check.main(example, { { timed = not check.small() } })
