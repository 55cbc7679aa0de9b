/*
** l_device.c -- Lua bindings of the CUDA runtime (src/cuda): the device, device
** buffers, PTX modules, launches and event timing. lua/tilua/gpu/device.lua builds
** tl.device and Kernel:launch on these.
**
** One runtime per process, initialized at the first call that needs it; where
** there is no GPU every such call raises "no GPU: <why>" at the user's line
** while core.device_available() answers false. A sentinel userdata in the
** registry shuts the runtime down when the state closes.
**
** Buffers and modules are userdata created empty (no resource) before the
** device memory or module is attached; __gc and __close free them once.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../cuda/cuda_rt.h"
#include "lbind.h"
#include "ldevice.h"

#define SENTINEL "tilua.cuda_runtime"
#define CHUNK ((size_t)64 << 20) /* host staging for fills and compares */

static TlcuRuntime rt;
static int rt_tried;

typedef struct Buffer {
  CUdeviceptr ptr;
  size_t bytes;
  int live; /* device memory attached */
} Buffer;

/* {======================================================================
** The runtime
** ======================================================================= */

static int sentinel_gc(lua_State *L) {
  (void)L;
  tlcu_shutdown(&rt);
  return 0;
}

#define LAUNCH_TIMEOUT 10.0 /* seconds a kernel may run (TILUA_LAUNCH_TIMEOUT; 0: no limit) */

/* Initialize once (TILUA_DEVICE picks the ordinal, TILUA_LAUNCH_TIMEOUT the
** seconds a launch may run); true when a GPU is ready. */
static int ensure(lua_State *L) {
  if (!rt_tried) {
    rt_tried = 1;
    const char *ord = getenv("TILUA_DEVICE"), *to = getenv("TILUA_LAUNCH_TIMEOUT");
    tlcu_init(&rt, ord ? atoi(ord) : 0);
    tlcu_set_timeout(&rt, to && *to ? strtod(to, NULL) : LAUNCH_TIMEOUT);
    lua_newuserdatauv(L, 1, 0);
    lua_newtable(L);
    lua_pushcfunction(L, sentinel_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    lua_setfield(L, LUA_REGISTRYINDEX, SENTINEL);
  }
  return tlcu_ready(&rt);
}

/* Raise "no GPU: ..." unless the runtime is ready. */
static void need_gpu(lua_State *L) {
  if (!ensure(L)) lb_error(L, "no GPU: %s", tlcu_error(&rt));
}

TlcuRuntime *lb_cuda(lua_State *L) {
  need_gpu(L);
  return &rt;
}

CUdeviceptr lb_buffer_address(lua_State *L, int idx, size_t *bytes) {
  Buffer *b = luaL_testudata(L, idx, LB_BUFFER);
  if (b) {
    if (!b->live) lb_error(L, "attempt to use a freed device buffer");
    if (bytes) *bytes = b->bytes;
    return b->ptr;
  }
  if (bytes) *bytes = 0;
  return lua_isinteger(L, idx) ? (CUdeviceptr)lua_tointeger(L, idx) : 0;
}

/* Raise the runtime's last error, prefixed by what was being done; a report
** of a kernel that hung or failed names the launch's own line and goes as is. */
int lb_cuda_error(lua_State *L, const char *what) {
  if (tlcu_kernel_report(&rt)) {
    lua_pushstring(L, tlcu_error(&rt));
    return lua_error(L);
  }
  return lb_error(L, "%s: %s", what, tlcu_error(&rt));
}

/* core.device_available() -> boolean */
static int dev_available(lua_State *L) {
  lua_pushboolean(L, ensure(L));
  return 1;
}

/* core.device_error() -> why there is no GPU ("" when there is one) */
static int dev_error(lua_State *L) {
  lua_pushstring(L, ensure(L) ? "" : tlcu_error(&rt));
  return 1;
}

/* TlcuDeviceInfo and TlcuFuncInfo as tables: X-lists of their members. */
#define DEVICE_MEMBERS(I, B)                                                                       \
  I(ordinal) I(sm_count) I(cc_major) I(cc_minor) I(smem_optin) I(total_mem) I(driver_version)
#define FUNCTION_MEMBERS(I, B) I(num_regs) I(local_bytes) I(static_smem) I(max_threads)

/* core.device_info() -> {name, ordinal, sm_count, cc_major, cc_minor, smem_optin, total_mem,
 * driver_version} */
static int dev_info(lua_State *L) {
  need_gpu(L);
  TlcuDeviceInfo r;
  if (tlcu_device_info(&rt, &r) != TLCU_OK) return lb_cuda_error(L, "device info");
  lua_createtable(L, 0, 8);
  lb_set_str(L, "name", r.name);
  DEVICE_MEMBERS(LB_SET_INT_MEMBER, LB_SET_BOOL_MEMBER)
  return 1;
}

/* core.device_synchronize(): waits for the device; raises launch failures. */
static int dev_synchronize(lua_State *L) {
  need_gpu(L);
  if (tlcu_synchronize(&rt) != TLCU_OK) return lb_cuda_error(L, "synchronize");
  return 0;
}

/* }====================================================================== */

/* {======================================================================
** Buffers
** ======================================================================= */

static Buffer *check_buffer(lua_State *L, int idx) {
  Buffer *b = luaL_checkudata(L, idx, LB_BUFFER);
  if (!b->live) lb_error(L, "attempt to use a freed device buffer");
  return b;
}

/* core.buffer_alloc(bytes) -> Buffer (zero bytes give an empty buffer) */
static int buf_alloc(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  if (n < 0) return lb_error(L, "cannot allocate %lld bytes", (long long)n);
  need_gpu(L);
  Buffer *b = lua_newuserdatauv(L, sizeof *b, 0);
  b->ptr = 0;
  b->bytes = 0;
  b->live = 0;
  luaL_setmetatable(L, LB_BUFFER);
  if (n > 0 && tlcu_mem_alloc(&rt, (size_t)n, &b->ptr) != TLCU_OK)
    return lb_cuda_error(L, "device alloc");
  b->bytes = (size_t)n;
  b->live = 1;
  return 1;
}

static int buf_free(lua_State *L) {
  Buffer *b = luaL_checkudata(L, 1, LB_BUFFER);
  if (b->live && b->ptr) tlcu_mem_free(&rt, b->ptr);
  b->live = 0;
  b->ptr = 0;
  return 0;
}

static int buf_bytes(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)check_buffer(L, 1)->bytes);
  return 1;
}

