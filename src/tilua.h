/*
** tilua.h -- the C embedding API of tilua, in the manner of MLIR's C API:
** opaque handles passed by value, Noun-Verb names, a logical result, and
** diagnostics delivered to a handler. The context owns every module, op,
** type and attribute made in it; tlContextDestroy frees them all.
**
** A typical host:
**
**   tlContext ctx = tlContextCreate();
**   tlContextAttachDiagnosticHandler(ctx, on_diag, NULL);
**   tlModule m = tlModuleCreateParse(ctx, tlStringRefCreateFromCString(text),
**                                    tlStringRefCreateFromCString("input.tir"));
**   if (!tlModuleIsNull(m) && tlLogicalResultIsSuccess(tlModuleVerify(m)) &&
**       tlLogicalResultIsSuccess(tlModuleRunPipeline(m, tlStringRefCreateFromCString("cleanup"))))
**     tlModulePrint(m, write_to_stdout, NULL);
**   tlContextDestroy(ctx);
**
** The contract (docs/capi.md has the long form). No argument makes a call
** undefined behaviour except a handle that was never made by this API (forged
** or uninitialised memory) and a dangling pointer inside a tlStringRef or an
** array; everything else is checked:
**
** - A failing call returns the null handle, a failure tlLogicalResult, false,
**   0 or -1 (each function says which) and, when it can name the context the
**   call was about, reports one error diagnostic "tlFunction: why" there.
** - Null handles propagate: a null handle argument gives the null result with
**   no new diagnostic (the call that made the null one reported it).
** - Every handle remembers its context. A handle of another context is
**   refused with a diagnostic; a handle of a destroyed context is refused too
**   (its memory is never touched) and, there being no context to report to,
**   the refusal is printed to stderr. An op erased by a pass, and the values,
**   blocks and results of one, are refused likewise.
** - tlStringRef: data may be NULL only when length is 0 (the empty string).
** - Counts are intptr_t: a negative count, a count above INT32_MAX, or a
**   positive count with a NULL array is refused. Positions out of range give
**   the null handle and a diagnostic.
** - Out of memory: a call whose allocation fails returns its failure result
**   and reports "out of memory"; the context is then broken: every later call
**   on it fails (with a diagnostic) except tlContextDestroy.
** - A context and its handles are for one thread at a time; different contexts
**   may be used on different threads.
*/
#ifndef TILUA_H
#define TILUA_H

/* The version: the one place it is written (CMakeLists.txt reads it from
** here; the program, tl.version and the rockspec's name agree with it). */
#define TILUA_VERSION_MAJOR 0
#define TILUA_VERSION_MINOR 1
#define TILUA_VERSION_PATCH 0
#define TILUA_VERSION_STRING_(x) #x
#define TILUA_VERSION_STRING(x) TILUA_VERSION_STRING_(x)
#define TILUA_VERSION                                                                              \
  TILUA_VERSION_STRING(TILUA_VERSION_MAJOR)                                                        \
  "." TILUA_VERSION_STRING(TILUA_VERSION_MINOR) "." TILUA_VERSION_STRING(                          \
      TILUA_VERSION_PATCH) /* "0.1.0" */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TL_API __attribute__((visibility("default")))
#else
#define TL_API
#endif

/* A handle: the object and the serial number of the context that made it
** (serials are never reused, so a handle of a destroyed context is detected).
** A zero-initialised handle is the null handle. */
#define TL_DEFINE_HANDLE(name, storage)                                                            \
  typedef struct name {                                                                            \
    storage *ptr;                                                                                  \
    uint64_t context;                                                                              \
  } name

TL_DEFINE_HANDLE(tlContext, void);
TL_DEFINE_HANDLE(tlModule, void);
TL_DEFINE_HANDLE(tlOperation, void);
TL_DEFINE_HANDLE(tlBlock, void);
TL_DEFINE_HANDLE(tlValue, void);
TL_DEFINE_HANDLE(tlType, const void);
TL_DEFINE_HANDLE(tlAttribute, const void);
TL_DEFINE_HANDLE(tlDiagnostic, const void);
TL_DEFINE_HANDLE(tlDevice, void);
TL_DEFINE_HANDLE(tlGraph, void);
#undef TL_DEFINE_HANDLE

/* A string with a length; not necessarily NUL-terminated. data may be NULL
** only when length is 0. */
typedef struct tlStringRef {
  const char *data;
  size_t length;
} tlStringRef;

typedef struct tlLogicalResult {
  int8_t value; /* 1 = success */
} tlLogicalResult;

typedef struct tlNamedAttribute {
  tlStringRef name;
  tlAttribute attribute;
} tlNamedAttribute;

