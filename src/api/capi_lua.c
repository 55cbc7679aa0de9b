/*
** capi_lua.c -- the C API's Lua half: parsing and kernel scripts run in a Lua
** state that each context makes on first use, whose default IR context is
** borrowed from ours. Every Lua call runs under lua_pcall (a C function does
** the pushes too), so no Lua error reaches the host; an allocation of the core
** that fails while Lua runs becomes a Lua error (the raise hook of a protected
** call), after which the state is closed and the context broken.
*/
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

#include "../lua/lbind.h"
#include "../passes/passes.h"
#include "capi_impl.h"

/* {======================================================================
** The state
** ======================================================================= */

static int open_state(lua_State *L) {
  TlCtx *c = lua_touserdata(L, 1);
  luaL_openlibs(L);
  /* the C half (its metatables), then the default context, then the Lua half:
  ** the library's types (tl.f32, ...) are made in the default context */
  luaL_requiref(L, "tilua.core", luaopen_tilua_core, 0);
  lua_pop(L, 1);
  c->lua_ctx = lb_push_context(L, c->ir, 0);
  lb_set_default_context(L, -1);
  c->lua_ctx_ref = luaL_ref(L, LUA_REGISTRYINDEX); /* pins the wrapper: we look at it after scripts */
  luaL_requiref(L, "tilua", luaopen_tilua, 0);
  return 0;
}

void tl_lua_close(TlCtx *c) {
  if (c->L) lb_close(c->L);
  c->L = NULL;
  c->lua_ctx = NULL;
}

static void raise_lua(void *ud) {
  lua_State *L = ud;
  luaL_error(L, "not enough memory (an allocation of the tilua core failed)");
}

/* Report a Lua error message: "chunk:line: message" at that location. */
static void report_lua_error(TlCtx *c, const char *fn, const char *msg) {
  const char *colon = msg ? strchr(msg, ':') : NULL;
  char *end = NULL;
  long line = colon ? strtol(colon + 1, &end, 10) : 0;
  if (!colon || colon == msg || line <= 0 || end == colon + 1 || *end != ':' || memchr(msg, '\n', (size_t)(colon - msg))) {
    tl_error(c, fn, "%s", msg ? msg : "an error object that is not a string");
    return;
  }
  const char *text = end[1] == ' ' ? end + 2 : end + 1;
  TL_PROTECTED(c, fn, {
    char *file = ir_strndup(msg, (size_t)(colon - msg));
    ir_error(c->ir, ir_loc(c->ir, file, (int)line, 0), "%s", text);
    ir_free(file);
    ir_diag_flush(c->ir);
  });
}

/* The message handler: an error raised inside the library is reported at the
** script's line (lb_locate_error). */
static int locate_handler(lua_State *L) {
  lb_locate_error(L, 1);
  return 1;
}

/* Call f(L) with one light userdata argument under lua_pcall and a protected
** call of the core. Returns the status; on an error the message is reported
** to c. A failed allocation of the core closes the state and breaks c; Lua's
** own memory errors and a closed default context close the state only. */
static int call_lua(TlCtx *c, const char *fn, lua_CFunction f, void *arg) {
  lua_State *L = c->L;
  if (!L) {
    L = lb_newstate();
    if (!L) {
      tl_error(c, fn, "not enough memory for a Lua state");
      return LUA_ERRMEM;
    }
    c->L = L;
    if (call_lua(c, fn, open_state, c) != LUA_OK) {
      tl_lua_close(c);
      return LUA_ERRRUN;
    }
  }
  IrProtect p;
  ir_protect_push(&p, raise_lua, L);
  int base = lua_gettop(L) + 1;
  lua_pushcfunction(L, locate_handler); /* light C functions and a light userdata: none allocates */
  lua_pushcfunction(L, f);
  lua_pushlightuserdata(L, arg);
  int status = lua_pcall(L, 1, 0, base);
  lua_remove(L, base);
  ir_protect_pop(&p);
  if (p.failed) { /* even if the script caught the error: what the core was changing is suspect */
    tl_lua_close(c);
    tl_out_of_memory(c, fn);
    return LUA_ERRMEM;
  }
  if (status != LUA_OK) {
    bool closed = c->lua_ctx && !c->lua_ctx->ctx;
    if (closed)
      tl_error(c, fn, "the script closed the default context, which the host owns (%s)", lua_tostring(L, -1));
    else
      report_lua_error(c, fn, lua_tostring(L, -1));
    lua_settop(L, 0);
    /* a state out of memory, or whose default context a script closed, cannot go on: start afresh */
    if (status == LUA_ERRMEM || closed) tl_lua_close(c);
  }
  return status;
}

