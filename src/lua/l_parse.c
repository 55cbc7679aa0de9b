/*
** l_parse.c -- the builder behind the textual-IR parser (lua/tilua/parser.lua).
** The parser reads with LPeg and hands each op to this builder as it goes:
** values are small integers (the parser maps names to them), nesting is a
** stack here (so the depth of regions is bounded by memory alone, not by the
** C stack or LPeg's), and nothing of an op is boxed in Lua but its type and
** attribute objects, which the parser memoizes by their text.
**
**   pb = core.parse_builder(ctx, file)
**   pb:top()                                  ops go into a fresh module's body
**   id = pb:op(name, nres, {ids}, {types}, dict|nil, has_regions, line, col)
**                                             the op's first result id (0: none);
**                                             with regions it becomes the open op
**                                             (its region count: as many as the
**                                             text gives, known at pb:close)
**   id = pb:block({types})                    a block of the open op's region; its
**                                             first argument's id; ops go into it
**   pb:next_region()                          the open op's next region
**   pb:close([file, line, col])               the open op is done (a loc(...) for it)
**   pb:loc([file,] line, col)                 the location of the last op built
**   op = pb:result()                          the top-level op (the module)
**   pb:depth(), pb:region()                   where the parser stands
*/
#include <stdlib.h>
#include <string.h>

#include "l_ir.h"

#define LB_PARSE_BUILDER "tilua.ParseBuilder"
#define PB_MAX_REGIONS 16

typedef struct Open {
  IrOp *op;
  uint32_t region;  /* the region being filled */
  IrBlock *block;   /* the block being filled (NULL: none yet) */
} Open;

/* A value name in scope: its text (in PB.namebuf) and id; chained by hash. */
typedef struct Name {
  size_t off, len;
  uint32_t hash, next; /* next: index + 1 of the next name in the bucket (0: none) */
  lua_Integer id;
} Name;

/* A memo entry: the text of a type, an attribute dictionary or an op name
** (in PB.memobuf) and what it read as. */
typedef struct Memo {
  size_t off, len;
  uint32_t hash;
  char kind; /* 't' type, 'd' dictionary, 'o' op kind (ptr = kind + 1) */
  const void *ptr;
} Memo;

typedef struct PB {
  IrContext *ctx;
  const char *file; /* interned */
  /* the text (a Lua string the userdata keeps in its second user value) */
  const char *text;
  size_t len;
  int line_offset;
  size_t lpos, lstart; /* a position whose line (lline) and line start are known */
  int lline;
  /* value names in scope: a stack (scopes pop from its end) and a hash of it */
  Name *names;
  size_t nnames, capnames;
  char *namebuf;
  size_t nnamebuf, capnamebuf;
  uint32_t *buckets; /* index + 1 of the newest name of each bucket (a power of two of */
  size_t nbuckets;   /* them, at least as many as names: a lookup stays O(1) in a block of 1M ops) */
  uint64_t lookups, probes; /* names looked up, and names compared doing so (pb:probes()) */
  size_t *scopes;
  size_t nscopes, capscopes;
  /* memo of texts read before (open addressing, power-of-two size) */
  Memo *memo;
  size_t nmemo, capmemo;
  char *memobuf;
  size_t nmemobuf, capmemobuf;
  IrValue **vals;   /* id -> value; id 0 is unused */
  size_t nvals, capvals;
  Open *stack; /* stack[0]: the top level (op NULL, block: where top ops go) */
  size_t depth, capstack;
  IrOp *top_op, *last;
} PB;

static PB *check_pb(lua_State *L) {
  PB *p = luaL_checkudata(L, 1, LB_PARSE_BUILDER);
  if (!p->ctx) luaL_error(L, "parse builder used after it was collected");
  lua_getiuservalue(L, 1, 1); /* its context must still be open */
  if (!((LbContext *)lua_touserdata(L, -1))->ctx) lb_error(L, "attempt to use an object of a closed tilua context");
  lua_pop(L, 1);
  return p;
}

static int pb_gc(lua_State *L) {
  PB *p = luaL_checkudata(L, 1, LB_PARSE_BUILDER);
  free(p->vals);
  free(p->stack);
  free(p->names);
  free(p->buckets);
  free(p->namebuf);
  free(p->scopes);
  free(p->memo);
  free(p->memobuf);
  p->vals = NULL;
  p->stack = NULL;
  p->names = NULL, p->buckets = NULL, p->namebuf = NULL, p->scopes = NULL, p->memo = NULL, p->memobuf = NULL;
  p->ctx = NULL;
  return 0;
}