static int buf_address(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)check_buffer(L, 1)->ptr);
  return 1;
}

/* A byte range [off, off+n) of b from optional arguments at idx, idx+1. */
static size_t range(lua_State *L, Buffer *b, int idx, size_t *off) {
  lua_Integer o = luaL_optinteger(L, idx, 0);
  lua_Integer n = luaL_optinteger(L, idx + 1, (lua_Integer)b->bytes - o);
  if (o < 0 || n < 0 || (size_t)o > b->bytes || (size_t)n > b->bytes - (size_t)o)
    lb_error(L, "byte range [%lld, %lld) is outside a buffer of %lld bytes", (long long)o,
             (long long)(o + n), (long long)b->bytes);
  *off = (size_t)o;
  return (size_t)n;
}

/* buf:upload(string [, offset]) */
static int buf_upload(lua_State *L) {
  Buffer *b = check_buffer(L, 1);
  size_t len, off = (size_t)luaL_optinteger(L, 3, 0);
  const char *s = luaL_checklstring(L, 2, &len);
  if (off > b->bytes || len > b->bytes - off)
    return lb_error(L, "%lld bytes at offset %lld do not fit a buffer of %lld bytes",
                    (long long)len, (long long)off, (long long)b->bytes);
  if (len && tlcu_memcpy_htod(&rt, b->ptr + off, s, len) != TLCU_OK)
    return lb_cuda_error(L, "upload");
  return 0;
}

/* buf:download([offset [, bytes]]) -> string */
static int buf_download(lua_State *L) {
  Buffer *b = check_buffer(L, 1);
  size_t off, n = range(L, b, 2, &off);
  luaL_Buffer lb;
  char *p = luaL_buffinitsize(L, &lb, n ? n : 1);
  if (n && tlcu_memcpy_dtoh(&rt, p, b->ptr + off, n) != TLCU_OK)
    return lb_cuda_error(L, "download");
  luaL_pushresultsize(&lb, n);
  return 1;
}

