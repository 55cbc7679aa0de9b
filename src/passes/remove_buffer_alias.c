/*
** remove_buffer_alias.c -- the `tileas-remove-buffer-alias` pass: every use of a shared tensor names the
** tensor itself, so later passes see one allocation behind each use.
**
** A buffer is a shared tile. Its own values are the results of alloc_tensor,
** tiled_load, convert_layout and extract_slice (a static view of its operand);
** any other buffer value is an alias:
**
**   arith.select c, a, b   each user U (with no buffer result) becomes
**                          scf.if c { U(a) } else { U(b) }; a select of one
**                          buffer twice, or on a constant, is that buffer
**   loop-carried buffers   the slots of scf.for / scf.while / scf.if joined
**                          through their feeds: when everything that enters
**                          them from outside is one buffer B, their values are
**                          B and the slots go; two different buffers (a buffer
**                          swapped by a loop's yield) is "Yielded alias not
**                          implemented yet", two from an scf.if's branches
**                          an unsupported op
**   anything else          "RemoveBufferAlias: not supported operation type"
**
** A select whose users are aliases waits until they are gone, so the pass
** runs in rounds to a fixed point; past `max_iterations` rounds (option,
** default 10) it fails with "TileASRemoveBufferAliasPass failed to converge".
** Each round checks every alias before it changes anything.
*/
#include <string.h>

#include "tileas_layout.h"

typedef TasPass Alias;

static bool is_buffer(const IrType *t) { return tas_is_tile(t) && t->space == IR_MS_SHARED; }

static bool is_alias(const IrValue *v) {
  if (!is_buffer(v->type)) return false;
  if (!v->def) return true;
  IrOpKind k = v->def->kind;
  /* a static slice (a consumer's rows of a ring) names its tensor through its operand */
  return k != OP_TILEAS_ALLOC_TENSOR && k != OP_TILEAS_TILED_LOAD && k != OP_TILEAS_CONVERT_LAYOUT &&
         k != OP_TILEAS_EXTRACT_SLICE;
}

/* The op an alias comes from: its definition, or the op owning its block. */
static IrOp *origin(const IrValue *v) { return v->def ? v->def : ir_block_parent_op(v->block); }

static bool collect_visit(IrOp *op, void *ud) {
  IrOpVec *out = ud;
  bool found = false;
  for (uint32_t i = 0; i < op->nresults; i++)
    found = found || is_alias(&op->results[i]);
  for (uint32_t r = 0; r < op->nregions; r++)
    for (IrBlock *b = op->regions[r].first; b; b = b->next)
      for (uint32_t i = 0; i < b->nargs; i++)
        found = found || (op->kind != OP_TILE_KERNEL && is_alias(b->args[i]));
  if (found) ir_opvec_push(out, op);
  return true;
}

/* {======================================================================
** Loop-carried buffers
** ======================================================================= */

typedef struct Group {
  TasSlot slots[64];
  uint32_t n;
  IrValue *outside[2]; /* the different values entering from outside (2: too many) */
  uint32_t nout;
} Group;

static bool in_group(const Group *g, const IrValue *v) {
  for (uint32_t i = 0; i < g->n; i++)
    for (uint32_t j = 0; j < g->slots[i].nvalues; j++)
      if (g->slots[i].values[j] == v) return true;
  return false;
}

/* The slots joined to the slot of v through feeds that are slot values. */
static bool group_of(IrValue *v, Group *g) {
  memset(g, 0, sizeof *g);
  if (!tas_slot_of_value(v, &g->slots[0])) return false;
  g->n = 1;
  for (uint32_t s = 0; s < g->n; s++)
    for (uint32_t f = 0; f < g->slots[s].nfeeds; f++) {
      TasUse use = g->slots[s].feeds[f];
      IrValue *x = use.op->operands[use.index].value;
      if (in_group(g, x)) continue;
      TasSlot next;
      if (is_alias(x) && tas_slot_of_value(x, &next) && g->n < 64) {
        g->slots[g->n++] = next;
        continue;
      }
      bool seen = false;
      for (uint32_t i = 0; i < g->nout; i++)
        seen = seen || g->outside[i] == x;
      if (!seen && g->nout < 2) g->outside[g->nout++] = x;
    }
  return true;
}

