#include <stdio.h>

#include "core_options.h"
#include "tide/status.h"

static const struct tide_option model_options[] = {
    {"plugin", TIDE_OPT_STRING, "model-llada2", "model plugin that reads the checkpoint", NULL,
     NULL},
    {"path", TIDE_OPT_STRING, "models/llada2-tiny",
     "checkpoint directory (config.json, *.safetensors, tokenizer.json); relative paths are "
     "taken from the current directory",
     NULL, NULL},
    {"create", TIDE_OPT_STRING, "",
     "if path does not exist, generate a synthetic checkpoint there with this preset (e.g. "
     "tiny): only at the path set by the same file (or the default path), or when create "
     "itself is given on the command line (--set model.create=tiny); any other missing path "
     "is an error naming it. Empty: fail instead",
     NULL, NULL},
    {"create_layers", TIDE_OPT_INT, "0", "layers of the generated checkpoint; 0 = the preset's",
     NULL, "[0,]"},
    {"create_seed", TIDE_OPT_INT, "1", "seed of the generated checkpoint's weights", NULL, NULL},
    {"check_weights", TIDE_OPT_BOOL, "true",
     "scan the weights for NaN and Inf when the model loads (one pass over the checkpoint); "
     "skipped when the checkpoint folder holds a matching .tide-weights-verified",
     NULL, NULL},
    {"remember_check", TIDE_OPT_BOOL, "false",
     "after a clean scan, write .tide-weights-verified (each file's size and mtime) into the "
     "checkpoint folder so later loads of the unchanged files skip the scan; false: nothing "
     "is written there",
     NULL, NULL},
    {"mmap", TIDE_OPT_BOOL, "true",
     "map the checkpoint: pages are read on first use and the kernel may evict them; false = "
     "read it into RAM at load (slower start, no page faults later), like llama.cpp's --no-mmap",
     NULL, NULL},
    {"mlock", TIDE_OPT_BOOL, "false",
     "lock the checkpoint's memory in RAM so it is never paged out, like llama.cpp's --mlock; "
     "needs a memlock limit (ulimit -l) as large as the checkpoint, else a warning",
     NULL, NULL},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

static const struct tide_option backend_options[] = {
    {"device", TIDE_OPT_STRING, "auto",
     "backend plugin that runs the forward pass and resident experts; auto = backend-cuda when "
     "a CUDA device is present, else the host backend",
     NULL, NULL},
    {"host", TIDE_OPT_STRING, "backend-cpu-onednn",
     "backend plugin that runs experts which are not resident on the device", NULL, NULL},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

static const struct tide_option policy_options[] = {
    {"plugin", TIDE_OPT_STRING, "policy-tide", "expert-placement policy plugin", NULL, NULL},
    {"budget", TIDE_OPT_INT, "-1",
     "routed experts per MoE layer kept in device slots; -1 = all (no offload) unless "
     "expert_memory is set; 0 = every expert runs on the host; more than the model's experts "
     "per layer is an error (tide run, bench and sim alike)",
     NULL, "[-1,]"},
    {"expert_memory", TIDE_OPT_SIZE, "0",
     "device memory for routed experts across all MoE layers (e.g. 12GiB); the per-layer "
     "budget is derived from it; 0 = unset",
     NULL, NULL},
    {"profile", TIDE_OPT_STRING, "",
     "hardware profile (config/profiles/*.ini, found from any working directory) whose "
     "modelled costs are handed to the policy; cost-aware policies need one (tide sim uses "
     "--profile)",
     NULL, NULL},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

static const struct tide_option generation_options[] = {
    {"gen_length", TIDE_OPT_INT, "128",
     "most tokens to generate; the output is cut after the first EOS (docs/decoding.md)", NULL,
     "[1,]"},
    {"block_length", TIDE_OPT_INT, "32", "tokens per diffusion block", NULL, "[1,4096]"},
    {"steps", TIDE_OPT_INT, "32",
     "denoising steps per block, capped at gen_length / minimal_topk as in the official "
     "generate()",
     NULL, "[1,4096]"},
    {"minimal_topk", TIDE_OPT_INT, "1",
     "steps = min(steps, gen_length / minimal_topk) (the official generate()'s minimal_topk)", NULL,
     "[1,]"},
    {"threshold", TIDE_OPT_FLOAT, "0.95",
     "commit every masked position whose probability exceeds this; if fewer than the step's "
     "scheduled count do, commit the most confident instead",
     NULL, "(0,1]"},
    {"temperature", TIDE_OPT_FLOAT, "0",
     "0 = argmax (lowest id on ties); > 0 samples from softmax(logits / T) with TIDE's seeded "
     "RNG",
     NULL, "[0,]"},
    {"top_k", TIDE_OPT_INT, "0",
     "keep the tokens whose logit is at least the k-th largest (ties kept); 0 = all", NULL, "[0,]"},
    {"top_p", TIDE_OPT_FLOAT, "1",
     "keep the smallest set of most likely tokens whose probability exceeds this (applied after "
     "top_k); 1 = all",
     NULL, "[0,1]"},
    {"seed", TIDE_OPT_INT, "0", "random seed for sampling", NULL, NULL},
    {"eos_early_stop", TIDE_OPT_BOOL, "false",
     "stop inside a block as soon as a committed EOS has no mask before it (the official "
     "eos_early_stop); the tokens returned are the same, fewer forwards run",
     NULL, NULL},
    {"stop_tokens", TIDE_OPT_STRING, "",
     "tokens that also end generation as EOS does, comma-separated token strings (e.g. "
     "<|role_end|>); empty = EOS only, as the official generate()",
     NULL, NULL},
    {"mask_in_argmax", TIDE_OPT_BOOL, "true",
     "the mask token competes in the argmax and softmax, as in the official generate(); false "
     "leaves it out (it can then never be chosen)",
     NULL, NULL},
    {"chat", TIDE_OPT_BOOL, "false", "wrap the prompt in the model's chat template", NULL, NULL},
    {"recompute", TIDE_OPT_BOOL, "false",
     "recompute the whole prefix every step instead of using the KV cache: exactly the "
     "official generate()'s forwards (slow; for verification)",
     NULL, NULL},
    {"all_logits", TIDE_OPT_BOOL, "false",
     "compute the output layer for every position of the block, not only the still-masked "
     "ones the decoder reads (same tokens and logits; slower; for verification)",
     NULL, NULL},
    {"decoder", TIDE_OPT_STRING, "auto",
     "decoding loop: a decoder plugin, by its name with or without the decoder- prefix (`tide "
     "plugins` lists them); auto = the one the model names for its checkpoint "
     "(docs/decoding.md)",
     NULL, NULL},
    {"mode", TIDE_OPT_STRING, "",
     "a named preset of the decoder's settings (each decoder documents its own, e.g. speed or "
     "quality); empty = none. Keys set explicitly win over the preset",
     NULL, NULL},
    {"cfg_scale", TIDE_OPT_FLOAT, "0",
     "classifier-free guidance scale, for decoders whose official loop has it: > 0 runs a "
     "second forward per step with the prompt masked and uses un + (cfg_scale + 1)(cond - un)",
     NULL, "[0,]"},
    {"remasking", TIDE_OPT_ENUM, "low_confidence",
     "for decoders that commit a scheduled number of positions: low_confidence = the most "
     "probable tokens, random = uniformly random positions (TIDE's seeded RNG)",
     "low_confidence|random", NULL},
    {"prefix_cache", TIDE_OPT_BOOL, "false",
     "APPROXIMATE, changes the output, for decoders over full attention that offer it: a "
     "Fast-dLLM-style prefix cache (once per block a full forward caches the K/V of the prompt "
     "and earlier blocks, later steps run only from the block's start); false (default) is "
     "exact",
     NULL, NULL},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

static const struct tide_option output_options[] = {
    {"metrics", TIDE_OPT_STRING, "", "write per-step, per-layer telemetry as JSON Lines here", NULL,
     NULL},
    {"trace", TIDE_OPT_STRING, "", "record the routing of every MoE layer and step here", NULL,
     NULL},
    {"stream", TIDE_OPT_BOOL, "true", "print committed text block by block as it is decoded", NULL,
     NULL},
    {"progress", TIDE_OPT_BOOL, "true", "show progress (step, tokens/s) on stderr", NULL, NULL},
    {"overwrite", TIDE_OPT_BOOL, "false",
     "allow replacing existing metrics or trace files; otherwise refuse", NULL, NULL},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

static const struct tide_option bench_options[] = {
    {"policies", TIDE_OPT_STRING, "tide,lru,static",
     "policies to compare, comma-separated (plugin names; a short name x means policy-x)", NULL,
     NULL},
    {"budgets", TIDE_OPT_STRING, "",
     "experts per MoE layer on the device, comma-separated ('all' = no offload); empty = the "
     "[policy] budget",
     NULL, NULL},
    {"intervals", TIDE_OPT_STRING, "4",
     "policy-tide refresh intervals to sweep, comma-separated (ignored by other policies)", NULL,
     NULL},
    {"prompts", TIDE_OPT_STRING, "bench/prompts/prompts.txt",
     "prompt file: one prompt per line, '#' starts a comment; a relative path not found from "
     "the working directory is looked up among the shipped files (docs/config.md)",
     NULL, NULL},
    {"max_prompts", TIDE_OPT_INT, "0", "use only the first N prompts; 0 = all", NULL, "[0,]"},
    {"batch", TIDE_OPT_STRING, "1",
     "batch sizes to sweep (comma list, 1-256): each configuration decodes the prompts with up "
     "to N at once (continuous batching, docs/batching.md); 1 = one at a time",
     NULL, NULL},
    {"repeats", TIDE_OPT_INT, "1", "runs of each prompt per configuration", NULL, "[1,1000]"},
    {"out", TIDE_OPT_STRING, "bench-results",
     "results folder; each run writes a new timestamped subfolder (results.csv, config.ini, "
     "manifest.json, metrics)",
     NULL, NULL},
    {"baseline", TIDE_OPT_BOOL, "true",
     "also run without offload and check every configuration generates the same tokens", NULL,
     NULL},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

static const struct tide_option serve_options[] = {
    {"host", TIDE_OPT_STRING, "127.0.0.1",
     "address `tide serve` listens on; anything but loopback exposes the model to the network",
     NULL, NULL},
    {"port", TIDE_OPT_INT, "8080", "TCP port of `tide serve`; 0 = any free port (logged)", NULL,
     "[0,65535]"},
    {"max_queue", TIDE_OPT_INT, "64",
     "requests that may wait for a batch slot (those a free slot will take at the next forward "
     "do not count); more get 503 with Retry-After",
     NULL, "[1,]"},
    {"schedule", TIDE_OPT_ENUM, "fifo",
     "which waiting request takes a free batch slot: fifo = in arrival order; shortest = the "
     "least planned work first (the decoder's plan: forwards x positions), arrival order on "
     "ties",
     "fifo|shortest", NULL},
    {"max_batch", TIDE_OPT_INT, "8",
     "prompts decoded together (continuous batching: requests join between forwards while "
     "fewer run; docs/batching.md); 1 = one at a time, as before batching",
     NULL, "[1,256]"},
    {"max_body", TIDE_OPT_SIZE, "1MiB", "largest request body taken; larger ones get 413", NULL,
     "[64,]"},
    {"api_key", TIDE_OPT_STRING, "",
     "require 'Authorization: Bearer KEY' (every route but /health); empty: the TIDE_API_KEY "
     "environment variable, if set, else no key",
     NULL, NULL},
    {"model_name", TIDE_OPT_STRING, "",
     "model name in answers and /v1/models; empty = the checkpoint folder's name", NULL, NULL},
    {"max_connections", TIDE_OPT_INT, "256", "open HTTP connections at most", NULL, "[1,65536]"},
    {"read_timeout", TIDE_OPT_FLOAT, "10",
     "seconds a client may take to send a request's headers, and then its body; a slower one "
     "gets 408 and its connection is closed (an idle keep-alive connection is closed after as "
     "long)",
     NULL, "(0,3600]"},
    {"shutdown_timeout", TIDE_OPT_FLOAT, "10",
     "on SIGINT/SIGTERM, seconds the running requests may take to finish before they are "
     "cancelled",
     NULL, "[0,]"},
    {"default_seed", TIDE_OPT_INT, "-1",
     "sampling seed of requests that give none: -1 = a random one drawn for each request; N = "
     "always N (repeatable answers); every answer reports its seed",
     NULL, "[-1,]"},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

static const struct tide_option dip_options[] = {
    {"pool", TIDE_OPT_STRING, "",
     "JSONL file of in-context examples, one {\"question\": ..., \"answer\": ...} per line; "
     "empty = DIP off (docs/dip.md)",
     NULL, NULL},
    {"mode", TIDE_OPT_ENUM, "dynamic",
     "dynamic = the first examples in the prompt, the rest inserted before later blocks (the "
     "decoder recomputes only what an insertion changed); upfront = every chosen example in the "
     "prompt from the start (the paper's baseline)",
     "dynamic|upfront", NULL},
    {"shots", TIDE_OPT_INT, "8", "examples chosen from the pool for each prompt", NULL, "[1,]"},
    {"lambda", TIDE_OPT_FLOAT, "0.5",
     "MMR's balance: lambda x relevance to the query - (1 - lambda) x redundancy with the "
     "examples already chosen (cosine similarity of pooled input embeddings)",
     NULL, "[0,1]"},
    {"budget", TIDE_OPT_INT, "0",
     "most tokens the chosen examples may add to the prompt; an example that would pass it is "
     "skipped; 0 = no limit",
     NULL, "[0,]"},
    {"first", TIDE_OPT_INT, "1", "mode = dynamic: examples in the prompt from the start", NULL,
     "[0,]"},
    {"per_block", TIDE_OPT_INT, "0",
     "mode = dynamic: examples inserted before each later block; 0 = spread the rest evenly so "
     "the last enters before the last block",
     NULL, "[0,]"},
    {"template", TIDE_OPT_STRING, "Question: {question}\\nAnswer: {answer}\\n\\n",
     "how one example reads in the prompt ({question}, {answer}; \\n and \\t are escapes); "
     "each example is tokenized alone",
     NULL, NULL},
    {NULL, 0, NULL, NULL, NULL, NULL},
};

int tide_core_register_sections(struct tide_config *cfg)
{
    static const struct {
        const char *name;
        const struct tide_option *table;
        const char *summary;
    } secs[] = {
        {"model", model_options, "Which model plugin reads which checkpoint."},
        {"backend", backend_options, "Which backends run the model and the experts."},
        {"policy", policy_options, "Expert placement: the policy and its device budget."},
        {"generation", generation_options, "Block-diffusion decoding."},
        {"output", output_options, "What is printed and recorded."},
        {"bench", bench_options, "Sweeps run by `tide bench`."},
        {"serve", serve_options, "The HTTP server `tide serve` (docs/serving.md)."},
        {"dip", dip_options,
         "In-context examples chosen and inserted during generation (DIP, "
         "docs/dip.md)."},
    };
    for (size_t i = 0; i < sizeof secs / sizeof secs[0]; i++) {
        int rc = tide_config_add_section(cfg, secs[i].name, secs[i].table, "core", secs[i].summary);
        if (rc != TIDE_OK)
            return rc;
    }
    return TIDE_OK;
}

int tide_config_add_plugins(struct tide_config *cfg, const struct tide_plugin_set *set)
{
    /* The folders searched, for the message about a plugin's section whose
     * plugin is not among them. */
    char dirs[4096] = "";
    size_t used = 0;
    for (int i = 0; i < set->n_dirs && used < sizeof dirs; i++)
        used +=
            (size_t)snprintf(dirs + used, sizeof dirs - used, "%s%s", i ? ", " : "", set->dirs[i]);
    if (tide_config_set_plugin_dirs(cfg, set->n_dirs ? dirs : "(none)") != TIDE_OK)
        return TIDE_E_NOMEM;
    for (int i = 0; i < set->n; i++) {
        const struct tide_plugin_desc *d = set->items[i].desc;
        int rc = tide_config_add_section(cfg, d->name, d->options, d->name, d->summary);
        if (rc != TIDE_OK)
            return rc;
    }
    return TIDE_OK;
}
