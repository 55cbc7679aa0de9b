/*
** l_alloc.c -- the Lua states tilua makes (the tilua program, the C API's):
** lauxlib's luaL_newstate with a pooled allocator for Lua's small blocks.
**
** A compile allocates and frees about a hundred thousand small Lua objects
** (tables, userdata, closures, strings); through malloc, realloc and free
** that was about a seventh of its instructions. Lua passes the size of every
** block it frees or resizes, so blocks of up to POOL_MAX bytes come from free
** lists by size class (16 bytes apart, no header), carved from chunks the
** pool frees when the state closes; larger ones from malloc. Memory a state
** freed stays in its pool for its next small blocks (lb_close returns it).
** Under AddressSanitizer, and with TILUA_LUA_POOL=0 (to compare the two),
** the state uses malloc for everything, as lauxlib's.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lbind.h"

#if defined(__SANITIZE_ADDRESS__)
#define LB_POOL 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LB_POOL 0
#endif
#endif
#ifndef LB_POOL
#define LB_POOL 1
#endif

enum { POOL_GRAIN = 16, POOL_MAX = 512, POOL_CLASSES = POOL_MAX / POOL_GRAIN, CHUNK = 256 << 10 };

typedef struct Chunk {
  struct Chunk *next;
  char pad[POOL_GRAIN - sizeof(struct Chunk *)]; /* blocks after it stay 16-aligned */
} Chunk;

/* free[c]: the free blocks of class c (1 .. POOL_CLASSES: c * 16 bytes), a
** list through each block's first word; bump .. end: the rest of the newest
** chunk. */
typedef struct Pool {
  void *free[POOL_CLASSES + 1];
  char *bump, *end;
  Chunk *chunks;
  struct {
    const char *name; /* a class name (its pointer: the callers' literals) */
    const void *mt;   /* its metatable in the registry (which holds it) */
  } classes[16];      /* lb_testudata's, by the name's pointer */
} Pool;

static size_t class_of(size_t n) { return (n + POOL_GRAIN - 1) / POOL_GRAIN; }

static void *take(Pool *p, size_t n) {
  size_t c = class_of(n);
  void *b = p->free[c];
  if (b) {
    p->free[c] = *(void **)b;
    return b;
  }
  size_t bytes = c * POOL_GRAIN;
  if ((size_t)(p->end - p->bump) < bytes) {
    Chunk *k = malloc(CHUNK);
    if (!k) return NULL;
    k->next = p->chunks;
    p->chunks = k;
    p->bump = (char *)(k + 1);
    p->end = (char *)k + CHUNK;
  }
  b = p->bump;
  p->bump += bytes;
  return b;
}

/* A block of osize bytes back: to its class's list, or to malloc. */
static void give(Pool *p, void *b, size_t osize) {
  if (osize > POOL_MAX) {
    free(b);
    return;
  }
  size_t c = class_of(osize);
  *(void **)b = p->free[c];
  p->free[c] = b;
}

/* lua_Alloc. A shrink Lua assumes cannot fail: where no smaller block is to
** be had the block stays (freed later as its smaller size: a block of that
** class, larger than it needs). */
static void *pool_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  Pool *p = ud;
  if (!ptr) osize = 0; /* (then osize says what kind of object Lua makes) */
  if (nsize == 0) {
    if (ptr) give(p, ptr, osize);
    return NULL;
  }
  if (ptr && osize > POOL_MAX && nsize > POOL_MAX) return realloc(ptr, nsize);
  if (ptr && osize <= POOL_MAX && nsize <= POOL_MAX && class_of(osize) == class_of(nsize))
    return ptr;
  void *b = nsize <= POOL_MAX ? take(p, nsize) : malloc(nsize);
  if (!b) return nsize <= osize ? ptr : NULL;
  if (ptr) {
    memcpy(b, ptr, osize < nsize ? osize : nsize);
    give(p, ptr, osize);
  }
  return b;
}

static void *plain_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  (void)ud, (void)osize;
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  return realloc(ptr, nsize);
}

/* luaL_newstate's panic function and warning functions (lauxlib.c's: static
** there), for the state lua_newstate makes with the pool. */
static int panic(lua_State *L) {
  const char *msg =
      lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "error object is not a string";
  lua_writestringerror("PANIC: unprotected error in call to Lua API (%s)\n", msg);
  return 0;
}

static void warn_off(void *ud, const char *message, int tocont);
static void warn_on(void *ud, const char *message, int tocont);

static int warn_control(lua_State *L, const char *message, int tocont) {
  if (tocont || *(message++) != '@') return 0; /* not a control message */
  if (strcmp(message, "off") == 0) lua_setwarnf(L, warn_off, L);
  else if (strcmp(message, "on") == 0) lua_setwarnf(L, warn_on, L);
  return 1;
}

static void warn_off(void *ud, const char *message, int tocont) {
  warn_control((lua_State *)ud, message, tocont);
}

static void warn_cont(void *ud, const char *message, int tocont) {
  lua_State *L = ud;
  lua_writestringerror("%s", message);
  if (tocont) {
    lua_setwarnf(L, warn_cont, L);
  } else {
    lua_writestringerror("%s", "\n");
    lua_setwarnf(L, warn_on, L);
  }
}

static void warn_on(void *ud, const char *message, int tocont) {
  if (warn_control((lua_State *)ud, message, tocont)) return;
  lua_writestringerror("%s", "Lua warning: ");
  warn_cont(ud, message, tocont);
}

/* luaL_testudata for the states lb_newstate makes, without looking the
** metatable up by name each time (the bindings test the class of every IR
** object they are given: ~10^5 times a compile): the metatable of class
** tname is remembered in the state's pool; other states look it up. */
void *lb_testudata(lua_State *L, int idx, const char *tname) {
  void *p = lua_touserdata(L, idx);
  if (!p || !lua_getmetatable(L, idx)) return NULL;
  const void *mt = lua_topointer(L, -1);
  void *ud;
  Pool *pool = lua_getallocf(L, &ud) == pool_alloc ? ud : NULL;
  unsigned slot = (unsigned)(((uintptr_t)tname >> 3) % 16);
  if (pool && pool->classes[slot].name == tname) {
    lua_pop(L, 1);
    return pool->classes[slot].mt == mt ? p : NULL;
  }
  luaL_getmetatable(L, tname);
  const void *want = lua_topointer(L, -1); /* (NULL: no such class yet) */
  lua_pop(L, 2);
  if (pool && want) pool->classes[slot].name = tname, pool->classes[slot].mt = want;
  return want && mt == want ? p : NULL;
}

lua_State *lb_newstate(void) {
  lua_State *L;
  const char *env = getenv("TILUA_LUA_POOL");
  if (LB_POOL && !(env && strcmp(env, "0") == 0)) {
    Pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    L = lua_newstate(pool_alloc, p);
    if (!L) free(p);
  } else {
    L = lua_newstate(plain_alloc, NULL);
  }
  if (L) {
    lua_atpanic(L, panic);
    lua_setwarnf(L, warn_off, L); /* warnings off, as luaL_newstate leaves them */
  }
  return L;
}

void lb_close(lua_State *L) {
  void *ud;
  lua_Alloc f = lua_getallocf(L, &ud);
  lua_close(L);
  if (f != pool_alloc) return;
  Pool *p = ud;
  for (Chunk *k = p->chunks, *next; k; k = next) {
    next = k->next;
    free(k);
  }
  free(p);
}
