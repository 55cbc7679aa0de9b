/*
** l_dialect.c -- what the dialect tables say beyond an op's signature, for
** Lua and the docs generator: the attribute rows, PTX rows and LOWER rows of
** every op (added to core.ops() entries), the stamp rows (core.stamps()),
** the enum lists (core.enums()), the target's limits (core.limits()) and a
** kernel's decoded spec (op:kernel_spec()).
*/
#include <string.h>

#include "../dialects/cutlass.h"
#include "../ptx/ptx.h"
#include "lbind.h"

static const char *const kind_names[] = {"int",         "bool", "enum",       "string", "int list",
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
** threads, warps, has_cluster, entry_regs [, grid = {x, y, z}] [, min_ctas] [, sizes =
** {param = "grid_threads" | "grid_ctas"}]} of the kernel
** around op (op itself may be it); nil, message outside a kernel or when the
** spec is malformed. */
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
  if (ks.has_grid) {
    push_dims(L, ks.grid);
    lua_setfield(L, -2, "grid");
  }
  if (ks.min_ctas) lb_set_int(L, "min_ctas", ks.min_ctas);
  const IrAttr *sizes = ir_attr_dict_get(ir_op_attr(kernel_of(op), "kernel_spec"), "sizes");
  if (sizes && sizes->kind == IR_ATTR_DICT) { /* {param = "grid_threads" | "grid_ctas"} */
    lua_createtable(L, 0, (int)sizes->u.dict.n);
    for (uint32_t i = 0; i < sizes->u.dict.n; i++)
      if (sizes->u.dict.entries[i].attr->kind == IR_ATTR_STR) {
        lua_pushstring(L, sizes->u.dict.entries[i].attr->u.str.s);
        lua_setfield(L, -2, sizes->u.dict.entries[i].name);
      }
    lua_setfield(L, -2, "sizes");
  }
  lb_set_int(L, "entry_regs", kernel_entry_regs(&ks));
  return 1;
}

/* {======================================================================
** What the rows and the kernel decoders know about one op
** ======================================================================= */

/* Stack: -> attribute a (NULL: absent) as row s reads it: a well-formed value
** as op:attr gives it, else the row's default: an INT's when in its range
** (one outside stands for "absent": nil), a BOOL's, an ENUM's spelling, an
** empty table for INTS and STRS (C reads them as empty lists), else nil. The
** owning context is at ci. */
static void push_by_row(lua_State *L, const IrAttrSpec *s, const IrAttr *a, int ci) {
  if (a && ir_attr_spec_accepts(s, a)) {
    lb_push_attr(L, a, ci);
    return;
  }
  int64_t d = s->dflt;
  switch (s->kind) {
  case IR_AS_INT:
    if (d != IR_ATTR_REQUIRED && d >= s->lo && d <= s->hi) lua_pushinteger(L, d);
    else lua_pushnil(L);
    break;
  case IR_AS_BOOL: lua_pushboolean(L, d != IR_ATTR_REQUIRED && d != 0); break;
  case IR_AS_ENUM:
    if (d >= 0) lua_pushstring(L, s->names[d]);
    else lua_pushnil(L);
    break;
  case IR_AS_INTS:
  case IR_AS_STRS: lua_newtable(L); break;
  default: lua_pushnil(L);
  }
}

/* Stack: -> a DICT stamp's entries as a table, each read by its FIELD row. */
static void push_fields(lua_State *L, const IrStampSpec *st, const IrAttr *d, int ci) {
  lua_createtable(L, 0, (int)st->nfields);
  for (uint32_t f = 0; f < st->nfields; f++) {
    const char *name;
    size_t n = ir_attr_spec_name(&st->fields[f], &name);
    const IrAttr *e = NULL;
    for (uint32_t i = 0; i < d->u.dict.n && !e; i++)
      if (strncmp(d->u.dict.entries[i].name, name, n) == 0 && d->u.dict.entries[i].name[n] == '\0')
        e = d->u.dict.entries[i].attr;
    push_by_row(L, &st->fields[f], e, ci);
    lua_setfield(L, -2, st->fields[f].name);
  }
}

/* op:attr_or_default(name) -> the attribute as its row reads it (the op's
** ATTR row, or the stamp row that places `name` on ops of its kind): its value
** when set and well formed, else the row's default (push_by_row); a DICT
** stamp with FIELD rows as a table of its entries, each read by its row.
** Raises when no row names it (op:attr reads attributes without one). */
static int op_attr_or_default(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  size_t n;
  const char *name = luaL_checklstring(L, 2, &n);
  lb_push_owner(L, 1);
  int ci = lua_gettop(L);
  const IrAttr *a = ir_op_attr(op, name);
  uint32_t ns;
  const IrAttrSpec *rows = ir_op_attr_specs(op->kind, &ns);
  for (uint32_t i = 0; i < ns; i++) {
    const char *rn;
    if (ir_attr_spec_name(&rows[i], &rn) == n && memcmp(rn, name, n) == 0) {
      push_by_row(L, &rows[i], a, ci);
      return 1;
    }
  }
  int k = ir_stamp_lookup(op->kind, name, n);
  if (k < 0)
    return lb_error(
        L, "'%s' op has no attribute row or stamp '%s' (op:attr reads an attribute without one)",
        ir_op_name(op), name);
  const IrStampSpec *st = ir_stamp_spec((IrStampKind)k);
  if (st->nfields && a && ir_attr_spec_accepts(&st->value, a)) push_fields(L, st, a, ci);
  else push_by_row(L, &st->value, a, ci);
  return 1;
}

