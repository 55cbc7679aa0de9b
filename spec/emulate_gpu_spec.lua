-- The CPU emulator against the GPU ("for small sizes every example and the
-- GEMM produce the same bytes on the emulator as on the GPU";
-- docs/protocol.md, "The emulator against the GPU"). Every example that
-- launches a kernel, and the stdlib GEMM, runs the same kernel with the same
-- fresh random inputs on the GPU and on tl.emulate, at several grids and
-- seeds, and the output buffers must be equal byte for byte.
--
-- Exact comparison everywhere: the examples compute in integers or copy
-- bytes, vector_add adds f32 (one IEEE rounding on both); the GEMM's inputs are
-- small integers or short dyadic fractions whose every partial sum is exact in
-- f32, so the order in which the tensor cores add them cannot show (the
-- emulator adds a k16 slice exactly and rounds once per wgmma). With full
-- bf16 random data the orders differ: that run is compared to one bf16 ulp and
-- prints how many elements differ; so is the row softmax of
-- tile_gemm_softmax.lua (ex2.approx on the GPU, the exact exp on the emulator).
--
-- With a GPU (tools/gpu test) every test runs. Without one they report pending,
-- except the coverage test and the run of this spec against the stand-in
-- driver (spec/c/fake_cuda.c, TILUA_FAKE_CUDA): in that run every case is
-- emulated and launched, its buffers uploaded and read back, and since the
-- stand-in's kernels do nothing the outputs must come back as uploaded.
-- TILUA_SEED sets the seeds (ctest fixes it: spec/tests.cmake; printed with every run).
local H = dofile "spec/helper.lua"
local tl = require "tilua"
local PH = dofile "spec/protocol_helper.lua"

local GPU = tl.device.available()
local STANDIN = GPU and tl.device.info().name == "Fake GPU" -- spec/c/fake_cuda.c
local FAKE = os.getenv "TILUA_FAKE_CUDA"
if FAKE == "" then FAKE = nil end
local SEED = require("tilua.gpu.check").seed() -- ctest fixes it (spec/tests.cmake)

local function gpu()
  if not GPU then pending("no GPU: " .. tl.device.error()) end
end

-- {=====================================================================
-- Inputs: seeded on the host, the same bytes for both
-- ======================================================================

local function rng(seed) -- xorshift32
  local s = (seed * 2654435761 + 0x9e3779b9) & 0xffffffff
  if s == 0 then s = 1 end
  return function()
    s = s ~ ((s << 13) & 0xffffffff)
    s = s ~ (s >> 17)
    s = s ~ ((s << 5) & 0xffffffff)
    return s
  end
end

local function random_bytes(n, seed)
  local r, t = rng(seed), {}
  for i = 1, (n + 3) // 4 do t[i] = string.pack("<I4", r()) end
  return table.concat(t):sub(1, n)
end

-- n finite normal f32 values of either sign, magnitudes 2^-40 .. 2^41 (no NaN,
-- whose payload the GPU does not keep; no subnormal)
local function random_f32(n, seed)
  local r, t = rng(seed), {}
  for i = 1, n do
    local x = r()
    t[i] = string.pack("<I4", (x & 0x80000000) | ((87 + (x >> 8) % 81) << 23) | (r() & 0x7fffff))
  end
  return table.concat(t)
end

local ints, longs = H.i32s, H.i64s

-- }=====================================================================

