-- tilua.emulate.models.mma: the emulator's handlers for TMA tensor copies and wgmma at
-- the authoring level (tile.tma_load / tma_store, tile.wgmma_desc / wgmma /
-- wgmma_fence / commit / wait, tile.stmatrix, tile.pack, tile.splat),
-- a model of emulate/models/init.lua (docs/protocol.md, "TMA tensor copies and
-- wgmma").
--
-- Tensor maps. A kernel parameter of type !tile.tensor_map<elem, swz, box...>
-- takes a table { data = bytes (or bytes = n), shape = {outermost .. innermost}
-- [, strides = {elements, outermost first, one per dimension}] }: its data is
-- copied into a fresh global buffer (r.read(i) reads it back); the element
-- size, box and swizzle come from the parameter's type, as a launch checks
-- that the host's map matches it.
--
-- Swizzle (CuTe's Swizzle<log2(S/16), 4, 3>, the same for TMA, wgmma and a
-- swizzled memref's ptr): byte offset o -> o ^ (((o >> 7) & (S/16 - 1)) << 4),
-- applied to the shared address's offset (the buffers are aligned to the
-- pattern's period, so the offset's permutation is the address's).

local lanes = require "tilua.emulate.lanes"
local address = require "tilua.emulate.address"
local values = require "tilua.emulate.values"
local clock = require "tilua.emulate.clock"
local report = require "tilua.emulate.report"

local at, eval_lanes, LV = lanes.at, lanes.eval, lanes.LV
local violation = report.violation
local vc_copy = clock.copy
local f32 = values.f32
local swz = address.swizzle
local SHARED_BASE = address.SHARED_BASE
local DEC, ENC = values.float16.dec, values.float16.enc

-- A !tile.tensor_map<elem, swizzle, box...> parameter type's { elem, ebytes,
-- swizzle (bytes, 0 for linear), box (outermost first) } (tl.tensor_map_info's
-- reading of the type), or nil.
local function map_type(t)
  local m = require("tilua").tensor_map_info(t)
  if not m then return nil end
  return { elem = tostring(m.elem), ebytes = m.elem:info().bytes, swizzle = m.swizzle, box = m.box }
end

local handlers = {}
local MMA = { handlers = handlers, arg_kinds = {} }

do
  -- {=== tensor maps: kernel arguments

  -- a !tile.tensor_map parameter takes { data | bytes, shape [, strides] } (allocated
  -- before the plain pointers: order 2)
  MMA.arg_kinds[1] = { name = "tensor map", order = 2, match = function(_, t) return map_type(t) end,
                       setup = function(R, i, p, a)
    local mt = p.info
    if type(a) ~= "table" or not a.shape then
      error(("emulate: argument %d (%s) must be a tensor map table { data = bytes, shape = {...} }"):format(i, p.type), 0)
    end
    if #a.shape ~= #mt.box then
      error(("emulate: argument %d: a tensor map of rank %d for %s"):format(i, #a.shape, p.type), 0)
    end
    local bytes = a.data or a.bytes or 0 -- a number: zeros, nothing stored
    local base, n = R:alloc_global(bytes)
    R.buffers[i] = { base = base, n = n }
    local rank = #a.shape
    local strides = {} -- bytes, outermost first
    if a.strides then
      for d = 1, rank do strides[d] = a.strides[d] * mt.ebytes end
    else
      local s = mt.ebytes
      for d = rank, 1, -1 do
        strides[d] = s
        s = s * a.shape[d]
      end
    end
    return { kind = "tmap", base = base, shape = a.shape, strides = strides, box = mt.box,
             ebytes = mt.ebytes, swizzle = mt.swizzle, elem = mt.elem, arg = i }
  end }

  local function tmap_of(rec, x)
    return report.argument(rec, x, "tmap", "the tensor map operand is not a tensor map argument")
  end

  -- Every element of the box's dims 1 .. n (outermost first, the last
  -- fastest): f(its index among them, whether it lies in the tensor, its
  -- byte offset sum (start[d] + i[d]) * strides[d]).
  local function outer_elements(shape, strides, box, start, n, f)
    local idx, count = {}, 1
    for d = 1, n do idx[d], count = 0, count * box[d] end
    for e = 0, count - 1 do
      local inb, off = true, 0
      for d = 1, n do
        local c = start[d] + idx[d]
        if c < 0 or c >= shape[d] then inb = false end
        off = off + c * strides[d]
      end
      f(e, inb, off)
      for d = n, 1, -1 do
        idx[d] = idx[d] + 1
        if idx[d] < box[d] then break end
        idx[d] = 0
      end
    end
  end
  -- the first and last in-bounds element of the box's rows (0-based)
  local function row_bounds(shape, box, start)
    local rank = #box
    return math.max(0, -start[rank]), math.min(box[rank], shape[rank] - start[rank]) - 1
  end

  -- Every row (innermost dimension) of a box of `box` elements starting at
  -- element coordinates `start` (outermost first) of a tensor of `shape`
  -- elements at `base` with byte `strides`: f(index of the row's first
  -- element in the box, global address of its first in-bounds element or nil,
  -- first and last in-bounds element of the row (0-based)). TMA boxes here,
  -- the tiles of tileas.tiled_load / tiled_store in emulate/models/tileas.lua.
  local function rows_of_box(base, shape, strides, box, start, f)
    local rank = #box
    local inner = box[rank]
    local lo, hi = row_bounds(shape, box, start)
    local first = base + (start[rank] + lo) * strides[rank]
    outer_elements(shape, strides, box, start, rank - 1, function(e, inb, off)
      f(e * inner, inb and hi >= lo and first + off or nil, lo, hi)
    end)
  end
  MMA.rows_of_box = rows_of_box

  -- The in-bounds rows of the same box in runs along its second innermost
  -- dimension, in rows_of_box's order: f(global address of the first
  -- in-bounds element of the run's first row, first and last in-bounds
  -- element of a row, rows, bytes from a row to the next). The rows of a 2-D
  -- tile are one run: a protocol-only run's race check of the box, one call.
  function MMA.row_runs_of_box(base, shape, strides, box, start, f)
    local rank = #box
    local lo, hi = row_bounds(shape, box, start)
    if hi < lo then return end
    local first = base + (start[rank] + lo) * strides[rank]
    if rank == 1 then return f(first, lo, hi, 1, 0) end
    local r = rank - 1 -- the dimension of a run
    local r0, r1 = math.max(start[r], 0), math.min(start[r] + box[r], shape[r]) - 1
    if r1 < r0 then return end
    outer_elements(shape, strides, box, start, r - 1, function(_, inb, off)
      if inb then f(first + r0 * strides[r] + off, lo, hi, r1 - r0 + 1, strides[r]) end
    end)
  end

  -- the box at coords of tensor map m: f(smem offset of the row, ...) as above
  local function box_rows(m, coords, f)
    local eb = m.ebytes
    rows_of_box(m.base, m.shape, m.strides, m.box, coords, function(e, ga, lo, hi) f(e * eb, ga, lo, hi) end)
  end
  local function box_bytes(m)
    local n = m.ebytes
    for _, b in ipairs(m.box) do n = n * b end
    return n
  end

  -- }===

  -- {=== TMA loads: a copy actor completing its bytes on the mbarrier

  -- What the hardware refuses of a TMA copy (an H200 traps, "an illegal
  -- instruction", where ptxas and the driver's encoding accept it): its box's
  -- first column not 16 bytes into its rows (the innermost coordinate times
  -- the element's bytes a multiple of 16, as Triton's interpreter checks),
  -- its shared address not 16-byte aligned, or 128 with a swizzle.
  local function check_box(rec, m, coords, saddr)
    local inner = coords[#coords] * m.ebytes
    if inner % 16 ~= 0 then
      violation("tma", ("%s at %s: the box starts at column %d of its rows, %d bytes in: not a multiple of 16 (TMA faults)")
        :format(rec.name, rec.loc, coords[#coords], inner))
    end
    local a = m.swizzle > 0 and 128 or 16
    if (saddr - SHARED_BASE) % a ~= 0 then
      violation("tma", ("%s at %s: the shared address %d is not %d-byte aligned (TMA faults)")
        :format(rec.name, rec.loc, saddr - SHARED_BASE, a))
    end
  end

  -- multicast (a mask operand after the coordinates): the box goes to the same
  -- shared offset of every CTA of the mask (ranks in the cluster) and completes
  -- its bytes on the barrier at the same offset there: a copy actor per CTA
  local write_box_g2s -- below
  handlers["tile.tma_load"] = function(R, W, rec, ins, ctx)
    for _, l in ipairs(ctx.mask) do
      local m = tmap_of(rec, at(ins[2], l))
      local coords = {}
      for d = 1, #m.box do coords[d] = at(ins[3 + d], l) end
      local dst = at(ins[1], l)
      check_box(rec, m, coords, dst)
      if rec.multicast == nil then rec.multicast = rec.op:attr_or_default "multicast" end
      local mask = rec.multicast and at(ins[4 + #m.box], l) & 0xffff -- an i16
      local ctas = { W.cta }
      if mask then
        ctas = {}
        local size, first = R.k.cluster or 1, W.cta.id - W.cta.rank
        for r = 0, size - 1 do
          if (mask >> r) & 1 == 1 then ctas[#ctas + 1] = R.ctas[first + r + 1] end
        end
        if mask >> size ~= 0 or #ctas == 0 then
          violation("model", ("%s at %s: multicast mask 0x%x for a cluster of %d"):format(rec.name, rec.loc, mask, size))
        end
      end
      for _, cta in ipairs(ctas) do
        local c = R:issue_g2s(W, rec, dst, 0, box_bytes(m), at(ins[3], l), cta)
        c.tma, c.write = { map = m, coords = coords }, write_box_g2s
        c.label = ("tma load %d (from %s%s)"):format(R.copy_seq, W.label,
          mask and (", to CTA %d"):format(cta.id) or "")
      end
    end
    return {}
  end

  -- TMA copies move their box row by row (the copy's write, sync.lua):
  -- move(g, s, m, shared offset of the row, global address, lo, hi), g and s the
  -- global and shared bytes
  local function box_mover(side, move)
    return function(R, W, c)
      local m = c.tma.map
      local off0 = c[side] - SHARED_BASE
      local shared = (c.cta or W.cta).shared -- a load's target CTA (multicast), a store's own
      box_rows(m, c.tma.coords, function(o, ga, lo, hi) move(R.global, shared, m, off0 + o, ga, lo, hi) end)
    end
  end

  -- a TMA load writes its box swizzled, zeros where it lies outside the tensor
  write_box_g2s = box_mover("dst", function(g, s, m, base, ga, lo, hi)
    local eb, sw = m.ebytes, m.swizzle
    local rowb = m.box[#m.box] * eb
    local jlo, jhi = lo * eb, (hi + 1) * eb - 1
    if not ga then jlo, jhi = rowb, rowb - 1 end
    ga = (ga or 0) - jlo
    for c0 = 0, rowb - 1, 16 do -- the swizzle permutes 16-byte chunks
      local sa = SHARED_BASE + swz(base + c0, sw) - c0
      for j = c0, math.min(c0 + 15, rowb - 1) do
        s[sa + j] = (j >= jlo and j <= jhi) and (g[ga + j] or 0) or 0 -- out of bounds: zeros
      end
    end
  end)

  -- }===

  -- {=== TMA stores: join the warp's bulk group, performed at its bulk_wait

  local write_box_s2g, add_box_s2g, box_footprint -- below
  handlers["tile.tma_store"] = function(R, W, rec, ins, ctx)
    local reduce = rec.op:attr "reduce"
    for _, l in ipairs(ctx.mask) do
      local m = tmap_of(rec, at(ins[1], l))
      if reduce and (reduce ~= "add" or m.elem ~= "f32") then
        violation("model", ("%s at %s: a TMA reduce other than an add of f32 is not modelled"):format(rec.name, rec.loc))
      end
      local coords = {}
      for d = 1, #m.box do coords[d] = at(ins[2 + d], l) end
      check_box(rec, m, coords, at(ins[2], l))
      local c = R:issue_s2g(W, rec, 0, at(ins[2], l), box_bytes(m), reduce and "tma reduce" or "tma store")
      c.tma, c.write, c.footprint = { map = m, coords = coords }, reduce and add_box_s2g or write_box_s2g, box_footprint
      c.reduce = reduce and true or nil -- (the race check: reduce-adds do not race each other)
    end
    return {}
  end

  -- a TMA store writes its box, unswizzled, and drops what lies outside the tensor
  write_box_s2g = box_mover("src", function(g, s, m, base, ga, lo, hi)
    if not ga then return end -- out of bounds: dropped
    local eb = m.ebytes
    ga = ga - lo * eb
    for j = lo * eb, (hi + 1) * eb - 1 do g[ga + j] = s[SHARED_BASE + swz(base + j, m.swizzle)] or 0 end
  end)

  -- a TMA reduce-add (f32) adds its box, unswizzled, into the tensor: each
  -- element rounded to f32 once, as the L2's atomic add
  add_box_s2g = box_mover("src", function(g, s, m, base, ga, lo, hi)
    if not ga then return end
    ga = ga - lo * 4
    for j = lo * 4, hi * 4, 4 do
      local x, y = 0, 0
      for b = 3, 0, -1 do
        x = (x << 8) | (s[SHARED_BASE + swz(base + j + b, m.swizzle)] or 0)
        y = (y << 8) | (g[ga + j + b] or 0)
      end
      local sum = string.unpack("<f", string.pack("<I4", x)) + string.unpack("<f", string.pack("<I4", y))
      local u = string.unpack("<I4", string.pack("<f", sum))
      for b = 0, 3 do g[ga + j + b] = (u >> (8 * b)) & 0xff end
    end
  end)

  -- what it writes, for the global race check: the in-bounds part of each row of the box
  box_footprint = function(_, _, c, f)
    local eb = c.tma.map.ebytes
    box_rows(c.tma.map, c.tma.coords, function(_, ga, lo, hi) if ga then f(ga, (hi - lo + 1) * eb) end end)
  end

  -- }===

  -- {=== no-ops and register values

  local function nop() return {} end
  handlers["tile.tensor_map_prefetch"] = nop
  handlers["tile.tma_prefetch"] = nop
  handlers["tile.prefetch"] = nop
  -- tile.setmaxnreg: a CTA's registers are a pool. At launch every warp holds
  -- the kernel's entry count (its .maxnreg, op:kernel_spec().entry_regs) and
  -- the pool is empty; dec gives a warp's registers above the new count to the
  -- pool, inc waits until the pool holds the warp's registers up to it (as
  -- setmaxnreg.inc blocks). Warpgroups that ask for more than the CTA has
  -- wait forever: a deadlock, with its trace. The checker takes a move alone
  -- when it can run ("n"): the order of the moves changes only which warp
  -- waits when the CTA's registers do not cover them all, not whether one does.
  local function setmaxnreg(R, W, rec)
    if not rec.regs then
      local spec = rec.op:kernel_spec()
      rec.regs = { count = rec.op:attr "count", inc = rec.op:attr "action" == "inc", entry = spec and spec.entry_regs or 0 }
    end
    local o, cta = rec.regs, W.cta
    cta.reg_pool = cta.reg_pool or 0
    local delta = 32 * (o.count - (W.regs or o.entry)) -- registers the warp takes (gives back: negative)
    R:request(W, rec, function() return delta <= cta.reg_pool end, function()
      cta.reg_pool = cta.reg_pool - delta
      W.regs = o.count
    end, function()
      return ("%s %d registers a thread (%d in the CTA's pool)"):format(o.inc and "takes" or "gives back to", o.count, cta.reg_pool)
    end, cta.id .. ":regs", "n")
    return {}
  end
  MMA.setmaxnreg = setmaxnreg
  handlers["tile.setmaxnreg"] = setmaxnreg
  handlers["tile.wgmma_fence"] = nop

  handlers["tile.splat"] = function(R, W, rec, ins, ctx)
    if not rec.n then
      local info = rec.op:result(1):type():info()
      local n = 1
      for _, d in ipairs(info.shape) do n = n * d end
      rec.n = n
    end
    local n = rec.n
    return eval_lanes(R, W, rec, ins, ctx, function(v)
      local t = {}
      for i = 1, n do t[i] = v[1] end
      return { t }
    end)
  end

  -- tile.pack f32, f32 -> vector<2 x bf16|f16>: the two halves rounded to nearest
  -- even, held as the 32-bit register (lo | hi << 16) stmatrix stores.
  handlers["tile.pack"] = function(R, W, rec, ins, ctx)
    if not rec.enc then
      local info = rec.op:result(1):type():info()
      local e = info.elem and info.elem:info().name
      rec.enc = ENC[e]
      if not rec.enc then violation("model", ("tile.pack at %s to %s is not modelled"):format(rec.loc, tostring(e))) end
    end
    local enc = rec.enc
    return eval_lanes(R, W, rec, ins, ctx, function(v) return { enc(v[1]) | (enc(v[2]) << 16) } end)
  end

  -- stmatrix: matrix q's row r at the address of lane 8q + r; lane 4r + c holds
  -- its elements 2c, 2c + 1 in register q (trans: lane 4r + c holds column r's
  -- rows 2c, 2c + 1).
  handlers["tile.stmatrix"] = function(R, W, rec, ins, ctx)
    local nm = #ins - 1
    local trans = rec.op:attr "trans"
    if #ctx.mask ~= 32 then violation("model", ("%s at %s with %d active lanes"):format(rec.name, rec.loc, #ctx.mask)) end
    local s = W.cta.shared
    local rows = {} -- the race check of every row in one call, in order
    for i = 0, 8 * nm - 1 do
      local addr = at(ins[1], i)
      if addr < SHARED_BASE then violation("model", "stmatrix to global memory at " .. rec.loc) end
      rows[i + 1] = addr
    end
    R:shadow_write(W.cta, W.actor, W.vc, rows, 16, rec.loc)
    for q = 0, R.values and nm - 1 or -1 do
      for r = 0, 7 do
        local addr = at(ins[1], 8 * q + r)
        for c = 0, 7 do
          local h
          if trans then -- element (row r, col c) of the stored matrix is the fragment's (c, r)
            local reg = at(ins[2 + q], 4 * c + r // 2)
            h = (reg >> (16 * (r % 2))) & 0xffff
          else
            local reg = at(ins[2 + q], 4 * r + c // 2)
            h = (reg >> (16 * (c % 2))) & 0xffff
          end
          s[addr + 2 * c] = h & 0xff
          s[addr + 2 * c + 1] = h >> 8
        end
      end
    end
    return {}
  end

  -- }===

  -- {=== wgmma

  -- tile.wgmma_desc: start >> 4 (bits 0-13), lbo >> 4 (16-29), sbo >> 4 (32-45),
  -- layout (62-63: 1 = 128B, 2 = 64B, 3 = 32B). The start is the offset in
  -- the CTA's shared window (the emulator's shared address - SHARED_BASE).
  local LAYOUT = { [0] = 0, [128] = 1, [64] = 2, [32] = 3 }
  local SWZ_OF = { [0] = 0, [1] = 128, [2] = 64, [3] = 32 }
  handlers["tile.wgmma_desc"] = function(R, W, rec, ins, ctx)
    local op = rec.op
    local lbo, sbo, sw = op:attr_or_default "lbo", op:attr_or_default "sbo", op:attr_or_default "swizzle"
    return eval_lanes(R, W, rec, ins, ctx, function(v)
      local a = v[1] - SHARED_BASE
      return { (((a & 0x3ffff) >> 4) & 0x3fff) | (((lbo >> 4) & 0x3fff) << 16) | (((sbo >> 4) & 0x3fff) << 32)
               | (LAYOUT[sw] << 62) }
    end)
  end
  local function desc_decode(d)
    return { start = (d & 0x3fff) << 4, lbo = ((d >> 16) & 0x3fff) << 4, sbo = ((d >> 32) & 0x3fff) << 4,
             swizzle = SWZ_OF[(d >> 62) & 3] }
  end

  -- The shared offset of element (row, k) of a K-major operand (rows M or N,
  -- 16-bit elements): 8-row core-matrix groups sbo apart, rows of a group 128
  -- (swizzled) or 16 (no swizzle: k chunks of 8 lbo apart) bytes apart.
  local function kmajor_off(dd, row, k, eb)
    if dd.swizzle == 0 then
      return dd.start + (row // 8) * dd.sbo + (k * eb // 16) * dd.lbo + (row % 8) * 16 + (k * eb) % 16
    end
    -- a swizzled row is `swizzle` bytes wide (128B: 128 bytes)
    local o = dd.start + (row // 8) * dd.sbo + (row % 8) * dd.swizzle + k * eb
    return swz(o, dd.swizzle)
  end
  -- MN-major (transposed): element (mn, k) of 16-bit type: k rows of the atom
  -- (8 k per sbo), mn along the row, atoms of swizzle/eb mn elements lbo apart.
  local function mnmajor_off(dd, mn, k, eb)
    if dd.swizzle == 0 then
      return dd.start + (k // 8) * dd.sbo + (mn // 8) * dd.lbo + (k % 8) * 16 + (mn % 8) * eb
    end
    local per = dd.swizzle // eb
    local o = dd.start + (mn // per) * dd.lbo + (k // 8) * dd.sbo + (k % 8) * dd.swizzle + (mn % per) * eb
    return swz(o, dd.swizzle)
  end

  local function read16(s, addr) return (s[addr] or 0) | ((s[addr + 1] or 0) << 8) end

  -- A pending accumulator: reading it before its wgmma_wait is a violation.
  local PENDING = {}
  PENDING.__index = function(t, i)
    local info = rawget(t, "__info")
    if info and type(i) == "number" then
      violation("wgmma", ("%s reads the accumulator of the wgmma at %s before a wgmma_wait completed it")
        :format(info.W.label, info.rec.loc))
    end
    return nil
  end

  -- A's 16 x 16 slice of a warp from its lanes' registers (the layout of
  -- mma.m16n8k16's A, which wgmma's register A repeats per warp): lane l
  -- (group l / 4, pair l % 4) holds elements 2j, 2j + 1 at row gid + 8 (j % 2),
  -- columns 2 pair + 8 (j >= 2) + 0, 1.
  local function a_from_registers(g, dec)
    local A = {}
    for r = 0, 15 do A[r] = {} end
    for l = 0, 31 do
      local regs = at(g.a_reg.v, l)
      local gid, tq = l // 4, l % 4
      for e = 0, 7 do
        local j = e // 2
        local x
        if g.a_reg.kind == "float" then x = regs[e + 1]
        else x = dec((regs[j + 1] >> (16 * (e % 2))) & 0xffff) end
        A[gid + 8 * (j % 2)][2 * tq + 8 * (j // 2) + e % 2] = x * g.scale_a
      end
    end
    return A
  end

  -- Perform one wgmma of warp W (its 16 rows of the warpgroup's 64): read A and B
  -- from shared memory (with the race check, at the warp's clock when it issued),
  -- D = A * B + C per lane in f32 (products exact, a sequential f32 sum over k).
  local function perform(R, W, g)
    local rec, N, K = g.rec, g.N, g.K
    local dec, eb = g.dec, g.eb
    local s = W.cta.shared
    local cta = W.cta
    local da, db = not g.a_reg and desc_decode(g.desc_a), desc_decode(g.desc_b)
    local wr = W.w % 4
    -- the values: tl.emulate computes them; the checker's protocol-only runs
    -- only read the operands (the race check)
    local values = R.values
    local seen = {}
    local function read(o)
      local q = o >> 4
      if not seen[q] then -- one race check per 16-byte granule
        seen[q] = true
        R:shadow_read(cta, g.actor, g.vc, SHARED_BASE + (q << 4), 16, rec.loc)
      end
      return values and dec(eb == 1 and (s[SHARED_BASE + o] or 0) or read16(s, SHARED_BASE + o)) or 0
    end
    local offa = g.trans_a and mnmajor_off or kmajor_off
    local offb = g.trans_b and mnmajor_off or kmajor_off
    if not values then -- the race check only: one element per 16-byte granule along the contiguous dimension
      -- the granules of each operand, in the order read would check them,
      -- kept per descriptor (and warp row) on the op's record: the same
      -- stages recur in every tile
      local step = 16 // eb
      local cache = rec.wg.granules
      local function list(key, f) -- f(add): adds every element's offset
        local qs = cache[key]
        if qs then return qs end
        local s2 = {}
        qs = {}
        f(function(o)
          local q = o >> 4
          if not s2[q] then
            s2[q] = true
            qs[#qs + 1] = q
          end
        end)
        cache[key] = qs
        return qs
      end
      if not g.a_reg then
        R:shadow_read_granules(cta, g.actor, g.vc, list(("a%d/%d"):format(g.desc_a, wr), function(add)
          for r = 0, 15 do
            for k = 0, K - 1, (g.trans_a and 1 or step) do add(offa(da, 16 * wr + r, k, eb)) end
          end
        end), rec.loc)
      end
      R:shadow_read_granules(cta, g.actor, g.vc, list(("b%d"):format(g.desc_b), function(add)
        for n = 0, N - 1, (g.trans_b and step or 1) do
          for k = 0, K - 1, (g.trans_b and 1 or step) do add(offb(db, n, k, eb)) end
        end
      end), rec.loc)
    end
    local A, B = {}, {} -- A: rows 16 wr .. 16 wr + 15 of the warpgroup's 64
    if g.a_reg and values then
      A = a_from_registers(g, dec)
    else
      for r = 0, values and 15 or -1 do
        local row = {}
        for k = 0, K - 1 do row[k] = read(offa(da, 16 * wr + r, k, eb)) * g.scale_a end
        A[r] = row
      end
    end
    for n = 0, values and N - 1 or -1 do
      local col = {}
      for k = 0, K - 1 do col[k] = read(offb(db, n, k, eb)) * g.scale_b end
      B[n] = col
    end
    local src, dst, scale_d = g.src, g.dst, g.scale_d
    if not values then -- one accumulator for the warp (the handler's), of zeros: read its input's first
      if scale_d then
        local c = at(src, 0)
        if type(c) == "table" and rawget(c, 1) == nil then local _ = c[1] end -- a pending input: reported
      end
      for i = 1, N // 2 do rawset(dst, i, 0.0) end
      rawset(dst, "__info", nil)
      setmetatable(dst, nil)
      return
    end
    for l = 0, 31 do
      local c_in = at(src, l)
      local out = dst[l]
      local gid, tq = l // 4, l % 4
      for i = 0, N // 2 - 1 do
        local acc = 0.0
        if scale_d then
          acc = rawget(c_in, i + 1)
          if acc == nil then acc = c_in[i + 1] end -- a pending input: reported
        end
        if values then
          local r = i % 4
          local a, b = A[gid + 8 * (r // 2)], B[8 * (i // 4) + 2 * tq + (r % 2)]
          local dot = 0.0 -- the k16 slice's products (exact) summed in f64, added to C, rounded to f32 once
          for k = 0, K - 1 do dot = dot + a[k] * b[k] end
          acc = f32(acc + dot)
        end
        rawset(out, i + 1, acc)
      end
      rawset(out, "__info", nil)
      setmetatable(out, nil)
    end
  end

  handlers["tile.wgmma"] = function(R, W, rec, ins, ctx)
    if not rec.wg then
      local op = rec.op
      local shape = op:attr "shape"
      local ta = op:attr "type_a"
      local dec, eb = DEC[ta], 2
      if values.fp8_dec[ta] then dec, eb = values.fp8_dec[ta], 1 end
      local ai = op:operand(2):type():info()
      local regs = ai.kind == "vector" -- A from registers: 16-bit elements only
      if not dec or (regs and eb ~= 2) then
        violation("model", ("%s at %s: %s operands%s are not modelled (bf16 / f16, e4m3 / e5m2 from descriptors are)")
          :format(rec.name, rec.loc, ta, regs and " in registers" or ""))
      end
      rec.wg = { N = shape[2], K = shape[3], dec = dec, eb = eb, trans_a = op:attr_or_default "trans_a",
                 -- A in registers: 8 16-bit elements a lane (vector<8 x bf16 | f16>, or packed in 4 x i32)
                 a_reg = ai.kind == "vector" and (ai.elem:info().kind == "float" and "float" or "packed"),
                 trans_b = op:attr_or_default "trans_b", scale_a = op:attr_or_default "scale_a",
                 scale_b = op:attr_or_default "scale_b",
                 granules = {} } -- the operands' granules per descriptor (a protocol-only perform)
    end
    if #ctx.mask ~= 32 then violation("model", ("%s at %s with %d active lanes"):format(rec.name, rec.loc, #ctx.mask)) end
    local wg = rec.wg
    local scale_d = true
    if ins[4] ~= nil then scale_d = at(ins[4], 0) ~= 0 and at(ins[4], 0) ~= false end
    -- (a protocol-only run computes no value: one accumulator, the same on every lane)
    local dst
    if R.values then
      dst = setmetatable({}, LV)
      for l = 0, 31 do dst[l] = setmetatable({ __info = { W = W, rec = rec } }, PENDING) end
    else
      dst = setmetatable({ __info = { W = W, rec = rec } }, PENDING)
    end
    -- the operand reads are the async proxy's: an actor of the warp's own,
    -- ordered after the warp's clock at the issue, its clock (one tick per
    -- wgmma) known to the warp once wgmma_wait completed them (Run:release_of)
    local aa = R:async_actor(W)
    W.async_clock = (W.async_clock or 0) + 1
    local g = { rec = rec, N = wg.N, K = wg.K, dec = wg.dec, eb = wg.eb, trans_a = wg.trans_a, trans_b = wg.trans_b,
                scale_a = wg.scale_a, scale_b = wg.scale_b, desc_a = at(ins[2], 0), desc_b = at(ins[3], 0),
                src = ins[1], dst = dst, scale_d = scale_d, actor = aa, vc = vc_copy(W.vc),
                a_reg = wg.a_reg and { kind = wg.a_reg, v = ins[2] } }
    g.vc[aa] = W.async_clock
    W.wg_open = W.wg_open or {}
    W.wg_open[#W.wg_open + 1] = g
    return { dst }
  end
  handlers["tile.wgmma_commit"] = function(_, W)
    W.wg_groups = W.wg_groups or {}
    W.wg_groups[#W.wg_groups + 1] = W.wg_open or {}
    W.wg_open = {}
    return {}
  end
  -- wgmma_wait {pending = K}: every committed group but the newest K completes
  -- now (reads its operands, writes its accumulators), so the operands are read
  -- as late as the protocol allows.
  local function wgmma_wait(R, W, keep)
    local groups = W.wg_groups or {}
    while #groups > keep do
      local grp = table.remove(groups, 1)
      for _, g in ipairs(grp) do
        perform(R, W, g)
        if (W.vc[g.actor] or 0) < g.vc[g.actor] then W.vc[g.actor] = g.vc[g.actor] end
      end
    end
  end
  MMA.wgmma_wait = wgmma_wait -- (nvvm.wgmma.wait.group's count is `group`)
  handlers["tile.wgmma_wait"] = function(R, W, rec)
    wgmma_wait(R, W, rec.op:attr_or_default "pending")
    return {}
  end

  -- }===
end

return MMA
