/*
** l_pass.c -- Lua bindings of the pass manager: the registry, pipelines and
** running them with a per-stage callback.
*/
#include <string.h>

#include "../passes/passes.h"
#include "../passes/tileas_layout.h"
#include "lbind.h"

static void push_pass(lua_State *L, int i) {
  const IrPassInfo *p = ir_pass_at(i);
  lua_createtable(L, 0, 5);
  lb_set_str(L, "name", p->name);
  lb_set_str(L, "description", p->description);
  lb_set_str(L, "options", p->options);
  lb_set_bool(L, "lua", p->lua_fn != NULL);
  uint32_t req = ir_pass_requires(p);
  lua_newtable(L);
  for (int f = 0, n = 0; f < IR_FACT__COUNT; f++) {
    if (!(req & (1u << f))) continue;
    const char *id, *what, *by;
    ir_pass_fact_info((IrPassFact)f, &id, &what, &by);
    lua_pushstring(L, id);
    lua_rawseti(L, -2, ++n);
  }
  lua_setfield(L, -2, "requires");
}

/* core.passes() -> { {name=, description=, options=, lua=, requires = {FACT, ...}}, ... } */
static int core_passes(lua_State *L) {
  lb_push_list(L, ir_pass_count(), push_pass);
  return 1;
}

static void push_pipeline(lua_State *L, int i) {
  const char *name, *passes, *desc;
  ir_named_pipeline_at(i, &name, &passes, &desc);
  lua_createtable(L, 0, 3);
  lb_set_str(L, "name", name);
  lb_set_str(L, "passes", passes);
  lb_set_str(L, "description", desc);
}

/* core.pipelines() -> { {name=, passes=, description=}, ... } */
static int core_pipelines(lua_State *L) {
  lb_push_list(L, ir_named_pipeline_count(), push_pipeline);
  return 1;
}

