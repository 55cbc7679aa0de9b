/*
** diag.c -- diagnostics: severity, location, message and notes. The core
** reports every user error this way and never aborts on bad input.
*/
#include <stdlib.h>
#include <string.h>

#include "ir_impl.h"

static char *vformat(IrContext *ctx, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  char tmp[512];
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  if (n < 0) n = 0;
  char *s = arena_alloc(&ctx->arena, (size_t)n + 1);
  if ((size_t)n < sizeof tmp) memcpy(s, tmp, (size_t)n + 1);
  else vsnprintf(s, (size_t)n + 1, fmt, ap2);
  va_end(ap2);
  return s;
}

IrDiag *ir_diagv(IrContext *ctx, IrSeverity sev, IrLoc loc, const char *fmt, va_list ap) {
  IrDiag *d = arena_alloc(&ctx->arena, sizeof *d);
  d->ctx = ctx;
  d->severity = sev;
  d->loc = loc;
  d->message = vformat(ctx, fmt, ap);
  if (ctx->diag_tail) ctx->diag_tail->next = d;
  else ctx->diag_head = d;
  ctx->diag_tail = d;
  if (sev == IR_SEV_ERROR) ctx->error_count++;
  return d;
}

IrDiag *ir_diag(IrContext *ctx, IrSeverity sev, IrLoc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  IrDiag *d = ir_diagv(ctx, sev, loc, fmt, ap);
  va_end(ap);
  return d;
}

IrDiag *ir_error(IrContext *ctx, IrLoc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  IrDiag *d = ir_diagv(ctx, IR_SEV_ERROR, loc, fmt, ap);
  va_end(ap);
  return d;
}

static IrDiag *op_diag(const IrOp *op, IrSeverity sev, const char *fmt, va_list ap) {
  IrContext *ctx = ir_op_context(op);
  char *msg = vformat(ctx, fmt, ap);
  return ir_diag(ctx, sev, op->loc, "'%s' op %s", ir_op_name(op), msg);
}

/* ir_op_error, ir_op_warning: the variadic fronts of op_diag. */
#define OP_DIAG_FRONT(name, sev)                                                                   \
  IrDiag *name(const IrOp *op, const char *fmt, ...) {                                             \
    va_list ap;                                                                                    \
    va_start(ap, fmt);                                                                             \
    IrDiag *d = op_diag(op, sev, fmt, ap);                                                         \
    va_end(ap);                                                                                    \
    return d;                                                                                      \
  }
OP_DIAG_FRONT(ir_op_error, IR_SEV_ERROR)
OP_DIAG_FRONT(ir_op_warning, IR_SEV_WARNING)
#undef OP_DIAG_FRONT

static void add_note(IrDiag *d, IrLoc loc, const char *fmt, va_list ap) {
  IrDiag *n = arena_alloc(&d->ctx->arena, sizeof *n);
  n->ctx = d->ctx;
  n->severity = IR_SEV_NOTE;
  n->loc = loc;
  n->message = vformat(d->ctx, fmt, ap);
  IrDiag **tail = &d->notes;
  while (*tail) tail = &(*tail)->next;
  *tail = n;
}

void ir_op_note(IrDiag *d, const IrOp *op, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  add_note(d, op->loc, fmt, ap);
  va_end(ap);
}

void ir_note(IrDiag *d, IrLoc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  add_note(d, loc, fmt, ap);
  va_end(ap);
}

void ir_set_diag_handler(IrContext *ctx, IrDiagHandler h, void *ud) {
  ctx->handler = h;
  ctx->handler_ud = ud;
}

IrDiag *ir_diag_pending(IrContext *ctx) { return ctx->diag_head; }

void ir_diag_clear(IrContext *ctx) { ctx->diag_head = ctx->diag_tail = NULL; }

IrDiag *ir_diag_last(IrContext *ctx) { return ctx->diag_tail; }

