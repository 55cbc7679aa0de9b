/*
** lower_tile_scheduler_convert.c -- the 1:N conversion of work tiles in
** lower-tile-scheduler: a work tile becomes its fields (i32 and i1 values).
** Loops and branches that carry one carry the fields instead, bridged by
** builtin.unrealized_conversion_cast pairs (pack: fields -> work tile,
** unpack: work tile -> fields) that are folded away at the end.
*/
#include <stdlib.h>
#include <string.h>

#include "lower_tile_scheduler.h"

/* The fields each kind carries: the accessors derive the others (a whole
** tile starts at k 0 and is its only split). */
/* clang-format off */
static const uint8_t tile_fields[] = {SF_LINEAR, SF_M, SF_N, SF_L, SF_TILE_IDX, SF_K_COUNT, SF_VALID,
                                      SF_INC_PIPE};
static const uint8_t piece_fields[] = {SF_LINEAR, SF_TILE_IDX, SF_M, SF_N, SF_L,
                                       SF_K_START, SF_K_COUNT, SF_SPLIT, SF_EXPECTED,
                                       SF_VALID, SF_SEPARATE, SF_FINAL,
                                       SF_CUR_UNIT, SF_CUR_LO, SF_CUR_HI};
/* clang-format on */

const uint8_t *lts_carried(const IrType *t, uint32_t *n) {
  int k = cut_kind_index(t, CUT_SCHED_KIND_names);
  bool sk = k == K_SK || k == K_SM100;
  *n = sk ? sizeof piece_fields : sizeof tile_fields;
  return sk ? piece_fields : tile_fields;
}

static const IrType *field_type(Low *L, int f) {
  return f >= SF_VALID && f <= SF_INC_PIPE ? L->rw.i1 : L->rw.i32;
}

/* fields -> work tile, where the builder is. */
static IrValue *pack_values(Low *L, IrValue *const *fields, uint32_t n, const IrType *t) {
  IrOp *c = ir_build(&L->rw.b, OP_UNREALIZED_CAST, n, fields, 1, &t, 0);
  ptrmap_set(&L->packs, c, c);
  ir_opvec_push(&L->packlist, c);
  return &c->results[0];
}

/* work tile -> its carried fields, where the builder is. */
static IrOp *unpack(Low *L, IrValue *v) {
  uint32_t n;
  const uint8_t *fs = lts_carried(v->type, &n);
  const IrType *types[SF__COUNT];
  for (uint32_t i = 0; i < n; i++)
    types[i] = field_type(L, fs[i]);
  IrOp *c = ir_build(&L->rw.b, OP_UNREALIZED_CAST, 1, &v, n, types, 0);
  ir_opvec_push(&L->unpacks, c);
  return c;
}

typedef struct Vals {
  IrValue **v;
  const IrType **t;
  uint32_t n, cap;
} Vals;

static void vals_push(Vals *a, IrValue *v, const IrType *t) {
  if (a->n == a->cap) {
    a->cap = a->cap ? 2 * a->cap : 16;
    a->v = ir_realloc(a->v, a->cap * sizeof *a->v);
    a->t = ir_realloc(a->t, a->cap * sizeof *a->t);
  }
  a->v[a->n] = v;
  a->t[a->n++] = t;
}

static void vals_free(Vals *a) {
  ir_free(a->v);
  ir_free(a->t);
}

/* The types of t expanded: a work tile type becomes its fields'. */
static void expand_type(Low *L, Vals *out, const IrType *t) {
  if (!lts_is_wti(t)) {
    vals_push(out, NULL, t);
    return;
  }
  uint32_t n;
  const uint8_t *fs = lts_carried(t, &n);
  for (uint32_t i = 0; i < n; i++)
    vals_push(out, NULL, field_type(L, fs[i]));
}

/* Operands of op expanded, unpacking work tiles just before op. */
static void expand_operands(Low *L, IrOp *op, Vals *out) {
  ir_builder_before(&L->rw.b, op);
  L->rw.b.loc = op->loc;
  for (uint32_t i = 0; i < op->noperands; i++) {
    IrValue *v = op->operands[i].value;
    if (!lts_is_wti(v->type)) {
      vals_push(out, v, v->type);
      continue;
    }
    IrOp *u = unpack(L, v);
    for (uint32_t j = 0; j < u->nresults; j++)
      vals_push(out, &u->results[j], u->results[j].type);
  }
}

/* Values old[0..n) are replaced by new ones (a work tile by a pack of its
** fields, built where the builder is); returns how many new values were used. */
static uint32_t rebind(Low *L, IrValue *old, IrValue **nv) {
  if (!lts_is_wti(old->type)) {
    ir_value_replace_all_uses(old, nv[0]);
    return 1;
  }
  uint32_t n;
  lts_carried(old->type, &n);
  ir_value_replace_all_uses(old, pack_values(L, nv, n, old->type));
  return n;
}

/* switch_by_executor's operand_segments after expansion. */
static void fix_segments(Low *L, IrOp *old, IrOp *op) {
  IrAttrList segs = ir_attrs_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR(old).operand_segments;
  int64_t seg[CUT_MAX_CASES];
  uint32_t at = 0, n = segs.n < CUT_MAX_CASES ? segs.n : CUT_MAX_CASES;
  for (uint32_t i = 0; i < n; i++) {
    int64_t len = ir_attr_list_int(segs, i), w = 0;
    for (int64_t j = 0; j < len && at < old->noperands; j++, at++) {
      uint32_t k = 1;
      if (lts_is_wti(old->operands[at].value->type)) lts_carried(old->operands[at].value->type, &k);
      w += k;
    }
    seg[i] = w;
  }
  ir_op_set_attr(op, "operand_segments", ir_attr_int_array(L->rw.ctx, n, seg));
}

