/*
** tile_sync.c -- kernel-wide synchronization checks, run once per tile.kernel
** by its verifier: one walk over the body in program order that carries, per
** path, the state of the cluster barrier and the plain writes no barrier has
** followed yet. Branches and loop bodies may run or not, so the states of the
** ways through them meet at their end; a loop body that writes is walked a
** second time with its own writes pending (reads of the previous iteration's
** writes).
**
**   distributed shared memory before the cluster barrier: a load, store or
**     atomic through a cluster pointer (tl.mapa) or a remote mbarrier arrive
**     on a path from kernel entry with no cluster barrier (arrive, then wait)
**     before it. The peer CTA may not have started: its shared memory may
**     not be there yet (only in kernels whose cluster has several CTAs).
**   a read in another thread's layout: a load (plain or block_striped) of
**     global or shared memory that a plain or block_striped store of the
**     same threads wrote before it with no barrier in between, where some
**     thread reads bytes another thread wrote. Addresses are evaluated for
**     every thread of the block (thread-uniform values stay symbols, the
**     per-thread part is computed exactly): an error when the addresses and
**     the threads that run both ops are known; a warning that says it cannot
**     be certain when a block_striped read meets a store the evaluation
**     cannot follow.
**
** Any blocking synchronization in between (a CTA, named or cluster barrier,
** an mbarrier, pipeline, seq_bar or generic-barrier wait, a barrier init,
** which ends with a CTA barrier) ends the check for the writes before it:
** handoffs between warps are the protocol checks' business.
*/
#include <stdlib.h>
#include <string.h>

#include "../ir/checked.h"
#include "cutlass.h"
#include "kernel.h"

#define MAX_TERMS 4          /* thread-uniform symbols in one address */
#define MAX_ENUM_TRIP 256    /* loop iterations enumerated per induction variable */
#define MAX_SPANS (1 << 20)  /* intervals of one access (threads x units x iterations) */
#define WALK_BUDGET 200000   /* ops walked before second passes over loops stop */

/* {======================================================================
** State: scratch memory, per-thread affine values
** ======================================================================= */

typedef struct Chunk {
  struct Chunk *next;
  int64_t data[]; /* aligned for int64 and pointers */
} Chunk;

typedef struct Term {
  IrValue *sym; /* a thread-uniform value */
  int64_t coef;
} Term;

/* v(t) = c + k[t] + sum coef * sym: k NULL when no part depends on the thread. */
typedef struct Lin {
  bool known;
  uint8_t nterms;
  Term t[MAX_TERMS];
  int64_t c;
  int64_t *k;
} Lin;

typedef struct Pend { /* a write no barrier has followed yet, newest first */
  struct Pend *next;
  IrOp *op;
} Pend;

typedef struct State {
  int cluster; /* CL_* on every way here */
  Pend *pend;
} State;

enum { CL_NONE, CL_ARRIVED, CL_SYNCED };

typedef struct Access Access;

typedef struct Sync {
  IrOp *kernel;
  int64_t nthreads, block[3], ctas;
  size_t words; /* uint64 words of a thread set */
  Chunk *chunks;
  PtrMap lin;      /* IrValue -> Lin */
  PtrMap acc;      /* IrOp -> Access */
  PtrMap reported; /* IrOp -> itself: one diagnostic per op */
  long walked;
  bool failed;
} Sync;

static void *scratch(Sync *s, size_t n) {
  Chunk *c = ir_calloc(1, sizeof *c + n);
  c->next = s->chunks;
  s->chunks = c;
  return c->data;
}

static const Lin unknown = {false, 0, {{0}}, 0, NULL};

static Lin constant(int64_t c) {
  Lin l = {true, 0, {{0}}, c, NULL};
  return l;
}

static Lin symbol(IrValue *v) {
  Lin l = {true, 1, {{v, 1}}, 0, NULL};
  return l;
}

static bool is_const(const Lin *a) { return a->known && !a->k && !a->nterms; }
static bool is_uniform(const Lin *a) { return a->known && !a->k; }

static int64_t *per_thread(Sync *s) { return scratch(s, (size_t)s->nthreads * sizeof(int64_t)); }

/* a + sign * b. */
static Lin lin_add(Sync *s, const Lin *a, const Lin *b, int64_t sign) {
  if (!a->known || !b->known) return unknown;
  Lin r = *a; /* sums that overflow read as unknown (as the IR's wrapping would) */
  if (!ck_muladd(sign, b->c, a->c, &r.c)) return unknown;
  for (int i = 0; i < b->nterms; i++) {
    int j = 0;
    while (j < r.nterms && r.t[j].sym != b->t[i].sym)
      j++;
    if (j == r.nterms) {
      if (r.nterms == MAX_TERMS) return unknown;
      r.t[r.nterms++] = (Term){b->t[i].sym, 0};
    }
    if (!ck_muladd(sign, b->t[i].coef, r.t[j].coef, &r.t[j].coef)) return unknown;
  }
  int n = 0; /* drop cancelled terms */
  for (int i = 0; i < r.nterms; i++)
    if (r.t[i].coef) r.t[n++] = r.t[i];
  r.nterms = (uint8_t)n;
  if (a->k || b->k) {
    r.k = per_thread(s);
    for (int64_t t = 0; t < s->nthreads; t++)
      if (!ck_muladd(sign, b->k ? b->k[t] : 0, a->k ? a->k[t] : 0, &r.k[t])) return unknown;
  }
  return r;
}

