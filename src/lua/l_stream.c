/*
** l_stream.c -- streams and events of the process's device (tl.device.stream,
** tl.device.event): work on several streams at once, ordered by events
** recorded on one and waited for on another, without the host waiting.
**
**   s = core.stream_create([high])  s:synchronize()  s:wait(e)  s:destroy()
**   core.default_stream_wait(e)     the default stream waits for e
**   e = core.event_create([timing]) e:record([s])    e:synchronize()  e:query()
**                                   e:elapsed(later) -> ms (both made with timing)
**
** A stream is non-blocking: it never waits for the legacy default stream, so
** a launch on one runs beside the default stream's work. The userdata are
** created empty before the handle is attached; __gc and __close release once.
*/
#include <string.h>

#include "ldevice.h"

typedef struct Handle {
  void *h;
  int live;
  TlcuRuntime *rt; /* the device it belongs to (the current one when it was made) */
} Handle;

static Handle *check_live(lua_State *L, int idx, const char *cls, const char *what) {
  Handle *s = luaL_checkudata(L, idx, cls);
  if (!s->live) lb_error(L, "attempt to use a destroyed %s", what);
  return s;
}

CUstream lb_stream_arg(lua_State *L, int idx) {
  if (lua_isnoneornil(L, idx)) return NULL;
  Handle *s = luaL_testudata(L, idx, LB_STREAM);
  if (!s) lb_error(L, "expected a stream (tl.device.stream()), got %s", luaL_typename(L, idx));
  if (!s->live) lb_error(L, "attempt to use a destroyed stream");
  return (CUstream)s->h;
}

/* {=== streams */

/* core.stream_create([high]): high, the device's highest priority */
static int stream_create(lua_State *L) {
  int high = lua_toboolean(L, 1);
  TlcuRuntime *rt = lb_cuda(L);
  Handle *s = lua_newuserdatauv(L, sizeof *s, 0);
  memset(s, 0, sizeof *s);
  luaL_setmetatable(L, LB_STREAM);
  CUstream h = NULL;
  if ((high ? tlcu_stream_create_high(rt, &h) : tlcu_stream_create(rt, &h)) != TLCU_OK)
    return lb_cuda_error(L, "stream");
  s->h = h, s->live = 1, s->rt = rt;
  return 1;
}

static int stream_destroy(lua_State *L) {
  Handle *s = luaL_checkudata(L, 1, LB_STREAM);
  if (!s->live) return 0;
  s->live = 0;
  /* no raise: __gc and __close come here too, also after the runtime shut down */
  tlcu_stream_destroy(s->rt, (CUstream)s->h);
  return 0;
}

static int stream_synchronize(lua_State *L) {
  Handle *s = check_live(L, 1, LB_STREAM, "stream");
  if (tlcu_stream_synchronize(s->rt, (CUstream)s->h) != TLCU_OK)
    return lb_cuda_error_of(L, s->rt, "stream synchronize");
  return 0;
}

static int stream_wait(lua_State *L) {
  Handle *s = check_live(L, 1, LB_STREAM, "stream");
  Handle *e = check_live(L, 2, LB_EVENT, "event");
  if (tlcu_stream_wait_event(s->rt, (CUstream)s->h, (CUevent)e->h) != TLCU_OK)
    return lb_cuda_error_of(L, s->rt, "stream wait");
  lua_settop(L, 1);
  return 1;
}

/* core.default_stream_wait(e): the default stream's later work waits for e */
static int default_wait(lua_State *L) {
  Handle *e = check_live(L, 1, LB_EVENT, "event");
  if (tlcu_stream_wait_event(lb_cuda(L), NULL, (CUevent)e->h) != TLCU_OK)
    return lb_cuda_error(L, "wait");
  return 0;
}

/* s:handle() -> the CUstream as an integer (for NCCL and other libraries) */
static int stream_handle(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)(uintptr_t)check_live(L, 1, LB_STREAM, "stream")->h);
  return 1;
}

/* }=== */

/* {=== events */

