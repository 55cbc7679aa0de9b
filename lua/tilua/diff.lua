-- tilua.diff: a line diff (longest common subsequence) for showing what a
-- pass changed. Output lines start with ' ', '-' or '+'; unchanged runs far
-- from a change fold into "@@ ... @@" markers.

local M = {}

local function lines(s)
  local t = {}
  for l in (s:sub(-1) == "\n" and s or s .. "\n"):gmatch "(.-)\n" do t[#t + 1] = l end
  return t
end

-- M.diff(a, b [, context]) -> text of the diff, and whether anything differs.
function M.diff(a, b, context)
  context = context or 3
  local x, y = lines(a), lines(b)
  local n, m = #x, #y
  -- trim the common head and tail so the table stays small
  local head = 0
  while head < n and head < m and x[head + 1] == y[head + 1] do head = head + 1 end
  local tail = 0
  while tail < n - head and tail < m - head and x[n - tail] == y[m - tail] do tail = tail + 1 end
  local xs, ys = n - head - tail, m - head - tail
  local ops = {}
  for i = 1, head do ops[#ops + 1] = { " ", x[i] } end
  if xs * ys > 4e6 then -- too big for the table: show it as a replacement
    for i = head + 1, n - tail do ops[#ops + 1] = { "-", x[i] } end
    for j = head + 1, m - tail do ops[#ops + 1] = { "+", y[j] } end
  else
    local L = {}
    for i = xs + 1, 1, -1 do
      L[i] = {}
      for j = ys + 1, 1, -1 do
        if i > xs or j > ys then L[i][j] = 0
        elseif x[head + i] == y[head + j] then L[i][j] = L[i + 1][j + 1] + 1
        else L[i][j] = math.max(L[i + 1][j], L[i][j + 1]) end
      end
    end
    local i, j = 1, 1
    while i <= xs or j <= ys do
      if i <= xs and j <= ys and x[head + i] == y[head + j] then
        ops[#ops + 1] = { " ", x[head + i] }; i, j = i + 1, j + 1
      elseif j <= ys and (i > xs or L[i][j + 1] >= L[i + 1][j]) then
        ops[#ops + 1] = { "+", y[head + j] }; j = j + 1
      else
        ops[#ops + 1] = { "-", x[head + i] }; i = i + 1
      end
    end
  end
  for k = n - tail + 1, n do ops[#ops + 1] = { " ", x[k] } end
  -- keep changed lines and their context
  local keep, changed = {}, false
  for k, o in ipairs(ops) do
    if o[1] ~= " " then
      changed = true
      for c = math.max(1, k - context), math.min(#ops, k + context) do keep[c] = true end
    end
  end
  local out, skipping = {}, false
  for k, o in ipairs(ops) do
    if keep[k] then
      out[#out + 1] = o[1] .. " " .. o[2]
      skipping = false
    elseif not skipping then
      out[#out + 1] = "@@ ... @@"
      skipping = true
    end
  end
  return table.concat(out, "\n") .. (#out > 0 and "\n" or ""), changed
end

return M
