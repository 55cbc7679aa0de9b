/*
** l_parse.c -- the builder behind the textual-IR parser (lua/tilua/parser.lua).
** The parser reads with LPeg and hands each op to this builder as it goes:
** values are small integers (the parser maps names to them), nesting is a
** stack here (so the depth of regions is bounded by memory alone, not by the
** C stack or LPeg's), and nothing of an op is boxed in Lua but its type and
** attribute objects, which the parser memoizes by their text.
**
**   pb = core.parse_builder(ctx, file)
**   pb:top()                                  ops go into a fresh module's body
**   id = pb:op(name, nres, {ids}, {types}, dict|nil, has_regions, line, col)
**                                             the op's first result id (0: none);
**                                             with regions it becomes the open op
**                                             (its region count: as many as the
**                                             text gives, known at pb:close)
**   id = pb:block({types})                    a block of the open op's region; its
**                                             first argument's id; ops go into it
**   pb:next_region()                          the open op's next region
**   pb:close([file, line, col])               the open op is done (a loc(...) for it)
**   pb:loc([file,] line, col)                 the location of the last op built
**   op = pb:result()                          the top-level op (the module)
**   pb:depth(), pb:region()                   where the parser stands
*/
#include <stdlib.h>
#include <string.h>

#include "l_ir.h"

#define LB_PARSE_BUILDER "tilua.ParseBuilder"
#define PB_MAX_REGIONS 16

typedef struct Open {
  IrOp *op;
  uint32_t region;  /* the region being filled */
  IrBlock *block;   /* the block being filled (NULL: none yet) */
} Open;

typedef struct PB {
  IrContext *ctx;
  const char *file; /* interned */
  IrValue **vals;   /* id -> value; id 0 is unused */
  size_t nvals, capvals;
  Open *stack; /* stack[0]: the top level (op NULL, block: where top ops go) */
  size_t depth, capstack;
  IrOp *top_op, *last;
} PB;

static PB *check_pb(lua_State *L) {
  PB *p = luaL_checkudata(L, 1, LB_PARSE_BUILDER);
  if (!p->ctx) luaL_error(L, "parse builder used after it was collected");
  lua_getiuservalue(L, 1, 1); /* its context must still be open */
  if (!((LbContext *)lua_touserdata(L, -1))->ctx) lb_error(L, "attempt to use an object of a closed tilua context");
  lua_pop(L, 1);
  return p;
}

static int pb_gc(lua_State *L) {
  PB *p = luaL_checkudata(L, 1, LB_PARSE_BUILDER);
  free(p->vals);
  free(p->stack);
  p->vals = NULL;
  p->stack = NULL;
  p->ctx = NULL;
  return 0;
}

static void grow(lua_State *L, void **a, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return;
  size_t n = *cap ? *cap : 64;
  while (n < need) n *= 2;
  void *m = realloc(*a, n * elem);
  if (!m) luaL_error(L, "out of memory");
  *a = m;
  *cap = n;
}

/* Give ids to n values; the first one's id. */
static lua_Integer add_values(lua_State *L, PB *p, IrValue *v, uint32_t n, size_t stride) {
  if (!n) return 0;
  grow(L, (void **)&p->vals, &p->capvals, p->nvals + n + 1, sizeof *p->vals);
  if (!p->nvals) p->vals[p->nvals++] = NULL;
  lua_Integer first = (lua_Integer)p->nvals;
  for (uint32_t i = 0; i < n; i++) p->vals[p->nvals++] = (IrValue *)((char *)v + i * stride);
  return first;
}

/* core.parse_builder(ctx, file) */
static int core_parse_builder(lua_State *L) {
  LbContext *c = lb_check_context(L, 1);
  const char *file = luaL_checkstring(L, 2);
  PB *p = lua_newuserdatauv(L, sizeof *p, 1);
  memset(p, 0, sizeof *p);
  luaL_setmetatable(L, LB_PARSE_BUILDER);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
  p->ctx = c->ctx;
  p->file = ir_intern_cstr(c->ctx, file);
  grow(L, (void **)&p->stack, &p->capstack, 1, sizeof *p->stack);
  memset(p->stack, 0, sizeof *p->stack);
  p->depth = 1;
  return 1;
}

