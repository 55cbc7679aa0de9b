-- tilua.emulate.memory: the run's memory (methods of the machine's Run,
-- emulate/machine.lua): global buffers, loads and stores of a codec's bytes,
-- and the race check of shared (and global) memory on vector clocks.
--
-- The race check keeps, per CTA and per granule, the last write (actor,
-- clock, loc) and the reads since (a set of records). Granules are as large
-- as the accesses allow (granule_of below): the answers are the byte-exact
-- ones. A
-- read of bytes whose last write is not ordered before it (a stage not yet
-- filled) is `unfilled`; a write of bytes whose last write or reads are not
-- ordered before it (a stage overwritten before it was released) `overwrite`.

local address = require "tilua.emulate.address"
local values = require "tilua.emulate.values"
local interp = require "tilua.emulate.interp"
local report = require "tilua.emulate.report"

local SHARED_BASE, DSMEM_BASE = address.SHARED_BASE, address.DSMEM_BASE
local GLOBAL_BASE, GLOBAL_SPACING = address.GLOBAL_BASE, address.GLOBAL_SPACING
local wrap = interp.wrap
local DATA = require("tilua.emulate.lanes").DATA
local violation = report.violation

local Memory = {}

-- A new global buffer of `bytes` (a string, a table of bytes, or a count of
-- zero bytes) -> its base address, its size.
function Memory:alloc_global(bytes)
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

-- The byte table of an address in warp W's CTA (a cluster address: the CTA
-- it names), the address in it, and that CTA.
function Memory:mem_of(W, addr)
  if addr >= DSMEM_BASE then
    local cta = self.ctas[((addr - DSMEM_BASE) >> 32) + 1]
    return cta.shared, SHARED_BASE + (addr & 0xffffffff), cta
  end
  if addr >= SHARED_BASE then return W.cta.shared, addr, W.cta end
  return self.global, addr
end

local function read_bytes(R, W, addr, n)
  local m, a = R:mem_of(W, addr)
  local out = {}
  for i = 0, n - 1 do out[i + 1] = m[a + i] or 0 end
  return out
end

