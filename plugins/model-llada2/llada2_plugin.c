/* model-llada2: LLaDA2.0 (llada2_moe) mini and flash, and synthetic presets. */
#include "llada2.h"
#include "tide/plugin.h"

static const char *llada2_chat(const char *dir)
{
    return llada2_chat_template;
}

static const struct tide_model_ops llada2_ops = {
    .size = sizeof(struct tide_model_ops),
    .open = llada2_open,
    .close = llada2_close,
    .info = llada2_info,
    .reserve_slots = llada2_reserve_slots,
    .forward_batch = llada2_forward_batch,
    .inspect = llada2_inspect,
    .mkmodel = llada2_mkmodel,
    .chat_template = llada2_chat,
    .prompt_vector = llada2_prompt_vector,
    .profile = llada2_profile,
    .profile_read = llada2_profile_read,
    .checkpoint_decoder = llada2_checkpoint_decoder,
};

static const struct tide_option llada2_options[] = {
    {"decoder", TIDE_OPT_ENUM, "auto",
     "the release's decoding loop (LLaDA2.0 and 2.1 checkpoints are otherwise identical): "
     "llada2 = LLaDA2.0's generate(), llada21 = LLaDA2.1's (token editing); auto = llada21 when "
     "the generate() of the class config.json auto_map names (in its remote-code file beside "
     "the checkpoint; else modeling_llada2_moe.py's) takes a parameter editing_threshold, else "
     "llada2. [generation] decoder = auto follows it",
     "auto|llada2|llada21", NULL},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

static const struct tide_plugin_desc llada2_desc = {
    .struct_size = sizeof(struct tide_plugin_desc),
    .abi_version = TIDE_ABI_VERSION,
    .kind = TIDE_PLUGIN_MODEL,
    .name = "model-llada2",
    .version = "0.1.0",
    .summary = "LLaDA2.0 and LLaDA2.1 MoE diffusion LMs (llada2_moe): mini, flash; presets "
               "tiny, small, llada2-mini, llada2-flash",
    .ops = &llada2_ops,
    .options = llada2_options,
    .probe = NULL,
};

TIDE_PLUGIN_DEFINE(llada2_desc)