typedef enum tlDiagnosticSeverity {
  tlDiagnosticError,
  tlDiagnosticWarning,
  tlDiagnosticNote,
  tlDiagnosticRemark
} tlDiagnosticSeverity;

/* Receives each diagnostic once; without a handler they are printed to stderr. */
typedef void (*tlDiagnosticHandler)(tlDiagnostic diagnostic, void *userData);
/* Receives printed text in pieces. */
typedef void (*tlStringCallback)(tlStringRef text, void *userData);

static inline tlStringRef tlStringRefCreate(const char *s, size_t n) {
  tlStringRef r = {s, n};
  return r;
}
/* s == NULL gives the empty string. */
TL_API tlStringRef tlStringRefCreateFromCString(const char *s);
static inline bool tlLogicalResultIsSuccess(tlLogicalResult r) { return r.value != 0; }
static inline bool tlLogicalResultIsFailure(tlLogicalResult r) { return r.value == 0; }

/* {======================================================================
** Context and diagnostics
** ======================================================================= */

/* A new context; the null context when memory runs out. */
TL_API tlContext tlContextCreate(void);
/* Frees the context and everything made in it. A null context is ignored; a
** context destroyed before is refused (printed to stderr), never freed twice. */
TL_API void tlContextDestroy(tlContext ctx);
/* handler NULL restores the default (print to stderr). */
TL_API void tlContextAttachDiagnosticHandler(tlContext ctx, tlDiagnosticHandler handler,
                                             void *userData);
/* The target as an SM number (90 = sm_90a, the default; 100 and up enable the
** sm100 schedulers). Failure (and a diagnostic) for sm < 90 or a bad context. */
TL_API tlLogicalResult tlContextSetTargetSM(tlContext ctx, int sm);

/* A diagnostic handle stays valid until its context is destroyed. On a null
** diagnostic: error severity, empty strings, 0, a null note, nothing printed. */
TL_API tlDiagnosticSeverity tlDiagnosticGetSeverity(tlDiagnostic d);
TL_API tlStringRef tlDiagnosticGetMessage(tlDiagnostic d);
/* The file of the location (a Lua chunk or an IR file); empty when unknown. */
TL_API tlStringRef tlDiagnosticGetFile(tlDiagnostic d);
TL_API int tlDiagnosticGetLine(tlDiagnostic d);   /* 0 when unknown */
TL_API int tlDiagnosticGetColumn(tlDiagnostic d); /* 0 when unknown */
TL_API intptr_t tlDiagnosticGetNumNotes(tlDiagnostic d);
/* The null diagnostic for a position out of range (no diagnostic about it). */
TL_API tlDiagnostic tlDiagnosticGetNote(tlDiagnostic d, intptr_t pos);
/* "file:line:col: error: message" and its notes, one per line; callback NULL: nothing. */
TL_API void tlDiagnosticPrint(tlDiagnostic d, tlStringCallback callback, void *userData);

/* }====================================================================== */

/* {======================================================================
** Types and attributes (uniqued: equal ones are the same handle)
** ======================================================================= */

/* The null type (and a diagnostic) for a width outside 1..64. */
TL_API tlType tlIntegerTypeGet(tlContext ctx, unsigned width);
TL_API tlType tlIndexTypeGet(tlContext ctx);
TL_API tlType tlF16TypeGet(tlContext ctx);
TL_API tlType tlBF16TypeGet(tlContext ctx);
TL_API tlType tlF32TypeGet(tlContext ctx);
TL_API tlType tlF64TypeGet(tlContext ctx);
/* ptr<elem, space>; space is "global", "shared", ...; the null type (and a
** diagnostic) for an unknown space. */
TL_API tlType tlPointerTypeGet(tlType elem, tlStringRef space);
TL_API bool tlTypeIsNull(tlType t);
/* Same type of the same context (two null types are equal). */
TL_API bool tlTypeEqual(tlType a, tlType b);
/* Prints nothing for a null type or callback. */
TL_API void tlTypePrint(tlType t, tlStringCallback callback, void *userData);

