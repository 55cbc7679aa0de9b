/*
** tilua_export.c -- the runtime of exported kernels (tilua_export.h): the
** driver, kernels loaded per context (a cubin when the device matches it,
** else the PTX), launches with cluster dimensions and dynamic shared memory
** as tilua's own launcher sets them (src/cuda/cuda_rt.c), tensor maps
** through tilua_tensor_map.h, graphs captured from a stream.
*/
#if !defined(_POSIX_C_SOURCE) && !defined(TILUA_EXPORT_LINK_CUDA)
#define _POSIX_C_SOURCE 200809L /* dlopen */
#endif

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cuda/tensor_map.h"
#include "tilua_export.h"

#ifndef TILUA_EXPORT_LINK_CUDA
#include <dlfcn.h>
#endif

#define SMEM_DEFAULT                                                                               \
  (48 * 1024) /* dynamic shared memory a launch may use without raising the limit */
#define JIT_LOG 4096

typedef CUresult (*GetProcFn)(const char *symbol, void **pfn, int version, unsigned long long flags,
                              int *status);
typedef CUresult (*InitFn)(unsigned int flags);

static tilua_driver drv;
static int drv_state; /* 0 not tried, 1 loaded, -1 failed */
static CUresult drv_status;
static _Thread_local char last_error[JIT_LOG + 512];

/* {======================================================================
** Errors
** ======================================================================= */

const char *tilua_last_error(void) { return last_error; }

CUresult tilua_fail(CUresult r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return r;
}

/* A driver call's failure as "what: CUDA_ERROR_NAME". */
static CUresult check(CUresult r, const char *what) {
  if (r == CUDA_SUCCESS) return r;
  const char *name = NULL;
  if (!drv.cuGetErrorName || drv.cuGetErrorName(r, &name) != CUDA_SUCCESS || !name)
    name = "an unknown CUDA error";
  return tilua_fail(r, "%s: %s (%d)", what, name, (int)r);
}

/* }====================================================================== */

/* {======================================================================
** The driver
** ======================================================================= */

#ifdef TILUA_EXPORT_LINK_CUDA
CUresult cuInit(unsigned int flags);
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags,
                             int *status);
static CUresult open_driver(GetProcFn *getproc, InitFn *init) {
  *getproc = cuGetProcAddress_v2;
  *init = cuInit;
  return CUDA_SUCCESS;
}
#else
/* libcuda.so.1 (or TILUA_LIBCUDA) and its two entry points found by name. */
static CUresult open_driver(GetProcFn *getproc, InitFn *init) {
  const char *name = getenv("TILUA_LIBCUDA");
  if (!name || !*name) name = "libcuda.so.1";
  void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    return tilua_fail(CUDA_ERROR_NOT_INITIALIZED, "no CUDA driver: %s not found (%s)", name,
                      dlerror());
  void *g = dlsym(lib, "cuGetProcAddress_v2"), *i = dlsym(lib, "cuInit");
  if (!g || !i) return tilua_fail(CUDA_ERROR_NOT_INITIALIZED, "%s is not a CUDA 12+ driver", name);
  memcpy(getproc, &g, sizeof g); /* POSIX: function and object pointers share a representation */
  memcpy(init, &i, sizeof i);
  return CUDA_SUCCESS;
}
#endif

