#!/bin/bash
# The prepared GPU check for one machine with one NVIDIA H200, in about ten
# minutes. Run from the repository root (or anywhere):
#     bash tests/gpu/run.sh OUTDIR
# Everything it produces goes into OUTDIR: summary.txt (read this first),
# h2d.csv, bench-results.csv (the sweep's table, when `tide bench` ran), and
# logs.tar.gz holding one .log per stage, ctest-gpu.xml and
# bench/ from `tide bench` (packed because the device tool returns at most 8
# files; TIDE_GPU_PACK=0 leaves them loose).
# Stages, each under a timeout, later ones skipped when the time is spent:
#   env       GPU, driver, toolchain, and whether the build's libraries exist
#   configure cmake -DCMAKE_BUILD_TYPE=Release -DTIDE_WITH_CUDA=ON (sm_90)
#   build     all targets
#   ctest     ctest -L gpu: op conformance, the offload slots, quantized
#             experts (test_cuda_quant: q8_0, q4_0, fp8 through expert_create
#             and slot_create_q against the host reference), end to end
#             against the CPU backend on a tiny model, bench-h2d --quick
#   h2d       bench-h2d: host-to-device GB/s, pinned / pageable / in place /
#             staged (h2d.csv)
#   lmoe-*    a tiny LLaDA-MoE (model-llada-moe, full attention): forward
#             logits backend-cuda vs backend-cpu-onednn, and a generation
#             with its llada decoder on backend-cuda at budget 4
#   mkmodel   a 4-layer LLaDA2.0-mini-shaped checkpoint (~6 GB) in the work dir
#   mini-*    tide forward on it, backend-cuda vs backend-cpu-onednn logits;
#             tide run on backend-cuda (tokens/s in mini-run.log)
#   mini-batch tide bench --batch 1,2 on it (batched decoding on the GPU)
#   bench     tide bench sweeps over policies tide (interval 1,2,4,8,32), lru
#             and static at budgets 32, 64, 128, two prompts (when `tide bench`
#             exists)
# Environment: TIDE_GPU_BUILD (build folder, default <repo>/build-gpu),
# TIDE_GPU_WORK (large scratch files, default /tmp/tide-gpu-work),
# TIDE_GPU_BUDGET_S (seconds before no new stage starts, default 560).
# If the build's libraries are not installed (inih, jansson, pcre2, oneDNN,
# pkg-config), .deb files in <repo>/.gpu-deps (tests/gpu/fetch-deps.sh) are
# unpacked into the work dir and used from there.
set -u -o pipefail
if [ $# -ne 1 ]; then
    echo "usage: bash tests/gpu/run.sh OUTDIR" >&2
    exit 2
fi
src=$(cd "$(dirname "$0")/../.." && pwd) || exit 1
mkdir -p "$1" || exit 1
out=$(cd "$1" && pwd) || exit 1
build=${TIDE_GPU_BUILD:-$src/build-gpu}
work=${TIDE_GPU_WORK:-/tmp/tide-gpu-work}
budget=${TIDE_GPU_BUDGET_S:-560}
summary=$out/summary.txt
t_start=$(date +%s)
mkdir -p "$work" || exit 1
: >"$summary"

note() {
    echo "$*" | tee -a "$summary"
}

elapsed() {
    echo $(($(date +%s) - t_start))
}

# stage NAME LIMIT_S CMD...: run CMD with its output in OUTDIR/NAME.log, under
# the smaller of LIMIT_S and the time left; one summary line; returns CMD's status.
stage() {
    local name=$1 limit=$2 left t0 rc
    shift 2
    left=$((budget - $(elapsed)))
    if [ "$left" -lt 15 ]; then
        note "$(printf '%-14s SKIPPED (time budget of %ss spent)' "$name" "$budget")"
        return 124
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    t0=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" >"$out/$name.log" 2>&1
    rc=$?
    local status="rc=$rc"
    [ $rc -eq 0 ] && status=ok
    [ $rc -eq 77 ] && status=skipped
    note "$(printf '%-14s %-8s %4ss  %.110s' "$name" "$status" \
        $(($(date +%s) - t0)) "$*")"
    return $rc
}

note "TIDE GPU check, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), source $src"

# ---- env and dependencies ---------------------------------------------------
have_deps() {
    command -v pkg-config >/dev/null 2>&1 &&
        pkg-config --exists inih jansson libpcre2-8 2>/dev/null
}

# Unpack <repo>/.gpu-deps/*.deb under $work/deps and point the tools there.
use_debs() {
    local root=$work/deps f
    mkdir -p "$root" || return 1
    for f in "$src"/.gpu-deps/*.deb; do
        dpkg -x "$f" "$root" || return 1
    done
    # The .pc files say prefix=/usr: move them to the unpacked tree.
    find "$root" -name '*.pc' -exec sed -i "s|^prefix=/usr|prefix=$root/usr|" {} +
    PATH=$root/usr/bin:$PATH
    PKG_CONFIG_PATH=$root/usr/lib/x86_64-linux-gnu/pkgconfig:$root/usr/share/pkgconfig
    PKG_CONFIG_PATH=$PKG_CONFIG_PATH:$root/usr/lib/pkgconfig${PKG_CONFIG_PATH_OLD:+:$PKG_CONFIG_PATH_OLD}
    LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    CMAKE_PREFIX_PATH=$root/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
    export PATH PKG_CONFIG_PATH LD_LIBRARY_PATH CMAKE_PREFIX_PATH
}

env_report() {
    echo "== uname"
    uname -a
    echo "== nvidia-smi"
    nvidia-smi || true
    nvidia-smi --query-gpu=name,driver_version,memory.total,pcie.link.gen.current,pcie.link.width.current --format=csv || true
    echo "== toolchain"
    nvcc --version || true
    cmake --version || true
    gcc --version | head -1 || true
    g++ --version | head -1 || true
    echo "== cpu and memory"
    nproc
    free -g || true
    echo "== libraries (pkg-config)"
    for m in inih jansson libpcre2-8; do
        printf '%-12s %s\n' "$m" "$(pkg-config --modversion "$m" 2>&1)"
    done
    ls /usr/include/oneapi/dnnl/dnnl.h 2>&1 || true
}

PKG_CONFIG_PATH_OLD=${PKG_CONFIG_PATH:-}
if ! have_deps && ls "$src"/.gpu-deps/*.deb >/dev/null 2>&1; then
    use_debs && note "dependencies: unpacked the .deb files of $src/.gpu-deps"
fi
env_report >"$out/env.log" 2>&1
note "gpu: $(nvidia-smi -L 2>&1 | head -1)"
if ! have_deps; then
    note "MISSING build dependencies (pkg-config with inih, jansson, libpcre2-8): see env.log."
    note "Carry their .deb files in .gpu-deps (bash tests/gpu/fetch-deps.sh on a Debian box)."
    exit 1
fi
onednn=ON
if [ ! -e /usr/include/oneapi/dnnl/dnnl.h ] && ! ls "$work"/deps/usr/include/oneapi/dnnl/dnnl.h >/dev/null 2>&1; then
    onednn=OFF
    note "oneDNN not found: building without backend-cpu-onednn (the CPU comparisons skip)"
fi

# ---- build and tests ----------------------------------------------------------
jobs=$(nproc)
stage configure 120 cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTIDE_WITH_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DTIDE_WITH_ONEDNN=$onednn || {
    tail -30 "$out/configure.log"
    exit 1
}
stage build 300 cmake --build "$build" -j "$jobs" || {
    grep -E "error|Error" "$out/build.log" | head -30
    exit 1
}
tide=$build/tide
stage plugins 30 "$tide" plugins
stage ctest 240 ctest --test-dir "$build" -L gpu --output-on-failure --timeout 200 \
    --output-junit "$out/ctest-gpu.xml"
grep -E "tests passed|tests failed|Skipped|Failed|\*\*\*" "$out/ctest.log" | sed 's/^/  /' |
    tee -a "$summary"

# ---- host-to-device bandwidth ---------------------------------------------------
stage h2d 120 sh -c "\"$build/bench/bench-h2d\" >\"$out/h2d.csv\""
[ -s "$out/h2d.csv" ] && sed 's/^/  /' "$out/h2d.csv" | tee -a "$summary" >/dev/null

ids=$(seq -s, 100 139)
backends=backend-cuda
[ "$onednn" = ON ] && backends="$backends backend-cpu-onednn"

# ---- the second model family: a tiny LLaDA-MoE (full attention) ----------------------
# Whole-canvas forward on both backends (logits compared like the mini's), and
# a generation with its own decoder (llada) on backend-cuda, offloaded.
lmoe=$work/llada-moe-tiny
rm -rf "$lmoe"
if stage lmoe-mkmodel 60 "$tide" mkmodel "$lmoe" --preset tiny-moe --plugin model-llada-moe; then
    lcfg=$work/lmoe.ini
    printf '[model]\nplugin = model-llada-moe\npath = %s\n[backend]\ndevice = backend-cuda\n[output]\nprogress = false\n' \
        "$lmoe" >"$lcfg"
    for b in $backends; do
        rm -f "$work/lmoe.$b.f32"
        stage "lmoe-fwd-${b#backend-}" 60 "$tide" forward -c "$lcfg" --set "backend.device=$b" \
            --ids "$ids" --chunk 0 --out "$work/lmoe.$b.f32"
    done
    if [ -s "$work/lmoe.backend-cpu-onednn.f32" ] &&
        ! sh "$src/tests/gpu/cmp_logits.sh" "$work/lmoe.backend-cuda.f32" \
            "$work/lmoe.backend-cpu-onednn.f32" 0.02 "llada-moe logits, cuda vs cpu" 2>&1 |
        tee -a "$summary"; then
        note "lmoe-cmp       rc=1   the logits differ beyond the tolerance (line above)"
    fi
    stage lmoe-run 60 "$tide" run -c "$lcfg" --ids "$ids" --print-ids --set policy.budget=4
    grep -E "tok/s|tokens" "$out/lmoe-run.log" | tail -2 | sed 's/^/  /' | tee -a "$summary"
fi
rm -rf "$lmoe" "$work"/lmoe.*.f32

# ---- a LLaDA2.0-mini-shaped checkpoint ------------------------------------------------
mini=$work/llada2-mini-4l
rm -rf "$mini"
if stage mkmodel 240 "$tide" mkmodel "$mini" --preset llada2-mini --layers 4; then
    cfg=$work/mini.ini
    printf '[model]\npath = %s\n[backend]\ndevice = backend-cuda\n[generation]\ngen_length = 64\n[output]\nprogress = true\n' \
        "$mini" >"$cfg"
    for b in $backends; do
        rm -f "$work/mini.$b.f32"
        stage "mini-fwd-${b#backend-}" 240 "$tide" forward -c "$cfg" --set "backend.device=$b" \
            --ids "$ids" --chunk 32 --out "$work/mini.$b.f32"
    done
    if [ -s "$work/mini.backend-cpu-onednn.f32" ] &&
        ! sh "$src/tests/gpu/cmp_logits.sh" "$work/mini.backend-cuda.f32" \
            "$work/mini.backend-cpu-onednn.f32" 0.02 "mini logits, cuda vs cpu" 2>&1 |
        tee -a "$summary"; then
        note "mini-cmp       rc=1   the logits differ beyond the tolerance (line above)"
    fi
    stage mini-run 240 "$tide" run -c "$cfg" --ids "$ids" --print-ids
    grep -E "tok/s|tokens" "$out/mini-run.log" | tail -3 | sed 's/^/  /' | tee -a "$summary"

    # ---- policy sweeps (tide bench, planned interface) ------------------------------------
    # Two prompts: 21 configurations (and the baseline) must fit the time left.
    if "$tide" bench --help >/dev/null 2>&1; then
        # Batched decoding on the GPU (docs/batching.md): two prompts decoded
        # together and alone; cuBLAS is not batch invariant, so a 'same' of NO
        # here is reported, not failed (tokens within the tolerance).
        stage mini-batch 120 "$tide" bench -c "$cfg" --policies tide --budgets 64 --batch 1,2 \
            --max-prompts 2 --set bench.baseline=false --out "$out/bench-batch"
        grep -E "^policy|^policy-tide" "$out/mini-batch.log" | sed 's/^/  /' | tee -a "$summary"
        stage bench 400 "$tide" bench -c "$cfg" --policies tide,lru,static --budgets 32,64,128 \
            --intervals 1,2,4,8,32 --max-prompts 2 --out "$out/bench"
        find "$out/bench" -type f -printf '  %p %s bytes\n' 2>/dev/null | tee -a "$summary"
        # The table itself, outside the log archive.
        results=$(find "$out/bench" -name results.csv 2>/dev/null | head -1)
        [ -n "$results" ] && cp "$results" "$out/bench-results.csv"
    else
        note "tide bench not available"
    fi
fi
rm -rf "$mini" "$work"/mini.*.f32

note "total $(elapsed)s"
if [ "${TIDE_GPU_PACK:-1}" != 0 ]; then
    (cd "$out" && tar czf logs.tar.gz -- *.log ctest-gpu.xml bench 2>/dev/null)
    (cd "$out" && rm -rf -- *.log ctest-gpu.xml bench)
    note "logs: $out/logs.tar.gz"
fi
grep -q " rc=" "$summary" && exit 1
exit 0
