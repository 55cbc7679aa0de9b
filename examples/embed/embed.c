/*
** embed.c -- a small C host of tilua: no Python, no LLVM, just the library.
**
**   embed [FILE.tir]
**
** Builds a kernel through the C API, verifies it and cleans it up; then, given
** a file of textual IR, parses, verifies and runs a pipeline on it; then runs a
** Lua kernel script. Every step prints its result; diagnostics go through a
** handler. Exits non-zero if any step fails.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

int main(int argc, char **argv) {
  tlContext ctx = tlContextCreate();
  tlContextAttachDiagnosticHandler(ctx, on_diagnostic, NULL);
  int rc = build_kernel(ctx);
  if (!rc && argc > 1) rc = parse_and_run(ctx, argv[1]);
  if (!rc) rc = run_script(ctx);
  tlContextDestroy(ctx);
  if (rc) fprintf(stderr, "embed: failed\n");
  return rc;
}
