-- A grouped GEMM (mixture of experts) as a tile program
-- (examples/tile_gemm_grouped.lua): the groups' rows contiguous in A, each
-- from a multiple of 128; Expert[b] in device memory names row block b's
-- group, which the producer loads (a single-element tile, tl.extract) to pick
-- B's rank-3 tile. tile-to-ptx gives a global load of the expert before the
-- TMA copies of three coordinates; on the emulator the lowered kernel computes
-- every group as the CPU does, bit for bit (small integers), with skewed and
-- empty groups, on the static persistent scheduler and on the dynamic one
-- (schedule = "dynamic": ids claimed with an atomic add on the workspace's
-- counter, handed to the consumers through a ring of ids in shared memory,
-- the counter back to 0 at the end); the protocol checker proves the dynamic
-- kernel over the orders of the CTAs' claims and catches a consumer that reads
-- the claimed id before the producer's arrive, and a counter reset before the
-- launch's last claim; a tile program that extracts from a larger tile outside
-- a compute agent is refused.
local tl = require "tilua"
local PH = dofile "spec/protocol_helper.lua"

local ex = assert(loadfile "examples/tile_gemm_grouped.lua")("--library")

local function a_value(i, k) return ((i * 7 + k * 3) % 5) - 2 end
local function b_value(j, k) return ((j * 5 + k * 11 + 1) % 3) - 1 end

