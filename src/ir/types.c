/*
** types.c -- uniqued types. Each type is built as a key of its fields; equal
** keys give the same IrType, so types compare by pointer.
*/
#include <assert.h>
#include <string.h>

#include "checked.h"
#include "ir_impl.h"

/* {======================================================================
** Dialect type table (from the DTYPE rows of src/dialects/NAME.def)
** ======================================================================= */

typedef struct DialectTypeInfo {
  const char *name, *params, *doc;
} DialectTypeInfo;

static const DialectTypeInfo dialect_types[] = {
#define OP(...)
#define DTYPE(id, name, params, doc) {name, params, doc},
#include "../dialects/all.def"
#undef OP
#undef DTYPE
    {NULL, NULL, NULL}};

int ir_dialect_type_count(void) { return IR_DTY__COUNT; }
const char *ir_dialect_type_name(int dty) { return dialect_types[dty].name; }
const char *ir_dialect_type_doc(int dty) { return dialect_types[dty].doc; }
const char *ir_dialect_type_params(int dty) { return dialect_types[dty].params; }

int ir_dialect_type_lookup(const char *name, size_t len) {
  for (int i = 0; i < IR_DTY__COUNT; i++)
    if (strlen(dialect_types[i].name) == len && memcmp(dialect_types[i].name, name, len) == 0)
      return i;
  return -1;
}

/* }====================================================================== */

static const char *const memspace_names[] = {
#define X(id, name) name,
    IR_MEMSPACE_LIST(X)
#undef X
};

const char *ir_memspace_name(IrMemSpace s) { return memspace_names[s]; }

int ir_memspace_lookup(const char *name, size_t len) {
  for (int i = 0; i < IR_MS__COUNT; i++)
    if (strlen(memspace_names[i]) == len && memcmp(memspace_names[i], name, len) == 0) return i;
  return -1;
}

/* {======================================================================
** Uniquing
** ======================================================================= */

typedef struct TypeKey {
  unsigned char buf[512];
  size_t n;
  bool overflow;
} TypeKey;

static void key_put(TypeKey *k, const void *p, size_t n) {
  if (k->n + n > sizeof k->buf) {
    k->overflow = true;
    return;
  }
  memcpy(k->buf + k->n, p, n);
  k->n += n;
}

static const IrType *unique_type(IrContext *ctx, const IrType *proto) {
  TypeKey k = {.n = 0, .overflow = false};
  uint32_t kind = proto->kind, fk = proto->fkind, sp = proto->space;
  key_put(&k, &kind, sizeof kind);
  key_put(&k, &proto->width, sizeof proto->width);
  key_put(&k, &fk, sizeof fk);
  key_put(&k, &sp, sizeof sp);
  key_put(&k, &proto->elem, sizeof proto->elem);
  key_put(&k, &proto->rank, sizeof proto->rank);
  for (uint32_t i = 0; i < proto->rank; i++) key_put(&k, &proto->shape[i], sizeof(int64_t));
  key_put(&k, &proto->swizzle, sizeof proto->swizzle);
  key_put(&k, &proto->layout, sizeof proto->layout); /* attributes are uniqued too */
  key_put(&k, &proto->dialect_type, sizeof proto->dialect_type);
  key_put(&k, &proto->nparams, sizeof proto->nparams);
  for (uint32_t i = 0; i < proto->nparams; i++) key_put(&k, &proto->params[i], sizeof(void *));
  assert(!k.overflow && "type key too large");
  uint64_t h = hash_bytes(k.buf, k.n);
  const IrType *found = hash_find(&ctx->types, k.buf, k.n, h);
  if (found) return found;
  IrType *t = arena_alloc(&ctx->arena, sizeof *t);
  *t = *proto;
  t->ctx = ctx;
  if (proto->rank) {
    int64_t *shape = arena_alloc(&ctx->arena, proto->rank * sizeof(int64_t));
    memcpy(shape, proto->shape, proto->rank * sizeof(int64_t));
    t->shape = shape;
  }
  if (proto->nparams) {
    const IrAttr **ps = arena_alloc(&ctx->arena, proto->nparams * sizeof(void *));
    memcpy(ps, proto->params, proto->nparams * sizeof(void *));
    t->params = ps;
  }
  void *kcopy = arena_alloc(&ctx->arena, k.n);
  memcpy(kcopy, k.buf, k.n);
  hash_insert(&ctx->types, kcopy, k.n, h, t);
  return t;
}

