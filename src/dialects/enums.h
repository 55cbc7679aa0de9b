/*
** enums.h -- every enumerated attribute value and type keyword of the
** dialects, one X-list each: X(enumerator, "spelling" [, extra columns]).
**
** A list L gives the enumerators (L_X, in order from 0), L__COUNT and the
** NULL-terminated spellings L_names[] (enums.c). ATTR rows of the op tables
** name a list for an enum attribute (ENUM(L, default)); the verifier checks
** the spelling, the typed readers return the enumerator, the lowerings and the
** emitter switch on it, and core.enums() gives the lists to Lua and the docs.
** The scheduler lists live with the reference schedulers (src/sched/sched.h).
*/
#ifndef TILUA_ENUMS_H
#define TILUA_ENUMS_H

#include "../sched/sched.h"

#define IR_ENUM_ID(id, name, ...) id,
#define IR_ENUM_NAME(id, name, ...) name,
#define IR_ENUM_ONE(id, name, ...) +1

/* The X-lists keep their hand layout (clang-format would stair-step them). */
/* clang-format off */

/* {=== tile and nvvm */
#define DIM_LIST(X) X(DIM_X, "x") X(DIM_Y, "y") X(DIM_Z, "z")
/* Memory scopes; the mbarrier sem scopes are the first two (BAR_SCOPE). */
#define SCOPE_LIST(X) X(SCOPE_CTA, "cta") X(SCOPE_CLUSTER, "cluster") X(SCOPE_GPU, "gpu") X(SCOPE_SYS, "sys")
#define BAR_SCOPE_LIST(X) X(BAR_SCOPE_CTA, "cta") X(BAR_SCOPE_CLUSTER, "cluster")
/* Atomic operations: X(id, name, PTX operation, sign of the integer type: s, u or b); a
** line each for the arithmetic ones, their unsigned forms, exchange and the bitwise ones. */
#define ATOMIC_KIND_LIST(X)                                                                        \
  X(ATOMIC_ADD, "add", "add", 'u') X(ATOMIC_MAX, "max", "max", 's') X(ATOMIC_MIN, "min", "min", 's') \
  X(ATOMIC_UMAX, "umax", "max", 'u') X(ATOMIC_UMIN, "umin", "min", 'u')                            \
  X(ATOMIC_EXCH, "exch", "exch", 'b')                                                              \
  X(ATOMIC_AND, "and", "and", 'b') X(ATOMIC_OR, "or", "or", 'b') X(ATOMIC_XOR, "xor", "xor", 'b')
#define FENCE_SPACE_LIST(X) X(FENCE_SPACE_SHARED, "shared") X(FENCE_SPACE_GLOBAL, "global")
#define PROXY_SPACE_LIST(X)                                                                        \
  X(PROXY_SHARED_CTA, "shared::cta") X(PROXY_SHARED_CLUSTER, "shared::cluster") X(PROXY_GLOBAL, "global")
#define FENCE_SEM_LIST(X) X(FENCE_ACQ_REL, "acq_rel") X(FENCE_SC, "sc")
#define MAXNREG_ACTION_LIST(X) X(MAXNREG_INC, "inc") X(MAXNREG_DEC, "dec")
/* TMA: reductions of a tensor store; tensor map swizzles X(id, name, bytes of the span). */
#define TMA_REDUCE_LIST(X)                                                                         \
  X(TMA_REDUCE_ADD, "add") X(TMA_REDUCE_MIN, "min") X(TMA_REDUCE_MAX, "max")                       \
  X(TMA_REDUCE_INC, "inc") X(TMA_REDUCE_DEC, "dec") X(TMA_REDUCE_AND, "and")                       \
  X(TMA_REDUCE_OR, "or") X(TMA_REDUCE_XOR, "xor")
#define TMA_SWIZZLE_LIST(X)                                                                        \
  X(TMA_SWIZZLE_LINEAR, "linear", 0) X(TMA_SWIZZLE_32, "sw32", 32) X(TMA_SWIZZLE_64, "sw64", 64)   \
  X(TMA_SWIZZLE_128, "sw128", 128)
/* wgmma operand types: X(id, name, K of the instruction, transposes allowed (16-bit
** types only), an f16 accumulator allowed). */
#define WGMMA_TYPE_LIST(X)                                                                         \
  X(WGMMA_F16, "f16", 16, true, true)                                                              \
  X(WGMMA_BF16, "bf16", 16, true, false)                                                           \
  X(WGMMA_TF32, "tf32", 8, false, false)                                                           \
  X(WGMMA_E4M3, "e4m3", 32, false, true)                                                           \
  X(WGMMA_E5M2, "e5m2", 32, false, true)
