/*
** cuda_rt.h -- the CUDA Driver API runtime: libcuda.so.1 opened with dlopen at
** first use, device queries, PTX modules through the driver JIT, launches with
** cluster dimensions and dynamic shared memory, CUDA graphs captured from
** launches, device memory, events.
**
** No CUDA header or SDK is needed to build this: the driver types come from
** cuda_types.h (cuda.h's layout). Only cuGetProcAddress_v2 and cuInit are
** looked up with dlsym; every other entry point comes from cuGetProcAddress_v2
** by its plain name at CUDA 12.0 (see cuda_syms.def), which gives the ABI
** these prototypes declare.
**
** Every function returns a TlcuResult. On failure it leaves a message in the
** runtime's error buffer (tlcu_error); nothing aborts, prints or longjmps. A
** failing driver call reads `<call text>: <CUDA_ERROR_NAME> (<error string>)`.
**
** Launches cost what the driver's cost, and still have a deadline and a name.
** Each launch goes into a ring of records (kernel, the launch's place in the
** script; consecutive launches of one kernel from one place share one). An
** event, a check, is recorded after a window of launches: when the window
** holds TLCU_WINDOW launches (a count, not a time: the same script gives the
** same reports), and before any call that would block on the device
** (synchronize, copies, memset, frees, module unload, event waits), which
** then polls the checks not yet seen done, oldest first, each for at most the
** timeout times its launches
** (tlcu_set_timeout; counted from the window's first launch, or from when
** the check before it was seen done). A window past it is reported as
** `<where>: kernel 'NAME' did not finish within T s` (TLCU_HUNG) and the
** runtime is wedged: it never touches the device again (every call fails
** with that message, shutdown releases nothing), and the process exits with
** status 1 at exit() without running the driver's own exit handlers, which
** would wait for the kernel. A failure is reported as `<where>: kernel 'NAME'
** failed: <CUDA_ERROR_NAME> (...)`. When the window held launches from
** several places, the message names the first and lists them all (any one
** of them may have failed); tlcu_set_check_every(rt, 1), or
** TILUA_LAUNCH_CHECK=each at tlcu_init, checks after every launch, so that
** the one is named. tlcu_kernel_report says when the message is a report.
** After a failed tlcu_init every call returns the init status and leaves the
** init message in place, so a caller can report "no GPU" once, anywhere.
**
** A TlcuRuntime starts zeroed (static, calloc or memset): that is the empty
** state, safe to shut down. Several runtimes (one per device) may live in a
** process: every call makes its runtime's context current first (remembered
** per thread; tlcu_forget_current after a library that may switch contexts).
** Not thread-safe: one thread uses a runtime.
*/
#ifndef TILUA_CUDA_RT_H
#define TILUA_CUDA_RT_H

#include <stddef.h>
#include <stdint.h>

#include "cuda_types.h"
#include "tensor_map.h"

/* {======================================================================
** The runtime
** ======================================================================= */

#define TLCU_LIBNAME "libcuda.so.1"
#define TLCU_ABI_VERSION 12000 /* the CUDA version the prototypes follow */
#define TLCU_LOG_SIZE 16384    /* each JIT log buffer, NUL included */
#define TLCU_ERR_SIZE (TLCU_LOG_SIZE + 2048)

typedef enum {
  TLCU_OK = 0,
  TLCU_FAIL = 1,   /* a driver call or an argument failed: see tlcu_error */
  TLCU_NO_GPU = 2, /* no driver library or no device: compiling works, launching not */
  TLCU_HUNG = 3    /* a kernel did not finish in time: the runtime is wedged */
} TlcuResult;

typedef enum { TLCU_EMPTY = 0, TLCU_READY, TLCU_FAILED, TLCU_DOWN, TLCU_WEDGED } TlcuState;

#define TLCU_RECORDS 1024 /* launch records followed at once (a ring) */
#define TLCU_CHECKS 128   /* checks in flight (a ring) */
/* launches between two checks, at most: an event and its query cost the driver two launches */
#define TLCU_WINDOW 128

/* The debug-hangs records of one launch: mapped host memory the kernel writes
** (one slot per warp of the grid, layout in hang.h) and the host reads, even
** while the kernel hangs. Made by tlcu_hang_alloc, owned by the launch. */
typedef struct TlcuHang {
  void *host;
  CUdeviceptr dev;
  size_t slots;
  unsigned warps_per_block;
  char *sites; /* the wait sites, one per line: "file:line: what" */
} TlcuHang;

