/*
** convert_pipeline_to_nvvm.h -- the state shared by the three files of the
** `convert-pipeline-to-nvvm` pass: convert_pipeline_to_nvvm.c (the driver,
** pipelines, seq_bar, async tokens, executor regions), _util.c (building
** helpers, entry values, executor sets, named barriers) and _mem.c
** (block_striped and register fragments, named and generic barriers, MODS).
** docs/lowering.md describes what every op becomes.
*/
#ifndef TILUA_CONVERT_PIPELINE_TO_NVVM_H
#define TILUA_CONVERT_PIPELINE_TO_NVVM_H

#include "../dialects/dialects.h"
#include "passes.h"

#define CPN_POOL_SLOTS 32      /* mbarrier slots per CTA (docs/cutlass.md, the pool) */
#define CPN_MAX_PART 16        /* participant masks per side */
#define CPN_WAIT_HINT 0x989680 /* try_wait suspend-time hint (ns), CUTLASS's ClusterBarrier::wait */
#define CPN_FUTURE_HINT 0x100000 /* the future-wait flavour's hint (seed 000: another constant) */

/* Pipeline modes, in the order of the verifier's list (cutlass_pipeline.c). */
enum { MODE_COOPERATIVE, MODE_WARP_SPECIALIZED, MODE_STRIDED_UREM, MODE_STRIDED_UDIV, MODE_CLUSTER };

/* Where an op runs: the executor set (warp mask) and whether execution is
** narrowed below a warp there (tile.elect_one, an scf.if on an elect). */
typedef struct CpnExec {
  uint64_t mask;
  bool subwarp;
} CpnExec;

/* What the init of a pipeline says (its handle's only init). */
typedef struct CpnPipe {
  IrOp *create, *init;
  int64_t stages, base, tx, count[2]; /* count: arrivals per phase, [full, empty] */
  int mode;
  uint32_t np, nc;
  int64_t prod[CPN_MAX_PART], cons[CPN_MAX_PART]; /* participant warp masks */
} CpnPipe;

typedef struct CpnSeq {
  IrOp *create, *init;
  int64_t depth, base, count;
} CpnSeq;

/* A register fragment (memref<..., rmem>) and the shared memory that backs it. */
typedef struct CpnFrag {
  IrOp *root;    /* the zero-operand builtin.unrealized_conversion_cast */
  IrValue *base; /* ptr<elem, shared>: `elements` per thread for every thread of the block */
  int64_t elements;
} CpnFrag;

typedef struct Cpn {
  IrContext *ctx;
  IrBuilder b;
  IrOp *kernel;
  IrBlock *entry;
  IrOp *entry_last; /* the last op made at the kernel's entry */
  const IrType *i1, *i16, *i32, *i64;
  int64_t block[3], threads, ctas; /* threads per block, CTAs per cluster */
  uint64_t all_warps;
  IrValue *pool, *tid, *warp; /* made on demand at the entry */
  IrOp **ops;                 /* the cutlass ops of the kernel, pre-order */
  CpnExec *execs;             /* where each runs (ops[i]->mark == i + 1) */
  size_t nops;
  PtrMap agents;     /* tile.agent -> (void *)(uintptr_t)(first warp + 1) */
  PtrMap handles;    /* pipeline.create / seq_bar.create -> CpnPipe / CpnSeq */
  PtrMap frags;      /* fragment root -> CpnFrag */
  uint32_t nb_used;  /* named barrier ids taken (bit i = id i) */
  uint64_t nb_mask[16];
  int nb_id[16], nnb;
  bool cluster_pipes; /* a pipeline of mode "cluster": inits end with a cluster sync */
  bool failed;
} Cpn;

/* {=== shared helpers (convert_pipeline_to_nvvm_util.c) */
typedef struct CpnAgentScan {
  Cpn *c;
  int64_t next;
} CpnAgentScan;
bool cpn_agent_visit(IrOp *op, void *ud);   /* walk callback: agents' first warps */
bool cpn_reserve_visit(IrOp *op, void *ud); /* walk callback: the kernel's named barrier ids */
CpnExec cpn_compute_exec(Cpn *c, IrOp *op);
int64_t cpn_list_at(const IrOp *op, const char *name, uint32_t i);
int cpn_popcount(uint64_t m);
IrValue *cpn_pool(Cpn *c);
IrValue *cpn_slot(Cpn *c, IrValue *k);
IrOp *cpn_build(Cpn *c, IrOpKind k, uint32_t n, IrValue *const *opds, const IrType *rt);
IrValue *cpn_build1(Cpn *c, IrOpKind k, uint32_t n, IrValue *const *opds, const IrType *rt);
IrValue *cpn_const(Cpn *c, int64_t v, const IrType *t);
IrValue *cpn_bin(Cpn *c, IrOpKind k, IrValue *a, IrValue *b);
IrValue *cpn_cmp(Cpn *c, const char *pred, IrValue *a, IrValue *b);
IrValue *cpn_ptr_add(Cpn *c, IrValue *p, IrValue *off);
IrValue *cpn_ptr_to_int(Cpn *c, IrValue *p);
const CpnExec *cpn_exec(Cpn *c, IrOp *op);
IrValue *cpn_tid(Cpn *c);
IrValue *cpn_warp(Cpn *c);
IrValue *cpn_in_mask(Cpn *c, uint64_t mask);
IrValue *cpn_source(IrValue *v);
/* scf.if cond { ... } with the builder moved into its then-block (before the
** yield); returns the if. cpn_end_if puts the builder after it. */
IrOp *cpn_begin_if(Cpn *c, IrValue *cond);
void cpn_end_if(Cpn *c, IrOp *sif);
/* scf.while () { cond = body(); scf.condition(cond) } do { } : a spin loop. */
IrOp *cpn_begin_spin(Cpn *c);
void cpn_end_spin(Cpn *c, IrOp *w, IrValue *again);
/* Synchronize the threads of warp mask m (bar.sync 0, or a named barrier of
** its own, also for one warp); false (with a diagnostic at op) when no id is left. */
bool cpn_sync_warps(Cpn *c, IrOp *op, uint64_t m);
int cpn_ctz(uint64_t m);
/* }=== */

/* {=== convert_pipeline_to_nvvm_mem.c */
bool cpn_check_mem_op(Cpn *c, IrOp *op);    /* phase A: can it be lowered? */
bool cpn_lower_mem_op(Cpn *c, IrOp *op);    /* phase B: block_striped, barriers, MODS */
bool cpn_is_mem_op(IrOpKind k);
void cpn_erase_fragments(Cpn *c);
/* }=== */

#endif
