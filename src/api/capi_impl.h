/*
** capi_impl.h -- what the files of the C API share: the context record, the
** registry of live contexts, the argument checks of the contract (src/tilua.h)
** and protected calls.
*/
#ifndef TILUA_CAPI_IMPL_H
#define TILUA_CAPI_IMPL_H

#include <lua.h>

#include "../ir/ir.h"
#include "../tilua.h"

typedef struct LbContext LbContext;
typedef struct TlDevice TlDevice; /* capi_device.c */

typedef struct TlCtx {
  IrContext *ir;
  uint64_t serial;   /* in every handle made here; never reused */
  lua_State *L;      /* for parsing and scripts, made on first use */
  int lua_ctx_ref;   /* registry ref pinning the Lua wrapper of ir (the default context) */
  LbContext *lua_ctx;
  tlDiagnosticHandler handler;
  void *ud;
  bool broken;       /* an allocation failed in a call that was changing it */
  TlDevice *device;  /* tlDeviceOpen's, closed with the context */
  struct TlCtx *next; /* the registry */
} TlCtx;

/* The live context with this serial, or NULL (destroyed, or 0). */
TlCtx *tl_live(uint64_t serial);

/* The context of a handle's serial for function fn: NULL for the null handle
** (silently) and for a destroyed context (printed to stderr); a broken
** context reports and gives NULL. */
TlCtx *tl_enter(uint64_t serial, const void *ptr, const char *fn);

/* Report "fn: message" as an error of c (delivered at once); never fails. */
void tl_error(TlCtx *c, const char *fn, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* The check of an argument: ok, or the error tl_error(c, fn, fmt, ...) and false. */
#define tl_require(c, fn, ok, ...) ((ok) || (tl_error(c, fn, __VA_ARGS__), false))

/* Checks of the contract; each reports to c and returns false. */
bool tl_check_string(TlCtx *c, const char *fn, const char *what, tlStringRef s);
bool tl_check_count(TlCtx *c, const char *fn, const char *what, intptr_t n, const void *array);
/* A handle used with c: not null, of c (not another or a destroyed context). */
bool tl_check_owner(TlCtx *c, const char *fn, const char *what, uint64_t owner, const void *ptr);
/* An op (or the op that holds a block or value) not erased. */
bool tl_check_live_op(TlCtx *c, const char *fn, const char *what, const IrOp *op);
const IrOp *tl_value_host(const IrValue *v);
/* n named attributes: valid non-empty names, attributes of c. */
bool tl_check_named(TlCtx *c, const char *fn, intptr_t n, const tlNamedAttribute *entries);

/* Deliver c's pending diagnostics; pass ok through as a logical result. */
tlLogicalResult tl_done(TlCtx *c, bool ok);

/* Handles: the object and c's serial (the null handle for NULL). */
#define TL_MAKER(name, T, S)                                                                       \
  static inline T name(const TlCtx *c, S *p) {                                                     \
    T r = {p, p ? c->serial : 0};                                                                  \
    return r;                                                                                      \
  }
TL_MAKER(tl_type, tlType, const IrType)
TL_MAKER(tl_attr, tlAttribute, const IrAttr)
TL_MAKER(tl_module, tlModule, IrOp)
TL_MAKER(tl_op, tlOperation, IrOp)
TL_MAKER(tl_block, tlBlock, IrBlock)
TL_MAKER(tl_value, tlValue, IrValue)
TL_MAKER(tl_diag, tlDiagnostic, const IrDiag)
#undef TL_MAKER

/* Run `stmt` (which must not return) so that a failed allocation in it frees
** its scratch, breaks c and reports "out of memory" instead of aborting; the
** statement's results must be assigned in it, and hold their prior value then. */
#define TL_PROTECTED(c, fn, stmt)                                                                  \
  do {                                                                                             \
    IrProtect tl_p_;                                                                               \
    ir_protect_push(&tl_p_, NULL, NULL);                                                           \
    if (setjmp(tl_p_.jb) == 0) {                                                                   \
      stmt;                                                                                        \
      ir_protect_pop(&tl_p_);                                                                      \
    } else {                                                                                       \
      ir_protect_pop(&tl_p_);                                                                      \
      tl_out_of_memory(c, fn);                                                                     \
    }                                                                                              \
  } while (0)

/* After a failed allocation: break c and report it (without allocating if need be). */
void tl_out_of_memory(TlCtx *c, const char *fn);

/* The GPU (capi_device.c): close c's device, if open. */
void tl_device_close(TlCtx *c);
/* The Lua half (capi_lua.c). */
void tl_lua_close(TlCtx *c);
/* Run a pipeline holding passes written in Lua on module, in c's Lua state. */
struct IrPipeline;
bool tl_lua_run_pipeline(TlCtx *c, const char *fn, IrOp *module, struct IrPipeline *p);
/* The protocol check every compile runs (tilua.emulate.compile_check), as the
** context's tl.options say: false and an error at the violation's line where
** it finds one; kernels it does not prove get a note. */
bool tl_lua_compile_check(TlCtx *c, const char *fn, IrOp *module);

#endif
