/*
** l_comm.c -- NCCL for Lua (src/cuda/nccl.h): communicators and the calls on
** them. lua/tilua/gpu/comm.lua builds tl.nccl on these, checking buffers'
** types and sizes first.
**
**   core.nccl_available() -> true | false, why     core.nccl_version() -> code
**   core.nccl_unique_id() -> 128-byte string       (made where no GPU is needed)
**   core.nccl_comm(id, nranks, rank) -> Comm        (on the process's device)
**   core.nccl_comm_all({ordinals}) -> {Comm, ...}    (a rank per device of this process)
**   comm:info() -> nranks, rank, device            comm:destroy()
**   comm:call(kind, send, recv, count, dtype, redop, peer [, stream])
**       kind "all_reduce" | ..., send and recv device addresses (or buffers)
**   core.nccl_group_start(), core.nccl_group_end()
**
** A Comm is created empty before the communicator is attached; __gc and
** __close destroy it once, and only while the CUDA runtime is up (at exit the
** runtime's sentinel, made earlier, is finalized after it).
*/
#include <string.h>

#include "../cuda/nccl.h"
#include "ldevice.h"

#define LB_COMM "tilua.Comm"
#define ERR_SIZE 1024

typedef struct Comm {
  ncclComm_t c;
  int live;
} Comm;

static Comm *check_comm(lua_State *L, int idx) {
  Comm *c = luaL_checkudata(L, idx, LB_COMM);
  if (!c->live) lb_error(L, "attempt to use a destroyed NCCL communicator");
  return c;
}

static int nccl_available(lua_State *L) {
  char err[ERR_SIZE];
  int ok = tlnccl_available(err, sizeof err);
  lua_pushboolean(L, ok);
  if (ok) return 1;
  lua_pushstring(L, err);
  return 2;
}

static int nccl_version(lua_State *L) {
  lua_pushinteger(L, tlnccl_version());
  return 1;
}

static int nccl_unique_id(lua_State *L) {
  char err[ERR_SIZE];
  ncclUniqueId id;
  if (tlnccl_unique_id(&id, err, sizeof err)) return lb_error(L, "%s", err);
  lua_pushlstring(L, id.internal, sizeof id.internal);
  return 1;
}

/* core.nccl_comm(id, nranks, rank): this process's rank, on its device. */
static int nccl_comm(lua_State *L) {
  size_t len;
  const char *id = luaL_checklstring(L, 1, &len);
  lua_Integer nranks = luaL_checkinteger(L, 2), rank = luaL_checkinteger(L, 3);
  if (len != TLNCCL_ID_BYTES)
    return lb_error(L, "nccl: a unique id is %d bytes (tl.nccl.unique_id()), got %d",
                    TLNCCL_ID_BYTES, (int)len);
  if (nranks < 1 || nranks > 1 << 20 || rank < 0 || rank >= nranks)
    return lb_error(L, "nccl: rank %lld of %lld ranks (ranks are 0..nranks-1)", (long long)rank,
                    (long long)nranks);
  lb_cuda(L); /* the device's context is current: NCCL's CUDA runtime takes it */
  Comm *c = lua_newuserdatauv(L, sizeof *c, 0);
  memset(c, 0, sizeof *c);
  luaL_setmetatable(L, LB_COMM);
  ncclUniqueId uid;
  memcpy(uid.internal, id, sizeof uid.internal);
  char err[ERR_SIZE];
  int bad = tlnccl_comm_init_rank(&c->c, (int)nranks, &uid, (int)rank, err, sizeof err);
  tlcu_forget_current(); /* NCCL's CUDA runtime may have switched the context */
  if (bad) return lb_error(L, "%s", err);
  c->live = 1;
  return 1;
}

