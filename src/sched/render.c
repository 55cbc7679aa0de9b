/*
** render.c -- pictures of a schedule for the CLI and the REPL: a text grid
** of the worker that finishes each output tile (ANSI 256-colour blocks when
** asked), the list of StreamK K-splits, and the same grid as an SVG document.
** Host only: allocates a per-tile scratch array.
*/
#include <stdio.h>
#include <stdlib.h>

#include "../ir/ir.h"
#include "sched.h"

/* What the pictures show of one cluster tile. */
typedef struct Cell {
  uint32_t linear, owner, contributors;
} Cell;

/* Cells indexed by (l, cluster row, cluster column), filled by walking the
** linear ids so that every coordinate is written once. */
static Cell *render_cells(const SchedPlan *p) {
  const SchedRaster *r = &p->persist.raster;
  Cell *cells = calloc(r->total ? r->total : 1, sizeof *cells);
  if (!cells) {
    fprintf(stderr, "tilua: out of memory\n");
    abort();
  }
  for (uint32_t id = 0; id < r->total; id++) {
    SchedCoord c = sched_raster_unpack(r, id);
    Cell *cell = &cells[((size_t)c.l * r->grid_m + c.m) * r->grid_n + c.n];
    cell->linear = id;
    cell->owner = sched_plan_owner(p, id, &cell->contributors);
  }
  return cells;
}

static const Cell *cell_at(const SchedPlan *p, const Cell *cells, uint32_t m, uint32_t n,
                           uint32_t l) {
  const SchedRaster *r = &p->persist.raster;
  return &cells[((size_t)l * r->grid_m + m / r->cluster_m) * r->grid_n + n / r->cluster_n];
}

static int digits(uint32_t x) {
  int d = 1;
  while (x >= 10)
    x /= 10, d++;
  return d;
}

/* {======================================================================
** Colours: the 6x6x6 cube of the 256-colour palette, stepped by 97 (prime to
** 216) so that neighbouring workers get distant colours.
** ======================================================================= */

static uint32_t colour_cube(uint32_t worker) { return (worker * 97u) % 216u; }
static int colour_index(uint32_t worker) { return 16 + (int)colour_cube(worker); }

/* Black text on light colours, white on dark (integer luma of the cube). */
static bool colour_is_light(uint32_t worker) {
  uint32_t c = colour_cube(worker), r = c / 36, g = c / 6 % 6, b = c % 6;
  return 3 * r + 6 * g + b >= 25;
}

static void colour_rgb(uint32_t worker, char out[8]) {
  static const int level[6] = {0, 95, 135, 175, 215, 255};
  uint32_t c = colour_cube(worker);
  snprintf(out, 8, "#%02x%02x%02x", level[c / 36], level[c / 6 % 6], level[c % 6]);
}

/* }====================================================================== */

/* {======================================================================
** Text
** ======================================================================= */

static void render_header(StrBuf *sb, const SchedPlan *p) {
  const SchedConfig *c = &p->cfg;
  const SchedRaster *r = &p->persist.raster;
  sb_printf(sb, "schedule %s: %u x %u tiles", sched_kind_name(c->kind), r->tiles_m, r->tiles_n);
  if (r->tiles_l > 1) sb_printf(sb, " x %u batches", r->tiles_l);
  sb_printf(sb, ", %u k tiles each, cluster %ux%u, swizzle %u, along %s\n", c->tiles_k,
            r->cluster_m, r->cluster_n, r->swizzle, r->order == SCHED_ALONG_M ? "m" : "n");
  sb_printf(sb, "workers %u launched (%u CTAs)", p->grid, p->params.total_ctas);
  if (c->kind != SCHED_STREAMK) {
    sb_puts(sb, ", no workspace\n");
    return;
  }
  const SchedStreamK *sk = &p->sk;
  sb_printf(sb, ", decomposition %s, reduction %s\n", sched_decomp_name(sk->decomp),
            sched_reduction_name(sk->reduction));
  sb_printf(sb, "sk_tiles %u, sk_units %u, dp_tiles %u, units %u", sk->sk_tiles, sk->sk_units,
            sk->dp_tiles, sk->units);
  if (sk->decomp == SCHED_DECOMP_STREAMK)
    sb_printf(sb, ", %u k tiles per unit (+1 on %u big units)", sk->k_per_small, sk->big_units);
  if (sk->decomp == SCHED_DECOMP_SPLIT_K) sb_printf(sb, ", %u splits", sk->splits);
  sb_printf(sb, ", max splits %u\n", sk->max_splits);
  sb_printf(sb, "workspace %llu bytes (reduction %llu, barriers %llu at +%llu)\n",
            (unsigned long long)p->ws.total, (unsigned long long)p->ws.reduction,
            (unsigned long long)p->ws.barriers, (unsigned long long)p->ws.barrier_offset);
}

