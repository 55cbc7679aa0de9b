/*
** l_launch.c -- launch plans: what every launch of a compiled kernel needs,
** decoded once (the kind of each argument, block, cluster, static shared
** memory, the kernel's name), so that a launch converts its arguments and
** calls the runtime without building a table; k:launch's fast path, which
** takes the plan without entering Lua; and the raw cuLaunchKernel loop that
** tools/bench/launch.lua measures it against.
**
**   plan = core.launch_plan(fn, {kinds = {"ptr", "i32", "tmap", ...}, names = {...},
**                                elems = {[i] = the element type a buffer for
**                                pointer i must hold, or false for any},
**                                maps = {[i] = check(v) for tensor map i: raises
**                                unless v fits the parameter (tl.tensor_map_arg's rule)},
**                                block = {x,y,z}, cluster = {x,y,z}, static = bytes,
**                                smem = bytes, name = "k" [, grid = {x,y,z}: the only
**                                grid it may launch on] [, sizes = {[i] = "grid_threads"
**                                | "grid_ctas"}: what integer argument i must be]})
**   plan:launch(grid, args [, smem [, stream [, pdl]]])
**                                       grid: n or {x [, y [, z]]}; args by position or name
**   core.launch_fast(slow) -> launch    launch(k, cfg): through k._plan when it is k._fn's,
**                                       the current device's, and cfg names no block,
**                                       cluster or device; else slow(k, cfg)
**   plan:raw_loop(n, grid, args) -> seconds of n raw cuLaunchKernel calls
**   core.same_inputs(names, tensors, seen, inputs) -> whether a tile program's
**                                       inputs are what its last launch saw (recipe.lua)
**   core.now() -> monotonic seconds
**   core.lua_peek() -> whether launches read Lua 5.4's structures (l_peek.h)
**
** What a launch costs here was measured with the stand-in driver under
** callgrind (docs/PERF.md, "Launch cost"): a buffer argument given again is
** known by its table's address (ArgMemo: no `raw` read, no metatable check);
** the arguments and which of its fields cfg holds are read in the tables
** themselves (l_peek.h), not pushed one API call each, so that 60 arguments
** cost little more than one; the launch's script line comes from
** lb_launch_site (memoized per call site, by the caller's pc), the runtime's
** copy of its file is kept per site, and the kernel's name is interned once
** per plan. A tensor map given again is known the same way as a buffer (its
** fit to the parameter checked once, by the Lua path's own check). An args
** table given again with the same values is not converted again at all
** (Plan.last): 60 arguments then cost what one costs. A launch whose cfg
** names only its grid (an integer) and its arguments, all common ones, pushes
** nothing at all (launch_peeked), and the memo of its call site is checked in
** place (lb_launch_site).
*/
#include <string.h>
#include <time.h>

#include "l_peek.h"
#include "ldevice.h"

#define LB_LAUNCH_PLAN "tilua.LaunchPlan"
#define PLAN_MAX_ARGS 63

typedef enum { ARG_PTR, ARG_I8, ARG_I16, ARG_I32, ARG_I64, ARG_F32, ARG_F64, ARG_TMAP } ArgKind;
static const char *const arg_kind_names[] = {"ptr", "i8",  "i16",  "i32", "i64",
                                             "f32", "f64", "tmap", NULL};
static const int int_bits[] = {[ARG_I8] = 8, [ARG_I16] = 16, [ARG_I32] = 32, [ARG_I64] = 64};
/* The integers a parameter takes: signed or unsigned, so an i32 takes -2^31 .. 2^32 - 1. */
static const lua_Integer int_min[] = {
    [ARG_I8] = -0x80, [ARG_I16] = -0x8000, [ARG_I32] = -0x80000000LL, [ARG_I64] = LUA_MININTEGER};
static const lua_Integer int_max[] = {
    [ARG_I8] = 0xff, [ARG_I16] = 0xffff, [ARG_I32] = 0xffffffffLL, [ARG_I64] = LUA_MAXINTEGER};

/* The buffer a pointer argument was given last: the buffer's table and its
** LbBuffer; or the tensor map a map argument was given last and its bytes.
** The plan's third user value holds them (the table or map at 2i + 1, the
** buffer's `raw` at 2i + 2), so the object at that address is still that
** one, and its memory still there, at the next launch. Its fourth holds the
** element type each pointer's buffer must hold (elems), its fifth the maps'
** checks (maps). */
typedef struct ArgMemo {
  const void *table;
  const LbBuffer *buf;
  const uint8_t *map;
} ArgMemo;

enum { SIZE_ANY, SIZE_THREADS, SIZE_CTAS };

typedef struct Plan {
  CUfunction fn;
  int nargs;
  unsigned char kinds[PLAN_MAX_ARGS];
  ArgMemo memo[PLAN_MAX_ARGS];
  unsigned block[3], cluster[3];
  unsigned grid[3]; /* kernel_spec.grid: the only grid it runs on, when has_grid */
  bool has_grid;
  /* kernel_spec.sizes: argument i must be the grid's threads (SIZE_THREADS)
  ** or CTAs (SIZE_CTAS), else SIZE_ANY */
  unsigned char sizes[PLAN_MAX_ARGS];
  bool has_sizes;
  bool peek; /* arguments are read in their table's array part (lb_peek_ok) */
  unsigned static_smem, smem;
  LbFunction
      *func; /* its function (user value 1 keeps it): func->smem_allowed, the attribute's memo */
  const void *buffer_mt; /* the metatable of device buffers (LB_BUFFER) */
  const char *name;      /* the kernel's, interned by the runtime */
  TlcuRuntime *rt;       /* the device the function was loaded on */
  const int *cur;        /* the state's current device (lb_current_device) */
  /* The last launch whose arguments were all common ones read in place
  ** (pack_common): its args table, the values read there and what they
  ** packed to. A launch with the same table holding the same values, no
  ** buffer freed since, passes those slots without converting anything.
  ** Its buffers' tables are the ArgMemo ones (pack_common takes no other),
  ** alive in the plan's user value: a new ArgMemo drops it. */
  struct {
    const void *table;
    unsigned frees; /* lb_buffer_frees() then */
    LbValue values[PLAN_MAX_ARGS];
    uint64_t slots[PLAN_MAX_ARGS];
    void *ptrs[PLAN_MAX_ARGS]; /* &slots[i] (a userdata never moves) */
  } last;
} Plan;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int core_now(lua_State *L) {
  lua_pushnumber(L, now_s());
  return 1;
}

