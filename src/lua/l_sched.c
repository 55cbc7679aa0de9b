/*
** l_sched.c -- Lua bindings of the tile-scheduler reference (src/sched): a
** plan built from a configuration table, its pictures, and the per-worker
** functions, so that tests can compare the lowered IR with the reference and
** the REPL and `tilua sched` can show a schedule.
*/
#include <stdlib.h>
#include <string.h>

#include "../sched/worker.h"
#include "lbind.h"

#define LB_PLAN "tilua.SchedPlan"

/* The records pushed as tables, X-lists of their members (I: integer, B: boolean). */
/* clang-format off */
#define STREAMK_MEMBERS(I, B)                                                                      \
  I(sk_tiles) I(sk_units) I(dp_tiles) I(units) I(k_per_small) I(big_units) I(max_splits) I(splits)
#define WORKSPACE_MEMBERS(I, B)                                                                    \
  I(reduction) I(barriers) I(barrier_offset) I(total) I(slots_per_tile) I(barrier_count)
#define PARAMS_MEMBERS(I, B)                                                                       \
  I(num_tiles_m) I(num_tiles_n) I(num_tiles_k) I(cluster_shape_x) I(cluster_shape_y)              \
  I(cluster_shape_z) I(num_ctas_per_cluster) I(total_ctas) I(workspace_ptr) I(k_split_count)      \
  I(reserved)
#define WORK_MEMBERS(I, B) I(linear) I(m) I(n) I(l) I(tile_idx) B(valid)
#define PIECE_MEMBERS(I, B)                                                                        \
  I(unit) I(tile_idx) I(m) I(n) I(l) I(k_tile_start) I(k_tile_count) I(split_idx)                  \
  I(expected_splits) B(is_separate_reduction) B(is_final_split)
#define FIXUP_MEMBERS(I, B)                                                                        \
  B(participates) B(wait) B(reset) I(wait_value) I(read_first) I(read_count) B(write)             \
  I(write_slot) B(epilogue)
#define COORD_MEMBERS(I, B) I(m) I(n) I(l)
/* Push record r as a new table of its members. */
#define PUSH_RECORD(MEMBERS, n)                                                                    \
  do {                                                                                             \
    lua_createtable(L, 0, n);                                                                      \
    MEMBERS(LB_SET_INT_MEMBER, LB_SET_BOOL_MEMBER)                                                 \
  } while (0)
/* clang-format on */

static SchedPlan *check_plan(lua_State *L, int idx) { return luaL_checkudata(L, idx, LB_PLAN); }

static uint32_t field_u32(lua_State *L, int t, const char *name, uint32_t dflt) {
  return (uint32_t)lb_opt_int_field(L, t, name, dflt, 0, UINT32_MAX, "sched");
}

static uint64_t field_u64(lua_State *L, int t, const char *name, uint64_t dflt) {
  return (uint64_t)lb_opt_int_field(L, t, name, (lua_Integer)dflt, 0, LUA_MAXINTEGER, "sched");
}

/* An enum field given by name through one of the sched_*_parse functions. */
static void field_enum(lua_State *L, int t, const char *name, bool (*parse)(const char *, void *),
                       void *out) {
  lua_getfield(L, t, name);
  if (!lua_isnil(L, -1)) {
    const char *s = lua_tostring(L, -1);
    if (!s || !parse(s, out)) lb_error(L, "sched: unknown %s '%s'", name, s ? s : "?");
  }
  lua_pop(L, 1);
}

static bool parse_kind(const char *s, void *o) { return sched_kind_parse(s, o); }
static bool parse_decomp(const char *s, void *o) { return sched_decomp_parse(s, o); }
static bool parse_reduction(const char *s, void *o) { return sched_reduction_parse(s, o); }

