-- Launches on the CPU emulator (tilua --emulate, tl.options.emulate:
-- lua/tilua/gpu/emulated.lua) and the picture of a run over time
-- (--timeline, lua/tilua/emulate/timeline.lua). Every example also runs as
-- `tilua EXAMPLE --emulate` under ctest (example.*.emulate).
local H = dofile "spec/helper.lua"
local tl = require "tilua"

local FAKE = os.getenv "TILUA_FAKE_CUDA"
if FAKE == "" then FAKE = nil end

-- Run a script in a fresh tilua with args; -> stdout, stderr, exit code.
local function script(text, args, env)
  local f = os.tmpname() .. ".lua"
  local h = assert(io.open(f, "w"))
  h:write(text)
  h:close()
  local argv = { f }
  for _, a in ipairs(args or {}) do argv[#argv + 1] = a end
  local out, err, code = H.tilua_env(env or {}, argv, 300)
  os.remove(f)
  return out, err, code, f
end

describe("tilua --emulate", function()
  it("gives a device in host memory whose buffers behave as the GPU's, random data included", function()
    local probe = [[
local tl = require "tilua"
local parts = {}
for _, t in ipairs { "f32", "f16", "bf16", "f64", "i32", "u8" } do
  local b = tl.device.random(tl[t], 37, 12345)
  parts[#parts + 1] = t .. "=" .. (b:to_string():gsub(".", function(c) return ("%02x"):format(c:byte()) end))
end
local e = tl.device.random(tl.u8, 9, 7, "e4m3")
parts[#parts + 1] = "e4m3=" .. (e:to_string():gsub(".", function(c) return ("%02x"):format(c:byte()) end))
local a = tl.device.from(tl.i32, { 1, 2, 3, 4 })
local b = tl.device.alloc(tl.i32, 4)
b:copy_from(a)
assert(a:equals(b))
b:copy_from { 1, 2, 9, 4 }
local same, at = a:equals(b)
assert(not same and at == 3, tostring(at))
b:fill(-1)
assert(table.concat(b:to_table(), ",") == "-1,-1,-1,-1")
assert(table.concat(a:to_table(2, 3), ",") == "2,3")
print(tl.device.info().name, tl.device.sm_count())
print(table.concat(parts, "\n"))
]]
    local out, err, code = script(probe, { "--emulate" })
    assert.equal(0, code, err)
    assert.matches("^CPU emulator %(tl.emulate%)\t4\n", out)
    -- TILUA_EMULATE=1 does the same
    local out2, err2 = script(probe, {}, { TILUA_EMULATE = "1" })
    assert.equal(out, out2, err2)
    -- the elements of tl.device.random are the GPU's for the same seed (the
    -- stand-in driver runs l_device.c's generator)
    if not FAKE then pending("TILUA_FAKE_CUDA is not set (run through ctest): the random data was not compared") return end
    local gpu, gerr, gcode = script(probe, {}, { TILUA_LIBCUDA = FAKE })
    assert.equal(0, gcode, gerr)
    assert.equal(out:gsub("^[^\n]*\n", ""), gpu:gsub("^[^\n]*\n", ""))
  end)

  it("runs k:launch on the emulator after the launch's own checks, and the kernel's result is in the buffers", function()
    local out, err, code, file = script([[
local tl = require "tilua"
local k = tl.kernel("scale", { params = { { "x", tl.ptr(tl.f32) }, { "y", tl.ptr(tl.f32) }, { "a", tl.f32 }, { "n", tl.i32 } }, block = 64 })
k:define(function(k, p)
  local i = tl.global_id "x"
  tl.if_(i:lt(p.n), function() (p.y + i):store((p.x + i):load() * p.a) end)
end)
local n = 300
local x = tl.device.from(tl.f32, (function() local t = {} for i = 1, n do t[i] = i end return t end)())
local y = tl.device.alloc(tl.f32, n)
y:fill(0)
k:launch { grid = (n + 63) // 64, args = { x, y, 0.5, n } }
tl.device.synchronize()
local v = y:to_table()
print("y", v[1], v[2], v[300])
print(pcall(k.launch, k, { grid = 5, args = { tl.device.alloc(tl.i32, n), y, 0.5, n } }))
print(pcall(k.launch, k, { grid = { 5, 2 }, args = { x, y, 0.5, n } }))
print(pcall(k.launch, k, { grid = 5, args = { x, x, 0.5, n } }))
]], { "--emulate" })
    assert.equal(0, code, err)
    assert.matches("y\t0.5\t1.0\t150.0\n", out)
    assert.truthy(out:find(":15: launch: argument 'x' is a buffer of i32, but the parameter points to f32", 1, true), out)
    -- a grid along y runs too: its second row of CTAs (CTA 5 is x 0, y 1) writes what the first wrote
    assert.truthy(out:find(":16: --emulate: kernel 'scale': emulate: overwrite\nkernel warp 0 (CTA 5) at", 1, true), out)
    assert.truthy(out:find(":17: --emulate: kernel 'scale': one buffer is passed twice (arguments 1 and 2)", 1, true), out)
    local _ = file
  end)

  it("runs a tile program lowered under the options of its compile, not those in force at the launch", function()
    -- rows claimed at run time (a counter in a workspace argument) compiled, then
    -- the option turned off: the emulator must run what the PTX is
    local out, err, code = script([[
local tl = require "tilua"
tl.options.row_ring = { claims = 2 }
local k = tl.rows.rmsnorm { n = 1024 }
k:compile()
tl.options.row_ring = false
local M, N = 41, 1000
local X, W = tl.device.random(tl.bf16, M * N, 5), tl.device.random(tl.bf16, N, 6)
local Y, R = tl.device.alloc(tl.bf16, M * N), tl.device.alloc(tl.f32, M)
k:run { grid = { M }, args = { X = { X, { M, N } }, W = { W, { N } }, Y = { Y, { M, N } }, Rstd = { R, { M } }, N = N, eps = 1e-5 } }
tl.device.synchronize()
local x, r, worst = X:to_table(), R:to_table(), 0
for i = 0, M - 1 do
  local s = 0
  for j = 1, N do s = s + x[i * N + j] ^ 2 end
  worst = math.max(worst, math.abs(r[i + 1] - 1 / math.sqrt(s / N + 1e-5)) * math.sqrt(s / N + 1e-5))
end
print("worst", worst < 1e-5, k.lowering_options.row_ring.claims, tl.options.row_ring)
]], { "--emulate" })
    assert.equal(0, code, err)
    assert.matches("worst\ttrue\t2\tfalse\n", out)
  end)

  it("reports a kernel's protocol violation as an error at its launch", function()
    -- the pipeline ring copy with its consumer's release left out: the producer waits forever
    local out, err, code = script([[
local tl = require "tilua"
local prc = loadfile("examples/pipeline_ring_copy.lua")("--library")
local k = prc.build { stages = 2, chunk = 512, consumer_warps = 1, name = "broken" }
local releases = {}
k.op:walk(function(op) if op:name() == "cutlass.pipeline.consumer_release" then releases[#releases + 1] = op end end)
releases[1]:erase()
local n = 5 * 512 + 37
local src, dst = tl.device.random(tl.u8, n, 1), tl.device.alloc(tl.u8, n)
k:launch { grid = 1, args = { src, dst, n } }
]], { "--emulate" })
    assert.equal(1, code, out)
    assert.matches(":9: %-%-emulate: kernel 'broken': emulate: deadlock\n[^\n]*\n  producer warp 0 waits on empty%[0%]", err)
  end)
end)

describe("tilua --emulate --timeline=FILE", function()
  it("draws which warp waits on which pipeline stage when, for every launch", function()
    local page = os.tmpname()
    local out, err, code = H.tilua_env({ TILUA_SEED = "5" }, { "examples/pipeline_ring_copy.lua", "--emulate", "--timeline=" .. page }, 600)
    assert.equal(0, code, err)
    assert.matches("pipeline_ring_copy: OK", out)
    local html = assert(H.slurp(page))
    os.remove(page)
    assert.matches("^<!DOCTYPE html>", html)
    assert.truthy(html:find('<h2 id="run-1">1. pipeline_ring_copy, grid 4</h2>', 1, true))
    assert.truthy(html:find('<h2 id="run-3">3. pipeline_ring_copy_ws, grid 4</h2>', 1, true))
    -- the agents by name, their waits on the pipeline's stages, and when
    assert.truthy(html:find(">producer warp 0 (CTA 0)</text>", 1, true))
    assert.matches("<title>consumer warp %d+ %(CTA %d%): waits on full%[%d%][^<]*, steps? %d+", html)
    assert.matches("<title>producer warp 0 %(CTA %d%): waits on empty%[%d%][^<]*, steps? %d+", html)
    assert.matches("<title>producer warp 0 %(CTA 0%): cutlass.pipeline.producer_acquire at examples/pipeline_ring_copy.lua:%d+", html)
    assert.truthy(html:find(">waits on full[0]</p>", 1, true) or html:find("</span>waits on full[0]", 1, true))
    assert.is_nil(html:find("<script", 1, true))
    H.balanced_html(html)
  end)

  it("is a recorder over tl.emulate's on_step, usable on its own", function()
    local timeline = require "tilua.emulate.timeline"
    local PH = dofile "spec/protocol_helper.lua"
    tl.new_module()
    local c = PH.cases.prc
    local k = c.build()
    local rec = timeline.recorder()
    local n = c.n
    local r = tl.emulate(k, { grid = 1, args = { ("\7"):rep(n), { bytes = n }, n }, on_step = rec.on_step })
    assert(r.ok, r.report)
    local run = rec.finish(r, "pipeline ring copy")
    assert.equal(r.steps, run.steps)
    assert.is_true(#run.rows >= 3)
    local waited = false
    for _, row in ipairs(run.rows) do
      local last = 0
      for _, sg in ipairs(row.segs) do
        assert.is_true(sg.from > last and sg.to >= sg.from, "segments in order")
        last = sg.to
        waited = waited or sg.kind == "waits"
      end
    end
    assert.is_true(waited, "some warp waited")
    local html = timeline.render({ run }, "t")
    assert.truthy(html:find("1. pipeline ring copy", 1, true))
    assert.truthy(html:find("waits on full[", 1, true))
  end)
end)
