/*
** cuda_rt.h -- the CUDA Driver API runtime: libcuda.so.1 opened with dlopen at
** first use, device queries, PTX modules through the driver JIT, launches with
** cluster dimensions and dynamic shared memory, device memory, events.
**
** No CUDA header or SDK is needed to build this: the few driver types below are
** declared with the layout of CUDA 13.0's cuda.h (do not include both in one
** file). Only cuGetProcAddress_v2 and cuInit are looked up with dlsym; every
** other entry point comes from cuGetProcAddress_v2 by its plain name at CUDA
** 12.0 (see cuda_syms.def), which gives the ABI these prototypes declare.
**
** Every function returns a TlcuResult. On failure it leaves a message in the
** runtime's error buffer (tlcu_error); nothing aborts, prints or longjmps. A
** failing driver call reads `<call text>: <CUDA_ERROR_NAME> (<error string>)`.
**
** Launches have a deadline. Every launch records an event; before any call
** that would block on the device (synchronize, copies, memset, frees, module
** unload, event waits) the runtime polls the events of the launches not yet
** seen finished, oldest first, each for at most the timeout (tlcu_set_timeout;
** counted from its launch, or from when the one before it was seen done). A
** kernel past it is reported as `<where>: kernel 'NAME' did not finish within
** T s` (TLCU_HUNG) and the runtime is wedged: it never touches the device
** again (every call fails with that message, shutdown releases nothing), and
** the process exits with status 1 at exit() without running the driver's own
** exit handlers, which would wait for the kernel. A kernel that failed is
** reported as `<where>: kernel 'NAME' failed: <CUDA_ERROR_NAME> (...)`.
** tlcu_kernel_report says when the message is one of those two.
** After a failed tlcu_init every call returns the init status and leaves the
** init message in place, so a caller can report "no GPU" once, anywhere.
**
** A TlcuRuntime starts zeroed (static, calloc or memset): that is the empty
** state, safe to shut down. Calls must come from a thread where the runtime's
** context is current: the one that called tlcu_init. Not thread-safe.
*/
#ifndef TILUA_CUDA_RT_H
#define TILUA_CUDA_RT_H

#include <stddef.h>
#include <stdint.h>

/* {======================================================================
** Driver types (CUDA 13.0 cuda.h layout, only what the runtime uses)
** ======================================================================= */

typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;

/* CUresult: the driver returns more codes than these; any int may arrive. */
typedef enum cudaError_enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_STUB_LIBRARY = 34,
  CUDA_ERROR_INSUFFICIENT_DRIVER = 35,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_UNKNOWN = 999
} CUresult;

typedef enum CUdevice_attribute_enum {
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97
} CUdevice_attribute;

typedef enum CUfunction_attribute_enum {
  CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
  CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
  CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3,
  CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
} CUfunction_attribute;

/* Size values go by value, cast to void *; on return they hold bytes written. */
typedef enum CUjit_option_enum {
  CU_JIT_INFO_LOG_BUFFER = 3,
  CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
  CU_JIT_ERROR_LOG_BUFFER = 5,
  CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
  CU_JIT_GENERATE_LINE_INFO = 13
} CUjit_option;

typedef enum CUlaunchAttributeID_enum {
  CU_LAUNCH_ATTRIBUTE_IGNORE = 0,
  CU_LAUNCH_ATTRIBUTE_COOPERATIVE = 2,
  CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
  CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE = 5
} CUlaunchAttributeID;

/* 64 bytes, 8-byte aligned like cuda.h's union (it holds pointers). */
typedef union CUlaunchAttributeValue_union {
  char pad[64];
  struct {
    unsigned int x, y, z;
  } clusterDim;
  int cooperative;
  void *align_ptr_;
  unsigned long long align_u64_;
} CUlaunchAttributeValue;

typedef struct CUlaunchAttribute_st {
  CUlaunchAttributeID id;
  char pad[8 - sizeof(CUlaunchAttributeID)];
  CUlaunchAttributeValue value;
} CUlaunchAttribute;

