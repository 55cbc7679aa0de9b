-- tilua.host.cli: the subcommands of the tilua program.
--
--   tilua opt FILE.tir [options]   read textual IR, run passes, print the result
--   tilua sched [options]          show which worker computes which tile
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
usage: tilua opt FILE.tir [options]     (FILE '-' reads stdin)

Reads textual IR, verifies it, runs the passes and prints the result.
Exits 1 with the diagnostics (file:line:col, the line and a caret) on failure.

  -p, --pass LIST          passes or named pipelines to run, comma-separated;
                           options in braces: --pass 'canonicalize,cse'
  --print-ir-after-all     print the IR after every pass (to stderr)
  --print-ir-after LIST    print the IR after the named passes (to stderr)
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

local function parse_opt_args(args)
  local o = { passes = {}, print_after = {} }
  local r = arg_reader(args)
  local function val() return r:value() end
  for a in r.next, r do
    if a == "-h" or a == "--help" then o.help = true
    elseif a == "-p" or a == "--pass" or a == "--passes" then o.passes[#o.passes + 1] = val()
    elseif a == "--print-ir-after-all" then o.print_after_all = true
    elseif a == "--print-ir-after" then
      for n in val():gmatch "[^,]+" do o.print_after[n] = true end
    elseif a == "--timing" then o.timing = true
    elseif a == "--stats" then o.stats = true
    elseif a == "--no-verify" then o.no_verify = true
    elseif a == "--check-protocol" then o.check_protocol = true
    elseif a == "--locations" then o.locations = true
    elseif a == "--keep-locations" then o.keep_locations = true
    elseif a == "-o" then o.output = val()
    elseif a == "--split-input-file" then o.split = true
    elseif a == "--verify-diagnostics" then o.verify_diagnostics = true
    elseif a == "--check" then o.check = true
    elseif a == "--list-passes" then o.list_passes = true
    elseif a:sub(1, 1) == "-" and a ~= "-" then error({ usage = ("unknown option '%s'"):format(a) })
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
    local ok2, _, list2 = core.run_pipeline(m, spec, {
      verify = not o.no_verify,
      check_protocol = o.check_protocol,
      on_stage = function(st, op)
        stages[#stages + 1] = st
        if st.index > 0 and (o.print_after_all or o.print_after[st.pass]) then
          log:write(("// -----// IR Dump After %s (%.3f ms) //----- //\n"):format(st.pass, st.ms))
          log:write(op:print { locations = o.locations })
        end
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
      io.stderr:write("tilua opt: ", o.usage, "\n", opt_usage)
      return 1
    end
    error(o, 0)
  end
  if o.help then io.stdout:write(opt_usage) return 0 end
  if o.list_passes then list_passes(io.stdout) return 0 end
  if not o.file then io.stderr:write("tilua opt: no input file\n", opt_usage) return 1 end
  local text
  if o.file == "-" then text = io.read "a"
  else
    local f, err = io.open(o.file, "rb")
    if not f then io.stderr:write("tilua opt: cannot open ", err, "\n") return 1 end
    text = f:read "a"
    f:close()
  end
  if o.check then
    local ok3, run = pcall(parse_opt_args, filecheck.run_options(text))
    if not ok3 or run.file then
      io.stderr:write(("tilua opt: %s: bad RUN line: %s\n"):format(o.file, run.file and "it names a file" or run.usage or run))
      return 1
    end
    for k, v in pairs(run) do
      if k == "passes" then table.move(v, 1, #v, #o.passes + 1, o.passes)
      elseif k ~= "print_after" and o[k] == nil then o[k] = v end
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
    else error({ usage = ("unknown option '%s'"):format(a) }) end
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
      if res.usage:find "^unknown option" then io.stderr:write(sched_usage) end
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
-- A script's compiles: --emit, --stage, --debug-hangs (src/main.c)
-- ======================================================================

-- The text --emit / --stage ask for from a compile's stages (ptx: k:compile's).
local function emitted(tl, o, stages, module, ptx)
  if o.stage then
    for i = #stages, 1, -1 do
      if stages[i].name == o.stage or tostring(stages[i].index) == o.stage then return stages[i].ir end
    end
    local names = {}
    for _, st in ipairs(stages) do names[#names + 1] = st.name end
    tl.raise(("--stage=%s: no such stage (stages: %s)"):format(o.stage, table.concat(names, ", ")))
  end
  if o.emit == "ptx" then return ptx or tl.emit_ptx(module) end
  for i = #stages, 1, -1 do
    if stages[i].name ~= "emit-ptx" then return stages[i].ir end
  end
end

-- The host's options of a script's compiles ({emit =, stage =, debug_hangs =}
-- from its command line): tl.options.debug_hangs, and with --emit or --stage a
-- stage hook that prints what they ask for from the first compile and ends the
-- program (the host's to end: the library never exits).
function M.script_options(o)
  local tl = require "tilua"
  if o.emit and o.emit ~= "ir" and o.emit ~= "ptx" then error(("--emit=%s: expected ir or ptx"):format(o.emit), 0) end
  if o.debug_hangs then tl.options.debug_hangs = true end
  -- TILUA_CHECK_PROTOCOL=1: every compile checked; =passes: only a pass that
  -- breaks a protocol fails (the specs' default); 0 or unset: off;
  -- TILUA_SKIP_CHECK_PROTOCOL=1 turns the environment's check off (docs/protocol.md)
  local env = os.getenv "TILUA_SKIP_CHECK_PROTOCOL" ~= "1" and os.getenv "TILUA_CHECK_PROTOCOL"
  if o.check_protocol or env == "1" then tl.options.check_protocol = true
  elseif env == "passes" then tl.options.check_protocol = "passes" end
  if o.trace then M.trace_to(tl, o.trace) end
  if not o.emit and not o.stage then return end
  -- --stage and --emit=ir print the IR of a stage: have it kept
  tl.options.stage_hook_ir = o.stage ~= nil or o.emit == "ir"
  local traced = tl.options.stage_hook
  tl.options.stage_hook = function(stages, module, ptx)
    if traced then traced(stages, module, ptx) end
    io.stdout:write(emitted(tl, o, stages, module, ptx))
    io.stdout:flush()
    os.exit(0, true)
  end
  M.asked = o.stage and ("--stage=" .. o.stage) or ("--emit=" .. o.emit)
end

-- --trace=FILE: every compile's stages, kept, and the page rewritten after
-- each compile (so it is there whatever the script does next).
function M.trace_to(tl, path)
  local trace = require "tilua.host.trace"
  local f, err = io.open(path, "w")
  if not f then error(("--trace: cannot write %s"):format(err), 0) end
  f:close()
  local compiles = {}
  local script = arg and arg[0] or "script"
  tl.options.stage_hook_ir = true
  tl.options.stage_hook = function(stages, module)
    local names = {}
    for _, op in ipairs(module and module:region(1):entry():ops() or {}) do
      local sym = op:attr "sym_name"
      if sym then names[#names + 1] = tostring(sym) end
    end
    -- each compile makes its own stage list (a cache hit a copy): kept as it is
    compiles[#compiles + 1] = { label = #names > 0 and table.concat(names, ", ") or "module", stages = stages }
    local out = assert(io.open(path, "w"))
    out:write(trace.render(compiles, ("tilua trace of %s"):format(script)))
    out:close()
  end
end

-- After the script: --emit / --stage asked for a compile that never came (the
-- hook ends the program when one does). An error, not silence and exit 0.
function M.script_done()
  if M.asked then
    error(("%s: the script compiled no kernel (nothing called k:compile, k:launch or tl.compile), so there is nothing to print"):format(M.asked), 0)
  end
end

-- }=====================================================================

return M
