/*
** l_device.c -- Lua bindings of the CUDA runtime (src/cuda): the devices, device
** buffers, PTX modules, launches and event timing. lua/tilua/gpu/device.lua builds
** tl.device and Kernel:launch on these.
**
** Each Lua state has its own runtimes (two states on two threads never share
** one): one per device it uses, each initialized at the first call that needs
** it; where there is no GPU every such call raises "no GPU: <why>" at the
** user's line while core.device_available() answers false. A sentinel
** userdata in the registry holds them and shuts them down when the state
** closes.
**
** Buffers and modules are userdata created empty (no resource) before the
** device memory or module is attached; __gc and __close free them once.
*/
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../cuda/cuda_rt.h"
#include "../dialects/sm90_limits.h"
#include "lbind.h"
#include "ldevice.h"

#define SENTINEL "tilua.cuda_runtime"
#define CHUNK ((size_t)64 << 20) /* host staging for fills and compares */

/* The devices of a Lua state (the sentinel userdata; user value i + 1 holds
** device i's runtime, a userdata of its own). `cur` is the device new buffers,
** modules, streams and events go to (tl.device.use). Each runtime makes its
** own context current before every call (cuda_rt.c). */
typedef struct Devices {
  TlcuRuntime *rt[LB_MAX_DEVICES]; /* NULL until the device's first use */
  int cur; /* the current device: TILUA_DEVICE (default 0) until tl.device.use */
} Devices;

typedef LbBuffer Buffer;

/* {======================================================================
** The runtimes
** ======================================================================= */

static int sentinel_gc(lua_State *L) {
  Devices *d = lua_touserdata(L, 1);
  for (int i = 0; i < LB_MAX_DEVICES; i++)
    if (d->rt[i]) tlcu_shutdown(d->rt[i]);
  return 0;
}

#define LAUNCH_TIMEOUT 10.0 /* seconds a kernel may run (TILUA_LAUNCH_TIMEOUT; 0: no limit) */

/* Push the state's sentinel, made at the first call (TILUA_DEVICE picks the
** current device). */
static Devices *push_devices(lua_State *L) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, SENTINEL) == LUA_TUSERDATA) return lua_touserdata(L, -1);
  lua_pop(L, 1);
  Devices *d = lua_newuserdatauv(L, sizeof *d, LB_MAX_DEVICES);
  memset(d, 0, sizeof *d);
  const char *ord = getenv("TILUA_DEVICE");
  d->cur = ord ? atoi(ord) : 0;
  if (d->cur < 0 || d->cur >= LB_MAX_DEVICES) d->cur = 0;
  lua_newtable(L);
  lua_pushcfunction(L, sentinel_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, SENTINEL);
  return d;
}

static Devices *devices(lua_State *L) {
  Devices *d = push_devices(L);
  lua_pop(L, 1);
  return d;
}

/* The runtime of device `ordinal` (0 .. LB_MAX_DEVICES-1), initialized at its
** first use (TILUA_LAUNCH_TIMEOUT: the seconds a launch may run). */
static TlcuRuntime *device(lua_State *L, int ordinal) {
  Devices *d = push_devices(L);
  if (!d->rt[ordinal]) {
    TlcuRuntime *rt = lua_newuserdatauv(L, sizeof *rt, 0);
    memset(rt, 0, sizeof *rt);
    lua_setiuservalue(L, -2, ordinal + 1);
    d->rt[ordinal] = rt;
    const char *to = getenv("TILUA_LAUNCH_TIMEOUT");
    tlcu_init(rt, ordinal);
    tlcu_set_timeout(rt, to && *to ? strtod(to, NULL) : LAUNCH_TIMEOUT);
  }
  lua_pop(L, 1);
  return d->rt[ordinal];
}

/* The current device's runtime, initialized at its first use. */
static TlcuRuntime *runtime(lua_State *L) { return device(L, devices(L)->cur); }

/* True when a GPU is ready. */
static int ensure(lua_State *L) { return tlcu_ready(runtime(L)); }

/* Raise "no GPU: ..." unless the runtime is ready. */
static void need_gpu(lua_State *L) {
  if (!ensure(L)) lb_error(L, "no GPU: %s", tlcu_error(runtime(L)));
}