typedef struct CUlaunchConfig_st {
  unsigned int gridDimX, gridDimY, gridDimZ; /* in blocks, not clusters */
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes; /* dynamic shared memory per block */
  CUstream hStream;
  CUlaunchAttribute *attrs;
  unsigned int numAttrs;
} CUlaunchConfig;

_Static_assert(sizeof(CUlaunchAttribute) == 72, "CUlaunchAttribute must match cuda.h");
_Static_assert(sizeof(CUlaunchConfig) == 56, "CUlaunchConfig must match cuda.h");

/* }====================================================================== */

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

#define TLCU_MAX_PENDING 64 /* launch groups tracked at once; the oldest is waited for first */
/* Consecutive launches of one kernel from one script line on one stream share
** an event, up to this many: an event per launch costs the driver more than
** the launch. Their deadline is as many timeouts. */
#define TLCU_GROUP_MAX 8

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

/* A group of launches not yet seen finished. */
typedef struct TlcuPending {
  CUevent done;    /* recorded after the group's last launch (not yet while the group is open) */
  double launched; /* monotonic seconds, of the first launch */
  unsigned count;  /* launches in the group: consecutive, one function, line and stream */
  CUfunction fn;
  CUstream stream;
  char name[128];  /* the kernel */
  char where[256]; /* the launch in the script ("file:line"), or "" */
  TlcuHang *hang;  /* its debug-hangs records, or NULL */
} TlcuPending;

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
  const char *where;       /* the launch's place in the script, for reports (NULL: none) */
  TlcuHang *hang;          /* debug-hangs records (the launch takes them), or NULL */
  int smem_allowed;        /* the function's dynamic shared memory attribute already allows smem */
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
  TlcuPending pending[TLCU_MAX_PENDING]; /* launches not yet seen finished: a ring, oldest at phead */
  size_t npending, phead;
  int open; /* the newest group's event is not recorded yet: identical launches may join it */
  size_t reap_at; /* the list's length at which a launch next looks for finished groups */
  CUevent spare[TLCU_MAX_PENDING]; /* events of finished launches, for the next ones */
  size_t nspare;
  double timeout;  /* seconds a launch may run; 0: no limit */
  int kernel_msg;  /* the error message reports a kernel (hung or failed) */
  char jit_info[TLCU_LOG_SIZE];  /* info log of the last module load */
  char jit_error[TLCU_LOG_SIZE]; /* error log of the last module load */
  char err[TLCU_ERR_SIZE];       /* message of the last failure */
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

/* Launch with cuLaunchKernelEx; `args` points at each argument's value.
** Dynamic shared memory above 48 KiB raises the function's limit first. The
** launch gets a deadline (above) and takes cfg->hang, even when it fails. */
TlcuResult tlcu_launch(TlcuRuntime *rt, CUfunction f, const TlcuLaunch *cfg, void **args);
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
** aligned). dims and box innermost first; strides: rank - 1 byte strides of
** dimensions 1.. . The enums are the driver's (CUtensorMapDataType, ...). */
typedef struct TlcuTensorMapDesc {
  int dtype;
  unsigned int rank;
  CUdeviceptr address;
  uint64_t dims[5], strides[4];
  uint32_t box[5], elem_strides[5];
  int interleave, swizzle, l2_promotion, oob_fill;
} TlcuTensorMapDesc;
TlcuResult tlcu_tensor_map_encode(TlcuRuntime *rt, void *map, const TlcuTensorMapDesc *d);

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
TlcuResult tlcu_stream_synchronize(TlcuRuntime *rt, CUstream s);
TlcuResult tlcu_stream_wait_event(TlcuRuntime *rt, CUstream s, CUevent e);
/* The number of devices the driver sees (needs a good init). */
TlcuResult tlcu_device_count(TlcuRuntime *rt, int *out);

/* }====================================================================== */

#endif
