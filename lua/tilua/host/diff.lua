-- tilua.host.diff: a line diff (longest common subsequence) for showing what a
-- pass changed. Output lines start with ' ', '-' or '+'; unchanged runs far
-- from a change fold into "@@ ... @@" markers.

local M = {}

local function lines(s)
  local t = {}
  for l in (s:sub(-1) == "\n" and s or s .. "\n"):gmatch "(.-)\n" do t[#t + 1] = l end
  return t
end

-- The line operations turning a into b: { {" " | "-" | "+", line} }.
function M.ops(a, b)
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
      elseif i <= xs and (j > ys or L[i + 1][j] >= L[i][j + 1]) then
        ops[#ops + 1] = { "-", x[head + i] }; i = i + 1 -- what went, then what came
      else
        ops[#ops + 1] = { "+", y[head + j] }; j = j + 1
      end
    end
  end
  for k = n - tail + 1, n do ops[#ops + 1] = { " ", x[k] } end
  return ops
end

-- M.diff(a, b [, context]) -> text of the diff, and whether anything differs.
function M.diff(a, b, context)
  context = context or 3
  local ops = M.ops(a, b)
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

-- {=== IR diffs with stable value names

-- The longest common subsequence of two lists of keys: the matched index pairs.
local function lcs_pairs(x, y)
  local n, m = #x, #y
  if n * m > 4e6 then return {} end
  local L = {}
  for i = n + 1, 1, -1 do
    L[i] = {}
    for j = m + 1, 1, -1 do
      if i > n or j > m then L[i][j] = 0
      elseif x[i] == y[j] then L[i][j] = L[i + 1][j + 1] + 1
      else L[i][j] = math.max(L[i + 1][j], L[i][j + 1]) end
    end
  end
  local pairs_, i, j = {}, 1, 1
  while i <= n and j <= m do
    if x[i] == y[j] then pairs_[#pairs_ + 1] = { i, j }; i, j = i + 1, j + 1
    elseif L[i + 1][j] >= L[i][j + 1] then i = i + 1
    else j = j + 1 end
  end
  return pairs_
end

local VALUE = "%%[%w_$.%-]+"

-- M.diff_ir(a, b [, context]): the diff of two printings of IR in which a
-- value keeps its name: passes renumber values, so the lines of a that match
-- lines of b but for value names (same op, same shape) lend b's names to a's
-- values, everywhere in a, before the line diff. What remains is what the
-- pass changed: an op gone, an operand replaced, an op added.
local function renamed_ir(a, b)
  local x, y = lines(a), lines(b)
  local kx, ky = {}, {}
  for i, l in ipairs(x) do kx[i] = l:gsub(VALUE, "%%_") end
  for j, l in ipairs(y) do ky[j] = l:gsub(VALUE, "%%_") end
  local map, taken = {}, {}
  for _, p in ipairs(lcs_pairs(kx, ky)) do
    local bn = {}
    for v in y[p[2]]:gmatch(VALUE) do bn[#bn + 1] = v end
    local k = 0
    for v in x[p[1]]:gmatch(VALUE) do
      k = k + 1
      local w = bn[k]
      if w and map[v] == nil and not taken[w] then map[v], taken[w] = w, true end
    end
  end
  -- a's values without a counterpart keep their name unless b uses it
  local renamed = {}
  for i, l in ipairs(x) do
    renamed[i] = l:gsub(VALUE, function(v)
      local w = map[v]
      if w then return w end
      if taken[v] then return v .. "'" end -- gone, and its name is another value's in b
      return v
    end)
  end
  return table.concat(renamed, "\n") .. "\n"
end

function M.diff_ir(a, b, context) return M.diff(renamed_ir(a, b), b, context) end

-- M.ops_ir(a, b): M.ops of the IR texts, with stable value names (as diff_ir).
function M.ops_ir(a, b) return M.ops(renamed_ir(a, b), b) end

-- }===

return M
