/*
** ir.h -- the tilua IR core: context, types, attributes, values, operations,
** blocks, regions, builder, walks, diagnostics, printer and verifier.
**
** Everything is allocated in the context's arena and freed by ir_context_destroy.
** Types and attributes are uniqued: compare them by pointer.
** The core never aborts on bad input: it returns IR_FAIL and appends diagnostics.
** Misuse of this API from C asserts.
*/
#ifndef TILUA_IR_H
#define TILUA_IR_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct IrContext IrContext;
typedef struct IrType IrType;
typedef struct IrAttr IrAttr;
typedef struct IrValue IrValue;
typedef struct IrUse IrUse;
typedef struct IrOp IrOp;
typedef struct IrBlock IrBlock;
typedef struct IrRegion IrRegion;
typedef struct IrDiag IrDiag;

typedef enum { IR_OK = 0, IR_FAIL = 1 } IrResult;

/* A source location: a Lua chunk and line, or line:column of IR text. */
typedef struct IrLoc {
  const char *file; /* interned; NULL = unknown */
  int line, col;    /* 0 = unknown */
} IrLoc;

/* {======================================================================
** Allocation (alloc.c): every allocation of the core goes through these.
** ======================================================================= */

/* Like malloc & co., but a failure never returns NULL: it abandons the
** innermost protected call (below), or aborts when there is none. Free with
** ir_free only. */
void *ir_malloc(size_t n);
void *ir_calloc(size_t n, size_t size);
void *ir_realloc(void *p, size_t n);
void ir_free(void *p);
char *ir_strndup(const char *s, size_t n);
/* Blocks a context keeps until it is destroyed (arena chunks, uniquing tables):
** a failed protected call does not free them. */
void *ir_malloc_owned(size_t n);
void *ir_calloc_owned(size_t n, size_t size);
/* An allocation that needs no new block (an arena request): counted by the
** test mode, and failed when it says so. */
void ir_alloc_tick(void);
/* Fail as an allocation does (a request too large to represent). */
_Noreturn void ir_out_of_memory(void);

/* A protected call: between push and pop, a failed allocation frees the
** scratch blocks allocated since push, sets `failed` and either calls `raise`
** (which must not return: it throws a Lua error) or longjmps to `jb`, which
** the caller set with setjmp right after push. Call pop on both paths.
** A context an abandoned call was changing is left consistent enough to be
** destroyed, nothing more: callers stop using it (see src/api). */
typedef struct IrProtect {
  jmp_buf jb;
  struct IrProtect *prev;
  uint64_t mark;
  void (*raise)(void *ud);
  void *raise_ud;
  bool failed;
} IrProtect;
void ir_protect_push(IrProtect *p, void (*raise)(void *ud), void *ud);
void ir_protect_pop(IrProtect *p);
bool ir_protected(void); /* is a protected call running on this thread? */
/* Did an allocation fail in a protected call still running (a Lua script that
** caught the error)? The bindings then refuse to touch the IR. */
bool ir_protect_failed(void);

/* Test mode: count allocations from now on and fail the n-th (0: never). */
void ir_alloc_fail_at(uint64_t n);
uint64_t ir_alloc_count(void); /* allocations counted since ir_alloc_fail_at */

/* }====================================================================== */

/* {======================================================================
** Arena and string interning
** ======================================================================= */

typedef struct ArenaChunk ArenaChunk;
typedef struct Arena {
  ArenaChunk *head;
  size_t used_total;
} Arena;

void arena_init(Arena *a);
void arena_free(Arena *a);
void *arena_alloc(Arena *a, size_t n); /* zeroed, 16-byte aligned */
char *arena_strndup(Arena *a, const char *s, size_t n);

/* Open-addressing hash set of byte keys -> pointer, used for uniquing. */
typedef struct HashEntry {
  uint64_t hash;
  const void *key;
  size_t keylen;
  void *value;
} HashEntry;
typedef struct HashTable {
  HashEntry *slots;
  size_t cap, count;
  bool owned; /* a context's table: its slots are kept when a protected call fails */
} HashTable;

uint64_t hash_bytes(const void *p, size_t n);
void *hash_find(HashTable *t, const void *key, size_t n, uint64_t h);
void hash_insert(HashTable *t, const void *key, size_t n, uint64_t h, void *value);
void hash_free(HashTable *t);

/* Pointer-keyed map (identity), for value mappings and per-op scratch data. */
typedef struct PtrMapEntry {
  const void *key;
  void *value;
} PtrMapEntry;
typedef struct PtrMap {
  PtrMapEntry *slots;
  size_t cap, count;
} PtrMap;
void *ptrmap_get(const PtrMap *m, const void *key);
void ptrmap_set(PtrMap *m, const void *key, void *value);
void ptrmap_free(PtrMap *m);

