-- spec/helper.lua: paths and small utilities shared by the specs.
-- ctest runs every spec inside the tilua host from the repository root with
-- TILUA_BUILD_DIR set; run by hand, `busted` finds the module through cpath.
local H = {}

H.build = os.getenv "TILUA_BUILD_DIR" or "build"
H.root = os.getenv "TILUA_SOURCE_ROOT" or "."
H.tilua = H.build .. "/tilua"
H.sanitize = os.getenv "TILUA_SANITIZE" == "1"
package.cpath = H.build .. "/lua/?.so;" .. package.cpath

local function quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
H.quote = quote

local function slurp(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read "a"
  f:close()
  return s
end
H.slurp = slurp

-- H.run(argv_list [, stdin_text]) -> stdout, stderr, exit code
function H.run(argv, input)
  local parts = {}
  for i, a in ipairs(argv) do parts[i] = quote(a) end
  local out, err, inp = os.tmpname(), os.tmpname(), os.tmpname()
  local f = assert(io.open(inp, "wb"))
  f:write(input or "")
  f:close()
  local cmd = table.concat(parts, " ") .. " <" .. inp .. " >" .. out .. " 2>" .. err
  local ok, how, code = os.execute(cmd)
  local so, se = slurp(out), slurp(err)
  os.remove(out)
  os.remove(err)
  os.remove(inp)
  if how == "signal" then code = 128 + code end
  return so, se, ok and 0 or code
end

-- H.sh(command) -> ok, its stdout and stderr together: a shell command line.
function H.sh(cmd)
  local out, err, code = H.run { "sh", "-c", cmd }
  return code == 0, (out or "") .. (err or "")
end

-- H.line_of(path, mark) -> the number of the first line of path that holds mark.
function H.line_of(path, mark)
  local n = 0
  for l in io.lines(path) do
    n = n + 1
    if l:find(mark, 1, true) then return n end
  end
  error(("no line of %s holds %q"):format(path, mark))
end

-- H.tilua_env(env, args [, seconds]) -> stdout, stderr, exit code, seconds taken: the
-- tilua program with the variables of env set, killed after `seconds` (default 60).
function H.tilua_env(env, args, seconds)
  local argv = { "env" }
  for k, v in pairs(env) do argv[#argv + 1] = k .. "=" .. v end
  for _, a in ipairs { "timeout", "-k", "5", tostring(seconds or 60), H.tilua } do argv[#argv + 1] = a end
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  local t0 = os.time()
  local out, err, code = H.run(argv)
  return out, err, code, os.time() - t0
end

-- The tilua program with arguments.
function H.tilua_run(args, input)
  local argv = { H.tilua }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  return H.run(argv, input)
end

function H.ptxas()
  local p = os.getenv "TILUA_PTXAS"
  if p and p ~= "" then return p end
  local f = io.open("/usr/local/cuda/bin/ptxas", "r")
  if f then f:close() return "/usr/local/cuda/bin/ptxas" end
end

function H.files(dir, pattern)
  local list = {}
  local p = io.popen("ls " .. quote(dir))
  for name in p:lines() do
    if name:match(pattern) then list[#list + 1] = dir .. "/" .. name end
  end
  p:close()
  table.sort(list)
  return list
end

-- Text checks for printed IR and PTX (plain substrings, not patterns).
function H.has(text, s)
  assert(text:find(s, 1, true), ("expected %q in:\n%s"):format(s, text))
end
function H.lacks(text, s)
  assert(not text:find(s, 1, true), ("did not expect %q in:\n%s"):format(s, text))
end
-- the strings appear in this order
function H.seq(text, list)
  local pos = 1
  for _, s in ipairs(list) do
    local a, b = text:find(s, pos, true)
    assert(a, ("expected %q after position %d in:\n%s"):format(s, pos, text))
    pos = b + 1
  end
end
function H.count(text, s)
  local n, pos = 0, 1
  while true do
    local a, b = text:find(s, pos, true)
    if not a then return n end
    n, pos = n + 1, b + 1
  end
end

return H
