-- tilua.emulate.models: the registry of the emulator's op models, the one
-- extension point of the machine. A model is a module returning a table of
--
--   handlers         op name -> fn(R, W, rec, ins, ctx) -> results (what the op
--                    does; emulate/machine.lua says what a handler reaches); one
--                    model per op name
--   decoders         op name -> fn(rec, op, d): annotates the op's record once, at
--                    decoding (emulate/decode.lua); several models may decode one op
--   kernel_decoders  { fn(dk, kop, d) } on the decoded kernel (and its hooks)
--   probes, cross_cta  op name -> true | fn(op): the op tests an mbarrier's phase
--                    without waiting / synchronizes CTAs through global memory
--   arg_kinds        { {name, order, match = fn(param, type) -> info, setup =
--                    fn(R, i, param, value) -> the argument} }: the parameters it
--                    takes, set up kind by kind in `order` (their buffers' addresses)
--   around           op name -> fn(plain handler) -> handler: a meaning layered
--                    over another model's handler (models/global.lua's strong
--                    accesses), applied once, here, after the models before it
--
-- A model uses another's handlers and helpers by requiring it.

local list = {
  "tile", -- the authoring level: ids, memory, mbarriers, bulk copies, barriers, casts and fragments
  "cutlass", -- executors, pipelines, seq_bars, block_striped, generic barriers
  "nvvm", -- the nvvm ops after lowering
  "sched", -- tile schedulers and MODS probes
  "mma", -- TMA tensor copies, wgmma, stmatrix
  "nvvm_mma", -- their nvvm forms, the nvvm cluster ops
  "global", -- fences, strong accesses and spin loops on global words
  "tileas", -- tile programs
}

local reg = { handlers = {}, decoders = {}, kernel_decoders = {}, probes = {}, cross_cta = {}, arg_kinds = {} }

-- The plain kind: a pointer takes a byte string (or a table of bytes, or
-- { bytes = n } zeros) copied into a fresh global buffer, or an address;
-- every other parameter its value. Last, in parameter order.
local plain = { name = "plain", order = 3, match = function() return true end }
function plain.setup(R, i, p, a)
  if a == nil then error(("emulate: argument %d (%s) is missing"):format(i, p.type), 0) end
  if p.kind ~= "ptr" or (type(a) ~= "string" and type(a) ~= "table") then return a end
  local bytes = a
  if type(a) == "table" and a.bytes then bytes = a.bytes end -- zeros: nothing stored
  local base, n = R:alloc_global(bytes)
  R.buffers[i] = { base = base, n = n }
  return base
end

for _, name in ipairs(list) do
  local m = require("tilua.emulate.models." .. name)
  for op, h in pairs(m.handlers or {}) do
    if reg.handlers[op] then error(("emulate: models %s and another both handle %s"):format(name, op)) end
    reg.handlers[op] = h
  end
  for op, f in pairs(m.decoders or {}) do
    local fns = reg.decoders[op] or {}
    fns[#fns + 1] = f
    reg.decoders[op] = fns
  end
  for _, f in ipairs(m.kernel_decoders or {}) do reg.kernel_decoders[#reg.kernel_decoders + 1] = f end
  for op, p in pairs(m.probes or {}) do reg.probes[op] = p end
  for op, c in pairs(m.cross_cta or {}) do reg.cross_cta[op] = c end
  for _, k in ipairs(m.arg_kinds or {}) do reg.arg_kinds[#reg.arg_kinds + 1] = k end
  for op, wrap in pairs(m.around or {}) do
    reg.handlers[op] = wrap(assert(reg.handlers[op], op))
  end
end
reg.arg_kinds[#reg.arg_kinds + 1] = plain
table.sort(reg.arg_kinds, function(a, b) return a.order < b.order end)

return reg
