/*
** tileas_assign_layouts.c -- the `tileas-assign-layouts` pass: our stand-in
** for the layout assignment that runs before the cluster passes. Every tile
** value of a tile program gets a layout in its type (docs/tileprog.md,
** "Layouts"):
**
**   the accumulator of a tileas.dot (and the dot's result)   "mma": wgmma
**       fragments, warpgroups along M (warps = [M / 16, 1], cta = [1, 1])
**   a dot operand that a tiled_load reads                    "shared", the
**       swizzle of its rows (128 for 128-byte rows): TMA writes it, wgmma
**       descriptors read it; the load's result moves to shared memory
**   a dot operand computed in registers                      "mma_operand"
**   elementwise ops, loops' carried values, broadcast        their operands'
**   expand_dim's operand, reduce's result                    "slice" of the
**       other side's layout along the dim
**   anything else                                            "blocked"
**
** A blocked layout's unit (the bytes a thread holds contiguous along the
** fastest dim: one vector access) is 16 bytes, but 8 by the row rule: in a
** kernel without a dot, a class that is one row (every dim but the last of
** extent 1) of at least 64 bytes a thread of the block (8192 bf16 on 8 warps:
** 8 units of 8 bytes a thread, 4 of 16 otherwise) whose values are moved
** unchanged (each a tiled_load's result or a block argument: a row copy).
** On the H200 the register loop's row copy runs at 0.953-0.962 of
** cuMemcpyDtoD in 8-byte units against 0.943-0.944 in 16-byte ones, but
** RMSNorm, softmax, LayerNorm, a row sum and the backward passes are slower
** in 8-byte units (LayerNorm 0.81 against 0.93; docs/PERF.md, s14norm-1):
** their rows keep 16 bytes. The option `unit` (bytes: 4, 8 or 16; 0 or
** absent: the rule) sets every blocked class's unit instead
** (tl.options.blocked_unit).
**
** Values that must share a layout are classes of a union-find (the operands
** and results of an elementwise op, what a loop carries, an if's results);
** where two classes that already have different layouts meet at an
** elementwise op, or a tiled_load feeds a dot and something else too, a
** tileas.convert_layout is inserted on the operand. A value whose type has a
** layout keeps it (so the pass is idempotent). Then every tile value is
** retyped.
*/
#include <string.h>

#include "../ir/checked.h"
#include "../dialects/kernel.h"
#include "tileas_layout.h"

typedef struct Lay {
  TasPass base;      /* base.changed: a value was retyped */
  PtrMap index;      /* value -> 1 + its number */
  IrValue **vals;    /* by number */
  uint32_t *up;      /* union-find parent, by number */
  const IrAttr **of; /* the layout of a class (at its root), NULL: none yet */
  uint32_t n, cap;
  bool failed;
  bool has_dot; /* the kernel has a tileas.dot (the row rule does not apply) */
  int64_t unit; /* the option `unit` (bytes), 0: the rule */
} Lay;

static bool is_tile(const IrValue *v) { return v && v->type->kind == IR_TY_TILE; }

/* {======================================================================
** Layout dictionaries
** ======================================================================= */

static const IrAttr *ints2(IrContext *ctx, uint32_t n, int64_t first) {
  int64_t v[16];
  for (uint32_t i = 0; i < n; i++)
    v[i] = i ? 1 : first;
  return ir_attr_int_array(ctx, n, v);
}

static const IrAttr *dict(IrContext *ctx, uint32_t n, const IrNamedAttr *e) {
  return ir_attr_dict(ctx, n, e);
}

/* mma: the accumulator of a dot of M rows: M / 16 warps along M (a warpgroup a 64 rows). */
static const IrAttr *mma_layout(IrContext *ctx, int64_t m) {
  IrNamedAttr e[] = {{"kind", ir_attr_cstr(ctx, "mma")},
                     {"warps", ints2(ctx, 2, m >= 16 ? m / 16 : 1)},
                     {"cta", ints2(ctx, 2, 1)}};
  return dict(ctx, 3, e);
}

