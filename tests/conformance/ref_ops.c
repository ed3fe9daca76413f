#include "ref_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tide/tensor.h"

float ref_bf16(double v)
{
    return tide_round_bf16((float)v);
}

/* Dot product in double, and the sum of |terms| for its error bound. */
static double ref_dot(const float *a, const float *b, int n, double *abs_sum)
{
    double s = 0.0, m = 0.0;
    for (int i = 0; i < n; i++) {
        double t = (double)a[i] * b[i];
        s += t;
        m += fabs(t);
    }
    *abs_sum = m;
    return s;
}

/* Bound of a sum of n exact terms accumulated in f32 in any order, plus the final rounding. */
static double ref_sum_err(int n, double abs_sum)
{
    return (n + 2) * REF_U * abs_sum * 1.01;
}

void ref_matmul(const float *x, const float *w, int T, int N, int K, double *y, double *err)
{
    for (int t = 0; t < T; t++)
        for (int j = 0; j < N; j++) {
            double m;
            y[t * N + j] = ref_dot(x + (size_t)t * K, w + (size_t)j * K, K, &m);
            err[t * N + j] = ref_sum_err(K, m);
        }
}

void ref_rmsnorm(const float *x, const float *w, int T, int C, int group, float eps, double *y,
                 double *err)
{
    for (int t = 0; t < T; t++)
        for (int g0 = 0; g0 < C; g0 += group) {
            const float *xr = x + (size_t)t * C + g0;
            double ss = 0.0;
            for (int j = 0; j < group; j++)
                ss += (double)xr[j] * xr[j];
            double r = 1.0 / sqrt(ss / group + eps);
            for (int j = 0; j < group; j++) {
                double v = xr[j] * r * w[j];
                y[(size_t)t * C + g0 + j] = v;
                /* f32 sum of squares (all positive: gamma_group, halved by sqrt) and ~6
                 * rounded f32 operations. */
                err[(size_t)t * C + g0 + j] = (group + 8) * REF_U * fabs(v);
            }
        }
}

void ref_rope(float *x, int T, int C, int head_dim, int rot_dim, float theta, int64_t pos0)
{
    const int half = rot_dim / 2;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < half; j++) {
            float inv = (float)pow((double)theta, -2.0 * j / rot_dim);
            float angle = (float)(pos0 + t) * inv;
            float c = (float)cos((double)angle), s = (float)sin((double)angle);
            for (int h = 0; h < C / head_dim; h++) {
                float *p = x + (size_t)t * C + (size_t)h * head_dim;
                float x1 = p[j], x2 = p[j + half];
                p[j] = x1 * c - x2 * s;
                p[j + half] = x2 * c + x1 * s;
            }
        }
}

void ref_attention(const float *q, const float *k, const float *v, int64_t pos0, int n, int nh,
                   int nkv, int hd, int block, float scale, double *out, double *err)
{
    const int64_t total = pos0 + n;
    const int qc = nh * hd, kc = nkv * hd, group = nh / nkv;
    double *s = malloc(sizeof *s * (size_t)total);
    for (int i = 0; i < n; i++)
        for (int h = 0; h < nh; h++) {
            const int64_t p = pos0 + i;
            int64_t L = (p / block + 1) * block;
            L = L < total ? L : total;
            const float *qi = q + (size_t)i * qc + (size_t)h * hd;
            const int kvo = (h / group) * hd;
            double mx = -INFINITY, es = 0.0;
            for (int64_t j = 0; j < L; j++) {
                double m;
                s[j] = scale * ref_dot(qi, k + (size_t)j * kc + kvo, hd, &m);
                /* f32 dot product, then the scale multiply. */
                double e = ref_sum_err(hd, m) * fabs(scale) + 2 * REF_U * fabs(s[j]);
                es = e > es ? e : es;
                mx = s[j] > mx ? s[j] : mx;
            }
            double sum = 0.0;
            for (int64_t j = 0; j < L; j++) {
                s[j] = exp(s[j] - mx);
                sum += s[j];
            }
            for (int d = 0; d < hd; d++) {
                double o = 0.0, a = 0.0;
                for (int64_t j = 0; j < L; j++) {
                    double pv = s[j] / sum * v[(size_t)j * kc + kvo + d];
                    o += pv;
                    a += fabs(pv);
                }
                out[(size_t)i * qc + (size_t)h * hd + d] = o;
                /* Score errors move each probability by at most ~2*es relatively; the
                 * softmax sum and the weighted sum add f32 accumulation over L terms. */
                err[(size_t)i * qc + (size_t)h * hd + d] = a * (2.02 * es + (2.0 * L + 16) * REF_U);
            }
        }
    free(s);
}

/* silu(g) * u in double, and a bound for its f32 evaluation from inputs with
 * absolute errors eg and eu. */
static double ref_silu_mul(double g, double u, double eg, double eu, double *err)
{
    double sg = g / (1.0 + exp(-g)), v = sg * u;
    /* |silu'| <= 1.1; about 8 rounded f32 operations (exp, add, div, mul). */
    *err = 1.1 * eg * (fabs(u) + eu) + (fabs(sg) + 1.1 * eg) * eu + 8 * REF_U * fabs(v);
    return v;
}

