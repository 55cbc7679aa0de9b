/*
** l_ir.c -- Lua bindings of the IR core: contexts, types, attributes, ops,
** regions, blocks and values (the `tilua.core` functions and the methods).
** Indices in the Lua API are 1-based: op:result(1) is the first result.
*/
#include <stdlib.h>
#include <string.h>

#include "../dialects/dialects.h"
#include "lbind.h"

/* {======================================================================
** Contexts and object userdata
** ======================================================================= */

static const char *const LIBCHUNKS = "tilua.libchunks";
static const char *const DEFAULT_CTX = "tilua.default_context";

LbContext *lb_push_context(lua_State *L, IrContext *ctx, int owned) {
  LbContext *c = lua_newuserdatauv(L, sizeof *c, 0);
  c->ctx = NULL; /* empty until the resource is attached */
  c->owned = 0;
  luaL_setmetatable(L, LB_CONTEXT);
  c->ctx = ctx;
  c->owned = owned;
  return c;
}

/* After a failed allocation of the core in this protected call the IR may be half changed. */
static void check_memory(lua_State *L) {
  if (ir_protect_failed()) luaL_error(L, "not enough memory (an allocation of the tilua core failed)");
}

LbContext *lb_check_context(lua_State *L, int idx) {
  check_memory(L);
  LbContext *c = luaL_checkudata(L, idx, LB_CONTEXT);
  if (!c->ctx) luaL_error(L, "attempt to use a closed tilua context");
  return c;
}

LbContext *lb_default_context(lua_State *L) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, DEFAULT_CTX) == LUA_TUSERDATA) {
    LbContext *c = lua_touserdata(L, -1);
    if (c->ctx) return c;
  }
  lua_pop(L, 1);
  IrContext *ctx = ir_context_create();
  if (!ctx) luaL_error(L, "out of memory");
  LbContext *c = lb_push_context(L, ctx, 1);
  lua_pushvalue(L, -1);
  lua_setfield(L, LUA_REGISTRYINDEX, DEFAULT_CTX);
  return c;
}

void lb_set_default_context(lua_State *L, int idx) {
  lua_pushvalue(L, idx);
  lua_setfield(L, LUA_REGISTRYINDEX, DEFAULT_CTX);
}

void lb_push_object(lua_State *L, const char *mt, void *ptr, int ctx_idx) {
  ctx_idx = lua_absindex(L, ctx_idx);
  LbObject *o = lua_newuserdatauv(L, sizeof *o, 1);
  o->owner = lua_touserdata(L, ctx_idx);
  o->ptr = ptr;
  luaL_setmetatable(L, mt);
  lua_pushvalue(L, ctx_idx);
  lua_setiuservalue(L, -2, 1);
}

/* The op an object lives in (itself, the op of a region, the parent op of a
** block, the defining op of a value), to refuse objects of erased ops. */
static const IrOp *host_op(const char *mt, void *ptr) {
  if (mt == (const char *)LB_OP || !strcmp(mt, LB_OP)) return ptr;
  if (!strcmp(mt, LB_VALUE)) {
    const IrValue *v = ptr;
    return v->def ? v->def : v->block ? ir_block_parent_op(v->block) : NULL;
  }
  if (!strcmp(mt, LB_BLOCK)) return ir_block_parent_op(ptr);
  if (!strcmp(mt, LB_REGION)) return ((const IrRegion *)ptr)->parent;
  return NULL;
}

static void check_not_erased(lua_State *L, const char *mt, void *ptr) {
  const IrOp *h = host_op(mt, ptr);
  if (!h || !h->erased) return;
  if (h == ptr) lb_error(L, "attempt to use an erased op ('%s')", ir_op_name(h));
  lb_error(L, "attempt to use a %s of an erased op ('%s')", mt + 6, ir_op_name(h));
}


void *lb_test_object(lua_State *L, int idx, const char *mt) {
  check_memory(L);
  LbObject *o = luaL_testudata(L, idx, mt);
  if (!o) return NULL;
  if (!o->owner->ctx) luaL_error(L, "attempt to use an object of a closed tilua context");
  check_not_erased(L, mt, o->ptr);
  return o->ptr;
}

void *lb_check_object(lua_State *L, int idx, const char *mt) {
  check_memory(L);
  LbObject *o = luaL_checkudata(L, idx, mt);
  if (!o->owner->ctx) luaL_error(L, "attempt to use an object of a closed tilua context");
  check_not_erased(L, mt, o->ptr);
  return o->ptr;
}

void lb_push_owner(lua_State *L, int idx) { lua_getiuservalue(L, idx, 1); }
LbContext *lb_owner(lua_State *L, int idx) { return ((LbObject *)lua_touserdata(L, idx))->owner; }

/* Push ptr wrapped with the same owner as the object at idx (nil for NULL). */
static void push_like(lua_State *L, const char *mt, void *ptr, int idx) {
  if (!ptr) {
    lua_pushnil(L);
    return;
  }
  idx = lua_absindex(L, idx);
  lb_push_owner(L, idx);
  lb_push_object(L, mt, ptr, -1);
  lua_remove(L, -2);
}

/* The IrContext of an object argument, checking it matches `ctx` when given. */
static IrContext *ctx_of(lua_State *L, int idx) { return lb_owner(L, idx)->ctx; }

/* Objects a and b must belong to one context: IR never points into another's arena. */
static void same_context(lua_State *L, int a, int b, const char *what) {
  if (ctx_of(L, a) != ctx_of(L, b)) lb_error(L, "%s: the objects belong to different contexts", what);
}

/* Moving op to a place inside itself would cut it loose from the IR. */
static void not_inside(lua_State *L, const IrOp *op, const IrOp *place, const char *what) {
  if (place && ir_op_is_ancestor(op, place)) lb_error(L, "%s: the place is inside the op itself", what);
}

/* }====================================================================== */

/* {======================================================================
** Locations and errors
** ======================================================================= */

void lb_mark_library_chunk(lua_State *L, const char *chunkname) {
  if (lua_getfield(L, LUA_REGISTRYINDEX, LIBCHUNKS) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, LIBCHUNKS);
  }
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, chunkname);
  lua_pop(L, 1);
}

static int is_library_chunk(lua_State *L, const char *source) {
  int lib = 0;
  if (lua_getfield(L, LUA_REGISTRYINDEX, LIBCHUNKS) == LUA_TTABLE)
    lib = lua_getfield(L, -1, source) != LUA_TNIL, lua_pop(L, 1);
  lua_pop(L, 1);
  return lib;
}

/* Find the innermost user frame; fills file (a Lua-owned string) and line. */
static int user_frame(lua_State *L, const char **file, int *line) {
  lua_Debug ar;
  for (int level = 1; lua_getstack(L, level, &ar); level++) {
    if (!lua_getinfo(L, "Sl", &ar)) continue;
    if (ar.currentline <= 0 || ar.what[0] == 'C') continue;
    if (is_library_chunk(L, ar.source)) continue;
    *file = ar.source[0] == '@' || ar.source[0] == '=' ? ar.source + 1 : ar.short_src;
    *line = ar.currentline;
    return 1;
  }
  return 0;
}

IrLoc lb_user_loc(lua_State *L, IrContext *ctx) {
  const char *file;
  int line;
  if (user_frame(L, &file, &line)) return ir_loc(ctx, file, line, 0);
  return ir_loc_unknown();
}

int lb_error(lua_State *L, const char *fmt, ...) {
  const char *file;
  int line;
  va_list ap;
  char msg[1024]; /* C's formats (%lld, %zu, ...), which lua_pushvfstring lacks */
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (user_frame(L, &file, &line)) lua_pushfstring(L, "%s:%d: %s", file, line, msg);
  else lua_pushstring(L, msg);
  return lua_error(L);
}

static void push_loc_prefix(luaL_Buffer *b, IrLoc loc) {
  char tmp[64];
  if (loc.file) {
    luaL_addstring(b, loc.file);
    luaL_addchar(b, ':');
  }
  if (loc.line) {
    snprintf(tmp, sizeof tmp, loc.col ? "%d:%d:" : "%d:", loc.line, loc.col);
    luaL_addstring(b, tmp);
  }
  if (loc.file || loc.line) luaL_addchar(b, ' ');
}

