-- NCCL and the sharded GEMMs on two GPUs (or more), one process per GPU: the
-- fixture of every tl.nccl call (spec/fixtures/gpu/nccl_ops.lua, which checks
-- each result itself) and examples/multi_gpu_gemm.lua (every sharded GEMM
-- against one GPU's on fresh random inputs). Pending, and the spec skipped,
-- with fewer than two GPUs or without NCCL (spec/nccl_spec.lua runs the
-- fixture on the stand-ins).
local H = dofile "spec/helper.lua"

-- (the GEMMs' barrier protocol is checked where they are compiled alone: here
-- the numbers on two GPUs, so the compiles skip the check)
local function run(args, seconds)
  return H.tilua_env({ NCCL_NVLS_ENABLE = "0", TORCH_SYMM_MEM_DISABLE_MULTICAST = "1", NVSHMEM_DISABLE_NVLS = "1",
                       TILUA_CHECK_PROTOCOL = "0" }, args, seconds or 180)
end

describe("NCCL on two GPUs", function()
  it("runs every tl.nccl call and checks every result", function()
    H.gpus(2)
    local out, err, code = run { "spec/fixtures/gpu/nccl_ops.lua", "2" }
    assert.equal(0, code, out .. err)
    H.lacks(out, "FAIL")
    H.has(out, "ok send/recv ring rank 0")
    H.has(out, "[rank 1] ok send/recv ring rank 1")
    H.has(out, "[rank 1] rank 1 of 2 on device 1: NCCL_NVLS_ENABLE=0")
  end)

  for _, mode in ipairs { "row", "column" } do
    it(("computes the %s-parallel GEMM as one GPU does, overlapped or not"):format(mode), function()
      H.gpus(2)
      local out, err, code = run { "examples/multi_gpu_gemm.lua", "--gpus=2", "--m=2048", "--n=1536", "--k=1024",
                                   "--mode=" .. mode }
      assert.equal(0, code, out .. err)
      for r = 0, 1 do
        H.has(out, ("%s%s-parallel, "):format(r == 0 and "" or "[rank 1] ", mode))
        H.has(out, ("rank %d of 2, seed"):format(r))
      end
      H.lacks(out, "differ")
      local _, matches = out:gsub("matches one GPU", "")
      assert.equal(4, matches, out)
    end)
  end
end)
