-- The cutlass dialect from Lua: the example kernel, constructors, verifier
-- errors at the script's line, round trips, and what canonicalize and cse may
-- (and may not) remove or merge.
local H = dofile "spec/helper.lua"
local tl = require "tilua"
local core = tl.core

-- The file:line of the caller's next line, to find in error messages.
local function next_line()
  local info = debug.getinfo(2, "Sl")
  return info.short_src .. ":" .. (info.currentline + 1) .. ":"
end

local function kernel(spec, body)
  tl.new_module()
  spec.block = spec.block or 128
  local k = tl.kernel("k", spec)
  k:define(body)
  return k
end

-- Expect body to fail verification with msg at the line `where` returns.
local function fails_at(spec, msg, body)
  local where
  local ok, err = pcall(kernel, spec, function(k, p) where = body(k, p) end)
  assert.is_false(ok)
  assert.truthy(where, "the body did not record its line: " .. tostring(err))
  for line in (err .. "\n"):gmatch "(.-)\n" do
    if line:sub(1, #where) == where and line:find(msg, 1, true) then return end
  end
  error("expected '" .. msg .. "' at " .. where .. " in:\n" .. err)
end

local function count(text, pat)
  local n = 0
  for _ in text:gmatch(pat) do n = n + 1 end
  return n
end

local function parse(text)
  local m, msg = tl.parse(text, { file = "cutlass_spec" })
  assert.truthy(m, msg)
  tl.verify(m)
  return m
end

describe("the example", function()
  local text

  setup(function()
    local saved = _G.print
    _G.print = function(s) text = s end
    local ok, err = pcall(dofile, H.root .. "/examples/cutlass_pipeline.lua")
    _G.print = saved
    assert(ok, err)
  end)

  it("builds a warp-specialized pipeline with a seq_bar, StreamK and MODS probes", function()
    for _, op in ipairs { "cutlass.pipeline.init", "cutlass.seq_bar.init", "cutlass.async.exec",
                          "cutlass.pipeline.switch_by_executor", "cutlass.tile_scheduler.create_streamk_params",
                          "cutlass.tile_scheduler.mods_report_mainloop_start", "cutlass.tile_scheduler.fixup",
                          "cutlass.block_striped.store", "cutlass.bar" } do
      assert.truthy(text:find(op, 1, true), op)
    end
    -- the verifier derives the arrive counts without writing them into the IR, and the
    -- stage count lives in the pipeline's type only
    assert.falsy(text:find("arrive_count = [", 1, true))
    assert.falsy(text:find("numStages", 1, true))
  end)

  it("round-trips through the textual form", function()
    local m = parse(text)
    assert.equal(text, m:print())
  end)
end)

describe("constructors", function()
  it("split the block's warps among counted participants and claim pool slots in order", function()
    local k = kernel({ block = 384 }, function(k)
      local pipe = k:pipeline { stages = 4, producers = 1, consumers = 2, transaction_bytes = 32768 }
      local bar = k:seq_bar { depth = 2 }
      assert.same({ 15, 240, 3840 }, { pipe.init:attr("participants")[1], table.unpack(pipe.init:attr "consumers") })
      assert.equal(8, bar.init:attr "barrier_id_base")
      assert.equal(384, bar.init:attr "arrive_count")
    end)
    assert.truthy(k.module:print():find("mode = \"cooperative\"", 1, true))
  end)

  it("advance cursors in place and carry them through loops", function()
    local k = kernel({ params = { { "n", tl.i32 } } }, function(k, p)
      local pipe = k:pipeline { stages = 2, producers = 1, consumers = 1 }
      k:async_exec("producer", { first_warp = 0, warps = 1 }, function()
        local st = pipe:producer_start()
        local first = st.value
        tl.cutlass.for_range(0, p.n, 1, { st }, function()
          pipe:producer_acquire(st)
          pipe:producer_commit(st, 1024)
          st:advance()
        end)
        assert.not_equal(first, st.value)
        assert.equal("scf.for", st.value:def():name())
        pipe:producer_tail(st)
      end)
    end)
    assert.equal(1, count(k.module:print(), "cutlass.pipeline.state.increment"))
  end)

  it("build schedulers, work tiles and their accessors", function()
    kernel({ params = { { "m", tl.i32 }, { "ws", tl.ptr(tl.i8) } }, cluster = { 2, 1, 1 } }, function(k, p)
      local dp = tl.sched.data_parallel { tiles = { p.m, p.m, 1, 8 }, cluster = { 2, 1, 1 }, swizzle = 4 }
      local sk = tl.sched.streamk { tiles = { p.m, p.m, 1, 64 }, workers = 132, workspace = p.ws }
      assert.equal("streamk", sk.kind)
      assert.equal("!cutlass.tile_scheduler<data_parallel>", tostring(dp.value:type()))
      k:async_exec("all", { warps = 4 }, function()
        local w = sk:work(0)
        w:advance()
        assert.equal(tl.i1, w:is_valid():type())
        assert.equal(tl.i32, w:k_tile_count():type())
      end)
      local _, _, c = sk:workspace_sizes { total_bytes = 256, reduction_bytes = 100, barrier_bytes = 4 }
      assert.equal(tl.i64, c:type())
    end)
  end)

  it("pick the StreamK variant from the target", function()
    local ctx = tl.context()
    local saved = ctx:target_sm()
    ctx:target_sm(100)
    local ok, err = pcall(kernel, { params = { { "m", tl.i32 }, { "ws", tl.ptr(tl.i8) } } }, function(k, p)
      assert.equal("sm100_streamk", tl.sched.streamk { tiles = { p.m, p.m }, workers = 8, workspace = p.ws }.kind)
    end)
    ctx:target_sm(saved)
    assert(ok, err)
  end)

  it("refuse misuse at the script's line", function()
    local line
    local ok, err = pcall(kernel, {}, function(k)
      local pipe = k:pipeline { stages = 2 }
      line = next_line()
      pipe:producer_acquire(42)
    end)
    assert.is_false(ok)
    assert.truthy(err:find(line .. " producer_acquire: expected a pipeline state", 1, true), err)
  end)
end)

describe("verifier errors", function()
  it("point at the line that built a pipeline", function()
    fails_at({}, "'cutlass.pipeline.init' op expected numStages > 0, got 0", function(k)
      local line = next_line()
      k:pipeline { stages = 0, producers = 1, consumers = 1 }
      return line
    end)
  end)

  it("name both claimants of overlapping barrier slots", function()
    local ok, err = pcall(kernel, {}, function(k)
      k:pipeline { stages = 4 }
      k:seq_bar { depth = 2, barrier_id_base = 6 }
    end)
    assert.is_false(ok)
    assert.matches("'cutlass.seq_bar.init' op claims barrier slots %[6, 8%), overlapping slots %[0, 8%) of 'cutlass.pipeline.init'", err)
    assert.matches("note: slots %[0, 8%) claimed here", err)
  end)

  it("check seq_bar depths", function()
    fails_at({}, "'cutlass.seq_bar.wait' op state of type !cutlass.seq_bar_state<3>", function(k)
      local a, b = k:seq_bar { depth = 2 }, k:seq_bar { depth = 3 }
      local line
      k:async_exec("w", { warps = 4 }, function()
        local st = b:state()
        line = next_line()
        a:wait(st)
      end)
      return line
    end)
  end)

  it("check the MODS participant mask against the cluster", function()
    fails_at({ cluster = { 2, 2, 1 } }, "participant mask 0x7 needs 3 participants", function(k)
      local s = tl.sched.data_parallel { tiles = { 4, 4 }, cluster = { 2, 2, 1 } }
      local line
      k:async_exec("w", { warps = 4 }, function()
        line = next_line()
        tl.mods.mainloop(s, 7, { is_2cta_mma = true }, function() end)
      end)
      return line
    end)
  end)

  it("require warp-cooperative scope for cutlass.bar", function()
    fails_at({}, "'cutlass.bar' op must be inside warp-cooperative scope", function()
      local line = next_line()
      tl.bar(1, 128)
      return line
    end)
  end)

  -- tile.agent and tile.elect_one belong to the tile dialect; checked when it has them.
  it("treat tile.agent as executors and tile.elect_one as below a warp", function()
    if not (core.op_info "tile.agent" and core.op_info "tile.elect_one") then return end
    local m = assert(tl.parse [[
module {
  tile.kernel {arg_names = [], kernel_spec = {block = [256, 1, 1]}, sym_name = "k"} {
    tile.agent {name = "math", num_warps = 4, warp_id = 4} {
      cutlass.bar {count = 64, id = 1}
      cutlass.async.exec {executors = 3} {
      }
      tile.elect_one {
        cutlass.named_barrier.arrive {count = 128, id = 2}
      }
    }
  }
}
]])
    local ok, err = m:verify()
    assert.is_false(ok)
    assert.matches(":4:%d+: 'cutlass.bar' op arrive count 64 is smaller than the 128 threads of the enclosing executors 0xf0", err)
    assert.matches(":5:%d+: error: 'cutlass.async.exec' op executors 0x3 are not within the enclosing executors 0xf0", err)
    assert.matches(":8:%d+: error: 'cutlass.named_barrier.arrive' op must be inside warp%-cooperative scope, not under 'tile.elect_one'", err)
  end)

  it("put advance_to_next_work inside cutlass.async.exec", function()
    fails_at({}, "must be inside a cutlass.async.exec region", function()
      local s = tl.sched.static_persistent { tiles = { 4, 4 }, workers = 2 }
      local w = s:work(0)
      local line = next_line()
      w:advance()
      return line
    end)
  end)
end)

describe("the derived arrive counts", function()
  local src = [[
module {
  tile.kernel {arg_names = [], kernel_spec = {block = [128, 1, 1]}, sym_name = "k"} {
    %0 = cutlass.pipeline.create : !cutlass.pipeline<2, 1, 1>
    cutlass.pipeline.init %0 {barrier_id_base = 4, consumer_group_id = 1, consumers = [14], mode = "cooperative", participants = [1], producer_group_id = 0EXTRA}
  }
}
]]
  it("are not written into the IR by the verifier; the lowering inits the barriers with them", function()
    local m = parse((src:gsub("EXTRA", "")))
    assert.truthy(m:verify())
    assert.falsy(m:print():find("arrive_count", 1, true))
    tl.compile(m, "convert-cutlass-to-nvvm")
    -- full barriers: 1 producer; empty barriers: the 96 threads of consumer mask 0b1110 (cooperative: every thread arrives)
    local counts = {}
    for c in m:print():gmatch "tile%.mbarrier_init %%%d+, (%%%d+)" do counts[#counts + 1] = c end
    assert.equal(4, #counts)
    local text = m:print()
    local function value(name) return text:match(name:gsub("%%", "%%%%") .. " = arith%.constant {value = (%d+) : i32}") end
    assert.same({ "1", "96", "1", "96" }, { value(counts[1]), value(counts[2]), value(counts[3]), value(counts[4]) })
  end)
  it("must agree with an explicit arrive_count", function()
    local m = assert(tl.parse((src:gsub("EXTRA", ", arrive_count = [1, 4]")), { file = "cutlass_spec" }))
    local ok, err = m:verify()
    assert.falsy(ok)
    assert.matches("arrive_count does not match the derived %[1, 96%] %(full, empty%)", err)
  end)
end)

describe("canonicalize and cse", function()
  local text = [[
module {
  tile.kernel {arg_names = ["p"], kernel_spec = {block = [128, 1, 1], cluster = [2, 1, 1], num_ctas = 2}, sym_name = "k"} {
  ^bb0(%0: ptr<f32, global>):
    %1 = cutlass.pipeline.create : !cutlass.pipeline<2, 1, 1>
    %2 = cutlass.pipeline.create : !cutlass.pipeline<2, 1, 1>
    cutlass.pipeline.init %1 {barrier_id_base = 0, consumer_group_id = 1, consumers = [14], mode = "warp_specialized", participants = [1], producer_group_id = 0}
    cutlass.pipeline.init %2 {barrier_id_base = 4, consumer_group_id = 1, consumers = [14], mode = "warp_specialized", participants = [1], producer_group_id = 0}
    %3 = arith.constant {value = 1 : i32} : i32
    %4 = cutlass.tile_scheduler.create_dp_params %3, %3, %3, %3 : !cutlass.tile_scheduler_params<data_parallel>
    %5 = cutlass.tile_scheduler.create %4 : !cutlass.tile_scheduler<data_parallel>
    %6 = arith.constant {value = 3} : i64
    %7 = builtin.unrealized_conversion_cast : memref<8xf32, rmem>
    cutlass.async.exec {executors = 15} {
      %8 = cutlass.tile_scheduler.mods_report_mainloop_start %5, %6 : i64
      %9 = cutlass.tile_scheduler.mods_report_smid : i32
      cutlass.tile_scheduler.mods_throttle {profile = 0 : i32}
      %10 = cutlass.pipeline.state.create %1 {role = "producer"} : !cutlass.pipeline_state<2>
      %11 = cutlass.pipeline.state.create %1 {role = "producer"} : !cutlass.pipeline_state<2>
      %12 = cutlass.pipeline.producer_try_acquire %1, %10 : i1
      %13 = cutlass.pipeline.state.increment %11 : !cutlass.pipeline_state<2>
      cutlass.pipeline.producer_commit %1, %10
      cutlass.pipeline.producer_commit %1, %11
      %14 = cutlass.pipeline.state.create %2 {role = "producer"} : !cutlass.pipeline_state<2>
      cutlass.pipeline.producer_commit %2, %14
      cutlass.block_striped.reduce %0, %7 {element_type = f32, kind = "add", threads = 128}
      cutlass.block_striped.reduce %0, %7 {element_type = f32, kind = "add", threads = 128}
      cutlass.tile_scheduler.mods_report_mainloop_end %5, %6
    }
  }
}
]]
  local out

  setup(function()
    local m = parse(text)
    tl.compile(m, "canonicalize,cse,canonicalize")
    out = m:print()
  end)

  it("keep the MODS probes even when their results are unused", function()
    assert.equal(1, count(out, "mods_report_mainloop_start"))
    assert.equal(1, count(out, "mods_report_mainloop_end"))
  end)

  it("drop an unused mods_report_smid (droppable)", function()
    assert.equal(0, count(out, "mods_report_smid"))
  end)

  it("keep throttles: profile 0 is dropped by the lowering, not by canonicalize", function()
    assert.equal(1, count(out, "mods_throttle"))
  end)

  it("never merge or remove block_striped.reduce", function()
    assert.equal(2, count(out, "cutlass.block_striped.reduce"))
  end)

  it("drop unused probes and pure state arithmetic, keep arrivals", function()
    assert.equal(0, count(out, "producer_try_acquire"))
    assert.equal(0, count(out, "state.increment"))
    assert.equal(3, count(out, "producer_commit"))
  end)

  it("merge equal states but never two pipeline handles", function()
    assert.equal(2, count(out, "cutlass.pipeline.create"))
    assert.equal(2, count(out, "cutlass.pipeline.state.create"))
  end)

  it("report the traits through core.op_info", function()
    local info = core.op_info "cutlass.tile_scheduler.mods_report_smid"
    assert.same({ "droppable" }, info.traits)
    assert.is_false(core.op_info("cutlass.tile_scheduler.mods_report_mainloop_start").has_verifier == false)
    assert.truthy(table.concat(core.op_info("cutlass.tile_scheduler.mods_report_mainloop_start").effects, ","):find("writes the cluster barrier", 1, true))
  end)
end)
