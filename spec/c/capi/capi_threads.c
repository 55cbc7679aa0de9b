/* The threading contract (docs/capi.md, "Threads"): different contexts may
** be used on different threads at once. Two threads, each with its own
** context, compile at the same time, again and again: the warp-specialized
** GEMM fixture parsed, lowered by the `ptx` pipeline (every lowering, the
** scheduler's included) and emitted, and a kernel built by a Lua script (each
** context has its own Lua state). Every result must equal the one computed
** alone first. Built with -DTILUA_TSAN=ON, ThreadSanitizer reports any data
** race between the two (static state in a lowering, say). */
#include <pthread.h>
#include <stdlib.h>

#include "capi_check.h"

#define ROUNDS 4

typedef struct Text {
  char *s;
  size_t n, cap;
} Text;

static void append(tlStringRef piece, void *ud) {
  Text *t = ud;
  if (t->n + piece.length + 1 > t->cap) {
    t->cap = (t->n + piece.length + 1) * 2;
    t->s = realloc(t->s, t->cap);
  }
  memcpy(t->s + t->n, piece.data, piece.length);
  t->n += piece.length;
  t->s[t->n] = '\0';
}

static char *fixture;
static const char script[] =
    "local tl = require 'tilua'\n"
    "local k = tl.kernel('saxpy', { params = { { 'x', tl.ptr(tl.f32) }, { 'y', tl.ptr(tl.f32) },\n"
    "  { 'a', tl.f32 }, { 'n', tl.i32 } }, block = 128 })\n"
    "k:define(function(k, p)\n"
    "  local i = tl.global_id 'x'\n"
    "  tl.if_(i:lt(p.n), function() (p.y + i):store(p.a * (p.x + i):load() + (p.y + i):load()) end)\n"
    "end)\n";

/* One compile in a fresh context: the GEMM's PTX, then the script's; NULL on a failure. */
static char *compile_once(void) {
  tlContext c = tlContextCreate();
  Text out = {0};
  tlModule m = tlModuleCreateParse(c, str(fixture), str("gemm_bf16.tir"));
  bool ok = !tlModuleIsNull(m) && tlLogicalResultIsSuccess(tlModuleRunPipeline(m, str("ptx"))) &&
            tlLogicalResultIsSuccess(tlModuleEmitPTX(m, append, &out));
  tlModule s = ok ? tlModuleCreateFromScript(c, str(script), str("saxpy.lua")) : (tlModule){0};
  ok = ok && !tlModuleIsNull(s) && tlLogicalResultIsSuccess(tlModuleRunPipeline(s, str("ptx"))) &&
       tlLogicalResultIsSuccess(tlModuleEmitPTX(s, append, &out));
  tlContextDestroy(c);
  if (!ok) {
    free(out.s);
    return NULL;
  }
  return out.s;
}

static char *reference;

static void *worker(void *arg) {
  int *bad = arg;
  for (int r = 0; r < ROUNDS; r++) {
    char *ptx = compile_once();
    if (!ptx || strcmp(ptx, reference) != 0) ++*bad;
    free(ptx);
  }
  return NULL;
}

int main(void) {
  const char *root = getenv("TILUA_SOURCE_ROOT");
  char path[4096];
  snprintf(path, sizeof path, "%s/spec/fixtures/alloc/gemm_bf16.tir", root ? root : ".");
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "capi_threads: cannot read %s\n", path);
    return 1;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  fixture = calloc(1, (size_t)n + 1);
  CHECK(fread(fixture, 1, (size_t)n, f) == (size_t)n);
  fclose(f);
  reference = compile_once();
  CHECK(reference != NULL && strstr(reference, ".entry saxpy") != NULL);
  if (!reference) return finish("capi_threads");
  pthread_t t[2];
  int bad[2] = {0, 0};
  for (int i = 0; i < 2; i++)
    CHECK(pthread_create(&t[i], NULL, worker, &bad[i]) == 0);
  for (int i = 0; i < 2; i++)
    pthread_join(t[i], NULL);
  CHECK(bad[0] == 0 && bad[1] == 0);
  free(reference);
  free(fixture);
  return finish("capi_threads");
}
