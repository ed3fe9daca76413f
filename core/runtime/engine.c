#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "chat.h"
#include "dip.h"
#include "decode.h"
#include "engine.h"
#include "loop.h"
#include "finite.h"
#include "loader.h"
#include "tide/trace.h"
#include "tide/log.h"
#include "tide/status.h"

/* Remove a flat folder of files (a generated checkpoint), if it exists. */
static void engine_remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    const struct dirent *de;
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char f[PATH_MAX + 256];
        const int n = snprintf(f, sizeof f, "%s/%s", dir, de->d_name);
        if (n > 0 && (size_t)n < sizeof f)
            unlink(f);
    }
    closedir(d);
    rmdir(dir);
}

/* [model] create may generate a checkpoint at path only where it is meant
 * to: at the path the file declaring create names (or the built-in default),
 * or when the command line asks for it. A path given anywhere else (a typo in
 * an override) must not silently become a fresh random model. */
static bool engine_may_create(const struct tide_config *cfg)
{
    const int c = tide_config_source(cfg, "model", "create"),
              p = tide_config_source(cfg, "model", "path");
    return c == TIDE_CONFIG_SRC_CMDLINE || p == TIDE_CONFIG_SRC_DEFAULT || p == c;
}

static int engine_model_dir(struct tide_engine *e, const struct tide_opts *mo)
{
    const char *path = tide_opts_str(mo, "path");
    if (!*path) {
        tide_error("[model] path is empty: name a checkpoint directory");
        return TIDE_E_CONFIG;
    }
    snprintf(e->model_dir, sizeof e->model_dir, "%s", path);
    struct stat st;
    if (stat(path, &st) == 0)
        return TIDE_OK;
    const int err = errno;
    const char *preset = tide_opts_str(mo, "create");
    if (!*preset) {
        tide_error("[model] path = %s (%s): %s; download a checkpoint there, or set [model] "
                   "create = tiny to generate a synthetic one",
                   path, tide_opts_origin(mo, "path"), strerror(err));
        return TIDE_E_CONFIG; /* the configuration names what is not there */
    }
    if (!engine_may_create(e->cfg)) {
        tide_error("[model] path = %s (%s): %s; [model] create = %s (%s) generates a checkpoint "
                   "only at the path its own file names; to generate one here, add --set "
                   "model.create=%s",
                   path, tide_opts_origin(mo, "path"), strerror(err), preset,
                   tide_opts_origin(mo, "create"), preset);
        return TIDE_E_CONFIG;
    }
    tide_info("%s does not exist: generating a synthetic '%s' checkpoint there ([model] create)",
              path, preset);
    /* Into a folder of this process's own, renamed into place when complete:
     * processes started together on a missing path (a sharded sweep) do not
     * read each other's half-written files, and the first rename wins (the
     * same preset and seed write the same checkpoint). */
    char tmp[sizeof e->model_dir + 32];
    snprintf(tmp, sizeof tmp, "%s.tmp-%ld", path, (long)getpid());
    int rc = e->mops->mkmodel(tmp, preset, (int)tide_opts_int(mo, "create_layers"),
                              (uint64_t)tide_opts_int(mo, "create_seed"), NULL);
    if (rc == TIDE_OK && rename(tmp, path) != 0) {
        if (errno == EEXIST || errno == ENOTEMPTY) {
            tide_info("%s was generated meanwhile by another process: using it", path);
        } else {
            tide_error("could not rename %s to %s: %s", tmp, path, strerror(errno));
            rc = TIDE_E_IO;
        }
    }
    engine_remove_dir(tmp); /* the loser's copy, or what a failure left */
    if (rc != TIDE_OK)
        tide_error("could not generate %s", path);
    return rc;
}

static int engine_lookup(struct tide_engine *e, const char *name, bool required, int32_t *id)
{
    *id = name ? tide_tokenizer_id(e->tok, name) : -1;
    if (*id < 0 && required) {
        tide_error("%s/tokenizer.json has no token '%s', which %s needs", e->model_dir, name,
                   e->model_pl->desc->name);
        return TIDE_E_FORMAT;
    }
    return TIDE_OK;
}

/* [generation] stop_tokens: token strings, comma-separated, each of which must
 * be in the tokenizer. The official generate() stops only at EOS. */