/* type: an integer or index type; value must fit its width, signed or
** unsigned (300 does not fit i8). Otherwise the null attribute and a diagnostic. */
TL_API tlAttribute tlIntegerAttrGet(tlType type, int64_t value);
/* type: a float type (the value is rounded to it). */
TL_API tlAttribute tlFloatAttrGet(tlType type, double value);
TL_API tlAttribute tlBoolAttrGet(tlContext ctx, bool value);
TL_API tlAttribute tlStringAttrGet(tlContext ctx, tlStringRef s);
TL_API tlAttribute tlTypeAttrGet(tlType type);
/* n elements, none null, all of ctx. */
TL_API tlAttribute tlArrayAttrGet(tlContext ctx, intptr_t n, const tlAttribute *elements);
/* n entries with non-empty names and attributes of ctx; a repeated name keeps the last. */
TL_API tlAttribute tlDictionaryAttrGet(tlContext ctx, intptr_t n, const tlNamedAttribute *entries);
/* Only pairs its arguments (the checks happen where the pair is used). */
TL_API tlNamedAttribute tlNamedAttributeGet(tlStringRef name, tlAttribute a);
TL_API bool tlAttributeIsNull(tlAttribute a);
TL_API void tlAttributePrint(tlAttribute a, tlStringCallback callback, void *userData);

/* }====================================================================== */

/* {======================================================================
** Modules
** ======================================================================= */

TL_API tlModule tlModuleCreateEmpty(tlContext ctx);
/* Parse textual IR; a null module (and diagnostics with file:line:col) on
** failure. filename may be empty. */
TL_API tlModule tlModuleCreateParse(tlContext ctx, tlStringRef text, tlStringRef filename);
/* Run a Lua kernel script (it sees `require "tilua"`, whose default context is
** ctx) and return the module it built (tl.module()); a null module and a
** diagnostic at the script's line on failure. The module is ctx's: a script
** whose tl.module() belongs to another context (one the script made), or that
** closes the default context, fails. No Lua error reaches the host; after a
** script that closed the default context the Lua state is made afresh. */
TL_API tlModule tlModuleCreateFromScript(tlContext ctx, tlStringRef script, tlStringRef chunkname);
TL_API bool tlModuleIsNull(tlModule m);
TL_API tlOperation tlModuleGetOperation(tlModule m);
TL_API tlBlock tlModuleGetBody(tlModule m);
TL_API tlLogicalResult tlModuleVerify(tlModule m);
/* Verify, then run "pass,pass{opt=v},named-pipeline" (the verifier runs after
** every pass too). Failure on invalid input, an unknown pass or a failing pass. */
TL_API tlLogicalResult tlModuleRunPipeline(tlModule m, tlStringRef pipeline);
TL_API void tlModulePrint(tlModule m, tlStringCallback callback, void *userData);
/* Verify, then emit the PTX (sm_90a) of a module the `ptx` pipeline lowered, in
** one piece through callback (not NULL); failure and diagnostics otherwise. */
TL_API tlLogicalResult tlModuleEmitPTX(tlModule m, tlStringCallback callback, void *userData);

/* }====================================================================== */

/* {======================================================================
** Building operations
** ======================================================================= */

/* A tile.kernel named `name` (non-empty) at the end of the module, with
** nParams typed parameters (names may be NULL: arg0, arg1, ...) and a block
** size (0 counts as 1; the verifier checks the limits); returns the kernel op. */
TL_API tlOperation tlKernelCreate(tlModule m, tlStringRef name, intptr_t nParams,
                                  const tlType *paramTypes, const tlStringRef *paramNames,
                                  unsigned blockX, unsigned blockY, unsigned blockZ);
/* The entry block of region `region` of op, created with these argument types if
** the region is empty (else the types are not looked at). */
TL_API tlBlock tlOperationGetRegionBlock(tlOperation op, intptr_t region, intptr_t nArgs,
                                         const tlType *argTypes);
TL_API intptr_t tlBlockGetNumArguments(tlBlock b); /* -1 for a null or refused block */
TL_API tlValue tlBlockGetArgument(tlBlock b, intptr_t pos);
/* Create an op by name at the end of `block`; a null op (and a diagnostic) when
** the name is unknown, an argument is refused (see the contract above; at most
** 16 regions), or the operand and result types do not fit its signature. */
TL_API tlOperation tlOperationCreate(tlBlock block, tlStringRef name, intptr_t nOperands,
                                     const tlValue *operands, intptr_t nResults,
                                     const tlType *resultTypes, intptr_t nAttributes,
                                     const tlNamedAttribute *attributes, intptr_t nRegions);
TL_API bool tlOperationIsNull(tlOperation op);
TL_API tlValue tlOperationGetResult(tlOperation op, intptr_t pos);
TL_API tlLogicalResult tlOperationVerify(tlOperation op);
TL_API void tlOperationPrint(tlOperation op, tlStringCallback callback, void *userData);
TL_API tlType tlValueGetType(tlValue v);

/* }====================================================================== */

/* {======================================================================
** Running on the GPU: the CUDA driver is loaded at run time (libcuda.so.1,
** or TILUA_LIBCUDA); nothing here needs the CUDA toolkit.
** ======================================================================= */

