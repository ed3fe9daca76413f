/* SVG line charts and heat maps (svgplot.h). */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "svgplot.h"
#include "tide/log.h"
#include "tide/status.h"

#define SVG_W      760
#define SVG_H      460
#define SVG_LEFT   80
#define SVG_RIGHT  200
#define SVG_TOP    40
#define SVG_BOTTOM 60
/* An upper bound on the advance of one character of 11 px sans-serif (DejaVu
 * Sans averages 6.1 px; capitals and 'm' are wider): the legend's width is
 * reckoned with it, so that no renderer cuts it at the canvas edge. */
#define SVG_CHAR_W 7.0

struct svg_file {
    FILE *f;
    char *tmp;
    const char *path;
};

static int svg_open(struct svg_file *s, const char *path, int w, int h)
{
    s->path = path;
    s->tmp = malloc(strlen(path) + 5);
    if (!s->tmp)
        return TIDE_E_NOMEM;
    sprintf(s->tmp, "%s.tmp", path);
    if (!(s->f = fopen(s->tmp, "w"))) {
        tide_error("plot: cannot create %s: %s", s->tmp, strerror(errno));
        free(s->tmp);
        return TIDE_E_IO;
    }
    fprintf(s->f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
            "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            w, h, w, h, w, h);
    return TIDE_OK;
}

static int svg_close(struct svg_file *s)
{
    fprintf(s->f, "</svg>\n");
    int rc = ferror(s->f) ? TIDE_E_IO : TIDE_OK;
    if (fclose(s->f) != 0)
        rc = TIDE_E_IO;
    if (rc == TIDE_OK && rename(s->tmp, s->path) != 0)
        rc = TIDE_E_IO;
    if (rc != TIDE_OK) {
        tide_error("plot: cannot write %s: %s", s->path, strerror(errno));
        remove(s->tmp);
    }
    free(s->tmp);
    return rc;
}

/* Text with &, < and > escaped. */
static void svg_text(FILE *f, const char *t)
{
    for (; *t; t++) {
        if (*t == '&')
            fputs("&amp;", f);
        else if (*t == '<')
            fputs("&lt;", f);
        else if (*t == '>')
            fputs("&gt;", f);
        else
            fputc(*t, f);
    }
}

static void svg_label(FILE *f, double x, double y, const char *anchor, int size, int rotate,
                      const char *t)
{
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\"", x, y, anchor,
            size);
    if (rotate)
        fprintf(f, " transform=\"rotate(%d %.1f %.1f)\"", rotate, x, y);
    fputc('>', f);
    svg_text(f, t);
    fputs("</text>\n", f);
}

/* A "nice" tick step for a range: 1, 2 or 5 times a power of ten. */
static double svg_step(double range, int want)
{
    double raw = range / want, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

/* Okabe & Ito's palette (black last: it reads as an axis; yellow late: it
 * is faint on white). */
static const char *const svg_colors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                         "#E69F00", "#56B4E9", "#F0E442", "#000000"};
#define SVG_N_COLORS  8
#define SVG_N_MARKERS 7 /* coprime with SVG_N_COLORS: colour x marker repeats at 56 */

/* Grey dash patterns for bounds, so that several bounds differ. */
static const char *const svg_bound_dash[] = {"10 5", "3 4", "14 4 3 4"};

static const char *const svg_marker_name[SVG_N_MARKERS] = {
    "circle", "square", "triangle-up", "diamond", "triangle-down", "cross", "plus"};

