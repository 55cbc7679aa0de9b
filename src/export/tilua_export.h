/*
** tilua_export.h -- the runtime of the C that `tilua export` writes: kernels
** compiled by tilua, launched from a C or C++ host with nothing but the CUDA
** driver (docs/embedding.md).
**
** Every export holds this file and tilua_export.c beside the generated
** NAME.h / NAME.c of each kernel; a program that links several exports
** compiles one copy of tilua_export.c. It is plain C11:
**
**   cc -std=c11 -c tilua_export.c NAME.c       the driver opened with dlopen
**                                              (libcuda.so.1, or TILUA_LIBCUDA)
**   cc -std=c11 -DTILUA_EXPORT_LINK_CUDA ...   the driver linked (-lcuda)
**
** Either way the entry points come from cuGetProcAddress_v2 at CUDA 12.0, as
** in tilua itself (tilua_cuda_syms.def), so both modes call the same ABI.
**
** The driver's types come from tilua_cuda_types.h, or from cuda.h when the
** host includes cuda.h before this header.
**
** Kernels load on their first launch in the current CUDA context (a cubin for
** sm_90a when the export has one and the device is sm_90, else the PTX
** through the driver's JIT); tilua_use_device makes a device's primary
** context current for a host that has none of its own. Functions return the
** driver's CUresult; a failure that the driver did not report (an argument
** refused here, the JIT's log) is also described by tilua_last_error().
** The first launch of a kernel in a context should not race with another
** (load it first with tilua_kernel_load from one thread); after that, launches
** may come from any thread that has the context current.
*/
#ifndef TILUA_EXPORT_H
#define TILUA_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "../cuda/cuda_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A grid, in blocks (CTAs), or a grid of tile programs. */
typedef struct tilua_dim3 {
  unsigned int x, y, z;
} tilua_dim3;

/* A tensor for a launcher: its device address, shape (outermost first) and
** strides in elements (all zero: contiguous, row-major). */
typedef struct tilua_tensor {
  CUdeviceptr base;
  int64_t shape[5];
  int64_t strides[5];
} tilua_tensor;

/* The driver's entry points, one member per row of tilua_cuda_syms.def. */
typedef struct tilua_driver {
#define TLCU_SYM(name, ret, params) ret(*name) params;
#include "../cuda/cuda_syms.def"
#undef TLCU_SYM
} tilua_driver;

/* Open the driver and cuInit once (every call below does it first). */
CUresult tilua_driver_load(void);
/* The entry points (NULL until tilua_driver_load succeeded): for a host that
** opens the driver through the export too (allocations, copies). */
const tilua_driver *tilua_driver_get(void);
/* Retain device `ordinal`'s primary context and make it current on this thread. */
CUresult tilua_use_device(int ordinal);
/* What the last failing call on this thread said ("" when none failed). */
const char *tilua_last_error(void);
/* Say why a call fails (printf-style) and return r: for the generated code. */
CUresult tilua_fail(CUresult r, const char *fmt, ...);
/* Streaming multiprocessors of the current context's device (grids of persistent kernels). */
CUresult tilua_sm_count(int *out);

/* {======================================================================
** Kernels (the generated NAME.c defines one and its typed launchers)
** ======================================================================= */

typedef struct tilua_loaded tilua_loaded;

typedef struct tilua_kernel {
  const char *name;           /* the PTX entry */
  const char *ptx;            /* NUL-terminated */
  const unsigned char *cubin; /* for sm_<cubin_sm>a, or NULL */
  size_t cubin_bytes;
  int cubin_sm;            /* 90: loaded on compute capability 9.0 only */
  unsigned int block[3];   /* threads, as the kernel was compiled for */
  unsigned int cluster[3]; /* CTAs; all 1: no cluster */
  unsigned int smem;       /* dynamic shared memory, bytes (static included) */
  int nparams;
  tilua_loaded *loaded; /* its function in each context it was loaded in */
  int pdl;              /* launched as a programmatic dependent launch (docs/runtime.md) */
} tilua_kernel;

/* The kernel's function in the current context, loading its module the first time. */
CUresult tilua_kernel_load(tilua_kernel *k, CUfunction *out);
/* How many clusters of the kernel (its block, cluster and shared memory) can be
** resident at once on the current device (cuOccupancyMaxActiveClusters): the
** size of a persistent grid of clusters. */
CUresult tilua_max_active_clusters(tilua_kernel *k, int *out);
/* Launch on `stream` (0: the default stream) with a pointer to each parameter's value;
** the grid is in blocks, a multiple of the cluster. Recorded when the stream captures a graph. */
CUresult tilua_launch(tilua_kernel *k, CUstream stream, tilua_dim3 grid, void **params);

/* A tensor map of `dtype` (tilua's names: "bf16", "f16", "f32", "i8", ...) over
** `base` with `rank` dimensions, box and swizzle (bytes), encoded as tilua's
** launcher encodes it (tilua_tensor_map.h: the same rules and defaults). */
CUresult tilua_tensor_map(CUtensorMap *map, const char *dtype, int rank, CUdeviceptr base,
                          const int64_t *shape, const int64_t *strides, const int64_t *box,
                          int swizzle);

/* }====================================================================== */

/* {======================================================================
** CUDA graphs: the launches made on a stream between begin and end are
** captured (any launch of the export, and whatever else the host issues on
** that stream), then replayed by tilua_graph_launch; the i-th kernel launch of
** the export is node i, whose arguments NAME_graph_set changes between replays.
** The captures in progress are the process's: begin and end them from one
** thread at a time.
** ======================================================================= */

typedef struct tilua_graph tilua_graph;

/* Begin capturing `stream` (not the default stream: create one). */
CUresult tilua_graph_begin(tilua_graph **out, CUstream stream);
/* End the capture and instantiate the graph. */
CUresult tilua_graph_end(tilua_graph *g);
/* Replay on `stream`. */
CUresult tilua_graph_launch(tilua_graph *g, CUstream stream);
/* The kernel launches captured (node indices 0 .. n-1). */
int tilua_graph_nodes(const tilua_graph *g);
/* Node `node`'s kernel (which must be k), grid and arguments for the next replays. */
CUresult tilua_graph_set(tilua_graph *g, int node, tilua_kernel *k, tilua_dim3 grid, void **params);
/* End a capture still running and free everything. */
void tilua_graph_destroy(tilua_graph *g);

/* }====================================================================== */

#ifdef __cplusplus
}
#endif

#endif
