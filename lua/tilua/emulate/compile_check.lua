-- tilua.emulate.compile_check: the protocol check every compile runs
-- (k:compile, `tilua script.lua`, the C API's ptx pipelines), on the kernel as
-- its author wrote it, within a time budget (docs/protocol.md, "The check every
-- compile runs"). A violation refuses the compile with its counterexample; a
-- kernel the check could not finish (its budget, an op the emulator does not
-- model, inputs it cannot choose) gets a one-line note, never silence.
--
--   local cc = require "tilua.emulate.compile_check"
--   cc.run(module, { work = 2e6, seconds = nil, note = function(line) ... end })

local M = {}

-- Emulator work a kernel, by default (tl.options.check_protocol_work; units of
-- machine.lua's Run:clock): 0.15-0.2 s of one core of the dev machine
-- (measured on the dynamic GEMMs, 2026-11-30).
M.WORK = 3000000

local function default_note(line) io.stderr:write(line, "\n") end

-- "file:line: " of an op, or "".
local function where(op)
  if not op then return "" end
  local file, line = op:loc()
  if not file or not line then return "" end
  return ("%s:%s: "):format(file, tostring(line))
end

-- The first line of an error or a message.
local function first_line(s) return (tostring(s):match "^[^\n]*") end

-- The configurations a kernel is checked on, in order (docs/protocol.md,
-- "The check every compile runs"): the inputs the checker derives (one
-- cluster, every ring wrapping twice), then two clusters (their derived
-- inputs), then three clusters on a ragged size (ragged below: a last chunk
-- or tile that is partial, no multiple of 16 bytes or of the grid: a partial
-- last wave). A kernel whose kernel_spec fixes its
-- grid (grid = n: it runs on no other) gets the derived inputs on that grid
-- and a ragged size on it. A kernel whose grid the checker fixes (a StreamK
-- plan's workers) and a tile program (its problem has two programs along x
-- and every tensor dim ragged) get the first only.
-- -> list of { what, o = P.check's options given the result r before }.

-- The ragged size after n on a grid of g CTAs: n + n / 3 + 7 (a size in
-- elements or bytes: no multiple of the tile, of 16 bytes nor of the grid).
-- Below 16, n counts things (batches, heads, a sequence shorter than its
-- tile: the work grows with its square), and 7 more would multiply the work
-- without making it more ragged: the first odd m past n + n / 3 that is no
-- multiple of the grid (a partial last wave) instead.
local function ragged(n, g)
  if not n then return nil end
  if n >= 16 then return n + n // 3 + 7 end
  if type(g) == "table" then g = (g[1] or 1) * (g[2] or 1) * (g[3] or 1) end
  local m = n + n // 3 + 1
  while m % 2 == 0 or (g > 1 and m % g == 0) do m = m + 1 end
  return m
end
M.ragged = ragged

local function configurations(P, kop)
  local ks = kop:kernel_spec() or {}
  local out = { { what = ks.grid and "the derived inputs on its grid" or "the derived inputs on one cluster",
                  o = function() return {} end } }
  if P.is_tile_program(kop) then
    -- programs along y and z too, each dimension the program reads its index
    -- along (the derived problem has two along x only): two programs that
    -- differ only there could store one tile
    local uses = {}
    kop:walk(function(op)
      if op:name() == "tileas.get_program_id" then
        local d = op:attr "dim"
        uses[(d == "y" or d == 1) and 2 or (d == "z" or d == 2) and 3 or 1] = true
      end
    end)
    if (uses[2] or uses[3]) and not (kop:attr "tileas.schedule" or {}).programs then
      local shape = uses[3] and (uses[2] and "x, y and z (2 x 2 x 2)" or "x and z (2 x 1 x 2)") or "x and y (2 x 2)"
      out[#out + 1] = { what = "programs along " .. shape, o = function(r)
        -- (the derived problem may have more along y already, for its rings
        -- to wrap twice: then it is this configuration, along x and y)
        if not uses[3] and (r.tile.programs[2] or 1) >= 2 then return nil end
        local t = {}
        for key, v in pairs(r.tile) do t[key] = v end
        t.programs = { r.tile.programs[1], uses[2] and math.max(2, r.tile.programs[2] or 1) or 1, uses[3] and 2 or nil }
        return { tile = t }
      end }
    end
    return out
  end
  if ks.grid then -- the kernel runs on that grid only (every launch checks it): it, and a ragged size on it
    out[#out + 1] = { what = "a ragged size on its grid", ragged = true,
                      o = function(r) return { n = ragged(r.n, ks.grid) } end }
    return out
  end
  -- A kernel that reads nothing that tells its CTAs apart (no CTA, cluster or
  -- grid index, no scheduler, no atomic) does the same work in every CTA: it
  -- may be written for a grid of one (then it says so: kernel_spec.grid), or
  -- have forgotten its CTA's offset. A race between its CTAs says which.
  local tells_ctas = false
  kop:walk(function(op)
    local n = op:name()
    if n:find("block_id", 1, true) or n:find("grid_dim", 1, true) or n:find("cluster", 1, true)
      or n:find("ctaid", 1, true) or n:find("sched", 1, true) or n:find("atom", 1, true)
      or n:find("program", 1, true) or n:find("work", 1, true) then
      tells_ctas = true
    end
  end)
  local cs = ks.has_cluster and ks.cluster and ks.cluster[1] or 1
  local ok, g0 = pcall(P.default_grid, kop)
  if not ok or g0 ~= cs then return out end
  if 2 * cs <= P.MAX_GRID then
    out[#out + 1] = { what = ("%d CTAs (two clusters)"):format(2 * cs), same_ctas = not tells_ctas,
                      o = function() return { grid = 2 * cs } end }
  end
  if 3 * cs <= P.MAX_GRID then
    -- (a kernel that declares its sizes gets them: kernel_spec.sizes; its
    -- other integer parameters and its buffers the ragged size)
    local on = ks.sizes and "its declared sizes and otherwise a ragged size" or "a ragged size"
    out[#out + 1] = { what = ("%d CTAs (three clusters) on %s"):format(3 * cs, on), ragged = true,
                      same_ctas = not tells_ctas,
                      o = function(r)
                        local small -- (the integer parameters the derived inputs held small: ragged too)
                        for i, v in pairs(r.small or {}) do small = small or {}; small[i] = ragged(v, 3 * cs) end
                        return { grid = 3 * cs, n = ragged(r.n, 3 * cs), small = small }
                      end }
  end
  return out
end

-- run(module, o): checks every kernel of the module on its configurations
-- within o.work emulator work a kernel (M.WORK; and o.seconds, a wall-clock
-- cap, where given); raises on a violation
-- ("file:line: protocol violation in kernel 'k' (inputs ..., grid G ...): the
-- report with its counterexample"), calls o.note(line) for a kernel not
-- proven on every configuration. -> one result per kernel: { name, ok, why
-- (what was not proven), states, seconds, checked = {what ...} }.
function M.run(module, o)
  o = o or {}
  local P = require "tilua.emulate.protocol"
  local limit = o.work or M.WORK
  local note = o.note or default_note
  local budget = ("%s emulator ops%s"):format(limit, o.seconds and (", %g s"):format(o.seconds) or "")
  local out = {}
  for _, kop in ipairs(P.kernels(module)) do
    local name = kop:attr_or_default "sym_name"
    local ks = kop:kernel_spec() or {}
    local t0 = os.clock()
    local work = { left = limit, limit = limit } -- shared by the configurations
    local deadline = o.seconds and t0 + o.seconds
    local res = { name = name, states = 0, checked = {} }
    local r1 -- the result before
    local decoded -- the kernel decoded once for every configuration (P.check's o.decoded)
    local function check(co)
      decoded = decoded or require("tilua.emulate").decode(kop)
      co.decoded = decoded
      return P.check(kop, co)
    end
    for i, cfg in ipairs(configurations(P, kop)) do
      if i > 1 and (work.left <= 0 or (deadline and os.clock() >= deadline)) then
        res.why = res.why or ("not checked within its budget (%s) on %s"):format(budget, cfg.what)
        break
      end
      local co = cfg.o(r1)
      if not co then goto next_cfg end -- (the configuration before was this one)
      co.work, co.deadline, co.max_states = work, deadline, 20000
      local ok, r = pcall(check, co)
      if not ok then
        res.why = ("not checked on %s: %s"):format(cfg.what, first_line(r))
        break
      elseif r.budget_exceeded then
        res.why = ("not proven within its budget (%s) on %s: %d states in %d runs on %s"):format(budget, cfg.what,
          r.states, r.runs, r.inputs or "?")
        break
      elseif not r.ok and r.violation.kind == "model" then
        res.why = ("not checked on %s: %s"):format(cfg.what, first_line(r.violation.message))
        break
      elseif not r.ok then
        local d = P.diagnostic(r)
        -- a kernel whose CTAs all do the same work, racing between CTAs: it
        -- forgot its CTA's offset, or is meant for one CTA and did not say so
        local global = r.violation.message:find("global bytes", 1, true)
          or r.violation.message:find("generic_barrier", 1, true)
        local hint = cfg.same_ctas and global
          and "; its CTAs cannot tell themselves apart: a kernel for one CTA says so (tl.kernel{grid = 1}, kernel_spec.grid)"
          -- a size or grid the kernel does not accept is the caller's to avoid,
          -- and the kernel's to declare: then the check stays within it
          or cfg.ragged and global and not ks.sizes and not ks.grid
          and "; a kernel that accepts only some sizes or grids says so (tl.kernel{sizes = {n = \"grid_threads\"}},"
            .. " kernel_spec.sizes, or grid = CTAs)"
          or ""
        error(("%s%s\n(found on %s by the protocol check every compile runs%s; tl.options.check_protocol = false or --no-check-protocol turns it off)")
          :format(where(d.op), d.message, cfg.what, hint), 0)
      end
      if i == 1 and r.min_phases and r.min_phases < 2 then
        -- the derived inputs are chosen so that every ring wraps twice; where
        -- no size made them, a bug at a ring's second lap can hide: said
        res.laps = ("its rings wrap %d time(s), not twice, on %s"):format(r.min_phases, cfg.what)
        note(("tilua: note: the protocol check of kernel '%s': %s (no size it tried made them wrap twice; a bug at a ring's second lap may go unseen)")
          :format(name, res.laps))
      end
      r1 = r
      res.states = res.states + r.states
      local what = cfg.what
      if i == 1 and r.tile and (r.tile.programs[2] or 1) > 1 then -- (more programs along y for its rings)
        what = ("%s (programs %s)"):format(what, table.concat(r.tile.programs, " x "))
      end
      res.checked[#res.checked + 1] = r.n and ("%s, n = %d"):format(what, r.n) or what
      ::next_cfg::
    end
    res.ok, res.seconds, res.work = res.why == nil, os.clock() - t0, limit - math.max(work.left, 0)
    local path = os.getenv "TILUA_COMPILE_CHECK_LOG" -- as TILUA_CHECK_PROTOCOL_LOG (verify_protocol.lua) logs
    local f = path and path ~= "" and io.open(path, "a")
    if f then
      local checked = table.concat(res.checked, "; ")
      f:write(table.concat(res.why and { name, "compile", "skipped", (res.why:gsub("[\t\n]", " ")), checked }
        or { name, "compile", "checked", res.states, "-", (checked:gsub("[\t\n]", " ")),
             ("%.3f s"):format(res.seconds) }, "\t"), "\n")
      f:close()
    end
    if res.why then
      note(("tilua: note: the protocol check of kernel '%s' %s (checked: %s)"):format(name, res.why,
        #res.checked > 0 and table.concat(res.checked, "; ") or "nothing"))
    end
    out[#out + 1] = res
  end
  return out
end

-- The options of the check (tl.options.check_protocol, check_protocol_work
-- and check_protocol_budget), checked: -> { work = emulator ops, seconds = a
-- wall-clock cap or nil }, or nil where the check every compile runs is off
-- (false) or left to the lenient check after every pass ("passes", the
-- specs'); true (--check-protocol) runs both.
function M.budget()
  local tl = require "tilua"
  local mode = tl.options.check_protocol
  if mode ~= nil and mode ~= true then
    if mode == false or mode == "passes" then return nil end
    tl.raise("tl.options.check_protocol: expected nil (the check of every compile), false, true or \"passes\"")
  end
  -- (tl.options checks each value when it is set: gpu/compile.lua)
  return { work = tl.options.check_protocol_work or M.WORK, seconds = tl.options.check_protocol_budget }
end

-- The C API's compile (tlModuleRunPipeline of a pipeline that lowers to
-- PTX): run(module) as tl.options say, the notes through note(line).
function M.compile(module, note)
  local b = M.budget()
  if b then M.run(module, { work = b.work, seconds = b.seconds, note = note }) end
end

return M
