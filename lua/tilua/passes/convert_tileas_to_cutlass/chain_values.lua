-- tilua.passes.convert_tileas_to_cutlass.chain_values: what chain.lua's rotated
-- loop of chained dots carries and issues: a loop-carried value as a list of IR
-- values and back (kind_of, pack, unpack), a dot's register A operand, its
-- staging ring and the wgmma group of one dot (issue).

local tl = require "tilua"
local R = require "tilua.passes.convert_tileas_to_cutlass.read"
local V = require "tilua.passes.convert_tileas_to_cutlass.values"

local CV = {}

-- {=== values carried by the rotated loop

-- A lowered value of slot type t as a list of IR values (a row Line: its two
-- rows; a Frag of f32: one vector; a scalar: itself), and back.
function CV.kind_of(t)
  local i = t:info()
  if i.kind ~= "tile" then return "scalar" end
  local l = t:layout()
  if l and l.kind == "slice" and l.parent and l.parent.kind == "mma" and #i.shape == 1 then
    if l.dim ~= 1 then return nil end
    return "rows"
  end
  if l and (l.kind == "mma" or l.kind == "mma_operand") and #i.shape == 2 and i.elem == tl.f32 then return "frag" end
  return nil
end
local frag_size = R.frag_size
function CV.pack(x, kind, t)
  if kind == "scalar" then return { x } end
  if kind == "rows" then return { x:at(0), x:at(8) } end
  if x.vec then return { x.vec } end
  local vals = {}
  for i = 0, frag_size(t) - 1 do vals[i + 1] = x:at(i) end
  return { tl.vector_of(tl.f32, vals) }
end
function CV.unpack(vals, kind, t)
  if kind == "scalar" then return vals[1] end
  local info = t:info()
  if kind == "rows" then return V.line(info.elem, 1, function(dr) return vals[dr == 0 and 1 or 2] end) end
  return V.vec_frag(vals[1], frag_size(t))
end

-- }===

-- {=== the dots

-- The packed registers of a register A operand (a Frag of 16-bit elements
-- truncated from f32: pairs of the wide values, cvt.rn.{bf16,f16}x2.f32), as
-- kernels/attention.lua's P: a vector<4 x i32> a k step of 16.
function CV.register_a(L, dot)
  local x = V.get(L, dot:operand(1), dot)
  local ti = R.tile_of(dot:operand(1))
  local wide = V.is_frag(x) and x.trunc_of
  if not wide or (ti.elem ~= tl.bf16 and ti.elem ~= tl.f16) or ti.shape[1] ~= 64 then
    R.fail(dot, "a dot's A operand in registers must be a 64-row tile of bf16 or f16 truncated from f32 (P of attention)")
  end
  local regs = {}
  for i = 0, ti.shape[1] * ti.shape[2] // 128 - 1, 2 do
    regs[#regs + 1] = tl.pack(wide:at(i), wide:at(i + 1), ti.elem):bitcast(tl.i32)
  end
  return tl.vector_of(tl.i32, regs)
end

local wtype = { bf16 = "bf16", f16 = "f16" }

-- The staging tiles as a ring whose stage is 2 x the warpgroup + which (0, 1).
function CV.staging_ring(L, elem)
  L.reduce_staging = L.reduce_staging or L.k:shared(elem, { 2 * #L.consumers, 64, 64 }, { align = 1024, swizzle = 128 })
  local ring = { smem = L.reduce_staging, box = { 64, 64 }, shape = { 64, 64 }, swizzle = 128, elem = elem }
  return setmetatable({ ring = ring, offsets = { 0, 0 } }, V.Ring), ring
end

-- The A operand of reduced dot op, a 64 x 64 tile of bf16 or f16 registers
-- truncated from f32, written into staging tile `stage` (a 128-byte swizzle,
-- a TMA box's: stmatrix as kernels/gemm.lua's store_fragment); -> the staging
-- tiles as a ring (staging_ring) for the descriptors.
function CV.stage_operand(L, env, op, stage)
  local x = V.get(L, op:operand(1), op)
  local ti = R.tile_of(op:operand(1))
  local wide = V.is_frag(x) and x.trunc_of
  if not wide or not wtype[tostring(ti.elem)] or ti.shape[1] ~= 64 or ti.shape[2] ~= 64 then
    R.fail(op, "a dot reduce-added into a tensor takes its register A operand as a 64 x 64 tile of bf16 or f16 truncated from f32")
  end
  local a_ring, ring = CV.staging_ring(L, ti.elem)
  local t, wg = env.thread, env.wg
  local q, rr = t % 32 // 8, t % 8
  local row = (t // 32) * 16 + (q % 2) * 8 + rr -- the stmatrix row address this lane gives
  -- (no barrier first: the tile's last readers, two iterations back, were
  -- waited for before the last iteration's barriers; a warp's wgmma reads the
  -- rows the others write, so one tile would need one)
  for j = 0, 64 // 8 - 1, 2 do -- matrices (j, rows 0-7), (j, rows 8-15), (j+1, 0-7), (j+1, 8-15) of the warp's rows
    local regs = {}
    for r = 0, 3 do regs[r + 1] = tl.pack(wide:at(4 * j + 2 * r), wide:at(4 * j + 2 * r + 1), ti.elem) end
    tl.stmatrix(L.reduce_staging:ptr(stage, row, (q // 2) * 8 + j * 8), regs)
  end
  tl.fence_proxy_async("shared") -- (the writes seen by wgmma's async proxy)
  tl.named_barrier_sync(1 + wg, 128)
  return a_ring, ring
end

-- Issue the wgmmas of dot op: A from the ring's descriptors or from the
-- registers pa (kernels/attention.lua's p_operands: a vector<4 x i32> a k step,
-- built before the fence), B from the ring's, into the accumulator vector acc;
-- fresh: the first k step overwrites it (scale-d off). stage: ring -> stage.
-- linear: descriptors as a base plus offsets (values.lua's V.desc; not in a
-- loop that stages operands for reduced dots, whose registers are short: the
-- fused backward's bases would spill).
function CV.issue(L, op, acc, stage, pa, fresh, a_ring, linear)
  local desc = V.desc
  local at = op:attrs()
  local ai, bi = R.tile_of(op:operand(1)), R.tile_of(op:operand(2))
  local et = wtype[tostring(bi.elem)]
  if not et then R.fail(op, "dots of %s are not lowered yet (bf16 and f16)", tostring(bi.elem)) end
  local K = ai.shape[at.transpose_a and 1 or 2]
  local ra = a_ring or (not pa and V.get(L, op:operand(1), op))
  local rb = V.get(L, op:operand(2), op)
  if (not pa and not V.is_ring(ra)) or not V.is_ring(rb) then R.fail(op, "dot operands must be rings or registers") end
  for kk = 0, K // 16 - 1 do
    local o = { type_a = et, type_b = et, trans_a = at.transpose_a or nil, trans_b = not at.transpose_b or nil,
                scale_a = at.negate_a and -1 or nil, scale_b = at.negate_b and -1 or nil }
    if fresh and kk == 0 then o.scale_d = false end
    local a = pa and pa[kk] or desc(ra, stage[ra.ring or ra], kk, 16, not at.transpose_a, linear)
    acc = tl.wgmma(acc, a, desc(rb, stage[rb.ring or rb], kk, 16, at.transpose_b, linear), o)
  end
  return acc
end

-- }===

return CV
