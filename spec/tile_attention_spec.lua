-- Attention as a tile program (examples/attention.lua) without a GPU: tile-to-ptx
-- lowers it to the FlashAttention-3 design (a producer warpgroup streaming Q once
-- and K, V through rings of their own, two consumer warpgroups taking turns at
-- the dots, S = Q K^T issued an iteration ahead, P from registers, register
-- moves) in PTX that ptxas takes; on the CPU emulator its O and
-- log-sum-exp equal a CPU reference (causal, ragged lengths, grouped-query
-- heads, head dims 64 and 128, CTAs walking several programs); the protocol
-- checker finds nothing wrong in its four pipelines and turns.
local H = dofile "spec/helper.lua"
local PH = dofile "spec/protocol_helper.lua"
local AH = dofile "spec/attention_helper.lua"
local tl = require "tilua"

local example = assert(loadfile "examples/attention.lua")("--library")

local function args_of(kop, c, bytes) return AH.tile_args(PH, kop, c, bytes) end

local function problem(o)
  local c = { b = o.b or 1, h = o.h or 2, hkv = o.hkv or 1, sq = o.sq, skv = o.skv, d = o.d, causal = o.causal, grid = o.grid }
  c.scale = 1 / math.sqrt(c.d)
  return c
end

-- The lowered kernel kop on the CPU emulator (c.grid CTAs, the scheduling
-- policy's seed) equals a CPU reference on problem c's inputs of seed `seed`.
local function emulated_equals_cpu(kop, c, seed, policy_seed)
  local x, bytes = AH.inputs(c, seed)
  local args, at = args_of(kop, c, bytes)
  local r = tl.emulate(kop, { grid = c.grid, args = args, max_steps = 1e9, policy = "random", seed = policy_seed })
  assert(r.ok, r.report)
  local worst, worstl, bad = AH.compare(c, x, r.read(at["map:O"]), r.read(at["ptr:LSE"]))
  assert.equal(0, bad, ("max |O - ref| %.3g, max |LSE - ref| %.3g"):format(worst, worstl))
end

describe("attention as a tile program (examples/attention.lua)", function()
  it("lowers to the FlashAttention-3 design: PTX that ptxas takes unserialized, registers moved, P from registers", function()
    for _, o in ipairs { { d = 128 }, { d = 64, causal = true }, { d = 256 } } do
      local ptx = example.build(o):compile()
      -- d 128: 128 rows, two consumers; d 64: 192 rows, three (32 + 3 x 160 registers)
      local regs = o.d == 64 and { 32, 160, 128 } or { 40, 232, 168 }
      H.has(ptx, ("setmaxnreg.dec.sync.aligned.u32 %d;"):format(regs[1]))
      H.has(ptx, ("setmaxnreg.inc.sync.aligned.u32 %d;"):format(regs[2]))
      H.has(ptx, (".maxnreg %d"):format(regs[3]))
      -- the producer's TMA loads (a box of 64 columns each): Q, K_0, then K_j before
      -- V_{j-1} in the loop, V_last (K a block ahead of V, as stdlib/attention.lua's)
      local _, loads = ptx:gsub("cp%.async%.bulk%.tensor%.4d%.shared::cluster%.global%.tile%.mbarrier::complete_tx::bytes", "")
      assert.equal(5 * o.d // 64, loads)
      H.has(ptx, "stmatrix.sync.aligned")
      -- P V: the A operand a vector of 4 registers, not a descriptor; at d <= 128 its N
      -- is d + 8, the rows' sums by the GEMM (sums.lua: V's stages a box of ones more)
      local n = o.d + (o.d <= 128 and 8 or 0)
      H.has(ptx, ("wgmma.mma_async.sync.aligned.m64n%dk16.f32.bf16.bf16"):format(n))
      assert.truthy(ptx:find("m64n" .. n .. "k16%.f32%.bf16%.bf16 {[^}]*}, {%%r%d+, %%r%d+, %%r%d+, %%r%d+}"),
                    "no wgmma with A from registers")
      if o.d <= 128 then -- (no row sums by FADD: the log-sum-exp's two adds only; 256: the sums' 2 x 32 a block)
        assert.equal(2, select(2, ptx:gsub("add%.rn%.f32", "")))
      end
      H.has(ptx, "cvt.rn.bf16x2.f32")
      H.assert_ptxas_fast(ptx) -- (P's registers written while the last P V ran serialized every wgmma)
    end
  end)

  local CASES = {
    { sq = 200, skv = 200, d = 64, causal = true, grid = 2 }, -- three consumers, each its own rows of the diagonal; a block of 8 rows
    { sq = 200, skv = 130, d = 128, grid = 2 },
    { b = 2, h = 2, hkv = 1, sq = 100, skv = 77, d = 64, grid = 1 }, -- one CTA walks 4 programs (d64: the split
    -- tail by default, 4 whole rounds, no unit tile; the persistent form below, o.split = 0)
    { sq = 260, skv = 260, d = 128, causal = true, grid = 3 },
    { sq = 70, skv = 130, d = 256, grid = 1 }, -- keys in tiles of 64
  }
  for _, o in ipairs(CASES) do
    local c = problem(o)
    it(("on the CPU emulator equals a CPU reference: %d x %d heads (%d), %d x %d, d %d%s, %d CTAs"):format(
         c.b, c.h, c.hkv, c.sq, c.skv, c.d, c.causal and ", causal" or "", c.grid), function()
      emulated_equals_cpu(PH.lowered_tile(example.build { d = c.d, causal = c.causal }), c, 11 + c.d + c.sq, 3)
    end)
  end

  it("in s16tattn-2's form (the old arithmetic, o.fold = false: the factor exp2((m_old - m_new) c), no guard; tl.options.softmax_rows on, max_chain by its rule at d128, forced at d64) on the CPU emulator equals a CPU reference", function()
    local ok, err = pcall(function()
      for _, o in ipairs { { sq = 200, skv = 130, d = 128, grid = 2 }, { sq = 200, skv = 200, d = 64, causal = true, grid = 2, chain = true } } do
        tl.options.softmax_rows, tl.options.max_chain = true, o.chain
        local c = problem(o)
        emulated_equals_cpu(PH.lowered_tile(example.build { d = c.d, causal = c.causal, fold = false }), c, 13 + c.d, 3)
      end
    end)
    tl.options.softmax_rows, tl.options.max_chain = nil, nil
    assert(ok, err)
  end)

  -- The -inf guard: the program's masks keep key 0 in every row (non-causal and
  -- causal), so no row's scores are all -inf in its first key tile; scores of -inf
  -- from the data are: Q's first column 1 and K's -inf for the keys of the first
  -- tile (128), every row's first tile all -inf.
  it("a row whose scores in its first key tile are all -inf: with the -inf guard (the default) P and the factor there are 0 and O, the LSE the softmax over its other keys; without it (o.guard = false) and with the old arithmetic (o.fold = false) NaN", function()
    local VV = require "tilua.emulate.values"
    local enc = VV.float16.enc.bf16
    local c = problem { sq = 70, skv = 200, d = 128, grid = 1 }
    local x, bytes = AH.inputs(c, 29)
    local function pack(vals)
      local t = {}
      for i, v in ipairs(vals) do t[i] = string.pack("<I2", enc(v)) end
      return table.concat(t)
    end
    for r = 0, c.b * c.h * c.sq - 1 do x.Q[r * c.d + 1] = 1 end
    for bh = 0, c.b * c.hkv - 1 do
      for j = 0, 127 do x.K[(bh * c.skv + j) * c.d + 1] = -math.huge end
    end
    bytes.q, bytes.k = pack(x.Q), pack(x.K)
    for _, form in ipairs { {}, { guard = false }, { fold = false } } do
      local kop = PH.lowered_tile(example.build { d = c.d, fold = form.fold, guard = form.guard })
      local args, at = args_of(kop, c, bytes)
      local r = tl.emulate(kop, { grid = c.grid, args = args, max_steps = 1e9, policy = "random", seed = 3 })
      assert(r.ok, r.report)
      local ob = r.read(at["map:O"])
      local worst, worstl, bad = AH.compare(c, x, ob, r.read(at["ptr:LSE"]))
      local o0 = VV.float16.dec.bf16(string.unpack("<I2", ob, 1))
      if next(form) then
        assert.is_true(o0 ~= o0, "O[0] not NaN: " .. o0) -- (-inf - -inf in P's exp2 and the factor)
        assert.equal(c.b * c.h * c.sq * (c.d + 1), bad)
      else
        assert.equal(0, bad, ("max |O - ref| %.3g, max |LSE - ref| %.3g"):format(worst, worstl))
      end
    end
  end)

  it("the data-parallel schedule: a CTA a program (the launch's grid), each its loop once; on the CPU emulator equals a CPU reference", function()
    tl.new_module()
    local ok, err = pcall(tl.tile_kernel, "t", { params = { X = tl.tensor(tl.f32, 2) }, schedule = { kind = "data_parallel", workers = 4 } })
    assert.is_false(ok)
    assert.matches("a data%-parallel schedule takes no option 'workers'", tostring(err))
    local c = problem { sq = 200, skv = 200, d = 64, causal = true, grid = 4 } -- 2 heads x 2 row blocks: 4 programs, 4 CTAs
    local k = example.build { d = c.d, causal = true, schedule = "data_parallel" }
    local kop = PH.lowered_tile(k)
    assert.equal("data_parallel", kop:attr("tileas.launch").schedule)
    local px, py, pz = { "programs", 1 }, { "programs", 2 }, { "programs", 3 }
    k:compile()
    assert.same({ "mul", { "mul", { "mul", px, py }, pz }, 1 }, tl.launch_info(k).recipe.grid[1])
    emulated_equals_cpu(kop, c, 7, 5)
  end)

  -- The split tail (schedule = "split_tail", o.split; convert-tileas-to-cutlass's split_tail.lua):
  -- whole programs in whole rounds of the CTAs, then the programs' rest a consumer replica's 64
  -- rows a tile, the others walking the stages. 1 x 2 heads, 200 rows (2 programs of 192 a head: 6
  -- units, 4 with rows, the last ragged) on 3 CTAs: 3 whole programs, then 3 unit tiles (one with
  -- rows 192-199, two past the rows); 2 x 2 heads, 300 rows on 5 CTAs: 5 whole, 9 unit tiles.
  for _, o in ipairs { { sq = 200, skv = 200, d = 64, grid = 3 }, { b = 2, h = 2, hkv = 1, sq = 300, skv = 130, d = 64, grid = 5 } } do
    local c = problem(o)
    it(("the split tail on the CPU emulator equals a CPU reference: %d x %d heads, %d x %d, d 64, %d CTAs"):format(
         c.b, c.h, c.sq, c.skv, c.grid), function()
      local kop = PH.lowered_tile(example.build { d = 64, split = true })
      assert.equal("split_tail", kop:attr("tileas.launch").schedule)
      emulated_equals_cpu(kop, c, 17 + c.sq, 3)
    end)
  end

  it("the split tail is the default at d64 non-causal with programs of 192 rows (measured faster there: s17split-1), not at d128, causal, other rows or with o.split = 0; d64 without it (o.split = 0, the persistent schedule) on the CPU emulator equals a CPU reference", function()
    local function kind(o) local a = example.build(o).op:attr("tileas.schedule") return a and a.kind or "persistent" end
    assert.equal("split_tail", kind { d = 64 })
    assert.equal("persistent", kind { d = 64, split = 0 })
    assert.equal("persistent", kind { d = 64, split = false })
    assert.equal("persistent", kind { d = 64, bm = 128 })
    assert.equal("persistent", kind { d = 128 })
    assert.equal("split_tail", kind { d = 128, split = 1 })
    assert.equal("dynamic", kind { d = 64, causal = true })
    assert.equal("data_parallel", kind { d = 64, schedule = "data_parallel" })
    local c = problem { b = 2, h = 2, hkv = 1, sq = 100, skv = 77, d = 64, grid = 1 } -- one CTA walks 4 programs
    emulated_equals_cpu(PH.lowered_tile(example.build { d = 64, split = 0 }), c, 11 + c.d + c.sq, 3)
  end)

  it("the split tail: PTX that ptxas takes unserialized, its launch on the CTAs asked for at most, the protocol check clean with unit tiles; refused where it has no loop of chained dots", function()
    local k = example.build { d = 64, split = true, workers = 3 }
    H.assert_ptxas_fast(k:compile())
    local px, py = { "programs", 1 }, { "programs", 2 }
    assert.same({ "max", 1, { "mul", { "div", { "min", 3, { "mul", { "mul", { "mul", px, py }, { "programs", 3 } }, 1 } }, 1 }, 1 } },
                tl.launch_info(k).recipe.grid[1])
    -- 400 rows of one head on 2 CTAs: 2 whole programs, then the third's 3 units, a tile each
    local c = problem { h = 1, sq = 400, skv = 200, d = 64 }
    local kop = PH.lowered_tile(example.build { d = 64, split = true })
    local _, bytes = AH.inputs(c, 5)
    local r = tl.verify_protocol(kop, { grid = 2, args = (args_of(kop, c, bytes)), max_states = 3000, max_seconds = 300 })
    assert(r.ok, r.report)
    tl.new_module()
    local ok, err = pcall(tl.tile_kernel, "t", { params = { X = tl.tensor(tl.f32, 2) }, schedule = { kind = "split_tail", workers = 0 } })
    assert.is_false(ok)
    assert.matches("workers %(a split%-tail schedule's CTAs at most", tostring(err))
    tl.new_module()
    local g = tl.tile_kernel("g", { params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2), C = tl.tensor(tl.bf16, 2), K = tl.i32 },
                                    schedule = "split_tail" })
    g:define(function(_, p)
      local acc = tl.for_tiles(p.K, { tile = 64, stages = 3 }, tl.zeros({ 128, 128 }, tl.f32), function(kk, acc)
        return tl.dot(tl.load(p.A, { tl.program_id("x"), kk }, { 128, 64 }), tl.load(p.B, { tl.program_id("y"), kk }, { 128, 64 }), acc)
      end)
      tl.store(p.C, { tl.program_id("x"), tl.program_id("y") }, acc:cast(tl.bf16))
    end)
    ok, err = pcall(PH.lowered_tile, g)
    assert.is_false(ok)
    assert.matches("the split%-tail schedule lowers a loop of chained dots issued ahead", tostring(err))
  end)

  it("passes the protocol check: no deadlock, stage or phase error in its pipelines and turns", function()
    local c = problem { sq = 64, skv = 200, d = 64, grid = 1 }
    local kop = PH.lowered_tile(example.build { d = c.d })
    local _, bytes = AH.inputs(c, 5)
    local r = tl.verify_protocol(kop, { grid = 1, args = (args_of(kop, c, bytes)), max_states = 3000, max_seconds = 300 })
    assert(r.ok, r.report)
  end)
end)