/* Every row of the table from cuGetProcAddress_v2 at CUDA 12.0. */
static CUresult resolve(GetProcFn getproc) {
  void *p;
  int st;
#define TLCU_SYM(name, ret, params)                                                                \
  p = NULL, st = 0;                                                                                \
  if (getproc(#name, &p, 12000, 0, &st) != CUDA_SUCCESS || st != 0 || !p)                          \
    return tilua_fail(CUDA_ERROR_NOT_FOUND,                                                        \
                      "the CUDA driver lacks %s (CUDA 12.0 or newer is needed)", #name);           \
  memcpy(&drv.name, &p, sizeof p);
#include "../cuda/cuda_syms.def"
#undef TLCU_SYM
  return CUDA_SUCCESS;
}

CUresult tilua_driver_load(void) {
  if (drv_state) return drv_status;
  GetProcFn getproc = NULL;
  InitFn init = NULL;
  CUresult r = open_driver(&getproc, &init);
  if (r == CUDA_SUCCESS && (r = init(0)) != CUDA_SUCCESS)
    tilua_fail(r, "cuInit(0): CUDA error %d", (int)r);
  if (r == CUDA_SUCCESS) r = resolve(getproc);
  drv_state = r == CUDA_SUCCESS ? 1 : -1;
  drv_status = r;
  return r;
}

#define LOAD_DRIVER()                                                                              \
  do {                                                                                             \
    if (drv_state != 1) {                                                                          \
      CUresult r_ = tilua_driver_load();                                                           \
      if (r_ != CUDA_SUCCESS) return r_;                                                           \
    }                                                                                              \
  } while (0)

const tilua_driver *tilua_driver_get(void) { return drv_state == 1 ? &drv : NULL; }

CUresult tilua_use_device(int ordinal) {
  LOAD_DRIVER();
  CUdevice dev;
  CUcontext ctx;
  CUresult r = check(drv.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
  if (r == CUDA_SUCCESS)
    r = check(drv.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  if (r == CUDA_SUCCESS) r = check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  return r;
}

static CUresult device_attr(CUdevice_attribute a, int *out) {
  CUdevice dev;
  CUresult r = check(drv.cuCtxGetDevice(&dev), "cuCtxGetDevice (is a CUDA context current?)");
  return r == CUDA_SUCCESS ? check(drv.cuDeviceGetAttribute(out, a, dev), "cuDeviceGetAttribute")
                           : r;
}

CUresult tilua_sm_count(int *out) {
  LOAD_DRIVER();
  return device_attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, out);
}

/* }====================================================================== */

/* {======================================================================
** Kernels
** ======================================================================= */

struct tilua_loaded {
  CUcontext ctx;
  CUmodule mod;
  CUfunction fn;
  tilua_loaded *next;
};

/* The cubin when the device is the one it was assembled for; NULL (and the
** PTX follows) when there is none, the device differs or the driver refuses it. */
static CUmodule load_cubin(const tilua_kernel *k) {
  int major = 0, minor = 0;
  CUmodule mod = NULL;
  if (!k->cubin ||
      device_attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &major) != CUDA_SUCCESS ||
      device_attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &minor) != CUDA_SUCCESS ||
      major * 10 + minor != k->cubin_sm)
    return NULL;
  return drv.cuModuleLoadDataEx(&mod, k->cubin, 0, NULL, NULL) == CUDA_SUCCESS ? mod : NULL;
}

/* The PTX through the JIT, with line info (the script's lines, for the profilers). */
static CUresult load_ptx(const tilua_kernel *k, CUmodule *mod) {
  static _Thread_local char log[JIT_LOG];
  CUjit_option opts[3] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                          CU_JIT_GENERATE_LINE_INFO};
  void *vals[3] = {log, (void *)(uintptr_t)sizeof log, (void *)(uintptr_t)1};
  log[0] = '\0';
  CUresult r = drv.cuModuleLoadDataEx(mod, k->ptx, 3, opts, vals);
  log[sizeof log - 1] = '\0';
  if (r != CUDA_SUCCESS) {
    check(r, "cuModuleLoadDataEx (the PTX)");
    size_t n = strlen(last_error);
    snprintf(last_error + n, sizeof last_error - n, "; kernel '%s'; JIT log: %s", k->name,
             log[0] ? log : "(empty)");
  }
  return r;
}

static CUresult load(tilua_kernel *k, CUcontext ctx, tilua_loaded **out) {
  tilua_loaded *l = calloc(1, sizeof *l);
  if (!l)
    return tilua_fail(CUDA_ERROR_OUT_OF_MEMORY, "out of host memory loading kernel '%s'", k->name);
  l->ctx = ctx;
  l->mod = load_cubin(k);
  CUresult r = l->mod ? CUDA_SUCCESS : load_ptx(k, &l->mod);
  if (r == CUDA_SUCCESS)
    r = check(drv.cuModuleGetFunction(&l->fn, l->mod, k->name), "cuModuleGetFunction");
  /* above 48 KiB the function's limit is raised once, as tilua's launcher does */
  if (r == CUDA_SUCCESS && k->smem > SMEM_DEFAULT)
    r = check(drv.cuFuncSetAttribute(l->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     (int)k->smem),
              "cuFuncSetAttribute (the dynamic shared memory)");
  if (r != CUDA_SUCCESS) {
    if (l->mod) drv.cuModuleUnload(l->mod);
    free(l);
    return r;
  }
  l->next = k->loaded;
  k->loaded = l;
  *out = l;
  return CUDA_SUCCESS;
}

/* The current context in *ctx; refused, with the runtime's own message, when
** there is none (loading a kernel and encoding a tensor map both need one). */
static CUresult current_context(CUcontext *ctx) {
  *ctx = NULL;
  CUresult r = check(drv.cuCtxGetCurrent(ctx), "cuCtxGetCurrent");
  if (r != CUDA_SUCCESS) return r;
  if (!*ctx)
    return tilua_fail(CUDA_ERROR_INVALID_CONTEXT,
                      "no CUDA context is current (tilua_use_device makes one)");
  return CUDA_SUCCESS;
}

CUresult tilua_kernel_load(tilua_kernel *k, CUfunction *out) {
  LOAD_DRIVER();
  CUcontext ctx;
  CUresult r = current_context(&ctx);
  if (r != CUDA_SUCCESS) return r;
  tilua_loaded *l = k->loaded;
  while (l && l->ctx != ctx)
    l = l->next;
  if (!l && (r = load(k, ctx, &l)) != CUDA_SUCCESS) return r;
  *out = l->fn;
  return CUDA_SUCCESS;
}

/* }====================================================================== */

/* {======================================================================
** Launches
** ======================================================================= */

/* Graphs being captured, for the launches to record themselves in. */
struct tilua_graph {
  CUstream stream;
  CUgraph graph;
  CUgraphExec exec;
  int n, cap;
  struct {
    CUgraphNode node;
    tilua_kernel *k;
  } * nodes;
  tilua_graph *next; /* in the list of captures */
};
static tilua_graph *capturing;

static CUresult record_node(tilua_kernel *k, CUstream stream);

CUresult tilua_max_active_clusters(tilua_kernel *k, int *out) {
  CUfunction fn;
  CUresult r = tilua_kernel_load(k, &fn);
  if (r != CUDA_SUCCESS) return r;
  CUlaunchAttribute a;
  memset(&a, 0, sizeof a);
  a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  a.value.clusterDim.x = k->cluster[0], a.value.clusterDim.y = k->cluster[1];
  a.value.clusterDim.z = k->cluster[2];
  CUlaunchConfig cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.gridDimX = k->cluster[0], cfg.gridDimY = k->cluster[1], cfg.gridDimZ = k->cluster[2];
  cfg.blockDimX = k->block[0], cfg.blockDimY = k->block[1], cfg.blockDimZ = k->block[2];
  cfg.sharedMemBytes = k->smem, cfg.attrs = &a, cfg.numAttrs = 1;
  *out = 0;
  return check(drv.cuOccupancyMaxActiveClusters(out, fn, &cfg), "cuOccupancyMaxActiveClusters");
}

CUresult tilua_launch(tilua_kernel *k, CUstream stream, tilua_dim3 grid, void **params) {
  CUfunction fn;
  CUresult r = tilua_kernel_load(k, &fn);
  if (r != CUDA_SUCCESS) return r;
  const unsigned g[3] = {grid.x, grid.y, grid.z}, *c = k->cluster;
  for (int i = 0; i < 3; i++)
    if (g[i] == 0 || g[i] % c[i])
      return tilua_fail(CUDA_ERROR_INVALID_VALUE,
                        "kernel '%s': grid.%c = %u is not a positive multiple of its cluster's %u",
                        k->name, "xyz"[i], g[i], c[i]);
  CUlaunchAttribute attrs[2];
  unsigned n = 0;
  memset(attrs, 0, sizeof attrs);
  if (c[0] * c[1] * c[2] > 1) {
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[n].value.clusterDim.x = c[0], attrs[n].value.clusterDim.y = c[1];
    attrs[n++].value.clusterDim.z = c[2];
  }
  if (k->pdl) {
    attrs[n].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attrs[n++].value.programmaticStreamSerializationAllowed = 1;
  }
  if (n) {
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = g[0], cfg.gridDimY = g[1], cfg.gridDimZ = g[2];
    cfg.blockDimX = k->block[0], cfg.blockDimY = k->block[1], cfg.blockDimZ = k->block[2];
    cfg.sharedMemBytes = k->smem, cfg.hStream = stream, cfg.attrs = attrs, cfg.numAttrs = n;
    r = drv.cuLaunchKernelEx(&cfg, fn, params, NULL);
  } else {
    r = drv.cuLaunchKernel(fn, g[0], g[1], g[2], k->block[0], k->block[1], k->block[2], k->smem,
                           stream, params, NULL);
  }
  if (r != CUDA_SUCCESS) return check(r, k->name);
  return capturing ? record_node(k, stream) : CUDA_SUCCESS;
}

CUresult tilua_tensor_map(CUtensorMap *map, const char *dtype, int rank, CUdeviceptr base,
                          const int64_t *shape, const int64_t *strides, const int64_t *box,
                          int swizzle) {
  LOAD_DRIVER();
  CUcontext ctx;
  CUresult r = current_context(&ctx);
  if (r != CUDA_SUCCESS) return r;
  TltmSpec s;
  TltmDesc d;
  memset(&s, 0, sizeof s);
  if (rank < 1 || rank > TLTM_MAX_RANK)
    return tilua_fail(CUDA_ERROR_INVALID_VALUE, "tensor_map: rank %d", rank);
  s.dtype = dtype, s.rank = rank, s.address = base, s.swizzle = swizzle, s.l2 = TLTM_L2_DEFAULT,
  s.oob = TLTM_OOB_ZERO;
  for (int i = 0; i < rank; i++)
    s.shape[i] = shape[i], s.strides[i] = strides ? strides[i] : 0, s.box[i] = box[i];
  const char *why = tltm_describe(&s, &d, last_error, sizeof last_error);
  if (why) return CUDA_ERROR_INVALID_VALUE;
  return check(drv.cuTensorMapEncodeTiled(map, d.dtype, d.rank, (void *)(uintptr_t)d.address,
                                          d.dims, d.strides, d.box, d.elem_strides, d.interleave,
                                          d.swizzle, d.l2_promotion, d.oob_fill),
               "cuTensorMapEncodeTiled");
}

/* }====================================================================== */

/* {======================================================================
** Graphs
** ======================================================================= */

/* After a launch on a capturing stream: the node it became is the capture's dependency now. */
static CUresult record_node(tilua_kernel *k, CUstream stream) {
  tilua_graph *g = capturing;
  while (g && g->stream != stream)
    g = g->next;
  if (!g) return CUDA_SUCCESS;
  CUstreamCaptureStatus st;
  cuuint64_t id;
  CUgraph graph;
  const CUgraphNode *deps = NULL;
  size_t ndeps = 0;
  CUresult r = check(drv.cuStreamGetCaptureInfo(stream, &st, &id, &graph, &deps, &ndeps),
                     "cuStreamGetCaptureInfo");
  if (r != CUDA_SUCCESS) return r;
  if (ndeps != 1)
    return tilua_fail(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "kernel '%s': no single node captured",
                      k->name);
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 16;
    void *p = realloc(g->nodes, (size_t)cap * sizeof *g->nodes);
    if (!p) return tilua_fail(CUDA_ERROR_OUT_OF_MEMORY, "out of host memory capturing a graph");
    g->nodes = p, g->cap = cap;
  }
  g->nodes[g->n].node = deps[0], g->nodes[g->n].k = k;
  g->n++;
  return CUDA_SUCCESS;
}