static int engine_stop_tokens(struct tide_engine *e)
{
    const struct tide_opts *go = tide_config_section(e->cfg, "generation");
    const char *list = tide_opts_str(go, "stop_tokens");
    e->ids.n_stop = 0;
    for (const char *p = list; *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        while (len && (*p == ' ' || *p == '\t')) {
            p++;
            len--;
        }
        while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
            len--;
        char name[256];
        if (!len || len >= sizeof name) {
            tide_error("[generation] stop_tokens (%s): %s item in '%s'",
                       tide_opts_origin(go, "stop_tokens"), len ? "an overlong" : "an empty", list);
            return TIDE_E_CONFIG;
        }
        memcpy(name, p, len);
        name[len] = 0;
        int32_t id = tide_tokenizer_id(e->tok, name);
        if (id < 0) {
            tide_error("[generation] stop_tokens (%s): %s/tokenizer.json has no token '%s'",
                       tide_opts_origin(go, "stop_tokens"), e->model_dir, name);
            return TIDE_E_CONFIG;
        }
        if (e->ids.n_stop == TIDE_GEN_MAX_STOP) {
            tide_error("[generation] stop_tokens (%s): at most %d tokens",
                       tide_opts_origin(go, "stop_tokens"), TIDE_GEN_MAX_STOP);
            return TIDE_E_CONFIG;
        }
        e->ids.stop[e->ids.n_stop++] = id;
        p = comma ? comma + 1 : p + len;
    }
    return TIDE_OK;
}

/* [generation] decoder before the model is open: an explicit name, or the
 * checkpoint's own choice when the model plugin can read it from the
 * directory (checkpoint_decoder). Otherwise tide_engine_load resolves it
 * from the open model's info. */
static int engine_decoder_early(struct tide_engine *e, const struct tide_plugin_set *set)
{
    const char *want = tide_opts_str(tide_config_section(e->cfg, "generation"), "decoder");
    const char *model_wants = NULL;
    e->dec_why[0] = 0;
    if (TIDE_OPS_HAS(e->mops, checkpoint_decoder))
        model_wants = e->mops->checkpoint_decoder(
            e->model_dir, tide_config_section(e->cfg, e->model_pl->desc->name), e->dec_why,
            sizeof e->dec_why);
    if (!strcmp(want, "auto") && !model_wants)
        return TIDE_OK;
    e->dec_pl = tide_decode_resolve(set, want, model_wants, e->model_pl->desc->name);
    return e->dec_pl ? TIDE_OK : TIDE_E_CONFIG;
}

int tide_engine_prepare(const struct tide_config *cfg, const struct tide_plugin_set *set,
                        struct tide_engine **out)
{
    struct tide_engine *e = calloc(1, sizeof *e);
    if (!e)
        return TIDE_E_NOMEM;
    e->cfg = cfg;
    const struct tide_opts *mo = tide_config_section(cfg, "model");
    int rc = TIDE_E_CONFIG;
    e->model_pl =
        tide_plugins_get(set, tide_opts_str(mo, "plugin"), TIDE_PLUGIN_MODEL, "[model] plugin");
    if (!e->model_pl)
        goto fail;
    e->mops = e->model_pl->desc->ops;
    /* A policy named in the configuration must exist even when the budget
     * leaves it unused (budget = -1): a typo must not pass silently. The
     * default name is required only once it is used (tide_engine_place). */
    const struct tide_opts *po = tide_config_section(cfg, "policy");
    if (strcmp(tide_opts_origin(po, "plugin"), "default") &&
        !tide_plugins_get(set, tide_opts_str(po, "plugin"), TIDE_PLUGIN_POLICY, "[policy] plugin"))
        goto fail;
    if ((rc = engine_model_dir(e, mo)) != TIDE_OK)
        goto fail;
    /* A decoder named by the config, or the one the checkpoint asks for,
     * must exist before any weight is loaded. */
    if ((rc = engine_decoder_early(e, set)) != TIDE_OK)
        goto fail;
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", e->model_dir);
    if ((rc = tide_tokenizer_load(path, &e->tok)) != TIDE_OK)
        goto fail;
    *out = e;
    return TIDE_OK;
fail:
    tide_engine_close(e);
    return rc;
}

