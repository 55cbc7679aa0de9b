-- spec/gpu_runner.lua: runs a busted spec whose tests need a GPU (spec/*_gpu_spec.lua).
-- Its GPU tests report pending where there is no GPU; this runner then exits 77,
-- which ctest reports as skipped (never passed). A failing test still fails.
--   tilua spec/gpu_runner.lua BUSTED SPEC
local busted_path, spec = arg[1], arg[2]
assert(busted_path and spec, "usage: tilua spec/gpu_runner.lua BUSTED SPEC")
arg = { [0] = busted_path, "--no-auto-insulate", "-o", "utfTerminal", spec } -- luacheck: ignore 121 (busted reads it)
require "busted.runner" { standalone = false } -- exits non-zero itself on failures
if not require("tilua").device.available() then
  print("SKIP: no GPU: the GPU tests of " .. spec .. " did not run")
  os.exit(tonumber(os.getenv "TILUA_NO_GPU_EXIT") or 77)
end