/* shared: the swizzle that covers a row of the tile (the innermost dim), as TMA and wgmma read it.
 */
static const IrAttr *shared_layout(IrContext *ctx, const IrType *t) {
  int64_t row;
  if (!ck_mul(t->shape[t->rank - 1], ir_type_bitwidth(t->elem) / 8, &row)) row = INT64_MAX;
  int64_t sw = row >= 128 ? 128 : row >= 64 ? 64 : row >= 32 ? 32 : 0;
  IrNamedAttr e[] = {{"kind", ir_attr_cstr(ctx, "shared")}, {"swizzle", ir_attr_i64(ctx, sw)}};
  return dict(ctx, 2, e);
}

/* blocked: the tile's elements dealt to the block's threads so that a warp's
** access is contiguous: each thread holds `size` = 16 bytes of the smallest
** element type of its class along the fastest dim (a vector access), a
** warp's lanes fill the fastest dim first, then the dims before it; the
** warps take the slowest dims first (rows of their own: a row's reduction
** stays within a warp where the rows are enough), the rest the fastest
** dim. What exceeds the tile wraps (threads hold copies). */
static int64_t pow2_upto(int64_t n) {
  int64_t p = 1;
  while (2 * p <= n)
    p *= 2;
  return p;
}

static const IrAttr *blocked_layout(IrContext *ctx, uint32_t rank, const int64_t *shape,
                                    int64_t warps, int64_t elem_bytes, int64_t unit) {
  int64_t size[TAS_MAX_RANK], lanes[TAS_MAX_RANK], wr[TAS_MAX_RANK], one[TAS_MAX_RANK];
  uint32_t last = rank - 1;
  for (uint32_t d = 0; d < rank; d++)
    size[d] = lanes[d] = wr[d] = one[d] = 1;
  int64_t v = unit / (elem_bytes > 0 ? elem_bytes : 1);
  if (v < 1) v = 1;
  while (v > 1 && shape[last] % v)
    v /= 2;
  size[last] = v;
  int64_t left = 32;
  for (uint32_t i = 0; i < rank && left > 1; i++) {
    uint32_t d = last - i;
    lanes[d] = pow2_upto(
        shape[d] / size[d] < left ? (shape[d] / size[d] > 0 ? shape[d] / size[d] : 1) : left);
    left /= lanes[d];
  }
  lanes[last] *= left;
  left = warps;
  for (uint32_t d = 0; d < rank && left > 1; d++) {
    int64_t room = shape[d] / (size[d] * lanes[d]), w = 1;
    for (int64_t c = left; c > 1;
         c--) /* the largest divisor of the warps left that the dim holds */
      if (left % c == 0 && c <= room) {
        w = c;
        break;
      }
    wr[d] = w;
    left /= w;
  }
  wr[last] *= left;
  IrNamedAttr e[] = {{"kind", ir_attr_cstr(ctx, "blocked")},
                     {"warps", ir_attr_int_array(ctx, rank, wr)},
                     {"cta", ir_attr_int_array(ctx, rank, one)},
                     {"size", ir_attr_int_array(ctx, rank, size)},
                     {"lanes", ir_attr_int_array(ctx, rank, lanes)}};
  return dict(ctx, 5, e);
}

static const IrAttr *plain_layout(IrContext *ctx, const char *kind, uint32_t rank) {
  IrNamedAttr e[] = {{"kind", ir_attr_cstr(ctx, kind)},
                     {"warps", ints2(ctx, rank, 4)},
                     {"cta", ints2(ctx, rank, 1)}};
  return dict(ctx, 3, e);
}

static const IrAttr *slice_layout(IrContext *ctx, const IrAttr *parent, int64_t dim) {
  IrNamedAttr e[] = {
      {"kind", ir_attr_cstr(ctx, "slice")}, {"parent", parent}, {"dim", ir_attr_i64(ctx, dim)}};
  return dict(ctx, 3, e);
}

