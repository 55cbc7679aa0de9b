/*
** cse.c -- the `cse` pass: an op that is pure, has no regions and is not
** marked T_NO_MERGE is replaced by an equal op that dominates it (same kind,
** attributes, operands and result types). Scopes follow the region tree;
** isolated ops start afresh.
*/
#include <stdlib.h>
#include <string.h>

#include "passes.h"

typedef struct Cse {
  HashTable table;
  bool changed;
} Cse;

typedef struct Key {
  unsigned char *buf;
  size_t n, cap;
} Key;

static void key_put(Key *k, const void *p, size_t n) {
  if (k->n + n > k->cap) {
    size_t ncap = k->cap ? k->cap * 2 : 256;
    while (ncap < k->n + n) ncap *= 2;
    unsigned char *nb = ir_realloc(k->buf, ncap);
    k->buf = nb;
    k->cap = ncap;
  }
  memcpy(k->buf + k->n, p, n);
  k->n += n;
}

static void op_key(Key *k, IrOp *op) {
  k->n = 0;
  uint32_t kind = op->kind;
  key_put(k, &kind, sizeof kind);
  key_put(k, &op->nattrs, sizeof op->nattrs);
  for (uint32_t i = 0; i < op->nattrs; i++) key_put(k, &op->attrs[i], sizeof op->attrs[i]);
  key_put(k, &op->noperands, sizeof op->noperands);
  IrValue *a = op->noperands > 0 ? op->operands[0].value : NULL;
  IrValue *b = op->noperands > 1 ? op->operands[1].value : NULL;
  bool swap = op->noperands == 2 && (ir_op_info(op->kind)->traits & T_COMMUTATIVE) &&
              (uintptr_t)a > (uintptr_t)b;
  for (uint32_t i = 0; i < op->noperands; i++) {
    IrValue *v = op->operands[i].value;
    if (swap) v = i == 0 ? b : a;
    key_put(k, &v, sizeof v);
  }
  key_put(k, &op->nresults, sizeof op->nresults);
  for (uint32_t i = 0; i < op->nresults; i++) key_put(k, &op->results[i].type, sizeof(void *));
}

static bool candidate(IrOp *op) {
  return op->nregions == 0 && op->nresults > 0 && !(ir_op_info(op->kind)->traits & T_NO_MERGE) &&
         ir_op_is_pure(op);
}

static void cse_region(Cse *c, IrRegion *r, Key *k);

static void cse_block(Cse *c, IrBlock *blk, Key *k) {
  /* Ops added in this block are hidden again when we leave it. */
  struct Added {
    const unsigned char *key; /* its arena copy */
    size_t n;
    uint64_t h;
  } *added = NULL;
  size_t nadded = 0, cap = 0;
  IR_FOR_EACH_OP(op, blk) {
    for (uint32_t r = 0; r < op->nregions; r++) {
      if (ir_op_info(op->kind)->traits & T_ISOLATED) {
        Cse inner = {{0}, false};
        cse_region(&inner, &op->regions[r], k);
        hash_free(&inner.table);
        c->changed |= inner.changed;
      } else {
        cse_region(c, &op->regions[r], k);
      }
    }
    if (!candidate(op)) continue;
    op_key(k, op);
    uint64_t h = hash_bytes(k->buf, k->n);
    IrOp *prior = hash_find(&c->table, k->buf, k->n, h);
    if (prior) {
      for (uint32_t i = 0; i < op->nresults; i++)
        ir_value_replace_all_uses(&op->results[i], &prior->results[i]);
      ir_op_erase(op);
      c->changed = true;
      continue;
    }
    unsigned char *kc = arena_alloc(ir_arena(ir_op_context(op)), k->n);
    memcpy(kc, k->buf, k->n);
    hash_insert(&c->table, kc, k->n, h, op);
    if (nadded == cap) {
      cap = cap ? cap * 2 : 16;
      struct Added *na = ir_realloc(added, cap * sizeof *na);
      added = na;
    }
    added[nadded++] = (struct Added){kc, k->n, h};
  }
  /* (an added op's key is as it was: the ops erased after it cannot be its operands) */
  for (size_t i = 0; i < nadded; i++)
    hash_insert(&c->table, added[i].key, added[i].n, added[i].h, NULL);
  ir_free(added);
}

static void cse_region(Cse *c, IrRegion *r, Key *k) {
  for (IrBlock *b = r->first; b; b = b->next) cse_block(c, b, k);
}

IrResult pass_cse(IrOp *module, IrPassCtx *pc) {
  Cse c = {{0}, false};
  Key k = {NULL, 0, 0};
  for (uint32_t r = 0; r < module->nregions; r++) cse_region(&c, &module->regions[r], &k);
  hash_free(&c.table);
  ir_free(k.buf);
  pc->changed = c.changed;
  return IR_OK;
}
