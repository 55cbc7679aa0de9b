-- tilua.gpu.check: the harness of the GPU examples. Each example is a library
--
--   { name = "...", prepare = fn(),                 -- build, compile, ptxas (once)
--     run = fn(o) -> ok, summary,                   -- one check on fresh data, never exits
--     grids = fn(sms) -> { grid, ... } }            -- launch shapes the stress run covers
--
-- that `loadfile("examples/x.lua")("--library")` returns; run as a script, the
-- example calls check.main(example, cases or fn() -> cases), which prepares it, stops with
-- "SKIP: no GPU" where there is none, runs each case and raises when one fails
-- (the host exits 1).
-- A case o: { seed = n, grid = CTAs (nil: the example's own), small = bool }.
-- TILUA_SEED fixes the seed of a script run; TILUA_SMALL=1 makes its problems
-- small (tools/gpu sanitize runs the examples under compute-sanitizer so).
-- tools/gpu stress runs every example's run() 100 times through
-- tools/stress.lua with fresh seeds over its grids.

local M = {}

function M.small() return os.getenv "TILUA_SMALL" == "1" end
function M.seed() return tonumber(os.getenv "TILUA_SEED") or os.time() end

-- The launch shapes a persistent or grid-strided kernel meets: one CTA, one per
-- SM, several per SM, and a count that is no multiple of the SM count; each a
-- multiple of `unit` (a cluster's CTAs).
function M.grids(sms, unit)
  unit = unit or 1
  local function up(n) return math.max(unit, (n + unit - 1) // unit * unit) end
  local list, seen = {}, {}
  for _, g in ipairs { up(1), up(sms), up(3 * sms), up(sms + sms // 2 + 1) } do
    if not seen[g] then list[#list + 1], seen[g] = g, true end
  end
  return list
end

-- The script path of an example: prepare, require a GPU, run the cases.
function M.main(ex, cases)
  local tl = require "tilua"
  ex.prepare()
  tl.device.require() -- without a GPU: "SKIP: no GPU" and exit
  if type(cases) == "function" then cases = cases() end -- cases that need the device (its SM count)
  local seed, bad = M.seed(), 0
  for i, c in ipairs(cases or { {} }) do
    local o = {}
    for k, v in pairs(c) do o[k] = v end
    o.seed = o.seed or seed + i - 1
    if o.small == nil then o.small = M.small() end
    local ok, summary = ex.run(o)
    print(("%s: %s %s"):format(ex.name, ok and "OK," or "FAILED,", summary))
    if not ok then bad = bad + 1 end
  end
  if bad > 0 then error(("%s: %d of %d cases failed"):format(ex.name, bad, #(cases or { {} })), 0) end
end

-- Compile kernel k (honouring --emit and --stage), say how big its PTX and its
-- shared memory are under `name`, and assemble the PTX with ptxas; -> the PTX.
function M.compile(name, k)
  local tl = require "tilua"
  local ptx = k:compile()
  print(("%s: PTX %d bytes, %d bytes of shared memory"):format(name, #ptx, k:lowered_op():attr_or_default "shared_bytes"))
  tl.check_ptx(name, ptx)
  return ptx
end

-- An integer wrapped to 32 bits, signed: what the GPU's i32 arithmetic gives.
function M.i32(v)
  v = v & 0xFFFFFFFF
  return v >= 0x80000000 and v - 0x100000000 or v
end

-- Count the mismatches of a check: fail(fmt, ...) records one (printing the
-- first few), done() -> the count.
function M.mismatches(name, show)
  local n = 0
  return function(fmt, ...)
    n = n + 1
    if n <= (show or 5) then print(("%s: %s"):format(name, fmt:format(...))) end
  end, function() return n end
end

return M