/* The parent of a slice layout along dim, or NULL. */
static const IrAttr *slice_parent(const IrAttr *l, int64_t dim) {
  const IrAttr *k = ir_attr_dict_get(l, "kind"), *d = ir_attr_dict_get(l, "dim");
  if (!k || k->kind != IR_ATTR_STR || strcmp(k->u.str.s, "slice") != 0 || !d || d->u.i != dim)
    return NULL;
  return ir_attr_dict_get(l, "parent");
}

static bool is_shared_layout(const IrAttr *l) {
  const IrAttr *k = ir_attr_dict_get(l, "kind");
  return k && k->kind == IR_ATTR_STR && strcmp(k->u.str.s, "shared") == 0;
}

/* }====================================================================== */

/* {======================================================================
** Classes
** ======================================================================= */

static uint32_t add_value(Lay *L, IrValue *v) {
  uintptr_t i = (uintptr_t)ptrmap_get(&L->index, v);
  if (i) return (uint32_t)i - 1;
  if (L->n == L->cap) {
    L->cap = L->cap ? 2 * L->cap : 64;
    L->vals = ir_realloc(L->vals, L->cap * sizeof *L->vals);
    L->up = ir_realloc(L->up, L->cap * sizeof *L->up);
    L->of = ir_realloc(L->of, L->cap * sizeof *L->of);
  }
  L->vals[L->n] = v;
  L->up[L->n] = L->n;
  L->of[L->n] = v->type->layout; /* a layout given already is kept */
  ptrmap_set(&L->index, v, (void *)(uintptr_t)(L->n + 1));
  return L->n++;
}

static uint32_t root(Lay *L, uint32_t i) {
  while (L->up[i] != i)
    i = L->up[i] = L->up[L->up[i]];
  return i;
}

static uint32_t cls(Lay *L, IrValue *v) { return root(L, add_value(L, v)); }
static const IrAttr *layout_of(Lay *L, IrValue *v) { return L->of[cls(L, v)]; }

/* Merge the classes of a and b; false (nothing merged) when both have layouts and they differ. */
static bool unite(Lay *L, IrValue *a, IrValue *b) {
  uint32_t ra = cls(L, a), rb = cls(L, b);
  if (ra == rb) return true;
  if (L->of[ra] && L->of[rb] && L->of[ra] != L->of[rb]) return false;
  if (!L->of[ra]) L->of[ra] = L->of[rb];
  L->up[rb] = ra;
  return true;
}

/* Give v's class the layout l; false when it has another one. */
static bool seed(Lay *L, IrValue *v, const IrAttr *l) {
  uint32_t r = cls(L, v);
  if (L->of[r] && L->of[r] != l) return false;
  L->of[r] = l;
  return true;
}

/* A tileas.convert_layout of op's operand i, inserted before op: op reads it instead. */
static IrValue *convert_operand(Lay *L, IrOp *op, uint32_t i) {
  IrValue *v = op->operands[i].value;
  IrOp *cv = ir_op_create(L->base.r.ctx, OP_TILEAS_CONVERT_LAYOUT, op->loc, 1, &v, 1, &v->type, 0);
  ir_op_insert_before(op, cv);
  ir_op_set_operand(op, i, &cv->results[0]);
  add_value(L, &cv->results[0]);
  return &cv->results[0];
}

/* }====================================================================== */

/* {======================================================================
** Collecting the constraints
** ======================================================================= */

static bool elementwise(const IrOp *op) {
  return tas_elementwise(op) || op->kind == OP_TILEAS_BROADCAST;
}

static bool feeds_dot_operand(const IrUse *u) {
  return u->owner->kind == OP_TILEAS_DOT && u->index < 2;
}

