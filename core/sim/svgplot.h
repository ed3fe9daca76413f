/* Minimal SVG charts for `tide sim --plot`: line charts and heat maps,
 * written without external tools (docs/sim.md). Core-internal. Each file is
 * written to PATH.tmp and renamed, so no half-written plot is left. */
#ifndef TIDE_SVGPLOT_H
#define TIDE_SVGPLOT_H

#include <stdbool.h>

/* One line of a chart. Points with a non-finite y are skipped. */
struct svg_series {
    const char *name; /* legend text */
    const double *x;  /* [n] */
    const double *y;  /* [n] */
    int n;
    bool dashed;  /* drawn dashed (reference lines) */
    bool markers; /* a dot at each point */
};

/* A line chart with axes, ticks, grid and legend. log_x draws x on a log2
 * scale (x must be > 0). Returns TIDE_OK, TIDE_E_INVAL (no finite point) or
 * TIDE_E_IO (logged with the path). */
int svg_line_chart(const char *path, const char *title, const char *xlabel, const char *ylabel,
                   const struct svg_series *s, int n_series, bool log_x);

/* A heat map of v[rows][cols] (>= 0): darker is larger, on a square-root
 * scale; zero cells are left white. col_marks[n_marks] are columns before
 * which a thin vertical line is drawn (block starts). row_label names what
 * a row is (e.g. "experts, busiest first"). */
int svg_heatmap(const char *path, const char *title, const char *xlabel, const char *row_label,
                const double *v, int rows, int cols, const int *col_marks, int n_marks);

#endif
