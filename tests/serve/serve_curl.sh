#!/bin/sh
# `tide serve` against curl, one case per ctest test (see CMakeLists.txt):
#   errors      every bad request gets a 4xx with an OpenAI-style error
#               naming the field; good ones get 200
#   auth        [serve] api_key and TIDE_API_KEY: Bearer required, /health open
#   body_limit  bodies over [serve] max_body get 413 (with and without a
#               Content-Length)
#   queue_full  past [serve] max_queue: 503 with Retry-After
#   disconnect  a client that goes away stops its generation at the next step
#   shutdown    SIGTERM/SIGINT: waiting requests get 503, the running one is
#               cancelled after shutdown_timeout, [output] metrics is written,
#               exit 0
#   llada_moe   LLaDA-MoE (decoder llada, whole blocks, steps shared among
#               them): any max_tokens works, with the configured steps per
#               block
# Environment: TIDE_BIN (the tide binary), TIDE_SOURCE_DIR. Loopback only.
set -u
case=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tide-serve-curl.XXXXXX")
pid=
bg=
fails=0

cleanup() {
    [ -n "$bg" ] && kill $bg 2>/dev/null
    [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}

# start_server [--set ...]: a server on a free port of 127.0.0.1 ($base), of
# config/$config.ini (default llada2-tiny: its model is "tiny").
start_server() {
    : >"$tmp/log"
    local cfg="$TIDE_SOURCE_DIR/config/${config:-llada2-tiny}.ini"
    # [model] create makes a checkpoint only at its file's own path unless the
    # command line asks: name the preset the configuration creates.
    local preset
    preset=$(sed -n 's/^create *= *\([A-Za-z0-9_-]*\).*/\1/p' "$cfg")
    "$TIDE_BIN" serve -c "$cfg" --set "model.path=$tmp/${config:-tiny}" \
        --set "model.create=${preset:-tiny}" --set output.progress=false --port 0 "$@" \
        >"$tmp/log" 2>&1 &
    pid=$!
    port=
    for _ in $(seq 1 600); do
        port=$(sed -n 's|.*listening on http://127.0.0.1:\([0-9]*\).*|\1|p' "$tmp/log")
        [ -n "$port" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if [ -z "$port" ]; then
        echo "the server did not start:"
        cat "$tmp/log"
        exit 1
    fi
    base="http://127.0.0.1:$port"
}

# stop_server [SIGNAL]: it must exit 0 and its log must hold no sanitizer report.
stop_server() {
    kill -"${1:-TERM}" "$pid"
    wait "$pid"
    rc=$?
    [ "$rc" -eq 0 ] || fail "tide serve exited $rc after SIG${1:-TERM}"
    if grep -q -E "AddressSanitizer|LeakSanitizer|runtime error:" "$tmp/log"; then
        fail "sanitizer report in the server's log"
        cat "$tmp/log"
    fi
    pid=
}

# req METHOD PATH [curl args...]: sets $status, body in $tmp/body, headers in $tmp/head.
req() {
    m=$1
    p=$2
    shift 2
    status=$(curl -s -m 120 -X "$m" -o "$tmp/body" -D "$tmp/head" -w '%{http_code}' "$@" \
        "$base$p")
}

# expect_error NAME STATUS PARAM MESSAGE PATH JSON: POST JSON; the answer
# must be STATUS with "param": PARAM (null for none) and MESSAGE in it.
expect_error() {
    name=$1
    want=$2
    param=$3
    msg=$4
    path=$5
    req POST "$path" -H 'Content-Type: application/json' --data-binary "$6"
    [ "$status" = "$want" ] || fail "$name: status $status, expected $want: $(cat "$tmp/body")"
    if [ "$param" = null ]; then
        grep -q '"param":null' "$tmp/body" || fail "$name: param is not null: $(cat "$tmp/body")"
    else
        grep -q "\"param\":\"$param\"" "$tmp/body" ||
            fail "$name: param is not $param: $(cat "$tmp/body")"
    fi
    grep -q -F "$msg" "$tmp/body" || fail "$name: no '$msg' in: $(cat "$tmp/body")"
    grep -q '"error":{' "$tmp/body" || fail "$name: not an OpenAI error object"
}

# metric NAME: its value on /metrics (first sample whose line starts with NAME).
metric() {
    curl -s -m 10 "$base/metrics" | awk -v n="$1" 'index($0, n) == 1 { print $NF; exit }'
}

wait_metric() { # NAME VALUE [tries]
    for _ in $(seq 1 "${3:-300}"); do
        [ "$(metric "$1")" = "$2" ] && return 0
        sleep 0.1
    done
    return 1
}

LONG='{"prompt":"Tell me a long story","max_tokens":4000,"steps":32}'

case_errors() {
    # The command line: --help, usage and configuration errors exit 2.
    "$TIDE_BIN" serve --help >"$tmp/help" || fail "serve --help exited $?"
    grep -q "POST /v1/chat/completions" "$tmp/help" || fail "serve --help lacks the routes"
    "$TIDE_BIN" serve --bogus >/dev/null 2>&1
    [ $? -eq 2 ] || fail "serve --bogus: not exit 2"
    "$TIDE_BIN" serve --set serve.port=70000 >"$tmp/err" 2>&1
    [ $? -eq 2 ] && grep -q "port" "$tmp/err" || fail "serve.port=70000: $(cat "$tmp/err")"
    "$TIDE_BIN" serve --set serve.max_quue=3 >"$tmp/err" 2>&1
    [ $? -eq 2 ] && grep -q "max_queue" "$tmp/err" || fail "a misspelt key: $(cat "$tmp/err")"
    start_server
    # The port is taken: a runtime failure (exit 1) naming the address.
    "$TIDE_BIN" serve -c "$TIDE_SOURCE_DIR/config/llada2-tiny.ini" --set "model.path=$tmp/tiny" \
        --port "$port" >"$tmp/err" 2>&1
    [ $? -eq 1 ] && grep -q "cannot listen on 127.0.0.1:$port" "$tmp/err" ||
        fail "a taken port: $(cat "$tmp/err")"
    C=/v1/completions
    H=/v1/chat/completions
    expect_error malformed 400 null "malformed JSON" $C '{"prompt": "a",'
    expect_error not_object 400 null "must be a JSON object" $C '["prompt"]'
    expect_error empty_body 400 null "malformed JSON" $C ''
    expect_error no_prompt 400 prompt "'prompt' is required" $C '{"max_tokens":4}'
    expect_error empty_prompt 400 prompt "'prompt' is empty" $C '{"prompt":""}'
    expect_error prompt_type 400 prompt "must be a string" $C '{"prompt":7}'
    expect_error max_tokens_type 400 max_tokens "must be an integer, not a string" $C \
        '{"prompt":"a","max_tokens":"16"}'
    expect_error temperature_type 400 temperature "must be a number" $C \
        '{"prompt":"a","temperature":[1]}'
    expect_error stream_type 400 stream "must be a boolean" $C '{"prompt":"a","stream":1}'
    expect_error stop_type 400 stop "must be a string or an array" $C '{"prompt":"a","stop":{}}'
    expect_error beyond_context 400 max_tokens "beyond the model's context" $C \
        '{"prompt":"a","max_tokens":100000}'
    # Fits alone, not with the prompt (checked by the worker, after tokenizing).
    ids=$(yes 5 | head -n 4000 | paste -sd, -)
    expect_error prompt_plus_max 400 max_tokens "beyond the model's context" $C \
        "{\"prompt\":[$ids],\"max_tokens\":200}"
    ids=$(yes 5 | head -n 4090 | paste -sd, -)
    expect_error prompt_too_long 400 prompt "beyond the model's context" $C "{\"prompt\":[$ids]}"
    expect_error block_length 400 block_length "'block_length' must be 32" $C \
        '{"prompt":"a","block_length":16}'
    expect_error logprobs 400 logprobs "not supported" $C '{"prompt":"a","logprobs":5}'
    expect_error n 400 n "not supported" $C '{"prompt":"a","n":3}'
    expect_error chat_no_messages 400 messages "'messages' is required" $H '{"prompt":"a"}'
    expect_error chat_role 400 "messages\[1\].role" "must be 'system', 'user' or 'assistant'" $H \
        '{"messages":[{"role":"system","content":"s"},{"role":"tool","content":"u"}]}'
    expect_error unknown_model 404 model "the model 'gpt-4' is not served here (this server serves 'tiny')" \
        $C '{"prompt":"a","model":"gpt-4"}'
    grep -q '"code":"model_not_found"' "$tmp/body" || fail "unknown model: $(cat "$tmp/body")"
    expect_error chat_empty 400 "messages\[0\].content" "is empty" $H \
        '{"messages":[{"role":"user","content":""}]}'
    expect_error bad_utf8 400 null "malformed JSON" $C "$(printf '{"prompt":"\377"}')"
    expect_error detok 400 tokens "token ids" /detokenize '{"tokens":"abc"}'

    req GET /v1/nowhere
    [ "$status" = 404 ] || fail "unknown route: $status"
    grep -q '"code":"not_found"' "$tmp/body" || fail "404 body: $(cat "$tmp/body")"
    req GET /v1/completions
    [ "$status" = 405 ] || fail "GET /v1/completions: $status"
    grep -qi '^Allow: POST' "$tmp/head" || fail "405 without Allow: POST"
    req DELETE /health
    [ "$status" = 405 ] || fail "DELETE /health: $status"

    # What works: health, models, metrics, a completion, a chat, a stream.
    req GET /health
    [ "$status" = 200 ] && grep -q '"ok"' "$tmp/body" || fail "/health: $status"
    req GET /v1/models
    [ "$status" = 200 ] && grep -q '"id":"tiny"' "$tmp/body" || fail "/v1/models: $(cat "$tmp/body")"
    req GET /v1/models/tiny
    [ "$status" = 200 ] || fail "/v1/models/tiny: $status"
    req GET /v1/models/other
    [ "$status" = 404 ] || fail "/v1/models/other: $status"
    req POST /v1/completions -d '{"prompt":"Hello","max_tokens":8,"steps":4}'
    [ "$status" = 200 ] || fail "completion: $status $(cat "$tmp/body")"
    grep -q '"completion_tokens":8' "$tmp/body" || fail "completion usage: $(cat "$tmp/body")"
    grep -q '"tide":{"steps":4' "$tmp/body" || fail "completion tide object: $(cat "$tmp/body")"
    req POST /v1/chat/completions -d '{"messages":[{"role":"user","content":"Hi"}],"max_tokens":4}'
    [ "$status" = 200 ] && grep -q '"role":"assistant"' "$tmp/body" ||
        fail "chat: $status $(cat "$tmp/body")"
    req POST /v1/chat/completions -d '{"model":"tiny","max_tokens":4,"messages":[{"role":"system",
        "content":"Be brief."},{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"},
        {"role":"user","content":"More"}]}'
    [ "$status" = 200 ] && grep -q '"role":"assistant"' "$tmp/body" ||
        fail "chat with a system message and turns: $status $(cat "$tmp/body")"
    req POST /v1/completions -d '{"prompt":"Hello","max_tokens":40,"steps":2,"stream":true}'
    [ "$status" = 200 ] || fail "stream: $status"
    grep -qi '^Content-Type: text/event-stream' "$tmp/head" || fail "stream content type"
    [ "$(grep -c '^data: {' "$tmp/body")" -eq 3 ] ||
        fail "stream: expected 3 chunks (2 blocks, then the finish): $(cat "$tmp/body")"
    [ "$(tail -n 2 "$tmp/body" | head -n 1)" = "data: [DONE]" ] || fail "stream does not end with [DONE]"
    req GET /metrics
    grep -qi '^Content-Type: text/plain; version=0.0.4' "$tmp/head" || fail "metrics content type"
    grep -q 'tide_http_requests_total{endpoint="completions",status="400"}' "$tmp/body" ||
        fail "metrics lack the 400s"
    grep -q '^tide_layer_hit_rate{layer="2"} ' "$tmp/body" || fail "metrics lack per-layer hit rate"
    stop_server
}

