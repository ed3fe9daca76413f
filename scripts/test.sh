#!/usr/bin/env bash
# Set up, build, and run the whole test suite. Extra arguments go to ctest
# (e.g. -L unit, -R config). TIDE_CMAKE_ARGS="-DTIDE_SANITIZE=ON" with
# TIDE_BUILD_DIR=build-asan runs it under ASan/UBSan.
set -euo pipefail
TIDE_SETUP_TESTS=1 # setup.sh also installs what tests need (Slurm for tests/cluster)
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$TIDE_BUILD_DIR"
# LeakSanitizer (GCC 12) crashes scanning oneDNN's thread-local storage when
# it is loaded with a plugin; skipping TLS roots keeps every other leak check.
export LSAN_OPTIONS="${LSAN_OPTIONS:-use_tls=0}"
# ctest runs as many tests at once as there are CPUs, each with its own
# OpenMP threads: a thread spinning while it waits takes a CPU from another
# test's working thread. tide picks the long spin when the machine looks idle
# at its start, which it can between two tests (docs_run_README took 116 s
# instead of 14 once); the short one suits a suite.
export GOMP_SPINCOUNT="${GOMP_SPINCOUNT:-1000}"
exec ctest --output-on-failure -j"$(nproc 2>/dev/null || echo 2)" "$@"
