-- spec/facts_spec.lua: what the C half decodes, as tilua.core gives it to Lua
-- (op:attr_or_default, t:info().bytes / elements, op:shared_layout,
-- op:agent_warps, op:arrive_counts, core.striped_unit, core.stamps), each
-- checked against what the C side does with the same IR: the verifier's
-- messages, the attributes convert-tile-to-nvvm records, the rows of the
-- tables. docs/lua.md lists these under "Facts the C half decodes".
local H = dofile "spec/helper.lua"
local tl = require "tilua"
local core = tl.core

local function parse(text) return assert(tl.parse(text, { file = "facts_spec" })) end

local function first(m, name)
  local found
  m:walk(function(op) if not found and op:name() == name then found = op end end)
  return assert(found, name)
end

local function all(m, name)
  local out = {}
  m:walk(function(op) if op:name() == name then out[#out + 1] = op end end)
  return out
end

-- The row of attribute `attr` of op `name` in core.ops().
local function row(name, attr)
  for _, op in ipairs(core.ops()) do
    if op.name == name then
      for _, a in ipairs(op.attributes) do if a.name == attr then return a end end
    end
  end
  error(name .. " has no row " .. attr)
end

describe("op:attr_or_default", function()
  local m = parse [[
module {
  tile.kernel {kernel_spec = {block = [128, 1, 1]}, sym_name = "k"} {
    %0 = tile.alloc_shared {count = 4} : ptr<f32, shared>
    %1 = tile.alloc_shared {align = 128, count = 4} : ptr<f32, shared>
    tile.agent {name = "a", num_warps = 2} {
    }
    %2 = tileas.alloc_tensor {tileas.stages = 3} : tile<64x64xbf16, shared, {kind = "shared", swizzle = 128}>
  }
}
]]
  local k, allocs = first(m, "tile.kernel"), all(m, "tile.alloc_shared")

  it("reads a set attribute as op:attr does, an absent one as its row's default", function()
    assert.equal(row("tile.alloc_shared", "align").default, allocs[1]:attr_or_default "align")
    assert.equal(16, allocs[1]:attr_or_default "align")
    assert.equal(128, allocs[2]:attr_or_default "align")
    assert.equal(4, allocs[1]:attr_or_default "count")
  end)

  it("reads an absent list as an empty one and a default outside the row's range (absent) as nil", function()
    assert.same({}, k:attr_or_default "arg_names")
    local agent = first(m, "tile.agent")
    assert.equal(-1, row("tile.agent", "warp_id").default) -- outside [0, ...]: "absent"
    assert.is_nil(agent:attr_or_default "warp_id")
    assert.equal(2, agent:attr_or_default "num_warps")
  end)

  it("reads a malformed value as its default, as the C readers do (the verifier reports it)", function()
    local a = allocs[2]:clone()
    a:set_attr("align", "wide")
    assert.equal(16, a:attr_or_default "align")
    a:set_attr("align", 4096)
    assert.equal(16, a:attr_or_default "align")
    local ok, err = m:verify()
    assert.truthy(ok, err)
    a:erase()
  end)

  it("reads a stamp by its row, a dictionary stamp entry by entry", function()
    local ring = first(m, "tileas.alloc_tensor")
    assert.equal(3, ring:attr_or_default "tileas.stages")
    local plain = tl.parse [[
module {
  tile.kernel {kernel_spec = {block = [128, 1, 1]}, sym_name = "k", tileas.launch = {cluster = 2, persistent = true}} {
    %0 = tileas.alloc_tensor : tile<64x64xbf16, shared, {kind = "shared", swizzle = 128}>
  }
}
]]
    assert.is_nil(first(plain, "tileas.alloc_tensor"):attr_or_default "tileas.stages")
    local launch = first(plain, "tile.kernel"):attr_or_default "tileas.launch"
    assert.same({ persistent = true, cluster = 2, linear = false, programs_z = false, programs = {}, workspace_bytes = 0,
                  transpose = {} }, launch)
    assert.is_nil(k:attr_or_default "tileas.launch")
  end)

  it("raises on a name no row declares", function()
    local ok, err = pcall(allocs[1].attr_or_default, allocs[1], "aling")
    assert.is_false(ok)
    assert.matches("'tile.alloc_shared' op has no attribute row or stamp 'aling'", err, 1, true)
    ok, err = pcall(k.attr_or_default, k, "tileas.stages") -- a stamp, but not one of kernels
    assert.is_false(ok)
    assert.matches("'tile.kernel' op has no attribute row or stamp 'tileas.stages'", err, 1, true)
  end)
end)

describe("core.stamps", function()
  it("lists every stamp with the ops that may carry it and its range", function()
    local by = {}
    for _, s in ipairs(core.stamps()) do by[s.name .. " on " .. table.concat(s.ops, ",")] = s end
    local st = assert(by["tileas.stages on tileas.alloc_tensor"])
    assert.equal(core.limits().max_ring_stages, st.max)
    local pl = assert(by["tileas.pipeline on scf.for"])
    assert.equal("stages", pl.fields[1].name)
    assert.equal(core.limits().max_ring_stages, pl.fields[1].max)
    assert.truthy(by["tileas.replica on tileas.agent"] and by["tileas.replica on arith.constant"])
  end)

  it("has a row for every tileas.* attribute the C passes write", function()
    local p = io.popen("grep -rhoE 'STAMP_[A-Z_]+' " .. H.root .. "/src/passes")
    local used = {}
    for id in p:read("a"):gmatch "STAMP_([A-Z_]+)" do used[#used + 1] = id end
    p:close()
    assert.is_true(#used >= 5)
    local direct = io.popen("grep -rhoE '\"tileas\\.[a-z_]+\"' " .. H.root .. "/src/passes"):read "a"
    assert.equal("", direct) -- the passes write stamps by their rows' names
  end)
end)

describe("t:info() bytes and elements", function()
  it("gives the bytes the C side gives each type", function()
    local cases = {
      { "f32", 4 }, { "bf16", 2 }, { "f64", 8 }, { "i1", 1 }, { "i8", 1 }, { "i16", 2 }, { "i64", 8 },
      { "index", 8 }, { "ptr<f16, global>", 8 }, { "vector<4xf32>", 16, 4 }, { "vector<8xbf16>", 16, 8 },
      { "memref<4x8xf16, shared>", 64, 32 }, { "tile<128x64xbf16, shared>", 16384, 8192 },
    }
    for _, c in ipairs(cases) do
      local m = parse(([[
module {
  tile.kernel {kernel_spec = {block = [32, 1, 1]}, sym_name = "k"} {
  ^bb0(%%0: %s):
  }
}
]]):format(c[1]))
      local info = first(m, "tile.kernel"):region(1):entry():arg(1):type():info()
      assert.equal(c[2], info.bytes, c[1])
      assert.equal(c[3], info.elements, c[1])
    end
    local dyn = parse [[
module {
  tile.kernel {kernel_spec = {block = [32, 1, 1]}, sym_name = "k"} {
  ^bb0(%0: memref<?x8xf16, global>):
  }
}
]]
    local info = first(dyn, "tile.kernel"):region(1):entry():arg(1):type():info()
    assert.is_nil(info.bytes)
    assert.is_nil(info.elements)
  end)
end)

describe("op:shared_layout", function()
  local text = [[
module {
  tile.kernel {kernel_spec = {block = [128, 1, 1], smem = 1000}, sym_name = "k"} {
    %0 = tile.dynamic_shared {align = 64} : ptr<f32, shared>
    %1 = tile.alloc_shared {count = 3} : ptr<i8, shared>
    %2 = tile.alloc_shared {align = 128} : memref<2x8xf32, shared>
    %3 = tile.alloc_shared {align = 8, count = 2} : ptr<i64, shared>
    %4 = tile.alloc_shared {align = 1024, count = 1} : ptr<i32, shared>
  }
}
]]
  it("places every allocation as convert-tile-to-nvvm does, and records the same sizes", function()
    local m = parse(text)
    local L = first(m, "tile.kernel"):shared_layout()
    local got = {}
    for i, a in ipairs(L.allocs) do got[i] = { a.op:name(), a.offset, a.bytes, a.dynamic } end
    -- program order; the dynamic part after the static one, aligned to 64
    assert.same({
      { "tile.dynamic_shared", 1088, 0, true },
      { "tile.alloc_shared", 0, 3, false },
      { "tile.alloc_shared", 128, 64, false },
      { "tile.alloc_shared", 192, 16, false },
      { "tile.alloc_shared", 1024, 4, false },
    }, got)
    tl.compile(m, "convert-tile-to-nvvm")
    local k = first(m, "tile.kernel")
    assert.same({ L.static_bytes, L.bytes, L.align }, { k:attr "shared_static", k:attr "shared_bytes", k:attr "shared_align" })
    assert.same({ 1088, 2088, 1024 }, { L.static_bytes, L.bytes, L.align })
  end)

  it("is empty once the lowering replaced the allocations, nil outside a kernel", function()
    local m = parse(text)
    tl.compile(m, "convert-tile-to-nvvm")
    local L = first(m, "tile.kernel"):shared_layout()
    assert.same({}, L.allocs)
    local none, msg = m:shared_layout()
    assert.is_nil(none)
    assert.equal("not inside a tile.kernel", msg)
  end)
end)

describe("op:agent_warps", function()
  it("gives a tile.agent its warp_id, else the warp after the agent before it", function()
    local m = parse [[
module {
  tile.kernel {kernel_spec = {block = [384, 1, 1]}, sym_name = "k"} {
    tile.agent {name = "p", num_warps = 1} {
    }
    tile.agent {name = "c", num_warps = 4, warp_id = 4} {
    }
    tile.agent {name = "d", num_warps = 2} {
    }
  }
}
]]
    local got = {}
    for i, a in ipairs(all(m, "tile.agent")) do got[i] = { a:agent_warps() } end
    assert.same({ { 0, 1 }, { 4, 4 }, { 8, 2 } }, got)
    -- the verifier's executor masks say the same: 0x300 are warps 8 and 9
    local bad = parse [[
module {
  tile.kernel {kernel_spec = {block = [384, 1, 1]}, sym_name = "k"} {
    tile.agent {name = "c", num_warps = 4, warp_id = 4} {
    }
    tile.agent {name = "d", num_warps = 2} {
      cutlass.async.exec {executors = 3} {
      }
    }
  }
}
]]
    local ok, err = bad:verify()
    assert.is_false(ok)
    assert.matches("executors 0x3 are not within the enclosing executors 0x300", err, 1, true)
    assert.same({ 8, 2 }, { all(bad, "tile.agent")[2]:agent_warps() })
  end)

  it("gives a tileas.agent its agent_switch entry's warps, holes skipped", function()
    local checked = 0
    local text = H.slurp "spec/fixtures/passes/optimize_execution_unit_mapping.tir"
    for case in (text .. "\n// -----"):gmatch "(.-)\n// %-%-%-%-%-" do
      local m = parse(case)
      assert(core.run_pipeline(m, "optimize-execution-unit-mapping"))
      for _, sw in ipairs(all(m, "tileas.agent_switch")) do
        local holes, e = {}, 0
        for _, h in ipairs(sw:attr_or_default "holes") do holes[h] = true end
        local warp_id, num_warps = sw:attr "warp_id", sw:attr "num_warps"
        for _, ag in ipairs(sw:region(1):entry():ops()) do
          while holes[e] do e = e + 1 end
          assert.same({ warp_id[e + 1], num_warps[e + 1] }, { ag:agent_warps() })
          e, checked = e + 1, checked + 1
        end
      end
    end
    assert.is_true(checked >= 8)
    local k = first(parse(text:match "^(.-)\n// %-%-%-%-%-"), "tile.kernel")
    local ok, err = pcall(k.agent_warps, k)
    assert.is_false(ok)
    assert.matches("expected a tile.agent or tileas.agent", err, 1, true)
  end)
end)

describe("op:arrive_counts", function()
  local src = [[
module {
  tile.kernel {kernel_spec = {block = [256, 1, 1]CLUSTER}, sym_name = "k"} {
    %0 = cutlass.pipeline.create : !cutlass.pipeline<2, 1, CONSUMER_COUNT>
    cutlass.pipeline.init %0 {barrier_id_base = 4, consumer_group_id = 1, consumers = CONSUMERS, mode = "MODE", participants = [1], producer_group_id = 0, arrive_count = [0, 0]}
  }
}
]]
  -- the counts the verifier derives (its message when the stamped ones differ)
  local function derived(mode, consumers, cluster)
    local count = select(2, consumers:gsub(",", "")) + 1
    local text = src:gsub("MODE", mode):gsub("CONSUMERS", consumers):gsub("CONSUMER_COUNT", count)
      :gsub("CLUSTER", cluster and ", cluster = [2, 1, 1], num_ctas = 2" or "")
    local m = parse(text)
    local ok, err = m:verify()
    assert.is_false(ok)
    local full, empty = err:match "arrive_count does not match the derived %[(%d+), (%d+)%]"
    return { tonumber(full), tonumber(empty) }, { first(m, "cutlass.pipeline.init"):arrive_counts() }
  end

  it("are the counts the verifier derives, in every mode", function()
    for _, c in ipairs {
      { "cooperative", "[2, 12]", false, { 1, 96 } },
      { "warp_specialized", "[2]", false, { 1, 1 } },
      { "strided_urem", "[2, 12]", false, { 1, 2 } },
      { "cluster", "[2, 12]", true, { 1, 6 } },     -- every consumer warp (3) on every CTA (2)
      { "pingpong", "[3, 12]", false, { 1, 64 } },  -- the threads of one participant
      { "pingpong_cluster", "[3, 12]", true, { 1, 4 } }, -- the warps of one participant (2) on every CTA (2)
    } do
      local want, got = derived(c[1], c[2], c[3])
      assert.same(want, got, c[1])
      assert.same(c[4], got, c[1])
    end
  end)
end)

describe("core.striped_unit", function()
  it("is the elements one ld/st moves of a register fragment", function()
    local function unit(t)
      local m = parse(([[
module {
  tile.kernel {kernel_spec = {block = [32, 1, 1]}, sym_name = "k"} {
  ^bb0(%%0: %s):
  }
}
]]):format(t))
      return core.striped_unit(first(m, "tile.kernel"):region(1):entry():arg(1):type())
    end
    assert.equal(4, unit "memref<8x4xf32, rmem>")
    assert.equal(8, unit "memref<8x8xbf16, rmem>")
    assert.equal(1, unit "memref<8x3xf32, rmem>")
    assert.equal(1, unit "memref<8x8xf32, rmem>") -- 32 bytes: no single access
  end)
end)