/* core.lua_peek() -> whether launches read Lua 5.4's structures (l_peek.h). */
static int core_lua_peek(lua_State *L) {
  lua_pushboolean(L, lb_peek_ok(L));
  return 1;
}

static void dims_field(lua_State *L, int t, const char *key, unsigned d[3]) {
  d[0] = d[1] = d[2] = 1;
  if (lua_getfield(L, t, key) == LUA_TTABLE)
    for (int i = 0; i < 3; i++) {
      lua_Integer v = (lua_geti(L, -1, i + 1), lua_tointeger(L, -1));
      lua_pop(L, 1);
      if (v < 1 || v > 0x7fffffff) lb_error(L, "launch plan: %s[%d] is out of range", key, i + 1);
      d[i] = (unsigned)v;
    }
  lua_pop(L, 1);
}

static lua_Integer int_field(lua_State *L, int t, const char *key) {
  lua_getfield(L, t, key);
  lua_Integer v = luaL_optinteger(L, -1, 0);
  lua_pop(L, 1);
  if (v < 0 || v > 0x7fffffff) lb_error(L, "launch plan: %s is out of range", key);
  return v;
}

/* Is spec.maps[i + 1] (at t) a check? (Else the Lua path.) */
static bool has_map_check(lua_State *L, int t, int i) {
  bool ok = lua_getfield(L, t, "maps") == LUA_TTABLE && lua_geti(L, -1, i + 1) == LUA_TFUNCTION;
  lua_pop(L, 2);
  return ok;
}

/* core.launch_plan(fn, spec) -> plan, or nil when an argument kind has no fast path. */
static int core_launch_plan(lua_State *L) {
  LbFunction *f = luaL_checkudata(L, 1, LB_FUNCTION);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_getfield(L, 2, "kinds");
  luaL_checktype(L, -1, LUA_TTABLE);
  int n = (int)luaL_len(L, -1);
  if (n > PLAN_MAX_ARGS) return 0;
  unsigned char kinds[PLAN_MAX_ARGS];
  for (int i = 0; i < n; i++) {
    lua_geti(L, -1, i + 1);
    const char *k = lua_tostring(L, -1);
    int j = 0;
    while (k && arg_kind_names[j] && strcmp(arg_kind_names[j], k))
      j++;
    lua_pop(L, 1);
    if (!k || !arg_kind_names[j]) return 0; /* 16-bit floats: the Lua path */
    kinds[i] = (unsigned char)j;
  }
  lua_pop(L, 1);
  Plan *p = lua_newuserdatauv(L, sizeof *p, 5);
  memset(p, 0, sizeof *p);
  for (int i = 0; i < n; i++)
    if (kinds[i] == ARG_TMAP && !has_map_check(L, 2, i)) return 0;
  p->fn = f->fn;
  p->func = f;
  p->rt = lb_function_runtime(L, 1);
  p->cur = lb_current_device(L);
  p->nargs = n;
  p->peek = lb_peek_ok(L);
  for (int i = 0; i < n; i++)
    p->last.ptrs[i] = &p->last.slots[i];
  memcpy(p->kinds, kinds, (size_t)n);
  dims_field(L, 2, "block", p->block);
  dims_field(L, 2, "cluster", p->cluster);
  p->has_grid = lua_getfield(L, 2, "grid") == LUA_TTABLE;
  lua_pop(L, 1);
  dims_field(L, 2, "grid", p->grid);
  if (lua_getfield(L, 2, "sizes") == LUA_TTABLE)
    for (int i = 0; i < n; i++) {
      const char *rel = (lua_geti(L, -1, i + 1), lua_tostring(L, -1));
      p->sizes[i] = !rel                               ? SIZE_ANY
                    : strcmp(rel, "grid_threads") == 0 ? SIZE_THREADS
                    : strcmp(rel, "grid_ctas") == 0    ? SIZE_CTAS
                                                       : SIZE_ANY;
      p->has_sizes = p->has_sizes || p->sizes[i] != SIZE_ANY;
      lua_pop(L, 1);
    }
  lua_pop(L, 1);
  p->static_smem = (unsigned)int_field(L, 2, "static");
  p->smem = (unsigned)int_field(L, 2, "smem");
  lua_getfield(L, 2, "name");
  p->name = tlcu_intern(p->rt, lua_isstring(L, -1) ? lua_tostring(L, -1) : "kernel");
  lua_pop(L, 1);
  luaL_getmetatable(L, LB_BUFFER);
  p->buffer_mt = lua_topointer(L, -1);
  lua_pop(L, 1);
  luaL_setmetatable(L, LB_LAUNCH_PLAN);
  lua_pushvalue(L, 1); /* the function (and through it the module) lives as long as the plan */
  lua_setiuservalue(L, -2, 1);
  lua_getfield(L, 2, "names");
  lua_setiuservalue(L, -2, 2);
  lua_createtable(L, 2 * n, 0); /* the buffers of ArgMemo */
  lua_setiuservalue(L, -2, 3);
  lua_getfield(L, 2, "elems");
  lua_setiuservalue(L, -2, 4);
  lua_getfield(L, 2, "maps");
  lua_setiuservalue(L, -2, 5);
  return 1;
}