case_auth() {
    start_server --set serve.api_key=sekret
    req GET /health
    [ "$status" = 200 ] || fail "/health needs no key: $status"
    req GET /v1/models
    [ "$status" = 401 ] || fail "no key: $status"
    grep -q '"code":"invalid_api_key"' "$tmp/body" || fail "401 body: $(cat "$tmp/body")"
    grep -qi '^WWW-Authenticate: Bearer' "$tmp/head" || fail "401 without WWW-Authenticate"
    req GET /v1/models -H 'Authorization: Bearer wrong'
    [ "$status" = 401 ] || fail "wrong key: $status"
    req GET /v1/models -H 'Authorization: Bearer sekre'
    [ "$status" = 401 ] || fail "a prefix of the key: $status"
    req GET /metrics
    [ "$status" = 401 ] || fail "/metrics without key: $status"
    req POST /v1/completions -d '{"prompt":"a","max_tokens":4}'
    [ "$status" = 401 ] || fail "completion without key: $status"
    req POST /v1/completions -H 'Authorization: Bearer sekret' -d '{"prompt":"a","max_tokens":4}'
    [ "$status" = 200 ] || fail "completion with key: $status"
    stop_server
    TIDE_API_KEY=fromenv start_server
    req GET /v1/models
    [ "$status" = 401 ] || fail "TIDE_API_KEY: no key: $status"
    req GET /v1/models -H 'Authorization: Bearer fromenv'
    [ "$status" = 200 ] || fail "TIDE_API_KEY: with key: $status"
    stop_server
}

