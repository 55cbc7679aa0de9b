-- Tile programs (lua/tilua/dsl/tileprog.lua, the tileas dialect): the tile
-- GEMM, a GEMM + bias + relu and softmax(Q K^T) V for one head, built from
-- Lua, printed, parsed back and verified; tile layouts in types; the
-- builders' checks and errors at the script's line.
dofile "spec/helper.lua"
local tl = require "tilua"

local function here(level)
  local info = debug.getinfo((level or 1) + 1, "Sl")
  return info.short_src .. ":" .. info.currentline .. ":"
end

-- The ops of a module by name, in order.
local function ops_named(m, name)
  local out = {}
  m:walk(function(op) if op:name() == name then out[#out + 1] = op end end)
  return out
end

-- Print, parse the text back and print again: the same text, and it verifies.
local function round_trip(m)
  local text = m:print()
  local back = assert(tl.parse(text, { file = "round_trip" }))
  assert(back:verify())
  assert.equal(text, back:print())
  return text
end

-- {=== the three programs of the issue

-- The GEMM: C = A * B^T with B stored [N, K] (K-major, as stdlib/gemm.lua).
local function gemm(opts)
  opts = opts or {}
  tl.new_module()
  local k = tl.tile_kernel("gemm", { params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2),
                                               C = tl.tensor(tl.bf16, 2), bias = tl.tensor(tl.f32, 1),
                                               K = tl.i32 }, cluster = opts.cluster or { 1, 1, 1 } })
  k:define(function(k, p)
    local pid_m, pid_n = tl.program_id("x"), tl.program_id("y")
    local acc = tl.zeros({ 128, 256 }, tl.f32)
    acc = tl.for_tiles(p.K, { tile = 64, stages = 4 }, acc, function(kk, acc)
      local a = tl.load(p.A, { pid_m, kk }, { 128, 64 })
      local b = tl.load(p.B, { pid_n, kk }, { 256, 64 })
      return tl.dot(a, b, acc)
    end)
    if opts.epilogue then
      -- bias of the tile's columns, broadcast over the rows, then relu
      local bias = tl.expand_dim(tl.load(p.bias, { pid_n }, { 256 }), 0)
      acc = tl.maximum(acc + bias, 0.0)
    end
    tl.store(p.C, { pid_m, pid_n }, acc:cast(tl.bf16))
  end)
  return k
end

-- softmax(Q K^T / sqrt(d)) V for one head: one program per 64 rows of Q, the
-- online softmax over 64-row tiles of K and V (S a multiple of 64).
local function attention()
  tl.new_module()
  local BM, BN, D = 64, 64, 64
  local k = tl.tile_kernel("attention", { params = { { "Q", tl.tensor(tl.bf16, 2, { BM, D }) },
                                                     { "K", tl.tensor(tl.bf16, 2, { BN, D }) },
                                                     { "V", tl.tensor(tl.bf16, 2, { BN, D }) },
                                                     { "O", tl.tensor(tl.bf16, 2) }, { "S", tl.i32 } } })
  k:define(function(k, p)
    local pid = tl.program_id()
    local q = tl.load(p.Q, { pid, 0 })
    local m0 = tl.full({ BM }, -math.huge, tl.f32)
    local l0 = tl.zeros({ BM }, tl.f32)
    local acc0 = tl.zeros({ BM, D }, tl.f32)
    local _, l, acc = tl.for_tiles(p.S, BN, m0, l0, acc0, function(j, m, l, acc)
      local s = tl.dot(q, tl.load(p.K, { j, 0 }), { transpose_b = true }) * (1 / math.sqrt(D))
      local m_new = tl.maximum(m, tl.reduce(s, 1, "max"))
      local pr = tl.exp(s - tl.expand_dim(m_new, 1))
      local alpha = tl.exp(m - m_new)
      local l_new = l * alpha + tl.reduce(pr, 1, "add")
      local acc_new = tl.dot(pr:cast(tl.bf16), tl.load(p.V, { j, 0 }), acc * tl.expand_dim(alpha, 1))
      return m_new, l_new, acc_new
    end)
    tl.store(p.O, { pid, 0 }, (acc / tl.expand_dim(l, 1)):cast(tl.bf16))
  end)
  return k
end

-- }===

