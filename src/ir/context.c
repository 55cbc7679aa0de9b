/*
** context.c -- the context: owner of the arena, the uniquing tables and the
** diagnostics; string interning; locations.
*/
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "ir_impl.h"

IrContext *ir_context_create(void) {
  IrContext *ctx = ir_calloc_owned(1, sizeof *ctx);
  if (!ctx) return NULL;
  arena_init(&ctx->arena);
  ctx->strings.owned = ctx->types.owned = ctx->attrs.owned = true;
  ctx->target_sm = 90;
  return ctx;
}

void ir_context_destroy(IrContext *ctx) {
  if (!ctx) return;
  hash_free(&ctx->strings);
  hash_free(&ctx->types);
  hash_free(&ctx->attrs);
  arena_free(&ctx->arena);
  ir_free(ctx);
}

Arena *ir_arena(IrContext *ctx) { return &ctx->arena; }
uint32_t ir_context_stamp(IrContext *ctx) { return ++ctx->stamps ? ctx->stamps : ++ctx->stamps; }
int ir_context_target_sm(IrContext *ctx) { return ctx->target_sm; }
void ir_context_set_target_sm(IrContext *ctx, int sm) { ctx->target_sm = sm; }

const char *ir_intern(IrContext *ctx, const char *s, size_t n) {
  uint64_t h = hash_bytes(s, n);
  const char *found = hash_find(&ctx->strings, s, n, h);
  if (found) return found;
  char *copy = arena_strndup(&ctx->arena, s, n);
  hash_insert(&ctx->strings, copy, n, h, copy);
  return copy;
}

const char *ir_intern_cstr(IrContext *ctx, const char *s) { return ir_intern(ctx, s, strlen(s)); }

const void *ir_unique(IrContext *ctx, HashTable *t, const void *key, size_t n, const void *obj) {
  uint64_t h = hash_bytes(key, n);
  const void *found = hash_find(t, key, n, h);
  if (found) return found;
  void *kcopy = arena_alloc(&ctx->arena, n);
  memcpy(kcopy, key, n);
  hash_insert(t, kcopy, n, h, (void *)obj);
  return obj;
}

IrLoc ir_loc(IrContext *ctx, const char *file, int line, int col) {
  IrLoc l = {file ? ir_intern_cstr(ctx, file) : NULL, line, col};
  return l;
}

IrLoc ir_loc_unknown(void) {
  IrLoc l = {NULL, 0, 0};
  return l;
}
