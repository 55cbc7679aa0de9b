-- The StreamK fixup's generic barrier after lowering (emulate/models/global.lua):
-- the spin on a global counter is a blocking wait, the fences and atomics order
-- the CTAs (release on the arrive side, acquire on the wait side), so the
-- fixup kernels check clean at every stage of `ptx` (tl.check_lowering and the
-- pass manager's check after every pass), and lowering bugs seeded right after
-- a pass are caught with the right kind; bulk stores are race-checked in global
-- memory (docs/protocol.md, "The lowered generic barrier").
dofile "spec/helper.lua"
local tl = require "tilua"

local PH = dofile "spec/protocol_helper.lua"
local ops, cases, bytes = PH.ops, PH.cases, PH.bytes

-- a new constant before `before`
local function const(before, value, type)
  return tl.core.op_create(tl.context(), "arith.constant", {}, { type }, { value = tl.core.attr_int(value, type) }, 0,
                           nil, before, nil)
end

local PASSES = { "canonicalize", "cse", "lower-tile-scheduler", "convert-cutlass-to-nvvm", "dedupe-wait-groups",
                 "convert-tile-to-nvvm", "canonicalize", "cse", "canonicalize" }
local TILE_LEVEL, NVVM_LEVEL = 4, 6 -- the stages whose generic barrier is tile ops, nvvm ops

-- {=== the kernels

-- StreamK with its fixup (spec/protocol_helper.lua's): 3 workers, two tiles in
-- two pieces each; the final pieces wait with a CAS that resets.
local build_fixup = PH.build_fixup
local PART = {} -- the partial sums: tile t's thread l element e = 100 t + 4 l + e
for t = 0, 1 do
  for i = 0, 127 do PART[#PART + 1] = string.pack("<i4", 100 * t + i) end
end
PART = table.concat(PART)
local function fixup_args() return { { bytes = 1024 }, { bytes = 4096 }, PART } end

-- splitk_block_striped at 1 row block x 3 splits of 2: the middle split waits
-- with a volatile load (wait_eq), the last with a CAS (wait_eq_reset).
local SK = { RB = 1, P = 3, KS = 2 }
local function build_sk() return loadfile("examples/splitk_block_striped.lua")("--library").build(SK.RB, SK.P, SK.KS) end
local function sk_args()
  local M, K = SK.RB * 2048, SK.P * SK.KS
  local a = {}
  for i = 1, K * M do a[i] = string.pack("<i4", (i * 7) % 13 - 6) end
  local x = {}
  for i = 1, K do x[i] = string.pack("<i4", i - 3) end
  return { table.concat(a), table.concat(x), { bytes = 4 * SK.P * M }, { bytes = 4 * M },
           { bytes = 4 * M }, { bytes = 4 * M }, { bytes = 4 * SK.RB } }
end

local KERNELS = {
  { name = "the StreamK fixup (3 CTAs)", build = build_fixup, args = fixup_args, grid = 3, out = 1 },
  { name = "splitk_block_striped (3 splits)", build = build_sk, args = sk_args, grid = SK.P * SK.RB, out = 6 },
}

-- }===

describe("the lowered generic barrier", function()
  for _, c in ipairs(KERNELS) do
    it("checks clean and computes the same bytes at every stage of ptx: " .. c.name, function()
      local want
      -- each stage within about a second of the emulator (max_work: the same verdict on every machine)
      local r = tl.check_lowering(c.build(), { grid = c.grid, args = c.args(), max_states = 2000, max_work = 6000000,
        after_pass = function(pass, i, kop)
          for _, policy in ipairs { "round_robin", "random", "adversarial" } do
            local e = tl.emulate(kop, { grid = c.grid, args = c.args(), policy = policy, seed = 3 + i })
            assert(e.ok, ("after %s (%s): %s"):format(pass, policy, tostring(e.report)))
            want = want or e.read(c.out)
            assert(e.read(c.out) == want, ("after %s (%s): the output differs from the input's"):format(pass, policy))
          end
        end })
      assert(r.ok, r.report)
      assert.are.same(PASSES, r.passes)
      for _, st in ipairs(r.stages) do assert(st.ok, st.report) end
      print(("\n  %s\n%s"):format(c.name, r.report))
    end)
  end

  it("is checked by the pass manager after every pass, on every worker the StreamK plan counts on", function()
    tl.compile(build_fixup(), "ptx", { check_protocol = true })
    local n = 0
    for _, e in ipairs(tl.last_check.log) do
      assert(not e.why, ("after %s: not checked: %s"):format(e.after, tostring(e.why)))
      assert(e.ok, e.after)
      n = n + 1
    end
    assert.is_true(n >= 6) -- the input and every pass that changed the kernel
    -- the grid is the plan's 3 workers (a worker count the kernel takes as a constant)
    local P = require "tilua.emulate.protocol"
    assert.are.equal(3, P.check(build_fixup(), { max_states = 2000 }).grid)
  end)

  it("the spin loop on a counter that never gets there is a deadlock naming the warp and the word", function()
    local k = build_fixup()
    k:compile()
    local kop = k:lowered_op()
    for _, o in ipairs(ops(kop, "nvvm.red.global")) do o:erase() end -- the non-final pieces' arrive
    local e = tl.emulate(kop, { grid = 3, args = fixup_args(), max_steps = 10000 })
    assert.is_false(e.ok)
    assert.are.equal("deadlock", e.error.kind, e.report)
    assert.matches("kernel warp 0 %(CTA 1%) spins until the global word at 0x%x+ %(now 0%) ends the loop at spec/protocol_helper.lua:%d+ %(nvvm.atom.cas.global%)", e.report)
  end)
end)

describe("lowering bugs of the generic barrier", function()
  -- the spin loops on a global word (scf.while whose before region loads or CASes)
  local TESTS = { ["tile.load"] = true, ["tile.atomic_cas"] = true, ["nvvm.ld.global"] = true, ["nvvm.atom.cas.global"] = true }
  local function spins(kop)
    local out = {}
    for _, w in ipairs(ops(kop, "scf.while")) do
      for _, o in ipairs(w:region(1):blocks()[1]:ops()) do
        if TESTS[o:name()] then
          out[#out + 1] = w
          break
        end
      end
    end
    return out
  end
  local function next_op(o)
    local list = o:block():ops()
    for i, x in ipairs(list) do if x == o then return list[i + 1] end end
  end
  -- the arrive's atomic add on the counter and the fence before it
  local function arrives(kop)
    local out = {}
    for _, name in ipairs { "tile.atomic", "nvvm.red.global" } do
      for _, a in ipairs(ops(kop, name)) do
        local fence -- the last fence before it in its block
        for _, x in ipairs(a:block():ops()) do
          if x == a then break end
          if x:name() == "tile.fence" or x:name() == "nvvm.fence" then fence = x end
        end
        if fence then out[#out + 1] = { a, fence } end
      end
    end
    assert.is_true(#out > 0, "no fence + atomic arrive")
    return out
  end
  -- the counter's expected value v made v + d (the CAS's compare too)
  local function off_by(d)
    return function(kop)
      for _, w in ipairs(spins(kop)) do
        local blk = w:region(1):blocks()[1]
        local v
        for _, o in ipairs(blk:ops()) do if o:name() == "arith.cmpi" then v = o:operand(2) end end
        local one = const(w, math.abs(d), v:type())
        local nv = tl.core.op_create(tl.context(), d > 0 and "arith.addi" or "arith.subi", { v, one:result(1) },
                                     { v:type() }, {}, 0, nil, w, nil)
        for _, o in ipairs(blk:ops()) do
          for i = 1, o:noperands() do if o:operand(i) == v then o:set_operand(i, nv:result(1)) end end
        end
      end
    end
  end

  local BUGS = {
    { "the fixup's wait deleted (reads the partials before the finisher's barrier)", { "unfilled", "overwrite" },
      function(kop) for _, w in ipairs(spins(kop)) do w:erase() end end, "with no synchronization" },
    { "the acquire fence after the wait deleted", { "unfilled", "overwrite" },
      function(kop) for _, w in ipairs(spins(kop)) do next_op(w):erase() end end, "with no synchronization" },
    { "the release fence before the arrive deleted (a relaxed arrive)", { "unfilled", "overwrite" },
      function(kop) for _, a in ipairs(arrives(kop)) do a[2]:erase() end end, "with no synchronization" },
    { "the release fence narrowed to the CTA", { "unfilled", "overwrite" },
      function(kop) for _, a in ipairs(arrives(kop)) do a[2]:set_attr("scope", "cta") end end, "with no synchronization" },
    { "the arrive's atomic narrowed to the CTA", { "unfilled", "overwrite" },
      function(kop) for _, a in ipairs(arrives(kop)) do a[1]:set_attr("scope", "cta") end end, "with no synchronization" },
    { "the counter compared with one more than its value", { "deadlock" }, off_by(1), "spins until the global word" },
    { "the counter compared with one less than its value", { "deadlock", "unfilled", "overwrite" }, off_by(-1) },
  }
  for _, c in ipairs(KERNELS) do
    for _, at in ipairs { TILE_LEVEL, NVVM_LEVEL } do
      for _, b in ipairs(BUGS) do
        local what, kinds, mutate, msg = b[1], b[2], b[3], b[4]
        it(("blames %s for %s: %s"):format(PASSES[at], what, c.name), function()
          local r = PH.blamed(c.build(), { grid = c.grid, args = c.args(), max_states = 2000, max_work = 30000000 }, at,
                              PASSES[at], mutate)
          PH.assert_kind(r, kinds)
          if msg then assert.matches(msg, r.report, 1, true) end
          for _, step in ipairs(r.trace) do
            assert(step:match "^[%w_]+ warp %d+ %(CTA %d%): [%w_.]+ at [%w_/]+%.lua:%d+$",
                   "a step does not name its warp, CTA, op and line: " .. step)
          end
        end)
      end
    end
  end
end)

describe("the stdlib GEMM's split-K fixup", function()
  -- 128 x 64 x 512 in 2 splits on 2 CTAs: the tile's two pieces, the second the finisher
  local cfg = { m = 128, n = 64, k = 512, bn = 64, stages = 2, schedule = "splitk", splits = 2, sms = 2 }
  local function build()
    local g = tl.gemm.build(cfg)
    local m = g.kernel.op:parent()
    while m:name() ~= "module" do m = m:parent() end
    local args = { { bytes = cfg.m * cfg.k * 2, shape = { cfg.m, cfg.k } },
                   { bytes = cfg.n * cfg.k * 2, shape = { cfg.n, cfg.k } },
                   { bytes = cfg.m * cfg.n * 2, shape = { cfg.m, cfg.n } }, { bytes = g.workspace_bytes } }
    return ops(m, "tile.kernel")[1], g.grid, args
  end
  -- every stage of the ptx pipeline (the nvvm TMA and wgmma of emulate_nvvm_mma.lua included)
  local PIPE = nil

  it("checks clean with its generic barrier lowered, at every stage of the ptx pipeline", function()
    local k, grid, args = build()
    assert.are.equal(2, grid)
    local r = tl.check_lowering(k, { grid = grid, args = args, pipeline = PIPE, max_states = 2000, max_work = 6000000 })
    assert(r.ok, r.report)
    print("\n  " .. r.report)
  end)

  it("blames convert-cutlass-to-nvvm for the finisher's wait deleted", function()
    local k, grid, args = build()
    local r = tl.check_lowering(k, { grid = grid, args = args, pipeline = PIPE, max_states = 2000,
      after_pass = function(_, i, kop)
        if i == TILE_LEVEL then
          for _, w in ipairs(ops(kop, "scf.while")) do
            for _, o in ipairs(w:region(1):blocks()[1]:ops()) do
              if o:name() == "tile.load" or o:name() == "tile.atomic_cas" then
                w:erase()
                break
              end
            end
          end
        end
      end })
    assert.is_false(r.ok, "the mutant passed")
    assert.are.equal("convert-cutlass-to-nvvm", r.broken_by, r.report)
    assert(r.violation.kind == "unfilled" or r.violation.kind == "overwrite", r.report)
    assert.matches("global bytes", r.report, 1, true)
  end)
end)

describe("bulk stores in the global race check", function()
  local c = cases.rcb
  local function args(src) return { src, { bytes = #src }, #src } end
  -- every CTA takes the chunks of CTA 0 (its block id made 0): both load and
  -- bulk-store the same chunks, each CTA on its own without an overlap
  local function same_chunks(name)
    return function(kop)
      for _, o in ipairs(ops(kop, name)) do
        local v = o:result(1)
        o:result(1):replace_all_uses(const(o, 0, v:type()):result(1))
      end
    end
  end

  it("reports nothing on the bulk-store ring copy at every stage (2 CTAs)", function()
    local src = bytes(c.n, 4)
    local r = tl.check_lowering(c.build(), { grid = 2, args = args(src) })
    assert(r.ok, r.report)
  end)

  for _, t in ipairs { { TILE_LEVEL, "tile.block_id", "tile.bulk_copy_s2g" },
                       { NVVM_LEVEL, "nvvm.read.ptx.sreg.ctaid.x", "nvvm.cp.async.bulk.global.shared.cta" } } do
    it(("catches two CTAs bulk-storing one chunk (%s)"):format(t[3]), function()
      local done = false
      local r = tl.check_lowering(c.build(), { grid = 2, args = args(bytes(c.n, 4)), after_pass = function(_, i, kop)
        if i == t[1] then
          same_chunks(t[2])(kop)
          done = true
        end
      end })
      assert.is_true(done)
      assert.is_false(r.ok, "the mutant passed")
      assert.are.equal(PASSES[t[1]], r.broken_by, r.report)
      assert.are.equal("overwrite", r.violation.kind, r.report)
      assert.matches("bulk store %(from consumer warp 1 %(CTA 1%)%) at examples/ring_copy.lua:%d+ writes global bytes "
                     .. "%[0x%x+, 0x%x+%) that bulk store %(from consumer warp 1 %(CTA 0%)%) wrote", r.report)
    end)
  end
end)
