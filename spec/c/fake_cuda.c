/*
** fake_cuda.c -- a stand-in CUDA driver (libfakecuda.so) for testing without a
** GPU: what the runtime does when a kernel hangs or fails (spec/hang_spec.lua,
** through TILUA_LIBCUDA), and what a host asks of the driver (the launches,
** tensor maps and graphs of the Lua launcher and of an exported kernel,
** compared in spec/export_spec.lua). It has FAKE_CUDA_DEVICES devices
** (default 1; compute capability 9.0, 4 SMs, a context each: with more than
** one, a launch's line names the device) and host memory for device memory; kernels run instantly
*and do
** nothing, except as FAKE_CUDA_KERNELS says:
**
**   hang   every launch never finishes: cuEventQuery answers NOT_READY, and
**          every call that would wait for it (synchronize, copies, frees,
**          event waits, and an exit handler, like the real driver's teardown)
**          blocks forever, so a runtime that calls one after a hang hangs
**   trap   every launch fails with CUDA_ERROR_ILLEGAL_INSTRUCTION, which then
**          sticks; with FAKE_CUDA_RECORDS=1 the kernel's last parameter is taken
**          for the debug-hangs records and gets two: warp 0 gave up on an
**          mbarrier at site 1, warp 1 waits at named barrier 1 at site 2
**
** FAKE_CUDA_LOG=path appends a line per kernel run, tensor map encoded and
** graph call (and per cuFuncSetAttribute with FAKE_CUDA_LOG_ATTRS=1), in a form that does not
*depend on the process: an address in a
** device allocation reads `buf<i>+<offset>` (i counts the allocations), a
** tensor map argument reads as the description it was encoded from (the fake
** encodes it into the map's 128 bytes). Two hosts that allocate in the same
** order and launch the same thing write the same lines.
**
** Modules are PTX (its .entry names and .param sizes are read); a cubin (ELF)
** is refused with CUDA_ERROR_NO_BINARY_FOR_GPU, which sends an exported
** kernel to its PTX. Streams can capture launches into graphs. A launch's
** line says pdl=1 for a programmatic dependent launch;
** cuOccupancyMaxActiveClusters answers FAKE_CUDA_CLUSTERS (default 1).
**
** Only what src/cuda/cuda_syms.def lists is answered (cuGetProcAddress_v2);
** cuInit and cuGetProcAddress_v2 are exported by name, so a host may link it.
*/
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/cuda_types.h"
#include "cuda/hang.h"

enum { ILLEGAL_INSTRUCTION = 715 };
enum { RUN_DONE, RUN_HANG, RUN_TRAP };

/* What the next launch does: FAKE_CUDA_KERNELS, from launch FAKE_CUDA_AFTER on
** (1-based; the earlier ones finish). */
static int mode(void) {
  static long launches, after = -1;
  static int m = -1;
  if (m < 0) { /* read once: a launch of the stand-in costs little, like a real one */
    const char *k = getenv("FAKE_CUDA_KERNELS"), *a = getenv("FAKE_CUDA_AFTER");
    m = k && !strcmp(k, "hang") ? RUN_HANG : k && !strcmp(k, "trap") ? RUN_TRAP : RUN_DONE;
    after = a ? atol(a) : -1;
  }
  if (after >= 0 && ++launches < after) return RUN_DONE;
  return m;
}

static int hung, trapped; /* a launch hung / trapped (sticky) */

static void block_forever(void) {
  for (;;)
    pause();
}

/* What a call that waits for the device does. */
static CUresult wait_device(void) {
  if (hung) block_forever();
  return trapped ? (CUresult)ILLEGAL_INSTRUCTION : CUDA_SUCCESS;
}

static void exit_handler(void) {
  if (hung) block_forever(); /* the real driver's teardown waits for its kernels */
}

/* {=== the call log */

