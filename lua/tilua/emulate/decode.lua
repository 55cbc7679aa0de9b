-- tilua.emulate.decode: a kernel's IR decoded once into Lua records, so that
-- running it makes no C calls for what the ops are.
--
--   rec = { name, op, id (pre-order), loc ("file:line"), ins = {value ids},
--           outs = {value ids}, regions = { {block, ...}, ... } } + what the
--           models' decoders add (a shared allocation's offset, a load's codec ...)
--   block = { args = {value ids}, ops = {rec, ...} }
--   kernel (decode.kernel) = { body = block, threads, warps, smem, allocs,
--           params = { {kind, type}, ... }, name, loc, cluster, and the facts
--           the search needs: bar_arrives, cluster_local, cluster_pipes, probes }
--
-- The models (emulate/models/) register per op name: decoders, fn(rec, op, d)
-- run on an op's record once its regions are decoded (d: the decoding's state:
-- smem, allocs); kernel decoders, fn(dk, kop, d) on the decoded
-- kernel; probes and cross_cta, true or fn(op): the op tests an mbarrier's
-- phase without waiting / synchronizes CTAs through global memory.

local D = {}

function D.loc_of(op)
  local file, line = op:loc()
  if not file then return "?" end
  return file .. ":" .. tostring(line)
end
local loc_of = D.loc_of

-- The tile.kernel op of a kernel object, a module or the op itself.
function D.kernel_op(k)
  if type(k) == "table" and k.op then return k.op end
  if type(k) == "userdata" and k.name then
    if k:name() == "tile.kernel" then return k end
    local found
    k:walk(function(o) if not found and o:name() == "tile.kernel" then found = o end end)
    if found then return found end
  end
  error("emulate: expected a kernel (tl.kernel), a tile.kernel op or a module holding one", 3)
end

local decode_block

local function decode_op(op, d)
  d.nid = d.nid + 1
  local rec = { name = op:name(), op = op, id = d.nid, loc = loc_of(op), ins = {}, outs = {} }
  for i, v in ipairs(op:operands()) do rec.ins[i] = v:id() end
  for i, v in ipairs(op:results()) do rec.outs[i] = v:id() end
  local nreg = op:nregions()
  if nreg > 0 then
    rec.regions = {}
    for r = 1, nreg do
      local blocks = {}
      for _, b in ipairs(op:region(r):blocks()) do blocks[#blocks + 1] = decode_block(b, d) end
      rec.regions[r] = blocks
    end
  end
  local fns = d.models.decoders[rec.name]
  if fns then
    for _, f in ipairs(fns) do f(rec, op, d) end
  end
  return rec
end

-- an init followed (through creates and constants only) by another init: the
-- CTA synchronizes once, after the last of the run (the lowering's init_follows)
local INIT = { ["cutlass.pipeline.init"] = true, ["cutlass.seq_bar.init"] = true }
local PASS = { ["cutlass.pipeline.create"] = true, ["cutlass.seq_bar.create"] = true, ["arith.constant"] = true }

function decode_block(b, d)
  local blk = { args = {}, ops = {} }
  for i, a in ipairs(b:args()) do blk.args[i] = a:id() end
  for i, o in ipairs(b:ops()) do blk.ops[i] = decode_op(o, d) end
  for i, r in ipairs(blk.ops) do
    if INIT[r.name] then
      for j = i + 1, #blk.ops do
        if INIT[blk.ops[j].name] then
          r.init_follows = true
          break
        end
        if not PASS[blk.ops[j].name] then break end
      end
    end
  end
  return blk
end

-- Does op match a registration (true, or fn(op) -> whether this one does)?
local function matches(reg, op)
  local m = reg[op:name()]
  return m and (m == true or m(op))
end

-- The decoded kernel of kop with the models' registrations (emulate/models/init.lua).
function D.kernel(kop, models)
  local d = { smem = 0, allocs = {}, nid = 0, models = models }
  local bar_arrives = false -- a named-barrier arrive that does not wait (Run:rendezvous)
  local cluster_local = true -- no synchronization object in global memory (the search's cluster reduction)
  local cluster_pipes = false -- a pipeline of mode cluster or pingpong_cluster: the inits end with a cluster sync
  local probes = false -- an op that tests an mbarrier's phase without waiting (the search's step_of)
  local tile_program = false -- (its model marks its own slice: models/tileas_slice.lua)
  kop:walk(function(o)
    local n = o:name()
    if n:sub(1, 7) == "tileas." then tile_program = true end
    if matches(models.probes, o) then probes = true end
    if matches(models.cross_cta, o) then cluster_local = false end
    if n == "cutlass.pipeline.init" and (o:attr "mode" == "cluster" or o:attr "mode" == "pingpong_cluster") then
      cluster_pipes = true
    elseif n == "tile.named_barrier_arrive" or n == "cutlass.named_barrier.arrive" or n == "nvvm.barrier.arrive" then
      bar_arrives = true
    elseif n:match "^cutlass%.generic_barrier%." or n == "cutlass.tile_scheduler.fixup" then
      cluster_local = false
    end
  end)
  local ks = kop:kernel_spec() or {}
  local body = decode_block(kop:region(1):entry(), d)
  local block = ks.block or { 32, 1, 1 }
  if block[2] ~= 1 or block[3] ~= 1 then error("emulate: only 1-D blocks are modelled", 0) end
  -- parameters: { kind (the type's), type (printed), arg = the argument kind
  -- that takes it (models/init.lua's arg_kinds, the first that matches), info =
  -- what its match returned }
  local params = {}
  for i, a in ipairs(kop:region(1):entry():args()) do
    local p = { kind = a:type():info().kind, type = tostring(a:type()) }
    for _, kind in ipairs(models.arg_kinds) do
      local info = kind.match(p, a:type())
      if info then
        p.arg, p.info = kind, info
        break
      end
    end
    params[i] = p
  end
  local dk = { body = body, threads = block[1], warps = (block[1] + 31) // 32, smem = d.smem,
               allocs = d.allocs, params = params, name = kop:attr_or_default "sym_name", loc = loc_of(kop),
               cluster = ks.has_cluster and ks.cluster and ks.cluster[1] or 1, bar_arrives = bar_arrives,
               cluster_local = cluster_local, cluster_pipes = cluster_pipes, probes = probes, models = models }
  -- what a protocol-only run need not compute (emulate/data_slice.lua)
  if not tile_program then dk.data_only = require("tilua.emulate.data_slice").mark(body) end
  for _, f in ipairs(models.kernel_decoders) do f(dk, kop, d) end
  return dk
end

return D
