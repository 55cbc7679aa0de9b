-- tilua.emulate.models.nvvm_mma: the emulator's handlers for the nvvm forms of TMA
-- tensor copies, wgmma, stmatrix and cluster ops (what convert-tile-to-nvvm
-- makes of the tile ops of emulate/models/mma.lua and emulate/models/tile.lua), a
-- model of emulate/models/init.lua: each translates its operands (window and
-- cluster addresses through emulate/address.lua's shared / window,
-- coordinates from PTX order, innermost first, back to the tile ops' order)
-- and runs the authoring-level handler, so the copies, the swizzle, the
-- descriptors, the wgmma compute and the DSMEM checks are those of the tile
-- ops (docs/protocol.md, "Lowered IR and the check after every pass").

local lanes = require "tilua.emulate.lanes"
local address = require "tilua.emulate.address"
local tile = require "tilua.emulate.models.tile"
local nvvm = require "tilua.emulate.models.nvvm"
local mma = require "tilua.emulate.models.mma"

local sh, window, eval_lanes = address.shared, address.window, lanes.eval
local DSMEM_BASE = address.DSMEM_BASE

local handlers = {}

do

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
  local mh = mma.handlers
  local tma_load, tma_store = mh["tile.tma_load"], mh["tile.tma_store"]
  handlers["nvvm.cp.async.bulk.tensor.shared.cluster.global"] = function(R, W, rec, ins, ctx)
    return tma_load(R, W, rec, tile_order(rec, ins, 4, { 1, 3 }), ctx)
  end
  handlers["nvvm.cp.async.bulk.tensor.global.shared.cta"] = function(R, W, rec, ins, ctx)
    return tma_store(R, W, rec, tile_order(rec, ins, 3, { 2 }), ctx)
  end
  handlers["nvvm.cp.async.bulk.prefetch.tensor"] = mh["tile.tma_prefetch"]
  handlers["nvvm.prefetch.tensormap"] = mh["tile.tensor_map_prefetch"]
  handlers["nvvm.prefetch.global"] = mh["tile.prefetch"]

  -- }===

  -- {=== wgmma (descriptors are i64 values, as tile.wgmma_desc makes them), stmatrix

  handlers["nvvm.wgmma.fence.aligned"] = mh["tile.wgmma_fence"]
  handlers["nvvm.wgmma.commit.group.sync.aligned"] = mh["tile.wgmma_commit"]
  handlers["nvvm.wgmma.mma_async"] = mh["tile.wgmma"]
  local wgmma_wait = mma.wgmma_wait
  handlers["nvvm.wgmma.wait.group.sync.aligned"] = function(R, W, rec)
    wgmma_wait(R, W, rec.op:attr_or_default "group")
    return {}
  end
  local stmatrix = mh["tile.stmatrix"]
  handlers["nvvm.stmatrix"] = function(R, W, rec, ins, ctx)
    local t = { sh(ins[1]) }
    for i = 2, #rec.ins do t[i] = ins[i] end
    return stmatrix(R, W, rec, t, ctx)
  end

  -- }===

  -- {=== clusters: the cluster barrier, mapa / getctarank, remote arrivals and accesses

  local th = tile.handlers
  handlers["nvvm.cluster.arrive"] = th["tile.cluster_arrive"]
  handlers["nvvm.cluster.arrive.relaxed"] = th["tile.cluster_arrive"]
  handlers["nvvm.cluster.wait"] = th["tile.cluster_wait"]
  local mapa = th["tile.mapa"]
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
    handlers["nvvm." .. n .. ".shared.cluster"] = assert(nvvm.handlers["nvvm." .. n .. ".shared"])
  end

  -- }===
end

return { handlers = handlers }
