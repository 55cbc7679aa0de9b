/*
** sm90_limits.h -- the numbers of the target (sm_90, Hopper) and the few
** numbers tilua itself fixes, in one place. Verifiers, lowerings, the emitter,
** the Lua surface (core.limits()) and the docs read them from here.
*/
#ifndef TILUA_SM90_LIMITS_H
#define TILUA_SM90_LIMITS_H

/* The tables keep their hand layout. */
/* clang-format off */

/* {=== the hardware (PTX ISA 8.x, CUDA programming guide, compute capability 9.0) */
#define SM90_WARP_SIZE 32
#define SM90_MAX_THREADS 1024                                /* threads per block */
#define SM90_MAX_WARPS (SM90_MAX_THREADS / SM90_WARP_SIZE)   /* warps per block */
#define SM90_MAX_BLOCK_Z 64                                  /* block extent z (x and y: max_threads) */
#define SM90_MAX_CLUSTER_CTAS 16                             /* CTAs per cluster (non-portable opt-in) */
#define SM90_MAX_GRID_X 2147483647                           /* grid extent x, blocks */
#define SM90_MAX_GRID_YZ 65535                               /* grid extents y and z, blocks */
#define SM90_MAX_SMEM (227 * 1024)                           /* shared memory per block (opt-in), bytes */
#define SM90_SMEM_DEFAULT (48 * 1024)                        /* dynamic shared memory without opt-in */
#define SM90_MAX_SMEM_ALIGN 1024                             /* largest alignment a shared allocation asks */
#define SM90_NAMED_BARRIERS 16                               /* bar.sync / bar.arrive ids 0..15 */
#define SM90_MBARRIER_MAX_COUNT ((1 << 20) - 1)              /* mbarrier arrival and tx-count limit */
#define SM90_BULK_WAIT_MAX 63                                /* cp.async.bulk.wait_group N */
#define SM90_WGMMA_WAIT_MAX 7                                /* wgmma.wait_group N */
#define SM90_MAXNREG_MIN 24                                  /* setmaxnreg count range, multiple of 8 */
#define SM90_MAXNREG_MAX 256
#define SM90_BLOCK_REGS 65536                                /* 32-bit registers of a block (and an SM) */
#define SM90_SM_THREADS 2048                                 /* resident threads of an SM */
#define SM90_SM_BLOCKS 32                                    /* resident blocks of an SM */
#define SM90_MAX_THREAD_REGS 255                             /* 32-bit registers of one thread */
#define SM90_BULK_ALIGN 16                                   /* cp.async.bulk sizes and addresses */
#define SM90_PRINTF_MAX_ARGS 32                              /* arguments of one device printf (CUDA's) */
/* }=== */

/* {=== tilua's own choices (docs/cutlass.md) */
#define CUT_POOL_SLOTS 32       /* mbarrier slots per CTA shared by pipeline.init and seq_bar.init */
#define CUT_MAX_PARTICIPANTS 16 /* participant warp masks per side of a pipeline */
#define CUT_MAX_CASES 32        /* cases of a switch_by_executor */
#define TILE_DEFAULT_ALIGN 16   /* alignment of a shared allocation without `align` */
#define TILEAS_MAX_STAGES (CUT_POOL_SLOTS / 2) /* a tile program's ring: 2 pool slots a stage */
/* }=== */

/* Every limit as (C name, value, what): core.limits() and the docs list them. */
#define SM90_LIMIT_LIST(X)                                                                         \
  X(warp_size, SM90_WARP_SIZE, "threads per warp")                                                \
  X(max_threads, SM90_MAX_THREADS, "threads per block")                                           \
  X(max_warps, SM90_MAX_WARPS, "warps per block")                                                 \
  X(max_block_z, SM90_MAX_BLOCK_Z, "block extent z")                                              \
  X(max_cluster_ctas, SM90_MAX_CLUSTER_CTAS, "CTAs per cluster")                                  \
  X(max_grid_x, SM90_MAX_GRID_X, "grid extent x, blocks")                                         \
  X(max_grid_yz, SM90_MAX_GRID_YZ, "grid extents y and z, blocks")                                \
  X(max_smem, SM90_MAX_SMEM, "shared memory per block, bytes (opt-in)")                           \
  X(smem_default, SM90_SMEM_DEFAULT, "dynamic shared memory without opt-in, bytes")               \
  X(max_smem_align, SM90_MAX_SMEM_ALIGN, "largest shared allocation alignment, bytes")            \
  X(named_barriers, SM90_NAMED_BARRIERS, "named barrier ids")                                     \
  X(mbarrier_max_count, SM90_MBARRIER_MAX_COUNT, "mbarrier arrival / transaction count limit")    \
  X(block_regs, SM90_BLOCK_REGS, "32-bit registers of a block")                                   \
  X(sm_threads, SM90_SM_THREADS, "resident threads of an SM")                                     \
  X(sm_blocks, SM90_SM_BLOCKS, "resident blocks of an SM")                                        \
  X(max_thread_regs, SM90_MAX_THREAD_REGS, "32-bit registers of one thread")                      \
  X(bulk_wait_max, SM90_BULK_WAIT_MAX, "largest cp.async.bulk.wait_group immediate")              \
  X(wgmma_wait_max, SM90_WGMMA_WAIT_MAX, "largest wgmma.wait_group immediate")                    \
  X(pool_slots, CUT_POOL_SLOTS, "mbarrier slots per CTA (pipelines and seq_bars)")                \
  X(max_participants, CUT_MAX_PARTICIPANTS, "participant warp masks per pipeline side")           \
  X(max_cases, CUT_MAX_CASES, "cases of a switch_by_executor")                                    \
  X(max_ring_stages, TILEAS_MAX_STAGES, "stages of a tile program's ring")                        \
  X(printf_max_args, SM90_PRINTF_MAX_ARGS, "arguments of one tl.printf")
/* clang-format on */

#endif