-- {=== the race check (per CTA, per granule)

function Memory:who(actor)
  local a = self.actors[actor]
  return a and a.label or ("actor " .. actor)
end

local function range_of(sp, addr, n)
  if sp.is_global then return ("global bytes [0x%x, 0x%x)"):format(addr, addr + n) end
  return ("shared bytes [%d, %d)%s"):format(addr - SHARED_BASE, addr - SHARED_BASE + n, sp.remote_of or "")
end

-- The granule of space sp for an access of n bytes at addr. Unless o.granule
-- fixes it (R.fixed_granule), a space starts with granules of
-- address.MAX_GRANULE bytes (a tile program's tensors: MAX_TILE_GRANULE)
-- and halves them, re-keying what it keeps, the first time an access is not
-- aligned to them in address and size. Every access so far then covered
-- whole granules, so every byte of a granule has the same records: the
-- answers are those of granules of one byte, at a fraction of the work (a
-- TMA box of 16 KB is 1024 granules, not 16384).
local function granule_of(R, sp, addr, n)
  local g = sp.granule or R.granule
  if R.fixed_granule or (addr % g == 0 and n % g == 0) then return g end
  local ng = g
  while addr % ng ~= 0 or n % ng ~= 0 do ng = ng // 2 end
  local f = g // ng
  for _, key in ipairs { "shadow_w", "shadow_r" } do
    local fine = {}
    for q, v in pairs(sp[key]) do
      for i = 0, f - 1 do fine[q * f + i] = v end
    end
    sp[key] = fine
  end
  sp.granule = ng
  return ng
end

-- The first write of record w (a reduce-add's: and the unordered reduce-adds
-- before it, w.prior) that actor a with clock vc is not ordered after; nil:
-- every one is.
local function unordered_write(w, a, vc)
  repeat
    if w.actor ~= a and (vc[w.actor] or 0) < w.clock then return w end
    w = w.prior
  until not w
end

local WEAK_KEYS = { __mode = "k" } -- (the metatable of read_record's reader sets: one for all)

-- The record of a read by actor a with clock vc at loc: one for every granule
-- of the read, and of the actor's next reads at the same clock and op
-- (records are never changed); and the reader sets after it (nexts, below).
-- The readers of a granule are a set shared by every granule that the same
-- reads reached (never changed: a read moves a granule to the set with its
-- record added, made once per set and record: self.rnext), so that a large
-- write checks each distinct reader set once (a wgmma stage read by 8
-- warps in many small reads, then overwritten by a TMA box).
local function read_record(R, a, vc, loc)
  local clock = vc[a] or 0
  local e = R.read_recs[a]
  if not e or e[1] ~= clock or e[2] ~= loc then
    e = { clock, loc }
    R.read_recs[a] = e
  end
  local nexts = R.rnext[e]
  if not nexts then
    nexts = setmetatable({}, WEAK_KEYS)
    R.rnext[e] = nexts
  end
  return e, nexts
end

-- The reader set after reader set r (nil: none) takes record e of actor a.
local function next_readers(nexts, r, a, e)
  local nr = nexts[r or nexts]
  if not nr then
    nr = {}
    if r then for ra, x in pairs(r) do nr[ra] = x end end
    nr[a] = e -- one record for every granule of this read
    nexts[r or nexts] = nr
  end
  return nr
end

-- The granules of granule g that rows reads of n bytes at addr, stride bytes
-- apart, cover (a row's count at each row: the budget's work, machine.lua).
local function span(addr, n, rows, stride, g)
  local count = (addr + n - 1) // g - addr // g + 1
  if rows == 1 then return count end
  if stride % g == 0 then return rows * count end -- (every row aligned alike)
  count = 0
  for row = 0, rows - 1 do
    local at = addr + row * stride
    count = count + (at + n - 1) // g - at // g + 1
  end
  return count
end

-- rows reads of [addr, addr + n), stride bytes apart, by actor a with clock
-- vc at loc (e, nexts: their record, read_record's) in space cta's granules
-- of g bytes: checked against the writes before, then taken into the
-- granules' reader sets.
local function read_rows(R, cta, a, vc, e, nexts, addr, n, loc, rows, stride, g)
  local sw, sr = cta.shadow_w, cta.shadow_r
  local last_w, from, to = false, false, nil
  local row0 = addr
  for row = 0, rows - 1 do
    addr = row0 + row * stride
    for q = addr // g, (addr + n - 1) // g do
      local w = sw[q]
      if w == last_w then goto record end
      last_w = w
      if w == nil then
        if cta.is_global then goto record end -- the host wrote it
        violation("unfilled", ("%s at %s reads shared bytes [%d, %d) that nothing wrote yet (a stage read before it was filled); a wait for the fill is missing before the read at %s")
          :format(R:who(a), loc, addr - SHARED_BASE, addr - SHARED_BASE + n, loc))
      elseif unordered_write(w, a, vc) then
        w = unordered_write(w, a, vc)
        violation("unfilled", ("%s at %s reads %s that %s wrote at %s with no synchronization ordering the write before the read (%s); a barrier is missing: after the write at %s and before the read at %s")
          :format(R:who(a), loc, range_of(cta, addr, n), R:who(w.actor), w.loc,
                  cta.is_global and "a read of what another thread or CTA wrote with no barrier in between"
                  or "a stage read before it was filled", w.loc, loc))
      end
      ::record::
      local r = sr[q]
      if r == from then
        sr[q] = to
      elseif not (r and r[a] == e) then
        local nr = next_readers(nexts, r, a, e)
        from, to = r, nr
        sr[q] = nr
      end
    end
  end
end

-- Reads of a global space that nothing has written yet race with nothing
-- when they happen (the host wrote what they read); their records matter
-- only to a later write. So such a space (sp.unwritten: a log, 8 fields a
-- read) keeps them in order and takes them into its reader sets at its first
-- write, or when the log is long (apply_reads): the reader sets are those the
-- reads would have made at once (a read's record at a granule that shrank
-- since is its record at each smaller one, as granule_of re-keys it), at a
-- fraction of the work where no write comes (a tile program's inputs, read
-- by every program at every size the check tries).
local MAX_LOGGED = 8 * 4096
function Memory:apply_reads(sp)
  local log = sp.unwritten
  sp.unwritten = nil
  local g = sp.granule or self.granule
  for i = 1, #log, 8 do -- (nothing written: every check passes, as it did at the read)
    local a, e, nexts, addr, n, loc, rows, stride = table.unpack(log, i, i + 7)
    read_rows(self, sp, a, nil, e, nexts, addr, n, loc, rows, stride, g)
  end
end

-- A read of [addr, addr + n) of space cta (a CTA, or self.gspace) by actor a
-- with clock vc at loc; rows (default 1) such reads, stride bytes apart (the
-- rows of a tile: one call, as `rows` calls would check them).
function Memory:shadow_read(cta, a, vc, addr, n, loc, rows, stride)
  rows, stride = rows or 1, stride or 0
  self.shadow_calls = self.shadow_calls + 1 -- the budget's work (machine.lua), with the granules
  local g = granule_of(self, cta, addr, n)
  if rows > 1 and stride % g ~= 0 then g = granule_of(self, cta, addr + stride, n) end -- (every row aligned)
  self.granules = self.granules + span(addr, n, rows, stride, g)
  local e, nexts = read_record(self, a, vc, loc)
  local log = cta.unwritten
  if log then -- (nothing wrote this global space: apply_reads)
    local k = #log
    log[k + 1], log[k + 2], log[k + 3], log[k + 4] = a, e, nexts, addr
    log[k + 5], log[k + 6], log[k + 7], log[k + 8] = n, loc, rows, stride
    if k + 8 >= MAX_LOGGED then self:apply_reads(cta) end
    return
  end
  read_rows(self, cta, a, vc, e, nexts, addr, n, loc, rows, stride, g)
end

-- Reads of 16 bytes at SHARED_BASE + 16 q for each q of qs, in order, by
-- actor a with clock vc at loc: what a shadow_read of each does, in one call
-- (a wgmma's operands: hundreds of granules, none adjacent to the last).
function Memory:shadow_read_granules(cta, a, vc, qs, loc)
  if #qs == 0 then return end
  local first = SHARED_BASE + (qs[1] << 4)
  if granule_of(self, cta, first, 16) ~= 16 then -- (granules halved below 16 bytes: one read each)
    for _, q in ipairs(qs) do self:shadow_read(cta, a, vc, SHARED_BASE + (q << 4), 16, loc) end
    return
  end
  local sw, sr = cta.shadow_w, cta.shadow_r
  local e, nexts = read_record(self, a, vc, loc)
  self.granules, self.shadow_calls = self.granules + #qs, self.shadow_calls + 1
  local base = SHARED_BASE >> 4
  local last_w, from, to = false, false, nil
  for i = 1, #qs do -- (a numeric loop: a step of ipairs is a call)
    local q = qs[i] + base
    local w = sw[q]
    if w ~= last_w then
      last_w = w
      if w == nil then
        self:shadow_read(cta, a, vc, q << 4, 16, loc) -- (reports it)
      elseif unordered_write(w, a, vc) then
        self:shadow_read(cta, a, vc, q << 4, 16, loc)
      end
    end
    local r = sr[q] -- (the record as shadow_read's loop keeps it: inline, the hot path)
    if r == from then
      sr[q] = to
    elseif not (r and r[a] == e) then
      from, to = r, next_readers(nexts, r, a, e)
      sr[q] = to
    end
  end
end

-- A write, as shadow_read; addr may be a list of addresses instead, each the
-- start of a row of n bytes (stmatrix's rows: one call, as one call a row
-- would check them); reduce: an atomic reduce-add (shadow_write_reduce).
function Memory:shadow_write(cta, a, vc, addr, n, loc, rows, stride, reduce)
  if cta.unwritten then self:apply_reads(cta) end -- (the reads before, in order)
  local list = type(addr) == "table" and addr or nil
  rows, stride = list and #list or rows or 1, stride or 0
  self.shadow_calls = self.shadow_calls + 1
  local g
  if list then
    g = granule_of(self, cta, list[1], n)
    for i = 1, #list do
      local x = list[i]
      if x % g ~= 0 then g = granule_of(self, cta, x, n) end
    end
  else
    g = granule_of(self, cta, addr, n)
    if rows > 1 and stride % g ~= 0 then g = granule_of(self, cta, addr + stride, n) end
  end
  local sw, sr = cta.shadow_w, cta.shadow_r
  local clock = vc[a] or 0
  local w_rec = self.write_recs[a] -- as read_recs (shadow_read)
  if not w_rec or w_rec.clock ~= clock or w_rec.loc ~= loc or w_rec.reduce ~= reduce then
    w_rec = { actor = a, clock = clock, loc = loc, reduce = reduce }
    self.write_recs[a] = w_rec
  end
  local after = reduce and {} -- reduce: the record that follows each unordered reduce-add's (made once a call)
  local last_w, last_r = false, false -- shared records and reader sets: each checked once (shadow_read)
  local row0 = addr
  for row = 0, rows - 1 do
    if list then addr = list[row + 1] else addr = row0 + row * stride end
    self.granules = self.granules + (addr + n - 1) // g - addr // g + 1
    for q = addr // g, (addr + n - 1) // g do
      local w = sw[q]
      local u = w and w ~= last_w and unordered_write(w, a, vc)
      if u and not (reduce and w.reduce) then -- (reduce-adds in any order: the same sum)
        violation("overwrite", ("%s at %s writes %s that %s wrote at %s with no synchronization in between; a barrier is missing: after the write at %s and before the write at %s")
          :format(self:who(a), loc, range_of(cta, addr, n), self:who(u.actor), u.loc, u.loc, loc))
      end
      last_w = w
      local r = sr[q]
      if r and r == last_r then
        sr[q] = nil
      elseif r then
        last_r = r
        for ra, e in pairs(r) do
          if ra ~= a and (vc[ra] or 0) < e[1] then
            violation("overwrite", ("%s at %s overwrites %s that %s read at %s before that read was released to it (%s); a barrier is missing: after the read at %s and before the write at %s")
              :format(self:who(a), loc, range_of(cta, addr, n), self:who(ra), e[2],
                      cta.is_global and "a write racing with another thread's or CTA's read"
                      or "a stage overwritten before every consumer released it", e[2], loc))
          end
        end
        sr[q] = nil
      end
      if reduce and w and w.reduce and unordered_write(w, a, vc) then -- keep the reduce-adds a read must follow
        local x = after[w] or { actor = a, clock = clock, loc = loc, reduce = true, prior = w }
        after[w] = x
        sw[q] = x
      else
        sw[q] = w_rec
      end
    end
  end
end

-- An atomic reduce-add: races with a read or plain write that is not ordered
-- with it, not with other reduce-adds (any order gives the same sum).
function Memory:shadow_write_reduce(cta, a, vc, addr, n, loc, rows, stride)
  return self:shadow_write(cta, a, vc, addr, n, loc, rows, stride, true)
end

-- }===

-- The space (CTA or global) whose shadow an access of warp W at addr uses, and
-- the address in it; a cluster address is checked against the cluster's start
-- and the target CTA's exit (DSMEM).
function Memory:access(W, rec, addr, write)
  if addr >= DSMEM_BASE then
    local _, a, cta = self:mem_of(W, addr)
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

-- The race check of warp W's access of n bytes at addr (a write: write).
function Memory:check_access(W, rec, addr, n, write)
  local sp, a = self:access(W, rec, addr, write)
  if write then
    self:shadow_write(sp, W.actor, W.vc, a, n, rec.loc)
  else
    self:shadow_read(sp, W.actor, W.vc, a, n, rec.loc)
  end
end

-- A load of rec.codec at addr by warp W (one lane); atomic: no race check.
function Memory:load(W, rec, addr, atomic)
  local c = rec.codec
  if not atomic then self:check_access(W, rec, addr, c.size, false) end
  if c.width and not c.vector then -- an integer: straight from the bytes
    local m, a = self:mem_of(W, addr)
    local x = 0
    for i = a + c.size - 1, a, -1 do x = (x << 8) | (m[i] or 0) end
    return wrap(x, c.width)
  end
  local bytes = read_bytes(self, W, addr, c.size)
  if c.raw then return bytes end -- a vector of bytes: kept unsigned (tile.extract wraps)
  if c.vector then
    local v = {}
    for i = 1, c.n do v[i] = values.decode(c.elem, bytes, (i - 1) * c.elem.size) end
    return v
  end
  return values.decode(c, bytes, 0)
end

-- A store of v as rec.codec at addr by warp W (one lane); atomic: no race check.
function Memory:store(W, rec, addr, v, atomic)
  local c = rec.codec
  if not atomic then self:check_access(W, rec, addr, c.size, true) end
  if not c.vector and rawequal(v, DATA) then v = 0 end -- a value not computed (data_slice.lua): zeros
  if c.width and not c.vector then -- an integer: straight to the bytes
    local m, a = self:mem_of(W, addr)
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
    for i = 1, c.n do values.encode(c.elem, v[i], out, (i - 1) * c.elem.size) end
  else
    values.encode(c, v, out, 0)
  end
  local m, a = self:mem_of(W, addr)
  for i = 1, c.size do m[a + i - 1] = out[i] end
end

return Memory
