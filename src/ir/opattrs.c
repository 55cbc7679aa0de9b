/*
** opattrs.c -- the attribute rows of the op tables: the generic check the
** structural verifier runs and the reader behind the typed readers of
** src/dialects/op_attrs.h.
**
**   ATTR(OP, name, KIND(...), "doc")    right after OP's row
**
**   INT(default | REQ, lo, hi)   an integer in [lo, hi]; a default outside the
**                                range stands for "absent" (warp_id = -1)
**   BOOL(default)                a boolean
**   ENUM(LIST, default | OPT | REQ)   a string of LIST (dialects/enums.h), read
**                                as its enumerator; OPT: absent reads -1
**   STR(REQ | OPT)               a string
**   INTS(REQ | OPT, max)         an array of at most max integers
**   STRS(REQ | OPT)              an array of strings
**   TYPE(REQ | OPT), DICT(REQ | OPT), ANY(REQ | OPT)
**
** A name that is a C keyword takes a trailing underscore (volatile_): the
** member of the struct has it, the attribute does not. Attributes without a
** row are allowed (discardable, as in MLIR: `volatile = true` on any op).
*/
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../dialects/dialects.h"
#include "../dialects/enums.h"
#include "../dialects/sm90_limits.h"
#include "ir_impl.h"

#define REQ IR_ATTR_REQUIRED
#define OPT (-1)

#define IR_AS_SPEC_INT(d, l, h) .kind = IR_AS_INT, .dflt = (d), .lo = (l), .hi = (h)
#define IR_AS_SPEC_BOOL(d) .kind = IR_AS_BOOL, .dflt = (d)
#define IR_AS_SPEC_ENUM(L, d)                                                                      \
  .kind = IR_AS_ENUM, .dflt = (d), .names = L##_names, .list = #L, .lo = 0, .hi = L##__COUNT - 1
#define IR_AS_SPEC_STR(d) .kind = IR_AS_STR, .dflt = (d)
#define IR_AS_SPEC_INTS(d, max) .kind = IR_AS_INTS, .dflt = (d), .hi = (max)
#define IR_AS_SPEC_STRS(d) .kind = IR_AS_STRS, .dflt = (d)
#define IR_AS_SPEC_TYPE(d) .kind = IR_AS_TYPE, .dflt = (d)
#define IR_AS_SPEC_DICT(d) .kind = IR_AS_DICT, .dflt = (d)
#define IR_AS_SPEC_ANY(d) .kind = IR_AS_ANY, .dflt = (d)

/* Every row, in table order: sorted by op kind (the rows of an op follow it). */
static const IrAttrSpec specs[] = {
#define OP(...)
#define DTYPE(...)
#define ATTR(o_, n_, s_, d_)                                                                       \
  {.op = OP_##o_, .name = #n_, IR_AS_SPEC_##s_, .doc = d_, .offset = offsetof(struct IrAttrs_##o_, n_)},
#include "../dialects/all.def"
#undef OP
#undef DTYPE
#undef ATTR
};
#define NSPECS (sizeof specs / sizeof specs[0])

/* ATTRS_AS(op, other): 1 + other, 0 for an op with rows of its own. */
static const int attrs_as[OP__COUNT] = {
#define OP(...)
#define DTYPE(...)
#define ATTRS_AS(o_, other) [OP_##o_] = OP_##other + 1,
#include "../dialects/all.def"
#undef OP
#undef DTYPE
#undef ATTRS_AS
};

IrOpKind ir_op_attr_set(IrOpKind k) { return attrs_as[k] ? (IrOpKind)(attrs_as[k] - 1) : k; }

const IrAttrSpec *ir_op_attr_specs(IrOpKind k, uint32_t *n) {
  k = ir_op_attr_set(k);
  size_t lo = 0, hi = NSPECS; /* the first row of k */
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (specs[mid].op < k) lo = mid + 1;
    else hi = mid;
  }
  size_t end = lo;
  while (end < NSPECS && specs[end].op == k)
    end++;
  *n = (uint32_t)(end - lo);
  return specs + lo;
}

size_t ir_attr_spec_name(const IrAttrSpec *s, const char **name) {
  size_t n = strlen(s->name);
  *name = s->name;
  return n > 1 && s->name[n - 1] == '_' ? n - 1 : n;
}

