-- tilua.emulate.timeline: a picture of a kernel's run on the CPU emulator over time:
-- which warp runs, which is ready, and which waits on which barrier (a
-- pipeline stage's full or empty mbarrier, a named barrier, ...) at each
-- step. `tilua script.lua --emulate --timeline=t.html` draws every launch.
--
--   local rec = M.recorder()       tl.emulate(k, { ..., on_step = rec.on_step })
--   local run = rec.finish(result, title)
--   M.render({ run, ... }, title) -> one self-contained HTML page (inline SVG,
--                                  a tooltip on every bar; no script)
--
-- The x axis counts the emulator's steps (a step: one warp's synchronizing op
-- and its code up to the next, or a bulk copy completing); they order events,
-- they do not measure time on a GPU.

local M = {}

-- {=====================================================================
-- Recording (through tl.emulate's on_step, before every step)
-- ======================================================================

-- A warp's state before step s: "runs" (it takes the step), "waits" (its next
-- op cannot pass yet: what = what it waits on), "ready", or nil (finished).
local function state_of(W, actor)
  if W.done or not W.req then return nil end
  if W == actor then return "runs", W.req.rec.name .. " at " .. W.req.rec.loc end
  if W.req.ready() then return "ready", W.req.rec.name .. " at " .. W.req.rec.loc end
  return "waits", W.req.describe and W.req.describe() or W.req.rec.name
end

function M.recorder()
  local rows, by_warp, copies = {}, {}, { label = "bulk copies", segs = {} }
  local steps = 0

  local function extend(row, s, kind, what)
    local last = row.segs[#row.segs]
    if last and last.kind == kind and last.what == what and last.to == s - 1 then last.to = s
    else row.segs[#row.segs + 1] = { from = s, to = s, kind = kind, what = what } end
  end

  local rec = {}
  function rec.on_step(run, actor)
    steps = steps + 1
    for _, W in ipairs(run.warps) do
      local row = by_warp[W]
      if not row then
        row = { label = W.label, segs = {} }
        by_warp[W] = row
        rows[#rows + 1] = row
      end
      row.label = W.label -- a warp takes its role's name when it enters its agent
      local kind, what = state_of(W, actor)
      if kind then extend(row, steps, kind, what) end
    end
    if actor.kind == "copy" then extend(copies, steps, "runs", actor.label .. " completes") end
  end

  function rec.finish(result, title)
    if #copies.segs > 0 then rows[#rows + 1] = copies end
    return { title = title, rows = rows, steps = steps, ok = result.ok,
             error = not result.ok and (result.error and result.error.kind .. ": " .. result.error.message) or nil }
  end
  return rec
end

-- }=====================================================================

-- {=====================================================================
-- Drawing
-- ======================================================================

local function esc(s)
  return (tostring(s):gsub("[&<>\"]", { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;" }))
end

-- What a wait waits on, without its changing detail: "waits on full[2]",
-- "waits at the CTA barrier (bar.sync 0)".
local function wait_object(what)
  return what:match "^(waits on [^%s(]+)" or what:match "^([^:]+):" or what:match "^(%S+ %S+ %S+)" or what
end

-- A colour per object waited on (the same object, the same colour).
local function hue(s)
  local h = 0
  for i = 1, #s do h = (h * 31 + s:byte(i)) % 360 end
  return h
end

local COLORS = { runs = "#2e7d32", ready = "#d0d0d0" }
local LABEL_W, ROW_H, PLOT_W, MAX_SEGS = 190, 16, 1000, 20000

local function render_run(h, run, n)
  h[#h + 1] = ("<h2 id=\"run-%d\">%d. %s</h2>"):format(n, n, esc(run.title))
  if run.error then h[#h + 1] = ("<p class=\"error\">The run ended in a violation: %s</p>"):format(esc(run.error)) end
  -- the steps drawn: all, or the first ones up to MAX_SEGS bars
  local last, count = run.steps, 0
  local starts = {}
  for _, row in ipairs(run.rows) do
    for _, sg in ipairs(row.segs) do starts[#starts + 1] = sg.from end
  end
  if #starts > MAX_SEGS then
    table.sort(starts)
    last = starts[MAX_SEGS] - 1
  end
  if run.steps == 0 then
    h[#h + 1] = "<p>No synchronizing op: every warp ran from its start to its end in one go, so there is nothing to draw.</p>"
    return 0
  end
  local scale = PLOT_W / math.max(1, last)
  local height = ROW_H * (#run.rows + 1) + 8
  h[#h + 1] = ("<p>%d warps, %d steps%s.</p>"):format(#run.rows, run.steps,
    last < run.steps and (" (the first %d drawn)"):format(last) or "")
  h[#h + 1] = ('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">')
    :format(LABEL_W + PLOT_W + 10, height)
  local objects = {}
  for r, row in ipairs(run.rows) do
    local y = (r - 1) * ROW_H
    h[#h + 1] = ('<text x="%d" y="%d" text-anchor="end">%s</text>'):format(LABEL_W - 6, y + ROW_H - 4, esc(row.label))
    for _, sg in ipairs(row.segs) do
      if sg.from <= last then
        count = count + 1
        local to = math.min(sg.to, last)
        local color = COLORS[sg.kind]
        if sg.kind == "waits" then
          local obj = wait_object(sg.what)
          objects[obj] = true
          color = ("hsl(%d,70%%,55%%)"):format(hue(obj))
        end
        h[#h + 1] = ('<rect x="%.2f" y="%d" width="%.2f" height="%d" fill="%s"><title>%s: %s, step%s %d%s</title></rect>')
          :format(LABEL_W + (sg.from - 1) * scale, y + 2, math.max(0.5, (to - sg.from + 1) * scale), ROW_H - 4, color,
                  esc(row.label), esc(sg.kind == "ready" and "ready at " .. sg.what or sg.kind == "runs" and sg.what or sg.what),
                  to > sg.from and "s" or "", sg.from, to > sg.from and ("–" .. to) or "")
      end
    end
  end
  local axis_y = #run.rows * ROW_H + 12
  for i = 0, 4 do
    local s = math.floor(last * i / 4 + 0.5)
    h[#h + 1] = ('<text x="%.1f" y="%d" text-anchor="middle" fill="#666">step %d</text>'):format(LABEL_W + s * scale, axis_y, s)
  end
  h[#h + 1] = "</svg>"
  -- the legend: the states, and the objects the warps waited on
  local names = {}
  for o in pairs(objects) do names[#names + 1] = o end
  table.sort(names)
  local items = { ('<span class="sw" style="background:%s"></span>runs (a synchronizing op and the code after it)'):format(COLORS.runs),
                  ('<span class="sw" style="background:%s"></span>ready, another moved'):format(COLORS.ready) }
  for _, o in ipairs(names) do
    items[#items + 1] = ('<span class="sw" style="background:hsl(%d,70%%,55%%)"></span>%s'):format(hue(o), esc(o))
  end
  h[#h + 1] = '<p class="legend">' .. table.concat(items, " &nbsp; ") .. "</p>"
  return count
end

-- M.render(runs, title) -> HTML
function M.render(runs, title)
  local h = { "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', ("<title>%s</title>"):format(esc(title)),
    "<style>body { font-family: sans-serif; margin: 1.5em; color: #222; } h2 { font-size: 1.1em; margin-top: 2em; }"
      .. " .sw { display: inline-block; width: 12px; height: 10px; margin-right: 4px; } p.error { color: #a00; }"
      .. " p.legend { font-size: 12px; }</style></head><body>",
    ("<h1>%s</h1>"):format(esc(title)),
    ("<p>%d launch%s on the CPU emulator. Each row is a warp (or the bulk copies in flight), each column a step of the "
      .. "emulator: green where the warp moves, grey where it could, coloured by what it waits on where it cannot "
      .. "(hover a bar for the op, its script line and the steps).</p>"):format(#runs, #runs == 1 and "" or "es") }
  for i, run in ipairs(runs) do render_run(h, run, i) end
  h[#h + 1] = "</body></html>\n"
  return table.concat(h, "\n")
end

-- }=====================================================================

return M
