/*
** fake_nccl.c -- a stand-in NCCL (libfakenccl.so) for the tests, loaded
** through TILUA_NCCL beside the stand-in driver (fake_cuda.c), whose device
** memory is host memory: the collectives run on the CPU, on those addresses.
**
** A communicator's ranks share a clique: shared memory (shm_open, named from
** the unique id) for ranks in different processes (ncclCommInitRank), or plain
** memory for the devices of one process (ncclCommInitAll). Each rank stages a
** chunk of its input in its slot, the ranks meet at a barrier (a counter in
** the clique), each computes its part of the output from every slot, and they
** meet again before the slots are reused. Send and receive go through a
** mailbox per ordered pair of ranks. Every call is a little state machine that
** a progress loop advances, so that ranks of one process (inside a group)
** advance together; a call outside a group returns when done, or, for ranks of
** one process, when the last of them has made its call. Streams are ignored:
** every call is done before it returns (or before the group ends).
**
** Like the real NCCL it refuses what tilua must not do: a communicator is
** refused unless NCCL_NVLS_ENABLE is "0" (NVLink multicast off). A rank that
** waits for the others longer than FAKE_NCCL_TIMEOUT seconds (default 60)
** fails with a system error instead of hanging.
*/
#define _GNU_SOURCE
#include <fcntl.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define CHUNK ((size_t)64 << 10)
#define MAX_OPS 256
#define MAX_COMMS 64

enum { SUCCESS = 0, SYSTEM_ERROR = 2, INTERNAL_ERROR = 3, INVALID_ARGUMENT = 4, INVALID_USAGE = 5 };
enum { ALL_REDUCE, BROADCAST, REDUCE, ALL_GATHER, REDUCE_SCATTER, SEND, RECV };
enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG };

typedef struct {
  char internal[128];
} ncclUniqueId;

/* The shared part of a clique: the header, then the slots, then the mailboxes. */
typedef struct Header {
  _Atomic uint64_t arrived; /* barrier arrivals so far */
  _Atomic int joined, left;
  int nranks;
} Header;
typedef struct Mailbox {
  _Atomic int full;
  size_t bytes;
} Mailbox;

typedef struct Clique {
  unsigned char *base;
  size_t size;
  int shared; /* shm (ranks in processes of their own) */
  int refs;   /* ranks of this process on it */
  char name[160];
} Clique;

typedef struct Op {
  int kind, dtype, redop, peer, phase;
  const unsigned char *send;
  unsigned char *recv;
  size_t count, off; /* elements per rank, done so far */
  uint64_t bar;      /* the barrier this rank waits for */
} Op;

typedef struct ncclComm {
  Clique *cl;
  int rank, nranks, device;
  uint64_t bars; /* barriers this rank has arrived at */
  Op ops[MAX_OPS];
  int nops;
  char last[256];
} * ncclComm_t;

static ncclComm_t comms[MAX_COMMS]; /* every live communicator of the process */
static int group_depth;
static char global_last[256];

/* {=== the clique's memory */
static Header *hdr(Clique *c) { return (Header *)c->base; }
static size_t slot_bytes(int n) { return (size_t)n * CHUNK; }
static unsigned char *slot(ncclComm_t c, int r) {
  return c->cl->base + 4096 + (size_t)r * slot_bytes(c->nranks);
}
static Mailbox *mailbox(ncclComm_t c, int from, int to) {
  unsigned char *m = c->cl->base + 4096 + (size_t)c->nranks * slot_bytes(c->nranks);
  return (Mailbox *)(m + ((size_t)from * c->nranks + to) * (CHUNK + 64));
}
static size_t clique_bytes(int n) {
  return 4096 + (size_t)n * slot_bytes(n) + (size_t)n * n * (CHUNK + 64);
}
/* }=== */

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static double timeout_s(void) {
  const char *t = getenv("FAKE_NCCL_TIMEOUT");
  return t && *t ? atof(t) : 60.0;
}
static void pause_us(long us) {
  struct timespec ts = {0, us * 1000};
  nanosleep(&ts, NULL);
}

static int fail(ncclComm_t c, int r, const char *msg) {
  snprintf(c ? c->last : global_last, sizeof global_last, "fake NCCL: %s", msg);
  if (c) snprintf(global_last, sizeof global_last, "fake NCCL: %s", msg);
  return r;
}

