/*
** cuda_rt.c -- the CUDA Driver API runtime (see cuda_rt.h).
**
** libcuda is opened with dlopen on first use, never linked. dlsym finds only
** cuGetProcAddress_v2 and cuInit; the table of cuda_syms.def is filled by
** asking cuGetProcAddress_v2 for each plain name at CUDA 12.0: a plain dlsym
** of "cuCtxSynchronize" could bind a newer symbol whose ABI differs.
** Every driver call goes through CU_DO/CU_CALL, which report the call text and
** the driver's error name (Terra's CUDA_DO).
*/
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <assert.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../dialects/sm90_limits.h"
#include "cuda_rt.h"
#include "hang.h"

#define TLCU_EVENT_DISABLE_TIMING 2   /* CU_EVENT_DISABLE_TIMING: the launch events */
#define TLCU_MEMHOSTALLOC_DEVICEMAP 2 /* CU_MEMHOSTALLOC_DEVICEMAP */
#define TLCU_HANG_LINES 16            /* debug-hangs records shown in a report */

enum { TLCU_HELD_MODULE = 1, TLCU_HELD_MEM, TLCU_HELD_EVENT, TLCU_HELD_STREAM };

static void graph_release(TlcuRuntime *rt, TlcuGraph *g);

typedef enum {
  PROC_SUCCESS = 0,
  PROC_SYMBOL_NOT_FOUND = 1,
  PROC_VERSION_NOT_SUFFICIENT = 2
} ProcStatus;
typedef CUresult (*GetProcFn)(const char *symbol, void **pfn, int version, unsigned long long flags,
                              ProcStatus *status);
typedef CUresult (*InitFn)(unsigned int flags);

/* Function pointers come from dlsym and cuGetProcAddress as void *, copied
** bytewise (POSIX guarantees the representations agree). */
_Static_assert(sizeof(void *) == sizeof(GetProcFn), "function and object pointers differ");

/* {======================================================================
** Error reporting
** ======================================================================= */

static void tlcu_vset(TlcuRuntime *rt, const char *fmt, va_list ap) {
  vsnprintf(rt->err, sizeof rt->err, fmt, ap);
}

/* Set the error message and return `st`. */
static TlcuResult tlcu_fail(TlcuRuntime *rt, TlcuResult st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  tlcu_vset(rt, fmt, ap);
  va_end(ap);
  rt->kernel_msg = 0;
  return st;
}

/* Append to the error message (context after a failed call), truncating. */
static void tlcu_append(TlcuRuntime *rt, const char *fmt, ...) {
  size_t n = strlen(rt->err);
  va_list ap;
  va_start(ap, fmt);
  if (n + 1 < sizeof rt->err) vsnprintf(rt->err + n, sizeof rt->err - n, fmt, ap);
  va_end(ap);
}

/* Names for the results a failed init can give before cuGetErrorName is known. */
static const char *tlcu_fallback_name(CUresult r) {
  switch ((int)r) {
  case CUDA_ERROR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
  case CUDA_ERROR_NOT_INITIALIZED: return "CUDA_ERROR_NOT_INITIALIZED";
  case CUDA_ERROR_STUB_LIBRARY: return "CUDA_ERROR_STUB_LIBRARY";
  case CUDA_ERROR_INSUFFICIENT_DRIVER: return "CUDA_ERROR_INSUFFICIENT_DRIVER";
  case CUDA_ERROR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
  default: return NULL;
  }
}

/* The driver's name and description of `r`, or stand-ins when it has none;
** `buf` holds the stand-in name of a code nobody knows. */
static void tlcu_error_text(TlcuRuntime *rt, CUresult r, const char **name, const char **str,
                            char *buf, size_t n) {
  *name = *str = NULL;
  if (rt->drv.cuGetErrorName && rt->drv.cuGetErrorName(r, name) != CUDA_SUCCESS) *name = NULL;
  if (rt->drv.cuGetErrorString && rt->drv.cuGetErrorString(r, str) != CUDA_SUCCESS) *str = NULL;
  if (!*name) *name = tlcu_fallback_name(r);
  if (!*name) {
    snprintf(buf, n, "CUDA error %d", (int)r);
    *name = buf;
  }
  if (!*str) *str = "no description from the driver";
}

/* Check a driver result: on failure the message reads
** `<call text>: <CUDA_ERROR_NAME> (<error string>)`. */
static TlcuResult tlcu_check(TlcuRuntime *rt, CUresult r, const char *call) {
  const char *name, *str;
  char buf[32];
  if (r == CUDA_SUCCESS) return TLCU_OK;
  rt->last = r;
  tlcu_error_text(rt, r, &name, &str, buf, sizeof buf);
  return tlcu_fail(rt, TLCU_FAIL, "%s: %s (%s)", call, name, str);
}

/* Call driver entry point `f` with `args`; report a failure, give its status. */
#define CU_CALL(rt, f, args) tlcu_check((rt), (rt)->drv.f args, #f #args)
/* Same, returning TLCU_FAIL from the enclosing function on failure. */
#define CU_DO(rt, f, args)                                                                         \
  do {                                                                                             \
    if (CU_CALL(rt, f, args) != TLCU_OK) return TLCU_FAIL;                                         \
  } while (0)

/* The context this thread made current last: with several runtimes in a
** process (one per device, and per Lua state), each call makes its own
** current first; with one, the comparison is all it costs. The context, not
** the runtime, is compared: runtimes of states that closed are freed, and a
** new one may take the old one's address on another device. */
static _Thread_local CUcontext current_ctx;

void tlcu_forget_current(void) { current_ctx = NULL; }

static TlcuResult tlcu_make_current(TlcuRuntime *rt) {
  if (current_ctx == rt->ctx) return TLCU_OK;
  CUresult r = rt->drv.cuCtxSetCurrent(rt->ctx);
  if (r != CUDA_SUCCESS) return tlcu_check(rt, r, "cuCtxSetCurrent(ctx)");
  current_ctx = rt->ctx;
  return TLCU_OK;
}

/* Every call but init starts here: a runtime that is not ready keeps its
** state (a ready one makes its context current). After a failed init the
** init message stays as it is. */
static TlcuResult tlcu_begin(TlcuRuntime *rt) {
  assert(rt != NULL);
  switch (rt->state) {
  case TLCU_READY: return tlcu_make_current(rt);
  case TLCU_FAILED: return rt->init_status;
  case TLCU_DOWN: return tlcu_fail(rt, TLCU_FAIL, "CUDA runtime was shut down");
  case TLCU_WEDGED: return TLCU_HUNG; /* the hang's message stays */
  default: return tlcu_fail(rt, TLCU_FAIL, "CUDA runtime not initialised (tlcu_init first)");
  }
}

#define TLCU_BEGIN(rt)                                                                             \
  do {                                                                                             \
    TlcuResult st_ = tlcu_begin(rt);                                                               \
    if (st_ != TLCU_OK) return st_;                                                                \
  } while (0)

const char *tlcu_error(const TlcuRuntime *rt) { return rt->err; }
int tlcu_ready(const TlcuRuntime *rt) { return rt->state == TLCU_READY; }
int tlcu_kernel_report(const TlcuRuntime *rt) { return rt->kernel_msg; }
void tlcu_set_timeout(TlcuRuntime *rt, double seconds) { rt->timeout = seconds > 0 ? seconds : 0; }
const char *tlcu_jit_info_log(const TlcuRuntime *rt) { return rt->jit_info; }
const char *tlcu_jit_error_log(const TlcuRuntime *rt) { return rt->jit_error; }

/* }====================================================================== */

/* {======================================================================
** What the runtime holds: modules, allocations, events
** ======================================================================= */

