#!/usr/bin/env bash
# DIP comparison (docs/dip.md, issue 37): the paper's three settings on the
# project's tiny checkpoints -- all 8 examples up front without a cache, all up
# front with the cache, and DIP (1 example up front, the rest inserted before
# later blocks) -- on the same 8 queries and the same pool of 32 examples.
# The synthetic checkpoints are untrained: only the cost columns mean
# anything (forwards, key positions attended per forward, time per request).
#   LLaDA2 tiny (decoder llada2): "no cache" = generation.recompute = true.
#   LLaDA-MoE tiny (decoder llada, whole-canvas forwards): "cache" = the
#   approximate Fast-dLLM-style generation.prefix_cache = true.
# Usage: bench/dip/run.sh [BUILD_DIR] [REPEATS]   (prints markdown tables)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BUILD=${1:-build}
REPEATS=${2:-3}
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) threads; $(date -u +%F); commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
common=(--prompts bench/dip/queries.txt --set dip.pool=bench/dip/pool.jsonl --set dip.shots=8
        --set generation.gen_length=128 --policies tide --budgets 8 --repeats "$REPEATS" -o md -q)
echo; echo "## LLaDA2 tiny (decoder llada2)"
"$BUILD/tide" bench -c config/llada2-tiny.ini "${common[@]}" \
    --sweep dip.mode=upfront,dynamic --sweep generation.recompute=true,false
echo; echo "## LLaDA-MoE tiny (decoder llada)"
"$BUILD/tide" bench -c config/llada-moe-tiny.ini "${common[@]}" \
    --sweep dip.mode=upfront,dynamic --sweep generation.prefix_cache=false,true
