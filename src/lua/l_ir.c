/*
** l_ir.c -- Lua bindings of the IR core: contexts, the object userdata every
** IR handle is, locations and errors at the user's line, diagnostics, and the
** registry of ops and dialect types. Types and attributes are in l_type.c,
** ops, regions, blocks and values in l_op.c (l_ir.h: what they share).
*/
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "../dialects/dialects.h"
#include "l_ir.h"
#include "l_peek.h"

/* {======================================================================
** Contexts and object userdata
** ======================================================================= */

static const char *const LIBCHUNKS = "tilua.libchunks";
static const char DEFAULT_CTX = 0; /* registry: the default context (by address: no string
                                      to intern at each of the builders' calls) */
static const char BINDINGS = 0;    /* registry: C function -> true, every binding of tilua.core */
static const char BINDING_THREADS =
    0; /* registry: weak set of the coroutines that called a binding */

LbContext *lb_push_context(lua_State *L, IrContext *ctx, int owned) {
  LbContext *c = lua_newuserdatauv(L, sizeof *c, 1); /* user value: its Type userdata (push_type) */
  c->ctx = NULL;                                     /* empty until the resource is attached */
  c->owned = 0;
  luaL_setmetatable(L, LB_CONTEXT);
  c->ctx = ctx;
  c->owned = owned;
  return c;
}

/* Stack: -> the registry's table at `key`, weak as `mode` ("k" or "v") says;
** made on first use. */
static void push_weak_table(lua_State *L, const void *key, const char *mode) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, key) == LUA_TTABLE) return;
  lua_pop(L, 1);
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushstring(L, mode);
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, key);
}

/* A coroutine that calls a binding is remembered (weakly), so that a close
** can look for the binding calls in progress on its stack (context_in_use). */
static void note_thread(lua_State *L) {
  if (lua_pushthread(L)) { /* the main thread: always looked at */
    lua_pop(L, 1);
    return;
  }
  push_weak_table(L, &BINDING_THREADS, "k");
  lua_pushvalue(L, -2);
  if (lua_rawget(L, -2) == LUA_TNIL) {
    lua_pushvalue(L, -3);
    lua_pushboolean(L, 1);
    lua_rawset(L, -4);
  }
  lua_pop(L, 3);
}

/* After a failed allocation of the core in this protected call the IR may be half changed. */
static void check_memory(lua_State *L) {
  if (ir_protect_failed())
    luaL_error(L, "not enough memory (an allocation of the tilua core failed)");
  note_thread(L);
}

LbContext *lb_check_context(lua_State *L, int idx) {
  check_memory(L);
  LbContext *c = lb_testudata(L, idx, LB_CONTEXT);
  if (!c) c = luaL_checkudata(L, idx, LB_CONTEXT); /* (raises) */
  if (!c->ctx) lb_error(L, "attempt to use a closed tilua context");
  return c;
}

LbContext *lb_default_context(lua_State *L) {
  note_thread(L);
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &DEFAULT_CTX) == LUA_TUSERDATA) {
    LbContext *c = lua_touserdata(L, -1);
    if (c->ctx) return c;
  }
  lua_pop(L, 1);
  IrContext *ctx = ir_context_create();
  if (!ctx) luaL_error(L, "out of memory");
  LbContext *c = lb_push_context(L, ctx, 1);
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &DEFAULT_CTX);
  return c;
}

void lb_set_default_context(lua_State *L, int idx) {
  lua_pushvalue(L, idx);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &DEFAULT_CTX);
}

static void new_object(lua_State *L, const char *mt, void *ptr, int ctx_idx) {
  LbObject *o = lua_newuserdatauv(L, sizeof *o, 1);
  o->owner = lua_touserdata(L, ctx_idx);
  o->ptr = ptr;
  luaL_setmetatable(L, mt);
  lua_pushvalue(L, ctx_idx);
  lua_setiuservalue(L, -2, 1);
}

/* A type is interned by its context and lives as long as it: each is pushed as
** one userdata a context (cached: the passes ask values for their types
** thousands of times a compile, and a userdata each was most of that cost). */
static void push_type(lua_State *L, void *ptr, int ctx_idx) {
  if (lua_getiuservalue(L, ctx_idx, 1) != LUA_TTABLE) { /* {type -> Type userdata} */
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setiuservalue(L, ctx_idx, 1);
  }
  if (lua_rawgetp(L, -1, ptr) != LUA_TUSERDATA) {
    lua_pop(L, 1);
    new_object(L, LB_TYPE, ptr, ctx_idx);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, -3, ptr);
  }
  lua_remove(L, -2);
}

void lb_push_object(lua_State *L, const char *mt, void *ptr, int ctx_idx) {
  ctx_idx = lua_absindex(L, ctx_idx);
  if (mt == (const char *)LB_TYPE || !strcmp(mt, LB_TYPE)) push_type(L, ptr, ctx_idx);
  else new_object(L, mt, ptr, ctx_idx);
}