/* core.sched_plan{ kind=, m=, n=, k=, l=, tile={tm,tn,tk} | tiles_m=, tiles_n=, tiles_k=,
**   workers=, cluster_m=, cluster_n=, swizzle=, column_major=, tiles_per_round=,
**   decomp=, splits=, reduction=, min_k=, acc_tile_bytes= } -> plan */
static int core_sched_plan(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  SchedKind kind = SCHED_STREAMK;
  field_enum(L, 1, "kind", parse_kind, &kind);
  SchedConfig c;
  sched_config_init(&c, kind);
  lua_getfield(L, 1, "m");
  int gemm = !lua_isnil(L, -1);
  lua_pop(L, 1);
  uint32_t tile[3] = {128, 128, 64};
  if (lua_getfield(L, 1, "tile") == LUA_TTABLE)
    for (int i = 0; i < 3; i++) {
      lua_geti(L, -1, i + 1);
      if (lua_isinteger(L, -1) && lua_tointeger(L, -1) > 0)
        tile[i] = (uint32_t)lua_tointeger(L, -1);
      lua_pop(L, 1);
    }
  lua_pop(L, 1);
  if (gemm) {
    if (!sched_config_gemm(&c, field_u64(L, 1, "m", 0), field_u64(L, 1, "n", 0),
                           field_u64(L, 1, "k", 0), field_u64(L, 1, "l", 1), tile[0], tile[1],
                           tile[2]))
      return lb_error(L, "sched: m, n, k, l and the tile sizes must be positive, with fewer than "
                         "2^32 tiles along each of m, n, k and l");
  } else {
    c.tiles_m = field_u32(L, 1, "tiles_m", 1);
    c.tiles_n = field_u32(L, 1, "tiles_n", 1);
    c.tiles_l = field_u32(L, 1, "tiles_l", 1);
    c.tiles_k = field_u32(L, 1, "tiles_k", 1);
    /* the f32 accumulator of one tile, as the m/n/k form computes it */
    c.acc_tile_bytes = (uint64_t)tile[0] * tile[1] * 4;
  }
  c.cluster_m = field_u32(L, 1, "cluster_m", 1);
  c.cluster_n = field_u32(L, 1, "cluster_n", 1);
  c.swizzle = field_u32(L, 1, "swizzle", 1);
  lua_getfield(L, 1, "column_major");
  if (!lua_isnil(L, -1)) c.order = lua_toboolean(L, -1) ? SCHED_ALONG_M : SCHED_ALONG_N;
  lua_pop(L, 1);
  c.workers = field_u32(L, 1, "workers", 1);
  c.tiles_per_round = field_u32(L, 1, "tiles_per_round", 0);
  field_enum(L, 1, "decomp", parse_decomp, &c.decomp);
  c.splits = field_u32(L, 1, "splits", c.splits);
  field_enum(L, 1, "reduction", parse_reduction, &c.reduction);
  c.min_k = field_u32(L, 1, "min_k", 0);
  c.acc_tile_bytes = field_u64(L, 1, "acc_tile_bytes", c.acc_tile_bytes);
  SchedPlan *p = lua_newuserdatauv(L, sizeof *p, 0);
  memset(p, 0, sizeof *p);
  const char *err = NULL;
  if (!sched_plan(p, &c, &err)) return lb_error(L, "sched: %s", err ? err : "bad configuration");
  luaL_setmetatable(L, LB_PLAN);
  return 1;
}

/* plan:info() -> a table of everything the plan decided. */
static int plan_info(lua_State *L) {
  SchedPlan *p = check_plan(L, 1);
  lua_createtable(L, 0, 24);
  lb_set_str(L, "kind", sched_kind_name(p->cfg.kind));
  lb_set_int(L, "grid", p->grid);
  lb_set_int(L, "tiles", p->persist.raster.total);
  lb_set_int(L, "grid_m", p->persist.raster.grid_m);
  lb_set_int(L, "grid_n", p->persist.raster.grid_n);
  lb_set_int(L, "tiles_k", p->cfg.tiles_k);
  lb_set_int(L, "workers", p->cfg.workers);
  if (p->cfg.kind == SCHED_STREAMK) {
    lb_set_str(L, "decomp", sched_decomp_name((SchedDecomp)p->sk.decomp));
    lb_set_str(L, "reduction", sched_reduction_name((SchedReduction)p->sk.reduction));
    const SchedStreamK r = p->sk;
    STREAMK_MEMBERS(LB_SET_INT_MEMBER, LB_SET_BOOL_MEMBER)
  }
  const SchedWorkspace r = p->ws;
  PUSH_RECORD(WORKSPACE_MEMBERS, 6);
  lua_setfield(L, -2, "workspace");
  return 1;
}

/* plan:params([workspace_ptr]) -> the 48-byte Params as a table and as a string of bytes. */
static int plan_params(lua_State *L) {
  SchedPlan *p = check_plan(L, 1);
  SchedParams r = sched_params_make(p, (uint64_t)luaL_optinteger(L, 2, 0));
  PUSH_RECORD(PARAMS_MEMBERS, 11);
  lua_pushlstring(L, (const char *)&r, sizeof r);
  return 2;
}

static void push_work(lua_State *L, SchedWork r) { PUSH_RECORD(WORK_MEMBERS, 6); }

static void push_piece(lua_State *L, const SchedSkWork *w) {
  const SchedSkWork r = *w;
  PUSH_RECORD(PIECE_MEMBERS, 11);
}