TlcuRuntime *lb_cuda(lua_State *L) {
  need_gpu(L);
  return runtime(L);
}

TlcuRuntime *lb_cuda_runtime(lua_State *L) {
  TlcuRuntime *rt = NULL;
  if (lua_getfield(L, LUA_REGISTRYINDEX, SENTINEL) == LUA_TUSERDATA) {
    Devices *d = lua_touserdata(L, -1);
    rt = d->rt[d->cur];
  }
  lua_pop(L, 1);
  return rt;
}

const int *lb_current_device(lua_State *L) { return &devices(L)->cur; }

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
int lb_cuda_error(lua_State *L, const char *what) { return lb_cuda_error_of(L, runtime(L), what); }

int lb_cuda_error_of(lua_State *L, TlcuRuntime *r, const char *what) {
  if (tlcu_kernel_report(r)) {
    lua_pushstring(L, tlcu_error(r));
    return lua_error(L);
  }
  return lb_error(L, "%s: %s", what, tlcu_error(r));
}

/* core.device_available() -> boolean */
static int dev_available(lua_State *L) {
  lua_pushboolean(L, ensure(L));
  return 1;
}

/* core.device_error() -> why there is no GPU ("" when there is one) */
static int dev_error(lua_State *L) {
  lua_pushstring(L, ensure(L) ? "" : tlcu_error(runtime(L)));
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
  TlcuRuntime *d = lua_isnoneornil(L, 1) ? runtime(L) : lb_device(L, 1);
  TlcuDeviceInfo r;
  if (tlcu_device_info(d, &r) != TLCU_OK) return lb_cuda_error_of(L, d, "device info");
  lua_createtable(L, 0, 8);
  lb_set_str(L, "name", r.name);
  DEVICE_MEMBERS(LB_SET_INT_MEMBER, LB_SET_BOOL_MEMBER)
  return 1;
}

/* core.device_synchronize(): waits for every device in use; raises launch failures. */
static int dev_synchronize(lua_State *L) {
  need_gpu(L);
  Devices *d = devices(L);
  for (int i = 0; i < LB_MAX_DEVICES; i++)
    if (d->rt[i] && tlcu_ready(d->rt[i]) && tlcu_synchronize(d->rt[i]) != TLCU_OK)
      return lb_cuda_error_of(L, d->rt[i], "synchronize");
  return 0;
}

TlcuRuntime *lb_device(lua_State *L, int idx) {
  lua_Integer o = luaL_checkinteger(L, idx);
  need_gpu(L);
  int n = 0;
  if (tlcu_device_count(runtime(L), &n) != TLCU_OK) lb_cuda_error(L, "device count");
  if (o < 0 || o >= n || o >= LB_MAX_DEVICES)
    lb_error(L, "device %lld does not exist (the driver sees %d: 0..%d)", (long long)o, n, n - 1);
  TlcuRuntime *d = device(L, (int)o);
  if (!tlcu_ready(d)) lb_error(L, "device %lld: %s", (long long)o, tlcu_error(d));
  return d;
}

/* core.device_use(ordinal) -> the device current before: new buffers, modules,
** streams and events go to `ordinal` from now on */
static int dev_use(lua_State *L) {
  lb_device(L, 1);
  Devices *d = devices(L);
  lua_pushinteger(L, d->cur);
  d->cur = (int)lua_tointeger(L, 1);
  return 1;
}

/* core.device_current() -> the current device's ordinal */
static int dev_current(lua_State *L) {
  need_gpu(L);
  lua_pushinteger(L, devices(L)->cur);
  return 1;
}

/* core.device_peer(a, b) -> true | false, why: device a reaches b's memory from now on */
static int dev_peer(lua_State *L) {
  TlcuRuntime *a = lb_device(L, 1), *b = lb_device(L, 2);
  int can = 0;
  if (a == b) return lua_pushboolean(L, 1), 1;
  if (tlcu_peer_can_access(a, b, &can) != TLCU_OK) return lb_cuda_error_of(L, a, "peer access");
  if (!can) {
    lua_pushboolean(L, 0);
    lua_pushfstring(L, "device %d cannot reach device %d's memory directly",
                    (int)lua_tointeger(L, 1), (int)lua_tointeger(L, 2));
    return 2;
  }
  if (tlcu_peer_enable(a, b) != TLCU_OK) return lb_cuda_error_of(L, a, "peer access");
  lua_pushboolean(L, 1);
  return 1;
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
  b->rt = runtime(L);
  b->device = devices(L)->cur;
  luaL_setmetatable(L, LB_BUFFER);
  if (n > 0 && tlcu_mem_alloc(b->rt, (size_t)n, &b->ptr) != TLCU_OK)
    return lb_cuda_error(L, "device alloc");
  b->bytes = (size_t)n;
  b->live = 1;
  return 1;
}

