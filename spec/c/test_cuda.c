/*
** test_cuda.c -- the CUDA Driver API runtime (src/cuda/cuda_rt.c).
**
** Without a GPU: checks that every call fails cleanly before init, after a
** failed init (missing library, a library that is no driver) and after
** shutdown, and that the test kernels assemble with ptxas when it is there;
** then exits 77 ("SKIP: no GPU"), or 1 if any of those checks failed.
** With a GPU: JIT-loads two hand-written sm_90a kernels, launches them (plain,
** with >48 KiB dynamic smem, with a 2-CTA cluster), checks the results on
** fresh random data against a CPU reference, checks the JIT error log of a
** broken module, and times a 256 MiB cuMemcpyDtoD with events.
**
** Builds standalone, without Lua:
**   gcc -std=c11 -I src spec/c/test_cuda.c src/cuda/cuda_rt.c src/cuda/hang.c -ldl
*/
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda/cuda_rt.h"

#define SKIP_CODE 77

static int failures;

static int check(int ok, const char *what, int line) {
  if (!ok) {
    failures++;
    printf("FAIL test_cuda.c:%d: %s\n", line, what);
  }
  return ok;
}
#define CHECK(c) check((c) != 0, #c, __LINE__)
#define HAS(s, sub) (strstr((s), (sub)) != NULL)
/* A runtime call that must succeed; on failure prints the runtime's error. */
#define MUST(rt, call)                                                                             \
  (check((call) == TLCU_OK, #call, __LINE__) ? 1 : (printf("  error: %s\n", tlcu_error(rt)), 0))

/* {======================================================================
** Random numbers (xorshift64*), seeded from the clock
** ======================================================================= */

static uint64_t rng_state;

static uint64_t rng_next(void) {
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1DULL;
}

static float rng_float(void) { /* uniform in [-1, 1) */
  return (float)((double)(rng_next() >> 40) / (double)(1ULL << 23) - 1.0);
}

static uint64_t seed_from_clock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t s = (uint64_t)ts.tv_sec * 1000000007ULL ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid();
  return s ? s : 1;
}

/* }====================================================================== */

/* {======================================================================
** The kernels (assembled with ptxas -arch=sm_90a)
** ======================================================================= */

static const char *const kernels_ptx =
    ".version 8.0\n"
    ".target sm_90a\n"
    ".address_size 64\n"
    "\n"
    "// c[i] = a[i] + b[i] for i < n, one thread per element\n"
    ".visible .entry tl_vadd(\n"
    "  .param .u64 tl_vadd_a,\n"
    "  .param .u64 tl_vadd_b,\n"
    "  .param .u64 tl_vadd_c,\n"
    "  .param .u32 tl_vadd_n)\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b32 %r<6>;\n"
    "  .reg .f32 %f<4>;\n"
    "  .reg .b64 %rd<11>;\n"
    "\n"
    "  mov.u32 %r1, %ctaid.x;\n"
    "  mov.u32 %r2, %ntid.x;\n"
    "  mov.u32 %r3, %tid.x;\n"
    "  mad.lo.s32 %r4, %r1, %r2, %r3;\n"
    "  ld.param.u32 %r5, [tl_vadd_n];\n"
    "  setp.ge.u32 %p1, %r4, %r5;\n"
    "  @%p1 bra DONE;\n"
    "  ld.param.u64 %rd1, [tl_vadd_a];\n"
    "  ld.param.u64 %rd2, [tl_vadd_b];\n"
    "  ld.param.u64 %rd3, [tl_vadd_c];\n"
    "  cvta.to.global.u64 %rd4, %rd1;\n"
    "  cvta.to.global.u64 %rd5, %rd2;\n"
    "  cvta.to.global.u64 %rd6, %rd3;\n"
    "  mul.wide.u32 %rd7, %r4, 4;\n"
    "  add.s64 %rd8, %rd4, %rd7;\n"
    "  add.s64 %rd9, %rd5, %rd7;\n"
    "  add.s64 %rd10, %rd6, %rd7;\n"
    "  ld.global.f32 %f1, [%rd8];\n"
    "  ld.global.f32 %f2, [%rd9];\n"
    "  add.rn.f32 %f3, %f1, %f2;\n"
    "  st.global.f32 [%rd10], %f3;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n"
    "\n"
    "// out[ctaid.x] = %cluster_ctarank | %cluster_nctarank << 8, from thread 0\n"
    ".visible .entry tl_cluster_rank(\n"
    "  .param .u64 tl_cluster_rank_out)\n"
    ".explicitcluster\n"
    ".reqnctapercluster 2, 1, 1\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b32 %r<7>;\n"
    "  .reg .b64 %rd<5>;\n"
    "\n"
    "  mov.u32 %r1, %tid.x;\n"
    "  setp.ne.u32 %p1, %r1, 0;\n"
    "  @%p1 bra DONE;\n"
    "  mov.u32 %r2, %cluster_ctarank;\n"
    "  mov.u32 %r3, %cluster_nctarank;\n"
    "  shl.b32 %r4, %r3, 8;\n"
    "  or.b32 %r5, %r4, %r2;\n"
    "  mov.u32 %r6, %ctaid.x;\n"
    "  ld.param.u64 %rd1, [tl_cluster_rank_out];\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n"
    "  mul.wide.u32 %rd3, %r6, 4;\n"
    "  add.s64 %rd4, %rd2, %rd3;\n"
    "  st.global.u32 [%rd4], %r5;\n"
    "DONE:\n"
    "  ret;\n"
    "}\n";

#define BAD_OPERAND "%f_undeclared"

/* The kernels with one operand replaced by an undeclared register. */
static char *broken_ptx(void) {
  const char *at = strstr(kernels_ptx, "%f1, %f2;");
  size_t pre = (size_t)(at - kernels_ptx) + strlen("%f1, ");
  const char *post = at + strlen("%f1, %f2");
  char *s = malloc(strlen(kernels_ptx) + sizeof BAD_OPERAND);
  if (!s) return NULL;
  memcpy(s, kernels_ptx, pre);
  strcpy(s + pre, BAD_OPERAND);
  strcat(s, post);
  return s;
}

/* }====================================================================== */

/* {======================================================================
** No-GPU checks
** ======================================================================= */

/* Every call but init on a runtime that is not ready: status `st`, and when
** `msg` is given the error message left exactly as it was. */
static void check_all_fail(TlcuRuntime *rt, TlcuResult st, const char *msg) {
  TlcuDeviceInfo di;
  TlcuFuncInfo fi;
  CUmodule mod = (CUmodule)(uintptr_t)0x1234;
  CUfunction f = (CUfunction)(uintptr_t)0x5678;
  CUdeviceptr p = 0x9abc;
  CUevent e = (CUevent)(uintptr_t)0xdef0;
  TlcuLaunch l = {.grid = {1}, .block = {32}};
  float ms = -1.0f;
  char host[16] = {0};
  void *args[1] = {&p};
  TlcuResult r[] = {
      tlcu_device_info(rt, &di),
      tlcu_module_load_ptx(rt, kernels_ptx, &mod),
      tlcu_module_unload(rt, mod),
      tlcu_function_get(rt, mod, "tl_vadd", &f),
      tlcu_function_info(rt, f, &fi),
      tlcu_function_set_max_dynamic_smem(rt, f, 100 * 1024),
      tlcu_launch(rt, f, &l, args),
      tlcu_mem_alloc(rt, 1024, &p),
      tlcu_mem_free(rt, p),
      tlcu_memcpy_htod(rt, p, host, sizeof host),
      tlcu_memcpy_dtoh(rt, host, p, sizeof host),
      tlcu_memcpy_dtod(rt, p, p, sizeof host),
      tlcu_memset_d8(rt, p, 0, sizeof host),
      tlcu_synchronize(rt),
      tlcu_event_create(rt, &e),
      tlcu_event_record(rt, e, NULL),
      tlcu_event_synchronize(rt, e),
      tlcu_event_elapsed_ms(rt, e, e, &ms),
      tlcu_event_destroy(rt, e),
  };
  for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
    if (!check(r[i] == st, "a call on a runtime that is not ready gives the expected status",
               __LINE__))
      printf("  call #%zu gave %d, expected %d\n", i, (int)r[i], (int)st);
  CHECK(mod == (CUmodule)(uintptr_t)0x1234 && f == (CUfunction)(uintptr_t)0x5678);
  CHECK(p == 0x9abc && e == (CUevent)(uintptr_t)0xdef0 && ms == -1.0f);
  CHECK(!tlcu_ready(rt));
  if (msg && !CHECK(strcmp(tlcu_error(rt), msg) == 0))
    printf("  message now: %s\n  expected:    %s\n", tlcu_error(rt), msg);
}

static void test_empty_runtime(void) {
  static TlcuRuntime rt; /* zeroed: the empty state */
  CHECK(!tlcu_ready(&rt));
  CHECK(tlcu_error(&rt)[0] == '\0');
  check_all_fail(&rt, TLCU_FAIL, NULL);
  CHECK(HAS(tlcu_error(&rt), "not initialised"));
  CHECK(tlcu_shutdown(&rt) == TLCU_OK);
  check_all_fail(&rt, TLCU_FAIL, NULL);
  CHECK(HAS(tlcu_error(&rt), "shut down"));
}

static void test_missing_driver(void) {
  static TlcuRuntime rt;
  const char *lib = "libtilua-no-such-driver.so.1";
  CHECK(tlcu_init_lib(&rt, 0, lib) == TLCU_NO_GPU);
  const char *msg = tlcu_error(&rt);
  CHECK(HAS(msg, "no CUDA driver: libtilua-no-such-driver.so.1 not found (dlopen: "));
  CHECK(HAS(msg, "); compiling works, launching needs an NVIDIA GPU"));
  char saved[TLCU_ERR_SIZE];
  snprintf(saved, sizeof saved, "%s", msg);
  check_all_fail(&rt, TLCU_NO_GPU, saved);
  CHECK(tlcu_shutdown(&rt) == TLCU_OK);
  CHECK(tlcu_shutdown(&rt) == TLCU_OK);
  check_all_fail(&rt, TLCU_NO_GPU, saved);
}

/* A library that loads but is no CUDA driver. */
static void test_not_a_driver(void) {
  static TlcuRuntime rt;
  CHECK(tlcu_init_lib(&rt, 0, "libc.so.6") == TLCU_FAIL);
  CHECK(HAS(tlcu_error(&rt), "libc.so.6 has no cuGetProcAddress_v2"));
  char saved[TLCU_ERR_SIZE];
  snprintf(saved, sizeof saved, "%s", tlcu_error(&rt));
  check_all_fail(&rt, TLCU_FAIL, saved);
  CHECK(tlcu_shutdown(&rt) == TLCU_OK);
}

/* Run ptxas on `ptx`; its output goes to `log`. Returns its exit status. */
static int run_ptxas(const char *ptxas, const char *ptx, char *log, size_t n) {
  char src[] = "/tmp/tilua-test-cuda-XXXXXX";
  int fd = mkstemp(src);
  if (fd < 0) return -1;
  FILE *f = fdopen(fd, "w");
  fputs(ptx, f);
  fclose(f);
  char cmd[1024];
  snprintf(cmd, sizeof cmd, "'%s' -arch=sm_90a -o /dev/null '%s' 2>&1", ptxas, src);
  FILE *p = popen(cmd, "r");
  size_t got = p ? fread(log, 1, n - 1, p) : 0;
  log[got] = '\0';
  int rc = p ? pclose(p) : -1;
  remove(src);
  return rc;
}

/* The kernels assemble; the broken copy does not, naming the bad operand. */
static void test_ptxas(void) {
  const char *ptxas = getenv("TILUA_PTXAS");
  if (!ptxas || !*ptxas) ptxas = "/usr/local/cuda/bin/ptxas";
  if (access(ptxas, X_OK) != 0) {
    printf("note: no ptxas at %s (set TILUA_PTXAS): PTX assembly not checked\n", ptxas);
    return;
  }
  char log[4096];
  int before = failures;
  if (!CHECK(run_ptxas(ptxas, kernels_ptx, log, sizeof log) == 0)) printf("  ptxas: %s\n", log);
  char *bad = broken_ptx();
  if (!CHECK(bad != NULL)) return;
  CHECK(run_ptxas(ptxas, bad, log, sizeof log) != 0);
  CHECK(HAS(log, BAD_OPERAND));
  free(bad);
  if (failures == before)
    printf("%s -arch=sm_90a: test kernels assemble, the broken copy is rejected\n", ptxas);
}

/* }====================================================================== */

/* {======================================================================
** GPU checks
** ======================================================================= */

typedef struct Gpu {
  TlcuRuntime *rt;
  TlcuDeviceInfo info;
  CUmodule mod;
  CUfunction vadd, ranks;
} Gpu;

static void test_init_errors(Gpu *g) {
  static TlcuRuntime other;
  CHECK(tlcu_init(&other, 9999) == TLCU_FAIL);
  CHECK(HAS(tlcu_error(&other), "CUDA device 9999 does not exist"));
  CHECK(tlcu_shutdown(&other) == TLCU_OK);
  CHECK(tlcu_init(g->rt, 0) == TLCU_FAIL);
  CHECK(HAS(tlcu_error(g->rt), "already initialised"));
  CHECK(tlcu_ready(g->rt));
}

static int test_load(Gpu *g) {
  TlcuRuntime *rt = g->rt;
  if (!MUST(rt, tlcu_module_load_ptx(rt, kernels_ptx, &g->mod))) return 0;
  if (!MUST(rt, tlcu_function_get(rt, g->mod, "tl_vadd", &g->vadd))) return 0;
  if (!MUST(rt, tlcu_function_get(rt, g->mod, "tl_cluster_rank", &g->ranks))) return 0;
  TlcuFuncInfo fi;
  if (MUST(rt, tlcu_function_info(rt, g->vadd, &fi))) {
    printf("tl_vadd: %d registers, %d B local, %d B static smem, %d max threads\n", fi.num_regs,
           fi.local_bytes, fi.static_smem, fi.max_threads);
    CHECK(fi.num_regs > 0 && fi.local_bytes == 0 && fi.max_threads >= 256);
  }
  CUfunction f = NULL;
  CHECK(tlcu_function_get(rt, g->mod, "no_such_kernel", &f) == TLCU_FAIL);
  const char *msg = tlcu_error(rt);
  CHECK(HAS(msg, "cuModuleGetFunction(") && HAS(msg, ": CUDA_ERROR_NOT_FOUND ("));
  CHECK(HAS(msg, "no_such_kernel"));
  printf("missing function -> %s\n", msg);
  return 1;
}

static void test_broken_ptx(Gpu *g) {
  TlcuRuntime *rt = g->rt;
  char *bad = broken_ptx();
  CUmodule mod = NULL;
  if (!CHECK(bad != NULL)) return;
  CHECK(tlcu_module_load_ptx(rt, bad, &mod) == TLCU_FAIL);
  free(bad);
  const char *msg = tlcu_error(rt), *log = tlcu_jit_error_log(rt);
  CHECK(HAS(msg, "cuModuleLoadDataEx(") && HAS(msg, ": CUDA_ERROR_INVALID_PTX ("));
  CHECK(log[0] != '\0' && HAS(msg, "JIT error log:") && HAS(msg, log));
  CHECK(HAS(log, BAD_OPERAND));
  CHECK(mod == NULL);
  printf("broken PTX -> %s\n", msg);
}

/* Launch tl_vadd on n random pairs and compare bit for bit with the CPU. */
static void run_vadd(Gpu *g, const TlcuLaunch *l, const char *what, CUdeviceptr da, CUdeviceptr db,
                     CUdeviceptr dc, const float *a, const float *b, float *c, unsigned int n) {
  TlcuRuntime *rt = g->rt;
  void *args[] = {&da, &db, &dc, &n};
  if (!MUST(rt, tlcu_memset_d8(rt, dc, 0xff, (size_t)n * 4))) return;
  if (!MUST(rt, tlcu_launch(rt, g->vadd, l, args))) return;
  if (!MUST(rt, tlcu_synchronize(rt))) return;
  if (!MUST(rt, tlcu_memcpy_dtoh(rt, c, dc, (size_t)n * 4))) return;
  unsigned int bad = 0, first = 0;
  for (unsigned int i = 0; i < n; i++) {
    float want = a[i] + b[i];
    if (memcmp(&want, &c[i], 4) != 0 && bad++ == 0) first = i;
  }
  if (!check(bad == 0, what, __LINE__))
    printf("  %u of %u wrong, first at %u: %g + %g gave %g\n", bad, n, first, a[first], b[first],
           c[first]);
  else
    printf("%s: %u elements match the CPU\n", what, n);
}

static void test_vadd(Gpu *g) {
  TlcuRuntime *rt = g->rt;
  unsigned int n = (1u << 20) + 1 + (unsigned int)(rng_next() % 255); /* n % 256 != 0 */
  size_t bytes = (size_t)n * 4;
  float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
  CUdeviceptr da = 0, db = 0, dc = 0;
  if (!CHECK(a && b && c)) goto done;
  for (unsigned int i = 0; i < n; i++)
    a[i] = rng_float(), b[i] = rng_float();
  if (!MUST(rt, tlcu_mem_alloc(rt, bytes, &da)) || !MUST(rt, tlcu_mem_alloc(rt, bytes, &db)) ||
      !MUST(rt, tlcu_mem_alloc(rt, bytes, &dc)))
    goto done;
  if (!MUST(rt, tlcu_memcpy_htod(rt, da, a, bytes)) ||
      !MUST(rt, tlcu_memcpy_htod(rt, db, b, bytes)))
    goto done;
  unsigned int blocks = (n + 255) / 256;
  TlcuLaunch plain = {.grid = {blocks}, .block = {256}};
  run_vadd(g, &plain, "vadd", da, db, dc, a, b, c, n);
  unsigned int smem = g->info.smem_optin >= 100 * 1024 ? 100 * 1024 : 0;
  TlcuLaunch big = {.grid = {(blocks + 1) & ~1u}, .block = {256}, .smem = smem, .cluster = {2}};
  run_vadd(g, &big, "vadd, cluster 2 by attribute, 100 KiB dynamic smem", da, db, dc, a, b, c, n);
  void *args[] = {&da, &db, &dc, &n};
  TlcuLaunch odd = {.grid = {3}, .block = {256}, .cluster = {2}};
  CHECK(tlcu_launch(rt, g->vadd, &odd, args) == TLCU_FAIL);
  CHECK(HAS(tlcu_error(rt), "grid.x = 3 is not a multiple of cluster.x = 2"));
  CHECK(MUST(rt, tlcu_mem_free(rt, db)) && MUST(rt, tlcu_mem_free(rt, dc)));
  /* da stays allocated: tlcu_shutdown releases it */
done:
  free(a), free(b), free(c);
}

/* tl_cluster_rank: ranks alternate 0/1 and every cluster has 2 CTAs. */
static void run_ranks(Gpu *g, const TlcuLaunch *l, const char *what, CUdeviceptr dout,
                      unsigned int *out, unsigned int nctas) {
  TlcuRuntime *rt = g->rt;
  void *args[] = {&dout};
  if (!MUST(rt, tlcu_memset_d8(rt, dout, 0xff, nctas * 4u))) return;
  if (!MUST(rt, tlcu_launch(rt, g->ranks, l, args))) return;
  if (!MUST(rt, tlcu_memcpy_dtoh(rt, out, dout, nctas * 4u))) return;
  unsigned int bad = 0;
  for (unsigned int i = 0; i < nctas; i++)
    if (out[i] != ((i % 2) | 2u << 8) && bad++ == 0)
      printf("  CTA %u: rank %u of %u\n", i, out[i] & 0xff, out[i] >> 8);
  if (check(bad == 0, what, __LINE__))
    printf("%s: %u CTAs, cluster ranks alternate 0/1, 2 CTAs per cluster\n", what, nctas);
}

static void test_cluster(Gpu *g) {
  TlcuRuntime *rt = g->rt;
  unsigned int nctas = 2 * (unsigned int)(g->info.sm_count > 0 ? g->info.sm_count : 66);
  unsigned int *out = malloc(nctas * 4u);
  CUdeviceptr dout = 0;
  if (!CHECK(out != NULL) || !MUST(rt, tlcu_mem_alloc(rt, nctas * 4u, &dout))) goto done;
  TlcuLaunch attr = {.grid = {nctas}, .block = {64}, .cluster = {2, 1, 1}};
  run_ranks(g, &attr, "cluster ranks, attribute + .reqnctapercluster", dout, out, nctas);
  TlcuLaunch compiled = {.grid = {nctas}, .block = {64}};
  run_ranks(g, &compiled, "cluster ranks, .reqnctapercluster alone", dout, out, nctas);
  MUST(rt, tlcu_mem_free(rt, dout));
done:
  free(out);
}

static void fill_random(uint64_t *p, size_t words) {
  for (size_t i = 0; i < words; i++)
    p[i] = rng_next();
}

/* Time cuMemcpyDtoD of 256 MiB of random bytes with events; check the copy. */
static void test_copy_bandwidth(Gpu *g) {
  TlcuRuntime *rt = g->rt;
  const size_t bytes = (size_t)256 << 20;
  const int iters = 20;
  uint64_t *h = malloc(bytes), *back = malloc(bytes);
  CUdeviceptr src = 0, dst = 0;
  CUevent start = NULL, end = NULL;
  float ms = 0;
  if (!CHECK(h && back)) goto done;
  fill_random(h, bytes / 8);
  if (!MUST(rt, tlcu_mem_alloc(rt, bytes, &src)) || !MUST(rt, tlcu_mem_alloc(rt, bytes, &dst)) ||
      !MUST(rt, tlcu_memcpy_htod(rt, src, h, bytes)) ||
      !MUST(rt, tlcu_memcpy_dtod(rt, dst, src, bytes)) || /* warm-up */
      !MUST(rt, tlcu_event_create(rt, &start)) || !MUST(rt, tlcu_event_create(rt, &end)) ||
      !MUST(rt, tlcu_event_record(rt, start, NULL)))
    goto done;
  for (int i = 0; i < iters; i++)
    if (!MUST(rt, tlcu_memcpy_dtod(rt, dst, src, bytes))) goto done;
  if (!MUST(rt, tlcu_event_record(rt, end, NULL)) || !MUST(rt, tlcu_event_synchronize(rt, end)) ||
      !MUST(rt, tlcu_event_elapsed_ms(rt, start, end, &ms)) ||
      !MUST(rt, tlcu_memcpy_dtoh(rt, back, dst, bytes)))
    goto done;
  CHECK(ms > 0);
  CHECK(memcmp(h, back, bytes) == 0);
  double per = ms / iters, gbs = (double)bytes / (per * 1e6);
  printf("cuMemcpyDtoD 256 MiB x %d: %.3f ms per copy, %.1f GB/s copied, %.1f GB/s read+written\n",
         iters, per, gbs, 2 * gbs);
  MUST(rt, tlcu_memset_d8(rt, dst, 0x5a, 4099));
  MUST(rt, tlcu_memcpy_dtoh(rt, back, dst, 4100));
  unsigned char *bb = (unsigned char *)back;
  CHECK(bb[0] == 0x5a && bb[4098] == 0x5a && bb[4099] == ((unsigned char *)h)[4099]);
  MUST(rt, tlcu_event_destroy(rt, start)); /* `end` and the buffers: shutdown's job */
done:
  free(h), free(back);
}

static void test_gpu(TlcuRuntime *rt) {
  Gpu g = {.rt = rt};
  if (!MUST(rt, tlcu_device_info(rt, &g.info))) return;
  TlcuDeviceInfo *d = &g.info;
  printf("device %d: %s, %d SMs, compute capability %d.%d, %d B opt-in smem/block, %.1f GiB, "
         "driver %d.%d\n",
         d->ordinal, d->name, d->sm_count, d->cc_major, d->cc_minor, d->smem_optin,
         (double)d->total_mem / (1 << 30), d->driver_version / 1000, d->driver_version % 1000 / 10);
  CHECK(d->sm_count > 0 && d->total_mem > 0 && d->smem_optin >= 48 * 1024 && d->name[0]);
  test_init_errors(&g);
  test_copy_bandwidth(&g);
  if (d->cc_major != 9 || d->cc_minor != 0) {
    printf("note: sm_90a kernels need compute capability 9.0: kernel checks skipped\n");
    return;
  }
  if (test_load(&g)) {
    test_vadd(&g);
    test_cluster(&g);
  }
  test_broken_ptx(&g);
}

/* }====================================================================== */

int main(void) {
  static TlcuRuntime rt;
  rng_state = seed_from_clock();
  printf("seed %llu\n", (unsigned long long)rng_state);
  test_empty_runtime();
  test_missing_driver();
  test_not_a_driver();
  test_ptxas();
  TlcuResult st = tlcu_init(&rt, 0);
  if (st == TLCU_NO_GPU) {
    char saved[TLCU_ERR_SIZE];
    const char *lib = getenv("TILUA_LIBCUDA");
    snprintf(saved, sizeof saved, "%s", tlcu_error(&rt));
    CHECK(HAS(saved, "compiling works, launching needs an NVIDIA GPU"));
    if (!lib || !*lib) CHECK(HAS(saved, "libcuda.so.1") || HAS(saved, "CUDA_ERROR_NO_DEVICE"));
    check_all_fail(&rt, TLCU_NO_GPU, saved);
    CHECK(tlcu_shutdown(&rt) == TLCU_OK);
    if (failures) {
      printf("%d no-GPU check(s) failed\n", failures);
      return 1;
    }
    printf("no-GPU checks passed\nSKIP: no GPU (%s)\n", saved);
    return SKIP_CODE;
  }
  if (!MUST(&rt, st)) return 1;
  test_gpu(&rt);
  CHECK(rt.nheld > 0); /* the allocations and the module left for shutdown */
  MUST(&rt, tlcu_shutdown(&rt));
  CHECK(rt.nheld == 0 && rt.held == NULL);
  CHECK(tlcu_mem_alloc(&rt, 16, &(CUdeviceptr){0}) == TLCU_FAIL);
  CHECK(HAS(tlcu_error(&rt), "shut down"));
  if (failures) {
    printf("%d check(s) failed\n", failures);
    return 1;
  }
  printf("all CUDA runtime checks passed\n");
  return 0;
}
