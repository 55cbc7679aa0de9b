/*
** fake_cuda.c -- a stand-in CUDA driver (libfakecuda.so) for testing, without a
** GPU, what the runtime does when a kernel hangs or fails (spec/hang_spec.lua,
** through TILUA_LIBCUDA). It has one device and host memory for device memory;
** kernels run instantly and do nothing, except as FAKE_CUDA_KERNELS says:
**
**   hang   every launch never finishes: cuEventQuery answers NOT_READY, and
**          every call that would wait for it (synchronize, copies, frees,
**          event waits, and an exit handler, like the real driver's teardown)
**          blocks forever, so a runtime that calls one after a hang hangs
**   trap   every launch fails with CUDA_ERROR_ILLEGAL_INSTRUCTION, which then
**          sticks; with FAKE_CUDA_RECORDS=1 the kernel's last parameter is taken
**          for the debug-hangs records and gets two: warp 0 gave up on an
**          mbarrier at site 1, warp 1 waits at named barrier 1 at site 2
**
** Only what src/cuda/cuda_rt.c asks cuGetProcAddress_v2 for is here.
*/
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda/hang.h"

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum { OK = 0, NOT_READY = 600, ILLEGAL_INSTRUCTION = 715, NOT_FOUND = 500 };
enum { RUN_DONE, RUN_HANG, RUN_TRAP };

/* What the next launch does: FAKE_CUDA_KERNELS, from launch FAKE_CUDA_AFTER on
** (1-based; the earlier ones finish). */
static int mode(void) {
  static long launches;
  const char *m = getenv("FAKE_CUDA_KERNELS"), *after = getenv("FAKE_CUDA_AFTER");
  if (after && ++launches < atol(after)) return RUN_DONE;
  return m && !strcmp(m, "hang") ? RUN_HANG : m && !strcmp(m, "trap") ? RUN_TRAP : RUN_DONE;
}

static int hung, trapped; /* a launch hung / trapped (sticky) */

static void block_forever(void) {
  for (;;)
    pause();
}

/* What a call that waits for the device does. */
static CUresult wait_device(void) {
  if (hung) block_forever();
  return trapped ? ILLEGAL_INSTRUCTION : OK;
}

static void exit_handler(void) {
  if (hung) block_forever(); /* the real driver's teardown waits for its kernels */
}

typedef struct Fn {
  char name[128];
  int nparams;
} Fn;

typedef struct Module {
  Fn fn[16];
  int n;
} Module;

typedef struct Event {
  int state;
} Event;

/* {=== errors, versions, devices, contexts */
#define EXPORT __attribute__((visibility("default")))

EXPORT CUresult cuInit(unsigned int flags);
EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                    unsigned long long flags, int *status);

CUresult cuInit(unsigned int flags) {
  (void)flags;
  atexit(exit_handler);
  return OK;
}
static CUresult cuGetErrorName(CUresult e, const char **s) {
  *s = e == ILLEGAL_INSTRUCTION ? "CUDA_ERROR_ILLEGAL_INSTRUCTION" : e == NOT_READY ? "CUDA_ERROR_NOT_READY" : "CUDA_ERROR_UNKNOWN";
  return OK;
}
static CUresult cuGetErrorString(CUresult e, const char **s) {
  *s = e == ILLEGAL_INSTRUCTION ? "an illegal instruction was encountered" : "fake";
  return OK;
}
static CUresult cuDriverGetVersion(int *v) { return *v = 13000, OK; }
/* FAKE_CUDA_DEVICES devices (default 1), all alike */
static CUresult cuDeviceGetCount(int *n) {
  const char *d = getenv("FAKE_CUDA_DEVICES");
  return *n = d && atoi(d) > 0 ? atoi(d) : 1, OK;
}
static CUresult cuDeviceGet(int *d, int o) { return *d = o, OK; }
static CUresult cuDeviceGetName(char *s, int n, int d) {
  (void)d;
  snprintf(s, (size_t)n, "Fake GPU");
  return OK;
}
static CUresult cuDeviceGetAttribute(int *v, int a, int d) {
  (void)d;
  *v = a == 16 ? 4 : a == 75 ? 9 : a == 76 ? 0 : a == 97 ? 232448 : 0;
  return OK;
}
static CUresult cuDeviceTotalMem(size_t *b, int d) {
  (void)d;
  return *b = (size_t)1 << 30, OK;
}
static CUresult cuDevicePrimaryCtxRetain(void **c, int d) {
  (void)d;
  static int ctx;
  return *c = &ctx, OK;
}
static CUresult cuDevicePrimaryCtxRelease(int d) {
  (void)d;
  return wait_device();
}
static CUresult cuCtxSetCurrent(void *c) {
  (void)c;
  return OK;
}
static CUresult cuCtxSynchronize(void) { return wait_device(); }
/* }=== */

/* {=== modules and launches */