static uint32_t arg_u32(lua_State *L, int i) {
  lua_Integer v = luaL_checkinteger(L, i);
  luaL_argcheck(L, v >= 0 && v <= UINT32_MAX, i, "out of range");
  return (uint32_t)v;
}

/* plan:unpack(linear) -> {m, n, l} */
static int plan_unpack(lua_State *L) {
  SchedPlan *p = check_plan(L, 1);
  SchedCoord r = sched_raster_unpack(&p->persist.raster, arg_u32(L, 2));
  PUSH_RECORD(COORD_MEMBERS, 3);
  return 1;
}

static int plan_dp_tile(lua_State *L) {
  SchedPlan *p = check_plan(L, 1);
  push_work(L, sched_dp_tile(&p->persist.raster, arg_u32(L, 2)));
  return 1;
}

/* plan:persistent(worker) -> the list of tiles the worker visits, with increment_pipe. */
static int plan_persistent(lua_State *L) {
  SchedPlan *p = check_plan(L, 1);
  SchedWork w = sched_persistent_first(&p->persist, arg_u32(L, 2));
  lua_newtable(L);
  for (int i = 1; w.valid && i <= 1 << 20; i++) {
    bool inc = false;
    SchedWork next = sched_persistent_advance(&p->persist, w, &inc);
    push_work(L, w);
    lb_set_bool(L, "increment_pipe", inc);
    lua_rawseti(L, -2, i);
    w = next;
  }
  return 1;
}

/* plan:pieces(worker) -> every StreamK piece the worker processes, in order. */
static int plan_pieces(lua_State *L) {
  SchedPlan *p = check_plan(L, 1);
  if (p->cfg.kind != SCHED_STREAMK) return lb_error(L, "sched: pieces() needs a streamk plan");
  SchedCursor c;
  SchedSkWork w;
  sched_cursor_begin(&p->sk, &c, arg_u32(L, 2));
  lua_newtable(L);
  for (int i = 1; sched_cursor_next(&p->sk, &c, &w); i++) {
    push_piece(L, &w);
    SchedFixup r = sched_fixup_role(&p->sk, &w);
    PUSH_RECORD(FIXUP_MEMBERS, 9);
    lua_setfield(L, -2, "fixup");
    lua_rawseti(L, -2, i);
  }
  return 1;
}

/* plan:tl_coord(tile_id) -> m_idx, n_idx (TileLang's stateless decode). */
static int plan_tl_coord(lua_State *L) {
  SchedPlan *p = check_plan(L, 1);
  SchedCoord c = sched_tl_coord(&p->persist, arg_u32(L, 2));
  lua_pushinteger(L, c.m);
  lua_pushinteger(L, c.n);
  return 2;
}

static int plan_owner(lua_State *L) {
  SchedPlan *p = check_plan(L, 1);
  uint32_t contributors = 0;
  lua_pushinteger(L, sched_plan_owner(p, arg_u32(L, 2), &contributors));
  lua_pushinteger(L, contributors);
  return 2;
}

/* A picture has one cell per tile: past this many it would be megabytes of
** text nobody reads (and unbounded memory for --m 2^31). */
#define SCHED_RENDER_MAX_TILES 65536u

static void check_drawable(lua_State *L, const SchedPlan *p) {
  uint32_t tiles = p->persist.raster.total;
  if (tiles > SCHED_RENDER_MAX_TILES)
    lb_error(L, "sched: the plan has %u output tiles; a picture shows at most %u (use a larger --tile "
             "or a smaller problem)", tiles, SCHED_RENDER_MAX_TILES);
}

/* plan:render([{color=, splits=}]) -> text;  plan:svg() -> SVG document */
static int plan_render(lua_State *L) {
  SchedPlan *p = check_plan(L, 1);
  check_drawable(L, p);
  unsigned flags = 0;
  if (lua_istable(L, 2)) {
    lua_getfield(L, 2, "color");
    if (lua_toboolean(L, -1)) flags |= SCHED_RENDER_COLOR;
    lua_getfield(L, 2, "splits");
    if (lua_isboolean(L, -1) && !lua_toboolean(L, -1)) flags |= SCHED_RENDER_NO_SPLITS;
    lua_pop(L, 2);
  }
  StrBuf sb;
  sb_init(&sb);
  sched_render_text(&sb, p, flags);
  lua_pushlstring(L, sb.data ? sb.data : "", sb.len);
  sb_free(&sb);
  return 1;
}

static int plan_svg(lua_State *L) {
  SchedPlan *p = check_plan(L, 1);
  check_drawable(L, p);
  StrBuf sb;
  sb_init(&sb);
  sched_render_svg(&sb, p);
  lua_pushlstring(L, sb.data ? sb.data : "", sb.len);
  sb_free(&sb);
  return 1;
}

