-- stdlib/sched.lua: TileLang's PersistentTileScheduler (its tile_schedule) as IR
-- arithmetic. The arithmetic is the reference's own (src/sched/worker.c, the
-- same code the host and lower-tile-scheduler run), reached through
-- core.sched_stage: Lua integers are folded at build time, IR values become
-- 32-bit unsigned arith at the insertion point. The compile-time choices
-- (traversal order, clustering) and the loop structure are made here.
--
--   local s = tl.sched.persistent{ m_tiles = M, n_tiles = N, workers = W,
--                                  swizzle = 8, column_major = true, cluster = 2 }
--   s:init(worker)
--   s:loop(function(s) ... s.m_idx, s.n_idx, s.current_iter ... end)
--   local m, n = s:coord(tile_id)              -- stateless decode
--
-- Clustering reshapes the grid to ceil(M / cluster) x N first; swizzle panels
-- (the last one narrower) and the traversal order then apply; m_idx is the
-- cluster row: s:block_m(rank) = m_idx * cluster + rank. coord has no batches:
-- an id at or past the number of tiles decodes out of range, as TileLang's does.
--
-- The data-parallel and StreamK counterparts put the same surface over the
-- cutlass.tile_scheduler ops (lua/tilua/dsl/cutlass.lua), which lower-tile-scheduler
-- turns into the reference's arithmetic:
--
--   local s = tl.sched.tiles(tl.sched.streamk{ tiles = {m, n, 1, k}, workers = W, workspace = ws })
--   s:init(worker)
--   s:loop(function(s) ... s.m_idx, s.n_idx, s.k_begin, s.k_count, s.is_final ... end)

local tl = require "tilua" -- the library being built (init.lua registers it before its rooms)

local M = {}

tl.sched = tl.sched or {}
local raise, is_value = tl.raise, tl.is_value

local Persistent = {}
Persistent.__index = Persistent

local function u32(v, what)
  if is_value(v) then
    if v:type() == tl.i32 then return v end
    if tl.is_int_type(v:type()) then return v:cast(tl.i32) end
    raise(what .. " must be an integer value")
  end
  if math.type(v) ~= "integer" or v < 0 or v >= 1 << 32 then raise(what .. " must be a non-negative integer") end
  return v
end

-- worker.c's arithmetic at the current insertion point (core.sched_stage).
local function stage(what, ...) return tl.core.sched_stage(what, tl.insertion_point(), ...) end

