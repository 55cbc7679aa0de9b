/*
** test_lua_state.c -- the Lua states tilua makes (src/lua/l_alloc.c:
** lb_newstate, lb_close, lb_testudata):
**
**   - the state's allocator called as Lua calls it: blocks of many sizes,
**     one resized up and down, their bytes kept;
**   - a Lua workload (tables, closures, strings short and long, a table grown
**     and emptied, collections) gives its results;
**   - lb_testudata knows a class's userdata, refuses another class's, a
**     plain one, a number, and a class not yet made, before and after it
**     remembers the class, and leaves the stack as it was;
**   - lb_close frees everything the state took (glibc's counts of the bytes
**     in use, before the state and after its close, equal; the test runs
**     itself again with glibc's thread cache off, which those counts miss).
**
** Under AddressSanitizer the counts are skipped: LeakSanitizer checks.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "lauxlib.h"
#include "lua.h"
#include "lua/lbind.h"
#include "lualib.h"

#if defined(__SANITIZE_ADDRESS__)
#define ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ASAN 1
#endif
#endif
#ifndef ASAN
#define ASAN 0
#endif

static int failures;
#define CHECK(c)                                                                                   \
  do {                                                                                             \
    if (!(c)) {                                                                                    \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c);                                      \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

/* glibc's count of the bytes in use (1: it counts; 0: the check is skipped) */
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33)) && !ASAN
#define COUNTS 1
static size_t bytes_in_use(void) {
  struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}
#else
#define COUNTS 0
static size_t bytes_in_use(void) { return 0; }
#endif

static void fill(unsigned char *b, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    b[i] = (unsigned char)(seed + i * 7);
}

static int same(const unsigned char *b, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (b[i] != (unsigned char)(seed + i * 7)) return 0;
  return 1;
}

/* The state's allocator, as Lua calls it. */
static void allocator(lua_State *L) {
  void *ud;
  lua_Alloc f = lua_getallocf(L, &ud);
  static const size_t sizes[] = {1, 8, 16, 17, 40, 100, 255, 500, 511, 512, 513, 1000, 70000};
  enum { NS = sizeof sizes / sizeof sizes[0] };
  unsigned char *b[NS];
  for (int i = 0; i < NS; i++) {
    b[i] = f(ud, NULL, LUA_TTABLE, sizes[i]); /* (a new block: osize is its kind) */
    CHECK(b[i] != NULL);
    fill(b[i], sizes[i], (unsigned)i);
  }
  for (int i = 0; i < NS; i++)
    CHECK(same(b[i], sizes[i], (unsigned)i));
  for (int i = 0; i < NS; i++)
    CHECK(f(ud, b[i], sizes[i], 0) == NULL);

  static const size_t steps[] = {24, 30, 200, 512, 513, 4000, 100000, 600, 100, 33, 16};
  size_t n = steps[0];
  unsigned char *p = f(ud, NULL, 0, n);
  CHECK(p != NULL);
  fill(p, n, 3);
  for (size_t i = 1; i < sizeof steps / sizeof steps[0]; i++) {
    size_t m = steps[i];
    unsigned char *q = f(ud, p, n, m);
    CHECK(q != NULL);
    if (!q) return;
    CHECK(same(q, n < m ? n : m, 3));
    p = q, n = m;
    fill(p, n, 3);
  }
  f(ud, p, n, 0);
}

/* A Lua workload: small and large objects made, resized and collected. */
static const char *workload =
    "local t = {}\n"
    "for i = 1, 20000 do t[i] = { i, tostring(i), function() return i end } end\n"
    "local long = string.rep('x', 100000) .. 'y'\n"
    "local grow = {}\n"
    "for i = 1, 5000 do grow[i] = i * 2 end\n"
    "for i = 1, 5000 do grow[i] = nil end\n"
    "collectgarbage()\n"
    "local parts = {}\n"
    "for i = 1, 300 do parts[#parts + 1] = string.rep('ab', i) end\n"
    "local s = table.concat(parts)\n"
    "t = nil; collectgarbage()\n"
    "return #long, long:sub(-1), #s, s:sub(1, 4), next(grow)\n";

static void lua_work(lua_State *L) {
  luaL_openlibs(L);
  int rc = luaL_loadstring(L, workload) || lua_pcall(L, 0, 5, 0);
  CHECK(rc == LUA_OK);
  if (rc != LUA_OK) {
    fprintf(stderr, "%s\n", lua_tostring(L, -1));
    return;
  }
  CHECK(lua_tointeger(L, -5) == 100001);
  CHECK(strcmp(lua_tostring(L, -4), "y") == 0);
  CHECK(lua_tointeger(L, -3) == 300 * 301);
  CHECK(strcmp(lua_tostring(L, -2), "abab") == 0);
  CHECK(lua_isnil(L, -1));
  lua_pop(L, 5);
}

static void classes(lua_State *L) {
  static const char A[] = "test.A", B[] = "test.B", C[] = "test.C";
  luaL_newmetatable(L, A);
  luaL_newmetatable(L, B);
  lua_pop(L, 2);
  void *a = lua_newuserdatauv(L, 8, 0);
  luaL_setmetatable(L, A);
  lua_newuserdatauv(L, 8, 0);
  luaL_setmetatable(L, B);
  lua_newuserdatauv(L, 8, 0); /* no metatable */
  lua_pushinteger(L, 1);
  int top = lua_gettop(L);
  for (int round = 0; round < 2; round++) { /* the second: the classes remembered */
    CHECK(lb_testudata(L, top - 3, A) == a);
    CHECK(lb_testudata(L, top - 2, A) == NULL);
    CHECK(lb_testudata(L, top - 2, B) != NULL);
    CHECK(lb_testudata(L, top - 1, A) == NULL);
    CHECK(lb_testudata(L, top, A) == NULL);
    CHECK(lb_testudata(L, top - 3, C) == NULL); /* no such class yet */
    CHECK(lua_gettop(L) == top);
  }
  luaL_newmetatable(L, C); /* made now: C's userdata are known, A's not C's */
  lua_newuserdatauv(L, 8, 0);
  lua_pushvalue(L, -2);
  lua_setmetatable(L, -2);
  CHECK(lb_testudata(L, -1, C) != NULL);
  CHECK(lb_testudata(L, top - 3, C) == NULL);
  lua_settop(L, 0);
}

static void one_state(int round) {
  size_t before = bytes_in_use();
  lua_State *L = lb_newstate();
  CHECK(L != NULL);
  if (!L) return;
  allocator(L);
  lua_work(L);
  classes(L);
  allocator(L);
  if (COUNTS) CHECK(bytes_in_use() > before);
  lb_close(L);
  size_t after = bytes_in_use();
  if (after != before)
    fprintf(stderr, "state %d: %zu bytes in use before it, %zu after its close\n", round, before,
            after);
  CHECK(after == before);
}

int main(int argc, char **argv) {
  (void)argc;
#if COUNTS
  /* glibc counts the blocks in its thread cache as in use: without the cache
  ** (run again with it off) the counts before a state and after its close agree */
  if (!getenv("GLIBC_TUNABLES")) {
    setenv("GLIBC_TUNABLES", "glibc.malloc.tcache_count=0", 1);
    execv("/proc/self/exe", argv);
    perror("test_lua_state: execv");
    return 1;
  }
#endif
  /* a first state: whatever the C library keeps after its first use stays */
  lb_close(lb_newstate());
  for (int round = 1; round <= 2; round++)
    one_state(round);
  if (failures) return 1;
  printf("test_lua_state: ok%s\n", COUNTS ? "" : " (the bytes in use not counted here)");
  return 0;
}
