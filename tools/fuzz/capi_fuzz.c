/*
** capi_fuzz.c -- a fuzzer of the C API (src/tilua.h).
**
**   capi_fuzz [--seconds S] [--iterations N] [--seed X] [--skip K] [--corpus DIR]
**
** Runs "inputs" until S seconds (default 10) or N inputs have passed. Input i is
** a sequence of 1-40 C API calls drawn by a xorshift generator seeded from
** seed + i, so `capi_fuzz --seed X --skip i --iterations 1` replays input i
** alone. The calls take their arguments from pools of handles made by earlier
** calls of the input: contexts (some destroyed on purpose, their handles kept),
** types, attributes, modules, operations, blocks, values and diagnostics (the
** handler collects them); or null handles, handles of other contexts, bad
** counts (negative, above INT32_MAX, positive with a NULL array), strings with
** a NULL pointer and a length, embedded NULs, real op names and garbage.
** Parsing gets mutated IR (the *.tir files of --corpus, or built-in snippets),
** scripts get small Lua snippets, some misusing `require "tilua"`. At the end
** of every input the live contexts are destroyed (LeakSanitizer sees no leak).
**
** The failure signal is the process dying: a crash, a sanitizer report, a hang
** (a watchdog aborts an input that runs over 60 s) or a broken promise of the
** contract (a result about a destroyed context that is not the null one, ...),
** each reported on stderr with the line that replays the input. Otherwise the
** only output on stdout is the summary line, and the exit status is 0. The
** library's own stderr lines (refusals of handles of destroyed contexts) are
** expected.
*/
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tilua.h"

#if defined(__SANITIZE_ADDRESS__)
#define FUZZ_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_SANITIZED 1
#endif
#endif
#ifdef FUZZ_SANITIZED
#include <dlfcn.h>
#endif

/* {======================================================================
** Random numbers (xorshift64), the current input, failures
** ======================================================================= */

static uint64_t rng_state;
static uint64_t cur_seed;  /* the run's seed */
static uint64_t cur_index; /* the input being run */
static unsigned cur_call;  /* the call of the input being made */
static const char *cur_fn = "";

static uint64_t rnd(void) {
  uint64_t x = rng_state;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return rng_state = x;
}
static uint32_t below(uint32_t n) { return n ? (uint32_t)(rnd() % n) : 0; }
static int chance(int percent) { return below(100) < (uint32_t)percent; }

