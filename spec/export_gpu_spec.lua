-- Exported kernels on the GPU (docs/embedding.md): the stdlib GEMM, its
-- split-K form and the softmax tile program of examples/tile_gemm_softmax.lua
-- at two sizes, a graph of two of them replayed and updated, and the stdlib
-- attention at two problem sizes (O and the log-sum-exp), run by a C
-- host built from the export alone (spec/c/export_host.c: the driver opened
-- with dlopen, and linked) must give the results of tilua's own launchers
-- (spec/fixtures/gpu/export_kernels.lua) bit for bit (the export of PTX: the
-- same driver JIT makes the same code); those are checked against the CPU on
-- samples, and so are the results of the export with cubins (ptxas's code).
-- Without a GPU: pending (ctest: skipped).
local H = dofile "spec/helper.lua"
local AH = dofile "spec/attention_helper.lua"
local tl = require "tilua"

local CC = os.getenv "TILUA_CC" or "cc"
local FIXTURE = "spec/fixtures/gpu/export_kernels.lua"
local q = H.quote
local OUTPUTS = { "gemm", "splitk", "softmax1", "softmax2", "graph_softmax1", "graph_gemm", "graph_softmax2",
                  "attention_o1", "attention_lse1", "attention_o2", "attention_lse2" }

local sh = H.sh

local function bf16s(bytes)
  local v = {}
  for i = 1, #bytes // 2 do v[i] = tl.device.bf16_value((string.unpack("<I2", bytes, 2 * i - 1))) end
  return v
end

describe("an exported kernel on the GPU", function()
  it("runs the example of docs/embedding.md (examples/export): once, and as a graph replayed and updated", function()
    if not tl.device.available() then pending("no GPU: " .. tl.device.error()) return end
    local d = os.tmpname()
    os.remove(d)
    local out, err, code = H.tilua_run { "export", "-o", d, "examples/export/saxpy.lua" }
    assert.equal(0, code, out .. err)
    local ok, log = sh(("%s -std=c11 -O2 -I%s examples/export/host.c %s/*.c -ldl -o %s"):format(CC, q(d), q(d), q(d .. "/saxpy")))
    assert(ok, log)
    out, err, code = H.run { d .. "/saxpy" }
    assert.equal(0, code, out .. err)
    assert.truthy(out:find("saxpy: ok", 1, true), out)
  end)

  it("gives tilua's own launcher's results bit for bit, from a C host with only the export", function()
    if not tl.device.available() then pending("no GPU: " .. tl.device.error()) return end
    local d = os.tmpname()
    os.remove(d)
    for _, sub in ipairs { "export", "in", "lua", "c", "linked" } do assert(os.execute("mkdir -p " .. q(d .. "/" .. sub))) end
    local out, err, code = H.tilua_env({ TILUA_SKIP_CHECK_PROTOCOL = "1" }, { FIXTURE, d .. "/export", d .. "/in", d .. "/lua" }, 600)
    assert.equal(0, code, err)
    assert.truthy(out:find("lua path: ok", 1, true), out .. err)
    local cflags = out:match "cflags: ([^\n]+)"
    local S = {}
    for k, v in cflags:gmatch "%-D([%w_]+)=([%d.]+)" do S[k] = tonumber(v) end

    local ok, log = sh(("%s -std=c11 -O2 -Wall -Wextra -pedantic -Werror %s -I%s spec/c/export_host.c %s/*.c -ldl -o %s")
      :format(CC, cflags, q(d .. "/export"), q(d .. "/export"), q(d .. "/host")))
    assert(ok, log)
    local t0 = os.clock()
    local _
    _, err, code = H.run { d .. "/host", d .. "/in", d .. "/c" }
    assert.equal(0, code, err)
    print(("export_gpu: the C host ran in %.2f s (host CPU)"):format(os.clock() - t0))
    local function same(dir)
      for _, name in ipairs(OUTPUTS) do
        local want, got = H.slurp(("%s/lua/%s.bin"):format(d, name)), H.slurp(("%s/%s/%s.bin"):format(d, dir, name))
        assert.truthy(want and #want > 0, name)
        assert.equal(#want, #got, name)
        assert(want == got, ("%s: the %s host's result differs from the Lua launcher's"):format(name, dir))
      end
    end
    same("c")
    -- the driver linked instead of opened (libcuda.so.1 by its name)
    ok, log = sh(("%s -std=c11 -O2 -DTILUA_EXPORT_LINK_CUDA %s -I%s spec/c/export_host.c %s/*.c -l:libcuda.so.1 -o %s")
      :format(CC, cflags, q(d .. "/export"), q(d .. "/export"), q(d .. "/host_linked")))
    if ok then
      _, err, code = H.run { d .. "/host_linked", d .. "/in", d .. "/linked" }
      assert.equal(0, code, err)
      same("linked")
    else
      print("export_gpu: no libcuda.so.1 to link against here (" .. log:gsub("\n", " ") .. "): the linked host did not run")
    end

    -- the graph replays what the plain launches computed
    local function bin(dir, name) return H.slurp(("%s/%s/%s.bin"):format(d, dir, name)) end
    assert.equal(bin("lua", "softmax1"), bin("lua", "graph_softmax1"))
    assert.equal(bin("lua", "softmax2"), bin("lua", "graph_softmax2"))
    assert.equal(bin("lua", "gemm"), bin("lua", "graph_gemm"))

    -- and what they computed is right: CPU samples, of the Lua launchers' results
    -- and of the export with cubins (ptxas's code instead of the JIT's)
    local function cpu_samples(dir)
      local a, b, dd = bf16s(bin("in", "gemm_a")), bf16s(bin("in", "gemm_b")), bf16s(bin(dir, "gemm"))
      local sk = bf16s(bin(dir, "splitk"))
      local M, N, K = S.GEMM_M, S.GEMM_N, S.GEMM_K
      for s = 0, 63 do
        local i, j = (s * 37) % M, (s * 101) % N
        local want = 0
        for kk = 1, K do want = want + a[i * K + kk] * b[j * K + kk] end
        local tol = math.abs(want) * 2 ^ -7 + 1e-3 * math.sqrt(K)
        assert(math.abs(dd[i * N + j + 1] - want) <= tol, ("%s gemm[%d, %d] = %g, want %g"):format(dir, i, j, dd[i * N + j + 1], want))
        assert(math.abs(sk[i * N + j + 1] - want) <= tol, ("%s splitk[%d, %d] = %g, want %g"):format(dir, i, j, sk[i * N + j + 1], want))
      end
      local ex = loadfile("examples/tile_gemm_softmax.lua")("--library")
      local sb = bf16s(bin("in", "softmax_b"))
      local scale = 1 / math.sqrt(S.SOFTMAX_K)
      for n, m in ipairs { S.SOFTMAX_M1, S.SOFTMAX_M2 } do
        local sa, sc = bf16s(bin("in", "softmax_a" .. n)), bf16s(bin(dir, "softmax" .. n))
        for _, i in ipairs { 0, m // 2, m - 1 } do
          local want = ex.reference(sa, sb, S.SOFTMAX_K, scale, i)
          for j = 0, ex.N - 1 do
            assert(ex.close(sc[i * ex.N + j + 1], want[j]),
              ("%s softmax%d[%d, %d] = %g, want %g"):format(dir, n, i, j, sc[i * ex.N + j + 1], want[j]))
          end
        end
      end
      -- the attention: every element of O and the log-sum-exp against the CPU
      for n = 1, 2 do
        local c = { b = S["ATT_B" .. n], h = S["ATT_H" .. n], hkv = S["ATT_HKV" .. n], sq = S["ATT_SQ" .. n],
                    skv = S["ATT_SKV" .. n], d = S.ATT_D, scale = S.ATT_SCALE, dtype = "bf16" }
        local x = { Q = bf16s(bin("in", "att_q" .. n)), K = bf16s(bin("in", "att_k" .. n)), V = bf16s(bin("in", "att_v" .. n)) }
        local worst, worstl, bad = AH.compare(c, x, bin(dir, "attention_o" .. n), bin(dir, "attention_lse" .. n))
        print(("export_gpu: %s attention%d: O max error %.3g, LSE max error %.3g, %d values off"):format(dir, n, worst, worstl, bad))
        assert.equal(0, bad, ("%s attention%d: %d values off the CPU"):format(dir, n, bad))
      end
    end
    cpu_samples("lua")
    print(("export_gpu: %d results of the C host equal the Lua launcher's bit for bit; CPU samples agree"):format(#OUTPUTS))
    if H.ptxas() then
      ok, log = sh(("%s -std=c11 -O2 %s -I%s spec/c/export_host.c %s/*.c -ldl -o %s")
        :format(CC, cflags, q(d .. "/export_cubin"), q(d .. "/export_cubin"), q(d .. "/host_cubin")))
      assert(ok, log)
      assert(os.execute("mkdir -p " .. q(d .. "/cubin")))
      _, err, code = H.run { d .. "/host_cubin", d .. "/in", d .. "/cubin" }
      assert.equal(0, code, err)
      cpu_samples("cubin")
      local identical = 0
      for _, name in ipairs(OUTPUTS) do if bin("cubin", name) == bin("lua", name) then identical = identical + 1 end end
      print(("export_gpu: the export with cubins agrees with the CPU samples; %d of %d results also bit for bit"):format(identical, #OUTPUTS))
    end
  end)
end)
