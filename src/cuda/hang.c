/*
** hang.c -- reading the debug-hangs records (hang.h) on the host: one line
** per warp that gave up on an mbarrier or still waits at a barrier.
*/
#include <stdio.h>
#include <string.h>

#include "hang.h"

/* Line i (0-based) of text, copied into buf; "?" when there is none. */
static const char *site_line(const char *text, uint32_t i, char *buf, size_t n) {
  const char *p = text;
  for (uint32_t k = 0; p && k < i; k++) {
    p = strchr(p, '\n');
    if (p) p++;
  }
  if (!p || !*p) return "?";
  size_t len = strcspn(p, "\n");
  if (len >= n) len = n - 1;
  memcpy(buf, p, len);
  buf[len] = '\0';
  return buf;
}

/* One slot as a line at the end of out. */
static void format_slot(const volatile uint32_t *s, size_t warp, const char *where, char *out,
                        size_t n) {
  size_t at = strlen(out);
  if (at + 1 >= n) return;
  unsigned long block = s[TLHANG_BLOCK];
  if (s[TLHANG_STATE] == TLHANG_MBARRIER)
    snprintf(out + at, n - at,
             "\n  block %lu warp %zu lane %lu gave up after %lu us waiting on the mbarrier at "
             "shared 0x%lx for phase parity %lu: %s",
             block, warp, (unsigned long)s[TLHANG_LANE], (unsigned long)s[TLHANG_WAITED],
             (unsigned long)s[TLHANG_BARRIER], (unsigned long)s[TLHANG_PHASE], where);
  else if (s[TLHANG_STATE] == TLHANG_NAMED)
    snprintf(out + at, n - at, "\n  block %lu warp %zu waits at named barrier %lu (%lu threads): %s",
             block, warp, (unsigned long)s[TLHANG_BARRIER], (unsigned long)s[TLHANG_PHASE], where);
  else
    snprintf(out + at, n - at, "\n  block %lu warp %zu waits at the cluster barrier: %s", block, warp,
             where);
}

size_t tlhang_format(const volatile uint32_t *slots, size_t nslots, unsigned warps_per_block,
                     const char *sites, char *out, size_t n, size_t max_lines) {
  size_t used = 0;
  char site[256];
  for (size_t i = 0; i < nslots; i++) {
    const volatile uint32_t *s = slots + i * TLHANG_SLOT_WORDS;
    uint32_t state = s[TLHANG_STATE];
    if (state == TLHANG_NONE || state > TLHANG_MBARRIER) continue;
    if (used++ >= max_lines) continue;
    uint32_t k = s[TLHANG_SITE];
    const char *where = k ? site_line(sites, k - 1, site, sizeof site) : "?";
    format_slot(s, warps_per_block ? i % warps_per_block : 0, where, out, n);
  }
  if (used > max_lines) {
    size_t at = strlen(out);
    if (at + 1 < n) snprintf(out + at, n - at, "\n  ... and %zu more", used - max_lines);
  }
  return used;
}
