/* Repro 24 (a misuse the C API once let through): the null type of a bad width was accepted by
** tlKernelCreate as a parameter type; the verifier dereferenced it. */
#include "capi_check.h"

int main(void) {
  tlContext c = new_context();
  tlModule m = tlModuleCreateEmpty(c);
  int before = errors;
  tlType bad = tlIntegerTypeGet(c, 0);
  CHECK(tlTypeIsNull(bad));
  CHECK_ERROR(before, "integer width 0 is out of range [1, 64]");
  before = errors;
  CHECK(tlOperationIsNull(tlKernelCreate(m, str("k"), 1, &bad, NULL, 32, 1, 1)));
  CHECK_ERROR(before, "parameter type #0 is null");
  /* null handles propagate without new diagnostics */
  before = errors;
  CHECK(tlAttributeIsNull(tlIntegerAttrGet(bad, 1)));
  CHECK(tlTypeIsNull(tlPointerTypeGet(bad, str("global"))));
  CHECK(tlTypeIsNull(tlValueGetType((tlValue){NULL, 0})));
  CHECK(tlOperationIsNull(
      tlOperationCreate((tlBlock){NULL, 0}, str("arith.addi"), 0, NULL, 0, NULL, 0, NULL, 0)));
  CHECK(tlLogicalResultIsFailure(tlModuleVerify((tlModule){NULL, 0})));
  CHECK(errors == before);
  /* a null result type and a null operand in arrays are refused */
  tlOperation k = tlKernelCreate(m, str("k"), 0, NULL, NULL, 32, 1, 1);
  tlBlock body = tlOperationGetRegionBlock(k, 0, 0, NULL);
  before = errors;
  CHECK(tlOperationIsNull(
      tlOperationCreate(body, str("arith.constant"), 0, NULL, 1, &bad, 0, NULL, 0)));
  CHECK_ERROR(before, "result type #0 is null");
  tlValue none = {NULL, 0};
  tlType i32 = tlIntegerTypeGet(c, 32);
  before = errors;
  tlValue two[] = {none, none};
  CHECK(tlOperationIsNull(tlOperationCreate(body, str("arith.addi"), 2, two, 1, &i32, 0, NULL, 0)));
  CHECK_ERROR(before, "operand #0 is null");
  CHECK(tlLogicalResultIsSuccess(tlModuleVerify(m)));
  tlContextDestroy(c);
  return finish("capi_24_null_param_type");
}
