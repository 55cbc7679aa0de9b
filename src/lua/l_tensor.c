/*
** l_tensor.c -- Lua bindings of TMA tensor maps and of the cuBLASLt peer.
**
**   core.tensor_map{address, dtype, shape, strides?, box, swizzle?, l2?, oob?,
**                   element_strides?, bytes?, encode?} -> TensorMap
**       shape, strides (in elements) and box list dimensions outermost first;
**       every rule of cuTensorMapEncodeTiled is checked here first, so a bad
**       map is an error at the script's line, not a driver status. An address
**       given as a number spans `bytes` (0: unknown); encode = false checks
**       and describes the map without the driver (the emulator's maps,
**       tilua.gpu.emulated: no GPU needed).
**   TensorMap:info() -> {dtype, elem_bytes, rank, shape, strides, box, swizzle}
**   TensorMap:bytes() -> the 128 encoded bytes (a string)
**   core.blas_available() -> true | false, why
**   core.blas_gemm{m, n, k, a, b, d, c?, a_major?, b_major?, in?, out?, alpha?, beta?}
**
** A TensorMap is a userdata holding the 64-byte aligned CUtensorMap and its
** description; it owns no device resource.
*/
#include <string.h>

#include "../cuda/blas.h"
#include "ldevice.h"

typedef struct TensorMap {
  uint8_t raw[128 + 64]; /* the map sits at the first 64-byte boundary inside */
  char dtype[8];
  int elem_bytes, rank, swizzle;
  int64_t shape[5], strides[5], box[5]; /* outermost first, strides in elements */
} TensorMap;

static uint8_t *map_bytes(TensorMap *t) { return (uint8_t *)(((uintptr_t)t->raw + 63) & ~(uintptr_t)63); }

const uint8_t *lb_tensor_map_bytes(lua_State *L, int idx) {
  TensorMap *t = luaL_testudata(L, idx, LB_TENSOR_MAP);
  return t ? map_bytes(t) : NULL;
}

/* CUtensorMapDataType by tilua element name (fp8 travels as bytes). */
static const struct {
  const char *name;
  int code, bytes;
} dtypes[] = {{"u8", 0, 1},   {"i8", 0, 1},   {"e4m3", 0, 1}, {"e5m2", 0, 1}, {"u16", 1, 2},  {"i16", 1, 2},
              {"u32", 2, 4},  {"i32", 3, 4},  {"u64", 4, 8},  {"i64", 5, 8},  {"f16", 6, 2},  {"f32", 7, 4},
              {"f64", 8, 8},  {"bf16", 9, 2}, {"tf32", 11, 4}, {NULL, 0, 0}};