/* The name of parameter i (0-based), for messages. */
static const char *param_name(lua_State *L, int plan, int i) {
  lua_getiuservalue(L, plan, 2);
  const char *s =
      lua_istable(L, -1) && lua_geti(L, -1, i + 1) == LUA_TSTRING ? lua_tostring(L, -1) : "?";
  return s; /* stays on the stack until the error is raised */
}

/* A buffer table at idx passed for pointer i must hold the element type the
** plan says (elems[i]; false or none: any), or bytes (its `size` 1: raw memory). */
static void check_buffer_type(lua_State *L, int plan, int i, int idx) {
  if (lua_getiuservalue(L, plan, 4) != LUA_TTABLE) {
    lua_pop(L, 1);
    return;
  }
  if (lua_geti(L, -1, i + 1) != LUA_TUSERDATA) {
    lua_pop(L, 2);
    return;
  }
  int bytes = lua_getfield(L, idx, "size") == LUA_TNUMBER && lua_tointeger(L, -1) == 1;
  lua_pop(L, 1);
  lua_getfield(L, idx, "type");
  if (!bytes && !lua_isnil(L, -1) && !lua_compare(L, -1, -2, LUA_OPEQ)) {
    const char *want = luaL_tolstring(L, -2, NULL);
    const char *got = luaL_tolstring(L, -2, NULL);
    lb_error(
        L,
        "launch: argument '%s' is a buffer of %s, but the parameter points to %s (a buffer of %s or of bytes, or any buffer for ptr<i8>)",
        param_name(L, plan, i), got, want, want);
  }
  lua_pop(L, 3);
}

/* The address of tl.device's buffer table at idx (its `raw`), argument i of
** the plan at index plan: a live LB_BUFFER, or a view's address (an integer
** `raw`, never remembered); 0 when it is none. The table
** given last for i is remembered (ArgMemo), so that the next launch with it
** reads neither its `raw` nor a metatable. What it reads stays on the
** stack (pack_all pops it all at once). */
static CUdeviceptr table_buffer(lua_State *L, int plan, Plan *p, int i, int idx) {
  ArgMemo *m = &p->memo[i];
  const void *table = lua_topointer(L, idx);
  if (table != m->table) {
    lua_pushliteral(L, "raw");
    lua_rawget(L, idx);
    if (lua_isinteger(L, -1)) { /* a view: its address */
      check_buffer_type(L, plan, i, idx);
      return (CUdeviceptr)lua_tointeger(L, -1);
    }
    if (!lua_getmetatable(L, -1)) return 0;
    if (lua_topointer(L, -1) != p->buffer_mt) return 0;
    check_buffer_type(L, plan, i, idx); /* once per table: its type never changes */
    lua_getiuservalue(L, plan, 3);
    lua_pushvalue(L, idx);
    lua_rawseti(L, -2, 2 * i + 1);
    lua_pushvalue(L, -3);
    lua_rawseti(L, -2, 2 * i + 2);
    lua_pop(L, 1);
    m->table = table, m->buf = lua_touserdata(L, -2);
    p->last.table = NULL; /* its buffers' tables are kept alive only as ArgMemo's */
  }
  if (!m->buf->live) lb_error(L, "attempt to use a freed device buffer");
  return m->buf->ptr;
}

/* The bytes of the tensor map at idx, argument i: checked against the
** parameter once per map (the plan's maps[i + 1], which raises with the Lua
** path's message), then remembered like a buffer. What it reads stays on the
** stack. */
static const uint8_t *map_arg(lua_State *L, int plan, Plan *p, int i, int idx) {
  ArgMemo *m = &p->memo[i];
  const void *map = lua_topointer(L, idx);
  if (map && map == m->table) return m->map;
  lua_getiuservalue(L, plan, 5);
  lua_geti(L, -1, i + 1);
  lua_pushvalue(L, idx);
  lua_call(L, 1, 0);
  lua_pop(L, 1);
  const uint8_t *bytes = lb_tensor_map_bytes(L, idx);
  if (!bytes) /* a map the check took that is no device's (the emulator's) */
    lb_error(L, "launch: argument '%s' must be a tensor map (tl.device.tensor_map), got %s",
             param_name(L, plan, i), luaL_typename(L, idx));
  lua_getiuservalue(L, plan, 3);
  lua_pushvalue(L, idx);
  lua_rawseti(L, -2, 2 * i + 1);
  lua_pop(L, 1);
  m->table = map, m->buf = NULL, m->map = bytes;
  p->last.table = NULL;
  return bytes;
}

