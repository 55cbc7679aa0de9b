/*
** capi.c -- the C embedding API (src/tilua.h): contexts and their registry,
** the checks of the contract, diagnostics, types and attributes. Modules and
** building are in capi_module.c, parsing and scripts in capi_lua.c.
*/
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "capi_impl.h"

tlStringRef tlStringRefCreateFromCString(const char *s) {
  tlStringRef r = {s ? s : "", s ? strlen(s) : 0};
  return r;
}

/* {======================================================================
** The registry of live contexts: a handle's serial finds its context without
** touching the handle's memory, so a destroyed context is detected.
** ======================================================================= */

static TlCtx *registry;
static atomic_flag registry_lock = ATOMIC_FLAG_INIT;
static uint64_t last_serial;

static void lock(void) {
  while (atomic_flag_test_and_set_explicit(&registry_lock, memory_order_acquire)) {
  }
}
static void unlock(void) { atomic_flag_clear_explicit(&registry_lock, memory_order_release); }

TlCtx *tl_live(uint64_t serial) {
  if (!serial) return NULL;
  lock();
  TlCtx *c = registry;
  while (c && c->serial != serial) c = c->next;
  unlock();
  return c;
}

static void stale(const char *fn) {
  fprintf(stderr, "tilua: %s: a handle of a destroyed context (refused)\n", fn);
}

TlCtx *tl_enter(uint64_t serial, const void *ptr, const char *fn) {
  if (!ptr || !serial) return NULL;
  TlCtx *c = tl_live(serial);
  if (!c) {
    stale(fn);
    return NULL;
  }
  if (c->broken) {
    tl_error(c, fn, "the context ran out of memory in an earlier call; only tlContextDestroy is accepted");
    return NULL;
  }
  return c;
}

/* }====================================================================== */

/* {======================================================================
** Reporting and checks
** ======================================================================= */

static void trampoline(const IrDiag *d, void *ud) {
  TlCtx *c = ud;
  tlDiagnostic td = tl_diag(c, d);
  if (c->handler) c->handler(td, c->ud);
  else ir_diag_format(d, stderr);
}

/* A diagnostic that needs no memory, for when reporting itself runs out. */
static void report_static(TlCtx *c, const char *msg) {
  IrDiag d;
  memset(&d, 0, sizeof d);
  d.ctx = c->ir;
  d.severity = IR_SEV_ERROR;
  d.message = (char *)msg;
  trampoline(&d, c);
}

void tl_error(TlCtx *c, const char *fn, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char msg[512];
  int n = snprintf(msg, sizeof msg, "%s: ", fn);
  vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
  va_end(ap);
  IrProtect p;
  ir_protect_push(&p, NULL, NULL);
  if (setjmp(p.jb) == 0) {
    ir_error(c->ir, ir_loc_unknown(), "%s", msg);
    ir_diag_flush(c->ir);
    ir_protect_pop(&p);
  } else {
    ir_protect_pop(&p);
    c->broken = true;
    report_static(c, msg);
  }
}

void tl_out_of_memory(TlCtx *c, const char *fn) {
  c->broken = true;
  ir_diag_clear(c->ir); /* what the abandoned call had pending may be half made */
  char msg[128];
  snprintf(msg, sizeof msg, "%s: out of memory", fn);
  report_static(c, msg);
}

tlLogicalResult tl_done(TlCtx *c, bool ok) {
  ir_diag_flush(c->ir);
  tlLogicalResult r = {ok ? 1 : 0};
  return r;
}

bool tl_check_string(TlCtx *c, const char *fn, const char *what, tlStringRef s) {
  if (s.data || !s.length) return true;
  tl_error(c, fn, "%s has a NULL pointer and length %zu", what, s.length);
  return false;
}

bool tl_check_count(TlCtx *c, const char *fn, const char *what, intptr_t n, const void *array) {
  if (n < 0 || n > INT32_MAX) {
    tl_error(c, fn, "%s count %lld is out of range [0, %d]", what, (long long)n, INT32_MAX);
    return false;
  }
  if (n > 0 && !array) {
    tl_error(c, fn, "%s count is %lld but the array is NULL", what, (long long)n);
    return false;
  }
  return true;
}