static uint64_t splitmix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* Async-signal-safe: where we were, and how to replay it. */
static void say_where(void) {
  char buf[320];
  int n = snprintf(buf, sizeof buf,
                   "capi_fuzz: FAILED in input %llu (call %u, %s): replay with "
                   "capi_fuzz --seed %llu --skip %llu --iterations 1 [--corpus DIR]\n",
                   (unsigned long long)cur_index, cur_call, cur_fn, (unsigned long long)cur_seed,
                   (unsigned long long)cur_index);
  if (n > 0) {
    ssize_t w = write(2, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
    (void)w;
  }
}

static void on_signal(int sig) {
  say_where();
  signal(sig, SIG_DFL);
  raise(sig);
}

static void fail(const char *what) {
  fprintf(stderr, "capi_fuzz: contract violated: %s\n", what);
  fflush(stderr);
  say_where();
  signal(SIGABRT, SIG_DFL);
  abort();
}
#define EXPECT(cond, what)                                                                         \
  do {                                                                                             \
    if (!(cond)) fail(what);                                                                       \
  } while (0)

static volatile unsigned sink; /* reads of returned text land here (ASan checks them) */
static void touch(tlStringRef s) {
  EXPECT(s.data || !s.length, "a returned tlStringRef has a NULL pointer and a length");
  unsigned h = 0;
  for (size_t i = 0; i < s.length; i++) h = h * 31 + (unsigned char)s.data[i];
  sink += h;
}

/* }====================================================================== */

/* {======================================================================
** Pools of handles
** ======================================================================= */

#define POOL 16

static tlContext ctxs[POOL];
static int ctx_live[POOL];
static int nctx;

#define DEFPOOL(T, name)                                                                           \
  static T name##_pool[POOL];                                                                          \
  static int n##name;                                                                              \
  static void name##_add(T h) {                                                                    \
    if (!h.ptr) return;                                                                            \
    if (n##name < POOL) name##_pool[n##name++] = h;                                                    \
    else name##_pool[below(POOL)] = h;                                                                 \
  }                                                                                                \
  /* mostly one of `focus`, else any, sometimes the null handle */                                 \
  static T name##_pick(uint64_t focus) {                                                           \
    T z = {0};                                                                                     \
    if (!n##name || chance(6)) return z;                                                           \
    if (focus && chance(85)) {                                                                     \
      int idx[POOL], k = 0;                                                                        \
      for (int i = 0; i < n##name; i++)                                                            \
        if (name##_pool[i].context == focus) idx[k++] = i;                                             \
      if (k) return name##_pool[idx[below((uint32_t)k)]];                                              \
    }                                                                                              \
    return name##_pool[below((uint32_t)n##name)];                                                      \
  }

DEFPOOL(tlType, type)
DEFPOOL(tlAttribute, attr)
DEFPOOL(tlModule, module)
DEFPOOL(tlOperation, op)
DEFPOOL(tlBlock, block)
DEFPOOL(tlValue, value)
DEFPOOL(tlDiagnostic, diag)

static int serial_live(uint64_t serial) {
  for (int i = 0; i < nctx; i++)
    if (ctx_live[i] && ctxs[i].context == serial) return 1;
  return 0;
}

/* A context: mostly a live one, sometimes a destroyed one or the null one. */
static tlContext ctx_pick(void) {
  tlContext z = {0};
  if (!nctx || chance(5)) return z;
  int live[POOL], k = 0;
  for (int i = 0; i < nctx; i++)
    if (ctx_live[i]) live[k++] = i;
  if (k && chance(85)) return ctxs[live[below((uint32_t)k)]];
  return ctxs[below((uint32_t)nctx)];
}

/* }====================================================================== */

/* {======================================================================
** Checks on results
** ======================================================================= */

/* A handle made from handles of context `about`: null when that context is
** destroyed or null, else of that context. */
#define CHECK_RESULT(h, about, fn)                                                                 \
  do {                                                                                             \
    if ((h).ptr) {                                                                                 \
      EXPECT((about) != 0, fn ": a non-null result from a null handle");                           \
      EXPECT(serial_live(about), fn ": a non-null result about a destroyed context");              \
      EXPECT((h).context == (about), fn ": a result of another context");                          \
    }                                                                                              \
  } while (0)

static void check_ok(tlLogicalResult r, uint64_t about, const char *what) {
  if (tlLogicalResultIsSuccess(r)) EXPECT(about && serial_live(about), what);
}

/* }====================================================================== */

/* {======================================================================
** Text: printed pieces, diagnostics
** ======================================================================= */

static char *out_buf;
static size_t out_len, out_cap;
static unsigned long long n_pieces, n_diags;

static void on_text(tlStringRef t, void *ud) {
  (void)ud;
  touch(t);
  n_pieces++;
  if (out_len + t.length > (1u << 20)) out_len = 0; /* keep the last MiB or so */
  if (out_len + t.length > out_cap) {
    size_t cap = out_cap ? out_cap : 4096;
    while (cap < out_len + t.length) cap *= 2;
    char *p = realloc(out_buf, cap);
    if (!p) return;
    out_buf = p;
    out_cap = cap;
  }
  if (t.length) memcpy(out_buf + out_len, t.data, t.length);
  out_len += t.length;
}

static char *stack_top; /* an address in main's frame: diagnostics below it are on the stack */

static void on_diag(tlDiagnostic d, void *ud) {
  char here;
  n_diags++;
  if (ud) (*(unsigned long long *)ud)++;
  EXPECT(d.ptr && d.context, "the handler got a null diagnostic");
  tlStringRef msg = tlDiagnosticGetMessage(d);
  touch(msg);
  touch(tlDiagnosticGetFile(d));
  (void)tlDiagnosticGetLine(d);
  (void)tlDiagnosticGetColumn(d);
  int sev = (int)tlDiagnosticGetSeverity(d);
  EXPECT(sev >= 0 && sev <= 3, "a diagnostic severity out of range");
  intptr_t nn = tlDiagnosticGetNumNotes(d);
  EXPECT(nn >= 0, "a negative note count");
  if (nn) touch(tlDiagnosticGetMessage(tlDiagnosticGetNote(d, nn - 1)));
  tlDiagnosticPrint(d, on_text, NULL);
  /* The out-of-memory report lives on the stack during the call only: not kept. */
  uintptr_t p = (uintptr_t)d.ptr;
  int on_stack = p + 65536 > (uintptr_t)&here && p < (uintptr_t)stack_top;
  int oom = 0;
  for (size_t i = 0; i + 13 <= msg.length && !oom; i++) oom = !memcmp(msg.data + i, "out of memory", 13);
  if (!on_stack && !oom) diag_add(d);
}

/* }====================================================================== */

/* {======================================================================
** Strings, counts, positions
** ======================================================================= */

static const char *op_names[] = {
    "arith.constant", "arith.addi", "arith.addf", "arith.subi", "arith.muli", "arith.mulf",
    "arith.divsi", "arith.cmpi", "arith.cmpf", "arith.select", "arith.index_cast", "arith.extsi",
    "arith.trunci", "arith.sitofp", "arith.bitcast", "arith.fma", "scf.if", "scf.for", "scf.while",
    "scf.yield", "scf.condition", "tile.kernel", "tile.thread_id", "tile.block_id", "tile.block_dim",
    "tile.barrier", "tile.load", "tile.store", "tile.ptr_add", "tile.alloc_shared", "tile.splat",
    "tile.extract", "tile.shfl", "tile.mbarrier_init", "tile.wgmma", "nvvm.barrier0",
    "nvvm.read.ptx.sreg.tid.x", "nvvm.inline_ptx", "builtin.unrealized_conversion_cast",
    "cutlass.pipeline.create", "cutlass.bar", "builtin.module", "module", "arith.", "arith",
    ".", "", "tile.kernel.", "ARITH.ADDI", "scf.if ", " scf.if", "arith.def", "tile.def"};
static const char *attr_names[] = {"value", "predicate", "sym_name", "arg_names", "kernel_spec",
                                   "dim", "block", "space", "", "value ", "x"};
static const char *spaces[] = {"global", "shared", "local", "const", "generic", "rmem",
                               "tmem", "shared_cluster", "", "GLOBAL", "global\0x"};
static const char *pipelines[] = {"cleanup", "ptx", "canonicalize", "cse", "canonicalize,cse",
                                  "cleanup,ptx", "ptx,ptx", "cleanup{x=1}", "canonicalize{",
                                  ",", "", "garbage", "cleanup,,cse", "{}", "ptx{sm=100}",
                                  "verify-protocol{max_states=50,max_ops=20000},ptx"};

static char scratch[64][320];
static unsigned scratch_i;
static char *scratch_buf(void) { return scratch[scratch_i++ % 64]; }

static tlStringRef from_list(const char **list, size_t n) {
  const char *s = list[below((uint32_t)n)];
  return tlStringRefCreate(s, strlen(s));
}

/* A string: one of `list` (names that mean something) mostly, else garbage. */
static tlStringRef gen_str(const char **list, size_t n) {
  char *b;
  size_t len;
  switch (below(16)) {
  case 0: return tlStringRefCreate(NULL, 0);
  case 1: return tlStringRefCreate(NULL, chance(80) ? 1 + below(16) : SIZE_MAX);
  case 2: /* embedded NUL */
  {
    tlStringRef s = from_list(list, n);
    b = scratch_buf();
    len = s.length + 1;
    size_t at = below((uint32_t)len);
    memcpy(b, s.data, at);
    b[at] = 0;
    memcpy(b + at + 1, s.data + at, s.length - at);
    return tlStringRefCreate(b, len);
  }
  case 3: /* random bytes */
    b = scratch_buf();
    len = below(40);
    for (size_t i = 0; i < len; i++) b[i] = (char)rnd();
    return tlStringRefCreate(b, len);
  case 4: /* a name and garbage */
  {
    tlStringRef s = from_list(list, n);
    b = scratch_buf();
    memcpy(b, s.data, s.length);
    len = s.length + 1 + below(8);
    for (size_t i = s.length; i < len; i++) b[i] = "._x0{}%\"\n\xff"[below(10)];
    return tlStringRefCreate(b, len);
  }
  case 5: /* long */
    b = scratch_buf();
    len = 300;
    for (size_t i = 0; i < len; i++) b[i] = (char)('a' + below(26));
    return tlStringRefCreate(b, len);
  case 6: return tlStringRefCreate("", 0);
  case 7: /* a prefix of a name, not NUL-terminated there */
  {
    tlStringRef s = from_list(list, n);
    s.length = below((uint32_t)s.length + 1);
    return s;
  }
  default: return from_list(list, n);
  }
}
#define GEN_STR(list) gen_str(list, sizeof list / sizeof list[0])

/* A count for an array that holds `have` elements: *use_array says whether to
** pass the array (or NULL). Mostly valid; else negative, huge or with a NULL array. */
static intptr_t gen_count(int have, int *use_array) {
  *use_array = 1;
  switch (below(20)) {
  case 0: *use_array = 0; return 1 + below(4);
  case 1: *use_array = chance(50); return -1;
  case 2: *use_array = chance(50); return INTPTR_MIN;
  case 3: *use_array = chance(50); return (intptr_t)INT32_MAX + 1 + below(1000);
  case 4: *use_array = 0; return INT32_MAX;
  case 5: *use_array = chance(50); return INTPTR_MAX;
  case 6: *use_array = chance(50); return -(intptr_t)(1 + below(100000));
  case 7: *use_array = chance(50); return 0;
  default: return below((uint32_t)have + 1);
  }
}

static intptr_t gen_pos(void) {
  switch (below(10)) {
  case 0: return -1;
  case 1: return INTPTR_MIN;
  case 2: return INTPTR_MAX;
  case 3: return (intptr_t)INT32_MAX + 1;
  case 4: return 16 + below(100);
  default: return below(4);
  }
}

static int64_t gen_int(void) {
  static const int64_t v[] = {0, 1, -1, 2, 127, 128, -128, -129, 255, 256, 300, 32767, 65535,
                              65536, INT32_MAX, (int64_t)INT32_MAX + 1, INT32_MIN, UINT32_MAX,
                              INT64_MAX, INT64_MIN, INT64_MIN + 1};
  return chance(70) ? v[below(sizeof v / sizeof v[0])] : (int64_t)rnd();
}

static double gen_double(void) {
  static const double v[] = {0.0, -0.0, 1.0, 0.5, -2.0, 65504.0, 65520.0, 1e38, 3.5e38, 1e300,
                             1e-300, 5e-324, 1e-45};
  switch (below(6)) {
  case 0: return NAN;
  case 1: return chance(50) ? INFINITY : -INFINITY;
  case 2: {
    uint64_t bits = rnd();
    double d;
    memcpy(&d, &bits, sizeof d);
    return d;
  }
  default: return v[below(sizeof v / sizeof v[0])];
  }
}

static unsigned gen_block_dim(void) {
  static const unsigned v[] = {0, 1, 2, 32, 128, 1024, 1025, 65535, 65536, UINT_MAX, 0x80000000u};
  return v[below(sizeof v / sizeof v[0])];
}

/* }====================================================================== */

/* {======================================================================
** Inputs for parsing and scripts
** ======================================================================= */

typedef struct Text {
  char *data;
  size_t len;
} Text;

static Text *corpus;
static size_t ncorpus;

static const char *builtin_ir[] = {
    "module {\n}\n",
    "module {\n  tile.kernel {arg_names = [\"n\"], kernel_spec = {block = [128, 1, 1]}, sym_name = \"k\"} {\n"
    "  ^bb0(%0: i32):\n    %1 = arith.constant {value = 1 : i32} : i32\n"
    "    %2 = arith.addi %0, %1 : i32\n  }\n}\n",
    "module {\n  tile.kernel {arg_names = [\"n\", \"x\"], kernel_spec = {block = [128, 1, 1]}, sym_name = \"loops\"} {\n"
    "  ^bb0(%0: index, %1: f32):\n    %2 = arith.constant {value = 0 : index} : index\n"
    "    %3 = arith.constant {value = 1 : index} : index\n    %4 = arith.constant {value = 0.0 : f32} : f32\n"
    "    %5 = scf.for %2, %0, %3, %4 : f32 {\n    ^bb0(%6: index, %7: f32):\n"
    "      %8 = arith.addf %7, %1 : f32\n      scf.yield %8\n    }\n"
    "    %10 = arith.cmpf %5, %1 {predicate = \"ogt\"} : i1\n"
    "    %11 = scf.if %10 : f32 {\n      scf.yield %5\n    } {\n      scf.yield %1\n    }\n  }\n}\n",
    "module {\n  tile.kernel {kernel_spec = {block = [32, 1, 1]}, sym_name = \"t\"} {\n"
    "    %0 = tile.thread_id {dim = \"x\"} : i32\n  }\n}\n",
    "module {\n  %0 = arith.addi %1 : i32\n}\n",
};

static const char *scripts[] = {
    "local tl = require 'tilua'\nlocal k = tl.kernel('k', {block = {32, 1, 1}})\nfunction k.body() end\n",
    "local tl = require 'tilua'\n"
    "local k = tl.kernel('axpy', { params = { {'a', tl.f32}, {'x', tl.f32} }, block = 64 })\n"
    "k:define(function(k, p) local y = p.a * p.x + 1.0 end)\n",
    "local tl = require 'tilua'\n"
    "local k = tl.kernel('c', {params = {{'n', tl.i32}}, block = 32})\n"
    "k:define(function(k, p) tl.if_(p.n:lt(tl.const(3, tl.i32)), function() end) end)\n",
    "local tl=require\"tilua\"; tl.core.default_context():close()",
    "require('tilua').context():close()",
    "require('tilua').context():close(); return require('tilua').module()",
    "local tl = require 'tilua'; local c = tl.core.default_context(); c:close(); c:close()",
    "pcall(function() require('tilua').context():close() end)",
    "local co = coroutine.wrap(function() require('tilua').context():close() end); co()",
    "local co = coroutine.create(function() local tl = require 'tilua'; coroutine.yield(tl.module()); "
    "error('in co') end); coroutine.resume(co); coroutine.resume(co)",
    "error('boom')",
    "local x = 1\nerror('boom at 2')\n",
    "error(setmetatable({}, {}))",
    "error(setmetatable({}, {__tostring = function() error('tostring fails') end}))",
    "error(setmetatable({}, {__tostring = function() return 42 end}))",
    "error(nil)",
    "error()",
    "error(42)",
    "local tl = require 'tilua'; tl.raise('raised')",
    "local tl = require 'tilua'; tl.stop(3, 'stopped')",
    "local tl = require 'tilua'; tl.stop(300)",
    "local tl = require 'tilua'; tl.set_module(tl.core.context():module())",
    "local tl = require 'tilua'; local c = tl.core.context(); local m = c:module(); c:close(); tl.set_module(m)",
    "local tl = require 'tilua'; tl.set_module(42)",
    "local tl = require 'tilua'; tl.set_module(tl.context())",
    "local tl = require 'tilua'; tl.set_module(nil)",
    "local tl = require 'tilua'; tl.new_module()",
    "local tl = require 'tilua'; local c = tl.core.context(); c = nil; collectgarbage(); collectgarbage()",
    "return 1",
    "",
    "local = ",
    "\xff\xfe",
    "local tl = require 'tilua'; tl.core.default_context():target_sm(100)",
    "local tl = require 'tilua'; tl.core.default_context():target_sm(-5)",
    "local tl = require 'tilua'; tl.core.default_context():diagnostics()",
    "local tl = require 'tilua'; tl.parse('module {}')",
    "local tl = require 'tilua'; tl.parse('module { %0 = arith.addi }')",
    "local tl = require 'tilua'; tl.compile(tl.module(), 'cleanup')",
    "local tl = require 'tilua'; tl.compile(tl.module(), 'garbage')",
    "local tl = require 'tilua'\nlocal k = tl.kernel('p', {params = {{'n', tl.i32}}, block = 64})\n"
    "k:define(function(k, p) local x = p.n + tl.const(2, tl.i32) end)\ntl.compile(k, 'ptx')\n",
    "package.loaded.tilua = nil; package.loaded['tilua.core'] = nil; local tl = require 'tilua'; tl.new_module()",
    "X = require('tilua').module()",
    "if X then local s = X:print() end",
    "if X then require('tilua').set_module(X) end",
    "local tl = require 'tilua'; tl.op('arith.addi', {}, {tl.i32})",
    "local tl = require 'tilua'; tl.op('nonexistent.op', {}, {})",
    "local tl = require 'tilua'; tl.kernel('', {block = {0, 0, 0}})",
    "local tl = require 'tilua'; tl.kernel('big', {block = {1e9, 1e9, 1e9}})",
    "local tl = require 'tilua'; tl.core.op_create(nil, 'arith.addi', {}, {}, {}, 0)",
    "local s = string.rep('x', 1 << 16)",
    "collectgarbage()",
};

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  size_t n = 0, cap = 0, got;
  char chunk[4096];
  while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (n + got > cap) {
      cap = (n + got) * 2;
      char *p = realloc(buf, cap);
      if (!p) {
        free(buf);
        fclose(f);
        return NULL;
      }
      buf = p;
    }
    memcpy(buf + n, chunk, got);
    n += got;
  }
  fclose(f);
  *len = n;
  return buf ? buf : calloc(1, 1);
}

static void load_corpus(const char *dir) {
  DIR *d = opendir(dir);
  if (!d) {
    fprintf(stderr, "capi_fuzz: cannot open corpus %s\n", dir);
    exit(2);
  }
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t l = strlen(e->d_name);
    if (l < 5 || strcmp(e->d_name + l - 4, ".tir")) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    size_t len;
    char *text = read_all(path, &len);
    if (!text) continue;
    Text *c = realloc(corpus, (ncorpus + 1) * sizeof *c);
    if (!c) exit(2);
    corpus = c;
    corpus[ncorpus].data = text;
    corpus[ncorpus++].len = len;
  }
  closedir(d);
  /* readdir's order is the file system's: sort for reproducible inputs */
  for (size_t i = 1; i < ncorpus; i++)
    for (size_t j = i; j > 0 && (corpus[j - 1].len > corpus[j].len ||
                                 (corpus[j - 1].len == corpus[j].len &&
                                  memcmp(corpus[j - 1].data, corpus[j].data, corpus[j].len) > 0));
         j--) {
      Text t = corpus[j];
      corpus[j] = corpus[j - 1];
      corpus[j - 1] = t;
    }
  if (!ncorpus) {
    fprintf(stderr, "capi_fuzz: no .tir files in %s\n", dir);
    exit(2);
  }
}

