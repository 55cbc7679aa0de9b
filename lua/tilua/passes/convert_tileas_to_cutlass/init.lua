-- tilua.passes.convert_tileas_to_cutlass: the `convert-tileas-to-cutlass` pass (a
-- LUA_PASS of src/passes/passes.def, run by tilua.passes): a warp-specialized tile
-- program (docs/tileprog.md; after tileas-materialize-agents and the cluster
-- passes) becomes a kernel of the orchestration level, the tile and cutlass
-- dialects, built with the same pieces as the hand-written GEMM of
-- stdlib/gemm.lua (kernels/gemm.lua, docs/gemm.md), so that the tile GEMM is that GEMM:
--
--   rings (alloc_tensor with tileas.stages)  k:shared {stages, rows, cols}, 1024-aligned,
--                                            swizzled as their layout says
--   the rings' cutlass.pipeline             one producer participant (an elected thread
--                                            of the producer's first warp), the consumers'
--                                            warps; transaction bytes: a stage of every ring
--   producer agent                          setmaxnreg.dec (plan.REGS); one elected thread walks
--                                            the tiles: per k block producer_acquire, a TMA
--                                            load per ring (into the stage, completing on
--                                            its full barrier), producer_commit
--   consumer agents (a warpgroup each)       setmaxnreg.inc; per k block consumer_wait,
--                                            wgmma from descriptors of the stage into a
--                                            vector<N/2 x f32> accumulator, commit, wait
--                                            for one group, release the previous stage;
--                                            the first k block peeled (scale-d false when
--                                            the accumulator starts at zero)
--   a consumer loop's staged loads          the producer TMA-loads them into each stage
--     (staged.lua: block scales)             beside the tiles (in its transaction bytes);
--                                            the consumers read them from the stage
--   the epilogue                            per thread: its elements of the accumulator
--                                            (the wgmma fragment), elementwise ops on them,
--                                            slices (a bias row) loaded per column it holds;
--                                            16-bit tiles stored with stmatrix + TMA store,
--                                            others with plain stores
--   scf.while over is_valid_program_id       the static persistent tile scheduler's loop
--     (tileas-dynamic-persistent)            (kernels/gemm.lua's M.tile_loop): program ids
--                                            are the work tile's m and n; with the
--                                            StreamK schedule (plan_schedule) the
--                                            StreamK scheduler's, the k loop split; with
--                                            schedule = "dynamic" ids claimed at run time
--                                            (atomic counter, ring of ids: loops.lua);
--                                            "data_parallel" the same loop on a CTA a
--                                            program (the launch's grid: gpu/recipe.lua)
--   a cluster of n CTAs (along x)            tileas-plan-cta's plan: rings hold the CTA's
--                                            block (of every piece, with cta_repeat: a
--                                            TMA load each), a ring replicated on all n
--                                            is loaded 1/n per CTA and TMA-multicast; a pipeline of
--                                            mode cluster (the cluster's DSMEM handshake at
--                                            its init); the clusters are the workers
--   !tileas.tensor parameters               a tensor map (TMA; the box the lowering
--                                            chose) and/or a pointer with its dims and
--                                            row strides; hidden parameters give the
--                                            grid of programs (num_programs)
--
-- The lowered kernel records how to launch it in its attribute `tileas.params`
-- (one entry per parameter, plan.lua's plan_params) and `tileas.launch`
-- (transpose = {X, Y}: the tensors of a transpose by TMA, transpose.lua).
--
-- A kernel is lowered in three phases over its plan record L (plan.lua):
--   plan.read   the tile program read: agents by role, parameters, schedule, rings
--   build       the lowered kernel: the rings' shared memory and pipeline, the
--               ops before the agents, then each role's agents (producer.lua,
--               consumer.lua), the ops inside them through ops.lua's OPS and the
--               shared loops of loops.lua; values as values.lua says
--   finish      the program replaced, its launch recorded
--
-- A new program shape (attention, a memory-bound kernel, a grouped GEMM ...)
-- adds what it needs at the phase that needs it: a role of agent (plan.ROLES
-- to read it, BUILD below to build it), an op (ops.OPS), a value of another
-- layout (values.lua), a loop of its own (loops.lua); what a role does with an
-- op that depends on the role is a field of its env (env.dot, env.copy ...).

local core = require "tilua.core"
local R = require "tilua.passes.convert_tileas_to_cutlass.read"
local V = require "tilua.passes.convert_tileas_to_cutlass.values"
local X = require "tilua.passes.convert_tileas_to_cutlass.ops"
local plan = require "tilua.passes.convert_tileas_to_cutlass.plan"
local Loops = require "tilua.passes.convert_tileas_to_cutlass.loops"
local Producer = require "tilua.passes.convert_tileas_to_cutlass.producer"
local Consumer = require "tilua.passes.convert_tileas_to_cutlass.consumer"
local Compute = require "tilua.passes.convert_tileas_to_cutlass.compute"
local Staged = require "tilua.passes.convert_tileas_to_cutlass.staged"
local Sums = require "tilua.passes.convert_tileas_to_cutlass.sums"
local Chain = require "tilua.passes.convert_tileas_to_cutlass.chain"
local B = require "tilua.passes.convert_tileas_to_cutlass.blocked"

local M = {}

-- What each role of agent becomes, in the order the lowered kernel holds them.
local BUILD = {
  function(L) if L.producer then Producer.build(L, L.producer) end end,
  Consumer.build,
  function(L) if L.compute then Compute.build(L) end end,
}

-- {=== build: the lowered kernel

-- The rings' shared stages (1024-aligned, swizzled as their layout says) and
-- their pipelines (one per group of rings: a GEMM's one): a producer
-- participant (an elected thread of the producer's first warp), the consumers'
-- warps; transaction bytes: a stage of every ring of the group. A cluster's pipeline (mode cluster, as stdlib/gemm.lua's
-- cluster = 2): a multicast producer writes the stages of every CTA, so each
-- stage is released to the whole cluster, one participant per consumer
-- warpgroup; its init ends with the DSMEM handshake of convert-cutlass-to-nvvm.
-- Ping-pong consumers on a cluster (mode pingpong_cluster, as stdlib/gemm.lua's
-- consumers = "pingpong" with a cluster): the same, each stage released to the
-- whole cluster by the warps of the one warpgroup whose program it holds.
-- ksplit consumers: as ping-pong's, each stage released by the warpgroup that
-- took it.
local CLAIM_STAGES = 2 -- ids claimed ahead of the consumers: the next tile's while they compute one

local function shared_and_pipeline(L)
  local tl, k = L.tl, L.k
  Sums.plan(L) -- (row sums by a dot: its ring a box of ones more a stage, sums.lua)
  for _, r in ipairs(L.rings) do
    local boxes = r.nbox + (r.ones and 1 or 0)
    r.smem = k:shared(r.elem, { r.stages, boxes * r.shape[1], r.box[2] }, { align = 1024, swizzle = r.swizzle > 0 and r.swizzle or nil })
  end
  local consumers = L.consumers
  local first_consumer = consumers[1].first
  for i, c in ipairs(consumers) do
    if c.first ~= first_consumer + 4 * (i - 1) then R.fail(c.op, "the consumer agents must take consecutive warpgroups") end
  end
  local parts = { { first_consumer, 4 * #consumers } }
  local own = L.pingpong or L.ksplit -- (each stage released by the warpgroup that took it: plan.lua's read_pair)
  if L.nctas > 1 or own then
    parts = {}
    for i = 1, #consumers do parts[i] = { first_consumer + 4 * (i - 1), 4 } end
  end
  Staged.shared(L) -- (the staged loads' slots: their bytes are the stage's too)
  -- a pipeline for each group of rings (plan.lua's read_groups: one for a GEMM)
  for _, g in ipairs(L.groups) do
    g.pipe = k:pipeline { stages = g.stages, producers = { { L.producer.first, 1 } }, consumers = parts,
                          transaction_bytes = g.bytes,
                          mode = L.nctas > 1 and (own and "pingpong_cluster" or "cluster") or own and "pingpong" or "cooperative" }
  end
  -- ping-pong's turns (plan.lua's read_pair): pp[g] slot 0 is consumer g's
  -- mainloop turn, slot 1 its epilogue turn; each hands both to the other
  -- (stdlib/gemm.lua's go: CUTLASS's OrderedSequenceBarrier of two stages)
  if L.pingpong then L.pp = { k:seq_bar { depth = 2, arrive_count = 128 }, k:seq_bar { depth = 2, arrive_count = 128 } } end
  -- ksplit's hand-over of consumer 1's sums (kernels/gemm.lua's ksplit pieces)
  if L.ksplit then L.ks = L.G.ksplit_shared(tl, k, consumers[1].pair_cols // 2) end
  L.pipe = #L.groups == 1 and L.groups[1].pipe or nil
  -- the dynamic scheduler's ring of claimed ids (loops.lua): an i32 a stage
  if L.dynamic then
    L.claims = { slots = k:shared(tl.i32, CLAIM_STAGES, { align = 16 }),
                 pipe = k:pipeline { stages = CLAIM_STAGES, producers = { { L.producer.first, 1 } }, consumers = parts,
                                     mode = "cooperative" } } -- (one CTA: plan.lua refuses a cluster)
  end
  -- the consumers' turns at the dots (tileas.turns): a seq_bar a warpgroup,
  -- made here, before the agents, as kernels/attention.lua's
  local turns = false
  R.each_op(consumers[1].op, function(op) turns = turns or (op:name() == "scf.for" and op:attr "tileas.turns" == true) end)
  if turns and #consumers > 1 then
    L.go = {}
    for w = 1, #consumers do L.go[w] = k:seq_bar { depth = 1, arrive_count = 128 } end
  end
  L.rank = L.nctas > 1 and tl.cluster_rank() or nil
end

-- The body of the lowered kernel k.
local function build(L, k)
  L.k, L.args = k, k.body:args()
  L.vmap, L.next_warp, L.persistent = {}, 0, false
  if not L.compute then shared_and_pipeline(L) end
  for _, e in ipairs(L.P.list) do
    if not e.tensor then L.vmap[e.arg:id()] = L.args[e.lowered] end
  end
  for _, op in ipairs(L.pre) do
    if op:name() ~= "tileas.alloc_tensor" then V.at_loc(op, X.lower_op, L, op, { program_id = Loops.program_id(L) }) end
  end
  for _, r in ipairs(L.rings) do L.vmap[r.value:id()] = r end
  for _, role in ipairs(BUILD) do role(L) end
  if L.nctas > 1 then L.tl.cluster_sync() end -- no CTA leaves while a peer may still write to it
end

-- A new kernel in the program's module, before it.
local function new_kernel(L)
  local tl, kop = L.tl, L.kop
  local saved = tl.module()
  tl.set_module(kop:parent())
  local ok, k = pcall(tl.kernel, L.name .. "__tileas_lowering", { params = L.P.params, block = 32 * L.warps,
                                                                   cluster = L.nctas > 1 and L.cluster or nil,
                                                                   min_ctas = L.min_ctas or kop:kernel_spec().min_ctas })
  tl.set_module(saved)
  if not ok then error(k, 0) end
  k.op:move_before(kop)
  return k
end

-- }===

-- The lowered kernel replaces the program; how to launch it.
local function finish(L, k)
  local S = L.S
  local tr = L.transpose and { L.P.by_arg[L.transpose.load:operand(1):id()].name, L.P.by_arg[L.transpose.store:operand(1):id()].name }
  L.kop:erase()
  k.op:set_attr("sym_name", L.name)
  k.op:set_attr("tileas.params", L.P.launch)
  k.op:set_attr("tileas.launch", { persistent = L.persistent, cluster = L.nctas > 1 and L.nctas or nil,
                                   linear = L.linear or nil, per_sm = L.per_sm, programs_z = L.P.programs_z or nil,
                                   schedule = S and S.kind or L.dynamic and "dynamic" or L.data_parallel and "data_parallel"
                                     or L.split and "split_tail" or nil, programs = S and S.programs or nil,
                                   workers = S and S.c.grid or nil,
                                   max_ctas = L.split_workers, -- (the split tail's CTAs at most: recipe.lua's persistent grid)
                                   workspace_bytes = (S or L.dynamic or L.row_claims) and (S or L.dynamic or L.row_claims).workspace_bytes or nil,
                                   transpose = tr })
end

local function lower_kernel(tl, G, kop)
  local L = plan.read(tl, G, kop, V.Ring)
  if L.compute then Compute.plan(L) end
  local k = new_kernel(L)
  k:define(function() build(L, k) end, { verify = false }) -- (the pipeline verifies the module after the pass)
  finish(L, k)
end

-- convert-tileas-to-cutlass over every kernel of the module that is a tile
-- program (has agents or tensor parameters). The option row_ring (0: none,
-- 1: the shared ring, 2: the next row in registers, 3: a ring of 3 rows that
-- each thread fills by cp.async, 4: the next row in registers, the rows
-- claimed at run time, 5: the next two rows in registers, claimed, 6: as 4,
-- each claim published an iteration later, 7: the shared ring of 3 with bulk
-- stores, 8: as 7, the rows claimed, 9: the shared ring, the rows claimed) overrides
-- tl.options.row_ring's choice of form (rowring.lua); transpose_claims (0 or
-- 1) tl.options.tile_transpose's claims, transpose_form (1: TMA, 2: pairs, 3:
-- through the registers; 0: the rule) its form (transpose.lua); merge_lines=0 keeps
-- a staged line's box a consumer (staged.lua: the default, 1, brings the
-- consumers' lines at consecutive row blocks in one box); linear_desc=1 builds
-- a consumer's wgmma descriptors as one base plus the stage's and k step's
-- offsets (consumer.lua; values.lua's V.desc linear), not from each address;
-- mask_branch=1 / 0 a select of a blocked tile by iota < s as one branch a
-- thread everywhere / nowhere (blocked.lua's select_below; without it
-- tl.options.mask_branch, and where that is nil the rule: in a shared row
-- ring's body). refill=0 / 1: a shared row ring refills a stage behind a
-- barrier of its own after its reads / at the body's first reduce's barrier
-- (without it tl.options.row_ring.refill, then rowring.lua's rule).
-- lag=0 promotes a loop's k blocks in DeepGEMM's order (consumer.lua's
-- unlagged_loop: each block waited for whole, then promoted) instead of a
-- block late; staged_base=1 addresses a staged line (block scales' A line)
-- as the thread's address at stage 0 plus the stage's offset (staged.lua's
-- Staged.stage_last), not the stage's slot plus the row; release_index=1
-- moves a lagged loop's release cursor to the wait's cursor of the block
-- issued last instead of incrementing it on its own (consumer.lua's
-- lagged_loop, release_oldest).
-- line_loads=1 (or tl.options.line_loads = "based") reads a consumer's row or
-- column of a rank-1 tensor (a GEMM's bias) from the thread's address and
-- count left, computed once (values.lua's V.based_loader).
function M.convert(module, options)
  local tl = require "tilua"
  local G = require "tilua.kernels.gemm"
  local Ring = require "tilua.passes.convert_tileas_to_cutlass.rowring"
  Ring.forced = options and options.row_ring
  Ring.forced_refill = options and options.refill
  local Tr = require "tilua.passes.convert_tileas_to_cutlass.transpose"
  Tr.forced_claims, Tr.forced_form = options and options.transpose_claims, options and options.transpose_form
  Staged.merge_lines = not (options and options.merge_lines == 0)
  Staged.stage_last = options and options.staged_base == 1 or nil
  local linear = options and options.linear_desc
  require("tilua.passes.convert_tileas_to_cutlass.consumer").linear_desc = linear == 1 or (linear ~= 0 and nil)
  require("tilua.passes.convert_tileas_to_cutlass.consumer").release_index = options and options.release_index == 1 or nil
  require("tilua.passes.convert_tileas_to_cutlass.consumer").lag = options and options.lag
    or (tl.options.promote_lag == false and 0 or nil)
  Sums.enabled = not (options and options.sums_by_dot == 0) and tl.options.sums_by_dot ~= false
  Chain.wait_fence = (options and options.wait_fence == 1) or tl.options.wait_fence == true
  -- (the pass option 0 / 1 over tl.options' false / true over nil: mask_branch by blocked.lua's rule,
  -- softmax_rows off, max_chain by chain.lua's rule, Chain.chain_rule)
  local function tri(v, t) if v == 1 then return true elseif v == 0 then return false end return t end
  B.mask_branch = tri(options and options.mask_branch, tl.options.mask_branch)
  Chain.softmax_rows = tri(options and options.softmax_rows, tl.options.softmax_rows)
  X.max_chain = tri(options and options.max_chain, tl.options.max_chain)
  require("tilua.passes.convert_tileas_to_cutlass.epilogue").based_lines = (options and options.line_loads == 1)
    or tl.options.line_loads == "based"
  local errors, changed = {}, false
  for _, kop in ipairs(module:region(1):entry():ops()) do
    if kop:name() == "tile.kernel" then
      local tile_program = false
      for _, a in ipairs(kop:region(1):entry():args()) do tile_program = tile_program or R.is_tensor_type(a:type()) end
      kop:walk(function(op) if op:name():match "^tileas%." then tile_program = true return false end end)
      if tile_program then
        -- the builders make IR in the default context: the module's, while lowering
        local saved = core.default_context()
        core.default_context(kop:context())
        local ok, err = xpcall(lower_kernel, function(e)
          return getmetatable(e) == R.Failure and e or debug.traceback(tostring(e), 2)
        end, tl, G, kop)
        core.default_context(saved)
        if not ok then
          if getmetatable(err) == R.Failure then errors[#errors + 1] = { op = err.op, message = err.message }
          else errors[#errors + 1] = { op = kop, message = "convert-tileas-to-cutlass: " .. tostring(err) } end
          break
        end
        changed = true
      end
    end
  end
  Ring.forced = nil
  return { errors = errors, changed = changed }
end

return M
