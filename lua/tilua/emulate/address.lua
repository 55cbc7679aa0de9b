-- tilua.emulate.address: the emulator's memory map, and the addresses of the
-- lowered IR in it.
--
--   GLOBAL_BASE + k * GLOBAL_SPACING   global buffer k (256 MiB apart: an access
--                                      past a buffer lands in no other buffer)
--   SHARED_BASE + offset               a CTA's shared memory (per CTA)
--   SLOT_BASE + 8 * slot               the 32 barrier slots of the cutlass pool
--   DSMEM_BASE + (c << 32) + offset    shared memory of CTA c seen through the
--                                      cluster (what mapa returns)
--
-- At the nvvm level shared memory is addressed by i32 offsets in the shared
-- window: nvvm.shared.base is WINDOW and window address a is SHARED_BASE + a -
-- WINDOW; a shared::cluster address of another CTA is the i32 CLUSTER + (c <<
-- 18) + offset (a CTA's window is below 2^18). A tile-level shared pointer
-- turned into an i32 (tile.ptr_to_int) is a window address, so the two levels
-- mix in the stages between the conversions.

local lanes = require "tilua.emulate.lanes"

local A = {}

A.SHARED_BASE = 1 << 40
A.SLOT_BASE = A.SHARED_BASE + (1 << 30)
A.GLOBAL_BASE = 1 << 32
A.GLOBAL_SPACING = 1 << 28
A.DSMEM_BASE = 1 << 48
A.WINDOW = 0x400000 -- nvvm.shared.base
A.CLUSTER = 0x40000000 -- the shared::cluster addresses of other CTAs (mapa)
A.MAX_GRANULE = 16 -- the race check's largest granule (memory.lua's granule_of)
-- ... of a tile program's tensors (its tiles' rows: 256 bytes of a row of 128
-- bf16 elements are one granule, not 16; models/tileas.lua)
A.MAX_TILE_GRANULE = 4096

local SHARED_BASE, DSMEM_BASE, WINDOW, CLUSTER = A.SHARED_BASE, A.DSMEM_BASE, A.WINDOW, A.CLUSTER

-- A shared-window or cluster-window address (or a tile-level shared address)
-- -> the emulator's, lane by lane.
A.shared = lanes.lanewise(function(a)
  if a >= SHARED_BASE then return a end
  if a >= CLUSTER then return DSMEM_BASE + ((a - CLUSTER) >> 18 << 32) + ((a - CLUSTER) & 0x3ffff) end
  return SHARED_BASE + a - WINDOW
end)

-- The emulator's shared address -> the window's i32 (a DSMEM address: the
-- cluster window's), lane by lane; other values stay.
A.window = lanes.lanewise(function(a)
  if type(a) ~= "number" then return a end
  if a >= DSMEM_BASE then return CLUSTER + ((a - DSMEM_BASE) >> 32 << 18) + (a & 0xffffffff) end
  if a >= SHARED_BASE then return a - SHARED_BASE + WINDOW end
  return a
end)

-- The space of an address: "shared" or "global".
function A.space(addr) return addr >= SHARED_BASE and "shared" or "global" end

-- The swizzle of S-byte rows (CuTe's Swizzle<log2(S/16), 4, 3>, the same for
-- TMA, wgmma and a swizzled memref's ptr): byte offset o -> o ^ (((o >> 7) &
-- (S/16 - 1)) << 4), applied to a shared address's offset (the buffers are
-- aligned to the pattern's period, so the offset's permutation is the address's).
function A.swizzle(o, s)
  if s == 0 or s == nil then return o end
  return o ~ (((o >> 7) & (s // 16 - 1)) << 4)
end

return A
