/* Repro 20 (a misuse the C API once let through): tlKernelCreate takes unsigned block sizes;
** 2^31 x 2^31 x 4 overflowed int64 in the verifier (UBSan) and, wrapped, verified. */
#include "capi_check.h"

int main(void) {
  tlContext c = new_context();
  tlModule m = tlModuleCreateEmpty(c);
  tlOperation k = tlKernelCreate(m, str("k"), 0, NULL, NULL, 1u << 31, 1u << 31, 4);
  CHECK(!tlOperationIsNull(k));
  int before = errors;
  CHECK(tlLogicalResultIsFailure(tlModuleVerify(m)));
  CHECK_ERROR(before, "has more than 2^63 threads, the limit is 1024");
  /* and a block just over the limit, and the largest z */
  tlModule m2 = tlModuleCreateEmpty(c);
  tlKernelCreate(m2, str("k"), 0, NULL, NULL, 1024, 1, 2);
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlModuleVerify(m2)));
  CHECK_ERROR(before, "block of 2048 threads exceeds 1024");
  tlModule m3 = tlModuleCreateEmpty(c);
  tlKernelCreate(m3, str("k"), 0, NULL, NULL, 1, 1, 128);
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlModuleVerify(m3)));
  CHECK_ERROR(before, "block extent z = 128 exceeds 64");
  tlContextDestroy(c);
  return finish("capi_20_kernel_block_overflow");
}