/* The op an object lives in (itself, the op of a region, the parent op of a
** block, the defining op of a value), to refuse objects of erased ops. */
static const IrOp *host_op(const char *mt, void *ptr) {
  switch (mt[sizeof "tilua." - 1]) { /* (the class names differ there: one strcmp at most) */
  case 'O':
    if (mt == (const char *)LB_OP || !strcmp(mt, LB_OP)) return ptr;
    break;
  case 'V':
    if (!strcmp(mt, LB_VALUE)) {
      const IrValue *v = ptr;
      return v->def ? v->def : v->block ? ir_block_parent_op(v->block) : NULL;
    }
    break;
  case 'B':
    if (!strcmp(mt, LB_BLOCK)) return ir_block_parent_op(ptr);
    break;
  case 'R':
    if (!strcmp(mt, LB_REGION)) return ((const IrRegion *)ptr)->parent;
    break;
  }
  return NULL;
}

static void check_not_erased(lua_State *L, const char *mt, void *ptr) {
  const IrOp *h = host_op(mt, ptr);
  if (!h || !h->erased) return;
  if (h == ptr) lb_error(L, "attempt to use an erased op ('%s')", ir_op_name(h));
  lb_error(L, "attempt to use a %s of an erased op ('%s')", mt + 6, ir_op_name(h));
}

void *lb_test_object(lua_State *L, int idx, const char *mt) {
  check_memory(L);
  LbObject *o = lb_testudata(L, idx, mt);
  if (!o) return NULL;
  if (!o->owner->ctx) lb_error(L, "attempt to use an object of a closed tilua context");
  check_not_erased(L, mt, o->ptr);
  return o->ptr;
}

void *lb_check_object(lua_State *L, int idx, const char *mt) {
  check_memory(L);
  LbObject *o = lb_testudata(L, idx, mt);
  if (!o) o = luaL_checkudata(L, idx, mt); /* (raises) */
  if (!o->owner->ctx) lb_error(L, "attempt to use an object of a closed tilua context");
  check_not_erased(L, mt, o->ptr);
  return o->ptr;
}

void lb_push_owner(lua_State *L, int idx) { lua_getiuservalue(L, idx, 1); }
LbContext *lb_owner(lua_State *L, int idx) { return ((LbObject *)lua_touserdata(L, idx))->owner; }

/* Push ptr wrapped with the same owner as the object at idx (nil for NULL). */
void lb_push_like(lua_State *L, const char *mt, void *ptr, int idx) {
  if (!ptr) {
    lua_pushnil(L);
    return;
  }
  idx = lua_absindex(L, idx);
  lb_push_owner(L, idx);
  lb_push_object(L, mt, ptr, -1);
  lua_remove(L, -2);
}

/* The IrContext of an object argument, checking it matches `ctx` when given. */
IrContext *lb_ctx_of(lua_State *L, int idx) { return lb_owner(L, idx)->ctx; }

/* Objects a and b must belong to one context: IR never points into another's arena. */
void lb_same_context(lua_State *L, int a, int b, const char *what) {
  if (lb_ctx_of(L, a) != lb_ctx_of(L, b))
    lb_error(L, "%s: the objects belong to different contexts", what);
}

/* Moving op to a place inside itself would cut it loose from the IR. */
void lb_not_inside(lua_State *L, const IrOp *op, const IrOp *place, const char *what) {
  if (place && ir_op_is_ancestor(op, place))
    lb_error(L, "%s: the place is inside the op itself", what);
}

/* }====================================================================== */

/* {======================================================================
** Locations and errors
** ======================================================================= */

/* is_library_chunk's answers by source pointer (the chunk's name string, which
** lives as long as its functions), per thread, with the state they belong to;
** cleared when a chunk is marked. Finding the user's frame runs for every op
** built, through every library frame above it. */
typedef struct LibChunkMemo {
  const lua_State *L;
  const char *source;
  char name[96]; /* a copy: the pointer of a collected chunk's name may be reused */
  int lib;
} LibChunkMemo;
static _Thread_local LibChunkMemo lib_memo[64];

/* lb_launch_site's answers by call site. A Lua frame waiting in a call is at
** one instruction of its function's code, its saved pc (l_peek.h): a pointer
** into code that lives while the function does, so the pc names the call site.
** The script line is looked up once per site (lua_getinfo's current line walks
** the function's line table: most of what a launch cost) and a launch pays for
** reading the pc and checking the memo; where pcs are not read (lb_peek_ok),
** each launch asks lua_getinfo for the line. The functions are held in a weak
** table of the registry (the memo's slots), so that a memo holds only while
** its function, and so its code, lives. Where pcs are read, that table's slot
** is read in place too (l_peek.h), not through the registry: the table lives
** while its state does, and a state's close (its guard's __gc) moves
** states_closed on, which every memo made before no longer matches. */
typedef enum { SITE_LIBRARY, SITE_USER, SITE_STRING } SiteKind;
typedef struct SiteMemo {
  const lua_State *L;
  const void *fn;     /* the frame's function */
  const void *pc;     /* its saved pc, or NULL when pcs are not read */
  const char *source; /* its chunk name (the function's: alive while it is) */
  int line;           /* the site's line (with a pc) */
  int ref;            /* L's registry reference to the weak table of the memo's functions */
  const void *weak;   /* ... and that table */
  SiteKind kind;      /* a library chunk's, the user's file or a string chunk's */
  unsigned closed;    /* states_closed when it was made */
  LbSiteNote note;    /* the caller's, cleared when the memo is made again */
} SiteMemo;
#define SITE_MEMOS 128
static _Thread_local SiteMemo site_memo[SITE_MEMOS];
static const char SITE_FUNCTIONS = 0; /* registry key of the weak table's reference */
static atomic_uint states_closed;     /* states whose weak table is gone, in all threads */

