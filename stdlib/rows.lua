-- stdlib/rows.lua: memory-bound tile programs over the rows of a matrix
-- (docs/tileprog.md, "Programs without a dot"), written with the public tile
-- surface only. Each builder returns a tile kernel (k:compile, k:run); a
-- program is one tile of `rows` x `n` (n: the longest row it takes, a
-- multiple of 8; the real length comes with the launch and may be shorter:
-- loads past it read their padding, stores past it are dropped).
--
--   tl.rows.map{fn, inputs = 1, n, rows = 1, elem = tl.bf16}      Y = fn(X1 [, X2 ...]) element by element
--                                                                  (fn: a tileas.math name or fn(x1, ...) -> tile, in f32)
--   tl.rows.reduce{kind, n, elem}            per row: Out[M] (f32) = sum | max | min; kind = "mean_var":
--                                            Mean[M], Var[M] (population) from one read of the row
--   tl.rows.col_reduce{kind, n, rows, elem}  per column: Out[N] (f32) = sum | max | min over all rows
--   tl.rows.softmax{n, elem, rows}           Y = softmax of each row
--   tl.rows.rmsnorm{n, elem, rows}           Y = X / rms(X) * W, Rstd[M] = 1 / rms(X)   (rms = sqrt(mean(x^2) + eps))
--   tl.rows.rmsnorm_bwd{n, elem, rows}       DX, and DWp[P, N] (f32): each program's part of DW = sum over rows of DY * X * rstd
--   tl.rows.layernorm{n, elem, rows, one_pass}  Y = (X - mean) * rstd * W + B, Mean[M], Rstd[M]
--                                            (one_pass: sums of d = x - x0 and d^2 side by side, x0 the
--                                            row's first element, var = E[d^2] - E[d]^2; else the
--                                            centred row's squares after the mean; both masked past N)
--   tl.rows.layernorm_bwd{n, elem, rows}     DX, DWp[P, N], DBp[P, N] (f32 parts of DW and DB)
--   tl.rows.transpose{n, elem}               Y[N, M] = X[M, N]^T, a tile of n x n a program (16-bit, n 64 or
--                                            128: the pairs form, other multiples of 64: by TMA; k.fallback():
--                                            its variant through the registers, launched at rows of no
--                                            16-byte multiple)
--
-- Every builder takes warps (the block's; default by n) and min_ctas (blocks an
-- SM must hold: ptxas bounds the registers to fit them).
-- Parameters by name: X (X1, X2 ...), Y, W, B, DY, DX, Out, Mean, Var, Rstd,
-- DWp, DBp (tensors); N (the real row length, i32), eps (f32). The grid of
-- programs: {ceil(M / rows), ceil(N / n)} for map ({ceil(M / n), ceil(N / n)} for
-- transpose), {ceil(N / n)} for
-- col_reduce, {P} (P programs of `rows` rows each) for the backward passes,
-- {M} for the others ({ceil(M / rows)} for softmax, rmsnorm and layernorm
-- given rows: that many rows a program, the next one loaded while this one is
-- computed). The sums of DWp / DBp over P are col_reduce's.
local tl = require "tilua" -- the library being built (init.lua registers it before its rooms)

local M = {}

do -- tl.rows (an indented block)
  local raise = tl.raise
  tl.rows = rawget(tl, "rows") or {}

  local function check_n(o, what)
    if type(o) ~= "table" then raise(("rows.%s: expected an options table"):format(what)) end
    local n = o.n
    if math.type(n) ~= "integer" or n < 8 or n % 8 ~= 0 then
      raise(("rows.%s: n (the row tile) must be a positive multiple of 8, got %s"):format(what, tostring(n)))
    end
    return n
  end

  -- The block's warps for rows of n elements: 8 elements a thread an access,
  -- at most 32 elements a thread (registers) and at most 16 warps.
  local function warps_for(n, o)
    if o.warps then return o.warps end
    local w = 4
    while w < 16 and n // (32 * w) > 32 do w = w * 2 end
    return w
  end

  -- o.min_ctas: blocks an SM must hold (tl.kernel's; ptxas bounds the registers)
  local function kernel(name, o, params)
    tl.new_module()
    return tl.tile_kernel(name, { params = params, num_warps = warps_for(o.n, o), min_ctas = o.min_ctas })
  end

  local function f32(x) return x:cast(tl.f32) end
  local function row_of(p, t, row, n) return f32(tl.load(t, { row, 0 }, { 1, n })) end

  -- The rows of this program: o.rows (default 1) consecutive rows of X from
  -- rows * program_id("x"), each given to body(row, x: the row [1, n] in f32).
  -- More than one: a loop that loads the next row before computing this one
  -- (carried in X's type: 16-bit elements two to a register), so its load is
  -- in flight during this row's reductions; what body loads before the loop
  -- (W, B) is loaded once a program. Rows past M read padding and their stores
  -- are dropped; the last row's "next" reads it again (a cache hit).
  local function each_row(p, o, n, pad, body)
    local rows = o.rows or 1
    if math.type(rows) ~= "integer" or rows < 1 then raise("rows: rows (rows a program) must be a positive integer") end
    local opts = pad and { padding = pad } or nil
    if rows == 1 then
      local row = tl.program_id("x")
      body(row, f32(tl.load(p.X, { row, 0 }, { 1, n }, opts)))
      return
    end
    local first = tl.program_id("x") * rows
    local last = first + (rows - 1)
    tl.for_range(first, first + rows, 1, { tl.load(p.X, { first, 0 }, { 1, n }, opts) }, function(row, x)
      local nxt = tl.load(p.X, { tl.min(row + 1, last), 0 }, { 1, n }, opts)
      body(row, f32(x))
      return nxt
    end)
  end
  local function expand_row(v) return tl.expand_dim(v, 1) end -- a value per row -> a column [1, 1]
  local function as_row(t, n) return tl.expand_dim(f32(tl.load(t, { 0 }, { n })), 0) end -- a vector [n] -> a row [1, n]

  -- {=== elementwise maps

  function tl.rows.map(o)
    local n = check_n(o, "map")
    local elem, rows, inputs = o.elem or tl.bf16, o.rows or 1, o.inputs or 1
    local fn = o.fn
    if type(fn) == "string" then
      local name = fn
      fn = tl[name]
      if type(fn) ~= "function" then raise(("rows.map: unknown function '%s'"):format(name)) end
    elseif type(fn) ~= "function" then
      raise("rows.map: fn must be a tileas.math name (\"gelu\") or a function of the input tiles")
    end
    local params = { Y = tl.tensor(elem, 2) }
    local names = {}
    for i = 1, inputs do
      names[i] = inputs == 1 and "X" or ("X" .. i)
      params[names[i]] = tl.tensor(elem, 2)
    end
    local k = kernel(o.name or "rows_map", o, params)
    k:define(function(k, p)
      local r, c = tl.program_id("x"), tl.program_id("y")
      local xs = {}
      for i = 1, inputs do xs[i] = f32(tl.load(p[names[i]], { r, c }, { rows, n })) end
      tl.store(p.Y, { r, c }, fn(table.unpack(xs)):cast(elem))
    end)
    return k
  end

  -- }===

  -- {=== reductions

  local KINDS = { sum = "add", max = "max", min = "min" }
  local PAD = { sum = 0, max = -math.huge, min = math.huge } -- what a missing element reads

  function tl.rows.reduce(o)
    local n = check_n(o, "reduce")
    local elem, kind = o.elem or tl.bf16, o.kind
    if not KINDS[kind] and kind ~= "mean_var" then raise("rows.reduce: kind is sum, max, min or mean_var") end
    local params = { X = tl.tensor(elem, 2), N = tl.i32 }
    if kind == "mean_var" then params.Mean, params.Var = tl.tensor(tl.f32, 1), tl.tensor(tl.f32, 1)
    else params.Out = tl.tensor(tl.f32, 1) end
    local k = kernel(o.name or ("rows_" .. kind), o, params)
    k:define(function(k, p)
      local row = tl.program_id("x")
      if kind ~= "mean_var" then
        local x = f32(tl.load(p.X, { row, 0 }, { 1, n }, { padding = PAD[kind] }))
        tl.store(p.Out, { row }, tl.reduce(x, 1, KINDS[kind]))
        return
      end
      -- one read of the row: its mean, then the mean of the centred squares (in registers)
      local x = row_of(p, p.X, row, n)
      local inv_n = 1.0 / p.N:cast(tl.f32)
      local mean = tl.reduce(x, 1, "add") * inv_n
      local live = x - expand_row(mean)
      -- the elements past the row are 0 - mean: their squares must not count
      local sq = tl.reduce(live * live, 1, "add") - mean * mean * (n - p.N):cast(tl.f32)
      tl.store(p.Mean, { row }, mean)
      tl.store(p.Var, { row }, sq * inv_n)
    end)
    return k
  end

  function tl.rows.col_reduce(o)
    local n = check_n(o, "col_reduce")
    local elem, kind, rows = o.elem or tl.f32, o.kind or "sum", o.rows or 32
    if not KINDS[kind] then raise("rows.col_reduce: kind is sum, max or min") end
    local params = { X = tl.tensor(elem, 2), Out = tl.tensor(tl.f32, 1), M = tl.i32 }
    local k = kernel(o.name or ("cols_" .. kind), o, params)
    k:define(function(k, p)
      local c = tl.program_id("x")
      local blocks = (p.M + (rows - 1)) // rows
      local acc = tl.full({ n }, PAD[kind] + 0.0, tl.f32)
      acc = tl.for_range(tl.const(0, tl.i32), blocks, 1, { acc }, function(b, acc)
        local x = f32(tl.load(p.X, { b, c }, { rows, n }, { padding = PAD[kind] }))
        local part = tl.reduce(x, 0, KINDS[kind])
        return kind == "sum" and acc + part or kind == "max" and tl.maximum(acc, part) or tl.minimum(acc, part)
      end)
      tl.store(p.Out, { c }, acc)
    end)
    return k
  end

  -- }===

  -- {=== softmax and normalizations

  function tl.rows.softmax(o)
    local n = check_n(o, "softmax")
    local elem = o.elem or tl.bf16
    local k = kernel(o.name or "rows_softmax", o, { X = tl.tensor(elem, 2), Y = tl.tensor(elem, 2) })
    k:define(function(k, p)
      -- elements past the row read -inf: exp(-inf) = 0 adds nothing to the sum
      each_row(p, o, n, -math.huge, function(row, x)
        local e = tl.exp(x - expand_row(tl.reduce(x, 1, "max")))
        local r = 1.0 / tl.reduce(e, 1, "add")
        tl.store(p.Y, { row, 0 }, (e * expand_row(r)):cast(elem))
      end)
    end)
    return k
  end

  function tl.rows.rmsnorm(o)
    local n = check_n(o, "rmsnorm")
    local elem = o.elem or tl.bf16
    local k = kernel(o.name or "rows_rmsnorm", o, { X = tl.tensor(elem, 2), W = tl.tensor(elem, 1), Y = tl.tensor(elem, 2),
                                                    Rstd = tl.tensor(tl.f32, 1), N = tl.i32, eps = tl.f32 })
    k:define(function(k, p)
      -- W first, in flight with the row (L2 hits, where after the reduction it
      -- would be a round trip before the store: 0.80 of a copy against 0.75)
      local w = as_row(p.W, n)
      each_row(p, o, n, nil, function(row, x)
        local rstd = tl.rsqrt(tl.reduce(x * x, 1, "add") / p.N:cast(tl.f32) + p.eps)
        tl.store(p.Y, { row, 0 }, (x * expand_row(rstd) * w):cast(elem))
        tl.store(p.Rstd, { row }, rstd)
      end)
    end)
    return k
  end

  function tl.rows.layernorm(o)
    local n = check_n(o, "layernorm")
    local elem = o.elem or tl.bf16
    -- (no min_ctas of its own: on the row ring of convert-tileas-to-cutlass,
    -- 2 CTAs an SM and W kept in registers give 0.84 of a copy against 0.79
    -- held to 3; one CTA a row, without the ring, 3 gave 0.61 against 0.51)
    local k = kernel(o.name or "rows_layernorm", o, { X = tl.tensor(elem, 2), W = tl.tensor(elem, 1), B = tl.tensor(elem, 1),
                                                      Y = tl.tensor(elem, 2), Mean = tl.tensor(tl.f32, 1),
                                                      Rstd = tl.tensor(tl.f32, 1), N = tl.i32, eps = tl.f32 })
    k:define(function(k, p)
      local once = (o.rows or 1) > 1 -- (one row a program: W and B loaded after the reductions)
      local w, b = once and as_row(p.W, n), once and as_row(p.B, n)
      each_row(p, o, n, nil, function(row, x)
        -- (1 / N once, the means as products with it: one division a row,
        -- not two; within about an ulp of s / N, exact where N is a power of
        -- two. s16norm-1 on the H200: 0.958-0.962 of a copy against
        -- 0.938-0.945 with the two divisions on the same ring)
        local inv_n = 1.0 / p.N:cast(tl.f32)
        -- v where inside the row, else 0 (past N: padding, which must not count;
        -- the mask made where it is used, not held across the reductions)
        local function inside(v) return tl.select(tl.iota({ 1, n }, 1):lt(p.N), v, tl.zeros({ 1, n }, tl.f32)) end
        local mean, var, xc
        if o.one_pass then
          -- sums of d = x - x0 and d^2 side by side (no reduction waits for
          -- the other; one barrier for both), x0 the row's first element:
          -- mean = x0 + E[d], var = E[d^2] - E[d]^2 (exact for any shift;
          -- with x0 a sample of the row E[d]^2 is of the order of var, where
          -- E[x^2] - mean^2 would cancel to nothing at |mean| >> std)
          local x0 = tl.extract(f32(tl.load(p.X, { row, 0 }, { 1, 1 })), { 0, 0 }) -- (every thread loads it)
          local d = inside(x - x0)
          -- (d^2 made before both reduces: adjacent, they are lowered together,
          -- one barrier for both; made between them it kept them apart)
          local dd = d * d
          local s1, s2 = tl.reduce(d, 1, "add"), tl.reduce(dd, 1, "add")
          local md = s1 * inv_n
          var = tl.maximum(s2 * inv_n - md * md, tl.zeros({ 1 }, tl.f32))
          mean = md + x0
          xc = x - expand_row(mean)
        else
          mean = tl.reduce(x, 1, "add") * inv_n
          -- past the row xc is -mean: those squares must not count (masked:
          -- subtracting (n - N) mean^2 cancels where |mean| >> std)
          xc = x - expand_row(mean)
          var = tl.reduce(inside(xc * xc), 1, "add") * inv_n
        end
        local rstd = tl.rsqrt(var + p.eps)
        tl.store(p.Y, { row, 0 }, (xc * expand_row(rstd) * (w or as_row(p.W, n)) + (b or as_row(p.B, n))):cast(elem))
        tl.store(p.Mean, { row }, mean)
        tl.store(p.Rstd, { row }, rstd)
      end)
    end)
    return k
  end

  -- The backward passes: program q takes rows q * rows .. q * rows + rows - 1
  -- one after another, stores each row's DX and its part of DW (and DB) in
  -- row q of DWp (DBp), summed by col_reduce.
  local function norm_bwd(o, what, layer)
    local n = check_n(o, what)
    local elem, rows = o.elem or tl.bf16, o.rows or 16
    local params = { X = tl.tensor(elem, 2), W = tl.tensor(elem, 1), DY = tl.tensor(elem, 2), DX = tl.tensor(elem, 2),
                     Rstd = tl.tensor(tl.f32, 1), DWp = tl.tensor(tl.f32, 2), M = tl.i32, N = tl.i32 }
    if layer then params.Mean, params.DBp = tl.tensor(tl.f32, 1), tl.tensor(tl.f32, 2) end
    local k = kernel(o.name or ("rows_" .. what), o, params)
    k:define(function(k, p)
      local q = tl.program_id("x")
      local w = as_row(p.W, n)
      local inv_n = 1.0 / p.N:cast(tl.f32)
      local first = q * rows
      local last = tl.min(first + rows, p.M)
      local zero = tl.zeros({ 1, n }, tl.f32)
      local dw, db = tl.for_range(first, tl.max(last, first), 1, { zero, zero }, function(row, dw, db)
        local x, dy = row_of(p, p.X, row, n), row_of(p, p.DY, row, n)
        local rstd = expand_row(tl.load(p.Rstd, { row }, { 1 }))
        if layer then x = x - expand_row(tl.load(p.Mean, { row }, { 1 })) end
        -- past the row: x and dy are 0 (a layernorm's x - mean is multiplied by dy = 0 there)
        local xhat = x * rstd
        local g = dy * w
        local c1 = expand_row(tl.reduce(g * xhat, 1, "add") * inv_n)
        local dx = g - xhat * c1
        if layer then dx = dx - expand_row(tl.reduce(g, 1, "add") * inv_n) end
        tl.store(p.DX, { row, 0 }, (dx * rstd):cast(elem))
        return dw + dy * xhat, db + dy
      end)
      tl.store(p.DWp, { q, 0 }, dw)
      if layer then tl.store(p.DBp, { q, 0 }, db) end
    end)
    return k
  end
  function tl.rows.rmsnorm_bwd(o) return norm_bwd(o, "rmsnorm_bwd", false) end
  function tl.rows.layernorm_bwd(o) return norm_bwd(o, "layernorm_bwd", true) end

  -- {=== layout changes

  -- Y[N, M] = X[M, N]^T: a program a tile of n x n, read along X's rows and
  -- written along Y's. A 16-bit tile of 64 or 128 goes in the pairs form, of
  -- another multiple of 64 by TMA both ways (convert-tileas-to-cutlass's
  -- transpose.lua), whose maps need rows of 16-byte multiples (row strides of
  -- X and Y multiples of 8 elements; the pairs form's launch asks the same);
  -- others cross the threads through shared memory. A launch of such a kernel at
  -- other rows runs the same program compiled through the registers
  -- (tl.options.tile_transpose = false; compiled at the first such launch).
  function tl.rows.transpose(o)
    local n = check_n(o, "transpose")
    local elem = o.elem or tl.bf16
    local function build()
      local k = kernel(o.name or "rows_transpose", { n = n, warps = o.warps or 4 }, { X = tl.tensor(elem, 2), Y = tl.tensor(elem, 2) })
      k:define(function(k, p)
        local r, c = tl.program_id("x"), tl.program_id("y")
        tl.store(p.Y, { c, r }, tl.transpose(tl.load(p.X, { r, c }, { n, n })))
      end)
      return k
    end
    local k, registers = build(), nil
    local launch, tr, tr_for = k.launch, nil, nil
    local align = 16 // elem:info().bytes -- (the maps' rows: 16-byte multiples)
    local tensor_arg = require("tilua.gpu.recipe").tensor_arg
    function k.launch(self, cfg) -- (k:run's too)
      if not self.ptx then self:compile() end
      if tr_for ~= self.ptx then -- (the TMA kernel's tensors, read once a compile)
        tr, tr_for = self:lowered_op():attr_or_default("tileas.launch").transpose, self.ptx
      end
      local args = type(cfg) == "table" and type(cfg.args) == "table" and cfg.args or {}
      local bad = false
      for _, t in ipairs(tr or {}) do -- (the row stride as the launch reads it: recipe.lua's tensor_arg)
        local s = args[t] ~= nil and tensor_arg(t, args[t]).strides[1]
        bad = bad or (math.type(s) == "integer" and s % align ~= 0)
      end
      if not bad then return launch(self, cfg) end
      -- (the option stays off for the launch too: --emulate lowers the kernel again at its first launch)
      local saved, module = tl.options.tile_transpose, tl.module()
      tl.options.tile_transpose = false
      local ok, err = pcall(function()
        if not registers then
          local r = build()
          r:compile()
          registers = r
        end
        registers:launch(cfg)
      end)
      tl.options.tile_transpose = saved
      tl.set_module(module)
      if not ok then error(err, 0) end
      return self
    end
    function k.fallback() return registers end -- (the variant through the registers, once launched)
    return k
  end

  -- }===
end

return M