bool tl_check_owner(TlCtx *c, const char *fn, const char *what, uint64_t owner, const void *ptr) {
  if (!ptr) {
    tl_error(c, fn, "%s is null", what);
    return false;
  }
  if (owner == c->serial) return true;
  tl_error(c, fn, "%s belongs to %s context", what, tl_live(owner) ? "another" : "a destroyed");
  return false;
}

const IrOp *tl_value_host(const IrValue *v) {
  return v->def ? v->def : v->block ? ir_block_parent_op(v->block) : NULL;
}

bool tl_check_live_op(TlCtx *c, const char *fn, const char *what, const IrOp *op) {
  if (!op || !op->erased) return true;
  if (!strcmp(what, "the op")) tl_error(c, fn, "the op ('%s') was erased", ir_op_name(op));
  else tl_error(c, fn, "%s belongs to an erased op ('%s')", what, ir_op_name(op));
  return false;
}

/* }====================================================================== */

/* {======================================================================
** Context and diagnostics
** ======================================================================= */

/* An IR context, or NULL when memory runs out. */
static IrContext *create_ir(void) {
  IrContext *volatile ir = NULL;
  IrProtect p;
  ir_protect_push(&p, NULL, NULL);
  if (setjmp(p.jb) == 0) ir = ir_context_create();
  ir_protect_pop(&p);
  return ir;
}

tlContext tlContextCreate(void) {
  tlContext r = {NULL, 0};
  TlCtx *c = calloc(1, sizeof *c);
  if (!c) return r;
  c->ir = create_ir();
  if (!c->ir) {
    free(c);
    return r;
  }
  ir_set_diag_handler(c->ir, trampoline, c);
  lock();
  c->serial = ++last_serial;
  c->next = registry;
  registry = c;
  unlock();
  r.ptr = c;
  r.context = c->serial;
  return r;
}

void tlContextDestroy(tlContext ctx) {
  if (!ctx.ptr) return;
  lock();
  TlCtx **pp = &registry;
  while (*pp && (*pp)->serial != ctx.context) pp = &(*pp)->next;
  TlCtx *c = *pp;
  if (c) *pp = c->next;
  unlock();
  if (!c) {
    stale("tlContextDestroy");
    return;
  }
  tl_device_close(c);
  tl_lua_close(c);
  ir_context_destroy(c->ir);
  free(c);
}

void tlContextAttachDiagnosticHandler(tlContext ctx, tlDiagnosticHandler handler, void *userData) {
  TlCtx *c = ctx.ptr ? tl_live(ctx.context) : NULL; /* allowed on a broken context */
  if (!c) {
    if (ctx.ptr) stale("tlContextAttachDiagnosticHandler");
    return;
  }
  c->handler = handler;
  c->ud = userData;
}

tlLogicalResult tlContextSetTargetSM(tlContext ctx, int sm) {
  TlCtx *c = tl_enter(ctx.context, ctx.ptr, "tlContextSetTargetSM");
  if (!c || !tl_require(c, "tlContextSetTargetSM", sm >= 90, "sm %d is not supported (90 or above)", sm))
    return (tlLogicalResult){0};
  ir_context_set_target_sm(c->ir, sm);
  return (tlLogicalResult){1};
}

/* A diagnostic of a live context, or NULL. */
static const IrDiag *diag_of(tlDiagnostic d, const char *fn) {
  if (!d.ptr) return NULL;
  if (!tl_live(d.context)) {
    stale(fn);
    return NULL;
  }
  return d.ptr;
}

static tlStringRef sref(const char *s) { return tlStringRefCreateFromCString(s); }

