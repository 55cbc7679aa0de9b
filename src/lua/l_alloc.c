/*
** l_alloc.c -- the Lua states tilua makes (the tilua program, the C API's):
** luaL_newstate's, with a small struct of the state's own as its allocator's
** user data, where lb_testudata remembers the classes' metatables.
**
** (A pooled allocator for Lua's small blocks was here in the thirteenth
** session: ~10 % fewer instructions a compile by callgrind, but no wall-time
** gain on the dev machine or the H200's host, and slower than malloc once a
** process had compiled a while; docs/PERF.md. It was dropped.)
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lbind.h"

/* The state's struct: lb_testudata's classes, by the name's pointer. */
typedef struct LbState {
  struct {
    const char *name; /* a class name (its pointer: the callers' literals) */
    const void *mt;   /* its metatable in the registry (which holds it) */
  } classes[16];
} LbState;

/* lua_Alloc: lauxlib's (malloc, realloc, free), so that blocks luaL_newstate
** made are this allocator's too. */
static void *state_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  (void)ud, (void)osize;
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  return realloc(ptr, nsize);
}

/* luaL_testudata for the states lb_newstate makes, without looking the
** metatable up by name each time (the bindings test the class of every IR
** object they are given: ~10^5 times a compile): the metatable of class
** tname is remembered in the state's struct; other states look it up. */
void *lb_testudata(lua_State *L, int idx, const char *tname) {
  void *p = lua_touserdata(L, idx);
  if (!p || !lua_getmetatable(L, idx)) return NULL;
  const void *mt = lua_topointer(L, -1);
  void *ud;
  LbState *s = lua_getallocf(L, &ud) == state_alloc ? ud : NULL;
  unsigned slot = (unsigned)(((uintptr_t)tname >> 3) % 16);
  if (s && s->classes[slot].name == tname) {
    lua_pop(L, 1);
    return s->classes[slot].mt == mt ? p : NULL;
  }
  luaL_getmetatable(L, tname);
  const void *want = lua_topointer(L, -1); /* (NULL: no such class yet) */
  lua_pop(L, 2);
  if (s && want) s->classes[slot].name = tname, s->classes[slot].mt = want;
  return want && mt == want ? p : NULL;
}

/* The struct lives in the state's own memory (a userdata the registry holds),
** so a state closed by lua_close alone (os.exit(code, true)) frees it too;
** state_alloc does not read it, and finalizers that run at the close still
** find it. */
static const char STATE_KEY = 0;

static int make_state_struct(lua_State *L) {
  LbState *s = lua_newuserdatauv(L, sizeof *s, 0);
  memset(s, 0, sizeof *s);
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &STATE_KEY);
  return 1;
}

lua_State *lb_newstate(void) {
  lua_State *L = luaL_newstate();
  if (!L) return NULL;
  /* protected: a failed allocation is an error, not a panic */
  lua_pushcfunction(L, make_state_struct);
  if (lua_pcall(L, 0, 1, 0) != LUA_OK) {
    lua_close(L);
    return NULL;
  }
  lua_setallocf(L, state_alloc, lua_touserdata(L, -1));
  lua_pop(L, 1);
  return L;
}

void lb_close(lua_State *L) { lua_close(L); }
