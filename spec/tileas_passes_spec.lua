-- The cluster passes of tile programs around agents, persistence and knobs
-- (optimize-execution-unit-mapping, propagate-execution-unit,
-- tileas-dynamic-persistent, tileas-insert-OCG-knobs, sink-negf-through-shapes)
-- beyond their fixtures (spec/fixtures/passes/): each is idempotent (a second
-- run changes nothing), the knobs reach the PTX right before their instruction
-- and the PTX passes ptxas -arch=sm_90a, and the ordering invariants of the
-- pass manager (REQUIRES rows) are listed and checked.
local H = dofile "spec/helper.lua"
local tl = require "tilua"
local core = tl.core

local FIX = "spec/fixtures/passes/"

-- The cases of a fixture (its text split at "// -----").
local function cases(name)
  local text = H.slurp(FIX .. name .. ".tir")
  local list = {}
  for case in (text .. "\n// -----\n"):gmatch "(.-)\n// %-%-%-%-%-\n" do list[#list + 1] = case end
  return list
end

-- Run a pipeline on IR text: the module, or raises the diagnostics.
local function run(text, pipeline)
  local m = assert(tl.parse(text))
  local ok, msg = core.run_pipeline(m, pipeline)
  assert(ok, msg)
  return m, msg
end

-- A second run of the pass leaves the IR as the first left it, and says so.
local function idempotent(text, pass)
  local m = run(text, pass)
  local once = m:print()
  local changed
  local ok, msg = core.run_pipeline(m, pass, { on_stage = function(st) if st.index > 0 then changed = st.changed end end })
  assert(ok, msg)
  assert.equal(once, m:print())
  assert.is_false(changed)
  return once
end

describe("idempotence", function()
  it("optimize-execution-unit-mapping lays out a laid-out switch the same way", function()
    for _, c in ipairs(cases "optimize_execution_unit_mapping") do
      idempotent(c, "optimize-execution-unit-mapping")
    end
  end)

  it("propagate-execution-unit", function()
    for _, c in ipairs(cases "propagate_execution_unit") do idempotent(c, "propagate-execution-unit") end
  end)

  it("tileas-dynamic-persistent warns and leaves a persistent kernel as it is", function()
    for _, c in ipairs(cases "tileas_dynamic_persistent") do
      local m = run(c, "tileas-dynamic-persistent")
      local once = m:print()
      local ok, msg = core.run_pipeline(m, "tileas-dynamic-persistent")
      assert.is_true(ok)
      assert.equal(once, m:print())
      if once:find("scf.while", 1, true) then
        assert.matches("warning: 'tile.kernel' op Kernel is already dynamic persistent", msg)
      end
    end
  end)

  it("tileas-insert-OCG-knobs does not repeat a knob", function()
    for _, c in ipairs(cases "tileas_insert_OCG_knobs") do idempotent(c, "tileas-insert-OCG-knobs") end
  end)

  it("sink-negf-through-shapes: nothing left to sink or fold", function()
    for _, c in ipairs(cases "sink_negf_through_shapes") do idempotent(c, "sink-negf-through-shapes") end
  end)
end)

describe("sink-negf-through-shapes", function()
  it("notes a negf that stays only when asked (explain)", function()
    local text = H.slurp(FIX .. "sink_negf_through_shapes_explain.tir")
    local _, msg = run(text, "sink-negf-through-shapes")
    assert.is_nil(msg)
    _, msg = run(text, "sink-negf-through-shapes{explain=false}")
    assert.is_nil(msg)
    _, msg = run(text, "sink-negf-through-shapes{explain=true}")
    assert.equal(2, H.count(msg, "note: no broadcast/expand_dim op"))
  end)
end)

-- The line after each `.pragma` line of the PTX (directives .loc skipped).
local function after_pragmas(ptx)
  local lines, out = {}, {}
  for l in ptx:gmatch "[^\n]+" do
    if not l:match "^%s*%.loc" then lines[#lines + 1] = l end
  end
  for i, l in ipairs(lines) do
    local knob = l:match '^%s*%.pragma "(.-)";$'
    if knob then out[#out + 1] = { knob = knob, next = lines[i + 1] or "" } end
  end
  return out
end

describe("tileas-insert-OCG-knobs in the PTX", function()
  it("writes each knob right before its instruction, and ptxas takes it", function()
    local m = run(cases("tileas_insert_OCG_knobs")[1], "tileas-insert-OCG-knobs")
    local ptx = tl.emit_ptx(m)
    local knobs = after_pragmas(ptx)
    assert.equal("global knob SchedResBusyXU64=1", knobs[1].knob)
    local want = { "mbarrier.init", "fence.mbarrier_init", "barrier.cluster.arrive", "barrier.cluster.wait",
                   "mbarrier.arrive", "mbarrier.try_wait", "fence.proxy.async" }
    assert.equal(#want + 1, #knobs)
    for i, w in ipairs(want) do
      assert.equal("next knob FenceCode", knobs[i + 1].knob)
      assert.matches("^%s*" .. w:gsub("%.", "%%."), knobs[i + 1].next)
    end
    assert.equal(#want, H.count(ptx, '.pragma "next knob FenceCode";'))
    H.assert_ptxas(ptx)
  end)
end)

describe("tileas-insert-OCG-knobs and the protocol checker", function()
  it("takes a knob as what it is, no effect on the program", function()
    local m = run([[
module {
  tile.kernel {arg_names = [], kernel_spec = {block = [32, 1, 1], num_ctas = 1}, sym_name = "k"} {
    %0 = tile.alloc_shared {align = 8, count = 1} : ptr<i64, shared>
    %1 = arith.constant {value = 32 : i32} : i32
    %2 = arith.constant {value = 0 : i32} : i32
    tile.mbarrier_init %0, %1
    tile.fence_mbarrier_init
    tile.barrier
    tile.mbarrier_arrive %0
    tile.mbarrier_wait %0, %2
  }
}]], "ptx,tileas-insert-OCG-knobs,verify-protocol")
    assert.equal(4, H.count(m:print(), "next knob FenceCode"))
  end)
end)

describe("ordering invariants", function()
  local function requires(name)
    for _, p in ipairs(core.passes()) do
      if p.name == name then return table.concat(p.requires, ",") end
    end
  end

  it("are declared per pass and listed", function()
    assert.equal("AGENTS_MATERIALIZED", requires "optimize-execution-unit-mapping")
    assert.equal("AGENTS_MATERIALIZED", requires "propagate-execution-unit")
    assert.equal("MMA_FINAL", requires "tileas-insert-OCG-knobs")
    assert.equal("", requires "canonicalize")
    local out = H.tilua_run { "opt", "--list-passes" }
    assert.matches("tileas%-insert%-OCG%-knobs%s+Insert scheduling hints[^\n]*%(requires MMA_FINAL%)", out)
  end)

  it("are checked when the pass runs, on the module the passes before it left", function()
    -- a tile program without agents; canonicalize removes its only tileas op
    -- (a pure get_program_id nobody reads), after which it is none
    local text = [[
module {
  tile.kernel {arg_names = [], kernel_spec = {block = [128, 1, 1], num_ctas = 1}, sym_name = "k"} {
    %0 = tileas.get_program_id {dim = "x"} : i32
  }
}]]
    local ok, msg = core.run_pipeline(assert(tl.parse(text)), "optimize-execution-unit-mapping")
    assert.is_false(ok)
    assert.matches("pass 'optimize%-execution%-unit%-mapping' requires materialized agents %(kernel 'k' is a tile program without tileas.agent ops%)", msg)
    assert.is_true((core.run_pipeline(assert(tl.parse(text)), "canonicalize,optimize-execution-unit-mapping")))
  end)
end)