/* Convert argument i (at idx) into its slot (a tensor map: the address of its
** bytes); raises with the parameter's name. Values it pushes stay (pack_all
** pops them all at once). */
static void pack(lua_State *L, int plan, Plan *p, int i, int idx, int t, uint64_t *slot) {
  *slot = 0;
  switch ((ArgKind)p->kinds[i]) {
  case ARG_TMAP: *slot = (uint64_t)(uintptr_t)map_arg(L, plan, p, i, idx); return;
  case ARG_PTR: {
    CUdeviceptr a = t == LUA_TTABLE         ? table_buffer(L, plan, p, i, idx)
                    : lua_isinteger(L, idx) ? (CUdeviceptr)lua_tointeger(L, idx)
                                            : 0;
    if (!a && !(t == LUA_TNUMBER && lua_isinteger(L, idx)))
      lb_error(L, "launch: argument '%s' must be a device buffer, got %s", param_name(L, plan, i),
               luaL_typename(L, idx));
    *slot = (uint64_t)a;
    return;
  }
  case ARG_F32:
  case ARG_F64: {
    if (t != LUA_TNUMBER)
      lb_error(L, "launch: argument '%s' must be a number", param_name(L, plan, i));
    double d = lua_tonumber(L, idx);
    if (p->kinds[i] == ARG_F32) {
      float f = (float)d;
      memcpy(slot, &f, 4);
    } else {
      memcpy(slot, &d, 8);
    }
    return;
  }
  default: {
    int ok = 0;
    lua_Integer v = t == LUA_TNUMBER ? lua_tointegerx(L, idx, &ok) : 0;
    if (!ok) {
      if (t != LUA_TBOOLEAN)
        lb_error(L, "launch: argument '%s' must be an integer, got %s", param_name(L, plan, i),
                 luaL_tolstring(L, idx, NULL));
      v = lua_toboolean(L, idx);
    }
    /* param_name pushes: only on the way to the error (the stack's count is the caller's) */
    if (v < int_min[p->kinds[i]] || v > int_max[p->kinds[i]])
      lb_launch_int(L, param_name(L, plan, i), int_bits[p->kinds[i]], v);
    uint64_t u = (uint64_t)v; /* little endian: the low bytes are the narrow value */
    memcpy(slot, &u, 8);
    return;
  }
  }
}

static void grid_check(lua_State *L, const Plan *p, const unsigned g[3]);

/* The grid {v, 1, 1} (v an integer), checked. */
static void grid_int(lua_State *L, lua_Integer v, const Plan *p, unsigned g[3]) {
  if (v < 1 || v > 0x7fffffff) lb_error(L, "launch: grid %lld is out of range", (long long)v);
  g[0] = (unsigned)v, g[1] = g[2] = 1;
  grid_check(L, p, g);
}

/* The grid at idx (an integer or {x [, y [, z]]}), a multiple of the cluster. */
static void grid_arg(lua_State *L, int idx, const Plan *p, unsigned g[3]) {
  if (lua_isinteger(L, idx)) {
    grid_int(L, lua_tointeger(L, idx), p, g);
    return;
  }
  if (!lua_istable(L, idx))
    lb_error(L, "launch: grid must be an integer or {x, y, z}, got %s", luaL_typename(L, idx));
  for (int i = 0; i < 3; i++) {
    int t = lua_geti(L, idx, i + 1);
    lua_Integer v = t == LUA_TNIL ? 1 : lua_tointeger(L, -1);
    lua_pop(L, 1);
    if (v < 1 || v > 0x7fffffff) lb_error(L, "launch: grid[%d] is out of range", i + 1);
    g[i] = (unsigned)v;
  }
  grid_check(L, p, g);
}

/* The grid g a multiple of the cluster, and the kernel's own when it has one. */
static void grid_check(lua_State *L, const Plan *p, const unsigned g[3]) {
  for (int i = 0; i < 3; i++)
    if (p->cluster[i] > 1 && g[i] % p->cluster[i]) /* (a division costs more than the test) */
      lb_error(L, "launch: grid dimension %d (%u) is not a multiple of the cluster's (%u)", i + 1,
               g[i], p->cluster[i]);
  if (p->has_grid && (g[0] != p->grid[0] || g[1] != p->grid[1] || g[2] != p->grid[2]))
    lb_error(
        L,
        "launch: kernel '%s' runs on the grid {%u, %u, %u} only (its kernel_spec.grid), got {%u, %u, %u}",
        p->name, p->grid[0], p->grid[1], p->grid[2], g[0], g[1], g[2]);
}

/* Argument i, value v (as l_peek.h's reads or arg_value give it), into its
** slot when it is one of the common cases: an integer that fits, a number for
** a float, the buffer the argument had last (still live). Else false: pack
** takes it, with its messages. */
static inline bool pack_common(const Plan *p, int i, const LbValue *v, uint64_t *slot) {
  unsigned char k = p->kinds[i];
  switch ((ArgKind)k) {
  case ARG_PTR: { /* the table remembered is a buffer's (ArgMemo), so m->buf is there */
    const ArgMemo *m = &p->memo[i];
    if (v->tag != LB_TAG_TABLE || v->v.gc != m->table || !m->buf->live) return false;
    *slot = (uint64_t)m->buf->ptr;
    return true;
  }
  case ARG_F32:
  case ARG_F64: {
    if (v->tag != LB_TAG_INT && v->tag != LB_TAG_FLOAT) return false;
    double d = v->tag == LB_TAG_INT ? (double)v->v.i : v->v.n;
    float f = (float)d;
    *slot = 0;
    if (k == ARG_F32) memcpy(slot, &f, 4);
    else memcpy(slot, &d, 8);
    return true;
  }
  case ARG_TMAP: return false;
  default:
    if (v->tag != LB_TAG_INT || v->v.i < int_min[k] || v->v.i > int_max[k]) return false;
    *slot = (uint64_t)v->v.i; /* little endian: the low bytes are the narrow value */
    return true;
  }
}

/* The value on top of the stack (of type t) as pack_common takes it. */
static LbValue arg_value(lua_State *L, int t) {
  LbValue v = {.tag = 0};
  if (t == LUA_TTABLE) {
    v.tag = LB_TAG_TABLE, v.v.gc = (void *)(uintptr_t)lua_topointer(L, -1);
  } else if (t == LUA_TNUMBER && lua_isinteger(L, -1)) {
    v.tag = LB_TAG_INT, v.v.i = lua_tointeger(L, -1);
  } else if (t == LUA_TNUMBER) {
    v.tag = LB_TAG_FLOAT, v.v.n = lua_tonumber(L, -1);
  }
  return v;
}

