#!/usr/bin/env bash
# tide against chatllm.cpp (bf16) side by side, in one run, on one checkpoint:
# ms per forward by difference between a 1-block and a 3-block generation
# (the prefill, the load and the first block cancel out), the same prompt
# length in tokens for both (chatllm's own count of the text; tide gets its
# tokenization of the same text cut or repeated to that many ids), same
# thread count, the engines alternated within each round (odd rounds tide
# first, even rounds chatllm first). ms per forward from counted forwards. chatllm.cpp is a peer built
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
#   -s SEED   chatllm's --seed (default 1): fixed, so its draws repeat
# Block 32, 32 steps and threshold 0.95 for both. tide decodes greedily.
# chatllm's LLaDA2 generate always samples (top-p sampler, whatever -t
# says; -t 0 leaves the logits unscaled, i.e. temperature 1): it runs with
# --top_k 0 --top_p 1, so the 0.95 threshold is checked against the full
# softmax probability, not a renormalised top-k/top-p mass, and with a
# fixed --seed. tide computes the output layer for the still-masked rows of
# a step only, chatllm for all 32 rows of the block: the table reports the
# rows each computes per step beside the ratio. Each engine's weights are read in before its timed region (tide
# scans them at load; chatllm loads them into memory).
set -euo pipefail

tide=build/tide
threads=2
rounds=3
seed=1
model= gguf= chat=
while getopts "m:g:b:t:n:r:s:h" o; do
    case "$o" in
    m) model=$OPTARG ;;
    g) gguf=$OPTARG ;;
    b) chat=$OPTARG ;;
    t) tide=$OPTARG ;;
    n) threads=$OPTARG ;;
    r) rounds=$OPTARG ;;
    s) seed=$OPTARG ;;
    *)
        sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'
        exit 2
        ;;
    esac
done
# chatllm's output (stdout) -> "seconds prompt_tokens": prompt + eval timings
chat_parse() {
    awk '/timings: prompt eval time/ {p = $6; n = $9} /timings:        eval time/ {e = $5}
         END {print (p + e) / 1000, n + 0}' "$1"
}
# PEER_PARSE_ONLY=FILE run.sh: print what chat_parse reads from a saved
# chatllm stdout, to check the parsing without running chatllm.
if [[ "${PEER_PARSE_ONLY:-}" ]]; then
    chat_parse "$PEER_PARSE_ONLY"
    exit 0
fi
for f in "$model" "$gguf" "$chat" "$tide"; do
    if [[ -z "$f" || ! -e "$f" ]]; then
        echo "run.sh: missing or absent: '${f}' (see -h)" >&2
        exit 2
    fi
done

work=$(mktemp -d "${TMPDIR:-/tmp}/tide-peer.XXXXXX")
trap 'rm -rf "$work"' EXIT
# 64 tokens with the tokenizer `tide mkmodel` writes (chatllm's makes more).
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

# gen_length -> "seconds forwards rows steps" of the generation (load
# excluded): rows, the output-layer rows its steps computed (the masked rows
# of each step: committed + masks_left of [output] metrics).
tide_run() {
    rm -f "$work/m.jsonl"
    "$tide" run -c "$work/tide.ini" --ids "$ids" --set generation.gen_length="$1" \
        --set output.metrics="$work/m.jsonl" >"$work/t.out" 2>&1
    local sf
    sf=$(sed -n 's/.*done: .* \([0-9]*\) forwards, \([0-9.]*\) s.*/\2 \1/p' "$work/t.out")
    echo "$sf $(awk -F'[:,]' '/"type":"step"/ {
        for (i = 1; i < NF; i++) { if ($i ~ /"committed"/) c = $(i + 1); if ($i ~ /"masks_left"/) m = $(i + 1) }
        r += c + m; n++ } END {print r + 0, n + 0}' "$work/m.jsonl")"
}
# max_new_tokens -> "seconds forwards" (the 1-block run stops after one block
# at 32 new tokens, the 3-block run at 100). Every step forwards the whole
# block and computes all 32 rows of the output layer.
chat_run() {
    "$chat" -m "$gguf" --format completion -n "$threads" --batch_size 32 -t 0 --top_k 0 \
        --top_p 1 --seed "$seed" --set block_length 32 --set steps 32 --set threshold 0.95 \
        --max_new_tokens "$1" -p "$prompt" >"$work/c.out" 2>"$work/c.err"
    read -r s _ <<<"$(chat_parse "$work/c.out")"
    echo "$s $(grep -c MEASURE "$work/c.err" || true)"
}

