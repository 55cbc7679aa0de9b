-- tools/bench/launch_callgrind.lua: the host's instructions per launch, counted
-- by valgrind's callgrind against the stand-in driver (spec/c/fake_cuda.c, whose
-- cuLaunchKernel does nearly nothing), so that what tilua itself does in a
-- launch shows without a GPU and without timing noise: k:launch of an empty
-- kernel with 1, 4 and 60 arguments (buffers and integers) against the raw
-- cuLaunchKernel loop of the same function (plan:raw_loop). Each count is the
-- difference of two runs, 2N and N launches, divided by N.
--
--   tilua tools/bench/launch_callgrind.lua [N]      (from the repository root; needs
--                                                   valgrind and build/libfakecuda.so)
-- docs/PERF.md, "Launch cost on the host".
local mode = arg and arg[1]

if mode == "--child" then -- one run: nargs, launches, "launch" | "raw"
  local tl = require "tilua"
  local nargs, n, how = tonumber(arg[2]), tonumber(arg[3]), arg[4]
  local b = tl.device.alloc(tl.f32, 32)
  local params, args = {}, {}
  for i = 1, nargs do
    if i % 2 == 1 then params[i], args[i] = { "p" .. i, tl.ptr(tl.f32) }, b
    else params[i], args[i] = { "n" .. i, tl.i32 }, i end
  end
  local k = tl.kernel("empty", { params = params, block = 32 })
  k:define(function() end)
  local cfg = { grid = 1, args = args }
  k:launch(cfg) -- compile, load
  k:launch(cfg) -- the plan
  tl.device.synchronize()
  if how == "raw" then k._plan:raw_loop(n, 1, args)
  else for _ = 1, n do k:launch(cfg) end end
  tl.device.synchronize()
  return
end

local N = math.tointeger(tonumber(mode or "") or 1000)
local build = os.getenv "TILUA_BUILD_DIR" or "build"
local fake = os.getenv "TILUA_FAKE_CUDA" or (build .. "/libfakecuda.so")
local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end
if not os.execute "command -v valgrind >/dev/null 2>&1" or not exists(fake) then
  print(("launch_callgrind: SKIP (needs valgrind and the stand-in driver %s)"):format(fake))
  return
end
local function count(nargs, n, how)
  local out = os.tmpname()
  local cmd = ("TILUA_LIBCUDA='%s' valgrind --tool=callgrind --callgrind-out-file=/dev/null '%s/tilua' "
    .. "tools/bench/launch_callgrind.lua --child %d %d %s 2>'%s'"):format(fake, build, nargs, n, how, out)
  local ok = os.execute(cmd)
  local f = io.open(out)
  local log = f and f:read "a" or ""
  if f then f:close() end
  os.remove(out)
  local c = log:match "Collected : (%d+)"
  if not ok or not c then error(("launch_callgrind: the run failed (is valgrind there?):\n%s"):format(log), 0) end
  return tonumber(c)
end

print(("launch_callgrind: instructions per launch on the host (stand-in driver), %d and %d launches"):format(N, 2 * N))
print("| arguments | k:launch | raw cuLaunchKernel | tilua's own |")
print("|---|---|---|---|")
for _, nargs in ipairs { 1, 4, 60 } do
  local per = {}
  for _, how in ipairs { "launch", "raw" } do
    per[how] = (count(nargs, 2 * N, how) - count(nargs, N, how)) // N
  end
  print(("| %d | %d | %d | %d |"):format(nargs, per.launch, per.raw, per.launch - per.raw))
end