tlDiagnosticSeverity tlDiagnosticGetSeverity(tlDiagnostic d) {
  const IrDiag *x = diag_of(d, "tlDiagnosticGetSeverity");
  return x ? (tlDiagnosticSeverity)x->severity : tlDiagnosticError;
}
tlStringRef tlDiagnosticGetMessage(tlDiagnostic d) {
  const IrDiag *x = diag_of(d, "tlDiagnosticGetMessage");
  return sref(x ? x->message : NULL);
}
tlStringRef tlDiagnosticGetFile(tlDiagnostic d) {
  const IrDiag *x = diag_of(d, "tlDiagnosticGetFile");
  return sref(x ? x->loc.file : NULL);
}
int tlDiagnosticGetLine(tlDiagnostic d) {
  const IrDiag *x = diag_of(d, "tlDiagnosticGetLine");
  return x ? x->loc.line : 0;
}
int tlDiagnosticGetColumn(tlDiagnostic d) {
  const IrDiag *x = diag_of(d, "tlDiagnosticGetColumn");
  return x ? x->loc.col : 0;
}

intptr_t tlDiagnosticGetNumNotes(tlDiagnostic d) {
  const IrDiag *x = diag_of(d, "tlDiagnosticGetNumNotes");
  intptr_t n = 0;
  for (x = x ? x->notes : NULL; x; x = x->next) n++;
  return n;
}

tlDiagnostic tlDiagnosticGetNote(tlDiagnostic d, intptr_t pos) {
  const IrDiag *x = diag_of(d, "tlDiagnosticGetNote");
  x = x && pos >= 0 ? x->notes : NULL;
  while (x && pos-- > 0) x = x->next;
  tlDiagnostic r = {x, x ? d.context : 0};
  return r;
}

void tlDiagnosticPrint(tlDiagnostic d, tlStringCallback callback, void *userData) {
  const IrDiag *x = diag_of(d, "tlDiagnosticPrint");
  if (!x || !callback) return;
  /* the text is made without the context's memory: a diagnostic may be about running out of it */
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  if (!f) {
    callback(sref(x->message), userData);
    return;
  }
  ir_diag_format(x, f);
  fclose(f);
  callback(tlStringRefCreate(buf ? buf : "", buf ? len : 0), userData);
  free(buf);
}

/* }====================================================================== */

/* {======================================================================
** Types and attributes
** ======================================================================= */

#define TYPE(t) ((const IrType *)(t).ptr)
#define ATTR(a) ((const IrAttr *)(a).ptr)