case_body_limit() {
    start_server --set serve.max_body=1KiB
    big=$(printf '{"prompt":"%s"}' "$(head -c 2000 /dev/zero | tr '\0' a)")
    expect_error too_large 413 null "at most 1024" /v1/completions "$big"
    printf '%s' "$big" >"$tmp/big.json"
    req POST /v1/completions -H 'Transfer-Encoding: chunked' --data-binary @"$tmp/big.json"
    [ "$status" = 413 ] || fail "chunked body over max_body: $status"
    req POST /v1/completions -d '{"prompt":"small","max_tokens":4}'
    [ "$status" = 200 ] || fail "a small body after the big ones: $status"
    stop_server
}

case_queue_full() {
    # One prompt decoded at a time, so that the second request waits.
    start_server --set serve.max_queue=1 --set serve.max_batch=1
    curl -s -m 300 "$base/v1/completions" -d "$LONG" >/dev/null &
    a=$!
    wait_metric tide_running_requests 1 || fail "the long request did not start"
    curl -s -m 300 "$base/v1/completions" -d "$LONG" >/dev/null &
    b=$!
    bg="$a $b"
    wait_metric tide_queue_requests 1 || fail "the second request did not wait"
    req POST /v1/completions -d '{"prompt":"a","max_tokens":4}'
    [ "$status" = 503 ] || fail "queue full: $status $(cat "$tmp/body")"
    grep -q '"code":"queue_full"' "$tmp/body" || fail "503 body: $(cat "$tmp/body")"
    grep -qi '^Retry-After: [0-9]' "$tmp/head" || fail "503 without Retry-After"
    kill $a $b 2>/dev/null
    wait $a $b 2>/dev/null
    bg=
    wait_metric tide_running_requests 0 || fail "the cancelled requests still run"
    req POST /v1/completions -d '{"prompt":"a","max_tokens":4}'
    [ "$status" = 200 ] || fail "after the queue drained: $status"
    stop_server
}

