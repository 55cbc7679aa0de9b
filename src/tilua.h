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
*/
#ifndef TILUA_H
#define TILUA_H

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

#define TL_DEFINE_HANDLE(name, storage)                                                            \
  typedef struct name {                                                                            \
    storage *ptr;                                                                                  \
  } name

TL_DEFINE_HANDLE(tlContext, void);
TL_DEFINE_HANDLE(tlModule, void);
TL_DEFINE_HANDLE(tlOperation, void);
TL_DEFINE_HANDLE(tlBlock, void);
TL_DEFINE_HANDLE(tlValue, void);
TL_DEFINE_HANDLE(tlType, const void);
TL_DEFINE_HANDLE(tlAttribute, const void);
TL_DEFINE_HANDLE(tlDiagnostic, const void);
#undef TL_DEFINE_HANDLE

/* A string with a length; not necessarily NUL-terminated. */
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
TL_API tlStringRef tlStringRefCreateFromCString(const char *s);
static inline bool tlLogicalResultIsSuccess(tlLogicalResult r) { return r.value != 0; }
static inline bool tlLogicalResultIsFailure(tlLogicalResult r) { return r.value == 0; }

/* {======================================================================
** Context and diagnostics
** ======================================================================= */

TL_API tlContext tlContextCreate(void);
TL_API void tlContextDestroy(tlContext ctx);
TL_API void tlContextAttachDiagnosticHandler(tlContext ctx, tlDiagnosticHandler handler, void *userData);
/* The target as an SM number (90 = sm_90a, the default). */
TL_API void tlContextSetTargetSM(tlContext ctx, int sm);

TL_API tlDiagnosticSeverity tlDiagnosticGetSeverity(tlDiagnostic d);
TL_API tlStringRef tlDiagnosticGetMessage(tlDiagnostic d);
/* The file of the location (a Lua chunk or an IR file); empty when unknown. */
TL_API tlStringRef tlDiagnosticGetFile(tlDiagnostic d);
TL_API int tlDiagnosticGetLine(tlDiagnostic d);   /* 0 when unknown */
TL_API int tlDiagnosticGetColumn(tlDiagnostic d); /* 0 when unknown */
TL_API intptr_t tlDiagnosticGetNumNotes(tlDiagnostic d);
TL_API tlDiagnostic tlDiagnosticGetNote(tlDiagnostic d, intptr_t pos);
/* "file:line:col: error: message" and its notes, one per line. */
TL_API void tlDiagnosticPrint(tlDiagnostic d, tlStringCallback callback, void *userData);

/* }====================================================================== */

/* {======================================================================
** Types and attributes
** ======================================================================= */

TL_API tlType tlIntegerTypeGet(tlContext ctx, unsigned width); /* 1..64 */
TL_API tlType tlIndexTypeGet(tlContext ctx);
TL_API tlType tlF16TypeGet(tlContext ctx);
TL_API tlType tlBF16TypeGet(tlContext ctx);
TL_API tlType tlF32TypeGet(tlContext ctx);
TL_API tlType tlF64TypeGet(tlContext ctx);
/* ptr<elem, space>; space is "global", "shared", ...; a null type for an unknown space. */
TL_API tlType tlPointerTypeGet(tlType elem, tlStringRef space);
TL_API bool tlTypeIsNull(tlType t);
TL_API bool tlTypeEqual(tlType a, tlType b);
TL_API void tlTypePrint(tlType t, tlStringCallback callback, void *userData);

TL_API tlAttribute tlIntegerAttrGet(tlType type, int64_t value);
TL_API tlAttribute tlFloatAttrGet(tlType type, double value);
TL_API tlAttribute tlBoolAttrGet(tlContext ctx, bool value);
TL_API tlAttribute tlStringAttrGet(tlContext ctx, tlStringRef s);
TL_API tlAttribute tlTypeAttrGet(tlType type);
TL_API tlAttribute tlArrayAttrGet(tlContext ctx, intptr_t n, const tlAttribute *elements);
TL_API tlAttribute tlDictionaryAttrGet(tlContext ctx, intptr_t n, const tlNamedAttribute *entries);
TL_API tlNamedAttribute tlNamedAttributeGet(tlStringRef name, tlAttribute a);
TL_API bool tlAttributeIsNull(tlAttribute a);
TL_API void tlAttributePrint(tlAttribute a, tlStringCallback callback, void *userData);

/* }====================================================================== */

/* {======================================================================
** Modules
** ======================================================================= */

TL_API tlModule tlModuleCreateEmpty(tlContext ctx);
/* Parse textual IR; a null module (and diagnostics with line:col) on failure. */
TL_API tlModule tlModuleCreateParse(tlContext ctx, tlStringRef text, tlStringRef filename);
/* Run a Lua kernel script (it sees `require "tilua"`) and return the module it
** built; a null module (and a diagnostic at the script's line) on failure. */
TL_API tlModule tlModuleCreateFromScript(tlContext ctx, tlStringRef script, tlStringRef chunkname);
TL_API bool tlModuleIsNull(tlModule m);
TL_API tlOperation tlModuleGetOperation(tlModule m);
TL_API tlBlock tlModuleGetBody(tlModule m);
TL_API tlLogicalResult tlModuleVerify(tlModule m);
/* Run "pass,pass{opt=v},named-pipeline"; the verifier runs after every pass. */
TL_API tlLogicalResult tlModuleRunPipeline(tlModule m, tlStringRef pipeline);
TL_API void tlModulePrint(tlModule m, tlStringCallback callback, void *userData);

/* }====================================================================== */

/* {======================================================================
** Building operations
** ======================================================================= */

/* A tile.kernel named `name` at the end of the module, with typed parameters
** (names may be NULL) and a block size; returns the kernel op. */
TL_API tlOperation tlKernelCreate(tlModule m, tlStringRef name, intptr_t nParams,
                                  const tlType *paramTypes, const tlStringRef *paramNames,
                                  unsigned blockX, unsigned blockY, unsigned blockZ);
/* The entry block of region `region` of op, created with these argument types if
** the region is empty. */
TL_API tlBlock tlOperationGetRegionBlock(tlOperation op, intptr_t region, intptr_t nArgs,
                                         const tlType *argTypes);
TL_API intptr_t tlBlockGetNumArguments(tlBlock b);
TL_API tlValue tlBlockGetArgument(tlBlock b, intptr_t pos);
/* Create an op by name at the end of `block`; a null op (and a diagnostic) when
** the name is unknown or the operand and result types do not fit its signature. */
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

#ifdef __cplusplus
}
#endif

#endif