# The prompt length as chatllm counts it (one short run), and tide's ids of
# the same text cut or repeated to that length.
"$chat" -m "$gguf" --format completion -n "$threads" --batch_size 32 --max_new_tokens 1 -p "$prompt" \
    >"$work/c.out" 2>"$work/c.err" || true
# LLaDA2's prompt count is the prefill (whole blocks only); the rest of the
# prompt sits in the first block, whose eval count is 32 minus that rest.
ntok=$(awk '/timings: prompt eval time/ {n = $9} /timings:        eval time/ {e = $8}
    END {if (e > 0) print n + 32 - e}' "$work/c.out")
ttok=$("$tide" tokenize --model "$model" --json "$prompt" | sed -n '1s/.*\[\(.*\)\].*/\1/p' | tr -d ' ')
if [[ -z "$ntok" || "$ntok" -lt 1 || -z "$ttok" ]]; then
    echo "run.sh: could not count the prompt's tokens (chatllm: '$ntok', tide: '$ttok')" >&2
    exit 1
fi
ids=$(awk -v n="$ntok" -v t="$ttok" 'BEGIN {
    k = split(t, a, ","); s = a[1]; for (i = 2; i <= n; i++) s = s "," a[(i - 1) % k + 1]; print s }')
echo "# CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
    "$(grep -qwE "avx512_?bf16" /proc/cpuinfo && echo AVX512-BF16 ||
        (grep -qw avx512f /proc/cpuinfo && echo 'AVX-512, no BF16' || echo 'AVX2, no AVX-512'))," \
    "$(nproc) CPUs; $threads threads; $("$tide" --version 2>/dev/null | head -1)"
echo "# checkpoint $model; prompt $ntok tokens for both (chatllm's count; tide's ids of the text" \
    "$(awk -F, '{print NF}' <<<"$ttok") tokens, repeated or cut); block 32, steps 32, threshold 0.95"
echo "# tide greedy; chatllm samples (its LLaDA2 generate forces top-p): temperature 1," \
    "top_k 0, top_p 1 (no renormalisation), seed $seed"
echo "# output-layer rows per step: tide the block's masked rows (average shown), chatllm all 32"
echo "| round | load | order | tide 1 block: s / forwards | 3 blocks | tide ms/forward | chatllm 1 block | 3 blocks | chatllm ms/forward | tide / chatllm | rows/step tide : chatllm |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for ((round = 1; round <= rounds; round++)); do
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    if ((round % 2)); then
        order="tide first"
        read -r t1 f1 _ _ <<<"$(tide_run 32)"
        read -r c1 g1 <<<"$(chat_run 32)"
        read -r t3 f3 rows nsteps <<<"$(tide_run 96)"
        read -r c3 g3 <<<"$(chat_run 100)"
    else
        order="chatllm first"
        read -r c1 g1 <<<"$(chat_run 32)"
        read -r t1 f1 _ _ <<<"$(tide_run 32)"
        read -r c3 g3 <<<"$(chat_run 100)"
        read -r t3 f3 rows nsteps <<<"$(tide_run 96)"
    fi
    if ((f3 <= f1 || g3 <= g1)); then
        echo "round $round: no forwards between 1 and 3 blocks (tide $f1 -> $f3, chatllm $g1 -> $g3);" \
            "is the chatllm binary instrumented (MEASURE lines)?" >&2
        exit 1
    fi
    awk -v r="$round" -v t1="$t1" -v f1="$f1" -v t3="$t3" -v f3="$f3" -v ld="$load" \
        -v o="$order" -v rows="$rows" -v ns="$nsteps" \
        -v c1="$c1" -v g1="$g1" -v c3="$c3" -v g3="$g3" 'BEGIN {
        tm = (t3 - t1) * 1000 / (f3 - f1); cm = (c3 - c1) * 1000 / (g3 - g1)
        printf "| %d | %s | %s | %.2f / %d | %.2f / %d | %.1f | %.2f / %d | %.2f / %d | %.1f | %.2f | %.1f : 32 |\n",
            r, ld, o, t1, f1, t3, f3, tm, c1, g1, c3, g3, cm, tm / cm, ns ? rows / ns : 0 }'
done