case_disconnect() {
    start_server
    for stream in false true; do
        body=$(printf '{"prompt":"Tell me a long story","max_tokens":4000,"steps":32,"stream":%s}' $stream)
        curl -s -m 300 "$base/v1/completions" -d "$body" >/dev/null &
        a=$!
        bg=$a
        wait_metric tide_running_requests 1 || fail "stream=$stream: did not start"
        kill $a
        wait $a 2>/dev/null
        bg=
        # A whole generation takes many seconds; stopping at the next step
        # takes one step plus the 50 ms the connection looks at its socket.
        wait_metric tide_running_requests 0 50 || fail "stream=$stream: still running 5 s after the client left"
        s1=$(metric tide_denoising_steps_total)
        sleep 0.5
        s2=$(metric tide_denoising_steps_total)
        [ "$s1" = "$s2" ] || fail "stream=$stream: steps went on after the cancel ($s1 -> $s2)"
    done
    [ "$(metric 'tide_cancelled_total{reason="disconnect"}')" = 2 ] ||
        fail "cancelled_total: $(metric 'tide_cancelled_total{reason="disconnect"}')"
    req POST /v1/completions -d '{"prompt":"a","max_tokens":4}'
    [ "$status" = 200 ] || fail "a request after the disconnects: $status"
    stop_server
}