static void render_cell_text(StrBuf *sb, const Cell *cell, int width, bool colour) {
  char mark = cell->contributors > 1 ? '*' : ' ';
  if (colour) {
    sb_printf(sb, "\x1b[48;5;%dm\x1b[38;5;%dm%*u%c\x1b[0m", colour_index(cell->owner),
              colour_is_light(cell->owner) ? 16 : 231, width, cell->owner, mark);
  } else {
    sb_printf(sb, " %*u%c", width, cell->owner, mark);
  }
}

static void render_grid_text(StrBuf *sb, const SchedPlan *p, const Cell *cells, bool colour) {
  const SchedRaster *r = &p->persist.raster;
  int width = digits(p->grid ? p->grid - 1 : 0), rowd = digits(r->tiles_m - 1);
  int cellw = width + (colour ? 1 : 2);
  for (uint32_t l = 0; l < r->tiles_l; l++) {
    if (r->tiles_l > 1) sb_printf(sb, "batch l = %u\n", l);
    sb_printf(sb, "%*s n ", rowd, "");
    for (uint32_t n = 0; n < r->tiles_n; n++) /* every 5th column, over its cells' digits */
      if (n % 5 == 0 && digits(n) < cellw)
        sb_printf(sb, "%*u ", cellw - 1, n);
      else
        sb_printf(sb, "%*s", cellw, "");
    sb_printf(sb, "\n%*s m\n", rowd, "");
    for (uint32_t m = 0; m < r->tiles_m; m++) {
      sb_printf(sb, "%*u  ", rowd + 1, m);
      for (uint32_t n = 0; n < r->tiles_n; n++)
        render_cell_text(sb, cell_at(p, cells, m, n, l), width, colour);
      sb_putc(sb, '\n');
    }
  }
}

/* The colour of each worker, 16 to a line. */
static void render_legend_text(StrBuf *sb, const SchedPlan *p, bool colour) {
  sb_puts(sb, "cell: the worker that finishes the tile; * = its K is split across workers\n");
  if (!colour) return;
  int width = digits(p->grid ? p->grid - 1 : 0);
  for (uint32_t w = 0; w < p->grid; w++) {
    sb_printf(sb, "\x1b[48;5;%dm\x1b[38;5;%dm w%-*u\x1b[0m", colour_index(w),
              colour_is_light(w) ? 16 : 231, width, w);
    if (w % 16 == 15 || w + 1 == p->grid) sb_putc(sb, '\n');
  }
}

/* One line per split tile: its pieces in K order and the reducer. */
static void render_splits(StrBuf *sb, const SchedPlan *p) {
  const SchedStreamK *sk = &p->sk;
  if (p->cfg.kind != SCHED_STREAMK || sk->max_splits <= 1) return;
  sb_puts(sb, "k splits (worker k[begin,end)):\n");
  for (uint32_t t = 0; t < sk->sk_tiles; t++) {
    uint32_t first, count, lo, hi, base = t * sk->k_tiles;
    sched_sk_tile_units(sk, t, &first, &count);
    if (count < 2) continue;
    SchedCoord c = sched_raster_unpack(&sk->raster, t);
    sb_printf(sb, "  tile %u (m %u, n %u, l %u):", t, c.m, c.n, c.l);
    for (uint32_t u = first; u < first + count; u++) {
      sched_sk_unit_range(sk, u, &lo, &hi);
      lo = lo > base ? lo - base : 0;
      hi = hi - base < sk->k_tiles ? hi - base : sk->k_tiles;
      sb_printf(sb, " w%u k[%u,%u)", u % sk->grid, lo, hi);
    }
    sb_printf(sb, " -> w%u reduces\n", (first + count - 1) % sk->grid);
  }
}

void sched_render_text(StrBuf *sb, const SchedPlan *p, unsigned flags) {
  bool colour = flags & SCHED_RENDER_COLOR;
  Cell *cells = render_cells(p);
  render_header(sb, p);
  render_grid_text(sb, p, cells, colour);
  render_legend_text(sb, p, colour);
  if (!(flags & SCHED_RENDER_NO_SPLITS)) render_splits(sb, p);
  free(cells);
}