/* A tiled_load that feeds a dot's a or b keeps only such uses: the others read
** a convert_layout of it (the loaded tile goes to shared memory, they work in
** registers). */
static void split_load_uses(Lay *L, IrOp *load) {
  IrValue *v = &load->results[0];
  bool dot = false, other = false;
  for (IrUse *u = v->uses; u; u = u->next) {
    if (feeds_dot_operand(u)) dot = true;
    else other = true;
  }
  if (!dot || !other) return;
  IrOp *cv =
      ir_op_create(L->base.r.ctx, OP_TILEAS_CONVERT_LAYOUT, load->loc, 1, &v, 1, &v->type, 0);
  ir_op_insert_after(load, cv);
  for (IrUse *u = v->uses, *next; u; u = next) {
    next = u->next;
    if (u->owner != cv && !feeds_dot_operand(u))
      ir_op_set_operand(u->owner, u->index, &cv->results[0]);
  }
}

static bool visit_split(IrOp *op, void *ud) {
  if (op->kind == OP_TILEAS_TILED_LOAD) split_load_uses(ud, op);
  return true;
}

/* Every tile value, numbered (results and block arguments); a shared tile
** without a layout (an alloc_tensor's) is "shared". */
static bool visit_collect(IrOp *op, void *ud) {
  Lay *L = ud;
  for (uint32_t i = 0; i < op->nresults; i++) {
    IrValue *v = &op->results[i];
    if (!is_tile(v)) continue;
    add_value(L, v);
    if (v->type->space == IR_MS_SHARED && !layout_of(L, v))
      seed(L, v, shared_layout(L->base.r.ctx, v->type));
  }
  for (uint32_t r = 0; r < op->nregions; r++)
    for (IrBlock *b = op->regions[r].first; b; b = b->next)
      for (uint32_t i = 0; i < b->nargs; i++)
        if (is_tile(b->args[i])) add_value(L, b->args[i]);
  return true;
}

static IrDiag *fail_at(Lay *L, IrOp *op, const char *what) {
  L->failed = true;
  return ir_op_error(op, "tileas-assign-layouts: %s", what);
}

/* Seeds: accumulators are mma, operands read by tiled_load shared. */
static bool visit_seed(IrOp *op, void *ud) {
  Lay *L = ud;
  if (op->kind != OP_TILEAS_DOT) return true;
  L->has_dot = true;
  IrContext *ctx = L->base.r.ctx;
  IrValue *acc = op->operands[2].value;
  const IrAttr *m = mma_layout(ctx, acc->type->shape[0]);
  if (!seed(L, acc, m) || !seed(L, &op->results[0], m) || !unite(L, acc, &op->results[0]))
    fail_at(L, op, "the accumulator already has a layout other than mma");
  for (uint32_t i = 0; i < 2; i++) {
    IrValue *v = op->operands[i].value;
    bool loaded = v->def && v->def->kind == OP_TILEAS_TILED_LOAD;
    const IrAttr *l =
        loaded ? shared_layout(ctx, v->type) : plain_layout(ctx, "mma_operand", v->type->rank);
    if (layout_of(L, v) == l) continue;
    if (layout_of(L, v)) convert_operand(L, op, i); /* another layout given: convert it */
    seed(L, op->operands[i].value, l);
  }
  return true;
}

/* The values of an scf op's loop-carried slots (and of an if's results) share a layout. */
static void unite_slots(Lay *L, IrOp *op) {
  TasSlot sl;
  for (uint32_t i = 0; tas_slot_at(op, i, &sl); i++) {
    IrValue *first = sl.values[0];
    if (!is_tile(first)) continue;
    bool ok = true;
    for (uint32_t j = 1; j < sl.nvalues; j++)
      ok &= unite(L, first, sl.values[j]);
    for (uint32_t j = 0; j < sl.nfeeds; j++)
      if (sl.feeds[j].op) ok &= unite(L, first, sl.feeds[j].op->operands[sl.feeds[j].index].value);
    if (!ok) fail_at(L, op, "values carried together have different layouts");
  }
}