/* The arguments in the table t (what lua_topointer gives) when the plan reads
** them in its array part (l_peek.h) and every one is a common one
** (pack_common), or they are the last launch's (Plan.last): packed into
** slots and ptrs, or left there (*slots and *ptrs say which). Else false,
** nothing changed but the slots. The array holds the arguments, nothing after
** them: its length is theirs. */
static bool pack_in_place(Plan *p, const void *t, uint64_t **slots_at, void ***ptrs_at) {
  unsigned n;
  const LbValue *array = lb_peek_array(t, &n);
  int nargs = p->nargs;
  if (n < (unsigned)nargs) return false;
  for (unsigned j = (unsigned)nargs; j < n; j++)
    if (!LB_TAG_IS_NIL(array[j].tag)) return false; /* too many: pack_all says so */
  unsigned nodes;
  const LbNode *node = lb_peek_nodes(t, &nodes);
  for (unsigned j = 0; j < nodes; j++) /* an integer key there may make more (lua_rawlen) */
    if (node[j].key_tag == LB_TAG_INT && !LB_TAG_IS_NIL(node[j].tag)) return false;
  if (t == p->last.table && p->last.frees == lb_buffer_frees() &&
      memcmp(array, p->last.values, (size_t)nargs * sizeof *array) == 0) {
    *slots_at = p->last.slots, *ptrs_at = p->last.ptrs; /* (padding that differs only misses) */
    return true;
  }
  uint64_t *slots = *slots_at;
  for (int j = 0; j < nargs; j++)
    if (!pack_common(p, j, &array[j], &slots[j])) return false;
  for (int j = 0; j < nargs; j++)
    (*ptrs_at)[j] = &slots[j];
  p->last.table = t, p->last.frees = lb_buffer_frees();
  memcpy(p->last.values, array, (size_t)nargs * sizeof *array);
  memcpy(p->last.slots, slots, (size_t)nargs * sizeof *slots);
  return true;
}

/* The arguments in the table at idx: by position, else by parameter name.
** The common ones are read in the table's array part (pack_in_place) where
** the plan may; the rest are pushed, and what is read for them stays on the
** stack until the end (one pop for all). */
static void pack_all(lua_State *L, int plan, Plan *p, int idx, uint64_t **slots_at,
                     void ***ptrs_at) {
  if (lua_type(L, idx) != LUA_TTABLE) luaL_checktype(L, idx, LUA_TTABLE);
  const void *table = lua_topointer(L, idx);
  if (p->peek && pack_in_place(p, table, slots_at, ptrs_at)) return;
  lua_Unsigned len = lua_rawlen(L, idx);
  if (len > (lua_Unsigned)p->nargs)
    lb_error(L, "launch: %d arguments for %d parameters", (int)len, p->nargs);
  int nargs = p->nargs;
  unsigned n = 0;
  const LbValue *array = p->peek ? lb_peek_array(table, &n) : NULL;
  uint64_t *slots = *slots_at;
  void **ptrs = *ptrs_at;
  for (int j = 0; j < nargs; j++)
    ptrs[j] = &slots[j];
  int base = lua_gettop(L);
  /* each argument leaves what was read for it (at most 4 values) */
  luaL_checkstack(L, 4 * p->nargs + 8, "launch arguments");
  for (int i = 0; i < nargs; i++) {
    if ((unsigned)i < n && pack_common(p, i, &array[i], &slots[i])) continue;
    int t = lua_rawgeti(L, idx, i + 1);
    LbValue v = arg_value(L, t);
    if (pack_common(p, i, &v, &slots[i])) continue;
    if (t == LUA_TNIL) {
      lua_pop(L, 1);
      const char *name = param_name(L, plan, i);
      t = lua_getfield(L, idx, name);
      lua_remove(L, -2); /* the names table */
      lua_remove(L, -2); /* the name */
      if (t == LUA_TNIL)
        lb_error(L, "launch: missing argument '%s' (#%d)", param_name(L, plan, i), i + 1);
    }
    pack(L, plan, p, i, lua_gettop(L), t, &slots[i]); /* the argument is on top */
    /* a tensor map is passed as its 128 bytes, the rest as the slot's */
    if (p->kinds[i] == ARG_TMAP) ptrs[i] = (void *)(uintptr_t)slots[i];
    if (p->peek) /* a map's check ran Lua, which may have changed the table */
      array = lb_peek_array(lua_topointer(L, idx), &n);
  }
  lua_settop(L, base);
}

/* The sizes the kernel accepts (kernel_spec.sizes), checked as the Lua path
** checks them (gpu/launch.lua): an integer argument that must be the grid's
** threads or CTAs. */
static void check_sizes(lua_State *L, int plan, const Plan *p, const unsigned g[3],
                        const uint64_t *slots) {
  int64_t ctas = (int64_t)g[0] * g[1] * g[2];
  int64_t threads = ctas * p->block[0] * p->block[1] * p->block[2];
  for (int i = 0; i < p->nargs; i++) {
    if (p->sizes[i] == SIZE_ANY) continue;
    int64_t want = p->sizes[i] == SIZE_THREADS ? threads : ctas, got = (int64_t)slots[i];
    if (got != want)
      lb_error(
          L, "launch: kernel '%s' takes %s = the grid's %s (%lld: its kernel_spec.sizes), got %lld",
          p->name, param_name(L, plan, i), p->sizes[i] == SIZE_THREADS ? "threads" : "CTAs",
          (long long)want, (long long)got);
  }
}