static TlcuResult tlcu_hold(TlcuRuntime *rt, int kind, uint64_t handle) {
  if (rt->nheld == rt->capheld) {
    size_t cap = rt->capheld ? 2 * rt->capheld : 16;
    TlcuHeld *h = realloc(rt->held, cap * sizeof *h);
    if (!h) return tlcu_fail(rt, TLCU_FAIL, "out of host memory tracking a CUDA handle");
    rt->held = h;
    rt->capheld = cap;
  }
  rt->held[rt->nheld].kind = kind;
  rt->held[rt->nheld].handle = handle;
  rt->nheld++;
  return TLCU_OK;
}

/* Forget a handle (latest first: the usual order of release). */
static void tlcu_unhold(TlcuRuntime *rt, int kind, uint64_t handle) {
  for (size_t i = rt->nheld; i-- > 0;) {
    if (rt->held[i].kind == kind && rt->held[i].handle == handle) {
      rt->held[i] = rt->held[--rt->nheld];
      return;
    }
  }
}

/* Release one held handle; a failure is reported but does not stop shutdown. */
static TlcuResult tlcu_release(TlcuRuntime *rt, const TlcuHeld *h) {
  switch (h->kind) {
  case TLCU_HELD_MODULE: return CU_CALL(rt, cuModuleUnload, ((CUmodule)(uintptr_t)h->handle));
  case TLCU_HELD_MEM: return CU_CALL(rt, cuMemFree, ((CUdeviceptr)h->handle));
  case TLCU_HELD_EVENT: return CU_CALL(rt, cuEventDestroy, ((CUevent)(uintptr_t)h->handle));
  case TLCU_HELD_STREAM: return CU_CALL(rt, cuStreamDestroy, ((CUstream)(uintptr_t)h->handle));
  default: return TLCU_OK;
  }
}

/* Give one handle back now: it leaves the held list and the driver frees it. */
static TlcuResult tlcu_give_back(TlcuRuntime *rt, int kind, uint64_t handle) {
  TlcuHeld h = {kind, handle};
  tlcu_unhold(rt, kind, handle);
  return tlcu_release(rt, &h) == TLCU_OK ? TLCU_OK : TLCU_FAIL;
}

static TlcuResult tlcu_release_all(TlcuRuntime *rt) {
  TlcuResult st = TLCU_OK;
  while (rt->nheld > 0) {
    TlcuHeld h = rt->held[--rt->nheld];
    if (tlcu_release(rt, &h) != TLCU_OK) st = TLCU_FAIL;
  }
  free(rt->held);
  rt->held = NULL;
  rt->capheld = 0;
  return st;
}

/* }====================================================================== */

/* {======================================================================
** Launch records and checks: the launches not yet seen finished, oldest first
** ======================================================================= */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void pause_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* At exit after a hang: the driver's own exit handlers (registered before
** this one, so run after it) would wait for the kernel; leave without them. */
static void tlcu_exit_guard(void) {
  fflush(NULL);
  _exit(EXIT_FAILURE);
}

void tlcu_hang_free(TlcuRuntime *rt, TlcuHang *h) {
  if (!h) return;
  if (h->host && rt->state != TLCU_WEDGED) rt->drv.cuMemFreeHost(h->host);
  free(h->sites);
  free(h);
}

TlcuResult tlcu_hang_alloc(TlcuRuntime *rt, size_t slots, unsigned warps_per_block,
                           const char *sites, TlcuHang **out) {
  TLCU_BEGIN(rt);
  size_t bytes = (slots ? slots : 1) * TLHANG_SLOT_WORDS * sizeof(uint32_t);
  TlcuHang *h = calloc(1, sizeof *h);
  if (h) h->sites = strdup(sites ? sites : "");
  if (!h || !h->sites) {
    free(h);
    return tlcu_fail(rt, TLCU_FAIL, "out of host memory for the debug-hangs records");
  }
  if (CU_CALL(rt, cuMemHostAlloc, (&h->host, bytes, TLCU_MEMHOSTALLOC_DEVICEMAP)) != TLCU_OK) {
    h->host = NULL;
    tlcu_hang_free(rt, h);
    return TLCU_FAIL;
  }
  memset(h->host, 0, bytes);
  h->slots = slots;
  h->warps_per_block = warps_per_block;
  if (CU_CALL(rt, cuMemHostGetDevicePointer, (&h->dev, h->host, 0)) != TLCU_OK) {
    tlcu_hang_free(rt, h);
    return TLCU_FAIL;
  }
  *out = h;
  return TLCU_OK;
}

/* {=== interned strings */

static uint64_t str_hash(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; s++)
    h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

/* The slot of s in the table: where it is, or the empty one it would take. */
static char **str_slot(TlcuStrings *t, const char *s) {
  size_t i = (size_t)str_hash(s) & (t->cap - 1);
  while (t->slot[i] && strcmp(t->slot[i], s) != 0)
    i = (i + 1) & (t->cap - 1);
  return &t->slot[i];
}

static int str_grow(TlcuStrings *t) {
  size_t cap = t->cap ? 2 * t->cap : 64, old = t->cap;
  char **slots = calloc(cap, sizeof *slots), **from = t->slot;
  if (!slots) return 0;
  t->slot = slots, t->cap = cap;
  for (size_t i = 0; i < old; i++)
    if (from[i]) *str_slot(t, from[i]) = from[i];
  free(from);
  return 1;
}

const char *tlcu_intern(TlcuRuntime *rt, const char *s) {
  if (!s) return NULL;
  TlcuStrings *t = &rt->strings;
  size_t m = ((uintptr_t)s >> 3) % (sizeof t->memo / sizeof t->memo[0]);
  /* the caller's pointer seen before, and still the same text (a pointer may be
  ** reused), or one of ours (they live until shutdown) */
  if (t->memo[m].from == s && (s == t->memo[m].to || strcmp(t->memo[m].to, s) == 0))
    return t->memo[m].to;
  if ((t->n + 1) * 2 > t->cap && !str_grow(t)) return "?";
  char **slot = str_slot(t, s);
  if (!*slot) {
    if (!(*slot = strdup(s))) return "?";
    t->n++;
  }
  t->memo[m].from = s, t->memo[m].to = *slot;
  return *slot;
}

static void strings_free(TlcuStrings *t) {
  for (size_t i = 0; i < t->cap; i++)
    free(t->slot[i]);
  free(t->slot);
  memset(t, 0, sizeof *t);
}

/* }=== */

#define REC(rt, seq) (&(rt)->rec[(seq) % TLCU_RECORDS])
#define CHK(rt, seq) (&(rt)->chk[(seq) % TLCU_CHECKS])

void tlcu_set_check_every(TlcuRuntime *rt, unsigned launches) {
  rt->check_every = launches < 1 ? 1 : launches > TLCU_WINDOW ? TLCU_WINDOW : launches;
}

/* The oldest check was seen done: it leaves with the records of its window;
** its event waits for the next check (creating one costs about a microsecond). */
static void check_pop(TlcuRuntime *rt) {
  TlcuCheck *c = CHK(rt, rt->chk_head++);
  if (rt->nspare < TLCU_CHECKS) rt->spare[rt->nspare++] = c->done;
  else rt->drv.cuEventDestroy(c->done);
  for (; rt->rec_head < c->end; rt->rec_head++)
    tlcu_hang_free(rt, REC(rt, rt->rec_head)->hang);
}

/* Forget every launch (after a failure: the context's error is sticky, none ran). */
static void drop_all(TlcuRuntime *rt) {
  while (rt->chk_head < rt->chk_tail)
    check_pop(rt);
  for (; rt->rec_head < rt->rec_tail; rt->rec_head++)
    tlcu_hang_free(rt, REC(rt, rt->rec_head)->hang);
  rt->window = 0, rt->joinable = 0;
}

static void destroy_spare_events(TlcuRuntime *rt) {
  while (rt->nspare)
    rt->drv.cuEventDestroy(rt->spare[--rt->nspare]);
}