static bool visit_unite(IrOp *op, void *ud) {
  Lay *L = ud;
  if (elementwise(op)) {
    IrValue *res = &op->results[0];
    for (uint32_t i = 0; i < op->noperands; i++) {
      IrValue *v = op->operands[i].value;
      if (!is_tile(v)) continue;
      if (!unite(L, res, v)) unite(L, res, convert_operand(L, op, i)); /* two layouts meet */
    }
  } else {
    unite_slots(L, op);
  }
  return true;
}

/* expand_dim and reduce: the slice relation between operand and result, both
** ways; true when a layout was derived. */
static bool derive(Lay *L, IrOp *op) {
  IrContext *ctx = L->base.r.ctx;
  bool expand = op->kind == OP_TILEAS_EXPAND_DIM;
  if (!expand && op->kind != OP_TILEAS_REDUCE) return false;
  IrValue *x = op->operands[0].value, *y = &op->results[0];
  if (!is_tile(y)) return false; /* a rank-1 reduce gives a scalar */
  int64_t dim = expand ? ir_attrs_TILEAS_EXPAND_DIM(op).dim : ir_attrs_TILEAS_REDUCE(op).dim;
  IrValue *whole = expand ? y : x, *part = expand ? x : y; /* part = slice(whole, dim) */
  const IrAttr *lw = layout_of(L, whole), *lp = layout_of(L, part);
  if (lw && !lp) return seed(L, part, slice_layout(ctx, lw, dim));
  if (lp && !lw) {
    const IrAttr *parent = slice_parent(lp, dim);
    return parent && seed(L, whole, parent);
  }
  if (lw && lp && lp != slice_layout(ctx, lw, dim)) {
    if (!expand) {
      fail_at(L, op, "the result of a reduce must have the slice of its operand's layout");
      return false;
    }
    IrValue *c = convert_operand(L, op, 0);
    return seed(L, c, slice_layout(ctx, lw, dim));
  }
  return false;
}

typedef struct Derive {
  Lay *L;
  bool again;
} Derive;

static bool visit_derive(IrOp *op, void *ud) {
  Derive *d = ud;
  if (derive(d->L, op)) d->again = true;
  return !d->L->failed;
}

static void derive_all(Lay *L, IrOp *k) {
  for (Derive d = {L, true}; d.again && !L->failed;) {
    d.again = false;
    ir_walk_pre(k, visit_derive, &d);
  }
}

/* }====================================================================== */

/* The unit of class c (bytes a thread holds contiguous along the fastest
** dim): the option's, else the row rule's (the file's head). */
static int64_t class_unit(Lay *L, uint32_t c, uint32_t rank, const int64_t *shape, int64_t eb,
                          int64_t warps) {
  if (L->unit > 0) return L->unit;
  bool row = !L->has_dot;
  for (uint32_t d = 0; d + 1 < rank && row; d++)
    row = shape[d] == 1;
  for (uint32_t j = 0; j < L->n && row; j++) { /* moved unchanged: loads and block arguments */
    const IrOp *def = L->vals[j]->def;
    if (root(L, j) == c) row = !def || def->kind == OP_TILEAS_TILED_LOAD;
  }
  return row && shape[rank - 1] * eb >= 64 * 32 * warps ? 8 : 16;
}