/* Rebuild a region op whose operands, results or block arguments include work
** tiles: same kind and attributes, fields instead of work tiles, its blocks
** moved into the new op. */
static void expand_region_op(Low *L, IrOp *op) {
  Vals opds = {0}, res = {0};
  expand_operands(L, op, &opds);
  for (uint32_t i = 0; i < op->nresults; i++)
    expand_type(L, &res, op->results[i].type);
  IrOp *n = ir_op_create(L->rw.ctx, op->kind, op->loc, opds.n, opds.v, res.n, res.t, op->nregions);
  for (uint32_t i = 0; i < op->nattrs; i++)
    ir_op_set_attr(n, op->attrs[i].name, op->attrs[i].attr);
  if (op->kind == OP_CUTLASS_PIPELINE_SWITCH_BY_EXECUTOR) fix_segments(L, op, n);
  ir_op_insert_before(op, n);
  for (uint32_t r = 0; r < op->nregions; r++)
    for (IrBlock *b = op->regions[r].first; b; b = b->next) {
      Vals at = {0};
      IrBlock *nb = ir_block_create(L->rw.ctx);
      ir_region_append_block(&n->regions[r], nb);
      for (uint32_t i = 0; i < b->nargs; i++)
        expand_type(L, &at, b->args[i]->type);
      IrValue **args = ir_calloc(at.n + 1, sizeof *args);
      for (uint32_t i = 0; i < at.n; i++)
        args[i] = ir_block_add_arg(L->rw.ctx, nb, at.t[i]);
      ir_builder_at_end(&L->rw.b, nb);
      for (uint32_t i = 0, k = 0; i < b->nargs; i++)
        k += rebind(L, b->args[i], args + k);
      while (b->first) {
        IrOp *o = b->first;
        ir_op_unlink(o);
        ir_block_append(nb, o);
      }
      ir_free(args);
      vals_free(&at);
    }
  ir_builder_after(&L->rw.b, n);
  for (uint32_t i = 0, k = 0; i < op->nresults; i++) {
    IrValue *nv[SF__COUNT];
    uint32_t want = 1;
    if (lts_is_wti(op->results[i].type)) lts_carried(op->results[i].type, &want);
    for (uint32_t j = 0; j < want; j++)
      nv[j] = &n->results[k + j];
    k += rebind(L, &op->results[i], nv);
  }
  ir_op_erase(op);
  vals_free(&opds);
  vals_free(&res);
}

/* A terminator yielding work tiles yields their fields. */
static void expand_terminator(Low *L, IrOp *op) {
  Vals opds = {0};
  expand_operands(L, op, &opds);
  ir_op_set_operands(op, opds.n, opds.v);
  vals_free(&opds);
}

static bool has_wti(const IrOp *op) {
  for (uint32_t i = 0; i < op->noperands; i++)
    if (lts_is_wti(op->operands[i].value->type)) return true;
  for (uint32_t i = 0; i < op->nresults; i++)
    if (lts_is_wti(op->results[i].type)) return true;
  for (uint32_t r = 0; r < op->nregions; r++)
    for (IrBlock *b = op->regions[r].first; b; b = b->next)
      for (uint32_t i = 0; i < b->nargs; i++)
        if (lts_is_wti(b->args[i]->type)) return true;
  return false;
}

bool lts_collect_op(IrOp *op, void *ud) {
  LtsCollect *c = ud;
  if (lts_is_sched_op(op) && !lts_is_mods_op(op)) {
    ir_opvec_push(&c->sched, op);
  } else if (has_wti(op)) {
    if (ir_op_info(op->kind)->traits & T_TERMINATOR)
      ir_opvec_push(&c->terms, op);
    else if (op->nregions)
      ir_opvec_push(&c->regions, op);
  }
  return true;
}

void lts_expand(Low *L, LtsCollect *c) {
  for (size_t i = 0; i < c->regions.n; i++)
    expand_region_op(L, c->regions.v[i]);
  for (size_t i = 0; i < c->terms.n; i++)
    expand_terminator(L, c->terms.v[i]);
}

IrValue *lts_pack(Low *L, const SWork *w, const IrType *t) {
  IrValue *nv[SF__COUNT];
  uint32_t n;
  const uint8_t *fs = lts_carried(t, &n);
  for (uint32_t i = 0; i < n; i++)
    nv[i] = st_materialize(LTS_STAGE(L), w->f[fs[i]]);
  return pack_values(L, nv, n, t);
}

bool lts_fields_of(Low *L, IrOp *user, IrValue *v, SWork *w) {
  memset(w, 0, sizeof *w);
  IrOp *p = v->def;
  if (!p || !ptrmap_get(&L->packs, p)) {
    ir_op_error(user, "its work tile does not come from a scheduler op");
    return false;
  }
  uint32_t n;
  const uint8_t *fs = lts_carried(v->type, &n);
  for (uint32_t i = 0; i < n && i < p->noperands; i++)
    w->f[fs[i]] = stage_ir_value(p->operands[i].value);
  return true;
}

/* Unpacks of packs become the pack's operands; then dead casts go. */
void lts_fold_casts(Low *L) {
  for (size_t i = 0; i < L->unpacks.n; i++) {
    IrOp *u = L->unpacks.v[i], *p = u->operands[0].value->def;
    if (!p || !ptrmap_get(&L->packs, p)) continue;
    for (uint32_t j = 0; j < u->nresults && j < p->noperands; j++)
      ir_value_replace_all_uses(&u->results[j], p->operands[j].value);
    ir_op_erase(u);
  }
  for (size_t i = 0; i < L->packlist.n; i++) {
    IrOp *p = L->packlist.v[i];
    if (!ir_value_has_uses(&p->results[0])) ir_op_erase(p);
  }
}
