-- tools/fuzz/fuzz.lua: the fuzzer of tilua's textual IR and Lua surfaces.
--
--   tilua tools/fuzz/fuzz.lua [--surface opt|lua|all] [--seconds S] [--inputs N]
--                             [--seed X] [--save DIR] [--quiet]
--
-- opt: mutated IR fixtures (spec/fixtures/*) go through what `tilua opt` does:
--      parse, verify, print and parse again, a pipeline (cleanup, ptx or a random
--      list of passes) and PTX emission. A rejected input must be rejected with
--      `file:line:col: error:`; a verified module must print back to the same text.
-- lua: random scripts of the public Lua surface (kernels, the DSL, raw ops,
--      contexts closed under live handles, erased ops reused, wrong argument
--      types and ranges, self-referencing tables...). A script that fails must
--      fail at one of its own lines (`fuzz.lua:N:`), not inside the library.
--
-- A crash ends the process: the input that caused it is in DIR/current.<surface>
-- (written before each input runs). An input that runs past 10 s of CPU is a
-- hang. Problems (unlocated errors, round-trip differences, hangs) are counted,
-- the first few of each kind printed and saved under DIR. The C API has its own
-- fuzzer, tools/fuzz/capi_fuzz.c. Exits 1 when a problem was found.
local tl = require "tilua"
local parser = require "tilua.parser"
local core = tl.core

local opts = { surface = "all", seconds = 10, save = os.getenv "TMPDIR" or "/tmp" }
do
  local i = 1
  while arg and arg[i] do
    local a = arg[i]
    local function val()
      i = i + 1
      if arg[i] == nil then error(a .. " needs a value", 0) end
      return arg[i]
    end
    if a == "--surface" then opts.surface = val()
    elseif a == "--seconds" then opts.seconds = tonumber(val())
    elseif a == "--inputs" then opts.inputs = math.tointeger(tonumber(val()))
    elseif a == "--seed" then opts.seed = math.tointeger(tonumber(val()))
    elseif a == "--save" then opts.save = val()
    elseif a == "--quiet" then opts.quiet = true
    elseif a == "-h" or a == "--help" then
      local head = (io.open(arg[0]):read "a"):match "^(.-)\nlocal tl"
      io.write((head:gsub("%-%- ?", "")), "\n")
      return
    else error("unknown option " .. a, 0) end
    i = i + 1
  end
end
if not (opts.surface == "opt" or opts.surface == "lua" or opts.surface == "all") then
  error("--surface takes opt, lua or all", 0)
end
opts.seed = opts.seed or os.time()

local function files(dir, pat)
  local out = {}
  local p = io.popen(("ls %s 2>/dev/null"):format(dir))
  for f in p:lines() do if f:match(pat) then out[#out + 1] = dir .. "/" .. f end end
  p:close()
  return out
end

local function slurp(f)
  local h = assert(io.open(f, "rb"))
  local s = h:read "a"
  h:close()
  return s
end

local function save(name, text)
  local f = io.open(opts.save .. "/" .. name, "wb")
  if f then
    f:write(text)
    f:close()
  end
end

-- {=== problems
local stats = { inputs = 0, rejected = 0, accepted = 0, problems = 0 }
local kinds = {}
local function safe_tostring(v)
  local ok, s = pcall(tostring, v)
  return ok and type(s) == "string" and s or ("<a %s whose __tostring fails>"):format(type(v))
end

local function problem(kind, detail, input, ext)
  detail = safe_tostring(detail)
  stats.problems = stats.problems + 1
  kinds[kind] = (kinds[kind] or 0) + 1
  if kinds[kind] <= 3 then
    local name = ("fuzz-%s-%d.%s"):format(kind, kinds[kind], ext)
    save(name, input)
    io.stderr:write(("fuzz: %s (input saved as %s/%s):\n%s\n"):format(kind, opts.save, name, detail))
  end
end

-- An input running past its CPU budget raises from the count hook.
local HANG = setmetatable({}, { __tostring = function() return "hang" end })
local function with_budget(seconds, f, ...)
  local limit = os.clock() + seconds
  debug.sethook(function() if os.clock() > limit then error(HANG, 0) end end, "", 100000)
  -- the handler tilua's script runner uses: an error inside the library at the script's line
  local r = table.pack(xpcall(f, core.locate_error, ...))
  debug.sethook()
  return table.unpack(r, 1, r.n)
end
-- }===

-- {=== opt: mutated IR
local corpus = {}
for _, d in ipairs { "spec/fixtures/valid", "spec/fixtures/invalid", "spec/fixtures/passes", "spec/fixtures/alloc",
                     "spec/fixtures/bad-input" } do
  for _, f in ipairs(files(d, "%.tir$")) do
    for case in (slurp(f) .. "\n// -----\n"):gmatch "(.-)\n// %-%-%-%-%-\n" do
      if case:match "%S" then corpus[#corpus + 1] = case end
    end
  end
end

local tokens = { "{", "}", "(", ")", "[", "]", "<", ">", ",", ":", "=", "%0", "%1", "%x", "^bb0", "^bb1:", "^bb0(%a: i32):",
  "module", "arith.addi", "arith.constant", "scf.for", "scf.if", "scf.yield", "tile.kernel", "tile.thread_id", "i32",
  "i0", "i65", "f16", "bf16", "index", "none", "!cutlass.seq_bar<2>", "!cutlass.pipeline<4, 1, 1>", "ptr<f32, global>",
  "ptr<f32, shared>", "memref<4x?xi8, shared, swizzle128>", "vector<4xf32>", "tile<64x8xf32, rmem>", "\"", "\\",
  "0x7F", "0xFFFFFFFFFFFFFFFF", "0x1FFFFFFFFFFFFFFFF", "-", "1.5e", "1e999", "-0.0", "loc(", "loc(\"a.lua\":3)",
  "//", "\n", "@", "@k", "true", "false", "99999999999999999999999", "9223372036854775807", "-9223372036854775808",
  "2147483648", "4294967296", "\0", "\255", "{block = [4294967296, 4294967296, 1]}", "kernel_spec", "smem = 232449",
  "numStages = 65536", "arrive_count = [-1]", "[[[[[[[[", "]]]]]]]]", "{a = {b = {c = ", "}}}" }

local function mutate(rng, text)
  local kind = rng(7)
  local n = #text
  local pos = rng(n + 1)
  if kind == 1 then return text:sub(1, pos - 1) end -- truncate
  if kind == 2 then return text:sub(1, pos - 1) .. tokens[rng(#tokens)] .. text:sub(pos) end
  if kind == 3 then return text:sub(1, pos - 1) .. text:sub(pos + rng(20)) end
  if kind == 4 then -- splice a piece of another input
    local o = corpus[rng(#corpus)]
    local a = rng(#o + 1)
    return text:sub(1, pos - 1) .. o:sub(a, a + rng(200)) .. text:sub(pos)
  end
  if kind == 5 then -- a number replaced by a boundary value
    local b = ({ "0", "-1", "1", "255", "256", "65536", "2147483647", "2147483648", "4294967296",
      "9223372036854775807", "-9223372036854775808", "18446744073709551616", "0x0", "0x7FFFFFFF", "1.0e308" })[rng(15)]
    local s, e = text:find("%-?%d+", pos)
    if s then return text:sub(1, s - 1) .. b .. text:sub(e + 1) end
    return text
  end
  if kind == 6 then -- a line duplicated
    local s = text:find("\n", pos, true)
    if not s then return text end
    local e = text:find("\n", s + 1, true) or #text
    return text:sub(1, e) .. text:sub(s + 1, e) .. text:sub(e + 1)
  end
  local b = {}
  for i = 1, rng(40) do b[i] = string.char(rng(256) - 1) end
  return text:sub(1, pos - 1) .. table.concat(b) .. text:sub(pos)
end

-- A pass implemented in Lua (verify-protocol: the emulator, whose time is the
-- kernel's) runs small and bounded, so that one input cannot eat the minute.
local pass_names = {}
for _, p in ipairs(core.passes and core.passes() or {}) do
  local name = type(p) == "table" and p.name or p
  if type(p) == "table" and p.lua then name = name .. "{max_states=20,n=8,max_ops=100000}" end
  pass_names[#pass_names + 1] = name
end

local function opt_input(rng)
  local text = corpus[rng(#corpus)]
  for _ = 1, rng(4) do text = mutate(rng, text) end
  return text
end

local function located_ir(msg) return type(msg) == "string" and msg:match "^fuzz%.tir:%d+:%d+: error: " end

local function run_opt(text, rng)
  local ctx = core.context()
  local m, msg = parser.parse(text, { file = "fuzz.tir", ctx = ctx })
  if not m then
    stats.rejected = stats.rejected + 1
    if not located_ir(msg) then problem("opt-unlocated", safe_tostring(msg), text, "tir") end
    ctx:close()
    return
  end
  local ok, vmsg = m:verify()
  if not ok then
    stats.rejected = stats.rejected + 1
    if type(vmsg) ~= "string" or not vmsg:match "^fuzz%.tir:%d+:%d+: " then
      problem("verify-unlocated", safe_tostring(vmsg), text, "tir")
    end
    ctx:close()
    return
  end
  stats.accepted = stats.accepted + 1
  local once = m:print()
  local m2, msg2 = parser.parse(once, { file = "printed.tir", ctx = ctx })
  if not m2 then
    problem("roundtrip-parse", msg2, text, "tir")
  elseif m2:print() ~= once then
    problem("roundtrip-print", "printed text differs after a second parse", text, "tir")
  end
  local pipeline
  local r = rng(3)
  if r == 1 then pipeline = "cleanup"
  elseif r == 2 or #pass_names == 0 then pipeline = "ptx"
  else
    local l = {}
    for i = 1, rng(4) do l[i] = pass_names[rng(#pass_names)] end
    pipeline = table.concat(l, ",")
  end
  local lok, lmsg = core.run_pipeline(m, pipeline)
  if lok then
    local ptx, emsg = core.emit_ptx(m)
    if ptx == nil and type(emsg) ~= "string" then problem("emit", tostring(emsg), text, "tir") end
  elseif type(lmsg) ~= "string" then
    problem("pipeline", tostring(lmsg), text, "tir")
  end
  ctx:close()
end
-- }===

-- {=== lua: random scripts
local function lua_program(rng)
  local L = {}
  local function add(s) L[#L + 1] = s end
  local function pick(t) return t[rng(#t)] end
  local types = { "tl.i1", "tl.i8", "tl.i32", "tl.i64", "tl.f16", "tl.bf16", "tl.f32", "tl.f64", "tl.index",
    "tl.ptr(tl.f32)", "tl.ptr(tl.i32, 'shared')", "tl.vector(tl.f32, 4)", "tl.none" }
  local nums = { "0", "1", "-1", "3", "32", "128", "1024", "1025", "2^31", "2^32", "math.maxinteger", "math.mininteger",
    "1.5", "0/0", "math.huge", "-0.0", "1e300" }
  local strs = { '""', '"x"', '"global"', '"shared"', '"oops"', '"arith.addi"', '"tile.kernel"', '",,,"', '"\\0"',
    '("x"):rep(5000)', '"cse{bogus=1}"', '"ptx"', '"cleanup"' }
  local function num() return pick(nums) end
  local function ty() return pick(types) end
  local function val()
    local r = rng(10)
    if r <= 5 then return ("v[%d]"):format(rng(8)) end
    if r == 6 then return pick { "p.a", "p.n", "p.x", "p.s" } end
    if r == 7 then return ("tl.const(%s, %s)"):format(num(), ty()) end
    if r == 8 then return "tl.thread_id()" end
    if r == 9 then return num() end
    return pick { "nil", "true", "{}", "cyc", "k", "o", "c1", '"s"', ty() }
  end
  local function any()
    local r = rng(6)
    if r == 1 then return num() end
    if r == 2 then return pick(strs) end
    if r == 3 then return ty() end
    if r == 4 then return val() end
    if r == 5 then return pick { "{}", "{1, 2}", "{ {1}, { {2} } }", "cyc", "deep", "{block = 32}", "{x = cyc}" } end
    return pick { "nil", "true", "false", "k", "k.op", "o", "c1", "tl", "function() end" }
  end
  local binops = { "+", "-", "*", "/", "%", "&", "|", "~", "<<", ">>" }
  local preds = { "lt", "le", "gt", "ge", "eq", "ne", "ult", "uge" }
  local tlfuncs = {}
  for kname, v in pairs(tl) do if type(v) == "function" then tlfuncs[#tlfuncs + 1] = kname end end
  table.sort(tlfuncs)
  local opmethods = { "erase", "clone", "unlink", "verify", "print", "walk", "results", "operands", "region", "result",
    "operand", "set_attr", "attr", "set_operand", "move_before", "insert", "take_regions", "set_loc", "parent", "next" }
  local vmethods = { "cast", "load", "store", "at", "as", "index", "replace_all_uses", "select", "bitcast", "def", "users" }

  local function body_stmt(depth)
    local r = rng(16)
    if r <= 3 then return ("v[%d] = %s %s %s"):format(rng(8), val(), pick(binops), val()) end
    if r == 4 then return ("v[%d] = (%s):%s(%s)"):format(rng(8), val(), pick(preds), val()) end
    if r == 5 then return ("v[%d] = tl.cast(%s, %s)"):format(rng(8), val(), ty()) end
    if r == 6 then return ("v[%d] = tl.load(%s)"):format(rng(8), val()) end
    if r == 7 then return ("tl.store(%s, %s)"):format(val(), val()) end
    if r == 8 and depth < 3 then
      return ("tl.if_(%s, function() %s end)"):format(val(), body_stmt(depth + 1))
    end
    if r == 9 and depth < 3 then
      return ("tl.for_range(%s, %s, function(i) v[%d] = i %s end)"):format(val(), val(), rng(8), body_stmt(depth + 1))
    end
    if r == 10 then
      return ("o = tl.op(%s, {%s}, {%s}, %s, %s)"):format(pick { '"arith.addi"', '"arith.constant"', '"scf.if"',
        '"tile.barrier"', '"nvvm.inline_ptx"', '"bogus.op"', '"arith.muli"' }, val(), ty(),
        pick { "nil", "{value = 1}", "{value = cyc}", "{value = deep}", "{predicate = 'slt'}", "{}" }, pick { "0", "1", "2", "-1" })
    end
    if r == 11 then return ("v[%d] = k:shared(%s, %s)"):format(rng(8), ty(), num()) end
    if r == 12 then return ("v[%d] = (%s):%s(%s)"):format(rng(8), val(), pick(vmethods), any()) end
    if r == 13 then return ("o:%s(%s)"):format(pick(opmethods), any()) end
    if r == 14 then return "tl.barrier()" end
    return ("v[%d] = tl.%s(%s, %s, %s)"):format(rng(8), pick(tlfuncs), any(), any(), any())
  end

  local function outer_stmt()
    local r = rng(14)
    if r == 1 then return ("k:compile(%s)"):format(pick { '"cleanup"', '"ptx"', '"bogus"', "nil", "42" }) end
    if r == 2 then return "o = k.op:clone()" end
    if r == 3 then return ("(%s):insert(%s)"):format(pick { "o", "k.op" }, pick { "c1:module():region(1):entry()", "k.body", "nil", "o" }) end
    if r == 4 then return ("k.op:move_before(%s)"):format(pick { "o", "k.op", "k.body:ops()[1]", "nil" }) end
    if r == 5 then return ("(%s):erase()"):format(pick { "o", "k.op", "k.body:ops()[1]" }) end
    if r == 6 then return pick { "c1:close()", "tl.core.default_context():close()", "tl.new_module()" } end
    if r == 7 then return ("tl.parse(%s)"):format(pick(strs)) end
    if r == 8 then return ("tl.kernel(%s, %s)"):format(any(), any()) end
    if r == 9 then return "k:define(function(k, p) tl.barrier() end)" end
    if r == 10 then return ("o:%s(%s, %s)"):format(pick(opmethods), any(), any()) end
    if r == 11 then return ("tl.%s(%s, %s)"):format(pick(tlfuncs), any(), any()) end
    if r == 12 then return "print_ = tl.module():print()" end
    if r == 13 then return ("tl.compile(k, %s)"):format(pick { '"cleanup"', '"ptx"', '"cse{bogus=1}"', '",,,"' }) end
    return ("v[%d] = %s"):format(rng(8), any())
  end

  add "local tl = require 'tilua'"
  add "local cyc = {} cyc.self = cyc"
  add "local deep = {} do local c = deep for i = 1, 5000 do c[1] = {} c = c[1] end end"
  add "local c1 = tl.core.context()"
  add "local v, o = {}, nil"
  local params = { "{ 'a', tl.ptr(tl.f32) }", "{ 'n', tl.i32 }", "{ 'x', tl.f32 }", "{ 's', tl.index }" }
  local ps = {}
  for i = 1, rng(4) do ps[i] = params[rng(#params)] end
  local block = pick { "128", "32", "{32, 4, 1}", "0", "2^32", "{2^32, 2^32, 1}", "1025", '"oops"', "{}" }
  local extra = pick { "", ", smem = 1024", ", smem = cyc", ", cluster = {2, 1, 1}", ", smem = -1", ", bogus = 1" }
  add(("local k = tl.kernel(%s, { params = { %s }, block = %s%s })"):format(pick { '"k"', '"k"', '"k"', '""', "1", "nil" },
    table.concat(ps, ", "), block, extra))
  add "k:define(function(k, p)"
  add "  v[1], v[2] = p.a, p.n"
  for _ = 1, rng(12) do add("  " .. body_stmt(0)) end
  add "end)"
  for _ = 1, rng(6) do add(outer_stmt()) end
  return table.concat(L, "\n") .. "\n"
end

local function run_lua(src)
  tl.new_module()
  local chunk, err = load(src, "=fuzz.lua", "t")
  if not chunk then
    problem("lua-syntax", err, src, "lua") -- the generator's fault
    return
  end
  local ok, msg = with_budget(10, chunk)
  if msg == HANG then
    problem("hang", "ran past 10 s", src, "lua")
  elseif ok or (type(msg) == "table" and math.type(rawget(msg, "exit_code")) == "integer") then -- tl.stop is an end, not an error
    stats.accepted = stats.accepted + 1
  else
    stats.rejected = stats.rejected + 1
    local line = type(msg) == "string" and tonumber(msg:match "^fuzz%.lua:(%d+):")
    if not line then problem("lua-unlocated", safe_tostring(msg), src, "lua") end
  end
  -- a fresh default context for the next script, whatever this one closed
  pcall(function() tl.core.default_context():close() end)
  tl.new_module()
end
-- }===

local surfaces = opts.surface == "all" and { "opt", "lua" } or { opts.surface }
local t0 = os.clock()
local budget = opts.seconds or 10
local per = {}
for i, s in ipairs(surfaces) do per[s] = { inputs = 0, seed = opts.seed + i } end
local which = 0
while true do
  if opts.inputs and stats.inputs >= opts.inputs then break end
  if not opts.inputs and os.clock() - t0 >= budget then break end
  which = which % #surfaces + 1
  local s = surfaces[which]
  local st = per[s]
  math.randomseed(st.seed, st.inputs)
  local rng = math.random
  st.inputs = st.inputs + 1
  stats.inputs = stats.inputs + 1
  if s == "opt" then
    local text = opt_input(rng)
    save("current.tir", text)
    local ok, err = with_budget(10, run_opt, text, rng)
    if err == HANG then problem("hang", "ran past 10 s", text, "tir")
    elseif not ok then problem("opt-raised", safe_tostring(err), text, "tir") end
  else
    local src = lua_program(rng)
    save("current.lua", src)
    run_lua(src)
  end
end
local secs = os.clock() - t0
local parts = {}
for s, st in pairs(per) do parts[#parts + 1] = ("%s %d (seed %d)"):format(s, st.inputs, st.seed) end
table.sort(parts)
local kl = {}
for k, n in pairs(kinds) do kl[#kl + 1] = ("%s %d"):format(k, n) end
table.sort(kl)
if not opts.quiet or stats.problems > 0 then
  print(("fuzz: %d inputs in %.0f s: %s; %d rejected with a location, %d accepted; %d problems%s"):format(
    stats.inputs, secs, table.concat(parts, ", "), stats.rejected, stats.accepted, stats.problems,
    #kl > 0 and (" (" .. table.concat(kl, ", ") .. ")") or ""))
end
os.exit(stats.problems == 0 and 0 or 1, true)