/* "file:line: " of a record, or "". */
static void where_of(const TlcuRecord *r, char *buf, size_t n) {
  if (r->file) snprintf(buf, n, "%s:%d: ", r->file, r->line);
  else buf[0] = '\0';
}

/* "<where>: kernel 'NAME' <what>" for the window of the oldest check; its
** other launch places listed when it had several; the debug-hangs records. */
static TlcuResult kernel_report(TlcuRuntime *rt, TlcuResult st, const char *what) {
  const TlcuCheck *c = CHK(rt, rt->chk_head);
  const TlcuRecord *first = REC(rt, rt->rec_head);
  char where[300], group[64] = "";
  where_of(first, where, sizeof where);
  uint64_t nrec = c->end - rt->rec_head;
  if (nrec == 1 && first->count > 1)
    snprintf(group, sizeof group, " (one of %u consecutive launches)", first->count);
  unsigned after = c->launches - first->count;
  if (nrec > 1)
    snprintf(group, sizeof group, "%s or %s launch%s after %s",
             first->count > 1 ? " (several launches)" : "", after == 1 ? "the" : "one of the",
             after == 1 ? "" : "es", first->count > 1 ? "them" : "it");
  if (nrec > 1 && after > 1) { /* the count goes in too */
    size_t at =
        strlen(group) - strlen(first->count > 1 ? " launches after them" : " launches after it");
    snprintf(group + at, sizeof group - at, " %u launches after %s", after,
             first->count > 1 ? "them" : "it");
  }
  tlcu_fail(rt, st, first->graph ? "%sthe %s%s %s" : "%skernel '%s'%s %s", where, first->name,
            group, what);
  if (nrec > 1) {
    tlcu_append(
        rt,
        "\n  the launches since the runtime last checked (TILUA_LAUNCH_CHECK=each checks every launch):");
    for (uint64_t i = rt->rec_head; i < c->end && i < rt->rec_head + TLCU_HANG_LINES; i++) {
      const TlcuRecord *r = REC(rt, i);
      where_of(r, where, sizeof where);
      tlcu_append(rt, r->graph ? "\n    %sthe %s" : "\n    %skernel '%s'", where, r->name);
      if (r->count > 1) tlcu_append(rt, " (%u launches)", r->count);
    }
    if (nrec > TLCU_HANG_LINES)
      tlcu_append(rt, "\n    ... and %llu more", (unsigned long long)(nrec - TLCU_HANG_LINES));
  }
  for (uint64_t i = rt->rec_head; i < c->end; i++) {
    const TlcuHang *h = REC(rt, i)->hang;
    if (!h) continue;
    tlcu_append(rt, "\n  debug-hangs records:");
    if (!tlhang_format(h->host, h->slots, h->warps_per_block, h->sites, rt->err, sizeof rt->err,
                       TLCU_HANG_LINES))
      tlcu_append(rt, " none (no warp gave up on an mbarrier or waits at a barrier)");
  }
  rt->kernel_msg = 1;
  return st;
}

/* The oldest check failed: report its window; the launches after it are
** dropped (the context's error is sticky, they cannot have run). */
static TlcuResult kernel_failed(TlcuRuntime *rt, CUresult r) {
  const char *name, *str;
  char buf[32], what[320];
  tlcu_error_text(rt, r, &name, &str, buf, sizeof buf);
  snprintf(what, sizeof what, "failed: %s (%s)", name, str);
  kernel_report(rt, TLCU_FAIL, what);
  rt->last = r;
  drop_all(rt);
  return TLCU_FAIL;
}

/* The oldest check ran past its deadline: report it and stop touching the device. */
static TlcuResult wedge(TlcuRuntime *rt) {
  static atomic_flag guarded =
      ATOMIC_FLAG_INIT; /* the one process-wide fact: the exit guard is set */
  char what[64];
  snprintf(what, sizeof what, "did not finish within %g s",
           rt->timeout * CHK(rt, rt->chk_head)->launches);
  kernel_report(rt, TLCU_HUNG, what);
  rt->state = TLCU_WEDGED;
  if (!atomic_flag_test_and_set(&guarded)) atexit(tlcu_exit_guard);
  return TLCU_HUNG;
}

/* Wait for the oldest check: done (it leaves), failed, or past its timeouts
** (one per launch) counted from its window's first launch or from `since`,
** whichever is later. */
static TlcuResult wait_oldest(TlcuRuntime *rt, double since) {
  const TlcuCheck *c = CHK(rt, rt->chk_head);
  double start = c->opened > since ? c->opened : since;
  long pause = 20;
  for (;;) {
    CUresult r = rt->drv.cuEventQuery(c->done);
    if (r == CUDA_SUCCESS) {
      check_pop(rt);
      return TLCU_OK;
    }
    if (r != CUDA_ERROR_NOT_READY) return kernel_failed(rt, r);
    if (rt->timeout > 0 && now_s() - start > rt->timeout * c->launches) return wedge(rt);
    pause_us(pause);
    if (pause < 1000) pause *= 2;
  }
}

/* Close the open window: an event after its launches. */
static TlcuResult check_window(TlcuRuntime *rt) {
  if (!rt->window) return TLCU_OK;
  if (rt->chk_tail - rt->chk_head == TLCU_CHECKS) {
    TlcuResult st = wait_oldest(rt, 0);
    if (st != TLCU_OK) return st;
  }
  TlcuCheck *c = CHK(rt, rt->chk_tail);
  if (rt->nspare) c->done = rt->spare[--rt->nspare];
  else CU_DO(rt, cuEventCreate, (&c->done, TLCU_EVENT_DISABLE_TIMING));
  if (CU_CALL(rt, cuEventRecord, (c->done, rt->window_stream)) != TLCU_OK) {
    rt->spare[rt->nspare++] = c->done;
    return TLCU_FAIL;
  }
  c->end = rt->rec_tail, c->launches = rt->window, c->opened = rt->window_opened;
  rt->chk_tail++;
  rt->window = 0, rt->joinable = 0;
  /* forget the windows the device is done with (events of one stream complete in order) */
  while (rt->chk_tail - rt->chk_head > 1) {
    CUresult r = rt->drv.cuEventQuery(CHK(rt, rt->chk_head)->done);
    if (r == CUDA_ERROR_NOT_READY) break;
    if (r != CUDA_SUCCESS) return kernel_failed(rt, r);
    check_pop(rt);
  }
  return TLCU_OK;
}

TlcuResult tlcu_finish(TlcuRuntime *rt) {
  TLCU_BEGIN(rt);
  if (check_window(rt) != TLCU_OK) return rt->state == TLCU_WEDGED ? TLCU_HUNG : TLCU_FAIL;
  double since = 0;
  while (rt->chk_head < rt->chk_tail) {
    TlcuResult st = wait_oldest(rt, since);
    if (st != TLCU_OK) return st;
    since = now_s();
  }
  return TLCU_OK;
}

/* Before anything that blocks on the device: every launch finished in time. */
#define TLCU_DRAIN(rt, what)                                                                       \
  do {                                                                                             \
    TlcuResult st_ = tlcu_drain(rt, what);                                                         \
    if (st_ != TLCU_OK) return st_;                                                                \
  } while (0)

static TlcuResult tlcu_drain(TlcuRuntime *rt, const char *what) {
  if (rt->state == TLCU_READY && rt->capture)
    return tlcu_fail(
        rt, TLCU_FAIL,
        "%s waits for the device, which cannot happen while a graph captures launches (copies, fills "
        "and synchronization go before or after the captured function; a StreamK kernel zeroes its "
        "workspace at its first launch: launch it once before capturing it)",
        what);
  return tlcu_finish(rt);
}

