#!/usr/bin/env bash
# Thread wake-ups per forward, this build against a baseline, in one run.
#
#   bench/wakeups/run.sh [--build DIR] [--baseline DIR] [--rounds N] [-- ARGS]
#
# bench-wakeups (bench_wakeups.c, public API only) is built against each
# build's libtide and headers, then the two run alternately, N rounds
# (default 3), each round one process per build running the prompts one at
# a time and as a batch (ARGS go to bench-wakeups: -c CONFIG, --set S.K=V,
# --batch B, --prompts N). Prints one markdown table with the CPU named:
# voluntary context switches (getrusage, every thread of the process) per
# forward call of the model. A baseline older than engine API 4 cannot say
# its forward calls; its rows are then per pass (a request's forwards), which
# for one sequence at a time and no cfg is the same count.
#
# --build defaults to ./build; --baseline is optional (without it, this
# build alone). Run it from the source tree, on a quiet machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$root/build
baseline=
rounds=3
while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --baseline) baseline=$(cd "$2" && pwd); shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
work=$(mktemp -d "${TMPDIR:-/tmp}/tide-wakeups.XXXXXX")
trap 'rm -rf "$work"' EXIT

# Build bench-wakeups against a build folder: its source tree's public
# headers, its libtide.
compile() { # BUILD OUT
    local src
    src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$1/CMakeCache.txt")
    [ -d "$src/core/include/tide" ] || { echo "run.sh: $1 is not a tide build folder" >&2; exit 2; }
    cc -O2 -std=c11 -D_GNU_SOURCE -I"$src/core/include" "$here/bench_wakeups.c" \
        -L"$1/lib" -ltide -Wl,-rpath,"$1/lib" -o "$2"
}
compile "$build" "$work/new"
[ -n "$baseline" ] && compile "$baseline" "$work/base"

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "CPU: ${cpu:-unknown}, $(nproc) CPUs; $(date -u +%Y-%m-%d); rounds $rounds, alternated"
: >"$work/rows"
for r in $(seq 1 "$rounds"); do
    if [ -n "$baseline" ]; then
        (cd "$root" && TIDE_PLUGIN_PATH="$baseline/plugins" "$work/base" --label baseline \
            --repeats 1 "$@") | tail -n +2 >>"$work/rows"
    fi
    (cd "$root" && TIDE_PLUGIN_PATH="$build/plugins" "$work/new" --label "this build" \
        --repeats 1 "$@") | tail -n +2 >>"$work/rows"
done
echo
echo "| build | mode | round | requests | passes | forward calls | tokens | voluntary | involuntary | voluntary per forward | s |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
awk -F'\t' '$3 >= 0 { n[$1 FS $2]++; printf "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %.3f |\n", $1, $2, n[$1 FS $2], $4, $5, $6, $7, $8, $9, $10, $11 }' \
    "$work/rows" | sort -t'|' -k2,2 -k3,3 -s