/* pb:top(): a module to hold the top-level ops (the text has no `module {`). */
static int pb_top(lua_State *L) {
  PB *p = check_pb(L);
  IrOp *m = ir_op_create(p->ctx, OP_MODULE, ir_loc(p->ctx, p->file, 1, 1), 0, NULL, 0, NULL, 1);
  p->top_op = m;
  p->stack[0].block = ir_region_ensure_block(p->ctx, &m->regions[0]);
  return 0;
}

static uint32_t list_len(lua_State *L, int idx) {
  if (lua_isnoneornil(L, idx)) return 0;
  luaL_checktype(L, idx, LUA_TTABLE);
  return (uint32_t)lua_rawlen(L, idx);
}

/* pb:op(name, nres, {ids}, {types}, dict, has_regions, line, col) -> first result id */
static int pb_op(lua_State *L) {
  PB *p = check_pb(L);
  size_t nlen;
  const char *name = luaL_checklstring(L, 2, &nlen);
  int kind = ir_op_lookup(name, nlen);
  if (kind < 0) return luaL_error(L, "unknown operation '%s'", name);
  uint32_t nopd = list_len(L, 4), nres = list_len(L, 5);
  if ((lua_Integer)nres != luaL_checkinteger(L, 3)) return luaL_error(L, "result count and types differ");
  uint32_t nreg = lua_toboolean(L, 7) ? PB_MAX_REGIONS : 0; /* trimmed at pb:close */
  IrValue *opd_buf[16], **opds = opd_buf;
  const IrType *ty_buf[16], **tys = ty_buf;
  if (nopd > 16 || nres > 16) { /* rare: the buffers live as Lua userdata, freed by the GC */
    opds = lua_newuserdatauv(L, (nopd + 1) * sizeof *opds, 0);
    tys = lua_newuserdatauv(L, (nres + 1) * sizeof *tys, 0);
  }
  for (uint32_t i = 0; i < nopd; i++) {
    lua_rawgeti(L, 4, (lua_Integer)i + 1);
    lua_Integer id = lua_tointeger(L, -1);
    lua_pop(L, 1);
    if (id < 1 || (size_t)id >= p->nvals) return luaL_error(L, "bad value id %d", (int)id);
    opds[i] = p->vals[id];
  }
  for (uint32_t i = 0; i < nres; i++) {
    lua_rawgeti(L, 5, (lua_Integer)i + 1);
    tys[i] = lb_check_type_of(L, -1, p->ctx);
    lua_pop(L, 1);
  }
  const IrAttr *dict = lua_isnoneornil(L, 6) ? NULL : lb_check_object(L, 6, LB_ATTR);
  if (dict && dict->kind != IR_ATTR_DICT) return luaL_error(L, "attributes must be a dictionary");
  IrLoc loc = {p->file, (int)luaL_checkinteger(L, 8), (int)luaL_checkinteger(L, 9)};
  IrOp *op = ir_op_create(p->ctx, (IrOpKind)kind, loc, nopd, opds, nres, tys, nreg);
  for (uint32_t i = 0; dict && i < dict->u.dict.n; i++)
    ir_op_set_attr(op, dict->u.dict.entries[i].name, dict->u.dict.entries[i].attr);
  Open *at = &p->stack[p->depth - 1];
  if (at->block) ir_block_append(at->block, op);
  else if (p->depth == 1 && !p->top_op) p->top_op = op; /* `module { ... }` itself */
  else return luaL_error(L, "an operation outside of any block");
  p->last = op;
  lua_pushinteger(L, add_values(L, p, op->results, nres, sizeof *op->results));
  if (nreg > 0) {
    grow(L, (void **)&p->stack, &p->capstack, p->depth + 1, sizeof *p->stack);
    p->stack[p->depth++] = (Open){op, 0, NULL};
  }
  return 1;
}

