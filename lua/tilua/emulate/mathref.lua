-- tilua.emulate.mathref: the functions of the math ops in double precision,
-- the reference that the emulator computes (tile.math, tileas.math: the exact
-- function, which the caller rounds to the result's type) and that the specs
-- compare the GPU's approximations with (docs/tileprog.md, "Tile maths").
--
--   mathref.fn[name](x)   exp exp2 log log2 sqrt rsqrt abs rcp tanh erf
--                         sigmoid silu gelu gelu_tanh (and ex2 lg2 sin cos of tile.math)

local M = {}

local exp, abs, sqrt = math.exp, math.abs, math.sqrt

-- tanh: 1 - 2 / (e^{2x} + 1) loses x's digits near 0; the series there
local function tanh(x)
  local a = abs(x)
  if a < 1e-4 then return x - x * x * x / 3 end
  if a > 20 then return x > 0 and 1.0 or -1.0 end
  local t = exp(-2 * a)
  local y = (1 - t) / (1 + t)
  return x < 0 and -y or y
end

-- erf: its Taylor series below 2.5 (terms below e^{6.25}: 1e-13 of
-- cancellation at most), erfc's continued fraction above (Lentz's method)
local function erf(x)
  local a = abs(x)
  local y
  if a < 2.5 then
    local term, sum, x2 = a, a, a * a
    for n = 1, 200 do
      term = -term * x2 / n
      local add = term / (2 * n + 1)
      sum = sum + add
      if abs(add) < 1e-17 * abs(sum) then break end
    end
    y = 2 / sqrt(math.pi) * sum
  elseif a > 6 then
    y = 1.0
  else
    -- erfc(a) = e^{-a^2} / sqrt(pi) * 1 / (a + 1/2 / (a + 1 / (a + 3/2 / (a + ...))))
    local tiny = 1e-300
    local f, c, d = a, a, 0.0
    for n = 1, 300 do
      local an = n / 2
      d = a + an * d
      if d == 0 then d = tiny end
      c = a + an / c
      if c == 0 then c = tiny end
      d = 1 / d
      local delta = c * d
      f = f * delta
      if abs(delta - 1) < 1e-16 then break end
    end
    y = 1 - exp(-a * a) / sqrt(math.pi) / f
  end
  return x < 0 and -y or y
end

local function sigmoid(x)
  if x >= 0 then return 1 / (1 + exp(-x)) end
  local e = exp(x)
  return e / (1 + e)
end

M.fn = {
  exp = exp, exp2 = function(x) return 2.0 ^ x end, log = math.log, log2 = function(x) return math.log(x, 2) end,
  sqrt = sqrt, rsqrt = function(x) return 1 / sqrt(x) end, abs = abs, rcp = function(x) return 1 / x end,
  tanh = tanh, erf = erf, sigmoid = sigmoid,
  silu = function(x) return x * sigmoid(x) end,
  gelu = function(x) return 0.5 * x * (1 + erf(x / sqrt(2))) end,
  -- x (1 + tanh u) / 2 as x sigmoid(2u): the same function, without 1 + tanh u's
  -- cancellation far below 0
  gelu_tanh = function(x) return x * sigmoid(2 * sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)) end,
  -- tile.math's names of the same functions
  ex2 = function(x) return 2.0 ^ x end, lg2 = function(x) return math.log(x, 2) end, sin = math.sin, cos = math.cos,
}

return M