/* buf:copy_from(other [, bytes]): device to device */
static int buf_copy_from(lua_State *L) {
  Buffer *d = check_buffer(L, 1), *s = check_buffer(L, 2);
  lua_Integer n = luaL_optinteger(L, 3, (lua_Integer)(s->bytes < d->bytes ? s->bytes : d->bytes));
  if (n < 0 || (size_t)n > d->bytes || (size_t)n > s->bytes)
    return lb_error(L, "copy of %lld bytes does not fit", (long long)n);
  if (n && tlcu_memcpy_dtod(&rt, d->ptr, s->ptr, (size_t)n) != TLCU_OK)
    return lb_cuda_error(L, "copy");
  return 0;
}

/* buf:memset(byte) */
static int buf_memset(lua_State *L) {
  Buffer *b = check_buffer(L, 1);
  lua_Integer v = luaL_checkinteger(L, 2);
  if (b->bytes && tlcu_memset_d8(&rt, b->ptr, (unsigned char)v, b->bytes) != TLCU_OK)
    return lb_cuda_error(L, "memset");
  return 0;
}

/* One or two (b != NULL) host staging areas of CHUNK bytes; the caller frees them. */
static void staging(lua_State *L, unsigned char **a, unsigned char **b) {
  *a = malloc(CHUNK);
  if (b) *b = malloc(CHUNK);
  if (*a && (!b || *b)) return;
  free(*a);
  if (b) free(*b);
  lb_error(L, "out of host memory");
}

/* buf:equals(other) -> boolean, first differing byte offset (compared in chunks on the host) */
static int buf_equals(lua_State *L) {
  Buffer *x = check_buffer(L, 1), *y = check_buffer(L, 2);
  if (x->bytes != y->bytes) {
    lua_pushboolean(L, 0);
    return 1;
  }
  unsigned char *a, *b;
  staging(L, &a, &b);
  size_t at = 0;
  int same = 1, err = 0;
  for (; at < x->bytes && same && !err; at += CHUNK) {
    size_t n = x->bytes - at < CHUNK ? x->bytes - at : CHUNK;
    err = tlcu_memcpy_dtoh(&rt, a, x->ptr + at, n) != TLCU_OK ||
          tlcu_memcpy_dtoh(&rt, b, y->ptr + at, n) != TLCU_OK;
    if (!err && memcmp(a, b, n) != 0) {
      same = 0;
      size_t i = 0;
      while (a[i] == b[i])
        i++;
      at += i;
      break;
    }
  }
  free(a);
  free(b);
  if (err) return lb_cuda_error(L, "compare");
  lua_pushboolean(L, same);
  if (same) return 1;
  lua_pushinteger(L, (lua_Integer)at);
  return 2;
}

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545F4914F6CDD1DULL;
}

/* One random element of `kind` into p: "bits" (uniform bytes), or a float in
** [-1, 1) with 16 random mantissa bits ("f16", "bf16": 8; exact in each type). */
static size_t put_random(unsigned char *p, const char *kind, uint64_t *s) {
  uint64_t r = rng_next(s);
  double v = (double)(int64_t)(r >> 48) / 32768.0 - 1.0;
  if (kind[0] == 'f' && kind[1] == '3') {
    float f = (float)v;
    memcpy(p, &f, 4);
    return 4;
  }
  if (kind[0] == 'f' && kind[1] == '6') {
    memcpy(p, &v, 8);
    return 8;
  }
  if (kind[0] == 'e') {
    /* fp8 e4m3 / e5m2: finite, |v| in [0.25, 4): sign, 2 exponent bits, 3 or 2 mantissa bits */
    unsigned sg = (unsigned)(r >> 63) << 7, e = (unsigned)(r >> 56) & 3, m = (unsigned)(r >> 48);
    *p = kind[1] == '4' ? (unsigned char)(sg | (e + 5) << 3 | (m & 7))
                        : (unsigned char)(sg | (e + 13) << 2 | (m & 3));
    return 1;
  }
  if (kind[0] == 'f' || kind[0] == 'b') { /* f16 / bf16 from 8 bits: k/128 - 1 */
    int k = (int)(r >> 56);
    float f = (float)k / 128.0f - 1.0f;
    uint32_t x;
    memcpy(&x, &f, 4);
    uint16_t h;
    if (kind[0] == 'b') {
      h = (uint16_t)(x >> 16);
    } else if (f == 0.0f) {
      h = 0;
    } else { /* normal halves: |f| >= 2^-7 */
      uint32_t sign = (x >> 16) & 0x8000, e = ((x >> 23) & 0xFF) - 127 + 15;
      h = (uint16_t)(sign | (e << 10) | ((x & 0x7FFFFF) >> 13));
    }
    memcpy(p, &h, 2);
    return 2;
  }
  memcpy(p, &r, 8);
  return 8;
}

