/*
** passes_def.h -- includes passes.def with every row kind the includer left
** undefined expanding to nothing, then undefines them all, so that an
** includer names only the rows it reads (and a new row kind breaks none).
** No include guard: included once per expansion.
*/
#ifndef PASS
#define PASS(c, name, options, desc)
#endif
#ifndef LUA_PASS
#define LUA_PASS(c, name, options, desc)
#endif
#ifndef PIPELINE
#define PIPELINE(name, list, desc)
#endif
#ifndef FACT
#define FACT(id, what, by)
#endif
#ifndef REQUIRES
#define REQUIRES(c, fact)
#endif
#include "passes.def"
#undef PASS
#undef LUA_PASS
#undef PIPELINE
#undef FACT
#undef REQUIRES
