#!/bin/sh
# The AMX paths of backend-cpu-onednn refuse what they cannot do, naming it:
#  - on a CPU with AMX-BF16: ONEDNN_MAX_CPU_ISA=AVX512_CORE_AMX would let
#    oneDNN run its AMX matmuls, which are not batch invariant: refused;
#  - on a CPU without it (or where Linux refuses the tile state): gemm = amx
#    is refused, saying why.
# usage: amx_cpu.sh TIDE
set -u
tide=$1
work=$(mktemp -d "${TMPDIR:-/tmp}/tide-amx.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
"$tide" mkmodel "$work/tiny" --preset tiny >"$work/mk.log" 2>&1 || { cat "$work/mk.log"; exit 1; }
run() {
    "$tide" run --ids 1,2,3 --set "model.path=$work/tiny" --set generation.gen_length=32 \
        --set output.progress=false "$@" >"$work/out" 2>&1
}
if grep -q '\bamx_bf16\b' /proc/cpuinfo 2>/dev/null && run --set backend-cpu-onednn.gemm=amx; then
    if ONEDNN_MAX_CPU_ISA=AVX512_CORE_AMX run; then
        echo "FAIL: ONEDNN_MAX_CPU_ISA=AVX512_CORE_AMX was accepted"
        exit 1
    fi
    grep -q "oneDNN dispatches to AMX (ONEDNN_MAX_CPU_ISA = AVX512_CORE_AMX)" "$work/out" || {
        echo "FAIL: the refusal does not name ONEDNN_MAX_CPU_ISA:"
        cat "$work/out"
        exit 1
    }
    echo "ok: AMX CPU: ONEDNN_MAX_CPU_ISA=AVX512_CORE_AMX refused, naming it"
    exit 0
fi
if run --set backend-cpu-onednn.gemm=amx; then
    echo "FAIL: gemm = amx was accepted on a CPU without AMX-BF16"
    exit 1
fi
grep -q "gemm = amx, but this CPU has no AMX-BF16" "$work/out" || {
    echo "FAIL: the refusal of gemm = amx does not say why:"
    cat "$work/out"
    exit 1
}
echo "ok: no AMX here: gemm = amx refused, saying why"
