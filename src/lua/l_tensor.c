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
**   core.blas_gemm{m, n, k, a, b, d, c?, a_major?, b_major?, in?, out?, alpha?, beta?, fast_accum?}
**
** A TensorMap is a userdata holding the 64-byte aligned CUtensorMap and its
** description; it owns no device resource.
*/
#include <limits.h>
#include <string.h>

#include "../cuda/blas.h"
#include "ldevice.h"

typedef struct TensorMap {
  uint8_t raw[128 + 64]; /* the map sits at the first 64-byte boundary inside */
  char dtype[8];
  int elem_bytes, rank, swizzle;
  int64_t shape[5], strides[5], box[5]; /* outermost first, strides in elements */
} TensorMap;

static uint8_t *map_bytes(TensorMap *t) {
  return (uint8_t *)(((uintptr_t)t->raw + 63) & ~(uintptr_t)63);
}

const uint8_t *lb_tensor_map_bytes(lua_State *L, int idx) {
  TensorMap *t = luaL_testudata(L, idx, LB_TENSOR_MAP);
  return t ? map_bytes(t) : NULL;
}

/* The integers of the list field `key` (outermost first) into v; their count. */
static int int_list(lua_State *L, int idx, const char *key, int64_t *v, int max, bool need) {
  lua_getfield(L, idx, key);
  if (lua_isnil(L, -1) && !need) return lua_pop(L, 1), 0;
  if (!lua_istable(L, -1)) lb_error(L, "tensor_map: '%s' must be a list of integers", key);
  int n = (int)luaL_len(L, -1);
  if (n < 1 || n > max)
    lb_error(L, "tensor_map: '%s' has %d entries, expected 1 to %d", key, n, max);
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

/* core.tensor_map{...} -> TensorMap */
static int tm_new(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  TensorMap *t = lua_newuserdatauv(L, sizeof *t, 0);
  memset(t, 0, sizeof *t);
  luaL_setmetatable(L, LB_TENSOR_MAP);
  TltmSpec s;
  memset(&s, 0, sizeof s);
  lua_getfield(L, 1, "dtype");
  s.dtype = lua_tostring(L, -1); /* stays alive in the table */
  lua_pop(L, 1);
  int code;
  t->elem_bytes = tltm_dtype(s.dtype, &code);
  if (!t->elem_bytes) lb_error(L, "tensor_map: unknown dtype '%s'", s.dtype ? s.dtype : "(none)");
  snprintf(t->dtype, sizeof t->dtype, "%s", s.dtype);
  s.rank = t->rank = int_list(L, 1, "shape", s.shape, 5, true);
  if (int_list(L, 1, "box", s.box, 5, true) != t->rank)
    lb_error(L, "tensor_map: box and shape have different ranks");
  int ns = int_list(L, 1, "strides", s.strides, 5, false);
  int ne = int_list(L, 1, "element_strides", s.element_strides, 5, false);
  if (ns && ns != t->rank) lb_error(L, "tensor_map: strides and shape have different ranks");
  if (ne && ne != t->rank)
    lb_error(L, "tensor_map: element_strides and shape have different ranks");
  s.swizzle = (int)lb_opt_int_field(L, 1, "swizzle", 0, INT_MIN, INT_MAX, "tensor_map");
  s.l2 = (int)lb_opt_int_field(L, 1, "l2", TLTM_L2_DEFAULT, INT_MIN, INT_MAX, "tensor_map");
  lua_getfield(L, 1, "oob");
  const char *oob = luaL_optstring(L, -1, "zero");
  if (strcmp(oob, "zero") && strcmp(oob, "nan"))
    lb_error(L, "tensor_map: oob must be \"zero\" or \"nan\"");
  s.oob = oob[0] == 'n' ? 1 : TLTM_OOB_ZERO;
  lua_pop(L, 1);
  lua_getfield(L, 1, "address");
  s.address = lb_buffer_address(L, -1, &s.buffer_bytes);
  if (!s.address)
    lb_error(L, "tensor_map: 'address' must be a device buffer or a non-zero address");
  if (lua_isinteger(L, -1)) /* a bare address: its extent, if the caller knows it */
    s.buffer_bytes = (size_t)lb_opt_int_field(L, 1, "bytes", 0, 0, INT64_MAX, "tensor_map");
  lua_pop(L, 1);
  lua_getfield(L, 1, "encode");
  bool encode = lua_isnil(L, -1) || lua_toboolean(L, -1);
  lua_pop(L, 1);
  TltmDesc d;
  char err[256];
  if (tltm_describe(&s, &d, err, sizeof err)) lb_error(L, "%s", err);
  t->swizzle = s.swizzle;
  memcpy(t->shape, s.shape, sizeof t->shape);
  memcpy(t->strides, s.strides, sizeof t->strides);
  memcpy(t->box, s.box, sizeof t->box);
  if (!encode) return 1; /* described and checked only (the emulated device) */
  TlcuRuntime *rt = lb_cuda(L);
  if (tlcu_tensor_map_encode(rt, map_bytes(t), &d) != TLCU_OK)
    return lb_error(L, "tensor_map: %s", tlcu_error(rt));
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

/* core.blas_gemm{m, n, k, a, b, d, c?, a_major = "k"|"m", b_major = "k"|"n", in, out, alpha, beta,
** fast_accum = false (fp8: cuBLASLt's promoted accumulation; fast by default)} */
static int blas_gemm(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  TlcuRuntime *rt = lb_cuda(L);
  TlBlasGemm g;
  memset(&g, 0, sizeof g);
  g.m = opt_int(L, 1, "m", 0), g.n = opt_int(L, 1, "n", 0), g.k = opt_int(L, 1, "k", 0);
  if (g.m < 1 || g.n < 1 || g.k < 1) return lb_error(L, "blas_gemm: m, n and k must be positive");
  g.a = buffer_field(L, "a", true), g.b = buffer_field(L, "b", true),
  g.d = buffer_field(L, "d", true);
  g.c = buffer_field(L, "c", false);
  g.a_kmajor = strcmp(str_field(L, "a_major", "k"), "k") == 0;
  g.b_kmajor = strcmp(str_field(L, "b_major", "k"), "k") == 0;
  g.in = str_field(L, "in", "bf16"), g.out = str_field(L, "out", "bf16");
  lua_getfield(L, 1, "alpha");
  g.alpha = (float)luaL_optnumber(L, -1, 1.0);
  lua_getfield(L, 1, "beta");
  g.beta = (float)luaL_optnumber(L, -1, 0.0);
  lua_getfield(L, 1, "fast_accum");
  g.split_accum = lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1);
  lua_pop(L, 3);
  char err[256];
  if (tlblas_gemm(rt, &g, err, sizeof err)) return lb_error(L, "blas_gemm: %s", err);
  return 0;
}

static const luaL_Reg tm_methods[] = {{"info", tm_info}, {"bytes", tm_bytes}, {NULL, NULL}};
static const luaL_Reg tensor_functions[] = {{"tensor_map", tm_new},
                                            {"blas_available", blas_available},
                                            {"blas_gemm", blas_gemm},
                                            {NULL, NULL}};

static const LbClass tensor_classes[] = {{LB_TENSOR_MAP, NULL, tm_methods}, {NULL, NULL, NULL}};
const LbArea lb_area_tensor = {tensor_classes, tensor_functions};
