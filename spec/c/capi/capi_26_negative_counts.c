/* Repro 26 (a misuse the C API once let through): intptr_t counts were not checked:
** tlArrayAttrGet(ctx, -1, NULL) asked for 32 GiB. Every count of the API is checked here. */
#include <stdint.h>

#include "capi_check.h"

int main(void) {
  tlContext c = new_context();
  int before = errors;
  CHECK(tlAttributeIsNull(tlArrayAttrGet(c, -1, NULL)));
  CHECK_ERROR(before, "element count -1 is out of range");
  before = errors;
  CHECK(tlAttributeIsNull(tlArrayAttrGet(c, 2, NULL)));
  CHECK_ERROR(before, "element count is 2 but the array is NULL");
  tlAttribute one = tlBoolAttrGet(c, true);
  before = errors;
  CHECK(tlAttributeIsNull(tlArrayAttrGet(c, INTPTR_MAX, &one)));
  CHECK_ERROR(before, "out of range");
  before = errors;
  CHECK(tlAttributeIsNull(tlDictionaryAttrGet(c, -3, NULL)));
  CHECK_ERROR(before, "entry count -3 is out of range");
  CHECK(!tlAttributeIsNull(tlArrayAttrGet(c, 0, NULL)));

  tlModule m = tlModuleCreateEmpty(c);
  before = errors;
  CHECK(tlOperationIsNull(tlKernelCreate(m, str("k"), -1, NULL, NULL, 32, 1, 1)));
  CHECK_ERROR(before, "parameter type count -1 is out of range");
  tlOperation k = tlKernelCreate(m, str("k"), 0, NULL, NULL, 32, 1, 1);
  before = errors;
  CHECK(tlOperationGetRegionBlock(k, -1, 0, NULL).ptr == NULL);
  CHECK_ERROR(before, "region -1 is out of range");
  before = errors;
  CHECK(tlOperationGetRegionBlock(k, 5, 0, NULL).ptr == NULL);
  CHECK_ERROR(before, "region 5 is out of range");
  tlBlock body = tlOperationGetRegionBlock(k, 0, 0, NULL);
  CHECK(tlBlockGetNumArguments(body) == 0);
  before = errors;
  CHECK(tlBlockGetArgument(body, -1).ptr == NULL);
  CHECK_ERROR(before, "argument -1 is out of range");
  tlType i32 = tlIntegerTypeGet(c, 32);
  before = errors;
  CHECK(tlOperationIsNull(
      tlOperationCreate(body, str("arith.constant"), -1, NULL, 1, &i32, 0, NULL, 0)));
  CHECK_ERROR(before, "operand count -1 is out of range");
  before = errors;
  CHECK(tlOperationIsNull(
      tlOperationCreate(body, str("arith.constant"), 0, NULL, -1, NULL, 0, NULL, 0)));
  CHECK_ERROR(before, "result type count -1 is out of range");
  before = errors;
  CHECK(tlOperationIsNull(
      tlOperationCreate(body, str("arith.constant"), 0, NULL, 1, &i32, -1, NULL, 0)));
  CHECK_ERROR(before, "attribute count -1 is out of range");
  before = errors;
  CHECK(tlOperationIsNull(
      tlOperationCreate(body, str("arith.constant"), 0, NULL, 1, &i32, 0, NULL, -1)));
  CHECK_ERROR(before, "region count -1 is out of range");
  before = errors;
  CHECK(tlOperationIsNull(
      tlOperationCreate(body, str("arith.constant"), 0, NULL, 1, &i32, 0, NULL, 1000000)));
  CHECK_ERROR(before, "region count 1000000 is out of range");
  tlNamedAttribute v = tlNamedAttributeGet(str("value"), tlIntegerAttrGet(i32, 3));
  tlOperation cst = tlOperationCreate(body, str("arith.constant"), 0, NULL, 1, &i32, 1, &v, 0);
  CHECK(!tlOperationIsNull(cst));
  before = errors;
  CHECK(tlOperationGetResult(cst, -1).ptr == NULL);
  CHECK_ERROR(before, "result -1 is out of range");
  before = errors;
  CHECK(tlOperationGetResult(cst, 1).ptr == NULL);
  CHECK_ERROR(before, "result 1 is out of range");
  CHECK(tlDiagnosticGetNote((tlDiagnostic){NULL, 0}, -1).ptr == NULL);
  tlContextDestroy(c);
  return finish("capi_26_negative_counts");
}