/* [backend] device = auto: CUDA when it is present and works, else the host. */
static const struct tide_plugin *engine_pick_device(const struct tide_plugin_set *set,
                                                    const struct tide_opts *bo)
{
    const char *dev = tide_opts_str(bo, "device");
    if (strcmp(dev, "auto"))
        return tide_plugins_get(set, dev, TIDE_PLUGIN_BACKEND, "[backend] device");
    const struct tide_plugin *cuda = tide_plugins_find(set, "backend-cuda");
    if (cuda && cuda->usable && cuda->desc->kind == TIDE_PLUGIN_BACKEND) {
        tide_info("[backend] device = auto: using backend-cuda");
        return cuda;
    }
    const char *host = tide_opts_str(bo, "host");
    tide_info("[backend] device = auto: using %s (%s)", host,
              cuda ? cuda->why : "backend-cuda is not built or not found");
    return tide_plugins_get(set, host, TIDE_PLUGIN_BACKEND, "[backend] host");
}

static int engine_backend(struct tide_engine *e, const struct tide_plugin *pl,
                          enum tide_backend_role role, struct tide_backend_ref *out)
{
    const struct tide_backend_ops *bops = pl->desc->ops;
    const struct tide_backend_args ba = {
        .size = sizeof ba,
        .opts = tide_config_section(e->cfg, pl->desc->name),
        .role = role,
    };
    int rc = bops->create(&ba, &out->bk);
    if (rc != TIDE_OK) {
        tide_error("backend %s could not start (%s)", pl->desc->name, tide_status_str(rc));
        out->bk = NULL;
        return rc;
    }
    out->ops = bops;
    out->name = pl->desc->name;
    return TIDE_OK;
}

int tide_engine_config_budget(const struct tide_engine *e, int *budget)
{
    const struct tide_opts *po = tide_config_section(e->cfg, "policy");
    const struct tide_model_info *info = e->mops->info(e->model);
    int64_t b = tide_opts_int(po, "budget");
    uint64_t mem = tide_opts_size(po, "expert_memory");
    if (b >= 0 && mem) {
        tide_error("[policy] budget (%s) and expert_memory (%s) are both set; set one",
                   tide_opts_origin(po, "budget"), tide_opts_origin(po, "expert_memory"));
        return TIDE_E_CONFIG;
    }
    if (mem) {
        uint64_t per_layer = info->expert_bytes * (uint64_t)info->n_moe_layers;
        uint64_t n = per_layer ? mem / per_layer : 0;
        b = n > (uint64_t)info->n_experts ? info->n_experts : (int64_t)n;
        tide_info("[policy] expert_memory = %.3f GiB: %lld experts per MoE layer (%d layers x "
                  "%llu bytes per expert)",
                  (double)mem / 1073741824.0, (long long)b, info->n_moe_layers,
                  (unsigned long long)info->expert_bytes);
    } else if (b < 0) {
        b = info->n_experts;
    } else if (b > info->n_experts) {
        /* Clamping it would run without offload under a label that claims
         * a policy and a budget the model cannot have. */
        tide_error("[policy] budget = %lld (%s): the model has %d experts per MoE layer, so a "
                   "budget is at most %d; for no offload set budget = -1 (all)",
                   (long long)b, tide_opts_origin(po, "budget"), info->n_experts, info->n_experts);
        return TIDE_E_CONFIG;
    }
    *budget = b > info->n_experts ? info->n_experts : (int)b;
    return TIDE_OK;
}

void tide_engine_set_policy_costs(struct tide_engine *e, const struct tide_policy_costs *c)
{
    e->costs = c;
}

int tide_engine_place(struct tide_engine *e, const struct tide_plugin_set *set, const char *policy,
                      int budget)
{
    if (!e->moe || !tide_moe_get_shape(e->moe))
        return TIDE_OK; /* a dense model: nothing to place */
    const struct tide_opts *g = tide_config_section(e->cfg, "generation");
    struct tide_moe_placement pl = {
        .budget = budget,
        .block_length = (int)tide_opts_int(g, "block_length"),
        .costs = e->costs,
    };
    /* The block and the most steps per block, as the decoder plans them
     * (0 when it knows no bound: open-ended steps). */
    struct tide_decoder_plan plan = {.size = sizeof plan};
    if (e->dec.dec && e->dec.ops->plan(e->dec.dec, 0, &plan) == TIDE_OK) {
        pl.block_length = plan.block_length;
        pl.max_steps = plan.max_steps;
    }
    if (budget < tide_moe_get_shape(e->moe)->n_experts) {
        e->policy_pl = tide_plugins_get(set, policy, TIDE_PLUGIN_POLICY, "[policy] plugin");
        if (!e->policy_pl)
            return TIDE_E_CONFIG;
        pl.ops = e->policy_pl->desc->ops;
        pl.name = e->policy_pl->desc->name;
        pl.opts = tide_config_section(e->cfg, pl.name);
    }
    return tide_moe_configure(e->moe, &pl);
}

