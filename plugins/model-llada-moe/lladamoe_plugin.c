/* model-llada-moe: LLaDA-MoE (inclusionAI LLaDA-MoE-7B-A1B, LLaDAMoEModelLM),
 * and synthetic presets. */
#include "lladamoe.h"
#include "tide/plugin.h"

static const char *lmoe_chat(const char *dir)
{
    (void)dir;
    return lmoe_chat_template;
}

static const struct tide_model_ops lmoe_ops = {
    .size = sizeof(struct tide_model_ops),
    .open = lmoe_open,
    .close = lmoe_close,
    .info = lmoe_info,
    .reserve_slots = lmoe_reserve_slots,
    .forward_batch = lmoe_forward_batch,
    .inspect = lmoe_inspect,
    .mkmodel = lmoe_mkmodel,
    .chat_template = lmoe_chat,
    .prompt_vector = lmoe_prompt_vector,
    .profile = lmoe_profile,
    .profile_read = lmoe_profile_read,
};

static const struct tide_plugin_desc lmoe_desc = {
    .struct_size = sizeof(struct tide_plugin_desc),
    .abi_version = TIDE_ABI_VERSION,
    .kind = TIDE_PLUGIN_MODEL,
    .name = "model-llada-moe",
    .version = "0.1.0",
    .summary = "LLaDA-MoE diffusion LMs (LLaDAMoEModelLM, full attention): LLaDA-MoE-7B-A1B; "
               "presets tiny-moe, llada-moe-7b",
    .ops = &lmoe_ops,
    .options = NULL,
    .probe = NULL,
};

TIDE_PLUGIN_DEFINE(lmoe_desc)