static _Atomic unsigned buffer_frees;
unsigned lb_buffer_frees(void) { return atomic_load_explicit(&buffer_frees, memory_order_relaxed); }

static int buf_free(lua_State *L) {
  Buffer *b = luaL_checkudata(L, 1, LB_BUFFER);
  if (b->live && b->ptr) tlcu_mem_free(b->rt, b->ptr);
  if (b->live) atomic_fetch_add_explicit(&buffer_frees, 1, memory_order_relaxed);
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

/* raw:device() -> the ordinal of the device that holds it */
static int buf_device(lua_State *L) {
  lua_pushinteger(L, check_buffer(L, 1)->device);
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
  if (len && tlcu_memcpy_htod(b->rt, b->ptr + off, s, len) != TLCU_OK)
    return lb_cuda_error_of(L, b->rt, "upload");
  return 0;
}

/* buf:download([offset [, bytes]]) -> string */
static int buf_download(lua_State *L) {
  Buffer *b = check_buffer(L, 1);
  size_t off, n = range(L, b, 2, &off);
  luaL_Buffer lb;
  char *p = luaL_buffinitsize(L, &lb, n ? n : 1);
  if (n && tlcu_memcpy_dtoh(b->rt, p, b->ptr + off, n) != TLCU_OK)
    return lb_cuda_error_of(L, b->rt, "download");
  luaL_pushresultsize(&lb, n);
  return 1;
}

/* buf:copy_from(other [, bytes]): device to device */
static int buf_copy_from(lua_State *L) {
  Buffer *d = check_buffer(L, 1), *s = check_buffer(L, 2);
  lua_Integer n = luaL_optinteger(L, 3, (lua_Integer)(s->bytes < d->bytes ? s->bytes : d->bytes));
  if (n < 0 || (size_t)n > d->bytes || (size_t)n > s->bytes)
    return lb_error(L, "copy of %lld bytes does not fit", (long long)n);
  /* between devices: the source's launches finish first, the copy goes peer to peer (UVA) */
  if (n && s->rt != d->rt && tlcu_finish(s->rt) != TLCU_OK)
    return lb_cuda_error_of(L, s->rt, "copy");
  if (n && tlcu_memcpy_dtod(d->rt, d->ptr, s->ptr, (size_t)n) != TLCU_OK)
    return lb_cuda_error_of(L, d->rt, "copy");
  return 0;
}

/* buf:memset(byte) */
static int buf_memset(lua_State *L) {
  Buffer *b = check_buffer(L, 1);
  lua_Integer v = luaL_checkinteger(L, 2);
  if (b->bytes && tlcu_memset_d8(b->rt, b->ptr, (unsigned char)v, b->bytes) != TLCU_OK)
    return lb_cuda_error_of(L, b->rt, "memset");
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
    err = tlcu_memcpy_dtoh(x->rt, a, x->ptr + at, n) != TLCU_OK ||
          tlcu_memcpy_dtoh(y->rt, b, y->ptr + at, n) != TLCU_OK;
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
  if (!strcmp(kind, "f16") ||
      !strcmp(kind, "bf16")) { /* from 8 bits: k/128 - 1 ("bits" is not bf16) */
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
    err = tlcu_memcpy_htod(b->rt, b->ptr + at, a, n) != TLCU_OK;
  }
  free(a);
  if (err) return lb_cuda_error_of(L, b->rt, "random fill");
  return 0;
}

/* }====================================================================== */

/* {======================================================================
** Modules, functions, launches, timing
** ======================================================================= */

typedef struct Module {
  CUmodule mod;
  int live;
  TlcuRuntime *rt; /* the device it was loaded on */
} Module;

/* core.module_load(ptx) -> Module; the JIT error log is in the message on failure. */
static int mod_load(lua_State *L) {
  const char *ptx = luaL_checkstring(L, 1);
  need_gpu(L);
  TlcuRuntime *d = lua_isnoneornil(L, 2) ? runtime(L) : lb_device(L, 2);
  Module *m = lua_newuserdatauv(L, sizeof *m, 0);
  m->mod = NULL;
  m->live = 0;
  m->rt = d;
  luaL_setmetatable(L, LB_MODULE);
  if (tlcu_module_load_ptx(d, ptx, &m->mod) != TLCU_OK)
    return lb_cuda_error_of(L, d, "loading the PTX");
  m->live = 1;
  return 1;
}

static int mod_unload(lua_State *L) {
  Module *m = luaL_checkudata(L, 1, LB_MODULE);
  if (m->live) tlcu_module_unload(m->rt, m->mod);
  m->live = 0;
  return 0;
}

/* mod:func(name) -> Function (keeps its module alive as user value 1) */
static int mod_func(lua_State *L) {
  Module *m = luaL_checkudata(L, 1, LB_MODULE);
  size_t len;
  const char *name = luaL_checklstring(L, 2, &len);
  if (!m->live) return lb_error(L, "attempt to use an unloaded module");
  if (strlen(name) != len) /* the driver would see the name up to its NUL: another kernel */
    return lb_error(L, "kernel lookup: the name has a NUL byte at %d", (int)strlen(name) + 1);
  LbFunction *f = lua_newuserdatauv(L, sizeof *f, 1);
  f->fn = NULL;
  f->smem_allowed = 0;
  luaL_setmetatable(L, LB_FUNCTION);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
  if (tlcu_function_get(m->rt, m->mod, name, &f->fn) != TLCU_OK)
    return lb_cuda_error_of(L, m->rt, "kernel lookup");
  return 1;
}

TlcuRuntime *lb_function_runtime(lua_State *L, int idx) {
  lua_getiuservalue(L, idx, 1);
  Module *m = luaL_testudata(L, -1, LB_MODULE);
  lua_pop(L, 1);
  return m ? m->rt : runtime(L);
}

/* fn:device() -> the ordinal of the device its module was loaded on */
static int fn_device(lua_State *L) {
  luaL_checkudata(L, 1, LB_FUNCTION);
  lua_pushinteger(L, lb_function_runtime(L, 1)->info.ordinal);
  return 1;
}

/* fn:info() -> {num_regs, local_bytes, static_smem, max_threads} */
static int fn_info(lua_State *L) {
  LbFunction *f = luaL_checkudata(L, 1, LB_FUNCTION);
  TlcuFuncInfo r;
  TlcuRuntime *d = lb_function_runtime(L, 1);
  if (!f->fn || tlcu_function_info(d, f->fn, &r) != TLCU_OK)
    return lb_cuda_error_of(L, d, "function info");
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

unsigned lb_launch_smem(lua_State *L, lua_Integer static_bytes, lua_Integer dynamic) {
  if (dynamic < 0 || dynamic > SM90_MAX_SMEM || static_bytes + dynamic > SM90_MAX_SMEM)
    lb_error(
        L,
        "launch: smem %lld is out of range: the dynamic shared memory is 0 to %lld bytes (%d in all, %lld static)",
        (long long)dynamic, (long long)(SM90_MAX_SMEM - static_bytes), SM90_MAX_SMEM,
        (long long)static_bytes);
  return (unsigned)(static_bytes + dynamic);
}

void lb_launch_int(lua_State *L, const char *param, int width, lua_Integer v) {
  if (width >= 64) return;
  lua_Integer lo = -((lua_Integer)1 << (width - 1)), hi = ((lua_Integer)1 << width) - 1;
  if (v < lo || v > hi)
    lb_error(L, "launch: argument '%s' = %lld does not fit its type i%d (%lld to %lld)", param,
             (long long)v, width, (long long)lo, (long long)hi);
}

/* One argument {type, value [, name]} into an 8-byte slot. Types: ptr (a Buffer or an
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
    char param[64];
    lua_rawgeti(L, -3, 3); /* the parameter's name, when given */
    if (lua_isstring(L, -1)) snprintf(param, sizeof param, "%s", lua_tostring(L, -1));
    else snprintf(param, sizeof param, "#%d", i);
    lua_pop(L, 1);
    if (t[0] == 'i' || t[0] == 'b') lb_launch_int(L, param, atoi(t + 1), lua_tointeger(L, -1));
    uint64_t v = (uint64_t)lua_tointeger(L, -1);
    memcpy(slot, &v, 8); /* little endian: the low bytes are the narrow value */
  }
  lua_pop(L, 2);
}

