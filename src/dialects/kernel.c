/*
** kernel.c -- the facts of a tile.kernel decoded once (kernel.h): the
** kernel_spec, the warps of the agents and the executor set of an op.
*/
#include <string.h>

#include "../ir/checked.h"
#include "kernel.h"

/* {======================================================================
** kernel_spec
** ======================================================================= */

/* Entry `name` of the spec as 1 to 3 positive integers (1, 1, 1 when absent);
** *prod gets their product, INT64_MAX when it overflows. */
static bool spec_dims(const IrAttr *spec, const char *name, int64_t out[3], int64_t *prod) {
  out[0] = out[1] = out[2] = 1;
  *prod = 1;
  const IrAttr *a = ir_attr_dict_get(spec, name);
  if (!a) return true;
  if (a->kind == IR_ATTR_INT) {
    out[0] = a->u.i;
  } else {
    uint32_t n = a->kind == IR_ATTR_ARRAY ? a->u.arr.n : 0;
    if (n < 1 || n > 3) return false;
    for (uint32_t i = 0; i < n; i++) {
      if (a->u.arr.elems[i]->kind != IR_ATTR_INT) return false;
      out[i] = a->u.arr.elems[i]->u.i;
    }
  }
  for (int i = 0; i < 3; i++) {
    if (out[i] <= 0) return false;
    if (!ck_mul(*prod, out[i], prod)) *prod = INT64_MAX;
  }
  return true;
}

/* "block of 2048 threads exceeds 1024"; a product past int64 names the extents. */
static void too_many(IrOp *at, const char *what, const int64_t d[3], int64_t prod, const char *unit,
                     int max) {
  if (prod == INT64_MAX)
    ir_op_error(at, "%s [%lld, %lld, %lld] has more than 2^63 %s, the limit is %d", what,
                (long long)d[0], (long long)d[1], (long long)d[2], unit, max);
  else ir_op_error(at, "%s of %lld %s exceeds %d", what, (long long)prod, unit, max);
}

/* What a reader gets from a missing or malformed spec: extents 1, not ok. */
static void defaults(KernelSpec *ks) {
  memset(ks, 0, sizeof *ks);
  ks->block[0] = ks->block[1] = ks->block[2] = 1;
  ks->cluster[0] = ks->cluster[1] = ks->cluster[2] = 1;
  ks->grid[0] = ks->grid[1] = ks->grid[2] = 1;
  ks->threads = ks->warps = ks->ctas = 1;
}

/* Decode k's spec into ks; with at != NULL report the first problem there. */
static bool decode(const IrOp *k, KernelSpec *ks, IrOp *at) {
  defaults(ks);
  const IrAttr *spec = ir_op_attr(k, "kernel_spec");
  if (!spec || spec->kind != IR_ATTR_DICT) return false; /* the attribute check reports it */
  int64_t block[3], cluster[3], grid[3], threads, ctas, blocks;
  const char *bad = !spec_dims(spec, "block", block, &threads)    ? "block"
                    : !spec_dims(spec, "cluster", cluster, &ctas) ? "cluster"
                    : !spec_dims(spec, "grid", grid, &blocks)     ? "grid"
                                                                  : NULL;
  if (bad) {
    if (at) ir_op_error(at, "kernel_spec.%s must be 1 to 3 positive integers", bad);
    return false;
  }
  if (!ir_attr_dict_get(spec, "block")) {
    if (at) ir_op_error(at, "kernel_spec needs 'block' (threads per block)");
    return false;
  }
  if (threads > SM90_MAX_THREADS) {
    if (at) too_many(at, "block", block, threads, "threads", SM90_MAX_THREADS);
    return false;
  }
  if (block[2] > SM90_MAX_BLOCK_Z) { /* x and y are bounded by the thread count */
    if (at)
      ir_op_error(at, "block extent z = %lld exceeds %d", (long long)block[2], SM90_MAX_BLOCK_Z);
    return false;
  }
  if (ctas > SM90_MAX_CLUSTER_CTAS) {
    if (at) too_many(at, "cluster", cluster, ctas, "CTAs", SM90_MAX_CLUSTER_CTAS);
    return false;
  }
  bool has_grid = ir_attr_dict_get(spec, "grid") != NULL;
  if (grid[0] > SM90_MAX_GRID_X || grid[1] > SM90_MAX_GRID_YZ || grid[2] > SM90_MAX_GRID_YZ) {
    if (at)
      ir_op_error(at, "kernel_spec.grid [%lld, %lld, %lld] exceeds the grid's limits (%d, %d, %d)",
                  (long long)grid[0], (long long)grid[1], (long long)grid[2], SM90_MAX_GRID_X,
                  SM90_MAX_GRID_YZ, SM90_MAX_GRID_YZ);
    return false;
  }
  for (int i = 0; has_grid && i < 3; i++)
    if (grid[i] % cluster[i]) {
      if (at)
        ir_op_error(
            at,
            "kernel_spec.grid [%lld, %lld, %lld] is no multiple of the cluster [%lld, %lld, %lld]",
            (long long)grid[0], (long long)grid[1], (long long)grid[2], (long long)cluster[0],
            (long long)cluster[1], (long long)cluster[2]);
      return false;
    }
  const IrAttr *smem = ir_attr_dict_get(spec, "smem");
  if (smem && (smem->kind != IR_ATTR_INT || smem->u.i < 0 || smem->u.i > SM90_MAX_SMEM)) {
    if (at) ir_op_error(at, "kernel_spec.smem must be an integer in [0, %d]", SM90_MAX_SMEM);
    return false;
  }
  const IrAttr *mc = ir_attr_dict_get(spec, "min_ctas");
  if (mc && (mc->kind != IR_ATTR_INT || mc->u.i < 1 || mc->u.i > SM90_SM_BLOCKS)) {
    if (at) ir_op_error(at, "kernel_spec.min_ctas must be an integer in [1, %d]", SM90_SM_BLOCKS);
    return false;
  }
  const IrAttr *nc = ir_attr_dict_get(spec, "num_ctas");
  if (nc && (nc->kind != IR_ATTR_INT || nc->u.i != ctas)) {
    if (at)
      ir_op_error(at, "kernel_spec.num_ctas must equal the cluster size %lld", (long long)ctas);
    return false;
  }
  memcpy(ks->block, block, sizeof block);
  memcpy(ks->cluster, cluster, sizeof cluster);
  ks->threads = threads;
  ks->warps = (threads + SM90_WARP_SIZE - 1) / SM90_WARP_SIZE;
  ks->ctas = ctas;
  ks->smem = smem ? smem->u.i : 0;
  ks->min_ctas = mc ? mc->u.i : 0;
  ks->has_cluster = ir_attr_dict_get(spec, "cluster") != NULL;
  memcpy(ks->grid, grid, sizeof grid);
  ks->has_grid = has_grid;
  ks->ok = true;
  return true;
}