/* Issue the launch of plan p (at index plan) on grid cfg->grid with the
** packed arguments: the plan's block and cluster, shared memory (dyn: the
** dynamic bytes), stream and PDL, at the script's line. */
static void launch_issue(lua_State *L, int plan, Plan *p, TlcuLaunch *cfg, const uint64_t *slots,
                         void **ptrs, lua_Integer dyn, CUstream stream, bool pdl) {
  TlcuRuntime *rt = p->rt;
  if (p->has_sizes) check_sizes(L, plan, p, cfg->grid, slots);
  memcpy(cfg->block, p->block, sizeof cfg->block);
  memcpy(cfg->cluster, p->cluster, sizeof cfg->cluster);
  cfg->smem = lb_launch_smem(L, p->static_smem, dyn);
  cfg->smem_allowed = cfg->smem <= p->func->smem_allowed;
  cfg->stream = stream;
  cfg->pdl = pdl;
  cfg->hang = NULL;
  cfg->name = p->name;
  LbSiteNote *note;
  if (!lb_launch_site(L, &cfg->file, &cfg->line, &note)) {
    cfg->file = NULL;
  } else if (note) { /* the runtime's copy of the file, made once per site (its records keep it) */
    if (note->owner != rt) note->owner = rt, note->file = tlcu_intern(rt, cfg->file);
    cfg->file = note->file;
  }
  if (tlcu_launch(rt, p->fn, cfg, ptrs) != TLCU_OK) lb_cuda_error_of(L, rt, "launch");
  if (cfg->smem > p->func->smem_allowed) p->func->smem_allowed = cfg->smem;
}

/* Launch through the plan at index plan: the grid, the arguments' table, the
** dynamic shared memory (none: the plan's), the stream (none: the default
** stream) and whether it is a programmatic dependent launch at the given indices. */
static void do_launch(lua_State *L, int plan, Plan *p, int grid, int args, int smem, int stream,
                      int pdl) {
  uint64_t slots_here[PLAN_MAX_ARGS], *slots = slots_here;
  void *ptrs_here[PLAN_MAX_ARGS], **ptrs = ptrs_here;
  TlcuLaunch cfg;
  grid_arg(L, grid, p, cfg.grid);
  pack_all(L, plan, p, args, &slots, &ptrs);
  lua_Integer dyn = lua_isnoneornil(L, smem) ? (lua_Integer)p->smem : luaL_checkinteger(L, smem);
  launch_issue(L, plan, p, &cfg, slots, ptrs, dyn, lb_stream_arg(L, stream), lua_toboolean(L, pdl));
}

/* plan:launch(grid, args [, smem [, stream]]): asynchronous, like Kernel:launch. */
static int plan_launch(lua_State *L) {
  Plan *p = luaL_checkudata(L, 1, LB_LAUNCH_PLAN);
  do_launch(L, 1, p, 2, 3, 4, 5, 6);
  return 0;
}

/* The upvalues of launch_fast: the slow path, the plan's metatable, the keys
** it reads in k, then in cfg (CFG_*), and the addresses of cfg's keys. */
enum { UP_SLOW = 1, UP_PLAN_MT, UP_PLAN, UP_CFG, UP_CFG_KEYS = UP_CFG + 8 };
enum {
  CFG_GRID,
  CFG_ARGS,
  CFG_SMEM,
  CFG_STREAM,
  CFG_PDL,
  CFG_BLOCK,
  CFG_CLUSTER,
  CFG_DEVICE,
  CFG_KEYS
};
static const char *const cfg_keys[CFG_KEYS] = {"grid", "args",  "smem",    "stream",
                                               "pdl",  "block", "cluster", "device"};

/* Push t[upvalue key] (raw). */
static int get_up(lua_State *L, int t, int up) {
  lua_pushvalue(L, lua_upvalueindex(up));
  return lua_rawget(L, t);
}

/* cfg's keys as launch_fast_call tells them apart: the address of each one's
** text (lua_tostring: Lua keeps one copy of a short string) and, where the
** table's hash part is read (l_peek.h), each one's string object. */
typedef struct CfgKeys {
  const char *text[CFG_KEYS];
  const void *string[CFG_KEYS];
  bool peek;
  const void *plan_mt; /* the metatable of launch plans */
} CfgKeys;
enum { CFG_SLOW = 1 << CFG_BLOCK | 1 << CFG_CLUSTER | 1 << CFG_DEVICE };

/* The launch's fields in cfg (at t): each into its slot from index `at` on
** (CFG_*; nil when absent), the fields the slow path takes (CFG_SLOW) left
** out. Which are there is read in the table's hash part where it may be
** (a launch names two or three of the eight: the rest cost nothing), else in
** one lua_next pass. Returns the set of fields there (1 << CFG_*). */
static unsigned cfg_read(lua_State *L, const CfgKeys *keys, int t, int at) {
  unsigned there = 0, n;
  if (keys->peek) {
    const LbNode *node = lb_peek_nodes(lua_topointer(L, t), &n);
    for (unsigned i = 0; i < n; i++)
      if (node[i].key_tag == LB_TAG_SHORT_STRING && !LB_TAG_IS_NIL(node[i].tag))
        for (int j = 0; j < CFG_KEYS; j++)
          if (node[i].key == keys->string[j]) {
            there |= 1u << j;
            break;
          }
    if (there & CFG_SLOW) return there;
    lua_settop(L, at - 1);
    for (int j = 0; j < CFG_BLOCK; j++)
      if (there & (1u << j)) get_up(L, t, UP_CFG + j);
      else lua_pushnil(L);
    return there;
  }
  lua_settop(L, at + CFG_BLOCK - 1);
  lua_pushnil(L);
  while (lua_next(L, t)) {
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
    for (int j = 0; k && j < CFG_KEYS; j++)
      if (k == keys->text[j]) {
        there |= 1u << j;
        if (j < CFG_BLOCK) lua_copy(L, -1, at + j);
        break;
      }
    lua_pop(L, 1);
  }
  return there;
}