/* {=== element types: read as double, written back rounded */
static size_t esize(int t) {
  static const size_t s[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return t >= 0 && t <= 9 ? s[t] : 0;
}
static double half_to_d(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
  return h & 0x8000 ? -v : v;
}
static uint16_t d_to_half(double d) {
  uint16_t s = signbit(d) ? 0x8000 : 0;
  d = fabs(d);
  if (isnan(d)) return 0x7e00;
  if (d >= 65520.0) return s | 0x7c00;
  if (d < ldexp(1, -14)) return s | (uint16_t)nearbyint(ldexp(d, 24));
  int e;
  double f = frexp(d, &e); /* d = f 2^e, f in [0.5, 1) */
  double m = nearbyint(ldexp(f, 11));
  if (m == 2048) m = 1024, e++;
  if (e + 14 >= 31) return s | 0x7c00;
  return s | (uint16_t)((e + 14) << 10) | (uint16_t)((int)m - 1024);
}
static double get(const unsigned char *p, int t) {
  switch (t) {
  case 0: return *(const int8_t *)p;
  case 1: return *p;
  case 2: return *(const int32_t *)p;
  case 3: return *(const uint32_t *)p;
  case 4: return (double)*(const int64_t *)p;
  case 5: return (double)*(const uint64_t *)p;
  case 6: return half_to_d(*(const uint16_t *)p);
  case 7: return *(const float *)p;
  case 8: return *(const double *)p;
  default: {
    uint32_t u = (uint32_t) * (const uint16_t *)p << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  }
}
static void put(unsigned char *p, int t, double v) {
  switch (t) {
  case 0: *(int8_t *)p = (int8_t)(int64_t)v; break;
  case 1: *p = (uint8_t)(int64_t)v; break;
  case 2: *(int32_t *)p = (int32_t)(int64_t)v; break;
  case 3: *(uint32_t *)p = (uint32_t)(int64_t)v; break;
  case 4: *(int64_t *)p = (int64_t)v; break;
  case 5: *(uint64_t *)p = (uint64_t)v; break;
  case 6: *(uint16_t *)p = d_to_half(v); break;
  case 7: *(float *)p = (float)v; break;
  case 8: *(double *)p = v; break;
  default: {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1); /* round to nearest even */
    *(uint16_t *)p = (uint16_t)(u >> 16);
  }
  }
}
static double combine(int op, double a, double b) {
  return op == OP_PROD  ? a * b
         : op == OP_MAX ? (a > b ? a : b)
         : op == OP_MIN ? (a < b ? a : b)
                        : a + b;
}
/* out[i] = op over the ranks' slots at offset `at`, k elements */
static void reduce_slots(ncclComm_t c, const Op *o, size_t at, size_t k, unsigned char *out) {
  size_t es = esize(o->dtype);
  for (size_t i = 0; i < k; i++) {
    double v = get(slot(c, 0) + at + i * es, o->dtype);
    for (int q = 1; q < c->nranks; q++)
      v = combine(o->redop, v, get(slot(c, q) + at + i * es, o->dtype));
    if (o->redop == OP_AVG) v /= c->nranks;
    put(out + i * es, o->dtype, v);
  }
}
/* }=== */

/* {=== progress: one step of an op; 1 when it moved, 0 when it waits */
static void arrive(ncclComm_t c) { atomic_fetch_add(&hdr(c->cl)->arrived, 1); }
static int passed(ncclComm_t c, uint64_t bar) {
  return atomic_load(&hdr(c->cl)->arrived) >= bar * (uint64_t)c->nranks;
}

static int step_collective(ncclComm_t c, Op *o) {
  size_t es = esize(o->dtype), k = o->count - o->off, r = (size_t)c->rank;
  if (k > CHUNK / es) k = CHUNK / es;
  unsigned char *mine = slot(c, c->rank);
  if (o->phase == 0) {
    const unsigned char *in = o->send + o->off * es;
    if (o->kind == REDUCE_SCATTER)
      for (int q = 0; q < c->nranks; q++)
        memcpy(mine + (size_t)q * CHUNK, o->send + ((size_t)q * o->count + o->off) * es, k * es);
    else if (o->kind != BROADCAST || c->rank == o->peer) memcpy(mine, in, k * es);
    arrive(c);
    o->bar = ++c->bars;
    o->phase = 1;
    return 1;
  }
  if (!passed(c, o->bar)) return 0;
  if (o->phase == 1) {
    unsigned char *out = o->recv + o->off * es;
    switch (o->kind) {
    case ALL_REDUCE: reduce_slots(c, o, 0, k, out); break;
    case REDUCE:
      if (c->rank == o->peer) reduce_slots(c, o, 0, k, out);
      break;
    case BROADCAST: memcpy(out, slot(c, o->peer), k * es); break;
    case ALL_GATHER:
      for (int q = 0; q < c->nranks; q++)
        memcpy(o->recv + ((size_t)q * o->count + o->off) * es, slot(c, q), k * es);
      break;
    case REDUCE_SCATTER: reduce_slots(c, o, r * CHUNK, k, out); break;
    default: break;
    }
    arrive(c);
    o->bar = ++c->bars;
    o->phase = 2;
    return 1;
  }
  o->off += k; /* phase 2: every rank has read the slots */
  o->phase = 0;
  return 1;
}

static int step_p2p(ncclComm_t c, Op *o) {
  size_t es = esize(o->dtype), k = o->count - o->off;
  if (k > CHUNK / es) k = CHUNK / es;
  if (o->kind == SEND) {
    Mailbox *m = mailbox(c, c->rank, o->peer);
    if (atomic_load_explicit(&m->full, memory_order_acquire)) return 0;
    memcpy((unsigned char *)(m + 1) + 48, o->send + o->off * es, k * es);
    m->bytes = k * es;
    atomic_store_explicit(&m->full, 1, memory_order_release);
  } else {
    Mailbox *m = mailbox(c, o->peer, c->rank);
    if (!atomic_load_explicit(&m->full, memory_order_acquire)) return 0;
    if (m->bytes != k * es) {
      o->off = o->count;
      snprintf(c->last, sizeof c->last,
               "fake NCCL: rank %d received %zu bytes from rank %d, expected %zu", c->rank,
               m->bytes, o->peer, k * es);
      atomic_store_explicit(&m->full, 0, memory_order_release);
      return -1;
    }
    memcpy(o->recv + o->off * es, (unsigned char *)(m + 1) + 48, k * es);
    atomic_store_explicit(&m->full, 0, memory_order_release);
  }
  o->off += k;
  return 1;
}

/* May op i move: no earlier unfinished op of its lane (collectives; sends to
** one peer; receives from one peer)? */
static int first_of_lane(ncclComm_t c, int i) {
  const Op *o = &c->ops[i];
  for (int j = 0; j < i; j++) {
    const Op *p = &c->ops[j];
    if (p->off >= p->count) continue;
    int coll = o->kind != SEND && o->kind != RECV, pcoll = p->kind != SEND && p->kind != RECV;
    if (coll ? pcoll : (p->kind == o->kind && p->peer == o->peer)) return 0;
  }
  return 1;
}

/* Advance every op of every communicator; drop the finished ones. Returns
** how many moved, -1 on a failure (the comm's last error says what). */
static int progress_all(void) {
  int moved = 0;
  for (int ci = 0; ci < MAX_COMMS; ci++) {
    ncclComm_t c = comms[ci];
    if (!c) continue;
    for (int i = 0; i < c->nops; i++) {
      Op *o = &c->ops[i];
      if (o->off >= o->count && o->phase == 0) continue;
      if (!first_of_lane(c, i)) continue;
      int m = o->kind == SEND || o->kind == RECV ? step_p2p(c, o) : step_collective(c, o);
      if (m < 0) return -1;
      moved += m;
    }
    int n = 0;
    for (int i = 0; i < c->nops; i++)
      if (c->ops[i].off < c->ops[i].count || c->ops[i].phase) c->ops[n++] = c->ops[i];
    c->nops = n;
  }
  return moved;
}

/* Are the unfinished ops waiting only for ranks of this process (which will
** make their calls later, outside a group)? */
static int waits_on_local_ranks(void) {
  for (int ci = 0; ci < MAX_COMMS; ci++)
    if (comms[ci] && comms[ci]->nops && comms[ci]->cl->shared) return 0;
  return 1;
}

static int run(void) {
  double start = now_s(), limit = timeout_s();
  long pause = 1;
  for (;;) {
    int m = progress_all();
    if (m < 0) return INTERNAL_ERROR;
    int pending = 0;
    for (int ci = 0; ci < MAX_COMMS; ci++)
      pending += comms[ci] ? comms[ci]->nops : 0;
    if (!pending) return SUCCESS;
    if (m > 0) {
      pause = 1;
      continue;
    }
    if (waits_on_local_ranks()) return SUCCESS; /* the other ranks' calls finish them */
    if (now_s() - start > limit) {
      for (int ci = 0; ci < MAX_COMMS; ci++)
        if (comms[ci] && comms[ci]->nops)
          fail(comms[ci], SYSTEM_ERROR, "waited too long for the other ranks (FAKE_NCCL_TIMEOUT)");
      return SYSTEM_ERROR;
    }
    pause_us(pause);
    if (pause < 500) pause *= 2;
  }
}
/* }=== */

/* {=== communicators */
static int nvls_off(void) {
  const char *v = getenv("NCCL_NVLS_ENABLE");
  return v && !strcmp(v, "0");
}

static int add_comm(ncclComm_t c) {
  for (int i = 0; i < MAX_COMMS; i++)
    if (!comms[i]) return comms[i] = c, 1;
  return 0;
}

static ncclComm_t new_comm(Clique *cl, int rank, int nranks, int device) {
  ncclComm_t c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->cl = cl, c->rank = rank, c->nranks = nranks, c->device = device;
  cl->refs++;
  if (!add_comm(c)) return free(c), NULL;
  return c;
}

EXPORT int ncclGetVersion(int *v) { return *v = 22803, SUCCESS; }
EXPORT const char *ncclGetErrorString(int r) {
  static const char *const s[] = {"no error",
                                  "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
                                  "unhandled system error (run with NCCL_DEBUG=INFO for details)",
                                  "internal error",
                                  "invalid argument",
                                  "invalid usage"};
  return r >= 0 && r <= 5 ? s[r] : "unknown result";
}
EXPORT const char *ncclGetLastError(ncclComm_t c) { return c ? c->last : global_last; }

EXPORT int ncclGetUniqueId(ncclUniqueId *id) {
  memset(id, 0, sizeof *id);
  uint64_t token = (uint64_t)getpid() << 32 ^ (uint64_t)(now_s() * 1e9);
  int f = open("/dev/urandom", O_RDONLY);
  if (f >= 0) {
    if (read(f, &token, sizeof token) != (ssize_t)sizeof token) token ^= 0x9e3779b97f4a7c15ull;
    close(f);
  }
  snprintf(id->internal, sizeof id->internal, "fakenccl:%016llx", (unsigned long long)token);
  return SUCCESS;
}

EXPORT int ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank) {
  *out = NULL;
  if (!nvls_off())
    return fail(NULL, INVALID_USAGE, "NCCL_NVLS_ENABLE is not 0: NVLink multicast would be on");
  if (strncmp(id.internal, "fakenccl:", 9))
    return fail(NULL, INVALID_ARGUMENT, "not a unique id of this NCCL");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(NULL, INVALID_ARGUMENT, "rank out of range");
  Clique *cl = calloc(1, sizeof *cl);
  if (!cl) return SYSTEM_ERROR;
  snprintf(cl->name, sizeof cl->name, "/tilua_%s", id.internal + 9);
  cl->size = clique_bytes(nranks);
  cl->shared = 1;
  int fd = shm_open(cl->name, O_CREAT | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, (off_t)cl->size) != 0) {
    if (fd >= 0) close(fd);
    free(cl);
    return fail(NULL, SYSTEM_ERROR, "shm_open/ftruncate of the clique failed");
  }
  cl->base = mmap(NULL, cl->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (cl->base == MAP_FAILED)
    return free(cl), fail(NULL, SYSTEM_ERROR, "mmap of the clique failed");
  Header *h = hdr(cl);
  h->nranks = nranks;
  atomic_fetch_add(&h->joined, 1);
  double start = now_s();
  while (atomic_load(&h->joined) < nranks) { /* like NCCL: init returns when every rank joined */
    if (now_s() - start > timeout_s()) {
      munmap(cl->base, cl->size);
      free(cl);
      return fail(NULL, SYSTEM_ERROR,
                  "the other ranks never joined the communicator (FAKE_NCCL_TIMEOUT)");
    }
    pause_us(200);
  }
  const char *dev = getenv("TILUA_DEVICE"); /* the stand-in driver's device of this process */
  *out = new_comm(cl, rank, nranks, dev ? atoi(dev) : 0);
  return *out ? SUCCESS : SYSTEM_ERROR;
}