/* Room for one more record (waiting for the oldest check when the ring is full). */
static TlcuResult record_room(TlcuRuntime *rt) {
  while (rt->rec_tail - rt->rec_head >= TLCU_RECORDS) {
    if (rt->chk_head == rt->chk_tail && check_window(rt) != TLCU_OK) return TLCU_FAIL;
    TlcuResult st = wait_oldest(rt, 0);
    if (st != TLCU_OK) return st;
  }
  return TLCU_OK;
}

/* The launch (`launches` of them: a graph's kernels) goes into the newest
** record (the same kernel, place and stream, in the open window) or a new one;
** a launch with debug-hangs records is a window of its own, and a window holds
** one stream's launches. Called after the launch was issued. */
static TlcuResult record_launches(TlcuRuntime *rt, CUfunction f, const TlcuLaunch *cfg,
                                  const char *name, unsigned launches, int graph) {
  TlcuRecord *r = rt->joinable ? REC(rt, rt->rec_tail - 1) : NULL;
  const char *file = tlcu_intern(rt, cfg->file);
  if (rt->window && cfg->stream != rt->window_stream && check_window(rt) != TLCU_OK)
    return TLCU_FAIL;
  if (r && rt->joinable && !cfg->hang && r->fn == f && r->file == file && r->line == cfg->line &&
      r->stream == cfg->stream && r->name == name) {
    r->count++;
  } else {
    r = REC(rt, rt->rec_tail++);
    r->fn = f, r->stream = cfg->stream, r->name = name, r->file = file, r->line = cfg->line;
    r->count = 1, r->hang = cfg->hang, r->graph = graph;
    rt->joinable = !cfg->hang;
  }
  if (rt->window == 0) rt->window_opened = now_s(), rt->window_stream = cfg->stream;
  rt->window += launches;
  if (rt->window >= rt->check_every || cfg->hang) return check_window(rt);
  return TLCU_OK;
}

/* }====================================================================== */

/* {======================================================================
** Init and shutdown
** ======================================================================= */

static TlcuResult tlcu_no_driver(TlcuRuntime *rt, const char *libname, const char *why) {
  return tlcu_fail(rt, TLCU_NO_GPU,
                   "no CUDA driver: %s not found (dlopen: %s); "
                   "compiling works, launching needs an NVIDIA GPU",
                   libname, why ? why : "unknown error");
}

/* Ask cuGetProcAddress_v2 for every row of cuda_syms.def. */
static TlcuResult tlcu_resolve(TlcuRuntime *rt, GetProcFn getproc) {
  void *p;
  ProcStatus ps;
  CUresult r;
#define TLCU_SYM(name, ret, params)                                                                \
  p = NULL;                                                                                        \
  ps = PROC_SUCCESS;                                                                               \
  r = getproc(#name, &p, TLCU_ABI_VERSION, 0 /* CU_GET_PROC_ADDRESS_DEFAULT */, &ps);              \
  if (r != CUDA_SUCCESS || ps != PROC_SUCCESS || p == NULL)                                        \
    return tlcu_fail(rt, TLCU_FAIL,                                                                \
                     "cuGetProcAddress_v2(\"%s\", &fn, %d, 0, &status): result %d, status %d: "    \
                     "the CUDA driver is older than %d.%d or lacks this entry point",              \
                     #name, TLCU_ABI_VERSION, (int)r, (int)ps, TLCU_ABI_VERSION / 1000,            \
                     TLCU_ABI_VERSION % 1000 / 10);                                                \
  memcpy(&rt->drv.name, &p, sizeof p);
#include "cuda_syms.def"
#undef TLCU_SYM
  return TLCU_OK;
}

/* Open the library, find the two dlsym entry points, cuInit, fill the table. */
static TlcuResult tlcu_open_driver(TlcuRuntime *rt, const char *libname) {
  rt->lib = dlopen(libname, RTLD_NOW | RTLD_LOCAL);
  if (!rt->lib) return tlcu_no_driver(rt, libname, dlerror());
  GetProcFn getproc = NULL;
  InitFn init = NULL;
  void *p = dlsym(rt->lib, "cuGetProcAddress_v2");
  memcpy(&getproc, &p, sizeof p);
  p = dlsym(rt->lib, "cuInit");
  memcpy(&init, &p, sizeof p);
  if (!getproc || !init) {
    tlcu_fail(rt, TLCU_FAIL,
              "%s has no %s: not a CUDA driver, or one older than CUDA 12.0; "
              "compiling works, launching needs an NVIDIA GPU with a CUDA 12+ driver",
              libname, getproc ? "cuInit" : "cuGetProcAddress_v2");
    dlclose(rt->lib); /* cuInit never ran: nothing of the driver is alive */
    rt->lib = NULL;
    return TLCU_FAIL;
  }
  CUresult r = init(0);
  TlcuResult st = tlcu_resolve(rt, getproc);
  if (r != CUDA_SUCCESS) {
    TlcuResult cst = tlcu_check(rt, r, "cuInit(0)");
    int no_gpu = r == CUDA_ERROR_NO_DEVICE || r == CUDA_ERROR_STUB_LIBRARY;
    tlcu_append(rt, "; compiling works, launching needs an NVIDIA GPU");
    return no_gpu ? TLCU_NO_GPU : cst;
  }
  return st;
}

static TlcuResult tlcu_query(TlcuRuntime *rt, CUdevice_attribute attr, int *out) {
  CU_DO(rt, cuDeviceGetAttribute, (out, attr, rt->dev));
  return TLCU_OK;
}

static TlcuResult tlcu_read_info(TlcuRuntime *rt) {
  TlcuDeviceInfo *d = &rt->info;
  CU_DO(rt, cuDriverGetVersion, (&d->driver_version));
  CU_DO(rt, cuDeviceGetName, (d->name, (int)sizeof d->name, rt->dev));
  CU_DO(rt, cuDeviceTotalMem, (&d->total_mem, rt->dev));
  if (tlcu_query(rt, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &d->sm_count) ||
      tlcu_query(rt, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &d->cc_major) ||
      tlcu_query(rt, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &d->cc_minor) ||
      tlcu_query(rt, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &d->smem_optin))
    return TLCU_FAIL;
  return TLCU_OK;
}

/* Pick the device, retain its primary context, make it current. */
static TlcuResult tlcu_open_device(TlcuRuntime *rt, int ordinal) {
  int count = 0;
  CU_DO(rt, cuDeviceGetCount, (&count));
  if (count == 0)
    return tlcu_fail(rt, TLCU_NO_GPU,
                     "no CUDA device: the driver sees none; "
                     "compiling works, launching needs an NVIDIA GPU");
  if (ordinal < 0 || ordinal >= count)
    return tlcu_fail(rt, TLCU_FAIL, "CUDA device %d does not exist (the driver sees %d: 0..%d)",
                     ordinal, count, count - 1);
  CU_DO(rt, cuDeviceGet, (&rt->dev, ordinal));
  CU_DO(rt, cuDevicePrimaryCtxRetain, (&rt->ctx, rt->dev));
  rt->info.ordinal = ordinal;
  CU_DO(rt, cuCtxSetCurrent, (rt->ctx));
  return tlcu_read_info(rt);
}

TlcuResult tlcu_init_lib(TlcuRuntime *rt, int ordinal, const char *libname) {
  assert(rt != NULL);
  if (rt->state == TLCU_READY)
    return tlcu_fail(rt, TLCU_FAIL, "CUDA runtime already initialised (tlcu_shutdown first)");
  memset(rt, 0, sizeof *rt);
  const char *check = getenv("TILUA_LAUNCH_CHECK"); /* "each": a check after every launch */
  rt->check_every = check && !strcmp(check, "each") ? 1 : TLCU_WINDOW;
  if (!libname) libname = getenv("TILUA_LIBCUDA");
  if (!libname || !*libname) libname = TLCU_LIBNAME;
  TlcuResult st = tlcu_open_driver(rt, libname);
  if (st == TLCU_OK) st = tlcu_open_device(rt, ordinal);
  if (st == TLCU_OK) {
    rt->state = TLCU_READY;
    current_ctx = rt->ctx; /* tlcu_open_device made its context current */
    return TLCU_OK;
  }
  if (rt->ctx) rt->drv.cuDevicePrimaryCtxRelease(rt->dev); /* keep the first message */
  rt->ctx = NULL;
  rt->state = TLCU_FAILED;
  rt->init_status = st;
  return st;
}

TlcuResult tlcu_init(TlcuRuntime *rt, int ordinal) { return tlcu_init_lib(rt, ordinal, NULL); }

/* The library stays mapped: once cuInit ran, the driver's threads and exit
** handlers live in it (Triton and PyTorch never unload it either). */
TlcuResult tlcu_shutdown(TlcuRuntime *rt) {
  assert(rt != NULL);
  if (rt->state == TLCU_READY && tlcu_finish(rt) == TLCU_HUNG) return TLCU_HUNG;
  if (rt->state != TLCU_READY) { /* wedged: nothing is released, nothing touched */
    if (rt->state == TLCU_EMPTY || rt->state == TLCU_WEDGED) rt->state = TLCU_DOWN;
    return TLCU_OK;
  }
  if (rt->capture) { /* a capture never ended: end it, drop what it made */
    CUgraph g = NULL;
    if (rt->drv.cuStreamEndCapture(rt->capture_stream, &g) == CUDA_SUCCESS && g)
      rt->drv.cuGraphDestroy(g);
    graph_release(rt, rt->capture);
    rt->capture = NULL;
  }
  rt->update = NULL;
  if (rt->capture_stream) rt->drv.cuStreamDestroy(rt->capture_stream);
  rt->capture_stream = NULL;
  destroy_spare_events(rt);
  if (rt->blas_handle && rt->blas_release) rt->blas_release(rt->blas_handle);
  rt->blas_handle = NULL, rt->blas_workspace = 0;
  strings_free(&rt->strings);
  TlcuResult st = tlcu_release_all(rt);
  if (CU_CALL(rt, cuDevicePrimaryCtxRelease, (rt->dev)) != TLCU_OK) st = TLCU_FAIL;
  if (current_ctx == rt->ctx) current_ctx = NULL;
  rt->ctx = NULL;
  rt->state = TLCU_DOWN;
  return st;
}

TlcuResult tlcu_device_info(TlcuRuntime *rt, TlcuDeviceInfo *out) {
  TLCU_BEGIN(rt);
  *out = rt->info;
  return TLCU_OK;
}

/* }====================================================================== */

/* {======================================================================
** Modules and functions
** ======================================================================= */

/* Append the JIT error log, or say there was none. */
static void tlcu_append_jit_log(TlcuRuntime *rt) {
  if (rt->jit_error[0]) tlcu_append(rt, "\nJIT error log:\n%s", rt->jit_error);
  else tlcu_append(rt, "\n(the JIT error log is empty)");
}

TlcuResult tlcu_module_load_ptx(TlcuRuntime *rt, const char *ptx, CUmodule *out) {
  TLCU_BEGIN(rt);
  /* line info: the .loc lines (script lines) reach the cubin, so compute-sanitizer
  ** and the profilers name the .lua file and line */
  CUjit_option opts[5] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                          CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                          CU_JIT_GENERATE_LINE_INFO};
  void *vals[5] = {rt->jit_info, (void *)(uintptr_t)sizeof rt->jit_info, rt->jit_error,
                   (void *)(uintptr_t)sizeof rt->jit_error, (void *)(uintptr_t)1};
  CUmodule mod = NULL;
  memset(rt->jit_info, 0, sizeof rt->jit_info);
  memset(rt->jit_error, 0, sizeof rt->jit_error);
  TlcuResult st = CU_CALL(rt, cuModuleLoadDataEx, (&mod, ptx, 5, opts, vals));
  rt->jit_info[sizeof rt->jit_info - 1] = '\0';
  rt->jit_error[sizeof rt->jit_error - 1] = '\0';
  if (st != TLCU_OK) {
    tlcu_append_jit_log(rt);
    return st;
  }
  if (tlcu_hold(rt, TLCU_HELD_MODULE, (uint64_t)(uintptr_t)mod) != TLCU_OK) {
    rt->drv.cuModuleUnload(mod);
    return TLCU_FAIL;
  }
  *out = mod;
  return TLCU_OK;
}

