/* SVG line charts and heat maps (svgplot.h). */
#include <errno.h>
#include <math.h>
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

static const char *const svg_colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

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

int svg_line_chart(const char *path, const char *title, const char *xlabel, const char *ylabel,
                   const struct svg_series *s, int n_series, bool log_x)
{
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int i = 0; i < n_series; i++)
        for (int k = 0; k < s[i].n; k++) {
            double x = s[i].x[k], y = s[i].y[k];
            if (!isfinite(y) || !isfinite(x) || (log_x && x <= 0))
                continue;
            x = log_x ? log2(x) : x;
            x0 = fmin(x0, x);
            x1 = fmax(x1, x);
            y0 = fmin(y0, y);
            y1 = fmax(y1, y);
        }
    if (!isfinite(x0) || !isfinite(y0)) {
        tide_error("plot %s: nothing to draw", path);
        return TIDE_E_INVAL;
    }
    if (x1 == x0)
        x1 = x0 + 1;
    /* y from a rounded floor (0 when close) to a rounded ceiling. */
    double ys = svg_step(y1 - y0 > 0 ? y1 - y0 : fabs(y1) + 1, 6);
    y0 = y0 > 0 && y0 < 0.35 * y1 ? 0 : floor(y0 / ys) * ys;
    y1 = ceil(y1 / ys) * ys;
    if (y1 <= y0)
        y1 = y0 + ys;
    ys = svg_step(y1 - y0, 6);
    struct svg_file sf;
    int rc = svg_open(&sf, path, SVG_W, SVG_H);
    if (rc != TIDE_OK)
        return rc;
    FILE *f = sf.f;
    const double pw = SVG_W - SVG_LEFT - SVG_RIGHT, ph = SVG_H - SVG_TOP - SVG_BOTTOM;
#define SX(v) (SVG_LEFT + ((log_x ? log2(v) : (v)) - x0) / (x1 - x0) * pw)
#define SY(v) (SVG_TOP + ph - ((v)-y0) / (y1 - y0) * ph)
    svg_label(f, SVG_LEFT + pw / 2, 24, "middle", 15, 0, title);
    fprintf(f, "<g stroke=\"#ddd\" stroke-width=\"1\">\n");
    char buf[64];
    for (double y = y0; y <= y1 + ys * 1e-6; y += ys)
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", SVG_LEFT, SY(y),
                SVG_LEFT + pw, SY(y));
    fprintf(f, "</g>\n");
    for (double y = y0; y <= y1 + ys * 1e-6; y += ys) {
        snprintf(buf, sizeof buf, "%g", fabs(y) < ys * 1e-9 ? 0.0 : y);
        svg_label(f, SVG_LEFT - 6, SY(y) + 4, "end", 11, 0, buf);
    }
    if (log_x) {
        for (double e = ceil(x0); e <= x1 + 1e-9; e++) {
            double v = pow(2, e);
            snprintf(buf, sizeof buf, "%g", v);
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n",
                    SX(v), (double)SVG_TOP, SX(v), SVG_TOP + ph);
            svg_label(f, SX(v), SVG_TOP + ph + 16, "middle", 11, 0, buf);
        }
    } else {
        double xs = svg_step(x1 - x0, 8);
        for (double x = ceil(x0 / xs) * xs; x <= x1 + xs * 1e-6; x += xs) {
            snprintf(buf, sizeof buf, "%g", x);
            svg_label(f, SX(x), SVG_TOP + ph + 16, "middle", 11, 0, buf);
        }
    }
    fprintf(f,
            "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
            "stroke=\"#333\"/>\n",
            SVG_LEFT, SVG_TOP, pw, ph);
    svg_label(f, SVG_LEFT + pw / 2, SVG_H - 18, "middle", 12, 0, xlabel);
    svg_label(f, 20, SVG_TOP + ph / 2, "middle", 12, -90, ylabel);
    for (int i = 0; i < n_series; i++) {
        const char *col = svg_colors[i % (int)(sizeof svg_colors / sizeof svg_colors[0])];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", col,
                s[i].dashed ? " stroke-dasharray=\"6 4\"" : "");
        for (int k = 0; k < s[i].n; k++)
            if (isfinite(s[i].y[k]) && (!log_x || s[i].x[k] > 0))
                fprintf(f, "%.1f,%.1f ", SX(s[i].x[k]), SY(s[i].y[k]));
        fprintf(f, "\"/>\n");
        for (int k = 0; s[i].markers && k < s[i].n; k++)
            if (isfinite(s[i].y[k]) && (!log_x || s[i].x[k] > 0))
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", SX(s[i].x[k]),
                        SY(s[i].y[k]), col);
        double ly = SVG_TOP + 10 + 20 * i;
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"2\"%s/>\n",
                SVG_LEFT + pw + 12, ly, SVG_LEFT + pw + 40, ly, col,
                s[i].dashed ? " stroke-dasharray=\"6 4\"" : "");
        svg_label(f, SVG_LEFT + pw + 46, ly + 4, "start", 11, 0, s[i].name);
    }
#undef SX
#undef SY
    return svg_close(&sf);
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
    svg_label(f, left + cw * cols / 2, top + ch * rows + 30, "middle", 12, 0, xlabel);
    svg_label(f, 30, top + ch * rows / 2, "middle", 12, -90, row_label);
    char buf[64];
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