static Lin lin_scale(Sync *s, const Lin *a, int64_t f) {
  if (!a->known) return unknown;
  Lin r = *a;
  if (!ck_mul(r.c, f, &r.c)) return unknown;
  for (int i = 0; i < r.nterms; i++)
    if (!ck_mul(r.t[i].coef, f, &r.t[i].coef)) return unknown;
  if (a->k) {
    r.k = per_thread(s);
    for (int64_t t = 0; t < s->nthreads; t++)
      if (!ck_mul(a->k[t], f, &r.k[t])) return unknown;
  }
  if (!f) r = constant(0);
  return r;
}

/* }====================================================================== */

/* {======================================================================
** Evaluating values for every thread of the block
** ======================================================================= */

static const Lin *eval(Sync *s, IrValue *v);

/* Thread t's index along dim (0 x, 1 y, 2 z) of the block. */
/* This analysis reads a few attributes of many op kinds at once (the ids'
** `dim`, comparison predicates, modes), so it reads them by name. */
static const char *attr_str(const IrOp *op, const char *name) {
  const IrAttr *a = ir_op_attr(op, name);
  return a && a->kind == IR_ATTR_STR ? a->u.str.s : NULL;
}

static int64_t attr_int(const IrOp *op, const char *name, int64_t dflt) {
  const IrAttr *a = ir_op_attr(op, name);
  return a && a->kind == IR_ATTR_INT ? a->u.i : dflt;
}

static int64_t tid_along(const Sync *s, int64_t t, int dim) {
  if (dim == 0) return t % s->block[0];
  if (dim == 1) return t / s->block[0] % s->block[1];
  return t / (s->block[0] * s->block[1]);
}

static int dim_of(const IrOp *op) {
  const char *d = attr_str(op, "dim");
  return d && d[0] == 'y' ? 1 : d && d[0] == 'z' ? 2 : 0;
}

/* The first warp of the agent around op (for agent-relative ids). */
static int64_t agent_first_warp(const IrOp *op) {
  uint64_t m = kernel_exec_of(op).mask;
  int64_t w = 0;
  while (m && !(m & 1)) {
    m >>= 1;
    w++;
  }
  return w;
}

/* An id that depends on the thread: its value for every thread. */
static Lin thread_value(Sync *s, IrOp *op) {
  Lin r = constant(0);
  r.k = per_thread(s);
  int dim = dim_of(op);
  int64_t first = op->kind == OP_TILE_AGENT_THREAD_ID || op->kind == OP_TILE_AGENT_WARP_ID
                      ? agent_first_warp(op)
                      : 0;
  for (int64_t t = 0; t < s->nthreads; t++) {
    switch (op->kind) {
    case OP_TILE_THREAD_ID: r.k[t] = tid_along(s, t, dim); break;
    case OP_TILE_LANE_ID: r.k[t] = t % 32; break;
    case OP_TILE_WARP_ID: r.k[t] = t / 32; break;
    case OP_TILE_AGENT_THREAD_ID: r.k[t] = t - 32 * first; break;
    default: r.k[t] = t / 32 - first; break; /* agent_warp_id */
    }
  }
  return r;
}

/* The induction variable of an scf.for, or NULL. */
static IrOp *loop_of_iv(const IrValue *v) {
  if (v->def || !v->block || v->index != 0) return NULL;
  IrOp *p = ir_block_parent_op(v->block);
  return p && p->kind == OP_SCF_FOR ? p : NULL;
}

/* A block argument: kernel parameters and uniform loop counters are symbols. */
static Lin block_arg(Sync *s, IrValue *v) {
  IrOp *p = ir_block_parent_op(v->block);
  if (p == s->kernel) return symbol(v);
  if (loop_of_iv(v)) {
    for (uint32_t i = 0; i < 3; i++)
      if (!is_uniform(eval(s, p->operands[i].value))) return unknown;
    return symbol(v);
  }
  return unknown;
}

/* Elementwise integer ops on two per-thread values; false for an op it does not know. */
static bool elementwise(IrOpKind k, int64_t a, int64_t b, int64_t *r) {
  switch (k) {
  case OP_ARITH_DIVSI:
  case OP_ARITH_DIVUI: return b != 0 && a >= 0 && b > 0 ? (*r = a / b, true) : false;
  case OP_ARITH_REMSI:
  case OP_ARITH_REMUI: return b != 0 && a >= 0 && b > 0 ? (*r = a % b, true) : false;
  case OP_ARITH_ANDI: *r = a & b; return true;
  case OP_ARITH_ORI: *r = a | b; return true;
  case OP_ARITH_XORI: *r = a ^ b; return true;
  case OP_ARITH_SHRUI:
  case OP_ARITH_SHRSI: return b >= 0 && b < 63 && a >= 0 ? (*r = a >> b, true) : false;
  case OP_ARITH_SHLI: return b < 32 && ck_shl(a, b, r);
  case OP_ARITH_MULI: return ck_mul(a, b, r);
  case OP_ARITH_MINSI:
  case OP_ARITH_MINUI: *r = a < b ? a : b; return true;
  case OP_ARITH_MAXSI:
  case OP_ARITH_MAXUI: *r = a > b ? a : b; return true;
  default: return false;
  }
}