/* The launch cfg (what lua_topointer gives) asks for when it names only a
** grid (an integer) and the arguments (a table), read in place: launched,
** true; else false, nothing done. */
static bool launch_peeked(lua_State *L, const CfgKeys *keys, int plan, Plan *p, const void *cfg) {
  const LbNode *grid = NULL, *args = NULL;
  unsigned n;
  const LbNode *node = lb_peek_nodes(cfg, &n);
  for (unsigned i = 0; i < n; i++) {
    if (node[i].key_tag != LB_TAG_SHORT_STRING || LB_TAG_IS_NIL(node[i].tag)) continue;
    if (node[i].key == keys->string[CFG_GRID]) grid = &node[i];
    else if (node[i].key == keys->string[CFG_ARGS]) args = &node[i];
    else
      for (int j = CFG_ARGS + 1; j < CFG_KEYS; j++)
        if (node[i].key == keys->string[j])
          return false; /* smem, stream, pdl, ...: the stack's way */
  }
  if (!args || args->tag != LB_TAG_TABLE || (grid && grid->tag != LB_TAG_INT)) return false;
  uint64_t slots_here[PLAN_MAX_ARGS], *slots = slots_here;
  void *ptrs_here[PLAN_MAX_ARGS], **ptrs = ptrs_here;
  if (!pack_in_place(p, args->v.gc, &slots, &ptrs)) return false;
  TlcuLaunch c;
  grid_int(L, grid ? grid->v.i : 1, p, c.grid);
  launch_issue(L, plan, p, &c, slots, ptrs, (lua_Integer)p->smem, NULL, false);
  return true;
}

/* launch(k, cfg): the fast path of k:launch (stack: k, cfg). */
static int launch_fast_call(lua_State *L) {
  const CfgKeys *keys = lua_touserdata(L, lua_upvalueindex(UP_CFG_KEYS));
  if (lua_gettop(L) == 2 && lua_type(L, 1) == LUA_TTABLE && lua_type(L, 2) == LUA_TTABLE &&
      get_up(L, 1, UP_PLAN) == LUA_TUSERDATA && lua_getmetatable(L, 3) &&
      lua_topointer(L, 4) == keys->plan_mt) { /* 3 plan, 4 its metatable */
    /* k._plan is nil or the plan of k._fn: whatever changes k._fn clears it
    ** (lua/tilua/gpu/launch.lua, compile.lua) */
    Plan *p = lua_touserdata(L, 3);
    enum { AT = 5 };                    /* cfg's fields */
    if (*p->cur != p->rt->info.ordinal) /* not loaded on the current device */
      goto slow;
    if (keys->peek && launch_peeked(L, keys, 3, p, lua_topointer(L, 2))) {
      lua_settop(L, 1);
      return 1; /* k */
    }
    if (!(cfg_read(L, keys, 2, AT) & CFG_SLOW)) {
      if (lua_isnil(L, AT + CFG_GRID)) lua_pushinteger(L, 1), lua_replace(L, AT + CFG_GRID);
      if (lua_isnil(L, AT + CFG_ARGS)) lua_newtable(L), lua_replace(L, AT + CFG_ARGS);
      do_launch(L, 3, p, AT + CFG_GRID, AT + CFG_ARGS, AT + CFG_SMEM, AT + CFG_STREAM,
                AT + CFG_PDL);
      lua_settop(L, 1);
      return 1; /* k */
    }
  }
slow:
  lua_settop(L, 2); /* the slow path: slow(k, cfg) */
  lua_pushvalue(L, lua_upvalueindex(UP_SLOW));
  lua_insert(L, 1);
  lua_call(L, 2, LUA_MULTRET);
  return lua_gettop(L);
}

/* core.launch_fast(slow) -> launch: a closure of the slow path and the keys it reads. */
static int core_launch_fast(lua_State *L) {
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_settop(L, 1);
  luaL_getmetatable(L, LB_LAUNCH_PLAN);
  lua_pushliteral(L, "_plan");
  for (int j = 0; j < CFG_KEYS; j++)
    lua_pushstring(L, cfg_keys[j]);
  CfgKeys *keys = lua_newuserdatauv(L, sizeof *keys, 0);
  keys->peek = lb_peek_ok(L);
  keys->plan_mt = lua_topointer(L, UP_PLAN_MT); /* (the upvalue keeps it) */
  lua_createtable(L, CFG_KEYS, 0); /* the keys' string objects, read in its array part */
  for (int j = 0; j < CFG_KEYS; j++) {
    keys->text[j] = lua_tostring(L, UP_CFG + j); /* (the stack holds the upvalues-to-be in order) */
    lua_pushvalue(L, UP_CFG + j);
    lua_rawseti(L, -2, j + 1);
  }
  unsigned n;
  const LbValue *a = keys->peek ? lb_peek_array(lua_topointer(L, -1), &n) : NULL;
  keys->peek = a && n >= CFG_KEYS;
  for (int j = 0; keys->peek && j < CFG_KEYS; j++)
    keys->string[j] = a[j].v.gc;
  lua_pop(L, 1);
  lua_pushcclosure(L, launch_fast_call, UP_CFG_KEYS);
  return 1;
}

