-- tools/bench/peers.lua: what the benches that time a tile program against
-- peers in one run share (dofile "tools/bench/peers.lua"): the command line's
-- integer options, the timing of the runs, the table they print and the
-- clocks line (--clocks=1).
local tl = require "tilua"
local P = {}

-- The command line's --key=N options over the defaults o (changed in place). -> o
function P.options(o)
  for _, a in ipairs(arg or {}) do
    local key, v = a:match "^%-%-([%w_]+)=(%d+)$"
    if key then o[key] = tonumber(v) end
  end
  return o
end

-- runs = { { name, fn }, ... }: each run once (warm-up), then the best of 5
-- samples of CUDA events around 10 back-to-back calls, the runs alternating
-- (so clocks and caches treat them alike). -> the best time of each, in ms
function P.time(runs)
  local D = tl.device
  local function sample(fn) return D.time(function() for _ = 1, 10 do fn() end end) / 10 end
  for _, r in ipairs(runs) do r[2]() end
  D.synchronize()
  local best = {}
  for _ = 1, 5 do
    for i, r in ipairs(runs) do best[i] = math.min(best[i] or math.huge, sample(r[2])) end
  end
  return best
end

-- nvidia-smi's SM and memory clocks, power, temperature and active throttle
-- reasons now, as one CSV line (or "?"): what the benches' --clocks=1 prints
-- after a round.
function P.clocks()
  local p = io.popen "nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader 2>&1"
  local line = p and p:read "l" or "?"
  if p then p:close() end
  return line or "?"
end

-- Print the table: name, ms, TFLOP/s of `flops`, and a ratio column
-- (header; ratio(i) -> a number, or nil for "-").
function P.table(runs, best, flops, header, ratio)
  print(("| kernel | ms | TFLOP/s | %s |"):format(header))
  print("|---|---|---|---|")
  for i, r in ipairs(runs) do
    local x = ratio(i)
    print(("| %s | %.4f | %.1f | %s |"):format(r[1], best[i], flops / best[i] / 1e9, x and ("%.3f"):format(x) or "-"))
  end
end

-- What every child python3 script starts with: torch imported (else an
-- "ERROR" line), timeit(fn) -> the best of 5 samples of CUDA events around 10
-- calls (as P.time), and the device's "DEVICE" line.
local PREAMBLE = [[
import sys
try:
    import torch
except Exception as e:
    print("ERROR", repr(e)); sys.exit(0)
def timeit(fn):
    fn(); torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(10): fn()
        e.record(); torch.cuda.synchronize()
        best = min(best, s.elapsed_time(e) / 10)
    return best
print("DEVICE", torch.cuda.get_device_name(), torch.__version__)
]]