static bool compare(const char *pred, int64_t a, int64_t b) {
  if (!pred) return false;
  if (!strcmp(pred, "eq")) return a == b;
  if (!strcmp(pred, "ne")) return a != b;
  if (!strcmp(pred, "slt") || !strcmp(pred, "ult")) return a < b;
  if (!strcmp(pred, "sle") || !strcmp(pred, "ule")) return a <= b;
  if (!strcmp(pred, "sgt") || !strcmp(pred, "ugt")) return a > b;
  return a >= b; /* sge, uge */
}

/* Two operands with the same symbols, the per-thread parts combined by op. */
static Lin combine(Sync *s, IrOp *op, const Lin *a, const Lin *b) {
  if (!a->known || !b->known) return unknown;
  bool cmp = op->kind == OP_ARITH_CMPI;
  if (a->nterms || b->nterms) {
    Lin d = lin_add(s, a, b, -1); /* the symbols cancel: compare the rest */
    if (!cmp || !d.known || d.nterms) return unknown;
    Lin r = constant(0);
    r.k = per_thread(s);
    for (int64_t t = 0; t < s->nthreads; t++) {
      int64_t x;
      if (!ck_add(d.k ? d.k[t] : 0, d.c, &x)) return unknown;
      r.k[t] = compare(attr_str(op, "predicate"), x, 0);
    }
    return r;
  }
  Lin r = constant(0);
  r.k = per_thread(s);
  for (int64_t t = 0; t < s->nthreads; t++) {
    int64_t x, y;
    if (!ck_add(a->c, a->k ? a->k[t] : 0, &x) || !ck_add(b->c, b->k ? b->k[t] : 0, &y)) return unknown;
    if (cmp) r.k[t] = compare(attr_str(op, "predicate"), x, y);
    else if (!elementwise(op->kind, x, y, &r.k[t])) return unknown;
  }
  return r;
}

static bool is_cast(IrOpKind k) {
  return k == OP_ARITH_EXTSI || k == OP_ARITH_EXTUI || k == OP_ARITH_TRUNCI ||
         k == OP_ARITH_INDEX_CAST || k == OP_ARITH_INDEX_CASTUI;
}

/* Ops whose value is the same for every thread of the block. */
static bool is_uniform_op(IrOpKind k) {
  switch (k) {
  case OP_TILE_BLOCK_ID:
  case OP_TILE_BLOCK_DIM:
  case OP_TILE_GRID_DIM:
  case OP_TILE_CLUSTER_ID:
  case OP_TILE_CLUSTER_GRID_DIM:
  case OP_TILE_CLUSTER_BLOCK_ID:
  case OP_TILE_CLUSTER_DIM:
  case OP_TILE_CLUSTER_RANK:
  case OP_TILE_CLUSTER_SIZE: return true;
  default: return false;
  }
}

static Lin eval_op(Sync *s, IrOp *op, IrValue *v) {
  int64_t c;
  switch (op->kind) {
  case OP_ARITH_CONSTANT: return dia_const_int(v, &c) ? constant(c) : unknown;
  case OP_TILE_THREAD_ID:
    if (s->block[dim_of(op)] == 1) return constant(0);
    return thread_value(s, op);
  case OP_TILE_LANE_ID:
  case OP_TILE_WARP_ID:
  case OP_TILE_AGENT_THREAD_ID:
  case OP_TILE_AGENT_WARP_ID: return thread_value(s, op);
  default: break;
  }
  if (is_uniform_op(op->kind)) return symbol(v);
  if (is_cast(op->kind)) return *eval(s, op->operands[0].value);
  if (op->noperands == 0 || strncmp(ir_op_name(op), "arith.", 6) != 0) return unknown;
  const Lin *a = eval(s, op->operands[0].value);
  const Lin *b = op->noperands > 1 ? eval(s, op->operands[1].value) : NULL;
  if (op->kind == OP_ARITH_SELECT) {
    const Lin *x = b, *y = eval(s, op->operands[2].value);
    if (!a->known || !x->known || !y->known) return unknown;
    if (is_uniform(a) && is_uniform(x) && is_uniform(y)) return symbol(v);
    Lin d = lin_add(s, x, y, -1);
    if (!d.known || d.nterms || a->nterms) return unknown;
    Lin r = *y; /* y + (cond ? x - y : 0) */
    r.k = per_thread(s);
    for (int64_t t = 0; t < s->nthreads; t++) {
      int64_t cond, diff = 0;
      if (!ck_add(a->c, a->k ? a->k[t] : 0, &cond) || (cond && !ck_add(d.c, d.k ? d.k[t] : 0, &diff)) ||
          !ck_add(y->k ? y->k[t] : 0, diff, &r.k[t]))
        return unknown;
    }
    return r;
  }
  if (!b || !a->known || !b->known) return unknown;
  if (op->kind == OP_ARITH_ADDI || op->kind == OP_ARITH_SUBI)
    return lin_add(s, a, b, op->kind == OP_ARITH_ADDI ? 1 : -1);
  if (op->kind == OP_ARITH_MULI && (is_const(a) || is_const(b)))
    return is_const(a) ? lin_scale(s, b, a->c) : lin_scale(s, a, b->c);
  if (op->kind == OP_ARITH_SHLI && is_const(b) && b->c >= 0 && b->c < 32)
    return lin_scale(s, a, (int64_t)1 << b->c);
  if (is_uniform(a) && is_uniform(b)) { /* uniform: folds, or a symbol of its own */
    if (is_const(a) && is_const(b) && op->kind != OP_ARITH_CMPI) {
      int64_t r;
      return elementwise(op->kind, a->c, b->c, &r) ? constant(r) : symbol(v);
    }
    return symbol(v);
  }
  return combine(s, op, a, b);
}

