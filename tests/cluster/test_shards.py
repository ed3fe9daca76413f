#!/usr/bin/python3
"""Sharded sweeps without a cluster: `tide bench/sim --shard K/N`, `merge`
and the scripts of `--emit-slurm` (docs/cluster.md).

  bench  a tiny-model sweep (8 configurations) run whole and as 3 shards (one
         of them taking the baseline from another with --baseline DIR); the
         merged results.csv equals the whole run's but for the timing
         columns, its rows in the same order, with the same metrics files,
         config.ini and reference tokens; then every refusal: a missing
         shard (by index), one given twice, shards of another grid, config
         or shard count (naming the field), an interrupted or unfinished
         shard, an output folder that is not empty, bad --shard values, and
         a --baseline DIR of other settings.
  sim    a synthetic trace replayed whole (--out) and as 3 shards: the merged
         results.csv equals the whole run's but for replay_seconds, the plots
         are byte-identical, and the table and interval choices are the same;
         refusals: another trace, a missing shard, --shard without --out,
         --shard with --metrics, a merge given the wrong --trace.
  emit   `--emit-slurm 3` writes submit.sh, shards.sbatch and merge.sbatch
         (#SBATCH lines, the array, the command line); run by hand with
         SLURM_ARRAY_TASK_ID = 0, 1, 2 and then the merge, they produce the
         whole run's results; bad sbatch values are refused.
Usage: test_shards.py MODE PATH_TO_TIDE PROFILE_DIR
"""
import csv
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

FAILS = []


def tide(binary, args, code=0, expect=None):
    r = subprocess.run([binary] + args, capture_output=True, text=True, errors="replace")
    out = r.stdout + r.stderr
    if code is not None and r.returncode != code:
        check(False, "exit %d (want %d): tide %s\n%s" % (r.returncode, code, " ".join(args), out))
    for e in [expect] if isinstance(expect, str) else expect or []:
        check(e in out, "tide %s: %r not in the output:\n%s" % (" ".join(args), e, out))
    return out


def check(ok, what):
    if not ok:
        FAILS.append(what)
        print("FAIL: " + what)


def rows(path, drop):
    with open(path) as f:
        r = list(csv.reader(f))
    keep = [i for i, c in enumerate(r[0]) if c not in drop]
    return [[row[i] for i in keep] for row in r]


def one(pattern):
    found = glob.glob(pattern)
    check(len(found) == 1, "%s: %d matches" % (pattern, len(found)))
    return found[0] if found else pattern


BENCH_TIMING = {"seconds", "host_seconds", "device_seconds", "tokens_per_second"}


def tiny_sweep(binary, tmp, model_path, prompts):
    """A tiny checkpoint in tmp/tiny, tmp/t.ini naming it model_path, and a prompt file."""
    tide(binary, ["--quiet", "mkmodel", tmp + "/tiny", "--preset", "tiny", "--seed", "5"])
    with open(tmp + "/t.ini", "w") as f:
        f.write("[model]\npath = %s\n[generation]\ngen_length = 64\n"
                "[output]\nprogress = false\nstream = false\n"
                "[backend-cpu-onednn]\nthreads = 1\n" % model_path)
    with open(prompts, "w") as f:
        f.write("hello world\nwrite a poem\n1 2 3 4\n")
    return tmp + "/t.ini"


