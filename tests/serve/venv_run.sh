#!/bin/sh
# Run a serve test with the venv's Python (make_venv.sh); exit 77 (skipped)
# with the reason when the venv could not be made.
# usage: venv_run.sh VENV_DIR SCRIPT [ARGS...]
set -u
venv=$1
shift
if ! [ -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import openai, lm_eval" 2>/dev/null; then
    echo "skipped: the Python packages openai and lm_eval are not installed in $venv" \
        "(the serve_venv test could not install them; see its output)"
    exit 77
fi
# No hub, no network: everything the tests use is local.
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HOME="$venv/hf-home"
exec "$venv/bin/python" "$@"
