/* `tide bench --emit-slurm N`: a Slurm job array running the sweep as N
 * shards, and a merge job queued after it (docs/cluster.md). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_shard.h"
#include "tide/log.h"
#include "tide/status.h"

/* s as one shell word. */
static void slurm_quote(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++)
        if (*s == '\'')
            fputs("'\\''", f);
        else
            fputc(*s, f);
    fputc('\'', f);
}

/* The bench flags that the emitted jobs set themselves, with a value. */
static bool slurm_dropped(const char *arg)
{
    static const char *const drop[] = {"--emit-slurm", "--partition", "--gres", "--time", "--out"};
    for (size_t i = 0; i < sizeof drop / sizeof drop[0]; i++)
        if (!strcmp(arg, drop[i]))
            return true;
    return false;
}

static void slurm_header(FILE *f, const struct bench_shard_args *a, const char *what,
                         const char *job, bool gres)
{
    char date[64];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M", &tm);
    fprintf(f,
            "#!/bin/sh\n# %s\n# Written by `tide bench --emit-slurm %d` on %s; queue it with "
            "submit.sh.\n",
            what, a->emit_slurm, date);
    fprintf(f, "#SBATCH --job-name=%s\n", job);
    if (a->partition)
        fprintf(f, "#SBATCH --partition=%s\n", a->partition);
    if (gres && a->gres)
        fprintf(f, "#SBATCH --gres=%s\n", a->gres);
    if (a->time)
        fprintf(f, "#SBATCH --time=%s\n", a->time);
}

static int slurm_close(FILE *f, const char *path, mode_t mode)
{
    bool ok = !ferror(f);
    ok = fclose(f) == 0 && ok;
    if (!ok || chmod(path, mode) != 0) {
        tide_error("cannot write %s: %s", path, strerror(errno));
        return TIDE_E_IO;
    }
    return TIDE_OK;
}

static FILE *slurm_open(const char *dir, const char *name, char *path, size_t len)
{
    snprintf(path, len, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        tide_error("cannot create %s: %s", path, strerror(errno));
    return f;
}

int bench_emit_slurm(const struct cli_ctx *c, const struct bench_shard_args *a, int argc,
                     char **argv)
{
    if (a->shard.count) {
        tide_error("--emit-slurm writes jobs that set --shard themselves; drop --shard %d/%d",
                   a->shard.index, a->shard.count);
        return TIDE_E_CONFIG;
    }
    const struct tide_opts *bo = tide_config_section(c->cfg, "bench");
    char dir[4200], run[PATH_MAX], exe[PATH_MAX], cwd[PATH_MAX], path[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0 || !getcwd(cwd, sizeof cwd)) {
        tide_error("--emit-slurm: cannot find this program's path or the current folder: %s",
                   strerror(errno));
        return TIDE_E_IO;
    }
    exe[n] = 0;
    int rc = cli_mkdir_stamped(tide_opts_str(bo, "out"), "-slurm", "[bench] out", dir, sizeof dir);
    if (rc != TIDE_OK)
        return rc;
    if (!realpath(dir, run)) {
        tide_error("%s: %s", dir, strerror(errno));
        return TIDE_E_IO;
    }
    static const char *const subdirs[] = {"logs", "shards"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", run, subdirs[i]);
        if (mkdir(path, 0777) != 0) {
            tide_error("cannot create %s: %s", path, strerror(errno));
            return TIDE_E_IO;
        }
    }
    /* The shards: this command line without the flags set here. */
    FILE *f = slurm_open(run, "shards.sbatch", path, sizeof path);
    if (!f)
        return TIDE_E_IO;
    char what[160];
    snprintf(what, sizeof what, "tide bench: shard $SLURM_ARRAY_TASK_ID of a sweep split into %d.",
             a->emit_slurm);
    slurm_header(f, a, what, "tide-bench", true);
    fprintf(f, "#SBATCH --array=0-%d\nset -eu\ncd ", a->emit_slurm - 1);
    slurm_quote(f, cwd);
    fputs("\nexec ", f);
    slurm_quote(f, exe);
    fputs(" bench", f);
    for (int i = 1; i < argc; i++) {
        if (slurm_dropped(argv[i])) {
            i++;
            continue;
        }
        fputc(' ', f);
        slurm_quote(f, argv[i]);
    }
    fputs(" --out ", f);
    snprintf(dir, sizeof dir, "%s/shards", run);
    slurm_quote(f, dir);
    fprintf(f, " --shard \"$SLURM_ARRAY_TASK_ID/%d\"\n", a->emit_slurm);
    if ((rc = slurm_close(f, path, 0644)) != TIDE_OK)
        return rc;
    /* The merge. */
    if (!(f = slurm_open(run, "merge.sbatch", path, sizeof path)))
        return TIDE_E_IO;
    slurm_header(f, a, "tide bench: merge the shards into merged/ (queued after them).",
                 "tide-bench-merge", false);
    fputs("set -eu\ncd ", f);
    slurm_quote(f, cwd);
    fputs("\nexec ", f);
    slurm_quote(f, exe);
    fputs(" bench merge ", f);
    slurm_quote(f, dir);
    fputs(" --out ", f);
    snprintf(dir, sizeof dir, "%s/merged", run);
    slurm_quote(f, dir);
    fputs("\n", f);
    if ((rc = slurm_close(f, path, 0644)) != TIDE_OK)
        return rc;
    /* Both, with the dependency. */
    if (!(f = slurm_open(run, "submit.sh", path, sizeof path)))
        return TIDE_E_IO;
    fprintf(f,
            "#!/bin/sh\n"
            "# Queues the %d shards of the sweep as a Slurm job array (shards.sbatch),\n"
            "# then the merge (merge.sbatch), which starts once every shard has ended\n"
            "# (afterany: a failed shard is then reported by index instead of leaving\n"
            "# the merge pending forever). Results: merged/; logs: logs/.\n"
            "set -eu\nrun=",
            a->emit_slurm);
    slurm_quote(f, run);
    fputs("\ncd \"$run\"\n"
          "array=$(sbatch --parsable --output=\"$run/logs/shard-%a.out\" \"$run/shards.sbatch\")\n"
          "array=${array%%;*}\n"
          "merge=$(sbatch --parsable --dependency=\"afterany:$array\" "
          "--output=\"$run/logs/merge.out\" \"$run/merge.sbatch\")\n"
          "merge=${merge%%;*}\n"
          "echo \"tide bench: shards queued as job array $array, merge as job $merge\"\n"
          "echo \"tide bench: results in $run/merged, logs in $run/logs\"\n",
          f);
    if ((rc = slurm_close(f, path, 0755)) != TIDE_OK)
        return rc;
    printf("wrote %s/submit.sh, shards.sbatch (%d shards) and merge.sbatch\n"
           "queue them with: sh %s/submit.sh\n",
           run, a->emit_slurm, run);
    return TIDE_OK;
}
