#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine.h"
#include "tide/log.h"
#include "tide/status.h"

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
    const char *preset = tide_opts_str(mo, "create");
    if (!*preset) {
        tide_error("[model] path = %s (%s): %s; download a checkpoint there, or set [model] "
                   "create = tiny to generate a synthetic one",
                   path, tide_opts_origin(mo, "path"), strerror(errno));
        return TIDE_E_NOTFOUND;
    }
    tide_info("%s does not exist: generating a synthetic '%s' checkpoint there ([model] create)",
              path, preset);
    int rc = e->mops->mkmodel(path, preset, (int)tide_opts_int(mo, "create_layers"),
                              (uint64_t)tide_opts_int(mo, "create_seed"));
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
    if ((rc = engine_model_dir(e, mo)) != TIDE_OK)
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

int tide_engine_load(struct tide_engine *e, const struct tide_plugin_set *set)
{
    const struct tide_opts *bo = tide_config_section(e->cfg, "backend");
    e->dev_pl = engine_pick_device(set, bo);
    if (!e->dev_pl)
        return TIDE_E_CONFIG;
    const struct tide_backend_ops *bops = e->dev_pl->desc->ops;
    const struct tide_backend_args ba = {
        .size = sizeof ba,
        .opts = tide_config_section(e->cfg, e->dev_pl->desc->name),
        .role = TIDE_ROLE_DEVICE,
    };
    int rc = bops->create(&ba, &e->dev.bk);
    if (rc != TIDE_OK) {
        tide_error("backend %s could not start (%s)", e->dev_pl->desc->name, tide_status_str(rc));
        return rc;
    }
    e->dev.ops = bops;
    e->dev.name = e->dev_pl->desc->name;
    if ((rc = tide_moe_create(&e->dev, &e->moe)) != TIDE_OK)
        return rc;
    const struct tide_model_args ma = {
        .size = sizeof ma,
        .dir = e->model_dir,
        .opts = tide_config_section(e->cfg, e->model_pl->desc->name),
        .dev = &e->dev,
        .moe = e->moe,
        .block = (int)tide_opts_int(tide_config_section(e->cfg, "generation"), "block_length"),
    };
    if ((rc = e->mops->open(&ma, &e->model)) != TIDE_OK)
        return rc;
    const struct tide_model_info *info = e->mops->info(e->model);
    if ((rc = engine_lookup(e, info->mask_token, true, &e->ids.mask)) != TIDE_OK ||
        (rc = engine_lookup(e, info->eos_token, true, &e->ids.eos)) != TIDE_OK ||
        (rc = engine_lookup(e, info->stop_token, false, &e->ids.stop)) != TIDE_OK)
        return rc;
    if (tide_tokenizer_size(e->tok) > info->vocab_size) {
        tide_error("%s/tokenizer.json has %d tokens but the model's vocab_size is %d", e->model_dir,
                   tide_tokenizer_size(e->tok), info->vocab_size);
        return TIDE_E_FORMAT;
    }
    tide_info("model %s: %d layers (%d MoE x %d experts, top-%d), backend %s", e->model_dir,
              info->n_layers, info->n_moe_layers, info->n_experts, info->top_k,
              bops->describe ? bops->describe(e->dev.bk) : e->dev.name);
    return TIDE_OK;
}

int tide_engine_reserve(struct tide_engine *e, int64_t prompt_len, const struct tide_gen_params *p)
{
    const struct tide_model_info *info = e->mops->info(e->model);
    int rc = tide_gen_check(p, prompt_len, info->max_ctx);
    if (rc != TIDE_OK)
        return rc;
    const int64_t n_ctx = tide_gen_ctx(prompt_len, p);
    return e->mops->reserve(e->model, n_ctx, p->recompute ? n_ctx : p->block);
}

void tide_engine_close(struct tide_engine *e)
{
    if (!e)
        return;
    if (e->model)
        e->mops->close(e->model);
    tide_moe_destroy(e->moe);
    if (e->dev.bk)
        e->dev.ops->destroy(e->dev.bk);
    tide_tokenizer_free(e->tok);
    free(e);
}

void tide_engine_gen_params(const struct tide_config *cfg, struct tide_gen_params *p)
{
    const struct tide_opts *g = tide_config_section(cfg, "generation");
    *p = (struct tide_gen_params){
        .gen_length = tide_opts_int(g, "gen_length"),
        .block = (int)tide_opts_int(g, "block_length"),
        .steps = (int)tide_opts_int(g, "steps"),
        .threshold = tide_opts_float(g, "threshold"),
        .temperature = tide_opts_float(g, "temperature"),
        .top_k = (int)tide_opts_int(g, "top_k"),
        .top_p = tide_opts_float(g, "top_p"),
        .seed = (uint64_t)tide_opts_int(g, "seed"),
        .recompute = tide_opts_bool(g, "recompute"),
    };
}

int tide_engine_encode(const struct tide_engine *e, const char *text, bool chat, int32_t **ids,
                       size_t *n)
{
    if (!chat)
        return tide_tokenizer_encode(e->tok, text, strlen(text), ids, n);
    /* The template is the model's; it is known once the model is open. */
    const char *t = e->model ? e->mops->info(e->model)->chat_template : NULL;
    if (!t) {
        tide_error("chat: the model has no chat template");
        return TIDE_E_UNSUPPORTED;
    }
    const char *ph = strstr(t, "{prompt}");
    if (!ph) {
        tide_error("chat: the model's chat template has no {prompt}");
        return TIDE_E_UNSUPPORTED;
    }
    size_t lt = strlen(t), lp = strlen(text);
    char *buf = malloc(lt + lp + 1);
    if (!buf)
        return TIDE_E_NOMEM;
    size_t pre = (size_t)(ph - t);
    memcpy(buf, t, pre);
    memcpy(buf + pre, text, lp);
    memcpy(buf + pre + lp, ph + 8, lt - pre - 8 + 1);
    int rc = tide_tokenizer_encode(e->tok, buf, strlen(buf), ids, n);
    free(buf);
    return rc;
}
