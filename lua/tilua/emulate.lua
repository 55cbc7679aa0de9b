-- tilua.emulate: a CPU emulator of a kernel's IR at the authoring level (the
-- cutlass pipeline ops and the tile mbarrier / bulk-copy / barrier ops, before
-- lowering), and the protocol checker built on it (docs/protocol.md).
--
-- Every warp of every CTA is a coroutine that runs its 32 lanes together
-- (SIMT): a value is one Lua value when it is the same in every active lane,
-- else a per-lane table; scf.if on a lane-varying condition runs both sides
-- under their lane masks. A warp runs on its own until it reaches a
-- synchronizing op (an mbarrier or pipeline op, a CTA barrier); it yields
-- there, and the scheduler picks which ready actor (a warp at its next
-- synchronizing op, or a bulk copy in flight) moves next. A step is that op
-- plus the warp's local code up to its next synchronizing op.
--
-- Shared memory is checked with vector clocks (happens-before): every
-- arrive releases, every wait that passes acquires the phase it saw, a CTA
-- barrier joins the warps, a bulk copy is an actor of its own that starts with
-- its issuer's clock and releases on the barrier it completes on. A read of
-- shared bytes whose last write is not ordered before it (a stage not yet
-- filled) and a write of bytes whose reads are not ordered before it (a stage
-- overwritten before it was released) are protocol errors, as are a wait that
-- passes on the wrong phase of a pipeline stage, an arrive that runs past the
-- end of a phase, a phase left half-arrived or with transaction bytes
-- outstanding at the end, a use of an mbarrier not initialized (or whose
-- initialization is not ordered before the use), and a deadlock.
--
--   local em = require "tilua.emulate"
--   local r = em.run(kernel_or_op, { grid = 1, args = { "src bytes", 4096, 1000 }, policy = "random", seed = 7 })
--   r.ok, r.error (a report), r.read(i [, n]) (the bytes of buffer argument i), r.steps, r.trace
--   local c = em.check(kernel_or_op, { grid = 1, args = {...}, max_states = 20000 })
--   c.ok, c.report, c.states, c.runs, c.violation.kind

local interp = require "tilua.interp"

local M = {}

local SHARED_BASE = 1 << 40       -- shared addresses: SHARED_BASE + offset (per CTA)
local SLOT_BASE = SHARED_BASE + (1 << 30) -- the 32 barrier slots of the cutlass pool
local GLOBAL_BASE = 1 << 32       -- global buffers are allocated from here
local GLOBAL_SPACING = 1 << 28    -- and this far apart
local DSMEM_BASE = 1 << 48        -- a shared address of CTA c seen through the cluster (mapa):
                                  -- DSMEM_BASE + c << 32 + (its offset from SHARED_BASE)

local LV = { __name = "lanes" }   -- metatable of a lane-varying value
local function varying(x) return getmetatable(x) == LV end
local function at(x, l)
  if getmetatable(x) == LV then return x[l] end
  return x
end

local wrap = interp.wrap
local compile_arith = interp.compile