/* fp8 formats of conversions (tile.pack, tile.unpack_fp8). */
#define FP8_TYPE_LIST(X) X(FP8_E4M3, "e4m3") X(FP8_E5M2, "e5m2")
/* Warp-wide exchange: shfl.sync modes, vote.sync predicates, redux.sync
** operations X(id, name, PTX operation, sign of the type: s, u or b), a line each
** for the arithmetic ones, their unsigned forms and the bitwise ones. */
#define SHFL_MODE_LIST(X) X(SHFL_IDX, "idx") X(SHFL_UP, "up") X(SHFL_DOWN, "down") X(SHFL_BFLY, "bfly")
#define VOTE_MODE_LIST(X) X(VOTE_ALL, "all") X(VOTE_ANY, "any") X(VOTE_UNI, "uni")
#define REDUX_KIND_LIST(X)                                                                         \
  X(REDUX_ADD, "add", "add", 's') X(REDUX_MIN, "min", "min", 's') X(REDUX_MAX, "max", "max", 's')  \
  X(REDUX_UMIN, "umin", "min", 'u') X(REDUX_UMAX, "umax", "max", 'u')                              \
  X(REDUX_AND, "and", "and", 'b') X(REDUX_OR, "or", "or", 'b') X(REDUX_XOR, "xor", "xor", 'b')
/* Approximate math: X(id, name, PTX instruction for f32, for f16, for bf16 (NULL: none)). */
#define MATH_FN_LIST(X)                                                                            \
  X(MATH_EX2, "ex2", "ex2.approx.ftz.f32", "ex2.approx.f16", "ex2.approx.ftz.bf16")                \
  X(MATH_LG2, "lg2", "lg2.approx.ftz.f32", NULL, NULL)                                             \
  X(MATH_RSQRT, "rsqrt", "rsqrt.approx.ftz.f32", NULL, NULL)                                       \
  X(MATH_RCP, "rcp", "rcp.approx.ftz.f32", NULL, NULL)                                             \
  X(MATH_SQRT, "sqrt", "sqrt.approx.ftz.f32", NULL, NULL)                                          \
  X(MATH_SIN, "sin", "sin.approx.ftz.f32", NULL, NULL)                                             \
  X(MATH_COS, "cos", "cos.approx.ftz.f32", NULL, NULL)                                             \
  X(MATH_TANH, "tanh", "tanh.approx.f32", "tanh.approx.f16", "tanh.approx.bf16")
/* Load hints: the cache operator (.ca .cg .cs .lu .cv) and the L1 eviction priority. */
#define LOAD_CACHE_LIST(X) X(CACHE_CA, "ca") X(CACHE_CG, "cg") X(CACHE_CS, "cs") X(CACHE_LU, "lu") X(CACHE_CV, "cv")
#define L1_EVICT_LIST(X)                                                                           \
  X(EVICT_NORMAL, "evict_normal") X(EVICT_UNCHANGED, "evict_unchanged") X(EVICT_FIRST, "evict_first") \
  X(EVICT_LAST, "evict_last") X(EVICT_NO_ALLOCATE, "no_allocate")
/* }=== */

/* {=== arith: X(id, name, PTX comparison, 's'igned / 'u'nsigned): equality, then the
** signed and the unsigned orderings, two a line */
#define CMPI_PRED_LIST(X)                                                                          \
  X(CMPI_EQ, "eq", "eq", 's') X(CMPI_NE, "ne", "ne", 's')                                          \
  X(CMPI_SLT, "slt", "lt", 's') X(CMPI_SLE, "sle", "le", 's')                                      \
  X(CMPI_SGT, "sgt", "gt", 's') X(CMPI_SGE, "sge", "ge", 's')                                      \
  X(CMPI_ULT, "ult", "lt", 'u') X(CMPI_ULE, "ule", "le", 'u')                                      \
  X(CMPI_UGT, "ugt", "gt", 'u') X(CMPI_UGE, "uge", "ge", 'u')
