-- tilua.gpu.comm: NCCL for tilua buffers and streams (tl.nccl). NCCL is
-- opened at first use (src/cuda/nccl.h: TILUA_NCCL, else libnccl.so.2), with
-- NVLink multicast off (NCCL_NVLS_ENABLE=0 unless the user set it).
--
--   local world = tl.nccl.ranks(2)        -- one process per GPU: this one is rank 0
--   world.comm:all_reduce(buf)            -- in place, sum, on the default stream
--   world:finish()                        -- waits for the other ranks' processes
--
-- or, when the host application starts the processes itself:
--   local comm = tl.nccl.init{ id = id, nranks = n, rank = r }

local core = require "tilua.core"

local tl = require "tilua" -- the library being built (init.lua registers it before its rooms)

local M = {}
local raise = tl.raise
local N = {}
tl.nccl = N

-- ncclDataType_t of tilua's element types, ncclRedOp_t of the reductions (nccl.h)
local DTYPES = { i8 = 0, i32 = 2, i64 = 4, f16 = 6, f32 = 7, f64 = 8, bf16 = 9 }
local REDOPS = { sum = 0, prod = 1, max = 2, min = 3, avg = 4 }
N.DTYPES, N.REDOPS = DTYPES, REDOPS

function N.available() return (core.nccl_available()) end
function N.error()
  local ok, why = core.nccl_available()
  return ok and "" or why