/* The log named by FAKE_CUDA_LOG now (a test may set it between launches). */
static FILE *log_file(void) {
  static FILE *f;
  static char path[4096];
  const char *p = getenv("FAKE_CUDA_LOG");
  if (!p) p = "";
  if (strcmp(p, path)) {
    if (f) fclose(f);
    f = NULL;
    snprintf(path, sizeof path, "%s", p);
    if (*p) f = fopen(p, "a");
  }
  return f;
}

static void logf_(const char *fmt, ...) {
  FILE *f = log_file();
  if (!f) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(f, fmt, ap);
  va_end(ap);
  fflush(f);
}

/* Device allocations, in the order made: addresses are logged relative to them. */
typedef struct Alloc {
  uintptr_t base;
  size_t bytes;
  int live;
} Alloc;
static Alloc *allocs;
static size_t nallocs, capallocs;

static void log_address(FILE *f, uint64_t a) {
  for (size_t i = nallocs; i-- > 0;)
    if (allocs[i].live && a >= allocs[i].base && a - allocs[i].base < allocs[i].bytes + 1) {
      fprintf(f, "buf%zu+%llu", i, (unsigned long long)(a - allocs[i].base));
      return;
    }
  fprintf(f, "0x%llx", (unsigned long long)a);
}

/* }=== */

typedef struct Fn {
  char name[128];
  int nparams;
  int size[64]; /* bytes of each parameter */
} Fn;

typedef struct Module {
  Fn fn[16];
  int n;
} Module;

typedef struct Event {
  int state;
} Event;

/* {=== errors, versions, devices, contexts */
#define EXPORT __attribute__((visibility("default")))

EXPORT CUresult cuInit(unsigned int flags);
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                    unsigned long long flags, int *status);

CUresult cuInit(unsigned int flags) {
  (void)flags;
  static int once;
  if (!once++) atexit(exit_handler);
  return CUDA_SUCCESS;
}
static CUresult cuGetErrorName(CUresult e, const char **s) {
  *s = (int)e == ILLEGAL_INSTRUCTION       ? "CUDA_ERROR_ILLEGAL_INSTRUCTION"
       : e == CUDA_ERROR_NOT_READY         ? "CUDA_ERROR_NOT_READY"
       : e == CUDA_ERROR_INVALID_VALUE     ? "CUDA_ERROR_INVALID_VALUE"
       : e == CUDA_ERROR_NO_BINARY_FOR_GPU ? "CUDA_ERROR_NO_BINARY_FOR_GPU"
                                           : "CUDA_ERROR_UNKNOWN";
  return CUDA_SUCCESS;
}
static CUresult cuGetErrorString(CUresult e, const char **s) {
  *s = (int)e == ILLEGAL_INSTRUCTION ? "an illegal instruction was encountered" : "fake";
  return CUDA_SUCCESS;
}
static CUresult cuDriverGetVersion(int *v) { return *v = 13000, CUDA_SUCCESS; }
/* FAKE_CUDA_DEVICES devices (default 1), all alike */
static CUresult cuDeviceGetCount(int *n) {
  const char *d = getenv("FAKE_CUDA_DEVICES");
  return *n = d && atoi(d) > 0 ? atoi(d) : 1, CUDA_SUCCESS;
}
static CUresult cuDeviceGet(CUdevice *d, int o) { return *d = o, CUDA_SUCCESS; }
static CUresult cuDeviceGetName(char *s, int n, CUdevice d) {
  (void)d;
  snprintf(s, (size_t)n, "Fake GPU");
  return CUDA_SUCCESS;
}
static CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d) {
  (void)d;
  *v = a == 16 ? 4 : a == 75 ? 9 : a == 76 ? 0 : a == 97 ? 232448 : 0;
  return CUDA_SUCCESS;
}
static CUresult cuDeviceTotalMem(size_t *b, CUdevice d) {
  (void)d;
  return *b = (size_t)1 << 30, CUDA_SUCCESS;
}
static int the_ctx[64]; /* a primary context per device */
static CUcontext current;
static CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d) {
  return *c = (CUcontext)(void *)&the_ctx[d & 63], CUDA_SUCCESS;
}
static CUresult cuDevicePrimaryCtxRelease(CUdevice d) {
  (void)d;
  return wait_device();
}
static CUresult cuCtxSetCurrent(CUcontext c) { return current = c, CUDA_SUCCESS; }
static CUresult cuCtxGetCurrent(CUcontext *c) { return *c = current, CUDA_SUCCESS; }
static CUresult cuCtxGetDevice(CUdevice *d) {
  return current ? (*d = (int)((int *)(void *)current - the_ctx), CUDA_SUCCESS)
                 : CUDA_ERROR_INVALID_CONTEXT;
}
static CUresult cuCtxSynchronize(void) { return wait_device(); }
/* }=== */

