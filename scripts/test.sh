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
exec ctest --output-on-failure -j"$(nproc 2>/dev/null || echo 2)" "$@"
