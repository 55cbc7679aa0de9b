-- tilua.emulate.clock: vector clocks (actor -> its last event ordered before
-- this point), the happens-before of the shared-memory race check and of the
-- barriers (docs/protocol.md).

local C = {}

function C.copy(v)
  local c = {}
  for k, x in pairs(v) do c[k] = x end
  return c
end

function C.join(into, v)
  for k, x in pairs(v) do
    if (into[k] or 0) < x then into[k] = x end
  end
end

-- v happens before (or is) w
function C.leq(v, w)
  for k, x in pairs(v) do
    if (w[k] or 0) < x then return false end
  end
  return true
end

return C
