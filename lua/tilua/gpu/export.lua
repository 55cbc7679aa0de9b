-- tilua.gpu.export: compiled kernels as C for a host without Lua or tilua
-- (`tilua export script.lua -o DIR`, tl.export; docs/embedding.md).
--
--   tl.export(dir, kernels [, {script =, cubin = true|false}]) -> the files written
--
-- kernels: a kernel, a stdlib GEMM (tl.gemm.build), or a list of them. For
-- each kernel K, DIR/K.h and DIR/K.c hold its PTX (and a cubin for sm_90a
-- when ptxas is there and `cubin` is not false), `K_launch(stream, grid,
-- ...)` with one typed argument per kernel parameter, `K_graph_set` for a
-- captured graph's node, a tensor-map encoder per tensor-map parameter, and,
-- when the kernel has a launch recipe (tilua.gpu.recipe: tile programs, the GEMM),
-- its whole launcher: `K_prepare` (every parameter and the grid from the
-- recipe's inputs), `K_run`, `K_grid`, `K_workspace_bytes`. DIR also gets the
-- runtime they share (src/export/tilua_export.{h,c} and the headers they
-- include, copied as they are with their includes renamed).
--
-- Everything the C does comes from the facts the Lua launcher uses: the
-- kernel's spec (block, cluster, shared memory: tl.launch_info), its
-- parameters' types (tensor maps: element, box, swizzle) and its recipe.

local M = {}

-- The runtime's files: where they live in the tree, the name they get in an export.
M.RUNTIME = {
  { "src/export/tilua_export.h", "tilua_export.h" },
  { "src/export/tilua_export.c", "tilua_export.c" },
  { "src/cuda/cuda_types.h", "tilua_cuda_types.h" },
  { "src/cuda/cuda_syms.def", "tilua_cuda_syms.def" },
  { "src/cuda/tensor_map.h", "tilua_tensor_map.h" },
}

local C_KEYWORDS = {}
for w in ([[auto break case char const continue default do double else enum extern float for goto if inline int
  long register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
  _Alignas _Alignof _Atomic _Bool _Complex _Generic _Imaginary _Noreturn _Static_assert _Thread_local bool true false
  stream grid graph node out map]]):gmatch "%S+" do C_KEYWORDS[w] = true end

-- A C identifier for name: other characters become '_'; C keywords, the
-- generated functions' own argument names and the tl_ prefix of their locals
-- get a trailing '_'. ("programs" and "workspace" are recipe inputs' own names.)
local function ident(name)
  local s = tostring(name):gsub("[^%w_]", "_")
  if s:match "^%d" then s = "_" .. s end
  if C_KEYWORDS[s] or s:match "^tl_" then s = s .. "_" end
  return s
end
M.ident = ident

-- A C string literal of s (for comments and messages: printable ASCII).
local function cstr(s) return '"' .. tostring(s):gsub('[\\"]', "\\%0"):gsub("[^\32-\126]", "?") .. '"' end

-- The bytes of s as the initializer of an unsigned char array, 24 a line.
local function bytes_init(s)
  local lines, n = {}, #s
  for i = 1, n, 24 do
    lines[#lines + 1] = "  " .. table.concat({ s:byte(i, math.min(i + 23, n)) }, ",") .. ","
  end
  lines[#lines + 1] = "  0"
  return table.concat(lines, "\n")
end

local tl = require "tilua" -- the library being built (init.lua registers it before its rooms)

local raise = tl.raise
local RECIPE = require "tilua.gpu.recipe"

-- {=== parameters

-- The C of a kernel parameter: {ctype (as an argument), field (in the args
-- struct), arg (how the launch passes its address), doc}.
local function param_c(p)
  local t = p.type
  local mi = tl.tensor_map_info(t)
  local name = ident(p.name)
  if mi then
    local i = t:info()
    return { name = name, ctype = "const CUtensorMap *", field = "CUtensorMap", map = mi, elem = i.params[1],
             arg = "(void *)" .. name, doc = ("tensor map: %s, box %s, swizzle %d"):format(tostring(mi.elem),
             table.concat(mi.box, " x "), mi.swizzle) }
  end
  local i = t:info()
  local c
  if i.kind == "ptr" then c = "CUdeviceptr"
  elseif i.kind == "index" then c = "int64_t"
  elseif i.kind == "int" then
    c = ({ [1] = "uint8_t", [8] = "int8_t", [16] = "int16_t", [32] = "int32_t", [64] = "int64_t" })[i.width]
  elseif i.kind == "float" then
    c = ({ [16] = "uint16_t", [32] = "float", [64] = "double" })[i.width]
  end
  if not c then raise(("export: parameter '%s' of type %s has no C form"):format(p.name, tostring(t))) end
  local doc = tostring(t) .. ((i.kind == "float" and i.width == 16) and " (its bits)" or "")
  return { name = name, ctype = c, field = c, arg = "&" .. name, doc = doc }
end

-- The dtype name tilua_tensor_map takes for a map's element type.
local function map_dtype(mi)
  local i = mi.elem:info()
  return i.name or (i.kind == "int" and ("i" .. i.width)) or tostring(mi.elem)
end

-- }===

-- {=== recipe expressions as C

-- The inputs an expression reads (names, "sms" and "clusters"), into set.
local function reads(e, set)
  if type(e) ~= "table" then return set end
  local op = e[1]
  if op == "dim" or op == "stride" then set[e[2]] = true
  elseif op == "programs" then set.programs = true
  elseif op == "sms" then set.sms = true
  elseif op == "clusters" then set.clusters = true
  else reads(e[2], set) reads(e[3], set) end
  return set
end

-- The C helpers an expression may call; `used` collects the ones it does.
local HELPERS = {
  min = "static int64_t tl_min(int64_t a, int64_t b) { return a < b ? a : b; }",
  max = "static int64_t tl_max(int64_t a, int64_t b) { return a > b ? a : b; }",
  div = "static int64_t tl_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }",
  stride = [[
/* a tensor's stride in elements (all zero: row-major) */
static int64_t tl_stride(const tilua_tensor *t, int rank, int d) {
int64_t s = 1;
for (int i = 0; i < rank; i++)
  if (t->strides[i]) return t->strides[d];
for (int i = rank - 1; i > d; i--) s *= t->shape[i];
return s;
}]],
}

local BIN = { add = "+", sub = "-", mul = "*" }
local function cexpr(e, ranks, used)
  if math.type(e) == "integer" then return ("INT64_C(%d)"):format(e) end
  local op = e[1]
  if op == "dim" then return ("%s->shape[%d]"):format(ident(e[2]), e[3]) end
  if op == "stride" then
    used.stride = true
    return ("tl_stride(%s, %d, %d)"):format(ident(e[2]), ranks[e[2]] or (e[3] + 1), e[3])
  end
  if op == "programs" then return ("(int64_t)programs.%s"):format(({ "x", "y", "z" })[e[2]]) end
  if op == "sms" then return "(int64_t)tl_sms" end
  if op == "clusters" then return "(int64_t)tl_clusters" end
  local a, b = cexpr(e[2], ranks, used), cexpr(e[3], ranks, used)
  if BIN[op] then return ("(%s %s %s)"):format(a, BIN[op], b) end
  used[op] = true
  return ("tl_%s(%s, %s)"):format(op, a, b)
end

-- }===

-- {=== one kernel

local function info_of(k)
  if getmetatable(k) ~= tl.Kernel and type(k) == "table" and k.kernel then k = k.kernel end
  if getmetatable(k) ~= tl.Kernel then raise(("export: expected a kernel or a stdlib GEMM, got %s"):format(type(k))) end
  if not k.ptx then k:compile() end
  local info = tl.launch_info(k)
  if info.hang_sites then
    raise(("export: kernel '%s' was compiled with debug-hangs (an extra parameter for its records): export it without"):format(k.name))
  end
  local recipe = info.recipe or k.recipe
  local params = info.params or k.params
  return k, info, params, recipe
end

-- The C input of a recipe: its argument declaration.
local function input_decl(input, scalar_type)
  local n = ident(input.name)
  if input.kind == "tensor" then return "const tilua_tensor *" .. n end
  if input.kind == "buffer" or input.kind == "workspace" then return "CUdeviceptr " .. n end
  if input.kind == "programs" then return "tilua_dim3 programs" end
  return scalar_type .. " " .. n
end

-- The declarations of the inputs in `set` (names), in the recipe's order.
local function decls(recipe, set, scalar_types)
  local out = {}
  for _, i in ipairs(recipe.inputs) do
    if set[i.name] then out[#out + 1] = input_decl(i, scalar_types[i.name]) end
  end
  return out
end

local function names_of(recipe, set)
  local out = {}
  for _, i in ipairs(recipe.inputs) do
    if set[i.name] then out[#out + 1] = i.kind == "programs" and "programs" or ident(i.name) end
  end
  return out
end

local function join(list, empty) return #list > 0 and table.concat(list, ", ") or (empty or "") end

-- The header and the C of kernel k, named cname.
local function kernel_files(k, cname, o)
  local _, info, params, recipe = info_of(k)
  local ps = {}
  for i, p in ipairs(params) do ps[i] = param_c(p) end
  local smem = info.static + info.smem
  local h, c = {}, {}
  local function H(s, ...) h[#h + 1] = select("#", ...) > 0 and s:format(...) or s end
  local function C(s, ...) c[#c + 1] = select("#", ...) > 0 and s:format(...) or s end
  local guard = "TILUA_EXPORT_" .. cname:upper() .. "_H"
  local typed, values = { "CUstream stream", "tilua_dim3 grid" }, {}
  for i, p in ipairs(ps) do
    typed[i + 2] = p.ctype .. (p.ctype:match "%*$" and "" or " ") .. p.name
    values[i] = p.arg
  end

  H("/* %s.h -- kernel '%s', exported by tilua%s (docs/embedding.md). */", cname, k.name,
    o.script and (" from " .. o.script) or "")
  H("#ifndef %s\n#define %s\n\n#include \"tilua_export.h\"\n", guard, guard)
  H("#ifdef __cplusplus\nextern \"C\" {\n#endif\n")
  H("/* %d threads (%d x %d x %d), clusters of %d x %d x %d CTAs, %d bytes of dynamic shared memory.",
    info.block[1] * info.block[2] * info.block[3], info.block[1], info.block[2], info.block[3],
    info.cluster[1], info.cluster[2], info.cluster[3], smem)
  H("** Parameters:")
  for _, p in ipairs(ps) do H("**   %-12s %s", p.name, p.doc) end
  H("*/\nextern tilua_kernel %s_kernel;\n", cname)
  H("/* Launch on `stream` (0: the default) with the kernel's parameters; the grid in CTAs. */")
  H("CUresult %s_launch(%s);", cname, table.concat(typed, ", "))
  H("/* Node `node` of a captured graph (this kernel): these arguments from the next replay on. */")
  local gtyped = { "tilua_graph *graph", "int node", table.unpack(typed, 2) }
  H("CUresult %s_graph_set(%s);\n", cname, table.concat(gtyped, ", "))

  C("/* %s.c -- kernel '%s', exported by tilua%s (docs/embedding.md). Generated: do not edit. */", cname, k.name,
    o.script and (" from " .. o.script) or "")
  C("#include \"%s.h\"\n", cname)
  C("static const unsigned char ptx[] = {\n%s\n};", bytes_init(k.ptx))
  if o.cubin then C("static const unsigned char cubin[] = {\n%s\n};", bytes_init(o.cubin)) end
  C("\ntilua_kernel %s_kernel = {%s, (const char *)ptx, %s, %d, 90, {%d, %d, %d}, {%d, %d, %d}, %d, %d, NULL, %d};\n",
    cname, cstr(k.name), o.cubin and "cubin" or "NULL", o.cubin and #o.cubin or 0, info.block[1], info.block[2],
    info.block[3], info.cluster[1], info.cluster[2], info.cluster[3], smem, #ps, recipe and recipe.pdl and 1 or 0)
  local plist = #ps > 0 and ("void *tl_params[] = {" .. table.concat(values, ", ") .. "};") or "void **tl_params = NULL;"
  if info.grid then -- the only grid the kernel runs on (kernel_spec.grid), checked as k:launch checks it
    local g = info.grid
    plist = ("if (grid.x != %du || grid.y != %du || grid.z != %du)\n    return tilua_fail(CUDA_ERROR_INVALID_VALUE, "
      .. "\"launch: kernel '%%s' runs on the grid {%d, %d, %d} only (its kernel_spec.grid), got {%%u, %%u, %%u}\", %s, "
      .. "grid.x, grid.y, grid.z);\n  %s"):format(g[1], g[2], g[3], g[1], g[2], g[3], cstr(k.name), plist)
  end
  for i, p in ipairs(params) do -- the sizes the kernel accepts (kernel_spec.sizes), checked as k:launch checks them
    local rel = info.sizes and not recipe and info.sizes[p.name]
    if rel then
      local per = rel == "grid_threads" and info.block[1] * info.block[2] * info.block[3] or 1
      plist = ("{\n    long long tl_want = (long long)grid.x * grid.y * grid.z * %d;\n    if ((long long)%s != tl_want)\n"
        .. "      return tilua_fail(CUDA_ERROR_INVALID_VALUE, \"launch: kernel '%%s' takes %s = the grid's %s (%%lld: its "
        .. "kernel_spec.sizes), got %%lld\", %s, tl_want, (long long)%s);\n  }\n  %s"):format(per, ps[i].name, p.name,
        rel == "grid_threads" and "threads" or "CTAs", cstr(k.name), ps[i].name, plist)
    end
  end
  C("CUresult %s_launch(%s) {\n  %s\n  return tilua_launch(&%s_kernel, stream, grid, tl_params);\n}\n", cname,
    table.concat(typed, ", "), plist, cname)
  C("CUresult %s_graph_set(%s) {\n  %s\n  return tilua_graph_set(graph, node, &%s_kernel, grid, tl_params);\n}\n",
    cname, table.concat(gtyped, ", "), plist, cname)

  if not recipe then -- tensor maps from a base address, shape and strides the caller gives
    for _, p in ipairs(ps) do
      if p.map then
        local sig = ("CUresult %s_map_%s(CUtensorMap *map, CUdeviceptr base, const int64_t *shape, const int64_t *strides)")
          :format(cname, p.name)
        H("/* The tensor map of %s (%s): shape and strides (elements; NULL: row-major) outermost first. */", p.name, p.doc)
        H("%s;", sig)
        C("%s {\n  static const int64_t tl_box[] = {%s};\n  return tilua_tensor_map(map, %s, %d, base, shape, strides, tl_box, %d);\n}\n",
          sig, table.concat(p.map.box, ", "), cstr(map_dtype(p.map)), p.map.rank, p.map.swizzle)
      end
    end
  else
    M.recipe_c(cname, k, recipe, ps, H, C)
  end
  H("#ifdef __cplusplus\n}\n#endif\n\n#endif")
  return table.concat(h, "\n") .. "\n", table.concat(c, "\n") .. "\n"
end

-- The launcher of a recipe: map encoders, grid, workspace size, prepare, run.
function M.recipe_c(cname, k, recipe, ps, H, C0)
  local body, used = {}, {}
  local function C(f, ...) body[#body + 1] = select("#", ...) > 0 and f:format(...) or f end
  local function cexpr_(e, ranks) return cexpr(e, ranks, used) end
  local ranks, scalar_types, kinds = {}, {}, {}
  for _, i in ipairs(recipe.inputs) do ranks[i.name], kinds[i.name] = i.rank, i.kind end
  for n, fill in ipairs(recipe.args) do
    if fill[1] == "scalar" then scalar_types[fill[2]] = ps[n].ctype end
    if fill[1] == "map" and kinds[fill[2]] == "tensor" then ranks[fill[2]] = ps[n].map.rank end
  end
  -- The C that reads what the expressions of `set` read of the device into
  -- tl_sms (its SMs) and tl_clusters (the kernel's clusters resident at once:
  -- a persistent grid on clusters); `declare`: tl_r is declared here.
  local function device_reads(set, declare)
    local out = {}
    if declare and (set.sms or set.clusters) then out[#out + 1] = "  CUresult tl_r = CUDA_SUCCESS;" end
    if set.sms then
      out[#out + 1] = "  int tl_sms = 0;\n  if ((tl_r = tilua_sm_count(&tl_sms)) != CUDA_SUCCESS) return tl_r;"
    end
    if set.clusters then
      out[#out + 1] = ("  int tl_clusters = 0;\n  if ((tl_r = tilua_max_active_clusters(&%s_kernel, &tl_clusters)) != CUDA_SUCCESS) return tl_r;")
        :format(cname)
    end
    return #out > 0 and table.concat(out, "\n") or nil
  end

  -- the grid
  local gset = {}
  for d = 1, 3 do reads(recipe.grid[d] or 1, gset) end
  local gdecl = decls(recipe, gset, scalar_types)
  H("/* {=== its launcher (the launch recipe tilua's own launcher runs) */\n")
  H("/* The grid (CTAs) of a launch. */")
  H("CUresult %s_grid(%s);", cname, join({ "tilua_dim3 *grid", table.unpack(gdecl) }))
  C("CUresult %s_grid(%s) {", cname, join({ "tilua_dim3 *grid", table.unpack(gdecl) }))
  local grid_reads = device_reads(gset, true)
  if grid_reads then C(grid_reads) end
  local gx = {}
  for d = 1, 3 do gx[d] = cexpr_(recipe.grid[d] or 1, ranks) end
  C("  int64_t tl_x = %s, tl_y = %s, tl_z = %s;", gx[1], gx[2], gx[3])
  C("  if (tl_x < 1 || tl_y < 1 || tl_z < 1 || tl_x > 0x7fffffff || tl_y > 0xffff || tl_z > 0xffff)")
  C("    return tilua_fail(CUDA_ERROR_INVALID_VALUE, \"%s: grid %%lld x %%lld x %%lld is out of range\", (long long)tl_x, (long long)tl_y, (long long)tl_z);", cname)
  C("  grid->x = (unsigned)tl_x, grid->y = (unsigned)tl_y, grid->z = (unsigned)tl_z;\n  return CUDA_SUCCESS;\n}\n")

  -- the workspace
  if recipe.workspace then
    local wset = reads(recipe.workspace, {})
    assert(not wset.sms, "a workspace size that reads the SM count")
    local wdecl = decls(recipe, wset, scalar_types)
    H("/* Bytes of the workspace `run` and `prepare` take: zeroed device memory, kept for later launches. */")
    H("size_t %s_workspace_bytes(%s);", cname, join(wdecl, "void"))
    C("size_t %s_workspace_bytes(%s) {\n  int64_t tl_n = %s;\n  return (size_t)(tl_n < 4 ? 4 : tl_n);\n}\n", cname,
      join(wdecl, "void"), cexpr_(recipe.workspace, ranks))
  end

  -- one encoder per tensor-map parameter
  for n, fill in ipairs(recipe.args) do
    if fill[1] == "map" then
      local p, src = ps[n], fill[2]
      local set = { [src] = true }
      for _, e in ipairs(fill.shape or {}) do reads(e, set) end
      local d = decls(recipe, set, scalar_types)
      H("/* The tensor map of parameter %s (%s) over %s. */", p.name, p.doc, src)
      H("CUresult %s_map_%s(%s);", cname, p.name, join({ "CUtensorMap *map", table.unpack(d) }))
      C("CUresult %s_map_%s(%s) {\n  static const int64_t tl_box[] = {%s};", cname, p.name,
        join({ "CUtensorMap *map", table.unpack(d) }), table.concat(p.map.box, ", "))
      if fill.shape then
        local sh = {}
        for i, e in ipairs(fill.shape) do sh[i] = cexpr_(e, ranks) end
        C("  const int64_t tl_shape[] = {%s};", table.concat(sh, ", "))
        C("  return tilua_tensor_map(map, %s, %d, %s, tl_shape, NULL, tl_box, %d);\n}\n", cstr(map_dtype(p.map)), p.map.rank,
          ident(src), p.map.swizzle)
      else
        C("  return tilua_tensor_map(map, %s, %d, %s->base, %s->shape, %s->strides, tl_box, %d);\n}\n",
          cstr(map_dtype(p.map)), p.map.rank, ident(src), ident(src), ident(src), p.map.swizzle)
      end
    end
  end

  -- prepare: every parameter and the grid; launch_args, graph_set_args, run
  local all = {}
  for _, i in ipairs(recipe.inputs) do all[i.name] = true end
  local adecl, anames = decls(recipe, all, scalar_types), names_of(recipe, all)
  H("/* Every parameter of a launch and its grid, as the launcher computes them. */")
  H("typedef struct %s_args {\n  tilua_dim3 grid;", cname)
  for _, p in ipairs(ps) do H("  %s %s;", p.field, p.name) end
  H("} %s_args;", cname)
  H("CUresult %s_prepare(%s);", cname, join({ cname .. "_args *out", table.unpack(adecl) }))
  H("CUresult %s_launch_args(CUstream stream, const %s_args *args);", cname, cname)
  H("CUresult %s_graph_set_args(tilua_graph *graph, int node, const %s_args *args);", cname, cname)
  H("/* prepare, then launch_args. */")
  H("CUresult %s_run(%s);", cname, join({ "CUstream stream", table.unpack(adecl) }))
  H("/* }=== */\n")

  C("CUresult %s_prepare(%s) {\n  CUresult tl_r = CUDA_SUCCESS;", cname, join({ cname .. "_args *out", table.unpack(adecl) }))
  for _, chk in ipairs(recipe.checks or {}) do
    local w, on_values = chk[2], RECIPE.CHECKS[chk[1]]
    if on_values then
      assert(not reads(chk[2], reads(chk[3], {})).sms, "a recipe check that reads the SM count")
      local x, y = cexpr_(chk[2], ranks), cexpr_(chk[3], ranks)
      C("  if (%s)", on_values.fails:format(x, y))
      C("    return tilua_fail(CUDA_ERROR_INVALID_VALUE, \"launch: %%s is %%lld%%s%%lld\", %s, (long long)%s, %s, (long long)%s);",
        cstr(chk[4]), x, cstr(on_values.says), y)
      goto continue
    end
    if chk[1] == "flat_z" then
      C("  if (programs.z > 1u)")
      C("    return tilua_fail(CUDA_ERROR_INVALID_VALUE, \"launch: %%s does not read program_id(\\\"z\\\"): a grid of programs with z = %%u would run each of its programs %%u times\", %s, programs.z, programs.z);",
        cstr(w))
      goto continue
    end
    C("  if (programs.x != %du || programs.y != %du || programs.z != %du)", w[1], w[2], w[3] or 1)
    C("    return tilua_fail(CUDA_ERROR_INVALID_VALUE, \"launch: %%s was planned for a grid of programs {%d, %d}, got {%%u, %%u, %%u}\", %s, programs.x, programs.y, programs.z);",
      w[1], w[2], cstr(chk[3]))
    ::continue::
  end
  local aset = {} -- (what the int arguments read)
  for _, fill in ipairs(recipe.args) do if fill[1] == "int" then reads(fill[2], aset) end end
  local arg_reads = device_reads(aset, false)
  if arg_reads then C(arg_reads) end
  for n, fill in ipairs(recipe.args) do
    local p, kind = ps[n], fill[1]
    if kind == "map" then
      local set = { [fill[2]] = true }
      for _, e in ipairs(fill.shape or {}) do reads(e, set) end
      C("  if ((tl_r = %s_map_%s(%s)) != CUDA_SUCCESS) return tl_r;", cname, p.name,
        join({ "&out->" .. p.name, table.unpack(names_of(recipe, set)) }))
    elseif kind == "ptr" then
      C("  out->%s = %s%s;", p.name, ident(fill[2]), kinds[fill[2]] == "tensor" and "->base" or "")
    elseif kind == "int" then
      C("  out->%s = (%s)%s;", p.name, p.ctype, cexpr_(fill[2], ranks))
    elseif kind == "scalar" then
      C("  out->%s = %s;", p.name, ident(fill[2]))
    else
      C("  out->%s = workspace;", p.name)
    end
  end
  C("  (void)tl_r;\n  return %s_grid(%s);\n}\n", cname, join({ "&out->grid", table.unpack(names_of(recipe, gset)) }))
  local avals = {}
  for i, p in ipairs(ps) do avals[i] = "(void *)&args->" .. p.name end
  local alist = #ps > 0 and ("void *tl_params[] = {" .. table.concat(avals, ", ") .. "};") or "void **tl_params = NULL;"
  C("CUresult %s_launch_args(CUstream stream, const %s_args *args) {\n  %s\n  return tilua_launch(&%s_kernel, stream, args->grid, tl_params);\n}\n",
    cname, cname, alist, cname)
  C("CUresult %s_graph_set_args(tilua_graph *graph, int node, const %s_args *args) {\n  %s\n  return tilua_graph_set(graph, node, &%s_kernel, args->grid, tl_params);\n}\n",
    cname, cname, alist, cname)
  C("CUresult %s_run(%s) {\n  %s_args tl_args;\n  CUresult tl_r = %s_prepare(%s);\n  return tl_r == CUDA_SUCCESS ? %s_launch_args(stream, &tl_args) : tl_r;\n}",
    cname, join({ "CUstream stream", table.unpack(adecl) }), cname, cname, join({ "&tl_args", table.unpack(anames) }), cname)
  for _, op in ipairs { "min", "max", "div", "stride" } do if used[op] then C0(HELPERS[op]) end end
  C0("")
  for _, line in ipairs(body) do C0(line) end
end

-- }===

-- {=== tl.export

local function write(path, text)
  local f, err = io.open(path, "wb")
  if not f then raise(("export: cannot write %s"):format(err)) end
  f:write(text)
  f:close()
end

-- The runtime file as it goes into an export: its includes of the other
-- runtime files renamed.
local function runtime_text(src)
  local text = assert(tl.core.embedded_file(src))
  for _, r in ipairs(M.RUNTIME) do
    local base = r[1]:match "[^/]+$"
    text = text:gsub('#include "[%./%w_]*' .. base:gsub("%p", "%%%0") .. '"', '#include "' .. r[2] .. '"')
  end
  return text
end

-- A cubin of the PTX for sm_90a, or nil when ptxas is not there.
local function cubin_of(ptx)
  local out = os.tmpname()
  local ok = tl.ptxas(ptx, "sm_90a", out)
  local data
  if ok then
    local f = io.open(out, "rb")
    if f then data = f:read "a" f:close() end
  elseif ok == false then
    os.remove(out)
    raise("export: ptxas rejected the PTX")
  end
  os.remove(out)
  return data ~= "" and data or nil
end

function tl.export(dir, kernels, o)
  o = o or {}
  if type(dir) ~= "string" or dir == "" then raise("export: expected a directory name") end
  if type(kernels) ~= "table" then raise("export: expected a kernel or a list of kernels") end
  if getmetatable(kernels) == tl.Kernel or kernels.kernel then kernels = { kernels } end
  for _, k in ipairs(kernels) do info_of(k) end -- every kernel can be written before anything is
  os.execute(("mkdir -p '%s' 2>/dev/null"):format(dir:gsub("'", "'\\''")))
  local files, names = {}, {}
  for _, r in ipairs(M.RUNTIME) do
    write(dir .. "/" .. r[2], runtime_text(r[1]))
    files[#files + 1] = dir .. "/" .. r[2]
  end
  for _, kk in ipairs(kernels) do
    local k = info_of(kk)
    local cname = ident(k.name)
    if names[cname] then
      local n = 2
      while names[cname .. "_" .. n] do n = n + 1 end
      cname = cname .. "_" .. n
    end
    names[cname] = true
    local cubin = o.cubin ~= false and cubin_of(k.ptx) or nil
    local h, c = kernel_files(k, cname, { script = o.script, cubin = cubin })
    write(("%s/%s.h"):format(dir, cname), h)
    write(("%s/%s.c"):format(dir, cname), c)
    files[#files + 1] = ("%s/%s.h"):format(dir, cname)
    files[#files + 1] = ("%s/%s.c"):format(dir, cname)
  end
  return files
end

-- }===

return M
