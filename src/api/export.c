/* export.c -- anchors the shared library and the Lua module; everything lives in tilua_core. */
#include "../tilua.h"