static const char *ir_tokens[] = {"%0", "%99", "{", "}", "(", ")", ":", ",", "=", "^bb0", "^bb1(%x: i32)",
                                  "\"", "\\", "\0", "\n", "i32", "i0", "i65", "index", "f16", "ptr<f32, shared>",
                                  "arith.addi", "scf.yield", "tile.kernel", "-1", "99999999999999999999999",
                                  "0x7FF8000000000001", "1e999", "[", "]", "[[[[", "{a = {b = {c = 1}}}",
                                  "module {", "#", "//", "@", "!", "<", ">", "-> ", "1 : i1", "\xff"};

/* A mutated copy of an IR text, malloc'd; *len its length. */
static char *mutate_ir(size_t *len) {
  *len = 0;
  const char *src;
  size_t n;
  if (ncorpus) {
    const Text *t = &corpus[below((uint32_t)ncorpus)];
    src = t->data;
    n = t->len;
  } else {
    src = builtin_ir[below(sizeof builtin_ir / sizeof builtin_ir[0])];
    n = strlen(src);
  }
  size_t cap = n * 2 + 256;
  char *b = malloc(cap);
  if (!b) return NULL;
  memcpy(b, src, n);
  int rounds = chance(25) ? 0 : 1 + (int)below(4);
  for (int r = 0; r < rounds; r++) {
    switch (below(7)) {
    case 0: /* flip a byte */
      if (n) b[below((uint32_t)n)] = chance(50) ? (char)rnd() : "{}()%:^,=\"\n#<>[]0"[below(17)];
      break;
    case 1: /* delete a range */
      if (n) {
        size_t at = below((uint32_t)n), k = 1 + below(chance(50) ? 8 : 200);
        if (k > n - at) k = n - at;
        memmove(b + at, b + at + k, n - at - k);
        n -= k;
      }
      break;
    case 2: /* insert a token */
    {
      const char *tok = ir_tokens[below(sizeof ir_tokens / sizeof ir_tokens[0])];
      size_t k = tok[0] ? strlen(tok) : 1, at = below((uint32_t)n + 1);
      if (n + k > cap) break;
      memmove(b + at + k, b + at, n - at);
      memcpy(b + at, tok, k);
      n += k;
      break;
    }
    case 3: /* copy a range elsewhere */
      if (n) {
        size_t from = below((uint32_t)n), k = 1 + below(120), at = below((uint32_t)n + 1);
        if (k > n - from) k = n - from;
        if (n + k > cap) break;
        char tmp[128];
        memcpy(tmp, b + from, k);
        memmove(b + at + k, b + at, n - at);
        memcpy(b + at, tmp, k);
        n += k;
      }
      break;
    case 4: /* truncate */
      n = below((uint32_t)n + 1);
      break;
    case 5: /* splice in a piece of another text */
      if (ncorpus) {
        const Text *t = &corpus[below((uint32_t)ncorpus)];
        if (!t->len) break;
        size_t from = below((uint32_t)t->len), k = 1 + below(200), at = below((uint32_t)n + 1);
        if (k > t->len - from) k = t->len - from;
        if (n + k > cap) break;
        memmove(b + at + k, b + at, n - at);
        memcpy(b + at, t->data + from, k);
        n += k;
      }
      break;
    default: /* a digit to a big number */
      for (size_t i = 0, start = below((uint32_t)n + 1); i < n; i++) {
        size_t j = (start + i) % n;
        if (b[j] >= '0' && b[j] <= '9') {
          b[j] = chance(50) ? '9' : '0';
          break;
        }
      }
      break;
    }
  }
  *len = n;
  return b;
}