static int site_state_closed(lua_State *L) {
  (void)L;
  atomic_fetch_add(&states_closed, 1);
  return 0;
}

void lb_mark_library_chunk(lua_State *L, const char *chunkname) {
  memset(lib_memo, 0, sizeof lib_memo);
  memset(site_memo, 0, sizeof site_memo);
  if (lua_getfield(L, LUA_REGISTRYINDEX, LIBCHUNKS) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, LIBCHUNKS);
  }
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, chunkname);
  lua_pop(L, 1);
}

static int is_library_chunk(lua_State *L, const char *source) {
  LibChunkMemo *m = &lib_memo[((uintptr_t)source >> 4) % (sizeof lib_memo / sizeof lib_memo[0])];
  if (m->source == source && m->L == L && strcmp(m->name, source) == 0) return m->lib;
  int lib = 0;
  if (lua_getfield(L, LUA_REGISTRYINDEX, LIBCHUNKS) == LUA_TTABLE)
    lib = lua_getfield(L, -1, source) != LUA_TNIL, lua_pop(L, 1);
  lua_pop(L, 1);
  if (strlen(source) < sizeof m->name) {
    m->L = L, m->source = source, m->lib = lib;
    strcpy(m->name, source);
  }
  return lib;
}

/* Where a frame is: its chunk's name and the line. A chunk named "=NAME#N"
** (the REPL's inputs: each its own chunk, numbered through the session) is
** NAME from line N on. file gets a Lua-owned string or fb (n bytes). */
static void frame_where(const lua_Debug *ar, char *fb, size_t n, const char **file, int *line) {
  *line = ar->currentline;
  if (ar->source[0] != '@' && ar->source[0] != '=') { /* a string chunk: its short name */
    snprintf(fb, n, "%s", ar->short_src);
    *file = fb;
    return;
  }
  *file = ar->source + 1;
  const char *hash = ar->source[0] == '=' ? strrchr(ar->source, '#') : NULL;
  if (!hash || !hash[1] || strspn(hash + 1, "0123456789") != strlen(hash + 1) ||
      strlen(hash + 1) > 9)
    return;
  snprintf(fb, n, "%.*s", (int)(hash - ar->source - 1), ar->source + 1);
  *file = fb;
  *line += atoi(hash + 1) - 1;
}

/* Find the innermost user frame; fills file (a Lua-owned string, or this
** thread's copy of a chunk's short name) and line. */
int lb_user_frame(lua_State *L, const char **file, int *line) {
  static _Thread_local char fb[LUA_IDSIZE + 16];
  lua_Debug ar;
  /* lua_getstack walks from the top each time: bounded, so that a stack
  ** overflow's message handler does not take quadratic time */
  for (int level = 1; level <= 1000 && lua_getstack(L, level, &ar); level++) {
    if (!lua_getinfo(L, "S", &ar) || ar.what[0] == 'C' || is_library_chunk(L, ar.source)) continue;
    if (!lua_getinfo(L, "l", &ar) || ar.currentline <= 0) continue;
    frame_where(&ar, fb, sizeof fb, file, line);
    return 1;
  }
  return 0;
}

/* Is memo m the one of function fn (alive: its frame is on the stack) at pc?
** Its slot of the weak table holds the memo's function while that lives, and
** two live objects have two addresses. The memos are cleared when a state
** marks its library chunks, before its first launch on that thread; the weak
** table's address is checked too, for a state closed and another made at its
** address and used on another thread. */
static int site_holds(lua_State *L, const SiteMemo *m, const void *fn, const void *pc) {
  if (m->L != L || m->fn != fn || m->pc != pc) return 0;
  if (pc) { /* pcs are read (lb_peek_ok): so is the slot, while no state closed since */
    unsigned n;
    const LbValue *slot = lb_peek_array(m->weak, &n);
    size_t i = (size_t)(m - site_memo);
    return m->closed == atomic_load_explicit(&states_closed, memory_order_relaxed) && i < n &&
           slot[i].tag == LB_TAG_LUA_FUNCTION && slot[i].v.gc == fn;
  }
  if (lua_rawgeti(L, LUA_REGISTRYINDEX, m->ref) != LUA_TTABLE || lua_topointer(L, -1) != m->weak)
    return lua_pop(L, 1), 0;
  lua_rawgeti(L, -1, (m - site_memo) + 1);
  int same = lua_topointer(L, -1) == fn;
  lua_pop(L, 2);
  return same;
}

