-- tilua.emulate.data_slice: the pure ops of a warp-level kernel whose results
-- a protocol-only run (the checker's) need not compute, marked once at
-- decoding (emulate/decode.lua; docs/protocol.md, "Protocol-only runs"). It is
-- the warp-level twin of models/tileas_slice.lua (tile programs).
--
-- A protocol-only run moves no bytes through copies and wgmma: the values in
-- registers that only become data (an attention's scores and softmax, the
-- P operand it packs, the sums an epilogue stores) cost the check nothing
-- when they are not computed. What decides a synchronization, a branch, a
-- loop bound or an address is computed exactly: the backward slice of every
-- operand of every op other than the data operands below, through
--   - the op that made a value (all its operands); a loop's or an if's result
--     or block argument: what carries it in and what its regions yield for it;
--   - memory: where an op that reads memory (a load, an atomic, a wgmma, any
--     op not known to read none) has a result in the slice, the data every
--     store writes is in it too (a kernel may read back what it stored).
-- The data operands: the value a tile.store or tile.stmatrix writes, the
-- accumulator (and registers A) of a tile.wgmma, the value a tile.shfl moves
-- (its result's slice takes it). A pure op (arith, tile.math, tile.extract,
-- tile.from_elements, tile.pack, tile.splat) none of whose results is in the
-- slice is marked rec.data_only: a protocol-only run gives its results the
-- placeholder lanes.DATA (a store writes zeros for it) after touching its
-- operands, so an accumulator read before its wgmma_wait is still reported.
--
--   require("tilua.emulate.data_slice").mark(dk.body)  -- -> how many ops are data only

local S = {}

local function pure(name)
  return name:sub(1, 6) == "arith." or name == "tile.math" or name == "tile.extract" or name == "tile.from_elements"
    or name == "tile.pack" or name == "tile.splat" or name == "nvvm.math.approx"
end

-- op name -> fn(rec) -> { [operand index] = true }: the operands that are data
-- (in the slice only where the op's own result is)
local DATA = {
  ["tile.store"] = function() return { [1] = true } end,
  ["tile.stmatrix"] = function(rec)
    local t = {}
    for i = 2, #rec.ins do t[i] = true end
    return t
  end,
  ["tile.wgmma"] = function(rec)
    return { [1] = true, [2] = rec.op:operand(2):type():info().kind == "vector" or nil }
  end,
  ["tile.shfl"] = function() return { [1] = true } end,
}
local STORES = { ["tile.store"] = true, ["tile.stmatrix"] = true }

-- Ops with results that read no memory a store of data writes (their results
-- in the slice take no store's data along).
local function reads_no_data(name)
  if name:match "^cutlass%.pipeline%." or name:match "^cutlass%.seq_bar%." then return true end
  if name:match "^cutlass%.tile_scheduler%." then return name ~= "cutlass.tile_scheduler.fixup" end
  return ({ ["tile.thread_id"] = true, ["tile.lane_id"] = true, ["tile.warp_id"] = true, ["tile.agent_warp_id"] = true,
            ["tile.agent_thread_id"] = true, ["tile.elect"] = true, ["tile.block_id"] = true, ["tile.grid_dim"] = true,
            ["tile.block_dim"] = true, ["tile.alloc_shared"] = true, ["tile.dynamic_shared"] = true,
            ["tile.ptr_add"] = true, ["tile.ptr_cast"] = true, ["tile.int_to_ptr"] = true, ["tile.ptr_to_int"] = true,
            ["tile.memref_ptr"] = true, ["tile.wgmma_desc"] = true, ["tile.cluster_rank"] = true,
            ["tile.cluster_id"] = true, ["tile.cluster_size"] = true, ["tile.mapa"] = true, ["tile.shfl"] = true })[name]
    or false
end

-- Every record of a block, nested ones too, with its owner (the op whose
-- region holds it): f(rec, owner). (models/tileas_slice.lua's too.)
local function walk(blk, owner, f)
  for _, rec in ipairs(blk.ops) do
    f(rec, owner)
    for _, region in ipairs(rec.regions or {}) do
      for _, b in ipairs(region) do walk(b, rec, f) end
    end
  end
end
S.walk = walk

-- The operands of the terminator (scf.yield, scf.condition) of each block
-- of rec's regions: { {v, ...}, ... }.
local function yields(rec)
  local out = {}
  for _, region in ipairs(rec.regions or {}) do
    for _, b in ipairs(region) do
      local last = b.ops[#b.ops]
      if last and (last.name == "scf.yield" or last.name == "scf.condition") then out[#out + 1] = last.ins end
    end
  end
  return out
end
S.yields = yields

-- What value i of a loop (an op named in loops: scf.for's operands and
-- block arguments) or an scf.if is made of: need(v) for what carries it in
-- and what its regions yield for it (its result i, or its body's argument i
-- when is_arg; the induction variable: nothing); false where it is the whole
-- op's (another op's block argument). (models/tileas_slice.lua's too.)
function S.carried(rec, i, is_arg, loops, need)
  if loops[rec.name] then
    if is_arg then
      if i == 1 then return true end -- the induction variable (its bounds are operands: seeds)
      i = i - 1
    end
    need(rec.ins[3 + i])
  elseif rec.name ~= "scf.if" or is_arg then
    return false
  end
  for _, ys in ipairs(yields(rec)) do need(ys[i]) end
  return true
end
local FOR = { ["scf.for"] = true }

-- A worklist of values: needed (value -> true), work (the values to visit)
-- and need(v), which adds v once.
function S.worklist()
  local needed, work = {}, {}
  return needed, work, function(v)
    if v and not needed[v] then
      needed[v] = true
      work[#work + 1] = v
    end
  end
end

-- Note what rec defines: made[v] = {rec, i} for its result i, arg_of[v] =
-- {rec, i, r} for argument i of a block of its region r.
function S.note_defs(rec, made, arg_of)
  for i, v in ipairs(rec.outs) do made[v] = { rec, i } end
  for r, region in ipairs(rec.regions or {}) do
    for _, b in ipairs(region) do
      for i, v in ipairs(b.args) do arg_of[v] = { rec, i, r } end
    end
  end
end

-- The slice (value id -> true), with the stores' data in it or not; -> the
-- slice, and whether an op that reads memory has a result in it.
local function slice(body, stores_data)
  local made, arg_of, taken = {}, {}, {}
  local needed, work, need = S.worklist()
  local reads = false
  walk(body, nil, function(rec)
    S.note_defs(rec, made, arg_of)
    local name = rec.name
    if name == "scf.yield" then return end -- (its operands: through the op it ends)
    if name == "scf.condition" then return need(rec.ins[1]) end
    if pure(name) then return end
    if name == "scf.for" then
      for i = 1, 3 do need(rec.ins[i]) end
      return
    end
    if name == "scf.if" then return need(rec.ins[1]) end
    if name == "scf.while" then return end -- (what it carries: carried below)
    local data = DATA[name] and DATA[name](rec) or {}
    if stores_data and STORES[name] then data = {} end
    for i, v in ipairs(rec.ins) do
      if not data[i] then need(v) end
    end
  end)
  local function take(rec) -- every operand of rec (and what its regions yield)
    if taken[rec] then return end
    taken[rec] = true
    if not pure(rec.name) and not rec.regions and not reads_no_data(rec.name) then reads = true end
    for _, v in ipairs(rec.ins) do need(v) end
    for _, ys in ipairs(yields(rec)) do
      for _, v in ipairs(ys) do need(v) end
    end
  end
  -- value i of a loop or an if (its result i, or its body's argument i; of
  -- an scf.while: region r's argument i)
  local function carried(rec, i, is_arg, r)
    if rec.name == "scf.while" then
      local before, after = rec.regions[1][1], rec.regions[2][1]
      local cond, yield = before.ops[#before.ops], after.ops[#after.ops]
      if is_arg and r == 1 then -- carried in, and yielded back by the after region
        need(rec.ins[i])
        if yield and yield.name == "scf.yield" then need(yield.ins[i]) else take(rec) end
      elseif cond and cond.name == "scf.condition" then -- a result or the after region's argument: forwarded
        need(cond.ins[i + 1])
      else
        take(rec)
      end
      return
    end
    if not S.carried(rec, i, is_arg, FOR, need) then take(rec) end
  end
  while #work > 0 do
    local v = table.remove(work)
    local m, a = made[v], arg_of[v]
    if m and (m[1].name == "scf.for" or m[1].name == "scf.if" or m[1].name == "scf.while") then carried(m[1], m[2], false)
    elseif m then take(m[1])
    elseif a then carried(a[1], a[2], true, a[3]) end
  end
  return needed, reads
end

-- mark(body): rec.data_only = true on the pure ops outside the slice; -> how many.
function S.mark(body)
  local needed, reads = slice(body, false)
  if reads then needed = slice(body, true) end
  local n = 0
  walk(body, nil, function(rec)
    if not pure(rec.name) or #rec.outs == 0 then return end
    for _, v in ipairs(rec.outs) do
      if needed[v] then return end
    end
    rec.data_only, n = true, n + 1
  end)
  return n
end

return S
