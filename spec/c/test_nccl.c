/*
** test_nccl.c -- src/cuda/nccl.c against the stand-in NCCL (spec/c/fake_nccl.c,
** TILUA_FAKE_NCCL): the loader, the multicast switches, and communicators of
** every device of one process (ncclCommInitAll), whose calls go in a group.
** The stand-in works on host memory, so the buffers here are plain arrays.
** Without the stand-in (outside ctest) it exits 77: skipped.
*/
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/nccl.h"

#define NDEV 3
#define N 5000

static int failures;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      failures++;                                                                                  \
      fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                              \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
    }                                                                                              \
  } while (0)

static float value(int r, int i) { return (float)((r * 5 + i * 3) % 17 - 8); }

/* A missing library: the reason names it; the switches are set all the same. */
static void missing(void) {
  char err[1024];
  setenv("TILUA_NCCL", "/nonexistent/libnccl.so.2", 1);
  unsetenv("NCCL_NVLS_ENABLE");
  setenv("NVSHMEM_DISABLE_NVLS", "7", 1); /* the user's own value stays */
  CHECK(!tlnccl_available(err, sizeof err), "a missing NCCL was found");
  CHECK(strstr(err, "NCCL not found: dlopen(\"/nonexistent/libnccl.so.2\")") != NULL, "message: %s",
        err);
  const char *nvls = getenv("NCCL_NVLS_ENABLE"), *nvshmem = getenv("NVSHMEM_DISABLE_NVLS");
  CHECK(nvls && !strcmp(nvls, "0"), "NCCL_NVLS_ENABLE is %s, not 0", nvls ? nvls : "unset");
  CHECK(nvshmem && !strcmp(nvshmem, "7"), "NVSHMEM_DISABLE_NVLS was overwritten: %s",
        nvshmem ? nvshmem : "unset");
  ncclComm_t c;
  ncclUniqueId id;
  CHECK(tlnccl_comm_init_rank(&c, 2, &id, 0, err, sizeof err) && strstr(err, "NCCL not found"),
        "init: %s", err);
}

/* NDEV communicators of one process; every call of one step in one group. */
static void one_process(void) {
  char err[1024];
  ncclComm_t comms[NDEV];
  int devs[NDEV] = {0, 1, 2};
  CHECK(tlnccl_available(err, sizeof err), "the stand-in NCCL: %s", err);
  CHECK(tlnccl_version() == 22803, "version %d", tlnccl_version());
  if (tlnccl_comm_init_all(comms, NDEV, devs, err, sizeof err)) {
    CHECK(0, "ncclCommInitAll: %s", err);
    return;
  }
  for (int r = 0; r < NDEV; r++) {
    int n, rank, dev;
    CHECK(!tlnccl_comm_info(comms[r], &n, &rank, &dev, err, sizeof err) && n == NDEV && rank == r &&
              dev == r,
          "comm %d: %d ranks, rank %d, device %d", r, n, rank, dev);
  }
  static float send[NDEV][N * NDEV], recv[NDEV][N * NDEV];
  for (int r = 0; r < NDEV; r++)
    for (int i = 0; i < N * NDEV; i++)
      send[r][i] = value(r, i);
  /* all-reduce (sum) */
  CHECK(!tlnccl_group_start(err, sizeof err), "%s", err);
  for (int r = 0; r < NDEV; r++) {
    TlncclOp op = {TLNCCL_OP_all_reduce,
                   comms[r],
                   (uint64_t)(uintptr_t)send[r],
                   (uint64_t)(uintptr_t)recv[r],
                   N,
                   TLNCCL_FLOAT32,
                   TLNCCL_SUM,
                   0,
                   NULL};
    CHECK(!tlnccl_call(&op, err, sizeof err), "all_reduce %d: %s", r, err);
  }
  CHECK(!tlnccl_group_end(err, sizeof err), "%s", err);
  for (int r = 0; r < NDEV; r++)
    for (int i = 0; i < N; i++)
      if (recv[r][i] != value(0, i) + value(1, i) + value(2, i)) {
        CHECK(0, "all_reduce: rank %d element %d is %g", r, i, recv[r][i]);
        break;
      }
  /* reduce-scatter (max) and a ring of sends, in one group */
  static float ring[NDEV][N];
  CHECK(!tlnccl_group_start(err, sizeof err), "%s", err);
  for (int r = 0; r < NDEV; r++) {
    TlncclOp rs = {TLNCCL_OP_reduce_scatter,
                   comms[r],
                   (uint64_t)(uintptr_t)send[r],
                   (uint64_t)(uintptr_t)recv[r],
                   N,
                   TLNCCL_FLOAT32,
                   TLNCCL_MAX,
                   0,
                   NULL};
    TlncclOp s = {TLNCCL_OP_send, comms[r], (uint64_t)(uintptr_t)send[r], 0, N, TLNCCL_FLOAT32, 0,
                  (r + 1) % NDEV, NULL};
    TlncclOp v = {
        TLNCCL_OP_recv,        comms[r], 0, (uint64_t)(uintptr_t)ring[r], N, TLNCCL_FLOAT32, 0,
        (r + NDEV - 1) % NDEV, NULL};
    CHECK(!tlnccl_call(&rs, err, sizeof err) && !tlnccl_call(&s, err, sizeof err) &&
              !tlnccl_call(&v, err, sizeof err),
          "rank %d: %s", r, err);
  }
  CHECK(!tlnccl_group_end(err, sizeof err), "%s", err);
  for (int r = 0; r < NDEV; r++)
    for (int i = 0; i < N; i++) {
      float m = value(0, r * N + i);
      for (int q = 1; q < NDEV; q++)
        m = value(q, r * N + i) > m ? value(q, r * N + i) : m;
      if (recv[r][i] != m || ring[r][i] != value((r + NDEV - 1) % NDEV, i)) {
        CHECK(0, "rank %d element %d: reduce_scatter %g (want %g), ring %g", r, i, recv[r][i], m,
              ring[r][i]);
        break;
      }
    }
  /* a bad peer: NCCL's message and its last error */
  TlncclOp bad = {TLNCCL_OP_send, comms[0], (uint64_t)(uintptr_t)send[0], 0, 1, TLNCCL_FLOAT32, 0,
                  NDEV + 1,       NULL};
  CHECK(tlnccl_call(&bad, err, sizeof err) && strstr(err, "nccl send: invalid argument") &&
            strstr(err, "peer out of range"),
        "bad peer: %s", err);
  for (int r = 0; r < NDEV; r++)
    CHECK(!tlnccl_comm_destroy(comms[r], err, sizeof err), "destroy: %s", err);
}

int main(int argc, char **argv) {
  const char *fake = getenv("TILUA_FAKE_NCCL");
  if (!fake || !*fake) {
    puts("SKIP: TILUA_FAKE_NCCL is not set (run through ctest)");
    return 77;
  }
  if (argc > 1 && !strcmp(argv[1], "missing")) {
    missing();
  } else {
    setenv("TILUA_NCCL", fake, 1);
    one_process();
  }
  if (!failures) puts("ok");
  return failures ? 1 : 0;
}
