#!/bin/sh
# `tide policy-check` end to end.
#   policy_check.sh TIDE ok PLUGIN          the policy passes every check (exit 0)
#   policy_check.sh TIDE broken BROKEN_SO OTHER_SO
#       policy-broken.so (policy_broken.c) passes without a fault, loaded by
#       path; each planted fault fails (exit 1) with the check it breaks
#       named on a FAIL line; usage errors exit 2, among them OTHER_SO, a
#       plugin of another kind.
set -u
tide=$1 mode=$2 arg=$3 other=${4:-}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fails=0

# expect EXIT TEXT ARGS...: run tide policy-check ARGS, want exit EXIT and TEXT in its output.
expect() {
    want_rc=$1 want_text=$2
    shift 2
    "$tide" --quiet policy-check "$@" >"$out" 2>&1
    rc=$?
    if [ "$rc" -ne "$want_rc" ] || ! grep -qF -- "$want_text" "$out"; then
        echo "FAIL: policy-check $* exited $rc (want $want_rc), output wants '$want_text':"
        cat "$out"
        fails=$((fails + 1))
    else
        echo "ok   policy-check $* -> $rc, '$want_text'"
    fi
}

case $mode in
ok)
    expect 0 "policy-check: $arg: PASS (every check held)" "$arg" --seeds 2
    ;;
broken)
    expect 0 "PASS (every check held)" "$arg" --set policy-broken.fault=none --seeds 2
    expect 1 "FAIL resident set <= budget" "$arg" --set policy-broken.fault=budget --seeds 2
    expect 1 "FAIL routing and residency left unaltered" "$arg" \
        --set policy-broken.fault=routing --seeds 2 --only props
    expect 1 "FAIL plan rules (promote, evict, place)" "$arg" --set policy-broken.fault=place \
        --seeds 2 --only props
    expect 1 "FAIL deterministic" "$arg" --set policy-broken.fault=random --seeds 2 --only props
    expect 1 "FAIL initial(): <= B distinct experts" "$arg" --set policy-broken.fault=initial \
        --seeds 2 --only props
    expect 1 "FAIL prefetch rules (step_begin)" "$arg" --set policy-broken.fault=prefetch \
        --seeds 2
    # The engine refuses the invalid plan: the lossless comparison fails too.
    expect 1 "FAIL: " "$arg" --set policy-broken.fault=place --only lossless --budgets 4
    # The failure names where: budget, seed, block, step and layer.
    expect 1 "first at" "$arg" --set policy-broken.fault=budget --only props --seeds 1
    grep -qE "n_experts [0-9]+ B [0-9]+ seed [0-9]+ .*block [0-9]+ step [0-9]+ layer [0-9]+" \
        "$out" || { echo "FAIL: the first failure does not name its place:"; cat "$out";
                    fails=$((fails + 1)); }
    expect 2 "did you mean 'policy-lru'" policy-lr
    expect 2 "not a policy" "$other"
    expect 2 "--budgets takes" "$arg" --budgets x
    expect 2 "did you mean '--seeds'" "$arg" --seed 2
    ;;
*)
    echo "usage: policy_check.sh TIDE ok PLUGIN | TIDE broken BROKEN_SO OTHER_SO"
    exit 2
    ;;
esac
[ "$fails" -eq 0 ] && echo "all passed" || echo "$fails failed"
[ "$fails" -eq 0 ]