TlcuResult tlcu_module_unload(TlcuRuntime *rt, CUmodule mod) {
  TLCU_DRAIN(rt, "unloading a module");
  return tlcu_give_back(rt, TLCU_HELD_MODULE, (uint64_t)(uintptr_t)mod);
}

TlcuResult tlcu_function_get(TlcuRuntime *rt, CUmodule mod, const char *name, CUfunction *out) {
  TLCU_BEGIN(rt);
  if (CU_CALL(rt, cuModuleGetFunction, (out, mod, name)) != TLCU_OK) {
    tlcu_append(rt, "; function '%s'", name);
    return TLCU_FAIL;
  }
  return TLCU_OK;
}

static TlcuResult tlcu_func_attr(TlcuRuntime *rt, CUfunction f, CUfunction_attribute a, int *v) {
  CU_DO(rt, cuFuncGetAttribute, (v, a, f));
  return TLCU_OK;
}

TlcuResult tlcu_function_info(TlcuRuntime *rt, CUfunction f, TlcuFuncInfo *out) {
  TLCU_BEGIN(rt);
  if (tlcu_func_attr(rt, f, CU_FUNC_ATTRIBUTE_NUM_REGS, &out->num_regs) ||
      tlcu_func_attr(rt, f, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, &out->local_bytes) ||
      tlcu_func_attr(rt, f, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, &out->static_smem) ||
      tlcu_func_attr(rt, f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &out->max_threads))
    return TLCU_FAIL;
  return TLCU_OK;
}

TlcuResult tlcu_function_set_max_dynamic_smem(TlcuRuntime *rt, CUfunction f, unsigned int bytes) {
  TLCU_BEGIN(rt);
  if (CU_CALL(rt, cuFuncSetAttribute,
              (f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)bytes)) != TLCU_OK) {
    tlcu_append(rt, "; %u bytes asked, the device allows %d per block (static included)", bytes,
                rt->info.smem_optin);
    return TLCU_FAIL;
  }
  return TLCU_OK;
}

/* }====================================================================== */

/* {======================================================================
** Launch
** ======================================================================= */

static unsigned int dim1(unsigned int d) { return d ? d : 1; }

