/*
** l_pass.c -- Lua bindings of the pass manager: the registry, pipelines and
** running them with a per-stage callback.
*/
#include <string.h>

#include "../passes/passes.h"
#include "lbind.h"

static void push_pass(lua_State *L, int i) {
  const IrPassInfo *p = ir_pass_at(i);
  lua_createtable(L, 0, 2);
  lb_set_str(L, "name", p->name);
  lb_set_str(L, "description", p->description);
}

/* core.passes() -> { {name=, description=}, ... } */
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
} StageCb;

static const char *const STAGE_ERR = "tilua.stage_error";

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
  lua_pushvalue(L, cb->op);
  (void)module;
  if (lua_pcall(L, 3, 0, 0) != LUA_OK) {
    cb->failed = 1;
    lua_setfield(L, LUA_REGISTRYINDEX, STAGE_ERR);
  }
}

/* core.run_pipeline(module_op, spec [, {verify=true, on_stage=fn(info, op)}])
** -> true | false, message, diagnostics (a list, see lb_push_diagnostic_list) */
static int core_run_pipeline(lua_State *L) {
  IrOp *module = lb_check_op(L, 1);
  const char *spec = luaL_checkstring(L, 2);
  IrContext *ctx = lb_owner(L, 1)->ctx;
  IrPassOptions opts;
  ir_pass_options_default(&opts);
  StageCb cb = {L, 0, 1, 0};
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "verify");
    if (!lua_isnil(L, -1)) opts.verify_each = lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, 3, "on_stage");
    if (lua_isfunction(L, -1)) {
      cb.fn = lua_gettop(L);
      opts.on_stage = on_stage;
      opts.ud = &cb;
    } else {
      lua_pop(L, 1);
    }
  }
  ir_diag_clear(ctx);
  IrPipeline p;
  IrResult r = ir_pipeline_parse(ctx, spec, &p);
  if (r == IR_OK) r = ir_pipeline_run(&p, module, &opts);
  if (cb.failed) {
    ir_diag_clear(ctx);
    lua_getfield(L, LUA_REGISTRYINDEX, STAGE_ERR);
    lua_pushnil(L);
    lua_setfield(L, LUA_REGISTRYINDEX, STAGE_ERR);
    return lua_error(L);
  }
  if (r == IR_OK) {
    lua_pushboolean(L, 1);
    return 1;
  }
  lua_pushboolean(L, 0);
  return lb_return_diagnostics(L, ctx);
}

static const luaL_Reg pass_functions[] = {{"passes", core_passes},
                                          {"pipelines", core_pipelines},
                                          {"pipeline_parse", core_pipeline_parse},
                                          {"run_pipeline", core_run_pipeline},
                                          {NULL, NULL}};

const LbArea lb_area_passes = {NULL, pass_functions};
