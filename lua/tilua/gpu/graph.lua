-- tilua.gpu.graph: CUDA graphs of launches (docs/runtime.md, "Graphs").
--
--   local g = tl.graph(fn, ...)   fn(...) runs once; its launches are captured
--                                 into a graph instead of running
--   g:launch()                    replays them (asynchronous, like k:launch; a
--                                 failure is named at this line)
--   g:update(...)                 fn(...) runs again: each launch sets the
--                                 arguments and grid of its node (the same
--                                 kernels in the same order), for the replays after
--   g.nodes                       the kernel launches captured
--   g:free()                      also the garbage collector and <close>
--
-- A replay costs the driver one launch for the whole graph. Inside fn only
-- launches may touch the device: copies, fills and synchronization go before
-- or after it (they are refused while a capture runs), and a StreamK kernel,
-- which zeroes its workspace at its first launch, is launched once before it
-- is captured.

local core = require "tilua.core"

local M = {}

local tl = require "tilua" -- the library being built (init.lua registers it before its rooms)

local Graph = {}
Graph.__index = Graph
Graph.__close = function(g) g:free() end
Graph.__tostring = function(g) return ("graph of %d kernel launches"):format(g.nodes) end

function tl.graph(fn, ...)
  if type(fn) ~= "function" then tl.raise(("tl.graph: expected a function, got %s"):format(type(fn))) end
  core.graph_begin()
  local ok, err = pcall(fn, ...)
  if not ok then
    core.graph_abort()
    error(err, 0)
  end
  local raw = core.graph_end()
  return setmetatable({ raw = raw, fn = fn, nodes = raw:nodes() }, Graph)
end

function Graph:launch()
  self.raw:launch()
  return self
end

function Graph:update(...)
  self.raw:update_begin()
  local ok, err = pcall(self.fn, ...)
  local ended, why = pcall(core.graph_update_end) -- leaves update mode whatever happened
  if not ok then error(err, 0) end
  if not ended then error(why, 0) end
  return self
end

function Graph:free() self.raw:free() end

tl.Graph = Graph

return M
