-- The tile-scheduler reference through Lua, `tilua sched`, and the TileLang
-- surface of stdlib/sched.lua checked against the reference by interpreting
-- the IR it builds.
local H = dofile "spec/helper.lua"
local tl = require "tilua"
local interp = require "tilua.emulate.interp"
local core = tl.core

describe("the scheduler reference", function()
  it("covers every k-iteration of every tile exactly once", function()
    math.randomseed(7)
    for trial = 1, 60 do
      local cfg = {
        kind = "streamk", tiles_m = math.random(1, 9), tiles_n = math.random(1, 9),
        tiles_k = math.random(1, 40), workers = math.random(1, 40),
        swizzle = math.random(1, 4), column_major = math.random(2) == 1,
        decomp = ({ "heuristic", "streamk", "split_k", "data_parallel" })[math.random(4)],
        splits = math.random(1, 4), reduction = math.random(2) == 1 and "deterministic" or "nondeterministic",
        min_k = math.random(1, 4),
      }
      local plan = core.sched_plan(cfg)
      local info = plan:info()
      local covered = {}
      for w = 0, info.grid - 1 do
        for _, piece in ipairs(plan:pieces(w)) do
          for k = piece.k_tile_start, piece.k_tile_start + piece.k_tile_count - 1 do
            local key = piece.tile_idx * 1000 + k
            assert.is_nil(covered[key], ("trial %d: tile %d k %d twice"):format(trial, piece.tile_idx, k))
            covered[key] = true
          end
        end
      end
      local n = 0
      for _ in pairs(covered) do n = n + 1 end
      assert.equal(info.tiles * cfg.tiles_k, n, "trial " .. trial)
      assert.is_true(plan:fixup_model(trial))
    end
  end)

  it("needs no workspace for data-parallel and static persistent", function()
    for _, kind in ipairs { "data_parallel", "static_persistent" } do
      local plan = core.sched_plan { kind = kind, m = 1000, n = 1000, k = 1000, workers = 7 }
      assert.equal(0, plan:info().workspace.total)
      local params, bytes = plan:params()
      assert.equal(48, #bytes)
      assert.equal(0, params.k_split_count)
    end
  end)
end)

describe("tilua sched", function()
  it("prints the grid and the K splits, and writes SVG", function()
    local svg = os.tmpname()
    local out, err, code = H.tilua_run { "sched", "--kind", "streamk", "--m", "4096", "--n", "4096",
      "--k", "8192", "--tile", "128x256x64", "--workers", "132", "--svg", svg }
    assert.equal(0, code, err)
    assert.matches("schedule streamk: 32 x 16 tiles, 128 k tiles each", out)
    assert.matches("k splits", out)
    local doc = H.slurp(svg)
    os.remove(svg)
    assert.matches("^<svg ", doc)
    assert.matches("</svg>%s*$", doc)
  end)
  it("rejects bad options", function()
    local _, err, code = H.tilua_run { "sched", "--kind", "nope" }
    assert.equal(1, code)
    assert.matches("unknown kind 'nope'", err)
    _, err, code = H.tilua_run { "sched", "--tile", "128x0x64" }
    assert.equal(1, code)
    assert.matches("positive integers", err)
  end)
end)

-- Build a kernel whose body decodes with the TileLang surface, then interpret it.
local function tl_kernel(opts, build)
  tl.new_module()
  local k = tl.kernel("sched", { params = { { "t", tl.i32 } }, block = 32 })
  local keep = {}
  k:define(function(k, p) build(p.t, keep) end)
  return k, keep
end

describe("tl.sched.persistent", function()
  local configs = {}
  for _, m in ipairs { 1, 5, 8, 13 } do
    for _, n in ipairs { 1, 3, 7 } do
      for _, sw in ipairs { 1, 2, 3, 8 } do
        for _, cl in ipairs { 1, 2 } do
          for _, cm in ipairs { true, false } do
            configs[#configs + 1] = { m = m, n = n, swizzle = sw, cluster = cl, column_major = cm }
          end
        end
      end
    end
  end

  it(("decodes like the reference (%d configurations)"):format(#configs), function()
    for _, c in ipairs(configs) do
      local plan = core.sched_plan { kind = "static_persistent", tiles_m = c.m, tiles_n = c.n,
        cluster_m = c.cluster, swizzle = c.swizzle, column_major = c.column_major, workers = 3 }
      local total = plan:info().tiles
      local k, keep = tl_kernel(c, function(t, keep)
        local s = tl.sched.persistent { m_tiles = c.m, n_tiles = c.n, workers = 3, swizzle = c.swizzle,
                                        cluster = c.cluster, column_major = c.column_major, stateful = false }
        keep.m, keep.n = s:coord(t)
      end)
      for t = 0, total + 2 do
        local env = interp.run(k.op, { t })
        local rm, rn = plan:tl_coord(t)
        assert.same({ rm, rn }, { env:get(keep.m), env:get(keep.n) },
          ("m=%d n=%d swizzle=%d cluster=%d column_major=%s tile %d"):format(c.m, c.n, c.swizzle, c.cluster,
            tostring(c.column_major), t))
      end
    end
  end)

  it("iterates like the reference in the stateful form", function()
    for _, c in ipairs { { m = 7, n = 5, sw = 2, cl = 2, w = 4 }, { m = 3, n = 9, sw = 8, cl = 1, w = 5 },
                         { m = 2, n = 2, sw = 1, cl = 1, w = 9 } } do
      local plan = core.sched_plan { kind = "static_persistent", tiles_m = c.m, tiles_n = c.n, cluster_m = c.cl,
        swizzle = c.sw, workers = c.w }
      local k, keep = tl_kernel(c, function(worker, keep)
        local s = tl.sched.persistent { m_tiles = c.m, n_tiles = c.n, workers = c.w, swizzle = c.sw, cluster = c.cl }
        s:init(worker)
        s:loop(function(s) keep.rec = s.m_idx * 1000 + s.n_idx * 10 + s.current_iter end)
      end)
      for w = 0, c.w - 1 do
        local seen = {}
        interp.run(k.op, { w }, { on_op = function(op, _, outs)
          if op == keep.rec:def() then seen[#seen + 1] = outs[1] end
        end })
        local want = {}
        for i, tile in ipairs(plan:persistent(w)) do want[i] = tile.m * 1000 + tile.n * 10 + (i - 1) end
        assert.same(want, seen, ("worker %d of %d"):format(w, c.w))
      end
    end
  end)

  it("folds Lua integers with the reference's own arithmetic (core.sched_stage)", function()
    for _, c in ipairs { { m = 13, n = 7, sw = 3, cl = 2, cm = true }, { m = 5, n = 9, sw = 8, cl = 1, cm = false }, { m = 4, n = 3, sw = 40, cl = 1, cm = true } } do
      local plan = core.sched_plan { kind = "static_persistent", tiles_m = c.m, tiles_n = c.n, cluster_m = c.cl,
        swizzle = c.sw, column_major = c.cm, workers = 3 }
      local r = core.sched_stage("raster", nil, c.m, c.n, 1, c.cl, 1, c.sw, c.cm)
      assert.equal(plan:info().tiles, r.total)
      for t = 0, r.total + 3 do
        local m, n = core.sched_stage("tl_coord", nil, r, c.sw, t)
        local rm, rn = plan:tl_coord(t)
        assert.same({ rm, rn }, { m, n })
        assert.equal(t < r.total, core.sched_stage("valid", nil, r, t))
      end
    end
    assert.same({ 9, 1 }, { core.sched_stage("tl_next", nil, 4, 5, 0) })
    tl.new_module()
    local k = tl.kernel("v", { params = { { "t", tl.i32 } }, block = 32 })
    k:define(function(k, p)
      local r = core.sched_stage("raster", nil, 4, 4, 1, 1, 1, 1, true)
      local ok, err = pcall(core.sched_stage, "unpack", nil, r, p.t)
      assert.is_false(ok)
      assert.matches("built outside of a kernel", err)
      ok, err = pcall(core.sched_stage, "unpack", tl.insertion_point(), r, -1)
      assert.is_false(ok)
      assert.matches("not a 32%-bit unsigned integer", err)
    end)
  end)

  -- TileLang's stateless loop (tile_schedule): for w < waves: (m, n) = coord(workers * w + worker), kept when
  -- in bounds. Past the end TileLang decodes out of range (no wrap into a batch), so the
  -- loop must yield exactly the stateful schedule of that worker.
  local function random_case(i)
    local m, n = math.random(1, 30), math.random(1, 30)
    return { m = m, n = n, workers = math.random(1, i % 4 == 0 and 200 or 40), sw = math.random(1, i % 3 == 0 and 40 or 8),
             cl = math.random(1, 4), cm = math.random(2) == 1 }
  end
  local function stateless(c, coord, worker, grid_m)
    local total = grid_m * c.n
    local got = {}
    for w = 0, (total + c.workers - 1) // c.workers - 1 do
      local m, n = coord(c.workers * w + worker)
      if m < grid_m and n < c.n then got[#got + 1] = m * 1000 + n end
    end
    return got
  end
  local function planned(c, worker)
    local plan = core.sched_plan { kind = "static_persistent", tiles_m = c.m, tiles_n = c.n, cluster_m = c.cl,
      swizzle = c.sw, column_major = c.cm, workers = c.workers }
    local want = {}
    for i, tile in ipairs(plan:persistent(worker)) do want[i] = tile.m * 1000 + tile.n end
    return plan, want
  end

  it("stateless loop == stateful schedule past the end (3000 random cases, bindings)", function()
    math.randomseed(11)
    local plan = core.sched_plan { kind = "static_persistent", tiles_m = 4, tiles_n = 3, workers = 5 }
    assert.same({ 1, 3 }, { plan:tl_coord(13) }) -- TileLang's example: out of range, not (1, 0)
    for i = 1, 3000 do
      local c = random_case(i)
      local grid_m = (c.m + c.cl - 1) // c.cl
      local worker = math.random(0, c.workers - 1)
      local p, want = planned(c, worker)
      assert.same(want, stateless(c, function(id) return p:tl_coord(id) end, worker, grid_m),
        ("case %d: m=%d n=%d workers=%d swizzle=%d cluster=%d column_major=%s worker %d"):format(i, c.m, c.n,
          c.workers, c.sw, c.cl, tostring(c.cm), worker))
    end
  end)

  it("stateless loop == stateful schedule past the end (stdlib IR, random cases)", function()
    math.randomseed(12)
    for i = 1, 120 do
      local c = random_case(i)
      local grid_m = (c.m + c.cl - 1) // c.cl
      local waves = (grid_m * c.n + c.workers - 1) // c.workers
      local k, keep = tl_kernel(c, function(worker, keep)
        local s = tl.sched.persistent { m_tiles = c.m, n_tiles = c.n, workers = c.workers, swizzle = c.sw,
                                        cluster = c.cl, column_major = c.cm }
        tl.for_range(tl.const(0, tl.i32), waves, function(w) -- the stateless loop
          local m, n = s:coord(tl.const(c.workers, tl.i32) * w + worker)
          tl.if_(m:ult(grid_m) & n:ult(c.n), function() keep.less = m * 1000 + n end)
        end)
        s:init(worker)
        s:loop(function(s) keep.full = s.m_idx * 1000 + s.n_idx end)
      end)
      local worker = math.random(0, c.workers - 1)
      local less, full = {}, {}
      interp.run(k.op, { worker }, { on_op = function(op, _, outs)
        if op == keep.less:def() then less[#less + 1] = outs[1] end
        if op == keep.full:def() then full[#full + 1] = outs[1] end
      end })
      local _, want = planned(c, worker)
      local what = ("case %d: m=%d n=%d workers=%d swizzle=%d cluster=%d column_major=%s worker %d"):format(i, c.m,
        c.n, c.workers, c.sw, c.cl, tostring(c.cm), worker)
      assert.same(want, less, what)
      assert.same(want, full, what)
    end
  end)

  it("refuses state calls on the stateless form", function()
    local ok, err = pcall(tl_kernel, {}, function(t)
      local s = tl.sched.persistent { m_tiles = 4, n_tiles = 4, workers = 2, stateful = false }
      s:init(t)
    end)
    assert.is_false(ok)
    assert.matches("needs a stateful scheduler", err)
  end)
end)

describe("tl.sched.tiles (the TileLang surface over the cutlass schedulers)", function()
  local OUT = 1 << 20
  local function run(kind, cfg, worker, steps)
    tl.new_module()
    local k = tl.kernel("tiles", { params = { { "w", tl.i32 }, { "out", tl.ptr(tl.i32) }, { "ws", tl.ptr(tl.i8) } }, block = 32 })
    k:define(function(k, p)
      local o = { tiles = { cfg.m, cfg.n, 1, cfg.k }, workers = cfg.workers, workspace = p.ws,
                  accumulator_tile_bytes = 4 }
      local sched = tl.sched[kind](o)
      k:async_exec("sched", { warps = 1 }, function()
        local s = tl.sched.tiles(sched)
        s:init(p.w)
        s:loop(function(s)
          local base = p.out + s.current_iter * 4
          tl.store(base, s.m_idx)
          tl.store(base + 1, s.n_idx)
          tl.store(base + 2, s.k_begin)
          tl.store(base + 3, s.k_count)
        end)
      end)
    end)
    tl.compile(k, "canonicalize,cse,lower-tile-scheduler")
    local mem_eval, mem = interp.memory()
    interp.run(k.op, { worker, OUT, 1 << 32 }, { eval = function(op, ins, env)
      if op:name() == "cutlass.async.exec" then
        env:block(op:region(1):entry())
        return {}
      end
      return mem_eval(op, ins)
    end })
    local recs = {}
    for i = 0, steps - 1 do
      if mem[OUT + i * 16] == nil then break end
      recs[#recs + 1] = { mem[OUT + i * 16], mem[OUT + i * 16 + 4], mem[OUT + i * 16 + 8], mem[OUT + i * 16 + 12] }
    end
    return recs
  end

  it("walks the StreamK pieces of each worker like the reference", function()
    for _, cfg in ipairs { { m = 3, n = 2, k = 9, workers = 4 }, { m = 5, n = 3, k = 20, workers = 7 } } do
      local plan = core.sched_plan { kind = "streamk", tiles_m = cfg.m, tiles_n = cfg.n, tiles_k = cfg.k,
                                     workers = cfg.workers, acc_tile_bytes = 4 }
      for w = 0, plan:info().grid - 1 do
        local want = {}
        for i, pc in ipairs(plan:pieces(w)) do want[i] = { pc.m, pc.n, pc.k_tile_start, pc.k_tile_count } end
        assert.same(want, run("streamk", cfg, w, 64), ("%dx%d k%d workers %d, worker %d"):format(cfg.m, cfg.n, cfg.k, cfg.workers, w))
      end
    end
  end)

  it("gives each data-parallel worker its one tile", function()
    local cfg = { m = 4, n = 3, k = 5 }
    local plan = core.sched_plan { kind = "data_parallel", tiles_m = 4, tiles_n = 3, tiles_k = 5 }
    for w = 0, 11 do
      local t = plan:dp_tile(w)
      assert.same({ { t.m, t.n, 0, 5 } }, run("data_parallel", cfg, w, 4))
    end
  end)
end)