static void grow(lua_State *L, void **a, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return;
  size_t n = *cap ? *cap : 64;
  while (n < need) n *= 2;
  if (n > SIZE_MAX / elem) luaL_error(L, "out of memory");
  void *m = realloc(*a, n * elem);
  if (!m) luaL_error(L, "out of memory");
  *a = m;
  *cap = n;
}

/* Give ids to n values; the first one's id. */
static lua_Integer add_values(lua_State *L, PB *p, IrValue *v, uint32_t n, size_t stride) {
  if (!n) return 0;
  grow(L, (void **)&p->vals, &p->capvals, p->nvals + n + 1, sizeof *p->vals);
  if (!p->nvals) p->vals[p->nvals++] = NULL;
  lua_Integer first = (lua_Integer)p->nvals;
  for (uint32_t i = 0; i < n; i++) p->vals[p->nvals++] = (IrValue *)((char *)v + i * stride);
  return first;
}

/* core.parse_builder(ctx, file) */
static int core_parse_builder(lua_State *L) {
  LbContext *c = lb_check_context(L, 1);
  const char *file = luaL_checkstring(L, 2);
  PB *p = lua_newuserdatauv(L, sizeof *p, 2);
  memset(p, 0, sizeof *p);
  luaL_setmetatable(L, LB_PARSE_BUILDER);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1);
  p->ctx = c->ctx;
  p->file = ir_intern_cstr(c->ctx, file);
  grow(L, (void **)&p->stack, &p->capstack, 1, sizeof *p->stack);
  memset(p->stack, 0, sizeof *p->stack);
  p->depth = 1;
  return 1;
}

/* pb:top(): a module to hold the top-level ops (the text has no `module {`). */
static int pb_top(lua_State *L) {
  PB *p = check_pb(L);
  IrOp *m = ir_op_create(p->ctx, OP_MODULE, ir_loc(p->ctx, p->file, 1, 1), 0, NULL, 0, NULL, 1);
  p->top_op = m;
  p->stack[0].block = ir_region_ensure_block(p->ctx, &m->regions[0]);
  return 0;
}

static uint32_t list_len(lua_State *L, int idx) {
  if (lua_isnoneornil(L, idx)) return 0;
  luaL_checktype(L, idx, LUA_TTABLE);
  return (uint32_t)lua_rawlen(L, idx);
}

/* Build an op and place it where the parser stands; its first result's id. */
static lua_Integer place_op(lua_State *L, PB *p, int kind, uint32_t nopd, IrValue **opds, uint32_t nres,
                            const IrType **tys, const IrAttr *dict, uint32_t nreg, IrLoc loc) {
  Open *at = &p->stack[p->depth - 1];
  if (!at->block && !(p->depth == 1 && !p->top_op)) {
    luaL_error(L, "an operation outside of any block");
    return 0;
  }
  IrOp *op = ir_op_create(p->ctx, (IrOpKind)kind, loc, nopd, opds, nres, tys, nreg);
  if (dict) ir_op_set_attrs_of_dict(op, dict);
  if (at->block) ir_block_append(at->block, op);
  else p->top_op = op; /* `module { ... }` itself */
  p->last = op;
  lua_Integer first = add_values(L, p, op->results, nres, sizeof *op->results);
  if (nreg > 0) {
    grow(L, (void **)&p->stack, &p->capstack, p->depth + 1, sizeof *p->stack);
    p->stack[p->depth++] = (Open){op, 0, NULL};
  }
  return first;
}

