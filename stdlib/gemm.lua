-- stdlib/gemm.lua: a Hopper GEMM generator written with the public surface only
-- (docs/gemm.md). D[M, N] = epilogue(alpha * A . B + beta * C), f32 accumulation.
--
--   local g = tl.gemm.build{ m = M, n = N, k = K, dtype = "bf16", out = "bf16",
--                            bn = 256, stages = 3, schedule = "persistent",
--                            a_major = "k", b_major = "k", alpha = 1, beta = 0,
--                            bias = false, activation = nil }
--   g.kernel                     the tilua kernel (compile with g.kernel:compile())
--   g:run{ a = bufA, b = bufB, d = bufD [, c = bufC, bias = bufBias] }
--   g.grid, g.smem, g.flops, g.workspace_bytes
--
-- The kernel (one CTA: 3 warpgroups, 384 threads):
--   producer warpgroup  setmaxnreg.dec 40; one elected thread of its first warp
--                       walks the CTA's tiles (a cutlass tile scheduler) and for
--                       each k block acquires a stage of a cutlass.pipeline and
--                       issues two TMA loads (A 128 x BK, B BN x BK, 128-byte
--                       swizzle) that complete on the stage's full barrier.
--   consumer warpgroups setmaxnreg.inc 232; each owns 64 rows of the 128 x BN
--                       tile: per k block it waits for the stage, issues BK/16
--                       wgmma m64nBNk16 from shared-memory descriptors into a
--                       register accumulator (vector<BN/2 x f32>), commits, waits
--                       for the previous group and releases the previous stage.
--                       Epilogue: alpha/beta/bias/activation in registers,
--                       bf16 pairs to a swizzled staging buffer with stmatrix,
--                       fence.proxy.async, TMA stores (asynchronous: the next
--                       tile's mainloop overlaps them).
-- Shapes that are not multiples of the tile are handled by TMA (out-of-bounds
-- loads read zeros, stores are clipped). Column-major operands (a_major = "m",
-- b_major = "n") use MN-major descriptors (16-bit types only). swap_ab = true
-- (a decode step's few rows of A): the same kernel with the operands' roles
-- exchanged, D^T = B . A^T, each tile stored transposed from the registers.
local tl = require "tilua" -- the library being built (init.lua registers it before its rooms)

-- tl.gemm's module: the Gemm objects, and the GEMM's pieces by name (M.mainloop,
-- M.tile_loop ...), which live below it in tilua.kernels.gemm, shared with the
-- lowering of tile programs
local M = setmetatable({}, { __index = require "tilua.kernels.gemm" })

do -- tl.gemm: the generator and the check of a GEMM (an indented block)
  local raise = tl.raise
  tl.gemm = rawget(tl, "gemm") or {}
  local in_types = { bf16 = "bf16", f16 = "f16", e4m3 = "e4m3", e5m2 = "e5m2" }

  local function elem_type(name)
    if name == "bf16" then return tl.bf16 elseif name == "f16" then return tl.f16
    elseif name == "f32" then return tl.f32 elseif name == "e4m3" or name == "e5m2" then return tl.i8 end
    raise(("gemm: unknown element type %s"):format(tostring(name)))
  end

  -- swap_ab = true: the kernel computes D^T = B . A^T, so that B's rows (D's
  -- columns, the N side) fill wgmma's 64-row M side and the few rows of A (a
  -- decode step's tokens) its N side (bn: 8 to 256 in steps of 8, default M
  -- rounded up to 8, at most 64); each tile is stored transposed from the
  -- registers. For small M, where the 64-row tile would waste most of each
  -- wgmma and the GEMM streams B's weights: bm rows of B a tile, deep rings.
  local function swap_ab_cfg(c)
    if c.swap_ab ~= true then raise("gemm.build: swap_ab must be true or nil") end
    if c.consumers == "pingpong" or (c.a_major or "k") ~= "k" or (c.b_major or "k") ~= "k" then
      raise("gemm.build: swap_ab needs cooperative or ksplit consumers and K-major A and B")
    end
    c.bn = c.bn or math.min(64, (c.m + 7) // 8 * 8)
    if math.type(c.bn) ~= "integer" or c.bn % 8 ~= 0 or c.bn < 8 or c.bn > 256 then
      raise("gemm.build: with swap_ab, bn (rows of A a tile) must be a multiple of 8 from 8 to 256")
    end
    c.bm = c.bm or 64
  end

  -- consumers = "ksplit": two consumer warpgroups on one 64-row tile, each taking every other stage of
  -- the ring (its k blocks), their sums added in shared memory before the first one's epilogue
  -- (cuBLASLt's 64 x 32 kernel at 64 x 4096 x 4096 runs 384 threads a 64-row tile; at 128 x 6144 x 4096
  -- its 96 x 64 in a 1 x 2 cluster): two chains of wgmmas where a small tile's one leaves the tensor cores waiting
  local function ksplit_cfg(c)
    c.bm = c.bm or 64
    if c.bm ~= 64 or (c.wgs or 2) ~= 2 or (c.schedule or "persistent") ~= "persistent" then
      raise("gemm.build: ksplit consumers take 64-row tiles on 2 warpgroups and a persistent schedule")
    end
    c.wgs = 2
  end

  -- The problem in tiles: bm x bn of D (swapped: bm of D's columns x bn of
  -- its rows), k blocks, cluster tiles, and a cluster split-K's splits.
  local function tiles_cfg(c)
    local rows, cols = c.m, c.n
    if c.swap_ab then rows, cols = c.n, c.m end
    c.tm, c.tn, c.kt = (rows + c.bm - 1) // c.bm, (cols + c.bn - 1) // c.bn, (c.k + c.bk - 1) // c.bk
    c.tiles = c.tm * c.tn
    c.ctiles = (c.tm + c.cm - 1) // c.cm * ((c.tn + c.cn - 1) // c.cn) -- cluster tiles
    if c.ksplits then -- (every split but the last stores a partial tile: the StreamK workspace and fixup)
      if c.dynamic or math.type(c.ksplits) ~= "integer" or c.ksplits < 2 then
        raise("gemm.build: split-K in a cluster needs splits >= 2 and a static problem (not dynamic)")
      end
      c.kper = (c.kt + c.ksplits - 1) // c.ksplits
      if (c.ksplits - 1) * c.kper >= c.kt then
        raise(("gemm.build: %d splits of %d k blocks leave a split empty"):format(c.ksplits, c.kt))
      end
      c.ctiles, c.max_splits = c.ctiles * c.ksplits, c.ksplits
    end
  end

  -- The ring: c.stages (given, or as many as fit up to a form's most) beside the epilogue's staging.
  local function ring_cfg(c, PP, KS)
    local smem_limit = tl.core.limits().max_smem - 2048 -- the barrier pool and alignment
    local stage_bytes = (c.bm + c.bn) * c.bk * c.ebytes
    local epi_bytes = c.swap_ab and 0 or c.wgs * 2 * 64 * c.epi * 2 -- (swapped: stored from registers)
    if KS then epi_bytes = (c.swap_ab and 0 or 2 * 64 * c.epi * 2) + 64 * c.bn * 4 end -- one warpgroup stores; the sums it adds
    -- ping-pong 64 x 256: 4 stages on one CTA (5 ran 0.76-0.85 times as fast, 3 0.79; 128 x 192 at 5 does
    -- not slow down), in a cluster the 5 that fit (2 x 1: 1.047 times 4's speed); docs/PERF.md, s13pp-2
    -- (ksplit: 14, what the 32 barrier slots hold besides its seq_bars; 64 x 32 led at 16, s18-5)
    local most = (PP and c.bm == 64 and c.bn == 256 and c.cluster == 1) and 4 or c.swap_ab and 12 or KS and 14 or 8
    local given = c.stages
    c.stages = c.stages or math.min(most, (smem_limit - epi_bytes) // stage_bytes)
    if math.type(c.stages) ~= "integer" or c.stages < 1 or c.stages * stage_bytes + epi_bytes > smem_limit then
      raise(("gemm.build: %s stages of %d KiB and %d KiB of epilogue staging do not fit the %d KiB of shared memory"):format(
        tostring(c.stages), stage_bytes // 1024, epi_bytes // 1024, smem_limit // 1024))
    end
    -- ksplit: an even ring, each warpgroup's stages its own (with an odd one a warpgroup waits on a
    -- stage whose last phase the other took: the protocol check finds that phase aliasing)
    if KS and c.stages % 2 == 1 and given then raise("gemm.build: ksplit consumers need an even count of stages") end
    if KS and c.stages % 2 == 1 then c.stages = c.stages - 1 end
  end

  local function cfg_of(o)
    if type(o) ~= "table" then raise("gemm.build: expected a table of options") end
    local c = {}
    for key, v in pairs(o) do c[key] = v end
    for _, key in ipairs { "m", "n", "k" } do
      if math.type(c[key]) ~= "integer" or c[key] < 1 then raise(("gemm.build: '%s' must be a positive integer"):format(key)) end
    end
    if c.sms ~= nil and (math.type(c.sms) ~= "integer" or c.sms < 1) then
      raise("gemm.build: 'sms' must be a positive integer")
    end
    c.dtype = c.dtype or "bf16"
    if not in_types[c.dtype] then raise(("gemm.build: dtype must be bf16, f16, e4m3 or e5m2, got %s"):format(tostring(c.dtype))) end
    c.out = c.out or "bf16"
    if c.out ~= "bf16" and c.out ~= "f16" then raise("gemm.build: out must be bf16 or f16") end
    c.fp8 = c.dtype == "e4m3" or c.dtype == "e5m2"
    c.ebytes = c.fp8 and 1 or 2
    -- a k block: bk = kb 128-byte swizzle rows of K (kw elements each), loaded
    -- as kb boxes into kb swizzled sub-stages (more bytes a row a stage: K-major only)
    c.kw = 128 // c.ebytes
    c.bk = c.bk or c.kw
    if math.type(c.bk) ~= "integer" or c.bk < c.kw or c.bk % c.kw ~= 0 or c.bk > 4 * c.kw then
      raise(("gemm.build: bk must be %d, %d, %d or %d (whole 128-byte rows of K)"):format(c.kw, 2 * c.kw, 3 * c.kw, 4 * c.kw))
    end
    c.kb = c.bk // c.kw
    c.kstep = c.fp8 and 32 or 16
    c.consumers = c.consumers or "cooperative"
    if c.consumers ~= "cooperative" and c.consumers ~= "pingpong" and c.consumers ~= "ksplit" then
      raise(("gemm.build: consumers must be cooperative, pingpong or ksplit, got %s"):format(tostring(c.consumers)))
    end
    local PP = c.consumers == "pingpong"
    local KS = c.consumers == "ksplit"
    if KS then ksplit_cfg(c) end
    if c.swap_ab then swap_ab_cfg(c) end
    c.bn = c.bn or (PP and 128 or 256)
    -- bn: 64 to 256 in steps of 64, or 32 to 256 in steps of 16 (80, 96, 160,
    -- 168-class tiles: finer steps against idle SMs) with cooperative consumers
    -- and K-major B; the epilogue's sub-tiles then divide bn (32 columns, or 16)
    if not c.swap_ab and (c.bn % 16 ~= 0 or c.bn < 32 or c.bn > 256) then raise("gemm.build: bn must be a multiple of 16 from 32 to 256") end
    local fine = not c.swap_ab and c.bn % 64 ~= 0
    if fine and (PP or (c.b_major or "k") ~= "k" or (c.epi and c.bn % c.epi ~= 0)) then
      raise("gemm.build: bn not a multiple of 64 needs cooperative consumers, K-major B and epi dividing bn (16 or 32)")
    end
    -- the tile: bm rows (cooperative: the CTA's, split over wgs consumer
    -- warpgroups of mi 64-row wgmma slices each; ping-pong: each of the two
    -- warpgroups' own tile, mi = bm / 64)
    c.bm = c.bm or ((PP and c.bn > 128) and 64 or 128)
    if math.type(c.bm) ~= "integer" or c.bm < 64 or c.bm % 64 ~= 0 or c.bm > 320 then
      raise("gemm.build: bm must be a multiple of 64 up to 320")
    end
    c.wgs = c.wgs or (PP and 2 or (c.bm == 256 or c.bm == 320) and 2 or c.bm // 64)
    if PP and c.wgs ~= 2 then raise("gemm.build: ping-pong has two consumer warpgroups") end
    if math.type(c.wgs) ~= "integer" or c.wgs < 1 or c.wgs > 5 or (not PP and not KS and c.bm // 64 < c.wgs) then
      raise(("gemm.build: wgs (consumer warpgroups) must be 1 to 5, at most bm / 64 = %d"):format(c.bm // 64))
    end
    -- cooperative: warpgroup w takes slices [lo[w], lo[w + 1]) of the bm / 64
    -- (an uneven split, as 320 = 2 + 3 slices, gives each warpgroup code of its own)
    c.lo = {}
    for w = 0, c.wgs do c.lo[w] = PP and 0 or w * (c.bm // 64) // c.wgs end
    c.even = PP or (c.bm // 64) % c.wgs == 0
    c.mi = (PP or KS) and c.bm // 64 or ((c.bm // 64) + c.wgs - 1) // c.wgs -- the most a warpgroup has
    c.fixup_parts = c.even and 1 or c.wgs -- StreamK: warpgroups with code of their own each run the fixup
    -- registers. Two consumer warpgroups (CUTLASS's and FA3's configuration): the producer warpgroup
    -- gives registers back (setmaxnreg.dec 40) and the consumers take them (setmaxnreg.inc 232), and
    -- ptxas compiles the code after the .inc with 232. Any other count: no setmaxnreg (c.regs nil).
    -- ptxas 13.0 gives a kernel of more threads the launch's share (65536 / threads) past an .inc
    -- whatever its count (a 512-thread kernel's consumers get 128), so it would buy nothing there,
    -- and an .inc that the CTA's register pool cannot serve waits forever.
    c.regs = c.wgs == 2 and { 40, 232 } or nil
    local budget = c.regs and c.regs[2] or math.min(248, 65536 // (128 * (c.wgs + 1)) // 8 * 8)
    if c.mi * c.bn // 2 > budget - 32 then
      raise(("gemm.build: a %dx%d tile over %d consumer warpgroups needs %d accumulator registers a thread, more than %d - 32"):format(
        c.bm, c.bn, c.wgs, c.mi * c.bn // 2, budget))
    end
    -- the epilogue: sub-tiles of 64 rows x epi columns, two staging buffers per warpgroup
    c.epi = c.epi or ((c.swap_ab or c.bn % 32 == 0) and 32 or 16)
    if c.epi ~= 16 and c.epi ~= 32 and c.epi ~= 64 then raise("gemm.build: epi (epilogue sub-tile columns) must be 16, 32 or 64") end
    c.a_major, c.b_major = c.a_major or "k", c.b_major or "k"
    if c.fp8 and (c.a_major ~= "k" or c.b_major ~= "k") then raise("gemm.build: fp8 operands must be K-major (wgmma cannot transpose them)") end
    if c.kb > 1 and (c.a_major ~= "k" or c.b_major ~= "k") then raise("gemm.build: bk above one 128-byte row needs K-major A and B") end
    -- a cluster of cm x cn CTAs (cluster = n: n x 1): the cm CTAs along M of
    -- a cluster column share (multicast) their B tile, the cn along N of a row
    -- their A tile
    local cl = c.cluster or 1
    if math.type(cl) == "integer" then cl = { cl, 1 } end
    if type(cl) ~= "table" then raise("gemm.build: cluster must be 1, 2, 4 or {cm, cn}") end
    c.cm, c.cn = cl[1] or 1, cl[2] or 1
    for _, x in ipairs { c.cm, c.cn } do
      if x ~= 1 and x ~= 2 and x ~= 4 then raise("gemm.build: a cluster's extents must be 1, 2 or 4") end
    end
    if c.cm * c.cn > 4 then raise("gemm.build: a cluster of at most 4 CTAs") end
    c.cluster = c.cm * c.cn
    ring_cfg(c, PP, KS)
    -- swapped: a cluster column shares (multicasts) its stage of A, whole 8-row groups (the swizzle
    -- atom) a CTA; a cluster row its stage of B (cuBLASLt's 64x32 1 x 2 at 64 tokens)
    if c.swap_ab and (c.bn // c.cm) % 8 ~= 0 then
      raise("gemm.build: with swap_ab, the cm CTAs of a cluster column share A's rows, bn / cm a multiple of 8")
    end
    c.schedule = c.schedule or "persistent"
    if c.schedule == "splitk" and c.cluster > 1 then
      -- split-K in a cluster (cuBLAS's form for few tiles and a long K): the
      -- persistent scheduler's batches are the splits (c.ksplits pieces of
      -- c.kper k blocks), so a cluster's CTAs share one k range and multicast
      c.schedule, c.ksplits = "persistent", c.splits or 2
    elseif c.schedule == "splitk" then -- split-K over the StreamK scheduler: `splits` pieces of K per tile
      c.schedule, c.decomposition = "streamk", "split_k"
    end
    if c.schedule ~= "persistent" and c.schedule ~= "data_parallel" and c.schedule ~= "streamk" then
      raise(("gemm.build: schedule must be persistent, data_parallel, streamk or splitk, got %s"):format(tostring(c.schedule)))
    end
    if c.activation and c.activation ~= "relu" then raise("gemm.build: activation must be nil or \"relu\"") end
    if c.cluster > 1 and (c.schedule == "streamk" or (c.cm > 1 and c.b_major ~= "k") or (c.cn > 1 and c.a_major ~= "k")) then
      raise("gemm.build: a cluster needs K-major multicast operands (B along M, A along N) and a persistent or data-parallel schedule")
    end
    -- TMA reads and writes rows whose byte strides are multiples of 16
    local function aligned(what, elems, bytes)
      if elems * bytes % 16 ~= 0 then
        raise(("gemm.build: %s rows of %d elements are %d bytes; TMA needs a multiple of 16"):format(what, elems, elems * bytes))
      end
    end
    aligned("D", c.n, 2)
    aligned("A", c.a_major == "k" and c.k or c.m, c.ebytes)
    aligned("B", c.b_major == "k" and c.k or c.n, c.ebytes)
    if PP and (c.schedule == "streamk" or c.ksplits) then
      raise("gemm.build: ping-pong consumers need a persistent or data-parallel schedule (not StreamK or split-K)")
    end
    c.aboxes = (c.bm // c.cn + 255) // 256 -- A boxes per stage (or per multicast share)
    tiles_cfg(c)
    -- programmatic dependent launch: a launch may start while the stream's
    -- previous kernel finishes (its prologue overlaps that kernel's tail)
    if c.pdl == nil then c.pdl = true end
    if type(c.pdl) ~= "boolean" then raise(("gemm.build: pdl must be true or false, got %s"):format(tostring(c.pdl))) end
    -- dynamic: the problem is a kernel argument (M, N, K), m, n, k only the
    -- shape the defaults were picked for; one kernel serves every shape
    if c.dynamic and c.schedule == "streamk" then
      raise("gemm.build: a dynamic StreamK or split-K kernel is not supported (its plan is made at compile time)")
    end
    c.name = c.name or (c.dynamic and ("gemm_%s_dynamic_%dx%d_%s%s"):format(c.dtype, c.bm, c.bn, c.consumers, c.swap_ab and "_swap_ab" or "")
                        or ("gemm_%s_%dx%dx%d%s"):format(c.dtype, c.m, c.n, c.k, c.swap_ab and "_swap_ab" or ""))
    return c
  end

  -- Tensor-map boxes (outermost first) of the operands as stored.
  local function boxes(c)
    -- K-major A: a box of at most 256 rows (TMA's limit), bm / abox_rows boxes per stage (cluster: one share each)
    local a = c.a_major == "k" and { c.bm // c.cn // c.aboxes, c.kw } or { c.bk, 64 } -- M-major: bm / 64 boxes per stage
    local b = c.b_major == "k" and { c.bn // c.cm, c.kw } or { c.bk, 64 } -- N-major: bn / 64 boxes per stage
    if c.swap_ab then return b, a, nil end -- A's rows fill the bn side, B's the bm side; D: a pointer
    return a, b, { 64, c.epi }
  end

  -- {===================================================================
  -- The kernel: build_kernel gives its signature; its body is kernel_state
  -- (what every agent reads, a record G), the producer and the consumers, in
  -- that order (the order of their ops in the kernel)
  -- ====================================================================

  -- The kernel's parameters: the tensor maps of A, B and D, then those c asks for.
  local function kernel_params(c, ein, eout)
    local abox, bbox, cbox = boxes(c)
    local AT, BT = tl.tensor_map_type(ein, abox, 128), tl.tensor_map_type(ein, bbox, 128)
    local CT = cbox and tl.tensor_map_type(eout, cbox, 2 * c.epi) or tl.ptr(eout) -- a sub-tile's row is one swizzle span
    local params = { { "A", AT }, { "B", BT }, { "D", CT } }
    if c.alpha_param then params[#params + 1] = { "alpha", tl.f32 } end
    if c.beta and c.beta ~= 0 then params[#params + 1] = { "C", tl.ptr(eout) } end
    if c.bias then params[#params + 1] = { "bias", tl.ptr(tl.f32) } end
    if c.schedule == "streamk" or c.ksplits then params[#params + 1] = { "ws", tl.ptr(tl.i32) } end
    if c.dynamic then
      for _, d in ipairs { "M", "N", "K" } do params[#params + 1] = { d, tl.i32 } end
    end
    return params
  end

  -- What the agents share: G = { c, k, p, dims, TMS, TNS, KT (the problem in
  -- tiles: constants, or a dynamic kernel's from its M, N, K arguments), sA,
  -- sB, sD (the ring and the epilogue's staging), pipe, go (ping-pong's turns),
  -- rank, rm, rn (the CTA's place in its cluster) }.
  local function kernel_state(c, k, p, ein, eout)
    local TM, BN, BK, S, WG, EC = c.bm, c.bn, c.bk, c.stages, c.wgs, c.epi
    local CL, CM, PP = c.cluster, c.cm, c.consumers == "pingpong"
    local G = { c = c, k = k, p = p }
    G.dims = c.dynamic and { m = p.M, n = p.N } or nil
    G.TMS, G.TNS, G.KT = c.tm, c.tn, c.kt
    if c.dynamic then
      local rows, cols = p.M, p.N
      if c.swap_ab then rows, cols = p.N, p.M end
      G.TMS, G.TNS, G.KT = (rows + (TM - 1)) // TM, (cols + (BN - 1)) // BN, (p.K + (BK - 1)) // BK
    end
    -- the operands of the tile's rows (wgmma's M side) and columns (N side)
    G.rows_map, G.cols_map = p.A, p.B
    if c.swap_ab then G.rows_map, G.cols_map = p.B, p.A end
    -- one ring of S stages; the epilogue's staging: two 64 x EC sub-tiles per
    -- consumer warpgroup, swizzled like the D map
    -- (stage s, 128-byte column j of K: sub-stage s * kb + j)
    G.sA = k:shared(ein, { S * c.kb, TM, c.kw }, { align = 1024, swizzle = 128 })
    G.sB = k:shared(ein, { S * c.kb, BN, c.kw }, { align = 1024, swizzle = 128 })
    local KS = c.consumers == "ksplit"
    G.sD = not c.swap_ab and k:shared(eout, { KS and 1 or WG, 2, 64, EC }, { align = 1024, swizzle = 2 * EC }) or nil
    -- ksplit: the second warpgroup's f32 sums and their hand-over
    G.sums = KS and M.ksplit_shared(tl, k, BN // 2) or nil
    -- cooperative: every consumer warp releases every stage; ping-pong: a
    -- stage holds one warpgroup's tile and that warpgroup releases it; a
    -- cluster: the producers of a row and a column of CTAs write this CTA's
    -- stages, every consumer warp releases each stage on every CTA (ping-pong
    -- in a cluster: each warp of the warpgroup whose tile it holds)
    local own = PP or KS -- (ksplit: as ping-pong, each stage released by the warpgroup that took it)
    G.pipe = k:pipeline { stages = S, producers = { { 0, 1 } }, consumers = own and { { 4, 4 }, { 8, 4 } } or { { 4, 4 * WG } },
                          transaction_bytes = (TM + BN) * BK * c.ebytes,
                          mode = own and (CL > 1 and "pingpong_cluster" or "pingpong") or (CL > 1 and "cluster" or "cooperative") }
    -- ping-pong turns: go[g] slot 0 is warpgroup g's mainloop turn, slot 1 its
    -- epilogue turn; each warpgroup hands both to the other (CUTLASS's
    -- OrderedSequenceBarrier of two stages)
    G.go = PP and { k:seq_bar { depth = 2, arrive_count = 128 }, k:seq_bar { depth = 2, arrive_count = 128 } }
    -- the CTA's place in its cluster: (rm, rn) of cm x cn, rank rm + cm * rn
    G.rank = CL > 1 and tl.cluster_rank() or tl.const(0, tl.i32)
    G.rm, G.rn = G.rank % CM, G.rank // CM
    return G
  end

  -- The k blocks of a work tile: its StreamK share, or all of K.
  local function k_range(G, work)
    local c = G.c
    if c.schedule == "streamk" then return M.k_range(tl, c, work) end
    if c.ksplits then -- split l of a cluster's split-K: kper k blocks, the last split the rest
      local kb0 = work:l() * c.kper
      return kb0, tl.min(tl.const(c.kper, tl.i32), c.kt - kb0)
    end
    return tl.const(0, tl.i32), c.dynamic and G.KT or tl.const(G.KT, tl.i32)
  end

  -- The tile scheduler of c.schedule over the problem's tiles.
  local function scheduler(G)
    local c, CL = G.c, G.c.cluster
    local o = { tiles = { G.TMS, G.TNS, c.ksplits or 1, G.KT }, swizzle = c.swizzle or 8, raster_order = c.raster,
                cluster = CL > 1 and { c.cm, c.cn, 1 } or nil }
    if c.schedule == "data_parallel" then return tl.sched.data_parallel(o) end
    if c.schedule == "streamk" then return M.streamk_scheduler(tl, c, G.p.ws) end
    -- clusters: the launch sizes the grid to the clusters that fit at once (Gemm:run)
    o.workers = (c.dynamic or CL > 1) and tl.grid_dim() // CL or c.grid // CL
    return tl.sched.static_persistent(o)
  end

  -- The CTA's work tiles in order (M.tile_loop); workers are clusters.
  local function tiles(G, cursors, bodies)
    M.tile_loop(tl, scheduler(G):work(G.c.cluster > 1 and tl.cluster_id() or tl.block_id()), cursors, bodies)
  end

  -- This CTA's tile (m, n) of a work tile (a cluster's: at its place rm, rn in the cluster).
  local function tile_of(G, work) return work:m() * G.c.cm + G.rm, work:n() * G.c.cn + G.rn end

  -- The sub-stage of stage s that holds the 128-byte column j of its k block
  -- (one a stage: the stage itself).
  local function sub(G, s, j)
    if G.c.kb == 1 then return s end
    return s * G.c.kb + j
  end

  -- The loads of one k block into stage s (barrier `full`) of the tile at (m0, n0):
  -- a cluster's CTAs each load a share and multicast it along their row (A) or column (B).
  local function load_stage(G, s, full, m0, n0, k0, row_mask)
    local c, sA, sB = G.c, G.sA, G.sB
    local p = { A = G.rows_map, B = G.cols_map }
    local TM, BN, CM, CN, rm, rn, KB, KW = c.bm, c.bn, c.cm, c.cn, G.rm, G.rn, c.kb, c.kw
    if CN > 1 then -- this CTA's share of A, to the CTAs of its row
      local h = rn * (TM // CN)
      for j = 0, KB - 1 do tl.tma_load(sA:ptr(sub(G, s, j), h), p.A, full, { m0 + h, k0 + j * KW }, { multicast = row_mask << rm }) end
    elseif c.a_major == "k" then
      local rows = TM // c.aboxes
      for j = 0, KB - 1 do
        for h = 0, c.aboxes - 1 do tl.tma_load(sA:ptr(sub(G, s, j), h * rows), p.A, full, { m0 + h * rows, k0 + j * KW }) end
      end
    else
      for h = 0, TM // 64 - 1 do tl.tma_load(sA:ptr(s, h * 64), p.A, full, { k0, m0 + h * 64 }) end
    end
    if CM > 1 then -- this CTA's share of B, to the CTAs of its column
      local h = rm * (BN // CM)
      for j = 0, KB - 1 do
        tl.tma_load(sB:ptr(sub(G, s, j), h), p.B, full, { n0 + h, k0 + j * KW }, { multicast = ((1 << CM) - 1) << (rn * CM) })
      end
    elseif c.b_major == "k" then
      for j = 0, KB - 1 do tl.tma_load(sB:ptr(sub(G, s, j)), p.B, full, { n0, k0 + j * KW }) end
    else
      for h = 0, BN // 64 - 1 do tl.tma_load(sB:ptr(s, h * 64), p.B, full, { k0, n0 + h * 64 }) end
    end
  end

  -- The producer warpgroup: TMA loads into the ring's stages, the tiles in order.
  local function producer(G)
    local c, k, p, pipe = G.c, G.k, G.p, G.pipe
    local TM, BN, BK, CM, CN = c.bm, c.bn, c.bk, c.cm, c.cn
    k:agent("producer", { warps = 4 }, function()
      if c.regs then tl.setmaxnreg(c.regs[1], "dec") end
      k:async_exec("producer", { first_warp = 0, warps = 1 }, function()
        local st = pipe:producer_start()
        tl.elect_one(function()
          -- the first TMA of each operand need not wait for its map to be fetched
          tl.tensor_map_prefetch(p.A)
          tl.tensor_map_prefetch(p.B)
          -- the operands may be the previous kernel's outputs (a PDL launch)
          -- then the next kernel may launch once every CTA got here: its CTAs
          -- wait (griddepcontrol.wait) on the SMs this grid leaves free, so a
          -- grid of few CTAs hides the next launch behind its whole run. (A
          -- trigger after the last load was issued lost 4 us a launch on
          -- decode-sized GEMMs, H200 2026-11-28: docs/PERF.md.)
          if c.pdl then
            tl.griddepcontrol_wait()
            tl.griddepcontrol_launch_dependents()
          end
          local row_mask = 0 -- the ranks of a cluster row (rm = 0)
          for j = 0, CN - 1 do row_mask = row_mask | 1 << (CM * j) end
          tiles(G, { st }, { function(work)
            local m, n = tile_of(G, work)
            local m0, n0 = m * TM, n * BN
            local kb0, kbn = k_range(G, work)
            tl.cutlass.for_range(kb0, kb0 + kbn, { st }, function(kb)
              local k0 = kb * BK
              pipe:producer_acquire(st)
              local full, s = pipe:full_barrier(st), st:index()
              load_stage(G, s, full, m0, n0, k0, row_mask)
              pipe:producer_commit(st)
              st:advance()
            end)
          end })
          pipe:producer_tail(st)
        end)
      end)
    end)
  end

  -- The wgmma descriptors of stage s, k step kk: A's 64-row slice at row r,
  -- and B. K-major: 128-byte rows of K, 8-row groups 1024 bytes apart (sbo); a
  -- k step moves along the row. MN-major: boxes of 64 (k) x 64 (m or n)
  -- elements; a k step is 16 rows (2048 bytes), 64-wide MN atoms are a box
  -- (8192 bytes, lbo) apart.
  local function desc_a(G, s, r, kk)
    local c = G.c
    if c.a_major == "k" then
      local per = c.kw // c.kstep -- k steps a 128-byte row
      return tl.wgmma_desc(G.sA:ptr(sub(G, s, kk // per), r, kk % per * c.kstep), { swizzle = 128, sbo = 1024 })
    end
    return tl.wgmma_desc(G.sA:ptr(s, r // 64 * 64 + kk * 16, 0), { swizzle = 128, lbo = 8192, sbo = 1024 })
  end
  local function desc_b(G, s, kk)
    local c = G.c
    if c.b_major == "k" then
      local per = c.kw // c.kstep
      return tl.wgmma_desc(G.sB:ptr(sub(G, s, kk // per), 0, kk % per * c.kstep), { swizzle = 128, sbo = 1024 })
    end
    return tl.wgmma_desc(G.sB:ptr(s, kk * 16, 0), { swizzle = 128, lbo = 8192, sbo = 1024 })
  end

  -- The wgmmas of stage s into accs (#accs 64-row slices of A from row `rows`),
  -- committed; first_step: D = A*B (a tile's first k block)
  local function mma_stage(G, accs, s, rows, first_step)
    local c = G.c
    local o = { type_a = c.dtype, type_b = c.dtype, trans_a = c.a_major ~= "k", trans_b = c.b_major ~= "k" }
    tl.wgmma_fence()
    for kk = 0, c.bk // c.kstep - 1 do
      o.scale_d = (first_step and kk == 0) and false or nil
      local db = desc_b(G, s, kk)
      for i = 1, #accs do accs[i] = tl.wgmma(accs[i], desc_a(G, s, rows + 64 * (i - 1), kk), db, o) end
    end
    tl.wgmma_commit()
    return accs
  end

  -- A stage is released once the wgmmas that read it completed: wgmma.wait_group
  -- is warpgroup-collective and completes their (async-proxy) reads, so one
  -- lane of each warp may release for its warp (the lowering counts it as 32
  -- arrivals), instead of every thread arriving; in a cluster every lane
  -- runs it (lane r releases on CTA r).
  local function release(G, s)
    if G.c.cluster > 1 then G.pipe:consumer_release(s) return end
    tl.elect_one(function() G.pipe:consumer_release(s) end)
  end

  -- A cluster split-K's work tile (m, n) as M.fixup reads a StreamK one: its
  -- split is its batch l; the last split (l = ksplits - 1) adds the others'
  -- partials. (The scheduler hands out l in order, the slowest index, and the
  -- grid is resident at once: every split a final one waits for is running or
  -- done.) A CTA of a cluster past the problem's tiles has no counter nor
  -- slots: one split for it (its stores are clipped).
  local function split_of(G, work, m, n)
    local c, l = G.c, work:l()
    local splits = tl.select(m:lt(G.TMS) & n:lt(G.TNS), tl.const(c.ksplits, tl.i32), tl.const(1, tl.i32))
    return { expected_splits = function() return splits end, split_idx = function() return l end,
             is_final_split = function() return l:eq(c.ksplits - 1) end }
  end

  -- A consumer warpgroup (warps [first, first + n)): wgmma mainloop and epilogue.
  -- g: the ping-pong warpgroup (0 or 1), nil for the cooperative ones.
  -- w: a warpgroup of its own (ping-pong's, or an uneven split's), nil: every
  -- cooperative warpgroup of an even split (the warpgroup a runtime value)
  local function consumer(G, a, first, n, g, w)
    local c, k, p, pipe, go = G.c, G.k, G.p, G.pipe, G.go
    local PP, BN, KT = c.consumers == "pingpong", c.bn, G.KT
    if c.regs then tl.setmaxnreg(c.regs[2], "inc") end
    local MI = w and not PP and c.lo[w + 1] - c.lo[w] or c.mi
    k:async_exec("consumer", { first_warp = first, warps = n }, function()
      -- the warpgroup: its 64-row slices of the tile (the first at `rows`),
      -- its staging buffers and named barrier
      local wg = w and tl.const(w, tl.i32) or a:warp_id() // 4
      local rows = PP and tl.const(0, tl.i32) or w and tl.const(64 * c.lo[w], tl.i32) or wg * (64 * MI)
      local t = a:thread_id() % 128
      -- C and bias may be the previous kernel's outputs and D its input (a PDL launch)
      if c.pdl then tl.griddepcontrol_wait() end
      local st = pipe:consumer_start()
      -- ping-pong: the second warpgroup's first tile is the CTA's second, its
      -- stages come after the first tile's k blocks
      if g == 1 then st:advance(KT) end
      local turn = PP and go[g + 1]:state { phase = g == 0 and 1 or 0 } -- warpgroup 0 goes first

      local function tile(work)
        local m, n = tile_of(G, work)
        local _, kbn = k_range(G, work)
        if PP then go[g + 1]:wait(turn) end
        -- ping-pong: the other warpgroup's mainloop may start once this one's
        -- wgmmas are issued (before the last wgmma.wait_group)
        local accs = M.mainloop(tl, pipe, st, 0, kbn, function()
          local z = {}
          for i = 1, MI do z[i] = tl.zeros(tl.f32, BN // 2) end
          return z
        end, function(acc, s, _, first_step) return mma_stage(G, acc, s, rows, first_step) end, function(s) release(G, s) end,
        PP and function() go[2 - g]:arrive(turn) end or nil)
        if PP then go[g + 1]:wait(turn) end -- the epilogues in the tiles' order
        local slices = {}
        for i = 1, MI do slices[i] = rows // 64 + (i - 1) end
        local final
        if c.schedule == "streamk" then accs, final = M.fixup(tl, c, p, work, accs, m, n, slices, t, w)
        elseif c.ksplits then accs, final = M.fixup(tl, c, p, split_of(G, work, m, n), accs, m, n, slices, t, w) end
        local function epilogues()
          for i = 1, MI do
            if c.swap_ab then M.epilogue_transposed(tl, c, p, accs[i], m, n, rows + 64 * (i - 1), t, G.dims)
            else M.epilogue(tl, c, p, G.sD, accs[i], m, n, wg, rows + 64 * (i - 1), t, G.dims) end
          end
        end
        if final then tl.if_(final, epilogues) else epilogues() end
        if PP then
          go[2 - g]:arrive(turn)
          st:advance(KT) -- past the other warpgroup's tile
        end
      end
      local bodies = PP and (g == 0 and { tile, false } or { false, tile }) or { tile }
      tiles(G, PP and { st, turn } or { st }, bodies)
      -- the last stores must have read the staging buffer before the CTA leaves
      -- (their writes to global memory complete with the grid)
      if not c.swap_ab then tl.if_(t:eq(0), function() tl.bulk_wait(0, { read = true }) end) end
    end)
  end

  -- A ksplit consumer warpgroup g (warps [first, first + 4)): kernels/gemm.lua's
  -- ksplit pieces over the persistent tile loop.
  local function ksplit_consumer(G, a, first, g)
    local c, k, p, pipe = G.c, G.k, G.p, G.pipe
    local BN = c.bn
    if c.regs then tl.setmaxnreg(c.regs[2], "inc") end
    k:async_exec("consumer", { first_warp = first, warps = 4 }, function()
      local t = a:thread_id() % 128
      if c.pdl then tl.griddepcontrol_wait() end
      local st = pipe:consumer_start()
      if g == 1 then st:advance(1) end
      local q = { value = tl.const(0, tl.i32) }
      local turn = M.ksplit_turn(G.sums, g)
      tiles(G, { st, q, turn }, { function(work)
        local m, n = tile_of(G, work)
        local _, kbn = k_range(G, work)
        local acc = M.ksplit_mainloop(tl, pipe, st, g, q, kbn, tl.zeros(tl.f32, BN // 2),
                                      function(v, s) return mma_stage(G, { v }, s, 0, false)[1] end,
                                      function(s) release(G, s) end)
        local v = M.ksplit_sum(tl, G.sums, g, turn, acc, BN // 2, t)
        if g == 0 then
          if c.swap_ab then M.epilogue_transposed(tl, c, p, v, m, n, 0, t, G.dims)
          else M.epilogue(tl, c, p, G.sD, v, m, n, 0, 0, t, G.dims) end
        end
      end })
      if g == 0 and not c.swap_ab then tl.if_(t:eq(0), function() tl.bulk_wait(0, { read = true }) end) end
    end)
  end

  -- The consumer agents: ping-pong's two, ksplit's two, an even split's one, an uneven split's one a warpgroup.
  local function consumers(G)
    local c, k = G.c, G.k
    if c.consumers == "ksplit" then
      k:agent("consumer0", { warps = 4 }, function(a) ksplit_consumer(G, a, 4, 0) end)
      k:agent("consumer1", { warps = 4 }, function(a) ksplit_consumer(G, a, 8, 1) end)
    elseif c.consumers == "pingpong" then
      k:agent("consumer0", { warps = 4 }, function(a) consumer(G, a, 4, 4, 0, 0) end)
      k:agent("consumer1", { warps = 4 }, function(a) consumer(G, a, 8, 4, 1, 1) end)
    elseif c.even then
      k:agent("consumer", { warps = 4 * c.wgs }, function(a) consumer(G, a, 4, 4 * c.wgs, nil, nil) end)
    else
      for w = 0, c.wgs - 1 do
        k:agent("consumer" .. w, { warps = 4 }, function(a) consumer(G, a, 4 + 4 * w, 4, nil, w) end)
      end
    end
  end

  local function build_kernel(c)
    local ein, eout = elem_type(c.dtype), elem_type(c.out)
    local params = kernel_params(c, ein, eout)
    local CL = c.cluster
    local k = tl.kernel(c.name, { params = params, block = 128 * (1 + c.wgs), cluster = CL > 1 and { CL, 1, 1 } or nil })
    k:define(function(k, p)
      local G = kernel_state(c, k, p, ein, eout)
      producer(G)
      consumers(G)
      if CL > 1 then tl.cluster_sync() end -- no CTA leaves while another may still write to it
    end)
    return k
  end

  -- }===================================================================

  -- The launch recipe of c (tilua.gpu.recipe): what g:run does, as data that
  -- `tilua export` writes as C too. The operands are row-major buffers of the
  -- shapes c was built for; the tensor maps take the parameters' types (element,
  -- box, swizzle); the grid and the StreamK workspace are c's.
  local function recipe(c)
    local r = { inputs = { { name = "a", kind = "buffer" }, { name = "b", kind = "buffer" }, { name = "d", kind = "buffer" } },
                args = { { "map", "a", shape = c.a_major == "k" and { c.m, c.k } or { c.k, c.m } },
                         { "map", "b", shape = c.b_major == "k" and { c.n, c.k } or { c.k, c.n } },
                         c.swap_ab and { "ptr", "d" } or { "map", "d", shape = { c.m, c.n } } },
                grid = { c.grid, 1, 1 }, pdl = c.pdl or nil }
    if c.schedule == "persistent" and c.cluster > 1 then
      -- a persistent grid of clusters: no more than can be resident at once (a
      -- GPC fits a whole number of clusters: 132 SMs hold 30 of 4, not 33)
      r.grid[1] = { "max", c.cluster, { "min", c.grid, { "mul", { "clusters" }, c.cluster } } }
    end
    local function add(input, fill)
      r.inputs[#r.inputs + 1] = input
      r.args[#r.args + 1] = fill
    end
    if c.alpha_param then add({ name = "alpha", kind = "scalar", default = c.alpha or 1 }, { "scalar", "alpha" }) end
    if c.beta and c.beta ~= 0 then add({ name = "c", kind = "buffer" }, { "ptr", "c" }) end
    if c.bias then add({ name = "bias", kind = "buffer" }, { "ptr", "bias" }) end
    if c.schedule == "streamk" or c.ksplits then
      add({ name = "workspace", kind = "workspace" }, { "workspace" })
      r.workspace = M.workspace_bytes(c)
    end
    if c.dynamic then -- the problem's sizes, last (this configuration's shape)
      for _, x in ipairs { c.m, c.n, c.k } do r.args[#r.args + 1] = { "int", x } end
    end
    return r
  end

  tl.gemm.config = cfg_of
  function tl.gemm.build(o)
    local c = cfg_of(o)
    -- the SMs the grid is planned for: the device's, or c.sms (a smaller
    -- persistent grid: each CTA walks several tiles)
    c.sms_planned = c.sms or (tl.device.available() and tl.device.sm_count() or 132)
    c.grid = M.grid_of(c, c.ctiles)
    if c.schedule == "streamk" then M.plan_streamk(tl, c) end
    local g = setmetatable({ cfg = c, source = o, grid = c.grid, flops = 2.0 * c.m * c.n * c.k,
                             workspace_bytes = (c.schedule == "streamk" or c.ksplits) and M.workspace_bytes(c) or 0 }, M.Gemm)
    local saved = tl.module() -- each GEMM is a module of its own
    tl.new_module()
    g.kernel = tl.at_caller(build_kernel, c) -- every op at the user's line
    g.kernel.recipe = recipe(c)
    tl.set_module(saved)
    return g
  end

  M.Gemm = {}
  M.Gemm.__index = M.Gemm

  -- The configuration for a problem shape (o.m, o.n, o.k; absent: the built
  -- one's): a dynamic kernel takes any, another only its own. Each shape's
  -- configuration carries its launch recipe (the built one's is the kernel's).
  function M.Gemm:shaped(o)
    local c = self.cfg
    local m, n, k = o and o.m or c.m, o and o.n or c.n, o and o.k or c.k
    if m == c.m and n == c.n and k == c.k then return c end
    if not c.dynamic then
      raise(("gemm: this kernel was built for %dx%dx%d, not %dx%dx%d (build it with dynamic = true)"):format(
        c.m, c.n, c.k, m, n, k))
    end
    self._shapes = self._shapes or {}
    local key = ("%dx%dx%d"):format(m, n, k)
    if not self._shapes[key] then
      local t = {}
      for key2, v in pairs(self.source) do t[key2] = v end
      t.m, t.n, t.k, t.stages, t.name = m, n, k, c.stages, c.name
      local s = cfg_of(t)
      s.sms_planned = c.sms_planned
      s.grid = M.grid_of(s, s.ctiles)
      s.recipe = recipe(s)
      self._shapes[key] = s
    end
    return self._shapes[key]
  end

  -- The tensor maps of the operands as stored (row-major buffers), for the
  -- configuration c (default the built one).
  function M.Gemm:maps(a, b, d, c)
    local r = c and c.recipe or self.kernel.recipe
    local k, inputs, V = self.kernel, { a = a, b = b, d = d }, tl.recipe.value
    return V(r, k.params, {}, inputs, 1), V(r, k.params, {}, inputs, 2), V(r, k.params, {}, inputs, 3)
  end

  -- g:run{a, b, d [, c, bias, alpha] [, m, n, k]}: launches (asynchronously);
  -- returns self. m, n, k: the problem of this launch (a dynamic kernel's).
  -- The tensor maps (self._maps) and the StreamK workspace (self._workspace,
  -- zeroed once: the final split of each tile resets its own counter) are kept.
  function M.Gemm:run(o)
    local c = self:shaped(o)
    if c.beta and c.beta ~= 0 and not o.c then raise("gemm:run: beta ~= 0 needs c") end
    if c.bias and not o.bias then raise("gemm:run: bias = true needs a bias buffer") end
    local grid, args = tl.recipe.values(c.recipe or self.kernel.recipe, self.kernel.params, self, o)
    self.kernel:launch { grid = grid, args = args, pdl = c.pdl }
    return self
  end

  -- g:max_active_clusters() -> its kernel's (the recipe's { "clusters" }).
  function M.Gemm:max_active_clusters() return self.kernel:max_active_clusters() end

  -- {===================================================================
  -- Checking: a plain tilua reference kernel and a sampled CPU check
  -- ====================================================================

  -- R[M, N] (f32) = alpha * A . B (+ beta * C) (+ bias, activation): one thread an element.
  local function reference_kernel(c)
    local ein, eout = elem_type(c.dtype), elem_type(c.out)
    if c.fp8 then raise("gemm.reference: fp8 inputs are checked against cuBLAS") end
    local name = c.name .. "_reference"
    local params = { { "A", tl.ptr(ein) }, { "B", tl.ptr(ein) }, { "R", tl.ptr(tl.f32) }, { "C", tl.ptr(eout) },
                     { "bias", tl.ptr(tl.f32) } }
    local k = tl.kernel(name, { params = params, block = { 16, 16, 1 } })
    k:define(function(k, p)
      local j, i = tl.global_id "x", tl.global_id "y"
      tl.if_(i:lt(c.m) & j:lt(c.n), function()
        local i64, j64 = i:cast(tl.i64), j:cast(tl.i64)
        local acc = tl.for_range(tl.const(0, tl.i64), tl.const(c.k, tl.i64), { tl.const(0, tl.f32) }, function(kk, s)
          local ia = c.a_major == "k" and i64 * c.k + kk or kk * c.m + i64
          local ib = c.b_major == "k" and j64 * c.k + kk or kk * c.n + j64
          return tl.fma((p.A + ia):load():cast(tl.f32), (p.B + ib):load():cast(tl.f32), s)
        end)
        local v = acc * tl.const(c.alpha or 1, tl.f32)
        if c.bias then v = v + (p.bias + j):load() end
        if c.beta and c.beta ~= 0 then v = v + (p.C + (i64 * c.n + j64)):load():cast(tl.f32) * tl.const(c.beta, tl.f32) end
        if c.activation == "relu" then v = tl.max(v, tl.const(0, tl.f32)) end
        (p.R + (i64 * c.n + j64)):store(v)
      end)
    end)
    return k
  end

  -- bad[0] += #{ i : |D[i] - R[i]| > tol }, bad[1] = max |D[i] - R[i]| (as f32 bits)
  local function compare_kernel(c, rtype)
    local eout = elem_type(c.out)
    local k = tl.kernel(c.name .. "_compare", {
      params = { { "D", tl.ptr(eout) }, { "R", tl.ptr(rtype) }, { "bad", tl.ptr(tl.i32) }, { "n", tl.i64 } },
      block = 256 })
    k:define(function(k, p)
      local i = tl.global_id("x"):cast(tl.i64)
      tl.if_(i:lt(p.n), function()
        local d, r = (p.D + i):load():cast(tl.f32), (p.R + i):load():cast(tl.f32)
        local err = tl.max(d - r, r - d)
        -- the output's rounding (2^-8 relative for bf16) and f32 summation order
        -- (fp8: the tensor cores accumulate in about 14 bits, truncating)
        local rel = c.fp8 and 2 ^ -5 or c.out == "f16" and 2 ^ -9 or 2 ^ -7
        local tol = tl.max(r, tl.const(0, tl.f32) - r) * tl.const(rel, tl.f32) +
                    tl.const((c.fp8 and 5e-2 or 1e-3) * math.sqrt(c.k), tl.f32)
        tl.if_(err:gt(tol) | err:ne(err), function() tl.atomic_add(p.bad, 1) end)
        tl.atomic_max(p.bad + 1, tl.min(err, tl.const(3.0e38, tl.f32)):bitcast(tl.i32))
      end)
    end)
    return k
  end

  -- Every element of D against a CPU reference in double (alpha, beta C, bias,
  -- relu; either major), within compare_kernel's tolerance: the check on the CPU
  -- emulator (tilua --emulate), whose buffers are on the host and whose grids
  -- run along x only (the reference kernel's is two-dimensional).
  local function cpu_check(c, o)
    if c.fp8 then raise("gemm: fp8 results are checked against cuBLAS, which the CPU emulator does not have") end
    local A, B, D = o.a:to_table(), o.b:to_table(), o.d:to_table()
    local C = c.beta and c.beta ~= 0 and o.c:to_table() or nil
    local bias = c.bias and o.bias:to_table() or nil
    local rel = c.out == "f16" and 2 ^ -9 or 2 ^ -7
    local bad, worst = 0, 0
    for i = 0, c.m - 1 do
      for j = 0, c.n - 1 do
        local sum = 0.0
        for kk = 0, c.k - 1 do
          local a = c.a_major == "k" and A[i * c.k + kk + 1] or A[kk * c.m + i + 1]
          local b = c.b_major == "k" and B[j * c.k + kk + 1] or B[kk * c.n + j + 1]
          sum = sum + a * b
        end
        local v = sum * (c.alpha or 1)
        if bias then v = v + bias[j + 1] end
        if C then v = v + C[i * c.n + j + 1] * c.beta end
        if c.activation == "relu" and v < 0 then v = 0 end
        local err = math.abs(D[i * c.n + j + 1] - v)
        if err > math.abs(v) * rel + 1e-3 * math.sqrt(c.k) or err ~= err then bad = bad + 1 end
        worst = math.max(worst, err)
      end
    end
    return bad == 0, ("%d of %d elements off the CPU reference (max error %.3g)"):format(bad, c.m * c.n, worst)
  end

  -- g:check{a, b, d [, c, bias] [, reference = buffer] [, samples = 32]} -> ok, report:
  -- D against `reference` (another implementation's result, e.g. cuBLAS) or else
  -- against the plain reference kernel on the GPU, and `samples` elements against
  -- a CPU dot product; on the CPU emulator every element against the CPU.
  function M.Gemm:check(o)
    local c = self:shaped(o)
    if tl.options.emulate and not o.reference then return cpu_check(c, o) end
    local D = tl.device
    local saved = tl.module()
    tl.new_module()
    local ref = not o.reference and reference_kernel(c) or nil
    local cmp = compare_kernel(c, o.reference and o.reference.type or tl.f32)
    tl.set_module(saved)
    local R <close> = not o.reference and D.alloc(tl.f32, c.m * c.n) or nil
    local bad <close> = D.alloc(tl.i32, 2)
    bad:fill(0)
    -- stand-ins of the element types of C and bias, when there are none
    local no_c <close> = not o.c and D.alloc(elem_type(c.out), 4) or nil
    local no_bias <close> = not o.bias and D.alloc(tl.f32, 4) or nil
    if ref then
      ref:launch { grid = { (c.n + 15) // 16, (c.m + 15) // 16, 1 },
                   args = { o.a, o.b, R, o.c or no_c, o.bias or no_bias } }
    end
    cmp:launch { grid = (c.m * c.n + 255) // 256, args = { o.d, o.reference or R, bad, c.m * c.n } }
    D.synchronize()
    local b = bad:to_table()
    local maxerr = string.unpack("<f", string.pack("<i4", b[2]))
    local report = ("%d of %d elements off the %s (max error %.3g)"):format(b[1], c.m * c.n,
      o.reference and "reference result" or "GPU reference kernel", maxerr)
    local ok = b[1] == 0
    -- CPU: sampled dot products in double (K-major operands: one row each)
    if c.a_major == "k" and c.b_major == "k" and not c.fp8 and not c.bias and not (c.beta and c.beta ~= 0) then
      local rng, worst, nbad = (o.seed or 1) * 2654435761 % 4294967296, 0, 0
      local n = o.samples or 32
      for _ = 1, n do
        rng = (rng * 1103515245 + 12345) % 2147483648
        local i = rng % c.m
        rng = (rng * 1103515245 + 12345) % 2147483648
        local j = rng % c.n
        local ra = o.a:to_table(i * c.k + 1, i * c.k + c.k)
        local rb = o.b:to_table(j * c.k + 1, j * c.k + c.k)
        local sum = 0.0
        for kk = 1, c.k do sum = sum + ra[kk] * rb[kk] end
        sum = sum * (c.alpha or 1)
        if c.activation == "relu" and sum < 0 then sum = 0 end
        local got = o.d:to_table(i * c.n + j + 1, i * c.n + j + 1)[1]
        local err = math.abs(got - sum)
        worst = math.max(worst, err)
        if err > math.abs(sum) * 2 ^ -7 + 1e-3 * math.sqrt(c.k) then nbad = nbad + 1 end
      end
      report = report .. ("; %d of %d CPU samples off (max error %.3g)"):format(nbad, n, worst)
      ok = ok and nbad == 0
    end
    return ok, report
  end
end

return M
