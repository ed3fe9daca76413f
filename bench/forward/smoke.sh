#!/bin/sh
# bench-forward on a generated tiny checkpoint: it runs, names each phase's
# kernels, and runs the picks on the backend's threads inside a round, as
# the engine does (the header says which). No figure is asserted.
# usage: smoke.sh TIDE BENCH_FORWARD
set -eu
dir=$(mktemp -d "${TMPDIR:-/tmp}/tide-bf.XXXXXX")
trap 'rm -rf "$dir"' EXIT
"$1" mkmodel "$dir/m" --preset tiny -q
"$2" --model "$dir/m" --threads 2 --repeats 1
