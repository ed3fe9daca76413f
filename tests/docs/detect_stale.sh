#!/bin/sh
# The staleness check must fail, and name the update script, when a default in
# the reference differs from what tide prints.
# usage: detect_stale.sh CHECK_SCRIPT TIDE SOURCE_DIR
set -u
check=$1 tide=$2 src=$3
work=$(mktemp -d "${TMPDIR:-/tmp}/tide-doc-stale.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
unset TIDE_PLUGIN_PATH
"$tide" config doc | sed 's/| `steps` | int in \[1,4096\] | `32` |/| `steps` | int in [1,4096] | `31` |/' \
    >"$work/config.md"
grep -q '`31`' "$work/config.md" || { echo "could not make a stale copy"; exit 1; }
if sh "$check" "$tide" "$src" "$work/config.md" >"$work/out" 2>&1; then
    echo "FAIL: the check passed on a stale copy:"
    cat "$work/out"
    exit 1
fi
grep -q "tools/update-config-doc.sh" "$work/out" || { echo "FAIL: no hint:"; cat "$work/out"; exit 1; }
grep -q '^-| `steps` .* `31`' "$work/out" || { echo "FAIL: no diff line:"; cat "$work/out"; exit 1; }
echo "ok: a stale reference is detected"
