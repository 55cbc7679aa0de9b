/*
** passes.h -- the pass manager: passes registered by name (passes.def),
** pipelines parsed from "a,b{opt=1},c", the verifier after every pass,
** IR dumps and timing per pass through a stage callback.
*/
#ifndef TILUA_PASSES_H
#define TILUA_PASSES_H

#include "../ir/ir.h"

typedef struct IrPassCtx {
  IrContext *ctx;
  const IrAttr *options; /* dictionary from "name{key=value,...}", or NULL */
  bool changed;          /* set by a pass that changed the IR */
  const char *after;     /* a check run by the pass manager (IrPassOptions.check_each): the pass
                         ** it runs after ("input" before the first); NULL for a pipeline step */
} IrPassCtx;

typedef IrResult (*IrPassFn)(IrOp *module, IrPassCtx *pc);

typedef struct IrPassInfo {
  const char *name, *description;
  IrPassFn run;        /* NULL for a pass implemented in Lua */
  const char *options; /* the option names it reads, space-separated */
  const char *lua_fn;  /* a LUA_PASS: its function in the Lua module tilua.passes; else NULL */
} IrPassInfo;

/* Facts about a module that a pass may require (FACT rows of passes.def); each
** is checked by fact_<ID> (pass_facts.c): NULL where it holds, else the op where
** it does not, with the reason appended to *why. */
typedef enum IrPassFact {
#define FACT(id, what, by) IR_FACT_##id,
#include "passes_def.h"
  IR_FACT__COUNT
} IrPassFact;

#define PASS(c, name, options, desc) IrResult pass_##c(IrOp *module, IrPassCtx *pc);
#define FACT(id, what, by) IrOp *fact_##id(IrOp *module, StrBuf *why);
#include "passes_def.h"

/* Registry. */
int ir_pass_count(void);
const IrPassInfo *ir_pass_at(int i);
const IrPassInfo *ir_pass_lookup(const char *name, size_t len);
/* The facts pass p requires (its REQUIRES rows), a mask of 1 << IrPassFact. */
uint32_t ir_pass_requires(const IrPassInfo *p);
/* What fact f says ("kernel_spec on the kernel") and what makes it hold. */
void ir_pass_fact_info(IrPassFact f, const char **id, const char **what, const char **by);
int ir_named_pipeline_count(void);
void ir_named_pipeline_at(int i, const char **name, const char **passes, const char **desc);

typedef struct IrPipelineStep {
  const IrPassInfo *pass;
  const IrAttr *options;
} IrPipelineStep;

typedef struct IrPipeline {
  uint32_t n;
  IrPipelineStep *steps; /* context arena */
} IrPipeline;

/* Parse "a,b{k=1},named-pipeline"; unknown names are diagnosed with the list of passes. */
IrResult ir_pipeline_parse(IrContext *ctx, const char *spec, IrPipeline *out);

typedef struct IrStageInfo {
  const char *pass; /* pass name; "input" for the stage before the first pass */
  int index;        /* 0 = input, 1.. = after pass i */
  double ms;        /* pass run time (0 for input) */
  bool changed;
  bool verified; /* the verifier ran after it */
} IrStageInfo;

typedef struct IrPassOptions {
  bool verify_each; /* verify after every pass (tests always do) */
  /* Called with the input and after every pass (e.g. to print or keep the IR). */
  void (*on_stage)(const IrStageInfo *stage, IrOp *module, void *ud);
  void *ud;
  /* Runs a pass implemented in Lua (IrPassInfo.lua_fn); NULL where no Lua state runs the
  ** pipeline, and then such a pass is an error. The Lua bindings set it (src/lua/l_pass.c). */
  IrResult (*run_lua)(const IrPassInfo *pass, IrOp *module, IrPassCtx *pc, void *ud);
  void *lua_ud;
  /* A checking pass run on the verified input and after every pass that changed the
  ** IR (verify-protocol: tl.options.check_protocol, --check-protocol, tl.check_lowering),
  ** so that a pass that breaks what the check proves is named; NULL for none. Its options
  ** (NULL: none) are parsed and checked against its declared ones like a pipeline step's
  ** (ir_pipeline_parse of "name{key=value}"). check_every_pass: after every pass, changed
  ** or not (tl.check_lowering: its check may change the IR first). */
  const IrPassInfo *check_each;
  const IrAttr *check_options;
  bool check_every_pass;
} IrPassOptions;

void ir_pass_options_default(IrPassOptions *o);
/* Run every step; stops at the first failing pass or verification. */
IrResult ir_pipeline_run(const IrPipeline *p, IrOp *module, const IrPassOptions *opts);

#endif
