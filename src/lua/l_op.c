/*
** l_op.c -- Lua bindings of IR operations, regions, blocks and values:
** core.op_create and the Op, Region, Block and Value methods.
** Indices in the Lua API are 1-based: op:result(1) is the first result.
*/
#include <stdlib.h>
#include <string.h>

#include "../dialects/dialects.h"
#include "l_ir.h"

/* {======================================================================
** Operations
** ======================================================================= */

static uint32_t list_len(lua_State *L, int idx) {
  if (lua_isnoneornil(L, idx)) return 0;
  luaL_checktype(L, idx, LUA_TTABLE);
  return (uint32_t)luaL_len(L, idx);
}

/* The value at idx when it is an object of class mt and of ctx, else NULL
** (*other: it is one of another context). */
static void *ctx_object(lua_State *L, int idx, const char *mt, IrContext *ctx, bool *other) {
  void *p = lb_test_object(L, idx, mt);
  *other = p && lb_ctx_of(L, idx) != ctx;
  return *other ? NULL : p;
}

/* Element #i + 1 of the list at idx, as ctx_object. */
static void *list_object(lua_State *L, int idx, uint32_t i, const char *mt, IrContext *ctx,
                         bool *other) {
  lua_geti(L, idx, (lua_Integer)i + 1);
  void *p = ctx_object(L, -1, mt, ctx, other);
  lua_pop(L, 1);
  return p;
}

/* The kind of an op name; memoized by the name's pointer (Lua interns short
** strings, so one name is one pointer), checked against the table's name. */
static int op_kind_of(const char *name, size_t len) {
  static _Thread_local struct {
    const char *p;
    int kind;
  } memo[128];
  unsigned h = (unsigned)(((uintptr_t)name >> 4) % 128);
  if (memo[h].p == name && strcmp(ir_op_info((IrOpKind)memo[h].kind)->name, name) == 0)
    return memo[h].kind;
  int kind = ir_op_lookup(name, len);
  if (kind >= 0) memo[h].p = name, memo[h].kind = kind;
  return kind;
}