static const char *sev_name(IrSeverity s) {
  return s == IR_SEV_ERROR ? "error" : s == IR_SEV_WARNING ? "warning" : s == IR_SEV_NOTE ? "note" : "remark";
}

static void format_pending(lua_State *L, IrContext *ctx) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  int first = 1;
  for (IrDiag *d = ir_diag_pending(ctx); d; d = d->next) {
    if (!first) luaL_addchar(&b, '\n');
    push_loc_prefix(&b, d->loc);
    if (!first || d->severity != IR_SEV_ERROR) {
      luaL_addstring(&b, sev_name(d->severity));
      luaL_addstring(&b, ": ");
    }
    luaL_addstring(&b, d->message);
    for (IrDiag *n = d->notes; n; n = n->next) {
      luaL_addchar(&b, '\n');
      push_loc_prefix(&b, n->loc);
      luaL_addstring(&b, "note: ");
      luaL_addstring(&b, n->message);
    }
    first = 0;
  }
  luaL_pushresult(&b);
}

void lb_push_diagnostics(lua_State *L, IrContext *ctx) {
  format_pending(L, ctx);
  ir_diag_clear(ctx);
}

void lb_push_diagnostics_and_list(lua_State *L, IrContext *ctx) {
  format_pending(L, ctx);
  lb_push_diagnostic_list(L, ctx);
}

static void push_diag_table(lua_State *L, const IrDiag *d) {
  lua_createtable(L, 0, 6);
  lua_pushstring(L, sev_name(d->severity));
  lua_setfield(L, -2, "severity");
  if (d->loc.file) {
    lua_pushstring(L, d->loc.file);
    lua_setfield(L, -2, "file");
  }
  lua_pushinteger(L, d->loc.line);
  lua_setfield(L, -2, "line");
  lua_pushinteger(L, d->loc.col);
  lua_setfield(L, -2, "col");
  lua_pushstring(L, d->message);
  lua_setfield(L, -2, "message");
  lua_newtable(L);
  int i = 1;
  for (const IrDiag *n = d->notes; n; n = n->next) {
    push_diag_table(L, n);
    lua_rawseti(L, -2, i++);
  }
  lua_setfield(L, -2, "notes");
}

void lb_push_diagnostic_list(lua_State *L, IrContext *ctx) {
  lua_newtable(L);
  int i = 1;
  for (IrDiag *d = ir_diag_pending(ctx); d; d = d->next) {
    push_diag_table(L, d);
    lua_rawseti(L, -2, i++);
  }
  ir_diag_clear(ctx);
}

/* }====================================================================== */

/* {======================================================================
** Context methods
** ======================================================================= */

static int ctx_close(lua_State *L) {
  LbContext *c = luaL_checkudata(L, 1, LB_CONTEXT);
  if (c->ctx && c->owned) ir_context_destroy(c->ctx);
  c->ctx = NULL;
  return 0;
}

static int ctx_tostring(lua_State *L) {
  LbContext *c = luaL_checkudata(L, 1, LB_CONTEXT);
  lua_pushfstring(L, c->ctx ? "tilua.Context (%p)" : "tilua.Context (closed)", (void *)c->ctx);
  return 1;
}

static IrLoc opt_loc(lua_State *L, int idx, IrContext *ctx);

/* ctx:module([loc]) -> a new, detached module op. */
static int ctx_module(lua_State *L) {
  LbContext *c = lb_check_context(L, 1);
  IrOp *m = ir_op_create(c->ctx, OP_MODULE, opt_loc(L, 2, c->ctx), 0, NULL, 0, NULL, 1);
  ir_region_ensure_block(c->ctx, &m->regions[0]);
  lb_push_object(L, LB_OP, m, 1);
  return 1;
}

static int ctx_target_sm(lua_State *L) {
  LbContext *c = lb_check_context(L, 1);
  if (!lua_isnoneornil(L, 2)) ir_context_set_target_sm(c->ctx, (int)luaL_checkinteger(L, 2));
  lua_pushinteger(L, ir_context_target_sm(c->ctx));
  return 1;
}

static int ctx_diagnostics(lua_State *L) {
  LbContext *c = lb_check_context(L, 1);
  lb_push_diagnostic_list(L, c->ctx);
  return 1;
}

static int core_context(lua_State *L) {
  IrContext *ctx = ir_context_create();
  if (!ctx) return luaL_error(L, "out of memory");
  lb_push_context(L, ctx, 1);
  return 1;
}

static int core_default_context(lua_State *L) {
  if (!lua_isnoneornil(L, 1)) {
    lb_check_context(L, 1);
    lb_set_default_context(L, 1);
  }
  lb_default_context(L);
  return 1;
}

/* The context argument at idx, or the default one; pushes it and returns its index. */
static LbContext *ctx_arg(lua_State *L, int idx, int *pushed_at) {
  if (lua_isnoneornil(L, idx)) {
    LbContext *c = lb_default_context(L);
    *pushed_at = lua_gettop(L);
    return c;
  }
  LbContext *c = lb_check_context(L, idx);
  lua_pushvalue(L, idx);
  *pushed_at = lua_gettop(L);
  return c;
}

/* }====================================================================== */

/* {======================================================================
** Types
** ======================================================================= */

static void push_type(lua_State *L, const IrType *t, int ctx_idx) {
  lb_push_object(L, LB_TYPE, (void *)t, ctx_idx);
}

/* core.type_int(width [, ctx]) */
static int core_type_int(lua_State *L) {
  lua_Integer w = luaL_checkinteger(L, 1);
  int ci;
  LbContext *c = ctx_arg(L, 2, &ci);
  if (w < 1 || w > 64) return lb_error(L, "integer width must be in [1, 64], got %d", (int)w);
  push_type(L, ir_type_int(c->ctx, (uint32_t)w), ci);
  return 1;
}

static int core_type_float(lua_State *L) {
  static const char *const names[] = {"f16", "bf16", "f32", "f64", NULL};
  int k = luaL_checkoption(L, 1, NULL, names);
  int ci;
  LbContext *c = ctx_arg(L, 2, &ci);
  push_type(L, ir_type_float(c->ctx, (IrFloatKind)k), ci);
  return 1;
}

static int core_type_index(lua_State *L) {
  int ci;
  LbContext *c = ctx_arg(L, 1, &ci);
  push_type(L, ir_type_index(c->ctx), ci);
  return 1;
}

static int core_type_none(lua_State *L) {
  int ci;
  LbContext *c = ctx_arg(L, 1, &ci);
  push_type(L, ir_type_none(c->ctx), ci);
  return 1;
}

static const IrType *check_type_of(lua_State *L, int idx, IrContext *ctx) {
  const IrType *t = lb_check_type(L, idx);
  if (ctx && ctx_of(L, idx) != ctx) lb_error(L, "type belongs to another context");
  return t;
}

static IrMemSpace check_space(lua_State *L, int idx, IrMemSpace dflt) {
  if (lua_isnoneornil(L, idx)) return dflt;
  size_t n;
  const char *s = luaL_checklstring(L, idx, &n);
  int sp = ir_memspace_lookup(s, n);
  if (sp < 0) lb_error(L, "unknown memory space '%s'", s);
  return (IrMemSpace)sp;
}

static uint32_t check_shape(lua_State *L, int idx, int64_t *shape) {
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_Integer n = luaL_len(L, idx);
  if (n > 16) lb_error(L, "shapes have at most 16 dimensions");
  for (lua_Integer i = 1; i <= n; i++) {
    lua_geti(L, idx, i);
    if (lua_type(L, -1) == LUA_TSTRING && strcmp(lua_tostring(L, -1), "?") == 0) {
      shape[i - 1] = IR_DYNAMIC;
    } else {
      int isnum;
      lua_Integer v = lua_tointegerx(L, -1, &isnum);
      if (!isnum || v < 0 || v >= (lua_Integer)1 << 48)
        lb_error(L, "shape extents are integers in [0, 2^48) or '?'");
      shape[i - 1] = v;
    }
    lua_pop(L, 1);
  }
  return (uint32_t)n;
}

/* core.type_ptr(elem, space) */
static int core_type_ptr(lua_State *L) {
  const IrType *elem = lb_check_type(L, 1);
  IrContext *ctx = ctx_of(L, 1);
  IrMemSpace sp = check_space(L, 2, IR_MS_GLOBAL);
  lb_push_owner(L, 1);
  push_type(L, ir_type_ptr(ctx, elem, sp), -1);
  return 1;
}