int64_t ir_attr_list_int(IrAttrList l, uint32_t i) {
  return i < l.n && l.elems[i]->kind == IR_ATTR_INT ? l.elems[i]->u.i : 0;
}

const char *ir_attr_list_str(IrAttrList l, uint32_t i) {
  return i < l.n && l.elems[i]->kind == IR_ATTR_STR ? l.elems[i]->u.str.s : NULL;
}

/* {======================================================================
** Reading one attribute
** ======================================================================= */

static const IrAttr *find(const IrOp *op, const IrAttrSpec *s) {
  const char *name;
  size_t n = ir_attr_spec_name(s, &name);
  for (uint32_t i = 0; i < op->nattrs; i++)
    if (strncmp(op->attrs[i].name, name, n) == 0 && op->attrs[i].name[n] == '\0')
      return op->attrs[i].attr;
  return NULL;
}

static bool is_list_of(const IrAttr *a, IrAttrKind k) {
  if (a->kind != IR_ATTR_ARRAY) return false;
  for (uint32_t i = 0; i < a->u.arr.n; i++)
    if (a->u.arr.elems[i]->kind != k) return false;
  return true;
}

typedef enum { GOOD, ABSENT, WRONG_KIND, OUT_OF_RANGE } Verdict;

/* The verdict on a present attribute a for row s; *v gets an INT's or ENUM's value. */
static Verdict judge(const IrAttrSpec *s, const IrAttr *a, int64_t *v) {
  switch (s->kind) {
  case IR_AS_INT:
    if (a->kind != IR_ATTR_INT) return WRONG_KIND;
    *v = a->u.i;
    return *v < s->lo || *v > s->hi ? OUT_OF_RANGE : GOOD;
  case IR_AS_BOOL: return a->kind == IR_ATTR_BOOL ? GOOD : WRONG_KIND;
  case IR_AS_ENUM:
    if (a->kind != IR_ATTR_STR) return WRONG_KIND;
    *v = ir_enum_index(s->names, a->u.str.s);
    return *v < 0 ? OUT_OF_RANGE : GOOD;
  case IR_AS_STR: return a->kind == IR_ATTR_STR ? GOOD : WRONG_KIND;
  case IR_AS_INTS:
    if (!is_list_of(a, IR_ATTR_INT)) return WRONG_KIND;
    return a->u.arr.n > (uint64_t)s->hi ? OUT_OF_RANGE : GOOD;
  case IR_AS_STRS: return is_list_of(a, IR_ATTR_STR) ? GOOD : WRONG_KIND;
  case IR_AS_TYPE: return a->kind == IR_ATTR_TYPE ? GOOD : WRONG_KIND;
  case IR_AS_DICT: return a->kind == IR_ATTR_DICT ? GOOD : WRONG_KIND;
  default: return GOOD;
  }
}

/* Store a's value (or the default when a is NULL) into the member at p. */
static void store(const IrAttrSpec *s, const IrAttr *a, int64_t v, char *p) {
  int64_t d = s->dflt == REQ ? 0 : s->dflt;
  switch (s->kind) {
  case IR_AS_INT: *(int64_t *)p = a ? v : d; break;
  case IR_AS_BOOL: *(bool *)p = a ? a->u.b : d != 0; break;
  case IR_AS_ENUM: *(int *)p = (int)(a ? v : s->dflt < 0 ? -1 : s->dflt); break; /* REQ, OPT: -1 */
  case IR_AS_STR: *(const char **)p = a ? a->u.str.s : NULL; break;
  case IR_AS_INTS:
  case IR_AS_STRS: {
    IrAttrList l = {0, NULL};
    if (a) l.n = a->u.arr.n, l.elems = a->u.arr.elems;
    *(IrAttrList *)p = l;
    break;
  }
  case IR_AS_TYPE: *(const IrType **)p = a ? a->u.ty : NULL; break;
  default: *(const IrAttr **)p = a; break;
  }
}

