/*
** capi.c -- the C embedding API (src/tilua.h) over the IR core. Parsing and
** kernel scripts run in a Lua state that each context creates on first use
** and that builds into the context's IR (a borrowed default context).
*/
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "../ir/ir.h"
#include "../lua/lbind.h"
#include "../passes/passes.h"
#include "../tilua.h"

typedef struct TlCtx {
  IrContext *ir;
  lua_State *L;
  tlDiagnosticHandler handler;
  void *ud;
} TlCtx;

#define CTX(c) ((TlCtx *)(c).ptr)
#define OP(o) ((IrOp *)(o).ptr)
#define TYPE(t) ((const IrType *)(t).ptr)
#define ATTR(a) ((const IrAttr *)(a).ptr)

static tlStringRef sref(const char *s) {
  tlStringRef r = {s ? s : "", s ? strlen(s) : 0};
  return r;
}

tlStringRef tlStringRefCreateFromCString(const char *s) { return sref(s); }

/* {======================================================================
** Context and diagnostics
** ======================================================================= */

static void trampoline(const IrDiag *d, void *ud) {
  TlCtx *c = ud;
  tlDiagnostic td = {d};
  if (c->handler) c->handler(td, c->ud);
  else ir_diag_format(d, stderr);
}

/* Deliver what is pending, then pass the result through. */
static tlLogicalResult done(TlCtx *c, bool ok) {
  ir_diag_flush(c->ir);
  tlLogicalResult r = {ok ? 1 : 0};
  return r;
}

tlContext tlContextCreate(void) {
  tlContext r = {NULL};
  TlCtx *c = calloc(1, sizeof *c);
  if (!c) return r;
  c->ir = ir_context_create();
  if (!c->ir) {
    free(c);
    return r;
  }
  ir_set_diag_handler(c->ir, trampoline, c);
  r.ptr = c;
  return r;
}

void tlContextDestroy(tlContext ctx) {
  TlCtx *c = CTX(ctx);
  if (!c) return;
  if (c->L) lua_close(c->L);
  ir_context_destroy(c->ir);
  free(c);
}

void tlContextAttachDiagnosticHandler(tlContext ctx, tlDiagnosticHandler handler, void *userData) {
  CTX(ctx)->handler = handler;
  CTX(ctx)->ud = userData;
}

void tlContextSetTargetSM(tlContext ctx, int sm) { ir_context_set_target_sm(CTX(ctx)->ir, sm); }

#define DIAG(d) ((const IrDiag *)(d).ptr)

tlDiagnosticSeverity tlDiagnosticGetSeverity(tlDiagnostic d) {
  return (tlDiagnosticSeverity)DIAG(d)->severity;
}
tlStringRef tlDiagnosticGetMessage(tlDiagnostic d) { return sref(DIAG(d)->message); }
tlStringRef tlDiagnosticGetFile(tlDiagnostic d) { return sref(DIAG(d)->loc.file); }
int tlDiagnosticGetLine(tlDiagnostic d) { return DIAG(d)->loc.line; }
int tlDiagnosticGetColumn(tlDiagnostic d) { return DIAG(d)->loc.col; }

intptr_t tlDiagnosticGetNumNotes(tlDiagnostic d) {
  intptr_t n = 0;
  for (const IrDiag *x = DIAG(d)->notes; x; x = x->next) n++;
  return n;
}

tlDiagnostic tlDiagnosticGetNote(tlDiagnostic d, intptr_t pos) {
  const IrDiag *x = DIAG(d)->notes;
  while (x && pos-- > 0) x = x->next;
  tlDiagnostic r = {x};
  return r;
}

void tlDiagnosticPrint(tlDiagnostic d, tlStringCallback callback, void *userData) {
  char *s = ir_diag_to_string(DIAG(d)->ctx, DIAG(d));
  callback(sref(s), userData);
}

/* }====================================================================== */

/* {======================================================================
** Types and attributes
** ======================================================================= */

static tlType mktype(const IrType *t) {
  tlType r = {t};
  return r;
}
static tlAttribute mkattr(const IrAttr *a) {
  tlAttribute r = {a};
  return r;
}