/* core.op_create(ctx, name, operands, result_types, attrs, nregions, block, before, loc,
** check, first): creates an op (in ctx; nil: the default context, as tl.op builds;
** result_types a list, or one type alone: tl.op1's, no table an op);
** inserts it at the end of `block` or before `before` when given. check = true runs the
** signature check at once and raises on failure. Returns the op, or with first = true its
** first result (tl.op1: one userdata instead of the op's and then the result's). */
static int core_op_create(lua_State *L) {
  if (lua_isnil(L, 1)) { /* (one binding call an op instead of two) */
    lb_default_context(L);
    lua_replace(L, 1);
  }
  LbContext *c = lb_check_context(L, 1);
  size_t nlen;
  const char *name = luaL_checklstring(L, 2, &nlen);
  int kind = op_kind_of(name, nlen);
  if (kind < 0) {
    const char *near = ir_op_closest(name, nlen);
    return lb_error(L, "unknown operation '%s'%s%s%s", name, near ? "; did you mean '" : "",
                    near ? near : "", near ? "'?" : "");
  }
  bool one_type = lua_type(L, 4) == LUA_TUSERDATA;
  uint32_t nopd = list_len(L, 3), nres = one_type ? 1 : list_len(L, 4);
  IrValue *opd_buf[16];
  const IrType *rty_buf[16];
  IrValue **opds = nopd < 16 ? opd_buf : ir_malloc((nopd + 1) * sizeof *opds);
  const IrType **rtys = nres < 16 ? rty_buf : ir_malloc((nres + 1) * sizeof *rtys);
  /* Collect operands and types; on a bad argument free and raise. */
  const char *bad = NULL;
  uint32_t badi = 0;
  bool other = false;
  for (uint32_t i = 0; i < nopd && !bad; i++)
    if (!(opds[i] = list_object(L, 3, i, LB_VALUE, c->ctx, &other)))
      bad = other ? "operand (of another context)" : "operand", badi = i;
  for (uint32_t i = 0; i < nres && !bad; i++)
    if (!(rtys[i] = one_type ? ctx_object(L, 4, LB_TYPE, c->ctx, &other)
                             : list_object(L, 4, i, LB_TYPE, c->ctx, &other)))
      bad = other ? "result type (of another context)" : "result type", badi = i;
  lua_Integer nreg = luaL_optinteger(L, 6, ir_op_info((IrOpKind)kind)->nregions);
  if (!bad && (nreg < 0 || nreg > 16)) bad = "region count", badi = 0;
  IrLoc loc =
      bad ? ir_loc_unknown() : lb_opt_loc(L, 9, c->ctx); /* (raises only on a bad loc table) */
  IrOp *op =
      bad ? NULL
          : ir_op_create(c->ctx, (IrOpKind)kind, loc, nopd, opds, nres, rtys, (uint32_t)nreg);
  if (opds != opd_buf) ir_free(opds);
  if (rtys != rty_buf) ir_free((void *)rtys);
  if (bad) return lb_error(L, "'%s': bad %s #%d", name, bad, (int)badi + 1);
  if (!lua_isnoneornil(L, 5)) {
    luaL_checktype(L, 5, LUA_TTABLE);
    lua_pushnil(L);
    while (lua_next(L, 5)) {
      if (lua_type(L, -2) != LUA_TSTRING)
        return lb_error(L, "'%s': attribute names are strings", name);
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
  if (block && lb_ctx_of(L, 7) != c->ctx)
    return lb_error(L, "'%s': the block belongs to another context", name);
  if (before && lb_ctx_of(L, 8) != c->ctx)
    return lb_error(L, "'%s': the insertion point belongs to another context", name);
  if (before) {
    if (!before->parent) return lb_error(L, "'%s': insertion point is not in a block", name);
    ir_op_insert_before(before, op);
  } else if (block) {
    ir_block_append(block, op);
  }
  if (lua_toboolean(L, 11)) {
    if (op->nresults == 0) return lb_error(L, "'%s' has no result", name);
    lb_push_object(L, LB_VALUE, ir_op_result(op, 0), 1);
  } else {
    lb_push_object(L, LB_OP, op, 1);
  }
  return 1;
}

static int op_name(lua_State *L) {
  lua_pushstring(L, ir_op_name(lb_check_op(L, 1)));
  return 1;
}

static uint32_t check_index(lua_State *L, int idx, uint32_t n, const char *what) {
  lua_Integer i = luaL_checkinteger(L, idx);
  if (i < 1 || (lua_Unsigned)i > n)
    lb_error(L, "%s index %d out of range [1, %d]", what, (int)i, (int)n);
  return (uint32_t)(i - 1);
}

static IrValue *check_value_of(lua_State *L, int idx, IrContext *ctx) {
  IrValue *v = lb_check_value(L, idx);
  if (lb_ctx_of(L, idx) != ctx) lb_error(L, "value belongs to another context");
  return v;
}

static int op_set_operand(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  uint32_t i = check_index(L, 2, op->noperands, "operand");
  ir_op_set_operand(op, i, check_value_of(L, 3, lb_ctx_of(L, 1)));
  return 0;
}

static int op_set_operands(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  uint32_t n = list_len(L, 2);
  IrValue **vals = ir_malloc((n + 1) * sizeof *vals);
  for (uint32_t i = 0; i < n; i++) {
    bool other;
    vals[i] = list_object(L, 2, i, LB_VALUE, lb_ctx_of(L, 1), &other);
    if (!vals[i]) {
      ir_free(vals);
      return lb_error(L, "set_operands: element #%d is not a value%s", (int)i + 1,
                      other ? " of the op's context" : "");
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
  ir_op_set_attr(op, name, lua_isnoneornil(L, 3) ? NULL : lb_to_attr(L, lb_ctx_of(L, 1), 3));
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

static int op_erase(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  if (!ir_op_results_unused(op))
    return lb_error(L, "cannot erase '%s': its results are still used", ir_op_name(op));
  ir_op_erase(op);
  return 0;
}

/* Erase op, then each op that defined one of its operands (in their order,
** depth first) that scope encloses, is removable and has no uses left. */
static void erase_with_operands(IrOp *op, const IrOp *scope) {
  IrOp *buf[8];
  uint32_t n = op->noperands;
  IrOp **defs = n <= 8 ? buf : ir_malloc(n * sizeof *defs);
  for (uint32_t i = 0; i < n; i++)
    defs[i] = op->operands[i].value ? op->operands[i].value->def : NULL;
  ir_op_erase(op);
  for (uint32_t i = 0; i < n; i++) {
    IrOp *d = defs[i];
    if (d && !d->erased && ir_op_is_ancestor(scope, d) && ir_op_is_removable(d) &&
        ir_op_results_unused(d))
      erase_with_operands(d, scope);
  }
  if (defs != buf) ir_free(defs);
}

/* op:erase_with_operands(scope): op:erase(), then the ops inside scope that
** computed only its operands, the same way: no userdata an op. */
static int op_erase_with_operands(lua_State *L) {
  IrOp *op = lb_check_op(L, 1), *scope = lb_check_op(L, 2);
  if (!ir_op_results_unused(op))
    return lb_error(L, "cannot erase '%s': its results are still used", ir_op_name(op));
  erase_with_operands(op, scope);
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
  lb_same_context(L, 1, before ? 3 : 2, "insert");
  if (before && !before->parent)
    return lb_error(L, "insert: the op to insert before is not in a block");
  lb_not_inside(L, op, before ? before : ir_block_parent_op(block), "insert");
  if (op == before) return 0;
  if (op->parent) ir_op_unlink(op);
  if (before) ir_op_insert_before(before, op);
  else ir_block_append(block, op);
  return 0;
}

static int op_move_before(lua_State *L) {
  IrOp *op = lb_check_op(L, 1), *pos = lb_check_op(L, 2);
  lb_same_context(L, 1, 2, "move_before");
  if (op == pos || !pos->parent) return lb_error(L, "move_before: bad position");
  lb_not_inside(L, op, pos, "move_before");
  ir_op_move_before(op, pos);
  return 0;
}

/* op:take_regions(other): move the blocks of other's regions into op's (empty) regions. */
static int op_take_regions(lua_State *L) {
  IrOp *op = lb_check_op(L, 1), *other = lb_check_op(L, 2);
  lb_same_context(L, 1, 2, "take_regions");
  if (op == other) return 0;
  lb_not_inside(L, other, op, "take_regions");
  if (op->nregions != other->nregions) return lb_error(L, "take_regions: region counts differ");
  for (uint32_t r = 0; r < op->nregions; r++) {
    if (op->regions[r].first)
      return lb_error(L, "take_regions: region %d is not empty", (int)r + 1);
    IrRegion *src = &other->regions[r], *dst = &op->regions[r];
    for (IrBlock *b = src->first; b; b = b->parent == dst ? b->next : NULL)
      b->parent = dst;
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
  IrOp *c = ir_op_clone(lb_ctx_of(L, 1), op, &map);
  ir_mapping_free(&map);
  lb_push_like(L, LB_OP, c, 1);
  return 1;
}

/* op:verify() -> true | true, warnings, list | false, message, list */
static int op_verify(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  IrContext *ctx = lb_ctx_of(L, 1);
  ir_diag_clear(ctx);
  if (ir_verify(op) == IR_OK) {
    lua_pushboolean(L, 1);
    if (!ir_diag_pending(ctx)) return 1;
    return lb_return_diagnostics(L, ctx); /* warnings */
  }
  lua_pushboolean(L, 0);
  return lb_return_diagnostics(L, ctx);
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
  lb_push_like(L, LB_OP, op, w->self);
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

typedef struct WalkList {
  lua_State *L;
  int self, list, index;
  lua_Integer n;
} WalkList;

static bool walk_list_cb(IrOp *op, void *ud) {
  WalkList *w = ud;
  lua_State *L = w->L;
  lb_push_like(L, LB_OP, op, w->self);
  lua_rawseti(L, w->list, ++w->n);
  lua_pushlightuserdata(L, op); /* (op:id()) */
  lua_pushinteger(L, w->n);
  lua_rawset(L, w->index);
  return true;
}

/* op:walk_list() -> the ops op:walk visits (pre-order, op first) as a list,
** and {op:id() -> its position}: no call into Lua an op. */
static int op_walk_list(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  lua_settop(L, 1);
  lua_newtable(L);
  lua_newtable(L);
  WalkList w = {L, 1, 2, 3, 0};
  ir_walk_pre(op, walk_list_cb, &w);
  return 2;
}

/* The pre-order walks of op_walk_counterparts: each op's position (from 1). */
typedef struct WalkCount {
  lua_State *L;
  int want, found; /* {op -> its slot}, {position -> the slot} */
  lua_Integer n;
} WalkCount;

static bool positions_cb(IrOp *op, void *ud) {
  WalkCount *w = ud;
  w->n++;
  if (lua_rawgetp(w->L, w->want, op) == LUA_TNUMBER) lua_rawseti(w->L, w->found, w->n);
  else lua_pop(w->L, 1);
  return true;
}

typedef struct WalkPick {
  lua_State *L;
  int self, found, out;
  lua_Integer n;
} WalkPick;

static bool pick_cb(IrOp *op, void *ud) {
  WalkPick *w = ud;
  if (lua_rawgeti(w->L, w->found, ++w->n) == LUA_TNUMBER) {
    lua_Integer slot = lua_tointeger(w->L, -1);
    lb_push_like(w->L, LB_OP, op, w->self);
    lua_rawseti(w->L, w->out, slot);
  }
  lua_pop(w->L, 1);
  return true;
}

/* op:walk_counterparts(other, ops) -> for each op of the list ops (ops op:walk
** visits), the op of other's walk at the same position (other a clone of op:
** the copies of ops), nil where other's walk is shorter; two walks, no
** userdata but for the ops returned. */
static int op_walk_counterparts(lua_State *L) {
  IrOp *op = lb_check_op(L, 1), *other = lb_check_op(L, 2);
  luaL_checktype(L, 3, LUA_TTABLE);
  lua_settop(L, 3);
  lua_newtable(L); /* 4: {op -> slot} */
  for (lua_Integer i = 1, n = luaL_len(L, 3); i <= n; i++) {
    lua_rawgeti(L, 3, i);
    IrOp *o = lb_test_object(L, -1, LB_OP);
    if (!o) return luaL_error(L, "walk_counterparts: ops[%d] is not an op", (int)i);
    lua_pop(L, 1);
    lua_pushinteger(L, i);
    lua_rawsetp(L, 4, o);
  }
  lua_newtable(L); /* 5: {position -> slot} */
  WalkCount c = {L, 4, 5, 0};
  ir_walk_pre(op, positions_cb, &c);
  lua_newtable(L); /* 6: the counterparts */
  WalkPick p = {L, 2, 5, 6, 0};
  ir_walk_pre(other, pick_cb, &p);
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
  op->loc = lb_opt_loc(L, 2, lb_ctx_of(L, 1));
  return 0;
}

/* op:error(msg): raise "file:line: 'name' op msg" at the op's location. */
static int op_error(lua_State *L) {
  IrOp *op = lb_check_op(L, 1);
  const char *msg = luaL_checkstring(L, 2);
  if (op->loc.file)
    lua_pushfstring(L, "%s:%d: '%s' op %s", op->loc.file, op->loc.line, ir_op_name(op), msg);
  else lua_pushfstring(L, "'%s' op %s", ir_op_name(op), msg);
  return lua_error(L);
}

/* }====================================================================== */

/* {======================================================================
** Regions, blocks and values
** ======================================================================= */

/* r:add_block([types]) -> a new block appended to the region, with arguments of those types. */
static int region_add_block(lua_State *L) {
  IrRegion *r = lb_check_region(L, 1);
  IrContext *ctx = lb_ctx_of(L, 1);
  IrBlock *b = ir_block_create(ctx);
  uint32_t n = list_len(L, 2);
  for (uint32_t i = 0; i < n; i++) {
    bool other;
    const IrType *t = list_object(L, 2, i, LB_TYPE, ctx, &other);
    if (!t)
      return lb_error(L, "add_block: argument type #%d is not a type%s", (int)i + 1,
                      other ? " of the region's context" : "");
    ir_block_add_arg(ctx, b, t);
  }
  ir_region_append_block(r, b);
  lb_push_like(L, LB_BLOCK, b, 1);
  return 1;
}

static int block_add_arg(lua_State *L) {
  IrBlock *b = lb_check_block(L, 1);
  const IrType *t = lb_check_type_of(L, 2, lb_ctx_of(L, 1));
  lb_push_like(L, LB_VALUE, ir_block_add_arg(lb_ctx_of(L, 1), b, t), 1);
  return 1;
}

static int value_replace_all_uses(lua_State *L) {
  IrValue *v = lb_check_value(L, 1);
  IrValue *w = check_value_of(L, 2, lb_ctx_of(L, 1));
  if (v != w) ir_value_replace_all_uses(v, w);
  return 0;
}

static int value_tostring(lua_State *L) {
  IrValue *v = lb_check_value(L, 1);
  char *t = ir_type_to_string(v->type);
  if (v->def)
    lua_pushfstring(L, "value #%d of '%s' : %s", (int)v->index + 1, ir_op_name(v->def), t);
  else lua_pushfstring(L, "block argument #%d : %s", (int)v->index + 1, t);
  ir_free(t);
  return 1;
}

/* }====================================================================== */

/* {======================================================================
** Accessors: the methods that push what their receiver (#1) holds
** ======================================================================= */

/* The receiver `self` of a method of class C (op, region, block, value). */
#define SELF_op IrOp
#define SELF_region IrRegion
#define SELF_block IrBlock
#define SELF_value IrValue
#define SELF(C) SELF_##C *self = lb_check_##C(L, 1)

/* C:name() -> the object expr (class mt, self's owner; nil for NULL). */
#define LINK_METHOD(C, name, mt, expr)                                                             \
  static int C##_##name(lua_State *L) {                                                            \
    SELF(C);                                                                                       \
    lb_push_like(L, mt, (void *)(expr), 1);                                                        \
    return 1;                                                                                      \
  }
/* C:name(i) -> the object expr of the 0-based i, one of n (`what`s). */
#define INDEX_METHOD(C, name, mt, n, expr, what)                                                   \
  static int C##_##name(lua_State *L) {                                                            \
    SELF(C);                                                                                       \
    uint32_t i = check_index(L, 2, n, what);                                                       \
    lb_push_like(L, mt, (void *)(expr), 1);                                                        \
    return 1;                                                                                      \
  }
/* C:name() -> {objects}: expr for each 0-based i below n. */
#define ARRAY_METHOD(C, name, mt, n, expr)                                                         \
  static int C##_##name(lua_State *L) {                                                            \
    SELF(C);                                                                                       \
    lua_createtable(L, (int)(n), 0);                                                               \
    for (uint32_t i = 0; i < (n); i++) {                                                           \
      lb_push_like(L, mt, (void *)(expr), 1);                                                      \
      lua_rawseti(L, -2, (lua_Integer)i + 1);                                                      \
    }                                                                                              \
    return 1;                                                                                      \
  }
/* C:name() -> {objects}: expr for each `it` of the chain of T from first. */
#define CHAIN_METHOD(C, name, mt, T, first, expr)                                                  \
  static int C##_##name(lua_State *L) {                                                            \
    SELF(C);                                                                                       \
    lua_newtable(L);                                                                               \
    int i = 1;                                                                                     \
    for (T *it = first; it; it = it->next) {                                                       \
      lb_push_like(L, mt, expr, 1);                                                                \
      lua_rawseti(L, -2, i++);                                                                     \
    }                                                                                              \
    return 1;                                                                                      \
  }
/* C:name() -> an integer or a boolean. */
#define INT_METHOD(C, name, expr)                                                                  \
  static int C##_##name(lua_State *L) {                                                            \
    SELF(C);                                                                                       \
    lua_pushinteger(L, expr);                                                                      \
    return 1;                                                                                      \
  }
#define BOOL_METHOD(C, name, expr)                                                                 \
  static int C##_##name(lua_State *L) {                                                            \
    SELF(C);                                                                                       \
    lua_pushboolean(L, expr);                                                                      \
    return 1;                                                                                      \
  }

INT_METHOD(op, nresults, self->nresults)
INT_METHOD(op, noperands, self->noperands)
INT_METHOD(op, nregions, self->nregions)
INDEX_METHOD(op, result, LB_VALUE, self->nresults, &self->results[i], "result")
INDEX_METHOD(op, operand, LB_VALUE, self->noperands, self->operands[i].value, "operand")
INDEX_METHOD(op, region, LB_REGION, self->nregions, &self->regions[i], "region")
ARRAY_METHOD(op, results, LB_VALUE, self->nresults, &self->results[i])
ARRAY_METHOD(op, operands, LB_VALUE, self->noperands, self->operands[i].value)
LINK_METHOD(op, parent, LB_OP, ir_op_parent_op(self))
LINK_METHOD(op, block, LB_BLOCK, self->parent)
LINK_METHOD(op, next, LB_OP, self->next)
LINK_METHOD(op, prev, LB_OP, self->prev)
BOOL_METHOD(op, is_pure, ir_op_is_pure(self))
BOOL_METHOD(op, is_removable, ir_op_is_removable(self))

CHAIN_METHOD(region, blocks, LB_BLOCK, IrBlock, self->first, it)
LINK_METHOD(region, entry, LB_BLOCK, self->first)
LINK_METHOD(region, parent, LB_OP, self->parent)

INT_METHOD(block, nargs, self->nargs)
INDEX_METHOD(block, arg, LB_VALUE, self->nargs, self->args[i], "argument")
ARRAY_METHOD(block, args, LB_VALUE, self->nargs, self->args[i])
CHAIN_METHOD(block, ops, LB_OP, IrOp, self->first, it)
LINK_METHOD(block, first, LB_OP, self->first)
LINK_METHOD(block, last, LB_OP, self->last)
LINK_METHOD(block, terminator, LB_OP, ir_block_terminator(self))
LINK_METHOD(block, parent, LB_OP, ir_block_parent_op(self))

LINK_METHOD(value, type, LB_TYPE, self->type)
LINK_METHOD(value, def, LB_OP, self->def)
LINK_METHOD(value, block, LB_BLOCK, self->block)
INT_METHOD(value, index, self->index + 1)
INT_METHOD(value, nuses, ir_value_num_uses(self))
CHAIN_METHOD(value, users, LB_OP, IrUse, self->uses, it->owner)

/* }====================================================================== */

/* op:context(): the context the op belongs to (so that builders can make more of its IR). */
static int op_context(lua_State *L) {
  lb_check_op(L, 1);
  lua_getiuservalue(L, 1, 1);
  return 1;
}

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
                                      {"erase_with_operands", op_erase_with_operands},
                                      {"unlink", op_unlink},
                                      {"insert", op_insert},
                                      {"move_before", op_move_before},
                                      {"take_regions", op_take_regions},
                                      {"clone", op_clone},
                                      {"walk_list", op_walk_list},
                                      {"walk_counterparts", op_walk_counterparts},
                                      {"verify", op_verify},
                                      {"print", op_print},
                                      {"walk", op_walk},
                                      {"loc", op_loc},
                                      {"set_loc", op_set_loc},
                                      {"is_pure", op_is_pure},
                                      {"is_removable", op_is_removable},
                                      {"error", op_error},
                                      {"context", op_context},
                                      {"id", lb_object_id},
                                      {NULL, NULL}};