/* plan:fixup_model([seed]) -> ok, message: run the CPU model of the fixup protocol. */
static int plan_fixup_model(lua_State *L) {
  SchedPlan *p = check_plan(L, 1);
  if (p->cfg.kind != SCHED_STREAMK) return lb_error(L, "sched: fixup_model() needs a streamk plan");
  SchedFixupModel m;
  memset(&m, 0, sizeof m);
  bool ok = sched_fixup_model_run(&p->sk, (uint64_t)luaL_optinteger(L, 2, 1), &m);
  lua_pushboolean(L, ok && m.ok);
  lua_pushstring(L, m.ok ? "ok" : m.error);
  sched_fixup_model_free(&m);
  return 2;
}

/* {======================================================================
** The staged arithmetic for the Lua surface (stdlib/sched.lua)
** ======================================================================= */

/* core.sched_stage(what, at, ...): worker.c's arithmetic on Lua integers
** (known: folded here) and IR values (built at the insertion point `at`,
** {block =, before =}, with the user's location). */
typedef struct LStage {
  StageIr ir;
  IrBuilder b;
  Stage *st;     /* NULL without an insertion point: everything must be known */
  int owner_idx; /* the context userdata the built values belong to */
} LStage;

static void stage_open(lua_State *L, LStage *s, int at) {
  memset(s, 0, sizeof *s);
  if (lua_isnoneornil(L, at)) return;
  luaL_checktype(L, at, LUA_TTABLE);
  lua_getfield(L, at, "block");
  IrBlock *blk = lb_check_block(L, -1);
  IrContext *ctx = lb_owner(L, -1)->ctx;
  lb_push_owner(L, -1);
  s->owner_idx = lua_gettop(L);
  ir_builder_init(&s->b, ctx);
  ir_builder_at_end(&s->b, blk);
  if (lua_getfield(L, at, "before") != LUA_TNIL) ir_builder_before(&s->b, lb_check_op(L, -1));
  lua_pop(L, 1);
  s->b.loc = lb_user_loc(L, ctx);
  stage_ir_init(&s->ir, &s->b);
  s->st = &s->ir.st;
}

/* A Lua integer in [0, 2^32), a boolean, or an i32 / i1 value of the builder's context. */
static SInt stage_arg(lua_State *L, LStage *s, int idx, const char *what) {
  if (lua_isboolean(L, idx)) return st_bool(lua_toboolean(L, idx));
  if (lua_isinteger(L, idx)) {
    lua_Integer v = lua_tointeger(L, idx);
    if (v < 0 || v > UINT32_MAX)
      lb_error(L, "sched: %s = %lld is not a 32-bit unsigned integer", what, (long long)v);
    return st_k((uint32_t)v);
  }
  IrValue *v = lb_test_object(L, idx, LB_VALUE);
  if (!v)
    lb_error(L, "sched: %s must be an integer or an IR value, got %s", what, luaL_typename(L, idx));
  if (!s->st) lb_error(L, "sched: %s is an IR value, built outside of a kernel or region", what);
  if (lb_owner(L, idx)->ctx != s->b.ctx) lb_error(L, "sched: %s belongs to another context", what);
  if (!ir_type_is_int_width(v->type, 32) && !ir_type_is_int_width(v->type, 1))
    lb_error(L, "sched: %s must be an i32 value", what);
  return stage_ir_value(v);
}

static SInt stage_field(lua_State *L, LStage *s, int t, const char *name) {
  lua_getfield(L, t, name);
  SInt x = stage_arg(L, s, -1, name);
  lua_pop(L, 1);
  return x;
}

/* Push a result: a boolean or an integer when known, else the value. */
static void stage_push(lua_State *L, LStage *s, SInt x) {
  if (!st_known(x) && s->st)
    lb_push_object(L, LB_VALUE, x.v, s->owner_idx);
  else if (x.bits == 1)
    lua_pushboolean(L, st_get(x) != 0);
  else
    lua_pushinteger(L, (lua_Integer)st_get(x));
}

static const char *const raster_fields[] = {"grid_m",  "grid_n", "fast", "slow",
                                            "swizzle", "per_l",  "total"};

static SRaster stage_raster(lua_State *L, LStage *s, int t) {
  luaL_checktype(L, t, LUA_TTABLE);
  SRaster r;
  SInt *f[] = {&r.grid_m, &r.grid_n, &r.fast, &r.slow, &r.swizzle, &r.per_l, &r.total};
  for (int i = 0; i < 7; i++)
    *f[i] = stage_field(L, s, t, raster_fields[i]);
  lua_getfield(L, t, "column_major");
  r.order = lua_toboolean(L, -1) ? SCHED_ALONG_M : SCHED_ALONG_N;
  lua_pop(L, 1);
  return r;
}