/* A growable array of ops (ir_malloc; free with ir_opvec_free). */
typedef struct IrOpVec {
  struct IrOp **v;
  size_t n, cap;
} IrOpVec;
void ir_opvec_push(IrOpVec *v, struct IrOp *op);
void ir_opvec_free(IrOpVec *v);

/* Interned, NUL-terminated copy of s[0..n): equal strings give equal pointers. */
const char *ir_intern(IrContext *ctx, const char *s, size_t n);
const char *ir_intern_cstr(IrContext *ctx, const char *s);

/* }====================================================================== */

/* {======================================================================
** Types
** ======================================================================= */

typedef enum IrTypeKind {
  IR_TY_NONE,   /* none */
  IR_TY_INT,    /* i1 .. i64 (signless) */
  IR_TY_FLOAT,  /* f16 bf16 f32 f64 */
  IR_TY_INDEX,  /* index: a 64-bit machine integer */
  IR_TY_PTR,    /* ptr<elem, space> */
  IR_TY_VECTOR, /* vector<4xf32> */
  IR_TY_MEMREF, /* memref<4x128xi8, shared[, swizzle128]>: addressable memory */
  IR_TY_TILE,   /* tile<64x8xf32, rmem>: a register-resident fragment value */
  IR_TY_DIALECT /* !cutlass.pipeline<...> and friends */
} IrTypeKind;

typedef enum IrFloatKind { IR_F16, IR_BF16, IR_F32, IR_F64 } IrFloatKind;

#define IR_MEMSPACE_LIST(X)                                                                        \
  X(GENERIC, "generic")                                                                            \
  X(GLOBAL, "global")                                                                              \
  X(SHARED, "shared")                                                                              \
  X(CLUSTER, "cluster") /* shared::cluster (distributed shared memory) */                          \
  X(CONST, "const")                                                                                \
  X(LOCAL, "local")                                                                                \
  X(PARAM, "param")                                                                                \
  X(RMEM, "rmem") /* registers */

typedef enum IrMemSpace {
#define X(id, name) IR_MS_##id,
  IR_MEMSPACE_LIST(X)
#undef X
      IR_MS__COUNT
} IrMemSpace;

#define IR_DYNAMIC (-1) /* a dynamic extent in a shape */

struct IrType {
  IrContext *ctx; /* the context that uniqued it */
  IrTypeKind kind;
  uint32_t width;       /* bits: int and float */
  IrFloatKind fkind;    /* float */
  IrMemSpace space;     /* ptr, memref, tile */
  const IrType *elem;   /* ptr, vector, memref, tile */
  uint32_t rank;        /* vector, memref, tile */
  const int64_t *shape; /* rank extents; IR_DYNAMIC for '?' */
  uint32_t swizzle;     /* memref: 0, 32, 64 or 128 (bytes) */
  const IrAttr *layout; /* tile: a dictionary (docs/tileprog.md), NULL = unassigned */
  int dialect_type;     /* IR_DTY_* for IR_TY_DIALECT */
  uint32_t nparams;     /* dialect type parameters */
  const IrAttr *const *params;
};

const IrType *ir_type_none(IrContext *ctx);
const IrType *ir_type_int(IrContext *ctx, uint32_t width);
const IrType *ir_type_float(IrContext *ctx, IrFloatKind k);
const IrType *ir_type_index(IrContext *ctx);
const IrType *ir_type_ptr(IrContext *ctx, const IrType *elem, IrMemSpace space);
const IrType *ir_type_vector(IrContext *ctx, const IrType *elem, uint32_t rank,
                             const int64_t *shape);
const IrType *ir_type_memref(IrContext *ctx, const IrType *elem, uint32_t rank,
                             const int64_t *shape, IrMemSpace space, uint32_t swizzle);
const IrType *ir_type_tile(IrContext *ctx, const IrType *elem, uint32_t rank, const int64_t *shape,
                           IrMemSpace space);
/* A tile type with a layout: a dictionary attribute of the same context, or NULL
** (the same as ir_type_tile). Printed last: tile<128x64xbf16, shared, {kind = "shared"}>. */
const IrType *ir_type_tile_layout(IrContext *ctx, const IrType *elem, uint32_t rank,
                                  const int64_t *shape, IrMemSpace space, const IrAttr *layout);
/* A dialect type; params are checked against the dialect's type table.
** Returns NULL (and sets *err to a static message) when they do not fit. */
const IrType *ir_type_dialect(IrContext *ctx, int dty, uint32_t nparams,
                              const IrAttr *const *params, const char **err);
int ir_dialect_type_lookup(const char *name, size_t len); /* -1 if unknown */
const char *ir_dialect_type_name(int dty);
const char *ir_dialect_type_doc(int dty);
const char *ir_dialect_type_params(int dty); /* the parameter spec, e.g. "int ident" */
int ir_dialect_type_count(void);