/* }====================================================================== */

/* {======================================================================
** SVG
** ======================================================================= */

#define CELL 24 /* pixels per tile */
#define MARGIN 40

static void render_cell_svg(StrBuf *sb, const Cell *cell, uint32_t m, uint32_t n, uint32_t x,
                            uint32_t y) {
  char rgb[8];
  colour_rgb(cell->owner, rgb);
  bool split = cell->contributors > 1;
  sb_printf(sb, "<g><title>tile m %u n %u: linear %u, worker %u%s</title>", m, n, cell->linear,
            cell->owner, split ? ", K split" : "");
  sb_printf(sb, "<rect x=\"%u\" y=\"%u\" width=\"%d\" height=\"%d\" fill=\"%s\" stroke=\"%s\"", x,
            y, CELL, CELL, rgb, split ? "#000" : "#fff");
  sb_printf(sb, " stroke-width=\"%s\"/>", split ? "2" : "0.5");
  sb_printf(sb, "<text x=\"%u\" y=\"%u\" fill=\"%s\">%u%s</text></g>\n", x + CELL / 2,
            y + CELL / 2 + 3, colour_is_light(cell->owner) ? "#000" : "#fff", cell->owner,
            split ? "*" : "");
}

static uint32_t render_grid_svg(StrBuf *sb, const SchedPlan *p, const Cell *cells) {
  const SchedRaster *r = &p->persist.raster;
  uint32_t y0 = MARGIN;
  for (uint32_t l = 0; l < r->tiles_l; l++) {
    sb_printf(sb,
              "<text x=\"%d\" y=\"%u\" text-anchor=\"start\">batch %u (rows m, columns n)"
              "</text>\n",
              MARGIN, y0 - 8, l);
    for (uint32_t m = 0; m < r->tiles_m; m++)
      for (uint32_t n = 0; n < r->tiles_n; n++)
        render_cell_svg(sb, cell_at(p, cells, m, n, l), m, n, MARGIN + n * CELL, y0 + m * CELL);
    y0 += r->tiles_m * CELL + MARGIN;
  }
  return y0;
}

static uint32_t render_legend_svg(StrBuf *sb, const SchedPlan *p, uint32_t y0, uint32_t cols) {
  char rgb[8];
  for (uint32_t w = 0; w < p->grid; w++) {
    uint32_t x = MARGIN + (w % cols) * CELL * 2, y = y0 + (w / cols) * CELL;
    colour_rgb(w, rgb);
    sb_printf(sb, "<rect x=\"%u\" y=\"%u\" width=\"%d\" height=\"%d\" fill=\"%s\"/>", x, y,
              2 * CELL - 2, CELL - 2, rgb);
    sb_printf(sb, "<text x=\"%u\" y=\"%u\" fill=\"%s\">w%u</text>\n", x + CELL - 1,
              y + CELL / 2 + 2, colour_is_light(w) ? "#000" : "#fff", w);
  }
  return y0 + (p->grid + cols - 1) / cols * CELL;
}

void sched_render_svg(StrBuf *sb, const SchedPlan *p) {
  const SchedRaster *r = &p->persist.raster;
  Cell *cells = render_cells(p);
  uint32_t width = 2 * MARGIN + r->tiles_n * CELL;
  if (width < 2 * MARGIN + 16 * 2 * CELL) width = 2 * MARGIN + 16 * 2 * CELL;
  uint32_t cols = (width - 2 * MARGIN) / (2 * CELL);
  uint32_t height = MARGIN + r->tiles_l * (r->tiles_m * CELL + MARGIN) +
                    (p->grid + cols - 1) / cols * CELL + 2 * MARGIN;
  sb_printf(sb,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%u\" height=\"%u\" "
            "font-family=\"monospace\" font-size=\"9\" text-anchor=\"middle\">\n",
            width, height);
  sb_printf(sb, "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n");
  sb_printf(sb,
            "<text x=\"%d\" y=\"16\" text-anchor=\"start\" font-size=\"12\">%s schedule, "
            "%u workers; cell = worker finishing the tile, * = K split</text>\n",
            MARGIN, sched_kind_name(p->cfg.kind), p->grid);
  uint32_t y = render_grid_svg(sb, p, cells);
  render_legend_svg(sb, p, y, cols);
  sb_puts(sb, "</svg>\n");
  free(cells);
}

/* }====================================================================== */
