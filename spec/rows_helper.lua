-- What the row programs' specs share (spec/tile_rows_claims_spec.lua,
-- spec/tile_transpose_spec.lua): the checks of a kernel whose work is claimed
-- at run time.
local assert = require "luassert" -- (dofile runs this in the global environment, not the spec's)
local M = {}

-- A kernel with claims: its counter's workspace,
-- the atomic, ptxas; each {case, size, CTAs} on the emulator (the counter
-- back to 0 after each launch); the protocol checker exploring the claims
function M.claims_kernel(k)
  k:compile()
  assert.equal(4, k:lowered_op():attr_or_default("tileas.launch").workspace_bytes)
  assert.truthy(k.ptx:find("atom.gpu.global.add.u32", 1, true))
  dofile("spec/helper.lua").assert_ptxas(k.ptx)
end
function M.claims_runs(fresh, cases, seed, what)
  for _, t in ipairs(cases) do
    local good, summary = fresh.run_case(t[1], { seed = seed, emulate = true, size = t[2], ctas = t[3] })
    assert(good, ("%s, %d CTAs: %s"):format(what, t[3], summary))
  end
end
function M.claims_protocol(fresh, name, size)
  local good, report = fresh.run_case(name, { seed = 5, emulate = true, size = size, ctas = 2, check = true,
                                              claims = "dynamic", max_states = 4000 })
  assert(good, report)
end

return M
