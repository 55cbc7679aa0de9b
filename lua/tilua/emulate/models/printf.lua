-- tilua.emulate.models.printf: printf on the CPU emulator (tile.printf, and
-- nvvm.vprintf after the lowering), a model of the registry of
-- emulate/models/init.lua. Each active lane of the warp prints its line, in lane order,
-- through o.print (a function of the text; default io.stdout:write) of
-- tl.emulate; the protocol checker's runs print nothing. The format is C's,
-- as the verifier accepted it (tile.c's tile_verify_printf): each conversion
-- is given to string.format without its length (l, ll, h: Lua's integers have
-- 64 bits), a 32-bit value read as C's vprintf reads it (signed for d and i,
-- unsigned for u, x, X and o), a pointer as 0x%x.

local at = require("tilua.emulate.lanes").at

local handlers = {}

-- The format cut into literal text and conversions: { "text", {spec =, conv =}, ... }.
local function parse(fmt)
  local parts, i, text = {}, 1, {}
  while i <= #fmt do
    local c = fmt:sub(i, i)
    if c == "%" and fmt:sub(i + 1, i + 1) == "%" then
      text[#text + 1] = "%%"
      i = i + 2
    elseif c == "%" then
      local flags, width, prec, conv, j = fmt:match("^%%([-+ #0]*)(%d*)(%.?%d*)[hljzt]*([diuxXocfFeEgGaAp])()", i)
      if not conv then error("emulate: printf: a conversion the verifier should have refused", 0) end
      parts[#parts + 1] = table.concat(text)
      text = {}
      parts[#parts + 1] = { spec = "%" .. flags .. width .. prec, conv = conv }
      i = j
    else
      text[#text + 1] = c
      i = i + 1
    end
  end
  parts[#parts + 1] = table.concat(text)
  return parts
end

-- One argument for string.format: v of an operand whose type is 64 bits wide or not.
local function arg(v, conv, wide)
  if conv == "p" then return ("0x%x"):format(math.tointeger(v) or 0) end
  if conv:match "[fFeEgGaA]" then return v + 0.0 end
  v = math.tointeger(v) or 0
  if wide then return v end
  if conv == "d" or conv == "i" then
    v = v & 0xffffffff
    return v >= 0x80000000 and v - 0x100000000 or v
  end
  if conv == "c" then return v & 0xff end
  return v & 0xffffffff
end

local function line(parts, vals, wide)
  local out, n = {}, 0
  for _, p in ipairs(parts) do
    if type(p) == "string" then
      out[#out + 1] = p:gsub("%%%%", "%%")
    else
      n = n + 1
      local conv = p.conv == "p" and "s" or p.conv
      out[#out + 1] = (p.spec .. conv):format(arg(vals[n], p.conv, wide[n]))
    end
  end
  return table.concat(out)
end

local function printf(R, W, rec, ins, ctx)
  if R.o._cache ~= nil then return {} end -- the checker's runs: no output
  if not rec.print_parts then
    rec.print_parts = parse(rec.op:attr_or_default "format") -- a required row: the verifier saw it
    rec.print_wide = {}
    for i, v in ipairs(rec.op:operands()) do
      local info = v:type():info()
      rec.print_wide[i] = info.kind == "ptr" or info.kind == "index" or info.width == 64
    end
  end
  local out = R.o.print or function(s) io.stdout:write(s) end
  for _, lane in ipairs(ctx.mask) do
    local vals = {}
    for i, v in ipairs(ins) do vals[i] = at(v, lane) end
    out(line(rec.print_parts, vals, rec.print_wide))
  end
  return {}
end

handlers["tile.printf"] = printf
handlers["nvvm.vprintf"] = printf

return { handlers = handlers }
