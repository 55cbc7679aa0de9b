/*
** arena.c -- the context's bump allocator, byte-key hash tables and string buffers.
*/
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "ir.h"

/* {======================================================================
** Arena: chunks of at least 64 KiB; large requests get a chunk of their own.
** ======================================================================= */

struct ArenaChunk {
  ArenaChunk *next;
  size_t size, used;
  _Alignas(16) unsigned char data[];
};

#define ARENA_CHUNK (64 * 1024)

void arena_init(Arena *a) {
  a->head = NULL;
  a->used_total = 0;
}

void arena_free(Arena *a) {
  ArenaChunk *c = a->head;
  while (c) {
    ArenaChunk *n = c->next;
    ir_free(c);
    c = n;
  }
  a->head = NULL;
}

static ArenaChunk *arena_new_chunk(size_t size) {
  ArenaChunk *c = ir_malloc_owned(sizeof(ArenaChunk) + size);
  c->size = size;
  c->used = 0;
  c->next = NULL;
  return c;
}

void *arena_alloc(Arena *a, size_t n) {
  ir_alloc_tick();
  if (n > SIZE_MAX / 2) ir_out_of_memory(); /* the rounding and the chunk header would wrap */
  n = (n + 15) & ~(size_t)15;
  if (n == 0) n = 16;
  ArenaChunk *c = a->head;
  if (!c || c->size - c->used < n) {
    if (n > ARENA_CHUNK / 4) { /* big: own chunk, kept behind the current one */
      ArenaChunk *big = arena_new_chunk(n);
      big->used = n;
      if (c) {
        big->next = c->next;
        c->next = big;
      } else {
        a->head = big;
      }
      a->used_total += n;
      memset(big->data, 0, n);
      return big->data;
    }
    c = arena_new_chunk(ARENA_CHUNK);
    c->next = a->head;
    a->head = c;
  }
  void *p = c->data + c->used;
  c->used += n;
  a->used_total += n;
  memset(p, 0, n);
  return p;
}

char *arena_strndup(Arena *a, const char *s, size_t n) {
  char *p = arena_alloc(a, n + 1);
  if (n) memcpy(p, s, n);
  p[n] = 0;
  return p;
}

/* }====================================================================== */

/* {======================================================================
** Hash tables keyed by byte strings, linear probing.
** ======================================================================= */

/* Eight bytes a step (a key is tens of bytes: an op's for cse, a type's, an
** attribute's), each step a multiply and a shift, then murmur3's finalizer so
** that the low bits the tables index by depend on every byte. (Nothing reads
** a table in slot order: the hash decides where keys sit, never an order.) */
uint64_t hash_bytes(const void *p, size_t n) {
  const unsigned char *s = p;
  uint64_t h = 1469598103934665603ull ^ (n * 0x9e3779b97f4a7c15ull), w;
  for (; n >= 8; s += 8, n -= 8) {
    memcpy(&w, s, 8);
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 32;
  }
  if (n) {
    w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 32;
  }
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h ? h : 1;
}

void *hash_find(HashTable *t, const void *key, size_t n, uint64_t h) {
  if (!t->cap) return NULL;
  size_t mask = t->cap - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    HashEntry *e = &t->slots[i];
    if (!e->hash) return NULL;
    if (e->hash == h && e->keylen == n && memcmp(e->key, key, n) == 0) return e->value;
  }
}

static void hash_grow(HashTable *t) {
  size_t ncap = t->cap ? t->cap * 2 : 64;
  HashEntry *ns = t->owned ? ir_calloc_owned(ncap, sizeof(HashEntry)) : ir_calloc(ncap, sizeof(HashEntry));
  for (size_t i = 0; i < t->cap; i++) {
    HashEntry *e = &t->slots[i];
    if (!e->hash) continue;
    size_t j = e->hash & (ncap - 1);
    while (ns[j].hash) j = (j + 1) & (ncap - 1);
    ns[j] = *e;
  }
  ir_free(t->slots);
  t->slots = ns;
  t->cap = ncap;
}

/* The key must stay alive as long as the table (arena memory). */
void hash_insert(HashTable *t, const void *key, size_t n, uint64_t h, void *value) {
  if ((t->count + 1) * 4 > t->cap * 3) hash_grow(t);
  size_t mask = t->cap - 1;
  for (size_t i = h & mask;; i = (i + 1) & mask) {
    HashEntry *e = &t->slots[i];
    if (!e->hash) {
      e->hash = h;
      e->key = key;
      e->keylen = n;
      e->value = value;
      t->count++;
      return;
    }
    if (e->hash == h && e->keylen == n && memcmp(e->key, key, n) == 0) {
      e->value = value;
      return;
    }
  }
}

