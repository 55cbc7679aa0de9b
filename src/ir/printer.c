/*
** printer.c -- the textual form of the IR. Deterministic: values are numbered
** %0, %1, ... in print order, attributes are sorted, floats print in their
** shortest form that reads back to the same value. The grammar:
**
**   op     := (results '=')? name operands? attr-dict? (':' types)? region* loc?
**   region := '{' block* '}'      block := ('^bbN' ('(' args ')')? ':')? op*
**
** Operand types are not printed: every operand is defined earlier in the text.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ir_impl.h"

/* {======================================================================
** Types and attributes
** ======================================================================= */

static const char *const float_names[] = {"f16", "bf16", "f32", "f64"};

static void print_shape(StrBuf *sb, const IrType *t) {
  for (uint32_t i = 0; i < t->rank; i++) {
    if (t->shape[i] == IR_DYNAMIC) sb_putc(sb, '?');
    else sb_printf(sb, "%lld", (long long)t->shape[i]);
    sb_putc(sb, 'x');
  }
  ir_print_type(sb, t->elem);
}

static bool is_ident(const char *s, size_t n) {
  if (!n) return false;
  if (!((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') || s[0] == '_')) return false;
  for (size_t i = 1; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '.' || c == '$'))
      return false;
  }
  return true;
}

void ir_print_type(StrBuf *sb, const IrType *t) {
  switch (t->kind) {
  case IR_TY_NONE: sb_puts(sb, "none"); break;
  case IR_TY_INT: sb_printf(sb, "i%u", t->width); break;
  case IR_TY_FLOAT: sb_puts(sb, float_names[t->fkind]); break;
  case IR_TY_INDEX: sb_puts(sb, "index"); break;
  case IR_TY_PTR:
    sb_puts(sb, "ptr<");
    ir_print_type(sb, t->elem);
    sb_printf(sb, ", %s>", ir_memspace_name(t->space));
    break;
  case IR_TY_VECTOR:
    sb_puts(sb, "vector<");
    print_shape(sb, t);
    sb_putc(sb, '>');
    break;
  case IR_TY_MEMREF:
  case IR_TY_TILE:
    sb_puts(sb, t->kind == IR_TY_MEMREF ? "memref<" : "tile<");
    print_shape(sb, t);
    sb_printf(sb, ", %s", ir_memspace_name(t->space));
    if (t->swizzle) sb_printf(sb, ", swizzle%u", t->swizzle);
    if (t->layout) {
      sb_puts(sb, ", ");
      ir_print_attr(sb, t->layout);
    }
    sb_putc(sb, '>');
    break;
  case IR_TY_DIALECT:
    sb_printf(sb, "!%s", ir_dialect_type_name(t->dialect_type));
    if (t->nparams) {
      sb_putc(sb, '<');
      for (uint32_t i = 0; i < t->nparams; i++) {
        const IrAttr *a = t->params[i];
        if (i) sb_puts(sb, ", ");
        if (a->kind == IR_ATTR_STR && is_ident(a->u.str.s, a->u.str.len))
          sb_putn(sb, a->u.str.s, a->u.str.len); /* keywords print bare: !x.sched<streamk> */
        else
          ir_print_attr(sb, a);
      }
      sb_putc(sb, '>');
    }
    break;
  }
}

static void print_string(StrBuf *sb, const char *s, size_t n) {
  static const char hex[] = "0123456789ABCDEF";
  sb_putc(sb, '"');
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == '"' || c == '\\') {
      sb_putc(sb, '\\');
      sb_putc(sb, (char)c);
    } else if (c == '\n') {
      sb_puts(sb, "\\n");
    } else if (c == '\t') {
      sb_puts(sb, "\\t");
    } else if (c < 32 || c >= 127) {
      sb_putc(sb, '\\');
      sb_putc(sb, hex[c >> 4]);
      sb_putc(sb, hex[c & 15]);
    } else {
      sb_putc(sb, (char)c);
    }
  }
  sb_putc(sb, '"');
}

/* A dictionary key or identifier-like string printed bare, anything else quoted. */
static void print_key(StrBuf *sb, const char *s) {
  size_t n = strlen(s);
  if (is_ident(s, n)) sb_putn(sb, s, n);
  else print_string(sb, s, n);
}

