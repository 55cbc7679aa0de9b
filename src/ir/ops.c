/*
** ops.c -- operations, values and their use lists, blocks, regions, linking,
** erasure, replace-all-uses, cloning and walks.
*/
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "ir_impl.h"

/* {======================================================================
** Use lists
** ======================================================================= */

/* Count a change to the IR (passes report "changed" from it). */
static void edited(const IrOp *op) { ir_op_context(op)->edits++; }

uint64_t ir_context_edits(const IrContext *ctx) { return ctx->edits; }

/* Link node last into list: the lists of first/last and prev/next/parent
** pointers of blocks in a region and of ops in a block. */
#define LINK_LAST(list, node)                                                                      \
  do {                                                                                             \
    (node)->parent = (list);                                                                       \
    (node)->prev = (list)->last;                                                                   \
    (node)->next = NULL;                                                                           \
    if ((list)->last) (list)->last->next = (node);                                                 \
    else (list)->first = (node);                                                                   \
    (list)->last = (node);                                                                         \
  } while (0)

static void use_link(IrUse *u, IrValue *v) {
  edited(u->owner);
  u->value = v;
  if (!v) return;
  u->next = v->uses;
  u->pprev = &v->uses;
  if (v->uses) v->uses->pprev = &u->next;
  v->uses = u;
}

static void use_unlink(IrUse *u) {
  if (!u->value) return;
  edited(u->owner);
  *u->pprev = u->next;
  if (u->next) u->next->pprev = u->pprev;
  u->next = NULL;
  u->pprev = NULL;
  u->value = NULL;
}

bool ir_value_has_uses(const IrValue *v) { return v->uses != NULL; }

uint32_t ir_value_num_uses(const IrValue *v) {
  uint32_t n = 0;
  for (IrUse *u = v->uses; u; u = u->next) n++;
  return n;
}

bool ir_op_results_unused(const IrOp *op) {
  for (uint32_t i = 0; i < op->nresults; i++)
    if (op->results[i].uses) return false;
  return true;
}

void ir_value_replace_all_uses(IrValue *from, IrValue *to) {
  assert(from != to);
  while (from->uses) {
    IrUse *u = from->uses;
    use_unlink(u);
    use_link(u, to);
  }
}

/* }====================================================================== */

/* {======================================================================
** Operations
** ======================================================================= */

/* Each op remembers its context through a hidden header before it. */
typedef struct OpHeader {
  IrContext *ctx;
  _Alignas(16) IrOp op;
} OpHeader;

IrContext *ir_op_context(const IrOp *op) {
  const OpHeader *h = (const OpHeader *)((const char *)op - offsetof(OpHeader, op));
  return h->ctx;
}

IrOp *ir_op_create(IrContext *ctx, IrOpKind kind, IrLoc loc, uint32_t noperands,
                   IrValue *const *operands, uint32_t nresults, const IrType *const *result_types,
                   uint32_t nregions) {
  assert(kind >= 0 && kind < OP__COUNT);
  OpHeader *h = arena_alloc(&ctx->arena, sizeof *h);
  h->ctx = ctx;
  IrOp *op = &h->op;
  op->kind = kind;
  op->loc = loc;
  op->noperands = op->cap_operands = noperands;
  if (noperands) {
    op->operands = arena_alloc(&ctx->arena, noperands * sizeof(IrUse));
    for (uint32_t i = 0; i < noperands; i++) {
      op->operands[i].owner = op;
      op->operands[i].index = i;
      use_link(&op->operands[i], operands ? operands[i] : NULL);
    }
  }
  op->nresults = nresults;
  if (nresults) {
    op->results = arena_alloc(&ctx->arena, nresults * sizeof(IrValue));
    for (uint32_t i = 0; i < nresults; i++) {
      op->results[i].type = result_types[i];
      op->results[i].def = op;
      op->results[i].index = i;
    }
  }
  op->nregions = nregions;
  if (nregions) {
    op->regions = arena_alloc(&ctx->arena, nregions * sizeof(IrRegion));
    for (uint32_t i = 0; i < nregions; i++) op->regions[i].parent = op;
  }
  return op;
}

