/*
** l_type.c -- Lua bindings of IR types and attributes: the core.type_* and
** core.attr* constructors, Type and Attr methods, and Lua values <-> attributes.
*/
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "../dialects/dialects.h"
#include "l_ir.h"

/* {======================================================================
** Types
** ======================================================================= */

static void push_type(lua_State *L, const IrType *t, int ctx_idx) {
  lb_push_object(L, LB_TYPE, (void *)t, ctx_idx);
}

/* core.type_int(width [, ctx]) */
static int core_type_int(lua_State *L) {
  lua_Integer w = luaL_checkinteger(L, 1);
  LbCtxArg c = lb_ctx_arg(L, 2);
  if (w < 1 || w > 64) return lb_error(L, "integer width must be in [1, 64], got %d", (int)w);
  push_type(L, ir_type_int(c.ctx, (uint32_t)w), c.at);
  return 1;
}

static int core_type_float(lua_State *L) {
  static const char *const names[] = {"f16", "bf16", "f32", "f64", NULL};
  int k = luaL_checkoption(L, 1, NULL, names);
  LbCtxArg c = lb_ctx_arg(L, 2);
  push_type(L, ir_type_float(c.ctx, (IrFloatKind)k), c.at);
  return 1;
}

static int core_type_index(lua_State *L) {
  LbCtxArg c = lb_ctx_arg(L, 1);
  push_type(L, ir_type_index(c.ctx), c.at);
  return 1;
}

static int core_type_none(lua_State *L) {
  LbCtxArg c = lb_ctx_arg(L, 1);
  push_type(L, ir_type_none(c.ctx), c.at);
  return 1;
}

const IrType *lb_check_type_of(lua_State *L, int idx, IrContext *ctx) {
  const IrType *t = lb_check_type(L, idx);
  if (ctx && lb_ctx_of(L, idx) != ctx) lb_error(L, "type belongs to another context");
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

/* The arguments of a type of elements: elem (#1), its context, and the shape (#2). */
typedef struct Shaped {
  const IrType *elem;
  IrContext *ctx;
  uint32_t n;
  int64_t shape[16];
} Shaped;

static Shaped check_shaped(lua_State *L) {
  Shaped a;
  a.elem = lb_check_type(L, 1);
  a.ctx = lb_ctx_of(L, 1);
  a.n = check_shape(L, 2, a.shape);
  return a;
}

/* A type made in the context of the element type #1. */
static int push_derived(lua_State *L, const IrType *t) {
  lb_push_like(L, LB_TYPE, (void *)t, 1);
  return 1;
}

/* core.type_ptr(elem, space) */
static int core_type_ptr(lua_State *L) {
  const IrType *elem = lb_check_type(L, 1);
  return push_derived(L, ir_type_ptr(lb_ctx_of(L, 1), elem, check_space(L, 2, IR_MS_GLOBAL)));
}

/* core.type_vector(elem, shape) */
static int core_type_vector(lua_State *L) {
  Shaped a = check_shaped(L);
  if (a.n == 0) return lb_error(L, "a vector needs at least one dimension");
  return push_derived(L, ir_type_vector(a.ctx, a.elem, a.n, a.shape));
}

/* core.type_memref(elem, shape, space, swizzle) */
static int core_type_memref(lua_State *L) {
  Shaped a = check_shaped(L);
  IrMemSpace sp = check_space(L, 3, IR_MS_GLOBAL);
  lua_Integer sw = luaL_optinteger(L, 4, 0);
  if (sw != 0 && sw != 32 && sw != 64 && sw != 128)
    return lb_error(L, "swizzle must be 0, 32, 64 or 128 (bytes), got %d", (int)sw);
  return push_derived(L, ir_type_memref(a.ctx, a.elem, a.n, a.shape, sp, (uint32_t)sw));
}

/* core.type_tile(elem, shape, space [, layout]): layout a dictionary (a table or
** an Attr), absent or nil for none. */
static int core_type_tile(lua_State *L) {
  Shaped a = check_shaped(L);
  IrMemSpace sp = check_space(L, 3, IR_MS_RMEM);
  const IrAttr *layout = lua_isnoneornil(L, 4) ? NULL : lb_to_attr(L, a.ctx, 4);
  if (layout && layout->kind != IR_ATTR_DICT) return lb_error(L, "a tile layout is a dictionary");
  return push_derived(L, ir_type_tile_layout(a.ctx, a.elem, a.n, a.shape, sp, layout));
}

/* Bad input: nil, message with noraise, else the message raised. */
static int soft_error(lua_State *L, int noraise, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lua_pushnil(L);
  const char *msg = lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  return noraise ? 2 : lb_error(L, "%s", msg);
}

/* core.type_dialect(name, {params...} [, ctx [, noraise]]): with noraise, bad
** input returns nil, message instead of raising. */
static int core_type_dialect(lua_State *L) {
  size_t len;
  const char *name = luaL_checklstring(L, 1, &len);
  LbCtxArg c = lb_ctx_arg(L, 3);
  int noraise = lua_toboolean(L, 4);
  int dty = ir_dialect_type_lookup(name, len);
  if (dty < 0) return soft_error(L, noraise, "unknown dialect type '!%s'", name);
  const IrAttr *params[32];
  uint32_t n = 0;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_Integer np = luaL_len(L, 2);
    if (np > 32) return lb_error(L, "too many type parameters");
    for (lua_Integer i = 1; i <= np; i++) {
      lua_geti(L, 2, i);
      params[n++] = lb_to_attr(L, c.ctx, -1);
      lua_pop(L, 1);
    }
  }
  const char *err = NULL;
  const IrType *t = ir_type_dialect(c.ctx, dty, n, params, &err);
  if (!t) return soft_error(L, noraise, "!%s: %s", name, err);
  push_type(L, t, c.at);
  return 1;
}

