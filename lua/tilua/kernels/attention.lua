-- tilua.kernels.attention: the pieces of the Hopper attention forward (the
-- FlashAttention-3 design, docs/attention.md) that both the stdlib's generator
-- (stdlib/attention.lua, tl.attention) and the lowering of tile programs
-- (convert-tileas-to-cutlass) build kernels with. Written with the DSL only;
-- each piece takes the library as `tl`, the static configuration c (d, bn, bm,
-- consumers, stages, causal, dtype) and the kernel's attention state A (the
-- problem's sizes as values: M.problem; the shared buffers and pipelines):
--
--   M.problem(tl, c, sizes)                      the state's sizes (b, h, hkv, sq, skv, tm, group, cl)
--   M.tile_of(tl, c, A, work), M.kv_blocks(tl, c, A, tile)   a work tile, its blocks of keys
--   M.load_q, M.load_kv                           the producer's TMA loads of a tile
--   M.turn_state, M.turn_wait, M.turn_pass        the consumers' turns at the GEMMs (seq_bars)
--   M.qk, M.p_operands, M.pv                      the two GEMMs (P from registers)
--   M.softmax, M.pack_p                           the online softmax of a fragment
--   M.consumer_tile, M.epilogue                   a consumer warpgroup's tile

local G = require "tilua.kernels.gemm"

local M = {}

local LOG2E, LN2 = 1.4426950408889634, 0.6931471805599453

-- The state's shared buffers and pipelines ({q, k, v, o, pq, pk, pv, go}):
-- sQ {consumers, d / 64, 64, 64}, sK and sV {stages, d / 64, bn, 64}
-- (128-byte swizzle: boxes of 64 columns), pipelines of Q (one stage), K and
-- V, the consumers' seq_bars go (none: no turns).

-- The problem's sizes as i32 values of the kernel (b, h, hkv, sq, skv: numbers
-- or values) and its scale (an f32 value or a number) -> the table of the
-- kernel's attention state, with tm (m blocks), group (query heads a key
-- head) and cl (the scale times log2(e)); the caller adds the shared
-- buffers and pipelines.
function M.problem(tl, c, x)
  local A = {}
  for _, key in ipairs { "b", "h", "hkv", "sq", "skv" } do A[key] = tl.cast(x[key], tl.i32) end
  A.tm = (A.sq + (c.bm - 1)) // c.bm
  A.group = A.h // A.hkv
  A.cl = tl.cast(x.scale, tl.f32) * tl.const(LOG2E, tl.f32)
  return A
end