static int event_create(lua_State *L) {
  int timing = lua_toboolean(L, 1);
  TlcuRuntime *rt = lb_cuda(L);
  Handle *e = lua_newuserdatauv(L, sizeof *e, 0);
  memset(e, 0, sizeof *e);
  luaL_setmetatable(L, LB_EVENT);
  CUevent h = NULL;
  if ((timing ? tlcu_event_create(rt, &h) : tlcu_event_create_sync(rt, &h)) != TLCU_OK)
    return lb_cuda_error(L, "event");
  e->h = h, e->live = 1, e->rt = rt;
  return 1;
}

static int event_destroy(lua_State *L) {
  Handle *e = luaL_checkudata(L, 1, LB_EVENT);
  if (!e->live) return 0;
  e->live = 0;
  tlcu_event_destroy(e->rt, (CUevent)e->h);
  return 0;
}

static int event_record(lua_State *L) {
  Handle *e = check_live(L, 1, LB_EVENT, "event");
  CUstream s = lb_stream_arg(L, 2);
  if (tlcu_event_record(e->rt, (CUevent)e->h, s) != TLCU_OK)
    return lb_cuda_error_of(L, e->rt,
                            "event record (the event and the stream must be of one device)");
  lua_settop(L, 1);
  return 1;
}

static int event_synchronize(lua_State *L) {
  Handle *e = check_live(L, 1, LB_EVENT, "event");
  if (tlcu_event_synchronize(e->rt, (CUevent)e->h) != TLCU_OK)
    return lb_cuda_error_of(L, e->rt, "event synchronize");
  return 0;
}

static int event_query(lua_State *L) {
  Handle *e = check_live(L, 1, LB_EVENT, "event");
  int done = 0;
  if (tlcu_event_query(e->rt, (CUevent)e->h, &done) != TLCU_OK)
    return lb_cuda_error_of(L, e->rt, "event query");
  lua_pushboolean(L, done);
  return 1;
}

/* start:elapsed(stop) -> milliseconds between the two (both recorded and done) */
static int event_elapsed(lua_State *L) {
  Handle *a = check_live(L, 1, LB_EVENT, "event"), *b = check_live(L, 2, LB_EVENT, "event");
  TlcuRuntime *rt = b->rt;
  float ms = 0;
  if (tlcu_event_synchronize(rt, (CUevent)b->h) != TLCU_OK ||
      tlcu_event_elapsed_ms(rt, (CUevent)a->h, (CUevent)b->h, &ms) != TLCU_OK)
    return lb_cuda_error_of(L, rt,
                            "event elapsed (both events need timing: tl.device.event(true))");
  lua_pushnumber(L, ms);
  return 1;
}

/* }=== */

/* core.device_count() -> the devices the driver sees */
static int device_count(lua_State *L) {
  int n = 0;
  if (tlcu_device_count(lb_cuda(L), &n) != TLCU_OK) return lb_cuda_error(L, "device count");
  lua_pushinteger(L, n);
  return 1;
}

static const luaL_Reg stream_methods[] = {{"synchronize", stream_synchronize},
                                          {"wait", stream_wait},
                                          {"handle", stream_handle},
                                          {"destroy", stream_destroy},
                                          {NULL, NULL}};
static const luaL_Reg stream_meta[] = {
    {"__gc", stream_destroy}, {"__close", stream_destroy}, {NULL, NULL}};
static const luaL_Reg event_methods[] = {
    {"record", event_record},   {"synchronize", event_synchronize}, {"query", event_query},
    {"elapsed", event_elapsed}, {"destroy", event_destroy},         {NULL, NULL}};
static const luaL_Reg event_meta[] = {
    {"__gc", event_destroy}, {"__close", event_destroy}, {NULL, NULL}};
static const luaL_Reg stream_functions[] = {{"stream_create", stream_create},
                                            {"event_create", event_create},
                                            {"device_count", device_count},
                                            {"default_stream_wait", default_wait},
                                            {NULL, NULL}};

static const LbClass stream_classes[] = {{LB_STREAM, stream_meta, stream_methods},
                                         {LB_EVENT, event_meta, event_methods},
                                         {NULL, NULL, NULL}};
const LbArea lb_area_stream = {stream_classes, stream_functions};