bool ir_type_is_int(const IrType *t);     /* i1..i64 */
bool ir_type_is_intlike(const IrType *t); /* int or index */
bool ir_type_is_float(const IrType *t);
bool ir_type_is_int_width(const IrType *t, uint32_t w);
bool ir_type_is_dialect(const IrType *t, int dty);
uint32_t ir_type_bitwidth(const IrType *t); /* int, float, index(64), ptr(64); 0 otherwise */
bool ir_type_has_static_shape(const IrType *t);
int64_t ir_type_num_elements(const IrType *t); /* -1 when dynamic */
/* Integer parameter i of a dialect type (or `dflt` when absent / not an int). */
int64_t ir_type_param_int(const IrType *t, uint32_t i, int64_t dflt);
const char *ir_type_param_str(const IrType *t, uint32_t i); /* NULL if not a string */

const char *ir_memspace_name(IrMemSpace s);
int ir_memspace_lookup(const char *name, size_t len); /* -1 if unknown */

/* }====================================================================== */

/* {======================================================================
** Attributes
** ======================================================================= */

typedef enum IrAttrKind {
  IR_ATTR_INT,   /* 3 : i32  (plain 3 is i64) */
  IR_ATTR_FLOAT, /* 1.5 : f32 (plain 1.5 is f64) */
  IR_ATTR_BOOL,  /* true / false */
  IR_ATTR_STR,   /* "text" */
  IR_ATTR_TYPE,  /* a type */
  IR_ATTR_ARRAY, /* [a, b] */
  IR_ATTR_DICT,  /* {a = 1, b = 2}, keys sorted */
  IR_ATTR_SYM    /* @name */
} IrAttrKind;

typedef struct IrNamedAttr {
  const char *name; /* interned */
  const IrAttr *attr;
} IrNamedAttr;

struct IrAttr {
  IrAttrKind kind;
  const IrType *type; /* int, float */
  union {
    int64_t i;
    double f;
    bool b;
    struct {
      const char *s; /* interned, NUL-terminated; may hold NULs inside len */
      size_t len;
    } str;
    const IrType *ty;
    struct {
      uint32_t n;
      const IrAttr *const *elems;
    } arr;
    struct {
      uint32_t n;
      const IrNamedAttr *entries;
    } dict;
  } u;
};

/* Integers are truncated to the type's width and sign-extended. */
/* Does v fit a width-bit integer, read as signed or as unsigned (as MLIR)? */
bool ir_int_fits(int64_t v, uint32_t width);
const IrAttr *ir_attr_int(IrContext *ctx, int64_t v, const IrType *type);
const IrAttr *ir_attr_i64(IrContext *ctx, int64_t v);
const IrAttr *ir_attr_i32(IrContext *ctx, int64_t v);
/* Floats are rounded to the type's precision. */
const IrAttr *ir_attr_float(IrContext *ctx, double v, const IrType *type);
const IrAttr *ir_attr_bool(IrContext *ctx, bool v);
const IrAttr *ir_attr_str(IrContext *ctx, const char *s, size_t len);
const IrAttr *ir_attr_cstr(IrContext *ctx, const char *s);
const IrAttr *ir_attr_type(IrContext *ctx, const IrType *t);
const IrAttr *ir_attr_sym(IrContext *ctx, const char *s, size_t len);
const IrAttr *ir_attr_array(IrContext *ctx, uint32_t n, const IrAttr *const *elems);
/* Entries are copied and sorted by name; a repeated name keeps the last. */
const IrAttr *ir_attr_dict(IrContext *ctx, uint32_t n, const IrNamedAttr *entries);
const IrAttr *ir_attr_int_array(IrContext *ctx, uint32_t n, const int64_t *v);
const IrAttr *ir_attr_dict_get(const IrAttr *dict, const char *name);
/* Round a double to the precision of a float kind. */
double ir_float_round(double v, IrFloatKind k);
double ir_float_from_bits(uint64_t bits, IrFloatKind k);
/* The bit pattern in kind k of a NaN attribute value (its payload is kept). */
uint64_t ir_float_nan_bits(double v, IrFloatKind k);

/* }====================================================================== */

/* {======================================================================
** Op registry (expanded from the dialect tables in src/dialects/NAME.def)
** ======================================================================= */