/* core.nccl_comm_all({ordinals}) -> {Comm, ...}: a communicator per device of
** this process (ncclCommInitAll), rank i on ordinals[i] */
static int nccl_comm_all(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  int n = (int)luaL_len(L, 1);
  if (n < 1 || n > LB_MAX_DEVICES)
    return lb_error(L, "nccl: 1 to %d devices, got %d", LB_MAX_DEVICES, n);
  int devs[LB_MAX_DEVICES];
  for (int i = 0; i < n; i++) {
    lua_geti(L, 1, i + 1);
    lb_device(L, lua_gettop(L)); /* there, and its context made (NCCL uses the primary contexts) */
    devs[i] = (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
  }
  lua_createtable(L, n, 0);
  Comm *cs[LB_MAX_DEVICES];
  for (int i = 0; i < n; i++) {
    cs[i] = lua_newuserdatauv(L, sizeof *cs[i], 0);
    memset(cs[i], 0, sizeof *cs[i]);
    luaL_setmetatable(L, LB_COMM);
    lua_seti(L, -2, i + 1);
  }
  ncclComm_t comms[LB_MAX_DEVICES];
  char err[ERR_SIZE];
  int bad = tlnccl_comm_init_all(comms, n, devs, err, sizeof err);
  tlcu_forget_current();
  if (bad) return lb_error(L, "%s", err);
  for (int i = 0; i < n; i++)
    cs[i]->c = comms[i], cs[i]->live = 1;
  return 1;
}

static int comm_info(lua_State *L) {
  Comm *c = check_comm(L, 1);
  int nranks = 0, rank = 0, dev = 0;
  char err[ERR_SIZE];
  if (tlnccl_comm_info(c->c, &nranks, &rank, &dev, err, sizeof err)) return lb_error(L, "%s", err);
  lua_pushinteger(L, nranks);
  lua_pushinteger(L, rank);
  lua_pushinteger(L, dev);
  return 3;
}

/* Destroy once; 1 with the message in err when NCCL refused. */
static int destroy(lua_State *L, Comm *c, char *err, size_t n) {
  if (!c->live) return 0;
  c->live = 0;
  TlcuRuntime *rt = lb_cuda_runtime(L); /* shut down (the state closing): NCCL's CUDA is gone */
  return rt && tlcu_ready(rt) && tlnccl_comm_destroy(c->c, err, n);
}

static int comm_destroy(lua_State *L) {
  char err[ERR_SIZE];
  if (destroy(L, luaL_checkudata(L, 1, LB_COMM), err, sizeof err)) return lb_error(L, "%s", err);
  return 0;
}

static int comm_gc(lua_State *L) { /* __gc and __close: never raise */
  char err[ERR_SIZE];
  destroy(L, luaL_checkudata(L, 1, LB_COMM), err, sizeof err);
  return 0;
}

static uint64_t address_arg(lua_State *L, int idx, const char *what) {
  if (lua_isnoneornil(L, idx)) return 0;
  CUdeviceptr a = lb_buffer_address(L, idx, NULL);
  if (!a)
    lb_error(L, "nccl: %s must be a device buffer or address, got %s", what, luaL_typename(L, idx));
  return (uint64_t)a;
}

/* comm:call(kind, send, recv, count, dtype, redop, peer [, stream]) */
static int comm_call(lua_State *L) {
  Comm *c = check_comm(L, 1);
  static const char *const kinds[] = {
#define TLNCCL_OP_NAME(name, fn) #name,
      TLNCCL_OPS(TLNCCL_OP_NAME)
#undef TLNCCL_OP_NAME
          NULL};
  TlncclOp op;
  memset(&op, 0, sizeof op);
  op.kind = (TlncclOpKind)luaL_checkoption(L, 2, NULL, kinds);
  op.comm = c->c;
  op.send = address_arg(L, 3, "the send buffer");
  op.recv = address_arg(L, 4, "the receive buffer");
  lua_Integer count = luaL_checkinteger(L, 5);
  if (count < 0)
    return lb_error(L, "nccl %s: count %lld is negative", tlnccl_op_name(op.kind),
                    (long long)count);
  op.count = (size_t)count;
  op.dtype = (int)luaL_checkinteger(L, 6);
  op.redop = (int)luaL_optinteger(L, 7, TLNCCL_SUM);
  op.peer = (int)luaL_optinteger(L, 8, 0);
  op.stream = lb_stream_arg(L, 9);
  char err[ERR_SIZE];
  int bad = tlnccl_call(&op, err, sizeof err);
  tlcu_forget_current();
  if (bad) return lb_error(L, "%s", err);
  return 0;
}

static int nccl_group_start(lua_State *L) {
  char err[ERR_SIZE];
  if (tlnccl_group_start(err, sizeof err)) return lb_error(L, "%s", err);
  return 0;
}

static int nccl_group_end(lua_State *L) {
  char err[ERR_SIZE];
  int bad = tlnccl_group_end(err, sizeof err);
  tlcu_forget_current();
  if (bad) return lb_error(L, "%s", err);
  return 0;
}

static const luaL_Reg comm_methods[] = {
    {"info", comm_info}, {"call", comm_call}, {"destroy", comm_destroy}, {NULL, NULL}};
static const luaL_Reg comm_meta[] = {{"__gc", comm_gc}, {"__close", comm_gc}, {NULL, NULL}};
static const luaL_Reg comm_functions[] = {
    {"nccl_available", nccl_available}, {"nccl_version", nccl_version},
    {"nccl_unique_id", nccl_unique_id}, {"nccl_comm", nccl_comm},
    {"nccl_comm_all", nccl_comm_all},   {"nccl_group_start", nccl_group_start},
    {"nccl_group_end", nccl_group_end}, {NULL, NULL}};

static const LbClass comm_classes[] = {{LB_COMM, comm_meta, comm_methods}, {NULL, NULL, NULL}};
const LbArea lb_area_comm = {comm_classes, comm_functions};