-- The work tile `work` of the scheduler (tiles {m blocks, h, b}; causal {h, m
-- blocks, b}): its m block, head, batch and key head (grouped-query: h / (h /
-- hkv)); causal tiles are walked from the last m block (the longest first).
function M.tile_of(tl, c, A, work)
  if c.split_tail then return M.split_tile(tl, c, A, work:m()) end
  local m, h = work:m(), work:n()
  if c.causal then m, h = A.tm - 1 - h, m end
  return { m = m, h = h, b = work:l(), hk = h // A.group }
end

-- The first row of a tile (its m block's, or tile.row0: c.split_tail's tiles).
function M.row0(c, tile) return tile.row0 or tile.m * c.bm end

-- {=== c.split_tail: the rounds of whole tiles, then the rest as tiles of one warpgroup's rows
--
-- A head's rows are U = ceil(sq / 64) units of a warpgroup's 64. A persistent
-- grid of G CTAs takes whole tiles (c.consumers units, one m block) in F =
-- G x floor(all units / (consumers x G)) (at most each head's whole m blocks):
-- whole rounds, every CTA the same count; the other units (fewer than
-- consumers x G) are tiles of one unit each, computed by the CTA's first
-- warpgroup alone (no turns) while the others walk the stages: a CTA's last
-- round takes a warpgroup's one unit, not a whole tile's three (head dim 64:
-- 704 tiles of 192 rows on 132 SMs made 6 rounds for 5.09 of work). Heads
-- 0 .. extra - 1 have q + 1 whole tiles, the others q (F = q x heads + extra);
-- ids: the whole tiles (head-major, m blocks fastest), then the units.

-- The split's sizes of problem A on G CTAs: A.U, A.F, A.whole (q), A.extra, A.tiles.
function M.split_tail(tl, c, A, G)
  local NC = c.consumers
  local hb = A.h * A.b
  A.U = (A.sq + 63) // 64
  A.F = tl.min((A.U // NC) * hb, (A.U * hb) // (G * NC) * G)
  A.whole, A.extra = A.F // hb, A.F % hb
  A.tiles = A.F + A.U * hb - A.F * NC
end

-- Tile id i of the split -> {row0, h, b, hk, single (i1: a unit tile)}.
function M.split_tile(tl, c, A, i)
  local NC, one = c.consumers, tl.const(1, tl.i32)
  local q, extra, U = A.whole, A.extra, A.U
  local single = i:ge(A.F)
  local q1 = q + 1
  local cut = extra * q1 -- whole tiles of the heads with q + 1
  local i2 = i - cut
  local qd = tl.max(q, one)
  local hf = tl.select(i:lt(cut), i // q1, extra + i2 // qd)
  local mf = tl.select(i:lt(cut), i % q1, i2 % qd)
  local s = i - A.F -- the units: U - NC (q + 1) a head of the first extra, U - NC q the others'
  local r1, r0 = U - q1 * NC, U - q * NC
  local cut1 = extra * r1
  local s2 = s - cut1
  local r1d, r0d = tl.max(r1, one), tl.max(r0, one)
  local hs = tl.select(s:lt(cut1), s // r1d, extra + s2 // r0d)
  local us = tl.select(s:lt(cut1), q1 * NC + s % r1d, q * NC + s2 % r0d)
  local hh = tl.select(single, hs, hf)
  local h = hh % A.h
  return { row0 = tl.select(single, us * 64, mf * c.bm), h = h, b = hh // A.h, hk = h // A.group, single = single }
end

-- }===

-- The k blocks of a tile: n (how many the tile reads: all of the keys, or
-- those left of the causal diagonal) and masked (how many of them, the last,
-- cross the diagonal or the end of the keys). -> n, masked (i32 values)
function M.kv_blocks(tl, c, A, tile)
  local BN, skv = c.bn, A.skv
  local full = skv // BN -- blocks wholly inside the keys
  local n = (skv + (BN - 1)) // BN
  local unmasked = full
  if c.causal then
    local first_row = tile.m * c.bm
    n = tl.min(n, (first_row + (c.bm + BN - 1)) // BN)
    unmasked = tl.min(full, (first_row + 1) // BN) -- whole blocks left of every row's diagonal
  end
  return n, n - unmasked
end

-- The producer's loads of Q for a tile: a box of 64 x 64 a consumer and a
-- swizzle span of the head dim.
function M.load_q(tl, c, sm, map, st, tile)
  local pipe = sm.pq
  pipe:producer_acquire(st)
  local full = pipe:full_barrier(st)
  for w = 0, c.consumers - 1 do
    for x = 0, c.d // 64 - 1 do
      tl.tma_load(sm.q:ptr(w, x), map, full, { tile.b, tile.h, M.row0(c, tile) + 64 * w, tl.const(64 * x, tl.i32) })
    end
  end
  pipe:producer_commit(st)
  st:advance()
end

-- One block of keys (K or V) into a stage of its ring.
local function load_block(tl, c, pipe, ring, map, st, tile, n)
  pipe:producer_acquire(st)
  local full, s = pipe:full_barrier(st), st:index()
  for x = 0, c.d // 64 - 1 do
    tl.tma_load(ring:ptr(s, x), map, full, { tile.b, tile.hk, n * c.bn, tl.const(64 * x, tl.i32) })
  end
  pipe:producer_commit(st)
  st:advance()
end

-- The producer's loads of a tile's K and V blocks, last first, in the order
-- the consumers read them: K_0, then K_j and V_{j-1}, then V_last (c.kv_order
-- "paired", for measuring: K_j and V_j together, V_j's stage acquired before
-- K_{j+1}'s, which the consumers free an iteration earlier).
function M.load_kv(tl, c, sm, kmap, vmap, stk, stv, tile)
  local n = M.kv_blocks(tl, c, sm, tile)
  if c.kv_order == "paired" then
    tl.cutlass.for_range(tl.const(0, tl.i32), n, { stk, stv }, function(j)
      load_block(tl, c, sm.pk, sm.k, kmap, stk, tile, n - 1 - j)
      load_block(tl, c, sm.pv, sm.v, vmap, stv, tile, n - 1 - j)
    end)
    return
  end
  load_block(tl, c, sm.pk, sm.k, kmap, stk, tile, n - 1)
  tl.cutlass.for_range(tl.const(1, tl.i32), n, { stk, stv }, function(j)
    load_block(tl, c, sm.pk, sm.k, kmap, stk, tile, n - 1 - j)
    load_block(tl, c, sm.pv, sm.v, vmap, stv, tile, n - j)
  end)
  load_block(tl, c, sm.pv, sm.v, vmap, stv, tile, tl.const(0, tl.i32))
end

-- {=== the consumer warpgroups' turns: a ring of seq_bars

-- fn(w) for w = wg + 1 (an if-chain on the warp-uniform wg: one code for
-- every warpgroup); fn returns a seq_bar state or nothing -> the state's value
-- (nil when fn returns nothing).
local function by_warpgroup(tl, n, wg, fn)
  local function call(w)
    local st = fn(w)
    if st then return st.value end
  end
  local function from(w)
    if w == n then return call(w) end
    return tl.if_(wg:eq(w - 1), function() return call(w) end, function() return from(w + 1) end)
  end
  return from(1)
end

-- The state of warpgroup wg's turns (warpgroup 0 goes first).
function M.turn_state(tl, go, wg)
  local mt
  local v = by_warpgroup(tl, #go, wg, function(w)
    local st = go[w]:state { phase = w == 1 and 1 or 0 }
    mt = getmetatable(st)
    return st
  end)
  return setmetatable({ value = v, bar = go[1] }, mt)
end

-- Wait for this warpgroup's turn to issue its GEMMs (ctx.turn_if, an i1:
-- only where it holds; the convert-tileas-to-cutlass split tail's unit tiles
-- take no turns).
function M.turn_wait(tl, go, ctx)
  if not ctx.turn then return end
  local st = ctx.turn
  local function wait() by_warpgroup(tl, #go, ctx.wg, function(w) go[w]:wait(st) end) end
  if ctx.turn_if then tl.if_(ctx.turn_if, wait) else wait() end
end

-- Hand the turn to the next warpgroup (arrive on its seq_bar; the state
-- advances; where ctx.turn_if does not hold, neither).
function M.turn_pass(tl, go, ctx)
  if not ctx.turn then return end
  local before, mt = ctx.turn.value, getmetatable(ctx.turn)
  local function pass()
    return by_warpgroup(tl, #go, ctx.wg, function(w)
      local st = setmetatable({ value = before, bar = go[w] }, mt)
      go[w % #go + 1]:arrive(st)
      return st
    end)
  end
  if ctx.turn_if then ctx.turn.value = tl.if_(ctx.turn_if, pass, function() return before end)
  else ctx.turn.value = pass() end
end

-- }===

-- {=== the GEMMs

-- The descriptor of element (i, x, row, col) of a swizzled buffer of boxes of
-- 64 columns (rows of 128 bytes, 128-byte swizzle) {n, boxes, rows, 64}, i
-- moving at run time (a stage, a warpgroup's rows), row a multiple of 8:
-- the buffer's base descriptor plus the address in 16-byte units (whole
-- periods of the swizzle, 8 rows of 128 bytes, and columns within a row that
-- starts one: the swizzle leaves them in place) -- one add a wgmma in a loop,
-- where the address of each would be swizzled at run time.
local function desc(tl, buf, opts, i, box_rows, x, row, col)
  local boxes = buf:type():info().shape[2]
  local d = tl.wgmma_desc(buf:ptr(0, 0, 0, 0), opts) + tl.cast(i * (boxes * box_rows * 8), tl.i64)
  return d + tl.const((x * box_rows + row) * 8 + col // 8, tl.i64)
end

-- S = Q K_s^T for this warpgroup's 64 rows (a vector<bn/2 x f32>): d/16 wgmma
-- m64n{bn}k16 from descriptors (K-major both; a k step of 16 moves along the
-- 128-byte row, into the next box every 4 steps), committed. The caller
-- fences (wgmma_fence) once the registers the GEMMs read are written. acc:
-- the registers to write (their values unread: the first step has scale-d
-- off), the last S's when a loop carries them, so that no copy is made.
function M.qk(tl, c, sm, wg, s, acc)
  acc = acc or tl.zeros(tl.f32, c.bn // 2)
  for kk = 0, c.d // 16 - 1 do
    local x, col = kk * 16 // 64, kk * 16 % 64
    local da = tl.wgmma_desc(sm.q:ptr(wg, x, 0, col), { swizzle = 128, sbo = 1024 }) -- (the same every block)
    local db = desc(tl, sm.k, { swizzle = 128, sbo = 1024 }, s, c.bn, x, 0, col)
    local o = { type_a = c.dtype, type_b = c.dtype }
    if kk == 0 then o.scale_d = false end -- S = Q K^T from the first step
    acc = tl.wgmma(acc, da, db, o)
  end
  tl.wgmma_commit()
  return acc
end

-- P's registers as the A operands of the PV GEMM: a vector<4 x i32> a k step
-- of 16 keys (the packed pairs of the S fragment's elements 8 kk .. 8 kk + 7,
-- which is the A fragment's layout). Built before the fence.
function M.p_operands(tl, c, pvec)
  local a = {}
  for kk = 0, c.bn // 16 - 1 do
    local r = {}
    for j = 1, 4 do r[j] = tl.extract(pvec, 4 * kk + j - 1) end
    a[kk] = tl.vector_of(tl.i32, r)
  end
  return a
end

-- O += P V_s: bn/16 wgmma m64n{d}k16, A = P from registers (M.p_operands),
-- B = V MN-major (64-column atoms a box apart). Committed.
function M.pv(tl, c, sm, o, pa, s)
  for kk = 0, c.bn // 16 - 1 do
    local db = desc(tl, sm.v, { swizzle = 128, lbo = c.bn * 128, sbo = 1024 }, s, c.bn, 0, kk * 16, 0)
    o = tl.wgmma(o, pa[kk], db, { type_a = c.dtype, type_b = c.dtype, trans_b = true })
  end
  tl.wgmma_commit()
  return o
end

-- c.sum_mma: the box of ones after each stage of V (sm.v {stages, d / 64 + 1,
-- bn, 64}), written once by the consumers' threads (ctid 0 .. 128 consumers -
-- 1; every element one: the swizzle moves nothing), then made visible to the
-- wgmma's (async) proxy; named barrier consumers + 1 (the epilogue's are
-- 1 .. consumers).
function M.fill_ones(tl, c, sm, ctid)
  local n = c.stages * c.bn * 64 // 2 -- pairs of 16-bit elements
  local one = c.dtype == "f16" and 0x3C003C00 or 0x3F803F80
  local box = c.d // 64
  local threads = 128 * c.consumers
  for i = 0, (n + threads - 1) // threads - 1 do
    local e = ctid + i * threads
    tl.if_(e:lt(n), function()
      local per = c.bn * 64 // 2
      local s, r = e // per, e % per
      local p = sm.v:ptr(s, box, 0, 0):as(tl.i32) + r
      tl.store(p, tl.const(one, tl.i32))
    end)
  end
  tl.fence_proxy_async("shared")
  tl.named_barrier_sync(c.consumers + 1, threads)
end

-- }===

-- {=== the online softmax on a fragment

-- The scores of S (vector) as f32 values vals[0 ..]; masked: -inf where the
-- key is past the end or (causal) right of the row's diagonal.
local function scores(tl, c, A, ctx, S, rows0, nblock, masked)
  local f = ctx.f
  local vals = {}
  for i = 0, c.bn // 2 - 1 do vals[i] = tl.extract(S, i) end
  if not masked then return vals end
  local ninf = tl.const(-math.huge, tl.f32)
  local col0 = nblock * c.bn + f.col
  local lim = {}
  for r = 0, 1 do -- the first column masked in each row, relative to the thread's first
    local l = A.skv
    if c.causal then l = tl.min(l, rows0 + (8 * r + 1)) end
    lim[r] = l - col0
  end
  for i = 0, c.bn // 2 - 1 do
    local dr, dc = f.offset(i)
    vals[i] = tl.select(tl.const(dc, tl.i32):lt(lim[dr // 8]), vals[i], ninf)
  end
  return vals
end

-- 2^x on the FMA and integer pipes, not the MUFU's (FlashAttention-4's
-- emulation; at head dim 64 the MUFU's 16 exp2 a clock an SM take as long as
-- the tensor cores' two GEMMs): x clamped to -126 (2^x then 0 or a denormal's
-- worth), n = round(x) in the low bits of x + 1.5 * 2^23, 2^(x - n) a
-- degree-3 polynomial on [-1/2, 1/2] (relative error 7.5e-5, a
-- least-squares fit of the relative error; P is rounded to 16 bits, 2^-9),
-- and n added to its exponent.
local POLY = { 0.9999280571937561, 0.6932609677314758, 0.2426111400127411, 0.0551716685295105 }
local function ex2_poly(tl, x)
  local function k(v) return tl.const(v, tl.f32) end
  local magic = k(12582912.0)
  x = tl.max(x, k(-126.0))
  local t = x + magic
  local f = x - (t - magic)
  local p = tl.fma(tl.fma(tl.fma(k(POLY[4]), f, k(POLY[3])), f, k(POLY[2])), f, k(POLY[1]))
  return (p:bitcast(tl.i32) + (t:bitcast(tl.i32) << tl.const(23, tl.i32))):bitcast(tl.f32)
end

-- The largest of a row's values (a list): a chain of max in order, or, with
-- c.max_tree, pairs of pairs (the same values and count, depth log2 n instead
-- of n - 1: the exps wait for it).
local function row_max(tl, c, mine)
  if not c.max_tree then
    local mx = mine[1]
    for j = 2, #mine do mx = tl.max(mx, mine[j]) end
    return mx
  end
  while #mine > 1 do
    local nx = {}
    for k = 1, #mine, 2 do nx[#nx + 1] = mine[k + 1] and tl.max(mine[k], mine[k + 1]) or mine[k] end
    mine = nx
  end
  return mine[1]
end

-- One step of the online softmax of rows r = 0, 1 (the thread's rows f.row,
-- f.row + 8): m[r] the running max of the raw scores, l[r] the thread's part
-- of the running sum (its quad's sum is taken at the end). first: no running
-- values yet. -> the f32 probabilities p[0 ..], the new m, l, and the factors
-- alpha[r] that rescale what was summed before; with c.rescale (a threshold t
-- in the log2 domain, FlashAttention-4's): the running max is raised only
-- where some row of the warp grew by more than t (exp2(t) bounds the
-- probabilities computed against the older max; the result is exact, O / l
-- and the log-sum-exp taken against the max used), and then for every row of
-- the warp; the fifth result is that warp-uniform condition (alpha 1 where
-- false: O need not be rescaled).
function M.softmax(tl, c, A, vals, m, l, first)
  local cl = A.cl
  local ninf, zero = tl.const(-math.huge, tl.f32), tl.const(0.0, tl.f32)
  local p, nm, nl, alpha = {}, {}, {}, {}
  local n = c.bn // 2
  local function exps(r, ms)
    local sum, j = nil, 0
    for i = 0, n - 1 do
      if (i % 4) // 2 == r then -- (c.exp2_poly of every 8 of the row's exp2 emulated: ex2_poly)
        local x = tl.fma(vals[i], cl, -ms)
        p[i] = j % 8 < (c.exp2_poly or 0) and ex2_poly(tl, x) or tl.ex2(x)
        if not c.sum_mma then sum = sum and sum + p[i] or p[i] end -- (c.sum_mma: the PV GEMM sums)
        j = j + 1
      end
    end
    return sum
  end
  local function block_max(r)
    local mine = {}
    for i = 0, n - 1 do if (i % 4) // 2 == r then mine[#mine + 1] = vals[i] end end
    local mx = row_max(tl, c, mine)
    mx = tl.max(mx, tl.shfl_xor(mx, 1))
    return tl.max(mx, tl.shfl_xor(mx, 2))
  end
  if c.rescale and not first then
    local mx, ms = {}, {}
    for r = 0, 1 do mx[r] = tl.max(m[r], block_max(r)) end
    -- grown by more than t: (mx - m) cl > t (m = -inf: +inf where mx is finite; NaN, not grown, where both are -inf)
    local t = tl.const(c.rescale, tl.f32)
    local grew = (mx[0] * cl - m[0] * cl):gt(t) | (mx[1] * cl - m[1] * cl):gt(t)
    local upd = tl.vote_any(grew)
    -- (selects, not a branch: ptxas waits for the wgmma in flight at one)
    for r = 0, 1 do
      nm[r] = tl.select(upd, mx[r], m[r])
      ms[r] = tl.select(nm[r]:eq(ninf), zero, nm[r] * cl) -- (a row masked so far has max -inf: subtract 0 instead)
      alpha[r] = tl.ex2(m[r] * cl - ms[r]) -- (1 where the max stays)
    end
    for r = 0, 1 do
      local sum = exps(r, ms[r])
      if sum then nl[r] = tl.fma(l[r], alpha[r], sum) end
    end
    return p, nm, nl, alpha, upd
  end
  for r = 0, 1 do
    local mx = block_max(r)
    if not first then mx = tl.max(m[r], mx) end
    nm[r] = mx
    -- a row masked so far has max -inf: subtract 0 instead (its exp2 are 0)
    local ms = tl.select(mx:eq(ninf), zero, mx * cl)
    if not first then alpha[r] = tl.ex2(m[r] * cl - ms) end
    local sum = exps(r, ms)
    if sum then nl[r] = first and sum or tl.fma(l[r], alpha[r], sum) end
  end
  return p, nm, nl, alpha
end

-- The probabilities packed as the PV wgmma's A operand: pairs (2i, 2i + 1)
-- rounded to the input type, each an i32.
function M.pack_p(tl, c, p)
  local regs = {}
  local et = c.dtype == "f16" and tl.f16 or tl.bf16
  for i = 0, c.bn // 2 - 1, 2 do regs[#regs + 1] = tl.pack(p[i], p[i + 1], et):bitcast(tl.i32) end
  return regs
end

-- }===

-- {=== a consumer warpgroup's tile

-- O's registers: d / 2, and 4 more with c.sum_mma (columns d .. d + 7: the rows' sums)
local function o_regs(c) return (c.d + (c.sum_mma and 8 or 0)) // 2 end

local function scale_rows(tl, c, ctx, o, alpha)
  local vals = {}
  for i = 0, o_regs(c) - 1 do
    local dr = ctx.f.offset(i)
    vals[i + 1] = tl.extract(o, i) * alpha[dr // 8]
  end
  return tl.vector_of(tl.f32, vals)
end

-- Release a stage: one lane of each warp for its warp (a cooperative
-- pipeline counts it as 32 arrivals; wgmma.wait_group already completed the
-- warpgroup's reads).
local function release(tl, pipe, st)
  tl.elect_one(function() pipe:consumer_release(st) end)
end

-- The mainloop of one tile for this warpgroup (ctx: wg, t, the fragment f,
-- the cursors stq, stk, stv, turn): -> { o = the accumulator (vector<d/2 x
-- f32>, unnormalized), m = {r0, r1}, l = {r0, r1} (the thread's parts) }.
function M.consumer_tile(tl, c, sm, ctx, tile)
  local go = sm.go
  local n, nmasked = M.kv_blocks(tl, c, sm, tile)
  local rows0 = M.row0(c, tile) + ctx.wg * 64 + ctx.f.row -- the global row of the thread's first row
  sm.pq:consumer_wait(ctx.stq)
  -- the first (last) block, masked
  sm.pk:consumer_wait(ctx.stk)
  M.turn_wait(tl, go, ctx)
  tl.wgmma_fence()
  local S = M.qk(tl, c, sm, ctx.wg, ctx.stk:index())
  M.turn_pass(tl, go, ctx)
  tl.wgmma_wait(0)
  release(tl, sm.pk, ctx.stk)
  ctx.stk:advance()
  local p, m, l = M.softmax(tl, c, sm, scores(tl, c, sm, ctx, S, rows0, n - 1, true), nil, nil, true)
  -- the loop carries P packed (the PV wgmma's A registers), or, with
  -- c.pack_late, its f32 values, packed before the next block's issue: ptxas
  -- gives the probabilities the registers of the packed P they become, and
  -- those of the carried P are the A operand the PV GEMM in flight reads (it
  -- then waits for that GEMM before the first exp2)
  local function held(pv) -- the carried form of probabilities pv[0 ..]
    if not c.pack_late then return tl.vector_of(tl.i32, M.pack_p(tl, c, pv)) end
    local x = {}
    for i = 0, c.bn // 2 - 1 do x[i + 1] = pv[i] end
    return tl.vector_of(tl.f32, x)
  end
  local function packed(v) -- the carried form as the PV GEMM's A operands
    if not c.pack_late then return M.p_operands(tl, c, v) end
    local pv = {}
    for i = 0, c.bn // 2 - 1 do pv[i] = tl.extract(v, i) end
    return M.p_operands(tl, c, tl.vector_of(tl.i32, M.pack_p(tl, c, pv)))
  end
  local carry = { o = { value = tl.zeros(tl.f32, o_regs(c)) }, p = { value = held(p) },
                  s = { value = S },
                  m0 = { value = m[0] }, m1 = { value = m[1] }, l0 = { value = l[0] }, l1 = { value = l[1] } }
  -- (c.fresh_s: each block's S in registers of its own, not the last S's,
  -- which the loop would carry: they die with the softmax, where its
  -- probabilities can take them)
  local list = { ctx.stk, ctx.stv, carry.o, carry.p, carry.m0, carry.m1 }
  if not c.sum_mma then list[#list + 1], list[#list + 2] = carry.l0, carry.l1 end -- (the sums in O's columns d ..)
  if not c.fresh_s then table.insert(list, 5, carry.s) end
  -- (c.early_rescale, FlashAttention-3's order: O rescaled by the last
  -- block's factors between the issues of S_j and of P_{j-1} V_{j-1}, the
  -- QK GEMM in flight, so that nothing is left after the PV wait but P's
  -- packing; the loop carries the factors)
  local one_f = tl.const(1.0, tl.f32)
  carry.a0, carry.a1 = { value = one_f }, { value = one_f }
  if c.early_rescale then list[#list + 1], list[#list + 2] = carry.a0, carry.a1 end
  if ctx.turn then list[#list + 1] = ctx.turn end
  local function rescaled_o() -- O for the next PV GEMM (the factors then spent)
    if not c.early_rescale then return carry.o.value end
    local o = scale_rows(tl, c, ctx, carry.o.value, { [0] = carry.a0.value, carry.a1.value })
    tl.wgmma_fence() -- (O's registers written before the wgmma reads them)
    return o
  end
  -- block j (n - 1 - j): S_j issued, then P_{j-1} V_{j-1} (both stages
  -- waited for first); the softmax of S_j while the PV GEMM runs; O
  -- rescaled once it completed
  local function step(j, masked)
    sm.pk:consumer_wait(ctx.stk)
    sm.pv:consumer_wait(ctx.stv)
    M.turn_wait(tl, go, ctx)
    local pa = packed(carry.p.value)
    tl.wgmma_fence() -- (no branch between it and the wgmmas: ptxas would fence again)
    local Sj = M.qk(tl, c, sm, ctx.wg, ctx.stk:index(), not c.fresh_s and carry.s.value or nil)
    local o = M.pv(tl, c, sm, rescaled_o(), pa, ctx.stv:index())
    M.turn_pass(tl, go, ctx)
    tl.wgmma_wait(1)
    release(tl, sm.pk, ctx.stk)
    ctx.stk:advance()
    local pj, mj, lj, alpha, upd = M.softmax(tl, c, sm, scores(tl, c, sm, ctx, Sj, rows0, n - 1 - j, masked),
                                             { [0] = carry.m0.value, carry.m1.value }, { [0] = carry.l0.value, carry.l1.value })
    tl.wgmma_wait(0)
    release(tl, sm.pv, ctx.stv)
    ctx.stv:advance()
    if c.early_rescale then
      carry.o.value, carry.a0.value, carry.a1.value = o, alpha[0], alpha[1]
    elseif upd then -- (c.rescale: O rescaled only where the warp's max was raised)
      carry.o.value = tl.if_(upd, function() return scale_rows(tl, c, ctx, o, alpha) end, function() return o end)
    else
      carry.o.value = scale_rows(tl, c, ctx, o, alpha)
    end
    carry.p.value = held(pj)
    carry.s.value = Sj
    carry.m0.value, carry.m1.value, carry.l0.value, carry.l1.value = mj[0], mj[1], lj[0], lj[1]
  end
  local one = tl.const(1, tl.i32)
  tl.cutlass.for_range(one, tl.max(nmasked, one), list, function(j) step(j, true) end)
  tl.cutlass.for_range(tl.max(nmasked, one), n, list, function(j) step(j, false) end)
  -- the last block's P V
  sm.pv:consumer_wait(ctx.stv)
  local pa = packed(carry.p.value)
  local o0 = c.early_rescale and rescaled_o() or carry.o.value
  tl.wgmma_fence()
  local o = M.pv(tl, c, sm, o0, pa, ctx.stv:index())
  tl.wgmma_wait(0)
  release(tl, sm.pv, ctx.stv)
  ctx.stv:advance()
  if not c.o_in_q then -- (with the output staged in Q's rows, Q is released once the store read them)
    release(tl, sm.pq, ctx.stq)
    ctx.stq:advance()
  end
  if c.sum_mma then -- (each of columns d .. d + 7 holds its row's whole sum: element d / 2 + 2 r is row r's)
    return { o = o, m = { [0] = carry.m0.value, carry.m1.value }, summed = true,
             l = { [0] = tl.extract(o, c.d // 2), tl.extract(o, c.d // 2 + 2) } }
  end
  return { o = o, m = { [0] = carry.m0.value, carry.m1.value }, l = { [0] = carry.l0.value, carry.l1.value } }
end

-- fn_a() where cond (an i1 value), else fn_b(); the cursors' values (each a
-- {value = ...}: pipeline states, seq_bar states) as either leaves them.
function M.branch(tl, cond, cursors, fn_a, fn_b)
  local before = {}
  for i, cur in ipairs(cursors) do before[i] = cur.value end
  local function run(fn)
    return function()
      for i, cur in ipairs(cursors) do cur.value = before[i] end
      fn()
      local v = {}
      for i, cur in ipairs(cursors) do v[i] = cur.value end
      return table.unpack(v, 1, #cursors)
    end
  end
  local r = table.pack(tl.if_(cond, run(fn_a), run(fn_b)))
  for i, cur in ipairs(cursors) do cur.value = r[i] end
end

-- A warpgroup with no rows in a tile (c.split_tail's unit tiles): its
-- waits and releases of Q, K and V in the order of M.consumer_tile's (the
-- producer's fills interleave K and V), nothing computed.
function M.idle_tile(tl, c, sm, ctx)
  local n = M.kv_blocks(tl, c, sm, {})
  local function walk(pipe, st)
    pipe:consumer_wait(st)
    release(tl, pipe, st)
    st:advance()
  end
  sm.pq:consumer_wait(ctx.stq)
  walk(sm.pk, ctx.stk)
  tl.cutlass.for_range(tl.const(1, tl.i32), n, { ctx.stk, ctx.stv }, function()
    walk(sm.pk, ctx.stk)
    walk(sm.pv, ctx.stv)
  end)
  walk(sm.pv, ctx.stv)
  release(tl, sm.pq, ctx.stq)
  ctx.stq:advance()
end

-- The epilogue of a warpgroup's rows: O / l (the quad's sum of l) to the
-- input type, stmatrix into the staging buffer, TMA store (G.store_fragment);
-- the log-sum-exp of each row by the quad's first lane, where the row exists.
function M.epilogue(tl, c, sm, ctx, tile, res, omap, lse)
  local f, t, wg = ctx.f, ctx.t, ctx.wg
  local cl = sm.cl
  local zero, ninf = tl.const(0.0, tl.f32), tl.const(-math.huge, tl.f32)
  local inv, lse_r = {}, {}
  for r = 0, 1 do
    local l = res.l[r]
    if not res.summed then -- (the thread's part: its quad's sum)
      l = l + tl.shfl_xor(l, 1)
      l = l + tl.shfl_xor(l, 2)
    end
    local ok = l:gt(zero)
    inv[r] = tl.select(ok, tl.rcp_approx(tl.select(ok, l, tl.const(1.0, tl.f32))), zero)
    local ms = tl.select(res.m[r]:eq(ninf), zero, res.m[r] * cl)
    lse_r[r] = tl.select(ok, (ms + tl.lg2(tl.select(ok, l, tl.const(1.0, tl.f32)))) * tl.const(LN2, tl.f32),
                         tl.const(math.huge, tl.f32))
  end
  local vals = {}
  for i = 0, c.d // 2 - 1 do
    local dr = f.offset(i)
    vals[i] = tl.extract(res.o, i) * inv[dr // 8]
  end
  local row0 = M.row0(c, tile) + wg * 64
  G.store_fragment(tl, { bn = c.d, out = c.dtype == "f16" and tl.f16 or tl.bf16, staging = sm.o, map = omap,
                         warpgroup = wg, barrier = 1 + wg, thread = t,
                         coords = function(ch) return { tile.b, tile.h, row0, tl.const(ch * 64, tl.i32) } end }, vals)
  if c.o_in_q then -- Q's rows held the output: free them once the store read them
    tl.if_(t:eq(0), function() tl.bulk_wait(0, { read = true }) end)
    tl.named_barrier_sync(1 + wg, 128)
    release(tl, sm.pq, ctx.stq)
    ctx.stq:advance()
  end
  local base = (tile.b * sm.h + tile.h):cast(tl.i64) * sm.sq:cast(tl.i64)
  tl.if_((t % 4):eq(0), function()
    for r = 0, 1 do
      local row = row0 + f.row + 8 * r
      tl.if_(row:lt(sm.sq), function() tl.store(lse + (base + row:cast(tl.i64)), lse_r[r]) end)
    end
  end)
end

-- }===

return M
