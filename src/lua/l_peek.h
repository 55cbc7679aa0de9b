/*
** l_peek.h -- reads of Lua 5.4's private structures that a launch makes and
** Lua's API has no cheap call for: a frame's saved pc (which call site it
** waits in: lua_getinfo gives only the line, at the cost of a walk of the
** function's line table) and its function, and a table's array and hash
** parts (a launch's arguments and fields, read where they are instead of
** pushed one API call each). The layouts are lstate.h's CallInfo and
** lobject.h's Table, Node and TValue, the same in every Lua 5.4 release;
** lb_peek_ok checks them once per thread on values it made, and without it
** (or with another Lua, or TILUA_LUA_PEEK=0) every caller takes the API's way.
*/
#ifndef TILUA_L_PEEK_H
#define TILUA_L_PEEK_H

#include <string.h>

#include "lbind.h"

/* A TValue: the value, then its type tag. */
typedef struct LbValue {
  union {
    void *gc; /* a collectable object: for a table, what lua_topointer gives */
    lua_Integer i;
    lua_Number n;
  } v;
  unsigned char tag;
} LbValue;
enum {
  LB_TAG_INT = 3,
  LB_TAG_FLOAT = 3 | (1 << 4),
  LB_TAG_TABLE = 5 | (1 << 6),
  LB_TAG_SHORT_STRING = 4 | (1 << 6),
  LB_TAG_LUA_FUNCTION = 6 | (1 << 6) /* a Lua closure */
};
#define LB_TAG_IS_NIL(tag) (((tag)&0x0f) == 0) /* nil, an empty slot, an absent key */

/* A Node of a table's hash part: the value, its tag, then the key's tag and
** the key (for a string, its TString: the one object of that text). */
typedef struct LbNode {
  union {
    void *gc;
    lua_Integer i;
    lua_Number n;
  } v;
  unsigned char tag, key_tag;
  int next;
  const void *key;
} LbNode;

/* The start of a Table: its header, then the array part and its size (alimit:
** the array holds at least that many values). */
typedef struct LbTable {
  void *next;
  unsigned char tt, marked, flags, lsizenode;
  unsigned alimit;
  const LbValue *array;
  const LbNode *node;
} LbTable;

/* Do the reads below read what they say here (checked once per thread)? */
int lb_peek_ok(lua_State *L);

/* The saved pc of the frame lua_getstack gave (a Lua function's; a C
** function's frame holds something else there). Only after lb_peek_ok. */
static inline const void *lb_peek_pc(const lua_Debug *ar) {
  const void *pc; /* CallInfo: func, top, previous, next, then u.l.savedpc */
  memcpy(&pc, (const char *)ar->i_ci + 4 * sizeof(void *), sizeof pc);
  return pc;
}

/* The function of the frame lua_getstack gave when it is a Lua function (what
** lua_topointer gives for it), else NULL. Only after lb_peek_ok. */
static inline const void *lb_peek_func(const lua_Debug *ar) {
  const LbValue *f; /* CallInfo: func, the stack slot of the function */
  memcpy(&f, ar->i_ci, sizeof f);
  return f->tag == LB_TAG_LUA_FUNCTION ? f->v.gc : NULL;
}

/* The array part of the table lua_topointer gave and, in *n, how many values
** it has; valid until the table changes. Only after lb_peek_ok. */
static inline const LbValue *lb_peek_array(const void *table, unsigned *n) {
  const LbTable *t = table;
  *n = t->alimit;
  return t->array;
}

/* The hash part of the table lua_topointer gave and, in *n, how many nodes it
** has (a string key is always there); valid until the table changes. Only
** after lb_peek_ok. */
static inline const LbNode *lb_peek_nodes(const void *table, unsigned *n) {
  const LbTable *t = table;
  *n = 1u << t->lsizenode;
  return t->node;
}

#endif