/* pb:op(name, nres, {ids}, {types}, dict, has_regions, line, col) -> first result id */
static int pb_op(lua_State *L) {
  PB *p = check_pb(L);
  size_t nlen;
  const char *name = luaL_checklstring(L, 2, &nlen);
  int kind = ir_op_lookup(name, nlen);
  if (kind < 0) {
    const char *near = ir_op_closest(name, nlen);
    return luaL_error(L, "unknown operation '%s'%s%s%s", name, near ? "; did you mean '" : "", near ? near : "",
                      near ? "'?" : "");
  }
  uint32_t nopd = list_len(L, 4), nres = list_len(L, 5);
  if ((lua_Integer)nres != luaL_checkinteger(L, 3)) return luaL_error(L, "result count and types differ");
  uint32_t nreg = lua_toboolean(L, 7) ? PB_MAX_REGIONS : 0; /* trimmed at pb:close */
  IrValue *opd_buf[16], **opds = opd_buf;
  const IrType *ty_buf[16], **tys = ty_buf;
  if (nopd > 16 || nres > 16) { /* rare: the buffers live as Lua userdata, freed by the GC */
    opds = lua_newuserdatauv(L, (nopd + 1) * sizeof *opds, 0);
    tys = lua_newuserdatauv(L, (nres + 1) * sizeof *tys, 0);
  }
  for (uint32_t i = 0; i < nopd; i++) {
    lua_rawgeti(L, 4, (lua_Integer)i + 1);
    lua_Integer id = lua_tointeger(L, -1);
    lua_pop(L, 1);
    if (id < 1 || (size_t)id >= p->nvals) return luaL_error(L, "bad value id %d", (int)id);
    opds[i] = p->vals[id];
  }
  for (uint32_t i = 0; i < nres; i++) {
    lua_rawgeti(L, 5, (lua_Integer)i + 1);
    tys[i] = lb_check_type_of(L, -1, p->ctx);
    lua_pop(L, 1);
  }
  const IrAttr *dict = lua_isnoneornil(L, 6) ? NULL : lb_check_object(L, 6, LB_ATTR);
  if (dict && dict->kind != IR_ATTR_DICT) return luaL_error(L, "attributes must be a dictionary");
  IrLoc loc = {p->file, (int)luaL_checkinteger(L, 8), (int)luaL_checkinteger(L, 9)};
  lua_pushinteger(L, place_op(L, p, kind, nopd, opds, nres, tys, dict, nreg, loc));
  return 1;
}

/* {======================================================================
** Value names and scopes, and the memo of texts read before
** ======================================================================= */

static uint32_t text_hash(const char *s, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
  return h;
}

static Name *find_name(PB *p, const char *s, size_t n, uint32_t h) {
  p->lookups++;
  if (!p->nbuckets) return NULL;
  for (uint32_t i = p->buckets[h & (p->nbuckets - 1)]; i; i = p->names[i - 1].next) {
    Name *nm = &p->names[i - 1];
    p->probes++;
    if (nm->hash == h && nm->len == n && memcmp(p->namebuf + nm->off, s, n) == 0) return nm;
  }
  return NULL;
}

/* Twice the buckets, the names put back oldest first: each bucket's chain
** stays newest first, as closing a scope needs. */
static void rehash(lua_State *L, PB *p) {
  size_t cap = p->nbuckets, n = p->nbuckets ? p->nbuckets * 2 : 1024;
  grow(L, (void **)&p->buckets, &cap, n, sizeof *p->buckets);
  p->nbuckets = n;
  memset(p->buckets, 0, n * sizeof *p->buckets);
  for (size_t i = 0; i < p->nnames; i++) {
    uint32_t *b = &p->buckets[p->names[i].hash & (n - 1)];
    p->names[i].next = *b;
    *b = (uint32_t)(i + 1);
  }
}

/* Define a name in the innermost scope; 0 if it is already visible. */
static int define_name(lua_State *L, PB *p, const char *s, size_t n, lua_Integer id) {
  uint32_t h = text_hash(s, n);
  if (find_name(p, s, n, h)) return 0;
  if (p->nnames >= UINT32_MAX - 1) luaL_error(L, "too many names in scope");
  if (p->nnames + 1 > p->nbuckets) rehash(L, p);
  grow(L, (void **)&p->names, &p->capnames, p->nnames + 1, sizeof *p->names);
  grow(L, (void **)&p->namebuf, &p->capnamebuf, p->nnamebuf + n, 1);
  memcpy(p->namebuf + p->nnamebuf, s, n);
  uint32_t *b = &p->buckets[h & (p->nbuckets - 1)];
  p->names[p->nnames] = (Name){p->nnamebuf, n, h, *b, id};
  p->nnamebuf += n;
  *b = (uint32_t)++p->nnames;
  return 1;
}

/* pb:probes() -> lookups, names compared: what the specs read to see lookups stay O(1) */
static int pb_probes(lua_State *L) {
  PB *p = check_pb(L);
  lua_pushinteger(L, (lua_Integer)p->lookups);
  lua_pushinteger(L, (lua_Integer)p->probes);
  return 2;
}

