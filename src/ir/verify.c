/*
** verify.c -- the generic verifier: structure from the op tables (operand and
** result counts and types, the attribute rows, regions, terminators), SSA
** visibility, then each op's own verifier once everything nested in it is sound.
*/
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "ir_impl.h"

#define MAX_ERRORS 50

/* The signatures that held in this verification, by op kind and the types of
** its operands and results (types are interned: the same pointer is the same
** type): a module holds many ops of one kind on the same types, and the
** signature's text is parsed only for the first. Direct-mapped; ops with more
** types than SIG_MEMO_TYPES are checked every time. */
#define SIG_MEMO_TYPES 6
#define SIG_MEMO_SLOTS 256
typedef struct SigMemo {
  uint32_t kind; /* the op kind + 1; 0: empty */
  uint8_t noperands, nresults;
  const IrType *types[SIG_MEMO_TYPES];
} SigMemo;

/* A value in scope carries its isolation level's stamp in val->mark (a field,
** not a map: the verifier runs after every pass, over every value). Each
** verification takes fresh stamps from the context, one per isolation level it
** enters, so a mark left by an earlier one (the root's results, never taken
** out of scope) is no stamp of this one; values leave scope with mark 0. */
typedef struct Verifier {
  IrContext *ctx;
  uint32_t first; /* the stamp of this verification's outermost level */
  uint32_t stamp; /* the stamp of the current isolation level */
  int errors;
  SigMemo *sig; /* SIG_MEMO_SLOTS of them, where the root holds regions; else NULL */
} Verifier;

static void define(Verifier *v, IrValue *val) { val->mark = v->stamp; }
static void undefine(Verifier *v, IrValue *val) {
  (void)v;
  val->mark = 0;
}

static bool fail(Verifier *v) {
  v->errors++;
  return false;
}

static void type_str(StrBuf *sb, const IrType *t) {
  if (t) ir_print_type(sb, t);
  else sb_puts(sb, "<null>");
}

/* The memo's slot for op (its types in key), or NULL where it keeps none. */
static SigMemo *sig_memo(Verifier *v, const IrOp *op, SigMemo *key) {
  uint32_t n = op->noperands + op->nresults;
  if (!v->sig || n > SIG_MEMO_TYPES) return NULL;
  memset(key, 0, sizeof *key);
  key->kind = (uint32_t)op->kind + 1;
  key->noperands = (uint8_t)op->noperands, key->nresults = (uint8_t)op->nresults;
  uint64_t h = key->kind * 0x9E3779B97F4A7C15ull;
  for (uint32_t i = 0; i < n; i++) {
    const IrValue *val = i < op->noperands ? op->operands[i].value : NULL;
    const IrType *t =
        i < op->noperands ? (val ? val->type : NULL) : op->results[i - op->noperands].type;
    if (!t) return NULL; /* (a missing operand: the message comes from the check) */
    key->types[i] = t;
    h = (h ^ (uint64_t)(uintptr_t)t) * 0x100000001B3ull;
  }
  return &v->sig[(h >> 24) % SIG_MEMO_SLOTS];
}

/* Counts and types against the op's signature's text. */
static bool check_signature_text(Verifier *v, IrOp *op, const IrOpInfo *info) {
  const IrType *stackbuf[32];
  uint32_t n = op->noperands > op->nresults ? op->noperands : op->nresults;
  const IrType **types = n <= 32 ? stackbuf : ir_malloc(n * sizeof *types);
  bool ok = true;
  for (int pass = 0; pass < 2 && ok; pass++) {
    uint32_t cnt = pass == 0 ? op->noperands : op->nresults;
    const char *what = pass == 0 ? "operand" : "result";
    for (uint32_t i = 0; i < cnt; i++)
      types[i] = pass == 0 ? (op->operands[i].value ? op->operands[i].value->type : NULL)
                           : op->results[i].type;
    if (pass == 0)
      for (uint32_t i = 0; i < cnt; i++)
        if (!op->operands[i].value) {
          ir_op_error(op, "operand #%u is missing", i);
          ok = fail(v);
          break;
        }
    if (!ok) break;
    SigMismatch mm = {0};
    const char *sig = pass == 0 ? info->sig : ir_op_sig_results(op->kind);
    if (ir_sig_check(sig, cnt, types, &mm)) continue;
    if (mm.count_error) {
      IrArity ar = ir_op_arity(op->kind); /* parsed from the signature: only for the message */
      int mn = pass == 0 ? ar.min_operands : ar.min_results;
      int mx = pass == 0 ? ar.max_operands : ar.max_results;
      if (mn == mx) ir_op_error(op, "expected %d %s%s, got %u", mn, what, mn == 1 ? "" : "s", cnt);
      else if (mx < 0) ir_op_error(op, "expected at least %d %ss, got %u", mn, what, cnt);
      else ir_op_error(op, "expected %d to %d %ss, got %u", mn, mx, what, cnt);
    } else {
      StrBuf sb;
      sb_init(&sb);
      type_str(&sb, types[mm.index]);
      ir_op_error(op, "%s #%u must be %.*s, got %s", what, mm.index, (int)mm.wantn, mm.want,
                  sb.data);
      sb_free(&sb);
    }
    ok = fail(v);
  }
  if (ok && (info->traits & (T_SAME_TYPE | T_SAME_OPERANDS)) && op->noperands) {
    const IrType *t0 = op->operands[0].value->type;
    bool same = true;
    for (uint32_t i = 1; i < op->noperands; i++)
      same &= op->operands[i].value->type == t0;
    if ((info->traits & T_SAME_TYPE))
      for (uint32_t i = 0; i < op->nresults; i++)
        same &= op->results[i].type == t0;
    if (!same) {
      ir_op_error(op, (info->traits & T_SAME_TYPE)
                          ? "requires the same type for all operands and results"
                          : "requires all operands to have the same type");
      ok = fail(v);
    }
  }
  if (types != stackbuf) ir_free(types);
  return ok;
}

