/* Repro 21 (a misuse the C API once let through): a type and an attribute of context A used to
** build an op in context B were accepted; destroying A left B pointing into freed memory. */
#include "capi_check.h"

int main(void) {
  tlContext a = new_context(), b = new_context();
  tlType i32a = tlIntegerTypeGet(a, 32);
  tlModule mb = tlModuleCreateEmpty(b);
  tlType i32b = tlIntegerTypeGet(b, 32);
  tlOperation k = tlKernelCreate(mb, str("k"), 1, &i32b, NULL, 32, 1, 1);
  tlBlock body = tlOperationGetRegionBlock(k, 0, 0, NULL);
  CHECK(!tlTypeEqual(i32a, i32b));

  /* A's type as a result type, A's attribute as an attribute: both refused */
  tlNamedAttribute va = tlNamedAttributeGet(str("value"), tlIntegerAttrGet(i32a, 7));
  int before = errors;
  tlOperation o = tlOperationCreate(body, str("arith.constant"), 0, NULL, 1, &i32a, 1, &va, 0);
  CHECK(tlOperationIsNull(o));
  CHECK_ERROR(before, "result type #0 belongs to another context");
  before = errors;
  o = tlOperationCreate(body, str("arith.constant"), 0, NULL, 1, &i32b, 1, &va, 0);
  CHECK(tlOperationIsNull(o));
  CHECK_ERROR(before, "attribute #0 belongs to another context");
  /* A's type as a kernel parameter, in an array attribute of B, as a pointer element */
  before = errors;
  CHECK(tlOperationIsNull(tlKernelCreate(mb, str("k2"), 1, &i32a, NULL, 32, 1, 1)));
  CHECK_ERROR(before, "parameter type #0 belongs to another context");
  tlAttribute one_a = tlIntegerAttrGet(i32a, 1);
  before = errors;
  CHECK(tlAttributeIsNull(tlArrayAttrGet(b, 1, &one_a)));
  CHECK_ERROR(before, "element #0 belongs to another context");
  /* B's own build still works */
  tlNamedAttribute vb = tlNamedAttributeGet(str("value"), tlIntegerAttrGet(i32b, 7));
  CHECK(!tlOperationIsNull(
      tlOperationCreate(body, str("arith.constant"), 0, NULL, 1, &i32b, 1, &vb, 0)));

  /* A destroyed: its handles are refused, never read */
  tlContextDestroy(a);
  before = errors;
  CHECK(tlOperationIsNull(
      tlOperationCreate(body, str("arith.constant"), 0, NULL, 1, &i32a, 1, &vb, 0)));
  CHECK_ERROR(before, "result type #0 belongs to a destroyed context");
  CHECK(tlAttributeIsNull(tlIntegerAttrGet(i32a, 1))); /* stderr: a handle of a destroyed context */
  CHECK(tlTypeIsNull(tlPointerTypeGet(i32a, str("global"))));
  tlModulePrint(mb, sink, NULL);
  CHECK(tlLogicalResultIsSuccess(tlModuleVerify(mb)));
  tlContextDestroy(a); /* twice: refused, not freed again */
  tlContextDestroy(b);
  return finish("capi_21_cross_context_type");
}
