-- fp8 GEMMs as tile programs (examples/tile_gemm_fp8.lua: e4m3 / e5m2 bytes,
-- per-tensor, row / column or block scales; promoted, or fast accumulation on
-- ping-pong 128 x 192 tiles (cooperative 128 x 256 ones on a cluster or asked
-- for); the promoted per-tensor one on 128 x 144 tiles; the promoted per-tensor and block-scaled ones on
-- ping-pong consumers of 64 x 128 programs; the per-tensor one promoted by FFMA with sa * sb (a
-- diagnostic); two as programmatic dependent launches; block scales with
-- their lines prefetched into L1 4 k blocks ahead; block scales lowered with
-- staged_base=1 and release_index=1, per-tensor with release_index=1; block scales with the
-- wgmma descriptors from each address, linear_desc=0, the default being linear) on the GPU (label gpu:
-- spec/gpu_runner.lua; tools/gpu test runs it): fresh random inputs of ragged
-- sizes (M, N no multiples of the tile, N a multiple of 8; K a multiple of 16, not of the tile's
-- 128) against CPU dot products of the decoded bytes on sampled elements,
-- within bf16's rounding. Without a GPU the runs report pending.
-- TILUA_SEED fixes the seed; TILUA_SMALL=1 runs the smallest size (tools/gpu sanitize).
local tl = require "tilua"

local GPU = tl.device.available()
local seed = require("tilua.gpu.check").seed() -- ctest fixes it (spec/tests.cmake)
local small = os.getenv "TILUA_SMALL" == "1"
print(("tile_fp8_gpu: seed %d"):format(seed))

local ex = assert(loadfile "examples/tile_gemm_fp8.lua")("--library")
local sizes = small and { { 77, 296, 144 } } or { { 1000, 1480, 528 }, { 77, 296, 144 }, { 1024, 1024, 2048 } }

describe("fp8 tile GEMMs on the GPU", function()
  local n = 0
  for _, v in ipairs { { "e4m3", "tensor" }, { "e4m3", "rowcol" }, { "e5m2", "tensor" }, { "e5m2", "rowcol" }, { "e4m3", "blocks" },
                       { "e4m3", "blocks", 2 }, { "e4m3", "tensor", 2 }, { "e4m3", "tensor", nil, true }, { "e5m2", "rowcol", nil, true },
                       { "e4m3", "tensor", 2, true }, { "e4m3", "tensor", nil, true, true }, { "e4m3", "blocks", nil, nil, true },
                       { "e4m3", "blocks", nil, nil, nil, 4 }, { "e4m3", "tensor", nil, true, nil, nil, "cooperative" },
                       { "e4m3", "tensor", nil, nil, nil, nil, nil, 144 },
                       { "e4m3", "blocks", nil, nil, nil, nil, "pingpong", nil, 64 }, { "e4m3", "tensor", nil, nil, nil, nil, "pingpong", nil, 64 },
                       { "e4m3", "tensor", nil, nil, nil, nil, nil, nil, nil, "fma" },
                       { "e4m3", "blocks", nil, nil, nil, nil, nil, nil, nil, nil, "staged_base=1,release_index=1" },
                       { "e4m3", "tensor", nil, nil, nil, nil, nil, nil, nil, nil, "release_index=1" },
                       { "e4m3", "blocks", nil, nil, nil, nil, nil, nil, nil, nil, "linear_desc=0" } } do
    local kernel
    for _, size in ipairs(sizes) do
      n = n + 1
      local case_seed = seed + n
      it(("%s, %s scales%s%s%s%s%s%s, %d x %d x %d: CPU dot products on fresh random inputs"):format(v[1], v[2],
        v[3] and ", a cluster of 2" or "", v[4] and ", fast accumulation" or "", v[5] and ", PDL" or "",
        v[6] and (", L1 prefetch %d k blocks ahead"):format(v[6]) or "",
        v[4] and (v[7] or v[3]) and ", cooperative 128 x 256" or v[4] and ", ping-pong 128 x 192" or v[8] and ", 128 x 144"
          or v[9] and ", ping-pong 64 x 128" or v[10] and ", promoted by FFMA with sa * sb" or "",
        v[11] and ", lowered with " .. v[11] or "", table.unpack(size)), function()
        if not GPU then pending("no GPU: " .. tl.device.error()) return end
        if not kernel then
          kernel = ex.build { fp8 = v[1], scales = v[2], cluster = v[3], fast = v[4], pdl = v[5], prefetch = v[6], consumers = v[7], bn = v[8], bm = v[9],
                              promote = v[10] }
          -- (v[11]: convert-tileas-to-cutlass's options)
          local pipe
          for _, p in ipairs(v[11] and tl.core.pipelines() or {}) do
            if p.name == "tile-to-ptx" then pipe = p.passes:gsub("convert%-tileas%-to%-cutlass", "%0{" .. v[11] .. "}") end
          end
          kernel:compile(pipe)
        end
        local ok, summary = ex.check(kernel, { seed = case_seed, size = size, fp8 = v[1], scales = v[2] })
        print("tile_fp8_gpu: " .. summary)
        assert(ok, summary)
      end)
    end
  end
end)
