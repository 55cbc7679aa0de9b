/*
** lbind.h -- shared pieces of the Lua bindings: metatable names, userdata
** layouts, checkers and pushers, and the user's source location.
**
** Every IR object Lua sees is a userdata holding a pointer and, as user value
** #1, the Context userdata that owns it, so a context outlives its objects.
** A closed context leaves its objects in place; touching them raises an error.
*/
#ifndef TILUA_LBIND_H
#define TILUA_LBIND_H

#include <lauxlib.h>
#include <lua.h>

#include "../ir/ir.h"

#define LB_CONTEXT "tilua.Context"
#define LB_OP "tilua.Op"
#define LB_VALUE "tilua.Value"
#define LB_BLOCK "tilua.Block"
#define LB_REGION "tilua.Region"
#define LB_TYPE "tilua.Type"
#define LB_ATTR "tilua.Attr"

typedef struct LbContext {
  IrContext *ctx;
  int owned; /* destroy on close; 0 when borrowed from a C host */
} LbContext;

/* All object userdata start with the owning context. */
typedef struct LbObject {
  LbContext *owner;
  void *ptr;
} LbObject;

/* A Lua state as luaL_newstate makes one, with a struct of its own for
** lb_testudata (l_alloc.c), a userdata of the state's; lb_close closes it. */
lua_State *lb_newstate(void);
void lb_close(lua_State *L);
/* luaL_testudata, with the class's metatable remembered in such a state. */
void *lb_testudata(lua_State *L, int idx, const char *tname);

/* Contexts. */
LbContext *lb_push_context(lua_State *L, IrContext *ctx, int owned);
LbContext *lb_check_context(lua_State *L, int idx);
/* The default context of this state (created on first use). Pushes it. */
LbContext *lb_default_context(lua_State *L);
void lb_set_default_context(lua_State *L, int idx);

/* Objects: push wraps ptr with the context at ctx_idx as owner. */
void lb_push_object(lua_State *L, const char *mt, void *ptr, int ctx_idx);
void *lb_check_object(lua_State *L, int idx, const char *mt);
void *lb_test_object(lua_State *L, int idx, const char *mt); /* NULL if not that kind */
/* Push the context userdata that owns the object at idx. */
void lb_push_owner(lua_State *L, int idx);
LbContext *lb_owner(lua_State *L, int idx);

#define lb_check_op(L, i) ((IrOp *)lb_check_object(L, i, LB_OP))
#define lb_check_value(L, i) ((IrValue *)lb_check_object(L, i, LB_VALUE))
#define lb_check_block(L, i) ((IrBlock *)lb_check_object(L, i, LB_BLOCK))
#define lb_check_region(L, i) ((IrRegion *)lb_check_object(L, i, LB_REGION))
#define lb_check_type(L, i) ((const IrType *)lb_check_object(L, i, LB_TYPE))

/* Lua value <-> attribute. Integers -> i64, floats -> f64, booleans, strings,
** Types, Attr userdata, arrays (sequence tables) and dictionaries (string keys). */
const IrAttr *lb_to_attr(lua_State *L, IrContext *ctx, int idx);
void lb_push_attr(lua_State *L, const IrAttr *a, int ctx_idx);

/* The location of the innermost user frame: the first Lua frame that is not
** part of the tilua library (see lb_mark_library_chunk). */
IrLoc lb_user_loc(lua_State *L, IrContext *ctx);
/* The innermost user frame: its file (a string Lua owns, valid while the
** frame's function lives) and line; 0 when there is none. */
int lb_user_frame(lua_State *L, const char **file, int *line);
/* What a caller of lb_launch_site keeps for a call site while the site is
** remembered: its file in the caller's own form (a runtime's copy), and whose. */
typedef struct LbSiteNote {
  const void *owner;
  const char *file;
} LbSiteNote;
/* lb_user_frame for a launch, cheaper: what it learns of a call site (its
** function's source, library or not, and the line) is remembered while the
** function lives. The file is the function's (valid while it lives: copy it
** to keep it). *note: the site's note (NULL when the site is not remembered),
** empty (owner NULL) when the memo was made anew. */
int lb_launch_site(lua_State *L, const char **file, int *line, LbSiteNote **note);
/* "file:line" of the innermost user frame into buf (empty when there is none). */
void lb_user_where(lua_State *L, char *buf, size_t n);
/* Raise "file:line: message" at the user's location. */
int lb_error(lua_State *L, const char *fmt, ...);
/* In a message handler: relocate an error raised in library code to the
** user's line (1 if the message at idx was replaced). */
int lb_locate_error(lua_State *L, int idx);
/* Remember that a chunk name belongs to the library, so locations skip it. */
void lb_mark_library_chunk(lua_State *L, const char *chunkname);

