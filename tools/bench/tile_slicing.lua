-- tools/bench/tile_slicing.lua: the loops tileas-decide-slicing's rule slices
-- (docs/passes.md, "tileas-decide-slicing"), with the rule and with it off
-- (tl.options.slicing = false) or forced (N), in the same run: the column
-- reductions of stdlib/rows.lua (tl.rows.col_reduce: a program of n columns
-- walks the rows 32 at a time, a loop whose loads do not depend on what it
-- carries) at M x N f32. Each variant is first checked on the GPU against the
-- CPU reference (examples/tile_rows.lua's col_sum at 1000 x 700), then timed:
-- per round the variants of a program alternate (tools/bench/peers.lua: the
-- best of 5 samples of 10 launches each); the best of R rounds is kept. The ratio is the bytes read per second
-- over cuMemcpyDtoD's bytes moved (read + written) per second. Then the loops
-- the rule slices in order (their bodies store once): the backward passes' and
-- softmax's 3-row program's row loops, with the rule and off (below); also
-- RMSNorm's and LayerNorm's 3-row programs, which the rule leaves since
-- s12slice-2 (they store 2 and 3 tiles an iteration and ran slower sliced).
-- Prints a table last (GB/s: the bytes a program reads and writes).
--
--   tilua tools/bench/tile_slicing.lua [--m=16384] [--n=8192] [--rounds=3]
local tl = require "tilua"
local P = dofile "tools/bench/peers.lua"

local o = P.options { m = 16384, n = 8192, rounds = 3 }
local M, N = o.m, o.n

tl.device.require() -- without a GPU: "SKIP: no GPU" and exit
local D = tl.device
local seed = tonumber(os.getenv "TILUA_SEED") or os.time()
local info = D.info()
print(("tile_slicing bench: %s, %d SMs, %d x %d f32, seed %d"):format(info.name, info.sm_count, M, N, seed))

local ex = assert(loadfile "examples/tile_rows.lua")("--library")

local bytes = M * N * 4
local x = D.random(tl.f32, M * N, seed)
local y = D.alloc(tl.f32, M * N)
local copy_gbs = 2 * bytes / P.time { { "copy", function() y:copy_from(x) end } }[1] / 1e6
print(("cuMemcpyDtoD: %.0f GB/s"):format(copy_gbs))
local out = D.alloc(tl.f32, N)

-- name, columns a program, rows a step, kind, rows of X
local shapes = {
  { "col sum n 256", 256, 32, "sum", M },
  { "col sum n 128", 128, 32, "sum", M },
  { "col max n 256", 256, 32, "max", M },
  { "col sum n 256, 1024 rows", 256, 32, "sum", 1024 },
}
local settings = { { "rule", nil }, { "off", false } }

-- the check: col_sum at 1000 x 700 on the GPU under each setting (a fresh
-- instance of the example each time: one keeps the kernels it compiled)
local function fresh() return assert(loadfile "examples/tile_rows.lua")("--library") end
for _, s in ipairs(settings) do
  tl.options.slicing = s[2]
  local ok, summary = fresh().run_case("col_sum", { seed = seed, size = { 1000, 700 } })
  print(("check (slicing %s): %s %s"):format(s[1], ok and "ok" or "BAD", summary))
  if not ok then error("the column sum disagrees with its reference", 0) end
end

-- The loops the rule slices in order (they write memory), with the rule
-- (2 slices) against off in the same run: the RMSNorm and LayerNorm backward
-- (a program of 8 rows at N = 4096, bf16: X, DY read, DX and the program's DW
-- part written) and softmax, RMSNorm, LayerNorm with 3 rows a program (their
-- row loop carries the next row).
local ordered = { "rmsnorm_bwd", "layernorm_bwd", "softmax_rows3", "rmsnorm_rows3", "layernorm_rows3" }
for _, name in ipairs(ordered) do
  for _, s in ipairs(settings) do
    tl.options.slicing = s[2]
    local c = ex.cases[name]
    local ok, summary = fresh().run_case(name, { seed = seed, size = c.sizes[1] })
    print(("check (slicing %s): %s %s"):format(s[1], ok and "ok" or "BAD", summary))
    if not ok then error(name .. " disagrees with its reference", 0) end
  end
end
local xb, dyb = D.random(tl.bf16, M * N, seed + 1), D.random(tl.bf16, M * N, seed + 2)
local yb, wb = D.alloc(tl.bf16, M * N), D.random(tl.bf16, N, seed + 3)
local rstd, mean = D.random(tl.f32, M, seed + 4), D.random(tl.f32, M, seed + 5)
local BN, BR = 4096, 8
local NP = (M + BR - 1) // BR
local dwp, dbp = D.alloc(tl.f32, NP * BN), D.alloc(tl.f32, NP * BN)
local bb = D.random(tl.bf16, N, seed + 6)
local mr = D.alloc(tl.f32, M)
local R3 = (M + 2) // 3
local others = {
  { "rmsnorm_bwd n 4096 rows 8", function() return tl.rows.rmsnorm_bwd { n = BN, rows = BR } end,
    { grid = { NP }, args = { X = { xb, { M, BN } }, W = { wb, { BN } }, DY = { dyb, { M, BN } }, DX = { yb, { M, BN } },
                             Rstd = { rstd, { M } }, DWp = { dwp, { NP, BN } }, M = M, N = BN } },
    3 * M * BN * 2 + NP * BN * 4 },
  { "layernorm_bwd n 4096 rows 8", function() return tl.rows.layernorm_bwd { n = BN, rows = BR } end,
    { grid = { NP }, args = { X = { xb, { M, BN } }, W = { wb, { BN } }, DY = { dyb, { M, BN } }, DX = { yb, { M, BN } },
                             Mean = { mean, { M } }, Rstd = { rstd, { M } }, DWp = { dwp, { NP, BN } },
                             DBp = { dbp, { NP, BN } }, M = M, N = BN } },
    3 * M * BN * 2 + 2 * NP * BN * 4 },
  { "softmax rows 3", function() return tl.rows.softmax { n = N, rows = 3 } end,
    { grid = { R3 }, args = { X = { xb, { M, N } }, Y = { yb, { M, N } } } }, 2 * M * N * 2 },
  { "rmsnorm rows 3", function() return tl.rows.rmsnorm { n = N, rows = 3 } end,
    { grid = { R3 }, args = { X = { xb, { M, N } }, W = { wb, { N } }, Y = { yb, { M, N } }, Rstd = { mr, { M } },
                             N = N, eps = 1e-5 } }, 2 * M * N * 2 },
  { "layernorm rows 3", function() return tl.rows.layernorm { n = N, rows = 3 } end,
    { grid = { R3 }, args = { X = { xb, { M, N } }, W = { wb, { N } }, B = { bb, { N } }, Y = { yb, { M, N } },
                             Mean = { mean, { M } }, Rstd = { mr, { M } }, N = N, eps = 1e-5 } }, 2 * M * N * 2 },
}

-- a kernel object a variant (each keeps its own PTX), compiled under its setting
local rows = {}
local function variant(name, build, launch, moved, s)
  tl.options.slicing = s[2]
  local k = build()
  local ptx = k:compile()
  rows[#rows + 1] = { name = name, s = s, k = k, launch = launch, ptx = ptx, moved = moved,
                      bars = select(2, ptx:gsub("bar%.sync", "")) }
end
for _, sh in ipairs(shapes) do
  local launch = { grid = { (N + sh[2] - 1) // sh[2] }, args = { X = { x, { sh[5], N } }, Out = { out, { N } }, M = sh[5] } }
  for _, s in ipairs(settings) do
    variant(sh[1], function() return tl.rows.col_reduce { kind = sh[4], n = sh[2], rows = sh[3] } end, launch, sh[5] * N * 4, s)
  end
end
for _, c in ipairs(others) do
  for _, s in ipairs(settings) do variant(c[1], c[2], c[3], c[4], s) end
end
tl.options.slicing = nil
-- the variants of a program alternate (peers.lua), best of 5 samples of 10 launches; best of the rounds
local best = {}
for round = 1, o.rounds do
  local i0 = 0
  while i0 < #rows do
    local runs, i1 = {}, i0 + 1
    repeat
      local r = rows[i1]
      runs[#runs + 1] = { r.name, function() r.k:launch(r.launch) end }
      i1 = i1 + 1
    until i1 > #rows or rows[i1].name ~= r.name
    for j, ms in ipairs(P.time(runs)) do best[i0 + j] = math.min(best[i0 + j] or math.huge, ms) end
    i0 = i1 - 1
  end
  print(("round %d done"):format(round))
end

print("| program | slicing | PTX bytes | bar.sync | ms | GB/s | / copy |")
print("|---|---|---|---|---|---|---|")
for i, r in ipairs(rows) do
  local gbs = r.moved / best[i] / 1e6
  print(("| %s | %s | %d | %d | %.4f | %.0f | %.3f |"):format(r.name, r.s[1], #r.ptx, r.bars, best[i], gbs, gbs / copy_gbs))
end