int tide_engine_load(struct tide_engine *e, const struct tide_plugin_set *set)
{
    int rc = tide_engine_load_model(e, set);
    if (rc != TIDE_OK)
        return rc;
    int budget;
    if ((rc = tide_engine_config_budget(e, &budget)) != TIDE_OK)
        return rc;
    return tide_engine_place(e, set, tide_opts_str(tide_config_section(e->cfg, "policy"), "plugin"),
                             budget);
}

int tide_engine_load_model(struct tide_engine *e, const struct tide_plugin_set *set)
{
    const struct tide_opts *bo = tide_config_section(e->cfg, "backend");
    e->dev_pl = engine_pick_device(set, bo);
    e->host_pl =
        tide_plugins_get(set, tide_opts_str(bo, "host"), TIDE_PLUGIN_BACKEND, "[backend] host");
    if (!e->dev_pl || !e->host_pl)
        return TIDE_E_CONFIG;
    int rc;
    if ((rc = engine_backend(e, e->dev_pl, TIDE_ROLE_DEVICE, &e->dev)) != TIDE_OK ||
        (rc = engine_backend(e, e->host_pl, TIDE_ROLE_HOST, &e->host)) != TIDE_OK ||
        (rc = tide_moe_create(&e->dev, &e->host, &e->moe)) != TIDE_OK)
        return rc;
    const struct tide_opts *mo = tide_config_section(e->cfg, "model");
    const struct tide_model_args ma = {
        .size = sizeof ma,
        .dir = e->model_dir,
        .opts = tide_config_section(e->cfg, e->model_pl->desc->name),
        .dev = &e->dev,
        .moe = e->moe,
        .block = (int)tide_opts_int(tide_config_section(e->cfg, "generation"), "block_length"),
        .load_flags = (tide_opts_bool(mo, "mmap") ? 0u : TIDE_ST_READ) |
                      (tide_opts_bool(mo, "mlock") ? TIDE_ST_MLOCK : 0u),
    };
    if ((rc = e->mops->open(&ma, &e->model)) != TIDE_OK)
        return rc;
    e->block = ma.block;
    if (tide_opts_bool(mo, "check_weights") &&
        (rc = tide_weights_check(e->model_dir, tide_opts_bool(mo, "remember_check"))) != TIDE_OK)
        return rc;
    const struct tide_model_info *info = e->mops->info(e->model);
    if ((rc = engine_lookup(e, info->mask_token, true, &e->ids.mask)) != TIDE_OK ||
        (rc = engine_lookup(e, info->eos_token, true, &e->ids.eos)) != TIDE_OK ||
        (rc = engine_stop_tokens(e)) != TIDE_OK)
        return rc;
    if (tide_tokenizer_size(e->tok) > info->vocab_size) {
        tide_error("%s/tokenizer.json has %d tokens but the model's vocab_size is %d", e->model_dir,
                   tide_tokenizer_size(e->tok), info->vocab_size);
        return TIDE_E_FORMAT;
    }
    tide_info("model %s: %d layers (%d MoE x %d experts, top-%d); device %s; host %s", e->model_dir,
              info->n_layers, info->n_moe_layers, info->n_experts, info->top_k,
              e->dev.ops->describe ? e->dev.ops->describe(e->dev.bk) : e->dev.name,
              e->host.ops->describe ? e->host.ops->describe(e->host.bk) : e->host.name);
    if (*tide_openmp_env_note())
        tide_info("%s", tide_openmp_env_note());
    /* The decoder: the config's, or (auto) the one the open model names. */
    const char *want = tide_opts_str(tide_config_section(e->cfg, "generation"), "decoder");
    if (!strcmp(want, "auto")) {
        const char *model_wants = TIDE_INFO_HAS(info, decoder) ? info->decoder : NULL;
        if (!(e->dec_pl = tide_decode_resolve(set, want, model_wants, info->arch)))
            return TIDE_E_CONFIG;
        if (!e->dec_why[0])
            snprintf(e->dec_why, sizeof e->dec_why, "the model %s names it", info->arch);
    } else if (!e->dec_pl && !(e->dec_pl = tide_decode_resolve(set, want, NULL, info->arch))) {
        return TIDE_E_CONFIG;
    }
    if ((rc = tide_decode_open(&e->dec, e->dec_pl, e->cfg, info, &e->ids)) != TIDE_OK)
        return rc;
    if (strcmp(want, "auto"))
        tide_info("decoder: %s ([generation] decoder = %s)", e->dec.pl->desc->name, want);
    else
        tide_info("decoder: %s (auto: %s)", e->dec.pl->desc->name, e->dec_why);
    /* DIP ([dip] pool): the pool ranked with the model's own embeddings. */
    if ((rc = tide_dip_open(tide_config_section(e->cfg, "dip"), e->tok, info->chat_template,
                            e->mops, e->model, &e->dip)) != TIDE_OK)
        return rc;
    return TIDE_OK;
}