describe("a grouped GEMM (experts' rows contiguous, the expert of a block read from memory)", function()
  for _, schedule in ipairs { "persistent", "dynamic" } do
    it(("lowers to a global load of the block's expert and TMA copies of B at it (schedule %s); ptxas takes it"):format(schedule), function()
      local k = ex.build(schedule)
      local ptx = k:compile()
      local params = { "map:A", "map:B", "map:C", "ptr:Expert", "dim:Expert:0", "arg:K", "programs:x", "programs:y" }
      if schedule == "dynamic" then params[#params + 1] = "workspace" end -- the claims' counter
      assert.same(params, k:lowered_op():attr "tileas.params")
      assert.equal(schedule == "dynamic" and "dynamic" or nil, k:lowered_op():attr("tileas.launch").schedule)
      assert.matches("ld%.global%.b32", ptx)
      assert.matches("cp.async.bulk.tensor.3d.shared::cluster.global", ptx, nil, true)
      -- the claims: an atomic add, the last claim's exchange back to 0; the static scheduler has none
      local claims = select(2, ptx:gsub("atom%.gpu%.global%.add%.u32", ""))
      assert.equal(schedule == "dynamic" and 2 or 0, claims) -- the first claim, the next
      assert.equal(schedule == "dynamic", ptx:find("atom.gpu.global.exch.b32", 1, true) ~= nil)
      local ok, log = tl.ptxas(ptx)
      if ok == nil then pending("ptxas not found: " .. log) return end
      assert(ok, log)
    end)
  end

  -- the problem of the emulator's runs: groups of 130, 0 and 60 rows
  local sizes = { 130, 0, 60 }
  local first, blocks, rows = ex.layout(sizes)
  local G, N, K = #sizes, 100, 72
  local A, ab = PH.matrix(rows, K, a_value)
  local B, bb = PH.matrix(G * N, K, function(j, kk) return b_value(j, kk) * (j // N + 1) end) -- each expert its own B
  local function problem(kop)
    local eb = {}
    for i, g in ipairs(blocks) do eb[i] = string.pack("<i4", g) end
    return PH.params_args(kop, {
      ["map:A"] = { data = ab, shape = { rows, K } }, ["map:B"] = { data = bb, shape = { G, N, K } },
      ["map:C"] = { bytes = rows * N * 2, shape = { rows, N } }, ["ptr:Expert"] = table.concat(eb), ["dim:Expert:0"] = #blocks,
      ["arg:K"] = K, ["programs:x"] = #blocks, ["programs:y"] = 1, workspace = { bytes = 4 } })
  end

  -- C's bytes from an emulator's run against the CPU's -> the count of mismatches, the first
  local function mismatches(out)
    local bad, first_bad = 0, nil
    for g = 1, G do
      for i = first[g], first[g] + sizes[g] - 1 do
        for j = 0, N - 1 do
          local s = 0
          for kk = 0, K - 1 do s = s + A[i * K + kk] * B[((g - 1) * N + j) * K + kk] end
          local got = string.unpack("<f", string.pack("<I4", (string.unpack("<I2", out, 1 + 2 * (i * N + j))) << 16))
          if got ~= s then
            bad = bad + 1
            first_bad = first_bad or ("C[%d, %d] (group %d) = %g, want %g"):format(i, j, g - 1, got, s)
          end
        end
      end
    end
    return bad, first_bad
  end

  it("groups of 130, 0 and 60 rows, N 100, K 72, on 2 CTAs, static and dynamic claims: the CPU reference, bit for bit", function()
    assert.same({ 0, 0, 2 }, blocks)
    for _, run in ipairs { { "persistent", 9 }, { "dynamic", 9 }, { "dynamic", 10 }, { "dynamic", 11 } } do
      local kop = PH.lowered_tile(ex.build(run[1]))
      local args, at = problem(kop)
      local r = tl.emulate(kop, { grid = 2, args = args, policy = "random", seed = run[2] })
      assert(r.ok, r.report)
      local bad, first_bad = mismatches(r.read(at["map:C"]))
      assert.equal(0, bad, first_bad)
      -- the launch's last claim put the counter back: the next launch starts from 0
      if at.workspace then assert.equal(0, string.unpack("<i4", r.read(at.workspace))) end
    end
  end)

  -- the protocol check of a lowered kernel on 2 CTAs (global buffers by size
  -- only), every order of the CTAs' atomic claims explored
  local function check(kop)
    local args = problem(kop)
    args[1], args[2] = { bytes = rows * K * 2, shape = { rows, K } }, { bytes = G * N * K * 2, shape = { G, N, K } }
    return tl.verify_protocol(kop, { grid = 2, args = args, claims = "dynamic", max_states = 20000, max_seconds = 120 })
  end

  it("the protocol check proves the dynamic scheduler over every order of the CTAs' claims", function()
    local kop = PH.lowered_tile(ex.build("dynamic"))
    local dynamic = check(kop)
    assert(dynamic.ok, dynamic.report)
    -- a claim is a step on the counter's word: which CTA gets which program is explored; without
    -- claims = "dynamic" (the check after every pass) the claims run in the order the warps do
    local args = problem(kop)
    args[1], args[2] = { bytes = rows * K * 2, shape = { rows, K } }, { bytes = G * N * K * 2, shape = { G, N, K } }
    local one = tl.verify_protocol(kop, { grid = 2, args = args, max_states = 20000, max_seconds = 120 })
    assert(one.ok, one.report)
    assert.is_true(dynamic.runs > one.runs, ("%d runs, one order %d"):format(dynamic.runs, one.runs))
  end)

  it("catches a consumer that reads the claimed id before the producer's arrive (the wait after the read)", function()
    local kop = PH.lowered_tile(ex.build("dynamic"))
    local ids, wait -- the ring of ids: the pipeline without transaction bytes; the consumers' first wait on it
    kop:walk(function(o)
      if o:name() == "cutlass.pipeline.init" and not o:attr "transaction_bytes" then ids = o:operand(1) end
    end)
    kop:walk(function(o)
      if not wait and o:name() == "cutlass.pipeline.consumer_wait" and o:operand(1) == ids then wait = o end
    end)
    local read = wait:next():next():next() -- index, the slot's address, its load
    assert.equal("tile.load", read:name())
    wait:move_before(read:next())
    local r = check(kop)
    assert.is_false(r.ok)
    assert.equal("unfilled", r.violation.kind)
    assert.matches("consumer warp 4 %(CTA 0%).-reads shared bytes", r.report)
  end)

  it("catches a counter reset by the first claim past the end, not the launch's last (a program claimed twice)", function()
    local kop = PH.lowered_tile(ex.build("dynamic"))
    local n = 0
    kop:walk(function(o) -- the reset's test id == programs + workers - 1 made id == programs
      local last = o:name() == "arith.cmpi" and o:attr "predicate" == "eq" and o:operand(2):def()
      if last and last:name() == "arith.subi" then
        o:set_operand(2, last:operand(1):def():operand(1))
        n = n + 1
      end
    end)
    assert.equal(2, n) -- the first claim's test and the loop's
    local r = check(kop)
    assert.is_false(r.ok)
    assert.equal("overwrite", r.violation.kind) -- another CTA claims program 0 again and stores its tile too
    assert.matches("tma store %(from consumer warp 4 %(CTA 1%)%).-that tma store %(from consumer warp 4 %(CTA 0%)%)", r.report)
  end)

  it("the dynamic schedule: no options; refused without a producer agent (a program without a dot)", function()
    tl.new_module()
    local ok, err = pcall(tl.tile_kernel, "t", { params = { X = tl.tensor(tl.f32, 2) }, schedule = { kind = "dynamic", workers = 4 } })
    assert.is_false(ok)
    assert.matches("a dynamic schedule takes no option 'workers'", tostring(err))
    tl.new_module()
    local k = tl.tile_kernel("scale", { params = { X = tl.tensor(tl.f32, 2), Y = tl.tensor(tl.f32, 2) }, schedule = "dynamic" })
    k:define(function(_, p)
      local m = tl.program_id("x")
      tl.store(p.Y, { m, 0 }, tl.load(p.X, { m, 0 }, { 64, 64 }) * 2.0)
    end)
    ok, err = pcall(k.compile, k)
    assert.is_false(ok)
    assert.matches("the dynamic scheduler's claims are made by the producer agent", tostring(err))
  end)

  it("refuses an extract from a tile of more than one element in a GEMM's agents", function()
    tl.new_module()
    local k = tl.tile_kernel("t", { params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 3), C = tl.tensor(tl.bf16, 2),
                                               E = tl.tensor(tl.i32, 1), K = tl.i32 } })
    k:define(function(k, p)
      local m = tl.program_id("x")
      local g = tl.extract(tl.load(p.E, { m }, { 2 }), { 1 })
      local acc = tl.for_tiles(p.K, { tile = 64, stages = 2 }, tl.zeros({ 128, 256 }, tl.f32), function(kk, acc)
        return tl.dot(tl.load(p.A, { m, kk }, { 128, 64 }), tl.load(p.B, { g, 0, kk }, { 256, 64 }), acc)
      end)
      tl.store(p.C, { m, 0 }, acc:cast(tl.bf16))
    end)
    local ok, err = pcall(k.compile, k)
    assert.is_false(ok)
    assert.matches("the producer loads only into rings %(and single elements%)", tostring(err))
  end)
end)
