#!/bin/sh
# The progress lines of long commands (cli/progress.h): drawn on a terminal,
# never when stderr is a file, and not with --quiet or TIDE_PROGRESS=0.
# usage: progress_test.sh CASE TIDE
# The terminal is a pseudo-terminal from script(1) (util-linux), else from
# python3's pty module; with neither the test is skipped (77).
set -u
case_name=$1 tide=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/tide-progress.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
failed=0
unset TIDE_PLUGIN_PATH TIDE_LOG_LEVEL TIDE_PROGRESS

if command -v script >/dev/null 2>&1 && script -qec true /dev/null >/dev/null 2>&1; then
    pty=script
elif command -v python3 >/dev/null 2>&1 && python3 -c 'import pty' 2>/dev/null; then
    pty=python
else
    echo "neither script(1) nor python3's pty module: skipped"
    exit 77
fi

# on_tty ARGS...: run tide ARGS with stdout and stderr on a pseudo-terminal;
# what it wrote (carriage returns kept) goes to $work/tty.
on_tty() {
    last="tide $* (on a terminal)"
    : >"$work/cmd.sh"
    for a in "$tide" "$@"; do
        printf "'%s' " "$(printf '%s' "$a" | sed "s/'/'\\\\''/g")" >>"$work/cmd.sh"
    done
    echo >>"$work/cmd.sh"
    if [ "$pty" = script ]; then
        script -qec "sh $work/cmd.sh" /dev/null >"$work/tty" 2>&1 </dev/null
    else
        python3 -c 'import pty, sys; sys.exit(pty.spawn(["sh", sys.argv[1]]) >> 8)' \
            "$work/cmd.sh" >"$work/tty" 2>&1 </dev/null
    fi
    status=$?
}

# to_file ARGS...: run tide ARGS with stderr into $work/err.
to_file() {
    last="tide $* (stderr to a file)"
    "$tide" "$@" >"$work/out" 2>"$work/err"
    status=$?
}

fail() {
    echo "FAIL ($last): $*"
    failed=1
}

show() {
    echo "--- output:"
    cat -v "$1"
    echo "---"
}

expect_ok() {
    [ "$status" -eq 0 ] || { fail "exit status $status"; show "$1"; }
}

# has FILE TEXT...: each TEXT is a fixed string of FILE.
has() {
    f=$1
    shift
    for text in "$@"; do
        grep -qF -- "$text" "$f" || { fail "expected: $text"; show "$f"; }
    done
}

# no_progress FILE PATTERN: no progress line (PATTERN) and no carriage return.
no_progress() {
    if grep -qF -- "$2" "$1"; then
        fail "a progress line ($2) where none belongs"
        show "$1"
    fi
    if [ "$1" = "$work/err" ] && tr -d -c '\r' <"$1" | grep -q .; then
        fail "a carriage return in stderr"
        show "$1"
    fi
}

tiny() {
    "$tide" --quiet mkmodel "$work/tiny" --preset tiny >/dev/null 2>&1 || fail "mkmodel"
    printf '[model]\npath = %s/tiny\n[generation]\ngen_length = 32\n[output]\nprogress = false\nstream = false\n' \
        "$work" >"$work/t.ini"
    printf 'hello\nwrite a haiku about the sea\nwhat is the capital of France?\n' >"$work/prompts.txt"
}

