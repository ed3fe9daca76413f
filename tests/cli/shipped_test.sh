#!/bin/sh
# Shipped files (tide/shipped.h) from any working directory: the example
# configurations, hardware profiles and benchmark prompts are found
#   1. by the build tree's binary, from a folder outside the tree (the
#      source tree is searched for a binary beside its CMakeCache.txt);
#   2. by an installed binary, from its prefix's share/tide, also after the
#      prefix is moved elsewhere (no source tree searched);
# and a file found nowhere is an error naming every folder searched.
# usage: shipped_test.sh TIDE BUILD_DIR CMAKE
set -u
tide=$1 build=$2 cmake=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/tide-shipped.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
failed=0
unset TIDE_PLUGIN_PATH TIDE_LOG_LEVEL

fail() {
    echo "FAIL: $*"
    echo "--- stderr:"
    cat "$work/err"
    failed=1
}

# checks BIN LABEL: the lookups that must succeed from $work/cwd.
checks() {
    bin=$1 label=$2
    mkdir -p "$work/cwd" && cd "$work/cwd" || exit 1
    "$bin" config check config/llada2-tiny.ini >"$work/out" 2>"$work/err" ||
        fail "$label: -c config/llada2-tiny.ini from $work/cwd"
    grep -q '^plugin = model-llada2' "$work/out" || fail "$label: config check printed no [model] plugin"
    # A one-prompt bench with the default prompts file (bench/prompts/prompts.txt);
    # it also writes the trace that the sim check replays.
    "$bin" bench -c config/llada2-tiny.ini --policies lru --budgets 4 --max-prompts 1 \
        --set generation.gen_length=32 --set output.trace=t.trc --out res >"$work/out" 2>"$work/err" ||
        fail "$label: tide bench with the default prompts file"
    grep -q '"prompts": "/.*bench/prompts/prompts.txt"' res/*/manifest.json ||
        fail "$label: the manifest does not record the prompts file found"
    "$bin" sim --trace t.trc --profile config/profiles/h200-pcie5.ini --scale-profile --budget 8 \
        --policy lru >"$work/out" 2>"$work/err" ||
        fail "$label: tide sim --profile config/profiles/h200-pcie5.ini"
    "$bin" sim --trace t.trc --profile config/profiles/none.ini --budget 8 >"$work/out" 2>"$work/err" &&
        fail "$label: a missing profile was accepted"
    grep -q "profile = config/profiles/none.ini: no such file .*share/tide" "$work/err" ||
        fail "$label: the missing profile's error does not name the folders searched"
    "$bin" run -c nowhere.ini -p x >"$work/out" 2>"$work/err" && fail "$label: -c nowhere.ini accepted"
    grep -q -- "-c = nowhere.ini: no such file from the working directory ($work/cwd)" "$work/err" ||
        fail "$label: the missing -c file's error does not name the working directory"
    cd "$work" && rm -rf "$work/cwd"
}

checks "$tide" "build tree"

"$cmake" --install "$build" --prefix "$work/prefix" >/dev/null 2>"$work/err" || fail "cmake --install"
[ -f "$work/prefix/share/tide/config/profiles/h200-pcie5.ini" ] ||
    fail "the install lacks share/tide/config/profiles"
[ -f "$work/prefix/share/tide/bench/prompts/prompts.txt" ] || fail "the install lacks the prompts"
checks "$work/prefix/bin/tide" "installed"
mv "$work/prefix" "$work/moved"
checks "$work/moved/bin/tide" "installed, then moved"
"$work/moved/bin/tide" run -c config/none.ini -p x >"$work/out" 2>"$work/err"
grep -q "$work/moved/share/tide" "$work/err" || fail "the moved install does not search its share folder"
[ $failed = 0 ] && echo "ok: shipped files found from the build tree and from an install"
exit $failed
