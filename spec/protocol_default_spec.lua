-- The protocol check every compile runs (docs/protocol.md, "The check every
-- compile runs"): k:compile and `tilua script.lua` check the kernel as written
-- within a budget and refuse a broken pipeline with its counterexample;
-- tl.options.check_protocol = false, --no-check-protocol and
-- TILUA_CHECK_PROTOCOL=0 turn it off; a kernel over its budget gets a note.
local H = dofile "spec/helper.lua"
local P = dofile "spec/protocol_helper.lua"
local tl = require "tilua"

-- The example's cooperative ring, with every op `deleted` (a pipeline op's
-- name) erased.
local function ring(deleted)
  local k = P.prc.build { stages = 4, chunk = 16384, consumer_warps = 4, name = "pipeline_ring_copy" }
  if deleted then
    local ops = P.ops(k, "cutlass.pipeline." .. deleted)
    assert(#ops > 0, deleted)
    for _, op in ipairs(ops) do op:erase() end
  end
  return k
end

-- f with tl.options.check_protocol = mode (the specs' environment sets "passes").
local function with_mode(mode, f)
  local saved, budget = tl.options.check_protocol, tl.options.check_protocol_budget
  tl.options.check_protocol = mode
  local ok, err = pcall(f)
  tl.options.check_protocol, tl.options.check_protocol_budget = saved, budget
  if not ok then error(err, 0) end
end

-- the line each report names: the commit that over-arrives, the read of an
-- unfilled stage, the acquire that waits forever
local line = {
  producer_acquire = H.line_of("examples/pipeline_ring_copy.lua", "pipe:producer_commit"),
  consumer_wait = H.line_of("examples/pipeline_ring_copy.lua", "local x = (from + u * CT * 16)"),
  consumer_release = H.line_of("examples/pipeline_ring_copy.lua", "pipe:producer_acquire"),
}

-- what each report says of the culprit
local culprit = {
  producer_acquire = "has no arrival left",
  consumer_wait = "a wait for the fill is missing before the read at examples/pipeline_ring_copy.lua:"
    .. H.line_of("examples/pipeline_ring_copy.lua", "local x = (from + u * CT * 16)"),
  consumer_release = "nothing ever arrived on empty[0] of the pipeline at examples/pipeline_ring_copy.lua:"
    .. H.line_of("examples/pipeline_ring_copy.lua", "local pipe = ") .. " (an arrive on it is missing, or the wait at examples/pipeline_ring_copy.lua:"
    .. line.consumer_release .. " waits on the wrong barrier or phase; a pipeline's empty barrier: consumer_release arrives on it)",
}

describe("k:compile's protocol check (on by default)", function()
  it("accepts the example's ring", function()
    with_mode(nil, function()
      local ptx = ring():compile()
      assert.is_truthy(ptx:find(".entry pipeline_ring_copy", 1, true))
    end)
  end)

  for _, case in ipairs {
    { "producer_acquire", "arrive_count" },
    { "consumer_wait", "unfilled" },
    { "consumer_release", "deadlock" },
  } do
    local deleted, kind = case[1], case[2]
    it(("refuses the ring with its %s deleted, with its counterexample"):format(deleted), function()
      with_mode(nil, function()
        local k = ring(deleted)
        local ok, err = pcall(k.compile, k)
        assert.is_false(ok)
        assert.matches("^examples/pipeline_ring_copy.lua:%d+: protocol violation in kernel 'pipeline_ring_copy'", err)
        assert.matches(": " .. kind .. "\n", err, 1, true)
        assert.matches("counterexample %(%d+ steps", err)
        assert.matches("examples/pipeline_ring_copy.lua:" .. line[deleted], err, 1, true)
        assert.matches(culprit[deleted], err, 1, true)
        assert.is_nil(k.ptx)
      end)
    end)
  end

  it("is off with tl.options.check_protocol = false", function()
    with_mode(false, function()
      local ptx = ring("consumer_wait"):compile()
      assert.is_truthy(ptx:find(".entry pipeline_ring_copy", 1, true))
    end)
  end)

  it("checks tl.options.check_protocol and its budget (where they are set)", function()
    local ok, err = pcall(function() tl.options.check_protocol = "yes" end)
    assert.is_false(ok)
    assert.matches('tl.options.check_protocol must be nil, true, false or "passes"', err, 1, true)
    ok, err = pcall(function() tl.options.check_protocol_budget = -1 end)
    assert.is_false(ok)
    assert.matches("tl.options.check_protocol_budget must be nil or seconds", err, 1, true)
    ok, err = pcall(function() tl.options.check_protocol_work = 0.5 end)
    assert.is_false(ok)
    assert.matches("tl.options.check_protocol_work must be nil or emulator ops, an integer in [1, 10^12]", err, 1, true)
  end)
end)

describe("tilua script.lua's protocol check", function()
  local script = H.temp([[
local tl = require "tilua"
local P = dofile "spec/protocol_helper.lua"
local k = P.prc.build { stages = 4, chunk = 16384, consumer_warps = 4, name = "pipeline_ring_copy" }
for _, op in ipairs(P.ops(k, "cutlass.pipeline.consumer_release")) do op:erase() end
k:compile()
print("compiled")
]], ".lua")

  it("refuses a broken pipeline by default, exit 1 and the counterexample on stderr", function()
    local out, err, code = H.tilua_env({ TILUA_CHECK_PROTOCOL = "" }, { script }, 120)
    assert.are.equal(1, code)
    H.lacks(out, "compiled")
    H.has(err, "protocol violation in kernel 'pipeline_ring_copy'")
    H.has(err, "deadlock")
    H.has(err, "counterexample")
  end)

  it("compiles it with --no-check-protocol and with TILUA_CHECK_PROTOCOL=0", function()
    local out, _, code = H.tilua_env({ TILUA_CHECK_PROTOCOL = "" }, { "--no-check-protocol", script }, 120)
    assert.are.equal(0, code)
    H.has(out, "compiled")
    out, _, code = H.tilua_env({ TILUA_CHECK_PROTOCOL = "0" }, { script }, 120)
    assert.are.equal(0, code)
    H.has(out, "compiled")
  end)

  -- the budget is emulator work (the same note on every machine), and seconds where set
  for _, c in ipairs {
    { "tl.options.check_protocol_work = 1000", "%(1000 emulator ops%) on the derived inputs on one cluster: 0 states in 0 runs" },
    { "tl.options.check_protocol_budget = 1e-9", "%(3000000 emulator ops, 1e%-09 s%)" },
  } do
    it("says in one line when a kernel is not proven within its budget: " .. c[1], function()
      local s = H.temp(([[
local tl = require "tilua"
local P = dofile "spec/protocol_helper.lua"
%s
P.prc.build { stages = 4, chunk = 16384, consumer_warps = 4, name = "pipeline_ring_copy" }:compile()
print("compiled")
]]):format(c[1]), ".lua")
      local out, err, code = H.tilua_env({ TILUA_CHECK_PROTOCOL = "" }, { s }, 120)
      os.remove(s)
      assert.are.equal(0, code)
      H.has(out, "compiled")
      assert.matches("tilua: note: the protocol check of kernel 'pipeline_ring_copy' not %a+ within its budget "
        .. c[2] .. "[^\n]*%(checked: [^\n]*%)\n", err)
    end)
  end
end)

describe("the configurations the check of every compile tries", function()
  local cc = require "tilua.emulate.compile_check"

  it("finds a bug that needs two CTAs: every CTA stores the same bytes (a kernel for one CTA says so: grid = 1)", function()
    local function same_bytes(name, grid)
      tl.new_module()
      local k = tl.kernel(name, { params = { { "out", tl.ptr(tl.i32) }, { "n", tl.i32 } }, block = 64, grid = grid })
      k:define(function(_, p)
        local t = tl.thread_id()
        tl.if_(t:lt(p.n), function() (p.out + t):store(t) end) -- the block's offset forgotten
      end)
      return k
    end
    -- it cannot tell its CTAs apart: refused, and the message says how a kernel for one CTA says so
    local ok0, err0 = pcall(cc.run, same_bytes("same_bytes").module, { work = 40000000 })
    assert.is_false(ok0)
    assert.matches("overwrite", err0, 1, true)
    assert.matches("found on 2 CTAs (two clusters)", err0, 1, true)
    assert.matches("its CTAs cannot tell themselves apart: a kernel for one CTA says so (tl.kernel{grid = 1}", err0, 1, true)
    -- the same kernel declared for a grid of one: proven on that grid (and a ragged size on it), nothing noted
    local notes = {}
    local res = cc.run(same_bytes("one_cta", 1).module, { work = 40000000, note = function(l) notes[#notes + 1] = l end })
    assert.is_true(res[1].ok)
    assert.are.same({ "the derived inputs on its grid, n = 64", "a ragged size on its grid, n = 92" }, res[1].checked)
    assert.are.same({}, notes)
    -- declared for 2 CTAs, it races again: the declaration is what is checked
    local ok2, err2 = pcall(cc.run, same_bytes("two_ctas", 2).module, { work = 40000000 })
    assert.is_false(ok2)
    assert.matches("overwrite", err2, 1, true)
    assert.matches("grid 2", err2, 1, true)
    -- the same kernel reading its CTA's index, with the offset still forgotten: refused
    tl.new_module()
    local k2 = tl.kernel("same_bytes2", { params = { { "out", tl.ptr(tl.i32) }, { "n", tl.i32 } }, block = 64 })
    k2:define(function(_, p)
      local t = tl.thread_id()
      local b = tl.block_id()
      tl.if_(t:lt(p.n), function() (p.out + t):store(t + b * 0) end)
    end)
    local ok, err = pcall(cc.run, k2.module, { work = 40000000 })
    assert.is_false(ok)
    assert.matches("overwrite", err, 1, true)
    assert.matches("found on 2 CTAs (two clusters)", err, 1, true)
  end)

  it("finds a bug that needs a ragged size: a partial last chunk announced as a whole one", function()
    local k = P.rc.build { stages = 2, chunk = 512, consumer_warps = 1, name = "rc_tx" }
    local tx = P.ops(k, "tile.mbarrier_arrive_expect_tx")[1]
    tl.at(tx:block(), tx, function() tx:set_operand(2, tl.const(512, tl.i32)) end)
    local ok, err = pcall(cc.run, k.module, { work = 40000000 })
    assert.is_false(ok)
    assert.matches("tx_bytes", err, 1, true)
    assert.matches("on a ragged size", err, 1, true)
  end)

  it("refuses a race between CTAs that only a ragged size shows (it was only noted before sizes were declared)", function()
    -- each CTA stores its chunk of ceil(n / grid) elements; the last chunk is
    -- shifted back to end at n, so on a size no multiple of the grid it
    -- overlaps its neighbour's: two CTAs store the same words
    tl.new_module()
    local k = tl.kernel("shifted_last_chunk", { params = { { "out", tl.ptr(tl.i32) }, { "n", tl.i32 } }, block = 32 })
    k:define(function(_, p)
      local t, b, g = tl.thread_id(), tl.block_id(), tl.grid_dim()
      local chunk = (p.n + g - 1) // g
      local start = tl.min(b * chunk, p.n - chunk)
      tl.if_(t:lt(chunk), function() (p.out + (start + t)):store(t) end)
    end)
    local ok, err = pcall(cc.run, k.module, { work = 40000000 })
    assert.is_false(ok)
    assert.matches("overwrite", err, 1, true)
    assert.matches("global bytes", err, 1, true)
    assert.matches("found on 3 CTAs (three clusters) on a ragged size", err, 1, true)
    assert.matches("a kernel that accepts only some sizes or grids says so (tl.kernel{sizes = ", err, 1, true)
  end)

  it("stays within the sizes a kernel declares (kernel_spec.sizes), and refuses what breaks there", function()
    -- one element per thread of the grid, as examples/cluster_dsmem.lua: out[n + i] mirrors out[i]
    local function per_thread(name, sizes, mirror)
      tl.new_module()
      local k = tl.kernel(name, { params = { { "out", tl.ptr(tl.i32) }, { "n", tl.i32 } }, block = 32, sizes = sizes })
      k:define(function(_, p)
        local i = tl.block_id() * 32 + tl.thread_id()
        local mirrored = p.out + p.n
        tl.store(p.out + i, i)
        tl.store(mirrored + mirror(i, p.n), i)
      end)
      return k
    end
    local good = function(i) return i end
    -- undeclared: on the ragged size n is no longer the grid's threads, two CTAs store one word: refused
    local ok0, err0 = pcall(cc.run, per_thread("undeclared", nil, good).module, { work = 40000000 })
    assert.is_false(ok0)
    assert.matches("found on 3 CTAs (three clusters) on a ragged size", err0, 1, true)
    -- declared: proven on its three configurations, n the grid's threads on each
    local notes = {}
    local res = cc.run(per_thread("declared", { n = "grid_threads" }, good).module,
                       { work = 40000000, note = function(l) notes[#notes + 1] = l end })
    assert.is_true(res[1].ok)
    assert.are.same({}, notes)
    assert.are.same("3 CTAs (three clusters) on its declared sizes and otherwise a ragged size, n = 92", res[1].checked[3])
    -- declared, with a bug that only three CTAs show (the mirror is off by one
    -- from thread 64 on: the third CTA's first thread lands on the second
    -- CTA's last word): refused there
    local function off(i) return tl.select(i:lt(64), i, i - 1) end
    local ok1, err1 = pcall(cc.run, per_thread("declared_bug", { n = "grid_threads" }, off).module, { work = 40000000 })
    assert.is_false(ok1)
    assert.matches("overwrite", err1, 1, true)
    assert.matches("found on 3 CTAs (three clusters) on its declared sizes", err1, 1, true)
  end)

  -- every integer parameter is n: the data-parallel attention's b x h x sq / bm
  -- tiles overflow the scheduler's 32-bit ids past a few thousand, and its CTA
  -- does one tile at every size (the Q ring wraps once): checked on the smallest
  -- size with the most laps, noted, not "checked: nothing"
  it("checks a data-parallel kernel at a size its scheduler can plan (the stdlib's causal attention)", function()
    local a = tl.attention.build { b = 2, h = 16, sq = 4096, skv = 4096, d = 64, causal = true }
    assert.equal("data_parallel", a.cfg.schedule)
    local notes = {}
    local res = cc.run(a.kernel.module, { note = function(l) notes[#notes + 1] = l end })
    assert.matches("^the derived inputs on one cluster, n = %d+$", res[1].checked[1])
    assert.is_nil(table.concat(notes, "\n"):find("cannot be planned", 1, true))
    assert.matches("its rings wrap 1 time%(s%), not twice, on the derived inputs on one cluster", notes[1])
  end)

  it("says which configurations it checked", function()
    local res = cc.run(ring().module, { work = 40000000 })
    assert.is_true(res[1].ok)
    assert.are.same({ "the derived inputs on one cluster, n = 131072", "2 CTAs (two clusters), n = 262144",
                      "3 CTAs (three clusters) on a ragged size, n = 349532" }, res[1].checked)
  end)

  -- a GEMM whose problem is a kernel argument (tl.gemm's dynamic forms): its
  -- work grows with M x N x K, and its rings wrap twice with one row of tiles
  -- as with several; the check runs on one of them held at the smallest size
  it("holds one of several integer parameters at the smallest size where the rings still wrap twice (a dynamic GEMM)", function()
    local g = tl.gemm.build { m = 512, n = 512, k = 512, bm = 128, bn = 256, dynamic = true, dtype = "bf16" }
    local kop = require("tilua.emulate.protocol").kernels(g.kernel.module)[1]
    local PR = require "tilua.emulate.protocol"
    local args, desc, n, failure, small = PR.inputs(kop, { work = { left = 40000000, limit = 40000000 } })
    assert.is_nil(failure)
    local i, v = next(small)
    assert.is_nil(next(small, i))
    assert.is_true(i >= 4 and i <= 6 and v < n) -- (A, B, D, then M, N, K)
    assert.equal(v, args[i])
    for j = 4, 6 do if j ~= i then assert.equal(n, args[j]) end end
    assert.matches((", %d"):rep(3):format(args[4], args[5], args[6]) .. "%)$", desc)
    -- the check on them: every ring wrapped twice, no violation, and in less
    -- work than on n for all three
    local function work_of(o)
      local w = { left = 40000000, limit = 40000000 }
      o.work = w
      local r = PR.check(kop, o)
      assert.is_true(r.ok, r.report)
      assert.is_true(r.min_phases >= 2)
      return w.limit - w.left
    end
    local all = {}
    for j, a in ipairs(args) do all[j] = a end
    all[i] = n
    assert.is_true(work_of { args = args } < work_of { args = all } / 2)
  end)
end)

describe("the configurations of a tile program", function()
  local cc = require "tilua.emulate.compile_check"
  -- a tile GEMM whose store forgets the program's index along y (when `bug`):
  -- two programs along y store one tile of C
  local function tile_gemm(bug)
    tl.new_module()
    local k = tl.tile_kernel("tile_gemm_y", {
      params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2), C = tl.tensor(tl.bf16, 2), K = tl.i32 } })
    k:define(function(_, p)
      local pid_m, pid_n = tl.program_id("x"), tl.program_id("y")
      local acc = tl.zeros({ 128, 256 }, tl.f32)
      acc = tl.for_tiles(p.K, { tile = 64, stages = 2 }, acc, function(kk, acc)
        local a = tl.load(p.A, { pid_m, kk }, { 128, 64 })
        local b = tl.load(p.B, { pid_n, kk }, { 256, 64 })
        return tl.dot(a, b, acc)
      end)
      tl.store(p.C, { pid_m, bug and 0 or pid_n }, acc:cast(tl.bf16))
    end)
    return k
  end

  it("tries programs along y where the program reads its index along y", function()
    local res = cc.run(tile_gemm(false).module, { work = 200000000 })
    assert.is_true(res[1].ok)
    assert.are.equal("programs along x and y (2 x 2)", res[1].checked[2]:match "^[^,]*")
    local ok, err = pcall(cc.run, tile_gemm(true).module, { work = 200000000 })
    assert.is_false(ok)
    assert.matches("found on programs along x and y (2 x 2)", err, 1, true)
  end)

  -- a batched tile GEMM (rank-3 tensors, the batch by program_id("z")) whose
  -- store forgets the batch (when `bug`): two programs along z store one tile
  local function batched(bug)
    tl.new_module()
    local k = tl.tile_kernel("tile_gemm_z", {
      params = { A = tl.tensor(tl.bf16, 3), B = tl.tensor(tl.bf16, 3), C = tl.tensor(tl.bf16, 3), K = tl.i32 } })
    k:define(function(_, p)
      local m, n, z = tl.program_id("x"), tl.program_id("y"), tl.program_id("z")
      local acc = tl.for_tiles(p.K, { tile = 64, stages = 2 }, tl.zeros({ 128, 256 }, tl.f32), function(kk, acc)
        return tl.dot(tl.load(p.A, { z, m, kk }, { 128, 64 }), tl.load(p.B, { z, n, kk }, { 256, 64 }), acc)
      end)
      tl.store(p.C, { bug and 0 or z, m, n }, acc:cast(tl.bf16))
    end)
    return k
  end

  it("tries programs along z where the program reads its index along z", function()
    local res = cc.run(batched(false).module, { work = 200000000 })
    assert.is_true(res[1].ok, res[1].why)
    assert.matches("^programs along x, y and z %(2 x 2 x 2%), n = %d+$", res[1].checked[2])
    local ok, err = pcall(cc.run, batched(true).module, { work = 200000000 })
    assert.is_false(ok)
    assert.matches("found on programs along x, y and z (2 x 2 x 2)", err, 1, true)
    assert.matches("programs 2 x 2 x 2", err, 1, true)
  end)
end)

describe("the rings on the inputs the check of every compile derives", function()
  local cc = require "tilua.emulate.compile_check"
  local P = require "tilua.emulate.protocol"

  it("wrap twice in the causal attention programs: more programs along y give the longest row block more key tiles", function()
    local ex = assert(loadfile "examples/attention.lua")("--library")
    local bwd = assert(loadfile "examples/attention_bwd.lua")("--library")
    for _, case in ipairs { { ex.build, false }, { ex.build, true }, { bwd.build_dq, true } } do
      local causal = case[2]
      local k = case[1] { d = 128, causal = causal }
      local r = P.check(k.op, {})
      assert(r.ok, r.report)
      assert.is_true(r.min_phases >= 2, causal and "causal" or "full")
      local notes = {}
      local res = cc.run(k.module, { note = function(l) notes[#notes + 1] = l end })
      assert.is_true(res[1].ok, res[1].why)
      assert.is_nil(res[1].laps)
      assert.are.same({}, notes)
      if case[1] == bwd.build_dq then -- (the program counted from the last row block: 4 of them, the first 4 key tiles long)
        assert.are.same({ 2, 4 }, r.tile.programs)
        assert.are.same({ "the derived inputs on one cluster (programs 2 x 4), n = 384" }, res[1].checked)
      elseif causal then -- (the forward's row blocks counted from TM, an argument: the derived n, its loop as long as a full one)
        assert.are.same({ 2, 1 }, r.tile.programs)
        assert.are.same({ "the derived inputs on one cluster, n = 512", "programs along x and y (2 x 2), n = 512" }, res[1].checked)
      end
    end
  end)

  it("are noted where no size makes them wrap twice (a loop of a fixed two tiles through two stages)", function()
    tl.new_module()
    local k = tl.tile_kernel("one_lap", { params = { A = tl.tensor(tl.f32, 2), O = tl.tensor(tl.f32, 2) } })
    k:define(function(_, p)
      local m = tl.program_id("x")
      local acc = tl.for_tiles(32, { tile = 16, stages = 2 }, tl.zeros({ 16, 16 }), function(j, acc)
        return acc + tl.load(p.A, { m, j }, { 16, 16 })
      end)
      tl.store(p.O, { m, 0 }, acc)
    end)
    local notes = {}
    local res = cc.run(k.module, { note = function(l) notes[#notes + 1] = l end })
    assert.is_true(res[1].ok, res[1].why)
    assert.are.same({ "tilua: note: the protocol check of kernel 'one_lap': its rings wrap 1 time(s), not twice, on the derived inputs on one cluster (no size it tried made them wrap twice; a bug at a ring's second lap may go unseen)" }, notes)
  end)
end)
