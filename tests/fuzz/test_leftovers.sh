#!/bin/sh
# Fuzz runs leave no tide-fuzz-* folder behind.
# usage: test_leftovers.sh FUZZ_TARGET CORPUS_DIR FUZZ_SH
#  1. the target replays its corpus with a TMPDIR longer than 40 characters
#     (once truncated into a wrong path) and leaves that TMPDIR empty;
#  2. scripts/fuzz.sh, with a stand-in target that makes its scratch folder
#     and then dies by a signal (as libFuzzer's _Exit after a finding skips
#     every atexit cleanup), reports the crash and leaves nothing in the
#     TMPDIR it was started with, nor in the build folder's fuzz-tmp.
set -u
target=$1 corpus=$2 fuzz_sh=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/tide-fuzzleft.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
failed=0
fail() {
    echo "FAIL: $*"
    failed=1
}

long="$work/a-scratch-folder-whose-path-is-longer-than-forty-characters"
mkdir -p "$long"
TMPDIR="$long" "$target" "$corpus" >"$work/replay.log" 2>&1 || fail "replay exited $?: $(cat "$work/replay.log")"
left=$(ls -A "$long")
[ -z "$left" ] || fail "the replay left in TMPDIR: $left"
[ $failed -eq 0 ] && echo "ok: a replay leaves its TMPDIR empty"

build="$work/build"
mkdir -p "$build/fuzz" "$work/outer"
cat >"$build/fuzz/fuzz_ini" <<'STUB'
#!/bin/sh
d=$(mktemp -d "${TMPDIR:-/tmp}/tide-fuzz-XXXXXX") && : >"$d/config.ini"
echo "#2 DONE cov: 1 ft: 1 corp: 1/1b"
kill -9 $$
STUB
chmod +x "$build/fuzz/fuzz_ini"
TMPDIR="$work/outer" TIDE_FUZZ_BUILD_DIR="$build" TIDE_FUZZ_SKIP_BUILD=1 \
    bash "$fuzz_sh" -t 1 ini >"$work/fuzz.log" 2>&1
rc=$?
[ $rc -eq 1 ] || fail "fuzz.sh exited $rc, expected 1 (the stand-in target crashed): $(cat "$work/fuzz.log")"
left=$(find "$work/outer" -mindepth 1)
[ -z "$left" ] || fail "fuzz.sh left in TMPDIR: $left"
[ ! -e "$build/fuzz-tmp" ] || fail "fuzz.sh left $(find "$build/fuzz-tmp")"
[ $failed -eq 0 ] && echo "ok: fuzz.sh leaves nothing after a target that died"
exit $failed
