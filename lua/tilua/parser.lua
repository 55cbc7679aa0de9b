-- tilua.parser: the textual IR, read with LPeg and built through tilua.core.
--
-- The grammar mirrors src/ir/printer.c:
--
--   op      <- (values '=')? opname operands? attrdict? (':' types)? region* loc?
--   region  <- '{' block* '}'      block <- label? op*
--   label   <- '^' name ('(' %v ':' type (',' ...)* ')')? ':'
--
-- Comments run from // to the end of the line. A syntax error names the
-- farthest position the grammar reached and what it expected there; errors
-- found while building (unknown ops, undefined values) name the token's spot.

local lpeg = require "lpeg"
local core = require "tilua.core"

local P, R, S, V, C, Cc, Ct, Cg, Cp, Cmt =
  lpeg.P, lpeg.R, lpeg.S, lpeg.V, lpeg.C, lpeg.Cc, lpeg.Ct, lpeg.Cg, lpeg.Cp, lpeg.Cmt

local M = {}

-- {=====================================================================
-- Lexical pieces and the "expected" bookkeeping
-- ======================================================================

local farthest, expected -- the farthest failure and what was expected there

-- expect(p, what): p, or remember that `what` was expected here and fail.
local function expect(p, what)
  return p + Cmt(P(true), function(_, i)
    if i > farthest then farthest, expected = i, { [what] = true }
    elseif i == farthest then expected[what] = true end
    return false
  end) * P(false)
end

local comment = P "//" * (1 - P "\n") ^ 0
local ws = (S " \t\r\n" + comment) ^ 0
local function sym(s) return ws * expect(P(s), "'" .. s .. "'") end

local alpha = R("az", "AZ") + P "_"
local alnum = alpha + R "09"
local ident = alpha * (alnum + S "$.") ^ 0
local digits = R "09" ^ 1
local hexnum = P "0x" * R("09", "af", "AF") ^ 1

local escapes = { n = "\n", t = "\t", ['"'] = '"', ["\\"] = "\\" }
local strchar = (P "\\" * C(S 'nt"\\')) / escapes
  + (P "\\" * C(R("09", "af", "AF") * R("09", "af", "AF"))) / function(h) return string.char(tonumber(h, 16)) end
  + C(1 - S '"\\\n')
local string_lit = P '"' * Ct(strchar ^ 0) / table.concat * expect(P '"', "a closing '\"'")

local number = C(P "-" ^ -1 * (hexnum + digits * (P "." * digits ^ 0) ^ -1 * (S "eE" * S "+-" ^ -1 * digits) ^ -1))

-- }=====================================================================