/* Remember the frame ar in memo m. */
static void site_fill(lua_State *L, SiteMemo *m, lua_Debug *ar, const void *pc) {
  m->source = lua_getinfo(L, "fSl", ar) ? ar->source : NULL; /* pushes the function */
  m->L = L, m->fn = lua_topointer(L, -1), m->pc = pc, m->line = ar->currentline;
  m->note.owner = NULL, m->note.file = NULL;
  m->kind = SITE_LIBRARY;
  if (m->source && !is_library_chunk(L, m->source))
    m->kind = m->source[0] != '@'
                  ? SITE_STRING /* a string or "=NAME#N" chunk: lb_user_frame's way */
              : !pc || ar->currentline > 0 ? SITE_USER
                                           : SITE_LIBRARY; /* no line information */
  m->closed = atomic_load_explicit(&states_closed, memory_order_relaxed);
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &SITE_FUNCTIONS) != LUA_TNUMBER) {
    lua_pop(L, 1);
    lua_createtable(L, SITE_MEMOS, 0); /* slots 1..SITE_MEMOS: all in its array part */
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "v");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
    lua_pushinteger(L, luaL_ref(L, LUA_REGISTRYINDEX));
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &SITE_FUNCTIONS);
    /* the guard: collected only when the state closes (the registry holds it) */
    lua_newuserdatauv(L, 1, 0);
    lua_createtable(L, 0, 1);
    lua_pushcfunction(L, site_state_closed);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    luaL_ref(L, LUA_REGISTRYINDEX);
  }
  m->ref = (int)lua_tointeger(L, -1);
  lua_rawgeti(L, LUA_REGISTRYINDEX, m->ref);
  m->weak = lua_topointer(L, -1);
  lua_pushvalue(L, -3);
  lua_rawseti(L, -2, (m - site_memo) + 1);
  lua_pop(L, 3);
}

int lb_launch_site(lua_State *L, const char **source, int *line, LbSiteNote **note) {
  lua_Debug ar;
  *note = NULL;
  int pcs = lb_peek_ok(L);
  for (int level = 1; level <= 1000 && lua_getstack(L, level, &ar); level++) {
    const void *fn, *pc = NULL;
    if (pcs) {
      fn = lb_peek_func(&ar), pc = lb_peek_pc(&ar);
    } else {
      lua_getinfo(L, "f", &ar);
      fn = lua_iscfunction(L, -1) ? NULL : lua_topointer(L, -1);
      lua_pop(L, 1);
    }
    if (!fn) continue; /* a C function: not a script's */
    SiteMemo *m = &site_memo[((uintptr_t)(pc ? pc : fn) >> 2) % SITE_MEMOS];
    if (!site_holds(L, m, fn, pc)) site_fill(L, m, &ar, pc);
    if (m->kind == SITE_LIBRARY) continue;
    if (m->kind == SITE_STRING) return lb_user_frame(L, source, line);
    if (!pc && (!lua_getinfo(L, "l", &ar) || (m->line = ar.currentline) <= 0)) continue;
    *source = m->source + 1;
    *line = m->line;
    if (pc) *note = &m->note;
    return 1;
  }
  return 0;
}

/* An error message as the user should read it, for a message handler (the
** stack of the error is still there): a message located in a library chunk
** ("lua/tilua/gpu/compile.lua:73: attempt to ...", or a C function's bad argument
** through one) or not located at all is given the innermost user frame's
** file:line instead. Messages located in user code, and non-strings, are kept. */
int lb_locate_error(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  if (lua_type(L, idx) != LUA_TSTRING) return 0;
  const char *msg = lua_tostring(L, idx), *file;
  int line;
  if (!lb_user_frame(L, &file, &line)) return 0;
  const char *rest = msg;
  const char *colon = strchr(msg, ':');
  if (colon && colon > msg && colon - msg < 200 && colon[1] >= '0' && colon[1] <= '9') {
    const char *d = colon + 1;
    while (*d >= '0' && *d <= '9')
      d++;
    if (*d != ':') goto unlocated;
    char chunk[208];
    snprintf(chunk, sizeof chunk, "@%.*s", (int)(colon - msg), msg);
    if (!is_library_chunk(L, chunk)) return 0; /* located in user code */
    rest = d[1] == ' ' ? d + 2 : d + 1;
  }
unlocated:
  lua_pushfstring(L, "%s:%d: %s", file, line, rest);
  lua_replace(L, idx);
  return 1;
}

/* core.locate_error(msg) -> msg (see lb_locate_error); for xpcall handlers. */
static int core_locate_error(lua_State *L) {
  lua_settop(L, 1);
  lb_locate_error(L, 1);
  return 1;
}

void lb_user_where(lua_State *L, char *buf, size_t n) {
  const char *file;
  int line;
  if (lb_user_frame(L, &file, &line)) snprintf(buf, n, "%s:%d", file, line);
  else if (n) buf[0] = '\0';
}

