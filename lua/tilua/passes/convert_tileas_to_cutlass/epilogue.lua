-- tilua.passes.convert_tileas_to_cutlass.epilogue: a consumer's epilogue on
-- its wgmma fragment (consumer.lua): tiles loaded per element of the fragment
-- (a GEMM's bias; with Epilogue.based_lines, the pass option line_loads=1, a
-- rank-1 line from the thread's address computed once), 16-bit tiles stored
-- by stmatrix + TMA store, others by plain stores or TMA reductions.

local tl = require "tilua"
local R = require "tilua.passes.convert_tileas_to_cutlass.read"
local V = require "tilua.passes.convert_tileas_to_cutlass.values"
local X = require "tilua.passes.convert_tileas_to_cutlass.ops"
local Staged = require "tilua.passes.convert_tileas_to_cutlass.staged"

local Epilogue = {}

-- {=== the epilogue: global tensors per element of the fragment f

-- Rows and columns of this thread's elements of a tile in the mma layout (on
-- a cluster, of this CTA's block of the tile).
local function tile_rows_cols(L, f, tile_coord_m, tile_coord_n, ri)
  local _, offs = V.block_offsets(L, ri)
  return V.plus(tile_coord_m * ri.shape[1] + f.row, offs[1]), V.plus(tile_coord_n * ri.shape[2] + f.col, offs[2])
end

-- env.tiled_load: a row or column (a slice of the mma layout) or a tile in
-- the mma layout, per element the thread holds.
function Epilogue.tiled_load(L, env, f)
  local load
  load = function(op)
    local rid = op:result(1):id()
    local carried = env.ahead and env.ahead[rid]
    if carried then -- (read a k block ahead: this block's values were carried)
      env.ahead[rid] = nil
      local x = nil
      if not X.is_single(op) then
        load(op)
        x = L.vmap[rid]
      end
      L.vmap[rid] = carried(x)
      env.ahead[rid] = carried
      return
    end
    local staged = Staged.read(L, env, op) -- (from the stage: staged.lua)
    if staged then
      L.vmap[rid] = staged
      return
    end
    local e = L.P.by_arg[op:operand(1):id()]
    local ri = R.tile_of(op:result(1))
    local kind = R.layout_kind(op:result(1))
    if X.single_load(L, op) then return end
    if kind == "slice" and #ri.shape == 1 and ri.layout.parent and ri.layout.parent.kind == "mma" then
      local along = ri.layout.dim == 0 and 2 or 1 -- slice dim 0 removed: a row over N
      local lead = R.leading(op)
      local base = V.plus(V.get(L, op:operand(2 + lead), op) * ri.shape[1], V.slice_block_offset(L, ri, along, op))
                   + (along == 2 and f.col or f.row) -- (on a cluster: the CTA's block of it)
      local at = function(off) return V.load_at(L, e, op, V.leading(L, op, { base + off })) end
      if Epilogue.based_lines and lead == 0 and e.rank == 1 then at = V.based_loader(L, e, op, base) end
      L.vmap[op:result(1):id()] = V.line(ri.elem, along, at)
      if env.pending_loads then table.insert(env.pending_loads, L.vmap[op:result(1):id()]) end
    elseif kind == "mma" and #ri.shape == 2 then
      local lead = R.leading(op)
      local r0, c0 = tile_rows_cols(L, f, V.get(L, op:operand(2 + lead), op), V.get(L, op:operand(3 + lead), op), ri)
      L.vmap[op:result(1):id()] = V.frag(ri.elem, ri.shape[1] * ri.shape[2] // 128, function(i)
        local dr, dc = f.offset(i)
        return V.load_at(L, e, op, V.leading(L, op, { r0 + dr, c0 + dc }))
      end)
      if env.pending_loads then table.insert(env.pending_loads, L.vmap[op:result(1):id()]) end
    else
      R.fail(op, "tiled_load of a tile of layout '%s' in a consumer is not lowered yet", tostring(kind))
    end
  end
  return load
end

-- A row of a tile in the mma layout (a slice along its columns: the rows the
-- thread holds; a log-sum-exp a row) stored by the first lane of each quad
-- that holds a row, bounds-checked.
local function store_rows(L, e, op, x, ri, tm, f, t)
  if L.nctas > 1 or x.along ~= 1 or ri.shape[1] ~= 64 then R.fail(op, "a stored slice must be a column of rows (one value a row, 64 rows), on one CTA") end
  tl.if_((t % 4):eq(0), function()
    for _, dr in ipairs { 0, 8 } do
      V.store_at(L, e, op, V.leading(L, op, { tm * ri.shape[1] + f.row + dr }), x:at(dr))
    end
  end)
end

-- A transposed accumulator (ops.lua's tileas.transpose of a fragment: a
-- swapped GEMM's D^T, its rows D's columns) stored as the tile ri of D,
-- element by element, bounds-checked: element i of the fragment of the 64 x n
-- tile at D's row f.col + dc and column f.row + dr of the tile (as
-- kernels/gemm.lua's epilogue_transposed: a few rows of D, a small part of the
-- traffic of a kernel that streams B).
local function store_transposed(L, e, op, x, ri, tm, tn, f)
  if L.nctas > 1 then R.fail(op, "a transposed accumulator's store on a cluster is not lowered yet") end
  local r0, c0 = tm * ri.shape[1] + f.col, tn * ri.shape[2] + f.row
  local narrow = x.of.trunc_of and x.of -- (a cast fragment: each element converted inside its bounds check)
  for i = 0, ri.shape[1] * ri.shape[2] // 128 - 1 do
    local dr, dc = f.offset(i)
    local idx = V.leading(L, op, { r0 + dc, c0 + dr })
    if narrow then V.store_at(L, e, op, idx, narrow.trunc_of:at(i), narrow.convert) else V.store_at(L, e, op, idx, x:at(i)) end
  end
end

-- The consumer warpgroups that store, a staging buffer each (ksplit's: consumer 0 alone).
local function storing(L) return L.ksplit and 1 or #L.consumers end

-- A reduce-add store of an f32 tile in the mma layout by TMA: the fragment
-- written (pairs, 8 bytes) into the warpgroup's staging tile of boxes of
-- 64 x 32 f32 (a 128-byte swizzle, the map's), then one thread adds each box
-- into the tensor (cp.reduce.async.bulk.tensor .add); the staging tile is
-- written again once the last reduce has read it.
local function tma_reduce(L, env, op, e, x, shape, coords, f, wg, t)
  local boxes = shape[2] // 32
  L.reduce_out = L.reduce_out or {}
  local buf = L.reduce_out[boxes]
  if not buf then
    buf = L.k:shared(tl.f32, { storing(L), boxes, 64, 32 }, { align = 1024, swizzle = 128 })
    L.reduce_out[boxes] = buf
  end
  tl.if_(t:eq(0), function() tl.bulk_wait(0, { read = true }) end)
  tl.named_barrier_sync(1 + wg, 128)
  for i = 0, shape[2] // 2 - 1, 2 do -- (elements i, i + 1: one row, adjacent columns)
    local dr, dc = f.offset(i)
    buf:ptr(wg, dc // 32, f.row + dr, f.col + dc % 32):store(tl.vector_of(tl.f32, { x:at(i), x:at(i + 1) }))
  end
  tl.fence_proxy_async("shared")
  tl.named_barrier_sync(1 + wg, 128)
  tl.if_(t:eq(0), function()
    for ch = 0, boxes - 1 do tl.tma_store(L.args[e.lowered_map], buf:ptr(wg, ch, 0, 0), coords(ch), { reduce = "add" }) end
    tl.bulk_commit()
  end)
  env.tma_stored = true
end

-- env.tiled_store: a tile in the mma layout; 16-bit to a TMA map in sub-tiles
-- of 64 x 32 through two staging buffers a warpgroup (kernels/gemm.lua's
-- store_subtiles, as stdlib/gemm.lua's epilogue: 8 KiB a warpgroup instead of
-- the whole tile's, so that a deeper ring fits) or, where the plan says
-- (e.store_whole: after a loop of chained dots), the warpgroup's whole
-- fragment at once (store_fragment, as kernels/attention.lua's epilogue: two
-- named barriers a tile, not two a sub-tile), else per element.
function Epilogue.tiled_store(L, env, f, wg, t)
  return function(op)
    local e = L.P.by_arg[op:operand(1):id()]
    local tile = op:operand(op:noperands())
    local ri = R.tile_of(tile)
    local x = V.get(L, tile, op)
    local lead = R.leading(op) -- (coordinates of the dims the tile leaves out come first)
    if V.is_line(x) then return store_rows(L, e, op, x, ri, V.get(L, op:operand(2 + lead), op), f, t) end
    local shape, offs = V.block_offsets(L, ri) -- this CTA's block of the tile
    if not V.is_frag(x) then R.fail(op, "tiled_store of a tile not in the mma layout is not lowered yet") end
    local tm, tn = V.get(L, op:operand(2 + lead), op), V.get(L, op:operand(3 + lead), op)
    if x.transposed then return store_transposed(L, e, op, x, ri, tm, tn, f) end
    local slices = shape[1] // 64 -- (a ping-pong consumer's 128 rows: two 64-row slices)
    if slices > 1 and (op:attr "reduce" or e.store_whole) then
      R.fail(op, "a reduce-add or whole-fragment store of a 128-row ping-pong consumer is not lowered yet")
    end
    if e.lowered_map and op:attr "reduce" then
      return tma_reduce(L, env, op, e, x, shape, function(ch)
        return V.leading(L, op, { V.plus(tm * ri.shape[1], offs[1]), V.plus(tn * ri.shape[2] + ch * 32, offs[2]) })
      end, f, wg, t)
    end
    if e.lowered_map and R.elem_bytes(ri.elem) == 2 then
      local EC = e.store_cols -- the sub-tile's columns (plan.lua: the map's box)
      local wide = x.trunc_of or x
      for sl = 0, slices - 1 do -- (each 64-row slice's sub-tiles through the warpgroup's staging)
        local vals, n = {}, shape[2] // 2
        for i = 0, n - 1 do vals[i] = wide:at(sl * n + i) end
        local o = { bn = shape[2], cols = EC, out = ri.elem, map = L.args[e.lowered_map], warpgroup = wg, barrier = 1 + wg, thread = t,
                    coords = function(ch)
                      local row = tm * ri.shape[1]
                      if sl > 0 then row = row + 64 * sl end
                      return V.leading(L, op, { V.plus(row, offs[1]), V.plus(tn * ri.shape[2] + ch * EC, offs[2]) })
                    end }
        if e.store_whole then
          L.whole_staging = L.whole_staging or L.k:shared(ri.elem, { storing(L), 2, 64, 64 }, { align = 1024, swizzle = 128 })
          o.staging = L.whole_staging
          L.G.store_fragment(tl, o, vals)
        else
          L.staging = L.staging or L.k:shared(ri.elem, { storing(L), 2, 64, EC }, { align = 1024, swizzle = 2 * EC })
          o.staging = L.staging
          L.G.store_subtiles(tl, o, vals)
        end
      end
      env.tma_stored = true
    else
      local r0, c0 = tile_rows_cols(L, f, tm, tn, ri)
      for i = 0, shape[1] * shape[2] // 128 - 1 do
        local dr, dc = f.offset(i)
        V.store_at(L, e, op, V.leading(L, op, { r0 + dr, c0 + dc }), x:at(i))
      end
    end
  end
end

-- }===

return Epilogue
