#!/bin/sh
# The layering check must fail, naming the file and the rule, on a copy of the
# tree where the runtime includes a simulator header, a trace writer, or a
# plugin reaches into the runtime's internals.
# usage: detect_violation.sh CHECK_SCRIPT SOURCE_DIR
set -u
check=$1 src=$2
work=$(mktemp -d "${TMPDIR:-/tmp}/tide-layers.XXXXXX") || exit 1
trap 'rm -rf "$work"' EXIT
fail=0
try() { # try WHAT FILE LINE EXPECT
    rm -rf "$work/t" && mkdir -p "$work/t" && cp -r "$src/core" "$src/cli" "$src/plugins" "$work/t/"
    printf '%s\n' "$3" >>"$work/t/$2"
    if python3 "$check" --root "$work/t" >"$work/out" 2>&1; then
        echo "FAIL ($1): the check passed"; cat "$work/out"; fail=1; return
    fi
    if ! grep -q "$4" "$work/out"; then
        echo "FAIL ($1): no '$4' in:"; cat "$work/out"; fail=1; return
    fi
    echo "ok: $1 is refused"
}
try "runtime includes sim.h" core/runtime/engine.c '#include "sim.h"' \
    'core/runtime/engine.c:.*private header of core/sim'
try "runtime includes the trace writer" core/runtime/moe.c '#include "tide/trace_write.h"' \
    'core/runtime/moe.c:.*tide/trace_write.h'
try "runtime includes the solver" core/runtime/decode.c '#include "tide/solver.h"' \
    'core/runtime/decode.c:.*solver'
try "formats includes a runtime header" core/formats/safetensors.c '#include "config.h"' \
    'core/formats/safetensors.c:.*private header of core/runtime'
try "a plugin includes a runtime header" plugins/policy-lru/policy_lru.c '#include "moe_internal.h"' \
    'plugins/policy-lru/policy_lru.c:.*private header of core/runtime'
try "a relative include into sim" core/runtime/loader.c '#include "../sim/sim.h"' \
    'core/runtime/loader.c:.*core/sim'
try "the embedding API includes a sim header" core/api/engine_api.c '#include "sim.h"' \
    'core/api/engine_api.c:.*private header of core/sim'
try "the core names a decoder" core/runtime/engine.c 'static const char *dflt = "llada2";' \
    'core/runtime/engine.c:.*names the decoder'
exit $fail
