#!/bin/sh
# Regenerate docs/config.md from the option tables of the core and of every
# plugin built in BUILD_DIR.
# usage: tools/update-config-doc.sh [--no-build] BUILD_DIR
#
# Builds BUILD_DIR first (unless --no-build) so the reference matches the
# sources. Warns about plugin folders whose plugin is not built there: their
# sections would be missing, so regenerate from a build that has them all.
set -eu
build=1
if [ "${1:-}" = --no-build ]; then
    build=0
    shift
fi
if [ $# -ne 1 ]; then
    echo "usage: $0 [--no-build] BUILD_DIR" >&2
    exit 2
fi
bdir=$1
root=$(cd "$(dirname "$0")/.." && pwd)
if [ $build -eq 1 ]; then
    cmake --build "$bdir"
fi
tide=$bdir/tide
[ -x "$tide" ] || { echo "$0: no tide binary at $tide" >&2; exit 1; }

for d in "$root"/plugins/*/; do
    name=$(basename "$d")
    if [ -f "$d/CMakeLists.txt" ] && [ ! -e "$bdir/plugins/$name.so" ]; then
        echo "$0: warning: plugin $name is not built in $bdir; docs/config.md will lack its section" >&2
    fi
done

unset TIDE_PLUGIN_PATH
tmp="$root/docs/config.md.tmp"
"$tide" config doc >"$tmp" || { rm -f "$tmp"; exit 1; }
mv "$tmp" "$root/docs/config.md"
echo "wrote docs/config.md: $(grep -c '^## \[' "$root/docs/config.md") sections" \
    "($(sed -n 's/^Options of the plugin `\([^`]*\)`.*/\1/p' "$root/docs/config.md" | tr '\n' ' '))"