/* A script, sometimes cut (a prefix, or a range deleted: no loop can appear). */
static char *mutate_script(size_t *len) {
  *len = 0;
  const char *s = scripts[below(sizeof scripts / sizeof scripts[0])];
  size_t n = strlen(s);
  char *b = malloc(n + 1);
  if (!b) return NULL;
  memcpy(b, s, n + 1);
  if (n && chance(15)) n = below((uint32_t)n);
  else if (n && chance(10)) {
    size_t at = below((uint32_t)n), k = 1 + below(10);
    if (k > n - at) k = n - at;
    memmove(b + at, b + at + k, n - at - k);
    n -= k;
  }
  *len = n;
  return b;
}

/* }====================================================================== */

/* {======================================================================
** The calls
** ======================================================================= */

static unsigned long long n_calls, n_inputs, n_handler_ud;
/* how deep the inputs got: successes of the calls that need a lot to go right */
static unsigned long long ok_parse, ok_script, ok_pipeline, ok_ptx, ok_op;

static void ctx_create(void) {
  int slot = -1;
  if (nctx < POOL) slot = nctx++;
  else {
    for (int i = 0; i < POOL && slot < 0; i++)
      if (!ctx_live[i]) slot = i;
    if (slot < 0) {
      slot = (int)below(POOL);
      tlContextDestroy(ctxs[slot]);
    }
  }
  cur_fn = "tlContextCreate";
  tlContext c = tlContextCreate();
  EXPECT(c.ptr && c.context, "tlContextCreate: a null context");
  for (int i = 0; i < nctx; i++)
    EXPECT(i == slot || ctxs[i].context != c.context, "tlContextCreate: a serial reused");
  ctxs[slot] = c;
  ctx_live[slot] = 1;
  if (chance(97)) tlContextAttachDiagnosticHandler(c, on_diag, chance(50) ? &n_handler_ud : NULL);
}

