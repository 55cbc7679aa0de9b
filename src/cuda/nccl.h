/*
** nccl.h -- NCCL, opened with dlopen at first use like the driver: TILUA_NCCL,
** else libnccl.so.2 on the loader path. No NCCL header or link-time
** dependency: the few types are declared here with nccl.h's layout.
**
** NVLink multicast (NVLS) stays off: before NCCL is opened, tlnccl_load sets
** NCCL_NVLS_ENABLE=0 unless the user has set it (NCCL reads it when a
** communicator is made), and TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and
** NVSHMEM_DISABLE_NVLS=1 the same way, for the processes tilua's programs
** start. tilua never calls a multicast entry point (nccl_syms.def has none).
**
** Calls need the CUDA runtime of cuda_rt.h initialized on the device of the
** communicator (its primary context current: NCCL's CUDA runtime uses it).
** Every function returns 0 on success, else writes a message to err (at most
** n bytes): `<call>: <NCCL's error string>[: <NCCL's last error>]`.
*/
#ifndef TILUA_NCCL_H
#define TILUA_NCCL_H

#include <stddef.h>
#include <stdint.h>

#define TLNCCL_LIBNAME "libnccl.so.2"
#define TLNCCL_ID_BYTES 128

typedef struct ncclComm *ncclComm_t;
typedef struct {
  char internal[TLNCCL_ID_BYTES];
} ncclUniqueId;
typedef int ncclResult_t; /* ncclSuccess = 0 */

/* ncclDataType_t and ncclRedOp_t values (nccl.h) */
enum {
  TLNCCL_INT8 = 0,
  TLNCCL_UINT8 = 1,
  TLNCCL_INT32 = 2,
  TLNCCL_UINT32 = 3,
  TLNCCL_INT64 = 4,
  TLNCCL_UINT64 = 5,
  TLNCCL_FLOAT16 = 6,
  TLNCCL_FLOAT32 = 7,
  TLNCCL_FLOAT64 = 8,
  TLNCCL_BFLOAT16 = 9
};
enum { TLNCCL_SUM = 0, TLNCCL_PROD = 1, TLNCCL_MAX = 2, TLNCCL_MIN = 3, TLNCCL_AVG = 4 };

/* The collectives and point-to-point calls, X(name, nccl entry point). */
#define TLNCCL_OPS(X)                                                                              \
  X(all_reduce, ncclAllReduce)                                                                     \
  X(broadcast, ncclBroadcast)                                                                      \
  X(reduce, ncclReduce)                                                                            \
  X(all_gather, ncclAllGather)                                                                     \
  X(reduce_scatter, ncclReduceScatter)                                                             \
  X(send, ncclSend)                                                                                \
  X(recv, ncclRecv)

typedef enum {
#define TLNCCL_OP_ENUM(name, fn) TLNCCL_OP_##name,
  TLNCCL_OPS(TLNCCL_OP_ENUM)
#undef TLNCCL_OP_ENUM
      TLNCCL_NOPS
} TlncclOpKind;

/* One call. count: elements per rank as NCCL counts them (all_gather: what
** each rank sends; reduce_scatter: what each receives). peer: the root of
** broadcast and reduce, the other rank of send and recv. */
typedef struct TlncclOp {
  TlncclOpKind kind;
  ncclComm_t comm;
  uint64_t send, recv; /* device addresses (send and recv: recv unused / send unused) */
  size_t count;
  int dtype, redop, peer;
  void *stream; /* a CUstream; NULL: the default stream */
} TlncclOp;

/* Is NCCL there? 1, else 0 with the reason in err. Sets the multicast
** switches above first. */
int tlnccl_available(char *err, size_t n);
/* NCCL's version code (e.g. 22803 for 2.28.3), 0 when not loaded. */
int tlnccl_version(void);
/* "all_reduce", ... for an op kind. */
const char *tlnccl_op_name(TlncclOpKind k);

int tlnccl_unique_id(ncclUniqueId *out, char *err, size_t n);
/* One rank of a communicator of nranks processes (or threads), on the current device. */
int tlnccl_comm_init_rank(ncclComm_t *out, int nranks, const ncclUniqueId *id, int rank, char *err,
                          size_t n);
/* A communicator per device of devs (ndev of them) in this process: comms[i] on devs[i]. */
int tlnccl_comm_init_all(ncclComm_t *comms, int ndev, const int *devs, char *err, size_t n);
int tlnccl_comm_destroy(ncclComm_t comm, char *err, size_t n);
/* The communicator's size, this rank, its CUDA device. */
int tlnccl_comm_info(ncclComm_t comm, int *nranks, int *rank, int *device, char *err, size_t n);

int tlnccl_call(const TlncclOp *op, char *err, size_t n);
int tlnccl_group_start(char *err, size_t n);
int tlnccl_group_end(char *err, size_t n);

#endif