-- {=====================================================================
-- The grammar: an AST of plain tables; `pos` fields are byte offsets
-- ======================================================================

local function at(tag)
  return function(pos, t)
    t.pos, t.tag = pos, t.tag or tag
    return t
  end
end

local grammar = P {
  "top",
  top = Ct((ws * V "op") ^ 0) * ws * expect(P(-1), "an operation or the end of the input"),

  type = ws * (Cp() * (V "dialect_type" + V "ptr_type" + V "shaped_type" + V "scalar_type") / at())
    + ws * expect(P(false), "a type"),
  scalar_type = Ct(Cg(C(P "index" + P "none" + P "bf16" + P "f16" + P "f32" + P "f64" + P "i" * digits), "name")
    * -alnum * Cg(Cc "scalar", "tag")),
  ptr_type = Ct(P "ptr" * sym "<" * Cg(V "type", "elem") * sym "," * ws * Cg(C(ident), "space") * sym ">"
    * Cg(Cc "ptr", "tag")),
  shaped_type = Ct(Cg(C(P "vector" + P "memref" + P "tile"), "tag") * sym "<" * ws
    * Cg(Ct((C(digits + P "?") * P "x") ^ 0), "shape") * Cg(V "type", "elem")
    * (sym "," * ws * -(P "swizzle" * digits) * Cg(C(ident), "space")) ^ -1
    * (sym "," * ws * P "swizzle" * Cg(C(digits), "swizzle")) ^ -1 * sym ">"),
  dialect_type = Ct(P "!" * Cg(C(ident), "name") * Cg(Cc "dialect", "tag")
    * Cg(Ct((sym "<" * V "param" * (sym "," * V "param") ^ 0 * sym ">") ^ -1), "params")),
  param = ws * (V "attr" + Cp() * Ct(Cg(C(ident), "value")) / at "str"),

  attr = ws * (
      Cp() * Ct(Cg(number, "text") * (sym ":" * Cg(V "type", "type")) ^ -1) / at "num"
    + Cp() * Ct(Cg(string_lit, "value")) / at "str"
    + Cp() * Ct(Cg(C(P "true" + P "false") * -alnum / function(b) return b == "true" end, "value")) / at "bool"
    + Cp() * Ct(P "@" * Cg(C(ident) + string_lit, "value")) / at "sym"
    + Cp() * Ct(P "[" * Cg(Ct((V "attr" * (sym "," * V "attr") ^ 0) ^ -1), "list") * sym "]") / at "array"
    + Cp() * Ct(P "{" * Cg(Ct((V "entry" * (sym "," * V "entry") ^ 0) ^ -1), "list") * sym "}") / at "dict"
    + Cp() * Ct(Cg(V "type", "type")) / at "typeattr"
  ) + ws * expect(P(false), "an attribute value"),
  entry = ws * Ct(Cg(Cp(), "pos") * Cg(C(ident) + string_lit, "key") * sym "=" * Cg(V "attr", "attr")),

  value = ws * Ct(Cg(Cp(), "pos") * Cg(C(P "%" * (alnum + S "$.-") ^ 1), "name")),
  values = Ct(V "value" * (sym "," * V "value") ^ 0),
  operands = V "values" * -(ws * P "="),
  attrdict = ws * #(P "{" * ws * (ident + string_lit) * ws * P "=") * P "{"
    * Ct(V "entry" * (sym "," * V "entry") ^ 0) * sym "}",
  types = Ct(V "type" * (sym "," * V "type") ^ 0),
  loc = ws * P "loc(" * ws * Ct(Cg(string_lit + C(P "unknown"), "file")
    * (P ":" * Cg(C(digits) / tonumber, "line")) ^ -1 * (P ":" * Cg(C(digits) / tonumber, "col")) ^ -1) * sym ")",
  op = ws * Ct(Cg(Cp(), "pos")
    * (Cg(V "values", "results") * sym "=") ^ -1
    * ws * Cg(Cp(), "namepos") * Cg(expect(C(ident), "an operation name"), "name")
    * (ws * Cg(V "operands", "operands")) ^ -1
    * Cg(V "attrdict", "attrs") ^ -1
    * (sym ":" * Cg(V "types", "types")) ^ -1
    * Cg(Ct(V "region" ^ 0), "regions")
    * Cg(V "loc", "loc") ^ -1),
  region = ws * Ct(Cg(Cp(), "pos") * P "{" * Cg(Ct(V "block" ^ 0), "blocks") * sym "}"),
  block = Ct(Cg(V "label", "args") * Cg(Ct(V "op" ^ 0), "ops")) + Ct(Cg(Ct(V "op" ^ 1), "ops")),
  label = ws * P "^" * ident * Ct((sym "(" * V "blockarg" * (sym "," * V "blockarg") ^ 0 * sym ")") ^ -1) * sym ":",
  blockarg = Ct(Cg(V "value", "value") * sym ":" * Cg(V "type", "type")),
}

-- }=====================================================================