void ir_attrs_read(const IrOp *op, IrOpKind set, void *out, size_t size) {
  if (ir_op_attr_set(op->kind) != set) {
    fprintf(stderr, "tilua: internal error: reading the attributes of '%s' as those of '%s'\n",
            ir_op_name(op), ir_op_info(set)->name);
    abort();
  }
  memset(out, 0, size);
  bool ok = true;
  uint32_t n;
  const IrAttrSpec *s = ir_op_attr_specs(set, &n);
  for (uint32_t i = 0; i < n; i++) {
    const IrAttr *a = find(op, &s[i]);
    int64_t v = 0;
    if (a && judge(&s[i], a, &v) != GOOD) {
      a = NULL;
      ok = false;
    } else if (!a && s[i].dflt == REQ) {
      ok = false;
    }
    store(&s[i], a, v, (char *)out + s[i].offset);
  }
  *(bool *)out = ok;
}

bool ir_op_attr_value(const IrOp *op, const char *name, size_t n, IrAttrValue *out) {
  uint32_t ns;
  const IrAttrSpec *s = ir_op_attr_specs(op->kind, &ns);
  for (uint32_t i = 0; i < ns; i++) {
    const char *sn;
    if (ir_attr_spec_name(&s[i], &sn) != n || strncmp(sn, name, n) != 0) continue;
    union { /* any member of a typed struct */
      int64_t i;
      bool b;
      int e;
      const char *s;
      IrAttrList l;
    } m;
    const IrAttr *a = find(op, &s[i]);
    int64_t v = 0;
    if (a && judge(&s[i], a, &v) != GOOD) a = NULL;
    memset(&m, 0, sizeof m);
    store(&s[i], a, v, (char *)&m);
    out->spec = &s[i];
    out->present = a != NULL;
    out->i = s[i].kind == IR_AS_BOOL ? m.b : s[i].kind == IR_AS_ENUM ? m.e : m.i;
    out->s = s[i].kind == IR_AS_STR ? m.s : s[i].kind == IR_AS_ENUM && m.e >= 0 ? s[i].names[m.e] : NULL;
    return true;
  }
  return false;
}

/* }====================================================================== */

/* {======================================================================
** The generic check
** ======================================================================= */

static const char *const kind_words[] = {"integer", "boolean", "string", "string", "integer array",
                                         "string array", "type", "dictionary", "any"};

/* "a, b, c" of an enum list into buf. */
static const char *choices(const char *const *names, char *buf, size_t n) {
  StrBuf sb;
  sb_init(&sb);
  for (int i = 0; names[i]; i++)
    sb_printf(&sb, "%s%s", i ? ", " : "", names[i]);
  snprintf(buf, n, "%s", sb.data ? sb.data : "");
  sb_free(&sb);
  return buf;
}

static void report(IrOp *op, const IrAttrSpec *s, const IrAttr *a, Verdict v, int64_t val) {
  const char *name;
  int n = (int)ir_attr_spec_name(s, &name);
  char list[256];
  if (v == OUT_OF_RANGE && s->kind == IR_AS_INT) {
    if (s->hi == INT64_MAX)
      ir_op_error(op, "expected %.*s >= %lld, got %lld", n, name, (long long)s->lo, (long long)val);
    else
      ir_op_error(op, "expected %.*s in [%lld, %lld], got %lld", n, name, (long long)s->lo,
                  (long long)s->hi, (long long)val);
  } else if (v == OUT_OF_RANGE && s->kind == IR_AS_ENUM) {
    ir_op_error(op, "unknown %.*s '%s' (one of: %s)", n, name, a->u.str.s,
                choices(s->names, list, sizeof list));
  } else if (s->kind == IR_AS_INTS) {
    ir_op_error(op, "expected '%.*s' to be an array of at most %lld integers", n, name,
                (long long)s->hi);
  } else if (s->kind == IR_AS_ENUM) {
    ir_op_error(op, "expected string attribute '%.*s' (one of: %s)", n, name,
                choices(s->names, list, sizeof list));
  } else {
    ir_op_error(op, "expected %s attribute '%.*s'", kind_words[s->kind], n, name);
  }
}

bool ir_op_check_attrs(IrOp *op) {
  uint32_t n;
  const IrAttrSpec *s = ir_op_attr_specs(op->kind, &n);
  for (uint32_t i = 0; i < n; i++) {
    const IrAttr *a = find(op, &s[i]);
    int64_t v = 0;
    Verdict verdict = a ? judge(&s[i], a, &v) : s[i].dflt == REQ ? ABSENT : GOOD;
    if (verdict == GOOD) continue;
    report(op, &s[i], a, verdict, v);
    return false;
  }
  return true;
}

/* }====================================================================== */