/* Marker `shape` (0 .. SVG_N_MARKERS-1) at (x, y), classed "marker NAME". */
static void svg_marker(FILE *f, int shape, double x, double y, const char *col)
{
    const double r = 4;
    switch (shape) {
    case 0:
        fprintf(f, "<circle class=\"marker %s\" cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n",
                svg_marker_name[shape], x, y, col);
        break;
    case 1:
        fprintf(f,
                "<rect class=\"marker %s\" x=\"%.1f\" y=\"%.1f\" width=\"6.6\" height=\"6.6\" "
                "fill=\"%s\"/>\n",
                svg_marker_name[shape], x - 3.3, y - 3.3, col);
        break;
    case 2:
    case 4: {
        const double d = shape == 2 ? 1 : -1;
        fprintf(f,
                "<polygon class=\"marker %s\" points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f\" "
                "fill=\"%s\"/>\n",
                svg_marker_name[shape], x, y - d * r * 1.1, x - r, y + d * r * 0.8, x + r,
                y + d * r * 0.8, col);
        break;
    }
    case 3:
        fprintf(f,
                "<polygon class=\"marker %s\" points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f\" "
                "fill=\"%s\"/>\n",
                svg_marker_name[shape], x, y - r * 1.2, x + r, y, x, y + r * 1.2, x - r, y, col);
        break;
    case 5: /* x: stroked, it has no area */
        fprintf(f,
                "<path class=\"marker %s\" d=\"M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f %.1f\" "
                "stroke=\"%s\" stroke-width=\"2.2\" fill=\"none\"/>\n",
                svg_marker_name[shape], x - r, y - r, x + r, y + r, x - r, y + r, x + r, y - r,
                col);
        break;
    default: /* + */
        fprintf(f,
                "<path class=\"marker %s\" d=\"M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f %.1f\" "
                "stroke=\"%s\" stroke-width=\"2.2\" fill=\"none\"/>\n",
                svg_marker_name[shape], x - r, y, x + r, y, x, y - r, x, y + r, col);
        break;
    }
}

static bool svg_pow2(double v)
{
    if (!(v > 0) || !isfinite(v))
        return false;
    int e;
    return frexp(v, &e) == 0.5;
}

bool svg_is_log2(const struct svg_series *s, int n_series, bool use_y)
{
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n_series; i++)
        for (int k = 0; k < s[i].n; k++) {
            const double v = use_y ? s[i].y[k] : s[i].x[k];
            if (!isfinite(s[i].y[k]) || !isfinite(s[i].x[k]))
                continue;
            if (!svg_pow2(v))
                return false;
            lo = fmin(lo, v);
            hi = fmax(hi, v);
        }
    return isfinite(lo) && hi >= 2 * lo;
}

/* One axis: the data range in its own space (log2 of the value on a log2
 * axis) and where it lands on the page. */
struct svg_axis {
    bool log2;
    double lo, hi;  /* in axis space */
    double p0, len; /* page position of lo, and signed length to hi */
};

static double svg_t(const struct svg_axis *a, double v)
{
    return a->log2 ? log2(v) : v;
}

static double svg_px(const struct svg_axis *a, double v)
{
    return a->p0 + (svg_t(a, v) - a->lo) / (a->hi - a->lo) * a->len;
}

static bool svg_usable(const struct svg_axis *a, double v)
{
    return isfinite(v) && (!a->log2 || v > 0);
}

/* Widen [lo, hi] by a margin so that no point sits on the frame. */
static void svg_pad(struct svg_axis *a, double frac)
{
    double r = a->hi - a->lo;
    if (r <= 0)
        r = a->log2 ? 2 : fabs(a->hi) > 0 ? 0.2 * fabs(a->hi) : 2;
    a->lo -= frac * r;
    a->hi += frac * r;
}

/* Tick positions (values, not axis space) into t[max]; returns how many. */
static int svg_ticks(const struct svg_axis *a, int want, double *t, int max)
{
    int n = 0;
    if (a->log2) {
        const double e0 = ceil(a->lo - 1e-9), e1 = floor(a->hi + 1e-9);
        const double stride = fmax(1, ceil((e1 - e0 + 1) / (want + 3)));
        for (double e = e0; e <= e1 && n < max; e += stride)
            t[n++] = pow(2, e);
        if (n >= 2)
            return n;
        /* Less than a doubling shown: plain ticks inside it. */
        struct svg_axis lin = {false, pow(2, a->lo), pow(2, a->hi), 0, 0};
        return svg_ticks(&lin, want, t, max);
    }
    const double st = svg_step(a->hi - a->lo, want);
    for (double v = ceil(a->lo / st) * st; v <= a->hi + st * 1e-6 && n < max; v += st)
        t[n++] = fabs(v) < st * 1e-9 ? 0.0 : round(v / st) * st;
    return n;
}

