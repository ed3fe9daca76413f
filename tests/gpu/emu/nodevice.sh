#!/bin/sh
# Run with TIDE_CUDA_EMU_NO_DEVICE=1: the emulated runtime then fails
# cudaGetDeviceCount with cudaErrorNoDevice. backend-cuda-emu's probe must
# refuse, naming that error in `tide plugins`, and a GPU test must exit 77.
# usage: nodevice.sh TEST_CUDA_OFFLOAD TIDE EMU_PLUGIN_DIR
set -u
test_bin=$1 tide=$2 dir=$3
failed=0
TIDE_PLUGIN_DIR=$dir "$test_bin" backend-cuda-emu
rc=$?
if [ "$rc" -ne 77 ]; then
    echo "FAIL: test_cuda_offload exited $rc without a device, expected 77 (skipped)"
    failed=1
fi
out=$(TIDE_PLUGIN_PATH=$dir "$tide" plugins 2>&1)
for want in "backend-cuda-emu .* unusable" \
    "unusable here: no CUDA device: cudaGetDeviceCount: cudaErrorNoDevice"; do
    if ! printf '%s\n' "$out" | grep -q -- "$want"; then
        echo "FAIL: tide plugins does not show: $want"
        failed=1
    fi
done
[ "$failed" -eq 0 ] || printf '%s\n' "$out"
[ "$failed" -eq 0 ] && echo "ok: no device is reported and GPU tests skip"
exit "$failed"