/* The debug-hangs records of a launch when cfg (at index 2) asks for them
** (hang_sites): one slot per warp of the grid. */
static TlcuHang *hang_records(lua_State *L, TlcuRuntime *d, const TlcuLaunch *cfg) {
  if (lua_getfield(L, 2, "hang_sites") != LUA_TSTRING) {
    lua_pop(L, 1);
    return NULL;
  }
  const char *sites = lua_tostring(L, -1);
  unsigned threads = cfg->block[0] * cfg->block[1] * cfg->block[2], warps = (threads + 31) / 32;
  size_t slots = (size_t)cfg->grid[0] * cfg->grid[1] * cfg->grid[2] * warps;
  TlcuHang *h = NULL;
  if (tlcu_hang_alloc(d, slots, warps, sites, &h) != TLCU_OK) lb_cuda_error_of(L, d, "launch");
  lua_pop(L, 1);
  return h;
}

static const char *opt_field(lua_State *L, int idx, const char *k) {
  lua_getfield(L, idx, k);
  const char *s = lua_tostring(L, -1); /* stays alive in the table */
  lua_pop(L, 1);
  return s;
}

/* fn:launch({grid=, block=, cluster=, static=, smem=, name=, hang_sites=, pdl=, stream=},
** { {type, value}, ... }): name and the script's line of the launch (the innermost user frame) go
*into
** the reports of a kernel that hangs or fails; hang_sites (the lowered
** kernel's debug-hangs sites) adds the records' address as the last argument. */
static int fn_launch(lua_State *L) {
  LbFunction *f = luaL_checkudata(L, 1, LB_FUNCTION);
  luaL_checktype(L, 2, LUA_TTABLE);
  luaL_checktype(L, 3, LUA_TTABLE);
  need_gpu(L);
  TlcuLaunch cfg;
  memset(&cfg, 0, sizeof cfg);
  get_dims(L, 2, "grid", cfg.grid);
  get_dims(L, 2, "block", cfg.block);
  get_dims(L, 2, "cluster", cfg.cluster);
  lua_getfield(L, 2, "static");
  lua_getfield(L, 2, "smem");
  cfg.smem = lb_launch_smem(L, luaL_optinteger(L, -2, 0), luaL_optinteger(L, -1, 0));
  lua_pop(L, 2);
  cfg.name = opt_field(L, 2, "name");
  if (!lb_user_frame(L, &cfg.file, &cfg.line)) cfg.file = NULL;
  lua_getfield(L, 2, "pdl");
  cfg.pdl = lua_toboolean(L, -1);
  lua_pop(L, 1);
  lua_getfield(L, 2, "stream");
  cfg.stream = lb_stream_arg(L, -1);
  lua_pop(L, 1);
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
  TlcuRuntime *d = lb_function_runtime(L, 1); /* the device the kernel was loaded on */
  cfg.hang =
      hang_records(L, d, &cfg); /* last: nothing after it raises before the launch takes it */
  if (cfg.hang) {
    slots[n] = (uint64_t)cfg.hang->dev;
    ptrs[n] = &slots[n];
  }
  /* the shared-memory attribute is raised once, not before every launch */
  cfg.smem_allowed = cfg.smem <= f->smem_allowed;
  if (tlcu_launch(d, f->fn, &cfg, ptrs) != TLCU_OK) return lb_cuda_error_of(L, d, "launch");
  if (cfg.smem > f->smem_allowed) f->smem_allowed = cfg.smem;
  return 0;
}