/* core.pipeline_parse(spec [, ctx]) -> { pass names } | nil, message */
static int core_pipeline_parse(lua_State *L) {
  const char *spec = luaL_checkstring(L, 1);
  LbContext *c = lua_isnoneornil(L, 2) ? lb_default_context(L) : lb_check_context(L, 2);
  IrPipeline p;
  if (ir_pipeline_parse(c->ctx, spec, &p) != IR_OK) {
    lua_pushnil(L);
    lb_push_diagnostics(L, c->ctx);
    return 2;
  }
  lua_createtable(L, (int)p.n, 0);
  for (uint32_t i = 0; i < p.n; i++) {
    lua_pushstring(L, p.steps[i].pass->name);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

typedef struct StageCb {
  lua_State *L;
  int fn, op;
  int failed; /* the callback raised: its error is kept in the registry slot below */
  int run;    /* stack index of the check's run object (0: none) */
} StageCb;

static const char *const STAGE_ERR = "tilua.stage_error";
static const char *const PASS_STATS = "tilua.pass_stats"; /* the last Lua pass's statistics */

static int call_stage(lua_State *L) {
  /* fn, info, op are on the stack */
  lua_call(L, 2, 0);
  return 0;
}

static void on_stage(const IrStageInfo *st, IrOp *module, void *ud) {
  StageCb *cb = ud;
  lua_State *L = cb->L;
  if (cb->failed) return;
  lua_pushcfunction(L, call_stage);
  lua_pushvalue(L, cb->fn);
  lua_createtable(L, 0, 5);
  lb_set_str(L, "pass", st->pass);
  lb_set_int(L, "index", st->index);
  lua_pushnumber(L, st->ms);
  lua_setfield(L, -2, "ms");
  lb_set_bool(L, "changed", st->changed);
  lb_set_bool(L, "verified", st->verified);
  lb_set_bool(L, "failed", st->failed);
  lua_getfield(L, LUA_REGISTRYINDEX, PASS_STATS); /* a Lua pass's statistics, for this stage only */
  lua_setfield(L, -2, "stats");
  lua_pushnil(L);
  lua_setfield(L, LUA_REGISTRYINDEX, PASS_STATS);
  lua_pushvalue(L, cb->op);
  (void)module;
  if (lua_pcall(L, 3, 0, 0) != LUA_OK) {
    cb->failed = 1;
    lua_setfield(L, LUA_REGISTRYINDEX, STAGE_ERR);
  }
}

/* {======================================================================
** Passes implemented in Lua (LUA_PASS rows of passes.def)
**
** The pass manager calls run_lua_pass for them; it calls the function
** lua_fn of the module tilua.passes in the Lua state that runs the pipeline:
**   fn(module_op, options, after, run)
**     -> nil | { errors = { {message =, op =, notes = { {message =, op =} }} },
**                stats = { {name =, value =}, ... }, changed = bool }
** where after and run are set when the pass runs as the check after every
** pass: the pass it follows ("input" first) and the pipeline run's run object
** (a table for the check's state across the stages, core.run_pipeline's check_run).
** Each error becomes an error diagnostic at its op's location (the module's without
** one) and fails the pass; stats reach the stage callback (info.stats). A Lua error
** in the pass is a pass error too.
** ======================================================================= */

typedef struct LuaPassCall {
  const IrPassInfo *pass;
  IrOp *module;
  IrPassCtx *pc;
  size_t errors; /* diagnostics reported from the result */
} LuaPassCall;

static IrLoc entry_loc(lua_State *L, int idx, IrLoc dflt) {
  IrLoc loc = dflt;
  if (lua_getfield(L, idx, "op") != LUA_TNIL) loc = lb_check_op(L, -1)->loc;
  lua_pop(L, 1);
  return loc;
}

static const char *entry_message(lua_State *L, int idx) {
  const char *m =
      lua_getfield(L, idx, "message") == LUA_TSTRING ? lua_tostring(L, -1) : "(no message)";
  lua_pop(L, 1); /* the string stays referenced by the entry table */
  return m;
}

/* The {message =, op =} entries of the list at idx: each an error that fails the
** pass (its `notes` list its notes), or with a parent a note of it. */
static void report_entries(lua_State *L, int idx, LuaPassCall *c, IrDiag *parent) {
  lua_Integer n = luaL_len(L, idx);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_geti(L, idx, i);
    int e = lua_gettop(L);
    if (!parent) luaL_checktype(L, e, LUA_TTABLE);
    if (lua_istable(L, e)) {
      IrLoc loc = entry_loc(L, e, c->module->loc);
      if (parent) {
        ir_note(parent, loc, "%s", entry_message(L, e));
      } else {
        IrDiag *d = ir_error(c->pc->ctx, loc, "%s", entry_message(L, e));
        c->errors++;
        if (lua_getfield(L, e, "notes") == LUA_TTABLE) report_entries(L, lua_gettop(L), c, d);
      }
    }
    lua_settop(L, e - 1);
  }
}

/* call_lua_pass(call, module_op, options): in a protected call. */
static int call_lua_pass(lua_State *L) {
  LuaPassCall *c = lua_touserdata(L, 1);
  lua_getglobal(L, "require");
  lua_pushliteral(L, "tilua.passes");
  lua_call(L, 1, 1);
  if (lua_getfield(L, -1, c->pass->lua_fn) != LUA_TFUNCTION)
    return luaL_error(L, "tilua.passes has no function '%s'", c->pass->lua_fn);
  lua_pushvalue(L, 2);
  lua_pushvalue(L, 3);
  if (c->pc->after) lua_pushstring(L, c->pc->after);
  else lua_pushnil(L);
  lua_pushvalue(L, 4); /* the run object, or nil */
  lua_call(L, 4, 1);
  int res = lua_gettop(L);
  if (!lua_istable(L, res)) return 0;
  lua_getfield(L, res, "changed");
  if (lua_toboolean(L, -1)) c->pc->changed = true;
  lua_pop(L, 1);
  if (!c->pc->after) { /* a check after a pass does not speak for that pass's stage */
    lua_getfield(L, res, "stats");
    lua_setfield(L, LUA_REGISTRYINDEX, PASS_STATS);
  }
  if (lua_getfield(L, res, "errors") == LUA_TTABLE) report_entries(L, lua_gettop(L), c, NULL);
  return 0;
}

static IrResult run_lua_pass(const IrPassInfo *pass, IrOp *module, IrPassCtx *pc, void *ud) {
  StageCb *cb = ud;
  lua_State *L = cb->L;
  LuaPassCall c = {pass, module, pc, 0};
  if (!pc->after) {
    lua_pushnil(L);
    lua_setfield(L, LUA_REGISTRYINDEX, PASS_STATS);
  }
  lua_pushcfunction(L, call_lua_pass);
  lua_pushlightuserdata(L, &c);
  lua_pushvalue(L, cb->op);
  if (pc->options) lb_push_attr(L, pc->options, cb->op);
  else lua_newtable(L);
  if (pc->after && cb->run) lua_pushvalue(L, cb->run);
  else lua_pushnil(L);
  if (lua_pcall(L, 4, 0, 0) != LUA_OK) {
    ir_error(pc->ctx, module->loc, "pass '%s' (Lua): %s", pass->name,
             lua_isstring(L, -1) ? lua_tostring(L, -1) : "an error object");
    lua_pop(L, 1);
    return IR_FAIL;
  }
  return c.errors ? IR_FAIL : IR_OK;
}

/* }====================================================================== */

/* The check after every pass of check_protocol (at idx): verify-protocol, with
** {mode=<the string>} when it is one, parsed as a pipeline step so that its
** options are checked against the pass's declared ones. */
static IrResult protocol_check(lua_State *L, int idx, IrContext *ctx, IrPassOptions *opts) {
  const char *mode = lua_type(L, idx) == LUA_TSTRING ? lua_tostring(L, idx) : NULL;
  if (mode && strpbrk(mode, "{},=")) {
    ir_error(ctx, ir_loc_unknown(), "check_protocol: '%s' is not a mode of verify-protocol", mode);
    return IR_FAIL;
  }
  if (mode) lua_pushfstring(L, "verify-protocol{mode=%s}", mode);
  else lua_pushliteral(L, "verify-protocol");
  IrPipeline p;
  IrResult r = ir_pipeline_parse(ctx, lua_tostring(L, -1), &p);
  lua_pop(L, 1);
  if (r != IR_OK) return r;
  opts->check_each = p.steps[0].pass;
  opts->check_options = p.steps[0].options;
  return IR_OK;
}

/* core.run_pipeline(module_op, spec [, {verify=true, on_stage=fn(info, op),
**                    check_protocol=true | mode, check_run=table, check_every_pass=false}])
** -> true | true, warnings, list | false, message, list (diagnostics: lb_push_diagnostic_list)
** check_protocol: verify-protocol after every pass (a string: its `mode` option);
** check_run: the run object the check keeps its state in (a fresh table by default);
** check_every_pass: the check after every pass, not only those that changed the IR. */
static int core_run_pipeline(lua_State *L) {
  IrOp *module = lb_check_op(L, 1);
  const char *spec = luaL_checkstring(L, 2);
  IrContext *ctx = lb_owner(L, 1)->ctx;
  IrPassOptions opts;
  ir_pass_options_default(&opts);
  StageCb cb = {L, 0, 1, 0, 0};
  opts.run_lua = run_lua_pass;
  opts.lua_ud = &cb;
  ir_diag_clear(ctx);
  IrResult r = IR_OK;
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "verify");
    if (!lua_isnil(L, -1)) opts.verify_each = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (lua_getfield(L, 3, "check_protocol"), lua_toboolean(L, -1)) {
      r = protocol_check(L, lua_gettop(L), ctx, &opts);
      if (lua_getfield(L, 3, "check_run") != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
      }
      cb.run = lua_gettop(L); /* stays on the stack while the pipeline runs */
      lua_getfield(L, 3, "check_every_pass");
      opts.check_every_pass = lua_toboolean(L, -1);
      lua_pop(L, 1);
    } else {
      lua_pop(L, 1);
    }
    lua_getfield(L, 3, "on_stage");
    if (lua_isfunction(L, -1)) {
      cb.fn = lua_gettop(L);
      opts.on_stage = on_stage;
      opts.ud = &cb;
    } else {
      lua_pop(L, 1);
    }
  }
  IrPipeline p;
  if (r == IR_OK) r = ir_pipeline_parse(ctx, spec, &p);
  if (r == IR_OK) r = ir_pipeline_run(&p, module, &opts);
  if (cb.failed) {
    ir_diag_clear(ctx);
    lua_getfield(L, LUA_REGISTRYINDEX, STAGE_ERR);
    lua_pushnil(L);
    lua_setfield(L, LUA_REGISTRYINDEX, STAGE_ERR);
    return lua_error(L);
  }
  lua_pushboolean(L, r == IR_OK);
  if (r == IR_OK && !ir_diag_pending(ctx)) return 1;
  return lb_return_diagnostics(L, ctx); /* the errors, or the passes' warnings */
}

