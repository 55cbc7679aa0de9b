-- vector_add.lua: c = a + b on the GPU, the main job of tilua from end to end:
-- build the kernel, verify it, compile it to PTX (keeping every stage),
-- assemble the PTX with ptxas, launch it on fresh random data and check the
-- result against a CPU reference.
--
--   tilua examples/vector_add.lua [--stages] [--emit=ir|ptx] [--stage=NAME]
--
-- Without a GPU it stops after the ptxas check with "SKIP: no GPU" (exit 0, or 77 under ctest).
local tl = require "tilua"

local seed = tonumber(os.getenv "TILUA_SEED") or os.time()
local N = 1000003 -- not a multiple of the block
local BLOCK = 256
local show_stages = false
for _, a in ipairs(arg or {}) do show_stages = show_stages or a == "--stages" end
tl.options.keep_stages = show_stages -- render each stage's IR only when it is shown

-- {=== build and verify (k:define verifies the module)
local add = tl.kernel("vector_add", {
  params = { { "a", tl.ptr(tl.f32) }, { "b", tl.ptr(tl.f32) }, { "c", tl.ptr(tl.f32) }, { "n", tl.i32 } },
  block = BLOCK,
})

add:define(function(k, p)
  local i = tl.global_id "x"
  tl.if_(i:lt(p.n), function()
    (p.c + i):store((p.a + i):load() + (p.b + i):load())
  end)
end)
-- }===

-- {=== compile to PTX (honours --emit and --stage) and assemble it
local ptx = add:compile()
print(("vector_add: PTX %d bytes after %d stages"):format(#ptx, #tl.last_stages - 1))
if show_stages then
  for _, s in ipairs(tl.last_stages) do
    print(("  %2d %-24s %8.3f ms %6d bytes"):format(s.index, s.name, s.ms or 0, #s.ir))
  end
end
tl.check_ptx("vector_add", ptx)
-- }===

tl.device.require() -- without a GPU: "SKIP: no GPU" and exit

-- {=== launch on fresh random data and check against the CPU
print(("vector_add: seed %d, %d elements on %s"):format(seed, N, tl.device.info().name))
local a, b = tl.device.random(tl.f32, N, seed), tl.device.random(tl.f32, N, seed + 1)
local c <close> = tl.device.alloc(tl.f32, N)
c:fill(0)
add:launch { grid = (N + BLOCK - 1) // BLOCK, args = { a, b, c, N } }
tl.device.synchronize()

local ha, hb, hc = a:to_table(), b:to_table(), c:to_table()
local function f32(x) return (string.unpack("<f", string.pack("<f", x))) end
local bad, nonzero = 0, 0
for i = 1, N do
  local want = f32(ha[i] + hb[i])
  if hc[i] ~= want then
    bad = bad + 1
    if bad <= 5 then print(("  c[%d] = %.9g, expected %.9g"):format(i - 1, hc[i], want)) end
  end
  if ha[i] ~= 0 then nonzero = nonzero + 1 end
end
assert(nonzero > N // 2, "the random input is mostly zeros")
if bad > 0 then
  print(("vector_add: FAILED, %d of %d elements differ"):format(bad, N))
  os.exit(1)
end
print(("vector_add: OK, %d elements match the CPU reference"):format(N))
-- }===