def bench(binary, tmp):
    prompts = os.path.join(tmp, "p.txt")
    cfg = tiny_sweep(binary, tmp, tmp + "/tiny", prompts)
    sweep = ["--quiet", "bench", "-c", cfg, "--prompts", prompts, "--policies",
             "tide,lru,static", "--budgets", "4,8", "--intervals", "1,2"]
    tide(binary, sweep + ["--out", tmp + "/whole"])
    whole = one(tmp + "/whole/*")
    for k in (0, 2):
        tide(binary, sweep + ["--shard", "%d/3" % k, "--out", tmp + "/shards"])
    s0 = one(tmp + "/shards/*-shard-0-of-3")
    tide(binary, sweep[1:] + ["--shard", "1/3", "--baseline", s0, "--out", tmp + "/shards"],
         expect="baseline (no offload) row, metrics and tokens come from " + s0)
    s1, s2 = one(tmp + "/shards/*-shard-1-of-3"), one(tmp + "/shards/*-shard-2-of-3")
    m1 = json.load(open(s1 + "/manifest.json"))
    check(m1["shard"] == {"index": 1, "count": 3}, "shard 1's manifest: %s" % m1.get("shard"))
    check([r["configuration"] for r in m1["rows"]] == [-1, 1, 4, 7],
          "shard 1 ran configurations %s, not [-1, 1, 4, 7]" % m1["rows"])
    check(m1["reference_tokens"]["from"] == s0, "shard 1's reference is not %s" % s0)

    merged = tmp + "/merged"
    tide(binary, ["bench", "merge", tmp + "/shards", "--out", merged],
         expect="3 shards (hosts: ")
    a, b = rows(whole + "/results.csv", BENCH_TIMING), rows(merged + "/results.csv", BENCH_TIMING)
    check(len(a) == 10 and a == b, "merged results.csv differs from the whole run's:\n%s\n%s"
          % ("\n".join(map(",".join, a)), "\n".join(map(",".join, b))))
    with open(s0 + "/results.csv") as f:
        base0 = f.read().split("\n")[1]
    with open(merged + "/results.csv") as f:
        check(f.read().split("\n")[1] == base0, "the merged baseline row is not shard 0's")
    names = lambda d: sorted(os.path.basename(p) for p in glob.glob(d + "/*"))
    check(names(whole) == names(merged), "files: %s vs %s" % (names(whole), names(merged)))
    ma, mb = (json.load(open(d + "/manifest.json")) for d in (whole, merged))
    for key in ("grid", "checkpoint", "config", "reference_tokens", "git_revision", "rows"):
        if key == "reference_tokens":
            ma[key].pop("from"), mb[key].pop("from")
        check(ma[key] == mb[key], "manifest %s differs: %s vs %s" % (key, ma[key], mb[key]))
    check([s["index"] for s in mb["shards"]] == [0, 1, 2] and "shard" not in mb and mb["hosts"],
          "merged manifest shards/hosts: %s %s" % (mb.get("shards"), mb.get("hosts")))
    ini = lambda d: [l.split(";")[0].strip() for l in open(d + "/config.ini")
                     if not l.startswith("out ")]
    check(ini(whole) == ini(merged), "config.ini differs beyond [bench] out")
    print("bench: whole run and 3 merged shards agree on %d rows x %d columns" % (len(a), len(a[0])))

    # Refusals.
    tide(binary, ["bench", "merge", s0, s2, "--out", tmp + "/m"], 1,
         "1 of 3 shards missing: shard 1")
    tide(binary, ["bench", "merge", s0, s1, s2, s1, "--out", tmp + "/m"], 2,
         "shard 1 of 3 is given twice")
    tide(binary, sweep + ["--budgets", "4", "--shard", "1/3", "--out", tmp + "/other"])
    tide(binary, ["bench", "merge", s0, one(tmp + "/other/*"), s2, "--out", tmp + "/m"], 2,
         "grid.budgets differs ([4,8] in the first, [4] in the second)")
    tide(binary, sweep + ["--set", "generation.threshold=0.9", "--shard", "1/3", "--out",
                          tmp + "/cfg"])
    tide(binary, ["bench", "merge", s0, one(tmp + "/cfg/*"), s2, "--out", tmp + "/m"], 2,
         "config.generation.threshold differs")
    tide(binary, sweep + ["--shard", "1/4", "--out", tmp + "/four"])
    tide(binary, ["bench", "merge", s0, one(tmp + "/four/*"), s2, "--out", tmp + "/m"], 2,
         "shard.count differs (3 in the first, 4 in the second)")
    tide(binary, ["sim", "merge", tmp + "/shards", "--out", tmp + "/m"], 2,
         "not a result of `tide sim` (it is from `tide bench`)")
    for what in ("interrupted", "unfinished"):
        bad = tmp + "/" + what
        shutil.copytree(s1, bad)
        m = json.load(open(bad + "/manifest.json"))
        if what == "interrupted":
            m["interrupted"] = True
        else:
            m["rows"].pop()
            with open(bad + "/results.csv") as f:
                lines = f.readlines()
            with open(bad + "/results.csv", "w") as f:
                f.writelines(lines[:-1])
        json.dump(m, open(bad + "/manifest.json", "w"))
        tide(binary, ["bench", "merge", s0, bad, s2, "--out", tmp + "/m"], 1,
             "shard 1 of 3 (%s) %s" % (bad, "was interrupted" if what == "interrupted"
                                        else "is unfinished: 3 of its 4 rows"))
    broken = tmp + "/broken"
    shutil.copytree(s1, broken)
    with open(broken + "/manifest.json", "w") as f:
        f.write('{"command": "bench", ')
    tide(binary, ["bench", "merge", s0, broken, s2, "--out", tmp + "/m"], None,
         broken + "/manifest.json: not a JSON manifest")
    check(not os.path.exists(tmp + "/m"), "a refused merge left %s/m" % tmp)
    tide(binary, ["bench", "merge", tmp + "/shards", "--out", merged], 2, "is not empty")
    for bad in ("3/3", "1", "-1/2", "1/0", "a/b"):
        tide(binary, sweep + ["--shard", bad], 2, "expected K/N")
    tide(binary, sweep + ["--set", "generation.threshold=0.9", "--baseline", s0, "--out",
                          tmp + "/b"], 2, "config.generation.threshold differs")
    # Separate unsharded runs that differ in a key (a shell loop over --set):
    # one folder, a column per key that differs, every run's rows and metrics.
    tide(binary, sweep + ["--set", "generation.threshold=0.9", "--out", tmp + "/t09"])
    t09 = one(tmp + "/t09/*")
    runs = tmp + "/runs"
    tide(binary, ["bench", "merge", whole, t09, "--out", runs], 0,
         "2 runs differing in generation.threshold written to")
    with open(runs + "/results.csv") as f:
        r = list(csv.reader(f))
    check(r[0][-1] == "generation.threshold" and len(r) == 19,
          "runs merge: header %s, %d lines" % (r[0], len(r)))
    check([row[-1] for row in r[1:]] == ["0.95"] * 9 + ["0.9"] * 9,
          "runs merge: the threshold column is %s" % [row[-1] for row in r[1:]])
    a = rows(whole + "/results.csv", BENCH_TIMING)
    b = rows(runs + "/results.csv", BENCH_TIMING | {"generation.threshold"})
    check(b[:10] == a, "runs merge: the first run's rows are not its own")
    mr = json.load(open(runs + "/manifest.json"))
    check(mr["varied"] == ["generation.threshold"] and len(mr["runs"]) == 2 and
          len(mr["rows"]) == 18 and
          all(os.path.exists(runs + "/" + row["metrics"]) for row in mr["rows"]),
          "runs merge manifest: %s" % {k: mr.get(k) for k in ("varied", "runs")})
    with open(runs + "/summary.csv") as f:
        check(next(csv.reader(f))[-1] == "generation.threshold", "runs merge: summary.csv column")
    tide(binary, ["bench", "merge", whole, t09, "--out", tmp + "/m"] +
         [one(tmp + "/other/*")], 2, "are not shards of one sweep")
    tide(binary, sweep + ["--budgets", "4", "--out", tmp + "/b4"])
    tide(binary, ["bench", "merge", whole, one(tmp + "/b4/*"), "--out", tmp + "/m"], 2,
         "are runs of different sweeps: grid.budgets differs")
    tide(binary, sweep + ["--out", tmp + "/again"])
    tide(binary, ["bench", "merge", whole, one(tmp + "/again/*"), "--out", tmp + "/m"], 2,
         "have the same configuration, so nothing tells their rows apart")
    check(not os.path.exists(tmp + "/m"), "a refused runs merge left %s/m" % tmp)

    tide(binary, ["bench", "merge", "--help"], 0, "usage: tide bench merge")
    tide(binary, ["bench", "--help"], 0, ["--shard K/N", "--emit-slurm N", "merge DIR"])
    return 0


