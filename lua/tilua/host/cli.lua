-- tilua.host.cli: the subcommands of the tilua program.
--
--   tilua opt FILE.tir [options]   read textual IR, run passes, print the result
--   tilua sched [options]          show which worker computes which tile
--   tilua export -o DIR script     the kernels a script compiles, as C (src/main.c runs
--                                  the script between export_begin and export_done)
--
-- Each subcommand takes the argument list and returns the exit code.

local core = require "tilua.core"
local parser = require "tilua.parser"
local filecheck = require "tilua.host.filecheck"

local M = {}

-- {=====================================================================
-- Diagnostics with the source line and a caret
-- ======================================================================

-- Format a diagnostic table {severity, file, line, col, message, notes}.
-- text/file/offset: the input, so that lines of the input get a caret.
function M.format_diagnostic(d, text, file, offset)
  local out = {}
  local function one(x, sev)
    local where = ""
    if x.file or x.line > 0 then
      where = (x.file and (x.file .. ":") or "") .. (x.line > 0 and (x.line .. ":") or "")
        .. (x.col > 0 and (x.col .. ":") or "") .. " "
    end
    local s = where .. sev .. ": " .. x.message
    if text and x.file == file and x.line > 0 then
      s = s .. parser.caret(text, x.line - (offset or 0), x.col > 0 and x.col or 1)
    end
    out[#out + 1] = s
  end
  one(d, d.severity)
  for _, n in ipairs(d.notes or {}) do one(n, "note") end
  return table.concat(out, "\n")
end

-- }=====================================================================

-- {=====================================================================
-- tilua opt
-- ======================================================================

local opt_usage = [[
usage: tilua opt [FILE.tir] [options]     (no FILE, or '-': stdin)

Reads textual IR, verifies it, runs the passes and prints the result.
Exits 1 with the diagnostics (file:line:col, the line and a caret) on failure.

  -p, --pass LIST          passes or named pipelines to run, comma-separated;
                           options in braces: --pass 'canonicalize,cse'
  --print-ir-after-all     print the IR after every pass (to stderr)
  --print-ir-after LIST    print the IR after the named passes (to stderr)
  --print-ir-after-change  only after passes that changed it (alone: after every
                           pass that changed it)
  --print-ir-after-failure print the IR as a failing pass left it (to stderr)
  --print-ir-before-all    print the IR before every pass (to stderr)
  --print-ir-before LIST   print the IR before the named passes (to stderr)
  --timing                 print a per-pass timing table (to stderr)
  --stats                  print the statistics passes report (verify-protocol: the
                           states and runs of each kernel's check; to stderr)
  --no-verify              do not verify between passes (the input is still verified)
  --check-protocol         run verify-protocol on the input and after every pass that
                           changes the IR: a pass that breaks a barrier protocol is
                           named (kernels the emulator cannot run are skipped)
  --locations              print loc("file":line:col) after each operation
  --keep-locations         take op locations from loc(...) annotations in the input
  -o FILE                  write the result to FILE instead of stdout
  --split-input-file       treat lines '// -----' as separators of independent cases
  --verify-diagnostics     check the diagnostics against comments
                           '// expected-error@+N {{text}}' (also -warning, -note);
                           exit 0 when every expected diagnostic, and no other, appears
  --check                  a pass fixture: add the options of its '// RUN:' lines and
                           check each case's result against its '// CHECK:',
                           'CHECK-NEXT:', 'CHECK-SAME:' and 'CHECK-NOT:' lines
                           (docs/testing.md); prints the failures, not the IR
  --list-passes            list the passes and named pipelines
  -h, --help               show this help
]]

local function list_passes(out)
  out:write "passes:\n"
  for _, p in ipairs(core.passes()) do
    local req = #p.requires > 0 and (" (requires %s)"):format(table.concat(p.requires, ", ")) or ""
    out:write(("  %-28s %s%s\n"):format(p.name, p.description, req))
  end
  out:write "named pipelines:\n"
  for _, p in ipairs(core.pipelines()) do
    out:write(("  %-28s %s (%s)\n"):format(p.name, p.description, p.passes))
  end
end

-- Walks an argument list: r:next() -> the next option (with "--x=v" split),
-- r:value() / r:int() -> the option's value. Errors are {usage = message}.
local function arg_reader(args)
  local r = { i = 0, pending = nil }
  function r:next()
    self.i = self.i + 1
    local a = args[self.i]
    if a == nil then return nil end
    local long, eq = a:match "^(%-%-[%w%-]+)=(.*)$"
    if long then a, self.pending = long, eq end
    self.current = a
    return a
  end
  function r:value()
    if self.pending then
      local v = self.pending
      self.pending = nil
      return v
    end
    self.i = self.i + 1
    if args[self.i] == nil then error({ usage = ("option %s needs a value"):format(self.current) }) end
    return args[self.i]
  end
  function r:int()
    local text = self:value()
    local n = tonumber(text)
    local v = math.tointeger(n)
    if n and not v and n == math.floor(n) then
      error({ usage = ("%s %s is out of range (at most %d)"):format(self.current, text, math.maxinteger) })
    end
    if not v or v < 0 then error({ usage = ("%s needs a non-negative integer, got '%s'"):format(self.current, text) }) end
    return v
  end
  return r
end

-- The options of `tilua opt`: flag -> fn(o, r) that sets o from the reader r.
local function names_into(set) return function(o, r) for n in r:value():gmatch "[^,]+" do o[set][n] = true end end end
local function flag(field) return function(o) o[field] = true end end
local opt_flags = {
  ["-h"] = flag "help", ["--help"] = flag "help",
  ["-p"] = function(o, r) o.passes[#o.passes + 1] = r:value() end,
  ["--print-ir-after-all"] = flag "print_after_all",
  ["--print-ir-after"] = names_into "print_after",
  ["--print-ir-after-change"] = flag "print_after_change",
  ["--print-ir-after-failure"] = flag "print_after_failure",
  ["--print-ir-before-all"] = flag "print_before_all",
  ["--print-ir-before"] = names_into "print_before",
  ["--timing"] = flag "timing",
  ["--stats"] = flag "stats",
  ["--no-verify"] = flag "no_verify",
  ["--check-protocol"] = flag "check_protocol",
  ["--locations"] = flag "locations",
  ["--keep-locations"] = flag "keep_locations",
  ["-o"] = function(o, r) o.output = r:value() end,
  ["--split-input-file"] = flag "split",
  ["--verify-diagnostics"] = flag "verify_diagnostics",
  ["--check"] = flag "check",
  ["--list-passes"] = flag "list_passes",
}
opt_flags["--pass"], opt_flags["--passes"] = opt_flags["-p"], opt_flags["-p"]

-- "unknown option 'x'", and the known one it is nearest to.
local function unknown_option(a, flags)
  local names = {}
  for n in pairs(flags) do names[#names + 1] = n end
  table.sort(names)
  local near = core.closest_name(a, names)
  return ("unknown option '%s'%s"):format(a, near and ("; did you mean '%s'?"):format(near) or "")
end
M.unknown_option = unknown_option

local function parse_opt_args(args)
  local o = { passes = {}, print_after = {}, print_before = {} }
  local r = arg_reader(args)
  for a in r.next, r do
    local f = opt_flags[a]
    if f then f(o, r)
    elseif a:sub(1, 1) == "-" and a ~= "-" then error({ usage = unknown_option(a, opt_flags) })
    elseif o.file then error({ usage = ("more than one input file ('%s' and '%s')"):format(o.file, a) })
    else o.file = a end
  end
  return o
end

-- Cut text into cases at lines "// -----"; each case knows its first line.
local function split_cases(text, split)
  if not split then return { { text = text, first = 1 } } end
  local cases, cur, first, n = {}, {}, 1, 0
  for line in (text .. "\n"):gmatch "(.-)\n" do
    n = n + 1
    if line:match "^%s*//%s*%-%-%-%-%-%s*$" then
      cases[#cases + 1] = { text = table.concat(cur, "\n") .. "\n", first = first }
      cur, first = {}, n + 1
    else
      cur[#cur + 1] = line
    end
  end
  cases[#cases + 1] = { text = table.concat(cur, "\n"), first = first }
  return cases
end

-- Expected diagnostics of a case: { {severity=, line=, text=, comment_line=} }
-- Offsets past a million lines are refused (as problems), not wrapped.
local function expectations(case, file)
  local list, bad, n = {}, {}, case.first - 1
  for line in (case.text .. "\n"):gmatch "(.-)\n" do
    n = n + 1
    for sev, off, txt in line:gmatch "//%s*expected%-(%a+)(@?[%+%-]?%d*)%s*{{(.-)}}" do
      local target = n
      if off ~= "" then
        local d = math.tointeger(tonumber(off:sub(2)))
        if not d or math.abs(d) > 1000000 then
          bad[#bad + 1] = ("%s:%d: the line offset of expected-%s%s is out of range"):format(file, n, sev, off)
          target = nil
        else
          target = n + d
        end
      end
      if target then list[#list + 1] = { severity = sev, line = target, text = txt, comment_line = n } end
    end
  end
  return list, bad
end

-- Run one case: parse, verify, run passes. Returns ok, diagnostics (a list of tables), module.
local function run_case(case, o, file, ctx, log)
  local m, msg, info = parser.parse(case.text, {
    file = file, ctx = ctx, line_offset = case.first - 1,
    locations = o.keep_locations and "keep" or nil,
  })
  if not m then
    return false, { { severity = "error", file = file, line = info and info.line or 0,
                      col = info and info.col or 0, message = info and info.message or msg, notes = {} } }
  end
  local ok, _, list = m:verify()
  if not ok then return false, list, m end
  local warnings = list or {}
  local spec = table.concat(o.passes, ",")
  if spec ~= "" then
    local stages = {}
    local order = core.pipeline_parse(spec) -- the passes, in order: the one before which to print
    local after_any = o.print_after_all or next(o.print_after) or false
    local function dump(what, op)
      log:write(("// -----// IR Dump %s //----- //\n"):format(what))
      log:write(op:print { locations = o.locations })
    end
    local ok2, _, list2 = core.run_pipeline(m, spec, {
      verify = not o.no_verify,
      check_protocol = o.check_protocol,
      on_stage = function(st, op)
        stages[#stages + 1] = st
        if st.index > 0 and st.failed then
          if o.print_after_failure then dump(("After %s Failed"):format(st.pass), op) end
        elseif st.index > 0 and (o.print_after_all or o.print_after[st.pass] or (o.print_after_change and not after_any))
               and (st.changed or not o.print_after_change) then
          dump(("After %s (%.3f ms)"):format(st.pass, st.ms), op)
        end
        local nxt = not st.failed and order[st.index + 1]
        if nxt and (o.print_before_all or o.print_before[nxt]) then dump("Before " .. nxt, op) end
      end,
    })
    if o.stats then
      for _, st in ipairs(stages) do
        if st.stats then
          log:write(("// %s statistics\n"):format(st.pass))
          for _, x in ipairs(st.stats) do log:write(("//   %-36s %s\n"):format(x.name, tostring(x.value))) end
        end
      end
    end
    if o.timing then
      log:write "// pass timing (ms)\n"
      local total = 0
      for _, st in ipairs(stages) do
        if st.index > 0 then
          log:write(("//   %-28s %9.3f%s\n"):format(st.pass, st.ms, st.changed and "  changed" or ""))
          total = total + st.ms
        end
      end
      log:write(("//   %-28s %9.3f\n"):format("total", total))
    end
    if not ok2 then
      if not list2 or #list2 == 0 then
        list2 = { { severity = "error", line = 0, col = 0, message = "pipeline failed", notes = {} } }
      end
      return false, list2, m
    end
    for _, d in ipairs(list2 or {}) do warnings[#warnings + 1] = d end -- the passes' warnings
  end
  return true, warnings, m
end

-- Compare diagnostics with expectations; returns a list of problems (strings).
local function check_expectations(expect, diags, file)
  local problems, used = {}, {}
  local function flat(list)
    local out = {}
    for _, d in ipairs(list) do
      out[#out + 1] = d
      for _, n in ipairs(d.notes or {}) do out[#out + 1] = n end
    end
    return out
  end
  local all = flat(diags)
  for _, e in ipairs(expect) do
    local found
    for i, d in ipairs(all) do
      local sev = d.severity or "note"
      if not used[i] and sev == e.severity and d.line == e.line and d.message:find(e.text, 1, true) then
        found = i
        break
      end
    end
    if found then used[found] = true
    else
      local near = {}
      for _, d in ipairs(all) do
        if d.line == e.line then near[#near + 1] = ("%s: %s"):format(d.severity or "note", d.message) end
      end
      problems[#problems + 1] = ("%s:%d: expected %s {{%s}} was not produced%s"):format(file, e.line,
        e.severity, e.text, #near > 0 and (" (got at that line: " .. table.concat(near, "; ") .. ")") or "")
    end
  end
  for i, d in ipairs(all) do
    if not used[i] and (d.severity == "error" or d.severity == "warning") then
      problems[#problems + 1] = ("%s:%d:%d: unexpected %s: %s"):format(d.file or file, d.line, d.col, d.severity, d.message)
    end
  end
  return problems
end

function M.opt(args)
  local ok, o = pcall(parse_opt_args, args)
  if not ok then
    if type(o) == "table" and o.usage then
      io.stderr:write("tilua opt: ", o.usage, "\n('tilua opt --help' lists the options)\n")
      return 1
    end
    error(o, 0)
  end
  if o.help then io.stdout:write(opt_usage) return 0 end
  if o.list_passes then list_passes(io.stdout) return 0 end
  o.file = o.file or "-" -- as mlir-opt: the input is stdin unless a file is named
  if o.file == "-" then
    local hok, host = pcall(require, "tilua.host")
    if hok and host.isatty(0) then io.stderr:write "tilua opt: reading IR from stdin (end it with Ctrl-D)\n" end
  end
  local text, rerr = parser.read_input(o.file)
  if not text then io.stderr:write("tilua opt: ", rerr, "\n") return 1 end
  if o.check then
    local ok3, run = pcall(parse_opt_args, filecheck.run_options(text))
    if not ok3 or run.file then
      io.stderr:write(("tilua opt: %s: bad RUN line: %s\n"):format(o.file, run.file and "it names a file" or run.usage or run))
      return 1
    end
    for k, v in pairs(run) do
      if k == "passes" then table.move(v, 1, #v, #o.passes + 1, o.passes)
      elseif k ~= "print_after" and k ~= "print_before" and o[k] == nil then o[k] = v end
    end
  end
  for _, spec in ipairs(o.passes) do
    local names, err = core.pipeline_parse(spec)
    if not names then io.stderr:write("tilua opt: ", err, "\n") return 1 end
  end
  local file = o.file == "-" and "<stdin>" or o.file
  local out = io.stdout
  if o.output then
    local f, err = io.open(o.output, "w")
    if not f then io.stderr:write("tilua opt: cannot write ", err, "\n") return 1 end
    out = f
  end
  local status = 0
  local results, checked = {}, 0
  for ci, case in ipairs(split_cases(text, o.split)) do
    -- every case gets a fresh context, so one case's IR cannot leak into another's
    local ctx = core.context()
    local ok2, diags, m = run_case(case, o, file, ctx, io.stderr)
    if o.verify_diagnostics then
      local expect, bad = expectations(case, file)
      local problems = check_expectations(expect, diags, file)
      table.move(bad, 1, #bad, #problems + 1, problems)
      for _, p in ipairs(problems) do io.stderr:write(p, "\n") end
      if #problems > 0 then status = 1 end
    else -- the errors, or the warnings of a module that verifies
      for _, d in ipairs(diags) do
        io.stderr:write(M.format_diagnostic(d, case.text, file, case.first - 1), "\n")
      end
      if not ok2 then status = 1 end
    end
    if ok2 and m and o.check and not o.verify_diagnostics then
      local ok4, problems = pcall(function()
        local directives = filecheck.directives(case.text, case.first)
        checked = checked + #directives
        return filecheck.check(m:print { locations = o.locations }, directives, file)
      end)
      if not ok4 then problems = { ("%s:%d: %s"):format(file, problems.line or 0, problems.message or tostring(problems)) } end
      for _, p in ipairs(problems) do io.stderr:write(p, "\n") end
      if #problems > 0 then status = 1 end
    elseif ok2 and m and not o.verify_diagnostics then
      results[#results + 1] = m:print { locations = o.locations }
    end
    ctx:close()
    if ci > 1 and not o.split then break end
  end
  if o.check and not o.verify_diagnostics and checked == 0 then
    io.stderr:write(("tilua opt: %s: --check found no CHECK lines\n"):format(file))
    status = 1
  end
  if #results > 0 then out:write(table.concat(results, "// -----\n")) end
  if out ~= io.stdout then out:close() end
  return status
end

-- }=====================================================================

-- {=====================================================================
-- tilua sched
-- ======================================================================

local sched_usage
M.sched_usage = function() return sched_usage end
sched_usage = [[
usage: tilua sched [options]

Shows how a tile scheduler assigns output tiles (and StreamK K-splits) to
workers, using the same reference the compiler lowers (src/sched).

  --kind K             data_parallel | static_persistent | streamk (default streamk)
  --m M --n N --k K    problem size (elements); --l L batches (default 1)
  --tile MxNxK         tile shape (default 128x128x64)
  --tiles MxN[xK]      give tile counts directly instead of --m/--n/--k
  --workers W          resident workers (default 132: the SMs of an H100/H200)
  --cluster MxN        cluster shape in CTAs (default 1x1)
  --swizzle S          swizzle panel width (default 1)
  --order m|n          traversal: m fastest (column-major, default) or n fastest
  --decomp D           heuristic | data_parallel | split_k | streamk (default heuristic)
  --splits S           pieces per tile for split_k
  --reduction R        deterministic | nondeterministic (default deterministic)
  --min-k K            minimum k tiles per StreamK unit (default 8)
  --tiles-per-round T  static persistent: tiles per pipeline round
  --color / --no-color ANSI colours (default: when stdout is a terminal)
  --no-splits          omit the list of K splits
  --svg FILE           also write the picture as SVG
  -h, --help           show this help
]]

local function dims(s, n, what)
  local t = {}
  for v in (tostring(s) .. "x"):gmatch "([^x]*)x" do t[#t + 1] = math.tointeger(tonumber(v)) or false end
  if #t < n - 1 or #t > n then error({ usage = ("%s: expected %s"):format(what, n == 3 and "MxNxK" or "MxN") }) end
  for i = 1, #t do
    if not t[i] or t[i] <= 0 then error({ usage = what .. ": expected positive integers" }) end
  end
  return t
end

-- Parse `tilua sched` arguments into a sched_plan configuration and options.
function M.sched_config(args)
  local cfg, o = { kind = "streamk", workers = 132 }, { color = nil }
  local r = arg_reader(args)
  local function value() return r:value() end
  local function int() return r:int() end
  for a in r.next, r do
    if a == "-h" or a == "--help" then o.help = true
    elseif a == "--kind" then cfg.kind = value(a)
    elseif a == "--m" or a == "--n" or a == "--k" or a == "--l" then cfg[a:sub(3)] = int(a)
    elseif a == "--tile" then cfg.tile = dims(value(a), 3, a)
    elseif a == "--tiles" then
      local t = dims(value(a), 3, a)
      cfg.tiles_m, cfg.tiles_n, cfg.tiles_k = t[1], t[2], t[3] or 1
    elseif a == "--workers" then cfg.workers = int(a)
    elseif a == "--cluster" then
      local t = dims(value(a), 2, a)
      cfg.cluster_m, cfg.cluster_n = t[1], t[2] or 1
    elseif a == "--swizzle" then cfg.swizzle = int(a)
    elseif a == "--order" then
      local v = value(a)
      if v ~= "m" and v ~= "n" then error({ usage = "--order takes m or n" }) end
      cfg.column_major = v == "m"
    elseif a == "--decomp" then cfg.decomp = value(a)
    elseif a == "--splits" then cfg.splits = int(a)
    elseif a == "--reduction" then cfg.reduction = value(a)
    elseif a == "--min-k" then cfg.min_k = int(a)
    elseif a == "--tiles-per-round" then cfg.tiles_per_round = int(a)
    elseif a == "--color" then o.color = true
    elseif a == "--no-color" then o.color = false
    elseif a == "--no-splits" then o.splits = false
    elseif a == "--svg" then o.svg = value(a)
    else
      local flags = {}
      for f in sched_usage:gmatch "%-%-?[%w%-]+" do flags[f] = true end
      error({ usage = unknown_option(a, flags) })
    end
  end
  if cfg.m or cfg.n or cfg.k then
    if not (cfg.m and cfg.n and cfg.k) then error({ usage = "--m, --n and --k go together" }) end
  elseif not cfg.tiles_m then
    cfg.m, cfg.n, cfg.k = 4096, 4096, 4096
  end
  return cfg, o
end

-- Render a plan: the text picture, and the SVG file when asked. Returns the text.
function M.sched_render(cfg, o, stdout_is_tty)
  local plan = core.sched_plan(cfg)
  local color = o.color
  if color == nil then color = stdout_is_tty end
  if o.svg then
    local f, err = io.open(o.svg, "w")
    if not f then error({ usage = "cannot write " .. err }) end
    f:write(plan:svg())
    f:close()
  end
  return plan:render { color = color, splits = o.splits }, plan
end

function M.sched(args)
  local ok, res = pcall(function()
    local cfg, o = M.sched_config(args)
    if o.help then return sched_usage end
    local tty = false
    local hok, host = pcall(require, "tilua.host")
    if hok then tty = host.isatty(1) end
    local text = M.sched_render(cfg, o, tty)
    if o.svg then text = text .. ("svg written to %s\n"):format(o.svg) end
    return text
  end)
  if not ok then
    if type(res) == "table" and res.usage then
      io.stderr:write("tilua sched: ", res.usage, "\n")
      if res.usage:find "^unknown option" then io.stderr:write "('tilua sched --help' lists the options)\n" end
      return 1
    end
    io.stderr:write("tilua sched: ", tostring(res):gsub("^.-sched: ", ""), "\n")
    return 1
  end
  io.stdout:write(res)
  return 0
end

-- }=====================================================================

-- {=====================================================================
-- A script's compiles: --emit, --stage, --trace, --debug-hangs (src/main.c)
-- ======================================================================

-- The program's name as it was run (for messages it prints itself).
local function progname()
  local i = 0
  while arg and arg[i - 1] do i = i - 1 end
  return arg and arg[i] or "tilua"
end

-- The pipeline that takes module m to PTX: tile-to-ptx for a tile program.
local function ptx_pipeline(tl, m)
  local tile = false
  m:walk(function(op)
    tile = op:name():find("^tileas%.") ~= nil
    return not tile
  end)
  return tile and "tile-to-ptx" or tl.ptx_pipeline
end

-- The PTX of module m: emitted as it is when it is lowered, else from a copy
-- compiled to the end (after a script's tl.compile of a pipeline of its own,
-- as hello.lua's canonicalize,cse), quietly: no stage hook.
local function ptx_of(tl, m)
  local ok, ptx = pcall(tl.emit_ptx, m)
  if ok then return ptx end
  local copy = m:clone()
  local hook = tl.options.stage_hook
  tl.options.stage_hook = nil
  local ok2, err = pcall(tl.compile, copy, ptx_pipeline(tl, copy))
  tl.options.stage_hook = hook
  if not ok2 then error(err, 0) end
  return tl.emit_ptx(copy)
end

-- A stage's IR as `tilua opt` would print it: without the loc(...) that --trace keeps.
local function plain_ir(ir) return (ir:gsub(" loc%b()", "")) end

local function stage_names(stages)
  local names = {}
  for _, st in ipairs(stages) do names[#names + 1] = st.name end
  return table.concat(names, ", ")
end

-- The stage --stage names, or nil.
local function find_stage(stages, key)
  for i = #stages, 1, -1 do
    if stages[i].name == key or tostring(stages[i].index) == key then return stages[i] end
  end
end

-- The text --emit / --stage ask for from a compile's stages (ptx: k:compile's).
local function emitted(tl, o, stages, module, ptx)
  if o.stage then
    local st = find_stage(stages, o.stage)
    if not st then tl.raise(("--stage=%s: no such stage (stages: %s)"):format(o.stage, stage_names(stages))) end
    return plain_ir(st.ir)
  end
  if o.emit == "ptx" then return ptx or ptx_of(tl, module) end
  for i = #stages, 1, -1 do
    if stages[i].name ~= "emit-ptx" then return plain_ir(stages[i].ir) end
  end
end

-- A compile that failed under --stage: the stage asked for, when the compile
-- got that far (the IR as the failing pass left it, for the failing one), and
-- the error; exit 1 either way. Under --emit the error goes on as usual.
local function stage_of_failed(tl, o, stages, err, out)
  if not o.stage then return end
  local st = find_stage(stages, o.stage)
  if st then
    out:write(plain_ir(st.ir))
    out:flush()
  end
  io.stderr:write(progname(), ": ", err, "\n")
  if not st then
    io.stderr:write(("%s: --stage=%s: the compile failed before that stage (stages: %s)\n"):format(progname(), o.stage,
      stage_names(stages)))
  end
  io.stderr:flush()
  os.exit(1, true)
end

-- The host's options of a script's compiles and launches ({emit =, stage =,
-- trace =, debug_hangs =, check_protocol =, emulate =, timeline =} from its
-- command line): tl.options, and with
-- --emit or --stage a stage hook that prints what they ask for from the first
-- compile (on the program's stdout; the script's own output goes to stderr)
-- and ends the program (the host's to end: the library never exits).
function M.script_options(o)
  local tl = require "tilua"
  if o.emit and o.emit ~= "ir" and o.emit ~= "ptx" then error(("--emit=%s: expected ir or ptx"):format(o.emit), 0) end
  if o.debug_hangs then tl.options.debug_hangs = true end
  -- TILUA_CHECK_PROTOCOL=1: every compile checked after every pass; =passes:
  -- only a pass that breaks a protocol fails (the specs' default); unset: the
  -- check of the kernel as written that every compile runs; 0 (or
  -- --no-check-protocol): none; TILUA_SKIP_CHECK_PROTOCOL=1 turns the
  -- environment's setting off (docs/protocol.md)
  local env = os.getenv "TILUA_SKIP_CHECK_PROTOCOL" ~= "1" and os.getenv "TILUA_CHECK_PROTOCOL"
  if o.no_check_protocol or env == "0" then tl.options.check_protocol = false
  elseif o.check_protocol or env == "1" then tl.options.check_protocol = true
  elseif env == "passes" then tl.options.check_protocol = "passes" end
  -- --emulate (TILUA_EMULATE=1): launches on the CPU emulator; --timeline=FILE draws them
  if o.emulate or o.timeline or os.getenv "TILUA_EMULATE" == "1" then tl.options.emulate = true end
  if o.timeline then tl.options.timeline = o.timeline end
  if o.trace then M.trace_to(tl, o.trace) end
  if not o.emit and not o.stage then return end
  -- --stage and --emit=ir print the IR of a stage: have it kept
  tl.options.stage_hook_ir = o.stage ~= nil or o.emit == "ir"
  local out = require("tilua.host").take_stdout()
  local traced = tl.options.stage_hook
  tl.options.stage_hook = function(stages, module, ptx, err)
    if traced then traced(stages, module, ptx, err) end
    if err then return stage_of_failed(tl, o, stages, err, out) end
    out:write(emitted(tl, o, stages, module, ptx))
    out:flush()
    os.exit(0, true)
  end
  M.asked = o.stage and ("--stage=" .. o.stage) or ("--emit=" .. o.emit)
end

-- --trace=FILE: every compile's stages, kept with their ops' locations, and
-- the page rewritten after each compile, one that failed too (so it is there
-- whatever the script does next); written at once, so a script that compiles
-- nothing leaves a page that says so, never an empty file.
function M.trace_to(tl, path)
  local trace = require "tilua.host.trace"
  local compiles = {}
  local script = arg and arg[0] or "script"
  local function write()
    local out, err = io.open(path, "w")
    if not out then error(("--trace: cannot write %s"):format(err), 0) end
    out:write(trace.render(compiles, ("tilua trace of %s"):format(script)))
    out:close()
  end
  write()
  tl.options.stage_hook_ir = true
  tl.options.stage_locations = true
  tl.options.stage_hook = function(stages, module, _, err)
    local names = {}
    for _, op in ipairs(module and module:region(1):entry():ops() or {}) do
      local sym = op:attr "sym_name"
      if sym then names[#names + 1] = tostring(sym) end
    end
    compiles[#compiles + 1] = { label = #names > 0 and table.concat(names, ", ") or "module", stages = stages,
                                error = err }
    write()
  end
end

-- tilua export: every kernel the script compiles (k:compile, or its first
-- launch), recorded through tl.options.compiled_hook, then written by tl.export.
local exporting
function M.export_begin(o)
  local tl = require "tilua"
  exporting = { dir = o.dir, cubin = o.cubin, script = o.script, kernels = {}, seen = {} }
  tl.options.compiled_hook = function(k)
    if not exporting.seen[k] then
      exporting.seen[k] = true
      exporting.kernels[#exporting.kernels + 1] = k
    end
  end
end

function M.export_done()
  local tl = require "tilua"
  local e = exporting
  if #e.kernels == 0 then
    error(("tilua export: %s compiled no kernel (k:compile, or a kernel's first launch), so there is nothing to export"):format(e.script), 0)
  end
  local files = tl.export(e.dir, e.kernels, { script = e.script, cubin = e.cubin })
  for _, f in ipairs(files) do
    if not f:match "/tilua_[%w_]+%.[%w]+$" then io.stdout:write("tilua export: ", f, "\n") end
  end
  io.stdout:write(("tilua export: %d kernel%s and the runtime (tilua_export.c) in %s\n"):format(#e.kernels,
    #e.kernels == 1 and "" or "s", e.dir))
end

-- After the script: --emit / --stage asked for a compile that never came (the
-- hook ends the program when one does). A script that built kernels without
-- compiling them (one that prints its IR, say) gets them compiled now, the
-- current module through the pipeline to PTX, as k:compile would; a script
-- that built nothing is an error, not silence and exit 0.
function M.script_done()
  if not M.asked then return end
  local tl = require "tilua"
  local m = tl.module()
  if #m:region(1):entry():ops() > 0 then
    local copy = m:clone()
    tl.compile(copy, ptx_pipeline(tl, copy)) -- the hook prints and exits
  end
  error(("%s: the script built no kernel (nothing called tl.kernel, k:compile or tl.compile), so there is nothing to print"):format(M.asked), 0)
end

-- }=====================================================================

return M