/* A pinned location (core.pin_location): while set, the ops built take it
** instead of walking the stack for the user's frame (a library routine that
** builds a whole kernel pins its caller's line once). */
static const char PINNED_LOC = 0;

IrLoc lb_user_loc(lua_State *L, IrContext *ctx) {
  const char *file;
  int line;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &PINNED_LOC) == LUA_TTABLE) {
    lua_rawgeti(L, -1, 1);
    lua_rawgeti(L, -2, 2);
    IrLoc loc = ir_loc(ctx, lua_tostring(L, -2), (int)lua_tointeger(L, -1), 0);
    lua_pop(L, 3);
    return loc;
  }
  lua_pop(L, 1);
  if (lb_user_frame(L, &file, &line)) return ir_loc(ctx, file, line, 0);
  return ir_loc_unknown();
}

/* core.pin_location(file, line) | core.pin_location(nil): returns the pin before. */
static int core_pin_location(lua_State *L) {
  lua_rawgetp(L, LUA_REGISTRYINDEX, &PINNED_LOC);
  if (lua_isnoneornil(L, 1)) {
    lua_pushnil(L);
  } else if (lua_istable(L, 1)) {
    lua_pushvalue(L, 1);
  } else {
    lua_createtable(L, 2, 0);
    lua_pushstring(L, luaL_checkstring(L, 1));
    lua_rawseti(L, -2, 1);
    lua_pushinteger(L, luaL_checkinteger(L, 2));
    lua_rawseti(L, -2, 2);
  }
  lua_rawsetp(L, LUA_REGISTRYINDEX, &PINNED_LOC);
  return 1; /* the previous pin (a table or nil), to restore */
}

int lb_error(lua_State *L, const char *fmt, ...) {
  const char *file;
  int line;
  va_list ap;
  char msg[1024]; /* C's formats (%lld, %zu, ...), which lua_pushvfstring lacks */
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (lb_user_frame(L, &file, &line)) lua_pushfstring(L, "%s:%d: %s", file, line, msg);
  else lua_pushstring(L, msg);
  return lua_error(L);
}

static void push_loc_prefix(luaL_Buffer *b, IrLoc loc) {
  char tmp[64];
  if (loc.file) {
    luaL_addstring(b, loc.file);
    luaL_addchar(b, ':');
  }
  if (loc.line) {
    snprintf(tmp, sizeof tmp, loc.col ? "%d:%d:" : "%d:", loc.line, loc.col);
    luaL_addstring(b, tmp);
  }
  if (loc.file || loc.line) luaL_addchar(b, ' ');
}

static const char *sev_name(IrSeverity s) {
  return s == IR_SEV_ERROR     ? "error"
         : s == IR_SEV_WARNING ? "warning"
         : s == IR_SEV_NOTE    ? "note"
                               : "remark";
}

static void format_pending(lua_State *L, IrContext *ctx) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  int first = 1;
  for (IrDiag *d = ir_diag_pending(ctx); d; d = d->next) {
    if (!first) luaL_addchar(&b, '\n');
    push_loc_prefix(&b, d->loc);
    if (!first || d->severity != IR_SEV_ERROR) {
      luaL_addstring(&b, sev_name(d->severity));
      luaL_addstring(&b, ": ");
    }
    luaL_addstring(&b, d->message);
    for (IrDiag *n = d->notes; n; n = n->next) {
      luaL_addchar(&b, '\n');
      push_loc_prefix(&b, n->loc);
      luaL_addstring(&b, "note: ");
      luaL_addstring(&b, n->message);
    }
    first = 0;
  }
  luaL_pushresult(&b);
}

void lb_push_diagnostics(lua_State *L, IrContext *ctx) {
  format_pending(L, ctx);
  ir_diag_clear(ctx);
}

int lb_return_diagnostics(lua_State *L, IrContext *ctx) {
  format_pending(L, ctx);
  lb_push_diagnostic_list(L, ctx);
  return 3;
}

static void push_diag_table(lua_State *L, const IrDiag *d) {
  lua_createtable(L, 0, 6);
  lb_set_str(L, "severity", sev_name(d->severity));
  if (d->loc.file) {
    lb_set_str(L, "file", d->loc.file);
  }
  lb_set_int(L, "line", d->loc.line);
  lb_set_int(L, "col", d->loc.col);
  lb_set_str(L, "message", d->message);
  lua_newtable(L);
  int i = 1;
  for (const IrDiag *n = d->notes; n; n = n->next) {
    push_diag_table(L, n);
    lua_rawseti(L, -2, i++);
  }
  lua_setfield(L, -2, "notes");
}

void lb_push_diagnostic_list(lua_State *L, IrContext *ctx) {
  lua_newtable(L);
  int i = 1;
  for (IrDiag *d = ir_diag_pending(ctx); d; d = d->next) {
    push_diag_table(L, d);
    lua_rawseti(L, -2, i++);
  }
  ir_diag_clear(ctx);
}

/* }====================================================================== */

/* {======================================================================
** Context methods
** ======================================================================= */