/* core.type_vector(elem, shape) */
static int core_type_vector(lua_State *L) {
  const IrType *elem = lb_check_type(L, 1);
  int64_t shape[16];
  uint32_t n = check_shape(L, 2, shape);
  if (n == 0) return lb_error(L, "a vector needs at least one dimension");
  lb_push_owner(L, 1);
  push_type(L, ir_type_vector(ctx_of(L, 1), elem, n, shape), -1);
  return 1;
}

/* core.type_memref(elem, shape, space, swizzle) */
static int core_type_memref(lua_State *L) {
  const IrType *elem = lb_check_type(L, 1);
  int64_t shape[16];
  uint32_t n = check_shape(L, 2, shape);
  IrMemSpace sp = check_space(L, 3, IR_MS_GLOBAL);
  lua_Integer sw = luaL_optinteger(L, 4, 0);
  if (sw != 0 && sw != 32 && sw != 64 && sw != 128)
    return lb_error(L, "swizzle must be 0, 32, 64 or 128 (bytes), got %d", (int)sw);
  lb_push_owner(L, 1);
  push_type(L, ir_type_memref(ctx_of(L, 1), elem, n, shape, sp, (uint32_t)sw), -1);
  return 1;
}

/* core.type_tile(elem, shape, space) */
static int core_type_tile(lua_State *L) {
  const IrType *elem = lb_check_type(L, 1);
  int64_t shape[16];
  uint32_t n = check_shape(L, 2, shape);
  IrMemSpace sp = check_space(L, 3, IR_MS_RMEM);
  lb_push_owner(L, 1);
  push_type(L, ir_type_tile(ctx_of(L, 1), elem, n, shape, sp), -1);
  return 1;
}

/* core.type_dialect(name, {params...} [, ctx [, noraise]]): with noraise, bad
** input returns nil, message instead of raising. */
static int core_type_dialect(lua_State *L) {
  size_t len;
  const char *name = luaL_checklstring(L, 1, &len);
  int ci;
  LbContext *c = ctx_arg(L, 3, &ci);
  int noraise = lua_toboolean(L, 4);
  int dty = ir_dialect_type_lookup(name, len);
  if (dty < 0) {
    if (!noraise) return lb_error(L, "unknown dialect type '!%s'", name);
    lua_pushnil(L);
    lua_pushfstring(L, "unknown dialect type '!%s'", name);
    return 2;
  }
  const IrAttr *params[32];
  uint32_t n = 0;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer np = luaL_len(L, 2);
    if (np > 32) return lb_error(L, "too many type parameters");
    for (lua_Integer i = 1; i <= np; i++) {
      lua_geti(L, 2, i);
      params[n++] = lb_to_attr(L, c->ctx, -1);
      lua_pop(L, 1);
    }
  }
  const char *err = NULL;
  const IrType *t = ir_type_dialect(c->ctx, dty, n, params, &err);
  if (!t) {
    if (!noraise) return lb_error(L, "!%s: %s", name, err);
    lua_pushnil(L);
    lua_pushfstring(L, "!%s: %s", name, err);
    return 2;
  }
  push_type(L, t, ci);
  return 1;
}

static const char *const type_kind_names[] = {"none", "int", "float", "index", "ptr",
                                              "vector", "memref", "tile", "dialect"};

/* t:info() -> {kind=, width=, elem=, space=, shape=, swizzle=, name=, params=} */
static int type_info(lua_State *L) {
  const IrType *t = lb_check_type(L, 1);
  lua_createtable(L, 0, 8);
  lua_pushstring(L, type_kind_names[t->kind]);
  lua_setfield(L, -2, "kind");
  if (t->kind == IR_TY_INT || t->kind == IR_TY_FLOAT || t->kind == IR_TY_INDEX) {
    lua_pushinteger(L, ir_type_bitwidth(t));
    lua_setfield(L, -2, "width");
  }
  if (t->elem) {
    push_like(L, LB_TYPE, (void *)t->elem, 1);
    lua_setfield(L, -2, "elem");
  }
  if (t->kind == IR_TY_PTR || t->kind == IR_TY_MEMREF || t->kind == IR_TY_TILE) {
    lua_pushstring(L, ir_memspace_name(t->space));
    lua_setfield(L, -2, "space");
  }
  if (t->rank) {
    lua_createtable(L, (int)t->rank, 0);
    for (uint32_t i = 0; i < t->rank; i++) {
      if (t->shape[i] == IR_DYNAMIC) lua_pushliteral(L, "?");
      else lua_pushinteger(L, t->shape[i]);
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "shape");
  }
  if (t->swizzle) {
    lua_pushinteger(L, t->swizzle);
    lua_setfield(L, -2, "swizzle");
  }
  if (t->kind == IR_TY_FLOAT) {
    static const char *const fn[] = {"f16", "bf16", "f32", "f64"};
    lua_pushstring(L, fn[t->fkind]);
    lua_setfield(L, -2, "name");
  }
  if (t->kind == IR_TY_DIALECT) {
    lua_pushstring(L, ir_dialect_type_name(t->dialect_type));
    lua_setfield(L, -2, "name");
    lua_createtable(L, (int)t->nparams, 0);
    for (uint32_t i = 0; i < t->nparams; i++) {
      lb_push_owner(L, 1);
      lb_push_attr(L, t->params[i], -1);
      lua_remove(L, -2);
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "params");
  }
  return 1;
}

static int type_kind(lua_State *L) {
  lua_pushstring(L, type_kind_names[lb_check_type(L, 1)->kind]);
  return 1;
}

static int type_tostring(lua_State *L) {
  char *s = ir_type_to_string(lb_check_type(L, 1));
  lua_pushstring(L, s);
  ir_free(s);
  return 1;
}

static int object_eq(lua_State *L) {
  LbObject *a = lua_touserdata(L, 1), *b = lua_touserdata(L, 2);
  lua_pushboolean(L, a && b && a->ptr == b->ptr);
  return 1;
}

/* A stable identity for use as a table key. */
static int object_id(lua_State *L) {
  LbObject *a = lua_touserdata(L, 1);
  luaL_argcheck(L, a != NULL, 1, "tilua object expected");
  lua_pushlightuserdata(L, a->ptr);
  return 1;
}

/* }====================================================================== */

/* {======================================================================
** Attributes
** ======================================================================= */

static int is_sequence(lua_State *L, int idx) {
  lua_Integer n = luaL_len(L, idx), count = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    if (!lua_isinteger(L, -1)) {
      lua_pop(L, 1);
      return 0;
    }
    count++;
  }
  return count == n;
}

/* Tables nest at most this deep in an attribute (the printer and the parser
** handle any depth; this bounds the C stack the conversion uses). */
#define LB_ATTR_MAX_DEPTH 256

/* An attribute or type userdata of the context ctx (another context's is an error). */
static const void *attr_object(lua_State *L, IrContext *ctx, int idx, const char *mt) {
  const void *p = lb_test_object(L, idx, mt);
  if (p && lb_owner(L, idx)->ctx != ctx) lb_error(L, "attribute value: a %s of another context", mt + 6);
  return p;
}