case_shutdown() {
    # An idle server: SIGINT, exit 0.
    start_server
    stop_server INT
    # A busy one: the running stream is cancelled after shutdown_timeout, the
    # waiting request gets 503, metrics are written.
    start_server --set serve.shutdown_timeout=1 --set "output.metrics=$tmp/metrics.jsonl" \
        --set serve.max_batch=1 # so that the second request waits
    curl -s -N -m 300 "$base/v1/completions" \
        -d '{"prompt":"Tell me a long story","max_tokens":4000,"steps":32,"stream":true}' \
        >"$tmp/a.out" &
    a=$!
    wait_metric tide_running_requests 1 || fail "the long request did not start"
    curl -s -m 300 -o "$tmp/b.out" -w '%{http_code}' "$base/v1/completions" -d "$LONG" \
        >"$tmp/b.status" &
    b=$!
    bg="$a $b"
    wait_metric tide_queue_requests 1 || fail "the second request did not wait"
    t0=$(date +%s)
    stop_server TERM
    t1=$(date +%s)
    [ $((t1 - t0)) -le 30 ] || fail "shutdown took $((t1 - t0)) s with shutdown_timeout = 1"
    wait $a $b
    bg=
    [ "$(cat "$tmp/b.status")" = 503 ] || fail "the waiting request: $(cat "$tmp/b.status")"
    grep -q '"code":"shutting_down"' "$tmp/b.out" || fail "503 body: $(cat "$tmp/b.out")"
    grep -q '"code":"cancelled"' "$tmp/a.out" || fail "the running stream was not ended with an error event"
    grep -q '"type":"layer"' "$tmp/metrics.jsonl" 2>/dev/null ||
        fail "[output] metrics was not written"
    grep -q 'stopped after' "$tmp/log" || fail "no summary line"
}

case_llada_moe() {
    # gen_length = 64, block_length = 32, steps = 32: 16 steps per block. The
    # decoder runs every step of every block, so steps = 16 x blocks.
    config=llada-moe-tiny start_server
    for mt in 16 96 1 33 64; do
        blocks=$(((mt + 31) / 32))
        req POST /v1/completions -d "{\"prompt\":\"Hello\",\"max_tokens\":$mt}"
        [ "$status" = 200 ] || fail "max_tokens $mt: $status $(cat "$tmp/body")"
        grep -q "\"completion_tokens\":$mt," "$tmp/body" ||
            grep -q '"finish_reason":"stop"' "$tmp/body" ||
            fail "max_tokens $mt: not $mt tokens: $(cat "$tmp/body")"
        grep -q "\"tide\":{\"steps\":$((16 * blocks)),\"forwards\":[0-9]*,\"blocks\":$blocks," \
            "$tmp/body" || fail "max_tokens $mt: not $blocks blocks of 16 steps: $(cat "$tmp/body")"
    done
    # A request's steps are per block too.
    req POST /v1/completions -d '{"prompt":"Hello","max_tokens":96,"steps":5}'
    [ "$status" = 200 ] && grep -q '"tide":{"steps":15,' "$tmp/body" ||
        fail "96 tokens, 5 steps per block: $status $(cat "$tmp/body")"
    stop_server
}

case "$case" in
errors | auth | body_limit | queue_full | disconnect | shutdown | llada_moe) "case_$case" ;;
*)
    echo "usage: $0 errors|auth|body_limit|queue_full|disconnect|shutdown|llada_moe"
    exit 2
    ;;
esac
if [ "$fails" -ne 0 ]; then
    echo "$fails check(s) failed; the server's log:"
    cat "$tmp/log"
    exit 1
fi
echo "ok: serve $case"