/* Is the group one buffer entering from outside? Else the error: at the
** yield of its first loop (what carries a second buffer around), or at the
** scf.if whose branches give two. */
static bool check_group(const Group *g) {
  if (g->nout == 1) return true;
  for (uint32_t i = 0; i < g->n; i++) {
    IrOp *owner = g->slots[i].owner;
    if (owner->kind == OP_SCF_IF) continue;
    IrBlock *body = owner->regions[owner->kind == OP_SCF_WHILE].first;
    ir_op_error(body && body->last ? body->last : owner, "Yielded alias not implemented yet");
    return false;
  }
  ir_op_error(g->slots[0].owner, "RemoveBufferAlias: not supported operation type");
  return false;
}

/* Slots of buffers whose values are all unused go. */
static bool drop_dead_slots(Alias *a, IrOp *root);

static bool drop_visit(IrOp *op, void *ud) {
  Alias *a = ud;
  TasSlot s;
  for (uint32_t i = 0; tas_slot_at(op, i, &s); i++) {
    bool dead = is_buffer(s.values[0]->type);
    for (uint32_t j = 0; j < s.nvalues; j++)
      dead = dead && !ir_value_has_uses(s.values[j]);
    if (dead) {
      tas_drop_slot(a->r.ctx, &s);
      a->changed = true;
      return false; /* the walk restarts: op may have been rebuilt */
    }
  }
  return true;
}

static bool drop_dead_slots(Alias *a, IrOp *root) {
  while (!ir_walk_pre(root, drop_visit, a)) {
  }
  return true;
}

static void collapse_group(Alias *a, const Group *g) {
  for (uint32_t i = 0; i < g->n; i++)
    for (uint32_t j = 0; j < g->slots[i].nvalues; j++)
      ir_value_replace_all_uses(g->slots[i].values[j], g->outside[0]);
  a->changed = true;
}

/* }====================================================================== */

/* {======================================================================
** arith.select of buffers
** ======================================================================= */

/* Does op feed a loop-carried slot, or make another alias? Then the select waits. */
static bool waits_for(IrOp *user) {
  if (user->kind == OP_SCF_YIELD || user->kind == OP_SCF_CONDITION || user->kind == OP_SCF_FOR ||
      user->kind == OP_SCF_WHILE)
    return true;
  for (uint32_t i = 0; i < user->nresults; i++)
    if (is_alias(&user->results[i])) return true;
  return false;
}

/* A user rebuilt in both branches of an scf.if: no regions, no buffer results. */
static bool check_user(IrOp *user) {
  bool ok = user->nregions == 0;
  for (uint32_t i = 0; ok && i < user->nresults; i++)
    ok = !is_buffer(user->results[i].type);
  if (!ok) ir_op_error(user, "RemoveBufferAlias: not supported operation type");
  return ok;
}

static bool select_ready(IrOp *sel) {
  for (IrUse *u = sel->results[0].uses; u; u = u->next)
    if (waits_for(u->owner)) return false;
  return true;
}

/* The buffer a select always gives, or NULL. */
static IrValue *select_known(IrOp *sel) {
  IrValue *c = sel->operands[0].value, *t = sel->operands[1].value, *f = sel->operands[2].value;
  if (t == f) return t;
  if (c->def && c->def->kind == OP_ARITH_CONSTANT) {
    const IrAttr *v = ir_op_attr(c->def, "value");
    if (v && (v->kind == IR_ATTR_INT || v->kind == IR_ATTR_BOOL)) return (v->kind == IR_ATTR_INT ? v->u.i : v->u.b) ? t : f;
  }
  return NULL;
}

/* One branch of the scf.if: a clone of user with the select replaced by v. */
static void branch(Alias *a, IrOp *sif, uint32_t r, IrOp *user, IrValue *sel, IrValue *v) {
  IrBlock *b = ir_region_ensure_block(a->r.ctx, &sif->regions[r]);
  ir_builder_at_end(&a->r.b, b);
  IrMapping m;
  ir_mapping_init(&m);
  ir_mapping_set(&m, sel, v);
  IrOp *c = ir_builder_insert(&a->r.b, ir_op_clone(a->r.ctx, user, &m));
  ir_mapping_free(&m);
  IrValue **res = ir_malloc((c->nresults + 1) * sizeof *res);
  for (uint32_t i = 0; i < c->nresults; i++)
    res[i] = &c->results[i];
  ir_build(&a->r.b, OP_SCF_YIELD, c->nresults, res, 0, NULL, 0);
  ir_free(res);
}