def sim(binary, tmp, profiles):
    trace = tmp + "/syn.trc"
    tide(binary, ["--quiet", "trace", "synth", trace, "--preset", "tiny", "--blocks", "4"])
    sweep = ["--quiet", "sim", "--trace", trace, "--profile", profiles + "/h100-pcie5.ini",
             "--scale-profile", "--policy", "tide,lru,static", "--budget", "4,8",
             "--interval", "1-4", "--layer-budgets"]
    whole = tide(binary, sweep + ["--out", tmp + "/whole"])
    for k in range(3):
        tide(binary, sweep + ["--shard", "%d/3" % k, "--out", tmp + "/shards/%d" % k])
    merged = tide(binary, ["--quiet", "sim", "merge", tmp + "/shards", "--out", tmp + "/merged"])
    drop = {"replay_seconds"}
    a = rows(tmp + "/whole/results.csv", drop)
    b = rows(tmp + "/merged/results.csv", drop)
    check(len(a) == 21 and a == b, "merged results.csv differs:\n%s\n%s"
          % ("\n".join(map(",".join, a)), "\n".join(map(",".join, b))))
    plots = sorted(os.listdir(tmp + "/whole/plots"))
    check(plots == sorted(os.listdir(tmp + "/merged/plots")) and len(plots) == 6,
          "plots: %s" % plots)
    for p in plots:
        with open(tmp + "/whole/plots/" + p, "rb") as x, open(tmp + "/merged/plots/" + p, "rb") as y:
            check(x.read() == y.read(), "plot %s differs" % p)
    table = lambda out: [l for l in out.splitlines() if l and not l.startswith(
        ("trace ", "replayed", "plots in", "results in", "tide: warning"))]
    check(table(whole) == table(merged), "the printed table and choices differ:\n%s\n---\n%s"
          % (whole, merged))
    m = json.load(open(tmp + "/merged/manifest.json"))
    check(m["grid"]["configurations"] == 18 and len(m["shards"]) == 3,
          "merged manifest: %s" % m["grid"])
    print("sim: whole run and 3 merged shards agree on %d rows and %d plots" % (len(a), len(plots)))

    other = tmp + "/other.trc"
    tide(binary, ["--quiet", "trace", "synth", other, "--preset", "tiny", "--blocks", "4",
                  "--seed", "9"])
    tide(binary, [a.replace(trace, other) if a == trace else a for a in sweep]
         + ["--shard", "1/3", "--out", tmp + "/o1"])
    s0, s2 = tmp + "/shards/0", tmp + "/shards/2"
    tide(binary, ["sim", "merge", s0, tmp + "/o1", s2, "--out", tmp + "/m"], 2,
         "trace.fnv1a64 differs")
    tide(binary, ["sim", "merge", s0, s2, "--out", tmp + "/m"], 1,
         "1 of 3 shards missing: shard 1")
    tide(binary, ["sim", "merge", tmp + "/shards", "--out", tmp + "/m", "--trace", other], 2,
         "is not the one the shards replayed")
    shutil.copytree(tmp + "/shards/1", tmp + "/bad1")
    with open(tmp + "/bad1/rows.json", "w") as f:
        f.write("[{}]")
    tide(binary, ["sim", "merge", s0, tmp + "/bad1", s2, "--out", tmp + "/m"], 1,
         "has 1 rows, its share of the grid is 6")
    check(not os.path.exists(tmp + "/m"), "a refused merge left %s/m" % tmp)
    tide(binary, sweep + ["--shard", "1/3"], 2, "needs --out DIR")
    tide(binary, sweep + ["--shard", "1/3", "--out", tmp + "/x", "--metrics", tmp + "/x.jsonl"],
         2, "does not go with --shard")
    tide(binary, sweep + ["--out", tmp + "/x", "--csv", tmp + "/x.csv"], 2, "drop --csv")
    # --sweep over a policy option, whole and in shards: the shards number the
    # configurations over every sweep point, and the merge equals the whole.
    swept = ["--quiet", "sim", "--trace", trace, "--policy", "lru,lfu", "--budget", "4,8",
             "--sweep", "policy-lfu.decay=0.5,0.9"]
    tide(binary, swept + ["--out", tmp + "/sw-whole"])
    for k in range(2):
        tide(binary, swept + ["--shard", "%d/2" % k, "--out", tmp + "/sw-shards/%d" % k])
    tide(binary, ["--quiet", "sim", "merge", tmp + "/sw-shards", "--out", tmp + "/sw-merged"])
    a = rows(tmp + "/sw-whole/results.csv", drop)
    b = rows(tmp + "/sw-merged/results.csv", drop)
    check(a[0][-1] == "policy-lfu.decay" and len(a) == 21 and a == b and
          [r[-1] for r in a[1:]] == ["0.5"] * 10 + ["0.9"] * 10,
          "swept sim: merged results.csv differs or lacks the key's column:\n%s\n%s"
          % ("\n".join(map(",".join, a)), "\n".join(map(",".join, b))))
    m = json.load(open(tmp + "/sw-merged/manifest.json"))
    check(m["grid"]["sweep"] == [{"key": "policy-lfu.decay", "values": ["0.5", "0.9"]}],
          "swept sim manifest grid: %s" % m["grid"])
    tide(binary, swept + ["--plot", tmp + "/sw-plot"], 2, "not with --layer-budgets or --plot")

    tide(binary, ["sim", "merge", "--help"], 0, "usage: tide sim merge")
    return 0


