-- spec/helper.lua: paths and small utilities shared by the specs.
-- ctest runs every spec inside the tilua host from the repository root with
-- TILUA_BUILD_DIR set; run by hand, `busted` finds the module through cpath.
local H = {}

-- busted runs a spec with an environment of its own (describe, it, pending,
-- luassert's assert), while a file loaded with dofile sees the plain globals:
-- the helpers reach busted's API as H.busted, the environment of the spec
-- that loaded them (the first function up the stack whose _ENV is not the
-- globals; busted resolves its names in the test running at the time).
local function spec_env()
  for level = 2, 12 do
    local info = debug.getinfo(level, "f")
    if not info then break end
    for i = 1, 255 do
      local name, v = debug.getupvalue(info.func, i)
      if not name then break end
      if name == "_ENV" and v ~= _G then return v end
    end
  end
  return _G
end
H.busted = spec_env()
local B = H.busted

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

-- H.temp(text [, suffix]) -> the path of a fresh temporary file holding text
-- (suffix: ".lua", ".tir" ... where the reader goes by it); the caller removes it.
function H.temp(text, suffix)
  local path = os.tmpname() .. (suffix or "")
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
  return path
end

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
  local f = io.open(H.tilua, "rb")
  if not f then error(("%s not found: set TILUA_BUILD_DIR to the build folder (ctest does)"):format(H.tilua), 2) end
  f:close()
  local argv = { H.tilua }
  for _, a in ipairs(args) do argv[#argv + 1] = a end
  return H.run(argv, input)
end

-- The fuzz specs' inputs, the same on every run: a fixed seed and count
-- (TILUA_FUZZ_SEED and TILUA_FUZZ_INPUTS change them; TILUA_FUZZ_SECONDS runs
-- for a time instead, by hand: tools/fuzz is where random campaigns live).
-- H.fuzz_more(runs, default_inputs, deadline): go on for another input?
H.fuzz_seed = tonumber(os.getenv "TILUA_FUZZ_SEED") or 20261128
local FUZZ_SECONDS, FUZZ_INPUTS = tonumber(os.getenv "TILUA_FUZZ_SECONDS"), tonumber(os.getenv "TILUA_FUZZ_INPUTS")
function H.fuzz_deadline() return os.clock() + (FUZZ_SECONDS or 0) end
function H.fuzz_more(runs, default_inputs, deadline)
  if FUZZ_SECONDS then return os.clock() < deadline end
  return runs < (FUZZ_INPUTS or default_inputs)
end

function H.ptxas()
  local p = os.getenv "TILUA_PTXAS"
  if p and p ~= "" then return p end
  local f = io.open("/usr/local/cuda/bin/ptxas", "r")
  if f then f:close() return "/usr/local/cuda/bin/ptxas" end
end

-- H.assert_ptxas(ptx): ptxas takes ptx (the test is pending where there is no ptxas).
function H.assert_ptxas(ptx)
  local ok, log = require("tilua").ptxas(ptx)
  if ok == nil then B.pending("ptxas not found: " .. log) end
  assert(ok, log)
end

-- H.WGMMA_SLOW: what ptxas says when a wgmma kernel will run slower than its
-- PTX asks: wgmmas serialized (C7510; C7512: too few registers; C7513: an input
-- register of an in-flight wgmma written; C7514: an accumulator register read
-- by another instruction while a wgmma may be in flight, as an epilogue's
-- conversion placed before its bounds check did), a warpgroup.arrive injected
-- (C7519), setmaxnreg ignored (C7508).
H.WGMMA_SLOW = { "C7508", "C7510", "C7512", "C7513", "C7514", "C7519" }

-- H.assert_ptxas_fast(ptx): ptxas takes the PTX and says none of H.WGMMA_SLOW.
function H.assert_ptxas_fast(ptx)
  local ok, log = require("tilua").ptxas(ptx)
  if ok == nil then B.pending("ptxas not found: " .. log) end
  assert(ok, log)
  for _, code in ipairs(H.WGMMA_SLOW) do H.lacks(log, code) end
end

-- H.ptxas_log(ptx): ptxas -v's log of ptx (its advisories, registers, spills).
function H.ptxas_log(ptx)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(ptx)
  f:close()
  local log = io.popen(("%s -arch=sm_90a -v -o /dev/null %s 2>&1"):format(quote(H.ptxas()), quote(path))):read "a"
  os.remove(path)
  return log
end

-- H.files(dir, pattern [, recursive]): the files of dir (and of its folders,
-- recursive) whose names match pattern, sorted.
function H.files(dir, pattern, recursive)
  local list = {}
  local p = io.popen(recursive and ("find " .. quote(dir) .. " -type f") or ("ls " .. quote(dir)))
  for name in p:lines() do
    local path = recursive and name or (dir .. "/" .. name)
    if name:match(pattern) then list[#list + 1] = path end
  end
  p:close()
  table.sort(list)
  return list
end

-- A script defining tile kernel "loose", whose compile fails at
-- tileas-materialize-agents: its dot (line 4) is not in a pipelined loop.
-- The caller appends what compiles it.
H.unpipelined_dot_script = [[
local tl = require "tilua"
local k = tl.tile_kernel("loose", { params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2), C = tl.tensor(tl.f32, 2) } })
k:define(function(k, p)
  local acc = tl.dot(tl.load(p.A, { 0, 0 }, { 128, 64 }), tl.load(p.B, { 0, 0 }, { 256, 64 }), tl.zeros({ 128, 256 }, tl.f32))
  tl.store(p.C, { 0, 0 }, acc)
end)
]]

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
-- Every HTML element opened is closed, in order (void elements and the doctype aside).
function H.balanced_html(html)
  local stack, void = {}, { meta = true, br = true }
  for slash, tag in html:gmatch "<(/?)([%a][%w]*)[^>]*>" do
    tag = tag:lower()
    if not void[tag] and tag ~= "!doctype" then
      if slash == "" then stack[#stack + 1] = tag
      else
        assert(stack[#stack] == tag, ("</%s> closes <%s>"):format(tag, tostring(stack[#stack])))
        stack[#stack] = nil
      end
    end
  end
  assert(#stack == 0, ("<%s> is never closed"):format(tostring(stack[#stack])))
end
function H.count(text, s)
  local n, pos = 0, 1
  while true do
    local a, b = text:find(s, pos, true)
    if not a then return n end
    n, pos = n + 1, b + 1
  end
end

-- {=== bytes: lists of numbers <-> the little-endian strings kernels read and write

function H.pack(fmt, list)
  local out = {}
  for i, x in ipairs(list) do out[i] = string.pack(fmt, x) end
  return table.concat(out)
end
function H.unpack(fmt, s)
  local n, out = string.packsize(fmt), {}
  for i = 1, #s // n do out[i] = string.unpack(fmt, s, n * (i - 1) + 1) end
  return out
end
function H.i32s(s) return H.unpack("<i4", s) end
function H.i64s(s) return H.unpack("<i8", s) end
function H.f32s(s) return H.unpack("<f", s) end

-- }===

-- {=== GPU specs

-- The seed of a spec's random data (TILUA_SEED fixes it; printed by the harness).
H.seed = require("tilua.gpu.check").seed
-- In a GPU test: pending (never passed) where there is no GPU.
function H.gpu()
  local tl = require "tilua"
  if not tl.device.available() then B.pending("no GPU: " .. tl.device.error()) end
end
-- H.gpus(n [, without_nccl]): pending unless there are n GPUs (and NCCL);
-- spec/gpu_runner.lua then reports the spec skipped, never passed
function H.gpus(n, without_nccl)
  H.gpu()
  local tl = require "tilua"
  local why = tl.device.count() < n and ("fewer than %d GPUs (%d)"):format(n, tl.device.count())
              or not without_nccl and not tl.nccl.available() and ("no NCCL: " .. tl.nccl.error())
  if why then
    rawset(_G, "TILUA_GPU_SKIP", why)
    B.pending(why)
  end
end

-- H.ragged_gemm_cases(seed) -> three GEMM shapes {m, n, k} picked by seed, small, medium and
-- large, none a multiple of a tile: N and K multiples of 8 (TMA's 16-byte rows)
function H.ragged_gemm_cases(seed)
  local rng = seed
  local function rand(lo, hi)
    rng = (rng * 1103515245 + 12345) % 2147483648
    return lo + rng % (hi - lo + 1)
  end
  local cases = {}
  for _, r in ipairs { { 1, 200, 8, 64, 8, 40 }, { 200, 1600, 40, 256, 8, 160 }, { 2000, 5000, 200, 520, 60, 300 } } do
    cases[#cases + 1] = { m = rand(r[1], r[2]), n = 8 * rand(r[3], r[4]), k = 8 * rand(r[5], r[6]) }
  end
  return cases
end

-- H.gemm_buffers(M, N, K, seed [, outputs]): a GEMM's device buffers, freed together when the
-- table is closed: bf16 A (M x K, random from seed), B (N x K, from seed + 1) and `outputs`
-- (default 1) zeroed bf16 M x N outputs.
--   local buf <close> = H.gemm_buffers(M, N, K, s, 2)   -- buf.a, buf.b, buf[1], buf[2]
function H.gemm_buffers(M, N, K, seed, outputs)
  local D = require("tilua").device
  local bf16 = require("tilua").bf16
  local buf = setmetatable({}, { __close = function(t)
    for _, b in pairs(t) do b:free() end
  end })
  buf.a = D.random(bf16, M * K, seed)
  buf.b = D.random(bf16, N * K, seed + 1)
  for i = 1, outputs or 1 do
    buf[i] = D.alloc(bf16, M * N)
    buf[i]:fill(0)
  end
  return buf
end

-- }===

-- {=== PTX specs: the kernels a spec builds and compiles, every PTX assembled at its end
--
--   local E = H.emitter { block = 128 }
--   local k = E.build(name, params, body [, {block, cluster, smem}])   -- in a fresh module
--   local ptx, lowered, final = E.compile(k)   -- the IR after convert-tile-to-nvvm and at the end
--   E.assemble_all(n)                           -- last: describe("ptxas"): every PTX through
--                                               -- ptxas -arch=sm_90a (at least n of them)
function H.emitter(defaults)
  local tl = require "tilua"
  -- the kernels' ops and errors are located at the spec's lines, not here
  tl.core.mark_library(debug.getinfo(1, "S").source)
  local E = { emitted = {} }
  function E.build(name, params, body, spec)
    spec = spec or {}
    tl.new_module()
    local k = tl.kernel(name, { params = params or {}, block = spec.block or defaults.block,
                                cluster = spec.cluster, smem = spec.smem, min_ctas = spec.min_ctas })
    k:define(body)
    return k
  end
  function E.compile(k)
    local ptx = k:compile()
    E.emitted[#E.emitted + 1] = { k.name, ptx }
    local lowered
    for _, st in ipairs(tl.last_stages) do
      if st.name == "convert-tile-to-nvvm" then lowered = st.ir end
    end
    return ptx, lowered, k.lowered:print()
  end
  function E.assemble_all(at_least)
    B.describe("ptxas", function()
      B.it("assembles every PTX this spec emitted for sm_90a", function()
        B.assert.is_true(#E.emitted >= at_least)
        local ok0, why = tl.ptxas(E.emitted[1][2])
        if ok0 == nil then B.pending("ptxas not found: " .. why) end
        for _, e in ipairs(E.emitted) do
          local ok, log = tl.ptxas(e[2])
          assert(ok, ("ptxas rejected kernel %s:\n%s\n%s"):format(e[1], log, e[2]))
        end
      end)
    end)
  end
  return E
end

-- }===

-- The texts of the valid IR fixtures (the fuzzers' corpus).
function H.valid_fixtures()
  local out = {}
  for _, f in ipairs(H.files("spec/fixtures/valid", "%.tir$")) do out[#out + 1] = { path = f, text = H.slurp(f) } end
  return out
end

return H