case "$case_name" in
bench)
    # configuration i/n, prompt j/m and the label, and an ETA once a unit is
    # done (the line is redrawn at once after each table row, so the second
    # configuration's first prompt shows one): a baseline and 2 x 2
    # configurations of 3 prompts.
    tiny
    on_tty bench -c "$work/t.ini" --prompts "$work/prompts.txt" --policies lru,tide \
        --budgets 4,8 --intervals 2 --out "$work/b0"
    expect_ok "$work/tty"
    has "$work/tty" "tide bench: configuration 1/5, prompt 1/3: baseline b32" "ETA"
    grep -q "$(printf '\r')" "$work/tty" || fail "no carriage return on the terminal"
    # The rest on a baseline and one configuration.
    set -- bench -c "$work/t.ini" --prompts "$work/prompts.txt" --policies tide --budgets 8 \
        --intervals 2
    on_tty "$@" --out "$work/b1"
    has "$work/tty" ": policy-tide b8 i2"
    to_file "$@" --out "$work/b2"
    expect_ok "$work/err"
    no_progress "$work/err" "configuration 1/2"
    on_tty "$@" --out "$work/b3" --quiet
    expect_ok "$work/tty"
    no_progress "$work/tty" "configuration 1/2"
    on_tty "$@" --out "$work/b4" -q
    no_progress "$work/tty" "configuration 1/2"
    export TIDE_PROGRESS=0
    on_tty "$@" --out "$work/b5"
    unset TIDE_PROGRESS
    no_progress "$work/tty" "configuration 1/2"
    # The table on stdout is whole: no row begins after a progress line's text.
    on_tty "$@" --out "$work/b6"
    if tr '\r' '\n' <"$work/tty" | grep -q 'ETA [0-9a-z ]*policy-'; then
        fail "a table row printed onto the progress line"
        show "$work/tty"
    fi
    ;;
sim)
    # configuration i/n over the grid, then the oracle's layers.
    tiny
    "$tide" --quiet run -c "$work/t.ini" --set "output.trace=$work/t.trc" --ids 1,2,3 \
        >/dev/null 2>&1 || fail "recording a trace"
    set -- sim --trace "$work/t.trc" --policies lru,tide --budgets 4,8 --intervals 1,2 \
        --profile "$(dirname "$0")/../../config/profiles/h100-pcie5.ini" --scale-profile
    on_tty "$@"
    expect_ok "$work/tty"
    # Per budget: lru, tide at 2 intervals, belady, best-static, oracle.
    has "$work/tty" "tide sim: configuration 1/12: policy-lru b4" "configuration 6/12: oracle b4"
    # The oracle's line is drawn as it starts, with an ETA from the replays.
    tr '\r' '\n' <"$work/tty" | grep -q "configuration 6/12: oracle b4 .*ETA" ||
        { fail "no ETA as the oracle starts"; show "$work/tty"; }
    to_file "$@"
    expect_ok "$work/err"
    no_progress "$work/err" "configuration 1/12"
    on_tty "$@" --quiet
    no_progress "$work/tty" "configuration 1/12"
    ;;
mkmodel)
    on_tty mkmodel "$work/m1" --preset tiny
    expect_ok "$work/tty"
    has "$work/tty" "tide mkmodel: " "MiB of weights written" "wrote $work/m1"
    to_file mkmodel "$work/m2" --preset tiny
    expect_ok "$work/err"
    no_progress "$work/err" "MiB of weights written"
    on_tty mkmodel "$work/m3" --preset tiny --quiet
    expect_ok "$work/tty"
    no_progress "$work/tty" "MiB of weights written"
    # The same checkpoint either way.
    cmp "$work/m1/model.safetensors" "$work/m2/model.safetensors" ||
        fail "mkmodel wrote other weights with a progress line"
    # TIDE_PROGRESS: 1 keeps the line under --quiet, on a terminal only;
    # always draws it into a file too.
    export TIDE_PROGRESS=1
    on_tty mkmodel "$work/m4" --preset tiny --quiet
    has "$work/tty" "MiB of weights written"
    to_file mkmodel "$work/m5" --preset tiny
    no_progress "$work/err" "MiB of weights written"
    export TIDE_PROGRESS=always
    to_file mkmodel "$work/m6" --preset tiny
    has "$work/err" "tide mkmodel: " "MiB of weights written"
    unset TIDE_PROGRESS
    ;;
run)
    # tide run's line (shared with the others): blocks, with an ETA.
    tiny
    on_tty run -c "$work/t.ini" --set output.progress=true --ids 1,2,3
    expect_ok "$work/tty"
    has "$work/tty" "tide run: block 1/"
    to_file run -c "$work/t.ini" --set output.progress=true --ids 1,2,3
    expect_ok "$work/err"
    no_progress "$work/err" "tide run: block"
    has "$work/err" "[block 1/"
    ;;
*)
    echo "unknown case $case_name"
    exit 2
    ;;
esac
exit $failed
