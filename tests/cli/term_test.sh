#!/bin/sh
# Issue 38's command-line defects, each a case (ctest cli_term_CASE):
#   tty      on a terminal (tmux), the progress line never erases streamed
#            text: the screen holds every generated token;
#   blocks   stdout and stderr into one pipe: no [block i/n] line cuts the
#            text;
#   names    short plugin names in --set (policy.plugin=lru, model.plugin,
#            backend.host), did-you-mean for --policies, subcommands and
#            flags, `tide help CMD`;
#   exits    a missing -c file or [model] path exits 2; inspect of a missing
#            folder prints nothing after its error;
#   quantize a quantized LLaDA2.1 checkpoint still decodes as 2.1, and the
#            size line of a small model is not "0.00 GB".
# usage: term_test.sh CASE TIDE
set -u
case_name=$1 tide=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/tide-term.XXXXXX") || exit 1
trap 'rm -rf "$work"; [ -n "${sock:-}" ] && tmux -L "$sock" kill-server 2>/dev/null' EXIT
failed=0
unset TIDE_PLUGIN_PATH TIDE_LOG_LEVEL TIDE_PROGRESS

fail() {
    echo "FAIL ($case_name): $*"
    failed=1
}

# run ARGS...: tide ARGS, stdout to $work/out, stderr to $work/err.
run() {
    "$tide" "$@" >"$work/out" 2>"$work/err"
    status=$?
}

has() {
    grep -qF -- "$2" "$work/$1" || { fail "expected in $1: $2"; cat "$work/$1"; }
}

tiny() {
    "$tide" --quiet mkmodel "$work/tiny" --preset tiny >/dev/null 2>&1 || fail "mkmodel"
    printf '[model]\npath = %s/tiny\n[generation]\ngen_length = 64\nblock_length = 16\n[output]\nstream = true\nprogress = true\n' \
        "$work" >"$work/t.ini"
}

# No whitespace: the screen wraps lines where the text does not.
squash() { tr -d ' \t\r\n' <"$1"; }

case "$case_name" in
tty)
    command -v tmux >/dev/null 2>&1 || { echo "no tmux: skipped"; exit 77; }
    tiny
    TIDE_PROGRESS=0 "$tide" --quiet run -c "$work/t.ini" -p 'Hello there' >"$work/ref" 2>/dev/null ||
        fail "the reference run"
    [ -s "$work/ref" ] || fail "no reference text"
    sock=tide-term-$$
    printf '"%s" run -c "%s" -p "Hello there"; echo __DONE__; sleep 60\n' "$tide" "$work/t.ini" \
        >"$work/cmd.sh"
    tmux -L "$sock" -f /dev/null new-session -d -x 160 -y 60 "sh $work/cmd.sh" || fail "tmux"
    i=0
    while [ $i -lt 120 ]; do
        tmux -L "$sock" capture-pane -p -J -S - >"$work/screen" 2>/dev/null
        grep -q __DONE__ "$work/screen" && break
        sleep 0.5
        i=$((i + 1))
    done
    grep -q __DONE__ "$work/screen" || fail "the run did not end"
    squash "$work/ref" >"$work/ref.s"
    squash "$work/screen" >"$work/screen.s"
    grep -qF -- "$(cat "$work/ref.s")" "$work/screen.s" || {
        fail "the screen lacks generated text"
        echo "--- text:"; cat "$work/ref"; echo "--- screen:"; cat "$work/screen"
    }
    ;;