void hash_free(HashTable *t) {
  ir_free(t->slots);
  t->slots = NULL;
  t->cap = t->count = 0;
}

static uint64_t ptr_hash(const void *p) {
  uint64_t x = (uint64_t)(uintptr_t)p;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

void *ptrmap_get(const PtrMap *m, const void *key) {
  if (!m->cap) return NULL;
  size_t mask = m->cap - 1;
  for (size_t i = ptr_hash(key) & mask;; i = (i + 1) & mask) {
    if (!m->slots[i].key) return NULL;
    if (m->slots[i].key == key) return m->slots[i].value;
  }
}

void ptrmap_set(PtrMap *m, const void *key, void *value) {
  assert(key);
  if ((m->count + 1) * 4 > m->cap * 3) {
    size_t ncap = m->cap ? m->cap * 2 : 64;
    PtrMapEntry *ns = ir_calloc(ncap, sizeof *ns);
    for (size_t i = 0; i < m->cap; i++) {
      if (!m->slots[i].key) continue;
      size_t j = ptr_hash(m->slots[i].key) & (ncap - 1);
      while (ns[j].key) j = (j + 1) & (ncap - 1);
      ns[j] = m->slots[i];
    }
    ir_free(m->slots);
    m->slots = ns;
    m->cap = ncap;
  }
  size_t mask = m->cap - 1;
  for (size_t i = ptr_hash(key) & mask;; i = (i + 1) & mask) {
    if (!m->slots[i].key) {
      m->slots[i].key = key;
      m->slots[i].value = value;
      m->count++;
      return;
    }
    if (m->slots[i].key == key) {
      m->slots[i].value = value;
      return;
    }
  }
}

void ptrmap_free(PtrMap *m) {
  ir_free(m->slots);
  m->slots = NULL;
  m->cap = m->count = 0;
}

/* }====================================================================== */

/* {======================================================================
** String buffers
** ======================================================================= */

void sb_init(StrBuf *sb) {
  sb->data = NULL;
  sb->len = sb->cap = 0;
}

void sb_free(StrBuf *sb) {
  ir_free(sb->data);
  sb_init(sb);
}

static void sb_reserve(StrBuf *sb, size_t extra) {
  if (sb->len + extra + 1 <= sb->cap) return;
  size_t ncap = sb->cap ? sb->cap * 2 : 256;
  while (ncap < sb->len + extra + 1) ncap *= 2;
  char *nd = ir_realloc(sb->data, ncap);
  sb->data = nd;
  sb->cap = ncap;
}

void sb_putn(StrBuf *sb, const char *s, size_t n) {
  sb_reserve(sb, n);
  memcpy(sb->data + sb->len, s, n);
  sb->len += n;
  sb->data[sb->len] = 0;
}

void sb_putc(StrBuf *sb, char c) {
  sb_reserve(sb, 1);
  sb->data[sb->len++] = c;
  sb->data[sb->len] = 0;
}
void sb_puts(StrBuf *sb, const char *s) { sb_putn(sb, s, strlen(s)); }

void sb_put_u64(StrBuf *sb, unsigned long long v) {
  char tmp[24];
  size_t i = sizeof tmp;
  do {
    tmp[--i] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  sb_putn(sb, tmp + i, sizeof tmp - i);
}

void sb_put_i64(StrBuf *sb, long long v) {
  if (v < 0) {
    sb_putc(sb, '-');
    sb_put_u64(sb, 0ull - (unsigned long long)v); /* (LLONG_MIN too) */
    return;
  }
  sb_put_u64(sb, (unsigned long long)v);
}

void sb_printf(StrBuf *sb, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char tmp[256];
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof tmp) {
    sb_putn(sb, tmp, (size_t)n);
    return;
  }
  sb_reserve(sb, (size_t)n);
  va_start(ap, fmt);
  vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  sb->len += (size_t)n;
}

char *sb_take(StrBuf *sb) {
  if (!sb->data) {
    char *e = ir_malloc(1);
    e[0] = 0;
    return e;
  }
  char *d = sb->data;
  sb_init(sb);
  return d;
}

/* }====================================================================== */

void ir_opvec_push(IrOpVec *v, IrOp *op) {
  if (v->n == v->cap) {
    size_t cap = v->cap ? 2 * v->cap : 32;
    IrOp **nv = ir_realloc(v->v, cap * sizeof *nv);
    v->v = nv;
    v->cap = cap;
  }
  v->v[v->n++] = op;
}

void ir_opvec_free(IrOpVec *v) {
  ir_free(v->v);
  v->v = NULL;
  v->n = v->cap = 0;
}
