-- tilua.passes.convert_tileas_to_cutlass.transpose: the transpose program of a
-- compute agent (compute.lua) -- a persistent loop whose body loads one n x n
-- tile of 8-, 16- or 32-bit elements, transposes it and stores it
-- (tl.rows.transpose) -- by TMA both ways. Through the threads' registers
-- (blocked.lua's exchange: vector loads, a swizzled buffer of the threads'
-- own pattern, vector stores) 16-bit tiles held 0.72-0.75 of a copy's
-- bandwidth.
--
--   the maps       X and Y: square boxes with the 128-byte swizzle (a box row
--                  is 128 bytes: its 16-byte chunk c at c xor (row mod 8)):
--                  64 x 64 16-bit elements, 32 x 32 of 32 bits, 128 x 128 bytes
--   shared         `stages` input tiles (the ring; an mbarrier a stage) and
--                  `outs` output tiles, each of (n / side)^2 boxes
--   before         thread 0 inits the barriers and loads the CTA's first
--                  `stages` programs (TMA, completing on the stage's barrier)
--   iteration i    every thread waits for stage s; each warp moves its units
--   (program q)    (16-bit below; 32-bit and 8-bit at move32 and move8),
--                  a proxy fence, a barrier, the store and the refill. 16-bit:
--                  8 x 8 blocks, per four a 32-bit load a matrix (lane 4r + c:
--                  the block's row r, elements 2c, 2c + 1, at the swizzled
--                  address) and one stmatrix.trans into the output box, whose
--                  rows each lane addresses (swizzled too: a block's 8 rows
--                  are 8 different chunks, so neither side has a bank
--                  conflict); a proxy fence, a barrier; thread 0 stores the
--                  output tile (TMA, one bulk group) and refills stage s with
--                  program q + stages * grid
--   the outputs    output tile b is written again `outs` iterations later:
--                  thread 0 waits (bulk_wait read, outs - 2 groups pending)
--                  before each iteration's barrier
--
-- The programs' order: x fastest (order 0, by default), y fastest (order 1),
-- the diagonal (order 2), or in bands of `group` rows of tiles of X, x fastest
-- in a band: what the CTAs have in flight at once is then a block of tiles
-- (the band's rows by grid x stages / group columns) rather than a column of
-- them. early = 1 issues each refill's loads before the store.
--
-- TMA reads zeros past the tensor and clips stores to it: a ragged edge needs
-- no masks. Its maps need 16-byte aligned pointers and rows (row strides of X
-- and Y multiples of 16 bytes): the lowered kernel's tileas.launch names the
-- two tensors (`transpose`), whose launch recipe checks their rows and says
-- how to opt out (tilua.gpu.recipe); tl.rows.transpose launches its variant
-- through the registers there instead. tl.options.tile_transpose = false keeps
-- the exchange through registers; a table sets {stages, outs, per_sm, order,
-- group, early, claims}.

local tl = require "tilua"
local R = require "tilua.passes.convert_tileas_to_cutlass.read"
local V = require "tilua.passes.convert_tileas_to_cutlass.values"
local X = require "tilua.passes.convert_tileas_to_cutlass.ops"
local B = require "tilua.passes.convert_tileas_to_cutlass.blocked"

local T = {}

-- A box is square, its rows the 128-byte swizzle's: 128 / (element bytes) a
-- side (16-bit: 64 x 64, 8 KiB; 32-bit: 32 x 32, 4 KiB), 32 words a row.
local function box_of(elem_bytes) return 128 // elem_bytes end

-- The defaults: 1 CTA an SM, 2 output tiles, and stages (input tiles in
-- flight a CTA) for about 48 KiB in flight, rounded up: ceil(48 KiB / the
-- tile's bytes). The H200's best of the bench's variants (docs/PERF.md,
-- 2026-11-29): 16-bit n = 64 (8 KiB) at 6 stages 0.907 of a copy (4 stages
-- 0.816, 8 0.777; 4 stages on 2 CTAs an SM, the first default, 0.780); n = 128
-- (32 KiB) at 2 stages 0.921 (3: 0.848). 32-bit n = 64 (16 KiB): 3 stages.
local IN_FLIGHT = 48 * 1024
local function default_of(tile_bytes) return { stages = math.max(1, -(-IN_FLIGHT // tile_bytes)), outs = 2, per_sm = 1 } end

-- The form by the element's bytes (the rule; tl.options.tile_transpose.form
-- or the pass's option transpose_form overrides it): 32-bit tiles cross the
-- threads' registers (blocked.lua's exchange: 0.958 / 0.960 of a copy against
-- 0.918 / 0.919 by TMA on the H200, s14tr-1), 8-bit tiles go by TMA (0.917-0.926
-- against 0.42 through the registers), 16-bit tiles in the pairs form
-- (build_pairs; s14tr-2 at 16384^2: 0.949 at tiles of 128, 0.915 at 64,
-- against 0.915 / 0.782 by TMA; s14tr-3 at 16384 x 8192: docs/PERF.md); the
-- pairs form takes tiles of 64 and 128, others keep TMA.
-- The exchange holds the whole tile in shared memory (B.MAX_SHARED, 48 KiB):
-- a larger tile (f32 at 128: 64 KiB) goes by TMA instead, where the rule
-- gives the exchange (s14tr-2: the bench's f32 128 failed to compile).
local DEFAULT_FORM = { [1] = "tma", [2] = "pairs", [4] = "registers" } -- (by the element's bytes)
local function default_form(eb, n)
  local f = DEFAULT_FORM[eb]
  if f == "registers" and n * n * eb > B.MAX_SHARED then return "tma" end
  return f
end
local FORMS = { "tma", "pairs", "registers" } -- (transpose_form = 1, 2, 3)
local MAX_SM_BYTES = 200 * 1024 -- the tiles of an SM's CTAs at most (227 KiB an SM)

local SCALAR_TILEAS = { ["tileas.num_programs"] = true, ["tileas.cancel_next_program_id"] = true }

-- The transpose program in block `after` (a persistent loop's body):
-- {load, transpose, store, n, elem} or nil.
local function match(after)
  local ld, tr, st
  for _, o in ipairs(after:ops()) do
    local n = o:name()
    if n == "tileas.tiled_load" then
      if ld then return nil end
      ld = o
    elseif n == "tileas.transpose" then
      if tr then return nil end
      tr = o
    elseif n == "tileas.tiled_store" then
      if st then return nil end
      st = o
    elseif (n:match "^tileas%." and not SCALAR_TILEAS[n]) or o:nregions() > 0 then
      return nil
    else
      for i = 1, o:nresults() do if R.tile_of(o:result(i)) then return nil end end
    end
  end
  if not (ld and tr and st) then return nil end
  if ld:noperands() ~= 3 or st:noperands() ~= 4 or st:attr "reduce" or (ld:attr "padding" or 0) ~= 0 then return nil end
  if tr:operand(1):id() ~= ld:result(1):id() or st:operand(4):id() ~= tr:result(1):id() then return nil end
  if ld:result(1):nuses() ~= 1 or tr:result(1):nuses() ~= 1 then return nil end
  local ti = R.tile_of(ld:result(1))
  local eb = ti and R.elem_bytes(ti.elem)
  if eb ~= 1 and eb ~= 2 and eb ~= 4 then return nil end -- (16-bit: stmatrix.trans; 32-bit: word moves; 8-bit: byte pairs, stmatrix.trans)
  if #ti.shape ~= 2 or ti.shape[1] ~= ti.shape[2] or ti.shape[1] % box_of(eb) ~= 0 then return nil end
  return { load = ld, transpose = tr, store = st, n = ti.shape[1], elem = ti.elem, eb = eb }
end

-- The options (tl.options.tile_transpose) or nil where it is off.
local function options()
  local o = tl.options.tile_transpose
  if o == false then return nil end
  return type(o) == "table" and o or {}
end

-- The transpose plan of a persistent loop `wop` (an scf.while) of a compute
-- agent, or nil: match's fields and stages, outs, per_sm.
function T.plan_loop(wop)
  local o = options()
  if not o or wop:name() ~= "scf.while" or wop:nregions() < 2 then return nil end
  local cond = wop:region(1):entry():ops()
  if not cond[#cond - 1] or cond[#cond - 1]:name() ~= "tileas.is_valid_program_id" then return nil end
  local m = match(wop:region(2):entry())
  if not m then return nil end
  local d = default_of(m.n * m.n * m.eb)
  m.stages, m.outs, m.per_sm, m.order = o.stages or d.stages, o.outs or d.outs, o.per_sm or d.per_sm, o.order or 0
  m.group, m.early = o.group or d.group, (o.early or d.early or 0) > 0
  m.claims = (T.forced_claims or o.claims or 0) > 0 -- (T.forced_claims: the pass's option transpose_claims while it runs)
  -- the form: TMA, the pairs form (build_pairs: 16-bit tiles of 64 or 128;
  -- TMA for others), or the exchange through registers (nil: no plan)
  local form = FORMS[T.forced_form or 0] or o.form or default_form(m.eb, m.n)
  if form == "registers" then return nil end
  m.pairs = form == "pairs" and m.eb == 2 and (m.n == 64 or m.n == 128) or nil
  if m.pairs then m.per_sm, m.claims = 1, false return m end
  if m.stages < 1 or m.outs < 2 or m.per_sm < 1 then return nil end
  if m.per_sm * (m.stages + m.outs) * m.n * m.n * m.eb > MAX_SM_BYTES then return nil end
  return m
end

-- The tensor map type of a compute agent's tiled_load or tiled_store op where
-- it is the transpose program's (plan.lua's parameters), else nil.
function T.map_type(op)
  local wop = op:parent()
  while wop and wop:name() ~= "scf.while" do wop = wop:parent() end
  local m = wop and T.plan_loop(wop)
  local mine = m and ((op:name() == "tileas.tiled_load" and op:result(1):id() == m.load:result(1):id())
    or (op:name() == "tileas.tiled_store" and op:operand(4):id() == m.store:operand(4):id()))
  if not mine or m.pairs then return nil end -- (the pairs form: pointers)
  local side = box_of(m.eb)
  return tl.tensor_map_type(m.elem, { side, side }, 128)
end

-- The lowered scalar ops of the body for program q (an i32): the load's and
-- the store's tile coordinates. (order = 1: the CTAs walk the programs y
-- fastest -- along X's rows -- instead of x fastest: q taken as (q mod ny) x
-- nx + q / ny, the same programs in another order.)
local function coords(L, env, after, P, q)
  if L.P.lowered_programs[2] then
    local nx, ny = X.programs(L, 1), X.programs(L, 2)
    if P.order == 1 then
      q = (q % ny) * nx + q // ny
    elseif P.order == 2 then -- (diagonal: x = q mod nx, y = (q / nx + x) mod ny)
      local x = q % nx
      q = ((q // nx + x) % ny) * nx + x
    elseif P.group then -- (bands of `group` x values, x fastest in a band; the last band's height h)
      local G = tl.const(P.group, tl.i32)
      local band = G * ny
      local g = q // band
      local rem, x0 = q - g * band, g * G
      local h = tl.min(G, nx - x0)
      q = (rem // h) * nx + x0 + rem % h
    end
  end
  L.vmap[after:arg(1):id()] = q
  for _, o in ipairs(after:ops()) do
    local n = o:name()
    local tile = n == "tileas.tiled_load" or n == "tileas.transpose" or n == "tileas.tiled_store"
    if not tile and n ~= "tileas.cancel_next_program_id" and n ~= "scf.yield" then V.at_loc(o, X.lower_op, L, o, env) end
  end
  local ld, st = P.load, P.store
  return { V.get(L, ld:operand(2), ld), V.get(L, ld:operand(3), ld) }, { V.get(L, st:operand(2), st), V.get(L, st:operand(3), st) }
end

-- The move of a tile from input stage s to output tile b (a function of s
-- and b, values): each warp's units, by the element's bytes.
local function movers(P, ins, outs, tile_words, BOX_WORDS, nb, lane, warp, W)
  local n = P.n
  -- the lane's parts of a unit (four 8 x 8 blocks: block row p of the input
  -- box, block columns q0 .. q0 + 3): its row r and word c of each block's
  -- fragment, and the output row j of matrix lane / 8 that it addresses
  local r, c = lane // 4, lane % 4
  local j, mq = lane % 8, lane // 8
  local units = nb * nb * (P.eb == 2 and 16 or 32) -- (8-bit: 32 units of 16 rows x 32 bytes a box)
  if units % W ~= 0 then R.fail(P.transpose, "a transpose of %d x %d on %d warps is not lowered", n, n, W) end
  local move
  -- 32-bit elements: a box is 4 x 4 blocks of 8 x 8 words; a unit is half a
  -- block, two of its 4 x 4 quarters (d = 0: the diagonal ones, 1: the
  -- others): lane bits 0-1 the word in the quarter, 2-3 its row, 4 (x) the
  -- quarter (its row half x, its word half x xor d). Each lane loads its word
  -- and stores it at the transposed place: with the swizzle, the 32 lanes
  -- meet 32 banks on both sides (x flips the chunk's bit 2 on one side and
  -- bit 0 on the other). Loads of 8 units, then their stores.
  -- A warp's units are warp + W i (W dividing 32: unit i's box is i / (32 /
  -- W)); its place in the box, i mod (32 / W), takes 32 / W values whose
  -- words in the input and output boxes each thread computes once, before the
  -- loop (in_off, out_off): a unit is then a load and a store at a constant
  -- offset from the stage's and the output tile's words.
  local in_off, out_off = {}, {}
  if P.eb == 4 then
    if 32 % W ~= 0 then R.fail(P.transpose, "a 32-bit transpose on %d warps is not lowered (a divisor of 32)", W) end
    local x, rq, wq = lane // 16, (lane // 4) % 4, lane % 4
    local rl = x * 4 + rq -- (the lane's row in the block; its word there: xd * 4 + wq)
    for t = 0, 32 // W - 1 do
      local k = warp + W * t
      local blk, d = k // 2, k % 2
      local bp, bq = blk // 4, blk % 4
      local xd = x ~ d
      in_off[t] = (bp * 8 + rl) * 32 + ((bq * 2 + xd) ~ rl) * 4 + wq
      out_off[t] = (bq * 8 + xd * 4 + wq) * 32 + ((bp * 2 + x) ~ (xd * 4 + wq)) * 4 + rq
    end
  end
  local function move32(s, b)
    local per, per_box = units // W, 32 // W
    local src0, dst0 = ins + s * tile_words, outs + b * tile_words
    for i0 = 0, per - 1, 8 do
      local vals, dsts = {}, {}
      for i = i0, math.min(i0 + 8, per) - 1 do
        local box, t = i // per_box, i % per_box
        local bi, bj = box // nb, box % nb
        vals[#vals + 1] = (src0 + (in_off[t] + (bi * nb + bj) * BOX_WORDS)):load()
        dsts[#dsts + 1] = dst0 + (out_off[t] + (bj * nb + bi) * BOX_WORDS)
      end
      for m, v in ipairs(vals) do dsts[m]:store(v) end
    end
  end
  local function move16(s, b)
    for i = 0, units // W - 1 do
      local u = warp + W * i
      local box, k = u // 16, u % 16
      local bi, bj = box // nb, box % nb
      local p, q0 = k // 2, (k % 2) * 4
      local src = ins + (s * tile_words + (bi * nb + bj) * BOX_WORDS) -- (box words: a row is 32, a chunk 4)
      local dst = outs + (b * tile_words + (bj * nb + bi) * BOX_WORDS)
      local regs = {}
      for m = 0, 3 do
        local q = q0 + m
        regs[m + 1] = (src + ((p * 8 + r) * 32 + (q ~ r) * 4 + c)):load()
      end
      local q = q0 + mq
      tl.stmatrix(dst + ((q * 8 + j) * 32 + (p ~ j) * 4), regs, { trans = true })
    end
  end
  -- 8-bit elements: a box is 128 x 128 bytes; a unit is 16 rows (p) x 32
  -- bytes (q), four 8 x 8 matrices of 16-bit pairs for one stmatrix.trans:
  -- matrix m's row a holds, at its column j, the bytes of input rows 2a and
  -- 2a + 1 at byte column 32q + 8m + j, so its transposed row j is output row
  -- 32q + 8m + j's 16 bytes of input rows 16p .. 16p + 15 (chunk p of it,
  -- swizzled). Lane 4a + c holds columns 2c, 2c + 1 of each matrix: word 2m +
  -- c / 2 of rows 2a and 2a + 1 (two 32-bit loads; lanes c and c xor 1 read
  -- the same words), its byte pair 2 (c mod 2) interleaved (a byte perm by
  -- shifts and masks).
  local function move8(s, b)
    local a, c = lane // 4, lane % 4
    local sh = (c % 2) * 16
    local m8, m16 = tl.const(0xFF, tl.i32), tl.const(0xFF00, tl.i32)
    for i = 0, units // W - 1 do
      local u = warp + W * i
      local box, k = u // 32, u % 32
      local bi, bj = box // nb, box % nb
      local p, q = k // 4, k % 4
      local src = ins + (s * tile_words + (bi * nb + bj) * BOX_WORDS)
      local dst = outs + (b * tile_words + (bj * nb + bi) * BOX_WORDS)
      local regs = {}
      for m = 0, 3 do
        local w = {}
        for h = 0, 1 do
          local row = 2 * a + h -- (in the unit; its swizzle: row mod 8)
          w[h + 1] = (src + ((p * 16 + row) * 32 + ((q * 2 + m // 2) ~ (row % 8)) * 4 + 2 * (m % 2) + c // 2)):load() >> sh
        end
        regs[m + 1] = (w[1] & m8) | ((w[2] & m8) << 8) | ((w[1] & m16) << 8) | ((w[2] & m16) << 16)
      end
      tl.stmatrix(dst + ((q * 32 + mq * 8 + j) * 32 + (p ~ j) * 4), regs, { trans = true })
    end
  end
  move = ({ [1] = move8, [2] = move16, [4] = move32 })[P.eb]

  return move
end

-- The pairs form of a 16-bit transpose: a CTA a program (the launch's linear
-- grid, as the exchange through registers), no TMA. Pair-row i of the tile
-- (rows 2i and 2i + 1) at column c is one 32-bit word, (X[2i][c], X[2i +
-- 1][c]) -- Y's row c at columns 2i, 2i + 1 -- so the tile moves as an n/2 x
-- n tile of words: each thread loads 16 bytes of rows 2i and 2i + 1 (8 lanes
-- a 128-byte row; every unit's loads issued before any is used), makes their
-- 8 pair words by masks and shifts, and stores
-- each at row c, word i of a shared n x n/2 tile of words whose 16-byte chunk
-- g of row c lies at g xor ((c / 8) mod 8) (the 32 lanes of a store meet 32
-- banks); a barrier; each thread loads 16 bytes of a row of that tile (8 lanes
-- a row: no conflict) and stores them to Y's row (8 lanes 128 bytes). Tiles
-- inside both tensors at 16-byte aligned pointers take those vector accesses,
-- the others element by element (16-bit loads, zeros past X; stores masked).
local function build_pairs(L, env, wop, P)
  L.program_loop, L.persistent, L.per_sm = wop, nil, nil -- (L.linear: compute.lua's launch of a CTA a program)
  local after = wop:region(2):entry()
  local n, elem = P.n, P.elem
  local lc, sc = coords(L, env, after, P, tl.block_id("x"))
  local xe, ye = L.P.by_arg[P.load:operand(1):id()], L.P.by_arg[P.store:operand(1):id()]
  local xp, yp = L.args[xe.lowered_ptr], L.args[ye.lowered_ptr]
  local xs, ys = L.args[xe.lowered_strides[1]], L.args[ye.lowered_strides[1]]
  local xm, xn = L.args[xe.lowered_dims[1]], L.args[xe.lowered_dims[2]]
  local ym, yn = L.args[ye.lowered_dims[1]], L.args[ye.lowered_dims[2]]
  local r0, c0, yr0, yc0 = lc[1] * n, lc[2] * n, sc[1] * n, sc[2] * n
  local half = n // 2 -- (words a row of the shared tile)
  local buf = L.k:shared(tl.i32, n * half, { align = 16 })
  local lane, warp, W = L.lane, L.warp, L.warps
  local rr, cc = lane // 8, lane % 8
  local lo, hi = tl.const(0xFFFF, tl.i32), tl.const(-65536, tl.i32) -- (0xFFFF0000)
  local zero = tl.const(0, elem)
  local full_in = (r0 + n):le(xm) & (c0 + n):le(xn) & B.aligned(L, xe, 8)
  local full_out = (yr0 + n):le(ym) & (yc0 + n):le(yn) & B.aligned(L, ye, 8)
  local function words_of(v) -- a vector of 8 16-bit elements as 4 words
    v = v:bitcast(tl.vector(tl.i32, 4))
    return tl.extract(v, 0), tl.extract(v, 1), tl.extract(v, 2), tl.extract(v, 3)
  end
  local loads, stores = n * n // 512, n * n // 256 -- (warp-wide units of each phase)
  if loads % W ~= 0 or stores % W ~= 0 then R.fail(P.transpose, "a transpose of %d x %d on %d warps is not lowered", n, n, W) end
  -- (every unit's loads first, then the pairs and the shared stores: the
  -- loads of all the thread's units in flight at once)
  local got = {}
  for t = 0, loads // W - 1 do
    local u = warp + W * t
    local i, J = (u % (n // 8)) * 4 + rr, (u // (n // 8)) * 8 + cc -- (pair-row i, 16-byte chunk J of the rows)
    local row, col = r0 + i * 2, c0 + J * 8
    local function at(dr) return xp + ((row + dr):cast(tl.i64) * xs + col:cast(tl.i64)) end
    got[t + 1] = { i = i, J = J, w = table.pack(tl.if_(full_in, function()
      local a0, a1, a2, a3 = words_of(at(0):load { vector = 8 })
      local b0, b1, b2, b3 = words_of(at(1):load { vector = 8 })
      return a0, a1, a2, a3, b0, b1, b2, b3
    end, function()
      local out = {}
      for dr = 0, 1 do
        local ok = (row + dr):lt(xm)
        for m = 0, 3 do
          local e = {}
          for h = 0, 1 do
            local inb = ok & (col + (2 * m + h)):lt(xn)
            e[h + 1] = tl.if_(inb, function() return (at(dr) + (2 * m + h)):load() end, function() return zero end)
          end
          out[#out + 1] = tl.vector_of(elem, e):bitcast(tl.i32)
        end
      end
      return table.unpack(out)
    end)) }
  end
  for _, g in ipairs(got) do
    local i, J, w = g.i, g.J, g.w
    local base = (i // 4) ~ (J % 8) -- (the chunk of word i in rows 8J .. 8J + 7, swizzled)
    for m = 0, 3 do
      local a, b = w[m + 1], w[m + 5]
      local pair = { (a & lo) | (b << 16), (a >> 16) | (b & hi) } -- (columns 8J + 2m and 8J + 2m + 1)
      for h = 0, 1 do
        local c = J * 8 + 2 * m + h
        local dst = buf + (c * half + base * 4 + i % 4)
        dst:store(pair[h + 1])
      end
    end
  end
  tl.barrier()
  local rows = {} -- (the shared loads first, then the stores)
  for t = 0, stores // W - 1 do
    local u = warp + W * t
    local c, g = (u % (n // 4)) * 4 + rr, (u // (n // 4)) * 8 + cc -- (row c of the shared tile, its chunk g)
    rows[t + 1] = { c = c, g = g, v = (buf + (c * half + (g ~ ((c // 8) % 8)) * 4)):load { vector = 4 } }
  end
  for _, r in ipairs(rows) do
    local c, g, v = r.c, r.g, r.v
    local row, col = yr0 + c, yc0 + g * 8
    local p = yp + (row:cast(tl.i64) * ys + col:cast(tl.i64))
    tl.if_(full_out, function() p:store(v:bitcast(tl.vector(elem, 8))) end, function()
      local e8 = v:bitcast(tl.vector(elem, 8))
      local ok = row:lt(ym)
      for k = 0, 7 do
        tl.if_(ok & (col + k):lt(yn), function() (p + k):store(tl.extract(e8, k)) end)
      end
    end)
  end
end

-- env.persistent: the CTA's loop over its programs (see the top).
function T.build(L, env, wop, P)
  if P.pairs then return build_pairs(L, env, wop, P) end
  L.program_loop, L.persistent, L.linear, L.per_sm = wop, true, nil, P.per_sm
  local after = wop:region(2):entry()
  local n, S, O = P.n, P.stages, P.outs
  local BOX = box_of(P.eb)
  local BOX_WORDS = BOX * 32 -- (a box row: 32 words, a chunk 4)
  local nb = n // BOX
  local tile_words = nb * nb * BOX_WORDS
  local tile_bytes = n * n * P.eb
  local xe, ye = L.P.by_arg[P.load:operand(1):id()], L.P.by_arg[P.store:operand(1):id()]
  local xmap, ymap = L.args[xe.lowered_map], L.args[ye.lowered_map]
  local ins = L.k:shared(tl.i32, S * tile_words, { align = 1024 })
  local outs = L.k:shared(tl.i32, O * tile_words, { align = 1024 })
  local bars = L.k:shared(tl.i64, S, { align = 8 })
  local tid = L.tid
  local total = X.programs(L, 1)
  for d = 2, 3 do if L.P.lowered_programs[d] then total = total * X.programs(L, d) end end
  local first, grid = tl.block_id("x"), tl.grid_dim("x")

  -- (claims: the program of each stage, written by thread 0 as it fills the
  -- stage, read by every thread once the stage's barrier completes)
  local claims = P.claims
  local slots = claims and L.k:shared(tl.i32, S, { align = 8 })

  -- thread 0: stage s gets program q's tile (where q is a program; with
  -- claims: q into the stage's slot, and an arrive alone where q is none)
  local function fill(s, q)
    if claims then (slots + s):store(q) end
    tl.if_(q:lt(total), function()
      local lc = coords(L, env, after, P, q)
      local bar = bars + s
      tl.mbarrier_arrive_expect_tx(bar, tile_bytes)
      for bi = 0, nb - 1 do
        for bj = 0, nb - 1 do
          local dst = ins + (s * tile_words + (bi * nb + bj) * BOX_WORDS)
          tl.tma_load(dst, xmap, bar, { lc[1] * n + bi * BOX, lc[2] * n + bj * BOX })
        end
      end
    end, claims and function() tl.mbarrier_arrive(bars + s) end or nil)
  end

  tl.if_(tid:eq(0), function()
    for s = 0, S - 1 do tl.mbarrier_init(bars + s, 1) end
    tl.fence_mbarrier_init()
    tl.tensor_map_prefetch(xmap)
    tl.tensor_map_prefetch(ymap)
    for s = 0, S - 1 do fill(tl.const(s, tl.i32), first + grid * s) end
  end)
  tl.barrier()

  local move = movers(P, ins, outs, tile_words, BOX_WORDS, nb, L.lane, L.warp, L.warps)

  local zero = tl.const(0, tl.i32)
  local function store(q, b)
    local _, sc = coords(L, env, after, P, q)
    for bi = 0, nb - 1 do
      for bj = 0, nb - 1 do
        tl.tma_store(ymap, outs + (b * tile_words + (bj * nb + bi) * BOX_WORDS), { sc[1] * n + bj * BOX, sc[2] * n + bi * BOX })
      end
    end
    tl.bulk_commit()
  end
  local function next_stage(s, phase, b)
    local s1, b1 = s + 1, b + 1
    local wrap = s1:eq(S)
    return tl.select(wrap, zero, s1), tl.select(wrap, phase ~ 1, phase), tl.select(b1:eq(O), zero, b1)
  end
  if claims then
    -- the programs claimed at run time: a CTA's first S programs static
    -- (block, block + grid, ...), then per iteration thread 0 claims one (an
    -- atomic add on the workspace's counter at the iteration's start, c:
    -- program S grid + c) and fills the stage it frees with it; the loop runs
    -- while the program its stage holds (the slot) is one. Each run program
    -- makes one claim: a launch makes `total` of them and the one that
    -- returns total - 1 puts the counter back to 0.
    local counter = L.args[L.P.lowered_workspace]
    local one = tl.const(1, tl.i32)
    tl.while_({ zero, zero, zero }, function(s, phase, b)
      tl.mbarrier_wait(bars + s, phase)
      local q = (slots + s):load()
      return q:lt(total), q, s, phase, b
    end, function(q, s, phase, b)
      local c = tl.if_(tid:eq(0), function() return tl.atomic_add(counter, one) end, function() return zero end)
      move(s, b)
      tl.fence_proxy_async("shared")
      tl.if_(tid:eq(0), function() tl.bulk_wait(O - 2, { read = true }) end)
      tl.barrier()
      tl.if_(tid:eq(0), function()
        if P.early then fill(s, grid * S + c) end
        store(q, b)
        if not P.early then fill(s, grid * S + c) end
        tl.if_(c:eq(total - 1), function() tl.atomic_exch(counter, zero) end)
      end)
      return next_stage(s, phase, b)
    end)
    tl.if_(tid:eq(0), function() tl.bulk_wait(0) end)
    return
  end
  tl.for_range(first, total, grid, { zero, zero, zero }, function(q, s, phase, b)
    tl.mbarrier_wait(bars + s, phase)
    move(s, b)
    tl.fence_proxy_async("shared") -- (the writes seen by the TMA store's async proxy)
    tl.if_(tid:eq(0), function() tl.bulk_wait(O - 2, { read = true }) end) -- output tile b + 1 free
    tl.barrier()
    tl.if_(tid:eq(0), function()
      if P.early then fill(s, q + grid * S) end -- (early: the refill's loads before the store)
      store(q, b)
      if not P.early then fill(s, q + grid * S) end
    end)
    return next_stage(s, phase, b)
  end)
  tl.if_(tid:eq(0), function() tl.bulk_wait(0) end) -- (the stores have read the shared tiles)
end

return T
