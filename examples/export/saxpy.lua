-- examples/export/saxpy.lua: a kernel to export for a C host (docs/embedding.md).
--
--   tilua export -o out examples/export/saxpy.lua     writes out/saxpy.{h,c} and the runtime
--   cc -std=c11 -Iout examples/export/host.c out/tilua_export.c out/saxpy.c -ldl -o saxpy && ./saxpy
--
-- Run as a script it compiles the kernel and checks its PTX with ptxas.
local tl = require "tilua"

local saxpy = tl.kernel("saxpy", {
  params = { { "x", tl.ptr(tl.f32) }, { "y", tl.ptr(tl.f32) }, { "a", tl.f32 }, { "n", tl.i32 } },
  block = 256,
})
saxpy:define(function(k, p)
  local i = tl.global_id "x"
  tl.if_(i:lt(p.n), function()
    (p.y + i):store(p.a * (p.x + i):load() + (p.y + i):load())
  end)
end)

tl.check_ptx("saxpy", saxpy:compile())
