/*
** l_extra.c -- the list of later binding areas (PTX, CUDA runtime, schedulers).
** Each area adds one line here.
*/
#include "lbind.h"

void lb_open_sched(lua_State *L);
void lb_open_ptx(lua_State *L);    /* l_ptx.c: the PTX emitter */
void lb_open_device(lua_State *L); /* l_device.c: tl.device, launches */
void lb_open_tensor(lua_State *L); /* l_tensor.c: tensor maps, the cuBLASLt peer */
void lb_open_launch(lua_State *L); /* l_launch.c: launch plans, the raw-launch peer */
void lb_open_dialect(lua_State *L); /* l_dialect.c: op table rows, enums, limits, kernel specs */

void lb_open_extra(lua_State *L) {
  lb_open_sched(L);
  lb_open_ptx(L);
  lb_open_device(L);
  lb_open_tensor(L);
  lb_open_launch(L);
  lb_open_dialect(L);
}
