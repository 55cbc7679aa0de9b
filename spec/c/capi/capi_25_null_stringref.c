/* Repro 25 (a misuse the C API once let through): an empty tlStringRef with a NULL pointer as a
** file name reached memcpy(file, NULL, 0) (UBSan nonnull); NULL data with a length did worse. */
#include "capi_check.h"

int main(void) {
  tlContext c = new_context();
  int before = errors;
  tlModule m = tlModuleCreateParse(c, str("module {"), tlStringRefCreate(NULL, 0));
  CHECK(tlModuleIsNull(m));
  CHECK(errors == before + 1 && strstr(last, "expected") != NULL);
  /* NULL data with a length: refused, named */
  tlStringRef bad = tlStringRefCreate(NULL, 5);
  before = errors;
  CHECK(tlModuleIsNull(tlModuleCreateParse(c, bad, str("f.tir"))));
  CHECK_ERROR(before, "the text has a NULL pointer and length 5");
  before = errors;
  CHECK(tlModuleIsNull(tlModuleCreateParse(c, str("module {}"), bad)));
  CHECK_ERROR(before, "the file name has a NULL pointer");
  before = errors;
  CHECK(tlModuleIsNull(tlModuleCreateFromScript(c, bad, str("s.lua"))));
  CHECK_ERROR(before, "the script has a NULL pointer");
  before = errors;
  CHECK(tlAttributeIsNull(tlStringAttrGet(c, bad)));
  CHECK_ERROR(before, "the string has a NULL pointer");
  tlModule ok = tlModuleCreateParse(c, str("module {\n}\n"), tlStringRefCreate(NULL, 0));
  CHECK(!tlModuleIsNull(ok));
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlModuleRunPipeline(ok, bad)));
  CHECK_ERROR(before, "the pipeline has a NULL pointer");
  before = errors;
  CHECK(tlTypeIsNull(tlPointerTypeGet(tlF32TypeGet(c), bad)));
  CHECK_ERROR(before, "the memory space has a NULL pointer");
  tlOperation k = tlKernelCreate(ok, str("k"), 0, NULL, NULL, 32, 1, 1);
  tlBlock body = tlOperationGetRegionBlock(k, 0, 0, NULL);
  before = errors;
  CHECK(tlOperationIsNull(tlOperationCreate(body, bad, 0, NULL, 0, NULL, 0, NULL, 0)));
  CHECK_ERROR(before, "the op name has a NULL pointer");
  before = errors;
  CHECK(tlOperationIsNull(tlKernelCreate(ok, bad, 0, NULL, NULL, 32, 1, 1)));
  CHECK_ERROR(before, "the name has a NULL pointer");
  tlType i32 = tlIntegerTypeGet(c, 32);
  tlStringRef names[] = {bad};
  before = errors;
  CHECK(tlOperationIsNull(tlKernelCreate(ok, str("k2"), 1, &i32, names, 32, 1, 1)));
  CHECK_ERROR(before, "parameter name #0 has a NULL pointer");
  tlNamedAttribute na = tlNamedAttributeGet(bad, tlBoolAttrGet(c, true));
  before = errors;
  CHECK(tlAttributeIsNull(tlDictionaryAttrGet(c, 1, &na)));
  CHECK_ERROR(before, "the name of attribute #0 has a NULL pointer");
  /* empty strings with NULL data are fine where empty is */
  CHECK(!tlAttributeIsNull(tlStringAttrGet(c, tlStringRefCreate(NULL, 0))));
  tlContextDestroy(c);
  return finish("capi_25_null_stringref");
}
