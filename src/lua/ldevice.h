/*
** ldevice.h -- what the device bindings share: the Lua state's CUDA runtimes,
** one per device (l_device.c), streams (l_stream.c) and tensor maps (l_tensor.c).
*/
#ifndef TILUA_LDEVICE_H
#define TILUA_LDEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../cuda/cuda_rt.h"
#include "lbind.h"

#define LB_TENSOR_MAP "tilua.TensorMap"
#define LB_BUFFER "tilua.Buffer"
#define LB_MODULE "tilua.Module"
#define LB_FUNCTION "tilua.Function" /* an LbFunction; its user value keeps the module */
#define LB_STREAM "tilua.Stream"
#define LB_EVENT "tilua.Event"

/* A kernel of a loaded module (the userdata LB_FUNCTION). */
typedef struct LbFunction {
  CUfunction fn;
  unsigned smem_allowed; /* the dynamic shared memory its attribute was raised to (fn:launch and
                         ** its launch plans, l_launch.c: one memo) */
} LbFunction;

/* A device buffer (the userdata LB_BUFFER; tl.device's buffers hold one as `raw`). */
typedef struct LbBuffer {
  CUdeviceptr ptr;
  size_t bytes;
  int live;        /* device memory attached */
  int device;      /* the ordinal of the device that holds it */
  TlcuRuntime *rt; /* ... and its runtime */
} LbBuffer;

/* How many buffers were freed in this process so far: a launch that found all
** its arguments as they were at the last one (l_launch.c) still holds live
** buffers only while this has not moved. */
unsigned lb_buffer_frees(void);

#define LB_MAX_DEVICES 16 /* devices one Lua state may drive */

/* The current device's runtime, initialized; raises "no GPU: ..." at the user's line without one.
 */
TlcuRuntime *lb_cuda(lua_State *L);
/* The current device's runtime as it is, without raising or creating one (for
** finalizers: it may be shut down); NULL when the state never made one. */
TlcuRuntime *lb_cuda_runtime(lua_State *L);
/* Where the state keeps the current device's ordinal (tl.device.use changes
** it): a launch plan compares it with its own device's before each launch. */
const int *lb_current_device(lua_State *L);
/* The runtime of the device whose ordinal is at idx, initialized; raises on one that is not there.
 */
TlcuRuntime *lb_device(lua_State *L, int idx);
/* The runtime of the device a Function (at idx) was loaded on. */
TlcuRuntime *lb_function_runtime(lua_State *L, int idx);
/* lb_cuda_error for the runtime r (another device's). */
int lb_cuda_error_of(lua_State *L, TlcuRuntime *r, const char *what);
/* The stream at idx (a Stream of l_stream.c), NULL for nil or none; raises otherwise. */
CUstream lb_stream_arg(lua_State *L, int idx);
/* The device address of a Buffer (its size in *bytes) or of an integer address
** (size 0); 0 for anything else. Raises on a freed buffer. */
CUdeviceptr lb_buffer_address(lua_State *L, int idx, size_t *bytes);
/* The 128 bytes of the TensorMap at idx (64-byte aligned), or NULL. */
const uint8_t *lb_tensor_map_bytes(lua_State *L, int idx);
/* What both launch paths of a script (fn:launch, plan:launch) check before a
** Lua integer becomes the runtime's: the dynamic shared memory (0 and up,
** static + dynamic within SM90_MAX_SMEM; their sum returned), and an integer
** argument of a width-bit parameter (its signed or unsigned reading: -2^(w-1)
** .. 2^w - 1). The runtime checks the rest for every launch (tlcu_launch). */
unsigned lb_launch_smem(lua_State *L, lua_Integer static_bytes, lua_Integer dynamic);
void lb_launch_int(lua_State *L, const char *param, int width, lua_Integer v);
/* Raise the runtime's last failure as "what: message" (a kernel's own report as is). */
int lb_cuda_error(lua_State *L, const char *what);

#endif