/* Fill the driver's config; the cluster attribute only when a cluster is
** asked, the programmatic stream serialization one for a PDL launch (attrs:
** room for both). */
static TlcuResult tlcu_config(TlcuRuntime *rt, const TlcuLaunch *l, CUlaunchConfig *c,
                              CUlaunchAttribute *attrs) {
  unsigned int g[3], cl[3];
  /* every launch (k:launch, a launch plan, tlDeviceLaunch) is checked here, the same way */
  for (int i = 0; i < 3; i++) {
    g[i] = dim1(l->grid[i]);
    cl[i] = dim1(l->cluster[i]);
    unsigned max = i ? SM90_MAX_GRID_YZ : SM90_MAX_GRID_X;
    if (g[i] > max)
      return tlcu_fail(rt, TLCU_FAIL, "grid.%c = %u is more than the %u blocks it may be", "xyz"[i],
                       g[i], max);
    if (cl[i] > 1 && g[i] % cl[i] != 0) /* (a division costs more than the test) */
      return tlcu_fail(rt, TLCU_FAIL, "launch: grid.%c = %u is not a multiple of cluster.%c = %u",
                       "xyz"[i], g[i], "xyz"[i], cl[i]);
  }
  if (l->smem > SM90_MAX_SMEM)
    return tlcu_fail(rt, TLCU_FAIL, "%u bytes of shared memory, more than the %d a block may have",
                     l->smem, SM90_MAX_SMEM);
  memset(c, 0, sizeof *c);
  c->gridDimX = g[0], c->gridDimY = g[1], c->gridDimZ = g[2];
  c->blockDimX = dim1(l->block[0]), c->blockDimY = dim1(l->block[1]);
  c->blockDimZ = dim1(l->block[2]);
  c->sharedMemBytes = l->smem;
  c->hStream = l->stream;
  c->attrs = attrs;
  if (cl[0] * cl[1] * cl[2] > 1) {
    CUlaunchAttribute *cluster = &attrs[c->numAttrs++];
    memset(cluster, 0, sizeof *cluster);
    cluster->id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    cluster->value.clusterDim.x = cl[0];
    cluster->value.clusterDim.y = cl[1];
    cluster->value.clusterDim.z = cl[2];
  }
  if (l->pdl) {
    CUlaunchAttribute *pdl = &attrs[c->numAttrs++];
    memset(pdl, 0, sizeof *pdl);
    pdl->id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    pdl->value.programmaticStreamSerializationAllowed = 1;
  }
  return TLCU_OK;
}

static TlcuResult graph_capture(TlcuRuntime *rt, CUfunction f, const TlcuLaunch *cfg,
                                const char *name);
static TlcuResult graph_set_node(TlcuRuntime *rt, CUfunction f, const CUlaunchConfig *c,
                                 const TlcuLaunch *cfg, void **args, const char *name);

/* Issue the launch; without a cluster or PDL the plain entry point, which costs the driver less. */
static TlcuResult issue(TlcuRuntime *rt, CUfunction f, const CUlaunchConfig *c, void **args) {
  return c->numAttrs
             ? CU_CALL(rt, cuLaunchKernelEx, (c, f, args, NULL))
             : CU_CALL(rt, cuLaunchKernel,
                       (f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
                        c->blockDimZ, c->sharedMemBytes, c->hStream, args, NULL));
}

TlcuResult tlcu_launch(TlcuRuntime *rt, CUfunction f, const TlcuLaunch *cfg, void **args) {
  CUlaunchConfig c;
  CUlaunchAttribute attrs[2]; /* a cluster's and PDL's */
  const char *name = cfg->name ? cfg->name : "kernel";
  TlcuResult st = tlcu_begin(rt);
  if (st == TLCU_OK && !rt->capture && !rt->update) st = record_room(rt);
  /* a graph's node would outlive the records its argument points at */
  if (st == TLCU_OK && (rt->capture || rt->update) && cfg->hang)
    st = tlcu_fail(rt, TLCU_FAIL,
                   "kernel '%s' was compiled with debug-hangs: its launches cannot go into a graph",
                   name);
  if (st == TLCU_OK) st = tlcu_config(rt, cfg, &c, attrs);
  if (st == TLCU_OK && c.sharedMemBytes > SM90_SMEM_DEFAULT && !cfg->smem_allowed)
    st = tlcu_function_set_max_dynamic_smem(rt, f, c.sharedMemBytes);
  if (st == TLCU_OK && rt->update) return graph_set_node(rt, f, &c, cfg, args, name);
  if (st == TLCU_OK && rt->capture) c.hStream = rt->capture_stream;
  if (st == TLCU_OK && issue(rt, f, &c, args) != TLCU_OK) {
    tlcu_append(rt, "; grid (%u,%u,%u), block (%u,%u,%u), cluster (%u,%u,%u), %u B dynamic smem",
                c.gridDimX, c.gridDimY, c.gridDimZ, c.blockDimX, c.blockDimY, c.blockDimZ,
                dim1(cfg->cluster[0]), dim1(cfg->cluster[1]), dim1(cfg->cluster[2]),
                c.sharedMemBytes);
    st = TLCU_FAIL;
    /* an earlier launch that failed makes this one fail too (the error is
    ** sticky): name that one, at its line, when it is still followed */
    if (!rt->capture && rt->rec_tail > rt->rec_head && tlcu_finish(rt) != TLCU_OK && rt->kernel_msg)
      st = TLCU_FAIL;
  }
  if (st == TLCU_OK && rt->capture) return graph_capture(rt, f, cfg, name);
  if (st == TLCU_OK) return record_launches(rt, f, cfg, tlcu_intern(rt, name), 1, 0);
  if (rt->state != TLCU_WEDGED) tlcu_hang_free(rt, cfg->hang);
  return st;
}

TlcuResult tlcu_max_active_clusters(TlcuRuntime *rt, CUfunction f, const TlcuLaunch *cfg,
                                    int *out) {
  TLCU_BEGIN(rt);
  CUlaunchConfig c;
  CUlaunchAttribute attrs[2];
  if (tlcu_config(rt, cfg, &c, attrs) != TLCU_OK) return TLCU_FAIL;
  if (c.sharedMemBytes > SM90_SMEM_DEFAULT &&
      tlcu_function_set_max_dynamic_smem(rt, f, c.sharedMemBytes) != TLCU_OK)
    return TLCU_FAIL;
  *out = 0;
  CU_DO(rt, cuOccupancyMaxActiveClusters, (out, f, &c));
  return TLCU_OK;
}

/* }====================================================================== */

/* {======================================================================
** CUDA graphs: launches captured from a stream of the runtime, replayed,
** their nodes' arguments set by the same launches made again
** ======================================================================= */

typedef struct TlcuNode {
  CUgraphNode node;
  CUfunction fn;
  unsigned block[3], cluster[3];
  const char *name;
} TlcuNode;

struct TlcuGraph {
  CUgraph graph;
  CUgraphExec exec;
  TlcuNode *nodes;
  int n, cap;
  const char *name; /* "graph of N kernels", for the launch records */
};

int tlcu_graph_nodes(const TlcuGraph *g) { return g ? g->n : 0; }

static void graph_release(TlcuRuntime *rt, TlcuGraph *g) {
  if (!g) return;
  if (rt->state == TLCU_READY) { /* wedged or shut down: the driver is not touched */
    if (g->exec) rt->drv.cuGraphExecDestroy(g->exec);
    if (g->graph) rt->drv.cuGraphDestroy(g->graph);
  }
  free(g->nodes);
  free(g);
}

TlcuResult tlcu_graph_begin(TlcuRuntime *rt) {
  TLCU_BEGIN(rt);
  if (rt->capture || rt->update)
    return tlcu_fail(rt, TLCU_FAIL, "a graph is being captured or updated already");
  if (!rt->capture_stream) CU_DO(rt, cuStreamCreate, (&rt->capture_stream, CU_STREAM_NON_BLOCKING));
  TlcuGraph *g = calloc(1, sizeof *g);
  if (!g) return tlcu_fail(rt, TLCU_FAIL, "out of host memory for a graph");
  /* relaxed: a kernel's first launch may load its module while captured */
  if (CU_CALL(rt, cuStreamBeginCapture, (rt->capture_stream, CU_STREAM_CAPTURE_MODE_RELAXED)) !=
      TLCU_OK) {
    free(g);
    return TLCU_FAIL;
  }
  rt->capture = g;
  return TLCU_OK;
}