const char *ir_op_name(const IrOp *op) { return ir_op_info(op->kind)->name; }

void ir_op_set_operand(IrOp *op, uint32_t i, IrValue *v) {
  assert(i < op->noperands);
  use_unlink(&op->operands[i]);
  use_link(&op->operands[i], v);
}

/* Operand arrays move when they grow: relink every use to its new address. */
static void reserve_operands(IrOp *op, uint32_t n) {
  if (n <= op->cap_operands) return;
  uint32_t ncap = op->cap_operands ? op->cap_operands * 2 : 4;
  while (ncap < n) ncap *= 2;
  IrUse *nu = arena_alloc(ir_arena(ir_op_context(op)), ncap * sizeof(IrUse));
  for (uint32_t i = 0; i < op->noperands; i++) {
    IrValue *v = op->operands[i].value;
    use_unlink(&op->operands[i]);
    nu[i].owner = op;
    nu[i].index = i;
    use_link(&nu[i], v);
  }
  op->operands = nu;
  op->cap_operands = ncap;
}

void ir_op_set_operands(IrOp *op, uint32_t n, IrValue *const *vals) {
  for (uint32_t i = 0; i < op->noperands; i++) use_unlink(&op->operands[i]);
  op->noperands = 0;
  reserve_operands(op, n);
  for (uint32_t i = 0; i < n; i++) {
    op->operands[i].owner = op;
    op->operands[i].index = i;
    use_link(&op->operands[i], vals[i]);
  }
  op->noperands = n;
}

void ir_op_append_operand(IrOp *op, IrValue *v) {
  reserve_operands(op, op->noperands + 1);
  IrUse *u = &op->operands[op->noperands];
  u->owner = op;
  u->index = op->noperands++;
  use_link(u, v);
}

void ir_op_erase_operand(IrOp *op, uint32_t i) {
  assert(i < op->noperands);
  uint32_t n = op->noperands;
  IrValue **vals = ir_malloc(n * sizeof *vals);
  uint32_t m = 0;
  for (uint32_t j = 0; j < n; j++)
    if (j != i) vals[m++] = op->operands[j].value;
  ir_op_set_operands(op, m, vals);
  ir_free(vals);
}

/* }====================================================================== */

/* {======================================================================
** Attributes on ops (sorted by interned name)
** ======================================================================= */

const IrAttr *ir_op_attr(const IrOp *op, const char *name) {
  for (uint32_t i = 0; i < op->nattrs; i++)
    if (strcmp(op->attrs[i].name, name) == 0) return op->attrs[i].attr;
  return NULL;
}

void ir_op_set_attrs_of_dict(IrOp *op, const IrAttr *dict) {
  if (op->nattrs || !dict->u.dict.n) { /* the general way */
    for (uint32_t i = 0; i < dict->u.dict.n; i++)
      ir_op_set_attr(op, dict->u.dict.entries[i].name, dict->u.dict.entries[i].attr);
    return;
  }
  IrContext *ctx = ir_op_context(op);
  uint32_t n = dict->u.dict.n; /* interned and sorted by name, as an op keeps them */
  op->attrs = arena_alloc(&ctx->arena, n * sizeof *op->attrs);
  memcpy(op->attrs, dict->u.dict.entries, n * sizeof *op->attrs);
  op->nattrs = op->cap_attrs = n;
  ctx->edits++;
}

