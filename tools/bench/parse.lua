-- tools/bench/parse.lua: how fast the textual-IR parser reads a large module,
-- and how much memory it holds, against the printer and the verifier on the
-- same module in the same run (no GPU needed).
--
--   tilua tools/bench/parse.lua [ops ...]      (default: 100000 1000000)
--
-- The module is the warp-specialized GEMM fixture's kernel body repeated
-- until it has the requested number of ops (every op of the fixture: region
-- ops, attribute dictionaries, types of every dialect). Each size runs in a
-- fresh tilua process, so the peak resident size (VmHWM) is that size's own.
local sizes = {}
for i = 1, #(arg or {}) do sizes[#sizes + 1] = math.tointeger(tonumber(arg[i])) end

local FIXTURE = "spec/fixtures/alloc/gemm_bf16.tir"

local function peak_mb()
  local f = io.open "/proc/self/status"
  if not f then return nil end
  local kb = f:read("a"):match "VmHWM:%s*(%d+)"
  f:close()
  return kb and tonumber(kb) / 1024
end

-- One measurement, in this process: the size asked in TILUA_PARSE_OPS.
local child = os.getenv "TILUA_PARSE_OPS"
if child then
  local tl = require "tilua"
  local parser = require "tilua.parser"
  local want = math.tointeger(tonumber(child))
  local src = assert(io.open(FIXTURE)):read "a"
  local m0 = assert(parser.parse(src, { file = FIXTURE }))
  -- the body of the first kernel, renamed per copy so the symbols stay unique
  local kernel = m0:print():match "\n(  tile%.kernel .-\n  })\n"
  local per = select(2, kernel:gsub("\n    ", ""))
  local copies, parts = math.max(1, want // per), { "module {\n" }
  for i = 1, copies do parts[#parts + 1] = (kernel:gsub('sym_name = "([^"]*)"', 'sym_name = "%1_' .. i .. '"')) .. "\n" end
  parts[#parts + 1] = "}\n"
  local text = table.concat(parts)
  m0 = nil -- luacheck: ignore 311 (the first module goes to the collector before the measure)
  collectgarbage()
  local base = peak_mb()
  local t0 = os.clock()
  local m = assert(parser.parse(text, { file = "bench.tir" }))
  local t_parse = os.clock() - t0
  local ops = 0
  m:walk(function() ops = ops + 1 end)
  t0 = os.clock()
  assert(m:verify())
  local t_verify = os.clock() - t0
  t0 = os.clock()
  local out = m:print()
  local t_print = os.clock() - t0
  assert(#out > 0)
  print(("%d\t%.3f\t%.3f\t%.3f\t%.0f\t%.0f\t%d"):format(ops, t_parse, t_verify, t_print, peak_mb() or 0, base or 0, #text))
  tl.core.default_context():close()
  return
end

if #sizes == 0 then sizes = { 100000, 1000000 } end
local exe = arg[-1] or "tilua"
local function sh_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
print(("%-10s %-10s %-9s %-9s %-9s %-10s %-10s %s"):format("ops", "text MB", "parse s", "verify s", "print s",
  "peak MB", "base MB", "parse µs/op"))
for _, n in ipairs(sizes) do
  local p = io.popen(("TILUA_PARSE_OPS=%d %s %s"):format(n, sh_quote(exe), sh_quote(arg[0])))
  local line = p:read "a"
  p:close()
  local ops, tp, tv, tpr, peak, base, bytes = line:match "(%d+)\t([%d.]+)\t([%d.]+)\t([%d.]+)\t(%d+)\t(%d+)\t(%d+)"
  if not ops then error("the measurement failed:\n" .. line) end
  print(("%-10s %-10.1f %-9s %-9s %-9s %-10s %-10s %.2f"):format(ops, tonumber(bytes) / 2 ^ 20, tp, tv, tpr, peak, base,
    tonumber(tp) / tonumber(ops) * 1e6))
end
