-- tilua.gpu.emulated: a device without a GPU. With tl.options.emulate (`tilua
-- --emulate`, TILUA_EMULATE=1) tl.device's buffers live in host memory and
-- every k:launch runs the kernel on the CPU emulator, tl.emulate, with the
-- arguments the launch would have passed (after the same checks): the kernel
-- as written (its agents, pipelines and barriers by name, which the timeline
-- shows), a tile program at the level its lowering builds (agents and a
-- pipeline: tile-to-ptx up to convert-tileas-to-cutlass and the tile
-- scheduler's lowering, whose parameters are the compiled kernel's). The
-- emulator computes what the GPU does (spec/emulate_gpu_spec.lua compares them
-- byte for byte), slower by orders of magnitude: the examples pick small
-- problems (tilua.gpu.check.small()).
--
--   M.alloc(bytes) -> a host buffer with the methods of the C device buffers
--                     (l_device.c): upload, download, fill_random, copy_from,
--                     equals, memset, free
--   M.info          what tl.device.info() says
--   M.tensor_map(d) -> a tensor map checked as core.tensor_map checks it, over a host buffer
--   M.launch(tl, k, grid, list) runs one launch: list as launch.lua builds it,
--                     { {kind, value}, ... } in the order of the compiled kernel's parameters
--
-- tl.options.timeline = path (`--timeline=FILE`) records every launch's run
-- and writes the page of tilua.emulate.timeline after each.

local core = require "tilua.core"

local M = {}