/* Traits */
enum {
  T_TERMINATOR = 1u << 0,    /* must end its block */
  T_SAME_TYPE = 1u << 1,     /* all operands and results have one type */
  T_SAME_OPERANDS = 1u << 2, /* all operands have one type */
  T_ISOLATED = 1u << 3,      /* regions cannot see values defined outside */
  T_NO_TERMINATOR = 1u << 4, /* regions need no terminator */
  T_COMMUTATIVE = 1u << 5,
  T_CONSTANT = 1u << 6,     /* materializes its `value` attribute */
  T_DROPPABLE = 1u << 7,    /* has effects, yet may be removed when its results are unused */
  T_RECURSIVE = 1u << 8,    /* effects are those of the ops in its regions */
  T_SINGLE_BLOCK = 1u << 9, /* each region holds at most one block */
  T_SYMBOL = 1u << 10,      /* defines a symbol through its sym_name attribute */
  T_NO_MERGE = 1u << 11     /* never commoned by cse even if otherwise pure */
};

/* Resources an op reads or writes; an op with no effects and no T_RECURSIVE is pure. */
#define IR_RESOURCE_LIST(X)                                                                        \
  X(GLOBAL, "global memory")                                                                       \
  X(SHARED, "shared memory")                                                                       \
  X(LOCAL, "local memory")                                                                         \
  X(BARRIER, "barriers")                                                                           \
  X(CLUSTER, "the cluster barrier")                                                                \
  X(ASYNC, "async groups")                                                                         \
  X(SREG, "volatile special registers")                                                            \
  X(CONTROL, "control flow")

enum {
#define X(id, doc) IR_RES_##id##_BIT,
  IR_RESOURCE_LIST(X)
#undef X
      IR_RES__COUNT
};
#define R(res) (1u << IR_RES_##res##_BIT)        /* reads res */
#define W(res) (1u << (16 + IR_RES_##res##_BIT)) /* writes res */
#define IR_EFF_READ_MASK 0xFFFFu
#define IR_EFF_WRITE_MASK 0xFFFF0000u

typedef IrResult (*IrVerifyFn)(IrOp *op);
/* Fold: return a value that replaces result 0, or NULL; may create ops before `op`
** with the builder passed in (see canonicalize). */
struct IrBuilder;
typedef IrValue *(*IrFoldFn)(struct IrBuilder *b, IrOp *op);

typedef enum IrOpKind {
#define OP(id, ...) OP_##id,
#define DTYPE(id, ...)
#include "../dialects/all.def"
#undef OP
#undef DTYPE
  OP__COUNT
} IrOpKind;

typedef enum IrDialectTypeKind {
#define OP(id, ...)
#define DTYPE(id, ...) IR_DTY_##id,
#include "../dialects/all.def"
#undef OP
#undef DTYPE
  IR_DTY__COUNT
} IrDialectTypeKind;

/* The stamp rows: attributes that passes put on ops of other kinds. */
typedef enum IrStampKind {
#define OP(id, ...)
#define DTYPE(id, ...)
#define STAMP(id, ...) STAMP_##id,
#include "../dialects/all.def"
#undef OP
#undef DTYPE
#undef STAMP
  STAMP__COUNT
} IrStampKind;

typedef struct IrOpInfo {
  const char *name;
  const char *sig; /* "opd opd... -> res" type constraints, see opinfo.c / docs/ir.md */
  int nregions;
  uint32_t traits;
  uint32_t effects;
  IrVerifyFn verify;
  IrFoldFn fold;
  const char *doc;
} IrOpInfo;

const IrOpInfo *ir_op_info(IrOpKind k);
int ir_op_lookup(const char *name, size_t len);          /* -1 if unknown */
const char *ir_op_closest(const char *name, size_t len); /* nearest op name, or NULL */
/* The dialect prefix of an op name ("cutlass" for "cutlass.pipeline.init"). */
size_t ir_op_dialect_len(IrOpKind k);
/* Is k an op of `dialect` ("tile" holds tile.kernel, not tileas.dot)? */
bool ir_op_in_dialect(IrOpKind k, const char *dialect);
/* The nvvm op a tile op becomes one-to-one (its LOWER row), or -1. */
int ir_op_lowers_to(IrOpKind k);
/* The PTX row of an nvvm op: the template the generic emitter expands, or
** (*by_hand) what a case of the emitter writes; NULL without a row. */
const char *ir_op_ptx(IrOpKind k, bool *by_hand);

/* Operand and result counts allowed by an op's signature. max = -1: unbounded. */
typedef struct IrArity {
  int min_operands, max_operands, min_results, max_results;
} IrArity;
IrArity ir_op_arity(IrOpKind k);

/* Attribute rows (ATTR in the op tables; src/ir/opattrs.c). */
typedef enum IrAttrSpecKind {
  IR_AS_INT,  /* INT(default | REQ, lo, hi) */
  IR_AS_BOOL, /* BOOL(default) */
  IR_AS_ENUM, /* ENUM(LIST, default enumerator | OPT | REQ): a string of LIST_names */
  IR_AS_STR,  /* STR(REQ | OPT) */
  IR_AS_INTS, /* INTS(REQ | OPT, at most this many) */
  IR_AS_STRS, /* STRS(REQ | OPT) */
  IR_AS_TYPE, /* TYPE(REQ | OPT) */
  IR_AS_DICT, /* DICT(REQ | OPT) */
  IR_AS_ANY   /* ANY(REQ | OPT): any attribute, its op's verifier decides */
} IrAttrSpecKind;

