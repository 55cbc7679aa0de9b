-- stdlib/autotune.lua: tl.autotune, a small autotuner that measures candidate
-- configurations and caches the choice per device and key on disk.
--
--   local best, cfg, times = tl.autotune {
--     key = "gemm/bf16",                     -- what is tuned (the device is added)
--     shape = { m, n, k },                   -- optional: the choice is cached per shape class
--     candidates = { {bn = 256}, {bn = 128}, ... },
--     build = function(cfg) return object end, -- may raise: that candidate is skipped
--     measure = function(object) return ms end,
--   }
--
-- The cache is a Lua table file: $TILUA_AUTOTUNE_CACHE, else
-- $XDG_CACHE_HOME/tilua/autotune.lua, else ~/.cache/tilua/autotune.lua. A cached
-- choice is used when its candidate (compared by its serialized form) is still
-- among the candidates; TILUA_AUTOTUNE=0 ignores the cache (measures all,
-- writes nothing back).
--
-- A shape class (shape_class below) buckets each extent by powers of 4
-- (1, 2-4, 5-16, ..., 4097-16384, more): kernels that serve any shape (a
-- dynamic GEMM) pick one form for a class, measured on its first shape.
local tl = require "tilua" -- the library being built (init.lua registers it before its rooms)

local M = {}

-- "m64_n4096_k4096": each extent rounded up to a power of 4.
function M.shape_class(shape)
  local parts = {}
  for i, x in ipairs(shape) do
    local b = 1
    while b < x do b = b * 4 end
    parts[i] = ("%s%d"):format(({ "m", "n", "k" })[i] or "d", b)
  end
  return table.concat(parts, "_")
end

local function serialize(v)
  if type(v) == "table" then
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    local parts = {}
    for _, k in ipairs(keys) do parts[#parts + 1] = ("[%s] = %s"):format(serialize(k), serialize(v[k])) end
    return "{ " .. table.concat(parts, ", ") .. " }"
  end
  if type(v) == "string" then return ("%q"):format(v) end
  return tostring(v)
end
M.serialize = serialize

local function cache_path()
  local p = os.getenv "TILUA_AUTOTUNE_CACHE"
  if p and p ~= "" then return p end
  local base = os.getenv "XDG_CACHE_HOME"
  if not base or base == "" then base = (os.getenv "HOME" or "/tmp") .. "/.cache" end
  return base .. "/tilua/autotune.lua"
end

local function load_cache(path)
  local f = io.open(path, "r")
  if not f then return {} end
  local text = f:read "a"
  f:close()
  local chunk = load("return " .. text, "=autotune cache", "t", {})
  local ok, t = pcall(chunk or function() return {} end)
  return ok and type(t) == "table" and t or {}
end

local function save_cache(path, t)
  os.execute(("mkdir -p '%s'"):format(path:match "^(.*)/" or "."))
  local f = io.open(path, "w")
  if not f then return end
  f:write(serialize(t), "\n")
  f:close()
end

function tl.autotune(o)
  if type(o) ~= "table" or type(o.candidates) ~= "table" or type(o.build) ~= "function" or type(o.measure) ~= "function" then
    tl.raise("autotune: expected {key, candidates, build, measure}")
  end
  if o.shape ~= nil and type(o.shape) ~= "table" then tl.raise("autotune: shape must be a list of extents") end
  local device = tl.device.available() and tl.device.info().name or "no GPU"
  local key = device .. " | " .. tostring(o.key) .. (o.shape and (" | " .. M.shape_class(o.shape)) or "")
  local path, use_cache = cache_path(), os.getenv "TILUA_AUTOTUNE" ~= "0"
  local cache = use_cache and load_cache(path) or {}
  local hit = cache[key]
  if hit then
    for _, cfg in ipairs(o.candidates) do
      if serialize(cfg) == hit.cfg then
        local ok, obj = pcall(o.build, cfg)
        if ok then return obj, cfg, { cached = true, ms = hit.ms } end
      end
    end
  end
  local best, best_cfg, best_ms, times = nil, nil, math.huge, {}
  for i, cfg in ipairs(o.candidates) do
    local ok, obj = pcall(o.build, cfg)
    local ms = ok and o.measure(obj) or nil
    times[i] = ms or obj -- the time, or why the candidate failed
    if ms and ms < best_ms then best, best_cfg, best_ms = obj, cfg, ms end
  end
  if not best then tl.raise("autotune: no candidate could be built and measured for " .. tostring(o.key)) end
  if use_cache then
    cache[key] = { cfg = serialize(best_cfg), ms = best_ms }
    save_cache(path, cache)
  end
  return best, best_cfg, times
end

return M
