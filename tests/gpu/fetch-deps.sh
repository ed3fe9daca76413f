#!/bin/bash
# Download (not install) the Debian packages the build needs into
# <repo>/.gpu-deps, for a GPU machine that cannot reach a package registry:
# tests/gpu/run.sh unpacks them there when the libraries are missing. Run it
# on a Debian 12 machine with apt (about 20 MB). The folder is not ignored by
# git, so the files travel with the working tree; do not commit them.
set -eu
src=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$src/.gpu-deps"
cd "$src/.gpu-deps"
apt-get download \
    libinih-dev libinih1 \
    libjansson-dev libjansson4 \
    libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 \
    libdnnl-dev libdnnl2 ocl-icd-libopencl1 \
    pkgconf pkgconf-bin libpkgconf3
ls -l "$src/.gpu-deps"