/* Consecutive launches of one kernel from one place on one stream, not yet
** seen finished. Its strings are the runtime's (tlcu_intern). */
typedef struct TlcuRecord {
  CUfunction fn;
  CUstream stream;
  const char *name; /* the kernel */
  const char *file; /* the launch in the script, or NULL */
  int line;
  unsigned count; /* launches */
  TlcuHang *hang; /* its debug-hangs records, or NULL (then count is 1) */
  int graph;      /* replays of a graph (name: "graph of N kernels") */
} TlcuRecord;

/* An event recorded after the records before record number `end`. */
typedef struct TlcuCheck {
  CUevent done;
  uint64_t end;      /* its window: the records from the check before it up to end */
  unsigned launches; /* in its window */
  double opened;     /* monotonic seconds of its window's first launch */
} TlcuCheck;

/* Interned strings: the kernels' names and the scripts' file names of the
** launch records, copied once, freed at shutdown. */
typedef struct TlcuStrings {
  char **slot; /* open addressing, a power of 2 */
  size_t cap, n;
  struct {
    const char *from, *to;
  } memo[64]; /* by the caller's pointer (verified by content) */
} TlcuStrings;

typedef struct TlcuGraph TlcuGraph;

/* The driver's function pointer table, one field per row of cuda_syms.def. */
typedef struct TlcuDriver {
#define TLCU_SYM(name, ret, params) ret(*name) params;
#include "cuda_syms.def"
#undef TLCU_SYM
} TlcuDriver;

typedef struct TlcuDeviceInfo {
  int ordinal;
  char name[256];
  int sm_count;
  int cc_major, cc_minor;
  int smem_optin;     /* max opt-in shared memory per block, bytes */
  size_t total_mem;   /* bytes */
  int driver_version; /* e.g. 13000 for CUDA 13.0 */
} TlcuDeviceInfo;

typedef struct TlcuFuncInfo {
  int num_regs;    /* registers per thread */
  int local_bytes; /* local memory per thread (spills) */
  int static_smem; /* static shared memory, bytes */
  int max_threads; /* max threads per block for this function */
} TlcuFuncInfo;

/* A launch. A zero in grid, block or cluster reads as 1. */
typedef struct TlcuLaunch {
  unsigned int grid[3];    /* in blocks, not clusters */
  unsigned int block[3];   /* threads */
  unsigned int smem;       /* dynamic shared memory per block, bytes */
  unsigned int cluster[3]; /* all <= 1: no cluster attribute */
  CUstream stream;         /* NULL: the default stream */
  const char *name;        /* the kernel, for reports (NULL: "kernel") */
  const char *file;        /* the launch's place in the script, for reports (NULL: none) */
  int line;
  TlcuHang *hang;   /* debug-hangs records (the launch takes them), or NULL */
  int smem_allowed; /* the function's dynamic shared memory attribute already allows smem */
  int pdl;          /* programmatic dependent launch: may start before the stream's previous
                    ** kernel finished (its griddepcontrol.wait waits for it) */
} TlcuLaunch;

/* Something the runtime holds and releases at shutdown. */
typedef struct TlcuHeld {
  int kind; /* TLCU_HELD_* in cuda_rt.c */
  uint64_t handle;
} TlcuHeld;

typedef struct TlcuRuntime {
  TlcuState state;
  TlcuResult init_status; /* what every call returns after a failed init */
  CUresult last;          /* the last failing driver result, else CUDA_SUCCESS */
  void *lib;              /* dlopen handle of libcuda */
  CUdevice dev;
  CUcontext ctx; /* the device's primary context, retained */
  TlcuDeviceInfo info;
  TlcuDriver drv;
  TlcuHeld *held; /* modules, allocations and events still alive */
  size_t nheld, capheld;
  /* the launches not yet seen finished (rings; record and check numbers only grow) */
  TlcuRecord rec[TLCU_RECORDS];
  uint64_t rec_head, rec_tail; /* the oldest record, the next one */
  TlcuCheck chk[TLCU_CHECKS];
  uint64_t chk_head, chk_tail;
  unsigned window;        /* launches since the last check */
  double window_opened;   /* when the first of them was launched */
  CUstream window_stream; /* ... on this stream */
  unsigned check_every;   /* TLCU_WINDOW, or 1 (tlcu_set_check_every) */
  int joinable;           /* the newest record is in the open window and may take the next launch */
  CUevent spare[TLCU_CHECKS]; /* events of finished checks, for the next ones */
  size_t nspare;
  TlcuStrings strings;
  /* graphs: launches captured into one, or setting its nodes' arguments */
  TlcuGraph *capture, *update;
  int update_next;               /* the node the next launch sets */
  CUstream capture_stream;       /* created at the first capture */
  double timeout;                /* seconds a launch may run; 0: no limit */
  int kernel_msg;                /* the error message reports a kernel (hung or failed) */
  char jit_info[TLCU_LOG_SIZE];  /* info log of the last module load */
  char jit_error[TLCU_LOG_SIZE]; /* error log of the last module load */
  char err[TLCU_ERR_SIZE];       /* message of the last failure */
  /* cuBLASLt's state for this runtime (blas.c): its handle, released by
  ** blas_release at shutdown, and its workspace (one of the held allocations) */
  void *blas_handle;
  void (*blas_release)(void *handle);
  CUdeviceptr blas_workspace;
} TlcuRuntime;

