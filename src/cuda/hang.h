/*
** hang.h -- the debug-hangs records (tl.options.debug_hangs, --debug-hangs):
** the contract between the code the `debug-hangs` pass adds to a kernel and
** the host that reads it (hang.c) when a launch hangs or fails.
**
** The kernel gets one extra parameter, the address of mapped host memory: one
** slot of TLHANG_SLOT_WORDS 32-bit words per warp of the grid; warp w of block
** b (linear block index) owns slot b * warps_per_block + w. A warp writes its
** slot before it waits at a named or cluster barrier (and clears it after);
** a thread that gives up on an mbarrier wait writes it, then traps. The host
** reads the slots from its side of the mapping, even while the kernel hangs.
*/
#ifndef TILUA_HANG_H
#define TILUA_HANG_H

#include <stddef.h>
#include <stdint.h>

#define TLHANG_SLOT_WORDS 8
#define TLHANG_PARAM "tilua_hangs" /* the extra parameter's name */

/* What a slot says (word TLHANG_STATE). */
enum { TLHANG_NONE = 0, TLHANG_NAMED = 1, TLHANG_CLUSTER = 2, TLHANG_MBARRIER = 3 };

/* The words of a slot. */
enum {
  TLHANG_STATE,   /* TLHANG_* */
  TLHANG_SITE,    /* 1 + the index of the wait in the kernel's hang_sites */
  TLHANG_BARRIER, /* the mbarrier's shared address, the named barrier's id */
  TLHANG_PHASE,   /* mbarrier: the parity waited for; named barrier: its thread count */
  TLHANG_LANE,    /* the lane that wrote it */
  TLHANG_BLOCK,   /* the linear block index */
  TLHANG_WAITED,  /* mbarrier: microseconds it waited before giving up */
  TLHANG_SPARE
};

/* Append to out (NUL-terminated, n bytes) one line per slot in use, at most
** max_lines; sites holds the kernel's wait sites one per line. Returns the
** number of slots in use. */
size_t tlhang_format(const volatile uint32_t *slots, size_t nslots, unsigned warps_per_block,
                     const char *sites, char *out, size_t n, size_t max_lines);

#endif
