/*
** l_core.c -- luaopen_tilua: the entry point of the Lua library. It installs a
** searcher for the Lua half of the library (compiled into the binary, or read
** from a source tree named by TILUA_SOURCE_DIR while developing), preloads the
** C part as `tilua.core` and runs lua/tilua/init.lua.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lbind.h"

struct tl_embedded {
  const char *module, *path, *source;
  size_t len;
};
extern const struct tl_embedded tl_embedded_lua[];
struct tl_embedded_file {
  const char *path, *source;
  size_t len;
};
extern const struct tl_embedded_file tl_embedded_files[];

static const struct tl_embedded *find_embedded(const char *module) {
  for (const struct tl_embedded *e = tl_embedded_lua; e->module; e++)
    if (strcmp(e->module, module) == 0) return e;
  return NULL;
}

/* Load the chunk of an embedded module; from the source tree when asked. */
static int load_module(lua_State *L, const struct tl_embedded *e) {
  const char *dir = getenv("TILUA_SOURCE_DIR");
  int status;
  if (dir && *dir) {
    lua_pushfstring(L, "%s/%s", dir, e->path);
    const char *file = lua_tostring(L, -1);
    lua_pushfstring(L, "@%s", file);
    lb_mark_library_chunk(L, lua_tostring(L, -1));
    lua_pop(L, 1);
    status = luaL_loadfilex(L, file, "t");
    lua_remove(L, -2);
  } else {
    lua_pushfstring(L, "@%s", e->path);
    const char *chunkname = lua_tostring(L, -1);
    lb_mark_library_chunk(L, chunkname);
    status = luaL_loadbufferx(L, e->source, e->len, chunkname, "t");
    lua_remove(L, -2);
  }
  return status;
}

/* package.searchers entry: finds tilua.* modules. Stack effect: name -> loader, path */
static int searcher(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  const struct tl_embedded *e = find_embedded(name);
  if (!e) {
    lua_pushfstring(L, "no embedded tilua module '%s'", name);
    return 1;
  }
  if (load_module(L, e) != LUA_OK) return lua_error(L);
  lua_pushstring(L, e->path);
  return 2;
}

void lb_new_class(lua_State *L, const LbClass *c) {
  luaL_newmetatable(L, c->name); /* sets __name too; an existing one is pushed */
  if (c->meta) luaL_setfuncs(L, c->meta, 0);
  if (lua_getfield(L, -1, "__index") != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, "__index");
  }
  luaL_setfuncs(L, c->methods, 0);
  lua_pop(L, 2);
}

lua_Integer lb_opt_int_field(lua_State *L, int idx, const char *key, lua_Integer dflt,
                             lua_Integer lo, lua_Integer hi, const char *who) {
  lua_getfield(L, idx, key);
  lua_Integer v = dflt;
  if (!lua_isnil(L, -1)) {
    int isint;
    v = lua_tointegerx(L, -1, &isint);
    if (!isint) lb_error(L, "%s: '%s' must be an integer", who, key);
    if (v < lo || v > hi)
      lb_error(L, "%s: '%s' = %lld is out of range [%lld, %lld]", who, key, (long long)v,
               (long long)lo, (long long)hi);
  }
  lua_pop(L, 1);
  return v;
}

/* core.embedded_file(path) -> the text of a C source that `tilua export`
** copies (src/export/..., src/cuda/...: tools/embed.cmake), from the source
** tree when TILUA_SOURCE_DIR names one; nil, message for an unknown path. */
static int embedded_file(lua_State *L) {
  const char *path = luaL_checkstring(L, 1), *dir = getenv("TILUA_SOURCE_DIR");
  for (const struct tl_embedded_file *e = tl_embedded_files; e->path; e++) {
    if (strcmp(e->path, path) != 0) continue;
    if (!dir || !*dir) {
      lua_pushlstring(L, e->source, e->len);
      return 1;
    }
    luaL_Buffer b;
    char chunk[4096];
    size_t n;
    lua_pushfstring(L, "%s/%s", dir, path);
    FILE *f = fopen(lua_tostring(L, -1), "rb");
    if (!f) return luaL_error(L, "cannot read %s", lua_tostring(L, -1));
    luaL_buffinit(L, &b);
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
      luaL_addlstring(&b, chunk, n);
    fclose(f);
    luaL_pushresult(&b);
    return 1;
  }
  lua_pushnil(L);
  lua_pushfstring(L, "no embedded file '%s'", path);
  return 2;
}

/* tilua.core: every binding area of LB_AREAS in one table. */
int luaopen_tilua_core(lua_State *L) {
  static const LbArea *const areas[] = {
#define AREA_REF(name) &lb_area_##name,
      LB_AREAS(AREA_REF)
#undef AREA_REF
  };
  lua_newtable(L);
  for (size_t i = 0; i < sizeof areas / sizeof *areas; i++) {
    for (const LbClass *c = areas[i]->classes; c && c->name; c++)
      lb_new_class(L, c);
    luaL_setfuncs(L, areas[i]->functions, 0);
  }
  lb_set_int(L, "max_nesting", IR_MAX_NESTING);
  lua_pushcfunction(L, embedded_file);
  lua_setfield(L, -2, "embedded_file");
  return 1;
}

int luaopen_tilua(lua_State *L) {
  /* package.searchers: insert ours right after the preload searcher */
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "searchers");
  lua_Integer n = luaL_len(L, -1);
  int present = 0;
  for (lua_Integer i = 1; i <= n && !present; i++) {
    lua_geti(L, -1, i);
    present = lua_tocfunction(L, -1) == searcher;
    lua_pop(L, 1);
  }
  if (!present) {
    for (lua_Integer i = n; i >= 2; i--) {
      lua_geti(L, -1, i);
      lua_seti(L, -2, i + 1);
    }
    lua_pushcfunction(L, searcher);
    lua_seti(L, -2, 2);
  }
  lua_pop(L, 1);
  lua_getfield(L, -1, "preload");
  lua_pushcfunction(L, luaopen_tilua_core);
  lua_setfield(L, -2, "tilua.core");
  lua_pop(L, 2);
  const struct tl_embedded *init = find_embedded("tilua");
  if (!init) return luaL_error(L, "tilua: the Lua library was not embedded");
  if (load_module(L, init) != LUA_OK) return lua_error(L);
  lua_pushliteral(L, "tilua");
  lua_call(L, 1, 1);
  return 1;
}