tlType tlIntegerTypeGet(tlContext ctx, unsigned width) {
  if (width < 1 || width > 64) return mktype(NULL);
  return mktype(ir_type_int(CTX(ctx)->ir, width));
}
tlType tlIndexTypeGet(tlContext ctx) { return mktype(ir_type_index(CTX(ctx)->ir)); }
tlType tlF16TypeGet(tlContext ctx) { return mktype(ir_type_float(CTX(ctx)->ir, IR_F16)); }
tlType tlBF16TypeGet(tlContext ctx) { return mktype(ir_type_float(CTX(ctx)->ir, IR_BF16)); }
tlType tlF32TypeGet(tlContext ctx) { return mktype(ir_type_float(CTX(ctx)->ir, IR_F32)); }
tlType tlF64TypeGet(tlContext ctx) { return mktype(ir_type_float(CTX(ctx)->ir, IR_F64)); }

static IrContext *type_ctx(const IrType *t) { return t->ctx; }

tlType tlPointerTypeGet(tlType elem, tlStringRef space) {
  int sp = ir_memspace_lookup(space.data, space.length);
  if (!TYPE(elem) || sp < 0) return mktype(NULL);
  return mktype(ir_type_ptr(type_ctx(TYPE(elem)), TYPE(elem), (IrMemSpace)sp));
}

bool tlTypeIsNull(tlType t) { return t.ptr == NULL; }
bool tlTypeEqual(tlType a, tlType b) { return a.ptr == b.ptr; }

static void print_buf(StrBuf *sb, tlStringCallback cb, void *ud) {
  cb(tlStringRefCreate(sb->data ? sb->data : "", sb->len), ud);
  sb_free(sb);
}

void tlTypePrint(tlType t, tlStringCallback callback, void *userData) {
  StrBuf sb;
  sb_init(&sb);
  ir_print_type(&sb, TYPE(t));
  print_buf(&sb, callback, userData);
}

tlAttribute tlIntegerAttrGet(tlType type, int64_t value) {
  if (!type.ptr || !ir_type_is_intlike(TYPE(type))) return mkattr(NULL);
  return mkattr(ir_attr_int(type_ctx(TYPE(type)), value, TYPE(type)));
}

tlAttribute tlFloatAttrGet(tlType type, double value) {
  if (!type.ptr || !ir_type_is_float(TYPE(type))) return mkattr(NULL);
  return mkattr(ir_attr_float(type_ctx(TYPE(type)), value, TYPE(type)));
}

tlAttribute tlBoolAttrGet(tlContext ctx, bool value) { return mkattr(ir_attr_bool(CTX(ctx)->ir, value)); }

tlAttribute tlStringAttrGet(tlContext ctx, tlStringRef s) {
  return mkattr(ir_attr_str(CTX(ctx)->ir, s.data, s.length));
}

tlAttribute tlTypeAttrGet(tlType type) {
  if (!type.ptr) return mkattr(NULL);
  return mkattr(ir_attr_type(type_ctx(TYPE(type)), TYPE(type)));
}

tlAttribute tlArrayAttrGet(tlContext ctx, intptr_t n, const tlAttribute *elements) {
  const IrAttr **es = malloc((size_t)(n > 0 ? n : 1) * sizeof *es);
  if (!es) return mkattr(NULL);
  for (intptr_t i = 0; i < n; i++) {
    if (!elements[i].ptr) {
      free(es);
      return mkattr(NULL);
    }
    es[i] = ATTR(elements[i]);
  }
  const IrAttr *a = ir_attr_array(CTX(ctx)->ir, (uint32_t)n, es);
  free(es);
  return mkattr(a);
}

tlAttribute tlDictionaryAttrGet(tlContext ctx, intptr_t n, const tlNamedAttribute *entries) {
  IrNamedAttr *es = malloc((size_t)(n > 0 ? n : 1) * sizeof *es);
  if (!es) return mkattr(NULL);
  for (intptr_t i = 0; i < n; i++) {
    if (!entries[i].attribute.ptr) {
      free(es);
      return mkattr(NULL);
    }
    es[i].name = ir_intern(CTX(ctx)->ir, entries[i].name.data, entries[i].name.length);
    es[i].attr = ATTR(entries[i].attribute);
  }
  const IrAttr *a = ir_attr_dict(CTX(ctx)->ir, (uint32_t)n, es);
  free(es);
  return mkattr(a);
}

tlNamedAttribute tlNamedAttributeGet(tlStringRef name, tlAttribute a) {
  tlNamedAttribute r = {name, a};
  return r;
}