/* {=== modules */

/* The bytes of a .param declaration: .u64, .u32, .b16, .u8, .f32, .f64, or .align A .b8 name[N]. */
static int param_size(const char *p) {
  const char *arr = strchr(p, '[');
  const char *nl = strpbrk(p, ",)\n");
  if (arr && (!nl || arr < nl)) return atoi(arr + 1);
  if (strstr(p, ".u64") == p || strstr(p, ".f64") == p || strstr(p, ".b64") == p ||
      strstr(p, ".s64") == p)
    return 8;
  if (strstr(p, ".u32") == p || strstr(p, ".f32") == p || strstr(p, ".b32") == p ||
      strstr(p, ".s32") == p)
    return 4;
  if (strstr(p, ".b16") == p || strstr(p, ".u16") == p || strstr(p, ".s16") == p ||
      strstr(p, ".f16") == p)
    return 2;
  return 1;
}

/* The .entry names of the PTX, with their parameters' sizes; a cubin is refused. */
static CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned int n, CUjit_option *o,
                                   void **v) {
  (void)n, (void)o, (void)v;
  if (!memcmp(image, "\177ELF", 4)) {
    logf_("module refused a cubin\n");
    return CUDA_ERROR_NO_BINARY_FOR_GPU;
  }
  Module *mod = calloc(1, sizeof *mod);
  for (const char *p = strstr(image, ".entry "); p && mod->n < 16; p = strstr(p + 1, ".entry ")) {
    Fn *f = &mod->fn[mod->n++];
    sscanf(p + 7, "%127[A-Za-z0-9_$]", f->name);
    const char *end = strchr(p, ')');
    for (const char *q = strstr(p, ".param"); q && end && q < end && f->nparams < 64;
         q = strstr(q + 1, ".param"))
      f->size[f->nparams++] = param_size(q + 7);
  }
  *m = (CUmodule)(void *)mod;
  return CUDA_SUCCESS;
}
static CUresult cuModuleUnload(CUmodule m) {
  CUresult r = wait_device();
  free(m);
  return r;
}
static CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name) {
  Module *mod = (Module *)(void *)m;
  for (int i = 0; i < mod->n; i++)
    if (!strcmp(mod->fn[i].name, name)) return *f = (CUfunction)(void *)&mod->fn[i], CUDA_SUCCESS;
  return CUDA_ERROR_NOT_FOUND;
}
static CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f) {
  (void)a, (void)f;
  return *v = 32, CUDA_SUCCESS;
}
static CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v) {
  const char *on = getenv(
      "FAKE_CUDA_LOG_ATTRS"); /* off by default: hosts that set it at other times log alike */
  if (on && *on == '1') logf_("attribute %s %d = %d\n", ((Fn *)(void *)f)->name, (int)a, v);
  return CUDA_SUCCESS;
}
/* }=== */

/* {=== tensor maps: the description goes into the map's bytes, for the log */

