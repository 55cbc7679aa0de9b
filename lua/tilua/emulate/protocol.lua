-- tilua.emulate.protocol: the user's access to the protocol checker (docs/protocol.md,
-- "Running the checker"): the inputs derived from a kernel when none are given
-- (textual IR, the REPL, the check after every pass), the checker's result as pass
-- diagnostics at the ops of the IR (the verify-protocol pass,
-- tilua.passes), and the replay of a counterexample on the emulator, one
-- frame per step (the REPL's :replay steps through them).
--
--   local P = require "tilua.emulate.protocol"
--   local r = P.check(kernel, { grid = 1, max_states = 20000 })  -- r.inputs: what it chose
--   local frames = P.replay(kernel, r)                            -- frames[0 .. frames.n]
--   for i = 0, frames.n do print(P.format_frame(frames[i], frames[i - 1])) end
--   print(P.print_item(frames[3], "s1"))                          -- every byte of a stage after step 3

local core = require "tilua.core"
local em = require "tilua.emulate"

local M = {}

-- The tile.kernel ops of a module (or the op itself, or a kernel object's).
function M.kernels(x)
  if type(x) == "table" and x.op then return { x.op } end
  if x:name() == "tile.kernel" then return { x } end
  local out = {}
  x:walk(function(o) if o:name() == "tile.kernel" then out[#out + 1] = o end end)
  return out
end

local function kernel_of(x)
  local ks = M.kernels(x)
  if #ks == 0 then error("no tile.kernel to check", 0) end
  return ks[1]
end

-- The bytes of a value of type t (the C side's, t:info().bytes).
local function elem_bytes(t) return t:info().bytes or 1 end

-- The element type and box of a !tile.tensor_map type's info, or nil.
local function tensor_map_of(info)
  if info.kind ~= "dialect" or info.name ~= "tile.tensor_map" then return nil end
  local box = {}
  for d = 3, #info.params do box[#box + 1] = info.params[d] end
  return info.params[1], box
end

-- The element type and rank of a !tileas.tensor type's info, or nil.
local function tensor_of(info)
  if info.kind ~= "dialect" or info.name ~= "tileas.tensor" then return nil end
  return info.params[1], info.params[2]
end

-- The arguments for a size n: every integer (and index) parameter gets n (but
-- those fixed[i] = {v =, shown =} fixes: fixed_params), a float parameter
-- 1.0, a pointer parameter a fresh zeroed buffer of `bytes` bytes (default n
-- times its element size), or with o.fill == "pattern" one whose byte j is
-- j % 251 + 1 (the REPL's :check).
local function args_for(kop, n, o, fixed, small)
  local args, shown = {}, {}
  for i, a in ipairs(kop:region(1):entry():args()) do
    local t = a:type()
    local info = t:info()
    local elem, box = tensor_map_of(info)
    if box then -- a tensor map: a zeroed tensor of one box (TMA fills outside it with zeros, clips stores)
      local shape, elems = {}, 1
      for _, d in ipairs(box) do
        shape[#shape + 1] = d
        elems = elems * d
      end
      args[i] = { bytes = elems * elem_bytes(elem), shape = shape }
      shown[i] = ("a tensor map of %s zeros"):format(table.concat(shape, " x "))
    elseif info.kind == "ptr" then
      local b = o.bytes or n * elem_bytes(info.elem)
      if o.fill == "pattern" then -- byte j = j % 251 + 1: data that moved shows in :replay
        local bytes = {}
        for j = 0, b - 1 do bytes[j + 1] = string.char(j % 251 + 1) end
        args[i], shown[i] = table.concat(bytes), ("%d bytes 01 02 03 ..."):format(b)
      else
        args[i], shown[i] = { bytes = b }, ("%d zero bytes"):format(b)
      end
    elseif info.kind == "float" then
      args[i], shown[i] = 1.0, "1.0"
    elseif fixed[i] then
      args[i], shown[i] = fixed[i].v, fixed[i].shown
    else
      local v = small and small[i] or n -- (an integer parameter the search held small)
      args[i], shown[i] = v, tostring(v)
    end
  end
  return args, shown
end

-- {=== the inputs derived from the kernel

-- Integer parameters that are the worker count of a persistent or StreamK
-- scheduler (operand 5 of its params op): { [parameter index] = true }. They
-- get the grid's clusters, so that every worker the plan counts on runs (a
-- StreamK fixup waits for its peers: fewer CTAs than workers is a deadlock of
-- the inputs, not of the kernel).
local WORKERS = { ["cutlass.tile_scheduler.create_static_persistent_params"] = 5,
                  ["cutlass.tile_scheduler.create_streamk_params"] = 5,
                  ["cutlass.tile_scheduler.create_sm100_streamk_params"] = 5 }
local function workers_params(kop)
  local index, out = {}, {}
  for i, a in ipairs(kop:region(1):entry():args()) do index[a:id()] = i end
  kop:walk(function(o)
    local w = WORKERS[o:name()]
    if w and o:noperands() >= w then
      local i = index[o:operand(w):id()]
      if i then out[i] = true end
    end
  end)
  return out
end

-- The rings of a kernel at the authoring level: { depth = stages [, bytes =
-- the bytes of all its stages] } for each cutlass pipeline (stages x
-- transaction_bytes), seq_bar (depth), shared memref of rank 2 or more (its
-- first dimension, all its bytes) and shared array of mbarriers (i64, count).
local function rings(kop)
  local out, stages = {}, {}
  kop:walk(function(o)
    local n = o:name()
    if n == "cutlass.pipeline.create" then
      stages[o:result(1):id()] = o:result(1):type():info().params[1]
    elseif n == "cutlass.pipeline.init" then
      local s = stages[o:operand(1):id()]
      local tx = o:attr_or_default "transaction_bytes"
      if s then out[#out + 1] = { depth = s, bytes = tx > 0 and s * tx or nil } end
    elseif n == "cutlass.seq_bar.create" then
      out[#out + 1] = { depth = o:result(1):type():info().params[1] }
    elseif n == "tile.alloc_shared" then
      local info = o:result(1):type():info()
      if info.kind == "memref" and #info.shape >= 2 then
        local b = elem_bytes(info.elem)
        for _, d in ipairs(info.shape) do b = b * d end
        out[#out + 1] = { depth = info.shape[1], bytes = b }
      elseif info.kind == "ptr" and o:attr_or_default "count" > 1 and info.elem:info().kind == "int"
             and info.elem:info().width == 64 then
        out[#out + 1] = { depth = o:attr "count" }
      end
    end
  end)
  return out
end

-- The sizes to try, smallest first: one element per thread of the grid, and
-- for every ring of depth S, 2S and 3S (counts of iterations: k steps, rounds;
-- 3S for a ring whose releases lag a lap behind its fills) and, for a ring of
-- B bytes, 2B and 3B bytes in the elements of every pointer parameter (a
-- length that the ring moves); each also times the grid (a persistent kernel
-- shares the work among its CTAs). A kernel with mbarriers but no ring the
-- authoring level shows (lowered IR) also tries M.SIZES above one element per
-- thread; one without mbarriers has no ring to wrap: one element per thread.
local MBAR_INIT = { ["tile.mbarrier_init"] = true, ["nvvm.mbarrier.init.shared"] = true, ["nvvm.mbarrier.init"] = true }
local function has_mbarriers(kop)
  local found = false
  kop:walk(function(o) found = found or MBAR_INIT[o:name()] ~= nil end)
  return found
end
local function derived_sizes(kop, grid)
  local ks = kop:kernel_spec() or {}
  local per_thread = grid * (ks.threads or 32)
  local rs = rings(kop)
  local elems = {}
  for _, a in ipairs(kop:region(1):entry():args()) do
    local info = a:type():info()
    if info.kind == "ptr" then elems[elem_bytes(info.elem)] = true end
  end
  local set, out = {}, {}
  local function add(v) if v >= 1 and not set[v] then set[v], out[#out + 1] = true, v end end
  add(per_thread)
  for _, r in ipairs(rs) do
    for _, f in ipairs { 2, 3, 2 * grid, 3 * grid } do -- on grid CTAs a persistent kernel shares the work
      add(f * r.depth)
      if r.bytes then
        for e in pairs(elems) do add((f * r.bytes + e - 1) // e) end
      end
    end
  end
  if #rs == 0 and has_mbarriers(kop) then
    for _, v in ipairs(M.SIZES) do if v > per_thread then add(v) end end
  end
  table.sort(out)
  return out
end

-- }===

M.SIZES = { 8, 64, 256, 1024, 4096, 16384, 65536, 262144 }

-- The CTAs of the kernel's cluster (the smallest grid it runs on: a check's
-- grid when none is given).
local function cluster_size(kop)
  local ks = kop:kernel_spec() or {}
  return ks.has_cluster and ks.cluster and ks.cluster[1] or 1
end

-- The integer parameters whose value the grid fixes on grid CTAs: a
-- scheduler's worker count (the grid's clusters) and a size the kernel
-- declares (kernel_spec.sizes: the grid's threads or CTAs, the precondition
-- every launch checks). -> { [parameter index] = { v = value, shown = text } }.
local function fixed_params(kop, grid)
  local ks = kop:kernel_spec() or {}
  local out = {}
  local nworkers = math.max(1, grid // cluster_size(kop)) -- workers are clusters
  for i in pairs(workers_params(kop)) do
    out[i] = { v = nworkers, shown = ("%d (workers: the grid's clusters)"):format(nworkers) }
  end
  if ks.sizes then
    local names = kop:attr_or_default "arg_names"
    for i, name in ipairs(names) do
      local rel = ks.sizes[name]
      if rel == "grid_threads" then
        local v = grid * (ks.threads or 32)
        out[i] = { v = v, shown = ("%d (the grid's threads: kernel_spec.sizes)"):format(v) }
      elseif rel == "grid_ctas" then
        out[i] = { v = grid, shown = ("%d (the grid's CTAs: kernel_spec.sizes)"):format(grid) }
      end
    end
  end
  return out
end
M.fixed_params = fixed_params

-- The grid a check uses when none is given: the kernel's own where its
-- kernel_spec fixes it (grid = n, along x), else one cluster, or for a StreamK
-- kernel whose scheduler counts a constant number of workers (clusters) every
-- one of them (a StreamK fixup waits for the peers its plan counts on: fewer
-- CTAs would be a deadlock of the inputs; a worker count that is a parameter
-- gets the grid's clusters instead, args_for). More than M.MAX_GRID CTAs is
-- an error that asks for a grid (the check after every pass skips the kernel).
M.MAX_GRID = 8
-- A StreamK tile program is checked on the grid of programs it was planned
-- for; past this many, it is skipped (each program is walked by the workers).
M.MAX_PROGRAMS = 64
-- ... and on tensors of at most this many bytes each (twice its largest tile along each dim)
M.MAX_TENSOR_BYTES = 64 << 20
local STREAMK = { ["cutlass.tile_scheduler.create_streamk_params"] = true,
                  ["cutlass.tile_scheduler.create_sm100_streamk_params"] = true }
local function default_grid(kop)
  local ks = kop:kernel_spec() or {}
  if ks.grid then -- the kernel says it runs on that grid only
    if ks.grid[2] > 1 or ks.grid[3] > 1 then
      error(("the kernel's grid {%d, %d, %d} (kernel_spec.grid): only grids along x are modelled"):format(
        ks.grid[1], ks.grid[2], ks.grid[3]), 0)
    end
    if ks.grid[1] > M.MAX_GRID then
      error(("the kernel's grid of %d CTAs (kernel_spec.grid): more than the %d CTAs a check runs"):format(
        ks.grid[1], M.MAX_GRID), 0)
    end
    return ks.grid[1]
  end
  local cs, workers = cluster_size(kop), nil
  kop:walk(function(o)
    if STREAMK[o:name()] and o:noperands() >= 5 then
      local d = o:operand(5):def()
      local v = d and d:name() == "arith.constant" and d:attr "value"
      if math.type(v) == "integer" and v > (workers or 0) then workers = v end
    end
  end)
  if workers and workers * cs > M.MAX_GRID then
    error(("a StreamK kernel planned for %d workers (%d CTAs): more than the %d CTAs a check runs without `grid`")
      :format(workers, workers * cs, M.MAX_GRID), 0)
  end
  return workers and workers * cs or cs
end
M.default_grid = default_grid

-- inputs(kernel, o) -> args, description, n, failure, small. o.args wins; else the size n is
-- o.n; for a kernel without integer parameters the first of the sizes derived
-- from the kernel (o.sizes; only the buffers' sizes would change: no run
-- needed); else the first of them at which one round-robin emulation on
-- o.grid CTAs (protocol-only, as the checker's) runs clean and completes at
-- least two phases of every mbarrier that is not a cluster barrier (every
-- ring wraps twice; or it uses none). Sizes below it at which the emulation
-- fails are passed over (an input too small for the kernel can fail on its
-- own). Where no size qualifies, the smallest at which it failed (the checker
-- finds the violation there, with a short counterexample; no larger size is
-- tried once 4 failed: a kernel whose loops run n times would only cost
-- time; `failure` is then the emulation's {kind, message}: a schedule that
-- already fails), else the smallest of those with the most laps (a
-- data-parallel kernel's CTA does one tile at every size: its Q ring wraps
-- once). The search stops at a size the kernel's scheduler cannot plan (its
-- tile ids would wrap: an input too large, not a failure), and where the rings
-- wrap but no more at two sizes twice as large or more.
-- A kernel of several integer parameters, where the rings wrap twice, tries
-- each of them held at the smallest size (small: { [parameter index] = value
-- }, what the size n does not give; o.small gives them with o.n).
-- o.max_work (or o.work, a counter machine.lua's Run:clock charges) and
-- o.max_seconds (or o.deadline, a time of os.clock()) bound the runs: the
-- choice of inputs and the search share them.
local function with_budgets(o)
  local add = {}
  if o.max_seconds and not o.deadline then add.deadline = os.clock() + o.max_seconds end
  if o.max_work and not o.work then add.work = { left = o.max_work, limit = o.max_work } end
  if next(add) then return setmetatable(add, { __index = o }) end
  return o
end

function M.inputs(k, o)
  o = with_budgets(o or {})
  local kop = kernel_of(k)
  if o.args then return o.args, o.inputs or "the arguments given", o.n end
  local grid = o.grid or default_grid(kop)
  local sizes = o.n and { o.n } or o.sizes or derived_sizes(kop, grid)
  local fixed = fixed_params(kop, grid)
  -- the integer parameters the grid does not fix: with none, the size cannot
  -- change what the kernel does
  local ints = {}
  for i, a in ipairs(kop:region(1):entry():args()) do
    local kind = a:type():info().kind
    if (kind == "int" or kind == "index") and not fixed[i] then ints[#ints + 1] = i end
  end
  if #ints == 0 then sizes = { sizes[1] } end
  local function run(size, small)
    return pcall(em.run, o.decoded or kop, { grid = grid, args = args_for(kop, size, o, fixed, small), max_steps = o.max_steps,
                                             max_ops = o.max_ops, values = false, deadline = o.deadline, work = o.work })
  end
  local function wraps(ok, r) return ok and r.ok and (not r.min_phases or r.min_phases >= 2) end
  -- several integer parameters (a GEMM's M, N and K): where the rings wrap
  -- twice at a size four times the smallest or more, one of them held at the
  -- smallest size and the others at this one, if the rings still wrap twice
  -- so. The work grows with their product: the check (and the configurations
  -- after it, sized from this one) costs a fraction (a GEMM: one row of tiles,
  -- the k loop as long). A variant that fails is passed over (a parameter
  -- that small may be no input of the kernel).
  local pick, small, failed, failure, fails, laps = nil, o.small, nil, nil, 0, nil
  for _, size in ipairs(sizes) do
    if #sizes == 1 then
      pick = size
      break
    end
    local ok, r = run(size)
    if wraps(ok, r) then
      pick = size
      for _, i in ipairs(#ints >= 2 and size >= 4 * sizes[1] and ints or {}) do
        local held = { [i] = sizes[1] }
        if wraps(run(size, held)) then
          small = held
          break
        end
      end
      break
    end
    if ok and r.ok then -- (rings that wrap, but no more at two sizes twice as large or more, will not: stop)
      if not laps or r.min_phases > laps.phases then
        laps = { n = size, phases = r.min_phases, same = 0 }
      elseif laps.phases >= 1 and size >= 2 * laps.n then
        laps.same = laps.same + 1
        if laps.same == 2 then break end
      end
    end
    -- a size the kernel's scheduler cannot plan (its tile ids would wrap): the
    -- larger ones neither; an input too large, not a failure of the kernel
    if not ok and tostring(r):find("cannot be planned", 1, true) then break end
    if not (ok and r.ok) then
      if not failed then failed, failure = size, ok and r.error or { kind = "error", message = tostring(r) } end
      fails = fails + 1
      if fails == 4 then break end
    end
  end
  -- where no size wraps every ring twice (a data-parallel kernel's CTA does one
  -- tile at every size): the smallest with the most laps
  local n = pick or failed or (laps and laps.n) or sizes[#sizes]
  if not pick then small = o.small end
  local args, shown = args_for(kop, n, o, fixed, small)
  local d = #shown == 0 and "no parameters" or ("n = %d: (%s)"):format(n, table.concat(shown, ", "))
  return args, d, n, not pick and failed and failure or nil, small
end

-- {=== tile programs (docs/protocol.md, "Tile programs")

-- A tile program: a kernel with a !tileas.tensor parameter.
function M.is_tile_program(kop)
  for _, a in ipairs(kop:region(1):entry():args()) do
    if tensor_of(a:type():info()) then return true end
  end
  return false
end

-- The largest tile a tile program reads or writes along each dim of each
-- tensor: { [parameter index] = {extent per dim, false: a leading dim no tile
-- spans} } (what tile_problem sizes the tensors by, the same at every n).
local function tile_extents(kop)
  local extents = {} -- parameter index -> {max tile extent per dim}
  local index = {}
  for i, a in ipairs(kop:region(1):entry():args()) do index[a:id()] = i end
  kop:walk(function(o)
    local name = o:name()
    if name == "tileas.tiled_load" or name == "tileas.tiled_store" then
      local i = index[o:operand(1):id()]
      local t = name == "tileas.tiled_load" and o:result(1):type() or o:operand(o:noperands()):type()
      local e = extents[i] or {}
      local shape = t:info().shape
      -- a tile of lower rank than its tensor leaves out the leading dims (a batch)
      local lead = o:operand(1):type():info().params[2] - #shape
      for d = 1, lead do e[d] = e[d] or false end
      for d, x in ipairs(shape) do e[lead + d] = math.max(e[lead + d] or 1, x) end
      extents[i] = e
    end
  end)
  return extents
end

-- The problem of a tile program at size n, which every stage of tile-to-ptx is
-- checked on: 2 programs along x (two programs could store one tile), 2
-- workers once persistent, every integer parameter n, every tensor dim the
-- larger of n and twice the largest tile the kernel reads or writes along it
-- (extents: tile_extents(kop), where the caller sizes it more than once).
local function tile_problem(kop, n, extents)
  local names = kop:attr_or_default "arg_names"
  extents = extents or tile_extents(kop)
  local p = { n = n, programs = { 2, 1 }, workers = 2, tensors = {}, scalars = {} }
  -- StreamK / split-K: planned for its grid of programs (and its workers: the
  -- lowered kernel's grid, tileas.launch; at the tileas level, which walks
  -- whole programs, 2 workers as for every persistent program)
  local s = kop:attr "tileas.schedule"
  if s and s.programs then
    local x, y = s.programs[1], s.programs[2]
    if math.type(x) ~= "integer" or math.type(y) ~= "integer" or x < 1 or y < 1 or x * y > M.MAX_PROGRAMS then
      error(("a StreamK tile program planned for %s x %s programs: more than the %d programs a check runs")
        :format(tostring(x), tostring(y), M.MAX_PROGRAMS), 0)
    end
    p.programs = { x, y }
  end
  for i, a in ipairs(kop:region(1):entry():args()) do
    local nm = names[i] or ("arg" .. i)
    local elem, rank = tensor_of(a:type():info())
    if elem then
      local shape = {}
      local ebytes = elem_bytes(elem)
      local bytes = ebytes
      for d = 1, rank do
        local e = (extents[i] or {})[d]
        shape[d] = e == false and 2 or math.max(n, 2 * (e or 1)) -- a leading dim no tile spans: 2 (a batch of two)
        bytes = bytes * shape[d]
      end
      if bytes > M.MAX_TENSOR_BYTES then
        error(("tensor '%s' of the derived problem would take %d bytes (its tiles are that large): more than the %d a check allocates")
          :format(nm, bytes, M.MAX_TENSOR_BYTES), 0)
      end
      p.tensors[nm] = { shape = shape, ebytes = ebytes }
    else
      p.scalars[nm] = a:type():info().kind == "float" and 1.0 or n
    end
  end
  return p
end

local function tensor_arg(t)
  local n = t.ebytes
  for _, d in ipairs(t.shape) do n = n * d end
  return { bytes = n, shape = t.shape }
end

-- The arguments of a stage of tile-to-ptx for problem p: the tile program's
-- (by position), or, once convert-tileas-to-cutlass made its parameters what
-- `tileas.params` says, those the launcher would pass (tensor maps, pointers,
-- dims, strides, the grid of programs); -> args, grid, workers, description.
function M.tile_args(kop, p)
  local args = {}
  local filled = kop:attr "tileas.params"
  if not filled then
    for i, nm in ipairs(kop:attr_or_default "arg_names") do
      args[i] = p.tensors[nm] and tensor_arg(p.tensors[nm]) or p.scalars[nm]
    end
    return args, p.programs, p.workers
  end
  local launch = kop:attr_or_default "tileas.launch" -- (stamped with tileas.params)
  for i, e in ipairs(filled) do
    local what, nm, d = e:match "^(%w+):([^:]+):?(%d*)$"
    local t = p.tensors[nm]
    if e == "workspace" then -- a StreamK kernel's (the launch allocates it zeroed)
      args[i] = { bytes = math.max(4, launch.workspace_bytes) }
    elseif what == "map" or what == "ptr" then
      args[i] = what == "map" and tensor_arg(t) or { bytes = tensor_arg(t).bytes }
    elseif what == "dim" then
      args[i] = t.shape[tonumber(d) + 1]
    elseif what == "stride" then
      local s = 1
      for j = tonumber(d) + 2, #t.shape do s = s * t.shape[j] end
      args[i] = s
    elseif what == "arg" then
      args[i] = p.scalars[nm]
    elseif what == "programs" then
      args[i] = p.programs[({ x = 1, y = 2, z = 3 })[nm]] or 1
    end
  end
  local programs = p.programs[1] * p.programs[2]
  local grid = launch.workers -- StreamK: the workers it was planned for
    or (launch.persistent and math.min(p.workers, programs) or programs) * launch.cluster
  return args, grid
end

local function describe_problem(p)
  local t = {}
  for nm, x in pairs(p.tensors) do t[#t + 1] = ("%s %s"):format(nm, table.concat(x.shape, " x ")) end
  for nm, x in pairs(p.scalars) do t[#t + 1] = ("%s = %s"):format(nm, tostring(x)) end
  table.sort(t)
  local programs = table.concat(p.programs, " x ") -- x, y (and z where the check tries it)
  return ("programs %s (%d workers once persistent): %s"):format(programs, p.workers, table.concat(t, ", "))
end

-- The problem chosen at a tile program's input: the first size at which one
-- protocol-only emulation runs clean with every pipelined loop's ring wrapping
-- twice (2 laps of its stages: what its barriers will count once lowered).
-- Where no size does on 2 x 1 programs and the program reads its index (or
-- the count of programs) along y, 2, 4 and 8 programs along y too: a program
-- whose loop runs as far as its row block (a causal attention's: the block
-- counted from the last) gets longer loops from more of them.
local function choose_tile_problem(kop, o)
  local sizes = { 8, 64, 128, 256 }
  kop:walk(function(op)
    local pl = op:name() == "scf.for" and op:attr "tileas.pipeline"
    if pl then
      -- the stages as the stamp's row reads them: nil where they are not a
      -- count in its range (unverified IR: textual IR can say anything)
      local st = op:attr_or_default("tileas.pipeline").stages
      if not st then
        local file, line = op:loc()
        error(("the loop at %s:%s: tileas.pipeline's stages must be an integer from 1 to %d, got %s")
          :format(file or "?", line or "?", core.limits().max_ring_stages, tostring(pl.stages)), 0)
      end
      for _, t in ipairs { 16, 32, 64, 128 } do
        sizes[#sizes + 1] = 2 * st * t
        sizes[#sizes + 1] = 3 * st * t
      end
    end
  end)
  if o.n then return tile_problem(kop, o.n) end -- (its run could not choose another)
  table.sort(sizes)
  local ys = { 1 }
  local reads_y = false
  kop:walk(function(op)
    local nm = op:name()
    if nm == "tileas.get_program_id" or nm == "tileas.num_programs" then
      local d = op:attr "dim"
      reads_y = reads_y or d == "y" or d == 1
    end
  end)
  if reads_y and not (kop:attr "tileas.schedule" or {}).programs then
    for _, y in ipairs { 2, 4, 8 } do
      if 2 * y <= M.MAX_PROGRAMS then ys[#ys + 1] = y end
    end
  end
  local first
  local extents = tile_extents(kop)
  for _, y in ipairs(ys) do
    local last
    for _, n in ipairs(sizes) do
      if n == last then goto next_size end -- (a size twice: the same run twice)
      last = n
      local p = tile_problem(kop, n, extents)
      if y > 1 then p.programs = { p.programs[1], y } end
      first = first or p
      local args, grid, workers = M.tile_args(kop, p)
      local ok, r = pcall(em.run, o.decoded or kop, { grid = grid, workers = workers, args = args, values = false,
                                         max_steps = o.max_steps, max_ops = o.max_ops, deadline = o.deadline, work = o.work })
      if ok and r.ok and (not r.min_phases or r.min_phases >= 2) then return p end
      ::next_size::
    end
  end
  return first
end

-- }===

-- check(kernel, o) -> the checker's result (tl.verify_protocol's) plus
-- kernel (the op), inputs (the description), args, grid, name; a tile
-- program (or a stage of one given o.tile, the problem its input was checked
-- on) also tile: the problem. o.decoded: the kernel decoded (em.decode) by a
-- caller that checks it more than once.
function M.check(k, o)
  o = with_budgets(o or {})
  local kop = kernel_of(k)
  -- decoded once: the runs that choose the inputs and the search's (and the
  -- caller's other checks of kop: o.decoded, em.decode(kop), where it gives one)
  o = setmetatable({ decoded = o.decoded or em.decode(kop) }, { __index = o })
  if not o.args and (M.is_tile_program(kop) or (o.tile and kop:attr "tileas.params")) then
    local p = o.tile or choose_tile_problem(kop, o)
    local args, grid, workers = M.tile_args(kop, p)
    local r = em.check(o.decoded, { grid = grid, workers = workers, args = args, max_states = o.max_states or 20000,
                              max_seconds = o.max_seconds, trace_limit = o.trace, max_steps = o.max_steps,
                              max_ops = o.max_ops, shortest = o.shortest, deadline = o.deadline, work = o.work })
    -- grid: the CTAs (a number, as the messages show it); launch: what a replay passes
    local ctas = grid
    if type(grid) == "table" then
      local persistent = false
      kop:walk(function(op) persistent = persistent or op:name() == "tileas.cancel_next_program_id" end)
      ctas = grid[1] * grid[2] * (grid[3] or 1)
      if persistent then ctas = math.min(workers, ctas) end
    end
    r.kernel, r.args, r.grid, r.inputs, r.n, r.tile = kop, args, ctas, describe_problem(p), p.n, p
    r.launch = { grid = grid, workers = workers }
    r.name = kop:attr_or_default "sym_name"
    return r
  end
  local grid = o.grid or default_grid(kop)
  o = setmetatable({ grid = grid }, { __index = o })
  local args, desc, n, _, small = M.inputs(kop, o)
  local r = em.check(o.decoded, { grid = grid, args = args, max_states = o.max_states or 20000, max_seconds = o.max_seconds,
                            trace_limit = o.trace, max_steps = o.max_steps, max_ops = o.max_ops, shortest = o.shortest,
                            deadline = o.deadline, work = o.work })
  r.kernel, r.args, r.grid, r.inputs, r.n, r.small = kop, args, grid, desc, n, small
  r.name = kop:attr_or_default "sym_name"
  return r
end

-- {=== diagnostics at the ops

-- "file:line" -> the first op there.
local function ops_by_loc(kop)
  local map = {}
  kop:walk(function(o)
    local file, line = o:loc()
    if file then
      local key = file .. ":" .. tostring(line)
      if not map[key] then map[key] = o end
    end
  end)
  return map
end

-- The op a violation is at: the op a deadlocked warp waits at, else the op of
-- the counterexample's last step, else the kernel.
local function violation_op(r, map)
  local msg = r.violation and r.violation.message or ""
  for loc in msg:gmatch "at (%S+:%d+) %([%w_.]+%)" do
    if map[loc] then return map[loc] end
  end
  for i = #(r.trace or {}), 1, -1 do
    local last
    for loc in r.trace[i]:gmatch " at (%S+:%d+)" do last = loc end
    if last and map[last] then return map[last] end
  end
  return r.kernel
end

-- The pass's result for a checker's result: nil or an error at the op.
function M.diagnostic(r)
  if r.ok then return nil end
  local map = ops_by_loc(r.kernel)
  local text = r.report:gsub("^verify%-protocol: ", "")
  if r.budget_exceeded then
    return { op = r.kernel, message = ("the check of kernel '%s' (inputs %s, grid %d) is incomplete: %s")
             :format(r.name, r.inputs, r.grid, text) }
  end
  return { op = violation_op(r, map),
           message = ("protocol violation in kernel '%s' (inputs %s, grid %d; %d states, %d runs): %s")
             :format(r.name, r.inputs, r.grid, r.states, r.runs, text) }
end

-- }===

-- {=== replay

-- Follow the counterexample's trace: at each choice, the actor its next line names.
local function follow(trace)
  return function(run, rs)
    local line = trace[run.steps + 1]
    if line then
      for i, a in ipairs(rs) do
        if line:sub(1, #a.label + 2) == a.label .. ": " then return i end
      end
    end
    return 1
  end
end

local function hex(bytes)
  local t = {}
  for i = 1, #bytes do t[i] = ("%02x"):format(bytes[i]) end
  return table.concat(t, " ")
end

-- The shared allocations (with their stage count: the first dimension of a
-- memref of rank 2 or more), in the emulator's order.
local function shared_buffers(kop)
  local out = {}
  kop:walk(function(o)
    local n = o:name()
    if n == "tile.alloc_shared" or n == "tile.dynamic_shared" then
      local info = o:result(1):type():info()
      local file, line = o:loc()
      out[#out + 1] = { memref = info.kind == "memref", stages = info.kind == "memref" and #info.shape >= 2 and info.shape[1] or 1,
                        loc = file and (file .. ":" .. tostring(line)) or "?" }
    end
  end)
  return out
end

-- A stage's bytes as two strings: the values (0 where unwritten) and a mask
-- ("x" written, "." not), for `p` (print_item); prev: the same stage's strings
-- in the frame before, shared when nothing changed (frames stay small).
local function stage_bytes(shared, base, n, prev)
  local vals, mask = {}, {}
  local written = 0
  for j = 0, n - 1 do
    local v = shared[base + j]
    if v ~= nil then written = written + 1 end
    vals[j + 1], mask[j + 1] = v or 0, v ~= nil and "x" or "."
  end
  local parts = {}
  for j = 1, n, 4096 do parts[#parts + 1] = string.char(table.unpack(vals, j, math.min(n, j + 4095))) end
  local data, m = table.concat(parts), table.concat(mask)
  if prev and prev.data == data and prev.mask == m then return prev.data, prev.mask, written end
  return data, m, written
end

-- One frame: the state of the run, as lines (roles, barriers, buffers, copies)
-- and as records for `p` (bars, bufs); prev: the frame before.
local function snapshot(run, bufs, prev)
  local f = { roles = {}, barriers = {}, buffers = {}, copies = {}, bars = {}, bufs = {} }
  for _, W in ipairs(run.warps) do
    local pos
    if W.done then pos = "finished"
    elseif W.req then
      local d = W.req.describe and select(2, pcall(W.req.describe))
      pos = ("at %s (%s)%s"):format(W.req.rec.loc, W.req.rec.name, type(d) == "string" and (" " .. d) or "")
    else pos = "not started" end
    f.roles[#f.roles + 1] = ("%s: %s"):format(W.label, pos)
  end
  for _, cta in ipairs(run.ctas) do
    local ctag = #run.ctas > 1 and (" (CTA %d)"):format(cta.id) or ""
    for _, b in ipairs(cta.bar_list) do
      local line = ("%s%s: phase %d (parity %d), %d of %d arrivals pending, tx %d")
        :format(b.name, ctag, b.completed, b.completed & 1, b.pending, b.count, b.tx)
      -- who waits on it, and the copies that complete on it
      local waiters, copies = {}, {}
      for i, W in ipairs(run.warps) do
        if W.cta == cta and not W.done and W.req and f.roles[i]:find("on " .. b.name .. " ", 1, true) then
          waiters[#waiters + 1] = f.roles[i]
        end
      end
      for _, c in ipairs(run.copies) do
        if c.W.cta == cta and cta.bars[c.bar] == b then
          copies[#copies + 1] = ("%s: %d bytes (%s at %s)"):format(c.label, c.bytes, c.rec.name, c.rec.loc)
        end
      end
      f.barriers[#f.barriers + 1] = line
      f.bars[#f.bars + 1] = { name = b.name .. ctag, line = line, waiters = waiters, copies = copies }
    end
    for i, a in ipairs(run.k.allocs) do
      local info = bufs[i]
      if info and info.memref and a.size > 0 then
        local per = a.size // info.stages
        for s = 0, info.stages - 1 do
          local name = info.loc .. (info.stages > 1 and ("[%d]"):format(s) or "") .. ctag
          local p = prev and prev.bufs[#f.bufs + 1]
          local data, mask, written = stage_bytes(cta.shared, em.SHARED_BASE + a.offset + s * per, per,
                                                  p and p.name == name and p or nil)
          f.buffers[#f.buffers + 1] = ("%s: %d of %d bytes written, %s ..."):format(name, written, per,
            hex { data:byte(1, math.min(8, per)) })
          f.bufs[#f.bufs + 1] = { name = name, data = data, mask = mask }
        end
      end
    end
  end
  for _, c in ipairs(run.copies) do
    f.copies[#f.copies + 1] = ("%s: %d bytes in flight (%s at %s)"):format(c.label, c.bytes, c.rec.name, c.rec.loc)
  end
  return f
end

-- replay(kernel, r) -> frames: the counterexample of the checker's
-- result r run again on the emulator; frame i = { step = i, line = the
-- step, roles, barriers, buffers, copies, bars, bufs } (the state after step i; frame 0
-- is the start), plus frames.n (the steps) and frames.outcome (the
-- emulator's report of the end).
function M.replay(k, r)
  local kop = r.kernel or kernel_of(k)
  local bufs = shared_buffers(kop)
  local trace = r.trace or {}
  local frames = {}
  local res = em.run(kop, { grid = r.launch and r.launch.grid or r.grid, workers = r.launch and r.launch.workers,
                            args = r.args, policy = follow(trace),
                            on_step = function(run) frames[#frames + 1] = snapshot(run, bufs, frames[#frames]) end })
  frames[#frames + 1] = snapshot(res.run, bufs, frames[#frames])
  -- frames[j] is the state before step j: number them by the step after which they hold
  local out = {}
  for j, f in ipairs(frames) do
    f.step = j - 1
    f.line = res.trace[j - 1]
    out[j - 1] = f
  end
  out.n = #frames - 1
  out.outcome = res.ok and "the run ends without a violation" or ("%s: %s"):format(res.error.kind,
    res.error.message:match "^[^\n]*")
  return out
end

-- The frame as text: roles, barriers (m1, m2, ...), stage buffers (s1, ...)
-- and copies in flight; a line that differs from the frame before (prev) is
-- marked `*` (what the step changed).
function M.format_frame(f, prev)
  local lines = { f.step == 0 and "start" or ("step %d: %s"):format(f.step, f.line or "?") }
  local function section(title, xs, pxs, tag)
    if #xs == 0 then return end
    if title then lines[#lines + 1] = "  " .. title .. ":" end
    for i, x in ipairs(xs) do
      local changed = prev and (pxs[i] ~= x)
      lines[#lines + 1] = (title and (changed and "  * " or "    ") or (changed and "* " or "  "))
        .. (tag and ("[%s%d] "):format(tag, i) or "") .. x
    end
  end
  section("roles", f.roles, prev and prev.roles)
  section("barriers", f.barriers, prev and prev.barriers, "m")
  section("stage buffers", f.buffers, prev and prev.buffers, "s")
  section(nil, f.copies, prev and prev.copies)
  return table.concat(lines, "\n")
end

-- The items `p` prints in frame f: every barrier (m1, ...) and stage buffer (s1, ...).
function M.items(f)
  local out = {}
  for i, b in ipairs(f.bars) do out[#out + 1] = ("m%d  %s"):format(i, b.name) end
  for i, b in ipairs(f.bufs) do out[#out + 1] = ("s%d  %s"):format(i, b.name) end
  return out
end

-- A stage's bytes, 16 a line with their offset (`..`: not written yet); a run
-- of identical lines is shown once.
local function dump(b)
  local lines, last, rep = {}, nil, 0
  local function flush()
    if rep > 0 then lines[#lines + 1] = ("      ... %d more line(s) the same"):format(rep) end
    rep = 0
  end
  for off = 0, #b.data - 1, 16 do
    local t = {}
    for j = off + 1, math.min(#b.data, off + 16) do
      t[#t + 1] = b.mask:sub(j, j) == "x" and ("%02x"):format(b.data:byte(j)) or ".."
    end
    local body = table.concat(t, " ")
    if body == last then rep = rep + 1
    else
      flush()
      lines[#lines + 1] = ("  %04x: %s"):format(off, body)
      last = body
    end
  end
  flush()
  return lines
end

-- print_item(f, what) -> text: the barriers and stage buffers of frame f that
-- `what` names (m1, s2, ... or a part of the name): a barrier's state, the
-- roles that wait on it and the copies that complete on it; every byte of a buffer.
function M.print_item(f, what)
  local picked = {}
  local kind, idx = what:match "^([ms])(%d+)$"
  idx = tonumber(idx)
  if kind == "m" and f.bars[idx] then picked[1] = { "m", idx }
  elseif kind == "s" and f.bufs[idx] then picked[1] = { "s", idx }
  else
    for i, b in ipairs(f.bars) do if b.name:find(what, 1, true) then picked[#picked + 1] = { "m", i } end end
    for i, b in ipairs(f.bufs) do if b.name:find(what, 1, true) then picked[#picked + 1] = { "s", i } end end
  end
  if #picked == 0 then
    return ("nothing named '%s': %s"):format(what, #f.bars + #f.bufs == 0 and "the kernel has no barrier or stage buffer"
      or ("one of\n  " .. table.concat(M.items(f), "\n  ")))
  end
  local lines = {}
  for _, p in ipairs(picked) do
    if p[1] == "m" then
      local b = f.bars[p[2]]
      lines[#lines + 1] = ("[m%d] %s"):format(p[2], b.line)
      for _, w in ipairs(b.waiters) do lines[#lines + 1] = "  waiting: " .. w end
      for _, c in ipairs(b.copies) do lines[#lines + 1] = "  completing on it: " .. c end
      if #b.waiters + #b.copies == 0 then lines[#lines + 1] = "  nothing waits on it or completes on it" end
    else
      local b = f.bufs[p[2]]
      local written = select(2, b.mask:gsub("x", ""))
      lines[#lines + 1] = ("[s%d] %s: %d of %d bytes written"):format(p[2], b.name, written, #b.data)
      for _, l in ipairs(dump(b)) do lines[#lines + 1] = l end
    end
  end
  return table.concat(lines, "\n")
end

-- }===

return M
