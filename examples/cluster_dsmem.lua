-- cluster_dsmem.lua: two CTAs of a cluster exchange data through distributed
-- shared memory. Each CTA loads its slice of the input into its shared memory
-- and also stores it into its peer's `inbox` (st.shared::cluster through mapa);
-- after a cluster barrier each reads the peer's slice remotely
-- (ld.shared::cluster) and its own inbox, and writes both out. A second
-- cluster barrier keeps every CTA's shared memory alive until its peer is done.
--
--   out[g]         = inbox[t]      = in[peer slice][t]   (remote store)
--   out[total + g] = peer.buf[t] * 2 + rank              (remote load)
--
-- Checked on fresh random integers against a CPU reference; without a GPU it
-- stops after compiling and ptxas with "SKIP: no GPU" (exit 0, or 77 under ctest).
local tl = require "tilua"

local seed = tonumber(os.getenv "TILUA_SEED") or os.time()
local T = 256 -- threads per CTA = elements per CTA

local k = tl.kernel("cluster_exchange", {
  params = { { "input", tl.ptr(tl.i32) }, { "out", tl.ptr(tl.i32) }, { "total", tl.i32 } },
  block = T,
  cluster = { 2, 1, 1 },
})

k:define(function(k, p)
  local buf = k:shared(tl.i32, { T })
  local inbox = k:shared(tl.i32, { T })
  tl.cluster_arrive { relaxed = true }     -- this CTA has started (nothing to release yet)
  local t = tl.thread_id "x"
  local rank = tl.cluster_rank()
  local peer = rank ~ 1
  local g = tl.block_id "x" * T + t
  local v = (p.input + g):load()
  buf:ptr(t):store(v)
  tl.cluster_wait()                        -- every CTA of the cluster has started
  tl.mapa(inbox:ptr(t), peer):store(v)     -- into the peer's inbox
  tl.cluster_sync()                        -- release our stores, acquire the peer's
  local out = p.out + g
  out:store(inbox:ptr(t):load())
  local remote = tl.mapa(buf:ptr(t), peer):load()
  local out2 = out + p.total
  out2:store(remote * 2 + rank)
  tl.cluster_sync()                        -- the peer may still read our buffer
end)

local ptx = k:compile()
print(("cluster_dsmem: PTX %d bytes"):format(#ptx))
assert(ptx:find("mapa.shared::cluster.u32", 1, true) and ptx:find(".reqnctapercluster 2, 1, 1", 1, true))
tl.check_ptx("cluster_dsmem", ptx)

tl.device.require() -- without a GPU: "SKIP: no GPU" and exit

local ctas = 2 * tl.device.sm_count()
local total = ctas * T
print(("cluster_dsmem: seed %d, %d CTAs in clusters of 2, %d elements"):format(seed, ctas, total))
local input = tl.device.random(tl.i32, total, seed)
local out <close> = tl.device.alloc(tl.i32, 2 * total)
out:fill(-1)
k:launch { grid = ctas, args = { input, out, total } }
tl.device.synchronize()

local hin, hout = input:to_table(), out:to_table()
local function wrap32(x) return ((x + 0x80000000) & 0xFFFFFFFF) - 0x80000000 end
local bad, distinct = 0, {}
for cta = 0, ctas - 1 do
  local rank, peer = cta % 2, cta ~ 1
  for t = 0, T - 1 do
    local g, pg = cta * T + t, peer * T + t
    local want1, want2 = hin[pg + 1], wrap32(hin[pg + 1] * 2 + rank)
    local got1, got2 = hout[g + 1], hout[total + g + 1]
    distinct[want1] = true
    if got1 ~= want1 or got2 ~= want2 then
      bad = bad + 1
      if bad <= 5 then print(("  cta %d thread %d: got %d, %d; expected %d, %d"):format(cta, t, got1, got2, want1, want2)) end
    end
  end
end
local nd = 0
for _ in pairs(distinct) do nd = nd + 1 end
assert(nd > total // 2, "the random input repeats too much")
if bad > 0 then
  print(("cluster_dsmem: FAILED, %d of %d threads wrong"):format(bad, total))
  os.exit(1)
end
print(("cluster_dsmem: OK, %d CTAs exchanged %d elements through DSMEM"):format(ctas, total))