/* core.buffer_fill_random(buf, kind, seed): kind "bits", "f16", "bf16", "f32", "f64" */
static int buf_fill_random(lua_State *L) {
  Buffer *b = check_buffer(L, 1);
  const char *kind = luaL_checkstring(L, 2);
  uint64_t s = (uint64_t)luaL_checkinteger(L, 3) * 0x9E3779B97F4A7C15ULL + 1;
  size_t esize = !strcmp(kind, "f32")                               ? 4
                 : (!strcmp(kind, "f16") || !strcmp(kind, "bf16"))  ? 2
                 : (!strcmp(kind, "e4m3") || !strcmp(kind, "e5m2")) ? 1
                                                                    : 8;
  unsigned char *a;
  staging(L, &a, NULL);
  int err = 0;
  for (size_t at = 0; at < b->bytes && !err; at += CHUNK) {
    size_t n = b->bytes - at < CHUNK ? b->bytes - at : CHUNK, k = 0;
    while (k + esize <= n)
      k += put_random(a + k, kind, &s);
    while (k < n)
      a[k++] = (unsigned char)rng_next(&s);
    err = tlcu_memcpy_htod(&rt, b->ptr + at, a, n) != TLCU_OK;
  }
  free(a);
  if (err) return lb_cuda_error(L, "random fill");
  return 0;
}

/* }====================================================================== */

/* {======================================================================
** Modules, functions, launches, timing
** ======================================================================= */

typedef struct Module {
  CUmodule mod;
  int live;
} Module;

/* core.module_load(ptx) -> Module; the JIT error log is in the message on failure. */
static int mod_load(lua_State *L) {
  const char *ptx = luaL_checkstring(L, 1);
  need_gpu(L);
  Module *m = lua_newuserdatauv(L, sizeof *m, 0);
  m->mod = NULL;
  m->live = 0;
  luaL_setmetatable(L, LB_MODULE);
  if (tlcu_module_load_ptx(&rt, ptx, &m->mod) != TLCU_OK)
    return lb_cuda_error(L, "loading the PTX");
  m->live = 1;
  return 1;
}

static int mod_unload(lua_State *L) {
  Module *m = luaL_checkudata(L, 1, LB_MODULE);
  if (m->live) tlcu_module_unload(&rt, m->mod);
  m->live = 0;
  return 0;
}

/* mod:func(name) -> Function (keeps its module alive as user value 1) */
static int mod_func(lua_State *L) {
  Module *m = luaL_checkudata(L, 1, LB_MODULE);
  const char *name = luaL_checkstring(L, 2);
  if (!m->live) return lb_error(L, "attempt to use an unloaded module");
  CUfunction *f = lua_newuserdatauv(L, sizeof *f, 1);
  *f = NULL;
  luaL_setmetatable(L, LB_FUNCTION);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
  if (tlcu_function_get(&rt, m->mod, name, f) != TLCU_OK) return lb_cuda_error(L, "kernel lookup");
  return 1;
}

/* fn:info() -> {num_regs, local_bytes, static_smem, max_threads} */
static int fn_info(lua_State *L) {
  CUfunction *f = luaL_checkudata(L, 1, LB_FUNCTION);
  TlcuFuncInfo r;
  if (!*f || tlcu_function_info(&rt, *f, &r) != TLCU_OK) return lb_cuda_error(L, "function info");
  lua_createtable(L, 0, 4);
  FUNCTION_MEMBERS(LB_SET_INT_MEMBER, LB_SET_BOOL_MEMBER)
  return 1;
}