describe("tile programs", function()
  it("the tile GEMM is a loop of tiled loads and a dot, marked for pipelining", function()
    local k = gemm()
    local text = round_trip(k.module)
    local loops = ops_named(k.module, "scf.for")
    assert.equal(1, #loops)
    assert.same({ stages = 4 }, loops[1]:attr("tileas.pipeline"))
    local dots = ops_named(k.module, "tileas.dot")
    assert.equal(1, #dots)
    assert.equal(true, dots[1]:attr("transpose_b")) -- B loaded as [N, K]
    assert.equal("tile<128x256xf32, rmem>", tostring(dots[1]:result(1):type()))
    assert.equal(2, #ops_named(k.module, "tileas.tiled_load"))
    assert.equal(1, #ops_named(k.module, "tileas.tiled_store"))
    assert.equal(1, #ops_named(k.module, "arith.truncf"))
    assert.equal(90, k.op:attr("target_spec"))
    assert.truthy(text:find("!tileas.tensor<bf16, 2>", 1, true))
    -- the loop runs over ceil(K / 64) tiles of K
    assert.truthy(text:find("arith.divsi", 1, true))
  end)

  it("GEMM + bias + relu: the bias row broadcasts over the tile, relu is maximumf", function()
    local k = gemm { epilogue = true, cluster = { 2, 1, 1 } }
    round_trip(k.module)
    local bc = ops_named(k.module, "tileas.broadcast")
    assert.equal(1, #bc) -- the bias row; 0.0 becomes a splat of the tile's shape
    assert.equal("tile<1x256xf32, rmem>", tostring(bc[1]:operand(1):type()))
    assert.equal("tile<128x256xf32, rmem>", tostring(bc[1]:result(1):type()))
    local relu = ops_named(k.module, "arith.maximumf")
    assert.equal(1, #relu)
    assert.equal("tileas.splat", relu[1]:operand(2):def():name())
    assert.equal(1, #ops_named(k.module, "arith.addf"))
    assert.same({ 2, 1, 1 }, k.op:kernel_spec().cluster)
  end)

  it("softmax(QK^T)V for one head: online softmax in a loop with three carried tiles", function()
    local k = attention()
    round_trip(k.module)
    local loop = ops_named(k.module, "scf.for")[1]
    local types = {}
    for i, r in ipairs(loop:results()) do types[i] = tostring(r:type()) end
    assert.same({ "tile<64xf32, rmem>", "tile<64xf32, rmem>", "tile<64x64xf32, rmem>" }, types)
    assert.equal(2, #ops_named(k.module, "tileas.dot"))
    assert.equal(2, #ops_named(k.module, "tileas.reduce"))
    assert.equal(2, #ops_named(k.module, "tileas.math"))
    local kinds = {}
    for _, r in ipairs(ops_named(k.module, "tileas.reduce")) do kinds[#kinds + 1] = r:attr("kind") end
    assert.same({ "max", "add" }, kinds)
    -- the default tiles of the tensor parameters gave the loads their shapes
    for _, ld in ipairs(ops_named(k.module, "tileas.tiled_load")) do
      assert.equal("tile<64x64xbf16, rmem>", tostring(ld:result(1):type()))
    end
  end)
end)

describe("tile layouts", function()
  it("are part of the tile type: printed last, parsed, uniqued, read back", function()
    local l = { kind = "mma", warps = { 2, 1 }, cta = { 2, 1 } }
    local t = tl.tile(tl.f32, { 128, 256 }, "rmem", l)
    assert.equal('tile<128x256xf32, rmem, {cta = [2, 1], kind = "mma", warps = [2, 1]}>', tostring(t))
    assert.equal(t, tl.tile(tl.f32, { 128, 256 }, "rmem", { warps = { 2, 1 }, kind = "mma", cta = { 2, 1 } }))
    assert.are_not.equal(t, tl.tile(tl.f32, { 128, 256 }))
    assert.same(l, t:layout())
    assert.same(l, t:info().layout)
    assert.is_nil(tl.tile(tl.f32, { 4 }):layout())
    local ok, err = pcall(tl.tile, tl.f32, { 4 }, "rmem", { 1, 2 })
    assert.is_false(ok)
    assert.matches("a tile layout is a dictionary", err)
  end)

  it("go through the textual IR and the verifier", function()
    tl.new_module()
    local k = tl.tile_kernel("lay", { params = { A = tl.tensor(tl.bf16, 2) } })
    k:define(function(k, p)
      local s = tl.load(p.A, { 0, 0 }, { 128, 64 }, { space = "shared", layout = { kind = "shared", swizzle = 128 } })
      local r = tl.convert_layout(s, { kind = "blocked", warps = { 4, 1 } })
      local buf = tl.alloc_tensor({ 128, 64 }, tl.bf16, { kind = "shared", swizzle = 64 })
      tl.copy(r, buf)
    end)
    local text = round_trip(k.module)
    assert.truthy(text:find('tile<128x64xbf16, shared, {kind = "shared", swizzle = 128}>', 1, true))
    assert.truthy(text:find('tileas.convert_layout %3 : tile<128x64xbf16, rmem, {kind = "blocked", warps = [4, 1]}>', 1, true))
  end)

  it("that do not fit their tile fail the verifier at the script's line", function()
    tl.new_module()
    local k = tl.tile_kernel("badlay", {})
    local at
    local ok, err = pcall(k.define, k, function()
      at = here(); tl.convert_layout(tl.zeros({ 4, 8 }), { kind = "mma", warps = { 4 } })
    end)
    assert.is_false(ok)
    assert.equal(at, err:sub(1, #at))
    assert.matches("'tileas.convert_layout' op the layout's 'warps' of .* must be 2 positive integers, one per dim", err)
  end)
end)

describe("the builders", function()
  local function build(body, params)
    tl.new_module()
    local k = tl.tile_kernel("b", { params = params or { A = tl.tensor(tl.f32, 2) } })
    k:define(body)
    return k
  end

  it("make elementwise ops of operators, with scalars and size-1 dims broadcast", function()
    local k = build(function(k, p)
      local x = tl.load(p.A, { 0, 0 }, { 4, 8 })
      local row = tl.load(p.A, { 0, 0 }, { 1, 8 })
      local y = -(x * 2 + row - x / 3)
      local c = y:lt(x)
      local z = tl.select(c, y, 0.0) + tl.select(c, 1.0, 0.0)
      tl.store(p.A, { 0, 0 }, tl.minimum(z, x) + tl.abs(x) + tl.gelu(x) + tl.gelu_tanh(x) + tl.silu(x) + tl.sigmoid(x)
                              + tl.tanh(x) + tl.erf(x) + tl.rcp(x) + tl.rcp_approx(x))
    end)
    local m = k.module
    for _, n in ipairs { "arith.mulf", "arith.addf", "arith.subf", "arith.divf", "arith.negf",
                         "arith.select", "arith.minimumf" } do
      assert.truthy(#ops_named(m, n) >= 1, n)
    end
    local cmp = ops_named(m, "arith.cmpf")[1]
    assert.equal("tile<4x8xi1, rmem>", tostring(cmp:result(1):type()))
    assert.equal("olt", cmp:attr("predicate"))
    assert.equal(1, #ops_named(m, "tileas.broadcast")) -- the row
    local fns = {}
    for _, o in ipairs(ops_named(m, "tileas.math")) do fns[#fns + 1] = o:attr("fn") end
    assert.same({ "abs", "gelu", "gelu_tanh", "silu", "sigmoid", "tanh", "erf", "rcp", "rcp" }, fns)
    round_trip(m)
  end)

  it("reduce, expand, slice, extract, dot's accumulator and agents", function()
    local k = build(function(k, p)
      local x = tl.load(p.A, { 0, 0 }, { 64, 16 })
      local w = tl.load(p.A, { 0, 0 }, { 16, 32 })
      local d = tl.dot(x, w) -- a [M, K] times b [K, N]: no transpose, f32 zeros as acc
      local s = tl.extract_slice(d, { 0, 16 }, { 64, 16 })
      local v = tl.reduce(tl.reduce(s, 0, "min"), 0, "add") -- rank 2 -> 1 -> a scalar
      local e = tl.extract(tl.expand_dim(tl.reduce(s, 1, "max"), 0), { 0, 5 })
      tl.agent("producer", { num_warps = 1 }, function() tl.program_id(1) end)
      tl.agent("consumer", { num_warps = 4, stride = 2, interleaved = true }, function() tl.num_programs("z") end)
      tl.store(p.A, { 0, 0 }, tl.full({ 1, 1 }, v + e))
    end)
    local m = k.module
    local dot = ops_named(m, "tileas.dot")[1]
    assert.is_nil(dot:attr("transpose_b"))
    assert.equal("tileas.splat", dot:operand(3):def():name())
    assert.equal("f32", tostring(ops_named(m, "tileas.reduce")[2]:result(1):type()))
    local agents = ops_named(m, "tileas.agent")
    assert.equal(2, #agents)
    assert.equal("producer", agents[1]:attr("kind"))
    assert.equal(true, agents[2]:attr("interleaved"))
    assert.equal("y", ops_named(m, "tileas.get_program_id")[1]:attr("dim"))
    round_trip(m)
  end)

  it("keep the pointer forms of tl.load, tl.store, tl.zeros and tl.extract", function()
    tl.new_module()
    local k = tl.kernel("ptrs", { params = { { "x", tl.ptr(tl.f32) } } })
    k:define(function(k, p)
      local v = tl.zeros(tl.f32, 4)
      tl.store(p.x, tl.load(p.x) + tl.extract(v, 1))
    end)
    assert.equal(1, #ops_named(k.module, "tile.load"))
    assert.equal(1, #ops_named(k.module, "tile.extract"))
  end)

  it("raise at the script's line on misuse", function()
    local cases = {
      { "do not multiply %(K = 16%)", function(k, p) tl.dot(tl.load(p.A, { 0, 0 }, { 8, 16 }), tl.load(p.A, { 0, 0 }, { 8, 8 })) end },
      { "give the tile's shape", function(k, p) tl.load(p.A, { 0, 0 }) end },
      { "takes 2 coordinates and a shape of at most 2 extents %(got 1 and 2%)", function(k, p) tl.load(p.A, { 0 }, { 4, 4 }) end },
      { "shapes %[4, 8%] and %[8, 4%] do not broadcast", function(k, p) local _ = tl.zeros({ 4, 8 }) + tl.zeros({ 8, 4 }) end },
      { "element types differ: f32 and bf16", function(k, p) local _ = tl.zeros({ 4 }) * tl.zeros({ 4 }, tl.bf16) end },
      { "tiles convert between float types", function(k, p) tl.zeros({ 4 }):cast(tl.i32) end },
      { "only extents of 1 widen", function(k, p) tl.broadcast(tl.zeros({ 2, 4 }), { 4, 4 }) end },
      { "reduce: dim must be an integer in %[0, 2%)", function(k, p) tl.reduce(tl.zeros({ 2, 4 }), 2, "add") end },
      { "kind is \"add\", \"max\" or \"min\"", function(k, p) tl.reduce(tl.zeros({ 2, 4 }), 0, "mul") end },
      { "exp: expected a float tile", function(k, p) tl.exp(tl.const(1.0)) end },
      { "the destination must be a shared tensor", function(k, p) tl.copy(tl.zeros({ 4 }), tl.zeros({ 4 })) end },
      { "program_id: the dimension is", function(k, p) tl.program_id("w") end },
      { "agent: kind is", function(k, p) tl.agent("worker", { num_warps = 1 }, function() end) end },
      { "for_tiles: the tile extent must be a positive integer", function(k, p) tl.for_tiles(64, 0, function() end) end },
      { "dot: unknown option 'type_a' %(known: transpose_a, transpose_b, negate_a, negate_b", function(k, p) tl.dot(tl.zeros({ 64, 32 }), tl.zeros({ 32, 64 }), { type_a = "e4m3" }) end },
      { "erf: expected a float tile", function(k, p) tl.erf(tl.const(1.0)) end },
    }
    for _, c in ipairs(cases) do
      tl.new_module()
      local k = tl.tile_kernel("e", { params = { A = tl.tensor(tl.f32, 2) } })
      local ok, err = pcall(k.define, k, c[2])
      assert.is_false(ok, c[1])
      assert.matches(c[1], err)
      -- each case is one line: the error names it
      local at = ("%s:%d:"):format(debug.getinfo(c[2], "S").short_src, debug.getinfo(c[2], "S").linedefined)
      assert.equal(at, err:sub(1, #at))
    end
  end)

  it("say a tl.dot outside tl.for_tiles is the cause, at its line, when k:compile fails", function()
    tl.new_module()
    local k = tl.tile_kernel("loose_dot", { params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2), C = tl.tensor(tl.f32, 2) } })
    local line
    k:define(function(k, p)
      local a, b = tl.load(p.A, { 0, 0 }, { 128, 64 }), tl.load(p.B, { 0, 0 }, { 256, 64 })
      line = here()
      local acc = tl.dot(a, b, tl.zeros({ 128, 256 }, tl.f32))
      tl.store(p.C, { 0, 0 }, acc)
    end)
    local ok, err = pcall(k.compile, k)
    assert.is_false(ok)
    local file, l = line:match "^(.-):(%d+):$"
    assert.truthy(err:find(("%s:%d: 'tileas.dot' op tileas-materialize-agents: this dot is not in a pipelined loop"):format(
      file, tonumber(l) + 1), 1, true), err)
    assert.is_nil(err:find("run tileas-materialize-agents before", 1, true), err)
  end)

  it("check tl.tensor and tl.tile_kernel options", function()
    assert.equal("!tileas.tensor<f16, 3>", tostring(tl.tensor(tl.f16, 3)))
    assert.matches("rank must be an integer in %[1, 5%]", select(2, pcall(tl.tensor, tl.f16, 6)))
    assert.matches("default tile has 1 extents for rank 2", select(2, pcall(tl.tensor, tl.f16, 2, { 64 })))
    assert.matches("unknown option 'block'", select(2, pcall(tl.tile_kernel, "x", { block = 128 })))
    tl.new_module()
    local k = tl.tile_kernel("opts", { num_warps = 8, target = 100, cluster = { 2, 1, 1 } })
    k:define(function() end)
    assert.same({ 256, 1, 1 }, k.op:kernel_spec().block)
    tl.new_module()
    local plain = tl.tile_kernel("plain", {})
    plain:define(function() end)
    assert.same({ block = { 128, 1, 1 }, cluster = { 1, 1, 1 }, num_ctas = 1 }, plain.op:attr("kernel_spec"))
    assert.equal(100, k.op:attr("target_spec"))
  end)
end)