#define IR_ATTR_REQUIRED INT64_MIN /* `REQ` in a row: no default */

typedef struct IrAttrSpec {
  IrOpKind op;
  const char *name; /* as the row spells it: a trailing '_' (volatile_) is not part of the name */
  IrAttrSpecKind kind;
  int64_t dflt, lo, hi;     /* default (IR_ATTR_REQUIRED: none); INT range; INTS: max length */
  const char *const *names; /* ENUM spellings, NULL-terminated */
  const char *list;         /* ENUM list name */
  size_t offset;            /* of the member in the op's IrAttrs_ struct */
  const char *doc;
} IrAttrSpec;

/* A list attribute as read: n elements (0 when absent). */
typedef struct IrAttrList {
  uint32_t n;
  const IrAttr *const *elems;
} IrAttrList;
int64_t ir_attr_list_int(IrAttrList l, uint32_t i);     /* 0 when not an integer */
const char *ir_attr_list_str(IrAttrList l, uint32_t i); /* NULL when not a string */

/* The op whose rows give k's attributes: k itself unless ATTRS_AS says another. */
IrOpKind ir_op_attr_set(IrOpKind k);
/* The rows of k's attributes (n of them, possibly 0). */
const IrAttrSpec *ir_op_attr_specs(IrOpKind k, uint32_t *n);
/* A row's attribute name and its length (without the trailing '_'). */
size_t ir_attr_spec_name(const IrAttrSpec *s, const char **name);
/* Is a well formed for row s (its kind, range, enum spelling)? */
bool ir_attr_spec_accepts(const IrAttrSpec *s, const IrAttr *a);
/* Check op's attributes against its rows; diagnostics at op. */
bool ir_op_check_attrs(IrOp *op);
/* One attribute of op read by its row: its value, or the row's default. */
typedef struct IrAttrValue {
  const IrAttrSpec *spec;
  bool present;  /* set on op, well formed */
  int64_t i;     /* INT; BOOL 0 or 1; ENUM its index (-1: absent, no default) */
  const char *s; /* STR; ENUM its spelling (NULL when absent) */
} IrAttrValue;
/* false when op's rows declare no attribute `name` (n bytes). */
bool ir_op_attr_value(const IrOp *op, const char *name, size_t n, IrAttrValue *out);
/* Fill a typed struct of src/dialects/op_attrs.h (its `ok` first) from op,
** whose attribute set must be `set`. Use the generated ir_attrs_ID(op). */
void ir_attrs_read(const IrOp *op, IrOpKind set, void *out, size_t size);

/* Stamp rows (STAMP, STAMP_ON and FIELD in the op tables; src/ir/opattrs.c):
** an attribute that passes put on ops of other kinds, as MLIR's dialect
** attributes. Its name carries its dialect ("tileas.stages"); every attribute
** of an op whose name starts with a stamping dialect's prefix must be a row
** that lists the op's kind, of the row's kind and range (a DICT: its entries
** by its FIELD rows), and pass the row's check. */
typedef struct IrStampSpec {
  const char *name;         /* the attribute's name, "tileas.stages" */
  IrAttrSpec value;         /* its kind, default and range (value.name: the name) */
  IrVerifyFn check;         /* what the row cannot say (noverify: nothing more) */
  const IrAttrSpec *fields; /* a DICT's entries: nfields FIELD rows */
  uint32_t nfields;
  const char *doc;
} IrStampSpec;
const IrStampSpec *ir_stamp_spec(IrStampKind k);
/* The kinds of op that may carry stamp k: fills out (at most max), returns how many. */
uint32_t ir_stamp_ops(IrStampKind k, IrOpKind *out, uint32_t max);
/* The stamp row of attribute name (n bytes) on an op of kind k, or -1. */
int ir_stamp_lookup(IrOpKind k, const char *name, size_t n);
/* Check op's stamped attributes against their rows; diagnostics at op. */
bool ir_op_check_stamps(IrOp *op);
/* Fill the struct of a stamp's reader (op_attrs.h: `ok`, `present`, `value`,
** then a DICT's fields) from op. Use the generated ir_stamp_ID(op). */
void ir_stamp_read(const IrOp *op, IrStampKind k, void *out, size_t size);

/* }====================================================================== */

/* {======================================================================
** Values, operations, blocks, regions
** ======================================================================= */

struct IrUse {
  IrValue *value;
  IrOp *owner;
  IrUse *next, **pprev; /* the value's use list */
  uint32_t index;       /* operand position in owner */
};

