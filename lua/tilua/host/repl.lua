-- tilua.host.repl: the read-eval-print loop of the tilua program, in the manner of
-- lua.c (`=expr`, multi-line input, results printed), plus commands that
-- inspect the IR: the current module, the passes, one pass at a time with
-- what it changed, and every stage of the last pipeline.

local tl = require "tilua"
local core = require "tilua.core"
local diff = require "tilua.host.diff"
local host = require "tilua.host"

tl.options.keep_stages = true -- :stages and :diff show every stage's IR

local M = {}

local help = [[
Lua statements and expressions are evaluated (`=expr` prints expr); an
unfinished statement continues on the next line. The library is the global `tl`.
Commands:
  :ir [locs]          print the current module (tl.module()); 'locs' adds locations
  :load FILE.tir      parse textual IR into the current module
  :verify             verify the current module
  :passes             list the passes and named pipelines
  :run PASSES         run passes (comma-separated) on the current module and show
                      what changed (a line diff); the stages are kept for :stages
  :stages             list the stages of the last pipeline (tl.compile or :run)
  :stages N|NAME      print the IR after stage N (0 = the input) or the named pass
  :diff I J           the line diff between stages I and J (values keep their
                      names across renumbering; %N' is a value that is gone
                      whose name another value has now)
  :sched OPTIONS      show a tile schedule (same options as `tilua sched --help`)
  :check [KERNEL] [key=value ...]
                      check the barrier protocol of the current module's first kernel
                      (or KERNEL: a kernel's name or a global holding a tl.kernel) on
                      the CPU emulator and print the report; options grid, max_states,
                      n, bytes (inputs chosen as docs/protocol.md says); options given
                      once are kept for the next :check
  :replay             step through the last :check's counterexample on the emulator,
                      at a replay> prompt: each role's position (op and line), each
                      barrier's phase, pending arrivals and tx bytes, the stage
                      buffers (hex); enter or n: next step, b: back, r: restart,
                      g N: go to step N, c: continue to the end, p NAME: print a
                      barrier or stage buffer, q: quit (h at the prompt: all of them)
  :replay all         print every step (no prompt: for scripts)
  :replay N           print the state after step N
  :help               this help
  :quit               leave (also end of input)
]]

local out = io.stdout

local function say(...) out:write(...) out:write "\n" end

-- tostring that cannot fail: a __tostring that raises or returns a
-- non-string says so instead of ending the session.
local function safe_tostring(v)
  local ok, s = pcall(tostring, v)
  if ok and type(s) == "string" then return s end
  return ("<%s whose __tostring failed: %s>"):format(type(v), ok and "it returned a non-string" or
    (type(s) == "string" and s or "an error object"))
end

local function find_stage(key)
  local stages = tl.last_stages
  local n = tonumber(key)
  if n then
    for _, s in ipairs(stages) do if s.index == n then return s end end
    return nil
  end
  for i = #stages, 1, -1 do if stages[i].name == key then return stages[i] end end
end

local commands = {}

function commands.help() out:write(help) end

function commands.ir(arg)
  out:write(tl.module():print { locations = arg == "locs" })
end

function commands.load(arg)
  if arg == "" then return say "usage: :load FILE.tir" end
  local m, msg = tl.parse_file(arg)
  if not m then return say(msg) end
  local ok, vmsg = m:verify()
  if not ok then return say(("loaded %s, which does not verify:\n%s"):format(arg, vmsg)) end
  if vmsg then say(vmsg) end
  say(("loaded %s (verified)"):format(arg))
end

function commands.verify()
  local ok, msg = tl.module():verify()
  say(ok and ("ok: the module verifies" .. (msg and ("\n" .. msg) or "")) or msg)
end

function commands.passes()
  say "passes:"
  for _, p in ipairs(core.passes()) do say(("  %-28s %s"):format(p.name, p.description)) end
  say "named pipelines:"
  for _, p in ipairs(core.pipelines()) do say(("  %-28s %s (%s)"):format(p.name, p.description, p.passes)) end
end

function commands.run(arg)
  if arg == "" then return say "usage: :run PASS[,PASS...]" end
  local m = tl.module()
  local before = m:print()
  local ok, err = pcall(tl.compile, m, arg)
  if not ok then return say(err) end
  local stages = tl.last_stages
  for _, s in ipairs(stages) do
    if s.index > 0 then say(("// %s: %.3f ms%s"):format(s.name, s.ms, s.changed and "" or " (no change)")) end
  end
  local d, changed = diff.diff_ir(before, m:print())
  if changed then out:write(d) else say "// the module is unchanged" end
end

function commands.stages(arg)
  local stages = tl.last_stages
  if #stages == 0 then return say "no stages yet: run a pipeline with :run or tl.compile" end
  if arg == "" then
    for _, s in ipairs(stages) do
      say(("%3d  %-28s %s"):format(s.index, s.name, s.failed and "failed here"
        or s.index == 0 and "" or ("%.3f ms%s"):format(s.ms, s.changed and ", changed" or "")))
    end
    return
  end
  local s = find_stage(arg)
  if not s then return say(("no stage '%s' (see :stages)"):format(arg)) end
  say(("// stage %d: after %s"):format(s.index, s.name))
  out:write(s.ir)
end

function commands.diff(arg)
  local a, b = arg:match "^(%S+)%s+(%S+)$"
  local sa, sb = a and find_stage(a), b and find_stage(b)
  if not sa or not sb then return say "usage: :diff I J (stage numbers or pass names; see :stages)" end
  local d, changed = diff.diff_ir(sa.ir, sb.ir)
  out:write(changed and d or "// no difference\n")
end

function commands.sched(arg)
  local cli = require "tilua.host.cli"
  local args = {}
  for w in arg:gmatch "%S+" do args[#args + 1] = w end
  local ok, res = pcall(function()
    local cfg, o = cli.sched_config(args)
    if o.help then return cli.sched_usage() end
    return (cli.sched_render(cfg, o, host.isatty(1)))
  end)
  if not ok then
    return say(type(res) == "table" and res.usage or tostring(res))
  end
  out:write(res)
end

-- :check and :replay (tilua.emulate.protocol)
local check_opts = {}  -- the options last given to :check
local last_check       -- the last :check's result (its counterexample, if any)

local function find_kernel(name)
  local P = require "tilua.emulate.protocol"
  if name == nil then
    local ks = P.kernels(tl.module())
    if #ks == 0 then return nil, "no kernel in the current module (define one, or :load a .tir file)" end
    return ks[1]
  end
  local g = rawget(_G, name)
  if type(g) == "table" and g.op then return g.op end
  for _, k in ipairs(P.kernels(tl.module())) do
    if k:attr "sym_name" == name then return k end
  end
  return nil, ("no kernel '%s' in the current module (nor a global holding a tl.kernel)"):format(name)
end

function commands.check(arg)
  local P = require "tilua.emulate.protocol"
  local name
  local given = {}
  for w in arg:gmatch "%S+" do
    local key, v = w:match "^([%a_]+)=(%S+)$"
    if key then
      if not (key == "grid" or key == "max_states" or key == "n" or key == "bytes") then
        return say(("unknown option '%s' (grid, max_states, n, bytes)"):format(key))
      end
      local n = math.tointeger(tonumber(v))
      if not n or n < 1 then return say(("%s needs a positive integer, got '%s'"):format(key, v)) end
      given[key] = n
    elseif not name then name = w
    else return say "usage: :check [KERNEL] [key=value ...]" end
  end
  if next(given) then check_opts = given end
  local kop, err = find_kernel(name)
  if not kop then return say(err) end
  local o = { fill = "pattern" }
  for k, v in pairs(check_opts) do o[k] = v end
  local ok, r = pcall(P.check, kop, o)
  if not ok then
    last_check = nil
    return say(safe_tostring(r))
  end
  last_check = r
  say(("kernel '%s', grid %d, inputs %s"):format(r.name, r.grid, r.inputs))
  say(r.report)
  say(("(%d states, %d runs, %.3f s)%s"):format(r.states, r.runs, r.seconds,
    r.ok and "" or (r.trace and #r.trace > 0 and ": :replay steps through the counterexample" or "")))
end

local replay_help = [[
At the replay> prompt (step I of N):
  n, enter    the next step              n K   K steps on
  b           back one step              b K   K steps back
  r           restart (the start, before step 1)
  g K         go to step K
  c           continue to the end: one line per step, then the state at the end
  l           show the current step again
  p           list the barriers (m1, m2, ...) and stage buffers (s1, ...)
  p NAME      print a barrier (its state, who waits on it, the copies completing
              on it) or every byte of a stage buffer (.. = not written yet);
              NAME is m1, s2, ... or a part of the name
  h           this help
  q           leave the replay; a line starting with ':' leaves it and runs that command
A line marked * changed in the step shown.
]]

local command -- (below) a REPL command line: the replay runs one when it is typed

-- The interactive replay: frames from protocol.replay, the current one i.
local function replay_loop(P, frames)
  local i = 0
  local function show(j)
    i = j
    say(P.format_frame(frames[i], frames[i - 1]))
    if i == frames.n then say("end: " .. frames.outcome) end
  end
  show(0)
  while true do
    local line = host.readline(("replay %d/%d> "):format(i, frames.n))
    if line == nil then return end
    line = line or "l" -- Ctrl-C dropped the line typed: show the step again
    local cmd, rest = line:match "^%s*(%S*)%s*(.-)%s*$"
    if cmd:sub(1, 1) == ":" then return command(line:match "^%s*(.*)$") end
    local k = rest ~= "" and math.tointeger(tonumber(rest)) or nil
    if rest ~= "" and cmd ~= "p" and (not k or k < 0) then
      say(("'%s' needs a step count, got '%s'"):format(cmd, rest))
    elseif cmd == "" or cmd == "n" then
      if i == frames.n then say(("at the end (step %d of %d): %s"):format(i, frames.n, frames.outcome))
      else show(math.min(frames.n, i + (k or 1))) end
    elseif cmd == "b" then
      if i == 0 then say "at the start" else show(math.max(0, i - (k or 1))) end
    elseif cmd == "r" then show(0)
    elseif cmd == "g" then
      if not k or k > frames.n then say(("g K: a step from 0 to %d"):format(frames.n)) else show(k) end
    elseif cmd == "c" then
      for j = i + 1, frames.n - 1 do say(("step %d: %s"):format(j, frames[j].line)) end
      show(frames.n)
    elseif cmd == "l" then show(i)
    elseif cmd == "p" then
      if rest == "" then
        local items = P.items(frames[i])
        say(#items == 0 and "no barrier or stage buffer" or table.concat(items, "\n"))
      else say(P.print_item(frames[i], rest)) end
    elseif cmd == "h" or cmd == "?" then out:write(replay_help)
    elseif cmd == "q" then return
    else say(("unknown replay command '%s' (h lists them)"):format(cmd)) end
  end
end

function commands.replay(arg)
  local P = require "tilua.emulate.protocol"
  if not last_check or last_check.ok or not last_check.trace then
    return say "no counterexample to replay: :check a kernel whose protocol has a violation first"
  end
  local n
  if arg ~= "" and arg ~= "all" then
    n = math.tointeger(tonumber(arg))
    if not n or n < 0 then return say "usage: :replay [all | N] (N: a step number)" end
  end
  local frames = P.replay(last_check.kernel, last_check)
  if arg == "" then return replay_loop(P, frames) end
  if n then
    if n > frames.n then return say(("the counterexample has %d steps"):format(frames.n)) end
    say(P.format_frame(frames[n], frames[n - 1]))
  else
    for i = 0, frames.n do say(P.format_frame(frames[i], frames[i - 1])) end
  end
  say("end: " .. frames.outcome)
end

commands.quit = function() return "quit" end
commands.q = commands.quit
commands.h = commands.help

function command(line)
  local name, arg = line:match "^:(%S*)%s*(.-)%s*$"
  local f = commands[name]
  if not f then
    return say(("unknown command ':%s'%s (:help lists them)"):format(name, tl.did_you_mean(name, commands, ":")))
  end
  local ok, res = pcall(f, arg)
  if not ok then say(safe_tostring(res)) end
  return res
end

-- Does the chunk fail only because the input ended early?
local function incomplete(msg) return msg and msg:sub(-5) == "<eof>" end

-- A table shown by its contents (sorted keys, nested to depth 2, cycles
-- named), not as `table: 0x...`.
local function show(v, depth, seen)
  if type(v) == "string" then return ("%q"):format(v) end
  if type(v) ~= "table" or getmetatable(v) then return safe_tostring(v) end
  depth, seen = depth or 0, seen or {}
  if seen[v] then return "<cycle>" end
  if depth >= 2 then return "{...}" end
  seen[v] = true
  local parts, n = {}, #v
  for i = 1, math.min(n, 32) do parts[#parts + 1] = show(v[i], depth + 1, seen) end
  if n > 32 then parts[#parts + 1] = ("... (%d items)"):format(n) end
  local keys = {}
  for k in pairs(v) do
    if not (math.type(k) == "integer" and k >= 1 and k <= n) then keys[#keys + 1] = k end
  end
  table.sort(keys, function(a, b) return safe_tostring(a) < safe_tostring(b) end)
  for i, k in ipairs(keys) do
    if i > 32 then parts[#parts + 1] = "..." break end
    local ks = type(k) == "string" and k:match "^[%a_][%w_]*$" and k or ("[" .. show(k, 2, seen) .. "]")
    parts[#parts + 1] = ks .. " = " .. show(v[k], depth + 1, seen)
  end
  seen[v] = nil
  return "{ " .. table.concat(parts, ", ") .. (#parts > 0 and " }" or "}")
end
M.show = show

local function print_results(res)
  if res.n == 0 then return end
  local parts = {}
  for i = 1, res.n do parts[i] = type(res[i]) == "string" and res[i] or show(res[i]) end
  say(table.concat(parts, "\t"))
end

-- A top-level `local x = ...` would be gone on the next line (each input is
-- its own chunk): the REPL makes it a global, as a user means it.
local function globalize(src)
  local name = src:match "^%s*local%s+function%s+([%a_][%w_]*)"
  if name then return (src:gsub("^%s*local%s+function", "function", 1)) end
  local names, rest = src:match "^%s*local%s+([%a_][%w_]*%s*[%a_%w%s,]-)%s*(=.*)$"
  if names and not names:find "<" then return names .. " " .. rest end
  names = src:match "^%s*local%s+([%a_][%w_]*[%w_%s,]*)%s*$"
  if names then return names .. " = nil" end
  return src
end
M.globalize = globalize

-- Inputs are numbered through the session: an error says `stdin:7:` for the
-- seventh line typed. Each input is its own chunk, named `=stdin#N` when it
-- starts at line N: the library's locations count from there (lb_user_loc),
-- and Lua's own messages (`stdin#N:L:`) are said as `stdin:N+L-1:` here, so
-- the cost of an input does not grow with the lines before it.
local line_no = 0

local MAX_STATEMENT_LINES, MAX_STATEMENT_BYTES = 1000, 1 << 20

local function absolute(msg)
  return (msg:gsub("stdin#(%d+):(%d+):", function(n, l) return ("stdin:%d:"):format(n + l - 1) end))
end

local function eval(src, first_line)
  local name = ("=stdin#%d"):format(first_line or 1)
  src = globalize(src)
  local chunk, err = load("return " .. src, name, "t")
  if not chunk then chunk, err = load(src, name, "t") end
  if not chunk then return nil, absolute(err) end
  local res = table.pack(xpcall(chunk, tl.core.locate_error))
  if not res[1] then
    say(absolute(safe_tostring(res[2])))
    return true
  end
  print_results(table.pack(table.unpack(res, 2, res.n)))
  return true
end

function M.run()
  _G.tl = tl
  local home = os.getenv "HOME"
  local hist = os.getenv "TILUA_HISTORY" or (home and home .. "/.tilua_history")
  if hist and hist ~= "" then host.history_file(hist) end
  while true do
    local line, rerr = host.readline "> "
    if line == nil then
      if rerr then
        say(rerr)
        return 1
      end
      break
    end
    line_no = line_no + 1
    if line == false then -- luacheck: ignore 542 (Ctrl-C dropped what was typed: a fresh prompt)
    elseif line:match "^%s*:" then
      host.add_history(line)
      if command(line:match "^%s*(.*)$") == "quit" then break end
    elseif line:match "%S" then
      local typed = line
      local src = line:gsub("^%s*=", "return ", 1)
      local eof = false
      local first = line_no
      local ok, perr = pcall(function()
        while true do
          local ok, err = eval(src, first)
          if ok then break end
          if not incomplete(err) then
            say(err)
            break
          end
          local more, rerr = host.readline ">> "
          if more == false then typed = nil break end -- Ctrl-C: the unfinished chunk is dropped
          if more == nil then say(rerr or err) eof = true break end
          line_no = line_no + 1
          -- each line loads the statement again (as lua.c does): bounded, so
          -- that an input that never completes costs at most that much
          if line_no - first >= MAX_STATEMENT_LINES or #src + #more >= MAX_STATEMENT_BYTES then
            say(("stdin:%d: a statement of more than %d lines or %d bytes (the REPL reads no longer ones; run a file)")
              :format(first, MAX_STATEMENT_LINES, MAX_STATEMENT_BYTES))
            break
          end
          src = src .. "\n" .. more
          typed = typed .. "\n" .. more
        end
      end)
      if not ok then say(safe_tostring(perr)) end
      if typed then host.add_history(typed) end -- as typed: `=x`, not `return x`
      if eof then break end
    end
  end
  if host.isatty(0) then out:write "\n" end
  return 0
end

return M
