/*
** tileas_layout.c -- tile layouts and scf slots as the tileas passes see them
** (tileas_layout.h).
*/
#include <string.h>

#include "../ir/checked.h"
#include "../dialects/dialects.h"
#include "tileas_layout.h"

bool tas_is_tile(const IrType *t) { return t && t->kind == IR_TY_TILE; }

const IrAttr *tas_layout_get(const IrType *t, const char *key) {
  return tas_is_tile(t) && t->layout ? ir_attr_dict_get(t->layout, key) : NULL;
}

int64_t tas_layout_int(const IrType *t, const char *key, int64_t dflt) {
  const IrAttr *a = tas_layout_get(t, key);
  return a && a->kind == IR_ATTR_INT ? a->u.i : dflt;
}

/* Layout dictionary l with entry `key` set to v (v NULL: removed). */
static const IrAttr *dict_with(IrContext *ctx, const IrAttr *l, const char *key, const IrAttr *v) {
  IrNamedAttr e[32];
  uint32_t n = 0;
  for (uint32_t i = 0; i < l->u.dict.n && n < 31; i++)
    if (strcmp(l->u.dict.entries[i].name, key) != 0) e[n++] = l->u.dict.entries[i];
  if (v) e[n++] = (IrNamedAttr){ir_intern_cstr(ctx, key), v};
  return ir_attr_dict(ctx, n, e);
}

const IrType *tas_layout_with(IrContext *ctx, const IrType *t, const char *key, const IrAttr *v) {
  return ir_type_tile_layout(ctx, t->elem, t->rank, t->shape, t->space, dict_with(ctx, t->layout, key, v));
}

const IrType *tas_with_elem(IrContext *ctx, const IrType *t, const IrType *elem) {
  return ir_type_tile_layout(ctx, elem, t->rank, t->shape, t->space, t->layout);
}

static void ints_of(const IrType *t, const char *key, int64_t *out) {
  const IrAttr *a = tas_layout_get(t, key);
  for (uint32_t i = 0; i < t->rank; i++)
    out[i] = a && a->kind == IR_ATTR_ARRAY && i < a->u.arr.n ? a->u.arr.elems[i]->u.i : 1;
}

void tas_cta(const IrType *t, int64_t *cta) { ints_of(t, "cta", cta); }
void tas_cta_repeat(const IrType *t, int64_t *rep) { ints_of(t, "cta_repeat", rep); }

/* The rank strides a split cta takes without a `cta_stride`: each dim's
** blocks after the dims before it (1 along a dim the split leaves whole). */
static void default_strides(uint32_t rank, const int64_t *cta, int64_t *stride) {
  int64_t s = 1;
  for (uint32_t i = 0; i < rank; i++) {
    stride[i] = cta[i] > 1 ? s : 1;
    if (!ck_mul(s, cta[i], &s)) s = 1; /* a layout's cta of no real kernel */
  }
}

void tas_cta_stride(const IrType *t, int64_t *stride) {
  int64_t cta[TAS_MAX_RANK];
  tas_cta(t, cta);
  if (tas_layout_get(t, "cta_stride")) {
    ints_of(t, "cta_stride", stride);
    for (uint32_t i = 0; i < t->rank; i++)
      if (cta[i] == 1) stride[i] = 1; /* (a whole dim has no block index) */
  } else {
    default_strides(t->rank, cta, stride);
  }
}

int64_t tas_cta_count(const IrType *t) {
  int64_t cta[TAS_MAX_RANK], n = 1;
  tas_cta(t, cta);
  for (uint32_t i = 0; i < t->rank; i++)
    if (!ck_mul(n, cta[i], &n)) return INT64_MAX; /* a layout's cta of no real kernel */
  return n;
}