def emit(binary, tmp):
    tiny_sweep(binary, tmp, "tiny", tmp + "/p 'q'.txt")  # a name that needs quoting
    os.chdir(tmp)  # relative paths in the command line, as a user types them
    sweep = ["--quiet", "bench", "-c", "t.ini", "--prompts", "p 'q'.txt", "--policies",
             "tide,lru", "--budgets", "4,8", "--intervals", "1,2"]
    out = tide(binary, sweep + ["--emit-slurm", "3", "--partition", "gpu", "--gres", "gpu:1",
                                "--time", "1:00:00", "--out", "runs"], expect="submit.sh")
    run = os.path.abspath(one("runs/*-slurm"))
    files = sorted(os.listdir(run))
    check(files == ["logs", "merge.sbatch", "shards", "shards.sbatch", "submit.sh"],
          "emitted: %s" % files)
    text = open(run + "/shards.sbatch").read()
    for line in ("#SBATCH --array=0-2", "#SBATCH --partition=gpu", "#SBATCH --gres=gpu:1",
                 "#SBATCH --time=1:00:00", '--shard "$SLURM_ARRAY_TASK_ID/3"', "'p '\\''q'\\''.txt'"):
        check(line in text, "shards.sbatch lacks %r:\n%s" % (line, text))
    merge = open(run + "/merge.sbatch").read()
    check("--gres" not in merge and "bench merge" in merge, "merge.sbatch:\n" + merge)
    submit = open(run + "/submit.sh").read()
    check("--dependency=\"afterany:$array\"" in submit, "submit.sh:\n" + submit)
    for f in ("shards.sbatch", "merge.sbatch", "submit.sh"):
        r = subprocess.run(["sh", "-n", run + "/" + f], capture_output=True, text=True)
        check(r.returncode == 0, "%s: not valid sh: %s" % (f, r.stderr))
    # What the array's tasks and the merge job run, run by hand elsewhere.
    os.chdir("/")
    env = dict(os.environ, PATH=os.path.dirname(binary) + ":" + os.environ["PATH"])
    for k in range(3):
        r = subprocess.run(["sh", run + "/shards.sbatch"], capture_output=True, text=True,
                           env=dict(env, SLURM_ARRAY_TASK_ID=str(k)))
        check(r.returncode == 0, "shard %d: %s%s" % (k, r.stdout, r.stderr))
    r = subprocess.run(["sh", run + "/merge.sbatch"], capture_output=True, text=True, env=env)
    check(r.returncode == 0, "merge: %s%s" % (r.stdout, r.stderr))
    os.chdir(tmp)
    tide(binary, sweep + ["--out", "whole"])
    a = rows(one("whole/*") + "/results.csv", BENCH_TIMING)
    b = rows(run + "/merged/results.csv", BENCH_TIMING) if os.path.exists(
        run + "/merged/results.csv") else None
    check(a == b, "the emitted jobs' merged results differ from the whole run's")
    print("emit: 3 emitted shard jobs and the merge job gave the whole run's %d rows" % len(a))
    tide(binary, sweep + ["--emit-slurm", "2", "--gres", "gpu 1"], 2, "one word")
    tide(binary, sweep + ["--emit-slurm", "2", "--shard", "0/2"], 2, "drop --shard")
    tide(binary, sweep + ["--emit-slurm", "0"], 2, "number of shards")
    tide(binary, sweep + ["--gres", "gpu:1"], 2, "go with --emit-slurm")
    return 0


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    mode, binary = sys.argv[1], os.path.abspath(sys.argv[2])
    tmp = tempfile.mkdtemp(prefix="tide-shards-")
    try:
        if mode == "bench":
            bench(binary, tmp)
        elif mode == "sim":
            sim(binary, tmp, sys.argv[3])
        elif mode == "emit":
            emit(binary, tmp)
        else:
            print("unknown mode " + mode)
            return 2
    finally:
        os.chdir("/")
        shutil.rmtree(tmp, ignore_errors=True)
    print("%s: %s" % (mode, "FAILED (%d)" % len(FAILS) if FAILS else "ok"))
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