/* The blocked layout of value i's class: its values' largest extent per dim
** (a broadcast's [1, n] and [m, n] share one) and smallest element type. A
** predicate (i1: a compare's mask, held in registers, never a vector access)
** counts only in a class of predicates: a mask of a bf16 row would otherwise
** deal 16 elements a thread, two vectors of 16 bytes 32 bytes apart. */
static const IrAttr *class_blocked(Lay *L, uint32_t i, int64_t warps) {
  uint32_t c = root(L, i), rank = L->vals[i]->type->rank;
  int64_t shape[TAS_MAX_RANK], eb = 8, pb = 8, values = 0;
  for (uint32_t d = 0; d < rank; d++)
    shape[d] = 1;
  for (uint32_t j = 0; j < L->n; j++) {
    const IrType *t = L->vals[j]->type;
    if (root(L, j) != c || t->rank != rank) continue;
    for (uint32_t d = 0; d < rank; d++)
      if (t->shape[d] > shape[d]) shape[d] = t->shape[d];
    int pred = ir_type_bitwidth(t->elem) == 1;
    int64_t *m = pred ? &pb : &eb;
    values += !pred;
    if (tas_elem_bytes(t->elem) < *m) *m = tas_elem_bytes(t->elem);
  }
  if (!values) eb = pb;
  if (rank == 0 || rank > TAS_MAX_RANK) return plain_layout(L->base.r.ctx, "blocked", rank);
  return blocked_layout(L->base.r.ctx, rank, shape, warps, eb,
                        class_unit(L, c, rank, shape, eb, warps));
}

static IrResult assign_kernel(Rewriter *r, IrOp *k) {
  Lay *L = (Lay *)r;
  L->n = 0;
  L->has_dot = false;
  const IrAttr *opt = L->base.options ? ir_attr_dict_get(L->base.options, "unit") : NULL;
  L->unit = opt && opt->kind == IR_ATTR_INT ? opt->u.i : 0;
  while (L->unit & (L->unit - 1)) /* a power of two */
    L->unit &= L->unit - 1;
  ptrmap_free(&L->index); /* numbers are per kernel */
  ir_walk_pre(k, visit_split, L);
  ir_walk_pre(k, visit_collect, L);
  ir_walk_pre(k, visit_seed, L);
  ir_walk_pre(k, visit_unite, L);
  derive_all(L, k);
  /* the rest blocked, users first, deriving again after each */
  int64_t warps = kernel_spec(k).threads / 32;
  /* classes holding a slice's side of a relation (a reduce's result, an
  ** expand_dim's operand) after the others: the whole side decides them */
  bool *part = ir_calloc(L->n ? L->n : 1, sizeof *part);
  for (uint32_t i = 0; i < L->n; i++) {
    IrValue *v = L->vals[i];
    bool is_part = v->def && v->def->kind == OP_TILEAS_REDUCE;
    for (IrUse *u = v->uses; u && !is_part; u = u->next)
      is_part = u->owner->kind == OP_TILEAS_EXPAND_DIM;
    if (is_part) part[root(L, i)] = true;
  }
  for (int sweep = 0; sweep < 2; sweep++)
    for (uint32_t i = L->n; i-- > 0 && !L->failed;) {
      uint32_t c = root(L, i);
      if (L->of[c] || (sweep == 0 && part[c])) continue;
      L->of[c] = class_blocked(L, i, warps > 0 ? warps : 1);
      derive_all(L, k);
    }
  ir_free(part);
  if (L->failed) return IR_FAIL;
  /* every value gets its class's layout */
  for (uint32_t i = 0; i < L->n; i++) {
    IrValue *v = L->vals[i];
    const IrType *t = v->type;
    const IrAttr *l = L->of[root(L, i)];
    IrMemSpace sp = is_shared_layout(l)        ? IR_MS_SHARED
                    : t->space == IR_MS_SHARED ? IR_MS_RMEM
                                               : t->space;
    const IrType *nt = ir_type_tile_layout(r->ctx, t->elem, t->rank, t->shape, sp, l);
    if (nt != t) {
      v->type = nt;
      L->base.changed = true;
    }
  }
  return IR_OK;
}

IrResult pass_tileas_assign_layouts(IrOp *module, IrPassCtx *pc) {
  Lay L;
  IrResult res = tas_run(&L.base, sizeof L, module, pc, assign_kernel);
  ptrmap_free(&L.index);
  ir_free(L.vals);
  ir_free(L.up);
  ir_free(L.of);
  return res;
}
