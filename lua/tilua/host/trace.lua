-- tilua.host.trace: `tilua script.lua --trace=FILE` writes every stage of every
-- compile of the script as one self-contained HTML page: for each compile its
-- stages (pass, time, whether it changed anything), the input IR, and for each
-- pass a side-by-side view of the IR before and after it, aligned as the REPL's
-- :diff aligns them (values keep their names across renumbering). No script,
-- no network: inline CSS and <details> only.

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
]]

-- Rows of a side-by-side view: { left, right, kind } with kind " ", "-", "+" or "~".
local function rows(before, after)
  local ops = diff.ops_ir(before, after)
  local out, i = {}, 1
  while i <= #ops do
    local o = ops[i]
    if o[1] == " " then
      out[#out + 1] = { o[2], o[2], " " }
      i = i + 1
    else
      local dels, adds = {}, {}
      while ops[i] and ops[i][1] == "-" do dels[#dels + 1] = ops[i][2]; i = i + 1 end
      while ops[i] and ops[i][1] == "+" do adds[#adds + 1] = ops[i][2]; i = i + 1 end
      for k = 1, math.max(#dels, #adds) do out[#out + 1] = { dels[k], adds[k], "~" } end
    end
  end
  return out
end

local function side_by_side(before, after)
  local b = { '<table class="sbs"><tr><th>before</th><th>after</th></tr>' }
  for _, r in ipairs(rows(before, after)) do
    if r[3] == " " then
      b[#b + 1] = ("<tr><td>%s</td><td>%s</td></tr>"):format(esc(r[1]), esc(r[2]))
    else
      b[#b + 1] = ("<tr><td class=\"%s\">%s</td><td class=\"%s\">%s</td></tr>"):format(
        r[1] and "del" or "gap", r[1] and esc(r[1]) or "", r[2] and "add" or "gap", r[2] and esc(r[2]) or "")
    end
  end
  b[#b + 1] = "</table>"
  return table.concat(b, "\n")
end

-- M.render(compiles, title) -> HTML. compiles: { {label =, stages = {{name, index, ms, changed, ir}}} }
function M.render(compiles, title)
  local h = { "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
    ("<title>%s</title>"):format(esc(title)), "<style>" .. STYLE .. "</style></head><body>",
    ("<h1>%s</h1>"):format(esc(title)),
    ("<p>%d compile%s. Each pass: the IR before and after it, side by side; unchanged passes folded.</p>"):format(
      #compiles, #compiles == 1 and "" or "s") }
  for ci, c in ipairs(compiles) do
    h[#h + 1] = ("<h2 id=\"compile-%d\">compile %d: %s</h2>"):format(ci, ci, esc(c.label))
    h[#h + 1] = '<table class="stages"><tr><th>#</th><th>stage</th><th>ms</th><th>changed</th></tr>'
    for _, st in ipairs(c.stages) do
      h[#h + 1] = ("<tr><td>%d</td><td><a href=\"#c%d-s%d\">%s</a></td><td>%.3f</td><td>%s</td></tr>"):format(
        st.index, ci, st.index, esc(st.name), st.ms or 0, st.index == 0 and "" or (st.changed and "yes" or "no"))
    end
    h[#h + 1] = "</table>"
    local prev
    for _, st in ipairs(c.stages) do
      local ir = st.ir or ""
      local anchor = ("c%d-s%d"):format(ci, st.index)
      if st.index == 0 or not prev then
        h[#h + 1] = ("<details id=\"%s\" open><summary>%d %s</summary><pre>%s</pre></details>"):format(
          anchor, st.index, esc(st.name), esc(ir))
      elseif st.name == "emit-ptx" then
        h[#h + 1] = ("<details id=\"%s\"><summary>%d emit-ptx (the PTX)</summary><pre>%s</pre></details>"):format(
          anchor, st.index, esc(ir))
      elseif ir == prev then
        h[#h + 1] = ("<details id=\"%s\"><summary class=\"unchanged\">%d %s: no change</summary></details>"):format(
          anchor, st.index, esc(st.name))
      else
        h[#h + 1] = ("<details id=\"%s\" open><summary>%d %s (%.3f ms)</summary>%s</details>"):format(
          anchor, st.index, esc(st.name), st.ms or 0, side_by_side(prev, ir))
      end
      if st.name ~= "emit-ptx" then prev = ir end
    end
  end
  h[#h + 1] = "</body></html>\n"
  return table.concat(h, "\n")
end

return M
