/* model-common: a model's expected tensor list, as the shared helpers see it. */
#ifndef MODEL_COMMON_SPEC_H
#define MODEL_COMMON_SPEC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tide/quant.h"
#include "tide/safetensors.h"
#include "tide/tensor.h"

#define MC_NAME_MAX 128

/* The i-th expected tensor (0 <= i < count): its name, dtype and shape;
 * returns the number of dims. ctx is the model's validated config. */
typedef int (*mc_spec_fn)(const void *ctx, int i, char name[MC_NAME_MAX], enum tide_dtype *dtype,
                          int64_t shape[TIDE_MAX_DIMS]);

/* shape = {a}: 1 dim. */
static inline int mc_spec1(int64_t shape[TIDE_MAX_DIMS], int64_t a)
{
    shape[0] = a;
    return 1;
}

/* shape = {a, b}: 2 dims. */
static inline int mc_spec2(int64_t shape[TIDE_MAX_DIMS], int64_t a, int64_t b)
{
    shape[0] = a;
    shape[1] = b;
    return 2;
}

/* The j-th (0..2) tensor of a SwiGLU MLP of width I over hidden H named
 * <prefix>.<part>.{gate,up,down}_proj.weight: gate and up [I, H], down [H, I]. */
static inline int mc_spec_swiglu(const char *prefix, const char *part, int j, int64_t I, int64_t H,
                                 char *name, size_t len, int64_t shape[TIDE_MAX_DIMS])
{
    static const char *proj[] = {"gate_proj", "up_proj", "down_proj"};
    snprintf(name, len, "%s.%s.%s.weight", prefix, part, proj[j]);
    return j < 2 ? mc_spec2(shape, I, H) : mc_spec2(shape, H, I);
}

/* The j-th (0 .. 3 n_experts - 1) routed-expert tensor of a layer:
 * <prefix>.mlp.experts.<j/3>.{gate,up,down}_proj.weight, width I over H (the
 * names mc_register_experts checks). */
static inline int mc_spec_expert(const char *prefix, int j, int64_t I, int64_t H, char *name,
                                 size_t len, int64_t shape[TIDE_MAX_DIMS])
{
    static const char *proj[] = {"gate_proj", "up_proj", "down_proj"};
    snprintf(name, len, "%s.mlp.experts.%d.%s.weight", prefix, j / 3, proj[j % 3]);
    return j % 3 < 2 ? mc_spec2(shape, I, H) : mc_spec2(shape, H, I);
}

/* Tensors per routed expert in the list: 3 (bf16), or 6 when quantized (the
 * three values, then the three scales). */
static inline int mc_expert_tensors(int qfmt)
{
    return qfmt == TIDE_QFMT_NONE ? 3 : 6;
}

/* The j-th (0 .. mc_expert_tensors(qfmt) n_experts - 1) routed-expert tensor
 * of a layer in format qfmt with block `block`: its name, dtype and stored
 * shape (tide/quant.h). */
static inline int mc_spec_expert_q(const char *prefix, int j, int64_t I, int64_t H, int qfmt,
                                   const int block[2], char *name, size_t len, enum tide_dtype *dt,
                                   int64_t shape[TIDE_MAX_DIMS])
{
    if (qfmt == TIDE_QFMT_NONE) {
        *dt = TIDE_DTYPE_BF16;
        return mc_spec_expert(prefix, j, I, H, name, len, shape);
    }
    static const char *proj[] = {"gate_proj", "up_proj", "down_proj"};
    const int e = j / 6, k = j % 6, p = k % 3;
    const int64_t rows = p < 2 ? I : H, cols = p < 2 ? H : I;
    if (k < 3) {
        snprintf(name, len, "%s.mlp.experts.%d.%s.weight", prefix, e, proj[p]);
        *dt = tide_qfmt_value_dtype(qfmt);
        tide_qmat_value_shape(qfmt, rows, cols, shape);
    } else {
        snprintf(name, len, "%s.mlp.experts.%d.%s.%s", prefix, e, proj[p],
                 tide_qfmt_scale_name(qfmt));
        *dt = tide_qfmt_scale_dtype(qfmt);
        tide_qmat_scale_shape(block, rows, cols, shape);
    }
    return 2;
}

/* A MoE layer's tensors after its attention, in checkpoint order: the
 * router (n_experts x H) at "<prefix>.mlp.gate.weight", its f32 expert bias
 * under "<prefix>.<bias_name>" (NULL: none), the routed experts, then the
 * shared expert's SwiGLU under "<prefix>.<shared_part>" (shared_I 0: none). */
struct mc_moe_spec {
    int n_experts;
    int64_t H, I; /* hidden size, a routed expert's width */
    int qfmt;     /* the routed experts' format (enum tide_qfmt) and block */
    const int *block;
    const char *bias_name;
    const char *shared_part;
    int64_t shared_I;
};

/* Where the routed experts start among the block's tensors. */
static inline int mc_moe_first_expert(const struct mc_moe_spec *m)
{
    return 1 + (m->bias_name ? 1 : 0);
}

/* The block's tensor count. */
static inline int mc_moe_tensors(const struct mc_moe_spec *m)
{
    return mc_moe_first_expert(m) + mc_expert_tensors(m->qfmt) * m->n_experts +
           (m->shared_I ? 3 : 0);
}

/* The block's j-th tensor (0 <= j < mc_moe_tensors): name, dtype, shape. */
static inline int mc_spec_moe(const char *prefix, int j, const struct mc_moe_spec *m, char *name,
                              size_t len, enum tide_dtype *dt, int64_t shape[TIDE_MAX_DIMS])
{
    *dt = TIDE_DTYPE_BF16;
    if (j == 0) {
        snprintf(name, len, "%s.mlp.gate.weight", prefix);
        return mc_spec2(shape, m->n_experts, m->H);
    }
    j -= 1;
    if (m->bias_name) {
        if (j == 0) {
            snprintf(name, len, "%s.%s", prefix, m->bias_name);
            *dt = TIDE_DTYPE_F32;
            return mc_spec1(shape, m->n_experts);
        }
        j--;
    }
    const int per = mc_expert_tensors(m->qfmt);
    if (j < per * m->n_experts)
        return mc_spec_expert_q(prefix, j, m->I, m->H, m->qfmt, m->block, name, len, dt, shape);
    j -= per * m->n_experts;
    return mc_spec_swiglu(prefix, m->shared_part, j, m->shared_I, m->H, name, len, shape);
}

/* Bytes of a tensor of dtype dt and shape[nd]. */
static inline uint64_t mc_spec_bytes(enum tide_dtype dt, const int64_t *shape, int nd)
{
    uint64_t b = tide_dtype_size(dt);
    for (int d = 0; d < nd; d++)
        b *= (uint64_t)shape[d];
    return b;
}

#endif