/* pb:block({types}) -> first argument id */
static int pb_block(lua_State *L) {
  PB *p = check_pb(L);
  Open *o = &p->stack[p->depth - 1];
  if (!o->op) return luaL_error(L, "a block outside of any region");
  uint32_t n = list_len(L, 2);
  IrBlock *b = ir_block_create(p->ctx);
  IrValue *first = NULL;
  for (uint32_t i = 0; i < n; i++) {
    lua_rawgeti(L, 2, (lua_Integer)i + 1);
    IrValue *a = ir_block_add_arg(p->ctx, b, lb_check_type_of(L, -1, p->ctx));
    lua_pop(L, 1);
    if (!first) first = a;
  }
  ir_region_append_block(&o->op->regions[o->region], b);
  o->block = b;
  /* block arguments are not contiguous in memory: one id each */
  lua_Integer id = 0;
  for (uint32_t i = 0; i < n; i++) {
    lua_Integer k = add_values(L, p, b->args[i], 1, 0);
    if (!id) id = k;
  }
  lua_pushinteger(L, id);
  return 1;
}

/* pb:next_region(): false when the open op can hold no more regions. */
static int pb_next_region(lua_State *L) {
  PB *p = check_pb(L);
  Open *o = &p->stack[p->depth - 1];
  if (!o->op || o->region + 1 >= PB_MAX_REGIONS) {
    lua_pushboolean(L, 0);
    return 1;
  }
  o->region++;
  o->block = NULL;
  lua_pushboolean(L, 1);
  return 1;
}

static IrLoc loc_args(lua_State *L, PB *p, int idx) {
  const char *file = lua_type(L, idx) == LUA_TSTRING ? lua_tostring(L, idx) : NULL;
  if (file || lua_isnil(L, idx)) idx++;
  return ir_loc(p->ctx, file ? file : NULL, (int)luaL_optinteger(L, idx, 0), (int)luaL_optinteger(L, idx + 1, 0));
}

/* pb:close([file, line, col]): the open op is done; an explicit loc(...) for it. */
static int pb_close(lua_State *L) {
  PB *p = check_pb(L);
  if (p->depth < 2) return luaL_error(L, "no open operation to close");
  Open *o = &p->stack[--p->depth];
  o->op->nregions = o->region + 1; /* the regions the text gave (the rest were never touched) */
  if (lua_gettop(L) > 1) o->op->loc = loc_args(L, p, 2);
  return 0;
}

/* pb:loc([file,] line, col): the location of the last op built (loc(...) after it). */
static int pb_loc(lua_State *L) {
  PB *p = check_pb(L);
  if (p->last) p->last->loc = loc_args(L, p, 2);
  return 0;
}

static int pb_result(lua_State *L) {
  PB *p = check_pb(L);
  if (!p->top_op) return 0;
  lua_getiuservalue(L, 1, 1);
  lb_push_object(L, LB_OP, p->top_op, lua_gettop(L));
  return 1;
}

static int pb_depth(lua_State *L) {
  PB *p = check_pb(L);
  lua_pushinteger(L, (lua_Integer)p->depth - 1);
  return 1;
}

/* The region of the open op being filled (1-based; 0 at the top level). */
static int pb_region(lua_State *L) {
  PB *p = check_pb(L);
  Open *o = &p->stack[p->depth - 1];
  lua_pushinteger(L, o->op ? (lua_Integer)o->region + 1 : 0);
  return 1;
}

static const luaL_Reg pb_methods[] = {{"top", pb_top},         {"op", pb_op},         {"block", pb_block},
                                      {"next_region", pb_next_region}, {"close", pb_close}, {"loc", pb_loc},
                                      {"result", pb_result},   {"depth", pb_depth},   {"region", pb_region},
                                      {NULL, NULL}};
static const luaL_Reg pb_meta[] = {{"__gc", pb_gc}, {NULL, NULL}};
static const luaL_Reg parse_functions[] = {{"parse_builder", core_parse_builder}, {NULL, NULL}};

void lb_open_parse(lua_State *L) {
  luaL_newmetatable(L, LB_PARSE_BUILDER);
  luaL_setfuncs(L, pb_meta, 0);
  lua_newtable(L);
  luaL_setfuncs(L, pb_methods, 0);
  lua_setfield(L, -2, "__index");
  lua_pop(L, 1);
  luaL_setfuncs(L, parse_functions, 0);
}
