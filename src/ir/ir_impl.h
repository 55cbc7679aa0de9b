/*
** ir_impl.h -- the context's private state, shared by the files of src/ir.
*/
#ifndef TILUA_IR_IMPL_H
#define TILUA_IR_IMPL_H

#include "ir.h"

struct IrContext {
  Arena arena;
  HashTable strings, types, attrs;
  const IrType *t_none, *t_index, *t_int[65], *t_float[4];
  IrDiag *diag_head, *diag_tail; /* pending diagnostics */
  IrDiagHandler handler;
  void *handler_ud;
  size_t error_count;
  int target_sm;
  uint64_t
      edits; /* changes to the IR: ops placed, moved or unlinked, operands and attributes set */
  uint32_t stamps; /* the verifier's scope stamps handed out (verify.c) */
};

/* A verifier scope stamp never handed out before in this context (after 2^32
** of them it wraps, skipping 0: a value's mark would have to outlive them all
** to be taken for a new one). */
uint32_t ir_context_stamp(IrContext *ctx);

/* Unique an object by its key bytes: returns the existing object or stores `obj`. */
const void *ir_unique(IrContext *ctx, HashTable *t, const void *key, size_t n, const void *obj);

/* Signature checks (opinfo.c), used by the verifier. */
typedef struct SigMismatch {
  uint32_t index;   /* position that failed */
  const char *want; /* constraint text */
  size_t wantn;
  int count_error; /* 1: too few, 2: too many */
} SigMismatch;
bool ir_sig_check(const char *p, uint32_t n, const IrType *const *types, SigMismatch *mm);
const char *ir_op_sig_results(IrOpKind k);

#endif