/* {=== No context vanishes under a binding
** A binding holds raw pointers into a context while it runs, and some of
** what it does can run Lua code: a metamethod (__len, __index, an __attr
** hook), a finalizer run by an allocation, a debug hook. Such code may not
** close a context that a binding call in progress is using: close is refused
** with an error at the script's line. A call in progress is a frame of a
** tilua C function (BINDINGS) on the stack of the running thread, the main
** thread or a coroutine that called a binding and is running or resumed
** another (BINDING_THREADS), and it uses the context when one of its values
** is the context or a userdata whose first user value is (every IR object, a
** parse builder). */

/* Is the value at the top of T the context userdata c, or an object of it? */
static bool belongs_to(lua_State *T, const LbContext *c) {
  if (lua_type(T, -1) != LUA_TUSERDATA) return false;
  if (lua_touserdata(T, -1) == c) return true;
  bool of = lua_getiuservalue(T, -1, 1) == LUA_TUSERDATA && lua_touserdata(T, -1) == c;
  lua_pop(T, 1);
  return of;
}

/* Does some binding frame of thread T (from level `from`) use c? L holds BINDINGS at `set`. */
static bool thread_uses(lua_State *L, int set, lua_State *T, int from, const LbContext *c) {
  lua_Debug ar;
  for (int level = from; lua_getstack(T, level, &ar); level++) {
    if (!lua_getinfo(T, "Sf", &ar)) continue;
    lua_xmove(T, L, 1);
    bool binding = ar.what[0] == 'C' && lua_rawget(L, set) == LUA_TBOOLEAN;
    lua_pop(L, 1);
    if (!binding) continue;
    for (int n = 1; lua_getlocal(T, &ar, n); n++) {
      bool uses = belongs_to(T, c);
      lua_pop(T, 1);
      if (uses) return true;
    }
  }
  return false;
}

static bool context_in_use(lua_State *L, const LbContext *c) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &BINDINGS) != LUA_TTABLE) {
    lua_pop(L, 1);
    return false;
  }
  int set = lua_gettop(L);
  bool used = thread_uses(L, set, L, 1, c); /* level 0 is this close */
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  lua_State *main = lua_tothread(L, -1);
  lua_pop(L, 1);
  if (!used && main != L) used = thread_uses(L, set, main, 0, c);
  if (!used && lua_rawgetp(L, LUA_REGISTRYINDEX, &BINDING_THREADS) == LUA_TTABLE) {
    for (lua_pushnil(L); !used && lua_next(L, -2); lua_pop(L, 1)) {
      lua_State *T = lua_tothread(L, -2);
      if (T && T != L && T != main && lua_status(T) == LUA_OK) used = thread_uses(L, set, T, 0, c);
    }
    if (used) lua_pop(L, 2); /* the key and value lua_next left */
  }
  lua_settop(L, set - 1);
  return used;
}

/* Remember every function of a binding table as a binding (luaopen_tilua_core). */
void lb_register_bindings(lua_State *L, const luaL_Reg *fns) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &BINDINGS) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &BINDINGS);
  }
  for (; fns && fns->name; fns++)
    if (fns->func) {
      lua_pushcfunction(L, fns->func);
      lua_pushboolean(L, 1);
      lua_rawset(L, -3);
    }
  lua_pop(L, 1);
}
/* }=== */

/* ctx:close() and <close>: destroys an owned context, refused while a binding call uses it. */
static int ctx_close(lua_State *L) {
  LbContext *c = luaL_checkudata(L, 1, LB_CONTEXT);
  if (!c->ctx) return 0;
  if (context_in_use(L, c))
    return lb_error(
        L,
        "cannot close a tilua context while a tilua call is using it (this code runs inside that "
        "call: a metamethod, a finalizer or a hook)");
  if (c->owned) ir_context_destroy(c->ctx);
  c->ctx = NULL;
  return 0;
}

/* __gc: nothing can reach the context any more, no binding call either. */
static int ctx_gc(lua_State *L) {
  LbContext *c = luaL_checkudata(L, 1, LB_CONTEXT);
  if (c->ctx && c->owned) ir_context_destroy(c->ctx);
  c->ctx = NULL;
  return 0;
}

static int ctx_tostring(lua_State *L) {
  LbContext *c = luaL_checkudata(L, 1, LB_CONTEXT);
  lua_pushfstring(L, c->ctx ? "tilua.Context (%p)" : "tilua.Context (closed)", (void *)c->ctx);
  return 1;
}

/* ctx:module([loc]) -> a new, detached module op. */
static int ctx_module(lua_State *L) {
  LbContext *c = lb_check_context(L, 1);
  IrOp *m = ir_op_create(c->ctx, OP_MODULE, lb_opt_loc(L, 2, c->ctx), 0, NULL, 0, NULL, 1);
  ir_region_ensure_block(c->ctx, &m->regions[0]);
  lb_push_object(L, LB_OP, m, 1);
  return 1;
}

