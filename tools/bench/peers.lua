-- tools/bench/peers.lua: what the benches that time a tile program against
-- peers in one run share (dofile "tools/bench/peers.lua"): the command line's
-- integer options, the timing of the runs and the table they print.
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

-- torch's SDPA (cuDNN and flash backends) in a child python3 process on
-- problems {b, h, hkv, s, d, causal} (fresh random bf16 tensors; grouped-query
-- heads through enable_gqa, else K and V expanded beforehand, outside the
-- timing): the forward and torch.autograd.grad's backward of each, timed as
-- P.time does. -> {cudnn, cudnn_bwd, flash, flash_bwd (ms, nil where the
-- backend did not run)} a problem, or nil and why
local SDPA = [[
import sys, math
try:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel, SDPBackend
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

function P.sdpa(probs)
  local py = os.tmpname()
  local f = assert(io.open(py, "w"))
  f:write(SDPA)
  f:close()
  local input = os.tmpname()
  f = assert(io.open(input, "w"))
  for _, p in ipairs(probs) do f:write(("%d %d %d %d %d %d\n"):format(p.b, p.h, p.hkv, p.s, p.d, p.causal and 1 or 0)) end
  f:close()
  local pipe = io.popen(("NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 python3 %s < %s 2>&1")
                        :format(py, input))
  if not pipe then return nil, "python3 could not be started" end
  local res, why = {}, nil
  for line in pipe:lines() do
    local i, rest = line:match "^P (%d+) (.*)$"
    if i then
      local v, n = {}, 0
      for x in rest:gmatch "%S+" do
        n = n + 1
        v[n] = tonumber(x) -- nil for "nan": the backend did not run
        if v[n] ~= v[n] then v[n] = nil end
      end
      res[tonumber(i) + 1] = { cudnn = v[1], cudnn_bwd = v[2], flash = v[3], flash_bwd = v[4] }
    elseif line:match "^ERROR" then why = line
    elseif line:match "^DEVICE" then print("torch: " .. line:gsub("^DEVICE ", ""))
    else print("torch: " .. line) end
  end
  pipe:close()
  os.remove(py)
  os.remove(input)
  if why then return nil, why end
  return res
end

return P
