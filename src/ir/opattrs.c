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
  {.op = OP_##o_,                                                                                  \
   .name = #n_,                                                                                    \
   IR_AS_SPEC_##s_,                                                                                \
   .doc = d_,                                                                                      \
   .offset = offsetof(struct IrAttrs_##o_, n_)},
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

bool ir_attr_spec_accepts(const IrAttrSpec *s, const IrAttr *a) {
  int64_t v;
  return judge(s, a, &v) == GOOD;
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
    out->s = s[i].kind == IR_AS_STR                ? m.s
             : s[i].kind == IR_AS_ENUM && m.e >= 0 ? s[i].names[m.e]
                                                   : NULL;
    return true;
  }
  return false;
}

/* }====================================================================== */

/* {======================================================================
** The generic check
** ======================================================================= */

static const char *const kind_words[] = {"integer", "boolean",       "string",
                                         "string",  "integer array", "string array",
                                         "type",    "dictionary",    "any"};

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

/* The diagnostic for verdict v on a (val: an INT's or ENUM's value); `in`
** names the dictionary an entry belongs to ("tileas.pipeline."), else "". */
static void report(IrOp *op, const IrAttrSpec *s, const char *in, const IrAttr *a, Verdict v,
                   int64_t val) {
  const char *name;
  int n = (int)ir_attr_spec_name(s, &name);
  char list[256];
  if (v == OUT_OF_RANGE && s->kind == IR_AS_INT) {
    if (s->hi == INT64_MAX)
      ir_op_error(op, "expected %s%.*s >= %lld, got %lld", in, n, name, (long long)s->lo,
                  (long long)val);
    else
      ir_op_error(op, "expected %s%.*s in [%lld, %lld], got %lld", in, n, name, (long long)s->lo,
                  (long long)s->hi, (long long)val);
  } else if (v == OUT_OF_RANGE && s->kind == IR_AS_ENUM) {
    ir_op_error(op, "unknown %s%.*s '%s' (one of: %s)", in, n, name, a->u.str.s,
                choices(s->names, list, sizeof list));
  } else if (s->kind == IR_AS_INTS) {
    ir_op_error(op, "expected '%s%.*s' to be an array of at most %lld integers", in, n, name,
                (long long)s->hi);
  } else if (s->kind == IR_AS_ENUM) {
    ir_op_error(op, "expected string attribute '%s%.*s' (one of: %s)", in, n, name,
                choices(s->names, list, sizeof list));
  } else {
    ir_op_error(op, "expected %s attribute '%s%.*s'", kind_words[s->kind], in, n, name);
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
    report(op, &s[i], "", a, verdict, v);
    return false;
  }
  return true;
}

/* }====================================================================== */

/* {======================================================================
** Stamps: attributes that passes put on ops of other kinds
** ======================================================================= */

/* The FIELD rows of each stamp, fields_ID[1..]: each STAMP row closes the
** array before it and opens its own (the first element is a placeholder, so
** that a stamp without fields still has an array). */
static const IrAttrSpec fields__[] = {{0}
#define OP(...)
#define DTYPE(...)
#define STAMP(id, nm, k_, check_, doc_)                                                            \
  }                                                                                                \
  ;                                                                                                \
  static const IrAttrSpec fields_##id[] = {{0},
#define FIELD(s_, n_, k_, d_)                                                                      \
  {.name = #n_, IR_AS_SPEC_##k_, .doc = d_, .offset = offsetof(struct IrStamp_##s_, n_)},
#include "../dialects/all.def"
#undef OP
#undef DTYPE
#undef STAMP
#undef FIELD
};

static const IrStampSpec stamps[STAMP__COUNT + 1] = {
#define OP(...)
#define DTYPE(...)
#define STAMP(id, nm, k_, check_, doc_)                                                            \
  [STAMP_##id] = {.name = nm,                                                                      \
                  .value = {.name = nm,                                                            \
                            IR_AS_SPEC_##k_,                                                       \
                            .doc = doc_,                                                           \
                            .offset = offsetof(struct IrStamp_##id, value)},                       \
                  .check = check_,                                                                 \
                  .fields = fields_##id + 1,                                                       \
                  .nfields = sizeof fields_##id / sizeof fields_##id[0] - 1,                       \
                  .doc = doc_},
#include "../dialects/all.def"
#undef OP
#undef DTYPE
#undef STAMP
    /* the end; fields__ is the array before the first STAMP row */
    [STAMP__COUNT] = {.fields = fields__ + 1},
};

/* STAMP_ON rows: which kinds of op may carry which stamp. */
static const struct {
  IrStampKind stamp;
  IrOpKind op;
} stamp_on[] = {
#define OP(...)
#define DTYPE(...)
#define STAMP_ON(s_, o_) {STAMP_##s_, OP_##o_},
#include "../dialects/all.def"
#undef OP
#undef DTYPE
#undef STAMP_ON
};

/* The readers' structs start with `ok` and `present` (ir_stamp_read). */
#define OP(...)
#define DTYPE(...)
#define STAMP(id, ...)                                                                             \
  _Static_assert(offsetof(struct IrStamp_##id, present) == sizeof(bool), "IrStamp_" #id);
#include "../dialects/all.def"
#undef OP
#undef DTYPE
#undef STAMP

const IrStampSpec *ir_stamp_spec(IrStampKind k) { return &stamps[k]; }

uint32_t ir_stamp_ops(IrStampKind k, IrOpKind *out, uint32_t max) {
  uint32_t n = 0;
  for (size_t i = 0; i < sizeof stamp_on / sizeof stamp_on[0]; i++)
    if (stamp_on[i].stamp == k) {
      if (n < max) out[n] = stamp_on[i].op;
      n++;
    }
  return n;
}

static bool stamp_named(const IrStampSpec *st, const char *name, size_t n) {
  return strncmp(st->name, name, n) == 0 && st->name[n] == '\0';
}

int ir_stamp_lookup(IrOpKind k, const char *name, size_t n) {
  for (size_t i = 0; i < sizeof stamp_on / sizeof stamp_on[0]; i++)
    if (stamp_on[i].op == k && stamp_named(&stamps[stamp_on[i].stamp], name, n))
      return (int)stamp_on[i].stamp;
  return -1;
}

/* Does a stamp row's name start with the dialect prefix name[0, n) and a dot? */
static bool stamping_dialect(const char *name, size_t n) {
  for (int k = 0; k < STAMP__COUNT; k++)
    if (strncmp(stamps[k].name, name, n) == 0 && stamps[k].name[n] == '.') return true;
  return false;
}

/* The entry of dictionary d that field row f reads, or NULL. */
static const IrAttr *field_of(const IrAttr *d, const IrAttrSpec *f) {
  const char *name;
  size_t n = ir_attr_spec_name(f, &name);
  for (uint32_t i = 0; d && i < d->u.dict.n; i++)
    if (strncmp(d->u.dict.entries[i].name, name, n) == 0 && d->u.dict.entries[i].name[n] == '\0')
      return d->u.dict.entries[i].attr;
  return NULL;
}

/* "a, b, c": the names of the ops that may carry a stamp called name. */
static const char *placements(const char *name, char *buf, size_t size) {
  StrBuf sb;
  sb_init(&sb);
  for (size_t i = 0; i < sizeof stamp_on / sizeof stamp_on[0]; i++)
    if (strcmp(stamps[stamp_on[i].stamp].name, name) == 0)
      sb_printf(&sb, "%s%s", sb.len ? ", " : "", ir_op_info(stamp_on[i].op)->name);
  snprintf(buf, size, "%s", sb.data ? sb.data : "");
  sb_free(&sb);
  return buf;
}

/* An attribute in a stamping dialect's namespace that no row places on op. */
static void report_unplaced(IrOp *op, const char *name, size_t dialect) {
  char list[512];
  if (*placements(name, list, sizeof list)) {
    ir_op_error(op, "'%s' may only be on %s", name, list);
    return;
  }
  StrBuf sb;
  sb_init(&sb);
  for (int k = 0; k < STAMP__COUNT; k++) {
    bool again = false; /* two rows of one name (for two kinds of op) */
    for (int j = 0; j < k && !again; j++)
      again = strcmp(stamps[j].name, stamps[k].name) == 0;
    if (!again && strncmp(stamps[k].name, name, dialect + 1) == 0)
      sb_printf(&sb, "%s%s", sb.len ? ", " : "", stamps[k].name);
  }
  ir_op_error(op, "unknown attribute '%s' (the %.*s stamps: %s)", name, (int)dialect, name,
              sb.data ? sb.data : "");
  sb_free(&sb);
}

/* The entries of a DICT stamp against its FIELD rows: each known, in range,
** the required ones there. */
static bool check_fields(IrOp *op, const IrStampSpec *st, const IrAttr *d) {
  char in[128];
  snprintf(in, sizeof in, "%s.", st->name);
  for (uint32_t i = 0; i < d->u.dict.n; i++) {
    const char *e = d->u.dict.entries[i].name;
    bool known = false;
    for (uint32_t f = 0; f < st->nfields && !known; f++) {
      const char *fname;
      size_t n = ir_attr_spec_name(&st->fields[f], &fname);
      known = strncmp(e, fname, n) == 0 && e[n] == '\0';
    }
    if (known) continue;
    StrBuf sb;
    sb_init(&sb);
    for (uint32_t f = 0; f < st->nfields; f++)
      sb_printf(&sb, "%s%s", f ? ", " : "", st->fields[f].name);
    ir_op_error(op, "unknown entry '%s' of %s (one of: %s)", e, st->name, sb.data ? sb.data : "");
    sb_free(&sb);
    return false;
  }
  for (uint32_t f = 0; f < st->nfields; f++) {
    const IrAttr *a = field_of(d, &st->fields[f]);
    int64_t v = 0;
    Verdict verdict = a ? judge(&st->fields[f], a, &v) : st->fields[f].dflt == REQ ? ABSENT : GOOD;
    if (verdict == GOOD) continue;
    report(op, &st->fields[f], in, a, verdict, v);
    return false;
  }
  return true;
}

bool ir_op_check_stamps(IrOp *op) {
  for (uint32_t i = 0; i < op->nattrs; i++) {
    const char *name = op->attrs[i].name, *dot = strchr(name, '.');
    if (!dot || !stamping_dialect(name, (size_t)(dot - name))) continue;
    int k = ir_stamp_lookup(op->kind, name, strlen(name));
    if (k < 0) {
      report_unplaced(op, name, (size_t)(dot - name));
      return false;
    }
    const IrStampSpec *st = &stamps[k];
    const IrAttr *a = op->attrs[i].attr;
    int64_t v = 0;
    Verdict verdict = judge(&st->value, a, &v);
    if (verdict != GOOD) {
      report(op, &st->value, "", a, verdict, v);
      return false;
    }
    if (st->nfields && !check_fields(op, st, a)) return false;
    if (st->check(op) != IR_OK) return false;
  }
  return true;
}

void ir_stamp_read(const IrOp *op, IrStampKind k, void *out, size_t size) {
  const IrStampSpec *st = &stamps[k];
  memset(out, 0, size);
  const IrAttr *a = find(op, &st->value);
  int64_t v = 0;
  bool ok = true;
  if (a && judge(&st->value, a, &v) != GOOD) {
    a = NULL;
    ok = false;
  }
  store(&st->value, a, v, (char *)out + st->value.offset);
  for (uint32_t f = 0; f < st->nfields; f++) {
    const IrAttrSpec *fs = &st->fields[f];
    const IrAttr *e = field_of(a, fs);
    int64_t ev = 0;
    if (e && judge(fs, e, &ev) != GOOD) {
      e = NULL;
      ok = false;
    } else if (a && !e && fs->dflt == REQ) {
      ok = false;
    }
    store(fs, e, ev, (char *)out + fs->offset);
  }
  ((bool *)out)[0] = ok;
  ((bool *)out)[1] = a != NULL;
}

/* }====================================================================== */