bool tlAttributeIsNull(tlAttribute a) { return a.ptr == NULL; }

void tlAttributePrint(tlAttribute a, tlStringCallback callback, void *userData) {
  StrBuf sb;
  sb_init(&sb);
  ir_print_attr(&sb, ATTR(a));
  print_buf(&sb, callback, userData);
}

/* }====================================================================== */

/* {======================================================================
** Modules
** ======================================================================= */

static tlModule mkmodule(IrOp *op) {
  tlModule r = {op};
  return r;
}

tlModule tlModuleCreateEmpty(tlContext ctx) {
  IrOp *m = ir_op_create(CTX(ctx)->ir, OP_MODULE, ir_loc_unknown(), 0, NULL, 0, NULL, 1);
  ir_region_ensure_block(CTX(ctx)->ir, &m->regions[0]);
  return mkmodule(m);
}

/* The context's Lua state, created on first use, with its default IR context
** borrowed from ours. */
static lua_State *ctx_lua(TlCtx *c) {
  if (c->L) return c->L;
  lua_State *L = luaL_newstate();
  if (!L) return NULL;
  luaL_openlibs(L);
  /* the C half (its metatables), then the default context, then the Lua half:
  ** the library's types (tl.f32, ...) are made in the default context */
  luaL_requiref(L, "tilua.core", luaopen_tilua_core, 0);
  lua_pop(L, 1);
  lb_push_context(L, c->ir, 0);
  lb_set_default_context(L, -1);
  lua_pop(L, 1);
  luaL_requiref(L, "tilua", luaopen_tilua, 0);
  lua_pop(L, 1);
  c->L = L;
  return L;
}

/* Report the message on top of the Lua stack as an error diagnostic; pops it. */
static void lua_failure(TlCtx *c, lua_State *L) {
  const char *msg = lua_tostring(L, -1);
  ir_error(c->ir, ir_loc_unknown(), "%s", msg ? msg : "error in the Lua layer");
  lua_pop(L, 1);
}

static int parse_in_lua(lua_State *L) {
  /* text, file -> module op | nil, message, info */
  lua_getglobal(L, "require");
  lua_pushliteral(L, "tilua.parser");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "parse");
  lua_pushvalue(L, 1);
  lua_createtable(L, 0, 1);
  lua_pushvalue(L, 2);
  lua_setfield(L, -2, "file");
  lua_call(L, 2, 3);
  return 3;
}

tlModule tlModuleCreateParse(tlContext ctx, tlStringRef text, tlStringRef filename) {
  TlCtx *c = CTX(ctx);
  lua_State *L = ctx_lua(c);
  if (!L) {
    ir_error(c->ir, ir_loc_unknown(), "out of memory");
    done(c, false);
    return mkmodule(NULL);
  }
  lua_pushcfunction(L, parse_in_lua);
  lua_pushlstring(L, text.data, text.length);
  lua_pushlstring(L, filename.data, filename.length);
  if (lua_pcall(L, 2, 3, 0) != LUA_OK) {
    lua_failure(c, L);
    done(c, false);
    return mkmodule(NULL);
  }
  IrOp *m = lua_isnil(L, -3) ? NULL : lb_test_object(L, -3, LB_OP);
  if (!m) {
    /* info = {line=, col=, message=} gives the location */
    IrLoc loc = ir_loc_unknown();
    const char *msg = lua_tostring(L, -2);
    if (lua_istable(L, -1)) {
      lua_getfield(L, -1, "line");
      lua_getfield(L, -2, "col");
      lua_getfield(L, -3, "message");
      char *file = malloc(filename.length + 1);
      if (file) {
        memcpy(file, filename.data, filename.length);
        file[filename.length] = 0;
        loc = ir_loc(c->ir, file, (int)lua_tointeger(L, -3), (int)lua_tointeger(L, -2));
        free(file);
      }
      if (lua_isstring(L, -1)) msg = lua_tostring(L, -1);
      ir_error(c->ir, loc, "%s", msg ? msg : "parse error");
      lua_pop(L, 3);
    } else {
      ir_error(c->ir, loc, "%s", msg ? msg : "parse error");
    }
  }
  lua_pop(L, 3);
  done(c, m != NULL);
  return mkmodule(m);
}