int tide_engine_decode_open(const struct tide_engine *e, const struct tide_config *cfg,
                            struct tide_decode *d)
{
    return tide_decode_open(d, e->dec_pl, cfg, e->mops->info(e->model), &e->ids);
}

int tide_engine_trace_header(const struct tide_engine *e, const struct tide_decode *d,
                             struct tide_trace_header *h)
{
    if (!d)
        d = &e->dec;
    const struct tide_moe_shape *sh = tide_moe_get_shape(e->moe);
    if (!sh) {
        tide_error("[output] trace: the model has no MoE layers to trace");
        return TIDE_E_CONFIG;
    }
    const struct tide_opts *g = tide_config_section(e->cfg, "generation");
    struct tide_decoder_plan plan = {.size = sizeof plan};
    if (!d->dec || d->ops->plan(d->dec, 0, &plan) != TIDE_OK)
        plan = (struct tide_decoder_plan){.block_length = (int)tide_opts_int(g, "block_length"),
                                          .max_steps = (int)tide_opts_int(g, "steps")};
    *h = (struct tide_trace_header){
        .n_layers = (uint32_t)sh->n_layers,
        .n_experts = (uint32_t)sh->n_experts,
        .top_k = (uint32_t)sh->top_k,
        .hidden = (uint32_t)sh->hidden,
        .inter = (uint32_t)sh->inter,
        .expert_bytes = tide_moe_expert_bytes(e->moe),
        .block_length = (uint32_t)plan.block_length,
        /* the most steps of a block; an open-ended decoder's bound */
        .steps = (uint32_t)(plan.max_steps > 0 ? plan.max_steps : plan.block_length),
        .threshold = tide_opts_float(g, "threshold"),
        .model = e->model_dir,
        .decoder = d->pl ? d->name : "",
        .decoder_settings = d->settings,
    };
    /* The threshold in force, when the decoder's settings say (a mode may
     * have set it). */
    for (const char *t = d->settings; t && *t; t += strcspn(t, " "), t += *t == ' ')
        if (!strncmp(t, "threshold=", 10))
            h->threshold = strtod(t + 10, NULL);
    return TIDE_OK;
}

/* The prompt's vector, when the model gives one and the policy or the trace
 * wants it: recorded in the trace and handed to the policy (prompt_begin). */
static int engine_prompt_vector(struct tide_engine *e, const int32_t *prompt, int64_t n,
                                const struct tide_trace_sink *trace)
{
    if (!e->moe || !tide_moe_get_shape(e->moe))
        return TIDE_OK;
    const bool want = tide_moe_wants_prompt(e->moe) || (trace && trace->prompt_vector);
    float *vec = NULL;
    int dim = 0, rc = TIDE_OK;
    if (want && n > 0 && TIDE_OPS_HAS(e->mops, prompt_vector)) {
        dim = e->mops->info(e->model)->hidden;
        if (!(vec = malloc(sizeof *vec * (size_t)dim)))
            return TIDE_E_NOMEM;
        rc = e->mops->prompt_vector(e->model, prompt, n, vec);
        if (rc == TIDE_OK && trace && trace->prompt_vector)
            rc = trace->prompt_vector(trace->user, vec, (uint32_t)dim);
    }
    if (rc == TIDE_OK)
        tide_moe_prompt_begin(e->moe, (uint32_t)n, vec, dim);
    free(vec);
    return rc;
}

int tide_engine_prompt_begin(struct tide_engine *e, const int32_t *prompt, int64_t n,
                             uint32_t prompt_id, bool join)
{
    const struct tide_trace_sink *trace = e->moe ? tide_moe_get_trace(e->moe) : NULL;
    if (trace) {
        if (join && !trace->join) {
            tide_error("trace: this sink records no batched runs (no join record)");
            return TIDE_E_UNSUPPORTED;
        }
        int rc = join ? trace->join(trace->user, prompt_id, (uint32_t)n)
                      : trace->prompt(trace->user, prompt_id, (uint32_t)n);
        if (rc != TIDE_OK)
            return rc;
    }
    return engine_prompt_vector(e, prompt, n, trace);
}

