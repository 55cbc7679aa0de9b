-- tools/stress.lua: every GPU example's check, many times (tools/gpu stress).
--
--   tilua tools/stress.lua [--iterations N] [--examples a,b,...] [--seed S]
--
-- Each example (examples/<name>.lua loaded as a library, tilua.gpu.check) is
-- prepared once and run N times (default 100) in this process, each run on
-- fresh random data (seed S + i, S from TILUA_SEED or the clock) and over one of
-- its grids in turn: one CTA, one per SM, three per SM, and a count that is no
-- multiple of the SM count (whole clusters for the cluster kernels; the GEMM
-- takes a shape of about that many tiles). Prints a
-- line per failure, then a markdown table (example, runs, failures, grids,
-- seconds); exits 1 on any failure. A kernel that hangs becomes an error at
-- the launch deadline (TILUA_LAUNCH_TIMEOUT) and ends the stress run: the
-- runtime is wedged after it.
local tl = require "tilua"

-- every example that runs on the GPU through tilua.gpu.check (check.main)
local EXAMPLES = { "vector_add", "cluster_dsmem", "ring_copy", "pipeline_ring_copy", "seq_bar_pingpong",
                   "splitk_block_striped", "mods_probes", "gemm", "gemm_forms", "flash_attention", "attention",
                   "tile_gemm", "tile_gemm_bias_relu", "tile_gemm_bias_gelu", "tile_gemm_softmax", "tile_gemm_fp8",
                   "tile_gemm_batched", "tile_gemm_grouped", "tile_rows", "tile_reduce_store" }

local o = { iterations = 100, seed = tonumber(os.getenv "TILUA_SEED") or os.time() }
local i = 1
while arg[i] do
  local a = arg[i]
  if a == "--iterations" then o.iterations, i = math.tointeger(tonumber(arg[i + 1])), i + 1
  elseif a == "--seed" then o.seed, i = math.tointeger(tonumber(arg[i + 1])), i + 1
  elseif a == "--examples" then
    o.only = {}
    for n in arg[i + 1]:gmatch "[^,]+" do o.only[#o.only + 1] = n end
    i = i + 1
  else
    io.stderr:write("stress: unknown argument ", a, "\n")
    os.exit(2)
  end
  i = i + 1
end
if not o.iterations or o.iterations < 1 or not o.seed then
  io.stderr:write("stress: --iterations and --seed take positive integers\n")
  os.exit(2)
end

tl.device.require()
local info = tl.device.info()
local sms = info.sm_count
print(("stress: %s, %d SMs, %d runs per example, seeds from %d"):format(info.name, sms, o.iterations, o.seed))

local rows, total_bad, wedged = {}, 0, false
for _, name in ipairs(o.only or EXAMPLES) do
  if wedged then break end
  tl.new_module() -- each example builds its kernels in a module of its own
  local ok, ex = pcall(function() return assert(loadfile("examples/" .. name .. ".lua"))("--library") end)
  if ok then ok, ex = pcall(function() ex.prepare() return ex end) end
  local row = { name = name, runs = 0, bad = 0, grids = {}, t0 = os.time() }
  rows[#rows + 1] = row
  if not ok then
    print(("stress: %s: could not be prepared: %s"):format(name, tostring(ex)))
    row.bad, total_bad = 1, total_bad + 1
  else
    -- an example without grids launches its own (the case's grid nil)
    local grids = ex.grids and ex.grids(sms) or {}
    for _, g in ipairs(grids) do row.grids[#row.grids + 1] = tostring(g) end
    if #grids == 0 then row.grids[1] = "its own" end
    for it = 1, o.iterations do
      local c = { seed = o.seed + it, grid = grids[(it - 1) % math.max(#grids, 1) + 1], small = false }
      local good, passed, summary = pcall(ex.run, c)
      row.runs = row.runs + 1
      if not good or not passed then
        row.bad, total_bad = row.bad + 1, total_bad + 1
        print(("stress: %s: run %d (seed %d, grid %s) FAILED: %s"):format(name, it, c.seed, tostring(c.grid or "its own"),
          tostring(good and summary or passed)))
        if not good and tostring(passed):find("did not finish within", 1, true) then
          wedged = true
          break
        end
      end
      collectgarbage()
    end
  end
  row.secs = os.time() - row.t0
  print(("stress: %s: %d runs, %d failures, grids %s, %d s"):format(name, row.runs, row.bad,
    table.concat(row.grids, "/"), row.secs))
end

print()
print("| example | runs | failures | grids (CTAs) | seconds |")
print("|---|---|---|---|---|")
for _, r in ipairs(rows) do
  print(("| %s | %d | %d | %s | %d |"):format(r.name, r.runs, r.bad, table.concat(r.grids, ", "), r.secs))
end
if wedged then print("stress: a kernel hung; the runs after it did not happen") end
print(("stress: %d failures"):format(total_bad))
os.exit(total_bad == 0 and 0 or 1)