static void ctx_destroy(void) {
  if (!nctx) return;
  int i = (int)below((uint32_t)nctx);
  cur_fn = "tlContextDestroy";
  tlContextDestroy(ctxs[i]); /* a second destroy of a dead one is refused (stderr) */
  ctx_live[i] = 0;
}

/* Fill arrays from the pools. */
static void fill_types(tlType *a, int n, uint64_t focus) {
  for (int i = 0; i < n; i++) a[i] = type_pick(focus);
}
static void fill_values(tlValue *a, int n, uint64_t focus) {
  for (int i = 0; i < n; i++) a[i] = value_pick(focus);
}
static void fill_attrs(tlAttribute *a, int n, uint64_t focus) {
  for (int i = 0; i < n; i++) a[i] = attr_pick(focus);
}
static void fill_named(tlNamedAttribute *a, int n, uint64_t focus) {
  for (int i = 0; i < n; i++) a[i] = tlNamedAttributeGet(GEN_STR(attr_names), attr_pick(focus));
}

static uint64_t focus_serial(void) {
  tlContext c = ctx_pick();
  return c.context;
}

static void one_call(void) {
  uint64_t f = focus_serial();
  tlContext c = {0};
  for (int i = 0; i < nctx; i++)
    if (ctxs[i].context == f) c = ctxs[i];
  if (!chance(90)) c = ctx_pick(); /* sometimes a context other than the focus */
  switch (below(61)) {
  /* contexts */
  case 0:
  case 1: ctx_create(); break;
  case 2: ctx_destroy(); break;
  case 3:
    cur_fn = "tlContextAttachDiagnosticHandler";
    /* NULL (stderr) rarely: the output stays small */
    tlContextAttachDiagnosticHandler(c, chance(95) ? on_diag : NULL, chance(50) ? &n_handler_ud : NULL);
    break;
  case 4: {
    static const int sms[] = {0, -1, 89, 90, 100, 101, 120, INT_MAX, INT_MIN};
    cur_fn = "tlContextSetTargetSM";
    check_ok(tlContextSetTargetSM(c, sms[below(sizeof sms / sizeof sms[0])]), c.context,
             "tlContextSetTargetSM succeeded on a null or destroyed context");
    break;
  }
  /* diagnostics */
  case 5: {
    tlDiagnostic d = diag_pick(f);
    cur_fn = "tlDiagnostic getters";
    int sev = (int)tlDiagnosticGetSeverity(d);
    EXPECT(sev >= 0 && sev <= 3, "tlDiagnosticGetSeverity out of range");
    touch(tlDiagnosticGetMessage(d));
    touch(tlDiagnosticGetFile(d));
    int line = tlDiagnosticGetLine(d), col = tlDiagnosticGetColumn(d);
    if (!d.ptr) EXPECT(!line && !col, "a null diagnostic with a line");
    intptr_t nn = tlDiagnosticGetNumNotes(d);
    EXPECT(nn >= 0, "tlDiagnosticGetNumNotes < 0");
    tlDiagnostic note = tlDiagnosticGetNote(d, chance(50) ? gen_pos() : (nn ? nn - 1 : 0));
    CHECK_RESULT(note, d.context, "tlDiagnosticGetNote");
    touch(tlDiagnosticGetMessage(note));
    break;
  }
  case 6:
    cur_fn = "tlDiagnosticPrint";
    tlDiagnosticPrint(diag_pick(f), chance(90) ? on_text : NULL, NULL);
    break;
  /* types */
  case 7: {
    static const unsigned widths[] = {0, 1, 8, 16, 32, 64, 65, 128, UINT_MAX};
    cur_fn = "tlIntegerTypeGet";
    tlType t = tlIntegerTypeGet(c, widths[below(sizeof widths / sizeof widths[0])]);
    CHECK_RESULT(t, c.context, "tlIntegerTypeGet");
    type_add(t);
    break;
  }
  case 8: {
    tlType t;
    cur_fn = "tl*TypeGet";
    switch (below(5)) {
    case 0: t = tlIndexTypeGet(c); break;
    case 1: t = tlF16TypeGet(c); break;
    case 2: t = tlBF16TypeGet(c); break;
    case 3: t = tlF32TypeGet(c); break;
    default: t = tlF64TypeGet(c); break;
    }
    CHECK_RESULT(t, c.context, "tl*TypeGet");
    type_add(t);
    break;
  }
  case 9: {
    tlType e = type_pick(f);
    cur_fn = "tlPointerTypeGet";
    tlType t = tlPointerTypeGet(e, GEN_STR(spaces));
    CHECK_RESULT(t, e.context, "tlPointerTypeGet");
    type_add(t);
    break;
  }
  case 10: {
    tlType a = type_pick(f), b = type_pick(f);
    cur_fn = "tlTypeEqual";
    bool eq = tlTypeEqual(a, b);
    if (eq && (a.ptr || b.ptr)) EXPECT(a.context == b.context, "tlTypeEqual: equal types of two contexts");
    EXPECT(tlTypeEqual(a, a) || (a.ptr && !serial_live(a.context)) || !a.ptr,
           "tlTypeEqual: a live type unequal to itself");
    EXPECT(tlTypeIsNull(a) == !a.ptr, "tlTypeIsNull");
    break;
  }
  case 11:
    cur_fn = "tlTypePrint";
    tlTypePrint(type_pick(f), chance(90) ? on_text : NULL, NULL);
    break;
  /* attributes */
  case 12: {
    tlType t = type_pick(f);
    cur_fn = "tlIntegerAttrGet";
    tlAttribute a = tlIntegerAttrGet(t, gen_int());
    CHECK_RESULT(a, t.context, "tlIntegerAttrGet");
    attr_add(a);
    break;
  }
  case 13: {
    tlType t = type_pick(f);
    cur_fn = "tlFloatAttrGet";
    tlAttribute a = tlFloatAttrGet(t, gen_double());
    CHECK_RESULT(a, t.context, "tlFloatAttrGet");
    attr_add(a);
    break;
  }
  case 14: {
    cur_fn = "tlBoolAttrGet";
    tlAttribute a = tlBoolAttrGet(c, chance(50));
    CHECK_RESULT(a, c.context, "tlBoolAttrGet");
    attr_add(a);
    break;
  }
  case 15: {
    cur_fn = "tlStringAttrGet";
    tlAttribute a = tlStringAttrGet(c, GEN_STR(op_names));
    CHECK_RESULT(a, c.context, "tlStringAttrGet");
    attr_add(a);
    break;
  }
  case 16: {
    tlType t = type_pick(f);
    cur_fn = "tlTypeAttrGet";
    tlAttribute a = tlTypeAttrGet(t);
    CHECK_RESULT(a, t.context, "tlTypeAttrGet");
    attr_add(a);
    break;
  }
  case 17: {
    tlAttribute el[8];
    int use;
    intptr_t n = gen_count(8, &use);
    fill_attrs(el, 8, f);
    cur_fn = "tlArrayAttrGet";
    tlAttribute a = tlArrayAttrGet(c, n, use ? el : NULL);
    CHECK_RESULT(a, c.context, "tlArrayAttrGet");
    attr_add(a);
    break;
  }
  case 18: {
    tlNamedAttribute el[8];
    int use;
    intptr_t n = gen_count(8, &use);
    fill_named(el, 8, f);
    cur_fn = "tlDictionaryAttrGet";
    tlAttribute a = tlDictionaryAttrGet(c, n, use ? el : NULL);
    CHECK_RESULT(a, c.context, "tlDictionaryAttrGet");
    attr_add(a);
    break;
  }
  case 19: {
    tlAttribute a = attr_pick(f);
    cur_fn = "tlAttributePrint";
    EXPECT(tlAttributeIsNull(a) == !a.ptr, "tlAttributeIsNull");
    tlAttributePrint(a, chance(90) ? on_text : NULL, NULL);
    break;
  }
  case 20:
    cur_fn = "tlStringRefCreateFromCString";
    touch(tlStringRefCreateFromCString(chance(50) ? NULL : op_names[below(sizeof op_names / sizeof op_names[0])]));
    break;
  /* modules */
  case 21:
  case 22: {
    cur_fn = "tlModuleCreateEmpty";
    tlModule m = tlModuleCreateEmpty(c);
    CHECK_RESULT(m, c.context, "tlModuleCreateEmpty");
    module_add(m);
    break;
  }
  case 23:
  case 24:
  case 25: {
    size_t len;
    char *text = mutate_ir(&len);
    static const char *files[] = {"input.tir", "a/b/c.tir", ""};
    tlStringRef s = chance(3) ? tlStringRefCreate(NULL, len ? len : 1) : tlStringRefCreate(text, len);
    cur_fn = "tlModuleCreateParse";
    tlModule m = tlModuleCreateParse(c, s, GEN_STR(files));
    free(text);
    CHECK_RESULT(m, c.context, "tlModuleCreateParse");
    ok_parse += m.ptr != NULL;
    module_add(m);
    if (m.ptr) op_add(tlModuleGetOperation(m));
    break;
  }
  case 26:
  case 27: {
    size_t len;
    char *text = mutate_script(&len);
    static const char *chunks[] = {"s.lua", "=stdin", "@file.lua", ""};
    tlStringRef s = chance(3) ? tlStringRefCreate(NULL, len ? len : 1) : tlStringRefCreate(text, len);
    cur_fn = "tlModuleCreateFromScript";
    tlModule m = tlModuleCreateFromScript(c, s, GEN_STR(chunks));
    free(text);
    CHECK_RESULT(m, c.context, "tlModuleCreateFromScript");
    ok_script += m.ptr != NULL;
    module_add(m);
    break;
  }
  case 28: {
    tlModule m = module_pick(f);
    cur_fn = "tlModuleGetOperation";
    EXPECT(tlModuleIsNull(m) == !m.ptr, "tlModuleIsNull");
    tlOperation op = tlModuleGetOperation(m);
    CHECK_RESULT(op, m.context, "tlModuleGetOperation");
    op_add(op);
    break;
  }
  case 29: {
    tlModule m = module_pick(f);
    cur_fn = "tlModuleGetBody";
    tlBlock b = tlModuleGetBody(m);
    CHECK_RESULT(b, m.context, "tlModuleGetBody");
    block_add(b);
    break;
  }
  case 30: {
    tlModule m = module_pick(f);
    cur_fn = "tlModuleVerify";
    check_ok(tlModuleVerify(m), m.context, "tlModuleVerify succeeded on a null or destroyed module");
    break;
  }
  case 31:
  case 32: {
    tlModule m = module_pick(f);
    cur_fn = "tlModuleRunPipeline";
    tlLogicalResult r = tlModuleRunPipeline(m, GEN_STR(pipelines));
    check_ok(r, m.context, "tlModuleRunPipeline succeeded on a null or destroyed module");
    ok_pipeline += tlLogicalResultIsSuccess(r);
    break;
  }
  case 33:
    cur_fn = "tlModulePrint";
    tlModulePrint(module_pick(f), chance(90) ? on_text : NULL, NULL);
    break;
  case 34: {
    tlModule m = module_pick(f);
    cur_fn = "tlModuleEmitPTX";
    tlLogicalResult r = tlModuleEmitPTX(m, chance(90) ? on_text : NULL, NULL);
    check_ok(r, m.context, "tlModuleEmitPTX succeeded on a null or destroyed module");
    ok_ptx += tlLogicalResultIsSuccess(r);
    break;
  }
  /* building */
  case 35:
  case 36:
  case 37: {
    tlModule m = module_pick(f);
    tlType types[8];
    tlStringRef names[8];
    static const char *pnames[] = {"n", "x", "arg0", "out", "a b", "%0"};
    static const char *knames[] = {"k", "kernel", "main", "a.b", "k k", "@k"};
    int use;
    intptr_t n = gen_count(8, &use);
    fill_types(types, 8, m.context);
    for (int i = 0; i < 8; i++) names[i] = GEN_STR(pnames);
    unsigned bx = chance(70) ? 32 * (1 + below(8)) : gen_block_dim();
    unsigned by = chance(80) ? 1 : gen_block_dim(), bz = chance(80) ? 1 : gen_block_dim();
    cur_fn = "tlKernelCreate";
    tlOperation k = tlKernelCreate(m, GEN_STR(knames), n, use ? types : NULL, chance(30) ? NULL : names, bx,
                                   by, bz);
    CHECK_RESULT(k, m.context, "tlKernelCreate");
    op_add(k);
    if (k.ptr && chance(70)) {
      cur_fn = "tlOperationGetRegionBlock (kernel)";
      tlBlock b = tlOperationGetRegionBlock(k, 0, 0, NULL);
      CHECK_RESULT(b, m.context, "tlOperationGetRegionBlock");
      block_add(b);
    }
    break;
  }
  case 38:
  case 39: {
    tlOperation op = op_pick(f);
    tlType types[8];
    int use;
    intptr_t n = gen_count(8, &use);
    fill_types(types, 8, op.context);
    intptr_t region = chance(70) ? (intptr_t)below(3) : gen_pos();
    cur_fn = "tlOperationGetRegionBlock";
    tlBlock b = tlOperationGetRegionBlock(op, region, n, use ? types : NULL);
    CHECK_RESULT(b, op.context, "tlOperationGetRegionBlock");
    block_add(b);
    break;
  }
  case 40:
  case 41: {
    tlBlock b = block_pick(f);
    cur_fn = "tlBlockGetNumArguments";
    intptr_t n = tlBlockGetNumArguments(b);
    EXPECT(n >= -1, "tlBlockGetNumArguments < -1");
    if (!b.ptr || !serial_live(b.context)) EXPECT(n == -1, "tlBlockGetNumArguments: not -1 for a null or stale block");
    cur_fn = "tlBlockGetArgument";
    tlValue v = tlBlockGetArgument(b, n > 0 && chance(70) ? (intptr_t)below((uint32_t)n) : gen_pos());
    CHECK_RESULT(v, b.context, "tlBlockGetArgument");
    value_add(v);
    break;
  }
  case 42:
  case 43:
  case 44:
  case 45:
  case 46: {
    tlBlock b = block_pick(f);
    uint64_t g = b.context ? b.context : f;
    tlValue opds[8];
    tlType res[8];
    tlNamedAttribute attrs[8];
    int use_o, use_r, use_a;
    intptr_t no = gen_count(chance(50) ? 2 : 8, &use_o);
    intptr_t nr = chance(60) ? 1 : gen_count(8, &use_r);
    if (nr == 1) use_r = 1;
    intptr_t na = chance(50) ? 0 : gen_count(8, &use_a);
    if (na == 0) use_a = chance(50);
    fill_values(opds, 8, g);
    fill_types(res, 8, g);
    fill_named(attrs, 8, g);
    if (chance(50)) { /* an attribute that the op wants, sometimes */
      static const char *wanted[] = {"value", "predicate", "dim"};
      attrs[0].name = tlStringRefCreateFromCString(wanted[below(3)]);
    }
    static const intptr_t regions[] = {0, 0, 0, 1, 2, 16, 17, -1, INT32_MAX, INTPTR_MAX};
    intptr_t nregions = regions[below(sizeof regions / sizeof regions[0])];
    cur_fn = "tlOperationCreate";
    tlOperation op = tlOperationCreate(b, GEN_STR(op_names), no, use_o ? opds : NULL, nr, use_r ? res : NULL,
                                       na, use_a ? attrs : NULL, nregions);
    CHECK_RESULT(op, b.context, "tlOperationCreate");
    ok_op += op.ptr != NULL;
    op_add(op);
    if (op.ptr) {
      cur_fn = "tlOperationGetResult (new op)";
      tlValue v = tlOperationGetResult(op, 0);
      CHECK_RESULT(v, b.context, "tlOperationGetResult");
      value_add(v);
    }
    break;
  }
  case 47: {
    tlOperation op = op_pick(f);
    cur_fn = "tlOperationGetResult";
    EXPECT(tlOperationIsNull(op) == !op.ptr, "tlOperationIsNull");
    tlValue v = tlOperationGetResult(op, chance(60) ? 0 : gen_pos());
    CHECK_RESULT(v, op.context, "tlOperationGetResult");
    value_add(v);
    break;
  }
  case 48: {
    tlOperation op = op_pick(f);
    cur_fn = "tlOperationVerify";
    check_ok(tlOperationVerify(op), op.context, "tlOperationVerify succeeded on a null or destroyed op");
    break;
  }
  case 49:
    cur_fn = "tlOperationPrint";
    tlOperationPrint(op_pick(f), chance(90) ? on_text : NULL, NULL);
    break;
  case 50: {
    tlValue v = value_pick(f);
    cur_fn = "tlValueGetType";
    tlType t = tlValueGetType(v);
    CHECK_RESULT(t, v.context, "tlValueGetType");
    type_add(t);
    break;
  }
  case 51: {
    cur_fn = "tlNamedAttributeGet";
    tlAttribute a = attr_pick(f);
    tlNamedAttribute na = tlNamedAttributeGet(GEN_STR(attr_names), a);
    EXPECT(na.attribute.ptr == a.ptr && na.attribute.context == a.context, "tlNamedAttributeGet");
    break;
  }
  case 53:
  case 54:
  case 55: { /* an op that fits its signature, mostly: the IR grows past one level */
    tlBlock b = block_pick(f);
    uint64_t g = b.context;
    tlContext bc = {0};
    for (int i = 0; i < nctx; i++)
      if (ctxs[i].context == g) bc = ctxs[i];
    if (!bc.ptr) break;
    tlValue v = value_pick(g), w = chance(70) ? v : value_pick(g);
    tlType vt = tlValueGetType(v);
    tlType i32 = tlIntegerTypeGet(bc, 32), i1 = tlIntegerTypeGet(bc, 1);
    tlNamedAttribute at;
    tlOperation op = {0};
    static const char *binops[] = {"arith.addi", "arith.subi", "arith.muli", "arith.andi", "arith.addf",
                                   "arith.mulf", "arith.maxsi", "arith.divsi"};
    static const char *dims[] = {"x", "y", "z", "w"};
    cur_fn = "tlOperationCreate (fitting)";
    switch (below(6)) {
    case 0: {
      tlType t = chance(50) ? i32 : chance(50) ? tlIndexTypeGet(bc) : tlF32TypeGet(bc);
      tlAttribute a = tlTypeEqual(t, tlF32TypeGet(bc)) ? tlFloatAttrGet(t, gen_double()) : tlIntegerAttrGet(t, below(100));
      at = tlNamedAttributeGet(tlStringRefCreateFromCString("value"), a);
      op = tlOperationCreate(b, tlStringRefCreateFromCString("arith.constant"), 0, NULL, 1, &t, 1, &at, 0);
      break;
    }
    case 1:
    case 2: {
      tlValue o[] = {v, w};
      op = tlOperationCreate(b, from_list(binops, sizeof binops / sizeof binops[0]), 2, o, 1, &vt, 0, NULL, 0);
      break;
    }
    case 3: {
      tlValue o[] = {v, w};
      at = tlNamedAttributeGet(tlStringRefCreateFromCString("predicate"), tlStringAttrGet(bc, tlStringRefCreateFromCString("slt")));
      op = tlOperationCreate(b, tlStringRefCreateFromCString("arith.cmpi"), 2, o, 1, &i1, 1, &at, 0);
      break;
    }
    case 4:
      at = tlNamedAttributeGet(tlStringRefCreateFromCString("dim"), tlStringAttrGet(bc, from_list(dims, 4)));
      op = tlOperationCreate(b, tlStringRefCreateFromCString(chance(50) ? "tile.thread_id" : "tile.block_id"), 0,
                             NULL, 1, &i32, 1, &at, 0);
      break;
    default: /* scf.if on an i1, its two regions' blocks into the pool */
      op = tlOperationCreate(b, tlStringRefCreateFromCString("scf.if"), 1, &v, 0, NULL, 0, NULL, 2);
      if (op.ptr) {
        block_add(tlOperationGetRegionBlock(op, 0, 0, NULL));
        block_add(tlOperationGetRegionBlock(op, 1, 0, NULL));
      }
      break;
    }
    CHECK_RESULT(op, g, "tlOperationCreate");
    ok_op += op.ptr != NULL;
    op_add(op);
    if (op.ptr) value_add(tlOperationGetResult(op, 0));
    break;
  }
  case 56: { /* the GPU calls (no driver here, or the stand-in through TILUA_LIBCUDA) with null,
                closed and other contexts' devices */
    static tlDevice devs[4];
    static unsigned ndev;
    cur_fn = "tlDevice*";
    if (chance(30) && c.ptr) {
      tlDevice nd = tlDeviceOpen(c, (int)below(3) - 1);
      if (!tlDeviceIsNull(nd)) devs[ndev++ % 4] = nd;
    }
    tlDevice d = devs[below(4)];
    uint64_t addr = 0;
    char buf[64] = {0};
    switch (below(6)) {
    case 0:
    case 1:
    case 2: /* copies only to memory allocated here (a made-up device address is the caller's fault) */
      if (tlLogicalResultIsSuccess(tlDeviceAlloc(d, chance(80) ? 64 : 0, chance(90) ? &addr : NULL))) {
        tlDeviceCopyToDevice(d, addr, chance(80) ? buf : NULL, below(2) * 64);
        tlDeviceCopyToHost(d, chance(80) ? buf : NULL, addr, below(2) * 64);
        tlDeviceFree(d, addr);
      }
      break;
    case 3: {
      unsigned g[3] = {(unsigned)below(3), 1, 1};
      tlKernelArg a[2] = {{(tlKernelArgKind)below(6), {0}}, {TL_ARG_I32, {0}}};
      static const char *launch_names[] = {"k", "scale", "main", "", "nope"};
      tlDeviceLaunch(d, module_pick(f), GEN_STR(launch_names), chance(80) ? g : NULL, (intptr_t)below(4) - 1,
                     chance(80) ? a : NULL); /* at most 2 arguments: the array's length */
      break;
    }
    case 4: tlDeviceClose(d); break;
    default: tlDeviceFree(d, 12345); break;
    }
    break;
  }
  case 52: /* a destroyed context's handle in the middle of building */
    if (chance(30)) ctx_destroy();
    else ctx_create();
    break;
  default: { /* a whole kernel op by op: the pools get handles that verify */
    if (!c.ptr) break;
    cur_fn = "kernel op by op";
    tlModule m = tlModuleCreateEmpty(c);
    module_add(m);
    tlType i32 = tlIntegerTypeGet(c, 32);
    tlType params[] = {tlPointerTypeGet(tlF32TypeGet(c), tlStringRefCreateFromCString("global")), i32};
    tlOperation k = tlKernelCreate(m, tlStringRefCreateFromCString("scale"), 2, params, NULL, 128, 1, 1);
    tlBlock body = tlOperationGetRegionBlock(k, 0, 0, NULL);
    tlValue n = tlBlockGetArgument(body, 1);
    tlNamedAttribute two = tlNamedAttributeGet(tlStringRefCreateFromCString("value"), tlIntegerAttrGet(i32, 2));
    tlOperation c2 = tlOperationCreate(body, tlStringRefCreateFromCString("arith.constant"), 0, NULL, 1, &i32, 1,
                                       &two, 0);
    tlValue o[] = {n, tlOperationGetResult(c2, 0)};
    tlOperation mul = tlOperationCreate(body, tlStringRefCreateFromCString("arith.muli"), 2, o, 1, &i32, 0, NULL, 0);
    type_add(i32);
    type_add(params[0]);
    op_add(k);
    op_add(c2);
    op_add(mul);
    block_add(body);
    value_add(n);
    value_add(tlOperationGetResult(mul, 0));
    if (serial_live(c.context)) {
      EXPECT(!tlOperationIsNull(mul), "the op-by-op kernel failed to build");
      EXPECT(tlLogicalResultIsSuccess(tlModuleVerify(m)), "the op-by-op kernel does not verify");
    }
    break;
  }
  }
}

