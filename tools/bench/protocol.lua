-- tools/bench/protocol.lua: how long the barrier-protocol checker takes
-- (docs/protocol.md, docs/PERF.md "The protocol checker") on the stdlib GEMM
-- and on every example, each check in a fresh process under a time limit.
--
--   tilua tools/bench/protocol.lua [limit_s]   the table (default limit 300 s)
--   tilua tools/bench/protocol.lua --one NAME  one case of the "checker" rows
--   tilua tools/bench/protocol.lua --units [NAME]  the check's work units against
--             its CPU seconds per case (what the charges of machine.lua's
--             Run:clock are fitted on; TILUA_BENCH_RAW=1 adds the raw counts
--             on stderr), the stdlib attention's three configurations among them
--
-- Three kinds of rows:
--   checker   tl.verify_protocol in Lua on a kernel built at a small size where
--             every ring wraps at least twice (the GEMM variants, the specs'
--             configurations of the examples): states, runs, the checker's CPU
--             seconds (os.clock) and the process's CPU seconds
--   pass      `tilua opt FILE --pass verify-protocol --stats` on the example's
--             input IR (`tilua --stage=input`): the inputs the pass guesses
--   pipeline  `tilua --check-protocol --emit=ptx` on the example: the check on
--             the input and after every pass that changes it (process CPU seconds)
-- A row that runs past the limit says so. Timings are CPU seconds (user +
-- system) of the process, so a loaded machine changes them less than wall time.
local tl = require "tilua"

local tilua = arg[-1] or "tilua"
local limit = tonumber(arg[1]) or 300
local TMP = os.tmpname()
os.remove(TMP)

local PH = dofile "spec/protocol_helper.lua" -- the specs' small ring copies, op lookup, test bytes
local ops = PH.ops

-- The GEMM's kernel with its tile scheduler lowered, as spec/protocol_gemm_spec.lua checks it.
local function gemm(cfg)
  local g = tl.gemm.build(cfg)
  local m = g.kernel.op:parent()
  while m:name() ~= "module" do m = m:parent() end
  m = m:clone()
  assert(tl.core.run_pipeline(m, "lower-tile-scheduler"))
  local k = ops(m, "tile.kernel")[1]
  local args = { { bytes = cfg.m * cfg.k * 2, shape = cfg.a_major == "m" and { cfg.k, cfg.m } or { cfg.m, cfg.k } },
                 { bytes = cfg.n * cfg.k * 2, shape = cfg.b_major == "n" and { cfg.k, cfg.n } or { cfg.n, cfg.k } },
                 { bytes = cfg.m * cfg.n * 2, shape = { cfg.m, cfg.n } } }
  if #k:region(1):entry():args() == 4 then args[4] = { bytes = math.max(16, g.workspace_bytes) } end
  return k, g.grid, args
end
-- 4 k blocks through 2 stages: every ring wraps twice. grid: check only the
-- first CTAs of the kernel's grid (a persistent grid is planned for 132 SMs:
-- with 133 tiles or more CTA 0 takes two of them)
local function dp(extra, grid)
  local c = { m = 128, n = 64, k = 256, bn = 64, stages = 2, schedule = "data_parallel" }
  for key, v in pairs(extra or {}) do c[key] = v end
  return function()
    local k, g, args = gemm(c)
    return k, grid or g, args
  end
end

local function lib(f)
  tl.new_module() -- the examples build their kernels into the current module
  return assert(loadfile("examples/" .. f .. ".lua"))("--library")
end
local function i32s(t)
  local o = {}
  for i, v in ipairs(t) do o[i] = string.pack("<i4", v) end
  return table.concat(o)
end
local function ring(key) -- the ring copies of the protocol specs
  return function()
    local c = PH.cases[key]
    return c.build(), 1, { PH.bytes(c.n, 1), { bytes = c.n }, c.n }
  end
end