void ir_op_set_attr(IrOp *op, const char *name, const IrAttr *a) {
  IrContext *ctx = ir_op_context(op);
  name = ir_intern_cstr(ctx, name);
  uint32_t i = 0;
  while (i < op->nattrs && strcmp(op->attrs[i].name, name) < 0) i++;
  bool present = i < op->nattrs && op->attrs[i].name == name;
  if (present ? op->attrs[i].attr != a : a != NULL) ctx->edits++;
  if (!a) {
    if (present) {
      memmove(&op->attrs[i], &op->attrs[i + 1], (op->nattrs - i - 1) * sizeof(IrNamedAttr));
      op->nattrs--;
    }
    return;
  }
  if (present) {
    op->attrs[i].attr = a;
    return;
  }
  if (op->nattrs == op->cap_attrs) {
    uint32_t ncap = op->cap_attrs ? op->cap_attrs * 2 : 4;
    IrNamedAttr *na = arena_alloc(&ctx->arena, ncap * sizeof *na);
    if (op->nattrs) memcpy(na, op->attrs, op->nattrs * sizeof *na);
    op->attrs = na;
    op->cap_attrs = ncap;
  }
  memmove(&op->attrs[i + 1], &op->attrs[i], (op->nattrs - i) * sizeof(IrNamedAttr));
  op->attrs[i] = (IrNamedAttr){name, a};
  op->nattrs++;
}




/* }====================================================================== */

/* {======================================================================
** Blocks and regions
** ======================================================================= */

IrBlock *ir_block_create(IrContext *ctx) { return arena_alloc(&ctx->arena, sizeof(IrBlock)); }

IrValue *ir_block_add_arg(IrContext *ctx, IrBlock *b, const IrType *t) {
  if (b->nargs == b->cap_args) {
    uint32_t ncap = b->cap_args ? b->cap_args * 2 : 4;
    IrValue **na = arena_alloc(&ctx->arena, ncap * sizeof *na);
    if (b->nargs) memcpy(na, b->args, b->nargs * sizeof *na);
    b->args = na;
    b->cap_args = ncap;
  }
  IrValue *v = arena_alloc(&ctx->arena, sizeof *v);
  v->type = t;
  v->block = b;
  v->index = b->nargs;
  b->args[b->nargs++] = v;
  return v;
}

void ir_block_erase_arg(IrBlock *b, uint32_t i) {
  assert(i < b->nargs && !b->args[i]->uses);
  memmove(b->args + i, b->args + i + 1, (b->nargs - i - 1) * sizeof *b->args);
  b->nargs--;
  for (uint32_t j = i; j < b->nargs; j++)
    b->args[j]->index = j;
  IrOp *owner = ir_block_parent_op(b);
  if (owner) edited(owner);
}

void ir_region_take(IrRegion *dst, IrRegion *src) {
  for (IrBlock *b = src->first; b; b = b->next)
    b->parent = dst;
  if (!src->first) return;
  if (dst->last) {
    dst->last->next = src->first;
    src->first->prev = dst->last;
  } else {
    dst->first = src->first;
  }
  dst->last = src->last;
  src->first = src->last = NULL;
  if (dst->parent) edited(dst->parent);
}

void ir_region_append_block(IrRegion *r, IrBlock *b) {
  assert(!b->parent);
  LINK_LAST(r, b);
}

IrBlock *ir_region_entry(IrRegion *r) { return r->first; }

IrBlock *ir_region_ensure_block(IrContext *ctx, IrRegion *r) {
  if (!r->first) ir_region_append_block(r, ir_block_create(ctx));
  return r->first;
}

IrOp *ir_block_terminator(IrBlock *b) {
  if (b->last && (ir_op_info(b->last->kind)->traits & T_TERMINATOR)) return b->last;
  return NULL;
}

IrOp *ir_block_parent_op(const IrBlock *b) { return b && b->parent ? b->parent->parent : NULL; }
IrOp *ir_op_parent_op(const IrOp *op) { return ir_block_parent_op(op->parent); }

IrOp *ir_op_ancestor(const IrOp *op, IrOpKind kind) {
  for (IrOp *p = ir_op_parent_op(op); p; p = ir_op_parent_op(p))
    if (p->kind == kind) return p;
  return NULL;
}

bool ir_op_is_ancestor(const IrOp *anc, const IrOp *op) {
  for (const IrOp *p = op; p; p = ir_op_parent_op(p))
    if (p == anc) return true;
  return false;
}

/* }====================================================================== */