static int ctx_target_sm(lua_State *L) {
  LbContext *c = lb_check_context(L, 1);
  if (!lua_isnoneornil(L, 2)) ir_context_set_target_sm(c->ctx, (int)luaL_checkinteger(L, 2));
  lua_pushinteger(L, ir_context_target_sm(c->ctx));
  return 1;
}

static int ctx_diagnostics(lua_State *L) {
  LbContext *c = lb_check_context(L, 1);
  lb_push_diagnostic_list(L, c->ctx);
  return 1;
}

static int core_context(lua_State *L) {
  IrContext *ctx = ir_context_create();
  if (!ctx) return luaL_error(L, "out of memory");
  lb_push_context(L, ctx, 1);
  return 1;
}

static int core_default_context(lua_State *L) {
  if (!lua_isnoneornil(L, 1)) {
    lb_check_context(L, 1);
    lb_set_default_context(L, 1);
  }
  lb_default_context(L);
  return 1;
}

LbCtxArg lb_ctx_arg(lua_State *L, int idx) {
  LbContext *c;
  if (lua_isnoneornil(L, idx)) {
    c = lb_default_context(L);
  } else {
    c = lb_check_context(L, idx);
    lua_pushvalue(L, idx);
  }
  return (LbCtxArg){c->ctx, lua_gettop(L)};
}

/* }====================================================================== */

/* {======================================================================
** Shared by the IR bindings (l_ir.h)
** ======================================================================= */

/* A location argument: nil (the user's frame) or {file=, line=, col=}. */
IrLoc lb_opt_loc(lua_State *L, int idx, IrContext *ctx) {
  if (lua_isnoneornil(L, idx)) return lb_user_loc(L, ctx);
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_getfield(L, idx, "file");
  lua_getfield(L, idx, "line");
  lua_getfield(L, idx, "col");
  IrLoc loc =
      ir_loc(ctx, lua_tostring(L, -3), (int)lua_tointeger(L, -2), (int)lua_tointeger(L, -1));
  lua_pop(L, 3);
  return loc;
}

int lb_object_eq(lua_State *L) {
  LbObject *a = lua_touserdata(L, 1), *b = lua_touserdata(L, 2);
  lua_pushboolean(L, a && b && a->ptr == b->ptr);
  return 1;
}

/* A stable identity for use as a table key. */
int lb_object_id(lua_State *L) {
  LbObject *a = lua_touserdata(L, 1);
  luaL_argcheck(L, a != NULL, 1, "tilua object expected");
  lua_pushlightuserdata(L, a->ptr);
  return 1;
}

/* }====================================================================== */

/* {======================================================================
** Registry information
** ======================================================================= */

static void push_traits(lua_State *L, uint32_t traits) {
  static const struct {
    uint32_t bit;
    const char *name;
  } names[] = {{T_TERMINATOR, "terminator"},
               {T_SAME_TYPE, "same_type"},
               {T_SAME_OPERANDS, "same_operands"},
               {T_ISOLATED, "isolated"},
               {T_NO_TERMINATOR, "no_terminator"},
               {T_COMMUTATIVE, "commutative"},
               {T_CONSTANT, "constant"},
               {T_DROPPABLE, "droppable"},
               {T_RECURSIVE, "recursive_effects"},
               {T_SINGLE_BLOCK, "single_block"},
               {T_SYMBOL, "symbol"},
               {T_NO_MERGE, "no_merge"}};
  lua_newtable(L);
  int i = 1;
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
    if (traits & names[k].bit) {
      lua_pushstring(L, names[k].name);
      lua_rawseti(L, -2, i++);
    }
}

static void push_effects(lua_State *L, uint32_t eff) {
  static const char *const res[] = {
#define X(id, doc) doc,
      IR_RESOURCE_LIST(X)
#undef X
  };
  lua_newtable(L);
  int i = 1;
  for (int r = 0; r < IR_RES__COUNT; r++) {
    if (eff & (1u << r)) {
      lua_pushfstring(L, "reads %s", res[r]);
      lua_rawseti(L, -2, i++);
    }
    if (eff & (1u << (16 + r))) {
      lua_pushfstring(L, "writes %s", res[r]);
      lua_rawseti(L, -2, i++);
    }
  }
}

static void push_op_info(lua_State *L, int kind) {
  const IrOpInfo *info = ir_op_info((IrOpKind)kind);
  IrArity a = ir_op_arity((IrOpKind)kind);
  lua_createtable(L, 0, 12);
  lb_set_str(L, "name", info->name);
  lua_pushlstring(L, info->name, ir_op_dialect_len((IrOpKind)kind));
  lua_setfield(L, -2, "dialect");
  lb_set_str(L, "signature", info->sig);
  lb_set_int(L, "regions", info->nregions);
  lb_set_str(L, "doc", info->doc);
  push_traits(L, info->traits);
  lua_setfield(L, -2, "traits");
  push_effects(L, info->effects);
  lua_setfield(L, -2, "effects");
  lb_set_bool(L, "has_verifier", info->verify != noverify);
  lb_set_int(L, "min_operands", a.min_operands);
  lb_set_int(L, "max_operands", a.max_operands);
  lb_set_int(L, "min_results", a.min_results);
  lb_set_int(L, "max_results", a.max_results);
  lb_set_bool(L, "terminator", (info->traits & T_TERMINATOR) != 0);
  lb_push_op_tables(L, kind);
}