static int engine_prompt_begin(void *user, const int32_t *prompt, int64_t n, uint32_t id, bool join)
{
    return tide_engine_prompt_begin(user, prompt, n, id, join);
}

/* A round brackets both backends (their threads may be one team). */
static void engine_round(struct tide_engine *e, bool begin)
{
    const struct tide_backend_ref *b[2] = {&e->dev, &e->host};
    for (int i = 0; i < 2; i++) {
        if (!b[i]->bk)
            continue;
        if (begin && TIDE_OPS_HAS(b[i]->ops, round_begin))
            b[i]->ops->round_begin(b[i]->bk);
        else if (!begin && TIDE_OPS_HAS(b[i]->ops, round_end))
            b[i]->ops->round_end(b[i]->bk);
    }
}

static void engine_round_begin(void *user)
{
    engine_round(user, true);
}

static void engine_round_end(void *user)
{
    engine_round(user, false);
}

/* The decoders' parallel work on the host backend's threads (the CPU's). */
static void engine_parallel(void *user, int nt_max, void (*fn)(void *ctx, int tid, int nt),
                            void *ctx)
{
    struct tide_engine *e = user;
    e->host.ops->parallel(e->host.bk, nt_max, fn, ctx);
}

void tide_engine_loop_env(struct tide_engine *e, FILE *metrics, struct tide_loop_env *env)
{
    *env = (struct tide_loop_env){
        .ops = e->mops,
        .m = e->model,
        .model_name = e->model_pl ? e->model_pl->desc->name : e->mops->info(e->model)->arch,
        .dec = &e->dec,
        .moe = e->moe,
        .metrics = metrics,
        .forwards = &e->forwards,
        .prompt_begin = engine_prompt_begin,
        .round_begin = engine_round_begin,
        .round_end = engine_round_end,
        .parallel = e->host.bk && TIDE_OPS_HAS(e->host.ops, parallel) ? engine_parallel : NULL,
        .dip = e->dip,
        .user = e,
    };
}

int tide_engine_generate_ids(struct tide_engine *e, struct tide_decode *d, const int32_t *prompt,
                             int64_t n, const struct tide_gen_hooks *user,
                             const struct tide_engine_outputs *outputs, struct tide_gen_result *out)
{
    FILE *metrics = outputs ? outputs->metrics : NULL;
    struct tide_loop_env env;
    tide_engine_loop_env(e, metrics, &env);
    tide_moe_set_metrics(e->moe, metrics);
    tide_moe_set_trace(e->moe, outputs ? outputs->trace : NULL);
    const int rc =
        tide_loop_one(&env, d, prompt, n, user, outputs ? (int64_t)outputs->prompt_id : 0, out);
    tide_moe_set_metrics(e->moe, NULL);
    tide_moe_set_trace(e->moe, NULL);
    return rc;
}

void tide_engine_close(struct tide_engine *e)
{
    if (!e)
        return;
    tide_decode_close(&e->dec);
    tide_dip_close(e->dip);
    if (e->model)
        e->mops->close(e->model);
    tide_moe_destroy(e->moe);
    if (e->dev.bk)
        e->dev.ops->destroy(e->dev.bk);
    if (e->host.bk)
        e->host.ops->destroy(e->host.bk);
    tide_tokenizer_free(e->tok);
    /* The plugins' code goes last: everything above may call into it. */
    tide_config_destroy(e->own_cfg);
    tide_plugins_free(e->own_set);
    free(e->layer_total);
    free(e);
}

int tide_engine_encode(const struct tide_engine *e, const char *text, bool chat, int32_t **ids,
                       size_t *n)
{
    if (!chat)
        return tide_tokenizer_encode(e->tok, text, strlen(text), ids, n);
    /* The template is the model's; it is known once the model is open. */
    const char *t = e->model ? e->mops->info(e->model)->chat_template : NULL;
    char *buf;
    size_t len;
    int rc = tide_chat_apply(t, text, strlen(text), &buf, &len);
    if (rc != TIDE_OK)
        return rc;
    rc = tide_tokenizer_encode(e->tok, buf, len, ids, n);
    free(buf);
    return rc;
}
