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
**
** A stamp (STAMP rows: attributes passes put on ops of other kinds) has a
** reader of its own:
**
**   IrStamp_TILEAS_PIPELINE p = ir_stamp_TILEAS_PIPELINE(loop);
**   if (p.present) ... p.stages ...
**
** `present` (set on op, well formed), `ok` (false when set but malformed),
** `value` (the attribute read by its row, its default when absent), then a
** member per FIELD row of a DICT stamp (its default when absent).
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
#define STAMP(id, name, spec, check, doc)                                                          \
  }                                                                                                \
  ;                                                                                                \
  struct IrStamp_##id {                                                                            \
    bool ok;                                                                                       \
    bool present;                                                                                  \
    IR_CT_##spec value;
#define FIELD(id, name, spec, doc) IR_CT_##spec name;
#define DTYPE(...)
#include "all.def"
#undef OP
#undef ATTR
#undef STAMP
#undef FIELD
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
#define STAMP(id, name, spec, check, doc)                                                          \
  typedef struct IrStamp_##id IrStamp_##id;                                                        \
  static inline IrStamp_##id ir_stamp_##id(const IrOp *op) {                                       \
    IrStamp_##id s;                                                                                \
    ir_stamp_read(op, STAMP_##id, &s, sizeof s);                                                   \
    return s;                                                                                      \
  }
#include "all.def"
#undef OP
#undef DTYPE
#undef STAMP

#endif