/* }====================================================================== */

/* {======================================================================
** Parsing
** ======================================================================= */

typedef struct ParseCall {
  TlCtx *c;
  tlStringRef text, file;
  IrOp *module;
} ParseCall;

/* Stack: -> function `name` of the Lua module `module` (as require gives it). */
static void push_module_function(lua_State *L, const char *module, const char *name) {
  lua_getglobal(L, "require");
  lua_pushstring(L, module);
  lua_call(L, 1, 1);
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
}

static int parse_in_lua(lua_State *L) {
  ParseCall *pc = lua_touserdata(L, 1);
  push_module_function(L, "tilua.parser", "parse");
  lua_pushlstring(L, pc->text.data ? pc->text.data : "", pc->text.length);
  lua_createtable(L, 0, 2);
  lua_pushlstring(L, pc->file.data ? pc->file.data : "", pc->file.length);
  lua_setfield(L, -2, "file");
  lb_push_context(L, pc->c->ir, 0); /* a borrowed wrapper: parse into our context whatever the default is */
  lua_setfield(L, -2, "ctx");
  lua_call(L, 2, 3); /* module op | nil, message, {line=, col=, message=} */
  pc->module = lua_isnil(L, -3) ? NULL : lb_test_object(L, -3, LB_OP);
  if (pc->module) return 0;
  IrContext *ctx = pc->c->ir;
  const char *msg = lua_tostring(L, -2);
  IrLoc loc = ir_loc_unknown();
  if (lua_istable(L, -1)) {
    lua_getfield(L, -1, "line");
    lua_getfield(L, -2, "col");
    lua_getfield(L, -3, "message");
    char *file = ir_strndup(pc->file.data ? pc->file.data : "", pc->file.length);
    loc = ir_loc(ctx, pc->file.length ? file : NULL, (int)lua_tointeger(L, -3), (int)lua_tointeger(L, -2));
    ir_free(file);
    if (lua_isstring(L, -1)) msg = lua_tostring(L, -1);
  }
  ir_error(ctx, loc, "%s", msg ? msg : "parse error");
  return 0;
}

tlModule tlModuleCreateParse(tlContext ctx, tlStringRef text, tlStringRef filename) {
  static const char fn[] = "tlModuleCreateParse";
  TlCtx *c = tl_enter(ctx.context, ctx.ptr, fn);
  tlModule r = {NULL, 0};
  if (!c || !tl_check_string(c, fn, "the text", text) || !tl_check_string(c, fn, "the file name", filename))
    return r;
  ParseCall pc = {c, text, filename, NULL};
  if (call_lua(c, fn, parse_in_lua, &pc) != LUA_OK) return r;
  tl_done(c, pc.module != NULL);
  return tl_module(c, pc.module);
}

/* }====================================================================== */

/* {======================================================================
** Pipelines with passes written in Lua (LUA_PASS rows: verify-protocol, ...)
** ======================================================================= */

typedef struct PipelineCall {
  TlCtx *c;
  IrOp *module;
  IrPipeline *pipeline;
  IrResult result;
} PipelineCall;

static int pipeline_in_lua(lua_State *L) {
  PipelineCall *pc = lua_touserdata(L, 1);
  lua_rawgeti(L, LUA_REGISTRYINDEX, pc->c->lua_ctx_ref);
  lb_push_object(L, LB_OP, pc->module, lua_gettop(L)); /* a handle on the host's module, owned by the context */
  pc->result = lb_run_pipeline(L, -1, pc->pipeline);
  return 0;
}

