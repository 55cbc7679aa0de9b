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

lua_State *lb_newstate(void) {
  LbState *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  lua_State *L = luaL_newstate();
  if (!L) {
    free(s);
    return NULL;
  }
  lua_setallocf(L, state_alloc, s);
  return L;
}

void lb_close(lua_State *L) {
  void *ud;
  lua_Alloc f = lua_getallocf(L, &ud);
  lua_close(L);
  if (f == state_alloc) free(ud);
}
