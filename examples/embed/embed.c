/*
** embed.c -- a small C host of tilua: no Python, no LLVM, just the library.
**
**   embed [FILE.tir]
**   embed --gpu
**
** Builds a kernel through the C API, verifies it and cleans it up; then, given
** a file of textual IR, parses, verifies and runs a pipeline on it; then runs a
** Lua kernel script. Every step prints its result; diagnostics go through a
** handler. Exits non-zero if any step fails.
**
** --gpu: the whole job from C: a saxpy kernel built by a script, lowered by
** the `ptx` pipeline, launched on the GPU on fresh random data and checked
** against the CPU; exit 77 (skipped) where there is no GPU.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tilua.h"

static int diagnostics;

static void print_ref(tlStringRef s, void *ud) { fwrite(s.data, 1, s.length, (FILE *)ud); }

static void on_diagnostic(tlDiagnostic d, void *ud) {
  (void)ud;
  diagnostics++;
  tlDiagnosticPrint(d, print_ref, stderr);
}

static tlStringRef str(const char *s) { return tlStringRefCreateFromCString(s); }

/* sum = n * 2 + n, built op by op; canonicalize then folds nothing away that is used. */
static int build_kernel(tlContext ctx) {
  tlModule m = tlModuleCreateEmpty(ctx);
  tlType i32 = tlIntegerTypeGet(ctx, 32);
  tlType params[] = {tlPointerTypeGet(tlF32TypeGet(ctx), str("global")), i32};
  tlStringRef names[] = {str("out"), str("n")};
  tlOperation k = tlKernelCreate(m, str("scale"), 2, params, names, 128, 1, 1);
  tlBlock body = tlOperationGetRegionBlock(k, 0, 0, NULL);
  tlValue n = tlBlockGetArgument(body, 1);
  tlNamedAttribute two = tlNamedAttributeGet(str("value"), tlIntegerAttrGet(i32, 2));
  tlOperation c2 = tlOperationCreate(body, str("arith.constant"), 0, NULL, 1, &i32, 1, &two, 0);
  tlValue mul_opds[] = {n, tlOperationGetResult(c2, 0)};
  tlOperation mul = tlOperationCreate(body, str("arith.muli"), 2, mul_opds, 1, &i32, 0, NULL, 0);
  tlValue add_opds[] = {tlOperationGetResult(mul, 0), n};
  tlOperation add = tlOperationCreate(body, str("arith.addi"), 2, add_opds, 1, &i32, 0, NULL, 0);
  if (tlOperationIsNull(c2) || tlOperationIsNull(mul) || tlOperationIsNull(add)) return 1;
  /* A wrong op is refused with a diagnostic, not built. */
  tlType f32 = tlF32TypeGet(ctx);
  int before = diagnostics;
  tlOperation bad = tlOperationCreate(body, str("arith.addi"), 2, add_opds, 1, &f32, 0, NULL, 0);
  if (!tlOperationIsNull(bad) || diagnostics != before + 1) {
    fprintf(stderr, "embed: a mistyped op was accepted\n");
    return 1;
  }
  if (tlLogicalResultIsFailure(tlModuleVerify(m))) return 1;
  printf("// built with the C API\n");
  tlModulePrint(m, print_ref, stdout);
  return 0;
}

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

static int parse_and_run(tlContext ctx, const char *path) {
  size_t len;
  char *text = read_file(path, &len);
  if (!text) {
    fprintf(stderr, "embed: cannot read %s\n", path);
    return 1;
  }
  tlModule m = tlModuleCreateParse(ctx, tlStringRefCreate(text, len), str(path));
  free(text);
  if (tlModuleIsNull(m) || tlLogicalResultIsFailure(tlModuleVerify(m))) return 1;
  if (tlLogicalResultIsFailure(tlModuleRunPipeline(m, str("canonicalize,cse")))) return 1;
  printf("// %s after canonicalize,cse\n", path);
  tlModulePrint(m, print_ref, stdout);
  /* Bad text gives a diagnostic with line and column, and a null module. */
  int before = diagnostics;
  tlModule bad = tlModuleCreateParse(ctx, str("module {\n  %0 = arith.addi %1 : i32\n}\n"), str("bad.tir"));
  if (!tlModuleIsNull(bad) || diagnostics != before + 1) {
    fprintf(stderr, "embed: bad text was accepted\n");
    return 1;
  }
  return 0;
}

static int run_script(tlContext ctx) {
  const char *script =
      "local tl = require 'tilua'\n"
      "local k = tl.kernel('axpy', { params = { {'a', tl.f32}, {'x', tl.f32} }, block = 64 })\n"
      "k:define(function(k, p) local y = p.a * p.x + 1.0 end)\n";
  tlModule m = tlModuleCreateFromScript(ctx, str(script), str("axpy.lua"));
  if (tlModuleIsNull(m) || tlLogicalResultIsFailure(tlModuleVerify(m))) return 1;
  printf("// built by a Lua script\n");
  tlModulePrint(m, print_ref, stdout);
  return 0;
}

