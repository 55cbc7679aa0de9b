-- tilua.kernels.gemm: the pieces of the Hopper GEMM that both the stdlib's
-- generator (stdlib/gemm.lua, tl.gemm) and the lowering of tile programs
-- (convert-tileas-to-cutlass, lua/tilua/passes/convert_tileas_to_cutlass/)
-- build kernels with, so that the tile GEMM is that GEMM (docs/gemm.md,
-- docs/tileprog.md). Written with the DSL only; each piece takes the library
-- as `tl`:
--
--   M.tile_loop(tl, work, cursors, bodies)      the work tiles of a CTA
--   M.mainloop(tl, pipe, st, lb, ub, init, mma, release)   the k loop of a consumer
--   M.epilogue(tl, c, p, sD, acc, m, n, cw, rows, t [, dims]), M.store_subtiles(tl, o, vals),
--   M.store_fragment(tl, o, vals)                the epilogue: sub-tiled, or the whole fragment at once
--   M.epilogue_transposed(tl, c, p, acc, m, n, rows, t [, dims])  a swapped GEMM's (swap_ab), from registers
--   M.ksplit_shared(tl, k, n), M.ksplit_turn(ks, g), M.ksplit_mainloop(tl, pipe, st, g, q, kbn, acc0, mma, release),
--   M.ksplit_sum(tl, ks, g, turn, acc, n, t)     ksplit's two warpgroups on one tile
--   M.grid_of(c, ctiles)                         the grid of a schedule
--   M.k_range(tl, c, work), M.max_splits(tl, c), M.plan_streamk(tl, c),
--   M.streamk_scheduler(tl, c, ws), M.workspace_bytes(c), M.fixup(tl, c, p, work, acc, m, n, cw, t [, part])
--                                               StreamK: the plan, the scheduler, the fixup

local M = {}