/* A type getter of a context: the whole call, protected. */
#define TYPE_GETTER(fname, expr)                                                                   \
  tlType fname(tlContext ctx) {                                                                    \
    TlCtx *c = tl_enter(ctx.context, ctx.ptr, #fname);                                             \
    tlType r = {NULL, 0};                                                                          \
    if (c) TL_PROTECTED(c, #fname, r = tl_type(c, expr));                                \
    return r;                                                                                      \
  }

TYPE_GETTER(tlIndexTypeGet, ir_type_index(c->ir))
TYPE_GETTER(tlF16TypeGet, ir_type_float(c->ir, IR_F16))
TYPE_GETTER(tlBF16TypeGet, ir_type_float(c->ir, IR_BF16))
TYPE_GETTER(tlF32TypeGet, ir_type_float(c->ir, IR_F32))
TYPE_GETTER(tlF64TypeGet, ir_type_float(c->ir, IR_F64))

tlType tlIntegerTypeGet(tlContext ctx, unsigned width) {
  TlCtx *c = tl_enter(ctx.context, ctx.ptr, "tlIntegerTypeGet");
  tlType r = {NULL, 0};
  if (!c || !tl_require(c, "tlIntegerTypeGet", width >= 1 && width <= 64,
                        "integer width %u is out of range [1, 64]", width))
    return r;
  TL_PROTECTED(c, "tlIntegerTypeGet", r = tl_type(c, ir_type_int(c->ir, width)));
  return r;
}

/* The memory space a string names; -1, reported, when it names none. */
static int space_arg(TlCtx *c, const char *fn, tlStringRef space) {
  if (!tl_check_string(c, fn, "the memory space", space)) return -1;
  int sp = ir_memspace_lookup(space.data, space.length);
  if (sp < 0)
    tl_error(c, fn, "unknown memory space '%.*s'", (int)(space.length > 64 ? 64 : space.length), space.data);
  return sp;
}

tlType tlPointerTypeGet(tlType elem, tlStringRef space) {
  static const char fn[] = "tlPointerTypeGet";
  TlCtx *c = tl_enter(elem.context, elem.ptr, fn);
  tlType r = {NULL, 0};
  int sp = c ? space_arg(c, fn, space) : -1;
  if (sp >= 0) TL_PROTECTED(c, fn, r = tl_type(c, ir_type_ptr(c->ir, TYPE(elem), (IrMemSpace)sp)));
  return r;
}

bool tlTypeIsNull(tlType t) { return t.ptr == NULL; }
bool tlTypeEqual(tlType a, tlType b) { return a.ptr == b.ptr && a.context == b.context; }

/* Print through the callback with scratch memory of the core, protected. */
static void print_type_or_attr(TlCtx *c, const char *fn, const IrType *t, const IrAttr *a,
                               tlStringCallback cb, void *ud) {
  StrBuf sb;
  sb_init(&sb);
  if (t) ir_print_type(&sb, t);
  else ir_print_attr(&sb, a);
  cb(tlStringRefCreate(sb.data ? sb.data : "", sb.len), ud);
  sb_free(&sb);
}

void tlTypePrint(tlType t, tlStringCallback callback, void *userData) {
  TlCtx *c = tl_enter(t.context, t.ptr, "tlTypePrint");
  if (c && callback)
    TL_PROTECTED(c, "tlTypePrint", print_type_or_attr(c, "tlTypePrint", TYPE(t), NULL, callback, userData));
}

tlAttribute tlIntegerAttrGet(tlType type, int64_t value) {
  static const char fn[] = "tlIntegerAttrGet";
  TlCtx *c = tl_enter(type.context, type.ptr, fn);
  tlAttribute r = {NULL, 0};
  if (!c || !tl_require(c, fn, ir_type_is_intlike(TYPE(type)), "the type is not an integer or index type") ||
      !tl_require(c, fn, ir_int_fits(value, ir_type_bitwidth(TYPE(type))), "%lld does not fit in i%u",
                  (long long)value, ir_type_bitwidth(TYPE(type))))
    return r;
  TL_PROTECTED(c, fn, r = tl_attr(c, ir_attr_int(c->ir, value, TYPE(type))));
  return r;
}

tlAttribute tlFloatAttrGet(tlType type, double value) {
  static const char fn[] = "tlFloatAttrGet";
  TlCtx *c = tl_enter(type.context, type.ptr, fn);
  tlAttribute r = {NULL, 0};
  if (!c || !tl_require(c, fn, ir_type_is_float(TYPE(type)), "the type is not a float type")) return r;
  TL_PROTECTED(c, fn, r = tl_attr(c, ir_attr_float(c->ir, value, TYPE(type))));
  return r;
}

tlAttribute tlBoolAttrGet(tlContext ctx, bool value) {
  TlCtx *c = tl_enter(ctx.context, ctx.ptr, "tlBoolAttrGet");
  tlAttribute r = {NULL, 0};
  if (c) TL_PROTECTED(c, "tlBoolAttrGet", r = tl_attr(c, ir_attr_bool(c->ir, value)));
  return r;
}

tlAttribute tlStringAttrGet(tlContext ctx, tlStringRef s) {
  static const char fn[] = "tlStringAttrGet";
  TlCtx *c = tl_enter(ctx.context, ctx.ptr, fn);
  tlAttribute r = {NULL, 0};
  if (!c || !tl_check_string(c, fn, "the string", s)) return r;
  TL_PROTECTED(c, fn, r = tl_attr(c, ir_attr_str(c->ir, s.data ? s.data : "", s.length)));
  return r;
}

tlAttribute tlTypeAttrGet(tlType type) {
  TlCtx *c = tl_enter(type.context, type.ptr, "tlTypeAttrGet");
  tlAttribute r = {NULL, 0};
  if (c) TL_PROTECTED(c, "tlTypeAttrGet", r = tl_attr(c, ir_attr_type(c->ir, TYPE(type))));
  return r;
}

static const IrAttr *array_attr(TlCtx *c, intptr_t n, const tlAttribute *elements) {
  const IrAttr **es = ir_malloc((size_t)(n > 0 ? n : 1) * sizeof *es);
  for (intptr_t i = 0; i < n; i++) es[i] = ATTR(elements[i]);
  const IrAttr *a = ir_attr_array(c->ir, (uint32_t)n, es);
  ir_free(es);
  return a;
}

tlAttribute tlArrayAttrGet(tlContext ctx, intptr_t n, const tlAttribute *elements) {
  static const char fn[] = "tlArrayAttrGet";
  TlCtx *c = tl_enter(ctx.context, ctx.ptr, fn);
  tlAttribute r = {NULL, 0};
  if (!c || !tl_check_count(c, fn, "element", n, elements)) return r;
  for (intptr_t i = 0; i < n; i++) {
    char what[48];
    snprintf(what, sizeof what, "element #%lld", (long long)i);
    if (!tl_check_owner(c, fn, what, elements[i].context, elements[i].ptr)) return r;
  }
  TL_PROTECTED(c, fn, r = tl_attr(c, array_attr(c, n, elements)));
  return r;
}

static const IrAttr *dict_attr(TlCtx *c, intptr_t n, const tlNamedAttribute *entries) {
  IrNamedAttr *es = ir_malloc((size_t)(n > 0 ? n : 1) * sizeof *es);
  for (intptr_t i = 0; i < n; i++) {
    es[i].name = ir_intern(c->ir, entries[i].name.data, entries[i].name.length);
    es[i].attr = ATTR(entries[i].attribute);
  }
  const IrAttr *a = ir_attr_dict(c->ir, (uint32_t)n, es);
  ir_free(es);
  return a;
}

/* Names and attributes of named attributes for c; shared with tlOperationCreate. */
bool tl_check_named(TlCtx *c, const char *fn, intptr_t n, const tlNamedAttribute *entries) {
  for (intptr_t i = 0; i < n; i++) {
    char what[64];
    snprintf(what, sizeof what, "the name of attribute #%lld", (long long)i);
    if (!tl_check_string(c, fn, what, entries[i].name)) return false;
    if (!entries[i].name.length) {
      tl_error(c, fn, "%s is empty", what);
      return false;
    }
    snprintf(what, sizeof what, "attribute #%lld", (long long)i);
    if (!tl_check_owner(c, fn, what, entries[i].attribute.context, entries[i].attribute.ptr))
      return false;
  }
  return true;
}

tlAttribute tlDictionaryAttrGet(tlContext ctx, intptr_t n, const tlNamedAttribute *entries) {
  static const char fn[] = "tlDictionaryAttrGet";
  TlCtx *c = tl_enter(ctx.context, ctx.ptr, fn);
  tlAttribute r = {NULL, 0};
  if (!c || !tl_check_count(c, fn, "entry", n, entries) || !tl_check_named(c, fn, n, entries))
    return r;
  TL_PROTECTED(c, fn, r = tl_attr(c, dict_attr(c, n, entries)));
  return r;
}

tlNamedAttribute tlNamedAttributeGet(tlStringRef name, tlAttribute a) {
  tlNamedAttribute r = {name, a};
  return r;
}

bool tlAttributeIsNull(tlAttribute a) { return a.ptr == NULL; }

void tlAttributePrint(tlAttribute a, tlStringCallback callback, void *userData) {
  TlCtx *c = tl_enter(a.context, a.ptr, "tlAttributePrint");
  if (c && callback)
    TL_PROTECTED(c, "tlAttributePrint",
                 print_type_or_attr(c, "tlAttributePrint", NULL, ATTR(a), callback, userData));
}

/* }====================================================================== */