-- name -> { what, build() -> kernel, grid, args }
local CHECKS = {
  { "gemm", "stdlib GEMM 128x64x256, 1 CTA", dp() },
  { "gemm_grid2", "stdlib GEMM 128x128x256, grid 2", dp { n = 128 } },
  { "gemm_cluster2", "stdlib GEMM 256x64x256, cluster = 2 (grid 2)", dp { m = 256, cluster = 2 } },
  { "gemm_mn", "stdlib GEMM 128x64x256, MN-major A and B", dp { a_major = "m", b_major = "n" } },
  { "gemm_pingpong", "stdlib GEMM 25408x64x256, ping-pong, persistent: CTA 0 of 132 (4 tiles)",
    dp({ m = 64 * 397, consumers = "pingpong", schedule = "persistent" }, 1) },
  { "gemm_persistent", "stdlib GEMM 17024x64x256, persistent: CTA 0 of 132 (2 tiles)",
    dp({ m = 128 * 133, schedule = "persistent" }, 1) },
  { "gemm_splitk", "stdlib GEMM 128x64x512, split-K 2: CTAs 0-1 of 132 (the tile's two pieces)",
    dp({ k = 512, schedule = "splitk", splits = 2 }, 2) },
  { "ring_copy", "ring_copy (2 stages of 512)", ring "rc" },
  { "ring_copy_bulk", "ring_copy, bulk stores", ring "rcb" },
  { "pipeline_ring_copy", "pipeline_ring_copy", ring "prc" },
  { "pipeline_ring_copy2", "pipeline_ring_copy, 2 consumer warps", ring "prc2" },
  { "pipeline_ring_copy_ws", "pipeline_ring_copy, warp_specialized", ring "prcws" },
  { "seq_bar_pingpong", "seq_bar_pingpong (3 rounds)", function()
      return lib("seq_bar_pingpong").kernel, 1,
        { i32s { 1, 2, 3 }, i32s { 4, 5, 6 }, { bytes = 24 }, { bytes = 4 }, { bytes = 4 }, 3 }
    end },
  { "cluster_dsmem", "cluster_dsmem (one cluster of 2)", function()
      return lib("cluster_dsmem").kernel, 2, { string.rep("\1", 4 * 512), { bytes = 8 * 512 }, 512 }
    end },
  { "splitk_block_striped", "splitk_block_striped (2 splits of 1)", function()
      local M = 2048
      return lib("splitk_block_striped").build(1, 2, 1), 2,
        { { bytes = 4 * 2 * M }, { bytes = 8 }, { bytes = 8 * M }, { bytes = 4 * M }, { bytes = 4 * M },
          { bytes = 4 * M }, { bytes = 4 } }
    end },
}
-- the hand-written attention kernel of stdlib/attention.lua (flash_attention's), on the inputs the check derives
local function attention(cfg)
  return function()
    local a = tl.attention.build(cfg)
    return a.kernel, nil, nil
  end
end
CHECKS[#CHECKS + 1] = { "attention_d128", "stdlib attention d 128 (derived inputs: 4 tiles, 1 CTA)",
                        attention { b = 2, h = 8, hkv = 2, sq = 1000, skv = 1000, d = 128 } }
CHECKS[#CHECKS + 1] = { "attention_d128_grid2", "stdlib attention d 128 on 2 CTAs (n = 3: 9 tiles)", function()
  local k = attention { b = 2, h = 8, hkv = 2, sq = 1000, skv = 1000, d = 128 }()
  return k, 2, { n = 3 }
end }
CHECKS[#CHECKS + 1] = { "attention_d128_grid3", "stdlib attention d 128 on 3 CTAs (n = 5: 25 tiles)", function()
  local k = attention { b = 2, h = 8, hkv = 2, sq = 1000, skv = 1000, d = 128 }()
  return k, 3, { n = 5 }
end }
CHECKS[#CHECKS + 1] = { "attention_d64_causal", "stdlib attention d 64, causal (derived inputs)",
                        attention { b = 1, h = 2, hkv = 1, sq = 100, skv = 100, d = 64, causal = true } }
for _, c in ipairs(CHECKS) do CHECKS[c[1]] = c end

-- --units: the check's work units (machine.lua's Run:clock) against its CPU
-- seconds, per case and per kind of work: how well a budget in units stands
-- for one in seconds (the charges are fitted on these rows)
if arg[1] == "--units" then
  local machine = require "tilua.emulate.machine"
  local go = machine.Run.go
  local parts
  machine.Run.go = function(R)
    local r = go(R)
    parts.ops = parts.ops + R.ops
    parts.steps = parts.steps + (64 + 12 * #R.warps) * R.steps
    parts.raw_steps, parts.raw_wsteps = parts.raw_steps + R.steps, parts.raw_wsteps + #R.warps * R.steps
    parts.granules, parts.calls = parts.granules + R.granules, parts.calls + R.shadow_calls
    return r
  end
  print("| case | units | ops (units) | steps (units) | race check (units) | CPU s | us / unit |")
  print("|---|---|---|---|---|---|---|")
  for _, c in ipairs(CHECKS) do
    if not arg[2] or c[1]:find(arg[2], 1, true) then
      local k, grid, args = c[3]()
      parts = { ops = 0, steps = 0, granules = 0, calls = 0, raw_steps = 0, raw_wsteps = 0 }
      local w = { left = 1e12, limit = 1e12 }
      local t0 = os.clock()
      local ok, r
      if args and args.n then -- the inputs the check derives for that size
        ok, r = pcall(require("tilua.emulate.protocol").check, k.op, { grid = grid, n = args.n, max_states = 1000000, work = w })
      elseif args then
        ok, r = pcall(tl.verify_protocol, k, { grid = grid, args = args, max_states = 1000000, work = w })
      else -- the inputs the check derives
        ok, r = pcall(require("tilua.emulate.protocol").check, k.op, { max_states = 1000000, work = w })
      end
      local secs = os.clock() - t0
      local used = 1e12 - w.left
      print(("| %s | %d | %d | %d | %d | %.3f | %.3f |%s"):format(c[1], used, 2 * parts.ops, parts.steps,
        8 * parts.calls + 4 * parts.granules, secs, 1e6 * secs / math.max(used, 1), ok and "" or " " .. tostring(r):sub(1, 80)))
      if os.getenv "TILUA_BENCH_RAW" then -- the counts themselves (to fit the charges on)
        io.stderr:write(("RAW %s %d %d %d %d %d %.4f\n"):format(c[1], parts.ops, parts.raw_steps, parts.raw_wsteps,
          parts.granules, parts.calls, secs))
      end
    end
  end
  return
end

if arg[1] == "--one" then
  local c = assert(CHECKS[arg[2]], "no such case")
  local k, grid, args = c[3]()
  local t0 = os.clock()
  local r = tl.verify_protocol(k, { grid = grid, args = args, max_states = 1000000 })
  print(("RESULT %s %d %d %.3f %s %s"):format(r.ok and "ok" or r.violation.kind, r.states, r.runs, os.clock() - t0,
    tostring(r.min_phases), grid))
  if not r.ok then io.stderr:write(r.report:sub(1, 2000), "\n") end
  return
end

-- Run a command under the limit; returns what it wrote to the pipe (its own
-- redirections decide what), its CPU seconds and whether it finished.
local function run(cmd)
  local times = TMP .. ".time"
  os.remove(times)
  local p = io.popen(("timeout %d /usr/bin/time -o %s -f 'CPU %%U %%S' %s"):format(limit, times, cmd))
  local out = p:read "a"
  p:close()
  local f = io.open(times)
  local t = f and f:read "a" or ""
  if f then f:close() end
  os.remove(times)
  local u, s = t:match "CPU ([%d.]+) ([%d.]+)"
  local finished = u ~= nil
  return out, finished and (tonumber(u) + tonumber(s)) or nil, finished
end

local rows = {}
local function row(...) rows[#rows + 1] = "| " .. table.concat({ ... }, " | ") .. " |" end

for _, c in ipairs(CHECKS) do
  local out, cpu, finished = run(("%s tools/bench/protocol.lua --one %s 2>&1"):format(tilua, c[1]))
  local res, states, runs, secs, phases, grid = out:match "RESULT (%S+) (%d+) (%d+) ([%d.]+) (%S+) (%d+)"
  if res then
    row("checker", c[2], grid, states, runs, phases, secs, ("%.2f"):format(cpu), res)
  else
    row("checker", c[2], "", "", "", "", "", finished and ("%.2f"):format(cpu) or ("> %d"):format(limit),
      finished and (out:match "(emulate: [^\n]*)" or out:match "([^\n]*error[^\n]*)" or "failed"):sub(1, 90):gsub("|", "/")
        or "time limit")
  end
  io.stderr:write(rows[#rows], "\n")
end

local examples = {}
for f in io.popen("ls examples/*.lua"):lines() do examples[#examples + 1] = f:match "examples/(.-)%.lua$" end
for _, e in ipairs(examples) do
  local tir = TMP .. "_" .. e .. ".tir"
  local _, _, made = run(("%s --stage=input examples/%s.lua > %s 2>/dev/null"):format(tilua, e, tir))
  local f = io.open(tir)
  local text = f and f:read "a" or ""
  if f then f:close() end
  if made and text:match "tile%.kernel" then
    local out, cpu, finished = run(("%s opt %s --pass verify-protocol --stats 2>&1 >/dev/null"):format(tilua, tir))
    local states = out:match ": states%s+(%d+)" or ""
    local runs = out:match ": runs%s+(%d+)" or ""
    local phases = out:match "fewest phases of a barrier%s+(%d+)" or "-"
    local secs = out:match "//   seconds%s+([%d.]+)" or ""
    local inputs = out:match ": inputs%s+n = (%d+)"
    local err = out:match "error: ([^\n]*)"
    local grid = (err and err:match "grid (%d+)") or ""
    row("pass", e .. (inputs and (" (n = %s)"):format(inputs) or ""), grid, states, runs, phases, secs,
      finished and ("%.2f"):format(cpu) or ("> %d"):format(limit),
      (not finished and "time limit") or (err and err:sub(1, 90):gsub("|", "/")) or "ok")
  else
    row("pass", e, "", "", "", "", "", "", "no kernel compiled (nothing to print)")
  end
  io.stderr:write(rows[#rows], "\n")
  os.remove(tir)
  local out, cpu, finished = run(("%s --check-protocol --emit=ptx examples/%s.lua 2>&1 >/dev/null"):format(tilua, e))
  local err = out:match "protocol violation[^\n]*" or out:match "error: ([^\n]*)" or out:match "^[^\n]*: ([^\n]*)"
  row("pipeline", e, "", "", "", "", "", finished and ("%.2f"):format(cpu) or ("> %d"):format(limit),
    (not finished and "time limit") or (err and err:sub(1, 90):gsub("|", "/")) or "ok")
  io.stderr:write(rows[#rows], "\n")
end

print("| rows | case | grid | states | runs | fewest phases | checker s | process CPU s | result |")
print("|---|---|---|---|---|---|---|---|---|")
for _, r in ipairs(rows) do print(r) end
