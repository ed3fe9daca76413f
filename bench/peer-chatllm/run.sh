#!/usr/bin/env bash
# tide against chatllm.cpp (bf16) side by side, in one run, on one checkpoint:
# ms per forward by difference between a 1-block and a 3-block generation
# (the prefill, the load and the first block cancel out), same 64-token
# prompt, same thread count, interleaved rounds. chatllm.cpp is a peer built
# from its public repository for this measurement only; it is never part of
# the project. docs/cpu-performance.md ("Side by side with chatllm.cpp") says
# how to build it and convert the checkpoint, and records the results.
#
# usage: bench/peer-chatllm/run.sh -m CHECKPOINT_DIR -g CHATLLM_MODEL_BIN -b CHATLLM_MAIN
#                                  [-t TIDE] [-n THREADS] [-r ROUNDS]
#   -m DIR    the tide checkpoint (e.g. `tide mkmodel DIR --preset llada2-mini --layers 4 --seed 3`)
#   -g FILE   the same checkpoint converted by chatllm's convert.py (-t bf16)
#   -b FILE   chatllm's main binary, instrumented to print one line
#             "MEASURE forward ..." to stderr per model call of its LLaDA2
#             generate_next_block (so its forwards can be counted)
#   -t TIDE   the tide binary (default: build/tide)
#   -n N      threads for both (default 2)
#   -r N      rounds (default 3)
# Both decode greedily with block 32, 32 steps and threshold 0.95. tide
# computes the output layer for the still-masked rows of a step only;
# chatllm for all 32 rows of the block, so a forward of tide is cheaper by
# design. Each engine's weights are read in before its timed region (tide
# scans them at load; chatllm loads them into memory).
set -euo pipefail

tide=build/tide
threads=2
rounds=3
model= gguf= chat=
while getopts "m:g:b:t:n:r:h" o; do
    case "$o" in
    m) model=$OPTARG ;;
    g) gguf=$OPTARG ;;
    b) chat=$OPTARG ;;
    t) tide=$OPTARG ;;
    n) threads=$OPTARG ;;
    r) rounds=$OPTARG ;;
    *)
        sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 2
        ;;
    esac
done
for f in "$model" "$gguf" "$chat" "$tide"; do
    if [[ -z "$f" || ! -e "$f" ]]; then
        echo "run.sh: missing or absent: '${f}' (see -h)" >&2
        exit 2
    fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/tide-peer.XXXXXX")
trap 'rm -rf "$work"' EXIT
# 64 tokens with the tokenizer `tide mkmodel` writes.
prompt="The quick brown fox jumps over the lazy dog while the committee reviews the quarterly budget, and a small team of engineers"
printf '%s' "$prompt" >"$work/prompt.txt"
cat >"$work/tide.ini" <<EOF
[model]
plugin = model-llada2
path = $model
[backend]
device = backend-cpu-onednn
host = backend-cpu-onednn
[backend-cpu-onednn]
threads = $threads
[policy]
budget = -1
[generation]
block_length = 32
steps = 32
threshold = 0.95
temperature = 0
[output]
progress = false
stream = false
EOF

# gen_length -> "seconds forwards" of the generation (load excluded)
tide_run() {
    "$tide" run -c "$work/tide.ini" -f "$work/prompt.txt" --set generation.gen_length="$1" 2>&1 |
        sed -n 's/.*done: .* \([0-9]*\) forwards, \([0-9.]*\) s.*/\2 \1/p'
}
# max_new_tokens -> "seconds forwards" (chatllm's prompt + eval timings; the
# 1-block run stops after one block at 32 new tokens, the 3-block run at 100)
chat_run() {
    "$chat" -m "$gguf" --format completion -n "$threads" --batch_size 32 -t 0 \
        --set block_length 32 --set steps 32 --set threshold 0.95 --max_new_tokens "$1" \
        -p "$prompt" >"$work/c.out" 2>"$work/c.err"
    local s
    s=$(awk '/timings: prompt eval time/ {p = $6} /timings:        eval time/ {e = $5}
             END {print (p + e) / 1000}' "$work/c.out")
    echo "$s $(grep -c MEASURE "$work/c.err" || true)"
}

ntok=$("$tide" run -c "$work/tide.ini" -f "$work/prompt.txt" --set generation.gen_length=1 \
    --set generation.steps=1 2>&1 | sed -n 's/.*prompt: \([0-9]*\) tokens.*/\1/p')
echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
    "$(grep -qwE "avx512_?bf16" /proc/cpuinfo && echo AVX512-BF16 ||
        (grep -qw avx512f /proc/cpuinfo && echo 'AVX-512, no BF16' || echo 'AVX2, no AVX-512'))," \
    "$(nproc) CPUs; $threads threads; $("$tide" --version 2>/dev/null | head -1)"
echo "# checkpoint $model; prompt $ntok tokens (tide's tokenizer); block 32, steps 32, threshold 0.95"
echo "| round | tide 1 block: s / forwards | 3 blocks | tide ms/forward | chatllm 1 block | 3 blocks | chatllm ms/forward | tide / chatllm |"
echo "|---|---|---|---|---|---|---|---|"
for ((round = 1; round <= rounds; round++)); do
    read -r t1 f1 <<<"$(tide_run 32)"
    read -r t3 f3 <<<"$(tide_run 96)"
    read -r c1 g1 <<<"$(chat_run 32)"
    read -r c3 g3 <<<"$(chat_run 100)"
    if ((f3 <= f1 || g3 <= g1)); then
        echo "round $round: no forwards between 1 and 3 blocks (tide $f1 -> $f3, chatllm $g1 -> $g3);" \
            "is the chatllm binary instrumented (MEASURE lines)?" >&2
        exit 1
    fi
    awk -v r="$round" -v t1="$t1" -v f1="$f1" -v t3="$t3" -v f3="$f3" \
        -v c1="$c1" -v g1="$g1" -v c3="$c3" -v g3="$g3" 'BEGIN {
        tm = (t3 - t1) * 1000 / (f3 - f1); cm = (c3 - c1) * 1000 / (g3 - g1)
        printf "| %d | %.2f / %d | %.2f / %d | %.1f | %.2f / %d | %.2f / %d | %.1f | %.2f |\n",
            r, t1, f1, t3, f3, tm, c1, g1, c3, g3, cm, tm / cm }'
done