EXPORT int ncclCommInitAll(ncclComm_t *out, int ndev, const int *devs) {
  if (!nvls_off())
    return fail(NULL, INVALID_USAGE, "NCCL_NVLS_ENABLE is not 0: NVLink multicast would be on");
  if (ndev < 1) return fail(NULL, INVALID_ARGUMENT, "no devices");
  Clique *cl = calloc(1, sizeof *cl);
  if (!cl) return SYSTEM_ERROR;
  cl->size = clique_bytes(ndev);
  cl->base = calloc(1, cl->size);
  if (!cl->base) return free(cl), SYSTEM_ERROR;
  hdr(cl)->nranks = ndev;
  for (int i = 0; i < ndev; i++) {
    out[i] = new_comm(cl, i, ndev, devs ? devs[i] : i);
    if (!out[i]) return SYSTEM_ERROR;
  }
  return SUCCESS;
}

EXPORT int ncclCommDestroy(ncclComm_t c) {
  if (!c) return fail(NULL, INVALID_ARGUMENT, "ncclCommDestroy of NULL");
  for (int i = 0; i < MAX_COMMS; i++)
    if (comms[i] == c) comms[i] = NULL;
  Clique *cl = c->cl;
  if (--cl->refs == 0) {
    if (cl->shared) {
      int last = atomic_fetch_add(&hdr(cl)->left, 1) + 1 == hdr(cl)->nranks;
      munmap(cl->base, cl->size);
      if (last) shm_unlink(cl->name);
    } else {
      free(cl->base);
    }
    free(cl);
  }
  free(c);
  return SUCCESS;
}