/* Bits of a float value in its own format (for inf and nan). */
static uint64_t float_bits(double v, IrFloatKind k) {
  if (isnan(v)) return ir_float_nan_bits(v, k);
  if (k == IR_F64) {
    uint64_t u;
    memcpy(&u, &v, 8);
    return u;
  }
  float f = (float)v;
  uint32_t u;
  memcpy(&u, &f, 4);
  if (k == IR_F32) return u;
  if (k == IR_BF16) return u >> 16;
  /* f16: only inf comes here */
  return (u >> 31) << 15 | 0x7C00u;
}

static void print_float(StrBuf *sb, double v, IrFloatKind k) {
  if (!isfinite(v)) {
    sb_printf(sb, "0x%llX", (unsigned long long)float_bits(v, k));
    return;
  }
  char buf[64];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (ir_float_round(strtod(buf, NULL), k) == v) break;
  }
  sb_puts(sb, buf);
  if (!strpbrk(buf, ".e")) sb_puts(sb, ".0"); /* keep it a float literal */
}

void ir_print_attr(StrBuf *sb, const IrAttr *a) {
  switch (a->kind) {
  case IR_ATTR_INT:
    sb_printf(sb, "%lld", (long long)a->u.i);
    if (!ir_type_is_int_width(a->type, 64)) {
      sb_puts(sb, " : ");
      ir_print_type(sb, a->type);
    }
    break;
  case IR_ATTR_FLOAT:
    print_float(sb, a->u.f, a->type->fkind);
    if (a->type->fkind != IR_F64 || !isfinite(a->u.f)) { /* hex bits need their type */
      sb_puts(sb, " : ");
      ir_print_type(sb, a->type);
    }
    break;
  case IR_ATTR_BOOL: sb_puts(sb, a->u.b ? "true" : "false"); break;
  case IR_ATTR_STR: print_string(sb, a->u.str.s, a->u.str.len); break;
  case IR_ATTR_SYM:
    sb_putc(sb, '@');
    if (is_ident(a->u.str.s, a->u.str.len)) sb_putn(sb, a->u.str.s, a->u.str.len);
    else print_string(sb, a->u.str.s, a->u.str.len);
    break;
  case IR_ATTR_TYPE: ir_print_type(sb, a->u.ty); break;
  case IR_ATTR_ARRAY:
    sb_putc(sb, '[');
    for (uint32_t i = 0; i < a->u.arr.n; i++) {
      if (i) sb_puts(sb, ", ");
      ir_print_attr(sb, a->u.arr.elems[i]);
    }
    sb_putc(sb, ']');
    break;
  case IR_ATTR_DICT:
    sb_putc(sb, '{');
    for (uint32_t i = 0; i < a->u.dict.n; i++) {
      if (i) sb_puts(sb, ", ");
      print_key(sb, a->u.dict.entries[i].name);
      sb_puts(sb, " = ");
      ir_print_attr(sb, a->u.dict.entries[i].attr);
    }
    sb_putc(sb, '}');
    break;
  }
}

/* }====================================================================== */

/* {======================================================================
** Operations
** ======================================================================= */

typedef struct Printer {
  StrBuf *sb;
  PtrMap names; /* value -> number + 1 */
  uint32_t next;
  const IrPrintOptions *opts;
  int indent;
} Printer;

static void name_value(Printer *p, const IrValue *v) {
  ptrmap_set(&p->names, v, (void *)(uintptr_t)(++p->next));
}

static void print_value(Printer *p, const IrValue *v) {
  uintptr_t n = v ? (uintptr_t)ptrmap_get(&p->names, v) : 0;
  if (n) sb_printf(p->sb, "%%%u", (unsigned)(n - 1));
  else sb_puts(p->sb, v ? "%<outside>" : "%<null>");
}

static void pad(Printer *p, int level) {
  for (int i = 0; i < level * p->indent; i++) sb_putc(p->sb, ' ');
}

static void print_op_at(Printer *p, IrOp *op, int level);