KernelSpec kernel_spec(const IrOp *k) {
  KernelSpec ks;
  decode(k, &ks, NULL);
  return ks;
}

IrOp *kernel_of(const IrOp *op) {
  return op->kind == OP_TILE_KERNEL ? (IrOp *)op : ir_op_ancestor(op, OP_TILE_KERNEL);
}

KernelSpec kernel_spec_of(const IrOp *op) {
  KernelSpec ks;
  IrOp *k = kernel_of(op);
  if (k) decode(k, &ks, NULL);
  else defaults(&ks);
  return ks;
}

/* kernel_spec.sizes, the sizes the kernel accepts: {NAME = "grid_threads" |
** "grid_ctas"}, an integer parameter (by its arg_names name) that every launch
** gives the grid's threads (CTAs times the block's) or the grid's CTAs. A
** precondition launches check and the protocol check derives its inputs
** within (docs/protocol.md, "The check every compile runs"). */
static bool sizes_check(IrOp *k) {
  const IrAttr *sizes = ir_attr_dict_get(ir_op_attr(k, "kernel_spec"), "sizes");
  if (!sizes) return true;
  if (sizes->kind != IR_ATTR_DICT || sizes->u.dict.n == 0) {
    ir_op_error(k, "kernel_spec.sizes must be a non-empty dictionary {parameter = \"grid_threads\" "
                   "| \"grid_ctas\"}");
    return false;
  }
  const IrAttr *names = ir_op_attr(k, "arg_names");
  const IrBlock *body = k->regions[0].first;
  for (uint32_t i = 0; i < sizes->u.dict.n; i++) {
    const IrNamedAttr *e = &sizes->u.dict.entries[i];
    const IrAttr *v = e->attr;
    if (v->kind != IR_ATTR_STR ||
        (strcmp(v->u.str.s, "grid_threads") != 0 && strcmp(v->u.str.s, "grid_ctas") != 0)) {
      ir_op_error(k, "kernel_spec.sizes.%s must be \"grid_threads\" or \"grid_ctas\"", e->name);
      return false;
    }
    const IrType *t = NULL;
    for (uint32_t j = 0; names && names->kind == IR_ATTR_ARRAY && j < names->u.arr.n; j++) {
      const IrAttr *n = names->u.arr.elems[j];
      if (n->kind == IR_ATTR_STR && strcmp(n->u.str.s, e->name) == 0 && body && j < body->nargs)
        t = body->args[j]->type;
    }
    if (!t || (t->kind != IR_TY_INT && t->kind != IR_TY_INDEX)) {
      ir_op_error(k, "kernel_spec.sizes.%s names no integer parameter of the kernel", e->name);
      return false;
    }
  }
  return true;
}

