/*
** test_alloc_fail.c -- the allocation-failure run (docs/testing.md), in the
** manner of Lua's test suite: for n = 1, 2, ... the n-th allocation of the C
** core fails while a context is made, a real kernel is parsed (through the C
** API), verified, lowered by the `ptx` pipeline and emitted as PTX, and the
** context destroyed. Every run must end in success or in a failure result
** that reported "out of memory" -- never a crash (the sanitizer build checks)
** or a leak (LeakSanitizer at exit) -- until an n past the last allocation
** lets the whole run succeed.
**
**   test_alloc_fail FIXTURE.tir [STRIDE]     (TILUA_ALLOC_STRIDE overrides STRIDE)
**
** STRIDE k tries n = 1, 1+k, 1+2k, ... (the bounded ctest run); 1 tries every n.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"
#include "tilua.h"

static int oom_reports, errors;
static uint64_t run_allocations; /* counted by the last run */

static void on_diag(tlDiagnostic d, void *ud) {
  (void)ud;
  if (tlDiagnosticGetSeverity(d) != tlDiagnosticError) return;
  errors++;
  tlStringRef m = tlDiagnosticGetMessage(d);
  if (m.length >= 13 && memcmp(m.data + m.length - 13, "out of memory", 13) == 0) oom_reports++;
}

static void count_text(tlStringRef s, void *ud) { *(size_t *)ud += s.length; }

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) buf[n] = 0;
  *len = (size_t)n;
  return buf;
}

typedef enum { RUN_OK, RUN_OOM, RUN_BAD } RunResult;

/* One run with the n-th allocation failing (0: none). */
static RunResult run(const char *text, size_t len, uint64_t n, size_t *ptx_len) {
  oom_reports = errors = 0;
  ir_alloc_fail_at(n);
  tlContext c = tlContextCreate();
  if (!c.ptr) return n ? RUN_OOM : RUN_BAD; /* no context to report to: the null handle says it */
  tlContextAttachDiagnosticHandler(c, on_diag, NULL);
  bool ok = false;
  tlModule m = tlModuleCreateParse(c, tlStringRefCreate(text, len), tlStringRefCreateFromCString("gemm.tir"));
  if (!tlModuleIsNull(m) && tlLogicalResultIsSuccess(tlModuleVerify(m)) &&
      tlLogicalResultIsSuccess(tlModuleRunPipeline(m, tlStringRefCreateFromCString("ptx")))) {
    *ptx_len = 0;
    ok = tlLogicalResultIsSuccess(tlModuleEmitPTX(m, count_text, ptx_len)) && *ptx_len > 0;
  }
  /* a broken context refuses what comes next, with a diagnostic, and is destroyed cleanly */
  if (!ok && oom_reports) {
    int before = errors;
    if (!tlTypeIsNull(tlF32TypeGet(c)) || errors != before + 1) {
      fprintf(stderr, "n = %llu: a broken context accepted a call\n", (unsigned long long)n);
      ok = false, oom_reports = 0;
    }
  }
  tlContextDestroy(c);
  run_allocations = ir_alloc_count();
  ir_alloc_fail_at(0);
  if (ok) return RUN_OK;
  if (oom_reports) return RUN_OOM;
  fprintf(stderr, "n = %llu: failed with %d error(s) but no 'out of memory' report\n",
          (unsigned long long)n, errors);
  return RUN_BAD;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_alloc_fail FIXTURE.tir [STRIDE]\n");
    return 2;
  }
  const char *s = getenv("TILUA_ALLOC_STRIDE"); /* overrides the argument: the full run on demand */
  if (!s && argc > 2) s = argv[2];
  uint64_t stride = s ? strtoull(s, NULL, 10) : 1;
  if (!stride) stride = 1;
  size_t len;
  char *text = read_file(argv[1], &len);
  if (!text) {
    fprintf(stderr, "test_alloc_fail: cannot read %s\n", argv[1]);
    return 2;
  }
  /* the reference run: it must succeed, and says how many allocations there are */
  size_t ptx_len = 0;
  if (run(text, len, 0, &ptx_len) != RUN_OK) {
    fprintf(stderr, "test_alloc_fail: the run without failures fails\n");
    free(text);
    return 1;
  }
  uint64_t total = run_allocations;
  uint64_t tried = 0, oom = 0, succeeded = 0, bad = 0;
  for (uint64_t n = 1;; n += stride) {
    size_t got = 0;
    RunResult r = run(text, len, n, &got);
    tried++;
    if (r == RUN_OOM) oom++;
    else if (r == RUN_BAD) bad++;
    else {
      succeeded++;
      if (n <= total) {
        fprintf(stderr, "n = %llu: succeeded although an allocation failed\n", (unsigned long long)n);
        bad++;
      }
      if (got != ptx_len) {
        fprintf(stderr, "n = %llu: succeeded with a different PTX (%zu bytes, not %zu)\n",
                (unsigned long long)n, got, ptx_len);
        bad++;
      }
      if (n > total) break; /* past the last allocation */
    }
  }
  printf("allocation failures: %llu allocations per run, %llu runs (stride %llu): %llu out of memory, "
         "%llu succeeded, %llu bad; PTX %zu bytes\n",
         (unsigned long long)total, (unsigned long long)tried, (unsigned long long)stride,
         (unsigned long long)oom, (unsigned long long)succeeded, (unsigned long long)bad, ptx_len);
  free(text);
  return bad ? 1 : 0;
}