/* Diagnostics of ctx since `from` (or all pending): push a message and clear them.
** Format: "file:line: message" for the first error, further lines for the rest. */
void lb_push_diagnostics(lua_State *L, IrContext *ctx);
/* Push a list of {severity, file, line, col, message, notes} tables and clear. */
void lb_push_diagnostic_list(lua_State *L, IrContext *ctx);
/* The results "v, message, list" of a call (v pushed by the caller): push the
** message and then the list, clear them; returns 3. */
int lb_return_diagnostics(lua_State *L, IrContext *ctx);

/* A class: the metatable `name` with the metamethods meta (or none) and the
** methods in its __index table; a class made before gets them added. */
typedef struct LbClass {
  const char *name;
  const luaL_Reg *meta, *methods;
} LbClass;
void lb_new_class(lua_State *L, const LbClass *c);
/* t[key] = v for the table t at the top of the stack. */
static inline void lb_set_int(lua_State *L, const char *key, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, key);
}
static inline void lb_set_bool(lua_State *L, const char *key, int v) {
  lua_pushboolean(L, v);
  lua_setfield(L, -2, key);
}
static inline void lb_set_str(lua_State *L, const char *key, const char *v) {
  lua_pushstring(L, v);
  lua_setfield(L, -2, key);
}
/* A list of n values: push(L, i) pushes the one at 0-based i. */
static inline void lb_push_list(lua_State *L, int n, void (*push)(lua_State *L, int i)) {
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    push(L, i);
    lua_rawseti(L, -2, i + 1);
  }
}
/* A record's members as fields of the same names: with the record in scope as
** `r`, LIST(LB_SET_INT_MEMBER, LB_SET_BOOL_MEMBER) where LIST(I, B) names
** them, I(member) for integers and B(member) for booleans. */
#define LB_SET_INT_MEMBER(m) lb_set_int(L, #m, (lua_Integer)r.m);
#define LB_SET_BOOL_MEMBER(m) lb_set_bool(L, #m, r.m);
/* The integer field key of the table at idx, dflt when absent; raises
** "who: 'key' must be an integer" or "... is out of range [lo, hi]" at the
** user's line otherwise. */
lua_Integer lb_opt_int_field(lua_State *L, int idx, const char *key, lua_Integer dflt,
                             lua_Integer lo, lua_Integer hi, const char *who);

/* Remember the functions of fns as bindings: a context they use cannot be
** closed while they run (l_ir.c; luaopen_tilua_core registers every area). */
void lb_register_bindings(lua_State *L, const luaL_Reg *fns);

/* A binding area: its classes (up to one without a name; NULL for none) and
** the functions it adds to tilua.core. */
typedef struct LbArea {
  const LbClass *classes;
  const luaL_Reg *functions;
} LbArea;

/* The binding areas, X(name): each file defines its lb_area_<name>; l_core.c
** opens them in this order. A new area is one line here. */
#define LB_AREAS(X)                                                                                \
  X(ir)      /* l_ir.c: contexts, object userdata, locations, the registry of ops */               \
  X(types)   /* l_type.c: types and attributes */                                                  \
  X(ops)     /* l_op.c: ops, regions, blocks, values */                                            \
  X(passes)  /* l_pass.c: the pass manager and pipelines */                                        \
  X(sched)   /* l_sched.c: the scheduler reference and its staged arithmetic */                    \
  X(ptx)     /* l_ptx.c: the PTX emitter */                                                        \
  X(device)  /* l_device.c: tl.device, modules, launches */                                        \
  X(tensor)  /* l_tensor.c: tensor maps, the cuBLASLt peer */                                      \
  X(launch)  /* l_launch.c: launch plans, the raw-launch peer */                                   \
  X(graph)   /* l_graph.c: CUDA graphs of launches */                                              \
  X(stream)  /* l_stream.c: streams and events of the device */                                    \
  X(comm)    /* l_comm.c: NCCL communicators and collectives */                                    \
  X(parse)   /* l_parse.c: the builder of the textual-IR parser */                                 \
  X(dialect) /* l_dialect.c: op table rows, enums, limits, kernel specs */
#define LB_AREA_DECLARE(name) extern const LbArea lb_area_##name;
LB_AREAS(LB_AREA_DECLARE)
#undef LB_AREA_DECLARE

/* Add an op's attribute, PTX and LOWER rows to the op table on the stack (l_dialect.c). */
void lb_push_op_tables(lua_State *L, int kind);

/* Run a parsed pipeline on the module op at op_idx, its Lua passes (LUA_PASS rows)
** in L: for hosts that hold a module outside Lua, the C API (l_pass.c). */
struct IrPipeline;
IrResult lb_run_pipeline(lua_State *L, int op_idx, struct IrPipeline *p);

#define LB_EXPORT __attribute__((visibility("default")))
LB_EXPORT int luaopen_tilua(lua_State *L);
int luaopen_tilua_core(lua_State *L);

#endif