bool tas_same_cta(const IrType *a, const IrType *b) {
  int64_t ca[TAS_MAX_RANK], cb[TAS_MAX_RANK], ra[TAS_MAX_RANK], rb[TAS_MAX_RANK];
  int64_t sa[TAS_MAX_RANK], sb[TAS_MAX_RANK];
  if (a->rank != b->rank) return false;
  tas_cta(a, ca);
  tas_cta(b, cb);
  tas_cta_repeat(a, ra);
  tas_cta_repeat(b, rb);
  tas_cta_stride(a, sa);
  tas_cta_stride(b, sb);
  size_t n = a->rank * sizeof(int64_t);
  return memcmp(ca, cb, n) == 0 && memcmp(ra, rb, n) == 0 && memcmp(sa, sb, n) == 0;
}

const IrType *tas_with_cta_stride(IrContext *ctx, const IrType *t, const int64_t *cta,
                                  const int64_t *stride) {
  bool trivial = true;
  for (uint32_t i = 0; i < t->rank; i++)
    trivial = trivial && cta[i] == 1;
  if (tas_layout_get(t, "cta_repeat")) t = tas_layout_with(ctx, t, "cta_repeat", NULL); /* a plain split */
  int64_t dflt[TAS_MAX_RANK], s[TAS_MAX_RANK];
  default_strides(t->rank, cta, dflt);
  bool plain = true;
  for (uint32_t i = 0; i < t->rank; i++) {
    s[i] = cta[i] == 1 ? 1 : stride ? stride[i] : dflt[i]; /* (NULL: the default) */
    plain = plain && (cta[i] == 1 || s[i] == dflt[i]);
  }
  /* absent means the default strides: a type whose strides are those says nothing */
  if (plain) {
    if (tas_layout_get(t, "cta_stride")) t = tas_layout_with(ctx, t, "cta_stride", NULL);
  } else {
    t = tas_layout_with(ctx, t, "cta_stride", ir_attr_int_array(ctx, t->rank, s));
  }
  if (trivial) /* absent means all 1: a type that says [1, 1] keeps saying it */
    return tas_cta_count(t) == 1 ? t : tas_layout_with(ctx, t, "cta", NULL);
  return tas_layout_with(ctx, t, "cta", ir_attr_int_array(ctx, t->rank, cta));
}

const IrType *tas_with_cta(IrContext *ctx, const IrType *t, const int64_t *cta) {
  return tas_with_cta_stride(ctx, t, cta, NULL);
}

static bool is_slice_dict(const IrAttr *l) {
  const IrAttr *k = ir_attr_dict_get(l, "kind");
  return k && k->kind == IR_ATTR_STR && strcmp(k->u.str.s, "slice") == 0;
}

bool tas_is_slice(const IrType *t) { return tas_is_tile(t) && t->layout && is_slice_dict(t->layout); }

/* The dictionary that holds a layout's CTA part: a slice's parent's. */
static const IrAttr *cta_holder(const IrAttr *l) {
  const IrAttr *parent = ir_attr_dict_get(l, "parent");
  return is_slice_dict(l) && parent && parent->kind == IR_ATTR_DICT ? parent : l;
}

const IrType *tas_with_cta_of(IrContext *ctx, const IrType *t, const IrType *like) {
  static const char *const keys[] = {"cta", "cta_repeat", "cta_stride"};
  if (!t->layout) return t;
  const IrAttr *holder = cta_holder(t->layout), *from = like->layout ? cta_holder(like->layout) : NULL, *h = holder;
  for (int i = 0; i < 3; i++) {
    const IrAttr *a = from ? ir_attr_dict_get(from, keys[i]) : NULL;
    if (a != ir_attr_dict_get(h, keys[i])) h = dict_with(ctx, h, keys[i], a); /* as like says it, or not */
  }
  if (h == holder) return t;
  const IrAttr *l = holder == t->layout ? h : dict_with(ctx, t->layout, "parent", h); /* a slice: its parent's */
  return ir_type_tile_layout(ctx, t->elem, t->rank, t->shape, t->space, l);
}