struct IrValue {
  const IrType *type;
  IrUse *uses;    /* head of the use list */
  IrOp *def;      /* defining op; NULL for a block argument */
  IrBlock *block; /* owning block of a block argument */
  uint32_t index; /* result index or argument index */
  uint32_t mark;  /* the verifier's scope stamps (verify.c): meaningful only while it runs */
};

struct IrOp {
  IrOpKind kind;
  IrLoc loc;
  IrOp *prev, *next; /* in the parent block */
  IrBlock *parent;
  uint32_t noperands, cap_operands;
  IrUse *operands;
  uint32_t nresults;
  IrValue *results;
  uint32_t nregions;
  IrRegion *regions;
  uint32_t nattrs, cap_attrs;
  IrNamedAttr *attrs; /* sorted by name */
  uint64_t mark;      /* scratch for passes */
  bool erased;        /* ir_op_erase'd: its memory stays in the arena, handles must not use it */
};

struct IrBlock {
  IrRegion *parent;
  IrBlock *prev, *next;
  uint32_t nargs, cap_args;
  IrValue **args;
  IrOp *first, *last;
};

struct IrRegion {
  IrOp *parent;
  IrBlock *first, *last;
};

/* Create a detached op. Operands may be NULL only while the op is being built
** (the verifier rejects a missing operand). */
IrOp *ir_op_create(IrContext *ctx, IrOpKind kind, IrLoc loc, uint32_t noperands,
                   IrValue *const *operands, uint32_t nresults, const IrType *const *result_types,
                   uint32_t nregions);
IrContext *ir_op_context(const IrOp *op);
/* How many changes the IR of ctx has had (ops placed, moved or unlinked,
** operands and attributes set): a pass changed something iff it moved. */
uint64_t ir_context_edits(const IrContext *ctx);
const char *ir_op_name(const IrOp *op);
static inline IrValue *ir_op_operand(const IrOp *op, uint32_t i) { return op->operands[i].value; }
static inline IrValue *ir_op_result(IrOp *op, uint32_t i) { return &op->results[i]; }
void ir_op_set_operand(IrOp *op, uint32_t i, IrValue *v);
void ir_op_set_operands(IrOp *op, uint32_t n, IrValue *const *vals);
void ir_op_append_operand(IrOp *op, IrValue *v);
void ir_op_erase_operand(IrOp *op, uint32_t i);

const IrAttr *ir_op_attr(const IrOp *op, const char *name);
/* All the entries of a dictionary attribute as the op's attributes (one copy
** when the op has none yet). */
void ir_op_set_attrs_of_dict(IrOp *op, const IrAttr *dict);
void ir_op_set_attr(IrOp *op, const char *name, const IrAttr *a); /* a == NULL removes */
/* An op's attributes by their meaning: the typed readers of src/dialects/op_attrs.h. */

/* Blocks and regions. */
IrBlock *ir_block_create(IrContext *ctx);
IrValue *ir_block_add_arg(IrContext *ctx, IrBlock *b, const IrType *t);
void ir_region_append_block(IrRegion *r, IrBlock *b);
/* Remove argument i (unused) of b; the arguments after it move down. */
void ir_block_erase_arg(IrBlock *b, uint32_t i);
/* Move every block of src to the end of dst (an op rebuilt with other operands
** or results keeps its regions). */
void ir_region_take(IrRegion *dst, IrRegion *src);
IrBlock *ir_region_entry(IrRegion *r); /* first block or NULL */
/* The entry block, created (with no arguments) if the region is empty. */
IrBlock *ir_region_ensure_block(IrContext *ctx, IrRegion *r);
IrOp *ir_block_terminator(IrBlock *b); /* last op if it is a terminator, else NULL */
IrOp *ir_block_parent_op(const IrBlock *b);
IrOp *ir_op_parent_op(const IrOp *op);
/* Nearest enclosing op of a kind, or NULL. */
IrOp *ir_op_ancestor(const IrOp *op, IrOpKind kind);
bool ir_op_is_ancestor(const IrOp *anc, const IrOp *op); /* anc encloses op (or equals) */

