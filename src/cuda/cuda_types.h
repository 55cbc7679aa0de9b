/*
** cuda_types.h -- the CUDA driver types tilua uses, declared with the layout
** of cuda.h (CUDA 12.0 ABI, checked against 13.0), so that nothing of the
** CUDA toolkit is needed to build tilua or the code `tilua export` writes.
**
** Self-contained (C11, <stddef.h> and <stdint.h> only): `tilua export` copies
** this file into every export as tilua_cuda_types.h. When cuda.h was included
** before it (CUDA_VERSION is defined), cuda.h's own declarations stand and
** nothing is declared here; include cuda.h first, or not at all.
**
** Only the enumerators tilua names are listed; any int may arrive as a
** CUresult. The entry points that take these types are the rows of
** cuda_syms.def.
*/
#ifndef TILUA_CUDA_TYPES_H
#define TILUA_CUDA_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifndef CUDA_VERSION

typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef uint64_t cuuint64_t;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraph_st *CUgraph;
typedef struct CUgraphNode_st *CUgraphNode;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUkern_st *CUkernel;

typedef enum cudaError_enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_STUB_LIBRARY = 34,
  CUDA_ERROR_INSUFFICIENT_DRIVER = 35,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
  CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
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

/* A kernel node's parameters (cuda.h's CUDA_KERNEL_NODE_PARAMS_v2, the one
** CUDA 12.0's cuGraphExecKernelNodeSetParams takes). */
typedef struct CUDA_KERNEL_NODE_PARAMS_v2_st {
  CUfunction func;
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  void **kernelParams;
  void **extra;
  CUkernel kern; /* used only when func is NULL */
  CUcontext ctx; /* ignored when func is set */
} CUDA_KERNEL_NODE_PARAMS;

typedef enum CUstreamCaptureStatus_enum {
  CU_STREAM_CAPTURE_STATUS_NONE = 0,
  CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
  CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2
} CUstreamCaptureStatus;

typedef enum CUstreamCaptureMode_enum {
  CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
  CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
  CU_STREAM_CAPTURE_MODE_RELAXED = 2
} CUstreamCaptureMode;

typedef enum CUstream_flags_enum {
  CU_STREAM_DEFAULT = 0,
  CU_STREAM_NON_BLOCKING = 1
} CUstream_flags;

/* A TMA tensor map: 128 opaque bytes, 64-byte aligned (cuda.h 13 asks 128). */
typedef struct CUtensorMap_st {
  _Alignas(64) cuuint64_t opaque[16];
} CUtensorMap;

_Static_assert(sizeof(CUlaunchAttribute) == 72, "CUlaunchAttribute must match cuda.h");
_Static_assert(sizeof(CUlaunchConfig) == 56, "CUlaunchConfig must match cuda.h");
_Static_assert(sizeof(CUDA_KERNEL_NODE_PARAMS) == 72, "CUDA_KERNEL_NODE_PARAMS must match cuda.h");
_Static_assert(sizeof(CUtensorMap) == 128, "CUtensorMap must match cuda.h");

#endif /* CUDA_VERSION */

#endif
