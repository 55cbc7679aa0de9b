-- What the protocol specs share (spec/protocol*_spec.lua, spec/emulate_gpu_spec.lua):
-- test bytes, op lookup, the GEMM as the emulator runs it, the small ring-copy
-- kernels and the check of a caught mutant.
local M = {}
local B = dofile("spec/helper.lua").busted -- busted's API (describe, it, pending, assert)

-- n pseudo-random bytes (not constant: a copy that drops or repeats a chunk shows)
function M.bytes(n, seed)
  local t, s = {}, seed or 7
  for i = 1, n do
    s = (s * 1103515245 + 12345) & 0x7fffffff
    t[i] = string.char((s >> 16) & 0xff)
  end
  return table.concat(t)
end

-- Every op named `name` inside x (an op, or a kernel object: its op), in program order.
function M.ops(x, name)
  local out = {}
  local op = type(x) == "table" and x.op or x
  op:walk(function(o) if o:name() == name then out[#out + 1] = o end end)
  return out
end

-- The kernel of a built stdlib GEMM g with its tile scheduler lowered
-- (lower-tile-scheduler: the scheduler ops become arith + scf), in a clone of
-- its module: the kernel as the ptx pipeline has it just before
-- convert-cutlass-to-nvvm, which the emulator runs; or after `pipeline`
-- ("ptx": the nvvm-level kernel the emitter gets).
function M.lowered_gemm(g, pipeline)
  local m = g.kernel.op:parent()
  while m:name() ~= "module" do m = m:parent() end
  m = m:clone()
  assert(require("tilua").core.run_pipeline(m, pipeline or "lower-tile-scheduler"))
  return M.ops(m, "tile.kernel")[1]
end

-- The kernel of tile program k after tile-to-ptx up to pass `stage` ("input": as built).
function M.stage_kernel(k, stage)
  local core = require("tilua").core
  local passes
  for _, p in ipairs(core.pipelines()) do if p.name == "tile-to-ptx" then passes = p.passes end end
  local m = k.module:clone()
  if stage ~= "input" then assert(core.run_pipeline(m, passes:match("^(.-" .. stage:gsub("%-", "%%-") .. ")"))) end
  return M.ops(m, "tile.kernel")[1]
end

-- A tile program's kernel as the emulator runs it: tile-to-ptx up to
-- convert-tileas-to-cutlass (the tileas passes and the lowering), then its tile
-- scheduler lowered, in a module of its own.
function M.lowered_tile(k, lowering)
  local core = require("tilua").core
  local passes
  for _, p in ipairs(core.pipelines()) do
    if p.name == "tile-to-ptx" then passes = p.passes:match "^(.-convert%-tileas%-to%-cutlass)" end
  end
  local m = k.module:clone()
  -- (lowering: convert-tileas-to-cutlass's options, "lag=0")
  assert(core.run_pipeline(m, assert(passes) .. (lowering and "{" .. lowering .. "}" or "") .. ",lower-tile-scheduler"))
  return M.ops(m, "tile.kernel")[1]
end

M.rc = assert(loadfile "examples/ring_copy.lua")("--library")
M.prc = assert(loadfile "examples/pipeline_ring_copy.lua")("--library")

-- The small ring copies, in this order and by key: every ring wraps at least
-- twice on one CTA (chunks > 2 * stages), the size is not a multiple of the
-- chunk nor of 16.
M.cases = {
  { key = "rc", name = "ring_copy", n = 5 * 512 + 13 * 16 + 5,
    build = function() return M.rc.build { stages = 2, chunk = 512, consumer_warps = 1, name = "rc" } end },
  { key = "rcb", name = "ring_copy_bulk", n = 7 * 512 + 7, build = function()
      return M.rc.build { stages = 3, chunk = 512, consumer_warps = 1, store = "bulk", inflight = 2, name = "rcb" }
    end },
  { key = "prc", name = "pipeline_ring_copy", n = 5 * 512 + 37,
    build = function() return M.prc.build { stages = 2, chunk = 512, consumer_warps = 1, name = "prc" } end },
  { key = "prc2", name = "pipeline_ring_copy (2 consumer warps)", n = 5 * 1024 + 37, slow = true,
    build = function() return M.prc.build { stages = 2, chunk = 1024, consumer_warps = 2, name = "prc2" } end },
  { key = "prcws", name = "pipeline_ring_copy_ws", n = 5 * 1024 + 37, slow = true, build = function()
      return M.prc.build { stages = 2, chunk = 1024, consumer_warps = 2, mode = "warp_specialized", name = "prcws" }
    end },
}
for _, c in ipairs(M.cases) do M.cases[c.key] = c end

-- StreamK with its fixup: 2 tiles of 4 k tiles over 3 workers (a grid of 3), each
-- tile in two pieces (tile 0: CTA 0 then CTA 1's final split; tile 1: CTA 1 then
-- CTA 2's); arguments out, ws (the workspace), part (the pieces' partial sums).
function M.build_fixup()
  local tl = require "tilua"
  tl.new_module()
  local k = tl.kernel("sched_fixup", { params = { { "out", tl.ptr(tl.i32) }, { "ws", tl.ptr(tl.i8) },
                                                  { "part", tl.ptr(tl.i32) } }, block = 32 })
  k:define(function(k, p)
    k:async_exec("worker", { first_warp = 0, warps = 1 }, function()
      local s = tl.sched.streamk { tiles = { 1, 2, 1, 4 }, workers = 3, workspace = p.ws, decomposition = "streamk",
                                   min_k = 1, accumulator_tile_bytes = 32 * 4 * 4 }
      local T = tl.sched.tiles(s)
      T:init(tl.block_id())
      T:loop(function(T)
        local w = T.work
        local _ = w:is_valid() -- (the mutant's stand-in for the fixup's result)
        local acc = tl.op1("builtin.unrealized_conversion_cast", {}, tl.memref(tl.i32, { 4 }, "rmem"))
        tl.block_striped.load(p.part + w:tile_idx() * 128, acc, { threads = 32 }) -- the piece's partial sums
        local epilogue = s:fixup(w, acc)
        tl.if_(epilogue, function() tl.block_striped.store(p.out + w:tile_idx() * 128, acc, { threads = 32 }) end)
      end)
    end)
  end)
  return k
end

-- The violation of checker result r is of one of `kinds`.
function M.assert_kind(r, kinds)
  local ok = false
  for _, kind in ipairs(kinds) do ok = ok or r.violation.kind == kind end
  assert(ok, ("expected %s, got:\n%s"):format(table.concat(kinds, " or "), r.report))
end

-- tl.check_lowering of kernel (opts: its grid, args ...) with a lowering bug:
-- mutate(kop) right after the pipeline's pass numbered `at`. The mutant fails,
-- blamed on `pass`. -> the result
function M.blamed(kernel, opts, at, pass, mutate)
  local done = false
  opts.after_pass = function(_, i, kop)
    if i == at then
      mutate(kop)
      done = true
    end
  end
  local r = require("tilua").check_lowering(kernel, opts)
  B.assert.is_true(done)
  B.assert.is_false(r.ok, "the mutant passed")
  B.assert.are.equal(pass, r.broken_by, r.report)
  return r
end

-- A checker's result r for a mutant: a violation of one of `kinds`, every
-- counterexample step matching one of `step_patterns`, the report holding each
-- of `lines`; printed under `what`.
function M.assert_caught(r, what, kinds, lines, step_patterns)
  assert(not r.ok, "the mutant passed")
  M.assert_kind(r, kinds)
  assert(#r.trace >= 1, r.report)
  for _, step in ipairs(r.trace) do
    local named = false
    for _, p in ipairs(step_patterns) do named = named or step:match(p) ~= nil end
    assert(named, "a step does not name its role, op and line: " .. step)
  end
  for _, l in ipairs(lines or {}) do assert(r.report:match(l), ("%q not in:\n%s"):format(l, r.report)) end
  print(("\n  %s -> %s (%d steps, %d states; the first found %s)\n%s"):format(what, r.violation.kind, #r.trace, r.states, tostring(r.first_steps), r.violation.message))
end

-- f32 x -> its bf16 bits, rounded to nearest even
function M.bf16(x)
  local b = string.unpack("<I4", string.pack("<f", x))
  return ((b + 0x7fff + ((b >> 16) & 1)) >> 16) & 0xffff
end

-- A rows x cols matrix of f(i, j): its values (row-major, from 0) and its bf16 bytes.
function M.matrix(rows, cols, f)
  local v, bytes = {}, {}
  for i = 0, rows - 1 do
    for j = 0, cols - 1 do
      v[i * cols + j] = f(i, j)
      bytes[#bytes + 1] = string.pack("<I2", M.bf16(v[i * cols + j]))
    end
  end
  return v, table.concat(bytes)
end

-- A GEMM problem of M x N x K with small integer operands (every sum exact in
-- f32 and its bf16 rounding the reference's): A (M x K) and B (N x K) as
-- tensors, C's bytes; P.check(out, what) compares a result's bf16 C with the
-- plain reference, P.values(px, py) the lowered kernel's arguments by
-- tileas.params entry (C a tensor map, or a pointer where the epilogue stores
-- plainly).
function M.int_gemm(rows, cols, depth)
  local bf16 = M.bf16
  local A, ab = M.matrix(rows, depth, function(i, k) return ((i * 7 + k * 3) % 5) - 2 end)
  local B, bb = M.matrix(cols, depth, function(j, k) return ((j * 5 + k * 11 + 1) % 3) - 1 end)
  local P = { M = rows, N = cols, K = depth, A = { data = ab, shape = { rows, depth } },
              B = { data = bb, shape = { cols, depth } }, C = { bytes = rows * cols * 2, shape = { rows, cols } } }
  function P.check(out, what)
    local bad, first = 0, nil
    for i = 0, rows - 1 do
      for j = 0, cols - 1 do
        local s = 0
        for k = 0, depth - 1 do s = s + A[i * depth + k] * B[j * depth + k] end
        local got = string.unpack("<I2", out, 1 + 2 * (i * cols + j))
        if got ~= bf16(s) then
          bad, first = bad + 1, first or ("%s: [%d, %d] = %04x, want %04x"):format(what, i, j, got, bf16(s))
        end
      end
    end
    if bad > 0 then error(("%d elements off; %s"):format(bad, first), 2) end
  end
  function P.values(px, py)
    return { ["map:A"] = P.A, ["map:B"] = P.B, ["map:C"] = P.C, ["ptr:C"] = ("\0"):rep(rows * cols * 2),
             ["dim:C:0"] = rows, ["dim:C:1"] = cols, ["stride:C:0"] = cols, ["arg:K"] = depth, ["programs:x"] = px,
             ["programs:y"] = py }
  end
  return P
end

-- The arguments of a lowered tile program (convert-tileas-to-cutlass), each
-- parameter filled as its tileas.params entry says from `values` (entry ->
-- argument, as the launcher would); -> args, and the position of each entry.
function M.params_args(kop, values)
  local args, at = {}, {}
  for i, e in ipairs(kop:attr "tileas.params") do
    args[i] = assert(values[e], "no value for " .. e)
    at[e] = i
  end
  return args, at
end

return M