int svg_line_chart(const char *path, const char *title, const char *xlabel, const char *ylabel,
                   const struct svg_series *s, int n_series, enum svg_scale xscale,
                   enum svg_scale yscale)
{
    struct svg_axis ax = {xscale == SVG_SCALE_LOG2 ||
                              (xscale == SVG_SCALE_AUTO && svg_is_log2(s, n_series, false)),
                          INFINITY, -INFINITY, 0, 0};
    struct svg_axis ay = {yscale == SVG_SCALE_LOG2 ||
                              (yscale == SVG_SCALE_AUTO && svg_is_log2(s, n_series, true)),
                          INFINITY, -INFINITY, 0, 0};
    for (int i = 0; i < n_series; i++)
        for (int k = 0; k < s[i].n; k++) {
            const double x = s[i].x[k], y = s[i].y[k];
            if (!svg_usable(&ax, x) || !svg_usable(&ay, y))
                continue;
            ax.lo = fmin(ax.lo, svg_t(&ax, x));
            ax.hi = fmax(ax.hi, svg_t(&ax, x));
            ay.lo = fmin(ay.lo, svg_t(&ay, y));
            ay.hi = fmax(ay.hi, svg_t(&ay, y));
            const double e[2] = {s[i].ylo ? s[i].ylo[k] : NAN, s[i].yhi ? s[i].yhi[k] : NAN};
            for (int j = 0; j < 2; j++)
                if (svg_usable(&ay, e[j])) {
                    ay.lo = fmin(ay.lo, svg_t(&ay, e[j]));
                    ay.hi = fmax(ay.hi, svg_t(&ay, e[j]));
                }
        }
    if (!isfinite(ax.lo) || !isfinite(ay.lo)) {
        tide_error("plot %s: nothing to draw", path);
        return TIDE_E_INVAL;
    }
    svg_pad(&ax, 0.04);
    svg_pad(&ay, 0.07);
    /* The legend sets the height when it is the taller, and the width when
     * its longest name needs more than SVG_RIGHT: the plot keeps its size,
     * the canvas grows (a cut legend made two sweep points look alike). */
    const int h = SVG_H > SVG_TOP + 18 * n_series + 40 ? SVG_H : SVG_TOP + 18 * n_series + 40;
    const double pw = SVG_W - SVG_LEFT - SVG_RIGHT, ph = h - SVG_TOP - SVG_BOTTOM;
    size_t longest = 0;
    for (int i = 0; i < n_series; i++)
        if (s[i].n > 0 && s[i].name && strlen(s[i].name) > longest)
            longest = strlen(s[i].name);
    const double legend_w = 12 + 34 + SVG_CHAR_W * (double)longest + 10;
    const int w = SVG_LEFT + pw + legend_w > SVG_W ? (int)ceil(SVG_LEFT + pw + legend_w) : SVG_W;
    ax.p0 = SVG_LEFT;
    ax.len = pw;
    ay.p0 = SVG_TOP + ph;
    ay.len = -ph;
    struct svg_file sf;
    int rc = svg_open(&sf, path, w, h);
    if (rc != TIDE_OK)
        return rc;
    FILE *f = sf.f;
    char buf[64];
    double tx[64], ty[64];
    const int ntx = svg_ticks(&ax, 8, tx, 64), nty = svg_ticks(&ay, 6, ty, 64);
    svg_label(f, SVG_LEFT + pw / 2, 24, "middle", 15, 0, title);
    fprintf(f, "<g stroke=\"#e4e4e4\" stroke-width=\"1\">\n");
    for (int i = 0; i < nty; i++)
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", SVG_LEFT,
                svg_px(&ay, ty[i]), SVG_LEFT + pw, svg_px(&ay, ty[i]));
    for (int i = 0; i < ntx; i++)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%.1f\"/>\n", svg_px(&ax, tx[i]),
                SVG_TOP, svg_px(&ax, tx[i]), SVG_TOP + ph);
    fprintf(f, "</g>\n<g class=\"tick-y\">\n");
    for (int i = 0; i < nty; i++) {
        snprintf(buf, sizeof buf, "%g", ty[i]);
        svg_label(f, SVG_LEFT - 6, svg_px(&ay, ty[i]) + 4, "end", 11, 0, buf);
    }
    fprintf(f, "</g>\n<g class=\"tick-x\">\n");
    for (int i = 0; i < ntx; i++) {
        snprintf(buf, sizeof buf, "%g", tx[i]);
        svg_label(f, svg_px(&ax, tx[i]), SVG_TOP + ph + 16, "middle", 11, 0, buf);
    }
    fprintf(f, "</g>\n");
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
            "stroke=\"#333\"/>\n",
            SVG_LEFT, SVG_TOP, pw, ph);
    char lab[320];
    snprintf(lab, sizeof lab, "%s%s", xlabel, ax.log2 ? " (log2 scale)" : "");
    svg_label(f, SVG_LEFT + pw / 2, h - 18, "middle", 12, 0, lab);
    snprintf(lab, sizeof lab, "%s%s", ylabel, ay.log2 ? " (log2 scale)" : "");
    svg_label(f, 20, SVG_TOP + ph / 2, "middle", 12, -90, lab);
    /* Bounds first (under the policies), then each policy: line, error
     * bars, markers. Colours and markers count policies only. */
    int n_bound = 0, n_pol = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n_series; i++) {
            const struct svg_series *q = &s[i];
            if (q->bound != (pass == 0) || q->n <= 0)
                continue;
            const int slot = q->bound ? n_bound++ : n_pol++;
            const char *col = q->bound ? "#666666" : svg_colors[slot % SVG_N_COLORS];
            const int shape = slot % SVG_N_MARKERS;
            const char *dash = q->bound ? svg_bound_dash[slot % 3] : q->dashed ? "6 4" : NULL;
            fprintf(f, "<g class=\"%s\">\n", q->bound ? "bound" : "series");
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"", col,
                    q->bound ? "3" : "2");
            if (dash)
                fprintf(f, " stroke-dasharray=\"%s\"", dash);
            fputs(" points=\"", f);
            int last = -1;
            for (int k = 0; k < q->n; k++)
                if (svg_usable(&ax, q->x[k]) && svg_usable(&ay, q->y[k])) {
                    fprintf(f, "%.1f,%.1f ", svg_px(&ax, q->x[k]), svg_px(&ay, q->y[k]));
                    last = k;
                }
            fputs("\"/>\n", f);
            for (int k = 0; !q->bound && k < q->n; k++) {
                if (!svg_usable(&ax, q->x[k]) || !q->ylo || !q->yhi ||
                    !svg_usable(&ay, q->ylo[k]) || !svg_usable(&ay, q->yhi[k]))
                    continue;
                const double x = svg_px(&ax, q->x[k]), y0 = svg_px(&ay, q->ylo[k]),
                             y1 = svg_px(&ay, q->yhi[k]);
                fprintf(f,
                        "<path class=\"errorbar\" d=\"M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f "
                        "%.1fM%.1f %.1fL%.1f %.1f\" stroke=\"%s\" stroke-width=\"1.2\"/>\n",
                        x, y0, x, y1, x - 4, y0, x + 4, y0, x - 4, y1, x + 4, y1, col);
            }
            for (int k = 0; q->markers && !q->bound && k < q->n; k++)
                if (svg_usable(&ax, q->x[k]) && svg_usable(&ay, q->y[k]))
                    svg_marker(f, shape, svg_px(&ax, q->x[k]), svg_px(&ay, q->y[k]), col);
            if (q->bound && last >= 0) {
                /* Along the line, at a place that differs between bounds
                 * (the ends are where the policies' markers are). */
                static const double at[3] = {0.5, 0.25, 0.75};
                int first = 0;
                while (!svg_usable(&ax, q->x[first]) || !svg_usable(&ay, q->y[first]))
                    first++;
                const double fx = at[slot % 3], x0 = svg_px(&ax, q->x[first]),
                             y0 = svg_px(&ay, q->y[first]), x1 = svg_px(&ax, q->x[last]),
                             y1 = svg_px(&ay, q->y[last]);
                fprintf(f, "<g fill=\"#444\">\n");
                svg_label(f, x0 + fx * (x1 - x0), y0 + fx * (y1 - y0) + (slot % 2 ? 14 : -6),
                          "middle", 10, 0, q->name);
                fprintf(f, "</g>\n");
            }
            /* Legend, in the order given. */
            int row = 0; /* series without points have no legend row */
            for (int j = 0; j < i; j++)
                row += s[j].n > 0;
            const double ly = SVG_TOP + 10 + 18 * row, lx = SVG_LEFT + pw + 12;
            fprintf(f,
                    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                    "stroke-width=\"%s\"",
                    lx, ly, lx + 28, ly, col, q->bound ? "3" : "2");
            if (dash)
                fprintf(f, " stroke-dasharray=\"%s\"", dash);
            fputs("/>\n", f);
            if (q->markers && !q->bound)
                svg_marker(f, shape, lx + 14, ly, col);
            svg_label(f, lx + 34, ly + 4, "start", 11, 0, q->name);
            fputs("</g>\n", f);
        }
    return svg_close(&sf);
}