/* Counts and types against the op's signature (remembered when they hold). */
static bool check_signature(Verifier *v, IrOp *op, const IrOpInfo *info) {
  SigMemo key;
  SigMemo *slot = sig_memo(v, op, &key);
  if (slot && memcmp(slot, &key, sizeof key) == 0) return true;
  bool ok = check_signature_text(v, op, info);
  if (ok && slot) *slot = key;
  return ok;
}

static bool check_regions(Verifier *v, IrOp *op, const IrOpInfo *info) {
  if ((int)op->nregions != info->nregions) {
    ir_op_error(op, "expected %d region%s, got %u", info->nregions, info->nregions == 1 ? "" : "s",
                op->nregions);
    return fail(v);
  }
  bool ok = true;
  for (uint32_t r = 0; r < op->nregions; r++) {
    IrRegion *reg = &op->regions[r];
    if ((info->traits & T_SINGLE_BLOCK) && reg->first && reg->first->next) {
      ir_op_error(op, "region #%u must hold a single block", r);
      ok = fail(v);
    }
    if (info->traits & T_NO_TERMINATOR) continue;
    for (IrBlock *b = reg->first; b; b = b->next)
      if (!ir_block_terminator(b)) {
        IrDiag *d = ir_op_error(op, "region #%u: block must end with a terminator", r);
        if (b->last) ir_op_note(d, b->last, "last operation is '%s'", ir_op_name(b->last));
        ok = fail(v);
      }
  }
  return ok;
}

static bool verify_op(Verifier *v, IrOp *op);

static bool verify_region(Verifier *v, IrRegion *r) {
  bool ok = true;
  for (IrBlock *b = r->first; b; b = b->next) {
    for (uint32_t i = 0; i < b->nargs; i++)
      define(v, b->args[i]);
    for (IrOp *o = b->first; o && v->errors < MAX_ERRORS; o = o->next) {
      if (o->parent != b) {
        ir_op_error(o, "is linked into a block it does not belong to");
        ok = fail(v);
        break;
      }
      if ((ir_op_info(o->kind)->traits & T_TERMINATOR) && o->next) {
        ir_op_error(o, "must be the last operation in its block");
        ok = fail(v);
      }
      ok &= verify_op(v, o);
    }
  }
  /* Leave the scope: values defined in these blocks stop being visible. */
  for (IrBlock *b = r->first; b; b = b->next) {
    for (uint32_t i = 0; i < b->nargs; i++)
      undefine(v, b->args[i]);
    for (IrOp *o = b->first; o; o = o->next)
      for (uint32_t i = 0; i < o->nresults; i++)
        undefine(v, &o->results[i]);
  }
  return ok;
}

/* Tiles of at most IR_MAX_TILE_ELEMENTS elements, every extent at least 1 (or dynamic). */
static bool check_tile_sizes(Verifier *v, IrOp *op) {
  for (uint32_t i = 0; i < op->nresults; i++) {
    const IrType *t = op->results[i].type;
    if (t->kind != IR_TY_TILE) continue;
    int64_t n = 1;
    bool ok = true;
    for (uint32_t d = 0; d < t->rank && ok; d++)
      ok = t->shape[d] == IR_DYNAMIC ||
           (t->shape[d] >= 1 && ck_mul(n, t->shape[d], &n) && n <= IR_MAX_TILE_ELEMENTS);
    if (ok) continue;
    ir_op_error(op, "result #%u is a %s: a tile has extents of at least 1 and at most %d elements",
                i, ir_op_type_str(op, t), IR_MAX_TILE_ELEMENTS);
    return fail(v);
  }
  return true;
}