#define MAP_MAGIC 0x50414d54u /* "TMAP" */
typedef struct MapBytes {
  uint32_t magic, dtype, rank;
  uint8_t interleave, swizzle, l2, oob;
  uint64_t address, dims[5], strides[4];
  uint32_t box[5];
  uint8_t es[5];
} MapBytes;
_Static_assert(sizeof(MapBytes) <= 128, "a map's description fits its 128 bytes");

static void log_list64(FILE *f, const char *key, const uint64_t *v, unsigned n) {
  fprintf(f, " %s=", key);
  for (unsigned i = 0; i < n; i++)
    fprintf(f, "%s%llu", i ? "," : "", (unsigned long long)v[i]);
}

static void log_map(FILE *f, const MapBytes *m) {
  fprintf(f, "map{dtype=%u rank=%u base=", m->dtype, m->rank);
  log_address(f, m->address);
  log_list64(f, "dims", m->dims, m->rank);
  log_list64(f, "strides", m->strides, m->rank - 1);
  fprintf(f, " box=");
  for (unsigned i = 0; i < m->rank; i++)
    fprintf(f, "%s%u", i ? "," : "", m->box[i]);
  fprintf(f, " es=");
  for (unsigned i = 0; i < m->rank; i++)
    fprintf(f, "%s%u", i ? "," : "", m->es[i]);
  fprintf(f, " interleave=%u swizzle=%u l2=%u oob=%u}", m->interleave, m->swizzle, m->l2, m->oob);
}

static CUresult cuTensorMapEncodeTiled(void *map, int dtype, unsigned int rank, void *address,
                                       const cuuint64_t *dims, const cuuint64_t *strides,
                                       const uint32_t *box, const uint32_t *elem_strides,
                                       int interleave, int swizzle, int l2, int oob) {
  if (!current) return CUDA_ERROR_INVALID_CONTEXT; /* as the driver does (H200, driver 580) */
  if (rank < 1 || rank > 5) return CUDA_ERROR_INVALID_VALUE;
  MapBytes m;
  memset(&m, 0, sizeof m);
  m.magic = MAP_MAGIC, m.dtype = (uint32_t)dtype, m.rank = rank,
  m.address = (uint64_t)(uintptr_t)address;
  m.interleave = (uint8_t)interleave, m.swizzle = (uint8_t)swizzle, m.l2 = (uint8_t)l2,
  m.oob = (uint8_t)oob;
  for (unsigned i = 0; i < rank; i++) {
    m.dims[i] = dims[i], m.box[i] = box[i], m.es[i] = (uint8_t)elem_strides[i];
    if (i + 1 < rank) m.strides[i] = strides[i];
  }
  memset(map, 0, 128);
  memcpy(map, &m, sizeof m);
  FILE *f = log_file();
  if (f) {
    fprintf(f, "tensor_map ");
    log_map(f, &m);
    fprintf(f, "\n");
    fflush(f);
  }
  return CUDA_SUCCESS;
}
static CUresult cuOccupancyMaxActiveClusters(int *clusters, CUfunction f,
                                             const CUlaunchConfig *cfg) {
  (void)f, (void)cfg;
  const char *n = getenv("FAKE_CUDA_CLUSTERS");
  return *clusters = n ? atoi(n) : 1, CUDA_SUCCESS;
}
/* }=== */

/* {=== launches */

/* A launch as the log and the graphs keep it: the function, the shape, a copy of the arguments. */
typedef struct Launch {
  Fn *fn;
  unsigned grid[3], block[3], cluster[3], smem;
  int pdl; /* a programmatic dependent launch */
  unsigned char args[64][128];
} Launch;