/* }====================================================================== */

/* {======================================================================
** API
** ======================================================================= */

/* Open the driver (TILUA_LIBCUDA or libcuda.so.1), cuInit, pick device
** `ordinal`, retain its primary context and make it current, read the device
** info. TLCU_NO_GPU when there is no driver library or no device. */
TlcuResult tlcu_init(TlcuRuntime *rt, int ordinal);
/* Same with an explicit library name or path (NULL: the default). */
TlcuResult tlcu_init_lib(TlcuRuntime *rt, int ordinal, const char *libname);
/* Release every event, allocation and module still held, then the primary
** context. The library stays mapped (the driver's threads live in it).
** Idempotent; fine on an empty or failed runtime. */
TlcuResult tlcu_shutdown(TlcuRuntime *rt);

const char *tlcu_error(const TlcuRuntime *rt); /* "" if nothing failed */
int tlcu_ready(const TlcuRuntime *rt);         /* 1 after a good init */
/* 1 when the last error reports a kernel that hung or failed (its message
** starts with the launch's place, not with a driver call). */
int tlcu_kernel_report(const TlcuRuntime *rt);
/* Seconds a launch may run before it is reported as hung (0: no limit). */
void tlcu_set_timeout(TlcuRuntime *rt, double seconds);
/* Launches between two checks (1: a check after each, naming a failure exactly). */
void tlcu_set_check_every(TlcuRuntime *rt, unsigned launches);
/* A copy of s that lives until shutdown (NULL for NULL): names for launch records. */
const char *tlcu_intern(TlcuRuntime *rt, const char *s);
/* Wait, within the deadlines, until every launch so far has finished. */
TlcuResult tlcu_finish(TlcuRuntime *rt);

TlcuResult tlcu_device_info(TlcuRuntime *rt, TlcuDeviceInfo *out);

/* Load NUL-terminated PTX text through the driver JIT. On failure the error
** holds the driver's error name and the JIT error log. */
TlcuResult tlcu_module_load_ptx(TlcuRuntime *rt, const char *ptx, CUmodule *out);
TlcuResult tlcu_module_unload(TlcuRuntime *rt, CUmodule mod);
const char *tlcu_jit_info_log(const TlcuRuntime *rt);  /* of the last load */
const char *tlcu_jit_error_log(const TlcuRuntime *rt); /* of the last load */

TlcuResult tlcu_function_get(TlcuRuntime *rt, CUmodule mod, const char *name, CUfunction *out);
TlcuResult tlcu_function_info(TlcuRuntime *rt, CUfunction f, TlcuFuncInfo *out);
TlcuResult tlcu_function_set_max_dynamic_smem(TlcuRuntime *rt, CUfunction f, unsigned int bytes);

/* Launch; `args` points at each argument's value. Dynamic shared memory above
** 48 KiB raises the function's limit first (unless cfg->smem_allowed). The
** launch gets a record and a deadline (above) and takes cfg->hang, even when
** it fails. While a graph captures, the launch becomes its next node; while
** one is updated, it sets the next node's arguments instead (below). */
TlcuResult tlcu_launch(TlcuRuntime *rt, CUfunction f, const TlcuLaunch *cfg, void **args);

/* CUDA graphs. tlcu_graph_begin: the launches from now on are captured into a
** new graph (on a stream of the runtime), not run; calls that would wait for
** the device fail until tlcu_graph_end, which instantiates it (on failure the
** graph is freed and *out is NULL). tlcu_graph_launch replays it on `stream`
** as one launch record (name: "graph of N kernels"). Between
** tlcu_graph_update_begin and _end the launches set the arguments and grids
** of nodes 0, 1, ... in turn: the same kernels, in the same order, with the
** same block and cluster; _end checks that every node was set. */
TlcuResult tlcu_graph_begin(TlcuRuntime *rt);
TlcuResult tlcu_graph_end(TlcuRuntime *rt, TlcuGraph **out);
TlcuResult tlcu_graph_launch(TlcuRuntime *rt, TlcuGraph *g, CUstream stream, const char *file,
                             int line);