void ref_swiglu(const float *g, const float *u, int n, double *y, double *err)
{
    for (int i = 0; i < n; i++)
        y[i] = ref_silu_mul(g[i], u[i], 0.0, 0.0, &err[i]);
}

/* Index of the largest v[i] not taken; ties go to the lowest index. */
static int ref_argmax(const float *v, const unsigned char *taken, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!taken[i] && (best < 0 || v[i] > v[best]))
            best = i;
    return best;
}

void ref_router(const float *logits, const float *bias, int n, int E, int n_group, int topk_group,
                int top_k, bool norm_topk, float scale, int32_t *ids, float *w)
{
    float *s = malloc(sizeof *s * (size_t)E), *sel = malloc(sizeof *sel * (size_t)E);
    float *gs = malloc(sizeof *gs * (size_t)n_group);
    unsigned char *taken = malloc((size_t)E), *gt = malloc((size_t)n_group);
    const int gsz = E / n_group;
    for (int t = 0; t < n; t++) {
        for (int e = 0; e < E; e++) {
            s[e] = 1.0f / (1.0f + expf(-logits[(size_t)t * E + e]));
            sel[e] = bias ? s[e] + bias[e] : s[e];
        }
        if (n_group > 1) {
            for (int g = 0; g < n_group; g++) {
                /* Sum of the two largest: take the max twice. */
                memset(taken, 0, (size_t)gsz);
                int a = ref_argmax(sel + g * gsz, taken, gsz), b = -1;
                if (a >= 0) {
                    taken[a] = 1;
                    b = ref_argmax(sel + g * gsz, taken, gsz);
                }
                gs[g] = sel[g * gsz + (a >= 0 ? a : 0)] + (b >= 0 ? sel[g * gsz + b] : 0.0f);
                gt[g] = 0;
            }
            for (int i = 0; i < topk_group; i++)
                gt[ref_argmax(gs, gt, n_group)] = 1;
            for (int e = 0; e < E; e++)
                if (!gt[e / gsz])
                    sel[e] = -INFINITY;
        }
        memset(taken, 0, (size_t)E);
        float sum = 0.0f;
        for (int j = 0; j < top_k; j++) {
            int e = ref_argmax(sel, taken, E);
            taken[e] = 1;
            ids[t * top_k + j] = e;
            w[t * top_k + j] = s[e];
            sum += s[e];
        }
        for (int j = 0; j < top_k; j++) {
            if (norm_topk)
                w[t * top_k + j] /= sum + 1e-20f;
            w[t * top_k + j] *= scale;
        }
    }
    free(s);
    free(sel);
    free(gs);
    free(taken);
    free(gt);
}

void ref_expert_ffn(const float *x_all, const int32_t *rows, int n, const float *gate,
                    const float *up, const float *down, int H, int I, double *y, double *err)
{
    float *hm = malloc(sizeof *hm * (size_t)I);
    double *hspread = malloc(sizeof *hspread * (size_t)I);
    for (int i = 0; i < n; i++) {
        const float *x = x_all + (size_t)rows[i] * H;
        for (int j = 0; j < I; j++) {
            double mg, mu, ev;
            double g = ref_dot(x, gate + (size_t)j * H, H, &mg);
            double u = ref_dot(x, up + (size_t)j * H, H, &mu);
            double v = ref_silu_mul(g, u, ref_sum_err(H, mg), ref_sum_err(H, mu), &ev);
            /* The bf16 value the implementation holds lies between these two. */
            float lo = ref_bf16(v - ev), hi = ref_bf16(v + ev);
            hm[j] = ref_bf16(v);
            hspread[j] = fmax(fabs((double)hm[j] - lo), fabs((double)hi - hm[j]));
        }
        for (int c = 0; c < H; c++) {
            double m;
            const float *wd = down + (size_t)c * I;
            y[(size_t)i * H + c] = ref_dot(hm, wd, I, &m);
            double spread = 0.0;
            for (int j = 0; j < I; j++)
                spread += hspread[j] * fabs(wd[j]);
            err[(size_t)i * H + c] = ref_sum_err(I, m + spread) + spread;
        }
    }
    free(hm);
    free(hspread);
}

void ref_moe_combine(const float *parts, const float *w, int T, int k, int H, double *y,
                     double *err)
{
    for (int t = 0; t < T; t++)
        for (int c = 0; c < H; c++) {
            float acc = 0.0f;
            double a = 0.0;
            for (int j = 0; j < k; j++) {
                float term = w[t * k + j] * parts[((size_t)t * k + j) * H + c];
                acc += term;
                a += fabs((double)term);
            }
            y[(size_t)t * H + c] = acc;
            /* Exact for the contract's order without FMA contraction; a device
             * compiler may fuse the multiply-add, which moves each step by 1 ulp. */
            err[(size_t)t * H + c] = 2 * k * REF_U * a;
        }
}
