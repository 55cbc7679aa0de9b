-- tilua.emulate.values: how the emulator holds values in memory. Integers wrap
-- at their width (tilua.emulate.interp), floats are Lua numbers rounded to
-- their type; memory is a table of bytes.
--
--   codec_of(type) -> { size, width | fmt | vector (n, elem) | unsupported }: an
--                     access of a loaded or stored type, for decode / encode
--   decode(c, bytes, off), encode(c, v, out, off): a scalar from / into bytes
--   f32(x): x rounded to f32; float16.dec / enc [bf16 | f16]: 16-bit floats;
--   fp8_dec [e4m3 | e5m2]: fp8 bytes
--   elem_codec(t): a tile element type's { size, float, dec, enc, round }
--   bitcast(x, from, to): arith.bitcast's value

local interp = require "tilua.emulate.interp"
local wrap = interp.wrap

local V = {}

-- The bytes of a value of type t (the C side's, dia_type_storage_bytes).
function V.bytes_of(t) return t:info().bytes end

-- A codec for a loaded or stored type: size, and read / write of its bytes.
local function codec_of(t)
  local info = t:info()
  local kind = info.kind
  if kind == "vector" then
    local e = codec_of(info.elem)
    return { size = info.bytes, n = info.elements, elem = e, vector = true, raw = e.width == 8 and not e.fmt }
  end
  if kind == "float" then
    local name = info.name
    if name == "f32" then return { size = 4, fmt = "<f" } end
    if name == "f64" then return { size = 8, fmt = "<d" } end
    if name == "bf16" or name == "f16" then return { size = 2, half = name } end
    return { size = info.bytes, unsupported = name }
  end
  if kind == "int" then return { size = info.bytes, width = info.width } end
  return { size = 8, width = 64 } -- a pointer, an index: a 64-bit word
end
V.codec_of = codec_of

function V.decode(c, bytes, off)
  if c.unsupported then error("emulate: loads of " .. c.unsupported .. " are not modelled", 0) end
  if c.fmt then
    local s = {}
    for i = 1, c.size do s[i] = string.char(bytes[off + i]) end
    return (string.unpack(c.fmt, table.concat(s)))
  end
  local x = 0
  for i = c.size, 1, -1 do x = (x << 8) | bytes[off + i] end
  if c.half then return V.float16.dec[c.half](x) end
  return wrap(x, c.width)
end

function V.encode(c, v, out, off)
  if c.unsupported then error("emulate: stores of " .. c.unsupported .. " are not modelled", 0) end
  if c.fmt then
    local s = string.pack(c.fmt, v)
    for i = 1, c.size do out[off + i] = s:byte(i) end
    return
  end
  if c.half then v = V.float16.enc[c.half](v) end
  for i = 1, c.size do
    out[off + i] = v & 0xff
    v = v >> 8
  end
end

function V.f32(x) return (string.unpack("<f", string.pack("<f", x))) end
local f32 = V.f32

-- 16-bit floats <-> numbers (exact decode; encode rounds to nearest even)
local function bf16_dec(h) return (string.unpack("<f", string.pack("<I4", (h & 0xffff) << 16))) end
local function bf16_enc(x)
  local b = string.unpack("<I4", string.pack("<f", x))
  if (b & 0x7f800000) == 0x7f800000 and (b & 0x7fffff) ~= 0 then return 0x7fc0 end -- NaN
  return ((b + 0x7fff + ((b >> 16) & 1)) >> 16) & 0xffff
end
local function f16_dec(h)
  local s, e, m = (h >> 15) & 1, (h >> 10) & 0x1f, h & 0x3ff
  local v
  if e == 0 then v = m * 2.0 ^ -24
  elseif e == 31 then v = m == 0 and math.huge or (0 / 0)
  else v = (1 + m / 1024) * 2.0 ^ (e - 15) end
  return s == 1 and -v or v
end
local function f16_enc(x)
  if x ~= x then return 0x7e00 end
  local s = (x < 0 or (x == 0 and 1 / x < 0)) and 0x8000 or 0
  x = math.abs(x)
  if x >= 65520 then return s | 0x7c00 end
  if x < 2.0 ^ -14 then -- subnormal: units of 2^-24, round to nearest even
    local q = x / 2.0 ^ -24
    local r = math.floor(q)
    if q - r > 0.5 or (q - r == 0.5 and r % 2 == 1) then r = r + 1 end
    return s | math.tointeger(r)
  end
  local m, e = math.frexp(x) -- x = m * 2^e, m in [0.5, 1)
  local q = (m * 2 - 1) * 1024
  local r = math.floor(q)
  if q - r > 0.5 or (q - r == 0.5 and r % 2 == 1) then r = r + 1 end
  local ex = e - 1 + 15
  if r == 1024 then r, ex = 0, ex + 1 end
  if ex >= 31 then return s | 0x7c00 end
  return s | (ex << 10) | math.tointeger(r)
end
V.float16 = { dec = { bf16 = bf16_dec, f16 = f16_dec }, enc = { bf16 = bf16_enc, f16 = f16_enc } }

-- fp8 bytes -> numbers, exactly: e4m3 (OCP "FN": bias 7, no infinities, S.1111.111
-- NaN, max 448) and e5m2 (f16's high byte).
local function e4m3_dec(u)
  local s, e, m = (u >> 7) & 1, (u >> 3) & 0xf, u & 7
  local v
  if e == 0 then v = m * 2.0 ^ -9
  elseif e == 15 and m == 7 then v = 0 / 0
  else v = (1 + m / 8) * 2.0 ^ (e - 7) end
  return s == 1 and -v or v
end
V.fp8_dec = { e4m3 = e4m3_dec, e5m2 = function(u) return f16_dec((u & 0xff) << 8) end }

-- arith.bitcast of a value of type `from` to type `to` (scalars, or vectors
-- of them: tables of their elements): the bytes of one read as the other.
function V.bitcast(x, from, to)
  local cf, ct = codec_of(from), codec_of(to)
  if not cf.vector and not ct.vector then return interp.from_bits(interp.to_bits(x, from), to) end
  local bytes = {}
  if cf.vector and type(x) == "number" then -- a pair tile.pack made: its packed bits (models/mma.lua)
    for i = 1, cf.size do bytes[i] = (x >> (8 * (i - 1))) & 0xff end
  elseif cf.vector then for i = 1, cf.n do V.encode(cf.elem, x[i], bytes, (i - 1) * cf.elem.size) end
  else V.encode(cf, x, bytes, 0) end
  if not ct.vector then return V.decode(ct, bytes, 0) end
  local v = {}
  for i = 1, ct.n do v[i] = V.decode(ct.elem, bytes, (i - 1) * ct.elem.size) end
  return v
end

-- A tile element type t: bytes, decode (a little-endian integer of its
-- bytes -> number), encode, round (a number -> the nearest of the type); nil
-- for a type the emulator does not hold.
function V.elem_codec(t)
  local info = t:info()
  local name = info.kind == "float" and info.name
  if name == "f32" then
    return { size = 4, float = true, round = f32,
             dec = function(u) return (string.unpack("<f", string.pack("<I4", u))) end,
             enc = function(x) return (string.unpack("<I4", string.pack("<f", x))) end }
  elseif name == "f64" then
    return { size = 8, float = true, round = function(x) return x end,
             dec = function(u) return (string.unpack("<d", string.pack("<i8", u))) end,
             enc = function(x) return (string.unpack("<i8", string.pack("<d", x))) end }
  elseif name == "bf16" or name == "f16" then
    local dec, enc = V.float16.dec[name], V.float16.enc[name]
    return { size = 2, float = true, dec = dec, enc = enc, round = function(x) return dec(enc(x)) end }
  end
  if info.kind ~= "int" then return nil end
  local w = info.width
  return { size = info.bytes, width = w, round = function(x) return wrap(math.tointeger(x) or 0, w) end,
           dec = function(u) return wrap(u, w) end, enc = function(x) return x end }
end

return V
