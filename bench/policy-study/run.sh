#!/usr/bin/env bash
# The placement-policy study of docs/policies.md, from scratch:
#  1. synthetic LLaDA2.0-mini-shaped traces (19 MoE layers x 256 experts, top-8,
#     8 blocks of 32 steps) over skew 0.6 / 1.0 / 1.4 x adjacent-step cosine
#     0.9 / 0.95 / 0.985;
#  2. recorded traces: every checkpoint given (default: the `small` preset and a
#     2-layer LLaDA2.0-mini made by `tide mkmodel`) generates the first
#     MAX_PROMPTS prompts of bench/prompts/prompts.txt with no offload through
#     `tide bench` (one oneDNN thread: routing does not depend on it, and OpenMP
#     teams spin on a busy machine), which records the routing and each
#     prompt's vector;
#  3. `tide sim` on every trace with the h200-pcie5 and rtx4090-pcie4
#     profiles, at budgets of 1/8, 1/4 and 1/2 of the experts, for every
#     policy (policy-tide at intervals 1..32) plus the hindsight rows and the
#     oracle bound, with its SVG plots;
#  4. one table (study.md, study.csv): per trace, profile and budget, the
#     oracle bound and each policy's modelled time over it;
#  5. the batch axis: each recorded trace replayed as the engine decodes its
#     prompts in batches of 1, 2, 4, 8 and 16 (`tide sim --batch`: exact, as
#     a sequence's routing does not depend on its companions) under tide,
#     lru, cost and static: batch.md, batch.csv and one SVG per trace and
#     profile (plots/batch--TRACE--PROFILE.svg): modelled ms per sequence-step
#     against batch size at a quarter of the experts, and TIDE's best interval;
#  6. the format axis: each trace replayed with bf16, fp8, q8_0 and q4_0
#     experts (`tide sim --experts`: the format's bytes per promotion, the
#     profile's compute): format.md, format.csv (docs/quantization.md).
#
# usage: bench/policy-study/run.sh [-o OUT] [-t TIDE] [-p MAX_PROMPTS] [--quick] [--reuse]
#                                  [CHECKPOINT_DIR ...]
#   -o OUT        output folder (default: study-out); existing files are replaced
#   -t TIDE       the tide binary (default: build/tide)
#   -p N          prompts per recorded trace (default 16: batches up to 16)
#   --quick       synthetic traces at skew 1.0 only, the small preset only,
#                 intervals 1,2,4,8,16,32 (minutes instead of an hour)
#   --reuse       keep the traces already in OUT/traces (only replay)
#   CHECKPOINT    checkpoints to record (LLaDA2.0 or any model the tide command
#                 runs); replaces the default pair
# Profiles of another expert shape than a checkpoint's are scaled by expert
# bytes (tide sim --scale-profile), as docs/profiles.md describes.
# On a terminal, each step k/6 is announced on stderr with the seconds spent
# so far, and the tide commands show their progress lines (TIDE_PROGRESS=1:
# their messages stay quiet); set TIDE_PROGRESS=0 to turn those off.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out=study-out
tide="$root/build/tide"
max_prompts=16
quick=0
reuse=0
ckpts=()
while [ $# -gt 0 ]; do
    case "$1" in
    -o) out="$2"; shift 2 ;;
    -t) tide="$2"; shift 2 ;;
    -p) max_prompts="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    --reuse) reuse=1; shift ;;
    -h | --help) sed -n '2,42p' "$0"; exit 0 ;;
    -*) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) ckpts+=("$(cd "$1" && pwd)"); shift ;;
    esac
done
[ -x "$tide" ] || { echo "run.sh: no tide binary at $tide (build first, or -t)" >&2; exit 2; }
mkdir -p "$out/traces" "$out/sim" "$out/plots" "$out/models"
out="$(cd "$out" && pwd)"
profiles=(h200-pcie5 rtx4090-pcie4)
policies=tide,lru,lfu,static,cost,hybrid,warm
intervals=1-32
skews=(0.6 1.0 1.4)
sims=(0.9 0.95 0.985)
if [ "$quick" = 1 ]; then
    skews=(1.0)
    intervals=1,2,4,8,16,32
fi
# The steps on stderr; the commands' own progress lines on a terminal (they
# run with --quiet, which would otherwise turn them off).
t0=$SECONDS
step() {
    echo "run.sh: step $1/6, $(( SECONDS - t0 )) s elapsed: $2" >&2
}
if [ -t 2 ] && [ -z "${TIDE_PROGRESS:-}" ]; then
    export TIDE_PROGRESS=1