/* pb:define(name, id) -> false if the name is already visible */
static int pb_define(lua_State *L) {
  PB *p = check_pb(L);
  size_t n;
  const char *s = luaL_checklstring(L, 2, &n);
  lua_pushboolean(L, define_name(L, p, s, n, luaL_checkinteger(L, 3)));
  return 1;
}

/* pb:lookup(name) -> id | nil */
static int pb_lookup(lua_State *L) {
  PB *p = check_pb(L);
  size_t n;
  const char *s = luaL_checklstring(L, 2, &n);
  Name *nm = find_name(p, s, n, text_hash(s, n));
  if (!nm) return 0;
  lua_pushinteger(L, nm->id);
  return 1;
}

static int pb_open_scope(lua_State *L) {
  PB *p = check_pb(L);
  grow(L, (void **)&p->scopes, &p->capscopes, p->nscopes + 1, sizeof *p->scopes);
  p->scopes[p->nscopes++] = p->nnames;
  return 0;
}

/* The names of the innermost scope go: the newest first, each at the head of its bucket. */
static int pb_close_scope(lua_State *L) {
  PB *p = check_pb(L);
  if (!p->nscopes) return luaL_error(L, "no scope to close");
  size_t mark = p->scopes[--p->nscopes];
  while (p->nnames > mark) {
    Name *nm = &p->names[--p->nnames];
    p->buckets[nm->hash & (p->nbuckets - 1)] = nm->next;
    p->nnamebuf = nm->off;
  }
  return 0;
}

static const void *memo_get(PB *p, char kind, const char *s, size_t n) {
  if (!p->capmemo) return NULL;
  uint32_t h = text_hash(s, n) ^ (uint32_t)kind;
  for (size_t i = h & (p->capmemo - 1);; i = (i + 1) & (p->capmemo - 1)) {
    Memo *m = &p->memo[i];
    if (!m->kind) return NULL;
    if (m->hash == h && m->kind == kind && m->len == n && memcmp(p->memobuf + m->off, s, n) == 0) return m->ptr;
  }
}

static void memo_put(lua_State *L, PB *p, char kind, const char *s, size_t n, const void *ptr) {
  if (memo_get(p, kind, s, n)) return;
  if ((p->nmemo + 1) * 2 > p->capmemo) { /* rehash at half full */
    size_t cap = p->capmemo ? p->capmemo * 2 : 256;
    Memo *old = p->memo;
    size_t oldcap = p->capmemo;
    p->memo = calloc(cap, sizeof *p->memo);
    if (!p->memo) {
      p->memo = old;
      luaL_error(L, "out of memory");
    }
    p->capmemo = cap;
    for (size_t i = 0; i < oldcap; i++)
      if (old[i].kind) {
        size_t j = old[i].hash & (cap - 1);
        while (p->memo[j].kind) j = (j + 1) & (cap - 1);
        p->memo[j] = old[i];
      }
    free(old);
  }
  grow(L, (void **)&p->memobuf, &p->capmemobuf, p->nmemobuf + n, 1);
  memcpy(p->memobuf + p->nmemobuf, s, n);
  uint32_t h = text_hash(s, n) ^ (uint32_t)kind;
  size_t j = h & (p->capmemo - 1);
  while (p->memo[j].kind) j = (j + 1) & (p->capmemo - 1);
  p->memo[j] = (Memo){p->nmemobuf, n, h, kind, ptr};
  p->nmemobuf += n;
  p->nmemo++;
}

/* pb:memo_type(text, type), pb:memo_dict(text, dict): what a text read as. */
static int pb_memo_type(lua_State *L) {
  PB *p = check_pb(L);
  size_t n;
  const char *s = luaL_checklstring(L, 2, &n);
  memo_put(L, p, 't', s, n, lb_check_type_of(L, 3, p->ctx));
  return 0;
}

static int pb_memo_dict(lua_State *L) {
  PB *p = check_pb(L);
  size_t n;
  const char *s = luaL_checklstring(L, 2, &n);
  const IrAttr *a = lb_check_object(L, 3, LB_ATTR);
  if (a->kind == IR_ATTR_DICT) memo_put(L, p, 'd', s, n, a);
  return 0;
}

/* }====================================================================== */

/* {======================================================================
** The fast path: plain ops read here, in C
** ======================================================================= */

