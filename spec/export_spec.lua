-- Ahead-of-time export (lua/tilua/gpu/export.lua, src/export/; docs/embedding.md):
-- kernels written as C that a host builds with a C compiler and the CUDA
-- driver alone. Without a GPU the host runs against the stand-in driver
-- (spec/c/fake_cuda.c), whose call log must show the exported code making the
-- calls tilua's own launchers make for the same kernels: grids, blocks,
-- clusters, shared memory, every argument and tensor map.
-- spec/export_gpu_spec.lua runs the same kernels on the GPU, bit for bit.
local H = dofile "spec/helper.lua"
local tl = require "tilua"

local FAKE = os.getenv "TILUA_FAKE_CUDA"
local CC = os.getenv "TILUA_CC" or "cc"
local CFLAGS = os.getenv "TILUA_C_FLAGS" or ""
local FIXTURE = "spec/fixtures/gpu/export_kernels.lua"
local q = H.quote
-- the kernels exported here are the stdlib GEMM's and an example's, whose
-- protocols spec/protocol_gemm_spec.lua and tileas_lowering_spec.lua check:
-- here only their export is, without the check after every pass (minutes)
tl.options.check_protocol = nil
local NO_CHECK = "TILUA_SKIP_CHECK_PROTOCOL"

local function need_fake()
  if not FAKE or FAKE == "" then pending("TILUA_FAKE_CUDA is not set (run through ctest)") end
end

local function tmpdir()
  local d = os.tmpname()
  os.remove(d)
  assert(os.execute("mkdir -p " .. q(d)))
  return d
end

local sh = H.sh

-- The lines of a stand-in driver log that say what ran (not the encodes, which
-- the Lua launcher caches and the export repeats, nor the module loads).
local function runs(path)
  local lines = {}
  for l in (H.slurp(path) or ""):gmatch "[^\n]+" do
    if l:match "^launch" or l:match "^graph" or l:match "^capture" then lines[#lines + 1] = l end
  end
  return lines
end

-- Build the fixture's kernels, export them and run the Lua path (stand-in
-- driver, its log in DIR/lua.log); -> dir, cflags
local function export_and_run_lua()
  local d = tmpdir()
  for _, sub in ipairs { "export", "in", "lua" } do assert(os.execute("mkdir -p " .. q(d .. "/" .. sub))) end
  local out, err, code = H.tilua_env({ TILUA_LIBCUDA = FAKE, FAKE_CUDA_LOG = d .. "/lua.log", [NO_CHECK] = "1" },
    { FIXTURE, d .. "/export", d .. "/in", d .. "/lua" }, 300)
  assert.equal(0, code, err)
  assert.truthy(out:find("lua path: ok", 1, true), out .. err)
  return d, out:match "cflags: ([^\n]+)"
end

-- Compile spec/c/export_host.c against the export (DIR/export, or the one
-- with cubins); -> the program's path.
local function build_host(d, cflags, extra, cubin)
  local exe = d .. "/host" .. (extra and "_linked" or "") .. (cubin and "_cubin" or "")
  local src = d .. "/export" .. (cubin and "_cubin" or "")
  local ok, log = sh(("%s -std=c11 -Wall -Wextra -Wshadow -pedantic -Werror %s %s -I%s spec/c/export_host.c %s/*.c %s -o %s")
    :format(CC, CFLAGS, cflags, q(src), q(src), extra or "-ldl", q(exe)))
  assert(ok, log)
  return exe
end