static void run_input(uint64_t index) {
  cur_index = index;
  rng_state = splitmix(cur_seed + index);
  if (!rng_state) rng_state = 1;
  out_len = 0;
  unsigned ncalls = 1 + below(40);
  for (cur_call = 0; cur_call < ncalls; cur_call++) {
    n_calls++;
    if (!nctx || (!chance(10) && cur_call == 0)) ctx_create();
    else one_call();
  }
  cur_fn = "tlContextDestroy (end of input)";
  for (int i = 0; i < nctx; i++)
    if (ctx_live[i]) tlContextDestroy(ctxs[i]);
  nctx = ntype = nattr = nmodule = nop = nblock = nvalue = ndiag = 0;
  n_inputs++;
}

/* }====================================================================== */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(void) {
  fprintf(stderr, "usage: capi_fuzz [--seconds S] [--iterations N] [--seed X] [--skip K] [--corpus DIR]\n");
  exit(2);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "capi_fuzz: an input ran over 60 s (a hang?)\n";
  ssize_t w = write(2, msg, sizeof msg - 1);
  (void)w;
  say_where();
  signal(SIGABRT, SIG_DFL);
  abort();
}

int main(int argc, char **argv) {
  char top;
  stack_top = &top;
  double seconds = 10;
  uint64_t iterations = 0, skip = 0;
  int have_seed = 0, have_seconds = 0;
  const char *corpus_dir = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (i + 1 >= argc) usage();
    const char *v = argv[++i];
    char *end;
    if (!strcmp(a, "--seconds")) {
      seconds = strtod(v, &end);
      if (*end || seconds < 0) usage();
      have_seconds = 1;
    } else if (!strcmp(a, "--iterations")) {
      iterations = strtoull(v, &end, 0);
      if (*end) usage();
    } else if (!strcmp(a, "--seed")) {
      cur_seed = strtoull(v, &end, 0);
      if (*end) usage();
      have_seed = 1;
    } else if (!strcmp(a, "--skip")) {
      skip = strtoull(v, &end, 0);
      if (*end) usage();
    } else if (!strcmp(a, "--corpus")) {
      corpus_dir = v;
    } else usage();
  }
  if (!have_seed) cur_seed = splitmix((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32));
  if (corpus_dir) load_corpus(corpus_dir);
  fprintf(stderr, "capi_fuzz: seed %llu%s%s\n", (unsigned long long)cur_seed, corpus_dir ? ", corpus " : "",
          corpus_dir ? corpus_dir : "");