/* pb:source(text, line_offset): the text pb:fast reads (kept alive here). */
static int pb_source(lua_State *L) {
  PB *p = check_pb(L);
  p->text = luaL_checklstring(L, 2, &p->len);
  p->line_offset = (int)luaL_optinteger(L, 3, 0);
  p->lpos = p->lstart = 0;
  p->lline = 1;
  lua_pushvalue(L, 2);
  lua_setiuservalue(L, 1, 2);
  return 0;
}

static int is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_alnum(int c) { return is_alpha(c) || (c >= '0' && c <= '9'); }

/* As the parser's `ws`: blanks and // comments. */
static size_t skip_ws(const char *t, size_t n, size_t i) {
  for (;;) {
    while (i < n && (t[i] == ' ' || t[i] == '\t' || t[i] == '\r' || t[i] == '\n')) i++;
    if (i + 1 < n && t[i] == '/' && t[i + 1] == '/') {
      while (i < n && t[i] != '\n') i++;
      continue;
    }
    return i;
  }
}

static size_t ident_end(const char *t, size_t n, size_t i) { /* [%a_][%w_$.]* */
  if (i >= n || !is_alpha(t[i])) return i;
  i++;
  while (i < n && (is_alnum(t[i]) || t[i] == '$' || t[i] == '.')) i++;
  return i;
}

static size_t vname_end(const char *t, size_t n, size_t i) { /* %[%w_$.-]+ */
  if (i >= n || t[i] != '%') return i;
  size_t j = i + 1;
  while (j < n && (is_alnum(t[j]) || t[j] == '$' || t[j] == '.' || t[j] == '-')) j++;
  return j > i + 1 ? j : i;
}

static size_t string_end(const char *t, size_t n, size_t i) { /* past the closing quote; 0: none */
  for (i++; i < n; i++) {
    if (t[i] == '\n') return 0;
    if (t[i] == '\\') i++;
    else if (t[i] == '"') return i + 1;
  }
  return 0;
}

/* Past the balanced open...close at i (strings skipped); 0 when unbalanced. */
static size_t balanced_end(const char *t, size_t n, size_t i, char open, char close) {
  int depth = 0;
  while (i < n) {
    char c = t[i];
    if (c == '"') {
      i = string_end(t, n, i);
      if (!i) return 0;
      continue;
    }
    if (c == open) depth++;
    else if (c == close && --depth == 0) return i + 1;
    i++;
  }
  return 0;
}

/* A list of value names at i: their spans; the position after (i when none). */
static size_t name_list(const char *t, size_t n, size_t i, size_t off[16], size_t len[16], uint32_t *count) {
  *count = 0;
  size_t e = vname_end(t, n, i);
  if (e == i) return i;
  for (;;) {
    if (*count == 16) return (size_t)-1;
    off[*count] = i, len[*count] = e - i, (*count)++;
    size_t q = skip_ws(t, n, e);
    if (q >= n || t[q] != ',') return e;
    q = skip_ws(t, n, q + 1);
    size_t e2 = vname_end(t, n, q);
    if (e2 == q) return (size_t)-1;
    i = q, e = e2;
  }
}

static void line_of(PB *p, size_t pos, int *line, int *col) {
  if (pos < p->lpos) p->lpos = p->lstart = 0, p->lline = 1;
  for (const char *t = p->text, *nl; (nl = memchr(t + p->lpos, '\n', pos - p->lpos)) != NULL;) {
    p->lline++;
    p->lpos = p->lstart = (size_t)(nl - t) + 1;
  }
  p->lpos = pos;
  *line = p->lline + p->line_offset;
  *col = (int)(pos - p->lstart) + 1;
}