/* The Lua value at idx as an attribute. `seen` (a stack index) holds the tables
** being converted, to refuse one that contains itself; scratch arrays are userdata,
** so that an error on the way leaks nothing. */
static const IrAttr *to_attr(lua_State *L, IrContext *ctx, int idx, int seen, int depth) {
  idx = lua_absindex(L, idx);
  switch (lua_type(L, idx)) {
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx)) return ir_attr_i64(ctx, lua_tointeger(L, idx));
    return ir_attr_float(ctx, lua_tonumber(L, idx), ir_type_float(ctx, IR_F64));
  case LUA_TBOOLEAN: return ir_attr_bool(ctx, lua_toboolean(L, idx));
  case LUA_TSTRING: {
    size_t n;
    const char *s = lua_tolstring(L, idx, &n);
    return ir_attr_str(ctx, s, n);
  }
  case LUA_TUSERDATA: {
    const IrAttr *a = attr_object(L, ctx, idx, LB_ATTR);
    if (a) return a;
    const IrType *t = attr_object(L, ctx, idx, LB_TYPE);
    if (t) return ir_attr_type(ctx, t);
    break;
  }
  case LUA_TTABLE: {
    if (depth >= LB_ATTR_MAX_DEPTH) lb_error(L, "attribute value: tables nested deeper than %d levels", LB_ATTR_MAX_DEPTH);
    if (!lua_checkstack(L, 8)) lb_error(L, "attribute value: out of Lua stack space");
    lua_pushvalue(L, idx);
    if (lua_rawget(L, seen) != LUA_TNIL) lb_error(L, "attribute value: a table that contains itself");
    lua_pop(L, 1);
    lua_pushvalue(L, idx);
    lua_pushboolean(L, 1);
    lua_rawset(L, seen);
    const IrAttr *a = NULL;
    if (lua_getmetatable(L, idx)) { /* a DSL object that knows its attribute form */
      lua_pop(L, 1);
      if (luaL_getmetafield(L, idx, "__dict") != LUA_TNIL) {
        lua_pop(L, 1);
        goto dict; /* a dictionary even when empty */
      }
      if (luaL_getmetafield(L, idx, "__attr") != LUA_TNIL) {
        lua_pushvalue(L, idx);
        lua_call(L, 1, 1);
        a = to_attr(L, ctx, -1, seen, depth + 1);
        lua_pop(L, 1);
        goto done;
      }
    }
    if (is_sequence(L, idx)) {
      lua_Integer n = luaL_len(L, idx);
      if (n > (lua_Integer)UINT32_MAX) lb_error(L, "attribute value: an array of %lld elements", (long long)n);
      const IrAttr **elems = lua_newuserdatauv(L, ((size_t)n + 1) * sizeof *elems, 0);
      for (lua_Integer i = 1; i <= n; i++) {
        lua_geti(L, idx, i);
        elems[i - 1] = to_attr(L, ctx, -1, seen, depth + 1);
        lua_pop(L, 1);
      }
      a = ir_attr_array(ctx, (uint32_t)n, elems);
      lua_pop(L, 1);
      goto done;
    }
  dict:;
    uint32_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      n++;
      lua_pop(L, 1);
    }
    IrNamedAttr *es = lua_newuserdatauv(L, ((size_t)n + 1) * sizeof *es, 0);
    int esi = lua_gettop(L);
    n = 0;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      if (lua_type(L, -2) != LUA_TSTRING) lb_error(L, "attribute dictionaries take string keys");
      es[n].name = ir_intern_cstr(ctx, lua_tostring(L, -2));
      es[n].attr = to_attr(L, ctx, -1, seen, depth + 1);
      n++;
      lua_pop(L, 1);
    }
    a = ir_attr_dict(ctx, n, es);
    lua_remove(L, esi);
  done:
    lua_pushvalue(L, idx);
    lua_pushnil(L);
    lua_rawset(L, seen);
    return a;
  }
  default: break;
  }
  lb_error(L, "cannot make an attribute from a %s", luaL_typename(L, idx));
  return NULL;
}

const IrAttr *lb_to_attr(lua_State *L, IrContext *ctx, int idx) {
  idx = lua_absindex(L, idx);
  lua_newtable(L); /* the tables being converted */
  const IrAttr *a = to_attr(L, ctx, idx, lua_gettop(L), 0);
  lua_pop(L, 1);
  return a;
}

