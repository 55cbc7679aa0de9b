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
--   loadfile("examples/cluster_dsmem.lua")("--library") -> the example (tilua.gpu.check)
local tl = require "tilua"
local check = require "tilua.gpu.check"

local T = 256 -- threads per CTA = elements per CTA

local k = tl.kernel("cluster_exchange", {
  params = { { "input", tl.ptr(tl.i32) }, { "out", tl.ptr(tl.i32) }, { "total", tl.i32 } },
  block = T,
  cluster = { 2, 1, 1 },
  sizes = { total = "grid_threads" }, -- one element per thread: every launch checks it
})

k:define(function(k, p)
  local buf = k:shared(tl.i32, { T })
  local inbox = k:shared(tl.i32, { T })
  tl.cluster_sync()                        -- every CTA of the cluster has started
  local t = tl.thread_id "x"
  local rank = tl.cluster_rank()
  local peer = rank ~ 1
  local g = tl.block_id "x" * T + t
  local v = (p.input + g):load()
  buf:ptr(t):store(v)
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


-- run{seed, grid, small} -> ok, summary: grid CTAs (a multiple of 2; default two
-- per SM, 4 when small).
local function run(o)
  local ctas = o.grid or (o.small and 4 or 2 * tl.device.sm_count())
  local total = ctas * T
  local input <close> = tl.device.random(tl.i32, total, o.seed)
  local out <close> = tl.device.alloc(tl.i32, 2 * total)
  out:fill(-1)
  k:launch { grid = ctas, args = { input, out, total } }
  tl.device.synchronize()
  local hin, hout = input:to_table(), out:to_table()
  local fail, failures = check.mismatches("cluster_dsmem")
  local distinct, nd = {}, 0
  for cta = 0, ctas - 1 do
    local rank, peer = cta % 2, cta ~ 1
    for t = 0, T - 1 do
      local g, pg = cta * T + t, peer * T + t
      local want1, want2 = hin[pg + 1], check.i32(hin[pg + 1] * 2 + rank)
      local got1, got2 = hout[g + 1], hout[total + g + 1]
      if not distinct[want1] then distinct[want1], nd = true, nd + 1 end
      if got1 ~= want1 or got2 ~= want2 then
        fail("cta %d thread %d: got %d, %d; expected %d, %d", cta, t, got1, got2, want1, want2)
      end
    end
  end
  if nd <= total // 2 then return false, "the random input repeats too much" end
  local what = ("seed %d, %d CTAs in clusters of 2, %d elements"):format(o.seed, ctas, total)
  if failures() > 0 then return false, ("%s: %d of %d threads wrong"):format(what, failures(), total) end
  return true, what .. " exchanged through DSMEM"
end

local example = { name = "cluster_dsmem", prepare = function() end, run = run,
                  grids = function(sms) return check.grids(sms, 2) end }
example.kernel = k -- the kernel (for the emulator's tests)
if ... == "--library" then return example end
check.main(example)
