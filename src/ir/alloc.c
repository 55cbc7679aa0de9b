/*
** alloc.c -- the one allocator of the C core, protected calls and the
** allocation-failure test mode.
**
** Every block carries a small header. A block allocated while a protected
** call runs on this thread is "tracked" (kept in a thread-local list in
** allocation order): when an allocation fails inside the call, the blocks
** tracked since the call began are freed and the call is abandoned (longjmp,
** or the raise hook, which throws a Lua error), the way Lua abandons a call on
** a memory error. Blocks a context keeps (ir_malloc_owned: its arena chunks,
** its uniquing tables) are never tracked; the context frees them when it is
** destroyed. Without a protected call a failed allocation aborts.
*/
#include <stdlib.h>
#include <string.h>

#include "ir.h"

typedef struct AllocHdr {
  struct AllocHdr *prev, *next; /* the tracked list; both NULL when untracked */
  uint64_t serial;              /* allocation order of a tracked block */
  uint64_t tracked;
} AllocHdr;

_Static_assert(sizeof(AllocHdr) % 16 == 0, "the header keeps 16-byte alignment");

static _Thread_local IrProtect *top;          /* innermost protected call */
static _Thread_local AllocHdr *tracked_tail;  /* newest tracked block */
static _Thread_local uint64_t next_serial = 1;
static _Thread_local uint64_t alloc_count;    /* allocations since the test mode was set */
static _Thread_local uint64_t fail_at;        /* fail the fail_at-th one (0 = never) */

/* {======================================================================
** Failure
** ======================================================================= */

/* Free the blocks tracked since the frame began (the abandoned call's scratch). */
static void reclaim(IrProtect *p) {
  while (tracked_tail && tracked_tail->serial > p->mark) {
    AllocHdr *h = tracked_tail;
    tracked_tail = h->prev;
    if (tracked_tail) tracked_tail->next = NULL;
    free(h);
  }
}

_Noreturn void ir_out_of_memory(void) {
  IrProtect *p = top;
  if (!p) {
    fprintf(stderr, "tilua: out of memory\n");
    abort();
  }
  reclaim(p);
  p->failed = true;
  if (p->raise) {
    p->raise(p->raise_ud); /* does not return: a Lua error */
    abort();
  }
  longjmp(p->jb, 1);
}

/* Count an allocation; fail it when the test mode says so. */
static bool injected_failure(void) {
  alloc_count++;
  return fail_at && alloc_count == fail_at;
}

void ir_alloc_tick(void) {
  if (injected_failure()) ir_out_of_memory();
}

void ir_alloc_fail_at(uint64_t n) {
  alloc_count = 0;
  fail_at = n;
}

uint64_t ir_alloc_count(void) { return alloc_count; }

/* }====================================================================== */

/* {======================================================================
** Blocks
** ======================================================================= */

static void track(AllocHdr *h) {
  h->serial = next_serial++;
  h->tracked = 1;
  h->next = NULL;
  h->prev = tracked_tail;
  if (tracked_tail) tracked_tail->next = h;
  tracked_tail = h;
}

static void untrack(AllocHdr *h) {
  if (h->prev) h->prev->next = h->next;
  if (h->next) h->next->prev = h->prev;
  else tracked_tail = h->prev;
  h->prev = h->next = NULL;
  h->tracked = 0;
}

static void *raw_alloc(size_t n, bool zero, bool owned) {
  if (n > SIZE_MAX - sizeof(AllocHdr) || injected_failure()) ir_out_of_memory();
  AllocHdr *h = zero ? calloc(1, sizeof *h + n) : malloc(sizeof *h + n);
  if (!h) ir_out_of_memory();
  memset(h, 0, sizeof *h);
  if (top && !owned) track(h);
  return h + 1;
}

void *ir_malloc(size_t n) { return raw_alloc(n, false, false); }
void *ir_malloc_owned(size_t n) { return raw_alloc(n, false, true); }

void *ir_calloc(size_t n, size_t size) {
  if (size && n > SIZE_MAX / size) ir_out_of_memory();
  return raw_alloc(n * size, true, false);
}

void *ir_calloc_owned(size_t n, size_t size) {
  if (size && n > SIZE_MAX / size) ir_out_of_memory();
  return raw_alloc(n * size, true, true);
}

void *ir_realloc(void *p, size_t n) {
  if (!p) return ir_malloc(n);
  if (n > SIZE_MAX - sizeof(AllocHdr) || injected_failure()) ir_out_of_memory();
  AllocHdr *old = (AllocHdr *)p - 1;
  bool tracked = old->tracked;
  /* unlink first: realloc may move the block (the neighbours are relinked below) */
  AllocHdr *prev = old->prev, *next = old->next;
  AllocHdr *h = realloc(old, sizeof *h + n);
  if (!h) ir_out_of_memory(); /* the old block is still linked where it was */
  if (tracked) {
    if (prev) prev->next = h;
    if (next) next->prev = h;
    else tracked_tail = h;
  }
  return h + 1;
}

void ir_free(void *p) {
  if (!p) return;
  AllocHdr *h = (AllocHdr *)p - 1;
  if (h->tracked) untrack(h);
  free(h);
}

char *ir_strndup(const char *s, size_t n) {
  char *p = ir_malloc(n + 1);
  if (n) memcpy(p, s, n);
  p[n] = 0;
  return p;
}

/* }====================================================================== */

/* {======================================================================
** Protected calls
** ======================================================================= */

void ir_protect_push(IrProtect *p, void (*raise)(void *ud), void *ud) {
  p->prev = top;
  p->mark = next_serial - 1;
  p->failed = false;
  p->raise = raise;
  p->raise_ud = ud;
  top = p;
}

void ir_protect_pop(IrProtect *p) {
  top = p->prev;
  if (top) return; /* an enclosing call still owns what was tracked */
  /* blocks still alive leave with their owners (a string returned to the host) */
  while (tracked_tail && tracked_tail->serial > p->mark) untrack(tracked_tail);
}

bool ir_protected(void) { return top != NULL; }

bool ir_protect_failed(void) {
  for (IrProtect *p = top; p; p = p->prev)
    if (p->failed) return true;
  return false;
}

/* }====================================================================== */
