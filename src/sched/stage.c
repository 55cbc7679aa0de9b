/*
** stage.c -- staged integers (stage.h): known ones are folded here with the
** wrap-around of their width, the others are built by the backend.
*/
#include <stdio.h>
#include <stdlib.h>

#include "stage.h"

/* A value the host needed but a backend was asked to build: a bug of the caller. */
static void *no_backend(void) {
  fprintf(stderr, "tilua: internal error: a staged integer is not known on the host\n");
  abort();
}

void st_not_known(void) { no_backend(); }

void *st_materialize(Stage *s, SInt x) {
  if (!st_known(x)) return x.v;
  if (!s) return no_backend();
  return s->constant(s, x.k, x.bits);
}

SInt st_build_op(Stage *s, StageOp op, SInt a, SInt b) {
  unsigned bits = op >= ST_EQ ? 1 : a.bits;
  if (!s) no_backend();
  return st_value(s->op(s, op, st_materialize(s, a), st_materialize(s, b), bits), bits);
}

SInt st_build_zext(Stage *s, SInt a, unsigned bits) {
  if (!s) no_backend();
  return st_value(s->op(s, ST_ZEXT, a.v, NULL, bits), bits);
}

SInt st_build_select(Stage *s, SInt c, SInt a, SInt b) {
  if (st_known(a) && st_known(b) && a.k == b.k) return a;
  if (!st_known(a) && a.v == b.v) return a;
  if (!s) no_backend();
  return st_value(s->select(s, c.v, st_materialize(s, a), st_materialize(s, b)), a.bits);
}
