/* Which LLaDA2 release a checkpoint is, told by its decoding loop.
 *
 * LLaDA2.0 and LLaDA2.1 checkpoints (mini and flash) share the architecture,
 * the config.json keys and the tensor layout: nothing in the weights or the
 * configuration tells them apart. What differs is the decoding loop of the
 * remote code each release ships beside its weights (the modeling file that
 * config.json's auto_map names, modeling_llada2_moe.py): LLaDA2.1's
 * generate() takes editing_threshold (mask-to-token plus token-to-token
 * editing), LLaDA2.0's does not. So, in order:
 *   1. [model-llada2] decoder = llada2 | llada21 says it outright;
 *   2. auto reads the modeling file named by auto_map.AutoModelForCausalLM
 *      (else modeling_llada2_moe.py) beside the checkpoint: llada21 when it
 *      mentions editing_threshold, else llada2;
 *   3. without such a file: llada2 (what earlier tide versions assumed).
 * The answer names a decoder plugin ([generation] decoder = auto uses it);
 * `tide inspect` prints it with the reason. docs/adding-a-model.md. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "llada2.h"

/* The remote-code module auto_map names ("modeling_x.Class" or
 * "repo--modeling_x.Class") as a file name, into buf; false when absent. */
static bool llada2_auto_map_file(const char *dir, char *buf, size_t len)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_t *root = json_load_file(path, 0, NULL);
    const char *ref = json_string_value(
        json_object_get(json_object_get(root, "auto_map"), "AutoModelForCausalLM"));
    bool ok = false;
    if (ref) {
        const char *m = strstr(ref, "--") ? strstr(ref, "--") + 2 : ref;
        const char *dot = strrchr(m, '.');
        const size_t n = dot ? (size_t)(dot - m) : 0;
        if (n && n + 4 < len && !memchr(m, '/', n)) {
            memcpy(buf, m, n);
            memcpy(buf + n, ".py", 4);
            ok = true;
        }
    }
    json_decref(root);
    return ok;
}

/* Does the regular file dir/name exist and mention needle (within its first
 * 4 MiB)? */
static bool llada2_file_has(const char *dir, const char *name, const char *needle, bool *exists)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    *exists = stat(path, &st) == 0 && S_ISREG(st.st_mode);
    if (!*exists)
        return false;
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    size_t cap = st.st_size < (4 << 20) ? (size_t)st.st_size : (size_t)4 << 20;
    char *text = malloc(cap + 1);
    size_t got = text ? fread(text, 1, cap, f) : 0;
    fclose(f);
    bool found = false;
    if (text) {
        text[got] = 0;
        found = strstr(text, needle) != NULL;
        free(text);
    }
    return found;
}

const char *llada2_checkpoint_decoder(const char *dir, const struct tide_opts *opts, char *why,
                                      size_t len)
{
    const char *set = opts ? tide_opts_str(opts, "decoder") : "auto";
    if (strcmp(set, "auto")) {
        snprintf(why, len, "[model-llada2] decoder = %s", set);
        return !strcmp(set, "llada21") ? "llada21" : "llada2";
    }
    char file[256];
    if (!llada2_auto_map_file(dir, file, sizeof file))
        snprintf(file, sizeof file, "modeling_llada2_moe.py");
    bool exists;
    if (llada2_file_has(dir, file, "editing_threshold", &exists)) {
        snprintf(why, len,
                 "%s beside the checkpoint has a generate() with editing_threshold: LLaDA2.1",
                 file);
        return "llada21";
    }
    if (exists)
        snprintf(why, len, "%s beside the checkpoint has no editing_threshold: LLaDA2.0", file);
    else
        snprintf(why, len,
                 "no %s beside the checkpoint: LLaDA2.0 assumed ([model-llada2] decoder = "
                 "llada21 for a LLaDA2.1 checkpoint without it)",
                 file);
    return "llada2";
}
