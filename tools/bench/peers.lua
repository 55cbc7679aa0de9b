-- tools/bench/peers.lua: what the benches that time a tile program against
-- peers in one run share (dofile "tools/bench/peers.lua"): the command line's
-- integer options, the timing of the runs and the table they print.
local tl = require "tilua"
local P = {}

-- The command line's --key=N options over the defaults o (changed in place). -> o
function P.options(o)
  for _, a in ipairs(arg or {}) do
    local key, v = a:match "^%-%-([%w_]+)=(%d+)$"
    if key then o[key] = tonumber(v) end
  end
  return o
end

-- runs = { { name, fn }, ... }: each run once (warm-up), then the best of 5
-- samples of CUDA events around 10 back-to-back calls, the runs alternating
-- (so clocks and caches treat them alike). -> the best time of each, in ms
function P.time(runs)
  local D = tl.device
  local function sample(fn) return D.time(function() for _ = 1, 10 do fn() end end) / 10 end
  for _, r in ipairs(runs) do r[2]() end
  D.synchronize()
  local best = {}
  for _ = 1, 5 do
    for i, r in ipairs(runs) do best[i] = math.min(best[i] or math.huge, sample(r[2])) end
  end
  return best
end

-- Print the table: name, ms, TFLOP/s of `flops`, and a ratio column
-- (header; ratio(i) -> a number, or nil for "-").
function P.table(runs, best, flops, header, ratio)
  print(("| kernel | ms | TFLOP/s | %s |"):format(header))
  print("|---|---|---|---|")
  for i, r in ipairs(runs) do
    local x = ratio(i)
    print(("| %s | %.4f | %.1f | %s |"):format(r[1], best[i], flops / best[i] / 1e9, x and ("%.3f"):format(x) or "-"))
  end
end

return P