/* fn:max_active_clusters{block=, cluster=, smem=} -> how many clusters of the
** function can be resident at once (cuOccupancyMaxActiveClusters): a
** persistent grid of clusters larger than that runs a partial wave after
** the rest. */
static int fn_max_active_clusters(lua_State *L) {
  LbFunction *f = luaL_checkudata(L, 1, LB_FUNCTION);
  luaL_checktype(L, 2, LUA_TTABLE);
  need_gpu(L);
  TlcuLaunch cfg;
  memset(&cfg, 0, sizeof cfg);
  get_dims(L, 2, "block", cfg.block);
  get_dims(L, 2, "cluster", cfg.cluster);
  cfg.grid[0] = cfg.cluster[0], cfg.grid[1] = cfg.cluster[1], cfg.grid[2] = cfg.cluster[2];
  lua_getfield(L, 2, "smem");
  cfg.smem = (unsigned int)luaL_optinteger(L, -1, 0);
  lua_pop(L, 1);
  int n = 0;
  TlcuRuntime *d = lb_function_runtime(L, 1); /* the device the kernel was loaded on */
  if (!f->fn || tlcu_max_active_clusters(d, f->fn, &cfg, &n) != TLCU_OK)
    return lb_cuda_error_of(L, d, "max_active_clusters");
  lua_pushinteger(L, n);
  return 1;
}