/* The integers of the list field `key` (outermost first) into v; their count. */
static int int_list(lua_State *L, int idx, const char *key, int64_t *v, int max, bool need) {
  lua_getfield(L, idx, key);
  if (lua_isnil(L, -1) && !need) return lua_pop(L, 1), 0;
  if (!lua_istable(L, -1)) lb_error(L, "tensor_map: '%s' must be a list of integers", key);
  int n = (int)luaL_len(L, -1);
  if (n < 1 || n > max) lb_error(L, "tensor_map: '%s' has %d entries, expected 1 to %d", key, n, max);
  for (int i = 0; i < n; i++) {
    lua_geti(L, -1, i + 1);
    if (!lua_isinteger(L, -1)) lb_error(L, "tensor_map: %s[%d] must be an integer", key, i + 1);
    v[i] = lua_tointeger(L, -1);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return n;
}

static lua_Integer opt_int(lua_State *L, int idx, const char *key, lua_Integer dflt) {
  return lb_opt_int_field(L, idx, key, dflt, LUA_MININTEGER, LUA_MAXINTEGER, "tensor_map");
}

/* Fill the driver's description (innermost first) from t, checking the rules. */
static void describe(lua_State *L, TensorMap *t, CUdeviceptr addr, size_t buf_bytes, int code, int l2, int oob,
                     const int64_t *es, TlcuTensorMapDesc *d) {
  int r = t->rank, eb = t->elem_bytes;
  if (addr % 16) lb_error(L, "tensor_map: the address 0x%llx is not 16-byte aligned", (unsigned long long)addr);
  memset(d, 0, sizeof *d);
  d->dtype = code, d->rank = (unsigned)r, d->address = addr, d->l2_promotion = l2, d->oob_fill = oob;
  d->swizzle = t->swizzle == 0 ? 0 : t->swizzle == 32 ? 1 : t->swizzle == 64 ? 2 : 3;
  uint64_t extent = (uint64_t)eb;
  for (int i = 0; i < r; i++) { /* i counts from the innermost dimension */
    int o = r - 1 - i;
    int64_t n = t->shape[o], b = t->box[o], st = t->strides[o];
    if (n < 1 || n > ((int64_t)1 << 32)) lb_error(L, "tensor_map: shape[%d] = %lld is out of range [1, 2^32]", o + 1, (long long)n);
    if (b < 1 || b > 256) lb_error(L, "tensor_map: box[%d] = %lld is out of range [1, 256]", o + 1, (long long)b);
    if (es[o] < 1 || es[o] > 8)
      lb_error(L, "tensor_map: element_strides[%d] = %lld is out of range [1, 8]", o + 1, (long long)es[o]);
    if (i == 0 && st != 1) lb_error(L, "tensor_map: the innermost dimension must be contiguous (stride 1), got %lld", (long long)st);
    if (i > 0) {
      int64_t bytes = st * eb;
      if (st < 1 || bytes % 16 || bytes >= ((int64_t)1 << 40))
        lb_error(L, "tensor_map: strides[%d] = %lld elements is %lld bytes, not a positive multiple of 16 below 2^40",
                 o + 1, (long long)st, (long long)bytes);
      d->strides[i - 1] = (uint64_t)bytes;
    }
    d->dims[i] = (uint64_t)n, d->box[i] = (uint32_t)b, d->elem_strides[i] = (uint32_t)es[o];
    extent += (uint64_t)(n - 1) * (uint64_t)st * (uint64_t)eb;
  }
  int64_t inner = t->box[r - 1] * eb;
  if (inner % 16) lb_error(L, "tensor_map: the innermost box is %lld bytes, not a multiple of 16", (long long)inner);
  if (t->swizzle && inner > t->swizzle)
    lb_error(L, "tensor_map: the innermost box is %lld bytes, more than the %d-byte swizzle span", (long long)inner,
             t->swizzle);
  if (buf_bytes && extent > buf_bytes)
    lb_error(L, "tensor_map: the tensor spans %llu bytes, more than the buffer's %zu", (unsigned long long)extent,
             buf_bytes);
}

/* core.tensor_map{...} -> TensorMap */
static int tm_new(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  TensorMap *t = lua_newuserdatauv(L, sizeof *t, 0);
  memset(t, 0, sizeof *t);
  luaL_setmetatable(L, LB_TENSOR_MAP);
  lua_getfield(L, 1, "dtype");
  const char *dt = lua_tostring(L, -1);
  int code = -1;
  for (int i = 0; dt && dtypes[i].name; i++)
    if (!strcmp(dtypes[i].name, dt)) code = dtypes[i].code, t->elem_bytes = dtypes[i].bytes;
  if (code < 0) lb_error(L, "tensor_map: unknown dtype '%s'", dt ? dt : "(none)");
  snprintf(t->dtype, sizeof t->dtype, "%s", dt);
  lua_pop(L, 1);
  t->rank = int_list(L, 1, "shape", t->shape, 5, true);
  if (int_list(L, 1, "box", t->box, 5, true) != t->rank) lb_error(L, "tensor_map: box and shape have different ranks");
  int64_t es[5] = {1, 1, 1, 1, 1};
  int ns = int_list(L, 1, "strides", t->strides, 5, false), ne = int_list(L, 1, "element_strides", es, 5, false);
  if (ns && ns != t->rank) lb_error(L, "tensor_map: strides and shape have different ranks");
  if (ne && ne != t->rank) lb_error(L, "tensor_map: element_strides and shape have different ranks");
  if (!ns) { /* contiguous, row-major */
    t->strides[t->rank - 1] = 1;
    for (int o = t->rank - 2; o >= 0; o--)
      if (__builtin_mul_overflow(t->strides[o + 1], t->shape[o + 1], &t->strides[o]))
        lb_error(L, "tensor_map: the shape is too large");
  }
  t->swizzle = (int)opt_int(L, 1, "swizzle", 0);
  if (t->swizzle != 0 && t->swizzle != 32 && t->swizzle != 64 && t->swizzle != 128)
    lb_error(L, "tensor_map: swizzle %d is not one of 0, 32, 64, 128 (bytes)", t->swizzle);
  lua_Integer l2 = opt_int(L, 1, "l2", 256);
  int l2code = l2 == 0 ? 0 : l2 == 64 ? 1 : l2 == 128 ? 2 : l2 == 256 ? 3 : -1;
  if (l2code < 0) lb_error(L, "tensor_map: l2 promotion %lld is not one of 0, 64, 128, 256", (long long)l2);
  lua_getfield(L, 1, "oob");
  const char *oob = luaL_optstring(L, -1, "zero");
  if (strcmp(oob, "zero") && strcmp(oob, "nan")) lb_error(L, "tensor_map: oob must be \"zero\" or \"nan\"");
  int oobcode = oob[0] == 'n';
  lua_pop(L, 1);
  lua_getfield(L, 1, "address");
  size_t bytes = 0;
  CUdeviceptr addr = lb_buffer_address(L, -1, &bytes);
  if (!addr) lb_error(L, "tensor_map: 'address' must be a device buffer or a non-zero address");
  if (lua_isinteger(L, -1)) bytes = (size_t)opt_int(L, 1, "bytes", 0);
  lua_pop(L, 1);
  lua_getfield(L, 1, "encode");
  bool encode = lua_isnil(L, -1) || lua_toboolean(L, -1);
  lua_pop(L, 1);
  TlcuTensorMapDesc d;
  describe(L, t, addr, bytes, code, l2code, oobcode, es, &d);
  if (!encode) return 1;
  TlcuRuntime *rt = lb_cuda(L);
  if (tlcu_tensor_map_encode(rt, map_bytes(t), &d) != TLCU_OK) return lb_error(L, "tensor_map: %s", tlcu_error(rt));
  return 1;
}

static void set_list(lua_State *L, const char *k, const int64_t *v, int n) {
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushinteger(L, v[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, -2, k);
}

/* TensorMap:info() -> {dtype, elem_bytes, rank, shape, strides, box, swizzle} */
static int tm_info(lua_State *L) {
  TensorMap *t = luaL_checkudata(L, 1, LB_TENSOR_MAP);
  lua_createtable(L, 0, 7);
  lb_set_str(L, "dtype", t->dtype);
  lb_set_int(L, "elem_bytes", t->elem_bytes);
  lb_set_int(L, "rank", t->rank);
  lb_set_int(L, "swizzle", t->swizzle);
  set_list(L, "shape", t->shape, t->rank);
  set_list(L, "strides", t->strides, t->rank);
  set_list(L, "box", t->box, t->rank);
  return 1;
}

static int tm_bytes(lua_State *L) {
  TensorMap *t = luaL_checkudata(L, 1, LB_TENSOR_MAP);
  lua_pushlstring(L, (const char *)map_bytes(t), 128);
  return 1;
}

/* core.blas_available() -> true | false, why */
static int blas_available(lua_State *L) {
  char why[256];
  int ok = tlblas_available(why, sizeof why);
  lua_pushboolean(L, ok);
  if (ok) return 1;
  lua_pushstring(L, why);
  return 2;
}

static CUdeviceptr buffer_field(lua_State *L, const char *k, bool need) {
  lua_getfield(L, 1, k);
  CUdeviceptr p = lua_isnil(L, -1) ? 0 : lb_buffer_address(L, -1, NULL);
  lua_pop(L, 1);
  if (need && !p) lb_error(L, "blas_gemm: '%s' must be a device buffer", k);
  return p;
}

static const char *str_field(lua_State *L, const char *k, const char *dflt) {
  lua_getfield(L, 1, k);
  const char *s = lua_isnil(L, -1) ? dflt : lua_tostring(L, -1);
  lua_pop(L, 1); /* the strings compared below are literals or stay referenced by the table */
  return s ? s : dflt;
}

/* core.blas_gemm{m, n, k, a, b, d, c?, a_major = "k"|"m", b_major = "k"|"n", in, out, alpha, beta} */
static int blas_gemm(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  TlcuRuntime *rt = lb_cuda(L);
  TlBlasGemm g;
  memset(&g, 0, sizeof g);
  g.m = opt_int(L, 1, "m", 0), g.n = opt_int(L, 1, "n", 0), g.k = opt_int(L, 1, "k", 0);
  if (g.m < 1 || g.n < 1 || g.k < 1) return lb_error(L, "blas_gemm: m, n and k must be positive");
  g.a = buffer_field(L, "a", true), g.b = buffer_field(L, "b", true), g.d = buffer_field(L, "d", true);
  g.c = buffer_field(L, "c", false);
  g.a_kmajor = strcmp(str_field(L, "a_major", "k"), "k") == 0;
  g.b_kmajor = strcmp(str_field(L, "b_major", "k"), "k") == 0;
  g.in = str_field(L, "in", "bf16"), g.out = str_field(L, "out", "bf16");
  lua_getfield(L, 1, "alpha");
  g.alpha = (float)luaL_optnumber(L, -1, 1.0);
  lua_getfield(L, 1, "beta");
  g.beta = (float)luaL_optnumber(L, -1, 0.0);
  lua_pop(L, 2);
  char err[256];
  if (tlblas_gemm(rt, &g, err, sizeof err)) return lb_error(L, "blas_gemm: %s", err);
  return 0;
}

static const luaL_Reg tm_methods[] = {{"info", tm_info}, {"bytes", tm_bytes}, {NULL, NULL}};
static const luaL_Reg tensor_functions[] = {
    {"tensor_map", tm_new}, {"blas_available", blas_available}, {"blas_gemm", blas_gemm}, {NULL, NULL}};

static const LbClass tensor_classes[] = {{LB_TENSOR_MAP, NULL, tm_methods}, {NULL, NULL, NULL}};
const LbArea lb_area_tensor = {tensor_classes, tensor_functions};