KernelSize kernel_param_size(const IrOp *k, uint32_t i, const char **name) {
  const IrAttr *sizes = ir_attr_dict_get(ir_op_attr(k, "kernel_spec"), "sizes");
  const IrAttr *names = ir_op_attr(k, "arg_names");
  *name = "?";
  if (!sizes || sizes->kind != IR_ATTR_DICT || !names || names->kind != IR_ATTR_ARRAY ||
      i >= names->u.arr.n || names->u.arr.elems[i]->kind != IR_ATTR_STR)
    return KERNEL_SIZE_ANY;
  *name = names->u.arr.elems[i]->u.str.s;
  const IrAttr *rel = ir_attr_dict_get(sizes, *name);
  if (!rel || rel->kind != IR_ATTR_STR) return KERNEL_SIZE_ANY;
  return strcmp(rel->u.str.s, "grid_threads") == 0 ? KERNEL_SIZE_GRID_THREADS
         : strcmp(rel->u.str.s, "grid_ctas") == 0  ? KERNEL_SIZE_GRID_CTAS
                                                   : KERNEL_SIZE_ANY;
}

bool kernel_spec_check(IrOp *k) {
  KernelSpec ks;
  return decode(k, &ks, k) && sizes_check(k);
}

int64_t kernel_entry_regs(const KernelSpec *ks) {
  if (ks->threads <= 0) return 0;
  int64_t r = SM90_BLOCK_REGS / ks->threads / 8 * 8;
  return r > 248 ? 248 : r;
}

uint64_t kernel_warp_mask(const KernelSpec *ks) {
  return ks->ok ? kernel_warps_mask(0, ks->warps) : 0;
}

/* }====================================================================== */

/* {======================================================================
** Warp masks and agents
** ======================================================================= */

uint64_t kernel_warps_mask(int64_t first, int64_t n) {
  if (first < 0 || n < 1 || n > 64 || first > 64 - n) return 0;
  return (n == 64 ? ~(uint64_t)0 : ((uint64_t)1 << n) - 1) << first;
}

int kernel_popcount(uint64_t m) { return __builtin_popcountll(m); }

int kernel_ctz(uint64_t m) { return m ? __builtin_ctzll(m) : 0; }

bool kernel_mask_contiguous(uint64_t m) {
  if (!m) return false;
  m >>= kernel_ctz(m);
  return (m & (m + 1)) == 0;
}

int64_t kernel_agent_warps(const IrOp *agent) {
  return agent->kind == OP_TILE_AGENT ? ir_attrs_TILE_AGENT(agent).num_warps
                                      : ir_attrs_TILEAS_AGENT(agent).num_warps;
}

int64_t kernel_switch_entry(const IrOp *agent) {
  const IrOp *sw = ir_op_parent_op(agent);
  if (!sw || sw->kind != OP_TILEAS_AGENT_SWITCH) return -1;
  IrAttrList holes = ir_attrs_TILEAS_AGENT_SWITCH(sw).holes; /* ascending (verified) */
  int64_t e = 0;
  uint32_t h = 0;
  for (const IrOp *o = agent->parent->first; o; o = o->next, e++) {
    while (h < holes.n && ir_attr_list_int(holes, h) == e)
      h++, e++;
    if (o == agent) return e;
  }
  return -1;
}

int64_t kernel_agent_first_warp(const IrOp *agent) {
  if (agent->kind == OP_TILEAS_AGENT) {
    int64_t e = kernel_switch_entry(agent);
    if (e >= 0)
      return ir_attr_list_int(ir_attrs_TILEAS_AGENT_SWITCH(ir_op_parent_op(agent)).warp_id,
                              (uint32_t)e);
  }
  int64_t next = 0;
  for (const IrOp *o = agent->parent ? agent->parent->first : NULL; o; o = o->next) {
    if (o->kind != agent->kind) continue;
    int64_t wid = o->kind == OP_TILE_AGENT ? ir_attrs_TILE_AGENT(o).warp_id : -1;
    int64_t first = wid >= 0 ? wid : next;
    if (o == agent) return first;
    next = first + kernel_agent_warps(o);
  }
  return next;
}

uint64_t kernel_agent_mask(const IrOp *agent) {
  return kernel_warps_mask(kernel_agent_first_warp(agent), kernel_agent_warps(agent));
}

/* }====================================================================== */

/* {======================================================================
** Shared memory
** ======================================================================= */

