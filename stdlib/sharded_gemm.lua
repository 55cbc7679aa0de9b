-- stdlib/sharded_gemm.lua: GEMMs sharded over the ranks of an NCCL
-- communicator (tl.nccl), whose communication overlaps the GEMM (docs/scale.md).
--
--   local rp = tl.sharded_gemm.row_parallel{ comm = comm, m = M, n = N, k = K, chunks = 4 }
--   rp:run{ a = A_r, b = B_r, d = D }       A_r: M x K/n, B_r: N x K/n (this rank's K slice)
--                                           D: M x N = sum over the ranks of A_r . B_r^T
--   local cp = tl.sharded_gemm.column_parallel{ comm = comm, m = M, n = N, k = K, chunks = 4 }
--   cp:run{ a = A_r, b = B_r, d = D_r }     A_r: M/n x K (this rank's rows), B_r: N/n x K
--                                           D_r: M x N/n = A . B_r^T, A all ranks' rows
--
-- Row-parallel (the second GEMM of a tensor-parallel MLP): the output's rows
-- are cut in `chunks`; chunk c's GEMM runs on the compute stream, an event
-- after it lets the communication stream all-reduce chunk c while chunk c + 1
-- is computed. Column-parallel with a sequence-parallel input: every rank's
-- rows of A are all-gathered chunk by chunk on the communication stream while
-- the compute stream multiplies the rows this rank holds; each gathered chunk
-- is multiplied as soon as its event says it arrived. chunks = 1 and
-- overlap = false give the plain order: the GEMM, then the collective (or the
-- all-gather, then the GEMM). bf16 (or f16) in and out, f32 accumulation; the
-- GEMM is tl.gemm's (any of its options: bn, stages, schedule, cluster, sms;
-- overlap_schedule: the schedule of the overlapped chunks, data_parallel by default).
local tl = require "tilua" -- the library being built (init.lua registers it before its rooms)

local M = {}

do -- tl.sharded_gemm (an indented block)
  local raise = tl.raise
  tl.sharded_gemm = M

  local function options(o, what)
    if type(o) ~= "table" then raise(("sharded_gemm.%s: expected a table of options"):format(what)) end
    if getmetatable(o.comm) ~= tl.nccl.Comm then raise(("sharded_gemm.%s: 'comm' must be a tl.nccl communicator"):format(what)) end
    for _, key in ipairs { "m", "n", "k" } do
      if math.type(o[key]) ~= "integer" or o[key] < 1 then raise(("sharded_gemm.%s: '%s' must be a positive integer"):format(what, key)) end
    end
    local chunks = o.chunks or 4
    if math.type(chunks) ~= "integer" or chunks < 1 then raise(("sharded_gemm.%s: 'chunks' must be a positive integer"):format(what)) end
    return o.comm.nranks, o.comm.rank, chunks
  end

  local OWN = { comm = true, chunks = true, overlap = true, overlap_schedule = true }

  -- tl.gemm's options of o (every one but the sharding's), for an m x n x k
  -- GEMM. Overlapped, the GEMM's schedule is o.overlap_schedule (default
  -- data-parallel: a CTA a tile, so that the collective's CTAs take SMs as
  -- tiles finish; a persistent grid would hold every SM until its chunk ends).
  local function gemm(o, m, n, k, tag, overlapped)
    local c = {}
    for key, v in pairs(o) do
      if not OWN[key] then c[key] = v end
    end
    if overlapped then c.schedule = o.overlap_schedule or "data_parallel" end
    c.m, c.n, c.k = m, n, k
    c.name = ("%s_%dx%dx%d"):format(tag, m, n, k)
    local g = tl.gemm.build(c)
    if #g.kernel.recipe.args ~= 3 then -- a chunk's launch passes the three tensor maps alone
      raise(("sharded_gemm: a GEMM whose kernel takes more than the tensor maps of A, B and D (%d parameters: dynamic, streamk, alpha, beta or bias) is not supported"):format(#g.kernel.recipe.args))
    end
    g.kernel:compile()
    return g
  end

  local function elem(o) return o.out == "f16" and tl.f16 or tl.bf16 end

  -- The streams and events a sharded GEMM runs on, made at its first run.
  local function streams(self, nevents)
    if self.compute then return end
    -- the collectives' kernels take SMs first as the GEMM's CTAs leave them
    self.compute, self.comm_stream = tl.device.stream(), tl.device.stream { priority = "high" }
    self.start, self.done = tl.device.event(), tl.device.event()
    self.events = {}
    for i = 1, nevents do self.events[i] = tl.device.event() end
  end

  -- The streams start after what the default stream was given before (the
  -- inputs), and the default stream's later work waits for them.
  local function begin(self)
    self.start:record()
    self.compute:wait(self.start)
    self.comm_stream:wait(self.start)
  end
  local function finish(self)
    self.done:record(self.compute)
    tl.device.wait(self.done)
    self.done:record(self.comm_stream)
    tl.device.wait(self.done)
  end

  -- The tensor maps of one chunk's launch, made once per buffer set.
  local function launch(self, g, key, a, b, d, stream)
    self.maps = self.maps or {}
    local m = self.maps[key]
    if not m or m.a ~= a.raw or m.b ~= b.raw or m.d ~= d.raw then
      local ma, mb, md = g:maps(a, b, d)
      m = { a = a.raw, b = b.raw, d = d.raw, ma, mb, md }
      self.maps[key] = m
    end
    g.kernel:launch { grid = g.grid, args = { m[1], m[2], m[3] }, stream = stream }
  end

  local function check_buffer(what, buf, n, t)
    if type(buf) ~= "table" or not buf.raw or buf.n ~= n or buf.type ~= t then
      raise(("sharded_gemm: '%s' must be a device buffer of %d x %s, got %s"):format(what, n, tostring(t),
        type(buf) == "table" and buf.n and ("%d x %s"):format(buf.n, tostring(buf.type)) or type(buf)))
    end
  end

  -- {=== row-parallel: GEMM of this rank's K slice, all-reduce of the output

  local RowParallel = {}
  RowParallel.__index = RowParallel

  function M.row_parallel(o)
    local n, _, chunks = options(o, "row_parallel")
    if o.k % n ~= 0 then raise(("sharded_gemm.row_parallel: k = %d is not a multiple of %d ranks"):format(o.k, n)) end
    if o.m % chunks ~= 0 then raise(("sharded_gemm.row_parallel: m = %d is not a multiple of %d chunks"):format(o.m, chunks)) end
    local self = setmetatable({ o = o, comm = o.comm, nranks = n, chunks = chunks, m = o.m, n = o.n, k = o.k,
                                kl = o.k // n, rows = o.m // chunks, overlap = o.overlap ~= false }, RowParallel)
    self.gemm = gemm(o, self.rows, o.n, self.kl, "row_parallel", self.overlap)
    self.flops = 2.0 * o.m * o.n * o.k
    return self
  end

  -- rp:run{a = A_r (M x K/n), b = B_r (N x K/n), d = D (M x N)}: asynchronous;
  -- the default stream's later work (tl.device.synchronize, copies) waits for it.
  function RowParallel:run(io)
    local t = elem(self.o)
    check_buffer("a", io.a, self.m * self.kl, t)
    check_buffer("b", io.b, self.n * self.kl, t)
    check_buffer("d", io.d, self.m * self.n, t)
    streams(self, self.chunks)
    begin(self)
    local rows, kl, N = self.rows, self.kl, self.n
    for c = 0, self.chunks - 1 do
      local d = io.d:view(c * rows * N + 1, rows * N)
      launch(self, self.gemm, c, io.a:view(c * rows * kl + 1, rows * kl), io.b, d, self.compute)
      if self.overlap then -- chunk c goes to NCCL as soon as its GEMM is done
        local e = self.events[c + 1]
        e:record(self.compute)
        self.comm_stream:wait(e)
        self.comm:all_reduce(d, nil, { stream = self.comm_stream })
      end
    end
    if not self.overlap then
      self.events[1]:record(self.compute)
      self.comm_stream:wait(self.events[1])
      self.comm:all_reduce(io.d, nil, { stream = self.comm_stream })
    end
    finish(self)
    return self
  end

  -- }===

  -- {=== column-parallel: all-gather of the rows of A, GEMM with this rank's columns

  local ColumnParallel = {}
  ColumnParallel.__index = ColumnParallel

  function M.column_parallel(o)
    local n, rank, chunks = options(o, "column_parallel")
    if o.n % n ~= 0 then raise(("sharded_gemm.column_parallel: n = %d is not a multiple of %d ranks"):format(o.n, n)) end
    if o.m % (n * chunks) ~= 0 then
      raise(("sharded_gemm.column_parallel: m = %d is not a multiple of %d ranks x %d chunks"):format(o.m, n, chunks))
    end
    local self = setmetatable({ o = o, comm = o.comm, nranks = n, rank = rank, chunks = chunks, m = o.m, n = o.n,
                                k = o.k, nl = o.n // n, ml = o.m // n, rows = o.m // (n * chunks),
                                overlap = o.overlap ~= false }, ColumnParallel)
    if self.overlap then self.gemm = gemm(o, self.rows, self.nl, o.k, "column_parallel", true)
    else self.gemm = gemm(o, o.m, self.nl, o.k, "column_parallel") end
    self.flops = 2.0 * o.m * o.n * o.k
    return self
  end

  -- cp:run{a = A_r (M/n x K), b = B_r (N/n x K), d = D_r (M x N/n) [, gathered = M x K]}:
  -- asynchronous like rp:run. `gathered` receives every rank's rows of A (in
  -- chunk-major order when overlapping); made once when not given.
  function ColumnParallel:run(io)
    local t = elem(self.o)
    local K, rows, nr = self.k, self.rows, self.nranks
    check_buffer("a", io.a, self.ml * K, t)
    check_buffer("b", io.b, self.nl * K, t)
    check_buffer("d", io.d, self.m * self.nl, t)
    local gathered = io.gathered
    if not gathered then
      self.gathered = self.gathered or tl.device.alloc(t, self.m * K)
      gathered = self.gathered
    end
    check_buffer("gathered", gathered, self.m * K, t)
    streams(self, self.chunks)
    begin(self)
    if not self.overlap then
      self.comm:all_gather(io.a, gathered, { stream = self.comm_stream })
      self.events[1]:record(self.comm_stream)
      self.compute:wait(self.events[1])
      launch(self, self.gemm, "all", gathered, io.b, io.d, self.compute)
      finish(self)
      return self
    end
    local nl = self.nl
    -- D's rows of rank q's chunk c: q * M/n + c * rows
    local function out_rows(q, c) return io.d:view((q * self.ml + c * rows) * nl + 1, rows * nl) end
    for c = 0, self.chunks - 1 do -- the gathers, in order, on the communication stream
      self.comm:all_gather(io.a:view(c * rows * K + 1, rows * K), gathered:view(c * nr * rows * K + 1, nr * rows * K),
                           { stream = self.comm_stream })
      self.events[c + 1]:record(self.comm_stream)
    end
    for c = 0, self.chunks - 1 do -- this rank's own rows need no gather
      launch(self, self.gemm, "own" .. c, io.a:view(c * rows * K + 1, rows * K), io.b, out_rows(self.rank, c),
             self.compute)
    end
    for c = 0, self.chunks - 1 do
      self.compute:wait(self.events[c + 1])
      for q = 0, nr - 1 do
        if q ~= self.rank then
          launch(self, self.gemm, ("g%d/%d"):format(c, q), gathered:view((c * nr + q) * rows * K + 1, rows * K), io.b,
                 out_rows(q, c), self.compute)
        end
      end
    end
    finish(self)
    return self
  end

  -- }===

  -- {=== checking against one GPU

  -- bad[0] = #{ (i, j) : |D[i, j] - R[i, col0 + j]| > rel |R| + abs }, bad[1] = max error (f32 bits)
  local compare
  local function compare_kernel(t)
    if compare then return compare end
    local saved = tl.module()
    tl.new_module()
    local k = tl.kernel("sharded_gemm_compare", {
      params = { { "D", tl.ptr(t) }, { "R", tl.ptr(t) }, { "bad", tl.ptr(tl.i32) }, { "rows", tl.i32 },
                 { "cols", tl.i32 }, { "ldr", tl.i64 }, { "col0", tl.i64 }, { "rel", tl.f32 }, { "abs", tl.f32 } },
      block = { 32, 8, 1 } })
    k:define(function(_, p)
      local j, i = tl.global_id "x", tl.global_id "y"
      tl.if_(i:lt(p.rows) & j:lt(p.cols), function()
        local i64, j64 = i:cast(tl.i64), j:cast(tl.i64)
        local d = (p.D + (i64 * p.cols:cast(tl.i64) + j64)):load():cast(tl.f32)
        local r = (p.R + (i64 * p.ldr + p.col0 + j64)):load():cast(tl.f32)
        local err = tl.max(d - r, r - d)
        local tol = tl.max(r, tl.const(0, tl.f32) - r) * p.rel + p.abs
        tl.if_(err:gt(tol) | err:ne(err), function() tl.atomic_add(p.bad, 1) end)
        tl.atomic_max(p.bad + 1, tl.min(err, tl.const(3.0e38, tl.f32)):bitcast(tl.i32))
      end)
    end)
    k:compile()
    tl.set_module(saved)
    compare = k
    return k
  end

  -- tl.sharded_gemm.compare(d, rows, cols, ref, ldr, col0, rel, abs) -> bad elements, max error:
  -- D (rows x cols) against columns col0.. of R (rows x ldr)
  function M.compare(d, rows, cols, ref, ldr, col0, rel, abs)
    local k = compare_kernel(d.type)
    local bad <close> = tl.device.from(tl.i32, { 0, 0 })
    k:launch { grid = { (cols + 31) // 32, (rows + 7) // 8, 1 },
               args = { d, ref, bad, rows, cols, ldr, col0, rel, abs } }
    local v = bad:to_table()
    return v[1], string.unpack("<f", string.pack("<i4", v[2]))
  end

  -- }===
end

return M
