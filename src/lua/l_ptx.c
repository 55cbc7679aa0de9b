/*
** l_ptx.c -- Lua binding of the PTX emitter (src/ptx).
*/
#include <stdlib.h>

#include "../ptx/ptx.h"
#include "lbind.h"

/* core.emit_ptx(module_op) -> text | nil, message, diagnostics */
static int core_emit_ptx(lua_State *L) {
  IrOp *m = lb_check_op(L, 1);
  IrContext *ctx = lb_owner(L, 1)->ctx;
  char *text = NULL;
  ir_diag_clear(ctx);
  if (ptx_emit_module(m, &text) != IR_OK) {
    lua_pushnil(L);
    return lb_return_diagnostics(L, ctx);
  }
  lua_pushstring(L, text);
  ir_free(text);
  return 1;
}

static const luaL_Reg ptx_functions[] = {{"emit_ptx", core_emit_ptx}, {NULL, NULL}};

const LbArea lb_area_ptx = {NULL, ptx_functions};
