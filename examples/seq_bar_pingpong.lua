-- seq_bar_pingpong.lua: two consumer warpgroups of a CTA take strict turns
-- through ordered sequence barriers (cutlass.seq_bar), the ping-pong of
-- CUTLASS's warp-specialized GEMMs.
--
-- Two rings of depth 1, "A may go" and "B may go", each completed by the 128
-- threads of a warpgroup. Warpgroup A starts with the phase flipped (its first
-- wait passes at once); each round a group waits on its own ring, runs its turn
-- and arrives on the other's ring with the same cursor (one arrive advances the
-- cursor and flips its phase, so the next wait looks for the next phase).
--
-- A turn reads and rewrites a value in shared memory with an order-dependent
-- step (A: s = s * 31 + a[i], B: s = (s xor b[i]) * 7 + 1, in 32 bits) and
-- appends (group, round) to the CTA's log through an atomic counter. The host
-- checks, for every CTA, that the log alternates A, B, A, B ... with the rounds
-- in order and that the final value equals the CPU's on the same random data.
--
--   tilua examples/seq_bar_pingpong.lua [--emit=ir|ptx] [--stage=NAME]
--   loadfile("examples/seq_bar_pingpong.lua")("--library") -> the example (tilua.gpu.check)
local tl = require "tilua"
local check = require "tilua.gpu.check"

local ROUNDS = 128

local k = tl.kernel("seq_bar_pingpong", {
  params = { { "a", tl.ptr(tl.i32) }, { "b", tl.ptr(tl.i32) }, { "log", tl.ptr(tl.i32) },
             { "counts", tl.ptr(tl.i32) }, { "out", tl.ptr(tl.i32) }, { "rounds", tl.i32 } },
  block = 256,
})

k:define(function(k, p)
  local s = k:shared(tl.i32, 1)
  local cta = tl.block_id()
  tl.if_(tl.thread_id():eq(0), function() s:store(cta) end) -- before the inits' CTA barrier
  local goA = k:seq_bar { depth = 1, arrive_count = 128 }
  local goB = k:seq_bar { depth = 1, arrive_count = 128 }

  -- One turn, by the first thread of group g: log it, then the order-dependent step.
  local function turn(g, i, data, step)
    tl.if_(tl.thread_id():eq(128 * g), function()
      local pos = tl.atomic_add(p.counts + cta, 1)
      local at = p.log + (cta * (2 * p.rounds) + pos)
      at:store(tl.const(g * 65536, tl.i32) + i)
      local x = (data + (cta * p.rounds + i)):load()
      s:store(step(s:load(), x))
    end)
  end

  -- Group g waits on `mine`, takes its turn, hands over to the other ring.
  local function player(g, mine, other, first_phase, data, step)
    k:async_exec(g == 0 and "A" or "B", { first_warp = 4 * g, warps = 4 }, function()
      local st = mine:state { phase = first_phase }
      tl.cutlass.for_range(0, p.rounds, { st }, function(i)
        mine:wait(st)
        turn(g, i, data, step)
        other:arrive(st)
      end)
      if g == 1 then -- B has the last turn: its first thread wrote the final value
        tl.if_(tl.thread_id():eq(128), function() (p.out + cta):store(s:load()) end)
      end
    end)
  end
  player(0, goA, goB, 1, p.a, function(v, x) return v * 31 + x end)
  player(1, goB, goA, 0, p.b, function(v, x) return (v ~ x) * 7 + 1 end)
end)

local function prepare() check.compile("seq_bar_pingpong", k) end

local i32 = check.i32

-- run{seed, grid, small} -> ok, summary: grid CTAs (default one per SM, 2 when
-- small), each ROUNDS rounds (16 when small).
local function run(o)
  local grid, rounds = o.grid or (o.small and 2 or tl.device.sm_count()), o.small and 16 or ROUNDS
  local a <close> = tl.device.random(tl.i32, grid * rounds, o.seed)
  local b <close> = tl.device.random(tl.i32, grid * rounds, o.seed + 1)
  local log <close> = tl.device.alloc(tl.i32, grid * 2 * rounds)
  local counts <close> = tl.device.alloc(tl.i32, grid)
  local out <close> = tl.device.alloc(tl.i32, grid)
  log:fill(-1)
  counts:fill(0)
  out:fill(0)
  k:launch { grid = grid, args = { a, b, log, counts, out, rounds } }
  tl.device.synchronize()
  local A, B, L, N, O = a:to_table(), b:to_table(), log:to_table(), counts:to_table(), out:to_table()
  local fail, failures = check.mismatches("seq_bar_pingpong")
  for c = 0, grid - 1 do
    local v, why = c, nil
    for i = 0, rounds - 1 do
      v = i32(v * 31 + A[c * rounds + i + 1])
      v = i32((v ~ B[c * rounds + i + 1]) * 7 + 1)
    end
    if N[c + 1] ~= 2 * rounds then why = ("%d turns logged, expected %d"):format(N[c + 1], 2 * rounds) end
    for j = 0, 2 * rounds - 1 do
      local want, got = (j % 2) * 65536 + j // 2, L[c * 2 * rounds + j + 1]
      if not why and got ~= want then
        why = ("turn %d was (group %d, round %d), expected (group %d, round %d)"):format(j, got >> 16, got & 0xFFFF,
          j % 2, j // 2)
      end
    end
    if not why and O[c + 1] ~= v then why = ("final value %d, the CPU says %d"):format(O[c + 1], v) end
    if why then fail("CTA %d: %s", c, why) end
  end
  local what = ("seed %d, %d CTAs x %d rounds per warpgroup"):format(o.seed, grid, rounds)
  if failures() > 0 then return false, ("%s: %d CTAs wrong"):format(what, failures()) end
  return true, what .. ": every CTA alternated A, B and matches the CPU"
end

local example = { name = "seq_bar_pingpong", prepare = prepare, run = run,
                  grids = function(sms) return check.grids(sms) end }
example.kernel = k -- the kernel (for the emulator's tests)
if ... == "--library" then return example end
check.main(example)