static void collapse_select(Alias *a, IrOp *sel) {
  IrValue *s = &sel->results[0], *known = select_known(sel);
  if (known) {
    rw_replace(sel, known);
    a->changed = true;
    return;
  }
  while (s->uses) {
    IrOp *user = s->uses->owner;
    rw_before(&a->r, user);
    const IrType **types = ir_malloc((user->nresults + 1) * sizeof *types);
    for (uint32_t i = 0; i < user->nresults; i++)
      types[i] = user->results[i].type;
    IrValue *c = sel->operands[0].value;
    IrOp *sif = ir_build(&a->r.b, OP_SCF_IF, 1, &c, user->nresults, types, 2);
    ir_free(types);
    branch(a, sif, 0, user, s, sel->operands[1].value);
    branch(a, sif, 1, user, s, sel->operands[2].value);
    for (uint32_t i = 0; i < user->nresults; i++)
      ir_value_replace_all_uses(&user->results[i], &sif->results[i]);
    ir_op_erase(user);
  }
  ir_op_erase(sel);
  a->changed = true;
}

/* }====================================================================== */

/* {======================================================================
** Rounds
** ======================================================================= */

/* One alias value: checked (check), or collapsed when ready. */
static bool visit_alias(Alias *a, IrValue *v, bool check) {
  IrOp *op = origin(v);
  if (v->def && op->kind == OP_ARITH_SELECT) {
    if (check) {
      if (select_known(op)) return true;
      for (IrUse *u = v->uses; u; u = u->next)
        if (!waits_for(u->owner) && !check_user(u->owner)) return false;
      return true;
    }
    if (select_known(op) || select_ready(op)) collapse_select(a, op);
    return true;
  }
  Group g;
  if (!group_of(v, &g)) {
    ir_op_error(op, "RemoveBufferAlias: not supported operation type");
    return false;
  }
  if (check) return check_group(&g);
  collapse_group(a, &g);
  return true;
}

/* The alias values made by op (results, then block arguments). */
static uint32_t aliases_of(IrOp *op, IrValue **out, uint32_t max) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < op->nresults && n < max; i++)
    if (is_alias(&op->results[i])) out[n++] = &op->results[i];
  for (uint32_t r = 0; r < op->nregions; r++)
    for (IrBlock *b = op->regions[r].first; b; b = b->next)
      for (uint32_t i = 0; i < b->nargs && n < max; i++)
        if (is_alias(b->args[i])) out[n++] = b->args[i];
  return n;
}

/* One round: false on an error, *left says whether aliases remained. */
static bool round_(Alias *a, IrOp *k, bool *left) {
  IrOpVec ops = {0};
  ir_walk_pre(k, collect_visit, &ops);
  *left = ops.n > 0;
  bool ok = true;
  for (int pass = 0; ok && pass < 2; pass++) /* check all, then collapse */
    for (size_t i = 0; ok && i < ops.n; i++) {
      IrValue *vals[32];
      if (ops.v[i]->erased) continue;
      uint32_t n = aliases_of(ops.v[i], vals, 32);
      for (uint32_t j = 0; ok && j < n; j++)
        if (pass == 0 || is_alias(vals[j])) ok = visit_alias(a, vals[j], pass == 0);
    }
  ir_opvec_free(&ops);
  if (ok) drop_dead_slots(a, k);
  return ok;
}

static IrResult alias_kernel(Rewriter *r, IrOp *k) {
  Alias *a = (Alias *)r;
  for (int64_t n = 0;; n++) {
    bool left;
    if (n == a->max_iterations) {
      IrOpVec ops = {0};
      ir_walk_pre(k, collect_visit, &ops);
      if (ops.n) ir_op_error(ops.v[0], "TileASRemoveBufferAliasPass failed to converge");
      bool failed = ops.n > 0;
      ir_opvec_free(&ops);
      return failed ? IR_FAIL : IR_OK;
    }
    if (!round_(a, k, &left)) return IR_FAIL;
    if (!left) return IR_OK;
  }
}

IrResult pass_remove_buffer_alias(IrOp *module, IrPassCtx *pc) {
  Alias a;
  return tas_run(&a, sizeof a, module, pc, alias_kernel);
}