static void get_dims(lua_State *L, int cfg, const char *key, unsigned int d[3]) {
  d[0] = d[1] = d[2] = 1;
  lua_getfield(L, cfg, key);
  for (int i = 0; i < 3 && lua_istable(L, -1); i++) {
    lua_geti(L, -1, i + 1);
    lua_Integer v = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 1;
    if (v < 1 || v > 0x7fffffff)
      lb_error(L, "launch: %s[%d] = %lld is out of range", key, i + 1, (long long)v);
    d[i] = (unsigned int)v;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

/* One argument {type, value} into an 8-byte slot. Types: ptr (a Buffer or an
** address), i1 i8 i16 i32 i64 (integers), f32 f64 (numbers), b16 (16 bits given as an integer). */
static void pack_arg(lua_State *L, int i, uint64_t *slot) {
  lua_rawgeti(L, -1, 1);
  const char *t = lua_tostring(L, -1);
  lua_rawgeti(L, -2, 2);
  *slot = 0;
  if (!t) lb_error(L, "launch: argument #%d has no type", i);
  else if (!strcmp(t, "tmap")) {
    const uint8_t *m = lb_tensor_map_bytes(L, -1);
    if (!m) lb_error(L, "launch: argument #%d must be a tensor map", i);
    *slot = (uint64_t)(uintptr_t)m; /* fn_launch passes the 128 bytes themselves */
  } else if (!strcmp(t, "ptr")) {
    Buffer *b = luaL_testudata(L, -1, LB_BUFFER);
    if (b && !b->live) lb_error(L, "launch: argument #%d is a freed buffer", i);
    if (!b && !lua_isinteger(L, -1))
      lb_error(L, "launch: argument #%d must be a device buffer or an address", i);
    *slot = b ? (uint64_t)b->ptr : (uint64_t)lua_tointeger(L, -1);
  } else if (!strcmp(t, "f32")) {
    float f = (float)luaL_checknumber(L, -1);
    memcpy(slot, &f, 4);
  } else if (!strcmp(t, "f64")) {
    double d = luaL_checknumber(L, -1);
    memcpy(slot, &d, 8);
  } else {
    if (!lua_isinteger(L, -1)) lb_error(L, "launch: argument #%d (%s) must be an integer", i, t);
    uint64_t v = (uint64_t)lua_tointeger(L, -1);
    memcpy(slot, &v, 8); /* little endian: the low bytes are the narrow value */
  }
  lua_pop(L, 2);
}

/* The debug-hangs records of a launch when cfg (at index 2) asks for them
** (hang_sites): one slot per warp of the grid. */
static TlcuHang *hang_records(lua_State *L, const TlcuLaunch *cfg) {
  if (lua_getfield(L, 2, "hang_sites") != LUA_TSTRING) {
    lua_pop(L, 1);
    return NULL;
  }
  const char *sites = lua_tostring(L, -1);
  unsigned threads = cfg->block[0] * cfg->block[1] * cfg->block[2], warps = (threads + 31) / 32;
  size_t slots = (size_t)cfg->grid[0] * cfg->grid[1] * cfg->grid[2] * warps;
  TlcuHang *h = NULL;
  if (tlcu_hang_alloc(&rt, slots, warps, sites, &h) != TLCU_OK) lb_cuda_error(L, "launch");
  lua_pop(L, 1);
  return h;
}

static const char *opt_field(lua_State *L, int idx, const char *k) {
  lua_getfield(L, idx, k);
  const char *s = lua_tostring(L, -1); /* stays alive in the table */
  lua_pop(L, 1);
  return s;
}

/* core.launch(fn, {grid=, block=, cluster=, smem=, name=, where=, hang_sites=},
** { {type, value}, ... }): name and where (the script's line) go into the
** reports of a kernel that hangs or fails; hang_sites (the lowered kernel's
** debug-hangs sites) adds the records' address as the last argument. */
static int fn_launch(lua_State *L) {
  CUfunction *f = luaL_checkudata(L, 1, LB_FUNCTION);
  luaL_checktype(L, 2, LUA_TTABLE);
  luaL_checktype(L, 3, LUA_TTABLE);
  need_gpu(L);
  TlcuLaunch cfg;
  memset(&cfg, 0, sizeof cfg);
  get_dims(L, 2, "grid", cfg.grid);
  get_dims(L, 2, "block", cfg.block);
  get_dims(L, 2, "cluster", cfg.cluster);
  lua_getfield(L, 2, "smem");
  cfg.smem = (unsigned int)luaL_optinteger(L, -1, 0);
  lua_pop(L, 1);
  cfg.name = opt_field(L, 2, "name");
  cfg.where = opt_field(L, 2, "where");
  int n = (int)luaL_len(L, 3);
  if (n > 63) return lb_error(L, "launch: too many arguments (%d)", n);
  uint64_t slots[64];
  void *ptrs[64];
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, 3, i + 1);
    if (!lua_istable(L, -1))
      return lb_error(L, "launch: argument #%d must be {type, value}", i + 1);
    pack_arg(L, i + 1, &slots[i]);
    lua_rawgeti(L, -1, 1);
    bool map = lua_type(L, -1) == LUA_TSTRING && !strcmp(lua_tostring(L, -1), "tmap");
    lua_pop(L, 2);
    ptrs[i] = map ? (void *)(uintptr_t)slots[i] : &slots[i];
  }
  cfg.hang = hang_records(L, &cfg); /* last: nothing after it raises before the launch takes it */
  if (cfg.hang) {
    slots[n] = (uint64_t)cfg.hang->dev;
    ptrs[n] = &slots[n];
  }
  if (tlcu_launch(&rt, *f, &cfg, ptrs) != TLCU_OK) return lb_cuda_error(L, "launch");
  return 0;
}

