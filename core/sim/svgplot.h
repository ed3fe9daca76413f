/* Minimal SVG charts for `tide sim --plot` and `tide bench plot`: line
 * charts and heat maps, written without external tools (docs/sim.md).
 * Core-internal. Each file is written to PATH.tmp and renamed, so no
 * half-written plot is left.
 *
 * Series are told apart by colour (the Okabe-Ito palette, safe for the
 * common colour-vision deficiencies) and by marker shape: series i gets
 * colour i mod 8 and marker i mod 7, so no pair repeats below 56 series.
 * Bounds (the oracle, hindsight rows, a no-offload reference) are drawn as
 * thick dashed grey lines with their name at the line's end, never in a
 * policy's colour. Elements carry a class (series, bound, errorbar, tick-x,
 * tick-y) so that tests and style sheets can find them. */
#ifndef TIDE_SVGPLOT_H
#define TIDE_SVGPLOT_H

#include <stdbool.h>

/* One line of a chart. Points with a non-finite y are skipped; a series
 * with no points is left out, legend too. Fields are only ever added at
 * the end, so positional initialisers stay valid. */
struct svg_series {
    const char *name; /* legend text */
    const double *x;  /* [n] */
    const double *y;  /* [n] */
    int n;
    bool dashed;  /* drawn dashed (a reference that is not a bound) */
    bool markers; /* a marker at each point (its shape is the series') */
    bool bound;   /* a bound: thick dashed grey, labelled at its end */
    /* [n] or NULL: an error bar from ylo[k] to yhi[k] at point k (for
     * example min..max over repeats); non-finite ends draw no bar. */
    const double *ylo, *yhi;
};

/* How an axis is scaled. AUTO picks LOG2 when every value on it is a
 * positive power of two and there are two or more, else LINEAR. */
enum svg_scale {
    SVG_SCALE_LINEAR = 0,
    SVG_SCALE_LOG2 = 1,
    SVG_SCALE_AUTO = 2,
};

/* A line chart with axes, ticks, grid and legend. The y range comes from
 * the data (with the error bars) plus a margin; it is not forced to 0. On
 * a log2 axis every value must be > 0 (others are skipped) and the ticks
 * are the powers of two. Returns TIDE_OK, TIDE_E_INVAL (no finite point;
 * logged) or TIDE_E_IO / TIDE_E_NOMEM (logged with the path). */
int svg_line_chart(const char *path, const char *title, const char *xlabel, const char *ylabel,
                   const struct svg_series *s, int n_series, enum svg_scale xscale,
                   enum svg_scale yscale);

/* True when every finite x of every series (y when use_y) is a positive
 * power of two and they are not all equal: what SVG_SCALE_AUTO decides. */
bool svg_is_log2(const struct svg_series *s, int n_series, bool use_y);

/* A heat map of v[rows][cols] (>= 0): darker is larger, on a square-root
 * scale; zero cells are left white. col_marks[n_marks] are columns before
 * which a thin vertical line is drawn (block starts). row_label names what
 * a row is (e.g. "experts, busiest first"). Columns (from 0, e.g. step
 * indices) and rows (from 0) get tick labels at a readable spacing. */
int svg_heatmap(const char *path, const char *title, const char *xlabel, const char *row_label,
                const double *v, int rows, int cols, const int *col_marks, int n_marks);

#endif
