-- tilua.emulate.models.nvvm_mma: the emulator's handlers for the nvvm forms of TMA
-- tensor copies, wgmma, stmatrix and cluster ops (what convert-tile-to-nvvm
-- makes of the tile ops of emulate/models/mma.lua and emulate/models/tile.lua), registered
-- through emulate.extend after both: each translates its operands (window and
-- cluster addresses through emulate/models/nvvm.lua's nvvm_shared / nvvm_window,
-- coordinates from PTX order, innermost first, back to the tile ops' order)
-- and runs the authoring-level handler, so the copies, the swizzle, the
-- descriptors, the wgmma compute and the DSMEM checks are those of the tile
-- ops (docs/protocol.md, "Lowered IR and the check after every pass").

return function(handlers, x)
  local sh, window, eval_lanes = x.nvvm_shared, x.nvvm_window, x.eval_lanes
  local DSMEM_BASE = x.DSMEM_BASE

  -- {=== TMA tensor copies: (dst, map, bar, coords innermost first[, mask]) and (map, src, coords)

  -- the operands with the `dim` coordinates from `first` on reversed and the addresses at `addrs` translated
  local function tile_order(rec, ins, first, addrs)
    local dim = rec.dim
    if not dim then
      dim = rec.op:attr "dim"
      rec.dim = dim
    end
    local t = {}
    for i = 1, #rec.ins do t[i] = ins[i] end
    for _, i in ipairs(addrs) do t[i] = sh(ins[i]) end
    for d = 0, dim - 1 do t[first + d] = ins[first + dim - 1 - d] end
    return t
  end
  local tma_load, tma_store = handlers["tile.tma_load"], handlers["tile.tma_store"]
  handlers["nvvm.cp.async.bulk.tensor.shared.cluster.global"] = function(R, W, rec, ins, ctx)
    return tma_load(R, W, rec, tile_order(rec, ins, 4, { 1, 3 }), ctx)
  end
  handlers["nvvm.cp.async.bulk.tensor.global.shared.cta"] = function(R, W, rec, ins, ctx)
    return tma_store(R, W, rec, tile_order(rec, ins, 3, { 2 }), ctx)
  end
  handlers["nvvm.cp.async.bulk.prefetch.tensor"] = handlers["tile.tma_prefetch"]
  handlers["nvvm.prefetch.tensormap"] = handlers["tile.tensor_map_prefetch"]

  -- }===

  -- {=== wgmma (descriptors are i64 values, as tile.wgmma_desc makes them), stmatrix

  handlers["nvvm.wgmma.fence.aligned"] = handlers["tile.wgmma_fence"]
  handlers["nvvm.wgmma.commit.group.sync.aligned"] = handlers["tile.wgmma_commit"]
  handlers["nvvm.wgmma.mma_async"] = handlers["tile.wgmma"]
  local wgmma_wait = x.wgmma_wait
  handlers["nvvm.wgmma.wait.group.sync.aligned"] = function(R, W, rec)
    wgmma_wait(R, W, rec.op:attr "group" or 0)
    return {}
  end
  local stmatrix = handlers["tile.stmatrix"]
  handlers["nvvm.stmatrix"] = function(R, W, rec, ins, ctx)
    local t = { sh(ins[1]) }
    for i = 2, #rec.ins do t[i] = ins[i] end
    return stmatrix(R, W, rec, t, ctx)
  end

  -- }===

  -- {=== clusters: the cluster barrier, mapa / getctarank, remote arrivals and accesses

  handlers["nvvm.cluster.arrive"] = handlers["tile.cluster_arrive"]
  handlers["nvvm.cluster.arrive.relaxed"] = handlers["tile.cluster_arrive"]
  handlers["nvvm.cluster.wait"] = handlers["tile.cluster_wait"]
  local mapa = handlers["tile.mapa"]
  handlers["nvvm.mapa.shared.cluster"] = function(R, W, rec, ins, ctx)
    return { window(mapa(R, W, rec, { sh(ins[1]), ins[2] }, ctx)[1]) }
  end
  handlers["nvvm.getctarank.shared.cluster"] = function(R, W, rec, ins, ctx)
    return eval_lanes(R, W, rec, { sh(ins[1]) }, ctx, function(v)
      local a = v[1]
      if a < DSMEM_BASE then return { W.cta.rank } end
      return { ((a - DSMEM_BASE) >> 32) % (R.k.cluster or 1) }
    end)
  end
  -- .shared::cluster accesses and arrivals: the shared ones, on the translated address
  for _, n in ipairs { "ld", "st", "atom", "red", "atom.cas", "mbarrier.arrive", "mbarrier.arrive.expect_tx" } do
    handlers["nvvm." .. n .. ".shared.cluster"] = assert(handlers["nvvm." .. n .. ".shared"])
  end

  -- }===
end