/* Read one plain op at start (no regions, no loc(...), every name, type and
** dictionary known): build it and return the position after it; 0 to leave it
** to the parser (which also gives the errors). */
static size_t fast_op(lua_State *L, PB *p, size_t start) {
  const char *t = p->text;
  size_t n = p->len, q = start;
  size_t roff[16], rlen[16], ooff[16], olen[16];
  uint32_t nres = 0, nopd = 0;
  if (t[q] == '%') {
    q = name_list(t, n, q, roff, rlen, &nres);
    if (q == (size_t)-1) return 0;
    q = skip_ws(t, n, q);
    if (q >= n || t[q] != '=') return 0;
    q = skip_ws(t, n, q + 1);
  }
  size_t name = q, e = ident_end(t, n, q);
  if (e == q) return 0;
  const void *k = memo_get(p, 'o', t + name, e - name);
  if (!k) {
    int kind = ir_op_lookup(t + name, e - name);
    if (kind < 0) return 0;
    k = (const void *)(intptr_t)(kind + 1);
    memo_put(L, p, 'o', t + name, e - name, k);
  }
  int kind = (int)(intptr_t)k - 1;
  q = skip_ws(t, n, e);
  size_t after = name_list(t, n, q, ooff, olen, &nopd);
  if (after == (size_t)-1) return 0;
  if (nopd) {
    size_t w = skip_ws(t, n, after);
    if (w < n && t[w] == '=') nopd = 0; /* the next op's results */
    else q = skip_ws(t, n, after);
  }
  IrValue *opds[16];
  for (uint32_t i = 0; i < nopd; i++) {
    Name *nm = find_name(p, t + ooff[i], olen[i], text_hash(t + ooff[i], olen[i]));
    if (!nm) return 0;
    opds[i] = p->vals[nm->id];
  }
  const IrAttr *dict = NULL;
  if (q < n && t[q] == '{') { /* a dictionary: `{ name =` or `{ "name" =` ahead */
    size_t d = skip_ws(t, n, q + 1), de = t[d] == '"' ? string_end(t, n, d) : ident_end(t, n, d);
    if (!de || de == d) return 0;
    de = skip_ws(t, n, de);
    if (de >= n || t[de] != '=') return 0;
    size_t end = balanced_end(t, n, q, '{', '}');
    if (!end || !(dict = memo_get(p, 'd', t + q, end - q))) return 0;
    q = skip_ws(t, n, end);
  }
  const IrType *tys[16];
  uint32_t ntys = 0;
  if (q + 1 < n && t[q] == ':' && t[q + 1] != ':') {
    q++;
    for (;;) {
      q = skip_ws(t, n, q);
      size_t b = q + (q < n && t[q] == '!'), te = ident_end(t, n, b);
      if (te == b || ntys == 16) return 0;
      if (te < n && t[te] == '<' && !(te = balanced_end(t, n, te, '<', '>'))) return 0;
      if (!(tys[ntys++] = memo_get(p, 't', t + q, te - q))) return 0;
      q = skip_ws(t, n, te);
      if (q >= n || t[q] != ',') break;
      q++;
    }
  }
  if (ntys != nres) return 0;
  if (q < n && t[q] == '{') return 0;                             /* regions: the parser's */
  if (q + 4 <= n && memcmp(t + q, "loc(", 4) == 0) return 0;     /* a location annotation */
  for (uint32_t i = 0; i < nres; i++) {                           /* names new, and distinct */
    if (find_name(p, t + roff[i], rlen[i], text_hash(t + roff[i], rlen[i]))) return 0;
    for (uint32_t j = 0; j < i; j++)
      if (rlen[j] == rlen[i] && memcmp(t + roff[j], t + roff[i], rlen[i]) == 0) return 0;
  }
  int line, col;
  line_of(p, start, &line, &col);
  IrLoc loc = {p->file, line, col};
  lua_Integer first = place_op(L, p, kind, nopd, opds, nres, tys, dict, 0, loc);
  for (uint32_t i = 0; i < nres; i++) define_name(L, p, t + roff[i], rlen[i], first + i);
  return q;
}

/* pb:fast(pos) -> the position after the plain ops read from pos (pos itself
** when the op there is the parser's to read). */
static int pb_fast(lua_State *L) {
  PB *p = check_pb(L);
  lua_Integer pos1 = luaL_checkinteger(L, 2);
  if (!p->text || pos1 < 1 || (size_t)pos1 > p->len + 1) return luaL_error(L, "fast: no source or a bad position");
  size_t pos = (size_t)pos1 - 1;
  if (p->depth < 2 || !p->stack[p->depth - 1].block) { /* only inside an open block */
    lua_pushinteger(L, pos1);
    return 1;
  }
  for (;;) {
    size_t start = skip_ws(p->text, p->len, pos);
    if (start >= p->len || p->text[start] == '}' || p->text[start] == '^') break;
    size_t next = fast_op(L, p, start);
    if (!next) break;
    pos = next;
  }
  lua_pushinteger(L, (lua_Integer)pos + 1);
  return 1;
}

/* }====================================================================== */

