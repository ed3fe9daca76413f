/* Plain-C reference of the backend ops in tide/backend.h, for the
 * conformance test. Inputs are packed host arrays of f32 values (bf16 inputs
 * already hold bf16 values). Where the contract allows rounding error, the
 * reference computes in double and also returns, per output element, a bound
 * on the error an implementation following the contract can make (`err`):
 * f32 accumulation in any order, f32 elementwise arithmetic, and one bf16
 * rounding where the contract has one. Where the contract fixes the f32
 * arithmetic (rope angles, router selection, moe_combine order), the
 * reference does exactly that arithmetic. */
#ifndef TIDE_TEST_REF_OPS_H
#define TIDE_TEST_REF_OPS_H

#include <stdbool.h>
#include <stdint.h>

/* Unit roundoff of f32 (2^-24). */
#define REF_U (1.0 / 16777216.0)

/* y[T,N] = x[T,K] W[N,K]^T. */
void ref_matmul(const float *x, const float *w, int T, int N, int K, double *y, double *err);

/* RMSNorm over runs of `group` columns of x[T,C], weight w[group]. */
void ref_rmsnorm(const float *x, const float *w, int T, int C, int group, float eps, double *y,
                 double *err);

/* Rotate-half RoPE in place on x[T,C], in the contract's f32 arithmetic. */
void ref_rope(float *x, int T, int C, int head_dim, int rot_dim, float theta, int64_t pos0);

/* Block-causal GQA attention. q[n, nh*hd], k/v[pos0+n, nkv*hd], out[n, nh*hd]. */
void ref_attention(const float *q, const float *k, const float *v, int64_t pos0, int n, int nh,
                   int nkv, int hd, int block, float scale, double *out, double *err);

/* out = silu(g) * u before the bf16 rounding, n elements. */
void ref_swiglu(const float *g, const float *u, int n, double *y, double *err);

/* The router, in the contract's f32 arithmetic. bias may be NULL. */
void ref_router(const float *logits, const float *bias, int n, int E, int n_group, int topk_group,
                int top_k, bool norm_topk, float scale, int32_t *ids, float *w);

/* out[dst_rows[i]] = down(bf16(silu(gate x) * (up x))) for x = x_all[rows[i]]: y[n,H] holds
 * row i's result. gate/up [I,H], down [H,I]. */
void ref_expert_ffn(const float *x_all, const int32_t *rows, int n, const float *gate,
                    const float *up, const float *down, int H, int I, double *y, double *err);

/* y[t] = sum_j w[t*k+j] * parts[t*k+j] in f32, j = 0..k-1. */
void ref_moe_combine(const float *parts, const float *w, int T, int k, int H, double *y,
                     double *err);

/* The f32 value `v` rounded to bf16 (nearest even), as f32. */
float ref_bf16(double v);

#endif
