/*
** l_dialect.c -- what the dialect tables say beyond an op's signature, for
** Lua and the docs generator: the attribute rows, PTX rows and LOWER rows of
** every op (added to core.ops() entries), the stamp rows (core.stamps()),
** the enum lists (core.enums()), the target's limits (core.limits()) and a
** kernel's decoded spec (op:kernel_spec()).
*/
#include "../dialects/kernel.h"
#include "../ptx/ptx.h"
#include "lbind.h"

static const char *const kind_names[] = {"int", "bool", "enum", "string", "int list",
                                         "string list", "type", "dictionary", "any"};

/* Stack: op table -> op table. The row's default, when it has one. */
static void push_default(lua_State *L, const IrAttrSpec *s) {
  if (s->dflt == IR_ATTR_REQUIRED) return;
  switch (s->kind) {
  case IR_AS_INT: lua_pushinteger(L, s->dflt); break;
  case IR_AS_BOOL: lua_pushboolean(L, s->dflt != 0); break;
  case IR_AS_ENUM:
    if (s->dflt < 0) return;
    lua_pushstring(L, s->names[s->dflt]);
    break;
  default: return;
  }
  lua_setfield(L, -2, "default");
}

/* Stack: -> {name, kind, required, default, min, max, values, max_length, doc}. */
static void push_attr_spec(lua_State *L, const IrAttrSpec *s) {
  const char *name;
  size_t len = ir_attr_spec_name(s, &name);
  lua_createtable(L, 0, 8);
  lua_pushlstring(L, name, len);
  lua_setfield(L, -2, "name");
  lb_set_str(L, "kind", kind_names[s->kind]);
  lb_set_bool(L, "required", s->dflt == IR_ATTR_REQUIRED);
  push_default(L, s);
  if (s->kind == IR_AS_INT) {
    lb_set_int(L, "min", s->lo);
    lb_set_int(L, "max", s->hi);
  } else if (s->kind == IR_AS_INTS) {
    lb_set_int(L, "max_length", s->hi);
  } else if (s->kind == IR_AS_ENUM) {
    lua_newtable(L);
    for (int j = 0; s->names[j]; j++) {
      lua_pushstring(L, s->names[j]);
      lua_rawseti(L, -2, j + 1);
    }
    lua_setfield(L, -2, "values");
  }
  lb_set_str(L, "doc", s->doc);
}

/* Stack: -> list of attribute rows (push_attr_spec). */
static void push_attributes(lua_State *L, IrOpKind k) {
  uint32_t n;
  const IrAttrSpec *s = ir_op_attr_specs(k, &n);
  lua_createtable(L, (int)n, 0);
  for (uint32_t i = 0; i < n; i++) {
    push_attr_spec(L, &s[i]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
}

void lb_push_op_tables(lua_State *L, int kind) {
  IrOpKind k = (IrOpKind)kind;
  push_attributes(L, k);
  lua_setfield(L, -2, "attributes");
  bool hand;
  const char *ptx = ir_op_ptx(k, &hand);
  if (ptx) {
    lb_set_str(L, "ptx", ptx);
    lb_set_bool(L, "ptx_by_hand", hand);
  }
  int to = ir_op_lowers_to(k);
  if (to >= 0) {
    lb_set_str(L, "lowers_to", ir_op_info((IrOpKind)to)->name);
  }
}

/* core.stamps() -> list of the stamp rows, in table order: the attribute
** row of each (name, kind, default, range, doc), its `ops` (the names of the
** ops that may carry it) and a dictionary's `fields` (attribute rows). */
static int core_stamps(lua_State *L) {
  lua_createtable(L, STAMP__COUNT, 0);
  for (int k = 0; k < STAMP__COUNT; k++) {
    const IrStampSpec *st = ir_stamp_spec((IrStampKind)k);
    push_attr_spec(L, &st->value);
    lb_set_bool(L, "required", false);
    IrOpKind on[64];
    uint32_t n = ir_stamp_ops((IrStampKind)k, on, 64);
    lua_createtable(L, (int)n, 0);
    for (uint32_t i = 0; i < n && i < 64; i++) {
      lua_pushstring(L, ir_op_info(on[i])->name);
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    lua_setfield(L, -2, "ops");
    if (st->nfields) {
      lua_createtable(L, (int)st->nfields, 0);
      for (uint32_t f = 0; f < st->nfields; f++) {
        push_attr_spec(L, &st->fields[f]);
        lua_rawseti(L, -2, (lua_Integer)f + 1);
      }
      lua_setfield(L, -2, "fields");
    }
    lua_rawseti(L, -2, k + 1);
  }
  return 1;
}

/* core.enums() -> {list name = {spelling, ...}, ...} */
static int core_enums(lua_State *L) {
  lua_newtable(L);
#define PUSH_LIST(Lst, lname)                                                                      \
  lua_newtable(L);                                                                                 \
  for (int i = 0; Lst##_names[i]; i++) {                                                           \
    lua_pushstring(L, Lst##_names[i]);                                                             \
    lua_rawseti(L, -2, i + 1);                                                                     \
  }                                                                                                \
  lua_setfield(L, -2, lname);
  IR_ENUM_LISTS(PUSH_LIST, PUSH_LIST)
#undef PUSH_LIST
  return 1;
}

/* core.limits() -> {max_threads = 1024, ...} (sm90_limits.h) */
static int core_limits(lua_State *L) {
  lua_newtable(L);
#define PUSH_LIMIT(name, value, doc) lb_set_int(L, #name, value);
  SM90_LIMIT_LIST(PUSH_LIMIT)
#undef PUSH_LIMIT
  return 1;
}

static void push_dims(lua_State *L, const int64_t d[3]) {
  lua_createtable(L, 3, 0);
  for (int i = 0; i < 3; i++) {
    lua_pushinteger(L, d[i]);
    lua_rawseti(L, -2, i + 1);
  }
}

/* op:kernel_spec() -> {block = {x, y, z}, cluster = {x, y, z}, smem, num_ctas,
** threads, warps, has_cluster} of the kernel around op (op itself may be it);
** nil, message outside a kernel or when the spec is malformed. */
static int op_kernel_spec(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  if (!kernel_of(op)) {
    lua_pushnil(L);
    lua_pushliteral(L, "not inside a tile.kernel");
    return 2;
  }
  KernelSpec ks = kernel_spec_of(op);
  if (!ks.ok) {
    lua_pushnil(L);
    lua_pushliteral(L, "the kernel_spec is malformed (the verifier says how)");
    return 2;
  }
  lua_createtable(L, 0, 7);
  push_dims(L, ks.block);
  lua_setfield(L, -2, "block");
  push_dims(L, ks.cluster);
  lua_setfield(L, -2, "cluster");
  lb_set_int(L, "smem", ks.smem);
  lb_set_int(L, "num_ctas", ks.ctas);
  lb_set_int(L, "threads", ks.threads);
  lb_set_int(L, "warps", ks.warps);
  lb_set_bool(L, "has_cluster", ks.has_cluster);
  return 1;
}

static const luaL_Reg dialect_functions[] = {
    {"enums", core_enums}, {"limits", core_limits}, {"stamps", core_stamps}, {NULL, NULL}};

/* op:kernel_spec() joins the methods of the Op class (l_op.c). */
static const luaL_Reg op_methods[] = {{"kernel_spec", op_kernel_spec}, {NULL, NULL}};
static const LbClass dialect_classes[] = {{LB_OP, NULL, op_methods}, {NULL, NULL, NULL}};
const LbArea lb_area_dialect = {dialect_classes, dialect_functions};
