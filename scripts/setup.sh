#!/usr/bin/env bash
# Installs what TIDE needs on Debian (only the packages that are missing),
# then configures and builds into ${TIDE_BUILD_DIR:-build}.
# Sourced by scripts/demo.sh and scripts/test.sh; extra CMake arguments come
# from TIDE_CMAKE_ARGS; TIDE_BUILD_TARGETS limits the build to those targets.
set -euo pipefail

TIDE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TIDE_BUILD_DIR="${TIDE_BUILD_DIR:-$TIDE_ROOT/build}"

tide_need_packages() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "setup: installing ${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
}

# ocl-icd-opencl-dev: oneDNN 2.6's CMake package requires OpenCL's.
# g++: CMake links CUDA modules with the C++ compiler when nvcc is present.
# python3-venv, python3-pytest: the Python package's tests (tests/python) pip-install
# it into a venv of the build folder and run its pytest suite there.
# python3-matplotlib: `python -m tide.plot` (paper figures) and its tests.
# libmicrohttpd-dev: `tide serve`; curl: its tests (tests/serve). tmux: the
# terminal test of `tide run` (tests/cli/term_test.sh draws on a real pty).
tide_need_packages cmake make gcc g++ pkg-config libinih-dev libjansson-dev libpcre2-dev \
    libdnnl-dev ocl-icd-opencl-dev python3 python3-numpy python3-venv python3-pytest \
    python3-matplotlib libmicrohttpd-dev curl tmux
# The Slurm test (tests/cluster/slurm_test.sh) starts a one-node cluster on
# localhost; only for the test suite, only where installing needs no password
# (the test installs them itself when run alone, and is skipped without them).
if [ "${TIDE_SETUP_TESTS:-0}" = 1 ] && { [ "$(id -u)" -eq 0 ] || sudo -n true 2>/dev/null; }; then
    tide_need_packages slurm-wlm munge ||
        echo "setup: slurm-wlm and munge could not be installed; the Slurm test will be skipped" >&2
fi
# Fuzzing (scripts/fuzz.sh): clang and its libFuzzer runtime.
if [[ "${TIDE_CMAKE_ARGS:-}" == *TIDE_FUZZ=ON* ]]; then
    tide_need_packages clang libclang-rt-14-dev
fi

jobs="$(nproc 2>/dev/null || echo 2)"
cmake -S "$TIDE_ROOT" -B "$TIDE_BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${TIDE_CMAKE_ARGS:-} >&2
cmake --build "$TIDE_BUILD_DIR" -j"$jobs" ${TIDE_BUILD_TARGETS:+--target $TIDE_BUILD_TARGETS} >&2
