#!/bin/sh
# test_gguf_exact.py needs gguf-py, GGML's Python package, whose
# gguf.quants.quantize is the reference for q8_0 and q4_0. It is installed
# (pinned, so that CI is reproducible) into a venv in the build folder,
# because Debian's Python is externally managed.
# usage: run_gguf.sh PYTHON3 VENV_DIR TIDE SOURCE_DIR
# Exit 77 (skipped) only when the package index cannot be reached at all; a
# failed install with the index reachable is a failure.
set -u
py=$1 venv=$2 tide=$3 src=$4
pkgs="gguf==0.19.0 numpy==2.4.6"
if ! [ -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import gguf.quants, numpy" 2>/dev/null ||
    [ "$(cat "$venv/.tide-pkgs" 2>/dev/null)" != "$pkgs" ]; then
    rm -rf "$venv"
    if ! "$py" -m venv "$venv"; then
        echo "FAIL: '$py -m venv' failed (on Debian: apt-get install python3-venv)"
        exit 1
    fi
    # shellcheck disable=SC2086
    if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --timeout 60 $pkgs; then
        rm -rf "$venv"
        index=${PIP_INDEX_URL:-https://pypi.org/simple}
        if ! "$py" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=30)" \
            "$index/pip/" 2>/dev/null; then
            echo "skipped: the package index $index cannot be reached, so $pkgs cannot be installed"
            exit 77
        fi
        echo "FAIL: pip could not install $pkgs although $index answers"
        exit 1
    fi
    echo "$pkgs" >"$venv/.tide-pkgs"
fi
exec "$venv/bin/python" "$src/tests/quant/test_gguf_exact.py" "$tide"
