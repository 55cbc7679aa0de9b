-- tilua.passes.convert_tileas_to_cutlass.blocked: register tiles of a blocked
-- layout (and its slices) distributed over the threads of a compute agent,
-- and the ops on them: a program without a dot (compute.lua).
--
-- A blocked layout that tileas-assign-layouts distributed (`size`, `lanes`,
-- `warps`, one entry per dim) deals the tile's elements to the threads: along
-- dim d a thread holds `size` contiguous elements, the lanes of a warp and
-- the warps follow one another, and the pattern repeats until the extent is
-- covered (positions past it are masked off). So thread t holds, along d,
-- the positions base_d(t) + o for its offsets o = rep * F + j (F = size *
-- lanes * warps, j < size); a register is one element, named by its offsets
-- (one per dim). An extent of 1 is every thread's position 0 (a broadcast
-- row); a slice (a reduce's result, what expand_dim widens) is the parent's
-- distribution without the removed dim. Elementwise ops work register by
-- register; a reduce combines the thread's registers, then the lanes
-- (shfl.xor), then the warps (shared memory); a tiled load or store moves
-- `vec` elements at a time (tileas-prepare-for-scheduling's width) where the
-- tensor's rows are aligned to it and the vector is in bounds, else element by
-- element.

local tl = require "tilua"
local R = require "tilua.passes.convert_tileas_to_cutlass.read"
local V = require "tilua.passes.convert_tileas_to_cutlass.values"

local B = {}

-- The shared memory a layout change's or a reduce's buffer may take (static:
-- 48 KiB at most); transpose.lua's rule keeps larger tiles off the exchange.
B.MAX_SHARED = 48 * 1024

-- {=== distributions

-- The entry `key` of a layout as a list of rank integers (1 where absent).
local function per_dim(l, key, rank)
  local v, out = l and l[key], {}
  for d = 1, rank do out[d] = v and v[d] or 1 end
  return out
end

local function shape_key(shape) return table.concat(shape, "x") end
local function off_key(o) return table.concat(o, ",") end

-- fn() with the ops it builds placed at the top of the compute agent's code
-- (before L.anchor), so that they dominate every use.
local function at_top(L, fn)
  return tl.at(L.anchor:owner_block(), L.anchor:def(), fn)
end

-- The distribution of a blocked layout l over a tile of `shape`: its rank,
-- shape, registers (off[i]: the offsets of register i, index[key]: its
-- number), base[d] (the thread's first position along d, an i32; nil: 0),
-- limit[d] (the extent where positions past it are masked), lane_mask[d]
-- (the xor masks of the lanes along d), lane_coord[d] / warp_coord[d] (the
-- thread's lane and warp along d), warps[d], and dup[d] (an extent of 1 that
-- several threads hold: only the first stores it).
local function blocked_dist(L, l, shape, op)
  local rank = #shape
  local size, lanes, warps = per_dim(l, "size", rank), per_dim(l, "lanes", rank), per_dim(l, "warps", rank)
  if not l.size or not l.lanes then
    R.fail(op, "a blocked tile without its distribution (size, lanes: tileas-assign-layouts gives them)")
  end
  local nw = 1
  for d = 1, rank do nw = nw * warps[d] end
  if nw ~= L.warps then R.fail(op, "a blocked layout of %d warps in a compute agent of %d", nw, L.warps) end
  local D = { rank = rank, shape = shape, off = {}, index = {}, base = {}, limit = {}, lane_mask = {},
              lane_coord = {}, warp_coord = {}, warps = warps, lanes = lanes, size = size, dup = {},
              lane_stride = {}, warp_stride = {} }
  -- the thread's lane and warp along each dim (the last dim fastest)
  at_top(L, function()
    local ls, ws = 1, 1
    for d = rank, 1, -1 do
      D.lane_stride[d], D.warp_stride[d] = ls, ws
      local function coord(id, stride, n)
        if n == 1 then return nil end
        if stride > 1 then id = id // stride end
        return stride * n == 32 and id or id % n -- (a lane's last coordinate needs no mod)
      end
      D.lane_coord[d] = coord(L.lane, ls, lanes[d])
      D.warp_coord[d] = warps[d] > 1 and (ws > 1 and L.warp // ws or L.warp) % warps[d] or nil
      local masks = {}
      for b = 0, 4 do if (1 << b) < lanes[d] then masks[#masks + 1] = ls << b end end
      D.lane_mask[d] = masks
      ls, ws = ls * lanes[d], ws * warps[d]
    end
  end)
  local offs = {}
  for d = 1, rank do
    local S, s = shape[d], size[d]
    offs[d] = {}
    if S == 1 then
      offs[d][1] = 0
      D.dup[d] = lanes[d] * warps[d] > 1
    else
      if S < s or S % s ~= 0 then
        R.fail(op, "a blocked tile of extent %d along dim %d, which its layout's size (%d) does not divide", S, d - 1, s)
      end
      local F = s * lanes[d] * warps[d]
      local reps = (S + F - 1) // F
      for rep = 0, reps - 1 do
        for j = 0, s - 1 do offs[d][#offs[d] + 1] = rep * F + j end
      end
      if reps * F > S then D.limit[d] = S end
      at_top(L, function()
        local b
        if D.warp_coord[d] then b = D.warp_coord[d] * (s * lanes[d]) end
        if D.lane_coord[d] then b = b and b + D.lane_coord[d] * s or D.lane_coord[d] * s end
        D.base[d] = b
      end)
    end
  end
  -- a register an element: more than a thread has is no tile to unroll
  -- (a lowering of it would take minutes and ptxas spill it all)
  local regs, most = 1, tl.core.limits().max_thread_regs
  for d = 1, rank do regs = regs * #offs[d] end
  if regs > most then
    R.fail(op, "a blocked tile of %s gives each thread %d elements, more than its %d registers", shape_key(shape),
      regs, most)
  end
  -- registers: every combination of offsets, the last dim fastest
  local function walk(d, acc)
    if d > rank then
      local o = { table.unpack(acc) }
      D.off[#D.off + 1] = o
      D.index[off_key(o)] = #D.off
      return
    end
    for _, x in ipairs(offs[d]) do
      acc[d] = x
      walk(d + 1, acc)
    end
    acc[d] = nil
  end
  walk(1, {})
  D.n = #D.off
  return D
end

-- The distribution D without dim k (a slice's: the registers keep their order).
local function drop_dim(D, k)
  local S = { rank = D.rank - 1, shape = {}, off = {}, index = {}, base = {}, limit = {}, lane_mask = {},
              lane_coord = {}, warp_coord = {}, warps = {}, lanes = {}, size = {}, dup = {}, parent = D, dim = k }
  local j = 0
  for d = 1, D.rank do
    if d ~= k then
      j = j + 1
      S.shape[j], S.base[j], S.limit[j], S.lane_mask[j] = D.shape[d], D.base[d], D.limit[d], D.lane_mask[d]
      S.lane_coord[j], S.warp_coord[j], S.warps[j], S.lanes[j], S.size[j], S.dup[j] =
        D.lane_coord[d], D.warp_coord[d], D.warps[d], D.lanes[d], D.size[d], D.dup[d]
    end
  end
  -- threads that differ along the removed dim hold the same slice: all but the first are copies
  S.dup_removed = (D.lanes[k] > 1 or D.warps[k] > 1) and k or nil
  for i, o in ipairs(D.off) do
    local so = {}
    for d = 1, D.rank do if d ~= k then so[#so + 1] = o[d] end end
    S.off[i] = so
    S.index[off_key(so)] = i
  end
  S.n = D.n
  return S
end

-- The distribution of tile type info ti (blocked, or a slice of a blocked layout).
function B.dist(L, ti, op)
  local l = ti.layout
  local key = tostring(ti.layout_str) .. "|" .. shape_key(ti.shape)
  L.dists = L.dists or {}
  if L.dists[key] then return L.dists[key] end
  local D
  if l and l.kind == "blocked" then
    D = blocked_dist(L, l, ti.shape, op)
  elseif l and l.kind == "slice" and l.parent and l.parent.kind == "blocked" then
    local k = l.dim + 1
    local pshape = {}
    for d = 1, #ti.shape do pshape[#pshape + 1] = ti.shape[d] end
    table.insert(pshape, k, 1)
    D = drop_dim(blocked_dist(L, l.parent, pshape, op), k)
  else
    R.fail(op, "a tile of layout '%s' in a compute agent is not lowered yet", tostring(l and l.kind))
  end
  L.dists[key] = D
  return D
end

-- Is the tile info ti distributed over a compute agent's threads?
function B.is_blocked(ti)
  local l = ti and ti.layout
  return l ~= nil and (l.kind == "blocked" or (l.kind == "slice" and l.parent ~= nil and l.parent.kind == "blocked"))
end

-- }===

-- {=== values

local Dist = {}
Dist.__index = Dist
function B.value(elem, D, regs) return setmetatable({ kind = "dist", elem = elem, D = D, r = regs }, Dist) end
function B.is_dist(x) return getmetatable(x) == Dist end

local function info(v)
  local i = R.tile_of(v)
  if i then i.layout_str = tostring(v:type()):match "^tile<[^,]*, [^,]*, (.*)>$" end
  return i
end

-- The position along dim d of register i (an i32; 0 for an extent of 1).
local function pos(D, i, d)
  local o = D.off[i][d]
  local b = D.base[d]
  if not b then return tl.const(o, tl.i32) end
  return o == 0 and b or b + o
end

-- Is register i at a position inside the tile (nil: always)?
local function valid(D, i)
  local ok
  for d = 1, D.rank do
    if D.limit[d] then
      local c = pos(D, i, d):lt(D.limit[d])
      ok = ok and (ok & c) or c
    end
  end
  return ok
end

-- Is this thread the first holder of register i's element (nil: always)?
-- Copies along an extent of 1 (and along a slice's removed dim, unless
-- `within`: a reduce's warps along it each write their part) do not store.
local function owner(D, i, within)
  local ok
  local function first(coord)
    if not coord then return end
    local c = coord:eq(0)
    ok = ok and (ok & c) or c
  end
  for d = 1, D.rank do
    if D.dup[d] then first(D.lane_coord[d]) first(D.warp_coord[d]) end
  end
  if D.dup_removed and not within then
    local P = D.parent
    first(P.lane_coord[D.dup_removed])
    first(P.warp_coord[D.dup_removed])
  end
  local v = valid(D, i)
  if v then ok = ok and (ok & v) or v end
  return ok
end

local function both(a, b)
  if a and b then return a & b end
  return a or b
end

-- }===

-- {=== ops

-- tileas.splat: every register the scalar.
function B.splat(L, op, s)
  local ti = info(op:result(1))
  local D = B.dist(L, ti, op)
  local regs = {}
  for i = 1, D.n do regs[i] = s end
  local y = B.value(ti.elem, D, regs)
  y.splat = s
  return y
end

-- tileas.iota: each register its element's position along the op's dim (a
-- mask of the row's elements against its real length).
function B.iota(L, op)
  local ti = info(op:result(1))
  local D = B.dist(L, ti, op)
  local d = op:attr "dim" + 1
  local regs = {}
  for i = 1, D.n do regs[i] = pos(D, i, d) end
  local y = B.value(tl.i32, D, regs)
  y.iota = d
  return y
end

-- iota < s (a splat or a scalar) as o < s - base: a register's constant
-- offset against one difference, where base + o < s would keep each position
-- live from the row's loads (their addresses) to the mask (spills)
local function iota_below(L, op, D, x, b)
  local s = tl.is_value(b) and b or (B.is_dist(b) and b.splat)
  local pred = op:attr "predicate"
  if not (x.iota and s and (pred == "slt" or pred == 2) and x.D == D) then return nil end
  local base = D.base[x.iota]
  local lim = base and s - base or s
  local regs, most = {}, 0
  for i = 1, D.n do
    regs[i] = tl.const(D.off[i][x.iota], tl.i32):lt(lim)
    most = math.max(most, D.off[i][x.iota])
  end
  local y = B.value(tl.i1, D, regs)
  y.below = { lim = lim, most = most, dim = x.iota } -- (every register inside where most < lim: B.elementwise's select)
  return y
end

-- arith.select(iota < s, a, b) of a blocked tile (c.below: iota_below's) as
-- one branch a thread (the mask branch): where the thread's last position
-- along the mask's dim lies below s (every element inside: a row as long as
-- its tile, or the thread's part of a longer row wholly inside) its
-- registers are a's, with no compare and no select; else each register
-- compared and selected as without. -> the registers, or nil (not such a
-- select). The rule (B.mask_branch nil): on in the body of a shared row ring
-- (L.shared_ring: rowring.lua's shared rings, where LayerNorm's mask of its
-- squares takes it: s16norm-1 on the H200, the hoisted ring of 3 at 0.955-0.958
-- of cuMemcpyDtoD against 0.938-0.945 without), off elsewhere (the register
-- loop carries the next row in registers: there it spilled 20 bytes and ran
-- at 0.894-0.899 against 0.930-0.939). B.mask_branch true / false (the pass's
-- option mask_branch = 1 / 0, else tl.options.mask_branch): on / off everywhere.
local MASK_BRANCH_MIN = 8 -- registers a thread (fewer: the selects cost less than the branch)
B.mask_branch = nil -- (init.lua sets it a run)
local function select_below(L, D, c, a, b)
  local on = B.mask_branch
  if on == nil then on = L.shared_ring end
  if not (on and c.below and D.n >= MASK_BRANCH_MIN) then return nil end
  local function at(o, i) return B.is_dist(o) and o.r[i] or o end
  local lim, dim = c.below.lim, c.below.dim
  return table.pack(tl.if_(tl.const(c.below.most, tl.i32):lt(lim), function()
    local out = {}
    for i = 1, D.n do out[i] = at(a, i) end
    return table.unpack(out)
  end, function()
    local out = {}
    for i = 1, D.n do out[i] = tl.select(tl.const(D.off[i][dim], tl.i32):lt(lim), at(a, i), at(b, i)) end
    return table.unpack(out)
  end))
end

-- bf16 of a word of two (the high half, or the low one) widened to f32: the
-- bits moved into place (a bf16 is an f32's high half).
local function bf16_word_to_f32(w, high)
  if high then return (w & tl.const(-65536, tl.i32)):bitcast(tl.f32) end
  return (w << 16):bitcast(tl.f32)
end

-- An elementwise arith op (or tileas.math through fn): register by register.
function B.elementwise(L, op, opds, fn)
  local ti = info(op:result(1))
  local D = B.dist(L, ti, op)
  local attrs, name = op:attrs(true), op:name()
  local x = opds[1]
  if name == "arith.cmpi" and B.is_dist(x) then
    local y = iota_below(L, op, D, x, opds[2])
    if y then return y end
  end
  if name == "arith.select" and B.is_dist(x) and x.D == D then
    local regs = select_below(L, D, x, opds[2], opds[3])
    if regs then return B.value(ti.elem, D, { table.unpack(regs, 1, D.n) }) end
  end
  if name == "arith.extf" and B.is_dist(x) and x.words and x.elem == tl.bf16 and ti.elem == tl.f32 then
    local regs = {}
    for i = 1, D.n do regs[i] = bf16_word_to_f32(x.words[i][1], x.words[i][2]) end
    return B.value(ti.elem, D, regs)
  end
  local regs = {}
  for i = 1, D.n do
    local xs = {}
    for j, o in ipairs(opds) do
      if B.is_dist(o) then
        if o.D.n ~= D.n then R.fail(op, "operands of an elementwise op in different distributions") end
        xs[j] = o.r[i]
      elseif tl.is_value(o) then xs[j] = o
      else R.fail(op, "an operand of an elementwise op that is not a tile of a blocked layout") end
    end
    regs[i] = fn and fn(table.unpack(xs)) or tl.op1(name, xs, ti.elem, attrs)
  end
  local y = B.value(ti.elem, D, regs)
  if name == "arith.truncf" and B.is_dist(x) and x.elem == tl.f32 and (ti.elem == tl.bf16 or ti.elem == tl.f16) then
    y.trunc_of = x -- a vector store packs the f32 values two at a time
  end
  return y
end

-- tileas.broadcast and tileas.expand_dim: the register of the operand's
-- distribution at the same offsets (a widened dim's offset 0).
function B.shape(L, op, x)
  local ti = info(op:result(1))
  local D = B.dist(L, ti, op)
  local regs = {}
  if op:name() == "tileas.expand_dim" then
    if x.D.n ~= D.n then R.fail(op, "expand_dim of a tile that is not the slice of the result's layout") end
    for i = 1, D.n do regs[i] = x.r[i] end
  else
    local xs = x.D.shape
    for i = 1, D.n do
      local o = {}
      for d = 1, D.rank do o[d] = xs[d] == 1 and 0 or D.off[i][d] end
      local j = x.D.index[off_key(o)]
      if not j then R.fail(op, "broadcast between tiles of different layouts") end
      regs[i] = x.r[j]
    end
  end
  return B.value(ti.elem, D, regs)
end

local COMBINE = {
  add = function(a, b) return a + b end,
  max = function(a, b) return tl.max(a, b) end,
  min = function(a, b) return tl.min(a, b) end,
}
local function identity(kind, elem)
  if elem:kind() == "float" then
    return tl.const(kind == "add" and 0.0 or kind == "max" and -math.huge or math.huge, elem)
  end
  local w = elem:info().width
  return tl.const(kind == "add" and 0 or kind == "max" and -(1 << (w - 1)) or (1 << (w - 1)) - 1, elem)
end

-- Is op inside a loop of the compute agent (a shared buffer it uses may be
-- written again before every thread has read it)?
local function in_loop(L, op)
  local p = op:parent()
  while p and p ~= L.agent_op do
    if (p:name() == "scf.for" or p:name() == "scf.while") and p ~= L.program_loop then return true end
    p = p:parent()
  end
  return false
end

-- tileas.reduce along dim k: the thread's registers along k, then its
-- lanes along k (shfl.xor: every lane ends with the value), then its warps
-- along k through shared memory (the first lane along k of each warp
-- writes, a barrier, every thread combines the warps' values).
-- B.reduce_many: several reduces of tiles of one distribution along one dim
-- (ops[i] of xs[i], none reading another's result) at once: their values
-- side by side in one buffer, one barrier for all of them (a LayerNorm's sum
-- and sum of squares); -> their results in order.
function B.reduce_many(L, ops, xs)
  local op, x = ops[1], xs[1]
  local k = op:attr "dim" + 1
  local X = x.D
  local elem = x.elem
  if elem ~= tl.f32 and elem ~= tl.i32 then R.fail(op, "reduce of %s tiles is not lowered yet (f32, i32)", tostring(elem)) end
  local rinfo = info(op:result(1))
  local S = rinfo and B.dist(L, rinfo, op) or drop_dim(X, k)
  local all, combs = {}, {} -- (every op's values, one after the other: op i's at (i - 1) S.n + j)
  for i, o in ipairs(ops) do
    local kind, xi = o:attr "kind", xs[i]
    local comb = COMBINE[kind]
    local ident = identity(kind, elem)
    -- the thread's registers along k, those past the extent masked
    local vals = {}
    for r = 1, X.n do
      local off = X.off[r]
      local so = {}
      for d = 1, X.rank do if d ~= k then so[#so + 1] = off[d] end end
      local j = S.index[off_key(so)]
      local v = xi.r[r]
      if X.limit[k] then v = tl.select(pos(X, r, k):lt(X.limit[k]), v, ident) end
      vals[j] = vals[j] and comb(vals[j], v) or v
    end
    for j = 1, S.n do all[(i - 1) * S.n + j], combs[(i - 1) * S.n + j] = vals[j], comb end
  end
  local nv = #all
  if X.shape[k] > 1 then
    for j = 1, nv do
      for _, m in ipairs(X.lane_mask[k]) do all[j] = combs[j](all[j], tl.shfl_xor(all[j], m)) end
    end
    local wk = X.warps[k]
    if wk > 1 then
      -- each warp writes its own block of shared memory (whole 16-byte
      -- granules): its lane's values, the lane's coordinate along k zeroed,
      -- written by the lanes whose coordinate along k is 0; a thread reads
      -- the blocks of the warps that differ from its own along k only, at
      -- its own place in them
      local per_warp = (32 * nv + 3) // 4 * 4
      local bytes = L.warps * per_warp * 4
      if bytes > B.MAX_SHARED then
        R.fail(op, "a reduce across %d warps of %d values a lane needs %d bytes of shared memory (48 KiB at most): use a smaller tile", wk, nv, bytes)
      end
      local buf = L.k:shared(elem, L.warps * per_warp)
      local lane0 = L.lane
      if X.lane_coord[k] then lane0 = lane0 - X.lane_coord[k] * X.lane_stride[k] end
      local place = lane0 * nv
      local writer = X.lane_coord[k] and X.lane_coord[k]:eq(0) or nil
      local mine = L.warp * per_warp + place
      local function write()
        for j = 1, nv do (buf + (mine + (j - 1))):store(all[j]) end
      end
      if writer then tl.if_(writer, write) else write() end
      tl.barrier()
      if L.on_barrier then L.on_barrier(L, op) end -- (rowring.lua's late refills)
      -- warp w' of the reader's row along k: warp + (w' - warp_k) * its stride
      local first = (L.warp - X.warp_coord[k] * X.warp_stride[k]) * per_warp + place
      for j = 1, nv do
        local v = (buf + (first + (j - 1))):load()
        for w = 1, wk - 1 do v = combs[j](v, (buf + (first + (w * X.warp_stride[k] * per_warp + j - 1))):load()) end
        all[j] = v
      end
      if in_loop(L, op) then tl.barrier() end -- before the buffer is written again
    end
  end
  local out = {}
  for i = 1, #ops do
    if not rinfo then
      out[i] = all[(i - 1) * S.n + 1] -- a rank-1 tile: a scalar
    else
      out[i] = B.value(elem, S, { table.unpack(all, (i - 1) * S.n + 1, i * S.n) })
    end
  end
  return out
end

function B.reduce(L, op, x) return B.reduce_many(L, { op }, { x })[1] end

-- tileas.transpose, and a convert_layout between two distributions of a
-- rank-2 tile: through shared memory. Each thread writes its registers of x
-- (16 bytes at once where it holds them contiguously), a barrier, each reads
-- its registers of the result ([i, j] of a transpose is x's [j, i]). The
-- buffer is x's rows, its 16-byte chunks swizzled (chunk q of row r at q xor
-- (r / chunk mod chunks)): a transpose's read of a column then meets the rows
-- of a warp's lanes in different banks.
function B.exchange(L, op, x, transpose)
  local X = x.D
  local ti = info(op:result(1))
  local Y = B.dist(L, ti, op)
  if X.rank ~= 2 then R.fail(op, "a layout change of a tile of rank %d is not lowered yet (rank 2)", X.rank) end
  local rows, cols = X.shape[1], X.shape[2]
  local eb = R.elem_bytes(x.elem)
  local bytes = rows * cols * eb
  if bytes > B.MAX_SHARED then
    R.fail(op, "moving a %d x %d tile between threads needs %d bytes of shared memory (48 KiB at most): use a smaller tile", rows, cols, bytes)
  end
  local buf = L.k:shared(x.elem, rows * cols, { align = 16 })
  local chunk = 16 // eb
  local nch = cols // chunk
  local swizzle = cols % chunk == 0 and nch > 1 and (nch & (nch - 1)) == 0
  local function index(r, c)
    if not swizzle then return r * cols + c end
    local q = (c // chunk) ~ ((r // chunk) % nch)
    return r * cols + q * chunk + c % chunk
  end
  -- the write: chunks of x's rows
  local wide = X.shape[2] > 1 and X.size[2] == chunk and swizzle
  local step = wide and chunk or 1
  for i = 1, X.n, step do
    local r, c = pos(X, i, 1), pos(X, i, 2)
    local function write()
      if wide then
        local vals = {}
        for j = 0, chunk - 1 do vals[j + 1] = x.r[i + j] end
        (buf + index(r, c)):store(tl.vector_of(x.elem, vals))
      else
        (buf + index(r, c)):store(x.r[i])
      end
    end
    local own = owner(X, i)
    if own then tl.if_(own, write) else write() end
  end
  tl.barrier()
  if L.on_barrier then L.on_barrier(L, op) end -- (rowring.lua's late refills)
  -- the read: the result's registers
  local regs = {}
  local wide_read = not transpose and Y.shape[2] > 1 and Y.size[2] == chunk and swizzle
  local i = 1
  while i <= Y.n do
    local yr, yc = pos(Y, i, 1), pos(Y, i, 2)
    local r, c = yr, yc
    if transpose then r, c = yc, yr end
    local idx = index(r, c)
    local ok = valid(Y, i)
    if ok then idx = tl.select(ok, idx, tl.const(0, tl.i32)) end
    if wide_read then
      local v = (buf + idx):load { vector = chunk }
      for j = 0, chunk - 1 do regs[i + j] = tl.extract(v, j) end
      i = i + chunk
    else
      regs[i] = (buf + idx):load()
      i = i + 1
    end
  end
  if in_loop(L, op) then tl.barrier() end -- before the buffer is written again
  return B.value(x.elem, Y, regs)
end

-- }===

-- {=== global tensors: tiled loads and stores

-- Is tensor e's memory aligned to vectors of `vec` elements (its pointer, and
-- its rows: the strides)? An i1 at the top of the agent, once per tensor and width.
local function aligned(L, e, vec)
  e.aligned = e.aligned or {}
  if e.aligned[vec] == nil then
    at_top(L, function()
      local bytes = vec * R.elem_bytes(e.elem)
      local ok = (tl.ptr_to_int(L.args[e.lowered_ptr], tl.i64) & (bytes - 1)):eq(0)
      for d = 1, e.rank - 1 do ok = ok & (L.args[e.lowered_strides[d]] % vec):eq(0) end
      e.aligned[vec] = ok
    end)
  end
  return e.aligned[vec]
end
B.aligned = aligned

-- The groups of registers one access moves: vec consecutive registers along
-- the last dim (their offsets differ there by 0 .. vec-1), in register order.
local function groups(D, vec)
  local out = {}
  local i = 1
  while i <= D.n do
    local g = { i }
    for j = 1, vec - 1 do g[#g + 1] = i + j end
    out[#out + 1] = g
    i = i + vec
  end
  return out
end

-- The width of op's accesses: its vec (tileas-prepare-for-scheduling), within
-- what a thread holds contiguously along the last dim.
local function width(D, op)
  local vec = op:attr "vec" or 0
  local run = D.shape[D.rank] == 1 and 1 or D.size[D.rank]
  if vec < 1 then vec = 1 end
  while vec > 1 and run % vec ~= 0 do vec = vec // 2 end
  return vec
end
B.width = width

-- The first and the last (furthest along the last dim) of groups gs where
-- all lie in one row (their offsets equal but along the last dim), else nil.
local function row_span(D, gs)
  local first, last = gs[1], gs[1]
  for _, g in ipairs(gs) do
    for d = 1, D.rank - 1 do
      if D.off[g[1]][d] ~= D.off[first[1]][d] then return nil end
    end
    if D.off[g[1]][D.rank] > D.off[last[1]][D.rank] then last = g end
  end
  return first, last
end

-- The tensor elements of register i of a tile at tile coordinates cs: per
-- dim, its index (i32), and its row offset (i64, but the last dim) and
-- whether the indices are inside the tensor (the last dim up to `span` more).
local function element(L, e, D, cs, i, span)
  local inb, row
  local idx = {}
  local lead = #cs.lead -- the dims the tile leaves out: their coordinates index elements
  for t = 1, lead + D.rank do
    local d = t - lead -- the tile's dim (<= 0: a leading dim of the tensor)
    local x
    if d < 1 then
      x = cs.lead[t]
    else
      x = cs[d] * D.shape[d]
      x = (D.shape[d] == 1 and D.off[i][d] == 0) and x or x + pos(D, i, d)
      idx[d] = x
    end
    local lim = L.args[e.lowered_dims[t]]
    local ok = d == D.rank and span > 1 and (x + span):le(lim) or x:lt(lim)
    inb = inb and (inb & ok) or ok
    if t < lead + D.rank then
      local term = x:cast(tl.i64) * L.args[e.lowered_strides[t]]
      row = row and row + term or term
    end
  end
  return idx, row, inb
end

-- The lowered coordinates of a tiled access: cs[d] of the tile's dim d, and
-- cs.lead those of the dims its tile leaves out.
local function coords_of(L, op, D)
  local lead = R.leading(op)
  local cs = { lead = {} }
  for d = 1, lead do cs.lead[d] = V.get(L, op:operand(1 + d), op) end
  for d = 1, D.rank do cs[d] = V.get(L, op:operand(1 + lead + d), op) end
  return cs
end

local function address(L, e, row, col)
  local off = col:cast(tl.i64)
  if row then off = row + off end
  return L.args[e.lowered_ptr] + off
end

-- env.tiled_load of a blocked tile: per group of vec registers, one vector
-- load where the rows are aligned and the vector inside the tensor, else
-- element by element (out of bounds: the padding). With `ring` (rowring.lua:
-- a row of the tile copied into shared memory, {base, elems}) the groups
-- inside the copied elements are read from there; with `ring.given` (the
-- registers an earlier call returned second) none is loaded: the value of those.
function B.tiled_load(L, op, ring)
  local e = L.P.by_arg[op:operand(1):id()]
  if not e.lowered_ptr then R.fail(op, "tensor '%s' has no pointer parameter", e.name) end
  local ti = info(op:result(1))
  local D = B.dist(L, ti, op)
  local cs = coords_of(L, op, D)
  local vec = width(D, op)
  local pad = op:attr "padding" or 0
  local padv = tl.is_float_type(ti.elem) and tl.const(pad + 0.0, ti.elem) or tl.const(math.tointeger(pad), ti.elem)
  local regs, words = {}, {}
  local half = ti.elem == tl.bf16 or ti.elem == tl.f16
  local raw, given = {}, ring and ring.given -- (the registers the loads gave, in order; rowring.lua's next row)
  local function take(n)
    local out = {}
    for j = 1, n do out[j] = given[#raw + j] end
    return table.unpack(out)
  end
  local function scalar(i)
    local idx, row, inb = element(L, e, D, cs, i, 1)
    local ok = both(inb, valid(D, i))
    local a = address(L, e, row, idx[D.rank])
    -- (an address out of bounds is never formed: the element 0's instead)
    local safe = tl.select(ok, a, L.args[e.lowered_ptr])
    return tl.select(ok, safe:load(), padv)
  end
  local nout = half and vec // 2 or vec
  local function read(p) -- one vector load at p (L.load_hints: rowring.lua's, on the rows ahead)
    local v = p:load { vector = vec, evict = L.load_hints and L.load_hints.evict, cache = L.load_hints and L.load_hints.cache }
    if half then v = v:bitcast(tl.vector(tl.i32, nout)) end
    local out = {}
    for j = 1, nout do out[j] = tl.extract(v, j - 1) end
    return table.unpack(out)
  end
  -- a group's place: its indices, row offset and whether its vector load may go
  local function place(g)
    local idx, row, inb = element(L, e, D, cs, g[1], vec)
    return { idx = idx, row = row, fast = both(both(inb, valid(D, g[1])), aligned(L, e, vec)) }
  end
  local function slow(g) -- element by element
    local out = {}
    for j = 1, nout do
      out[j] = half and tl.vector_of(ti.elem, { scalar(g[2 * j - 1]), scalar(g[2 * j]) }):bitcast(tl.i32) or scalar(g[j])
    end
    return table.unpack(out)
  end
  local function from_global(g, at)
    return tl.if_(at.fast, function() return read(address(L, e, at.row, at.idx[D.rank])) end, function() return slow(g) end)
  end
  -- a group's registers: from the ring's stage where the copy covers it,
  -- else from the tensor
  local function group(g)
    local at = place(g)
    if not ring then return from_global(g, at) end
    local col = at.idx[D.rank]
    return tl.if_(both((col + vec):le(ring.elems), valid(D, g[1])),
      function() return read(ring.base + col) end, function() return from_global(g, at) end)
  end
  local gs = groups(D, vec)
  -- (L.whole_row: rowring.lua's row_ring.whole) one branch for a tile whose
  -- groups lie in one row: every group's vector load where the last one may
  -- go (the row inside, the last group's end inside, aligned; with `ring`:
  -- the last group's end inside the stage's copy), its address the first
  -- group's plus a constant; else each group on its own branch as without
  local whole
  local first, last = row_span(D, gs)
  if L.whole_row and vec > 1 and #gs > 1 and not given and first then
    local a1, al = place(first), place(last)
    local rank = D.rank
    local all = al.fast
    if ring then all = both((al.idx[rank] + vec):le(ring.elems), valid(D, last[1])) end
    whole = table.pack(tl.if_(all, function()
      local p0, out = ring and ring.base + a1.idx[rank] or address(L, e, a1.row, a1.idx[rank]), {}
      for _, g in ipairs(gs) do
        local c = D.off[g[1]][rank] - D.off[first[1]][rank]
        for _, v in ipairs { read(c == 0 and p0 or p0 + c) } do out[#out + 1] = v end
      end
      return table.unpack(out)
    end, function()
      local out = {}
      for _, g in ipairs(gs) do
        for _, v in ipairs { group(g) } do out[#out + 1] = v end
      end
      return table.unpack(out)
    end))
  end
  for k, g in ipairs(gs) do
    if vec == 1 then
      regs[g[1]] = given and take(1) or scalar(g[1])
      raw[#raw + 1] = regs[g[1]]
    else
      -- 16-bit elements travel as 32-bit words of two (the registers a vector
      -- load gives): extf to f32 then takes them apart with a shift or a mask
      local outs
      if given then
        outs = table.pack(take(nout))
      elseif whole then
        outs = table.pack(table.unpack(whole, (k - 1) * nout + 1, k * nout))
      else
        outs = table.pack(group(g))
      end
      for j = 1, nout do raw[#raw + 1] = outs[j] end
      if half then
        for j = 1, nout do
          local pair = outs[j]:bitcast(tl.vector(ti.elem, 2))
          regs[g[2 * j - 1]], regs[g[2 * j]] = tl.extract(pair, 0), tl.extract(pair, 1)
          words[g[2 * j - 1]], words[g[2 * j]] = { outs[j], false }, { outs[j], true }
        end
      else
        for j = 1, vec do regs[g[j]] = outs[j] end
      end
    end
  end
  local x = B.value(ti.elem, D, regs)
  if half and vec > 1 then x.words = words end -- (element by element: no words)
  return x, raw
end

-- env.tiled_store of a blocked tile: as the load, the first holder of each
-- element storing it (a reduce-add store: adding it atomically, an element
-- at a time). With `ring` (rowring.lua's bulk stores: a row of the tile
-- written into shared memory, {base, elems}) the groups inside the first
-- `elems` elements of the row go to base + their column instead (a bulk copy
-- moves them to the tensor), the rest to the tensor as without.
function B.tiled_store(L, op, x, ring)
  local e = L.P.by_arg[op:operand(1):id()]
  if not e.lowered_ptr then R.fail(op, "tensor '%s' has no pointer parameter", e.name) end
  if not B.is_dist(x) then R.fail(op, "tiled_store of a tile not of a blocked layout in a compute agent") end
  local D = x.D
  local cs = coords_of(L, op, D)
  local reduce = op:attr "reduce"
  local vec = reduce and 1 or width(D, op)
  local function packed(g)
    if x.trunc_of and vec % 2 == 0 then -- pairs rounded and packed at once (cvt.rn.bf16x2.f32)
      local ws = {}
      for j = 1, vec // 2 do
        ws[j] = tl.op1("tile.pack", { x.trunc_of.r[g[2 * j - 1]], x.trunc_of.r[g[2 * j]] },
                       tl.vector(x.elem, 2)):bitcast(tl.i32)
      end
      return tl.vector_of(tl.i32, ws):bitcast(tl.vector(x.elem, vec))
    end
    local vals = {}
    for j = 1, vec do vals[j] = x.r[g[j]] end
    return vec == 1 and vals[1] or tl.vector_of(x.elem, vals)
  end
  local function group(g)
    local function scalar(i)
      local idx, row, inb = element(L, e, D, cs, i, 1)
      tl.if_(both(inb, owner(D, i)), function()
        local p = address(L, e, row, idx[D.rank])
        if reduce then tl.atomic(reduce, p, x.r[i]) else p:store(x.r[i], L.store_hints) end
      end)
    end
    local function to_tensor(idx, row, fast)
      if vec == 1 then return scalar(g[1]) end
      tl.if_(fast, function()
        local v = packed(g)
        address(L, e, row, idx[D.rank]):store(v, L.store_hints) -- (rowring.lua's hints, on its loop's stores)
      end, function()
        for j = 1, vec do scalar(g[j]) end
      end)
    end
    if vec == 1 and not ring then
      scalar(g[1])
    else
      local idx, row, inb = element(L, e, D, cs, g[1], vec)
      local own = owner(D, g[1])
      local fast = vec > 1 and both(inb, aligned(L, e, vec))
      local function guarded(fn) if own then tl.if_(own, fn) else fn() end end
      if ring then
        local col = idx[D.rank]
        guarded(function()
          tl.if_((col + vec):le(ring.elems), function() (ring.base + col):store(packed(g)) end,
                 function() to_tensor(idx, row, fast) end)
        end)
      else
        guarded(function() to_tensor(idx, row, fast) end)
      end
    end
  end
  local gs = groups(D, vec)
  -- (L.whole_row: rowring.lua's row_ring.whole) one branch for a tile whose
  -- groups lie in one row and that no two threads share (every element its
  -- holder's to store): every group's vector store where the last one may go,
  -- its address the first group's plus a constant; else each group on its
  -- own branch as without
  local first, last = row_span(D, gs)
  if L.whole_row and vec > 1 and #gs > 1 and not ring and not D.dup_removed and first then
    local shared = false
    for d = 1, D.rank do shared = shared or D.dup[d] or D.limit[d] end
    if not shared then
      local rank = D.rank
      local idx1, row1 = element(L, e, D, cs, first[1], vec)
      local _, _, inbl = element(L, e, D, cs, last[1], vec)
      tl.if_(both(inbl, aligned(L, e, vec)), function()
        local p0 = address(L, e, row1, idx1[rank])
        for _, g in ipairs(gs) do
          local c = D.off[g[1]][rank] - D.off[first[1]][rank]
          ;(c == 0 and p0 or p0 + c):store(packed(g), L.store_hints)
        end
      end, function()
        for _, g in ipairs(gs) do group(g) end
      end)
      return
    end
  end
  for _, g in ipairs(gs) do group(g) end
end

-- }===

return B
