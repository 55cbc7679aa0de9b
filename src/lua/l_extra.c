/*
** l_extra.c -- the list of later binding areas (PTX, CUDA runtime, schedulers).
** Each area adds one line here.
*/
#include "lbind.h"

void lb_open_sched(lua_State *L);

void lb_open_extra(lua_State *L) {
  lb_open_sched(L);
}