-- tl.sched.persistent{ m_tiles, n_tiles [, workers] [, swizzle = 1] [, column_major = true]
--                      [, cluster = 1] [, stateful = true] }
function tl.sched.persistent(opts)
  local cluster = opts.cluster or 1
  local swizzle = opts.swizzle or 1
  if math.type(cluster) ~= "integer" or cluster < 1 then raise("persistent: cluster must be a positive integer") end
  if math.type(swizzle) ~= "integer" or swizzle < 1 then raise("persistent: swizzle must be a positive integer") end
  local m_tiles = u32(opts.m_tiles or raise("persistent: m_tiles is required"), "m_tiles")
  local n_tiles = u32(opts.n_tiles or raise("persistent: n_tiles is required"), "n_tiles")
  local workers = opts.workers
  if workers == nil then
    local sms = tl.device and tl.device.available and tl.device.available() and tl.device.sm_count() or 132
    workers = sms // cluster
  end
  workers = u32(workers, "workers")
  local column_major = opts.column_major ~= false
  local s = setmetatable({ cluster = cluster, column_major = column_major,
                           stateful = opts.stateful ~= false, workers = workers }, Persistent)
  -- The shape of the decode (sched_tl_make's arithmetic): one cluster row of
  -- `cluster` tiles. The swizzle is not clamped (TileLang's coord takes it as
  -- given), so fast * swizzle must fit int32.
  s.raster = stage("raster", m_tiles, n_tiles, 1, cluster, 1, swizzle, column_major)
  s.swizzle, s.total = swizzle, s.raster.total
  if not is_value(s.raster.fast) and s.raster.fast * swizzle > 0x7fffffff then
    raise("persistent: swizzle too large: the fast extent times the swizzle overflows int32")
  end
  return s
end

-- The stateless decode: tile_id -> m_idx (cluster row), n_idx. TileLang's
-- coord (sched_tl_coord): one batch, no wrap, so an id at or past the number
-- of tiles decodes to an out-of-range coordinate.
function Persistent:coord(tile_id)
  local m, n = stage("tl_coord", self.raster, self.swizzle, u32(tile_id, "tile_id"))
  return m, n
end

-- bx = m_idx * cluster + rank
function Persistent:block_m(rank, m_idx)
  return stage("block_m", u32(m_idx or self.m_idx, "m_idx"), self.cluster, u32(rank, "rank"))
end

local function need_state(s, what)
  if not s.stateful then raise(("persistent: %s needs a stateful scheduler (stateful = true)"):format(what)) end
end

local function decode(s)
  s.m_idx, s.n_idx = s:coord(s.linear_idx)
end

-- State: linear_idx = worker, current_iter = 0.
function Persistent:init(worker)
  need_state(self, "init")
  local w = u32(worker, "worker")
  self.linear_idx = is_value(w) and w or tl.const(w, tl.i32)
  self.current_iter = tl.const(0, tl.i32)
  decode(self)
end

function Persistent:valid()
  need_state(self, "valid")
  if not self.linear_idx then raise("persistent: call init(worker) first") end
  return stage("valid", self.raster, self.linear_idx)
end

function Persistent:next_tile()
  need_state(self, "next_tile")
  self.linear_idx, self.current_iter = stage("tl_next", self.workers, self.linear_idx, self.current_iter)
  decode(self)
end

-- while valid(): fn(self); next_tile() -- as an scf.while carrying (linear_idx, current_iter).
function Persistent:loop(fn)
  need_state(self, "loop")
  if not self.linear_idx then raise("persistent: call init(worker) first") end
  local lin, it = tl.while_({ self.linear_idx, self.current_iter }, function(l, i)
    return stage("valid", self.raster, l), l, i
  end, function(l, i)
    self.linear_idx, self.current_iter = l, i
    decode(self)
    fn(self)
    self:next_tile()
    return self.linear_idx, self.current_iter
  end)
  self.linear_idx, self.current_iter = lin, it
  decode(self)
end

-- {===================================================================
-- The same surface over a cutlass scheduler (data-parallel, static
-- persistent, StreamK): tl.sched.tiles(sched)
-- ===================================================================

local Tiles = {}
Tiles.__index = Tiles

-- The fields of the current work tile, read through the accessor ops.
local function refresh(s)
  local w = s.work
  s.m_idx, s.n_idx, s.l_idx = w:m(), w:n(), w:l()
  s.k_begin, s.k_count = w:k_tile_start(), w:k_tile_count()
  s.is_final = w:is_final_split()
end

function tl.sched.tiles(sched)
  if type(sched) ~= "table" or not sched.work then raise("sched.tiles: expected a scheduler from tl.sched.data_parallel, static_persistent or streamk") end
  return setmetatable({ sched = sched }, Tiles)
end

-- init(worker): the worker's first unit of work; current_iter = 0.
function Tiles:init(worker)
  self.work = self.sched:work(worker)
  self.current_iter = tl.const(0, tl.i32)
  refresh(self)
end

function Tiles:valid()
  if not self.work then raise("sched.tiles: call init(worker) first") end
  return self.work:is_valid()
end

-- next_tile(): advance_to_next_work (inside a cutlass.async.exec region, as its verifier requires).
function Tiles:next_tile()
  if not self.work then raise("sched.tiles: call init(worker) first") end
  self.work:advance()
  self.current_iter = self.current_iter + 1
  refresh(self)
end

-- coord(id): the tile of a data-parallel linear id (data-parallel schedulers only).
function Tiles:coord(tile_id)
  if self.sched.kind ~= "data_parallel" then raise("sched.tiles: coord(tile_id) needs a data-parallel scheduler") end
  local w = self.sched:work(tile_id)
  return w:m(), w:n()
end

-- loop(fn): while valid(): fn(self); next_tile() -- an scf.while carrying the work tile and current_iter.
function Tiles:loop(fn)
  if not self.work then raise("sched.tiles: call init(worker) first") end
  local w, it = tl.while_({ self.work.value, self.current_iter }, function(wv, i)
    self.work.value = wv
    return self.work:is_valid(), wv, i
  end, function(wv, i)
    self.work.value, self.current_iter = wv, i
    refresh(self)
    fn(self)
    self:next_tile()
    return self.work.value, self.current_iter
  end)
  self.work.value, self.current_iter = w, it
  refresh(self)
end

-- }===================================================================

return M
