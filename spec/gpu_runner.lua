-- spec/gpu_runner.lua: runs a busted spec whose tests need a GPU (spec/*_gpu_spec.lua).
-- Its GPU tests report pending where there is no GPU; this runner then exits 77,
-- which ctest reports as skipped (never passed). A failing test still fails.
--   tilua spec/gpu_runner.lua BUSTED [BUSTED_OPTION...] SPEC
-- (the options, e.g. --filter=PATTERN, go to busted; the spec is the last argument)
local busted_path, spec = arg[1], arg[#arg]
assert(busted_path and #arg >= 2, "usage: tilua spec/gpu_runner.lua BUSTED [BUSTED_OPTION...] SPEC")
local busted_arg = { [0] = busted_path, "--no-auto-insulate", "-o", "utfTerminal" }
for i = 2, #arg - 1 do busted_arg[#busted_arg + 1] = arg[i] end
busted_arg[#busted_arg + 1] = spec
arg = busted_arg -- luacheck: ignore 121 (busted reads it)
require "busted.runner" { standalone = false } -- exits non-zero itself on failures
if not require("tilua").device.available() then
  print("SKIP: no GPU: the GPU tests of " .. spec .. " did not run")
  os.exit(tonumber(os.getenv "TILUA_NO_GPU_EXIT") or 77)
end
-- a spec whose tests need more than one GPU says why they did not run (H.gpus)
if rawget(_G, "TILUA_GPU_SKIP") then
  print("SKIP: " .. rawget(_G, "TILUA_GPU_SKIP") .. ": the GPU tests of " .. spec .. " did not run")
  os.exit(tonumber(os.getenv "TILUA_NO_GPU_EXIT") or 77)
end
