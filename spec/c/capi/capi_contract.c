/* The rest of the C API's contract (src/tilua.h, docs/capi.md): erased ops,
** handles of destroyed contexts, tlModuleRunPipeline verifying first, integer
** ranges, the target, a parsed empty module's body. */
#include <stdint.h>

#include "capi_check.h"

/* A kernel with an unused constant (canonicalize erases it) and a used one. */
static tlOperation build(tlContext c, tlModule m, tlOperation *unused, tlValue *arg) {
  tlType i32 = tlIntegerTypeGet(c, 32);
  tlOperation k = tlKernelCreate(m, str("k"), 1, &i32, NULL, 32, 1, 1);
  tlBlock body = tlOperationGetRegionBlock(k, 0, 0, NULL);
  *arg = tlBlockGetArgument(body, 0);
  tlNamedAttribute v = tlNamedAttributeGet(str("value"), tlIntegerAttrGet(i32, 5));
  *unused = tlOperationCreate(body, str("arith.constant"), 0, NULL, 1, &i32, 1, &v, 0);
  return k;
}

int main(void) {
  tlContext c = new_context();
  tlModule m = tlModuleCreateEmpty(c);
  tlOperation unused;
  tlValue arg;
  tlOperation k = build(c, m, &unused, &arg);
  tlValue r0 = tlOperationGetResult(unused, 0);
  CHECK(!tlOperationIsNull(k) && !tlOperationIsNull(unused) && r0.ptr);
  CHECK(tlLogicalResultIsSuccess(tlModuleRunPipeline(m, str("canonicalize"))));

  /* the erased op, its result and using it as an operand: refused */
  int before = errors;
  CHECK(tlLogicalResultIsFailure(tlOperationVerify(unused)));
  CHECK_ERROR(before, "the op ('arith.constant') was erased");
  before = errors;
  CHECK(tlTypeIsNull(tlValueGetType(r0)));
  CHECK_ERROR(before, "the value belongs to an erased op");
  tlBlock body = tlOperationGetRegionBlock(k, 0, 0, NULL);
  tlType i32 = tlIntegerTypeGet(c, 32);
  tlValue opds[] = {arg, r0};
  before = errors;
  CHECK(tlOperationIsNull(tlOperationCreate(body, str("arith.addi"), 2, opds, 1, &i32, 0, NULL, 0)));
  CHECK_ERROR(before, "operand #1 belongs to an erased op");
  before = errors;
  tlOperationPrint(unused, sink, NULL);
  CHECK(errors == before + 1);

  /* a mistyped op is refused and leaves no use behind on its operands */
  tlType f32 = tlF32TypeGet(c);
  tlValue two[] = {arg, arg};
  before = errors;
  CHECK(tlOperationIsNull(tlOperationCreate(body, str("arith.addi"), 2, two, 1, &f32, 0, NULL, 0)));
  CHECK(errors == before + 1);
  CHECK(tlLogicalResultIsSuccess(tlModuleRunPipeline(m, str("canonicalize"))));

  /* tlModuleRunPipeline verifies its input first: an op with a missing terminator-free
  ** bad attribute (block of 2048 threads) never reaches the passes */
  tlModule bad = tlModuleCreateEmpty(c);
  tlKernelCreate(bad, str("k"), 0, NULL, NULL, 1024, 2, 1);
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlModuleRunPipeline(bad, str("ptx"))));
  CHECK_ERROR(before, "block of 2048 threads exceeds 1024");
  CHECK(tlLogicalResultIsFailure(tlModuleRunPipeline(bad, str(""))));
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlModuleRunPipeline(m, str("no-such-pass"))));
  CHECK(errors == before + 1);
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlModuleRunPipeline(m, tlStringRefCreate("cse\0x", 5))));
  CHECK_ERROR(before, "NUL byte");

  /* a pass written in Lua (verify-protocol) runs through the context's Lua state:
  ** a wait that no arrival satisfies is a deadlock with its counterexample */
  tlModule dead = tlModuleCreateParse(c, str(
      "module {\n"
      "  tile.kernel {kernel_spec = {block = [32, 1, 1]}, sym_name = \"dead\"} {\n"
      "    %0 = tile.alloc_shared {align = 8, count = 1} : ptr<i64, shared>\n"
      "    %1 = arith.constant {value = 1 : i32} : i32\n"
      "    tile.mbarrier_init %0, %1\n"
      "    tile.barrier\n"
      "    %2 = arith.constant {value = 0 : i32} : i32\n"
      "    tile.mbarrier_wait %0, %2\n"
      "  }\n"
      "}\n"), str("dead.tir"));
  CHECK(!tlModuleIsNull(dead));
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlModuleRunPipeline(dead, str("verify-protocol"))));
  CHECK_ERROR(before, "deadlock");
  CHECK(tlLogicalResultIsSuccess(tlModuleRunPipeline(m, str("verify-protocol,canonicalize"))));

  /* integer attributes must fit their type, signed or unsigned */
  tlType i8 = tlIntegerTypeGet(c, 8);
  CHECK(!tlAttributeIsNull(tlIntegerAttrGet(i8, 255)));
  CHECK(!tlAttributeIsNull(tlIntegerAttrGet(i8, -128)));
  before = errors;
  CHECK(tlAttributeIsNull(tlIntegerAttrGet(i8, 300)));
  CHECK_ERROR(before, "300 does not fit in i8");
  before = errors;
  CHECK(tlAttributeIsNull(tlIntegerAttrGet(tlIntegerTypeGet(c, 32), INT64_MAX)));
  CHECK_ERROR(before, "does not fit in i32");
  CHECK(!tlAttributeIsNull(tlIntegerAttrGet(tlIndexTypeGet(c), INT64_MIN)));
  before = errors;
  CHECK(tlAttributeIsNull(tlIntegerAttrGet(f32, 1)));
  CHECK_ERROR(before, "not an integer or index type");
  before = errors;
  CHECK(tlAttributeIsNull(tlFloatAttrGet(i32, 1.0)));
  CHECK_ERROR(before, "not a float type");
  before = errors;
  CHECK(tlTypeIsNull(tlPointerTypeGet(f32, str("nowhere"))));
  CHECK_ERROR(before, "unknown memory space 'nowhere'");
  tlNamedAttribute empty = tlNamedAttributeGet(str(""), tlBoolAttrGet(c, true));
  before = errors;
  CHECK(tlAttributeIsNull(tlDictionaryAttrGet(c, 1, &empty)));
  CHECK_ERROR(before, "is empty");
  before = errors;
  CHECK(tlOperationIsNull(tlKernelCreate(m, str(""), 0, NULL, NULL, 32, 1, 1)));
  CHECK_ERROR(before, "the kernel name is empty");
  /* a name that is no PTX identifier (a NUL inside it) is refused by the verifier, never emitted as `.entry k` */
  {
    tlModule mm = tlModuleCreateEmpty(c);
    tlOperation evil = tlKernelCreate(mm, tlStringRefCreate("k\0evil", 6), 0, NULL, NULL, 32, 1, 1);
    CHECK(!tlOperationIsNull(evil));
    before = errors;
    CHECK(!tlLogicalResultIsSuccess(tlModuleEmitPTX(mm, sink, NULL)));
    CHECK(errors > before && strstr(last, "is not a PTX identifier") != NULL);
  }
  before = errors;
  CHECK(tlOperationIsNull(tlOperationCreate(body, str("no.such_op"), 0, NULL, 0, NULL, 0, NULL, 0)));
  CHECK_ERROR(before, "unknown operation 'no.such_op'");
  before = errors;
  CHECK(tlOperationIsNull(tlOperationCreate(body, str("arith.adi"), 0, NULL, 0, NULL, 0, NULL, 0)));
  CHECK_ERROR(before, "unknown operation 'arith.adi'; did you mean 'arith.addi'?");

  /* the target */
  before = errors;
  CHECK(tlLogicalResultIsFailure(tlContextSetTargetSM(c, 80)));
  CHECK_ERROR(before, "sm 80 is not supported");
  CHECK(tlLogicalResultIsSuccess(tlContextSetTargetSM(c, 100)));

  /* a parsed `module {}` gets a body on request; a kernel can be added to it */
  tlModule p = tlModuleCreateParse(c, str("module {\n}\n"), str("p.tir"));
  CHECK(tlModuleGetBody(p).ptr != NULL);
  CHECK(!tlOperationIsNull(tlKernelCreate(p, str("k"), 0, NULL, NULL, 32, 1, 1)));
  CHECK(tlLogicalResultIsSuccess(tlModuleVerify(p)));

  /* a parse error has file:line:col */
  before = errors;
  CHECK(tlModuleIsNull(tlModuleCreateParse(c, str("module {\n  %0 = \n}\n"), str("bad.tir"))));
  CHECK(errors == before + 1 && !strcmp(last_file, "bad.tir") && last_line >= 2 && last_col > 0);
  /* and a script error its chunk and line */
  before = errors;
  CHECK(tlModuleIsNull(tlModuleCreateFromScript(c, str("local a = 1\nlocal b = nil + 1\n"), str("e.lua"))));
  CHECK(errors == before + 1 && !strcmp(last_file, "e.lua") && last_line == 2);

  /* every handle of a destroyed context is refused without being read */
  tlContext d = new_context();
  tlModule dm = tlModuleCreateEmpty(d);
  tlType dt = tlIntegerTypeGet(d, 32);
  tlOperation dk = tlKernelCreate(dm, str("k"), 1, &dt, NULL, 32, 1, 1);
  tlBlock db = tlOperationGetRegionBlock(dk, 0, 0, NULL);
  tlValue dv = tlBlockGetArgument(db, 0);
  tlAttribute da = tlBoolAttrGet(d, true);
  tlContextDestroy(d);
  CHECK(tlLogicalResultIsFailure(tlModuleVerify(dm)));
  CHECK(tlLogicalResultIsFailure(tlModuleRunPipeline(dm, str("cse"))));
  tlModulePrint(dm, sink, NULL);
  CHECK(tlOperationIsNull(tlKernelCreate(dm, str("k2"), 0, NULL, NULL, 32, 1, 1)));
  CHECK(tlBlockGetNumArguments(db) == -1);
  CHECK(tlBlockGetArgument(db, 0).ptr == NULL);
  CHECK(tlTypeIsNull(tlValueGetType(dv)));
  CHECK(tlOperationIsNull(tlOperationCreate(db, str("arith.constant"), 0, NULL, 0, NULL, 0, NULL, 0)));
  tlAttributePrint(da, sink, NULL);
  CHECK(tlTypeIsNull(tlF32TypeGet(d)));
  CHECK(tlModuleIsNull(tlModuleCreateParse(d, str("module {}"), str("x"))));
  CHECK(tlLogicalResultIsFailure(tlContextSetTargetSM(d, 90)));
  /* and in the live context, named as such */
  before = errors;
  CHECK(tlOperationIsNull(tlKernelCreate(m, str("k3"), 1, &dt, NULL, 32, 1, 1)));
  CHECK_ERROR(before, "parameter type #0 belongs to a destroyed context");
  tlValue dvs[] = {dv, dv};
  before = errors;
  CHECK(tlOperationIsNull(tlOperationCreate(body, str("arith.addi"), 2, dvs, 1, &i32, 0, NULL, 0)));
  CHECK_ERROR(before, "operand #0 belongs to a destroyed context");

  /* null callbacks print nothing */
  tlModulePrint(m, NULL, NULL);
  tlTypePrint(i32, NULL, NULL);
  CHECK(tlLogicalResultIsSuccess(tlModuleVerify(m)));
  tlContextDestroy(c);
  return finish("capi_contract");
}