EXPORT int ncclCommCount(ncclComm_t c, int *n) {
  return c ? (*n = c->nranks, SUCCESS) : INVALID_ARGUMENT;
}
EXPORT int ncclCommCuDevice(ncclComm_t c, int *d) {
  return c ? (*d = c->device, SUCCESS) : INVALID_ARGUMENT;
}
EXPORT int ncclCommUserRank(ncclComm_t c, int *r) {
  return c ? (*r = c->rank, SUCCESS) : INVALID_ARGUMENT;
}
/* }=== */

/* {=== calls */
static int post(ncclComm_t c, int kind, const void *send, void *recv, size_t count, int dtype,
                int redop, int peer) {
  if (!c) return fail(NULL, INVALID_ARGUMENT, "NULL communicator");
  if (!esize(dtype)) return fail(c, INVALID_ARGUMENT, "unknown data type");
  if (redop < 0 || redop > OP_AVG) return fail(c, INVALID_ARGUMENT, "unknown reduction");
  if ((kind == BROADCAST || kind == REDUCE || kind == SEND || kind == RECV) &&
      (peer < 0 || peer >= c->nranks))
    return fail(c, INVALID_ARGUMENT,
                kind == SEND || kind == RECV ? "peer out of range" : "root out of range");
  if (count &&
      ((kind != RECV && !send) || (kind != SEND && !recv && (kind != REDUCE || c->rank == peer))))
    return fail(c, INVALID_ARGUMENT, "NULL buffer");
  if (c->nops == MAX_OPS) return fail(c, INVALID_USAGE, "too many calls in one group");
  if (count == 0) return SUCCESS;
  Op *o = &c->ops[c->nops++];
  memset(o, 0, sizeof *o);
  o->kind = kind, o->send = send, o->recv = recv, o->count = count, o->dtype = dtype,
  o->redop = redop, o->peer = peer;
  return group_depth ? SUCCESS : run();
}

