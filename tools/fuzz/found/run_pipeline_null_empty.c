/* Found by tools/fuzz/capi_fuzz.c (sanitizer build): tlModuleRunPipeline given
** the empty string as {NULL, 0} -- valid by the contract ("{NULL, 0} is the
** empty string everywhere") -- called memchr(NULL, 0, 0), undefined behaviour
** (UBSan: "null pointer passed as argument 1, which is declared to never be
** null" at src/api/capi_module.c:113). Fixed by testing the length first.
**
**   cc -fsanitize=address,undefined -fno-sanitize-recover=undefined -Isrc \
**      tools/fuzz/found/run_pipeline_null_empty.c -Lbuild-asan -ltilua \
**      -Wl,-rpath,$PWD/build-asan && ./a.out    # exit 0 once fixed
*/
#include "tilua.h"

int main(void) {
  tlContext c = tlContextCreate();
  tlModule m = tlModuleCreateEmpty(c);
  /* an empty pipeline: expected to verify the module and run nothing */
  tlLogicalResult r = tlModuleRunPipeline(m, tlStringRefCreate(NULL, 0));
  (void)r;
  tlContextDestroy(c);
  return 0;
}