/* plan:raw_loop(n, grid, args) -> seconds: n plain cuLaunchKernel calls with the
** arguments packed once, then a synchronize (not timed). The peer of a launch. */
static int plan_raw_loop(lua_State *L) {
  Plan *p = luaL_checkudata(L, 1, LB_LAUNCH_PLAN);
  lua_Integer n = luaL_checkinteger(L, 2);
  lb_cuda(L);
  TlcuRuntime *rt = p->rt;
  if (tlcu_finish(rt) != TLCU_OK)
    return lb_cuda_error_of(L, rt, "raw_loop"); /* (its context current) */
  uint64_t slots_here[PLAN_MAX_ARGS], *slots = slots_here;
  void *ptrs_here[PLAN_MAX_ARGS], **ptrs = ptrs_here;
  unsigned g[3];
  grid_arg(L, 3, p, g);
  pack_all(L, 1, p, 4, &slots, &ptrs);
  if (p->cluster[0] * p->cluster[1] * p->cluster[2] > 1 || p->static_smem + p->smem > 48 * 1024)
    return lb_error(
        L, "raw_loop: only for kernels without a cluster and with at most 48 KiB of shared memory");
  double t0 = now_s();
  for (lua_Integer i = 0; i < n; i++)
    if (rt->drv.cuLaunchKernel(p->fn, g[0], g[1], g[2], p->block[0], p->block[1], p->block[2],
                               p->static_smem + p->smem, NULL, ptrs, NULL) != CUDA_SUCCESS)
      return lb_error(L, "raw_loop: cuLaunchKernel failed");
  double t = now_s() - t0;
  if (tlcu_synchronize(rt) != TLCU_OK) return lb_cuda_error_of(L, rt, "raw_loop");
  lua_pushnumber(L, t);
  return 1;
}

/* {======================================================================
** A tile program's launch like the last (tilua.gpu.recipe's same_as_last)
** ======================================================================= */

/* Whether the values at indices a and b are lists of the same numbers of the
** same kinds (4 and 4.0 differ), read as Lua reads them (metamethods and all). */
static bool same_numbers(lua_State *L, int a, int b) {
  if (lua_type(L, a) != LUA_TTABLE || lua_type(L, b) != LUA_TTABLE) return false;
  lua_Integer n = luaL_len(L, a);
  if (n != luaL_len(L, b)) return false;
  for (lua_Integer d = 1; d <= n; d++) {
    lua_geti(L, a, d);
    lua_geti(L, b, d);
    bool same = lua_isinteger(L, -1) == lua_isinteger(L, -2) && lua_rawequal(L, -1, -2) &&
                lua_type(L, -1) == LUA_TNUMBER;
    lua_pop(L, 2);
    if (!same) return false;
  }
  return true;
}

/* A tensor input v (at index v) against the copy the last launch kept (at
** index seen: {buffer =, shape =, strides =}): the same buffer, the same
** numbers in its shape and strides. v is {buffer, shape [, strides]} with the
** fields by name or the first two by position. */
/* Push v.name, or v[i] where that is nil or false (Lua's `v.name or v[i]`). */
static void field_or_index(lua_State *L, int v, const char *name, lua_Integer i) {
  if (lua_getfield(L, v, name) != LUA_TNIL && lua_toboolean(L, -1)) return;
  lua_pop(L, 1);
  lua_geti(L, v, i);
}

static bool same_tensor(lua_State *L, int seen, int v) {
  if (lua_type(L, seen) != LUA_TTABLE || lua_type(L, v) != LUA_TTABLE) return false;
  int top = lua_gettop(L);
  lua_getfield(L, seen, "buffer");
  field_or_index(L, v, "buffer", 1);
  bool same = lua_rawequal(L, -1, -2);
  if (same) {
    lua_getfield(L, seen, "shape");
    field_or_index(L, v, "shape", 2);
    same = same_numbers(L, top + 3, top + 4);
  }
  if (same) {
    lua_getfield(L, seen, "strides");
    lua_getfield(L, v, "strides");
    same = lua_isnil(L, -2) ? lua_isnil(L, -1) : same_numbers(L, top + 5, top + 6);
  }
  lua_settop(L, top);
  return same;
}

/* core.same_inputs(names, tensors, seen, inputs) -> whether each input names[i]
** of inputs is what the last launch saw (seen[name]): a tensor (tensors[i]) the
** same buffer, shape and strides, another value the same (rawequal). */
static int core_same_inputs(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  luaL_checktype(L, 3, LUA_TTABLE);
  luaL_checktype(L, 4, LUA_TTABLE);
  lua_Integer n = (lua_Integer)lua_rawlen(L, 1);
  bool same = true;
  for (lua_Integer i = 1; same && i <= n; i++) {
    lua_rawgeti(L, 1, i); /* the name: 5 */
    lua_rawgeti(L, 2, i); /* a tensor: 6 */
    lua_pushvalue(L, 5);
    lua_gettable(L, 4); /* the value given: 7 */
    lua_pushvalue(L, 5);
    lua_rawget(L, 3); /* the value seen: 8 */
    same = lua_toboolean(L, 6) ? same_tensor(L, 8, 7) : lua_rawequal(L, 7, 8);
    lua_settop(L, 4);
  }
  lua_pushboolean(L, same);
  return 1;
}

/* }====================================================================== */

static const luaL_Reg plan_methods[] = {
    {"launch", plan_launch}, {"raw_loop", plan_raw_loop}, {NULL, NULL}};
static const luaL_Reg launch_functions[] = {
    {"launch_plan", core_launch_plan}, {"launch_fast", core_launch_fast}, {"now", core_now},
    {"lua_peek", core_lua_peek},       {"same_inputs", core_same_inputs}, {NULL, NULL}};

static const LbClass launch_classes[] = {{LB_LAUNCH_PLAN, NULL, plan_methods}, {NULL, NULL, NULL}};
const LbArea lb_area_launch = {launch_classes, launch_functions};
