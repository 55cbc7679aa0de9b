-- tools/snapshot.lua: writes what the compiler produces for a fixed corpus into
-- one folder, so that a refactoring can be checked to change none of it:
--
--   build/tilua tools/snapshot.lua DIR      (from the repository root)
--   diff -r BEFORE AFTER
--
-- The corpus: the PTX of every example (`--emit=ptx`, with the options the
-- tests use), the IR after convert-tileas-to-cutlass of the tile examples, the
-- PTX of the stdlib GEMM configurations the specs compile, and `tilua opt` on
-- every pass fixture with the options of its RUN lines, both as written and
-- without --verify-diagnostics (so the diagnostics themselves are compared),
-- with --stats (the protocol checker's state counts; its time left out).
local tl = require "tilua"

local dir = arg[1] or error("usage: tilua tools/snapshot.lua DIR", 0)
local exe = arg[-1] or "build/tilua"
assert(os.execute(("mkdir -p '%s'"):format(dir)))

local function sh(cmd, file)
  local p = assert(io.popen(("TILUA_CHECK_PROTOCOL=0 %s 2>&1; echo \"exit $?\""):format(cmd)))
  local text = p:read "a"
  p:close()
  text = text:gsub("\n//%s+seconds%s+[%d.]+", "") -- the one line that differs between runs
  local f = assert(io.open(dir .. "/" .. file, "w"))
  f:write(text)
  f:close()
end

-- {=== examples
local variants = {
  { "tile_gemm", "--cluster=2" }, { "tile_gemm", "--cluster=2 --bm=256" }, { "tile_gemm", "--stages=2" },
  { "tile_gemm", "--schedule=streamk --m=1000 --n=1480 --k=520" }, { "tile_gemm", "--schedule=splitk --splits=3" },
  { "tile_gemm_softmax", "--cluster=2 --bm=256" },
  { "gemm", "--consumers=pingpong" }, { "gemm", "--schedule=streamk" }, { "gemm", "--cluster=2" },
}
local p = assert(io.popen "ls examples/*.lua")
for f in p:lines() do
  local name = f:match "examples/(.-)%.lua$"
  variants[#variants + 1] = { name, "" }
end
p:close()
for _, v in ipairs(variants) do
  local tag = v[1] .. (v[2] ~= "" and ("." .. v[2]:gsub("[%-= ]+", "_")) or "")
  sh(("%s examples/%s.lua %s --emit=ptx"):format(exe, v[1], v[2]), "example." .. tag .. ".ptx")
  if v[1]:match "^tile_" then
    sh(("%s examples/%s.lua %s --stage=convert-tileas-to-cutlass"):format(exe, v[1], v[2]), "example." .. tag .. ".tir")
  end
end
-- }===

-- {=== stdlib GEMM configurations (spec/tensor_spec.lua, tileas_lowering_spec.lua, protocol specs)
local gemms = {
  { m = 1000, n = 1480, k = 520 },
  { m = 512, n = 512, k = 512, a_major = "m", b_major = "n" },
  { m = 512, n = 512, k = 1024, dtype = "e4m3" },
  { m = 512, n = 512, k = 512, bias = true, beta = 0.5, activation = "relu", alpha = 2 },
  { m = 512, n = 384, k = 512, bn = 128, stages = 5, schedule = "data_parallel" },
  { m = 256, n = 256, k = 64, dtype = "f16", out = "f16" },
  { m = 512, n = 512, k = 512, consumers = "pingpong" },
  { m = 1024, n = 1024, k = 16384, schedule = "splitk", bn = 128 },
  { m = 640, n = 768, k = 512, cluster = 2 },
  { m = 4096, n = 4096, k = 4096, bn = 256, stages = 3, schedule = "persistent" },
  { m = 4096, n = 4096, k = 4096, bn = 256, stages = 3, schedule = "persistent", cluster = 2 },
  { m = 1000, n = 1480, k = 520, bn = 256, schedule = "streamk", sms = 132 },
  { m = 128, n = 64, k = 256, bn = 64, stages = 2, schedule = "data_parallel" },
}
for i, cfg in ipairs(gemms) do
  local ok, ptx = pcall(function() return tl.gemm.build(cfg).kernel:compile() end)
  local f = assert(io.open(("%s/gemm.%02d.ptx"):format(dir, i), "w"))
  f:write(ok and ptx or ("error: " .. tostring(ptx)))
  f:close()
end
-- }===

-- {=== pass fixtures
p = assert(io.popen "ls spec/fixtures/passes/*.tir")
for f in p:lines() do
  local name = f:match "([^/]+)%.tir$"
  local text = assert(io.open(f)):read "a"
  local n = 0
  for opts in text:gmatch "//%s*RUN:%s*([^\n]*)" do
    n = n + 1
    sh(("%s opt %s --stats %s"):format(exe, f, opts), ("pass.%s.%d.txt"):format(name, n))
    local plain = opts:gsub("%-%-verify%-diagnostics", "")
    if plain ~= opts then sh(("%s opt %s --stats %s"):format(exe, f, plain), ("pass.%s.%d.diag.txt"):format(name, n)) end
  end
end
p:close()
-- }===
print(("snapshot written to %s"):format(dir))
