/*
** nccl.c -- NCCL through dlopen (see nccl.h). The table of nccl_syms.def is
** filled with dlsym; a library without one of its rows is refused whole.
*/
#define _POSIX_C_SOURCE 200809L
#include "nccl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
#define TLNCCL_SYM(name, params) ncclResult_t(*name) params;
#define TLNCCL_STR(name, params) const char *(*name)params;
#include "nccl_syms.def"
#undef TLNCCL_SYM
#undef TLNCCL_STR
  void *lib;
  int tried, version;
  char why[600];
} nc;

/* NVLink multicast off in this process and in the ones it starts, unless the
** user chose otherwise (setenv without overwriting). */
static void multicast_off(void) {
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 0);
  setenv("NVSHMEM_DISABLE_NVLS", "1", 0);
}

static int load(void) {
  if (nc.tried) return nc.lib != NULL;
  nc.tried = 1;
  multicast_off();
  const char *env = getenv("TILUA_NCCL"), *name = env && *env ? env : TLNCCL_LIBNAME;
  void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(
        nc.why, sizeof nc.why,
        "NCCL not found: dlopen(\"%s\"): %s; install NCCL (libnccl.so.2 on the library path) or set TILUA_NCCL "
        "to its path",
        name, dlerror());
    return 0;
  }
  void *p;
#define TLNCCL_SYM(sym, params)                                                                    \
  p = dlsym(lib, #sym);                                                                            \
  if (!p) {                                                                                        \
    snprintf(nc.why, sizeof nc.why, "%s has no %s: not NCCL, or one older than 2.18", name, #sym); \
    dlclose(lib);                                                                                  \
    return 0;                                                                                      \
  }                                                                                                \
  memcpy(&nc.sym, &p, sizeof p);
#define TLNCCL_STR TLNCCL_SYM
#include "nccl_syms.def"
#undef TLNCCL_SYM
#undef TLNCCL_STR
  nc.lib = lib;
  if (nc.ncclGetVersion(&nc.version) != 0) nc.version = 0;
  return 1;
}

int tlnccl_available(char *err, size_t n) {
  if (load()) return 1;
  snprintf(err, n, "%s", nc.why);
  return 0;
}

int tlnccl_version(void) { return load() ? nc.version : 0; }

const char *tlnccl_op_name(TlncclOpKind k) {
  static const char *const names[] = {
#define TLNCCL_OP_NAME(name, fn) #name,
      TLNCCL_OPS(TLNCCL_OP_NAME)
#undef TLNCCL_OP_NAME
  };
  return (unsigned)k < TLNCCL_NOPS ? names[k] : "?";
}

/* 0, or the call's failure in err: "<call>: <error string>[: <last error>]". */
static int check(ncclResult_t r, const char *call, ncclComm_t comm, char *err, size_t n) {
  if (r == 0) return 0;
  const char *last = nc.ncclGetLastError(comm);
  snprintf(err, n, "%s: %s (ncclResult_t %d)%s%s", call, nc.ncclGetErrorString(r), r,
           last && *last ? ": " : "", last ? last : "");
  return 1;
}

#define NEED_NCCL()                                                                                \
  do {                                                                                             \
    if (!load()) return snprintf(err, n, "%s", nc.why), 1;                                         \
  } while (0)

int tlnccl_unique_id(ncclUniqueId *out, char *err, size_t n) {
  NEED_NCCL();
  return check(nc.ncclGetUniqueId(out), "ncclGetUniqueId", NULL, err, n);
}

int tlnccl_comm_init_rank(ncclComm_t *out, int nranks, const ncclUniqueId *id, int rank, char *err,
                          size_t n) {
  NEED_NCCL();
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return snprintf(err, n, "NCCL communicator: rank %d of %d ranks (ranks are 0..nranks-1)", rank,
                    nranks),
           1;
  *out = NULL;
  return check(nc.ncclCommInitRank(out, nranks, *id, rank), "ncclCommInitRank", NULL, err, n);
}

int tlnccl_comm_init_all(ncclComm_t *comms, int ndev, const int *devs, char *err, size_t n) {
  NEED_NCCL();
  if (ndev < 1) return snprintf(err, n, "NCCL communicators: %d devices asked", ndev), 1;
  return check(nc.ncclCommInitAll(comms, ndev, devs), "ncclCommInitAll", NULL, err, n);
}

int tlnccl_comm_destroy(ncclComm_t comm, char *err, size_t n) {
  NEED_NCCL();
  return check(nc.ncclCommDestroy(comm), "ncclCommDestroy", NULL, err, n);
}

int tlnccl_comm_info(ncclComm_t comm, int *nranks, int *rank, int *device, char *err, size_t n) {
  NEED_NCCL();
  return check(nc.ncclCommCount(comm, nranks), "ncclCommCount", comm, err, n) ||
         check(nc.ncclCommUserRank(comm, rank), "ncclCommUserRank", comm, err, n) ||
         check(nc.ncclCommCuDevice(comm, device), "ncclCommCuDevice", comm, err, n);
}

int tlnccl_call(const TlncclOp *o, char *err, size_t n) {
  NEED_NCCL();
  const void *s = (const void *)(uintptr_t)o->send;
  void *r = (void *)(uintptr_t)o->recv;
  ncclResult_t st;
  switch (o->kind) {
  case TLNCCL_OP_all_reduce:
    st = nc.ncclAllReduce(s, r, o->count, o->dtype, o->redop, o->comm, o->stream);
    break;
  case TLNCCL_OP_broadcast:
    st = nc.ncclBroadcast(s, r, o->count, o->dtype, o->peer, o->comm, o->stream);
    break;
  case TLNCCL_OP_reduce:
    st = nc.ncclReduce(s, r, o->count, o->dtype, o->redop, o->peer, o->comm, o->stream);
    break;
  case TLNCCL_OP_all_gather:
    st = nc.ncclAllGather(s, r, o->count, o->dtype, o->comm, o->stream);
    break;
  case TLNCCL_OP_reduce_scatter:
    st = nc.ncclReduceScatter(s, r, o->count, o->dtype, o->redop, o->comm, o->stream);
    break;
  case TLNCCL_OP_send: st = nc.ncclSend(s, o->count, o->dtype, o->peer, o->comm, o->stream); break;
  case TLNCCL_OP_recv: st = nc.ncclRecv(r, o->count, o->dtype, o->peer, o->comm, o->stream); break;
  default: return snprintf(err, n, "NCCL: unknown call %d", (int)o->kind), 1;
  }
  char call[64];
  snprintf(call, sizeof call, "nccl %s", tlnccl_op_name(o->kind));
  return check(st, call, o->comm, err, n);
}

int tlnccl_group_start(char *err, size_t n) {
  NEED_NCCL();
  return check(nc.ncclGroupStart(), "ncclGroupStart", NULL, err, n);
}

int tlnccl_group_end(char *err, size_t n) {
  NEED_NCCL();
  return check(nc.ncclGroupEnd(), "ncclGroupEnd", NULL, err, n);
}