int tlcu_graph_nodes(const TlcuGraph *g);
TlcuResult tlcu_graph_update_begin(TlcuRuntime *rt, TlcuGraph *g);
TlcuResult tlcu_graph_update_end(TlcuRuntime *rt);
void tlcu_graph_free(TlcuRuntime *rt, TlcuGraph *g);
/* Zeroed mapped host memory for `slots` debug-hangs slots (hang.h) and a
** copy of the sites; the kernel's extra parameter is (*out)->dev. */
TlcuResult tlcu_hang_alloc(TlcuRuntime *rt, size_t slots, unsigned warps_per_block,
                           const char *sites, TlcuHang **out);
void tlcu_hang_free(TlcuRuntime *rt, TlcuHang *h);

TlcuResult tlcu_mem_alloc(TlcuRuntime *rt, size_t bytes, CUdeviceptr *out);
TlcuResult tlcu_mem_free(TlcuRuntime *rt, CUdeviceptr p);
TlcuResult tlcu_memcpy_htod(TlcuRuntime *rt, CUdeviceptr dst, const void *src, size_t bytes);
TlcuResult tlcu_memcpy_dtoh(TlcuRuntime *rt, void *dst, CUdeviceptr src, size_t bytes);
TlcuResult tlcu_memcpy_dtod(TlcuRuntime *rt, CUdeviceptr dst, CUdeviceptr src, size_t bytes);
TlcuResult tlcu_memset_d8(TlcuRuntime *rt, CUdeviceptr dst, unsigned char value, size_t bytes);
TlcuResult tlcu_synchronize(TlcuRuntime *rt);

/* A tiled TMA tensor map (cuTensorMapEncodeTiled) into map (128 bytes, 64-byte
** aligned), from a description checked by tltm_describe (tensor_map.h). */
TlcuResult tlcu_tensor_map_encode(TlcuRuntime *rt, void *map, const TltmDesc *d);

/* Clusters of the launch's cluster shape that can be resident at once. */
TlcuResult tlcu_max_active_clusters(TlcuRuntime *rt, CUfunction f, const TlcuLaunch *cfg, int *out);

TlcuResult tlcu_event_create(TlcuRuntime *rt, CUevent *out);
TlcuResult tlcu_event_record(TlcuRuntime *rt, CUevent e, CUstream s);
TlcuResult tlcu_event_synchronize(TlcuRuntime *rt, CUevent e);
TlcuResult tlcu_event_elapsed_ms(TlcuRuntime *rt, CUevent start, CUevent end, float *ms);
TlcuResult tlcu_event_destroy(TlcuRuntime *rt, CUevent e);
/* An event without timing (cheaper to record): ordering between streams. */
TlcuResult tlcu_event_create_sync(TlcuRuntime *rt, CUevent *out);
/* 1 when every work recorded before e has finished, 0 when not yet. */
TlcuResult tlcu_event_query(TlcuRuntime *rt, CUevent e, int *done);

/* Streams: non-blocking (they never wait for the legacy default stream), held
** until destroyed or shutdown. Work on one stream waits for an event recorded
** on another with tlcu_stream_wait_event, without the host waiting. */
TlcuResult tlcu_stream_create(TlcuRuntime *rt, CUstream *out);
/* The same with the device's highest priority: its kernels take SMs first as
** they free up (collectives beside a GEMM that fills the device). */
TlcuResult tlcu_stream_create_high(TlcuRuntime *rt, CUstream *out);
TlcuResult tlcu_stream_destroy(TlcuRuntime *rt, CUstream s);
/* 1 when s is a stream this runtime made and has not destroyed. */
int tlcu_stream_held(const TlcuRuntime *rt, CUstream s);
TlcuResult tlcu_stream_synchronize(TlcuRuntime *rt, CUstream s);
TlcuResult tlcu_stream_wait_event(TlcuRuntime *rt, CUstream s, CUevent e);
/* Several devices in one process: a runtime each (every call makes its own
** context current first). Can rt's device reach peer's memory directly
** (NVLink or PCIe)? Let it (idempotent); copies between the two then go
** device to device. */
TlcuResult tlcu_peer_can_access(TlcuRuntime *rt, TlcuRuntime *peer, int *can);
/* Another library (NCCL's CUDA runtime) may have made another context current:
** the next call of any runtime makes its own current again. */
void tlcu_forget_current(void);
TlcuResult tlcu_peer_enable(TlcuRuntime *rt, TlcuRuntime *peer);
/* The number of devices the driver sees (needs a good init). */
TlcuResult tlcu_device_count(TlcuRuntime *rt, int *out);

/* }====================================================================== */

#endif