void tas_dot_split(int64_t m, int64_t n_, int64_t n, int64_t *sm, int64_t *sn) {
  for (int64_t chunk = 128; chunk >= 64; chunk /= 2) {
    int64_t s = m / chunk < 1 ? 1 : m / chunk > n ? n : m / chunk;
    while (n % s) s--;
    if (n_ % (n / s) == 0 && n_ / (n / s) >= 64) {
      *sm = s, *sn = n / s;
      return;
    }
  }
  *sm = *sn = 1; /* no legal split: every CTA computes the whole tile */
}

bool tas_elementwise(const IrOp *op) {
  if (op->nresults != 1 || !tas_is_tile(op->results[0].type)) return false;
  if (op->kind == OP_TILEAS_MATH) return true;
  return ir_op_in_dialect(op->kind, "arith");
}

int64_t tas_target(const IrOp *kernel) { return ir_attrs_TILE_KERNEL(kernel).target_spec; }

int64_t tas_elem_bytes(const IrType *elem) {
  uint32_t bits = ir_type_bitwidth(elem);
  return bits < 8 ? 1 : bits / 8;
}

/* {======================================================================
** Slots
** ======================================================================= */

static IrOp *terminator_of(IrOp *op, uint32_t region) {
  IrBlock *b = op->nregions > region ? op->regions[region].first : NULL;
  return b ? ir_block_terminator(b) : NULL;
}

static void add_value(TasSlot *s, IrValue *v) { s->values[s->nvalues++] = v; }

static void add_feed(TasSlot *s, IrOp *op, uint32_t index) {
  if (op && index < op->noperands) s->feeds[s->nfeeds++] = (TasUse){op, index};
}

static IrValue *block_arg(IrOp *op, uint32_t region, uint32_t i) {
  IrBlock *b = op->regions[region].first;
  return b && i < b->nargs ? b->args[i] : NULL;
}

/* Slot i of a loop-carried value of scf.for. */
static bool for_slot(IrOp *loop, uint32_t i, TasSlot *s) {
  IrValue *arg = block_arg(loop, 0, i + 1);
  if (!arg || i >= loop->nresults) return false;
  *s = (TasSlot){.owner = loop};
  add_value(s, arg);
  add_value(s, &loop->results[i]);
  add_feed(s, loop, 3 + i);
  add_feed(s, terminator_of(loop, 0), i);
  return true;
}

/* scf.while: before slot i (init, before argument, yield) or after slot i
** (condition operand, after argument, result). */
static bool while_slot(IrOp *w, bool after, uint32_t i, TasSlot *s) {
  IrValue *arg = block_arg(w, after, i);
  if (!arg) return false;
  *s = (TasSlot){.owner = w};
  add_value(s, arg);
  if (after) {
    if (i >= w->nresults) return false;
    add_value(s, &w->results[i]);
    add_feed(s, terminator_of(w, 0), i + 1);
  } else {
    add_feed(s, w, i);
    add_feed(s, terminator_of(w, 1), i);
  }
  return true;
}

static bool if_slot(IrOp *sif, uint32_t i, TasSlot *s) {
  if (i >= sif->nresults) return false;
  *s = (TasSlot){.owner = sif};
  add_value(s, &sif->results[i]);
  add_feed(s, terminator_of(sif, 0), i);
  add_feed(s, terminator_of(sif, 1), i);
  return true;
}

bool tas_slot_of_value(const IrValue *v, TasSlot *s) {
  if (v->def) {
    IrOp *op = v->def;
    switch (op->kind) {
    case OP_SCF_FOR: return for_slot(op, v->index, s);
    case OP_SCF_WHILE: return while_slot(op, true, v->index, s);
    case OP_SCF_IF: return if_slot(op, v->index, s);
    default: return false;
    }
  }
  IrOp *owner = ir_block_parent_op(v->block);
  if (!owner) return false;
  if (owner->kind == OP_SCF_FOR) return v->index > 0 && for_slot(owner, v->index - 1, s);
  if (owner->kind == OP_SCF_WHILE) return while_slot(owner, v->block == owner->regions[1].first, v->index, s);
  return false;
}