-- {=====================================================================
-- Running both and comparing
-- ======================================================================

local function first_difference(a, b)
  for i = 1, math.min(#a, #b) do
    if a:byte(i) ~= b:byte(i) then return i end
  end
  if #a ~= #b then return math.min(#a, #b) + 1 end
end

local function count_differences(a, b)
  local n = 0
  for i = 1, math.min(#a, #b) do
    if a:byte(i) ~= b:byte(i) then n = n + 1 end
  end
  return n + math.abs(#a - #b)
end

local function same(what, name, a, b, a_is, b_is)
  local at = first_difference(a, b)
  assert(not at, ("%s: %s differs at byte %d of %d (%s %02x, %s %02x; %d bytes differ)")
    :format(what, name, (at or 1) - 1, #a, a_is, a:byte(at or 1) or 0, b_is, b:byte(at or 1) or 0,
            count_differences(a, b)))
end

-- outs: { name, init (the bytes uploaded), gpu, emu [, emu2] } per output
-- buffer. On the GPU: gpu and emu equal byte for byte. On the stand-in driver
-- (standin), whose kernels do nothing: gpu as uploaded, and emu equal to emu2,
-- the emulator under another schedule. Either way the emulator must have
-- written something (else the comparison says nothing).
local function check_outputs(what, outs, standin)
  local changed, names = false, {}
  for _, o in ipairs(outs) do
    if o.compare == false then goto next end
    names[#names + 1] = o.name
    changed = changed or o.emu ~= o.init
    if standin then
      assert(o.gpu == o.init, ("%s: %s came back from the stand-in driver changed"):format(what, o.name))
      same(what, o.name, o.emu, o.emu2, "random schedule", "adversarial schedule")
    else
      same(what, o.name, o.gpu, o.emu, "GPU", "emulator")
    end
    ::next::
  end
  assert(changed, what .. ": the emulator wrote none of the outputs")
  print(("%s: %s %s"):format(what, table.concat(names, ", "), standin
    and "launched on the stand-in driver and read back unchanged; emulated, the same under two schedules"
    or "equal byte for byte on the GPU and the emulator"))
end

-- Kernel k on the emulator: a random schedule (seed), and on the stand-in
-- driver an adversarial one too; each must end cleanly. -> r, r2 (or false),
-- the seconds of the first
local function emulate_twice(k, grid, args, seed)
  local t0 = os.clock()
  local r = tl.emulate(k, { grid = grid, args = args, policy = "random", seed = seed })
  assert(r.ok, r.report)
  local emu_s = os.clock() - t0
  local r2 = STANDIN and tl.emulate(k, { grid = grid, args = args, policy = "adversarial" })
  assert(not r2 or r2.ok, r2 and r2.report)
  return r, r2, emu_s
end

-- both(k, grid, args, outputs, seed) -> outs, emulator result: kernel k on the
-- emulator (random policy) and on the GPU, with the same arguments: numbers, or
-- strings of bytes (a fresh buffer each; on the GPU a device buffer); outputs:
-- { {argument index, name [, false: read back, not compared]}, ... }.
local function both(k, grid, args, outputs, seed)
  local r, r2, emu_s = emulate_twice(k, grid, args, seed)
  local dev, dargs = {}, {}
  for i, a in ipairs(args) do
    if type(a) == "string" then
      dev[i] = tl.device.from(tl.u8, a)
      dargs[i] = dev[i]
    else
      dargs[i] = a
    end
  end
  k:launch { grid = grid, args = dargs }
  tl.device.synchronize()
  local outs = {}
  for _, o in ipairs(outputs) do
    outs[#outs + 1] = { name = o[2], init = args[o[1]], gpu = dev[o[1]]:to_string(), emu = r.read(o[1]),
                        emu2 = r2 and r2.read(o[1]), compare = o[3] }
  end
  for _, b in pairs(dev) do b:free() end
  return outs, r, emu_s
end

-- An example as a library, in a module of its own (the examples build their
-- kernels into the current module), loaded once.
local libs = {}
local function example(name)
  if not libs[name] then
    tl.new_module()
    libs[name] = assert(loadfile("examples/" .. name .. ".lua"))("--library")
  end
  return libs[name]
end

-- }=====================================================================

-- {=====================================================================
-- The cases: one per example that launches a kernel (`example` names its
-- file), each run at several grids with a fresh seed
-- ======================================================================

local cases = {}

cases[#cases + 1] = { example = "vector_add", name = "vector_add (f32 adds)", run = function(seed)
  local k = example("vector_add").kernel
  for _, grid in ipairs { 1, 2, 5 } do
    local n = grid * 256 - 37 -- not a multiple of the block
    local args = { random_f32(n, seed), random_f32(n, seed + 1), ("\255"):rep(4 * n), n }
    local outs = both(k, grid, args, { { 3, "c" } }, seed)
    check_outputs(("vector_add: grid %d, %d elements, seed %d"):format(grid, n, seed), outs, STANDIN)
    seed = seed + 2
  end
end }

-- The ring copies: the examples' own configurations (16 KiB stages) and the
-- small ones of the protocol specs; each CTA's ring wraps at least twice and the
-- size is a multiple of neither the chunk nor 16.
local RINGS = {
  { "ring_copy", PH.rc, { stages = 4, chunk = 16384, consumer_warps = 4 } },
  { "ring_copy", PH.rc, { stages = 4, chunk = 16384, consumer_warps = 1, store = "bulk", inflight = 2 } },
  { "pipeline_ring_copy", PH.prc, { stages = 4, chunk = 16384, consumer_warps = 4 } },
  { "pipeline_ring_copy", PH.prc, { stages = 3, chunk = 16384, consumer_warps = 2, mode = "warp_specialized" } },
}
local SMALL = { rc = "ring_copy", rcb = "ring_copy", prc = "pipeline_ring_copy", prc2 = "pipeline_ring_copy",
                prcws = "pipeline_ring_copy" }
for _, c in ipairs(PH.cases) do
  RINGS[#RINGS + 1] = { SMALL[c.key], nil, c }
end

for _, ex in ipairs { "ring_copy", "pipeline_ring_copy" } do
  cases[#cases + 1] = { example = ex, name = ex .. " (its configurations and small rings)", run = function(seed)
    for _, v in ipairs(RINGS) do
      if v[1] == ex then
        local k, label, per_cta
        if v[2] then
          local cfg = v[3]
          k = v[2].build(cfg)
          label = ("%s %d x %d B, %d consumer warp(s)%s"):format(ex, cfg.stages, cfg.chunk, cfg.consumer_warps,
            cfg.store == "bulk" and ", bulk stores" or cfg.mode and (", " .. cfg.mode) or "")
          per_cta = (2 * cfg.stages + 1) * cfg.chunk
        else
          k = v[3].build()
          label = v[3].name .. " (small)"
          per_cta = v[3].n
        end
        for _, grid in ipairs { 1, 2, 3 } do
          local n = per_cta * grid + 16 * (seed % 7) + 1 + seed % 15
          local outs = both(k, grid, { random_bytes(n, seed), ("\0"):rep(n), n }, { { 2, "dst" } }, seed)
          check_outputs(("%s: grid %d, %d bytes, seed %d"):format(label, grid, n, seed), outs, STANDIN)
          seed = seed + 1
        end
      end
    end
  end }
end

cases[#cases + 1] = { example = "seq_bar_pingpong", name = "seq_bar_pingpong (log, counts, final values)", run = function(seed)
  local k = example("seq_bar_pingpong").kernel
  for _, s in ipairs { { 1, 5 }, { 2, 7 }, { 3, 4 } } do
    local grid, rounds = s[1], s[2]
    local args = { random_bytes(4 * grid * rounds, seed), random_bytes(4 * grid * rounds, seed + 1),
                   ("\255"):rep(8 * grid * rounds), ("\0"):rep(4 * grid), ("\0"):rep(4 * grid), rounds }
    local outs = both(k, grid, args, { { 3, "log" }, { 4, "counts" }, { 5, "out" } }, seed)
    check_outputs(("seq_bar_pingpong: grid %d, %d rounds, seed %d"):format(grid, rounds, seed), outs, STANDIN)
    seed = seed + 2
  end
end }

cases[#cases + 1] = { example = "cluster_dsmem", name = "cluster_dsmem (clusters of 2)", run = function(seed)
  local k = example("cluster_dsmem").kernel
  for _, grid in ipairs { 2, 4, 6 } do
    local total = 256 * grid
    local outs = both(k, grid, { random_bytes(4 * total, seed), ("\255"):rep(8 * total), total }, { { 2, "out" } }, seed)
    check_outputs(("cluster_dsmem: grid %d, seed %d"):format(grid, seed), outs, STANDIN)
    seed = seed + 1
  end
end }

cases[#cases + 1] = { example = "splitk_block_striped", name = "splitk_block_striped (workspace, sums, maxima, chain, flags)",
  run = function(seed)
    local build = example("splitk_block_striped").build
    for _, s in ipairs { { 1, 2, 8 }, { 1, 3, 4 }, { 2, 2, 4 } } do -- row blocks, splits, k per split
      local RB, P, KS = s[1], s[2], s[3]
      local M, K = RB * 2048, P * KS
      local args = { random_bytes(4 * K * M, seed), random_bytes(4 * K, seed + 1), random_bytes(4 * P * M, seed + 2),
                     ("\0"):rep(4 * M), string.pack("<i4", -2147483648):rep(M), ("\0"):rep(4 * M), ("\0"):rep(4 * RB) }
      local outs = both(build(RB, P, KS), P * RB, args,
        { { 3, "ws" }, { 4, "sum" }, { 5, "max" }, { 6, "chain" }, { 7, "flags" } }, seed)
      check_outputs(("splitk_block_striped: %d row block(s) x %d splits of %d, grid %d, seed %d"):format(RB, P, KS,
        P * RB, seed), outs, STANDIN)
      seed = seed + 3
    end
  end }

-- The MODS probes: the sums compared byte for byte; SM ids, timestamps and
-- durations are the machine's (the emulator's SM id is the CTA, its clock the
-- steps taken), so each side passes the example's own host check instead.
cases[#cases + 1] = { example = "mods_probes", name = "mods_probes (sums; SM ids and windows by the host check)",
  run = function(seed)
    local ex = example("mods_probes")
    for _, grid in ipairs { 2, 4 } do
      local items = 7 * grid + 5
      local x = random_bytes(4 * 128 * items, seed)
      local args = { x, ("\0"):rep(4 * items), ("\255"):rep(4 * grid), ("\255"):rep(8 * grid), ("\255"):rep(8 * grid), items }
      local outs = both(ex.kernel, grid, args, { { 2, "sums" }, { 3, "smid", false }, { 4, "start", false },
                                                  { 5, "duration", false } }, seed)
      local what = ("mods_probes: grid %d, %d items, seed %d"):format(grid, items, seed)
      check_outputs(what, outs, STANDIN)
      local function verify(side, sms)
        local ok, msg = ex.verify(seed, grid, items, sms, ints(x), ints(outs[1][side]), ints(outs[2][side]),
                                  longs(outs[3][side]), longs(outs[4][side]))
        assert(ok, side .. ": " .. msg)
      end
      verify("emu", grid) -- the emulator's SM ids are the CTAs
      if not STANDIN then verify("gpu", tl.device.sm_count()) end
      seed = seed + 1
    end
  end }

-- }=====================================================================

-- {=====================================================================
-- The GEMM (stdlib/gemm.lua, examples/gemm.lua): the kernel the GPU runs, and
-- for the emulator the same kernel with its tile scheduler lowered
-- (PH.lowered_gemm). `sms` fixes the persistent and StreamK
-- grids, so both plan the same schedule on any GPU.
-- ======================================================================


-- n values of a kind: "int" small integers in [-4, 4]; "dyadic" +-m / 2^e with
-- m < 8, e < 3 (every product a multiple of 1/16 below 49: with K <= 256 every
-- partial sum is exact in f32); "full" any bf16 / f16 in [-1, 1).
local function gemm_values(kind, n, seed)
  local r, t = rng(seed), {}
  for i = 1, n do
    local x = r()
    if kind == "int" then t[i] = x % 9 - 4
    elseif kind == "dyadic" then t[i] = (x & 1 == 1 and -1 or 1) * ((x >> 1) % 8) / (1 << ((x >> 4) % 3))
    else t[i] = (x % 65536) / 32768 - 1 end
  end
  return t
end

local function encode(vals, dtype)
  local t = {}
  for i, v in ipairs(vals) do t[i] = string.pack("<I2", tl.device.float_bits(v, dtype)) end
  return table.concat(t)
end

local function decode(s, dtype, i)
  local h = string.unpack("<I2", s, 2 * i - 1)
  if dtype == "bf16" then return (string.unpack("<f", string.pack("<I4", h << 16))) end
  local e, m = (h >> 10) & 31, h & 1023
  local v = e == 0 and m * 2.0 ^ -24 or (1 + m / 1024) * 2.0 ^ (e - 15)
  return (h & 0x8000 ~= 0) and -v or v
end

-- The GEMM of cfg on both with inputs of `kind` -> outs, g; the emulator runs
-- the kernel after `pipeline` (default: its tile scheduler lowered).
local function gemm_both(cfg, kind, seed, pipeline)
  local g = tl.gemm.build(cfg)
  local k = PH.lowered_gemm(g, pipeline)
  local c = g.cfg
  local A = encode(gemm_values(kind, c.m * c.k, seed), c.dtype)
  local B = encode(gemm_values(kind, c.n * c.k, seed + 1), c.dtype)
  local D = ("\255"):rep(2 * c.m * c.n)
  local ashape = c.a_major == "k" and { c.m, c.k } or { c.k, c.m }
  local bshape = c.b_major == "k" and { c.n, c.k } or { c.k, c.n }
  local args = { { data = A, shape = ashape }, { data = B, shape = bshape }, { data = D, shape = { c.m, c.n } } }
  if c.schedule == "streamk" then args[4] = { bytes = math.max(16, g.workspace_bytes) } end
  local r, r2 = emulate_twice(k, g.grid, args, seed)
  local a, b, d = tl.device.from(tl.u8, A), tl.device.from(tl.u8, B), tl.device.from(tl.u8, D)
  g:run { a = a, b = b, d = d }
  tl.device.synchronize()
  local outs = { { name = "D", init = D, gpu = d:to_string(), emu = r.read(3), emu2 = r2 and r2.read(3) } }
  a:free()
  b:free()
  d:free()
  if g._workspace then g._workspace:free() end
  return outs, g
end

local function gemm_label(cfg, g)
  local extra = {}
  for _, key in ipairs { "bm", "schedule", "consumers", "a_major", "b_major", "dtype", "splits", "sms", "cluster" } do
    local v = cfg[key]
    if v then extra[#extra + 1] = key .. " " .. (type(v) == "table" and table.concat(v, "x") or tostring(v)) end
  end
  return ("gemm %d x %d x %d, bn %d, %s, grid %d"):format(cfg.m, cfg.n, cfg.k, cfg.bn, table.concat(extra, ", "), g.grid)
end

local GEMMS = {
  { m = 128, n = 256, k = 128, bn = 128, schedule = "data_parallel" },                -- 2 tiles, 2 CTAs
  { m = 128, n = 256, k = 128, bn = 128, schedule = "persistent", sms = 1 },           -- 2 tiles on 1 CTA
  { m = 128, n = 256, k = 128, bn = 256, schedule = "persistent", sms = 2 },           -- m64n256, 1 tile
  { m = 128, n = 128, k = 128, bn = 64, consumers = "pingpong", schedule = "persistent", sms = 1 }, -- 2 tiles a warpgroup
  { m = 128, n = 128, k = 128, bn = 64, schedule = "splitk", splits = 2, sms = 4 },    -- the fixup through the workspace
  { m = 128, n = 128, k = 128, bn = 64, a_major = "m", b_major = "n", schedule = "data_parallel" }, -- MN-major
  { m = 100, n = 72, k = 136, bn = 64, schedule = "data_parallel" },                    -- TMA zero fill, clipped stores
  { m = 128, n = 64, k = 256, bn = 64, dtype = "f16", out = "f16", schedule = "data_parallel" },
}
-- the kernel forms of examples/gemm_forms.lua, small
local FORMS = {
  { m = 256, n = 128, k = 128, bn = 64, cluster = { 2, 1 }, schedule = "data_parallel" },   -- B multicast
  { m = 128, n = 256, k = 128, bn = 64, cluster = { 1, 2 }, schedule = "data_parallel" },   -- A multicast
  { m = 256, n = 128, k = 128, bn = 64, cluster = { 2, 2 }, schedule = "data_parallel" },   -- both
  { m = 128, n = 256, k = 128, bn = 64, consumers = "pingpong", schedule = "persistent", sms = 1 }, -- one ring
  { m = 256, n = 128, k = 128, bn = 64, bm = 256, schedule = "data_parallel" },             -- 2 slices a warpgroup
  { m = 320, n = 64, k = 128, bn = 64, bm = 320, schedule = "data_parallel" },              -- 2 + 3 slices
  { m = 192, n = 64, k = 128, bn = 64, bm = 192, schedule = "data_parallel" },              -- 3 warpgroups
  { m = 128, n = 152, k = 128, bn = 80, schedule = "data_parallel" },                       -- 16-column epilogue sub-tiles
  { m = 512, n = 152, k = 128, bm = 256, bn = 160, cluster = { 2, 1 }, schedule = "data_parallel" }, -- 256 x 160, B multicast
  { m = 128, n = 128, k = 128, bm = 64, bn = 128, wgs = 1, cluster = { 2, 1 }, schedule = "data_parallel" }, -- one warpgroup
}

cases[#cases + 1] = { example = "gemm", name = "the stdlib GEMM (8 configurations, exact inputs)", run = function(seed)
  for i, cfg in ipairs(GEMMS) do
    -- (on the stand-in driver, which computes nothing, one input kind each, alternating: time)
    for _, kind in ipairs(STANDIN and { i % 2 == 1 and "int" or "dyadic" } or { "int", "dyadic" }) do
      local outs, g = gemm_both(cfg, kind, seed)
      check_outputs(("%s, %s inputs, seed %d"):format(gemm_label(cfg, g), kind, seed), outs, STANDIN)
      seed = seed + 2
    end
  end
end }

-- the same at the nvvm level: the emulator runs the kernel after the whole ptx
-- pipeline (TMA, wgmma, stmatrix as nvvm ops; emulate_nvvm_mma.lua), the GPU
-- the PTX emitted from it (split-K left out: its lowered generic barrier is
-- not modelled yet)
cases[#cases + 1] = { example = "gemm", name = "the stdlib GEMM after the whole ptx pipeline (7 configurations)", run = function(seed)
  for i, cfg in ipairs(GEMMS) do
    if cfg.schedule ~= "splitk" then
      local kind = i % 2 == 1 and "int" or "dyadic"
      local outs, g = gemm_both(cfg, kind, seed, "ptx")
      check_outputs(("nvvm level: %s, %s inputs, seed %d"):format(gemm_label(cfg, g), kind, seed), outs, STANDIN)
      seed = seed + 2
    end
  end
end }

-- the kernel forms of examples/gemm_forms.lua (clusters, ping-pong's shared
-- ring, tiles of 256, 320 and 192 rows, 256 x 160 and one warpgroup's 64 x 128
-- in clusters), at the authoring level and at the nvvm level
cases[#cases + 1] = { example = "gemm_forms", name = "the stdlib GEMM's kernel forms (10, both levels)", run = function(seed)
  for i, cfg in ipairs(FORMS) do
    for _, pipeline in ipairs { false, "ptx" } do
      local kind = i % 2 == 1 and "int" or "dyadic"
      local outs, g = gemm_both(cfg, kind, seed, pipeline or nil)
      check_outputs(("%s%s, %s inputs, seed %d"):format(pipeline and "nvvm level: " or "", gemm_label(cfg, g), kind, seed),
        outs, STANDIN)
      seed = seed + 2
    end
  end
end }

-- {=====================================================================
-- The tile programs (examples/tile_gemm.lua, tile_gemm_bias_relu.lua): the
-- kernel tile-to-ptx compiles, launched with buffers and shapes, and for the
-- emulator the same program lowered up to its tile scheduler
-- (PH.lowered_tile), on as many persistent CTAs as the launch takes.
-- ======================================================================

local function tile_both(name, M, N, K, seed)
  local k = example(name).build()
  k:compile()
  local kop = PH.lowered_tile(k)
  local A = encode(gemm_values("int", M * K, seed), "bf16")
  local B = encode(gemm_values("int", N * K, seed + 1), "bf16")
  local bias_vals, bias = gemm_values("int", N, seed + 2), {}
  for i, v in ipairs(bias_vals) do bias[i] = string.pack("<f", v) end
  bias = table.concat(bias)
  local C = ("\255"):rep(2 * M * N)
  local programs = { (M + 127) // 128, (N + 255) // 256 }
  local grid = math.min(tl.device.sm_count(), programs[1] * programs[2])
  local values = { ["map:A"] = { data = A, shape = { M, K } }, ["map:B"] = { data = B, shape = { N, K } },
                   ["map:C"] = { data = C, shape = { M, N } }, ["ptr:bias"] = bias, ["dim:bias:0"] = N,
                   ["arg:K"] = K, ["programs:x"] = programs[1], ["programs:y"] = programs[2] }
  local args, at = PH.params_args(kop, values)
  local c = at["map:C"]
  local r, r2 = emulate_twice(kop, grid, args, seed)
  local a, b, d, bb = tl.device.from(tl.u8, A), tl.device.from(tl.u8, B), tl.device.from(tl.u8, C), tl.device.from(tl.u8, bias)
  k:run { grid = programs, args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { d, { M, N } }, bias = { bb, { N } }, K = K } }
  local outs = { { name = "C", init = C, gpu = d:to_string(), emu = r.read(c), emu2 = r2 and r2.read(c) } }
  for _, x in ipairs { a, b, d, bb } do x:free() end
  return outs, grid
end

for _, name in ipairs { "tile_gemm", "tile_gemm_bias_relu" } do
  cases[#cases + 1] = { example = name, name = name .. " (tile-to-ptx; edges, persistent CTAs walking tiles)", run = function(seed)
    for _, s in ipairs { { 200, 296, 136 }, { 128, 256, 64 } } do
      local outs, grid = tile_both(name, s[1], s[2], s[3], seed)
      check_outputs(("%s %d x %d x %d, grid %d, seed %d"):format(name, s[1], s[2], s[3], grid, seed), outs, STANDIN)
      seed = seed + 3
    end
  end }
end

-- The row softmax (examples/tile_gemm_softmax.lua): exp is ex2.approx on the
-- GPU and the exact value rounded to f32 on the emulator, so a bf16 result may
-- round the other way: compared within one bf16 ulp (2^-7 relative, or 2^-24
-- near zero), the count of differing elements printed. On the stand-in driver
-- as the others (unchanged; the emulator the same under two schedules).
cases[#cases + 1] = { example = "tile_gemm_softmax", name = "tile_gemm_softmax (tile-to-ptx; row reductions; within a bf16 ulp: ex2.approx)",
                      within = true, run = function(seed)
  local ex = example("tile_gemm_softmax")
  local k = ex.build()
  k:compile()
  local kop = PH.lowered_tile(k)
  for _, s in ipairs { { 200, 136 }, { 128, 64 } } do
    local M, N, K = s[1], ex.N, s[2]
    local A = encode(gemm_values("int", M * K, seed), "bf16")
    local B = encode(gemm_values("int", N * K, seed + 1), "bf16")
    local C = ("\255"):rep(2 * M * N)
    local grid = math.min(tl.device.sm_count(), (M + 127) // 128)
    local values = { ["map:A"] = { data = A, shape = { M, K } }, ["map:B"] = { data = B, shape = { N, K } },
                     ["map:C"] = { data = C, shape = { M, N } }, ["arg:K"] = K, ["arg:scale"] = 1 / 16,
                     ["programs:x"] = (M + 127) // 128, ["programs:y"] = 1 }
    local args, at = PH.params_args(kop, values)
    local c = at["map:C"]
    local r, r2 = emulate_twice(kop, grid, args, seed)
    local a, b, d = tl.device.from(tl.u8, A), tl.device.from(tl.u8, B), tl.device.from(tl.u8, C)
    k:run { grid = { (M + 127) // 128, 1 }, args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { d, { M, N } }, K = K, scale = 1 / 16 } }
    local gpu_c, emu_c = d:to_string(), r.read(c)
    for _, x in ipairs { a, b, d } do x:free() end
    local what = ("tile_gemm_softmax %d x %d x %d, grid %d, seed %d"):format(M, N, K, grid, seed)
    if STANDIN then
      check_outputs(what, { { name = "C", init = C, gpu = gpu_c, emu = emu_c, emu2 = r2.read(c) } }, true)
    else
      local differ = 0
      for i = 1, M * N do
        local x, y = decode(gpu_c, "bf16", i), decode(emu_c, "bf16", i)
        if x ~= y then
          differ = differ + 1
          assert(math.abs(x - y) <= 2.0 ^ -7 * math.abs(y) + 2.0 ^ -24,
                 ("%s: C[%d] GPU %.9g, emulator %.9g"):format(what, i - 1, x, y))
        end
      end
      print(("%s: C within a bf16 ulp on the GPU and the emulator (%d of %d elements differ)"):format(what, differ, M * N))
    end
    seed = seed + 3
  end
end }

-- The programs without a dot (examples/tile_rows.lua, stdlib/rows.lua): the
-- lowered kernel emulated, the same seed's inputs on the GPU. The transposes
-- move bytes and the reductions add and compare f32 in the lowered code's
-- order on both: the same bytes.
cases[#cases + 1] = { example = "tile_rows", name = "tile_rows (tl.rows: transposes, row and column reductions)", run = function(seed)
  local ex = example("tile_rows")
  for _, c in ipairs { { "transpose_bf16", { 72, 104 } }, { "transpose_f32", { 65, 33 } }, { "row_sum", { 3, 500 } },
                       { "row_max", { 2, 300 } }, { "col_sum", { 70, 300 } } } do
    local o = { seed = seed, size = c[2] }
    local emu, _, host = ex.execute(c[1], { seed = seed, size = c[2], emulate = true, policy = "random" })
    assert(emu, _)
    local emu2 = STANDIN and assert(ex.execute(c[1], { seed = seed, size = c[2], emulate = true, policy = "adversarial" }))
    local gpu_bytes = ex.execute(c[1], o)
    local outs = {}
    for n, t in pairs(host) do
      outs[#outs + 1] = { name = n, init = ex.bytes_of(t), gpu = gpu_bytes[n], emu = emu[n], emu2 = emu2 and emu2[n] }
    end
    check_outputs(("%s %d x %d, seed %d"):format(c[1], c[2][1], c[2][2], seed), outs, STANDIN)
    seed = seed + 1
  end
end }

-- A batch of GEMMs (examples/tile_gemm_batched.lua): rank-3 tensors, the
-- batch program_id("z"): the same bytes (small integers).
cases[#cases + 1] = { example = "tile_gemm_batched", name = "tile_gemm_batched (tile-to-ptx; rank-3 tensors, programs along z)",
                      run = function(seed)
  local ex = example("tile_gemm_batched")
  local k = ex.build()
  k:compile()
  local kop = PH.lowered_tile(k)
  local Z, M, N, K = 2, 100, 256, 64
  local A = encode(gemm_values("int", Z * M * K, seed), "bf16")
  local B = encode(gemm_values("int", Z * N * K, seed + 1), "bf16")
  local C = ("\255"):rep(2 * Z * M * N)
  local programs = { (M + 127) // 128, 1, Z }
  local values = { ["map:A"] = { data = A, shape = { Z, M, K } }, ["map:B"] = { data = B, shape = { Z, N, K } },
                   ["map:C"] = { data = C, shape = { Z, M, N } }, ["arg:K"] = K, ["programs:x"] = programs[1],
                   ["programs:y"] = programs[2], ["programs:z"] = programs[3] }
  local args, at = PH.params_args(kop, values)
  local c = at["map:C"]
  local grid = math.min(tl.device.sm_count(), 4)
  local r, r2 = emulate_twice(kop, grid, args, seed)
  local a, b, d = tl.device.from(tl.u8, A), tl.device.from(tl.u8, B), tl.device.from(tl.u8, C)
  k:run { grid = programs, args = { A = { a, { Z, M, K } }, B = { b, { Z, N, K } }, C = { d, { Z, M, N } }, K = K } }
  local outs = { { name = "C", init = C, gpu = d:to_string(), emu = r.read(c), emu2 = r2 and r2.read(c) } }
  for _, x in ipairs { a, b, d } do x:free() end
  check_outputs(("tile_gemm_batched %d x %d x %d x %d, grid %d, seed %d"):format(Z, M, N, K, grid, seed), outs, STANDIN)
end }

-- An fp8 GEMM (examples/tile_gemm_fp8.lua, per-tensor scales): e4m3 bytes of
-- the integers -4 .. 4, whose sums the tensor cores' 14 bits hold exactly,
-- K over two promoted k blocks: the same bytes.
local E4M3_INT = { [-4] = 0xC8, [-3] = 0xC4, [-2] = 0xC0, [-1] = 0xB8, [0] = 0, [1] = 0x38, [2] = 0x40, [3] = 0x44, [4] = 0x48 }
local function e4m3_ints(vals)
  local t = {}
  for i, v in ipairs(vals) do t[i] = string.char(E4M3_INT[v]) end
  return table.concat(t)
end
cases[#cases + 1] = { example = "tile_gemm_fp8", name = "tile_gemm_fp8 (tile-to-ptx; e4m3, promoted k blocks, per-tensor scales)",
                      run = function(seed)
  local ex = example("tile_gemm_fp8")
  local k = ex.build { scales = "tensor", fp8 = "e4m3" }
  k:compile()
  local kop = PH.lowered_tile(k)
  local M, N, K = 100, 128, 160
  local A, B = e4m3_ints(gemm_values("int", M * K, seed)), e4m3_ints(gemm_values("int", N * K, seed + 1))
  local C = ("\255"):rep(2 * M * N)
  local programs = { (M + 127) // 128, (N + 127) // 128 }
  local values = { ["map:A"] = { data = A, shape = { M, K } }, ["map:B"] = { data = B, shape = { N, K } },
                   ["map:C"] = { data = C, shape = { M, N } }, ["arg:K"] = K, ["arg:sa"] = 0.5, ["arg:sb"] = 0.25,
                   ["programs:x"] = programs[1], ["programs:y"] = programs[2] }
  local args, at = PH.params_args(kop, values)
  local c = at["map:C"]
  local grid = math.min(tl.device.sm_count(), 4)
  local r, r2 = emulate_twice(kop, grid, args, seed)
  local a, b, d = tl.device.from(tl.u8, A), tl.device.from(tl.u8, B), tl.device.from(tl.u8, C)
  ex.launch(k, a, b, d, 0.5, 0.25, M, N, K)
  local outs = { { name = "C", init = C, gpu = d:to_string(), emu = r.read(c), emu2 = r2 and r2.read(c) } }
  for _, x in ipairs { a, b, d } do x:free() end
  check_outputs(("tile_gemm_fp8 %d x %d x %d, grid %d, seed %d"):format(M, N, K, grid, seed), outs, STANDIN)
end }

-- A grouped GEMM (examples/tile_gemm_grouped.lua): groups of 130, 0 and 60
-- rows, the expert of each block read from memory, the programs claimed at
-- run time (the dynamic scheduler): the same bytes.
cases[#cases + 1] = { example = "tile_gemm_grouped", name = "tile_gemm_grouped (tile-to-ptx; the expert of a block from memory)",
                      run = function(seed)
  local ex = example("tile_gemm_grouped")
  local k = ex.build()
  k:compile()
  local kop = PH.lowered_tile(k)
  local _, blocks, rows = ex.layout { 130, 0, 60 }
  local G, N, K = 3, 256, 64
  local A = encode(gemm_values("int", rows * K, seed), "bf16")
  local B = encode(gemm_values("int", G * N * K, seed + 1), "bf16")
  local C = ("\255"):rep(2 * rows * N)
  local E = {}
  for i, g in ipairs(blocks) do E[i] = string.pack("<i4", g) end
  E = table.concat(E)
  local values = { ["map:A"] = { data = A, shape = { rows, K } }, ["map:B"] = { data = B, shape = { G, N, K } },
                   ["map:C"] = { data = C, shape = { rows, N } }, ["ptr:Expert"] = E, ["dim:Expert:0"] = #blocks, ["arg:K"] = K,
                   ["programs:x"] = #blocks, ["programs:y"] = 1, workspace = { bytes = 4 } } -- (the dynamic scheduler's counter)
  local args, at = PH.params_args(kop, values)
  local c = at["map:C"]
  local grid = math.min(tl.device.sm_count(), 4)
  local r, r2 = emulate_twice(kop, grid, args, seed)
  local a, b, d, e = tl.device.from(tl.u8, A), tl.device.from(tl.u8, B), tl.device.from(tl.u8, C), tl.device.from(tl.u8, E)
  ex.launch(k, a, b, d, e, rows, G, N, K)
  local outs = { { name = "C", init = C, gpu = d:to_string(), emu = r.read(c), emu2 = r2 and r2.read(c) } }
  for _, x in ipairs { a, b, d, e } do x:free() end
  check_outputs(("tile_gemm_grouped %d rows of 3 groups x %d x %d, grid %d, seed %d"):format(rows, N, K, grid, seed), outs, STANDIN)
end }

-- Reduce-add stores (examples/tile_reduce_store.lua's rows_added, f32): row
-- blocks of small integers added into one block by every program, in any
-- order: exact sums, the same bytes.
cases[#cases + 1] = { example = "tile_reduce_store", name = "tile_reduce_store (tile-to-ptx; rows_added, f32 reduce-adds)",
                      run = function(seed)
  local ex = example("tile_reduce_store")
  local BM, BN, R, N = 8, 32, 40, 70
  local k = ex.build_rowsum(tl.f32, BM, BN)
  k:compile()
  local kop = PH.lowered_tile(k)
  local x = ex.ints(R * N, seed, -50, 50)
  local X = {}
  for i, v in ipairs(x) do X[i] = string.pack("<f", v) end
  X = table.concat(X)
  local Out = ("\0"):rep(4 * BM * N)
  local programs = { R // BM, (N + BN - 1) // BN }
  local values = { ["ptr:X"] = X, ["dim:X:0"] = R, ["dim:X:1"] = N, ["stride:X:0"] = N,
                   ["ptr:Out"] = Out, ["dim:Out:0"] = BM, ["dim:Out:1"] = N, ["stride:Out:0"] = N,
                   ["programs:x"] = programs[1], ["programs:y"] = programs[2] }
  local args, at = PH.params_args(kop, values)
  local o = at["ptr:Out"]
  local grid = programs[1] * programs[2] -- (a program a CTA: a compute agent's program is not persistent)
  local r, r2 = emulate_twice(kop, grid, args, seed)
  local dx, dout = tl.device.from(tl.u8, X), tl.device.from(tl.u8, Out)
  k:run { grid = programs, args = { X = { dx, { R, N } }, Out = { dout, { BM, N } } } }
  local outs = { { name = "Out", init = Out, gpu = dout:to_string(), emu = r.read(o), emu2 = r2 and r2.read(o) } }
  for _, b in ipairs { dx, dout } do b:free() end
  check_outputs(("tile_reduce_store rows_added %d x %d, grid %d, seed %d"):format(R, N, grid, seed), outs, STANDIN)
end }

-- GEMM + bias + GELU (examples/tile_gemm_bias_gelu.lua, its tanh form: fewer
-- ops to emulate, on the example's default ping-pong consumers: two 128 x 128
-- programs, one a consumer, in one CTA): ex2.approx and rcp.approx on the GPU,
-- the exact function on the emulator: within a bf16 ulp, as the softmax.
cases[#cases + 1] = { example = "tile_gemm_bias_gelu", name = "tile_gemm_bias_gelu (tile-to-ptx; the tile maths in the epilogue; within a bf16 ulp)",
                      within = true, run = function(seed)
  local ex = example("tile_gemm_bias_gelu")
  local k = ex.build { tanh = true } -- (gelu_tanh: the erf form is spec/tile_math_spec.lua's)
  local t = ex.tiling { tanh = true }
  k:compile()
  local kop = PH.lowered_tile(k)
  local M, N, K = 128, 256, 64
  local A = encode(gemm_values("int", M * K, seed), "bf16")
  local B = encode(gemm_values("int", N * K, seed + 1), "bf16")
  local bias_vals, bias = gemm_values("int", N, seed + 2), {}
  for i, v in ipairs(bias_vals) do bias[i] = string.pack("<f", v / 8) end
  bias = table.concat(bias)
  local C = ("\255"):rep(2 * M * N)
  local values = { ["map:A"] = { data = A, shape = { M, K } }, ["map:B"] = { data = B, shape = { N, K } },
                   ["map:C"] = { data = C, shape = { M, N } }, ["ptr:bias"] = bias, ["dim:bias:0"] = N,
                   ["arg:K"] = K, ["programs:x"] = M // t.bm, ["programs:y"] = N // t.bn }
  local args, at = PH.params_args(kop, values)
  local c = at["map:C"]
  local r, r2 = emulate_twice(kop, 1, args, seed)
  local a, b, d, bb = tl.device.from(tl.u8, A), tl.device.from(tl.u8, B), tl.device.from(tl.u8, C), tl.device.from(tl.u8, bias)
  k:run { grid = { M // t.bm, N // t.bn }, args = { A = { a, { M, K } }, B = { b, { N, K } }, C = { d, { M, N } }, bias = { bb, { N } }, K = K } }
  local gpu_c, emu_c = d:to_string(), r.read(c)
  for _, x in ipairs { a, b, d, bb } do x:free() end
  local what = ("tile_gemm_bias_gelu %d x %d x %d, seed %d"):format(M, N, K, seed)
  if STANDIN then
    check_outputs(what, { { name = "C", init = C, gpu = gpu_c, emu = emu_c, emu2 = r2.read(c) } }, true)
    return
  end
  local differ = 0
  for i = 1, M * N do
    local x, y = decode(gpu_c, "bf16", i), decode(emu_c, "bf16", i)
    if x ~= y then
      differ = differ + 1
      assert(math.abs(x - y) <= 2.0 ^ -7 * math.abs(y) + 2.0 ^ -20,
             ("%s: C[%d] GPU %.9g, emulator %.9g"):format(what, i - 1, x, y))
    end
  end
  print(("%s: C within a bf16 ulp on the GPU and the emulator (%d of %d elements differ)"):format(what, differ, M * N))
end }

-- Attention (examples/attention.lua, the tile program; examples/flash_attention.lua,
-- stdlib/attention.lua): exp2 is ex2.approx on the GPU and exact on the
-- emulator, and P (rounded to 16 bits) may round the other way, so O is
-- compared within the rounding of P and O (2^-7 + 2^-8 |O|, inputs in [-1, 1])
-- and the log-sum-exp within 1e-3 (1 + |LSE|), as their specs compare them
-- with a reference. Small problems: 130 queries, 200 keys, head dim 64, one
-- key head for two, causal on odd seeds.
local AH = dofile "spec/attention_helper.lua"
local function attention_problem(seed)
  local c = { b = 1, h = 2, hkv = 1, sq = 130, skv = 200, d = 64, causal = seed % 2 == 1 }
  c.scale = 1 / math.sqrt(c.d)
  return c
end
local function attention_within(what, c, o, lse)
  if STANDIN then return check_outputs(what, { o, lse }, true) end
  local differ = 0
  for i = 1, c.b * c.h * c.sq * c.d do
    local x, y = decode(o.gpu, "bf16", i), decode(o.emu, "bf16", i)
    if x ~= y then
      differ = differ + 1
      assert(math.abs(x - y) <= 2.0 ^ -7 + 2.0 ^ -8 * math.abs(y), ("%s: O[%d] GPU %.9g, emulator %.9g"):format(what, i - 1, x, y))
    end
  end
  for i = 1, c.b * c.h * c.sq do
    local x, y = string.unpack("<f", lse.gpu, 4 * i - 3), string.unpack("<f", lse.emu, 4 * i - 3)
    assert(math.abs(x - y) <= 1e-3 * (1 + math.abs(y)), ("%s: LSE[%d] GPU %.9g, emulator %.9g"):format(what, i - 1, x, y))
  end
  print(("%s: O and LSE within the rounding on the GPU and the emulator (%d of %d elements of O differ)")
    :format(what, differ, c.b * c.h * c.sq * c.d))
end
-- The device buffers of problem c's inputs and outputs. -> buffers, free()
local function attention_buffers(c, bytes, o, lse)
  local x = { q = tl.device.from(tl.bf16, bytes.q), k = tl.device.from(tl.bf16, bytes.k), v = tl.device.from(tl.bf16, bytes.v),
              o = tl.device.from(tl.bf16, o), lse = tl.device.from(tl.f32, lse) }
  return x, function() for _, b in pairs(x) do b:free() end end
end

cases[#cases + 1] = { example = "attention", name = "attention (the tile program: chained dots, P from registers; within the rounding)",
                      within = true, run = function(seed)
  local c = attention_problem(seed)
  local ex = example("attention")
  local k = ex.build { d = c.d, causal = c.causal }
  k:compile()
  local kop = PH.lowered_tile(k)
  local _, bytes = AH.inputs(c, seed % 100000 + 1)
  local args, at = AH.tile_args(PH, kop, c, bytes)
  local O, L = ("\255"):rep(2 * c.b * c.h * c.sq * c.d), ("\0"):rep(4 * c.b * c.h * c.sq)
  local r, r2 = emulate_twice(kop, 2, args, seed)
  local x, free = attention_buffers(c, bytes, O, L)
  ex.launch(k, c, x)
  tl.device.synchronize()
  local o = { name = "O", init = O, gpu = x.o:to_string(), emu = r.read(at["map:O"]), emu2 = r2 and r2.read(at["map:O"]) }
  local lse = { name = "LSE", init = L, gpu = x.lse:to_string(), emu = r.read(at["ptr:LSE"]), emu2 = r2 and r2.read(at["ptr:LSE"]) }
  free()
  attention_within(("attention 1 x 2 heads, %d x %d, d %d%s, seed %d"):format(c.sq, c.skv, c.d, c.causal and ", causal" or "", seed),
                   c, o, lse)
end }

cases[#cases + 1] = { example = "flash_attention", name = "flash_attention (stdlib/attention.lua: two consumers taking turns; within the rounding)",
                      within = true, run = function(seed)
  local c = attention_problem(seed)
  local a = tl.attention.build { b = c.b, h = c.h, hkv = c.hkv, sq = c.sq, skv = c.skv, d = c.d, causal = c.causal,
                                 bn = 64, consumers = 2, sms = 2 }
  local _, bytes = AH.inputs(c, seed % 100000 + 1)
  local O, L = ("\255"):rep(2 * c.b * c.h * c.sq * c.d), ("\0"):rep(4 * c.b * c.h * c.sq)
  local args = AH.stdlib_args(c, bytes)
  local r, r2 = emulate_twice(PH.lowered_gemm(a), a.grid, args, seed)
  local x, free = attention_buffers(c, bytes, O, L)
  a:run(x)
  tl.device.synchronize()
  local o = { name = "O", init = O, gpu = x.o:to_string(), emu = r.read(4), emu2 = r2 and r2.read(4) }
  local lse = { name = "LSE", init = L, gpu = x.lse:to_string(), emu = r.read(5), emu2 = r2 and r2.read(5) }
  free()
  attention_within(("flash_attention 1 x 2 heads, %d x %d, d %d%s, seed %d"):format(c.sq, c.skv, c.d, c.causal and ", causal" or "", seed),
                   c, o, lse)
end }

-- }=====================================================================

describe("the emulator against the GPU", function()
  for i, c in ipairs(cases) do
    it(c.name .. (c.within and "" or " (same bytes)"), function()
      gpu()
      local seed = SEED + 1000 * i
      print(("%s (TILUA_SEED=%d%s)"):format(c.name, SEED, STANDIN and ", the stand-in driver" or ""))
      local t0 = os.time()
      c.run(seed)
      print(("%s: %d s"):format(c.name, os.time() - t0))
    end)
  end

  it("the GEMM with full-precision random inputs: one bf16 ulp at most (the tensor cores add in their own order)", function()
    gpu()
    local cfg = GEMMS[1]
    local seed = SEED + 7
    local outs, g = gemm_both(cfg, "full", seed)
    local o = outs[1]
    assert(o.emu ~= o.init, "the emulator wrote no D")
    if STANDIN then
      assert(o.gpu == o.init)
      return
    end
    local n, worst = o.gpu:len() // 2, 0
    local differ = 0
    for i = 1, n do
      local x, y = decode(o.gpu, "bf16", i), decode(o.emu, "bf16", i)
      if x ~= y then
        differ = differ + 1
        -- a bf16 ulp at the larger magnitude (8 bits of mantissa), or 2^-10 near zero
        local big = math.max(math.abs(x), math.abs(y))
        local ulp = big > 0 and 2.0 ^ (select(2, math.frexp(big)) - 8) or 0
        local d = math.abs(x - y)
        assert(d <= math.max(ulp, 2.0 ^ -10), ("%s: D[%d] GPU %.9g, emulator %.9g"):format(gemm_label(cfg, g), i - 1, x, y))
        worst = math.max(worst, d / math.max(ulp, 2.0 ^ -10))
      end
    end
    print(("%s, full random inputs, seed %d: %d of %d elements differ (at most %.2f bf16 ulp)")
      :format(gemm_label(cfg, g), seed, differ, n, worst))
  end)
end)

describe("the cases", function()
  it("compare byte for byte, naming the first byte that differs", function()
    local outs = { { name = "dst", init = "\0\0\0\0\0\0\0\0", gpu = "\1\2\3\4\5\7\7\9", emu = "\1\2\3\4\5\8\7\8" } }
    local ok, err = pcall(check_outputs, "a run", outs, false)
    assert.is_false(ok)
    assert.matches("a run: dst differs at byte 5 of 8 %(GPU 07, emulator 08; 2 bytes differ%)", err)
    outs[1].gpu = outs[1].emu
    local print0 = print
    print = function() end -- luacheck: ignore 121 (its line for the log)
    ok, err = pcall(check_outputs, "a run", outs, false)
    print = print0 -- luacheck: ignore 121
    assert(ok, err)
    outs[1].emu = outs[1].init -- nothing written: nothing compared
    outs[1].gpu = outs[1].init
    ok, err = pcall(check_outputs, "a run", outs, false)
    assert.is_false(ok)
    assert.matches("a run: the emulator wrote none of the outputs", err)
  end)

  it("cover every example that launches a kernel (its check goes through tilua.gpu.check's main)", function()
    local covered = {}
    for _, c in ipairs(cases) do covered[c.example] = true end
    local launching = 0
    for _, f in ipairs(H.files("examples", "%.lua$")) do
      local name = f:match "([^/]+)%.lua$"
      if H.slurp(f):find("check.main(", 1, true) then
        launching = launching + 1
        assert(covered[name], ("examples/%s.lua launches a kernel but has no case here"):format(name))
      end
    end
    assert.is_true(launching >= 8)
  end)

  it("run against the stand-in driver without a GPU (every case emulated, launched and read back)", function()
    if GPU then pending "a GPU (or the stand-in driver) is present: the cases ran above" end
    if not FAKE then pending "no stand-in driver (TILUA_FAKE_CUDA, set by ctest)" end
    local out, err, code = H.tilua_env({ TILUA_LIBCUDA = FAKE, TILUA_SEED = tostring(SEED) },
      { arg[0], "--no-auto-insulate", "-o", "utfTerminal", "spec/emulate_gpu_spec.lua" }, H.sanitize and 2700 or 1800) -- the sanitizers' build runs it about 3 times slower
    assert(code == 0, ("exit %s:\n%s%s"):format(tostring(code), out, err))
    -- every case, the full-random GEMM, the comparison and the coverage test; this one pending there
    local ok, failed, errors, pend = out:match "(%d+) successes / (%d+) failures / (%d+) errors / (%d+) pending"
    assert.same({ #cases + 3, 0, 0, 1 }, { tonumber(ok), tonumber(failed), tonumber(errors), tonumber(pend) })
    assert.matches("launched on the stand%-in driver and read back unchanged", out)
  end)
end)