-- torch's SDPA (cuDNN and flash backends) in a child python3 process on
-- problems {b, h, hkv, s, d, causal} (fresh random bf16 tensors; grouped-query
-- heads through enable_gqa, else K and V expanded beforehand, outside the
-- timing): the forward and torch.autograd.grad's backward of each, timed as
-- P.time does. -> {cudnn, cudnn_bwd, flash, flash_bwd (ms, nil where the
-- backend did not run)} a problem, or nil and why
local SDPA = [[
try:
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel, SDPBackend
except Exception as e:
    print("ERROR", repr(e)); sys.exit(0)
for i, line in enumerate(sys.stdin):
    b, h, hkv, s, d, causal = [int(x) for x in line.split()]
    q = torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(b, hkv, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    out = []
    # grouped-query heads: SDPA's enable_gqa where the backend takes it, else K and V
    # expanded to every query head beforehand (outside the timing)
    k2 = k.detach().repeat_interleave(h // hkv, 1).requires_grad_() if hkv != h else k
    v2 = v.detach().repeat_interleave(h // hkv, 1).requires_grad_() if hkv != h else v
    for be in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
        fwd = bwd = float("nan")
        for kk, vv, kw in ((k, v, dict(enable_gqa=True)), (k2, v2, {})) if hkv != h else ((k, v, {}),):
            try:
                with sdpa_kernel(be):
                    f = lambda: F.scaled_dot_product_attention(q, kk, vv, is_causal=bool(causal), **kw)
                    fwd = timeit(f)
                    y = f(); g = torch.randn_like(y)
                    bwd = timeit(lambda: torch.autograd.grad(y, (q, kk, vv), g, retain_graph=True))
                break
            except Exception as e:
                print("NOTE", i, be, kw, repr(e)[:160], file=sys.stderr)
        out += [fwd, bwd]
    print("P", i, " ".join("%.5f" % x for x in out), flush=True)
]]

-- Run a python3 script (after PREAMBLE) in a child process (multicast kept off), its stdin the
-- lines `input`; each line it prints goes to on_line(line), which returns true
-- where it consumed it (the rest is printed as "torch: ..."). -> true, or nil and
-- the script's "ERROR ..." line
local function python(script, input, on_line)
  local py, inp = os.tmpname(), os.tmpname()
  local f = assert(io.open(py, "w"))
  f:write(PREAMBLE, script)
  f:close()
  f = assert(io.open(inp, "w"))
  for _, line in ipairs(input) do f:write(line, "\n") end
  f:close()
  local pipe = io.popen(("NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 python3 %s < %s 2>&1")
                        :format(py, inp))
  if not pipe then return nil, "python3 could not be started" end
  local why
  for line in pipe:lines() do
    if line:match "^ERROR" then why = line
    elseif line:match "^DEVICE" then print("torch: " .. line:gsub("^DEVICE ", ""))
    elseif not on_line(line) then print("torch: " .. line) end
  end
  pipe:close()
  os.remove(py)
  os.remove(inp)
  if why then return nil, why end
  return true
end

-- the numbers of a "P i x y ..." line: i, {x, y, ...} (nil for "nan": not run)
local function numbers(line)
  local i, rest = line:match "^P (%d+) (.*)$"
  if not i then return nil end
  local v, n = {}, 0
  for x in rest:gmatch "%S+" do
    n = n + 1
    v[n] = tonumber(x)
    if v[n] ~= v[n] then v[n] = nil end
  end
  return tonumber(i) + 1, v
end

function P.sdpa(probs)
  local input = {}
  for _, p in ipairs(probs) do input[#input + 1] = ("%d %d %d %d %d %d"):format(p.b, p.h, p.hkv, p.s, p.d, p.causal and 1 or 0) end
  local res = {}
  local ok, why = python(SDPA, input, function(line)
    local i, v = numbers(line)
    if i then res[i] = { cudnn = v[1], cudnn_bwd = v[2], flash = v[3], flash_bwd = v[4] } end
    return i ~= nil
  end)
  if not ok then return nil, why end
  return res
end

-- torch's grouped GEMM (torch.nn.functional.grouped_mm, else torch._grouped_mm)
-- in a child python3 process: A [sum(sizes), K] by each group's B [N, K]
-- (K-major, as ours), bf16 out, on fresh random inputs, timed as P.time does.
local GROUPED = [[
n, k = [int(x) for x in sys.stdin.readline().split()]
sizes = [int(x) for x in sys.stdin.readline().split()]
gmm = getattr(torch.nn.functional, "grouped_mm", None) or getattr(torch, "_grouped_mm", None)
if gmm is None:
    print("ERROR torch has no grouped_mm"); sys.exit(0)
a = torch.randn(sum(sizes), k, device="cuda", dtype=torch.bfloat16)
b = torch.randn(len(sizes), n, k, device="cuda", dtype=torch.bfloat16).transpose(-2, -1)
offs = torch.tensor(sizes, device="cuda", dtype=torch.int32).cumsum(0, dtype=torch.int32)
try:
    print("P 0 %.5f" % timeit(lambda: gmm(a, b, offs=offs, out_dtype=torch.bfloat16)), flush=True)
except Exception as e:
    print("ERROR", gmm.__name__, repr(e)[:200])
]]

-- -> ms of torch's grouped GEMM over groups of `sizes` rows, or nil and why
function P.grouped_mm(sizes, n, k)
  local ms
  local ok, why = python(GROUPED, { n .. " " .. k, table.concat(sizes, " ") }, function(line)
    local i, v = numbers(line)
    if i then ms = v[1] end
    return i ~= nil
  end)
  if not ok then return nil, why end
  return ms, ms == nil and "no figure" or nil
end

return P