static void push_raster(lua_State *L, LStage *s, const SRaster *r) {
  const SInt *f[] = {&r->grid_m, &r->grid_n, &r->fast, &r->slow, &r->swizzle, &r->per_l, &r->total};
  lua_createtable(L, 0, 8);
  for (int i = 0; i < 7; i++) {
    stage_push(L, s, *f[i]);
    lua_setfield(L, -2, raster_fields[i]);
  }
  lb_set_bool(L, "column_major", r->order == SCHED_ALONG_M);
}

/*
** raster, tiles_m, tiles_n, tiles_l, cluster_m, cluster_n, swizzle, column_major -> raster
** unpack, raster, linear -> m, n, l          valid, raster, linear -> linear < total
** tl_coord, raster, swizzle, tile_id -> m, n (TileLang's coord: the swizzle as given)
** block_m, m, cluster, rank -> m * cluster + rank
** tl_next, grid, linear, iter -> linear + grid, iter + 1
*/
static int core_sched_stage(lua_State *L) {
  enum { RASTER, UNPACK, VALID, BLOCK_M, TL_NEXT, TL_COORD };
  static const char *const whats[] = {"raster",  "unpack",   "valid", "block_m",
                                      "tl_next", "tl_coord", NULL};
  int what = luaL_checkoption(L, 1, NULL, whats);
  LStage s;
  stage_open(L, &s, 2);
  SWork w;
  memset(&w, 0, sizeof w);
  if (what == RASTER) {
    static const char *const names[] = {"tiles_m",   "tiles_n",   "tiles_l",
                                        "cluster_m", "cluster_n", "swizzle"};
    SInt a[6];
    for (int i = 0; i < 6; i++)
      a[i] = stage_arg(L, &s, 3 + i, names[i]);
    SchedOrder order = lua_toboolean(L, 9) ? SCHED_ALONG_M : SCHED_ALONG_N;
    SRaster r = sw_raster_shape(s.st, a[0], a[1], a[2], a[3], a[4], a[5], order);
    push_raster(L, &s, &r);
    return 1;
  }
  if (what == BLOCK_M) {
    stage_push(L, &s,
               sw_block_m(s.st, stage_arg(L, &s, 3, "m_idx"), stage_arg(L, &s, 4, "cluster"),
                          stage_arg(L, &s, 5, "rank")));
    return 1;
  }
  if (what == TL_NEXT) {
    SInt linear = stage_arg(L, &s, 4, "linear_idx"), iter = stage_arg(L, &s, 5, "current_iter");
    sw_tl_next(s.st, stage_arg(L, &s, 3, "workers"), &linear, &iter);
    stage_push(L, &s, linear);
    stage_push(L, &s, iter);
    return 2;
  }
  SRaster r = stage_raster(L, &s, 3);
  if (what == TL_COORD) {
    sw_tl_coord(s.st, &r, stage_arg(L, &s, 4, "swizzle"), stage_arg(L, &s, 5, "tile_id"), &w);
    stage_push(L, &s, w.f[SF_M]);
    stage_push(L, &s, w.f[SF_N]);
    return 2;
  }
  sw_work_at(s.st, &r, stage_arg(L, &s, 4, "tile_id"), st_k(0), &w);
  if (what == VALID) return stage_push(L, &s, w.f[SF_VALID]), 1;
  for (int f = SF_M; f <= SF_L; f++)
    stage_push(L, &s, w.f[f]);
  return 3;
}

/* }====================================================================== */

static const luaL_Reg plan_methods[] = {{"info", plan_info},
                                        {"params", plan_params},
                                        {"unpack", plan_unpack},
                                        {"dp_tile", plan_dp_tile},
                                        {"persistent", plan_persistent},
                                        {"pieces", plan_pieces},
                                        {"tl_coord", plan_tl_coord},
                                        {"owner", plan_owner},
                                        {"render", plan_render},
                                        {"svg", plan_svg},
                                        {"fixup_model", plan_fixup_model},
                                        {NULL, NULL}};

static const luaL_Reg sched_functions[] = {
    {"sched_plan", core_sched_plan}, {"sched_stage", core_sched_stage}, {NULL, NULL}};

static const LbClass sched_classes[] = {{LB_PLAN, NULL, plan_methods}, {NULL, NULL, NULL}};
const LbArea lb_area_sched = {sched_classes, sched_functions};