const IrType *ir_type_none(IrContext *ctx) {
  if (!ctx->t_none) ctx->t_none = unique_type(ctx, &(IrType){.kind = IR_TY_NONE});
  return ctx->t_none;
}

const IrType *ir_type_int(IrContext *ctx, uint32_t width) {
  assert(width >= 1 && width <= 64);
  if (!ctx->t_int[width])
    ctx->t_int[width] = unique_type(ctx, &(IrType){.kind = IR_TY_INT, .width = width});
  return ctx->t_int[width];
}

static const uint32_t float_widths[] = {16, 16, 32, 64};

const IrType *ir_type_float(IrContext *ctx, IrFloatKind k) {
  if (!ctx->t_float[k])
    ctx->t_float[k] =
        unique_type(ctx, &(IrType){.kind = IR_TY_FLOAT, .width = float_widths[k], .fkind = k});
  return ctx->t_float[k];
}

const IrType *ir_type_index(IrContext *ctx) {
  if (!ctx->t_index) ctx->t_index = unique_type(ctx, &(IrType){.kind = IR_TY_INDEX, .width = 64});
  return ctx->t_index;
}

const IrType *ir_type_ptr(IrContext *ctx, const IrType *elem, IrMemSpace space) {
  return unique_type(ctx, &(IrType){.kind = IR_TY_PTR, .elem = elem, .space = space});
}

static const IrType *shaped(IrContext *ctx, IrTypeKind kind, const IrType *elem, uint32_t rank,
                            const int64_t *shape, IrMemSpace space, uint32_t swizzle,
                            const IrAttr *layout) {
  assert(rank <= 16);
  return unique_type(ctx, &(IrType){.kind = kind,
                                    .elem = elem,
                                    .rank = rank,
                                    .shape = shape,
                                    .space = space,
                                    .swizzle = swizzle,
                                    .layout = layout});
}

const IrType *ir_type_vector(IrContext *ctx, const IrType *elem, uint32_t rank,
                             const int64_t *shape) {
  return shaped(ctx, IR_TY_VECTOR, elem, rank, shape, IR_MS_RMEM, 0, NULL);
}

const IrType *ir_type_memref(IrContext *ctx, const IrType *elem, uint32_t rank,
                             const int64_t *shape, IrMemSpace space, uint32_t swizzle) {
  return shaped(ctx, IR_TY_MEMREF, elem, rank, shape, space, swizzle, NULL);
}

const IrType *ir_type_tile(IrContext *ctx, const IrType *elem, uint32_t rank, const int64_t *shape,
                           IrMemSpace space) {
  return shaped(ctx, IR_TY_TILE, elem, rank, shape, space, 0, NULL);
}

const IrType *ir_type_tile_layout(IrContext *ctx, const IrType *elem, uint32_t rank,
                                  const int64_t *shape, IrMemSpace space, const IrAttr *layout) {
  assert(!layout || layout->kind == IR_ATTR_DICT);
  return shaped(ctx, IR_TY_TILE, elem, rank, shape, space, 0, layout);
}

/* Does one parameter fit one token of a DTYPE parameter spec? */
static bool param_fits(const IrAttr *a, const char *tok, size_t n) {
  if (n == 3 && !memcmp(tok, "any", 3)) return true;
  if (n == 3 && !memcmp(tok, "int", 3)) return a->kind == IR_ATTR_INT;
  if (n == 5 && !memcmp(tok, "ident", 5)) return a->kind == IR_ATTR_STR;
  if (n == 4 && !memcmp(tok, "type", 4)) return a->kind == IR_ATTR_TYPE;
  return false;
}