/* The .entry names of the PTX, with their parameter counts. */
static CUresult cuModuleLoadDataEx(void **m, const void *image, unsigned int n, void *o, void **v) {
  (void)n, (void)o, (void)v;
  Module *mod = calloc(1, sizeof *mod);
  for (const char *p = strstr(image, ".entry "); p && mod->n < 16; p = strstr(p + 1, ".entry ")) {
    Fn *f = &mod->fn[mod->n++];
    sscanf(p + 7, "%127[A-Za-z0-9_$]", f->name);
    const char *end = strchr(p, ')');
    for (const char *q = strstr(p, ".param"); q && end && q < end; q = strstr(q + 1, ".param"))
      f->nparams++;
  }
  *m = mod;
  return OK;
}
static CUresult cuModuleUnload(void *m) {
  CUresult r = wait_device();
  free(m);
  return r;
}
static CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
  Module *mod = m;
  for (int i = 0; i < mod->n; i++)
    if (!strcmp(mod->fn[i].name, name)) return *f = &mod->fn[i], OK;
  return NOT_FOUND;
}
static CUresult cuFuncGetAttribute(int *v, int a, void *f) {
  (void)a, (void)f;
  return *v = 32, OK;
}
static CUresult cuFuncSetAttribute(void *f, int a, int v) {
  (void)f, (void)a, (void)v;
  return OK;
}

/* Two records: warp 0 gave up on an mbarrier (site 1), warp 1 waits at a named barrier (site 2). */
static void write_records(uint32_t *s) {
  uint32_t *w1 = s + TLHANG_SLOT_WORDS;
  s[TLHANG_SITE] = 1, s[TLHANG_BARRIER] = 0x40, s[TLHANG_PHASE] = 1, s[TLHANG_WAITED] = 1000123;
  s[TLHANG_STATE] = TLHANG_MBARRIER;
  w1[TLHANG_SITE] = 2, w1[TLHANG_BARRIER] = 1, w1[TLHANG_PHASE] = 64, w1[TLHANG_STATE] = TLHANG_NAMED;
}

/* What a launch does, either entry point. */
static CUresult run_kernel(Fn *fn, void **params) {
  if (trapped) return ILLEGAL_INSTRUCTION;
  int m = mode();
  if (m == RUN_HANG) hung = 1;
  if (m == RUN_TRAP) {
    const char *rec = getenv("FAKE_CUDA_RECORDS");
    if (rec && !strcmp(rec, "1") && fn->nparams > 0) {
      CUdeviceptr p;
      memcpy(&p, params[fn->nparams - 1], sizeof p);
      write_records((uint32_t *)(uintptr_t)p);
    }
    trapped = 1;
  }
  return OK;
}
static CUresult cuLaunchKernelEx(const void *cfg, void *f, void **params, void **extra) {
  (void)cfg, (void)extra;
  return run_kernel(f, params);
}
static CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                               unsigned smem, void *stream, void **params, void **extra) {
  (void)gx, (void)gy, (void)gz, (void)bx, (void)by, (void)bz, (void)smem, (void)stream, (void)extra;
  return run_kernel(f, params);
}
/* }=== */

/* {=== memory */
static CUresult cuMemAlloc(CUdeviceptr *p, size_t n) {
  void *m = calloc(1, n ? n : 1);
  *p = (CUdeviceptr)(uintptr_t)m;
  return m ? OK : 2;
}
static CUresult cuMemFree(CUdeviceptr p) {
  CUresult r = wait_device();
  free((void *)(uintptr_t)p); /* also after a trap: the test process checks for leaks */
  return r;
}
static CUresult cuMemcpyHtoD(CUdeviceptr d, const void *s, size_t n) {
  CUresult r = wait_device();
  if (r == OK) memcpy((void *)(uintptr_t)d, s, n);
  return r;
}
static CUresult cuMemcpyDtoH(void *d, CUdeviceptr s, size_t n) {
  CUresult r = wait_device();
  if (r == OK) memcpy(d, (void *)(uintptr_t)s, n);
  return r;
}
static CUresult cuMemcpyDtoD(CUdeviceptr d, CUdeviceptr s, size_t n) {
  CUresult r = wait_device();
  if (r == OK) memmove((void *)(uintptr_t)d, (void *)(uintptr_t)s, n);
  return r;
}
static CUresult cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) {
  CUresult r = wait_device();
  if (r == OK) memset((void *)(uintptr_t)d, v, n);
  return r;
}
static CUresult cuMemHostAlloc(void **p, size_t n, unsigned int flags) {
  (void)flags;
  *p = calloc(1, n ? n : 1);
  return *p ? OK : 2;
}
static CUresult cuMemHostGetDevicePointer(CUdeviceptr *d, void *p, unsigned int flags) {
  (void)flags;
  return *d = (CUdeviceptr)(uintptr_t)p, OK;
}
static CUresult cuMemFreeHost(void *p) {
  free(p);
  return OK;
}
/* }=== */

