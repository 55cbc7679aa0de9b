-- tilua.gpu.device: the GPU as Lua sees it (tl.device), on the bindings of
-- src/lua/l_device.c. Typed device buffers with copies from and to Lua tables
-- and strings, fresh random data, comparison, fill, timing with events.
--
--   tl.device.available(), .error(), .info(), .sm_count(), .synchronize()
--   tl.device.alloc(type, n), .from(type, table | string), .random(type, n [, seed])
--   tl.device.time(fn) -> milliseconds (events around fn)
--   buf.type, buf.n, buf.bytes, #buf
--   buf:to_table([first [, last]]), buf:to_string(), buf:copy_from(buf | table | string),
--   buf:equals(other) -> bool [, first differing element], buf:fill(v), buf:free()
--   (also freed by the garbage collector, and by a to-be-closed variable)
--
-- Without a GPU, available() is false and everything that needs the device
-- raises "no GPU: <why>" at the caller's line. With tl.options.emulate (`tilua
-- --emulate`) there is a device without a GPU: buffers in host memory, launches
-- on the CPU emulator (tilua.gpu.emulated).

local core = require "tilua.core"

local M = {}

-- {=====================================================================
-- Element encodings (string.pack formats; f16 / bf16 by hand)
-- ======================================================================

-- float -> f16 bits, rounding to nearest even; handles subnormals, inf, nan.
local function f16_bits(v)
  if v ~= v then return 0x7E00 end
  local sign = 0
  if v < 0 or (v == 0 and 1 / v < 0) then sign, v = 0x8000, -v end
  if v == math.huge then return sign | 0x7C00 end
  if v == 0 then return sign end
  local m, e = math.frexp(v) -- v = m * 2^e, 0.5 <= m < 1
  e = e - 1                  -- v = (2m) * 2^e
  if e < -14 then            -- subnormal: v / 2^-24
    local q = v / 2 ^ -24
    local r = math.floor(q + 0.5)
    if q + 0.5 == r and r % 2 == 1 then r = r - 1 end
    return sign | r
  end
  local frac = (2 * m - 1) * 1024
  local r = math.floor(frac + 0.5)
  if frac + 0.5 == r and r % 2 == 1 then r = r - 1 end
  if r == 1024 then r, e = 0, e + 1 end
  if e > 15 then return sign | 0x7C00 end
  return sign | ((e + 15) << 10) | r
end

local function f16_value(h)
  local sign = (h & 0x8000) ~= 0 and -1 or 1
  local e, f = (h >> 10) & 0x1F, h & 0x3FF
  if e == 0 then return sign * f * 2 ^ -24 end
  if e == 31 then return f == 0 and sign * math.huge or 0 / 0 end
  return sign * (1 + f / 1024) * 2 ^ (e - 15)
end

-- float -> bf16 bits through f32, rounding to nearest even.
local function bf16_bits(v)
  local x = string.unpack("<I4", string.pack("<f", v))
  if v ~= v then return 0x7FC0 end
  local r = x + 0x7FFF + ((x >> 16) & 1)
  return (r >> 16) & 0xFFFF
end

local function bf16_value(h) return (string.unpack("<f", string.pack("<I4", h << 16))) end

-- The encoding of an element type: size, pack(v) -> bytes, unpack(s, pos) -> v.
local function codec(t)
  local i = t:info()
  if i.kind == "float" then
    if i.name == "f32" then return 4, function(v) return string.pack("<f", v) end, function(s, p) return (string.unpack("<f", s, p)) end end
    if i.name == "f64" then return 8, function(v) return string.pack("<d", v) end, function(s, p) return (string.unpack("<d", s, p)) end end
    local enc, dec = f16_bits, f16_value
    if i.name == "bf16" then enc, dec = bf16_bits, bf16_value end
    return 2, function(v) return string.pack("<I2", enc(v)) end, function(s, p) return dec((string.unpack("<I2", s, p))) end
  end
  if i.kind == "int" or i.kind == "index" then
    local w = i.width or 64
    local n = w <= 8 and 1 or w <= 16 and 2 or w <= 32 and 4 or 8
    local mask = n == 8 and -1 or (1 << (8 * n)) - 1
    return n, function(v)
      if type(v) == "boolean" then v = v and 1 or 0 end
      if math.type(v) ~= "integer" then v = math.tointeger(v) or error(("not an integer: %s"):format(tostring(v)), 0) end
      return string.pack("<I" .. n, n == 8 and v or v & mask)
    end, function(s, p) return (string.unpack("<i" .. n, s, p)) end
  end
  return nil
end

-- }=====================================================================

-- What tl.device says about the device (the GPU, or the CPU emulator where
-- emulated() gives it) and asks of it as a whole.
local function device_functions(tl, D, emulated)
  function D.available() return emulated() ~= nil or core.device_available() end
  function D.error() return emulated() and "" or core.device_error() end
  -- Stop a GPU script cleanly where there is no GPU: "SKIP: no GPU (why)" and
  -- exit code TILUA_NO_GPU_EXIT (77 under ctest, which reports it as skipped;
  -- else 0), through tl.stop: the host prints and exits.
  function D.require()
    if D.available() then return end
    tl.stop(tonumber(os.getenv "TILUA_NO_GPU_EXIT") or 0, "SKIP: no GPU (" .. core.device_error() .. ")")
  end
  -- tl.device.info([ordinal]): the current device's, or device ordinal's
  function D.info(ordinal)
    local e = emulated()
    if not e then return core.device_info(ordinal) end
    local copy = {}
    for k, v in pairs(e.info) do copy[k] = v end
    return copy
  end
  function D.sm_count() return D.info().sm_count end
  -- The grid of a persistent kernel: per_sm CTAs on every SM, but no more CTAs
  -- than there are units of work (and at least one).
  function D.persistent_grid(units, per_sm)
    return math.max(1, math.min(D.sm_count() * (per_sm or 1), units))
  end
  -- waits for every device in use
  function D.synchronize() if not emulated() then core.device_synchronize() end end
  -- milliseconds of fn on the device (on the emulator: of the CPU, which says little)
  function D.time(fn)
    if not emulated() then return core.device_time(fn) end
    local t0 = os.clock()
    fn()
    return (os.clock() - t0) * 1e3
  end
  -- tl.devices() -> { {ordinal, name, sm_count, ...}, ... }: every device the driver sees
  -- (the emulated one alone under --emulate)
  function tl.devices()
    if emulated() then return { D.info() } end
    if not core.device_available() then tl.raise("no GPU: " .. core.device_error() .. " (devices)") end
    local list = {}
    for i = 0, core.device_count() - 1 do list[#list + 1] = core.device_info(i) end
    return list
  end
end

-- buf:view(first, n) -> elements first..first+n-1 (1-based) of buf as a
-- buffer of its own for launches, tensor maps and collectives (its `raw` is
-- the address; the view keeps buf alive). Copies and fills go through buf.
local function add_views(D, Buffer, raise)
  local view_methods = {}
  local View = { __index = function(_, k)
    if view_methods[k] then return view_methods[k] end
    if Buffer[k] then
      return function() raise(("a view of a device buffer has no method '%s': use the buffer it views"):format(k)) end
    end
  end, __len = Buffer.__len, __tostring = function(b) return ("view of %d x %s"):format(b.n, tostring(b.type)) end }
  D.View = View
  function Buffer:view(first, n)
    if math.type(first) ~= "integer" or math.type(n) ~= "integer" or first < 1 or n < 0 or first - 1 + n > self.n then
      raise(("view: elements %s..+%s outside 1..%d"):format(tostring(first), tostring(n), self.n))
    end
    if not self.parent and type(self.raw) ~= "userdata" then raise("view: buffers of the CPU emulator have no views") end
    local base = self.parent and self.raw or self.raw:address()
    return setmetatable({ type = self.type, n = n, bytes = n * self.size, size = self.size, device = self.device,
                          raw = base + (first - 1) * self.size, parent = self.parent or self }, View)
  end
  view_methods.view = Buffer.view
end

-- The devices, their streams and events (src/lua/l_stream.c, l_device.c).
local function add_streams(D, need, raise)
  -- Several devices in one process: new buffers, modules, streams and events
  -- go to the current device; k:launch{device = i} runs on device i.
  function D.use(ordinal) need("device use") return core.device_use(ordinal) end
  function D.current() need("device current") return core.device_current() end
  -- Let device a reach device b's memory directly: true, or false and why.
  function D.peer(a, b) need("peer access") return core.device_peer(a, b) end
  -- The devices the driver sees (TILUA_DEVICE picks this process's).
  function D.count() need("device count") return core.device_count() end
  -- A stream of its own (non-blocking: it never waits for the default stream's
  -- work): k:launch{stream = s}, s:synchronize(), s:wait(event).
  -- tl.device.stream{priority = "high"}: its kernels take SMs first as they free up.
  function D.stream(o)
    need("stream")
    local p = o and o.priority
    if p ~= nil and p ~= "high" and p ~= "normal" then raise("stream: priority must be \"high\" or \"normal\"") end
    return core.stream_create(p == "high")
  end
  -- An event: e:record([stream]), stream:wait(e), e:synchronize(), e:query();
  -- tl.device.event(true) also times: start:elapsed(stop) -> ms.
  function D.event(timing) need("event") return core.event_create(timing) end
  -- The default stream's later work waits for e (recorded on another stream).
  function D.wait(e) core.default_stream_wait(e) end
end

function M.attach(tl)
  local raise = tl.raise
  local D = {}

  -- tilua.gpu.emulated when launches run on the CPU emulator (tl.options.emulate), else nil
  local function emulated() return tl.options.emulate and require "tilua.gpu.emulated" or nil end

  local function need(what)
    if not emulated() and not core.device_available() then
      raise("no GPU: " .. core.device_error() .. (what and (" (" .. what .. ")") or ""))
    end
  end

  device_functions(tl, D, emulated)
  add_streams(D, need, raise)
  D.f16_bits, D.f16_value, D.bf16_bits, D.bf16_value = f16_bits, f16_value, bf16_bits, bf16_value
  function D.float_bits(v, name) return name == "bf16" and bf16_bits(v) or f16_bits(v) end

  local Buffer = {}
  Buffer.__index = Buffer
  Buffer.__len = function(b) return b.n end
  Buffer.__close = function(b) b:free() end
  Buffer.__tostring = function(b) return ("device buffer of %d x %s"):format(b.n, tostring(b.type)) end
  D.Buffer = Buffer

  local function element(t)
    local size, pack, unpack = codec(t)
    if not size then raise(("device buffers hold integers and floats, not %s"):format(tostring(t))) end
    return size, pack, unpack
  end

  -- tl.device.alloc(type, n) -> an uninitialized buffer of n elements
  function D.alloc(t, n)
    if math.type(n) ~= "integer" or n < 0 then raise("alloc: the element count must be a non-negative integer") end
    local size = element(t)
    need("alloc")
    local e = emulated()
    local raw = e and e.alloc(n * size) or core.buffer_alloc(n * size)
    return setmetatable({ type = t, n = n, bytes = n * size, size = size, raw = raw, device = e and 0 or raw:device() },
                        Buffer)
  end

  local function encode(t, vals)
    local _, pack = element(t)
    local parts = {}
    for i = 1, #vals do parts[i] = pack(vals[i]) end
    return table.concat(parts)
  end

  -- tl.device.from(type, table | string) -> a buffer holding those elements (a string is raw bytes)
  function D.from(t, data)
    local size = element(t)
    local bytes = type(data) == "string" and data or encode(t, data)
    if #bytes % size ~= 0 then raise(("from: %d bytes are not a whole number of %s"):format(#bytes, tostring(t))) end
    local b = D.alloc(t, #bytes // size)
    b.raw:upload(bytes)
    return b
  end

  -- tl.device.random(type, n [, seed [, kind]]): integers uniform over all bits, floats
  -- in [-1, 1) (exact in the type). The seed defaults to os.time(). kind "e4m3" or
  -- "e5m2" fills bytes with finite fp8 values of magnitude in [0.25, 4).
  function D.random(t, n, seed, kind)
    local b = D.alloc(t, n)
    local i = t:info()
    kind = kind or (i.kind == "float" and i.name or "bits")
    b.raw:fill_random(kind, seed or os.time())
    return b
  end

  function Buffer:free()
    if self.raw and not self.parent then self.raw:free() end
  end

  add_views(D, Buffer, raise)

  function Buffer:to_string() return self.raw:download() end

  -- buf:to_table([first [, last]]) -> elements first..last (1-based)
  function Buffer:to_table(first, last)
    first, last = first or 1, last or self.n
    if first < 1 or last > self.n or first > last + 1 then raise(("to_table: range %d..%d outside 1..%d"):format(first, last, self.n)) end
    local s = self.raw:download((first - 1) * self.size, (last - first + 1) * self.size)
    local _, _, unpack = element(self.type)
    local out = {}
    for k = 1, last - first + 1 do out[k] = unpack(s, (k - 1) * self.size + 1) end
    return out
  end

  -- buf:copy_from(other buffer | table | string)
  function Buffer:copy_from(src)
    if getmetatable(src) == Buffer then
      if src.bytes > self.bytes then raise(("copy_from: %d bytes do not fit %d"):format(src.bytes, self.bytes)) end
      self.raw:copy_from(src.raw, src.bytes)
      return self
    end
    local bytes = type(src) == "string" and src or encode(self.type, src)
    if #bytes > self.bytes then raise(("copy_from: %d bytes do not fit %d"):format(#bytes, self.bytes)) end
    self.raw:upload(bytes)
    return self
  end

  -- buf:equals(other) -> true | false, index of the first element that differs
  function Buffer:equals(other)
    if getmetatable(other) ~= Buffer then raise("equals: expected a device buffer") end
    if other.bytes ~= self.bytes then return false, 1 end
    local same, at = self.raw:equals(other.raw)
    if same then return true end
    return false, at // self.size + 1
  end

  -- buf:fill(v): every element set to v
  function Buffer:fill(v)
    local _, pack = element(self.type)
    local one = pack(v)
    if one == string.rep(one:sub(1, 1), #one) then
      self.raw:memset(one:byte(1))
      return self
    end
    local chunk_n = math.max(1, math.min(self.n, (16 << 20) // self.size))
    local chunk = string.rep(one, chunk_n)
    for at = 0, self.n - 1, chunk_n do
      local k = math.min(chunk_n, self.n - at)
      self.raw:upload(k == chunk_n and chunk or chunk:sub(1, k * self.size), at * self.size)
    end
    return self
  end

  return D
end

return M