static void log_launch(const Launch *l, const char *how) {
  FILE *f = log_file();
  if (!f) return;
  fprintf(f, "launch%s %s grid=%u,%u,%u block=%u,%u,%u cluster=%u,%u,%u smem=%u%s ", how,
          l->fn->name, l->grid[0], l->grid[1], l->grid[2], l->block[0], l->block[1], l->block[2],
          l->cluster[0], l->cluster[1], l->cluster[2], l->smem, l->pdl ? " pdl=1" : "");
  const char *devs =
      getenv("FAKE_CUDA_DEVICES"); /* several: the device of the current context too */
  if (devs && atoi(devs) > 1 && current)
    fprintf(f, "device=%d ", (int)((int *)(void *)current - the_ctx));
  fputs("args=", f);
  for (int i = 0; i < l->fn->nparams; i++) {
    const unsigned char *a = l->args[i];
    int n = l->fn->size[i];
    fprintf(f, "%s", i ? " " : "");
    MapBytes m;
    memcpy(&m, a, sizeof m);
    if (n == 128 && m.magic == MAP_MAGIC) {
      log_map(f, &m);
    } else if (n == 8) {
      uint64_t v;
      memcpy(&v, a, 8);
      log_address(f, v);
    } else {
      uint64_t v = 0;
      memcpy(&v, a, (size_t)(n < 8 ? n : 8));
      fprintf(f, "0x%llx", (unsigned long long)v);
    }
  }
  fprintf(f, "\n");
  fflush(f);
}

/* Two records: warp 0 gave up on an mbarrier (site 1), warp 1 waits at a named barrier (site 2). */
static void write_records(uint32_t *s) {
  uint32_t *w1 = s + TLHANG_SLOT_WORDS;
  s[TLHANG_SITE] = 1, s[TLHANG_BARRIER] = 0x40, s[TLHANG_PHASE] = 1, s[TLHANG_WAITED] = 1000123;
  s[TLHANG_STATE] = TLHANG_MBARRIER;
  w1[TLHANG_SITE] = 2, w1[TLHANG_BARRIER] = 1, w1[TLHANG_PHASE] = 64,
  w1[TLHANG_STATE] = TLHANG_NAMED;
}

/* FAKE_CUDA_RECORDS=1 (read once). */
static int getenv_records(void) {
  static int rec = -1;
  if (rec < 0) {
    const char *r = getenv("FAKE_CUDA_RECORDS");
    rec = r && !strcmp(r, "1");
  }
  return rec;
}

/* What running a kernel does. */
static CUresult run(const Launch *l, const char *how) {
  if (trapped) return (CUresult)ILLEGAL_INSTRUCTION;
  log_launch(l, how);
  int m = mode();
  if (m == RUN_HANG) hung = 1;
  if (m == RUN_TRAP) {
    if (getenv_records() && l->fn->nparams > 0) {
      CUdeviceptr p;
      memcpy(&p, l->args[l->fn->nparams - 1], sizeof p);
      write_records((uint32_t *)(uintptr_t)p);
    }
    trapped = 1;
  }
  return CUDA_SUCCESS;
}

/* Streams: a capturing one collects its launches into a graph instead of running them. */
typedef struct Node Node;
typedef struct Graph {
  Node **nodes;
  int n;
} Graph;
struct Node {
  Launch l;
  int index;
};
typedef struct Stream {
  Graph *capture; /* the graph being captured, or NULL */
} Stream;

static Node *add_node(Graph *g, const Launch *l) {
  Node *n = malloc(sizeof *n);
  Node **nodes = realloc(g->nodes, (size_t)(g->n + 1) * sizeof *nodes);
  if (!n || !nodes) return free(n), NULL;
  n->l = *l, n->index = g->n;
  g->nodes = nodes, g->nodes[g->n++] = n;
  return n;
}

