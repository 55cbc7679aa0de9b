/*
** dialects.h -- prototypes of the verifiers, folders, kernel rules and stamp
** checks named in the dialect tables, generated from the tables themselves;
** the enum lists, the target's limits and the typed attribute readers come
** with it.
*/
#ifndef TILUA_DIALECTS_H
#define TILUA_DIALECTS_H

#include "../ir/ir.h"

IrResult noverify(IrOp *op);
IrValue *nofold(IrBuilder *b, IrOp *op);

#define OP(id, name, sig, nreg, traits, effects, verify, fold, doc)                                \
  IrResult verify(IrOp *op);                                                                       \
  IrValue *fold(IrBuilder *b, IrOp *op);
#define DTYPE(...)
#define KRULE(fn, doc) IrResult fn(IrOp *kernel);
#define STAMP(id, name, spec, check, doc) IrResult check(IrOp *op);
#include "all.def"
#undef OP
#undef DTYPE
#undef KRULE
#undef STAMP

#include "enums.h"
#include "op_attrs.h"
#include "sm90_limits.h"

/* Helpers shared by dialect verifiers. */
/* Is a constant integer: stores it. */
bool dia_const_int(IrValue *v, int64_t *out);
/* Bytes a value of type t takes in memory (i1 = 1, index and pointers = 8, vectors
** = elements * element); 0 for types that have no memory form. */
int64_t dia_type_bytes(const IrType *t);
/* The same, and for a memref or tile of static shape the bytes of all its
** elements (0 when its shape is dynamic). */
int64_t dia_type_storage_bytes(const IrType *t);
/* Is s[0..len) a PTX identifier (a letter, '_' or '$', then letters, digits,
** '_' or '$'; no NUL inside; not '_' or '$' alone, not the predefined WARP_SZ)?
** Kernel names become `.entry` names. */
bool dia_ptx_ident(const char *s, size_t len);
/* Can one ld/st move a value of type v (a scalar, or a vector of 4, 8 or 16
** bytes of non-i1 elements, at most 4 of them when 32 bits or wider)? Emits the
** error when not. */
bool dia_check_mem_value(IrOp *op, const IrType *v);
/* An error naming one type (fmt holds a single %s for it); IR_FAIL. */
IrResult dia_type_error(IrOp *op, const char *fmt, const IrType *t);
/* The kernel-wide synchronization checks of a tile.kernel (tile_sync.c):
** distributed shared memory before the cluster barrier, reads of what other
** threads wrote with no barrier in between. false after an error. */
bool tile_check_sync(IrOp *kernel);

/* Warp-wide ops and load hints (tile_warp.c): the PTX instruction of a verified
** tile.math / nvvm.math.approx; are a load's cache hints allowed (else the
** error at op)? cache and evict are -1 when absent. */
const char *tile_math_instruction(IrOp *op);
bool tile_check_load_hints(IrOp *op, bool global, bool vol, int cache, int evict, bool nc,
                           int64_t prefetch);
/* A store's: global memory only, not volatile; cache cg or cs, or an eviction priority. */
bool tile_check_store_hints(IrOp *op, bool global, bool vol, int cache, int evict);
/* The inline-asm constraint letter (h r l f d) of the registers of a type, 0 if none (nvvm.c). */
char nvvm_constraint_of(const IrType *t);

/* Tensor maps (tile_mma.c): is t a well-formed !tile.tensor_map (else the error
** at op)? Its box rank (0 if not a map), box bytes, and the bytes of a swizzle
** name ("none" 0, "sw32" 32, ...; -1 if unknown). */
bool tile_check_tensor_map(IrOp *op, const IrType *t);
int tile_tensor_map_rank(const IrType *t);
int64_t tile_tensor_map_box_bytes(const IrType *t);
int64_t tile_swizzle_bytes(const char *s);

/* The tile-program level (tileas.c): is the layout of a tile type well formed, is
** t a well-formed !tileas.tensor (else the error at op)? */
bool tileas_check_layout(IrOp *op, const IrType *t);
bool tileas_check_tensor(IrOp *op, const IrType *t);

#endif
