#!/bin/sh
# Is docs/config.md what `tide config doc` prints for this build?
# usage: check_config_doc.sh TIDE SOURCE_DIR [DOC]
#
# A build may lack plugins that the checked-in reference documents (no nvcc,
# TIDE_WITH_ONEDNN=OFF). A plugin section of DOC is left out of the comparison
# when that plugin is not built here but its folder plugins/NAME exists; every
# other difference means DOC is stale.
set -u
tide=$1 src=$2 doc=${3:-$2/docs/config.md}
plugin_dir=$(dirname "$tide")/plugins
work=$(mktemp -d "${TMPDIR:-/tmp}/tide-doc.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
unset TIDE_PLUGIN_PATH

stale() {
    echo "docs/config.md is stale: $*"
    echo "Regenerate it with: tools/update-config-doc.sh $(dirname "$tide")"
    exit 1
}

[ -f "$doc" ] || stale "$doc does not exist"
if ! "$tide" config doc >"$work/generated.md" 2>"$work/err"; then
    echo "tide config doc failed:"
    cat "$work/err"
    exit 1
fi

skipped=
for name in $(sed -n 's/^Options of the plugin `\([^`]*\)`.*/\1/p' "$doc"); do
    if [ ! -e "$plugin_dir/$name.so" ] && [ -d "$src/plugins/$name" ]; then
        skipped="$skipped $name"
    fi
done

# filter FILE SKIP: print a reference without the sections named in SKIP
# (space-separated) and without trailing blank lines.
filter() {
    awk -v skip=" $2 " '
        /^## \[/ { name = substr($2, 2, length($2) - 2); drop = index(skip, " " name " ") > 0 }
        drop { next }
        /^$/ { blank++; next }
        { while (blank) { print ""; blank-- } print }' "$1"
}
filter "$doc" "$skipped" >"$work/expected.md"
filter "$work/generated.md" "" >"$work/actual.md"

if ! diff -u "$work/expected.md" "$work/actual.md" >"$work/diff"; then
    echo "--- $doc (checked in)"
    echo "+++ tide config doc (this build)"
    tail -n +3 "$work/diff"
    stale "it differs from what this build's tide prints (diff above)"
fi
[ -n "$skipped" ] && echo "not built here, not compared:$skipped"
echo "ok: $doc is up to date"