-- {=====================================================================
-- Host buffers
-- ======================================================================

local Raw = { __name = "tilua.EmulatedBuffer" }
Raw.__index = Raw

function M.alloc(bytes) return setmetatable({ data = ("\0"):rep(bytes), bytes = bytes }, Raw) end

local function live(b)
  if not b.data then error("the buffer was freed", 0) end
  return b.data
end

local function range(b, offset, n, what)
  offset = offset or 0
  n = n or b.bytes - offset
  if offset < 0 or n < 0 or offset + n > b.bytes then
    error(("%s: bytes [%d, %d) outside the buffer's %d"):format(what, offset, offset + n, b.bytes), 0)
  end
  return offset, n
end

function Raw:upload(s, offset)
  local d = live(self)
  offset = range(self, offset, #s, "upload")
  self.data = d:sub(1, offset) .. s .. d:sub(offset + #s + 1)
end

function Raw:download(offset, n)
  local d = live(self)
  offset, n = range(self, offset, n, "download")
  return d:sub(offset + 1, offset + n)
end

function Raw:memset(byte) live(self) self.data = string.char(byte):rep(self.bytes) end
function Raw:free() self.data = nil end

function Raw:copy_from(src, n)
  self:upload(src:download(0, n), 0)
end

-- -> true | false, the offset of the first byte that differs
function Raw:equals(other)
  local a, b = live(self), live(other)
  if #a ~= #b then return false end
  if a == b then return true end
  for i = 1, #a do
    if a:byte(i) ~= b:byte(i) then return false, i - 1 end
  end
end

-- The generator of l_device.c's buf_fill_random (xorshift64*, the same
-- elements for the same seed and kind): "bits", "f16", "bf16", "f32", "f64",
-- "e4m3", "e5m2".
function Raw:fill_random(kind, seed)
  live(self)
  local s = seed * 0x9E3779B97F4A7C15 + 1
  local function next64()
    s = s ~ (s >> 12)
    s = s ~ (s << 25)
    s = s ~ (s >> 27)
    return s * 0x2545F4914F6CDD1D
  end
  local size = kind == "f32" and 4 or (kind == "f16" or kind == "bf16") and 2 or (kind == "e4m3" or kind == "e5m2") and 1 or 8
  local out, n = {}, 0
  while n + size <= self.bytes do
    local r = next64()
    local v = (r >> 48) / 32768.0 - 1.0
    local piece
    if kind == "f32" then piece = string.pack("<f", v)
    elseif kind == "f64" then piece = string.pack("<d", v)
    elseif kind == "e4m3" or kind == "e5m2" then
      local sg, e, m = ((r >> 63) & 1) << 7, (r >> 56) & 3, (r >> 48) & 0xffff
      piece = string.char(kind == "e4m3" and (sg | (e + 5) << 3 | (m & 7)) or (sg | (e + 13) << 2 | (m & 3)))
    elseif kind == "f16" or kind == "bf16" then
      local f = ((r >> 56) & 0xff) / 128.0 - 1.0
      local x = string.unpack("<I4", string.pack("<f", f))
      local h
      if kind == "bf16" then h = x >> 16
      elseif f == 0 then h = 0
      else h = ((x >> 16) & 0x8000) | ((((x >> 23) & 0xff) - 127 + 15) << 10) | ((x & 0x7fffff) >> 13) end
      piece = string.pack("<I2", h)
    else piece = string.pack("<i8", r) end
    n = n + size
    out[#out + 1] = piece
  end
  while n < self.bytes do -- a tail shorter than an element: bytes
    out[#out + 1] = string.char(next64() & 0xff)
    n = n + 1
  end
  self.data = table.concat(out)
end

-- }=====================================================================

-- What tl.device.info() says: a device of a few SMs, so that grids sized by
-- the SM count stay small; the limits are sm_90a's.
M.info = { name = "CPU emulator (tl.emulate)", ordinal = 0, sm_count = 4, cc_major = 9, cc_minor = 0,
           smem_optin = core.limits().max_smem, total_mem = 0, driver_version = 0 }

-- {=====================================================================
-- Tensor maps over host buffers
-- ======================================================================

local Map = { __name = "tilua.EmulatedTensorMap" }
Map.__index = Map
function Map:info() return self.map:info() end

-- d: core.tensor_map's fields, its address a host buffer. Checked by
-- core.tensor_map (without encoding it for a driver).
function M.tensor_map(d)
  local raw = d.address
  if getmetatable(raw) ~= Raw then error("tensor_map: 'buffer' must be a device buffer", 0) end
  local c = {}
  for k, v in pairs(d) do c[k] = v end
  c.address, c.bytes, c.encode = 16, raw.bytes, false -- an aligned stand-in address; the buffer's size
  return setmetatable({ map = core.tensor_map(c), raw = raw }, Map)
end

-- }=====================================================================

-- {=====================================================================
-- Launches
-- ======================================================================

-- The kernel op the emulator runs for kernel k (see the top), kept per compile.
local function emulated_op(k)
  if not k.tile_program then return k.op end
  if k._emulated_for ~= k.ptx then
    local m = k.module:clone()
    -- lowered under the options it was compiled with, not those of the launch
    local compile = require "tilua.gpu.compile"
    local ok, msg = compile.with_lowering_options(k.lowering_options or {}, function()
      return core.run_pipeline(m, compile.tile_pipeline "convert-tileas-to-cutlass" .. ",lower-tile-scheduler")
    end)
    if not ok then error(msg, 0) end
    for _, op in ipairs(m:region(1):entry():ops()) do
      if op:name() == "tile.kernel" and op:attr "sym_name" == k.name then k._emulated_op = op end
    end
    k._emulated_for = k.ptx
  end
  return k._emulated_op
end

-- The emulator's arguments for a launch's list; the host buffers they came from.
local function emulator_args(tl, k, kop, list)
  local params = kop:region(1):entry():args()
  local args, written, seen = {}, {}, {}
  for i, a in ipairs(list) do
    local kind, v = a[1], a[2]
    if kind == "ptr" then
      if getmetatable(v) ~= Raw then
        tl.raise(("--emulate: kernel '%s': argument %d is an address, not a buffer: the emulator runs on buffers only"):format(k.name, i))
      end
      if seen[v] then
        tl.raise(("--emulate: kernel '%s': one buffer is passed twice (arguments %d and %d): the emulator gives each its own memory"):format(k.name, seen[v], i))
      end
      seen[v] = i
      args[i], written[i] = live(v), v
    elseif kind == "tmap" then
      local info = v:info()
      if seen[v.raw] and seen[v.raw] ~= i then
        -- two maps of one buffer (a GEMM's C read and D written through one) would not see each other
        tl.raise(("--emulate: kernel '%s': one buffer behind two arguments (%d and %d)"):format(k.name, seen[v.raw], i))
      end
      seen[v.raw] = i
      args[i] = { data = live(v.raw), shape = info.shape, strides = info.strides }
      written[i] = v.raw
    elseif kind == "b16" then -- a 16-bit float travels as its bits (launch.lua): the emulator takes its value
      args[i] = params[i]:type():info().name == "bf16" and tl.device.bf16_value(v) or tl.device.f16_value(v)
    else
      args[i] = v
    end
  end
  return args, written
end

local timeline_runs -- the launches the page shows (tl.options.timeline)

-- One launch: the compiled kernel on the emulator over its grid of CTAs.
function M.launch(tl, k, grid, list)
  local kop = emulated_op(k)
  local args, written = emulator_args(tl, k, kop, list)
  local o = { grid = { grid[1], grid[2], grid[3] }, args = args, policy = "round_robin" }
  local path = tl.options.timeline
  local rec
  if path then
    rec = require("tilua.emulate.timeline").recorder()
    o.on_step = rec.on_step
  end
  local r = tl.emulate(kop, o)
  if rec then
    timeline_runs = timeline_runs or {}
    timeline_runs[#timeline_runs + 1] = rec.finish(r, ("%s, grid %s"):format(k.name, table.concat(grid, " x "):gsub(" x 1 x 1$", ""):gsub(" x 1$", "")))
    local f = assert(io.open(path, "w"))
    f:write(require("tilua.emulate.timeline").render(timeline_runs, "tilua --emulate timeline"))
    f:close()
  end
  if not r.ok then tl.raise(("--emulate: kernel '%s': %s"):format(k.name, r.report)) end
  for i, raw in pairs(written) do raw:upload(r.read(i)) end
end

-- }=====================================================================

return M
