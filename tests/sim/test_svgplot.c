/* The SVG writer of tide sim --plot and tide bench plot (core/sim/svgplot.h):
 * log2 axes for powers of two, a y range from the data (not forced to 0),
 * bounds drawn apart from the policies, colour x marker pairs that do not
 * repeat, error bars, and tick labels on heat maps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "svgplot.h"
#include "tide/status.h"

static char g_dir[] = "/tmp/tide-svgplot-XXXXXX";

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b)
        b[n] = 0;
    fclose(f);
    return b;
}

/* The text of the <g class="CLS"> group that starts at or after from. */
static char *group(const char *svg, const char *cls, const char **from)
{
    char open[64];
    snprintf(open, sizeof open, "<g class=\"%s\">", cls);
    const char *a = strstr(*from ? *from : svg, open);
    if (!a)
        return NULL;
    const char *b = strstr(a, "</g>");
    *from = b;
    size_t n = (size_t)(b - a);
    char *g = malloc(n + 1);
    memcpy(g, a, n);
    g[n] = 0;
    return g;
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; p && (p = strstr(p, needle)); p++)
        n++;
    return n;
}

static void test_log2_x(void)
{
    const double x[6] = {1, 2, 4, 8, 16, 32}, y[6] = {5.5, 5.2, 5.0, 5.1, 5.3, 5.6};
    const struct svg_series s = {.name = "policy-tide", .x = x, .y = y, .n = 6, .markers = true};
    CHECK(svg_is_log2(&s, 1, false));
    CHECK(!svg_is_log2(&s, 1, true));
    char path[256];
    snprintf(path, sizeof path, "%s/log.svg", g_dir);
    CHECK_EQ_INT(svg_line_chart(path, "t", "interval", "ms", &s, 1, SVG_SCALE_AUTO, SVG_SCALE_AUTO),
                 TIDE_OK);
    char *svg = slurp(path);
    const char *at = NULL;
    char *tx = group(svg, "tick-x", &at);
    /* Every power of two, in order, and nothing between them. */
    const char *p = tx;
    static const char *const want[] = {">1<", ">2<", ">4<", ">8<", ">16<", ">32<"};
    for (int i = 0; i < 6; i++) {
        p = p ? strstr(p, want[i]) : NULL;
        CHECK(p != NULL);
    }
    CHECK_EQ_INT(count(tx, "<text"), 6);
    CHECK_CONTAINS(svg, "interval (log2 scale)");
    /* y is not forced to 0: the data lie in 5.0 .. 5.6. */
    at = NULL;
    char *ty = group(svg, "tick-y", &at);
    CHECK(ty && !strstr(ty, ">0<") && !strstr(ty, ">1<"));
    CHECK_CONTAINS(ty, ">5.2<");
    free(tx);
    free(ty);
    free(svg);

    /* 1..5 is not all powers of two: linear. */
    const double x2[5] = {1, 2, 3, 4, 5};
    const struct svg_series s2 = {.name = "a", .x = x2, .y = y, .n = 5};
    CHECK(!svg_is_log2(&s2, 1, false));
    CHECK_EQ_INT(
        svg_line_chart(path, "t", "interval", "ms", &s2, 1, SVG_SCALE_AUTO, SVG_SCALE_AUTO),
        TIDE_OK);
    svg = slurp(path);
    CHECK(svg && !strstr(svg, "log2 scale"));
    free(svg);
}

static void test_bound_and_errorbars(void)
{
    const double x[3] = {4, 8, 16}, y[3] = {10, 8, 7}, lo[3] = {9.5, 7.9, 6.0},
                 hi[3] = {10.4, 8.2, 7.5}, by[3] = {5, 4, 3};
    const struct svg_series s[2] = {
        {.name = "policy-lru", .x = x, .y = y, .n = 3, .markers = true, .ylo = lo, .yhi = hi},
        {.name = "oracle (bound)", .x = x, .y = by, .n = 3, .bound = true},
    };
    char path[256];
    snprintf(path, sizeof path, "%s/bound.svg", g_dir);
    CHECK_EQ_INT(svg_line_chart(path, "t", "budget", "s", s, 2, SVG_SCALE_AUTO, SVG_SCALE_LINEAR),
                 TIDE_OK);
    char *svg = slurp(path);
    const char *at = NULL;
    char *b = group(svg, "bound", &at);
    CHECK(b != NULL);
    CHECK_CONTAINS(b, "stroke=\"#666666\" stroke-width=\"3\" stroke-dasharray=");
    CHECK_CONTAINS(b, ">oracle (bound)</text>");
    CHECK(b && !strstr(b, "class=\"marker"));
    at = NULL;
    char *p = group(svg, "series", &at);
    CHECK(p && !strstr(p, "#666666") && !strstr(p, "stroke-dasharray"));
    CHECK_EQ_INT(count(p, "class=\"errorbar\""), 3);
    /* The error bars widen the y range: 6.0 is inside it. */
    CHECK(svg && strstr(svg, ">6<"));
    free(b);
    free(p);
    free(svg);
    /* Without ylo/yhi, no bars. */
    const struct svg_series one = {.name = "a", .x = x, .y = y, .n = 3, .markers = true};
    CHECK_EQ_INT(svg_line_chart(path, "t", "b", "s", &one, 1, SVG_SCALE_AUTO, SVG_SCALE_AUTO),
                 TIDE_OK);
    svg = slurp(path);
    CHECK_EQ_INT(count(svg, "errorbar"), 0);
    free(svg);
}