describe("tl.export", function()
  local d, cflags
  setup(function()
    if FAKE and FAKE ~= "" then d, cflags = export_and_run_lua() end
  end)

  it("writes each kernel as C11 that compiles with no warning, and the runtime beside it", function()
    need_fake()
    for _, f in ipairs { "tilua_export.h", "tilua_export.c", "tilua_cuda_types.h", "tilua_cuda_syms.def", "tilua_tensor_map.h",
                         "export_gemm.h", "export_gemm.c", "export_splitk.h", "export_splitk.c",
                         "tile_gemm_softmax.h", "tile_gemm_softmax.c", "export_attention.h", "export_attention.c" } do
      assert.truthy(H.slurp(d .. "/export/" .. f), f)
    end
    -- the runtime's includes point at the export's own copies
    local rt = H.slurp(d .. "/export/tilua_export.c")
    assert.truthy(rt:find('#include "tilua_tensor_map.h"', 1, true))
    assert.falsy(rt:find("../cuda/", 1, true))
    build_host(d, cflags)
    -- the typed launch function: one argument per kernel parameter, by its C type
    local h = H.slurp(d .. "/export/tile_gemm_softmax.h")
    assert.truthy(h:find("CUresult tile_gemm_softmax_launch(CUstream stream, tilua_dim3 grid, const CUtensorMap *A, " ..
      "const CUtensorMap *B, const CUtensorMap *C, int32_t K, float scale, int32_t programs_x, int32_t programs_y);", 1, true), h)
    assert.truthy(h:find("CUresult tile_gemm_softmax_run(CUstream stream, tilua_dim3 programs, const tilua_tensor *A, " ..
      "const tilua_tensor *B, const tilua_tensor *C, int32_t K, float scale);", 1, true), h)
    assert.truthy(H.slurp(d .. "/export/export_splitk.h"):find("size_t export_splitk_workspace_bytes(void);", 1, true))
    -- the stdlib attention: 4-D tensors in, the grid from Q's dims and the device's SMs
    h = H.slurp(d .. "/export/export_attention.h")
    assert.truthy(h:find("CUresult export_attention_run(CUstream stream, const tilua_tensor *q, const tilua_tensor *k, " ..
      "const tilua_tensor *v, const tilua_tensor *o, CUdeviceptr lse, float scale);", 1, true), h)
    assert.truthy(h:find("CUresult export_attention_grid(tilua_dim3 *grid, const tilua_tensor *q);", 1, true), h)
    assert.truthy(h:find("CUresult export_attention_map_K(CUtensorMap *map, const tilua_tensor *k);", 1, true), h)
  end)

  it("embeds the kernel's PTX byte for byte (and a cubin for sm_90a when ptxas is there)", function()
    local g = tl.gemm.build { m = 300, n = 512, k = 256, name = "export_gemm" }
    local ptx = g.kernel:compile()
    local dir = tmpdir()
    tl.export(dir, g)
    local c = H.slurp(dir .. "/export_gemm.c")
    local bytes = {}
    for n in c:match("static const unsigned char ptx%[%] = {(.-)};"):gmatch "%d+" do bytes[#bytes + 1] = string.char(tonumber(n)) end
    assert.equal(ptx .. "\0", table.concat(bytes))
    if H.ptxas() then
      assert.truthy(c:find("static const unsigned char cubin[] = {\n  127,69,76,70,", 1, true)) -- "\x7fELF"
      assert.truthy(c:find('tilua_kernel export_gemm_kernel = {"export_gemm", (const char *)ptx, cubin, ', 1, true))
    end
  end)

  it("makes the calls tilua's launchers make, from a C host that has only the export (stand-in driver)", function()
    need_fake()
    local host = build_host(d, cflags)
    assert.truthy(os.execute("mkdir -p " .. q(d .. "/c")))
    local out, err, code = H.run { "env", "TILUA_LIBCUDA=" .. FAKE, "FAKE_CUDA_LOG=" .. d .. "/c.log", host, d .. "/in", d .. "/c" }
    assert.equal(0, code, err)
    assert.truthy(out:find("export_host: ok", 1, true))
    local lua, c = runs(d .. "/lua.log"), runs(d .. "/c.log")
    -- the GEMM, split-K, the softmax at two sizes (one export, every size), a
    -- graph of two kernels captured, replayed, its nodes set, replayed, the
    -- attention at two problem sizes
    assert.equal(16, #lua, table.concat(lua, "\n"))
    assert.same(lua, c)
    local all = table.concat(c, "\n")
    assert.truthy(all:find("launch export_splitk grid=4,1,1 block=384,1,1 cluster=1,1,1 smem=%d+ pdl=1 args=map{dtype=9 rank=2 base=buf0%+0 dims=256,300"))
    assert.truthy(all:find("launch tile_gemm_softmax grid=4,1,1 .- map{dtype=9 rank=2 base=buf9%+0 dims=256,1000 strides=512"))
    assert.truthy(all:find("graph node 0 set\ngraph node 1 set\ngraph launch: 2 kernel nodes", 1, true))
    -- its 4-D maps (dims innermost first) and a grid of min(SMs, tiles of
    -- 128 query rows): the stand-in's 4 SMs for 3 x 4 x 1 tiles, 2 CTAs for 1 x 1 x 2
    assert.truthy(all:find("launch export_attention grid=4,1,1 block=384,1,1 cluster=1,1,1 smem=%d+ args=map{dtype=9 rank=4 "
      .. "base=buf13%+0 dims=128,300,4,1 strides=256,76800,307200 box=64,64,1,1 "))
    assert.truthy(all:find("launch export_attention grid=2,1,1 .- map{dtype=9 rank=4 base=buf19%+0 dims=128,257,1,2 "
      .. "strides=256,65792,65792 box=64,128,1,1 .- buf22%+0 0x2 0x1 0x1 0x64 0x101 0x3db504f3"))
    assert.falsy(H.slurp(d .. "/c.log"):find("module refused a cubin", 1, true)) -- that export has none
  end)

  it("offers the driver the cubin first, and falls back to the PTX (the stand-in takes only PTX)", function()
    need_fake()
    if not H.ptxas() then pending("no ptxas: the export has no cubin") return end
    local host = build_host(d, cflags, nil, true)
    assert.truthy(os.execute("mkdir -p " .. q(d .. "/cubin")))
    local _, err, code = H.run { "env", "TILUA_LIBCUDA=" .. FAKE, "FAKE_CUDA_LOG=" .. d .. "/cubin.log", host, d .. "/in", d .. "/cubin" }
    assert.equal(0, code, err)
    local _, refusals = H.slurp(d .. "/cubin.log"):gsub("module refused a cubin", "")
    assert.equal(4, refusals) -- one per kernel, at its first launch
    assert.same(runs(d .. "/lua.log"), runs(d .. "/cubin.log"))
  end)

  it("calls the same ABI with the driver linked (TILUA_EXPORT_LINK_CUDA)", function()
    need_fake()
    local host = build_host(d, cflags .. " -DTILUA_EXPORT_LINK_CUDA", q(FAKE) .. " -Wl,-rpath," .. q(FAKE:match "^(.*)/"))
    assert.truthy(os.execute("mkdir -p " .. q(d .. "/linked")))
    local _, err, code = H.run { "env", "FAKE_CUDA_LOG=" .. d .. "/linked.log", host, d .. "/in", d .. "/linked" }
    assert.equal(0, code, err)
    assert.same(runs(d .. "/lua.log"), runs(d .. "/linked.log"))
  end)

  it("sizes a persistent tile program's grid on clusters to those resident at once, as k:launch does (stand-in driver)", function()
    need_fake()
    -- examples/tile_gemm.lua on clusters of 2, 8 programs; the stand-in has 4 SMs and
    -- says FAKE_CUDA_CLUSTERS clusters fit: 1 -> 2 CTAs, 3 -> 4 (the SMs)
    local e = tmpdir()
    local script = e .. "/launch.lua"
    local f = assert(io.open(script, "w"))
    f:write([[
      local tl = require "tilua"
      local k = loadfile("examples/tile_gemm.lua")("--library").build { cluster = 2 }
      tl.export(arg[1], k, { cubin = false })
      local D = tl.device
      local a, b, c = D.alloc(tl.bf16, 512 * 64), D.alloc(tl.bf16, 512 * 64), D.alloc(tl.bf16, 512 * 512)
      k:launch { grid = { 4, 2 }, args = { A = { a, { 512, 64 } }, B = { b, { 512, 64 } }, C = { c, { 512, 512 } }, K = 64 } }
      D.synchronize()
      print "done"
    ]])
    f:close()
    f = assert(io.open(e .. "/host.c", "w"))
    f:write([[
#include <stdio.h>
#include "tile_gemm.h"
int main(void) {
  tilua_dim3 grid, programs = {4, 2, 1};
  if (tilua_use_device(0) != CUDA_SUCCESS || tile_gemm_grid(&grid, programs) != CUDA_SUCCESS) {
    fprintf(stderr, "%s\n", tilua_last_error());
    return 1;
  }
  printf("grid=%u,%u,%u\n", grid.x, grid.y, grid.z);
  return 0;
}
]])
    f:close()
    assert(os.execute("mkdir -p " .. q(e .. "/x")))
    local built = false
    for _, clusters in ipairs { 1, 3 } do
      local log = e .. "/lua" .. clusters .. ".log"
      local out, err, code = H.tilua_env({ TILUA_LIBCUDA = FAKE, FAKE_CUDA_LOG = log, FAKE_CUDA_CLUSTERS = tostring(clusters),
                                           [NO_CHECK] = "1" }, { script, e .. "/x" }, 120)
      assert(code == 0 and out:find "done", out .. err)
      if not built then
        local ok, msg = sh(("%s -std=c11 -Wall -Wextra -Werror %s -I%s %s %s/*.c -ldl -o %s"):format(CC, CFLAGS, q(e .. "/x"),
          q(e .. "/host.c"), q(e .. "/x"), q(e .. "/host")))
        assert(ok, msg)
        built = true
      end
      local c_out, c_err, c_code = H.run { "env", "TILUA_LIBCUDA=" .. FAKE, "FAKE_CUDA_CLUSTERS=" .. clusters, e .. "/host" }
      assert.equal(0, c_code, c_err)
      local want = ("grid=%d,1,1"):format(clusters == 1 and 2 or 4)
      assert.truthy(table.concat(runs(log), "\n"):find("launch tile_gemm " .. want .. " block=384,1,1 cluster=2,1,1", 1, true),
        H.slurp(log))
      assert.equal(want .. "\n", c_out)
    end
  end)

  it("refuses what it cannot write", function()
    local ok, err = pcall(tl.export, os.tmpname(), { 42 })
    assert.is_false(ok)
    assert.matches("export: expected a kernel or a stdlib GEMM, got number", err)
    tl.new_module()
    local k = tl.kernel("spin_export", { params = { { "n", tl.i32 } }, block = 32 })
    k:define(function() end)
    tl.options.debug_hangs = true
    k:compile()
    tl.options.debug_hangs = nil
    ok, err = pcall(tl.export, os.tmpname(), k)
    assert.is_false(ok)
    assert.matches("kernel 'spin_export' was compiled with debug%-hangs", err)
  end)
end)

describe("a launch recipe's checks on its inputs", function()
  -- the attention's (stdlib/attention.lua): export_host.c's refusals say the same words in C
  it("refuse a launch of tilua's launcher before it touches the device, in the words of the export", function()
    local a = tl.attention.build { b = 1, h = 4, hkv = 2, sq = 300, skv = 200, d = 128, name = "export_attention" }
    local buf = { raw = true } -- never read: the checks come first
    local function refusal(q, k, o)
      local ok, err = pcall(tl.recipe.values, a.kernel.recipe, a.kernel.params, {},
        { q = { buf, q }, k = { buf, k }, v = { buf, k }, o = { buf, o }, lse = buf })
      assert.is_false(ok)
      return err
    end
    local q, kk = { 1, 4, 300, 128 }, { 1, 2, 200, 128 }
    assert.matches("launch: attention 'export_attention': o's dim 3 (the head dim it was built for) is 64, not 128",
      refusal(q, kk, { 1, 4, 300, 64 }), 1, true)
    assert.matches("launch: attention 'export_attention': q's dim 1 (the heads, a multiple of k's dim 1) is 3, not a multiple of 2",
      refusal({ 1, 3, 300, 128 }, kk, { 1, 3, 300, 128 }), 1, true)
    assert.matches("launch: attention 'export_attention': k's dim 2 is 0, less than 1", refusal(q, { 1, 2, 0, 128 }, q), 1, true)
    assert.matches("launch: attention 'export_attention': v's dim 1 (as k's) is 1, not 2",
      select(2, pcall(tl.recipe.values, a.kernel.recipe, a.kernel.params, {},
        { q = { buf, q }, k = { buf, kk }, v = { buf, { 1, 1, 200, 128 } }, o = { buf, q }, lse = buf })), 1, true)
    -- a:run, on sizes of its own: the same checks
    local ok, err = pcall(a.run, a, { q = buf, k = buf, v = buf, o = buf, lse = buf, h = 4, hkv = 3 })
    assert.is_false(ok)
    assert.matches("q's dim 1 (the heads, a multiple of k's dim 1) is 4, not a multiple of 3", err, 1, true)
  end)
end)

describe("the example of docs/embedding.md (examples/export)", function()
  it("exports saxpy, builds its host with cc, and the host launches it once and as a graph (stand-in driver)", function()
    need_fake()
    local d = tmpdir()
    local out, err, code = H.tilua_env({ [NO_CHECK] = "1" }, { "export", "-o", d, "examples/export/saxpy.lua" }, 120)
    assert.equal(0, code, out .. err)
    local ok, log = sh(("%s -std=c11 -Wall -Wextra -pedantic -Werror %s -I%s examples/export/host.c %s/*.c -ldl -o %s")
      :format(CC, CFLAGS, q(d), q(d), q(d .. "/saxpy")))
    assert(ok, log)
    out, err, code = H.run { "env", "TILUA_LIBCUDA=" .. FAKE, "FAKE_CUDA_LOG=" .. d .. "/log", d .. "/saxpy", "--no-check" }
    assert.equal(0, code, out .. err)
    assert.truthy(out:find("saxpy: launched (not checked)", 1, true), out)
    local runs_ = runs(d .. "/log")
    assert.equal("launch saxpy grid=3907,1,1 block=256,1,1 cluster=1,1,1 smem=0 args=buf0+0 buf1+0 0x40000000 0xf4240", runs_[1])
    local all = table.concat(runs_, "\n")
    assert.truthy(all:find("capture ends: 10 kernel nodes\ngraph launch: 10 kernel nodes\n", 1, true), all)
    assert.truthy(all:find("graph node 9 set\ngraph launch: 10 kernel nodes\nlaunch (graph) saxpy grid=3907,1,1 block=256,1,1 cluster=1,1,1 smem=0 args=buf0+0 buf1+0 0x3f000000 0xf4240", 1, true), all)
    -- without a GPU (no driver at all) it says so and exits 77
    out, err, code = H.run { "env", "TILUA_LIBCUDA=/nonexistent/libcuda.so.1", d .. "/saxpy" }
    assert.equal(77, code, out .. err)
    assert.truthy(out:find("SKIP: no GPU (no CUDA driver: /nonexistent/libcuda.so.1 not found", 1, true), out)
  end)
end)

-- Exports the kernel `script` (Lua text) compiles under the name `name`,
-- builds a host from `main` (C statements after tilua_use_device) and runs it
-- on the stand-in driver -> its stdout.
local function exported_host(name, script, main)
  local d = tmpdir()
  local f = assert(io.open(d .. "/" .. name .. ".lua", "w"))
  f:write(script)
  f:close()
  local out, err, code = H.tilua_env({ [NO_CHECK] = "1" }, { "export", "-o", d, "--no-cubin", d .. "/" .. name .. ".lua" }, 120)
  assert.equal(0, code, out .. err)
  f = assert(io.open(d .. "/host.c", "w"))
  f:write(("#include <stdio.h>\n#include \"%s.h\"\nint main(void) {\n"
    .. "  if (tilua_use_device(0) != CUDA_SUCCESS) return 77;\n%s\n  return 0;\n}\n"):format(name, main))
  f:close()
  local ok, log = sh(("%s -std=c11 -Wall -Wextra -pedantic -Werror %s -I%s %s/*.c -ldl -o %s")
    :format(CC, CFLAGS, q(d), q(d), q(d .. "/host")))
  assert(ok, log)
  out, err, code = H.run { "env", "TILUA_LIBCUDA=" .. FAKE, d .. "/host" }
  assert.equal(0, code, out .. err)
  return out
end

describe("an exported kernel that fixes its grid", function()
  it("refuses any other grid, as k:launch does (stand-in driver)", function()
    need_fake()
    local out = exported_host("one", [[
local tl = require "tilua"
local k = tl.kernel("one", { params = { { "out", tl.ptr(tl.i32) } }, block = 64, grid = 1 })
k:define(function(_, p) (p.out + tl.thread_id()):store(tl.thread_id()) end)
k:compile()
]], [[
  tilua_dim3 two = {2, 1, 1}, one = {1, 1, 1};
  CUresult r = one_launch(0, two, 0);
  printf("two: %d %s\n", (int)r, r ? tilua_last_error() : "");
  r = one_launch(0, one, 0);
  printf("one: %d\n", (int)r);]])
    assert.truthy(out:find("two: 1 launch: kernel 'one' runs on the grid {1, 1, 1} only (its kernel_spec.grid), got {2, 1, 1}", 1, true), out)
    assert.truthy(out:find("one: 0", 1, true), out)
  end)
end)

describe("an exported kernel that declares its sizes", function()
  it("refuses a size outside them, as k:launch does (stand-in driver)", function()
    need_fake()
    local out = exported_host("pt", [[
local tl = require "tilua"
local k = tl.kernel("pt", { params = { { "out", tl.ptr(tl.i32) }, { "n", tl.i32 } }, block = 64,
                            sizes = { n = "grid_threads" } })
k:define(function(_, p) (p.out + (tl.block_id() * 64 + tl.thread_id())):store(p.n) end)
k:compile()
]], [[
  tilua_dim3 two = {2, 1, 1};
  CUresult r = pt_launch(0, two, 0, 100);
  printf("wrong: %d %s\n", (int)r, r ? tilua_last_error() : "");
  r = pt_launch(0, two, 0, 128);
  printf("right: %d\n", (int)r);]])
    assert.truthy(out:find("wrong: 1 launch: kernel 'pt' takes n = the grid's threads (128: its kernel_spec.sizes), got 100", 1, true), out)
    assert.truthy(out:find("right: 0", 1, true), out)
  end)
end)

describe("tilua export", function()
  it("runs a script and writes every kernel it compiled, also after a stop (no GPU)", function()
    local d = tmpdir()
    local out, err, code = H.tilua_env({ TILUA_LIBCUDA = "/nonexistent/libcuda.so.1", [NO_CHECK] = "1" },
      { "export", "-o", d, "--no-cubin", "examples/tile_gemm_softmax.lua" }, 120)
    assert.equal(0, code, err)
    assert.truthy(out:find("SKIP: no GPU", 1, true), out)
    assert.truthy(out:find("tilua export: 1 kernel and the runtime (tilua_export.c) in " .. d, 1, true), out)
    local c = H.slurp(d .. "/tile_gemm_softmax.c")
    assert.truthy(c and c:find("tilua_kernel tile_gemm_softmax_kernel = {\"tile_gemm_softmax\", (const char *)ptx, NULL, 0,", 1, true))
  end)

  it("says what is wrong: no kernel compiled, no directory, a failing script", function()
    local d = tmpdir()
    local script = d .. "/none.lua"
    local f = assert(io.open(script, "w"))
    f:write 'local tl = require "tilua"\nprint("nothing")\n'
    f:close()
    local _, err, code = H.tilua_run { "export", "-o", d .. "/out", script }
    assert.equal(1, code)
    assert.truthy(err:find("compiled no kernel", 1, true), err)
    _, err, code = H.tilua_run { "export", script }
    assert.equal(1, code)
    assert.truthy(err:find("needs -o DIR and a script", 1, true), err)
    f = assert(io.open(script, "w"))
    f:write 'local tl = require "tilua"\nerror("broken")\n'
    f:close()
    _, err, code = H.tilua_run { "export", "-o", d .. "/out", script }
    assert.equal(1, code)
    assert.truthy(err:find("none.lua:2: broken", 1, true), err)
  end)
end)