-- {=====================================================================
-- Decoding: the IR once into Lua records (no C calls while running)
-- ======================================================================

local function loc_of(op)
  local file, line = op:loc()
  if not file then return "?" end
  return file .. ":" .. tostring(line)
end

local function bytes_of(t)
  local info = t:info()
  if info.kind == "ptr" or info.kind == "index" then return 8 end
  if info.kind == "vector" then
    local n = 1
    for _, d in ipairs(info.shape) do n = n * d end
    return n * bytes_of(info.elem)
  end
  return math.max(1, (info.width or 8) // 8)
end

-- A codec for a loaded or stored type: size, and read / write of its bytes.
local function codec_of(t)
  local info = t:info()
  local kind = info.kind
  if kind == "vector" then
    local n = 1
    for _, d in ipairs(info.shape) do n = n * d end
    local e = codec_of(info.elem)
    return { size = n * e.size, n = n, elem = e, vector = true, raw = e.width == 8 and not e.fmt }
  end
  if kind == "float" then
    local name = info.name
    if name == "f32" then return { size = 4, fmt = "<f" } end
    if name == "f64" then return { size = 8, fmt = "<d" } end
    return { size = bytes_of(t), unsupported = name }
  end
  if kind == "ptr" or kind == "index" then return { size = 8, width = 64 } end
  local w = info.width or 64
  return { size = math.max(1, w // 8), width = w }
end

local decode_block

-- Decoders the models register (api.DECODERS): op name -> fn(rec, op, d), run
-- on an op's record once its regions are decoded; and fns(dk, kop, d) run on
-- the decoded kernel (api.KERNEL_DECODERS). emulate_tileas.lua uses them.
local DECODERS, KERNEL_DECODERS = {}, {}

local function decode_op(op, d)
  d.nid = d.nid + 1
  local rec = { name = op:name(), op = op, id = d.nid, loc = loc_of(op), ins = {}, outs = {} }
  for i, v in ipairs(op:operands()) do rec.ins[i] = v:id() end
  for i, v in ipairs(op:results()) do rec.outs[i] = v:id() end
  local nreg = op:nregions()
  if nreg > 0 then
    rec.regions = {}
    for r = 1, nreg do
      local blocks = {}
      for _, b in ipairs(op:region(r):blocks()) do blocks[#blocks + 1] = decode_block(b, d) end
      rec.regions[r] = blocks
    end
  end
  local name = rec.name
  if name == "tile.ptr_add" then
    rec.scale = bytes_of(op:result(1):type():info().elem)
  elseif name == "tile.memref_ptr" then
    local info = op:operand(1):type():info()
    rec.shape, rec.scale = info.shape, bytes_of(info.elem)
  elseif name == "tile.load" then
    rec.codec = codec_of(op:result(1):type())
  elseif name == "tile.store" then
    rec.codec = codec_of(op:operand(1):type())
  elseif name == "tile.extract" then
    local info = op:result(1):type():info()
    rec.width = info.kind == "int" and info.width or nil
  elseif name == "tile.atomic" or name == "tile.atomic_cas" then
    rec.codec = codec_of(op:result(1):type())
  elseif name == "tile.alloc_shared" or name == "tile.dynamic_shared" then
    local t = op:result(1):type()
    local info = t:info()
    local size
    if name == "tile.dynamic_shared" then
      size = 0
    elseif info.kind == "memref" then
      size = bytes_of(info.elem)
      for _, n in ipairs(info.shape) do size = size * n end
    else
      size = (op:attr "count" or 1) * bytes_of(info.elem)
    end
    local align = op:attr "align" or 16
    d.smem = (d.smem + align - 1) // align * align
    rec.offset, rec.size = d.smem, size
    rec.elem = info.kind == "memref" and bytes_of(info.elem) or bytes_of(info.elem)
    d.smem = d.smem + size
    d.allocs[#d.allocs + 1] = rec
  elseif name == "tile.agent" then
    local wid = op:attr "warp_id"
    local first = (wid and wid >= 0) and wid or d.next_warp
    rec.first, rec.nwarps, rec.role = first, op:attr "num_warps", op:attr "name" or "agent"
    d.next_warp = first + rec.nwarps
  elseif name == "cutlass.pipeline.create" then
    local params = op:result(1):type():info().params
    rec.stages, rec.np, rec.nc = params[1], params[2], params[3]
  elseif name == "cutlass.seq_bar.create" then
    rec.depth = op:result(1):type():info().params[1]
  elseif name == "builtin.unrealized_conversion_cast" and op:noperands() == 0 then
    local info = op:result(1):type():info()
    if info.kind == "memref" and info.space == "rmem" then -- a register fragment
      local n = 1
      for _, x in ipairs(info.shape) do n = n * x end
      local eb = bytes_of(info.elem)
      local v = #info.shape >= 2 and info.shape[#info.shape] or 1
      if v < 2 or (v * eb ~= 4 and v * eb ~= 8 and v * eb ~= 16) or (eb >= 4 and v > 4) then v = 1 end
      rec.frag = { n = n, v = v, codec = codec_of(info.elem) } -- cut_striped_unit
    end
  end
  local dh = DECODERS[name]
  if dh then dh(rec, op, d) end
  return rec
end

function decode_block(b, d)
  local blk = { args = {}, ops = {} }
  for i, a in ipairs(b:args()) do blk.args[i] = a:id() end
  for i, o in ipairs(b:ops()) do blk.ops[i] = decode_op(o, d) end
  -- an init followed (through creates and constants only) by another init: the
  -- CTA synchronizes once, after the last of the run (the lowering's init_follows)
  local INIT = { ["cutlass.pipeline.init"] = true, ["cutlass.seq_bar.init"] = true }
  local PASS = { ["cutlass.pipeline.create"] = true, ["cutlass.seq_bar.create"] = true, ["arith.constant"] = true }
  for i, r in ipairs(blk.ops) do
    if INIT[r.name] then
      for j = i + 1, #blk.ops do
        if INIT[blk.ops[j].name] then
          r.init_follows = true
          break
        end
        if not PASS[blk.ops[j].name] then break end
      end
    end
  end
  return blk
end

-- The tile.kernel op of a kernel object, a module or the op itself.
local function kernel_op(k)
  if type(k) == "table" and k.op then return k.op end
  if type(k) == "userdata" and k.name then
    if k:name() == "tile.kernel" then return k end
    local found
    k:walk(function(o) if not found and o:name() == "tile.kernel" then found = o end end)
    if found then return found end
  end
  error("emulate: expected a kernel (tl.kernel), a tile.kernel op or a module holding one", 3)
end

-- The ops that probe an mbarrier's phase without waiting: name -> true, or
-- fn(op) -> whether this one does (the models register them: api.PROBES).
local PROBES = {}
-- The ops that synchronize CTAs through global memory (a spin loop on a
-- global word: emulate_global.lua), as PROBES: no cluster-at-a-time reduction.
local CROSS_CTA = {}

local function decode(kop)
  local d = { smem = 0, allocs = {}, next_warp = 0, nid = 0 }
  local bar_arrives = false -- a named-barrier arrive that does not wait (Run:rendezvous)
  local cluster_local = true -- no synchronization object in global memory (M.check)
  local cluster_pipes = false -- a pipeline of mode cluster: the inits end with a cluster sync
  local probes = false -- an op that tests an mbarrier's phase without waiting (step_of)
  kop:walk(function(o)
    local n = o:name()
    local probe = PROBES[n]
    if probe and (probe == true or probe(o)) then probes = true end
    local cross = CROSS_CTA[n]
    if cross and (cross == true or cross(o)) then cluster_local = false end
    if n == "cutlass.pipeline.init" and o:attr "mode" == "cluster" then
      cluster_pipes = true
    elseif n == "tile.named_barrier_arrive" or n == "cutlass.named_barrier.arrive" or n == "nvvm.barrier.arrive" then
      bar_arrives = true
    elseif n:match "^cutlass%.generic_barrier%." or n == "cutlass.tile_scheduler.fixup" then
      cluster_local = false
    end
  end)
  local ks = kop:kernel_spec() or {}
  local body = decode_block(kop:region(1):entry(), d)
  local block = ks.block or { 32, 1, 1 }
  if block[2] ~= 1 or block[3] ~= 1 then error("emulate: only 1-D blocks are modelled", 0) end
  local params = {}
  for i, a in ipairs(kop:region(1):entry():args()) do
    params[i] = { kind = a:type():info().kind, type = tostring(a:type()) }
  end
  local dk = { body = body, threads = block[1], warps = (block[1] + 31) // 32, smem = d.smem,
              allocs = d.allocs, params = params, name = kop:attr "sym_name" or "kernel", loc = loc_of(kop),
              cluster = ks.has_cluster and ks.cluster and ks.cluster[1] or 1, bar_arrives = bar_arrives,
              cluster_local = cluster_local, cluster_pipes = cluster_pipes, probes = probes }
  for _, f in ipairs(KERNEL_DECODERS) do f(dk, kop, d) end
  return dk
end

-- }=====================================================================

-- {=====================================================================
-- Vector clocks
-- ======================================================================

local function vc_copy(v)
  local c = {}
  for k, x in pairs(v) do c[k] = x end
  return c
end
local function vc_join(into, v)
  for k, x in pairs(v) do
    if (into[k] or 0) < x then into[k] = x end
  end
end
local function vc_leq(v, w) -- v happens before (or is) w
  for k, x in pairs(v) do
    if (w[k] or 0) < x then return false end
  end
  return true
end

-- }=====================================================================

-- {=====================================================================
-- One emulation
-- ======================================================================

local Violation = {}
Violation.__index = Violation

local function violation(kind, msg, extra)
  local v = setmetatable({ kind = kind, message = msg }, Violation)
  if extra then for k, x in pairs(extra) do v[k] = x end end
  error(v, 0)
end

local function not_modelled(rec)
  error(("emulate: op %s is not modelled (at %s)"):format(rec.name, rec.loc), 0)
end

local function popcount(x)
  local n = 0
  while x ~= 0 do
    n, x = n + (x & 1), x >> 1
  end
  return n
end
local function lowest_bit(x)
  local i = 0
  while x ~= 0 and x & 1 == 0 do
    i, x = i + 1, x >> 1
  end
  return i
end

-- The derived arrive counts of a pipeline.init ([full, empty]), as
-- cut_pipeline_arrive_counts (cutlass_pipeline.c) derives them.
local function arrive_counts(op, np, nc, ctas)
  local mode = op:attr "mode"
  local full, empty = np, nc
  if mode == "cooperative" then
    empty = 0
    for _, m in ipairs(op:attr "consumers") do empty = empty + 32 * popcount(m) end
  elseif mode == "pingpong" then -- the threads of one participant (all have as many)
    empty = 32 * popcount(op:attr "consumers"[1])
  elseif mode == "cluster" then -- every consumer warp of every CTA of the cluster
    empty = 0
    for _, m in ipairs(op:attr "consumers") do empty = empty + popcount(m) * ctas end
  end
  return full, empty, mode
end

local Run = {}
Run.__index = Run

-- A new emulation of the decoded kernel k with options o and a chooser
-- choose(run, options) -> the index of the actor that moves.
local function new_run(k, o, choose)
  local R = setmetatable({ k = k, o = o, choose = choose, global = {}, ctas = {}, actors = {},
                           warps = {}, copies = {}, nactors = 0, async_actors = {}, steps = 0, trace = {},
                           max_steps = o.max_steps or 200000, next_global = GLOBAL_BASE,
                           max_ops = o.max_ops or 4000000, ops = 0,
                           buffers = {}, args = {}, copy_seq = 0, granule = o.granule or 16,
                           read_recs = {}, write_recs = {}, rnext = setmetatable({}, { __mode = "k" }) }, Run)
  -- protocol-only runs (the checker's, unless o.values): bulk and TMA copies,
  -- wgmma and stmatrix move no bytes; their footprints still go through the
  -- race check (docs/protocol.md, "Protocol-only runs")
  local values = o.values
  if values == nil then values = o.mma_values end
  if values == nil then values = o._cache == nil end
  R.values = values
  return R
end

function Run:new_actor()
  self.nactors = self.nactors + 1
  return self.nactors
end

-- Global memory: bytes in one table.
function Run:alloc_global(bytes)
  local base = self.next_global
  local n = type(bytes) == "string" and #bytes or (type(bytes) == "table" and #bytes or bytes)
  -- 256 MiB apart: an access past a buffer (inputs too small for the kernel)
  -- lands in no other buffer, so it cannot pass for a race between them
  self.next_global = base + (n // GLOBAL_SPACING + 1) * GLOBAL_SPACING
  local g = self.global
  if type(bytes) == "string" then
    -- copied into the table when first read (a run that reads none of it, as
    -- the checker's do not read a GEMM's operands, copies nothing)
    local segs = self.segments
    if not segs then
      segs = {}
      self.segments = segs
      setmetatable(g, { __index = function(t, a)
        local i = (a - GLOBAL_BASE) // GLOBAL_SPACING
        local sg = segs[i]
        if not sg then return nil end
        segs[i] = nil
        local str, b0 = sg.bytes, sg.base
        for j = 1, #str do
          if rawget(t, b0 + j) == nil then rawset(t, b0 + j, str:byte(j)) end -- not what was stored since
        end
        return rawget(t, a)
      end })
    end
    segs[(base - GLOBAL_BASE) // GLOBAL_SPACING] = { base = base - 1, bytes = bytes }
  elseif type(bytes) == "table" then
    for i = 1, n do g[base + i - 1] = bytes[i] & 0xff end
  end
  return base, n
end

local function space_of(addr) return addr >= SHARED_BASE and "shared" or "global" end

-- The byte table of an address in warp W's CTA (a cluster address: the CTA it names).
local function mem_of(R, W, addr)
  if addr >= DSMEM_BASE then
    local cta = R.ctas[((addr - DSMEM_BASE) >> 32) + 1]
    return cta.shared, SHARED_BASE + (addr & 0xffffffff), cta
  end
  if addr >= SHARED_BASE then return W.cta.shared, addr, W.cta end
  return R.global, addr
end

local function read_bytes(R, W, addr, n)
  local m, a = mem_of(R, W, addr)
  local out = {}
  for i = 0, n - 1 do out[i + 1] = m[a + i] or 0 end
  return out
end

local function decode_scalar(c, bytes, off)
  if c.unsupported then error("emulate: loads of " .. c.unsupported .. " are not modelled", 0) end
  if c.fmt then
    local s = {}
    for i = 1, c.size do s[i] = string.char(bytes[off + i]) end
    return (string.unpack(c.fmt, table.concat(s)))
  end
  local x = 0
  for i = c.size, 1, -1 do x = (x << 8) | bytes[off + i] end
  return wrap(x, c.width)
end

local function encode_scalar(c, v, out, off)
  if c.unsupported then error("emulate: stores of " .. c.unsupported .. " are not modelled", 0) end
  if c.fmt then
    local s = string.pack(c.fmt, v)
    for i = 1, c.size do out[off + i] = s:byte(i) end
    return
  end
  for i = 1, c.size do
    out[off + i] = v & 0xff
    v = v >> 8
  end
end

-- {=== the shared-memory race check (per CTA, per granule)

local function who(R, actor)
  local a = R.actors[actor]
  return a and a.label or ("actor " .. actor)
end

-- A read of [addr, addr + n) in shared memory by actor `a` with clock vc at loc.
local function range_of(sp, addr, n)
  if sp.is_global then return ("global bytes [0x%x, 0x%x)"):format(addr, addr + n) end
  return ("shared bytes [%d, %d)%s"):format(addr - SHARED_BASE, addr - SHARED_BASE + n, sp.remote_of or "")
end

function Run:shadow_read(cta, a, vc, addr, n, loc)
  local g = cta.granule or self.granule
  local sw, sr = cta.shadow_w, cta.shadow_r
  -- one record for every granule of this read, and of the actor's next reads
  -- at the same clock and op (records are never changed)
  local clock = vc[a] or 0
  local e = self.read_recs[a]
  if not e or e[1] ~= clock or e[2] ~= loc then
    e = { clock, loc }
    self.read_recs[a] = e
  end
  -- the readers of a granule are a set shared by every granule that the same
  -- reads reached (never changed: a read moves a granule to the set with its
  -- record added, made once per set and record: self.rnext), so that a large
  -- write checks each distinct reader set once (a wgmma stage read by 8
  -- warps in many small reads, then overwritten by a TMA box)
  local nexts = self.rnext[e]
  if not nexts then
    nexts = setmetatable({}, { __mode = "k" })
    self.rnext[e] = nexts
  end
  local last_w, from, to = false, false, nil
  for q = addr // g, (addr + n - 1) // g do
    local w = sw[q]
    if w == last_w then goto record end
    last_w = w
    if w == nil then
      if cta.is_global then goto record end -- the host wrote it
      violation("unfilled", ("%s at %s reads shared bytes [%d, %d) that nothing wrote yet (a stage read before it was filled)")
        :format(who(self, a), loc, addr - SHARED_BASE, addr - SHARED_BASE + n))
    elseif w.actor ~= a and (vc[w.actor] or 0) < w.clock then
      violation("unfilled", ("%s at %s reads %s that %s wrote at %s with no synchronization ordering the write before the read (%s)")
        :format(who(self, a), loc, range_of(cta, addr, n), who(self, w.actor), w.loc,
                cta.is_global and "a read of what another thread or CTA wrote with no barrier in between"
                or "a stage read before it was filled"))
    end
    ::record::
    local r = sr[q]
    if r == from then
      sr[q] = to
    elseif not (r and r[a] == e) then
      local nr = nexts[r or nexts]
      if not nr then
        nr = {}
        if r then for ra, x in pairs(r) do nr[ra] = x end end
        nr[a] = e -- one record for every granule of this read
        nexts[r or nexts] = nr
      end
      from, to = r, nr
      sr[q] = nr
    end
  end
end

function Run:shadow_write(cta, a, vc, addr, n, loc)
  local g = cta.granule or self.granule
  local sw, sr = cta.shadow_w, cta.shadow_r
  local clock = vc[a] or 0
  local w_rec = self.write_recs[a] -- as read_recs (shadow_read)
  if not w_rec or w_rec.clock ~= clock or w_rec.loc ~= loc then
    w_rec = { actor = a, clock = clock, loc = loc }
    self.write_recs[a] = w_rec
  end
  local last_w, last_r = false, false -- shared records and reader sets: each checked once (shadow_read)
  for q = addr // g, (addr + n - 1) // g do
    local w = sw[q]
    if w and w ~= last_w and w.actor ~= a and (vc[w.actor] or 0) < w.clock then
      violation("overwrite", ("%s at %s writes %s that %s wrote at %s with no synchronization in between")
        :format(who(self, a), loc, range_of(cta, addr, n), who(self, w.actor), w.loc))
    end
    last_w = w
    local r = sr[q]
    if r and r == last_r then
      sr[q] = nil
    elseif r then
      last_r = r
      for ra, e in pairs(r) do
        if ra ~= a and (vc[ra] or 0) < e[1] then
          violation("overwrite", ("%s at %s overwrites %s that %s read at %s before that read was released to it (%s)")
            :format(who(self, a), loc, range_of(cta, addr, n), who(self, ra), e[2],
                    cta.is_global and "a write racing with another thread's or CTA's read"
                    or "a stage overwritten before every consumer released it"))
        end
      end
      sr[q] = nil
    end
    sw[q] = w_rec
  end
end

-- }===

-- Load / store of a codec's bytes at addr by warp W (a lane).
-- The space (CTA or global) whose shadow an access of actor W at addr uses, and
-- the address in it; a cluster address is checked against the cluster's start
-- and the target CTA's exit (DSMEM).
function Run:access(W, rec, addr, write)
  if addr >= DSMEM_BASE then
    local m, a, cta = mem_of(self, W, addr)
    if cta ~= W.cta then
      if (W.vc[cta.start] or 0) < 1 then
        violation("dsmem", ("%s at %s %s the shared memory of CTA %d through the cluster before the cluster is known to have started (no cluster barrier orders CTA %d's start before the access)")
          :format(W.label, rec.loc, write and "writes" or "reads", cta.id, cta.id))
      end
      if cta.exited then
        violation("dsmem", ("%s at %s %s the shared memory of CTA %d, which has exited (a missing cluster barrier before the exit)")
          :format(W.label, rec.loc, write and "writes" or "reads", cta.id))
      end
      cta.remote[#cta.remote + 1] = { actor = W.actor, clock = W.vc[W.actor], loc = rec.loc, label = W.label }
    end
    return cta, a
  end
  if addr >= SHARED_BASE then return W.cta, addr end
  return self.gspace, addr
end

function Run:load(W, rec, addr, atomic)
  local c = rec.codec
  if not atomic then
    local sp, a = self:access(W, rec, addr, false)
    self:shadow_read(sp, W.actor, W.vc, a, c.size, rec.loc)
  end
  if c.width and not c.vector then -- an integer: straight from the bytes
    local m, a = mem_of(self, W, addr)
    local x = 0
    for i = a + c.size - 1, a, -1 do x = (x << 8) | (m[i] or 0) end
    return wrap(x, c.width)
  end
  local bytes = read_bytes(self, W, addr, c.size)
  if c.raw then return bytes end -- a vector of bytes: kept unsigned (tile.extract wraps)
  if c.vector then
    local v = {}
    for i = 1, c.n do v[i] = decode_scalar(c.elem, bytes, (i - 1) * c.elem.size) end
    return v
  end
  return decode_scalar(c, bytes, 0)
end

function Run:store(W, rec, addr, v, atomic)
  local c = rec.codec
  if not atomic then
    local sp, a = self:access(W, rec, addr, true)
    self:shadow_write(sp, W.actor, W.vc, a, c.size, rec.loc)
  end
  if c.width and not c.vector then -- an integer: straight to the bytes
    local m, a = mem_of(self, W, addr)
    for i = a, a + c.size - 1 do
      m[i] = v & 0xff
      v = v >> 8
    end
    return
  end
  local out = {}
  if c.raw then
    for i = 1, c.size do out[i] = v[i] & 0xff end
  elseif c.vector then
    for i = 1, c.n do encode_scalar(c.elem, v[i], out, (i - 1) * c.elem.size) end
  else
    encode_scalar(c, v, out, 0)
  end
  local m, a = mem_of(self, W, addr)
  for i = 1, c.size do m[a + i - 1] = out[i] end
end

-- {=== mbarriers

function Run:barrier_name(cta, addr)
  local b = cta.bars[addr]
  if b and b.name then return b.name end
  if addr >= SLOT_BASE then return ("barrier slot %d"):format((addr - SLOT_BASE) // 8) end
  for _, a in ipairs(self.k.allocs) do
    local base = SHARED_BASE + a.offset
    if addr >= base and addr < base + math.max(a.size, 1) then
      return ("mbarrier %s[%d]"):format(a.loc, (addr - base) // 8)
    end
  end
  return ("mbarrier at shared offset %d"):format(addr - SHARED_BASE)
end

function Run:init_barrier(W, addr, count, loc, name)
  local cta = W.cta
  local b = { addr = addr, count = count, pending = count, tx = 0, completed = 0, vc = {}, last_vc = {},
              mvc = {}, last_mvc = {}, cvc = {}, last_cvc = {}, init_actor = W.actor, init_clock = W.vc[W.actor], init_loc = loc }
  b.name = name or self:barrier_name(cta, addr)
  cta.bars[addr] = b
  cta.bar_list[#cta.bar_list + 1] = b
  W.vc[W.actor] = W.vc[W.actor] + 1
  return b
end

-- The mbarrier at addr, checked to be initialized before the user (actor a, clock vc).
-- The CTA whose mbarrier a shared address names (a cluster address: the CTA
-- it maps to), the address in that CTA, and the synchronization object's key.
local function bar_ref(R, W, addr)
  if addr >= DSMEM_BASE then
    local cta = R.ctas[((addr - DSMEM_BASE) >> 32) + 1]
    local a = SHARED_BASE + (addr & 0xffffffff)
    return cta, a, cta.id .. ":" .. a
  end
  return W.cta, addr, W.cta.id .. ":" .. addr
end

-- cta: the barrier's CTA when not W's (a multicast copy's); a cluster address
-- (a remote arrival) is checked as a DSMEM access (Run:access).
function Run:bar(W, addr, rec, a, vc, cta)
  if addr >= DSMEM_BASE then cta, addr = self:access(W, rec, addr, true) end
  cta = cta or W.cta
  local b = cta.bars[addr]
  if not b then
    violation("uninitialized", ("%s at %s uses %s, which is not initialized")
      :format(who(self, a or W.actor), rec.loc, self:barrier_name(cta, addr)))
  end
  a, vc = a or W.actor, vc or W.vc
  if b.init_actor ~= a and (vc[b.init_actor] or 0) < b.init_clock + 1 then
    violation("uninitialized", ("%s at %s uses %s, whose initialization by %s at %s is not ordered before the use (a missing barrier after the init)")
      :format(who(self, a), rec.loc, b.name, who(self, b.init_actor), b.init_loc))
  end
  return b
end

-- Does a wait for parity p pass? (the phase of that parity completed: the
-- current phase's parity differs)
local function passes(b, p) return (b.completed & 1) ~= (p & 1) end

function Run:complete_phase(b)
  -- every wait that passed on the phase before must be ordered before this
  -- completion: else it could have come after it, seen the other parity and
  -- missed its phase (what lets the checker take passing waits eagerly)
  local obs = b.observers
  if obs then
    for _, e in ipairs(obs) do
      if (b.vc[e.actor] or 0) < e.clock then
        violation("phase", ("%s at %s passed its wait on %s at %d completed phase(s), and phase %d then completed with no arrival ordered after that wait: the wait could have come after the completion and missed the phase it waited for (phase aliasing)")
          :format(who(self, e.actor), e.loc, b.name, b.completed, b.completed + 1))
      end
    end
    b.obs_hist = b.obs_hist or {}
    b.obs_hist[b.completed] = obs -- for a warp that skips this phase (Run:observe)
    b.observers = nil
  end
  -- so must every wait that could pass now and has not yet: this completion
  -- would make it miss its phase
  for _, X in ipairs(self.warps) do
    if X.waiting_at and X.cta.bars[X.waiting_at] == b and passes(b, X.wait_parity) then
      violation("phase", ("%s waits at %s on %s for parity %d, which passes at %d completed phase(s), and phase %d completes before that wait passed and with no arrival ordered after it: the wait misses the phase it waited for (phase aliasing)")
        :format(X.label, X.req.rec.loc, b.name, X.wait_parity, b.completed, b.completed + 1))
    end
  end
  b.completed = b.completed + 1
  b.pending, b.tx = b.count, 0
  b.last_vc, b.vc = b.vc, {}
  b.last_mvc, b.mvc, b.last_cvc, b.cvc = b.mvc, {}, b.cvc, {}
end

-- Scopes. What an arrival releases to the waiters of an mbarrier, on vector
-- clocks (the PTX memory model): a release and an acquire synchronize only
-- when they are morally strong, each one's scope holding the other's thread.
-- A waiter is in the barrier's CTA (try_wait reads shared::cta), so an arrival
-- from that CTA releases the arriving warp's clock (b.mvc, what a wait at
-- .cta scope acquires); one from another CTA (through mapa) does only at
-- .cluster scope and only to a wait at .cluster scope (b.cvc). Otherwise it
-- orders nothing the warp did through the generic proxy, only what is done by
-- then: the async-proxy operations it knows completed (rel_async: wgmma
-- operand reads that wgmma.wait_group completed, copies whose barrier it
-- waited on, bulk stores it waited for). A completed read cannot see a later
-- write, so that is what a producer's TMA write after its wait needs (the
-- cluster pipeline's .cta-scope releases, docs/protocol.md).
function Run:mark_async(id) self.async_actors[id] = true end
-- The actor of warp W's wgmma operand reads (the async proxy's), made at its first wgmma.
function Run:async_actor(W)
  if not W.async then
    W.async = self:new_actor()
    self.actors[W.async] = { label = "the wgmma of " .. W.label }
    self:mark_async(W.async)
  end
  return W.async
end
local function rel_async(R, vc)
  local r = {}
  for id, x in pairs(vc) do
    if R.async_actors[id] then r[id] = x end
  end
  return r
end
-- What W's arrival at `scope` (nil: .cta) on a barrier of CTA bcta releases:
-- nil, its clock to every waiter; else { cta = ..., cluster = ... }.
function Run:release_of(W, bcta, scope)
  if bcta == W.cta then return nil end
  local async = rel_async(self, W.vc)
  if scope == "cluster" or scope == "gpu" or scope == "sys" then return { cta = async, cluster = W.vc } end
  return { cta = async, cluster = async }
end
-- What a wait (rec: its op's scope attribute, absent for .cta) acquires of b's last completed phase.
function Run:acquired(b, rec)
  if rec.bar_scope == nil then rec.bar_scope = rec.op and rec.op:attr "scope" or false end
  local s = rec.bar_scope
  return (s == "cluster" or s == "gpu" or s == "sys") and b.last_cvc or b.last_mvc
end

-- n arrivals on b by actor a (clock vc) at rec; expect: tx bytes first; rel:
-- what it releases to the waiters when not vc (Run:release_of).
function Run:arrive(b, n, a, vc, rec, expect, rel)
  if expect then b.tx = b.tx + expect end
  vc_join(b.vc, vc)
  vc_join(b.mvc, rel and rel.cta or vc)
  vc_join(b.cvc, rel and rel.cluster or vc)
  for i = 1, n do
    if b.pending <= 0 then
      violation("arrive_count", ("%s at %s arrives on %s, whose phase %d has no arrival left (count %d)")
        :format(who(self, a), rec.loc, b.name, b.completed, b.count))
    end
    b.pending = b.pending - 1
    if b.pending == 0 and b.tx == 0 then
      self:complete_phase(b)
      if i < n then
        violation("arrive_count", ("%s at %s makes %d arrivals on %s at once, but phase %d completed after %d of them (count %d): the rest arrive on the next phase")
          :format(who(self, a), rec.loc, n, b.name, b.completed - 1, i, b.count))
      end
      vc_join(b.vc, vc)
      vc_join(b.mvc, rel and rel.cta or vc)
      vc_join(b.cvc, rel and rel.cluster or vc)
    end
  end
end

function Run:complete_tx(b, bytes, a, vc)
  b.tx = b.tx - bytes
  vc_join(b.vc, vc)
  vc_join(b.mvc, vc)
  vc_join(b.cvc, vc)
  if b.pending == 0 and b.tx == 0 then self:complete_phase(b) end
end


-- }===

-- {=== requests: what a warp yields at a synchronizing op

-- A warp's request: { rec, ready = fn() -> bool, perform = fn() -> results?, describe = fn() -> text }
-- obj names the synchronization object the op touches (steps of different
-- actors on different objects commute: the checker's sleep sets); nil: any.
-- acc: how: "r" reads it (a wait, a test), "a" arrives (arrivals commute with
-- each other), "w" (default) anything else; the checker takes some alone
-- (step_of): "am" an mbarrier arrival, "ae" an arrival at a barrier whose
-- waits nothing can disable, "re" / "rp" a wait at such a barrier / an mbarrier.
-- completes: for an arrival, fn() -> whether it would complete the phase now.
local function request(W, rec, ready, perform, describe, obj, acc, completes)
  return coroutine.yield { rec = rec, ready = ready, perform = perform, describe = describe, warp = W, obj = obj,
                           acc = acc or "w", completes = completes }
end
-- an arrival of n on barrier-like b (pending, tx) completes its phase?
local function completes_on(b, n) return b == nil or (b.pending <= n) end

-- A rendezvous of `n` warps of a CTA on key (bar.sync, a group sync): arrive, then wait.
-- The wait, once it passes, stays passable and its generation cannot complete
-- again without this warp, unless a warp may arrive without waiting (bar.arrive
-- on a named barrier: the kernel has one): then neither the arrival nor the
-- wait is taken eagerly.
function Run:rendezvous(W, rec, key, n, what, nowait)
  local cta = W.cta
  local s = cta.syncs[key]
  if not s then
    s = { gen = 0, arrived = 0, vc = {}, last_vc = {}, n = n, what = what }
    cta.syncs[key] = s
    cta.sync_list[#cta.sync_list + 1] = s
  end
  local gen
  local eager = n == self.k.warps or not (self.k.bar_arrives and key:match "^bar ")
  request(W, rec, function() return true end, function()
    gen = s.gen
    s.arrived = s.arrived + 1
    vc_join(s.vc, W.vc)
    W.vc[W.actor] = W.vc[W.actor] + 1
    if s.arrived == s.n then
      s.gen, s.arrived, s.last_vc, s.vc = s.gen + 1, 0, s.vc, {}
    end
  end, function() return ("arrives at %s"):format(what) end, "s" .. cta.id .. key, eager and "ae" or "a",
  function() return s.arrived + 1 >= s.n end)
  if nowait then return end
  request(W, rec, function() return s.gen > gen end, function()
    vc_join(W.vc, s.last_vc)
  end, function()
    return ("waits at %s: %d of %d warps arrived"):format(what, s.arrived, s.n)
  end, "s" .. cta.id .. key, eager and "re" or "r")
end

-- Did warps whose waits are ordered before W's wait observe every phase of b
-- that completed since W's last (seen)? Then W may skip them: they completed
-- before W began to wait, so its parity cannot alias onto them.
local function skipped_known(W, b, seen)
  for j = seen + 1, b.completed - 1 do
    local ok = false
    for _, e in ipairs(b.obs_hist and b.obs_hist[j] or {}) do
      if e.actor ~= W.actor and (W.vc[e.actor] or 0) >= e.clock then ok = true break end
    end
    if not ok then return false end
  end
  return true
end

-- The per-(warp, barrier) phase check of a passing wait: successive waits of
-- one warp on one barrier see consecutive phases, or the phases in between
-- were observed by waits ordered before this one (skipped_known).
function Run:observe(W, b, rec, expected, role_what)
  if expected and b.completed ~= expected then
    violation("phase", ("%s at %s passes its wait on %s having seen %d completed phase(s), but its %s needs exactly %d: the wait passed on the wrong phase")
      :format(W.label, rec.loc, b.name, b.completed, role_what, expected))
  end
  local seen = W.seen[b]
  if seen and not expected and b.completed > seen + 1 and skipped_known(W, b, seen) then
    seen = b.completed - 1 -- others consumed the phases in between (a ping-pong ring's other warpgroup)
  end
  if seen and not expected and b.completed ~= seen + 1 then
    violation("phase", ("%s at %s passes its wait on %s at %d completed phase(s), after it passed one at %d: %s")
      :format(W.label, rec.loc, b.name, b.completed, seen,
              b.completed == seen and "the same phase twice (the wait passed on the wrong phase)" or "a phase went by unobserved"))
  end
  W.seen[b] = b.completed
  vc_join(W.vc, self:acquired(b, rec))
  -- the wait is an event of its own, which the next completion must follow (complete_phase)
  W.vc[W.actor] = W.vc[W.actor] + 1
  b.observers = b.observers or {}
  b.observers[#b.observers + 1] = { actor = W.actor, clock = W.vc[W.actor], loc = rec.loc }
end

-- A blocking parity wait on b: a request ready when it passes.
function Run:wait(W, rec, addr, parity, expected, role_what)
  W.wait_addr = addr
  local b = W.cta.bars[addr]
  if b and not passes(b, parity) and W.seen[b] ~= b.completed and not vc_leq(b.last_vc, W.vc) then
    -- the barrier's last completion is not ordered before the warp got here:
    -- the wait could have come first, passed on the phase before, and been
    -- overtaken (what complete_phase reports in that order)
    violation("phase", ("%s reaches its wait at %s on %s for parity %d with %d phase(s) completed, but the last completion is not ordered before it: the wait could have come first, passed on phase %d and missed phase %d (phase aliasing)")
      :format(W.label, rec.loc, b.name, parity, b.completed, b.completed - 1, b.completed))
  end
  W.waiting_at, W.wait_parity = addr, parity
  request(W, rec, function()
    local b = W.cta.bars[addr]
    return b ~= nil and passes(b, parity)
  end, function()
    local b = self:bar(W, addr, rec)
    self:observe(W, b, rec, expected, role_what)
  end, function()
    local b = W.cta.bars[addr]
    if not b then return ("waits on %s (not initialized)"):format(self:barrier_name(W.cta, addr)) end
    return ("waits on %s for parity %d"):format(b.name, parity)
  end, W.cta.id .. ":" .. addr, "rp")
  W.waiting_at = nil
end

-- }===

-- {=== bulk copies

-- A bulk copy global -> shared in flight: an actor of its own; cta: the CTA it
-- writes and completes on, when not the issuer's (a TMA multicast).
function Run:issue_g2s(W, rec, dst, src, bytes, bar, cta)
  self.copy_seq = self.copy_seq + 1
  local id = self:new_actor()
  self:mark_async(id)
  local vc = vc_copy(W.vc)
  vc[id] = 1
  cta = cta or W.cta
  local c = { id = id, kind = "copy", vc = vc, dst = dst, src = src, bytes = bytes, bar = bar, rec = rec,
              W = W, cta = cta, seq = self.copy_seq, key = "c" .. self.copy_seq }
  c.label = ("bulk copy %d (from %s)"):format(self.copy_seq, W.label)
  c.obj = cta.id .. ":" .. bar
  self.actors[id] = c
  self.copies[#self.copies + 1] = c
  W.vc[W.actor] = W.vc[W.actor] + 1
end

-- The bytes of one copy global -> shared (a TMA load: emulate_mma.lua).
function Run:write_g2s(W, c)
  if not self.values then return end
  local g, s = self.global, c.cta.shared
  for i = 0, c.bytes - 1 do s[c.dst + i] = g[c.src + i] or 0 end
end

function Run:complete_g2s(c)
  local W = c.W
  for i = #self.copies, 1, -1 do
    if self.copies[i] == c then table.remove(self.copies, i) end
  end
  local b = self:bar(W, c.bar, c.rec, c.id, c.vc, c.cta)
  if c.dst < SHARED_BASE then violation("model", c.rec.name .. " into global memory at " .. c.rec.loc) end
  if c.cta ~= W.cta then -- a multicast into another CTA: a DSMEM access of it (Run:access)
    if c.cta.exited then
      violation("dsmem", ("%s at %s writes the shared memory of CTA %d, which has exited (a missing cluster barrier before the exit)")
        :format(c.label, c.rec.loc, c.cta.id))
    end
    c.cta.remote[#c.cta.remote + 1] = { actor = c.id, clock = c.vc[c.id], loc = c.rec.loc, label = c.label }
  end
  self:shadow_write(c.cta, c.id, c.vc, c.dst, c.bytes, c.rec.loc)
  self:write_g2s(W, c)
  self:complete_tx(b, c.bytes, c.id, c.vc)
end

-- The bytes of one bulk shared -> global copy (a TMA store: emulate_mma.lua).
function Run:write_s2g(W, c)
  if not self.values then return end
  local s, g = W.cta.shared, self.global
  for i = 0, c.bytes - 1 do g[c.dst + i] = s[c.src + i] or 0 end
end

-- The global bytes one bulk shared -> global copy writes: f(addr, n) for each
-- range (a TMA store's box: emulate_mma.lua).
function Run:s2g_footprint(_, c, f) f(c.dst, c.bytes) end

-- Performs the bulk shared -> global copies of groups (reads at wait time);
-- their global writes go through the race check as the copy's (two CTAs
-- storing one tile with no order between them is an `overwrite`).
function Run:drain_s2g(W, keep)
  while #W.bulk_groups > keep do
    local grp = table.remove(W.bulk_groups, 1)
    for _, c in ipairs(grp) do
      self:shadow_read(W.cta, c.id, c.vc, c.src, c.bytes, c.rec.loc)
      self:s2g_footprint(W, c, function(a, n) self:shadow_write(self.gspace, c.id, c.vc, a, n, c.rec.loc) end)
      self:write_s2g(W, c)
      vc_join(W.vc, c.vc)
    end
  end
end

-- }===

-- {=== the interpreter of one warp

local exec_block

local function lanes_of(ctx) return ctx.mask end

-- Evaluate a pure / per-lane op over the active lanes.
local function eval_lanes(R, W, rec, ins, ctx, f)
  local uniform = true
  for i = 1, #ins do
    if varying(ins[i]) then
      uniform = false
      break
    end
  end
  if uniform and not rec.per_lane then return f(ins, ctx.mask[1]) end
  local outs = {}
  local nres = #rec.outs
  for r = 1, nres do outs[r] = setmetatable({}, LV) end
  local li = {}
  for _, l in ipairs(ctx.mask) do
    for i = 1, #ins do li[i] = at(ins[i], l) end
    local o = f(li, l)
    for r = 1, nres do outs[r][l] = o[r] end
  end
  return outs
end

local PER_LANE = {
  ["tile.thread_id"] = true, ["tile.lane_id"] = true, ["tile.agent_thread_id"] = true, ["tile.elect"] = true,
  ["tile.atomic"] = true, ["tile.atomic_cas"] = true, ["tile.store"] = true, ["tile.load"] = true,
}

-- The value of the single uniform operand i (a lane-varying value whose lanes
-- agree, like a warpgroup index from the lowered thread id, is uniform), or an
-- error naming the op.
local function uniform(rec, x, what)
  if varying(x) then
    local v
    for _, y in pairs(x) do
      if v == nil then v = y elseif y ~= v then
        error(("emulate: %s at %s has a lane-varying %s, which is not modelled"):format(rec.name, rec.loc, what), 0)
      end
    end
    return v
  end
  return x
end

-- The value of x over the active lanes: a lane-varying value whose lanes
-- agree (a loop run by one lane under an scf.if, its condition per lane) is
-- that value; else the error of uniform.
local function uniform_over(rec, x, ctx, what)
  if varying(x) then
    local v = x[ctx.mask[1]]
    for _, l in ipairs(ctx.mask) do
      if x[l] ~= v then return uniform(rec, x, what) end
    end
    return v
  end
  return x
end

-- Pipelines: per CTA, per create op.
local function pipe_of(R, W, x, rec)
  if type(x) ~= "table" or x.kind ~= "pipe" then error("emulate: " .. rec.name .. " at " .. rec.loc .. ": no pipeline handle", 0) end
  return x
end

local function stage_bar(p, index, empty) return SLOT_BASE + 8 * (p.base + 2 * index + empty) end

-- The arrival of a producer / consumer participant group (arrive_per_group):
-- the warps of each group that runs the op sync unless under an elect, then
-- one lane of the lowest of them arrives. fn(n) makes the arrivals.
local function per_group(R, W, rec, ctx, groups, sync, fn)
  local any = false
  for gi, gm in ipairs(groups) do
    local g = ctx.exec & gm
    if g ~= 0 and (g >> W.w) & 1 == 1 then
      any = true
      if sync and not ctx.narrow and popcount(g) > 1 then
        R:rendezvous(W, rec, ("group %d of op %d"):format(gi, rec.id), popcount(g),
          ("the sync of participant %d before %s at %s"):format(gi - 1, rec.name, rec.loc))
      end
      if ctx.narrow then
        fn(#ctx.mask)
      elseif W.w == lowest_bit(g) then
        fn(1)
      end
    elseif g ~= 0 then
      any = true
    end
  end
  if not any then
    error(("emulate: %s at %s runs on warps none of which is a participant of its side"):format(rec.name, rec.loc), 0)
  end
end

local handlers = {}

-- The op models: emulate_tile.lua (the authoring level), registered at the end.


-- n more ops run at rec: a loop without a synchronizing op takes no steps, so
-- the ops are bounded too (a handler that loops over elements counts them).
function Run:tick(rec, n)
  self.ops = self.ops + n
  if self.ops > self.max_ops then
    error(("emulate: more than %d ops run (max_ops) at %s: a loop that does not end, or raise max_ops")
      :format(self.max_ops, rec.loc), 0)
  end
end

-- Runs a block over ctx.mask; returns the terminator's operand values.
function exec_block(R, W, blk, args, ctx)
  local vals = W.vals
  for i, a in ipairs(blk.args) do vals[a] = args[i] end
  for _, rec in ipairs(blk.ops) do
    local name = rec.name
    R:tick(rec, 1)
    local ins = {}
    for i, id in ipairs(rec.ins) do ins[i] = vals[id] end
    if name == "scf.yield" or name == "scf.condition" then return ins end
    local outs
    if name == "scf.for" then
      local lb, ub, step = uniform(rec, ins[1], "lower bound"), uniform(rec, ins[2], "upper bound"),
        uniform(rec, ins[3], "step")
      local iters = { table.unpack(ins, 4) }
      local body = rec.regions[1][1]
      local i = lb
      while i < ub do
        local a = { i }
        for k2, v in ipairs(iters) do a[k2 + 1] = v end
        iters = exec_block(R, W, body, a, ctx)
        i = i + step
      end
      outs = iters
    elseif name == "scf.if" then
      local c = ins[1]
      if not varying(c) then
        local blocks = rec.regions[c ~= 0 and 1 or 2]
        outs = blocks and blocks[1] and exec_block(R, W, blocks[1], {}, ctx) or {}
      else
        local tm, em = {}, {}
        for _, l in ipairs(ctx.mask) do
          if c[l] ~= 0 then tm[#tm + 1] = l else em[#em + 1] = l end
        end
        local to, eo = {}, {}
        if #tm > 0 and rec.regions[1][1] then
          to = exec_block(R, W, rec.regions[1][1], {}, setmetatable({ mask = tm }, { __index = ctx }))
        end
        if #em > 0 and rec.regions[2] and rec.regions[2][1] then
          eo = exec_block(R, W, rec.regions[2][1], {}, setmetatable({ mask = em }, { __index = ctx }))
        end
        outs = {}
        for r = 1, #rec.outs do
          local v = setmetatable({}, LV)
          for _, l in ipairs(tm) do v[l] = at(to[r], l) end
          for _, l in ipairs(em) do v[l] = at(eo[r], l) end
          outs[r] = v
        end
      end
    elseif name == "scf.while" then
      local cur = ins
      while true do
        local c = exec_block(R, W, rec.regions[1][1], cur, ctx)
        local fwd = { table.unpack(c, 2) }
        if uniform_over(rec, c[1], ctx, "condition") == 0 then
          outs = fwd
          break
        end
        cur = exec_block(R, W, rec.regions[2][1], fwd, ctx)
      end
    else
      local h = handlers[name]
      if h then
        outs = h(R, W, rec, ins, ctx)
      elseif rec.arith or name:match "^arith%." then
        local f = rec.arith
        if not f then -- compiled at its first run (an op never run raises nothing)
          f = compile_arith(rec.op)
          rec.arith = f
        end
        local a, b, c = ins[1], ins[2], ins[3]
        local va, vb, vc = varying(a), varying(b), varying(c)
        if not (va or vb or vc) then
          outs = { f(a, b, c) }
        else
          local v = setmetatable({}, LV)
          for _, l in ipairs(ctx.mask) do
            local x, y, z = a, b, c
            if va then x = a[l] end
            if vb then y = b[l] end
            if vc then z = c[l] end
            v[l] = f(x, y, z)
          end
          outs = { v }
        end
      else
        not_modelled(rec)
      end
    end
    for i, id in ipairs(rec.outs) do vals[id] = outs[i] end
  end
  return {}
end

-- }===

-- {=== setting up and stepping

local function all_lanes()
  local m = {}
  for l = 0, 31 do m[#m + 1] = l end
  return m
end

-- Arguments: a pointer parameter takes a byte string (or a table of bytes,
-- or a number of zero bytes { bytes = n }) copied into a fresh global
-- buffer, or an address; other parameters numbers.
function Run:setup_args()
  local k = self.k
  local cache = self.o._cache
  if cache and cache.base then -- the checker's later runs: the same arguments, the initial bytes shared
    self.global = setmetatable({}, { __index = cache.base })
    self.buffers, self.args, self.next_global = cache.buffers, cache.args, cache.next_global
    return
  end
  for i, p in ipairs(k.params) do
    local a = self.o.args and self.o.args[i]
    if a == nil then error(("emulate: argument %d (%s) is missing"):format(i, p.type), 0) end
    if p.kind == "ptr" then
      if type(a) == "string" or type(a) == "table" then
        local bytes = a
        if type(a) == "table" and a.bytes then bytes = a.bytes end -- zeros: nothing stored
        local base, n = self:alloc_global(bytes)
        self.buffers[i] = { base = base, n = n }
        self.args[i] = base
      else
        self.args[i] = a
      end
    else
      self.args[i] = a
    end
  end
  if cache then
    cache.base, cache.buffers, cache.args, cache.next_global = self.global, self.buffers, self.args, self.next_global
    self.global = setmetatable({}, { __index = cache.base })
  end
end

function Run:start()
  self:setup_args()
  local k = self.k
  self.grid = self.o.grid or 1
  self.gspace = { is_global = true, shadow_w = {}, shadow_r = {}, granule = 4 } -- 4: no false sharing of i32s
  self.gbars, self.gbar_list = {}, {}
  local csize = k.cluster or 1
  if self.grid % csize ~= 0 then
    error(("emulate: a grid of %d CTAs is not a whole number of clusters of %d"):format(self.grid, csize), 0)
  end
  for c = 0, self.grid - 1 do
    local cta = { id = c, shared = {}, shadow_w = {}, shadow_r = {}, bars = {}, bar_list = {}, syncs = {},
                  sync_list = {}, pipes = {}, start = self:new_actor(), remote = {}, live = k.warps,
                  rank = c % csize, remote_of = (" of CTA %d"):format(c), nbars = {} }
    self.actors[cta.start] = { label = ("the start of CTA %d"):format(c) }
    self.ctas[c + 1] = cta
    for w = 0, k.warps - 1 do
      local id = self:new_actor()
      local W = { id = id, actor = id, w = w, cta = cta, vals = {}, vc = { [id] = 1, [cta.start] = 1 }, seen = {}, bulk_open = {},
                  bulk_groups = {}, kind = "warp", done = false, nsync = 0, role = "kernel" }
      local role = self.o.roles and self.o.roles[w] -- roles the lowering erased (tile.agent), by warp
      if role then W.role = role end
      W.label = ("%s warp %d%s"):format(role or "kernel", w, self.grid > 1 and (" (CTA %d)"):format(c) or "")
      W.key = "w" .. id
      self.actors[id] = W
      self.warps[#self.warps + 1] = W
      local ctx = { mask = all_lanes(), exec = (1 << k.warps) - 1, agent_first = 0, narrow = false }
      W.co = coroutine.create(function()
        exec_block(self, W, k.body, self.args, ctx)
        -- every bulk store completes before the CTA exits
        self:drain_s2g(W, 0)
        if #W.bulk_open > 0 then
          W.bulk_groups[#W.bulk_groups + 1] = W.bulk_open
          W.bulk_open = {}
          self:drain_s2g(W, 0)
        end
      end)
    end
  end
  for _, W in ipairs(self.warps) do
    self.starting = W
    self:resume(W)
  end
  self.starting = nil
end

-- Resume warp W until its next request (or its end).
function Run:resume(W, value)
  local ok, req = coroutine.resume(W.co, value)
  if not ok then
    if type(req) == "table" and getmetatable(req) == Violation then error(req, 0) end
    error(req, 0)
  end
  if coroutine.status(W.co) == "dead" then
    W.done, W.req = true, nil
    local cta = W.cta
    cta.exit_vc = cta.exit_vc or {}
    vc_join(cta.exit_vc, W.vc)
    cta.live = cta.live - 1
    if cta.live == 0 then
      -- the CTA exits: every access of another CTA to its shared memory must happen before
      cta.exited = true
      for _, r in ipairs(cta.remote) do
        if (cta.exit_vc[r.actor] or 0) < r.clock then
          violation("dsmem", ("CTA %d exits (its last warp, %s, finished) while %s's access at %s to its shared memory is not ordered before the exit (a missing cluster barrier before the exit)")
            :format(cta.id, W.label, r.label, r.loc))
        end
      end
    end
  else
    W.req = req
  end
end

-- The actors that can move now, in a fixed order (warps, then copies).
function Run:runnable()
  local out = {}
  for _, W in ipairs(self.warps) do
    if not W.done and W.req.ready() then out[#out + 1] = W end
  end
  for _, c in ipairs(self.copies) do out[#out + 1] = c end
  return out
end

function Run:step(a)
  self.steps = self.steps + 1
  if self.steps > self.max_steps then
    error(("emulate: more than %d steps (max_steps): a livelock, or raise max_steps"):format(self.max_steps), 0)
  end
  if a.kind == "copy" then
    self.trace[#self.trace + 1] = ("%s: %s at %s completes (%d bytes)"):format(a.label, a.rec.name, a.rec.loc, a.bytes)
    self:complete_g2s(a)
    return
  end
  local req = a.req
  self.trace[#self.trace + 1] = ("%s: %s at %s"):format(a.label, req.rec.name, req.rec.loc)
  a.nsync = a.nsync + 1
  local r = req.perform()
  self:resume(a, r)
end

-- A live warp's position: its op and how many steps it took (kept on its
-- request: a step makes a new one)
local function position(W)
  local req = W.req
  local p = req.pos
  if not p then
    p = req.rec.id .. ":" .. W.nsync
    req.pos = p
  end
  return p
end

-- The synchronization state, as a string (the checker's state hash).
function Run:state_key()
  local parts = {}
  if self.o.symmetry == false then
    for _, W in ipairs(self.warps) do
      parts[#parts + 1] = W.done and "d" or position(W)
    end
  else
    -- symmetry: the warps of one CTA in one agent / executor group are
    -- interchangeable; their positions are kept as a sorted multiset
    local groups, order = {}, {}
    for _, W in ipairs(self.warps) do
      local g = W.gkey -- the group's key, kept while the warp's group is the same
      if not g or W.gkey_grp ~= W.grp then
        g = W.cta.id .. "/" .. tostring(W.grp)
        W.gkey, W.gkey_grp = g, W.grp
      end
      local t = groups[g]
      if not t then
        t = {}
        groups[g] = t
        order[#order + 1] = g
      end
      t[#t + 1] = W.done and "d" or position(W)
    end
    for _, g in ipairs(order) do
      local t = groups[g]
      table.sort(t)
      parts[#parts + 1] = g .. "=" .. table.concat(t, ";")
    end
  end
  for _, cta in ipairs(self.ctas) do
    for _, b in ipairs(cta.bar_list) do
      parts[#parts + 1] = b.completed .. "/" .. b.pending .. "/" .. b.tx
    end
    for _, s in ipairs(cta.sync_list) do parts[#parts + 1] = s.gen .. "/" .. s.arrived end
  end
  for _, c in ipairs(self.copies) do parts[#parts + 1] = c.key end
  for _, a in ipairs(self.gbar_list) do parts[#parts + 1] = "g" .. (self.global[a] or 0) end
  return table.concat(parts, ",")
end

-- The state of every barrier, one line each.
function Run:barrier_report()
  local lines = {}
  for _, cta in ipairs(self.ctas) do
    for _, b in ipairs(cta.bar_list) do
      lines[#lines + 1] = ("  %s%s: %d phase(s) completed (current parity %d), %d of %d arrivals pending, tx-count %d")
        :format(b.name, self.grid > 1 and (" (CTA %d)"):format(cta.id) or "", b.completed, b.completed & 1,
                b.pending, b.count, b.tx)
    end
  end
  return table.concat(lines, "\n")
end

function Run:deadlock()
  local lines = { "deadlock: no warp can move and some have not finished" }
  local txbad
  for _, W in ipairs(self.warps) do
    if not W.done then
      lines[#lines + 1] = ("  %s %s at %s (%s)"):format(W.label, W.req.describe(), W.req.rec.loc, W.req.rec.name)
    end
  end
  for _, cta in ipairs(self.ctas) do
    for _, b in ipairs(cta.bar_list) do
      if b.pending == 0 and b.tx ~= 0 then txbad = b end
    end
  end
  local kind = "deadlock"
  for _, W in ipairs(self.warps) do
    if not W.done and W.req.rec.name:find "wait" and W.wait_addr and not W.cta.bars[W.wait_addr] then
      kind = "uninitialized"
      table.insert(lines, 2, ("%s waits at %s on %s, which no one initialized"):format(W.label, W.req.rec.loc,
        self:barrier_name(W.cta, W.wait_addr)))
      break
    end
  end
  lines[#lines + 1] = "barriers:"
  lines[#lines + 1] = self:barrier_report()
  for _, cta in ipairs(self.ctas) do
    for _, b in ipairs(cta.bar_list) do
      if b.pending > 0 and b.pending < b.count then
        lines[#lines + 1] = ("note: %s: %d of %d arrivals came for phase %d: an arrive count larger than the arrivals, or a missing arrive")
          :format(b.name, b.count - b.pending, b.count, b.completed)
      end
    end
  end
  if txbad then
    kind = "tx_bytes"
    table.insert(lines, 2, ("transaction-byte mismatch: %s has all its arrivals but a tx-count of %d bytes"):format(txbad.name, txbad.tx))
  end
  return { kind = kind, message = table.concat(lines, "\n") }
end

-- At the end: no phase left half-arrived, no transaction bytes outstanding.
function Run:final_check()
  for _, cta in ipairs(self.ctas) do
    for _, b in ipairs(cta.bar_list) do
      if b.tx ~= 0 then
        return { kind = "tx_bytes", message = ("transaction-byte mismatch: %s ends with a tx-count of %d bytes (phase %d, %d of %d arrivals pending)")
          :format(b.name, b.tx, b.completed, b.pending, b.count) }
      end
      if b.pending ~= b.count then
        return { kind = "arrive_count", message = ("arrive-count mismatch: %s ends with phase %d half arrived: %d of %d arrivals pending")
          :format(b.name, b.completed, b.pending, b.count) }
      end
    end
  end
end

-- The fewest completed phases of any mbarrier that was used (a ring wrapped
-- twice has every stage barrier at 2 or more); a cluster barrier is no ring.
function Run:min_phases()
  local m
  for _, cta in ipairs(self.ctas) do
    for _, b in ipairs(cta.bar_list) do
      if not b.cluster and (not m or b.completed < m) then m = b.completed end
    end
  end
  return m
end

-- Run to the end (or a violation); returns nil or a failure {kind, message}.
function Run:go()
  local ok, err = pcall(function()
    self:start()
    while true do
      local rs = self:runnable()
      if #rs == 0 then
        local live = false
        for _, W in ipairs(self.warps) do live = live or not W.done end
        if live then return self:deadlock() end
        return self:final_check()
      end
      local i = (#rs == 1 and not self.o._por) and 1 or self.choose(self, rs)
      if i == nil then return { kind = "pruned" } end
      self:step(rs[i])
    end
  end)
  if ok then return err end
  if type(err) == "table" and getmetatable(err) == Violation then
    if self.starting then -- in a warp's code before its first synchronizing op
      self.trace[#self.trace + 1] = ("%s: tile.kernel at %s"):format(self.starting.label, self.k.loc)
    end
    return { kind = err.kind, message = err.message }
  end
  error(err, 0)
end

-- }===

-- {=====================================================================
-- Policies and the public entry points
-- ======================================================================

local function rng(seed)
  local s = (seed or 1) & 0xffffffff
  if s == 0 then s = 0x9e3779b9 end
  return function(n)
    s = s ~ ((s << 13) & 0xffffffff)
    s = s ~ (s >> 17)
    s = s ~ ((s << 5) & 0xffffffff)
    return s % n + 1
  end
end

local function policy_chooser(policy, seed)
  policy = policy or "round_robin"
  if policy == "round_robin" then
    local last = 0
    return function(_, rs)
      for i, a in ipairs(rs) do
        if a.id > last then
          last = a.id
          return i
        end
      end
      last = rs[1].id
      return 1
    end
  elseif policy == "random" then
    local r = rng(seed)
    return function(_, rs) return r(#rs) end
  elseif policy == "adversarial" then
    -- the same warp runs ahead as long as it can; copies complete as late as possible
    local last
    return function(_, rs)
      for i, a in ipairs(rs) do
        if a == last then return i end
      end
      for i, a in ipairs(rs) do
        if a.kind == "warp" then
          last = a
          return i
        end
      end
      return 1
    end
  end
  error("emulate: unknown policy '" .. tostring(policy) .. "' (round_robin, random, adversarial)", 0)
end

local function format_trace(trace, limit)
  local lines = {}
  local from = 1
  if limit and #trace > limit then
    from = #trace - limit + 1
    lines[1] = ("  ... %d earlier steps"):format(from - 1)
  end
  for i = from, #trace do lines[#lines + 1] = ("  %d. %s"):format(i, trace[i]) end
  return table.concat(lines, "\n")
end
M.format_trace = format_trace

local decoded = setmetatable({}, { __mode = "k" })

local function prepare(k)
  local kop = kernel_op(k)
  return decode(kop)
end

-- run(kernel, opts) -> result: ok, error (kind, message), report (text with the
-- interleaving), steps, trace, read(i [, n]) / read_global(addr, n) -> string.
function M.run(k, o)
  o = o or {}
  local dk = prepare(k)
  -- tilua.protocol's replay: o.policy may be a function (run, ready actors) -> index,
  -- and o.on_step(run, actor) is called before every step
  local R = new_run(dk, o, type(o.policy) == "function" and o.policy or policy_chooser(o.policy, o.seed))
  if o.on_step then
    local step = R.step
    R.step = function(run, a) o.on_step(run, a) return step(run, a) end
  end
  local fail = R:go()
  local res = { ok = fail == nil, steps = R.steps, trace = R.trace, min_phases = R:min_phases(), run = R }
  if fail then
    res.error = fail
    res.report = ("emulate: %s\n%s\ninterleaving (%d steps):\n%s"):format(fail.kind, fail.message, #R.trace,
      format_trace(R.trace, o.trace_limit or 60))
  end
  function res.read_global(addr, n)
    local out = {}
    for i = 0, n - 1 do out[i + 1] = string.char(R.global[addr + i] or 0) end
    return table.concat(out)
  end
  function res.read(i, n)
    local b = R.buffers[i]
    if not b then error("emulate: argument " .. i .. " is not a buffer", 2) end
    return res.read_global(b.base, n or b.n)
  end
  return res
end

-- check(kernel, opts) -> result: ok, states, runs, violation (kind, message),
-- report, budget_exceeded. Depth-first over the choice of the actor that moves
-- at each step where more than one can, pruning states already seen, with
-- sleep sets (a partial-order reduction): after the schedules that start with
-- actor a are explored, a sleeps in its siblings' subtrees until a step
-- dependent with a's next one runs (steps of different actors on different
-- synchronization objects, two arrivals or two waits on one object, commute).
-- A state is explored again only with the actors asleep both times.
-- opts.max_states (default 20000) and opts.max_seconds (none: the check after
-- every pass gives one) bound it: budget_exceeded, and the report says which.

-- The step an actor would take next: { obj, acc } (see request).
-- acc "n": an arrival taken alone (it commutes with waits too, and nothing can
-- disable it): one that does not complete its phase; at a barrier whose waits
-- nothing can disable, any; at an mbarrier, any unless the kernel probes
-- mbarriers (a probe's result would depend on the order): the waits that
-- its completion would overtake are reported (Run:complete_phase, Run:wait).
-- acc "e": a passing wait taken alone.
local function step_of(a, probes)
  if a.kind == "copy" then -- an arrival of bytes on an mbarrier
    local b = a.cta.bars[a.bar]
    local completes = not b or (b.pending == 0 and b.tx == a.bytes)
    return { obj = a.obj, acc = (probes and completes) and "a" or "n" }
  end
  local acc = a.req.acc
  if acc == "am" then
    acc = (probes and a.req.completes and a.req.completes()) and "a" or "n"
  elseif acc == "ae" then
    acc = "n"
  elseif acc == "a" and a.req.completes and not a.req.completes() then
    acc = "n"
  end
  if acc == "re" or acc == "rp" then acc = "e" end
  -- an arrival on a global word (a generic barrier's counter), and a wait
  -- there that passes (a spin's load, or its CAS that resets): taken alone,
  -- arrivals first (docs/protocol.md, "Steps on global words"), yet
  -- dependent with the word's other steps
  if acc == "ag" then return { obj = a.req.obj, acc = "a", eager = 1 } end
  if acc == "rg" then return { obj = a.req.obj, acc = "r", eager = 2 } end
  if acc == "wg" then return { obj = a.req.obj, acc = "w", eager = 2 } end
  return { obj = a.req.obj, acc = acc }
end
local function independent(x, y)
  if x.obj == nil or y.obj == nil then return false end
  if x.obj ~= y.obj then return true end
  local p, q = x.acc, y.acc
  if p == "e" then p = "r" end
  if q == "e" then q = "r" end
  if p == "n" or q == "n" then return p ~= "w" and q ~= "w" end
  return p == q and (p == "a" or p == "r")
end
local function actor_key(a) return a.key end
local function cluster_of(a, size) return a.cta.id // size end

-- shortest(dk, o, kind, bound) -> failure, trace, exhausted: a shortest
-- schedule (fewest steps) reaching a violation of `kind`, breadth-first over
-- the schedules with the checker's state hashing (a state first reached at
-- depth d is not expanded again deeper), shorter than `bound` steps; nil when
-- there is none (the depth-first one is a shortest), or when the time budget
-- (o.shortest_seconds, 0.5 s) runs out (exhausted true). Each node is its path
-- of actor keys, replayed from the start; its children are replayed one step
-- further. No reduction: a sleep set or an eager step could lengthen a path.
local function shortest(dk, o, kind, bound)
  local deadline = os.clock() + (o.shortest_seconds or 0.5)
  local ro = setmetatable({ _por = true }, { __index = o }) -- the chooser sees every step
  -- replay path, then take `extra` (a key) if given; -> failure, run, key and
  -- runnable keys at the next choice (nil where the run ended first)
  local function replay(path, extra)
    local depth, key, keys = 0, nil, nil
    local R = new_run(dk, ro, function(run, rs)
      depth = depth + 1
      local want = path[depth] or (depth == #path + 1 and extra)
      if not want then
        key, keys = run:state_key(), {}
        for i, a in ipairs(rs) do keys[i] = actor_key(a) end
        return nil
      end
      for i, a in ipairs(rs) do
        if actor_key(a) == want then return i end
      end
      error("verify-protocol: a replay diverged", 0)
    end)
    local ok, fail = pcall(R.go, R) -- a model error on a path the first search did not take: no violation
    return ok and fail or { kind = "error" }, R, key, keys
  end
  local fail, _, key, keys = replay({})
  if fail.kind ~= "pruned" then return nil, nil, false end -- the run ends before its first choice
  local seen = { [key] = true }
  local level = { { path = {}, keys = keys } }
  for _ = 1, bound - 1 do
    local next_level = {}
    for _, node in ipairs(level) do
      for _, a in ipairs(node.keys) do
        if os.clock() > deadline then return nil, nil, true end
        local f, run, k2, ks = replay(node.path, a)
        if f and f.kind == kind then return f, run.trace, false end
        if f and f.kind == "pruned" and not seen[k2] then
          seen[k2] = true
          local p = { table.unpack(node.path) }
          p[#p + 1] = a
          next_level[#next_level + 1] = { path = p, keys = ks }
        end
      end
    end
    if #next_level == 0 then break end
    level = next_level
  end
  return nil, nil, false
end

function M.check(k, o)
  o = o or {}
  local dk = prepare(k)
  local budget = o.max_states or 20000
  local por = o.por ~= false
  o = setmetatable({ _cache = {}, _por = por }, { __index = o })
  local visited, states, runs = {}, 0, 0
  local frames = {}
  local t0 = os.clock()
  local exceeded = false
  local min_phases
  while true do
    if o.max_seconds and os.clock() - t0 > o.max_seconds then -- a time budget, between runs
      exceeded = "time"
      break
    end
    runs = runs + 1
    local depth = 0
    local next_sleep = {}
    local R
    local chooser = function(run, rs)
      depth = depth + 1
      local f = frames[depth]
      if not f then
        local sleep = next_sleep
        if #rs > 1 or not por then
          local key = run:state_key()
          local old = visited[key]
          if old then
            if not por then return nil end
            local sub, inter = true, {}
            for a, st in pairs(old) do
              if sleep[a] then inter[a] = st else sub = false end
            end
            if sub then return nil end
            sleep = inter
            visited[key] = inter
          else
            states = states + 1
            if states > budget then
              exceeded = true
              return nil
            end
            local copy = {}
            for a, st in pairs(sleep) do copy[a] = st end
            visited[key] = copy
          end
        end
        local cands, steps = {}, {}
        -- clusters that share no synchronization object: the enabled actors
        -- of one cluster are a persistent set (the others' steps commute with
        -- theirs, and cannot enable or disable them), so one cluster runs
        -- while the others wait: their states add up instead of multiplying
        -- In a kernel whose clusters synchronize through global words (a
        -- StreamK fixup), the same holds for the steps on objects of one
        -- cluster (every object but a global word): the enabled ones of the
        -- lowest cluster that has any go first, the steps on global words
        -- (the only ones that order clusters) when no cluster has another.
        local only, inner
        if por and o.clusters ~= false and #run.ctas > dk.cluster then
          if dk.cluster_local then
            for _, a in ipairs(rs) do
              local c = cluster_of(a, dk.cluster)
              if not only or c < only then only = c end
            end
          else
            inner = {}
            for _, a in ipairs(rs) do
              local obj = step_of(a, dk.probes).obj
              if obj == nil then -- any object: no reduction
                only = nil
                break
              end
              if not obj:match "^g%d" then
                inner[a] = true
                local c = cluster_of(a, dk.cluster)
                if not only or c < only then only = c end
              end
            end
          end
        end
        for _, a in ipairs(rs) do
          local key = actor_key(a)
          if not sleep[key] and (not only or (cluster_of(a, dk.cluster) == only and (not inner or inner[a]))) then
            cands[#cands + 1] = key
            steps[key] = step_of(a, dk.probes)
          end
        end
        if #cands == 0 then return nil end -- every move was explored from an equivalent state
        if por and o.eager ~= false then
          -- an arrival that does not complete its phase is always enabled and
          -- commutes with every other step: it alone is a persistent set
          -- so is a passing wait at a barrier every warp of the CTA (or
          -- cluster) must arrive at again before it can complete again
          -- so is a step on a global word (eager: arrivals first, then waits;
          -- the bound of docs/protocol.md, "Steps on global words")
          local pick, rank = nil, 3
          for _, key in ipairs(cands) do
            local st = steps[key]
            local r = (st.acc == "n" or st.acc == "e") and 0 or st.eager or 3
            if r < rank then pick, rank = key, r end
            if r == 0 then break end
          end
          if pick then cands = { pick } end
        end
        f = { cands = cands, steps = steps, idx = 1, sleep = sleep }
        frames[depth] = f
      end
      local want = f.cands[f.idx]
      local idx
      for i, a in ipairs(rs) do
        if actor_key(a) == want then
          idx = i
          break
        end
      end
      assert(idx, "verify-protocol: a replay diverged")
      -- the child's sleep set: what slept here or was explored before `want`,
      -- independent of want's step
      local st = f.steps[want]
      next_sleep = {}
      if por then
        local live = {}
        for _, a in ipairs(rs) do live[actor_key(a)] = a end
        for a, s2 in pairs(f.sleep) do
          if live[a] then s2 = step_of(live[a], dk.probes) end -- the sleeper's step as of now
          if independent(s2, st) then next_sleep[a] = s2 end
        end
        for i = 1, f.idx - 1 do
          local a = f.cands[i]
          if independent(f.steps[a], st) then next_sleep[a] = f.steps[a] end
        end
      end
      return idx
    end
    R = new_run(dk, o, chooser)
    local fail = R:go()
    if fail and fail.kind ~= "pruned" then
      local res = { ok = false, states = states, runs = runs, violation = fail, trace = R.trace,
                    first_steps = #R.trace }
      if o.shortest ~= false then
        local sfail, strace, exhausted = shortest(dk, o, fail.kind, #R.trace)
        res.shortest = not exhausted
        if sfail then res.violation, res.trace = sfail, strace end
      end
      res.seconds = os.clock() - t0
      res.report = ("verify-protocol: %s\n%s\ncounterexample (%d steps%s):\n%s"):format(res.violation.kind,
        res.violation.message, #res.trace, res.shortest == false and ", the first found: no shorter one within the budget" or "",
        format_trace(res.trace, o.trace_limit))
      return res
    end
    if not fail then
      local m = R:min_phases()
      if m and (not min_phases or m < min_phases) then min_phases = m end
    end
    if exceeded then break end
    -- backtrack: the deepest frame with an untried choice
    while #frames > 0 and frames[#frames].idx >= #frames[#frames].cands do frames[#frames] = nil end
    if #frames == 0 then break end
    frames[#frames].idx = frames[#frames].idx + 1
  end
  local res = { ok = not exceeded, states = states, runs = runs, seconds = os.clock() - t0,
                budget_exceeded = exceeded and true, min_phases = min_phases }
  if exceeded == "time" then
    res.violation = { kind = "budget", message = ("time budget exceeded: %d states explored in %d runs, %.1f s (max_seconds = %g); the schedules after them were not checked")
      :format(states, runs, res.seconds, o.max_seconds) }
    res.report = "verify-protocol: " .. res.violation.message
  elseif exceeded then
    res.violation = { kind = "budget", message = ("state budget exceeded: %d states explored (max_states = %d) in %d runs; the schedules after them were not checked")
      :format(states, budget, runs) }
    res.report = "verify-protocol: " .. res.violation.message
  else
    res.report = ("verify-protocol: no violation in %d states (%d runs)"):format(states, runs)
  end
  return res
end

M.SHARED_BASE, M.GLOBAL_BASE = SHARED_BASE, GLOBAL_BASE

-- The extension point: ext(handlers, api) adds or wraps op handlers (a
-- handler is fn(R, W, rec, ins, ctx) -> results); api holds the helpers they
-- use. emulate_nvvm.lua (the nvvm ops after lowering) registers through it.
-- One table for every extension: a model may add what later ones use
-- (emulate_tile.lua adds test_phase and per_address).
local api = { M = M, Run = Run, request = request, eval_lanes = eval_lanes, uniform = uniform, at = at,
              varying = varying, LV = LV, passes = passes, codec_of = codec_of, violation = violation,
              not_modelled = not_modelled, SHARED_BASE = SHARED_BASE, SLOT_BASE = SLOT_BASE,
              DSMEM_BASE = DSMEM_BASE, kernel_op = kernel_op, vc_copy = vc_copy, vc_join = vc_join,
              stage_bar = stage_bar, pipe_of = pipe_of, per_group = per_group, completes_on = completes_on,
              lowest_bit = lowest_bit, popcount = popcount, arrive_counts = arrive_counts, exec_block = exec_block,
              bar_ref = bar_ref, PROBES = PROBES, CROSS_CTA = CROSS_CTA, GLOBAL_BASE = GLOBAL_BASE,
              compile_arith = compile_arith, mem_of = mem_of,
              DECODERS = DECODERS, KERNEL_DECODERS = KERNEL_DECODERS }
function M.extend(ext)
  return ext(handlers, api)
end
M.extend(require "tilua.emulate_tile")
-- the authoring-level ops whose values differ per lane
for name in pairs(PER_LANE) do
  local h = handlers[name]
  if h then
    handlers[name] = function(R, W, rec, ins, ctx)
      rec.per_lane = true
      return h(R, W, rec, ins, ctx)
    end
  end
end
M.extend(require "tilua.emulate_nvvm")
M.extend(require "tilua.emulate_sched") -- the tile schedulers and the MODS probes
M.extend(require "tilua.emulate_mma") -- TMA tensor copies and wgmma
M.extend(require "tilua.emulate_nvvm_mma") -- their nvvm forms, and the nvvm cluster ops
M.extend(require "tilua.emulate_global") -- fences, strong accesses and spin loops on global words
M.extend(require "tilua.emulate_tileas") -- tile programs (the tileas dialect)
return M