/* 24 series: no two share both colour and marker shape. */
static void test_distinct_series(void)
{
    enum { N = 24 };
    static double x[2] = {1, 2}, y[N][2];
    static char names[N][16];
    struct svg_series s[N];
    for (int i = 0; i < N; i++) {
        y[i][0] = i;
        y[i][1] = i + 1;
        snprintf(names[i], sizeof names[i], "p%d", i);
        s[i] = (struct svg_series){.name = names[i], .x = x, .y = y[i], .n = 2, .markers = true};
    }
    char path[256];
    snprintf(path, sizeof path, "%s/many.svg", g_dir);
    CHECK_EQ_INT(svg_line_chart(path, "t", "x", "y", s, N, SVG_SCALE_AUTO, SVG_SCALE_AUTO),
                 TIDE_OK);
    char *svg = slurp(path);
    char sig[N][64];
    const char *at = NULL;
    for (int i = 0; i < N; i++) {
        char *g = group(svg, "series", &at);
        sig[i][0] = 0;
        if (!g)
            break;
        const char *c = strstr(g, "stroke=\""), *m = strstr(g, "class=\"marker ");
        if (c && m)
            snprintf(sig[i], sizeof sig[i], "%.16s|%.*s", c + 8, (int)strcspn(m + 14, "\""),
                     m + 14);
        free(g);
    }
    int dup = 0;
    for (int i = 0; i < N; i++) {
        CHECK(sig[i][0] != 0);
        for (int j = 0; j < i; j++)
            dup += !strcmp(sig[i], sig[j]);
    }
    CHECK_EQ_INT(dup, 0);
    free(svg);
}

/* Issue 38: long series names (sweep points, batch) were cut at the canvas
 * edge, so two thresholds looked alike. Every legend label must end inside
 * the canvas, reckoned at 0.6 em a character (DejaVu Sans averages 0.55). */
static void test_legend_inside_canvas(void)
{
    static const double x[3] = {4, 8, 16}, y[2][3] = {{1, 2, 3}, {2, 3, 4}}, yb[2] = {5, 5},
                        xb[2] = {4, 16};
    const struct svg_series s[3] = {
        {.name = "policy-tide generation.threshold=0.8 batch 4 interval 2",
         .x = x,
         .y = y[0],
         .n = 3,
         .markers = true},
        {.name = "policy-tide generation.threshold=0.95 batch 4 interval 2",
         .x = x,
         .y = y[1],
         .n = 3,
         .markers = true},
        {.name = "no offload generation.threshold=0.95 batch 4",
         .x = xb,
         .y = yb,
         .n = 2,
         .bound = true},
    };
    char path[256];
    snprintf(path, sizeof path, "%s/legend.svg", g_dir);
    CHECK_EQ_INT(svg_line_chart(path, "t", "x", "y", s, 3, SVG_SCALE_AUTO, SVG_SCALE_AUTO),
                 TIDE_OK);
    char *svg = slurp(path);
    CHECK(svg != NULL);
    const char *wa = svg ? strstr(svg, "<svg ") : NULL;
    const double width = wa && strstr(wa, "width=\"") ? atof(strstr(wa, "width=\"") + 7) : 0;
    CHECK(width > 0);
    int labels = 0;
    for (const char *p = svg; p && (p = strstr(p, "text-anchor=\"start\" font-size=\"11\"")); p++) {
        const char *t = p;
        while (t > svg && strncmp(t, "<text x=\"", 9))
            t--;
        const double lx = atof(t + 9);
        const char *a = strchr(p, '>') + 1, *b = strstr(a, "</text>");
        const double end = lx + 0.6 * 11 * (double)(b - a);
        if (end > width)
            fprintf(stderr, "legend '%.*s' ends at %.0f, the canvas at %.0f\n", (int)(b - a), a,
                    end, width);
        CHECK(end <= width);
        labels++;
    }
    CHECK_EQ_INT(labels, 3);
    free(svg);
}

static void test_heatmap_ticks(void)
{
    enum { R = 40, C = 120 };
    static double v[R * C];
    for (int i = 0; i < R * C; i++)
        v[i] = i % 7;
    const int marks[1] = {60};
    char path[256];
    snprintf(path, sizeof path, "%s/heat.svg", g_dir);
    CHECK_EQ_INT(svg_heatmap(path, "t", "steps", "experts", v, R, C, marks, 1), TIDE_OK);
    char *svg = slurp(path);
    const char *at = NULL;
    char *tx = group(svg, "tick-x", &at);
    at = NULL;
    char *ty = group(svg, "tick-y", &at);
    CHECK(tx && ty);
    CHECK_CONTAINS(tx, ">0<");
    CHECK(count(tx, "<text") >= 4 && count(tx, "<text") <= 30);
    CHECK(count(ty, "<text") >= 3 && count(ty, "<text") <= 40);
    CHECK_CONTAINS(ty, ">0<");
    free(tx);
    free(ty);
    free(svg);
}

static void test_nothing_to_draw(void)
{
    const double x[1] = {1}, y[1] = {NAN};
    const struct svg_series s = {.name = "a", .x = x, .y = y, .n = 1};
    char path[256];
    snprintf(path, sizeof path, "%s/none.svg", g_dir);
    CHECK_EQ_INT(svg_line_chart(path, "t", "x", "y", &s, 1, SVG_SCALE_AUTO, SVG_SCALE_AUTO),
                 TIDE_E_INVAL);
    CHECK(access(path, F_OK) != 0);
}

int main(void)
{
    if (!mkdtemp(g_dir))
        return 1;
    TEST_RUN(test_log2_x);
    TEST_RUN(test_bound_and_errorbars);
    TEST_RUN(test_distinct_series);
    TEST_RUN(test_legend_inside_canvas);
    TEST_RUN(test_heatmap_ticks);
    TEST_RUN(test_nothing_to_draw);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    TEST_DONE();
}
