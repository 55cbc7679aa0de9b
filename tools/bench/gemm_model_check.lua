-- tools/bench/gemm_model_check.lua: tl.gemm.candidates's model (stdlib/gemm_choice.lua)
-- against measured times: reads the output of tools/bench/gemm_variants.lua or of
-- tools/bench/gemm.lua --sweep (its "forms (TFLOP/s)" lines; bf16 shapes), prints
-- each variant's time against the model's, the rms of their log ratio, and per
-- shape the measured best with its rank in the model. No GPU: run it on a log of
-- a GPU run when setting the model's constants.
--
--   tilua tools/bench/gemm_model_check.lua LOG [LOG...]
require "tilua"
local MC = require "tilua.stdlib.gemm_choice"
local function parse(spec)
  local o = {}
  for kv in spec:gmatch "[^,]+" do
    local key, v = kv:match "^([%w_]+)=(.+)$"
    local a, b = v:match "^(%d+)x(%d+)$"
    if a then o[key] = { tonumber(a), tonumber(b) }
    elseif v == "true" then o[key] = true
    else o[key] = math.tointeger(tonumber(v)) or v end
  end
  return o
end
-- a form as the sweep names it ("128x192 pingpong c2x1", "128x256 c2x1 splitk2")
local function parse_form(name)
  local bm, bn = name:match "^(%d+)x(%d+)"
  local o = { bm = tonumber(bm), bn = tonumber(bn), consumers = name:find "pingpong" and "pingpong" or nil }
  local cm, cn = name:match " c(%d)x(%d)"
  if cm then o.cluster = { tonumber(cm), tonumber(cn) } end
  local splits = name:match " splitk(%d+)"
  if splits then o.schedule, o.splits = "splitk", tonumber(splits) end
  if name:find " streamk" then o.schedule = "streamk" end
  return o
end
local rows = {}
for _, file in ipairs(arg) do
  local m, n, k, blas
  for line in io.lines(file) do
    local M_, N_, K_ = line:match ", (%d+)x(%d+)x(%d+) bf16"
    if M_ then m, n, k = tonumber(M_), tonumber(N_), tonumber(K_) end
    local us = line:match "^cuBLASLt%s+[%d.]+ TFLOP/s%s+([%d.]+) us"
    if us then blas = tonumber(us) end
    local name, t = line:match "^(%S+)%s+[%d.]+ TFLOP/s%s+([%d.]+) us"
    if name and name ~= "cuBLASLt" and m then
      local o = parse(name)
      local est = MC.estimate(o, m, n, k, "bf16", 132)
      rows[#rows + 1] = { shape = ("%dx%dx%d"):format(m, n, k), name = name, t = tonumber(t), est = est, blas = blas }
    end
    -- the sweep: "MxNxK bf16  PICK  tilua X  cuBLAS Y ...", then its forms' TFLOP/s
    local sm, sn, sk, bl = line:match "^(%d+)x(%d+)x(%d+) bf16 .* cuBLAS%s+([%d.]+)"
    if sm then m, n, k, blas = tonumber(sm), tonumber(sn), tonumber(sk), 2.0 * sm * sn * sk / tonumber(bl) / 1e6 end
    local forms = line:match "^%s+forms %(TFLOP/s%): (.*)$"
    if forms and m then
      for form, tf in forms:gmatch "([^,:]+): ([%d.]+)" do
        form = form:gsub("^%s+", "")
        rows[#rows + 1] = { shape = ("%dx%dx%d"):format(m, n, k), name = form, t = 2.0 * m * n * k / tonumber(tf) / 1e6,
                            est = MC.estimate(parse_form(form), m, n, k, "bf16", 132), blas = blas }
      end
    end
  end
end
local err, ne = 0, 0
for _, r in ipairs(rows) do
  print(("%-18s %-36s meas %8.2f  model %8s  m/e %5s  blas %8.2f ratio %.3f"):format(r.shape, r.name, r.t,
    r.est and ("%.2f"):format(r.est) or "-", r.est and ("%.2f"):format(r.t / r.est) or "-", r.blas, r.blas / r.t))
  if r.est then err, ne = err + math.log(r.t / r.est) ^ 2, ne + 1 end
end
print("rms log err", math.sqrt(err / math.max(ne, 1)))
-- the model's pick vs the measured best per shape
local by = {}
for _, r in ipairs(rows) do by[r.shape] = by[r.shape] or {} table.insert(by[r.shape], r) end
for shape, rs in pairs(by) do
  table.sort(rs, function(a, b) return a.t < b.t end)
  local em = {}
  for _, r in ipairs(rs) do if r.est then em[#em + 1] = r end end
  table.sort(em, function(a, b) return a.est < b.est end)
  local rank = {}
  for i, r in ipairs(em) do rank[r] = i end
  print(("%-18s best %-30s %.3f (model rank %s) | model top: %s %.3f"):format(shape, rs[1].name, rs[1].blas / rs[1].t,
    tostring(rank[rs[1]]), em[1] and em[1].name or "-", em[1] and em[1].blas / em[1].t or 0))
end