blocks)
    tiny
    TIDE_PROGRESS=0 "$tide" --quiet run -c "$work/t.ini" -p 'Hello there' >"$work/ref" 2>/dev/null
    # stderr not a terminal, shared with stdout (2>&1 into a pipe).
    "$tide" run -c "$work/t.ini" -p 'Hello there' 2>&1 | cat >"$work/both"
    grep -qF -- "$(head -c 40 "$work/ref")" "$work/both" || fail "text cut"
    grep -F -- "$(sed -n 1p "$work/ref")" "$work/both" >/dev/null || {
        fail "the text's line is not whole in the shared stream"
        cat "$work/both"
    }
    if grep -q '.\[block [0-9]' "$work/both"; then
        fail "a [block i/n] line runs into the text"
        cat "$work/both"
    fi
    # Nor does a log line (the summary after the text, from a stderr that
    # is not buffered like stdout).
    if grep -q '.tide: ' "$work/both"; then
        fail "a log line runs into the text"
        cat "$work/both"
    fi
    # stderr to its own file: a line per block there, none in stdout.
    run run -c "$work/t.ini" -p 'Hello there'
    has err "[block 1/"
    if grep -q '\[block' "$work/out"; then fail "block lines in stdout"; fi
    ;;
names)
    tiny
    run run -c "$work/t.ini" --set policy.plugin=lru --set policy.budget=4 \
        --set backend.host=cpu-onednn --set model.plugin=llada2 -p Hi
    [ "$status" -eq 0 ] || { fail "short names in --set: exit $status"; cat "$work/err"; }
    has err "policy-lru"
    run bench -c "$work/t.ini" --policies lur --budgets 4 --out "$work/b"
    [ "$status" -eq 2 ] || fail "--policies lur: exit $status"
    has err "did you mean 'lru'?"
    run benchh
    [ "$status" -eq 2 ] || fail "tide benchh: exit $status"
    has err "did you mean 'bench'?"
    run run --budget 8 -p Hi
    [ "$status" -eq 2 ] || fail "tide run --budget: exit $status"
    has err "did you mean '--set policy.budget=VALUE'?"
    run help bench
    [ "$status" -eq 0 ] || fail "tide help bench: exit $status"
    has out "usage: tide bench"
    ;;
exits)
    tiny
    run run -c "$work/nope.ini" -p Hi
    [ "$status" -eq 2 ] || { fail "missing -c file: exit $status"; cat "$work/err"; }
    run run -c "$work/t.ini" --set "model.path=$work/nowhere" -p Hi
    [ "$status" -eq 2 ] || { fail "missing [model] path: exit $status"; cat "$work/err"; }
    run inspect "$work/nowhere"
    [ "$status" -eq 2 ] || fail "inspect of a missing folder: exit $status"
    if [ -s "$work/out" ] || grep -q decoder "$work/err"; then
        fail "output after inspect's fatal error"
        cat "$work/out" "$work/err"
    fi
    ;;
quantize)
    tiny
    # A LLaDA2.1 checkpoint: auto_map and remote code whose generate()
    # takes editing_threshold (plugins/model-llada2/llada2_family.c).
    python3 - "$work/tiny" <<'PY' || fail "editing config.json"
import json, sys
p = sys.argv[1] + "/config.json"
c = json.load(open(p))
c["auto_map"] = {"AutoModelForCausalLM": "modeling_llada2_moe.LLaDA2MoeModelLM"}
json.dump(c, open(p, "w"), indent=2)
open(sys.argv[1] + "/modeling_llada2_moe.py", "w").write(
    "class LLaDA2MoeModelLM:\n    def generate(self, inputs=None, editing_threshold=0.9):\n"
    "        return inputs\n")
PY
    run inspect "$work/tiny"
    has out "decoder: decoder-llada21"
    run quantize "$work/tiny" "$work/q8" --experts q8_0
    [ "$status" -eq 0 ] || { fail "quantize: exit $status"; cat "$work/err"; }
    if grep -q ' 0\.00 of 0\.00 GB\| 0\.000 GB' "$work/out" "$work/err"; then
        fail "sizes of a small model in GB"
        cat "$work/out" "$work/err"
    fi
    run inspect "$work/q8"
    has out "decoder: decoder-llada21"
    ;;
*)
    echo "unknown case $case_name"
    exit 2
    ;;
esac
exit $failed