/* y = a * x + y on the GPU, checked against the CPU. */
static int run_on_gpu(void) {
  tlContext ctx = tlContextCreate();
  tlContextAttachDiagnosticHandler(ctx, on_diagnostic, NULL);
  const char *script =
      "local tl = require 'tilua'\n"
      "local k = tl.kernel('saxpy', { params = { {'x', tl.ptr(tl.f32)}, {'y', tl.ptr(tl.f32)},\n"
      "                                          {'a', tl.f32}, {'n', tl.i32} }, block = 256 })\n"
      "k:define(function(k, p)\n"
      "  local i = tl.global_id 'x'\n"
      "  tl.if_(i:lt(p.n), function() (p.y + i):store(p.a * (p.x + i):load() + (p.y + i):load()) end)\n"
      "end)\n";
  tlModule m = tlModuleCreateFromScript(ctx, str(script), str("saxpy.lua"));
  if (tlModuleIsNull(m) || tlLogicalResultIsFailure(tlModuleRunPipeline(m, str("ptx")))) {
    tlContextDestroy(ctx);
    return 1;
  }
  int before = diagnostics;
  tlDevice dev = tlDeviceOpen(ctx, 0);
  if (tlDeviceIsNull(dev)) {
    printf("SKIP: no GPU (the diagnostic above says why)\n");
    tlContextDestroy(ctx);
    return 77;
  }
  diagnostics = before;
  enum { N = (1 << 20) + 3 };
  float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), *want = malloc(N * sizeof *want);
  unsigned seed = (unsigned)time(NULL);
  srand(seed);
  const float a = 1.5f + (float)(rand() % 100) / 50.0f;
  for (int i = 0; i < N; i++) {
    x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    y[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    want[i] = a * x[i] + y[i];
  }
  uint64_t dx = 0, dy = 0;
  int rc = 1;
  unsigned grid[3] = {(N + 255) / 256, 1, 1};
  tlKernelArg args[4] = {{TL_ARG_POINTER, {0}}, {TL_ARG_POINTER, {0}}, {TL_ARG_F32, {0}}, {TL_ARG_I32, {0}}};
  if (tlLogicalResultIsFailure(tlDeviceAlloc(dev, N * sizeof *x, &dx)) ||
      tlLogicalResultIsFailure(tlDeviceAlloc(dev, N * sizeof *y, &dy)) ||
      tlLogicalResultIsFailure(tlDeviceCopyToDevice(dev, dx, x, N * sizeof *x)) ||
      tlLogicalResultIsFailure(tlDeviceCopyToDevice(dev, dy, y, N * sizeof *y)))
    goto done;
  /* misuse is refused before anything runs: a missing argument, a wrong kind */
  args[0].value.pointer = dx, args[1].value.pointer = dy, args[2].value.f32 = a, args[3].value.i32 = N;
  if (tlLogicalResultIsSuccess(tlDeviceLaunch(dev, m, str("saxpy"), grid, 3, args)) || diagnostics != 1) {
    fprintf(stderr, "embed: a launch with a missing argument was accepted\n");
    goto done;
  }
  args[3].kind = TL_ARG_F32;
  if (tlLogicalResultIsSuccess(tlDeviceLaunch(dev, m, str("saxpy"), grid, 4, args)) || diagnostics != 2) {
    fprintf(stderr, "embed: a launch with a wrong argument kind was accepted\n");
    goto done;
  }
  args[3].kind = TL_ARG_I32;
  diagnostics = 0;
  if (tlLogicalResultIsFailure(tlDeviceLaunch(dev, m, str("saxpy"), grid, 4, args)) ||
      tlLogicalResultIsFailure(tlDeviceCopyToHost(dev, y, dy, N * sizeof *y)))
    goto done;
  int bad = 0;
  for (int i = 0; i < N; i++) {
    float d = y[i] - want[i];
    if (d < 0) d = -d;
    if (d > 1e-5f * (1.0f + (want[i] < 0 ? -want[i] : want[i]))) { /* the GPU may fuse into one fma */
      if (bad++ < 5) fprintf(stderr, "embed: y[%d] = %g, the CPU says %g\n", i, (double)y[i], (double)want[i]);
    }
  }
  printf("saxpy on the GPU from C: %s, %d elements, seed %u\n", bad ? "FAILED" : "OK", N, seed);
  rc = bad ? 1 : 0;
done:
  if (dx) tlDeviceFree(dev, dx);
  if (dy) tlDeviceFree(dev, dy);
  free(x), free(y), free(want);
  tlContextDestroy(ctx); /* closes the device too */
  return rc;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--gpu") == 0) return run_on_gpu();
  tlContext ctx = tlContextCreate();
  tlContextAttachDiagnosticHandler(ctx, on_diagnostic, NULL);
  int rc = build_kernel(ctx);
  if (!rc && argc > 1) rc = parse_and_run(ctx, argv[1]);
  if (!rc) rc = run_script(ctx);
  tlContextDestroy(ctx);
  if (rc) fprintf(stderr, "embed: failed\n");
  return rc;
}