/* Linking. */
void ir_block_append(IrBlock *b, IrOp *op);
void ir_block_prepend(IrBlock *b, IrOp *op);
void ir_op_insert_before(IrOp *pos, IrOp *op);
void ir_op_insert_after(IrOp *pos, IrOp *op);
void ir_op_unlink(IrOp *op);
void ir_op_move_before(IrOp *op, IrOp *pos);
/* Drop all uses held by op and ops nested in it, unlink it. Its results must be unused. */
void ir_op_erase(IrOp *op);
bool ir_value_has_uses(const IrValue *v);
uint32_t ir_value_num_uses(const IrValue *v);
bool ir_op_results_unused(const IrOp *op);
void ir_value_replace_all_uses(IrValue *from, IrValue *to);
/* Clone op (and nested regions). map: values of the source -> values of the clone;
** operands not in map are kept. The mapping gains the clone's results and block args. */
typedef struct IrMapping {
  PtrMap m;
} IrMapping;
void ir_mapping_init(IrMapping *m);
void ir_mapping_free(IrMapping *m);
void ir_mapping_set(IrMapping *m, const IrValue *from, IrValue *to);
IrValue *ir_mapping_get(IrMapping *m, const IrValue *from); /* NULL if unmapped */
IrOp *ir_op_clone(IrContext *ctx, IrOp *op, IrMapping *map);
/* Clone the blocks of src into dst (dst must be empty). */
void ir_region_clone_into(IrContext *ctx, IrRegion *src, IrRegion *dst, IrMapping *map);

