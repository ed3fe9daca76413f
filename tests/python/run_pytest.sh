#!/bin/sh
# The Python package (python/) as users get it: `pip install` into a venv of
# this build, then its pytest suite against the tiny model. The package finds
# libtide through the build folder recorded at install time (TIDE_BUILD_DIR).
# usage: run_pytest.sh BUILD_DIR SOURCE_DIR PYTHON SANITIZE(0|1) [PYTEST ARGS...]
# Exit 77 (skipped) only when the interpreter lacks venv or pytest, which
# scripts/setup.sh installs (python3-venv, python3-pytest).
set -u
build=$1 src=$2 py=$3 sanitize=$4
shift 4
if ! "$py" -c "import venv, ensurepip" 2>/dev/null; then
    echo "skipped: $py cannot create a venv (apt-get install python3-venv; scripts/setup.sh does)"
    exit 77
fi
if ! "$py" -c "import pytest" 2>/dev/null; then
    echo "skipped: $py has no pytest (apt-get install python3-pytest; scripts/setup.sh does)"
    exit 77
fi
venv=$build/python-venv
if [ ! -x "$venv/bin/python" ]; then
    "$py" -m venv --system-site-packages "$venv" || { echo "cannot create $venv"; exit 1; }
fi
stage=$(mktemp -d "${TMPDIR:-/tmp}/tide-py.XXXXXX") || exit 1
trap 'rm -rf "$stage"' EXIT
# pip builds in the folder it is given: build a copy, not the checkout.
cp -R "$src/python" "$stage/python" || exit 1
TIDE_BUILD_DIR=$build "$venv/bin/python" -m pip install --quiet --no-index --no-build-isolation \
    --no-deps --force-reinstall --root-user-action=ignore "$stage/python" || exit 1
cd "$stage" || exit 1
unset TIDE_LIBRARY TIDE_EXECUTABLE TIDE_PLUGIN_PATH
export TIDE_SOURCE_DIR="$src" PYTHONDONTWRITEBYTECODE=1
if [ "$sanitize" = 1 ]; then
    # libtide carries ASan: its runtime must be loaded before the interpreter's
    # allocations; the interpreter's own leaks are not ours (last, so that it
    # wins over a detect_leaks=1 the caller set, as .ci/run does).
    LD_PRELOAD=$(cc -print-file-name=libasan.so) || exit 1
    export LD_PRELOAD ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
exec "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@" "$src/python/tests"
