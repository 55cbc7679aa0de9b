-- tile_rows.lua: the memory-bound tile programs of stdlib/rows.lua (tl.rows:
-- elementwise maps with the tile maths, row and column reductions, softmax,
-- RMSNorm and LayerNorm forward and backward; docs/tileprog.md, "Programs
-- without a dot") checked against CPU references on fresh random inputs of
-- ragged sizes (rows shorter than the program's tile, a row count that is
-- no multiple of anything), on the GPU or on the CPU emulator (the lowered
-- kernel: convert-tileas-to-cutlass's code for every thread).
--
--   tilua examples/tile_rows.lua [--only=NAME] [--emulate] [--emit=ir|ptx] [--stage=NAME]
--
-- On a GPU at the sizes below (TILUA_SMALL=1: the small ones); without one it
-- stops after ptxas ("SKIP: no GPU"); --emulate runs them on the CPU emulator
-- at the small sizes (spec/tile_rows_spec.lua does so).
--   loadfile("examples/tile_rows.lua")("--library") -> the example, with
--   .cases (name -> {build, inputs, outputs, grid, reference, tol}), .run_case(name, o)
local tl = require "tilua"
local check = require "tilua.gpu.check"
local values = require "tilua.emulate.values"
local ref = require("tilua.emulate.mathref").fn

local EPS = 1e-5

-- {=== host tensors: {elem = "bf16" | "f32" | "u8", shape = {...}, v = {values, 1-based, row-major}
-- [, bytes = the values' bytes]}

local function count(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  return n
end

-- Bytes to and from values many elements at a time (a GPU case moves
-- millions): string.pack / unpack of a chunk a call, bf16 decoded once a code.
local CODE = { f32 = "f", u8 = "B", bf16 = "I2" }
local CHUNK = 200
local formats = {}
local function format(code, k) -- (k elements, little-endian)
  local key = code .. k
  formats[key] = formats[key] or "<" .. code:rep(k)
  return formats[key]
end
local function pack_all(code, v, n)
  local parts = {}
  for i = 1, n, CHUNK do
    local j = math.min(i + CHUNK - 1, n)
    parts[#parts + 1] = string.pack(format(code, j - i + 1), table.unpack(v, i, j))
  end
  return table.concat(parts)
end
local function unpack_all(code, s, n)
  local out, size = {}, string.packsize(code)
  for i = 1, n, CHUNK do
    local k = math.min(CHUNK, n - i + 1)
    table.move({ string.unpack(format(code, k), s, (i - 1) * size + 1) }, 1, k, i, out)
  end
  return out
end
-- the bf16 codes of v[1..n]: values.float16.enc's rounding (to f32, then to nearest even)
local function bf16_codes(v, n)
  local u = unpack_all("I4", pack_all("f", v, n), n)
  for i = 1, n do
    local b = u[i]
    u[i] = ((b & 0x7f800000) == 0x7f800000 and (b & 0x7fffff) ~= 0) and 0x7fc0
      or ((b + 0x7fff + ((b >> 16) & 1)) >> 16) & 0xffff
  end
  return u
end
local bf16_value = setmetatable({}, { __index = function(t, h)
  t[h] = values.float16.dec.bf16(h)
  return t[h]
end })

-- A tensor of random values in [lo, hi) rounded to elem (what the device
-- holds), with its bytes.
local function random(elem, shape, lo, hi)
  local n, v, bytes = count(shape), {}
  for i = 1, n do v[i] = lo + (hi - lo) * math.random() end
  if elem == "u8" then
    for i = 1, n do v[i] = math.max(0, math.min(255, math.floor(v[i]))) end
    bytes = pack_all("B", v, n)
  elseif elem == "f32" then
    bytes = pack_all("f", v, n)
    v = unpack_all("f", bytes, n)
  else
    local h = bf16_codes(v, n)
    for i = 1, n do v[i] = bf16_value[h[i]] end
    bytes = pack_all("I2", h, n)
  end
  return { elem = elem, shape = shape, v = v, bytes = bytes }
end
-- an output's tensor: its bytes, zero
local function zeros(elem, shape)
  return { elem = elem, shape = shape, bytes = ("\0"):rep(count(shape) * string.packsize(CODE[elem])) }
end

local function bytes_of(t)
  if t.bytes then return t.bytes end
  local n = count(t.shape)
  if t.elem == "bf16" then return pack_all("I2", bf16_codes(t.v, n), n) end
  return pack_all(CODE[t.elem], t.v, n)
end
local function from_bytes(t, s)
  local n = count(t.shape)
  local v = unpack_all(CODE[t.elem], s, n)
  if t.elem == "bf16" then
    for i = 1, n do v[i] = bf16_value[v[i]] end
  end
  return v
end
local function ttype(elem) return ({ f32 = tl.f32, u8 = tl.u8 })[elem] or tl.bf16 end

-- }===

-- {=== the programs: how each is built, fed and checked
-- inputs(M, N) -> named host tensors and scalars; outputs(M, N) -> the names and
-- shapes of what it writes; grid(M, N); reference(inputs, M, N) -> outputs'
-- values; tol[name] = {rel, abs}: |got - want| <= rel |want| + abs

local BF16 = { 2 ^ -7, 1e-6 } -- bf16's rounding of the result (2^-9) and the f32 work before it
local F32 = { 1e-4, 1e-5 }

local function rows_bwd_P(M, rows) return (M + rows - 1) // rows end

local cases = {}
local order = {}
local function case(name, c)
  c.name = name
  cases[name] = c
  order[#order + 1] = name
end

-- the tile maths, one map each: y = fn(x) for x in [-6, 6)
for _, fn in ipairs { "exp", "tanh", "erf", "sigmoid", "silu", "gelu", "gelu_tanh", "rcp", "rsqrt" } do
  local lo, hi = -6, 6
  if fn == "rsqrt" or fn == "rcp" then lo, hi = 0.05, 8 end
  case("map_" .. fn, {
    n = 512, rows = 2, sizes = { { 37, 1000 }, { 5, 300 } }, small = { 3, 200 },
    build = function(c) return tl.rows.map { fn = fn, n = c.n, rows = c.rows, elem = tl.f32, name = "map_" .. fn } end,
    inputs = function(M, N) return { X = random("f32", { M, N }, lo, hi) } end,
    outputs = function(M, N) return { Y = { "f32", { M, N } } } end,
    grid = function(c, M, N) return { (M + c.rows - 1) // c.rows, (N + c.n - 1) // c.n } end,
    reference = function(I, M, N)
      local y = {}
      for i, x in ipairs(I.X.v) do y[i] = ref[fn](x) end
      return { Y = y }
    end,
    -- the approximations' errors (docs/tileprog.md, "Tile maths"): tanh.approx
    -- is within 2^-10.9 relative; erf's formula 1.5e-7 absolute, over ex2.approx
    tol = { Y = fn == "tanh" and { 2 ^ -10, 1e-6 } or { 2e-6, 2e-6 } },
  })
end

case("swiglu", { -- silu(a) * b, bf16 in and out
  n = 1024, rows = 1, sizes = { { 33, 3000 } }, small = { 2, 700 },
  build = function(c) return tl.rows.map { fn = function(a, b) return tl.silu(a) * b end, inputs = 2, n = c.n, name = "swiglu" } end,
  inputs = function(M, N) return { X1 = random("bf16", { M, N }, -4, 4), X2 = random("bf16", { M, N }, -2, 2) } end,
  outputs = function(M, N) return { Y = { "bf16", { M, N } } } end,
  grid = function(c, M, N) return { M, (N + c.n - 1) // c.n } end,
  reference = function(I, M, N)
    local y = {}
    for i = 1, M * N do y[i] = ref.silu(I.X1.v[i]) * I.X2.v[i] end
    return { Y = y }
  end,
  tol = { Y = { 2 ^ -7, 1e-5 } },
})

for _, kind in ipairs { "sum", "max", "min" } do
  case("row_" .. kind, {
    n = 2048, sizes = { { 77, 2000 }, { 3, 2048 } }, small = { 3, 500 },
    build = function(c) return tl.rows.reduce { kind = kind, n = c.n } end,
    inputs = function(M, N) return { X = random("bf16", { M, N }, -3, 1), N = N } end,
    outputs = function(M, N) return { Out = { "f32", { M } } } end,
    grid = function(c, M, N) return { M } end,
    reference = function(I, M, N)
      local out, x = {}, I.X.v
      for r = 0, M - 1 do
        local o = r * N
        local s = x[o + 1]
        for j = o + 2, o + N do
          s = kind == "sum" and s + x[j] or kind == "max" and math.max(s, x[j]) or math.min(s, x[j])
        end
        out[r + 1] = s
      end
      return { Out = out }
    end,
    tol = { Out = { 1e-5, 1e-4 } },
  })
end

case("row_mean_var", {
  n = 4096, sizes = { { 45, 4000 } }, small = { 3, 300 },
  build = function(c) return tl.rows.reduce { kind = "mean_var", n = c.n } end,
  inputs = function(M, N) return { X = random("bf16", { M, N }, 1, 3), N = N } end,
  outputs = function(M, N) return { Mean = { "f32", { M } }, Var = { "f32", { M } } } end,
  grid = function(c, M, N) return { M } end,
  reference = function(I, M, N)
    local mean, var, x = {}, {}, I.X.v
    for r = 0, M - 1 do
      local o, s, q = r * N, 0, 0
      for j = o + 1, o + N do s = s + x[j] end
      local m = s / N
      for j = o + 1, o + N do q = q + (x[j] - m) ^ 2 end
      mean[r + 1], var[r + 1] = m, q / N
    end
    return { Mean = mean, Var = var }
  end,
  tol = { Mean = { 1e-5, 1e-6 }, Var = { 1e-3, 1e-5 } },
})

case("col_sum", {
  n = 256, rows = 32, sizes = { { 1000, 700 } }, small = { 70, 300 },
  build = function(c) return tl.rows.col_reduce { kind = "sum", n = c.n, rows = c.rows } end,
  inputs = function(M, N) return { X = random("f32", { M, N }, -1, 1), M = M } end,
  outputs = function(M, N) return { Out = { "f32", { N } } } end,
  grid = function(c, M, N) return { (N + c.n - 1) // c.n } end,
  reference = function(I, M, N)
    local out = {}
    for j = 0, N - 1 do
      local s = 0
      for r = 0, M - 1 do s = s + I.X.v[r * N + j + 1] end
      out[j + 1] = s
    end
    return { Out = out }
  end,
  tol = { Out = { 1e-5, 1e-4 } },
})

-- Y = X a row a program (no arithmetic): the row loop's bound (a program that
-- loads and stores its row with nothing shared between programs: the cp.async
-- ring needs no barrier for it)
case("row_copy", {
  n = 2048, sizes = { { 2300, 2000 }, { 5, 2048 } }, small = { 9, 500 },
  build = function(c)
    tl.new_module() -- (a module of its own, as tl.rows' kernels)
    local k = tl.tile_kernel("row_copy", { params = { X = tl.tensor(tl.bf16, 2), Y = tl.tensor(tl.bf16, 2) } })
    k:define(function(_, p)
      local r = tl.program_id("x")
      tl.store(p.Y, { r, 0 }, tl.load(p.X, { r, 0 }, { 1, c.n }))
    end)
    return k
  end,
  inputs = function(M, N) return { X = random("bf16", { M, N }, -4, 4) } end,
  outputs = function(M, N) return { Y = { "bf16", { M, N } } } end,
  grid = function(c, M, N) return { M } end,
  reference = function(I, M, N) return { Y = I.X.v } end, -- (X itself: no copy, no unpack of millions)
  tol = { Y = { 0, 0 } }, -- moved, not computed: the same bits
})

case("softmax", {
  n = 8192, sizes = { { 61, 8000 }, { 4, 100 } }, small = { 3, 300 },
  build = function(c) return tl.rows.softmax { n = c.n } end,
  inputs = function(M, N) return { X = random("bf16", { M, N }, -8, 8) } end,
  outputs = function(M, N) return { Y = { "bf16", { M, N } } } end,
  grid = function(c, M, N) return { M } end,
  reference = function(I, M, N)
    local y, x = {}, I.X.v
    for r = 0, M - 1 do
      local o, mx, s = r * N, -math.huge, 0
      for j = o + 1, o + N do mx = math.max(mx, x[j]) end
      for j = o + 1, o + N do
        y[j] = math.exp(x[j] - mx)
        s = s + y[j]
      end
      for j = o + 1, o + N do y[j] = y[j] / s end
    end
    return { Y = y }
  end,
  tol = { Y = BF16 },
})

-- mean (0 without `centre`) and rstd of the row x[o + 1 .. o + N]
local function norm_stats(x, o, N, centre)
  local m = 0
  if centre then
    for j = o + 1, o + N do m = m + x[j] end
    m = m / N
  end
  local q = 0
  for j = o + 1, o + N do q = q + (x[j] - m) ^ 2 end
  return m, 1 / math.sqrt(q / N + EPS)
end

case("rmsnorm", {
  n = 8192, sizes = { { 57, 8190 }, { 5, 1000 } }, small = { 3, 300 },
  build = function(c) return tl.rows.rmsnorm { n = c.n } end,
  inputs = function(M, N) return { X = random("bf16", { M, N }, -2, 2), W = random("bf16", { N }, 0.5, 1.5), N = N, eps = EPS } end,
  outputs = function(M, N) return { Y = { "bf16", { M, N } }, Rstd = { "f32", { M } } } end,
  grid = function(c, M, N) return { M } end,
  reference = function(I, M, N)
    local y, rs, x, w = {}, {}, I.X.v, I.W.v
    for r = 0, M - 1 do
      local o = r * N
      local _, s = norm_stats(x, o, N, false)
      rs[r + 1] = s
      for j = 1, N do y[o + j] = x[o + j] * s * w[j] end
    end
    return { Y = y, Rstd = rs }
  end,
  tol = { Y = BF16, Rstd = F32 },
})

case("layernorm", {
  n = 8192, sizes = { { 55, 8000 }, { 6, 777 } }, small = { 3, 300 },
  build = function(c) return tl.rows.layernorm { n = c.n } end,
  inputs = function(M, N)
    return { X = random("bf16", { M, N }, -1, 3), W = random("bf16", { N }, 0.5, 1.5), B = random("bf16", { N }, -1, 1),
             N = N, eps = EPS }
  end,
  outputs = function(M, N) return { Y = { "bf16", { M, N } }, Mean = { "f32", { M } }, Rstd = { "f32", { M } } } end,
  grid = function(c, M, N) return { M } end,
  reference = function(I, M, N)
    local y, ms, rs, x, w, b = {}, {}, {}, I.X.v, I.W.v, I.B.v
    for r = 0, M - 1 do
      local o = r * N
      local m, s = norm_stats(x, o, N, true)
      ms[r + 1], rs[r + 1] = m, s
      for j = 1, N do y[o + j] = (x[o + j] - m) * s * w[j] + b[j] end
    end
    return { Y = y, Mean = ms, Rstd = rs }
  end,
  tol = { Y = { 2 ^ -7, 2 ^ -8 }, Mean = F32, Rstd = F32 },
})

-- LayerNorm with its variance in one pass (tl.rows.layernorm's one_pass:
-- E[x^2] - mean^2, the two sums reduced side by side)
do
  local c = {}
  for key, v in pairs(cases.layernorm) do c[key] = v end
  c.build = function(cc) return tl.rows.layernorm { n = cc.n, one_pass = true, name = "layernorm_1pass" } end
  c.sizes, c.small = { { 54, 8000 }, { 7, 777 } }, { 3, 300 }
  case("layernorm_1pass", c)
end

-- LayerNorm of rows far from 0 (f32, 1000 + [-1, 1): |mean| ~ 1700 std), both
-- forms: where E[x^2] - mean^2 would cancel (1e6 - 1e6 in f32: the variance
-- lost) and where rows shorter than the tile would make their padding count
-- (n - N) * mean^2. The rows' outputs against the exact statistics.
for _, one in ipairs { false, true } do
  local c, name = {}, one and "layernorm_1pass_offset" or "layernorm_offset"
  for key, v in pairs(cases.layernorm) do c[key] = v end
  c.n = 2048
  c.build = function(cc) return tl.rows.layernorm { n = cc.n, elem = tl.f32, one_pass = one, name = name } end
  c.inputs = function(M, N)
    local I = cases.layernorm.inputs(M, N)
    I.X = random("f32", { M, N }, 999, 1001)
    for _, n in ipairs { "W", "B" } do I[n] = { elem = "f32", shape = I[n].shape, v = I[n].v } end -- (bf16 values: f32 ones too)
    return I
  end
  c.outputs = function(M, N) return { Y = { "f32", { M, N } }, Mean = { "f32", { M } }, Rstd = { "f32", { M } } } end
  -- (x - mean in f32: x's rounding at 1000 is 6e-5, 1e-4 of the std)
  c.tol = { Y = { 2 ^ -10, 2 ^ -10 }, Mean = F32, Rstd = { 2 ^ -10, 0 } }
  c.sizes, c.small = { { 20, 2048 }, { 6, 777 } }, { 3, 300 }
  case(name, c)
end

-- the same with three rows a program (tl.rows' `rows`: a loop that loads the
-- next row during this one's reductions; W and B once a program), at row
-- counts no multiple of 3 (the last program's rows past M: padding, dropped)
for _, name in ipairs { "softmax", "rmsnorm", "layernorm" } do
  local c = {}
  for key, v in pairs(cases[name]) do c[key] = v end
  c.build = function(cc) return tl.rows[name] { n = cc.n, rows = 3, name = name .. "_rows3" } end
  c.grid = function(_, M) return { (M + 2) // 3 } end
  c.sizes, c.small = { { 58, 8000 }, { 7, 777 } }, { 4, 300 }
  case(name .. "_rows3", c)
end

-- the backward passes: DX per row, and each program's part of DW (DB) summed on the host
for _, layer in ipairs { false, true } do
  local name = layer and "layernorm_bwd" or "rmsnorm_bwd"
  case(name, {
    n = 4096, rows = 8, sizes = { { 50, 4000 } }, small = { 9, 200 },
    build = function(c) return tl.rows[name] { n = c.n, rows = c.rows } end,
    inputs = function(M, N)
      local I = { X = random("bf16", { M, N }, -2, 2), W = random("bf16", { N }, 0.5, 1.5), DY = random("bf16", { M, N }, -1, 1),
                  M = M, N = N }
      local mean, rstd = {}, {}
      for r = 0, M - 1 do
        local m, s = norm_stats(I.X.v, r * N, N, layer)
        mean[r + 1], rstd[r + 1] = values.f32(m), values.f32(s)
      end
      I.Rstd = { elem = "f32", shape = { M }, v = rstd }
      if layer then I.Mean = { elem = "f32", shape = { M }, v = mean } end
      return I
    end,
    outputs = function(M, N, c)
      local P = rows_bwd_P(M, c.rows)
      local o = { DX = { "bf16", { M, N } }, DWp = { "f32", { P, N } } }
      if layer then o.DBp = { "f32", { P, N } } end
      return o
    end,
    grid = function(c, M, N) return { rows_bwd_P(M, c.rows) } end,
    -- DWp and DBp are compared summed over the programs (the host's col_reduce)
    sum_rows = { DWp = true, DBp = true },
    reference = function(I, M, N)
      local dx, dw, db = {}, {}, {}
      for j = 1, N do dw[j], db[j] = 0, 0 end
      local x, dy, w = I.X.v, I.DY.v, I.W.v
      for r = 0, M - 1 do
        local o = r * N
        local m, s = layer and I.Mean.v[r + 1] or 0, I.Rstd.v[r + 1]
        local c1, c2 = 0, 0
        for j = 1, N do
          local xh, g = (x[o + j] - m) * s, dy[o + j] * w[j]
          c1, c2 = c1 + g * xh, c2 + g
          dw[j], db[j] = dw[j] + dy[o + j] * xh, db[j] + dy[o + j]
        end
        c1, c2 = c1 / N, c2 / N
        for j = 1, N do
          local xh, g = (x[o + j] - m) * s, dy[o + j] * w[j]
          dx[o + j] = s * (g - xh * c1 - (layer and c2 or 0))
        end
      end
      return { DX = dx, DWp = dw, DBp = layer and db or nil }
    end,
    tol = { DX = { 2 ^ -7, 2 ^ -9 }, DWp = { 1e-4, 1e-4 }, DBp = { 1e-4, 1e-4 } },
  })
end

for _, elem in ipairs { "bf16", "f32", "u8" } do
  -- (each goes by TMA, whose maps need rows of a multiple of 16 bytes: bf16's M
  -- and N multiples of 8, ragged against the tile; f32 at rows of 1500 and
  -- 1000 elements by TMA, at odd rows through the threads' registers; bytes in
  -- tiles of 128 at rows of multiples of 16)
  local tma = elem ~= "f32"
  local u8 = elem == "u8"
  case("transpose_" .. elem, {
    n = u8 and 128 or 64,
    sizes = u8 and { { 1040, 1488 }, { 272, 144 } } or tma and { { 1000, 1496 }, { 136, 72 } } or { { 1000, 1500 }, { 129, 67 } },
    small = u8 and { 144, 208 } or tma and { 72, 104 } or { 70, 100 },
    build = function(c) return tl.rows.transpose { n = c.n, elem = ttype(elem), name = "transpose_" .. elem } end,
    inputs = function(M, N) return { X = u8 and random(elem, { M, N }, 0, 256) or random(elem, { M, N }, -4, 4) } end,
    outputs = function(M, N) return { Y = { elem, { N, M } } } end,
    grid = function(c, M, N) return { (M + c.n - 1) // c.n, (N + c.n - 1) // c.n } end,
    reference = function(I, M, N)
      local y, x, k = {}, I.X.v, 0
      for j = 1, N do -- (Y's elements in order: the table grows as an array)
        for i = 0, M - 1 do
          k = k + 1
          y[k] = x[i * N + j]
        end
      end
      return { Y = y }
    end,
    tol = { Y = { 0, 0 } }, -- moved, not computed: the same bits
  })
end

-- }===

-- {=== running a case

-- The values of the lowered kernel's parameters (its tileas.params) for the
-- emulator, from the inputs and the output buffers; -> args, index of each entry
local function emulator_args(kop, I, outs, grid)
  local args, at = {}, {}
  local tensors = {}
  for n, t in pairs(I) do if type(t) == "table" then tensors[n] = t end end
  for n, t in pairs(outs) do tensors[n] = t end
  for i, e in ipairs(kop:attr "tileas.params") do
    local kind, name, dim = e:match "^(%a+):([^:]*):?(%d*)$"
    local t = tensors[name]
    if kind == "ptr" then args[i] = bytes_of(t)
    elseif kind == "map" then args[i] = { bytes = bytes_of(t), shape = t.shape } -- (a TMA program's)
    elseif kind == "dim" then args[i] = t.shape[tonumber(dim) + 1]
    elseif kind == "stride" then
      local s = 1
      for d = tonumber(dim) + 2, #t.shape do s = s * t.shape[d] end
      args[i] = s
    elseif kind == "programs" then args[i] = grid[({ x = 1, y = 2, z = 3 })[name]] or 1
    elseif kind == "arg" then args[i] = I[name]
    elseif e == "workspace" then args[i] = string.rep("\0", 4) -- (the row loop's claims: a counter, zeroed)
    else error("emulator_args: " .. e) end
    at[e] = i
  end
  return args, at
end

local kernels = {} -- by case name: the compiled kernel

-- Check output `name` of case c: -> mismatches, the worst relative error, the first mismatch
local function compare(c, name, got, want, shape)
  local tol = c.tol[name]
  local bad, worst, first = 0, 0, nil
  for i = 1, count(shape) do
    local g, w = got[i], want[i]
    local err = math.abs(g - w)
    local lim = tol[1] * math.abs(w) + tol[2]
    if err > lim or err ~= err then -- (NaN: a mismatch)
      bad = bad + 1
      first = first or ("%s[%d] = %.7g, want %.7g"):format(name, i - 1, g, w)
    end
    local rel = err / (math.abs(w) + tol[2] / tol[1])
    if rel > worst then worst = rel end
  end
  return bad, worst, first
end

-- run_case(name, {seed, small, emulate, size = {M, N}, check}) -> ok, summary
-- (check: the protocol checker on the emulator's problem instead of a run)
-- execute(name, {seed, small, emulate, policy, ctas, size = {M, N}}) -> the raw bytes
-- of each output, the inputs, the outputs' host tensors, M, N (or nil and the
-- emulator's report). The inputs follow the seed: a GPU run and an emulated
-- one of a seed see the same.
local function execute(name, o)
  local c = assert(cases[name], name)
  math.randomseed(o.seed or 1)
  local size = o.size or (o.small and c.small) or c.sizes[1]
  local M, N = size[1], size[2]
  if not kernels[name] then
    kernels[name] = c.build(c)
    kernels[name]:compile()
  end
  local k = kernels[name]
  local I = c.inputs(M, N)
  local outs = {}
  for n, spec in pairs(c.outputs(M, N, c)) do outs[n] = zeros(spec[1], spec[2]) end
  local grid = c.grid(c, M, N)
  local bytes = {}
  if o.emulate then
    local kop = k:lowered_op()
    local args, at = emulator_args(kop, I, outs, grid)
    -- o.ctas: fewer CTAs than programs (a persistent kernel's, e.g. the row
    -- ring's: each CTA walks several programs and refills its stages)
    local ctas = grid[1] * (grid[2] or 1)
    if o.ctas then ctas = math.min(o.ctas, ctas) end
    if o.check then -- the protocol checker instead (no values)
      local r = tl.verify_protocol(kop, { grid = ctas, args = args, max_states = o.max_states, claims = o.claims })
      return nil, r.ok and ("%s: the protocol checker is clean (%d runs)"):format(name, r.runs or 1) or r.report, r.ok
    end
    local r = tl.emulate(kop, { grid = ctas, args = args, policy = o.policy })
    if not r.ok then return nil, r.report end
    for n in pairs(outs) do bytes[n] = r.read(at["ptr:" .. n] or at["map:" .. n]) end
    if at.workspace and r.read(at.workspace) ~= string.rep("\0", 4) then return nil, "the claims' counter is not back to 0" end
  else
    local D = tl.device
    local bufs, args = {}, {}
    for n, t in pairs(I) do
      if type(t) == "table" then
        bufs[n] = D.from(ttype(t.elem), bytes_of(t))
        args[n] = { bufs[n], t.shape }
      else
        args[n] = t
      end
    end
    for n, t in pairs(outs) do
      bufs[n] = D.alloc(ttype(t.elem), count(t.shape))
      bufs[n]:fill(0)
      args[n] = { bufs[n], t.shape }
    end
    k:run { grid = grid, args = args }
    for n in pairs(outs) do bytes[n] = bufs[n]:to_string() end
    for _, b in pairs(bufs) do b:free() end
  end
  return bytes, I, outs, M, N
end

local function run_case(name, o)
  local c = cases[name]
  local bytes, I, outs, M, N = execute(name, o)
  if not bytes then return outs == true, I end -- the emulator's report, or the checker's verdict
  local got = {}
  for n, t in pairs(outs) do got[n] = from_bytes(t, bytes[n]) end
  local want = c.reference(I, M, N)
  local report, ok = {}, true
  for n, t in pairs(outs) do
    local g = got[n]
    local shape = t.shape
    if c.sum_rows and c.sum_rows[n] then -- parts per program: their sum over the programs
      local P, W = t.shape[1], t.shape[2]
      local s = {}
      for j = 1, W do
        s[j] = 0
        for q = 0, P - 1 do s[j] = s[j] + g[q * W + j] end
      end
      g, shape = s, { W }
    end
    local bad, worst, first = compare(c, n, g, want[n], shape)
    if bad > 0 then ok = false end
    report[#report + 1] = ("%s %d bad, worst %.2g%s"):format(n, bad, worst, first and (" (" .. first .. ")") or "")
  end
  table.sort(report)
  return ok, ("%s %d x %d%s: %s"):format(name, M, N, o.emulate and " (emulator)" or "", table.concat(report, "; "))
end

-- }===

local example = { name = "tile_rows", cases = cases, order = order, run_case = run_case, execute = execute,
                  bytes_of = bytes_of }

function example.prepare()
  for _, name in ipairs(order) do
    local c = cases[name]
    kernels[name] = c.build(c)
    check.compile(name, kernels[name])
  end
end

function example.run(o)
  local ok, lines = true, {}
  for _, name in ipairs(order) do
    if not o.only or o.only == name then
      local sizes = o.small and { cases[name].small } or cases[name].sizes
      for _, size in ipairs(sizes) do
        local good, summary = run_case(name, { seed = o.seed, small = o.small, emulate = o.emulate, size = size })
        ok = ok and good
        lines[#lines + 1] = (good and "  ok   " or "  BAD  ") .. summary
      end
    end
  end
  return ok, "\n" .. table.concat(lines, "\n")
end

example.grids = function() return { 1 } end

if ... == "--library" then return example end

local opts = {}
for _, a in ipairs(arg or {}) do
  local key, v = a:match "^%-%-([%w_]+)=?(.*)$"
  if key then opts[key] = v == "" and true or v end
end
if opts.emulate then
  -- the CPU emulator: the lowered kernels at the small sizes
  local ok, summary = example.run { seed = check.seed(), small = true, emulate = true, only = opts.only }
  print("tile_rows:" .. summary)
  if not ok then error("tile_rows: a program disagrees with its reference", 0) end
  return
end
check.main({ name = example.name, prepare = example.prepare, grids = example.grids,
             run = function(o) o.only = opts.only return example.run(o) end })