/* X(id, name, PTX comparison) */
#define CMPF_PRED_LIST(X)                                                                          \
  X(CMPF_OEQ, "oeq", "eq") X(CMPF_ONE, "one", "ne") X(CMPF_OLT, "olt", "lt")                       \
  X(CMPF_OLE, "ole", "le") X(CMPF_OGT, "ogt", "gt") X(CMPF_OGE, "oge", "ge")                       \
  X(CMPF_ORD, "ord", "num") X(CMPF_UEQ, "ueq", "equ") X(CMPF_UNE, "une", "neu")                    \
  X(CMPF_ULT, "ult", "ltu") X(CMPF_ULE, "ule", "leu") X(CMPF_UGT, "ugt", "gtu")                    \
  X(CMPF_UGE, "uge", "geu") X(CMPF_UNO, "uno", "nan")
/* }=== */

/* {=== cutlass */
/* Pipeline modes: who arrives on a stage's empty barrier (docs/cutlass.md). */
#define PIPELINE_MODE_LIST(X)                                                                      \
  X(MODE_COOPERATIVE, "cooperative")                                                               \
  X(MODE_WARP_SPECIALIZED, "warp_specialized")                                                     \
  X(MODE_STRIDED_UREM, "strided_urem")                                                             \
  X(MODE_STRIDED_UDIV, "strided_udiv")                                                             \
  X(MODE_CLUSTER, "cluster")                                                                       \
  X(MODE_PINGPONG, "pingpong")                                                                     \
  X(MODE_PINGPONG_CLUSTER, "pingpong_cluster")
#define PIPELINE_ROLE_LIST(X) X(ROLE_PRODUCER, "producer") X(ROLE_CONSUMER, "consumer")
/* The kinds of the scheduler types: the reference's, then SM100 StreamK. */
#define CUT_SCHED_KIND_LIST(X) SCHED_KIND_LIST(X) X(CUT_SCHED_SM100_STREAMK, "sm100_streamk")
#define SCHED_MODEL_LIST(X) X(SCHED_MODEL_STATIC, "static") X(SCHED_MODEL_PULL, "pull")
#define STRIPED_REDUCE_LIST(X) X(STRIPED_ADD, "add") X(STRIPED_MAX, "max")
/* Async token flavors; futures have the first two. */
#define TOKEN_FLAVOR_LIST(X) X(FLAVOR_MBARRIER, "mbarrier") X(FLAVOR_BULK, "bulk") X(FLAVOR_GMMA, "gmma")
#define FUTURE_FLAVOR_LIST(X) X(FUTURE_MBARRIER, "mbarrier") X(FUTURE_BULK, "bulk")
/* }=== */

/* {=== tileas (the tile-program level, docs/tileprog.md) */
/* Elementwise functions of tileas.math; reductions of tileas.reduce; agent roles. */
#define TILEAS_MATH_FN_LIST(X)                                                                     \
  X(TMATH_EXP, "exp") X(TMATH_EXP2, "exp2") X(TMATH_LOG, "log") X(TMATH_LOG2, "log2")              \
  X(TMATH_SQRT, "sqrt") X(TMATH_RSQRT, "rsqrt") X(TMATH_ABS, "abs") X(TMATH_RCP, "rcp")              \
  X(TMATH_TANH, "tanh") X(TMATH_ERF, "erf") X(TMATH_SIGMOID, "sigmoid") X(TMATH_SILU, "silu")      \
  X(TMATH_GELU, "gelu") X(TMATH_GELU_TANH, "gelu_tanh")
#define TILEAS_REDUCE_KIND_LIST(X) X(TREDUCE_ADD, "add") X(TREDUCE_MAX, "max") X(TREDUCE_MIN, "min")
#define AGENT_KIND_LIST(X) X(AGENT_PRODUCER, "producer") X(AGENT_CONSUMER, "consumer") X(AGENT_COMPUTE, "compute")
/* A tile program's schedule once lowered (tileas.launch's `schedule`). */
#define TILEAS_SCHEDULE_LIST(X)                                                                    \
  X(TSCHED_STREAMK, "streamk") X(TSCHED_SPLITK, "splitk") X(TSCHED_DYNAMIC, "dynamic")                \
  X(TSCHED_DATA_PARALLEL, "data_parallel") X(TSCHED_SPLIT_TAIL, "split_tail")
/* How the launcher fills a lowered tile program's parameter (the entries of
** its tileas.params: "KIND:TENSOR", "dim:TENSOR:D", "programs:x", "workspace";
** lua/tilua/gpu/launch.lua), with how many ':'-separated parts follow the kind. */
#define TILEAS_PARAM_LIST(X)                                                                       \
  X(TPARAM_MAP, "map", 1) X(TPARAM_PTR, "ptr", 1) X(TPARAM_DIM, "dim", 2)                          \
  X(TPARAM_STRIDE, "stride", 2) X(TPARAM_ARG, "arg", 1) X(TPARAM_PROGRAMS, "programs", 1)          \
  X(TPARAM_WORKSPACE, "workspace", 0)