-- {=====================================================================
-- Positions and messages
-- ======================================================================

-- Line starts of text, for byte offset -> line:col.
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

local function expected_list()
  local names = {}
  for k in pairs(expected) do names[#names + 1] = k end
  table.sort(names)
  if #names == 0 then return "valid input" end
  if #names == 1 then return names[1] end
  return table.concat(names, ", ", 1, #names - 1) .. " or " .. names[#names]
end

-- }=====================================================================

-- {=====================================================================
-- Building the IR from the AST
-- ======================================================================

local DICT = { __dict = true } -- keeps an empty {} a dictionary

local Builder = {}
Builder.__index = Builder

function Builder:fail(pos, msg) error({ pos = pos, msg = msg }, 0) end

function Builder:loc(pos)
  local line, col = line_col(self.lines, pos)
  return { file = self.file, line = line + self.line_offset, col = col }
end

function Builder:type(t)
  local ctx = self.ctx
  if t.tag == "scalar" then
    local n = t.name
    if n == "index" then return core.type_index(ctx) end
    if n == "none" then return core.type_none(ctx) end
    if n:sub(1, 1) == "i" then
      local w = tonumber(n:sub(2))
      if not w or w < 1 or w > 64 then self:fail(t.pos, ("integer width must be in [1, 64] in '%s'"):format(n)) end
      return core.type_int(w, ctx)
    end
    return core.type_float(n, ctx)
  elseif t.tag == "ptr" then
    local elem = self:type(t.elem)
    self:space(t, t.space)
    return core.type_ptr(elem, t.space)
  elseif t.tag == "dialect" then
    local params = {}
    for i, p in ipairs(t.params) do params[i] = self:attr(p) end
    local ty, err = core.type_dialect(t.name, params, ctx, true)
    if not ty then self:fail(t.pos, err) end
    return ty
  else -- vector, memref, tile
    local shape = {}
    for i, d in ipairs(t.shape) do
      shape[i] = d == "?" and "?" or math.tointeger(tonumber(d))
      if not shape[i] or (shape[i] ~= "?" and shape[i] >= 1 << 48) then
        self:fail(t.pos, ("dimension %s of %s is out of range"):format(d, t.tag))
      end
    end
    if #shape > 16 then self:fail(t.pos, "shapes have at most 16 dimensions") end
    local elem = self:type(t.elem)
    if t.tag == "vector" then
      if t.space then self:fail(t.pos, "vector types take no memory space") end
      if #shape == 0 then self:fail(t.pos, "a vector needs at least one dimension") end
      return core.type_vector(elem, shape)
    end
    if not t.space then self:fail(t.pos, t.tag .. " types need a memory space") end
    self:space(t, t.space)
    if t.tag == "memref" then
      local sw = t.swizzle and tonumber(t.swizzle) or 0
      if sw ~= 0 and sw ~= 32 and sw ~= 64 and sw ~= 128 then
        self:fail(t.pos, "swizzle must be 32, 64 or 128")
      end
      return core.type_memref(elem, shape, t.space, sw)
    end
    if t.swizzle then self:fail(t.pos, "tile types take no swizzle") end
    return core.type_tile(elem, shape, t.space)
  end
end

local spaces
function Builder:space(node, s)
  if not spaces then
    spaces = {}
    for _, n in ipairs(core.memspaces()) do spaces[n] = true end
  end
  if not spaces[s] then self:fail(node.pos, ("unknown memory space '%s'"):format(s)) end
end

-- An AST attribute -> the Lua value that tilua.core turns into exactly that attribute.
function Builder:attr(a)
  local tag = a.tag
  if tag == "num" then
    local text, t = a.text, a.type and self:type(a.type)
    local isfloat = text:find "[%.eE]" and not text:find "^%-?0x"
    if t and t:kind() == "float" then
      if text:find "^%-?0x" then
        local bits = math.tointeger(tonumber(text))
        if not bits then self:fail(a.pos, "bad hexadecimal float bits") end
        return core.attr_float_bits(bits, t)
      end
      return core.attr_float(tonumber(text), t)
    end
    if isfloat then
      if t then self:fail(a.pos, ("float literal for the integer type %s"):format(tostring(t))) end
      local v = tonumber(text)
      return math.type(v) == "integer" and v + 0.0 or v -- keeps -0.0
    end
    local v = math.tointeger(tonumber(text))
    if not v then self:fail(a.pos, "integer literal out of range: " .. text) end
    if t then
      local k = t:kind()
      if k ~= "int" and k ~= "index" then self:fail(a.pos, ("an integer cannot have type %s"):format(tostring(t))) end
      return core.attr_int(v, t)
    end
    return v
  elseif tag == "str" or tag == "bool" then
    return a.value
  elseif tag == "sym" then
    return core.attr_sym(a.value, self.ctx)
  elseif tag == "typeattr" then
    return self:type(a.type)
  elseif tag == "array" then
    local l = {}
    for i, e in ipairs(a.list) do l[i] = self:attr(e) end
    return l
  elseif tag == "dict" then
    return self:dict(a.list)
  end
  self:fail(a.pos, "bad attribute")
end

function Builder:dict(entries)
  local d = setmetatable({}, DICT)
  for _, e in ipairs(entries) do
    if d[e.key] ~= nil then self:fail(e.pos, ("duplicate attribute '%s'"):format(e.key)) end
    d[e.key] = self:attr(e.attr)
  end
  return d
end

function Builder:lookup(v)
  for i = #self.scopes, 1, -1 do
    local val = self.scopes[i][v.name]
    if val then return val end
  end
  self:fail(v.pos, ("use of undefined value %s"):format(v.name))
end

function Builder:define(v, val)
  local scope = self.scopes[#self.scopes]
  if scope[v.name] then self:fail(v.pos, ("redefinition of value %s"):format(v.name)) end
  scope[v.name] = val
end

function Builder:op(o, block)
  if not core.op_info(o.name) then self:fail(o.namepos, ("unknown operation '%s'"):format(o.name)) end
  local operands = {}
  for i, v in ipairs(o.operands or {}) do operands[i] = self:lookup(v) end
  local types = {}
  for i, t in ipairs(o.types or {}) do types[i] = self:type(t) end
  local results = o.results or {}
  if #results ~= #types then
    self:fail(o.pos, ("'%s' defines %d result%s but lists %d type%s"):format(o.name,
      #results, #results == 1 and "" or "s", #types, #types == 1 and "" or "s"))
  end
  local attrs = o.attrs and self:dict(o.attrs) or nil
  local loc
  if o.loc and self.keep_locs then
    loc = { file = o.loc.file ~= "unknown" and o.loc.file or nil, line = o.loc.line or 0, col = o.loc.col or 0 }
  else
    loc = self:loc(o.pos)
  end
  local op = core.op_create(self.ctx, o.name, operands, types, attrs, #o.regions, block, nil, loc, false)
  for r, region in ipairs(o.regions) do
    local reg = op:region(r)
    self.scopes[#self.scopes + 1] = {}
    for _, b in ipairs(region.blocks) do
      local argtypes, args = {}, b.args or {}
      for i, a in ipairs(args) do argtypes[i] = self:type(a.type) end
      local blk = reg:add_block(argtypes)
      for i, a in ipairs(args) do self:define(a.value, blk:arg(i)) end
      for _, inner in ipairs(b.ops) do self:op(inner, blk) end
    end
    self.scopes[#self.scopes] = nil
  end
  for i, r in ipairs(results) do self:define(r, op:result(i)) end
  return op
end

-- }=====================================================================

-- M.parse(text [, opts]) -> module op | nil, message, {line=, col=, message=}
-- opts: file (name used in locations and messages), ctx (context),
-- line_offset (added to every line, for cases cut out of a larger file),
-- locations = "text" (default: line:col of the text) or "keep" (use loc(...) annotations).
function M.parse(text, opts)
  opts = opts or {}
  local file = opts.file or "<input>"
  local ctx = opts.ctx or core.default_context()
  farthest, expected = 0, {}
  local b = setmetatable({ ctx = ctx, file = file, lines = line_index(text), scopes = { {} },
                           line_offset = opts.line_offset or 0, keep_locs = opts.locations == "keep" }, Builder)
  local ast = grammar:match(text)
  if not ast then
    local pos = farthest > 0 and farthest or 1
    local line, col = line_col(b.lines, pos)
    local msg = "expected " .. expected_list()
    return nil, M.format_error(text, file, line, col, msg, b.line_offset),
      { line = line + b.line_offset, col = col, message = msg }
  end
  local ok, res = pcall(function()
    if #ast == 1 and ast[1].name == "module" then return b:op(ast[1], nil) end
    local m = ctx:module({ file = file, line = 1 + b.line_offset, col = 1 })
    local body = m:region(1):entry()
    for _, o in ipairs(ast) do b:op(o, body) end
    return m
  end)
  if ok then return res end
  if type(res) ~= "table" then error(res, 0) end -- a bug, not bad input
  local line, col = line_col(b.lines, res.pos)
  return nil, M.format_error(text, file, line, col, res.msg, b.line_offset),
    { line = line + b.line_offset, col = col, message = res.msg }
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