bool tas_slot_of_use(IrOp *op, uint32_t index, TasSlot *s) {
  IrOp *parent = ir_op_parent_op(op);
  switch (op->kind) {
  case OP_SCF_FOR: return index >= 3 && for_slot(op, index - 3, s);
  case OP_SCF_WHILE: return while_slot(op, false, index, s);
  case OP_SCF_CONDITION: return index >= 1 && parent && while_slot(parent, true, index - 1, s);
  case OP_SCF_YIELD:
    if (!parent) return false;
    if (parent->kind == OP_SCF_FOR) return for_slot(parent, index, s);
    if (parent->kind == OP_SCF_WHILE) return while_slot(parent, false, index, s);
    if (parent->kind == OP_SCF_IF) return if_slot(parent, index, s);
    return false;
  default: return false;
  }
}

bool tas_slot_at(IrOp *op, uint32_t i, TasSlot *s) {
  switch (op->kind) {
  case OP_SCF_FOR: return for_slot(op, i, s);
  case OP_SCF_IF: return if_slot(op, i, s);
  case OP_SCF_WHILE: {
    uint32_t nbefore = op->regions[0].first ? op->regions[0].first->nargs : 0;
    return i < nbefore ? while_slot(op, false, i, s) : while_slot(op, true, i - nbefore, s);
  }
  default: return false;
  }
}

/* op without operand `opd` and result `res` (UINT32_MAX: none; the result is
** unused): same kind and attributes, its regions moved. */
static IrOp *rebuild_without(IrContext *ctx, IrOp *op, uint32_t opd, uint32_t res) {
  IrValue **opds = ir_malloc((op->noperands + 1) * sizeof *opds);
  const IrType **types = ir_malloc((op->nresults + 1) * sizeof *types);
  uint32_t no = 0, nr = 0;
  for (uint32_t i = 0; i < op->noperands; i++)
    if (i != opd) opds[no++] = op->operands[i].value;
  for (uint32_t i = 0; i < op->nresults; i++)
    if (i != res) types[nr++] = op->results[i].type;
  IrOp *n = ir_op_create(ctx, op->kind, op->loc, no, opds, nr, types, op->nregions);
  ir_free(opds);
  ir_free(types);
  for (uint32_t i = 0; i < op->nattrs; i++)
    ir_op_set_attr(n, op->attrs[i].name, op->attrs[i].attr);
  ir_op_insert_before(op, n);
  for (uint32_t r = 0; r < op->nregions; r++)
    ir_region_take(&n->regions[r], &op->regions[r]);
  for (uint32_t i = 0, j = 0; i < op->nresults; i++)
    if (i != res) ir_value_replace_all_uses(&op->results[i], &n->results[j++]);
  ir_op_erase(op);
  return n;
}

void tas_drop_slot(IrContext *ctx, const TasSlot *s) {
  uint32_t opd = UINT32_MAX, res = UINT32_MAX;
  for (uint32_t i = 0; i < s->nfeeds; i++) {
    if (s->feeds[i].op == s->owner) opd = s->feeds[i].index;
    else ir_op_erase_operand(s->feeds[i].op, s->feeds[i].index);
  }
  for (uint32_t i = 0; i < s->nvalues; i++) {
    IrValue *v = s->values[i];
    if (v->def) res = v->index;
    else ir_block_erase_arg(v->block, v->index);
  }
  if (opd != UINT32_MAX || res != UINT32_MAX) rebuild_without(ctx, s->owner, opd, res);
}

/* }====================================================================== */

IrResult tas_run(TasPass *state, size_t size, IrOp *module, IrPassCtx *pc,
                 IrResult (*fn)(Rewriter *r, IrOp *k)) {
  memset(state, 0, size);
  rw_init(&state->r, pc->ctx);
  state->options = pc->options;
  const IrAttr *a = pc->options ? ir_attr_dict_get(pc->options, "max_iterations") : NULL;
  state->max_iterations = a && a->kind == IR_ATTR_INT ? a->u.i : 10;
  IrResult res = rw_each_kernel(&state->r, module, pc, fn);
  if (state->changed) pc->changed = true;
  return res;
}
