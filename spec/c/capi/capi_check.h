/*
** capi_check.h -- what the C API regression tests share: a diagnostic handler
** that counts errors and keeps the last message, and CHECK. A test exits 0
** when every check held (the API failed cleanly where it must), 1 otherwise;
** the sanitizer build turns any undefined behaviour into a failure too.
*/
#ifndef CAPI_CHECK_H
#define CAPI_CHECK_H

#include <stdio.h>
#include <string.h>

#include "tilua.h"

static int errors;
static char last[1024], last_file[256];
static int last_line, last_col;
static int failures;

static inline void on_diag(tlDiagnostic d, void *ud) {
  (void)ud;
  if (tlDiagnosticGetSeverity(d) == tlDiagnosticError) errors++;
  tlStringRef m = tlDiagnosticGetMessage(d);
  snprintf(last, sizeof last, "%.*s", (int)m.length, m.data);
  tlStringRef f = tlDiagnosticGetFile(d);
  snprintf(last_file, sizeof last_file, "%.*s", (int)f.length, f.data);
  last_line = tlDiagnosticGetLine(d);
  last_col = tlDiagnosticGetColumn(d);
}

static inline void sink(tlStringRef s, void *ud) {
  (void)s;
  (void)ud;
}

static inline tlStringRef str(const char *s) { return tlStringRefCreateFromCString(s); }

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: check failed: %s (last diagnostic: %s)\n", __FILE__, __LINE__, #cond, last); \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

/* One new error whose message holds `part`. */
#define CHECK_ERROR(before, part) CHECK(errors == (before) + 1 && strstr(last, part) != NULL)

static inline tlContext new_context(void) {
  tlContext c = tlContextCreate();
  tlContextAttachDiagnosticHandler(c, on_diag, NULL);
  return c;
}

/* The stand-in driver's call log (FAKE_CUDA_LOG) so far, in a static buffer. */
static inline char *read_log(const char *path) {
  static char text[65536];
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
  if (f) fclose(f);
  text[n] = '\0';
  return text;
}

static inline int finish(const char *name) {
  if (failures) fprintf(stderr, "%s: %d check(s) failed\n", name, failures);
  else printf("%s: ok\n", name);
  return failures ? 1 : 0;
}

#endif
