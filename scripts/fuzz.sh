#!/usr/bin/env bash
# Fuzz every parser of user-controlled input with libFuzzer (docs/hardening.md).
#
#   scripts/fuzz.sh [-t SECONDS] [TARGET...]
#
# Installs clang and libFuzzer (libclang-rt-14-dev) when missing, configures
# ${TIDE_FUZZ_BUILD_DIR:-build-fuzz} with CC=clang -DTIDE_FUZZ=ON, builds the
# targets, then runs each for SECONDS (default 30) in turn, starting from the
# committed seeds (tests/fuzz/corpus/T) and regression inputs
# (tests/fuzz/regressions/T). New inputs go to BUILD/fuzz-corpus/T, findings
# to BUILD/fuzz-findings/. Prints one line per target (executions, coverage,
# corpus) and exits 1 when any target found a crash, leak, timeout or failed
# property. Targets: safetensors st_index config_json tokenizer_json
# tokenizer_encode ini trace serve_request (default: all).
#
# Each target runs with TMPDIR=BUILD/fuzz-tmp/T, removed afterwards: libFuzzer
# leaves with _Exit on a finding (no atexit cleanup), so the targets' scratch
# folders never land in /tmp. TIDE_FUZZ_SKIP_BUILD=1 reuses the targets
# already built.
set -euo pipefail

seconds=30
while getopts "t:h" opt; do
    case "$opt" in
    t) seconds="$OPTARG" ;;
    *) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
    esac
done
shift $((OPTIND - 1))

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${TIDE_FUZZ_BUILD_DIR:-$root/build-fuzz}"
all=(safetensors st_index config_json tokenizer_json tokenizer_encode ini trace serve_request)
targets=("${@:-${all[@]}}")

# The packages, configure and build: setup.sh does it for this build folder.
if [ "${TIDE_FUZZ_SKIP_BUILD:-0}" != 1 ]; then
    (
        export TIDE_BUILD_DIR="$build" CC=clang TIDE_BUILD_TARGETS=fuzz_all
        export TIDE_CMAKE_ARGS="-DTIDE_FUZZ=ON -DTIDE_WITH_CUDA=OFF ${TIDE_CMAKE_ARGS:-}"
        source "$root/scripts/setup.sh"
    )
fi

mkdir -p "$build/fuzz-findings" "$build/fuzz-logs"
failed=0
printf '%-18s %10s %9s %7s %7s %s\n' target execs exec/s cov ft corpus
for t in "${targets[@]}"; do
    bin="$build/fuzz/fuzz_$t"
    [ -x "$bin" ] || { echo "fuzz.sh: no target '$t' ($bin)" >&2; exit 2; }
    work="$build/fuzz-corpus/$t"
    log="$build/fuzz-logs/$t.log"
    mkdir -p "$work"
    dict=()
    [ -f "$root/tests/fuzz/dict/$t.dict" ] && dict=(-dict="$root/tests/fuzz/dict/$t.dict")
    rc=0
    scratch="$build/fuzz-tmp/$t"
    rm -rf "$scratch"
    mkdir -p "$scratch"
    # -timeout: one input may take 10 s at most (a hang is a finding);
    # -rss_limit_mb / -malloc_limit_mb: a header claiming 2^60 bytes must not
    # make the parser allocate it.
    TMPDIR="$scratch" "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$build/fuzz-findings/$t-" \
        "${dict[@]}" "$work" "$root/tests/fuzz/corpus/$t" "$root/tests/fuzz/regressions/$t" \
        >"$log" 2>&1 || rc=$?
    rm -rf "$scratch"
    done_line="$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)"
    execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
    speed="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)"
    cov="$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$done_line")"
    ft="$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$done_line")"
    corp="$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$done_line")"
    printf '%-18s %10s %9s %7s %7s %s\n' "$t" "${execs:-?}" "${speed:-?}" "${cov:-?}" "${ft:-?}" \
        "${corp:-?}"
    if [ "$rc" -ne 0 ]; then
        failed=1
        echo "fuzz.sh: $t FAILED (exit $rc); log $log; reproducer:" >&2
        grep -E 'Test unit written to|SUMMARY|ERROR|fuzz property' "$log" >&2 || tail -30 "$log" >&2
    fi
done
rmdir "$build/fuzz-tmp" 2>/dev/null || true
if [ "$failed" -ne 0 ]; then
    echo "fuzz.sh: findings in $build/fuzz-findings (replay one: $build/fuzz/fuzz_T FILE)" >&2
    exit 1
fi
echo "fuzz.sh: ${#targets[@]} targets, ${seconds} s each, no finding"