static const Lin *eval(Sync *s, IrValue *v) {
  Lin *l = ptrmap_get(&s->lin, v);
  if (l) return l;
  l = scratch(s, sizeof *l);
  *l = unknown;
  ptrmap_set(&s->lin, v, l); /* a cycle through block arguments reads as unknown */
  *l = v->def ? eval_op(s, v->def, v) : block_arg(s, v);
  return l;
}

/* }====================================================================== */

/* {======================================================================
** Accesses: a base and the bytes each thread touches
** ======================================================================= */

struct Access {
  bool ok;         /* the address is known */
  IrValue *root;   /* the buffer: a parameter, an allocation, a memref */
  Lin off;         /* byte offset of the base from the root */
  int64_t bytes;   /* plain: bytes moved; striped: bytes of a unit */
  bool striped;    /* unit u of thread t at ((u * threads + t - first) * bytes) */
  int64_t units, threads, first;
  uint64_t *active; /* threads that may run it */
  bool certain;     /* `active` is exact */
  uint64_t scope;   /* executor warps */
};

static int64_t elem_bytes(const IrType *p) { return dia_type_bytes(p->elem); }

/* root + offset of a pointer (or memref) through ptr_add, ptr_cast and memref_ptr. */
static void address(Sync *s, IrValue *p, Access *a) {
  a->off = constant(0);
  while (p->def && a->off.known) {
    IrOp *d = p->def;
    if (d->kind == OP_TILE_PTR_ADD) {
      Lin o = lin_scale(s, eval(s, d->operands[1].value), elem_bytes(d->operands[0].value->type));
      a->off = lin_add(s, &a->off, &o, 1);
    } else if (d->kind == OP_TILE_MEMREF_PTR) {
      const IrType *m = d->operands[0].value->type;
      int64_t stride = elem_bytes(m);
      for (uint32_t i = m->rank; i-- > 0;) {
        if (i + 1 < d->noperands) {
          Lin o = lin_scale(s, eval(s, d->operands[i + 1].value), stride);
          a->off = lin_add(s, &a->off, &o, 1);
        }
        if (!ck_mul(stride, m->shape[i] > 0 ? m->shape[i] : 1, &stride)) a->off = unknown;
      }
    } else if (d->kind != OP_TILE_PTR_CAST) {
      break;
    }
    p = d->operands[0].value;
  }
  a->root = p;
  a->ok = a->off.known;
}

static void set_all(const Sync *s, uint64_t *set, uint64_t warps) {
  for (int64_t t = 0; t < s->nthreads; t++)
    if (warps & ((uint64_t)1 << (t / 32 < 64 ? t / 32 : 63))) set[t / 64] |= (uint64_t)1 << (t % 64);
}

static bool in_set(const uint64_t *set, int64_t t) { return set[t / 64] >> (t % 64) & 1; }

static bool sets_meet(const Sync *s, const uint64_t *a, const uint64_t *b) {
  for (size_t i = 0; i < s->words; i++)
    if (a[i] & b[i]) return true;
  return false;
}

/* The threads that may run op: its executors, narrowed by the scf.if
** conditions around it that can be evaluated; not certain under an elect or
** a thread-dependent condition that cannot. Uniform conditions keep every
** thread: they pick a path for the whole block, and the path exists. */
static void active_of(Sync *s, IrOp *op, Access *a) {
  a->scope = kernel_exec_of(op).mask;
  a->active = scratch(s, s->words * sizeof(uint64_t));
  a->certain = a->scope != 0;
  set_all(s, a->active, a->scope ? a->scope : ~(uint64_t)0);
  for (IrOp *child = op, *p = ir_op_parent_op(op); p && p != s->kernel;
       child = p, p = ir_op_parent_op(p)) {
    if (p->kind == OP_TILE_ELECT_ONE) a->certain = false;
    if (p->kind != OP_SCF_IF) continue;
    IrValue *cond = p->operands[0].value;
    if (cond->def && cond->def->kind == OP_TILE_ELECT) {
      a->certain = false;
      continue;
    }
    const Lin *c = eval(s, cond);
    if (is_uniform(c) && !is_const(c)) continue;
    if (!c->known) {
      a->certain = false;
      continue;
    }
    bool then = child->parent == p->regions[0].first;
    for (int64_t t = 0; t < s->nthreads; t++)
      if (((c->c + (c->k ? c->k[t] : 0)) != 0) != then) a->active[t / 64] &= ~((uint64_t)1 << (t % 64));
  }
}