static bool verify_op(Verifier *v, IrOp *op) {
  const IrOpInfo *info = ir_op_info(op->kind);
  bool ok = check_signature(v, op, info);
  if (!check_tile_sizes(v, op)) ok = false;
  if (!ir_op_check_attrs(op)) ok = fail(v);
  if (!ir_op_check_stamps(op)) ok = fail(v);
  for (uint32_t i = 0; i < op->noperands; i++) {
    IrValue *val = op->operands[i].value;
    if (!val) continue;
    if (val->mark == v->stamp) continue;
    if (val->mark >= v->first && val->mark < v->stamp) { /* an enclosing level's */
      IrOp *iso = NULL;
      for (IrOp *p = ir_op_parent_op(op); p; p = ir_op_parent_op(p))
        if (ir_op_info(p->kind)->traits & T_ISOLATED) {
          iso = p;
          break;
        }
      ir_op_error(op, "operand #%u is defined outside the isolated region of '%s'", i,
                  iso ? ir_op_name(iso) : "?");
    } else {
      IrDiag *d = ir_op_error(op, "operand #%u does not dominate this use", i);
      if (val->def) ir_op_note(d, val->def, "operand defined here");
    }
    ok = fail(v);
  }
  ok &= check_regions(v, op, info);
  for (uint32_t i = 0; i < op->nresults; i++)
    define(v, &op->results[i]);
  bool nested_ok = true;
  if (op->nregions) {
    bool iso = info->traits & T_ISOLATED;
    uint32_t outer = v->stamp;
    if (iso) v->stamp = ir_context_stamp(v->ctx);
    for (uint32_t r = 0; r < op->nregions; r++)
      nested_ok &= verify_region(v, &op->regions[r]);
    v->stamp = outer;
  }
  if (ok && nested_ok && v->errors < MAX_ERRORS && info->verify && info->verify(op) != IR_OK)
    ok = fail(v);
  return ok && nested_ok;
}

IrResult ir_verify_signature(IrOp *op) {
  Verifier v = {.ctx = ir_op_context(op), .errors = 0};
  bool ok = check_signature(&v, op, ir_op_info(op->kind)); /* (no memo: v.sig is NULL) */
  return ok ? IR_OK : IR_FAIL;
}

/* {======================================================================
** Nesting depth, without recursion
** ======================================================================= */

static IrOp *first_op_of_blocks(IrBlock *b) {
  for (; b; b = b->next)
    if (b->first) return b->first;
  return NULL;
}

static IrOp *first_op_of_regions(IrOp *op, uint32_t from) {
  for (uint32_t i = from; i < op->nregions; i++) {
    IrOp *o = first_op_of_blocks(op->regions[i].first);
    if (o) return o;
  }
  return NULL;
}

IrOp *ir_op_too_deep(IrOp *root, uint32_t limit) {
  uint32_t depth = 0;
  IrOp *op = root;
  for (;;) {
    if (depth > limit) return op;
    IrOp *child = first_op_of_regions(op, 0);
    if (child) {
      op = child, depth++;
      continue;
    }
    for (;;) { /* the next op in pre-order, climbing out of finished regions */
      if (op == root) return NULL;
      if (op->next) {
        op = op->next;
        break;
      }
      IrBlock *b = op->parent;
      IrOp *parent = b->parent->parent;
      IrOp *n = first_op_of_blocks(b->next);
      if (!n) n = first_op_of_regions(parent, (uint32_t)(b->parent - parent->regions) + 1);
      if (n) {
        op = n;
        break;
      }
      op = parent, depth--;
    }
  }
}

uint32_t ir_op_depth(const IrOp *op) {
  uint32_t d = 0;
  while (op->parent && op->parent->parent && op->parent->parent->parent) {
    op = op->parent->parent->parent;
    d++;
  }
  return d;
}

/* }====================================================================== */

IrResult ir_verify(IrOp *root) {
  IrOp *deep = ir_op_too_deep(root, IR_MAX_NESTING);
  if (deep) {
    ir_op_error(deep, "regions nest more than %d levels deep", IR_MAX_NESTING);
    return IR_FAIL;
  }
  Verifier v = {.ctx = ir_op_context(root), .errors = 0};
  v.first = v.stamp = ir_context_stamp(v.ctx);
  if (root->nregions) v.sig = ir_calloc(SIG_MEMO_SLOTS, sizeof *v.sig);
  /* Values visible around a nested root: treat the root's ancestors' blocks as in scope. */
  if (root->parent)
    for (IrBlock *b = root->parent; b;
         b = ir_block_parent_op(b) ? ir_block_parent_op(b)->parent : NULL) {
      for (uint32_t i = 0; i < b->nargs; i++)
        define(&v, b->args[i]);
      for (IrOp *o = b->first; o && o != root; o = o->next)
        for (uint32_t i = 0; i < o->nresults; i++)
          define(&v, &o->results[i]);
      if (ir_block_parent_op(b) && (ir_op_info(ir_block_parent_op(b)->kind)->traits & T_ISOLATED))
        break;
    }
  verify_op(&v, root);
  ir_free(v.sig);
  if (v.errors >= MAX_ERRORS) ir_error(v.ctx, root->loc, "too many errors, verification stopped");
  return v.errors ? IR_FAIL : IR_OK;
}