static const char *const type_kind_names[] = {"none",   "int",    "float", "index",  "ptr",
                                              "vector", "memref", "tile",  "dialect"};

/* t:info() -> {kind=, width=, bytes=, elements=, elem=, space=, shape=,
** swizzle=, layout=, name=, params=}: bytes in memory (dia_type_storage_bytes:
** a scalar, a vector, a pointer; a memref or tile of static shape: all its
** elements) and elements (vectors, memrefs, tiles of static shape). */
static int type_info(lua_State *L) {
  const IrType *t = lb_check_type(L, 1);
  lua_createtable(L, 0, 8);
  lb_set_str(L, "kind", type_kind_names[t->kind]);
  if (t->kind == IR_TY_INT || t->kind == IR_TY_FLOAT || t->kind == IR_TY_INDEX) {
    lb_set_int(L, "width", ir_type_bitwidth(t));
  }
  int64_t bytes = dia_type_storage_bytes(t), elements = t->rank ? ir_type_num_elements(t) : 0;
  if (bytes > 0) lb_set_int(L, "bytes", bytes);
  if (elements > 0) lb_set_int(L, "elements", elements);
  if (t->elem) {
    lb_push_like(L, LB_TYPE, (void *)t->elem, 1);
    lua_setfield(L, -2, "elem");
  }
  if (t->kind == IR_TY_PTR || t->kind == IR_TY_MEMREF || t->kind == IR_TY_TILE) {
    lb_set_str(L, "space", ir_memspace_name(t->space));
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
    lb_set_int(L, "swizzle", t->swizzle);
  }
  if (t->layout) {
    lb_push_owner(L, 1);
    lb_push_attr(L, t->layout, -1);
    lua_remove(L, -2);
    lua_setfield(L, -2, "layout");
  }
  if (t->kind == IR_TY_FLOAT) {
    static const char *const fn[] = {"f16", "bf16", "f32", "f64"};
    lb_set_str(L, "name", fn[t->fkind]);
  }
  if (t->kind == IR_TY_DIALECT) {
    lb_set_str(L, "name", ir_dialect_type_name(t->dialect_type));
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

/* t:layout() -> the layout of a tile type as a table, nil when it has none */
static int type_layout(lua_State *L) {
  const IrType *t = lb_check_type(L, 1);
  if (!t->layout) return 0;
  lb_push_owner(L, 1);
  lb_push_attr(L, t->layout, -1);
  return 1;
}

static int type_tostring(lua_State *L) {
  char *s = ir_type_to_string(lb_check_type(L, 1));
  lua_pushstring(L, s);
  ir_free(s);
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
#define LB_ATTR_MAX_DEPTH 4096

/* An attribute or type userdata of the context ctx (another context's is an error). */
static const void *attr_object(lua_State *L, IrContext *ctx, int idx, const char *mt) {
  const void *p = lb_test_object(L, idx, mt);
  if (p && lb_owner(L, idx)->ctx != ctx)
    lb_error(L, "attribute value: a %s of another context", mt + 6);
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
    if (depth >= LB_ATTR_MAX_DEPTH)
      lb_error(L, "attribute value: tables nested deeper than %d levels", LB_ATTR_MAX_DEPTH);
    if (!lua_checkstack(L, 8)) lb_error(L, "attribute value: out of Lua stack space");
    lua_pushvalue(L, idx);
    if (lua_rawget(L, seen) != LUA_TNIL)
      lb_error(L, "attribute value: a table that contains itself");
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
      if (n > (lua_Integer)UINT32_MAX)
        lb_error(L, "attribute value: an array of %lld elements", (long long)n);
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
  const IrType *t = lb_check_type_of(L, idx, NULL);
  if (want_float ? !ir_type_is_float(t) : !ir_type_is_intlike(t))
    lb_error(L, "expected %s type for the attribute",
             want_float ? "a float" : "an integer or index");
  return t;
}

/* core.attr_int(v [, type [, ctx]]), core.attr_float(v [, type [, ctx]]): the
** context is the type's, else ctx, else the default one. */
static int typed_attr(lua_State *L, bool is_float) {
  LbCtxArg c;
  lua_settop(L, 3); /* what lb_ctx_arg pushes must not land where the type is read */
  if (lua_isnoneornil(L, 2)) {
    c = lb_ctx_arg(L, 3);
  } else {
    lb_push_owner(L, 2);
    c = (LbCtxArg){lb_owner(L, 2)->ctx, lua_gettop(L)};
  }
  const IrType *t = typed_attr_type(L, 2, c.ctx, is_float);
  const IrAttr *a;
  if (is_float) {
    a = ir_attr_float(c.ctx, luaL_checknumber(L, 1), t);
  } else {
    int isint;
    lua_Integer v = lua_tointegerx(L, 1, &isint);
    uint32_t w = ir_type_bitwidth(t);
    if (!isint)
      return lb_error(L, "an integer constant of %u bits: expected an integer, got %s", w,
                      luaL_typename(L, 1));
    if (!ir_int_fits(v, w))
      return lb_error(L, "%lld is out of the range of a %u-bit integer", (long long)v, w);
    a = ir_attr_int(c.ctx, v, t);
  }
  lb_push_object(L, LB_ATTR, (void *)a, c.at);
  return 1;
}

static int core_attr_int(lua_State *L) { return typed_attr(L, false); }
static int core_attr_float(lua_State *L) { return typed_attr(L, true); }

/* core.attr_float_bits(bits, type): a float attribute from its bit pattern (inf, nan). */
static int core_attr_float_bits(lua_State *L) {
  lua_Integer bits = luaL_checkinteger(L, 1);
  const IrType *t = lb_check_type(L, 2);
  if (!ir_type_is_float(t)) return lb_error(L, "attr_float_bits: expected a float type");
  lb_push_owner(L, 2);
  lb_push_object(
      L, LB_ATTR,
      (void *)ir_attr_float(lb_ctx_of(L, 2), ir_float_from_bits((uint64_t)bits, t->fkind), t), -1);
  return 1;
}

/* core.emit_error(ctx, {file=, line=, col=}, message): append an error diagnostic. */
static int core_emit_error(lua_State *L) {
  LbContext *c = lb_check_context(L, 1);
  IrLoc loc = lb_opt_loc(L, 2, c->ctx);
  ir_error(c->ctx, loc, "%s", luaL_checkstring(L, 3));
  return 0;
}

static int core_attr_sym(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  LbCtxArg c = lb_ctx_arg(L, 2);
  lb_push_object(L, LB_ATTR, (void *)ir_attr_sym(c.ctx, s, n), c.at);
  return 1;
}

/* core.attr(luavalue [, ctx]) -> Attr: explicit conversion. */
static int core_attr(lua_State *L) {
  LbCtxArg c = lb_ctx_arg(L, 2);
  const IrAttr *a = lb_to_attr(L, c.ctx, 1);
  lb_push_object(L, LB_ATTR, (void *)a, c.at);
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
  lb_push_like(L, LB_TYPE, (void *)a->type, 1);
  return 1;
}

static int attr_kind(lua_State *L) {
  static const char *const names[] = {"int",  "float", "bool", "string",
                                      "type", "array", "dict", "symbol"};
  lua_pushstring(L, names[((const IrAttr *)lb_check_object(L, 1, LB_ATTR))->kind]);
  return 1;
}

/* }====================================================================== */

static const luaL_Reg type_methods[] = {{"info", type_info},
                                        {"kind", type_kind},
                                        {"layout", type_layout},
                                        {"id", lb_object_id},
                                        {NULL, NULL}};
static const luaL_Reg type_meta[] = {
    {"__tostring", type_tostring}, {"__eq", lb_object_eq}, {NULL, NULL}};

static const luaL_Reg attr_methods[] = {
    {"value", attr_value}, {"type", attr_type}, {"kind", attr_kind}, {NULL, NULL}};
static const luaL_Reg attr_meta[] = {
    {"__tostring", attr_tostring}, {"__eq", lb_object_eq}, {NULL, NULL}};

static const luaL_Reg type_functions[] = {
    {"type_int", core_type_int},         {"type_float", core_type_float},
    {"type_index", core_type_index},     {"type_none", core_type_none},
    {"type_ptr", core_type_ptr},         {"type_vector", core_type_vector},
    {"type_memref", core_type_memref},   {"type_tile", core_type_tile},
    {"type_dialect", core_type_dialect}, {"attr", core_attr},
    {"attr_int", core_attr_int},         {"attr_float", core_attr_float},
    {"attr_sym", core_attr_sym},         {"attr_float_bits", core_attr_float_bits},
    {"emit_error", core_emit_error},     {NULL, NULL}};

static const LbClass type_classes[] = {
    {LB_TYPE, type_meta, type_methods}, {LB_ATTR, attr_meta, attr_methods}, {NULL, NULL, NULL}};
const LbArea lb_area_types = {type_classes, type_functions};
