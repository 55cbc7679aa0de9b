-- vector_add.lua: c = a + b on the GPU, the main job of tilua from end to end:
-- build the kernel, verify it, compile it to PTX (keeping every stage),
-- assemble the PTX with ptxas, launch it on fresh random data and check the
-- result against a CPU reference.
--
--   tilua examples/vector_add.lua [--stages] [--emit=ir|ptx] [--stage=NAME]
--   loadfile("examples/vector_add.lua")("--library") -> the example (tilua.gpu.check)
--
-- Without a GPU it stops after the ptxas check with "SKIP: no GPU" (exit 0, or 77 under ctest).
local tl = require "tilua"
local check = require "tilua.gpu.check"

local N = 1000003 -- not a multiple of the block
local BLOCK = 256
local show_stages = false
for _, a in ipairs(arg or {}) do show_stages = show_stages or a == "--stages" end
tl.options.keep_stages = show_stages -- render each stage's IR only when it is shown
local function f32(x) return (string.unpack("<f", string.pack("<f", x))) end

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

-- {=== launch on fresh random data and check against the CPU
-- run{seed, grid, small} -> ok, summary: n = grid * BLOCK - 37 elements for a
-- given grid (never a multiple of the block), else 4099 (small) or N.
local function run(o)
  local n = o.grid and o.grid * BLOCK - 37 or o.small and 4099 or N
  local a <close> = tl.device.random(tl.f32, n, o.seed)
  local b <close> = tl.device.random(tl.f32, n, o.seed + 1)
  local c <close> = tl.device.alloc(tl.f32, n)
  c:fill(0)
  local grid = (n + BLOCK - 1) // BLOCK
  add:launch { grid = grid, args = { a, b, c, n } }
  tl.device.synchronize()
  local ha, hb, hc = a:to_table(), b:to_table(), c:to_table()
  local fail, failures = check.mismatches("vector_add")
  local nonzero = 0
  for i = 1, n do
    local want = f32(ha[i] + hb[i])
    if hc[i] ~= want then fail("c[%d] = %.9g, expected %.9g", i - 1, hc[i], want) end
    if ha[i] ~= 0 then nonzero = nonzero + 1 end
  end
  if nonzero <= n // 2 then return false, "the random input is mostly zeros" end
  local what = ("seed %d, %d elements, grid %d on %s"):format(o.seed, n, grid, tl.device.info().name)
  if failures() > 0 then return false, ("%s: %d elements differ"):format(what, failures()) end
  return true, what .. ": every element matches the CPU reference"
end
-- }===

local example = { name = "vector_add", prepare = function() end, run = run,
                  grids = function(sms) return check.grids(sms) end }
example.kernel = add -- the kernel (for the emulator's tests)
if ... == "--library" then return example end
check.main(example)