tlModule tlModuleCreateFromScript(tlContext ctx, tlStringRef script, tlStringRef chunkname) {
  TlCtx *c = CTX(ctx);
  lua_State *L = ctx_lua(c);
  if (!L) return mkmodule(NULL);
  lua_pushlstring(L, chunkname.data, chunkname.length);
  const char *name = lua_pushfstring(L, "=%s", lua_tostring(L, -1));
  int status = luaL_loadbuffer(L, script.data, script.length, name);
  lua_remove(L, -2);
  lua_remove(L, -2);
  if (status == LUA_OK) {
    /* a fresh module for this script */
    lua_getglobal(L, "require");
    lua_pushliteral(L, "tilua");
    lua_call(L, 1, 1);
    lua_getfield(L, -1, "new_module");
    lua_call(L, 0, 0);
    lua_pop(L, 1);
    status = lua_pcall(L, 0, 0, 0);
  }
  if (status != LUA_OK) {
    lua_failure(c, L);
    done(c, false);
    return mkmodule(NULL);
  }
  lua_getglobal(L, "require");
  lua_pushliteral(L, "tilua");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "module");
  lua_call(L, 0, 1);
  IrOp *m = lb_test_object(L, -1, LB_OP);
  lua_pop(L, 2);
  done(c, m != NULL);
  return mkmodule(m);
}

bool tlModuleIsNull(tlModule m) { return m.ptr == NULL; }

tlOperation tlModuleGetOperation(tlModule m) {
  tlOperation r = {m.ptr};
  return r;
}

tlBlock tlModuleGetBody(tlModule m) {
  tlBlock r = {OP(m)->regions[0].first};
  return r;
}

tlLogicalResult tlModuleVerify(tlModule m) {
  IrOp *op = OP(m);
  IrResult r = ir_verify(op);
  ir_diag_flush(ir_op_context(op));
  tlLogicalResult lr = {r == IR_OK};
  return lr;
}

tlLogicalResult tlModuleRunPipeline(tlModule m, tlStringRef pipeline) {
  IrOp *op = OP(m);
  IrContext *ctx = ir_op_context(op);
  char *spec = malloc(pipeline.length + 1);
  if (!spec) return (tlLogicalResult){0};
  memcpy(spec, pipeline.data, pipeline.length);
  spec[pipeline.length] = 0;
  IrPipeline p;
  IrResult r = ir_pipeline_parse(ctx, spec, &p);
  free(spec);
  if (r == IR_OK) r = ir_pipeline_run(&p, op, NULL);
  ir_diag_flush(ctx);
  tlLogicalResult lr = {r == IR_OK};
  return lr;
}

void tlModulePrint(tlModule m, tlStringCallback callback, void *userData) {
  tlOperationPrint(tlModuleGetOperation(m), callback, userData);
}

/* }====================================================================== */

/* {======================================================================
** Building
** ======================================================================= */

static tlOperation mkop(IrOp *op) {
  tlOperation r = {op};
  return r;
}

tlOperation tlKernelCreate(tlModule m, tlStringRef name, intptr_t nParams, const tlType *paramTypes,
                           const tlStringRef *paramNames, unsigned blockX, unsigned blockY,
                           unsigned blockZ) {
  IrOp *mod = OP(m);
  IrContext *ctx = ir_op_context(mod);
  IrOp *k = ir_op_create(ctx, OP_TILE_KERNEL, ir_loc_unknown(), 0, NULL, 0, NULL, 1);
  ir_op_set_attr(k, "sym_name", ir_attr_str(ctx, name.data, name.length));
  int64_t block[3] = {blockX ? blockX : 1, blockY ? blockY : 1, blockZ ? blockZ : 1};
  IrNamedAttr spec[] = {{ir_intern_cstr(ctx, "block"), ir_attr_int_array(ctx, 3, block)}};
  ir_op_set_attr(k, "kernel_spec", ir_attr_dict(ctx, 1, spec));
  IrBlock *body = ir_region_ensure_block(ctx, &k->regions[0]);
  const IrAttr **names = malloc((size_t)(nParams > 0 ? nParams : 1) * sizeof *names);
  if (!names) return mkop(NULL);
  for (intptr_t i = 0; i < nParams; i++) {
    ir_block_add_arg(ctx, body, TYPE(paramTypes[i]));
    char tmp[32];
    snprintf(tmp, sizeof tmp, "arg%d", (int)i);
    names[i] = paramNames ? ir_attr_str(ctx, paramNames[i].data, paramNames[i].length)
                          : ir_attr_cstr(ctx, tmp);
  }
  ir_op_set_attr(k, "arg_names", ir_attr_array(ctx, (uint32_t)nParams, names));
  free(names);
  ir_block_append(mod->regions[0].first, k);
  return mkop(k);
}