static void unlist(tilua_graph *g) {
  for (tilua_graph **p = &capturing; *p; p = &(*p)->next)
    if (*p == g) {
      *p = g->next;
      return;
    }
}

CUresult tilua_graph_begin(tilua_graph **out, CUstream stream) {
  LOAD_DRIVER();
  *out = NULL;
  if (!stream)
    return tilua_fail(CUDA_ERROR_INVALID_VALUE,
                      "tilua_graph_begin: the default stream cannot be captured");
  tilua_graph *g = calloc(1, sizeof *g);
  if (!g) return tilua_fail(CUDA_ERROR_OUT_OF_MEMORY, "out of host memory for a graph");
  CUresult r = check(drv.cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED),
                     "cuStreamBeginCapture");
  if (r != CUDA_SUCCESS) return free(g), r;
  g->stream = stream;
  g->next = capturing;
  capturing = g;
  *out = g;
  return CUDA_SUCCESS;
}

CUresult tilua_graph_end(tilua_graph *g) {
  if (!g || !g->stream) return tilua_fail(CUDA_ERROR_INVALID_VALUE, "tilua_graph_end: no capture");
  unlist(g);
  CUresult r = check(drv.cuStreamEndCapture(g->stream, &g->graph), "cuStreamEndCapture");
  g->stream = NULL;
  if (r == CUDA_SUCCESS)
    r = check(drv.cuGraphInstantiateWithFlags(&g->exec, g->graph, 0),
              "cuGraphInstantiateWithFlags");
  return r;
}