/* The memory operand of a read or write we check, else NULL. */
static IrValue *mem_operand(const IrOp *op, bool *write, bool *striped) {
  *write = *striped = false;
  switch (op->kind) {
  case OP_TILE_LOAD: return op->operands[0].value;
  case OP_TILE_STORE: *write = true; return op->operands[1].value;
  case OP_CUTLASS_BLOCK_STRIPED_STORE: *write = true; /* fall through */
  case OP_CUTLASS_BLOCK_STRIPED_LOAD:
  case OP_CUTLASS_BLOCK_STRIPED_LOAD_ADD: *striped = true; return op->operands[0].value;
  default: return NULL;
  }
}

static bool checked_space(const IrType *t) {
  return (t->kind == IR_TY_PTR || t->kind == IR_TY_MEMREF) &&
         (t->space == IR_MS_GLOBAL || t->space == IR_MS_SHARED);
}

static const Access *access_of(Sync *s, IrOp *op) {
  Access *a = ptrmap_get(&s->acc, op);
  if (a) return a;
  a = scratch(s, sizeof *a);
  ptrmap_set(&s->acc, op, a);
  bool write, striped;
  IrValue *p = mem_operand(op, &write, &striped);
  address(s, p, a);
  active_of(s, op, a);
  a->striped = striped;
  a->units = 1;
  if (!striped) {
    a->bytes = dia_type_bytes(op->kind == OP_TILE_STORE ? op->operands[0].value->type
                                                        : op->results[0].type);
    return a;
  }
  const IrType *f = op->operands[1].value->type;
  int64_t v = f->kind == IR_TY_MEMREF ? cut_striped_unit(f) : 0, n = ir_type_num_elements(f);
  a->threads = attr_int(op, "threads", 0);
  a->bytes = v * dia_type_bytes(f->elem);
  a->units = v > 0 && n > 0 ? n / v : 0;
  int64_t w = 0;
  for (uint64_t m = a->scope; m && !(m & 1); m >>= 1)
    w++;
  a->first = 32 * w;
  a->ok &= a->units > 0 && a->threads > 0 && a->bytes > 0;
  return a;
}

/* }====================================================================== */

/* {======================================================================
** Comparing a write with a later read, thread by thread
** ======================================================================= */

typedef struct Span {
  int64_t lo, hi, thread;
} Span;

typedef struct Spans {
  Span *v;
  size_t n, cap;
  Term key[MAX_TERMS]; /* the symbols left, sorted */
  int nkey;
} Spans;

static void span_push(Spans *sp, int64_t lo, int64_t hi, int64_t t) {
  if (sp->n == sp->cap) {
    sp->cap = sp->cap ? 2 * sp->cap : 256;
    Span *nv = ir_realloc(sp->v, sp->cap * sizeof *nv);
    sp->v = nv;
  }
  sp->v[sp->n++] = (Span){lo, hi, t};
}

/* Constant bounds of an scf.for: its iterations into *lb, *step, *trip. */
static bool const_loop(IrOp *loop, int64_t *lb, int64_t *step, int64_t *trip) {
  int64_t ub;
  if (!dia_const_int(loop->operands[0].value, lb) || !dia_const_int(loop->operands[1].value, &ub) ||
      !dia_const_int(loop->operands[2].value, step) || *step <= 0)
    return false;
  int64_t span;
  if (ub <= *lb) *trip = 0;
  else if (ck_sub(ub, *lb, &span) && ck_add(span, *step - 1, &span)) *trip = span / *step;
  else return false;
  return *trip <= MAX_ENUM_TRIP;
}

static int term_cmp(const void *x, const void *y) {
  const Term *a = x, *b = y;
  if (a->sym != b->sym) return (uintptr_t)a->sym < (uintptr_t)b->sym ? -1 : 1;
  return a->coef < b->coef ? -1 : a->coef > b->coef;
}