/* {======================================================================
** Linking ops into blocks
** ======================================================================= */

void ir_block_append(IrBlock *b, IrOp *op) {
  assert(!op->parent);
  edited(op);
  LINK_LAST(b, op);
}

void ir_block_prepend(IrBlock *b, IrOp *op) {
  if (b->first) ir_op_insert_before(b->first, op);
  else ir_block_append(b, op);
}

void ir_op_insert_before(IrOp *pos, IrOp *op) {
  assert(!op->parent && pos->parent);
  edited(op);
  IrBlock *b = pos->parent;
  op->parent = b;
  op->next = pos;
  op->prev = pos->prev;
  if (pos->prev) pos->prev->next = op;
  else b->first = op;
  pos->prev = op;
}

void ir_op_insert_after(IrOp *pos, IrOp *op) {
  if (pos->next) ir_op_insert_before(pos->next, op);
  else ir_block_append(pos->parent, op);
}

void ir_op_unlink(IrOp *op) {
  IrBlock *b = op->parent;
  if (!b) return;
  edited(op);
  if (op->prev) op->prev->next = op->next;
  else b->first = op->next;
  if (op->next) op->next->prev = op->prev;
  else b->last = op->prev;
  op->prev = op->next = NULL;
  op->parent = NULL;
}

void ir_op_move_before(IrOp *op, IrOp *pos) {
  ir_op_unlink(op);
  ir_op_insert_before(pos, op);
}

/* Drop the operands of op and of everything nested in it. */
static void drop_all_uses(IrOp *op) {
  for (uint32_t i = 0; i < op->noperands; i++) use_unlink(&op->operands[i]);
  for (uint32_t r = 0; r < op->nregions; r++)
    for (IrBlock *b = op->regions[r].first; b; b = b->next)
      for (IrOp *o = b->first; o; o = o->next) drop_all_uses(o);
}

static bool mark_erased(IrOp *op, void *ud) {
  (void)ud;
  op->erased = true;
  return true;
}

void ir_op_erase(IrOp *op) {
  drop_all_uses(op);
  assert(ir_op_results_unused(op) && "erasing an op whose results are still used");
  ir_op_unlink(op);
  ir_walk_pre(op, mark_erased, NULL); /* memory stays in the arena until the context dies */
}

/* }====================================================================== */

/* {======================================================================
** Cloning
** ======================================================================= */

void ir_mapping_init(IrMapping *m) { memset(m, 0, sizeof *m); }
void ir_mapping_free(IrMapping *m) { ptrmap_free(&m->m); }
void ir_mapping_set(IrMapping *m, const IrValue *from, IrValue *to) { ptrmap_set(&m->m, from, to); }
IrValue *ir_mapping_get(IrMapping *m, const IrValue *from) { return ptrmap_get(&m->m, from); }

static IrValue *mapped(IrMapping *map, IrValue *v) {
  IrValue *m = v ? ir_mapping_get(map, v) : NULL;
  return m ? m : v;
}

void ir_region_clone_into(IrContext *ctx, IrRegion *src, IrRegion *dst, IrMapping *map) {
  assert(!dst->first);
  /* Create blocks and arguments first so that later blocks can be referenced. */
  for (IrBlock *b = src->first; b; b = b->next) {
    IrBlock *nb = ir_block_create(ctx);
    for (uint32_t i = 0; i < b->nargs; i++)
      ir_mapping_set(map, b->args[i], ir_block_add_arg(ctx, nb, b->args[i]->type));
    ir_region_append_block(dst, nb);
  }
  IrBlock *nb = dst->first;
  for (IrBlock *b = src->first; b; b = b->next, nb = nb->next)
    for (IrOp *o = b->first; o; o = o->next) ir_block_append(nb, ir_op_clone(ctx, o, map));
}