typedef struct PushAllocs {
  lua_State *L;
  int ci, n;
} PushAllocs;

static void push_alloc(IrOp *op, int64_t offset, int64_t bytes, void *ud) {
  PushAllocs *p = ud;
  lua_State *L = p->L;
  lua_createtable(L, 0, 4);
  lb_push_object(L, LB_OP, op, p->ci);
  lua_setfield(L, -2, "op");
  lb_set_int(L, "offset", offset);
  lb_set_int(L, "bytes", bytes);
  lb_set_bool(L, "dynamic", op->kind == OP_TILE_DYNAMIC_SHARED);
  lua_rawseti(L, -2, ++p->n);
}

/* op:shared_layout() -> {static_bytes, bytes, align, allocs = {{op, offset,
** bytes, dynamic}, ...}}: the shared memory of the kernel around op (op
** itself may be it) as convert-tile-to-nvvm lays it out (kernel.h,
** kernel_shared_layout); allocs in program order, offsets from the start of
** the block's shared memory. nil, message outside a kernel or when its sizes
** overflow 64 bits. */
static int op_shared_layout(lua_State *L) {
  IrOp *k = kernel_of(lb_check_op(L, 1));
  if (!k) {
    lua_pushnil(L);
    lua_pushliteral(L, "not inside a tile.kernel");
    return 2;
  }
  lb_push_owner(L, 1);
  PushAllocs p = {L, lua_gettop(L), 0};
  lua_createtable(L, 0, 4);
  lua_newtable(L);
  KernelSharedLayout s = kernel_shared_layout(k, push_alloc, &p);
  if (s.overflow) {
    lua_pushnil(L);
    lua_pushliteral(L, "the kernel's shared memory needs more bytes than 64 bits count");
    return 2;
  }
  lua_setfield(L, -2, "allocs");
  lb_set_int(L, "static_bytes", s.static_bytes);
  lb_set_int(L, "bytes", s.bytes);
  lb_set_int(L, "align", s.align);
  return 1;
}

/* agent:agent_warps() -> first, count: the warps of a tile.agent or a
** tileas.agent as the lowerings assign them (kernel_agent_first_warp). */
static int op_agent_warps(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  if (op->kind != OP_TILE_AGENT && op->kind != OP_TILEAS_AGENT)
    return lb_error(L, "agent_warps: expected a tile.agent or tileas.agent, got '%s'",
                    ir_op_name(op));
  lua_pushinteger(L, kernel_agent_first_warp(op));
  lua_pushinteger(L, kernel_agent_warps(op));
  return 2;
}

/* init:arrive_counts() -> full, empty: the arrivals per phase of the full and
** empty barriers of a cutlass.pipeline.init, as the verifier derives them and
** convert-cutlass-to-nvvm initializes them (cut_pipeline_arrive_counts). */
static int op_arrive_counts(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  if (op->kind != OP_CUTLASS_PIPELINE_INIT || op->noperands < 1)
    return lb_error(L, "arrive_counts: expected a cutlass.pipeline.init, got '%s'", ir_op_name(op));
  int64_t c[2];
  cut_pipeline_arrive_counts(op, c);
  lua_pushinteger(L, c[0]);
  lua_pushinteger(L, c[1]);
  return 2;
}

/* core.striped_unit(fragment type) -> the elements one ld/st of a
** block-striped move takes from a register fragment (cut_striped_unit). */
static int core_striped_unit(lua_State *L) {
  const IrType *t = lb_check_type(L, 1);
  if (t->kind != IR_TY_MEMREF && t->kind != IR_TY_VECTOR)
    return lb_error(L, "striped_unit: expected a memref or vector type");
  lua_pushinteger(L, cut_striped_unit(t));
  return 1;
}

/* }====================================================================== */

static const luaL_Reg dialect_functions[] = {{"enums", core_enums},
                                             {"limits", core_limits},
                                             {"stamps", core_stamps},
                                             {"striped_unit", core_striped_unit},
                                             {NULL, NULL}};

/* op:kernel_spec() and the others join the methods of the Op class (l_op.c). */
static const luaL_Reg op_methods[] = {
    {"kernel_spec", op_kernel_spec},     {"attr_or_default", op_attr_or_default},
    {"shared_layout", op_shared_layout}, {"agent_warps", op_agent_warps},
    {"arrive_counts", op_arrive_counts}, {NULL, NULL}};
static const LbClass dialect_classes[] = {{LB_OP, NULL, op_methods}, {NULL, NULL, NULL}};
const LbArea lb_area_dialect = {dialect_classes, dialect_functions};