typedef struct Layout {
  KernelSharedLayout s;
  int64_t off, dyn_align;
  void (*each)(IrOp *op, int64_t offset, int64_t bytes, void *ud);
  void *ud;
} Layout;

/* The bytes of an allocation: a memref's elements, or `count` elements; -1
** when they do not fit 64 bits. */
static int64_t alloc_bytes(const IrOp *op) {
  const IrType *t = op->results[0].type;
  if (t->kind == IR_TY_MEMREF) return dia_type_storage_bytes(t);
  int64_t n = ir_attrs_TILE_ALLOC_SHARED(op).count, bytes;
  return n >= 0 && ck_mul(n, dia_type_bytes(t->elem), &bytes) ? bytes : -1;
}

/* Static allocations at their offsets; dynamic ones (on the second walk,
** once s.static_bytes is known) at the end of the static part. */
static bool layout_visit(IrOp *op, void *ud) {
  Layout *l = ud;
  if (op->kind == OP_TILE_ALLOC_SHARED) {
    int64_t a = ir_attrs_TILE_ALLOC_SHARED(op).align, bytes = alloc_bytes(op);
    if (a > l->s.align) l->s.align = a;
    if (bytes < 0 || !ck_align_up(l->off, a, &l->off)) l->s.overflow = true;
    if (l->s.overflow) return false;
    if (l->each) l->each(op, l->off, bytes, l->ud);
    if (!ck_add(l->off, bytes, &l->off)) l->s.overflow = true;
  } else if (op->kind == OP_TILE_DYNAMIC_SHARED) {
    int64_t a = ir_attrs_TILE_DYNAMIC_SHARED(op).align;
    if (a > l->s.align) l->s.align = a;
    if (a > l->dyn_align) l->dyn_align = a;
    if (l->each) l->each(op, l->s.static_bytes, 0, l->ud);
  }
  return true;
}

KernelSharedLayout
kernel_shared_layout(IrOp *k, void (*each)(IrOp *op, int64_t offset, int64_t bytes, void *ud),
                     void *ud) {
  Layout l = {.s = {.align = TILE_DEFAULT_ALIGN}, .dyn_align = 1};
  ir_walk_pre(k, layout_visit, &l);
  if (l.s.overflow || !ck_align_up(l.off, l.dyn_align, &l.s.static_bytes) ||
      !ck_add(l.s.static_bytes, kernel_spec(k).smem, &l.s.bytes)) {
    l.s.overflow = true;
    return l.s;
  }
  if (each) {
    KernelSharedLayout s = l.s;
    l = (Layout){.s = s, .dyn_align = 1, .each = each, .ud = ud};
    ir_walk_pre(k, layout_visit, &l);
  }
  return l.s;
}

/* }====================================================================== */

/* {======================================================================
** Executor sets
** ======================================================================= */

static uint32_t block_index(const IrBlock *b) {
  uint32_t i = 0;
  for (const IrBlock *p = b->parent ? b->parent->first : NULL; p && p != b; p = p->next)
    i++;
  return i;
}

static bool is_elect(const IrValue *v) {
  return v && v->def && (v->def->kind == OP_TILE_ELECT || v->def->kind == OP_NVVM_ELECT_SYNC);
}

/* Does op p narrow execution below a warp for what is in its block b? */
static bool narrows(const IrOp *p, const IrBlock *b) {
  if (p->kind == OP_TILE_ELECT_ONE) return true;
  return p->kind == OP_SCF_IF && p->noperands && b == p->regions[0].first &&
         is_elect(p->operands[0].value);
}

KernelExec kernel_exec_of(const IrOp *op) {
  KernelExec x = {0, NULL, NULL};
  for (const IrBlock *b = op->parent; b;) {
    IrOp *p = ir_block_parent_op(b);
    if (!p) break;
    if (!x.narrow && narrows(p, b)) x.narrow = p;
    if (!x.scope) {
      if (p->kind == OP_TILE_AGENT) {
        x.scope = p;
        x.mask = kernel_agent_mask(p);
      } else if (p->kind == OP_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR) {
        x.scope = p;
        x.mask = (uint64_t)ir_attr_list_int(ir_attrs_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR(p).masks,
                                            block_index(b));
      } else if (p->kind == OP_CUTLASS_ASYNC_EXEC) {
        x.scope = p;
        x.mask = (uint64_t)ir_attrs_CUTLASS_ASYNC_EXEC(p).executors;
      } else if (p->kind == OP_TILE_KERNEL) {
        KernelSpec ks = kernel_spec(p);
        x.scope = p;
        x.mask = kernel_warp_mask(&ks);
      }
    }
    if (p->kind == OP_TILE_KERNEL) break;
    b = p->parent;
  }
  return x;
}

/* }====================================================================== */