#ifdef FUZZ_SANITIZED
  /* The sanitizers own SIGSEGV & co.; their death callback says where. GCC links
  ** libasan and libubsan, each with its own callback: set both. */
  typedef void (*SetDeathCallback)(void (*)(void));
  SetDeathCallback set = (SetDeathCallback)(uintptr_t)dlsym(RTLD_DEFAULT, "__sanitizer_set_death_callback");
  if (set) set(say_where);
  void *ubsan = dlopen("libubsan.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (ubsan) {
    SetDeathCallback set2 = (SetDeathCallback)(uintptr_t)dlsym(ubsan, "__sanitizer_set_death_callback");
    if (set2 && set2 != set) set2(say_where);
    dlclose(ubsan);
  }
#else
  signal(SIGSEGV, on_signal);
  signal(SIGBUS, on_signal);
  signal(SIGFPE, on_signal);
  signal(SIGILL, on_signal);
#endif
  signal(SIGABRT, on_signal);
  signal(SIGALRM, on_alarm);

  double start = now();
  for (uint64_t i = skip;; i++) {
    /* --iterations alone: that many inputs; with --seconds too: whichever ends first */
    if (iterations && i - skip >= iterations) break;
    if ((!iterations || have_seconds) && now() - start >= seconds) break;
    alarm(60);
    run_input(i);
  }
  alarm(0);
  double took = now() - start;
  printf("capi_fuzz: %llu inputs, %llu calls, seed %llu, 0 crashes (%.1f s, %llu diagnostics, %llu printed "
         "pieces; succeeded: %llu parses, %llu scripts, %llu pipelines, %llu PTX, %llu ops)\n",
         n_inputs, n_calls, (unsigned long long)cur_seed, took, n_diags, n_pieces, ok_parse, ok_script,
         ok_pipeline, ok_ptx, ok_op);
  free(out_buf);
  for (size_t i = 0; i < ncorpus; i++) free(corpus[i].data);
  free(corpus);
  return 0;
}