tlBlock tlOperationGetRegionBlock(tlOperation op, intptr_t region, intptr_t nArgs, const tlType *argTypes) {
  IrOp *o = OP(op);
  tlBlock r = {NULL};
  if (region < 0 || (uint32_t)region >= o->nregions) return r;
  IrRegion *reg = &o->regions[region];
  if (!reg->first) {
    IrContext *ctx = ir_op_context(o);
    IrBlock *b = ir_block_create(ctx);
    for (intptr_t i = 0; i < nArgs; i++) ir_block_add_arg(ctx, b, TYPE(argTypes[i]));
    ir_region_append_block(reg, b);
  }
  r.ptr = reg->first;
  return r;
}

intptr_t tlBlockGetNumArguments(tlBlock b) { return ((IrBlock *)b.ptr)->nargs; }

tlValue tlBlockGetArgument(tlBlock b, intptr_t pos) {
  IrBlock *blk = b.ptr;
  tlValue r = {pos >= 0 && (uint32_t)pos < blk->nargs ? blk->args[pos] : NULL};
  return r;
}

tlOperation tlOperationCreate(tlBlock block, tlStringRef name, intptr_t nOperands,
                              const tlValue *operands, intptr_t nResults, const tlType *resultTypes,
                              intptr_t nAttributes, const tlNamedAttribute *attributes, intptr_t nRegions) {
  IrBlock *b = block.ptr;
  IrOp *parent = ir_block_parent_op(b);
  IrContext *ctx = ir_op_context(parent);
  int kind = ir_op_lookup(name.data, name.length);
  if (kind < 0) {
    ir_error(ctx, ir_loc_unknown(), "unknown operation '%.*s'", (int)name.length, name.data);
    ir_diag_flush(ctx);
    return mkop(NULL);
  }
  IrValue **opds = malloc((size_t)(nOperands > 0 ? nOperands : 1) * sizeof *opds);
  const IrType **tys = malloc((size_t)(nResults > 0 ? nResults : 1) * sizeof *tys);
  if (!opds || !tys) {
    free(opds);
    free(tys);
    return mkop(NULL);
  }
  for (intptr_t i = 0; i < nOperands; i++) opds[i] = operands[i].ptr;
  for (intptr_t i = 0; i < nResults; i++) tys[i] = TYPE(resultTypes[i]);
  IrOp *op = ir_op_create(ctx, (IrOpKind)kind, ir_loc_unknown(), (uint32_t)nOperands, opds,
                          (uint32_t)nResults, tys, (uint32_t)nRegions);
  free(opds);
  free(tys);
  for (intptr_t i = 0; i < nAttributes; i++) {
    char *n = malloc(attributes[i].name.length + 1);
    if (!n) return mkop(NULL);
    memcpy(n, attributes[i].name.data, attributes[i].name.length);
    n[attributes[i].name.length] = 0;
    ir_op_set_attr(op, n, ATTR(attributes[i].attribute));
    free(n);
  }
  bool ok = ir_verify_signature(op) == IR_OK;
  ir_diag_flush(ctx);
  if (!ok) return mkop(NULL);
  ir_block_append(b, op);
  return mkop(op);
}

bool tlOperationIsNull(tlOperation op) { return op.ptr == NULL; }

tlValue tlOperationGetResult(tlOperation op, intptr_t pos) {
  IrOp *o = OP(op);
  tlValue r = {pos >= 0 && (uint32_t)pos < o->nresults ? &o->results[pos] : NULL};
  return r;
}

tlLogicalResult tlOperationVerify(tlOperation op) {
  IrResult r = ir_verify(OP(op));
  ir_diag_flush(ir_op_context(OP(op)));
  tlLogicalResult lr = {r == IR_OK};
  return lr;
}

void tlOperationPrint(tlOperation op, tlStringCallback callback, void *userData) {
  StrBuf sb;
  sb_init(&sb);
  ir_print_op(&sb, OP(op), NULL);
  print_buf(&sb, callback, userData);
}

tlType tlValueGetType(tlValue v) { return mktype(((IrValue *)v.ptr)->type); }

/* }====================================================================== */