void ir_diag_drop_after(IrContext *ctx, IrDiag *mark) {
  if (!mark) {
    ir_diag_clear(ctx);
    return;
  }
  mark->next = NULL;
  ctx->diag_tail = mark;
}

void ir_diag_flush(IrContext *ctx) {
  if (!ctx->handler) return;
  for (IrDiag *d = ctx->diag_head; d; d = d->next) ctx->handler(d, ctx->handler_ud);
  ir_diag_clear(ctx);
}

size_t ir_diag_error_count(IrContext *ctx) { return ctx->error_count; }

static const char *sev_name(IrSeverity s) {
  switch (s) {
  case IR_SEV_ERROR: return "error";
  case IR_SEV_WARNING: return "warning";
  case IR_SEV_NOTE: return "note";
  default: return "remark";
  }
}

static void format_one(StrBuf *sb, const IrDiag *d) {
  if (d->loc.file) {
    sb_printf(sb, "%s:", d->loc.file);
    if (d->loc.line) sb_printf(sb, "%d:", d->loc.line);
    if (d->loc.col) sb_printf(sb, "%d:", d->loc.col);
    sb_putc(sb, ' ');
  } else if (d->loc.line) {
    sb_printf(sb, "%d:%d: ", d->loc.line, d->loc.col);
  }
  sb_printf(sb, "%s: %s\n", sev_name(d->severity), d->message);
}

static void format_all(StrBuf *sb, const IrDiag *d) {
  format_one(sb, d);
  for (const IrDiag *n = d->notes; n; n = n->next) format_one(sb, n);
}

void ir_diag_format(const IrDiag *d, FILE *out) {
  StrBuf sb;
  sb_init(&sb);
  format_all(&sb, d);
  if (sb.data) fputs(sb.data, out);
  sb_free(&sb);
}

char *ir_diag_to_string(IrContext *ctx, const IrDiag *d) {
  StrBuf sb;
  sb_init(&sb);
  format_all(&sb, d);
  char *s = arena_strndup(&ctx->arena, sb.data ? sb.data : "", sb.len);
  sb_free(&sb);
  return s;
}

/* {======================================================================
** "Did you mean": the known name nearest a misspelt one
** ======================================================================= */

/* The edit distance (insertions, deletions, substitutions, and swaps of two
** neighbours) between a[0..n) and b[0..m), or max + 1 once it exceeds max. */
static size_t edit_distance(const char *a, size_t n, const char *b, size_t m, size_t max) {
  enum { MAXLEN = 64 };
  if (n > MAXLEN || m > MAXLEN) return max + 1;
  if ((n > m ? n - m : m - n) > max) return max + 1;
  size_t d[MAXLEN + 1][MAXLEN + 1];
  for (size_t i = 0; i <= n; i++) d[i][0] = i;
  for (size_t j = 0; j <= m; j++) d[0][j] = j;
  for (size_t i = 1; i <= n; i++)
    for (size_t j = 1; j <= m; j++) {
      size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
      if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  return d[n][m];
}

/* The name of names[0..count) nearest word[0..len): within a third of its
** length (at least 1, at most 3 edits), or one that word is a prefix of
** (4 letters or more); NULL when none is near enough. Ties go to the first. */
const char *ir_closest_name(const char *word, size_t len, const char *const *names, size_t count) {
  size_t max = len / 3 < 1 ? 1 : len / 3 > 3 ? 3 : len / 3;
  const char *best = NULL;
  size_t best_d = max + 1;
  for (size_t i = 0; i < count; i++) {
    size_t m = strlen(names[i]);
    if (m == len && memcmp(names[i], word, len) == 0) continue; /* the word itself is no suggestion */
    size_t dist = edit_distance(word, len, names[i], m, max);
    if (dist < best_d) {
      best = names[i];
      best_d = dist;
    }
  }
  if (!best && len >= 4)
    for (size_t i = 0; i < count; i++)
      if (strncmp(names[i], word, len) == 0) return names[i];
  return best;
}

/* }====================================================================== */