/* core.op_info(name) -> table or nil; core.ops() -> list of tables in table order. */
static int core_op_info(lua_State *L) {
  size_t n;
  const char *name = luaL_checklstring(L, 1, &n);
  int k = ir_op_lookup(name, n);
  if (k < 0) return 0;
  push_op_info(L, k);
  return 1;
}

static int core_ops(lua_State *L) {
  lb_push_list(L, OP__COUNT, push_op_info);
  return 1;
}

static void push_dialect_type(lua_State *L, int k) {
  lua_createtable(L, 0, 2);
  lb_set_str(L, "name", ir_dialect_type_name(k));
  lb_set_str(L, "doc", ir_dialect_type_doc(k));
  lb_set_str(L, "params", ir_dialect_type_params(k));
}

static int core_dialect_types(lua_State *L) {
  lb_push_list(L, ir_dialect_type_count(), push_dialect_type);
  return 1;
}

static void push_memspace(lua_State *L, int k) {
  lua_pushstring(L, ir_memspace_name((IrMemSpace)k));
}

static int core_memspaces(lua_State *L) {
  lb_push_list(L, IR_MS__COUNT, push_memspace);
  return 1;
}

/* core.mark_library(chunkname): frames of that chunk are skipped by user locations. */
static int core_mark_library(lua_State *L) {
  lb_mark_library_chunk(L, luaL_checkstring(L, 1));
  return 0;
}

/* core.type_matches(type, constraint) -> whether the type fits a signature constraint
** ("intlike", "ptr.shared", "!cutlass.pipeline", "f16|bf16", ...). */
static int core_type_matches(lua_State *L) {
  const IrType *t = lb_check_type(L, 1);
  size_t n;
  const char *c = luaL_checklstring(L, 2, &n);
  lua_pushboolean(L, ir_type_matches(t, c, n));
  return 1;
}

/* core.metatable(name) -> the metatable of a class ("Value", "Op", ...) for Lua extensions. */
static int core_metatable(lua_State *L) {
  lua_pushfstring(L, "tilua.%s", luaL_checkstring(L, 1));
  if (luaL_getmetatable(L, lua_tostring(L, -1)) != LUA_TTABLE) return 0;
  return 1;
}

/* core.user_location() -> file, line of the innermost user frame (nil if none). */
static int core_user_location(lua_State *L) {
  const char *file;
  int line;
  if (!lb_user_frame(L, &file, &line)) return 0;
  lua_pushstring(L, file);
  lua_pushinteger(L, line);
  return 2;
}

/* }====================================================================== */

static const luaL_Reg context_methods[] = {{"close", ctx_close},
                                           {"module", ctx_module},
                                           {"target_sm", ctx_target_sm},
                                           {"diagnostics", ctx_diagnostics},
                                           {NULL, NULL}};
static const luaL_Reg context_meta[] = {
    {"__gc", ctx_gc}, {"__close", ctx_close}, {"__tostring", ctx_tostring}, {NULL, NULL}};

/* core.closest_name(word, {names...}) -> the name nearest word (a few edits
** or a prefix; see ir_closest_name), or nil: for "did you mean". */
static int core_closest_name(lua_State *L) {
  size_t len;
  const char *word = luaL_checklstring(L, 1, &len);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_Integer n = luaL_len(L, 2);
  if (n < 0 || n > 100000) return luaL_argerror(L, 2, "too many names");
  const char **names = lua_newuserdatauv(L, sizeof *names * (size_t)(n ? n : 1), 0);
  size_t count = 0;
  for (lua_Integer i = 1; i <= n; i++) {
    if (lua_geti(L, 2, i) == LUA_TSTRING)
      names[count++] = lua_tostring(L, -1); /* kept alive by the table */
    lua_pop(L, 1);
  }
  const char *near = ir_closest_name(word, len, names, count);
  if (!near) return 0;
  lua_pushstring(L, near);
  return 1;
}

static const luaL_Reg core_functions[] = {{"closest_name", core_closest_name},
                                          {"context", core_context},
                                          {"default_context", core_default_context},
                                          {"op_info", core_op_info},
                                          {"ops", core_ops},
                                          {"dialect_types", core_dialect_types},
                                          {"memspaces", core_memspaces},
                                          {"mark_library", core_mark_library},
                                          {"user_location", core_user_location},
                                          {"pin_location", core_pin_location},
                                          {"locate_error", core_locate_error},
                                          {"metatable", core_metatable},
                                          {"type_matches", core_type_matches},
                                          {NULL, NULL}};

static const LbClass ir_classes[] = {{LB_CONTEXT, context_meta, context_methods},
                                     {NULL, NULL, NULL}};
const LbArea lb_area_ir = {ir_classes, core_functions};