/* Walks. The callback may erase the op it is given in a post-order walk.
** Return false from the callback to stop the walk. */
typedef bool (*IrWalkFn)(IrOp *op, void *ud);
bool ir_walk_pre(IrOp *root, IrWalkFn fn, void *ud);
bool ir_walk_post(IrOp *root, IrWalkFn fn, void *ud);
#define IR_FOR_EACH_OP(op, block)                                                                  \
  for (IrOp *op = (block)->first, *op##_next_ = op ? op->next : NULL; op;                          \
       op = op##_next_, op##_next_ = op ? op->next : NULL)

/* Effects of an op, recursive ops included. */
uint32_t ir_op_effects(const IrOp *op);
bool ir_op_is_pure(const IrOp *op);
/* Can op be removed when its results are unused? */
bool ir_op_is_removable(const IrOp *op);

/* }====================================================================== */

/* {======================================================================
** Builder: an insertion point, a location and a context
** ======================================================================= */

typedef struct IrBuilder {
  IrContext *ctx;
  IrBlock *block; /* insert into this block ... */
  IrOp *before;   /* ... before this op, or at the end when NULL */
  IrLoc loc;
} IrBuilder;

void ir_builder_init(IrBuilder *b, IrContext *ctx);
void ir_builder_at_end(IrBuilder *b, IrBlock *block);
void ir_builder_at_start(IrBuilder *b, IrBlock *block);
void ir_builder_before(IrBuilder *b, IrOp *op);
void ir_builder_after(IrBuilder *b, IrOp *op);
IrOp *ir_builder_insert(IrBuilder *b, IrOp *op);
/* Create and insert an op at the builder's point with the builder's location. */
IrOp *ir_build(IrBuilder *b, IrOpKind kind, uint32_t noperands, IrValue *const *operands,
               uint32_t nresults, const IrType *const *result_types, uint32_t nregions);
/* Shorthands for the common cases. */
IrValue *ir_build_const_int(IrBuilder *b, int64_t v, const IrType *t);
IrValue *ir_build_const_float(IrBuilder *b, double v, const IrType *t);
IrValue *ir_build_binary(IrBuilder *b, IrOpKind kind, IrValue *lhs, IrValue *rhs);
IrValue *ir_build_unary(IrBuilder *b, IrOpKind kind, IrValue *x, const IrType *result);
IrValue *ir_build_cmpi(IrBuilder *b, const char *pred, IrValue *lhs, IrValue *rhs);
IrValue *ir_build_select(IrBuilder *b, IrValue *c, IrValue *t, IrValue *f);
IrOp *ir_build_module(IrBuilder *b);

/* }====================================================================== */

/* {======================================================================
** Diagnostics
** ======================================================================= */

typedef enum IrSeverity { IR_SEV_ERROR, IR_SEV_WARNING, IR_SEV_NOTE, IR_SEV_REMARK } IrSeverity;

struct IrDiag {
  IrContext *ctx;
  IrSeverity severity;
  IrLoc loc;
  char *message; /* arena */
  IrDiag *notes; /* attached notes, in order */
  IrDiag *next;  /* next diagnostic (or next note) */
};

/* Called for every diagnostic as it is completed (see ir_diag_flush). */
typedef void (*IrDiagHandler)(const IrDiag *d, void *ud);

IrDiag *ir_diag(IrContext *ctx, IrSeverity sev, IrLoc loc, const char *fmt, ...);
IrDiag *ir_diagv(IrContext *ctx, IrSeverity sev, IrLoc loc, const char *fmt, va_list ap);
IrDiag *ir_error(IrContext *ctx, IrLoc loc, const char *fmt, ...);
/* "'dialect.op' op <message>" at the op's location. */
IrDiag *ir_op_error(const IrOp *op, const char *fmt, ...);
IrDiag *ir_op_warning(const IrOp *op, const char *fmt, ...);
/* A check of op: ok, or the error ir_op_error(op, fmt, ...) and false. */
#define ir_op_require(op, ok, ...) ((ok) || (ir_op_error(op, __VA_ARGS__), false))
void ir_note(IrDiag *d, IrLoc loc, const char *fmt, ...);
void ir_op_note(IrDiag *d, const IrOp *op, const char *fmt, ...);
/* Deliver pending diagnostics to the handler (if one is set) and clear them. */
void ir_diag_flush(IrContext *ctx);
void ir_set_diag_handler(IrContext *ctx, IrDiagHandler h, void *ud);
/* Pending diagnostics (when no handler is set they accumulate here). */
IrDiag *ir_diag_pending(IrContext *ctx);
void ir_diag_clear(IrContext *ctx);
/* The last pending diagnostic (NULL: none), and dropping the ones after it. */
IrDiag *ir_diag_last(IrContext *ctx);
void ir_diag_drop_after(IrContext *ctx, IrDiag *mark);
size_t ir_diag_error_count(IrContext *ctx); /* errors emitted since creation */
/* "file:line:col: error: message" plus notes, one per line. */
void ir_diag_format(const IrDiag *d, FILE *out);
char *ir_diag_to_string(IrContext *ctx, const IrDiag *d); /* arena string */
/* For "did you mean": the name of names[0..count) nearest word[0..len) (a few
** edits, or a prefix), or NULL when none is near. */
const char *ir_closest_name(const char *word, size_t len, const char *const *names, size_t count);

/* }====================================================================== */

/* {======================================================================
** Context
** ======================================================================= */

IrContext *ir_context_create(void);
void ir_context_destroy(IrContext *ctx);
Arena *ir_arena(IrContext *ctx);
IrLoc ir_loc(IrContext *ctx, const char *file, int line, int col);
IrLoc ir_loc_unknown(void);

/* Options read by several passes; targets as an SM number (90 = sm_90a). */
int ir_context_target_sm(IrContext *ctx);
void ir_context_set_target_sm(IrContext *ctx, int sm);

/* }====================================================================== */

/* {======================================================================
** Printer and verifier
** ======================================================================= */

typedef struct IrPrintOptions {
  bool locations; /* append loc("file":line:col) to each op */
  int indent;     /* spaces per level, default 2 */
} IrPrintOptions;

/* A growable string buffer used by the printer and emitters. */
typedef struct StrBuf {
  char *data;
  size_t len, cap;
} StrBuf;
void sb_init(StrBuf *sb);
void sb_free(StrBuf *sb);
void sb_putc(StrBuf *sb, char c);
void sb_puts(StrBuf *sb, const char *s);
void sb_putn(StrBuf *sb, const char *s, size_t n);
/* Decimal integers, as "%llu" / "%lld" print them (without vsnprintf: the PTX
** emitter writes one or more a register name). */
void sb_put_u64(StrBuf *sb, unsigned long long v);
void sb_put_i64(StrBuf *sb, long long v);
void sb_printf(StrBuf *sb, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
char *sb_take(StrBuf *sb); /* the caller frees it with ir_free */

void ir_print_type(StrBuf *sb, const IrType *t);
void ir_print_attr(StrBuf *sb, const IrAttr *a);
void ir_print_op(StrBuf *sb, IrOp *op, const IrPrintOptions *opts);
char *ir_op_to_string(IrOp *op, const IrPrintOptions *opts); /* free with ir_free */
char *ir_type_to_string(const IrType *t);                    /* free with ir_free */
/* t's text in the arena of op's context, for diagnostics about op: no free. */
const char *ir_op_type_str(const IrOp *op, const IrType *t);

/* Ops nest at most this deep under a root (the verifier, the printer and the
** passes recurse once per level: about 400 bytes of C stack each in a normal
** build). The parser, the Lua builder and the C API refuse deeper nesting;
** the verifier reports it (found without recursion) before it recurses. */
#define IR_MAX_NESTING 2048
/* A tile (register or shared, tile<...>) holds at most this many elements, and
** its extents are at least 1: every size, index and byte count the tile
** passes compute from a tile's shape then fits 64 bits (the verifier checks
** every result). */
#define IR_MAX_TILE_ELEMENTS (1 << 24)
/* The first op nested more than limit levels under root, or NULL (no recursion). */
IrOp *ir_op_too_deep(IrOp *root, uint32_t limit);
/* How many ops enclose op (0 for a detached or top-level op). */
uint32_t ir_op_depth(const IrOp *op);

/* Verify op and everything nested in it: structure from the op tables, SSA
** dominance, then each op's own verifier. Diagnostics go to the context. */
IrResult ir_verify(IrOp *root);
/* Only the op's operand and result counts and types (no regions, no nesting). */
IrResult ir_verify_signature(IrOp *op);
/* Check values against a type constraint token of the signature language. */
bool ir_type_matches(const IrType *t, const char *constraint, size_t len);

#endif
