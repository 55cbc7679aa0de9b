/* A tile program through the C API: built by a script (the tileprog surface),
** lowered by tile-to-ptx, whose convert-tileas-to-cutlass is written in Lua
** and runs in the context's Lua state, then emitted as PTX holding the GEMM's
** wgmma, TMA loads and stmatrix. */
#include "capi_check.h"

static char ptx[1 << 17];
static size_t ptx_len;

static void keep(tlStringRef s, void *ud) {
  (void)ud;
  ptx_len = s.length < sizeof ptx - 1 ? s.length : sizeof ptx - 1;
  memcpy(ptx, s.data, ptx_len);
  ptx[ptx_len] = 0;
}

int main(void) {
  tlContext c = new_context();
  tlModule m = tlModuleCreateFromScript(c, str(
      "local tl = require 'tilua'\n"
      "local k = tl.tile_kernel('gemm', { params = { A = tl.tensor(tl.bf16, 2), B = tl.tensor(tl.bf16, 2),\n"
      "                                    C = tl.tensor(tl.bf16, 2), K = tl.i32 }, cluster = { 1, 1, 1 } })\n"
      "k:define(function(k, p)\n"
      "  local pm, pn = tl.program_id('x'), tl.program_id('y')\n"
      "  local acc = tl.for_tiles(p.K, 64, tl.zeros({ 128, 256 }, tl.f32), function(kk, acc)\n"
      "    return tl.dot(tl.load(p.A, { pm, kk }, { 128, 64 }), tl.load(p.B, { pn, kk }, { 256, 64 }), acc)\n"
      "  end)\n"
      "  tl.store(p.C, { pm, pn }, acc:cast(tl.bf16))\n"
      "end)\n"), str("gemm.lua"));
  CHECK(!tlModuleIsNull(m));
  CHECK(tlLogicalResultIsSuccess(tlModuleRunPipeline(m, str("tile-to-ptx"))));
  CHECK(tlLogicalResultIsSuccess(tlModuleEmitPTX(m, keep, NULL)));
  CHECK(strstr(ptx, "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16") != NULL);
  CHECK(strstr(ptx, "cp.async.bulk.tensor.2d") != NULL);
  CHECK(strstr(ptx, "stmatrix.sync.aligned") != NULL);
  /* an error of the Lua pass reaches the host as a diagnostic at the op */
  tlModule plain = tlModuleCreateParse(c, str(
      "module {\n"
      "  tile.kernel {arg_names = [\"X\"], kernel_spec = {block = [128, 1, 1], num_ctas = 1}, sym_name = \"plain\"} {\n"
      "  ^bb0(%0: !tileas.tensor<f32, 1>):\n"
      "    %1 = arith.constant {value = 0 : i32} : i32\n"
      "    %2 = tileas.tiled_load %0, %1 : tile<64xf32, rmem, {kind = \"blocked\", warps = [4]}>\n"
      "    tileas.tiled_store %0, %1, %2\n"
      "  }\n"
      "}\n"), str("plain.tir"));
  CHECK(!tlModuleIsNull(plain));
  int before = errors;
  CHECK(tlLogicalResultIsFailure(tlModuleRunPipeline(plain, str("convert-tileas-to-cutlass"))));
  CHECK(errors > before && strstr(last, "has no agents") != NULL && last_line == 2);
  tlContextDestroy(c);
  return finish("capi_tile_program");
}
