-- tilua.parser: the textual IR, read with LPeg and built as it is read.
--
-- The syntax mirrors src/ir/printer.c:
--
--   op      <- (values '=')? opname operands? attrdict? (':' types)? region* loc?
--   region  <- '{' block* '}'      block <- label? op*
--   label   <- '^' name ('(' %v ':' type (',' ...)* ')')? ':'
--
-- Comments run from // to the end of the line. LPeg patterns read the flat
-- pieces (an op's header, value lists, names, numbers, strings); the nesting of
-- regions is a stack in the builder (src/lua/l_parse.c) and attributes and
-- types are read by recursive descent over the text, so no depth of nesting
-- hits a limit of LPeg's or of the C stack. Each op is built as soon as its
-- header is read; types and attribute dictionaries are memoized by their text.
-- Every error names file:line:col with the source line and a caret.

local lpeg = require "lpeg"
local core = require "tilua.core"

local P, R, S, C, Ct, Cp = lpeg.P, lpeg.R, lpeg.S, lpeg.C, lpeg.Ct, lpeg.Cp
local byte, sub, find = string.byte, string.sub, string.find

local M = {}

-- {=====================================================================
-- Lexical pieces
-- ======================================================================

local comment = P "//" * (1 - P "\n") ^ 0
local ws = (S " \t\r\n" + comment) ^ 0
local alpha = R("az", "AZ") + P "_"
local alnum = alpha + R "09"
local ident = alpha * (alnum + S "$.") ^ 0
local vname = P "%" * (alnum + S "$.-") ^ 1

local skip_ws = ws * Cp()
local ident_p = C(ident) * Cp()
local vlist = Ct(C(vname) * (ws * P "," * ws * C(vname)) ^ 0)
-- an op's header: results '=' name operands (operands not followed by '=': those
-- would be the next op's results)
local header = Cp() * (vlist * ws * P "=" * ws) ^ -1 * Cp() * C(ident) * (ws * vlist * -(ws * P "=")) ^ -1 * Cp()
local number_p = C(P "-" ^ -1 * (P "0x" * R("09", "af", "AF") ^ 1
  + R "09" ^ 1 * (P "." * R "09" ^ 0) ^ -1 * (S "eE" * S "+-" ^ -1 * R "09" ^ 1) ^ -1)) * Cp()
local label_p = P "^" * ident * Cp()
-- The rest of an op after its operands, in one match: the attribute
-- dictionary's text span and each result type's position and text, so the
-- common case is table lookups of texts seen before. Nesting deeper than
-- LPeg's backtrack stack makes the match raise; the op is then read piece by
-- piece (Reader:op_slow), which has no depth limit.
local str_tok = P '"' * (P "\\" * 1 + (1 - S '"\\\n')) ^ 0 * P '"'
local braces = P { "{" * ((1 - S '{}"') + str_tok + lpeg.V(1)) ^ 0 * "}" }
-- '{' that opens an attribute dictionary (a key, bare or quoted, then '=')
-- rather than a region
local dict_ahead = P "{" * ws * (ident + str_tok) * ws * P "="
local angles = P { "<" * ((1 - S '<>"') + str_tok + lpeg.V(1)) ^ 0 * ">" }
local type_tok = P "!" ^ -1 * alpha * (alnum + S "$.") ^ 0 * angles ^ -1
local type_list = Ct(Cp() * C(type_tok) * (ws * P "," * ws * Cp() * C(type_tok)) ^ 0)
local op_tail = ws * (#dict_ahead * Cp() * braces * Cp() + lpeg.Cc(false) * lpeg.Cc(false)) * ws
  * (P ":" * -P ":" * ws * type_list + lpeg.Cc(false)) * ws * Cp()

-- }=====================================================================

-- {=====================================================================
-- Positions and messages
-- ======================================================================

-- Line starts of text, for byte offset -> line:col (built on first need).
local function line_index(text)
  local starts = { 1 }
  for i in text:gmatch "()\n" do starts[#starts + 1] = i + 1 end
  return starts
end

local function line_col(starts, pos)
  local lo, hi = 1, #starts
  while lo < hi do
    local mid = (lo + hi + 1) // 2
    if starts[mid] <= pos then lo = mid else hi = mid - 1 end
  end
  return lo, pos - starts[lo] + 1
end

-- The source line `line` of text with a caret under column col ("" if none).
function M.caret(text, line, col)
  local n = 0
  for l in (text .. "\n"):gmatch "(.-)\n" do
    n = n + 1
    if n == line then
      if #l > 160 then -- a window of the line around col, not kilobytes of it
        local from = math.max(1, col - 60)
        local head = from > 1 and "..." or ""
        local tail = from + 119 < #l and "..." or ""
        col = col - from + 1 + #head
        l = head .. l:sub(from, from + 119) .. tail
      end
      local lead = l:sub(1, col - 1):gsub("[^\t]", " ")
      return "\n" .. l .. "\n" .. lead .. "^"
    end
  end
  return ""
end

-- "file:line:col: error: msg", the source line and a caret under col. `line` counts
-- in text; offset is added to the line shown (for cases cut out of a larger file).
function M.format_error(text, file, line, col, msg, offset)
  return ("%s:%d:%d: error: %s"):format(file, line + (offset or 0), col, msg) .. M.caret(text, line, col)
end

-- }=====================================================================

-- {=====================================================================
-- The reader: one per parse
-- ======================================================================

local DICT = { __dict = true } -- keeps an empty {} a dictionary

local Reader = {}
Reader.__index = Reader

local function fail(pos, msg) error({ pos = pos, msg = msg }, 0) end

function Reader:ws(pos) return skip_ws:match(self.text, pos) end

-- item (, item)* at pos: read(self, p) -> value, position after; the list and the position after it.
function Reader:comma_list(p, read)
  local list, text = {}, self.text
  repeat
    local v
    v, p = read(self, p)
    list[#list + 1] = v
    p = self:ws(p)
    local more = byte(text, p) == 44
    if more then p = p + 1 end
  until not more
  return list, p
end

function Reader:expect(pos, s, what)
  pos = self:ws(pos)
  if sub(self.text, pos, pos + #s - 1) ~= s then fail(pos, "expected " .. (what or ("'" .. s .. "'"))) end
  return pos + #s
end

function Reader:peek(pos, s) return sub(self.text, pos, pos + #s - 1) == s end

-- A string literal at pos ('"'): its value and the position after it.
function Reader:string(pos)
  local text, parts, i = self.text, {}, pos + 1
  while true do
    local j = find(text, '["\\\n]', i)
    if not j or byte(text, j) == 10 then fail(pos, "unterminated string (expected a closing '\"')") end
    parts[#parts + 1] = sub(text, i, j - 1)
    if byte(text, j) == 34 then return table.concat(parts), j + 1 end
    local e = sub(text, j + 1, j + 1)
    local esc = ({ n = "\n", t = "\t", ['"'] = '"', ["\\"] = "\\" })[e]
    if esc then
      parts[#parts + 1], i = esc, j + 2
    elseif find(sub(text, j + 1, j + 2), "^%x%x$") then
      parts[#parts + 1], i = string.char(tonumber(sub(text, j + 1, j + 2), 16)), j + 3
    else
      fail(j, "bad escape in a string (\\n \\t \\\" \\\\ or two hex digits)")
    end
  end
end

-- {=== types

local spaces
local function space_ok(s)
  if not spaces then
    spaces = {}
    for _, n in ipairs(core.memspaces()) do spaces[n] = true end
  end
  return spaces[s]
end

-- A type at pos: the type and the position after it, memoized by its text.
function Reader:type(pos)
  pos = self:ws(pos)
  local stop = self:type_end(pos)
  local key = sub(self.text, pos, stop - 1)
  local t = self.types[key]
  if not t then
    t = self:type_uncached(pos)
    self.types[key] = t
    self.pb:memo_type(key, t)
  end
  return t, stop
end

-- Where the type at pos ends: its name, and its balanced <...> if any.
function Reader:type_end(pos)
  local text = self.text
  local _, e = find(text, "^!?[%a_][%w_$.]*", pos)
  if not e then fail(pos, "expected a type") end
  local i = e + 1
  if byte(text, i) ~= 60 then return i end -- '<'
  return self:balanced_end(i, "[<>\"]", 60) or fail(pos, "expected '>' to close the type")
end

local scalar = { index = true, none = true, bf16 = true, f16 = true, f32 = true, f64 = true }

function Reader:type_uncached(pos)
  local text, ctx = self.text, self.ctx
  local name, p = ident_p:match(text, pos)
  if byte(text, pos) == 33 then -- '!': a dialect type
    name, p = ident_p:match(text, pos + 1)
    if not name then fail(pos, "expected a dialect type name after '!'") end
    local params = {}
    if byte(text, p) == 60 then
      p = p + 1
      if byte(text, self:ws(p)) ~= 62 then params, p = self:comma_list(p, self.param) end
      self:expect(p, ">")
    end
    local ty, err = core.type_dialect(name, params, ctx, true)
    if not ty then fail(pos, err) end
    return ty
  end
  if scalar[name] then
    if name == "index" then return core.type_index(ctx) end
    if name == "none" then return core.type_none(ctx) end
    return core.type_float(name, ctx)
  end
  local w = name:match "^i(%d+)$"
  if w then
    w = tonumber(w)
    if w < 1 or w > 64 then fail(pos, ("integer width must be in [1, 64] in '%s'"):format(name)) end
    return core.type_int(w, ctx)
  end
  if name == "ptr" then
    p = self:expect(p, "<")
    local elem
    elem, p = self:type(p)
    p = self:expect(p, ",")
    local sp
    p = self:ws(p)
    local q
    sp, q = ident_p:match(text, p)
    if not sp then fail(p, "expected a memory space") end
    p = q
    if not space_ok(sp) then fail(pos, ("unknown memory space '%s'"):format(sp)) end
    self:expect(p, ">")
    return core.type_ptr(elem, sp)
  end
  if name == "vector" or name == "memref" or name == "tile" then
    p = self:expect(p, "<")
    p = self:ws(p)
    local shape = {}
    while true do -- dims: 4x, ?x
      local d, e = find(text, "^%d+x", p)
      if d then
        local v = math.tointeger(tonumber(sub(text, p, e - 1)))
        if not v or v < 1 or v >= 1 << 48 then
          fail(p, ("dimension %s of %s is out of range [1, 2^48)"):format(sub(text, p, e - 1), name))
        end
        shape[#shape + 1], p = v, e + 1
      elseif byte(text, p) == 63 and byte(text, p + 1) == 120 then
        shape[#shape + 1], p = "?", p + 2
      else
        break
      end
    end
    if #shape > 16 then fail(pos, "shapes have at most 16 dimensions") end
    local elem
    elem, p = self:type(p)
    local sp, sw, layout
    p = self:ws(p)
    if byte(text, p) == 44 then
      local id, q
      p = self:ws(p + 1)
      id, q = ident_p:match(text, p)
      if not id then fail(p, "expected a memory space") end
      p = q
      if id:match "^swizzle%d+$" then sw = id else sp = id end
      p = self:ws(p)
      if not sw and byte(text, p) == 44 then
        p = self:ws(p + 1)
        if name == "tile" and byte(text, p) == 123 then -- '{': a tile's layout
          layout, p = self:dict(p)
        else
          sw, q = ident_p:match(text, p)
          if not sw or not sw:match "^swizzle%d+$" then fail(p, "expected swizzle32, swizzle64 or swizzle128") end
          p = q
        end
      end
    end
    self:expect(p, ">")
    if name == "vector" then
      if sp or sw then fail(pos, "vector types take no memory space") end
      if #shape == 0 then fail(pos, "a vector needs at least one dimension") end
      return core.type_vector(elem, shape)
    end
    if not sp then fail(pos, name .. " types need a memory space") end
    if not space_ok(sp) then fail(pos, ("unknown memory space '%s'"):format(sp)) end
    if name == "memref" then
      local bytes = sw and tonumber(sw:match "%d+") or 0
      if bytes ~= 0 and bytes ~= 32 and bytes ~= 64 and bytes ~= 128 then fail(pos, "swizzle must be 32, 64 or 128") end
      return core.type_memref(elem, shape, sp, bytes)
    end
    if sw then fail(pos, "tile types take no swizzle") end
    return core.type_tile(elem, shape, sp, layout)
  end
  fail(pos, ("unknown type '%s'"):format(name))
end

-- A dialect type parameter: an attribute, or a bare identifier (a string).
function Reader:param(pos)
  pos = self:ws(pos)
  local c = byte(self.text, pos)
  local id, p = ident_p:match(self.text, pos)
  if id and not (c == 105 and id:match "^i%d+$") and not scalar[id] and id ~= "true" and id ~= "false"
     and id ~= "ptr" and id ~= "vector" and id ~= "memref" and id ~= "tile" then
    return id, p
  end
  return self:attr(pos)
end

-- }=== types

-- {=== attributes

-- The range an integer literal of width w may take: signed or unsigned (as MLIR).
local function int_fits(v, t)
  local i = t:info()
  local w = i.kind == "index" and 64 or i.width
  if w >= 64 then return true end
  return v >= -(1 << (w - 1)) and v < (1 << w)
end

local float_bits = { f16 = 16, bf16 = 16, f32 = 32, f64 = 64 }

-- What the bindings convert (LB_ATTR_MAX_DEPTH in l_type.c): deeper is an error here, at its bracket.
local MAX_ATTR_DEPTH = 4096

-- An attribute value at pos -> the Lua value core.attr turns into it, and the position after.
function Reader:attr(pos)
  local text = self.text
  pos = self:ws(pos)
  local c = byte(text, pos)
  if c == 34 then return self:string(pos) end
  if c == 91 then -- '['
    local list = {}
    return list, self:bracketed(pos, 93, function(p)
      local v
      v, p = self:attr(p)
      list[#list + 1] = v
      return p
    end)
  end
  if c == 123 then return self:dict(pos) end
  if c == 64 then -- '@'
    local p = pos + 1
    local name
    if byte(text, p) == 34 then name, p = self:string(p) else name, p = ident_p:match(text, p) end
    if not name then fail(pos, "expected a symbol name after '@'") end
    return core.attr_sym(name, self.ctx), p
  end
  local num, p = number_p:match(text, pos)
  if num then
    local q = self:ws(p)
    local t
    if byte(text, q) == 58 then t, p = self:type(q + 1) end -- ': type'
    return self:number(pos, num, t), p
  end
  local id, ip = ident_p:match(text, pos)
  if id == "true" or id == "false" then return id == "true", ip end
  if not c or not (id or c == 33) then fail(pos, "expected a type or an attribute value") end
  local t
  t, p = self:type(pos)
  return t, p
end

-- Lua wraps hexadecimal integers modulo 2^64; more than 16 significant
-- digits is out of range rather than wrapped.
local function hex_integer(text)
  local digits = text:match "0x0*(%x*)$"
  if not digits or #digits > 16 then return nil end
  return math.tointeger(tonumber(text))
end

function Reader:number(pos, text, t)
  local hex = text:find "^%-?0x"
  if t and t:kind() == "float" then
    if hex then
      local bits = hex_integer(text)
      local w = float_bits[t:info().name]
      if not bits or text:byte(1) == 45 or (w < 64 and (bits < 0 or bits >= 1 << w)) then
        fail(pos, ("hexadecimal float bits %s do not fit %s"):format(text, tostring(t)))
      end
      return core.attr_float_bits(bits, t)
    end
    return core.attr_float(tonumber(text), t)
  end
  if not hex and text:find "[%.eE]" then
    if t then fail(pos, ("float literal for the integer type %s"):format(tostring(t))) end
    local v = tonumber(text)
    return math.type(v) == "integer" and v + 0.0 or v -- keeps -0.0
  end
  local v
  if hex then v = hex_integer(text) else v = math.tointeger(tonumber(text)) end
  if not v then fail(pos, "integer literal out of range: " .. text) end
  if t then
    local k = t:kind()
    if k ~= "int" and k ~= "index" then fail(pos, ("an integer cannot have type %s"):format(tostring(t))) end
    if not int_fits(v, t) then fail(pos, ("integer literal %s out of the range of %s"):format(text, tostring(t))) end
    return core.attr_int(v, t)
  end
  return v
end

-- The items of a bracketed list at pos (its opening bracket): item(p) reads
-- one and returns the position after it; the position after the closing byte.
-- Nesting deeper than MAX_ATTR_DEPTH is an error at the bracket.
function Reader:bracketed(pos, close, item)
  local text = self.text
  local p = self:ws(pos + 1)
  if byte(text, p) == close then return p + 1 end
  local depth = (self.attr_depth or 0) + 1
  if depth > MAX_ATTR_DEPTH then fail(pos, ("attribute values nest at most %d deep"):format(MAX_ATTR_DEPTH)) end
  while true do
    self.attr_depth = depth
    p = self:ws(item(self:ws(p)))
    local ch = byte(text, p)
    if ch == close then
      self.attr_depth = depth - 1
      return p + 1
    end
    if ch ~= 44 then fail(p, ("expected ',' or '%s'"):format(string.char(close))) end
    p = p + 1
  end
end

-- A dictionary at pos ('{'): a table marked as a dictionary, and the position after.
function Reader:dict(pos)
  local text = self.text
  local d = setmetatable({}, DICT)
  return d, self:bracketed(pos, 125, function(p)
    local key, kp
    if byte(text, p) == 34 then key, kp = self:string(p) else key, kp = ident_p:match(text, p) end
    if not key then fail(p, "expected an attribute name") end
    if d[key] ~= nil then fail(p, ("duplicate attribute '%s'"):format(key)) end
    local v
    v, p = self:attr(self:expect(kp, "="))
    d[key] = v
    return p
  end)
end

-- An op's attribute dictionary at pos, as an Attr, memoized by its text.
-- Where the balanced bracket at pos ends (strings skipped), or nil if it does
-- not: set is the find class of the open and close bytes and '"', open the open byte.
function Reader:balanced_end(pos, set, open)
  local text, depth, i = self.text, 0, pos
  while true do
    local j = find(text, set, i)
    if not j then return nil end
    local ch = byte(text, j)
    if ch == 34 then -- skip the string: to its closing quote, past escapes
      i = j + 1
      while true do
        local q = find(text, '["\\\n]', i)
        if not q or byte(text, q) == 10 then return nil end
        if byte(text, q) == 34 then i = q + 1 break end
        i = q + 2
      end
    else
      depth = depth + (ch == open and 1 or -1)
      i = j + 1
      if depth == 0 then return i end
    end
  end
end

-- Most ops repeat a dictionary seen before: the text is looked up first and
-- read (then converted) only when new.
function Reader:attr_dict(pos)
  local stop = self:balanced_end(pos, '[{}"]', 123)
  local a = stop and self.dicts[sub(self.text, pos, stop - 1)]
  if a then return a, stop end
  local d
  d, stop = self:dict(pos)
  a = core.attr(d, self.ctx)
  local key = sub(self.text, pos, stop - 1)
  self.dicts[key] = a
  self.pb:memo_dict(key, a)
  return a, stop
end

-- }=== attributes

-- {=== values and scopes

-- The names in scope live in the parse builder (src/lua/l_parse.c), which
-- reads the plain ops itself (pb:fast) and needs them too.
function Reader:lookup(name, pos)
  local id = self.pb:lookup(name)
  if not id then fail(pos, ("use of undefined value %s"):format(name)) end
  return id
end

function Reader:define(name, id, pos)
  if not self.pb:define(name, id) then fail(pos, ("redefinition of value %s"):format(name)) end
end

function Reader:open_scope() self.pb:open_scope() end

function Reader:close_scope() self.pb:close_scope() end

-- }=== values and scopes

-- line:col of pos; ops come in order, so a cursor moves forward from the last
-- answer (a search only when pos went back, as for an error).
function Reader:linecol(pos)
  local starts = self.lines
  if not starts then
    starts = line_index(self.text)
    self.lines, self.cur = starts, 1
  end
  local cur = self.cur
  if starts[cur] > pos then
    cur = line_col(starts, pos)
  else
    local n = #starts
    while cur < n and starts[cur + 1] <= pos do cur = cur + 1 end
  end
  self.cur = cur
  return cur + self.line_offset, pos - starts[cur] + 1
end

-- loc(...) at pos: file, line, col and the position after.
function Reader:loc(pos)
  local text = self.text
  local p = self:ws(pos + 4)
  local file
  if byte(text, p) == 34 then file, p = self:string(p)
  elseif self:peek(p, "unknown") then p = p + 7
  else fail(p, "expected a file name or 'unknown'") end
  local line, col = 0, 0
  local d, e = find(text, "^:(%d+)", p)
  if d then line, p = tonumber(sub(text, d + 1, e)), e + 1 end
  d, e = find(text, "^:(%d+)", p)
  if d then col, p = tonumber(sub(text, d + 1, e)), e + 1 end
  return file, line, col, self:expect(p, ")")
end

-- One op at pos: built, and opened when regions follow. The position after its header.
-- The dictionary and the result types of an op, piece by piece (any depth).
function Reader:op_tail_slow(stop)
  local text = self.text
  local p = self:ws(stop)
  local dict
  if dict_ahead:match(text, p) then dict, p = self:attr_dict(p) p = self:ws(p) end
  local types = {}
  if byte(text, p) == 58 and byte(text, p + 1) ~= 58 then types, p = self:comma_list(p + 1, self.type) end -- ': types'
  return dict, types, p
end

function Reader:op(pos)
  local text, pb = self.text, self.pb
  local start, results, namepos, name, operands, stop = header:match(text, pos)
  if not start then fail(pos, "expected an operation") end
  if type(results) == "number" then -- no results: the captures shifted
    results, namepos, name, operands, stop = nil, results, namepos, name, operands
  end
  if type(operands) == "number" then operands, stop = nil, operands end
  local known = self.known[name]
  if known == nil then
    known = core.op_info(name) ~= nil
    self.known[name] = known
  end
  if not known then fail(namepos, ("unknown operation '%s'"):format(name)) end
  local ids = {}
  if operands then
    for i, v in ipairs(operands) do
      local id = pb:lookup(v)
      if not id then self:lookup(v, find(text, v, namepos, true) or namepos) end
      ids[i] = id
    end
  end
  local ok, dpos, dstop, tlist, p = pcall(op_tail.match, op_tail, text, stop)
  local dict, types
  if ok and p then
    if dpos then
      dict = self.dicts[sub(text, dpos, dstop - 1)]
      if not dict then dict = self:attr_dict(dpos) end
    end
    types = {}
    if tlist then
      local memo = self.types
      for i = 2, #tlist, 2 do
        local t = memo[tlist[i]]
        if not t then t = self:type(tlist[i - 1]) end
        types[i // 2] = t
      end
    end
  else
    dict, types, p = self:op_tail_slow(stop)
  end
  local nres = results and #results or 0
  if nres ~= #types then
    fail(start, ("'%s' defines %d result%s but lists %d type%s"):format(name,
      nres, nres == 1 and "" or "s", #types, #types == 1 and "" or "s"))
  end
  local has_regions = byte(text, p) == 123
  if has_regions and pb:depth() >= core.max_nesting then
    fail(start, ("regions nest at most %d levels deep"):format(core.max_nesting))
  end
  local line, col = self:linecol(start)
  self.last_pos = start
  local first = pb:op(name, nres, ids, types, dict, has_regions, line, col)
  for i = 1, nres do self:define(results[i], first + i - 1, start) end
  if has_regions then return self:enter_region(p) end
  local had, f, l, c, after = self:trailing_loc(p)
  if had and self.keep_locs then pb:loc(f, l, c) end
  return after
end

-- The '{' of a region at pos: a scope for its names, its first block to come.
function Reader:enter_region(pos)
  self:open_scope()
  self.block_open = false
  return pos + 1
end

-- A loc(...) at pos, if there is one: true, file (nil: unknown), line, col and
-- the position after; false and pos when there is none.
function Reader:trailing_loc(pos)
  if not self:peek(pos, "loc(") then return false, nil, nil, nil, pos end
  return true, self:loc(pos)
end

-- A block label at pos ('^'): the block, its arguments defined. The position after.
function Reader:label(pos)
  local text = self.text
  local p = label_p:match(text, pos)
  if not p then fail(pos, "expected a block label") end
  local names, types, at = {}, {}, {}
  if byte(text, p) == 40 then -- '('
    p = self:ws(p + 1)
    if byte(text, p) ~= 41 then
      types, p = self:comma_list(p, function(_, q)
        q = self:ws(q)
        local _, e = find(text, "^%%[%w_$.%-]+", q)
        if not e then fail(q, "expected a block argument (%name)") end
        names[#names + 1], at[#at + 1] = sub(text, q, e), q
        return self:type(self:expect(e + 1, ":"))
      end)
    end
    p = self:expect(p, ")")
  end
  p = self:expect(p, ":")
  local first = self.pb:block(types)
  for i, n in ipairs(names) do self:define(n, first + i - 1, at[i]) end
  self.block_open = true
  return p
end

-- The end of a region at pos ('}'): the next region of the same op, or the op closed.
function Reader:region_end(pos)
  local text, pb = self.text, self.pb
  if pb:depth() == 0 then fail(pos, "unexpected '}'") end
  self:close_scope()
  local p = self:ws(pos + 1)
  if byte(text, p) == 123 and not dict_ahead:match(text, p) then -- '{' the next region
    if not pb:next_region() then fail(p, "an operation has at most 16 regions") end
    return self:enter_region(p)
  end
  local had, f, l, c
  had, f, l, c, p = self:trailing_loc(p)
  if had and self.keep_locs then pb:close(f, l, c) else pb:close() end
  self.block_open = pb:depth() > 0 -- back in the enclosing op's block
  return p
end

function Reader:run()
  local text, pb = self.text, self.pb
  local p = self:ws(1)
  local n = #text
  -- `module {` (a region, or `{attrs} {`) holds everything; else a module is made
  local module_text = self:peek(p, "module") and find(text, "^module%s*{", p)
  if not module_text then
    pb:top()
    self.block_open = true
  end
  local module_read = false
  while true do
    p = self:ws(p)
    if p > n then break end
    local c = byte(text, p)
    if c == 125 then -- '}'
      p = self:region_end(p)
    elseif c == 94 then -- '^'
      if pb:depth() == 0 then fail(p, "a block label outside of any region") end
      p = self:label(p)
    else
      if pb:depth() > 0 and not self.block_open then
        pb:block({})
        self.block_open = true
      elseif pb:depth() == 0 and module_text then
        if module_read then fail(p, "expected the end of the input after the module") end
        module_read = true
      end
      local q = self.fast and pb:fast(p) or p -- the plain ops, read in C
      if q > p then p = q else p = self:op(p) end
    end
  end
  if pb:depth() > 0 then fail(n + 1, "expected '}' or an operation name (a region is not closed)") end
  return pb:result()
end

-- M.parse(text [, opts]) -> module op | nil, message, {line=, col=, message=}
-- opts: file (name used in locations and messages), ctx (context),
-- line_offset (added to every line, for cases cut out of a larger file),
-- locations = "text" (default: line:col of the text) or "keep" (use loc(...) annotations),
-- fast = false (read every op in Lua, not the plain ones in C: for testing that both agree).
function M.parse(text, opts)
  opts = opts or {}
  local file = opts.file or "<input>"
  local ctx = opts.ctx or core.default_context()
  local r = setmetatable({ text = text, ctx = ctx, file = file, line_offset = opts.line_offset or 0,
                           keep_locs = opts.locations == "keep", types = {}, dicts = {}, known = {},
                           pb = core.parse_builder(ctx, file), fast = opts.fast ~= false }, Reader)
  r.pb:source(text, r.line_offset)
  local ok, res = pcall(r.run, r)
  if ok then
    if not res then
      local line, col = r:linecol(1)
      local msg = "expected an operation"
      return nil, M.format_error(text, file, line - r.line_offset, col, msg, r.line_offset),
        { line = line, col = col, message = msg }
    end
    return res
  end
  if type(res) ~= "table" then -- an error of the builder or the bindings: at the op being read
    res = { pos = r.last_pos or 1, msg = tostring(res):gsub("^[^:]*:%d+: ", "") }
  end
  local line, col = r:linecol(res.pos)
  return nil, M.format_error(text, file, line - r.line_offset, col, res.msg, r.line_offset),
    { line = line, col = col, message = res.msg }
end

-- M.parse_file(path [, opts]) reads path ("-" for stdin) and parses it.
function M.parse_file(path, opts)
  local text
  if path == "-" then
    text = io.read "a"
  else
    local f, err = io.open(path, "rb")
    if not f then return nil, ("cannot open %s"):format(err) end
    text = f:read "a"
    f:close()
  end
  opts = opts or {}
  opts.file = opts.file or (path == "-" and "<stdin>" or path)
  local m, msg, info = M.parse(text, opts)
  return m, msg, info, text
end

return M
