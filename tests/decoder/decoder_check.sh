#!/bin/sh
# `tide decoder-check` end to end.
#   decoder_check.sh TIDE ok PLUGIN          the decoder passes every check (exit 0)
#   decoder_check.sh TIDE broken BROKEN_SO OTHER_SO
#       decoder-broken.so (decoder_broken.c) passes without a fault, loaded
#       by path; each planted fault fails (exit 1) with the check it breaks
#       named on a FAIL line and in the verdict; usage errors exit 2, among
#       them OTHER_SO, a plugin of another kind.
set -u
tide=$1 mode=$2 arg=$3 other=${4:-}
shift 3
[ $# -gt 0 ] && shift
extra=$*
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fails=0

# expect EXIT TEXT ARGS...: run tide decoder-check ARGS, want exit EXIT and TEXT in its output.
expect() {
    want_rc=$1 want_text=$2
    shift 2
    "$tide" --quiet decoder-check "$@" >"$out" 2>&1
    rc=$?
    if [ "$rc" -ne "$want_rc" ] || ! grep -qF -- "$want_text" "$out"; then
        echo "FAIL: decoder-check $* exited $rc (want $want_rc), output wants '$want_text':"
        cat "$out"
        fails=$((fails + 1))
    else
        echo "ok   decoder-check $* -> $rc, '$want_text'"
    fi
}

# want TEXT: the last run's output also holds TEXT.
want() {
    grep -qF -- "$1" "$out" || { echo "FAIL: the output lacks '$1':"; cat "$out";
                                 fails=$((fails + 1)); }
}

case $mode in
ok)
    # shellcheck disable=SC2086
    expect 0 "PASS (every check held)" "$arg" $other $extra
    ;;
broken)
    b=decoder-broken
    expect 0 "decoder-check: $b: PASS (every check held)" "$arg" --budgets 4
    expect 1 "decoder-check: $b: FAIL: plan bounds" "$arg" --set $b.fault=forwards --budgets 4
    want "FAIL plan bounds: prompt 5 tokens, greedy: "
    want "more than the plan's max_forwards 1"
    expect 1 "decoder-check: $b: FAIL: plan bounds" "$arg" --set $b.fault=steps --budgets 4
    want "ran step 1, more than the plan's max_steps 1"
    expect 1 "decoder-check: $b: FAIL: plan bounds" "$arg" --set $b.fault=span --budgets 4
    want "the run failed before its first step ended: "
    want "a span beyond its plan's positions"
    expect 1 "FAIL deterministic: prompt " "$arg" --set $b.fault=random --budgets 4
    want "ids differ from token 0 on"
    # Alone it is faithful; only the batch tells.
    expect 1 "decoder-check: $b: FAIL: batch invariant" "$arg" --set $b.fault=batch --budgets 4
    want "FAIL batch invariant: prompt 70 tokens, greedy"
    expect 2 "did you mean 'decoder-llada'" decoder-llada3
    expect 2 "not a decoder" "$other"
    expect 2 "--budgets takes" "$arg" --budgets x
    expect 2 "did you mean '--model'" "$arg" --modle model-llada2
    ;;
*)
    echo "usage: decoder_check.sh TIDE ok PLUGIN | TIDE broken BROKEN_SO OTHER_SO"
    exit 2
    ;;
esac
[ "$fails" -eq 0 ] && echo "all passed" || echo "$fails failed"
[ "$fails" -eq 0 ]