/* The `kind` of a tile layout: register layouts, then the shared one. */
#define LAYOUT_KIND_LIST(X)                                                                        \
  X(LAYOUT_BLOCKED, "blocked") X(LAYOUT_MMA, "mma") X(LAYOUT_MMA_OPERAND, "mma_operand")           \
  X(LAYOUT_SLICE, "slice") X(LAYOUT_REPLICATED, "replicated") X(LAYOUT_SHARED, "shared")
/* }=== */

/* Every list: E(LIST, "name in core.enums()"), or S(...) for the lists whose
** enumerators sched.h declares. */
#define IR_ENUM_LISTS(E, S)                                                                        \
  E(DIM, "dim")                                                                                    \
  E(SCOPE, "scope")                                                                                \
  E(BAR_SCOPE, "bar_scope")                                                                        \
  E(ATOMIC_KIND, "atomic_kind")                                                                    \
  E(FENCE_SPACE, "fence_space")                                                                    \
  E(PROXY_SPACE, "proxy_space")                                                                    \
  E(FENCE_SEM, "fence_sem")                                                                        \
  E(MAXNREG_ACTION, "maxnreg_action")                                                              \
  E(TMA_REDUCE, "tma_reduce")                                                                      \
  E(TMA_SWIZZLE, "tma_swizzle")                                                                    \
  E(WGMMA_TYPE, "wgmma_type")                                                                      \
  E(FP8_TYPE, "fp8_type")                                                                          \
  E(SHFL_MODE, "shfl_mode")                                                                        \
  E(VOTE_MODE, "vote_mode")                                                                        \
  E(REDUX_KIND, "redux_kind")                                                                      \
  E(MATH_FN, "math_fn")                                                                            \
  E(LOAD_CACHE, "load_cache")                                                                      \
  E(L1_EVICT, "l1_evict")                                                                          \
  E(CMPI_PRED, "cmpi_predicate")                                                                   \
  E(CMPF_PRED, "cmpf_predicate")                                                                   \
  E(PIPELINE_MODE, "pipeline_mode")                                                                \
  E(PIPELINE_ROLE, "pipeline_role")                                                                \
  S(CUT_SCHED_KIND, "sched_kind")                                                                  \
  S(SCHED_ORDER, "raster_order")                                                                   \
  S(SCHED_DECOMP, "decomposition")                                                                 \
  S(SCHED_REDUCTION, "reduction")                                                                  \
  E(SCHED_MODEL, "sched_model")                                                                    \
  E(STRIPED_REDUCE, "striped_reduce")                                                              \
  E(TOKEN_FLAVOR, "token_flavor")                                                                  \
  E(FUTURE_FLAVOR, "future_flavor")                                                               \
  E(TILEAS_MATH_FN, "tileas_math_fn")                                                              \
  E(TILEAS_REDUCE_KIND, "tileas_reduce_kind")                                                      \
  E(AGENT_KIND, "agent_kind")                                                                      \
  E(TILEAS_SCHEDULE, "tileas_schedule")                                                            \
  E(TILEAS_PARAM, "tileas_param")                                                                  \
  E(LAYOUT_KIND, "layout_kind")

/* clang-format on */

/* Enumerators of the lists not declared elsewhere. */
#define IR_ENUM_DECLARE(L, lname) enum { L##_LIST(IR_ENUM_ID) };
#define IR_ENUM_DECLARED(L, lname)
IR_ENUM_LISTS(IR_ENUM_DECLARE, IR_ENUM_DECLARED)
#undef IR_ENUM_DECLARE
#undef IR_ENUM_DECLARED
enum { CUT_SCHED_SM100_STREAMK = SCHED_STREAMK + 1 };

/* Counts and spellings of every list. */
#define IR_ENUM_COUNT(L, lname) enum { L##__COUNT = 0 L##_LIST(IR_ENUM_ONE) };
IR_ENUM_LISTS(IR_ENUM_COUNT, IR_ENUM_COUNT)
#undef IR_ENUM_COUNT
#define IR_ENUM_NAMES(L, lname) extern const char *const L##_names[];
IR_ENUM_LISTS(IR_ENUM_NAMES, IR_ENUM_NAMES)
#undef IR_ENUM_NAMES

/* The index of s in a NULL-terminated list of spellings, -1 if absent. */
int ir_enum_index(const char *const *names, const char *s);

#endif