fi

# 1. Synthetic traces.
step 1 "synthetic traces (${#skews[@]} skews x ${#sims[@]} similarities)"
traces=()
for k in "${skews[@]}"; do
    for c in "${sims[@]}"; do
        t="$out/traces/synth-skew$k-cos$c.trc"
        if [ "$reuse" = 1 ] && [ -f "$t" ]; then
            traces+=("$t")
        elif "$tide" --quiet trace synth "$t" --preset llada2-mini --skew "$k" --similarity "$c" \
            --force 2>"$out/traces/synth-skew$k-cos$c.log"; then
            traces+=("$t")
        else
            echo "synth skew $k cosine $c: $(tail -1 "$out/traces/synth-skew$k-cos$c.log")"
        fi
    done
done

# 2. Recorded traces.
step 2 "recorded traces (tide mkmodel, tide bench)"
if [ ${#ckpts[@]} -eq 0 ]; then
    ckpts=("$out/models/small")
    [ -f "$out/models/small/config.json" ] ||
        "$tide" --quiet mkmodel "$out/models/small" --preset small --seed 3
    if [ "$quick" = 0 ]; then
        ckpts+=("$out/models/llada2-mini-2l")
        [ -f "$out/models/llada2-mini-2l/config.json" ] ||
            "$tide" --quiet mkmodel "$out/models/llada2-mini-2l" --preset llada2-mini --layers 2 \
                --seed 3
    fi
fi
for m in "${ckpts[@]}"; do
    name="rec-$(basename "$m")"
    t="$out/traces/$name.trc"
    if [ "$reuse" = 1 ] && [ -f "$t" ]; then
        traces+=("$t")
        continue
    fi
    rm -rf "$out/traces/$name-bench"
    "$tide" --quiet bench --policies static --budgets all --set bench.baseline=false \
        --set model.path="$m" --set generation.gen_length=64 --set output.progress=false \
        --set backend-cpu-onednn.threads=1 \
        --prompts "$root/bench/prompts/prompts.txt" --max-prompts "$max_prompts" \
        --out "$out/traces/$name-bench" --set output.trace="$t" --set output.overwrite=true \
        >/dev/null
    traces+=("$t")
done

# 3. Replays.
step 3 "replays of ${#traces[@]} traces under ${#profiles[@]} profiles (tide sim)"
for t in "${traces[@]}"; do
    name="$(basename "$t" .trc)"
    experts="$("$tide" trace info "$t" | sed -n "s/^shape: [0-9]* MoE layers x \([0-9]*\) experts.*/\1/p")"
    budgets="$((experts / 8)),$((experts / 4)),$((experts / 2))"
    for prof in "${profiles[@]}"; do
        echo "sim $name on $prof (budgets $budgets)"
        "$tide" --quiet sim --trace "$t" --profile "$root/config/profiles/$prof.ini" \
            --scale-profile --policy "$policies" --budget "$budgets" --interval "$intervals" \
            --csv "$out/sim/$name--$prof.csv" --plot "$out/plots/$name--$prof" --force \
            >"$out/sim/$name--$prof.txt"
    done
done

# 4. The table.
step 4 "the table (study.md, study.csv)"
python3 - "$out" <<'EOF'
import csv, glob, os, sys
out = sys.argv[1]
cols = ["policy-tide", "policy-lru", "policy-lfu", "policy-static", "belady", "best-static",
        "policy-cost", "policy-hybrid", "policy-warm"]
new = ["policy-cost", "policy-hybrid", "policy-warm", "policy-lfu"]
rows = []
for path in sorted(glob.glob(os.path.join(out, "sim", "*.csv"))):
    trace, prof = os.path.basename(path)[:-4].split("--")
    by = {}
    for r in csv.DictReader(open(path)):
        if not r["model_us"]:
            continue
        b = int(r["budget"]) if r["budget"].isdigit() else None
        if b is None:
            continue
        us = float(r["model_us"])
        cur = by.setdefault(b, {})
        if r["policy"] not in cur or us < cur[r["policy"]][0]:
            cur[r["policy"]] = (us, r["interval"], float(r["model_ms_per_step"]))
    for b in sorted(by):
        d = by[b]
        o = d["oracle"][0]
        row = {"trace": trace, "profile": prof, "budget": b, "oracle_ms": d["oracle"][2],
               "tide_interval": d["policy-tide"][1]}
        for c in cols:
            row[c] = d[c][0] / o if c in d else float("nan")
        best = min(new, key=lambda c: row[c])
        row["best_new"] = best
        row["best_new_vs_tide"] = d[best][0] / d["policy-tide"][0]
        rows.append(row)
fields = ["trace", "profile", "budget", "oracle_ms", "tide_interval"] + cols + ["best_new",
                                                                                  "best_new_vs_tide"]
with open(os.path.join(out, "study.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=fields)
    w.writeheader()
    w.writerows(rows)
short = {"policy-tide": "tide (best τ)", "policy-lru": "lru", "policy-lfu": "lfu",
         "policy-static": "static", "belady": "belady", "best-static": "best-static",
         "policy-cost": "cost", "policy-hybrid": "hybrid", "policy-warm": "warm"}
with open(os.path.join(out, "study.md"), "w") as f:
    f.write("| trace | profile | budget | oracle ms/step | " +
            " | ".join(short[c] for c in cols) + " | best new / tide |\n")
    f.write("|---" * (5 + len(cols)) + "|\n")
    for r in rows:
        cells = []
        for c in cols:
            v = "%.3f" % r[c]
            if c == "policy-tide":
                v += " (%s)" % r["tide_interval"]
            if c == r["best_new"]:
                v = "**" + v + "**"
            cells.append(v)
        f.write("| %s | %s | %d | %.2f | %s | %.3f |\n" % (
            r["trace"], r["profile"].split("-")[0], r["budget"], r["oracle_ms"],
            " | ".join(cells), r["best_new_vs_tide"]))
worst = max(rows, key=lambda r: r[r["best_new"]])
print("study: %d rows in %s/study.md and study.csv; the best new policy is at most %.3fx the "
      "oracle (%s, %s, budget %d) and at most %.3fx policy-tide's best interval" % (
          len(rows), out, worst[worst["best_new"]], worst["trace"], worst["profile"],
          worst["budget"], max(r["best_new_vs_tide"] for r in rows)))
EOF

# 5. The batch axis (recorded traces: their prompts are real sequences).
step 5 "the batch axis (tide sim --batch)"
batch_sizes=(1 2 4 8 16)
mkdir -p "$out/sim-batch"
for t in "${traces[@]}"; do
    name="$(basename "$t" .trc)"
    case "$name" in rec-*) ;; *) continue ;; esac
    experts="$("$tide" trace info "$t" | sed -n "s/^shape: [0-9]* MoE layers x \([0-9]*\) experts.*/\1/p")"
    budgets="$((experts / 8)),$((experts / 4)),$((experts / 2))"
    for prof in "${profiles[@]}"; do
        for b in "${batch_sizes[@]}"; do
            [ "$b" -le "$max_prompts" ] || continue
            echo "sim $name on $prof, batches of $b"
            "$tide" --quiet sim --trace "$t" --profile "$root/config/profiles/$prof.ini" \
                --scale-profile --policy tide,lru,cost,static --budget "$budgets" \
                --interval "$intervals" --batch "$b" --no-hindsight \
                --csv "$out/sim-batch/$name--$prof--b$b.csv" --force \
                >"$out/sim-batch/$name--$prof--b$b.txt"
        done
    done
done
python3 "$root/bench/policy-study/batch_table.py" "$out"

# 6. The format axis: each trace's routing replayed with experts in bf16,
#    fp8, q8_0 and q4_0 (`tide sim --experts`): promotions move the format's
#    bytes, expert compute keeps the profile's curves (measured in bf16);
#    format.md and format.csv: TIDE's best interval and the best policy per
#    format.
step 6 "the format axis (tide sim --experts)"
mkdir -p "$out/sim-format"
for t in "${traces[@]}"; do
    name="$(basename "$t" .trc)"
    experts="$("$tide" trace info "$t" | sed -n "s/^shape: [0-9]* MoE layers x \([0-9]*\) experts.*/\1/p")"
    budgets="$((experts / 8)),$((experts / 4))"
    for prof in "${profiles[@]}"; do
        for fmt in bf16 fp8 q8_0 q4_0; do
            echo "sim $name on $prof, $fmt experts"
            "$tide" --quiet sim --trace "$t" --profile "$root/config/profiles/$prof.ini" \
                --scale-profile --experts "$fmt" --policy tide,lru,cost,static \
                --budget "$budgets" --interval "$intervals" \
                --csv "$out/sim-format/$name--$prof--$fmt.csv" --force \
                >"$out/sim-format/$name--$prof--$fmt.txt"
        done
    done
done
python3 "$root/bench/policy-study/format_table.py" "$out"
echo "run.sh: done, $(( SECONDS - t0 )) s in all; results in $out" >&2