bool tl_lua_run_pipeline(TlCtx *c, const char *fn, IrOp *module, IrPipeline *p) {
  PipelineCall pc = {c, module, p, IR_FAIL};
  return call_lua(c, fn, pipeline_in_lua, &pc) == LUA_OK && pc.result == IR_OK;
}

/* A note of the protocol check (a kernel it did not prove): a diagnostic of
** severity note through the context's handler. */
static int compile_check_note(lua_State *L) {
  TlCtx *c = lua_touserdata(L, lua_upvalueindex(1));
  const char *line = luaL_checkstring(L, 1);
  ir_diag(c->ir, IR_SEV_NOTE, ir_loc_unknown(), "%s", line);
  ir_diag_flush(c->ir);
  return 0;
}

static int compile_check_in_lua(lua_State *L) {
  PipelineCall *pc = lua_touserdata(L, 1);
  push_module_function(L, "tilua.emulate.compile_check", "compile");
  lua_rawgeti(L, LUA_REGISTRYINDEX, pc->c->lua_ctx_ref);
  lb_push_object(L, LB_OP, pc->module, lua_gettop(L));
  lua_remove(L, -2); /* the context's wrapper: the registry pins it */
  lua_pushlightuserdata(L, pc->c);
  lua_pushcclosure(L, compile_check_note, 1);
  lua_call(L, 2, 0);
  pc->result = IR_OK;
  return 0;
}

bool tl_lua_compile_check(TlCtx *c, const char *fn, IrOp *module) {
  PipelineCall pc = {c, module, NULL, IR_FAIL};
  return call_lua(c, fn, compile_check_in_lua, &pc) == LUA_OK && pc.result == IR_OK;
}

/* }====================================================================== */

/* {======================================================================
** Scripts
** ======================================================================= */

typedef struct ScriptCall {
  TlCtx *c;
  tlStringRef script, chunkname;
  IrOp *module;
} ScriptCall;

/* tilua's function `name`, called with no arguments; its first result stays on the stack. */
static void call_tilua(lua_State *L, const char *name) {
  push_module_function(L, "tilua", name);
  lua_call(L, 0, 1);
}

static int script_in_lua(lua_State *L) {
  ScriptCall *sc = lua_touserdata(L, 1);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  luaL_addchar(&b, '=');
  luaL_addlstring(&b, sc->chunkname.data ? sc->chunkname.data : "", sc->chunkname.length);
  luaL_pushresult(&b);
  const char *name = lua_tostring(L, -1);
  if (luaL_loadbuffer(L, sc->script.data ? sc->script.data : "", sc->script.length, name) != LUA_OK)
    return lua_error(L);
  call_tilua(L, "new_module"); /* a fresh module for this script */
  lua_pop(L, 1);
  lua_call(L, 0, 0);
  call_tilua(L, "module");
  IrOp *m = lb_test_object(L, -1, LB_OP);
  if (!m || m->kind != OP_MODULE)
    return luaL_error(L, "%s: tl.module() is not a module", name + 1);
  if (ir_op_context(m) != sc->c->ir)
    return luaL_error(L, "%s: tl.module() belongs to a context the script made; build in the default "
                         "context (tl.context()), whose modules the host can keep", name + 1);
  sc->module = m;
  return 0;
}

tlModule tlModuleCreateFromScript(tlContext ctx, tlStringRef script, tlStringRef chunkname) {
  static const char fn[] = "tlModuleCreateFromScript";
  TlCtx *c = tl_enter(ctx.context, ctx.ptr, fn);
  tlModule r = {NULL, 0};
  if (!c || !tl_check_string(c, fn, "the script", script) ||
      !tl_check_string(c, fn, "the chunk name", chunkname))
    return r;
  ScriptCall sc = {c, script, chunkname, NULL};
  int status = call_lua(c, fn, script_in_lua, &sc);
  if (status == LUA_OK && c->lua_ctx && !c->lua_ctx->ctx) {
    /* the script closed the default context and still returned one of our modules */
    tl_error(c, fn, "the script closed the default context");
    tl_lua_close(c);
    return r;
  }
  if (status != LUA_OK) return r;
  tl_done(c, true);
  return tl_module(c, sc.module);
}

/* }====================================================================== */