void lb_push_attr(lua_State *L, const IrAttr *a, int ctx_idx) {
  ctx_idx = lua_absindex(L, ctx_idx);
  switch (a->kind) {
  case IR_ATTR_INT: lua_pushinteger(L, a->u.i); break;
  case IR_ATTR_FLOAT: lua_pushnumber(L, a->u.f); break;
  case IR_ATTR_BOOL: lua_pushboolean(L, a->u.b); break;
  case IR_ATTR_STR: lua_pushlstring(L, a->u.str.s, a->u.str.len); break;
  case IR_ATTR_TYPE: push_type(L, a->u.ty, ctx_idx); break;
  case IR_ATTR_SYM: lb_push_object(L, LB_ATTR, (void *)a, ctx_idx); break;
  case IR_ATTR_ARRAY:
    lua_createtable(L, (int)a->u.arr.n, 0);
    for (uint32_t i = 0; i < a->u.arr.n; i++) {
      lb_push_attr(L, a->u.arr.elems[i], ctx_idx);
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    break;
  case IR_ATTR_DICT:
    lua_createtable(L, 0, (int)a->u.dict.n);
    for (uint32_t i = 0; i < a->u.dict.n; i++) {
      lb_push_attr(L, a->u.dict.entries[i].attr, ctx_idx);
      lua_setfield(L, -2, a->u.dict.entries[i].name);
    }
    break;
  }
}

static const IrType *typed_attr_type(lua_State *L, int idx, IrContext *ctx, int want_float) {
  if (lua_isnoneornil(L, idx))
    return want_float ? ir_type_float(ctx, IR_F64) : ir_type_int(ctx, 64);
  const IrType *t = check_type_of(L, idx, NULL);
  if (want_float ? !ir_type_is_float(t) : !ir_type_is_intlike(t))
    lb_error(L, "expected %s type for the attribute", want_float ? "a float" : "an integer or index");
  return t;
}

/* core.attr_int(v [, type [, ctx]]) */
static int core_attr_int(lua_State *L) {
  lua_Integer v = luaL_checkinteger(L, 1);
  int ci;
  LbContext *c = lua_isnoneornil(L, 2) ? ctx_arg(L, 3, &ci) : (lb_push_owner(L, 2), ci = lua_gettop(L), lb_owner(L, 2));
  const IrType *t = typed_attr_type(L, 2, c->ctx, 0);
  lb_push_object(L, LB_ATTR, (void *)ir_attr_int(c->ctx, v, t), ci);
  return 1;
}

static int core_attr_float(lua_State *L) {
  lua_Number v = luaL_checknumber(L, 1);
  int ci;
  LbContext *c = lua_isnoneornil(L, 2) ? ctx_arg(L, 3, &ci) : (lb_push_owner(L, 2), ci = lua_gettop(L), lb_owner(L, 2));
  const IrType *t = typed_attr_type(L, 2, c->ctx, 1);
  lb_push_object(L, LB_ATTR, (void *)ir_attr_float(c->ctx, v, t), ci);
  return 1;
}

/* core.attr_float_bits(bits, type): a float attribute from its bit pattern (inf, nan). */
static int core_attr_float_bits(lua_State *L) {
  lua_Integer bits = luaL_checkinteger(L, 1);
  const IrType *t = lb_check_type(L, 2);
  if (!ir_type_is_float(t)) return lb_error(L, "attr_float_bits: expected a float type");
  lb_push_owner(L, 2);
  lb_push_object(L, LB_ATTR, (void *)ir_attr_float(ctx_of(L, 2), ir_float_from_bits((uint64_t)bits, t->fkind), t), -1);
  return 1;
}

/* core.emit_error(ctx, {file=, line=, col=}, message): append an error diagnostic. */
static int core_emit_error(lua_State *L) {
  LbContext *c = lb_check_context(L, 1);
  IrLoc loc = opt_loc(L, 2, c->ctx);
  ir_error(c->ctx, loc, "%s", luaL_checkstring(L, 3));
  return 0;
}

static int core_attr_sym(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  int ci;
  LbContext *c = ctx_arg(L, 2, &ci);
  lb_push_object(L, LB_ATTR, (void *)ir_attr_sym(c->ctx, s, n), ci);
  return 1;
}

/* core.attr(luavalue [, ctx]) -> Attr: explicit conversion. */
static int core_attr(lua_State *L) {
  int ci;
  LbContext *c = ctx_arg(L, 2, &ci);
  const IrAttr *a = lb_to_attr(L, c->ctx, 1);
  lb_push_object(L, LB_ATTR, (void *)a, ci);
  return 1;
}

static int attr_tostring(lua_State *L) {
  const IrAttr *a = lb_check_object(L, 1, LB_ATTR);
  StrBuf sb;
  sb_init(&sb);
  ir_print_attr(&sb, a);
  lua_pushstring(L, sb.data ? sb.data : "");
  sb_free(&sb);
  return 1;
}

/* a:value() -> the plain Lua value; a:type() -> Type or nil; a:kind() */
static int attr_value(lua_State *L) {
  const IrAttr *a = lb_check_object(L, 1, LB_ATTR);
  if (a->kind == IR_ATTR_SYM) lua_pushlstring(L, a->u.str.s, a->u.str.len);
  else {
    lb_push_owner(L, 1);
    lb_push_attr(L, a, -1);
  }
  return 1;
}

static int attr_type(lua_State *L) {
  const IrAttr *a = lb_check_object(L, 1, LB_ATTR);
  push_like(L, LB_TYPE, (void *)a->type, 1);
  return 1;
}

static int attr_kind(lua_State *L) {
  static const char *const names[] = {"int", "float", "bool", "string", "type", "array", "dict", "symbol"};
  lua_pushstring(L, names[((const IrAttr *)lb_check_object(L, 1, LB_ATTR))->kind]);
  return 1;
}

/* }====================================================================== */

/* {======================================================================
** Operations
** ======================================================================= */

/* A location argument: nil (the user's frame) or {file=, line=, col=}. */
static IrLoc opt_loc(lua_State *L, int idx, IrContext *ctx) {
  if (lua_isnoneornil(L, idx)) return lb_user_loc(L, ctx);
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_getfield(L, idx, "file");
  lua_getfield(L, idx, "line");
  lua_getfield(L, idx, "col");
  IrLoc loc = ir_loc(ctx, lua_tostring(L, -3), (int)lua_tointeger(L, -2), (int)lua_tointeger(L, -1));
  lua_pop(L, 3);
  return loc;
}

static uint32_t list_len(lua_State *L, int idx) {
  if (lua_isnoneornil(L, idx)) return 0;
  luaL_checktype(L, idx, LUA_TTABLE);
  return (uint32_t)luaL_len(L, idx);
}

/* core.op_create(ctx, name, operands, result_types, attrs, nregions, block, before, loc, check)
** Creates an op; inserts it at the end of `block` or before `before` when given.
** check = true runs the signature check at once and raises on failure. */
static int core_op_create(lua_State *L) {
  LbContext *c = lb_check_context(L, 1);
  size_t nlen;
  const char *name = luaL_checklstring(L, 2, &nlen);
  int kind = ir_op_lookup(name, nlen);
  if (kind < 0) return lb_error(L, "unknown operation '%s'", name);
  uint32_t nopd = list_len(L, 3), nres = list_len(L, 4);
  IrValue **opds = ir_malloc((nopd + 1) * sizeof *opds);
  const IrType **rtys = ir_malloc((nres + 1) * sizeof *rtys);
  /* Collect operands and types; on a bad argument free and raise. */
  const char *bad = NULL;
  uint32_t badi = 0;
  for (uint32_t i = 0; i < nopd && !bad; i++) {
    lua_geti(L, 3, (lua_Integer)i + 1);
    opds[i] = lb_test_object(L, -1, LB_VALUE);
    if (!opds[i]) bad = "operand", badi = i;
    else if (ctx_of(L, -1) != c->ctx) bad = "operand (of another context)", badi = i;
    lua_pop(L, 1);
  }
  for (uint32_t i = 0; i < nres && !bad; i++) {
    lua_geti(L, 4, (lua_Integer)i + 1);
    rtys[i] = lb_test_object(L, -1, LB_TYPE);
    if (!rtys[i]) bad = "result type", badi = i;
    else if (ctx_of(L, -1) != c->ctx) bad = "result type (of another context)", badi = i;
    lua_pop(L, 1);
  }
  if (bad) {
    ir_free(opds);
    ir_free(rtys);
    return lb_error(L, "'%s': bad %s #%d", name, bad, (int)badi + 1);
  }
  lua_Integer nreg = luaL_optinteger(L, 6, ir_op_info((IrOpKind)kind)->nregions);
  if (nreg < 0 || nreg > 16) {
    ir_free(opds);
    ir_free(rtys);
    return lb_error(L, "'%s': bad region count", name);
  }
  IrLoc loc = opt_loc(L, 9, c->ctx);
  IrOp *op = ir_op_create(c->ctx, (IrOpKind)kind, loc, nopd, opds, nres, rtys, (uint32_t)nreg);
  ir_free(opds);
  ir_free(rtys);
  if (!lua_isnoneornil(L, 5)) {
    luaL_checktype(L, 5, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 5)) {
      if (lua_type(L, -2) != LUA_TSTRING) return lb_error(L, "'%s': attribute names are strings", name);
      ir_op_set_attr(op, lua_tostring(L, -2), lb_to_attr(L, c->ctx, -1));
      lua_pop(L, 1);
    }
  }
  if (lua_toboolean(L, 10) && ir_verify_signature(op) != IR_OK) {
    lb_push_diagnostics(L, c->ctx);
    return lua_error(L);
  }
  IrBlock *block = lua_isnoneornil(L, 7) ? NULL : lb_check_block(L, 7);
  IrOp *before = lua_isnoneornil(L, 8) ? NULL : lb_check_op(L, 8);
  if (block && ctx_of(L, 7) != c->ctx) return lb_error(L, "'%s': the block belongs to another context", name);
  if (before && ctx_of(L, 8) != c->ctx) return lb_error(L, "'%s': the insertion point belongs to another context", name);
  if (before) {
    if (!before->parent) return lb_error(L, "'%s': insertion point is not in a block", name);
    ir_op_insert_before(before, op);
  } else if (block) {
    ir_block_append(block, op);
  }
  lb_push_object(L, LB_OP, op, 1);
  return 1;
}

static int op_name(lua_State *L) {
  lua_pushstring(L, ir_op_name(lb_check_op(L, 1)));
  return 1;
}

static int op_nresults(lua_State *L) {
  lua_pushinteger(L, lb_check_op(L, 1)->nresults);
  return 1;
}

static uint32_t check_index(lua_State *L, int idx, uint32_t n, const char *what) {
  lua_Integer i = luaL_checkinteger(L, idx);
  if (i < 1 || (lua_Unsigned)i > n) lb_error(L, "%s index %d out of range [1, %d]", what, (int)i, (int)n);
  return (uint32_t)(i - 1);
}

static int op_result(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  uint32_t i = check_index(L, 2, op->nresults, "result");
  push_like(L, LB_VALUE, &op->results[i], 1);
  return 1;
}

