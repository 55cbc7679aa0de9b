-- lua_sizes.lua -- the size rule of the Lua half (docs/architecture.md, "Habits"):
-- no function over 150 lines, no file over 900. Run by ctest (lint.sizes):
--
--   lua5.4 tools/lua_sizes.lua LUAC DIR...
--
-- LUAC is luac5.4 (its listing names every function with its first and last
-- line); DIR... are the folders whose *.lua files are checked. Prints each
-- function or file over its limit and exits 1 if there is one.
local MAX_FUNCTION, MAX_FILE = 150, 900

-- Files written before the rule whose long functions wait for their next
-- change (as tools/format-pending.txt for the C format): each leaves the list
-- then, and the check fails while a listed file is already within the limits.
local PENDING = {
  ["stdlib/gemm.lua"] = true, -- build_kernel and its k:define body
}

local luac = assert(arg[1], "usage: lua_sizes.lua LUAC DIR...")

local function files_under(dir)
  local out = {}
  local p = assert(io.popen("find '" .. dir .. "' -name '*.lua' | sort"))
  for f in p:lines() do out[#out + 1] = f end
  p:close()
  return out
end

local function count_lines(f)
  local n = 0
  for _ in io.lines(f) do n = n + 1 end
  return n
end

-- "function <path:first,last> ..." for each function luac lists (main is 0,0).
local function long_functions(f)
  local out = {}
  local p = assert(io.popen(luac .. " -p -l '" .. f .. "'"))
  for line in p:lines() do
    local first, last = line:match("^function <.*:(%d+),(%d+)>")
    if first and tonumber(last) - tonumber(first) + 1 > MAX_FUNCTION then
      out[#out + 1] = { first = tonumber(first), lines = tonumber(last) - tonumber(first) + 1 }
    end
  end
  local ok = p:close()
  if not ok then error("lua_sizes: " .. luac .. " failed on " .. f) end
  return out
end

local bad = 0
for i = 2, #arg do
  for _, f in ipairs(files_under(arg[i])) do
    local over = {}
    local n = count_lines(f)
    if n > MAX_FILE then over[#over + 1] = ("%s: %d lines (the limit is %d)"):format(f, n, MAX_FILE) end
    for _, fn in ipairs(long_functions(f)) do
      over[#over + 1] = ("%s:%d: a function of %d lines (the limit is %d)"):format(f, fn.first, fn.lines, MAX_FUNCTION)
    end
    if PENDING[f] then
      if #over == 0 then
        bad = bad + 1
        print(("%s: within the limits: take it off tools/lua_sizes.lua's PENDING list"):format(f))
      end
    else
      for _, line in ipairs(over) do print(line) end
      bad = bad + #over
    end
  end
end
if bad > 0 then os.exit(1) end
