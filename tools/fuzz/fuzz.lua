-- tools/fuzz/fuzz.lua: the fuzzer of tilua's textual IR, Lua and lowering surfaces.
--
--   tilua tools/fuzz/fuzz.lua [--surface opt|lua|lower|all] [--seconds S | --inputs N]
--                             [--seed X] [--skip K] [--save DIR] [--quiet]
--   tilua tools/fuzz/fuzz.lua --replay DIR     (every *.tir and *.lua of DIR, in name order)
--
-- opt: mutated IR fixtures (spec/fixtures/*) go through what `tilua opt` does:
--      parse, verify, print and parse again, a pipeline (cleanup, ptx or a random
--      list of passes) and PTX emission. A rejected input must be rejected with
--      `file:line:col: error:`; a verified module must print back to the same text.
-- lua: random scripts of the public Lua surface (kernels, the DSL, raw ops,
--      contexts closed under live handles, erased ops reused, wrong argument
--      types and ranges, self-referencing tables...). A script that fails must
--      fail at one of its own lines (`fuzz.lua:N:`), not inside the library.
-- lower: valid kernels (the authoring-level kernels of the examples in
--      tools/fuzz/corpus/kernels, the valid and pass fixtures) with their numbers
--      (constants, attributes, shapes, block sizes) replaced by boundary values
--      (0, -1, 2^31, 2^32, INT64_MAX, INT64_MIN, ...); every one that verifies
--      goes through every named pipeline (cleanup, ptx, tile-to-ptx) and the PTX
--      emitter. A pipeline must end in PTX or in located errors: in the
--      sanitizer build an overflow in a fold, an address, a size or an index
--      computation ends the run with its report.
--
-- Input i of a surface is drawn from the seed and i alone (math.randomseed(seed, i)),
-- so `--seed X --skip i --inputs 1` replays it; the seed is printed first. A crash
-- ends the process: the input that caused it is in DIR/current.<ext> (written
-- before each input runs). An input that runs past 10 s of CPU is a hang.
-- Problems (unlocated errors, round-trip differences, hangs) are counted, the
-- first few of each kind printed and saved under DIR. Every finding becomes a
-- file of tools/fuzz/corpus, which ctest replays (--replay) with a fixed list of
-- seeds (spec/tests.cmake); tools/fuzz/campaign.sh runs a surface for as long as
-- wanted and restarts after a crash. The C API has its own fuzzer,
-- tools/fuzz/capi_fuzz.c. Exits 1 when a problem was found.
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
    elseif a == "--skip" then opts.skip = math.tointeger(tonumber(val()))
    elseif a == "--replay" then opts.replay = val()
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
if not ({ opt = true, lua = true, lower = true, all = true })[opts.surface] then
  error("--surface takes opt, lua, lower or all", 0)
end
opts.seed = opts.seed or os.time()
opts.skip = opts.skip or 0
if not opts.quiet and not opts.replay then
  io.stderr:write(("fuzz: seed %d, surface %s, from input %d\n"):format(opts.seed, opts.surface, opts.skip))
end

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
-- the messages of a pipeline or the emitter: the first at its op (a file:line), no
-- severity (a tile program's lowering builds its ops at the line that compiled it)
local function located_any(msg) return type(msg) == "string" and msg:match "^[^:\n]+:%d+:" end

-- A pipeline for an opt input: cleanup, ptx, or a random list of passes.
local function pick_pipeline(rng)
  local r = rng(3)
  if r == 1 then return "cleanup" end
  if r == 2 or #pass_names == 0 then return "ptx" end
  local l = {}
  for i = 1, rng(4) do l[i] = pass_names[rng(#pass_names)] end
  return table.concat(l, ",")
end

-- Parse and verify text in ctx: the module, or nil when it was rejected (a
-- rejection must be located, or it is a problem).
local function parse_verified(text, ctx)
  local m, msg = parser.parse(text, { file = "fuzz.tir", ctx = ctx })
  if not m then
    stats.rejected = stats.rejected + 1
    if not located_ir(msg) then problem("opt-unlocated", safe_tostring(msg), text, "tir") end
    return nil
  end
  local ok, vmsg = m:verify()
  if not ok then
    stats.rejected = stats.rejected + 1
    if type(vmsg) ~= "string" or not vmsg:match "^fuzz%.tir:%d+:%d+: " then
      problem("verify-unlocated", safe_tostring(vmsg), text, "tir")
    end
    return nil
  end
  return m
end

-- A verified module through a pipeline and the emitter: PTX, or diagnostics
-- (located ones when `located`: the lowering surface's rule).
local function lower(m, pipeline, text, located)
  local lok, lmsg = core.run_pipeline(m, pipeline)
  if lok then
    local ptx, emsg = core.emit_ptx(m)
    if ptx == nil and type(emsg) ~= "string" then problem("emit", safe_tostring(emsg), text, "tir") end
    if ptx == nil and located and not located_any(emsg) then problem("emit-unlocated", emsg, text, "tir") end
  elseif type(lmsg) ~= "string" then
    problem("pipeline", safe_tostring(lmsg), text, "tir")
  elseif located and not located_any(lmsg) then
    problem("pipeline-unlocated", pipeline .. ": " .. lmsg, text, "tir")
  end
  return lok
end

local function run_opt(text, pipelines)
  local ctx = core.context()
  local m = parse_verified(text, ctx)
  if not m then
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
  for i, p in ipairs(pipelines) do
    lower(i == 1 and m or assert(parser.parse(text, { file = "fuzz.tir", ctx = ctx })), p, text, false)
  end
  ctx:close()
end
-- }===

-- {=== lower: valid kernels with boundary numbers, through every named pipeline
local named_pipelines = {}
for _, p in ipairs(core.pipelines()) do named_pipelines[#named_pipelines + 1] = p.name end

-- The kernels: the cases that parse and verify as they are.
local kernels = {}
local function add_kernels(dir)
  for _, f in ipairs(files(dir, "%.tir$")) do
    for case in (slurp(f) .. "\n// -----\n"):gmatch "(.-)\n// %-%-%-%-%-\n" do
      local ctx = core.context()
      local m = case:match "%S" and parser.parse(case, { file = "fuzz.tir", ctx = ctx })
      if m and m:verify() then kernels[#kernels + 1] = case end
      ctx:close()
    end
  end
end

-- Where the numbers of a text are: integer literals that are not part of a
-- name (%12, ^bb0, i32, sm_90a), and the extents of shapes (2x1024xi8).
local function number_spans(text)
  local spans = {}
  for s, e in text:gmatch "()%-?%d+()" do
    local before, after = text:sub(s - 1, s - 1), text:sub(e, e)
    if not before:match "[%w_%%^#%.]" and not after:match "[%a_%.]" or after == "x" then
      spans[#spans + 1] = { s, e - 1 }
    end
  end
  return spans
end

local BOUNDARY = { "0", "1", "-1", "2", "3", "7", "8", "15", "16", "31", "32", "33", "63", "64", "65", "127", "128",
  "255", "256", "1023", "1024", "1025", "4095", "4096", "65535", "65536", "1048575", "1048576", "232448", "232449",
  "2147483647", "2147483648", "-2147483648", "-2147483649", "4294967295", "4294967296", "9007199254740993",
  "4611686018427387904", "9223372036854775807", "-9223372036854775808", "-9223372036854775807", "-4611686018427387905" }

local function boundary(rng)
  if rng(8) == 1 then -- a power of two, or one off it
    local v = 1 << (rng(63) - 1)
    return tostring(v + rng(3) - 2)
  end
  return BOUNDARY[rng(#BOUNDARY)]
end

local function lower_input(rng)
  local text = kernels[rng(#kernels)]
  local spans = number_spans(text)
  if #spans == 0 then return text end
  local pick = {}
  for _ = 1, rng(3) do pick[rng(#spans)] = true end
  local out, at = {}, 1
  for i, sp in ipairs(spans) do
    if pick[i] then
      out[#out + 1] = text:sub(at, sp[1] - 1)
      local b = boundary(rng)
      -- a shape extent stays positive: the parser has no negative extents
      if text:sub(sp[2] + 1, sp[2] + 1) == "x" then b = b:gsub("^%-", "") end
      out[#out + 1] = b
      at = sp[2] + 1
    end
  end
  out[#out + 1] = text:sub(at)
  return table.concat(out)
end

local function run_lower(text)
  local ctx = core.context()
  local m = parse_verified(text, ctx)
  if m then
    stats.accepted = stats.accepted + 1
    for i, p in ipairs(named_pipelines) do
      lower(i == 1 and m or assert(parser.parse(text, { file = "fuzz.tir", ctx = ctx })), p, text, true)
    end
  end
  ctx:close()
end
-- }===
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

-- One input of surface s, drawn from (seed, index) alone.
local function run_input(s, seed, index)
  math.randomseed(seed, index)
  local rng = math.random
  save("current.index", ("%s %d %d\n"):format(s, seed, index))
  stats.inputs = stats.inputs + 1
  if s == "opt" then
    local text = opt_input(rng)
    save("current.tir", text)
    local ok, err = with_budget(10, run_opt, text, { pick_pipeline(rng) })
    if err == HANG then problem("hang", "ran past 10 s", text, "tir")
    elseif not ok then problem("opt-raised", safe_tostring(err), text, "tir") end
  elseif s == "lower" then
    local text = lower_input(rng)
    save("current.tir", text)
    local ok, err = with_budget(10, run_lower, text)
    if err == HANG then problem("hang", "ran past 10 s", text, "tir")
    elseif not ok then problem("lower-raised", safe_tostring(err), text, "tir") end
  else
    local src = lua_program(rng)
    save("current.lua", src)
    run_lua(src)
  end
end

local t0 = os.clock()
local parts = {}
if opts.replay then
  -- every file of the corpus: IR through the opt surface's checks with every
  -- named pipeline and the lowering surface's, scripts through the lua surface's
  add_kernels "tools/fuzz/corpus/kernels"
  local inputs = files(opts.replay, "%.tir$")
  for _, f in ipairs(files(opts.replay, "%.lua$")) do inputs[#inputs + 1] = f end
  for _, f in ipairs(inputs) do
    local text = slurp(f)
    stats.inputs = stats.inputs + 1
    if f:match "%.tir$" then
      local ok, err = with_budget(10, run_opt, text, named_pipelines)
      if ok then ok, err = with_budget(10, run_lower, text) end
      if err == HANG then problem("hang", f .. " ran past 10 s", text, "tir")
      elseif not ok then problem("replay-raised", f .. ": " .. safe_tostring(err), text, "tir") end
    else
      run_lua(text)
    end
  end
  parts[1] = ("replay of %s"):format(opts.replay)
else
  local surfaces = opts.surface == "all" and { "opt", "lua", "lower" } or { opts.surface }
  local per = {}
  for i, s in ipairs(surfaces) do
    per[s] = { inputs = 0, seed = opts.seed + ({ opt = 1, lua = 2, lower = 3 })[s] }
    if s == "lower" then
      for _, d in ipairs { "tools/fuzz/corpus/kernels", "spec/fixtures/valid", "spec/fixtures/passes", "spec/fixtures/alloc" } do
        add_kernels(d)
      end
      assert(#kernels > 0, "no valid kernels to start from")
    end
  end
  local budget = opts.seconds or 10
  local which, n = 0, 0
  while true do
    if opts.inputs and n >= opts.inputs then break end
    if not opts.inputs and os.clock() - t0 >= budget then break end
    which = which % #surfaces + 1
    local s = surfaces[which]
    local st = per[s]
    run_input(s, st.seed, opts.skip + st.inputs)
    st.inputs, n = st.inputs + 1, n + 1
  end
  for s, st in pairs(per) do
    parts[#parts + 1] = ("%s %d (seed %d, inputs %d..%d)"):format(s, st.inputs, st.seed, opts.skip, opts.skip + st.inputs - 1)
  end
end
local secs = os.clock() - t0
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
