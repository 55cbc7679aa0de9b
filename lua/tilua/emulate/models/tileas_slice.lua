-- tilua.emulate.models.tileas_slice: the tile ops whose elements a
-- protocol-only run (the checker's) still computes, marked once at decoding
-- (emulate/models/tileas.lua; docs/protocol.md, "Tile programs").
--
-- A protocol-only run keeps a tile's shape and footprint, not its elements:
-- dots, exponentials, reductions and casts whose results only reach stores
-- of data cost the check nothing. A branch, a loop bound, an index or a
-- synchronizing op sees a tile's elements only through a scalar made of one
-- (tileas.extract, a reduce to a scalar), so the elements of every tile that
-- reaches such a scalar are computed exactly: the backward slice of those
-- tiles, through
--   - the operands of the op that made a value (a loop's or an if's results:
--     its operands and what its regions yield; a block argument: the same);
--   - a shared tensor: every copy into it (what a read of it returns);
--   - global memory: where a load is in the slice, every store's tile (a
--     program may load what it or another one stored), so stores in the
--     slice write their bytes.
-- The rest keeps its footprint: its reads and writes still go through the
-- race check.
--
--   require("tilua.emulate.models.tileas_slice").mark(dk.body)  -- rec.exact = true on the slice

local S = {}

-- The tile ops whose result is a scalar made of a tile's elements: the seeds.
local function seed_of(rec)
  if rec.name == "tileas.extract" then return rec.ins[1] end
  if rec.name == "tileas.reduce" and not rec.tt then return rec.ins[1] end -- (a rank-1 tile to a scalar)
end

-- every record of a block with its owner; the operands of each terminator of an op's regions
local DS = require "tilua.emulate.data_slice"
local walk, yields = DS.walk, DS.yields

local LOOP = { ["scf.for"] = true, ["tileas.pipelined_for"] = true }

-- mark(body): rec.exact = true on every record of the slice; -> how many.
function S.mark(body)
  local made, arg_of, copies, stores, seeds = {}, {}, {}, {}, {}
  walk(body, nil, function(rec)
    DS.note_defs(rec, made, arg_of)
    if rec.name == "tileas.copy" then -- into a shared tensor
      copies[rec.ins[2]] = copies[rec.ins[2]] or {}
      table.insert(copies[rec.ins[2]], rec)
    elseif rec.name == "tileas.tiled_store" then -- into a global tensor (a parameter of its own: its buffer)
      stores[rec.ins[1]] = stores[rec.ins[1]] or {}
      table.insert(stores[rec.ins[1]], rec)
    end
    local s = seed_of(rec)
    if s then -- (marked: its handler says where its tile lacks elements)
      seeds[#seeds + 1], rec.exact = s, true
    end
  end)
  local _, work, need = DS.worklist()
  local n = #seeds
  local function take(rec) -- rec's elements are computed: so are its operands'
    if rec.exact then return end
    rec.exact, n = true, n + 1
    for _, v in ipairs(rec.ins) do need(v) end
    for _, ys in ipairs(yields(rec)) do
      for _, v in ipairs(ys) do need(v) end
    end
    if rec.name == "tileas.tiled_load" then
      for _, st in ipairs(stores[rec.ins[1]] or {}) do take(st) end
    elseif rec.name == "tileas.alloc_tensor" then
      for _, cp in ipairs(copies[rec.outs[1]] or {}) do take(cp) end
    end
  end
  -- value i of a loop or an if (its result i, or its body's argument i): what
  -- carries it in and what its regions yield for it, not the other values
  local function carried(rec, i, is_arg)
    if not DS.carried(rec, i, is_arg, LOOP, need) then take(rec) end
  end
  for _, v in ipairs(seeds) do need(v) end
  while #work > 0 do
    local v = table.remove(work)
    local m, a = made[v], arg_of[v]
    if m and (LOOP[m[1].name] or m[1].name == "scf.if") then carried(m[1], m[2], false)
    elseif m then take(m[1])
    elseif a then carried(a[1], a[2], true) end
  end
  return n
end

return S