static CUresult launch(CUfunction f, const unsigned grid[3], const unsigned block[3],
                       const unsigned cluster[3], unsigned smem, int pdl, CUstream stream,
                       void **params) {
  Stream *s = (Stream *)(void *)stream;
  if (!log_file() && !(s && s->capture) &&
      !getenv_records()) { /* nothing to keep: run it as it comes */
    static Launch bare;
    bare.fn = (Fn *)(void *)f;
    return run(&bare, "");
  }
  Launch *l = calloc(1, sizeof *l);
  if (!l) return CUDA_ERROR_OUT_OF_MEMORY;
  l->fn = (Fn *)(void *)f, l->smem = smem, l->pdl = pdl;
  for (int i = 0; i < 3; i++)
    l->grid[i] = grid[i], l->block[i] = block[i], l->cluster[i] = cluster[i];
  for (int i = 0; i < l->fn->nparams; i++)
    memcpy(l->args[i], params[i], (size_t)l->fn->size[i]);
  CUresult r = CUDA_SUCCESS;
  if (s && s->capture) r = add_node(s->capture, l) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
  else r = run(l, "");
  free(l);
  return r;
}

static CUresult cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params,
                                 void **extra) {
  (void)extra;
  unsigned grid[3] = {c->gridDimX, c->gridDimY, c->gridDimZ},
           block[3] = {c->blockDimX, c->blockDimY, c->blockDimZ};
  unsigned cluster[3] = {1, 1, 1};
  int pdl = 0;
  for (unsigned i = 0; i < c->numAttrs; i++)
    if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      cluster[0] = c->attrs[i].value.clusterDim.x, cluster[1] = c->attrs[i].value.clusterDim.y;
      cluster[2] = c->attrs[i].value.clusterDim.z;
    } else if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) {
      pdl = c->attrs[i].value.programmaticStreamSerializationAllowed;
    }
  return launch(f, grid, block, cluster, c->sharedMemBytes, pdl, c->hStream, params);
}
static CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                               unsigned by, unsigned bz, unsigned smem, CUstream stream,
                               void **params, void **extra) {
  (void)extra;
  unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz}, cluster[3] = {1, 1, 1};
  return launch(f, grid, block, cluster, smem, 0, stream, params);
}
/* }=== */