CUresult tilua_graph_launch(tilua_graph *g, CUstream stream) {
  if (!g || !g->exec)
    return tilua_fail(CUDA_ERROR_INVALID_VALUE,
                      "tilua_graph_launch: the graph is not instantiated");
  return check(drv.cuGraphLaunch(g->exec, stream), "cuGraphLaunch");
}

int tilua_graph_nodes(const tilua_graph *g) { return g ? g->n : 0; }

CUresult tilua_graph_set(tilua_graph *g, int node, tilua_kernel *k, tilua_dim3 grid,
                         void **params) {
  if (!g || !g->exec)
    return tilua_fail(CUDA_ERROR_INVALID_VALUE, "tilua_graph_set: the graph is not instantiated");
  if (node < 0 || node >= g->n)
    return tilua_fail(CUDA_ERROR_INVALID_VALUE,
                      "tilua_graph_set: node %d of a graph of %d kernel launches", node, g->n);
  if (g->nodes[node].k != k)
    return tilua_fail(CUDA_ERROR_INVALID_VALUE,
                      "tilua_graph_set: node %d launches kernel '%s', not '%s'", node,
                      g->nodes[node].k->name, k->name);
  CUfunction fn;
  CUresult r = tilua_kernel_load(k, &fn);
  if (r != CUDA_SUCCESS) return r;
  const unsigned gd[3] = {grid.x, grid.y, grid.z};
  for (int i = 0; i < 3; i++) /* the node keeps the cluster it was captured with */
    if (gd[i] == 0 || gd[i] % k->cluster[i])
      return tilua_fail(CUDA_ERROR_INVALID_VALUE,
                        "kernel '%s': grid.%c = %u is not a positive multiple of its cluster's %u",
                        k->name, "xyz"[i], gd[i], k -> cluster[i]);
  CUDA_KERNEL_NODE_PARAMS p;
  memset(&p, 0, sizeof p);
  p.func = fn, p.gridDimX = grid.x, p.gridDimY = grid.y, p.gridDimZ = grid.z;
  p.blockDimX = k->block[0], p.blockDimY = k->block[1], p.blockDimZ = k->block[2];
  p.sharedMemBytes = k->smem, p.kernelParams = params;
  return check(drv.cuGraphExecKernelNodeSetParams(g->exec, g->nodes[node].node, &p),
               "cuGraphExecKernelNodeSetParams");
}

void tilua_graph_destroy(tilua_graph *g) {
  if (!g) return;
  if (g->stream) { /* still capturing: end it, drop what it made */
    unlist(g);
    if (drv.cuStreamEndCapture(g->stream, &g->graph) != CUDA_SUCCESS) g->graph = NULL;
  }
  if (g->exec) drv.cuGraphExecDestroy(g->exec);
  if (g->graph) drv.cuGraphDestroy(g->graph);
  free(g->nodes);
  free(g);
}

/* }====================================================================== */
