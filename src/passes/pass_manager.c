/*
** pass_manager.c -- pass registry, pipeline parsing and the run loop.
*/
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "passes.h"

static const IrPassInfo pass_table[] = {
#define PASS(c, name, options, desc) {name, desc, pass_##c, options, NULL},
#define LUA_PASS(c, name, options, desc) {name, desc, NULL, options, #c},
#include "passes_def.h"
};

static const struct {
  const char *name, *passes, *desc;
} pipeline_table[] = {
#define PIPELINE(name, list, desc) {name, list, desc},
#include "passes_def.h"
    {NULL, NULL, NULL}};

static const struct {
  const char *id, *what, *by;
  IrOp *(*check)(IrOp *module, StrBuf *why);
} fact_table[] = {
#define FACT(id, what, by) {#id, what, by, fact_##id},
#include "passes_def.h"
};

/* A REQUIRES row names its pass by its function: a misspelt or Lua pass does not compile. */
static const struct {
  IrPassFn pass;
  IrPassFact fact;
} requires_table[] = {
#define REQUIRES(c, fact) {pass_##c, IR_FACT_##fact},
#include "passes_def.h"
    {NULL, IR_FACT__COUNT}};

#define NPASSES ((int)(sizeof pass_table / sizeof pass_table[0]))
#define NPIPELINES ((int)(sizeof pipeline_table / sizeof pipeline_table[0]) - 1)

int ir_pass_count(void) { return NPASSES; }

uint32_t ir_pass_requires(const IrPassInfo *p) {
  uint32_t m = 0;
  for (int i = 0; p->run && requires_table[i].pass; i++)
    if (requires_table[i].pass == p->run) m |= 1u << requires_table[i].fact;
  return m;
}

void ir_pass_fact_info(IrPassFact f, const char **id, const char **what, const char **by) {
  *id = fact_table[f].id;
  *what = fact_table[f].what;
  *by = fact_table[f].by;
}
const IrPassInfo *ir_pass_at(int i) { return &pass_table[i]; }
int ir_named_pipeline_count(void) { return NPIPELINES; }

void ir_named_pipeline_at(int i, const char **name, const char **passes, const char **desc) {
  *name = pipeline_table[i].name;
  *passes = pipeline_table[i].passes;
  *desc = pipeline_table[i].desc;
}

const IrPassInfo *ir_pass_lookup(const char *name, size_t len) {
  for (int i = 0; i < NPASSES; i++)
    if (strlen(pass_table[i].name) == len && memcmp(pass_table[i].name, name, len) == 0)
      return &pass_table[i];
  return NULL;
}

static const char *pipeline_lookup(const char *name, size_t len) {
  for (int i = 0; i < NPIPELINES; i++)
    if (strlen(pipeline_table[i].name) == len && memcmp(pipeline_table[i].name, name, len) == 0)
      return pipeline_table[i].passes;
  return NULL;
}

/* {======================================================================
** Parsing "a,b{key=value,key2=value2},c"
** ======================================================================= */

typedef struct Parse {
  IrContext *ctx;
  const char *spec;
  IrPipelineStep *steps;
  uint32_t n, cap;
  int depth; /* named-pipeline nesting, to stop cycles */
} Parse;