/* A kernel argument: its kind and its value (a pointer is a device address
** from tlDeviceAlloc). */
typedef enum tlKernelArgKind {
  TL_ARG_I32,
  TL_ARG_I64,
  TL_ARG_F32,
  TL_ARG_F64,
  TL_ARG_POINTER
} tlKernelArgKind;
typedef struct tlKernelArg {
  tlKernelArgKind kind;
  union {
    int32_t i32;
    int64_t i64;
    float f32;
    double f64;
    uint64_t pointer;
  } value;
} tlKernelArg;

/* Open GPU `ordinal` for ctx (one device per context; it is closed with the
** context). The null handle and a diagnostic where there is no driver or GPU.
** Several contexts of one process may hold several devices: each call makes
** its device's CUDA context current first. */
TL_API tlDevice tlDeviceOpen(tlContext ctx, int ordinal);
TL_API bool tlDeviceIsNull(tlDevice d);
TL_API void tlDeviceClose(tlDevice d);
/* Device memory: an address (bytes > 0), freed with tlDeviceFree. */
TL_API tlLogicalResult tlDeviceAlloc(tlDevice d, size_t bytes, uint64_t *address);
TL_API tlLogicalResult tlDeviceFree(tlDevice d, uint64_t address);
TL_API tlLogicalResult tlDeviceCopyToDevice(tlDevice d, uint64_t dst, const void *src,
                                            size_t bytes);
TL_API tlLogicalResult tlDeviceCopyToHost(tlDevice d, void *dst, uint64_t src, size_t bytes);
/* Launch kernel `kernel` of module m (lowered by the `ptx` pipeline: its PTX is
** emitted and loaded here, and reused while m does not change) on grid[3]
** blocks (a multiple of the kernel's cluster), with the block size and shared
** memory of its kernel_spec, and wait for it. The arguments must match the
** kernel's parameters in number and kind (pointer, i32, i64 or index, f32,
** f64); a mismatch is refused with a diagnostic before anything is launched.
** A failure of the kernel (a trap, a bad address) is a failure here. */
TL_API tlLogicalResult tlDeviceLaunch(tlDevice d, tlModule m, tlStringRef kernel,
                                      const unsigned grid[3], intptr_t nArgs,
                                      const tlKernelArg *args);
/* Streams of the device (non-blocking: they never wait for each other or for
** tlDeviceLaunch's work) as handles (a CUstream, usable by NCCL and other
** libraries); destroyed with tlDeviceDestroyStream or when the device closes.
** tlDeviceLaunchOnStream is tlDeviceLaunch on `stream`, without waiting:
** tlDeviceSynchronize(d, stream) waits for it (stream 0: for the whole device)
** and reports a kernel that failed. A stream of another device is refused. */
TL_API tlLogicalResult tlDeviceCreateStream(tlDevice d, uint64_t *stream);
TL_API tlLogicalResult tlDeviceDestroyStream(tlDevice d, uint64_t stream);
TL_API tlLogicalResult tlDeviceLaunchOnStream(tlDevice d, tlModule m, tlStringRef kernel,
                                              const unsigned grid[3], intptr_t nArgs,
                                              const tlKernelArg *args, uint64_t stream);
TL_API tlLogicalResult tlDeviceSynchronize(tlDevice d, uint64_t stream);

/* CUDA graphs. Between tlDeviceBeginGraph and tlDeviceEndGraph, tlDeviceLaunch
** captures its launch into a graph (node 0, 1, ...) instead of running it, and
** does not wait; copies and frees are refused meanwhile. tlGraphLaunch
** replays the graph (one driver launch for all its kernels) and waits for it.
** Between tlGraphBeginUpdate and tlGraphEndUpdate, tlDeviceLaunch sets the
** grid and arguments of nodes 0, 1, ... in turn instead of running (the same
** kernels, in the same order); tlGraphEndUpdate checks that every node was
** set. A graph lives until tlGraphDestroy or its device closes. */
TL_API tlLogicalResult tlDeviceBeginGraph(tlDevice d);
TL_API tlGraph tlDeviceEndGraph(tlDevice d);
TL_API bool tlGraphIsNull(tlGraph g);
TL_API intptr_t tlGraphGetNumNodes(tlGraph g); /* -1 for a refused handle */
TL_API tlLogicalResult tlGraphLaunch(tlGraph g);
TL_API tlLogicalResult tlGraphBeginUpdate(tlGraph g);
TL_API tlLogicalResult tlGraphEndUpdate(tlGraph g);
TL_API void tlGraphDestroy(tlGraph g);

/* }====================================================================== */

#ifdef __cplusplus
}
#endif

#endif
