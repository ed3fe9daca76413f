#!/bin/sh
# Install the Python clients the serve tests drive `tide serve` with (the
# `openai` package and lm-evaluation-harness) into a venv in the build folder
# (Debian's Python is externally managed). Versions are pinned so that CI is
# reproducible. Without network access the install fails: exit 77 (skipped),
# and serve_openai / serve_lm_eval skip too.
# usage: make_venv.sh PYTHON3 VENV_DIR
set -u
py=$1
venv=$2
pkgs="openai==3.57.0 lm_eval[api]==0.4.13"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import openai, lm_eval" 2>/dev/null &&
    [ "$(cat "$venv/.tide-pkgs" 2>/dev/null)" = "$pkgs" ]; then
    echo "serve venv ready: $venv"
    exit 0
fi
rm -rf "$venv"
if ! "$py" -m venv "$venv"; then
    echo "skipped: '$py -m venv' failed (on Debian: apt-get install python3-venv)"
    exit 77
fi
# shellcheck disable=SC2086
if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --timeout 60 $pkgs; then
    rm -rf "$venv"
    echo "skipped: pip could not install $pkgs (no access to the package index?)"
    exit 77
fi
echo "$pkgs" >"$venv/.tide-pkgs"
echo "serve venv ready: $venv ($pkgs)"
