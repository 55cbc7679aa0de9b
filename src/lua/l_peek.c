/*
** l_peek.c -- the check of l_peek.h's reads: on a probe's frames and on a
** table it fills, they must read what the API says is there. TILUA_LUA_PEEK=0
** turns them off (the API's way, which the specs run too).
*/
#include <stdlib.h>

#include "l_peek.h"

#if LUA_VERSION_NUM == 504
/* What the probe saw at each of its calls. */
typedef struct PcProbe {
  const void *pc[4];
  int line[4];
  int n;
  int funcs; /* calls where lb_peek_func read the caller and the probe right */
} PcProbe;

static int pc_probe(lua_State *L) {
  PcProbe *p = lua_touserdata(L, lua_upvalueindex(1));
  lua_Debug ar, self;
  if (p->n < 4 && lua_getstack(L, 1, &ar) && lua_getinfo(L, "fl", &ar) &&
      lua_getstack(L, 0, &self)) {
    p->funcs += lb_peek_func(&ar) == lua_topointer(L, -1) && lb_peek_func(&self) == NULL;
    p->pc[p->n] = lb_peek_pc(&ar), p->line[p->n] = ar.currentline, p->n++;
  }
  return 0;
}

/* A probe called from two lines, twice each: the same line gives the same pc,
** the next line a pc a few instructions (of 4 bytes) on; the function read in
** the caller's frame is the one lua_getinfo gives, and none in the probe's (a C
** function's). */
static int pcs_check(lua_State *L) {
  static const char probe[] = "local probe = ...\nfor _ = 1, 2 do\n  probe()\n  probe()\nend\n";
  PcProbe p = {{NULL}, {0}, 0, 0};
  int ok = luaL_loadbuffer(L, probe, sizeof probe - 1, "=probe") == LUA_OK;
  if (ok) {
    lua_pushlightuserdata(L, &p);
    lua_pushcclosure(L, pc_probe, 1);
    ok = lua_pcall(L, 1, 0, 0) == LUA_OK;
  }
  ptrdiff_t step = (const char *)p.pc[1] - (const char *)p.pc[0];
  return ok && p.n == 4 && p.pc[0] && p.pc[0] == p.pc[2] && p.pc[1] == p.pc[3] && step > 0 &&
         step <= 64 && step % 4 == 0 && p.line[0] == 3 && p.line[1] == 4 && p.funcs == 4;
}

/* A table {integer, float, itself, "grid", grid = 7, args = itself}: its
** array part holds the first four, tagged (the string as its one object); its
** hash part the two string keys, with their values. */
static int table_check(lua_State *L) {
  lua_createtable(L, 4, 2);
  lua_pushinteger(L, 0x1234567890);
  lua_rawseti(L, -2, 1);
  lua_pushnumber(L, 2.5);
  lua_rawseti(L, -2, 2);
  lua_pushvalue(L, -1);
  lua_rawseti(L, -2, 3);
  lua_pushliteral(L, "grid");
  lua_rawseti(L, -2, 4);
  lua_pushinteger(L, 7);
  lua_setfield(L, -2, "grid");
  lua_pushvalue(L, -1);
  lua_setfield(L, -2, "args");
  unsigned n, nodes;
  const void *t = lua_topointer(L, -1);
  const LbValue *a = lb_peek_array(t, &n);
  if (!(n == 4 && a[0].tag == LB_TAG_INT && a[0].v.i == 0x1234567890 && a[1].tag == LB_TAG_FLOAT &&
        a[1].v.n == 2.5 && a[2].tag == LB_TAG_TABLE && a[2].v.gc == t &&
        a[3].tag == LB_TAG_SHORT_STRING))
    return 0;
  const LbNode *node = lb_peek_nodes(t, &nodes);
  int grid = 0, other = 0;
  for (unsigned i = 0; i < nodes && nodes == 2; i++) {
    if (node[i].key_tag != LB_TAG_SHORT_STRING) other++;
    else if (node[i].key == a[3].v.gc) grid += node[i].tag == LB_TAG_INT && node[i].v.i == 7;
    else other += !(node[i].tag == LB_TAG_TABLE && node[i].v.gc == t);
  }
  return grid == 1 && other == 0;
}

static int peek_check(lua_State *L) {
  const char *off = getenv("TILUA_LUA_PEEK"); /* "0": the API's way (how it is tested) */
  if (off && strcmp(off, "0") == 0) return 0;
  int top = lua_gettop(L);
  int ok = lua_version(L) == 504 && lua_checkstack(L, 8) && pcs_check(L);
  lua_settop(L, top);
  ok = ok && table_check(L);
  lua_settop(L, top);
  return ok;
}
#else
static int peek_check(lua_State *L) {
  (void)L;
  return 0;
}
#endif

int lb_peek_ok(lua_State *L) {
  static _Thread_local int ok; /* 0: not checked yet, 1: yes, -1: no */
  if (!ok) ok = peek_check(L) ? 1 : -1;
  return ok > 0;
}
