/*
** fixup.c -- a CPU model of the StreamK fixup protocol (host only).
**
** Every worker runs its cursor; each piece carries a model partial: the k
** range it covers, a count and a sum of pseudo-random 64-bit weights, one per
** (tile, k tile). The model executes sched_fixup_role literally against
** model barriers and slots, so it checks the roles, not a copy of them. It is
** per cluster tile: the CTAs of a cluster run the same protocol on their own
** slots and counters.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched.h"

typedef struct Partial {
  uint32_t lo, hi, n; /* k range (deterministic prefix) and k tiles summed */
  uint64_t hash;      /* sum of the weights of the k tiles summed */
  bool set;
} Partial;

typedef struct Worker {
  SchedCursor cur;
  SchedSkWork piece;
  bool has, done;
} Worker;

typedef struct Model {
  const SchedStreamK *p;
  SchedFixupModel *m;
  Worker *workers;
  uint32_t *barrier; /* [sk_tiles] */
  Partial *slots;    /* [sk_tiles * slots_per_tile] */
} Model;

static uint64_t mix64(uint64_t x) { /* splitmix64 finaliser */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t weight_sum(const SchedStreamK *p, uint32_t t, uint32_t lo, uint32_t hi) {
  uint64_t h = 0;
  for (uint32_t k = lo; k < hi; k++)
    h += mix64((uint64_t)t * p->k_tiles + k);
  return h;
}

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static bool
violation(Model *md, const char *fmt, ...) {
  if (md->m->ok) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(md->m->error, sizeof md->m->error, fmt, ap);
    va_end(ap);
  }
  md->m->ok = false;
  return false;
}

/* Add the slots a role reads; deterministic reads must extend a K prefix. */
static bool model_read(Model *md, const SchedFixup *f, uint32_t t, Partial *acc) {
  for (uint32_t i = 0; i < f->read_count; i++) {
    uint32_t s = f->read_first + i;
    const Partial *in = &md->slots[(size_t)t * md->m->slots_per_tile + s];
    if (!in->set) return violation(md, "tile %u: slot %u read before written", t, s);
    if (md->p->reduction == SCHED_REDUCE_DETERMINISTIC && (in->lo != 0 || in->hi != acc->lo))
      return violation(md, "tile %u: slot %u does not end at k %u", t, s, acc->lo);
    acc->lo = in->lo < acc->lo ? in->lo : acc->lo;
    acc->n += in->n;
    acc->hash += in->hash;
  }
  return true;
}

static bool model_epilogue(Model *md, uint32_t t, uint32_t worker, const Partial *acc) {
  const SchedStreamK *p = md->p;
  if (acc->n != p->k_tiles || acc->hash != weight_sum(p, t, 0, p->k_tiles))
    return violation(md, "tile %u: epilogue by worker %u sums %u k tiles wrongly", t, worker,
                     acc->n);
  if (md->m->epilogues[t]++)
    return violation(md, "tile %u: second epilogue by worker %u", t, worker);
  md->m->reducer[t] = worker;
  if (t < p->sk_tiles) md->barrier[t] = 0;
  return true;
}

/* Run one piece whose wait is satisfied. */
static bool model_exec(Model *md, uint32_t worker, const SchedSkWork *w, const SchedFixup *f) {
  uint32_t t = w->tile_idx, hi = w->k_tile_start + w->k_tile_count;
  Partial acc = {w->k_tile_start, hi, w->k_tile_count, weight_sum(md->p, t, w->k_tile_start, hi),
                 true};
  if (!f->participates) return model_epilogue(md, t, worker, &acc);
  if (!model_read(md, f, t, &acc)) return false;
  if (f->write) {
    if (f->write_slot >= md->m->slots_per_tile)
      return violation(md, "tile %u: slot %u past %u slots", t, f->write_slot,
                       md->m->slots_per_tile);
    size_t i = (size_t)t * md->m->slots_per_tile + f->write_slot;
    if (md->slots[i].set) return violation(md, "tile %u: slot %u written twice", t, f->write_slot);
    md->slots[i] = acc;
    md->m->slot_writer[i] = worker;
    md->barrier[t] += 1;
  }
  return !f->epilogue || model_epilogue(md, t, worker, &acc);
}

