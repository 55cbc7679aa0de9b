/*
** convert_cutlass_to_nvvm.h -- the state shared by the three files of the
** `convert-cutlass-to-nvvm` pass: convert_cutlass_to_nvvm.c (the driver,
** pipelines, seq_bar, async tokens, executor regions), _util.c (entry
** values, executor sets, named barriers) and _mem.c
** (block_striped and register fragments, named and generic barriers, MODS).
** docs/lowering.md describes what every op becomes.
*/
#ifndef TILUA_CONVERT_CUTLASS_TO_NVVM_H
#define TILUA_CONVERT_CUTLASS_TO_NVVM_H

#include "../dialects/cutlass.h"
#include "rewrite.h"

#define CPN_WAIT_HINT 0x989680 /* try_wait suspend-time hint (ns), CUTLASS's ClusterBarrier::wait */
#define CPN_FUTURE_HINT 0x100000 /* the future-wait flavour's hint (the specification's is another constant) */

/* The ops of a pipeline or seq_bar handle: the first member of CpnPipe and CpnSeq. */
typedef struct CpnHandle {
  IrOp *create, *init;
} CpnHandle;

/* What the init of a pipeline says (its handle's only init). */
typedef struct CpnPipe {
  CpnHandle h;
  int64_t stages, base, tx, count[2]; /* count: arrivals per phase, [full, empty] */
  int mode;
  uint32_t np, nc;
  int64_t prod[CUT_MAX_PARTICIPANTS], cons[CUT_MAX_PARTICIPANTS]; /* participant warp masks */
} CpnPipe;

typedef struct CpnSeq {
  CpnHandle h;
  int64_t depth, base, count;
} CpnSeq;

/* A register fragment (memref<..., rmem>) and the shared memory that backs it. */
typedef struct CpnFrag {
  IrOp *root;    /* the zero-operand builtin.unrealized_conversion_cast */
  IrValue *base; /* ptr<elem, shared>: `elements` per thread for every thread of the block */
  int64_t elements;
} CpnFrag;

typedef struct Cpn {
  Rewriter rw;                     /* first: the entry makers get a Rewriter * */
  int64_t block[3], threads, ctas; /* threads per block, CTAs per cluster */
  uint64_t all_warps;
  IrValue *pool, *tid, *warp; /* made on demand at the entry */
  IrOpVec ops;                /* the cutlass ops of the kernel, pre-order */
  KernelExec *execs;          /* where each runs (ops.v[i]->mark == i + 1) */
  PtrMap handles;    /* pipeline.create / seq_bar.create -> CpnPipe / CpnSeq */
  PtrMap frags;      /* fragment root -> CpnFrag */
  uint32_t nb_used;  /* named barrier ids taken (bit i = id i) */
  uint64_t nb_mask[16];
  int nb_id[16], nnb;
  bool cluster_pipes; /* a pipeline of mode "cluster": inits end with a cluster sync */
  bool failed;
} Cpn;

/* {=== shared helpers (convert_cutlass_to_nvvm_util.c) */
bool cpn_reserve_visit(IrOp *op, void *ud); /* walk callback: the kernel's named barrier ids */
/* The 32 mbarrier slots of the CTA and slot k (an i32) of them. */
IrValue *cpn_pool(Cpn *c);
IrValue *cpn_slot(Cpn *c, IrValue *k);
/* p + off elements (p itself for a constant 0); the address of p as an integer. */
IrValue *cpn_ptr_add(Cpn *c, IrValue *p, IrValue *off);
IrValue *cpn_ptr_to_int(Cpn *c, IrValue *p);
/* Where op runs (computed once per collected op). */
const KernelExec *cpn_exec(Cpn *c, IrOp *op);
/* The linear thread index and the warp index, made once at the kernel's entry. */
IrValue *cpn_tid(Cpn *c);
IrValue *cpn_warp(Cpn *c);
/* Is the warp of this thread in mask? */
IrValue *cpn_in_mask(Cpn *c, uint64_t mask);
/* What a switch_by_executor case argument stands for: its operand (through
** nested cases); any other value is itself. */
IrValue *cpn_source(IrValue *v);
/* Synchronize the threads of warp mask m (bar.sync 0, or a named barrier of
** its own, also for one warp); false (with a diagnostic at op) when no id is left. */
bool cpn_sync_warps(Cpn *c, IrOp *op, uint64_t m);
/* }=== */

/* {=== convert_cutlass_to_nvvm_mem.c */
bool cpn_check_mem_op(Cpn *c, IrOp *op);    /* phase A: can it be lowered? */
bool cpn_lower_mem_op(Cpn *c, IrOp *op);    /* phase B: block_striped, barriers, MODS */
bool cpn_is_mem_op(IrOpKind k);
void cpn_erase_fragments(Cpn *c);
/* }=== */

#endif
