/*
** l_graph.c -- Lua bindings of CUDA graphs (src/cuda/cuda_rt.c): the launches
** made between core.graph_begin() and core.graph_end() are captured into a
** graph, which lua/tilua/gpu/graph.lua makes tl.graph of.
**
**   core.graph_begin()              launches from now on are captured, not run
**   core.graph_end() -> Graph       instantiated
**   core.graph_abort()              end a capture, drop what it made
**   graph:launch()                  replay (asynchronous; a launch record at the user's line)
**   graph:update_begin()            the launches from now on set nodes 0, 1, ... in turn
**   core.graph_update_end()         ... until here, which checks every node was set
**   graph:nodes() -> n              kernel launches captured
**   graph:free()                    also __gc and __close
*/
#include "ldevice.h"

#define LB_GRAPH "tilua.CudaGraph"

typedef struct Graph {
  TlcuGraph *g;    /* NULL once freed */
  TlcuRuntime *rt; /* the device it was captured on (the current one then) */
} Graph;

static Graph *check_graph(lua_State *L, int idx) {
  Graph *g = luaL_checkudata(L, idx, LB_GRAPH);
  if (!g->g) lb_error(L, "attempt to use a freed graph");
  return g;
}

/* core.graph_begin() */
static int graph_begin(lua_State *L) {
  TlcuRuntime *rt = lb_cuda(L);
  if (tlcu_graph_begin(rt) != TLCU_OK) return lb_cuda_error(L, "tl.graph");
  return 0;
}

/* core.graph_end() -> Graph (the userdata made first, so that nothing raises after the graph
 * exists) */
static int graph_end(lua_State *L) {
  TlcuRuntime *rt = lb_cuda(L);
  Graph *g = lua_newuserdatauv(L, sizeof *g, 0);
  g->g = NULL;
  g->rt = rt;
  luaL_setmetatable(L, LB_GRAPH);
  if (tlcu_graph_end(rt, &g->g) != TLCU_OK) return lb_cuda_error(L, "tl.graph");
  return 1;
}

/* core.graph_abort(): after an error in the captured function */
static int graph_abort(lua_State *L) {
  TlcuRuntime *rt = lb_cuda(L);
  TlcuGraph *g = NULL;
  if (rt->capture && tlcu_graph_end(rt, &g) == TLCU_OK) tlcu_graph_free(rt, g);
  return 0;
}

static int graph_launch(lua_State *L) {
  Graph *g = check_graph(L, 1);
  TlcuRuntime *rt = g->rt;
  const char *file = NULL;
  int line = 0;
  if (!lb_user_frame(L, &file, &line)) file = NULL;
  if (tlcu_graph_launch(rt, g->g, NULL, file, line) != TLCU_OK)
    return lb_cuda_error_of(L, rt, "graph launch");
  return 0;
}

static int graph_update_begin(lua_State *L) {
  Graph *g = check_graph(L, 1);
  if (tlcu_graph_update_begin(g->rt, g->g) != TLCU_OK)
    return lb_cuda_error_of(L, g->rt, "graph update");
  return 0;
}

static int graph_update_end(lua_State *L) {
  TlcuRuntime *rt = lb_cuda(L);
  if (tlcu_graph_update_end(rt) != TLCU_OK) return lb_cuda_error(L, "graph update");
  return 0;
}

static int graph_nodes(lua_State *L) {
  lua_pushinteger(L, tlcu_graph_nodes(check_graph(L, 1)->g));
  return 1;
}

static int graph_free(lua_State *L) {
  Graph *g = luaL_checkudata(L, 1, LB_GRAPH);
  if (g->g) tlcu_graph_free(g->rt, g->g); /* after shutdown it releases nothing */
  g->g = NULL;
  return 0;
}

static const luaL_Reg graph_methods[] = {{"launch", graph_launch},
                                         {"update_begin", graph_update_begin},
                                         {"nodes", graph_nodes},
                                         {"free", graph_free},
                                         {NULL, NULL}};
static const luaL_Reg graph_meta[] = {{"__gc", graph_free}, {"__close", graph_free}, {NULL, NULL}};
static const luaL_Reg graph_functions[] = {{"graph_begin", graph_begin},
                                           {"graph_end", graph_end},
                                           {"graph_abort", graph_abort},
                                           {"graph_update_end", graph_update_end},
                                           {NULL, NULL}};

static const LbClass graph_classes[] = {{LB_GRAPH, graph_meta, graph_methods}, {NULL, NULL, NULL}};
const LbArea lb_area_graph = {graph_classes, graph_functions};