/* Advance one worker if it can: fetch a piece, or run the one it holds. */
static bool model_step(Model *md, uint32_t wi, uint32_t *remaining) {
  Worker *wk = &md->workers[wi];
  if (wk->done) return false;
  if (!wk->has) {
    wk->has = sched_cursor_next(md->p, &wk->cur, &wk->piece);
    if (!wk->has) wk->done = true, *remaining -= 1;
    return true;
  }
  SchedFixup f = sched_fixup_role(md->p, &wk->piece);
  uint32_t t = wk->piece.tile_idx;
  if (f.wait && md->barrier[t] != f.wait_value) return false;
  /* The lowering resets the counter in the wait itself: only sound for the
  ** final split, after which nothing touches the counter (the final check
  ** finds a counter that moved again). */
  if (f.wait && f.reset) {
    if (!f.epilogue) return violation(md, "tile %u: a wait that is not the final split's resets", t);
    md->barrier[t] = 0;
  }
  wk->has = false;
  md->m->steps++;
  model_exec(md, wi, &wk->piece, &f);
  return true;
}

/* After the run: one epilogue per tile, counters reset, exactly the slots
** 0 .. splits-2 of every split tile written. */
static void model_final_check(Model *md) {
  const SchedStreamK *p = md->p;
  for (uint32_t t = 0; t < p->tiles && md->m->ok; t++) {
    if (md->m->epilogues[t] != 1) violation(md, "tile %u: %u epilogues", t, md->m->epilogues[t]);
    if (t >= p->sk_tiles) continue;
    uint32_t first, count;
    sched_sk_tile_units(p, t, &first, &count);
    if (md->barrier[t]) violation(md, "tile %u: barrier left at %u", t, md->barrier[t]);
    for (uint32_t s = 0; s < md->m->slots_per_tile; s++) {
      bool want = s + 1 < count;
      if (md->slots[(size_t)t * md->m->slots_per_tile + s].set != want)
        violation(md, "tile %u: slot %u %s", t, s, want ? "never written" : "written");
    }
  }
}

static void *xcalloc(size_t n, size_t size) {
  void *q = calloc(n ? n : 1, size);
  if (!q) {
    fprintf(stderr, "tilua: out of memory\n");
    abort();
  }
  return q;
}

static void model_alloc(Model *md, const SchedStreamK *p, SchedFixupModel *m) {
  memset(m, 0, sizeof *m);
  m->ok = true;
  m->tiles = p->tiles;
  m->slots_per_tile = p->max_splits - 1;
  size_t nslots = (size_t)p->sk_tiles * m->slots_per_tile;
  m->reducer = xcalloc(p->tiles, sizeof *m->reducer);
  m->epilogues = xcalloc(p->tiles, sizeof *m->epilogues);
  m->slot_writer = xcalloc(nslots, sizeof *m->slot_writer);
  for (size_t i = 0; i < nslots; i++)
    m->slot_writer[i] = UINT32_MAX;
  md->p = p;
  md->m = m;
  md->workers = xcalloc(p->grid, sizeof *md->workers);
  md->barrier = xcalloc(p->sk_tiles, sizeof *md->barrier);
  md->slots = xcalloc(nslots, sizeof *md->slots);
}

/*
** Interleave the workers: from a pseudo-random start, step the first worker
** that can move. If none can while some are unfinished, the protocol
** deadlocks (a wait that no later step satisfies).
*/
bool sched_fixup_model_run(const SchedStreamK *p, uint64_t seed, SchedFixupModel *m) {
  Model md;
  model_alloc(&md, p, m);
  uint32_t remaining = p->grid;
  for (uint32_t w = 0; w < p->grid; w++)
    sched_cursor_begin(p, &md.workers[w].cur, w);
  uint64_t rng = seed;
  while (remaining && m->ok) {
    rng = mix64(rng);
    uint32_t start = (uint32_t)(rng % p->grid), i;
    for (i = 0; i < p->grid; i++)
      if (model_step(&md, (start + i) % p->grid, &remaining)) break;
    if (i == p->grid) violation(&md, "deadlock: %u workers wait forever", remaining);
  }
  if (m->ok) model_final_check(&md);
  free(md.workers);
  free(md.barrier);
  free(md.slots);
  return m->ok;
}

void sched_fixup_model_free(SchedFixupModel *m) {
  free(m->reducer);
  free(m->epilogues);
  free(m->slot_writer);
  m->reducer = m->epilogues = m->slot_writer = NULL;
}
