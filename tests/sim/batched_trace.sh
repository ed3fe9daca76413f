#!/bin/sh
# A routing trace recorded from a batched run (tide bench --batch 4 with
# [output] trace: join and batch records, format version 3) replays in
# tide sim exactly as the same prompts recorded one at a time and replayed
# with tide sim --batch 4: every row (counters and modelled time, under
# every policy, budget and interval) and the header lines are identical.
# This ties the simulator's batch rule (core/sim/sim_batch.c) to the
# engine's (core/runtime/batch.c).
# usage: batched_trace.sh TIDE_BIN SOURCE_DIR
set -u
tide=$1
src=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tide-batched-trace.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
common="-c $src/config/llada2-tiny.ini --set model.path=$tmp/tiny --set model.create=tiny
 --prompts $src/bench/prompts/prompts.txt --max-prompts 6 --policies static --budgets all
 --set bench.baseline=false --set backend.device=backend-cpu-onednn"
# shellcheck disable=SC2086
"$tide" --quiet bench $common --batch 1 --set output.trace=single.trc --out s >bench1.log 2>&1 ||
    { cat bench1.log; echo "FAIL: tide bench --batch 1"; exit 1; }
# shellcheck disable=SC2086
"$tide" --quiet bench $common --batch 4 --set output.trace=batched.trc --out b >bench4.log 2>&1 ||
    { cat bench4.log; echo "FAIL: tide bench --batch 4"; exit 1; }
"$tide" trace info batched.trc >info.txt 2>&1 || { cat info.txt; exit 1; }
grep -Eq "format version [34]" info.txt || { cat info.txt; echo "FAIL: not a version-3 (or later) trace"; exit 1; }
sim() {
    "$tide" sim --trace "$@" --policy tide,lru,static,cost,warm --budget 4,8,16 --interval 1,4 \
        --profile "$src/config/profiles/h200-pcie5.ini" --scale-profile 2>&1 |
        grep -v '^replayed\|^trace \|^tide: '
}
sim single.trc --batch 4 >from_single.txt
sim batched.trc >from_batched.txt
rows=$(grep -c '^policy-' from_batched.txt)
[ "$rows" -ge 15 ] || { cat from_batched.txt; echo "FAIL: $rows policy rows"; exit 1; }
if ! diff from_single.txt from_batched.txt; then
    echo "FAIL: the batched trace replays differently from the single trace with --batch 4"
    exit 1
fi
echo "PASS: a batched trace and tide sim --batch 4 of the single trace agree on $rows policy rows"
