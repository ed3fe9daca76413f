#!/usr/bin/env bash
# The main job: set up, build, and generate text with the default tiny model.
# On first use the synthetic tiny checkpoint is generated in models/llada2-tiny.
# Extra arguments go to `tide run` (e.g. -p "your prompt" --set generation.gen_length=64).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$TIDE_ROOT"
"$TIDE_BUILD_DIR/tide" plugins
if [ $# -eq 0 ]; then
    set -- -p "Write a haiku about the tide."
fi
exec "$TIDE_BUILD_DIR/tide" run -c config/llada2-tiny.ini "$@"