static void push(Parse *ps, const IrPassInfo *pass, const IrAttr *opts) {
  if (ps->n == ps->cap) {
    uint32_t ncap = ps->cap ? ps->cap * 2 : 8;
    IrPipelineStep *ns = arena_alloc(ir_arena(ps->ctx), ncap * sizeof *ns);
    if (ps->n) memcpy(ns, ps->steps, ps->n * sizeof *ns);
    ps->steps = ns;
    ps->cap = ncap;
  }
  ps->steps[ps->n++] = (IrPipelineStep){pass, opts};
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n'; }

/* Options: key=value pairs; integers become i64, true/false bools, the rest strings. */
static const IrAttr *parse_options(Parse *ps, const char *s, size_t n) {
  IrNamedAttr entries[32];
  uint32_t k = 0;
  const char *end = s + n;
  while (s < end && k < 32) {
    while (s < end && (is_space(*s) || *s == ','))
      s++;
    if (s >= end) break;
    const char *key = s;
    while (s < end && *s != '=' && *s != ',')
      s++;
    size_t klen = (size_t)(s - key);
    while (klen && is_space(key[klen - 1]))
      klen--;
    const char *val = "true";
    size_t vlen = 4;
    if (s < end && *s == '=') {
      s++;
      while (s < end && is_space(*s))
        s++;
      val = s;
      while (s < end && *s != ',')
        s++;
      vlen = (size_t)(s - val);
      while (vlen && is_space(val[vlen - 1]))
        vlen--;
    }
    char *endp;
    char buf[64];
    const IrAttr *a;
    snprintf(buf, sizeof buf, "%.*s", (int)(vlen < 63 ? vlen : 63), val);
    long long iv = strtoll(buf, &endp, 0);
    if (vlen && vlen < 63 && *endp == 0) a = ir_attr_i64(ps->ctx, iv);
    else if (vlen == 4 && !memcmp(val, "true", 4)) a = ir_attr_bool(ps->ctx, true);
    else if (vlen == 5 && !memcmp(val, "false", 5)) a = ir_attr_bool(ps->ctx, false);
    else a = ir_attr_str(ps->ctx, val, vlen);
    entries[k++] = (IrNamedAttr){ir_intern(ps->ctx, key, klen), a};
  }
  return ir_attr_dict(ps->ctx, k, entries);
}

static void unknown_pass(Parse *ps, const char *name, size_t len) {
  IrDiag *d =
      ir_error(ps->ctx, ir_loc_unknown(), "unknown pass or pipeline '%.*s'", (int)len, name);
  StrBuf sb;
  sb_init(&sb);
  for (int i = 0; i < NPASSES; i++)
    sb_printf(&sb, "%s%s", i ? ", " : "", pass_table[i].name);
  for (int i = 0; i < NPIPELINES; i++)
    sb_printf(&sb, ", %s", pipeline_table[i].name);
  ir_note(d, ir_loc_unknown(), "known: %s", sb.data ? sb.data : "");
  sb_free(&sb);
}

/* Does the space-separated list hold the word key[0..len)? */
static bool has_word(const char *list, const char *key, size_t len) {
  for (const char *w = list; *w;) {
    while (*w == ' ')
      w++;
    const char *e = w;
    while (*e && *e != ' ')
      e++;
    if ((size_t)(e - w) == len && len && !memcmp(w, key, len)) return true;
    w = e;
  }
  return false;
}

/* Every option given must be one the pass reads (a misspelt one would be
** ignored silently). */
static IrResult check_options(Parse *ps, const IrPassInfo *p, const IrAttr *opts) {
  if (!opts) return IR_OK;
  for (uint32_t i = 0; i < opts->u.dict.n; i++) {
    const char *key = opts->u.dict.entries[i].name;
    if (has_word(p->options, key, strlen(key))) continue;
    if (!*p->options)
      ir_error(ps->ctx, ir_loc_unknown(), "pass '%s' takes no options (got '%s')", p->name, key);
    else
      ir_error(ps->ctx, ir_loc_unknown(), "pass '%s' has no option '%s' (it reads: %s)", p->name,
               key, p->options);
    return IR_FAIL;
  }
  return IR_OK;
}

static IrResult parse_list(Parse *ps, const char *s) {
  bool first = true;
  while (*s) {
    while (is_space(*s))
      s++;
    if (!first) {
      if (*s != ',') break; /* the caller's ',' check below reports it */
      s++;
      while (is_space(*s))
        s++;
    }
    first = false;
    if (!*s || *s == ',') {
      ir_error(ps->ctx, ir_loc_unknown(), "empty pass name in pipeline \"%s\"", ps->spec);
      return IR_FAIL;
    }
    const char *name = s;
    while (*s && *s != ',' && *s != '{' && !is_space(*s))
      s++;
    size_t len = (size_t)(s - name);
    while (is_space(*s))
      s++;
    const IrAttr *opts = NULL;
    if (*s == '{') {
      const char *o = ++s;
      while (*s && *s != '}')
        s++;
      if (!*s) {
        ir_error(ps->ctx, ir_loc_unknown(), "pass '%.*s': unterminated '{' in pipeline", (int)len,
                 name);
        return IR_FAIL;
      }
      opts = parse_options(ps, o, (size_t)(s - o));
      s++;
    }
    while (is_space(*s))
      s++;
    if (*s && *s != ',') {
      ir_error(ps->ctx, ir_loc_unknown(), "expected ',' after pass '%.*s' in pipeline \"%s\"",
               (int)len, name, ps->spec);
      return IR_FAIL;
    }
    const IrPassInfo *p = ir_pass_lookup(name, len);
    if (p) {
      if (check_options(ps, p, opts) != IR_OK) return IR_FAIL;
      push(ps, p, opts);
      continue;
    }
    const char *sub = pipeline_lookup(name, len);
    if (!sub) {
      unknown_pass(ps, name, len);
      return IR_FAIL;
    }
    if (opts) {
      ir_error(ps->ctx, ir_loc_unknown(), "pipeline '%.*s' takes no options", (int)len, name);
      return IR_FAIL;
    }
    if (++ps->depth > 8) {
      ir_error(ps->ctx, ir_loc_unknown(), "pipeline '%.*s' nests too deeply", (int)len, name);
      return IR_FAIL;
    }
    if (parse_list(ps, sub) != IR_OK) return IR_FAIL;
    ps->depth--;
  }
  return IR_OK;
}

IrResult ir_pipeline_parse(IrContext *ctx, const char *spec, IrPipeline *out) {
  Parse ps = {.ctx = ctx, .spec = spec};
  out->n = 0;
  out->steps = NULL;
  if (parse_list(&ps, spec) != IR_OK) return IR_FAIL;
  out->n = ps.n;
  out->steps = ps.steps;
  return IR_OK;
}

/* }====================================================================== */

void ir_pass_options_default(IrPassOptions *o) {
  memset(o, 0, sizeof *o);
  o->verify_each = true;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Run one pass, in C or (a LUA_PASS) through the Lua state running the pipeline. */
static IrResult run_pass(const IrPassInfo *pass, IrOp *module, IrPassCtx *pc,
                         const IrPassOptions *opts) {
  if (pass->run) return pass->run(module, pc);
  if (opts->run_lua) return opts->run_lua(pass, module, pc, opts->lua_ud);
  ir_error(pc->ctx, module->loc,
           "pass '%s' is implemented in Lua (tilua.passes.%s): it runs where a Lua state runs the "
           "pipeline (the tilua program, the Lua library, the C API), not from plain C",
           pass->name, pass->lua_fn);
  return IR_FAIL;
}

/* The verifier around passes: a warning it gives repeats one of the input,
** already seen by whoever verified it, so it is dropped when it passes and the
** pipeline's warnings are the passes' own. */
static IrResult verify_quiet(IrOp *module) {
  IrContext *ctx = ir_op_context(module);
  IrDiag *mark = ir_diag_last(ctx);
  if (ir_verify(module) != IR_OK) return IR_FAIL;
  ir_diag_drop_after(ctx, mark);
  return IR_OK;
}

/* The ordering invariants: every fact the pass requires holds, else an error
** at the op that breaks it naming the fact, and a note on what makes it hold. */
static IrResult check_requires(const IrPassInfo *pass, IrOp *module) {
  uint32_t req = ir_pass_requires(pass);
  for (int f = 0; f < IR_FACT__COUNT; f++) {
    if (!(req & (1u << f))) continue;
    StrBuf why;
    sb_init(&why);
    IrOp *at = fact_table[f].check(module, &why);
    if (at) {
      IrDiag *d = ir_op_error(at, "pass '%s' requires %s (%s)", pass->name, fact_table[f].what,
                              why.data ? why.data : "");
      ir_note(d, at->loc, "to make %s hold: %s", fact_table[f].id, fact_table[f].by);
    }
    sb_free(&why);
    if (at) return IR_FAIL;
  }
  return IR_OK;
}

/* The check of IrPassOptions.check_each after pass `after` (or "input"). */
static IrResult check_after(IrOp *module, const char *after, const IrPassOptions *opts) {
  if (!opts->check_each) return IR_OK;
  IrContext *ctx = ir_op_context(module);
  IrPassCtx pc = {ctx, opts->check_options, false, after};
  size_t errs = ir_diag_error_count(ctx);
  if (run_pass(opts->check_each, module, &pc, opts) == IR_OK) return IR_OK;
  if (ir_diag_error_count(ctx) == errs)
    ir_error(ctx, module->loc, "'%s' failed", opts->check_each->name);
  if (strcmp(after, "input") == 0)
    ir_error(ctx, module->loc, "%s: the input is already wrong (before any pass)",
             opts->check_each->name);
  else
    ir_error(ctx, module->loc, "%s: pass '%s' broke what held before it", opts->check_each->name,
             after);
  return IR_FAIL;
}

IrResult ir_pipeline_run(const IrPipeline *p, IrOp *module, const IrPassOptions *opts) {
  IrPassOptions dflt;
  if (!opts) {
    ir_pass_options_default(&dflt);
    opts = &dflt;
  }
  IrContext *ctx = ir_op_context(module);
  if (opts->on_stage) {
    IrStageInfo in = {"input", 0, 0, false, false};
    opts->on_stage(&in, module, opts->ud);
  }
  /* Passes read attributes and kernel facts through readers that trust verified IR. */
  if (opts->verify_each && p->n && verify_quiet(module) != IR_OK) return IR_FAIL;
  if (p->n && check_after(module, "input", opts) != IR_OK) return IR_FAIL;
  for (uint32_t i = 0; i < p->n; i++) {
    IrPassCtx pc = {ctx, p->steps[i].options, false, NULL};
    const char *name = p->steps[i].pass->name;
    if (check_requires(p->steps[i].pass, module) != IR_OK) return IR_FAIL;
    double t0 = now_ms();
    size_t errs = ir_diag_error_count(ctx);
    IrResult r = run_pass(p->steps[i].pass, module, &pc, opts);
    double ms = now_ms() - t0;
    if (r != IR_OK) {
      if (ir_diag_error_count(ctx) == errs) ir_error(ctx, module->loc, "pass '%s' failed", name);
      return IR_FAIL;
    }
    /* a pass that changed nothing leaves the IR it was given, verified already */
    if (opts->verify_each && pc.changed && verify_quiet(module) != IR_OK) {
      ir_error(ctx, module->loc, "the IR after pass '%s' does not verify", name);
      return IR_FAIL;
    }
    if ((pc.changed || opts->check_every_pass) && p->steps[i].pass != opts->check_each &&
        check_after(module, name, opts) != IR_OK)
      return IR_FAIL;
    if (opts->on_stage) {
      IrStageInfo st = {name, (int)i + 1, ms, pc.changed, opts->verify_each};
      opts->on_stage(&st, module, opts->ud);
    }
  }
  return IR_OK;
}
