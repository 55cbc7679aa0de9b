/*
** kernel.h -- the facts of a tile.kernel, decoded in one place: its
** kernel_spec, the warps of its agents, its shared-memory layout and the
** executor set (warps) that runs an op. Verifiers, lowerings, the emitter
** and Lua (op:kernel_spec(), op:shared_layout(), op:agent_warps()) use these
** and nothing else.
**
** One strictness rule: kernel_spec_check (run by tile.kernel's verifier)
** reports any malformed spec; every reader after verification can trust it.
** Before verification a malformed spec reads with ok = false and extents 1.
*/
#ifndef TILUA_KERNEL_H
#define TILUA_KERNEL_H

#include "dialects.h"

typedef struct KernelSpec {
  int64_t block[3];   /* threads per block along x, y, z */
  int64_t cluster[3]; /* CTAs per cluster along x, y, z (1, 1, 1 without a cluster) */
  int64_t threads;    /* block[0] * block[1] * block[2] */
  int64_t warps;      /* ceil(threads / 32) */
  int64_t ctas;       /* CTAs per cluster */
  int64_t smem;       /* kernel_spec.smem: dynamic shared memory, bytes (0 when absent) */
  int64_t grid[3];    /* kernel_spec.grid: the only grid (CTAs) the kernel runs on, when given */
  int64_t min_ctas;   /* kernel_spec.min_ctas: CTAs an SM must hold at once (0 when absent) */
  bool has_cluster;   /* the spec names a cluster */
  bool has_grid;      /* the spec fixes the grid (a precondition every launch checks) */
  bool ok;            /* a kernel with a well-formed spec */
} KernelSpec;

/* The spec of kernel k (a tile.kernel). */
KernelSpec kernel_spec(const IrOp *k);
/* The spec of the kernel around op (op itself when it is one). */
KernelSpec kernel_spec_of(const IrOp *op);
/* Report what is malformed in k's spec (at k), its sizes included; false if anything is. */
bool kernel_spec_check(IrOp *k);
/* What a launch must pass for parameter i of kernel k (kernel_spec.sizes, by
** the parameter's arg_names name): any value, the grid's threads (CTAs times
** the block's threads) or the grid's CTAs. *name gets the parameter's name. */
typedef enum { KERNEL_SIZE_ANY, KERNEL_SIZE_GRID_THREADS, KERNEL_SIZE_GRID_CTAS } KernelSize;
KernelSize kernel_param_size(const IrOp *k, uint32_t i, const char **name);
/* The registers per thread a kernel whose warpgroups move registers
** (setmaxnreg) starts with, its `.maxnreg`: the block's share of an SM's
** (SM90_BLOCK_REGS / threads, a multiple of 8, at most 248). The moves trade
** within that: the CTA's registers are the pool setmaxnreg.inc takes from. */
int64_t kernel_entry_regs(const KernelSpec *ks);
/* Every warp of the block as a mask (0 when not ok). */
uint64_t kernel_warp_mask(const KernelSpec *ks);
/* The enclosing tile.kernel of op (op itself when it is one), or NULL. */
IrOp *kernel_of(const IrOp *op);

/* Warps [first, first + n) as a mask; 0 when they do not fit 64 bits. */
uint64_t kernel_warps_mask(int64_t first, int64_t n);
int kernel_popcount(uint64_t m);
int kernel_ctz(uint64_t m);
/* A non-empty run of consecutive set bits. */
bool kernel_mask_contiguous(uint64_t m);

/* The first warp of an agent. A tile.agent: its warp_id, else the warp after
** the agent before it (the agents of a kernel are its direct children, in
** order). A tileas.agent: the warp_id of its agent_switch entry, else (bare,
** before optimize-execution-unit-mapping) the warp after the agent before it. */
int64_t kernel_agent_first_warp(const IrOp *agent);
/* The warps of an agent (tile.agent or tileas.agent): its num_warps. */
int64_t kernel_agent_warps(const IrOp *agent);
uint64_t kernel_agent_mask(const IrOp *agent);
/* The entry of a tileas.agent's agent_switch that it runs (the agents take
** the entries that are not holes, in order), or -1 outside an agent_switch. */
int64_t kernel_switch_entry(const IrOp *agent);

/* The shared memory of kernel k as convert-tile-to-nvvm lays it out: every
** tile.alloc_shared in program order at the next multiple of its `align`,
** then every tile.dynamic_shared at one offset, the static bytes rounded up
** to their largest `align`. each(op, offset, bytes, ud) (if given) sees every
** allocation in program order (a dynamic one with 0 bytes). */
typedef struct KernelSharedLayout {
  int64_t static_bytes; /* where the dynamic part starts (the kernel's shared_static) */
  int64_t bytes;        /* static_bytes + kernel_spec.smem (shared_bytes) */
  int64_t align; /* the largest alignment asked, at least TILE_DEFAULT_ALIGN (shared_align) */
  bool overflow; /* a size or offset did not fit 64 bits (the others are then meaningless) */
} KernelSharedLayout;
KernelSharedLayout
kernel_shared_layout(IrOp *k, void (*each)(IrOp *op, int64_t offset, int64_t bytes, void *ud),
                     void *ud);

/* Where an op runs. */
typedef struct KernelExec {
  uint64_t mask; /* the warps (0: unknown, a malformed mask) */
  IrOp *scope;   /* what sets them: the innermost tile.agent, cutlass.async.exec,
                 ** switch_by_executor (of a case) or the kernel; NULL outside a kernel */
  IrOp *narrow;  /* the innermost op around op that narrows execution below a
                 ** warp: tile.elect_one, or an scf.if on an elect (its then-region) */
} KernelExec;
KernelExec kernel_exec_of(const IrOp *op);

#endif