IrOp *ir_op_clone(IrContext *ctx, IrOp *op, IrMapping *map) {
  IrValue *stackbuf[16];
  IrValue **opds = op->noperands <= 16 ? stackbuf : ir_malloc(op->noperands * sizeof *opds);
  const IrType *tstack[16];
  const IrType **rtypes = op->nresults <= 16 ? tstack : ir_malloc(op->nresults * sizeof *rtypes);
  for (uint32_t i = 0; i < op->noperands; i++) opds[i] = mapped(map, op->operands[i].value);
  for (uint32_t i = 0; i < op->nresults; i++) rtypes[i] = op->results[i].type;
  IrOp *c = ir_op_create(ctx, op->kind, op->loc, op->noperands, opds, op->nresults, rtypes,
                         op->nregions);
  if (opds != stackbuf) ir_free(opds);
  if (rtypes != tstack) ir_free(rtypes);
  for (uint32_t i = 0; i < op->nattrs; i++) ir_op_set_attr(c, op->attrs[i].name, op->attrs[i].attr);
  for (uint32_t i = 0; i < op->nresults; i++) ir_mapping_set(map, &op->results[i], &c->results[i]);
  for (uint32_t r = 0; r < op->nregions; r++)
    ir_region_clone_into(ctx, &op->regions[r], &c->regions[r], map);
  return c;
}

/* }====================================================================== */

/* {======================================================================
** Walks
** ======================================================================= */

bool ir_walk_pre(IrOp *root, IrWalkFn fn, void *ud) {
  if (!fn(root, ud)) return false;
  for (uint32_t r = 0; r < root->nregions; r++)
    for (IrBlock *b = root->regions[r].first; b; b = b->next)
      IR_FOR_EACH_OP(o, b) {
        if (!ir_walk_pre(o, fn, ud)) return false;
      }
  return true;
}

bool ir_walk_post(IrOp *root, IrWalkFn fn, void *ud) {
  for (uint32_t r = 0; r < root->nregions; r++)
    for (IrBlock *b = root->regions[r].first; b; b = b->next)
      IR_FOR_EACH_OP(o, b) {
        if (!ir_walk_post(o, fn, ud)) return false;
      }
  return fn(root, ud);
}

/* }====================================================================== */

/* {======================================================================
** Effects
** ======================================================================= */

uint32_t ir_op_effects(const IrOp *op) {
  const IrOpInfo *info = ir_op_info(op->kind);
  uint32_t e = info->effects;
  if (info->traits & T_RECURSIVE)
    for (uint32_t r = 0; r < op->nregions; r++)
      for (IrBlock *b = op->regions[r].first; b; b = b->next)
        for (IrOp *o = b->first; o; o = o->next) e |= ir_op_effects(o);
  return e;
}

bool ir_op_is_pure(const IrOp *op) {
  const IrOpInfo *info = ir_op_info(op->kind);
  if (info->traits & (T_TERMINATOR | T_SYMBOL)) return false;
  if (op->kind == OP_MODULE) return false;
  return ir_op_effects(op) == 0;
}

/* Removable when unused: pure, or droppable (its effects are only observations). A
** recursive op is removable when everything inside is (terminators aside). */
static bool nested_removable(const IrOp *op) {
  for (uint32_t r = 0; r < op->nregions; r++)
    for (IrBlock *b = op->regions[r].first; b; b = b->next)
      for (IrOp *o = b->first; o; o = o->next) {
        const IrOpInfo *oi = ir_op_info(o->kind);
        if (oi->traits & T_TERMINATOR) continue;
        if (!ir_op_is_removable(o)) return false;
      }
  return true;
}

bool ir_op_is_removable(const IrOp *op) {
  const IrOpInfo *info = ir_op_info(op->kind);
  if (info->traits & (T_TERMINATOR | T_SYMBOL | T_ISOLATED)) return false;
  const IrAttr *vol = ir_op_attr(op, "volatile"); /* a volatile access is always kept */
  if (vol && vol->kind == IR_ATTR_BOOL && vol->u.b) return false;
  if (info->traits & T_DROPPABLE) return true;
  if (info->effects) return false;
  if (info->traits & T_RECURSIVE) return nested_removable(op);
  return true;
}

/* }====================================================================== */
