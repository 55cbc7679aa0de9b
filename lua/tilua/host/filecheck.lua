-- tilua.host.filecheck: a small FileCheck for `tilua opt --check` (pass fixtures).
--
-- A fixture carries its driver and its expectations in comments:
--
--   // RUN: -p canonicalize --split-input-file   the options of `tilua opt`
--   // CHECK: text        matches on a later line than the previous match
--                        (or further on the same line)
--   // CHECK-NEXT: text   matches on the line after the previous match
--   // CHECK-SAME: text   matches further on the line of the previous match
--   // CHECK-NOT: text    does not occur between the previous match and the
--                        next one (or the end of the output)
--
-- In a text, {{pattern}} is a Lua pattern, [[NAME:pattern]] matches the
-- pattern and names what it matched, [[NAME]] matches what NAME matched;
-- everything else is literal, and a run of blanks matches any run of blanks.
-- With --split-input-file each case is checked against its own output.

local M = {}

-- The options of the RUN lines of text (every RUN line adds its words).
function M.run_options(text)
  local opts = {}
  for line in (text .. "\n"):gmatch "(.-)\n" do
    local rest = line:match "^%s*//%s*RUN:%s*(.*)$"
    if rest then
      for word in rest:gmatch "%S+" do
        opts[#opts + 1] = word:match "^'(.*)'$" or word
      end
    end
  end
  return opts
end

-- The directives of a case: { {kind, text, line} } in order. first: the
-- case's first line in the file.
function M.directives(text, first)
  local list, n = {}, (first or 1) - 1
  for line in (text .. "\n"):gmatch "(.-)\n" do
    n = n + 1
    local kind, body = line:match "^%s*//%s*(CHECK[%-%u]*):(.*)$"
    if kind then
      if kind ~= "CHECK" and kind ~= "CHECK-NEXT" and kind ~= "CHECK-SAME" and kind ~= "CHECK-NOT" then
        error({ line = n, message = ("unknown directive %s"):format(kind) })
      end
      body = body:gsub("^%s+", ""):gsub("%s+$", "")
      if body == "" then error({ line = n, message = kind .. " with nothing to match" }) end
      list[#list + 1] = { kind = kind, text = body, line = n }
    end
  end
  return list
end

-- A Lua pattern for a directive's text; names: the captures in order.
local function compile(text, vars, line)
  local parts, names, i = {}, {}, 1
  local function literal(s)
    s = s:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0")
    return (s:gsub("%s+", "%%s+"))
  end
  while i <= #text do
    local a, b, inner = text:find("{{(.-)}}", i)
    local c, d, var = text:find("%[%[(.-)%]%]", i)
    if c and (not a or c < a) then
      parts[#parts + 1] = literal(text:sub(i, c - 1))
      local name, pat = var:match "^([%a_][%w_]*):(.*)$"
      if name then
        parts[#parts + 1] = "(" .. pat .. ")"
        names[#names + 1] = name
      else
        if not var:match "^[%a_][%w_]*$" then error({ line = line, message = ("bad variable [[%s]]"):format(var) }) end
        if vars[var] == nil then error({ line = line, message = ("variable %s is used before it is defined"):format(var) }) end
        parts[#parts + 1] = literal(vars[var])
      end
      i = d + 1
    elseif a then
      parts[#parts + 1] = literal(text:sub(i, a - 1)) .. inner
      i = b + 1
    else
      parts[#parts + 1] = literal(text:sub(i))
      break
    end
  end
  return table.concat(parts), names
end

-- Find directive d in line from column col: the column of the match, the
-- column after it and its captures, or nil.
local function find_on(d, vars, line, col)
  local pat, names = compile(d.text, vars, d.line)
  local r = table.pack(line:find(pat, col))
  if not r[1] then return nil end
  local caps = {}
  for k, name in ipairs(names) do caps[name] = r[2 + k] end
  return r[1], r[2] + 1, caps
end

local function split_lines(s)
  local lines = {}
  for line in (s .. (s:sub(-1) == "\n" and "" or "\n")):gmatch "(.-)\n" do lines[#lines + 1] = line end
  return lines
end

-- Check output against the directives of a case; returns a list of problems
-- ("file:line: DIRECTIVE: message"), empty when every directive holds.
function M.check(output, directives, file)
  local lines, vars, problems = split_lines(output), {}, {}
  local ln, col = 1, 1  -- where the next CHECK starts looking
  local last = 0        -- the line of the previous match
  local nots = {}
  local function problem(d, msg) problems[#problems + 1] = ("%s:%d: %s: %s"):format(file, d.line, d.kind, msg) end
  -- CHECK-NOTs pending between (l0, c0) and (l1, c1)
  local function check_nots(l0, c0, l1, c1)
    for _, d in ipairs(nots) do
      for l = l0, math.min(l1, #lines) do
        local line = lines[l]
        if l == l1 then line = line:sub(1, c1 - 1) end
        local at = find_on(d, vars, line, l == l0 and c0 or 1)
        if at then problem(d, ("'%s' found at output line %d: %s"):format(d.text, l, lines[l])) break end
      end
    end
    nots = {}
  end
  for _, d in ipairs(directives) do
    if d.kind == "CHECK-NOT" then
      nots[#nots + 1] = d
    else
      local found_l, start, after, caps
      local want = d.kind == "CHECK-NEXT" and last + 1 or last
      if d.kind == "CHECK" then
        for l = ln, #lines do
          start, after, caps = find_on(d, vars, lines[l], l == ln and col or 1)
          if start then found_l = l break end
        end
      elseif want >= 1 and want <= #lines then
        start, after, caps = find_on(d, vars, lines[want], d.kind == "CHECK-SAME" and col or 1)
        if start then found_l = want end
      end
      if not found_l then
        local where = d.kind == "CHECK" and ("at or after output line " .. ln) or ("on output line " .. want)
        local shown = lines[d.kind == "CHECK" and ln or want]
        problem(d, ("'%s' not found %s%s"):format(d.text, where, shown and (": " .. shown) or " (past the end)"))
        return problems
      end
      check_nots(ln, col, found_l, start)
      for k, v in pairs(caps) do vars[k] = v end
      last, ln, col = found_l, found_l, after
    end
  end
  check_nots(ln, col, #lines + 1, 1)
  return problems
end

return M
