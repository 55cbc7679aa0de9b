/*
** op_attrs.h -- the typed attribute readers, generated from the ATTR rows of
** the op tables: one struct per op, `ok` and a member per attribute,
**
**   IrAttrs_CUTLASS_PIPELINE_INIT a = ir_attrs_CUTLASS_PIPELINE_INIT(op);
**   a.barrier_id_base, a.mode (a PIPELINE_MODE_* enumerator), a.participants ...
**
** An absent optional attribute reads as its row's default (an ENUM(L, OPT)
** as -1, a STR/TYPE/DICT/ANY as NULL, a list as empty); an absent required
** one as 0, -1 (ENUM) or NULL, with `ok` false. The structural
** verifier checks every row (ir_op_check_attrs), so after verification `ok`
** is true and every value is in range; on unverified IR a malformed value
** reads as its default and `ok` is false. An op with ATTRS_AS(op, other) is
** read with other's reader. Member types by kind: INT int64_t, BOOL bool,
** ENUM int, STR const char *, INTS and STRS IrAttrList, TYPE const IrType *,
** DICT and ANY const IrAttr *.
*/
#ifndef TILUA_OP_ATTRS_H
#define TILUA_OP_ATTRS_H

#include "../ir/ir.h"

#define IR_CT_INT(...) int64_t
#define IR_CT_BOOL(...) bool
#define IR_CT_ENUM(...) int
#define IR_CT_STR(...) const char *
#define IR_CT_INTS(...) IrAttrList
#define IR_CT_STRS(...) IrAttrList
#define IR_CT_TYPE(...) const IrType *
#define IR_CT_DICT(...) const IrAttr *
#define IR_CT_ANY(...) const IrAttr *

/* The structs: each OP row closes the struct before it and opens its own. */
struct IrAttrs__ {
  bool ok;
#define OP(id, ...)                                                                                \
  }                                                                                                \
  ;                                                                                                \
  struct IrAttrs_##id {                                                                            \
    bool ok;
#define ATTR(op, name, spec, doc) IR_CT_##spec name;
#define DTYPE(...)
#include "all.def"
#undef OP
#undef ATTR
#undef DTYPE
};

/* The readers. */
#define OP(id, ...)                                                                                \
  typedef struct IrAttrs_##id IrAttrs_##id;                                                        \
  static inline IrAttrs_##id ir_attrs_##id(const IrOp *op) {                                       \
    IrAttrs_##id a;                                                                                \
    ir_attrs_read(op, OP_##id, &a, sizeof a);                                                      \
    return a;                                                                                      \
  }
#define DTYPE(...)
#include "all.def"
#undef OP
#undef DTYPE

#endif