/* The bytes a touches, per thread. Induction variables of loops around a but
** not around `other` take every value of their (constant) range; the other
** symbols stay in the key. False when a loop cannot be enumerated. */
static bool spans_of(Sync *s, const Access *a, IrOp *op, IrOp *other, Spans *sp) {
  Term en[2];
  int nen = 0;
  int64_t lb[2] = {0, 0}, step[2] = {1, 1}, trip[2] = {1, 1};
  sp->nkey = 0;
  for (int i = 0; i < a->off.nterms; i++) {
    IrOp *loop = loop_of_iv(a->off.t[i].sym);
    if (loop && ir_op_is_ancestor(loop, op) && !ir_op_is_ancestor(loop, other)) {
      if (nen == 2 || !const_loop(loop, &lb[nen], &step[nen], &trip[nen])) return false;
      en[nen++] = a->off.t[i];
    } else {
      sp->key[sp->nkey++] = a->off.t[i];
    }
  }
  qsort(sp->key, (size_t)sp->nkey, sizeof sp->key[0], term_cmp);
  if ((double)trip[0] * trip[1] * a->units * s->nthreads > MAX_SPANS) return false;
  for (int64_t i0 = 0; i0 < trip[0]; i0++)
    for (int64_t i1 = 0; i1 < trip[1]; i1++) {
      /* byte offsets that do not fit 64 bits: the accesses cannot be compared */
      int64_t shift = a->off.c, iv[2], part;
      for (int e = 0; e < nen; e++)
        if (!ck_muladd(e ? i1 : i0, step[e], lb[e], &iv[e]) || !ck_mul(en[e].coef, iv[e], &part) ||
            !ck_add(shift, part, &shift))
          return false;
      for (int64_t t = 0; t < s->nthreads; t++) {
        if (!in_set(a->active, t)) continue;
        int64_t base, lo, hi;
        if (!ck_add(shift, a->off.k ? a->off.k[t] : 0, &base)) return false;
        if (!a->striped) {
          if (!ck_add(base, a->bytes, &hi)) return false;
          span_push(sp, base, hi, t);
          continue;
        }
        int64_t r = t - a->first;
        if (r < 0 || r >= a->threads) continue;
        for (int64_t u = 0; u < a->units; u++) {
          if (!ck_muladd(u, a->threads, r, &lo) || !ck_muladd(lo, a->bytes, base, &lo) || !ck_add(lo, a->bytes, &hi))
            return false;
          span_push(sp, lo, hi, t);
        }
      }
    }
  return true;
}

static int span_cmp(const void *x, const void *y) {
  const Span *a = x, *b = y;
  return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* A span of r whose bytes a span of w of another thread overlaps: *rs, *ws. */
static bool find_conflict(Spans *w, const Spans *r, const Span **rs, const Span **ws) {
  qsort(w->v, w->n, sizeof *w->v, span_cmp);
  int64_t longest = 0;
  for (size_t i = 0; i < w->n; i++)
    if (w->v[i].hi - w->v[i].lo > longest) longest = w->v[i].hi - w->v[i].lo;
  for (size_t i = 0; i < r->n; i++) {
    const Span *x = &r->v[i];
    size_t lo = 0, hi = w->n; /* first w span starting at or after x->hi */
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (w->v[mid].lo < x->hi) lo = mid + 1;
      else hi = mid;
    }
    for (size_t j = lo; j-- > 0 && w->v[j].lo > x->lo - longest;)
      if (w->v[j].hi > x->lo && w->v[j].thread != x->thread) {
        *rs = x;
        *ws = &w->v[j];
        return true;
      }
  }
  return false;
}

static bool same_key(const Spans *a, const Spans *b) {
  if (a->nkey != b->nkey) return false;
  for (int i = 0; i < a->nkey; i++)
    if (a->key[i].sym != b->key[i].sym || a->key[i].coef != b->key[i].coef) return false;
  return true;
}

static const char *space_name(const IrType *t) { return t->space == IR_MS_SHARED ? "shared" : "global"; }

static void report_read(Sync *s, IrOp *rd, IrOp *wr, const Span *rs, const Span *ws, bool certain) {
  ptrmap_set(&s->reported, rd, rd);
  const IrType *t = access_of(s, rd)->root->type;
  IrDiag *d;
  if (certain) {
    d = ir_op_error(rd,
                    "reads %s memory that other threads of the CTA wrote with no barrier in "
                    "between: thread %lld reads bytes [%lld, %lld) that thread %lld wrote",
                    space_name(t), (long long)rs->thread, (long long)rs->lo, (long long)rs->hi,
                    (long long)ws->thread);
    s->failed = true;
  } else {
    d = ir_op_warning(rd,
                      "may read %s memory that other threads of the CTA wrote with no barrier in "
                      "between (cannot be certain: %s)",
                      space_name(t),
                      rs ? "an elect or a thread-dependent condition decides which threads write or read"
                         : "the store's address is not one the verifier can evaluate for every thread");
  }
  ir_op_note(d, wr, "written here; a CTA barrier (tl.barrier) between the two orders them");
}

/* Check read rd against the pending write wr to the same buffer. */
static void check_pair(Sync *s, IrOp *rd, IrOp *wr) {
  const Access *r = access_of(s, rd), *w = access_of(s, wr);
  /* Other warps (another agent or executor set, or threads picked apart by
  ** their ids): a handoff between roles, which their protocol orders. */
  if ((r->scope & w->scope) != r->scope || !sets_meet(s, r->active, w->active)) return;
  bool striped_read = rd->kind != OP_TILE_LOAD;
  if (!r->ok || !w->ok) {
    if (striped_read && r->ok) report_read(s, rd, wr, NULL, NULL, false);
    return;
  }
  Spans ws = {0}, rs = {0};
  const Span *x, *y;
  if (spans_of(s, w, wr, rd, &ws) && spans_of(s, r, rd, wr, &rs)) {
    if (!same_key(&ws, &rs)) {
      if (striped_read) report_read(s, rd, wr, NULL, NULL, false);
    } else if (find_conflict(&ws, &rs, &x, &y)) {
      report_read(s, rd, wr, x, y, r->certain && w->certain);
    }
  } else if (striped_read) {
    report_read(s, rd, wr, NULL, NULL, false);
  }
  ir_free(ws.v);
  ir_free(rs.v);
}

