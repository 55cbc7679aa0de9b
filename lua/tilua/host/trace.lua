-- tilua.host.trace: `tilua script.lua --trace=FILE` writes every stage of every
-- compile of the script as one self-contained HTML page: for each compile its
-- stages (pass, time, whether it changed anything), the input IR, and for each
-- pass a side-by-side view of the IR before and after it, aligned as the REPL's
-- :diff aligns them (values keep their names across renumbering).
--
-- Around them: a list of the compiles at the top; on every stage links to the
-- stage before and after it and to its compile; each op's line links to the
-- script line that built it (the scripts are copied into the page, numbered);
-- a compile that failed shows its error (its script lines linked) and the
-- stage where it stopped, marked; a compile the compile cache answered says
-- so and links the compile it repeats instead of showing its stages again.
-- No script, no network: inline CSS, anchors and <details> only.

local diff = require "tilua.host.diff"

local M = {}

local function esc(s)
  return (tostring(s):gsub("[&<>\"]", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;" }))
end

local STYLE = [[
body { font-family: sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table.stages td, table.stages th { padding: 2px 10px; text-align: left; }
table.sbs { border-collapse: collapse; width: 100%; table-layout: fixed; font-family: monospace; font-size: 12px; }
table.sbs td { vertical-align: top; white-space: pre-wrap; word-break: break-all; padding: 0 6px; }
td.del { background: #fdd; } td.add { background: #dfd; } td.gap { background: #f4f4f4; }
pre { background: #f8f8f8; padding: 6px; font-size: 12px; overflow-x: auto; }
summary { cursor: pointer; margin: 4px 0; }
.unchanged { color: #888; }
.l { color: #888; font-size: 11px; float: right; text-decoration: none; margin-left: 1em; }
a.l:hover { text-decoration: underline; }
span.nav { float: right; font-size: 12px; font-weight: normal; }
span.nav a { margin-left: 0.6em; }
.failed { background: #fee; border-left: 4px solid #c00; padding-left: 6px; }
tr.failed td { color: #a00; font-weight: bold; }
div.error pre { background: #fee; border: 1px solid #c00; }
p.cached { background: #eef; padding: 6px; }
pre.src span { display: block; } pre.src span:target { background: #ff9; }
ul.compiles li.failed { color: #a00; }
]]

-- {=== ops' locations: loc("file":line[:col]) at the end of a printed line

-- A stage's IR split into lines without their loc(...) and the locations:
-- text, { [line number] = {file, line} }.
local function split_locs(ir)
  local plain, locs, n = {}, {}, 0
  for l in ((ir or ""):sub(-1) == "\n" and ir or (ir or "") .. "\n"):gmatch "(.-)\n" do
    n = n + 1
    local body, file, line = l:match '^(.-) loc%("(.-)":(%d+)[:%d]*%)$'
    if body then
      plain[n], locs[n] = body, { file, tonumber(line) }
    else
      plain[n] = l
    end
  end
  return table.concat(plain, "\n") .. "\n", locs
end

-- The script files the page links to: file -> {id, lines}; nil for a name
-- that is not a readable file ("stdin", "(command line)").
local function source_table()
  local files, order = {}, {}
  local function get(file)
    local f = files[file]
    if f == nil then
      local h = io.open(file, "r")
      if h then
        local lines = {}
        for l in h:lines() do lines[#lines + 1] = l end
        h:close()
        f = { id = #order + 1, name = file, base = file:match "[^/]*$", lines = lines }
        order[#order + 1] = f
      else
        f = false
      end
      files[file] = f
    end
    return f or nil
  end
  return get, order
end

-- A link to a script line, or its plain name where the file is not at hand.
local function loc_link(sources, file, line)
  local f = sources(file)
  if f and line >= 1 and line <= #f.lines then
    return ('<a class="l" href="#L%d-%d">%s:%d</a>'):format(f.id, line, esc(f.base), line)
  end
  return ('<span class="l">%s:%d</span>'):format(esc(file), line)
end

-- Text with every "file:line" of a readable file made a link (errors).
local function link_text(sources, text)
  return (esc(text):gsub("([%w_%./%-]+%.lua):(%d+)", function(file, line)
    local f = sources(file)
    line = tonumber(line)
    if f and line >= 1 and line <= #f.lines then
      return ('<a href="#L%d-%d">%s:%d</a>'):format(f.id, line, file, line)
    end
  end))
end

-- }===

-- IR lines with their locations linked.
local function ir_block(sources, ir)
  local text, locs = split_locs(ir)
  local out, n = {}, 0
  for l in text:gmatch "(.-)\n" do
    n = n + 1
    local loc = locs[n]
    out[#out + 1] = (loc and loc_link(sources, loc[1], loc[2]) or "") .. esc(l)
  end
  return "<pre>" .. table.concat(out, "\n") .. "</pre>"
end

-- Rows of a side-by-side view: { left, right, kind, left loc, right loc } with
-- kind " " or "~"; the diff's operations follow both texts in order.
local function rows(before, after)
  local a, la = split_locs(before)
  local b, lb = split_locs(after)
  local ops = diff.ops_ir(a, b)
  local out, k, x, y = {}, 1, 0, 0
  while k <= #ops do
    local o = ops[k]
    if o[1] == " " then
      x, y = x + 1, y + 1
      out[#out + 1] = { o[2], o[2], " ", la[x], lb[y] }
      k = k + 1
    else
      local dels, adds = {}, {}
      while ops[k] and ops[k][1] == "-" do x = x + 1; dels[#dels + 1] = { ops[k][2], la[x] }; k = k + 1 end
      while ops[k] and ops[k][1] == "+" do y = y + 1; adds[#adds + 1] = { ops[k][2], lb[y] }; k = k + 1 end
      for j = 1, math.max(#dels, #adds) do
        local d, ad = dels[j] or {}, adds[j] or {}
        out[#out + 1] = { d[1], ad[1], "~", d[2], ad[2] }
      end
    end
  end
  return out
end

local function cell(sources, text, loc)
  return (loc and text and loc_link(sources, loc[1], loc[2]) or "") .. (text and esc(text) or "")
end

local function side_by_side(sources, before, after)
  local b = { '<table class="sbs"><tr><th>before</th><th>after</th></tr>' }
  for _, r in ipairs(rows(before, after)) do
    if r[3] == " " then
      b[#b + 1] = ("<tr><td>%s</td><td>%s</td></tr>"):format(cell(sources, r[1], r[4]), cell(sources, r[2], r[5]))
    else
      b[#b + 1] = ("<tr><td class=\"%s\">%s</td><td class=\"%s\">%s</td></tr>"):format(
        r[1] and "del" or "gap", cell(sources, r[1], r[4]), r[2] and "add" or "gap", cell(sources, r[2], r[5]))
    end
  end
  b[#b + 1] = "</table>"
  return table.concat(b, "\n")
end

-- The earlier compile a cache hit repeats: the same stages (the cache hands
-- out copies of the first compile's, with the same IR).
local function repeated(compiles, ci)
  local c = compiles[ci]
  local first, last = c.stages[1], c.stages[#c.stages]
  for j = ci - 1, 1, -1 do
    local e = compiles[j]
    if not e.cached_from and #e.stages == #c.stages and e.stages[1].ir == first.ir
       and e.stages[#e.stages].ir == last.ir then
      return j
    end
  end
end

-- A stage's navigation: the stages before and after it, its compile, the top.
local function nav(ci, st, n)
  local parts = {}
  if st.index > 0 then parts[#parts + 1] = ('<a href="#c%d-s%d">&larr; %d</a>'):format(ci, st.index - 1, st.index - 1) end
  if st.index < n - 1 then parts[#parts + 1] = ('<a href="#c%d-s%d">%d &rarr;</a>'):format(ci, st.index + 1, st.index + 1) end
  parts[#parts + 1] = ('<a href="#compile-%d">compile %d</a>'):format(ci, ci)
  parts[#parts + 1] = '<a href="#top">top</a>'
  return '<span class="nav">' .. table.concat(parts, " ") .. "</span>"
end

-- The stages of one compile: its table, then each stage.
local function render_stages(h, sources, ci, c)
  h[#h + 1] = '<table class="stages"><tr><th>#</th><th>stage</th><th>ms</th><th>changed</th></tr>'
  for _, st in ipairs(c.stages) do
    h[#h + 1] = ("<tr%s><td>%d</td><td><a href=\"#c%d-s%d\">%s</a></td><td>%.3f</td><td>%s</td></tr>"):format(
      st.failed and ' class="failed"' or "", st.index, ci, st.index, esc(st.name), st.ms or 0,
      st.failed and "failed here" or st.index == 0 and "" or (st.changed and "yes" or "no"))
  end
  h[#h + 1] = "</table>"
  local prev, n = nil, #c.stages
  for _, st in ipairs(c.stages) do
    local ir = st.ir or ""
    local anchor = ("c%d-s%d"):format(ci, st.index)
    local mark = st.failed and ' class="failed"' or ""
    local title = ("%d %s%s"):format(st.index, esc(st.name), st.failed and ": the compile failed here" or "")
    if st.name == "emit-ptx" then
      h[#h + 1] = ("<details id=\"%s\"%s%s><summary>%s (the PTX)%s</summary><pre>%s</pre></details>"):format(
        anchor, mark, st.failed and " open" or "", title, nav(ci, st, n), esc(ir))
    elseif st.index == 0 or not prev then
      h[#h + 1] = ("<details id=\"%s\"%s open><summary>%s%s</summary>%s</details>"):format(
        anchor, mark, title, nav(ci, st, n), ir_block(sources, ir))
    elseif ir == prev and not st.failed then
      h[#h + 1] = ("<details id=\"%s\"><summary class=\"unchanged\">%s: no change%s</summary></details>"):format(
        anchor, title, nav(ci, st, n))
    else
      h[#h + 1] = ("<details id=\"%s\"%s open><summary>%s (%.3f ms)%s</summary>%s</details>"):format(
        anchor, mark, title, st.ms or 0, nav(ci, st, n), side_by_side(sources, prev, ir))
    end
    if st.name ~= "emit-ptx" then prev = ir end
  end
end

-- The scripts the page links to, each line numbered and an anchor.
local function render_sources(h, order)
  if #order == 0 then return end
  h[#h + 1] = '<h2 id="sources">Sources</h2>'
  for _, f in ipairs(order) do
    h[#h + 1] = ("<details open><summary>%s</summary><pre class=\"src\">"):format(esc(f.name))
    local lines = {}
    for i, l in ipairs(f.lines) do
      lines[i] = ('<span id="L%d-%d">%4d  %s</span>'):format(f.id, i, i, esc(l))
    end
    h[#h + 1] = table.concat(lines) .. "</pre></details>"
  end
end

-- M.render(compiles, title) -> HTML. compiles: { {label =, stages =
-- {{name, index, ms, changed, failed, cached, ir}}, error = message or nil} }
function M.render(compiles, title)
  local sources, order = source_table()
  local hits, failures = 0, 0
  for ci, c in ipairs(compiles) do
    c.cached_from = c.stages[1] and c.stages[1].cached and repeated(compiles, ci) or nil
    if c.cached_from then hits = hits + 1 end
    if c.error then failures = failures + 1 end
  end
  local h = { "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
    ("<title>%s</title>"):format(esc(title)), "<style>" .. STYLE .. "</style></head><body>",
    ("<h1 id=\"top\">%s</h1>"):format(esc(title)),
    ("<p>%d compile%s%s%s. Each pass: the IR before and after it, side by side; unchanged passes folded; "
      .. "an op's script line on its right.</p>"):format(#compiles, #compiles == 1 and "" or "s",
      hits > 0 and (", %d of them answered by the compile cache"):format(hits) or "",
      failures > 0 and (", %d failed"):format(failures) or "") }
  if #compiles == 0 then h[#h + 1] = "<p>The script has compiled nothing (yet).</p>" end
  h[#h + 1] = '<ul class="compiles">'
  for ci, c in ipairs(compiles) do
    h[#h + 1] = ('<li%s><a href="#compile-%d">compile %d: %s</a>%s</li>'):format(c.error and ' class="failed"' or "",
      ci, ci, esc(c.label), c.error and " (failed)" or c.cached_from and (" (cache hit of compile %d)"):format(c.cached_from)
      or (" (%d stages)"):format(#c.stages))
  end
  h[#h + 1] = "</ul>"
  -- the page's body first, so that every source it links is known before the sources
  local body = {}
  for ci, c in ipairs(compiles) do
    body[#body + 1] = ("<h2 id=\"compile-%d\"%s>compile %d: %s</h2>"):format(ci, c.error and ' class="failed"' or "",
      ci, esc(c.label))
    if c.cached_from then
      body[#body + 1] = ('<p class="cached">A cache hit: the same module, pipeline and options as '
        .. '<a href="#compile-%d">compile %d</a>, whose result it gave again; nothing was compiled.</p>'):format(
        c.cached_from, c.cached_from)
    else
      if c.error then
        local at = c.stages[#c.stages]
        at = at and at.failed and at or nil
        body[#body + 1] = ('<div class="error"><p>The compile failed%s:</p><pre>%s</pre></div>'):format(
          at and (' at <a href="#c%d-s%d">stage %d, %s</a>'):format(ci, at.index, at.index, esc(at.name)) or "",
          link_text(sources, c.error))
      end
      render_stages(body, sources, ci, c)
    end
  end
  for _, l in ipairs(body) do h[#h + 1] = l end
  render_sources(h, order)
  h[#h + 1] = "</body></html>\n"
  return table.concat(h, "\n")
end

return M