end
-- "2.28.3"
function N.version()
  local v = core.nccl_version()
  if v == 0 then return nil end
  return ("%d.%d.%d"):format(v // 10000, v // 100 % 100, v % 100)
end
local function need()
  local ok, why = core.nccl_available()
  if not ok then raise("no NCCL: " .. why) end
end

-- A unique id (128 bytes) for tl.nccl.init, and its hex form for environments and files.
function N.unique_id() need() return core.nccl_unique_id() end
function N.id_hex(id) return (id:gsub(".", function(c) return ("%02x"):format(c:byte()) end)) end
function N.id_from_hex(h)
  if type(h) ~= "string" or #h ~= 256 or h:find "[^%x]" then raise("nccl: a unique id in hex is 256 hex digits") end
  return (h:gsub("%x%x", function(x) return string.char(tonumber(x, 16)) end))
end

local Comm = {}
Comm.__index = Comm
Comm.__close = function(c) c:destroy() end
N.Comm = Comm

-- tl.nccl.init{id = unique id, nranks = n, rank = r} -> Comm, on this process's device
function N.init(o)
  if type(o) ~= "table" then raise("nccl.init: expected {id =, nranks =, rank =}") end
  need()
  if type(o.id) ~= "string" then raise("nccl.init: 'id' must be a unique id (tl.nccl.unique_id())") end
  if math.type(o.nranks) ~= "integer" or math.type(o.rank) ~= "integer" then
    raise("nccl.init: 'nranks' and 'rank' must be integers")
  end
  if not tl.device.available() then raise("no GPU: " .. core.device_error() .. " (nccl.init)") end
  local raw = core.nccl_comm(o.id, o.nranks, o.rank)
  local nranks, rank, device = raw:info()
  return setmetatable({ raw = raw, nranks = nranks, rank = rank, device = device }, Comm)
end

-- tl.nccl.init_all{ordinals} -> {Comm, ...}: a communicator per device of this
-- process (ncclCommInitAll), rank i - 1 on ordinals[i]; their calls go in tl.nccl.group
function N.init_all(devices)
  need()
  if type(devices) ~= "table" or #devices < 1 then raise("nccl.init_all: expected a list of device ordinals") end
  local comms = {}
  for i, raw in ipairs(core.nccl_comm_all(devices)) do
    local nranks, rank, device = raw:info()
    comms[i] = setmetatable({ raw = raw, nranks = nranks, rank = rank, device = device }, Comm)
  end
  return comms
end

function Comm:destroy()
  if self.raw then self.raw:destroy() end
  self.raw = nil
end

local function dtype_of(buf, what)
  if type(buf) ~= "table" or not buf.raw or not buf.type then
    raise(("nccl: %s must be a device buffer or a view of one, got %s"):format(what, type(buf)))
  end
  local d = DTYPES[tostring(buf.type)]
  if not d then raise(("nccl: %s holds %s; NCCL moves i8, i32, i64, f16, bf16, f32, f64"):format(what, tostring(buf.type))) end
  return d
end

local function redop_of(o)
  local op = o and o.op or "sum"
  local r = REDOPS[op]
  if not r then raise(("nccl: unknown reduction '%s' (sum, prod, max, min, avg)"):format(tostring(op))) end
  return r
end

-- send and recv of one type, with recv.n == send.n * scale (or send.n == recv.n * -scale)
local function pair(kind, send, recv, rel)
  local ds, dr = dtype_of(send, "the send buffer"), dtype_of(recv, "the receive buffer")
  if ds ~= dr then raise(("nccl %s: the buffers hold %s and %s"):format(kind, tostring(send.type), tostring(recv.type))) end
  local want_recv, want_send = rel(send.n, recv.n)
  if want_recv then
    raise(("nccl %s: %s"):format(kind, want_recv))
  end
  return ds, want_send
end

local function same_n(s, r)
  if r < s then return ("the receive buffer holds %d elements, the send buffer %d"):format(r, s) end
end

-- comm:all_reduce(send [, recv [, {op = "sum", stream = s}]]): recv (default: send, in place)
-- = op over the ranks' send buffers, elementwise
function Comm:all_reduce(send, recv, o)
  recv = recv or send
  local d = pair("all_reduce", send, recv, same_n)
  self.raw:call("all_reduce", send.raw, recv.raw, send.n, d, redop_of(o), 0, o and o.stream)
  return self
end

-- comm:reduce(send, recv, root [, o]): like all_reduce, only root's recv is written
function Comm:reduce(send, recv, root, o)
  recv = recv or send
  local d = pair("reduce", send, recv, same_n)
  self.raw:call("reduce", send.raw, recv.raw, send.n, d, redop_of(o), root or 0, o and o.stream)
  return self
end

-- comm:broadcast(send, recv, root [, o]): every rank's recv = root's send (send matters on root only)
function Comm:broadcast(send, recv, root, o)
  recv = recv or send
  local d = pair("broadcast", send, recv, same_n)
  self.raw:call("broadcast", send.raw, recv.raw, send.n, d, 0, root or 0, o and o.stream)
  return self
end

-- comm:all_gather(send, recv [, o]): recv = the ranks' send buffers one after another (recv.n = nranks * send.n)
function Comm:all_gather(send, recv, o)
  local n = self.nranks
  local d = pair("all_gather", send, recv, function(s, r)
    if r ~= s * n then return ("the receive buffer holds %d elements, %d ranks x %d sent need %d"):format(r, n, s, s * n) end
  end)
  self.raw:call("all_gather", send.raw, recv.raw, send.n, d, 0, 0, o and o.stream)
  return self
end

-- comm:reduce_scatter(send, recv [, o]): recv = rank r's part (recv.n elements) of op over the ranks' sends
function Comm:reduce_scatter(send, recv, o)
  local n = self.nranks
  local d = pair("reduce_scatter", send, recv, function(s, r)
    if s ~= r * n then return ("the send buffer holds %d elements, %d ranks x %d received need %d"):format(s, n, r, r * n) end
  end)
  self.raw:call("reduce_scatter", send.raw, recv.raw, recv.n, d, redop_of(o), 0, o and o.stream)
  return self
end

-- comm:send(buf, peer [, o]) and comm:recv(buf, peer [, o]): point to point (pair them in a group)
function Comm:send(buf, peer, o)
  self.raw:call("send", buf.raw, nil, buf.n, dtype_of(buf, "the buffer"), 0, peer, o and o.stream)
  return self
end
function Comm:recv(buf, peer, o)
  self.raw:call("recv", nil, buf.raw, buf.n, dtype_of(buf, "the buffer"), 0, peer, o and o.stream)
  return self
end

-- tl.nccl.group(fn): the calls fn makes run as one (NCCL's group): sends and
-- receives that pair up, several communicators of one process
function N.group(fn)
  need()
  core.nccl_group_start()
  local ok, err = pcall(fn)
  core.nccl_group_end()
  if not ok then error(err, 0) end
end

-- {=== one process per GPU

-- The command that started this script: the host, its options, the script and its arguments.
local function own_command()
  local lo = 0
  while arg and arg[lo - 1] do lo = lo - 1 end
  local parts = {}
  for i = lo, #arg do parts[#parts + 1] = "'" .. tostring(arg[i]):gsub("'", "'\\''") .. "'" end
  return table.concat(parts, " ")
end

local World = {}
World.__index = World
N.World = World

-- tl.nccl.ranks(n) -> world {comm, rank, nranks}: n processes, one per GPU,
-- with a communicator over them. In the first process (rank 0, on device 0)
-- it starts the script again n - 1 times with the same arguments, rank r on
-- device r (TILUA_DEVICE), and passes NCCL's unique id to them in the
-- environment (TILUA_NCCL_ID, _RANK, _NRANKS); in those it joins. The first
-- process calls world:finish() at its end: it waits for the others, prints
-- their output and raises when one failed.
function N.ranks(n)
  if math.type(n) ~= "integer" or n < 1 then raise("nccl.ranks: the number of ranks must be a positive integer") end
  need()
  local rank = tonumber(os.getenv "TILUA_NCCL_RANK" or "")
  if rank then
    local id = N.id_from_hex(os.getenv "TILUA_NCCL_ID")
    local nranks = tonumber(os.getenv "TILUA_NCCL_NRANKS")
    return setmetatable({ comm = N.init { id = id, nranks = nranks, rank = rank }, rank = rank, nranks = nranks,
                          children = {} }, World)
  end
  if not tl.device.available() then raise("no GPU: " .. core.device_error() .. " (nccl.ranks)") end
  local have = tl.device.count()
  if have < n then raise(("nccl.ranks: %d ranks need %d GPUs, the driver sees %d"):format(n, n, have)) end
  local id = N.unique_id()
  local children = {}
  local nvls = os.getenv "NCCL_NVLS_ENABLE" or "0"
  for r = 1, n - 1 do
    local log = os.tmpname()
    local env = ("TILUA_DEVICE=%d TILUA_NCCL_RANK=%d TILUA_NCCL_NRANKS=%d TILUA_NCCL_ID=%s NCCL_NVLS_ENABLE=%s "
                 .. "TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"):format(r, r, n, N.id_hex(id), nvls)
    local h = io.popen(("%s %s >'%s' 2>&1; echo \"exit $?\""):format(env, own_command(), log), "r")
    children[#children + 1] = { rank = r, pipe = h, log = log }
  end
  local ok, comm = pcall(N.init, { id = id, nranks = n, rank = 0 })
  local w = setmetatable({ comm = ok and comm or nil, rank = 0, nranks = n, children = children }, World)
  if not ok then
    w:finish(true)
    error(comm, 0)
  end
  return w
end

-- world:finish(): in rank 0, waits for the other ranks; their output is
-- printed with "[rank r]" before each line; raises when one failed. Elsewhere nothing.
function World:finish(quiet)
  local failed = {}
  for _, c in ipairs(self.children) do
    local status = c.pipe:read "a"
    c.pipe:close()
    local f = io.open(c.log, "r")
    local out = f and f:read "a" or ""
    if f then f:close() end
    os.remove(c.log)
    for line in out:gmatch "[^\n]+" do io.write(("[rank %d] %s\n"):format(c.rank, line)) end
    local code = tonumber(status:match "exit (%d+)")
    if code ~= 0 then failed[#failed + 1] = ("rank %d exited with %s"):format(c.rank, tostring(code)) end
  end
  self.children = {}
  if #failed > 0 and not quiet then raise("nccl: " .. table.concat(failed, "; ")) end
  return self
end

-- }===

return M
