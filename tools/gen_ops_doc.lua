-- gen_ops_doc.lua -- writes docs/ops.md, and the generated parts of
-- docs/ptx.md, from the op tables (src/dialects/*.def) as the library exports
-- them (core.ops(), core.dialect_types(), core.enums(), core.stamps()).
--
--   build/tilua tools/gen_ops_doc.lua [OUT]          (default OUT: docs/ops.md)
--   TILUA_BUILD_DIR=build lua5.4 tools/gen_ops_doc.lua [OUT]
--
-- Loaded with dofile (spec/ops_doc_spec.lua) it returns { generate = fn,
-- ptx = fn(old text of docs/ptx.md) } instead of writing. Columns of ops.md:
-- operands and results come from the signature, attributes from the ATTR
-- rows, "lowering" from the LOWER rows (tile) and the PTX rows (nvvm); region
-- names the contract quotes (then, else, before, after, body) go to the
-- regions column.

package.cpath = (os.getenv "TILUA_BUILD_DIR" or "build") .. "/lua/?.so;" .. package.cpath
local core = require("tilua").core

local M = {}

local REGION_NAMES = { ["then"] = true, ["else"] = true, before = true, after = true, body = true }

-- Family of an op: the dialect, except for cutlass, whose eight families
-- (docs/cutlass.md) follow the second component of the name.
local function family(op)
  if op.dialect ~= "cutlass" then return op.dialect ~= "" and op.dialect or "builtin" end
  local n = op.name
  if n:find("%.mods_") then return "mods" end
  if n == "cutlass.bar" then return "named_barrier" end
  if n == "cutlass.async.exec" then return "async.exec" end
  if n:find "^cutlass%.async%." then return "async tokens" end
  return n:match "^cutlass%.([%w_]+)"
end

-- A table cell: pipes escaped; outside `code`, '<' too (<depth> would be read as HTML).
local function cell(s)
  local out, code = {}, false
  for piece in (s .. "`"):gmatch "([^`]*)`" do
    out[#out + 1] = code and piece or piece:gsub("<", "&lt;")
    code = not code
  end
  return (table.concat(out, "`"):gsub("|", "\\|"))
end

-- One signature token as markdown: alternatives, optional (?), variadic (...).
local function token(t)
  local suffix = ""
  if t:sub(-3) == "..." then t, suffix = t:sub(1, -4), " (variadic)"
  elseif t:sub(-1) == "?" then t, suffix = t:sub(1, -2), " (optional)" end
  local alts = {}
  for a in t:gmatch "[^|]+" do alts[#alts + 1] = "`" .. a .. "`" end
  return table.concat(alts, " or ") .. suffix
end

local function tokens(list)
  local out = {}
  for t in list:gmatch "%S+" do out[#out + 1] = token(t) end
  return #out > 0 and table.concat(out, ", ") or "—"
end

-- Operand and result columns from "opd opd -> res".
local function signature(sig)
  local opds, res = sig:match "^(.-)%->(.*)$"
  if not opds then opds, res = sig, "" end
  return tokens(opds), tokens(res)
end

-- Region names the contract quotes.
local function region_names(op)
  local regions, seen = {}, {}
  for name in op.doc:gmatch "`([%w_%.]+)`" do
    if not seen[name] and REGION_NAMES[name] and op.regions > 0 then
      seen[name] = true
      regions[#regions + 1] = "`" .. name .. "`"
    end
  end
  return regions
end

local INT64_MIN, INT64_MAX = math.mininteger, math.maxinteger

-- One ATTR row: `name` kind, its range or values, its default (or "required").
local function attribute(a)
  local s = "`" .. a.name .. "` "
  if a.kind == "enum" then
    s = s .. table.concat(a.values, " | ")
  elseif a.kind == "int" and (a.min ~= INT64_MIN or a.max ~= INT64_MAX) then
    s = s .. ("int [%s, %s]"):format(a.min == INT64_MIN and "-inf" or a.min, a.max == INT64_MAX and "inf" or a.max)
  elseif a.max_length then
    s = s .. ("int list (at most %d)"):format(a.max_length)
  else
    s = s .. a.kind
  end
  if a.required then return s .. ", required" end
  if a.default ~= nil then return s .. " = " .. tostring(a.default) end
  return s
end

local function attributes(op)
  local out = {}
  for _, a in ipairs(op.attributes) do out[#out + 1] = attribute(a) end
  return #out > 0 and table.concat(out, "; ") or "—"
end

-- What an op becomes at the next level: its LOWER row (tile) or PTX row (nvvm).
local function lowering(op)
  if op.lowers_to then return "`" .. op.lowers_to .. "`" end
  if op.ptx then return (op.ptx_by_hand and "by hand: " or "") .. "`" .. op.ptx .. "`" end
  return "—"
end

local function op_row(op)
  local opds, res = signature(op.signature)
  local rnames = region_names(op)
  local regions = tostring(op.regions)
  if #rnames > 0 then regions = regions .. " (" .. table.concat(rnames, ", ") .. ")" end
  local recursive = false
  for _, t in ipairs(op.traits) do recursive = recursive or t == "recursive_effects" end
  local effects = #op.effects > 0 and table.concat(op.effects, ", ") or "none"
  if recursive then effects = (#op.effects > 0 and effects .. ", " or "") .. "those of its regions" end
  return ("| `%s` | %s | %s | %s | %s | %s | %s | %s | %s | %s |"):format(op.name, family(op), cell(opds), cell(res),
    regions, cell(attributes(op)), #op.traits > 0 and table.concat(op.traits, ", ") or "—", effects, cell(op.doc),
    cell(lowering(op)))
end

-- The stamps section: the STAMP rows (core.stamps()), one line each.
local function stamp_rows(out)
  local stamps = core.stamps()
  table.move({ "", "## stamps", "",
    ("%d attributes that passes put on ops of other kinds (STAMP rows, as MLIR's dialect"):format(#stamps),
    "attributes): the verifier checks each wherever it appears; a name in a stamping dialect's",
    "namespace that no row places on the op is an error. C reads one with `ir_stamp_ID(op)`,",
    "Lua with `op:attr_or_default(name)`.", "",
    "| attribute | on | value | meaning |", "|---|---|---|---|" }, 1, 10, #out + 1, out)
  for _, st in ipairs(stamps) do
    local on = {}
    for i, o in ipairs(st.ops) do on[i] = "`" .. o .. "`" end
    local value = attribute(st):gsub("^`[^`]*` ", "")
    if st.fields then
      local f = {}
      for i, a in ipairs(st.fields) do f[i] = attribute(a) end
      value = value .. " {" .. table.concat(f, "; ") .. "}"
    end
    out[#out + 1] = ("| `%s` | %s | %s | %s |"):format(st.name, table.concat(on, ", "), cell(value), cell(st.doc))
  end
end

-- The whole document as a string.
function M.generate()
  local ops, dialects, by = core.ops(), {}, {}
  for _, op in ipairs(ops) do
    local d = op.dialect ~= "" and op.dialect or "builtin"
    if not by[d] then
      by[d] = {}
      dialects[#dialects + 1] = d
    end
    table.insert(by[d], op)
  end
  local types = core.dialect_types()
  local out = {
    "# Operations",
    "",
    "<!-- Generated by tools/gen_ops_doc.lua from the op tables in src/dialects/*.def; do not edit.",
    "     Regenerate: build/tilua tools/gen_ops_doc.lua (spec/ops_doc_spec.lua fails when this is stale). -->",
    "",
    ("%d operations in %d dialects, %d dialect types. Operands and results are the type constraints of"):format(#ops, #dialects, #types),
    "each op's signature (`T or U` alternatives, optional and variadic positions marked); effects are",
    "the resources the op declares it reads or writes (none: pure, so canonicalize may remove it and cse",
    "may merge it); traits `droppable` (removable when unused despite its effects) and `no_merge`",
    "(never commoned) refine that. The cutlass dialect is described op by op in docs/cutlass.md.",
    "",
  }
  for _, d in ipairs(dialects) do
    out[#out + 1] = ("- [%s](#%s) (%d)"):format(d, d:gsub("%.", ""), #by[d])
  end
  out[#out + 1] = "- [dialect types](#dialect-types)"
  out[#out + 1] = "- [stamps](#stamps): attributes that passes put on ops of other kinds"
  for _, d in ipairs(dialects) do
    out[#out + 1] = ""
    out[#out + 1] = "## " .. d
    out[#out + 1] = ""
    out[#out + 1] = "| operation | family | operands | results | regions | attributes | traits | side effects | contract | lowering |"
    out[#out + 1] = "|---|---|---|---|---|---|---|---|---|---|"
    for _, op in ipairs(by[d]) do out[#out + 1] = op_row(op) end
  end
  out[#out + 1] = ""
  out[#out + 1] = "## dialect types"
  out[#out + 1] = ""
  out[#out + 1] = "| type | dialect | meaning (parameters in <>) |"
  out[#out + 1] = "|---|---|---|"
  for _, t in ipairs(types) do
    out[#out + 1] = ("| `!%s` | %s | %s |"):format(t.name, t.name:match "^([^.]+)", cell(t.doc))
  end
  stamp_rows(out)
  return table.concat(out, "\n") .. "\n"
end


-- {=== docs/ptx.md: the parts between <!-- BEGIN generated: NAME --> and <!-- END generated: NAME -->

local PARTS = {}

-- The one-to-one lowerings of convert-tile-to-nvvm (LOWER rows of tile.def).
function PARTS.lowerings()
  local out = { "| tile op | nvvm op (same operands, attributes both declare) |", "|---|---|" }
  for _, op in ipairs(core.ops()) do
    if op.lowers_to then out[#out + 1] = ("| `%s` | `%s` |"):format(op.name, op.lowers_to) end
  end
  return out
end

-- The PTX of every nvvm op (PTX rows of nvvm.def).
function PARTS.nvvm()
  local out = { "| op | PTX (template, or what the hand-written case writes) |", "|---|---|" }
  for _, op in ipairs(core.ops()) do
    if op.ptx then
      out[#out + 1] = ("| `%s` | %s`%s` |"):format(op.name, op.ptx_by_hand and "by hand: " or "", cell(op.ptx))
    end
  end
  return out
end

-- The text of docs/ptx.md with its generated parts replaced.
function M.ptx(text)
  return (text:gsub("(<!%-%- BEGIN generated: (%w+) [^\n]*%-%->\n).-(<!%-%- END generated: %w+ %-%->)", function(open, name, close)
    if not PARTS[name] then error("docs/ptx.md: no generated part " .. name) end
    return open .. table.concat(PARTS[name](), "\n") .. "\n" .. close
  end))
end

-- }===

-- Run as a script: write the files.
local script = arg and arg[0] and arg[0]:match "gen_ops_doc%.lua$"
if script then
  local path = arg[1] or "docs/ops.md"
  local f = assert(io.open(path, "wb"))
  f:write(M.generate())
  f:close()
  print("wrote " .. path)
  local ptx_path = path:gsub("ops%.md$", "ptx.md")
  if ptx_path ~= path then
    f = assert(io.open(ptx_path, "rb"))
    local old = f:read "a"
    f:close()
    f = assert(io.open(ptx_path, "wb"))
    f:write(M.ptx(old))
    f:close()
    print("wrote " .. ptx_path)
  end
end

return M