/* {=== tensor maps and occupancy: accepted, answering one cluster */
static CUresult cuTensorMapEncodeTiled(void *map, int dtype, unsigned int rank, void *address,
                                       const uint64_t *dims, const uint64_t *strides,
                                       const uint32_t *box, const uint32_t *elem_strides,
                                       int interleave, int swizzle, int l2, int oob) {
  (void)dtype, (void)rank, (void)address, (void)dims, (void)strides, (void)box;
  (void)elem_strides, (void)interleave, (void)swizzle, (void)l2, (void)oob;
  memset(map, 0, 128);
  return OK;
}
static CUresult cuOccupancyMaxActiveClusters(int *clusters, void *f, const void *cfg) {
  (void)f, (void)cfg;
  return *clusters = 1, OK;
}
/* }=== */

/* {=== streams: every call is done when it returns, so they only need to exist */
static CUresult cuStreamCreate(void **s, unsigned int flags) {
  (void)flags;
  *s = calloc(1, 16);
  return *s ? OK : 2;
}
static CUresult cuStreamCreateWithPriority(void **s, unsigned int flags, int priority) {
  (void)priority;
  return cuStreamCreate(s, flags);
}
static CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest) {
  *least = 0, *greatest = -5;
  return OK;
}
static CUresult cuStreamDestroy(void *s) {
  free(s);
  return OK;
}
static CUresult cuStreamSynchronize(void *s) {
  (void)s;
  return wait_device();
}
static CUresult cuStreamWaitEvent(void *s, void *e, unsigned int flags) {
  (void)s, (void)e, (void)flags;
  return OK;
}
/* }=== */

/* {=== events */
static CUresult cuEventCreate(void **e, unsigned int flags) {
  (void)flags;
  *e = calloc(1, sizeof(Event));
  return OK;
}
static CUresult cuEventRecord(void *e, void *s) {
  (void)s;
  ((Event *)e)->state = hung ? RUN_HANG : trapped ? RUN_TRAP : RUN_DONE;
  return OK;
}
static CUresult cuEventQuery(void *e) {
  int st = ((Event *)e)->state;
  return st == RUN_HANG ? NOT_READY : st == RUN_TRAP ? ILLEGAL_INSTRUCTION : OK;
}
static CUresult cuEventSynchronize(void *e) {
  (void)e;
  return wait_device();
}
static CUresult cuEventElapsedTime(float *ms, void *a, void *b) {
  (void)a, (void)b;
  return *ms = 0.5f, OK;
}
static CUresult cuEventDestroy(void *e) {
  free(e);
  return OK;
}
/* }=== */

#define ENTRY(name) {#name, (void *)name}
static const struct {
  const char *name;
  void *fn;
} entries[] = {
    ENTRY(cuGetErrorName), ENTRY(cuGetErrorString), ENTRY(cuDriverGetVersion),
    ENTRY(cuDeviceGetCount), ENTRY(cuDeviceGet), ENTRY(cuDeviceGetName),
    ENTRY(cuDeviceGetAttribute), ENTRY(cuDeviceTotalMem), ENTRY(cuDevicePrimaryCtxRetain),
    ENTRY(cuDevicePrimaryCtxRelease), ENTRY(cuCtxSetCurrent), ENTRY(cuCtxSynchronize),
    ENTRY(cuModuleLoadDataEx), ENTRY(cuModuleUnload), ENTRY(cuModuleGetFunction),
    ENTRY(cuFuncGetAttribute), ENTRY(cuFuncSetAttribute), ENTRY(cuLaunchKernelEx), ENTRY(cuLaunchKernel),
    ENTRY(cuMemAlloc), ENTRY(cuMemFree), ENTRY(cuMemcpyHtoD), ENTRY(cuMemcpyDtoH),
    ENTRY(cuMemcpyDtoD), ENTRY(cuMemsetD8), ENTRY(cuMemHostAlloc),
    ENTRY(cuMemHostGetDevicePointer), ENTRY(cuMemFreeHost), ENTRY(cuEventCreate),
    ENTRY(cuEventRecord), ENTRY(cuEventQuery), ENTRY(cuEventSynchronize),
    ENTRY(cuEventElapsedTime), ENTRY(cuEventDestroy), ENTRY(cuTensorMapEncodeTiled),
    ENTRY(cuOccupancyMaxActiveClusters), ENTRY(cuStreamCreate), ENTRY(cuStreamDestroy),
    ENTRY(cuStreamSynchronize), ENTRY(cuStreamWaitEvent), ENTRY(cuStreamCreateWithPriority),
    ENTRY(cuCtxGetStreamPriorityRange),
};

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, unsigned long long flags,
                             int *status) {
  (void)version, (void)flags;
  for (size_t i = 0; i < sizeof entries / sizeof entries[0]; i++)
    if (!strcmp(entries[i].name, symbol)) {
      *pfn = entries[i].fn;
      if (status) *status = 0;
      return OK;
    }
  *pfn = NULL;
  if (status) *status = 1;
  return NOT_FOUND;
}