/* A launch was captured: the node it made is the capture's dependency now. */
static TlcuResult graph_capture(TlcuRuntime *rt, CUfunction f, const TlcuLaunch *cfg,
                                const char *name) {
  TlcuGraph *g = rt->capture;
  CUstreamCaptureStatus st;
  cuuint64_t id;
  CUgraph graph;
  const CUgraphNode *deps = NULL;
  size_t ndeps = 0;
  CU_DO(rt, cuStreamGetCaptureInfo, (rt->capture_stream, &st, &id, &graph, &deps, &ndeps));
  if (ndeps != 1 || !deps)
    return tlcu_fail(rt, TLCU_FAIL, "graph capture: the launch of '%s' made no single node", name);
  if (g->n == g->cap) {
    int cap = g->cap ? 2 * g->cap : 16;
    TlcuNode *nodes = realloc(g->nodes, (size_t)cap * sizeof *nodes);
    if (!nodes) return tlcu_fail(rt, TLCU_FAIL, "out of host memory for a graph");
    g->nodes = nodes, g->cap = cap;
  }
  TlcuNode *n = &g->nodes[g->n++];
  n->node = deps[0], n->fn = f, n->name = tlcu_intern(rt, name);
  for (int i = 0; i < 3; i++)
    n->block[i] = dim1(cfg->block[i]), n->cluster[i] = dim1(cfg->cluster[i]);
  return TLCU_OK;
}

TlcuResult tlcu_graph_end(TlcuRuntime *rt, TlcuGraph **out) {
  *out = NULL;
  TlcuGraph *g = rt->capture;
  if (!g) return tlcu_fail(rt, TLCU_FAIL, "no graph is being captured");
  rt->capture = NULL;
  TLCU_BEGIN(rt);
  TlcuResult st = CU_CALL(rt, cuStreamEndCapture, (rt->capture_stream, &g->graph));
  if (st == TLCU_OK) st = CU_CALL(rt, cuGraphInstantiateWithFlags, (&g->exec, g->graph, 0));
  char name[64];
  snprintf(name, sizeof name, "graph of %d kernels", g->n);
  g->name = tlcu_intern(rt, name);
  if (st != TLCU_OK) {
    graph_release(rt, g);
    return st;
  }
  *out = g;
  return TLCU_OK;
}

TlcuResult tlcu_graph_launch(TlcuRuntime *rt, TlcuGraph *g, CUstream stream, const char *file,
                             int line) {
  TLCU_BEGIN(rt);
  if (rt->capture || rt->update)
    return tlcu_fail(
        rt, TLCU_FAIL,
        "a graph cannot be launched while launches are captured into a graph or set its nodes");
  TlcuResult st = record_room(rt);
  if (st != TLCU_OK) return st;
  CU_DO(rt, cuGraphLaunch, (g->exec, stream));
  TlcuLaunch l;
  memset(&l, 0, sizeof l);
  l.stream = stream, l.file = file, l.line = line;
  return record_launches(rt, (CUfunction)(void *)g, &l, g->name, g->n > 0 ? (unsigned)g->n : 1, 1);
}

TlcuResult tlcu_graph_update_begin(TlcuRuntime *rt, TlcuGraph *g) {
  TLCU_BEGIN(rt);
  if (rt->capture || rt->update)
    return tlcu_fail(rt, TLCU_FAIL, "a graph is being captured or updated already");
  rt->update = g;
  rt->update_next = 0;
  return TLCU_OK;
}

/* A launch while updating: node update_next gets its grid and arguments. */
static TlcuResult graph_set_node(TlcuRuntime *rt, CUfunction f, const CUlaunchConfig *c,
                                 const TlcuLaunch *cfg, void **args, const char *name) {
  TlcuGraph *g = rt->update;
  int i = rt->update_next;
  if (i >= g->n)
    return tlcu_fail(rt, TLCU_FAIL, "the update launches more kernels than the graph's %d", g->n);
  const TlcuNode *n = &g->nodes[i];
  if (n->fn != f)
    return tlcu_fail(rt, TLCU_FAIL,
                     "launch #%d of the update is kernel '%s', node %d of the graph kernel '%s'",
                     i + 1, name, i, n->name);
  for (int d = 0; d < 3; d++)
    if (n->cluster[d] != dim1(cfg->cluster[d]) || n->block[d] != dim1(cfg->block[d]))
      return tlcu_fail(
          rt, TLCU_FAIL,
          "launch #%d of the update: kernel '%s' was captured with another block or cluster", i + 1,
          name);
  CUDA_KERNEL_NODE_PARAMS p;
  memset(&p, 0, sizeof p);
  p.func = f, p.gridDimX = c->gridDimX, p.gridDimY = c->gridDimY, p.gridDimZ = c->gridDimZ;
  p.blockDimX = c->blockDimX, p.blockDimY = c->blockDimY, p.blockDimZ = c->blockDimZ;
  p.sharedMemBytes = c->sharedMemBytes, p.kernelParams = args;
  CU_DO(rt, cuGraphExecKernelNodeSetParams, (g->exec, n->node, &p));
  rt->update_next++;
  return TLCU_OK;
}

TlcuResult tlcu_graph_update_end(TlcuRuntime *rt) {
  TlcuGraph *g = rt->update;
  rt->update = NULL;
  if (!g) return tlcu_fail(rt, TLCU_FAIL, "no graph is being updated");
  if (rt->update_next != g->n)
    return tlcu_fail(rt, TLCU_FAIL, "the update launched %d kernels; the graph has %d",
                     rt->update_next, g->n);
  return TLCU_OK;
}

void tlcu_graph_free(TlcuRuntime *rt, TlcuGraph *g) {
  if (rt->update == g) rt->update = NULL;
  graph_release(rt, g);
}

/* }====================================================================== */

/* {======================================================================
** Memory and synchronisation
** ======================================================================= */

TlcuResult tlcu_mem_alloc(TlcuRuntime *rt, size_t bytes, CUdeviceptr *out) {
  TLCU_BEGIN(rt);
  CUdeviceptr p = 0;
  if (CU_CALL(rt, cuMemAlloc, (&p, bytes)) != TLCU_OK) {
    tlcu_append(rt, "; %zu bytes asked", bytes);
    return TLCU_FAIL;
  }
  if (tlcu_hold(rt, TLCU_HELD_MEM, p) != TLCU_OK) {
    rt->drv.cuMemFree(p);
    return TLCU_FAIL;
  }
  *out = p;
  return TLCU_OK;
}

/* Is the handle held (made by this runtime and not given back)? */
static int tlcu_holds(const TlcuRuntime *rt, int kind, uint64_t handle) {
  for (size_t i = rt->nheld; i-- > 0;)
    if (rt->held[i].kind == kind && rt->held[i].handle == handle) return 1;
  return 0;
}

TlcuResult tlcu_mem_free(TlcuRuntime *rt, CUdeviceptr p) {
  TLCU_DRAIN(rt, "freeing device memory");
  /* an address not allocated here, or freed already, never reaches the driver
  ** (freeing it again could free what another allocation now holds) */
  if (!tlcu_holds(rt, TLCU_HELD_MEM, p))
    return tlcu_fail(
        rt, TLCU_FAIL,
        "device address 0x%llx was not allocated by this runtime, or was freed already",
        (unsigned long long)p);
  return tlcu_give_back(rt, TLCU_HELD_MEM, p);
}

TlcuResult tlcu_memcpy_htod(TlcuRuntime *rt, CUdeviceptr dst, const void *src, size_t bytes) {
  TLCU_DRAIN(rt, "a copy to the device");
  CU_DO(rt, cuMemcpyHtoD, (dst, src, bytes));
  return TLCU_OK;
}

TlcuResult tlcu_memcpy_dtoh(TlcuRuntime *rt, void *dst, CUdeviceptr src, size_t bytes) {
  TLCU_DRAIN(rt, "a copy from the device");
  CU_DO(rt, cuMemcpyDtoH, (dst, src, bytes));
  return TLCU_OK;
}

TlcuResult tlcu_memcpy_dtod(TlcuRuntime *rt, CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
  TLCU_DRAIN(rt, "a device-to-device copy");
  CU_DO(rt, cuMemcpyDtoD, (dst, src, bytes));
  return TLCU_OK;
}

