-- tilua.gpu.compile: compiling kernels to PTX (k:compile, tl.emit_ptx), assembling
-- it with ptxas (tl.ptxas, tl.check_ptx), and the host's say over compiles:
--
--   tl.options.stage_hook   fn(stages, module, ptx, err) after every tl.compile
--                           and k:compile (ptx nil for tl.compile), also one
--                           that fails (err: its message; the last stage is
--                           marked `failed`); the host's (`tilua --emit/--stage`
--                           prints and exits there, --trace writes its page)
--   tl.options.stage_hook_ir  the hook reads the stages' IR: keep it
--   tl.options.stage_locations  ... with each op's loc(...) (--trace links them)
--   tl.options.debug_hangs  true or milliseconds (1 to 86400000): k:compile adds debug-hangs
--   tl.options.compile_cache  false: k:compile always compiles; a number: the
--                           compiles kept per context (default 64; see below)
--   tl.options.keep_stages  keep every stage's IR (the REPL, --stage)
--   tl.options.check_protocol  nil (the default): k:compile checks the kernel's
--                           barrier protocols as written, within
--                           tl.options.check_protocol_work emulator ops a
--                           kernel (3000000: the same verdict on every machine)
--                           and, when set, check_protocol_budget seconds, and
--                           refuses a violation; false: no check;
--                           true: that and the check after every pass
--                           (tl.compile's); "passes": the latter only
--   tl.options.row_ring     nil (the default): a program without a dot that loads
--                           and stores a row gets convert-tileas-to-cutlass's row loop
--                           (rowring.lua: the next row in registers; one row
--                           reduced and at most one other tile loaded: the
--                           shared ring, rows claimed); false: never
--                           (one CTA a program);
--                           a table {per_sm, in_flight, hoist}: the ring with
--                           those (hoist = 0: W and B loaded once a row, 1:
--                           once a CTA whatever their registers, 2: those
--                           that fit an eighth of the registers together, the
--                           budget before s11norm (LayerNorm's B a row at
--                           8192); nil: rowring.lua's budget; benchmarks
--                           compare them; registers = d: each thread loads its
--                           part of the row d programs ahead into registers while
--                           it works on this one (1), 0: the shared ring
--                           (with claims = 1: its rows claimed, a refill a claim);
--                           async = S: a ring of S rows that each thread fills
--                           with its own chunks by cp.async; claims = K (1, 2,
--                           4): the register loop (registers = 1; registers
--                           = 2 with K = 1 only) takes its rows by runtime
--                           claims on a counter, K rows a claim, not by
--                           stride; stream = 1 | 2: the register loop's loads
--                           of the rows ahead with ld.global.L1::no_allocate |
--                           ld.global.cs; store = 1 | 2: its stores with
--                           st.global.cs | st.global.cg; whole = 1: the
--                           register loop's row loads and stores one branch a
--                           row, every vector where all are inside and
--                           aligned, not a branch a vector); refill = 0 | 1:
--                           the shared ring refills a stage behind a barrier
--                           of its own right after its reads | at the body's
--                           first reduce's barrier (nil: 1 where the body has
--                           two reduces and loads only its row, rowring.lua's
--                           rule: softmax)
--   tl.options.tile_transpose  nil (the default): a program that loads, transposes
--                           and stores an n x n tile of 8-, 16- or 32-bit elements
--                           (n a multiple of 128, 64, 32) goes by TMA (convert-tileas-
--                           to-cutlass's transpose.lua); false: through the threads'
--                           registers; a table {stages, outs, per_sm, order, group,
--                           early, claims, form}: TMA with those (form: "tma",
--                           "pairs" or "registers" over the rule's choice by the
--                           element's size)
--   tl.options.slicing      nil (the default): tileas-decide-slicing's rule gives
--                           the loops it picks their sliceCount (docs/passes.md);
--                           false: no loop is sliced; N (1..16): every loop the
--                           rule picks gets N slices, whatever its registers
--                           (tile-to-ptx runs tileas-decide-slicing{count=N})
--   tl.options.blocked_unit  nil (the default): tileas-assign-layouts' rule gives
--                           each blocked tile its unit, the bytes a thread holds
--                           contiguous (one vector access): 16, 8 for one row of
--                           >= 64 bytes a thread moved unchanged (a row copy)
--                           in a program without a dot (docs/tileprog.md); 4, 8
--                           or 16: every blocked tile that (tile-to-ptx runs
--                           tileas-assign-layouts{unit=N})
--   tl.options.sums_by_dot  nil (the default): convert-tileas-to-cutlass computes a
--                           loop's row sums by its late dot where sums.lua's rule
--                           holds (attention's l by the PV GEMM, a box of ones
--                           beside V); false: never (the sums by FADD)
--   tl.options.wait_fence   nil (the default): nothing; true: convert-tileas-to-cutlass
--                           puts a CTA fence (fence.acq_rel.cta) right before a
--                           chained loop's wait for its late dots (attention's P V),
--                           which keeps ptxas from taking that wait above the
--                           softmax's exp2 (chain.lua; measured slower, s15tattn-2)
--   tl.options.mask_branch  nil (the default): the rule -- a select of a blocked
--                           tile by a mask iota < s as one branch a thread in
--                           the body of a shared row ring (LayerNorm's mask of its
--                           squares), elsewhere a compare and a select a register;
--                           true / false: the branch everywhere / nowhere
--                           (blocked.lua's select_below; 8 registers a thread at least)
--   tl.options.softmax_rows false: a chained loop's row reductions computed where
--                           the body reads them, both rows at once; true: a row
--                           at a time, each row's reduction when first read, and
--                           before the late group's wait the carried rows, the
--                           summed dot's factor and the late dots' A values of
--                           row 0, then of row 8 (stdlib/attention.lua's softmax
--                           order); nil (the default): false (slower with the
--                           program's arithmetic as stdlib's: s16tattn)
--   tl.options.max_chain    false: a row's max or min over the lane's values as a
--                           tree; true: as a chain in element order
--                           (stdlib/attention.lua's row_max; ops.lua); nil (the
--                           default): a chain in a loop issued ahead that
--                           takes a row's max and whose late dots are 128 wide
--                           (the d128 attention; chain.lua's chain_rule)
--   tl.options.promote_lag  nil (the default): convert-tileas-to-cutlass promotes a
--                           loop's k blocks summed from zero (fp8) a block late,
--                           the next block's wgmmas in flight meanwhile; false:
--                           in DeepGEMM's order, each block waited for whole
--                           then promoted (the pass option lag=0; consumer.lua)
--   tl.options.tile_math    nil (the default): tileas.math's erf, gelu and gelu_tanh
--                           as their log2-polynomial forms (one ex2, no reciprocal
--                           for erf and gelu; docs/tileprog.md, "Tile maths");
--                           "as7126": the older forms (erf by Abramowitz and Stegun
--                           7.1.26, gelu from it, gelu_tanh's longer sequence)
--   tl.options.line_loads   nil (the default): a tile program's row or column of a
--                           rank-1 tensor read into a consumer (a GEMM's bias) as
--                           per-element bounds-checked loads; "based": the thread's
--                           address and count left computed once, each element a
--                           compare with a constant and a select of its offset
--                           (values.lua's V.based_loader; tools/bench/tile_epilogue.lua's
--                           _lb variants)
--   tl.options.compiled_hook  fn(k) after every k:compile, cached or not (`tilua
--                           export` collects the kernels a script compiles)
--   tl.options.compile_gc   nil (the default): while k:compile runs, Lua's
--                           collector waits for the heap to grow up to tenfold
--                           (or by 64 MB, the smaller) before a cycle (below);
--                           false: the collector as the script set it
--
-- tl.options checks every value when it is set: an unknown option or a value
-- of the wrong kind or out of range is an error at the line that sets it.
--
-- Dumps from the environment, for any host (the tilua program, an embedding
-- one), in the manner of MLIR_ENABLE_DUMP and TL_LOWER_TRACE:
--   TILUA_DUMP=1 (or all)   every compile prints its input, the IR after each
--                           pass and k:compile's PTX to stderr
--   TILUA_DUMP=a,b          only those stages (pass names, "input", "ptx")
--   TILUA_DUMP_DIR=dir      the same into files instead: dir/NNNN-KERNEL/SS-STAGE.tir
--                           (and .ptx), one folder per compile
--
-- The library never reads `arg` and never exits: the host owns both.
-- Added to tl when init.lua requires it.

local core = require "tilua.core"

local tl = require "tilua" -- the library being built (init.lua registers it before its rooms)

local M = {}

local raise = tl.raise
local Kernel = tl.Kernel

tl.ptx_pipeline = "ptx"

-- {=== tl.options: what each option may be, checked when it is set
local function int_in(lo, hi)
  return function(v) return math.type(v) == "integer" and v >= lo and v <= hi end,
    ("an integer in [%d, %d]"):format(lo, hi)
end
local function bool_or(check, what)
  return function(v) return v == nil or type(v) == "boolean" or check(v) end, "nil, true, false or " .. what
end
local OPTIONS = {
  stage_hook = { function(v) return v == nil or type(v) == "function" end, "nil or a function" },
  stage_hook_ir = { bool_or(function() return false end, "nothing else") },
  keep_stages = { bool_or(function() return false end, "nothing else") },
  debug_hangs = { bool_or(int_in(1, 86400000)) }, -- milliseconds: debug-hangs{ms=...}'s range
  compile_cache = { bool_or(int_in(1, 100000)) },
  check_protocol = { bool_or(function(v) return v == "passes" end, '"passes"') },
  check_protocol_budget = { function(v) return v == nil or (type(v) == "number" and v > 0 and v <= 3600) end,
                            "nil or seconds, a number in (0, 3600]" },
  check_protocol_work = { function(v) return v == nil or int_in(1, 1000000000000)(v) end,
                          "nil or emulator ops, an integer in [1, 10^12]" },
  compiled_hook = { function(v) return v == nil or type(v) == "function" end, "nil or a function" },
  compile_gc = { function(v) return v == nil or v == false end, "nil or false" },
  stage_locations = { bool_or(function() return false end, "nothing else") },
  emulate = { bool_or(function() return false end, "nothing else") }, -- gpu/emulated.lua
  timeline = { function(v) return v == nil or type(v) == "string" end, "nil or a file name" },
  row_ring = { function(v)
    if type(v) ~= "table" then return v == nil or v == false end
    for k, x in pairs(v) do
      if (k ~= "per_sm" and k ~= "in_flight" and k ~= "hoist" and k ~= "registers" and k ~= "async" and k ~= "claims"
          and k ~= "stream" and k ~= "late" and k ~= "store" and k ~= "bulk" and k ~= "whole" and k ~= "refill")
        or math.type(x) ~= "integer" or x < 0 or (k == "registers" and x > 4) or (k == "async" and x > 8) or (k == "bulk" and x > 8)
        or (k == "claims" and x ~= 0 and x ~= 1 and x ~= 2 and x ~= 4) or (k == "stream" and x > 2) or (k == "late" and x > 1)
        or (k == "store" and x > 2) or (k == "hoist" and x > 2) or (k == "whole" and x > 1) or (k == "refill" and x > 1) then return false end
    end
    return true
  end, "nil, false or {per_sm = n, in_flight = bytes, hoist = 0..2, registers = 0..4, async = 0..8, bulk = 0..8, claims = 0|1|2|4, stream = 0..2, late = 0|1, store = 0..2, whole = 0|1, refill = 0|1}" },
  slicing = { function(v) return v == nil or v == false or int_in(1, 16)(v) end, "nil, false or an integer in [1, 16]" },
  blocked_unit = { function(v) return v == nil or v == 4 or v == 8 or v == 16 end, "nil, 4, 8 or 16" },
  sums_by_dot = { function(v) return v == nil or v == false end, "nil or false" },
  wait_fence = { function(v) return v == nil or v == true end, "nil or true" },
  mask_branch = { function(v) return v == nil or type(v) == "boolean" end, "nil, true or false" },
  softmax_rows = { function(v) return v == nil or type(v) == "boolean" end, "nil, true or false" },
  max_chain = { function(v) return v == nil or type(v) == "boolean" end, "nil, true or false" },
  promote_lag = { function(v) return v == nil or v == false end, "nil or false" },
  tile_math = { function(v) return v == nil or v == "as7126" end, 'nil or "as7126"' },
  line_loads = { function(v) return v == nil or v == "based" end, 'nil or "based"' },
  tile_transpose = { function(v)
    if type(v) ~= "table" then return v == nil or v == false end
    for k, x in pairs(v) do
      if k == "form" then
        if x ~= "tma" and x ~= "pairs" and x ~= "registers" then return false end
      elseif k == "order" or k == "claims" or k == "early" then
        if x ~= 0 and x ~= 1 and (k ~= "order" or x ~= 2) then return false end
      elseif k == "group" then
        if math.type(x) ~= "integer" or x < 1 or x > 65536 then return false end
      elseif (k ~= "stages" and k ~= "outs" and k ~= "per_sm") or math.type(x) ~= "integer" or x < 1 or x > 16 then
        return false
      end
    end
    return true
  end, 'nil, false or {stages = n, outs = n, per_sm = n (1 to 16), order = 0|1|2, group = n (1 to 65536), claims = 0|1, early = 0|1, form = "tma"|"pairs"|"registers"}' },
}
local function check_option(key, v)
  local spec = OPTIONS[key]
  if not spec then
    local names = {}
    for k in pairs(OPTIONS) do names[#names + 1] = k end
    table.sort(names)
    raise(("tl.options has no option %s (options: %s)"):format(tostring(key), table.concat(names, ", ")))
  end
  if not spec[1](v) then
    raise(("tl.options.%s must be %s, got %s"):format(key, spec[2], type(v) == "string" and ("'" .. v .. "'") or tostring(v)))
  end
end
do
  local values = {}
  for k, v in pairs(tl.options) do
    check_option(k, v)
    values[k] = v
  end
  tl.options = setmetatable({}, {
    __index = function(_, k) return values[k] end,
    __newindex = function(_, k, v)
      check_option(k, v)
      values[k] = v
    end,
    __pairs = function() return next, values, nil end,
  })
end
-- }===

local function debug_hangs() return tl.options.debug_hangs end

-- {=== dumps (TILUA_DUMP, TILUA_DUMP_DIR)

-- The stages to dump: nil (none), true (all) or a set of names.
local function dump_wanted()
  local v, dir = os.getenv "TILUA_DUMP", os.getenv "TILUA_DUMP_DIR"
  if (not v or v == "" or v == "0") and (not dir or dir == "") then return nil end
  if not v or v == "" or v == "0" or v == "1" or v == "all" then return true end
  local set = {}
  for n in v:gmatch "[^,%s]+" do set[n] = true end
  return set
end

local dumps = 0 -- compiles dumped so far (the folders' numbers)

local function kernel_names(module)
  local names = {}
  for _, op in ipairs(module and module:region(1):entry():ops() or {}) do
    local sym = op:attr "sym_name"
    if sym then names[#names + 1] = tostring(sym) end
  end
  return #names > 0 and table.concat(names, ",") or "module"
end

-- Dump a compile's stages (and its PTX) as the environment asks.
local function dump(stages, module, ptx, err)
  local want = dump_wanted()
  if not want or (stages[1] and stages[1].cached) then return end
  dumps = dumps + 1
  local label = kernel_names(module)
  local dir = os.getenv "TILUA_DUMP_DIR"
  local folder
  if dir and dir ~= "" then
    folder = ("%s/%04d-%s"):format(dir, dumps, label:gsub("[^%w_.,-]", "_"))
    os.execute(("mkdir -p '%s'"):format(folder:gsub("'", "'\\''")))
  end
  local function out(name, index, text, ext)
    if folder then
      local f = io.open(("%s/%02d-%s.%s"):format(folder, index, name, ext), "w")
      if not f then error(("TILUA_DUMP_DIR: cannot write into %s"):format(folder), 0) end
      f:write(text)
      f:close()
    else
      io.stderr:write(("// -----// IR Dump %s (%s) //----- //\n"):format(index == 0 and "Input" or "After " .. name, label), text)
    end
  end
  for _, st in ipairs(stages) do
    local ir = rawget(st, "ir")
    if ir and st.name ~= "emit-ptx" and (want == true or want[st.name]) then out(st.name, st.index, ir, "tir") end
  end
  if ptx and (want == true or want.ptx) then out("ptx", #stages, ptx, "ptx") end
  if err and not folder then io.stderr:write(("// -----// the compile of %s failed //----- //\n"):format(label)) end
end

-- }===

-- Hand a compile's stages to the host's hook, if it set one; dump them
-- when the environment asks.
local function stage_hook(stages, module, ptx, err)
  dump(stages, module, ptx, err)
  local hook = tl.options.stage_hook
  if hook == nil then return end
  if type(hook) ~= "function" then raise("tl.options.stage_hook: expected a function") end
  hook(stages, module, ptx, err)
end

-- A compile failed with err: the hook sees the stages up to the failure, then
-- the error goes on as it came.
local function failed(err, module)
  stage_hook(tl.last_stages, module, nil, err)
  error(err, 0)
end

-- tl.emit_ptx(module) -> PTX text (raises the emitter's diagnostics)
function tl.emit_ptx(m)
  if getmetatable(m) == Kernel then m = m.module end
  local text, msg = core.emit_ptx(m)
  if not text then error(msg, 0) end
  return text
end

-- tl.ptxas(ptx [, arch [, cubin_path]]) -> true, log | false, log | nil, "ptxas not found ...":
-- assembles the PTX with ptxas (TILUA_PTXAS, else /usr/local/cuda/bin/ptxas),
-- writing the cubin (with line info) to cubin_path when one is given.
function tl.ptxas(ptx, arch, cubin_path)
  if type(ptx) ~= "string" then tl.raise(("ptxas: expected PTX text, got %s"):format(type(ptx))) end
  if arch ~= nil and (type(arch) ~= "string" or not arch:match "^sm_%d+[af]?$") then
    tl.raise(("ptxas: arch must be like 'sm_90a', got %s"):format(type(arch) == "string" and ("'" .. arch .. "'") or type(arch)))
  end
  local exe = os.getenv "TILUA_PTXAS"
  if not exe or exe == "" then
    local f = io.open("/usr/local/cuda/bin/ptxas", "r")
    if f then f:close() exe = "/usr/local/cuda/bin/ptxas" end
  end
  if not exe then return nil, "ptxas not found (set TILUA_PTXAS)" end
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  f:write(ptx)
  f:close()
  if cubin_path ~= nil and type(cubin_path) ~= "string" then tl.raise("ptxas: the cubin path must be a string") end
  local out = cubin_path and ("-lineinfo -o '%s'"):format(cubin_path:gsub("'", "'\\''")) or "-o /dev/null"
  local p = io.popen(("'%s' -arch=%s %s '%s' 2>&1"):format(exe, arch or "sm_90a", out, path))
  local log = p:read "a"
  local ok = p:close()
  os.remove(path)
  return ok == true, tl.ptx_log_lines(ptx, log, path)
end

-- ptxas names lines of a temporary file: say instead which script line the
-- PTX line came from (the .loc before it), keeping the PTX line for reference.
function tl.ptx_log_lines(ptx, log, path)
  local files, locs, n = {}, {}, 0
  local cur
  for line in (ptx .. "\n"):gmatch "(.-)\n" do
    n = n + 1
    local id, name = line:match '^%.file (%d+) "(.*)"$'
    if id then files[tonumber(id)] = name:gsub("\\(.)", "%1") end
    local f, l = line:match "^%s*%.loc (%d+) (%d+)"
    if f then cur = { tonumber(f), tonumber(l) } end
    locs[n] = cur
  end
  local esc = path and path:gsub("%p", "%%%0")
  return (log:gsub("ptxas ([^,\n]+), line (%d+); ", function(file, ln)
    if esc and not file:match("^" .. esc .. "$") then return nil end
    local at = locs[tonumber(ln)]
    local src = at and files[at[1]]
    if not src then return ("ptxas (PTX line %s): "):format(ln) end
    return ("%s:%d: ptxas (PTX line %s): "):format(src, at[2], ln)
  end))
end

-- Assemble ptx and say so under `name`: "ok", "skipped" without ptxas; raises when
-- ptxas rejects it. Returns true, false (no ptxas) or raises.
function tl.check_ptx(name, ptx)
  local ok, log = tl.ptxas(ptx)
  if ok == nil then
    print(("%s: ptxas check skipped: %s"):format(name, log))
    return false
  end
  if not ok then error(("%s: ptxas rejected the PTX:\n%s"):format(name, log), 0) end
  print(("%s: ptxas -arch=sm_90a: ok"):format(name))
  return true
end

local compile0 = tl.compile
-- tl.compile with the stages' IR kept when the hook reads it.
local function compile(m, pipeline, opts)
  if (tl.options.stage_hook and tl.options.stage_hook_ir) or dump_wanted() then
    opts = setmetatable({ keep_stages = true }, { __index = opts })
  end
  return compile0(m, pipeline, opts)
end
-- tl.compile keeps its behaviour, then hands its stages to the hook.
function tl.compile(m, pipeline, opts)
  local ok, r = pcall(compile, m, pipeline, opts)
  if not ok then failed(r, getmetatable(m) == Kernel and m.module or m or tl.module()) end
  stage_hook(tl.last_stages, r, nil)
  return r
end

-- The protocol check of k:compile on the kernel's module as written, unless
-- tl.options.check_protocol says otherwise (above): the options, checked, ->
-- a function(module) that raises on a violation, or nil.
local function default_check()
  local cc = require "tilua.emulate.compile_check"
  local b = cc.budget()
  return b and function(module) cc.run(module, { work = b.work, seconds = b.seconds }) end
end

-- The pipeline of k:compile: with tl.options.debug_hangs (tilua --debug-hangs)
-- the debug-hangs pass runs last (a number: the milliseconds a wait spins
-- before it gives up).
local function pipeline_of(pipeline)
  local p, dh = pipeline or tl.ptx_pipeline, debug_hangs()
  if dh == true then return p .. ",debug-hangs" end
  if dh then return ("%s,debug-hangs{ms=%d}"):format(p, dh) end
  return p
end

-- The options the lowering passes read while they run (rowring.lua,
-- transpose.lua): a compile's result depends on their values, so the cache
-- keys on them, and the kernel keeps those it was compiled with
-- (k.lowering_options) for whatever lowers it again (gpu/emulated.lua).
local LOWERING_OPTIONS = { "row_ring", "tile_transpose", "slicing", "blocked_unit", "sums_by_dot", "wait_fence", "mask_branch",
                           "softmax_rows", "max_chain", "promote_lag", "tile_math", "line_loads" }

-- -> a copy of the lowering options' values now
function M.lowering_options()
  local snap = {}
  for _, name in ipairs(LOWERING_OPTIONS) do
    local v = tl.options[name]
    if type(v) == "table" then
      local c = {}
      for k, x in pairs(v) do c[k] = x end
      v = c
    end
    snap[name] = v
  end
  return snap
end

-- The cache key's part for a copy: every field, in order.
local function lowering_key(snap)
  local out = {}
  for _, name in ipairs(LOWERING_OPTIONS) do
    local v = snap[name]
    if type(v) == "table" then
      local fields = {}
      for k, x in pairs(v) do fields[#fields + 1] = k .. "=" .. tostring(x) end
      table.sort(fields)
      v = "{" .. table.concat(fields, ",") .. "}"
    end
    out[#out + 1] = name .. ":" .. tostring(v)
  end
  return table.concat(out, ";")
end

-- fn() with tl.options' lowering options set to a copy's values (the options
-- as they were restored after it, also when it raises) -> fn's results
function M.with_lowering_options(snap, fn)
  local old = M.lowering_options()
  for _, name in ipairs(LOWERING_OPTIONS) do tl.options[name] = snap[name] end
  local r = table.pack(pcall(fn))
  for _, name in ipairs(LOWERING_OPTIONS) do tl.options[name] = old[name] end
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end

-- k:compile([pipeline]) -> PTX. Compiles a copy of the kernel's module, so
-- the authoring IR stays as built; tl.last_stages gets every stage and the PTX
-- as the last one ("emit-ptx"). k.lowered is the compiled module.
--
-- The compile cache: a compile of a module whose text, pipeline, stage
-- keeping, protocol check and lowering options are those of an earlier
-- one (in the same context) gives the
-- earlier result again: its PTX, its lowered module and a copy of its stages
-- (each marked `cached`), handed to the hook as a fresh compile's are, so
-- nothing is hidden from inspection. It keeps tl.options.compile_cache
-- compiles per context (default 64), the least recently used going first;
-- tl.options.compile_cache = false turns it off (benchmarks of the compiler itself).
local caches = setmetatable({}, { __mode = "k" }) -- context -> { entries = {key -> entry}, n, clock }
local CACHE_DEFAULT = 64

local function cache_get(cache, key)
  local e = cache.entries[key]
  if e then
    cache.clock = cache.clock + 1
    e.used = cache.clock
  end
  return e
end
local function cache_put(cache, key, e, limit)
  if not cache.entries[key] then cache.n = cache.n + 1 end
  cache.clock = cache.clock + 1
  e.used = cache.clock
  cache.entries[key] = e
  while cache.n > limit do -- out goes the least recently used
    local old, oldest = nil, math.huge
    for k, v in pairs(cache.entries) do
      if v.used < oldest then old, oldest = k, v.used end
    end
    cache.entries[old], cache.n = nil, cache.n - 1
  end
end

local function copy_stages(stages, cached)
  local out = {}
  for i, st in ipairs(stages) do
    out[i] = setmetatable({ name = st.name, index = st.index, ms = st.ms, changed = st.changed, ir = rawget(st, "ir"),
                            cached = cached }, getmetatable(st))
    if cached then out[i].ms = 0 end -- nothing ran
  end
  return out
end

-- The passes of tile-to-ptx up to the one named `upto` (all without it), or
-- "tile-to-ptx" itself, with tl.options.slicing as tileas-decide-slicing's
-- option (false: count = 0) and tl.options.blocked_unit as
-- tileas-assign-layouts' unit.
function M.tile_pipeline(upto)
  local sl, unit = tl.options.slicing, tl.options.blocked_unit
  if sl == nil and unit == nil and not upto then return "tile-to-ptx" end
  local passes
  for _, p in ipairs(core.pipelines()) do
    if p.name == "tile-to-ptx" then passes = p.passes end
  end
  assert(passes, "no pipeline tile-to-ptx")
  if upto then passes = assert(passes:match("^(.-" .. upto:gsub("%-", "%%-") .. ")"), upto) end
  if unit then passes = passes:gsub("tileas%-assign%-layouts", ("tileas-assign-layouts{unit=%d}"):format(unit)) end
  if sl == nil then return passes end
  return (passes:gsub("tileas%-decide%-slicing", ("tileas-decide-slicing{count=%d}"):format(sl or 0)))
end

-- The collector during a compile (tl.options.compile_gc). A compile makes
-- megabytes of short-lived Lua objects (the d128 tile attention's ~5 MB) over
-- a live heap that is mostly the library (~2 MB): at Lua's default pause
-- (200: a cycle each time the heap doubles) each compile ran ~1.7 cycles,
-- each marking the whole library again, for ~3 ms a compile on the dev
-- machine. A pause of up to 1000 (capped where the heap is large: at most
-- 64 MB more before a cycle) runs ~0.2; the script's pause comes back after
-- (a to-be-closed value: also when the compile raises).
local function gc_for_compile()
  if tl.options.compile_gc == false then return nil end
  local kb = collectgarbage "count"
  local before = collectgarbage("setpause", math.min(1000, math.max(200, math.floor(100 * (kb + 65536) / kb))))
  return setmetatable({}, { __close = function() collectgarbage("setpause", before) end })
end

function Kernel:compile(pipeline)
  local _ <close> = gc_for_compile()
  -- a tile program (tl.tile_kernel) goes through tile-to-ptx
  local p = pipeline_of(pipeline or (self.tile_program and M.tile_pipeline()) or nil)
  local check = default_check()
  local lowering = M.lowering_options()
  local cache, key
  if tl.options.compile_cache ~= false then
    local keep = tl.options.keep_stages or (tl.options.stage_hook and tl.options.stage_hook_ir) or dump_wanted() and true or false
    if keep and tl.options.stage_locations then keep = "locations" end
    local ctx = tl.context()
    cache = caches[ctx]
    if not cache then
      cache = { entries = {}, n = 0, clock = 0 }
      caches[ctx] = cache
    end
    -- a compile without the protocol check does not stand for one with it
    key = p .. "\0" .. tostring(keep) .. "\0" .. tostring(tl.options.check_protocol) .. "\0" .. lowering_key(lowering)
      .. "\0" .. self.module:print()
    local hit = cache_get(cache, key)
    if hit then
      tl.last_stages, tl.last_check = copy_stages(hit.stages, true), hit.check
      self.lowered, self.ptx, self.lowering_options = hit.lowered, hit.ptx, lowering
      self._fn, self._plan = nil, nil -- (k._plan is nil or the plan of k._fn: l_launch.c)
      stage_hook(tl.last_stages, hit.lowered, hit.ptx)
      if tl.options.compiled_hook then tl.options.compiled_hook(self) end
      return hit.ptx
    end
  end
  if check then check(self.module) end
  local m = self.module:clone()
  local ok, err = pcall(compile, m, p)
  if not ok then failed(err, m) end
  local t0 = os.clock()
  local ptx
  ok, ptx = pcall(tl.emit_ptx, m)
  if not ok then
    local stages = tl.last_stages
    stages[#stages + 1] = { name = "emit-ptx", index = #stages, ms = (os.clock() - t0) * 1e3, changed = false,
                            failed = true, ir = "" }
    failed(ptx, m)
  end
  local stages = tl.last_stages
  stages[#stages + 1] = { name = "emit-ptx", index = #stages, ms = (os.clock() - t0) * 1e3, changed = true, ir = ptx }
  self.lowered, self.ptx, self.lowering_options = m, ptx, lowering
  self._fn, self._plan = nil, nil -- (k._plan is nil or the plan of k._fn: l_launch.c)
  if cache then
    local limit = math.type(tl.options.compile_cache) == "integer" and tl.options.compile_cache or CACHE_DEFAULT
    cache_put(cache, key, { ptx = ptx, lowered = m, stages = copy_stages(stages, nil), check = tl.last_check }, limit)
  end
  stage_hook(stages, m, ptx)
  if tl.options.compiled_hook then tl.options.compiled_hook(self) end
  return ptx
end

-- The compiled tile.kernel op of this kernel (after k:compile).
function Kernel:lowered_op()
  for _, op in ipairs(self.lowered:region(1):entry():ops()) do
    if op:name() == "tile.kernel" and op:attr("sym_name") == self.name then return op end
  end
end

return M