/* A tick spacing of 1, 2 or 5 times a power of ten cells that puts ticks
 * at least min_px apart for cells of cell_px. */
static int svg_heat_step(int n, double cell_px, double min_px)
{
    static const int m[3] = {1, 2, 5};
    for (int p = 1; p < 1000000; p *= 10)
        for (int k = 0; k < 3; k++)
            if (m[k] * p * cell_px >= min_px || m[k] * p >= n)
                return m[k] * p;
    return n;
}

int svg_heatmap(const char *path, const char *title, const char *xlabel, const char *row_label,
                const double *v, int rows, int cols, const int *col_marks, int n_marks)
{
    if (rows < 1 || cols < 1) {
        tide_error("plot %s: nothing to draw", path);
        return TIDE_E_INVAL;
    }
    double vmax = 0;
    for (size_t i = 0; i < (size_t)rows * (size_t)cols; i++)
        vmax = fmax(vmax, v[i]);
    const double cw = fmax(1.0, fmin(12.0, 900.0 / cols)), ch = fmax(1.0, fmin(12.0, 600.0 / rows));
    const int left = 70, top = 40, w = (int)(left + cw * cols + 90),
              h = (int)(top + ch * rows + 50);
    struct svg_file sf;
    int rc = svg_open(&sf, path, w, h);
    if (rc != TIDE_OK)
        return rc;
    FILE *f = sf.f;
    svg_label(f, w / 2.0, 24, "middle", 15, 0, title);
    fprintf(f, "<g shape-rendering=\"crispEdges\">\n");
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            double x = v[(size_t)r * cols + c];
            if (x <= 0 || vmax <= 0)
                continue;
            /* Square-root scale from light yellow to dark blue. */
            double t = sqrt(x / vmax);
            int R = (int)(255 - t * (255 - 8)), G = (int)(247 - t * (247 - 48)),
                B = (int)(188 - t * (188 - 107));
            fprintf(f,
                    "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\" "
                    "fill=\"#%02x%02x%02x\"/>\n",
                    left + c * cw, top + r * ch, cw, ch, R, G, B);
        }
    fprintf(f, "</g>\n");
    for (int i = 0; i < n_marks; i++)
        fprintf(f,
                "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#c00\" "
                "stroke-width=\"0.6\"/>\n",
                left + col_marks[i] * cw, top, left + col_marks[i] * cw, top + ch * rows);
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"%.2f\" height=\"%.2f\" fill=\"none\" "
            "stroke=\"#333\"/>\n",
            left, top, cw * cols, ch * rows);
    svg_label(f, left + cw * cols / 2, top + ch * rows + 32, "middle", 12, 0, xlabel);
    svg_label(f, 24, top + ch * rows / 2, "middle", 12, -90, row_label);
    char buf[64];
    /* Ticks at a whole-number spacing that leaves room for the labels:
     * column (step) indices below, row indices on the left. */
    const int xs = svg_heat_step(cols, cw, 34), ys = svg_heat_step(rows, ch, 14);
    fprintf(f, "<g class=\"tick-x\">\n");
    for (int c = 0; c < cols; c += xs) {
        const double x = left + (c + 0.5) * cw, y = top + ch * rows;
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"#333\"/>\n", x,
                y, x, y + 4);
        snprintf(buf, sizeof buf, "%d", c);
        svg_label(f, x, y + 15, "middle", 9, 0, buf);
    }
    fprintf(f, "</g>\n<g class=\"tick-y\">\n");
    for (int r = 0; r < rows; r += ys) {
        const double y = top + (r + 0.5) * ch;
        fprintf(f, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%d\" y2=\"%.2f\" stroke=\"#333\"/>\n",
                left - 4, y, left, y);
        snprintf(buf, sizeof buf, "%d", r);
        svg_label(f, left - 6, y + 3, "end", 9, 0, buf);
    }
    fprintf(f, "</g>\n");
    /* Legend: five swatches of the scale. */
    for (int i = 0; i <= 4; i++) {
        double t = i / 4.0;
        int R = (int)(255 - t * (255 - 8)), G = (int)(247 - t * (247 - 48)),
            B = (int)(188 - t * (188 - 107));
        double y = top + 18.0 * i;
        fprintf(f,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"#%02x%02x%02x\" "
                "stroke=\"#999\"/>\n",
                left + cw * cols + 12, y, R, G, B);
        snprintf(buf, sizeof buf, "%.0f", i ? t * t * vmax : fmin(1.0, vmax));
        svg_label(f, left + cw * cols + 32, y + 11, "start", 10, 0, buf);
    }
    return svg_close(&sf);
}