const IrType *ir_type_dialect(IrContext *ctx, int dty, uint32_t nparams, const IrAttr *const *params,
                              const char **err) {
  assert(dty >= 0 && dty < IR_DTY__COUNT);
  const char *spec = dialect_types[dty].params;
  uint32_t i = 0;
  const char *p = spec;
  while (*p) {
    while (*p == ' ') p++;
    if (!*p) break;
    const char *tok = p;
    while (*p && *p != ' ') p++;
    size_t n = (size_t)(p - tok);
    bool many = n > 3 && !memcmp(tok + n - 3, "...", 3);
    bool opt = n > 1 && tok[n - 1] == '?';
    if (many) n -= 3;
    else if (opt) n -= 1;
    if (many) {
      for (; i < nparams; i++)
        if (!param_fits(params[i], tok, n)) goto bad;
      break;
    }
    if (i >= nparams) {
      if (opt) continue;
      if (err) *err = "too few type parameters";
      return NULL;
    }
    if (!param_fits(params[i], tok, n)) goto bad;
    i++;
  }
  if (i < nparams) {
    if (err) *err = "too many type parameters";
    return NULL;
  }
  return unique_type(ctx, &(IrType){.kind = IR_TY_DIALECT,
                                    .dialect_type = dty,
                                    .nparams = nparams,
                                    .params = params});
bad:
  if (err) *err = "type parameter of the wrong kind";
  return NULL;
}

/* }====================================================================== */

bool ir_type_is_int(const IrType *t) { return t && t->kind == IR_TY_INT; }
bool ir_type_is_intlike(const IrType *t) {
  return t && (t->kind == IR_TY_INT || t->kind == IR_TY_INDEX);
}
bool ir_type_is_float(const IrType *t) { return t && t->kind == IR_TY_FLOAT; }
bool ir_type_is_int_width(const IrType *t, uint32_t w) {
  return t && t->kind == IR_TY_INT && t->width == w;
}
bool ir_type_is_dialect(const IrType *t, int dty) {
  return t && t->kind == IR_TY_DIALECT && t->dialect_type == dty;
}

uint32_t ir_type_bitwidth(const IrType *t) {
  switch (t->kind) {
  case IR_TY_INT:
  case IR_TY_FLOAT: return t->width;
  case IR_TY_INDEX:
  case IR_TY_PTR: return 64;
  default: return 0;
  }
}

bool ir_type_has_static_shape(const IrType *t) {
  if (t->kind != IR_TY_VECTOR && t->kind != IR_TY_MEMREF && t->kind != IR_TY_TILE) return false;
  for (uint32_t i = 0; i < t->rank; i++)
    if (t->shape[i] == IR_DYNAMIC) return false;
  return true;
}

int64_t ir_type_num_elements(const IrType *t) {
  if (!ir_type_has_static_shape(t)) return -1;
  int64_t n = 1;
  for (uint32_t i = 0; i < t->rank; i++)
    if (!ck_mul(n, t->shape[i], &n)) return -1; /* absurd shapes count as dynamic */
  return n;
}

int64_t ir_type_param_int(const IrType *t, uint32_t i, int64_t dflt) {
  if (!t || t->kind != IR_TY_DIALECT || i >= t->nparams) return dflt;
  const IrAttr *a = t->params[i];
  return a->kind == IR_ATTR_INT ? a->u.i : dflt;
}

const char *ir_type_param_str(const IrType *t, uint32_t i) {
  if (!t || t->kind != IR_TY_DIALECT || i >= t->nparams) return NULL;
  const IrAttr *a = t->params[i];
  return a->kind == IR_ATTR_STR ? a->u.str.s : NULL;
}