/* core.device_time(fn) -> milliseconds between events recorded around fn() */
static int dev_time(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  need_gpu(L);
  TlcuRuntime *rt = runtime(L);
  CUevent a = NULL, b = NULL;
  if (tlcu_event_create(rt, &a) != TLCU_OK || tlcu_event_create(rt, &b) != TLCU_OK) {
    if (a) tlcu_event_destroy(rt, a);
    return lb_cuda_error(L, "event");
  }
  float ms = 0;
  int bad = tlcu_event_record(rt, a, NULL) != TLCU_OK;
  lua_pushvalue(L, 1);
  int st = bad ? LUA_OK : lua_pcall(L, 0, 0, 0);
  if (!bad && st == LUA_OK)
    bad = tlcu_event_record(rt, b, NULL) != TLCU_OK || tlcu_event_synchronize(rt, b) != TLCU_OK ||
          tlcu_event_elapsed_ms(rt, a, b, &ms) != TLCU_OK;
  if (bad) lua_pushfstring(L, "timing: %s", tlcu_error(rt));
  tlcu_event_destroy(rt, a);
  tlcu_event_destroy(rt, b);
  if (bad || st != LUA_OK) return lua_error(L);
  lua_pushnumber(L, ms);
  return 1;
}

/* }====================================================================== */

static const luaL_Reg buffer_methods[] = {{"bytes", buf_bytes},
                                          {"address", buf_address},
                                          {"upload", buf_upload},
                                          {"download", buf_download},
                                          {"copy_from", buf_copy_from},
                                          {"memset", buf_memset},
                                          {"equals", buf_equals},
                                          {"fill_random", buf_fill_random},
                                          {"device", buf_device},
                                          {"free", buf_free},
                                          {NULL, NULL}};
static const luaL_Reg buffer_meta[] = {{"__gc", buf_free}, {"__close", buf_free}, {NULL, NULL}};
static const luaL_Reg module_methods[] = {{"func", mod_func}, {"unload", mod_unload}, {NULL, NULL}};
static const luaL_Reg module_meta[] = {{"__gc", mod_unload}, {"__close", mod_unload}, {NULL, NULL}};
static const luaL_Reg function_methods[] = {{"info", fn_info},
                                            {"launch", fn_launch},
                                            {"max_active_clusters", fn_max_active_clusters},
                                            {"device", fn_device},
                                            {NULL, NULL}};

static const luaL_Reg device_functions[] = {{"device_available", dev_available},
                                            {"device_error", dev_error},
                                            {"device_info", dev_info},
                                            {"device_synchronize", dev_synchronize},
                                            {"device_time", dev_time},
                                            {"buffer_alloc", buf_alloc},
                                            {"module_load", mod_load},
                                            {"device_use", dev_use},
                                            {"device_current", dev_current},
                                            {"device_peer", dev_peer},
                                            {NULL, NULL}};

static const LbClass device_classes[] = {{LB_BUFFER, buffer_meta, buffer_methods},
                                         {LB_MODULE, module_meta, module_methods},
                                         {LB_FUNCTION, NULL, function_methods},
                                         {NULL, NULL, NULL}};
const LbArea lb_area_device = {device_classes, device_functions};