/* pb:block({types}) -> first argument id */
static int pb_block(lua_State *L) {
  PB *p = check_pb(L);
  Open *o = &p->stack[p->depth - 1];
  if (!o->op) return luaL_error(L, "a block outside of any region");
  uint32_t n = list_len(L, 2);
  IrBlock *b = ir_block_create(p->ctx);
  IrValue *first = NULL;
  for (uint32_t i = 0; i < n; i++) {
    lua_rawgeti(L, 2, (lua_Integer)i + 1);
    IrValue *a = ir_block_add_arg(p->ctx, b, lb_check_type_of(L, -1, p->ctx));
    lua_pop(L, 1);
    if (!first) first = a;
  }
  ir_region_append_block(&o->op->regions[o->region], b);
  o->block = b;
  /* block arguments are not contiguous in memory: one id each */
  lua_Integer id = 0;
  for (uint32_t i = 0; i < n; i++) {
    lua_Integer k = add_values(L, p, b->args[i], 1, 0);
    if (!id) id = k;
  }
  lua_pushinteger(L, id);
  return 1;
}

/* pb:next_region(): false when the open op can hold no more regions. */
static int pb_next_region(lua_State *L) {
  PB *p = check_pb(L);
  Open *o = &p->stack[p->depth - 1];
  if (!o->op || o->region + 1 >= PB_MAX_REGIONS) {
    lua_pushboolean(L, 0);
    return 1;
  }
  o->region++;
  o->block = NULL;
  lua_pushboolean(L, 1);
  return 1;
}

static IrLoc loc_args(lua_State *L, PB *p, int idx) {
  const char *file = lua_type(L, idx) == LUA_TSTRING ? lua_tostring(L, idx) : NULL;
  if (file || lua_isnil(L, idx)) idx++;
  return ir_loc(p->ctx, file ? file : NULL, (int)luaL_optinteger(L, idx, 0), (int)luaL_optinteger(L, idx + 1, 0));
}

/* pb:close([file, line, col]): the open op is done; an explicit loc(...) for it. */
static int pb_close(lua_State *L) {
  PB *p = check_pb(L);
  if (p->depth < 2) return luaL_error(L, "no open operation to close");
  Open *o = &p->stack[--p->depth];
  o->op->nregions = o->region + 1; /* the regions the text gave (the rest were never touched) */
  if (lua_gettop(L) > 1) o->op->loc = loc_args(L, p, 2);
  return 0;
}

/* pb:loc([file,] line, col): the location of the last op built (loc(...) after it). */
static int pb_loc(lua_State *L) {
  PB *p = check_pb(L);
  if (p->last) p->last->loc = loc_args(L, p, 2);
  return 0;
}

static int pb_result(lua_State *L) {
  PB *p = check_pb(L);
  if (!p->top_op) return 0;
  lua_getiuservalue(L, 1, 1);
  lb_push_object(L, LB_OP, p->top_op, lua_gettop(L));
  return 1;
}

static int pb_depth(lua_State *L) {
  PB *p = check_pb(L);
  lua_pushinteger(L, (lua_Integer)p->depth - 1);
  return 1;
}

/* The region of the open op being filled (1-based; 0 at the top level). */
static int pb_region(lua_State *L) {
  PB *p = check_pb(L);
  Open *o = &p->stack[p->depth - 1];
  lua_pushinteger(L, o->op ? (lua_Integer)o->region + 1 : 0);
  return 1;
}

static const luaL_Reg pb_methods[] = {
    {"top", pb_top},           {"op", pb_op},           {"block", pb_block},           {"next_region", pb_next_region},
    {"close", pb_close},       {"loc", pb_loc},         {"result", pb_result},         {"depth", pb_depth},
    {"region", pb_region},     {"define", pb_define},   {"lookup", pb_lookup},         {"open_scope", pb_open_scope},
    {"close_scope", pb_close_scope}, {"memo_type", pb_memo_type}, {"memo_dict", pb_memo_dict},
    {"source", pb_source},     {"fast", pb_fast},       {"probes", pb_probes},         {NULL, NULL}};
static const luaL_Reg pb_meta[] = {{"__gc", pb_gc}, {NULL, NULL}};
static const luaL_Reg parse_functions[] = {{"parse_builder", core_parse_builder}, {NULL, NULL}};

static const LbClass parse_classes[] = {{LB_PARSE_BUILDER, pb_meta, pb_methods}, {NULL, NULL, NULL}};
const LbArea lb_area_parse = {parse_classes, parse_functions};