static void check_read(Sync *s, IrOp *rd, const State *st) {
  const Access *r = access_of(s, rd);
  for (Pend *p = st->pend; p && !ptrmap_get(&s->reported, rd); p = p->next)
    if (access_of(s, p->op)->root == r->root) check_pair(s, rd, p->op);
}

/* }====================================================================== */

/* {======================================================================
** The walk
** ======================================================================= */

/* What an op is to the walk: an access to another CTA's shared memory
** (reported before the cluster barrier), or a blocking synchronization (the
** writes before it are out of the check). */
typedef enum { ROLE_NONE, ROLE_DSMEM, ROLE_SYNC } Role;

/* ROLE_DSMEM when operand #i points into another CTA's shared memory. */
static Role dsmem_at(const IrOp *op, uint32_t i) {
  return op->operands[i].value->type->space == IR_MS_CLUSTER ? ROLE_DSMEM : ROLE_NONE;
}

static Role role_of(const IrOp *op) {
  switch (op->kind) {
  case OP_TILE_LOAD:
  case OP_TILE_ATOMIC:
  case OP_TILE_ATOMIC_CAS:
  case OP_TILE_MBARRIER_ARRIVE:
  case OP_TILE_MBARRIER_ARRIVE_EXPECT_TX: return dsmem_at(op, 0);
  case OP_TILE_STORE: return dsmem_at(op, 1);
  case OP_NVVM_LD_SHARED_CLUSTER:
  case OP_NVVM_ST_SHARED_CLUSTER:
  case OP_NVVM_ATOM_SHARED_CLUSTER:
  case OP_NVVM_ATOM_CAS_SHARED_CLUSTER:
  case OP_NVVM_RED_SHARED_CLUSTER:
  case OP_NVVM_MBARRIER_ARRIVE_SHARED_CLUSTER:
  case OP_NVVM_MBARRIER_ARRIVE_EXPECT_TX_SHARED_CLUSTER: return ROLE_DSMEM;
  case OP_TILE_BARRIER:
  case OP_TILE_NAMED_BARRIER_SYNC:
  case OP_TILE_CLUSTER_WAIT:
  case OP_TILE_MBARRIER_WAIT:
  case OP_TILE_MBARRIER_TRY_WAIT:
  case OP_TILE_MBARRIER_TEST_WAIT:
  case OP_NVVM_BARRIER0:
  case OP_NVVM_BARRIER:
  case OP_NVVM_CLUSTER_WAIT:
  case OP_NVVM_MBARRIER_TRY_WAIT_PARITY_SHARED:
  case OP_NVVM_MBARRIER_TEST_WAIT_PARITY_SHARED:
  case OP_NVVM_INLINE_PTX:
  case OP_CUTLASS_BAR:
  case OP_CUTLASS_PIPELINE_INIT:
  case OP_CUTLASS_SEQ_BAR_INIT:
  case OP_CUTLASS_PIPELINE_CONSUMER_WAIT:
  case OP_CUTLASS_PIPELINE_CONSUMER_TRY_WAIT:
  case OP_CUTLASS_PIPELINE_PRODUCER_ACQUIRE:
  case OP_CUTLASS_PIPELINE_PRODUCER_TRY_ACQUIRE:
  case OP_CUTLASS_SEQ_BAR_WAIT:
  case OP_CUTLASS_GENERIC_BARRIER_WAIT_EQ:
  case OP_CUTLASS_GENERIC_BARRIER_WAIT_EQ_RESET:
  case OP_CUTLASS_GENERIC_BARRIER_ARRIVE_INC:
  case OP_CUTLASS_ASYNC_WAIT:
  case OP_CUTLASS_ASYNC_FUTURE_WAIT:
  case OP_CUTLASS_SCHED_FIXUP:
  case OP_CUTLASS_MODS_END:
  case OP_CUTLASS_MODS_THROTTLE: return ROLE_SYNC;
  default: return ROLE_NONE;
  }
}

/* The cluster-barrier state after op. */
static int cluster_after(const IrOp *op, int cl) {
  switch (op->kind) {
  case OP_TILE_CLUSTER_ARRIVE:
  case OP_NVVM_CLUSTER_ARRIVE:
  case OP_NVVM_CLUSTER_ARRIVE_RELAXED:
  case OP_CUTLASS_MODS_START: return cl == CL_NONE ? CL_ARRIVED : cl;
  case OP_TILE_CLUSTER_WAIT:
  case OP_NVVM_CLUSTER_WAIT:
  case OP_CUTLASS_MODS_END: return cl == CL_ARRIVED ? CL_SYNCED : cl;
  case OP_CUTLASS_MODS_THROTTLE: /* profile 2: wait, then arrive again */
    return attr_int(op, "profile", 0) == 2 && cl == CL_ARRIVED ? CL_SYNCED : cl;
  case OP_CUTLASS_PIPELINE_INIT: { /* mode "cluster" ends with a cluster sync */
    const char *m = attr_str(op, "mode");
    return m && !strcmp(m, "cluster") ? CL_SYNCED : cl;
  }
  default: return cl;
  }
}