/* {=== streams and graphs */
static CUresult cuStreamCreate(CUstream *s, unsigned int flags) {
  (void)flags;
  Stream *st = calloc(1, sizeof *st);
  return st ? (*s = (CUstream)(void *)st, CUDA_SUCCESS) : CUDA_ERROR_OUT_OF_MEMORY;
}
static CUresult cuStreamDestroy(CUstream s) {
  free(s);
  return CUDA_SUCCESS;
}
static CUresult cuStreamSynchronize(CUstream s) {
  (void)s;
  return wait_device();
}
/* every device reaches every other's memory (it is all host memory) */
static CUresult cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer) {
  *can = dev != peer;
  return CUDA_SUCCESS;
}
static CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  (void)peer, (void)flags;
  return CUDA_SUCCESS;
}
/* every call is done when it returns: a stream waits for nothing */
static CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
  (void)s, (void)e, (void)flags;
  return CUDA_SUCCESS;
}
static CUresult cuStreamCreateWithPriority(CUstream *s, unsigned int flags, int priority) {
  (void)priority;
  return cuStreamCreate(s, flags);
}
static CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest) {
  *least = 0, *greatest = -5;
  return CUDA_SUCCESS;
}
static CUresult cuStreamBeginCapture(CUstream s, CUstreamCaptureMode m) {
  (void)m;
  Stream *st = (Stream *)(void *)s;
  if (!st || st->capture) return CUDA_ERROR_INVALID_VALUE; /* the legacy stream cannot capture */
  st->capture = calloc(1, sizeof(Graph));
  logf_("capture begins\n");
  return st->capture ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
static CUresult cuStreamEndCapture(CUstream s, CUgraph *g) {
  Stream *st = (Stream *)(void *)s;
  if (!st || !st->capture) return CUDA_ERROR_INVALID_VALUE;
  *g = (CUgraph)(void *)st->capture;
  logf_("capture ends: %d kernel nodes\n", st->capture->n);
  st->capture = NULL;
  return CUDA_SUCCESS;
}
static CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus *status, cuuint64_t *id,
                                       CUgraph *g, const CUgraphNode **deps, size_t *ndeps) {
  static CUgraphNode last;
  Stream *st = (Stream *)(void *)s;
  Graph *gr = st ? st->capture : NULL;
  if (status) *status = gr ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  if (id) *id = (cuuint64_t)(uintptr_t)gr;
  if (g) *g = (CUgraph)(void *)gr;
  last = gr && gr->n ? (CUgraphNode)(void *)gr->nodes[gr->n - 1] : NULL;
  if (deps) *deps = &last;
  if (ndeps) *ndeps = last ? 1 : 0;
  return CUDA_SUCCESS;
}
static void free_graph(Graph *g) {
  for (int i = 0; g && i < g->n; i++)
    free(g->nodes[i]);
  if (g) free(g->nodes);
  free(g);
}
/* An executable graph: a copy of the nodes, found by the index of the graph's node. */
static CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags) {
  (void)flags;
  Graph *src = (Graph *)(void *)g, *x = calloc(1, sizeof *x);
  if (!x) return CUDA_ERROR_OUT_OF_MEMORY;
  for (int i = 0; i < src->n; i++)
    if (!add_node(x, &src->nodes[i]->l)) return free_graph(x), CUDA_ERROR_OUT_OF_MEMORY;
  *e = (CUgraphExec)(void *)x;
  return CUDA_SUCCESS;
}
static CUresult cuGraphLaunch(CUgraphExec e, CUstream s) {
  (void)s;
  Graph *x = (Graph *)(void *)e;
  if (trapped) return (CUresult)ILLEGAL_INSTRUCTION; /* an earlier failure sticks */
  logf_("graph launch: %d kernel nodes\n", x->n);
  for (int i = 0; i < x->n; i++)
    run(&x->nodes[i]->l, " (graph)"); /* a failure shows later, as a launch's */
  return CUDA_SUCCESS;
}
static CUresult cuGraphExecKernelNodeSetParams(CUgraphExec e, CUgraphNode node,
                                               const CUDA_KERNEL_NODE_PARAMS *p) {
  Graph *x = (Graph *)(void *)e;
  int i = ((Node *)(void *)node)->index;
  if (i < 0 || i >= x->n || x->nodes[i]->l.fn != (Fn *)(void *)p->func)
    return CUDA_ERROR_INVALID_VALUE;
  Launch *l = &x->nodes[i]->l;
  l->grid[0] = p->gridDimX, l->grid[1] = p->gridDimY, l->grid[2] = p->gridDimZ;
  l->block[0] = p->blockDimX, l->block[1] = p->blockDimY, l->block[2] = p->blockDimZ;
  l->smem = p->sharedMemBytes;
  for (int k = 0; k < l->fn->nparams; k++)
    memcpy(l->args[k], p->kernelParams[k], (size_t)l->fn->size[k]);
  logf_("graph node %d set\n", i);
  return CUDA_SUCCESS;
}
static CUresult cuGraphExecDestroy(CUgraphExec e) {
  free_graph((Graph *)(void *)e);
  return CUDA_SUCCESS;
}
static CUresult cuGraphDestroy(CUgraph g) {
  free_graph((Graph *)(void *)g);
  return CUDA_SUCCESS;
}
/* }=== */

