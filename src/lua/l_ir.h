/*
** l_ir.h -- what the three files of the IR bindings share: l_ir.c (contexts,
** object userdata, locations and errors, the registry of ops), l_type.c (types
** and attributes) and l_op.c (ops, regions, blocks, values).
*/
#ifndef TILUA_L_IR_H
#define TILUA_L_IR_H

#include "lbind.h"

/* {=== l_ir.c */
/* Push ptr wrapped with the same owner as the object at idx (nil for NULL). */
void lb_push_like(lua_State *L, const char *mt, void *ptr, int idx);
/* The IrContext of the object argument at idx. */
IrContext *lb_ctx_of(lua_State *L, int idx);
/* Objects a and b must belong to one context: IR never points into another's arena. */
void lb_same_context(lua_State *L, int a, int b, const char *what);
/* Moving op to a place inside itself would cut it loose from the IR. */
void lb_not_inside(lua_State *L, const IrOp *op, const IrOp *place, const char *what);
/* The context argument at idx, or the default one: pushed, its userdata at
** stack index `at` (the owner of what is made in it). */
typedef struct LbCtxArg {
  IrContext *ctx;
  int at;
} LbCtxArg;
LbCtxArg lb_ctx_arg(lua_State *L, int idx);
/* A location argument: nil (the user's frame) or {file=, line=, col=}. */
IrLoc lb_opt_loc(lua_State *L, int idx, IrContext *ctx);
/* __eq of object userdata; a stable identity for use as a table key. */
int lb_object_eq(lua_State *L);
int lb_object_id(lua_State *L);
/* }=== */

/* {=== l_type.c */
/* The Type argument at idx, of context ctx. */
const IrType *lb_check_type_of(lua_State *L, int idx, IrContext *ctx);
/* }=== */

#endif