static const luaL_Reg op_meta[] = {
    {"__tostring", op_tostring}, {"__eq", lb_object_eq}, {NULL, NULL}};

static const luaL_Reg region_methods[] = {
    {"blocks", region_blocks}, {"entry", region_entry}, {"add_block", region_add_block},
    {"parent", region_parent}, {"id", lb_object_id},    {NULL, NULL}};
static const luaL_Reg block_methods[] = {{"args", block_args},
                                         {"arg", block_arg},
                                         {"nargs", block_nargs},
                                         {"add_arg", block_add_arg},
                                         {"ops", block_ops},
                                         {"first", block_first},
                                         {"last", block_last},
                                         {"terminator", block_terminator},
                                         {"parent", block_parent},
                                         {"id", lb_object_id},
                                         {NULL, NULL}};
static const luaL_Reg value_methods[] = {{"type", value_type},
                                         {"def", value_def},
                                         {"owner_block", value_block},
                                         {"index", value_index},
                                         {"nuses", value_nuses},
                                         {"users", value_users},
                                         {"replace_all_uses", value_replace_all_uses},
                                         {"id", lb_object_id},
                                         {NULL, NULL}};
static const luaL_Reg value_meta[] = {
    {"__tostring", value_tostring}, {"__eq", lb_object_eq}, {NULL, NULL}};
static const luaL_Reg plain_meta[] = {{"__eq", lb_object_eq}, {NULL, NULL}};

static const luaL_Reg op_functions[] = {{"op_create", core_op_create}, {NULL, NULL}};

static const LbClass op_classes[] = {{LB_OP, op_meta, op_methods},
                                     {LB_REGION, plain_meta, region_methods},
                                     {LB_BLOCK, plain_meta, block_methods},
                                     {LB_VALUE, value_meta, value_methods},
                                     {NULL, NULL, NULL}};
const LbArea lb_area_ops = {op_classes, op_functions};