-- The work tiles of a CTA in order, from the scheduler's first work tile
-- `work`, carrying `cursors` (tables with .value): tile j goes to
-- bodies[j % #bodies + 1] (a body may be false: nothing to do).
function M.tile_loop(tl, work, cursors, bodies)
  local function values()
    local v = { work.value }
    for _, cur in ipairs(cursors) do v[#v + 1] = cur.value end
    return table.unpack(v)
  end
  local function assign(...)
    local v = { ... }
    work.value = v[1]
    for i, cur in ipairs(cursors) do cur.value = v[i + 1] end
  end
  local function visit(body)
    if body then body(work) end
    work:advance()
  end
  assign(tl.while_({ values() }, function(w, ...)
    work.value = w
    return work:is_valid(), w, ...
  end, function(...)
    assign(...)
    visit(bodies[1])
    for b = 2, #bodies do
      local before = table.pack(values())
      assign(tl.if_(work:is_valid(), function()
        visit(bodies[b])
        return values()
      end, function()
        assign(table.unpack(before, 1, before.n)) -- the values from before the then-branch
        return table.unpack(before, 1, before.n)
      end))
    end
    return values()
  end))
end

-- A consumer's mainloop over the k blocks [lb, ub) (at least one) of pipeline
-- `pipe` from its cursor st: per k block wait for the stage and issue
-- mma(acc, stage, k block, first) (wgmma_fence ... commit); then wait until one
-- group is in flight and release the stage before (release(cursor)), so the
-- tensor cores always have the next group queued. The first k block is peeled
-- (nothing to release yet; `first` is true for it, and it starts from init()).
-- The accumulator is a value or a list of values (one per 64-row slice).
-- issued(), when given, runs once every wgmma is issued, before the last
-- wgmma_wait (ping-pong's hand-off to the other warpgroup). Returns the
-- accumulator after the last group completed.
function M.mainloop(tl, pipe, st, lb, ub, init, mma, release, issued)
  pipe:consumer_wait(st)
  local first = mma(init(), st:index(), lb, true)
  local list = not tl.is_value(first)
  local accs = {}
  for i, v in ipairs(list and first or { first }) do accs[i] = { value = v } end
  local function values()
    local v = {}
    for i, a in ipairs(accs) do v[i] = a.value end
    return list and v or v[1]
  end
  local rel = setmetatable({ value = st.value, pipe = pipe, role = "consumer" }, tl.cutlass.State)
  st:advance()
  local cursors = { st, rel }
  for _, a in ipairs(accs) do cursors[#cursors + 1] = a end
  tl.cutlass.for_range(lb + 1, ub, cursors, function(kb)
    pipe:consumer_wait(st)
    local out = mma(values(), st:index(), kb, false)
    for i, v in ipairs(list and out or { out }) do accs[i].value = v end
    tl.wgmma_wait(1)
    release(rel)
    rel:advance()
    st:advance()
  end)
  if issued then issued() end
  tl.wgmma_wait(0)
  release(rel)
  return values()
end

-- {=== ksplit: two consumer warpgroups on one tile (consumers = "ksplit")
--
-- Warpgroup g takes the stages of the one ring whose place in its sequence has
-- g's parity, whatever tile they hold (so each pipeline stage is released by
-- the warpgroup that took it: a pipeline of mode pingpong). Each sums its own
-- k blocks; warpgroup 1 then leaves its sums in shared memory and warpgroup 0
-- adds them and alone runs the epilogue. The hand-over is ordered by two
-- seq_bars of depth 1 (mbarriers: synccheck reports a named barrier reached
-- from two code paths as divergent).

-- The hand-over's shared state in kernel k for n f32 a thread: sR (element i
-- of thread t at [i][t]), `ready` (warpgroup 1 arrives once its sums are in
-- sR, warpgroup 0 waits) and `free` (warpgroup 0 arrives once it read them).
function M.ksplit_shared(tl, k, n)
  return { sR = k:shared(tl.f32, { n, 128 }, { align = 128 }),
           ready = k:seq_bar { depth = 1, arrive_count = 128 }, free = k:seq_bar { depth = 1, arrive_count = 128 } }
end

-- Warpgroup g's turn at the hand-over (a cursor the tile loop carries; warpgroup 1's first wait on `free` passes).
function M.ksplit_turn(ks, g) return ks.ready:state { phase = g } end

-- Warpgroup g's k loop over a tile's kbn k blocks (at least one: the
-- producer fills as many) from its cursor st of pipeline `pipe` (each stage
-- the warpgroup takes advances it by 2; warpgroup 1's starts one ahead).
-- q.value: the parity of the place of the tile's first k block in the ring's
-- sequence, carried through the tile loop and advanced here. mma(acc, stage,
-- kb) issues k block kb of the tile (wgmma_fence ... commit); acc0: the
-- warpgroup's first accumulator. -> its sums
function M.ksplit_mainloop(tl, pipe, st, g, q, kbn, acc0, mma, release)
  local first = (q.value + g) % 2 -- this warpgroup's first k block of the tile
  local own = (kbn - first + 1) // 2
  local acc = { value = acc0 }
  tl.cutlass.for_range(tl.const(0, tl.i32), own, { st, acc }, function(i)
    pipe:consumer_wait(st)
    acc.value = mma(acc.value, st:index(), first + 2 * i)
    tl.wgmma_wait(0) -- (the other warpgroup's wgmmas fill the wait)
    release(st)
    st:advance(2)
  end)
  q.value = (q.value + kbn) % 2
  return acc.value
end

-- The hand-over of warpgroup g's sums acc (a vector of n f32, thread t's) at
-- its turn: warpgroup 1 stores them, warpgroup 0 adds them to its own. ->
-- the tile's sums (warpgroup 0), nil (warpgroup 1)
function M.ksplit_sum(tl, ks, g, turn, acc, n, t)
  if g == 1 then
    ks.free:wait(turn)
    for i = 0, n - 1 do ks.sR:ptr(i, t):store(tl.extract(acc, i)) end
    ks.ready:arrive(turn)
    return nil
  end
  ks.ready:wait(turn)
  local sums = {}
  for i = 0, n - 1 do sums[i + 1] = tl.extract(acc, i) + ks.sR:ptr(i, t):load() end
  ks.free:arrive(turn)
  return tl.vector_of(tl.f32, sums)
end

-- }===

-- The epilogue of one 64-row slice of consumer warpgroup cw's part of tile
-- (m, n): acc (its 64 x BN fragment, rows `rows` of the tile) scaled, biased
-- and activated in registers, then stored in sub-tiles (M.store_subtiles).
function M.epilogue(tl, c, p, sD, acc, m, n, cw, rows, t, dims)
  local BN = c.bn
  local DM, DN = dims and dims.m or c.m, dims and dims.n or c.n -- the problem (dims: values, a dynamic kernel's)
  local bar_id = 1 + cw -- named barriers 1, 2, ...: one per consumer warpgroup
  local f = tl.wgmma_fragment(t)
  local row0 = m * c.bm + rows + f.row -- global row of the thread's first element
  local col0 = n * BN + f.col
  local vals = {}
  for i = 0, BN // 2 - 1 do
    local v = tl.extract(acc, i)
    if c.alpha_param then v = v * p.alpha elseif c.alpha and c.alpha ~= 1 then v = v * tl.const(c.alpha, tl.f32) end
    vals[i] = v
  end
  if c.bias or (c.beta and c.beta ~= 0) or c.activation then
    for i = 0, BN // 2 - 1 do
      local dr, dc = f.offset(i)
      local col = col0 + dc
      local v = vals[i]
      if c.bias then
        local inb = col:lt(DN)
        v = v + tl.select(inb, (p.bias + tl.select(inb, col, tl.const(0, tl.i32))):load(), tl.const(0, tl.f32))
      end
      if c.beta and c.beta ~= 0 then
        local row = row0 + dr
        local inb = row:lt(DM) & col:lt(DN)
        local n64 = dims and DN:cast(tl.i64) or DN
        local at = tl.select(inb, row:cast(tl.i64) * n64 + col:cast(tl.i64), tl.const(0, tl.i64))
        local old = tl.select(inb, (p.C + at):load():cast(tl.f32), tl.const(0, tl.f32))
        v = v + old * tl.const(c.beta, tl.f32)
      end
      if c.activation == "relu" then v = tl.max(v, tl.const(0, tl.f32)) end
      vals[i] = v
    end
  end
  M.store_subtiles(tl, { bn = BN, cols = c.epi, out = c.out == "f16" and tl.f16 or tl.bf16, staging = sD, map = p.D,
                         warpgroup = cw, barrier = bar_id, thread = t,
                         coords = function(ch) return { m * c.bm + rows, n * BN + ch * c.epi } end }, vals)
end

-- The epilogue of one 64-row slice of a swapped GEMM's tile (c.swap_ab: the
-- tile is D^T, its rows D's columns, its bn columns D's rows): acc scaled,
-- biased and activated in registers and stored to the row-major D (the
-- pointer p.D) element by element, transposed, inside the problem (D is
-- DM x DN). The tile is a few rows of D (decode-sized M), so the stores are a
-- small part of the traffic: the kernel streams B.
function M.epilogue_transposed(tl, c, p, acc, m, n, rows, t, dims)
  local DM, DN = dims and dims.m or c.m, dims and dims.n or c.n
  local eout = c.out == "f16" and tl.f16 or tl.bf16
  local n64 = dims and DN:cast(tl.i64) or tl.const(DN, tl.i64)
  local f = tl.wgmma_fragment(t)
  local col0 = m * c.bm + rows + f.row -- D's column of the thread's first element
  local row0 = n * c.bn + f.col        -- and its row
  for i = 0, c.bn // 2 - 1 do
    local dr, dc = f.offset(i)
    local col, row = col0 + dr, row0 + dc
    local v = tl.extract(acc, i)
    if c.alpha_param then v = v * p.alpha elseif c.alpha and c.alpha ~= 1 then v = v * tl.const(c.alpha, tl.f32) end
    tl.if_(row:lt(DM) & col:lt(DN), function()
      local at = row:cast(tl.i64) * n64 + col:cast(tl.i64)
      if c.bias then v = v + (p.bias + col):load() end
      if c.beta and c.beta ~= 0 then v = v + (p.C + at):load():cast(tl.f32) * tl.const(c.beta, tl.f32) end
      if c.activation == "relu" then v = tl.max(v, tl.const(0, tl.f32)) end
      (p.D + at):store(v:cast(eout))
    end)
  end
end

-- Store the f32 values `vals` (0-based, vals[i] the wgmma fragment's element
-- i) of one consumer warpgroup's 64 x o.bn fragment in sub-tiles of 64 x
-- o.cols (16, 32 or 64; 16: one stmatrix of four matrices a warp) through
-- the tensor map o.map (sub-tile ch at o.coords(ch), the map's box 64 x
-- o.cols, swizzled by a row of 2 * o.cols
-- bytes): pairs packed to o.out and written with stmatrix into one of the
-- warpgroup's (o.warpgroup) two staging buffers o.staging[wg][ch % 2] (64 x
-- o.cols, the same swizzle), then one thread (o.thread == 0) stores it with TMA
-- while the next sub-tile is written into the other buffer; a buffer is
-- written again once the store before the last has read it (bulk wait_group
-- read 1: CUTLASS's epilogue with StagesD = 2). The warpgroup's 128 threads
-- meet at named barrier o.barrier twice per sub-tile. Every tile starts on
-- buffer 0: with an odd count of sub-tiles (bn = 96, 160, 224 in sub-tiles of
-- 32; 48, 80, 112, 144 ... in sub-tiles of 16) the previous tile's last store
-- read buffer 0 too, so the first sub-tile waits for every store (bulk
-- wait_group read 0).
function M.store_subtiles(tl, o, vals)
  local BN, EC, cw, t, sD, bar_id = o.bn, o.cols, o.warpgroup, o.thread, o.staging, o.barrier
  local lane = t % 32
  local q, rr = lane // 8, lane % 8
  local row = (t // 32) * 16 + (q % 2) * 8 + rr -- the stmatrix row address this lane gives
  local odd = (BN // EC) % 2 == 1
  for ch = 0, BN // EC - 1 do
    local buf = ch % 2
    tl.if_(t:eq(0), function() tl.bulk_wait((odd and ch == 0) and 0 or 1, { read = true }) end)
    tl.named_barrier_sync(bar_id, 128)
    for j = ch * EC // 8, (ch + 1) * EC // 8 - 1, 2 do
      -- matrices (j, rows 0-7), (j, rows 8-15), (j+1, 0-7), (j+1, 8-15) of this warp's 16 rows
      local col = (q // 2) * 8 + (j - ch * EC // 8) * 8
      local regs = {}
      for r = 0, 3 do regs[r + 1] = tl.pack(vals[4 * j + 2 * r], vals[4 * j + 2 * r + 1], o.out) end
      tl.stmatrix(sD:ptr(cw, buf, row, col), regs)
    end
    tl.fence_proxy_async("shared")
    tl.named_barrier_sync(bar_id, 128)
    tl.if_(t:eq(0), function()
      tl.tma_store(o.map, sD:ptr(cw, buf, 0, 0), o.coords(ch))
      tl.bulk_commit()
    end)
  end
end

-- Store the f32 values `vals` (0-based, vals[i] the wgmma fragment's element i)
-- of one consumer warpgroup's 64 x o.bn fragment through the tensor map
-- o.map (chunk ch of 64 columns at o.coords(ch)): pairs packed to o.out, stmatrix into its half
-- (o.warpgroup) of the staging buffer o.staging (bn/64 chunks of 64 x 64,
-- 128-byte swizzle), then one thread (o.thread == 0) stores the chunks with
-- TMA, after waiting for the previous tile's stores to finish reading it. The
-- warpgroup's 128 threads meet at named barrier o.barrier.
function M.store_fragment(tl, o, vals)
  local BN, cw, t, sD, bar_id = o.bn, o.warpgroup, o.thread, o.staging, o.barrier
  local lane = t % 32
  local q, rr = lane // 8, lane % 8
  tl.if_(t:eq(0), function() tl.bulk_wait(0, { read = true }) end)
  tl.named_barrier_sync(bar_id, 128)
  for j = 0, BN // 8 - 1, 2 do
    -- matrices (j, rows 0-7), (j, rows 8-15), (j+1, 0-7), (j+1, 8-15) of this warp's 16 rows
    local row = (t // 32) * 16 + (q % 2) * 8 + rr
    local col = (q // 2) * 8 + (j % 8) * 8
    local regs = {}
    for r = 0, 3 do regs[r + 1] = tl.pack(vals[4 * j + 2 * r], vals[4 * j + 2 * r + 1], o.out) end
    tl.stmatrix(sD:ptr(cw, j // 8, row, col), regs)
  end
  tl.fence_proxy_async("shared")
  tl.named_barrier_sync(bar_id, 128)
  tl.if_(t:eq(0), function()
    for ch = 0, BN // 64 - 1 do
      tl.tma_store(o.map, sD:ptr(cw, ch, 0, 0), o.coords(ch))
    end
    tl.bulk_commit()
  end)
end

-- The k blocks [begin, begin + count) of a unit of work: all of them for whole
-- tiles, the StreamK piece's range otherwise.
function M.k_range(tl, c, work)
  if c.schedule ~= "streamk" then return tl.const(0, tl.i32), tl.const(c.kt, tl.i32) end
  return work:k_tile_start(), work:k_tile_count()
end

-- StreamK workspace: a counter per tile (a 256-byte aligned block; one per
-- tile and fixup part when c.fixup_parts groups of warps run the fixup on
-- their own), then f32 partial tiles (bm x BN): a slot for each split of a
-- tile but its last, laid out [tile][split][64-row slice][chunk j][thread]
-- vector<4 x f32> so that every store and load is coalesced. The plan (tl.core.sched_plan, the reference the
-- lowering follows) bounds the splits of a tile.
--
-- The StreamK pieces take a configuration c: tiles c.tm x c.tn of c.bm x c.bn
-- (a 64-row warpgroup each), c.kt k blocks, c.grid workers, c.decomposition
-- (nil or "split_k") and c.splits, c.swizzle, c.raster; the tile programs'
-- lowering (lua/tilua/passes/convert_tileas_to_cutlass/) builds one for its StreamK schedule.
local function counters_bytes(c) return (c.tiles * (c.fixup_parts or 1) * 4 + 255) // 256 * 256 end
function M.max_splits(tl, c)
  local plan = tl.core.sched_plan { kind = "streamk", tiles_m = c.tm, tiles_n = c.tn, tiles_k = c.kt, workers = c.grid,
                                    swizzle = c.swizzle or 8, acc_tile_bytes = c.bm * c.bn * 4,
                                    decomp = c.decomposition, splits = c.splits }
  return math.max(1, plan:info().max_splits or 1)
end
-- The grid of c for `ctiles` cluster tiles, planned for c.sms_planned SMs:
-- data-parallel, a CTA a tile; persistent, at most a CTA per SM (a cluster per
-- cluster of SMs); StreamK, a worker per SM (the scheduler spreads the k
-- blocks of all tiles over them).
function M.grid_of(c, ctiles)
  local sms = c.sms_planned
  if c.schedule == "data_parallel" then return ctiles * c.cluster end
  if c.schedule == "streamk" then return sms end
  return math.max(1, math.min(sms // c.cluster, ctiles)) * c.cluster
end

-- The plan of c: split-K's default splits (one wave of tiles x splits units)
-- and c.max_splits, which sizes the workspace. Returns c.
function M.plan_streamk(tl, c)
  if c.decomposition == "split_k" and (c.splits == nil or c.splits == "auto") then
    c.splits = math.max(2, math.min(c.kt, c.grid // c.tiles))
  end
  c.max_splits = M.max_splits(tl, c)
  return c
end
-- The StreamK scheduler of c, its workspace the i32 pointer ws.
function M.streamk_scheduler(tl, c, ws)
  return tl.sched.streamk { tiles = { c.tm, c.tn, 1, c.kt }, swizzle = c.swizzle or 8, raster_order = c.raster,
                            workers = c.grid, workspace = ws, accumulator_tile_bytes = c.bm * c.bn * 4,
                            reduction = "deterministic", decomposition = c.decomposition, splits = c.splits }
end
function M.workspace_bytes(c) return counters_bytes(c) + c.tiles * (c.max_splits - 1) * c.bm * c.bn * 4 end

-- The StreamK fixup. Every split of a tile but the last stores its partial sum
-- in its own slot and arrives on the tile's counter (release); the last split
-- waits (acquire) until the others have all arrived, resets the counter for
-- the next launch and adds their partials in split order, so the sum is the
-- same whatever the timing. No split waits for another but the last: no chain
-- of waits, no deadlock. Returns the accumulator and whether this piece
-- finishes the tile.
function M.fixup(tl, c, p, work, acc, m, n, cw, t, part)
  -- acc / cw: one accumulator and its 64-row slice of the tile, or lists of
  -- them; part: which of the c.fixup_parts groups of warps calls (counters of their own)
  local list = not tl.is_value(acc)
  local accs, slices = list and acc or { acc }, list and cw or { cw }
  local splits, split, final = work:expected_splits(), work:split_idx(), work:is_final_split()
  local tile = m * c.tn + n
  local counter = (c.fixup_parts or 1) > 1 and tile * c.fixup_parts + part or tile
  local n4 = c.bn // 8 -- vector<4 x f32> chunks per thread
  local slot = p.ws:as(tl.f32)
  local function chunk_ptr(s, i, j)
    local at = (((tile * (c.max_splits - 1) + s) * (c.bm // 64) + slices[i]) * n4 + j) * 128 + t
    return slot + (at:cast(tl.i64) * 4 + counters_bytes(c) // 4)
  end
  local out = table.pack(tl.if_(splits:gt(1), function()
    return tl.if_(final, function()
      tl.generic_barrier.wait_eq_reset(p.ws, counter, splits - 1)
      return tl.for_range(tl.const(0, tl.i32), splits - 1, accs, function(s, ...)
        local sums, res = { ... }, {}
        for i, sum in ipairs(sums) do
          local vals = {}
          for j = 0, n4 - 1 do
            local v = chunk_ptr(s, i, j):load { vector = 4 }
            for e = 0, 3 do vals[4 * j + e + 1] = tl.extract(sum, 4 * j + e) + tl.extract(v, e) end
          end
          res[i] = tl.vector_of(tl.f32, vals)
        end
        return table.unpack(res)
      end)
    end, function()
      for i, a in ipairs(accs) do
        for j = 0, n4 - 1 do
          local vals = {}
          for e = 0, 3 do vals[e + 1] = tl.extract(a, 4 * j + e) end
          chunk_ptr(split, i, j):store(tl.vector_of(tl.f32, vals))
        end
      end
      tl.generic_barrier.arrive_inc(p.ws, counter)
      return table.unpack(accs)
    end)
  end, function() return table.unpack(accs) end))
  if list then return { table.unpack(out, 1, out.n) }, final end
  return out[1], final
end

return M