static void print_region(Printer *p, IrRegion *r, int level) {
  sb_puts(p->sb, "{\n");
  uint32_t bi = 0;
  for (IrBlock *b = r->first; b; b = b->next, bi++) {
    for (uint32_t i = 0; i < b->nargs; i++) name_value(p, b->args[i]);
    bool label = b->nargs || !b->first || bi > 0 || b->next;
    if (label) {
      pad(p, level);
      sb_printf(p->sb, "^bb%u", bi);
      if (b->nargs) {
        sb_putc(p->sb, '(');
        for (uint32_t i = 0; i < b->nargs; i++) {
          if (i) sb_puts(p->sb, ", ");
          print_value(p, b->args[i]);
          sb_puts(p->sb, ": ");
          ir_print_type(p->sb, b->args[i]->type);
        }
        sb_putc(p->sb, ')');
      }
      sb_puts(p->sb, ":\n");
    }
    for (IrOp *o = b->first; o; o = o->next) print_op_at(p, o, level + 1);
  }
  pad(p, level);
  sb_putc(p->sb, '}');
}

static void print_loc(Printer *p, IrLoc loc) {
  sb_puts(p->sb, " loc(");
  if (loc.file) print_string(p->sb, loc.file, strlen(loc.file));
  else sb_puts(p->sb, "unknown");
  if (loc.line) sb_printf(p->sb, ":%d", loc.line);
  if (loc.col) sb_printf(p->sb, ":%d", loc.col);
  sb_putc(p->sb, ')');
}

static void print_op_at(Printer *p, IrOp *op, int level) {
  StrBuf *sb = p->sb;
  pad(p, level);
  if (op->nresults) {
    for (uint32_t i = 0; i < op->nresults; i++) {
      name_value(p, &op->results[i]);
      if (i) sb_puts(sb, ", ");
      print_value(p, &op->results[i]);
    }
    sb_puts(sb, " = ");
  }
  sb_puts(sb, ir_op_name(op));
  for (uint32_t i = 0; i < op->noperands; i++) {
    sb_puts(sb, i ? ", " : " ");
    print_value(p, op->operands[i].value);
  }
  if (op->nattrs) {
    sb_puts(sb, " {");
    for (uint32_t i = 0; i < op->nattrs; i++) {
      if (i) sb_puts(sb, ", ");
      print_key(sb, op->attrs[i].name);
      sb_puts(sb, " = ");
      ir_print_attr(sb, op->attrs[i].attr);
    }
    sb_putc(sb, '}');
  }
  if (op->nresults) {
    sb_puts(sb, " : ");
    for (uint32_t i = 0; i < op->nresults; i++) {
      if (i) sb_puts(sb, ", ");
      ir_print_type(sb, op->results[i].type);
    }
  }
  for (uint32_t r = 0; r < op->nregions; r++) {
    sb_putc(sb, ' ');
    print_region(p, &op->regions[r], level);
  }
  if (p->opts && p->opts->locations) print_loc(p, op->loc);
  sb_putc(sb, '\n');
}

void ir_print_op(StrBuf *sb, IrOp *op, const IrPrintOptions *opts) {
  if (ir_op_too_deep(op, IR_MAX_NESTING)) { /* the recursion below would overrun the C stack */
    sb_printf(sb, "// '%s': regions nest more than %d levels deep, not printed\n", ir_op_name(op), IR_MAX_NESTING);
    return;
  }
  Printer p = {.sb = sb, .next = 0, .opts = opts, .indent = 2};
  if (opts && opts->indent > 0) p.indent = opts->indent;
  print_op_at(&p, op, 0);
  ptrmap_free(&p.names);
}

char *ir_op_to_string(IrOp *op, const IrPrintOptions *opts) {
  StrBuf sb;
  sb_init(&sb);
  ir_print_op(&sb, op, opts);
  return sb_take(&sb);
}

char *ir_type_to_string(const IrType *t) {
  StrBuf sb;
  sb_init(&sb);
  ir_print_type(&sb, t);
  return sb_take(&sb);
}

const char *ir_op_type_str(const IrOp *op, const IrType *t) {
  StrBuf sb;
  sb_init(&sb);
  ir_print_type(&sb, t);
  char *s = arena_strndup(ir_arena(ir_op_context(op)), sb.data ? sb.data : "", sb.len);
  sb_free(&sb);
  return s;
}

/* }====================================================================== */