static int op_results(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  lua_createtable(L, (int)op->nresults, 0);
  for (uint32_t i = 0; i < op->nresults; i++) {
    push_like(L, LB_VALUE, &op->results[i], 1);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

static int op_noperands(lua_State *L) {
  lua_pushinteger(L, lb_check_op(L, 1)->noperands);
  return 1;
}

static int op_operand(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  uint32_t i = check_index(L, 2, op->noperands, "operand");
  push_like(L, LB_VALUE, op->operands[i].value, 1);
  return 1;
}

static int op_operands(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  lua_createtable(L, (int)op->noperands, 0);
  for (uint32_t i = 0; i < op->noperands; i++) {
    push_like(L, LB_VALUE, op->operands[i].value, 1);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

static IrValue *check_value_of(lua_State *L, int idx, IrContext *ctx) {
  IrValue *v = lb_check_value(L, idx);
  if (ctx_of(L, idx) != ctx) lb_error(L, "value belongs to another context");
  return v;
}

static int op_set_operand(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  uint32_t i = check_index(L, 2, op->noperands, "operand");
  ir_op_set_operand(op, i, check_value_of(L, 3, ctx_of(L, 1)));
  return 0;
}

static int op_set_operands(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  uint32_t n = list_len(L, 2);
  IrValue **vals = ir_malloc((n + 1) * sizeof *vals);
  for (uint32_t i = 0; i < n; i++) {
    lua_geti(L, 2, (lua_Integer)i + 1);
    vals[i] = lb_test_object(L, -1, LB_VALUE);
    bool other = vals[i] && ctx_of(L, -1) != ctx_of(L, 1);
    lua_pop(L, 1);
    if (!vals[i] || other) {
      ir_free(vals);
      return lb_error(L, "set_operands: element #%d is not a value%s", (int)i + 1, other ? " of the op's context" : "");
    }
  }
  ir_op_set_operands(op, n, vals);
  ir_free(vals);
  return 0;
}

static int op_attr(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  const IrAttr *a = ir_op_attr(op, luaL_checkstring(L, 2));
  int raw = lua_toboolean(L, 3);
  if (!a) return 0;
  lb_push_owner(L, 1);
  if (raw) lb_push_object(L, LB_ATTR, (void *)a, -1);
  else lb_push_attr(L, a, -1);
  return 1;
}

static int op_set_attr(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  const char *name = luaL_checkstring(L, 2);
  ir_op_set_attr(op, name, lua_isnoneornil(L, 3) ? NULL : lb_to_attr(L, ctx_of(L, 1), 3));
  return 0;
}

static int op_attrs(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  int raw = lua_toboolean(L, 2);
  lb_push_owner(L, 1);
  int ci = lua_gettop(L);
  lua_createtable(L, 0, (int)op->nattrs);
  for (uint32_t i = 0; i < op->nattrs; i++) {
    if (raw) lb_push_object(L, LB_ATTR, (void *)op->attrs[i].attr, ci);
    else lb_push_attr(L, op->attrs[i].attr, ci);
    lua_setfield(L, -2, op->attrs[i].name);
  }
  return 1;
}

static int op_nregions(lua_State *L) {
  lua_pushinteger(L, lb_check_op(L, 1)->nregions);
  return 1;
}

static int op_region(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  uint32_t i = check_index(L, 2, op->nregions, "region");
  push_like(L, LB_REGION, &op->regions[i], 1);
  return 1;
}

static int op_parent(lua_State *L) {
  push_like(L, LB_OP, ir_op_parent_op(lb_check_op(L, 1)), 1);
  return 1;
}

static int op_block(lua_State *L) {
  push_like(L, LB_BLOCK, lb_check_op(L, 1)->parent, 1);
  return 1;
}

static int op_next(lua_State *L) {
  push_like(L, LB_OP, lb_check_op(L, 1)->next, 1);
  return 1;
}

static int op_prev(lua_State *L) {
  push_like(L, LB_OP, lb_check_op(L, 1)->prev, 1);
  return 1;
}

static int op_erase(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  if (!ir_op_results_unused(op)) return lb_error(L, "cannot erase '%s': its results are still used", ir_op_name(op));
  ir_op_erase(op);
  return 0;
}

static int op_unlink(lua_State *L) {
  ir_op_unlink(lb_check_op(L, 1));
  return 0;
}

/* op:insert(block [, before]): link a detached op at the end of block or before an op. */
static int op_insert(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  IrOp *before = lua_isnoneornil(L, 3) ? NULL : lb_check_op(L, 3);
  IrBlock *block = before ? NULL : lb_check_block(L, 2);
  same_context(L, 1, before ? 3 : 2, "insert");
  if (before && !before->parent) return lb_error(L, "insert: the op to insert before is not in a block");
  not_inside(L, op, before ? before : ir_block_parent_op(block), "insert");
  if (op == before) return 0;
  if (op->parent) ir_op_unlink(op);
  if (before) ir_op_insert_before(before, op);
  else ir_block_append(block, op);
  return 0;
}

static int op_move_before(lua_State *L) {
  IrOp *op = lb_check_op(L, 1), *pos = lb_check_op(L, 2);
  same_context(L, 1, 2, "move_before");
  if (op == pos || !pos->parent) return lb_error(L, "move_before: bad position");
  not_inside(L, op, pos, "move_before");
  ir_op_move_before(op, pos);
  return 0;
}

/* op:take_regions(other): move the blocks of other's regions into op's (empty) regions. */
static int op_take_regions(lua_State *L) {
  IrOp *op = lb_check_op(L, 1), *other = lb_check_op(L, 2);
  same_context(L, 1, 2, "take_regions");
  if (op == other) return 0;
  not_inside(L, other, op, "take_regions");
  if (op->nregions != other->nregions) return lb_error(L, "take_regions: region counts differ");
  for (uint32_t r = 0; r < op->nregions; r++) {
    if (op->regions[r].first) return lb_error(L, "take_regions: region %d is not empty", (int)r + 1);
    IrRegion *src = &other->regions[r], *dst = &op->regions[r];
    for (IrBlock *b = src->first; b; b = b->parent == dst ? b->next : NULL) b->parent = dst;
    dst->first = src->first;
    dst->last = src->last;
    src->first = src->last = NULL;
  }
  return 0;
}

static int op_clone(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  IrMapping map;
  ir_mapping_init(&map);
  IrOp *c = ir_op_clone(ctx_of(L, 1), op, &map);
  ir_mapping_free(&map);
  push_like(L, LB_OP, c, 1);
  return 1;
}

/* op:verify() -> true | true, warnings, list | false, message, list */
static int op_verify(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  IrContext *ctx = ctx_of(L, 1);
  ir_diag_clear(ctx);
  if (ir_verify(op) == IR_OK) {
    lua_pushboolean(L, 1);
    if (!ir_diag_pending(ctx)) return 1;
    lb_push_diagnostics_and_list(L, ctx); /* warnings */
    return 3;
  }
  lua_pushboolean(L, 0);
  lb_push_diagnostics_and_list(L, ctx);
  return 3; /* false, message, list */
}

static int op_print(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  IrPrintOptions o = {false, 2};
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "locations");
    o.locations = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  char *s = ir_op_to_string(op, &o);
  lua_pushstring(L, s);
  ir_free(s);
  return 1;
}

static int op_tostring(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  if (op->nregions) {
    lua_pushfstring(L, "tilua.Op '%s'", ir_op_name(op));
    return 1;
  }
  return op_print(L);
}

typedef struct WalkState {
  lua_State *L;
  int fn, self;
  int stopped;
} WalkState;

static bool walk_cb(IrOp *op, void *ud) {
  WalkState *w = ud;
  lua_State *L = w->L;
  lua_pushvalue(L, w->fn);
  push_like(L, LB_OP, op, w->self);
  lua_call(L, 1, 1);
  int stop = lua_type(L, -1) == LUA_TBOOLEAN && !lua_toboolean(L, -1);
  lua_pop(L, 1);
  if (stop) w->stopped = 1;
  return !stop;
}

/* op:walk(fn [, "post"]): fn(op) for op and everything nested; fn returning false stops. */
static int op_walk(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  int post = lua_isstring(L, 3) && strcmp(lua_tostring(L, 3), "post") == 0;
  WalkState w = {L, 2, 1, 0};
  if (post) ir_walk_post(op, walk_cb, &w);
  else ir_walk_pre(op, walk_cb, &w);
  lua_pushboolean(L, !w.stopped);
  return 1;
}

static int op_loc(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  if (op->loc.file) lua_pushstring(L, op->loc.file);
  else lua_pushnil(L);
  lua_pushinteger(L, op->loc.line);
  lua_pushinteger(L, op->loc.col);
  return 3;
}

static int op_set_loc(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  op->loc = opt_loc(L, 2, ctx_of(L, 1));
  return 0;
}

static int op_is_pure(lua_State *L) {
  lua_pushboolean(L, ir_op_is_pure(lb_check_op(L, 1)));
  return 1;
}

static int op_is_removable(lua_State *L) {
  lua_pushboolean(L, ir_op_is_removable(lb_check_op(L, 1)));
  return 1;
}

/* op:error(msg): raise "file:line: 'name' op msg" at the op's location. */
static int op_error(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  const char *msg = luaL_checkstring(L, 2);
  if (op->loc.file) lua_pushfstring(L, "%s:%d: '%s' op %s", op->loc.file, op->loc.line, ir_op_name(op), msg);
  else lua_pushfstring(L, "'%s' op %s", ir_op_name(op), msg);
  return lua_error(L);
}

/* }====================================================================== */

/* {======================================================================
** Regions, blocks and values
** ======================================================================= */

static int region_blocks(lua_State *L) {
  IrRegion *r = lb_check_region(L, 1);
  lua_newtable(L);
  int i = 1;
  for (IrBlock *b = r->first; b; b = b->next) {
    push_like(L, LB_BLOCK, b, 1);
    lua_rawseti(L, -2, i++);
  }
  return 1;
}

static int region_entry(lua_State *L) {
  push_like(L, LB_BLOCK, lb_check_region(L, 1)->first, 1);
  return 1;
}

/* r:add_block([types]) -> a new block appended to the region, with arguments of those types. */
static int region_add_block(lua_State *L) {
  IrRegion *r = lb_check_region(L, 1);
  IrContext *ctx = ctx_of(L, 1);
  IrBlock *b = ir_block_create(ctx);
  uint32_t n = list_len(L, 2);
  for (uint32_t i = 0; i < n; i++) {
    lua_geti(L, 2, (lua_Integer)i + 1);
    const IrType *t = lb_test_object(L, -1, LB_TYPE);
    bool other = t && ctx_of(L, -1) != ctx;
    lua_pop(L, 1);
    if (!t || other) return lb_error(L, "add_block: argument type #%d is not a type%s", (int)i + 1, other ? " of the region's context" : "");
    ir_block_add_arg(ctx, b, t);
  }
  ir_region_append_block(r, b);
  push_like(L, LB_BLOCK, b, 1);
  return 1;
}

static int region_parent(lua_State *L) {
  push_like(L, LB_OP, lb_check_region(L, 1)->parent, 1);
  return 1;
}

static int block_args(lua_State *L) {
  IrBlock *b = lb_check_block(L, 1);
  lua_createtable(L, (int)b->nargs, 0);
  for (uint32_t i = 0; i < b->nargs; i++) {
    push_like(L, LB_VALUE, b->args[i], 1);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

static int block_arg(lua_State *L) {
  IrBlock *b = lb_check_block(L, 1);
  push_like(L, LB_VALUE, b->args[check_index(L, 2, b->nargs, "argument")], 1);
  return 1;
}

static int block_nargs(lua_State *L) {
  lua_pushinteger(L, lb_check_block(L, 1)->nargs);
  return 1;
}

static int block_add_arg(lua_State *L) {
  IrBlock *b = lb_check_block(L, 1);
  const IrType *t = check_type_of(L, 2, ctx_of(L, 1));
  push_like(L, LB_VALUE, ir_block_add_arg(ctx_of(L, 1), b, t), 1);
  return 1;
}

static int block_ops(lua_State *L) {
  IrBlock *b = lb_check_block(L, 1);
  lua_newtable(L);
  int i = 1;
  for (IrOp *o = b->first; o; o = o->next) {
    push_like(L, LB_OP, o, 1);
    lua_rawseti(L, -2, i++);
  }
  return 1;
}

static int block_first(lua_State *L) {
  push_like(L, LB_OP, lb_check_block(L, 1)->first, 1);
  return 1;
}

static int block_last(lua_State *L) {
  push_like(L, LB_OP, lb_check_block(L, 1)->last, 1);
  return 1;
}

static int block_terminator(lua_State *L) {
  push_like(L, LB_OP, ir_block_terminator(lb_check_block(L, 1)), 1);
  return 1;
}

static int block_parent(lua_State *L) {
  push_like(L, LB_OP, ir_block_parent_op(lb_check_block(L, 1)), 1);
  return 1;
}

static int value_type(lua_State *L) {
  push_like(L, LB_TYPE, (void *)lb_check_value(L, 1)->type, 1);
  return 1;
}

static int value_def(lua_State *L) {
  push_like(L, LB_OP, lb_check_value(L, 1)->def, 1);
  return 1;
}

static int value_block(lua_State *L) {
  push_like(L, LB_BLOCK, lb_check_value(L, 1)->block, 1);
  return 1;
}

static int value_index(lua_State *L) {
  lua_pushinteger(L, lb_check_value(L, 1)->index + 1);
  return 1;
}

static int value_nuses(lua_State *L) {
  lua_pushinteger(L, ir_value_num_uses(lb_check_value(L, 1)));
  return 1;
}

static int value_users(lua_State *L) {
  IrValue *v = lb_check_value(L, 1);
  lua_newtable(L);
  int i = 1;
  for (IrUse *u = v->uses; u; u = u->next) {
    push_like(L, LB_OP, u->owner, 1);
    lua_rawseti(L, -2, i++);
  }
  return 1;
}

static int value_replace_all_uses(lua_State *L) {
  IrValue *v = lb_check_value(L, 1);
  IrValue *w = check_value_of(L, 2, ctx_of(L, 1));
  if (v != w) ir_value_replace_all_uses(v, w);
  return 0;
}

static int value_tostring(lua_State *L) {
  IrValue *v = lb_check_value(L, 1);
  char *t = ir_type_to_string(v->type);
  if (v->def) lua_pushfstring(L, "value #%d of '%s' : %s", (int)v->index + 1, ir_op_name(v->def), t);
  else lua_pushfstring(L, "block argument #%d : %s", (int)v->index + 1, t);
  ir_free(t);
  return 1;
}

/* }====================================================================== */

/* {======================================================================
** Registry information
** ======================================================================= */

static void push_traits(lua_State *L, uint32_t traits) {
  static const struct { uint32_t bit; const char *name; } names[] = {
      {T_TERMINATOR, "terminator"}, {T_SAME_TYPE, "same_type"}, {T_SAME_OPERANDS, "same_operands"},
      {T_ISOLATED, "isolated"}, {T_NO_TERMINATOR, "no_terminator"}, {T_COMMUTATIVE, "commutative"},
      {T_CONSTANT, "constant"}, {T_DROPPABLE, "droppable"}, {T_RECURSIVE, "recursive_effects"},
      {T_SINGLE_BLOCK, "single_block"}, {T_SYMBOL, "symbol"}, {T_NO_MERGE, "no_merge"}};
  lua_newtable(L);
  int i = 1;
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
    if (traits & names[k].bit) {
      lua_pushstring(L, names[k].name);
      lua_rawseti(L, -2, i++);
    }
}

static void push_effects(lua_State *L, uint32_t eff) {
  static const char *const res[] = {
#define X(id, doc) doc,
      IR_RESOURCE_LIST(X)
#undef X
  };
  lua_newtable(L);
  int i = 1;
  for (int r = 0; r < IR_RES__COUNT; r++) {
    if (eff & (1u << r)) {
      lua_pushfstring(L, "reads %s", res[r]);
      lua_rawseti(L, -2, i++);
    }
    if (eff & (1u << (16 + r))) {
      lua_pushfstring(L, "writes %s", res[r]);
      lua_rawseti(L, -2, i++);
    }
  }
}

static void push_op_info(lua_State *L, int kind) {
  const IrOpInfo *info = ir_op_info((IrOpKind)kind);
  IrArity a = ir_op_arity((IrOpKind)kind);
  lua_createtable(L, 0, 12);
  lua_pushstring(L, info->name);
  lua_setfield(L, -2, "name");
  lua_pushlstring(L, info->name, ir_op_dialect_len((IrOpKind)kind));
  lua_setfield(L, -2, "dialect");
  lua_pushstring(L, info->sig);
  lua_setfield(L, -2, "signature");
  lua_pushinteger(L, info->nregions);
  lua_setfield(L, -2, "regions");
  lua_pushstring(L, info->doc);
  lua_setfield(L, -2, "doc");
  push_traits(L, info->traits);
  lua_setfield(L, -2, "traits");
  push_effects(L, info->effects);
  lua_setfield(L, -2, "effects");
  lua_pushboolean(L, info->verify != noverify);
  lua_setfield(L, -2, "has_verifier");
  lua_pushinteger(L, a.min_operands);
  lua_setfield(L, -2, "min_operands");
  lua_pushinteger(L, a.max_operands);
  lua_setfield(L, -2, "max_operands");
  lua_pushinteger(L, a.min_results);
  lua_setfield(L, -2, "min_results");
  lua_pushinteger(L, a.max_results);
  lua_setfield(L, -2, "max_results");
  lua_pushboolean(L, (info->traits & T_TERMINATOR) != 0);
  lua_setfield(L, -2, "terminator");
  lb_push_op_tables(L, kind);
}

/* core.op_info(name) -> table or nil; core.ops() -> list of tables in table order. */
static int core_op_info(lua_State *L) {
  size_t n;
  const char *name = luaL_checklstring(L, 1, &n);
  int k = ir_op_lookup(name, n);
  if (k < 0) return 0;
  push_op_info(L, k);
  return 1;
}

static int core_ops(lua_State *L) {
  lua_createtable(L, OP__COUNT, 0);
  for (int k = 0; k < OP__COUNT; k++) {
    push_op_info(L, k);
    lua_rawseti(L, -2, k + 1);
  }
  return 1;
}

static int core_dialect_types(lua_State *L) {
  int n = ir_dialect_type_count();
  lua_createtable(L, n, 0);
  for (int k = 0; k < n; k++) {
    lua_createtable(L, 0, 2);
    lua_pushstring(L, ir_dialect_type_name(k));
    lua_setfield(L, -2, "name");
    lua_pushstring(L, ir_dialect_type_doc(k));
    lua_setfield(L, -2, "doc");
    lua_pushstring(L, ir_dialect_type_params(k));
    lua_setfield(L, -2, "params");
    lua_rawseti(L, -2, k + 1);
  }
  return 1;
}

static int core_memspaces(lua_State *L) {
  lua_createtable(L, IR_MS__COUNT, 0);
  for (int k = 0; k < IR_MS__COUNT; k++) {
    lua_pushstring(L, ir_memspace_name((IrMemSpace)k));
    lua_rawseti(L, -2, k + 1);
  }
  return 1;
}

/* core.mark_library(chunkname): frames of that chunk are skipped by user locations. */
static int core_mark_library(lua_State *L) {
  lb_mark_library_chunk(L, luaL_checkstring(L, 1));
  return 0;
}

/* core.type_matches(type, constraint) -> whether the type fits a signature constraint
** ("intlike", "ptr.shared", "!cutlass.pipeline", "f16|bf16", ...). */
static int core_type_matches(lua_State *L) {
  const IrType *t = lb_check_type(L, 1);
  size_t n;
  const char *c = luaL_checklstring(L, 2, &n);
  lua_pushboolean(L, ir_type_matches(t, c, n));
  return 1;
}

/* core.metatable(name) -> the metatable of a class ("Value", "Op", ...) for Lua extensions. */
static int core_metatable(lua_State *L) {
  lua_pushfstring(L, "tilua.%s", luaL_checkstring(L, 1));
  if (luaL_getmetatable(L, lua_tostring(L, -1)) != LUA_TTABLE) return 0;
  return 1;
}

/* core.user_location() -> file, line of the innermost user frame (nil if none). */
static int core_user_location(lua_State *L) {
  const char *file;
  int line;
  if (!user_frame(L, &file, &line)) return 0;
  lua_pushstring(L, file);
  lua_pushinteger(L, line);
  return 2;
}

/* }====================================================================== */

static const luaL_Reg context_methods[] = {{"close", ctx_close},
                                          {"module", ctx_module},
                                          {"target_sm", ctx_target_sm},
                                          {"diagnostics", ctx_diagnostics},
                                          {NULL, NULL}};
static const luaL_Reg context_meta[] = {
    {"__gc", ctx_close}, {"__close", ctx_close}, {"__tostring", ctx_tostring}, {NULL, NULL}};

static const luaL_Reg type_methods[] = {{"info", type_info}, {"kind", type_kind}, {"id", object_id}, {NULL, NULL}};
static const luaL_Reg type_meta[] = {{"__tostring", type_tostring}, {"__eq", object_eq}, {NULL, NULL}};

static const luaL_Reg attr_methods[] = {
    {"value", attr_value}, {"type", attr_type}, {"kind", attr_kind}, {NULL, NULL}};
static const luaL_Reg attr_meta[] = {{"__tostring", attr_tostring}, {"__eq", object_eq}, {NULL, NULL}};

static const luaL_Reg op_methods[] = {{"name", op_name},
                                      {"nresults", op_nresults},
                                      {"result", op_result},
                                      {"results", op_results},
                                      {"noperands", op_noperands},
                                      {"operand", op_operand},
                                      {"operands", op_operands},
                                      {"set_operand", op_set_operand},
                                      {"set_operands", op_set_operands},
                                      {"attr", op_attr},
                                      {"set_attr", op_set_attr},
                                      {"attrs", op_attrs},
                                      {"nregions", op_nregions},
                                      {"region", op_region},
                                      {"parent", op_parent},
                                      {"block", op_block},
                                      {"next", op_next},
                                      {"prev", op_prev},
                                      {"erase", op_erase},
                                      {"unlink", op_unlink},
                                      {"insert", op_insert},
                                      {"move_before", op_move_before},
                                      {"take_regions", op_take_regions},
                                      {"clone", op_clone},
                                      {"verify", op_verify},
                                      {"print", op_print},
                                      {"walk", op_walk},
                                      {"loc", op_loc},
                                      {"set_loc", op_set_loc},
                                      {"is_pure", op_is_pure},
                                      {"is_removable", op_is_removable},
                                      {"error", op_error},
                                      {"id", object_id},
                                      {NULL, NULL}};
static const luaL_Reg op_meta[] = {{"__tostring", op_tostring}, {"__eq", object_eq}, {NULL, NULL}};

static const luaL_Reg region_methods[] = {{"blocks", region_blocks},
                                          {"entry", region_entry},
                                          {"add_block", region_add_block},
                                          {"parent", region_parent},
                                          {"id", object_id},
                                          {NULL, NULL}};
static const luaL_Reg block_methods[] = {{"args", block_args},
                                         {"arg", block_arg},
                                         {"nargs", block_nargs},
                                         {"add_arg", block_add_arg},
                                         {"ops", block_ops},
                                         {"first", block_first},
                                         {"last", block_last},
                                         {"terminator", block_terminator},
                                         {"parent", block_parent},
                                         {"id", object_id},
                                         {NULL, NULL}};
static const luaL_Reg value_methods[] = {{"type", value_type},
                                         {"def", value_def},
                                         {"owner_block", value_block},
                                         {"index", value_index},
                                         {"nuses", value_nuses},
                                         {"users", value_users},
                                         {"replace_all_uses", value_replace_all_uses},
                                         {"id", object_id},
                                         {NULL, NULL}};
static const luaL_Reg value_meta[] = {{"__tostring", value_tostring}, {"__eq", object_eq}, {NULL, NULL}};
static const luaL_Reg plain_meta[] = {{"__eq", object_eq}, {NULL, NULL}};

static const luaL_Reg core_functions[] = {{"context", core_context},
                                          {"default_context", core_default_context},
                                          {"type_int", core_type_int},
                                          {"type_float", core_type_float},
                                          {"type_index", core_type_index},
                                          {"type_none", core_type_none},
                                          {"type_ptr", core_type_ptr},
                                          {"type_vector", core_type_vector},
                                          {"type_memref", core_type_memref},
                                          {"type_tile", core_type_tile},
                                          {"type_dialect", core_type_dialect},
                                          {"attr", core_attr},
                                          {"attr_int", core_attr_int},
                                          {"attr_float", core_attr_float},
                                          {"attr_sym", core_attr_sym},
                                          {"attr_float_bits", core_attr_float_bits},
                                          {"emit_error", core_emit_error},
                                          {"op_create", core_op_create},
                                          {"op_info", core_op_info},
                                          {"ops", core_ops},
                                          {"dialect_types", core_dialect_types},
                                          {"memspaces", core_memspaces},
                                          {"mark_library", core_mark_library},
                                          {"user_location", core_user_location},
                                          {"metatable", core_metatable},
                                          {"type_matches", core_type_matches},
                                          {NULL, NULL}};

/* Create a metatable with its methods in __index; leaves nothing on the stack. */
static void new_class(lua_State *L, const char *name, const luaL_Reg *meta, const luaL_Reg *methods) {
  luaL_newmetatable(L, name);
  luaL_setfuncs(L, meta, 0);
  lua_newtable(L);
  luaL_setfuncs(L, methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pushstring(L, name);
  lua_setfield(L, -2, "__name");
  lua_pop(L, 1);
}

void lb_open_ir(lua_State *L) {
  new_class(L, LB_CONTEXT, context_meta, context_methods);
  new_class(L, LB_TYPE, type_meta, type_methods);
  new_class(L, LB_ATTR, attr_meta, attr_methods);
  new_class(L, LB_OP, op_meta, op_methods);
  new_class(L, LB_REGION, plain_meta, region_methods);
  new_class(L, LB_BLOCK, plain_meta, block_methods);
  new_class(L, LB_VALUE, value_meta, value_methods);
  luaL_setfuncs(L, core_functions, 0);
}