TlcuResult tlcu_memset_d8(TlcuRuntime *rt, CUdeviceptr dst, unsigned char value, size_t bytes) {
  TLCU_DRAIN(rt, "a fill of device memory");
  CU_DO(rt, cuMemsetD8, (dst, value, bytes));
  return TLCU_OK;
}

TlcuResult tlcu_tensor_map_encode(TlcuRuntime *rt, void *map, const TltmDesc *d) {
  TLCU_BEGIN(rt);
  CU_DO(rt, cuTensorMapEncodeTiled,
        (map, d->dtype, d->rank, (void *)(uintptr_t)d->address, d->dims, d->strides, d->box,
         d->elem_strides, d->interleave, d->swizzle, d->l2_promotion, d->oob_fill));
  return TLCU_OK;
}

TlcuResult tlcu_synchronize(TlcuRuntime *rt) {
  TLCU_DRAIN(rt, "synchronize");
  CU_DO(rt, cuCtxSynchronize, ());
  return TLCU_OK;
}

/* }====================================================================== */

/* {======================================================================
** Events
** ======================================================================= */

TlcuResult tlcu_event_create(TlcuRuntime *rt, CUevent *out) {
  TLCU_BEGIN(rt);
  CUevent e = NULL;
  CU_DO(rt, cuEventCreate, (&e, 0 /* CU_EVENT_DEFAULT: timing on */));
  if (tlcu_hold(rt, TLCU_HELD_EVENT, (uint64_t)(uintptr_t)e) != TLCU_OK) {
    rt->drv.cuEventDestroy(e);
    return TLCU_FAIL;
  }
  *out = e;
  return TLCU_OK;
}

TlcuResult tlcu_event_record(TlcuRuntime *rt, CUevent e, CUstream s) {
  TLCU_BEGIN(rt);
  CU_DO(rt, cuEventRecord, (e, s));
  return TLCU_OK;
}

TlcuResult tlcu_event_synchronize(TlcuRuntime *rt, CUevent e) {
  TLCU_DRAIN(rt, "waiting for an event");
  CU_DO(rt, cuEventSynchronize, (e));
  return TLCU_OK;
}

TlcuResult tlcu_event_elapsed_ms(TlcuRuntime *rt, CUevent start, CUevent end, float *ms) {
  TLCU_BEGIN(rt);
  CU_DO(rt, cuEventElapsedTime, (ms, start, end));
  return TLCU_OK;
}

TlcuResult tlcu_event_destroy(TlcuRuntime *rt, CUevent e) {
  TLCU_BEGIN(rt);
  return tlcu_give_back(rt, TLCU_HELD_EVENT, (uint64_t)(uintptr_t)e);
}

/* }====================================================================== */

/* {======================================================================
** Streams, events between them, devices
** ======================================================================= */

/* An event of `flags`, held until destroyed or shutdown. */
static TlcuResult event_create_flags(TlcuRuntime *rt, unsigned flags, CUevent *out) {
  TLCU_BEGIN(rt);
  CUevent e = NULL;
  CU_DO(rt, cuEventCreate, (&e, flags));
  if (tlcu_hold(rt, TLCU_HELD_EVENT, (uint64_t)(uintptr_t)e) != TLCU_OK) {
    rt->drv.cuEventDestroy(e);
    return TLCU_FAIL;
  }
  *out = e;
  return TLCU_OK;
}

TlcuResult tlcu_event_create_sync(TlcuRuntime *rt, CUevent *out) {
  return event_create_flags(rt, TLCU_EVENT_DISABLE_TIMING, out);
}

TlcuResult tlcu_event_query(TlcuRuntime *rt, CUevent e, int *done) {
  TLCU_BEGIN(rt);
  CUresult r = rt->drv.cuEventQuery(e);
  *done = r == CUDA_SUCCESS;
  if (r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_READY) return TLCU_OK;
  return tlcu_check(rt, r, "cuEventQuery(e)");
}

static TlcuResult stream_create(TlcuRuntime *rt, int high, CUstream *out) {
  TLCU_BEGIN(rt);
  CUstream s = NULL;
  int least = 0, greatest = 0;
  if (high) CU_DO(rt, cuCtxGetStreamPriorityRange, (&least, &greatest));
  if (high) CU_DO(rt, cuStreamCreateWithPriority, (&s, CU_STREAM_NON_BLOCKING, greatest));
  else CU_DO(rt, cuStreamCreate, (&s, CU_STREAM_NON_BLOCKING));
  if (tlcu_hold(rt, TLCU_HELD_STREAM, (uint64_t)(uintptr_t)s) != TLCU_OK) {
    rt->drv.cuStreamDestroy(s);
    return TLCU_FAIL;
  }
  *out = s;
  return TLCU_OK;
}

TlcuResult tlcu_stream_create(TlcuRuntime *rt, CUstream *out) { return stream_create(rt, 0, out); }
TlcuResult tlcu_stream_create_high(TlcuRuntime *rt, CUstream *out) {
  return stream_create(rt, 1, out);
}

TlcuResult tlcu_stream_destroy(TlcuRuntime *rt, CUstream s) {
  TLCU_DRAIN(rt, "destroying a stream"); /* the launch records name the stream: they go first */
  if (!tlcu_holds(rt, TLCU_HELD_STREAM, (uint64_t)(uintptr_t)s))
    return tlcu_fail(rt, TLCU_FAIL,
                     "stream %p was not created by this runtime, or was destroyed already",
                     (void *)s);
  return tlcu_give_back(rt, TLCU_HELD_STREAM, (uint64_t)(uintptr_t)s);
}

int tlcu_stream_held(const TlcuRuntime *rt, CUstream s) {
  return s && tlcu_holds(rt, TLCU_HELD_STREAM, (uint64_t)(uintptr_t)s);
}

TlcuResult tlcu_stream_synchronize(TlcuRuntime *rt, CUstream s) {
  TLCU_DRAIN(rt, "a stream's synchronize");
  CU_DO(rt, cuStreamSynchronize, (s));
  return TLCU_OK;
}

TlcuResult tlcu_stream_wait_event(TlcuRuntime *rt, CUstream s, CUevent e) {
  TLCU_BEGIN(rt);
  CU_DO(rt, cuStreamWaitEvent, (s, e, 0));
  return TLCU_OK;
}

TlcuResult tlcu_peer_can_access(TlcuRuntime *rt, TlcuRuntime *peer, int *can) {
  TLCU_BEGIN(rt);
  *can = 0;
  CU_DO(rt, cuDeviceCanAccessPeer, (can, rt->dev, peer->dev));
  return TLCU_OK;
}

#define TLCU_PEER_ALREADY_ENABLED 704 /* CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED */

TlcuResult tlcu_peer_enable(TlcuRuntime *rt, TlcuRuntime *peer) {
  TLCU_BEGIN(rt);
  if (peer->state != TLCU_READY || peer == rt)
    return tlcu_fail(rt, TLCU_FAIL, "peer access: not another device's runtime");
  CUresult r = rt->drv.cuCtxEnablePeerAccess(peer->ctx, 0);
  if (r == (CUresult)TLCU_PEER_ALREADY_ENABLED) return TLCU_OK;
  if (tlcu_check(rt, r, "cuCtxEnablePeerAccess(peer, 0)") != TLCU_OK) {
    tlcu_append(rt, "; device %d to device %d", rt->info.ordinal, peer->info.ordinal);
    return TLCU_FAIL;
  }
  return TLCU_OK;
}

TlcuResult tlcu_device_count(TlcuRuntime *rt, int *out) {
  TLCU_BEGIN(rt);
  *out = 0;
  CU_DO(rt, cuDeviceGetCount, (out));
  return TLCU_OK;
}

/* }====================================================================== */