EXPORT int ncclAllReduce(const void *s, void *r, size_t n, int t, int op, ncclComm_t c, void *st) {
  (void)st;
  return post(c, ALL_REDUCE, s, r, n, t, op, 0);
}
EXPORT int ncclBroadcast(const void *s, void *r, size_t n, int t, int root, ncclComm_t c,
                         void *st) {
  (void)st;
  return post(c, BROADCAST, s, r, n, t, OP_SUM, root);
}
EXPORT int ncclReduce(const void *s, void *r, size_t n, int t, int op, int root, ncclComm_t c,
                      void *st) {
  (void)st;
  return post(c, REDUCE, s, r, n, t, op, root);
}
EXPORT int ncclAllGather(const void *s, void *r, size_t n, int t, ncclComm_t c, void *st) {
  (void)st;
  return post(c, ALL_GATHER, s, r, n, t, OP_SUM, 0);
}
EXPORT int ncclReduceScatter(const void *s, void *r, size_t n, int t, int op, ncclComm_t c,
                             void *st) {
  (void)st;
  return post(c, REDUCE_SCATTER, s, r, n, t, op, 0);
}
EXPORT int ncclSend(const void *b, size_t n, int t, int peer, ncclComm_t c, void *st) {
  (void)st;
  return post(c, SEND, b, NULL, n, t, OP_SUM, peer);
}
EXPORT int ncclRecv(void *b, size_t n, int t, int peer, ncclComm_t c, void *st) {
  (void)st;
  return post(c, RECV, NULL, b, n, t, OP_SUM, peer);
}
EXPORT int ncclGroupStart(void) {
  group_depth++;
  return SUCCESS;
}
EXPORT int ncclGroupEnd(void) {
  if (group_depth == 0) return fail(NULL, INVALID_USAGE, "ncclGroupEnd without ncclGroupStart");
  return --group_depth ? SUCCESS : run();
}
/* }=== */