/* {=== memory */
static CUresult cuMemAlloc(CUdeviceptr *p, size_t n) {
  void *m = calloc(1, n ? n : 1);
  if (!m) return CUDA_ERROR_OUT_OF_MEMORY;
  if (nallocs == capallocs) {
    size_t cap = capallocs ? 2 * capallocs : 64;
    Alloc *a = realloc(allocs, cap * sizeof *a);
    if (!a) return free(m), CUDA_ERROR_OUT_OF_MEMORY;
    allocs = a, capallocs = cap;
  }
  allocs[nallocs++] = (Alloc){(uintptr_t)m, n, 1};
  *p = (CUdeviceptr)(uintptr_t)m;
  return CUDA_SUCCESS;
}
static CUresult cuMemFree(CUdeviceptr p) {
  CUresult r = wait_device();
  for (size_t i = nallocs; i-- > 0;)
    if (allocs[i].live && allocs[i].base == (uintptr_t)p) allocs[i].live = 0;
  free((void *)(uintptr_t)p); /* also after a trap: the test process checks for leaks */
  return r;
}
static CUresult cuMemcpyHtoD(CUdeviceptr d, const void *s, size_t n) {
  CUresult r = wait_device();
  if (r == CUDA_SUCCESS) memcpy((void *)(uintptr_t)d, s, n);
  return r;
}
static CUresult cuMemcpyDtoH(void *d, CUdeviceptr s, size_t n) {
  CUresult r = wait_device();
  if (r == CUDA_SUCCESS) memcpy(d, (void *)(uintptr_t)s, n);
  return r;
}
static CUresult cuMemcpyDtoD(CUdeviceptr d, CUdeviceptr s, size_t n) {
  CUresult r = wait_device();
  if (r == CUDA_SUCCESS) memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n);
  return r;
}
static CUresult cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) {
  CUresult r = wait_device();
  if (r == CUDA_SUCCESS) memset((void *)(uintptr_t)d, v, n);
  return r;
}
static CUresult cuMemHostAlloc(void **p, size_t n, unsigned int flags) {
  (void)flags;
  *p = calloc(1, n ? n : 1);
  return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
static CUresult cuMemHostGetDevicePointer(CUdeviceptr *d, void *p, unsigned int flags) {
  (void)flags;
  return *d = (CUdeviceptr)(uintptr_t)p, CUDA_SUCCESS;
}
static CUresult cuMemFreeHost(void *p) {
  free(p);
  return CUDA_SUCCESS;
}
/* }=== */

/* {=== events */
static CUresult cuEventCreate(CUevent *e, unsigned int flags) {
  (void)flags;
  *e = calloc(1, sizeof(Event));
  return CUDA_SUCCESS;
}
static CUresult cuEventRecord(CUevent e, CUstream s) {
  (void)s;
  ((Event *)(void *)e)->state = hung ? RUN_HANG : trapped ? RUN_TRAP : RUN_DONE;
  return CUDA_SUCCESS;
}
static CUresult cuEventQuery(CUevent e) {
  int st = ((Event *)(void *)e)->state;
  return st == RUN_HANG   ? CUDA_ERROR_NOT_READY
         : st == RUN_TRAP ? (CUresult)ILLEGAL_INSTRUCTION
                          : CUDA_SUCCESS;
}
static CUresult cuEventSynchronize(CUevent e) {
  (void)e;
  return wait_device();
}
static CUresult cuEventElapsedTime(float *ms, CUevent a, CUevent b) {
  (void)a, (void)b;
  return *ms = 0.5f, CUDA_SUCCESS;
}
static CUresult cuEventDestroy(CUevent e) {
  free(e);
  return CUDA_SUCCESS;
}
/* }=== */

/* Every row of cuda_syms.def: the table is made from the list itself, so a
** row without a stand-in here does not compile. */
static const struct {
  const char *name;
  void *fn;
} entries[] = {
#define TLCU_SYM(name, ret, params) {#name, (void *)name},
#include "cuda/cuda_syms.def"
#undef TLCU_SYM
};

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags,
                             int *status) {
  (void)version, (void)flags;
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
    if (!strcmp(entries[i].name, symbol)) {
      *pfn = entries[i].fn;
      if (status) *status = 0;
      return CUDA_SUCCESS;
    }
  *pfn = NULL;
  if (status) *status = 1;
  return CUDA_ERROR_NOT_FOUND;
}