static void report_dsmem(Sync *s, IrOp *op, int cl) {
  if (ptrmap_get(&s->reported, op)) return;
  ptrmap_set(&s->reported, op, op);
  ir_op_error(op, "accesses another CTA's shared memory (distributed shared memory) on a path "
                  "from kernel entry with no cluster barrier before it%s: the peer CTA may not "
                  "have started; put tl.cluster_sync() (cluster arrive, then wait) first",
              cl == CL_ARRIVED ? " (a cluster arrive, but no wait)" : "");
  s->failed = true;
}

/* The meet at the end of two ways from `base`: the weaker cluster state and
** every write pending on either (a's new writes copied onto b). */
static State meet(Sync *s, State base, State a, State b) {
  State r = {a.cluster < b.cluster ? a.cluster : b.cluster, b.pend};
  for (Pend *p = a.pend; p && p != base.pend; p = p->next) {
    Pend *n = scratch(s, sizeof *n);
    n->op = p->op;
    n->next = r.pend;
    r.pend = n;
  }
  return r;
}

static State walk_region(Sync *s, IrRegion *r, State st);

/* A loop body: walked once, and again with its own writes pending when it has any. */
static State walk_loop_body(Sync *s, IrRegion *r, State st) {
  State once = walk_region(s, r, st);
  if (once.pend != st.pend && s->walked < WALK_BUDGET) walk_region(s, r, meet(s, st, once, st));
  return once;
}

static State walk_op(Sync *s, IrOp *op, State st) {
  s->walked++;
  Role role = role_of(op);
  if (role == ROLE_DSMEM && s->ctas > 1 && st.cluster != CL_SYNCED) report_dsmem(s, op, st.cluster);
  bool write, striped;
  IrValue *m = mem_operand(op, &write, &striped);
  if (m && checked_space(m->type)) {
    if (write) {
      Pend *n = scratch(s, sizeof *n);
      n->op = op;
      n->next = st.pend;
      st.pend = n;
    } else if (st.pend) {
      check_read(s, op, &st);
    }
  }
  st.cluster = cluster_after(op, st.cluster);
  if (role == ROLE_SYNC) st.pend = NULL;
  if (!op->nregions) return st;
  if (op->kind == OP_SCF_FOR) return meet(s, st, walk_loop_body(s, &op->regions[0], st), st);
  if (op->kind == OP_SCF_WHILE) {
    State before = walk_region(s, &op->regions[0], st);
    State after = walk_loop_body(s, &op->regions[1], before);
    return meet(s, st, after, before);
  }
  if (op->kind == OP_SCF_IF) { /* one of the two ways; a missing else is the way around */
    State then = walk_region(s, &op->regions[0], st), other = walk_region(s, &op->regions[1], st);
    return meet(s, st, then, other);
  }
  State out = st; /* agents, elects, executor regions and cases: each may run or not */
  for (uint32_t i = 0; i < op->nregions; i++)
    for (IrBlock *b = op->regions[i].first; b; b = b->next) {
      State in = st;
      for (IrOp *o = b->first; o; o = o->next)
        in = walk_op(s, o, in);
      out = meet(s, st, in, out);
    }
  return out;
}

static State walk_region(Sync *s, IrRegion *r, State st) {
  for (IrBlock *b = r->first; b; b = b->next)
    for (IrOp *o = b->first; o; o = o->next)
      st = walk_op(s, o, st);
  return st;
}

/* }====================================================================== */

/* The kernel-wide checks; false after an error (warnings do not fail). */
bool tile_check_sync(IrOp *kernel) {
  Sync s;
  memset(&s, 0, sizeof s);
  s.kernel = kernel;
  KernelSpec ks = kernel_spec(kernel);
  if (!ks.ok) return true; /* the kernel verifier reports it */
  memcpy(s.block, ks.block, sizeof s.block);
  s.ctas = ks.ctas;
  s.nthreads = s.block[0] * s.block[1] * s.block[2];
  if (s.nthreads < 1 || s.nthreads > 1024) return true; /* the kernel verifier reports it */
  s.words = (size_t)(s.nthreads + 63) / 64;
  State st = {CL_NONE, NULL};
  walk_region(&s, &kernel->regions[0], st);
  ptrmap_free(&s.lin);
  ptrmap_free(&s.acc);
  ptrmap_free(&s.reported);
  while (s.chunks) {
    Chunk *n = s.chunks->next;
    ir_free(s.chunks);
    s.chunks = n;
  }
  return !s.failed;
}

IrResult tile_verify_kernel_sync(IrOp *kernel) { return tile_check_sync(kernel) ? IR_OK : IR_FAIL; }