/* core.device_time(fn) -> milliseconds between events recorded around fn() */
static int dev_time(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  need_gpu(L);
  CUevent a = NULL, b = NULL;
  if (tlcu_event_create(&rt, &a) != TLCU_OK || tlcu_event_create(&rt, &b) != TLCU_OK) {
    if (a) tlcu_event_destroy(&rt, a);
    return lb_cuda_error(L, "event");
  }
  float ms = 0;
  int bad = tlcu_event_record(&rt, a, NULL) != TLCU_OK;
  lua_pushvalue(L, 1);
  int st = bad ? LUA_OK : lua_pcall(L, 0, 0, 0);
  if (!bad && st == LUA_OK)
    bad = tlcu_event_record(&rt, b, NULL) != TLCU_OK || tlcu_event_synchronize(&rt, b) != TLCU_OK ||
          tlcu_event_elapsed_ms(&rt, a, b, &ms) != TLCU_OK;
  if (bad) lua_pushfstring(L, "timing: %s", tlcu_error(&rt));
  tlcu_event_destroy(&rt, a);
  tlcu_event_destroy(&rt, b);
  if (bad || st != LUA_OK) return lua_error(L);
  lua_pushnumber(L, ms);
  return 1;
}

/* }====================================================================== */

static const luaL_Reg buffer_methods[] = {
    {"bytes", buf_bytes},         {"address", buf_address},
    {"upload", buf_upload},       {"download", buf_download},
    {"copy_from", buf_copy_from}, {"memset", buf_memset},
    {"equals", buf_equals},       {"fill_random", buf_fill_random},
    {"free", buf_free},           {NULL, NULL}};
static const luaL_Reg buffer_meta[] = {{"__gc", buf_free}, {"__close", buf_free}, {NULL, NULL}};
static const luaL_Reg module_methods[] = {{"func", mod_func}, {"unload", mod_unload}, {NULL, NULL}};
static const luaL_Reg module_meta[] = {{"__gc", mod_unload}, {"__close", mod_unload}, {NULL, NULL}};
static const luaL_Reg function_methods[] = {{"info", fn_info}, {"launch", fn_launch}, {NULL, NULL}};

static const luaL_Reg device_functions[] = {
    {"device_available", dev_available}, {"device_error", dev_error},
    {"device_info", dev_info},           {"device_synchronize", dev_synchronize},
    {"device_time", dev_time},           {"buffer_alloc", buf_alloc},
    {"module_load", mod_load},           {NULL, NULL}};

static const LbClass device_classes[] = {{LB_BUFFER, buffer_meta, buffer_methods},
                                         {LB_MODULE, module_meta, module_methods},
                                         {LB_FUNCTION, NULL, function_methods},
                                         {NULL, NULL, NULL}};
const LbArea lb_area_device = {device_classes, device_functions};