/* Run a parsed pipeline on the module op at op_idx from C (the C API): its Lua
** passes run in L. Diagnostics stay in the context. */
IrResult lb_run_pipeline(lua_State *L, int op_idx, struct IrPipeline *p) {
  IrPassOptions opts;
  ir_pass_options_default(&opts);
  StageCb cb = {L, 0, lua_absindex(L, op_idx), 0, 0};
  opts.run_lua = run_lua_pass;
  opts.lua_ud = &cb;
  return ir_pipeline_run(p, lb_check_op(L, op_idx), &opts);
}

/* core.dot_split(m, n, ctas) -> sm, sn: how tileas-plan-cta splits a dot's m x n
** accumulator among a cluster's CTAs (tas_dot_split), for a script that sizes
** what a CTA holds before it compiles (examples/tile_gemm.lua's stages). */
static int core_dot_split(lua_State *L) {
  lua_Integer m = luaL_checkinteger(L, 1), n = luaL_checkinteger(L, 2),
              ctas = luaL_checkinteger(L, 3);
  luaL_argcheck(L, m > 0, 1, "a positive count of rows");
  luaL_argcheck(L, n > 0, 2, "a positive count of columns");
  luaL_argcheck(L, ctas > 0 && ctas <= 16, 3, "1 to 16 CTAs");
  int64_t sm, sn;
  tas_dot_split(m, n, ctas, &sm, &sn);
  lua_pushinteger(L, sm);
  lua_pushinteger(L, sn);
  return 2;
}

static const luaL_Reg pass_functions[] = {{"passes", core_passes},
                                          {"dot_split", core_dot_split},
                                          {"pipelines", core_pipelines},
                                          {"pipeline_parse", core_pipeline_parse},
                                          {"run_pipeline", core_run_pipeline},
                                          {NULL, NULL}};

const LbArea lb_area_passes = {NULL, pass_functions};
